//! The text report, worst first: summary (with warnings on top), deadlocks, lock contention
//! records, per-object table, where threads wait, threads.

use std::collections::HashSet;
use std::fmt::Write;

use waitshim_format::end_reason;

use super::{fmt_ns, Ctx, SortKey};
use crate::model::ContentionRecord;

/// Frames of a chain shown in the text report; the JSON report has them all.
const MAX_FRAMES_SHOWN: usize = 16;
/// Distinct waiter chains shown per record.
const MAX_WAITER_CHAINS: usize = 8;
/// Wait sites shown per object.
const MAX_WAIT_SITES: usize = 10;

/// Renders the report of one log.
pub fn render(ctx: &mut Ctx<'_>) -> String {
    // The body is rendered first: symbolizing it finds the missing or rebuilt binaries that the
    // warnings at the top must mention.
    let mut body = String::new();
    if ctx.model.objects.is_empty() {
        body.push_str(
            "\nNo sync object was seen in this run. The program made no pthread lock calls that \
             went through libpthread: it may be statically linked, or use locks that bypass \
             libpthread (such as Rust std's futex-based Mutex), so the shim had nothing to \
             observe.\n",
        );
    } else {
        deadlocks(ctx, &mut body);
        records(ctx, &mut body);
        objects(ctx, &mut body);
        wait_sites(ctx, &mut body);
    }
    threads(ctx, &mut body);

    let mut out = String::new();
    let _ = writeln!(out, "waitshim report: {}", ctx.summary.path.display());
    for w in ctx.warnings() {
        let _ = writeln!(out, "WARNING: {}", w.message);
    }
    summary(ctx, &mut out);
    out.push_str(&body);
    out
}

fn summary(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    if let Some(r) = &m.run {
        let program = if r.cmdline.is_empty() {
            r.exe.clone()
        } else {
            r.cmdline.join(" ")
        };
        let _ = writeln!(out, "program:   {program}");
        if !r.cmdline.is_empty() && r.cmdline.first() != Some(&r.exe) {
            let _ = writeln!(out, "exe:       {}", r.exe);
        }
        let _ = writeln!(
            out,
            "pid:       {} (parent {}), {} cpus, shim {}",
            r.pid, r.ppid, r.ncpus, r.shim_version
        );
    }
    let (duration, lower_bound) = m.duration_ns();
    let _ = writeln!(
        out,
        "duration:  {}{}",
        if lower_bound { "at least " } else { "" },
        fmt_ns(duration)
    );
    match &m.run_end {
        Some(e) if e.reason == end_reason::UNDERSCORE_EXIT => {
            let _ = writeln!(out, "ended:     _exit({})", e.exit_status);
        }
        // The shim sees the status only when the program calls exit itself, not when main returns.
        Some(e) if e.exit_status < 0 => {
            let _ = writeln!(out, "ended:     exit (status not recorded)");
        }
        Some(e) => {
            let _ = writeln!(out, "ended:     exit status {}", e.exit_status);
        }
        None => {
            let _ = writeln!(out, "ended:     no exit record");
        }
    }
    let _ = writeln!(out, "threads:   {} seen", m.threads.len());
    let _ = writeln!(
        out,
        "objects:   {} tracked, {} contended",
        m.objects.len(),
        m.contended_objects()
    );
    match m.final_highwater() {
        Some(h) if h.hwm > 0 => {
            let (hwm, at, tid, object) = (h.hwm, m.rel(h.ns), h.tid, h.object_id);
            let label = ctx.object_label(object);
            let _ = writeln!(
                out,
                "highwater: {hwm} {} on {label} (reached at {} by thread {tid})",
                if hwm == 1 { "waiter" } else { "waiters" },
                fmt_ns(at)
            );
        }
        _ => {
            let _ = writeln!(out, "highwater: {} (no thread ever waited)", m.hwm());
        }
    }
    let _ = writeln!(out, "deadlocks: {}", m.deadlocks.len());
}

