//! Per-wait events (`WAITSHIM_EVENTS`): each blocked wait with the thread that ended it, in the
//! report, in the exports, and under the flight recorder.

use std::path::{Path, PathBuf};

use serde_json::Value;
use waitshim_tests::{perfetto_decode, Analysis, Launch, LogReport, Run};

fn handover(events: Option<&str>, args: &[&str]) -> Run {
    handover_with(events, None, args)
}

/// `handover` with `WAITSHIM_EVENTS=events` and the policy file `policy`, as given; its stderr
/// is kept.
fn handover_with(events: Option<&str>, policy: Option<&str>, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Launch::fixture("handover").loud();
    for a in args {
        l = l.arg(a);
    }
    if let Some(e) = events {
        l = l.env("WAITSHIM_EVENTS", e);
    }
    if let Some(json) = policy {
        let path = dir.path().join("policy.json");
        std::fs::write(&path, json).unwrap();
        l = l.env("WAITSHIM_POLICY", path);
    }
    let run = l.run();
    run.assert_success();
    assert_eq!(
        run.stdout_text().lines().count(),
        1,
        "{}",
        run.stdout_text()
    );
    run
}

/// A policy that collects what the built-in one does, with its `events` setting.
fn events_policy(events: &str) -> String {
    format!(r#"{{"events": "{events}", "rules": [{{"actions": ["count", "waiter_chain"]}}]}}"#)
}

fn tid_named(log: &LogReport, name: &str) -> u64 {
    let found: Vec<u64> = log
        .threads()
        .iter()
        .filter(|t| t["name"] == name)
        .filter_map(|t| t["tid"].as_u64())
        .collect();
    assert_eq!(found.len(), 1, "threads named {name}: {:?}", log.threads());
    found[0]
}

/// The threads that woke waiters on the objects of `kind`, with how many waits each.
fn wakers(log: &LogReport, kind: &str) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = log.0["per_wait_events"]["woken_by"]
        .as_array()
        .expect("per_wait_events.woken_by")
        .iter()
        .filter(|w| log.object(&w["object_id"])["kind"] == kind)
        .map(|w| (w["tid"].as_u64().unwrap(), w["waits"].as_u64().unwrap()))
        .collect();
    out.sort_unstable();
    out
}

fn export(log: &Path, format: &str) -> PathBuf {
    waitshim_tests::export_beside(log, format, &format!("events.{format}"))
}

#[test]
fn each_hand_over_names_the_thread_that_woke_the_waiter() {
    let run = handover(None, &[]);
    let a = run.analyze();
    let log = a.log(0);
    let holder = tid_named(&log, "holder");
    let ringer = tid_named(&log, "ringer");
    let giver = tid_named(&log, "giver");
    // holder unlocks the mutex `blocked` sleeps on; ringer signals the condition variable
    // `sleeper` waits on; giver posts the semaphore `taker` waits on.
    assert_eq!(wakers(&log, "mutex"), vec![(holder, 1)], "{}", a.text);
    assert_eq!(wakers(&log, "cond"), vec![(ringer, 1)], "{}", a.text);
    assert_eq!(wakers(&log, "semaphore"), vec![(giver, 1)], "{}", a.text);
    assert!(
        a.text
            .contains(&format!("woken by thread {ringer} \"ringer\" 1 time")),
        "{}",
        a.text
    );

    // The Chrome trace: the wait of `blocked` on the mutex says who woke it, with a flow.
    let chrome: Value =
        serde_json::from_slice(&std::fs::read(export(run.single_log(), "chrome")).unwrap())
            .unwrap();
    let events = chrome["traceEvents"].as_array().expect("traceEvents");
    let blocked = tid_named(&log, "blocked");
    let wait = events
        .iter()
        .find(|e| e["cat"] == "wait" && e["tid"] == blocked && e["name"] == "Wait: lock")
        .expect("the wait of `blocked`");
    assert_eq!(
        wait["args"]["woken_by"],
        format!("thread {holder} \"holder\""),
        "{wait}"
    );
    assert_eq!(wait["args"]["ended"], "acquired");
    let starts = events.iter().filter(|e| e["ph"] == "s").count();
    let ends = events.iter().filter(|e| e["ph"] == "f").count();
    assert!(
        starts >= 3 && starts == ends,
        "{starts} flow starts, {ends} ends"
    );
    let wait_end = wait["ts"].as_f64().unwrap() + wait["dur"].as_f64().unwrap();
    assert!(
        events.iter().any(|e| e["ph"] == "s"
            && e["tid"] == holder
            && (e["ts"].as_f64().unwrap() - wait_end).abs() < 1.0),
        "a flow from the holder at the end of the wait"
    );
}

