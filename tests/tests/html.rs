//! The thread timeline: the sampler's states as slices in the Chrome and Perfetto traces, and
//! `export --format html`, a page that draws them, checked in a real headless Chromium.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;
use waitshim_tests::{analyzer_path, debian_program, run_both, workspace_root, Run};

/// A Debian program, installed when missing, one install at a time.
fn tool(program: &str, package: &str) -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    debian_program(program, package)
}

/// `waitshim-analyze export --format FORMAT -o DIR/out.EXT LOG`: the file written.
fn export(log: &Path, format: &str, ext: &str) -> PathBuf {
    let out = log.with_file_name(format!("out.{ext}"));
    let o = Command::new(analyzer_path())
        .args(["export", "--format", format, "-o"])
        .arg(&out)
        .arg(log)
        .output()
        .expect("run waitshim-analyze export");
    assert!(
        o.status.success(),
        "export --format {format} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// One run of the thread_states fixture (three spinners on one CPU, a reader on a pipe, a
/// locker on a held mutex), shared by the tests of this file.
fn thread_states() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| run_both("thread_states", &[]))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn chrome_trace_shows_each_threads_states_on_a_track_beside_it() {
    let run = thread_states();
    let a = run.analyze();
    let states = &a.log(0).0["thread_states"];
    let file = export(run.single_log(), "chrome", "json");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("chrome is JSON");
    let events = doc["traceEvents"].as_array().expect("events");
    let mut track_names: BTreeMap<u64, String> = BTreeMap::new();
    for e in events.iter().filter(|e| e["name"] == "thread_name") {
        track_names.insert(
            u(&e["tid"]),
            e["args"]["name"].as_str().expect("name").to_string(),
        );
    }
    // Per track: (start, end, name, args), and the time in each state by thread name.
    let mut by_track: BTreeMap<u64, Vec<(f64, f64, String, Value)>> = BTreeMap::new();
    let mut time: BTreeMap<(String, String), f64> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let ts = e["ts"].as_f64().expect("ts");
        let end = ts + e["dur"].as_f64().expect("dur");
        let tid = u(&e["tid"]);
        let name = e["name"].as_str().expect("name").to_string();
        by_track
            .entry(tid)
            .or_default()
            .push((ts, end, name.clone(), e["args"].clone()));
        if e["cat"] == "state" {
            let track = &track_names[&tid];
            *time.entry((track.clone(), name)).or_default() += end - ts;
        }
    }
    // No two slices of one track overlap partly.
    for (tid, mut slices) in by_track.clone() {
        slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<(f64, f64)> = Vec::new();
        for s in &slices {
            while open.last().is_some_and(|o| o.1 <= s.0 + 0.002) {
                open.pop();
            }
            if let Some(p) = open.last() {
                assert!(s.1 <= p.1 + 0.002, "track {tid}: {s:?} overlaps {p:?}");
            }
            open.push((s.0, s.1));
        }
    }
    let ms = |track: &str, state: &str| -> f64 {
        time.iter()
            .filter(|((t, s), _)| t.contains(track) && t.ends_with("states") && s == state)
            .map(|(_, v)| v / 1000.0)
            .sum()
    };
    // The spinners' running time is the kernel's figure the report gives, within one
    // interval; they were ready for the CPU a good part of their lives.
    for i in 1..=3 {
        let name = format!("spinner-{i}");
        let row = states["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .find(|t| t["name"] == name.as_str())
            .expect("spinner row");
        let running = u(&row["running_ns"]) as f64 / 1e6;
        let traced = ms(&format!("\"{name}\""), "Running");
        assert!(
            (traced - running).abs() <= 12.0,
            "{name}: {traced} ms of Running slices, the report says {running} ms: {time:?}"
        );
        assert!(ms(&format!("\"{name}\""), "Runnable") >= 50.0, "{time:?}");
    }
    assert!(ms("\"reader\"", "Wait: I/O") >= 50.0, "{time:?}");
    assert!(ms("\"locker\"", "Wait: lock") >= 50.0, "{time:?}");
    // The reader's wait names its system call and pipe; split slices say they are estimates.
    let reads: Vec<&Value> = by_track
        .values()
        .flatten()
        .filter(|s| s.2 == "Wait: I/O")
        .map(|s| &s.3)
        .collect();
    assert!(
        reads.iter().any(|a| a["syscall"] == "read"
            && a["what"].as_str().is_some_and(|w| w.starts_with("pipe:["))),
        "{reads:?}"
    );
    assert!(
        by_track.values().flatten().any(|s| s.2 == "Runnable"
            && s.3["split"]
                .as_str()
                .is_some_and(|t| t.contains("proportional"))),
        "no estimate said"
    );
    // The machine's idle CPUs as a counter.
    assert!(
        events.iter().any(|e| e["ph"] == "C"
            && e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("Idle CPUs"))),
        "no idle CPUs counter"
    );
}

#[test]
fn perfetto_trace_has_a_states_track_per_thread_and_an_idle_cpu_counter() {
    let run = thread_states();
    let file = export(run.single_log(), "perfetto", "pftrace");
    let protoc = tool("protoc", "protobuf-compiler");
    let dir = workspace_root().join("tests/proto");
    let o = Command::new(protoc)
        .arg(format!("--proto_path={}", dir.display()))
        .args(["--decode", "perfetto.protos.Trace", "perfetto_trace.proto"])
        .stdin(std::fs::File::open(&file).expect("open trace"))
        .output()
        .expect("run protoc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).expect("utf-8");
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())),
        "unknown fields in the trace"
    );
    for name in ["Running", "Runnable", "Wait: lock", "Wait: I/O"] {
        assert_eq!(
            text.matches(&format!("name: \"{name}\"")).count(),
            1,
            "{name} interned once"
        );
    }
    // thread_states has 6 threads: 6 states tracks.
    assert_eq!(text.matches("name: \"States\"").count(), 6, "{text}");
    assert!(
        text.contains("double_counter_value:"),
        "no idle CPUs values"
    );
    let begins = text.matches("type: TYPE_SLICE_BEGIN").count();
    assert_eq!(begins, text.matches("type: TYPE_SLICE_END").count());
}
