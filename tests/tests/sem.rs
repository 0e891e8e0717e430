//! Semaphores: a pool's waiters make the highwater mark, a named semaphore is one object across
//! processes, waits that end without a post say why, C++ `std::counting_semaphore` is a futex
//! (libstdc++ does not use `sem_t`), and every `sem_*` return value and errno is unchanged.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use waitshim_format::counter;
use waitshim_tests::{analyze, kind_counters, line_of, run_semantics, Launch, LogReport};

fn kind_counter(all: &HashMap<u64, HashMap<u16, u64>>, object: &Value, key: u16) -> u64 {
    let id = object["object_id"].as_u64().expect("object_id");
    all.get(&id).and_then(|k| k.get(&key)).copied().unwrap_or(0)
}

fn semaphores<'a>(log: &LogReport<'a>) -> Vec<&'a Value> {
    log.objects()
        .into_iter()
        .filter(|o| o["kind"] == "semaphore")
        .collect()
}

#[test]
fn pool_of_two_with_six_threads_has_four_waiting_on_the_semaphore() {
    let run = Launch::fixture("sem_pool").run();
    run.assert_success();
    assert_eq!(
        run.stdout_text(),
        "sem_pool: 6 threads done, at most 2 inside\n"
    );
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log = a.log(0);

    let pool = log.object_created_at("sem_pool.c", line_of("sem_pool.c", "creation-site"));
    assert_eq!(pool["kind"], "semaphore", "{pool}");
    assert_eq!(log.hwm(), 4, "HWM: {}", log.0["highwater"]);
    assert_eq!(log.0["highwater"]["object_id"], pool["object_id"]);
    assert_eq!(log.counter(pool, "acquisitions"), 6, "{pool}");
    assert_eq!(log.counter(pool, "contended"), 4, "{pool}");
    assert_eq!(log.counter(pool, "max_waiters"), 4, "{pool}");
    assert_eq!(
        log.counter(pool, "owner_changes"),
        0,
        "a semaphore has no owner: {pool}"
    );

    let top = log.records()[0];
    assert_eq!(top["object_id"], pool["object_id"], "top record: {top}");
    assert_eq!(top["level"], 4, "{top}");
    assert_eq!(top["state"], "complete", "{top}");
    let take = line_of("sem_pool.c", "take-site");
    let waiters = top["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 4, "{top}");
    for w in waiters {
        assert!(
            log.chain_has(&w["chain_id"], "sem_pool.c", take),
            "waiter not at sem_pool.c:{take}: {}",
            log.chain_text(&w["chain_id"])
        );
    }
    // Ended by a thread giving a resource back: the poster is who the waiters waited for.
    let give = line_of("sem_pool.c", "give-site");
    assert!(
        log.chain_has(&top["holder_chain"], "sem_pool.c", give),
        "episode not ended at sem_pool.c:{give}: {}",
        log.chain_text(&top["holder_chain"])
    );
    let holder = &top["holder_tid"];
    assert!(
        log.thread(holder)
            .is_some_and(|t| !t["is_main"].as_bool().unwrap_or(true)),
        "holder {holder} is not a pool thread"
    );

    let k = kind_counters(run.single_log());
    assert_eq!(kind_counter(&k, pool, counter::POSTS), 6);
    assert_eq!(kind_counter(&k, pool, counter::ENDED_ACQUIRED), 4);
    assert!(a.text.contains("HWM 4"), "text report:\n{}", a.text);
}

/// A signal handler posts a semaphore on a thread that never used it (so the shim has nothing
/// of it at hand there, and may neither allocate nor lock): every post is still counted.
#[test]
fn posts_from_a_signal_handler_on_a_thread_that_never_used_the_semaphore_are_counted() {
    let run = Launch::fixture("handler_post").run();
    run.assert_success();
    assert_eq!(
        run.stdout_text(),
        "handler_post: 200 posts from the handler, 200 waits\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let f = "handler_post.c";
    let sem = log.object_created_at(f, line_of(f, "sem-site"));
    assert_eq!(log.counter(sem, "posts"), 200, "{sem}");
    assert_eq!(log.counter(sem, "acquisitions"), 200, "{sem}");
}

#[test]
fn named_semaphore_shared_by_two_processes_has_the_same_name_in_both_logs() {
    let run = Launch::fixture("sem_named").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "sem_named: child got the post\n");
    let name = format!("/waitshim-test-{}", run.pid);
    assert!(
        !Path::new("/dev/shm")
            .join(format!("sem.waitshim-test-{}", run.pid))
            .exists(),
        "the program unlinks its semaphore"
    );
    // Parent and exec'd child (the forked child's log, empty at exec, is removed): both readable.
    assert_eq!(run.logs.len(), 2, "logs: {:?}", run.logs);
    let a = analyze(&run.logs, &[]);
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    assert_eq!(a.logs().len(), 2);

    let named_in = |i: usize| -> Option<&Value> {
        semaphores(&a.log(i))
            .into_iter()
            .find(|o| o["name"].as_str() == Some(name.as_str()))
    };
    let pid_of = |i: usize| a.log(i).run()["pid"].as_u64().expect("pid");
    let parent = (0..2)
        .find(|&i| pid_of(i) == u64::from(run.pid))
        .expect("a log of the parent");
    let child = (0..2)
        .find(|&i| {
            a.log(i).run()["cmdline"]
                .as_array()
                .is_some_and(|c| c.iter().any(|x| x == "child"))
        })
        .expect("a log of the exec'd child");
    assert_ne!(pid_of(child), pid_of(parent));

    // Parent: the named semaphore, posted once, never waited on.
    let p = named_in(parent).unwrap_or_else(|| {
        panic!(
            "no semaphore {name} in the parent's log: {:?}",
            a.log(parent).objects()
        )
    });
    assert_eq!(a.log(parent).counter(p, "contended"), 0);
    let parent_log = &a.logs()[parent]["file"];
    let k = kind_counters(Path::new(parent_log.as_str().expect("file")));
    assert_eq!(kind_counter(&k, p, counter::POSTS), 1, "{p}");

    // Child: the same name, one wait of about the parent's 200 ms sleep.
    let cl = a.log(child);
    let c = named_in(child)
        .unwrap_or_else(|| panic!("no semaphore {name} in the child's log: {:?}", cl.objects()));
    assert_eq!(cl.counter(c, "acquisitions"), 1, "{c}");
    assert_eq!(cl.counter(c, "contended"), 1, "{c}");
    let waited = cl.counter(c, "wait_max_ns");
    assert!(
        (100_000_000..5_000_000_000).contains(&waited),
        "child waited {waited} ns"
    );
    let wait_line = line_of("sem_named.c", "child-wait");
    assert!(
        c["wait_sites"]
            .as_array()
            .expect("wait_sites")
            .iter()
            .any(|w| cl.chain_has(&w["chain_id"], "sem_named.c", wait_line)),
        "no wait at sem_named.c:{wait_line}: {c}"
    );
    assert_eq!(cl.hwm(), 1);
    let rec = cl.records_on(c);
    assert_eq!(rec.len(), 1, "{rec:?}");
    // The post came from the other process: the episode ends with the wait, with no holder here.
    assert_eq!(rec[0]["state"], "complete", "{}", rec[0]);
    assert_eq!(rec[0]["holder_tid"], 0, "{}", rec[0]);
    assert!(
        rec[0]["elapsed_ns"].as_u64().unwrap() >= 100_000_000,
        "{}",
        rec[0]
    );
}

#[test]
fn timed_out_and_interrupted_semaphore_waits_say_why_they_ended() {
    let native = Launch::fixture("sem_timeout").native().run();
    native.assert_success();
    let run = Launch::fixture("sem_timeout").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert!(
        run.stdout_text().ends_with("sem_timeout: ok\n"),
        "{}",
        run.stdout_text()
    );
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log = a.log(0);
    let k = kind_counters(run.single_log());

    let timed = log.object_created_at(
        "sem_timeout.c",
        line_of("sem_timeout.c", "creation-site-timeout"),
    );
    assert_eq!(timed["kind"], "semaphore");
    assert_eq!(log.counter(timed, "contended"), 2, "{timed}");
    assert_eq!(log.counter(timed, "timeouts"), 2, "{timed}");
    assert_eq!(log.counter(timed, "acquisitions"), 0, "{timed}");
    assert_eq!(kind_counter(&k, timed, counter::ENDED_TIMED_OUT), 2);
    assert_eq!(kind_counter(&k, timed, counter::ENDED_ACQUIRED), 0);
    for tag in ["timedwait-site", "clockwait-site"] {
        let line = line_of("sem_timeout.c", tag);
        assert!(
            timed["wait_sites"]
                .as_array()
                .expect("wait_sites")
                .iter()
                .any(|w| log.chain_has(&w["chain_id"], "sem_timeout.c", line)),
            "no wait at sem_timeout.c:{line}: {timed}"
        );
    }

    let intr = log.object_created_at(
        "sem_timeout.c",
        line_of("sem_timeout.c", "creation-site-interrupt"),
    );
    assert_eq!(log.counter(intr, "contended"), 1, "{intr}");
    assert_eq!(log.counter(intr, "acquisitions"), 0, "{intr}");
    assert_eq!(log.counter(intr, "timeouts"), 0, "{intr}");
    assert_eq!(kind_counter(&k, intr, counter::ENDED_INTERRUPTED), 1);
    assert_eq!(kind_counter(&k, intr, counter::ENDED_TIMED_OUT), 0);
    // Nobody posted either semaphore: their episodes ended when the waits did, with no holder.
    for r in log.records() {
        assert_eq!(r["state"], "complete", "{r}");
        assert_eq!(r["holder_tid"], 0, "{r}");
    }
}

/// `sem_cxx.cpp` built with `-D_GLIBCXX_USE_POSIX_SEMAPHORE`, which makes libstdc++ use `sem_t`.
fn cxx_posix_variant(dir: &Path) -> PathBuf {
    let exe = dir.join("sem_cxx_posix");
    let src = waitshim_tests::workspace_root().join("fixtures/sem_cxx.cpp");
    let out = Command::new(std::env::var_os("CXX").unwrap_or_else(|| "c++".into()))
        .args([
            "-O1",
            "-g",
            "-pthread",
            "-std=c++20",
            "-D_GLIBCXX_USE_POSIX_SEMAPHORE",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run c++");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// libstdc++'s `std::counting_semaphore` makes no `sem_*` call: no semaphore object. Its waits
/// are futex waits on the counter, so the pool shows as a futex with the 4 threads waiting.
#[test]
fn cxx_counting_semaphore_runs_unchanged_and_shows_as_a_futex_since_libstdcxx_uses_no_sem_t() {
    let native = Launch::fixture("sem_cxx").native().run();
    native.assert_success();
    let run = Launch::fixture("sem_cxx").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert_eq!(
        run.stdout_text(),
        "sem_cxx: 6 threads done, at most 2 inside\n"
    );
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log = a.log(0);
    assert!(semaphores(&log).is_empty(), "{:?}", log.objects());
    let acquire = line_of("sem_cxx.cpp", "acquire-site");
    let pool = log.object_created_at("sem_cxx.cpp", acquire);
    assert_eq!(pool["kind"], "futex", "{pool}");
    assert_eq!(log.hwm(), 4, "{}", log.0["highwater"]);
    assert_eq!(log.0["highwater"]["object_id"], pool["object_id"]);
    assert_eq!(log.counter(pool, "max_waiters"), 4, "{pool}");
    // A release wakes every waiter: those that do not get the unit wait again.
    let waits = log.counter(pool, "contended");
    assert!(waits >= 4, "{pool}");
    assert_eq!(pool["ended"]["signalled"], waits, "{pool}");
    let top = log.records()[0];
    assert_eq!(top["object_id"], pool["object_id"], "top record: {top}");
    assert_eq!(top["level"], 4, "{top}");
    let waiters = top["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 4, "{top}");
    for w in waiters {
        assert!(
            log.chain_has(&w["chain_id"], "sem_cxx.cpp", acquire),
            "{}",
            log.chain_text(&w["chain_id"])
        );
    }
    let release = line_of("sem_cxx.cpp", "release-site");
    assert!(
        log.chain_has(&top["holder_chain"], "sem_cxx.cpp", release),
        "{}",
        log.chain_text(&top["holder_chain"])
    );

    // The same program built to use sem_t shows the pool: 4 threads waiting on it.
    let dir = tempfile::tempdir().expect("temp dir");
    let posix = Launch::program(cxx_posix_variant(dir.path())).run();
    posix.assert_success();
    assert_eq!(posix.stdout_text(), native.stdout_text());
    let a = posix.analyze();
    let log = a.log(0);
    let pool = log.object_created_at(
        "sem_cxx.cpp",
        line_of("sem_cxx.cpp", "semaphore-definition"),
    );
    assert_eq!(pool["kind"], "semaphore");
    assert_eq!(log.hwm(), 4, "{}", log.0["highwater"]);
    assert_eq!(log.counter(pool, "contended"), 4, "{pool}");
}

#[test]
fn semaphore_semantics_program_sees_every_return_value_and_errno_unchanged() {
    let run = run_semantics("sem_semantics", 50);
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log = a.log(0);
    // Two unnamed semaphores and two mappings of one named semaphore (glibc maps "/x" and "x"
    // separately), which keep their one name. One unnamed one is never waited on and destroyed:
    // it is summed with the short-lived objects of its creation site instead.
    let sems = semaphores(&log);
    assert_eq!(sems.len(), 3, "{sems:?}");
    let short: u64 = log
        .short_lived()
        .iter()
        .filter(|s| s["kind"] == "semaphore")
        .map(|s| s["count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(short, 1, "{:?}", log.short_lived());
    let named: Vec<_> = sems.iter().filter(|o| o["name"].is_string()).collect();
    assert_eq!(named.len(), 2, "{sems:?}");
    assert_eq!(named[0]["name"], named[1]["name"]);
    assert!(
        named.iter().all(|o| !o["destroyed_at_ns"].is_null()),
        "closed at the last sem_close: {named:?}"
    );
}
