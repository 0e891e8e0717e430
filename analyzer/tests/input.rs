//! What the analyzer makes of inputs it was not written for: records of a newer shim, two logs
//! joined in one file.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;
use waitshim_analyze::source::live::Follower;
use waitshim_analyze::top::state::{LiveState, Totals};
use waitshim_analyze::{analyze_bytes, json_report, text_report, Options};
use waitshim_format::*;

fn no_symbols() -> Options {
    Options {
        symbols: false,
        ..Options::default()
    }
}

fn counters(object_id: u64, contended: u64) -> Record {
    Counters {
        object_id,
        ns: T0 + 500 * MS,
        acquisitions: 10 * contended,
        contended,
        wait_total_ns: contended * MS,
        max_waiters: 2,
        ..Counters::default()
    }
    .into()
}

/// What a shim of a newer minor version writes: a counters record with 44 bytes of fields this
/// analyzer does not know appended, and a record of a type it does not know at all.
fn newer_frames() -> Vec<u8> {
    let mut bytes = raw_frame(10, &extended_body(&counters(1, 4), 44));
    bytes.extend(raw_frame(999, &[7; 61]));
    bytes
}

fn warning_kinds(j: &Value) -> Vec<String> {
    j["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["kind"].as_str().map(str::to_string))
        .collect()
}

fn analyzer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_waitshim-analyze"))
}

#[test]
fn records_of_a_newer_shim_are_stepped_over_without_damage() {
    let mut b = LogBuilder::started("/nonexistent/app", &["app"]);
    b.bytes[10] = 9; // minor version 9: newer than this analyzer
    b.mutex(1, 0x7000, 0).mutex(2, 0x8000, 0);
    b.bytes.extend(newer_frames());
    b.push(counters(2, 3));
    b.end(900 * MS, 1);

    let a = analyze_bytes(&b.bytes, Path::new("newer.log")).expect("a log");
    let j = json_report(&a, &no_symbols());
    assert_eq!(j["damage"]["stretches"], 0, "{j:#}");
    assert_eq!(j["ending"], "clean");
    assert_eq!(j["records_read"], 7);
    let kinds = warning_kinds(&j);
    assert!(kinds.contains(&"unknown-records".to_string()), "{kinds:?}");
    assert!(!kinds.contains(&"damage".to_string()), "{kinds:?}");
    // The extended record is read for the fields this analyzer knows; the one after it too.
    assert_eq!(j["objects"][0]["counters"]["contended"], 4);
    assert_eq!(j["objects"][1]["counters"]["contended"], 3);
    let t = text_report(&a, &no_symbols());
    assert!(!t.contains("damaged"), "{t}");
    assert!(
        t.contains("1 records of types this analyzer does not know were skipped"),
        "{t}"
    );
}

#[test]
fn top_following_a_growing_log_steps_over_records_of_a_newer_shim() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("growing.log");
    // The shim maps its file ahead of what it has written: the log ends in zeros.
    let mut b = LogBuilder::started("/nonexistent/app", &["app"]);
    b.mutex(1, 0x7000, 0).mutex(2, 0x8000, 0);
    let written = b.bytes.len() as u64;
    let mut bytes = b.bytes.clone();
    bytes.resize(bytes.len() + (64 << 10), 0);
    std::fs::write(&path, &bytes).expect("write");

    let mut follower = Follower::open(&path).expect("a log");
    let mut state = LiveState::new();
    follower
        .poll(true, u64::MAX, |r| state.add(r))
        .expect("poll");
    assert_eq!(follower.summary().records, 3);

    // The program goes on and writes, in place, records of its newer format; later one this
    // analyzer knows in full. Each look resumes where the previous one stopped.
    let newer = newer_frames();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    file.seek(SeekFrom::Start(written)).expect("seek");
    file.write_all(&newer).expect("write");
    follower
        .poll(true, u64::MAX, |r| state.add(r))
        .expect("poll");
    assert_eq!(follower.summary().records, 5);
    assert_eq!(follower.offset(), written + newer.len() as u64);
    let mut known = LogBuilder::new_empty();
    known.push(counters(2, 3));
    file.write_all(&known.bytes).expect("write");
    follower
        .poll(true, u64::MAX, |r| state.add(r))
        .expect("poll");
    assert_eq!(follower.summary().damage_count, 0, "no damage reported");
    assert_eq!(follower.summary().records, 6);
    assert_eq!(Totals::of(state.object(1).expect("kept")).contended, 4);
    assert_eq!(Totals::of(state.object(2).expect("kept")).contended, 3);

    // The run ends: `top --once` shows it, without damage.
    let mut end = LogBuilder::new_empty();
    end.end(900 * MS, 1);
    file.write_all(&end.bytes).expect("write");
    let out = analyzer()
        .args(["top", "--once", "--no-symbols"])
        .arg(&path)
        .output()
        .expect("run top");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(screen.contains("mutex#1"), "{screen}");
    assert!(!screen.contains("damaged"), "{screen}");
}

