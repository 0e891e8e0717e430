//! The global highwater mark of waiting threads, the elapsed-time counter of each
//! high-contention episode, and lock contention records (SPEC §1).
//!
//! A new wait on an engaged object brings its waiter count to `n`. If `n` exceeds the highwater
//! mark, the mark rises to `n`; if `n` equals the mark and no thread other than the holder can run
//! (all are blocked in waits the shim sees), the program is serialised. An object nobody holds (a
//! condition variable, a semaphore) has no holder running: there, every thread must be blocked. Each object also has its
//! own highest waiter count: a wait that reaches it (or a new one) is a peak of that object. Any
//! of the three opens the object's episode (a pending contention record, elapsed-time counter
//! started) unless one is open already, in which case the wait joins it. The episode ends, and
//! its record is completed, when the holder disengages the object. The mark is never lowered.
//!
//! The object's own peaks give every contended object records, with waiter and holder chains,
//! even when a burst elsewhere set the global mark high early in the run (a thread pool's start
//! barrier: seven threads waiting for the eighth in the first milliseconds). For the same reason
//! barriers and joined threads do not raise the global mark, nor are measured against it: nobody
//! holds a barrier, and a join waits for a thread to finish, not for a lock; their peaks still
//! open their records.
//!
//! A busy object reaches its peak on wait after wait; episodes that open within `COALESCE_NS`
//! of the previous one on the same object are counted in the next record instead of written one
//! by one, which bounds the log to a hundred records per object per second. A rise of the global
//! mark always opens one.
//!
//! The rules are plain data ([`decide`], [`Episode`]), tested without a running program; the
//! functions below them gather the facts from the tracker and carry the verdict out.

use std::sync::atomic::Ordering;

use waitshim_format::{
    contention_reason, ContentionClose, ContentionOpen, Highwater, ObjectKind, WaiterRef,
};

use super::objects::{ObjEntry, EPISODE};
use super::threads::ThreadRec;
use super::Tracker;
use crate::layout::mutex as glibc_mutex;

const COALESCE_NS: u64 = 10_000_000;
/// Distinct waiting threads listed in one record (all waits are counted).
const MAX_LISTED: usize = 32;
/// Distinct threads remembered per episode to count `threads_tried`.
const MAX_TRIED: usize = 1024;

/// What a wait looks like to the rules.
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts {
    /// Threads waiting on the object now, this one included.
    pub waiters: u32,
    /// The object's kind takes part in the global mark (not a barrier, not a joined thread).
    pub global_kind: bool,
    /// The global mark before this wait.
    pub global: u32,
    /// Every thread but the holder is blocked in a wait the shim sees.
    pub all_blocked: bool,
    /// Every thread is blocked, the holder too (for objects nobody holds: the thread that
    /// would signal or post is not blocked on them).
    pub none_running: bool,
    /// The object is held by a thread that makes the waiters wait (a mutex, a spinlock, an
    /// rwlock held for writing), rather than waited on for another thread to act.
    pub held: bool,
    /// The object has an episode open.
    pub episode_open: bool,
    /// The object's last episode closed less than `COALESCE_NS` ago.
    pub recent: bool,
    /// The wait reaches the object's own highest waiter count so far (or a new one).
    pub object_peak: bool,
}

/// What a wait does to the object's episodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Nothing,
    /// An episode would open, but the object's last one closed a moment ago: counted in its
    /// next record.
    Coalesce,
    Join,
    /// Opens an episode, for this reason (`contention_reason`).
    Open(u8),
}

/// Whether every thread but one (the holder) is blocked: `tracked` threads in waits the shim
/// sees (this one included), `elsewhere` in system calls the sampler saw them in, of `live`.
pub fn all_others_blocked(tracked: i32, elsewhere: i32, live: i32) -> bool {
    tracked.saturating_add(elsewhere.max(0)).saturating_add(1) >= live
}

/// Whether every thread is blocked: `tracked` and `elsewhere` as in [`all_others_blocked`].
pub fn all_blocked(tracked: i32, elsewhere: i32, live: i32) -> bool {
    tracked.saturating_add(elsewhere.max(0)) >= live
}

