//! The JSON schema cannot drift silently: a fixed log (`data/golden.log`, built by
//! [`golden_log`], which has a record of every type and every kind of warning) must give, byte
//! for byte, the checked-in reports `data/golden*.json`. When a change of the report is meant
//! (a field added, as JSON.md says), `UPDATE_GOLDEN=1 cargo test -p waitshim-analyze --test
//! golden` writes them again; the diff then shows what changed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;
use waitshim_format::*;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// A run of the convoy scenario with every other kind of object, a deadlock, a lock-order
/// inversion, a policy file and what it collected, short-lived objects, notes, a record of a
/// newer shim, a damaged record and records the shim could not write.
fn golden_log() -> Vec<u8> {
    let mut b = convoy_log();
    let kinds = [
        (ObjectKind::RwLock, 10),
        (ObjectKind::Cond, 11),
        (ObjectKind::Semaphore, 12),
        (ObjectKind::Spin, 13),
        (ObjectKind::Barrier, 14),
        (ObjectKind::Thread, 15),
    ];
    for (kind, id) in kinds {
        b.object(kind, id, 0x7000_0000_0000 + id * 0x100, 1);
        b.counters(id, 40 + id, id - 9, id * MS);
    }
    b.kind_counters(
        10,
        &[
            (counter::READ_ACQUISITIONS, 300),
            (counter::READ_CONTENDED, 30),
            (counter::READ_WAIT_TOTAL_NS, 7 * MS),
            (counter::READ_WAIT_MAX_NS, MS),
            (counter::READ_MAX_WAITERS, 4),
            (counter::ENDED_ACQUIRED, 30),
        ],
    );
    b.kind_counters(
        11,
        &[
            (counter::SIGNALS, 9),
            (counter::BROADCASTS, 2),
            (counter::ENDED_SIGNALLED, 6),
            (counter::ENDED_SPURIOUS, 3),
            (counter::ENDED_ERROR, 2),
            (counter::ENDED_ERRNO_BASE + 1, 1),
            (counter::ENDED_ERRNO_BASE + 200, 1),
            (999, 5),
        ],
    );
    b.kind_counters(12, &[(counter::POSTS, 12), (counter::ENDED_INTERRUPTED, 1)]);
    b.kind_counters(14, &[(counter::ROUNDS, 3), (counter::ENDED_RELEASED, 6)]);
    // Known only by its kind counters, and one of a kind this analyzer does not know.
    b.kind_counters(20, &[(counter::POSTS, 1)]);
    b.push(ObjectCreate {
        object_id: 21,
        addr: 0x7000_0000_2100,
        kind: 99,
        subtype: 7,
        origin: 9,
        ns: T0 + 2 * MS,
        tid: 101,
        chain_id: 0,
    });
    b.push(ObjectDestroy {
        object_id: 13,
        ns: T0 + 800 * MS,
        tid: 101,
    });
    b.push(ThreadStart {
        tid: 109,
        parent_tid: 100,
        ns: T0 + 5 * MS,
        start_routine: APP_BASE + 0x2500,
        chain_id: 12,
        is_main: 0,
    });
    b.push(ThreadExit {
        tid: 109,
        ns: T0 + 700 * MS,
    });
    // A record still open when the log ended, and one whose opening was lost.
    b.open(4, 2, 4, 2800 * MS, (105, 11));
    b.close(5, 3, 1, 2900 * MS, MS, &[], 0);
    b.push(Deadlock {
        ns: T0 + 2950 * MS,
        detected_by: 103,
        cycle: vec![
            DeadlockEdge {
                tid: 103,
                object_id: 3,
                wait_chain: 12,
                holder_tid: 104,
            },
            DeadlockEdge {
                tid: 104,
                object_id: 4,
                wait_chain: 11,
                holder_tid: 103,
            },
        ],
    });
    // A cycle through a timed wait, which timed out: no deadlock after all.
    b.push(Deadlock {
        ns: T0 + 2960 * MS,
        detected_by: 105,
        cycle: vec![
            DeadlockEdge {
                tid: 105,
                object_id: 1,
                wait_chain: 11,
                holder_tid: 102,
            },
            DeadlockEdge {
                tid: 102,
                object_id: 2,
                wait_chain: 10,
                holder_tid: 105,
            },
        ],
    });
    b.push(DeadlockBroken {
        deadlock_ns: T0 + 2960 * MS,
        tid: 105,
        ns: T0 + 2990 * MS,
        outcome: counter::ENDED_TIMED_OUT,
    });
    b.lock_order(3, 4, 103, 12)
        .lock_order(4, 3, 104, 11)
        .lock_order(1, 2, 102, 10)
        .lock_order(2, 1, 102, 10)
        .lock_order(2, 1, 105, 11);
    b.push(PolicyVersion {
        version: 1,
        ns: T0 + MS,
        source: String::new(),
        text: "{}".into(),
        rules: vec!["any wait → count, waiter_chain".into()],
    });
    b.push(PolicyVersion {
        version: 2,
        ns: T0 + 200 * MS,
        source: "/etc/pol.json".into(),
        text: "{\"rules\":[{\"actions\":[\"record\"]}]}".into(),
        rules: vec!["any wait → record".into(), "mutex → holder_chain".into()],
    });
    b.push(RuleStats {
        version: 2,
        rule: 0,
        ns: T0 + 450 * MS,
        requests: 20,
        acted: 6,
        suppressed: 3,
    });
    b.push(RuleStats {
        version: 7,
        rule: 3,
        ns: T0 + 450 * MS,
        requests: 1,
        acted: 1,
        suppressed: 0,
    });
    for (tid, at, reason, chain) in [
        (102, 250, counter::ENDED_ACQUIRED, 10),
        (103, 260, counter::ENDED_SIGNALLED, 0),
        (104, 270, 0, 0),
        (105, 280, 77, 11),
    ] {
        b.push(WaitEvent {
            object_id: 1,
            tid,
            ns: T0 + at * MS,
            wait_ns: 3 * MS,
            waiters: 2,
            reason,
            version: 2,
            rule: 0,
            chain_id: chain,
        });
    }
    b.push(WaitEventReason {
        object_id: 1,
        tid: 103,
        ns: T0 + 260 * MS,
        version: 2,
        rule: 0,
        from: counter::ENDED_SIGNALLED,
        to: counter::ENDED_SPURIOUS,
    });
    b.push(WaiterChains {
        object_id: 1,
        ns: T0 + 300 * MS,
        version: 2,
        rule: 0,
        waiters: vec![
            WaiterRef {
                tid: 102,
                chain_id: 10,
                wait_ns: 12 * MS,
            },
            WaiterRef {
                tid: 103,
                chain_id: 0,
                wait_ns: 3 * MS,
            },
        ],
    });
    for (waiter_tid, live, chain_id) in [(102, 0, 30), (103, 1, 12), (104, 2, 0)] {
        b.push(HolderStack {
            object_id: 1,
            ns: T0 + 310 * MS,
            holder_tid: 101,
            waiter_tid,
            version: 2,
            rule: 1,
            live,
            chain_id,
        });
    }
    b.push(Snapshot {
        seq: 1,
        ns: T0 + 400 * MS,
        source: snapshot_source::SIGNAL,
        requester_pid: 777,
    });
    b.push(Snapshot {
        seq: 2,
        ns: T0 + 500 * MS,
        source: snapshot_source::API,
        requester_pid: 0,
    });
    for (kind, chain_id, count, counters) in [
        (ObjectKind::Mutex as u8, 1, 1000, vec![]),
        // A key given twice: the last value counts.
        (
            ObjectKind::Semaphore as u8,
            11,
            10,
            vec![(counter::POSTS, 1), (counter::POSTS, 20), (4242, 3)],
        ),
        (42, 0, 5, vec![]),
    ] {
        b.push(ObjectsChurned {
            kind,
            chain_id,
            ns: T0 + 600 * MS,
            count,
            acquisitions: count * 2,
            lifetime_total_ns: count * MS,
            lifetime_max_ns: 2 * MS,
            counters: counters
                .into_iter()
                .map(|(key, value)| CounterValue { key, value })
                .collect(),
        });
    }
    // Idle objects summed by creation site; a site none of whose objects is left.
    for (chain_id, count) in [(10, 5000), (11, 0)] {
        b.push(ObjectsQuiet {
            kind: ObjectKind::Mutex as u8,
            chain_id,
            ns: T0 + 700 * MS,
            count,
            acquisitions: count * 3,
            owner_changes: count,
            counters: vec![],
        });
    }
    // The sampler: thread 109 ran, then blocked in read on a pipe until it exited; thread 103
    // waited on a tracked object; the CPUs were half idle.
    for (ns, state, sys, what) in [
        (100, thread_state::RUNNING, -1, ""),
        (200, thread_state::BLOCKED, 0, "pipe:[77]"),
    ] {
        b.push(ThreadSamples {
            ns: T0 + ns * MS,
            interval_ns: 10 * MS,
            threads: vec![
                ThreadState {
                    tid: 109,
                    state,
                    waiting_kind: 0,
                    on_cpu_ns: 40 * MS,
                    run_delay_ns: 5 * MS,
                    timeslices: 3,
                    syscall: sys,
                    arg0: 4,
                    what: what.into(),
                    object_id: 0,
                },
                ThreadState {
                    tid: 103,
                    state: thread_state::TRACKED_WAIT,
                    waiting_kind: ObjectKind::Mutex as u8 + 1,
                    on_cpu_ns: MS,
                    run_delay_ns: 0,
                    timeslices: 1,
                    syscall: 202,
                    arg0: 0x6010,
                    what: String::new(),
                    object_id: 3,
                },
            ],
            unsampled: 0,
        });
        b.push(CpuSample {
            ns: T0 + ns * MS,
            idle_ns: vec![50 * MS, 50 * MS],
            iowait_ns: vec![0, MS],
        });
    }
    // A thread still waiting at the last look, for an object a thread of another process held.
    b.push(OpenWaits {
        ns: T0 + 2995 * MS,
        waits: vec![OpenWait {
            tid: 103,
            object_id: 3,
            since_ns: T0 + 2950 * MS,
            chain_id: 12,
            holder_tid: 99999,
        }],
    });
    // An exec that failed: the program went on (the end record says how it ended).
    b.push(Exec {
        ns: T0 + 800 * MS,
        path: "/usr/bin/true".into(),
    });
    b.push(Note {
        ns: T0 + MS,
        level: note_level::WARNING,
        text: "WAITSHIM_DEPTH=99 is out of range; using 24".into(),
    });
    b.push(Note {
        ns: T0 + MS,
        level: note_level::INFO,
        text: "policy reloaded".into(),
    });
    // WAITSHIM_DELAY: the spinlock's sections were lengthened on purpose.
    b.push(DelayRule {
        rule: 0,
        site: "site:spin_init*".into(),
        delay_ns: 20_000,
    });
    b.push(Delayed {
        object_id: 13,
        rule: 0,
        ns: T0 + 900 * MS,
        sections: 53,
        total_ns: 53 * 20_000 + 4_321,
    });
    // Thread 109 yielded: a flush's count, then a larger one at its end (the largest stands).
    b.push(ThreadYields {
        ns: T0 + 6 * MS,
        threads: vec![YieldCount {
            tid: 109,
            yields: 40,
        }],
        sites: vec![YieldSite {
            tid: 109,
            ret: APP_BASE + 0x2040,
            yields: 40,
        }],
    });
    b.push(ThreadYields {
        ns: T0 + 7 * MS,
        threads: vec![YieldCount {
            tid: 109,
            yields: 1_234,
        }],
        sites: vec![
            YieldSite {
                tid: 109,
                ret: APP_BASE + 0x2040,
                yields: 1_200,
            },
            YieldSite {
                tid: 109,
                ret: 0,
                yields: 34,
            },
        ],
    });
    // A record of a newer shim: skipped and counted.
    b.bytes.extend(raw_frame(999, &[1, 2, 3, 4, 5]));
    // A record damaged on disk: one flipped byte in its body.
    let at = b.bytes.len();
    b.counters(4, 1, 0, 0);
    b.bytes[at + 20] ^= 0x40;
    b.push(RunEnd {
        ns: T0 + 3000 * MS,
        reason: end_reason::EXIT,
        exit_status: 3,
        hwm: 7,
        dropped: 12,
    });
    b.bytes
}

