//! Libraries unloaded while call chains are being taken: the unwinder stops reading a library
//! before `dlclose` unmaps it.

use waitshim_tests::{line_of, run_both};

#[test]
fn a_host_that_loads_and_unloads_a_library_300_times_under_contention_runs_as_natively() {
    let lib = waitshim_tests::fixture("libdlock.so");
    let run = run_both("dlclose_churn", &[lib.to_str().expect("utf-8 path")]);
    assert_eq!(
        run.stdout_text(),
        "dlclose_churn: 300 rounds, 3 contenders done\n"
    );
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log = a.log(0);
    let file = "dlclose_churn.c";
    let m = log.object_created_at(file, line_of(file, "creation-site"));
    assert!(log.counter(m, "contended") >= 1, "{m}");
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
