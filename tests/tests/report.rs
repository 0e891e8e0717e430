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

/// A thread of `thread_states.threads` by name.
fn state_named<'a>(log: &'a Value, name: &str) -> &'a Value {
    log["thread_states"]["threads"]
        .as_array()
        .expect("thread_states.threads")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no thread {name}: {}", log["thread_states"]))
}

/// The `idle_crowd` readers (unnamed threads) of `thread_states.threads`.
fn readers(log: &Value) -> Vec<&Value> {
    log["thread_states"]["threads"]
        .as_array()
        .expect("thread_states.threads")
        .iter()
        .filter(|t| t["name"] != "idle_crowd")
        .collect()
}

/// The THREAD STATES section of a text report.
fn states_section(text: &str) -> &str {
    text.split("\nTHREAD STATES (")
        .nth(1)
        .unwrap_or_else(|| panic!("no THREAD STATES:\n{text}"))
}

/// The THREAD STATES row of thread `tid` in the text report, by column: life, running,
/// runnable, tracked, other, slices, switches, longest, at end (fixed widths), then the thread.
fn state_row(text: &str, tid: u64) -> Vec<String> {
    const WIDTHS: [usize; 9] = [9, 9, 9, 9, 9, 7, 11, 9, 7];
    let section = states_section(text);
    for line in section.lines().skip(2) {
        let chars: Vec<char> = line.chars().collect();
        let mut at = 2;
        let mut cols = Vec::new();
        for w in WIDTHS {
            let end = (at + w).min(chars.len());
            cols.push(
                chars[at.min(end)..end]
                    .iter()
                    .collect::<String>()
                    .trim()
                    .to_string(),
            );
            at += w + 1;
        }
        let rest: String = chars[(at + 1).min(chars.len())..].iter().collect();
        let thread = rest.split([' ', ':']).next().unwrap_or("");
        if thread == tid.to_string() {
            cols.push(rest);
            return cols;
        }
    }
    panic!("no row of {tid}:\n{section}")
}

/// Readers left blocked in `read` as the process ends, and main ending: each thread's state at
/// the end is said, with its timeslices, in the JSON and in the text table.
#[test]
fn each_threads_state_at_the_end_and_its_timeslices_are_in_the_table() {
    let run = Launch::fixture("idle_crowd")
        .arg("4")
        .arg("1")
        .arg("leave")
        .run();
    run.assert_success();
    let a = run.analyze();
    let log = a.log(0).0;
    let main = state_named(log, "idle_crowd");
    assert_eq!(main["state_at_end"], "ended", "{main}");
    assert_eq!(u(&main["pid"]), u64::from(run.pid), "{main}");
    assert!(main["state_at_end_blocked_in"].is_null(), "{main}");
    // It computed a second of CPU: more than one timeslice.
    assert!(u(&main["timeslices"]) >= 2, "{main}");
    let readers = readers(log);
    assert_eq!(readers.len(), 4, "{}", log["thread_states"]);
    for r in &readers {
        assert_eq!(r["state_at_end"], "blocked", "{r}");
        let call = &r["state_at_end_blocked_in"];
        assert_eq!(call["name"], "read", "{r}");
        assert!(
            call["what"].as_str().unwrap_or("").starts_with("pipe:["),
            "{r}"
        );
        // Blocked since the sampler's first look at it, long before the end.
        let since = u(&r["state_at_end_since_ns"]);
        assert!(since + 500_000_000 < u(&log["run"]["duration_ns"]), "{r}");
        assert!(r["state_at_end_object_id"].is_null(), "{r}");
        assert_eq!(u(&r["pid"]), u64::from(run.pid), "{r}");
    }
    // The text: `slices` and `at end` columns, as the JSON has them.
    assert!(
        a.text
            .contains(&format!("THREAD STATES (process {}, ", run.pid)),
        "{}",
        a.text
    );
    for t in readers.iter().copied().chain([main]) {
        let tid = u(&t["tid"]);
        let cols = state_row(&a.text, tid);
        assert_eq!(cols[5], u(&t["timeslices"]).to_string(), "{cols:?}");
        let at_end = t["state_at_end"].as_str().unwrap();
        assert!(cols.iter().any(|c| c == at_end), "{at_end}: {cols:?}");
    }
    // Readable in 100 columns: each row's figures and tid fit, the thread's name and what it
    // waited on follow.
    let section = states_section(&a.text);
    for t in readers.iter().copied().chain([main]) {
        let tid = u(&t["tid"]).to_string();
        let line = section
            .lines()
            .find(|l| l.contains(&format!("  {tid}")))
            .unwrap();
        let upto_tid = line.find(&format!("  {tid}")).unwrap() + 2 + tid.len();
        assert!(line[..upto_tid].chars().count() <= 100, "{line}");
    }
}

