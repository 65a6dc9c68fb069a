//! What survives a power cut: FLUSH, FUA, CAN_MULTI_CONN and the clean stop,
//! checked against a backing store that models a volatile write cache.
//!
//! `VolatileDisk` keeps two layers: writes land in the volatile one (reads
//! see it), `flush()` copies what was written since the last flush into the
//! durable one, and the test reads the durable layer alone — what a power
//! cut would leave. Served with `bind_with_backends` and IO threads, so
//! every IO goes through the IO engine as a real store's would.
//!
//! Where a device stands for RAM (ATSMF's memory tier, `path = "ram"` in
//! configs/serve-atsmf.toml), its durable layer means nothing: a power cut
//! keeps only what the other device's durable layer holds.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use tierlab_real::backend::Backend;
use tierlab_serve::ServeOptions;

#[derive(Default)]
struct Layers {
    /// What reads return: every completed write.
    volatile: Vec<u8>,
    /// What a power cut leaves: writes covered by a completed flush.
    durable: Vec<u8>,
    /// Ranges written since the last flush.
    unflushed: Vec<(u64, usize)>,
    /// Every `trim` call: (offset, length).
    trims: Vec<(u64, u64)>,
    flushes: u64,
    writes: u64,
}

/// A disk with a volatile write cache. Cloned handles share the layers, so
/// the test keeps one while the server owns the other.
#[derive(Clone)]
struct VolatileDisk {
    name: &'static str,
    capacity_bytes: u64,
    layers: Arc<Mutex<Layers>>,
}

impl VolatileDisk {
    fn new(name: &'static str, capacity_bytes: u64) -> VolatileDisk {
        let n = capacity_bytes as usize;
        VolatileDisk {
            name,
            capacity_bytes,
            layers: Arc::new(Mutex::new(Layers {
                volatile: vec![0; n],
                durable: vec![0; n],
                ..Default::default()
            })),
        }
    }

    fn durable(&self, offset: u64, len: usize) -> Vec<u8> {
        let l = self.layers.lock().unwrap();
        l.durable[offset as usize..offset as usize + len].to_vec()
    }

    fn volatile(&self, offset: u64, len: usize) -> Vec<u8> {
        let l = self.layers.lock().unwrap();
        l.volatile[offset as usize..offset as usize + len].to_vec()
    }

    /// Whether the durable layer holds `page` at any page-aligned slot
    /// (where a cache device put it is the policy's business).
    fn durable_holds_page(&self, page: &[u8]) -> bool {
        let l = self.layers.lock().unwrap();
        l.durable.chunks_exact(page.len()).any(|slot| slot == page)
    }

    fn volatile_holds_page(&self, page: &[u8]) -> bool {
        let l = self.layers.lock().unwrap();
        l.volatile.chunks_exact(page.len()).any(|slot| slot == page)
    }

    fn trims(&self) -> Vec<(u64, u64)> {
        self.layers.lock().unwrap().trims.clone()
    }

    fn flushes(&self) -> u64 {
        self.layers.lock().unwrap().flushes
    }

    fn check(&self, offset: u64, len: usize) -> std::io::Result<()> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.capacity_bytes)
        {
            return Err(std::io::Error::other(format!(
                "{}: IO of {len} bytes at {offset} past {} bytes",
                self.name, self.capacity_bytes
            )));
        }
        Ok(())
    }
}

