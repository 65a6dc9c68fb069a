//! Parsing on a second core: [`Prefetch`] runs any record stream on a
//! reader thread that parses batches of records ahead and hands them over a
//! bounded channel, so the consumer (statistics, a cache simulation, the
//! simulator) works while the next batch is parsed. Text traces parse at
//! ~100–200 ns a record; overlapped, a consumer faster than that runs at
//! the parser's speed instead of the sum of both.
//!
//! The consumer sees exactly the records, errors, device table and time
//! base the stream itself would give, in the same order: results do not
//! change. Memory is bounded by [`QUEUE_BATCHES`] batches of
//! [`BATCH_RECORDS`] records.

use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;

use crate::error::{Result, TraceError};
use crate::reader::RecordStream;
use crate::record::{DeviceTable, IoRecord, TimeBase};

/// Records per batch: large enough that a hand-over (and a wake-up of a
/// waiting consumer, microseconds on a VM) costs under 1 % of the batch's
/// parsing, small enough to stay in the second-level cache (~200 KB).
pub const BATCH_RECORDS: usize = 4096;
/// Batches parsed ahead of the consumer at most.
pub const QUEUE_BATCHES: usize = 4;

/// What the reader thread sends, in stream order.
enum Message {
    Batch {
        records: Vec<IoRecord>,
        /// Device names the stream added since the previous batch.
        new_devices: Vec<String>,
        /// The stream's time base after the batch (a format may decide it
        /// from its first record).
        time_base: TimeBase,
    },
    /// The stream's next call returned this error.
    Error(TraceError),
    /// The stream ended.
    End,
}

/// A record stream parsed ahead on its own thread. `into_inner` gives the
/// stream back (for its counters, e.g. records skipped) once it is done.
pub struct Prefetch<S: RecordStream + Send + 'static> {
    messages: Receiver<Message>,
    /// Emptied batches go back to the reader thread, so batches are not
    /// allocated per hand-over.
    recycle: SyncSender<Vec<IoRecord>>,
    batch: Vec<IoRecord>,
    pos: usize,
    devices: DeviceTable,
    time_base: TimeBase,
    ended: bool,
    thread: Option<JoinHandle<S>>,
}

impl<S: RecordStream + Send + 'static> Prefetch<S> {
    /// Starts reading `stream` on a new thread. Panics if the system
    /// cannot make a thread, as `std::thread::spawn` does.
    pub fn spawn(mut stream: S) -> Self {
        let devices = stream.devices().clone();
        let time_base = stream.time_base();
        let (send, messages) = sync_channel(QUEUE_BATCHES);
        let (recycle, recycled) = sync_channel(QUEUE_BATCHES + 2);
        let devices_sent = devices.len();
        let thread = std::thread::Builder::new()
            .name("tierlab-reader".to_string())
            .spawn(move || {
                produce(&mut stream, devices_sent, &send, &recycled);
                stream
            })
            .expect("failed to start the trace reader thread");
        Prefetch {
            messages,
            recycle,
            batch: Vec::new(),
            pos: 0,
            devices,
            time_base,
            ended: false,
            thread: Some(thread),
        }
    }

    /// Stops the reader thread and returns the stream. After the end of
    /// the stream was returned, the stream's counters are final; before,
    /// it may have read up to [`QUEUE_BATCHES`] batches more than were
    /// consumed. Stopping early waits for the read in progress: on a pipe
    /// that stays open without data, until the writer closes it.
    pub fn into_inner(mut self) -> S {
        // Disconnecting makes the reader thread's next send fail.
        let thread = self
            .thread
            .take()
            .expect("the reader thread is joined once");
        drop(std::mem::replace(&mut self.messages, sync_channel(0).1));
        join(thread)
    }

    #[cold]
    fn next_batch(&mut self) -> Result<bool> {
        let spent = std::mem::take(&mut self.batch);
        // The reader thread may be gone (end of stream): a full or closed
        // recycle channel only means the batch is freed here.
        let _ = self.recycle.try_send(spent);
        self.pos = 0;
        match self.messages.recv() {
            Ok(Message::Batch {
                records,
                new_devices,
                time_base,
            }) => {
                let expected = self.devices.len() + new_devices.len();
                for name in &new_devices {
                    self.devices.intern(name);
                }
                // Names are added once each, so ids stay those of the stream.
                assert_eq!(self.devices.len(), expected, "device names repeat");
                self.time_base = time_base;
                self.batch = records;
                Ok(true)
            }
            Ok(Message::Error(e)) => Err(e),
            Ok(Message::End) => {
                self.ended = true;
                Ok(false)
            }
            // The reader thread stopped without saying why: it panicked.
            Err(_) => {
                let thread = self
                    .thread
                    .take()
                    .expect("the reader thread is joined once");
                join(thread);
                unreachable!("the reader thread ended without an end message or a panic")
            }
        }
    }
}

