//! The thread-state tracks of the trace exports, when the run was sampled and its per-wait
//! events were written: the tracked waits (red) are the events' waits, begin and end exact,
//! not the sampler's estimate; the sampled states fill the rest, never overlapping.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use waitshim_tests::{export_beside, run_both};

/// (tid, ts, dur) in ns, rounded: chrome's microseconds carry nanosecond digits.
fn span(e: &Value) -> (u64, i64, i64) {
    let ns = |k: &str| (e[k].as_f64().expect(k) * 1000.0).round() as i64;
    (e["tid"].as_u64().expect("tid"), ns("ts"), ns("dur"))
}

#[test]
fn the_convoys_red_state_slices_are_its_exact_waits_and_the_states_never_overlap() {
    // The convoy's workers each wait for the lock once, for 50 ms to 450 ms: far longer than
    // the 10 ms sampling interval, so the sampler alone would place them within an interval.
    let run = run_both("convoy", &[]);
    let file = export_beside(run.single_log(), "chrome", "convoy.json");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    // The waits on each thread's own track come from the per-wait events.
    let waits: BTreeSet<(u64, i64, i64)> = events
        .iter()
        .filter(|e| e["cat"] == "wait")
        .map(span)
        .collect();
    assert!(waits.len() >= 7, "the convoy's workers waited: {waits:?}");
    let states: Vec<&Value> = events.iter().filter(|e| e["cat"] == "state").collect();
    assert!(!states.is_empty(), "the run was sampled");
    let mut exact_locks = 0;
    let mut by_track: BTreeMap<u64, Vec<(i64, i64)>> = BTreeMap::new();
    for e in &states {
        let (stid, ts, dur) = span(e);
        by_track.entry(stid).or_default().push((ts, ts + dur));
        let name = e["name"].as_str().expect("name");
        let exact = e["args"]["times"]
            .as_str()
            .is_some_and(|t| t.starts_with("exact"));
        // Every red slice is exact: no sampled tracked wait is left where the events are
        // complete (the whole run, here).
        if name.starts_with("Wait: lock") || name == "Wait: join" {
            assert!(exact, "a sampled tracked wait on the states track: {e}");
        }
        if exact {
            // The states track of thread T is chrome tid 1e9 + T: the same begin and end as
            // a wait on T's own track.
            let tid = stid - 1_000_000_000;
            assert!(
                waits.contains(&(tid, ts, dur)),
                "exact slice {e} is no wait of thread {tid}: {waits:?}"
            );
            assert!(e["args"].get("split").is_none(), "{e}");
            if name == "Wait: lock" {
                exact_locks += 1;
            }
        }
    }
    assert!(
        exact_locks >= 7,
        "{exact_locks} exact lock waits on the states tracks"
    );
    for (track, mut spans) in by_track {
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(
                w[0].1 <= w[1].0 + 1,
                "states track {track}: {:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
}
