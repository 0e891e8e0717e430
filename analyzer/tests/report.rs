//! The analyzer's reports on synthetic logs, asserted as a user reads them.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;
use waitshim_analyze::{analyze_bytes, json_report, text_report, Options, SortKey};
use waitshim_format::*;

fn text(b: &LogBuilder, opts: &Options) -> String {
    let a = analyze_bytes(&b.bytes, Path::new("test.log")).expect("a log");
    text_report(&a, opts)
}

fn json(b: &LogBuilder, opts: &Options) -> Value {
    let a = analyze_bytes(&b.bytes, Path::new("test.log")).expect("a log");
    json_report(&a, opts)
}

fn sorted(sort: &str) -> Options {
    Options {
        sort: sort.parse::<SortKey>().expect("sort key"),
        ..Options::default()
    }
}

fn pos(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in report:\n{hay}"))
}

#[test]
fn convoy_of_seven_waiters_is_the_first_record() {
    let mut b = convoy_log();
    b.end(3000 * MS, 7);
    let r = text(&b, &sorted("hwm"));
    assert!(
        r.contains("highwater: 7 waiters on mutex#1 \"queue\" @0x700000001000"),
        "{r}"
    );
    assert!(r.contains("threads:   9 seen"), "{r}");
    assert!(r.contains("objects:   4 tracked, 3 contended"), "{r}");
    assert!(r.contains("duration:  3.00 s"), "{r}");
    assert!(r.contains("program:   ./convoy 8"), "{r}");
    let first = pos(
        &r,
        "[1] HWM 7  elapsed 500.0 ms  threads tried 8  +2 similar episodes",
    );
    assert!(first < pos(&r, "[2] HWM 3"));
    assert!(pos(&r, "[2] HWM 3") < pos(&r, "[3] HWM 2"));
    // Seven identical waiter chains are shown once, with the count.
    assert!(
        r.contains("7× (thread 102, 103, 104, 105, 106, 107, 108) waited at:"),
        "{r}"
    );
    // The binary is gone: frames degrade to module+offset, and the report says why.
    assert!(r.contains("#0 convoy+0x2010"), "{r}");
    assert!(
        r.contains("WARNING: /nonexistent/convoy: file not available"),
        "{r}"
    );
    // Per-object table: busiest wait first; the untouched mutex#4 is left out.
    let objects = &r[pos(&r, "OBJECTS (3 with activity of 4 tracked")..];
    assert!(pos(objects, "mutex#1") < pos(objects, "mutex#3"));
    assert!(pos(objects, "mutex#3") < pos(objects, "mutex#2"));
    assert!(!objects[..pos(objects, "WHERE THREADS WAIT")].contains("mutex#4"));
    assert!(objects.contains("400 (40.0%)"), "{objects}");
    assert!(r.contains("WHERE THREADS WAIT"));
    assert!(
        r.contains("400 waits, total 3.00 s, max 500.0 ms, at:"),
        "{r}"
    );
    assert!(
        !r.contains("WARNING: the log"),
        "a clean, complete log has no ending warning:\n{r}"
    );

    let all = text(
        &b,
        &Options {
            all_objects: true,
            ..Options::default()
        },
    );
    assert!(all.contains("OBJECTS (4 all of 4 tracked"), "{all}");
}

#[test]
fn json_report_follows_the_schema() {
    let mut b = convoy_log();
    b.end(3000 * MS, 7);
    let j = json(&b, &Options::default());
    assert_eq!(j["ending"], "clean");
    assert_eq!(j["run"]["pid"], 4242);
    assert_eq!(j["run"]["duration_ns"], 3000 * MS);
    assert_eq!(j["highwater"]["hwm"], 7);
    assert_eq!(j["highwater"]["object_id"], 1);
    let recs = j["contention_records"].as_array().expect("records");
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[0]["level"], 7);
    assert_eq!(recs[0]["state"], "complete");
    assert_eq!(recs[0]["coalesced"], 2);
    assert_eq!(recs[0]["elapsed_ns"], 500 * MS);
    let obj = &j["objects"][0];
    assert_eq!(obj["kind"], "mutex");
    assert_eq!(obj["name"], "queue");
    assert_eq!(obj["addr"], "0x700000001000");
    assert_eq!(obj["counters"]["contended"], 400);
    assert_eq!(obj["creation_site"]["module_offset"], 0x500);
    assert!(j["chains"]["10"].is_array());
    assert_eq!(
        j["chains"]["10"][0]["addr"],
        format!("{:#x}", APP_BASE + 0x2010)
    );
    // The document the command writes, as it makes it, holds the same report.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = b.write(dir.path(), "test.log");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = waitshim_analyze::run(&[path], &Options::default(), true, &mut out, &mut err);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_slice(&out).expect("JSON");
    assert_eq!(doc["schema"], "waitshim-report/1");
    let mut streamed = doc["logs"][0].clone();
    streamed["file"] = j["file"].clone();
    assert_eq!(streamed, j);
}

