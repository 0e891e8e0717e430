//! The global highwater mark of waiting threads, the elapsed-time counter of each
//! high-contention episode, and lock contention records (SPEC §1).
//!
//! A new wait on an engaged object brings its waiter count to `n`. If `n` exceeds the highwater
//! mark, the mark rises to `n`; if `n` equals the mark and no thread other than the holder can run
//! (all are blocked in waits the shim sees), the program is serialised. Either way the object's
//! episode opens (a pending contention record, elapsed-time counter started) unless one is open
//! already, in which case the wait joins it. The episode ends, and its record is completed, when
//! the holder disengages the object. The mark is never lowered.
//!
//! A serialised program can reach its mark on every wait; episodes that open within
//! `COALESCE_NS` of the previous one on the same object are counted in the next record instead
//! of written one by one, which bounds the log to a few hundred records per object per second.

use std::sync::atomic::Ordering;

use waitshim_format::{
    contention_reason, ContentionClose, ContentionOpen, Highwater, ObjectKind, WaiterRef,
};

use super::objects::{glibc_mutex, ObjEntry, EPISODE};
use super::threads::ThreadRec;
use super::Tracker;

const COALESCE_NS: u64 = 10_000_000;
/// Waiters listed in one record (all are counted).
const MAX_LISTED: usize = 32;
/// Distinct threads remembered per episode to count `threads_tried`.
const MAX_TRIED: usize = 1024;

pub struct Episode {
    pub record_id: u64,
    pub level: u32,
    pub start_ns: u64,
    /// (tid, waiter chain, wait start)
    pub waiters: Vec<(u32, u32, u64)>,
    pub waiters_total: u32,
    pub tried: Vec<u32>,
    /// Waits taken in when the episode opened, from the other threads' published waits: such a
    /// thread may still be on its way to join by itself, and must not be listed twice.
    scanned: Vec<(u32, u64)>,
}

impl Episode {
    fn join(&mut self, tid: u32, chain: u32, since: u64) {
        self.waiters_total += 1;
        if self.waiters.len() < MAX_LISTED {
            self.waiters.push((tid, chain, since));
        }
        if !self.tried.contains(&tid) && self.tried.len() < MAX_TRIED {
            self.tried.push(tid);
        }
    }
}

