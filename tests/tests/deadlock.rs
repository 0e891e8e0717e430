//! Programs that deadlock and hang: the shim records the cycle while they hang, the test kills
//! them, and the report of the killed run shows the cycle with its chains.

use std::collections::BTreeSet;

use serde_json::Value;
use waitshim_tests::{frame_text, line_of, run_both, Analysis, Launch};

/// Runs a hanging fixture under the shim until its log shows a deadlock, then kills it and
/// analyzes what it left.
fn deadlock_then_kill(name: &str, armed: &str) -> Analysis {
    deadlock_then_kill_with(Launch::fixture(name), armed)
}

fn deadlock_then_kill_with(launch: Launch, armed: &str) -> Analysis {
    let running = launch.spawn();
    running.wait_for_stdout(armed);
    running.poll_log("a deadlock", |log| !log.deadlocks().is_empty());
    let run = running.kill();
    assert_eq!(run.stdout_text(), format!("{armed}\n"));
    run.analyze()
}

/// Checks that the cycle's holders chain round: each element's holder is the next one's tid.
fn assert_closed(cycle: &[Value]) {
    for (i, step) in cycle.iter().enumerate() {
        let next = &cycle[(i + 1) % cycle.len()];
        assert_eq!(
            step["holder_tid"], next["tid"],
            "cycle does not close: {cycle:?}"
        );
    }
}

#[test]
fn abba_deadlock_is_reported_as_a_two_thread_cycle_with_both_waiter_chains() {
    abba_cycle(Launch::fixture("abba"), "mutex");
}

#[test]
fn two_threads_spinning_on_each_others_spinlock_are_a_deadlock_cycle() {
    abba_cycle(Launch::fixture("abba").arg("spin"), "spinlock");
}

/// The ABBA program, with locks of `kind`, hangs; its report shows the cycle of two.
fn abba_cycle(launch: Launch, kind: &str) {
    let a = deadlock_then_kill_with(launch, "abba: armed");
    let log = a.log(0);
    let lock_a = log.object_created_at("abba.c", line_of("abba.c", "creation-site-A"));
    let lock_b = log.object_created_at("abba.c", line_of("abba.c", "creation-site-B"));
    assert_eq!(lock_a["kind"], kind);
    let t1_lock_b = line_of("abba.c", "t1-lock-B");
    let t2_lock_a = line_of("abba.c", "t2-lock-A");

    let deadlocks = log.deadlocks();
    assert_eq!(deadlocks.len(), 1, "deadlocks: {deadlocks:?}");
    let cycle = deadlocks[0]["cycle"].as_array().expect("cycle");
    assert_eq!(cycle.len(), 2, "cycle: {cycle:?}");
    assert_closed(cycle);

    let waits_for = |object: &Value| -> &Value {
        cycle
            .iter()
            .find(|s| s["object_id"] == object["object_id"])
            .unwrap_or_else(|| panic!("no thread of the cycle waits for {object}: {cycle:?}"))
    };
    let on_b = waits_for(lock_b);
    assert_eq!(log.thread_name(&on_b["tid"]), Some("abba-1"));
    assert!(
        log.chain_has(&on_b["wait_chain"], "abba.c", t1_lock_b),
        "abba-1 waits for B at {}, expected abba.c:{t1_lock_b}",
        log.chain_text(&on_b["wait_chain"])
    );
    let on_a = waits_for(lock_a);
    assert_eq!(log.thread_name(&on_a["tid"]), Some("abba-2"));
    assert!(
        log.chain_has(&on_a["wait_chain"], "abba.c", t2_lock_a),
        "abba-2 waits for A at {}, expected abba.c:{t2_lock_a}",
        log.chain_text(&on_a["wait_chain"])
    );

    for needle in [
        format!("abba.c:{}", line_of("abba.c", "creation-site-A")),
        format!("abba.c:{}", line_of("abba.c", "creation-site-B")),
        format!("abba.c:{t1_lock_b}"),
        format!("abba.c:{t2_lock_a}"),
    ] {
        assert!(a.text.contains(&needle), "no {needle} in:\n{}", a.text);
    }
    assert!(
        a.text.to_lowercase().contains("deadlock"),
        "text report:\n{}",
        a.text
    );

    assert!(log.run()["end"].is_null(), "run: {}", log.run());
    assert!(
        log.warnings().iter().any(|w| w["kind"] == "ending"),
        "no warning about the killed run: {}",
        log.warning_text()
    );
    assert!(
        a.text.contains("WARNING: ") && a.text.contains("killed"),
        "text report:\n{}",
        a.text
    );
}