#[test]
fn sort_by_elapsed_puts_the_longest_episode_first() {
    let r = text(&convoy_log(), &sorted("elapsed"));
    assert!(r.contains("sorted by elapsed"), "{r}");
    assert!(pos(&r, "[1] HWM 2  elapsed 2.00 s") < pos(&r, "[2] HWM 7  elapsed 500.0 ms"));
    assert!(pos(&r, "[2] HWM 7") < pos(&r, "[3] HWM 3  elapsed 10.0 ms"));

    let r = text(&convoy_log(), &sorted("wait"));
    assert!(pos(&r, "[1] HWM 7") < pos(&r, "[2] HWM 2"), "{r}");
    assert!(pos(&r, "[2] HWM 2") < pos(&r, "[3] HWM 3"), "{r}");
}

#[test]
fn sort_by_lost_puts_first_the_records_of_the_object_that_left_a_cpu_unused() {
    let mut b = convoy_log();
    let state = |tid: u32, state: u8, on_cpu_ns: u64, object_id: u64| ThreadState {
        tid,
        state,
        waiting_kind: if object_id != 0 {
            ObjectKind::Mutex as u8 + 1
        } else {
            0
        },
        on_cpu_ns,
        syscall: if object_id != 0 { 202 } else { -1 },
        object_id,
        ..ThreadState::default()
    };
    // 700..800 ms, two CPUs: thread 104 runs all along, 103 sleeps on object 3 (the record of
    // HWM 2): one CPU unused, lost to object 3; nothing to object 1 (HWM 7).
    for (at, threads) in [
        (
            700,
            vec![
                state(104, thread_state::RUNNING, 0, 0),
                state(103, thread_state::TRACKED_WAIT, 0, 3),
            ],
        ),
        (800, vec![state(104, thread_state::RUNNING, 100 * MS, 0)]),
    ] {
        b.push(ThreadSamples {
            ns: T0 + at * MS,
            interval_ns: 100 * MS,
            threads,
            unsampled: 0,
        });
    }
    b.end(3000 * MS, 7);
    let r = text(&b, &sorted("lost"));
    assert!(r.contains("sorted by lost"), "{r}");
    assert!(
        r.contains("lost parallelism: 100.0 ms of 200.0 ms CPU time"),
        "{r}"
    );
    assert!(pos(&r, "[1] HWM 2") < pos(&r, "[2] HWM 7"), "{r}");
    assert!(pos(&r, "[2] HWM 7") < pos(&r, "[3] HWM 3"), "{r}");
    assert!("lost".parse::<SortKey>().is_ok());
}

#[test]
fn sort_by_outer_frame_groups_records_by_caller() {
    let r = text(&convoy_log(), &sorted("outer:1"));
    assert!(
        r.contains("grouped by the outermost 1 frames of the waiter chains; 2 groups"),
        "{r}"
    );
    // Chains 10 and 11 share their outermost frame (convoy+0x1010): 510 ms together, less than
    // the single 2 s record whose outermost frame is convoy+0x1020.
    let g1 = pos(
        &r,
        "GROUP 1: convoy+0x1020  (1 records, total elapsed 2.00 s, max HWM 2)",
    );
    let g2 = pos(
        &r,
        "GROUP 2: convoy+0x1010  (2 records, total elapsed 510.0 ms, max HWM 7)",
    );
    assert!(g1 < g2);
    assert!(
        pos(&r, "[1] HWM 2") < g2 && g2 < pos(&r, "[2] HWM 7"),
        "{r}"
    );

    // The innermost frames differ for every chain: three groups.
    let r = text(&convoy_log(), &sorted("inner:1"));
    assert!(
        r.contains("innermost 1 frames of the waiter chains; 3 groups"),
        "{r}"
    );
    // With two inner frames, order is caller → callee.
    let r = text(&convoy_log(), &sorted("inner:2"));
    assert!(r.contains("GROUP 1: convoy+0x3000 → convoy+0x2030"), "{r}");

    let j = json(&convoy_log(), &sorted("outer:1"));
    assert_eq!(j["groups"][0]["frames"][0], "convoy+0x1020");
    assert_eq!(j["groups"][1]["records"], serde_json::json!([2, 1]));
}

#[test]
fn top_limits_the_records_shown() {
    let r = text(
        &convoy_log(),
        &Options {
            top: 1,
            ..Options::default()
        },
    );
    assert!(r.contains("[1] HWM 7"));
    assert!(!r.contains("[2] HWM"), "{r}");
}

