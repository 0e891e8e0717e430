//! No silence: a program the shim cannot get into, or whose log never gets its end, is explained
//! to the user: `waitshim-analyze why-no-log -- CMD` says why a run left no log, the error about a
//! missing log points there, and a log without an end record says how the process can have ended.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use waitshim_tests::{fixture, line_of, shim_path, Launch};

/// `waitshim-analyze why-no-log -- CMD...`, in an environment without LD_PRELOAD or any
/// WAITSHIM_ variable (the command's own `NAME=value` words set those).
fn why_no_log(dir: &Path, cmd: &[&OsStr]) -> Output {
    let mut c = Command::new(waitshim_tests::analyzer_path());
    c.current_dir(dir).arg("why-no-log").arg("--").args(cmd);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("WAITSHIM_") || k == "LD_PRELOAD" {
            c.env_remove(k);
        }
    }
    c.output().expect("run waitshim-analyze why-no-log")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn preload() -> String {
    format!("LD_PRELOAD={}", shim_path().display())
}

#[test]
fn a_static_program_runs_untraced_and_why_no_log_says_it_is_statically_linked() {
    let native = Launch::fixture("static_binary").native().run();
    native.assert_success();
    let run = Launch::fixture("static_binary").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert!(
        run.logs.is_empty(),
        "a static program got a log: {:?}",
        run.logs
    );

    // The log the user expected is not there: the error says where to look.
    let expected = run.dir.path().join(format!("waitshim.{}.log", run.pid));
    let out = Command::new(waitshim_tests::analyzer_path())
        .arg(&expected)
        .output()
        .expect("run waitshim-analyze");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains("cannot open"), "stderr: {err}");
    assert!(err.contains("why-no-log -- CMD"), "stderr: {err}");

    let program = fixture("static_binary");
    let pre = preload();
    let out = why_no_log(run.dir.path(), &[OsStr::new(&pre), program.as_os_str()]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("PROBLEM") && said.contains("is statically linked"),
        "{said}"
    );
    assert!(said.contains("LD_PRELOAD loads nothing into it"), "{said}");
    // The shim itself is fine: only the program is the problem.
    assert_eq!(said.matches("PROBLEM").count(), 1, "{said}");
}

#[test]
fn the_missing_log_error_lists_the_logs_that_are_there() {
    let run = Launch::fixture("raw_exit").run();
    assert_eq!(run.logs.len(), 1, "logs: {:?}", run.logs);
    let out = Command::new(waitshim_tests::analyzer_path())
        .arg(run.dir.path().join("waitshim.1.log"))
        .output()
        .expect("run waitshim-analyze");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    let name = run.logs[0].display().to_string();
    assert!(
        err.contains("logs there, newest first:") && err.contains(&name),
        "stderr: {err}"
    );
}

#[test]
fn why_no_log_says_when_ld_preload_is_unset_or_names_no_loadable_shim() {
    let program = fixture("raw_exit");
    let dir = tempfile::tempdir().expect("tempdir");

    let out = why_no_log(dir.path(), &[program.as_os_str()]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("LD_PRELOAD is not set"), "{said}");

    let missing = "LD_PRELOAD=/nonexistent/dir/libwaitshim.so";
    let out = why_no_log(dir.path(), &[OsStr::new(missing), program.as_os_str()]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("/nonexistent/dir/libwaitshim.so, which does not exist"),
        "{said}"
    );

    let other = "LD_PRELOAD=libm.so.6";
    let out = why_no_log(dir.path(), &[OsStr::new(other), program.as_os_str()]);
    let said = text(&out);
    assert!(said.contains("names no libwaitshim.so"), "{said}");

    // Everything right: nothing found, exit status 0; the program is found through PATH too.
    let pre = preload();
    let path = format!("PATH={}", program.parent().unwrap().display());
    let out = why_no_log(
        dir.path(),
        &[
            OsStr::new("env"),
            OsStr::new(&pre),
            OsStr::new(&path),
            OsStr::new("raw_exit"),
        ],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(!said.contains("PROBLEM"), "{said}");
    assert!(
        said.contains(&format!("program: {}", program.display())),
        "{said}"
    );
}

#[test]
fn why_no_log_says_when_the_log_directory_is_not_writable_or_the_shim_is_disabled() {
    let program = fixture("raw_exit");
    let dir = tempfile::tempdir().expect("tempdir");
    let pre = preload();
    let out = why_no_log(
        dir.path(),
        &[
            OsStr::new(&pre),
            OsStr::new("WAITSHIM_LOG=/nonexistent/dir/waitshim.%p.log"),
            OsStr::new("WAITSHIM_DISABLE=1"),
            program.as_os_str(),
        ],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("the log's directory /nonexistent/dir cannot be used"),
        "{said}"
    );
    assert!(said.contains("WAITSHIM_DISABLE is set"), "{said}");
}

/// Whether a set-user-ID file at `dir` would take effect: root (to give the copy to another
/// user) and a file system not mounted `nosuid`.
fn setuid_possible(dir: &Path) -> Result<(), String> {
    // SAFETY: plain system call.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "not running as root: cannot make a set-user-ID copy owned by another user".into(),
        );
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a zeroed out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!(
            "statvfs {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    if st.f_flag & libc::ST_NOSUID != 0 {
        return Err(format!(
            "{} is on a file system mounted nosuid",
            dir.display()
        ));
    }
    Ok(())
}

