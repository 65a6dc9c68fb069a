//! The cache under device errors (`Policy::on_device_error`), driven by
//! hand: a failed cache read of a clean page is read again from the
//! backing device, a failed cache read of a dirty page or a failed backing
//! read fails its host read, a failed fill drops the copy; a failed slot
//! write fails its host write (the page kept if it held acknowledged data),
//! a failed write-back keeps its page dirty and fails the FLUSH waiting
//! for it, a failed write-through backing write drops the copy, a failed
//! trim keeps the pages.

use tierlab_core::policy::{HostIo, IoError, Outbox, Policy};
use tierlab_core::{DeviceIo, Op};
use tierlab_policies::cache::{BACKING_DEVICE, CACHE_DEVICE, Cache, CacheParams, WriteMode};

const PAGE: u64 = 4096;

fn cache(mode: WriteMode) -> Cache {
    let mut p = CacheParams::with_capacity(1 << 20);
    // These cases are the write-back-on-FLUSH cache's (the persistent
    // one's error paths run in cache_props).
    p.persistent = false;
    p.write_mode = mode;
    Cache::new(&p).unwrap()
}

fn outbox() -> Outbox {
    Outbox {
        wants_data: true,
        ..Default::default()
    }
}

fn host(c: &mut Cache, out: &mut Outbox, id: u64, op: Op, page: u64) {
    let io = HostIo {
        id,
        op,
        offset_bytes: page * PAGE,
        size_bytes: PAGE as u32,
        tenant: 0,
    };
    c.on_host_io(0, io, out);
}

/// The device IOs the last call submitted, and clears the outbox's IOs.
fn take_ios(out: &mut Outbox) -> Vec<(usize, DeviceIo)> {
    let ios = std::mem::take(&mut out.device_ios);
    out.data.clear();
    ios
}

fn complete(c: &mut Cache, out: &mut Outbox, (d, io): (usize, DeviceIo)) {
    c.on_device_completion(0, d, io.tag, out);
}

fn counter(c: &Cache, name: &str) -> f64 {
    c.counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap()
        .1
}

/// Page 0 read once: cached, clean, valid.
fn cached_clean_page(c: &mut Cache, out: &mut Outbox) {
    host(c, out, 1, Op::Read, 0);
    let ios = take_ios(out);
    assert_eq!(ios.len(), 1);
    assert_eq!(ios[0].0, BACKING_DEVICE);
    complete(c, out, ios[0]);
    assert_eq!(out.complete, vec![(1, 1)]);
    let fill = take_ios(out);
    assert_eq!(fill.len(), 1, "the fill write");
    assert_eq!(fill[0].0, CACHE_DEVICE);
    complete(c, out, fill[0]);
    out.clear();
    assert_eq!(counter(c, "resident_bytes"), PAGE as f64);
}

#[test]
fn a_failed_cache_read_of_a_clean_page_is_read_from_the_backing_device() {
    let (mut c, mut out) = (cache(WriteMode::WriteBack), outbox());
    cached_clean_page(&mut c, &mut out);
    host(&mut c, &mut out, 2, Op::Read, 0);
    let hit = take_ios(&mut out);
    assert_eq!(hit.len(), 1);
    assert_eq!(hit[0].0, CACHE_DEVICE, "a hit");
    assert!(c.on_device_error(0, CACHE_DEVICE, hit[0].1.tag, IoError::Io, &mut out));
    assert!(out.failed.is_empty() && out.complete.is_empty());
    let retry = take_ios(&mut out);
    assert_eq!(retry.len(), 1);
    assert_eq!(
        (
            retry[0].0,
            retry[0].1.op,
            retry[0].1.offset_bytes,
            retry[0].1.size_bytes
        ),
        (BACKING_DEVICE, Op::Read, 0, PAGE as u32)
    );
    // Its bytes land in the host IO's buffer.
    assert!(out.data.is_empty(), "take_ios cleared it");
    complete(&mut c, &mut out, retry[0]);
    assert_eq!(out.complete, vec![(2, 1)], "served by the backing tier");
    assert_eq!(counter(&c, "reads_retried_from_backing"), 1.0);
    assert_eq!(counter(&c, "device_errors"), 1.0);
    assert_eq!(counter(&c, "resident_bytes"), 0.0, "the copy is dropped");
}

