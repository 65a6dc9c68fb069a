//! HSWD under device errors (`Policy::on_device_error`), driven by hand:
//! a failed read fails its host read; a failed first write of a block
//! fails its host write and leaves the block uncached (unless a write
//! queued behind it lands: then that write's entry is committed before it
//! is acknowledged); a failed overwrite fails its host write and keeps the
//! block; a failed NRegion trim fails the host trim and keeps the cached
//! blocks; a failed commit or RMW IO is refused (fail-stop).
//! `check_invariants` runs after every handler (debug builds).

use std::collections::VecDeque;

use tierlab_core::policy::{HostIo, IoError, Outbox, Policy};
use tierlab_core::{DeviceIo, Op};
use tierlab_policies::cache::ByteCount;
use tierlab_policies::hswd::{Hswd, HswdParams, NREGION_DEVICE, PCACHE_DEVICE};

const BLOCK: u64 = 4096;

fn hswd() -> Hswd {
    let mut p = HswdParams::with_pcache(2 << 20);
    p.band_bytes = ByteCount(256 << 10);
    Hswd::new(&p, 8 << 20).unwrap()
}

fn counter(h: &Hswd, name: &str) -> f64 {
    h.counters()
        .into_iter()
        .find(|(k, _)| *k == name)
        .unwrap()
        .1
}

/// Drives the policy: device IOs complete in submission order; `fails`
/// picks the ones that fail instead.
struct Driver {
    h: Hswd,
    out: Outbox,
    in_flight: VecDeque<(usize, DeviceIo)>,
    /// Every device IO submitted, in order.
    submitted: Vec<(usize, DeviceIo)>,
    completed: Vec<u64>,
    failed: Vec<(u64, IoError)>,
    /// `on_device_error` refused an error (fail-stop).
    refused: bool,
}

impl Driver {
    fn new() -> Driver {
        Driver {
            h: hswd(),
            out: Outbox::default(),
            in_flight: VecDeque::new(),
            submitted: Vec::new(),
            completed: Vec::new(),
            failed: Vec::new(),
            refused: false,
        }
    }

    fn take(&mut self) {
        for io in self.out.device_ios.drain(..) {
            self.submitted.push(io);
            self.in_flight.push_back(io);
        }
        self.completed
            .extend(self.out.complete.drain(..).map(|(id, _)| id));
        self.failed.append(&mut self.out.failed);
        self.out.timers.clear();
    }

    fn host(&mut self, id: u64, op: Op, block: u64, blocks: u64) {
        let io = HostIo {
            id,
            op,
            offset_bytes: block * BLOCK,
            size_bytes: (blocks * BLOCK) as u32,
            tenant: 0,
        };
        self.h.on_host_io(0, io, &mut self.out);
        self.take();
    }

    /// Completes (or fails, where `fails` says) every device IO until none
    /// is in flight.
    fn settle(&mut self, mut fails: impl FnMut(usize, &DeviceIo) -> bool) {
        while let Some((d, io)) = self.in_flight.pop_front() {
            if fails(d, &io) {
                if !self
                    .h
                    .on_device_error(0, d, io.tag, IoError::Io, &mut self.out)
                {
                    self.refused = true;
                    return;
                }
            } else {
                self.h.on_device_completion(0, d, io.tag, &mut self.out);
            }
            self.take();
        }
    }

    fn settle_ok(&mut self) {
        self.settle(|_, _| false);
    }

    /// Device IOs submitted since `from` that match.
    fn count_since(&self, from: usize, f: impl Fn(usize, &DeviceIo) -> bool) -> usize {
        self.submitted[from..]
            .iter()
            .filter(|(d, io)| f(*d, io))
            .count()
    }
}

fn is_slot_write(d: usize, io: &DeviceIo) -> bool {
    d == PCACHE_DEVICE && io.op == Op::Write && io.size_bytes as u64 == BLOCK
}

#[test]
fn a_failed_read_fails_its_host_read_and_the_next_one_is_served() {
    let mut t = Driver::new();
    t.host(1, Op::Write, 3, 1);
    t.settle_ok();
    assert_eq!(t.completed, vec![1]);
    // A hit (PCache) and a miss (NRegion) in one read; the PCache part fails.
    t.host(2, Op::Read, 3, 2);
    t.settle(|d, io| d == PCACHE_DEVICE && io.op == Op::Read);
    assert_eq!(t.failed, vec![(2, IoError::Io)]);
    assert_eq!(t.completed, vec![1], "a failed read is never completed");
    // The NRegion part fails alone.
    t.host(3, Op::Read, 3, 2);
    t.settle(|d, io| d == NREGION_DEVICE && io.op == Op::Read);
    assert_eq!(t.failed.last(), Some(&(3, IoError::Io)));
    // Nothing is left pinned: the same read is served whole.
    t.host(4, Op::Read, 3, 2);
    t.settle_ok();
    assert_eq!(t.completed, vec![1, 4]);
    assert_eq!(counter(&t.h, "device_errors"), 2.0);
    assert_eq!(counter(&t.h, "host_ios_failed"), 2.0);
    assert!(t.h.is_quiescent());
}

