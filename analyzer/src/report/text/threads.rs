//! The threads: their sampled states, the table of threads, their `sched_yield` calls, and the
//! shim's own cost.

use super::*;

/// How each thread spent its life, from the shim's sampler: running, ready for a CPU,
/// waiting on tracked objects, blocked elsewhere (and in what); and how idle the CPUs were.
pub(super) fn thread_states(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let st = &m.states;
    if !st.any() {
        return;
    }
    let rows = crate::states::rows(m);
    let interval = fmt_ns(st.interval_ns);
    let process = m
        .run
        .as_ref()
        .map_or(String::new(), |r| format!("process {}, ", r.pid));
    let _ = writeln!(
        out,
        "\nTHREAD STATES ({process}{} threads, sampled every {interval} by the shim's thread{}; \
         running and runnable (ready, no CPU) are the kernel's exact figures, the waits are \
         sampled: each to within {interval} at either end; slices: timeslices run; switches: \
         voluntary/involuntary context switches; longest slice: estimated, the largest mean \
         timeslice of an interval; at end: ended, or the state at the sampler's last look, \
         running (on a CPU or ready for one), tracked (in a tracked wait), blocked (elsewhere) \
         or stopped{}; those that spent most time not running first)",
        rows.len() as u64 + m.ended_sum.sampled,
        sampled_span(m),
        process_stops(m)
    );
    let _ = writeln!(
        out,
        "  {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>11} {:>9} {:<7}  thread: blocked most in",
        "life",
        "running",
        "runnable",
        "tracked",
        "other",
        "slices",
        "switches",
        "longest",
        "at end"
    );
    let cell = |ns: u64| -> String {
        if ns == 0 {
            "-".into()
        } else {
            fmt_ns(ns)
        }
    };
    let shown = ctx.opts.top.max(1);
    for r in rows.iter().take(shown) {
        let name = r.name.map_or(String::new(), |n| format!(" {}", quoted(n)));
        let most = r.s.blocked.first().map_or(String::new(), |b| {
            format!(
                ": {} {}",
                blocked_label(ctx, b.syscall, &b.what),
                fmt_ns(b.ns)
            )
        });
        let switches = if r.s.switches_known {
            format!("{}/{}", r.s.voluntary, r.s.involuntary)
        } else {
            "-".into()
        };
        let longest = if r.s.longest_slice_ns > 0 {
            format!("~{}", fmt_ns(r.s.longest_slice_ns))
        } else {
            "-".into()
        };
        let at_end = r.s.end_state.as_ref().map_or("-", |e| match e {
            crate::states::EndState::Tracked { .. } => "tracked",
            e => e.name(),
        });
        let _ = writeln!(
            out,
            "  {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>11} {:>9} {:<7}  {}{name}{most}",
            fmt_ns(r.life_ns),
            cell(r.s.on_cpu_ns),
            cell(r.s.run_delay_ns),
            cell(r.s.tracked_ns),
            cell(r.s.other_ns()),
            r.s.timeslices,
            switches,
            longest,
            at_end,
            r.tid_text,
        );
    }
    if rows.len() > shown {
        let _ = writeln!(out, "  ... {} more threads (--top N)", rows.len() - shown);
    }
    let sum = &m.ended_sum;
    if sum.sampled > 0 {
        let _ = writeln!(
            out,
            "  + {} ended threads summed, not listed (each spent no more time not running than \
             the {MAX_ENDED_ROWS} ended threads kept with a row): running {}, runnable {}, \
             tracked {}, other {}, {} slices",
            sum.sampled,
            fmt_ns(sum.on_cpu_ns),
            fmt_ns(sum.run_delay_ns),
            fmt_ns(sum.tracked_ns),
            fmt_ns(sum.other_ns),
            sum.timeslices
        );
    }
    if st.unsampled > 0 {
        let _ = writeln!(
            out,
            "  {} threads at most were left out of one look (past those the sampler keeps \
             descriptors for, and their files could not be opened then, or, in logs of older \
             shims, not their turn in rotation): their states are known to within the time \
             between two looks that read them",
            st.unsampled,
        );
    }
    resources(ctx, out);
    if st.cpus > 0 && st.cpu_sampled_ns > 0 {
        let all = st.cpu_sampled_ns.saturating_mul(st.cpus as u64);
        let _ = writeln!(
            out,
            "  CPUs: {}, idle {} of the {} sampled ({} in all over {} CPUs; waiting for I/O {}); \
             the machine's idle time, not only this program's",
            st.cpus,
            percent(st.idle_ns as f64 / all.max(1) as f64),
            fmt_ns(st.cpu_sampled_ns),
            fmt_ns(st.idle_ns),
            st.cpus,
            fmt_ns(st.iowait_ns),
        );
        if st.per_cpu.len() > 1 {
            const SHOWN: usize = 64;
            let each: Vec<String> = st
                .per_cpu
                .iter()
                .take(SHOWN)
                .enumerate()
                .map(|(i, &(idle, _))| {
                    format!(
                        "cpu{i} {}",
                        percent(idle as f64 / st.cpu_sampled_ns.max(1) as f64)
                    )
                })
                .collect();
            let more = if st.per_cpu.len() > SHOWN {
                format!(
                    ", ... {} more (JSON cpus.per_cpu)",
                    st.per_cpu.len() - SHOWN
                )
            } else {
                String::new()
            };
            let _ = writeln!(out, "  idle per CPU: {}{more}", each.join(", "));
        }
    }
}

