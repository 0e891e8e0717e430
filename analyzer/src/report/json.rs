//! The JSON report: one document, schema `waitshim-report/1`, documented field by field in
//! `analyzer/JSON.md`. Fields are only ever added; a field whose value is unknown is `null`.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};
use waitshim_format::{end_reason, origin, ObjectKind};

use super::Ctx;
use crate::lockorder::{Stopped, MAX_CYCLES, MAX_CYCLE_LEN};
use crate::model::{
    churn_kind_json, errno_name, is_ended_key, kind_counter_json, reason_json,
    snapshot_source_name, Object, WaitEventGroup,
};
use crate::symbolize::Frame;

pub const SCHEMA: &str = "waitshim-report/1";

/// Addresses are strings (`"0x55d0c0ffee00"`): 64-bit values do not survive JSON readers that
/// use doubles.
fn addr(a: u64) -> Value {
    Value::String(format!("{a:#x}"))
}

fn frame(f: &Frame) -> Value {
    json!({
        "addr": addr(f.addr),
        "function": f.function,
        "offset": f.offset,
        "file": f.file,
        "line": f.line,
        "module": f.module,
        "module_offset": f.module_offset,
        "inlined": f.inlined,
    })
}

fn opt_frame(f: Option<Frame>) -> Value {
    f.as_ref().map_or(Value::Null, frame)
}

/// An object's counters: those every object has (when the log has its `Counters` record), then
/// the kind-specific ones its `KindCounters` record holds, by name (`key_N` for keys this
/// analyzer does not know). Reason codes are in `ended`, not here.
fn counters(o: &Object) -> Value {
    let mut map = Map::new();
    if let Some(k) = &o.counters {
        for (name, v) in [
            ("acquisitions", k.acquisitions),
            ("contended", k.contended),
            ("owner_changes", k.owner_changes),
            ("busy", k.busy),
            ("timeouts", k.timeouts),
            ("errors", k.errors),
            ("wait_total_ns", k.wait_total_ns),
            ("wait_max_ns", k.wait_max_ns),
            ("hold_total_ns", k.hold_total_ns),
            ("hold_max_ns", k.hold_max_ns),
            ("hold_samples", k.hold_samples),
            ("max_waiters", u64::from(k.max_waiters)),
        ] {
            map.insert(name.into(), json!(v));
        }
    }
    for &(key, v) in &o.kind_counters {
        if is_ended_key(key) {
            continue;
        }
        map.insert(kind_counter_json(key), json!(v));
    }
    if map.is_empty() {
        Value::Null
    } else {
        Value::Object(map)
    }
}

/// A chain id, `null` for 0 (no chain); a chain it names is added to `chains_used`.
fn chain_ref(id: u32, chains_used: &mut BTreeSet<u32>) -> Value {
    if id == 0 {
        Value::Null
    } else {
        chains_used.insert(id);
        json!(id)
    }
}

/// How a (version, rule, object)'s wait events ended: reason name → count (`key_N` for codes
/// this analyzer does not know); events written before their wait ended are in `not_ended`.
fn group_ended(g: &WaitEventGroup) -> (Map<String, Value>, u64) {
    let mut ended = Map::new();
    let mut not_ended = 0;
    for &(code, n) in &g.reasons {
        match reason_json(code) {
            Some(name) => {
                ended.insert(name, json!(n));
            }
            None => not_ended += n,
        }
    }
    (ended, not_ended)
}

