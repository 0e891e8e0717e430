//! Deadlocks and hangs, cross-process cycles, potential deadlocks (lock-order inversions), and
//! the waits still in progress at the end.

use super::*;

pub(super) fn deadlocks(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let real: Vec<&Deadlock> = m.real_deadlocks().collect();
    if !real.is_empty() {
        let _ = writeln!(out, "\nDEADLOCKS ({})", real.len());
        for (i, d) in real.iter().enumerate().take(MAX_DEADLOCKS_SHOWN) {
            let _ = writeln!(
                out,
                "\nDEADLOCK {} (detected at {} by {}): {} and can never proceed",
                i + 1,
                fmt_ns(m.rel(d.ns)),
                crate::report::detector_words(d),
                crate::report::deadlock_words(d)
            );
            cycle(ctx, d, out);
        }
        if real.len() > MAX_DEADLOCKS_SHOWN {
            let _ = writeln!(
                out,
                "\n... {} more deadlocks not shown (all are in the JSON report)",
                real.len() - MAX_DEADLOCKS_SHOWN
            );
        }
    }
    ended_after_all(ctx, out, true);
    ended_after_all(ctx, out, false);
}

/// Claims that ended after all, listed apart from the deadlocks: with `hangs`, the times every
/// thread of the process waited, with no deadline, on objects of the process, until one was
/// woken by something the shim does not see (a signal handler installed before it or through
/// `sigvec`, another process, a thread it never saw); else the wait-for cycles that closed and
/// broke when a wait with a deadline gave up. Each with its threads' waits.
pub(super) fn ended_after_all(ctx: &mut Ctx<'_>, out: &mut String, hangs: bool) {
    let m = ctx.model;
    let ended: Vec<(&Deadlock, &DeadlockBroken)> = m
        .deadlocks
        .iter()
        .filter(|d| crate::report::every_thread_waits(d) == hangs)
        .filter_map(|d| m.broken(d).map(|b| (d, b)))
        .collect();
    if ended.is_empty() {
        return;
    }
    let n = ended.len();
    let _ = if hangs {
        writeln!(
            out,
            "\nEVERY THREAD WAITED, THEN ONE WAS WOKEN ({n}: no thread could have ended the \
             waits; something the shim does not see did: a signal handler it does not know of, \
             another process, a thread it never saw)"
        )
    } else {
        writeln!(
            out,
            "\nWAIT-FOR CYCLES BROKEN BY A DEADLINE ({n}: threads waited for each other until \
             one gave up; without the deadline, a deadlock)"
        )
    };
    for (i, (d, b)) in ended.iter().enumerate().take(MAX_DEADLOCKS_SHOWN) {
        let at = fmt_ns(m.rel(d.ns));
        let (what, over) = if hangs {
            let words = crate::report::deadlock_words(d);
            (format!("WAITING {} (from {at}): {words}", i + 1), "over")
        } else {
            let words = match d.cycle.len() {
                1 => "a thread waited for a lock it held itself".to_string(),
                n => format!("{n} threads waited for each other"),
            };
            let by = d.detected_by;
            (
                format!("CYCLE {} (closed at {at} by thread {by}): {words}", i + 1),
                "broken",
            )
        };
        let _ = writeln!(
            out,
            "\n{what}; {over} after {} when {} stopped waiting ({})",
            fmt_ns(b.ns.saturating_sub(d.ns)),
            ctx.thread_label(b.tid),
            crate::model::reason_text(b.outcome)
        );
        cycle(ctx, d, out);
    }
    if n > MAX_DEADLOCKS_SHOWN {
        let _ = writeln!(
            out,
            "\n... {} more {}not shown (all are in the JSON report)",
            n - MAX_DEADLOCKS_SHOWN,
            if hangs { "" } else { "broken cycles " }
        );
    }
}

