//! `waitshim-analyze diff BEFORE AFTER`: two runs of one fixture with different thread counts,
//! matched by creation site (addresses differ), name the object whose contention grew.

use std::process::Command;

use serde_json::Value;
use waitshim_tests::{analyzer_path, line_of, run_both, Launch};

fn diff(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(analyzer_path())
        .arg("diff")
        .args(args)
        .output()
        .expect("run waitshim-analyze diff")
}

#[test]
fn convoy_with_more_threads_names_the_lock_whose_contention_grew() {
    let before = run_both("convoy", &["3"]);
    let after = run_both("convoy", &["8"]);
    let (b, a) = (before.single_log(), after.single_log());
    let created = format!("convoy.c:{}", line_of("convoy.c", "creation-site"));

    let o = diff(&[b.as_os_str(), a.as_os_str(), "--json".as_ref()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).expect("diff --json is JSON");
    assert_eq!(doc["schema"], "waitshim-diff/1");
    let objects = doc["objects"].as_array().expect("objects");
    // The largest growth in wait: the convoy's mutex, matched across the runs by its site.
    let grew = objects
        .iter()
        .max_by_key(|o| {
            o["after"]["wait_total_ns"].as_i64().unwrap_or(0)
                - o["before"]["wait_total_ns"].as_i64().unwrap_or(0)
        })
        .expect("an object");
    let key = grew["key"].as_str().expect("key");
    assert!(
        key.starts_with("mutex convoy_lock") && key.contains(&created),
        "{key}"
    );
    assert_eq!(grew["contention"], "both");
    assert_eq!(grew["before"]["max_waiters"], 2, "{grew}");
    assert_eq!(grew["after"]["max_waiters"], 7, "{grew}");
    assert_eq!(grew["after"]["waits"], 7, "{grew}");
    // Its per-wait events give the distribution: one event per wait, and the tail is the
    // longest wait (a bucket's bound never exceeds the maximum).
    for (run, waits) in [("before", 2), ("after", 7)] {
        let t = &grew[run]["wait_times"];
        assert_eq!(t["events"], waits, "{grew}");
        let (p50, p99, max) = (
            t["p50_at_most_ns"].as_u64().expect("p50"),
            t["p99_at_most_ns"].as_u64().expect("p99"),
            t["max_ns"].as_u64().expect("max"),
        );
        assert!(p50 <= p99 && p99 == max, "{grew}");
    }
    assert_eq!(doc["highwater"]["before"], 2);
    assert_eq!(doc["highwater"]["after"], 7);
    assert!(doc["highwater"]["object_after"]
        .as_str()
        .unwrap_or("")
        .contains(&created));
    assert_eq!(doc["deadlocks"]["change"], 0);
    // The wait site is matched too: the worker's lock call.
    let lock_site = format!("convoy.c:{}", line_of("convoy.c", "lock-site"));
    assert!(
        doc["wait_sites"]
            .as_array()
            .expect("sites")
            .iter()
            .any(|s| s["chain"].as_str().unwrap_or("").contains(&lock_site)
                && s["waits"]["before"] == 2
                && s["waits"]["after"] == 7),
        "{}",
        doc["wait_sites"]
    );
    // Both runs were sampled: thread states are compared.
    assert!(
        doc["thread_states"]["tracked_wait_ns"]["change"]
            .as_i64()
            .unwrap_or(0)
            > 0
    );

    // The text puts it first among the objects, with its figures before → after.
    let o = diff(&[b.as_os_str(), a.as_os_str()]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    let objects = text.split("\nOBJECTS").nth(1).expect("OBJECTS section");
    let first = objects.lines().nth(1).unwrap_or("");
    assert!(
        first.contains("convoy_lock") && first.contains(&created),
        "{text}"
    );
    assert!(objects.contains("max waiters  2 → 7 (+5"), "{text}");
    assert!(objects.contains("p99 wait <="), "{text}");
    assert!(text.contains("highwater: 2 → 7"), "{text}");
}

#[test]
fn diff_of_a_log_with_itself_changes_nothing_and_bad_input_is_an_error() {
    let run = run_both("convoy", &["4"]);
    let log = run.single_log();
    let o = diff(&[log.as_os_str(), log.as_os_str(), "--json".as_ref()]);
    assert!(o.status.success());
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    for obj in doc["objects"].as_array().expect("objects") {
        assert_eq!(obj["before"], obj["after"], "{obj}");
    }
    let not_a_log = run.dir.path().join("not-a-log");
    std::fs::write(&not_a_log, b"hello").expect("write");
    for args in [
        [log.as_os_str(), not_a_log.as_os_str()],
        [not_a_log.as_os_str(), log.as_os_str()],
    ] {
        let o = diff(&args);
        assert_eq!(o.status.code(), Some(2));
        assert!(o.stdout.is_empty());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("not-a-log") && !err.contains("panicked"),
            "{err}"
        );
    }
    // A log cut short still compares, with a warning saying so.
    let cut = run.dir.path().join("cut.log");
    let bytes = std::fs::read(log).expect("read log");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let o = diff(&[cut.as_os_str(), log.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("WARNING: the before log is incomplete"),
        "{text}"
    );
    let missing = run.dir.path().join("missing.log");
    let o = diff(&[log.as_os_str(), missing.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
}

/// The lines of the text's section `title` (up to the blank line that ends it), its heading
/// included.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| !l.starts_with(title))
        .take_while(|l| !l.is_empty())
        .collect()
}

/// The objects of `diff --json` whose key starts with `key`: their `contention`.
fn contention(doc: &Value, key: &str) -> Vec<String> {
    doc["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .filter(|o| o["key"].as_str().unwrap_or("").starts_with(key))
        .map(|o| o["contention"].as_str().expect("contention").to_string())
        .collect()
}

#[test]
fn a_lock_contended_only_before_vanishes_and_one_contended_only_after_is_new() {
    // which_lock makes exactly one of its two mutexes contended: lock_a with `a`, lock_b
    // with `b`.
    let before = run_both("which_lock", &["a"]);
    let after = run_both("which_lock", &["b"]);
    let (b, a) = (before.single_log(), after.single_log());

    let o = diff(&[b.as_os_str(), a.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let new = section(&text, "NEW CONTENTION");
    assert_eq!(new.len(), 2, "{text}");
    assert_eq!(new[0], "NEW CONTENTION (1)", "{text}");
    assert!(
        new[1].starts_with("  mutex lock_b,") && new[1].contains(": 1 waits, "),
        "{text}"
    );
    let gone = section(&text, "VANISHED CONTENTION");
    assert_eq!(gone.len(), 2, "{text}");
    assert_eq!(gone[0], "VANISHED CONTENTION (1)", "{text}");
    assert!(
        gone[1].starts_with("  mutex lock_a,") && gone[1].contains(": was 1 waits, "),
        "{text}"
    );

    let o = diff(&[b.as_os_str(), a.as_os_str(), "--json".as_ref()]);
    assert!(o.status.success());
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(contention(&doc, "mutex lock_b,"), ["new"], "{doc}");
    assert_eq!(contention(&doc, "mutex lock_a,"), ["vanished"], "{doc}");
    let lock = |key: &str| -> Value {
        doc["objects"]
            .as_array()
            .expect("objects")
            .iter()
            .find(|o| o["key"].as_str().unwrap_or("").starts_with(key))
            .cloned()
            .expect("the lock")
    };
    assert_eq!(lock("mutex lock_b,")["before"]["waits"], 0);
    assert_eq!(lock("mutex lock_b,")["after"]["waits"], 1);
    assert_eq!(lock("mutex lock_a,")["before"]["waits"], 1);
    assert_eq!(lock("mutex lock_a,")["after"]["waits"], 0);
}

#[test]
fn a_deadlock_appears_against_a_clean_run_and_disappears_the_other_way() {
    let clean = run_both("which_lock", &["a"]);
    let running = Launch::fixture("abba").spawn();
    running.wait_for_stdout("abba: armed");
    // Its mutexes count as contended through the waits in progress: waited for too.
    running.poll_log("a deadlock and its waits in progress", |log| {
        log.deadlock_waits_listed()
    });
    let abba = running.kill();
    let (c, d) = (clean.single_log(), abba.single_log());

    let o = diff(&[c.as_os_str(), d.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("\ndeadlocks: 0 → 1 (+1)\n"), "{text}");
    // The deadlocked threads' waits never end, yet they are contention the clean run did not
    // have: both of abba's mutexes are new.
    let new = section(&text, "NEW CONTENTION");
    assert!(
        ["mutex[0]", "mutex[1]"]
            .iter()
            .all(|m| new.iter().any(|l| l.starts_with(&format!("  mutex {m},")))),
        "{text}"
    );
    let o = diff(&[c.as_os_str(), d.as_os_str(), "--json".as_ref()]);
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(doc["deadlocks"]["before"], 0, "{}", doc["deadlocks"]);
    assert_eq!(doc["deadlocks"]["after"], 1, "{}", doc["deadlocks"]);
    assert_eq!(doc["deadlocks"]["change"], 1, "{}", doc["deadlocks"]);
    assert_eq!(contention(&doc, "mutex mutex[0],"), ["new"], "{doc}");
    assert_eq!(contention(&doc, "mutex mutex[1],"), ["new"], "{doc}");

    let o = diff(&[d.as_os_str(), c.as_os_str(), "--json".as_ref()]);
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(doc["deadlocks"]["change"], -1, "{}", doc["deadlocks"]);
    assert_eq!(contention(&doc, "mutex mutex[0],"), ["vanished"], "{doc}");
}
