//! What the collection policy leaves in the log, as the reports show it: the policy versions and
//! how often each rule acted, the waits the rules selected, the threads waiting together, the
//! holders' stacks beside the waits they blocked, and the data requests served.

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};
use waitshim_analyze::model::{
    MAX_POLICY_LISTED, MAX_POLICY_RULES, MAX_POLICY_TEXT, MAX_POLICY_VERSIONS, MAX_RULE_SUMMARY,
    MAX_WAIT_EVENTS_LISTED,
};
use waitshim_format::*;

/// A program whose functions stand for the holder (sleeping while it holds the queue) and the
/// waiter: only its symbols and lines are used.
const SOURCE: &str = "#include <unistd.h>
int items;
void hold_and_sleep(void) { items++; usleep(1000); }
void wait_for_queue(void) { items--; }
int main(void) { hold_and_sleep(); wait_for_queue(); return items; }
";

const BASE: u64 = 0x5600_0000_0000;
/// A libc that is not on disk: its frames are known by module name only.
const LIBC: &str = "/nonexistent/lib/libc.so.6";
const LIBC_BASE: u64 = 0x7f00_0000_0000;
const POLICY_FILE: &str = "/etc/waitshim/queue.json";
const RULE_0: &str = "mutex named \"queue\" when at least 2 waiters → count, record, waiter_chain, all_waiters, holder_chain, holder_live_stack";
const RULE_1: &str = "any wait → count";

/// Chains of the scenario: the holder's live stack (in libc's sleep, called from
/// `hold_and_sleep`), the waiter's chain, and where the holder acquired the queue.
const LIVE: u32 = 40;
const WAITER: u32 = 41;
const ACQUIRED: u32 = 42;

fn compile(dir: &Path) -> Program {
    compile_program(dir, "pol", SOURCE)
}

fn version(version: u32, at: u64, source: &str, rules: &[&str]) -> PolicyVersion {
    PolicyVersion {
        version,
        ns: T0 + at,
        source: source.into(),
        text: format!("{{\"rules\":[{}]}}", rules.len()),
        rules: rules.iter().map(|r| r.to_string()).collect(),
    }
}

fn event(object_id: u64, tid: u32, at: u64, wait_ns: u64, reason: u16, rule: u32) -> WaitEvent {
    WaitEvent {
        object_id,
        tid,
        ns: T0 + at,
        wait_ns,
        waiters: 2,
        reason,
        version: 2,
        rule,
        chain_id: 0,
    }
}

fn holder_stack(waiter_tid: u32, at: u64, live: u8, chain_id: u32) -> HolderStack {
    HolderStack {
        object_id: 1,
        ns: T0 + at,
        holder_tid: 101,
        waiter_tid,
        version: 2,
        rule: 0,
        live,
        chain_id,
    }
}

