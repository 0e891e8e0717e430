//! What the text and the JSON reports both say first: where the waiting went. Objects ranked by
//! what their waits cost the program's threads (the total time threads spent waiting for them,
//! waits still in progress when the log ended included), with the share of the threads' time
//! that is, and the call site that waited most for each, in three groups: first the objects a
//! thread waits for because another holds them (locks), then those it waits on for another
//! thread to act (condition variables, semaphores, barriers: an idle worker waiting for work
//! waits there too), then joins (waiting for a thread to finish). A server's background threads
//! idling on their condition variables for the whole run, or a main thread joining its workers,
//! would otherwise head every report above the lock that cost something.

use std::collections::{BTreeMap, HashMap};

use crate::model::Model;

/// What waiting for one object cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    pub object_id: u64,
    /// Time threads spent waiting for it: finished waits, plus waits still in progress at the
    /// log's last look, until then.
    pub wait_ns: u64,
    /// Of which still in progress.
    pub open_ns: u64,
    /// Contended waits (finished and still in progress).
    pub waits: u64,
    pub max_wait_ns: u64,
    /// Most threads waiting for it at once.
    pub max_waiters: u64,
    /// `wait_ns` as a fraction of the time every thread of the run lived (0 when unknown).
    pub share: f64,
    /// The call site that waited longest in total (waits still in progress included).
    pub top_site: Option<Site>,
    /// The object's other call sites, summed: how many, their waits and their time.
    pub other_sites: (usize, u64, u64),
    /// Which of the three groups the object is in.
    pub group: Group,
}

/// The waits for an object from one call chain: those that ended, as the shim summed them per
/// site, and those still in progress when the log ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Site {
    pub chain_id: u32,
    /// All its waits, those still in progress included.
    pub waits: u64,
    pub wait_ns: u64,
    /// Of which still in progress, and their time so far.
    pub open_waits: u64,
    pub open_ns: u64,
}

impl Cost {
    /// The waits and time of the object no call site accounts for (waits the log has no site
    /// of): what is left of the object's figures after its sites.
    pub fn unsited(&self) -> (u64, u64) {
        let (mut waits, mut ns) = (self.other_sites.1, self.other_sites.2);
        if let Some(t) = &self.top_site {
            waits = waits.saturating_add(t.waits);
            ns = ns.saturating_add(t.wait_ns);
        }
        (
            self.waits.saturating_sub(waits),
            self.wait_ns.saturating_sub(ns),
        )
    }
}

/// What a wait for an object is, for the report's grouping (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// Mutexes, rwlocks, spinlocks and futex words (Rust's and C++'s locks): held by another.
    Lock,
    /// Condition variables, semaphores, barriers: waiting for another thread to act.
    Event,
    /// Joins: waiting for a thread to finish.
    Join,
}

