//! Futexes: programs whose locks never call a pthread function (Rust's `std::sync`, hand-written
//! futexes) wait in `syscall(SYS_futex, ...)`; the report shows those waits as it shows a
//! mutex's, and every call of `syscall` returns what glibc returns, with the same errno.

use serde_json::Value;
use waitshim_tests::{compile_c, line_of, run_both, run_semantics, Launch, LogReport};

const RUST: &str = "rust_mutex.rs";
const C: &str = "futex_semantics.c";

/// Every wait site of `object` has a frame at `file:line`; there is at least one.
fn all_waited_at(log: &LogReport, object: &Value, file: &str, line: u32) {
    let sites = object["wait_sites"].as_array().expect("wait_sites");
    assert!(!sites.is_empty(), "no wait site: {object}");
    for s in sites {
        assert!(
            log.chain_has(&s["chain_id"], file, line),
            "a wait not at {file}:{line}: {}",
            log.chain_text(&s["chain_id"])
        );
    }
}

/// `FUTEX_WAKE` calls that woke a waiter of `object` (a kind-specific counter: absent at 0).
fn wakes(object: &Value) -> u64 {
    object["counters"]["wakes"].as_u64().unwrap_or(0)
}

/// How many of `object`'s waits ended with reason `how`.
fn ended(object: &Value, how: &str) -> u64 {
    object["ended"][how].as_u64().unwrap_or(0)
}