#[test]
fn deadlock_shows_the_cycle_and_both_wait_chains() {
    let mut b = convoy_log();
    b.chain(20, &[APP_BASE + 0x6010, APP_BASE + 0x1010]);
    b.chain(21, &[APP_BASE + 0x6020, APP_BASE + 0x1010]);
    b.push(Deadlock {
        ns: T0 + 800 * MS,
        detected_by: 102,
        cycle: vec![
            DeadlockEdge {
                tid: 101,
                object_id: 1,
                wait_chain: 20,
                holder_tid: 102,
            },
            DeadlockEdge {
                tid: 102,
                object_id: 2,
                wait_chain: 21,
                holder_tid: 101,
            },
        ],
    });
    let r = text(&b, &Options::default());
    assert!(r.contains("deadlocks: 1"));
    let d = pos(
        &r,
        "DEADLOCK 1 (detected at 800.0 ms by thread 102): 2 threads wait for each other",
    );
    assert!(
        d < pos(&r, "LOCK CONTENTION RECORDS"),
        "deadlocks come before records"
    );
    assert!(
        r.contains("cycle: thread 101 → mutex#1 → thread 102 → mutex#2 → thread 101"),
        "{r}"
    );
    assert!(r.contains(
        "thread 101 \"worker-101\" waits for mutex#1 \"queue\" @0x700000001000  created at convoy+0x500, held by thread 102 \"worker-102\""
    ), "{r}");
    assert!(
        r.contains("wait chain of thread 101 \"worker-101\":\n    #0 convoy+0x6010"),
        "{r}"
    );
    assert!(
        r.contains("wait chain of thread 102 \"worker-102\":\n    #0 convoy+0x6020"),
        "{r}"
    );

    let j = json(&b, &Options::default());
    assert_eq!(j["deadlocks"][0]["cycle"][1]["holder_tid"], 101);
    assert!(j["chains"]["21"].is_array());
}

/// Every thread waited, with no deadline, and the shim said so; then one stopped waiting after
/// all (woken by something the shim does not see). Not a deadlock, and not a cycle a deadline
/// broke either: the report says what it was.
#[test]
fn every_thread_waiting_that_ended_after_all_is_neither_a_deadlock_nor_a_broken_cycle() {
    let mut b = convoy_log();
    b.chain(20, &[APP_BASE + 0x6010, APP_BASE + 0x1010]);
    let claimed = T0 + 800 * MS;
    b.push(Deadlock {
        ns: claimed,
        detected_by: deadlock::EVERY_THREAD_WAITS,
        cycle: vec![
            DeadlockEdge {
                tid: 101,
                object_id: 1,
                wait_chain: 20,
                holder_tid: 0,
            },
            DeadlockEdge {
                tid: 102,
                object_id: 2,
                wait_chain: 20,
                holder_tid: 0,
            },
        ],
    });
    b.push(DeadlockBroken {
        deadlock_ns: claimed,
        tid: 101,
        ns: claimed + 1_500 * MS,
        outcome: counter::ENDED_ACQUIRED,
    });
    let r = text(&b, &Options::default());
    assert!(
        r.contains(
            "deadlocks: 0 (1 more time every thread waited until one was woken from outside \
             what the shim sees)"
        ),
        "{r}"
    );
    assert!(!r.contains("deadline"), "no deadline was involved:\n{r}");
    assert!(
        r.contains("EVERY THREAD WAITED, THEN ONE WAS WOKEN (1:"),
        "{r}"
    );
    assert!(
        r.contains("WAITING 1 (from 800.0 ms): all 2 threads of the process wait for one another; over after 1.50 s when thread 101"),
        "{r}"
    );
    assert!(!r.contains("\nDEADLOCK 1"), "{r}");
}

#[test]
fn record_without_close_is_still_open() {
    let mut b = convoy_log();
    b.open(9, 4, 8, 2800 * MS, (105, 10));
    b.push(Note {
        ns: T0 + 2900 * MS,
        level: note_level::INFO,
        text: "still alive".into(),
    });
    let r = text(&b, &sorted("hwm"));
    assert!(
        r.contains("[1] HWM 8  still open when the log ended (elapsed at least 100.0 ms)"),
        "{r}"
    );
    assert!(
        r.contains("holder: thread 101 \"worker-101\" (had not released it when the log ended)"),
        "{r}"
    );
    assert!(r.contains("ended:     no exit record"));
    assert!(r.contains("duration:  at least 2.90 s"), "{r}");
    assert!(r.contains("WARNING: shim: still alive"));
    let j = json(&b, &sorted("hwm"));
    assert_eq!(j["contention_records"][0]["state"], "open");
    assert_eq!(j["contention_records"][0]["elapsed_is_lower_bound"], true);
    assert_eq!(j["run"]["end"], Value::Null);
}