/// Waits still in progress when the log ended (its last look at them): what a program that
/// hangs was waiting for, and who held it.
pub(super) fn still_waiting(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let Some(open) = m.open_waits.as_ref().filter(|o| !o.waits.is_empty()) else {
        return;
    };
    let end = m.last_ns;
    let when = match &m.run_end {
        Some(_) => "when the program ended".to_string(),
        None => format!(
            "at the log's last look, {} before its end",
            fmt_ns(end.saturating_sub(open.ns))
        ),
    };
    let _ = writeln!(
        out,
        "\nSTILL WAITING ({}: threads waiting {when})",
        open.waits.len()
    );
    for w in open.waits.iter().take(MAX_DEADLOCKS_SHOWN) {
        let who = ctx.thread_label(w.tid);
        let what = ctx.object_label(w.object_id);
        let holder = match w.holder_tid {
            0 => String::new(),
            h if m.knows_tid(h) => format!(", held by {}", ctx.thread_label(h)),
            h => format!(", held by thread {h}, not a thread of this process (the object is shared with another process)"),
        };
        let _ = writeln!(
            out,
            "\n  {who} waits for {what}{holder}, for {} so far",
            fmt_ns(open.ns.saturating_sub(w.since_ns))
        );
        chain(ctx, w.chain_id, "    ", out);
    }
    if open.waits.len() > MAX_DEADLOCKS_SHOWN {
        let _ = writeln!(
            out,
            "\n  ... {} more (all are in the JSON report)",
            open.waits.len() - MAX_DEADLOCKS_SHOWN
        );
    }
    // A thread that waits for another to act while it holds a lock others wait for: if one of
    // those is the thread that would act, nothing can go on. Said as a condition: the shim
    // cannot know who would signal.
    let holding = crate::findings::waiting_while_holding(m);
    if !holding.is_empty() {
        let _ = writeln!(
            out,
            "\n  WAITING WHILE HOLDING (a deadlock through a condition variable, semaphore or barrier, if the thread that would act is one of those waiting):"
        );
    }
    for h in holding.iter().take(MAX_DEADLOCKS_SHOWN) {
        let needed_by = ctx.thread_label(h.needed_by);
        let _ = writeln!(
            out,
            "    {} waits on {} while holding {}, which {needed_by} waits for: if {needed_by} is \
             the one to signal, post or arrive, neither can go on",
            ctx.thread_label(h.tid),
            ctx.object_label(h.waits_on),
            ctx.object_label(h.holds),
        );
    }
}

/// Deadlocks through this process and others (found by reading their logs together).
pub(super) fn cross_process(ctx: &mut Ctx<'_>, out: &mut String) {
    let Some(pid) = ctx.model.run.as_ref().map(|r| r.pid) else {
        return;
    };
    let cycles: Vec<crate::crossproc::Cycle> = ctx
        .opts
        .cross_process
        .iter()
        .filter(|c| c.involves(pid))
        .cloned()
        .collect();
    if cycles.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nDEADLOCKS ACROSS PROCESSES ({}: threads of this process and of others, in the logs \
         read with it, wait for each other over objects they share)",
        cycles.len()
    );
    for (i, c) in cycles.iter().enumerate() {
        let pids: Vec<String> = c.waits.iter().map(|w| w.pid.to_string()).collect();
        let _ = writeln!(
            out,
            "\nDEADLOCK ACROSS PROCESSES {} (pids {}): {} threads wait for each other and can never proceed",
            i + 1,
            pids.join(", "),
            c.waits.len()
        );
        for w in &c.waits {
            let what = if w.pid == pid {
                ctx.object_label(w.object_id)
            } else {
                format!("object#{} of {}", w.object_id, w.log)
            };
            let who = if w.pid == pid {
                ctx.thread_label(w.tid)
            } else {
                format!("thread {} (pid {})", w.tid, w.pid)
            };
            let _ = writeln!(
                out,
                "  {who} waits for {what}, held by thread {}",
                w.holder_tid
            );
        }
    }
}