impl Backend for VolatileDisk {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.check(offset, buf.len())?;
        let l = self.layers.lock().unwrap();
        buf.copy_from_slice(&l.volatile[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.check(offset, buf.len())?;
        let mut l = self.layers.lock().unwrap();
        l.volatile[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        l.unflushed.push((offset, buf.len()));
        l.writes += 1;
        Ok(())
    }

    fn flush(&self) -> std::io::Result<()> {
        let mut l = self.layers.lock().unwrap();
        let ranges = std::mem::take(&mut l.unflushed);
        for (offset, len) in ranges {
            let (o, e) = (offset as usize, offset as usize + len);
            let bytes = l.volatile[o..e].to_vec();
            l.durable[o..e].copy_from_slice(&bytes);
        }
        l.flushes += 1;
        Ok(())
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn describe(&self) -> String {
        format!("volatile test disk {}", self.name)
    }

    /// Recorded; the bytes stay (a trim is a hint).
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.check(offset, len as usize)?;
        self.layers.lock().unwrap().trims.push((offset, len));
        Ok(())
    }
}

/// Through the IO engine's threads, not inline.
fn opts() -> ServeOptions {
    ServeOptions {
        io_threads: 4,
        io_engine: tierlab_real::EngineKind::Threads,
        ..ServeOptions::default()
    }
}

const PASSTHROUGH: &str = r#"
[[devices]]
name = "disk"
path = "ram"
capacity_bytes = "16MiB"
"#;

fn serve_passthrough() -> (Running, VolatileDisk) {
    let disk = VolatileDisk::new("disk", 16 << 20);
    let srv = serve_backends(PASSTHROUGH, vec![Box::new(disk.clone())], opts());
    (srv, disk)
}

#[test]
fn a_flush_on_one_connection_makes_writes_acknowledged_on_another_durable() {
    let (srv, disk) = serve_passthrough();
    let mut a = Client::connect(&srv.sock);
    let mut b = Client::connect(&srv.sock);
    let tf = a.transmission_flags;
    for (bit, name) in [
        (TF_SEND_FLUSH, "SEND_FLUSH"),
        (TF_SEND_FUA, "SEND_FUA"),
        (TF_CAN_MULTI_CONN, "CAN_MULTI_CONN"),
    ] {
        assert!(tf & bit != 0, "{name} advertised (flags {tf:#x})");
    }

    let at = 1 << 20;
    let data = pattern(1, 64 << 10);
    assert_eq!(a.write(at, &data), 0);
    // The negative control: acknowledged but not flushed, so the write is
    // in the volatile layer only. If the server flushed on every write (or
    // the test's disk were not volatile) this would fail.
    assert!(
        disk.volatile(at, data.len()) == data,
        "the write reached the disk"
    );
    assert!(
        disk.durable(at, data.len()) != data,
        "an unflushed write is already durable: the test cannot tell a flush from none"
    );
    let flushes = disk.flushes();

    // FLUSH on B covers the write acknowledged on A (CAN_MULTI_CONN).
    assert_eq!(b.flush(), 0);
    assert!(disk.flushes() > flushes, "FLUSH reached the disk");
    assert!(
        disk.durable(at, data.len()) == data,
        "a FLUSH acknowledged on B left A's acknowledged write volatile"
    );

    a.disconnect();
    b.disconnect();
    let report = srv.stop();
    assert!(report.durability_barriers >= 1, "{report:#?}");
}

#[test]
fn a_fua_write_is_durable_when_acknowledged() {
    let (srv, disk) = serve_passthrough();
    let mut a = Client::connect(&srv.sock);
    let plain_at = 2 << 20;
    let plain = pattern(2, 32 << 10);
    assert_eq!(a.write(plain_at, &plain), 0);
    assert!(
        disk.durable(plain_at, plain.len()) != plain,
        "negative control: not durable yet"
    );

    let fua_at = 3 << 20;
    let fua = pattern(3, 32 << 10);
    assert_eq!(a.write_flags(CMD_FLAG_FUA, fua_at, &fua), 0);
    assert!(
        disk.durable(fua_at, fua.len()) == fua,
        "a FUA write was acknowledged before it was durable"
    );

    // WRITE_ZEROES with FUA: durable zeros.
    assert_eq!(a.write_zeroes(CMD_FLAG_FUA, fua_at, 8192), 0);
    assert!(
        disk.durable(fua_at, 8192).iter().all(|&b| b == 0),
        "FUA zeros durable"
    );
    a.disconnect();
    let report = srv.stop();
    assert_eq!(report.requests.fua, 2, "{report:#?}");
}

#[test]
fn write_zeroes_reads_back_zeros_and_trim_reaches_the_disk() {
    let (srv, disk) = serve_passthrough();
    let mut a = Client::connect(&srv.sock);
    let at = 4 << 20;
    let data = pattern(4, 256 << 10);
    a.write_verify(at, &data);
    // Zero the middle 128 KiB; the 64 KiB on each side stay.
    assert_eq!(a.write_zeroes(0, at + (64 << 10), 128 << 10), 0);
    let back = a.read(at, 256 << 10).unwrap();
    assert!(
        back[..64 << 10] == data[..64 << 10],
        "bytes before the zeroed range"
    );
    assert!(
        back[64 << 10..192 << 10].iter().all(|&b| b == 0),
        "the zeroed range reads zeros"
    );
    assert!(
        back[192 << 10..] == data[192 << 10..],
        "bytes after the zeroed range"
    );
    // A zeroing larger than the server's 1 MiB pieces.
    assert_eq!(a.write(8 << 20, &pattern(5, 3 << 20)), 0);
    assert_eq!(a.write_zeroes(0, 8 << 20, 3 << 20), 0);
    assert!(
        a.read(8 << 20, 3 << 20).unwrap().iter().all(|&b| b == 0),
        "3 MiB of zeros"
    );

    // TRIM passes through to the disk over the range asked (passthrough).
    let trim_at = 12 << 20;
    assert_eq!(a.trim(trim_at, 1 << 20), 0);
    let trims = disk.trims();
    let covered: u64 = trims
        .iter()
        .filter(|&&(o, l)| o >= trim_at && o + l <= trim_at + (1 << 20))
        .map(|&(_, l)| l)
        .sum();
    assert_eq!(
        covered,
        1 << 20,
        "the disk saw trims covering the range: {trims:?}"
    );
    assert!(
        trims
            .iter()
            .all(|&(o, l)| o >= trim_at && o + l <= trim_at + (1 << 20)),
        "no trim outside the range asked: {trims:?}"
    );
    a.disconnect();
    let report = srv.stop();
    assert_eq!(report.bytes_trimmed, 1 << 20);
    assert_eq!(report.bytes_zeroed, (128 << 10) + (3 << 20));
}

const CACHE_BYTES: u64 = 4 << 20;
const BACKING_BYTES: u64 = 32 << 20;
const PAGE: usize = 4096;

/// A write-back cache over two volatile disks. No idle flushing and a
/// high watermark above what the test dirties, so dirty pages stay in the
/// cache until a stop drains them.
const WRITE_BACK: &str = r#"
[[devices]]
name = "cache"
path = "ram"
capacity_bytes = "4MiB"
[[devices]]
name = "backing"
path = "ram"
capacity_bytes = "32MiB"
[policy]
kind = "cache"
capacity_bytes = "4MiB"
write_mode = "write-back"
eviction = "lru"
idle_flush_ms = 0
high_watermark = 0.9
low_watermark = 0.8
"#;

#[test]
fn write_back_cache_flush_and_clean_stop_leave_every_acknowledged_write_durable() {
    let cache = VolatileDisk::new("cache", CACHE_BYTES);
    let backing = VolatileDisk::new("backing", BACKING_BYTES);
    let srv = serve_backends(
        WRITE_BACK,
        vec![Box::new(cache.clone()), Box::new(backing.clone())],
        opts(),
    );
    let mut a = Client::connect(&srv.sock);
    let mut b = Client::connect(&srv.sock);
    assert_eq!(a.block_min_bytes, PAGE as u32);

    // FLUSH on B makes A's acknowledged write durable on the backing
    // device (the cache keeps no metadata across a restart, so a copy in
    // the cache device alone would be lost).
    let first_at = 1 << 20;
    let first = pattern(10, PAGE);
    assert_eq!(a.write(first_at, &first), 0);
    assert!(
        cache.volatile_holds_page(&first),
        "the write went to the cache device"
    );
    assert!(
        !cache.durable_holds_page(&first) && backing.durable(first_at, PAGE) != first,
        "negative control: durable before any flush"
    );
    assert_eq!(b.flush(), 0);
    assert!(
        backing.durable(first_at, PAGE) == first,
        "a FLUSH on B left A's acknowledged write off the backing device's durable layer"
    );

    // Dirty a quarter of the cache with unique pages, some written twice
    // (the last version is what must survive), across both connections.
    let mut expected: Vec<(u64, Vec<u8>)> = vec![(first_at, first)];
    let mut rng = Rng::new(7);
    let pages_max = BACKING_BYTES / PAGE as u64;
    let mut used = std::collections::HashSet::new();
    used.insert(first_at / PAGE as u64);
    let mut offsets = Vec::new();
    while offsets.len() < 200 {
        let p = rng.below(pages_max);
        if used.insert(p) {
            offsets.push(p * PAGE as u64);
        }
    }
    for (i, &at) in offsets.iter().enumerate() {
        let c = if i % 2 == 0 { &mut a } else { &mut b };
        let data = pattern(1000 + i as u64, PAGE);
        assert_eq!(c.write(at, &data), 0);
        expected.push((at, data));
    }
    for (i, &at) in offsets.iter().take(50).enumerate() {
        let data = pattern(5000 + i as u64, PAGE);
        assert_eq!(a.write(at, &data), 0, "rewrite at {at}");
        expected.iter_mut().find(|(o, _)| *o == at).unwrap().1 = data;
    }
    // Negative control for the stop: the backing device does not hold
    // the writes since the FLUSH yet (they are dirty in the cache),
    // durably or at all.
    let on_backing_already = expected[1..]
        .iter()
        .filter(|(at, d)| backing.volatile(*at, PAGE) == *d)
        .count();
    assert_eq!(
        on_backing_already, 0,
        "pages written back before the stop: the clean-stop check would prove nothing"
    );
    a.disconnect();
    // B stays connected: the stop must finish it and drain anyway.
    let report = srv.stop();
    drop(b);

    let missing: Vec<u64> = expected
        .iter()
        .filter(|(at, d)| backing.durable(*at, PAGE) != *d)
        .map(|(at, _)| *at)
        .collect();
    assert!(
        missing.is_empty(),
        "after a clean stop the backing device's durable layer lacks {} of {} acknowledged \
         pages (first: {:?}); report {report:#?}",
        missing.len(),
        expected.len(),
        &missing[..missing.len().min(8)]
    );
    assert!(report.drain_s >= 0.0);
    assert_eq!(report.requests.write, 1 + 200 + 50);
}

/// ATSMF over two volatile disks, scaled down so a sub-LUN is promoted
/// within a second: 1 MiB sub-LUNs, 0.2 s periods. Model timing, so the
/// policy measures the memory tier faster than flash (as on real
/// hardware) and finds promoting worth it.
const ATSMF: &str = r#"
[[devices]]
name = "memory"
model = "memory"
preset = "ramdisk"
path = "ram"
capacity_bytes = 5242880
[[devices]]
name = "flash"
model = "ssd"
preset = "intel-p3700"
path = "ram"
capacity_bytes = 33554432
[policy]
kind = "atsmf"
sub_lun_size_bytes = "1MiB"
period_s = 0.2
collect_s = 0.2
top_n = 1
share_m = 0.5
move_chunk_bytes = "256KiB"
buffer_bytes = "1MiB"
min_samples = 5
memory_cap_bytes = "4MiB"
"#;

#[test]
fn atsmf_flush_makes_writes_to_a_promoted_sub_lun_durable() {
    let memory = VolatileDisk::new("memory", 5 << 20);
    let flash = VolatileDisk::new("flash", 32 << 20);
    let srv = serve_backends(
        ATSMF,
        vec![Box::new(memory.clone()), Box::new(flash.clone())],
        ServeOptions {
            model_timing: true,
            ..opts()
        },
    );
    let mut a = Client::connect(&srv.sock);
    let mut b = Client::connect(&srv.sock);
    // Hammer sub-LUN 5 until a write lands in the memory tier (promoted).
    let hot = 5u64 << 20;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut i = 0u64;
    let (at, page) = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "sub-LUN 5 was not promoted within 10 s ({i} writes)"
        );
        let at = hot + (i % 256) * PAGE as u64;
        let page = pattern(900_000 + i, PAGE);
        assert_eq!(a.write(at, &page), 0);
        i += 1;
        if memory.volatile_holds_page(&page) && flash.volatile(at, PAGE) != page {
            break (at, page);
        }
    };
    // The write lives in the memory tier only. FLUSH on B, then what
    // survives a power cut: the flash disk's durable layer (RAM holds
    // nothing across one).
    assert_eq!(b.flush(), 0);
    let durable = flash.durable(at, PAGE) == page;
    a.disconnect();
    b.disconnect();
    let report = srv.stop();
    assert!(
        flash.durable(at, PAGE) == page,
        "the clean stop demoted it: {report:?}"
    );
    assert!(
        durable,
        "FLUSH acknowledged, yet the write acknowledged at {at} (after {i} writes) was only in \
         the memory tier: a power cut then would lose it"
    );
}

