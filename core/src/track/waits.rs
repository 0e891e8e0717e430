//! Finished contended waits, gathered per thread before they reach their object.
//!
//! Adding a wait to its object's counters straight away writes four or five cache lines that
//! every waiter of that object writes too (counts, totals, maxima, the wait site, the reason
//! code), while the waiter holds the lock it waited for: under heavy contention that lengthens
//! every critical section by a few cache misses. Instead the thread adds the wait to a small
//! table of its own, keyed by object, call chain, side and reason, and adds a cell to its object
//! only when the cell is evicted, has gathered `FOLD_AT` waits, or the thread ends.
//!
//! A flush from any thread reads the cells without taking them ([`Cells::gather`]), so that the
//! log has every wait that ended, as soon as the next flush, exactly as when waits were added
//! one by one. Each cell is guarded by a sequence count (odd while its owner changes it): a
//! reader that sees it change skips the cell, whose waits are then in its object or will be
//! at the next flush.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use waitshim_format::counter;

use super::engage::Outcome;
use super::objects::{raise, ObjEntry};

/// Cells per thread: a thread rarely waits on more than a few objects from a few places at once.
pub const CELLS: usize = 8;
/// Waits gathered in a cell before it is added to its object anyway.
const FOLD_AT: u64 = 256;

/// How one wait ended, as its cell counts it.
#[derive(Clone, Copy)]
pub struct Ended {
    pub chain: u32,
    /// A shared (read) wait: counted apart from exclusive ones.
    pub shared: bool,
    /// The reason code (`waitshim_format::counter::ENDED_*`).
    pub outcome: u16,
    pub waited_ns: u64,
    /// Condition variables: from the wake-up to the return (re-acquiring the mutex).
    pub reacquire_ns: Option<u64>,
}

/// A condition variable wait that returned woken (owner thread only, `threads::Local`): whether
/// it was spurious is known at the thread's next wait on a condition variable.
#[derive(Clone, Copy)]
pub struct Woken {
    pub cond: &'static ObjEntry,
    /// The entry's generation: an entry reused for another object is not this one.
    pub generation: u16,
    pub mutex: usize,
    /// Where the thread's count of acquisitions of the mutex stood right after the wait took it
    /// back (`Slot::mark`; 0: not known). Unchanged at the next wait: the thread has held the
    /// mutex all along, so it waits again without having done anything the wake-up was for.
    pub acquisitions: u64,
    /// The wait as its cell counted it.
    pub ended: Ended,
    /// When it began, and (policy version, rule) of the wait event a rule wrote for it, if one
    /// did: a reason that changes is written again for that event.
    pub start: u64,
    pub event: Option<(u32, u32)>,
    /// The thread's CPU time when the wait returned (`clock::thread_cpu_ns`).
    pub returned_cpu_ns: u64,
}

/// The stamp a signal (`broadcast` false) or a broadcast sent at `now` leaves on a condition
/// variable (`Busy::last_wake`): the time shifted left by one, the low bit set for a broadcast.
#[inline(always)]
pub fn wake_stamp(now: u64, broadcast: bool) -> u64 {
    now << 1 | u64::from(broadcast)
}

/// Whether a wake-up must be stamped on the condition variable (a shared write). A signal
/// nobody waits for wakes nobody: only when there are `waiters`, and, for a signal, when some
/// wait began (the latest at `last_wait_start`) no earlier than the last stamp `last_wake` (the
/// ones before it were woken no earlier than that stamp). A broadcast always stamps, to be told
/// apart.
#[inline(always)]
pub fn needs_stamp(waiters: u32, broadcast: bool, last_wake: u64, last_wait_start: u64) -> bool {
    waiters > 0 && (broadcast || last_wake >> 1 <= last_wait_start)
}

/// How a condition variable wait that began at `start` ended, from glibc's result `r` and the
/// variable's last wake stamp (`last_wake`, see [`wake_stamp`]), and when the re-acquiring of
/// the mutex began (the wake-up's time) for a return that holds the mutex after a wake-up.
///
/// Only a wake-up sent after the wait began can have ended it. A return of 0 without one the
/// shim saw was woken by a signal it could not see (from another process, or a statically
/// linked caller), or by none: either way the program goes on as if signalled, and whether the
/// wake-up served it is told at its next wait ([`rewait_is_spurious`]).
pub fn cond_wait_ended(r: libc::c_int, last_wake: u64, start: u64) -> (Outcome, Option<u64>) {
    let woken_at = Some(last_wake >> 1).filter(|&at| at > start);
    let outcome = match (r, woken_at) {
        (0, Some(_)) if last_wake & 1 != 0 => Outcome::Broadcast,
        (0, _) => Outcome::Signalled,
        (e, _) => Outcome::of(e),
    };
    let reacquire_from = match r {
        0 | libc::EOWNERDEAD => woken_at,
        _ => None,
    };
    (outcome, reacquire_from)
}

