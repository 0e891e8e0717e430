//! Do no harm: what a program does under the shim is what it does without it, whatever the
//! program does to itself (cancellation, file size limits, closed descriptors, jumps out of
//! signal handlers) and whatever the configuration.

use std::fs;
use std::time::Duration;

use waitshim_tests::{fixture, frame_is, line_of, run_both, Launch};

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

/// WAITSHIM_LOG naming a device (or a FIFO, or a directory, or a symbolic link to one) is
/// refused with one line: no file is created beside it (it made /dev/full.1 and /dev/stdout.1,
/// regular files in /dev), and the program runs on.
#[test]
fn a_log_path_naming_a_device_creates_nothing_beside_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let links = tempfile::tempdir().expect("temp dir");
    let to_null = links.path().join("null");
    std::os::unix::fs::symlink("/dev/null", &to_null).expect("symlink");
    let before: Vec<_> = fs::read_dir("/dev")
        .expect("/dev")
        .flatten()
        .map(|e| e.path())
        .collect();
    for (path, what) in [
        ("/dev/full".into(), "a device"),
        (dir.path().to_path_buf(), "a directory"),
        // The program's stdout is the test's pipe.
        ("/dev/stdout".into(), "a symbolic link to a FIFO"),
        (to_null.clone(), "a symbolic link to a device"),
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
        !new.iter().any(|p| {
            let p = p.to_string_lossy();
            p.starts_with("/dev/full") || p.starts_with("/dev/stdout")
        }),
        "created {new:?}"
    );
    assert_eq!(fs::read_dir(dir.path()).expect("dir").count(), 0);
    assert_eq!(fs::read_dir(links.path()).expect("dir").count(), 1);
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

/// fork + exec (execv, execl, execlp), vfork + exec, posix_spawn, a failed exec and an exec of
/// the process itself: the same output as natively, one log per program that ran, the first
/// one ending with the exec, and no log left between a fork and an exec.
#[test]
fn every_way_of_starting_a_program_leaves_one_log_per_program_and_no_leftovers() {
    let native = Launch::fixture("spawn_exec").native().run();
    native.assert_success();
    // By default a traced process's child that ran on one thread and never waited leaves no
    // log: here every child; the program itself and the one its own exec started keep theirs.
    let quiet = Launch::fixture("spawn_exec").run();
    quiet.assert_success();
    assert_eq!(quiet.stdout_text(), native.stdout_text());
    assert_eq!(quiet.logs.len(), 2, "logs: {:?}", quiet.logs);
    // Asked for, every program that ran keeps its log.
    let run = Launch::fixture("spawn_exec")
        .env("WAITSHIM_CHILD_LOGS", "all")
        .run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert!(
        run.stdout_text().ends_with("child self\n"),
        "{}",
        run.stdout_text()
    );
    let a = waitshim_tests::analyze(&run.logs, &[]);
    let logs = a.logs();
    // The first program, the five children that ran, and the program after its own exec.
    assert_eq!(logs.len(), 7, "logs: {:?}", run.logs);
    let mut programs = Vec::new();
    for (i, path) in run.logs.iter().enumerate() {
        let log = a.log(i);
        let size = fs::metadata(path).expect("log").len();
        assert!(size < 64 * 1024, "{}: {size} bytes", path.display());
        let end = &log.run()["end"];
        assert!(end.is_object(), "{}: no end record", path.display());
        let cmdline = log.run()["cmdline"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|a| a.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        programs.push((
            cmdline.clone(),
            end["reason"].as_str().unwrap_or("").to_string(),
        ));
        if end["reason"] == "exec" {
            assert_eq!(end["exec_path"], "/proc/self/exe", "{end}");
        } else if cmdline.ends_with(" self") {
            assert_eq!(end["exit_status"], 0, "{}: {end}", path.display());
        } else {
            assert_eq!(end["exit_status"], 5, "{}: {end}", path.display());
        }
    }
    // Each program by its last argument (the first one by its own name).
    let mut names: Vec<&str> = programs
        .iter()
        .map(|(c, _)| c.rsplit([' ', '/']).next().unwrap_or(""))
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "fork-execl",
            "fork-execlp",
            "fork-execv",
            "posix_spawn",
            "self",
            "spawn_exec",
            "vfork-execv"
        ],
        "{programs:?}"
    );
    assert!(
        a.text.contains("ended:     exec of /proc/self/exe"),
        "{}",
        a.text
    );
}

