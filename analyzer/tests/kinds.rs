//! Every kind of wait in the report: per-kind tables with the columns that make sense for each
//! kind, and how the waits on each object ended (reason codes).

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;
use waitshim_analyze::{analyze_bytes, json_report, text_report, Options};
use waitshim_format::*;

fn text(b: &LogBuilder) -> String {
    let a = analyze_bytes(&b.bytes, Path::new("test.log")).expect("a log");
    text_report(&a, &Options::default())
}

fn json(b: &LogBuilder) -> Value {
    let a = analyze_bytes(&b.bytes, Path::new("test.log")).expect("a log");
    json_report(&a, &Options::default())
}

/// The lines of the report from the table titled `title` to the next blank line.
fn table<'a>(r: &'a str, title: &str) -> &'a str {
    let start = r
        .find(title)
        .unwrap_or_else(|| panic!("{title:?} not in report:\n{r}"));
    let rest = &r[start..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

/// A producer/consumer program: a queue mutex, a "not empty" condition variable, a semaphore pool
/// of 2, a configuration rwlock read by many and written twice, a barrier of 4 threads, a
/// spinlock and a joined worker.
fn every_kind_log() -> LogBuilder {
    let mut b = LogBuilder::started("/nonexistent/kinds", &["./kinds"]);
    b.thread(100, "main");
    for tid in 101..=104 {
        b.thread(tid, &format!("worker-{tid}"));
    }
    b.mutex(1, 0x7000_0000_1000, 0);
    b.counters(1, 1000, 400, 3000 * MS);
    b.kind_counters(
        1,
        &[
            (counter::ENDED_ACQUIRED, 398),
            (counter::ENDED_OWNER_DIED, 2),
        ],
    );

    b.object(ObjectKind::Cond, 2, 0x7000_0000_2000, 0);
    b.push(ObjectName {
        object_id: 2,
        name: "not_empty".into(),
    });
    b.push(Counters {
        object_id: 2,
        ns: T0 + 900 * MS,
        acquisitions: 0,
        contended: 120,
        owner_changes: 0,
        busy: 0,
        timeouts: 7,
        errors: 0,
        wait_total_ns: 800 * MS,
        wait_max_ns: 90 * MS,
        hold_total_ns: 0,
        hold_max_ns: 0,
        hold_samples: 0,
        max_waiters: 3,
    });
    b.kind_counters(
        2,
        &[
            (counter::ENDED_SIGNALLED, 100),
            (counter::ENDED_BROADCAST, 10),
            (counter::ENDED_TIMED_OUT, 7),
            (counter::ENDED_SPURIOUS, 3),
            (counter::SIGNALS, 150),
            (counter::BROADCASTS, 4),
            (counter::REACQUIRE_WAIT_TOTAL_NS, 12 * MS),
            (counter::REACQUIRE_WAIT_MAX_NS, 2 * MS),
        ],
    );

    b.object(ObjectKind::Semaphore, 3, 0x7000_0000_3000, 0);
    b.push(Counters {
        object_id: 3,
        ns: T0 + 900 * MS,
        acquisitions: 500,
        contended: 60,
        owner_changes: 0,
        busy: 9,
        timeouts: 4,
        errors: 1,
        wait_total_ns: 300 * MS,
        wait_max_ns: 20 * MS,
        hold_total_ns: 0,
        hold_max_ns: 0,
        hold_samples: 0,
        max_waiters: 2,
    });
    b.kind_counters(
        3,
        &[
            (counter::ENDED_ACQUIRED, 55),
            (counter::ENDED_TIMED_OUT, 4),
            (counter::ENDED_INTERRUPTED, 1),
            (counter::POSTS, 499),
        ],
    );

    b.object(ObjectKind::RwLock, 4, 0x7000_0000_4000, 0);
    b.push(Counters {
        object_id: 4,
        ns: T0 + 900 * MS,
        acquisitions: 2,
        contended: 2,
        owner_changes: 2,
        busy: 0,
        timeouts: 0,
        errors: 0,
        wait_total_ns: 1500 * MS,
        wait_max_ns: 1000 * MS,
        hold_total_ns: 4 * MS,
        hold_max_ns: 3 * MS,
        hold_samples: 2,
        max_waiters: 1,
    });
    b.kind_counters(
        4,
        &[
            (counter::ENDED_ACQUIRED, 7),
            (counter::READ_ACQUISITIONS, 9000),
            (counter::READ_CONTENDED, 5),
            (counter::READ_WAIT_TOTAL_NS, 6 * MS),
            (counter::READ_WAIT_MAX_NS, 3 * MS),
            (counter::READ_MAX_WAITERS, 4),
        ],
    );

    b.object(ObjectKind::Barrier, 5, 0x7000_0000_5000, 0);
    b.push(Counters {
        object_id: 5,
        ns: T0 + 900 * MS,
        acquisitions: 40,
        contended: 30,
        owner_changes: 0,
        busy: 0,
        timeouts: 0,
        errors: 0,
        wait_total_ns: 2000 * MS,
        wait_max_ns: 400 * MS,
        hold_total_ns: 0,
        hold_max_ns: 0,
        hold_samples: 0,
        max_waiters: 3,
    });
    b.kind_counters(5, &[(counter::ENDED_RELEASED, 30), (counter::ROUNDS, 10)]);

    b.object(ObjectKind::Spin, 6, 0x7000_0000_6000, 0);
    b.counters(6, 10_000, 2_500, 40 * MS);

    b.object(ObjectKind::Thread, 7, 0x7000_0000_7000, 0);
    b.push(Counters {
        object_id: 7,
        ns: T0 + 900 * MS,
        acquisitions: 1,
        contended: 1,
        owner_changes: 0,
        busy: 0,
        timeouts: 0,
        errors: 0,
        wait_total_ns: 700 * MS,
        wait_max_ns: 700 * MS,
        hold_total_ns: 0,
        hold_max_ns: 0,
        hold_samples: 0,
        max_waiters: 1,
    });
    b.kind_counters(7, &[(counter::ENDED_ACQUIRED, 1)]);
    b.end(1000 * MS, 3);
    b
}

/// The column headings of a table, without the spacing.
fn heads(table: &str) -> Vec<&str> {
    table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

/// The cells of the table row naming `object`, up to the label.
fn row<'a>(table: &'a str, object: &str) -> Vec<&'a str> {
    let line = table
        .lines()
        .find(|l| l.contains(object))
        .unwrap_or_else(|| panic!("{object} not in table:\n{table}"));
    line[..line.find(object).unwrap_or(0)]
        .split_whitespace()
        .collect()
}

