//! Every way a thread waits besides a mutex: rwlocks (read and write sides), barriers, joins and
//! spinlocks, as the report shows them; and the return codes of those families, unchanged.

use std::collections::HashMap;

use serde_json::Value;
use waitshim_format::counter;
use waitshim_tests::{frame_text, kind_counters, line_of, run_both, run_semantics, LogReport, Run};

/// The kind-specific counters of `object` (key → value; absent keys are 0).
fn kind_of(run: &Run, object: &Value) -> HashMap<u16, u64> {
    let id = object["object_id"].as_u64().expect("object_id");
    kind_counters(run.single_log())
        .remove(&id)
        .unwrap_or_default()
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The one contention record on `object`.
fn record_on<'a>(log: &LogReport<'a>, object: &Value) -> &'a Value {
    let records = log.records_on(object);
    assert_eq!(records.len(), 1, "records on {object}: {records:?}");
    records[0]
}

#[test]
fn readers_starving_a_writer_show_as_one_long_write_wait_with_reads_counted_apart() {
    let run = run_both("rwlock_starve", &[]);
    assert_eq!(
        run.stdout_text(),
        "rwlock_starve: the writer got the lock after 4 of 4 readers left\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let file = "rwlock_starve.c";
    let rw = log.object_created_at(file, line_of(file, "creation-site"));
    assert_eq!(rw["kind"], "rwlock");

    // Write side: the writer's one acquisition waited for the readers, ~250 ms.
    assert_eq!(log.counter(rw, "acquisitions"), 1, "{rw}");
    assert_eq!(log.counter(rw, "contended"), 1, "{rw}");
    let waited = log.counter(rw, "wait_total_ns");
    assert!(ms(waited) > 150.0, "writer waited only {} ms", ms(waited));
    let sites = rw["wait_sites"].as_array().expect("wait_sites");
    assert_eq!(sites.len(), 1, "{sites:?}");
    assert!(
        log.chain_has(&sites[0]["chain_id"], file, line_of(file, "write-lock")),
        "the wait is at {}, expected the writer's wrlock",
        log.chain_text(&sites[0]["chain_id"])
    );

    // Read side, apart: four read acquisitions, none waited.
    let k = kind_of(&run, rw);
    assert_eq!(k.get(&counter::READ_ACQUISITIONS), Some(&4), "{k:?}");
    assert_eq!(k.get(&counter::READ_CONTENDED).copied().unwrap_or(0), 0);
    assert_eq!(k.get(&counter::ENDED_ACQUIRED), Some(&1), "{k:?}");

    // The writer's wait was the run's first: an episode on the rwlock, ended by the last reader
    // to leave, the one the writer waited for.
    assert_eq!(log.hwm(), 1);
    assert_eq!(log.0["highwater"]["object_id"], rw["object_id"]);
    let r = record_on(&log, rw);
    assert_eq!(r["state"], "complete", "{r}");
    assert_eq!(log.thread_name(&r["holder_tid"]), Some("reader-3"), "{r}");
    assert!(
        log.chain_has(&r["holder_chain"], file, line_of(file, "read-unlock")),
        "holder released at {}",
        log.chain_text(&r["holder_chain"])
    );
    assert!(
        ms(r["elapsed_ns"].as_u64().unwrap()) > 150.0,
        "episode elapsed: {r}"
    );
    assert!(
        a.text
            .contains(&format!("writer ({file}:{})", line_of(file, "write-lock"))),
        "text report:\n{}",
        a.text
    );
}

#[test]
fn barrier_with_one_slow_thread_names_the_slow_thread_as_the_one_the_others_waited_for() {
    let run = run_both("barrier_slow", &[]);
    assert_eq!(run.stdout_text(), "barrier_slow: 1 serial thread\n");
    let a = run.analyze();
    let log = a.log(0);
    let file = "barrier_slow.c";
    let barrier = log.object_created_at(file, line_of(file, "creation-site"));
    assert_eq!(barrier["kind"], "barrier");
    assert_eq!(barrier["subtype"], 4, "the count is the barrier's subtype");
    assert_eq!(log.counter(barrier, "acquisitions"), 4, "4 arrivals");
    assert_eq!(log.counter(barrier, "contended"), 3, "3 waited");
    assert_eq!(log.counter(barrier, "max_waiters"), 3);
    assert!(ms(log.counter(barrier, "wait_max_ns")) > 150.0);
    let k = kind_of(&run, barrier);
    assert_eq!(k.get(&counter::ROUNDS), Some(&1), "{k:?}");
    assert_eq!(k.get(&counter::ENDED_RELEASED), Some(&3), "{k:?}");

    // Nobody holds a barrier: its waits do not set the process-wide highwater mark, but the
    // barrier's own peak opens its record.
    assert_eq!(log.hwm(), 0);
    assert!(
        a.text.contains("highwater: 0 (no thread waited on a lock, condition variable or semaphore; barrier and join waits do not count towards it)"),
        "{}",
        a.text
    );
    let r = record_on(&log, barrier);
    assert_eq!(r["level"], 3, "{r}");
    assert_eq!(r["state"], "complete", "{r}");
    assert_eq!(log.thread_name(&r["holder_tid"]), Some("slowpoke"), "{r}");
    assert!(
        log.chain_has(&r["holder_chain"], file, line_of(file, "slow-arrival")),
        "the slow thread arrived at {}",
        log.chain_text(&r["holder_chain"])
    );
    assert_eq!(log.chain(&r["holder_chain"])[0]["function"], "slow_worker");
    let waiters = r["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 3, "{waiters:?}");
    for w in waiters {
        let name = log.thread_name(&w["tid"]).unwrap_or("");
        assert!(name.starts_with("fast-"), "waiter {name:?}");
        assert!(log.chain_has(&w["chain_id"], file, line_of(file, "fast-arrival")));
    }
    assert!(
        a.text.contains("\"slowpoke\"") && a.text.contains(&format!("slow_worker ({file}:")),
        "text report:\n{}",
        a.text
    );
}

#[test]
fn barrier_racers_each_hold_the_records_of_the_rounds_glibc_made_them_complete() {
    const ROUNDS: usize = 100;
    let run = run_both("barrier_race", &[]);
    assert_eq!(
        run.stdout_text(),
        format!("barrier_race: {ROUNDS} rounds, {ROUNDS} serial returns\n")
    );
    // Which racer glibc made the serial thread, per thread and per round (on stderr: it varies
    // between runs).
    let stderr = run.stderr_text();
    let lines: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("barrier_race: "))
        .collect();
    let serial: HashMap<&str, u64> = lines
        .iter()
        .filter(|l| l.starts_with("racer-"))
        .filter_map(|l| {
            let (name, n) = l.split_once(" serial ")?;
            Some((name, n.parse().ok()?))
        })
        .collect();
    let by_round = lines
        .iter()
        .find_map(|l| l.strip_prefix("serial by round "))
        .unwrap_or_else(|| panic!("no serial-by-round line; stderr: {stderr}"));
    assert_eq!(serial.len(), 2, "stderr: {stderr}");
    assert_eq!(by_round.len(), ROUNDS, "stderr: {stderr}");

    let a = run.analyze();
    let log = a.log(0);
    let file = "barrier_race.c";
    let barrier = log.object_created_at(file, line_of(file, "creation-site"));
    assert_eq!(barrier["subtype"], 2);
    let rounds = ROUNDS as u64;
    assert_eq!(log.counter(barrier, "acquisitions"), 2 * rounds, "arrivals");
    assert_eq!(
        log.counter(barrier, "contended"),
        rounds,
        "one waiter per round"
    );
    assert_eq!(log.counter(barrier, "max_waiters"), 1);
    let k = kind_of(&run, barrier);
    assert_eq!(k.get(&counter::ROUNDS), Some(&rounds), "{k:?}");
    assert_eq!(k.get(&counter::ENDED_RELEASED), Some(&rounds), "{k:?}");
    let sites = barrier["wait_sites"].as_array().expect("wait_sites");
    assert!(!sites.is_empty(), "{barrier}");
    for site in sites {
        assert!(
            log.chain_has(&site["chain_id"], file, line_of(file, "arrival")),
            "a wait at {}",
            log.chain_text(&site["chain_id"])
        );
    }

    // Each record is held by the thread glibc made complete its round, never one of its waiters;
    // one record per round (a round starts 15 ms after both racers are done with the previous
    // one: none is coalesced, however late a thread is scheduled).
    let mut records = log.records_on(barrier);
    records.sort_by_key(|r| r["opened_at_ns"].as_u64());
    // One line per record, for the assertion messages.
    let name = |tid: &Value| log.thread_name(tid).unwrap_or("?").to_string();
    let summary = records
        .iter()
        .map(|r| {
            let waiters: Vec<String> = r["waiters"]
                .as_array()
                .map(|ws| ws.iter().map(|w| name(&w["tid"])).collect())
                .unwrap_or_default();
            format!(
                "record {} at {} ns: holder {}, waiters {waiters:?}, coalesced {}",
                r["record_id"],
                r["opened_at_ns"],
                name(&r["holder_tid"]),
                r["coalesced"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut held: HashMap<&str, u64> = HashMap::new();
    for r in &records {
        assert_eq!(r["state"], "complete", "{r}");
        let holder = log.thread_name(&r["holder_tid"]).unwrap_or("?");
        *held.entry(holder).or_default() += 1;
        let waiters = r["waiters"].as_array().expect("waiters");
        assert!(
            waiters.iter().all(|w| w["tid"] != r["holder_tid"]),
            "the holder {holder} is listed among the waiters: {r}\nrecords:\n{summary}"
        );
    }
    assert_eq!(
        held, serial,
        "records held per thread vs. serial returns per thread; records:\n{summary}"
    );
    assert_eq!(records.len(), ROUNDS, "records:\n{summary}");
    assert!(
        records.iter().all(|r| r["coalesced"] == 0),
        "records:\n{summary}"
    );
    // Round by round: the holders of the records, in order, are the serial threads.
    let holders: String = records
        .iter()
        .map(|r| match log.thread_name(&r["holder_tid"]) {
            Some("racer-0") => '0',
            Some("racer-1") => '1',
            _ => '?',
        })
        .collect();
    let first = holders
        .chars()
        .zip(by_round.chars())
        .position(|(h, s)| h != s);
    assert_eq!(
        holders, by_round,
        "record holders vs. serial threads, round by round (first difference at round {first:?}); \
         records:\n{summary}"
    );
    // A round whose waiter arrived at the same instant lists none, and the report says why.
    let unnamed = records
        .iter()
        .filter(|r| r["waiters"].as_array().is_some_and(|w| w.is_empty()))
        .count();
    let all = waitshim_tests::analyze(&[run.single_log()], &["--top", "1000"]);
    let said = all
        .text
        .matches("'s arrival, counted as a wait, completed the round")
        .count();
    assert_eq!(
        said, unnamed,
        "records that list no waiter vs. the text's explanations:\n{}",
        all.text
    );
}

#[test]
fn joining_a_slow_thread_is_a_wait_on_that_thread_held_by_it() {
    let run = run_both("join_slow", &[]);
    assert_eq!(run.stdout_text(), "join_slow: sleeper returned 42\n");
    let a = run.analyze();
    let log = a.log(0);
    let file = "join_slow.c";
    let join = line_of(file, "join-site");
    // Created where the thread was, waited for at the join.
    let thread = log.object_created_at(file, line_of(file, "create-site"));
    assert_eq!(thread["kind"], "thread");
    let sleeper = log
        .threads()
        .into_iter()
        .find(|t| t["name"] == "sleeper")
        .expect("sleeper in the threads table");
    assert_eq!(log.counter(thread, "acquisitions"), 1);
    assert_eq!(log.counter(thread, "contended"), 1);
    assert!(ms(log.counter(thread, "wait_total_ns")) > 150.0, "{thread}");
    assert!(!thread["destroyed_at_ns"].is_null(), "joined: gone");
    let r = record_on(&log, thread);
    assert_eq!(r["holder_tid"], sleeper["tid"], "{r}");
    assert_eq!(r["state"], "complete", "{r}");
    assert!(ms(r["elapsed_ns"].as_u64().unwrap()) > 150.0, "{r}");
    let w = &r["waiters"][0];
    assert!(log.run()["pid"] == w["tid"], "main waited: {r}");
    assert!(log.chain_has(&w["chain_id"], file, join));
}

#[test]
fn spinning_on_a_held_spinlock_counts_as_waiting() {
    let run = run_both("spin_contention", &[]);
    assert_eq!(run.stdout_text(), "spin_contention: counter=3\n");
    let a = run.analyze();
    let log = a.log(0);
    let file = "spin_contention.c";
    let spin = log.object_created_at(file, line_of(file, "creation-site"));
    assert_eq!(spin["kind"], "spinlock");
    assert_eq!(log.counter(spin, "acquisitions"), 3);
    assert_eq!(log.counter(spin, "contended"), 2);
    assert!(
        ms(log.counter(spin, "wait_max_ns")) > 50.0,
        "spinning not counted as waiting: {spin}"
    );
    for s in spin["wait_sites"].as_array().expect("wait_sites") {
        assert!(
            log.chain_has(&s["chain_id"], file, line_of(file, "spin-lock")),
            "spun at {}",
            log.chain_text(&s["chain_id"])
        );
    }
    let r = record_on(&log, spin);
    assert_eq!(
        log.thread_name(&r["holder_tid"]),
        Some("spin-holder"),
        "{r}"
    );
}

#[test]
fn cxx_shared_mutex_is_an_rwlock_with_read_and_write_acquisitions() {
    let run = run_both("cxx_shared_mutex", &[]);
    assert_eq!(
        run.stdout_text(),
        "cxx_shared_mutex: a=40000 b=40000 torn=0\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let rwlocks: Vec<&Value> = log
        .objects()
        .into_iter()
        .filter(|o| o["kind"] == "rwlock")
        .collect();
    assert_eq!(rwlocks.len(), 1, "{rwlocks:?}");
    let rw = rwlocks[0];
    assert_eq!(rw["origin"], "first_use");
    let site = frame_text(&rw["creation_site"]);
    assert!(
        site.contains("cxx_shared_mutex.cpp"),
        "first used at {site}"
    );
    assert_eq!(log.counter(rw, "acquisitions"), 40000, "write side");
    let k = kind_of(&run, rw);
    assert_eq!(k.get(&counter::READ_ACQUISITIONS), Some(&40000), "{k:?}");
}

#[test]
fn rwlock_spinlock_barrier_and_join_return_codes_are_unchanged_under_the_shim() {
    let run = run_semantics("wait_semantics", 70);
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
}