/// A record whose waiters waited more than once in the episode (an rwlock's readers queueing
/// again, a barrier's next round) says how many waits by how many threads, so that its figures
/// agree: 3 threads tried (2 waiters and the holder), 5 waits.
#[test]
fn a_record_with_repeated_waits_counts_waits_and_threads_apart() {
    let mut b = convoy_log();
    b.open(9, 1, 2, 2800 * MS, (102, 10));
    b.push(ContentionClose {
        record_id: 9,
        object_id: 1,
        ns: T0 + 2900 * MS,
        level: 2,
        elapsed_ns: 100 * MS,
        threads_tried: 3,
        holder_tid: 101,
        holder_chain: 30,
        waiters: [(102, 10), (103, 11)]
            .iter()
            .map(|&(tid, chain_id)| WaiterRef {
                tid,
                chain_id,
                wait_ns: 100 * MS,
            })
            .collect(),
        waiters_total: 5,
        coalesced: 0,
    });
    b.end(3000 * MS, 7);
    let r = text(&b, &sorted("elapsed"));
    assert!(
        r.contains("waiters (5 waits by 2 threads: a thread that waited again in the episode is listed once):"),
        "{r}"
    );
    // Waits and threads agreeing need no explanation.
    assert!(r.contains("waiters (7):"), "{r}");
}

#[test]
fn truncated_log_gives_a_report_and_a_warning() {
    let mut b = convoy_log();
    let keep = b.bytes.len();
    b.end(3000 * MS, 7);
    b.bytes.truncate(keep + 10);
    let r = text(&b, &Options::default());
    assert!(
        r.contains(&format!(
            "WARNING: the log is truncated: it stops in the middle of a record at offset {keep}"
        )),
        "{r}"
    );
    assert!(
        r.contains("[1] HWM 7"),
        "what was written is reported:\n{r}"
    );
    assert_eq!(json(&b, &Options::default())["ending"], "truncated");
}

#[test]
fn unwritten_tail_says_the_process_ended_without_exit_handlers_or_was_killed() {
    let mut b = convoy_log();
    b.bytes.extend(std::iter::repeat_n(0u8, 64 << 10));
    let r = text(&b, &Options::default());
    assert!(
        r.contains(
            "WARNING: the log ends in unwritten space, with no end record: the process ended \
             without running its exit handlers: it made a raw exit_group system call"
        ),
        "{r}"
    );
    assert!(r.contains("or it was killed by a signal that cannot be caught (SIGKILL"));
    assert!(r.contains("[1] HWM 7"));
    let j = json(&b, &Options::default());
    assert_eq!(j["ending"], "unwritten");
    assert_eq!(j["warnings"][0]["kind"], "ending");
    assert_eq!(j["run"]["no_end"], "no_exit_handlers");
}

#[test]
fn damaged_record_is_skipped_and_reported() {
    let mut b = LogBuilder::started("/bin/x", &["x"]);
    b.mutex(1, 0x1000, 0);
    let at = b.bytes.len();
    b.mutex(2, 0x2000, 0);
    b.mutex(3, 0x3000, 0);
    b.end(10 * MS, 0);
    if let Some(byte) = b.bytes.get_mut(at + 20) {
        *byte ^= 0xff;
    }
    let r = text(
        &b,
        &Options {
            all_objects: true,
            ..Options::default()
        },
    );
    assert!(r.contains("WARNING: damaged log: "), "{r}");
    assert!(
        r.contains(&format!("bytes lost at offset {at} (checksum mismatch)")),
        "{r}"
    );
    assert!(r.contains("objects:   2 tracked"), "{r}");
    assert!(r.contains("ended:     exit status 0"), "{r}");
}

#[test]
fn run_without_any_lock_says_nothing_was_seen_and_why_from_its_threads() {
    // The shim wrote the log: the program is not statically linked, whatever else it is
    // (make -j2 was told it might be).
    let mut b = LogBuilder::started("/usr/bin/make", &["make"]);
    b.thread(100, "main");
    b.end(5 * MS, 0);
    let r = text(&b, &Options::default());
    assert!(
        r.contains("No sync object was seen in this run: the program ran on one thread"),
        "{r}"
    );
    assert!(!r.contains("statically linked"), "{r}");
    assert!(!r.contains("LOCK CONTENTION RECORDS"));
    let mut b = LogBuilder::started("/usr/bin/goprog", &["goprog"]);
    b.thread(100, "main");
    b.thread(101, "worker");
    b.end(5 * MS, 0);
    let r = text(&b, &Options::default());
    assert!(r.contains("though 2 threads ran"), "{r}");
    assert!(r.contains("Go's runtime"), "{r}");
}

