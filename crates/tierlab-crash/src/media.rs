//! The stores a checked stack runs on. A crash acts on *physical* stores
//! (a file, a RAM store, a RAID member, a RAID's write-intent bitmap); the
//! policy sees *devices*, each one store or an array of stores. Arrays are
//! tierlab-real's own RAID code (`RaidBackend`) over in-memory stores, so
//! the checker checks the code a real run uses, not a copy of it.
//!
//! Every physical write and flush an array makes is journaled in order,
//! for the executor to log: an array's member writes are logged when the
//! device write completes (the array runs them then, one after the other),
//! its member flushes when the device flush is submitted (run then, so a
//! flush covers exactly the writes completed before it, as the contract
//! says).
//!
//! Every persistent store carries a volume id fixed by its index
//! ([`store_id`]), so the headers a policy writes record ids and every
//! restart checks its binding as a real run does; a volatile (RAM) store
//! has none.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use tierlab_core::policy::{StoreError, StoreOp};
use tierlab_core::volume::{LabelKind, VolumeId, VolumeLabel};
use tierlab_real::backend::Backend;
use tierlab_real::error::BackendError;
use tierlab_real::raid::RaidBackend;

use crate::CrashError;

/// A policy device: one physical store, or an array over several.
#[derive(Clone, Debug)]
pub enum DeviceMap {
    Store(usize),
    /// A `model = "raid"` table whose members' (and bitmap's) paths were
    /// rewritten to `phys:N`, the physical store each is.
    Raid {
        table: toml::Table,
        name: String,
        /// Test only: the bitmap's page is not flushed before member
        /// writes (the checker must catch it).
        broken_bitmap_skip_flush: bool,
    },
}

/// A physical write or flush, in the order it happened.
#[derive(Debug)]
pub enum PhysOp {
    Write {
        store: usize,
        offset_bytes: u64,
        data: Vec<u8>,
    },
    Flush {
        store: usize,
    },
}

type Journal = Arc<Mutex<Vec<PhysOp>>>;

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The volume id of persistent store `index`: fixed, so every restart
/// of a checked stack sees the stores its headers recorded.
pub fn store_id(index: usize) -> VolumeId {
    VolumeId::derive("crashcheck-store", &[&(index as u64).to_le_bytes()])
}

fn store_label(index: usize, volatile: bool) -> Option<VolumeLabel> {
    (!volatile).then_some(VolumeLabel {
        id: store_id(index),
        kind: LabelKind::Synthetic,
        created_now: false,
    })
}

/// One physical store as an array member sees it.
struct MemStore {
    index: usize,
    data: Arc<Mutex<Vec<u8>>>,
    journal: Journal,
    volatile: bool,
}

impl MemStore {
    fn range(&self, offset: u64, len: usize) -> io::Result<std::ops::Range<usize>> {
        let cap = locked(&self.data).len() as u64;
        if offset.checked_add(len as u64).is_none_or(|e| e > cap) {
            return Err(io::Error::other(format!(
                "{len} bytes at {offset} are past the end of store {} ({cap} bytes)",
                self.index
            )));
        }
        Ok(offset as usize..offset as usize + len)
    }
}

impl Backend for MemStore {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let r = self.range(offset, buf.len())?;
        buf.copy_from_slice(&locked(&self.data)[r]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let r = self.range(offset, buf.len())?;
        locked(&self.data)[r].copy_from_slice(buf);
        locked(&self.journal).push(PhysOp::Write {
            store: self.index,
            offset_bytes: offset,
            data: buf.to_vec(),
        });
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        locked(&self.journal).push(PhysOp::Flush { store: self.index });
        Ok(())
    }
    fn capacity_bytes(&self) -> u64 {
        locked(&self.data).len() as u64
    }
    fn describe(&self) -> String {
        format!("store {}", self.index)
    }
    fn is_memory(&self) -> bool {
        true
    }
    fn volume_label(&self) -> io::Result<Option<VolumeLabel>> {
        Ok(store_label(self.index, self.volatile))
    }
}

enum Dev {
    Store(usize),
    Array(Box<RaidBackend>),
}

pub struct Media {
    phys: Vec<Arc<Mutex<Vec<u8>>>>,
    /// Per physical store: lost at a crash (RAM), so without an id.
    volatile: Vec<bool>,
    devs: Vec<Dev>,
    journal: Journal,
}

/// The physical store a rewritten path names.
fn phys_index(t: &toml::Table, at: &str) -> Result<usize, BackendError> {
    t.get("path")
        .and_then(|p| p.as_str())
        .and_then(|p| p.strip_prefix("phys:"))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| BackendError::key(at, "no store assigned (checker bug)"))
}

