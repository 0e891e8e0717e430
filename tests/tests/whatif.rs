//! What-if on the fixture family `tunable` (a lock that serialises the run, a lock idle beside
//! busy CPUs, both, a pipeline whose producer works inside the lock).
//!
//! The suite checks what does not depend on the machine's load: a lock that serialises the run
//! is predicted to pay off, an idle one not. The measured accuracy (run at HOLD, predict HOLD/2,
//! run at HOLD/2, compare the speed-ups) is a timing, so it is not part of the suite: run it on a
//! quiet machine with `cargo test --release -p waitshim-tests --test whatif -- --ignored
//! --nocapture` (docs/perf.md has the figures).

use serde_json::Value;
use std::process::Command;
use std::sync::Mutex;
use waitshim_tests::{analyzer_path, line_of, Launch};

/// The tests of this file run one at a time: the timed runs have the CPUs to themselves.
static ALONE: Mutex<()> = Mutex::new(());

/// The run's duration as its log says, and the log.
fn run(mode: &str, hold_us: u64, rounds: u64) -> (u64, std::path::PathBuf, waitshim_tests::Run) {
    let run = Launch::fixture("tunable")
        .arg(mode)
        .arg(hold_us.to_string())
        .arg(rounds.to_string())
        .run();
    run.assert_success();
    let log = run.single_log().to_path_buf();
    let a = run.analyze();
    let d = a.log(0).run()["duration_ns"].as_u64().expect("duration");
    (d, log, run)
}

fn whatif(log: &std::path::Path, hold: &str) -> Value {
    let args: [&std::ffi::OsStr; 5] = [
        "whatif".as_ref(),
        "--json".as_ref(),
        "--hold".as_ref(),
        hold.as_ref(),
        log.as_os_str(),
    ];
    waitshim_tests::analyzer_json(&args)
}

#[test]
fn a_lock_that_serialises_the_run_is_predicted_to_pay_off_and_an_idle_one_not() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let (_, log, _keep) = run("lock", 2000, 40);
    let doc = whatif(&log, "tuned_lock=0.5");
    let lock = doc["predicted_speedup"].as_f64().expect("speed-up");
    assert!(
        lock >= 1.5,
        "halving the lock's sections of a serialised run: {doc}"
    );
    // The estimate replays the recorded threads, and the replay of the run as measured comes
    // close to the run itself.
    assert_eq!(doc["bound"]["kind"], "replay", "{doc}");
    let replayed = doc["replayed_duration_ns"].as_f64().expect("replayed");
    let measured = doc["baseline_duration_ns"].as_f64().expect("baseline");
    assert!(
        (replayed / measured - 1.0).abs() < 0.3,
        "the replay of the run as measured: {replayed} against {measured}"
    );
    let cpus = std::thread::available_parallelism().map_or(1024, |n| n.get()) as f64;
    assert!(
        doc["replay_cpus"]
            .as_f64()
            .is_some_and(|c| c > 0.0 && c <= cpus),
        "{doc}"
    );
    let free = whatif(&log, "tuned_lock=0")["predicted_speedup"]
        .as_f64()
        .expect("speed-up");
    assert!(
        free > lock,
        "free sections buy more than half as long: {free} vs {lock}"
    );
    let (_, log, _keep) = run("cpu", 400, 25);
    let doc = whatif(&log, "tuned_lock=0.5");
    let idle = doc["predicted_speedup"].as_f64().expect("speed-up");
    assert!(
        (1.0..1.2).contains(&idle),
        "the lock is idle beside busy CPUs: {doc}"
    );
}

/// The measured accuracy (docs/perf.md): a timing, for a quiet machine, not the suite.
#[test]
#[ignore = "a timing: run on a quiet machine with --ignored --nocapture"]
fn whatif_predicts_the_speed_up_of_halved_critical_sections_within_its_stated_error() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    // (mode, HOLD µs, rounds): each run about half a second at HOLD on 2 CPUs.
    let family = [
        ("lock", 2000, 80),
        ("cpu", 400, 50),
        ("mixed", 1000, 120),
        ("pipeline", 2000, 150),
    ];
    let mut table = String::from("member     at HOLD   at HOLD/2  measured  predicted  error\n");
    let mut worst: f64 = 0.0;
    for (mode, hold, rounds) in family {
        let (before, log, _keep) = run(mode, hold, rounds);
        let doc = whatif(&log, "tuned_lock=0.5");
        assert_eq!(doc["schema"], "waitshim-whatif/1", "{doc}");
        assert_eq!(doc["baseline_duration_ns"].as_u64(), Some(before), "{doc}");
        let predicted = doc["predicted_speedup"].as_f64().expect("speed-up");
        let (after, _, _) = run(mode, hold / 2, rounds);
        let measured = before as f64 / after as f64;
        let error = (predicted - measured).abs() / measured;
        worst = worst.max(error);
        table.push_str(&format!(
            "{mode:<9} {:>8.1}ms {:>9.1}ms {measured:>8.2}x {predicted:>9.2}x {:>5.1}%\n",
            before as f64 / 1e6,
            after as f64 / 1e6,
            100.0 * error
        ));
        let assumptions = doc["assumptions"].as_array().map_or(0, Vec::len);
        assert!(assumptions > 0, "{doc}");
    }
    eprintln!("{table}");
    assert!(worst <= 0.20, "prediction errors above 20%:\n{table}");
}

#[test]
fn whatif_refuses_a_site_that_names_nothing_and_a_bad_factor() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let (_, log, _keep) = run("lock", 200, 5);
    let out = Command::new(analyzer_path())
        .args(["whatif", "--hold", "no_such_lock=0.5"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--hold no_such_lock: no object"), "{err}");
    let out = Command::new(analyzer_path())
        .args(["whatif", "--hold", "tuned_lock=-1"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("FACTOR must be 0 or more"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The text names the object, the prediction and what it assumes.
    let out = Command::new(analyzer_path())
        .args(["whatif", "--hold"])
        .arg(format!(
            "tunable.c:{}=0",
            line_of("tunable.c", "tuned-lock")
        ))
        .arg(&log)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("tuned_lock") && text.contains("predicted"),
        "{text}"
    );
    assert!(text.contains("an estimate, assuming:"), "{text}");
}
