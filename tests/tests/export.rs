//! `waitshim-analyze export`: each format written from a fixture's log and read back by a reader
//! that is not ours: `go tool pprof` for pprof, an XML parser for the flame graph, a JSON parser
//! and a nesting check for the Chrome trace, `protoc --decode` with Perfetto's published schema for the Perfetto trace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;
use waitshim_tests::{
    analyzer_path, debian_program, perfetto_decode, run_both, Launch, LogReport, Run,
};

/// Runs `waitshim-analyze export --format FORMAT ARGS -o DIR/out.FORMAT LOG`; the file written.
fn export(log: &Path, format: &str, args: &[&str]) -> PathBuf {
    let out = log.with_file_name(format!("out{}.{format}", args.join("")));
    let o = export_cmd(
        &[
            &["export", "--format", format],
            args,
            &[
                "-o",
                out.to_str().expect("utf-8 path"),
                log.to_str().expect("utf-8 path"),
            ],
        ]
        .concat(),
    );
    assert!(
        o.status.success(),
        "export --format {format} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.is_file(), "{} not written", out.display());
    out
}

fn export_cmd(args: &[&str]) -> Output {
    Command::new(analyzer_path())
        .args(args)
        .output()
        .expect("run waitshim-analyze export")
}

/// The time threads waited on every object, as the JSON report counts it.
fn report_wait_total(log: &LogReport) -> u64 {
    log.objects()
        .iter()
        .map(|o| {
            let c = &o["counters"];
            c["wait_total_ns"].as_u64().unwrap_or(0) + c["read_wait_total_ns"].as_u64().unwrap_or(0)
        })
        .sum()
}

/// The time the threads still waiting when the log ended had waited by its last look at them
/// (a deadlock's waits never end: the counters do not have them).
fn report_unended_total(log: &LogReport) -> u64 {
    log.0["open_waits"]["waits"].as_array().map_or(0, |w| {
        w.iter()
            .map(|w| w["waited_ns"].as_u64().expect("waited_ns"))
            .sum()
    })
}

/// A Debian program, installed when missing, one install at a time (the tests of this file run
/// in parallel, and two apt-gets at once would fight over dpkg's lock).
fn tool(program: &str, package: &str) -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    debian_program(program, package)
}

