//! Hostile logs. A property test: any log — random records with extreme values, then random
//! damage — goes through the whole analyzer (read, model, symbolize, text and JSON reports)
//! without a panic. Then a real log, the convoy fixture run under the shim
//! (`data/convoy-real.log`), cut at every offset, its bits flipped, ranges overwritten, frames
//! claiming huge lengths and counts added, joined with other logs, followed by zeros: every case
//! within a time limit (a hang fails the test), reported without a panic. Last, the analyzer
//! binary on a crafted log that asks for as much memory as the model keeps: its peak memory
//! stays under a stated limit. Module paths that are not regular files are in `input.rs`.
//! Each part runs a bounded number of cases, so that the whole file takes seconds.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use waitshim_analyze::{analyze_bytes, json_report, lockorder, text_report, Options, SortKey};
use waitshim_format::frame::{FRAME_HEADER_LEN, MAX_BODY_LEN};
use waitshim_format::*;

/// Times: mostly plausible, sometimes anything (a damaged log can claim any value).
fn ns() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (0u64..10_000_000_000).prop_map(|n| common::T0 + n),
        1 => any::<u64>(),
        1 => Just(0u64),
    ]
}

fn small() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..6, 1 => any::<u32>()]
}

fn id() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0u64..6, 1 => any::<u64>()]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z]{1,8}",
        Just("/usr/bin/true".to_string()),
        Just("/nonexistent/app".to_string()),
        Just("/x/libwaitshim.so".to_string()),
        any::<String>(),
    ]
}

fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (0u64..0x20000).prop_map(|a| 0x5555_0000_0000 + a),
        1 => any::<u64>(),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    prop_oneof![
        (
            ns(),
            any::<u32>(),
            text(),
            prop::collection::vec(text(), 0..3)
        )
            .prop_map(|(ns, pid, exe, cmdline)| RunStart {
                pid,
                ppid: 1,
                realtime_ns: ns,
                mono_ns: ns,
                ncpus: pid % 9,
                exe,
                cmdline,
                shim_version: "x".into(),
            }
            .into()),
        (
            small(),
            text(),
            any::<u64>(),
            prop::collection::vec(any::<u8>(), 0..4),
            any::<u64>()
        )
            .prop_map(|(module_id, path, memsz, build_id, vaddr)| Module {
                module_id,
                base: 0x5555_0000_0000,
                build_id,
                path,
                segments: vec![
                    Segment {
                        vaddr: 0,
                        memsz: 0x20000
                    },
                    Segment { vaddr, memsz },
                ],
            }
            .into()),
        (small(), prop::collection::vec(addr(), 0..6)).prop_map(|(chain_id, frames)| Chain {
            chain_id,
            frames
        }
        .into()),
        (small(), ns(), addr(), small(), any::<u8>()).prop_map(
            |(tid, ns, start_routine, chain_id, m)| {
                ThreadStart {
                    tid,
                    parent_tid: 1,
                    ns,
                    start_routine,
                    chain_id,
                    is_main: m % 2,
                }
                .into()
            }
        ),
        (small(), ns(), text()).prop_map(|(tid, ns, name)| ThreadName { tid, ns, name }.into()),
        (small(), ns()).prop_map(|(tid, ns)| ThreadExit { tid, ns }.into()),
        (id(), addr(), any::<u8>(), small(), ns()).prop_map(
            |(object_id, addr, kind, chain_id, ns)| {
                ObjectCreate {
                    object_id,
                    addr,
                    kind: kind % 9,
                    subtype: 0,
                    origin: kind % 4,
                    ns,
                    tid: chain_id,
                    chain_id,
                }
                .into()
            }
        ),
        (id(), text()).prop_map(|(object_id, name)| ObjectName { object_id, name }.into()),
        (id(), ns()).prop_map(|(object_id, ns)| ObjectDestroy {
            object_id,
            ns,
            tid: 1
        }
        .into()),
        (id(), ns(), any::<[u64; 6]>(), any::<u32>()).prop_map(|(object_id, ns, v, w)| {
            Counters {
                object_id,
                ns,
                acquisitions: v[0],
                contended: v[1],
                owner_changes: v[2],
                busy: v[3],
                timeouts: v[4],
                errors: v[5],
                wait_total_ns: v[0] ^ v[1],
                wait_max_ns: v[2],
                hold_total_ns: v[3],
                hold_max_ns: v[4],
                hold_samples: v[5],
                max_waiters: w,
            }
            .into()
        }),
        (id(), small(), any::<[u64; 3]>()).prop_map(|(object_id, chain_id, v)| {
            WaitSite {
                object_id,
                chain_id,
                count: v[0],
                wait_total_ns: v[1],
                wait_max_ns: v[2],
            }
            .into()
        }),
        (id(), id(), ns(), small(), any::<u8>(), small(), small()).prop_map(
            |(record_id, object_id, ns, level, reason, holder_tid, waiter)| ContentionOpen {
                record_id,
                object_id,
                ns,
                level,
                reason,
                holder_tid,
                waiter_tid: waiter,
                waiter_chain: waiter,
            }
            .into()
        ),
        (
            id(),
            id(),
            ns(),
            small(),
            any::<u64>(),
            prop::collection::vec((small(), small(), any::<u64>()), 0..4),
            any::<u32>()
        )
            .prop_map(
                |(record_id, object_id, ns, level, elapsed_ns, ws, coalesced)| ContentionClose {
                    record_id,
                    object_id,
                    ns,
                    level,
                    elapsed_ns,
                    threads_tried: level,
                    holder_tid: level,
                    holder_chain: level,
                    waiters: ws
                        .into_iter()
                        .map(|(tid, chain_id, wait_ns)| WaiterRef {
                            tid,
                            chain_id,
                            wait_ns
                        })
                        .collect(),
                    waiters_total: coalesced,
                    coalesced,
                }
                .into()
            ),
        (ns(), small(), id(), small()).prop_map(|(ns, hwm, object_id, tid)| Highwater {
            ns,
            hwm,
            object_id,
            tid
        }
        .into()),
        (
            ns(),
            prop::collection::vec((small(), id(), small(), small()), 0..4)
        )
            .prop_map(|(ns, edges)| Deadlock {
                ns,
                detected_by: 1,
                cycle: edges
                    .into_iter()
                    .map(|(tid, object_id, wait_chain, holder_tid)| DeadlockEdge {
                        tid,
                        object_id,
                        wait_chain,
                        holder_tid
                    })
                    .collect(),
            }
            .into()),
        (ns(), any::<u8>(), any::<i64>(), small(), any::<u64>()).prop_map(
            |(ns, reason, exit_status, hwm, dropped)| {
                RunEnd {
                    ns,
                    reason,
                    exit_status,
                    hwm,
                    dropped,
                }
                .into()
            }
        ),
        (ns(), any::<u8>(), text()).prop_map(|(ns, level, text)| Note { ns, level, text }.into()),
        (
            id(),
            ns(),
            prop::collection::vec(
                (prop_oneof![4 => 0u16..60, 1 => any::<u16>()], any::<u64>()),
                0..8
            )
        )
            .prop_map(|(object_id, ns, values)| KindCounters {
                object_id,
                ns,
                values: values
                    .into_iter()
                    .map(|(key, value)| CounterValue { key, value })
                    .collect(),
            }
            .into()),
        (id(), id(), small(), small(), ns()).prop_map(
            |(from_object, to_object, tid, chain_id, ns)| {
                LockOrder {
                    from_object,
                    to_object,
                    tid,
                    chain_id,
                    ns,
                }
                .into()
            }
        ),
        (
            small(),
            ns(),
            text(),
            text(),
            prop::collection::vec(text(), 0..4)
        )
            .prop_map(|(version, ns, source, text, rules)| PolicyVersion {
                version,
                ns,
                source,
                text,
                rules,
            }
            .into()),
        (small(), small(), ns(), any::<[u64; 3]>()).prop_map(|(version, rule, ns, v)| {
            RuleStats {
                version,
                rule,
                ns,
                requests: v[0],
                acted: v[1],
                suppressed: v[2],
            }
            .into()
        }),
        (
            id(),
            small(),
            ns(),
            any::<u64>(),
            small(),
            reason(),
            small(),
            small(),
            small()
        )
            .prop_map(
                |(object_id, tid, ns, wait_ns, waiters, reason, version, rule, chain_id)| {
                    WaitEvent {
                        object_id,
                        tid,
                        ns,
                        wait_ns,
                        waiters,
                        reason,
                        version,
                        rule,
                        chain_id,
                    }
                    .into()
                }
            ),
        (
            id(),
            ns(),
            small(),
            small(),
            prop::collection::vec((small(), small(), any::<u64>()), 0..5)
        )
            .prop_map(|(object_id, ns, version, rule, ws)| WaiterChains {
                object_id,
                ns,
                version,
                rule,
                waiters: ws
                    .into_iter()
                    .map(|(tid, chain_id, wait_ns)| WaiterRef {
                        tid,
                        chain_id,
                        wait_ns
                    })
                    .collect(),
            }
            .into()),
        (
            id(),
            ns(),
            small(),
            small(),
            small(),
            small(),
            any::<u8>(),
            small()
        )
            .prop_map(
                |(object_id, ns, holder_tid, waiter_tid, version, rule, live, chain_id)| {
                    HolderStack {
                        object_id,
                        ns,
                        holder_tid,
                        waiter_tid,
                        version,
                        rule,
                        live: live % 3,
                        chain_id,
                    }
                    .into()
                }
            ),
        (any::<u64>(), ns(), any::<u8>(), small()).prop_map(|(seq, ns, source, requester_pid)| {
            Snapshot {
                seq,
                ns,
                source: source % 5,
                requester_pid,
            }
            .into()
        }),
        (
            churn_kind(),
            small(),
            ns(),
            any::<[u64; 4]>(),
            any::<[(u16, u64); 2]>()
        )
            .prop_map(|(kind, chain_id, ns, v, c)| {
                ObjectsChurned {
                    kind,
                    chain_id,
                    ns,
                    count: v[0],
                    acquisitions: v[1],
                    lifetime_total_ns: v[2],
                    lifetime_max_ns: v[3],
                    counters: c
                        .iter()
                        .map(|&(key, value)| CounterValue {
                            key: key % 64,
                            value,
                        })
                        .collect(),
                }
                .into()
            }),
        (id(), small(), ns(), small(), small(), reason(), reason()).prop_map(
            |(object_id, tid, ns, version, rule, from, to)| {
                WaitEventReason {
                    object_id,
                    tid,
                    ns,
                    version,
                    rule,
                    from,
                    to,
                }
                .into()
            }
        ),
    ]
}

