//! Real programs from Debian, run as their users run them: the report's first finding names the
//! lock that cost them the most, not a start barrier or a thread waiting for the others to end.

use serde_json::Value;
use waitshim_tests::{debian_program, line_of, Analysis, Launch};

/// The first row of WHERE THE WAITING WENT (the line under the column heads).
fn first_finding(a: &Analysis) -> &str {
    a.text
        .split("WHERE THE WAITING WENT")
        .nth(1)
        .and_then(|s| s.lines().nth(2))
        .unwrap_or_else(|| panic!("no WHERE THE WAITING WENT row:\n{}", a.text))
}

/// sysbench's mutex test: 4 threads take random mutexes of an array of 2, 2 M times each. Its
/// start barrier (a condition variable all 4 wait on, 1–70 ms here) sets the process-wide
/// highwater mark in the first milliseconds and the main thread joins the workers for the whole
/// run: neither may head the report. The array's mutexes (50–300 ms of waits each here) do, and
/// each has contention records.
#[test]
fn sysbench_mutex_ranks_its_mutex_array_first() {
    let sysbench = debian_program("sysbench", "sysbench");
    let run = Launch::program(&sysbench)
        .arg("mutex")
        .arg("--threads=4")
        .arg("--mutex-num=2")
        .arg("--mutex-locks=2000000")
        .arg("--mutex-loops=0")
        .arg("run")
        .run();
    run.assert_success();
    assert!(
        run.stdout_text().contains("General statistics"),
        "{}",
        run.stdout_text()
    );
    let a = run.analyze();
    let log = a.log(0);
    let first = first_finding(&a);
    assert!(
        first.contains(" mutex#"),
        "first finding: {first}\n{}",
        a.text
    );
    // Both array mutexes (created by sysbench, waited on by its workers) was waited
    // for longer than the start barrier's condition variable, and has records.
    let mut mutexes: Vec<&Value> = log
        .objects()
        .into_iter()
        .filter(|o| o["kind"] == "mutex")
        .collect();
    mutexes.sort_by_key(|o| std::cmp::Reverse(log.counter(o, "wait_total_ns")));
    mutexes.truncate(2);
    assert_eq!(mutexes.len(), 2, "{}", a.text);
    let cond_wait: u64 = log
        .objects()
        .into_iter()
        .filter(|o| o["kind"] == "cond")
        .map(|o| log.counter(o, "wait_total_ns"))
        .sum();
    for m in &mutexes {
        assert!(log.counter(m, "wait_total_ns") > cond_wait, "{}", a.text);
    }
    for m in &mutexes {
        assert!(
            !log.records_on(m).is_empty(),
            "no record on {m}\n{}",
            a.text
        );
    }
    // The first record is on a mutex, not on the barrier or a join.
    let records = log.records();
    let first_record = records.first().expect("records");
    assert!(
        mutexes
            .iter()
            .any(|m| m["object_id"] == first_record["object_id"]),
        "{first_record}\n{}",
        a.text
    );
}

/// Threads sharing one SQLite connection in serialized mode queue on the connection's mutex:
/// it is the first finding, waited for from the program's insert.
#[test]
fn sqlite_threads_sharing_a_connection_rank_the_connection_mutex_first() {
    debian_program("sqlite3", "sqlite3");
    let run = Launch::fixture("sqlite_shared").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "sqlite_shared: 8000 rows\n");
    let a = run.analyze();
    let log = a.log(0);
    let first = first_finding(&a);
    assert!(
        first.contains(" mutex#") && first.contains("libsqlite3"),
        "first finding: {first}\n{}",
        a.text
    );
    let f = "sqlite_shared.c";
    let insert = line_of(f, "insert");
    let top = log
        .objects()
        .into_iter()
        .max_by_key(|o| o["counters"]["wait_total_ns"].as_u64().unwrap_or(0))
        .expect("objects");
    assert_eq!(top["kind"], "mutex");
    let sites = top["wait_sites"].as_array().expect("wait sites");
    assert!(
        sites
            .iter()
            .any(|s| log.chain_has(&s["chain_id"], f, insert)),
        "no wait of the connection mutex from {f}:{insert}: {top}"
    );
}