#[test]
fn shim_frames_are_hidden() {
    let mut b = convoy_log();
    b.push(Module {
        module_id: 2,
        base: 0x7f00_0000_0000,
        build_id: vec![9],
        path: "/opt/waitshim/libwaitshim.so".into(),
        segments: vec![Segment {
            vaddr: 0,
            memsz: 0x1000,
        }],
    });
    b.chain(40, &[0x7f00_0000_0100, 0x7f00_0000_0200, APP_BASE + 0x2040]);
    b.open(7, 4, 9, 10 * MS, (106, 40));
    let r = text(
        &b,
        &Options {
            symbols: false,
            ..Options::default()
        },
    );
    assert!(
        r.contains("1× (thread 106) waited at:\n        #0 convoy+0x2040"),
        "{r}"
    );
    assert!(!r.contains("libwaitshim.so+"), "{r}");
}

fn analyze_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_waitshim-analyze"))
}

#[test]
fn cli_rejects_a_text_file_with_exit_code_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("notes.txt");
    std::fs::write(&p, "this is not a log, just some words\n").expect("write");
    let out = analyze_bin().arg(&p).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("notes.txt: not a waitshim log (no WAITSHIM header)"),
        "{err}"
    );
    assert!(!err.contains("panicked"));

    let out = analyze_bin()
        .arg(dir.path().join("missing.log"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.log: cannot open"));

    let out = analyze_bin().arg(dir.path()).output().expect("run");
    assert_eq!(out.status.code(), Some(2), "a directory is not a log");
}

#[test]
fn cli_reports_each_log_in_its_own_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut parent = convoy_log();
    parent.end(3000 * MS, 7);
    let p1 = parent.write(dir.path(), "waitshim.4242.log");
    let mut child = LogBuilder::started("/nonexistent/convoy", &["./convoy", "child"]);
    child.mutex(1, 0x1000, 0).end(MS, 0);
    let p2 = child.write(dir.path(), "waitshim.4243.log");

    let out = analyze_bin()
        .args(["--sort", "elapsed", "--top", "2"])
        .arg(&p1)
        .arg(&p2)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let r = String::from_utf8_lossy(&out.stdout);
    assert!(pos(&r, "waitshim report: ") < pos(&r, "[1] HWM 2  elapsed 2.00 s"));
    assert!(r.contains("waitshim.4243.log"));
    assert!(r.contains("program:   ./convoy child"));
    assert!(!r.contains("[3] HWM"));

    let out = analyze_bin()
        .arg("--json")
        .arg(&p1)
        .arg(&p2)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["schema"], "waitshim-report/1");
    assert_eq!(doc["logs"].as_array().map(Vec::len), Some(2));

    let out = analyze_bin()
        .args(["--sort", "sideways"])
        .arg(&p1)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "clap usage errors exit with 2");
}

#[test]
fn commonality_skips_thread_entry_frames_of_libc() {
    let mut b = convoy_log();
    let libc = 0x7f10_0000_0000;
    b.push(Module {
        module_id: 3,
        base: libc,
        build_id: vec![],
        path: "/nonexistent/libc.so.6".into(),
        segments: vec![Segment {
            vaddr: 0,
            memsz: 0x10000,
        }],
    });
    // Same as chain 12 (outermost program frame convoy+0x1020), called from libc's thread entry.
    b.chain(
        50,
        &[
            APP_BASE + 0x2030,
            APP_BASE + 0x1020,
            libc + 0x100,
            libc + 0x200,
        ],
    );
    b.open(8, 4, 1, 10 * MS, (107, 50));
    b.close(8, 4, 1, 11 * MS, MS, &[(107, 50)], 0);
    let r = text(&b, &sorted("outer:1"));
    assert!(
        r.contains("GROUP 1: convoy+0x1020  (2 records, total elapsed 2.00 s"),
        "{r}"
    );
    assert!(!r.contains("GROUP 3"), "{r}");
}

#[test]
fn an_opener_that_turned_out_to_be_the_holder_is_not_listed_as_a_waiter() {
    // The shim opened the episode for thread 101's arrival (taken for a waiter), then cancelled
    // that wait: 101 completed the round and closed the episode. Its close counts no waiter but
    // the one that ended it: level 0.
    let mut b = convoy_log();
    b.object(ObjectKind::Barrier, 5, 0x7000_0000_5000, 1);
    let peak = contention_reason::OBJECT_PEAK;
    b.open_as(9, 5, 1, 2800 * MS, (101, 10), peak, 0);
    b.close(9, 5, 0, 2810 * MS, 10 * MS, &[], 0);
    // On a mutex, the opener waited for real: the lock was released as its wait began, before
    // the episode was marked on it, so it took the lock and its own release closed the record.
    b.open_as(10, 4, 1, 2820 * MS, (101, 10), peak, 102);
    b.close(10, 4, 0, 2825 * MS, 5 * MS, &[], 0);
    b.end(3000 * MS, 7);
    let r = text(&b, &sorted("elapsed"));
    let rec = &r[pos(&r, "object: barrier#5")..];
    let rec = &rec[..rec.find("\n\n").unwrap_or(rec.len())];
    assert!(
        rec.contains("when thread 101 arrived\n")
            && rec.contains(
                "no thread waited in this episode (HWM 0): thread 101's arrival, counted as a \
                 wait, completed the round"
            ),
        "{rec}"
    );
    assert!(rec.contains("completed by: thread 101"), "{rec}");
    assert!(rec.contains("waiters (0):"), "{rec}");
    assert!(
        !rec.contains("waited at:") && !rec.contains("\n    holder"),
        "{rec}"
    );
    let mutex = &r[pos(&r, "object: mutex#4")..];
    let mutex = &mutex[..mutex.find("\n\n").unwrap_or(mutex.len())];
    // One waiter when it opened (the object's most: its table says 1), none by the close.
    assert!(
        mutex.contains("(1 waiting, the most it had had so far) when thread 101 waited\n"),
        "{mutex}"
    );
    assert!(
        mutex.contains(
            "no thread waited behind another in this episode (HWM 0): the object was let go as \
             thread 101's wait began, and thread 101 took it itself"
        ),
        "{mutex}"
    );
    assert!(!mutex.contains("round"), "{mutex}");
}