/// What a futex word is, from the functions of the call chain that first slept on it (innermost
/// first): language runtimes sleep on futexes for their locks, condition variables, parked
/// threads and joins alike, and only their code says which. None when no frame says.
///
/// - a join: a scoped-thread scope, a `JoinHandle`/`JoinInner` join, Python's thread join;
/// - waiting for another thread to act: a condition variable (`Condvar`, `condvar`), a parked
///   thread (`park`, `Parker`: rayon's and crossbeam's sleepers, the JVM's `PlatformEvent` and
///   `PlatformParker`, `Object.wait` as `ObjectMonitor::wait`), a channel's receive, a
///   barrier;
/// - a lock: a `Mutex`, `RwLock` or `lock_contended` frame.
///
/// The innermost frame that says decides, so a lock taken inside a condition variable's wait is
/// a lock wait; a parked thread's caller says what it parked for (a scope or a join handle: a
/// join; the JVM's monitor enter or mutex lock: a lock; else another thread's unpark).
pub fn runtime_group<'a>(functions: impl IntoIterator<Item = &'a str>) -> Option<Group> {
    let has = |f: &str, ps: &[&str]| ps.iter().any(|p| f.contains(p));
    const JOIN: [&str; 4] = [
        "std::thread::scoped::scope",
        "JoinInner",
        "JoinHandle",
        "PyThread_join",
    ];
    const PARK: [&str; 3] = ["Parker", "::park", "PlatformEvent"];
    const EVENT: [&str; 10] = [
        "Condvar",
        "condvar",
        "ObjectMonitor::wait",
        "Monitor::wait",
        "rayon_core::sleep",
        "crossbeam_channel",
        "mpmc::",
        "mpsc::",
        "Barrier",
        "Semaphore",
    ];
    const LOCK: [&str; 5] = [
        "Mutex",
        "RwLock",
        "lock_contended",
        "read_contended",
        "write_contended",
    ];
    // A parked thread waits for whatever its caller parks for: a join when that is a scope or
    // a join handle, else another thread's unpark.
    let mut parked = false;
    for f in functions {
        if has(f, &JOIN) {
            return Some(Group::Join);
        }
        if has(f, &PARK) {
            parked = true;
            continue;
        }
        if parked {
            // What the caller parked for: a lock that parks its waiters (the JVM's monitors
            // and mutexes), or anything else another thread's unpark ends.
            let lock = has(f, &LOCK) || has(f, &["EnterI", "ObjectMonitor::enter", "::lock"]);
            return Some(if lock { Group::Lock } else { Group::Event });
        }
        if has(f, &EVENT) {
            return Some(Group::Event);
        }
        if has(f, &LOCK) {
            return Some(Group::Lock);
        }
    }
    parked.then_some(Group::Event)
}

impl Group {
    pub fn of(kind: Option<waitshim_format::ObjectKind>) -> Group {
        use waitshim_format::ObjectKind as K;
        match kind {
            Some(K::Thread) => Group::Join,
            Some(K::Cond | K::Semaphore | K::Barrier) => Group::Event,
            _ => Group::Lock,
        }
    }
}

/// The threads' lives added up, each thread once however many had its tid: from each thread's
/// start (the run's, if unknown) to its exit (the log's end, if it did not exit; the start of
/// the thread that got its tid, if its exit record is missing), in ns.
pub fn thread_time(m: &Model) -> u64 {
    let start = m.start_ns();
    let end = match &m.run_end {
        Some(e) => e.ns,
        None => m.last_ns,
    };
    m.threads
        .values()
        .chain(m.ended_threads.iter().map(|e| &e.thread))
        .map(|t| t.life_ns(start, end))
        .fold(m.ended_sum.life_ns, u64::saturating_add)
}

/// Whether any thread waited for any object (finished or still waiting), without ranking.
pub fn any_wait(m: &Model) -> bool {
    m.open_waits.as_ref().is_some_and(|o| !o.waits.is_empty())
        || m.objects
            .values()
            .any(|o| o.wait_total_ns() > 0 || o.counters.as_ref().is_some_and(|c| c.contended > 0))
}

/// Every object threads waited for, by group, most costly first (ties by object id).
pub fn costs(m: &Model) -> Vec<Cost> {
    costs_grouped(m, &HashMap::new())
}

