//! Collection policies (`WAITSHIM_POLICY`): one scenario per criterion and selector, each proving
//! its effect on what the report shows; hot reload; data requests while the program runs; an
//! invalid policy.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use waitshim_tests::{line_of, Launch, LogReport, Run, POLL_DEADLINE};

/// Writes `json` as a policy file in a fresh directory (kept alive by the returned guard).
fn policy_file(json: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.json");
    fs::write(&path, json).expect("write policy");
    (dir, path)
}

/// Runs fixture `name` with `args` under the shim with the policy `json`; checks it succeeded.
fn run_with_policy(name: &str, args: &[&str], json: &str) -> Run {
    let (_dir, path) = policy_file(json);
    let mut l = Launch::fixture(name).env("WAITSHIM_POLICY", &path);
    for a in args {
        l = l.arg(a);
    }
    let run = l.run();
    run.assert_success();
    assert_eq!(
        run.stderr_text(),
        "",
        "a valid policy prints nothing on stderr"
    );
    run
}

fn events<'a>(log: &LogReport<'a>) -> Vec<&'a Value> {
    log.0["wait_events"]["listed"]
        .as_array()
        .expect("wait_events.listed")
        .iter()
        .collect()
}

/// The statistics of rule `rule` (0-based) of policy version `version`.
fn rule_stats<'a>(log: &LogReport<'a>, version: u64, rule: u64) -> &'a Value {
    log.0["policy"]["rules"]
        .as_array()
        .expect("policy.rules")
        .iter()
        .find(|r| r["version"] == version && r["rule"] == rule)
        .unwrap_or_else(|| {
            panic!(
                "no statistics for rule {rule} of version {version}: {}",
                log.0["policy"]
            )
        })
}