fn chain(ctx: &mut Ctx<'_>, chain_id: u32, indent: &str, out: &mut String) {
    if chain_id == 0 {
        let _ = writeln!(out, "{indent}(no call chain recorded)");
        return;
    }
    let frames = ctx.sym.chain(ctx.model, chain_id);
    if frames.is_empty() {
        let why = if ctx.model.chains.contains_key(&chain_id) {
            "has only frames of the shim itself"
        } else {
            "is not in the log"
        };
        let _ = writeln!(out, "{indent}(chain {chain_id} {why})");
        return;
    }
    // The limit counts physical frames: the functions inlined into one are shown with it.
    let shown = frames
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.inlined)
        .nth(MAX_FRAMES_SHOWN - 1)
        .map_or(frames.len(), |(i, _)| i + 1);
    for (i, f) in frames.iter().take(shown).enumerate() {
        let _ = writeln!(out, "{indent}#{i} {}", f.describe());
    }
    if frames.len() > shown {
        let _ = writeln!(
            out,
            "{indent}... {} outer frames not shown",
            frames.len() - shown
        );
    }
}

fn deadlocks(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    if m.deadlocks.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nDEADLOCKS ({})", m.deadlocks.len());
    for (i, d) in m.deadlocks.iter().enumerate() {
        let _ = writeln!(
            out,
            "\nDEADLOCK {} (detected at {} by thread {}): {} threads wait for each other and can never proceed",
            i + 1,
            fmt_ns(m.rel(d.ns)),
            d.detected_by,
            d.cycle.len()
        );
        let mut cycle = String::from("  cycle: ");
        for e in &d.cycle {
            let kind = m
                .objects
                .get(&e.object_id)
                .map_or("object", |o| o.kind_name());
            let _ = write!(cycle, "thread {} → {kind}#{} → ", e.tid, e.object_id);
        }
        if let Some(first) = d.cycle.first() {
            let _ = write!(cycle, "thread {}", first.tid);
        }
        let _ = writeln!(out, "{cycle}");
        for e in &d.cycle {
            let who = ctx.thread_label(e.tid);
            let what = ctx.object_label(e.object_id);
            let holder = ctx.thread_label(e.holder_tid);
            let _ = writeln!(out, "  {who} waits for {what}, held by {holder}");
        }
        for e in &d.cycle {
            let who = ctx.thread_label(e.tid);
            let _ = writeln!(out, "  wait chain of {who}:");
            chain(ctx, e.wait_chain, "    ", out);
        }
    }
}

fn record(ctx: &mut Ctx<'_>, rank: usize, r: &ContentionRecord, out: &mut String) {
    let m = ctx.model;
    let mut head = format!("[{rank}] HWM {}", r.level());
    match &r.close {
        Some(c) => {
            let _ = write!(
                head,
                "  elapsed {}  threads tried {}",
                fmt_ns(c.elapsed_ns),
                c.threads_tried
            );
            if c.coalesced > 0 {
                let _ = write!(head, "  +{} similar episodes", c.coalesced);
            }
        }
        None => {
            let _ = write!(
                head,
                "  still open when the log ended (elapsed at least {})",
                fmt_ns(r.elapsed_ns(m.last_ns))
            );
        }
    }
    let _ = writeln!(out, "\n{head}");
    let label = ctx.object_label(r.object_id);
    let _ = writeln!(out, "    object: {label}");
    if let Some(o) = &r.open {
        let why = match r.reason() {
            Some("exceeded") => "waiters rose above the highwater mark",
            Some(_) => "no other thread could run: the program was serialised on this object",
            None => "unknown reason",
        };
        let _ = writeln!(
            out,
            "    opened at {} ({why}) when thread {} waited",
            fmt_ns(m.rel(o.ns)),
            o.waiter_tid
        );
    }
    if let Some(holder) = r.holder_tid() {
        let who = ctx.thread_label(holder);
        match &r.close {
            Some(c) => {
                let _ = writeln!(out, "    holder: {who}, released it at:");
                chain(ctx, c.holder_chain, "      ", out);
            }
            None => {
                let _ = writeln!(out, "    holder: {who} (had not released it)");
            }
        }
    }
    // Identical waiter chains are shown once, with how many threads waited there.
    let mut seen: Vec<(u32, Vec<u32>)> = Vec::new();
    for (tid, chain_id) in r.waiter_chains() {
        match seen.iter_mut().find(|(c, _)| *c == chain_id) {
            Some((_, tids)) => tids.push(tid),
            None => seen.push((chain_id, vec![tid])),
        }
    }
    let total = r.close.as_ref().map_or(
        seen.iter().map(|(_, t)| t.len()).sum::<usize>() as u64,
        |c| u64::from(c.waiters_total),
    );
    let _ = writeln!(out, "    waiters ({total}):");
    for (chain_id, tids) in seen.iter().take(MAX_WAITER_CHAINS) {
        let list: Vec<String> = tids.iter().map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "      {}× (thread {}) waited at:",
            tids.len(),
            list.join(", ")
        );
        chain(ctx, *chain_id, "        ", out);
    }
    if seen.len() > MAX_WAITER_CHAINS {
        let _ = writeln!(
            out,
            "      ... {} more distinct waiter chains",
            seen.len() - MAX_WAITER_CHAINS
        );
    }
}