#[test]
fn three_threads_each_holding_one_mutex_and_wanting_the_next_form_a_cycle_of_three() {
    let a = deadlock_then_kill("cycle3", "cycle3: armed");
    let log = a.log(0);
    let lock_second = line_of("cycle3.c", "lock-second");
    let mutexes: BTreeSet<u64> = ["creation-site-M0", "creation-site-M1", "creation-site-M2"]
        .iter()
        .map(|tag| {
            log.object_created_at("cycle3.c", line_of("cycle3.c", tag))["object_id"]
                .as_u64()
                .expect("object_id")
        })
        .collect();
    assert_eq!(mutexes.len(), 3);

    let deadlocks = log.deadlocks();
    assert_eq!(deadlocks.len(), 1, "deadlocks: {deadlocks:?}");
    let cycle = deadlocks[0]["cycle"].as_array().expect("cycle");
    assert_eq!(cycle.len(), 3, "cycle: {cycle:?}");
    assert_closed(cycle);
    let in_cycle: BTreeSet<u64> = cycle
        .iter()
        .map(|s| s["object_id"].as_u64().expect("object_id"))
        .collect();
    assert_eq!(in_cycle, mutexes);
    let tids: BTreeSet<u64> = cycle
        .iter()
        .map(|s| s["tid"].as_u64().expect("tid"))
        .collect();
    assert_eq!(tids.len(), 3);
    for step in cycle {
        let name = log.thread_name(&step["tid"]).unwrap_or("");
        assert!(name.starts_with("cycle-"), "thread {name:?} in {step}");
        assert!(
            log.chain_has(&step["wait_chain"], "cycle3.c", lock_second),
            "{name} waits at {}, expected cycle3.c:{lock_second}",
            log.chain_text(&step["wait_chain"])
        );
        let object = log.object(&step["object_id"]);
        assert_eq!(
            object["kind"],
            "mutex",
            "{}",
            frame_text(&object["creation_site"])
        );
    }
    assert!(
        a.text.contains(&format!("cycle3.c:{lock_second}")),
        "text report:\n{}",
        a.text
    );
}

#[test]
fn a_writer_holding_an_rwlock_is_part_of_a_deadlock_cycle_with_a_mutex() {
    let a = deadlock_then_kill("rwlock_deadlock", "rwlock_deadlock: armed");
    let log = a.log(0);
    let file = "rwlock_deadlock.c";
    let m = log.object_created_at(file, line_of(file, "creation-site-M"));
    let rw = log.object_created_at(file, line_of(file, "creation-site-RW"));
    assert_eq!(rw["kind"], "rwlock");
    let deadlocks = log.deadlocks();
    assert_eq!(deadlocks.len(), 1, "deadlocks: {deadlocks:?}");
    let cycle = deadlocks[0]["cycle"].as_array().expect("cycle");
    assert_eq!(cycle.len(), 2, "cycle: {cycle:?}");
    assert_closed(cycle);
    let on = |object: &Value| -> &Value {
        cycle
            .iter()
            .find(|s| s["object_id"] == object["object_id"])
            .unwrap_or_else(|| panic!("no thread of the cycle waits for {object}: {cycle:?}"))
    };
    let on_rw = on(rw);
    assert_eq!(log.thread_name(&on_rw["tid"]), Some("rw-1"));
    assert_eq!(
        log.thread_name(&on_rw["holder_tid"]),
        Some("rw-2"),
        "the writer"
    );
    assert!(
        log.chain_has(&on_rw["wait_chain"], file, line_of(file, "t1-wrlock")),
        "rw-1 waits at {}",
        log.chain_text(&on_rw["wait_chain"])
    );
    let on_m = on(m);
    assert_eq!(log.thread_name(&on_m["tid"]), Some("rw-2"));
    assert!(
        log.chain_has(&on_m["wait_chain"], file, line_of(file, "t2-lock-M")),
        "rw-2 waits at {}",
        log.chain_text(&on_m["wait_chain"])
    );
}

