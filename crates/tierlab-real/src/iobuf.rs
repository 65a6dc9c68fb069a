//! Device IO buffers: aligned for O_DIRECT (so no IO needs a bounce
//! copy), and reused from a pool (so the hot path allocates nothing).
//!
//! The io_uring engine registers some of its pool's buffers with the ring
//! (IORING_REGISTER_BUFFERS): the kernel then maps them once, not per IO.
//! Such a buffer remembers its index (`registered`); the ring checks the
//! address against its table before it uses the index, so a buffer that
//! left the pool (dropped, or handed to another engine) is never taken
//! for one it is not.

use std::ptr::NonNull;

/// Alignment O_DIRECT needs for buffers, offsets and sizes here.
pub const DIRECT_ALIGN: usize = 4096;

/// An aligned heap buffer holding `len` bytes of an IO (capacity: a power
/// of two of at least `DIRECT_ALIGN`, or 0 for IOs without data).
pub struct IoBuf {
    ptr: NonNull<u8>,
    cap_bytes: usize,
    len_bytes: usize,
    /// Index in the ring's registered buffers, or `NOT_REGISTERED`.
    registered: u32,
}

const NOT_REGISTERED: u32 = u32::MAX;

// SAFETY: an owned allocation, like a Box<[u8]>.
unsafe impl Send for IoBuf {}

impl IoBuf {
    /// No bytes, no allocation (flushes, trims).
    pub fn empty() -> IoBuf {
        IoBuf {
            ptr: NonNull::dangling(),
            cap_bytes: 0,
            len_bytes: 0,
            registered: NOT_REGISTERED,
        }
    }

    /// A zeroed buffer of capacity `cap_bytes` (> 0, a multiple of
    /// `DIRECT_ALIGN`), holding `len_bytes` ≤ `cap_bytes`.
    fn alloc(cap_bytes: usize, len_bytes: usize) -> IoBuf {
        assert!(cap_bytes > 0 && cap_bytes % DIRECT_ALIGN == 0);
        assert!(len_bytes <= cap_bytes);
        let layout =
            std::alloc::Layout::from_size_align(cap_bytes, DIRECT_ALIGN).expect("a valid layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(ptr) else {
            std::alloc::handle_alloc_error(layout);
        };
        IoBuf {
            ptr,
            cap_bytes,
            len_bytes,
            registered: NOT_REGISTERED,
        }
    }

    /// A zeroed buffer of `len_bytes`, outside any pool (a thread's bounce
    /// buffer, a test's).
    pub fn zeroed(len_bytes: usize) -> IoBuf {
        if len_bytes == 0 {
            return IoBuf::empty();
        }
        IoBuf::alloc(class_bytes(len_bytes), len_bytes)
    }

    pub fn len(&self) -> usize {
        self.len_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len_bytes == 0
    }

    pub fn capacity(&self) -> usize {
        self.cap_bytes
    }

    /// Sets the length (≤ capacity). Bytes past the old length keep what
    /// they held (zeros, or an earlier IO's data).
    pub fn set_len(&mut self, len_bytes: usize) {
        assert!(
            len_bytes <= self.cap_bytes,
            "{len_bytes} bytes in a buffer of {}",
            self.cap_bytes
        );
        self.len_bytes = len_bytes;
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len_bytes` ≤ the initialised (zeroed at allocation)
        // capacity, which lives as long as `self`; dangling only when 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len_bytes) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` makes it unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len_bytes) }
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The registered-buffer index this buffer was given, if any.
    pub(crate) fn registered(&self) -> Option<u32> {
        (self.registered != NOT_REGISTERED).then_some(self.registered)
    }

    /// The (address, capacity) the kernel is told about at registration.
    pub(crate) fn region(&mut self) -> (*mut u8, usize) {
        (self.ptr.as_ptr(), self.cap_bytes)
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if self.cap_bytes > 0 {
            let layout = std::alloc::Layout::from_size_align(self.cap_bytes, DIRECT_ALIGN)
                .expect("as allocated");
            // SAFETY: allocated with this layout in `alloc`.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({} of {} bytes)", self.len_bytes, self.cap_bytes)
    }
}

/// The capacity class of an IO of `len_bytes`: the next power of two, at
/// least `DIRECT_ALIGN`.
fn class_bytes(len_bytes: usize) -> usize {
    len_bytes.max(DIRECT_ALIGN).next_power_of_two()
}