#[test]
fn a_failed_cache_read_of_a_dirty_page_fails_the_host_read() {
    let (mut c, mut out) = (cache(WriteMode::WriteBack), outbox());
    host(&mut c, &mut out, 1, Op::Write, 0);
    let w = take_ios(&mut out);
    assert_eq!(w[0].0, CACHE_DEVICE);
    complete(&mut c, &mut out, w[0]);
    assert_eq!(out.complete, vec![(1, 0)]);
    out.clear();
    host(&mut c, &mut out, 2, Op::Read, 0);
    let hit = take_ios(&mut out);
    assert!(c.on_device_error(0, CACHE_DEVICE, hit[0].1.tag, IoError::Io, &mut out));
    // The backing device is older than the acknowledged write: no retry.
    assert_eq!(out.failed, vec![(2, IoError::Io)]);
    assert!(out.device_ios.is_empty());
    assert_eq!(
        counter(&c, "dirty_bytes"),
        PAGE as f64,
        "the dirty page stays"
    );
}

#[test]
fn a_failed_backing_read_fails_the_host_read_and_fills_nothing() {
    let (mut c, mut out) = (cache(WriteMode::WriteBack), outbox());
    host(&mut c, &mut out, 1, Op::Read, 0);
    let r = take_ios(&mut out);
    assert_eq!(r[0].0, BACKING_DEVICE);
    assert!(c.on_device_error(0, BACKING_DEVICE, r[0].1.tag, IoError::NoSpace, &mut out));
    assert_eq!(out.failed, vec![(1, IoError::NoSpace)]);
    assert!(out.device_ios.is_empty(), "no fill write");
    out.clear();
    // The next read of the page goes to the backing device again.
    host(&mut c, &mut out, 2, Op::Read, 0);
    let r = take_ios(&mut out);
    assert_eq!(r[0].0, BACKING_DEVICE);
    complete(&mut c, &mut out, r[0]);
    assert_eq!(out.complete, vec![(2, 1)]);
}

#[test]
fn a_failed_fill_drops_the_copy() {
    let (mut c, mut out) = (cache(WriteMode::WriteBack), outbox());
    host(&mut c, &mut out, 1, Op::Read, 0);
    let r = take_ios(&mut out);
    complete(&mut c, &mut out, r[0]);
    let fill = take_ios(&mut out);
    out.clear();
    assert!(c.on_device_error(0, CACHE_DEVICE, fill[0].1.tag, IoError::Io, &mut out));
    assert_eq!(counter(&c, "resident_bytes"), 0.0);
    out.clear();
    // A miss again, admitted and filled anew.
    host(&mut c, &mut out, 2, Op::Read, 0);
    let r = take_ios(&mut out);
    assert_eq!(r[0].0, BACKING_DEVICE);
    complete(&mut c, &mut out, r[0]);
    assert_eq!(take_ios(&mut out).len(), 1, "a new fill");
}

fn flush(c: &mut Cache, out: &mut Outbox, id: u64) {
    let io = HostIo {
        id,
        op: Op::Flush,
        offset_bytes: 0,
        size_bytes: 0,
        tenant: 0,
    };
    c.on_host_io(0, io, out);
}

/// Page 0 written and acknowledged: dirty in the cache only.
fn dirty_page(c: &mut Cache, out: &mut Outbox) {
    host(c, out, 1, Op::Write, 0);
    let w = take_ios(out);
    assert_eq!(w[0].0, CACHE_DEVICE);
    complete(c, out, w[0]);
    assert_eq!(out.complete, vec![(1, 0)]);
    out.clear();
}