#[test]
fn joining_a_thread_that_waits_for_a_mutex_the_joiner_holds_is_a_deadlock_cycle() {
    let a = deadlock_then_kill("join_deadlock", "join_deadlock: armed");
    let log = a.log(0);
    let file = "join_deadlock.c";
    let m = log.object_created_at(file, line_of(file, "creation-site-M"));
    let deadlocks = log.deadlocks();
    assert_eq!(deadlocks.len(), 1, "deadlocks: {deadlocks:?}");
    let cycle = deadlocks[0]["cycle"].as_array().expect("cycle");
    assert_eq!(cycle.len(), 2, "cycle: {cycle:?}");
    assert_closed(cycle);
    let main = &log.run()["pid"];
    let by_main = cycle
        .iter()
        .find(|s| &s["tid"] == main)
        .unwrap_or_else(|| panic!("main is not in the cycle: {cycle:?}"));
    let joined = log.object(&by_main["object_id"]);
    assert_eq!(
        joined["kind"], "thread",
        "main waits for the joinee: {joined}"
    );
    assert_eq!(log.thread_name(&by_main["holder_tid"]), Some("joinee"));
    assert!(
        log.chain_has(&by_main["wait_chain"], file, line_of(file, "join-site")),
        "main waits at {}",
        log.chain_text(&by_main["wait_chain"])
    );
    let by_joinee = cycle.iter().find(|s| &s["tid"] != main).expect("joinee");
    assert_eq!(by_joinee["object_id"], m["object_id"]);
    assert_eq!(&by_joinee["holder_tid"], main);
    assert!(
        log.chain_has(
            &by_joinee["wait_chain"],
            file,
            line_of(file, "joinee-lock-M")
        ),
        "joinee waits at {}",
        log.chain_text(&by_joinee["wait_chain"])
    );
}

#[test]
fn a_writer_waiting_for_a_reader_that_waits_for_the_writer_is_a_deadlock_cycle() {
    let running = Launch::fixture("rwlock_readers_deadlock").spawn();
    running.wait_for_stdout("rwlock_readers_deadlock: armed");
    running.poll_log("both deadlocks", |log| log.deadlocks().len() >= 2);
    let a = running.kill().analyze();
    let log = a.log(0);
    let file = "rwlock_readers_deadlock.c";
    let m = log.object_created_at(file, line_of(file, "creation-site-M"));
    let rw = log.object_created_at(file, line_of(file, "creation-site-RW"));
    let up = log.object_created_at(file, line_of(file, "creation-site-UP"));
    let deadlocks = log.deadlocks();
    assert_eq!(deadlocks.len(), 2, "deadlocks: {deadlocks:?}");
    let cycle_of = |n: usize| -> &Vec<Value> {
        deadlocks
            .iter()
            .map(|d| d["cycle"].as_array().expect("cycle"))
            .find(|c| c.len() == n)
            .unwrap_or_else(|| panic!("no cycle of {n}: {deadlocks:?}"))
    };
    // The writer waits for the reader (not for the bystander, a reader that is not stuck).
    let pair = cycle_of(2);
    assert_closed(pair);
    let on = |object: &Value| -> &Value {
        pair.iter()
            .find(|s| s["object_id"] == object["object_id"])
            .unwrap_or_else(|| panic!("no thread of the cycle waits for {object}: {pair:?}"))
    };
    let on_rw = on(rw);
    assert_eq!(log.thread_name(&on_rw["tid"]), Some("writer"));
    assert_eq!(log.thread_name(&on_rw["holder_tid"]), Some("reader"));
    assert!(
        log.chain_has(&on_rw["wait_chain"], file, line_of(file, "writer-wrlock")),
        "the writer waits at {}",
        log.chain_text(&on_rw["wait_chain"])
    );
    let on_m = on(m);
    assert_eq!(log.thread_name(&on_m["tid"]), Some("reader"));
    assert!(
        log.chain_has(&on_m["wait_chain"], file, line_of(file, "reader-lock-M")),
        "the reader waits at {}",
        log.chain_text(&on_m["wait_chain"])
    );
    // Asking for writing what it holds for reading: the upgrader waits for itself.
    let upgrade = cycle_of(1);
    assert_closed(upgrade);
    assert_eq!(upgrade[0]["object_id"], up["object_id"]);
    assert_eq!(log.thread_name(&upgrade[0]["tid"]), Some("upgrader"));
    assert!(
        log.chain_has(
            &upgrade[0]["wait_chain"],
            file,
            line_of(file, "upgrade-wrlock")
        ),
        "the upgrader waits at {}",
        log.chain_text(&upgrade[0]["wait_chain"])
    );
    assert!(
        a.text.contains("a thread waits for a lock it holds itself"),
        "{}",
        a.text
    );
}

