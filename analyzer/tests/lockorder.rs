//! Potential deadlocks: lock-order inversions found in the lock-order graph and reported the way
//! a sanitizer reports them, whether or not the run hung.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

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

fn pos(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in report:\n{hay}"))
}

/// The program of fixtures/lock_inversion.c: thread "forward" (101) takes A (mutex#1) then B
/// (mutex#2) at chain 21, later thread "backward" (102) takes B then A at chain 22.
fn inversion_log() -> LogBuilder {
    let mut b = LogBuilder::started("/nonexistent/inversion", &["./inversion"]);
    b.push(Module {
        module_id: 1,
        base: APP_BASE,
        build_id: vec![1, 2, 3, 4],
        path: "/nonexistent/inversion".into(),
        segments: vec![Segment {
            vaddr: 0,
            memsz: 0x10000,
        }],
    });
    b.chain(1, &[APP_BASE + 0x500]);
    b.chain(21, &[APP_BASE + 0x2100, APP_BASE + 0x1000]);
    b.chain(22, &[APP_BASE + 0x2200, APP_BASE + 0x1000]);
    b.thread(100, "main");
    b.thread(101, "forward");
    b.thread(102, "backward");
    b.mutex(1, 0x7000_0000_1000, 1);
    b.push(ObjectName {
        object_id: 1,
        name: "lock_a".into(),
    });
    b.mutex(2, 0x7000_0000_2000, 1);
    b.counters(1, 200, 0, 0);
    b.counters(2, 200, 0, 0);
    b.lock_order(1, 2, 101, 21);
    b.lock_order(2, 1, 102, 22);
    b
}

#[test]
fn two_lock_inversion_is_a_potential_deadlock_with_both_chains() {
    let mut b = inversion_log();
    b.end(1000 * MS, 0);
    let r = text(&b);
    assert!(
        r.contains("lock order: 2 edges, 1 potential deadlock (lock-order inversion)\n"),
        "{r}"
    );
    let section = &r[pos(&r, "POTENTIAL DEADLOCKS (1: lock-order inversion")..];
    let head = pos(
        section,
        "POTENTIAL DEADLOCK 1: lock-order inversion  mutex#1 → mutex#2 → mutex#1\n",
    );
    assert!(
        head < pos(
            section,
            "  mutex#1 \"lock_a\" @0x700000001000  created at inversion+0x500"
        )
    );
    let ab = pos(
        section,
        "  mutex#2 acquired while holding mutex#1 by thread 101 \"forward\" at:\n    #0 inversion+0x2100",
    );
    let ba = pos(
        section,
        "  mutex#1 acquired while holding mutex#2 by thread 102 \"backward\" at:\n    #0 inversion+0x2200",
    );
    assert!(head < ab && ab < ba);
    // Reported before the contention records, like real deadlocks.
    assert!(pos(&r, "POTENTIAL DEADLOCKS") < pos(&r, "LOCK CONTENTION RECORDS"));
    assert!(!r.contains("one thread"), "{r}");

    let j = json(&b);
    assert_eq!(j["lock_order"]["edges"], 2);
    assert_eq!(j["lock_order"]["potential_deadlocks"], 1);
    assert_eq!(j["lock_order"]["search"], "complete");
    let p = &j["potential_deadlocks"];
    assert_eq!(p.as_array().map(Vec::len), Some(1), "{p}");
    assert_eq!(p[0]["cycle"], serde_json::json!([1, 2]));
    assert_eq!(p[0]["deadlocked"], false);
    let e = &p[0]["edges"];
    assert_eq!(e[0]["from"], 1);
    assert_eq!(e[0]["to"], 2);
    assert_eq!(e[0]["tid"], 101);
    assert_eq!(e[0]["chain"], 21);
    assert_eq!(e[1]["from"], 2);
    assert_eq!(e[1]["to"], 1);
    assert_eq!(e[1]["tid"], 102);
    assert_eq!(e[1]["chain"], 22);
    assert_eq!(e[1]["witnesses"][0]["tid"], 102);
    // The edges' chains are in the log's chain table.
    assert!(j["chains"]["21"].is_array() && j["chains"]["22"].is_array());
}

/// Mutexes 1..=n, created by main, no chains.
fn mutexes(n: u64) -> LogBuilder {
    let mut b = LogBuilder::started("/nonexistent/app", &["./app"]);
    b.thread(100, "main");
    for id in 1..=n {
        b.mutex(id, 0x7000_0000_0000 + id * 0x100, 0);
    }
    b
}