#[test]
fn a_failed_slot_write_of_a_new_page_fails_the_write_and_drops_the_page() {
    let (mut c, mut out) = (cache(WriteMode::WriteBack), outbox());
    host(&mut c, &mut out, 1, Op::Write, 0);
    let w = take_ios(&mut out);
    out.clear(); // its idle-flush timer
    assert!(c.on_device_error(0, CACHE_DEVICE, w[0].1.tag, IoError::Io, &mut out));
    assert_eq!(out.failed, vec![(1, IoError::Io)]);
    assert_eq!(counter(&c, "resident_bytes"), 0.0, "no copy of nothing");
    assert_eq!(counter(&c, "dirty_bytes"), 0.0);
    assert!(c.is_drained());
    out.clear();
    // The page reads from the backing device (a failed write leaves its
    // range unspecified: the old data is a right answer).
    host(&mut c, &mut out, 2, Op::Read, 0);
    assert_eq!(take_ios(&mut out)[0].0, BACKING_DEVICE);
}

#[test]
fn a_failed_overwrite_of_a_dirty_page_fails_the_write_and_keeps_the_page() {
    let (mut c, mut out) = (cache(WriteMode::WriteBack), outbox());
    dirty_page(&mut c, &mut out);
    host(&mut c, &mut out, 2, Op::Write, 0);
    let w = take_ios(&mut out);
    assert!(c.on_device_error(0, CACHE_DEVICE, w[0].1.tag, IoError::Io, &mut out));
    assert_eq!(out.failed, vec![(2, IoError::Io)]);
    assert_eq!(counter(&c, "slot_writes_failed"), 1.0);
    assert_eq!(counter(&c, "dirty_bytes"), PAGE as f64, "still dirty");
    out.clear();
    // Reads keep one answer: the slot.
    host(&mut c, &mut out, 3, Op::Read, 0);
    assert_eq!(take_ios(&mut out)[0].0, CACHE_DEVICE);
}

/// A failed write-back keeps the page dirty, fails the FLUSH waiting for
/// it, is not retried until the next FLUSH (no hot loop), and that FLUSH
/// retries it; `drain` gives a failing page one retry, then gives up
/// (counted), so a clean stop never hangs on a dead backing device.
#[test]
fn a_failed_write_back_fails_its_flush_and_waits_for_the_next() {
    let (mut c, mut out) = (cache(WriteMode::WriteBack), outbox());
    dirty_page(&mut c, &mut out);
    flush(&mut c, &mut out, 10);
    let reads = take_ios(&mut out);
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0].0, CACHE_DEVICE, "the write-back's slot read");
    complete(&mut c, &mut out, reads[0]);
    let wb = take_ios(&mut out);
    assert_eq!(wb[0].0, BACKING_DEVICE);
    assert!(c.on_device_error(0, BACKING_DEVICE, wb[0].1.tag, IoError::Io, &mut out));
    assert_eq!(out.failed, vec![(10, IoError::Io)]);
    assert!(out.device_ios.is_empty(), "not retried at once");
    assert_eq!(counter(&c, "dirty_bytes"), PAGE as f64);
    assert_eq!(counter(&c, "write_backs_failed"), 1.0);
    assert_eq!(counter(&c, "flushes_failed"), 1.0);
    out.clear();
    // The next FLUSH retries, and succeeds.
    flush(&mut c, &mut out, 11);
    let reads = take_ios(&mut out);
    assert_eq!(reads.len(), 1, "retried");
    complete(&mut c, &mut out, reads[0]);
    let wb = take_ios(&mut out);
    complete(&mut c, &mut out, wb[0]);
    assert_eq!(out.complete, vec![(11, 1)]);
    assert_eq!(counter(&c, "dirty_bytes"), 0.0);
    out.clear();
    // The slot read of a write-back fails: the same; then drain retries
    // once and gives up.
    host(&mut c, &mut out, 12, Op::Write, 0);
    let w = take_ios(&mut out);
    complete(&mut c, &mut out, w[0]);
    out.clear();
    flush(&mut c, &mut out, 13);
    let reads = take_ios(&mut out);
    assert!(c.on_device_error(0, CACHE_DEVICE, reads[0].1.tag, IoError::Io, &mut out));
    assert_eq!(out.failed, vec![(13, IoError::Io)]);
    out.clear();
    c.drain(0, &mut out);
    let reads = take_ios(&mut out);
    assert_eq!(reads.len(), 1, "drain retries");
    assert!(!c.is_drained());
    complete(&mut c, &mut out, reads[0]);
    let wb = take_ios(&mut out);
    assert!(c.on_device_error(0, BACKING_DEVICE, wb[0].1.tag, IoError::Io, &mut out));
    assert!(out.device_ios.is_empty());
    assert!(c.is_drained(), "given up, not hung");
    assert_eq!(counter(&c, "drain_abandoned_pages"), 1.0);
}

