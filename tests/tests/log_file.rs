//! Where the log goes and what the shim says about it: created safely, never clobbering or
//! following a symlink, mode 0600, one stderr line at most, nothing on stdout.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use waitshim_tests::{analyze, Launch, Run};

/// A short contended run: `convoy 2` (one waiter, ~0.25 s).
fn convoy2() -> Launch {
    Launch::fixture("convoy").arg("2")
}

const CONVOY2_OUT: &str = "convoy: 2 threads done\n";

/// Every file in `dir` except `except`, by name.
fn other_files(dir: &Path, except: &[&Path]) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| !except.contains(&p.as_path()))
        .collect();
    files.sort();
    files
}

/// Checks that `log` is a readable log of a `convoy 2` run.
fn assert_is_convoy2_log(log: &Path) {
    let a = analyze(&[log], &[]);
    assert!(
        a.status.success(),
        "analyzer on {}: {}",
        log.display(),
        a.stderr
    );
    assert_eq!(a.log(0).hwm(), 1, "{}", log.display());
}

fn stderr_lines(run: &Run) -> Vec<String> {
    run.stderr_text().lines().map(str::to_owned).collect()
}

#[test]
fn log_is_created_with_mode_0600() {
    let run = convoy2().run();
    run.assert_success();
    let mode = fs::metadata(run.single_log())
        .expect("log metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "log mode {:o}", mode & 0o777);
}

#[test]
fn existing_file_at_the_log_path_is_left_untouched_and_the_log_gets_another_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let existing = dir.path().join("waitshim.log");
    fs::write(&existing, "precious data\n").expect("write existing file");
    let run = convoy2().log_to(&existing).run();
    run.assert_success();
    assert_eq!(run.stdout_text(), CONVOY2_OUT);
    assert_eq!(
        fs::read_to_string(&existing).expect("read existing file"),
        "precious data\n",
        "the existing file was clobbered"
    );
    let others = other_files(dir.path(), &[&existing]);
    assert_eq!(
        others.len(),
        1,
        "new files beside the existing one: {others:?}"
    );
    assert_is_convoy2_log(&others[0]);
}

#[test]
fn symlink_at_the_log_path_is_not_followed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("target.txt");
    fs::write(&target, "symlink target\n").expect("write target");
    let link = dir.path().join("waitshim.log");
    symlink(&target, &link).expect("symlink");

    let run = convoy2().log_to(&link).run();
    run.assert_success();
    assert_eq!(run.stdout_text(), CONVOY2_OUT);
    assert_eq!(
        fs::read_to_string(&target).expect("read target"),
        "symlink target\n",
        "the symlink's target was written"
    );
    assert_eq!(fs::read_link(&link).expect("still a symlink"), target);
    let others = other_files(dir.path(), &[&target, &link]);
    assert_eq!(others.len(), 1, "new files beside the symlink: {others:?}");
    assert!(fs::symlink_metadata(&others[0])
        .expect("metadata")
        .is_file());
    assert_is_convoy2_log(&others[0]);
}

#[test]
fn dangling_symlink_at_the_log_path_does_not_create_its_target() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("not-yet-there.txt");
    let link = dir.path().join("waitshim.log");
    symlink(&target, &link).expect("symlink");

    let run = convoy2().log_to(&link).run();
    run.assert_success();
    assert_eq!(run.stdout_text(), CONVOY2_OUT);
    assert!(
        !target.exists(),
        "the shim created the dangling symlink's target"
    );
}

#[test]
fn unwritable_log_directory_gives_one_stderr_line_and_the_program_runs_on_unchanged() {
    let run = convoy2().loud().log_to("/proc/nonexistent/x.log").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), CONVOY2_OUT);
    let lines = stderr_lines(&run);
    assert_eq!(lines.len(), 1, "stderr: {lines:?}");
    assert!(lines[0].starts_with("waitshim:"), "stderr: {lines:?}");
    assert!(run.logs.is_empty(), "logs: {:?}", run.logs);
}

#[test]
fn at_exit_one_stderr_line_names_the_log_and_the_analyzer_command() {
    let native = convoy2().native().run();
    native.assert_success();
    let run = convoy2().loud().run();
    run.assert_success();
    assert_eq!(run.stdout, native.stdout, "the shim wrote to stdout");
    let log = run.single_log();
    let lines = stderr_lines(&run);
    assert_eq!(lines.len(), 1, "stderr: {lines:?}");
    let name = log
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(lines[0].starts_with("waitshim:"), "stderr: {lines:?}");
    assert!(
        lines[0].contains(&name),
        "stderr {lines:?} does not name {name}"
    );
    assert!(lines[0].contains("waitshim-analyze"), "stderr: {lines:?}");
}

#[test]
fn with_waitshim_quiet_the_shim_prints_nothing() {
    let native = convoy2().native().run();
    let run = convoy2().run();
    run.assert_success();
    assert_eq!(run.stdout, native.stdout, "the shim wrote to stdout");
    assert!(run.stderr.is_empty(), "stderr: {}", run.stderr_text());
    assert_is_convoy2_log(run.single_log());
}
