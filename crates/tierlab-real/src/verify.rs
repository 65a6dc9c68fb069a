//! Data verification: every 512-byte sector a host write carries is
//! stamped with its volume sector number, a version and a checksum; every
//! host read checks what it got against the version the volume must hold.
//!
//! Sector layout (little endian): `magic u64 | sector u64 | version u64 |
//! checksum u64 | 480 bytes of filler derived from (sector, version)`; the
//! checksum is FNV-1a 64 over every other byte.
//!
//! Exactness needs an unambiguous expected version, so in verification
//! mode the executor never runs two host IOs that overlap while one of
//! them writes (the later one waits; docs/real.md). A read then must find
//! exactly the version of the last completed write of each sector; a sector
//! never written in this run (or trimmed since) is not checked.

use std::collections::HashMap;

pub const SECTOR: u64 = 512;
const MAGIC: u64 = 0x544C_5645_5249_4659; // "TLVERIFY"

fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

fn checksum(sector: &[u8]) -> u64 {
    let h = fnv(&sector[..24], 0xCBF2_9CE4_8422_2325);
    fnv(&sector[32..], h)
}

/// Fills `buf` (a whole number of sectors starting at `first_sector`) with
/// stamped sectors of `version`.
pub fn stamp(buf: &mut [u8], first_sector: u64, version: u64) {
    for (i, s) in buf.chunks_exact_mut(SECTOR as usize).enumerate() {
        let lba = first_sector + i as u64;
        s[..8].copy_from_slice(&MAGIC.to_le_bytes());
        s[8..16].copy_from_slice(&lba.to_le_bytes());
        s[16..24].copy_from_slice(&version.to_le_bytes());
        // xorshift filler: cheap, and differs for every (sector, version).
        let mut x = lba.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.rotate_left(17) ^ 1;
        for w in s[32..].chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes());
        }
        let c = checksum(s);
        s[24..32].copy_from_slice(&c.to_le_bytes());
    }
}

/// What a sector holds, if it is a stamped one: (sector, version). Public
/// so a test can read a backing file after a run and tell stamped data
/// from zeros or garbage.
pub fn read_stamp(s: &[u8]) -> Result<(u64, u64), &'static str> {
    let word = |i: usize| u64::from_le_bytes(s[i..i + 8].try_into().expect("8 bytes"));
    if word(0) != MAGIC {
        return Err("not a stamped sector (no magic)");
    }
    if word(24) != checksum(s) {
        return Err("checksum mismatch (torn or corrupted sector)");
    }
    Ok((word(8), word(16)))
}

/// A verification failure: which sector, what was expected, what was found.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub sector: u64,
    pub expected_version: u64,
    pub found: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "data verification failed at byte offset {} (sector {}): expected version {}, found {}",
            self.sector * SECTOR,
            self.sector,
            self.expected_version,
            self.found
        )
    }
}

/// The versions the volume must hold.
#[derive(Default)]
pub struct Verifier {
    versions: HashMap<u64, u64>,
    next_version: u64,
    pub sectors_checked: u64,
    pub sectors_unverified: u64,
}

impl Verifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh version for a write.
    pub fn next_version(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// A write of `version` to `[first, first + n)` completed.
    pub fn written(&mut self, first: u64, n: u64, version: u64) {
        for s in first..first + n {
            self.versions.insert(s, version);
        }
    }

    /// A trim: the sectors' content is undefined from now on.
    pub fn trimmed(&mut self, first: u64, n: u64) {
        for s in first..first + n {
            self.versions.remove(&s);
        }
    }

    /// Checks a completed read of `buf` at `first`.
    pub fn check(&mut self, buf: &[u8], first: u64) -> Result<(), Mismatch> {
        for (i, s) in buf.chunks_exact(SECTOR as usize).enumerate() {
            let lba = first + i as u64;
            let Some(&want) = self.versions.get(&lba) else {
                self.sectors_unverified += 1;
                continue;
            };
            self.sectors_checked += 1;
            let found = match read_stamp(s) {
                Ok((l, v)) if l == lba && v == want => continue,
                Ok((l, v)) if l != lba => format!("the data of sector {l} (version {v})"),
                Ok((_, v)) => format!("version {v}"),
                Err(why) => why.to_string(),
            };
            return Err(Mismatch {
                sector: lba,
                expected_version: want,
                found,
            });
        }
        Ok(())
    }

    /// Every written sector, as sorted [first, end) runs of at most
    /// `max_sectors` (the final scan reads these back).
    pub fn written_runs(&self, max_sectors: u64) -> Vec<(u64, u64)> {
        let mut s: Vec<u64> = self.versions.keys().copied().collect();
        s.sort_unstable();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for x in s {
            match runs.last_mut() {
                Some((a, e)) if *e == x && x - *a < max_sectors => *e = x + 1,
                _ => runs.push((x, x + 1)),
            }
        }
        runs
    }

    pub fn written_sectors(&self) -> usize {
        self.versions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamped_sectors_verify_and_every_kind_of_damage_is_named() {
        let mut v = Verifier::new();
        let mut buf = vec![0u8; 4 * SECTOR as usize];
        let ver = v.next_version();
        stamp(&mut buf, 100, ver);
        v.written(100, 4, ver);
        assert_eq!(v.check(&buf, 100), Ok(()));
        assert_eq!(v.sectors_checked, 4);
        // Stale: an older version of the same sector.
        let mut old = buf.clone();
        stamp(&mut old[..512], 100, ver - 1 + 100);
        let newer = v.next_version();
        v.written(100, 1, newer);
        let e = v.check(&buf[..512], 100).unwrap_err();
        assert_eq!((e.sector, e.expected_version), (100, newer));
        assert_eq!(e.found, format!("version {ver}"));
        // Misplaced: sector 101's data read back at 102.
        let e = v.check(&buf[512..1024], 102).unwrap_err();
        assert!(e.found.contains("sector 101"), "{}", e.found);
        // Torn: one flipped byte.
        let mut torn = buf.clone();
        torn[1024 + 300] ^= 1;
        let e = v.check(&torn[1024..1536], 102).unwrap_err();
        assert!(e.found.contains("checksum"), "{}", e.found);
        // Zeros where data was written.
        let e = v.check(&[0u8; 512], 103).unwrap_err();
        assert!(e.found.contains("no magic"));
        assert!(e.to_string().contains("byte offset 52736"), "{e}");
        // Never written: not checked.
        assert_eq!(v.check(&[0u8; 512], 7), Ok(()));
        assert_eq!(v.sectors_unverified, 1);
        v.trimmed(100, 2);
        assert_eq!(v.written_runs(1000), vec![(102, 104)]);
        v.written(104, 10, 9);
        assert_eq!(v.written_runs(4), vec![(102, 106), (106, 110), (110, 114)]);
    }
}