/// 4 threads take turns on one `std::sync::Mutex` for ~250 ms, ~1 ms each: the report shows
/// the mutex's futex word, first used at the `lock()` call, with 3 threads waiting at once and
/// waits adding up to more than the whole run, each waiter chain through that `lock()` line, each
/// episode ended by a worker's unlock; and the `Condvar` the consumer waits on, with every wait
/// woken by main's `notify_one`. Without the shim's `syscall` the report showed no sync object.
#[test]
fn rust_std_mutex_and_condvar_waits_show_as_futexes_at_the_lock_and_wait_lines() {
    let run = run_both("rust_mutex", &[]);
    assert_eq!(
        run.stdout_text(),
        "rust_mutex: counter 240, 20 items summing to 210\n"
    );
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log = a.log(0);

    let lock = line_of(RUST, "lock-site");
    let counter = log.object_created_at(RUST, lock);
    assert_eq!(counter["kind"], "futex", "{counter}");
    let waits = log.counter(counter, "contended");
    assert!(
        waits >= 60,
        "{waits} waits on the contended mutex: {counter}"
    );
    assert_eq!(ended(counter, "signalled"), waits, "{counter}");
    assert_eq!(log.counter(counter, "max_waiters"), 3, "{counter}");
    assert_eq!(log.hwm(), 3, "{}", log.0["highwater"]);
    let run_ns = log.run()["duration_ns"].as_u64().expect("duration_ns");
    let waited = log.counter(counter, "wait_total_ns");
    assert!(
        waited > run_ns,
        "3 threads waiting most of the run: {waited} ns of waits in a {run_ns} ns run"
    );
    all_waited_at(&log, counter, RUST, lock);
    let records = log.records_on(counter);
    assert!(!records.is_empty(), "no contention record on the mutex");
    for r in records {
        assert_eq!(r["state"], "complete", "{r}");
        let holder = log.thread_name(&r["holder_tid"]).unwrap_or("");
        assert!(holder.starts_with("worker-"), "released by {holder:?}: {r}");
        for w in r["waiters"].as_array().expect("waiters") {
            assert!(
                log.chain_has(&w["chain_id"], RUST, lock),
                "{}",
                log.chain_text(&w["chain_id"])
            );
        }
    }

    // READY by its name: SLOT's word may be first used at the same line too (the consumer
    // takes the mutex back inside the wait, and may be the first to wait on it there).
    let ready = log
        .objects()
        .into_iter()
        .find(|o| o["global"]["name"] == "rust_mutex::READY")
        .expect("READY");
    assert!(
        log.chain_has(&ready["creation_chain"], RUST, line_of(RUST, "cond-wait")),
        "{ready}"
    );
    assert_eq!(ready["kind"], "futex", "{ready}");
    let waits = log.counter(ready, "contended");
    // One wait per item, but for items the consumer found there before it looked (the first one,
    // or any on a machine so loaded that main prepared it before the consumer slept).
    assert!(
        (10..=20).contains(&waits),
        "{waits} waits on READY: {ready}"
    );
    assert_eq!(ended(ready, "signalled"), waits, "{ready}");
    assert_eq!(wakes(ready), waits, "{ready}");
    assert!(
        log.counter(ready, "wait_total_ns") >= waits * 1_000_000,
        "each wait lasts while main prepares an item, 2 ms: {ready}"
    );
    all_waited_at(&log, ready, RUST, line_of(RUST, "cond-wait"));

    // What each futex word is, from std's own functions: the Mutex a lock, the Condvars (and
    // the Barrier built on one) waits for another thread to act, the scope's park a join.
    assert_eq!(counter["waits_are"], "lock", "{counter}");
    assert_eq!(ready["waits_are"], "event", "{ready}");
    let taken = log
        .objects()
        .into_iter()
        .find(|o| o["global"]["name"] == "rust_mutex::TAKEN")
        .expect("TAKEN");
    assert_eq!(taken["waits_are"], "event", "{taken}");
    let section = &a.text[a.text.find("WHERE THE WAITING WENT").expect("section")..];
    let section = &section[..section.find("\n\n").unwrap_or(section.len())];
    let locks = section.find("locks: waiting").expect("locks");
    let events = section
        .find("waiting for another thread to act")
        .expect("events");
    let joins = section.find("joins: waiting").expect("joins");
    let at = |what: &str| {
        section
            .find(what)
            .unwrap_or_else(|| panic!("{what}: {section}"))
    };
    assert!(
        locks < at("rust_mutex::COUNTER") && at("rust_mutex::COUNTER") < events,
        "{section}"
    );
    assert!(
        events < at("rust_mutex::READY") && at("rust_mutex::READY") < joins,
        "{section}"
    );
    assert!(
        events < at("rust_mutex::TAKEN") && at("rust_mutex::TAKEN") < joins,
        "{section}"
    );
    // main's wait at the end of thread::scope, for the scoped workers to finish.
    let scope_line = format!("{RUST}:{} (rust_mutex::main)", line_of(RUST, "scope"));
    assert!(joins < at(&scope_line), "{section}");
    // The Mutex serialises the workers: its critical sections lead the critical path (a waiter
    // woken by an unlock takes the word), and the scope's join is not called idle.
    let path = &log.0["critical_path"];
    let first_held = path["by"]
        .as_array()
        .expect("critical_path.by")
        .iter()
        .find(|c| c["cause"] == "held")
        .unwrap_or_else(|| panic!("no lock on the path: {path}"));
    assert_eq!(first_held["object_id"], counter["object_id"], "{path}");
    let scope = log.object_created_at(RUST, line_of(RUST, "scope"));
    assert_eq!(scope["waits_are"], "join", "{scope}");
    let idle = a
        .text
        .lines()
        .find(|l| l.contains("  idle: "))
        .unwrap_or("");
    let scope_label = format!("futex#{} ", scope["object_id"]);
    assert!(
        !idle.contains("COUNTER") && !idle.contains(&scope_label),
        "{idle}"
    );

    // The gate's run-level figures are of the objects the report calls locks: the Condvars'
    // waits are not lock waits there either.
    let lock_waits: u64 = log
        .objects()
        .iter()
        .filter(|o| o["waits_are"] == "lock")
        .map(|o| log.counter(o, "contended"))
        .sum();
    assert!(
        lock_waits >= log.counter(counter, "contended"),
        "{lock_waits}"
    );
    let gate = std::process::Command::new(waitshim_tests::analyzer_path())
        .args(["check", "--no-default-gate", "--fail-if"])
        .arg(format!("waits != {lock_waits}"))
        .arg(run.single_log())
        .output()
        .expect("run check");
    assert!(
        gate.status.success(),
        "the gate's lock waits are not the report's {lock_waits}: {}",
        String::from_utf8_lossy(&gate.stdout)
    );
    // The HTML page's table says what each futex word is.
    let page = waitshim_tests::export_beside(run.single_log(), "html", "out.html");
    let page = std::fs::read_to_string(page).expect("page");
    for kind in ["futex (a lock)", "futex (waits for another thread to act)"] {
        assert!(page.contains(kind), "{kind} is not in the page");
    }

    assert!(a.text.contains("FUTEXES ("), "{}", a.text);
    assert!(
        a.text
            .contains(&format!("first used in {RUST}:{lock} (rust_mutex::worker)")),
        "{}",
        a.text
    );
}

