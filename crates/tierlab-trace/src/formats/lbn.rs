//! Raw arrays of block numbers, as PyMimircache's binary reader and
//! libCacheSim's simplest binary traces keep them: little-endian `u32`
//! (`lbn32`) or `u64` (`lbn64`) values, nothing else — no header, no time,
//! no size, no operation. Each value is one 4 KiB read of block `lbn`
//! (offset `lbn × 4096`), so every distinct value is a distinct page at
//! the default page size, as each is a distinct object in those tools;
//! record `i` arrives at `i` µs (the order is all the trace has).

use crate::error::FieldError;
use crate::reader::{BinaryParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

/// The size of the block a value names, bytes.
pub const BLOCK_BYTES: u32 = 4096;

pub struct LbnParser {
    value_bytes: usize,
    index: u64,
}

impl LbnParser {
    /// `value_bytes`: 4 (`lbn32`) or 8 (`lbn64`).
    pub fn new(value_bytes: usize) -> Self {
        assert!(value_bytes == 4 || value_bytes == 8);
        LbnParser {
            value_bytes,
            index: 0,
        }
    }
}

impl BinaryParser for LbnParser {
    fn record_size(&self) -> usize {
        self.value_bytes
    }

    fn parse(&mut self, r: &[u8], _devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        let lbn = if self.value_bytes == 4 {
            u64::from(u32::from_le_bytes(r.try_into().expect("4 bytes")))
        } else {
            u64::from_le_bytes(r.try_into().expect("8 bytes"))
        };
        let offset_bytes = lbn.checked_mul(u64::from(BLOCK_BYTES)).ok_or_else(|| {
            FieldError::new(
                "lbn",
                lbn.to_string().as_bytes(),
                "a 4 KiB block number below 2^52",
            )
        })?;
        let time_ns = self.index * 1_000;
        self.index += 1;
        Ok(Parsed::Record(IoRecord {
            time_ns,
            offset_bytes,
            size_bytes: BLOCK_BYTES,
            device_id: 0,
            op: Op::Read,
            response_ns: None,
        }))
    }

    fn time_base(&self) -> TimeBase {
        TimeBase::Relative
    }
}

#[cfg(test)]
mod tests {
    use crate::reader::{ReadOptions, TraceReader};
    use crate::{Format, RecordStream};

    fn read(bytes: &[u8], format: &str) -> crate::Result<Vec<(u64, u64, u32)>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lbns.bin");
        std::fs::write(&path, bytes).unwrap();
        let options = ReadOptions {
            format: Some(format.parse::<Format>().unwrap()),
            ..ReadOptions::default()
        };
        let mut reader = TraceReader::open(&path, &options)?;
        let mut out = Vec::new();
        while let Some(r) = reader.next_record()? {
            out.push((r.time_ns, r.offset_bytes, r.size_bytes));
        }
        Ok(out)
    }

    #[test]
    fn values_become_4k_reads_in_order() {
        let values: [u32; 3] = [7, 0, u32::MAX];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            read(&bytes, "lbn32").unwrap(),
            vec![
                (0, 7 * 4096, 4096),
                (1_000, 0, 4096),
                (2_000, u64::from(u32::MAX) * 4096, 4096)
            ]
        );
        let bytes: Vec<u8> = [5u64, 1 << 40]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            read(&bytes, "lbn64").unwrap(),
            vec![(0, 5 * 4096, 4096), (1_000, (1 << 40) * 4096, 4096)]
        );
    }

    #[test]
    fn a_partial_value_and_a_huge_one_are_errors() {
        let e = read(&[1, 0, 0, 0, 9, 9], "lbn32").unwrap_err().to_string();
        assert!(e.contains("byte 4"), "{e}");
        let e = read(&u64::MAX.to_le_bytes(), "lbn64")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lbn") && e.contains("below 2^52"), "{e}");
    }
}