/// Kinds of short-lived objects: mostly the known ones (and 0), sometimes any byte.
fn churn_kind() -> impl Strategy<Value = u8> {
    prop_oneof![4 => 0u8..9, 1 => any::<u8>()]
}

/// How a wait ended: mostly the codes the shim writes, sometimes 0 or any.
fn reason() -> impl Strategy<Value = u16> {
    prop_oneof![4 => 0u16..12, 1 => any::<u16>()]
}

/// Every elementary cycle of a small graph, by brute force: each as its vertices from the
/// smallest, found by extending paths from it over larger vertices only.
fn brute_force_cycles(edges: &BTreeSet<(u64, u64)>) -> BTreeSet<Vec<u64>> {
    let nodes: BTreeSet<u64> = edges.iter().flat_map(|&(a, b)| [a, b]).collect();
    let mut found = BTreeSet::new();
    for &s in &nodes {
        let mut paths = vec![vec![s]];
        while let Some(path) = paths.pop() {
            let last = *path.last().unwrap_or(&s);
            for &(a, b) in edges.range((last, 0)..=(last, u64::MAX)) {
                debug_assert_eq!(a, last);
                if b == s && path.len() > 1 {
                    found.insert(path.clone());
                } else if b > s && !path.contains(&b) {
                    let mut p = path.clone();
                    p.push(b);
                    paths.push(p);
                }
            }
        }
    }
    found
}

#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Truncate(usize),
    Zeros(usize, usize),
    Insert(usize, Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, x)| Damage::Flip(at, x)),
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), 1usize..200).prop_map(|(at, n)| Damage::Zeros(at, n)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..40))
            .prop_map(|(at, b)| Damage::Insert(at, b)),
    ]
}

