//! What the report says it covers: the flight recorder's kept waits (how far back they really
//! go, not the window asked for), the threads' states at their end, and untracked futex waits on
//! the words of tracked objects.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use waitshim_tests::{Analysis, Launch, Run};

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The analyzer's own duration format (`report::fmt_ns`).
fn fmt_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", f / 1e6)
    } else {
        format!("{:.2} s", f / 1e9)
    }
}

/// `text` with each run of white space made one space (the report wraps long lines).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a log's `WaitEvents` records hold, read with `waitshim-format` (not the analyzer): per
/// thread, (flight-recorder records with waits, dropped so far, earliest wait begin).
fn ring_threads(log: &Path) -> BTreeMap<u32, (u64, u64, u64)> {
    let file = std::fs::File::open(log).unwrap();
    let mut reader = waitshim_format::FrameReader::new(std::io::BufReader::new(file)).unwrap();
    let mut out: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
    while let Some(item) = reader.next_item().expect("read log") {
        if let waitshim_format::Item::Record {
            record: waitshim_format::Record::WaitEvents(e),
            ..
        } = item
        {
            let t = out.entry(e.tid).or_insert((0, 0, u64::MAX));
            t.1 = t.1.max(e.dropped);
            let waits = e.waits().expect("packed waits");
            if e.keep_ns > 0 && !waits.is_empty() {
                t.0 += 1;
            }
            for w in waits {
                t.2 = t.2.min(w.begin_ns);
            }
        }
    }
    out
}

/// `bench_contended PAIRS 8` under the flight recorder asked for 30 s.
fn contended_ring(pairs: u64) -> (Run, Analysis) {
    let run = Launch::fixture("bench_contended")
        .arg(pairs.to_string())
        .arg("8")
        .env("WAITSHIM_EVENTS", "ring:30s")
        .run();
    run.assert_success();
    let a = run.analyze();
    (run, a)
}

/// Under load each thread's 64 KB ring holds far less than the 30 s asked for: the report says
/// how far back the kept waits go, over all threads and for the thread whose full ring goes back
/// the least, in the text and the JSON alike, as the log's own records give it.
#[test]
fn the_flight_recorder_says_how_far_back_its_kept_waits_go() {
    // A ring holds about 7000 waits; how many of a thread's waits block swings with the
    // scheduling, so a run whose rings did not fill is tried again with more work.
    let mut pairs = 3_000_000;
    let (run, a) = loop {
        let (run, a) = contended_ring(pairs);
        let e = &a.log(0).0["per_wait_events"];
        if u(&e["rings_full"]) > 0 || pairs >= 24_000_000 {
            break (run, a);
        }
        pairs *= 2;
    };
    let log = a.log(0);
    let e = &log.0["per_wait_events"];
    assert_eq!(u(&e["window_ns"]), 30_000_000_000, "{e}");
    assert_eq!(u(&e["ring_bytes"]), 65_536, "{e}");
    assert!(
        u(&e["rings_full"]) >= 1,
        "no ring filled at {pairs} pairs: {e}"
    );
    assert!(u(&e["dropped"]) > 0, "{e}");
    let covers = u(&e["covers_ns"]);
    let shortest = u(&e["shortest_thread_covers_ns"]);
    let tid = u(&e["shortest_thread_tid"]);
    let duration = u(&log.run()["duration_ns"]);
    assert!(covers < 30_000_000_000 && covers <= duration, "{e}");
    assert!(shortest > 0 && shortest <= covers, "{e}");

    // The log's own records: the thread named has a full ring (64 records with waits, and
    // drops), and the distances the report gives from the log's end are those of the earliest
    // waits kept (the run is far shorter than the window: every wait written is kept).
    let threads = ring_threads(run.single_log());
    let (records, dropped, first) = threads[&(tid as u32)];
    assert!(
        records >= 64 && dropped > 0,
        "thread {tid}: {records} records, {dropped} dropped"
    );
    let earliest = threads.values().map(|t| t.2).min().unwrap();
    assert_eq!(first - earliest, covers - shortest, "{e}");
    let full: Vec<u64> = threads
        .iter()
        .filter(|(_, t)| t.0 >= 64 && t.1 > 0)
        .map(|(_, t)| t.2)
        .collect();
    assert_eq!(full.len() as u64, u(&e["rings_full"]), "{e}");
    assert_eq!(
        full.iter().max(),
        Some(&first),
        "the latest-starting full ring: {e}"
    );

    // The text says the same.
    let text = one_line(&a.text);
    let said = format!(
        "flight recorder: the last 30.00 s asked, 64 KB per thread: the waits kept go back {} \
         before the log's end;",
        fmt_ns(covers)
    );
    assert!(text.contains(&said), "{said}\n{}", a.text);
    let said = format!(
        "thread {tid}'s going back the least: {} (every thread's waits are complete for the last \
         {} only)",
        fmt_ns(shortest),
        fmt_ns(shortest)
    );
    assert!(text.contains(&said), "{said}\n{}", a.text);
    assert!(
        !text.contains("flight recorder: the last 30.00 s;"),
        "{}",
        a.text
    );
}

/// With every wait written (`all`), nothing is said of coverage, and the JSON's coverage fields
/// are null.
#[test]
fn with_every_wait_written_nothing_is_said_of_coverage() {
    let run = Launch::fixture("bench_contended")
        .arg("200000")
        .arg("4")
        .env("WAITSHIM_EVENTS", "all")
        .run();
    run.assert_success();
    let a = run.analyze();
    let e = &a.log(0).0["per_wait_events"];
    assert!(u(&e["waits"]) > 0, "{e}");
    for k in [
        "window_ns",
        "ring_bytes",
        "covers_ns",
        "rings_full",
        "shortest_thread_covers_ns",
        "shortest_thread_tid",
        "coverage_waits_not_read",
    ] {
        assert!(e[k].is_null(), "{k}: {e}");
    }
    assert!(a.text.contains("WHO WOKE WHOM"), "{}", a.text);
    assert!(!a.text.contains("flight recorder"), "{}", a.text);
    assert!(!a.text.contains("go back"), "{}", a.text);
}
