//! Lock contention scenarios that end by themselves: what the report says about each fixture.

use std::collections::BTreeSet;

use serde_json::Value;
use waitshim_tests::{frame_in_file, frame_is, frame_text, line_of, run_both, Launch, LogReport};

/// The ids of the objects that have at least one contention record (joins apart: main's
/// waits for its threads are not what these scenarios are about).
fn objects_with_records(log: &LogReport) -> BTreeSet<u64> {
    log.records_except_joins()
        .iter()
        .map(|r| r["object_id"].as_u64().expect("object_id"))
        .collect()
}

/// Every tid a record names: holder, opener, waiters.
fn tids_of_record(r: &Value) -> Vec<&Value> {
    let mut tids = vec![&r["holder_tid"], &r["opened_by"]["tid"]];
    if let Some(ws) = r["waiters"].as_array() {
        tids.extend(ws.iter().map(|w| &w["tid"]));
    }
    tids.into_iter().filter(|t| !t.is_null()).collect()
}

#[test]
fn convoy_of_8_threads_reaches_highwater_7_on_the_mutex_created_at_its_init_line() {
    let run = run_both("convoy", &[]);
    assert_eq!(run.stdout_text(), "convoy: 8 threads done\n");
    let a = run.analyze();
    let log = a.log(0);
    let creation = line_of("convoy.c", "creation-site");
    let lock = line_of("convoy.c", "lock-site");

    assert_eq!(log.hwm(), 7, "highwater: {}", log.0["highwater"]);
    let top = log.records_except_joins()[0];
    assert_eq!(top["level"], 7, "top record: {top}");
    assert_eq!(top["state"], "complete");
    assert_eq!(top["threads_tried"], 8, "top record: {top}");
    let object = log.object(&top["object_id"]);
    assert!(
        frame_is(&object["creation_site"], "convoy.c", creation),
        "top record's object created at {}, expected convoy.c:{creation}",
        frame_text(&object["creation_site"])
    );
    assert_eq!(log.0["highwater"]["object_id"], top["object_id"]);
    assert_eq!(
        objects_with_records(&log).len(),
        1,
        "records: {:?}",
        log.records()
    );
    assert_eq!(log.counter(object, "acquisitions"), 8);
    assert_eq!(log.counter(object, "contended"), 7);
    assert_eq!(log.counter(object, "max_waiters"), 7);

    let waiters = top["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 7, "waiters: {waiters:?}");
    for w in waiters {
        assert!(
            log.chain_has(&w["chain_id"], "convoy.c", lock),
            "waiter chain {} does not reach convoy.c:{lock}",
            log.chain_text(&w["chain_id"])
        );
        assert_eq!(log.chain(&w["chain_id"])[0]["function"], "worker");
    }

    assert!(a.text.contains("HWM 7"), "text report:\n{}", a.text);
    assert!(
        a.text.contains(&format!("convoy.c:{creation}")),
        "text report:\n{}",
        a.text
    );
    assert!(
        a.text.contains(&format!("worker (convoy.c:{lock})")),
        "text report:\n{}",
        a.text
    );
}

#[test]
fn two_independent_hot_locks_are_both_contended_and_never_name_the_other_groups_threads() {
    let run = run_both("two_locks", &[]);
    assert_eq!(run.stdout_text(), "two_locks: A=400002 B=400002\n");
    let a = run.analyze();
    let log = a.log(0);
    let mutex_a = log.object_created_at("two_locks.c", line_of("two_locks.c", "creation-site-A"));
    let mutex_b = log.object_created_at("two_locks.c", line_of("two_locks.c", "creation-site-B"));
    assert_ne!(mutex_a["object_id"], mutex_b["object_id"]);

    for (object, own, other, other_lines) in [
        (
            mutex_a,
            "groupA-",
            "groupB-",
            [
                line_of("two_locks.c", "lock-site-B"),
                line_of("two_locks.c", "hot-loop-B"),
            ],
        ),
        (
            mutex_b,
            "groupB-",
            "groupA-",
            [
                line_of("two_locks.c", "lock-site-A"),
                line_of("two_locks.c", "hot-loop-A"),
            ],
        ),
    ] {
        let id = &object["object_id"];
        assert!(
            log.counter(object, "contended") >= 1,
            "mutex {id} ({own}*) never contended: {object}"
        );
        assert_eq!(
            log.counter(object, "max_waiters"),
            1,
            "mutex {id} ({own}*) has two users: at most one can wait"
        );
        assert!(
            !object["wait_sites"]
                .as_array()
                .expect("wait_sites")
                .is_empty(),
            "no wait site on the {own}* mutex: {object}"
        );
        // The HWM is global: only the first of the two mutexes to reach 1 is sure to get a
        // record, so records are checked where they exist.
        for r in log.records_on(object) {
            assert!(r["level"].as_u64() <= Some(1), "record {r}");
            for tid in tids_of_record(r) {
                let name = log.thread_name(tid).unwrap_or("");
                assert!(
                    name.starts_with(own),
                    "record on the {own}* mutex names thread {tid} {name:?}: {r}"
                );
                assert!(!name.starts_with(other));
            }
        }
        for ws in object["wait_sites"].as_array().expect("wait_sites") {
            for line in other_lines {
                assert!(
                    !log.chain_has(&ws["chain_id"], "two_locks.c", line),
                    "the {own}* mutex has a wait site of the other group: {}",
                    log.chain_text(&ws["chain_id"])
                );
            }
        }
    }
    assert_eq!(log.hwm(), 1);
    assert!(!log.records().is_empty(), "no contention record at all");
    // Main's joins are waits on thread objects and may have records of their own; among the
    // locks, only A and B were contended.
    for r in log.records_except_joins() {
        assert!(
            r["object_id"] == mutex_a["object_id"] || r["object_id"] == mutex_b["object_id"],
            "record on another object: {r}"
        );
    }
}

#[test]
fn nested_locks_taken_in_one_order_contend_only_the_outer_one_and_never_deadlock() {
    let run = run_both("nested", &[]);
    let a = run.analyze();
    let log = a.log(0);
    let outer = log.object_created_at("nested.c", line_of("nested.c", "creation-site-outer"));
    let inner = log.object_created_at("nested.c", line_of("nested.c", "creation-site-inner"));

    assert!(log.counter(outer, "contended") >= 1, "outer: {outer}");
    assert_eq!(log.hwm(), 3, "highwater: {}", log.0["highwater"]);
    let top = log.records_except_joins()[0];
    assert_eq!(top["object_id"], outer["object_id"], "top record: {top}");
    assert_eq!(top["level"], 3);

    assert_eq!(log.counter(inner, "acquisitions"), 20, "inner: {inner}");
    assert_eq!(log.counter(inner, "contended"), 0, "inner: {inner}");
    assert!(log.records_on(inner).is_empty());
    assert!(
        log.deadlocks().is_empty(),
        "deadlocks: {:?}",
        log.deadlocks()
    );
    assert!(
        !a.text.to_lowercase().contains("potential deadlock"),
        "text report:\n{}",
        a.text
    );
}

#[test]
fn static_initializer_mutex_is_tracked_from_its_first_use_with_highwater_3() {
    let run = run_both("static_init", &[]);
    let a = run.analyze();
    let log = a.log(0);
    let first_use = line_of("static_init.c", "first-use");
    let object = log.object_created_at("static_init.c", first_use);
    assert_eq!(object["origin"], "first_use", "object: {object}");
    assert_eq!(object["kind"], "mutex");
    assert_eq!(log.hwm(), 3);
    let top = log.records_except_joins()[0];
    assert_eq!(top["object_id"], object["object_id"]);
    assert_eq!(top["level"], 3);
    assert!(
        a.text.contains(&format!("static_init.c:{first_use}")),
        "text report:\n{}",
        a.text
    );
}

#[test]
fn mutex_destroyed_and_reinitialised_at_one_address_is_two_objects_with_their_own_counts() {
    let run = run_both("reinit", &[]);
    let a = run.analyze();
    let log = a.log(0);
    let gen1 = log.object_created_at("reinit.c", line_of("reinit.c", "init-gen1"));
    let gen2 = log.object_created_at("reinit.c", line_of("reinit.c", "init-gen2"));
    assert_ne!(gen1["object_id"], gen2["object_id"]);
    assert_eq!(gen1["addr"], gen2["addr"], "same address: {gen1} / {gen2}");
    assert!(gen1["addr"].is_string());

    assert_eq!(log.counter(gen1, "acquisitions"), 3, "gen 1: {gen1}");
    assert_eq!(log.counter(gen1, "max_waiters"), 2, "gen 1: {gen1}");
    assert_eq!(log.counter(gen2, "acquisitions"), 5, "gen 2: {gen2}");
    assert_eq!(log.counter(gen2, "max_waiters"), 4, "gen 2: {gen2}");
    assert!(!gen1["destroyed_at_ns"].is_null());
    assert!(!gen2["destroyed_at_ns"].is_null());
    assert!(gen1["destroyed_at_ns"].as_u64() <= gen2["created_at_ns"].as_u64());
    assert_eq!(log.hwm(), 4);
}

#[test]
fn two_hundred_threads_on_one_mutex_give_600000_acquisitions_and_201_threads() {
    let run = run_both("many_threads", &[]);
    let a = run.analyze();
    let log = a.log(0);
    let object =
        log.object_created_at("many_threads.c", line_of("many_threads.c", "creation-site"));
    assert_eq!(log.counter(object, "acquisitions"), 600_000, "{object}");
    assert_eq!(log.threads().len(), 201);
    assert_eq!(log.run()["threads_seen"], 201);
    let workers = log
        .threads()
        .iter()
        .filter(|t| t["is_main"] == false)
        .count();
    assert_eq!(workers, 200);
    assert!(log.run()["end"].is_object(), "run: {}", log.run());
    assert!(log.warnings().is_empty(), "{}", log.warning_text());

    // Every contended acquisition is accounted for twice: by how its wait ended (after
    // blocking, or brief: within the shim's back-off) and by where it waited (the lock line).
    let contended = log.counter(object, "contended");
    assert!(contended > 0, "200 threads never contended: {object}");
    let ended = &object["ended"];
    let by_reason: u64 = ["acquired", "brief"]
        .iter()
        .map(|k| ended[*k].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(by_reason, contended, "ended: {ended}");
    let lock = line_of("many_threads.c", "lock-site");
    let sites = object["wait_sites"].as_array().expect("wait_sites");
    assert!(
        sites
            .iter()
            .all(|s| log.chain_has(&s["chain_id"], "many_threads.c", lock)),
        "wait sites: {sites:?}"
    );
    let by_site: u64 = sites.iter().map(|s| s["count"].as_u64().unwrap_or(0)).sum();
    assert_eq!(by_site, contended, "wait sites: {sites:?}");
}

#[test]
fn mutex_of_a_dlopened_library_is_created_inside_that_library() {
    let lib = waitshim_tests::fixture("libdlock.so");
    let run = run_both("dlopen_main", &[lib.to_str().expect("utf-8 path")]);
    let a = run.analyze();
    let log = a.log(0);
    let creation = line_of("dlopen_lib.c", "creation-site");
    let lock = line_of("dlopen_lib.c", "lock-site");

    let modules: Vec<&str> = log.0["modules"]
        .as_array()
        .expect("modules")
        .iter()
        .filter_map(|m| m["path"].as_str())
        .collect();
    assert!(
        modules.iter().any(|p| p.ends_with("/libdlock.so")),
        "modules: {modules:?}"
    );
    let object = log.object_created_at("dlopen_lib.c", creation);
    let module = object["creation_site"]["module"].as_str().unwrap_or("");
    assert!(
        module.ends_with("/libdlock.so"),
        "creation site module {module:?}"
    );
    assert_eq!(log.hwm(), 3);
    let top = log.records_except_joins()[0];
    assert_eq!(top["object_id"], object["object_id"]);
    for w in top["waiters"].as_array().expect("waiters") {
        assert!(
            log.chain_has(&w["chain_id"], "dlopen_lib.c", lock),
            "waiter chain {}",
            log.chain_text(&w["chain_id"])
        );
    }
    assert!(
        a.text.contains(&format!("dlopen_lib.c:{creation}")),
        "text report:\n{}",
        a.text
    );
}

#[test]
fn cxx_std_mutex_with_exceptions_thrown_across_its_guards_runs_unchanged_and_is_contended() {
    let run = run_both("cxx_exceptions", &[]);
    assert_eq!(
        run.stdout_text(),
        "cxx_exceptions: rounds=20000 caught=13332 rethrown=6668\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let mutexes: Vec<&Value> = log
        .objects()
        .into_iter()
        .filter(|o| o["kind"] == "mutex" && o["counters"]["contended"].as_u64() > Some(0))
        .collect();
    assert_eq!(mutexes.len(), 1, "contended mutexes: {mutexes:?}");
    let object = mutexes[0];
    assert!(log.counter(object, "max_waiters") >= 1);
    assert!(log.hwm() >= 1);
    let top = log.records_except_joins()[0];
    assert_eq!(top["object_id"], object["object_id"]);

    // The creation site (first use through inlined std::mutex::lock), or at least some frame
    // of the creation or waiter chains, lies in the fixture's source.
    let chains: Vec<&Value> = std::iter::once(&object["creation_chain"])
        .chain(
            object["wait_sites"]
                .as_array()
                .expect("wait_sites")
                .iter()
                .map(|w| &w["chain_id"]),
        )
        .collect();
    let in_source = frame_in_file(&object["creation_site"], "cxx_exceptions.cpp")
        || chains.iter().any(|c| {
            log.chain(c)
                .iter()
                .any(|f| frame_in_file(f, "cxx_exceptions.cpp"))
        });
    assert!(
        in_source,
        "no frame in cxx_exceptions.cpp; creation site {}, chains: {:?}",
        frame_text(&object["creation_site"]),
        chains.iter().map(|c| log.chain_text(c)).collect::<Vec<_>>()
    );
}

#[test]
fn cxx_std_mutex_creation_site_is_the_guard_line_through_inlined_frames() {
    let run = Launch::fixture("cxx_exceptions").run();
    run.assert_success();
    let a = run.analyze();
    let log = a.log(0);
    let guard = line_of("cxx_exceptions.cpp", "guard-site");
    let object = log.object_created_at("cxx_exceptions.cpp", guard);
    assert_eq!(
        log.records_except_joins()[0]["object_id"],
        object["object_id"]
    );
    assert!(
        a.text.contains(&format!("cxx_exceptions.cpp:{guard}")),
        "text report:\n{}",
        a.text
    );
}

#[test]
fn a_mutex_per_request_300000_times_is_one_line_of_short_lived_objects_in_a_small_log() {
    let native = Launch::fixture("churn")
        .native()
        .env("CHURN_PRINT_RSS", "1")
        .run();
    native.assert_success();
    let run = Launch::fixture("churn").env("CHURN_PRINT_RSS", "1").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "churn: 300000 requests\n");
    assert_eq!(run.stdout_text(), native.stdout_text());

    let a = run.analyze();
    let log = a.log(0);
    let init = line_of("churn.c", "init-site");
    let short: Vec<_> = log
        .short_lived()
        .into_iter()
        .filter(|s| frame_is(&s["created_at"], "churn.c", init))
        .collect();
    assert_eq!(short.len(), 1, "short-lived: {:?}", log.short_lived());
    assert_eq!(short[0]["kind"], "mutex");
    // Some may have been alive at a flush, and written on their own instead.
    let alone = log.objects_created_at("churn.c", init);
    assert_eq!(
        short[0]["count"].as_u64().unwrap() + alone.len() as u64,
        300_000,
        "{}",
        short[0]
    );
    assert!(
        alone.len() < 100,
        "{} objects written on their own",
        alone.len()
    );
    assert_eq!(
        short[0]["acquisitions"].as_u64().unwrap(),
        2 * short[0]["count"].as_u64().unwrap()
    );
    let queue = log.object_created_at("churn.c", line_of("churn.c", "queue-site"));
    assert!(log.counter(queue, "contended") >= 1, "{queue}");
    assert!(
        a.text.contains(&format!("churn.c:{init}")),
        "text report:\n{}",
        a.text
    );

    let size = std::fs::metadata(run.single_log()).expect("log").len();
    assert!(size < 1 << 20, "log of {size} bytes");
    let peak = |r: &waitshim_tests::Run| -> u64 {
        let text = r.stderr_text();
        let line = text
            .lines()
            .find(|l| l.starts_with("churn: peak"))
            .unwrap_or_else(|| panic!("no peak RSS line: {text}"));
        line.split_whitespace()
            .find_map(|w| w.parse().ok())
            .expect("kB")
    };
    let (native_kb, shim_kb) = (peak(&native), peak(&run));
    assert!(
        shim_kb < native_kb + 64 * 1024,
        "peak RSS {shim_kb} kB under the shim, {native_kb} kB native"
    );
}

#[test]
fn objects_destroyed_and_made_again_keep_their_own_counts_even_when_the_program_destroys_twice() {
    let run = run_both("reuse", &[]);
    let a = run.analyze();
    let log = a.log(0);

    // Made again at the same address after another thread locked the first one 1000 times.
    let gen2 = log.object_created_at("reuse.c", line_of("reuse.c", "gen2-site"));
    assert_eq!(log.counter(gen2, "acquisitions"), 1, "{gen2}");

    // Short-lived, but their kind-specific counts are kept in the sums.
    let short = |tag: &str| -> &Value {
        let line = line_of("reuse.c", tag);
        let found: Vec<_> = log
            .short_lived()
            .into_iter()
            .filter(|s| frame_is(&s["created_at"], "reuse.c", line))
            .collect();
        assert_eq!(found.len(), 1, "{tag}: {:?}", log.short_lived());
        found[0]
    };
    assert_eq!(short("kinds-site-sem")["counters"]["posts"], 100);
    assert_eq!(short("kinds-site-sem")["acquisitions"], 100);
    assert_eq!(
        short("kinds-site-rwlock")["counters"]["read_acquisitions"],
        100
    );
    let cond = short("kinds-site-cond");
    assert_eq!(cond["counters"]["signals"], 100, "{cond}");
    assert_eq!(cond["counters"]["broadcasts"], 50, "{cond}");

    // A mutex destroyed by two threads at once does not make later mutexes share an entry.
    let fresh = log.objects_created_at("reuse.c", line_of("reuse.c", "fresh-site"));
    assert_eq!(fresh.len(), 400);
    assert!(
        fresh.iter().all(|o| log.counter(o, "acquisitions") == 10),
        "{:?}",
        fresh
            .iter()
            .map(|o| &o["counters"]["acquisitions"])
            .collect::<Vec<_>>()
    );
}

/// `first` has 2 threads waiting at once, then `second` 3: the episode on `second` opens at its
/// first waiter (its own peak, below the mark of 2) and the third waiter raises the run's mark
/// to 3 within it. That record is the one that raised the mark: the JSON says `exceeded`, the
/// text how high, whatever opened it.
#[test]
fn the_record_that_raised_the_highwater_mark_is_labelled_exceeded() {
    let run = run_both("peak_then_mark", &[]);
    assert_eq!(
        run.stdout_text(),
        "peak_then_mark: 2 then 3 threads through\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let f = "peak_then_mark.c";
    let second = log.object_created_at(f, line_of(f, "init-second"));
    assert_eq!(log.hwm(), 3, "{}", log.0["highwater"]);
    assert_eq!(log.0["highwater"]["object_id"], second["object_id"]);
    let records = log.records_on(second);
    let raised: Vec<&&Value> = records.iter().filter(|r| r["level"] == 3).collect();
    assert_eq!(raised.len(), 1, "{records:?}");
    assert_eq!(raised[0]["reason"], "exceeded", "{}", raised[0]);
    let at = a
        .text
        .find(&format!("object: mutex#{} second ", second["object_id"]))
        .expect("a record of second");
    let opened = a.text[at..].lines().nth(1).unwrap_or_default();
    assert!(
        opened.contains("(its waiters rose above the run's highwater mark, to 3)"),
        "{opened}"
    );
}
