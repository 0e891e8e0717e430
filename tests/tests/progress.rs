//! Progress points (`WAITSHIM_PROGRESS`, `WAITSHIM_BEGIN`/`END` in include/waitshim.h): a
//! server that marks its work is judged by its throughput and latency, and its bottlenecks are
//! those of the phase it worked in, not of its idle start-up and shutdown.

use serde_json::Value;
use std::process::Command;
use waitshim_tests::{analyzer_path, Launch, LogReport};

/// The fixture's own figures: (requests, latency sum, first served, last served), in ns.
fn measured(stdout: &str) -> (u64, u64, u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("progress: "))
        .unwrap_or_else(|| panic!("no figures in {stdout:?}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    let n = |key: &str| -> u64 {
        let i = w.iter().position(|x| *x == key).expect(key);
        w[i + 1].parse().expect(key)
    };
    (
        n("requests"),
        n("latency_sum_ns"),
        n("first_end_ns"),
        n("last_end_ns"),
    )
}

fn point<'a>(log: &LogReport<'a>, name: &str) -> &'a Value {
    log.0["progress"]
        .as_array()
        .expect("progress")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no point {name}: {}", log.0["progress"]))
}

#[test]
fn a_server_marking_its_requests_gets_their_throughput_and_latency_and_its_phase_bottleneck() {
    const REQUESTS: u64 = 200;
    const IDLE_MS: u64 = 300;
    // Natively the marks do nothing: the program runs as it is.
    let native = Launch::fixture("progress")
        .native()
        .args(["20", "2", "100", "10"])
        .run();
    native.assert_success();
    assert!(native.stdout_text().starts_with("progress: requests 20 "));

    let run = Launch::fixture("progress")
        .args([
            REQUESTS.to_string(),
            "3".into(),
            "1000".into(),
            IDLE_MS.to_string(),
        ])
        .run();
    run.assert_success();
    let (n, latency_sum, first, last) = measured(&run.stdout_text());
    assert_eq!(n, REQUESTS);
    let a = run.analyze();
    let log = a.log(0);

    // Counts: exact.
    let served = point(&log, "served");
    assert_eq!(served["visits"], REQUESTS, "{served}");
    let request = point(&log, "request");
    assert_eq!(
        (&request["begins"], &request["ends"], &request["in_flight"]),
        (
            &Value::from(REQUESTS),
            &Value::from(REQUESTS),
            &Value::from(0)
        ),
        "{request}"
    );
    assert_eq!(request["latency_exact"], true, "{request}");

    // Latency: the fixture takes its clock next to each mark, so the means agree to a few µs.
    let mean = request["mean_latency_ns"].as_u64().expect("a mean latency");
    let own = latency_sum / REQUESTS;
    assert!(
        mean.abs_diff(own) <= own / 100 + 20_000,
        "mean latency {mean} ns, the fixture measured {own} ns"
    );
    // Throughput between the first and the last request served.
    let rate = served["per_second"].as_f64().expect("a rate");
    let own_rate = (REQUESTS - 1) as f64 * 1e9 / (last - first) as f64;
    assert!(
        (rate - own_rate).abs() <= own_rate * 0.02,
        "{rate}/s, the fixture measured {own_rate}/s"
    );

    // The critical path is the phase's: the idle start-up and tail are left out.
    let p = &log.0["critical_path"];
    assert_eq!(p["between_progress_points"], true, "{p}");
    let length = p["length_ns"].as_u64().expect("length");
    let duration = log.run()["duration_ns"].as_u64().expect("duration");
    assert!(
        length + 2 * IDLE_MS * 900_000 <= duration,
        "the phase ({length} ns) leaves out the idle {IDLE_MS} ms at either end of the \
         {duration} ns run"
    );
    assert!(
        length.abs_diff(last - first) <= (last - first) / 5 + 10_000_000,
        "the phase ({length} ns) is about the serving ({} ns)",
        last - first
    );
    // Its first object is the table lock the workers are serialised on.
    let table = log
        .objects()
        .into_iter()
        .find(|o| o["global"]["name"] == "table_lock")
        .and_then(|o| o["object_id"].as_u64())
        .expect("table_lock");
    let first_object = p["by"]
        .as_array()
        .expect("by")
        .iter()
        .find(|c| c["object_id"].is_u64())
        .expect("an object on the path");
    assert_eq!(
        (
            first_object["cause"].as_str(),
            first_object["object_id"].as_u64()
        ),
        (Some("held"), Some(table)),
        "{p}"
    );
    // Its what-if estimates give each point's throughput then.
    let w = &p["whatif"][0];
    assert_eq!(w["object_id"], table, "{p}");
    let t = w["throughput"]
        .as_array()
        .expect("throughput")
        .iter()
        .find(|t| t["name"] == "served")
        .expect("served's throughput");
    assert!(
        t["predicted_per_second"].as_f64() >= t["per_second"].as_f64(),
        "halving the lock's sections does not lower the throughput: {t}"
    );

    // The text says so on the first screen.
    assert!(
        a.text.contains("progress phase's critical path")
            && a.text
                .contains("BOTTLENECKS (what the work between the program's progress points")
            && a.text.contains("\nPROGRESS (")
            && a.text.contains(&format!("\"served\": {REQUESTS} visits"))
            && a.text
                .contains(&format!("{REQUESTS} begun, {REQUESTS} ended; mean latency")),
        "{}",
        a.text
    );

    // whatif predicts the points' throughput, of the phase.
    let out = Command::new(analyzer_path())
        .args(["whatif", "--json", "--hold", "table_lock=0.5"])
        .arg(run.single_log())
        .output()
        .expect("run whatif");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(doc["phase"]["start_ns"].is_u64(), "{doc}");
    // It replays the phase: the replay of the phase as measured comes close to the phase, and
    // halving the sections of the lock the workers are serialised on pays off.
    assert_eq!(doc["bound"]["kind"], "replay", "{doc}");
    let replayed = doc["replayed_duration_ns"].as_f64().expect("replayed");
    let phase = doc["baseline_duration_ns"].as_f64().expect("baseline");
    assert!(
        (replayed / phase - 1.0).abs() < 0.3,
        "the replay of the phase as measured: {replayed} against {phase}"
    );
    assert!(doc["predicted_speedup"].as_f64() > Some(1.3), "{doc}");
    let names: Vec<&str> = doc["throughput"]
        .as_array()
        .expect("throughput")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["request", "served"], "{doc}");
    assert!(
        doc["assumptions"]
            .as_array()
            .expect("assumptions")
            .iter()
            .any(|a| a.as_str().unwrap_or("").contains("progress mark")),
        "{doc}"
    );
}

