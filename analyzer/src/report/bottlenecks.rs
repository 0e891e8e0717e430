//! BOTTLENECKS: what held the program back, from the run's critical path (`crate::critical`):
//! the few things the end of the run waited for most, each with its share of the path and what
//! to try; then the waiting that cost nothing (idle), in one line.

use std::collections::HashMap;
use std::fmt::Write;

use super::fmt_ns;
use crate::critical::{Cause, Path};

use super::Ctx;

/// Bottlenecks listed at most.
const SHOWN: usize = 5;
/// A cause below this share of the path is not listed.
const MIN_SHARE: f64 = 0.02;

/// One line's worth: a cause, with the threads whose work or readiness it gathers.
struct Item {
    key: Key,
    ns: u64,
    threads: Vec<u32>,
}

/// What a line is about: threads' work and readiness are gathered by thread name.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Held(u64),
    Waited(u64),
    Work(String),
    CpusBusy,
    WakeLatency(u64),
    Blocked(i32, String),
    Stopped,
}

fn gather(ctx: &Ctx<'_>, p: &Path) -> Vec<Item> {
    let name = |tid: u32| {
        ctx.model
            .threads
            .get(&tid)
            .and_then(|t| t.name.clone())
            .unwrap_or_else(|| format!("thread {tid}"))
    };
    let mut by: HashMap<Key, Item> = HashMap::new();
    for (cause, ns) in &p.by {
        let (key, tid) = match cause {
            Cause::Held(o) => (Key::Held(*o), None),
            Cause::Waited(o) => (Key::Waited(*o), None),
            Cause::Work(t) => (Key::Work(name(*t)), Some(*t)),
            Cause::CpusBusy(t) => (Key::CpusBusy, Some(*t)),
            Cause::WakeLatency(o) => (Key::WakeLatency(*o), None),
            Cause::Blocked(sys, what) => (Key::Blocked(*sys, what.clone()), None),
            Cause::Stopped => (Key::Stopped, None),
        };
        let item = by.entry(key.clone()).or_insert(Item {
            key,
            ns: 0,
            threads: Vec::new(),
        });
        item.ns += ns;
        if let Some(t) = tid {
            if !item.threads.contains(&t) {
                item.threads.push(t);
            }
        }
    }
    let mut items: Vec<Item> = by.into_values().collect();
    items.sort_by_key(|b| std::cmp::Reverse(b.ns));
    items
}

fn threads_text(ctx: &Ctx<'_>, tids: &[u32]) -> String {
    match tids {
        [t] => ctx.thread_label(*t),
        _ => format!("{} threads", tids.len()),
    }
}

/// The line of one item and what it means.
fn describe(ctx: &mut Ctx<'_>, item: &Item) -> (String, String) {
    match &item.key {
        Key::Held(o) => (
            format!("inside the critical sections of {}", ctx.object_label(*o)),
            "threads that needed it waited while its holder worked: shorten what is done while \
             holding it, or split it"
                .into(),
        ),
        Key::Waited(o) => (
            format!(
                "waiting on {} with nobody to end the wait",
                ctx.object_label(*o)
            ),
            "timeouts or wake-ups the shim does not see: a timed wait that runs out, or a wake \
             from outside the program"
                .into(),
        ),
        Key::Work(name) => (
            match item.threads.as_slice() {
                [t] => format!("the work of {}, on a CPU", ctx.thread_label(*t)),
                ts => format!("the work of {} threads \"{name}\", on a CPU", ts.len()),
            },
            "its own code is what the run waited for: make it faster, or share it among more \
             threads"
                .into(),
        ),
        Key::CpusBusy => (
            format!(
                "ready to run while every CPU was busy ({})",
                threads_text(ctx, &item.threads)
            ),
            "more runnable threads than CPUs, or other programs on them: more CPUs would help, \
             or fewer threads"
                .into(),
        ),
        Key::WakeLatency(o) => (
            if *o == 0 {
                "being woken while a CPU was idle".into()
            } else {
                format!("being handed {} while a CPU was idle", ctx.object_label(*o))
            },
            "the latency of a hand-off, part of that object's cost: fewer hand-offs (batching) \
             help, more CPUs do not"
                .into(),
        ),
        Key::Blocked(sys, what) => (
            format!("blocked in {}", super::text::blocked_label(ctx, *sys, what)),
            "waiting for the system: a file, a socket, a sleep".into(),
        ),
        Key::Stopped => (
            "stopped (a signal, a debugger)".into(),
            "time the process did not run at all".into(),
        ),
    }
}

