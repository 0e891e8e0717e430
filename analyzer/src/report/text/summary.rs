//! The report's opening: the summary line and its warnings, lost parallelism, a run slowed on
//! purpose, progress points.

use super::*;

/// `WAITSHIM_DELAY`: said first, so that nobody takes a delayed run for a real one.
pub(super) fn slowed_on_purpose(ctx: &mut Ctx<'_>, out: &mut String) {
    let d = &ctx.model.delay;
    if !d.any() {
        return;
    }
    let (sections, added) = d.totals();
    let _ = writeln!(
        out,
        "SLOWED ON PURPOSE: WAITSHIM_DELAY lengthened {sections} critical sections by busy \
         waiting, {} added in all; this run's times are not the program's own",
        fmt_ns(added)
    );
    let rules = d.rules.clone();
    let objects: Vec<_> = d.objects.values().cloned().collect();
    for r in &rules {
        let _ = writeln!(
            out,
            "  rule {}: {} per section of the locks it selects",
            escaped(&r.site),
            fmt_ns(r.delay_ns)
        );
        for o in objects.iter().filter(|o| o.rule == r.rule) {
            let label = ctx.object_label(o.object_id);
            let _ = writeln!(
                out,
                "    {label}: {} sections lengthened, {} added",
                o.sections,
                fmt_ns(o.total_ns)
            );
        }
        if !objects.iter().any(|o| o.rule == r.rule) {
            out.push_str("    no lock it selects ended a section\n");
        }
    }
}

