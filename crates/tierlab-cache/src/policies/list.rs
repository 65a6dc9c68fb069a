//! Intrusive doubly-linked lists over one `Vec` of nodes (indices, not
//! pointers): several lists share an arena so a node can move between them
//! (ARC's T1 -> B1, S3-FIFO's small -> main) without allocating. Freed slots
//! are recycled, so a warmed-up cache allocates nothing per access.

use crate::Key;

/// "No node": the end of a list.
pub(crate) const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    pub key: Key,
    /// Towards the head (more recent insertion).
    pub prev: u32,
    /// Towards the tail (older).
    pub next: u32,
    /// Which list the node is on (policy-defined).
    pub tag: u8,
    /// Policy-defined per-page state (reference bit, frequency, ...).
    pub aux: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Arena {
    pub nodes: Vec<Node>,
    free: Vec<u32>,
}

impl Arena {
    pub fn with_capacity(n: usize) -> Self {
        Arena {
            nodes: Vec::with_capacity(n),
            free: Vec::new(),
        }
    }

    #[inline]
    pub fn alloc(&mut self, key: Key, tag: u8) -> u32 {
        let node = Node {
            key,
            prev: NIL,
            next: NIL,
            tag,
            aux: 0,
        };
        if let Some(i) = self.free.pop() {
            self.nodes[i as usize] = node;
            i
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        }
    }

    #[inline]
    pub fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    #[inline]
    pub fn get(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }

    #[inline]
    pub fn get_mut(&mut self, i: u32) -> &mut Node {
        &mut self.nodes[i as usize]
    }
}

/// Head = most recently inserted (MRU), tail = oldest (LRU / FIFO front).
#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    pub head: u32,
    pub tail: u32,
    pub len: usize,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl List {
    #[inline]
    pub fn push_front(&mut self, a: &mut Arena, i: u32) {
        let head = self.head;
        {
            let n = a.get_mut(i);
            n.prev = NIL;
            n.next = head;
        }
        if head != NIL {
            a.get_mut(head).prev = i;
        } else {
            self.tail = i;
        }
        self.head = i;
        self.len += 1;
    }

    #[inline]
    pub fn unlink(&mut self, a: &mut Arena, i: u32) {
        let (p, nx) = {
            let n = a.get(i);
            (n.prev, n.next)
        };
        if p != NIL {
            a.get_mut(p).next = nx;
        } else {
            self.head = nx;
        }
        if nx != NIL {
            a.get_mut(nx).prev = p;
        } else {
            self.tail = p;
        }
        self.len -= 1;
    }

    #[inline]
    pub fn pop_back(&mut self, a: &mut Arena) -> Option<u32> {
        let t = self.tail;
        if t == NIL {
            return None;
        }
        self.unlink(a, t);
        Some(t)
    }

    #[inline]
    pub fn move_to_front(&mut self, a: &mut Arena, i: u32) {
        if self.head != i {
            self.unlink(a, i);
            self.push_front(a, i);
        }
    }
}