/// CAN_MULTI_CONN is a durability promise: not made where RAM holds host
/// data next to persistent stores (a FLUSH leaves RAM's part volatile until
/// issue 18), made where every store is persistent — and on a RAM-only
/// stack, where nothing is durable and every connection sees one memory.
#[test]
fn can_multi_conn_is_advertised_only_where_a_flush_makes_writes_durable() {
    for (config, overrides, multi) in [
        // FLUSH writes the memory tier back to flash.
        ("serve-atsmf.toml", &[][..], true),
        // The paper's ATSMF: a FLUSH leaves memory-resident writes volatile.
        (
            "serve-atsmf.toml",
            &["policy.flush_writes_back=false"][..],
            false,
        ),
        ("serve-cache.toml", &[], true),
        ("serve-file.toml", &[], true),
        // The PCache and its metadata survive a restart.
        ("serve-hswd.toml", &[], true),
    ] {
        let srv = serve_config_with(config, overrides, ServeOptions::default(), |_| {});
        let c = Client::connect(&srv.sock);
        assert_eq!(srv.export.can_multi_conn, multi, "{config} {overrides:?}");
        assert_eq!(
            c.transmission_flags & TF_CAN_MULTI_CONN != 0,
            multi,
            "{config}: flags {:#x}",
            c.transmission_flags
        );
        c.disconnect();
        srv.stop();
    }
}