#[test]
fn text_of_many_objects_and_threads_shows_the_busiest_thousand_and_counts_the_rest() {
    let mut b = LogBuilder::started("/nonexistent/app", &["app"]);
    for tid in 1..=1500u32 {
        b.thread(tid, "");
    }
    for id in 1..=1500u64 {
        b.mutex(id, 0x1000 * id, 0);
        b.counters(id, 10, 1, id * MS);
        b.push(WaitSite {
            object_id: id,
            chain_id: 0,
            count: 1,
            wait_total_ns: id * MS,
            wait_max_ns: id * MS,
        });
    }
    b.end(3000 * MS, 1);
    // By default every list shows the --top 20 with the most wait and counts the rest.
    let r = text(&b, &Options::default());
    assert!(r.contains("  MUTEXES (1500"), "{r}");
    assert!(
        r.contains("  ... 1480 more with less wait (all are in the JSON report)"),
        "{r}"
    );
    assert!(
        r.contains("  ... 1480 more threads (all are in the JSON report)"),
        "{r}"
    );
    assert!(r.contains("mutex#1500"), "the busiest is shown");
    assert!(!r.contains("mutex#1480 "), "the 21st is not: {r}");
    // --all-objects: the busiest thousand of each kind.
    let r = text(
        &b,
        &Options {
            all_objects: true,
            ..Options::default()
        },
    );
    assert!(
        r.contains("  ... 500 more with less wait (all are in the JSON report)"),
        "{r}"
    );
    assert!(r.contains("mutex#501 "), "the thousandth is shown");
    assert!(!r.contains("mutex#1 "), "the least busy is not");
    let j = json(&b, &Options::default());
    assert_eq!(j["objects"].as_array().map(Vec::len), Some(1500));
    assert_eq!(j["threads"].as_array().map(Vec::len), Some(1500));
}

#[test]
fn a_run_ended_by_a_fatal_signal_says_which() {
    let mut b = convoy_log();
    b.push(RunEnd {
        ns: T0 + 3000 * MS,
        reason: end_reason::SIGNAL,
        exit_status: 15,
        hwm: 7,
        dropped: 0,
    });
    let r = text(&b, &Options::default());
    assert!(
        r.contains("ended:     killed by signal 15 (SIGTERM) (the program had no handler for it)"),
        "{r}"
    );
    assert!(!r.contains("WARNING: the log"), "{r}");
    let j = json(&b, &Options::default());
    assert_eq!(j["run"]["end"]["reason"], "signal");
    assert_eq!(j["run"]["end"]["signal"], 15);
    assert_eq!(j["run"]["end"]["exit_status"], Value::Null);
    assert_eq!(j["run"]["no_end"], Value::Null);
}

#[test]
fn an_end_reason_from_a_newer_shim_is_shown_as_unknown() {
    let mut b = convoy_log();
    b.push(RunEnd {
        ns: T0 + 3000 * MS,
        reason: 200,
        exit_status: -1,
        hwm: 7,
        dropped: 0,
    });
    let j = json(&b, &Options::default());
    assert_eq!(j["run"]["end"]["reason"], "unknown");
}

/// The record of one object of `text` (from its `object:` line to the blank line after it).
fn record_of<'a>(text: &'a str, object: &str) -> &'a str {
    let at = pos(text, &format!("object: {object}"));
    let rec = &text[at..];
    &rec[..rec.find("\n\n").unwrap_or(rec.len())]
}