/// `policy`, `wait_events`, `waiter_chains`, `holder_stacks` and `snapshots`: the policy in
/// force and what its rules collected, with the chains they name added to `chains_used`.
fn policy(ctx: &mut Ctx<'_>, chains_used: &mut BTreeSet<u32>) -> Vec<(&'static str, Value)> {
    let m = ctx.model;
    let p = &m.policy;
    let rel = |ns: u64| m.rel(ns);

    let versions: Vec<Value> = p
        .versions
        .iter()
        .map(|v| {
            json!({
                "version": v.version,
                "at_ns": rel(v.ns),
                "source": v.source,
                "builtin": v.source.is_empty(),
                "text": v.text,
                "rules": v.rules,
            })
        })
        .collect();
    let rules: Vec<Value> = p
        .rule_stats
        .values()
        .map(|r| {
            json!({
                "version": r.version,
                "rule": r.rule,
                "summary": p.rule_summary(r.version, r.rule),
                "requests": r.requests,
                "acted": r.acted,
                "suppressed": r.suppressed,
            })
        })
        .collect();

    let events: Vec<Value> = p
        .wait_events
        .iter()
        .map(|e| {
            json!({
                "object_id": e.object_id,
                "tid": e.tid,
                "at_ns": rel(e.ns),
                "wait_ns": e.wait_ns,
                "waiters": e.waiters,
                "reason": reason_json(e.reason),
                "version": e.version,
                "rule": e.rule,
                "chain": chain_ref(e.chain_id, chains_used),
            })
        })
        .collect();
    let by_rule: Vec<Value> = p
        .wait_event_groups
        .iter()
        .map(|(&(version, rule, object_id), g)| {
            let (ended, not_ended) = group_ended(g);
            json!({
                "version": version,
                "rule": rule,
                "object_id": object_id,
                "count": g.count,
                "wait_total_ns": g.wait_total_ns,
                "wait_max_ns": g.wait_max_ns,
                "ended": ended,
                "not_ended": not_ended,
            })
        })
        .collect();

    let waiter_chains: Vec<Value> = p
        .waiter_chains
        .iter()
        .map(|c| {
            json!({
                "object_id": c.object_id,
                "at_ns": rel(c.ns),
                "version": c.version,
                "rule": c.rule,
                "waiters": c.waiters.iter().map(|w| json!({
                    "tid": w.tid,
                    "chain": chain_ref(w.chain_id, chains_used),
                    "wait_ns": w.wait_ns,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();

    let mut holder_stacks = Vec::new();
    for h in &p.holder_stacks {
        let function = ctx.user_function(h.chain_id);
        holder_stacks.push(json!({
            "object_id": h.object_id,
            "at_ns": rel(h.ns),
            "holder_tid": h.holder_tid,
            "waiter_tid": h.waiter_tid,
            "version": h.version,
            "rule": h.rule,
            "live": h.live != 0,
            "how": match h.live {
                0 => "acquired",
                1 => "signal",
                _ => "scanned",
            },
            "chain": chain_ref(h.chain_id, chains_used),
            "function": function,
        }));
    }

    let snapshots: Vec<Value> = p
        .snapshots
        .iter()
        .map(|s| {
            json!({
                "seq": s.seq,
                "at_ns": rel(s.ns),
                "source": snapshot_source_name(s.source),
                "requester_pid": (s.requester_pid != 0).then_some(s.requester_pid),
            })
        })
        .collect();

    vec![
        ("policy", json!({"versions": versions, "rules": rules})),
        (
            "wait_events",
            json!({"total": p.wait_events_total, "listed": events, "by_rule": by_rule}),
        ),
        (
            "waiter_chains",
            json!({"total": p.waiter_chains_total, "listed": waiter_chains}),
        ),
        (
            "holder_stacks",
            json!({"total": p.holder_stacks_total, "listed": holder_stacks}),
        ),
        (
            "snapshots",
            json!({"total": p.snapshots_total, "listed": snapshots}),
        ),
    ]
}

/// The report of one log.
pub fn render(ctx: &mut Ctx<'_>) -> Value {
    let m = ctx.model;
    let rel = |ns: u64| m.rel(ns);
    let mut chains_used: BTreeSet<u32> = BTreeSet::new();

    let (duration, lower_bound) = m.duration_ns();
    let run = json!({
        "pid": m.run.as_ref().map(|r| r.pid),
        "ppid": m.run.as_ref().map(|r| r.ppid),
        "exe": m.run.as_ref().map(|r| r.exe.clone()),
        "cmdline": m.run.as_ref().map(|r| r.cmdline.clone()),
        "shim_version": m.run.as_ref().map(|r| r.shim_version.clone()),
        "ncpus": m.run.as_ref().map(|r| r.ncpus),
        "start_realtime_ns": m.run.as_ref().map(|r| r.realtime_ns),
        "start_mono_ns": m.run.as_ref().map(|r| r.mono_ns),
        "duration_ns": duration,
        "duration_is_lower_bound": lower_bound,
        "end": m.run_end.as_ref().map(|e| json!({
            "at_ns": rel(e.ns),
            "reason": match e.reason {
                end_reason::EXIT => "exit",
                end_reason::UNDERSCORE_EXIT => "_exit",
                end_reason::EXEC => "exec",
                _ => "unknown",
            },
            "exec_path": (e.reason == end_reason::EXEC)
                .then(|| m.exec.as_ref().map(|x| x.path.clone()))
                .flatten(),
            "exit_status": (e.exit_status >= 0).then_some(e.exit_status),
            "hwm": e.hwm,
            "dropped": e.dropped,
        })),
        "threads_seen": m.threads.len(),
        "objects_tracked": m.objects.len(),
        "objects_contended": m.contended_objects(),
        "objects_churned": m.objects_churned(),
        "objects_quiet": m.objects_quiet(),
    });

    let final_hw = m.final_highwater().cloned();
    let highwater = json!({
        "hwm": m.hwm(),
        "object_id": final_hw.as_ref().map(|h| h.object_id),
        "tid": final_hw.as_ref().map(|h| h.tid),
        "at_ns": final_hw.as_ref().map(|h| rel(h.ns)),
        "history": m.highwater.iter().map(|h| json!({
            "at_ns": rel(h.ns),
            "hwm": h.hwm,
            "object_id": h.object_id,
            "tid": h.tid,
        })).collect::<Vec<_>>(),
    });

    let deadlocks: Vec<Value> = m
        .deadlocks
        .iter()
        .map(|d| {
            let broken = m.broken(d).map(|b| {
                json!({
                    "tid": b.tid,
                    "at_ns": rel(b.ns),
                    "ended": crate::model::reason_json(b.outcome),
                })
            });
            json!({
                "at_ns": rel(d.ns),
                "detected_by": d.detected_by,
                "broken": broken,
                "cycle": d.cycle.iter().map(|e| {
                    chains_used.insert(e.wait_chain);
                    json!({
                        "tid": e.tid,
                        "object_id": e.object_id,
                        "wait_chain": e.wait_chain,
                        "holder_tid": e.holder_tid,
                    })
                }).collect::<Vec<_>>(),
            })
        })
        .collect();

    let potential_deadlocks: Vec<Value> = ctx
        .inversions
        .cycles
        .iter()
        .map(|p| {
            let edges: Vec<Value> = p
                .edges()
                .filter_map(|key| m.lock_order.get(&key))
                .map(|e| {
                    for w in &e.witnesses {
                        chains_used.insert(w.chain_id);
                    }
                    let first = e.witnesses.first();
                    json!({
                        "from": e.from,
                        "to": e.to,
                        "tid": first.map(|w| w.tid),
                        "chain": first.map(|w| w.chain_id),
                        "witnesses": e.witnesses.iter().map(|w| json!({
                            "tid": w.tid,
                            "chain": w.chain_id,
                            "at_ns": rel(w.ns),
                        })).collect::<Vec<_>>(),
                        "more_witnesses": e.more_witnesses,
                    })
                })
                .collect();
            json!({
                "cycle": p.cycle,
                "deadlocked": p.deadlocked,
                "edges": edges,
            })
        })
        .collect();
    let lock_order = json!({
        "edges": m.lock_order.len(),
        "potential_deadlocks": ctx.inversions.cycles.len(),
        "search": ctx.inversions.stopped.map_or("complete", Stopped::as_str),
        "max_cycles": MAX_CYCLES,
        "max_cycle_length": MAX_CYCLE_LEN,
        "long_cycles_skipped": ctx.inversions.depth_limited,
    });

    let records: Vec<Value> = ctx
        .sorted_records()
        .into_iter()
        .map(|r| {
            let mut waiters = Vec::new();
            if let Some(c) = &r.close {
                chains_used.insert(c.holder_chain);
                for w in &c.waiters {
                    chains_used.insert(w.chain_id);
                    waiters.push(json!({"tid": w.tid, "chain_id": w.chain_id, "wait_ns": w.wait_ns}));
                }
            }
            if let Some(o) = &r.open {
                chains_used.insert(o.waiter_chain);
            }
            json!({
                "record_id": r.record_id,
                "object_id": r.object_id,
                "state": if r.still_open() { "open" } else { "complete" },
                "level": r.level(),
                "reason": r.reason(),
                "opened_at_ns": r.opened_ns().map(rel),
                "closed_at_ns": r.close.as_ref().map(|c| rel(c.ns)),
                "elapsed_ns": r.elapsed_ns(m.last_ns),
                "elapsed_is_lower_bound": r.still_open(),
                "threads_tried": r.close.as_ref().map(|c| c.threads_tried),
                "holder_tid": r.holder_tid(),
                "holder_chain": r.close.as_ref().map(|c| c.holder_chain),
                "opened_by": r.open.as_ref().map(|o| json!({"tid": o.waiter_tid, "chain_id": o.waiter_chain})),
                "waiters": waiters,
                "waiters_total": r.close.as_ref().map(|c| c.waiters_total),
                "coalesced": r.close.as_ref().map_or(0, |c| c.coalesced),
            })
        })
        .collect();

    let groups = ctx.groups().map(|gs| {
        gs.iter()
            .map(|g| {
                json!({
                    "frames": g.frames,
                    "records": g.records,
                    "total_elapsed_ns": g.total_elapsed_ns,
                    "max_level": g.max_level,
                })
            })
            .collect::<Vec<_>>()
    });

    let mut objects = Vec::new();
    for o in m.objects.values() {
        let site = ctx.creation_site(o.object_id);
        let c = o.create.as_ref();
        if let Some(c) = c {
            chains_used.insert(c.chain_id);
        }
        for w in o.wait_sites.keys() {
            chains_used.insert(*w);
        }
        objects.push(json!({
            "object_id": o.object_id,
            "kind": o.kind().map(ObjectKind::name),
            "subtype": c.map(|c| c.subtype),
            "origin": c.map(|c| match c.origin {
                origin::INIT => "init",
                origin::FIRST_USE => "first_use",
                _ => "unknown",
            }),
            "addr": c.map(|c| addr(c.addr)),
            "name": o.name,
            "created_at_ns": c.map(|c| rel(c.ns)),
            "created_by_tid": c.map(|c| c.tid),
            "creation_chain": c.map(|c| c.chain_id),
            "creation_site": opt_frame(site),
            "destroyed_at_ns": o.destroy_ns.map(rel),
            "counters": counters(o),
            "ended": o.ended().into_iter().map(|(name, _, n)| (name.to_string(), json!(n))).collect::<Map<String, Value>>(),
            "ended_errors": o.ended_errnos().into_iter().map(|(e, n)| (errno_name(e), json!(n))).collect::<Map<String, Value>>(),
            "wait_sites": o.wait_sites.values().map(|w| json!({
                "chain_id": w.chain_id,
                "count": w.count,
                "wait_total_ns": w.wait_total_ns,
                "wait_max_ns": w.wait_max_ns,
            })).collect::<Vec<_>>(),
        }));
    }

    let mut short_lived = Vec::new();
    for c in m.churned_by_count() {
        chains_used.insert(c.chain_id);
        let site = ctx.sym.site(m, c.chain_id);
        short_lived.push(json!({
            "kind": churn_kind_json(c.kind),
            "chain_id": c.chain_id,
            "count": c.count,
            "acquisitions": c.acquisitions,
            "lifetime_total_ns": c.lifetime_total_ns,
            "lifetime_max_ns": c.lifetime_max_ns,
            "counters": c
                .counters
                .iter()
                .map(|v| (kind_counter_json(v.key), json!(v.value)))
                .collect::<Map<String, Value>>(),
            "created_at": opt_frame(site),
        }));
    }

    let mut quiet_objects = Vec::new();
    for q in m.quiet_by_count() {
        chains_used.insert(q.chain_id);
        let site = ctx.sym.site(m, q.chain_id);
        quiet_objects.push(json!({
            "kind": churn_kind_json(q.kind),
            "chain_id": q.chain_id,
            "count": q.count,
            "acquisitions": q.acquisitions,
            "owner_changes": q.owner_changes,
            "counters": q
                .counters
                .iter()
                .map(|v| (kind_counter_json(v.key), json!(v.value)))
                .collect::<Map<String, Value>>(),
            "created_at": opt_frame(site),
        }));
    }

    let mut threads = Vec::new();
    for t in m.threads.values() {
        let routine = (t.start_routine != 0).then(|| ctx.sym.frame(t.start_routine, false));
        let created = if t.chain_id != 0 {
            chains_used.insert(t.chain_id);
            ctx.sym.site(m, t.chain_id)
        } else {
            None
        };
        threads.push(json!({
            "tid": t.tid,
            "parent_tid": t.start_ns.map(|_| t.parent_tid),
            "name": t.name,
            "is_main": t.is_main,
            "start_ns": t.start_ns.map(rel),
            "exit_ns": t.exit_ns.map(rel),
            "start_routine": opt_frame(routine),
            "creation_chain": (t.chain_id != 0).then_some(t.chain_id),
            "created_at": opt_frame(created),
        }));
    }

    let policy = policy(ctx, &mut chains_used);

    let mut chains = Map::new();
    chains_used.remove(&0);
    for id in chains_used {
        if m.chains.contains_key(&id) {
            let frames: Vec<Value> = ctx.sym.chain(m, id).iter().map(frame).collect();
            chains.insert(id.to_string(), Value::Array(frames));
        }
    }

    let modules: Vec<Value> = m
        .modules
        .values()
        .map(|md| {
            json!({
                "module_id": md.module_id,
                "path": md.path,
                "base": addr(md.base),
                "build_id": md.build_id.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            })
        })
        .collect();
    let symbols: Vec<Value> = ctx
        .sym
        .module_status()
        .into_iter()
        .map(|(id, path, status)| {
            json!({"module_id": id, "path": path, "ok": status.is_ok(), "status": status.describe()})
        })
        .collect();

    // Warnings last: symbolizing above found the binaries that could not be used.
    let warnings: Vec<Value> = ctx
        .warnings()
        .into_iter()
        .map(
            |w| json!({"kind": w.kind, "message": w.message, "offset": w.offset, "bytes": w.bytes}),
        )
        .collect();

    let mut log = Map::new();
    log.insert("file".into(), json!(ctx.summary.path.display().to_string()));
    log.insert("warnings".into(), Value::Array(warnings));
    log.insert("ending".into(), json!(ctx.summary.ending.as_str()));
    log.insert(
        "damage".into(),
        json!({"stretches": ctx.summary.damage_count, "bytes": ctx.summary.damage_bytes}),
    );
    log.insert("records_read".into(), json!(ctx.summary.records));
    log.insert("run".into(), run);
    log.insert("highwater".into(), highwater);
    log.insert("deadlocks".into(), Value::Array(deadlocks));
    log.insert("lock_order".into(), lock_order);
    log.insert(
        "potential_deadlocks".into(),
        Value::Array(potential_deadlocks),
    );
    log.insert("sort".into(), json!(ctx.opts.sort.to_string()));
    log.insert("contention_records".into(), Value::Array(records));
    if let Some(g) = groups {
        log.insert("groups".into(), Value::Array(g));
    }
    log.insert("objects".into(), Value::Array(objects));
    log.insert("short_lived_objects".into(), Value::Array(short_lived));
    log.insert("quiet_objects".into(), Value::Array(quiet_objects));
    log.insert("threads".into(), Value::Array(threads));
    for (key, value) in policy {
        log.insert(key.into(), value);
    }
    log.insert("chains".into(), Value::Object(chains));
    log.insert("modules".into(), Value::Array(modules));
    log.insert("symbols".into(), Value::Array(symbols));
    Value::Object(log)
}

/// The whole document around the per-log reports.
pub fn document(logs: Vec<Value>) -> Value {
    json!({"schema": SCHEMA, "logs": logs})
}
