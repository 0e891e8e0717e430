//! Deadlock: a wait that closes a cycle in the wait-for graph (thread → object it waits for →
//! thread holding it → …). Waiting threads walk the graph when they start to wait and again each
//! time a wait slice expires; a cycle seen twice with the same wait sequence numbers cannot be a
//! race with a release, and is recorded at once with every thread, object and chain in it, and
//! the log synced: the program will hang and its user will kill it.

use std::sync::atomic::Ordering;

use smallvec::SmallVec;
use waitshim_format::{Deadlock, DeadlockBroken, DeadlockEdge, ObjectKind};

use super::objects::ObjEntry;
use super::threads::ThreadRec;
use super::Tracker;

const MAX_HOPS: usize = 64;
const MAX_VISITS: usize = 4096;

#[derive(Clone, PartialEq, Eq)]
pub struct Hop {
    pub tid: u32,
    pub seq: u64,
    pub object_id: u64,
    pub chain: u32,
    pub holder: u32,
}

/// The threads holding `obj` now: its one holder for kinds that have one, else, for an rwlock
/// held for reading, every thread known to hold it for reading (in tid order, so that two walks
/// over an unchanged graph take the same path).
fn holders(tr: &Tracker, obj: &ObjEntry, checked: bool) -> SmallVec<[u32; 4]> {
    let mut out = SmallVec::new();
    let h = obj.holder(checked);
    if h != 0 {
        out.push(h);
    } else if obj.kind == ObjectKind::RwLock {
        for e in tr.threads.iter() {
            let rec = e.value().0;
            if rec.reads(obj) {
                out.push(rec.tid());
            }
        }
    }
    out
}

/// One thread of a walk: the object it waits for, who holds that, and which holder is next.
struct Step<'a> {
    t: &'a ThreadRec,
    obj: &'a ObjEntry,
    seq: u64,
    holders: SmallVec<[u32; 4]>,
    next: usize,
}

impl<'a> Step<'a> {
    /// `t` as a step of a walk, if it waits for something now. Objects reached through other
    /// threads (`checked`) may have been released and unmapped since.
    fn of(tr: &Tracker, t: &'a ThreadRec, checked: bool) -> Option<Step<'a>> {
        let p = t.waiting_on.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: tracking entries are never freed.
        let obj: &ObjEntry = unsafe { &*p };
        Some(Step {
            t,
            obj,
            seq: t.wait_seq.load(Ordering::Acquire),
            holders: holders(tr, obj, checked),
            next: 0,
        })
    }
}

/// The wait-for cycle through `start`, if there is one now: a depth-first walk from `start`
/// along "waits for an object held by". Most walks stop after a hop or two, at a holder that
/// runs; an object held by several readers branches.
pub fn find_cycle(tr: &Tracker, start: &ThreadRec) -> Option<Vec<Hop>> {
    let mut path: SmallVec<[Step; 8]> = SmallVec::new();
    path.push(Step::of(tr, start, false)?);
    // Threads visited, bounding walks through many readers of many rwlocks.
    let mut budget = MAX_VISITS;
    while let Some(top) = path.last_mut() {
        let Some(&h) = top.holders.get(top.next) else {
            path.pop();
            continue;
        };
        top.next += 1;
        if h == start.tid() {
            return Some(
                path.iter()
                    .map(|s| Hop {
                        tid: s.t.tid(),
                        seq: s.seq,
                        object_id: tr.id_of(s.obj),
                        chain: s.t.wait_chain.load(Ordering::Relaxed),
                        holder: s.holders[s.next - 1],
                    })
                    .collect(),
            );
        }
        // A cycle that does not pass through `start`: its own members report it.
        if path.len() >= MAX_HOPS || path.iter().any(|s| s.t.tid() == h) {
            continue;
        }
        if budget == 0 {
            return None;
        }
        budget -= 1;
        if let Some(step) = tr.thread(h).and_then(|t| Step::of(tr, t, true)) {
            path.push(step);
        }
    }
    None
}

/// `t`, whose wait ended with `outcome`, was part of a recorded deadlock: the cycle is broken
/// (a timed wait gave up, a wait was interrupted): say so, durably like the deadlock itself.
pub fn broken(tr: &Tracker, t: &ThreadRec, outcome: u16, now: u64) {
    let at = t.in_deadlock.swap(0, Ordering::AcqRel);
    if at == 0 {
        return;
    }
    tr.log.write(
        &DeadlockBroken {
            deadlock_ns: at,
            tid: t.tid(),
            ns: now,
            outcome,
        }
        .into(),
    );
    tr.log.sync();
}

/// Records `cycle` unless a thread of it already did.
pub fn report(tr: &Tracker, me: &ThreadRec, cycle: &[Hop], now: u64) {
    let mut sig: Vec<(u32, u64)> = cycle.iter().map(|h| (h.tid, h.seq)).collect();
    sig.sort_unstable();
    {
        let mut seen = tr.deadlocks.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(&sig) {
            return;
        }
        seen.push(sig);
    }
    for h in cycle {
        if let Some(t) = tr.thread(h.tid) {
            t.in_deadlock.store(now, Ordering::Release);
        }
    }
    tr.log.write(
        &Deadlock {
            ns: now,
            detected_by: me.tid(),
            cycle: cycle
                .iter()
                .map(|h| DeadlockEdge {
                    tid: h.tid,
                    object_id: h.object_id,
                    wait_chain: h.chain,
                    holder_tid: h.holder,
                })
                .collect(),
        }
        .into(),
    );
    tr.flush();
    tr.log.sync();
}