pub(super) fn summary(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    if let Some(r) = &m.run {
        let program = if r.cmdline.is_empty() {
            r.exe.clone()
        } else {
            r.cmdline.join(" ")
        };
        let _ = writeln!(out, "program:   {}", escaped(&program));
        if !r.cmdline.is_empty() && r.cmdline.first() != Some(&r.exe) {
            let _ = writeln!(out, "exe:       {}", escaped(&r.exe));
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
        Some(e) if e.reason == end_reason::EXEC => {
            let target = m
                .exec
                .as_ref()
                .map_or("another program".into(), |x| escaped(&x.path));
            let _ = writeln!(
                out,
                "ended:     exec of {target} (the new program writes a log of its own)"
            );
        }
        Some(e) if e.reason == end_reason::UNDERSCORE_EXIT => {
            let _ = writeln!(out, "ended:     _exit({})", e.exit_status);
        }
        Some(e) if e.reason == end_reason::SIGNAL => {
            let _ = writeln!(
                out,
                "ended:     killed by {} (the program had no handler for it)",
                crate::ending::signal_name(e.exit_status)
            );
        }
        Some(e) if e.reason == end_reason::CONFINED => {
            let _ = writeln!(
                out,
                "ended:     tracing stopped at {}, where the program confined itself with a \
                 seccomp filter (the shim's own system calls might have been refused or killed \
                 it); the program ran on, untraced",
                fmt_ns(e.ns.saturating_sub(m.run.as_ref().map_or(e.ns, |r| r.mono_ns)))
            );
        }
        // The shim sees the status only when the program calls exit itself, not when main returns.
        Some(e) if e.exit_status < 0 => {
            let _ = writeln!(out, "ended:     exit (status not recorded)");
        }
        Some(e) => {
            let _ = writeln!(out, "ended:     exit status {}", e.exit_status);
        }
        None => {
            let why = ctx
                .no_end
                .as_ref()
                .map_or("no exit record".to_string(), |n| n.ended_line());
            let _ = writeln!(out, "ended:     {why}");
        }
    }
    let mut threads = format!("threads:   {} seen", m.threads_seen());
    let summed = m.ended_sum.threads;
    if summed > 0 || m.tids_reused > 0 {
        let mut parts = Vec::new();
        if m.tids_reused > 0 {
            let example = m
                .threads_listed()
                .iter()
                .find(|t| t.nth >= 2)
                .map_or(String::new(), |t| format!(", as {}", t.tid_text()));
            parts.push(format!(
                "{} of them got the tid of a thread that had ended, as the kernel reuses tids: \
                 each is counted and listed as a thread of its own{example}",
                m.tids_reused
            ));
        }
        if summed > 0 {
            parts.push(format!(
                "{summed} ended threads are summed, not listed one by one: besides the main \
                 thread and those still running, the {MAX_ENDED_ROWS} ended threads that spent \
                 most time not running keep a row"
            ));
        }
        let _ = write!(threads, " ({})", parts.join("; "));
    }
    let _ = writeln!(out, "{threads}");
    let mut objects = format!(
        "objects:   {} tracked, {} contended",
        m.objects.len(),
        m.contended_objects()
    );
    if !m.quiet.is_empty() {
        let _ = write!(
            objects,
            "; {} more never contended (summed by creation site)",
            m.objects_quiet()
        );
    }
    if !m.churned.is_empty() {
        let _ = write!(
            objects,
            "; {} short-lived (summed by creation site)",
            m.objects_churned()
        );
    }
    let _ = writeln!(out, "{objects}");
    if let Some(line) = crate::report::bottlenecks::headline(ctx) {
        let _ = writeln!(out, "{line}");
    }
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
            // Barrier and join waits do not count towards the mark: say so when they are all
            // the run had.
            let waited = crate::findings::any_wait(m);
            let unseen = m.states.unattributed_futex_ns();
            let why = if waited {
                "no thread waited on a lock, condition variable or semaphore; barrier and join \
                 waits do not count towards it"
                    .to_string()
            } else if unseen > 0 {
                unattributed_futex_text(unseen)
            } else {
                "no thread ever waited".to_string()
            };
            let _ = writeln!(out, "highwater: {} ({why})", m.hwm());
        }
    }
    lost_parallelism(ctx, out);
    // Claims that ended after all: a wait-for cycle a deadline broke, or a time every thread
    // waited until one was woken by something the shim does not see.
    let (broken_hangs, broken_cycles) =
        m.deadlocks
            .iter()
            .filter(|d| m.broken(d).is_some())
            .fold((0, 0), |(h, c), d| {
                if crate::report::every_thread_waits(d) {
                    (h + 1, c)
                } else {
                    (h, c + 1)
                }
            });
    let mut after_all = Vec::new();
    if broken_cycles > 0 {
        after_all.push(format!(
            "{broken_cycles} more wait-for {} broke when a wait with a deadline gave up",
            if broken_cycles == 1 {
                "cycle"
            } else {
                "cycles"
            }
        ));
    }
    if broken_hangs > 0 {
        after_all.push(format!(
            "{broken_hangs} more {} every thread waited until one was woken from outside what \
             the shim sees",
            if broken_hangs == 1 { "time" } else { "times" }
        ));
    }
    let real = m.deadlocks.len() - broken_cycles - broken_hangs;
    if after_all.is_empty() {
        let _ = writeln!(out, "deadlocks: {real}");
    } else {
        let _ = writeln!(out, "deadlocks: {real} ({})", after_all.join("; "));
    }
    let inv = &ctx.inversions;
    let edges = m.lock_order.len();
    let mut line = format!(
        "lock order: {edges} {}, ",
        if edges == 1 { "edge" } else { "edges" }
    );
    match inv.cycles.len() {
        0 => line.push_str("no inversion"),
        n => {
            let _ = write!(
                line,
                "{n} potential {} (lock-order {})",
                if n == 1 { "deadlock" } else { "deadlocks" },
                if n == 1 { "inversion" } else { "inversions" }
            );
            match inv.deadlocked() {
                0 => {}
                1 if n == 1 => line.push_str(", which did deadlock"),
                d => {
                    let _ = write!(line, ", {d} of them did deadlock");
                }
            }
        }
    }
    if let Some(why) = inv.stopped {
        let _ = write!(line, "; {}", stopped_text(why));
    }
    if inv.depth_limited {
        let _ = write!(
            line,
            "; cycles of more than {MAX_CYCLE_LEN} objects not searched for"
        );
    }
    let _ = writeln!(out, "{line}");
    let p = &m.policy;
    if !p.versions.is_empty() && !p.has_user_policy() {
        let _ = writeln!(
            out,
            "policy: built-in (waiter chains on every contended wait)"
        );
    }
    if let Some(last) = &p.last_snapshot {
        let n = p.snapshots_total;
        let _ = writeln!(
            out,
            "data requests: {n} {} (last at {})",
            if n == 1 { "snapshot" } else { "snapshots" },
            fmt_ns(m.rel(last.ns))
        );
    }
}