/// `go tool pprof ARGS FILE`, from Debian's golang-go (installed when missing); its stdout.
fn go_pprof(args: &[&str], file: &Path) -> String {
    let go = tool("go", "golang-go");
    let home = file.parent().expect("dir");
    let o = Command::new(go)
        .args(["tool", "pprof", "-symbolize=none"])
        .args(args)
        .arg(file)
        // No toolchain download, no network symbolization, a cache in the test's directory.
        .env("GOTOOLCHAIN", "local")
        .env("GOCACHE", home.join("gocache"))
        .env("PPROF_TMPDIR", home)
        .env("HOME", home)
        .output()
        .expect("run go tool pprof");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "go tool pprof {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// The flat share (percent) `go tool pprof -top` gives `function`.
fn top_share(top: &str, function: &str) -> f64 {
    let line = top
        .lines()
        .find(|l| l.split_whitespace().last() == Some(function))
        .unwrap_or_else(|| panic!("{function} not in pprof -top:\n{top}"));
    let cum = line.split_whitespace().nth(4).expect("cum% column");
    cum.trim_end_matches('%').parse().expect("a percentage")
}

#[test]
fn pprof_of_the_convoy_loads_in_go_pprof_with_worker_at_the_locks_share() {
    let run = run_both("convoy", &[]);
    let a = run.analyze();
    let log = a.log(0);
    let total = report_wait_total(&log);
    let lock = log
        .objects()
        .into_iter()
        .find(|o| o["kind"] == "mutex")
        .expect("the convoy mutex");
    let lock_wait = log.counter(lock, "wait_total_ns");
    assert!(lock_wait > 0 && total > lock_wait, "{lock_wait} of {total}");
    let expected = 100.0 * lock_wait as f64 / total as f64;

    let file = export(run.single_log(), "pprof", &[]);
    let top = go_pprof(&["-top", "-sample_index=delay"], &file);
    assert!(top.contains("Type: delay"), "{top}");
    let share = top_share(&top, "worker");
    assert!(
        (share - expected).abs() < 0.1,
        "worker has {share}% of the delay in pprof, {expected:.2}% in the report:\n{top}"
    );
    // Every contended acquisition is one contention: 7 on the lock, one per join of main.
    let counts = go_pprof(&["-top", "-sample_index=contentions"], &file);
    let contended = log.counter(lock, "contended");
    assert!(
        counts.lines().any(
            |l| l.split_whitespace().next() == Some(&contended.to_string())
                && l.ends_with(" worker")
        ),
        "worker should have {contended} contentions:\n{counts}"
    );
    let tags = go_pprof(&["-tags"], &file);
    assert!(
        tags.contains("mutex#") && tags.contains("convoy_lock"),
        "{tags}"
    );
    assert!(
        tags.contains("created_at") && tags.contains("convoy.c:"),
        "{tags}"
    );
    // Who waited, from the per-wait events: each of the 7 workers that queued behind the
    // first holder, once.
    let waiters = go_pprof(
        &[
            "-tags",
            "-sample_index=contentions",
            "-tagfocus=object=convoy_lock",
            "-tagshow=thread",
        ],
        &file,
    );
    assert!(waiters.contains("thread: Total 7.0"), "{waiters}");
    let once = waiters
        .lines()
        .filter(|l| l.trim_start().starts_with("1.0 (") && l.contains("): thread "))
        .count();
    assert_eq!(once, 7, "{waiters}");
}

#[test]
fn pprof_holders_side_names_the_releasing_function_and_thread() {
    let run = run_both("convoy", &[]);
    let file = export(run.single_log(), "pprof", &["--side", "holders"]);
    let top = go_pprof(&["-top", "-sample_index=delay"], &file);
    // The holder released the convoy lock in worker: it made the others wait.
    top_share(&top, "worker");
    let tags = go_pprof(&["-tags"], &file);
    assert!(
        tags.contains("thread:") || tags.contains(" thread"),
        "{tags}"
    );
    assert!(tags.contains("convoy_lock"), "{tags}");
}

/// Parses folded lines: (stack, weight).
fn folded_lines(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .map(|l| {
            let (stack, w) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            (
                stack.to_string(),
                w.parse().unwrap_or_else(|_| panic!("bad weight {l:?}")),
            )
        })
        .collect()
}

#[test]
fn folded_total_is_the_reports_wait_total_and_the_flamegraph_names_worker() {
    for (fixture, function) in [
        ("convoy", "worker"),
        ("cond_queue", "consumer"),
        ("sem_pool", "worker"),
    ] {
        let run = run_both(fixture, &[]);
        let a = run.analyze();
        let total = report_wait_total(&a.log(0));
        let file = export(run.single_log(), "folded", &[]);
        let text = std::fs::read_to_string(&file).expect("read folded");
        let lines = folded_lines(&text);
        let sum: u64 = lines.iter().map(|(_, w)| w).sum();
        assert_eq!(sum, total, "{fixture}: folded total vs report:\n{text}");
        assert!(
            lines
                .iter()
                .any(|(s, _)| s.split(';').any(|f| f == function)),
            "{fixture}: no stack through {function}:\n{text}"
        );
        // Root first: the thread entry comes before the function, the object is the leaf.
        for (s, _) in &lines {
            assert!(s.ends_with(']'), "{fixture}: leaf is not an object: {s}");
        }

        let svg = export(run.single_log(), "flamegraph", &[]);
        let svg = std::fs::read_to_string(&svg).expect("read svg");
        // inferno's SVG declares its DOCTYPE.
        let opts = roxmltree::ParsingOptions {
            allow_dtd: true,
            ..roxmltree::ParsingOptions::default()
        };
        let doc = roxmltree::Document::parse_with_options(&svg, opts).expect("flame graph is XML");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let named = doc
            .descendants()
            .filter_map(|n| n.text())
            .any(|t| t.contains(function));
        assert!(named, "{fixture}: the flame graph does not name {function}");
    }
}

/// A complete slice: start and end (µs), name.
type Slice = (f64, f64, String);

/// Checks the Trace Event JSON: every complete slice of a thread lies inside the slices it
/// overlaps (they nest), and returns the slices by name.
fn check_chrome(file: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(file).expect("read chrome");
    let doc: Value = serde_json::from_str(&text).expect("chrome trace is JSON");
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let mut by_thread: BTreeMap<(u64, u64), Vec<Slice>> = BTreeMap::new();
    let mut names = BTreeMap::new();
    for e in events {
        if e["ph"] != "X" {
            continue;
        }
        let ts = e["ts"].as_f64().expect("ts");
        let dur = e["dur"].as_f64().expect("dur");
        assert!(dur >= 0.0, "{e}");
        let key = (
            e["pid"].as_u64().expect("pid"),
            e["tid"].as_u64().expect("tid"),
        );
        let name = e["name"].as_str().expect("name").to_string();
        *names.entry(name.clone()).or_insert(0) += 1;
        by_thread.entry(key).or_default().push((ts, ts + dur, name));
    }
    const EPS: f64 = 0.002; // µs: the rounding of two decimal fractions
    for (key, mut slices) in by_thread {
        slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<Slice> = Vec::new();
        for s in slices {
            while open.last().is_some_and(|o| o.1 <= s.0 + EPS) {
                open.pop();
            }
            if let Some(parent) = open.last() {
                assert!(
                    s.1 <= parent.1 + EPS,
                    "thread {key:?}: {s:?} overlaps {parent:?} partly"
                );
            }
            open.push(s);
        }
    }
    names
}

#[test]
fn chrome_trace_has_a_track_per_thread_and_no_overlapping_slices() {
    for (fixture, wait) in [
        ("convoy", "Wait: lock"),
        ("sem_pool", "Wait: semaphore"),
        ("rwlock_starve", "Wait: lock"),
    ] {
        let run = run_both(fixture, &[]);
        let a = run.analyze();
        let log = a.log(0);
        let file = export(run.single_log(), "chrome", &[]);
        let names = check_chrome(&file);
        assert_eq!(
            names.get("Thread").copied(),
            Some(log.threads().len()),
            "{fixture}: one lifetime per thread: {names:?}"
        );
        assert!(
            names.get(wait).is_some_and(|&n| n > 0),
            "{fixture}: {names:?}"
        );
    }
}

#[test]
fn chrome_trace_of_a_deadlock_marks_it_on_both_threads() {
    let running = Launch::fixture("abba").spawn();
    running.wait_for_stdout("abba: armed");
    running.poll_log("a deadlock", |log| !log.deadlocks().is_empty());
    let run = running.kill();
    let file = export(run.single_log(), "chrome", &[]);
    check_chrome(&file);
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
    let marks = doc["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"] == "Deadlock")
        .count();
    assert_eq!(marks, 2, "one deadlock mark per thread of the cycle");

    let trace = export(run.single_log(), "perfetto", &[]);
    let text = perfetto_decode(&trace);
    assert!(text.contains("name: \"Deadlock\""), "{text}");
}