#[test]
fn transactions_still_open_at_the_end_are_counted_up_to_it_and_the_mean_is_called_an_estimate() {
    // One transaction begins and never ends; another begins and ends; then the process exits.
    let dir = tempfile::tempdir().expect("temp dir");
    let include = waitshim_tests::workspace_root().join("include");
    let exe = waitshim_tests::compile_c_with(
        dir.path(),
        "open_txn",
        r#"
#include <pthread.h>
#include <stdio.h>
#include "waitshim.h"
static void *other(void *a) { (void)a; return NULL; }
int main(void)
{
    pthread_t t;
    pthread_create(&t, NULL, other, NULL);
    pthread_join(t, NULL);
    WAITSHIM_BEGIN("job");
    WAITSHIM_BEGIN("job");
    WAITSHIM_END("job");
    char name[4] = "job";
    WAITSHIM_END(name); /* the same point, reached through another address */
    WAITSHIM_BEGIN("job");
    puts("done");
    return 0;
}
"#,
        &[&format!("-I{}", include.display())],
    );
    let run = Launch::program(&exe).run();
    run.assert_success();
    let a = run.analyze();
    let log = a.log(0);
    let job = point(&log, "job");
    assert_eq!(
        (
            &job["begins"],
            &job["ends"],
            &job["in_flight"],
            &job["visits"]
        ),
        (
            &Value::from(3),
            &Value::from(2),
            &Value::from(1),
            &Value::from(2)
        ),
        "{job}"
    );
    assert_eq!(job["latency_exact"], false, "{job}");
    assert!(
        a.text.contains("mean latency ~") && a.text.contains("1 still open"),
        "{}",
        a.text
    );
}