fn records(ctx: &mut Ctx<'_>, out: &mut String) {
    let total = ctx.model.records.len();
    let top = ctx.opts.top;
    if total == 0 {
        let _ = writeln!(
            out,
            "\nLOCK CONTENTION RECORDS: none (no thread ever waited behind another at the highwater mark)"
        );
        return;
    }
    if let Some(groups) = ctx.groups() {
        let (outer, n) = match ctx.opts.sort {
            SortKey::Outer(n) => ("outermost", n),
            SortKey::Inner(n) => ("innermost", n),
            _ => ("", 0),
        };
        let _ = writeln!(
            out,
            "\nLOCK CONTENTION RECORDS ({total}, grouped by the {outer} {n} frames of the waiter chains; {} groups, top {top} shown)",
            groups.len()
        );
        let mut rank = 0;
        for (gi, g) in groups.iter().take(top).enumerate() {
            let _ = writeln!(
                out,
                "\nGROUP {}: {}  ({} records, total elapsed {}, max HWM {})",
                gi + 1,
                g.frames.join(" → "),
                g.records.len(),
                fmt_ns(g.total_elapsed_ns),
                g.max_level
            );
            for id in &g.records {
                if let Some(r) = ctx.model.records.get(id) {
                    rank += 1;
                    record(ctx, rank, r, out);
                }
            }
        }
        return;
    }
    let sorted = ctx.sorted_records();
    let _ = writeln!(
        out,
        "\nLOCK CONTENTION RECORDS ({total}, sorted by {}; top {} shown)",
        ctx.opts.sort,
        top.min(total)
    );
    for (i, r) in sorted.into_iter().take(top).enumerate() {
        record(ctx, i + 1, r, out);
    }
}

