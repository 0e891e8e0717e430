//! Short-lived objects: a program that creates and destroys objects by the million without
//! contention gets one cumulative sum per kind and creation site in its log, which the reports
//! show beside the objects tracked one by one.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;
use waitshim_analyze::model::MAX_CHURN_SITES;
use waitshim_format::*;

/// A program whose functions stand for the creation sites: only its symbols and lines are used.
const SOURCE: &str = "int made;
void make_request(void) { made++; }
void make_reply(void) { made += 2; }
int main(void) { make_request(); make_reply(); return made; }
";

const BASE: u64 = 0x5600_0000_0000;
const US: u64 = 1_000;

/// Chains of the creation sites, and of the one mutex tracked on its own.
const REQUEST: u32 = 1;
const REPLY: u32 = 2;
const QUEUE: u32 = 3;

fn compile(dir: &Path) -> Program {
    compile_program(dir, "churn", SOURCE)
}

fn churned(kind: u8, chain_id: u32, at: u64, count: u64, acq: u64, life: (u64, u64)) -> Record {
    ObjectsChurned {
        kind,
        chain_id,
        ns: T0 + at,
        count,
        acquisitions: acq,
        lifetime_total_ns: life.0,
        lifetime_max_ns: life.1,
        counters: Vec::new(),
    }
    .into()
}

/// A run that created and destroyed a million request mutexes (the shim's periodic sum at 500 ms,
/// then the final one at exit) and three reply condition variables, beside one contended mutex
/// tracked on its own.
fn churn_log(p: &Program) -> LogBuilder {
    let mut b = LogBuilder::started(&p.path.display().to_string(), &["./churn"]);
    b.push(Module {
        module_id: 1,
        base: BASE,
        build_id: p.build_id.clone(),
        path: p.path.display().to_string(),
        segments: p.segments.clone(),
    });
    b.chain(
        REQUEST,
        &[BASE + p.ret("make_request"), BASE + p.ret("main")],
    );
    b.chain(REPLY, &[BASE + p.ret("make_reply"), BASE + p.ret("main")]);
    b.chain(QUEUE, &[BASE + p.ret("main")]);
    b.thread(100, "main");
    b.mutex(1, 0x7000_0000_1000, QUEUE);
    b.counters(1, 100, 10, 5 * MS);
    let mutex = ObjectKind::Mutex as u8;
    b.push(churned(
        mutex,
        REQUEST,
        500 * MS,
        400_000,
        800_000,
        (400_000 * 1500, 85 * US),
    ));
    b.push(churned(
        ObjectKind::Cond as u8,
        REPLY,
        900 * MS,
        3,
        0,
        (30 * MS, 20 * MS),
    ));
    b.push(churned(
        mutex,
        REQUEST,
        1000 * MS,
        1_000_000,
        2_000_000,
        (1_000_000 * 1200, 90 * US),
    ));
    b.end(1000 * MS, 0);
    b
}

fn reports_of(b: &LogBuilder) -> (String, Value) {
    reports(b, "churn.log")
}

#[test]
fn a_million_short_lived_mutexes_are_one_line_with_their_creation_site() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = compile(dir.path());
    let (r, j) = reports_of(&churn_log(&p));

    assert!(
        r.contains(
            "objects:   1 tracked, 1 contended; 1000003 short-lived (summed by creation site)"
        ),
        "{r}"
    );
    // The latest sum of the request site replaces the periodic one; most objects first.
    let section = pos(
        &r,
        "SHORT-LIVED OBJECTS (1000003 created and destroyed without contention; by creation site)",
    );
    let table = &r[section..];
    assert!(
        table.contains(
            "     count acquired life-mean life-max  kind      created at\n\
             \x20  1000000  2000000    1.2 µs  90.0 µs  mutex     churn.c:2 (make_request)\n\
             \x20        3        0   10.0 ms  20.0 ms  cond      churn.c:3 (make_reply)\n"
        ),
        "{r}"
    );
    assert!(!table.contains("400000"), "{r}");
    // After the per-object tables, before where threads wait.
    assert!(
        pos(&r, "OBJECTS (1 with activity of 1 tracked") < section,
        "{r}"
    );
    assert!(!r.contains("WARNING"), "{r}");

    assert_eq!(j["run"]["objects_tracked"], 1);
    assert_eq!(j["run"]["objects_churned"], 1_000_003);
    let sums = j["short_lived_objects"].as_array().expect("array");
    assert_eq!(sums.len(), 2);
    let request = &sums[0];
    assert_eq!(request["kind"], "mutex");
    assert_eq!(request["chain_id"], REQUEST);
    assert_eq!(request["count"], 1_000_000);
    assert_eq!(request["acquisitions"], 2_000_000);
    assert_eq!(request["lifetime_total_ns"], 1_200_000_000u64);
    assert_eq!(request["lifetime_max_ns"], 90 * US);
    assert_eq!(request["created_at"]["function"], "make_request");
    assert_eq!(request["created_at"]["line"], 2);
    assert!(j["chains"][REQUEST.to_string()].is_array(), "{j}");
    let reply = &sums[1];
    assert_eq!(reply["kind"], "cond");
    assert_eq!(reply["count"], 3);
    assert_eq!(reply["lifetime_max_ns"], 20 * MS);
    assert_eq!(reply["created_at"]["function"], "make_reply");
}

