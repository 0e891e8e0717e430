//! `WAITSHIM_DELAY`: a user lengthens the critical sections of one lock on purpose, to see how
//! the run time moves, and checks `whatif`'s estimate against the runs (`whatif --delayed`).
//!
//! Nothing here depends on the machine's load: the delays are spun inside the lock, so they
//! cannot overlap, and a delayed run takes at least sections x delay; the slope check is
//! asserted within 35 %, with delays that dwarf the run's own time. The precise figures are a
//! timing for a quiet machine: `cargo test --release -p waitshim-tests --test delay --
//! --ignored --nocapture`.

use serde_json::Value;
use std::process::Command;
use std::sync::Mutex;
use waitshim_tests::{analyzer_path, line_of, Launch, Run};

/// One test at a time: the slope check's runs have the CPUs to themselves.
static ALONE: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `delay_sections ROUNDS` under the shim, with `WAITSHIM_DELAY=delay` if given.
fn sections_run(rounds: u64, delay: Option<&str>) -> Run {
    let mut l = Launch::fixture("delay_sections").arg(rounds.to_string());
    if let Some(d) = delay {
        l = l.env("WAITSHIM_DELAY", d);
    }
    let run = l.run();
    run.assert_success();
    run
}

fn native_output(rounds: u64) -> String {
    let run = Launch::fixture("delay_sections")
        .arg(rounds.to_string())
        .native()
        .run();
    run.assert_success();
    run.stdout_text()
}

/// The report's `delay` object (null for a run not slowed on purpose).
fn delay_of(run: &Run) -> (Value, String, u64) {
    let a = run.analyze();
    let log = a.log(0);
    let d = log.0["delay"].clone();
    let duration = log.run()["duration_ns"].as_u64().expect("duration_ns");
    (d, a.text, duration)
}

/// The delayed objects whose label contains `what`.
fn delayed<'a>(delay: &'a Value, what: &str) -> Vec<&'a Value> {
    delay["objects"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter(|o| o["label"].as_str().is_some_and(|l| l.contains(what)))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_programs_output_is_the_same_with_and_without_the_delay() {
    let _alone = alone();
    let native = native_output(300);
    let plain = sections_run(300, None);
    assert_eq!(plain.stdout_text(), native);
    let every_lock = "table_init=20us;other_init=20us;nested_init=20us;shelf_init=20us;\
                      tally_init=20us";
    let delayed = sections_run(300, Some(every_lock));
    assert_eq!(delayed.stdout_text(), native, "results never change");
    let (d, _, _) = delay_of(&delayed);
    assert_eq!(
        d["objects"].as_array().map_or(0, Vec::len),
        5,
        "every lock of the fixture was delayed: {d}"
    );
}

#[test]
fn each_section_of_the_selected_lock_is_lengthened_and_the_report_says_so() {
    let _alone = alone();
    // 2 threads x 200 rounds: the fixture takes `table` exactly 400 times.
    let run = sections_run(200, Some("table_init=200us"));
    let (d, text, duration) = delay_of(&run);
    let table = delayed(&d, "\"table\"");
    assert_eq!(table.len(), 1, "{d}");
    assert_eq!(table[0]["sections"], 400, "{d}");
    assert_eq!(
        d["objects"].as_array().map_or(0, Vec::len),
        1,
        "only table: {d}"
    );
    let added = table[0]["added_ns"].as_u64().expect("added_ns");
    assert!(added >= 400 * 200_000, "{added} ns added for 400 x 200 µs");
    // The sections are spun inside the lock: they cannot overlap.
    assert!(
        duration >= 400 * 200_000,
        "the run took {duration} ns, less than 400 sections x 200 µs"
    );
    assert_eq!(d["rules"][0]["site"], "table_init");
    assert_eq!(d["rules"][0]["delay_ns"], 200_000);
    let line = line_of("delay_sections.c", "table-init");
    assert!(
        text.starts_with("waitshim report:")
            && text.contains("SLOWED ON PURPOSE: WAITSHIM_DELAY lengthened 400 critical sections"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "created at delay_sections.c:{line} (table_init): 400 sections lengthened"
        )),
        "{text}"
    );
    // The name given through the C API selects it too.
    let run = sections_run(200, Some("name:table=10us"));
    let (d, _, _) = delay_of(&run);
    assert_eq!(delayed(&d, "\"table\"")[0]["sections"], 400, "{d}");
    assert_eq!(d["objects"].as_array().map_or(0, Vec::len), 1, "{d}");
}

