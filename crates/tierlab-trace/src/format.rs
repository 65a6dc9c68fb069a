//! The trace formats tierlab reads and writes, and their names on the CLI.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// MSR Cambridge CSV (SNIA IOTTA 388).
    Msr,
    /// UMass Trace Repository SPC CSV.
    Umass,
    /// `blkparse` default text output.
    Blkparse,
    /// fio iolog, version 2 or 3 (from its header line).
    FioIolog,
    /// DiskSim/MQSim ASCII with arrival time in integer nanoseconds (MQSim).
    Disksim,
    /// Classic DiskSim ASCII with arrival time in (decimal) milliseconds.
    DisksimMs,
    /// LinnOS/Heimdall replayer text.
    Replayer,
    /// Tencent CBS CSV.
    Tencent,
    /// FlashNet profile CSV.
    Flashnet,
    /// SYSTOR '17 CSV.
    Systor,
    /// VMware VSCSI binary, v1 or v2 (CloudPhysics).
    Vscsi,
    /// ARC paper `.lis` traces.
    Arc,
    /// libCacheSim oracleGeneral binary.
    OracleGeneral,
    /// tierlab's native binary format (see docs/trace-formats.md).
    Native,
    /// Any delimited text with a column mapping (`ReadOptions::csv`).
    Csv,
    /// A raw array of little-endian u32 block numbers (4 KiB blocks).
    Lbn32,
    /// A raw array of little-endian u64 block numbers (4 KiB blocks).
    Lbn64,
}

impl Format {
    /// The format an output file's name implies, after any compression
    /// suffix (.gz/.bz2/.xz/.zst): .iolog → fio, .csv → MSR, .disksim →
    /// DiskSim, .tlt/.native → native; `None` for anything else.
    pub fn from_output_name(path: &std::path::Path) -> Option<Format> {
        let name = path.to_string_lossy().to_ascii_lowercase();
        let stem = ["gz", "bz2", "xz", "zst"]
            .iter()
            .find_map(|ext| name.strip_suffix(&format!(".{ext}")))
            .unwrap_or(&name);
        let by_ext = [
            (".iolog", Format::FioIolog),
            (".csv", Format::Msr),
            (".disksim", Format::Disksim),
            (".tlt", Format::Native),
            (".native", Format::Native),
        ];
        by_ext
            .iter()
            .find(|(ext, _)| stem.ends_with(ext))
            .map(|(_, f)| *f)
    }

    pub const ALL: [Format; 17] = [
        Format::Msr,
        Format::Umass,
        Format::Blkparse,
        Format::FioIolog,
        Format::Disksim,
        Format::DisksimMs,
        Format::Replayer,
        Format::Tencent,
        Format::Flashnet,
        Format::Systor,
        Format::Vscsi,
        Format::Arc,
        Format::OracleGeneral,
        Format::Native,
        Format::Csv,
        Format::Lbn32,
        Format::Lbn64,
    ];

    /// Formats tierlab can write.
    pub const WRITABLE: [Format; 4] = [
        Format::FioIolog,
        Format::Msr,
        Format::Disksim,
        Format::Native,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::Umass => "umass",
            Format::Blkparse => "blkparse",
            Format::FioIolog => "fio",
            Format::Disksim => "disksim",
            Format::DisksimMs => "disksim-ms",
            Format::Replayer => "replayer",
            Format::Tencent => "tencent",
            Format::Flashnet => "flashnet",
            Format::Systor => "systor",
            Format::Vscsi => "vscsi",
            Format::Arc => "arc",
            Format::OracleGeneral => "oracle",
            Format::Native => "native",
            Format::Csv => "csv",
            Format::Lbn32 => "lbn32",
            Format::Lbn64 => "lbn64",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Format::Msr => {
                "MSR Cambridge CSV: Timestamp(filetime),Hostname,DiskNumber,Type,Offset,Size,ResponseTime"
            }
            Format::Umass => {
                "UMass SPC CSV: ASU,LBA(sectors),Size(bytes),Opcode(r/w),Timestamp(s)[,...]"
            }
            Format::Blkparse => "blkparse default text output (D events, else Q)",
            Format::FioIolog => "fio iolog v2 or v3 (header `fio version N iolog`)",
            Format::Disksim => {
                "DiskSim/MQSim ASCII: arrival_ns device lba_sector size_sectors flags(1=read)"
            }
            Format::DisksimMs => {
                "classic DiskSim ASCII: arrival_ms device lba_sector size_sectors flags(1=read)"
            }
            Format::Replayer => {
                "replayer text: ts_ms device offset_bytes size_bytes op(1=read,0=write)"
            }
            Format::Tencent => {
                "Tencent CBS CSV: Timestamp(s),Offset(sectors),Size(sectors),IOType(0=read,1=write),VolumeID"
            }
            Format::Flashnet => {
                "FlashNet profile CSV: ts_record_ms,latency_us,io_type(1=read),size_bytes,offset_bytes,ts_submit_ms,size_after_replay"
            }
            Format::Systor => {
                "SYSTOR '17 CSV: Timestamp(s),Response(s),IOType(R/W),LUN,Offset,Size"
            }
            Format::Vscsi => "VSCSI v1 (32-byte) or v2 (40-byte) binary records",
            Format::Arc => "ARC .lis: start_block(512 B) nblocks ignored request_no",
            Format::OracleGeneral => {
                "libCacheSim oracleGeneral: 24-byte records u32 time_s, u64 obj_id, u32 size, i64 next_access_vtime"
            }
            Format::Native => "tierlab native binary (32-byte records, numpy-loadable)",
            Format::Csv => {
                "any delimited text, with the column mapping given (--csv-columns, e.g. time=2,op=3,size=4,lbn=5,header)"
            }
            Format::Lbn32 => {
                "raw little-endian u32 block numbers, nothing else: each a 4 KiB read, record i at i µs (never detected: give --format)"
            }
            Format::Lbn64 => {
                "raw little-endian u64 block numbers, nothing else: each a 4 KiB read, record i at i µs (never detected: give --format)"
            }
        }
    }

    pub fn is_writable(self) -> bool {
        Format::WRITABLE.contains(&self)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format name that is none of [`Format::ALL`] (nor an alias).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownFormat {
    /// The name as given.
    pub found: String,
}

impl fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
        write!(
            f,
            "unknown trace format {:?}{}; known formats: {}",
            self.found,
            crate::names::did_you_mean(&self.found, names.iter().copied()),
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownFormat {}

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        let alias = match lower.as_str() {
            "fio-iolog" | "iolog" => "fio",
            "mqsim" => "disksim",
            "spc" => "umass",
            "cbs" => "tencent",
            "systor17" => "systor",
            "lis" => "arc",
            "oraclegeneral" => "oracle",
            "tierlab" | "bin" => "native",
            other => other,
        };
        Format::ALL
            .iter()
            .copied()
            .find(|f| f.name() == alias)
            .ok_or_else(|| UnknownFormat {
                found: s.to_string(),
            })
    }
}
