//! Property test: any log — random records with extreme values, then random damage — goes through
//! the whole analyzer (read, model, symbolize, text and JSON reports) without a panic. Runs a
//! bounded number of cases so the test suite stays a few seconds long.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proptest::prelude::*;
use waitshim_analyze::{analyze_bytes, json_report, lockorder, text_report, Options, SortKey};
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

fn analyze_everything(bytes: &[u8], opts: &Options) {
    if let Ok(a) = analyze_bytes(bytes, Path::new("fuzz.log")) {
        let t = text_report(&a, opts);
        assert!(t.starts_with("waitshim report: fuzz.log"));
        let j = json_report(&a, opts);
        assert!(serde_json::to_string(&j).is_ok());
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
        analyze_everything(&bytes, &Options { sort, top, all_objects, symbols });
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