/// The highwater rules: whether the wait raises the global mark, and what it does to the
/// object's episodes.
pub fn decide(f: &Facts) -> (bool, Verdict) {
    let raise = f.global_kind && f.waiters > f.global;
    let blocked = if f.held {
        f.all_blocked
    } else {
        f.none_running
    };
    let serialised = f.global_kind && !raise && f.waiters > 0 && f.waiters == f.global && blocked;
    let verdict = if f.episode_open {
        Verdict::Join
    } else if raise {
        Verdict::Open(contention_reason::EXCEEDED)
    } else if serialised || f.object_peak {
        if f.recent {
            Verdict::Coalesce
        } else if serialised {
            Verdict::Open(contention_reason::SERIALISED)
        } else {
            Verdict::Open(contention_reason::OBJECT_PEAK)
        }
    } else {
        Verdict::Nothing
    };
    (raise, verdict)
}

/// One thread's waits in an episode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waiter {
    tid: u32,
    /// The chain of its first wait in the episode, and when that began.
    chain: u32,
    since: u64,
    waits: u32,
}

/// An open high-contention episode: its pending record.
#[derive(Debug)]
pub struct Episode {
    pub record_id: u64,
    /// Most waiters at once.
    pub level: u32,
    pub start_ns: u64,
    /// Distinct threads that waited, in the order they first did (at most `MAX_LISTED`).
    waiters: Vec<Waiter>,
    /// Every wait that joined, listed or not.
    waits: u32,
    /// Distinct threads that tried to engage the object (waited), at most `MAX_TRIED`.
    tried: Vec<u32>,
    /// Waits taken in when the episode opened, from the other threads' published waits: such a
    /// thread may still be on its way to join by itself, and must not be counted twice.
    scanned: Vec<(u32, u64)>,
}

/// A completed record's figures (see [`Episode::close`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Closed {
    pub level: u32,
    pub elapsed_ns: u64,
    pub threads_tried: u32,
    /// (tid, chain, how long it has been waiting in the episode) per distinct thread listed.
    pub waiters: Vec<(u32, u32, u64)>,
    pub waits: u32,
}

impl Episode {
    pub fn new(record_id: u64, level: u32, start_ns: u64) -> Episode {
        Episode {
            record_id,
            level,
            start_ns,
            waiters: Vec::new(),
            waits: 0,
            tried: Vec::new(),
            scanned: Vec::new(),
        }
    }

    /// Thread `tid` waits (from `chain`, since `since`) with `n` waiters on the object.
    pub fn join(&mut self, tid: u32, chain: u32, since: u64, n: u32) {
        self.level = self.level.max(n);
        if let Some(i) = self.scanned.iter().position(|&w| w == (tid, since)) {
            // Counted when the episode opened.
            self.scanned.swap_remove(i);
            return;
        }
        self.add(tid, chain, since);
    }

    /// A wait already in progress when the episode opened.
    pub fn take_in(&mut self, tid: u32, chain: u32, since: u64) {
        self.add(tid, chain, since);
        self.scanned.push((tid, since));
    }

    fn add(&mut self, tid: u32, chain: u32, since: u64) {
        self.waits = self.waits.saturating_add(1);
        let listed = self.waiters.len();
        match self.waiters.iter_mut().find(|w| w.tid == tid) {
            Some(w) => w.waits += 1,
            None if listed < MAX_LISTED => self.waiters.push(Waiter {
                tid,
                chain,
                since,
                waits: 1,
            }),
            None => {}
        }
        if !self.tried.contains(&tid) && self.tried.len() < MAX_TRIED {
            self.tried.push(tid);
        }
    }

    /// The wait of `tid` that began at `since` turned out not to be one (see
    /// `engage::wait_cancel`): it leaves the counts. The level stays as it is.
    pub fn cancel(&mut self, tid: u32, since: u64) {
        if let Some(i) = self.waiters.iter().position(|w| w.tid == tid) {
            let w = &mut self.waiters[i];
            if w.waits <= 1 && w.since == since {
                self.waiters.remove(i);
                self.tried.retain(|&t| t != tid);
            } else {
                w.waits = w.waits.saturating_sub(1);
            }
            self.waits = self.waits.saturating_sub(1);
        }
        if let Some(i) = self.scanned.iter().position(|&w| w == (tid, since)) {
            self.scanned.swap_remove(i);
        }
    }