/// A thread starts waiting on `obj`, which now has `n` waiters (this one included).
pub fn on_wait(tr: &Tracker, t: &ThreadRec, obj: &ObjEntry, n: u32, now: u64, chain: u32) {
    let hwm = tr.highwater.load(Ordering::Relaxed);
    let exceeded = n > hwm;
    // Blocked counts include this thread; everyone but the holder blocked = serialised.
    let serialised = !exceeded
        && n == hwm
        && tr.blocked.load(Ordering::Relaxed) + 1 >= tr.live.load(Ordering::Relaxed);
    if exceeded && tr.highwater.fetch_max(n, Ordering::Relaxed) < n {
        tr.log.write(
            &Highwater {
                ns: now,
                hwm: n,
                object_id: tr.id_of(obj),
                tid: t.tid(),
            }
            .into(),
        );
    }
    // Most waits neither join nor open an episode: decide that without the object's lock.
    let recent = now.saturating_sub(obj.last_close_ns.load(Ordering::Relaxed)) < COALESCE_NS;
    if obj.flags() & EPISODE == 0 && !exceeded {
        if serialised && recent {
            obj.coalesced.fetch_add(1, Ordering::Relaxed);
        }
        if !serialised || recent {
            return;
        }
    }
    let mut c = obj.contention();
    if let Some(ep) = c.episode.as_mut() {
        ep.level = ep.level.max(n);
        if let Some(i) = ep.scanned.iter().position(|&w| w == (t.tid(), now)) {
            ep.scanned.swap_remove(i);
        } else {
            ep.join(t.tid(), chain, now);
        }
        return;
    }
    if !exceeded && !serialised {
        return;
    }
    let holder = match obj.kind {
        // Held for writing: the writer. Held for reading there is no single holder: the last
        // reader to leave ends the episode (see the rwlock unlock).
        ObjectKind::RwLock => obj.holder(false),
        _ => obj.owner.last.load(Ordering::Relaxed),
    };
    let mut ep = Episode {
        record_id: tr.next_record.fetch_add(1, Ordering::Relaxed),
        level: n,
        start_ns: now,
        waiters: Vec::new(),
        waiters_total: 0,
        tried: Vec::new(),
        scanned: Vec::new(),
    };
    // Threads already waiting belong to the episode too.
    let me = obj as *const ObjEntry as *mut ObjEntry;
    for e in tr.threads.iter() {
        let other = e.value().0;
        if other.tid() != t.tid() && other.waiting_on.load(Ordering::Acquire) == me {
            let since = other.wait_start.load(Ordering::Relaxed);
            ep.join(other.tid(), other.wait_chain.load(Ordering::Relaxed), since);
            ep.scanned.push((other.tid(), since));
        }
    }
    ep.join(t.tid(), chain, now);
    tr.log.write(
        &ContentionOpen {
            record_id: ep.record_id,
            object_id: tr.id_of(obj),
            ns: now,
            level: n,
            reason: if exceeded {
                contention_reason::EXCEEDED
            } else {
                contention_reason::SERIALISED
            },
            holder_tid: holder,
            waiter_tid: t.tid(),
            waiter_chain: chain,
        }
        .into(),
    );
    c.episode = Some(ep);
    obj.set_flag(EPISODE);
    drop(c);
    // The holder's release ends the episode: make sure that release looks at this object.
    let holder = match obj.kind {
        ObjectKind::Mutex => glibc_mutex::owner(obj.addr()),
        // A joined thread ends the episode by exiting, a barrier's last arrival as it returns
        // (`engage::released`): no release of theirs needs to look for it.
        ObjectKind::Thread | ObjectKind::Barrier => 0,
        _ => holder,
    };
    if let Some(h) = tr.thread(holder) {
        h.attention
            .store(obj as *const ObjEntry as *mut ObjEntry, Ordering::Release);
    }
}

/// The wait of thread `tid` on `obj` that began at `since` was cancelled (it turned out not to
/// be a wait: see `engage::wait_cancel`): it leaves the open episode's listed and counted
/// waiters. A wait not listed (beyond `MAX_LISTED`, or not in this episode) changes nothing.
/// The episode's level and the threads that tried stay as they are.
pub fn on_wait_cancelled(obj: &ObjEntry, tid: u32, since: u64) {
    let mut c = obj.contention();
    let Some(ep) = c.episode.as_mut() else { return };
    if let Some(i) = ep
        .waiters
        .iter()
        .position(|&(w, _, s)| w == tid && s == since)
    {
        ep.waiters.remove(i);
        ep.waiters_total = ep.waiters_total.saturating_sub(1);
    }
    if let Some(i) = ep.scanned.iter().position(|&w| w == (tid, since)) {
        ep.scanned.swap_remove(i);
    }
}

/// The holder (tid) disengages `obj` while an episode is open: stop the elapsed-time counter and
/// complete the record, with the chain of this release (who made the others wait).
pub fn on_release(tr: &Tracker, holder: u32, obj: &ObjEntry, now: u64, holder_chain: u32) {
    let mut c = obj.contention();
    let Some(ep) = c.episode.take() else { return };
    obj.clear_flag(EPISODE);
    obj.last_close_ns.store(now, Ordering::Relaxed);
    let coalesced = obj.coalesced.swap(0, Ordering::Relaxed);
    drop(c);
    let threads_tried = ep.tried.len() as u32 + u32::from(!ep.tried.contains(&holder));
    tr.log.write(
        &ContentionClose {
            record_id: ep.record_id,
            object_id: tr.id_of(obj),
            ns: now,
            level: ep.level,
            elapsed_ns: now.saturating_sub(ep.start_ns),
            threads_tried,
            holder_tid: holder,
            holder_chain,
            waiters: ep
                .waiters
                .iter()
                .map(|&(tid, chain_id, since)| WaiterRef {
                    tid,
                    chain_id,
                    wait_ns: now.saturating_sub(since),
                })
                .collect(),
            waiters_total: ep.waiters_total,
            coalesced,
        }
        .into(),
    );
}