/// Waiting that did not hold the run back: an object or resource threads waited on, how long,
/// and how much of that lay on the path (under [`MIN_SHARE`] of it, so not a bottleneck).
struct Idle {
    waited: u64,
    on_path: u64,
    label: String,
}

/// What threads waited for that is off the path (or on it for too little to be listed), most
/// waited first.
fn idle(ctx: &mut Ctx<'_>, p: &Path) -> Vec<Idle> {
    let on_path =
        |o: u64| p.ns(&Cause::Held(o)) + p.ns(&Cause::Waited(o)) + p.ns(&Cause::WakeLatency(o));
    let limit = (MIN_SHARE * p.length_ns() as f64) as u64;
    let joins: std::collections::HashSet<u64> = ctx
        .model
        .objects
        .values()
        .map(|o| o.object_id)
        .collect::<Vec<_>>()
        .into_iter()
        .filter(|&id| ctx.group_of(id) == crate::findings::Group::Join)
        .collect();
    let is_join = |_: &Ctx<'_>, id: u64| joins.contains(&id);
    // A join is how a thread waits for another's work, which the path follows: never idle.
    let mut waits: Vec<(u64, u64)> = ctx
        .model
        .objects
        .values()
        .map(|o| (o.wait_total_ns(), o.object_id))
        .filter(|&(ns, _)| ns > 0)
        .collect();
    if let Some(open) = &ctx.model.open_waits {
        let end = p.end_ns;
        for w in &open.waits {
            let ns = end.saturating_sub(w.since_ns);
            match waits.iter_mut().find(|(_, id)| *id == w.object_id) {
                Some(x) => x.0 += ns,
                None => waits.push((ns, w.object_id)),
            }
        }
    }
    waits.retain(|&(_, id)| !is_join(ctx, id) && on_path(id) < limit);
    let mut idle: Vec<Idle> = waits
        .into_iter()
        .map(|(waited, id)| Idle {
            waited,
            on_path: on_path(id),
            label: ctx.object_short(id),
        })
        .collect();
    // Blocked outside the shim's objects (sampled), by resource.
    for r in crate::states::resource_rows(&ctx.model.states) {
        let on = p.ns(&Cause::Blocked(r.syscall, r.what.to_string()));
        if r.syscall == -2 || on >= limit {
            continue;
        }
        idle.push(Idle {
            waited: r.w.ns,
            on_path: on,
            label: super::text::blocked_label(ctx, r.syscall, r.what),
        });
    }
    idle.sort_by_key(|b| std::cmp::Reverse(b.waited));
    idle.truncate(4);
    idle
}

/// The objects whose critical sections are listed as bottlenecks, most first.
pub fn held_objects(p: &Path) -> Vec<u64> {
    let limit = (MIN_SHARE * p.length_ns() as f64) as u64;
    p.by.iter()
        .filter_map(|(c, ns)| match c {
            Cause::Held(o) if *ns >= limit => Some(*o),
            _ => None,
        })
        .take(SHOWN)
        .collect()
}

/// The summary's line naming what held the run back most, when the run has a critical path.
pub fn headline(ctx: &mut Ctx<'_>) -> Option<String> {
    let p = ctx.critical().cloned()?;
    let length = p.length_ns();
    let top = gather(ctx, &p).into_iter().next()?;
    if length == 0 || top.ns == 0 {
        return None;
    }
    let (what, _) = describe(ctx, &top);
    Some(format!(
        "held back by: {} ({:.1}% of the {} critical path; BOTTLENECKS below)",
        what.strip_prefix("inside ").unwrap_or(&what),
        100.0 * top.ns as f64 / length as f64,
        if p.phase.is_some() {
            "progress phase's"
        } else {
            "run's"
        }
    ))
}