/// While the program runs: main computing is `running`, the readers `blocked`; in a deadlock,
/// each thread is in a `tracked_wait` on the mutex the cycle names.
#[test]
fn a_running_program_shows_running_blocked_and_tracked_threads() {
    let running = Launch::fixture("idle_crowd").arg("4").arg("5").spawn();
    // Names come later in the log: main is the thread whose tid is the pid.
    let pid = u64::from(running.pid());
    running.poll_log("main running and 4 readers blocked", |log| {
        let threads = log.0["thread_states"]["threads"].as_array();
        threads.is_some_and(|ts| {
            ts.iter()
                .any(|t| t["tid"] == pid && t["state_at_end"] == "running")
                && ts
                    .iter()
                    .filter(|t| t["tid"] != pid && t["state_at_end"] == "blocked")
                    .count()
                    == 4
        })
    });
    // The log as the kill left it: its last samples saw the same (text and JSON alike).
    let a = running.kill().analyze();
    let cols = state_row(&a.text, pid);
    assert_eq!(cols[8], "running", "{cols:?}");

    let running = Launch::fixture("abba").spawn();
    running.wait_for_stdout("abba: armed");
    running.poll_log("both abba threads in a tracked wait", |log| {
        !log.deadlocks().is_empty()
            && log.0["thread_states"]["threads"]
                .as_array()
                .is_some_and(|ts| {
                    ts.iter()
                        .filter(|t| {
                            t["name"].as_str().unwrap_or("").starts_with("abba-")
                                && t["state_at_end"] == "tracked_wait"
                        })
                        .count()
                        == 2
                })
    });
    let a = running.kill().analyze();
    let log = a.log(0);
    let cycle = log.deadlocks()[0]["cycle"].as_array().unwrap().clone();
    for step in &cycle {
        let t = log.0["thread_states"]["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"] == step["tid"])
            .unwrap_or_else(|| panic!("no states of {step}"));
        assert_eq!(t["state_at_end"], "tracked_wait", "{t}");
        assert_eq!(t["state_at_end_object_id"], step["object_id"], "{t}");
        let cols = state_row(&a.text, u(&t["tid"]));
        assert_eq!(cols[8], "tracked", "{cols:?}");
    }
}

/// A thread sleeping in a raw `futex` call on a pthread mutex's lock word, outside any pthread
/// call: the sampler sees an untracked futex word, and the report names the mutex it lies in,
/// in the resources, the thread's row, lost parallelism and the JSON.
#[test]
fn an_untracked_futex_wait_on_a_mutexs_word_names_the_mutex() {
    let running = Launch::fixture("futex_on_mutex").spawn();
    running.wait_for_stdout("futex_on_mutex: armed");
    let line = waitshim_tests::line_of("futex_on_mutex.c", "creation-site");
    // The log shows the wait on the mutex (the sampler's look, the object's creation).
    running.poll_log("the futexer's wait named by the mutex", |log| {
        let objects = log.objects_created_at("futex_on_mutex.c", line);
        let on_it = |list: &Value| {
            list.as_array().is_some_and(|l| {
                l.iter()
                    .any(|r| r["futex_object_id"] == objects[0]["object_id"])
            })
        };
        let states = &log.0["thread_states"];
        objects.len() == 1 && on_it(&states["resources"])
    });
    std::fs::write(running.dir().join("go"), b"x").expect("write the FIFO");
    let run = running.wait();
    run.assert_success();
    assert_eq!(
        run.stdout_text(),
        "futex_on_mutex: armed\nfutex_on_mutex: done\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let mutex = log.object_created_at("futex_on_mutex.c", line);
    let id = &mutex["object_id"];
    let addr = mutex["addr"].as_str().expect("addr").to_string();
    let states = &log.0["thread_states"];
    let resource = states["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["futex_object_id"] == *id)
        .unwrap_or_else(|| panic!("no resource on the mutex: {states}"));
    assert_eq!(resource["name"], "futex", "{resource}");
    assert_eq!(
        resource["what"],
        format!("untracked futex word {addr}"),
        "{resource}"
    );
    assert_eq!(resource["threads"], 1, "{resource}");
    let futexer = state_named(log.0, "futexer");
    assert_eq!(
        futexer["blocked_in"][0]["futex_object_id"], *id,
        "{futexer}"
    );
    assert_eq!(futexer["tracked_wait_ns"], 0, "{futexer}");
    // The shim saw no wait on the mutex itself.
    assert!(log.records_on(mutex).is_empty(), "{mutex}");
    // Lost parallelism names it too (main blocked on the FIFO meanwhile, the futexer on the
    // word: the CPUs they left went unused; both asleep, the sampler writes no look until
    // main wakes, and the interval they ended in counts what they were seen waiting on), in
    // the summary's line as well.
    let by = states["lost_parallelism"]["by"].as_array().unwrap();
    let lost = by
        .iter()
        .find(|b| b["futex_object_id"] == *id)
        .unwrap_or_else(|| panic!("no lost parallelism on the mutex: {states}\n{}", a.text));
    assert_eq!(lost["syscall"], 202, "{lost}");
    assert!(lost["object_id"].is_null(), "{lost}");
    // The text: the resource and the thread's row.
    let named = format!(
        "futex on mutex#{id} m @{addr} created at futex_on_mutex.c:{line} (main), outside the \
         shim's calls"
    );
    assert!(
        one_line(&a.text).contains(&format!("% on {named}")),
        "{named}\n{}",
        a.text
    );
    let section = states_section(&a.text);
    assert!(
        section.contains(&format!("  {named}\n")),
        "{named}\n{section}"
    );
    assert!(
        section.contains(&format!("\"futexer\": {named} ")),
        "{named}\n{section}"
    );
    assert!(
        !a.text.contains(&format!("untracked futex word {addr}")),
        "{}",
        a.text
    );
}