/// Another interposer of the mutex functions preloaded after the shim sees every call the
/// program makes, once, as when preloaded alone (the shim's trylock-first hid all but a few
/// dozen of 300 000 locks from it), and the shim still counts the mutex.
#[test]
fn a_second_interposer_after_the_shim_sees_every_lock_call() {
    let counting = fixture("libcounting.so");
    let alone = Launch::fixture("lock_count")
        .native()
        .env("LD_PRELOAD", &counting)
        .run();
    alone.assert_success();
    let both = format!(
        "{}:{}",
        waitshim_tests::shim_path().display(),
        counting.display()
    );
    let run = Launch::fixture("lock_count").env("LD_PRELOAD", &both).run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "counter=300000\n");
    let counts = |text: String| -> String {
        text.lines()
            .find(|l| l.starts_with("counting: "))
            .unwrap_or_else(|| panic!("no counts in {text:?}"))
            .to_string()
    };
    assert_eq!(
        counts(alone.stderr_text()),
        "counting: lock 300000 trylock 1 unlock 300001"
    );
    let line = counts(run.stderr_text());
    let number = |word: &str| -> u64 {
        let mut it = line.split_whitespace();
        it.find(|w| *w == word);
        it.next().and_then(|n| n.parse().ok()).expect("count")
    };
    // Exactly the program's calls; the shim's own few (symbol lookups at start) on top.
    assert!((300_000..300_200).contains(&number("lock")), "{line}");
    assert!((1..100).contains(&number("trylock")), "{line}");
    assert!((300_001..300_201).contains(&number("unlock")), "{line}");
    let a = run.analyze();
    let log = a.log(0);
    let m = log.object_created_at("lock_count.c", line_of("lock_count.c", "lock-site"));
    assert_eq!(log.counter(m, "acquisitions"), 300_001, "{m}");
}

/// A holder asked for its live stack by signal can be in a call the kernel never restarts after
/// a handler (a sleep, poll, select, epoll_wait): the call is made again instead of failing with
/// EINTR, which the program never sees natively (4 runs in 12 saw it).
#[test]
fn the_live_stack_signal_never_cuts_a_sleep_short() {
    let policy = tempfile::NamedTempFile::new().expect("policy file");
    fs::write(
        policy.path(),
        r#"{"rules":[{"match":{"kind":"mutex"},"actions":["holder_live_stack"]}]}"#,
    )
    .expect("write policy");
    let running = Launch::fixture("interrupted_sleeps")
        .env("WAITSHIM_POLICY", policy.path())
        .spawn();
    running.wait_for_stdout("sleeper ");
    let tid: i32 = {
        let out = running.stdout_now();
        let line = out
            .lines()
            .find(|l| l.starts_with("sleeper "))
            .expect("tid line");
        line["sleeper ".len()..].trim().parse().expect("tid")
    };
    let pid = running.pid() as i32;
    let signal = libc::SIGRTMAX() - 4;
    let mut sent = 0;
    while !running.stdout_now().contains("done") && sent < 200 {
        // SAFETY: tgkill to a thread of the child, with the signal its shim handles.
        if unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal) } != 0 {
            break;
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = running.wait();
    run.assert_success();
    assert!(sent >= 20, "only {sent} signals sent");
    assert_eq!(
        run.stdout_text()
            .lines()
            .filter(|l| !l.starts_with("sleeper "))
            .collect::<Vec<_>>(),
        [
            "nanosleep rc 0 full",
            "clock_nanosleep rc 0 full",
            "poll rc 0 full",
            "ppoll rc 0 full",
            "select rc 0 full",
            "epoll_wait rc 0 full",
            "done"
        ]
    );
}