#[test]
fn a_failed_first_write_leaves_the_block_uncached() {
    let mut t = Driver::new();
    t.host(1, Op::Write, 5, 1);
    let from = t.submitted.len();
    t.settle(is_slot_write);
    assert_eq!(t.failed, vec![(1, IoError::Io)]);
    assert_eq!(t.h.cached_blocks(), 0);
    assert_eq!(counter(&t.h, "failed_first_writes_dropped"), 1.0);
    // No commit ran for it: nothing acknowledged needs an entry.
    assert_eq!(
        t.count_since(from, |d, io| d == PCACHE_DEVICE && io.op == Op::Flush),
        0
    );
    // A read goes to the NRegion (the newest data that landed).
    let from = t.submitted.len();
    t.host(2, Op::Read, 5, 1);
    t.settle_ok();
    assert_eq!(t.completed, vec![2]);
    assert_eq!(
        t.count_since(from, |d, io| d == NREGION_DEVICE && io.op == Op::Read),
        1
    );
    // The slot is free again: a new write takes it, commits and completes.
    t.host(3, Op::Write, 5, 1);
    t.settle_ok();
    assert_eq!(t.completed, vec![2, 3]);
    assert_eq!(t.h.cached_blocks(), 1);
}

#[test]
fn a_write_queued_behind_a_failed_first_write_is_committed_before_its_ack() {
    let mut t = Driver::new();
    // Two writes of one new block: the second waits for the first's slot
    // write, which fails.
    t.host(1, Op::Write, 7, 1);
    t.host(2, Op::Write, 7, 1);
    let mut first = true;
    let from = t.submitted.len();
    t.settle(|d, io| {
        let fail = first && is_slot_write(d, io);
        first &= !fail;
        fail
    });
    assert_eq!(t.failed, vec![(1, IoError::Io)]);
    assert_eq!(t.completed, vec![2]);
    assert_eq!(t.h.cached_blocks(), 1);
    // The second write's data was the block's first: its entry was
    // committed (a PCache flush, then an entry page) before the ack.
    let flushes = t.count_since(from, |d, io| d == PCACHE_DEVICE && io.op == Op::Flush);
    assert!(flushes >= 1, "no commit ran");
    assert!(counter(&t.h, "commits") >= 1.0);
    // And it reads from the PCache.
    let from = t.submitted.len();
    t.host(3, Op::Read, 7, 1);
    t.settle_ok();
    assert_eq!(t.count_since(from, |d, _| d == NREGION_DEVICE), 0);
}

#[test]
fn a_failed_overwrite_keeps_the_block_cached() {
    let mut t = Driver::new();
    t.host(1, Op::Write, 9, 1);
    t.settle_ok();
    t.host(2, Op::Write, 9, 1);
    t.settle(is_slot_write);
    assert_eq!(t.failed, vec![(2, IoError::Io)]);
    assert_eq!(t.h.cached_blocks(), 1, "the block held acknowledged data");
    let from = t.submitted.len();
    t.host(3, Op::Read, 9, 1);
    t.settle_ok();
    assert_eq!(t.completed, vec![1, 3]);
    assert_eq!(t.count_since(from, |d, _| d == NREGION_DEVICE), 0);
}

#[test]
fn a_failed_trim_fails_and_keeps_the_cached_blocks() {
    let mut t = Driver::new();
    t.host(1, Op::Write, 0, 4);
    t.settle_ok();
    assert_eq!(t.h.cached_blocks(), 4);
    t.host(2, Op::Trim, 0, 4);
    t.settle(|d, io| d == NREGION_DEVICE && io.op == Op::Trim);
    assert_eq!(t.failed, vec![(2, IoError::Io)]);
    assert_eq!(t.h.cached_blocks(), 4);
    // A trim that works drops them.
    t.host(3, Op::Trim, 0, 4);
    t.settle_ok();
    assert_eq!(t.completed, vec![1, 3]);
    assert_eq!(t.h.cached_blocks(), 0);
}

#[test]
fn a_failed_commit_or_rmw_io_is_refused() {
    // The commit's PCache flush.
    let mut t = Driver::new();
    t.host(1, Op::Write, 2, 1);
    t.settle(|d, io| d == PCACHE_DEVICE && io.op == Op::Flush);
    assert!(t.refused);
    assert!(t.completed.is_empty() && t.failed.is_empty());
    // The RMW's band read (cleaning of everything cached).
    let mut t = Driver::new();
    t.host(1, Op::Write, 2, 1);
    t.settle_ok();
    t.h.clean_all(&mut t.out);
    t.take();
    t.settle(|d, io| d == NREGION_DEVICE && io.op == Op::Read);
    assert!(t.refused);
}