/// A condition variable, a semaphore and a barrier have no holder: the thread whose act ended
/// an episode is named by that act, and an episode still open when the log ended names nobody
/// (the shim's holder field holds 0, or for a semaphore the last thread that took it).
#[test]
fn records_of_objects_nobody_holds_name_the_act_that_ended_them_not_a_holder() {
    let mut b = convoy_log();
    let peak = contention_reason::OBJECT_PEAK;
    b.object(ObjectKind::Cond, 5, 0x7000_0000_5000, 1);
    b.object(ObjectKind::Cond, 6, 0x7000_0000_6000, 1);
    b.object(ObjectKind::Semaphore, 7, 0x7000_0000_7000, 1);
    // cond#5: signalled by 101 at chain 30.
    b.open_as(10, 5, 1, 2800 * MS, (102, 11), peak, 0);
    b.close(10, 5, 1, 2810 * MS, 10 * MS, &[(102, 11)], 0);
    // cond#6 and sem#7: still waited on when the log ended.
    b.open_as(11, 6, 1, 2900 * MS, (103, 11), peak, 0);
    b.open_as(12, 7, 1, 2900 * MS, (104, 11), peak, 105);
    b.end(3000 * MS, 7);
    let r = text(&b, &sorted("hwm"));
    let closed = record_of(&r, "cond#5");
    assert!(
        closed.contains(
            "signalled by: thread 101 \"worker-101\" (a condition variable has no holder: the \
             episode ended at this signal or broadcast), at:\n      #0 convoy+0x4000"
        ),
        "{closed}"
    );
    let open = record_of(&r, "cond#6");
    assert!(
        open.contains(
            "not signalled when the log ended (a condition variable has no holder: its waiters \
             wait for a signal)"
        ),
        "{open}"
    );
    let sem = record_of(&r, "semaphore#7");
    assert!(sem.contains("not posted when the log ended"), "{sem}");
    for rec in [closed, open, sem] {
        assert!(
            !rec.contains("\n    holder") && !rec.contains("thread 0"),
            "{rec}"
        );
        assert!(!rec.contains("thread 105"), "{rec}");
    }
    // The JSON gives no holder to an open record of an object nobody holds.
    let j = json(&b, &sorted("hwm"));
    let rec = |id: u64| {
        j["contention_records"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["record_id"] == id)
            .unwrap_or_else(|| panic!("record {id}"))
            .clone()
    };
    assert_eq!(rec(10)["holder_tid"], 101);
    assert_eq!(rec(11)["holder_tid"], Value::Null);
    assert_eq!(rec(12)["holder_tid"], Value::Null);
}

/// A record the shim opened because the program was serialised says what the shim counted:
/// on a condition variable every thread blocked, on a mutex every thread but its holder, never
/// that no other thread could run.
#[test]
fn a_serialised_record_says_what_the_shim_counted_for_the_kind() {
    let mut b = convoy_log();
    let serialised = contention_reason::SERIALISED;
    b.object(ObjectKind::Cond, 5, 0x7000_0000_5000, 1);
    b.open_as(10, 5, 2, 2800 * MS, (102, 11), serialised, 0);
    b.close(10, 5, 2, 2810 * MS, 10 * MS, &[(102, 11), (103, 11)], 0);
    b.open_as(11, 4, 2, 2850 * MS, (104, 11), serialised, 101);
    b.close(11, 4, 2, 2860 * MS, 10 * MS, &[(104, 11), (105, 11)], 0);
    b.end(3000 * MS, 7);
    let r = text(&b, &sorted("hwm"));
    assert!(!r.contains("could run"), "{r}");
    let cond = record_of(&r, "cond#5");
    assert!(
        cond.contains(
            "(2 waiting, as many as the run's highwater mark, with every thread blocked as the \
             shim counted them (in waits it tracks, or in a system call at the sampler's last \
             look): serialised here)"
        ),
        "{cond}"
    );
    let mutex = record_of(&r, "mutex#4");
    assert!(
        mutex.contains("with every thread but its holder blocked as the shim counted them"),
        "{mutex}"
    );
}

/// An episode opened at an object's own peak that a later wait took above the run's highwater
/// mark is the record that raised the mark: labelled so in the text and the JSON. A rise on the
/// same object after its close belongs to no record of it.
#[test]
fn the_record_during_which_the_mark_rose_is_the_one_that_exceeded_it() {
    let mut b = convoy_log();
    let peak = contention_reason::OBJECT_PEAK;
    b.open_as(10, 4, 1, 2800 * MS, (102, 11), peak, 101);
    b.push(Highwater {
        ns: T0 + 2805 * MS,
        hwm: 8,
        object_id: 4,
        tid: 103,
    });
    b.close(10, 4, 8, 2810 * MS, 10 * MS, &[(102, 11), (103, 11)], 0);
    b.open_as(11, 4, 1, 2900 * MS, (102, 11), peak, 101);
    b.close(11, 4, 1, 2910 * MS, 10 * MS, &[(102, 11)], 0);
    b.end(3000 * MS, 8);
    let r = text(&b, &sorted("hwm"));
    assert!(
        r.contains(
            "(its waiters rose above the run's highwater mark, to 8) when thread 102 waited"
        ),
        "{r}"
    );
    let j = json(&b, &sorted("hwm"));
    let reason = |id: u64| {
        j["contention_records"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["record_id"] == id)
            .map(|r| r["reason"].clone())
    };
    assert_eq!(reason(10), Some(Value::from("exceeded")));
    assert_eq!(reason(11), Some(Value::from("object_peak")));
}