/// Joins the reader thread, re-raising its panic here.
fn join<S>(thread: JoinHandle<S>) -> S {
    match thread.join() {
        Ok(stream) => stream,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The reader thread: fills batches until the stream ends or the consumer
/// is gone. An error is sent after the records before it, and reading goes
/// on after it as it would for a caller that continues past an error.
fn produce<S: RecordStream>(
    stream: &mut S,
    mut devices_sent: usize,
    send: &SyncSender<Message>,
    recycled: &Receiver<Vec<IoRecord>>,
) {
    loop {
        let mut records = match recycled.try_recv() {
            Ok(mut v) => {
                v.clear();
                v
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                Vec::with_capacity(BATCH_RECORDS)
            }
        };
        let mut last = None;
        while records.len() < BATCH_RECORDS {
            match stream.next_record() {
                Ok(Some(r)) => records.push(r),
                Ok(None) => {
                    last = Some(Message::End);
                    break;
                }
                Err(e) => {
                    last = Some(Message::Error(e));
                    break;
                }
            }
        }
        let names = stream.devices().names();
        debug_assert!(names.len() >= devices_sent, "device tables only grow");
        let new_devices = names[devices_sent..].to_vec();
        devices_sent = names.len();
        if !records.is_empty() || !new_devices.is_empty() {
            let batch = Message::Batch {
                records,
                new_devices,
                time_base: stream.time_base(),
            };
            if send.send(batch).is_err() {
                return;
            }
        }
        if let Some(message) = last {
            let end = matches!(message, Message::End);
            if send.send(message).is_err() || end {
                return;
            }
        }
    }
}

impl<S: RecordStream + Send + 'static> RecordStream for Prefetch<S> {
    #[inline]
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        loop {
            if let Some(&r) = self.batch.get(self.pos) {
                self.pos += 1;
                return Ok(Some(r));
            }
            if self.ended || !self.next_batch()? {
                return Ok(None);
            }
        }
    }

    fn devices(&self) -> &DeviceTable {
        &self.devices
    }

    fn time_base(&self) -> TimeBase {
        self.time_base
    }
}

impl<S: RecordStream + Send + 'static> Drop for Prefetch<S> {
    fn drop(&mut self) {
        // Not joined: the reader thread may be blocked reading a slow input;
        // it stops at its next hand-over, which fails once `messages` is
        // dropped.
        drop(self.thread.take());
    }
}