#[test]
fn two_logs_joined_with_cat_are_reported_as_the_first_with_a_warning() {
    let mut first = convoy_log();
    first.end(3000 * MS, 7);
    let mut second = LogBuilder::started("/nonexistent/other", &["other"]);
    for tid in 1000..1100 {
        second.thread(tid, "");
    }
    second.end(100 * MS, 0);
    let at = first.bytes.len();
    let mut joined = first.bytes.clone();
    joined.extend(&second.bytes);

    let a = analyze_bytes(&joined, Path::new("joined.log")).expect("a log");
    let j = json_report(&a, &no_symbols());
    assert_eq!(j["run"]["threads_seen"], 9, "the first run's threads only");
    assert_eq!(j["run"]["duration_ns"], 3000 * MS);
    assert_eq!(j["damage"]["stretches"], 0);
    let w = j["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|w| w["kind"] == "next-log")
        .unwrap_or_else(|| panic!("no next-log warning: {:#}", j["warnings"]));
    assert_eq!(w["offset"], at);
    let t = text_report(&a, &no_symbols());
    let line = format!(
        "WARNING: another log starts at offset {at} (logs joined with cat?): this is the report \
         of the first one only; read the second with `tail -c +{} FILE > second.log`",
        at + 1
    );
    assert!(t.contains(&line), "{t}");
    // What the warning says to do reads the second log.
    let b = analyze_bytes(&joined[at..], Path::new("second.log")).expect("a log");
    assert_eq!(json_report(&b, &no_symbols())["run"]["threads_seen"], 100);

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("joined.log");
    std::fs::write(&path, &joined).expect("write");
    let out = analyzer()
        .args(["top", "--once", "--no-symbols"])
        .arg(&path)
        .output()
        .expect("run top");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        screen.contains(&format!("another log starts at offset {at}")),
        "{screen}"
    );
    assert!(!screen.contains("damaged"), "{screen}");
}

/// A log whose one module is the file at `path`, with an object created in it.
fn log_naming_module(path: &str) -> LogBuilder {
    let mut b = LogBuilder::started("/nonexistent/app", &["app"]);
    b.push(Module {
        module_id: 1,
        base: APP_BASE,
        build_id: vec![1; 20],
        path: path.into(),
        segments: vec![Segment {
            vaddr: 0,
            memsz: 0x10_0000,
        }],
    });
    b.chain(1, &[APP_BASE + 0x1234]);
    b.mutex(1, 0x7000, 1).counters(1, 10, 2, 5 * MS);
    b.end(900 * MS, 1);
    b
}

#[test]
fn module_paths_that_are_not_regular_files_are_named_and_never_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let zero_link = dir.path().join("libzero.so");
    std::os::unix::fs::symlink("/dev/zero", &zero_link).expect("symlink");
    let subdir = dir.path().join("lib");
    std::fs::create_dir(&subdir).expect("mkdir");
    let cases = [
        ("/dev/zero".to_string(), "a character device"),
        ("/dev/urandom".to_string(), "a character device"),
        (fifo.display().to_string(), "a FIFO"),
        (zero_link.display().to_string(), "a character device"),
        (subdir.display().to_string(), "a directory"),
    ];
    for (path, what) in cases {
        let log = log_naming_module(&path).write(dir.path(), "crafted.log");
        let why = format!("{path}: not a regular file but {what}: not opened");
        for mode in ["--json", "--sort=hwm"] {
            let r = run_analyzer(
                &[mode.as_ref(), log.as_os_str()],
                std::time::Duration::from_secs(20),
            );
            assert_eq!(r.code, Some(0), "{path}: {}", r.stderr);
            assert!(r.stdout.contains(&why), "{path}:\n{}", r.stdout);
            assert!(r.max_rss_kb < 64 << 10, "{path}: {} KiB", r.max_rss_kb);
        }
        let r = run_analyzer(
            &["top".as_ref(), "--once".as_ref(), log.as_os_str()],
            std::time::Duration::from_secs(20),
        );
        assert_eq!(r.code, Some(0), "{path}: {}", r.stderr);
        assert!(r.stdout.contains("mutex#1"), "{path}:\n{}", r.stdout);
    }
}