/// A run under a policy file: the built-in policy at start, then the file's two rules from
/// 200 ms; the queue mutex's waits were recorded, with the waiters and the holder's stacks; two
/// data requests were served.
fn policy_log(p: &Program) -> LogBuilder {
    let mut b = LogBuilder::started(&p.path.display().to_string(), &["./pol"]);
    b.push(Module {
        module_id: 1,
        base: BASE,
        build_id: p.build_id.clone(),
        path: p.path.display().to_string(),
        segments: p.segments.clone(),
    });
    b.push(Module {
        module_id: 2,
        base: LIBC_BASE,
        build_id: Vec::new(),
        path: LIBC.into(),
        segments: vec![Segment {
            vaddr: 0,
            memsz: 0x10_0000,
        }],
    });
    b.chain(
        LIVE,
        &[
            LIBC_BASE + 0x1234,
            BASE + p.ret("hold_and_sleep"),
            BASE + p.ret("main"),
        ],
    );
    b.chain(
        WAITER,
        &[BASE + p.ret("wait_for_queue"), BASE + p.ret("main")],
    );
    b.chain(
        ACQUIRED,
        &[BASE + p.ret("hold_and_sleep"), BASE + p.ret("main")],
    );
    b.thread(100, "main");
    b.thread(101, "holder");
    b.thread(102, "w-102");
    b.thread(103, "w-103");
    b.mutex(1, 0x7000_0000_1000, 0);
    b.push(ObjectName {
        object_id: 1,
        name: "queue".into(),
    });
    b.push(version(1, MS, "", &["any wait → count, waiter_chain"]));
    b.push(version(2, 200 * MS, POLICY_FILE, &[RULE_0, RULE_1]));
    b.push(WaitEvent {
        chain_id: WAITER,
        ..event(1, 102, 250 * MS, 10 * MS, counter::ENDED_ACQUIRED, 0)
    });
    b.push(event(1, 103, 260 * MS, 30 * MS, counter::ENDED_ACQUIRED, 0));
    b.push(WaiterChains {
        object_id: 1,
        ns: T0 + 300 * MS,
        version: 2,
        rule: 0,
        waiters: vec![
            WaiterRef {
                tid: 102,
                chain_id: WAITER,
                wait_ns: 12 * MS,
            },
            WaiterRef {
                tid: 103,
                chain_id: 0,
                wait_ns: 3 * MS,
            },
        ],
    });
    b.push(holder_stack(102, 300 * MS, 1, LIVE));
    b.push(holder_stack(103, 310 * MS, 1, LIVE));
    b.push(holder_stack(102, 320 * MS, 0, ACQUIRED));
    b.push(event(1, 102, 330 * MS, 5 * MS, counter::ENDED_TIMED_OUT, 0));
    // Cumulative: the second record of the rule supersedes the first.
    b.push(RuleStats {
        version: 2,
        rule: 0,
        ns: T0 + 350 * MS,
        requests: 10,
        acted: 4,
        suppressed: 0,
    });
    b.push(Snapshot {
        seq: 1,
        ns: T0 + 400 * MS,
        source: snapshot_source::SIGNAL,
        requester_pid: 777,
    });
    b.push(RuleStats {
        version: 2,
        rule: 0,
        ns: T0 + 450 * MS,
        requests: 20,
        acted: 6,
        suppressed: 3,
    });
    b.push(Snapshot {
        seq: 2,
        ns: T0 + 500 * MS,
        source: snapshot_source::API,
        requester_pid: 0,
    });
    b.counters(1, 100, 20, 45 * MS);
    b.end(600 * MS, 2);
    b
}

fn reports_of(b: &LogBuilder) -> (String, Value) {
    reports(b, "pol.log")
}

#[test]
fn json_has_the_policy_versions_rule_statistics_and_what_the_rules_collected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = compile(dir.path());
    let (_, j) = reports_of(&policy_log(&p));

    let versions = &j["policy"]["versions"];
    assert_eq!(
        versions[0],
        json!({"version": 1, "at_ns": MS, "source": "", "builtin": true,
               "text": "{\"rules\":[1]}", "rules": ["any wait → count, waiter_chain"]})
    );
    assert_eq!(versions[1]["version"], 2);
    assert_eq!(versions[1]["at_ns"], 200 * MS);
    assert_eq!(versions[1]["source"], POLICY_FILE);
    assert_eq!(versions[1]["builtin"], false);
    assert_eq!(versions[1]["rules"], json!([RULE_0, RULE_1]));
    assert_eq!(
        j["policy"]["rules"],
        json!([{"version": 2, "rule": 0, "summary": RULE_0,
                "requests": 20, "acted": 6, "suppressed": 3}])
    );

    let events = &j["wait_events"];
    assert_eq!(events["total"], 3);
    assert_eq!(
        events["listed"][0],
        json!({"object_id": 1, "tid": 102, "at_ns": 250 * MS, "wait_ns": 10 * MS, "waiters": 2,
               "reason": "acquired", "version": 2, "rule": 0, "chain": WAITER})
    );
    assert_eq!(events["listed"][1]["chain"], Value::Null);
    assert_eq!(events["listed"][2]["reason"], "timed_out");
    assert_eq!(
        events["by_rule"],
        json!([{"version": 2, "rule": 0, "object_id": 1, "count": 3,
                "wait_total_ns": 45 * MS, "wait_max_ns": 30 * MS,
                "ended": {"acquired": 2, "timed_out": 1}, "not_ended": 0}])
    );

    assert_eq!(
        j["waiter_chains"],
        json!({"total": 1, "listed": [{"object_id": 1, "at_ns": 300 * MS, "version": 2, "rule": 0,
               "waiters": [{"tid": 102, "chain": WAITER, "wait_ns": 12 * MS},
                           {"tid": 103, "chain": null, "wait_ns": 3 * MS}]}]})
    );

    let stacks = &j["holder_stacks"];
    assert_eq!(stacks["total"], 3);
    assert_eq!(
        stacks["listed"][0],
        json!({"object_id": 1, "at_ns": 300 * MS, "holder_tid": 101, "waiter_tid": 102,
               "version": 2, "rule": 0, "live": true, "how": "signal", "chain": LIVE,
               "function": "hold_and_sleep"})
    );
    assert_eq!(stacks["listed"][1]["waiter_tid"], 103);
    assert_eq!(stacks["listed"][2]["live"], false);
    assert_eq!(stacks["listed"][2]["how"], "acquired");
    assert_eq!(stacks["listed"][2]["chain"], ACQUIRED);
    assert_eq!(stacks["listed"][2]["function"], "hold_and_sleep");

    assert_eq!(
        j["snapshots"],
        json!({"total": 2, "listed": [
            {"seq": 1, "at_ns": 400 * MS, "source": "signal", "requester_pid": 777},
            {"seq": 2, "at_ns": 500 * MS, "source": "api", "requester_pid": null}]})
    );

    // Every chain these records name is in `chains`, symbolized; the live stack starts in libc.
    for id in [LIVE, WAITER, ACQUIRED] {
        assert!(j["chains"][id.to_string()].is_array(), "chain {id}");
    }
    assert_eq!(j["chains"]["40"][0]["module"], LIBC);
    assert_eq!(j["chains"]["40"][1]["function"], "hold_and_sleep");
    assert_eq!(j["chains"]["41"][0]["function"], "wait_for_queue");

    // The new members come after `threads`, before `chains`, in the documented order.
    let keys: Vec<&str> = j
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    let at = keys.iter().position(|&k| k == "threads").expect("threads");
    assert_eq!(
        keys[at..at + 13],
        [
            "threads",
            "threads_summed",
            "thread_states",
            "critical_path",
            "progress",
            "shim_cost",
            "policy",
            "wait_events",
            "per_wait_events",
            "waiter_chains",
            "holder_stacks",
            "snapshots",
            "collected_by_object"
        ]
    );
    assert!(
        j["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .all(|w| w["kind"] != "limits"),
        "{}",
        j["warnings"]
    );
}