fn apply(bytes: &mut Vec<u8>, d: &Damage) {
    let n = bytes.len().max(1);
    match d {
        Damage::Flip(at, x) => {
            if let Some(b) = bytes.get_mut(at % n) {
                *b ^= x;
            }
        }
        Damage::Truncate(at) => bytes.truncate(at % n),
        Damage::Zeros(at, len) => {
            let at = at % n;
            let end = (at + len).min(bytes.len());
            for b in bytes.get_mut(at..end).into_iter().flatten() {
                *b = 0;
            }
        }
        Damage::Insert(at, b) => {
            let at = (at % n).min(bytes.len());
            bytes.splice(at..at, b.iter().copied());
        }
    }
}

fn sort_key() -> impl Strategy<Value = SortKey> {
    prop_oneof![
        Just(SortKey::Hwm),
        Just(SortKey::Elapsed),
        Just(SortKey::Wait),
        Just(SortKey::Count),
        (1usize..4).prop_map(SortKey::Outer),
        (1usize..4).prop_map(SortKey::Inner),
    ]
}

/// Both reports of a log, if it is one: the text, and the JSON as the command writes it.
fn analyze_everything(bytes: &[u8], opts: &Options) {
    if let Ok(a) = analyze_bytes(bytes, Path::new("fuzz.log")) {
        let t = text_report(&a, opts);
        assert!(t.starts_with("waitshim report: fuzz.log"));
        let mut json = Vec::new();
        waitshim_analyze::report::json::write_document(&mut json, std::iter::once(a), opts)
            .expect("write JSON");
        assert!(serde_json::from_slice::<serde_json::Value>(&json).is_ok());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_log_is_reported_without_panic(
        records in prop::collection::vec(record(), 0..40),
        damages in prop::collection::vec(damage(), 0..4),
        sort in sort_key(),
        top in 0usize..5,
        all_objects in any::<bool>(),
        symbols in any::<bool>(),
    ) {
        let mut bytes = file_header().to_vec();
        for r in &records {
            append_frame(r, &mut bytes);
        }
        for d in &damages {
            apply(&mut bytes, d);
        }
        analyze_everything(&bytes, &Options { sort, top, all_objects, symbols, ..Options::default() });
    }

    #[test]
    fn policy_records_are_counted_in_full_and_summed_per_rule_and_object(
        records in prop::collection::vec(record(), 0..60),
    ) {
        let mut bytes = file_header().to_vec();
        for r in &records {
            append_frame(r, &mut bytes);
        }
        let a = analyze_bytes(&bytes, Path::new("policy.log")).expect("a log");
        let j = json_report(&a, &Options { symbols: false, ..Options::default() });
        let n = |ty: fn(&Record) -> bool| records.iter().filter(|r| ty(r)).count() as u64;
        let events = n(|r| matches!(r, Record::WaitEvent(_)));
        prop_assert_eq!(j["wait_events"]["total"].as_u64(), Some(events));
        let listed = j["wait_events"]["listed"].as_array().map_or(0, Vec::len) as u64;
        prop_assert_eq!(listed, events);
        let summed: u64 = j["wait_events"]["by_rule"]
            .as_array()
            .map_or(0, |g| g.iter().filter_map(|g| g["count"].as_u64()).sum());
        prop_assert_eq!(summed, events);
        prop_assert_eq!(
            j["waiter_chains"]["total"].as_u64(),
            Some(n(|r| matches!(r, Record::WaiterChains(_))))
        );
        prop_assert_eq!(
            j["holder_stacks"]["total"].as_u64(),
            Some(n(|r| matches!(r, Record::HolderStack(_))))
        );
        prop_assert_eq!(
            j["snapshots"]["total"].as_u64(),
            Some(n(|r| matches!(r, Record::Snapshot(_))))
        );
        prop_assert_eq!(
            j["policy"]["versions"].as_array().map(Vec::len),
            Some(n(|r| matches!(r, Record::PolicyVersion(_))) as usize)
        );
        let keys: BTreeSet<(u32, u32)> = records
            .iter()
            .filter_map(|r| match r {
                Record::RuleStats(s) => Some((s.version, s.rule)),
                _ => None,
            })
            .collect();
        prop_assert_eq!(j["policy"]["rules"].as_array().map(Vec::len), Some(keys.len()));
        // Every chain a listed record names is in `chains` when the log has it.
        for e in j["wait_events"]["listed"].as_array().into_iter().flatten() {
            if let Some(id) = e["chain"].as_u64() {
                let known = a.model.chains.contains_key(&(id as u32));
                prop_assert_eq!(j["chains"][id.to_string()].is_array(), known);
            }
        }
    }

    #[test]
    fn short_lived_objects_are_the_latest_sum_of_each_kind_and_creation_site(
        records in prop::collection::vec(record(), 0..60),
    ) {
        let mut bytes = file_header().to_vec();
        for r in &records {
            append_frame(r, &mut bytes);
        }
        let a = analyze_bytes(&bytes, Path::new("churn.log")).expect("a log");
        let j = json_report(&a, &Options { symbols: false, ..Options::default() });
        let mut latest: BTreeMap<(u8, u32), u64> = BTreeMap::new();
        for r in &records {
            if let Record::ObjectsChurned(c) = r {
                latest.insert((c.kind, c.chain_id), c.count);
            }
        }
        let total = latest.values().fold(0u64, |n, &c| n.saturating_add(c));
        prop_assert_eq!(j["run"]["objects_churned"].as_u64(), Some(total));
        let sums = j["short_lived_objects"].as_array().cloned().unwrap_or_default();
        prop_assert_eq!(sums.len(), latest.len());
        let counts: Vec<u64> = sums.iter().filter_map(|s| s["count"].as_u64()).collect();
        prop_assert!(counts.windows(2).all(|w| w[0] >= w[1]), "most objects first");
    }

    #[test]
    fn every_lock_order_inversion_of_a_small_graph_is_found_once(
        edges in prop::collection::btree_set((1u64..6, 1u64..6), 0..25),
    ) {
        let mut bytes = file_header().to_vec();
        for &(from_object, to_object) in &edges {
            let r: Record = LockOrder { from_object, to_object, tid: 7, chain_id: 0, ns: 0 }.into();
            append_frame(&r, &mut bytes);
        }
        let a = analyze_bytes(&bytes, Path::new("graph.log")).expect("a log");
        let inv = lockorder::find(&a.model);
        let loops: BTreeSet<(u64, u64)> = edges.iter().copied().filter(|(a, b)| a != b).collect();
        let expected = brute_force_cycles(&loops);
        let found: BTreeSet<Vec<u64>> = inv.cycles.iter().map(|c| c.cycle.clone()).collect();
        // Five objects have at most 84 elementary cycles: under every bound of the search.
        prop_assert_eq!(inv.stopped, None);
        prop_assert_eq!(found.len(), inv.cycles.len(), "a cycle reported twice");
        prop_assert_eq!(found, expected);
    }

    #[test]
    fn random_bytes_after_a_header_are_reported_without_panic(
        tail in prop::collection::vec(any::<u8>(), 0..2000),
    ) {
        let mut bytes = file_header().to_vec();
        bytes.extend(tail);
        analyze_everything(&bytes, &Options::default());
    }

    #[test]
    fn random_bytes_are_refused_or_reported(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        analyze_everything(&bytes, &Options::default());
    }
}

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// A real log: the convoy fixture (4 threads) run under the shim.
fn real_log() -> Vec<u8> {
    std::fs::read(data().join("convoy-real.log")).expect("tests/data/convoy-real.log")
}

/// A case that takes longer than this hangs.
const CASE_LIMIT: Duration = Duration::from_secs(10);

/// Runs `report` on each case on a thread of its own, and fails naming the case if one panics
/// or does not end within [`CASE_LIMIT`].
fn each_within_limit(cases: Vec<(String, Vec<u8>)>, report: fn(&[u8])) {
    let names: Vec<String> = cases.iter().map(|(n, _)| n.clone()).collect();
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        for (i, (_, bytes)) in cases.iter().enumerate() {
            report(bytes);
            if tx.send(i).is_err() {
                return;
            }
        }
    });
    for name in &names {
        match rx.recv_timeout(CASE_LIMIT) {
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("case {name} still running after {CASE_LIMIT:?}: a hang")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The worker panicked on this case: show its message.
                eprintln!("case {name} panicked");
                if let Err(e) = worker.join() {
                    std::panic::resume_unwind(e);
                }
                return;
            }
        }
    }
    worker.join().expect("worker");
}

