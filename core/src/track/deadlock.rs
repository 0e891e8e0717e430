//! Deadlock: a wait that closes a cycle in the wait-for graph (thread → object it waits for →
//! thread holding it → …). Waiting threads walk the graph when they start to wait and again each
//! time a wait slice expires; a cycle seen twice with the same wait sequence numbers cannot be a
//! race with a release, and is recorded at once with every thread, object and chain in it, and
//! the log synced: the program will hang and its user will kill it.

use std::sync::atomic::Ordering;

use smallvec::SmallVec;
use waitshim_format::{
    deadlock::EVERY_THREAD_WAITS, Deadlock, DeadlockBroken, DeadlockEdge, ObjectKind,
};

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
/// Without `checked`, the holder is read from the object's memory directly.
///
/// # Safety
/// Unless `checked`, `obj` is live (the calling thread waits on it).
unsafe fn holders(tr: &Tracker, obj: &ObjEntry, checked: bool) -> SmallVec<[u32; 4]> {
    let mut out = SmallVec::new();
    let h = if checked {
        obj.holder_checked()
    } else {
        // SAFETY: as the caller promises.
        unsafe { obj.holder() }
    };
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

/// What a walk needs of the wait-for graph: for a thread, what it waits for now. The live graph
/// is the tracker's ([`Live`]); the tests build graphs of plain data.
pub trait Graph {
    /// An object as the graph names it.
    type Obj: Copy;
    /// What thread `tid` waits for now, if anything: the object, the thread's wait number and
    /// the threads holding the object (in tid order). Objects reached through other threads
    /// (`checked`) may have been released and unmapped since.
    fn waiting(&self, tid: u32, checked: bool) -> Option<(Self::Obj, u64, SmallVec<[u32; 4]>)>;
    /// The hop of a cycle found: `tid` waits (wait number `seq`) for `obj`, held by `holder`.
    fn hop(&self, tid: u32, obj: Self::Obj, seq: u64, holder: u32) -> Hop;
}

/// The tracker's wait-for graph, as the threads of the program leave it.
pub struct Live<'a>(pub &'a Tracker);

impl Graph for Live<'_> {
    type Obj = &'static ObjEntry;

    fn waiting(&self, tid: u32, checked: bool) -> Option<(Self::Obj, u64, SmallVec<[u32; 4]>)> {
        let t = self.0.thread(tid)?;
        let p = t.waiting_on.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: tracking entries are never freed.
        let obj: &'static ObjEntry = unsafe { &*p };
        let seq = t.wait_seq.load(Ordering::Acquire);
        // Read directly only for the calling thread's own wait, whose object is live; any other
        // thread's may have been released and unmapped since.
        let own = std::ptr::eq(t, super::threads::own_record());
        // SAFETY: unchecked only for the calling thread's own wait.
        Some((obj, seq, unsafe { holders(self.0, obj, checked || !own) }))
    }

    fn hop(&self, tid: u32, obj: Self::Obj, seq: u64, holder: u32) -> Hop {
        Hop {
            tid,
            seq,
            object_id: self.0.id_of(obj),
            chain: self
                .0
                .thread(tid)
                .map_or(0, |t| t.wait_chain.load(Ordering::Relaxed)),
            holder,
        }
    }
}

/// One thread of a walk: the object it waits for, who holds that, and which holder is next.
struct Step<O> {
    tid: u32,
    obj: O,
    seq: u64,
    holders: SmallVec<[u32; 4]>,
    next: usize,
}

/// The wait-for cycle through `start`, if there is one now: a depth-first walk from `start`
/// along "waits for an object held by". Most walks stop after a hop or two, at a holder that
/// runs; an object held by several readers branches. Only the calling thread's own wait is read
/// at its object's address (live until that wait ends: `engage::wait_begin`'s promise); every
/// other hop is read through the kernel.
pub fn find_cycle(tr: &Tracker, start: &ThreadRec) -> Option<Vec<Hop>> {
    cycle_through(&Live(tr), start.tid())
}