/// As [`costs`], with the futex words whose code says what they are (`groups`, from
/// [`runtime_group`]) in their group rather than among the locks.
pub fn costs_grouped(m: &Model, groups: &HashMap<u64, Group>) -> Vec<Cost> {
    let mut open: HashMap<u64, (u64, u64, u64)> = HashMap::new();
    // The waits in progress by object and call chain: each belongs to its site.
    let mut open_sites: HashMap<u64, BTreeMap<u32, (u64, u64)>> = HashMap::new();
    if let Some(o) = &m.open_waits {
        for w in &o.waits {
            let waited = o.ns.saturating_sub(w.since_ns);
            let e = open.entry(w.object_id).or_default();
            e.0 = e.0.saturating_add(waited);
            e.1 += 1;
            e.2 = e.2.max(waited);
            let s = open_sites
                .entry(w.object_id)
                .or_default()
                .entry(w.chain_id)
                .or_default();
            s.0 += 1;
            s.1 = s.1.saturating_add(waited);
        }
    }
    let total = thread_time(m);
    let mut out: Vec<Cost> = m
        .objects
        .values()
        .filter_map(|o| {
            let (open_ns, open_waits, open_max) =
                open.get(&o.object_id).copied().unwrap_or_default();
            let c = o.counters.as_ref();
            let finished = o.wait_total_ns();
            let wait_ns = finished.saturating_add(open_ns);
            let waits = c.map_or(0, |c| c.contended)
                + o.kind_counter(waitshim_format::counter::READ_CONTENDED)
                + open_waits;
            if wait_ns == 0 && waits == 0 {
                return None;
            }
            let mut sites: BTreeMap<u32, Site> = o
                .wait_sites()
                .values()
                .map(|s| {
                    let site = Site {
                        chain_id: s.chain_id,
                        waits: s.count,
                        wait_ns: s.wait_total_ns,
                        ..Site::default()
                    };
                    (s.chain_id, site)
                })
                .collect();
            for (&chain_id, &(n, ns)) in open_sites.get(&o.object_id).into_iter().flatten() {
                let s = sites.entry(chain_id).or_insert(Site {
                    chain_id,
                    ..Site::default()
                });
                s.waits += n;
                s.wait_ns = s.wait_ns.saturating_add(ns);
                s.open_waits += n;
                s.open_ns = s.open_ns.saturating_add(ns);
            }
            let top_site = sites
                .values()
                .max_by(|a, b| a.wait_ns.cmp(&b.wait_ns).then(b.chain_id.cmp(&a.chain_id)))
                .copied();
            let other_sites = sites
                .values()
                .filter(|s| Some(s.chain_id) != top_site.map(|t| t.chain_id))
                .fold((0, 0u64, 0u64), |(n, w, ns), s| {
                    (
                        n + 1,
                        w.saturating_add(s.waits),
                        ns.saturating_add(s.wait_ns),
                    )
                });
            Some(Cost {
                object_id: o.object_id,
                wait_ns,
                open_ns,
                waits,
                max_wait_ns: c
                    .map_or(0, |c| c.wait_max_ns)
                    .max(o.kind_counter(waitshim_format::counter::READ_WAIT_MAX_NS))
                    .max(open_max),
                max_waiters: c.map_or(0, |c| u64::from(c.max_waiters)),
                share: if total > 0 {
                    wait_ns as f64 / total as f64
                } else {
                    0.0
                },
                top_site,
                other_sites,
                group: groups
                    .get(&o.object_id)
                    .copied()
                    .unwrap_or_else(|| Group::of(o.kind())),
            })
        })
        .collect();
    out.sort_by(|a, b| {
        a.group
            .cmp(&b.group)
            .then(b.wait_ns.cmp(&a.wait_ns))
            .then(b.waits.cmp(&a.waits))
            .then(a.object_id.cmp(&b.object_id))
    });
    out
}

/// Which rows of [`costs`] a report of `top` rows shows: every group's largest first, then the
/// others in order until `top` rows are shown. A cut across the groups in order would show only
/// locks whenever more than `top` objects were contended, hiding seconds of waiting for another
/// thread to act behind microseconds of lock waits.
pub fn shown(costs: &[Cost], top: usize) -> Vec<bool> {
    let firsts: Vec<bool> = costs
        .iter()
        .enumerate()
        .map(|(i, c)| i == 0 || costs[i - 1].group != c.group)
        .collect();
    let mut budget = top.saturating_sub(firsts.iter().filter(|&&f| f).count());
    firsts
        .into_iter()
        .map(|first| {
            if first {
                return true;
            }
            let take = budget > 0;
            budget = budget.saturating_sub(1);
            take
        })
        .collect()
}

/// A thread that waits for another to act (a condition variable, a semaphore, a barrier) while
/// it holds a lock another waiting thread needs: if that thread is the one that would act, the
/// two are deadlocked. From the waits still in progress when the log ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingWhileHolding {
    pub tid: u32,
    /// What it waits on (condition variable, semaphore or barrier).
    pub waits_on: u64,
    /// The lock it holds.
    pub holds: u64,
    /// The thread waiting for that lock.
    pub needed_by: u32,
}

