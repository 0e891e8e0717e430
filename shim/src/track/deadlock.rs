//! Deadlock: a wait that closes a cycle in the wait-for graph (thread → object it waits for →
//! thread holding it → …). Waiting threads walk the graph when they start to wait and again each
//! time a wait slice expires; a cycle seen twice with the same wait sequence numbers cannot be a
//! race with a release, and is recorded at once with every thread, object and chain in it, and
//! the log synced: the program will hang and its user will kill it.

use std::sync::atomic::Ordering;

use smallvec::SmallVec;
use waitshim_format::{Deadlock, DeadlockEdge};

use super::threads::ThreadRec;
use super::Tracker;

const MAX_HOPS: usize = 64;

#[derive(Clone, PartialEq, Eq)]
pub struct Hop {
    pub tid: u32,
    pub seq: u64,
    pub object_id: u64,
    pub chain: u32,
    pub holder: u32,
}

/// The wait-for cycle through `start`, if there is one now.
pub fn find_cycle(tr: &Tracker, start: &ThreadRec) -> Option<Vec<Hop>> {
    // Most walks stop after a hop or two, at a holder that runs: take them without noting hops.
    if !leads_back(tr, start) {
        return None;
    }
    let mut hops: SmallVec<[Hop; 8]> = SmallVec::new();
    let mut t: &ThreadRec = start;
    for i in 0..MAX_HOPS {
        let p = t.waiting_on.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: tracking entries are leaked and never freed.
        let obj = unsafe { &*p };
        // Objects reached through other threads may have been released and unmapped since.
        let h = obj.holder(i != 0);
        if h == 0 {
            return None;
        }
        hops.push(Hop {
            tid: t.tid(),
            seq: t.wait_seq.load(Ordering::Acquire),
            object_id: obj.id,
            chain: t.wait_chain.load(Ordering::Relaxed),
            holder: h,
        });
        if h == start.tid() {
            return Some(hops.into_vec());
        }
        if hops.iter().any(|x| x.tid == h) {
            // A cycle that does not pass through `start`: its own members report it.
            return None;
        }
        t = tr.thread(h)?;
    }
    None
}

/// Whether the wait-for walk from `start` comes back to it now (a cycle through other threads
/// only is walked to the hop limit).
fn leads_back(tr: &Tracker, start: &ThreadRec) -> bool {
    let mut t: &ThreadRec = start;
    for i in 0..MAX_HOPS {
        let p = t.waiting_on.load(Ordering::Acquire);
        if p.is_null() {
            return false;
        }
        // SAFETY: tracking entries are leaked and never freed.
        let h = unsafe { &*p }.holder(i != 0);
        if h == 0 {
            return false;
        }
        if h == start.tid() {
            return true;
        }
        match tr.thread(h) {
            Some(next) => t = next,
            None => return false,
        }
    }
    false
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