/// Whether a second thread can run at the same time as this one.
pub fn second_core() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// Runs `consume` over `stream`, parsed ahead on a reader thread when there
/// is a second core and `worth_it` (a cheap stream gains nothing from the
/// hand-over); returns its result and the stream, which has been read to
/// wherever `consume` stopped (or ahead of it, by at most
/// [`QUEUE_BATCHES`] batches).
pub fn with_prefetch<S, T>(
    stream: S,
    worth_it: bool,
    consume: impl FnOnce(&mut dyn RecordStream) -> T,
) -> (T, S)
where
    S: RecordStream + Send + 'static,
{
    if !(worth_it && second_core()) {
        let mut stream = stream;
        let out = consume(&mut stream);
        return (out, stream);
    }
    let mut prefetch = Prefetch::spawn(stream);
    let out = consume(&mut prefetch);
    (out, prefetch.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Op;

    /// A stream that adds a device every 1,000 records, decides its time
    /// base at the first record, and fails at records in `errors` (then
    /// goes on, as a reader does after a bad line).
    struct Scripted {
        n: u64,
        left: u64,
        errors: Vec<u64>,
        devices: DeviceTable,
        time_base: TimeBase,
    }

    impl Scripted {
        fn new(records: u64, errors: Vec<u64>) -> Self {
            let mut devices = DeviceTable::new();
            devices.intern("first");
            Scripted {
                n: 0,
                left: records,
                errors,
                devices,
                time_base: TimeBase::None,
            }
        }
    }

    impl RecordStream for Scripted {
        fn next_record(&mut self) -> Result<Option<IoRecord>> {
            if self.left == 0 {
                return Ok(None);
            }
            self.left -= 1;
            self.n += 1;
            self.time_base = TimeBase::Relative;
            if self.errors.contains(&self.n) {
                return Err(TraceError::Invalid(format!("bad record {}", self.n)));
            }
            let device_id = if self.n % 1000 == 0 {
                self.devices.intern(&format!("dev{}", self.n))
            } else {
                (self.n % self.devices.len() as u64) as u32
            };
            Ok(Some(IoRecord {
                time_ns: self.n * 7,
                offset_bytes: self.n.wrapping_mul(0x9e37_79b9),
                size_bytes: 4096,
                device_id,
                op: Op::Read,
                response_ns: None,
            }))
        }
        fn devices(&self) -> &DeviceTable {
            &self.devices
        }
        fn time_base(&self) -> TimeBase {
            self.time_base
        }
    }

    /// What a consumer sees: every record with its device's name, every
    /// error, and the time base after each step.
    fn observe(stream: &mut dyn RecordStream) -> Vec<String> {
        let mut seen = vec![format!("{:?} {:?}", stream.time_base(), stream.devices())];
        loop {
            match stream.next_record() {
                Ok(Some(r)) => seen.push(format!(
                    "{r:?} {} {:?}",
                    stream.devices().name(r.device_id).unwrap(),
                    stream.time_base()
                )),
                Ok(None) => break,
                Err(e) => seen.push(format!("error {e}")),
            }
        }
        seen.push(format!("{:?} {:?}", stream.time_base(), stream.devices()));
        seen
    }

    #[test]
    fn the_consumer_sees_what_the_stream_gives() {
        let records = 3 * BATCH_RECORDS as u64 + 17;
        let errors = vec![1, 4096, 5000, records];
        let direct = observe(&mut Scripted::new(records, errors.clone()));
        assert!(direct.len() > records as usize);
        let mut pre = Prefetch::spawn(Scripted::new(records, errors));
        let ahead = observe(&mut pre);
        assert_eq!(ahead.len(), direct.len());
        for (i, (a, d)) in ahead.iter().zip(&direct).enumerate() {
            assert_eq!(a, d, "at {i}");
        }
        // Ended: further calls keep saying so, and the stream comes back.
        assert_eq!(pre.next_record().unwrap(), None);
        let inner = pre.into_inner();
        assert_eq!(inner.left, 0);
        // Empty streams too.
        let mut pre = Prefetch::spawn(Scripted::new(0, vec![]));
        assert_eq!(observe(&mut pre), observe(&mut Scripted::new(0, vec![])));
    }

    #[test]
    fn stopping_early_does_not_hang() {
        let records = 100 * BATCH_RECORDS as u64;
        let mut pre = Prefetch::spawn(Scripted::new(records, vec![]));
        for _ in 0..10 {
            pre.next_record().unwrap().unwrap();
        }
        // The reader is at most the queue plus a batch in hand ahead.
        let inner = pre.into_inner();
        let read = records - inner.left;
        assert!(
            read <= ((QUEUE_BATCHES + 2) * BATCH_RECORDS) as u64,
            "{read}"
        );
        // Dropped without into_inner: the thread stops on its own.
        let mut pre = Prefetch::spawn(Scripted::new(records, vec![]));
        pre.next_record().unwrap().unwrap();
        drop(pre);
    }

    #[test]
    fn with_prefetch_gives_the_same_result_either_way() {
        let count = |s: &mut dyn RecordStream| {
            let mut n = 0u64;
            while let Ok(Some(_)) = s.next_record() {
                n += 1;
            }
            n
        };
        for worth_it in [false, true] {
            let (n, inner) = with_prefetch(Scripted::new(10_000, vec![]), worth_it, count);
            assert_eq!(n, 10_000);
            assert_eq!(inner.left, 0);
        }
    }

    struct Panics(DeviceTable);
    impl RecordStream for Panics {
        fn next_record(&mut self) -> Result<Option<IoRecord>> {
            panic!("reader bug");
        }
        fn devices(&self) -> &DeviceTable {
            &self.0
        }
        fn time_base(&self) -> TimeBase {
            TimeBase::None
        }
    }

    #[test]
    #[should_panic(expected = "reader bug")]
    fn a_panic_in_the_reader_reaches_the_consumer() {
        let mut pre = Prefetch::spawn(Panics(DeviceTable::new()));
        let _ = pre.next_record();
    }
}