#[test]
fn condition_variable_table_shows_signals_broadcasts_timeouts_spurious_and_reacquire_wait() {
    let r = text(&every_kind_log());
    let t = table(&r, "  CONDITION VARIABLES (1)");
    assert_eq!(
        heads(t),
        [
            "waits",
            "signals",
            "broadcasts",
            "timeouts",
            "spurious",
            "wait-tot",
            "wait-max",
            "reacq-tot",
            "reacq-max",
            "waiters",
            "object"
        ]
    );
    assert_eq!(
        row(t, "cond#2 \"not_empty\""),
        [
            "120", "150", "4", "7", "3", "800.0", "ms", "90.0", "ms", "12.0", "ms", "2.0", "ms",
            "3"
        ]
    );
    assert!(
        t.contains("\n      waits ended: signalled 100, broadcast 10, spurious 3, timed out 7"),
        "{t}"
    );
}

#[test]
fn semaphore_table_shows_posts_timeouts_interruptions_and_waiters() {
    let r = text(&every_kind_log());
    let t = table(&r, "  SEMAPHORES (1)");
    assert_eq!(
        heads(t),
        [
            "acquired",
            "waited",
            "posts",
            "timeouts",
            "interrupted",
            "waiters",
            "wait-tot",
            "wait-max",
            "busy",
            "object"
        ]
    );
    assert_eq!(
        row(t, "semaphore#3"),
        ["500", "60", "499", "4", "1", "2", "300.0", "ms", "20.0", "ms", "9"]
    );
    assert!(
        t.contains("\n      waits ended: acquired 55, timed out 4, interrupted 1"),
        "{t}"
    );
}

#[test]
fn rwlock_table_keeps_the_write_and_read_sides_apart() {
    let r = text(&every_kind_log());
    let t = table(&r, "  RWLOCKS (1; w-: write side, r-: read side)");
    assert_eq!(
        heads(t),
        [
            "w-acquired",
            "w-contended",
            "w-wait-tot",
            "w-wait-max",
            "w-waiters",
            "w-hold-tot",
            "w-hold-max",
            "r-acquired",
            "r-contended",
            "r-wait-tot",
            "r-wait-max",
            "r-waiters",
            "busy",
            "timeouts",
            "object"
        ]
    );
    assert_eq!(
        row(t, "rwlock#4"),
        [
            "2", "2", "(100.0%)", "1.50", "s", "1.00", "s", "1", "4.0", "ms", "3.0", "ms", "9000",
            "5", "(0.1%)", "6.0", "ms", "3.0", "ms", "4", "0", "0"
        ]
    );
}

#[test]
fn barrier_table_shows_rounds_and_the_spinlock_and_join_tables_their_columns() {
    let r = text(&every_kind_log());
    let t = table(&r, "  BARRIERS (1)");
    assert_eq!(
        heads(t),
        ["arrivals", "waits", "rounds", "wait-tot", "wait-max", "waiters", "object"]
    );
    assert_eq!(
        row(t, "barrier#5"),
        ["40", "30", "10", "2.00", "s", "400.0", "ms", "3"]
    );
    assert!(t.contains("\n      waits ended: released 30"), "{t}");

    let t = table(&r, "  SPINLOCKS (1; spinning counts as waiting");
    assert_eq!(
        heads(t),
        [
            "acquired",
            "contended",
            "spin-tot",
            "spin-max",
            "hold-tot",
            "hold-max",
            "waiters",
            "busy",
            "object"
        ]
    );
    assert_eq!(row(t, "spinlock#6")[..3], ["10000", "2500", "(25.0%)"]);

    let t = table(&r, "  THREADS JOINED (1; waits in pthread_join)");
    assert_eq!(
        heads(t),
        ["joins", "waited", "wait-tot", "wait-max", "waiters", "timeouts", "busy", "object"]
    );
    assert_eq!(row(t, "thread#7")[..2], ["1", "1"]);

    let t = table(
        &r,
        "  MUTEXES (1; hold-tot ~: holds that made others wait measured",
    );
    assert_eq!(heads(t)[..3], ["acquired", "contended", "owner-chg"]);
    assert!(
        t.contains("\n      waits ended: acquired 398, owner died 2"),
        "{t}"
    );
}

