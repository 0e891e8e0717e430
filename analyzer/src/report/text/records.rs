//! The contention records, worst first.

use super::*;

pub(super) fn record(ctx: &mut Ctx<'_>, rank: usize, r: &ContentionRecord, out: &mut String) {
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
    let waited = WaitedFor::of(m.objects.get(&r.object_id).and_then(|o| o.kind()));
    let barrier = waited == WaitedFor::Round;
    // No thread waited behind another by the close (or, still open, at the opening).
    let none_waited = r.level() == 0;
    if let Some(o) = &r.open {
        let why = record_words::opened_why(r.reason(), waited, o.level, m.raised_highwater(r));
        let what = match (r.opener_was_holder() && !none_waited, barrier) {
            (true, true) => "arrived (its arrival then completed the round)",
            // The object was released as its wait began, before the episode was marked on it:
            // the waiter took it, and its own release closed the record.
            (true, false) => "waited (it then took the object, and its release closed the record)",
            (false, true) => "arrived",
            (false, false) => "waited",
        };
        let _ = writeln!(
            out,
            "    opened at {} ({why}) when thread {} {what}",
            fmt_ns(m.rel(o.ns)),
            o.waiter_tid
        );
        if none_waited {
            let _ = writeln!(
                out,
                "    {}",
                record_words::no_waiter(waited, o.waiter_tid, r.opener_was_holder())
            );
        }
    }
    if let Some(tid) = r.holder_tid() {
        let who = ctx.thread_label(tid);
        let (line, show_chain) = record_words::ended_by(waited, r.close.is_some(), tid, &who);
        let _ = writeln!(out, "    {line}");
        if let (true, Some(c)) = (show_chain, &r.close) {
            chain(ctx, c.holder_chain, "      ", out);
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
    // The waits, and the distinct threads that made them (the record's `threads_tried` less
    // its holder): a thread that waited again during the episode is listed once.
    let listed = seen.iter().map(|(_, t)| t.len()).sum::<usize>() as u64;
    let threads = r.close.as_ref().map_or(listed, |c| {
        u64::from(c.threads_tried)
            .saturating_sub(u64::from(c.holder_tid != 0))
            .max(listed)
    });
    if total > threads && threads > 0 {
        let _ = writeln!(
            out,
            "    waiters ({total} waits by {threads} thread{}: a thread that waited again in the episode is listed once):",
            if threads == 1 { "" } else { "s" }
        );
    } else {
        let _ = writeln!(out, "    waiters ({total}):");
    }
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

pub(super) fn records(ctx: &mut Ctx<'_>, out: &mut String) {
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
            for id in g.records.iter().take(MAX_GROUP_RECORDS_SHOWN) {
                if let Some(r) = ctx.model.records.get(id) {
                    rank += 1;
                    record(ctx, rank, r, out);
                }
            }
            if g.records.len() > MAX_GROUP_RECORDS_SHOWN {
                let _ = writeln!(
                    out,
                    "\n... {} more records in this group (all are in the JSON report)",
                    g.records.len() - MAX_GROUP_RECORDS_SHOWN
                );
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