/// CPU time a thread may run between a woken wait's return and its next wait, holding the mutex
/// all along, for that wake-up to count as spurious: a `while (!predicate)` loop that finds its
/// predicate false runs well under a microsecond; a consumer that keeps the mutex while it works
/// on the item it was woken for runs longer. CPU time, not elapsed time: a thread preempted
/// between the two is not doing anything for the wake-up either.
pub const REWAIT_CPU_NS: u64 = 20_000;

/// Whether a condition variable wait that returned woken served nothing: the thread waits again
/// on the same condition variable with the same mutex, has not released that mutex since (its
/// count of acquisitions is where the return left it, and known), and ran less than
/// [`REWAIT_CPU_NS`] of CPU in between.
pub fn rewait_is_spurious(
    same_wait: bool,
    acquisitions_then: u64,
    acquisitions_now: u64,
    cpu_since_return: impl FnOnce() -> u64,
) -> bool {
    same_wait
        && acquisitions_then != 0
        && acquisitions_now == acquisitions_then
        && cpu_since_return() < REWAIT_CPU_NS
}

#[derive(Default)]
struct Cell {
    seq: AtomicU32,
    obj: AtomicPtr<ObjEntry>,
    /// chain | shared << 32 | outcome << 40
    key: AtomicU64,
    count: AtomicU64,
    total: AtomicU64,
    max: AtomicU64,
    reacquired: AtomicU64,
    reacquire_total: AtomicU64,
    reacquire_max: AtomicU64,
}

/// What one cell holds, read in one piece.
#[derive(Clone, Copy, Default)]
struct Values {
    count: u64,
    total: u64,
    max: u64,
    reacquired: u64,
    reacquire_total: u64,
    reacquire_max: u64,
}