#[test]
fn the_perfetto_trace_has_a_flow_from_each_waker_to_the_woken_thread() {
    let run = handover(None, &[]);
    let a = run.analyze();
    let log = a.log(0);
    let text = perfetto_decode(&export(run.single_log(), "perfetto"));
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())),
        "unknown fields in the trace:\n{text}"
    );
    let mut begun: Vec<&str> = Vec::new();
    let mut ended: Vec<&str> = Vec::new();
    for l in text.lines().map(str::trim) {
        if let Some(id) = l.strip_prefix("flow_ids: ") {
            begun.push(id);
        }
        if let Some(id) = l.strip_prefix("terminating_flow_ids: ") {
            ended.push(id);
        }
    }
    begun.sort_unstable();
    ended.sort_unstable();
    assert_eq!(begun, ended, "each flow begins once and ends once");
    let woken = log.0["per_wait_events"]["woken_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["waits"].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(
        begun.len() as u64,
        woken,
        "one flow per wait another thread ended"
    );
    // The waker's instant is on the holder's track, the woken one on the waiter's: both names
    // are interned once.
    assert_eq!(text.matches("name: \"Wake\"").count(), 1, "{text}");
    assert_eq!(text.matches("name: \"Woken\"").count(), 1, "{text}");
    let holder = tid_named(&log, "holder");
    assert!(
        text.contains(&format!("thread {holder} \\\"holder\\\"")),
        "the holder named as waker:\n{text}"
    );
}