pub fn waiting_while_holding(m: &Model) -> Vec<WaitingWhileHolding> {
    let Some(open) = &m.open_waits else {
        return Vec::new();
    };
    let group = |id: u64| Group::of(m.objects.get(&id).and_then(|o| o.kind()));
    let mut out = Vec::new();
    for w in &open.waits {
        if w.holder_tid == 0 || group(w.object_id) != Group::Lock {
            continue;
        }
        if let Some(h) = open
            .waits
            .iter()
            .find(|h| h.tid == w.holder_tid && group(h.object_id) == Group::Event)
        {
            out.push(WaitingWhileHolding {
                tid: h.tid,
                waits_on: h.object_id,
                holds: w.object_id,
                needed_by: w.tid,
            });
        }
    }
    out
}

/// What the policy collected about one object.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    pub wait_total_ns: u64,
    pub events: u64,
    /// (version, rule) and the sums of its events.
    pub groups: Vec<((u32, u32), crate::model::WaitEventGroup)>,
    /// Distinct (holder, live, chain) with the waiters it blocked and when first seen.
    pub holders: Vec<HolderGroup>,
    pub holder_stacks: u64,
    /// Indexes into the listed waiter-chain records.
    pub waiter_sets: Vec<usize>,
}

#[derive(Debug, Clone)]
pub struct HolderGroup {
    pub holder_tid: u32,
    /// `HolderStack::live`: 0 acquisition chain, 1 unwound by signal, 2 scanned.
    pub live: u8,
    pub chain_id: u32,
    pub first_ns: u64,
    pub rules: Vec<(u32, u32)>,
    pub waiters: Vec<u32>,
}

