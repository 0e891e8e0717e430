//! What held the program back: the run's critical path, not its waiting (BOTTLENECKS, JSON
//! `critical_path`), on programs whose bottleneck is known from their design.

use serde_json::Value;
use waitshim_tests::{run_both, LogReport};

/// The object id of the global variable `name`.
fn id_of(log: &LogReport<'_>, name: &str) -> u64 {
    log.objects()
        .into_iter()
        .find(|o| o["global"]["name"] == name)
        .and_then(|o| o["object_id"].as_u64())
        .unwrap_or_else(|| panic!("no object {name}"))
}

fn path<'a>(log: &LogReport<'a>) -> &'a Value {
    let p = &log.0["critical_path"];
    assert!(p.is_object(), "no critical path: {p}");
    p
}

/// The path's causes, most first: (cause, object_id, tid, ns).
fn causes(p: &Value) -> Vec<(String, Option<u64>, Option<u64>, u64)> {
    p["by"]
        .as_array()
        .expect("by")
        .iter()
        .map(|c| {
            (
                c["cause"].as_str().unwrap_or("").to_string(),
                c["object_id"].as_u64(),
                c["tid"].as_u64(),
                c["ns"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The section's text: from BOTTLENECKS to the next section.
fn section(text: &str) -> &str {
    let start = text.find("\nBOTTLENECKS").expect("a BOTTLENECKS section");
    let rest = &text[start + 1..];
    let end = rest.find("\n\n").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn a_server_whose_workers_are_serialised_on_a_table_lock_is_told_so_and_its_idle_threads_are_idle()
{
    let run = run_both("server_shape", &["120"]);
    let a = run.analyze();
    let log = a.log(0);
    let table = id_of(&log, "table_lock");
    let p = path(&log);
    let length = p["length_ns"].as_u64().expect("length");
    let duration = log.run()["duration_ns"].as_u64().expect("duration");
    assert!(
        length * 100 >= duration * 90,
        "the path covers the run: {length} of {duration}"
    );
    let by = causes(p);
    assert_eq!((by[0].0.as_str(), by[0].1), ("held", Some(table)), "{by:?}");
    assert!(
        by[0].3 * 2 >= length,
        "table_lock is most of the path: {by:?}"
    );
    let text = section(&a.text);
    let first = text.lines().nth(1).unwrap_or("");
    assert!(
        first.contains("table_lock") && first.starts_with("  1."),
        "{text}"
    );
    // The logger's and the pool's condition variables, and the listener's accept: idle.
    let idle = text.lines().find(|l| l.contains("idle:")).unwrap_or("");
    assert!(
        idle.contains("cond#") && idle.contains("accept on socket:"),
        "{text}"
    );
    assert!(!idle.contains("table_lock"), "{text}");
}

#[test]
fn a_pipeline_limited_by_its_producer_names_the_producer_not_the_queue() {
    let run = run_both("pipeline", &["150"]);
    let a = run.analyze();
    let log = a.log(0);
    let producer = log
        .threads()
        .iter()
        .find(|t| t["name"] == "producer")
        .and_then(|t| t["tid"].as_u64())
        .expect("the producer");
    let p = path(&log);
    let length = p["length_ns"].as_u64().expect("length");
    let by = causes(p);
    // Its work, and its readiness when the machine's CPUs were taken: most of the path.
    let producers: u64 = by
        .iter()
        .filter(|c| c.2 == Some(producer))
        .map(|c| c.3)
        .sum();
    assert!(producers * 10 >= length * 7, "the producer's share: {by:?}");
    assert_eq!(by[0].2, Some(producer), "{by:?}");
    // The queue (its lock, its condition variables) is not what the run waited for.
    let queue = [
        id_of(&log, "queue_lock"),
        id_of(&log, "not_empty"),
        id_of(&log, "not_full"),
    ];
    for c in &by {
        if let Some(o) = c.1.filter(|o| queue.contains(o)) {
            assert!(c.3 * 50 < length, "object {o} on the path: {by:?}");
        }
    }
    assert!(section(&a.text).contains("\"producer\""), "{}", a.text);
}

#[test]
fn the_lock_that_limits_the_run_comes_first_though_another_had_the_highest_highwater() {
    let run = run_both("side_burst", &["100"]);
    let a = run.analyze();
    let log = a.log(0);
    let (burst, work) = (id_of(&log, "burst_lock"), id_of(&log, "work_lock"));
    assert_eq!(
        log.0["highwater"]["object_id"], burst,
        "{}",
        log.0["highwater"]
    );
    let p = path(&log);
    let by = causes(p);
    assert_eq!((by[0].0.as_str(), by[0].1), ("held", Some(work)), "{by:?}");
    assert!(
        by.iter().all(|c| c.1 != Some(burst)),
        "burst_lock on the path: {by:?}"
    );
}

#[test]
fn diff_shows_the_lock_share_of_the_critical_path_fall_when_its_sections_shrink() {
    // Three workers, 1 ms outside: with 2 ms inside tuned_lock they queue on it; with 0.1 ms
    // the CPUs bound the run instead.
    let runs: Vec<_> = ["2000", "100"]
        .iter()
        .map(|hold| {
            let run = waitshim_tests::Launch::fixture("tunable")
                .args(["mixed", hold, "60"])
                .run();
            run.assert_success();
            run
        })
        .collect();
    let out = std::process::Command::new(waitshim_tests::analyzer_path())
        .args(["diff", "--json"])
        .arg(runs[0].single_log())
        .arg(runs[1].single_log())
        .output()
        .expect("run diff");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let p = &d["critical_path"];
    let (before, after) = (
        p["length_ns"]["before"].as_u64().expect("before"),
        p["length_ns"]["after"].as_u64().expect("after"),
    );
    assert!(after < before, "the path got shorter: {p}");
    let lock = p["by"]
        .as_array()
        .expect("by")
        .iter()
        .find(|c| {
            let k = c["cause"].as_str().unwrap_or("");
            k.starts_with("inside mutex tuned_lock")
        })
        .unwrap_or_else(|| panic!("no tuned_lock cause: {p}"));
    let (sb, sa) = (
        lock["share"]["before"].as_f64().unwrap(),
        lock["share"]["after"].as_f64().unwrap(),
    );
    assert!(
        sb > 0.5 && sa < sb / 2.0,
        "tuned_lock's share {sb} -> {sa}: {p}"
    );
    // The text says the same, in its BOTTLENECKS section.
    let out = std::process::Command::new(waitshim_tests::analyzer_path())
        .arg("diff")
        .arg(runs[0].single_log())
        .arg(runs[1].single_log())
        .output()
        .expect("run diff");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\nBOTTLENECKS (the critical path: "),
        "{text}"
    );
    assert!(text.contains("inside mutex tuned_lock"), "{text}");
}

#[test]
fn a_wait_ended_by_the_thread_that_made_the_mutex_is_a_hand_off_not_a_wait_nobody_ended() {
    // main initialises the mutex, locks it while it is the only thread, and unlocks it once the
    // waiter sleeps. The mutex was cached for main at its init, and the single-threaded fast
    // path took main's lock for one it already owned: the owner stayed unset, the wait named
    // no waker, and BOTTLENECKS said "waiting on mutex#1 ... with nobody to end the wait".
    let run = run_both("debuginfod", &[]);
    assert_eq!(run.stdout_text(), "dbg: done\n");
    let a = run.analyze();
    let p = path(&a.log(0));
    assert!(
        causes(p).iter().all(|(c, ..)| c != "waited"),
        "{p}\n{}",
        a.text
    );
    assert!(p["hops"].as_u64().unwrap_or(0) >= 1, "{p}");
    assert!(
        !a.text.contains("with nobody to end the wait"),
        "{}",
        a.text
    );
}