#[test]
fn a_failed_write_through_backing_write_fails_the_write_and_drops_the_copy() {
    let (mut c, mut out) = (cache(WriteMode::WriteThrough), outbox());
    host(&mut c, &mut out, 1, Op::Write, 0);
    let ios = take_ios(&mut out);
    let slot = ios.iter().find(|x| x.0 == CACHE_DEVICE).copied().unwrap();
    let backing = ios.iter().find(|x| x.0 == BACKING_DEVICE).copied().unwrap();
    assert!(c.on_device_error(0, BACKING_DEVICE, backing.1.tag, IoError::Io, &mut out));
    assert!(out.failed.is_empty(), "the slot part is still in flight");
    complete(&mut c, &mut out, slot);
    assert_eq!(out.failed, vec![(1, IoError::Io)]);
    // The backing page may hold anything now: the copy goes, so every
    // later read has the same (backing) answer.
    assert_eq!(counter(&c, "resident_bytes"), 0.0);
}

#[test]
fn a_failed_trim_fails_and_keeps_the_cached_pages() {
    let (mut c, mut out) = (cache(WriteMode::WriteBack), outbox());
    dirty_page(&mut c, &mut out);
    host(&mut c, &mut out, 2, Op::Trim, 0);
    let t = take_ios(&mut out);
    assert_eq!(t[0].1.op, Op::Trim);
    assert!(c.on_device_error(0, BACKING_DEVICE, t[0].1.tag, IoError::Io, &mut out));
    assert_eq!(out.failed, vec![(2, IoError::Io)]);
    assert_eq!(counter(&c, "dirty_bytes"), PAGE as f64, "kept, dirty");
}

/// A merged write-back of two pages whose first slot read fails and second
/// lands: nothing is written to the backing device (the staging lacks a
/// page), both pages stay dirty, the FLUSH fails. (Page 9, read and filled
/// between them, takes slot 1, so pages 0 and 1 sit in slots 0 and 2: two
/// slot reads.)
#[test]
fn a_write_back_with_one_failed_slot_read_writes_nothing() {
    let (mut c, mut out) = (cache(WriteMode::WriteBack), outbox());
    host(&mut c, &mut out, 1, Op::Write, 0);
    let w = take_ios(&mut out);
    complete(&mut c, &mut out, w[0]);
    host(&mut c, &mut out, 3, Op::Read, 9);
    let r = take_ios(&mut out);
    complete(&mut c, &mut out, r[0]);
    let fill = take_ios(&mut out);
    assert_eq!(fill[0].0, CACHE_DEVICE, "the fill of page 9");
    complete(&mut c, &mut out, fill[0]);
    host(&mut c, &mut out, 2, Op::Write, 1);
    let w = take_ios(&mut out);
    assert_eq!(w[0].1.offset_bytes, 2 * PAGE, "page 1 in slot 2");
    complete(&mut c, &mut out, w[0]);
    out.clear();
    flush(&mut c, &mut out, 10);
    let reads = take_ios(&mut out);
    assert_eq!(reads.len(), 2, "one merged write-back, two slot reads");
    assert!(c.on_device_error(0, CACHE_DEVICE, reads[0].1.tag, IoError::Io, &mut out));
    complete(&mut c, &mut out, reads[1]);
    assert!(
        out.device_ios.is_empty(),
        "no backing write: {:?}",
        out.device_ios
    );
    assert_eq!(out.failed, vec![(10, IoError::Io)]);
    assert_eq!(counter(&c, "dirty_bytes"), 2.0 * PAGE as f64);
}
