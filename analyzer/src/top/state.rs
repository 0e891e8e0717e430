//! What the live view keeps of a log: the run, the latest cumulative counters of each object,
//! thread names, deadlocks, and what symbolizing creation sites needs (modules, chains). Unlike
//! the report's model it keeps nothing per episode or per event, and drops objects that were
//! destroyed and no longer wait once there are many, so that following a long run stays small.

use std::collections::HashMap;

use waitshim_format::{counter, Deadlock, ObjectKind, Record, RunEnd, RunStart};

use crate::model::Model;

/// Objects kept at most; more are counted, not shown.
pub const MAX_OBJECTS: usize = 1_000_000;
/// Past this many objects, destroyed objects that did not wait in the last interval are dropped.
pub const OBJECTS_BEFORE_EVICTION: usize = 20_000;
/// Past this many threads, the names of exited threads are dropped.
pub const THREADS_BEFORE_EVICTION: usize = 20_000;
/// Deadlocks kept (a program deadlocks a few times at most before someone kills it).
pub const MAX_DEADLOCKS: usize = 100;

/// Cumulative figures of one object, both sides of an rwlock together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub wait_ns: u64,
    pub contended: u64,
    pub acquisitions: u64,
    pub max_waiters: u64,
}

#[derive(Debug, Clone, Default)]
pub struct LiveObject {
    pub kind: Option<ObjectKind>,
    pub name: Option<String>,
    /// Creation (or first-use) chain; 0 when unknown.
    pub chain_id: u32,
    /// The shim first saw it in a lock call (a static initializer): `chain_id` is where it
    /// was first used, not created.
    pub first_use: bool,
    pub destroyed: bool,
    /// From the latest `Counters` record.
    pub wait_ns: u64,
    pub contended: u64,
    pub acquisitions: u64,
    pub max_waiters: u32,
    /// From the latest `KindCounters` record: the read side of an rwlock.
    pub read_wait_ns: u64,
    pub read_contended: u64,
    pub read_acquisitions: u64,
    pub read_max_waiters: u64,
}

impl LiveObject {
    pub fn totals(&self) -> Totals {
        Totals {
            wait_ns: self.wait_ns.saturating_add(self.read_wait_ns),
            contended: self.contended.saturating_add(self.read_contended),
            acquisitions: self.acquisitions.saturating_add(self.read_acquisitions),
            max_waiters: u64::from(self.max_waiters).max(self.read_max_waiters),
        }
    }

    pub fn kind_name(&self) -> &'static str {
        self.kind.map_or("object", ObjectKind::name)
    }
}

#[derive(Debug, Clone, Default)]
pub struct LiveThread {
    pub name: Option<String>,
    pub started: bool,
    pub exited: bool,
}

#[derive(Default)]
pub struct LiveState {
    pub run: Option<RunStart>,
    pub run_end: Option<RunEnd>,
    /// The global highwater mark and the object that set it.
    pub hwm: u32,
    pub hwm_object: Option<u64>,
    pub objects: HashMap<u64, LiveObject>,
    pub objects_not_kept: u64,
    pub threads: HashMap<u32, LiveThread>,
    pub threads_started: u64,
    pub threads_exited: u64,
    pub deadlocks: Vec<Deadlock>,
    pub deadlocks_total: u64,
    pub snapshots: u64,
    /// Latest timestamp any record carried.
    pub last_ns: u64,
    /// Run start, modules and chains only: what the symbolizer reads.
    pub symbols: Model,
    /// Bumped when a module is added: the symbolizer must be rebuilt.
    pub modules_version: u64,
}

impl LiveState {
    pub fn new() -> Self {
        Self::default()
    }

    fn seen(&mut self, ns: u64) {
        self.last_ns = self.last_ns.max(ns);
    }

    fn object(&mut self, id: u64) -> Option<&mut LiveObject> {
        if !self.objects.contains_key(&id) {
            if self.objects.len() >= MAX_OBJECTS {
                self.objects_not_kept += 1;
                return None;
            }
            self.objects.insert(id, LiveObject::default());
        }
        self.objects.get_mut(&id)
    }

    fn thread(&mut self, tid: u32) -> &mut LiveThread {
        self.threads.entry(tid).or_default()
    }