    /// The holder released the object at `now`: the record's figures, consistent with each
    /// other. At most as many threads waited at once as distinct threads waited (a waiter count
    /// read while another thread was being handed the object can count it twice); threads that
    /// tried are the waiters and the holder.
    pub fn close(&self, now: u64, holder: u32) -> Closed {
        let waited = self.tried.iter().filter(|&&t| t != holder).count() as u32;
        let holders_waits = self
            .waiters
            .iter()
            .find(|w| w.tid == holder)
            .map_or(0, |w| w.waits);
        let level = if self.tried.len() < MAX_TRIED {
            self.level.min(waited)
        } else {
            self.level
        };
        Closed {
            level,
            elapsed_ns: now.saturating_sub(self.start_ns),
            threads_tried: waited + u32::from(holder != 0),
            waiters: self
                .waiters
                .iter()
                .filter(|w| w.tid != holder)
                .map(|w| (w.tid, w.chain, now.saturating_sub(w.since)))
                .collect(),
            waits: self.waits.saturating_sub(holders_waits),
        }
    }
}

/// A thread starts waiting on `obj`, which now has `n` waiters (this one included); `peak`:
/// that is the object's own highest count so far.
///
/// # Safety
/// `obj` is the object `t`, the calling thread, waits on: live (an episode opening reads a
/// mutex's owner or an rwlock's writer there).
pub unsafe fn on_wait(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &ObjEntry,
    n: u32,
    peak: bool,
    now: u64,
    chain: u32,
) {
    // No wait, no episode (a path that counts its waiter only later).
    if n == 0 {
        return;
    }
    let (tracked, elsewhere, live) = (
        tr.blocked.load(Ordering::Relaxed),
        tr.blocked_elsewhere.load(Ordering::Relaxed),
        tr.live.load(Ordering::Relaxed),
    );
    let facts = Facts {
        waiters: n,
        global_kind: !matches!(obj.kind, ObjectKind::Barrier | ObjectKind::Thread),
        global: tr.highwater.load(Ordering::Relaxed),
        all_blocked: all_others_blocked(tracked, elsewhere, live),
        none_running: all_blocked(tracked, elsewhere, live),
        held: matches!(
            obj.kind,
            ObjectKind::Mutex | ObjectKind::RwLock | ObjectKind::Spin
        ),
        episode_open: obj.flags() & EPISODE != 0,
        recent: now.saturating_sub(obj.busy().last_close_ns.load(Ordering::Relaxed)) < COALESCE_NS,
        object_peak: peak,
    };
    let (raise, verdict) = decide(&facts);
    if raise && tr.highwater.fetch_max(n, Ordering::Relaxed) < n {
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
    // Most waits neither join nor open an episode: decided without the object's lock.
    let reason = match verdict {
        Verdict::Nothing => return,
        Verdict::Coalesce => {
            obj.busy().coalesced.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Verdict::Join => None,
        Verdict::Open(reason) => Some(reason),
    };
    let mut c = obj.contention();
    if let Some(ep) = c.episode.as_mut() {
        // Open, or opened by another thread since the flags were read.
        ep.join(t.tid(), chain, now, n);
        return;
    }
    // The episode this wait would have joined closed meanwhile.
    let Some(reason) = reason else { return };
    let holder = match obj.kind {
        // Held for writing: the writer. Held for reading there is no single holder: the last
        // reader to leave ends the episode (see the rwlock unlock).
        // SAFETY: the object `t`, the calling thread, waits on: live (the caller's promise).
        ObjectKind::RwLock => unsafe { obj.holder() },
        _ => obj.owner.last.load(Ordering::Relaxed),
    };
    let mut ep = Episode::new(tr.next_record.fetch_add(1, Ordering::Relaxed), n, now);
    // Threads already waiting belong to the episode too.
    let me = obj as *const ObjEntry as *mut ObjEntry;
    for e in tr.threads.iter() {
        let other = e.value().0;
        if other.tid() != t.tid() && other.waiting_on.load(Ordering::Acquire) == me {
            let since = other.wait_start.load(Ordering::Relaxed);
            ep.take_in(other.tid(), other.wait_chain.load(Ordering::Relaxed), since);
        }
    }
    ep.join(t.tid(), chain, now, n);
    tr.log.write(
        &ContentionOpen {
            record_id: ep.record_id,
            object_id: tr.id_of(obj),
            ns: now,
            level: n,
            reason,
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
        // SAFETY: the mutex the calling thread waits on: live (the caller's promise).
        ObjectKind::Mutex => unsafe { glibc_mutex::owner(obj.addr()) },
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
/// be a wait: see `engage::wait_cancel`): it leaves the open episode's counts.
pub fn on_wait_cancelled(obj: &ObjEntry, tid: u32, since: u64) {
    if let Some(ep) = obj.contention().episode.as_mut() {
        ep.cancel(tid, since);
    }
}

/// The holder (tid) disengages `obj` while an episode is open: stop the elapsed-time counter and
/// complete the record, with the chain of this release (who made the others wait). (The hold
/// itself is measured by the release, episode or not: `ObjEntry::waited_hold_released`.)
pub fn on_release(tr: &Tracker, holder: u32, obj: &ObjEntry, now: u64, holder_chain: u32) {
    let mut c = obj.contention();
    let Some(ep) = c.episode.take() else { return };
    obj.clear_flag(EPISODE);
    obj.busy().last_close_ns.store(now, Ordering::Relaxed);
    let coalesced = obj.busy().coalesced.swap(0, Ordering::Relaxed);
    drop(c);
    let closed = ep.close(now, holder);
    tr.log.write(
        &ContentionClose {
            record_id: ep.record_id,
            object_id: tr.id_of(obj),
            ns: now,
            level: closed.level,
            elapsed_ns: closed.elapsed_ns,
            threads_tried: closed.threads_tried,
            holder_tid: holder,
            holder_chain,
            waiters: closed
                .waiters
                .iter()
                .map(|&(tid, chain_id, wait_ns)| WaiterRef {
                    tid,
                    chain_id,
                    wait_ns,
                })
                .collect(),
            waiters_total: closed.waits,
            coalesced,
        }
        .into(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait on a mutex.
    fn wait(waiters: u32, global: u32) -> Facts {
        Facts {
            waiters,
            global_kind: true,
            global,
            held: true,
            ..Facts::default()
        }
    }

    #[test]
    fn a_wait_above_the_mark_raises_it_and_opens_a_record_even_right_after_another() {
        let f = Facts {
            recent: true,
            ..wait(3, 2)
        };
        assert_eq!(
            decide(&f),
            (true, Verdict::Open(contention_reason::EXCEEDED))
        );
    }

    #[test]
    fn a_thread_blocked_in_a_system_call_is_not_ready_to_run_either() {
        // main joining, two waiters, the holder and a reader blocked in read(): 5 live.
        assert!(!all_others_blocked(3, 0, 5), "without the sampler's view");
        assert!(all_others_blocked(3, 1, 5));
        assert!(
            !all_others_blocked(2, 1, 5),
            "a thread is running besides the holder"
        );
    }

    #[test]
    fn a_condition_variable_is_serialised_only_when_no_thread_at_all_runs() {
        // Every other thread blocked but one, which runs (the one that will signal): no.
        let cond = Facts {
            held: false,
            all_blocked: true,
            ..wait(2, 2)
        };
        assert_eq!(decide(&cond), (false, Verdict::Nothing));
        let stuck = Facts {
            none_running: true,
            ..cond
        };
        assert_eq!(
            decide(&stuck),
            (false, Verdict::Open(contention_reason::SERIALISED))
        );
    }

    #[test]
    fn no_wait_opens_no_episode_even_at_a_mark_of_zero() {
        let f = Facts {
            all_blocked: true,
            none_running: true,
            ..wait(0, 0)
        };
        assert_eq!(decide(&f), (false, Verdict::Nothing));
    }

    #[test]
    fn reaching_the_mark_while_everyone_else_is_blocked_is_serialised() {
        let f = Facts {
            all_blocked: true,
            ..wait(2, 2)
        };
        assert_eq!(
            decide(&f),
            (false, Verdict::Open(contention_reason::SERIALISED))
        );
        let runnable = wait(2, 2);
        assert_eq!(decide(&runnable), (false, Verdict::Nothing));
    }

    #[test]
    fn an_object_reaching_its_own_peak_opens_a_record_below_the_global_mark() {
        // A start barrier set the mark to 7 early; the hot mutex peaks at 3 waiters.
        let f = Facts {
            object_peak: true,
            ..wait(3, 7)
        };
        assert_eq!(
            decide(&f),
            (false, Verdict::Open(contention_reason::OBJECT_PEAK))
        );
        assert_eq!(decide(&wait(2, 7)), (false, Verdict::Nothing));
    }

    #[test]
    fn a_peak_right_after_the_objects_last_episode_is_coalesced() {
        let f = Facts {
            object_peak: true,
            recent: true,
            ..wait(1, 7)
        };
        assert_eq!(decide(&f), (false, Verdict::Coalesce));
    }

    #[test]
    fn waits_join_an_open_episode_whatever_else_holds() {
        let f = Facts {
            episode_open: true,
            ..wait(9, 2)
        };
        assert_eq!(decide(&f), (true, Verdict::Join));
    }

    #[test]
    fn barriers_and_joins_neither_raise_the_mark_nor_are_serialised_but_have_their_peaks() {
        let f = Facts {
            global_kind: false,
            all_blocked: true,
            ..wait(7, 0)
        };
        assert_eq!(decide(&f), (false, Verdict::Nothing));
        let peak = Facts {
            object_peak: true,
            ..f
        };
        assert_eq!(
            decide(&peak),
            (false, Verdict::Open(contention_reason::OBJECT_PEAK))
        );
    }

    #[test]
    fn a_record_lists_each_waiting_thread_once_with_its_waits() {
        let mut ep = Episode::new(1, 1, 1_000);
        ep.join(10, 5, 1_000, 1);
        // Thread 10 waits again in the same episode (re-arrives), thread 11 once.
        ep.join(10, 5, 2_000, 2);
        ep.join(11, 6, 3_000, 2);
        let c = ep.close(10_000, 12);
        assert_eq!(c.level, 2);
        assert_eq!(c.waits, 3);
        assert_eq!(c.threads_tried, 3, "two waiters and the holder");
        assert_eq!(c.waiters, vec![(10, 5, 9_000), (11, 6, 7_000)]);
        assert_eq!(c.elapsed_ns, 9_000);
    }

    #[test]
    fn the_level_never_exceeds_the_threads_that_waited() {
        // A waiter count read while the object was being handed over counted one thread twice.
        let mut ep = Episode::new(1, 4, 0);
        ep.join(10, 5, 0, 4);
        ep.join(11, 5, 0, 4);
        let c = ep.close(100, 12);
        assert_eq!(c.level, 2);
        assert_eq!(c.threads_tried, 3);
    }

    #[test]
    fn a_wait_taken_in_at_opening_is_not_counted_again_when_it_joins() {
        let mut ep = Episode::new(1, 2, 500);
        ep.take_in(10, 5, 100);
        ep.join(11, 6, 500, 2);
        // Thread 10, on its way, joins by itself too.
        ep.join(10, 5, 100, 2);
        let c = ep.close(1_000, 12);
        assert_eq!(c.waits, 2);
        assert_eq!(c.waiters.len(), 2);
    }

    #[test]
    fn a_cancelled_wait_leaves_the_record() {
        let mut ep = Episode::new(1, 1, 0);
        ep.join(10, 5, 100, 1);
        ep.join(12, 7, 200, 2);
        // Thread 12 completed the round after all (a barrier's last arrival): the holder.
        ep.cancel(12, 200);
        let c = ep.close(1_000, 12);
        assert_eq!(c.waits, 1);
        assert_eq!(c.waiters, vec![(10, 5, 900)]);
        assert_eq!(c.threads_tried, 2);
        assert_eq!(c.level, 1);
    }

    #[test]
    fn the_holder_is_never_listed_among_the_waiters() {
        // The thread that opened the episode became the holder (handed the object at once).
        let mut ep = Episode::new(1, 1, 0);
        ep.join(12, 7, 0, 1);
        ep.join(10, 5, 50, 1);
        let c = ep.close(100, 12);
        assert_eq!(c.waiters, vec![(10, 5, 50)]);
        assert_eq!(c.waits, 1);
        assert_eq!(c.threads_tried, 2);
        assert_eq!(c.level, 1);
    }
}