fn without_symbols(bytes: &[u8]) {
    analyze_everything(
        bytes,
        &Options {
            symbols: false,
            ..Options::default()
        },
    );
}

fn with_symbols(bytes: &[u8]) {
    analyze_everything(bytes, &Options::default());
}

/// A small deterministic generator, so that every run tries the same cases.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn a_real_log_cut_at_every_offset_is_reported() {
    let log = real_log();
    let cases = (0..=log.len())
        .map(|n| (format!("cut at {n}"), log[..n].to_vec()))
        .collect();
    each_within_limit(cases, without_symbols);
}

#[test]
fn a_real_log_with_bits_flipped_is_reported() {
    let log = real_log();
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    let mut cases = Vec::new();
    // Every bit of the file header, then single bits anywhere, then several at once.
    for bit in 0..FILE_HEADER_LEN * 8 {
        let mut b = log.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        cases.push((format!("header bit {bit}"), b));
    }
    for _ in 0..1500 {
        let mut b = log.clone();
        let bit = rng.below(b.len() * 8);
        b[bit / 8] ^= 1 << (bit % 8);
        cases.push((format!("bit {bit}"), b));
    }
    for round in 0..300 {
        let mut b = log.clone();
        for _ in 0..1 + rng.below(16) {
            let at = rng.below(b.len());
            b[at] ^= 1 << rng.below(8);
        }
        cases.push((format!("several bits, round {round}"), b));
    }
    each_within_limit(cases, without_symbols);
}