/// The threads and objects of a wait-for cycle, and each thread's wait chain.
pub(super) fn cycle(ctx: &mut Ctx<'_>, d: &Deadlock, out: &mut String) {
    if crate::report::every_thread_waits(d) {
        return every_thread_waits(ctx, d, out);
    }
    let m = ctx.model;
    let shown = &d.cycle[..d.cycle.len().min(MAX_CYCLE_SHOWN)];
    let mut cycle = String::from("  cycle: ");
    for e in shown {
        let kind = m
            .objects
            .get(&e.object_id)
            .map_or("object", |o| o.kind_name());
        let _ = write!(cycle, "thread {} → {kind}#{} → ", e.tid, e.object_id);
    }
    if shown.len() < d.cycle.len() {
        let _ = write!(cycle, "... ({} more) → ", d.cycle.len() - shown.len());
    }
    if let Some(first) = d.cycle.first() {
        let _ = write!(cycle, "thread {}", first.tid);
    }
    let _ = writeln!(out, "{cycle}");
    for e in shown {
        let who = ctx.thread_label(e.tid);
        let what = ctx.object_label(e.object_id);
        let holder = ctx.thread_label(e.holder_tid);
        let _ = writeln!(out, "  {who} waits for {what}, held by {holder}");
    }
    wait_chains(ctx, d, shown, "threads of the cycle", out);
}

/// A deadlock no wait-for cycle shows: every thread waits. Each wait, with who holds what it
/// waits for; an object nobody holds (a condition variable, a semaphore, a barrier) has no one
/// left to act on it, and a thread waiting on one while holding what others wait for is the
/// knot (it waits for a wake-up from a thread that waits for it).
pub(super) fn every_thread_waits(ctx: &mut Ctx<'_>, d: &Deadlock, out: &mut String) {
    let m = ctx.model;
    let shown = &d.cycle[..d.cycle.len().min(MAX_CYCLE_SHOWN)];
    for e in shown {
        let who = ctx.thread_label(e.tid);
        let what = ctx.object_label(e.object_id);
        let kind = m.objects.get(&e.object_id).and_then(|o| o.kind());
        if e.holder_tid != 0 {
            let holder = ctx.thread_label(e.holder_tid);
            if kind == Some(ObjectKind::Thread) {
                let _ = writeln!(out, "  {who} waits for {holder} to finish (joins {what})");
            } else {
                let _ = writeln!(out, "  {who} waits for {what}, held by {holder}");
            }
            continue;
        }
        let act = match kind {
            Some(ObjectKind::Cond) => "signal it",
            Some(ObjectKind::Semaphore) => "post it",
            Some(ObjectKind::Barrier) => "arrive at it",
            _ => "wake it",
        };
        let held: Vec<String> = d
            .cycle
            .iter()
            // A thread "holds" its own thread object: the join is on the joiner's line.
            .filter(|o| {
                o.holder_tid == e.tid
                    && m.objects.get(&o.object_id).and_then(|x| x.kind())
                        != Some(ObjectKind::Thread)
            })
            .map(|o| {
                format!(
                    "{} (which {} waits for)",
                    ctx.object_label(o.object_id),
                    ctx.thread_label(o.tid)
                )
            })
            .collect();
        if held.is_empty() {
            let _ = writeln!(out, "  {who} waits on {what}: no thread is left to {act}");
        } else {
            let _ = writeln!(
                out,
                "  {who} waits on {what} while holding {}: no thread is left to {act}",
                held.join(", ")
            );
        }
    }
    wait_chains(ctx, d, shown, "waiting threads", out);
}

