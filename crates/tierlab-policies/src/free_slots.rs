//! Free cache slots (the page cache's, HSWD's per set), handed out so
//! that consecutive pages get consecutive slots where the layout allows: a page admitted right after its
//! predecessor takes the slot after the predecessor's when it is free (so
//! a sequential write or fill into a cache with room is one device IO);
//! otherwise the slot freed most recently (a stack, as before, which keeps
//! a fresh cache filling slots 0, 1, 2, … in order).

/// Free slots: a membership bitmap and a stack of candidates (it may hold
/// slots taken since through `take`, skipped when popped).
pub(crate) struct FreeSlots {
    is_free: Vec<bool>,
    count: u64,
    stack: Vec<u64>,
}

impl FreeSlots {
    /// Every one of `slots` slots free, slot 0 handed out first.
    pub(crate) fn all(slots: u64) -> FreeSlots {
        FreeSlots::from_free(slots, |_| true)
    }

    /// The slots `free(slot)` says are free, the lowest handed out first.
    pub(crate) fn from_free(slots: u64, free: impl Fn(u64) -> bool) -> FreeSlots {
        let is_free: Vec<bool> = (0..slots).map(free).collect();
        let stack: Vec<u64> = (0..slots).rev().filter(|&s| is_free[s as usize]).collect();
        FreeSlots {
            count: stack.len() as u64,
            is_free,
            stack,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.count
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// A slot becomes free.
    pub(crate) fn push(&mut self, slot: u64) {
        let s = slot as usize;
        assert!(!self.is_free[s], "slot {slot} freed twice");
        self.is_free[s] = true;
        self.count += 1;
        self.stack.push(slot);
        // Slots taken through `take` stay in the stack until popped: keep
        // it bounded by rebuilding it from the bitmap now and then.
        if self.stack.len() > 2 * self.is_free.len() + 64 {
            let is_free = &self.is_free;
            self.stack.retain(|&s| is_free[s as usize]);
            self.stack.sort_unstable_by(|a, b| b.cmp(a));
            self.stack.dedup();
        }
    }

    /// A free slot: `after + 1` when that one is free (the slot following
    /// the previous page's), else the most recently freed.
    pub(crate) fn take(&mut self, after: Option<u64>) -> Option<u64> {
        if let Some(s) = after.and_then(|a| a.checked_add(1))
            && (s as usize) < self.is_free.len()
            && self.is_free[s as usize]
        {
            self.is_free[s as usize] = false;
            self.count -= 1;
            return Some(s);
        }
        while let Some(s) = self.stack.pop() {
            if self.is_free[s as usize] {
                self.is_free[s as usize] = false;
                self.count -= 1;
                return Some(s);
            }
        }
        debug_assert_eq!(self.count, 0);
        None
    }

    /// The free slots, ascending.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.is_free.len() as u64).filter(|&s| self.is_free[s as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::FreeSlots;

    #[test]
    fn a_fresh_set_hands_out_slots_in_order_and_follows_a_neighbour() {
        let mut f = FreeSlots::all(8);
        assert_eq!((f.take(None), f.take(None)), (Some(0), Some(1)));
        // After slot 1: slot 2, even when others were freed since.
        f.push(0);
        assert_eq!(f.take(Some(1)), Some(2));
        // No neighbour hint: the most recently freed.
        assert_eq!(f.take(None), Some(0));
        // A taken neighbour: fall back to the stack (3, the lowest left).
        assert_eq!(f.take(Some(1)), Some(3));
        assert_eq!(f.len(), 4);
        assert_eq!(f.iter().collect::<Vec<_>>(), vec![4, 5, 6, 7]);
    }

    #[test]
    fn stale_stack_entries_are_skipped_and_the_stack_stays_bounded() {
        let mut f = FreeSlots::all(4);
        for _ in 0..1000 {
            // Take slot 2 through the neighbour hint (its stack entry goes
            // stale), then free it again.
            assert_eq!(f.take(Some(1)), Some(2));
            f.push(2);
        }
        assert!(f.stack.len() <= 2 * 4 + 64 + 1);
        let mut got: Vec<u64> = std::iter::from_fn(|| f.take(None)).collect();
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2, 3], "each free slot exactly once");
        assert!(f.is_empty());
    }
}
