//! tierlab-trace: block IO traces — readers for every common format, writers,
//! statistics, slicing, and deterministic workload generators. Everything
//! streams: memory does not grow with trace length.

pub mod detect;
pub mod distinct;
pub mod error;
pub mod format;
pub mod formats;
pub mod generate;
pub mod input;
pub mod names;
pub mod parse;
pub mod prefetch;
pub mod reader;
pub mod record;
pub mod slice;
pub mod spread;
pub mod stats;
pub mod units;
pub mod writer;

pub use error::{FieldError, Location, ParamError, Result, TraceError};
pub use format::Format;
pub use reader::{ReadOptions, RecordStream, TraceReader, open};
pub use record::{DeviceTable, IoRecord, Op, TimeBase};