impl Cell {
    /// Starts a change (owner only).
    fn begin(&self) {
        self.seq.store(
            self.seq.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        fence(Ordering::Release);
    }

    fn end(&self) {
        self.seq.store(
            self.seq.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Release,
        );
    }

    fn values(&self) -> Values {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Values {
            count: l(&self.count),
            total: l(&self.total),
            max: l(&self.max),
            reacquired: l(&self.reacquired),
            reacquire_total: l(&self.reacquire_total),
            reacquire_max: l(&self.reacquire_max),
        }
    }

    /// (object, key, values) of a cell with waits, if it was not being changed while read.
    fn read(&self) -> Option<(usize, u64, Values)> {
        let before = self.seq.load(Ordering::Acquire);
        if before & 1 != 0 {
            return None;
        }
        let p = self.obj.load(Ordering::Relaxed);
        let key = self.key.load(Ordering::Relaxed);
        let v = self.values();
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != before || p.is_null() || v.count == 0 {
            return None;
        }
        Some((p as usize, key, v))
    }

    fn clear(&self) {
        for a in [
            &self.count,
            &self.total,
            &self.max,
            &self.reacquired,
            &self.reacquire_total,
            &self.reacquire_max,
        ] {
            a.store(0, Ordering::Relaxed);
        }
    }
}

/// A cell's key: the wait's chain, whether it was shared, its reason (below 256: the counter
/// keys are), and the generation of the object's entry, so that a cell left from an object
/// whose entry now serves another is never added to the new one (see [`fold`]).
fn key_of(e: &Ended, generation: u16) -> u64 {
    debug_assert!(e.outcome < 256);
    u64::from(e.chain)
        | u64::from(e.shared) << 32
        | u64::from(e.outcome & 0xff) << 40
        | u64::from(generation) << 48
}

fn split(key: u64) -> (u32, bool, u16) {
    (key as u32, (key >> 32) & 1 != 0, (key >> 40) as u16 & 0xff)
}

fn generation_of(key: u64) -> u16 {
    (key >> 48) as u16
}

/// One thread's cells. Written only by the thread that owns them (plain loads and stores, no
/// read-modify-write), read by flushes on other threads.
#[derive(Default)]
pub struct Cells {
    cells: [Cell; CELLS],
    /// Odd while a wait moves from one cell to another ([`Cells::reclassify`]): a flush that
    /// saw it change reads the cells again, so that it never counts the wait in both or neither.
    moving: AtomicU32,
}

impl Cells {
    /// Counts a finished wait on `obj` (owner thread only).
    pub fn note(&self, obj: &ObjEntry, e: Ended) {
        let key = key_of(&e, obj.generation.load(Ordering::Relaxed));
        let p = obj as *const ObjEntry as *mut ObjEntry;
        let h = (p as u64 ^ key.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61;
        let c = &self.cells[h as usize % CELLS];
        if c.obj.load(Ordering::Relaxed) != p || c.key.load(Ordering::Relaxed) != key {
            fold(c);
            c.begin();
            c.obj.store(p, Ordering::Relaxed);
            c.key.store(key, Ordering::Relaxed);
            c.end();
        }
        let v = c.values();
        c.begin();
        c.count.store(v.count + 1, Ordering::Relaxed);
        c.total
            .store(v.total.saturating_add(e.waited_ns), Ordering::Relaxed);
        if e.waited_ns > v.max {
            c.max.store(e.waited_ns, Ordering::Relaxed);
        }
        if let Some(r) = e.reacquire_ns {
            c.reacquired.store(v.reacquired + 1, Ordering::Relaxed);
            c.reacquire_total
                .store(v.reacquire_total.saturating_add(r), Ordering::Relaxed);
            if r > v.reacquire_max {
                c.reacquire_max.store(r, Ordering::Relaxed);
            }
        }
        c.end();
        if v.count + 1 >= FOLD_AT {
            fold(c);
        }
    }

    /// Moves one finished wait on `obj`, counted as `e`, to the reason `to` (owner thread
    /// only): a condition variable wait found spurious after it was counted.
    ///
    /// The wait is still in its cell unless the cell was added to the object since; then the
    /// object's counters are moved instead. Only the reason moves: the object's waits, times
    /// and sites do not depend on it.
    pub fn reclassify(&self, obj: &ObjEntry, e: Ended, to: u16) {
        if e.outcome == to {
            return;
        }
        let key = key_of(&e, obj.generation.load(Ordering::Relaxed));
        let p = obj as *const ObjEntry as *mut ObjEntry;
        let cell = self.cells.iter().find(|c| {
            c.obj.load(Ordering::Relaxed) == p
                && c.key.load(Ordering::Relaxed) == key
                && c.count.load(Ordering::Relaxed) > 0
        });
        let Some(c) = cell else {
            obj.move_count(e.outcome, to);
            return;
        };
        // A cell with this key holds this wait: the thread waited on `obj` with this reason
        // and chain since, only if it waited on `obj` again in between, which ends the memo
        // this comes from (see `cond`).
        self.moving.store(
            self.moving.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        fence(Ordering::Release);
        let v = c.values();
        c.begin();
        if v.count == 1 {
            c.clear();
        } else {
            c.count.store(v.count - 1, Ordering::Relaxed);
            c.total
                .store(v.total.saturating_sub(e.waited_ns), Ordering::Relaxed);
            if let Some(r) = e.reacquire_ns {
                c.reacquired
                    .store(v.reacquired.saturating_sub(1), Ordering::Relaxed);
                c.reacquire_total
                    .store(v.reacquire_total.saturating_sub(r), Ordering::Relaxed);
            }
        }
        c.end();
        self.note(obj, Ended { outcome: to, ..e });
        self.moving.store(
            self.moving.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Release,
        );
        // The waits in all are unchanged: the flush must still see that the object changed.
        obj.touch();
    }

    /// Adds every cell to its object (the owner thread, or anyone once it has ended).
    pub fn fold_all(&self) {
        for c in &self.cells {
            fold(c);
        }
    }

    /// Adds the cells' waits, without taking them, to `into` (by object address).
    pub fn gather(&self, into: &mut HashMap<usize, Pending>) {
        // (object, key, values) of the cells read, on the stack: no allocation between reads.
        let mut read = [(0usize, 0u64, Values::default()); CELLS];
        let mut n = 0;
        // A wait moving between two cells is a few stores long: a few tries see it done.
        for _ in 0..8 {
            let before = self.moving.load(Ordering::Acquire);
            if before & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            n = 0;
            for c in &self.cells {
                if let Some(r) = c.read() {
                    read[n] = r;
                    n += 1;
                }
            }
            fence(Ordering::Acquire);
            if self.moving.load(Ordering::Relaxed) == before {
                break;
            }
        }
        for &(p, key, v) in &read[..n] {
            // SAFETY: tracking entries are leaked and never freed.
            let current = unsafe { &*(p as *const ObjEntry) }
                .generation
                .load(Ordering::Relaxed);
            // Left from an earlier object of the entry: counted when that one ended.
            if generation_of(key) == current {
                into.entry(p).or_default().add(key, v);
            }
        }
    }

    /// Forgets every cell (after fork, or for a record that a new thread takes over).
    pub fn clear(&self) {
        for c in &self.cells {
            c.begin();
            c.clear();
            c.obj.store(std::ptr::null_mut(), Ordering::Relaxed);
            c.key.store(0, Ordering::Relaxed);
            c.end();
        }
    }
}

/// Adds a cell to its object and empties it.
fn fold(c: &Cell) {
    let p = c.obj.load(Ordering::Relaxed);
    let v = c.values();
    if p.is_null() || v.count == 0 {
        return;
    }
    // SAFETY: tracking entries are leaked and never freed.
    let obj = unsafe { &*p };
    let key = c.key.load(Ordering::Relaxed);
    c.begin();
    if generation_of(key) != obj.generation.load(Ordering::Relaxed) {
        // The entry serves another object now: these waits were the earlier one's, written
        // with its last counters when it ended.
        c.clear();
        c.end();
        return;
    }
    let (chain, shared, outcome) = split(key);
    if shared {
        obj.add(counter::READ_CONTENDED, v.count);
        obj.add(counter::READ_WAIT_TOTAL_NS, v.total);
        obj.raise(counter::READ_WAIT_MAX_NS, v.max);
    } else {
        let s = &obj.busy().stats;
        s.contended.fetch_add(v.count, Ordering::Relaxed);
        s.wait_total.fetch_add(v.total, Ordering::Relaxed);
        raise(&s.wait_max, v.max);
    }
    obj.site_add(chain, v.count, v.total, v.max);
    obj.add(outcome, v.count);
    if v.reacquired > 0 {
        obj.add(counter::REACQUIRE_WAIT_TOTAL_NS, v.reacquire_total);
        obj.raise(counter::REACQUIRE_WAIT_MAX_NS, v.reacquire_max);
    }
    obj.touch();
    c.clear();
    c.end();
}

/// Waits still in threads' cells for one object, to be written with its counters.
#[derive(Default)]
pub struct Pending {
    /// Waits in all: a flush writes the object again when this changed.
    pub waits: u64,
    pub contended: u64,
    pub wait_total: u64,
    pub wait_max: u64,
    /// Kind counters to add (`counter` key, value).
    pub added: Vec<(u16, u64)>,
    /// Kind counters that are maxima (`counter` key, value).
    pub maxima: Vec<(u16, u64)>,
    /// (chain, count, total, max)
    pub sites: Vec<(u32, u64, u64, u64)>,
    /// Uncontended kind-specific events (posts, read acquisitions, signals) among `added`.
    pub quiet: u64,
}

impl Pending {
    fn add(&mut self, key: u64, v: Values) {
        let (chain, shared, outcome) = split(key);
        self.waits += v.count;
        if shared {
            self.plus(counter::READ_CONTENDED, v.count);
            self.plus(counter::READ_WAIT_TOTAL_NS, v.total);
            self.at_least(counter::READ_WAIT_MAX_NS, v.max);
        } else {
            self.contended += v.count;
            self.wait_total += v.total;
            self.wait_max = self.wait_max.max(v.max);
        }
        self.plus(outcome, v.count);
        if v.reacquired > 0 {
            self.plus(counter::REACQUIRE_WAIT_TOTAL_NS, v.reacquire_total);
            self.at_least(counter::REACQUIRE_WAIT_MAX_NS, v.reacquire_max);
        }
        match self.sites.iter_mut().find(|s| s.0 == chain) {
            Some(s) => {
                s.1 += v.count;
                s.2 += v.total;
                s.3 = s.3.max(v.max);
            }
            None => self.sites.push((chain, v.count, v.total, v.max)),
        }
    }

    /// Adds uncontended kind-specific events still in a thread's cache (counter `key`).
    pub fn add_quiet(&mut self, key: u16, v: u64) {
        self.plus(key, v);
        self.quiet += v;
    }

    fn plus(&mut self, key: u16, v: u64) {
        match self.added.iter_mut().find(|a| a.0 == key) {
            Some(a) => a.1 += v,
            None => self.added.push((key, v)),
        }
    }

    fn at_least(&mut self, key: u16, v: u64) {
        match self.maxima.iter_mut().find(|a| a.0 == key) {
            Some(a) => a.1 = a.1.max(v),
            None => self.maxima.push((key, v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_ends_signalled_or_broadcast_by_the_wake_up_sent_after_it_began() {
        let start = 1_000;
        assert_eq!(
            cond_wait_ended(0, wake_stamp(1_500, false), start),
            (Outcome::Signalled, Some(1_500))
        );
        assert_eq!(
            cond_wait_ended(0, wake_stamp(1_500, true), start),
            (Outcome::Broadcast, Some(1_500))
        );
        // A broadcast before the wait began did not end it: woken by something the shim did
        // not see, as if signalled, with no re-acquire time to tell.
        assert_eq!(
            cond_wait_ended(0, wake_stamp(900, true), start),
            (Outcome::Signalled, None)
        );
        assert_eq!(cond_wait_ended(0, 0, start), (Outcome::Signalled, None));
    }

    #[test]
    fn errors_end_a_wait_by_their_reason_and_only_a_held_mutex_has_a_reacquire_time() {
        let woken = wake_stamp(2_000, false);
        assert_eq!(
            cond_wait_ended(libc::ETIMEDOUT, woken, 1_000),
            (Outcome::TimedOut, None)
        );
        assert_eq!(
            cond_wait_ended(libc::EOWNERDEAD, woken, 1_000),
            (Outcome::OwnerDied, Some(2_000))
        );
        assert_eq!(
            cond_wait_ended(libc::EINVAL, woken, 1_000),
            (Outcome::Failed(libc::EINVAL), None)
        );
    }

    #[test]
    fn a_wake_up_is_stamped_only_when_it_can_wake_a_wait_the_last_stamp_does_not_cover() {
        // Nobody waits: nothing to stamp, signal or broadcast.
        assert!(!needs_stamp(0, false, 0, 0));
        assert!(!needs_stamp(0, true, 0, 0));
        // The waits began before the last stamp: it covers them.
        assert!(!needs_stamp(2, false, wake_stamp(5_000, false), 4_000));
        // One began after it: stamp again.
        assert!(needs_stamp(2, false, wake_stamp(5_000, false), 6_000));
        // A broadcast always stamps, to be told apart from a signal.
        assert!(needs_stamp(2, true, wake_stamp(5_000, false), 4_000));
    }

    #[test]
    fn a_loop_that_waits_again_at_once_was_woken_for_nothing() {
        assert!(rewait_is_spurious(true, 7, 7, || 800));
    }

    #[test]
    fn a_consumer_working_under_the_mutex_was_woken_for_something() {
        // It kept the mutex, but ran 200 µs on the item before waiting for the next one.
        assert!(!rewait_is_spurious(true, 7, 7, || 200_000));
        assert!(!rewait_is_spurious(true, 7, 7, || REWAIT_CPU_NS));
    }

    #[test]
    fn releasing_the_mutex_or_waiting_elsewhere_is_not_spurious() {
        let never = || -> u64 { panic!("CPU time read although the answer was known") };
        // Took the mutex again since (its count moved).
        assert!(!rewait_is_spurious(true, 7, 9, never));
        // Another condition variable or mutex.
        assert!(!rewait_is_spurious(false, 7, 7, never));
        // The mutex's count was not known (not cached in the thread's slot).
        assert!(!rewait_is_spurious(true, 0, 0, never));
    }

    #[test]
    fn waits_left_in_a_cell_from_an_object_whose_entry_serves_another_are_not_added_to_it() {
        use crate::track::objects::{leak_entry, ObjEntry, DEAD};
        use waitshim_format::ObjectKind;
        let obj = leak_entry(ObjEntry::new(0x1000, ObjectKind::Thread));
        let cells = Cells::default();
        let e = Ended {
            chain: 3,
            shared: false,
            outcome: counter::ENDED_ACQUIRED,
            waited_ns: 500,
            reacquire_ns: None,
        };
        cells.note(obj, e);
        // The object ends (its waits are gathered then) and its entry serves a new object.
        let mut pending = HashMap::new();
        cells.gather(&mut pending);
        assert_eq!(pending.len(), 1, "the ending object's waits are gathered");
        obj.set_flag(DEAD);
        obj.reuse(0x2000);
        let mut again = HashMap::new();
        cells.gather(&mut again);
        assert!(
            again.is_empty(),
            "the new object has no waits of the old one"
        );
        cells.fold_all();
        assert_eq!(obj.busy().stats.contended.load(Ordering::Relaxed), 0);
        // A wait on the new object counts for it.
        cells.note(obj, e);
        cells.fold_all();
        assert_eq!(obj.busy().stats.contended.load(Ordering::Relaxed), 1);
    }
}
