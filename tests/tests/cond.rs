//! Condition variables: what the report says about programs that wait on them — fixtures and
//! real programs from Debian packages.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;
use waitshim_format::counter;
use waitshim_tests::{
    debian_program, frame_text, kind_counters, line_of, run_both, run_semantics, Launch, LogReport,
    Run,
};

/// One kind counter of `object` (0 when never counted).
fn kind(counters: &HashMap<u64, HashMap<u16, u64>>, object: &Value, key: u16) -> u64 {
    let id = object["object_id"].as_u64().expect("object_id");
    counters
        .get(&id)
        .and_then(|c| c.get(&key))
        .copied()
        .unwrap_or(0)
}

fn conds<'a>(log: &LogReport<'a>) -> Vec<&'a Value> {
    log.objects()
        .into_iter()
        .filter(|o| o["kind"] == "cond")
        .collect()
}

/// Number of waits on an object (a wait on a condition variable always blocks).
fn waits(log: &LogReport, object: &Value) -> u64 {
    log.counter(object, "contended")
}

/// Whether some wait site of `object` has a frame at `file:line`.
fn waited_at(log: &LogReport, object: &Value, file: &str, line: u32) -> bool {
    object["wait_sites"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| log.chain_has(&s["chain_id"], file, line))
}

fn wait_sites_text(log: &LogReport, object: &Value) -> String {
    object["wait_sites"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| log.chain_text(&s["chain_id"]))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn producer_consumer_queue_shows_both_condvars_waited_on_and_signalled() {
    let run = run_both("cond_queue", &[]);
    assert_eq!(
        run.stdout_text(),
        "cond_queue: 40000 items, sum 800020000, expected 800020000\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let kc = kind_counters(run.single_log());
    let f = "cond_queue.c";
    for (init, wait, what) in [
        ("init-not-full", "producer-wait", "not_full"),
        ("init-not-empty", "consumer-wait", "not_empty"),
    ] {
        let cond = log.object_created_at(f, line_of(f, init));
        assert_eq!(cond["kind"], "cond", "{what}: {cond}");
        assert_eq!(cond["origin"], "init", "{what}: {cond}");
        assert!(waits(&log, cond) > 0, "{what} never waited on: {cond}");
        assert!(
            waited_at(&log, cond, f, line_of(f, wait)),
            "{what}: no waiter at {f}:{}; sites:\n{}",
            line_of(f, wait),
            wait_sites_text(&log, cond)
        );
        assert!(
            kind(&kc, cond, counter::SIGNALS) > 0,
            "{what}: no signal counted"
        );
        assert!(
            cond["destroyed_at_ns"].is_number(),
            "{what} destroyed: {cond}"
        );
        // Every wait has one reason, spurious ones included (moved there after they were
        // counted, when the loop waited again).
        let ended: u64 = [
            counter::ENDED_SIGNALLED,
            counter::ENDED_BROADCAST,
            counter::ENDED_SPURIOUS,
        ]
        .iter()
        .map(|&k| kind(&kc, cond, k))
        .sum();
        assert_eq!(ended, waits(&log, cond), "{what}: reasons do not add up");
    }
    // Each item is signalled once on not_empty by its producer.
    let not_empty = log.object_created_at(f, line_of(f, "init-not-empty"));
    assert_eq!(kind(&kc, not_empty, counter::SIGNALS), 40000);
    assert_eq!(kind(&kc, not_empty, counter::BROADCASTS), 1);
    // The mutex is re-acquired inside every wait: its acquisitions include them, and nobody
    // holds it twice (the re-acquisition bookkeeping matches glibc's).
    let mutex = log
        .objects()
        .into_iter()
        .find(|o| o["kind"] == "mutex")
        .expect("the queue's mutex");
    let total_waits: u64 = conds(&log).iter().map(|c| waits(&log, c)).sum();
    assert!(
        log.counter(mutex, "acquisitions") >= 80000 + total_waits,
        "mutex acquisitions {} < 80 000 items + {total_waits} re-acquisitions",
        log.counter(mutex, "acquisitions")
    );
}

#[test]
fn broadcast_to_8_waiters_shows_8_waiting_at_once_and_the_herd_reacquiring_the_mutex() {
    let run = run_both("cond_herd", &[]);
    let a = run.analyze();
    let log = a.log(0);
    let kc = kind_counters(run.single_log());
    let f = "cond_herd.c";
    let cond = log.object_created_at(f, line_of(f, "init-cond"));
    assert_eq!(cond["kind"], "cond");
    assert_eq!(log.counter(cond, "max_waiters"), 8, "{cond}");
    assert_eq!(log.hwm(), 8, "highwater: {}", log.0["highwater"]);
    assert_eq!(waits(&log, cond), 8);
    assert!(waited_at(&log, cond, f, line_of(f, "herd-wait")));

    // One contention record at level 8 on the cond, ended by main's broadcast.
    let records = log.records_on(cond);
    assert_eq!(records.len(), 1, "records on the cond: {records:?}");
    let r = records[0];
    assert_eq!(r["level"], 8, "{r}");
    assert_eq!(r["state"], "complete", "{r}");
    assert!(
        log.chain_has(&r["holder_chain"], f, line_of(f, "broadcast")),
        "the record's release is not the broadcast at {f}:{}: {}",
        line_of(f, "broadcast"),
        log.chain_text(&r["holder_chain"])
    );

    assert_eq!(kind(&kc, cond, counter::BROADCASTS), 1);
    assert_eq!(kind(&kc, cond, counter::ENDED_BROADCAST), 8);
    assert_eq!(kind(&kc, cond, counter::ENDED_SIGNALLED), 0);
    assert_eq!(kind(&kc, cond, counter::ENDED_SPURIOUS), 0);
    // Woken together, the 8 take the mutex one after another, each holding it 5 ms: the
    // re-acquire waits grow from ~0 to ~35 ms. The log keeps their total and maximum: a
    // maximum well above the mean (which is above the minimum) is the herd.
    let total = kind(&kc, cond, counter::REACQUIRE_WAIT_TOTAL_NS);
    let max = kind(&kc, cond, counter::REACQUIRE_WAIT_MAX_NS);
    let mean = total / 8;
    assert!(
        max >= 30_000_000,
        "longest re-acquire {max} ns: the last of the herd waits for 7 holds of 5 ms"
    );
    assert!(
        max * 2 >= mean * 3,
        "re-acquire max {max} ns not clearly above the mean {mean} ns"
    );
}

#[test]
fn timed_waits_nobody_signals_end_timed_out_with_etimedout() {
    let run = run_both("cond_timeout", &[]);
    assert_eq!(
        run.stdout_text(),
        "timedwait: ETIMEDOUT, mutex held after it: yes\n\
         clockwait: ETIMEDOUT, mutex held after it: yes\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let kc = kind_counters(run.single_log());
    let f = "cond_timeout.c";
    let cond = log.object_created_at(f, line_of(f, "init-cond"));
    assert_eq!(waits(&log, cond), 2);
    assert_eq!(log.counter(cond, "timeouts"), 2);
    assert_eq!(log.counter(cond, "errors"), 0);
    assert_eq!(kind(&kc, cond, counter::ENDED_TIMED_OUT), 2);
    assert!(
        log.counter(cond, "wait_max_ns") >= 45_000_000,
        "a 50 ms timeout waited {} ns",
        log.counter(cond, "wait_max_ns")
    );
    for tag in ["timedwait", "clockwait"] {
        assert!(
            waited_at(&log, cond, f, line_of(f, tag)),
            "no waiter at {tag}; sites:\n{}",
            wait_sites_text(&log, cond)
        );
    }
}

#[test]
fn wakeups_after_which_the_loop_waits_again_are_spurious_and_an_unseen_wakeup_is_signalled() {
    let run = run_both("cond_spurious", &[]);
    assert_eq!(
        run.stdout_text(),
        "cond_spurious: the herd took 4 items\n\
         cond_spurious: the loop waited again after a signal with the predicate false\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let kc = kind_counters(run.single_log());
    let f = "cond_spurious.c";

    // The loop's two waits: the first ended by the signal sent with `ready` still 0, after which
    // the loop waited again at once (spurious); the second by the signal that set it.
    let looped = log.object_created_at(f, line_of(f, "init-loop-cond"));
    assert_eq!(waits(&log, looped), 2);
    assert_eq!(kind(&kc, looped, counter::SIGNALS), 2);
    assert_eq!(kind(&kc, looped, counter::ENDED_SIGNALLED), 1);
    assert_eq!(kind(&kc, looped, counter::ENDED_SPURIOUS), 1);
    assert!(waited_at(&log, looped, f, line_of(f, "loop-wait")));

    // The herd: a broadcast for one item wakes 4, of which 3 wait again; a broadcast for three
    // items wakes those 3, which all go on.
    let herd = log.object_created_at(f, line_of(f, "init-herd-cond"));
    assert_eq!(waits(&log, herd), 7);
    assert_eq!(log.counter(herd, "max_waiters"), 4);
    assert_eq!(kind(&kc, herd, counter::BROADCASTS), 2);
    assert_eq!(kind(&kc, herd, counter::ENDED_SPURIOUS), 3);
    assert_eq!(kind(&kc, herd, counter::ENDED_BROADCAST), 4);
    assert_eq!(kind(&kc, herd, counter::ENDED_SIGNALLED), 0);
    assert!(waited_at(&log, herd, f, line_of(f, "herd-wait")));

    // A worker woken for real, which released the mutex, worked (every slot of the shim's
    // per-thread cache reused) and took the mutex back before it waited again: no spurious.
    let work = log.object_created_at(f, line_of(f, "init-work-cond"));
    assert_eq!(waits(&log, work), 2);
    assert_eq!(kind(&kc, work, counter::ENDED_SIGNALLED), 2);
    assert_eq!(kind(&kc, work, counter::ENDED_SPURIOUS), 0);
    assert!(waited_at(&log, work, f, line_of(f, "work-wait")));

    // The wait woken through glibc's own entry point returned 0 with no signal the shim saw,
    // and the waiter went on: woken for something, so signalled.
    let hidden = log.object_created_at(f, line_of(f, "init-hidden-cond"));
    assert_eq!(waits(&log, hidden), 1);
    assert_eq!(kind(&kc, hidden, counter::SIGNALS), 0);
    assert_eq!(kind(&kc, hidden, counter::ENDED_SIGNALLED), 1);
    assert_eq!(kind(&kc, hidden, counter::ENDED_SPURIOUS), 0);
    assert!(waited_at(&log, hidden, f, line_of(f, "hidden-wait")));

    // The report says it in words.
    let text = &a.text;
    assert!(
        text.contains("waits ended: broadcast 4, spurious 3"),
        "herd line missing from the report:\n{text}"
    );
}

#[test]
fn a_consumer_keeping_the_mutex_while_it_works_gets_useful_wakeups_not_spurious_ones() {
    let run = run_both("cond_consumer", &[]);
    assert_eq!(
        run.stdout_text(),
        "cond_consumer: the consumer took 20 items\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let kc = kind_counters(run.single_log());
    let f = "cond_consumer.c";
    // Each of the 20 waits was ended by the signal of an item the consumer then worked on, still
    // holding the mutex, before waiting for the next.
    let items = log.object_created_at(f, line_of(f, "init-items"));
    assert_eq!(waits(&log, items), 20);
    assert_eq!(kind(&kc, items, counter::SIGNALS), 20);
    assert_eq!(kind(&kc, items, counter::ENDED_SIGNALLED), 20);
    assert_eq!(kind(&kc, items, counter::ENDED_SPURIOUS), 0);
    assert!(waited_at(&log, items, f, line_of(f, "consumer-wait")));
    assert!(
        !a.text.contains("spurious 20"),
        "the consumer's wake-ups are reported spurious:\n{}",
        a.text
    );
}

/// The text of the record of object `id` in `text` (the first, from its `object:` line to the
/// blank line after it).
fn record_text<'a>(text: &'a str, id: &Value) -> &'a str {
    let head = text
        .find(&format!("object: cond#{id} "))
        .or_else(|| text.find(&format!("object: mutex#{id} ")))
        .unwrap_or_else(|| panic!("no record of object {id}:\n{text}"));
    let rec = &text[head..];
    &rec[..rec.find("\n\n").unwrap_or(rec.len())]
}

/// The row of object `id` in WHERE THE WAITING WENT, with its site lines.
fn waiting_went_row<'a>(text: &'a str, kind: &str, id: &Value) -> &'a str {
    let went = text
        .split("WHERE THE WAITING WENT")
        .nth(1)
        .expect("a WHERE THE WAITING WENT section");
    let went = &went[..went.find("\n\n").unwrap_or(went.len())];
    let row = went
        .lines()
        .position(|l| l.contains(&format!("{kind}#{id} ")))
        .unwrap_or_else(|| panic!("no row of {kind}#{id}:\n{went}"));
    let start = went.lines().take(row).map(|l| l.len() + 1).sum::<usize>();
    let rest = &went[start..];
    // The row, and the site lines under it (indented past the columns).
    let len = rest
        .lines()
        .enumerate()
        .take_while(|(i, l)| *i == 0 || l.starts_with(&" ".repeat(40)))
        .map(|(_, l)| l.len() + 1)
        .sum::<usize>();
    &rest[..len.min(rest.len())]
}

/// A worker waits four times at one site on `work` and is still in its fourth wait when the
/// program ends; a sleeper waits on `never` all along. The site's line counts the wait still in
/// progress as the object's line does; a condition variable's records name the thread that
/// signalled it, and one never signalled names nobody: a condition variable has no holder.
#[test]
fn a_wait_in_progress_counts_at_its_site_and_a_condition_variable_has_no_holder() {
    let run = run_both("cond_left_waiting", &[]);
    assert_eq!(
        run.stdout_text(),
        "cond_left_waiting: 3 rounds signalled, 2 threads left waiting\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let f = "cond_left_waiting.c";
    let work = log.object_created_at(f, line_of(f, "init-work"));
    let never = log.object_created_at(f, line_of(f, "init-never"));
    // WHERE THE WAITING WENT: `work` waited 4 times, all at one site, one still in progress.
    let row = waiting_went_row(&a.text, "cond", &work["object_id"]);
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(columns[3], "4", "the object's waits:\n{row}");
    let at = format!("at {f}:{} (worker): 4 waits, ", line_of(f, "work-wait"));
    assert!(row.contains(&at), "{at:?} not in:\n{row}");
    assert!(row.contains("(1 still in progress: "), "{row}");
    assert!(!row.contains("other site"), "{row}");
    let row = waiting_went_row(&a.text, "cond", &never["object_id"]);
    let at = format!("at {f}:{} (sleeper): 1 wait, ", line_of(f, "never-wait"));
    assert!(
        row.contains(&at) && row.contains("(1 still in progress: "),
        "{row}"
    );

    // Records: main signalled `work`; nobody signalled `never`, and nobody holds either.
    let signalled = record_text(&a.text, &work["object_id"]);
    assert!(
        signalled.contains(&format!("signalled by: thread {} ", run.pid))
            && signalled.contains("(a condition variable has no holder: the episode ended at"),
        "{signalled}"
    );
    let open = record_text(&a.text, &never["object_id"]);
    assert!(
        open.contains("not signalled when the log ended (a condition variable has no holder"),
        "{open}"
    );
    for rec in [signalled, open] {
        assert!(
            !rec.contains("\n    holder") && !rec.contains("thread 0"),
            "{rec}"
        );
    }
    let records = log.records_on(never);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["state"], "open");
    assert_eq!(records[0]["holder_tid"], Value::Null);
    let work_records = log.records_on(work);
    assert!(!work_records.is_empty());
    for r in work_records {
        // The fourth wait's episode, if it opened, was never signalled.
        let holder = if r["state"] == "open" {
            Value::Null
        } else {
            Value::from(run.pid)
        };
        assert_eq!(r["holder_tid"], holder, "{r}");
    }

    // One row a group: the lock, the condition variable waited on longest, and the join when
    // main's join found the thread still running (not forced).
    let top1 = waitshim_tests::analyze(&[run.single_log()], &["--top", "1"]);
    let went = top1
        .text
        .split("WHERE THE WAITING WENT")
        .nth(1)
        .expect("a WHERE THE WAITING WENT section");
    let went = &went[..went.find("\n\n").unwrap_or(went.len())];
    let rows: Vec<&str> = went.lines().filter(|l| l.contains(" @0x")).collect();
    assert!(rows.len() == 2 || rows.len() == 3, "{went}");
    assert!(rows[0].contains("mutex#"), "{went}");
    assert!(
        rows[1].contains(&format!("cond#{} never ", never["object_id"])),
        "{went}"
    );
    assert!(rows.get(2).is_none_or(|r| r.contains("thread#")), "{went}");
}

#[test]
fn a_wait_without_the_mutex_ends_in_error_and_the_report_names_the_errno() {
    let run = run_both("cond_error", &[]);
    assert_eq!(
        run.stdout_text(),
        "careless: wait without the mutex: EPERM\n\
         careless: wait without the mutex: EPERM\n\
         careless: wait without the mutex: EPERM\n\
         careless: woken with the mutex held\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let kc = kind_counters(run.single_log());
    let f = "cond_error.c";
    let cond = log.object_created_at(f, line_of(f, "init-cond"));
    assert_eq!(waits(&log, cond), 4, "{cond}");
    assert_eq!(kind(&kc, cond, counter::ENDED_ERROR), 3);
    assert_eq!(kind(&kc, cond, counter::ENDED_SIGNALLED), 1);
    assert_eq!(
        kind(&kc, cond, counter::ended_errno(1 /* EPERM */).unwrap()),
        3
    );
    assert_eq!(log.counter(cond, "errors"), 3);
    assert_eq!(
        cond["ended"],
        serde_json::json!({"signalled": 1, "error": 3})
    );
    assert_eq!(cond["ended_errors"], serde_json::json!({"EPERM": 3}));
    assert!(waited_at(&log, cond, f, line_of(f, "careless-wait")));
    assert!(waited_at(&log, cond, f, line_of(f, "proper-wait")));
    assert!(
        a.text
            .contains("waits ended: signalled 1, error 3 (EPERM 3)"),
        "no errno in the report:\n{}",
        a.text
    );
}

#[test]
fn cxx_condition_variable_queue_runs_unchanged_and_its_condvars_are_listed() {
    let run = run_both("cond_cxx", &[]);
    assert_eq!(
        run.stdout_text(),
        "cond_cxx: 40000 items, sum 800020000, expected 800020000\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let kc = kind_counters(run.single_log());
    let f = "cond_cxx.cpp";
    let cs = conds(&log);
    assert_eq!(cs.len(), 2, "condition variables: {cs:?}");
    for (tag, what) in [
        ("producer-wait", "not_full (wait)"),
        ("consumer-wait", "not_empty (wait_for)"),
    ] {
        let line = line_of(f, tag);
        let cond = cs
            .iter()
            .find(|c| waited_at(&log, c, f, line))
            .unwrap_or_else(|| {
                panic!(
                    "{what}: no cond waited on at {f}:{line}; sites:\n{}",
                    cs.iter()
                        .map(|c| wait_sites_text(&log, c))
                        .collect::<Vec<_>>()
                        .join("\n--\n")
                )
            });
        assert!(waits(&log, cond) > 0);
        assert!(
            kind(&kc, cond, counter::SIGNALS) > 0,
            "{what}: no notify_one"
        );
        // Static std::condition_variable objects are constant-initialised: seen from first use.
        assert_eq!(cond["origin"], "first_use", "{what}: {cond}");
    }
}

#[test]
fn program_linked_against_glibc_2_2_5_condvars_runs_unchanged_under_the_shim() {
    let exe = waitshim_tests::fixture("cond_oldver");
    let dynsyms = Command::new("objdump")
        .arg("-T")
        .arg(&exe)
        .output()
        .expect("run objdump -T");
    let dynsyms = String::from_utf8_lossy(&dynsyms.stdout);
    for f in [
        "init",
        "destroy",
        "wait",
        "timedwait",
        "signal",
        "broadcast",
    ] {
        let sym = format!("pthread_cond_{f}");
        assert!(
            dynsyms.lines().any(|l| l.contains("(GLIBC_2.2.5)")
                && l.split_whitespace().last() == Some(sym.as_str())),
            "cond_oldver does not reference {sym}@GLIBC_2.2.5:\n{dynsyms}"
        );
        assert!(
            !dynsyms
                .lines()
                .any(|l| l.contains("GLIBC_2.3.2") && l.contains(&sym)),
            "cond_oldver references the new {sym}"
        );
    }
    let run = run_both("cond_oldver", &[]);
    assert_eq!(
        run.stdout_text(),
        "cond_oldver: 20000 items, sum 200010000, expected 200010000\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let f = "cond_oldver.c";
    for tag in ["init-not-full", "init-not-empty"] {
        let cond = log.object_created_at(f, line_of(f, tag));
        assert_eq!(cond["kind"], "cond");
        assert!(waits(&log, cond) > 0, "{tag}: {cond}");
    }
}

#[test]
fn cond_semantics_program_checks_every_return_code_identically_under_the_shim() {
    let run = run_semantics("cond_semantics", 25);
    let out = run.stdout_text();
    for expected in [
        "check timedwait.nsec-negative: EINVAL, mutex held, errno kept",
        "check clockwait.bad-clock: EINVAL, mutex held, errno kept",
        "check timedwait.past: ETIMEDOUT, mutex held, errno kept",
        "check wait.mutex-not-owned: EPERM, errno kept",
        "check timedwait.broadcast: 0, mutex held, errno kept",
    ] {
        assert!(
            out.lines().any(|l| l == expected),
            "no {expected:?}:\n{out}"
        );
    }
}

#[test]
fn a_thread_cancelled_in_a_cond_wait_unwinds_through_the_shim_and_its_wait_ends_interrupted() {
    let run = run_both("cond_cancel", &[]);
    assert_eq!(
        run.stdout_text(),
        "cond_cancel: cancelled yes, mutex free after: yes\n"
    );
    let a = run.analyze();
    let log = a.log(0);
    let kc = kind_counters(run.single_log());
    let f = "cond_cancel.c";
    let cond = log.object_created_at(f, line_of(f, "init-cond"));
    assert_eq!(waits(&log, cond), 1);
    assert_eq!(log.counter(cond, "errors"), 1);
    assert_eq!(kind(&kc, cond, counter::ENDED_INTERRUPTED), 1);
    assert!(waited_at(&log, cond, f, line_of(f, "cancelled-wait")));
}

// Real programs, unmodified, from Debian packages.

/// A generated 20 MiB text file that compresses about 3:1: lines of words from a vocabulary of
/// 5000 pseudo-random words, with a number; the same every run. Kept next to the built fixtures
/// (under `target/`) and reused by later runs.
fn input_text() -> &'static Path {
    static INPUT: OnceLock<PathBuf> = OnceLock::new();
    INPUT.get_or_init(|| {
        let text = generate_text(20 << 20);
        let dir = waitshim_tests::fixture("cond_queue")
            .parent()
            .expect("fixtures dir")
            .to_path_buf();
        let path = dir.join("cond-input.txt");
        if fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
            // Written aside and renamed: another test process may be reading the old one.
            let tmp = dir.join(format!("cond-input.txt.{}", std::process::id()));
            fs::write(&tmp, &text).expect("write input");
            fs::rename(&tmp, &path).expect("rename input");
        }
        path
    })
}

fn generate_text(size: usize) -> String {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let words: Vec<String> = (0..5000)
        .map(|_| {
            let len = 2 + next() % 8;
            (0..len)
                .map(|_| (b'a' + (next() % 26) as u8) as char)
                .collect()
        })
        .collect();
    let mut text = String::with_capacity(size + 200);
    while text.len() < size {
        for i in 0..10 {
            if i > 0 {
                text.push(' ');
            }
            text.push_str(&words[(next() % 5000) as usize]);
        }
        text.push_str(&format!(" {}\n", next() % 1_000_000_000));
    }
    text
}

/// Runs `program args` natively and under the shim: the same exit status 0 and the same
/// (byte-identical) stdout. Returns the shim run.
fn real_program(program: &Path, args: &[&str]) -> Run {
    let launch = |shim: bool| {
        let mut l = Launch::program(program);
        if !shim {
            l = l.native();
        }
        for a in args {
            l = l.arg(a);
        }
        l.arg(input_text()).run()
    };
    let native = launch(false);
    native.assert_success();
    let run = launch(true);
    run.assert_success();
    assert!(!native.stdout.is_empty());
    assert!(
        run.stdout == native.stdout,
        "{}: output under the shim ({} bytes) differs from the native run ({} bytes)",
        program.display(),
        run.stdout.len(),
        native.stdout.len()
    );
    run
}

/// The program's condition variables that threads waited on.
fn waited_conds<'a>(log: &LogReport<'a>) -> Vec<&'a Value> {
    conds(log)
        .into_iter()
        .filter(|c| c["counters"]["contended"].as_u64().unwrap_or(0) > 0)
        .collect()
}