/// FUA on a write-back cache: the write is on the backing device's durable
/// layer when acknowledged (the cache keeps nothing across a restart, so a
/// synced cache device alone would not do), and a plain write is not.
#[test]
fn a_fua_write_through_a_write_back_cache_is_on_the_backing_device_when_acknowledged() {
    let cache = VolatileDisk::new("cache", CACHE_BYTES);
    let backing = VolatileDisk::new("backing", BACKING_BYTES);
    let srv = serve_backends(
        WRITE_BACK,
        vec![Box::new(cache.clone()), Box::new(backing.clone())],
        opts(),
    );
    let mut a = Client::connect(&srv.sock);
    let plain_at = 1 << 20;
    let plain = pattern(21, PAGE);
    assert_eq!(a.write(plain_at, &plain), 0);
    assert!(
        backing.volatile(plain_at, PAGE) != plain,
        "negative control: a plain write stays in the cache"
    );
    let fua_at = 2 << 20;
    let fua = pattern(22, PAGE);
    assert_eq!(a.write_flags(CMD_FLAG_FUA, fua_at, &fua), 0);
    assert!(
        backing.durable(fua_at, PAGE) == fua,
        "a FUA write was acknowledged before it was durable on the backing device"
    );
    a.disconnect();
    let report = srv.stop();
    assert_eq!(report.requests.fua, 1);
}