#[test]
fn a_setuid_program_gets_no_log_and_why_no_log_says_the_loader_ignores_ld_preload() {
    let dir = tempfile::tempdir().expect("tempdir");
    if let Err(why) = setuid_possible(dir.path()) {
        println!("skipped: {why}");
        return;
    }
    // A directory anyone can write the log into: no log there is the loader's doing.
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.path().join("raw_exit_setuid");
    std::fs::copy(fixture("raw_exit"), &copy).unwrap();
    let c = std::ffi::CString::new(copy.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; uid and gid 65534 are "nobody".
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).unwrap();

    let pattern = logs.join("waitshim.%p.log");
    let run = Launch::program(&copy).log_to(&pattern).run();
    assert_eq!(run.stdout_text(), "raw_exit: done\n");
    let written: Vec<_> = std::fs::read_dir(&logs).unwrap().flatten().collect();
    assert!(
        written.is_empty(),
        "the set-user-ID copy wrote a log: {written:?}"
    );
    // The same program without the bit is traced, with the same settings.
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let traced = Launch::program(&copy).log_to(&pattern).run();
    assert_eq!(traced.stdout_text(), "raw_exit: done\n");
    assert_eq!(std::fs::read_dir(&logs).unwrap().count(), 1);
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).unwrap();

    let pre = preload();
    let out = why_no_log(dir.path(), &[OsStr::new(&pre), copy.as_os_str()]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("is set-user-ID (owner uid 65534")
            && said.contains("ignores LD_PRELOAD entries that contain a '/'"),
        "{said}"
    );
}

#[test]
fn a_raw_exit_group_is_reported_as_an_end_without_exit_handlers_not_only_as_a_kill() {
    let native = Launch::fixture("raw_exit").native().run();
    let run = Launch::fixture("raw_exit").run();
    assert_eq!(native.status.code(), Some(3));
    assert_eq!(run.status.code(), Some(3));
    assert_eq!(run.stdout_text(), native.stdout_text());
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log = a.log(0);
    assert!(log.run()["end"].is_null(), "run: {}", log.run());
    assert_eq!(
        log.run()["no_end"],
        "no_exit_handlers",
        "run: {}",
        log.run()
    );
    let warnings = log.warning_text();
    assert!(
        warnings.contains("ended without running its exit handlers")
            && warnings.contains("raw exit_group"),
        "{warnings}"
    );
    assert!(
        a.text.contains(
            "ended:     no exit record: the process ended without running its exit handlers"
        ),
        "{}",
        a.text
    );
    // What was written before the end is there: main's joins waited for the workers.
    let records = log.records();
    assert!(!records.is_empty(), "no contention record: {}", a.text);
    let creation = line_of("raw_exit.c", "creation-site");
    log.object_created_at("raw_exit.c", creation);
}

#[test]
fn a_fatal_signal_the_program_does_not_handle_ends_the_log_naming_it_and_still_kills_the_process() {
    use std::os::unix::process::ExitStatusExt;
    for (how, sig, name) in [
        ("term", libc::SIGTERM, "SIGTERM"),
        ("segv", libc::SIGSEGV, "SIGSEGV"),
        ("abort", libc::SIGABRT, "SIGABRT"),
    ] {
        let native = Launch::fixture("fatal_signal")
            .native()
            .arg(how)
            .rlimit(libc::RLIMIT_CORE, 0)
            .run();
        let run = Launch::fixture("fatal_signal")
            .arg(how)
            .rlimit(libc::RLIMIT_CORE, 0)
            .run();
        assert_eq!(native.status.signal(), Some(sig), "{how}: native");
        assert_eq!(run.status.signal(), Some(sig), "{how}: under the shim");
        assert_eq!(run.stdout_text(), native.stdout_text(), "{how}");
        // The program still sees the default disposition it did not change.
        assert!(
            run.stdout_text()
                .contains("fatal_signal: default disposition"),
            "{how}: {}",
            run.stdout_text()
        );
        let a = run.analyze();
        assert!(a.status.success(), "analyzer: {}", a.stderr);
        let log = a.log(0);
        let end = &log.run()["end"];
        assert_eq!(end["reason"], "signal", "{how}: {end}");
        assert_eq!(end["signal"], sig, "{how}: {end}");
        assert!(
            a.text.contains(&format!(
                "ended:     killed by signal {sig} ({name}) (the program had no handler for it)"
            )),
            "{how}:\n{}",
            a.text
        );
        assert!(!log.records().is_empty(), "{how}: no record: {}", a.text);
        let creation = line_of("fatal_signal.c", "creation-site");
        log.object_created_at("fatal_signal.c", creation);
    }
}

/// `raw_exit_go` is `raw_exit.c` with the section Go's linker marks every Go binary with: the
/// analyzer takes it for a Go program (no Go toolchain is needed to test the detection).
#[test]
fn a_go_program_is_named_as_such_by_the_report_and_by_why_no_log() {
    let run = Launch::fixture("raw_exit_go").run();
    assert_eq!(run.status.code(), Some(3));
    let a = run.analyze();
    let log = a.log(0);
    assert_eq!(log.run()["no_end"], "go_program", "run: {}", log.run());
    let warnings = log.warning_text();
    assert!(
        warnings.contains("is a Go program: Go's runtime ends the process with a raw exit_group"),
        "{warnings}"
    );
    assert!(
        a.text.contains(
            "ended:     no exit record: a Go program, ended by its runtime's raw exit_group"
        ),
        "{}",
        a.text
    );

    let program = fixture("raw_exit_go");
    let pre = preload();
    let out = why_no_log(run.dir.path(), &[OsStr::new(&pre), program.as_os_str()]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("is a Go program: goroutines wait in Go's own runtime"),
        "{said}"
    );
    assert!(
        said.contains("(with cgo, only the locks the C code takes)"),
        "{said}"
    );
}