/// The same as a real program does it: a holder that computes and sleeps by turns while three
/// threads keep waiting for it and asking for its stack. No call of the holder fails with EINTR.
#[test]
fn asking_a_busy_holder_for_its_stack_never_makes_its_calls_fail() {
    let policy = tempfile::NamedTempFile::new().expect("policy file");
    fs::write(
        policy.path(),
        r#"{"rules":[{"match":{"kind":"mutex"},"actions":["holder_live_stack"]}]}"#,
    )
    .expect("write policy");
    for _ in 0..3 {
        let run = Launch::fixture("livestack_eintr")
            .env("WAITSHIM_POLICY", policy.path())
            .run();
        run.assert_success();
        assert_eq!(run.stdout_text(), "EINTR: 0\n");
        let a = run.analyze();
        let total = a.log(0).0["holder_stacks"]["total"].as_u64().unwrap_or(0);
        assert!(total > 0, "the holder was asked for its stack: {total}");
    }
}

/// Threads with PTHREAD_STACK_MIN stacks contend on every kind of lock: they run as natively (a
/// thread of that size crashed at its start, in the shim's thread registration), and their waits
/// are recorded with their chains (taken from where the thread left its own stack when the shim
/// moved to its spare one).
#[test]
fn threads_with_the_smallest_stacks_run_and_are_profiled() {
    let run = run_both("tiny_stacks", &[]);
    assert_eq!(
        run.stdout_text(),
        "counter=16000, the idle thread returned 42\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let lock = line_of("tiny_stacks.c", "worker-lock");
    let waited_there = log
        .objects()
        .into_iter()
        .filter(|o| o["kind"] == "mutex")
        .flat_map(|o| o["wait_sites"].as_array().into_iter().flatten())
        .any(|w| log.chain_has(&w["chain_id"], "tiny_stacks.c", lock));
    assert!(
        waited_there,
        "no wait recorded at tiny_stacks.c:{lock}\n{}",
        a.text
    );
}

/// How much of a thread's own stack a contended lock takes under the shim, on a 24 KiB stack the
/// program provides, over the thread's whole life (its start, the wait, its end and the
/// destructors of the shim's thread-locals): at most 1 KiB more than natively (the old shim
/// took 12 KiB more, enough to overflow a small stack into the program's memory below it).
#[test]
fn a_contended_lock_on_a_small_stack_takes_little_of_it() {
    let used = |run: &waitshim_tests::Run| -> i64 {
        run.stdout_text()
            .trim()
            .strip_prefix("used ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{}", run.stdout_text()))
    };
    let native = Launch::fixture("stack_use").native().arg("24576").run();
    native.assert_success();
    let run = Launch::fixture("stack_use").arg("24576").run();
    run.assert_success();
    let extra = used(&run) - used(&native);
    assert!(
        extra <= 1024,
        "the shim took {extra} bytes of a 24 KiB stack (native {}, shim {})",
        used(&native),
        used(&run)
    );
    let a = run.analyze();
    let log = a.log(0);
    let m = log
        .objects()
        .into_iter()
        .find(|o| o["kind"] == "mutex")
        .expect("the mutex");
    assert!(
        m["wait_sites"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|w| log.chain_has(
                &w["chain_id"],
                "stack_use.c",
                line_of("stack_use.c", "contended-lock")
            )),
        "{m}"
    );
}