/// What the text report's SELECTED WAITS shows, by object, is in the JSON too: the holder
/// sleeping with the queue blocked two threads (one live stack, shown once with both), and one
/// of them again where it acquired the queue.
#[test]
fn json_has_the_collected_data_by_object_with_the_holder_groups_the_text_shows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = compile(dir.path());
    let (text, j) = reports_of(&policy_log(&p));
    assert!(
        text.contains("waited behind holder thread 101 \"holder\" (first at 300.0 ms"),
        "{text}"
    );
    assert_eq!(
        j["collected_by_object"],
        json!([{
            "object_id": 1,
            "wait_events": 3,
            "wait_total_ns": 45 * MS,
            "by_rule": [{"version": 2, "rule": 0, "object_id": 1, "count": 3,
                         "wait_total_ns": 45 * MS, "wait_max_ns": 30 * MS,
                         "ended": {"acquired": 2, "timed_out": 1}, "not_ended": 0}],
            "holder_stacks": 3,
            "holder_groups": [
                {"holder_tid": 101, "how": "signal", "chain": LIVE, "function": "hold_and_sleep",
                 "first_at_ns": 300 * MS, "rules": [{"version": 2, "rule": 0}],
                 "waiter_tids": [102, 103]},
                {"holder_tid": 101, "how": "acquired", "chain": ACQUIRED,
                 "function": "hold_and_sleep", "first_at_ns": 320 * MS,
                 "rules": [{"version": 2, "rule": 0}], "waiter_tids": [102]}
            ],
            "waiter_chains": [0]
        }])
    );
    // Objects with collected data are ranked as in the text: most selected wait time first.
    let mut b = policy_log(&p);
    b.mutex(2, 0x7000_0000_2000, 0);
    b.push(event(2, 103, 340 * MS, 90 * MS, counter::ENDED_ACQUIRED, 0));
    let (_, j) = reports_of(&b);
    let ids: Vec<&Value> = j["collected_by_object"]
        .as_array()
        .expect("an array")
        .iter()
        .map(|c| &c["object_id"])
        .collect();
    assert_eq!(ids, [2, 1]);
    assert_eq!(j["collected_by_object"][0]["holder_groups"], json!([]));
    assert_eq!(j["collected_by_object"][0]["waiter_chains"], json!([]));
}

