//! Counting distinct (device, block) pairs at parse speed: the footprint of
//! `trace stats` and of `tierlab cache`'s `%` sizes.
//!
//! A hash set of every block costs a cache miss per first touch and a
//! probe per access once the set outgrows the caches (~150 ns per block on
//! a 4 M-block footprint). Trace footprints are dense runs of block ids, so
//! this keeps one container per region of [`CHUNK_BLOCKS`] blocks of one
//! device, in the manner of roaring bitmaps (Lemire et al.): a sorted array
//! of the blocks seen while the region holds at most [`ARRAY_BLOCKS_MAX`],
//! a bitmap after that. A request spanning many blocks sets whole words.
//!
//! Memory is bounded by the blocks seen, not by the address space: a bitmap
//! region holds more than [`ARRAY_BLOCKS_MAX`] blocks (at most 8 bytes per
//! block), an array region 2 bytes per block, plus a fixed cost per region
//! touched (the index entry and the container header, ~100 bytes), which
//! is what a block alone in its region costs — a sparse trace over a 2^60-byte
//! volume never allocates a bitmap for a region it touched once.

use rustc_hash::FxHashMap;

/// log2 of the blocks per region: 65,536 blocks (256 MiB of 4 KiB blocks).
const CHUNK_BITS: u32 = 16;
/// Blocks per region.
pub const CHUNK_BLOCKS: u64 = 1 << CHUNK_BITS;
const CHUNK_MASK: u64 = CHUNK_BLOCKS - 1;
/// 64-bit words of a region's bitmap (8 KiB).
const BITMAP_WORDS: usize = (CHUNK_BLOCKS / 64) as usize;
/// A region becomes a bitmap when its array would hold more blocks than
/// this: a bitmap then costs at most 8 bytes per block, and an array search
/// stays within 2 KiB (ten probes).
pub const ARRAY_BLOCKS_MAX: usize = 1024;

/// No region cached in `DistinctBlocks::last`.
const NO_CHUNK: u32 = u32::MAX;

enum Chunk {
    /// The region's blocks (offsets within it), sorted and distinct; at
    /// most `ARRAY_BLOCKS_MAX` of them.
    Array(Vec<u16>),
    /// Bit `i` is set when block `i` of the region was seen.
    Bitmap(Box<[u64; BITMAP_WORDS]>),
}

/// A range looked up and prefetched by [`DistinctBlocks::prefetch_range`],
/// to be inserted by [`DistinctBlocks::insert_pending`].
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingRange {
    /// Its region's index in `chunks`, or `NO_CHUNK` to insert
    /// `first..=last` of `device` by `insert_range`.
    chunk: u32,
    lo: u16,
    hi: u16,
    device: u32,
    first: u64,
    last: u64,
}

/// The set of distinct (device, block) pairs seen; only its size is read.
pub struct DistinctBlocks {
    /// (device, region number) → index into `chunks`.
    index: FxHashMap<(u32, u64), u32>,
    chunks: Vec<Chunk>,
    /// The region of the last insert: consecutive requests mostly fall in
    /// the same region, and this spares the index lookup.
    last_key: (u32, u64),
    last_chunk: u32,
    len: u64,
}

impl Default for DistinctBlocks {
    fn default() -> Self {
        Self::new()
    }
}

impl DistinctBlocks {
    pub fn new() -> Self {
        DistinctBlocks {
            index: FxHashMap::default(),
            chunks: Vec::new(),
            last_key: (0, 0),
            last_chunk: NO_CHUNK,
            len: 0,
        }
    }

    /// Distinct pairs inserted so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Inserts one block; true if it was not there yet.
    #[inline]
    pub fn insert(&mut self, device: u32, block: u64) -> bool {
        self.insert_range(device, block, block) == 1
    }

