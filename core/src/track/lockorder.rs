//! Lock order: the exclusive locks each thread holds, and an edge A → B each time B is taken while
//! A is held. A cycle of such edges is a potential deadlock (a lock-order inversion), reported by
//! the analyzer even when the run did not hang.
//!
//! Each thread keeps its held locks in a short array and remembers the edges it has already seen
//! in a small direct-mapped cache, so repeating a nested acquisition costs a few compares; only an
//! edge new to the thread takes the slow path: the process-wide graph of the live objects
//! ([`super::lockgraph`]). An edge reaches the log at the next flush if both its objects still
//! live then, or at once if it closes a cycle; one whose object is destroyed before (a mutex
//! made per request and taken under a global lock) costs the log nothing.
//!
//! The chain that witnesses an edge is taken once per thread for each pair (lock held, creation
//! chain of the lock taken): a thread that takes a new per-request mutex under the same lock
//! each time reuses its first chain instead of unwinding for every request. Two code paths of
//! one thread that nest objects created at the same place under the same lock share it.

use std::sync::atomic::Ordering;

use waitshim_format::LockOrder;

use super::lockgraph::{Added, Graph};
use super::objects::{ObjEntry, DEAD};
use super::threads::{InShim, ThreadRec};
use super::{tracker, Tracker};
use crate::clock::now_ns;

/// Held locks tracked per thread; deeper nesting is not followed.
pub const MAX_HELD: usize = 16;
const EDGE_CACHE: usize = 64;
/// (held lock, creation chain of the lock taken) pairs whose witness chain a thread keeps.
const CLASS_CACHE: usize = 16;

/// Owner-only lock-order state of a thread.
pub struct Held {
    pub locks: [(usize, *const ObjEntry); MAX_HELD],
    pub len: usize,
    /// Locks taken beyond `MAX_HELD`, released without being looked for.
    pub overflow: usize,
    /// The one lock held, when the quick path (`engage::acquired_quick`) took it: only its
    /// address is noted, and it is not in `locks` (0: none). Taking or waiting for another lock
    /// while it is held moves it there first ([`Held::settle`]).
    pub quick: usize,
    edges: [(u64, u64); EDGE_CACHE],
    /// (held lock's node, creation chain of the lock taken, witness chain).
    classes: [(u64, u32, u32); CLASS_CACHE],
}

impl Default for Held {
    fn default() -> Self {
        Held {
            locks: [(0, std::ptr::null()); MAX_HELD],
            len: 0,
            overflow: 0,
            quick: 0,
            edges: [(0, 0); EDGE_CACHE],
            classes: [(0, 0, 0); CLASS_CACHE],
        }
    }
}

impl Held {
    /// `obj` is taken: note the edges from every lock held, then hold it.
    #[inline(always)]
    pub fn push(&mut self, t: &ThreadRec, addr: usize, obj: &'static ObjEntry, edges: bool) {
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
                let _in = InShim::enter();
                tr.objects.get(addr)
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
    pub fn note_edges(&mut self, t: &ThreadRec, obj: &'static ObjEntry) {
        crate::stack::with_room(|| self.note_edges_here(t, obj))
    }

    fn note_edges_here(&mut self, t: &ThreadRec, obj: &'static ObjEntry) {
        let Some(tr) = tracker() else { return };
        let to = node(obj);
        for i in 0..self.len {
            // SAFETY: tracking entries are leaked and never freed.
            let from_obj: &'static ObjEntry = unsafe { &*self.locks[i].1 };
            let from = node(from_obj);
            if from == to {
                continue;
            }
            let slot = ((from.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ to) as usize) % EDGE_CACHE;
            if self.edges[slot] != (from, to) {
                self.edges[slot] = (from, to);
                let chain = self.witness(tr, t, from, obj);
                new_edge(tr, t, from_obj, obj, chain);
            }
        }
    }

    /// The chain witnessing an edge from the lock `from` to `obj` (see the module comment).
    fn witness(&mut self, tr: &Tracker, t: &ThreadRec, from: u64, obj: &ObjEntry) -> u32 {
        let made = obj.create_chain.load(Ordering::Relaxed);
        let slot = ((from ^ u64::from(made)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize
            % CLASS_CACHE;
        let (f, m, chain) = self.classes[slot];
        if f == from && m == made && chain != 0 {
            return chain;
        }
        let chain = {
            let _in = InShim::enter();
            tr.chain(t)
        };
        self.classes[slot] = (from, made, chain);
        chain
    }
}

/// An edge of the lock-order graph: which objects, and who took it first, where and when.
pub struct EdgeData {
    from: &'static ObjEntry,
    to: &'static ObjEntry,
    tid: u32,
    chain: u32,
    ns: u64,
}

/// The graph's key for an object generation: its entry (never freed) and generation, which an
/// entry serving another object since does not share.
pub fn node(obj: &ObjEntry) -> u64 {
    obj as *const ObjEntry as u64 ^ u64::from(obj.generation.load(Ordering::Relaxed)) << 48
}

/// An edge new to this thread: into the graph, unless another thread put it there; one that
/// closes a cycle is written at once with the rest of the cycle.
#[cold]
#[inline(never)]
fn new_edge(
    tr: &Tracker,
    t: &ThreadRec,
    from: &'static ObjEntry,
    to: &'static ObjEntry,
    chain: u32,
) {
    // Putting the edge in the graph reaches no cancellation point (its maps hash with a fixed
    // hasher, no `getrandom`); writing a cycle does, and disables cancellation for itself.
    let _in = InShim::enter_quiet();
    let mut g = tr.lock_graph.lock().unwrap_or_else(|e| e.into_inner());
    from.in_graph.store(true, Ordering::Relaxed);
    to.in_graph.store(true, Ordering::Relaxed);
    let data = EdgeData {
        from,
        to,
        tid: t.tid.load(Ordering::Relaxed),
        chain,
        ns: now_ns(),
    };
    if let Added::Cycle(cycle) = g.add(node(from), node(to), data) {
        let _write = InShim::enter();
        for (a, b) in cycle {
            if let Some(e) = g.get_mut(a, b).filter(|e| !e.written) {
                e.written = write_edge(tr, &e.data);
            }
        }
    }
}

/// Writes an edge to the log (writing its objects first if they are not there yet); false if
/// one of them is being destroyed (its edges then go with it).
fn write_edge(tr: &Tracker, e: &EdgeData) -> bool {
    if (e.from.flags() | e.to.flags()) & DEAD != 0 {
        return false;
    }
    let (Some(from), Some(to)) = (tr.try_id_of(e.from), tr.try_id_of(e.to)) else {
        return false;
    };
    tr.log.write(
        &LockOrder {
            from_object: from,
            to_object: to,
            tid: e.tid,
            chain_id: e.chain,
            ns: e.ns,
        }
        .into(),
    );
    true
}

/// Writes the edges of the graph that have not reached the log (at a flush): both their
/// objects live.
pub fn write_edges(tr: &Tracker, graph: &mut Graph<EdgeData>) {
    graph.write_unwritten(|_, e| write_edge(tr, e));
}