#[test]
fn a_module_file_that_is_not_elf_is_named_with_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A file that claims to be empty and reads as a process's memory.
    let log = log_naming_module("/proc/self/mem").write(dir.path(), "crafted.log");
    let r = run_analyzer(
        &["--json".as_ref(), log.as_os_str()],
        std::time::Duration::from_secs(20),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let j: Value = serde_json::from_str(&r.stdout).expect("JSON");
    let s = &j["logs"][0]["symbols"][0];
    assert_eq!(s["path"], "/proc/self/mem");
    assert_eq!(s["ok"], false);
    assert!(
        s["status"]
            .as_str()
            .is_some_and(|t| t.starts_with("not a readable ELF file")),
        "{s}"
    );
}

#[test]
fn oversized_names_texts_and_lists_are_cut_and_the_limits_warning_counts_them() {
    let mut b = LogBuilder::started("/nonexistent/app", &["app"]);
    b.mutex(1, 0x7000, 0);
    b.push(ThreadName {
        tid: 100,
        ns: T0,
        name: "n".repeat(100_000),
    });
    b.push(Note {
        ns: T0,
        level: note_level::WARNING,
        text: "x".repeat(900_000),
    });
    b.push(Deadlock {
        ns: T0,
        detected_by: 1,
        cycle: (0..5000)
            .map(|i| DeadlockEdge {
                tid: i,
                object_id: u64::from(i),
                wait_chain: 0,
                holder_tid: i + 1,
            })
            .collect(),
    });
    b.push(Module {
        module_id: 1,
        base: APP_BASE,
        build_id: vec![7; 1000],
        path: "/nonexistent/app".into(),
        segments: vec![Segment { vaddr: 0, memsz: 1 }; 1000],
    });
    let a = analyze_bytes(&b.bytes, Path::new("big.log")).expect("a log");
    assert_eq!(
        a.model
            .threads
            .get(&100)
            .and_then(|t| t.name.as_ref())
            .map(String::len),
        Some(256)
    );
    assert_eq!(a.model.notes[0].text.len(), 4096);
    assert_eq!(a.model.deadlocks[0].cycle.len(), 1024);
    assert_eq!(a.model.modules[&1].segments.len(), 64);
    assert_eq!(a.model.modules[&1].build_id.len(), 64);
    let t = text_report(&a, &no_symbols());
    assert!(
        t.contains("4 records with a name, path, text or list cut"),
        "{t}"
    );
    assert!(
        t.contains("... 960 more threads of the cycle not shown (all are in the JSON report)"),
        "{t}"
    );
}

#[test]
fn records_of_a_newer_shim_written_in_two_halves_are_read_whole_by_a_follower_and_the_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("appended.log");
    let mut b = LogBuilder::started("/nonexistent/app", &["app"]);
    b.bytes[10] = 9; // minor version 9: newer than this analyzer
    b.mutex(1, 0x7000, 0).mutex(2, 0x8000, 0);
    let written = b.bytes.len() as u64;
    std::fs::write(&path, &b.bytes).expect("write");
    let mut follower = Follower::open(&path).expect("a log");
    let mut state = LiveState::new();
    let poll = |follower: &mut Follower, state: &mut LiveState| {
        follower
            .poll(true, u64::MAX, |r| state.add(r))
            .expect("poll");
    };
    poll(&mut follower, &mut state);
    assert_eq!(follower.summary().records, 3);

    // The file grows by appending, and a look comes while the first (extended) frame is only
    // half written: nothing is read of it, and nothing counts as damage.
    let newer = newer_frames();
    let (first_half, rest) = newer.split_at(50);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open");
    file.write_all(first_half).expect("write");
    poll(&mut follower, &mut state);
    assert_eq!(follower.summary().records, 3);
    assert_eq!(
        follower.offset(),
        written,
        "waits at the half-written frame"
    );
    assert_eq!(follower.summary().damage_count, 0);

    // The rest arrives, then a record this analyzer knows in full and the end of the run.
    file.write_all(rest).expect("write");
    let mut known = LogBuilder::new_empty();
    known.push(counters(2, 3));
    known.end(900 * MS, 1);
    file.write_all(&known.bytes).expect("write");
    poll(&mut follower, &mut state);
    let live = follower.summary();
    assert_eq!((live.records, live.unknown_records), (7, 1));
    assert_eq!(live.damage_count, 0, "no damage reported");
    assert_eq!(Totals::of(state.object(1).expect("kept")).contended, 4);
    assert_eq!(Totals::of(state.object(2).expect("kept")).contended, 3);
    assert!(state.run_end().is_some());

    // The report of the same file reads it the same way.
    let a = waitshim_analyze::analyze(&path).expect("a log");
    assert_eq!(
        (
            a.summary.records,
            a.summary.unknown_records,
            a.summary.damage_count
        ),
        (7, 1, 0)
    );
    assert_eq!(a.summary.end_offset, live.end_offset);
    let j = json_report(&a, &no_symbols());
    assert_eq!(j["objects"][0]["counters"]["contended"], 4);
    assert_eq!(j["objects"][1]["counters"]["contended"], 3);
}
