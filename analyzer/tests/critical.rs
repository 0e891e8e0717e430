//! The critical path is worked out from what the model's own read of the log gathered (one
//! read), and comes out the same as from a read of its own after the model was made: for a log
//! of every wait, and for a flight recorder's log, whose kept waits are known only at its end.

mod common;

use std::collections::HashSet;

use common::{LogBuilder, MS, T0};
use waitshim_analyze::critical::{critical_path, Path as CriticalPath};
use waitshim_format::events::WaitSpan;
use waitshim_format::{counter, thread_state, ThreadSamples, ThreadState, WaitEvents};

/// Two workers (101, 102) hand a lock (object 1) back and forth for `rounds` rounds, each
/// waiting 2 ms for the lock the other released, while main (100) waits for it until the last
/// one releases it to main; the sampler sees
/// each thread every 5 ms: running, or blocked on the lock. `keep_ns`: the flight recorder's
/// window (0: every wait written).
fn handoffs(rounds: u64, keep_ns: u64) -> LogBuilder {
    let mut b = LogBuilder::started("/nonexistent/handoff", &["./handoff"]);
    for (tid, name) in [(100, "main"), (101, "a"), (102, "b")] {
        b.thread(tid, name);
    }
    b.mutex(1, 0x7000_0000_1000, 0);
    let mut at = T0 + 2 * MS;
    for r in 0..rounds {
        for (tid, other) in [(101u32, 102u32), (102, 101)] {
            let span = WaitSpan {
                begin_ns: at,
                end_ns: at + 2 * MS,
                object_id: 1,
                chain_id: 0,
                reason: counter::ENDED_ACQUIRED,
                shared: false,
                waker: other,
            };
            b.push(WaitEvents::pack(tid, at, 0, keep_ns, &[span]));
            at += 3 * MS;
        }
        if r % 2 == 1 {
            let threads = [100, 101, 102]
                .into_iter()
                .map(|tid| ThreadState {
                    tid,
                    state: if tid == 100 {
                        thread_state::RUNNING
                    } else {
                        thread_state::TRACKED_WAIT
                    },
                    waiting_kind: 0,
                    on_cpu_ns: 3 * MS,
                    run_delay_ns: MS,
                    timeslices: 1,
                    syscall: -1,
                    arg0: 0,
                    what: String::new(),
                    object_id: 0,
                })
                .collect();
            b.push(ThreadSamples {
                ns: at,
                interval_ns: 5 * MS,
                threads,
                unsampled: 0,
            });
        }
    }
    // Main waited for the lock all along; the last worker released it to main.
    let span = WaitSpan {
        begin_ns: T0 + 2 * MS,
        end_ns: at,
        object_id: 1,
        chain_id: 0,
        reason: counter::ENDED_ACQUIRED,
        shared: false,
        waker: 102,
    };
    b.push(WaitEvents::pack(100, T0 + 2 * MS, 0, keep_ns, &[span]));
    b.end(at - T0 + MS, 2);
    b
}

/// What a path says, in an order that does not depend on hashing.
fn summary(p: &CriticalPath) -> String {
    let mut holders: Vec<_> = p
        .holders
        .iter()
        .map(|(o, h)| {
            let mut h = h.clone();
            h.sort_unstable();
            (*o, h)
        })
        .collect();
    holders.sort_unstable();
    let mut running: Vec<_> = p.held_running.iter().collect();
    running.sort_unstable();
    format!(
        "{}..{} hops {} estimated {} by {:?} holders {:?} held running {:?}",
        p.start_ns, p.end_ns, p.hops, p.estimated, p.by, holders, running
    )
}

fn both_ways(b: &LogBuilder, name: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let log = b.write(dir.path(), name);
    let a = waitshim_analyze::analyze(&log).expect("the log reads");
    assert!(
        a.walk.is_some(),
        "the model's read gathers the walk's input"
    );
    let none = HashSet::new();
    let one_read = critical_path(&a.model, &a.summary, &none, a.walk.as_ref())
        .unwrap()
        .expect("a path");
    let read_again = critical_path(&a.model, &a.summary, &none, None)
        .unwrap()
        .expect("a path");
    (summary(&one_read), summary(&read_again))
}

#[test]
fn the_path_from_the_models_read_is_the_path_from_a_read_of_its_own() {
    let (one, again) = both_ways(&handoffs(40, 0), "all.log");
    assert_eq!(one, again);
    // Not vacuous: the walk went through the hand-offs and found the lock's holders.
    assert!(one.contains("Held(1)"), "{one}");
    assert!(one.contains("(101, 40), (102, 41)"), "{one}");
    assert!(!one.contains("hops 0 "), "{one}");
}

#[test]
fn a_flight_recorders_log_has_its_window_applied_when_the_end_is_known() {
    // A window of 30 ms: only the waits near the end count.
    let b = handoffs(40, 30 * MS);
    let (one, again) = both_ways(&b, "ring.log");
    assert_eq!(one, again);
    let (all, _) = both_ways(&handoffs(40, 0), "all.log");
    assert_ne!(one, all, "the window left the older waits out");
}