#[test]
fn text_shows_the_policy_and_the_holders_beside_the_waits_they_blocked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = compile(dir.path());
    let (r, _) = reports_of(&policy_log(&p));

    // Summary: the data requests; no built-in line, since a policy file was in force.
    assert!(
        r.contains("data requests: 2 snapshots (last at 500.0 ms)\n"),
        "{r}"
    );
    assert!(!r.contains("policy: built-in"), "{r}");

    // The policy section follows the summary, before the body.
    let policy = pos(&r, "\nPOLICY (2 versions; rule counts are cumulative");
    assert!(pos(&r, "data requests:") < policy);
    assert!(policy < pos(&r, "LOCK CONTENTION RECORDS"));
    assert!(
        r.contains("  version 1 from 1.0 ms: built-in (waiter chains on every contended wait)\n")
    );
    assert!(r.contains(&format!(
        "  version 2 from 200.0 ms: {POLICY_FILE}, 2 rules\n    rule 1: {RULE_0}\n      requests 20, acted 6, max_waiters suppressed 3\n    rule 2: {RULE_1}\n      no requests recorded\n"
    )), "{r}");

    // What the rules collected, by object, before the per-object tables.
    let sel = pos(
        &r,
        "\nSELECTED WAITS (collected by policy rules, by object: 3 wait events, 3 holder stacks, 1 waiter-chain record)",
    );
    assert!(pos(&r, "LOCK CONTENTION RECORDS") < sel);
    assert!(sel < pos(&r, "\nOBJECTS ("));
    let s = &r[sel..pos(&r, "\nOBJECTS (")];
    assert!(s.contains("\n  mutex#1 \"queue\" @0x700000001000"), "{s}");
    assert!(
        s.contains("      version 2 rule 1: 3 waits, total 45.0 ms, max 30.0 ms; ended: acquired 2, timed out 1\n"),
        "{s}"
    );
    // Both waits the sleeping holder blocked are shown once, with its live stack: libc's sleep,
    // then the program's function, marked.
    assert!(
        s.contains("    holder stacks (3):\n      thread 102 \"w-102\", thread 103 \"w-103\" waited behind holder thread 101 \"holder\" (first at 300.0 ms, version 2 rule 1); its live stack (what it was doing when asked):\n        #0 libc.so.6+0x1234\n        #1 hold_and_sleep (pol.c:3)"),
        "{s}"
    );
    let live = &s[pos(s, "its live stack")..];
    let mark = pos(live, "   <- first frame of the program");
    assert!(pos(live, "#1 hold_and_sleep") < mark && mark < pos(live, "#2 main"));
    assert_eq!(live.matches("<- first frame").count(), 2, "{s}");
    assert!(
        s.contains("      thread 102 \"w-102\" waited behind holder thread 101 \"holder\" (first at 320.0 ms, version 2 rule 1); where it acquired the object:\n        #0 hold_and_sleep (pol.c:3)"),
        "{s}"
    );
    assert!(
        s.contains("    waiter chains (1):\n      at 300.0 ms (version 2 rule 1): 2 threads waiting\n        thread 102 \"w-102\" waiting 12.0 ms at pol.c:4 (wait_for_queue)\n        thread 103 \"w-103\" waiting 3.0 ms (no call chain recorded)\n"),
        "{s}"
    );
    // Other sections as before.
    assert!(r.contains("\nTHREADS (4)"), "{r}");
}

#[test]
fn builtin_policy_is_one_summary_line_and_old_logs_have_none() {
    let mut b = convoy_log();
    b.push(version(1, 0, "", &["any wait → count, waiter_chain"]));
    b.end(3000 * MS, 7);
    let (r, j) = reports_of(&b);
    assert!(
        r.contains("\npolicy: built-in (waiter chains on every contended wait)\n"),
        "{r}"
    );
    assert!(!r.contains("POLICY ("), "{r}");
    assert!(!r.contains("SELECTED WAITS"), "{r}");
    assert!(!r.contains("data requests"), "{r}");
    assert_eq!(j["policy"]["versions"][0]["builtin"], true);
    assert_eq!(j["policy"]["rules"], json!([]));

    // A log written before policies: no policy line, empty policy data.
    let mut b = convoy_log();
    b.end(3000 * MS, 7);
    let (r, j) = reports_of(&b);
    assert!(!r.contains("policy:"), "{r}");
    assert_eq!(j["policy"], json!({"versions": [], "rules": []}));
    assert_eq!(
        j["wait_events"],
        json!({"total": 0, "listed": [], "by_rule": []})
    );
    for key in ["waiter_chains", "holder_stacks", "snapshots"] {
        assert_eq!(j[key], json!({"total": 0, "listed": []}), "{key}");
    }
}

