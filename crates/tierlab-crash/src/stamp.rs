//! Host write data that says what it is: every 512-byte sector of a host
//! write carries the sector's volume address, the write's sequence number
//! and a pattern derived from both, so a sector read back after a crash
//! tells which write (if any) put it there, and a sector made of bytes no
//! host wrote (another sector's data, a torn or garbage sector, metadata)
//! is told apart from every real one.

pub const SECTOR_BYTES: usize = 512;

fn mix(lba: u64, seq: u64) -> u64 {
    let mut z =
        lba.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq.rotate_left(29) ^ 0x0074_6965_726c_6162;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` (whole sectors) with host write `seq`'s data for the
/// sectors starting at `first_sector`.
pub fn fill(buf: &mut [u8], first_sector: u64, seq: u64) {
    debug_assert_eq!(buf.len() % SECTOR_BYTES, 0);
    for (i, s) in buf.chunks_exact_mut(SECTOR_BYTES).enumerate() {
        let lba = first_sector + i as u64;
        s[0..8].copy_from_slice(&lba.to_le_bytes());
        s[8..16].copy_from_slice(&seq.to_le_bytes());
        let p = mix(lba, seq).to_le_bytes();
        for w in s[16..].chunks_exact_mut(8) {
            w.copy_from_slice(&p);
        }
    }
}

/// What a sector holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sector {
    /// All zeros: never written (or trimmed).
    Zeros,
    /// Host write `seq`'s data for this sector.
    Written { seq: u64 },
    /// Anything else: another sector's data (`lba` says whose, if it has a
    /// stamp), or bytes no host write produced.
    Foreign { lba: Option<u64> },
}

/// Reads the sector at volume address `lba` from its 512 bytes.
pub fn decode(sector: &[u8], lba: u64) -> Sector {
    debug_assert_eq!(sector.len(), SECTOR_BYTES);
    if sector.iter().all(|&b| b == 0) {
        return Sector::Zeros;
    }
    let at = u64::from_le_bytes(sector[0..8].try_into().unwrap());
    let seq = u64::from_le_bytes(sector[8..16].try_into().unwrap());
    let p = mix(at, seq).to_le_bytes();
    let intact = sector[16..].chunks_exact(8).all(|w| w == p);
    match (intact, at == lba) {
        (true, true) if seq > 0 => Sector::Written { seq },
        (true, _) => Sector::Foreign { lba: Some(at) },
        (false, _) => Sector::Foreign { lba: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sector_decodes_to_its_write_and_nothing_else() {
        let mut buf = vec![0u8; 3 * SECTOR_BYTES];
        fill(&mut buf, 10, 7);
        assert_eq!(decode(&buf[512..1024], 11), Sector::Written { seq: 7 });
        // The same bytes read at another address are another sector's.
        assert_eq!(
            decode(&buf[512..1024], 12),
            Sector::Foreign { lba: Some(11) }
        );
        // One flipped byte anywhere, or half of another write: garbage.
        let mut torn = buf[0..512].to_vec();
        torn[300] ^= 1;
        assert_eq!(decode(&torn, 10), Sector::Foreign { lba: None });
        let mut other = vec![0u8; SECTOR_BYTES];
        fill(&mut other, 10, 8);
        let mut mixed = buf[0..512].to_vec();
        mixed[256..].copy_from_slice(&other[256..]);
        assert_eq!(decode(&mixed, 10), Sector::Foreign { lba: None });
        assert_eq!(decode(&[0u8; 512], 10), Sector::Zeros);
    }
}