#[test]
fn a_real_log_with_ranges_overwritten_is_reported() {
    let log = real_log();
    let mut rng = Xorshift(0x2545_f491_4f6c_dd1d);
    let mut cases = Vec::new();
    for round in 0..600 {
        let mut b = log.clone();
        let at = rng.below(b.len());
        let len = 1 + rng.below(256).min(b.len() - at - 1);
        let how = rng.below(4);
        match how {
            0 => b[at..at + len].fill(0),
            1 => b[at..at + len].fill(0xff),
            2 => b[at..at + len]
                .iter_mut()
                .for_each(|x| *x = rng.next() as u8),
            // Bytes of elsewhere in the log: whole frames where they do not belong.
            _ => {
                let from = rng.below(log.len() - len);
                b[at..at + len].copy_from_slice(&log[from..from + len]);
            }
        }
        cases.push((
            format!("{len} bytes at {at} overwritten ({how}), round {round}"),
            b,
        ));
    }
    each_within_limit(cases, without_symbols);
}

/// A frame with a valid checksum whose body claims `claim` items or bytes in its first list or
/// string, with `body` bytes after the claim.
fn claiming(ty: u16, prefix: &[u8], claim: u32, body: usize) -> Vec<u8> {
    let mut b = prefix.to_vec();
    b.extend(claim.to_le_bytes());
    b.resize(b.len() + body, 0xa5);
    common::raw_frame(ty, &b)
}

