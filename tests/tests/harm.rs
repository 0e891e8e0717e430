//! Do no harm: what a program does under the shim is what it does without it, whatever the
//! program does to itself (cancellation, file size limits, closed descriptors, jumps out of
//! signal handlers) and whatever the configuration.

use std::fs;
use std::time::Duration;

use waitshim_tests::{fixture, line_of, run_both, Launch};

/// A thread cancelled while blocked in pthread_mutex_lock (not a cancellation point) takes the
/// mutex, finishes its critical section and unlocks it before the cancellation acts, as
/// natively: cancelled inside the shim, it died holding the mutex and the program hung.
#[test]
fn a_cancel_pending_in_a_blocked_lock_acts_after_the_critical_section() {
    let native = Launch::fixture("cancel_pending").native().arg("lock").run();
    native.assert_success();
    let run = Launch::fixture("cancel_pending")
        .arg("lock")
        .timeout(Duration::from_secs(20))
        .run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert_eq!(
        run.stdout_text(),
        "critical section done\nB cancelled\nmain took m again\n"
    );
}

/// A cancel request reaching a thread in pthread_mutex_timedlock: the timed lock returns
/// ETIMEDOUT first, as natively. The wait-for cycle it was part of (main joins the thread while
/// holding the mutex) is reported as broken by the deadline, not as a deadlock.
#[test]
fn a_cancel_pending_in_a_timed_lock_lets_it_time_out_and_its_cycle_is_no_deadlock() {
    let native = Launch::fixture("cancel_pending")
        .native()
        .arg("timedlock")
        .run();
    native.assert_success();
    let run = Launch::fixture("cancel_pending")
        .arg("timedlock")
        .timeout(Duration::from_secs(20))
        .run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert!(
        run.stdout_text()
            .starts_with("timedlock returned Connection timed out\nB cancelled\n"),
        "{}",
        run.stdout_text()
    );
    let a = run.analyze();
    let log = a.log(0);
    let cycles = log.deadlocks();
    assert_eq!(cycles.len(), 1, "one wait-for cycle: {cycles:?}");
    let broken = &cycles[0]["broken"];
    assert_eq!(broken["ended"], "timed_out", "{broken}");
    assert!(!a.text.contains("\nDEADLOCK"), "{}", a.text);
    assert!(
        a.text.contains("deadlocks: 0 (1 more wait-for cycle broke"),
        "{}",
        a.text
    );
    assert!(
        a.text.contains("WAIT-FOR CYCLES BROKEN BY A DEADLINE (1"),
        "{}",
        a.text
    );
}

/// Under `ulimit -f 512` (KiB), a program whose log would outgrow the limit runs exactly as
/// natively (growing the log past it raised SIGXFSZ, which killed the program); the log keeps
/// what fit and says how much was lost.
#[test]
fn a_file_size_limit_stops_the_log_not_the_program() {
    let limit = 512 * 1024;
    let native = Launch::fixture("log_heavy")
        .native()
        .rlimit(libc::RLIMIT_FSIZE, limit)
        .run();
    native.assert_success();
    let run = Launch::fixture("log_heavy")
        .rlimit(libc::RLIMIT_FSIZE, limit)
        .loud()
        .run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    let size = fs::metadata(run.single_log()).expect("log").len();
    assert!(size <= limit, "log of {size} bytes over the {limit} limit");
    let err = run.stderr_text();
    assert!(
        err.contains("log incomplete (") && err.contains("the file size limit (ulimit -f)"),
        "{err}"
    );
    let a = run.analyze();
    let log = a.log(0);
    let end = &log.run()["end"];
    assert_eq!(end["exit_status"], 0, "{end}");
    let dropped = end["dropped"].as_u64().expect("dropped");
    assert!(dropped > 1000, "dropped {dropped}");
    assert!(
        log.warning_text().contains("the log filled up at"),
        "{}",
        log.warning_text()
    );
    assert!(
        a.text
            .contains(&format!("could not write {dropped} records")),
        "{}",
        a.text
    );
}

/// A file size limit too small for any log: the program runs untraced, one line says why, and
/// no empty log file is left behind.
#[test]
fn a_file_size_limit_too_small_for_a_log_leaves_no_file() {
    let run = Launch::fixture("log_heavy")
        .arg("100")
        .rlimit(libc::RLIMIT_FSIZE, 120 * 1024)
        .loud()
        .run();
    run.assert_success();
    assert_eq!(
        run.stdout_text(),
        "named 100 mutexes, output file 100000 of 100000 bytes right\n"
    );
    assert!(run.logs.is_empty(), "logs left: {:?}", run.logs);
    let err = run.stderr_text();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("the file size limit (ulimit -f) is 122880 bytes; the program runs untraced"),
        "{err}"
    );
}

