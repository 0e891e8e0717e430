//! What the report says about the run itself is true, whatever the program did to itself: how it
//! ended, whether it still runs, which threads it had, over which span its thread states hold,
//! and the names it chose, printed so that they cannot pass for the report's own lines.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use waitshim_format::Record;
use waitshim_tests::{
    analyze, analyzer_path, fixture, frame_is, line_of, rewrite_log, shim_path, skip_or_fail,
    Launch, POLL_DEADLINE,
};

#[test]
fn a_sandbox_that_refuses_the_logs_last_cut_still_gets_one_statement_that_the_run_exited_0() {
    let native = Launch::fixture("seccomp_sandbox")
        .native()
        .arg("refuse")
        .run();
    let run = Launch::fixture("seccomp_sandbox").arg("refuse").run();
    native.assert_success();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    let a = run.analyze();
    let log = a.log(0);
    assert_eq!(log.run()["end"]["reason"], "exit", "run: {}", log.run());
    assert!(
        a.text.contains("\nended:     exit status 0\n"),
        "text report:\n{}",
        a.text
    );
    // The space the shim reserved is still at the end of the file (its ftruncate was refused):
    // said as such, never as a run without an end record.
    assert_eq!(log.0["ending"], "unwritten", "{}", log.warning_text());
    let warnings = log.warning_text();
    assert!(
        !warnings.contains("no end record") && !warnings.contains("without running its exit"),
        "{warnings}"
    );
    assert!(
        log.warnings().iter().any(|w| w["kind"] == "unwritten-tail"
            && w["message"]
                .as_str()
                .unwrap()
                .contains("has its end record")),
        "{warnings}"
    );
}

#[test]
fn a_process_killed_by_its_seccomp_filter_is_said_to_have_ended_without_exit_handlers() {
    use std::os::unix::process::ExitStatusExt;
    let native = Launch::fixture("seccomp_sandbox")
        .native()
        .arg("kill")
        .run();
    let run = Launch::fixture("seccomp_sandbox").arg("kill").run();
    assert_eq!(native.status.signal(), Some(libc::SIGSYS));
    assert_eq!(run.status.signal(), Some(libc::SIGSYS));
    let a = run.analyze();
    let log = a.log(0);
    assert!(log.run()["end"].is_null(), "run: {}", log.run());
    assert_eq!(
        log.run()["no_end"],
        "no_exit_handlers",
        "run: {}",
        log.run()
    );
    let ended: Vec<&str> = a.text.lines().filter(|l| l.starts_with("ended:")).collect();
    assert_eq!(ended.len(), 1, "text report:\n{}", a.text);
    assert!(
        ended[0].contains("no exit record") && ended[0].contains("seccomp filter"),
        "{}",
        ended[0]
    );
    assert!(
        log.warning_text().contains("SIGSYS of a seccomp filter"),
        "{}",
        log.warning_text()
    );
}

/// `waitshim-analyze --json LOG` run as user and group `uid` (nobody: 65534), for what another
/// user may see of `/proc`; the log's report.
fn json_report_as(uid: u32, log: &Path) -> Value {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(analyzer_path());
    cmd.arg("--json").arg(log);
    // SAFETY: between fork and exec the closure only makes the async-signal-safe calls
    // setgroups, setgid and setuid.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run waitshim-analyze as another user");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    v["logs"][0].clone()
}