impl Media {
    /// The devices of `maps` over physical stores holding `images`
    /// (`volatile[p]`: store p is RAM). With `fail = Some((device,
    /// member))` that array member is lost (its store is not used): what a
    /// rebuild would read.
    pub fn new(
        maps: &[DeviceMap],
        images: Vec<Vec<u8>>,
        volatile: &[bool],
        fail: Option<(usize, usize)>,
    ) -> Result<Media, CrashError> {
        assert_eq!(images.len(), volatile.len(), "one volatile flag per store");
        let phys: Vec<Arc<Mutex<Vec<u8>>>> = images
            .into_iter()
            .map(|i| Arc::new(Mutex::new(i)))
            .collect();
        let journal: Journal = Arc::default();
        let mem = |t: &toml::Table, at: &str| -> Result<Box<dyn Backend>, BackendError> {
            let index = phys_index(t, at)?;
            Ok(Box::new(MemStore {
                index,
                data: phys[index].clone(),
                journal: journal.clone(),
                volatile: volatile[index],
            }))
        };
        let mut devs = Vec::new();
        for (d, map) in maps.iter().enumerate() {
            devs.push(match map {
                DeviceMap::Store(p) => Dev::Store(*p),
                DeviceMap::Raid {
                    table,
                    name,
                    broken_bitmap_skip_flush,
                } => {
                    let mut table = table.clone();
                    if let Some((fd, member)) = fail
                        && fd == d
                    {
                        let mut failed: Vec<toml::Value> = match table.get("failed_members") {
                            Some(toml::Value::Array(a)) => a.clone(),
                            _ => Vec::new(),
                        };
                        failed.push(toml::Value::Integer(member as i64));
                        table.insert("failed_members".into(), toml::Value::Array(failed));
                    }
                    let mut array = tierlab_real::raid::open_with(
                        &table,
                        &format!("devices[{d}] ({name})"),
                        &mut |t, at| mem(t, at),
                        &mut |t, at, _need| mem(t, at),
                    )
                    .map_err(CrashError::Media)?;
                    if *broken_bitmap_skip_flush {
                        array.broken_bitmap_skip_flush();
                    }
                    Dev::Array(Box::new(array))
                }
            });
        }
        let m = Media {
            phys,
            volatile: volatile.to_vec(),
            devs,
            journal,
        };
        // Opening an array may resynchronise it: that is part of the state.
        m.take_journal();
        Ok(m)
    }

    pub fn devices(&self) -> usize {
        self.devs.len()
    }

    pub fn capacity_bytes(&self, device: usize) -> u64 {
        match &self.devs[device] {
            Dev::Store(p) => locked(&self.phys[*p]).len() as u64,
            Dev::Array(a) => a.capacity_bytes(),
        }
    }

    /// The physical store of a plain device (None for an array).
    pub fn store_of(&self, device: usize) -> Option<usize> {
        match &self.devs[device] {
            Dev::Store(p) => Some(*p),
            Dev::Array(_) => None,
        }
    }

    /// Every physical store's bytes now.
    pub fn images(&self) -> Vec<Vec<u8>> {
        self.phys.iter().map(|p| locked(p).clone()).collect()
    }

    /// The physical writes and flushes since the last call, in order.
    pub fn take_journal(&self) -> Vec<PhysOp> {
        std::mem::take(&mut *locked(&self.journal))
    }

    pub fn read(&self, device: usize, offset_bytes: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let len_bytes = buf.len() as u64;
        match &self.devs[device] {
            Dev::Store(p) => {
                let s = locked(&self.phys[*p]);
                let capacity_bytes = s.len() as u64;
                let src = s
                    .get(offset_bytes as usize..offset_bytes as usize + buf.len())
                    .ok_or_else(|| {
                        StoreError::past_end(
                            device,
                            StoreOp::Read,
                            offset_bytes,
                            len_bytes,
                            capacity_bytes,
                        )
                    })?;
                buf.copy_from_slice(src);
                Ok(())
            }
            Dev::Array(a) => a
                .read_at(buf, offset_bytes)
                .map_err(|e| StoreError::io(device, StoreOp::Read, offset_bytes, len_bytes, e)),
        }
    }

    /// Writes `data` (None: zeros, a trim) at `offset_bytes`.
    pub fn write(
        &self,
        device: usize,
        offset_bytes: u64,
        data: Option<&[u8]>,
        len: usize,
    ) -> Result<(), StoreError> {
        match &self.devs[device] {
            Dev::Store(p) => {
                let mut s = locked(&self.phys[*p]);
                let capacity_bytes = s.len() as u64;
                let dst = s
                    .get_mut(offset_bytes as usize..offset_bytes as usize + len)
                    .ok_or_else(|| {
                        StoreError::past_end(
                            device,
                            StoreOp::Write,
                            offset_bytes,
                            len as u64,
                            capacity_bytes,
                        )
                    })?;
                match data {
                    Some(d) => dst.copy_from_slice(d),
                    None => dst.fill(0),
                }
                Ok(())
            }
            // An array keeps trimmed ranges (Backend::trim's default).
            Dev::Array(a) => match data {
                Some(d) => a.write_at(d, offset_bytes).map_err(|e| {
                    StoreError::io(device, StoreOp::Write, offset_bytes, len as u64, e)
                }),
                None => Ok(()),
            },
        }
    }

    pub fn flush(&self, device: usize) -> Result<(), StoreError> {
        match &self.devs[device] {
            Dev::Store(_) => Ok(()),
            Dev::Array(a) => a
                .flush()
                .map_err(|e| StoreError::io(device, StoreOp::Sync, 0, 0, e)),
        }
    }
}

/// What the policy's `open` reads and writes (nothing is logged: open
/// runs before the recorded workload, and its result is the base state).
impl tierlab_core::policy::Stores for Media {
    fn capacity_bytes(&self, device: usize) -> u64 {
        Media::capacity_bytes(self, device)
    }
    fn read_at(
        &mut self,
        device: usize,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        let r = self.read(device, offset_bytes, buf);
        self.take_journal();
        r
    }
    fn write_at(
        &mut self,
        device: usize,
        offset_bytes: u64,
        data: &[u8],
    ) -> Result<(), StoreError> {
        let r = self.write(device, offset_bytes, Some(data), data.len());
        self.take_journal();
        r
    }
    fn sync(&mut self, device: usize) -> Result<(), StoreError> {
        let r = self.flush(device);
        self.take_journal();
        r
    }
    fn volume_label(&mut self, device: usize) -> Result<Option<VolumeLabel>, StoreError> {
        match &self.devs[device] {
            Dev::Store(p) => Ok(store_label(*p, self.volatile[*p])),
            Dev::Array(a) => a
                .volume_label()
                .map_err(|e| StoreError::io(device, StoreOp::Label, 0, 0, e)),
        }
    }
}
