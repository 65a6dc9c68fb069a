//! LIRS (Jiang & Zhang, "LIRS: An Efficient Low Inter-reference Recency Set
//! Replacement Policy", SIGMETRICS '02, Section 3.3). Pages are LIR (low
//! inter-reference recency, always resident) or HIR (resident or not).
//! Stack S orders LIR and HIR pages by recency and is pruned so its bottom
//! is always LIR; queue Q holds the resident HIR pages, the eviction
//! candidates. Resident HIR space is 1 % of the capacity (at least 1 page);
//! LIR space is the rest. Until the LIR set is full, new pages become LIR
//! (the paper's warm-up).
//!
//! Metadata for non-resident HIR pages in S is kept until pruning removes
//! them, so memory grows with the distinct pages seen between prunes, as in
//! the paper (which does not bound S).

use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Lir,
    HirResident,
    HirNonResident,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    key: Key,
    state: State,
    in_s: bool,
    in_q: bool,
    /// S links: prev towards the top (more recent).
    s_prev: u32,
    s_next: u32,
    /// Q links: prev towards the end (newer).
    q_prev: u32,
    q_next: u32,
}

#[derive(Clone, Copy)]
struct Ends {
    head: u32,
    tail: u32,
}

pub struct Lirs {
    cap: usize,
    lir_cap: usize,
    lir_count: usize,
    resident: usize,
    map: FxHashMap<Key, u32>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// head = top (most recent), tail = bottom.
    s: Ends,
    /// head = end (newest), tail = front (next victim).
    q: Ends,
}

macro_rules! list_ops {
    ($push:ident, $unlink:ident, $field:ident, $prev:ident, $next:ident, $flag:ident) => {
        fn $push(&mut self, i: u32) {
            let head = self.$field.head;
            let n = &mut self.nodes[i as usize];
            n.$prev = NIL;
            n.$next = head;
            n.$flag = true;
            if head != NIL {
                self.nodes[head as usize].$prev = i;
            } else {
                self.$field.tail = i;
            }
            self.$field.head = i;
        }

        fn $unlink(&mut self, i: u32) {
            let n = self.nodes[i as usize];
            if !n.$flag {
                return;
            }
            if n.$prev != NIL {
                self.nodes[n.$prev as usize].$next = n.$next;
            } else {
                self.$field.head = n.$next;
            }
            if n.$next != NIL {
                self.nodes[n.$next as usize].$prev = n.$prev;
            } else {
                self.$field.tail = n.$prev;
            }
            self.nodes[i as usize].$flag = false;
        }
    };
}

impl Lirs {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        let hir_cap = (cap / 100).max(1);
        Lirs {
            cap,
            lir_cap: cap - hir_cap,
            lir_count: 0,
            resident: 0,
            map: FxHashMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            s: Ends {
                head: NIL,
                tail: NIL,
            },
            q: Ends {
                head: NIL,
                tail: NIL,
            },
        }
    }

    list_ops!(s_push, s_unlink, s, s_prev, s_next, in_s);
    list_ops!(q_push, q_unlink, q, q_prev, q_next, in_q);

    fn state(&self, i: u32) -> State {
        self.nodes[i as usize].state
    }

    fn set_state(&mut self, i: u32, st: State) {
        self.nodes[i as usize].state = st;
    }

    fn alloc(&mut self, key: Key, state: State) -> u32 {
        let n = Node {
            key,
            state,
            in_s: false,
            in_q: false,
            s_prev: NIL,
            s_next: NIL,
            q_prev: NIL,
            q_next: NIL,
        };
        let i = if let Some(i) = self.free.pop() {
            self.nodes[i as usize] = n;
            i
        } else {
            self.nodes.push(n);
            (self.nodes.len() - 1) as u32
        };
        self.map.insert(key, i);
        i
    }

    fn forget(&mut self, i: u32) {
        let k = self.nodes[i as usize].key;
        self.map.remove(&k);
        self.free.push(i);
    }

    /// Moves `i` to the top of S (pushing it if absent).
    fn s_to_top(&mut self, i: u32) {
        self.s_unlink(i);
        self.s_push(i);
    }

    /// Stack pruning: pop HIR pages off the bottom of S until an LIR page
    /// is there; non-resident ones lose their metadata.
    fn prune(&mut self) {
        while self.s.tail != NIL && self.state(self.s.tail) != State::Lir {
            let b = self.s.tail;
            self.s_unlink(b);
            if self.state(b) == State::HirNonResident {
                self.forget(b);
            }
        }
    }

    /// When the LIR set is over its size: the bottom LIR page of S becomes
    /// resident HIR at the end of Q, then S is pruned.
    fn rebalance(&mut self) {
        self.prune();
        while self.lir_count > self.lir_cap && self.s.tail != NIL {
            let b = self.s.tail;
            self.set_state(b, State::HirResident);
            self.lir_count -= 1;
            self.s_unlink(b);
            self.q_push(b);
            self.prune();
        }
    }

    /// Evicts the resident HIR page at the front of Q.
    fn evict(&mut self) -> Option<Key> {
        let v = self.q.tail;
        if v == NIL {
            return None;
        }
        self.q_unlink(v);
        self.resident -= 1;
        let k = self.nodes[v as usize].key;
        if self.nodes[v as usize].in_s {
            self.set_state(v, State::HirNonResident);
        } else {
            self.forget(v);
        }
        Some(k)
    }

    fn miss(&mut self, key: Key) -> Option<Key> {
        let evicted = if self.resident >= self.cap {
            self.evict()
        } else {
            None
        };
        self.resident += 1;
        let existing = self.map.get(&key).copied();
        if self.lir_count < self.lir_cap {
            // Warm-up (or LIR space freed by `remove`): the page is LIR.
            let i = existing.unwrap_or_else(|| self.alloc(key, State::Lir));
            self.set_state(i, State::Lir);
            self.lir_count += 1;
            self.s_to_top(i);
        } else if let Some(i) = existing.filter(|&i| self.nodes[i as usize].in_s) {
            // A non-resident HIR page still in S: its new IRR is smaller
            // than the bottom LIR page's recency, so it becomes LIR and the
            // bottom LIR page is demoted.
            self.set_state(i, State::Lir);
            self.lir_count += 1;
            self.s_to_top(i);
            self.rebalance();
        } else {
            let i = existing.unwrap_or_else(|| self.alloc(key, State::HirResident));
            self.set_state(i, State::HirResident);
            if self.lir_cap > 0 {
                self.s_push(i);
            }
            self.q_push(i);
        }
        evicted
    }
}

