//! What the live view shows of a log, read from the report's model: the live view is one more
//! sink of the same fold ([`Model::add`]), so a record means the same in `top` as in the report.
//! What the view adds is what following a long run needs: the figures it shows per object (both
//! sides of an rwlock together), and dropping objects that were destroyed and no longer wait,
//! and exited threads, once there are many, so that the model of a long run stays small.

use waitshim_format::{counter, Deadlock, RunEnd, RunStart};

use crate::model::{Model, Object};

/// Objects kept at most (the model's cap); more are counted, not shown.
pub const MAX_OBJECTS: usize = crate::model::MAX_STORED;
/// Past this many objects, destroyed objects that did not wait in the last interval are dropped.
pub const OBJECTS_BEFORE_EVICTION: usize = 20_000;
/// Past this many threads, exited threads are dropped.
pub const THREADS_BEFORE_EVICTION: usize = 20_000;

/// Cumulative figures of one object, both sides of an rwlock together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub wait_ns: u64,
    pub contended: u64,
    pub acquisitions: u64,
    pub max_waiters: u64,
}

impl Totals {
    pub fn of(o: &Object) -> Self {
        let c = o.counters.as_ref();
        Totals {
            wait_ns: o.wait_total_ns(),
            contended: c
                .map_or(0, |c| c.contended)
                .saturating_add(o.kind_counter(counter::READ_CONTENDED)),
            acquisitions: c
                .map_or(0, |c| c.acquisitions)
                .saturating_add(o.kind_counter(counter::READ_ACQUISITIONS)),
            max_waiters: c
                .map_or(0, |c| u64::from(c.max_waiters))
                .max(o.kind_counter(counter::READ_MAX_WAITERS)),
        }
    }
}

#[derive(Default)]
pub struct LiveState {
    /// The model of the log so far, folded record by record as the log grows.
    pub model: Model,
}

impl LiveState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one record in.
    pub fn add(&mut self, record: waitshim_format::Record) {
        self.model.add(record);
    }

    pub fn run(&self) -> Option<&RunStart> {
        self.model.run.as_ref()
    }

    pub fn run_end(&self) -> Option<&RunEnd> {
        self.model.run_end.as_ref()
    }

    /// The global highwater mark, and the object of the rise that set it.
    pub fn hwm(&self) -> (u32, Option<u64>) {
        (
            self.model.hwm(),
            self.model.final_highwater().map(|h| h.object_id),
        )
    }

    pub fn object(&self, id: u64) -> Option<&Object> {
        self.model.objects.get(&id)
    }

    /// `thread 1234 "worker"` (see [`crate::report::thread_label`]).
    pub fn thread_label(&self, tid: u32) -> String {
        crate::report::thread_label(&self.model, tid)
    }

    /// The recorded cycles that never broke.
    pub fn deadlocks(&self) -> Vec<Deadlock> {
        self.model.real_deadlocks().cloned().collect()
    }

    /// Threads started and not exited. Threads still running when the program ended have no
    /// exit record: ask only while it runs.
    pub fn threads_alive(&self) -> u64 {
        self.model
            .threads_started
            .saturating_sub(self.model.threads_exited)
    }

    /// Objects and threads that matter to a deadlock or the highwater mark are never dropped.
    fn pinned_objects(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .model
            .real_deadlocks()
            .flat_map(|d| d.cycle.iter().map(|e| e.object_id))
            .collect();
        v.extend(self.hwm().1);
        v
    }

    /// Drops destroyed objects for which `idle(id)` holds, and exited threads, once there are
    /// many of them. Returns the ids of the objects dropped.
    pub fn evict(&mut self, idle: impl Fn(u64) -> bool) -> Vec<u64> {
        let mut dropped = Vec::new();
        if self.model.objects.len() > OBJECTS_BEFORE_EVICTION {
            let pinned = self.pinned_objects();
            dropped = self.model.forget_objects(|o| {
                o.destroy_ns.is_some() && idle(o.object_id) && !pinned.contains(&o.object_id)
            });
        }
        if self.model.threads.len() > THREADS_BEFORE_EVICTION {
            let pinned: Vec<u32> = self
                .model
                .real_deadlocks()
                .flat_map(|d| d.cycle.iter().flat_map(|e| [e.tid, e.holder_tid]))
                .collect();
            self.model
                .forget_threads(|t| t.exit_ns.is_some() && !pinned.contains(&t.tid));
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use waitshim_format::{
        CounterValue, Counters, Highwater, KindCounters, ObjectCreate, ObjectDestroy, ObjectKind,
        Record, ThreadExit, ThreadStart,
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
        let o = s.object(1).expect("kept");
        assert_eq!(o.kind_name(), "rwlock");
        assert_eq!(o.create.as_ref().map(|c| c.chain_id), Some(5));
        let t = Totals::of(o);
        assert_eq!((t.wait_ns, t.contended, t.max_waiters), (350, 6, 9));
        assert_eq!(s.model.last_ns, 11);
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
        assert!(s.object(1).expect("kept").first_use());
        assert!(!s.object(2).expect("kept").first_use());
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
        assert_eq!(s.hwm(), (3, Some(8)));
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
        assert!(
            s.model.objects.contains_key(&2),
            "the highwater object stays"
        );
        assert!(s.model.objects.contains_key(&4));
        assert!(s.model.objects.contains_key(&3));
        assert!(!s.model.objects.contains_key(&6));
    }
}
