//! Deadlocks across processes: two processes that share mutexes (`PTHREAD_PROCESS_SHARED`, in
//! shared memory) can wait for each other, which neither shim can see alone: each only sees its
//! own thread waiting for an object held by a thread of another process. Kernel thread ids are
//! unique across the system, so the waits still in progress at the end of several logs (their
//! last `OpenWaits` records), read together, form one wait-for graph: a cycle in it that passes
//! through more than one process is such a deadlock.
//!
//! A first, light pass over each log keeps only its pid and its last open waits; the reports,
//! made one log at a time afterwards, each show the cycles their process is part of.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use waitshim_format::Record;

/// One thread of one log waiting, when that log ended, for an object held by another thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub pid: u32,
    pub tid: u32,
    pub object_id: u64,
    pub holder_tid: u32,
    /// The log it comes from (as given on the command line).
    pub log: String,
}

/// A wait-for cycle through several processes: each wait is for an object the next one's
/// thread holds (the last's, the first's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    pub waits: Vec<Wait>,
}

impl Cycle {
    /// Whether the process `pid` takes part.
    pub fn involves(&self, pid: u32) -> bool {
        self.waits.iter().any(|w| w.pid == pid)
    }
}

/// The open waits a log ended with, and its pid (None if the log cannot be read or has no
/// start record).
pub fn open_waits(path: &Path) -> Option<Vec<Wait>> {
    let mut pid = None;
    let mut last = Vec::new();
    crate::source::read_log(path, |r| match r {
        Record::RunStart(s) if pid.is_none() => pid = Some(s.pid),
        Record::OpenWaits(o) => {
            last = o.waits;
            last.truncate(crate::model::MAX_OPEN_WAITS);
        }
        _ => {}
    })
    .ok()?;
    let pid = pid?;
    let log = path.display().to_string();
    Some(
        last.into_iter()
            .filter(|w| w.holder_tid != 0)
            .map(|w| Wait {
                pid,
                tid: w.tid,
                object_id: w.object_id,
                holder_tid: w.holder_tid,
                log: log.clone(),
            })
            .collect(),
    )
}

/// The cycles through more than one process in a set of waits (each thread waits for one
/// object at a time, so following "waits for what this thread holds" from a thread is a path;
/// a cycle is found once, from its thread of lowest tid).
pub fn cycles(waits: &[Wait]) -> Vec<Cycle> {
    let by_tid: HashMap<u32, &Wait> = waits.iter().map(|w| (w.tid, w)).collect();
    let mut found = Vec::new();
    let mut starts: Vec<u32> = by_tid.keys().copied().collect();
    starts.sort_unstable();
    for start in starts {
        let mut path: Vec<&Wait> = Vec::new();
        let mut seen = HashSet::new();
        let mut at = start;
        while let Some(&w) = by_tid.get(&at) {
            if !seen.insert(at) {
                break;
            }
            path.push(w);
            at = w.holder_tid;
            if at == start {
                let pids: HashSet<u32> = path.iter().map(|w| w.pid).collect();
                let lowest = path.iter().map(|w| w.tid).min() == Some(start);
                if pids.len() > 1 && lowest {
                    found.push(Cycle {
                        waits: path.iter().map(|&w| w.clone()).collect(),
                    });
                }
                break;
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(pid: u32, tid: u32, object_id: u64, holder_tid: u32) -> Wait {
        Wait {
            pid,
            tid,
            object_id,
            holder_tid,
            log: format!("waitshim.{pid}.log"),
        }
    }

    #[test]
    fn a_parent_and_a_child_waiting_for_each_others_mutex_are_one_cycle() {
        let waits = [wait(100, 100, 1, 200), wait(200, 200, 1, 100)];
        let c = cycles(&waits);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].waits, waits);
        assert!(c[0].involves(100) && c[0].involves(200) && !c[0].involves(300));
    }

    #[test]
    fn waits_within_one_process_or_ending_at_a_running_thread_are_no_cross_process_cycle() {
        // One process's own cycle is its shim's to report; a holder that does not wait is no
        // cycle at all.
        let waits = [
            wait(100, 101, 1, 102),
            wait(100, 102, 2, 101),
            wait(100, 103, 3, 201),
            wait(200, 201, 1, 202),
        ];
        assert!(cycles(&waits).is_empty());
    }

    #[test]
    fn a_cycle_through_three_processes_is_found_once() {
        let waits = [
            wait(300, 301, 5, 101),
            wait(100, 101, 1, 201),
            wait(200, 201, 3, 301),
        ];
        let c = cycles(&waits);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].waits.len(), 3);
        assert_eq!(c[0].waits[0].tid, 101, "listed from its lowest tid");
    }
}