    /// Inserts blocks `first..=last` of `device` (nothing if `last <
    /// first`); returns how many of them were new.
    #[inline]
    pub fn insert_range(&mut self, device: u32, first: u64, last: u64) -> u64 {
        if last < first {
            return 0;
        }
        let mut added = 0;
        let mut chunk_no = first >> CHUNK_BITS;
        let last_chunk_no = last >> CHUNK_BITS;
        loop {
            let lo = if chunk_no == first >> CHUNK_BITS {
                (first & CHUNK_MASK) as u16
            } else {
                0
            };
            let hi = if chunk_no == last_chunk_no {
                (last & CHUNK_MASK) as u16
            } else {
                CHUNK_MASK as u16
            };
            let i = self.chunk_index(device, chunk_no);
            added += add_to_chunk(&mut self.chunks[i], lo, hi);
            if chunk_no == last_chunk_no {
                break;
            }
            chunk_no += 1;
        }
        self.len += added;
        added
    }

    /// Looks up the region of `first..=last` (creating it) and hints the
    /// CPU to load what inserting there will touch (the bitmap word, or the
    /// middle of the array); [`insert_pending`](Self::insert_pending)
    /// inserts the range a few records later without waiting for memory
    /// or looking the region up again. No effect on results.
    #[inline]
    pub fn prefetch_range(&mut self, device: u32, first: u64, last: u64) -> PendingRange {
        if last < first || first >> CHUNK_BITS != last >> CHUNK_BITS {
            // Empty, or across regions (rare): inserted the long way.
            return PendingRange {
                chunk: NO_CHUNK,
                lo: 0,
                hi: 0,
                device,
                first,
                last,
            };
        }
        let i = self.chunk_index(device, first >> CHUNK_BITS);
        let lo = (first & CHUNK_MASK) as u16;
        let p = match &self.chunks[i] {
            Chunk::Bitmap(words) => words[lo as usize / 64..].as_ptr().cast::<i8>(),
            Chunk::Array(blocks) => blocks[blocks.len() / 2..].as_ptr().cast::<i8>(),
        };
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults; the address is within (or one
        // past the end of) a live allocation.
        unsafe {
            std::arch::x86_64::_mm_prefetch(p, std::arch::x86_64::_MM_HINT_T0)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
        PendingRange {
            chunk: i as u32,
            lo,
            hi: (last & CHUNK_MASK) as u16,
            device,
            first,
            last,
        }
    }

    /// Inserts a range from [`prefetch_range`](Self::prefetch_range) of this
    /// set; returns how many of its blocks were new.
    #[inline]
    pub fn insert_pending(&mut self, p: PendingRange) -> u64 {
        if p.chunk == NO_CHUNK {
            return self.insert_range(p.device, p.first, p.last);
        }
        let added = add_to_chunk(&mut self.chunks[p.chunk as usize], p.lo, p.hi);
        self.len += added;
        added
    }

    /// The index of region `chunk_no` of `device` in `chunks`, creating
    /// an empty one.
    #[inline]
    fn chunk_index(&mut self, device: u32, chunk_no: u64) -> usize {
        let key = (device, chunk_no);
        if self.last_chunk != NO_CHUNK && self.last_key == key {
            return self.last_chunk as usize;
        }
        let next = self.chunks.len();
        let i = *self.index.entry(key).or_insert_with(|| {
            // More than 2^32 - 1 regions would need 2^32 × 100 bytes of
            // memory first; say so rather than alias regions.
            u32::try_from(next)
                .ok()
                .filter(|&i| i != NO_CHUNK)
                .expect("distinct-block regions exceed 2^32 - 1")
        });
        if i as usize == next {
            self.chunks.push(Chunk::Array(Vec::new()));
        }
        self.last_key = key;
        self.last_chunk = i;
        i as usize
    }

    /// Heap bytes held (index, containers, arrays and bitmaps), not
    /// counting the allocator's own overhead.
    pub fn heap_bytes(&self) -> usize {
        let index_slot = std::mem::size_of::<((u32, u64), u32)>() + 1;
        let mut bytes = self.index.capacity() * index_slot
            + self.chunks.capacity() * std::mem::size_of::<Chunk>();
        for c in &self.chunks {
            bytes += match c {
                Chunk::Array(a) => a.capacity() * 2,
                Chunk::Bitmap(_) => BITMAP_WORDS * 8,
            };
        }
        bytes
    }

    /// Regions held as arrays and as bitmaps (for tests and tuning).
    pub fn regions(&self) -> (usize, usize) {
        let bitmaps = self
            .chunks
            .iter()
            .filter(|c| matches!(c, Chunk::Bitmap(_)))
            .count();
        (self.chunks.len() - bitmaps, bitmaps)
    }
}

/// Adds offsets `lo..=hi` to one region; returns how many were new.
#[inline]
fn add_to_chunk(chunk: &mut Chunk, lo: u16, hi: u16) -> u64 {
    debug_assert!(lo <= hi);
    match chunk {
        Chunk::Bitmap(words) => set_bits(words, lo, hi),
        Chunk::Array(blocks) => {
            // The blocks of lo..=hi already present are one sorted run.
            let start = blocks.partition_point(|&b| b < lo);
            let end = start + blocks[start..].partition_point(|&b| b <= hi);
            let range_len = (hi - lo) as usize + 1;
            let new = range_len - (end - start);
            if new == 0 {
                return 0;
            }
            if blocks.len() + new <= ARRAY_BLOCKS_MAX {
                blocks.splice(start..end, lo..=hi);
                debug_assert!(blocks.windows(2).all(|w| w[0] < w[1]));
            } else {
                let mut words = Box::new([0u64; BITMAP_WORDS]);
                for &b in blocks.iter() {
                    words[b as usize / 64] |= 1 << (b % 64);
                }
                let added = set_bits(&mut words, lo, hi);
                debug_assert_eq!(added as usize, new);
                *chunk = Chunk::Bitmap(words);
            }
            new as u64
        }
    }
}

/// Sets bits `lo..=hi`; returns how many were clear.
#[inline]
fn set_bits(words: &mut [u64; BITMAP_WORDS], lo: u16, hi: u16) -> u64 {
    let (lo, hi) = (lo as usize, hi as usize);
    let (first_word, last_word) = (lo / 64, hi / 64);
    let mut added = 0u64;
    for (w, word) in words
        .iter_mut()
        .enumerate()
        .take(last_word + 1)
        .skip(first_word)
    {
        let from = if w == first_word { lo % 64 } else { 0 };
        let to = if w == last_word { hi % 64 } else { 63 };
        // Bits from..=to; `to - from` is at most 63, so the shift is defined.
        let mask = (u64::MAX >> (63 - (to - from))) << from;
        added += (mask & !*word).count_ones() as u64;
        *word |= mask;
    }
    added
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustc_hash::FxHashSet;

    /// The obvious set, for comparison.
    fn reference(inserts: &[(u32, u64, u64)]) -> u64 {
        let mut set = FxHashSet::default();
        for &(d, a, b) in inserts {
            for x in a..=b {
                set.insert((d, x));
            }
        }
        set.len() as u64
    }

    #[test]
    fn hand_counted() {
        let mut s = DistinctBlocks::new();
        assert!(s.is_empty());
        assert!(s.insert(0, 5));
        assert!(!s.insert(0, 5));
        // Another device: the same block is another pair.
        assert!(s.insert(1, 5));
        // 3..=7 adds 3, 4, 6, 7 (5 is there).
        assert_eq!(s.insert_range(0, 3, 7), 4);
        // Across the region boundary: 65534, 65535 | 65536, 65537.
        assert_eq!(s.insert_range(0, 65_534, 65_537), 4);
        assert_eq!(s.insert_range(0, 65_535, 65_536), 0);
        // Empty range.
        assert_eq!(s.insert_range(0, 9, 8), 0);
        // The last blocks of the u64 space, and the one region there.
        assert_eq!(s.insert_range(0, u64::MAX - 2, u64::MAX), 3);
        assert!(!s.insert(0, u64::MAX));
        assert_eq!(s.len(), 1 + 1 + 4 + 4 + 3);
        assert_eq!(s.regions(), (4, 0));
    }

    #[test]
    fn array_turns_into_bitmap_exactly() {
        let mut s = DistinctBlocks::new();
        // Every other block: 1024 blocks stay an array.
        for b in 0..ARRAY_BLOCKS_MAX as u64 {
            assert!(s.insert(3, 2 * b));
        }
        assert_eq!(s.regions(), (1, 0));
        // A range over them adds only the odd blocks and makes a bitmap.
        let last = 2 * ARRAY_BLOCKS_MAX as u64 - 2;
        assert_eq!(s.insert_range(3, 0, last), ARRAY_BLOCKS_MAX as u64 - 1);
        assert_eq!(s.regions(), (0, 1));
        assert_eq!(s.len(), last + 1);
        // A whole region in one range, then again.
        assert_eq!(
            s.insert_range(3, 0, CHUNK_BLOCKS - 1),
            CHUNK_BLOCKS - last - 1
        );
        assert_eq!(s.insert_range(3, 0, CHUNK_BLOCKS - 1), 0);
        assert_eq!(s.len(), CHUNK_BLOCKS);
    }

    #[test]
    fn matches_a_hash_set_on_random_ranges() {
        // splitmix64: ranges of 1..=300 blocks, dense and sparse areas,
        // several devices, region boundaries crossed often.
        let mut state = 7u64;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let mut inserts = Vec::new();
        let mut s = DistinctBlocks::new();
        let mut total_added = 0;
        for _ in 0..60_000 {
            let z = next();
            let device = (z % 3) as u32;
            let first = match z >> 60 {
                0 => next() >> 4,               // anywhere in a 2^60 space
                1..=5 => next() % 300_000,      // a dense area: bitmaps
                _ => (next() % 2_000) * 65_536, // one region in 2,000: arrays
            };
            let last = first.saturating_add((z >> 8) % 300);
            inserts.push((device, first, last));
            total_added += s.insert_range(device, first, last);
        }
        assert_eq!(s.len(), reference(&inserts));
        assert_eq!(total_added, s.len());
        let (arrays, bitmaps) = s.regions();
        assert!(
            arrays > 100 && bitmaps > 5,
            "{arrays} arrays, {bitmaps} bitmaps"
        );
    }

    #[test]
    fn prefetched_ranges_insert_the_same() {
        let ranges = [
            (0, 5, 9),
            (0, 9, 5),           // empty
            (1, 65_530, 65_540), // across a region edge
            (0, 7, 7),
            (2, u64::MAX - 1, u64::MAX),
            (0, 0, 3000), // turns the region into a bitmap
            (0, 2999, 3001),
        ];
        let mut direct = DistinctBlocks::new();
        let mut ahead = DistinctBlocks::new();
        let pending: Vec<PendingRange> = ranges
            .iter()
            .map(|&(d, a, b)| ahead.prefetch_range(d, a, b))
            .collect();
        for (&(d, a, b), p) in ranges.iter().zip(pending) {
            assert_eq!(ahead.insert_pending(p), direct.insert_range(d, a, b));
        }
        assert_eq!(ahead.len(), direct.len());
        // Device 0: blocks 0..=3001; device 1: 11; device 2: 2.
        assert_eq!(ahead.len(), 3002 + 11 + 2);
    }

    #[test]
    fn sparse_blocks_cost_bounded_memory() {
        // One block every 2^40 blocks (4 PiB at 4 KiB): a bitmap per region
        // would be 8 KiB per block; this must stay near the per-region cost.
        let mut s = DistinctBlocks::new();
        let n = 20_000u64;
        for i in 0..n {
            s.insert(0, i << 40);
        }
        assert_eq!(s.len(), n);
        assert_eq!(s.regions(), (n as usize, 0));
        let per_block = s.heap_bytes() as f64 / n as f64;
        assert!(per_block < 128.0, "{per_block} bytes per sparse block");
        // Dense: a bit per block plus a little.
        let mut d = DistinctBlocks::new();
        d.insert_range(0, 0, 100 * CHUNK_BLOCKS - 1);
        let per_block = d.heap_bytes() as f64 / d.len() as f64;
        assert!(per_block < 0.2, "{per_block} bytes per dense block");
    }
}