/// Whether waiting on `what` was idle: under `MIN_SHARE` of the critical path (false when the
/// run has none).
pub fn idle_wait(ctx: &mut Ctx<'_>, what: &crate::states::Waited) -> bool {
    let Some(p) = ctx.critical() else {
        return false;
    };
    let limit = (MIN_SHARE * p.length_ns() as f64) as u64;
    let on = match what {
        crate::states::Waited::Object(o) => {
            p.ns(&Cause::Held(*o)) + p.ns(&Cause::Waited(*o)) + p.ns(&Cause::WakeLatency(*o))
        }
        crate::states::Waited::Blocked(sys, w) => p.ns(&Cause::Blocked(*sys, w.to_string())),
        _ => return false,
    };
    p.length_ns() > 0 && on < limit
}

pub fn render(ctx: &mut Ctx<'_>, out: &mut String) {
    let Some(p) = ctx.critical().cloned() else {
        return;
    };
    let length = p.length_ns();
    if length == 0 {
        return;
    }
    let (run, _) = ctx.model.duration_ns();
    let estimated = if p.estimated {
        "; where a thread was not waiting, its time is split as the sampler's states say, an \
         estimate"
    } else {
        ""
    };
    match p.phase {
        Some((a, b)) => {
            let _ = writeln!(
                out,
                "\nBOTTLENECKS (what the work between the program's progress points waited for: \
                 the critical path of that phase, {} of the {} run, from {} to {} after the \
                 start, through {} hand-offs between threads{estimated})",
                fmt_ns(length),
                fmt_ns(run),
                fmt_ns(ctx.model.rel(a)),
                fmt_ns(ctx.model.rel(b)),
                p.hops
            );
        }
        None => {
            let _ = writeln!(
                out,
                "\nBOTTLENECKS (what the end of the run waited for: its critical path, {} of the \
                 {} run, through {} hand-offs between threads{estimated})",
                fmt_ns(length),
                fmt_ns(run),
                p.hops
            );
        }
    }
    let items = gather(ctx, &p);
    let basis = crate::whatif::Basis::of(ctx);
    for (rank, item) in items
        .iter()
        .filter(|i| i.ns as f64 >= MIN_SHARE * length as f64)
        .take(SHOWN)
        .enumerate()
    {
        let (what, means) = describe(ctx, item);
        let _ = writeln!(
            out,
            "  {}. {:>5.1}%  {:>9}  {what}",
            rank + 1,
            100.0 * item.ns as f64 / length as f64,
            fmt_ns(item.ns)
        );
        let _ = writeln!(out, "                          {means}");
        if let (Key::Held(o), Some(b)) = (&item.key, &basis) {
            let [half, none] = [0.5, 0.0].map(|f| b.predict(&[(*o, f)].into()));
            let _ = writeln!(
                out,
                "                          what if: half as long, the {} would take ~{} ({:.2}x); \
                 none, ~{} ({:.2}x) (estimates: waitshim-analyze whatif)",
                if p.phase.is_some() { "phase" } else { "run" },
                fmt_ns(half.predicted_ns),
                half.speedup(),
                fmt_ns(none.predicted_ns),
                none.speedup()
            );
            // The first point's throughput then: what a server's author measures.
            if let (Some(h), Some(n)) = (
                crate::whatif::throughput(ctx.model, &half).first(),
                crate::whatif::throughput(ctx.model, &none).first(),
            ) {
                let _ = writeln!(
                    out,
                    "                          \"{}\": {:.1}/s now; ~{:.1}/s and ~{:.1}/s then",
                    crate::plain::escaped(&h.name),
                    h.per_second,
                    h.predicted_per_second,
                    n.predicted_per_second
                );
            }
        }
    }
    let idle = idle(ctx, &p);
    if !idle.is_empty() {
        let list: Vec<String> = idle
            .iter()
            .map(|i| match i.on_path {
                0 => format!("{} {}", i.label, fmt_ns(i.waited)),
                on => format!(
                    "{} {} ({} of it on the path)",
                    i.label,
                    fmt_ns(i.waited),
                    fmt_ns(on)
                ),
            })
            .collect();
        let _ = writeln!(
            out,
            "  idle: threads also waited on {}; none of it held the end of the run back but \
             the part said to be on the path",
            list.join(", ")
        );
    }
}