/// A program calling `syscall(SYS_futex, ...)` itself: timed waits that time out, a stale value,
/// an interrupted wait, a wake of two waiters, and calls that fail at once; and other system
/// calls through `syscall()`. Every result and errno is the native one, and the report says
/// exactly what slept: three timed-out waits on one word, one interrupted on another, two woken
/// together on a third by main (a record of level 2, the highwater mark); nothing on the word
/// with the stale value, nor at the calls the kernel refused.
#[test]
fn futex_calls_return_as_natively_and_the_report_shows_what_slept_and_how_it_ended() {
    let run = run_semantics("futex_semantics", 20);
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log = a.log(0);

    let timed = log.object_created_at(C, line_of(C, "timeout-wait"));
    assert_eq!(timed["kind"], "futex", "{timed}");
    assert_eq!(log.counter(timed, "contended"), 3, "{timed}");
    assert_eq!(log.counter(timed, "timeouts"), 3, "{timed}");
    assert_eq!(ended(timed, "timed_out"), 3, "{timed}");
    assert_eq!(wakes(timed), 0, "{timed}");

    let interrupted = log.object_created_at(C, line_of(C, "interrupted-wait"));
    assert_eq!(log.counter(interrupted, "contended"), 1, "{interrupted}");
    assert_eq!(ended(interrupted, "interrupted"), 1, "{interrupted}");

    let woken = log.object_created_at(C, line_of(C, "waiter-wait"));
    assert_eq!(log.counter(woken, "contended"), 2, "{woken}");
    assert_eq!(ended(woken, "signalled"), 2, "{woken}");
    assert_eq!(wakes(woken), 1, "{woken}");
    assert_eq!(log.counter(woken, "max_waiters"), 2, "{woken}");
    assert_eq!(log.hwm(), 2, "{}", log.0["highwater"]);
    assert_eq!(log.0["highwater"]["object_id"], woken["object_id"]);
    let records = log.records_on(woken);
    assert_eq!(records.len(), 1, "{records:?}");
    let r = records[0];
    assert_eq!(r["level"], 2, "{r}");
    assert!(
        log.thread(&r["holder_tid"])
            .is_some_and(|t| t["is_main"] == true),
        "ended by main's wake: {r}"
    );
    assert!(
        log.chain_has(&r["holder_chain"], C, line_of(C, "wake-two")),
        "{}",
        log.chain_text(&r["holder_chain"])
    );
    let waiters = r["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 2, "{r}");
    for w in waiters {
        assert!(
            log.chain_has(&w["chain_id"], C, line_of(C, "waiter-wait")),
            "{}",
            log.chain_text(&w["chain_id"])
        );
    }

    for tag in [
        "stale-wait",
        "null-wait",
        "misaligned-wait",
        "unmapped-wait",
        "null-bitset-wait",
        "bad-timeout-wait",
    ] {
        let found = log.objects_created_at(C, line_of(C, tag));
        assert!(found.is_empty(), "{tag}: nothing slept there: {found:?}");
    }
    let futexes = log
        .objects()
        .into_iter()
        .filter(|o| o["kind"] == "futex")
        .count();
    assert_eq!(futexes, 3, "{:?}", log.objects());
    assert!(a.text.contains("FUTEXES (3"), "{}", a.text);
}

/// A program that forbids `process_vm_readv` with a seccomp filter (EPERM), which the shim uses to
/// look at a futex word before a wait: it runs as natively, and its waits are still reported
/// (the stale one still not as a wait: the kernel's EAGAIN tells).
#[test]
fn a_seccomp_filter_refusing_process_vm_readv_changes_nothing_and_waits_still_show() {
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = compile_c(
        dir.path(),
        "no_peeking",
        r#"
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static int word;
int main(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {4, f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
        return 1;
    struct timespec t = {0, 20000000};
    for (int i = 0; i < 3; i++) {
        errno = 0;
        long r = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &t, NULL, 0);
        printf("wait %d: %ld %d\n", i, r, errno);
    }
    errno = 0;
    long r = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 1, &t, NULL, 0);
    printf("stale: %ld %d\n", r, errno);
    return 0;
}
"#,
    );
    let native = Launch::program(&exe).native().run();
    native.assert_success();
    let run = Launch::program(&exe).run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert_eq!(
        run.stdout_text(),
        "wait 0: -1 110\nwait 1: -1 110\nwait 2: -1 110\nstale: -1 11\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let futexes: Vec<_> = log
        .objects()
        .into_iter()
        .filter(|o| o["kind"] == "futex")
        .collect();
    assert_eq!(futexes.len(), 1, "{futexes:?}");
    assert_eq!(log.counter(futexes[0], "contended"), 3, "{}", futexes[0]);
    assert_eq!(ended(futexes[0], "timed_out"), 3, "{}", futexes[0]);
}