fn assert_conds_waited_on(run: &Run, what: &str) {
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log = a.log(0);
    let waited = waited_conds(&log);
    assert!(
        !waited.is_empty(),
        "{what}: no condition variable with waits; objects:\n{}",
        log.objects()
            .iter()
            .map(|o| format!(
                "{} {} created at {}: {}",
                o["kind"],
                o["object_id"],
                frame_text(&o["creation_site"]),
                o["counters"]
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(log.deadlocks().is_empty());
}

#[test]
fn pigz_with_2_threads_compresses_identically_and_its_yarn_condvars_show_waits() {
    let pigz = debian_program("pigz", "pigz");
    let run = real_program(&pigz, &["-p", "2", "-c"]);
    assert_conds_waited_on(&run, "pigz -p 2");
}

#[test]
fn xz_with_2_threads_compresses_identically_and_its_condvars_show_waits() {
    let xz = debian_program("xz", "xz-utils");
    // Preset 0 with 1 MiB blocks: 20 blocks for 2 worker threads, in about a second.
    let run = real_program(&xz, &["-T2", "-0", "--block-size=1MiB", "-c"]);
    assert_conds_waited_on(&run, "xz -T2");
}

#[test]
fn sort_parallel_2_sorts_identically_and_its_condvar_shows_waits() {
    let sort = debian_program("sort", "coreutils");
    // 280 000 lines: GNU sort's merge tree threads hand lines over through a mutex and a
    // condition variable per node.
    let run = real_program(&sort, &["--parallel=2"]);
    assert_conds_waited_on(&run, "sort --parallel=2");
}