#[test]
fn three_lock_cycle_is_one_potential_deadlock_with_three_edges() {
    let mut b = mutexes(3);
    b.lock_order(1, 2, 101, 31);
    b.lock_order(2, 3, 102, 32);
    b.lock_order(3, 1, 103, 33);
    let r = text(&b);
    assert!(
        r.contains(
            "POTENTIAL DEADLOCK 1: lock-order inversion  mutex#1 → mutex#2 → mutex#3 → mutex#1\n"
        ),
        "{r}"
    );
    assert!(!r.contains("POTENTIAL DEADLOCK 2"), "{r}");
    for (a, h, t) in [(2, 1, 101), (3, 2, 102), (1, 3, 103)] {
        assert!(
            r.contains(&format!(
                "  mutex#{a} acquired while holding mutex#{h} by thread {t} at:\n    (chain 3{} is not in the log)",
                t - 100
            )),
            "{r}"
        );
    }
    let j = json(&b);
    assert_eq!(
        j["potential_deadlocks"][0]["cycle"],
        serde_json::json!([1, 2, 3])
    );
    assert_eq!(j["potential_deadlocks"][0]["edges"][2]["from"], 3);
    assert_eq!(j["potential_deadlocks"][0]["edges"][2]["to"], 1);
}

#[test]
fn consistent_lock_order_is_no_potential_deadlock() {
    let mut b = mutexes(3);
    b.lock_order(1, 2, 101, 0);
    b.lock_order(1, 3, 102, 0);
    b.lock_order(2, 3, 103, 0);
    b.lock_order(2, 3, 101, 0);
    let r = text(&b);
    assert!(r.contains("lock order: 3 edges, no inversion\n"), "{r}");
    assert!(!r.to_lowercase().contains("potential deadlock"), "{r}");
    assert!(!r.contains("LOCK ORDER"), "{r}");
    let j = json(&b);
    assert_eq!(j["potential_deadlocks"], serde_json::json!([]));
    assert_eq!(j["lock_order"]["edges"], 3);
    assert_eq!(j["lock_order"]["search"], "complete");
}

#[test]
fn inversion_within_one_thread_is_still_reported() {
    let mut b = mutexes(2);
    b.lock_order(1, 2, 101, 0);
    b.lock_order(2, 1, 101, 0);
    // A recursive lock taken again is no inversion.
    b.lock_order(1, 1, 101, 0);
    let r = text(&b);
    assert!(
        r.contains("POTENTIAL DEADLOCK 1: lock-order inversion  mutex#1 → mutex#2 → mutex#1\n"),
        "{r}"
    );
    assert!(!r.contains("POTENTIAL DEADLOCK 2"), "{r}");
    assert!(
        r.contains("  (one thread, thread 101, took these locks in both orders: two threads running its code can deadlock)"),
        "{r}"
    );
}

#[test]
fn inversion_that_did_deadlock_points_to_the_deadlock() {
    let mut b = mutexes(4);
    b.lock_order(1, 2, 101, 0);
    b.lock_order(2, 1, 102, 0);
    b.lock_order(3, 4, 101, 0);
    b.lock_order(4, 3, 102, 0);
    b.push(Deadlock {
        ns: T0 + 500 * MS,
        detected_by: 102,
        cycle: vec![
            DeadlockEdge {
                tid: 101,
                object_id: 4,
                wait_chain: 0,
                holder_tid: 102,
            },
            DeadlockEdge {
                tid: 102,
                object_id: 3,
                wait_chain: 0,
                holder_tid: 101,
            },
        ],
    });
    let r = text(&b);
    assert!(r.contains("deadlocks: 1\n"), "{r}");
    assert!(
        r.contains("lock order: 4 edges, 2 potential deadlocks (lock-order inversions), 1 of them did deadlock\n"),
        "{r}"
    );
    assert!(
        r.contains("POTENTIAL DEADLOCK 2: lock-order inversion  mutex#3 → mutex#4 → mutex#3  (this one did deadlock: see DEADLOCKS)\n"),
        "{r}"
    );
    // Not reported twice: its edges are left to the DEADLOCKS section.
    assert!(!r.contains("mutex#4 acquired while holding mutex#3"), "{r}");
    assert!(r.contains("mutex#2 acquired while holding mutex#1"), "{r}");
    let j = json(&b);
    assert_eq!(j["potential_deadlocks"][0]["deadlocked"], false);
    assert_eq!(j["potential_deadlocks"][1]["deadlocked"], true);
    assert_eq!(
        j["potential_deadlocks"][1]["cycle"],
        serde_json::json!([3, 4])
    );
}