    /// Folds one record in.
    pub fn add(&mut self, record: Record) {
        match record {
            Record::RunStart(r) => {
                self.seen(r.mono_ns);
                if self.run.is_none() {
                    self.symbols.add(Record::RunStart(r.clone()));
                    self.run = Some(r);
                }
            }
            Record::RunEnd(e) => {
                self.seen(e.ns);
                self.hwm = self.hwm.max(e.hwm);
                self.run_end = Some(e);
            }
            Record::Module(m) => {
                self.modules_version += 1;
                self.symbols.add(Record::Module(m));
            }
            r @ Record::Chain(_) => self.symbols.add(r),
            Record::ThreadStart(s) => {
                self.seen(s.ns);
                let t = self.thread(s.tid);
                if !t.started {
                    t.started = true;
                    self.threads_started += 1;
                }
            }
            Record::ThreadName(n) => {
                self.seen(n.ns);
                self.thread(n.tid).name = Some(n.name);
            }
            Record::ThreadExit(e) => {
                self.seen(e.ns);
                let t = self.thread(e.tid);
                if !t.exited {
                    t.exited = true;
                    self.threads_exited += 1;
                }
            }
            Record::ObjectCreate(c) => {
                self.seen(c.ns);
                if let Some(o) = self.object(c.object_id) {
                    o.kind = ObjectKind::from_u8(c.kind);
                    o.chain_id = c.chain_id;
                    o.first_use = c.origin == waitshim_format::origin::FIRST_USE;
                }
            }
            Record::ObjectName(n) => {
                if let Some(o) = self.object(n.object_id) {
                    o.name = Some(n.name);
                }
            }
            Record::ObjectDestroy(d) => {
                self.seen(d.ns);
                if let Some(o) = self.object(d.object_id) {
                    o.destroyed = true;
                }
            }
            Record::Counters(c) => {
                self.seen(c.ns);
                if let Some(o) = self.object(c.object_id) {
                    o.wait_ns = c.wait_total_ns;
                    o.contended = c.contended;
                    o.acquisitions = c.acquisitions;
                    o.max_waiters = c.max_waiters;
                }
            }
            Record::KindCounters(k) => {
                self.seen(k.ns);
                if let Some(o) = self.object(k.object_id) {
                    for v in &k.values {
                        match v.key {
                            counter::READ_WAIT_TOTAL_NS => o.read_wait_ns = v.value,
                            counter::READ_CONTENDED => o.read_contended = v.value,
                            counter::READ_ACQUISITIONS => o.read_acquisitions = v.value,
                            counter::READ_MAX_WAITERS => o.read_max_waiters = v.value,
                            _ => {}
                        }
                    }
                }
            }
            Record::Highwater(h) => {
                self.seen(h.ns);
                if h.hwm >= self.hwm {
                    self.hwm = h.hwm;
                    self.hwm_object = Some(h.object_id);
                }
            }
            Record::Deadlock(d) => {
                self.seen(d.ns);
                self.deadlocks_total += 1;
                if self.deadlocks.len() < MAX_DEADLOCKS {
                    self.deadlocks.push(d);
                }
            }
            Record::DeadlockBroken(b) => {
                self.seen(b.ns);
                if let Some(i) = self.deadlocks.iter().position(|d| d.ns == b.deadlock_ns) {
                    // A cycle that broke (a deadline) is no deadlock: the view stops showing it.
                    self.deadlocks.remove(i);
                    self.deadlocks_total = self.deadlocks_total.saturating_sub(1);
                }
            }
            Record::Snapshot(s) => {
                self.seen(s.ns);
                self.snapshots += 1;
            }
            Record::ContentionOpen(_)
            | Record::ContentionClose(_)
            | Record::WaitSite(_)
            | Record::LockOrder(_)
            | Record::Note(_)
            | Record::PolicyVersion(_)
            | Record::RuleStats(_)
            | Record::WaitEvent(_)
            | Record::WaitEventReason(_)
            | Record::Exec(_)
            | Record::OpenWaits(_)
            | Record::ThreadSamples(_)
            | Record::CpuSample(_)
            | Record::ThreadTotals(_)
            | Record::ThreadSwitches(_)
            | Record::WaiterChains(_)
            | Record::HolderStack(_)
            // Short-lived objects never waited: nothing for a table of the objects waited on.
            | Record::ObjectsChurned(_)
            | Record::ObjectsQuiet(_)
            | Record::Unknown { .. } => {}
        }
    }

    /// Threads started and not exited. Threads still running when the program ended have no
    /// exit record: ask only while it runs.
    pub fn threads_alive(&self) -> u64 {
        self.threads_started.saturating_sub(self.threads_exited)
    }

    /// Objects and threads that matter to a deadlock or the highwater mark are never dropped.
    fn pinned_objects(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .deadlocks
            .iter()
            .flat_map(|d| d.cycle.iter().map(|e| e.object_id))
            .collect();
        v.extend(self.hwm_object);
        v
    }