/// Rule 0 of policy version 1 saw `requests` requests and acted on `acted` of them.
fn assert_requests_acted(log: &LogReport, requests: u64, acted: u64) {
    let stats = rule_stats(log, 1, 0);
    assert_eq!(
        (u(&stats["requests"]), u(&stats["acted"])),
        (requests, acted),
        "{stats}"
    );
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The waits of a convoy of 8 that found at least 3 waiters (this one included) are the only
/// ones with chains and events: 5 of the 7 (waiter counts 3..7).
#[test]
fn min_waiters_3_collects_chains_only_from_waits_that_found_3_waiters() {
    let run = run_with_policy(
        "waves",
        &["8"],
        r#"{"rules":[{"match":{"kind":"mutex"},"when":{"min_waiters":3},"actions":["record","waiter_chain"]}]}"#,
    );
    let a = run.analyze();
    let log = a.log(0);
    let lock = line_of("waves.c", "lock-site");
    let ev = events(&log);
    let mut counts: Vec<u64> = ev.iter().map(|e| u(&e["waiters"])).collect();
    counts.sort_unstable();
    assert_eq!(counts, [3, 4, 5, 6, 7], "events: {ev:?}");
    for e in &ev {
        assert!(
            log.chain_has(&e["chain"], "waves.c", lock),
            "event {e} chain at lock-site"
        );
        assert_eq!(e["reason"], "acquired");
    }
    assert_requests_acted(&log, 7, 5);
    // Waits the rule did not act on carry no chain: the object's wait sites split 5 / 2.
    let obj = log.object_created_at("waves.c", line_of("waves.c", "creation-site"));
    let sites = obj["wait_sites"].as_array().expect("wait_sites");
    let with_chain: u64 = sites
        .iter()
        .filter(|s| s["chain_id"] != 0)
        .map(|s| u(&s["count"]))
        .sum();
    let without: u64 = sites
        .iter()
        .filter(|s| s["chain_id"] == 0)
        .map(|s| u(&s["count"]))
        .sum();
    assert_eq!((with_chain, without), (5, 2), "wait sites: {sites:?}");
}

/// 40 threads pile up (1..39 waiters): with granularity 10 the rule acts at 10, 20 and 30.
#[test]
fn granularity_10_acts_at_10_20_and_30_waiters() {
    let run = run_with_policy(
        "waves",
        &["40"],
        r#"{"rules":[{"match":{"kind":"mutex"},"when":{"granularity":10},"actions":["record"]}]}"#,
    );
    let a = run.analyze();
    let log = a.log(0);
    let mut counts: Vec<u64> = events(&log).iter().map(|e| u(&e["waiters"])).collect();
    counts.sort_unstable();
    assert_eq!(counts, [10, 20, 30]);
    assert_requests_acted(&log, 39, 3);
}

/// max_waiters 4: in a wave of 8 the waits that found 1..3 waiters act and 4..7 are
/// suppressed; the next wave (1..2 waiters) acts again.
#[test]
fn max_waiters_suppresses_at_4_and_resumes_below() {
    let run = run_with_policy(
        "waves",
        &["8", "3"],
        r#"{"rules":[{"match":{"kind":"mutex"},"when":{"max_waiters":4},"actions":["record"]}]}"#,
    );
    let a = run.analyze();
    let log = a.log(0);
    let ev = events(&log);
    let counts: Vec<u64> = ev.iter().map(|e| u(&e["waiters"])).collect();
    assert_eq!(counts.len(), 5, "events: {counts:?}");
    // In time order: the first wave's 1, 2, 3, then the second wave's 1, 2.
    let mut by_time: Vec<(u64, u64)> = ev
        .iter()
        .map(|e| (u(&e["at_ns"]), u(&e["waiters"])))
        .collect();
    by_time.sort_unstable();
    let ordered: Vec<u64> = by_time.iter().map(|p| p.1).collect();
    assert_eq!(ordered, [1, 2, 3, 1, 2]);
    let stats = rule_stats(&log, 1, 0);
    assert_eq!(
        (
            u(&stats["requests"]),
            u(&stats["acted"]),
            u(&stats["suppressed"])
        ),
        (9, 5, 4),
        "{stats}"
    );
    let text = waitshim_tests::analyze(&run.logs, &["--no-symbols"]).text;
    assert!(text.contains("max_waiters suppressed 4"), "{text}");
}

/// every_nth 10 on a hot lock: one event per ten requests the rule saw.
#[test]
fn every_nth_10_records_one_request_in_ten() {
    let run = run_with_policy(
        "hot_lock",
        &[],
        r#"{"rules":[{"match":{"kind":"mutex"},"when":{"every_nth":10},"actions":["record"]}]}"#,
    );
    assert_eq!(run.stdout_text(), "hot_lock: 8000 increments\n");
    let a = run.analyze();
    let log = a.log(0);
    let stats = rule_stats(&log, 1, 0);
    let requests = u(&stats["requests"]);
    assert!(requests >= 100, "the hot lock must be contended: {stats}");
    assert_eq!(u(&stats["acted"]), requests / 10, "{stats}");
    assert_eq!(u(&log.0["wait_events"]["total"]), requests / 10);
    let obj = log.object_created_at("hot_lock.c", line_of("hot_lock.c", "creation-site"));
    // Acquisitions that got the lock within the shim's short back-off never blocked: they are
    // contended, but not waits a policy decides on.
    let brief = obj["ended"]["brief"].as_u64().unwrap_or(0);
    assert_eq!(
        log.counter(obj, "contended"),
        requests + brief,
        "every contended wait that blocked is a request: {obj}"
    );
}

fn tids_named<'a>(log: &LogReport<'a>, prefix: &str) -> Vec<&'a Value> {
    log.threads()
        .into_iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .map(|t| &t["tid"])
        .collect()
}

