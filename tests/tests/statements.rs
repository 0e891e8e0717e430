//! What the report says about the run itself is true, whatever the program did to itself: how it
//! ended, whether it still runs, which threads it had, over which span its thread states hold,
//! and the names it chose, printed so that they cannot pass for the report's own lines.

use waitshim_tests::Launch;

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