#[test]
fn a_recursive_mutex_is_delayed_at_its_outermost_release_and_rwlocks_and_spinlocks_too() {
    let _alone = alone();
    let run = sections_run(
        200,
        Some("nested_init=10us;shelf_init=10us;tally_init=10us"),
    );
    let (d, _, _) = delay_of(&run);
    // 400 sections of each: the recursive mutex is released 800 times, 400 of them outermost.
    for what in ["(nested_init)", "(shelf_init)", "(tally_init)"] {
        let o = delayed(&d, what);
        assert_eq!(o.len(), 1, "{what}: {d}");
        assert_eq!(o[0]["sections"], 400, "{what}: {d}");
    }
    assert_eq!(d["sections"], 1200, "{d}");
}

#[test]
fn a_site_that_matches_nothing_delays_nothing() {
    let _alone = alone();
    let native = native_output(100);
    let run = sections_run(100, Some("no_such_function=5ms"));
    assert_eq!(run.stdout_text(), native);
    assert!(run.stderr_text().is_empty(), "{}", run.stderr_text());
    let (d, text, _) = delay_of(&run);
    assert_eq!(d["sections"], 0, "{d}");
    assert_eq!(d["objects"].as_array().map_or(1, Vec::len), 0, "{d}");
    assert!(
        text.contains("rule no_such_function: 5.0 ms per section")
            && text.contains("no lock it selects ended a section"),
        "{text}"
    );
}

#[test]
fn a_bad_value_gives_one_stderr_line_and_the_program_runs_on_undelayed() {
    let _alone = alone();
    let native = native_output(100);
    for (bad, says) in [
        ("table_init", "no '=DURATION'"),
        ("table_init=fast", "unknown"),
        ("table_init=0us", "from 1ns to 1s"),
        ("delay_sections.c:31=20us", "file:line is not supported"),
    ] {
        let run = Launch::fixture("delay_sections")
            .arg("100")
            .env("WAITSHIM_DELAY", bad)
            .run();
        assert!(run.status.success(), "{bad}: {:?}", run.status);
        assert_eq!(run.stdout_text(), native, "{bad}");
        let err = run.stderr_text();
        assert_eq!(err.lines().count(), 1, "{bad}: one line: {err}");
        assert!(
            err.starts_with("waitshim: WAITSHIM_DELAY=") && err.contains(says),
            "{bad}: {err}"
        );
        assert!(err.contains("running without any delay"), "{err}");
        let (d, _, _) = delay_of(&run);
        assert!(d.is_null(), "{bad}: no delay: {d}");
    }
}

/// `lock_bound HOLD ROUNDS` (3 threads, all work inside one lock), delayed by `delay` if given.
fn bound_run(hold_us: u64, rounds: u64, delay: Option<&str>) -> Run {
    let mut l = Launch::fixture("lock_bound")
        .arg(hold_us.to_string())
        .arg(rounds.to_string());
    if let Some(d) = delay {
        l = l.env("WAITSHIM_DELAY", d);
    }
    let run = l.run();
    run.assert_success();
    run
}

fn whatif(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(analyzer_path())
        .arg("whatif")
        .args(args)
        .output()
        .expect("run waitshim-analyze whatif")
}

fn slope_check(base: &Run, delayed: &[&Run]) -> Value {
    let mut args: Vec<&std::ffi::OsStr> = vec!["whatif".as_ref(), "--json".as_ref()];
    for d in delayed {
        args.push("--delayed".as_ref());
        args.push(d.single_log().as_os_str());
    }
    args.push(base.single_log().as_os_str());
    waitshim_tests::analyzer_json(&args)
}