/// Runs `selectors` with a rule that records the waits `selector` picks; every event must come
/// from the two threads whose names start with `prefix`.
fn events_only_from_threads(selector: &str, prefix: &str) {
    let run = run_with_policy(
        "selectors",
        &[],
        &format!(r#"{{"rules":[{{"match":{{{selector}}},"actions":["record"]}}]}}"#),
    );
    let a = run.analyze();
    let log = a.log(0);
    let chosen = tids_named(&log, prefix);
    assert_eq!(chosen.len(), 2, "threads named {prefix}*");
    let ev = events(&log);
    assert!(!ev.is_empty(), "the {prefix}* threads waited");
    for e in &ev {
        assert!(
            chosen.contains(&&e["tid"]),
            "{selector}: event from a thread not named {prefix}*: {e}"
        );
    }
}

#[test]
fn thread_name_glob_selects_only_the_db_worker_threads() {
    events_only_from_threads(r#""thread_name":"db-*""#, "db-worker-");
}

/// The web threads are selected by their start routine (`web_worker`), not their names.
#[test]
fn thread_group_glob_selects_threads_by_start_routine() {
    events_only_from_threads(r#""thread_group":"web_*""#, "web-");
}

#[test]
fn creation_site_glob_selects_only_the_lock_made_in_db_open() {
    let run = run_with_policy(
        "selectors",
        &[],
        r#"{"rules":[{"match":{"creation_site":"db_*"},"actions":["record"]}]}"#,
    );
    let a = run.analyze();
    let log = a.log(0);
    let db = log.object_created_at("selectors.c", line_of("selectors.c", "db-create"));
    let cache = log.object_created_at("selectors.c", line_of("selectors.c", "cache-create"));
    assert!(
        log.counter(cache, "contended") > 0,
        "the cache lock was contended too"
    );
    let ev = events(&log);
    assert!(!ev.is_empty());
    for e in &ev {
        assert_eq!(
            e["object_id"], db["object_id"],
            "event on another object: {e}"
        );
    }
}

/// The `selectors` program as distributions ship programs: stripped, its symbols in a separate
/// debug file named by `.gnu_debuglink` beside it. The shim reads the debug file, so
/// `creation_site` selects the same lock as in the unstripped program; once the debug file is
/// gone the stripped binary names no function and the rule selects nothing.
#[test]
fn creation_site_selects_by_function_name_in_a_stripped_program_with_its_debug_file() {
    let objcopy_ok = std::process::Command::new("objcopy")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !objcopy_ok {
        waitshim_tests::skip_or_fail(
            "creation_site_selects_by_function_name_in_a_stripped_program_with_its_debug_file",
            "`objcopy` is not installed (needed to split the debug file)",
        );
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = dir.path().join("selectors");
    fs::copy(waitshim_tests::fixture("selectors"), &bin).expect("copy the fixture");
    let objcopy = |args: &[&str]| {
        let st = std::process::Command::new("objcopy")
            .args(args)
            .current_dir(dir.path())
            .status()
            .expect("run objcopy");
        assert!(st.success(), "objcopy {args:?}");
    };
    objcopy(&["--only-keep-debug", "selectors", "selectors.debug"]);
    objcopy(&[
        "--strip-all",
        "--add-gnu-debuglink=selectors.debug",
        "selectors",
    ]);
    let (_pdir, policy) =
        policy_file(r#"{"rules":[{"match":{"creation_site":"db_*"},"actions":["record"]}]}"#);
    let run_it = || {
        let run = Launch::program(&bin).env("WAITSHIM_POLICY", &policy).run();
        run.assert_success();
        assert_eq!(run.stderr_text(), "");
        run
    };
    let run = run_it();
    let a = run.analyze();
    let log = a.log(0);
    let db = log.object_created_at("selectors.c", line_of("selectors.c", "db-create"));
    let ev = events(&log);
    assert!(
        !ev.is_empty(),
        "no event: the rule selected nothing\n{}",
        a.text
    );
    for e in &ev {
        assert_eq!(
            e["object_id"], db["object_id"],
            "event on another object: {e}"
        );
    }

    fs::remove_file(dir.path().join("selectors.debug")).expect("remove the debug file");
    let run = run_it();
    let a = run.analyze();
    assert!(
        events(&a.log(0)).is_empty(),
        "without its debug file the stripped program names no function:\n{}",
        a.text
    );
}

/// 20 waits of ~2 ms and 3 of ~150 ms: min_wait 50ms records exactly the 3 long ones.
#[test]
fn min_wait_records_only_the_long_waits() {
    let run = run_with_policy(
        "wait_lengths",
        &[],
        r#"{"rules":[{"match":{"kind":"mutex"},"when":{"min_wait":"50ms"},"actions":["record","waiter_chain"]}]}"#,
    );
    let a = run.analyze();
    let log = a.log(0);
    let obj = log.object_created_at("wait_lengths.c", line_of("wait_lengths.c", "creation-site"));
    assert!(
        log.counter(obj, "contended") >= 20,
        "short waits happened too"
    );
    let ev = events(&log);
    assert_eq!(ev.len(), 3, "events: {ev:?}");
    let site = line_of("wait_lengths.c", "wait-site");
    for e in &ev {
        assert!(u(&e["wait_ns"]) >= 50_000_000, "{e}");
        assert!(log.chain_has(&e["chain"], "wait_lengths.c", site));
    }
}

/// Runs `holder_sleeps` with `args` under a policy asking for the holder's live stack; checks
/// its output and that exactly one stack was taken. Returns the run and that stack.
fn one_holder_stack(args: &[&str]) -> (Run, Value) {
    let run = run_with_policy(
        "holder_sleeps",
        args,
        r#"{"rules":[{"match":{"kind":"mutex"},"actions":["holder_live_stack"]}]}"#,
    );
    assert_eq!(run.stdout_text(), "holder_sleeps: done\n");
    let a = run.analyze();
    let stacks = a.log(0).0["holder_stacks"]["listed"]
        .as_array()
        .expect("holder_stacks")
        .clone();
    assert_eq!(stacks.len(), 1, "{stacks:?}");
    (run, stacks[0].clone())
}

/// The holder sleeps in slow_update() while it holds the lock: its stack, scanned while the
/// waiter waits (a holder blocked in a system call is not signalled), names that function.
#[test]
fn holder_live_stack_names_the_function_the_holder_sleeps_in() {
    let (run, s) = one_holder_stack(&[]);
    let a = run.analyze();
    let log = a.log(0);
    assert_eq!(s["live"], true);
    assert_eq!(
        s["how"], "scanned",
        "a sleeping holder is not signalled: {s}"
    );
    assert_eq!(s["function"], "slow_update", "{s}");
    assert_eq!(log.thread_name(&s["holder_tid"]), Some("holder"));
    assert_eq!(log.thread_name(&s["waiter_tid"]), Some("waiter"));
    assert!(log.chain_has(
        &s["chain"],
        "holder_sleeps.c",
        line_of("holder_sleeps.c", "sleep")
    ));
    let text = waitshim_tests::analyze(&run.logs, &[]).text;
    assert!(text.contains("slow_update"), "{text}");
}

/// Two waves of `n` threads under the policy `first`: the policy file is replaced by `second`
/// (a new file renamed over it, as editors and deployment tools write one) after the first wave;
/// the second wave starts once `ready` holds for the live log.
fn waves_with_reload(
    n: &str,
    first: &str,
    second: &str,
    what: &str,
    ready: impl Fn(&LogReport) -> bool,
) -> Run {
    let (dir, path) = policy_file(first);
    let gate = dir.path().join("gate");
    let running = Launch::fixture("waves")
        .arg(n)
        .arg(n)
        .env("WAITSHIM_POLICY", &path)
        .env("WAVES_GATE", &gate)
        .spawn();
    running.wait_for_stdout("wave 1 done");
    let next = dir.path().join("next.json");
    fs::write(&next, second).unwrap();
    fs::rename(&next, &path).unwrap();
    running.poll_log(what, ready);
    fs::write(gate.with_extension("1"), "").unwrap();
    let run = running.wait();
    run.assert_success();
    run
}

/// The policy file changes between two waves: the first wave is only counted, the second is
/// recorded under the new version, and the log says when each version came into force.
#[test]
fn hot_reload_mid_run_changes_what_is_collected() {
    let run = waves_with_reload(
        "6",
        r#"{"rules":[{"match":{"kind":"mutex"},"actions":["count"]}]}"#,
        r#"{"rules":[{"name":"now","match":{"kind":"mutex"},"actions":["record","waiter_chain"]}]}"#,
        "policy version 2",
        |log| {
            log.0["policy"]["versions"]
                .as_array()
                .is_some_and(|v| v.len() == 2)
        },
    );
    let a = run.analyze();
    let log = a.log(0);
    let versions = log.0["policy"]["versions"].as_array().unwrap();
    assert_eq!(
        versions[1]["rules"][0].as_str().map(|s| s.contains("now")),
        Some(true)
    );
    let switched = u(&versions[1]["at_ns"]);
    let ev = events(&log);
    assert_eq!(ev.len(), 5, "the second wave's 5 waits: {ev:?}");
    for e in &ev {
        assert_eq!(e["version"], 2);
        assert!(u(&e["at_ns"]) > switched);
    }
    assert_requests_acted(&log, 5, 5);
}

/// The program asks for a snapshot through the C API, then the test asks by signal: both are
/// served while it runs, and the live log then holds counts that were only in per-thread caches.
#[test]
fn data_requests_by_api_and_by_signal_while_the_program_runs() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    // Data requests by signal are the user's choice (`waitshim-analyze request` needs none).
    let running = Launch::fixture("live_requests")
        .arg(&go)
        .env("WAITSHIM_SIGNAL", "SIGRTMAX-3")
        .spawn();
    running.wait_for_stdout("requested");
    let creation = line_of("live_requests.c", "creation-site");
    running.poll_log(
        "the API snapshot with the mutex's 1000 acquisitions",
        |log| {
            let snaps = &log.0["snapshots"]["listed"];
            let api = snaps
                .as_array()
                .is_some_and(|s| s.iter().any(|x| x["source"] == "api"));
            api && log
                .objects_created_at("live_requests.c", creation)
                .first()
                .is_some_and(|o| o["counters"]["acquisitions"] == 1000)
        },
    );
    // The shim's own thread takes the request signal it was given.
    let pid = running.pid();
    let tid = shim_thread(pid).expect("the shim's thread (named waitshim) runs");
    // SIGRTMAX-3 (SIGRTMAX is 64 on Linux with glibc).
    let status = std::process::Command::new("kill")
        .args(["-61", &tid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let a = running.poll_log("a snapshot served for the signal", |log| {
        log.0["snapshots"]["listed"]
            .as_array()
            .is_some_and(|s| s.iter().any(|x| x["source"] == "signal"))
    });
    assert!(
        a.log(0).run()["end"].is_null(),
        "served while running: {}",
        a.log(0).run()
    );
    fs::write(&go, "").unwrap();
    let run = running.wait();
    run.assert_success();
    assert_eq!(run.stdout_text(), "requested\ndone\n");
    let native = Launch::fixture("live_requests").native().run();
    native.assert_success();
    assert_eq!(
        native.stdout_text(),
        "requested\ndone\n",
        "runs without the shim too"
    );
}

/// The tid of the shim's service thread in process `pid`.
fn shim_thread(pid: u32) -> Option<u32> {
    let deadline = Instant::now() + POLL_DEADLINE;
    while Instant::now() < deadline {
        for e in fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
            let comm = fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if comm.trim_end() == "waitshim" {
                return e.file_name().to_str()?.parse().ok();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// An invalid policy: the program's output and exit status are unchanged, stderr has one line
/// naming the field and the problem, and the run is still traced with the built-in policy.
#[test]
fn invalid_policy_gives_one_stderr_line_and_the_program_runs_on() {
    let (_dir, path) = policy_file(
        r#"{"rules":[{"match":{"kind":"mutex"},"when":{"min_waiter":3},"actions":["record"]}]}"#,
    );
    let native = Launch::fixture("convoy").native().run();
    let run = Launch::fixture("convoy")
        .env("WAITSHIM_POLICY", &path)
        .run();
    assert_eq!(run.status.code(), native.status.code());
    assert_eq!(run.stdout_text(), native.stdout_text());
    let err = run.stderr_text();
    assert_eq!(err.lines().count(), 1, "stderr: {err:?}");
    assert!(
        err.contains("min_waiter") && err.contains("min_waiters"),
        "{err}"
    );
    assert!(err.contains(&*path.to_string_lossy()), "{err}");
    let a = run.analyze();
    let log = a.log(0);
    assert_eq!(log.0["policy"]["versions"][0]["builtin"], true);
    assert!(
        log.warning_text().contains("min_waiter"),
        "{}",
        log.warning_text()
    );
    assert_eq!(log.hwm(), 7, "still traced");
}

/// `policy check` explains a valid policy and rejects an invalid one with the same message the
/// shim gives.
#[test]
fn policy_check_explains_a_policy_offline() {
    let (_d, good) = policy_file(
        r#"{"rules":[{"name":"db","match":{"creation_site":"db_*"},"when":{"min_waiters":3},"actions":["record","waiter_chain"]}]}"#,
    );
    let out = std::process::Command::new(waitshim_tests::analyzer_path())
        .args(["policy", "check"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("valid policy, 1 rule"), "{text}");
    assert!(text.contains("db_*"), "{text}");
    let (_d2, bad) = policy_file(r#"{"rules":[{"actions":["recrod"]}]}"#);
    let out = std::process::Command::new(waitshim_tests::analyzer_path())
        .args(["policy", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("recrod"), "{err}");
}

/// A reload of an invalid file keeps the policy in force and says why, once, on stderr.
#[test]
fn reload_of_an_invalid_policy_keeps_the_old_one() {
    let run = waves_with_reload(
        "4",
        r#"{"rules":[{"match":{"kind":"mutex"},"actions":["record"]}]}"#,
        r#"{"rules":[{"actions":["record"],"when":{"every_nth":0}}]}"#,
        "the warning about the rejected reload",
        |log| log.warning_text().contains("keeping policy version 1"),
    );
    let err = run.stderr_text();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("every_nth") && err.contains("keeping policy version 1"),
        "{err}"
    );
    let a = run.analyze();
    let log = a.log(0);
    assert_eq!(log.0["policy"]["versions"].as_array().unwrap().len(), 1);
    // Both waves were recorded under version 1: 3 waits each.
    let ev = events(&log);
    assert_eq!(ev.len(), 6, "{ev:?}");
    assert!(ev.iter().all(|e| e["version"] == 1));
}

/// The policy file turns per-wait events off between two waves: events are set when the
/// program starts, so the second wave's waits are still written, and one line says why.
#[test]
fn events_turned_off_by_a_reload_stay_as_they_were_at_start() {
    let run = waves_with_reload(
        "6",
        r#"{"events":"all","rules":[{"match":{"kind":"mutex"},"actions":["count"]}]}"#,
        r#"{"events":"off","rules":[{"match":{"kind":"mutex"},"actions":["count"]}]}"#,
        "policy version 2",
        |log| {
            log.0["policy"]["versions"]
                .as_array()
                .is_some_and(|v| v.len() == 2)
        },
    );
    let err = run.stderr_text();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(r#""events": "off" is not applied"#), "{err}");
    let a = run.analyze();
    // Each wave of 6 has 5 threads sleep behind a holder that sleeps.
    let waits = u(&a.log(0).0["per_wait_events"]["waits"]);
    assert!(waits >= 10, "both waves' waits: {waits}");
}

/// all_waiters at 7 waiters: one record naming the 7 threads waiting at that moment, each with
/// its chain at the lock site.
#[test]
fn all_waiters_lists_every_thread_waiting_at_that_moment() {
    let run = run_with_policy(
        "waves",
        &["8"],
        r#"{"rules":[{"match":{"kind":"mutex"},"when":{"min_waiters":7},"actions":["all_waiters"]}]}"#,
    );
    let a = run.analyze();
    let log = a.log(0);
    let listed = log.0["waiter_chains"]["listed"]
        .as_array()
        .expect("waiter_chains");
    assert_eq!(listed.len(), 1, "{listed:?}");
    let waiters = listed[0]["waiters"].as_array().unwrap();
    assert_eq!(waiters.len(), 7, "{waiters:?}");
    let lock = line_of("waves.c", "lock-site");
    let mut tids: Vec<u64> = waiters.iter().map(|w| u(&w["tid"])).collect();
    tids.sort_unstable();
    tids.dedup();
    assert_eq!(tids.len(), 7);
    for w in waiters {
        assert!(log.chain_has(&w["chain"], "waves.c", lock), "waiter {w}");
    }
}

/// Counts that only ever lived in a thread's cache (no lock was contended, no request was made)
/// reach the log through the shim's periodic flush: a SIGKILLed run keeps them.
#[test]
fn periodic_flush_keeps_uncontended_counts_of_a_killed_run() {
    let dir = tempfile::tempdir().unwrap();
    let running = Launch::fixture("live_requests")
        .arg(dir.path().join("never"))
        .arg("quiet")
        .spawn();
    running.wait_for_stdout("requested");
    let creation = line_of("live_requests.c", "creation-site");
    running.poll_log("the 1000 acquisitions flushed", |log| {
        log.objects_created_at("live_requests.c", creation)
            .first()
            .is_some_and(|o| o["counters"]["acquisitions"] == 1000)
    });
    let run = running.kill();
    let a = run.analyze();
    let log = a.log(0);
    let o = log.object_created_at("live_requests.c", creation);
    assert_eq!(log.counter(o, "acquisitions"), 1000);
    assert_eq!(u(&log.0["snapshots"]["total"]), 0, "no request was made");
}

/// Asking holders for their live stacks interrupts their `usleep`; the shim resumes the sleep,
/// so the program's timing is its own: a wave of 8 still takes 200 ms + 7 × 20 ms.
#[test]
fn live_stacks_do_not_cut_the_holders_sleeps_short() {
    let run = run_with_policy(
        "waves",
        &["8"],
        r#"{"rules":[{"match":{"kind":"mutex"},"actions":["holder_live_stack"]}]}"#,
    );
    let a = run.analyze();
    let log = a.log(0);
    // Waiters that pile up behind one holder share its one question: at least one stack.
    let stacks = u(&log.0["holder_stacks"]["total"]);
    assert!(stacks >= 1, "holders were asked: {stacks}");
    let duration = u(&log.run()["duration_ns"]);
    assert!(
        duration >= 330_000_000,
        "the sleeps were cut short: {duration} ns"
    );
}

/// A holder that computes (no system call) is asked by signal and unwinds itself: its stack
/// names the function it is busy in.
#[test]
fn holder_live_stack_of_a_running_holder_comes_from_its_own_unwind() {
    let (_run, s) = one_holder_stack(&["spin"]);
    assert_eq!(s["how"], "signal", "{s}");
    assert_eq!(s["function"], "spin_update", "{s}");
}

/// min_wait with a holder action: the wait is checked when it reaches min_wait (not at the next
/// 100 ms slice, nor at its end, when the holder has let go), so each of the 3 long waits gets
/// the holder's stack, taken while it still held the mutex.
#[test]
fn min_wait_collects_the_holder_while_it_still_holds() {
    let run = run_with_policy(
        "wait_lengths",
        &[],
        r#"{"rules":[{"match":{"kind":"mutex"},"when":{"min_wait":"50ms"},"actions":["holder_live_stack"]}]}"#,
    );
    let a = run.analyze();
    let log = a.log(0);
    let stacks = log.0["holder_stacks"]["listed"]
        .as_array()
        .expect("holder_stacks");
    assert_eq!(stacks.len(), 3, "{stacks:?}");
    for s in stacks {
        assert_eq!(s["function"], "main", "the holder sleeps in main: {s}");
        assert!(u(&s["at_ns"]) > 0);
    }
}

/// A `record` rule on condition variables: the events of waits found spurious at the thread's
/// next wait say so, like the objects' counts (the shim writes the changed reason again).
#[test]
fn recorded_cond_waits_found_spurious_later_are_listed_as_spurious() {
    let run = run_with_policy(
        "cond_spurious",
        &[],
        r#"{"rules":[{"match":{"kind":"cond"},"actions":["record"]}]}"#,
    );
    let a = run.analyze();
    let log = a.log(0);
    let f = "cond_spurious.c";
    for (tag, expected) in [
        ("init-loop-cond", json!({"signalled": 1, "spurious": 1})),
        ("init-herd-cond", json!({"broadcast": 4, "spurious": 3})),
        ("init-work-cond", json!({"signalled": 2})),
    ] {
        let cond = log.object_created_at(f, line_of(f, tag));
        assert_eq!(cond["ended"], expected, "{tag}: the object's counts");
        let id = &cond["object_id"];
        let mut listed: HashMap<String, u64> = HashMap::new();
        for e in events(&log).into_iter().filter(|e| &e["object_id"] == id) {
            *listed
                .entry(e["reason"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
        }
        let listed: Value = listed.into_iter().map(|(k, v)| (k, json!(v))).collect();
        assert_eq!(listed, expected, "{tag}: the listed events' reasons");
        let groups: Vec<&Value> = log.0["wait_events"]["by_rule"]
            .as_array()
            .expect("by_rule")
            .iter()
            .filter(|g| &g["object_id"] == id)
            .collect();
        assert_eq!(groups.len(), 1, "{tag}: {groups:?}");
        assert_eq!(
            groups[0]["ended"], expected,
            "{tag}: the events summed by rule"
        );
    }
}