#[test]
fn lock_order_inversion_that_did_not_hang_is_reported_as_a_potential_deadlock_with_both_sites() {
    let run = Launch::fixture("lock_inversion").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "lock_inversion: total=200\n");
    let a = run.analyze();
    let log = a.log(0);
    assert!(log.deadlocks().is_empty(), "no real deadlock happened");
    let potential = log.0["potential_deadlocks"]
        .as_array()
        .expect("potential_deadlocks array");
    assert_eq!(potential.len(), 1, "potential deadlocks: {potential:?}");
    let p = &potential[0];
    assert_eq!(p["deadlocked"], false);
    assert_eq!(p["cycle"].as_array().map(Vec::len), Some(2), "{p}");
    let edges = p["edges"].as_array().expect("edges");
    assert_eq!(edges.len(), 2, "{p}");
    let forward = line_of("lock_inversion.c", "forward-inner");
    let backward = line_of("lock_inversion.c", "backward-inner");
    assert!(
        edges
            .iter()
            .any(|e| log.chain_has(&e["chain"], "lock_inversion.c", forward)),
        "one edge acquired at lock_inversion.c:{forward}: {p}"
    );
    assert!(
        edges
            .iter()
            .any(|e| log.chain_has(&e["chain"], "lock_inversion.c", backward)),
        "one edge acquired at lock_inversion.c:{backward}: {p}"
    );
    assert!(
        a.text
            .contains("POTENTIAL DEADLOCK 1: lock-order inversion"),
        "{}",
        a.text
    );
    assert!(
        a.text.contains(&format!("lock_inversion.c:{forward}")),
        "{}",
        a.text
    );
}

/// A thread waits on a condition variable while it keeps a mutex the thread that would signal
/// it needs: both still wait when the program exits, and the report names the waiter holding
/// what the signaller waits for.
#[test]
fn a_hang_through_a_condition_variable_and_a_mutex_names_the_thread_waiting_while_holding() {
    let run = Launch::fixture("cond_mutex_hang").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "cond_mutex_hang: both threads wait\n");
    let a = run.analyze();
    let text = &a.text;
    assert!(
        text.contains("STILL WAITING (2: threads waiting when the program ended)"),
        "{text}"
    );
    let hint = text
        .lines()
        .skip_while(|l| !l.contains("WAITING WHILE HOLDING"))
        .nth(1)
        .unwrap_or_else(|| panic!("no WAITING WHILE HOLDING:\n{text}"));
    let f = "cond_mutex_hang.c";
    let cond_site = format!("cond_mutex_hang.c:{} (main)", line_of(f, "init-cond"));
    let table_site = format!("cond_mutex_hang.c:{} (main)", line_of(f, "init-table"));
    assert!(
        hint.contains("\"waiter\" waits on cond#")
            && hint.contains(&cond_site)
            && hint.contains("while holding mutex#")
            && hint.contains(&table_site)
            && hint.contains("\"signaller\" waits for"),
        "{hint}"
    );
    // The same in the JSON report.
    let log = a.log(0);
    let tid_of = |name: &str| {
        log.0["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no thread {name}"))["tid"]
            .clone()
    };
    let cond = log.object_created_at(f, line_of(f, "init-cond"));
    let table = log.object_created_at(f, line_of(f, "init-table"));
    let holding = log.0["open_waits"]["waiting_while_holding"]
        .as_array()
        .expect("waiting_while_holding");
    assert_eq!(holding.len(), 1, "{holding:?}");
    assert_eq!(holding[0]["tid"], tid_of("waiter"));
    assert_eq!(holding[0]["waits_on"], cond["object_id"]);
    assert_eq!(holding[0]["holds"], table["object_id"]);
    assert_eq!(holding[0]["needed_by"], tid_of("signaller"));
}