/// Frames that claim more than they hold, or the most a frame can hold.
fn huge_frames() -> Vec<(String, Vec<u8>)> {
    let id = 7u64.to_le_bytes();
    let mut frames = vec![
        // A chain of u32::MAX frames, a module path of 4 GiB, a deadlock of u32::MAX threads.
        (
            "chain claims 4G frames".into(),
            claiming(3, &7u32.to_le_bytes(), u32::MAX, 64),
        ),
        (
            "module path claims 4 GiB".into(),
            claiming(
                2,
                &[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                u32::MAX,
                64,
            ),
        ),
        (
            "note claims 4 GiB".into(),
            claiming(17, &[1; 9], u32::MAX, 16),
        ),
        (
            "deadlock claims 4G threads".into(),
            claiming(15, &[1; 12], u32::MAX, 24),
        ),
        (
            "kind counters claim 4G values".into(),
            claiming(18, &[id, id].concat(), u32::MAX, 10),
        ),
    ];
    // A frame header claiming a body longer than any frame: damage.
    let mut long = common::raw_frame(17, &[0; 16]);
    long[4..8].copy_from_slice(&(MAX_BODY_LEN as u32 + 1).to_le_bytes());
    frames.push(("body longer than any frame".into(), long));
    let mut longest = common::raw_frame(17, &[0; 16]);
    longest[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    frames.push(("body of 4 GiB".into(), longest));
    // The largest valid frames: a chain, a deadlock and a contention record as long as a
    // frame can be, with valid checksums.
    let n = (MAX_BODY_LEN - 8) / 8;
    let mut rec = common::LogBuilder::new_empty();
    rec.push(Chain {
        chain_id: 9,
        frames: (0..n as u64).collect(),
    });
    frames.push(("largest chain".into(), rec.bytes));
    let mut rec = common::LogBuilder::new_empty();
    rec.push(Deadlock {
        ns: 1,
        detected_by: 1,
        cycle: (0..(MAX_BODY_LEN - 16) / 20)
            .map(|i| DeadlockEdge {
                tid: i as u32,
                object_id: i as u64,
                wait_chain: 9,
                holder_tid: i as u32 + 1,
            })
            .collect(),
    });
    frames.push(("largest deadlock".into(), rec.bytes));
    let mut rec = common::LogBuilder::new_empty();
    rec.push(ContentionClose {
        record_id: 1,
        object_id: 1,
        waiters: (0..(MAX_BODY_LEN - 64) / 16)
            .map(|i| WaiterRef {
                tid: i as u32,
                chain_id: 9,
                wait_ns: 1,
            })
            .collect(),
        ..ContentionClose::default()
    });
    frames.push(("largest contention record".into(), rec.bytes));
    assert!(frames
        .iter()
        .all(|(_, f)| f.len() <= MAX_BODY_LEN + FRAME_HEADER_LEN + 3));
    frames
}

#[test]
fn frames_claiming_huge_lengths_and_counts_are_reported() {
    let log = real_log();
    let mut cases = Vec::new();
    for (what, frame) in huge_frames() {
        // After the header, in the middle (at the first frame boundary past it), at the end.
        let mid = frame_boundary_after(&log, log.len() / 2);
        for (place, at) in [
            ("start", FILE_HEADER_LEN),
            ("middle", mid),
            ("end", log.len()),
        ] {
            let mut b = log[..at].to_vec();
            b.extend(&frame);
            b.extend(&log[at..]);
            cases.push((format!("{what} at the {place}"), b));
        }
    }
    each_within_limit(cases, without_symbols);
}

/// The offset of the first frame that starts at or after `at`.
fn frame_boundary_after(log: &[u8], at: usize) -> usize {
    let mut reader = FrameReader::new(log).expect("a log");
    while let Ok(Some(item)) = reader.next_item() {
        if let Item::Record { offset, .. } = item {
            if offset as usize >= at {
                return offset as usize;
            }
        }
    }
    log.len()
}

#[test]
fn logs_joined_and_logs_followed_by_zeros_are_reported() {
    let log = real_log();
    let golden = std::fs::read(data().join("golden.log")).expect("golden.log");
    let mut cases = vec![
        ("two real logs".to_string(), [&log[..], &log[..]].concat()),
        (
            "a real log and another".into(),
            [&log[..], &golden[..]].concat(),
        ),
        (
            "two headers".into(),
            [&log[..FILE_HEADER_LEN], &log[..FILE_HEADER_LEN]].concat(),
        ),
        (
            "a real log and a header".into(),
            [&log[..], &log[..FILE_HEADER_LEN]].concat(),
        ),
        (
            "a real log and zeros".into(),
            [&log[..], &[0; 1 << 16][..]].concat(),
        ),
        (
            "zeros then another log".into(),
            [&log[..], &[0; 999][..], &golden[..]].concat(),
        ),
    ];
    for n in (FILE_HEADER_LEN..log.len()).step_by(37) {
        cases.push((
            format!("cut at {n}, then another log"),
            [&log[..n], &golden[..]].concat(),
        ));
        cases.push((
            format!("cut at {n}, then zeros"),
            [&log[..n], &[0; 4096][..]].concat(),
        ));
    }
    let mut middle = log.clone();
    let half = middle.len() / 2;
    middle[half..half + 512].fill(0);
    cases.push(("512 zeros in the middle".into(), middle));
    each_within_limit(cases.clone(), without_symbols);
    // The binaries the real log names exist on the machine that made it, and some (libc)
    // everywhere: symbolize a few of these too.
    each_within_limit(cases.into_iter().take(6).collect(), with_symbols);
}

/// Objects (and as many threads and chains) of [`memory_hungry_log`].
const HUNGRY: u32 = 10_000;
/// What the analyzer may use at most on [`memory_hungry_log`], in KiB (it uses about 60 MiB).
const HUNGRY_LIMIT_KB: u64 = 160 << 10;

/// A log that asks the model for as much memory as it keeps per item, in every collection:
/// objects with a name, a wait site, every kind counter and counters, each created at a chain
/// of its own deeper than kept; named threads; contention records with more waiters than kept;
/// deadlocks of more threads than kept; long notes; lock-order edges with more witnesses than
/// kept. About 40 MB.
fn memory_hungry_log() -> Vec<u8> {
    let mut b = common::LogBuilder::started("/nonexistent/app", &["app"]);
    let long = |c: char, n: usize| std::iter::repeat_n(c, n).collect::<String>();
    for i in 1..=HUNGRY {
        let id = u64::from(i);
        b.chain(
            i,
            &(0..100)
                .map(|f| 0x5555_0000_0000 + id * 1000 + f)
                .collect::<Vec<_>>(),
        );
        b.push(ThreadStart {
            tid: i,
            parent_tid: 1,
            ns: common::T0,
            start_routine: 0x5555_0000_0000 + id,
            chain_id: i,
            is_main: 0,
        });
        b.push(ThreadName {
            tid: i,
            ns: common::T0,
            name: long('t', 300),
        });
        b.object(ObjectKind::Mutex, id, 0x7000_0000 + id * 64, i);
        b.push(ObjectName {
            object_id: id,
            name: long('o', 300),
        });
        b.push(WaitSite {
            object_id: id,
            chain_id: i,
            count: 1,
            wait_total_ns: 1,
            wait_max_ns: 1,
        });
        b.kind_counters(id, &(0..80).map(|k| (k, u64::from(k))).collect::<Vec<_>>());
        b.counters(id, 10, 5, id);
        for w in 0..10 {
            b.lock_order(id, id + 1, w, i);
        }
    }
    for r in 1..=u64::from(HUNGRY / 10) {
        b.open(r, r, 3, 10, (1, 1));
        b.push(ContentionClose {
            record_id: r,
            object_id: r,
            ns: common::T0 + 20,
            level: 3,
            elapsed_ns: 10,
            threads_tried: 100,
            holder_tid: 2,
            holder_chain: 2,
            waiters: (0..100)
                .map(|t| WaiterRef {
                    tid: t,
                    chain_id: t,
                    wait_ns: 5,
                })
                .collect(),
            waiters_total: 100,
            coalesced: 0,
        });
    }
    for _ in 0..100 {
        b.push(Deadlock {
            ns: common::T0,
            detected_by: 1,
            cycle: (0..2000)
                .map(|t| DeadlockEdge {
                    tid: t,
                    object_id: u64::from(t),
                    wait_chain: t,
                    holder_tid: t + 1,
                })
                .collect(),
        });
    }
    for _ in 0..1000 {
        b.push(Note {
            ns: common::T0,
            level: note_level::WARNING,
            text: long('n', 10_000),
        });
    }
    b.end(1000 * common::MS, 3);
    b.bytes
}

#[test]
fn memory_stays_within_its_limit_on_a_log_built_to_fill_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("hungry.log");
    std::fs::write(&log, memory_hungry_log()).expect("write");
    for mode in ["--json", "--sort=hwm", "--sort=outer:2"] {
        let r = common::run_analyzer(&[mode.as_ref(), log.as_os_str()], Duration::from_secs(300));
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        eprintln!("{mode}: peak {} KiB", r.max_rss_kb);
        assert!(r.max_rss_kb > 0, "the analyzer's memory was not seen");
        assert!(
            r.max_rss_kb < HUNGRY_LIMIT_KB,
            "{mode}: peak {} KiB, over the {HUNGRY_LIMIT_KB} KiB limit",
            r.max_rss_kb
        );
        assert!(r
            .stdout
            .contains("records with a name, path, text or list cut"));
    }
}
