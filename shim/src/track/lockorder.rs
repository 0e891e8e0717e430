//! Lock order: the exclusive locks each thread holds, and an edge A → B each time B is taken while
//! A is held. A cycle of such edges is a potential deadlock (a lock-order inversion), reported by
//! the analyzer even when the run did not hang.
//!
//! Each thread keeps its held locks in a short array and remembers the edges it has already seen
//! in a small direct-mapped cache, so repeating a nested acquisition costs a few compares; only an
//! edge new to the thread takes the slow path (a process-wide set, and a chain and a record for an
//! edge new to the process).

use std::sync::atomic::Ordering;

use waitshim_format::LockOrder;

use super::objects::ObjEntry;
use super::threads::{Inside, ThreadRec};
use super::{tracker, Tracker};
use crate::clock::now_ns;

/// Held locks tracked per thread; deeper nesting is not followed.
pub const MAX_HELD: usize = 16;
const EDGE_CACHE: usize = 64;

/// Owner-only lock-order state of a thread.
pub struct Held {
    pub locks: [(usize, *const ObjEntry); MAX_HELD],
    pub len: usize,
    /// Locks taken beyond `MAX_HELD`, released without being looked for.
    pub overflow: usize,
    /// The one lock held, when the quick path (`engage::engaged_quick`) took it: only its
    /// address is noted, and it is not in `locks` (0: none). Taking or waiting for another lock
    /// while it is held moves it there first ([`Held::settle`]).
    pub quick: usize,
    edges: [(u64, u64); EDGE_CACHE],
}

impl Default for Held {
    fn default() -> Self {
        Held {
            locks: [(0, std::ptr::null()); MAX_HELD],
            len: 0,
            overflow: 0,
            quick: 0,
            edges: [(0, 0); EDGE_CACHE],
        }
    }
}

impl Held {
    /// `obj` is taken: note the edges from every lock held, then hold it.
    #[inline(always)]
    pub fn push(&mut self, t: &ThreadRec, addr: usize, obj: &ObjEntry, edges: bool) {
        if self.quick != 0 {
            self.settle(t);
        }
        if edges && self.len > 0 {
            self.note_edges(t, obj);
        }
        if self.len < MAX_HELD {
            self.locks[self.len] = (addr, obj);
            self.len += 1;
        } else {
            self.overflow += 1;
        }
    }

    /// The lock at `addr` is released.
    #[inline(always)]
    pub fn pop(&mut self, addr: usize) {
        if self.quick == addr {
            self.quick = 0;
        } else if self.len > 0 && self.locks[self.len - 1].0 == addr {
            self.len -= 1;
        } else {
            self.remove(addr);
        }
    }

    #[cold]
    fn remove(&mut self, addr: usize) {
        match self.locks[..self.len].iter().rposition(|l| l.0 == addr) {
            Some(i) => {
                self.locks.copy_within(i + 1..self.len, i);
                self.len -= 1;
            }
            None => self.overflow = self.overflow.saturating_sub(1),
        }
    }

    /// Moves the lock the quick path took into `locks`, with its tracking entry.
    #[cold]
    #[inline(never)]
    pub fn settle(&mut self, t: &ThreadRec) {
        let addr = std::mem::take(&mut self.quick);
        let obj = match t.cached(addr) {
            Some((_, obj)) => Some(obj),
            None => tracker().and_then(|tr| {
                let _in = Inside::enter();
                tr.objects.get(&addr).map(|e| e.value().0)
            }),
        };
        if let Some(obj) = obj {
            self.push(t, addr, obj, false);
        }
    }

    /// Edges from every held lock to `obj`, before waiting for it (a wait that never ends, as in
    /// a deadlock, still leaves its edge).
    #[cold]
    #[inline(never)]
    pub fn note_edges(&mut self, t: &ThreadRec, obj: &ObjEntry) {
        let Some(tr) = tracker() else { return };
        for i in 0..self.len {
            // SAFETY: tracking entries are leaked and never freed.
            let from = unsafe { &*self.locks[i].1 };
            if std::ptr::eq(from, obj) {
                continue;
            }
            // By log id, which an entry serving another object does not share: objects that
            // nest locks are written to the log (an edge names them).
            let key = {
                let _in = Inside::enter();
                (tr.id_of(from), tr.id_of(obj))
            };
            let slot = ((key.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key.1) as usize) % EDGE_CACHE;
            if self.edges[slot] != key {
                self.edges[slot] = key;
                new_edge(tr, t, key);
            }
        }
    }
}

/// An edge new to this thread: record it unless another thread already did.
#[cold]
#[inline(never)]
fn new_edge(tr: &Tracker, t: &ThreadRec, (from, to): (u64, u64)) {
    let _in = Inside::enter();
    let fresh = tr
        .lock_order
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((from, to));
    if fresh {
        let chain_id = tr.chain(t);
        tr.log.write(
            &LockOrder {
                from_object: from,
                to_object: to,
                tid: t.tid.load(Ordering::Relaxed),
                chain_id,
                ns: now_ns(),
            }
            .into(),
        );
    }
}