/// The threads that called `sched_yield`, most calls first, on one line.
pub(super) fn thread_yields(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let mut by: Vec<(u32, u64)> = m.yields.iter().map(|(&t, &n)| (t, n)).collect();
    if by.is_empty() {
        return;
    }
    by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let shown = shown_rows(ctx);
    let list: Vec<String> = by
        .iter()
        .take(shown)
        .map(|&(tid, n)| {
            let name = m
                .threads
                .get(&tid)
                .and_then(|t| t.name.as_deref())
                .map_or_else(String::new, |n| format!(" {}", quoted(n)));
            format!("{tid}{name} {n}")
        })
        .collect();
    let more = if by.len() > shown {
        format!("; {} more threads", by.len() - shown)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  sched_yield calls (counted by the shim, exact): {}{more}",
        list.join(", ")
    );
    // By call site, all threads together.
    let mut sites: BTreeMap<u64, u64> = BTreeMap::new();
    for (&(_, ret), &n) in &m.yield_sites {
        *sites.entry(ret).or_default() += n;
    }
    let mut sites: Vec<(u64, u64)> = sites.into_iter().filter(|s| s.1 > 0).collect();
    if sites.is_empty() {
        return;
    }
    sites.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let list: Vec<String> = sites
        .iter()
        .take(shown)
        .map(|&(ret, n)| {
            let at = if ret == 0 {
                format!("other sites (past the first {YIELD_SITES} of a thread)")
            } else {
                ctx.sym.frame(ret, true).site()
            };
            format!("{at} {n}")
        })
        .collect();
    let more = if sites.len() > shown {
        format!("; {} more sites", sites.len() - shown)
    } else {
        String::new()
    };
    let _ = writeln!(out, "    from: {}{more}", list.join(", "));
}

pub(super) fn threads(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let listed = m.threads_listed();
    if listed.is_empty() && m.ended_sum.threads == 0 {
        return;
    }
    let _ = writeln!(out, "\nTHREADS ({})", m.threads_seen());
    let shown = shown_rows(ctx);
    // `4001 (2nd)`: a later thread with a reused tid.
    let tids: Vec<String> = listed.iter().take(shown).map(|t| t.tid_text()).collect();
    let width = tids.iter().map(String::len).max().unwrap_or(0).max(8);
    let _ = writeln!(
        out,
        "  {:>width$}  {:<16} {:>10} {:>10}  {:<32} created at",
        "tid", "name", "started", "lifetime", "start routine"
    );
    let mut ended_before = false;
    for (t, tid) in listed.iter().zip(&tids) {
        let name = t.name.as_deref().map_or_else(String::new, escaped);
        let started = t.start_ns.map_or("-".into(), |s| fmt_ns(m.rel(s)));
        let lifetime = match (t.start_ns, t.exit_ns, t.ended_before_ns) {
            (Some(s), Some(e), _) => fmt_ns(e.saturating_sub(s)),
            (Some(s), None, Some(e)) => {
                ended_before = true;
                format!("≤{}", fmt_ns(e.saturating_sub(s)))
            }
            (Some(_), None, None) => "running".into(),
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
            "  {tid:>width$}  {name:<16} {started:>10} {lifetime:>10}  {routine:<32} {created}",
        );
    }
    if ended_before {
        let _ = writeln!(
            out,
            "  ≤: no exit record; it ended before the thread that got its tid started"
        );
    }
    thread_yields(ctx, out);
    if listed.len() > shown {
        let _ = writeln!(
            out,
            "  ... {} more threads (all are in the JSON report)",
            listed.len() - shown
        );
    }
    let sum = &m.ended_sum;
    if sum.threads > 0 {
        let _ = writeln!(
            out,
            "  + {} ended threads summed, not listed one by one (more than {ENDED_IN_TABLE} \
             ended, or later threads got their tids: of those, the {MAX_ENDED_ROWS} that spent \
             most time not running keep a row): {} of life in all",
            sum.threads,
            fmt_ns(sum.life_ns)
        );
    }
}

/// What the profiler's own thread took from the machine: its CPU time by kind of work, so that
/// the sampler's cost is a figure of every run, not a claim.
pub(super) fn shim_cost(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let Some(c) = &m.shim_cost else {
        return;
    };
    let span = m.rel(c.ns);
    let share = if span > 0 {
        let p = c.thread_cpu_ns as f64 / span as f64 * 100.0;
        if p < 1.0 {
            format!(" ({p:.2}% of one CPU)")
        } else {
            format!(" ({} of one CPU)", percent(p / 100.0))
        }
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "\nWAITSHIM'S OWN THREAD: {} of CPU in the first {} of the run{share}; the program's \
         threads' time in the shim's wrappers is not in it (scripts/bench.sh measures that)",
        fmt_ns(c.thread_cpu_ns),
        fmt_ns(span),
    );
    for t in &c.tasks {
        let each = t.cpu_ns.checked_div(t.runs).unwrap_or(0);
        let _ = writeln!(
            out,
            "  {:<14} {:>10} in {} ({} each)",
            waitshim_format::shim_task::name(t.task),
            fmt_ns(t.cpu_ns),
            count(t.runs, "run", "runs"),
            fmt_ns(each),
        );
    }
}