#[test]
fn perfetto_trace_decodes_with_protoc_into_interned_wait_slices() {
    for (fixture, wait) in [
        ("convoy", "Wait: lock"),
        ("cond_queue", "Wait: lock"),
        ("sem_pool", "Wait: semaphore"),
    ] {
        let run = run_both(fixture, &[]);
        let a = run.analyze();
        let log = a.log(0);
        let file = export(run.single_log(), "perfetto", &[]);
        let text = perfetto_decode(&file);
        // A field under a number the schema does not have would show as a bare number.
        assert!(
            !text
                .lines()
                .any(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())),
            "{fixture}: unknown fields in the trace:\n{text}"
        );
        let count = |needle: &str| text.matches(needle).count();
        assert_eq!(
            count("type: TYPE_SLICE_BEGIN"),
            count("type: TYPE_SLICE_END"),
            "{fixture}: every slice ends"
        );
        assert_eq!(
            count("thread {"),
            log.threads().len(),
            "{fixture}: one track per thread"
        );
        // Interned: each name once, however many slices use it.
        assert_eq!(count(&format!("name: \"{wait}\"")), 1, "{fixture}:\n{text}");
        assert!(count("name_iid:") > count("event_names {"), "{fixture}");
        assert!(text.contains("\"object\""), "{fixture}: no object argument");
        assert!(
            text.contains(&format!("counter_value: {}", log.hwm())),
            "{fixture}: the highwater counter does not reach {}",
            log.hwm()
        );
        assert!(
            text.contains(&format!("{fixture}.c:")),
            "{fixture}: no creation site"
        );
    }
}