#[test]
fn whatif_checks_its_estimate_against_runs_slowed_on_purpose() {
    let _alone = alone();
    // 3 threads x 20 rounds of 200 µs, all inside one lock: about 12 ms; delays of 1 and 3 ms
    // per section add 60 and 180 ms, far above what a busy machine changes in the base run.
    let base = bound_run(200, 20, None);
    let one = bound_run(200, 20, Some("bound_init=1ms"));
    let three = bound_run(200, 20, Some("bound_init=3ms"));
    let doc = slope_check(&base, &[&one, &three]);
    let checks = doc["slope_check"].as_array().expect("slope_check");
    assert_eq!(checks.len(), 2, "{doc}");
    for c in checks {
        assert_eq!(c["objects"][0]["sections"], 60, "{c}");
        let measured = c["measured_slope_ns_per_us"].as_f64().expect("measured");
        // 60 sections: 60 µs of run per µs of delay, at least (the delays cannot overlap).
        assert!(measured >= 0.9 * 60_000.0, "{c}");
        let error = c["error_pct"].as_f64().expect("error_pct");
        assert!(error.abs() <= 35.0, "slope error {error:.1} %: {c}");
        assert!(c["predicted_duration_ns"].as_u64().is_some(), "{c}");
    }
    let fit = &doc["fit"];
    assert_eq!(fit["runs"], 2, "{doc}");
    let error = fit["error_pct"].as_f64().expect("fit error");
    assert!(
        error.abs() <= 35.0,
        "fitted slope error {error:.1} %: {doc}"
    );
    // The text says the same.
    let text = whatif(&[
        "--delayed".as_ref(),
        one.single_log().as_os_str(),
        base.single_log().as_os_str(),
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("run: measured ") && text.contains("; error "),
        "{text}"
    );
}

#[test]
fn whatif_refuses_a_delayed_log_without_delay_or_of_another_program() {
    let _alone = alone();
    let base = bound_run(100, 5, None);
    let undelayed = bound_run(100, 5, None);
    let out = whatif(&[
        "--delayed".as_ref(),
        undelayed.single_log().as_os_str(),
        base.single_log().as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no WAITSHIM_DELAY records: that run was not slowed on purpose"),
        "{err}"
    );
    let other = sections_run(20, Some("table_init=1us"));
    let out = whatif(&[
        "--delayed".as_ref(),
        other.single_log().as_os_str(),
        base.single_log().as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a run of another program"), "{err}");
}

/// The slope check's precise figures: a timing, for a quiet machine.
#[test]
#[ignore = "a timing: run on a quiet machine with --ignored --nocapture"]
fn whatif_slope_check_figures_on_a_quiet_machine() {
    let _alone = alone();
    let base = bound_run(500, 40, None);
    let runs: Vec<Run> = ["100us", "200us", "500us", "1ms"]
        .iter()
        .map(|d| bound_run(500, 40, Some(&format!("bound_init={d}"))))
        .collect();
    let doc = slope_check(&base, &runs.iter().collect::<Vec<_>>());
    let mut table =
        String::from("delay     measured   predicted  slope meas.  slope pred.  error\n");
    for c in doc["slope_check"].as_array().expect("slope_check") {
        table.push_str(&format!(
            "{:>6}µs {:>8.1}ms {:>9.1}ms {:>10.1}µs/µs {:>10.1}µs/µs {:>+6.1}%\n",
            c["delay_ns"].as_f64().unwrap_or(0.0) / 1e3,
            c["measured_duration_ns"].as_f64().unwrap_or(0.0) / 1e6,
            c["predicted_duration_ns"].as_f64().unwrap_or(0.0) / 1e6,
            c["measured_slope_ns_per_us"].as_f64().unwrap_or(0.0) / 1e3,
            c["predicted_slope_ns_per_us"].as_f64().unwrap_or(0.0) / 1e3,
            c["error_pct"].as_f64().unwrap_or(f64::NAN),
        ));
    }
    table.push_str(&format!(
        "fit over {} runs: error {:+.1}%\n",
        doc["fit"]["runs"],
        doc["fit"]["error_pct"].as_f64().unwrap_or(f64::NAN)
    ));
    eprintln!("base {} ms\n{table}", base_ms(&doc));
    let error = doc["fit"]["error_pct"].as_f64().expect("fit error");
    assert!(error.abs() <= 10.0, "{table}");
}

fn base_ms(doc: &Value) -> f64 {
    doc["baseline_duration_ns"].as_f64().unwrap_or(0.0) / 1e6
}