/// The hang above, with main then joining the waiter: every thread of the process waits, with no
/// deadline, on objects of the process, and none can wake another. No wait-for cycle shows it
/// (a condition variable has no holder), so the shim's thread finds it, seeing every thread
/// wait unchanged a second apart, and records it as a deadlock while the program hangs: the
/// report names the waiter waiting on the condition variable while holding the mutex the
/// signaller waits for.
#[test]
fn every_thread_waiting_through_a_condition_variable_is_a_deadlock_found_while_it_hangs() {
    let a = deadlock_then_kill_with(
        Launch::fixture("cond_mutex_hang").arg("join"),
        "cond_mutex_hang: both threads wait",
    );
    let text = &a.text;
    let f = "cond_mutex_hang.c";
    let head = text
        .lines()
        .find(|l| l.starts_with("DEADLOCK 1 "))
        .unwrap_or_else(|| panic!("no DEADLOCK 1:\n{text}"));
    assert!(
        head.contains("by the shim's thread")
            && head.contains("all 3 threads of the process wait for one another"),
        "{head}"
    );
    let line_with = |needle: &str| {
        text.lines()
            .skip_while(|l| !l.starts_with("DEADLOCK 1 "))
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?}:\n{text}"))
            .to_string()
    };
    let knot = line_with("\"waiter\" waits on cond#");
    assert!(
        knot.contains(&format!("{f}:{} (main)", line_of(f, "init-cond")))
            && knot.contains("while holding mutex#")
            && knot.contains(&format!("{f}:{} (main)", line_of(f, "init-table")))
            && knot.contains("\"signaller\" waits for")
            && knot.ends_with("no thread is left to signal it"),
        "{knot}"
    );
    assert!(
        line_with("\"signaller\" waits for mutex#").contains("held by thread"),
        "{text}"
    );
    assert!(
        line_with("to finish (joins thread#").contains("\"waiter\""),
        "{text}"
    );
    // The JSON: one deadlock, found by the every-thread-waits check, with each thread's wait.
    let log = a.log(0);
    let d = log.deadlocks();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["found_by"], "every_thread_waits");
    assert_eq!(d[0]["detected_by"], 0);
    let cycle = d[0]["cycle"].as_array().expect("cycle");
    assert_eq!(cycle.len(), 3, "{cycle:?}");
    let cond = log.object_created_at(f, line_of(f, "init-cond"));
    let on_cond = cycle
        .iter()
        .find(|e| e["object_id"] == cond["object_id"])
        .expect("the waiter's wait on the condition variable");
    assert_eq!(on_cond["holder_tid"], 0);
    assert!(
        log.chain_has(&on_cond["wait_chain"], f, line_of(f, "cond-wait")),
        "{}",
        log.chain_text(&on_cond["wait_chain"])
    );
    let table = log.object_created_at(f, line_of(f, "init-table"));
    let on_table = cycle
        .iter()
        .find(|e| e["object_id"] == table["object_id"])
        .expect("the signaller's wait on the mutex");
    assert_eq!(on_table["holder_tid"], on_cond["tid"]);
}

/// The same two threads stuck, while main sits in poll() on a pipe: a wait the shim does not
/// track, after which main could still signal. Every thread waits, but not all on objects of the
/// process: no deadlock is claimed, and the report shows the two waits still in progress at exit.
#[test]
fn a_thread_blocked_outside_the_tracked_objects_keeps_the_hang_from_being_claimed() {
    let run = Launch::fixture("cond_mutex_hang").arg("poll").run();
    run.assert_success();
    let a = run.analyze();
    assert!(a.text.contains("deadlocks: 0"), "{}", a.text);
    assert!(a.log(0).deadlocks().is_empty());
    assert!(
        a.text
            .contains("STILL WAITING (2: threads waiting when the program ended)"),
        "{}",
        a.text
    );
}

/// Every thread waits, without a deadline, for 3 s: one on a semaphore, main joining it. The
/// semaphore's only poster is a SIGALRM handler the program installed with System V's
/// `sigset()`: the hang check must see that handler (a handler can post a semaphore) and claim
/// nothing. `sigset` answers as glibc's does, and its handler runs as the program's.
#[test]
fn a_semaphore_wait_a_sigset_handler_can_end_is_not_claimed_as_a_hang() {
    let run = run_both("sigset_post", &[]);
    assert_eq!(
        run.stdout_text(),
        "sigset: dfl handler hold; waiter woken by the handler\n"
    );
    let a = run.analyze();
    assert!(a.log(0).deadlocks().is_empty(), "{}", a.text);
    assert!(a.text.contains("deadlocks: 0"), "{}", a.text);
}