/// [`find_cycle`] in any graph.
pub fn cycle_through<G: Graph>(g: &G, start: u32) -> Option<Vec<Hop>> {
    let step = |tid: u32, checked: bool| {
        g.waiting(tid, checked).map(|(obj, seq, holders)| Step {
            tid,
            obj,
            seq,
            holders,
            next: 0,
        })
    };
    let mut path: SmallVec<[Step<G::Obj>; 8]> = SmallVec::new();
    path.push(step(start, false)?);
    // Threads visited, bounding walks through many readers of many rwlocks.
    let mut budget = MAX_VISITS;
    while let Some(top) = path.last_mut() {
        let Some(&h) = top.holders.get(top.next) else {
            path.pop();
            continue;
        };
        top.next += 1;
        if h == start {
            return Some(
                path.iter()
                    .map(|s| g.hop(s.tid, s.obj, s.seq, s.holders[s.next - 1]))
                    .collect(),
            );
        }
        // A cycle that does not pass through `start`: its own members report it.
        if path.len() >= MAX_HOPS || path.iter().any(|s| s.tid == h) {
            continue;
        }
        if budget == 0 {
            return None;
        }
        budget -= 1;
        if let Some(next) = step(h, true) {
            path.push(next);
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

/// Records `cycle` unless a thread of it already did; `detected_by`: the thread that found it,
/// or [`EVERY_THREAD_WAITS`].
pub fn report(tr: &Tracker, detected_by: u32, cycle: &[Hop], now: u64) {
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
            detected_by,
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

/// What the every-thread-waits check needs to know of the process beyond the tracker; found by
/// the caller (the shim's thread).
pub struct Surroundings<'a> {
    /// The shim's own thread, which never waits on the program's objects.
    pub own_tid: u32,
    /// How many threads the process has (`/proc/self/task`): a thread the shim never saw
    /// (made with `clone`) may be running.
    pub tasks: &'a dyn Fn() -> usize,
    /// Whether memory at an address is mapped shared: another process may release an object
    /// there.
    pub shared: &'a dyn Fn(usize) -> bool,
    /// Whether the program handles a signal that may arrive at any time: its handler may post
    /// a semaphore.
    pub async_handlers: bool,
}

/// A thread as the every-thread-waits check sees it.
pub struct Seen {
    /// Its wait, if it waits on an object the shim tracks; the hop's holder is the object's
    /// first holder, 0 for an object nobody holds.
    pub wait: Option<Hop>,
    /// The object's address and kind.
    pub addr: usize,
    pub kind: ObjectKind,
    /// The wait has no deadline.
    pub untimed: bool,
    /// The thread is in a deadlock recorded already.
    pub in_deadlock: bool,
}

/// A hang no wait-for cycle shows, as when a thread waits on a condition variable while it holds
/// the mutex the thread that would signal it waits for: every thread of the process waits, with
/// no deadline, on an object of this process, and nothing changed since the last look (`last`:
/// the waits seen then, by thread and wait number). Nothing left in the process can end any of
/// these waits: recorded as a deadlock found by [`EVERY_THREAD_WAITS`], once.
pub fn look_for_hang(
    tr: &Tracker,
    around: &Surroundings<'_>,
    last: &mut Vec<(u32, u64)>,
    now: u64,
) {
    let threads = tr.threads.iter().filter_map(|e| {
        let t = e.value().0;
        (t.tid() != around.own_tid).then(|| seen(tr, t))
    });
    if let Some(hops) = hang_of(threads, around, last) {
        report(tr, EVERY_THREAD_WAITS, &hops, now);
    }
}

fn seen(tr: &Tracker, t: &ThreadRec) -> Seen {
    let live = Live(tr);
    // The flag first: a wait that began after it was read is seen with a new wait number.
    let untimed = t.wait_untimed.load(Ordering::Acquire);
    let in_deadlock = t.in_deadlock.load(Ordering::Acquire) != 0;
    match live.waiting(t.tid(), true) {
        Some((obj, seq, holders)) => Seen {
            wait: Some(live.hop(t.tid(), obj, seq, holders.first().copied().unwrap_or(0))),
            addr: obj.addr(),
            kind: obj.kind,
            untimed,
            in_deadlock,
        },
        None => Seen {
            wait: None,
            addr: 0,
            kind: ObjectKind::Mutex,
            untimed,
            in_deadlock,
        },
    }
}

/// The rule of [`look_for_hang`] over the program's threads as seen now: the waits to record,
/// when the hang is certain.
///
/// Not claimed when a thread is in a deadlock recorded already (a cycle says why), when a thread
/// runs or is blocked outside the objects the shim tracks (it may still signal), when a wait has
/// a deadline, when the process has threads the shim never saw, when a waited object lies in
/// shared memory (another process may release it), or when a semaphore is waited for while the
/// program handles an asynchronous signal (its handler may post).
pub fn hang_of(
    threads: impl Iterator<Item = Seen>,
    around: &Surroundings<'_>,
    last: &mut Vec<(u32, u64)>,
) -> Option<Vec<Hop>> {
    let mut waits: Vec<Seen> = Vec::new();
    for t in threads {
        if t.wait.is_none() || !t.untimed {
            last.clear();
            return None;
        }
        if t.in_deadlock {
            return None;
        }
        waits.push(t);
    }
    if waits.is_empty() {
        return None;
    }
    let now: Vec<(u32, u64)> = waits
        .iter()
        .filter_map(|t| t.wait.as_ref().map(|h| (h.tid, h.seq)))
        .collect();
    if now != *last {
        // First seen so: confirmed (or not) at the next look.
        *last = now;
        return None;
    }
    if (around.tasks)() != waits.len() + 1
        || waits.iter().any(|t| (around.shared)(t.addr))
        || (around.async_handlers && waits.iter().any(|t| t.kind == ObjectKind::Semaphore))
    {
        return None;
    }
    Some(waits.into_iter().filter_map(|t| t.wait).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A wait-for graph of plain data: thread → (object, wait number, holders).
    #[derive(Default)]
    struct Plain(HashMap<u32, (u64, u64, Vec<u32>)>);

    impl Plain {
        fn waits(mut self, tid: u32, obj: u64, holders: &[u32]) -> Self {
            self.0
                .insert(tid, (obj, u64::from(tid) * 10, holders.to_vec()));
            self
        }
    }

    impl Graph for Plain {
        type Obj = u64;
        fn waiting(&self, tid: u32, _: bool) -> Option<(u64, u64, SmallVec<[u32; 4]>)> {
            self.0
                .get(&tid)
                .map(|(o, seq, h)| (*o, *seq, h.iter().copied().collect()))
        }
        fn hop(&self, tid: u32, obj: u64, seq: u64, holder: u32) -> Hop {
            Hop {
                tid,
                seq,
                object_id: obj,
                chain: 0,
                holder,
            }
        }
    }

    fn tids(c: &[Hop]) -> Vec<(u32, u64, u32)> {
        c.iter().map(|h| (h.tid, h.object_id, h.holder)).collect()
    }

    #[test]
    fn two_threads_each_waiting_for_what_the_other_holds_close_a_cycle() {
        let g = Plain::default().waits(1, 100, &[2]).waits(2, 200, &[1]);
        let c = cycle_through(&g, 1).expect("cycle");
        assert_eq!(tids(&c), vec![(1, 100, 2), (2, 200, 1)]);
        assert_eq!(c[0].seq, 10);
        // Found from the other end too, starting there.
        assert_eq!(
            tids(&cycle_through(&g, 2).unwrap()),
            vec![(2, 200, 1), (1, 100, 2)]
        );
    }

    #[test]
    fn a_thread_waiting_for_what_it_holds_itself_is_a_cycle_of_one() {
        let g = Plain::default().waits(7, 100, &[7]);
        assert_eq!(tids(&cycle_through(&g, 7).unwrap()), vec![(7, 100, 7)]);
    }

    #[test]
    fn a_chain_that_ends_at_a_running_holder_is_no_cycle() {
        // 1 → 2 → 3, and 3 runs.
        let g = Plain::default().waits(1, 100, &[2]).waits(2, 200, &[3]);
        assert!(cycle_through(&g, 1).is_none());
        // Nor is a thread that does not wait.
        assert!(cycle_through(&g, 3).is_none());
    }

    #[test]
    fn a_cycle_elsewhere_is_left_to_its_own_members() {
        // 1 waits for 2, which is in a cycle with 3: 1 is stuck, but not in the cycle.
        let g = Plain::default()
            .waits(1, 100, &[2])
            .waits(2, 200, &[3])
            .waits(3, 300, &[2]);
        assert!(cycle_through(&g, 1).is_none());
        assert!(cycle_through(&g, 2).is_some());
    }

    #[test]
    fn a_lock_held_by_several_readers_is_walked_through_each_of_them() {
        // 1 waits to write an rwlock read by 2 and 3; 3 waits for a mutex 1 holds.
        let g = Plain::default().waits(1, 100, &[2, 3]).waits(3, 300, &[1]);
        assert_eq!(
            tids(&cycle_through(&g, 1).unwrap()),
            vec![(1, 100, 3), (3, 300, 1)]
        );
    }

    #[test]
    fn an_object_nobody_holds_leads_nowhere() {
        // A condition variable has no holder: a wait on it closes no cycle.
        let g = Plain::default().waits(1, 100, &[]).waits(2, 200, &[1]);
        assert!(cycle_through(&g, 2).is_none());
    }

    #[test]
    fn a_cycle_longer_than_the_walk_allows_is_not_followed() {
        let n = MAX_HOPS as u32 + 5;
        let mut g = Plain::default();
        for t in 1..=n {
            g = g.waits(t, u64::from(t), &[t % n + 1]);
        }
        assert!(cycle_through(&g, 1).is_none());
        let mut g = Plain::default();
        for t in 1..=8 {
            g = g.waits(t, u64::from(t), &[t % 8 + 1]);
        }
        assert_eq!(cycle_through(&g, 1).unwrap().len(), 8);
    }

    fn waiting(tid: u32, seq: u64, kind: ObjectKind, holder: u32) -> Seen {
        Seen {
            wait: Some(Hop {
                tid,
                seq,
                object_id: u64::from(tid) + 100,
                chain: 0,
                holder,
            }),
            addr: 0x1000 * tid as usize,
            kind,
            untimed: true,
            in_deadlock: false,
        }
    }

    /// The cond+mutex hang: main joins the waiter, the waiter waits on a condition variable
    /// (nobody holds it), the signaller waits for the mutex the waiter holds.
    fn hang() -> Vec<Seen> {
        vec![
            waiting(1, 1, ObjectKind::Thread, 2),
            waiting(2, 5, ObjectKind::Cond, 0),
            waiting(3, 9, ObjectKind::Mutex, 2),
        ]
    }

    /// Runs the rule twice (two looks a second apart) over `threads()`, in a process of `tasks`
    /// threads.
    fn twice(
        threads: impl Fn() -> Vec<Seen>,
        tasks: usize,
        shared: usize,
        handlers: bool,
    ) -> Option<Vec<Hop>> {
        let tasks = move || tasks;
        let shared = move |addr: usize| addr == shared;
        let around = Surroundings {
            own_tid: 99,
            tasks: &tasks,
            shared: &shared,
            async_handlers: handlers,
        };
        let mut last = Vec::new();
        assert!(
            hang_of(threads().into_iter(), &around, &mut last).is_none(),
            "claimed at the first look"
        );
        hang_of(threads().into_iter(), &around, &mut last)
    }

    #[test]
    fn every_thread_waiting_unchanged_on_objects_of_the_process_is_a_hang() {
        let hops = twice(hang, 4, 0, false).expect("hang");
        assert_eq!(hops.len(), 3);
        assert_eq!(hops[1].holder, 0);
        assert_eq!(hops[2].holder, 2);
    }

    #[test]
    fn a_thread_that_runs_or_waits_with_a_deadline_or_anew_keeps_it_from_being_claimed() {
        // One thread runs (or sits in a system call the shim does not track).
        let runs = || {
            let mut t = hang();
            t[0].wait = None;
            t
        };
        assert!(twice(runs, 4, 0, false).is_none());
        // One wait has a deadline.
        let timed = || {
            let mut t = hang();
            t[1].untimed = false;
            t
        };
        assert!(twice(timed, 4, 0, false).is_none());
        // A thread waited again between the looks: something moved.
        let around = Surroundings {
            own_tid: 99,
            tasks: &|| 4,
            shared: &|_| false,
            async_handlers: false,
        };
        let mut last = Vec::new();
        assert!(hang_of(hang().into_iter(), &around, &mut last).is_none());
        let mut moved = hang();
        moved[2].wait.as_mut().unwrap().seq += 1;
        assert!(hang_of(moved.into_iter(), &around, &mut last).is_none());
        assert!(hang_of(hang().into_iter(), &around, &mut last).is_none());
    }

    #[test]
    fn threads_the_shim_never_saw_or_shared_memory_or_a_recorded_cycle_keep_it_unclaimed() {
        // A fifth task: a thread made with clone, which may be running.
        assert!(twice(hang, 5, 0, false).is_none());
        // The mutex lies in shared memory: another process may unlock it.
        assert!(twice(hang, 4, 0x3000, false).is_none());
        // A thread of it is in a cycle recorded already.
        let cycled = || {
            let mut t = hang();
            t[2].in_deadlock = true;
            t
        };
        assert!(twice(cycled, 4, 0, false).is_none());
    }

    #[test]
    fn a_semaphore_wait_is_no_hang_while_a_signal_handler_may_post_it() {
        let on_sem = || {
            vec![
                waiting(1, 1, ObjectKind::Thread, 2),
                waiting(2, 5, ObjectKind::Semaphore, 0),
            ]
        };
        assert!(twice(on_sem, 3, 0, true).is_none());
        assert!(twice(on_sem, 3, 0, false).is_some());
        // Handlers cannot signal a condition variable (not async-signal-safe).
        assert!(twice(hang, 4, 0, true).is_some());
    }
}