fn count_fields(log: &LogReport) -> Vec<(String, u64, u64, u64)> {
    let mut v: Vec<(String, u64, u64, u64)> = log
        .objects()
        .iter()
        .filter(|o| o["kind"] != "thread")
        .map(|o| {
            let c = &o["counters"];
            (
                o["kind"].as_str().unwrap_or("").to_string(),
                c["acquisitions"].as_u64().unwrap_or(0),
                c["contended"].as_u64().unwrap_or(0),
                c["max_waiters"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn events_off_writes_none_and_the_counters_stay_the_same() {
    let on = handover(None, &[]);
    let off = handover(Some("off"), &[]);
    let (a_on, a_off): (Analysis, Analysis) = (on.analyze(), off.analyze());
    let (l_on, l_off) = (a_on.log(0), a_off.log(0));
    assert!(l_on.0["per_wait_events"]["waits"].as_u64().unwrap() >= 3);
    assert_eq!(l_off.0["per_wait_events"]["records"], 0);
    assert!(!a_off.text.contains("WHO WOKE WHOM"), "{}", a_off.text);
    assert_eq!(count_fields(&l_on), count_fields(&l_off));
    assert_eq!(l_on.hwm(), l_off.hwm());
}

/// The chrome trace's waits of the thread named `name`: (ended, woken_by) of each.
fn chrome_waits_of(chrome: &Value, log: &LogReport, name: &str) -> Vec<(String, String)> {
    let tid = tid_named(log, name);
    chrome["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["cat"] == "wait" && e["tid"] == tid)
        .map(|e| {
            let arg = |k: &str| e["args"][k].as_str().unwrap_or("").to_string();
            (arg("ended"), arg("woken_by"))
        })
        .collect()
}

#[test]
fn a_thread_that_wakes_a_raw_futex_is_named_as_the_sleepers_waker() {
    // `dozer` sleeps in syscall(SYS_futex, FUTEX_WAIT) on word `bed`; `alarm` sets the word and
    // wakes it with FUTEX_WAKE.
    let run = handover(None, &[]);
    let a = run.analyze();
    let log = a.log(0);
    let alarm = tid_named(&log, "alarm");
    assert_eq!(wakers(&log, "futex"), vec![(alarm, 1)], "{}", a.text);
    let chrome: Value =
        serde_json::from_slice(&std::fs::read(export(run.single_log(), "chrome")).unwrap())
            .unwrap();
    assert_eq!(
        chrome_waits_of(&chrome, &log, "dozer"),
        vec![("signalled".to_string(), format!("thread {alarm} \"alarm\""))]
    );
}

#[test]
fn the_last_thread_to_reach_a_barrier_is_named_as_the_waker_of_those_it_releases() {
    // `early-0` and `early-1` sleep at barrier `meet` (of 3) until `closer` arrives.
    let run = handover(None, &[]);
    let a = run.analyze();
    let log = a.log(0);
    let closer = tid_named(&log, "closer");
    assert_eq!(wakers(&log, "barrier"), vec![(closer, 2)], "{}", a.text);
    let chrome: Value =
        serde_json::from_slice(&std::fs::read(export(run.single_log(), "chrome")).unwrap())
            .unwrap();
    for early in ["early-0", "early-1"] {
        assert_eq!(
            chrome_waits_of(&chrome, &log, early),
            vec![(
                "released".to_string(),
                format!("thread {closer} \"closer\"")
            )],
            "{early}"
        );
    }
    assert!(
        !run.stderr_text().contains("was not the serial thread"),
        "{}",
        run.stderr_text()
    );
}

#[test]
fn a_policy_file_can_turn_the_events_off() {
    let run = handover_with(None, Some(&events_policy("off")), &[]);
    let a = run.analyze();
    let log = a.log(0);
    assert_eq!(log.0["per_wait_events"]["records"], 0);
    assert!(!a.text.contains("WHO WOKE WHOM"), "{}", a.text);
    // The waits are still counted.
    let gate = log
        .objects()
        .into_iter()
        .find(|o| o["kind"] == "mutex" && o["global"]["name"] == "gate")
        .expect("mutex gate");
    assert!(
        gate["counters"]["contended"].as_u64().unwrap() >= 1,
        "{gate}"
    );
    assert!(
        !run.stderr_text().contains("events"),
        "{}",
        run.stderr_text()
    );
}

#[test]
fn waitshim_events_in_the_environment_wins_over_the_policy_file() {
    let run = handover_with(Some("all"), Some(&events_policy("off")), &[]);
    let err = run.stderr_text();
    assert_eq!(
        err.matches("WAITSHIM_EVENTS=all wins over the policy's \"events\": \"off\"")
            .count(),
        1,
        "{err}"
    );
    let a = run.analyze();
    let holder = tid_named(&a.log(0), "holder");
    assert_eq!(wakers(&a.log(0), "mutex"), vec![(holder, 1)], "{}", a.text);
}

#[test]
fn a_policy_file_can_ask_for_the_flight_recorder() {
    // 12 rounds of at least 250 ms each; the recorder keeps the last second's.
    let run = handover_with(None, Some(&events_policy("ring:1s")), &["12", "250"]);
    let a = run.analyze();
    let e = &a.log(0).0["per_wait_events"];
    assert_eq!(e["window_ns"], 1_000_000_000u64, "{e}");
    let (kept, dropped) = (e["kept"].as_u64().unwrap(), e["dropped"].as_u64().unwrap());
    assert!(dropped >= 6, "dropped {dropped}, kept {kept}: {e}");
    assert!(kept < 12, "kept {kept}: {e}");
}

#[test]
fn a_bad_events_value_is_said_once_and_the_program_runs_on() {
    let run = Launch::fixture("handover")
        .env("WAITSHIM_EVENTS", "sometimes")
        .loud()
        .run();
    run.assert_success();
    let err = run.stderr_text();
    assert_eq!(
        err.matches("WAITSHIM_EVENTS").count(),
        1,
        "one line about it: {err}"
    );
    assert!(err.contains("\"sometimes\""), "{err}");
    // All events, the default.
    let a = run.analyze();
    assert!(a.log(0).0["per_wait_events"]["waits"].as_u64().unwrap() >= 3);
}

#[test]
fn the_flight_recorder_keeps_the_last_second_and_says_how_many_were_dropped() {
    // 12 rounds of at least 250 ms each: 3 s of hand-overs, one wait of a new `pong` thread
    // (and a join of it) per round.
    let run = handover(Some("ring:1s"), &["12", "250"]);
    let a = run.analyze();
    let log = a.log(0);
    let e = &log.0["per_wait_events"];
    assert_eq!(e["window_ns"], 1_000_000_000u64, "{e}");
    let (kept, dropped) = (e["kept"].as_u64().unwrap(), e["dropped"].as_u64().unwrap());
    let pong_waits = |chrome: &Value| -> Vec<(f64, f64)> {
        let evs = chrome["traceEvents"].as_array().unwrap();
        let pongs: Vec<&Value> = evs
            .iter()
            .filter(|e| {
                e["ph"] == "M"
                    && e["args"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .contains("\"pong\"")
            })
            .map(|e| &e["tid"])
            .collect();
        evs.iter()
            .filter(|e| {
                e["cat"] == "wait" && e["name"] == "Wait: lock" && pongs.contains(&&e["tid"])
            })
            .map(|e| {
                let ts = e["ts"].as_f64().unwrap();
                (ts, ts + e["dur"].as_f64().unwrap())
            })
            .collect()
    };
    let chrome: Value =
        serde_json::from_slice(&std::fs::read(export(run.single_log(), "chrome")).unwrap())
            .unwrap();
    let waits = pong_waits(&chrome);
    let end = chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap_or(0.0))
        .fold(0.0, f64::max);
    // Only the tail: the rounds of the last second (4 or so of 12), each ending within it.
    assert!(
        !waits.is_empty() && waits.len() <= 6,
        "{} pong waits drawn: {waits:?}",
        waits.len()
    );
    for (_, w_end) in &waits {
        assert!(
            end - w_end <= 1_100_000.0,
            "a wait {} µs before the end",
            end - w_end
        );
    }
    assert!(dropped >= 6, "dropped {dropped}, kept {kept}: {e}");
    assert!(
        kept < 12,
        "kept {kept}: no more than a second's rounds and joins: {e}"
    );
    assert!(
        a.text.contains(&format!("{dropped} dropped")),
        "the report says how many were dropped:\n{}",
        a.text
    );

    // Without the flight recorder, every round is there.
    let all = handover(None, &["12", "250"]);
    let chrome: Value =
        serde_json::from_slice(&std::fs::read(export(all.single_log(), "chrome")).unwrap())
            .unwrap();
    assert_eq!(pong_waits(&chrome).len(), 12);
    let a = all.analyze();
    assert_eq!(a.log(0).0["per_wait_events"]["dropped"], 0);
}

/// Wait times as a distribution: `fixtures/wait_lengths.c` makes 20 waits of at least 2 ms on
/// one mutex (each hold timed from the moment the waiter sleeps on it) and then 3 of at least
/// 150 ms. Half of them took at most the short ones' bucket, 90 % and 99 % reach the long ones,
/// and no percentile exceeds the longest wait.
#[test]
fn an_objects_wait_times_are_told_as_percentiles_of_its_events() {
    const MS: u64 = 1_000_000;
    let run = Launch::fixture("wait_lengths").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "wait_lengths: 23 handoffs\n");
    let a = run.analyze();
    let log = a.log(0);
    let line = waitshim_tests::line_of("wait_lengths.c", "creation-site");
    let w = &log.object_created_at("wait_lengths.c", line)["wait_times"];
    assert_eq!(w["events"], 23, "{w}");
    let ns = |k: &str| w[k].as_u64().unwrap_or_else(|| panic!("{k} in {w}"));
    let max = ns("max_ns");
    assert!(max >= 150 * MS, "{w}");
    let p50 = ns("p50_at_most_ns");
    assert!((2 * MS..150 * MS).contains(&p50), "{w}");
    assert!(ns("p90_at_most_ns") >= 150 * MS, "{w}");
    assert_eq!(ns("p99_at_most_ns"), max, "{w}");
    let buckets = w["buckets"].as_array().expect("buckets");
    let mut total = 0;
    for b in buckets {
        assert!(b["from_ns"].as_u64() <= b["to_ns"].as_u64(), "{b}");
        total += b["count"].as_u64().unwrap();
    }
    assert_eq!(total, 23, "{w}");
    assert!(
        a.text
            .lines()
            .any(|l| l.contains("wait times: p50 <= ") && l.ends_with("(23 events, bucket bounds)")),
        "{}",
        a.text
    );
}