#[test]
fn reasons_unknown_to_the_analyzer_and_waits_not_ended_are_kept_apart() {
    let mut b = convoy_log();
    b.push(version(2, 0, POLICY_FILE, &[RULE_1]));
    b.push(event(3, 103, 10 * MS, 0, 0, 0));
    b.push(event(3, 103, 20 * MS, 7 * MS, 77, 0));
    b.push(event(3, 104, 30 * MS, 2 * MS, counter::ENDED_SPURIOUS, 0));
    // A rule the log's versions do not describe.
    b.push(RuleStats {
        version: 9,
        rule: 4,
        ns: T0 + 40 * MS,
        requests: 1,
        acted: 1,
        suppressed: 0,
    });
    b.end(3000 * MS, 7);
    let (r, j) = reports_of(&b);
    let listed = &j["wait_events"]["listed"];
    assert_eq!(listed[0]["reason"], Value::Null);
    assert_eq!(listed[1]["reason"], "key_77");
    assert_eq!(listed[2]["reason"], "spurious");
    let by_rule = &j["wait_events"]["by_rule"][0];
    assert_eq!(by_rule["ended"], json!({"spurious": 1, "key_77": 1}));
    assert_eq!(by_rule["not_ended"], 1);
    assert_eq!(j["policy"]["rules"][0]["summary"], Value::Null);
    assert!(
        r.contains("version 2 rule 1: 3 waits, total 9.0 ms, max 7.0 ms; ended: not ended 1, spurious 1, reason 77 1"),
        "{r}"
    );
    assert!(
        r.contains("  statistics of rules the log does not describe:\n    version 9 rule 5: requests 1, acted 1, max_waiters suppressed 0\n"),
        "{r}"
    );
}

