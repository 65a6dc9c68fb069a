//! `--record FILE`: every host IO the served stack receives, written as a
//! native tierlab trace while serving — streaming (records leave memory in
//! blocks of 4096) and readable after each checkpoint (every stats
//! interval), so `tierlab sim` can replay what a real application did
//! through any other policy.
//!
//! Between checkpoints the file stays readable too: each time the writer
//! puts a block of records on disk (over the last names trailer), the
//! trailer and header are written again right after it.
//!
//! A record is one host IO: time (ns since the server started, when the
//! stack received it), op, offset, size, FUA (flags bit 0) and the
//! connection (`device_id` → `connN`). WRITE_ZEROES becomes the writes of
//! zeros the stack received; BLOCK_STATUS moves no data and is not recorded.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::ServeError;
use tierlab_core::{Op, TimeNs};
use tierlab_trace::formats::native::{NativeWriter, RECORD_FLAG_FUA};
use tierlab_trace::{IoRecord, TimeBase};

/// Connections beyond this share the last device id (the native format
/// holds 65,536 device names).
const CONN_IDS_MAX: u32 = u16::MAX as u32;
/// The native writer buffers this many records before writing them.
const BLOCK_RECORDS: u64 = 4096;

pub(crate) struct TraceRecord {
    path: PathBuf,
    writer: NativeWriter<File>,
    /// Highest connection id seen + 1 (names conn0..connN).
    conns: u32,
}

impl TraceRecord {
    pub(crate) fn create(path: &Path) -> Result<TraceRecord, ServeError> {
        let file = File::create(path).map_err(|source| ServeError::File {
            flag: "--record",
            path: path.to_path_buf(),
            action: "cannot create",
            source,
        })?;
        let writer = NativeWriter::new(file).map_err(|error| ServeError::Record {
            path: path.to_path_buf(),
            error: Box::new(error),
        })?;
        Ok(TraceRecord {
            path: path.to_path_buf(),
            writer,
            conns: 0,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        &mut self,
        time_ns: TimeNs,
        op: Op,
        offset_bytes: u64,
        size_bytes: u32,
        fua: bool,
        conn: u32,
    ) -> Result<(), ServeError> {
        let device_id = conn.min(CONN_IDS_MAX);
        self.conns = self.conns.max(device_id + 1);
        let r = IoRecord {
            time_ns,
            offset_bytes,
            size_bytes,
            device_id,
            op,
            response_ns: None,
        };
        let flags = if fua { RECORD_FLAG_FUA } else { 0 };
        self.writer
            .write_with_flags(&r, flags)
            .map_err(|error| self.fail(error))?;
        // The writer has just written a block of records over the names
        // trailer of the last checkpoint: put a trailer and header back at
        // once, so the file is a readable trace but for microseconds.
        if self.writer.record_count() % BLOCK_RECORDS == 0 {
            self.checkpoint()?;
        }
        Ok(())
    }

    fn fail(&self, error: tierlab_trace::TraceError) -> ServeError {
        ServeError::Record {
            path: self.path.clone(),
            error: Box::new(error),
        }
    }

    fn names(&self) -> Vec<String> {
        (0..self.conns.max(1)).map(|i| format!("conn{i}")).collect()
    }

    /// Makes the file a complete trace of what was recorded so far.
    pub(crate) fn checkpoint(&mut self) -> Result<(), ServeError> {
        let names = self.names();
        self.writer
            .checkpoint(&names, TimeBase::Relative)
            .map_err(|error| self.fail(error))
    }

    /// Ends the trace; returns the record count.
    pub(crate) fn finish(self) -> Result<u64, ServeError> {
        let names = self.names();
        let path = self.path.clone();
        self.writer
            .finish(&names, TimeBase::Relative)
            .map_err(|error| ServeError::Record {
                path,
                error: Box::new(error),
            })
    }
}