/// WHERE THE WAITING WENT of `text`, to the next section.
fn waiting_went(text: &str) -> &str {
    let at = pos(text, "WHERE THE WAITING WENT");
    let s = &text[at..];
    &s[..s.find("\n\n").unwrap_or(s.len())]
}

/// A wait still in progress when the log ended belongs to its site: the site line counts it,
/// and the object's sites add up to the object's line.
#[test]
fn a_wait_still_in_progress_is_on_its_sites_line_and_the_sites_add_up() {
    let mut b = convoy_log();
    b.object(ObjectKind::Cond, 5, 0x7000_0000_5000, 1);
    b.counters(5, 7, 7, 40 * MS);
    for (chain_id, count, ns) in [(11, 6, 30 * MS), (12, 1, 10 * MS)] {
        b.push(WaitSite {
            object_id: 5,
            chain_id,
            count,
            wait_total_ns: ns,
            wait_max_ns: ns,
        });
    }
    b.push(OpenWaits {
        ns: T0 + 2995 * MS,
        waits: vec![OpenWait {
            tid: 104,
            object_id: 5,
            since_ns: T0 + 995 * MS,
            chain_id: 11,
            holder_tid: 0,
        }],
    });
    b.end(3000 * MS, 7);
    let r = text(&b, &Options::default());
    let went = waiting_went(&r);
    // 7 finished waits (40 ms) and one of 2 s still in progress.
    let row = &went[pos(went, "cond#5")..];
    assert!(
        row.starts_with("cond#5 @0x700000005000  created at convoy+0x500 (still waiting: 2.00 s)"),
        "{went}"
    );
    assert!(
        went.contains("2.04 s ") && went.contains("        8 "),
        "the object: 8 waits, 2.04 s:\n{went}"
    );
    assert!(
        row.contains("at convoy+0x2020: 7 waits, 2.03 s (1 still in progress: 2.00 s)"),
        "{row}"
    );
    assert!(row.contains("at 1 other site: 1 wait, 10.0 ms"), "{row}");
    assert!(!row.contains("does not give"), "{row}");
}

/// More contended locks than `--top` rows, and seconds of waiting on a condition variable: the
/// condition variable still has its row, and each group says what it left out.
#[test]
fn a_cut_of_waiting_went_keeps_every_groups_largest_row() {
    let mut b = convoy_log();
    for id in 10..40u64 {
        b.mutex(id, 0x7000_0001_0000 + id * 64, 1);
        b.counters(id, 10, 2, 20_000 + id);
    }
    b.object(ObjectKind::Cond, 5, 0x7000_0000_5000, 1);
    b.counters(5, 3, 3, 5_490 * MS);
    b.end(3000 * MS, 7);
    let r = text(&b, &Options::default());
    let went = waiting_went(&r);
    assert!(went.contains("cond#5"), "{went}");
    let rows = went.lines().filter(|l| l.contains(" @0x")).count();
    assert_eq!(rows, 20, "{went}");
    // The locks: mutex#1..#3 and 30 more, 19 shown.
    assert!(
        went.contains("  ... 14 more objects in this group, "),
        "{went}"
    );
    assert!(
        went.contains("(--top N shows more rows; the JSON report has every object)"),
        "{went}"
    );
}

/// `diff` compares objects and their sites: a wait still in progress at the end counts at its
/// site as it counts in its object, so that the sites of an object add up to it.
#[test]
fn diff_counts_a_wait_in_progress_at_its_site() {
    let mut b = convoy_log();
    b.push(OpenWaits {
        ns: T0 + 2995 * MS,
        waits: vec![OpenWait {
            tid: 104,
            object_id: 1,
            since_ns: T0 + 2895 * MS,
            chain_id: 10,
            holder_tid: 101,
        }],
    });
    b.end(3000 * MS, 7);
    let a = analyze_bytes(&b.bytes, Path::new("test.log")).expect("a log");
    let f = waitshim_analyze::diff::figures(&a, &Options::default());
    // The three mutexes were created at one site: one key. mutex#1's 400 waits at chain 10, and
    // the one in progress there.
    let (key, object) = f.objects.iter().next().expect("the mutexes");
    assert_eq!(object.objects, 3, "{object:?}");
    let sites: Vec<_> = f.sites.iter().filter(|((k, _), _)| k == key).collect();
    assert_eq!(sites.len(), 1, "{sites:?}");
    assert_eq!(*sites[0].1, (401, 3100 * MS));
}