/// What the policy rules collected, by object: the sums of the wait events per rule, the
/// holder stacks grouped by (holder, how its stack was taken, chain) with the waiters each
/// blocked, and the waiter-chain records. Most wait time first.
pub fn collected_by_object(m: &Model) -> Vec<(u64, Collected)> {
    let p = &m.policy;
    let mut by_object: std::collections::BTreeMap<u64, Collected> = Default::default();
    for (&(version, rule, object), g) in &p.wait_event_groups {
        let c = by_object.entry(object).or_default();
        c.wait_total_ns = c.wait_total_ns.saturating_add(g.wait_total_ns);
        c.events = c.events.saturating_add(g.count);
        c.groups.push(((version, rule), g.clone()));
    }
    for h in &p.holder_stacks {
        let c = by_object.entry(h.object_id).or_default();
        c.holder_stacks += 1;
        let live = h.live;
        let i = match c.holders.iter().position(|g| {
            g.holder_tid == h.holder_tid && g.live == live && g.chain_id == h.chain_id
        }) {
            Some(i) => i,
            None => {
                c.holders.push(HolderGroup {
                    holder_tid: h.holder_tid,
                    live,
                    chain_id: h.chain_id,
                    first_ns: h.ns,
                    rules: Vec::new(),
                    waiters: Vec::new(),
                });
                c.holders.len() - 1
            }
        };
        if let Some(g) = c.holders.get_mut(i) {
            if !g.waiters.contains(&h.waiter_tid) {
                g.waiters.push(h.waiter_tid);
            }
            if !g.rules.contains(&(h.version, h.rule)) {
                g.rules.push((h.version, h.rule));
            }
        }
    }
    for (i, w) in p.waiter_chains.iter().enumerate() {
        by_object
            .entry(w.object_id)
            .or_default()
            .waiter_sets
            .push(i);
    }
    let mut objects: Vec<(u64, Collected)> = by_object.into_iter().collect();
    objects.sort_by(|(a_id, a), (b_id, b)| {
        b.wait_total_ns
            .cmp(&a.wait_total_ns)
            .then(b.events.cmp(&a.events))
            .then(b.holder_stacks.cmp(&a.holder_stacks))
            .then(a_id.cmp(b_id))
    });
    objects
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_futex_is_grouped_by_the_innermost_frame_that_says_what_it_is() {
        let cond = [
            "std::sys::pal::unix::futex::futex_wait",
            "<std::sys::sync::condvar::futex::Condvar>::wait_optional_timeout",
            "std::sync::poison::condvar::Condvar::wait",
            "app::consumer",
        ];
        assert_eq!(runtime_group(cond), Some(Group::Event));
        let barrier_inside = [
            "std::sys::pal::unix::futex::futex_wait",
            "<std::sys::sync::condvar::futex::Condvar>::wait",
            "<std::sync::barrier::Barrier>::wait",
        ];
        assert_eq!(runtime_group(barrier_inside), Some(Group::Event));
        let mutex = [
            "std::sys::pal::unix::futex::futex_wait",
            "<std::sys::sync::mutex::futex::Mutex>::lock_contended",
            "std::sync::poison::mutex::Mutex<T>::lock",
            "app::worker",
        ];
        assert_eq!(runtime_group(mutex), Some(Group::Lock));
        let scope = [
            "std::sys::pal::unix::futex::futex_wait",
            "<std::sys::sync::thread_parking::futex::Parker>::park",
            "<std::thread::thread::Thread>::park",
            "std::thread::scoped::scope",
        ];
        // Parked by a scope that waits for its threads: a join.
        assert_eq!(runtime_group(scope), Some(Group::Join));
        let parked = ["<std::thread::thread::Thread>::park", "app::idle_worker"];
        assert_eq!(runtime_group(parked), Some(Group::Event));
        let jvm = [
            "os::PlatformEvent::park",
            "ObjectMonitor::wait",
            "JVM_MonitorWait",
        ];
        assert_eq!(runtime_group(jvm), Some(Group::Event));
        let monitor_enter = [
            "os::PlatformEvent::park",
            "ObjectMonitor::EnterI",
            "ObjectMonitor::enter",
        ];
        assert_eq!(runtime_group(monitor_enter), Some(Group::Lock));
        assert_eq!(runtime_group(["futex_wait", "app::spin"]), None);
    }

    fn cost(object_id: u64, group: Group, wait_ns: u64) -> Cost {
        Cost {
            object_id,
            wait_ns,
            open_ns: 0,
            waits: 1,
            max_wait_ns: wait_ns,
            max_waiters: 1,
            share: 0.0,
            top_site: None,
            other_sites: (0, 0, 0),
            group,
        }
    }

    #[test]
    fn every_group_shows_its_largest_row_however_many_locks_come_first() {
        // 30 locks of microseconds, then a condition variable and a join of seconds.
        let mut costs: Vec<Cost> = (0..30)
            .map(|i| cost(i, Group::Lock, 30_000 - i * 100))
            .collect();
        costs.push(cost(100, Group::Event, 5_490_000_000));
        costs.push(cost(101, Group::Event, 1_000_000));
        costs.push(cost(200, Group::Join, 2_000_000_000));
        let shown = shown(&costs, 20);
        assert_eq!(shown.iter().filter(|&&s| s).count(), 20);
        // The largest of each group, and the locks fill the rest in order.
        assert!(shown[0] && shown[30] && shown[32]);
        assert!(!shown[31]);
        assert_eq!(shown[..30].iter().filter(|&&s| s).count(), 18);
        assert!(shown[..18].iter().all(|&s| s));
    }

    #[test]
    fn a_cut_smaller_than_the_groups_still_shows_each_groups_largest() {
        let costs = vec![
            cost(1, Group::Lock, 10),
            cost(2, Group::Lock, 5),
            cost(3, Group::Event, 10),
            cost(4, Group::Join, 10),
        ];
        assert_eq!(shown(&costs, 1), vec![true, false, true, true]);
        assert_eq!(shown(&costs, 4), vec![true, true, true, true]);
    }

    #[test]
    fn what_no_site_accounts_for_is_the_objects_figures_less_its_sites() {
        let mut c = cost(1, Group::Event, 10_050);
        c.waits = 7;
        c.top_site = Some(Site {
            chain_id: 5,
            waits: 1,
            wait_ns: 10_000,
            open_waits: 1,
            open_ns: 10_000,
        });
        c.other_sites = (1, 6, 50);
        assert_eq!(c.unsited(), (0, 0));
        c.other_sites = (1, 4, 40);
        assert_eq!(c.unsited(), (2, 10));
    }
}