/// The summary's line on lost parallelism (seed 000), when the run was sampled.
pub(super) fn lost_parallelism(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let l = &m.states.lost;
    if !m.states.any() || l.capacity_ns == 0 {
        return;
    }
    let ncpus = m.run.as_ref().map_or(1, |r| r.ncpus.max(1));
    let mut line = format!(
        "lost parallelism: {} of {} CPU time ({ncpus} CPUs; the program used {}) went unused \
         while threads waited",
        fmt_ns(l.lost_ns),
        fmt_ns(l.capacity_ns),
        percent(l.used_ns as f64 / l.capacity_ns as f64),
    );
    let ranked: Vec<(crate::states::Waited, u64)> = l
        .ranked()
        .into_iter()
        .take(2)
        .map(|(k, n)| (k.clone(), n))
        .collect();
    for (i, (what, n)) in ranked.iter().enumerate() {
        let label = match what {
            crate::states::Waited::Object(id) => ctx.object_label(*id),
            crate::states::Waited::Blocked(sys, w) => blocked_label(ctx, *sys, w),
            crate::states::Waited::Cpu => "ready threads waiting for a CPU".into(),
            crate::states::Waited::Other => "other waits".into(),
        };
        let idle = if crate::report::bottlenecks::idle_wait(ctx, what) {
            " (idle: off the critical path)"
        } else {
            ""
        };
        let _ = write!(
            line,
            "{} {} on {label}{idle}",
            if i == 0 { ":" } else { ";" },
            percent(*n as f64 / l.lost_ns.max(1) as f64)
        );
    }
    let _ = writeln!(
        line,
        " (the kernel's figures per interval; the shares estimated by the state each thread was \
         seen in at the sampler's looks, every {}{}{})",
        fmt_ns(m.states.interval_ns),
        sampled_span(m),
        process_stops(m)
    );
    out.push_str(&line);
}

/// `; the process was stopped about 1.09 s in all (...)`, when the samples show it stopped:
/// time none of these figures counts as waiting.
pub(super) fn process_stops(m: &crate::model::Model) -> String {
    let st = &m.states.stops;
    if st.count == 0 {
        return String::new();
    }
    let when = match st.spans.first() {
        Some(&(from, _)) if st.count == 1 => format!(", from {}", fmt_ns(m.rel(from))),
        Some(&(from, _)) => format!(", the first from {}", fmt_ns(m.rel(from))),
        None => String::new(),
    };
    format!(
        "; the process was stopped about {} in all ({} {}{when}: SIGSTOP or a terminal's job \
         control, a debugger, a cgroup freezer; each estimated from the sampler's own pause, to \
         within 100 ms), which is not counted as waiting",
        fmt_ns(st.total_ns),
        st.count,
        if st.count == 1 { "stop" } else { "stops" }
    )
}

/// `, over the first 0.50 s of 12.3 s only: ...` when the sampler's records stop well before
/// the run ends (its figures then hold over that span alone); empty when they cover the run.
pub(super) fn sampled_span(m: &crate::model::Model) -> String {
    let st = &m.states;
    if st.sampled_to_end {
        return String::new();
    }
    let (duration, lower_bound) = m.duration_ns();
    let of = format!(
        "{}{}",
        if lower_bound { "at least " } else { "" },
        fmt_ns(duration)
    );
    let (from, until) = (m.rel(st.sampled_from_ns), m.rel(st.sampled_until_ns));
    // The first look comes within an interval or two of the start.
    let span = if from <= crate::states::SAMPLED_TO_END_SLACK_NS {
        format!("the first {}", fmt_ns(until))
    } else {
        format!("{} to {}", fmt_ns(from), fmt_ns(until))
    };
    format!(
        ", over {span} of the run's {of} only: the sampler's records stop there (it could no \
         longer read /proc: a sandbox, a chroot, descriptors the program closed, a change of \
         privileges), so nothing after is in these figures"
    )
}

pub(super) fn stopped_text(why: Stopped) -> String {
    match why {
        Stopped::CycleLimit => {
            format!("search stopped after {MAX_CYCLES} cycles, there may be more")
        }
        Stopped::WorkLimit => {
            "search stopped at its work limit, there may be more cycles".to_string()
        }
    }
}

/// PROGRESS: the points the program marked through the C API, with their throughput and their
/// transactions' latency.
pub(super) fn progress(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let rows = m.progress.rows();
    if rows.is_empty() {
        return;
    }
    out.push_str("\nPROGRESS (points the program marked: WAITSHIM_PROGRESS, WAITSHIM_BEGIN/END)\n");
    for r in rows {
        let name = escaped(&r.name);
        let rate = match r.per_second {
            Some(s) => format!(
                ", {s:.1}/s from {} to {} after the start",
                fmt_ns(m.rel(r.first_ns)),
                fmt_ns(m.rel(r.last_ns))
            ),
            None => String::new(),
        };
        let _ = writeln!(out, "  \"{name}\": {} visits{rate}", r.visits);
        if r.begins > 0 || r.ends > 0 {
            let latency = match r.mean_latency_ns {
                Some(ns) if r.latency_exact => format!("mean latency {} (exact)", fmt_ns(ns)),
                Some(ns) => format!(
                    "mean latency ~{} (an estimate: the {} still open are counted up to the \
                     end)",
                    fmt_ns(ns),
                    r.in_flight
                ),
                None => "no latency: no transaction ended".into(),
            };
            let _ = writeln!(out, "      {} begun, {} ended; {latency}", r.begins, r.ends);
        }
    }
}