impl Eviction for Lirs {
    fn name(&self) -> &'static str {
        "lirs"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn len(&self) -> usize {
        self.resident
    }
    fn access(&mut self, key: Key) -> Access {
        if let Some(&i) = self.map.get(&key) {
            match self.state(i) {
                State::Lir => {
                    let was_bottom = self.s.tail == i;
                    self.s_to_top(i);
                    if was_bottom {
                        self.prune();
                    }
                    return Access::Hit;
                }
                State::HirResident => {
                    if self.nodes[i as usize].in_s {
                        // Re-referenced within the LIR recency horizon:
                        // promote, demote the bottom LIR page.
                        self.set_state(i, State::Lir);
                        self.lir_count += 1;
                        self.q_unlink(i);
                        self.s_to_top(i);
                        self.rebalance();
                    } else {
                        // Stays HIR: to the top of S and the end of Q.
                        if self.lir_cap > 0 {
                            self.s_push(i);
                        }
                        self.q_unlink(i);
                        self.q_push(i);
                    }
                    return Access::Hit;
                }
                State::HirNonResident => {}
            }
        }
        Access::Miss {
            evicted: self.miss(key),
        }
    }
    fn contains(&self, key: Key) -> bool {
        self.map
            .get(&key)
            .is_some_and(|&i| self.state(i) != State::HirNonResident)
    }
    fn insert(&mut self, key: Key) -> Option<Key> {
        if self.contains(key) {
            return None;
        }
        self.miss(key)
    }
    fn remove(&mut self, key: Key) -> bool {
        let Some(&i) = self.map.get(&key) else {
            return false;
        };
        match self.state(i) {
            State::HirNonResident => return false,
            State::Lir => self.lir_count -= 1,
            State::HirResident => {}
        }
        self.resident -= 1;
        self.s_unlink(i);
        self.q_unlink(i);
        self.forget(i);
        self.prune();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed() {
        // Capacity 3: 1 HIR slot, 2 LIR slots.
        let mut c = Lirs::new(3);
        // 1, 2 become LIR (warm-up); 3 is resident HIR (in S and Q).
        for k in [1, 2, 3] {
            assert_eq!(c.access(k), Access::Miss { evicted: None });
        }
        // 4: evicts Q's front (3), which stays in S as non-resident HIR.
        assert_eq!(c.access(4), Access::Miss { evicted: Some(3) });
        assert!(!c.contains(3));
        // S (top->bottom): 4 3 2 1. 3 again: non-resident in S, so it is
        // promoted to LIR; 4 (Q's front) is evicted first; the bottom LIR
        // (1) is demoted to resident HIR in Q and leaves S.
        assert_eq!(c.access(3), Access::Miss { evicted: Some(4) });
        assert!(c.contains(1) && c.contains(2) && c.contains(3));
        // 5: evicts Q's front: 1, although 2 was used less recently.
        assert_eq!(c.access(5), Access::Miss { evicted: Some(1) });
        assert!(c.contains(2));
        // 2 is LIR and at S's bottom: a hit prunes S down to the next LIR.
        assert_eq!(c.access(2), Access::Hit);
        assert_eq!(c.access(6), Access::Miss { evicted: Some(5) });
    }
}