/// Under `ulimit -n 4`, 5 or 6 the program's own opens give what they give natively: the shim
/// keeps no descriptor below the program's range (its log took descriptor 3, and the unwinder's
/// pipe 3 and 4, so the program's open failed), and the contention is recorded all the same.
#[test]
fn a_program_with_almost_no_descriptors_opens_what_it_opens_natively() {
    for limit in [4, 5, 6] {
        let native = Launch::fixture("nofile")
            .native()
            .rlimit(libc::RLIMIT_NOFILE, limit)
            .run();
        native.assert_success();
        let run = Launch::fixture("nofile")
            .rlimit(libc::RLIMIT_NOFILE, limit)
            .run();
        run.assert_success();
        assert_eq!(run.stdout_text(), native.stdout_text(), "ulimit -n {limit}");
        let a = run.analyze();
        let log = a.log(0);
        let m = log
            .objects()
            .into_iter()
            .find(|o| o["kind"] == "mutex")
            .expect("the mutex");
        assert!(log.counter(m, "acquisitions") >= 150_000, "{m}");
    }
}

/// A small disk (a 2 MiB tmpfs) that the log would fill while the program runs: the program runs
/// exactly as natively, the log stops at its share of the disk (a quarter of what was free),
/// keeps what was written before and its end says how much was lost, and the shim's line at
/// exit says the log is incomplete (it said "log written").
#[test]
fn a_full_disk_stops_the_log_not_the_program() {
    let mount = tempfile::tempdir().expect("mount point");
    let dir = mount.path();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(dir)
        .status()
        .expect("run mount (this test mounts a 2 MiB tmpfs: it needs root, as CI has)");
    assert!(status.success(), "mount a tmpfs at {}", dir.display());
    struct Unmount<'a>(&'a std::path::Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(dir);
    let native = Launch::fixture("log_heavy").native().run();
    native.assert_success();
    let run = Launch::fixture("log_heavy")
        .log_to(dir.join("waitshim.%p.log"))
        .loud()
        .run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    let err = run.stderr_text();
    let share = "it reached a 1/4 share of the disk space free when it started";
    assert!(
        err.contains("log incomplete (") && err.contains(share),
        "{err}"
    );
    let logs: Vec<_> = fs::read_dir(dir)
        .expect("tmpfs")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let a = waitshim_tests::analyze(&logs, &[]);
    let log = a.log(0);
    let end = &log.run()["end"];
    assert_eq!(end["exit_status"], 0, "{end}");
    assert!(end["dropped"].as_u64().unwrap_or(0) > 0, "{end}");
    assert!(log.warning_text().contains(share), "{}", log.warning_text());
}

/// A lost wake-up: the program exits while a thread still waits on a condition variable that
/// is never signalled. The report lists that wait as still in progress, with its chain and how
/// long it lasted (it showed a cond with 0 waits).
#[test]
fn a_wait_still_in_progress_at_exit_is_reported_with_its_chain() {
    let run = run_both("lost_wakeup", &[]);
    let a = run.analyze();
    let log = a.log(0);
    let open = &log.0["open_waits"]["waits"];
    let waits = open.as_array().expect("open_waits");
    assert_eq!(waits.len(), 1, "{open}");
    let w = &waits[0];
    assert_eq!(log.thread_name(&w["tid"]), Some("consumer"));
    let cond = log.object(&w["object_id"]);
    assert!(
        frame_is(
            &cond["creation_site"],
            "lost_wakeup.c",
            line_of("lost_wakeup.c", "init-cond")
        ),
        "{cond}"
    );
    assert!(log.chain_has(
        &w["chain_id"],
        "lost_wakeup.c",
        line_of("lost_wakeup.c", "consumer-wait")
    ));
    let waited = w["waited_ns"].as_u64().expect("waited_ns");
    assert!((250_000_000..5_000_000_000).contains(&waited), "{waited}");
    assert!(
        a.text
            .contains("STILL WAITING (1: threads waiting when the program ended)"),
        "{}",
        a.text
    );
}