/// The wait chain of each thread of a deadlock shown, and how many more there are.
pub(super) fn wait_chains(
    ctx: &mut Ctx<'_>,
    d: &Deadlock,
    shown: &[waitshim_format::DeadlockEdge],
    more: &str,
    out: &mut String,
) {
    for e in shown {
        let who = ctx.thread_label(e.tid);
        let _ = writeln!(out, "  wait chain of {who}:");
        chain(ctx, e.wait_chain, "    ", out);
    }
    if shown.len() < d.cycle.len() {
        let _ = writeln!(
            out,
            "  ... {} more {more} not shown (all are in the JSON report)",
            d.cycle.len() - shown.len()
        );
    }
}

/// Lock-order inversions, the way sanitizers report them: the cycle, then for each edge where
/// the second lock was taken while the first was held, with the chain.
pub(super) fn potential_deadlocks(ctx: &mut Ctx<'_>, out: &mut String) {
    let inv = std::mem::take(&mut ctx.inversions);
    let n = inv.cycles.len();
    if n > 0 {
        let _ = writeln!(
            out,
            "\nPOTENTIAL DEADLOCKS ({n}: lock-order {}, a deadlock if the threads interleave badly)",
            if n == 1 { "inversion" } else { "inversions" }
        );
    } else if inv.stopped.is_some() || inv.depth_limited {
        let _ = writeln!(out, "\nLOCK ORDER: no inversion found");
    }
    if let Some(why) = inv.stopped {
        let _ = writeln!(out, "  ({})", stopped_text(why));
    }
    if inv.depth_limited {
        let _ = writeln!(
            out,
            "  (cycles of more than {MAX_CYCLE_LEN} objects were not searched for)"
        );
    }
    for (i, p) in inv.cycles.iter().enumerate() {
        potential_deadlock(ctx, i + 1, p, out);
    }
    ctx.inversions = inv;
}

pub(super) fn potential_deadlock(
    ctx: &mut Ctx<'_>,
    rank: usize,
    p: &PotentialDeadlock,
    out: &mut String,
) {
    let m = ctx.model;
    let mut names: Vec<String> = p.cycle.iter().map(|&o| ctx.object_short(o)).collect();
    if let Some(first) = names.first().cloned() {
        names.push(first);
    }
    let mut head = format!(
        "\nPOTENTIAL DEADLOCK {rank}: lock-order inversion  {}",
        names.join(" → ")
    );
    if p.deadlocked {
        head.push_str("  (this one did deadlock: see DEADLOCKS)");
    }
    let _ = writeln!(out, "{head}");
    if p.deadlocked {
        return;
    }
    for &o in &p.cycle {
        let label = ctx.object_label(o);
        let _ = writeln!(out, "  {label}");
    }
    let mut tids: HashSet<u32> = HashSet::new();
    for (held, acquired) in p.edges() {
        let Some(edge) = m.lock_order.get(&(held, acquired)) else {
            continue;
        };
        let (a, h) = (ctx.object_short(acquired), ctx.object_short(held));
        tids.extend(edge.witnesses.iter().map(|w| w.tid));
        let Some(first) = edge.witnesses.first() else {
            continue;
        };
        let who = ctx.thread_label(first.tid);
        let _ = writeln!(out, "  {a} acquired while holding {h} by {who} at:");
        chain(ctx, first.chain_id, "    ", out);
        for w in edge.witnesses.iter().skip(1) {
            let who = ctx.thread_label(w.tid);
            let site = ctx
                .sym
                .site(m, w.chain_id)
                .map_or("(no call chain)".to_string(), |f| f.site());
            let _ = writeln!(out, "    also by {who} at {site}");
        }
        if edge.more_witnesses > 0 {
            let _ = writeln!(
                out,
                "    ... and {} more records of this edge not kept",
                edge.more_witnesses
            );
        }
    }
    if tids.len() == 1 {
        if let Some(&tid) = tids.iter().next() {
            let who = ctx.thread_label(tid);
            let _ = writeln!(
                out,
                "  (one thread, {who}, took these locks in both orders: two threads running its code can deadlock)"
            );
        }
    }
}