/// A program that closed stderr and opened its data file on descriptor 2 finds only its own
/// data there: the shim's end-of-run line is not written into it.
#[test]
fn the_shims_line_never_goes_to_a_file_that_took_descriptor_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let run = Launch::fixture("stderr_reuse").arg(&data).loud().run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "data file on descriptor 2\n");
    assert_eq!(fs::read_to_string(&data).expect("data"), "DATA\n");
    assert!(run.stderr.is_empty(), "{}", run.stderr_text());
    assert_eq!(run.logs.len(), 1);
}

/// A policy path naming something that is not a regular file: one line on stderr, the program
/// runs on at once (a FIFO blocked it in open() for ever; /dev/zero grew its memory without
/// bound before main).
#[test]
fn a_policy_path_that_is_not_a_file_is_refused_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("policy.fifo");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (path, what) in [
        ("/dev/zero".into(), "a device"),
        (fifo.clone(), "a FIFO"),
        (dir.path().to_path_buf(), "a directory"),
    ] {
        let run = Launch::fixture("convoy")
            .arg("3")
            .env("WAITSHIM_POLICY", &path)
            .timeout(Duration::from_secs(20))
            .run();
        run.assert_success();
        let err = run.stderr_text();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!(
                "WAITSHIM_POLICY={}: it is {what}, not a file; collecting with the built-in policy",
                path.display()
            )),
            "{err}"
        );
        assert_eq!(run.logs.len(), 1);
    }
}

/// WAITSHIM_LOG naming a device (or a FIFO, or a directory) is refused with one line: no file
/// is created beside it (it made /dev/full.1, a regular file in /dev), and the program runs on.
#[test]
fn a_log_path_naming_a_device_creates_nothing_beside_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let before: Vec<_> = fs::read_dir("/dev")
        .expect("/dev")
        .flatten()
        .map(|e| e.path())
        .collect();
    for (path, what) in [
        ("/dev/full".into(), "a device"),
        (dir.path().to_path_buf(), "a directory"),
    ] {
        let path: std::path::PathBuf = path;
        let run = Launch::fixture("convoy").arg("2").log_to(&path).run();
        run.assert_success();
        let err = run.stderr_text();
        assert!(
            err.contains(&format!(
                "cannot create log {}: it exists and is {what}, not a log file; the program runs untraced",
                path.display()
            )),
            "{err}"
        );
    }
    let after: Vec<_> = fs::read_dir("/dev")
        .expect("/dev")
        .flatten()
        .map(|e| e.path())
        .collect();
    let new: Vec<_> = after.iter().filter(|p| !before.contains(p)).collect();
    assert!(
        !new.iter()
            .any(|p| p.to_string_lossy().starts_with("/dev/full")),
        "created {new:?}"
    );
    assert_eq!(fs::read_dir(dir.path()).expect("dir").count(), 0);
}

/// A log path too long for the file system: the stderr line keeps the reason at its end.
#[test]
fn a_long_log_path_keeps_the_reason_in_the_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let long = dir.path().join("a".repeat(5000));
    let run = Launch::fixture("convoy").arg("2").log_to(&long).run();
    run.assert_success();
    let err = run.stderr_text();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("waitshim: cannot create log "), "{err}");
    assert!(err.contains(" [...] "), "{err}");
    assert!(
        err.trim_end()
            .ends_with("File name too long (os error 36); the program runs untraced"),
        "{err}"
    );
}

/// Waits left by siglongjmp out of a signal handler no longer count: no false deadlock and no
/// phantom waiters.
#[test]
fn waits_left_by_a_jump_out_of_a_signal_handler_do_not_stay_counted() {
    let run = run_both("longjmp_wait", &[]);
    assert_eq!(
        run.stdout_text(),
        "left 4 waits by siglongjmp\ntaker done\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    assert!(log.deadlocks().is_empty(), "{}", a.text);
    assert_eq!(log.hwm(), 1, "{}", a.text);
    let mutex_a = log.object_created_at("longjmp_wait.c", line_of("longjmp_wait.c", "hold-a-lock"));
    assert_eq!(log.counter(mutex_a, "max_waiters"), 1, "{mutex_a}");
    let x = log.object_created_at("longjmp_wait.c", line_of("longjmp_wait.c", "main-holds-x"));
    assert_eq!(log.counter(x, "max_waiters"), 1, "{x}");
    let _ = fixture("longjmp_wait");
}