/// Two single-threaded processes deadlock over mutexes they share: each log shows its thread
/// still waiting for the mutex a thread of the other process holds (a single-threaded process
/// was never flushed: its log did not show the wait), and the two logs read together show the
/// deadlock across the processes.
#[test]
fn a_deadlock_between_two_processes_shows_when_their_logs_are_read_together() {
    let running = Launch::fixture("pshared_deadlock").spawn();
    running.wait_for_stdout("child ");
    let pid_of = |word: &str| -> i32 {
        let out = running.stdout_now();
        let line = out
            .lines()
            .find(|l| l.starts_with(word))
            .unwrap_or_else(|| panic!("no {word} line in {out:?}"));
        line[word.len()..].trim().parse().expect("pid")
    };
    let (parent, child) = (pid_of("parent "), pid_of("child "));
    // Both logs show the waits (each waiting thread writes its own log), or the test fails.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let analysis = loop {
        let logs = running.logs();
        if logs.len() == 2 {
            let a = waitshim_tests::analyze(&logs, &[]);
            // The text and the JSON are two runs of the analyzer: the logs may gain a flush
            // between them, so both must already show the two waits with their holders.
            let open = |i: usize| {
                a.log(i).0["open_waits"]["waits"]
                    .as_array()
                    .is_some_and(|w| w.len() == 1 && w[0]["holder_tid"].as_i64() != Some(0))
            };
            let crossed = a.text.matches("DEADLOCK ACROSS PROCESSES 1 (pids").count() == 2;
            if open(0) && open(1) && crossed {
                break a;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the logs did not show both waits: {logs:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY: killing the fixture's forked child, which would otherwise wait for ever.
    unsafe { libc::kill(child, libc::SIGKILL) };
    let _ = running.kill();
    for i in 0..2 {
        let log = analysis.log(i);
        let pid = log.run()["pid"].as_i64().expect("pid") as i32;
        let other = if pid == parent { child } else { parent };
        let w = &log.0["open_waits"]["waits"][0];
        assert_eq!(w["holder_tid"], other, "pid {pid}: {w}");
        assert_eq!(w["holder_in_process"], false, "{w}");
        let tag = if pid == parent {
            "parent-waits-b"
        } else {
            "child-waits-a"
        };
        assert!(
            log.chain_has(
                &w["chain_id"],
                "pshared_deadlock.c",
                line_of("pshared_deadlock.c", tag)
            ),
            "pid {pid}: {w}"
        );
        let cross = log.0["cross_process_deadlocks"].as_array().expect("cross");
        assert_eq!(cross.len(), 1, "pid {pid}: {cross:?}");
        let pids: Vec<i64> = cross[0]["waits"]
            .as_array()
            .expect("waits")
            .iter()
            .map(|w| w["pid"].as_i64().unwrap_or(0))
            .collect();
        assert_eq!(pids.len(), 2);
        assert!(pids.contains(&i64::from(parent)) && pids.contains(&i64::from(child)));
    }
    assert_eq!(
        analysis
            .text
            .matches("DEADLOCK ACROSS PROCESSES 1 (pids")
            .count(),
        2,
        "{}",
        analysis.text
    );
}

/// A program that keeps many mutexes, each used by one thread (a lock per row, per connection,
/// per request): the shim's memory per mutex stays in tens of bytes (the fixture measures its
/// own resident size). It was about 730 bytes, 1.17 GB for a million mutexes against 40 MB
/// natively; then 92 with the registry holding (address, entry) pairs; 79 since it holds the
/// entries alone. And every one is still counted in the report.
#[test]
fn many_mutexes_used_by_one_thread_cost_tens_of_bytes_each() {
    let per_mutex = |run: &waitshim_tests::Run| -> i64 {
        let err = run.stderr_text();
        let line = err
            .lines()
            .find_map(|l| l.strip_prefix("bytes per mutex: "))
            .unwrap_or_else(|| panic!("no figure in: {err}"));
        line.trim().parse().unwrap()
    };
    let native = Launch::fixture("many_objects").native().arg("200000").run();
    native.assert_success();
    let run = Launch::fixture("many_objects").arg("200000").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert_eq!(run.stdout_text(), "locked 200000 of 200000\n");
    let (n, s) = (per_mutex(&native), per_mutex(&run));
    assert!(
        s - n < 100,
        "the shim's memory per mutex: {} bytes (natively {n})",
        s - n
    );
    let text = run.analyze().text;
    let counts = text
        .lines()
        .find_map(|l| l.strip_prefix("objects:"))
        .unwrap_or_else(|| panic!("{text}"));
    let numbers: Vec<u64> = counts
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    // Tracked, contended, short-lived; the thread joined may be among them.
    let all = numbers[0] + numbers.get(2).copied().unwrap_or(0);
    assert!(
        (200_000..=200_001).contains(&all),
        "every mutex counted: {counts}"
    );
}

/// The allocators programs bring: each preloaded beside the shim, in either order.
fn allocators() -> Vec<(String, String)> {
    let debian = |file: &str, package: &str| {
        waitshim_tests::debian_file(
            &std::path::Path::new("/usr/lib/x86_64-linux-gnu").join(file),
            package,
        )
        .display()
        .to_string()
    };
    vec![
        (
            "a mutex-serialised malloc".into(),
            fixture("libreentry.so").display().to_string(),
        ),
        (
            "jemalloc".into(),
            debian("libjemalloc.so.2", "libjemalloc2"),
        ),
        (
            "tcmalloc".into(),
            debian("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
        ),
        (
            "mimalloc".into(),
            debian("libmimalloc.so.2", "libmimalloc2.0"),
        ),
    ]
}

/// A program that brings its own allocator (redis brings jemalloc) runs under the shim exactly
/// as natively, the shim preloaded first or second, through contention, thread churn and forks:
/// the shim's own work never allocates from the program's heap. jemalloc's first lock, taken
/// while it set itself up, hung every such program at start-up; `fixtures/reentry_malloc.c`
/// aborts at once if anything re-enters its malloc while its lock is held.
#[test]
fn a_program_with_its_own_allocator_runs_as_natively_beside_the_shim() {
    let shim = waitshim_tests::shim_path().display().to_string();
    for (name, lib) in allocators() {
        let native = Launch::fixture("alloc_stress")
            .native()
            .env("LD_PRELOAD", &lib)
            .run();
        native.assert_success();
        for order in [format!("{shim} {lib}"), format!("{lib} {shim}")] {
            for _ in 0..3 {
                let run = Launch::fixture("alloc_stress")
                    .env("LD_PRELOAD", &order)
                    .timeout(Duration::from_secs(60))
                    .run();
                run.assert_success();
                assert_eq!(
                    run.stdout_text(),
                    native.stdout_text(),
                    "{name}, LD_PRELOAD={order}"
                );
                // The parent's log: the workers' 80 000 rounds, the 200 short threads and the
                // 20 children's reaping each took the shared mutex once.
                let parent = format!("waitshim.{}.log", run.pid);
                let logs: Vec<_> = run.logs.iter().filter(|l| l.ends_with(&parent)).collect();
                assert_eq!(logs.len(), 1, "{name}: {:?}", run.logs);
                let a = waitshim_tests::analyze(&logs, &[]);
                let log = a.log(0);
                let most = log
                    .objects()
                    .iter()
                    .map(|o| log.counter(o, "acquisitions"))
                    .max();
                assert_eq!(
                    most,
                    Some(80_000 + 200 + 20),
                    "{name}, LD_PRELOAD={order}: the program's mutex is tracked"
                );
            }
        }
        let t = Launch::program("/bin/true")
            .env("LD_PRELOAD", format!("{lib} {shim}"))
            .timeout(Duration::from_secs(20))
            .run();
        t.assert_success();
        assert_eq!(t.logs.len(), 1, "{name}: /bin/true leaves its log");
    }
}