    /// Drops destroyed objects for which `idle(id)` holds, and exited threads' names, once
    /// there are many of them. Returns the ids of the objects dropped.
    pub fn evict(&mut self, idle: impl Fn(u64) -> bool) -> Vec<u64> {
        let mut dropped = Vec::new();
        if self.objects.len() > OBJECTS_BEFORE_EVICTION {
            let pinned = self.pinned_objects();
            self.objects.retain(|&id, o| {
                let keep = !o.destroyed || !idle(id) || pinned.contains(&id);
                if !keep {
                    dropped.push(id);
                }
                keep
            });
        }
        if self.threads.len() > THREADS_BEFORE_EVICTION {
            let pinned: Vec<u32> = self
                .deadlocks
                .iter()
                .flat_map(|d| d.cycle.iter().flat_map(|e| [e.tid, e.holder_tid]))
                .collect();
            self.threads
                .retain(|tid, t| !t.exited || pinned.contains(tid));
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use waitshim_format::{
        CounterValue, Counters, Highwater, KindCounters, ObjectCreate, ObjectDestroy, ThreadExit,
        ThreadStart,
    };

    fn counters(id: u64, wait_ns: u64, contended: u64) -> Record {
        Counters {
            object_id: id,
            ns: 10,
            acquisitions: contended * 2,
            contended,
            wait_total_ns: wait_ns,
            max_waiters: 3,
            ..Counters::default()
        }
        .into()
    }

    #[test]
    fn later_counters_replace_earlier_ones_and_read_sides_add_up() {
        let mut s = LiveState::new();
        s.add(
            ObjectCreate {
                object_id: 1,
                kind: ObjectKind::RwLock as u8,
                chain_id: 5,
                ..ObjectCreate::default()
            }
            .into(),
        );
        s.add(counters(1, 100, 1));
        s.add(counters(1, 300, 2));
        s.add(
            KindCounters {
                object_id: 1,
                ns: 11,
                values: vec![
                    CounterValue {
                        key: counter::READ_WAIT_TOTAL_NS,
                        value: 50,
                    },
                    CounterValue {
                        key: counter::READ_CONTENDED,
                        value: 4,
                    },
                    CounterValue {
                        key: counter::READ_MAX_WAITERS,
                        value: 9,
                    },
                ],
            }
            .into(),
        );
        let o = &s.objects[&1];
        assert_eq!(o.kind_name(), "rwlock");
        assert_eq!(o.chain_id, 5);
        let t = o.totals();
        assert_eq!((t.wait_ns, t.contended, t.max_waiters), (350, 6, 9));
        assert_eq!(s.last_ns, 11);
    }

    #[test]
    fn an_object_first_seen_in_a_lock_call_is_marked_first_use() {
        let mut s = LiveState::new();
        for (id, origin) in [
            (1, waitshim_format::origin::FIRST_USE),
            (2, waitshim_format::origin::INIT),
        ] {
            s.add(
                ObjectCreate {
                    object_id: id,
                    kind: ObjectKind::Mutex as u8,
                    chain_id: 5,
                    origin,
                    ..ObjectCreate::default()
                }
                .into(),
            );
        }
        assert!(s.objects[&1].first_use);
        assert!(!s.objects[&2].first_use);
    }

    #[test]
    fn threads_alive_count_starts_and_exits() {
        let mut s = LiveState::new();
        for tid in 1..=3 {
            s.add(
                ThreadStart {
                    tid,
                    ..ThreadStart::default()
                }
                .into(),
            );
        }
        s.add(ThreadExit { tid: 2, ns: 5 }.into());
        s.add(ThreadExit { tid: 2, ns: 6 }.into());
        assert_eq!(s.threads_alive(), 2);
    }

    #[test]
    fn highwater_keeps_the_object_of_the_highest_rise() {
        let mut s = LiveState::new();
        for (hwm, object_id) in [(1, 7), (3, 8), (2, 9)] {
            s.add(
                Highwater {
                    ns: 1,
                    hwm,
                    object_id,
                    tid: 1,
                }
                .into(),
            );
        }
        assert_eq!((s.hwm, s.hwm_object), (3, Some(8)));
    }

    #[test]
    fn many_destroyed_idle_objects_are_dropped() {
        let mut s = LiveState::new();
        let n = OBJECTS_BEFORE_EVICTION as u64 + 10;
        for id in 1..=n {
            s.add(counters(id, id, 1));
            if id % 2 == 0 {
                s.add(
                    ObjectDestroy {
                        object_id: id,
                        ns: 1,
                        tid: 1,
                    }
                    .into(),
                );
            }
        }
        s.add(
            Highwater {
                ns: 1,
                hwm: 1,
                object_id: 2,
                tid: 1,
            }
            .into(),
        );
        // Object 4 waited in the last interval: kept although destroyed.
        let dropped = s.evict(|id| id != 4);
        assert_eq!(dropped.len() as u64, n / 2 - 2);
        assert!(s.objects.contains_key(&2), "the highwater object stays");
        assert!(s.objects.contains_key(&4));
        assert!(s.objects.contains_key(&3));
        assert!(!s.objects.contains_key(&6));
    }
}