#[test]
fn tables_come_in_kind_order_under_one_objects_heading() {
    let r = text(&every_kind_log());
    let order = [
        "OBJECTS (7 with activity of 7 tracked, sorted by total wait; one table per kind)",
        "  MUTEXES (1",
        "  RWLOCKS (1",
        "  CONDITION VARIABLES (1)",
        "  SEMAPHORES (1)",
        "  SPINLOCKS (1",
        "  BARRIERS (1)",
        "  THREADS JOINED (1",
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|s| r.find(s).unwrap_or_else(|| panic!("{s:?} not in:\n{r}")))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{r}");
}

#[test]
fn json_objects_have_reason_counts_and_kind_counters_by_name() {
    let j = json(&every_kind_log());
    let obj = |id: u64| {
        j["objects"]
            .as_array()
            .and_then(|a| a.iter().find(|o| o["object_id"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("object {id} not in {j}"))
    };
    let cond = obj(2);
    assert_eq!(cond["kind"], "cond");
    assert_eq!(
        cond["ended"],
        serde_json::json!({"signalled": 100, "broadcast": 10, "spurious": 3, "timed_out": 7})
    );
    assert_eq!(cond["counters"]["contended"], 120);
    assert_eq!(cond["counters"]["signals"], 150);
    assert_eq!(cond["counters"]["broadcasts"], 4);
    assert_eq!(cond["counters"]["reacquire_wait_total_ns"], 12 * MS);
    assert_eq!(cond["counters"]["reacquire_wait_max_ns"], 2 * MS);
    // Reason codes are in `ended` only.
    assert!(cond["counters"].get("signalled").is_none());

    let sem = obj(3);
    assert_eq!(sem["kind"], "semaphore");
    assert_eq!(sem["counters"]["posts"], 499);
    assert_eq!(
        sem["ended"],
        serde_json::json!({"acquired": 55, "timed_out": 4, "interrupted": 1})
    );

    let rw = obj(4);
    assert_eq!(rw["kind"], "rwlock");
    assert_eq!(rw["counters"]["acquisitions"], 2);
    assert_eq!(rw["counters"]["read_acquisitions"], 9000);
    assert_eq!(rw["counters"]["read_contended"], 5);
    assert_eq!(rw["counters"]["read_wait_total_ns"], 6 * MS);
    assert_eq!(rw["counters"]["read_wait_max_ns"], 3 * MS);
    assert_eq!(rw["counters"]["read_max_waiters"], 4);

    let barrier = obj(5);
    assert_eq!(barrier["kind"], "barrier");
    assert_eq!(barrier["counters"]["rounds"], 10);
    assert_eq!(barrier["ended"], serde_json::json!({"released": 30}));

    assert_eq!(
        obj(1)["ended"],
        serde_json::json!({"acquired": 398, "owner_died": 2})
    );
    assert_eq!(obj(6)["kind"], "spinlock");
    assert_eq!(obj(6)["ended"], serde_json::json!({}));
    assert_eq!(obj(7)["kind"], "thread");
}

#[test]
fn later_kind_counters_supersede_and_unknown_keys_are_kept_by_number() {
    let mut b = every_kind_log();
    b.kind_counters(
        2,
        &[
            (counter::SIGNALS, 151),
            (counter::ENDED_SIGNALLED, 101),
            (999, 5),
        ],
    );
    let j = json(&b);
    let cond = j["objects"]
        .as_array()
        .and_then(|a| a.iter().find(|o| o["object_id"] == 2))
        .cloned()
        .expect("cond");
    assert_eq!(cond["ended"], serde_json::json!({"signalled": 101}));
    assert_eq!(cond["counters"]["signals"], 151);
    assert!(cond["counters"].get("broadcasts").is_none(), "{cond}");
    assert_eq!(cond["counters"]["key_999"], 5);
}

#[test]
fn object_with_only_kind_counters_is_listed() {
    let mut b = LogBuilder::started("/nonexistent/app", &["./app"]);
    b.object(ObjectKind::Cond, 1, 0x7000_0000_1000, 0);
    b.kind_counters(1, &[(counter::SIGNALS, 3)]);
    let r = text(&b);
    let t = table(&r, "  CONDITION VARIABLES (1)");
    assert_eq!(row(t, "cond#1")[..3], ["-", "3", "0"], "{t}");
    let j = json(&b);
    assert_eq!(
        j["objects"][0]["counters"],
        serde_json::json!({"signals": 3})
    );
}