#[test]
fn export_of_what_is_not_a_log_fails_with_a_message_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bogus = dir.path().join("bogus.log");
    std::fs::write(&bogus, b"not a log at all").expect("write");
    let out = dir.path().join("out.pprof");
    for format in ["pprof", "folded", "flamegraph", "chrome", "perfetto"] {
        let o = export_cmd(&[
            "export",
            "--format",
            format,
            "-o",
            out.to_str().expect("utf-8"),
            bogus.to_str().expect("utf-8"),
        ]);
        assert_eq!(o.status.code(), Some(2), "{format}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("waitshim-analyze"), "{format}: {err}");
        assert!(!err.contains("panicked"), "{format}: {err}");
        assert!(!out.exists(), "{format}: output written from no log");
    }
    let o = export_cmd(&["export", "--format", "svg", "-o", "x", "y"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown format"));
    // An output directory that does not exist: an error naming it.
    let run = run_both("convoy", &[]);
    let missing = dir.path().join("no/such/dir/out.json");
    let o = export_cmd(&[
        "export",
        "--format",
        "chrome",
        "-o",
        missing.to_str().expect("utf-8"),
        run.single_log().to_str().expect("utf-8"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no/such/dir"), "{err}");
    // `-o -` writes to stdout, and a device is written to, not renamed over.
    let log = run.single_log().to_str().expect("utf-8");
    let o = export_cmd(&["export", "--format", "folded", "-o", "-", log]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains(";worker;"));
    let o = export_cmd(&["export", "--format", "chrome", "-o", "/dev/null", log]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(Path::new("/dev/null")
        .metadata()
        .is_ok_and(|m| !m.is_file()));
}

/// Every format of one run's log, each read back by its reader: the profiles' totals are the
/// report's wait total with the waits still going on at the end of the log, the traces nest
/// and decode.
fn check_every_format(run: &Run, what: &str) {
    let a = run.analyze();
    let log = a.log(0);
    let total = report_wait_total(&log) + report_unended_total(&log);
    assert!(total > 0, "{what}: no thread waited");
    let path = run.single_log();

    let pprof = export(path, "pprof", &[]);
    let top = go_pprof(&["-top", "-unit=ns", "-sample_index=delay"], &pprof);
    assert!(
        top.contains(&format!("Total samples = {total}ns")),
        "{what}: pprof total is not the report's {total} ns:\n{top}"
    );
    let holders = export(path, "pprof", &["--side", "holders"]);
    go_pprof(&["-top", "-sample_index=delay"], &holders);

    let folded = std::fs::read_to_string(export(path, "folded", &[])).expect("read folded");
    let sum: u64 = folded_lines(&folded).iter().map(|(_, w)| w).sum();
    assert_eq!(sum, total, "{what}: folded total");
    let svg = std::fs::read_to_string(export(path, "flamegraph", &[])).expect("read svg");
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    roxmltree::Document::parse_with_options(&svg, opts).expect("flame graph is XML");

    let names = check_chrome(&export(path, "chrome", &[]));
    assert_eq!(
        names.get("Thread").copied(),
        Some(log.threads().len()),
        "{what}"
    );

    let text = perfetto_decode(&export(path, "perfetto", &[]));
    assert_eq!(
        text.matches("type: TYPE_SLICE_BEGIN").count(),
        text.matches("type: TYPE_SLICE_END").count(),
        "{what}: every perfetto slice ends"
    );
    assert_eq!(
        text.matches("thread {").count(),
        log.threads().len(),
        "{what}"
    );
}

#[test]
fn every_format_reads_back_on_the_condvar_semaphore_rwlock_and_deadlock_fixtures() {
    for fixture in ["cond_queue", "sem_pool", "rwlock_starve"] {
        check_every_format(&run_both(fixture, &[]), fixture);
    }
    let running = Launch::fixture("abba").spawn();
    running.wait_for_stdout("abba: armed");
    running.poll_log("a deadlock and its waits in progress", |log| {
        log.deadlock_waits_listed()
    });
    let run = running.kill();
    check_every_format(&run, "abba (killed while deadlocked)");
    // The two deadlocked threads' waits never end: both profiles have them, each on the lock
    // the thread waits for, from the function that takes it.
    let a = run.analyze();
    assert!(report_unended_total(&a.log(0)) > 0, "no wait in progress");
    let folded = std::fs::read_to_string(export(run.single_log(), "folded", &[])).expect("read");
    for (thread, lock) in [("thread1", "mutex[1]"), ("thread2", "mutex[0]")] {
        assert!(
            folded_lines(&folded).iter().any(|(s, w)| {
                *w > 0
                    && s.split(';').any(|f| f == thread)
                    && s.ends_with(&format!(" {lock}, still waiting at the end of the log]"))
            }),
            "abba: no unended wait of {thread} on {lock}:\n{folded}"
        );
    }
    let pprof = export(run.single_log(), "pprof", &[]);
    let raw = go_pprof(&["-raw"], &pprof);
    let unended = raw
        .lines()
        .filter(|l| {
            l.contains("ended:[not by the end of the log]") && l.contains("object_kind:[mutex]")
        })
        .count();
    assert_eq!(
        unended, 2,
        "abba: one unended sample per deadlocked thread:\n{raw}"
    );
}

/// The values of the Perfetto counter tracks whose names contain `name`, by track name, in
/// time order, from protoc's text of the trace.
fn perfetto_counters(text: &str, name: &str) -> BTreeMap<String, Vec<i64>> {
    let packets = waitshim_tests::perfetto_packets(text);
    let field = |p: &[&str], key: &str| -> Option<String> {
        p.iter()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim_matches('"').to_string())
    };
    let mut tracks: BTreeMap<u64, String> = BTreeMap::new();
    for p in &packets {
        if !p.lines.contains(&"counter {") {
            continue;
        }
        if let (Some(uuid), Some(n)) = (field(&p.lines, "uuid: "), field(&p.lines, "name: ")) {
            if n.contains(name) {
                tracks.insert(uuid.parse().expect("uuid"), n);
            }
        }
    }
    let mut values: BTreeMap<String, Vec<(u64, i64)>> = BTreeMap::new();
    for p in &packets {
        let (Some(track), Some(v)) = (
            field(&p.lines, "track_uuid: "),
            field(&p.lines, "counter_value: "),
        ) else {
            continue;
        };
        if let Some(n) = tracks.get(&track.parse().expect("track_uuid")) {
            let ts = p.ts.expect("timestamp");
            values
                .entry(n.clone())
                .or_default()
                .push((ts, v.parse().expect("value")));
        }
    }
    values
        .into_iter()
        .map(|(n, mut v)| {
            // Stable: the first value of a moment stays first.
            v.sort_by_key(|&(ts, _)| ts);
            (n, v.into_iter().map(|(_, v)| v).collect())
        })
        .collect()
}

/// The values of the Chrome counters whose names contain `name` (their `waiting` argument), by
/// counter name, in time order.
fn chrome_counters(file: &Path, name: &str) -> BTreeMap<String, Vec<i64>> {
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("read")).expect("JSON");
    let mut values: BTreeMap<String, Vec<(f64, i64)>> = BTreeMap::new();
    for e in doc["traceEvents"].as_array().expect("events") {
        let n = e["name"].as_str().unwrap_or_default();
        if e["ph"] != "C" || !n.starts_with("Waiters on") || !n.contains(name) {
            continue;
        }
        let v = e["args"]["waiting"].as_i64().expect("waiting");
        values
            .entry(n.to_string())
            .or_default()
            .push((e["ts"].as_f64().expect("ts"), v));
    }
    values
        .into_iter()
        .map(|(n, mut v)| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (n, v.into_iter().map(|(_, v)| v).collect())
        })
        .collect()
}

#[test]
fn the_convoy_locks_waiters_counter_rises_past_one_and_ends_at_zero_in_perfetto_and_chrome() {
    // The convoy's 8 workers pile up behind the first holder's long hold: several wait at
    // once, never more than the 7 others (the count is not fixed: the holder's sleep, not a
    // barrier, lines them up).
    let run = run_both("convoy", &[]);
    let path = run.single_log();
    let text = perfetto_decode(&export(path, "perfetto", &[]));
    let all = perfetto_counters(&text, "Waiters on");
    assert!(
        !all.is_empty() && all.len() <= 4,
        "one waiters track per hottest object, at most 4: {all:?}"
    );
    let chrome = export(path, "chrome", &[]);
    for (format, counters) in [
        ("perfetto", perfetto_counters(&text, "convoy_lock")),
        ("chrome", chrome_counters(&chrome, "convoy_lock")),
    ] {
        assert_eq!(counters.len(), 1, "{format}: {counters:?}");
        let (name, values) = counters.iter().next().expect("a counter");
        assert!(name.starts_with("Waiters on mutex#"), "{format}: {name}");
        let max = values.iter().copied().max().expect("values");
        assert!(
            (2..=7).contains(&max),
            "{format}: {name} peaks at {max}: {values:?}"
        );
        assert_eq!(values.first(), Some(&0), "{format}: {values:?}");
        assert_eq!(values.last(), Some(&0), "{format}: {values:?}");
        assert!(values.iter().all(|&v| v >= 0), "{format}: {values:?}");
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Under a file size limit (`ulimit -f`) too small for the export, the analyzer is not killed
/// by SIGXFSZ: it says the file is too large, exits with status 2, and leaves no file (the
/// hidden one it wrote first included).
#[test]
fn an_export_past_the_file_size_limit_fails_with_a_message_and_leaves_no_file() {
    let run = Launch::fixture("convoy").arg("4").run();
    run.assert_success();
    let log = run.single_log();
    let dir = tempfile::tempdir().unwrap();
    for format in ["chrome", "perfetto", "html"] {
        let out = dir.path().join(format!("trace.{format}"));
        // Without the limit it is larger than the limit below (512 or 1024 bytes, by shell).
        let o = export_cmd(&[
            "export",
            "--format",
            format,
            "-o",
            out.to_str().unwrap(),
            log.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{format}: {o:?}");
        let size = std::fs::metadata(&out).unwrap().len();
        assert!(size > 4096, "{format}: only {size} bytes");
        std::fs::remove_file(&out).unwrap();

        let o = Command::new("sh")
            .args(["-c", r#"ulimit -f 1 && exec "$0" "$@""#])
            .arg(analyzer_path())
            .args(["export", "--format", format, "-o"])
            .arg(&out)
            .arg(log)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{format}: {:?} {err}", o.status);
        assert!(err.contains("File too large"), "{format}: {err}");
        assert_eq!(
            names_in(dir.path()),
            Vec::<String>::new(),
            "{format}: {err}"
        );
    }
}

/// SIGTERM or SIGINT while an export is being written (here it waits for its input, a FIFO
/// nobody writes) ends the analyzer as before, and removes the file it had begun.
#[test]
fn an_export_ended_by_a_signal_removes_its_unfinished_file() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("waitshim.1.log");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Held open for writing (never written), so that the analyzer's read waits.
        let _writer = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .unwrap();
        let out_dir = dir.path().join("out");
        std::fs::create_dir(&out_dir).unwrap();
        let mut child = Command::new(analyzer_path())
            .args(["export", "--format", "chrome", "-o"])
            .arg(out_dir.join("trace.json"))
            .arg(&fifo)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + waitshim_tests::POLL_DEADLINE;
        while names_in(&out_dir).is_empty() {
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the export began no file");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // SAFETY: kill(2) on the analyzer this test started.
        unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("signal {sig}: the export did not end");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(sig), "{status:?}");
        assert_eq!(names_in(&out_dir), Vec::<String>::new(), "signal {sig}");
    }
}