#[test]
fn a_log_whose_pid_now_belongs_to_another_process_is_not_said_to_be_still_running() {
    // A run that ended without an end record (a raw exit_group), its log given the pid of a
    // process that lives now: a `sleep` started after it.
    let run = Launch::fixture("raw_exit").run();
    assert_eq!(run.status.code(), Some(3));
    let mut sleeper = Command::new("sleep")
        .arg("60")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("waitshim.crafted.log");
    let pid = sleeper.id();
    rewrite_log(run.single_log(), &log, |r| match r {
        Record::RunStart(mut s) => {
            s.pid = pid;
            Some(Record::RunStart(s))
        }
        r => Some(r),
    });
    let said = |log: &Value, text: &str| {
        assert_eq!(log["run"]["pid"], pid);
        assert_eq!(log["run"]["no_end"], "no_exit_handlers", "{}", log["run"]);
        assert!(!text.contains("still running"), "{text}");
    };
    // The user who owns the sleeper reads its mappings: the log is not among them.
    let a = analyze(&[&log], &[]);
    said(a.log(0).0, &a.text);
    // Another user cannot read them: the sleeper started after the run, so it is not the
    // program either.
    if unsafe { libc::geteuid() } == 0 {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();
        let as_nobody = json_report_as(65534, &log);
        said(&as_nobody, &as_nobody["warnings"].to_string());
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// The `unshare` arguments that give a command a PID namespace of its own (as root, or in a
/// user namespace of its own), or None where neither is allowed.
fn pid_namespace() -> Option<Vec<&'static str>> {
    let plain = vec!["--pid", "--fork", "--kill-child"];
    let mut user = vec!["--user", "--map-root-user"];
    user.extend(&plain);
    [plain, user].into_iter().find(|args| {
        Command::new("unshare")
            .args(args)
            .arg("true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The processes running `exe`.
fn processes_of(exe: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            (std::fs::read_link(e.path().join("exe")).ok()? == exe).then_some(pid)
        })
        .collect()
}

#[test]
fn a_program_in_its_own_pid_namespace_is_found_running_and_once_killed_is_not() {
    let Some(unshare) = pid_namespace() else {
        skip_or_fail(
            "a_program_in_its_own_pid_namespace_is_found_running_and_once_killed_is_not",
            "unshare cannot make a PID namespace here",
        );
        return;
    };
    let program: PathBuf = fixture("sigkill");
    // Only the program runs under the shim (`env` sets it up inside the namespace): pid 1
    // there, so its log is waitshim.1.log.
    let mut launch = Launch::program("unshare").native();
    for a in unshare {
        launch = launch.arg(a);
    }
    let running = launch
        .arg("env")
        .arg(format!("LD_PRELOAD={}", shim_path().display()))
        .arg("WAITSHIM_QUIET=1")
        .arg("WAITSHIM_LOG=waitshim.%p.log")
        .arg(&program)
        .spawn();
    running.wait_for_stdout("ready");
    let logs = running.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let host_pids = processes_of(&program);
    assert_eq!(host_pids.len(), 1, "{host_pids:?}");
    let a = analyze(&logs, &[]);
    let log = a.log(0);
    assert_eq!(log.run()["pid"], 1);
    assert_eq!(log.run()["no_end"], "running", "{}", log.run());
    assert!(
        a.text.contains(&format!(
            "ended:     no exit record yet: process {} is still running (pid 1 in its own PID \
             namespace)",
            host_pids[0]
        )),
        "{}",
        a.text
    );

    // SIGKILL to `unshare` kills the namespace's first process, the program.
    let run = running.kill();
    let deadline = Instant::now() + POLL_DEADLINE;
    while !processes_of(&program).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the program outlived its namespace"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let a = analyze(&run.logs, &[]);
    let log = a.log(0);
    assert_eq!(log.run()["no_end"], "no_exit_handlers", "{}", log.run());
    assert!(!a.text.contains("still running"), "{}", a.text);
}

/// Fails unless `out` (a plain-text output) shows program-chosen strings only escaped: no
/// terminal control byte, and no line a CI runner would take for a workflow command.
fn assert_plain(what: &str, out: &str) {
    assert!(
        !out.contains(['\u{1b}', '\u{7}', '\r']),
        "{what}: a control character passed through:\n{out}"
    );
    let commands: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("::"))
        .collect();
    assert!(commands.is_empty(), "{what}: {commands:?}\n{out}");
}

#[test]
fn names_the_program_chose_reach_plain_text_outputs_escaped_and_json_as_they_are() {
    let run = Launch::fixture("hostile_names")
        .arg("\n::warning::arg\u{1b}[2J")
        .run();
    run.assert_success();
    let log = run.single_log();
    let shown = r#""ok\x0a::error title=x::pwned\x1b]0;title\x07""#;

    let a = run.analyze();
    assert_plain("report", &a.text);
    assert!(a.text.contains(&format!("mutex#1 {shown}")), "{}", a.text);
    assert!(a.text.contains(r#""\x0a::error::main""#), "{}", a.text);
    // The worker's name: in THREADS always (THREAD STATES quotes it only if the sampler saw the
    // short-lived worker).
    assert!(a.text.contains(r#"\x1b[31mred"#), "{}", a.text);
    assert!(
        a.text.contains(r#"program:   "#) && a.text.contains(r#"\x0a::warning::arg\x1b[2J"#),
        "{}",
        a.text
    );
    // JSON escapes in its own way: the names are there as the program gave them.
    let l = a.log(0);
    let table = l
        .objects()
        .into_iter()
        .find(|o| o["kind"] == "mutex")
        .expect("the mutex");
    assert_eq!(
        table["name"],
        "ok\n::error title=x::pwned\u{1b}]0;title\u{7}"
    );
    assert!(l.threads().iter().any(|t| t["name"] == "\n::error::main"));

    let analyzer = |args: &[&str]| {
        let o = Command::new(analyzer_path())
            .args(args)
            .output()
            .expect("run waitshim-analyze");
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let path = log.to_str().unwrap();
    let top = analyzer(&["top", "--once", path]);
    assert_plain("top --once", &top);
    assert!(top.contains("mutex#1 \"ok\\x0a::error"), "{top}");
    assert_plain("diff", &analyzer(&["diff", path, path]));
    let gate = analyzer(&["check", "--fail-if", "hwm >= 1", path]);
    assert_plain("check", &gate);
    assert!(gate.contains(&format!("mutex#1 {shown}")), "{gate}");

    // `run` in a GitHub Actions job: the runner reads what it prints, where a line starting
    // `::` is a workflow command.
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut ran = Command::new(analyzer_path());
    ran.args(["run", "--"])
        .arg(fixture("hostile_names"))
        .arg("\n::warning::arg\u{1b}[2J")
        .env("GITHUB_ACTIONS", "true")
        .env("TMPDIR", tmp.path())
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("WAITSHIM_") {
            ran.env_remove(k);
        }
    }
    let o = ran.output().expect("run waitshim-analyze run");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{said}");
    assert_plain("run", &said);
    assert!(said.contains(&format!("mutex#1 {shown}")), "{said}");
    assert!(said.contains(r#""\x0a::error::main""#), "{said}");
}

#[test]
fn thread_states_of_a_sampler_that_stopped_early_say_the_span_they_hold_over() {
    // A convoy of 8 runs about 0.55 s. Its log again, as a sampler that could no longer read
    // /proc after its second look at the CPUs, about 100 ms in (a sandbox, a chroot, its
    // descriptors closed), would have left it. (Not at a fixed time: a thread sample is written
    // only when a thread changed, and the convoy's threads may all be asleep by the first look,
    // so before 100 ms there may be one look and nothing to measure over.)
    let run = Launch::fixture("convoy").run();
    run.assert_success();
    let whole = run.analyze();
    let states = &whole.log(0).0["thread_states"];
    assert_eq!(states["sampled"], true);
    assert_eq!(states["sampled_to_end"], true, "{states}");
    assert!(
        !whole.text.contains("the sampler's records stop"),
        "{}",
        whole.text
    );

    let cut = run.dir.path().join("waitshim.cut.log");
    let mut start = None;
    let mut cpu_looks = 0;
    let mut cut_at = None;
    rewrite_log(run.single_log(), &cut, |r| {
        let sampler = match &r {
            Record::RunStart(s) => {
                start = Some(s.mono_ns);
                false
            }
            Record::CpuSample(s) => {
                cpu_looks += 1;
                if cpu_looks == 2 {
                    cut_at = Some(s.ns - start.expect("the start record comes first"));
                    return Some(r);
                }
                true
            }
            Record::ThreadSamples(_) | Record::ThreadSwitches(_) | Record::BlockedChain(_) => true,
            _ => false,
        };
        (!sampler || cut_at.is_none()).then_some(r)
    });
    let cut_at = cut_at.expect("the sampler looked at the CPUs twice");
    assert!(
        cut_at < 300_000_000,
        "the second look at the CPUs came at {cut_at} ns"
    );
    let a = analyze(&[&cut], &[]);
    let log = a.log(0);
    let states = &log.0["thread_states"];
    let duration = log.run()["duration_ns"].as_u64().unwrap();
    assert!(duration > 400_000_000, "the convoy ran {duration} ns");
    assert_eq!(states["sampled_to_end"], false, "{states}");
    let until = states["sampled_until_ns"].as_u64().unwrap();
    assert!(until <= cut_at, "{states}");
    assert_eq!(states["lost_parallelism"]["until_ns"], until);
    // No thread is said to have waited, run or been ready longer than the span sampled.
    for t in states["threads"].as_array().unwrap() {
        let said = ["tracked_wait_ns", "other_wait_ns"]
            .iter()
            .map(|k| t[k].as_u64().unwrap())
            .sum::<u64>();
        assert!(said <= until, "{t}");
    }
    let header = a
        .text
        .lines()
        .find(|l| l.starts_with("THREAD STATES"))
        .expect("THREAD STATES");
    assert!(
        header.contains("over the first")
            && header.contains("of the run's")
            && header.contains("only"),
        "{header}"
    );
    let lost = a
        .text
        .lines()
        .find(|l| l.starts_with("lost parallelism:"))
        .expect("lost parallelism");
    assert!(lost.contains("over the first"), "{lost}");
}

#[test]
fn time_the_process_was_stopped_is_said_and_not_counted_as_waiting() {
    let running = Launch::fixture("stopped_wait").spawn();
    running.wait_for_stdout("stopped_wait: armed");
    let pid = running.pid();
    // Stopped once the sampler has seen main in poll (not before it got there).
    let in_poll = |log: &waitshim_tests::LogReport| {
        log.0["thread_states"]["threads"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["tid"] == pid && t["state_at_end_blocked_in"]["name"] == "poll")
    };
    running.poll_log("main in poll", in_poll);
    const STOP: Duration = Duration::from_millis(1500);
    let pid_t = pid as libc::pid_t;
    assert_eq!(unsafe { libc::kill(pid_t, libc::SIGSTOP) }, 0);
    // The scenario itself: the process stays stopped this long.
    std::thread::sleep(STOP);
    assert_eq!(unsafe { libc::kill(pid_t, libc::SIGCONT) }, 0);
    std::fs::write(running.dir().join("go"), b"x").expect("write to the FIFO");
    let run = running.wait();
    run.assert_success();
    assert_eq!(
        run.stdout_text(),
        "stopped_wait: armed\nstopped_wait: done\n"
    );

    let a = run.analyze();
    let log = a.log(0);
    let states = &log.0["thread_states"];
    assert_eq!(states["stops_count"], 1, "{states}");
    let stopped = states["stopped_ns"].as_u64().unwrap();
    let stop_ns = STOP.as_nanos() as u64;
    // From the sampler's last record before the stop to its first after: the stop itself and
    // up to a CPU period (100 ms) before it, and the scheduling of the test around it.
    assert!(
        (stop_ns..stop_ns + 600_000_000).contains(&stopped),
        "{states}"
    );
    // Neither lost parallelism nor the threads' waits count it.
    let ncpus = log.run()["ncpus"].as_u64().unwrap();
    let span =
        states["sampled_until_ns"].as_u64().unwrap() - states["sampled_from_ns"].as_u64().unwrap();
    let capacity = states["lost_parallelism"]["capacity_ns"].as_u64().unwrap();
    assert!(capacity <= ncpus * (span - stop_ns), "{states}");
    for t in states["threads"].as_array().unwrap() {
        let life = t["life_ns"].as_u64().unwrap();
        let waited = t["tracked_wait_ns"].as_u64().unwrap() + t["other_wait_ns"].as_u64().unwrap();
        assert!(waited <= life - stop_ns, "{t}");
    }
    // The mutex's wait spans the stop, and says so.
    let creation = waitshim_tests::line_of("stopped_wait.c", "creation-site");
    let table = log.object_created_at("stopped_wait.c", creation);
    assert!(
        table["waited_while_stopped_ns"]
            .as_u64()
            .is_some_and(|n| n >= stop_ns),
        "{table}\n{}",
        a.text
    );
    let row = a
        .text
        .lines()
        .find(|l| l.contains("mutex#") && l.contains("of it while the process was stopped"));
    assert!(row.is_some(), "{}", a.text);
    let header = a
        .text
        .lines()
        .find(|l| l.starts_with("THREAD STATES"))
        .unwrap();
    assert!(header.contains("the process was stopped about"), "{header}");
    // main waited in poll all along: restart_syscall is the poll going on.
    assert!(!a.text.contains("syscall 219"), "{}", a.text);
    let main = states["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == pid)
        .unwrap();
    let calls: Vec<&Value> = main["blocked_in"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["name"])
        .collect();
    assert!(calls.iter().any(|c| *c == "poll"), "{main}");
    assert!(!calls.iter().any(|c| *c == "restart_syscall"), "{main}");
}

#[test]
fn a_program_whose_threads_reuse_a_tid_is_reported_with_each_thread_not_one() {
    // The kernel gives an ended thread's tid to a later one (after pid_max threads, or sooner
    // in a PID namespace): three workers, one after the other, all tid 4001, as a log of
    // such a run has them. The sampler sees each one blocked in read for 40 ms.
    use waitshim_format::{
        append_frame, end_reason, file_header, thread_state, RunEnd, RunStart, ThreadExit,
        ThreadName, ThreadSamples, ThreadStart, ThreadState,
    };
    const MS: u64 = 1_000_000;
    let t0 = 1_000 * MS;
    let mut records = vec![
        Record::RunStart(RunStart {
            pid: 4000,
            ppid: 1,
            realtime_ns: 0,
            mono_ns: t0,
            ncpus: 2,
            exe: "/bin/reuse".into(),
            cmdline: vec!["reuse".into()],
            shim_version: "0.1.0".into(),
        }),
        Record::ThreadStart(ThreadStart {
            tid: 4000,
            parent_tid: 0,
            ns: t0,
            start_routine: 0,
            chain_id: 0,
            is_main: 1,
        }),
    ];
    for (i, name) in ["worker-a", "worker-b", "worker-c"].into_iter().enumerate() {
        let at = t0 + (i as u64 + 1) * 100 * MS;
        let seen = |ns: u64, state: u8, syscall: i32| {
            Record::ThreadSamples(ThreadSamples {
                ns,
                interval_ns: 10 * MS,
                threads: vec![ThreadState {
                    tid: 4001,
                    state,
                    syscall,
                    on_cpu_ns: MS,
                    what: if syscall == 0 {
                        "pipe:[7]".into()
                    } else {
                        String::new()
                    },
                    ..ThreadState::default()
                }],
                unsampled: 0,
            })
        };
        records.extend([
            Record::ThreadStart(ThreadStart {
                tid: 4001,
                parent_tid: 4000,
                ns: at,
                start_routine: 0,
                chain_id: 0,
                is_main: 0,
            }),
            Record::ThreadName(ThreadName {
                tid: 4001,
                ns: at,
                name: name.into(),
            }),
            seen(at + 10 * MS, thread_state::BLOCKED, 0),
            seen(at + 50 * MS, thread_state::RUNNING, -1),
            Record::ThreadExit(ThreadExit {
                tid: 4001,
                ns: at + 60 * MS,
            }),
            seen(at + 70 * MS, thread_state::RUNNING, -1),
        ]);
    }
    records.push(Record::RunEnd(RunEnd {
        ns: t0 + 500 * MS,
        reason: end_reason::EXIT,
        exit_status: 0,
        hwm: 0,
        dropped: 0,
    }));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("waitshim.4000.log");
    let mut bytes = file_header().to_vec();
    for r in &records {
        append_frame(r, &mut bytes);
    }
    std::fs::write(&log, bytes).unwrap();

    let a = analyze(&[&log], &["--no-symbols"]);
    assert!(a.status.success(), "{}", a.stderr);
    let l = a.log(0);
    assert_eq!(l.run()["threads_seen"], 4, "main and three workers");
    let threads: Vec<(u64, u64, &str)> = l
        .threads()
        .iter()
        .map(|t| {
            (
                t["tid"].as_u64().unwrap(),
                t["nth"].as_u64().unwrap(),
                t["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        threads,
        vec![
            (4000, 1, ""),
            (4001, 1, "worker-a"),
            (4001, 2, "worker-b"),
            (4001, 3, "worker-c")
        ]
    );
    // Each worker lived 60 ms and waited 40 ms of it in read: three rows, not one of 180 ms.
    let states = l.0["thread_states"]["threads"].as_array().unwrap();
    let workers: Vec<&Value> = states.iter().filter(|t| t["tid"] == 4001).collect();
    assert_eq!(workers.len(), 3, "{states:?}");
    for w in &workers {
        assert_eq!(w["life_ns"], 60 * MS, "{w}");
        assert_eq!(w["other_wait_ns"], 40 * MS, "{w}");
    }
    assert!(a.text.contains("threads:   4 seen"), "{}", a.text);
    assert!(a.text.contains("4001 (2nd) \"worker-b\""), "{}", a.text);
    assert!(a.text.contains("4001 (3rd) \"worker-c\""), "{}", a.text);
}

#[test]
fn a_thread_that_got_the_tid_of_one_that_ended_is_counted_and_listed_as_a_thread_of_its_own() {
    const TEST: &str =
        "a_thread_that_got_the_tid_of_one_that_ended_is_counted_and_listed_as_a_thread_of_its_own";
    let Some(unshare) = pid_namespace() else {
        skip_or_fail(TEST, "unshare cannot make a PID namespace here");
        return;
    };
    // `first` ends; `second` gets its tid (the fixture sets the namespace's next tid, rather
    // than going round pid_max tids). Only the program runs under the shim.
    let mut launch = Launch::program("unshare").native();
    for a in unshare {
        launch = launch.arg(a);
    }
    let run = launch
        .arg("--mount-proc")
        .arg("env")
        .arg(format!("LD_PRELOAD={}", shim_path().display()))
        .arg("WAITSHIM_QUIET=1")
        .arg("WAITSHIM_LOG=waitshim.%p.log")
        .arg(fixture("tid_reuse"))
        .run();
    if run.status.code() == Some(77) {
        skip_or_fail(TEST, run.stderr_text().trim_end());
        return;
    }
    run.assert_success();
    assert_eq!(
        run.stdout_text(),
        "tid_reuse: second has the tid of first\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    assert_eq!(log.run()["threads_seen"], 3, "main, first and second");
    let workers: Vec<&Value> = log
        .threads()
        .into_iter()
        .filter(|t| t["is_main"] == false)
        .collect();
    let seen: Vec<(u64, &str)> = workers
        .iter()
        .map(|t| (t["nth"].as_u64().unwrap(), t["name"].as_str().unwrap()))
        .collect();
    assert_eq!(seen, vec![(1, "first"), (2, "second")], "{workers:?}");
    let tid = workers[0]["tid"].as_u64().unwrap();
    assert_eq!(workers[1]["tid"], tid);
    // Each its own life and creation site: first ended before second started.
    assert!(
        workers[0]["exit_ns"].as_u64().unwrap() <= workers[1]["start_ns"].as_u64().unwrap(),
        "{workers:?}"
    );
    for (w, tag) in workers.iter().zip(["first-create", "second-create"]) {
        assert!(
            frame_is(&w["created_at"], "tid_reuse.c", line_of("tid_reuse.c", tag)),
            "{tag}: {w}"
        );
    }
    assert_eq!(log.0["threads_summed"]["tids_reused"], 1);
    let said: Vec<&str> = a
        .text
        .lines()
        .filter(|l| l.starts_with("threads:"))
        .collect();
    assert_eq!(
        said,
        vec![format!(
            "threads:   3 seen (1 of them got the tid of a thread that had ended, as the kernel \
             reuses tids: each is counted and listed as a thread of its own, as {tid} (2nd))"
        )],
        "{}",
        a.text
    );
    let second_row = format!("{tid} (2nd)  second ");
    assert!(
        a.text
            .lines()
            .any(|l| l.trim_start().starts_with(&second_row)),
        "{}",
        a.text
    );
}

/// A Go program using cgo: 8 goroutines take turns on one `sync.Mutex`, long enough that the
/// runtime parks its threads on futexes.
const GO_CGO: &str = r#"package main

/*
static int one(int x) { return (x & 1) + 1; }
*/
import "C"

import (
	"fmt"
	"sync"
)

func main() {
	var mu sync.Mutex
	var wg sync.WaitGroup
	total := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20000; i++ {
				mu.Lock()
				x := 0
				for k := 0; k < 2000; k++ {
					x += k
				}
				total += int(C.one(C.int(x)))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Println("total", total)
}
"#;

#[test]
fn a_go_program_with_cgo_is_told_its_futex_waits_are_there_but_not_attributed() {
    // The report said "highwater: 0 (no thread ever waited)" and "WHERE THE WAITING WENT:
    // nowhere" while THREAD STATES showed 600 ms of futex waits: Go's runtime calls futex by
    // inline system calls, which no wrapper sees.
    let go = waitshim_tests::debian_program("go", "golang-go");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("main.go"), GO_CGO).expect("write main.go");
    std::fs::write(d.join("go.mod"), "module gocgo\n\ngo 1.19\n").expect("write go.mod");
    let built = Command::new(go)
        .args(["build", "-o", "gocgo", "."])
        .current_dir(d)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("GOCACHE", d.join("gocache"))
        .env("HOME", d)
        .env("CGO_ENABLED", "1")
        .output()
        .expect("run go build");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let native = Launch::program(d.join("gocgo")).native().run();
    native.assert_success();
    let run = Launch::program(d.join("gocgo")).run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "total 160000\n");
    assert_eq!(run.stdout_text(), native.stdout_text());
    let a = run.analyze();
    let hwm = a
        .text
        .lines()
        .find(|l| l.starts_with("highwater:"))
        .unwrap_or("");
    assert!(
        hwm.contains("yet the sampler saw threads blocked")
            && hwm.contains("futex words of no tracked object"),
        "{}",
        a.text
    );
    assert!(!a.text.contains("no thread ever waited"), "{}", a.text);
    assert!(a.text.contains("untracked futex word 0x"), "{}", a.text);
}
