//! The program's file descriptors stay its own under the shim: the numbers it gets, the bytes
//! of its files and the descriptors its limit allows, while call chains are still taken.

use std::fs;

use waitshim_tests::{line_of, run_both, Launch, LogReport, Run};

/// The fixture's mutex was contended, with waiter chains at its `lock-site` line.
fn assert_waited_at_lock_site(run: &Run, file: &str) {
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log: LogReport = a.log(0);
    let m = log.object_created_at(file, line_of(file, "creation-site"));
    assert!(log.counter(m, "contended") >= 2, "{m}");
    let lock = line_of(file, "lock-site");
    assert!(
        m["wait_sites"]
            .as_array()
            .expect("wait_sites")
            .iter()
            .any(|w| log.chain_has(&w["chain_id"], file, lock)),
        "no waiter chain at {file}:{lock}: {m}"
    );
}

#[test]
fn a_daemon_that_closes_its_descriptors_then_opens_its_files_reads_and_writes_them_as_natively() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("input.txt");
    fs::write(&input, "abcdefghijklmnop\n").expect("write input");
    let (out_native, out_shim) = (dir.path().join("native.out"), dir.path().join("shim.out"));
    let native = Launch::fixture("fd_daemon")
        .native()
        .arg(&input)
        .arg(&out_native)
        .run();
    native.assert_success();
    let run = Launch::fixture("fd_daemon")
        .arg(&input)
        .arg(&out_shim)
        .run();
    run.assert_success();
    assert_eq!(
        native.stdout_text(),
        "in=3 out=4\nheader: 7\nrest: 13 bytes: efghijklmnop\ntrailer: 8\n\
         still open: in 1 out 1\nfd_daemon: done\n"
    );
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert_eq!(
        fs::read(&out_shim).expect("shim output"),
        fs::read(&out_native).expect("native output")
    );
    assert_eq!(fs::read(&out_shim).unwrap(), b"header\ntrailer\n");
    assert_waited_at_lock_site(&run, "fd_daemon.c");
}

#[test]
fn the_first_descriptor_a_program_opens_after_contention_has_the_native_number() {
    // Compared with the native run (run_both): the number itself depends on what the test
    // runner leaves open.
    let run = run_both("fd_first", &[]);
    assert!(
        run.stdout_text().starts_with("first open() returned fd "),
        "{}",
        run.stdout_text()
    );
    assert_waited_at_lock_site(&run, "fd_first.c");
}

#[test]
fn a_program_under_a_small_descriptor_limit_opens_as_many_files_as_natively() {
    let run = run_both("fd_limit", &[]);
    let out = run.stdout_text();
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.lines()
            .all(|l| l.starts_with("opened ") && l.ends_with("..15, then EMFILE")),
        "{out}"
    );
    assert_waited_at_lock_site(&run, "fd_limit.c");
}