#[test]
fn a_run_whose_objects_were_all_short_lived_is_not_a_run_without_objects() {
    let mut b = LogBuilder::started("/nonexistent/churn", &["./churn"]);
    b.push(churned(ObjectKind::Mutex as u8, 0, MS, 5, 5, (5 * US, US)));
    b.end(10 * MS, 0);
    let (r, j) = reports_of(&b);
    assert!(!r.contains("No sync object was seen"), "{r}");
    assert!(
        !r.contains("\nOBJECTS ("),
        "no table of tracked objects:\n{r}"
    );
    assert!(
        r.contains("objects:   0 tracked, 0 contended; 5 short-lived (summed by creation site)"),
        "{r}"
    );
    assert!(r.contains("mutex     creation site unknown"), "{r}");
    assert_eq!(j["short_lived_objects"][0]["chain_id"], 0);
    assert!(j["short_lived_objects"][0]["created_at"].is_null(), "{j}");
}

#[test]
fn a_kind_the_analyzer_does_not_know_is_kept_by_number() {
    let mut b = LogBuilder::started("/nonexistent/churn", &["./churn"]);
    b.push(churned(200, 7, MS, 2, 4, (0, 0)));
    b.push(churned(0, 7, MS, 0, 0, (0, 0)));
    b.end(10 * MS, 0);
    let (r, j) = reports_of(&b);
    assert!(r.contains("kind 200"), "{r}");
    // No objects: no mean lifetime.
    assert!(
        r.contains("         0        0         -     0 ns  kind 0    creation site unknown"),
        "{r}"
    );
    assert_eq!(j["run"]["objects_churned"], 2);
    assert_eq!(j["short_lived_objects"][0]["kind"], "kind_200");
    assert_eq!(j["short_lived_objects"][1]["kind"], "kind_0");
}

#[test]
fn creation_sites_beyond_the_cap_are_counted_and_the_text_lists_the_first() {
    let mut b = LogBuilder::started("/nonexistent/churn", &["./churn"]);
    let extra = 3;
    for chain in 0..(MAX_CHURN_SITES + extra) as u32 {
        b.push(churned(
            ObjectKind::Mutex as u8,
            chain,
            MS,
            u64::from(chain) + 1,
            0,
            (0, 0),
        ));
    }
    // A site already kept is updated even when the cap is reached.
    b.push(churned(
        ObjectKind::Mutex as u8,
        0,
        2 * MS,
        u64::MAX,
        0,
        (0, 0),
    ));
    b.end(10 * MS, 0);
    let (r, j) = reports_of(&b);
    assert!(
        r.contains(&format!(
            "WARNING: the log holds more than this analyzer keeps; {extra} records of short-lived \
             objects not stored (beyond {MAX_CHURN_SITES} distinct kinds and creation sites)"
        )),
        "{}",
        r.lines().take(12).collect::<Vec<_>>().join("\n")
    );
    assert!(
        r.contains(&format!(
            "  ... {} more creation sites (all are in the JSON report)",
            MAX_CHURN_SITES - 20
        )),
        "the text lists the first 20"
    );
    let sums = j["short_lived_objects"].as_array().expect("array");
    assert_eq!(sums.len(), MAX_CHURN_SITES);
    assert_eq!(sums[0]["count"], u64::MAX);
    // The total saturates rather than wrapping.
    assert_eq!(j["run"]["objects_churned"], u64::MAX);
}