#[test]
fn witnesses_of_an_edge_are_distinct_and_bounded() {
    let mut b = mutexes(2);
    // The same thread and chain again adds no witness.
    b.lock_order(1, 2, 101, 7);
    for tid in 101..121 {
        b.lock_order(1, 2, tid, 7);
    }
    b.lock_order(2, 1, 200, 8);
    let j = json(&b);
    let e = &j["potential_deadlocks"][0]["edges"][0];
    assert_eq!(e["witnesses"].as_array().map(Vec::len), Some(8), "{e}");
    assert_eq!(e["more_witnesses"], 12, "{e}");
    let r = text(&b);
    assert!(
        r.contains("    also by thread 102 at (no call chain)\n"),
        "{r}"
    );
    assert!(
        r.contains("    ... and 12 more records of this edge not kept\n"),
        "{r}"
    );
}

/// A deterministic pseudo-random sequence (xorshift), so that the test is the same every run.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn large_random_lock_order_graph_is_searched_within_the_bounds() {
    let mut b = mutexes(300);
    let mut rng = 0x9e37_79b9_7f4a_7c15;
    for i in 0..2000 {
        let from = xorshift(&mut rng) % 300 + 1;
        let to = xorshift(&mut rng) % 300 + 1;
        b.lock_order(from, to, 101 + (i % 8) as u32, 0);
    }
    let started = Instant::now();
    let a = analyze_bytes(&b.bytes, Path::new("big.log")).expect("a log");
    let r = text_report(&a, &Options::default());
    let j = json_report(&a, &Options::default());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    let n = j["potential_deadlocks"].as_array().map_or(0, Vec::len);
    assert_eq!(n, 100, "a random graph this dense has more than 100 cycles");
    assert_eq!(j["lock_order"]["search"], "cycle_limit");
    assert!(
        r.contains("potential deadlocks (lock-order inversions); search stopped after 100 cycles, there may be more"),
        "{}",
        &r[..2000.min(r.len())]
    );
    assert!(r.contains("POTENTIAL DEADLOCK 100:"));
    assert!(!r.contains("POTENTIAL DEADLOCK 101:"));
}

#[test]
fn graph_with_exponentially_many_paths_stops_at_the_work_limit() {
    // 36 layers of 3 objects, every object of a layer before every object of the next, and edges
    // back from the last layer to the first: 3^35 paths, every cycle longer than the search
    // goes, so the search can only give up.
    let (layers, width) = (36u64, 3u64);
    let mut b = mutexes(layers * width);
    for l in 0..layers - 1 {
        for i in 0..width {
            for k in 0..width {
                b.lock_order(l * width + i + 1, (l + 1) * width + k + 1, 101, 0);
            }
        }
    }
    for i in 0..width {
        b.lock_order((layers - 1) * width + i + 1, 1, 102, 0);
    }
    let started = Instant::now();
    let a = analyze_bytes(&b.bytes, Path::new("layers.log")).expect("a log");
    let r = text_report(&a, &Options::default());
    let j = json_report(&a, &Options::default());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(j["lock_order"]["search"], "work_limit");
    assert_eq!(j["potential_deadlocks"], serde_json::json!([]));
    assert!(
        r.contains("\nLOCK ORDER: no inversion found\n  (search stopped at its work limit, there may be more cycles)\n"),
        "{r}"
    );
}

#[test]
fn cycle_longer_than_the_limit_is_not_reported_and_the_report_says_so() {
    let mut b = mutexes(40);
    for id in 1..=40 {
        b.lock_order(id, id % 40 + 1, 101, 0);
    }
    let r = text(&b);
    assert!(
        r.contains(
            "lock order: 40 edges, no inversion; cycles of more than 32 objects not searched for\n"
        ),
        "{r}"
    );
    assert!(r.contains("LOCK ORDER: no inversion found\n  (cycles of more than 32 objects were not searched for)"), "{r}");
    let j = json(&b);
    assert_eq!(j["lock_order"]["long_cycles_skipped"], true);
    assert_eq!(j["potential_deadlocks"], serde_json::json!([]));
}