fn objects(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    // Objects in a record or a deadlock count as active even when the run was killed before
    // their counters were flushed.
    let mut involved: HashSet<u64> = m.records.values().map(|r| r.object_id).collect();
    involved.extend(
        m.deadlocks
            .iter()
            .flat_map(|d| d.cycle.iter().map(|e| e.object_id)),
    );
    let mut objs: Vec<_> = m
        .objects
        .values()
        .filter(|o| ctx.opts.all_objects || o.has_activity() || involved.contains(&o.object_id))
        .collect();
    objs.sort_by(|a, b| {
        b.wait_total_ns()
            .cmp(&a.wait_total_ns())
            .then(a.object_id.cmp(&b.object_id))
    });
    let which = if ctx.opts.all_objects {
        "all"
    } else {
        "with activity"
    };
    let _ = writeln!(
        out,
        "\nOBJECTS ({} {which} of {} tracked, sorted by total wait)",
        objs.len(),
        m.objects.len()
    );
    let _ = writeln!(
        out,
        "  {:>10} {:>16} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7} {:>8} {:>8}  object",
        "acquired",
        "contended",
        "owner-chg",
        "wait-tot",
        "wait-max",
        "hold-tot",
        "hold-max",
        "hold-smp",
        "waiters",
        "busy",
        "timeouts"
    );
    for o in objs {
        let label = ctx.object_label(o.object_id);
        let destroyed = if o.destroy_ns.is_some() {
            " (destroyed)"
        } else {
            ""
        };
        match &o.counters {
            Some(c) => {
                let pct = if c.acquisitions > 0 {
                    (c.contended as f64) * 100.0 / (c.acquisitions as f64)
                } else {
                    0.0
                };
                let _ = writeln!(
                    out,
                    "  {:>10} {:>16} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7} {:>8} {:>8}  {label}{destroyed}",
                    c.acquisitions,
                    format!("{} ({pct:.1}%)", c.contended),
                    c.owner_changes,
                    fmt_ns(c.wait_total_ns),
                    fmt_ns(c.wait_max_ns),
                    fmt_ns(c.hold_total_ns),
                    fmt_ns(c.hold_max_ns),
                    c.hold_samples,
                    c.max_waiters,
                    c.busy,
                    c.timeouts
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "  {:>10}  (no counters in the log)  {label}{destroyed}",
                    "-"
                );
            }
        }
    }
}

fn wait_sites(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let mut objs: Vec<_> = m
        .objects
        .values()
        .filter(|o| !o.wait_sites.is_empty())
        .collect();
    if objs.is_empty() {
        return;
    }
    objs.sort_by(|a, b| {
        b.wait_total_ns()
            .cmp(&a.wait_total_ns())
            .then(a.object_id.cmp(&b.object_id))
    });
    let _ = writeln!(out, "\nWHERE THREADS WAIT");
    for o in objs {
        let label = ctx.object_label(o.object_id);
        let _ = writeln!(out, "\n  {label}");
        let mut sites: Vec<_> = o.wait_sites.values().collect();
        sites.sort_by(|a, b| {
            b.wait_total_ns
                .cmp(&a.wait_total_ns)
                .then(a.chain_id.cmp(&b.chain_id))
        });
        for s in sites.iter().take(MAX_WAIT_SITES) {
            let _ = writeln!(
                out,
                "    {} waits, total {}, max {}, at:",
                s.count,
                fmt_ns(s.wait_total_ns),
                fmt_ns(s.wait_max_ns)
            );
            chain(ctx, s.chain_id, "      ", out);
        }
        if sites.len() > MAX_WAIT_SITES {
            let _ = writeln!(
                out,
                "    ... {} more wait sites",
                sites.len() - MAX_WAIT_SITES
            );
        }
    }
}

fn threads(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    if m.threads.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nTHREADS ({})", m.threads.len());
    let _ = writeln!(
        out,
        "  {:>8}  {:<16} {:>10} {:>10}  {:<32} created at",
        "tid", "name", "started", "lifetime", "start routine"
    );
    for t in m.threads.values() {
        let name = t.name.clone().unwrap_or_default();
        let started = t.start_ns.map_or("-".into(), |s| fmt_ns(m.rel(s)));
        let lifetime = match (t.start_ns, t.exit_ns) {
            (Some(s), Some(e)) => fmt_ns(e.saturating_sub(s)),
            (Some(_), None) => "running".into(),
            _ => "-".into(),
        };
        let routine = if t.is_main {
            "(main thread)".into()
        } else if t.start_routine != 0 {
            ctx.sym.frame(t.start_routine, false).short_name()
        } else {
            "-".into()
        };
        let created = if t.chain_id != 0 {
            ctx.sym.site(m, t.chain_id).map_or("-".into(), |f| f.site())
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "  {:>8}  {:<16} {:>10} {:>10}  {:<32} {created}",
            t.tid, name, started, lifetime, routine
        );
    }
}