#[test]
fn policy_data_is_bounded_and_the_limits_warning_says_what_was_not_listed() {
    let mut b = convoy_log();
    let versions = MAX_POLICY_VERSIONS + 3;
    for v in 1..=versions as u32 {
        b.push(version(v, u64::from(v) * MS, POLICY_FILE, &[RULE_1]));
    }
    let events = MAX_WAIT_EVENTS_LISTED + 50;
    for i in 0..events as u64 {
        b.push(event(
            1 + i % 2,
            102,
            i * 1000,
            1000,
            counter::ENDED_ACQUIRED,
            0,
        ));
    }
    for i in 0..MAX_POLICY_LISTED + 5 {
        b.push(holder_stack(102, i as u64 * 1000, 1, 30));
    }
    for i in 0..MAX_POLICY_LISTED + 2 {
        b.push(WaiterChains {
            object_id: 1,
            ns: T0 + i as u64,
            version: 2,
            rule: 0,
            waiters: vec![WaiterRef {
                tid: 103,
                chain_id: 10,
                wait_ns: 5,
            }],
        });
    }
    for seq in 1..=MAX_POLICY_LISTED as u64 + 1 {
        b.push(Snapshot {
            seq,
            ns: T0 + seq * MS,
            source: snapshot_source::PERIODIC,
            requester_pid: 0,
        });
    }
    b.end(3000 * MS, 7);
    let (r, j) = reports_of(&b);

    assert_eq!(
        j["policy"]["versions"].as_array().map(Vec::len),
        Some(MAX_POLICY_VERSIONS)
    );
    let total_and_listed = |key: &str| {
        (
            j[key]["total"].as_u64().unwrap_or_default() as usize,
            j[key]["listed"].as_array().map_or(0, Vec::len),
        )
    };
    assert_eq!(
        total_and_listed("wait_events"),
        (events, MAX_WAIT_EVENTS_LISTED)
    );
    assert_eq!(
        total_and_listed("holder_stacks"),
        (MAX_POLICY_LISTED + 5, MAX_POLICY_LISTED)
    );
    assert_eq!(
        total_and_listed("waiter_chains"),
        (MAX_POLICY_LISTED + 2, MAX_POLICY_LISTED)
    );
    assert_eq!(
        total_and_listed("snapshots"),
        (MAX_POLICY_LISTED + 1, MAX_POLICY_LISTED)
    );
    // The sums cover every event, listed or not.
    let counts: Vec<u64> = j["wait_events"]["by_rule"]
        .as_array()
        .expect("by_rule")
        .iter()
        .map(|g| g["count"].as_u64().unwrap_or_default())
        .collect();
    assert_eq!(counts, [events as u64 / 2, events as u64 / 2]);

    let limits: Vec<&str> = j["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter(|w| w["kind"] == "limits")
        .filter_map(|w| w["message"].as_str())
        .collect();
    assert_eq!(limits.len(), 1, "{}", j["warnings"]);
    assert_eq!(
        limits[0],
        "the log holds more than this analyzer keeps; policy data counted in the totals but not \
         listed: 50 wait events, 2 waiter-chain records, 5 holder stacks, 1 snapshots; 3 policy \
         versions not stored"
    );
    assert!(r.contains(&format!("WARNING: {}\n", limits[0])), "{r}");
    // The text shows the latest versions.
    assert!(
        r.contains(&format!(
            "POLICY (1000 versions; rule counts are cumulative, as last written to the log)\n  ... 980 earlier versions not shown (all are in the JSON report)\n  version 981 from 981.0 ms: {POLICY_FILE}, 1 rule\n"
        )),
        "{r}"
    );
    // The last data request is the last in the log, listed or not.
    assert!(
        r.contains("data requests: 1001 snapshots (last at 1.00 s)"),
        "{r}"
    );
    // Holder stacks of one holder and chain are shown once.
    assert!(r.contains("    holder stacks (1000):\n      thread 102 \"worker-102\" waited behind holder thread 101 \"worker-101\""), "{r}");
}

#[test]
fn an_oversized_policy_version_is_cut_on_a_character_boundary() {
    let mut b = convoy_log();
    let rules: Vec<String> = (0..100)
        .map(|i| format!("rule {i} → ") + &"é".repeat(400))
        .collect();
    b.push(PolicyVersion {
        version: 1,
        ns: T0,
        source: POLICY_FILE.into(),
        text: "→".repeat(10_000),
        rules,
    });
    b.end(3000 * MS, 7);
    let (_, j) = reports_of(&b);
    let v = &j["policy"]["versions"][0];
    let text = v["text"].as_str().expect("text");
    assert!(text.len() <= MAX_POLICY_TEXT && text.len() > MAX_POLICY_TEXT - 3);
    assert!(text.chars().all(|c| c == '→'));
    let rules = v["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), MAX_POLICY_RULES);
    assert!(rules
        .iter()
        .all(|r| r.as_str().is_some_and(|r| r.len() <= MAX_RULE_SUMMARY)));
    let warnings = j["warnings"].to_string();
    assert!(
        warnings.contains("1 policy versions with their text or rules cut"),
        "{warnings}"
    );
}

#[test]
fn a_changed_reason_moves_the_listed_event_and_its_group_and_a_stray_change_moves_nothing() {
    let mut b = convoy_log();
    b.push(version(2, 0, POLICY_FILE, &[RULE_1]));
    let first = event(3, 103, 10 * MS, 2 * MS, counter::ENDED_SIGNALLED, 0);
    b.push(first.clone());
    b.push(event(3, 104, 20 * MS, 3 * MS, counter::ENDED_SIGNALLED, 0));
    let change = |e: &WaitEvent, from: u16, to: u16| WaitEventReason {
        object_id: e.object_id,
        tid: e.tid,
        ns: e.ns,
        version: e.version,
        rule: e.rule,
        from,
        to,
    };
    b.push(change(
        &first,
        counter::ENDED_SIGNALLED,
        counter::ENDED_SPURIOUS,
    ));
    // Matching no event, or not its reason: nothing moves.
    let mut stray = first.clone();
    stray.ns += 1;
    b.push(change(
        &stray,
        counter::ENDED_SIGNALLED,
        counter::ENDED_SPURIOUS,
    ));
    b.push(change(
        &first,
        counter::ENDED_BROADCAST,
        counter::ENDED_SPURIOUS,
    ));
    let mut other_rule = first.clone();
    other_rule.rule = 9;
    b.push(change(
        &other_rule,
        counter::ENDED_SIGNALLED,
        counter::ENDED_SPURIOUS,
    ));
    b.end(3000 * MS, 7);
    let (_, j) = reports_of(&b);
    let listed = &j["wait_events"]["listed"];
    assert_eq!(listed[0]["reason"], "spurious");
    assert_eq!(listed[1]["reason"], "signalled");
    let by_rule = &j["wait_events"]["by_rule"][0];
    assert_eq!(by_rule["ended"], json!({"signalled": 1, "spurious": 1}));
    assert_eq!(j["wait_events"]["total"], 2);
}
