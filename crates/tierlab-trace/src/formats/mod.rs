//! One file per trace format. Each parses one record; the drivers in
//! `reader.rs` do the streaming, error locations and `--skip-bad`.

pub mod arc;
pub mod blkparse;
pub mod csv;
pub mod disksim;
pub mod fio;
pub mod flashnet;
pub mod lbn;
pub mod msr;
pub mod native;
pub mod oracle;
pub mod replayer;
pub mod systor;
pub mod tencent;
pub mod umass;
pub mod vscsi;

use crate::format::Format;
use crate::reader::{BinaryParser, LineParser, ReadOptions};
use crate::record::DeviceTable;

pub enum AnyParser {
    Lines(Box<dyn LineParser>),
    Binary {
        parser: Box<dyn BinaryParser>,
        header_bytes: usize,
    },
    Invalid(String),
}

/// The parser for `format`; `head` is the first bytes of the decompressed
/// input (binary formats read their version or header from it).
pub fn parser_for(
    format: Format,
    head: &[u8],
    options: &ReadOptions,
    devices: &mut DeviceTable,
) -> AnyParser {
    match format {
        Format::Msr => AnyParser::Lines(Box::new(msr::MsrParser::default())),
        Format::Umass => AnyParser::Lines(Box::new(umass::UmassParser)),
        Format::Blkparse => AnyParser::Lines(Box::new(blkparse::BlkparseParser::new(
            options.blkparse_event,
        ))),
        Format::FioIolog => AnyParser::Lines(Box::new(fio::FioParser::default())),
        Format::Disksim => AnyParser::Lines(Box::new(disksim::DisksimParser::nanoseconds())),
        Format::DisksimMs => AnyParser::Lines(Box::new(disksim::DisksimParser::milliseconds())),
        Format::Replayer => AnyParser::Lines(Box::new(replayer::ReplayerParser)),
        Format::Tencent => AnyParser::Lines(Box::new(tencent::TencentParser)),
        Format::Flashnet => AnyParser::Lines(Box::new(flashnet::FlashnetParser::default())),
        Format::Systor => AnyParser::Lines(Box::new(systor::SystorParser)),
        Format::Arc => AnyParser::Lines(Box::new(arc::ArcParser)),
        Format::Vscsi => match vscsi::VscsiParser::from_head(head) {
            Some(parser) => {
                devices.intern("0");
                AnyParser::Binary {
                    parser: Box::new(parser),
                    header_bytes: 0,
                }
            }
            None => AnyParser::Invalid(
                "not a VSCSI trace: the version field of the first records is neither 1.x (v1, \
                 32-byte records) nor 2.x (v2, 40-byte records)"
                    .into(),
            ),
        },
        Format::OracleGeneral => {
            devices.intern("0");
            AnyParser::Binary {
                parser: Box::new(oracle::OracleParser),
                header_bytes: 0,
            }
        }
        Format::Csv => match &options.csv {
            Some(columns) => AnyParser::Lines(Box::new(csv::CsvParser::new(columns.clone()))),
            None => AnyParser::Invalid(
                "format csv needs a column mapping: --csv-columns MAPPING, or `csv:MAPPING` as \
                 the format (a config's `format`, Python's `format=`), e.g. \
                 csv:time=2,op=3,size=4,lbn=5,header (docs/trace-formats.md)"
                    .into(),
            ),
        },
        Format::Lbn32 | Format::Lbn64 => {
            devices.intern("0");
            AnyParser::Binary {
                parser: Box::new(lbn::LbnParser::new(if format == Format::Lbn32 {
                    4
                } else {
                    8
                })),
                header_bytes: 0,
            }
        }
        Format::Native => AnyParser::Invalid(
            "native traces are opened from a file path (TraceReader::open), not a stream".into(),
        ),
    }
}