/// `waitshim-analyze ARGS golden.log`, run beside the log so that it names it `golden.log`.
fn report(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_waitshim-analyze"))
        .current_dir(data())
        .args(args)
        .arg("golden.log")
        .output()
        .expect("run waitshim-analyze");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The first place where two JSON values differ, as a path (`logs.0.objects.3.counters`).
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let (kx, ky): (Vec<&String>, Vec<&String>) = (x.keys().collect(), y.keys().collect());
            if kx != ky {
                return Some(format!("{path}: fields {kx:?} != {ky:?}"));
            }
            x.iter()
                .find_map(|(k, v)| first_difference(v, &y[k], &format!("{path}.{k}")))
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(v, w, &format!("{path}.{i}"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} != {b}")),
    }
}

fn check(expected_file: &str, args: &[&str]) {
    let got = report(args);
    let path = data().join(expected_file);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).expect("write expected report");
        return;
    }
    let expected = std::fs::read_to_string(&path).expect("expected report");
    if got != expected {
        let parse = |s: &str| serde_json::from_str::<Value>(s).expect("JSON");
        let diff = first_difference(&parse(&got), &parse(&expected), "")
            .unwrap_or_else(|| "same fields, different bytes (order or layout)".into());
        panic!("the report of golden.log differs from {expected_file}: {diff}");
    }
}

#[test]
fn the_checked_in_log_is_the_one_the_builder_makes() {
    let path = data().join("golden.log");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, golden_log()).expect("write golden.log");
    }
    assert!(
        std::fs::read(&path).expect("golden.log") == golden_log(),
        "tests/data/golden.log is not what golden_log() builds: run with UPDATE_GOLDEN=1"
    );
}

#[test]
fn json_report_is_the_checked_in_one() {
    check("golden.json", &["--json", "--no-symbols"]);
}

#[test]
fn json_report_with_commonality_groups_is_the_checked_in_one() {
    check(
        "golden-outer.json",
        &["--json", "--no-symbols", "--sort", "outer:2"],
    );
}