/// Free buffers, by capacity, for reuse. Holds at most what was once in
/// use at the same time (bounded per class as well), so a run's memory
/// stays at its peak of IOs in flight.
pub struct BufPool {
    /// Registered buffers (all `registered_bytes` large), used first for
    /// any IO that fits.
    registered: Vec<IoBuf>,
    registered_bytes: usize,
    /// `free[k]` holds buffers of `DIRECT_ALIGN << k` bytes.
    free: Vec<Vec<IoBuf>>,
}

/// Most free buffers kept per capacity class; more are freed.
const FREE_PER_CLASS_MAX: usize = 1024;

impl Default for BufPool {
    fn default() -> Self {
        BufPool::new()
    }
}

impl BufPool {
    pub fn new() -> BufPool {
        BufPool {
            registered: Vec::new(),
            registered_bytes: 0,
            free: Vec::new(),
        }
    }

    /// A buffer holding `len_bytes`; its bytes are whatever it held last
    /// (zeros when new): a device read overwrites them, a write fills them.
    pub fn take(&mut self, len_bytes: usize) -> IoBuf {
        if len_bytes == 0 {
            return IoBuf::empty();
        }
        if len_bytes <= self.registered_bytes
            && let Some(mut b) = self.registered.pop()
        {
            b.set_len(len_bytes);
            return b;
        }
        let cap = class_bytes(len_bytes);
        let k = (cap / DIRECT_ALIGN).trailing_zeros() as usize;
        match self.free.get_mut(k).and_then(Vec::pop) {
            Some(mut b) => {
                b.set_len(len_bytes);
                b
            }
            None => IoBuf::alloc(cap, len_bytes),
        }
    }

    /// Takes back a buffer `take` gave (any other is kept as well, or freed).
    pub fn give(&mut self, b: IoBuf) {
        if b.cap_bytes == 0 {
            return;
        }
        if b.registered().is_some() {
            self.registered.push(b);
            return;
        }
        debug_assert!(b.cap_bytes.is_power_of_two() && b.cap_bytes >= DIRECT_ALIGN);
        let k = (b.cap_bytes / DIRECT_ALIGN).trailing_zeros() as usize;
        if self.free.len() <= k {
            self.free.resize_with(k + 1, Vec::new);
        }
        if self.free[k].len() < FREE_PER_CLASS_MAX {
            self.free[k].push(b);
        }
    }

    /// `count` new buffers of `bytes` each (a power of two ≥ 4 KiB), to be
    /// registered with a ring: index `i` is the i-th. The pool hands them
    /// out first (`take`) once `registered` is called.
    pub(crate) fn new_registered(count: usize, bytes: usize) -> Vec<IoBuf> {
        assert!(bytes.is_power_of_two() && bytes >= DIRECT_ALIGN);
        assert!(count < NOT_REGISTERED as usize);
        (0..count)
            .map(|i| {
                let mut b = IoBuf::alloc(bytes, 0);
                b.registered = i as u32;
                b
            })
            .collect()
    }

    /// Adds the buffers the ring registered (`new_registered`).
    pub(crate) fn registered(&mut self, bufs: Vec<IoBuf>, bytes: usize) {
        debug_assert!(bufs.iter().all(|b| b.cap_bytes == bytes));
        self.registered_bytes = bytes;
        self.registered.extend(bufs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_sized_and_reused() {
        let mut pool = BufPool::new();
        let mut a = pool.take(4096);
        assert_eq!(a.as_mut_ptr() as usize % DIRECT_ALIGN, 0);
        assert_eq!((a.len(), a.capacity()), (4096, 4096));
        assert!(
            a.as_slice().iter().all(|&b| b == 0),
            "new buffers are zeroed"
        );
        a.as_mut_slice().fill(7);
        let p = a.as_mut_ptr();
        pool.give(a);
        let mut b = pool.take(1000);
        assert_eq!(
            (b.as_mut_ptr(), b.len()),
            (p, 1000),
            "the same buffer again"
        );
        let c = pool.take(5000);
        assert_eq!(c.capacity(), 8192);
        assert!(pool.take(0).is_empty());
    }

    #[test]
    fn registered_buffers_go_first_for_what_fits() {
        let mut pool = BufPool::new();
        pool.registered(BufPool::new_registered(2, 16384), 16384);
        let a = pool.take(4096);
        let b = pool.take(16384);
        let c = pool.take(4096);
        let big = pool.take(20000);
        assert_eq!(
            [
                a.registered(),
                b.registered(),
                c.registered(),
                big.registered()
            ],
            [Some(1), Some(0), None, None]
        );
        pool.give(a);
        assert_eq!(pool.take(512).registered(), Some(1));
    }
}
