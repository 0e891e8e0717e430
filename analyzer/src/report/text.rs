//! The text report, worst first: summary (with warnings on top), the policy in force, deadlocks,
//! lock contention records, what the policy rules collected (selected waits, holder stacks,
//! waiter chains), per-object table, short-lived objects by creation site, where threads wait,
//! threads.

use std::collections::{BTreeMap, HashSet};

use std::fmt::Write;
use waitshim_format::contract::holder_stack;

use waitshim_format::{
    counter, end_reason, Counters, Deadlock, DeadlockBroken, ObjectKind, YIELD_SITES,
};

use super::record_words::{self, WaitedFor};
use super::{fmt_ns, Ctx, SortKey};
use crate::lockorder::{PotentialDeadlock, Stopped, MAX_CYCLES, MAX_CYCLE_LEN};
use crate::model::{
    churn_kind_text, errno_name, kind_counter_json, reason_text, ContentionRecord, Object,
    ENDED_IN_TABLE, MAX_ENDED_ROWS,
};
use crate::plain::{escaped, quoted};
use crate::symbolize::Frame;

/// Frames of a chain shown in the text report; the JSON report has them all.
const MAX_FRAMES_SHOWN: usize = 16;
/// Distinct waiter chains shown per record.
const MAX_WAITER_CHAINS: usize = 8;
/// Wait sites shown per object.
const MAX_WAIT_SITES: usize = 10;
/// Policy versions shown (the latest), and rules shown per version.
const MAX_VERSIONS_SHOWN: usize = 20;
const MAX_RULES_SHOWN: usize = 50;
/// Objects shown in the section of what the policy collected (the JSON report has them all).
const MAX_COLLECTED_OBJECTS: usize = 20;
/// Distinct (holder, stack) shown per object.
const MAX_HOLDER_STACKS: usize = 8;
/// Waiter-chain records shown per object, and waiting threads shown per record.
const MAX_WAITER_SETS: usize = 3;
const MAX_WAITERS_SHOWN: usize = 16;
/// Rows of each per-object table, threads, objects in the wait-site section, deadlocks and
/// threads of a deadlock's cycle, and statistics of undescribed rules shown: the busiest first
/// where there is an order. The JSON report has them all; a text of a million rows is read by
/// nobody, and would cost memory in proportion.
const MAX_ROWS_SHOWN: usize = 1000;
const MAX_WAIT_SITE_OBJECTS: usize = 100;
const MAX_DEADLOCKS_SHOWN: usize = 100;
const MAX_CYCLE_SHOWN: usize = 64;
const MAX_ORPHAN_RULES_SHOWN: usize = 50;
/// Records shown per commonality group (the highest first).
const MAX_GROUP_RECORDS_SHOWN: usize = 10;
/// Rows of a section: `--top`, within what any section shows at most.
fn shown_rows(ctx: &Ctx<'_>) -> usize {
    ctx.opts.top.clamp(1, MAX_ROWS_SHOWN)
}

/// How the first frame of the program's own code is marked in a holder's stack.
const USER_MARK: &str = "   <- first frame of the program";

/// Renders the report of one log.
pub fn render(ctx: &mut Ctx<'_>) -> String {
    // The body is rendered first: symbolizing it finds the missing or rebuilt binaries that the
    // warnings at the top must mention.
    let mut body = String::new();
    // Objects that were all short-lived are in the churn sums only: the shim did see them.
    if ctx.model.objects.is_empty() && ctx.model.churned.is_empty() && ctx.model.quiet.is_empty() {
        // The shim wrote the log, so the program is dynamically linked: only its threads say
        // why nothing was seen.
        let seen = ctx.model.threads_seen();
        if seen <= 1 {
            body.push_str(
                "\nNo sync object was seen in this run: the program ran on one thread and made \
                 no pthread lock, condition variable, semaphore or barrier call, so no thread \
                 could wait for another.\n",
            );
        } else {
            let _ = writeln!(
                body,
                "\nNo sync object was seen in this run, though {seen} threads ran: they made no \
                 pthread lock calls and never slept in syscall(SYS_futex) through libc, so they \
                 synchronised by other means the shim's wrappers do not see (Go's runtime, \
                 futexes called by inline system calls, spinning)."
            );
        }
        if ctx.model.states.any() {
            body.push_str(
                "The sampler looked at the threads from outside: THREAD STATES below says what \
                 they waited in, such locks' futexes among them (\"untracked futex\").\n",
            );
        }
        progress(ctx, &mut body);
        thread_states(ctx, &mut body);
    } else {
        super::bottlenecks::render(ctx, &mut body);
        progress(ctx, &mut body);
        waiting_went(ctx, &mut body);
        deadlocks(ctx, &mut body);
        still_waiting(ctx, &mut body);
        thread_states(ctx, &mut body);
        cross_process(ctx, &mut body);
        potential_deadlocks(ctx, &mut body);
        records(ctx, &mut body);
        collected(ctx, &mut body);
        objects(ctx, &mut body);
        short_lived(ctx, &mut body);
        quiet_objects(ctx, &mut body);
        wait_sites(ctx, &mut body);
        woken_by(ctx, &mut body);
    }
    threads(ctx, &mut body);
    shim_cost(ctx, &mut body);
    let mut policy = String::new();
    policy_section(ctx, &mut policy);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "waitshim report: {}",
        escaped(&ctx.summary.path.display().to_string())
    );
    slowed_on_purpose(ctx, &mut out);
    for w in ctx.warnings() {
        let _ = writeln!(out, "WARNING: {}", w.message);
    }
    for (_, advice) in ctx.sym.debug_advice() {
        let _ = writeln!(out, "ADVICE: {advice}");
    }
    summary(ctx, &mut out);
    out.push_str(&policy);
    out.push_str(&body);
    out
}

/// `WAITSHIM_DELAY`: said first, so that nobody takes a delayed run for a real one.
fn slowed_on_purpose(ctx: &mut Ctx<'_>, out: &mut String) {
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

fn summary(ctx: &mut Ctx<'_>, out: &mut String) {
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
    if let Some(line) = super::bottlenecks::headline(ctx) {
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
fn lost_parallelism(ctx: &mut Ctx<'_>, out: &mut String) {
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
        let idle = if super::bottlenecks::idle_wait(ctx, what) {
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
fn process_stops(m: &crate::model::Model) -> String {
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
fn sampled_span(m: &crate::model::Model) -> String {
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

fn stopped_text(why: Stopped) -> String {
    match why {
        Stopped::CycleLimit => {
            format!("search stopped after {MAX_CYCLES} cycles, there may be more")
        }
        Stopped::WorkLimit => {
            "search stopped at its work limit, there may be more cycles".to_string()
        }
    }
}

fn chain(ctx: &mut Ctx<'_>, chain_id: u32, indent: &str, out: &mut String) {
    chain_with(ctx, chain_id, indent, false, out);
}

/// A chain, one frame a line; with `mark_user`, the first frame of the program's own code is
/// marked (where the program's author made the call).
fn chain_with(ctx: &mut Ctx<'_>, chain_id: u32, indent: &str, mark_user: bool, out: &mut String) {
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
    let user = if mark_user {
        frames.iter().position(Frame::is_user)
    } else {
        None
    };
    for (i, f) in frames.iter().take(shown).enumerate() {
        let mark = if user == Some(i) { USER_MARK } else { "" };
        let _ = writeln!(out, "{indent}#{i} {}{mark}", f.describe());
    }
    if frames.len() > shown {
        let _ = writeln!(
            out,
            "{indent}... {} outer frames not shown",
            frames.len() - shown
        );
    }
}

/// A chain scanned from a blocked thread's stack, one frame a line: a frame whose call leads
/// elsewhere than the frame above it is marked, and what the mark means said once.
fn scanned_chain(ctx: &mut Ctx<'_>, chain_id: u32, indent: &str, out: &mut String) {
    let frames = ctx.sym.scanned_chain(ctx.model, chain_id);
    if frames.is_empty() {
        chain(ctx, chain_id, indent, out);
        return;
    }
    let shown = frames
        .iter()
        .enumerate()
        .filter(|(_, (f, _))| !f.inlined)
        .nth(MAX_FRAMES_SHOWN - 1)
        .map_or(frames.len(), |(i, _)| i + 1);
    let mut marked = false;
    for (i, (f, doubtful)) in frames.iter().take(shown).enumerate() {
        let mark = if *doubtful { "? " } else { "" };
        marked |= doubtful;
        let _ = writeln!(out, "{indent}#{i} {mark}{}", f.describe());
    }
    if frames.len() > shown {
        let _ = writeln!(
            out,
            "{indent}... {} outer frames not shown",
            frames.len() - shown
        );
    }
    if marked {
        let _ = writeln!(
            out,
            "{indent}(? : the scan found this return address, but the call before it leads to \
             another function than the frame above: most likely left on the stack by an \
             earlier call, or the frame above was reached through a tail call)"
        );
    }
}

fn deadlocks(ctx: &mut Ctx<'_>, out: &mut String) {
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
fn ended_after_all(ctx: &mut Ctx<'_>, out: &mut String, hangs: bool) {
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

/// HotSpot's per-thread park primitives: a Java monitor (`synchronized`), `Object.wait` and the
/// java.util.concurrent locks park each thread on its own condition variable and mutex, made
/// in these constructors.
const JVM_PARK_CONSTRUCTORS: &[&str] = &["os::PlatformEvent::", "os::PlatformParker::"];

/// Says, before a JVM's rows, that its park events are one object per thread, not per Java
/// lock: one contended `synchronized` block showed as 4 unrelated condition variables.
fn jvm_park_note(ctx: &mut Ctx<'_>, costs: &[crate::findings::Cost], out: &mut String) {
    let (mut n, mut ns, mut jvm) = (0usize, 0u64, false);
    for c in costs {
        let Some(site) = ctx.creation_site(c.object_id) else {
            continue;
        };
        let module = site.module.as_deref().map(crate::symbolize::basename);
        jvm |= module.is_some_and(|m| m.starts_with("libjvm"));
        let park = site
            .function
            .as_deref()
            .is_some_and(|f| JVM_PARK_CONSTRUCTORS.iter().any(|p| f.starts_with(p)));
        if park {
            n += 1;
            ns = ns.saturating_add(c.wait_ns);
        }
    }
    if n > 0 {
        let _ = writeln!(
            out,
            "  (a JVM: the {n} objects created in os::PlatformEvent or os::PlatformParker \
             (libjvm.so), {} of waiting in all, are each one thread's park event, not a Java \
             lock: Java monitors (synchronized), Object.wait and java.util.concurrent locks park \
             a thread on its own, so one contended Java lock shows as one such row per thread \
             that waited for it; which Java lock it was is not seen from pthread calls (JFR's \
             jdk.JavaMonitorEnter events, or async-profiler in lock mode, name it))",
            fmt_ns(ns)
        );
    } else if jvm {
        let _ = writeln!(
            out,
            "  (a JVM: objects created in libjvm.so are the JVM's own locks and its threads' \
             per-thread park events; a contended Java lock shows as one park event per waiting \
             thread, not as one object; without libjvm's symbols the two cannot be told apart)"
        );
    }
}

/// Waiting the shim's wrappers did not see, but the sampler did: threads blocked on futex words
/// of no object of the log, for `ns` in all.
fn unattributed_futex_text(ns: u64) -> String {
    format!(
        "no wait through the calls the shim interposes; yet the sampler saw threads blocked {} \
         in all on futex words of no tracked object: locks that bypass libc (Go's runtime, \
         futexes called by inline system calls), which the shim cannot attribute to an object; \
         THREAD STATES shows them by futex word",
        fmt_ns(ns)
    )
}

/// The first finding: which objects the threads' waiting went to, most first, with the share of
/// the threads' time it took and the call site that waited most for each.
fn waiting_went(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let costs = ctx.costs();
    if costs.is_empty() {
        let unseen = m.states.unattributed_futex_ns();
        let why = if unseen > 0 {
            unattributed_futex_text(unseen)
        } else {
            "no thread ever waited for another".to_string()
        };
        let _ = writeln!(out, "\nWHERE THE WAITING WENT: nowhere ({why})");
        return;
    }
    use crate::findings::Group;
    let sum = |g: Group| {
        costs
            .iter()
            .filter(|c| c.group == g)
            .map(|c| c.wait_ns)
            .fold(0, u64::saturating_add)
    };
    let (locks, events, joins) = (sum(Group::Lock), sum(Group::Event), sum(Group::Join));
    let total = locks.saturating_add(events);
    let lives = crate::findings::thread_time(m);
    let share = if lives > 0 {
        format!(
            ", {} of their {} of life",
            percent(total as f64 / lives as f64),
            fmt_ns(lives)
        )
    } else {
        String::new()
    };
    let mut joined = String::new();
    if events > 0 {
        let _ = write!(
            joined,
            "; {} of it for locks, {} for another thread to act",
            fmt_ns(locks),
            fmt_ns(events)
        );
    }
    if joins > 0 {
        let _ = write!(joined, "; {} more in joins", fmt_ns(joins));
    }
    let top = ctx.opts.top.max(1);
    let _ = writeln!(
        out,
        "\nWHERE THE WAITING WENT (threads waited {} in all{share}{joined}; most first in each group)",
        fmt_ns(total)
    );
    let _ = writeln!(
        out,
        "  {:>10} {:>7} {:>9} {:>10} {:>5}  object, and where it was waited for most",
        "waited", "share", "waits", "longest", "most"
    );
    jvm_park_note(ctx, &costs, out);
    let shown = crate::findings::shown(&costs, top);
    let mut cut = false;
    for (i, c) in costs.iter().enumerate() {
        let first = i == 0 || costs[i - 1].group != c.group;
        if first {
            let heading = match c.group {
                Group::Lock => "locks: waiting for what another thread holds:",
                Group::Event => {
                    "waiting for another thread to act (condition variables, semaphores, \
                     barriers; an idle thread waiting for work waits here too):"
                }
                Group::Join => "joins: waiting for another thread to finish (not contention):",
            };
            if c.group != Group::Lock || costs.iter().any(|c| c.group != Group::Lock) {
                let _ = writeln!(out, "  {heading}");
            }
        }
        if shown[i] {
            waiting_went_row(ctx, c, out);
        }
        let last = costs.get(i + 1).is_none_or(|n| n.group != c.group);
        if last {
            // What this group's rows left out: each group's lines add up to its share.
            let (n, ns) = costs[..=i]
                .iter()
                .zip(&shown[..=i])
                .rev()
                .take_while(|(o, _)| o.group == c.group)
                .filter(|(_, &s)| !s)
                .fold((0usize, 0u64), |(n, ns), (o, _)| {
                    (n + 1, ns.saturating_add(o.wait_ns))
                });
            if n > 0 {
                cut = true;
                let _ = writeln!(
                    out,
                    "  ... {n} more object{} in this group, {} in all",
                    if n == 1 { "" } else { "s" },
                    fmt_ns(ns)
                );
            }
        }
    }
    if cut {
        let _ = writeln!(
            out,
            "  (--top N shows more rows; the JSON report has every object)"
        );
    }
}

/// One object of WHERE THE WAITING WENT: its figures, then where it was waited for most, the
/// rest of its sites summed, and the waits no site of the log accounts for, so that the site
/// lines add up to the object's.
fn waiting_went_row(ctx: &mut Ctx<'_>, c: &crate::findings::Cost, out: &mut String) {
    let m = ctx.model;
    let label = ctx.object_label(c.object_id);
    let mut still = if c.open_ns > 0 {
        format!(" (still waiting: {})", fmt_ns(c.open_ns))
    } else {
        String::new()
    };
    if let Some(&stopped) = m.states.stops.in_waits.get(&c.object_id) {
        let _ = write!(
            still,
            " (about {} of it while the process was stopped)",
            fmt_ns(stopped.min(c.wait_ns))
        );
    }
    let _ = writeln!(
        out,
        "  {:>10} {:>7} {:>9} {:>10} {:>5}  {label}{still}",
        fmt_ns(c.wait_ns),
        percent(c.share),
        c.waits,
        fmt_ns(c.max_wait_ns),
        c.max_waiters
    );
    let waits = |n: u64| format!("{n} wait{}", if n == 1 { "" } else { "s" });
    if let Some(t) = &c.top_site {
        let site = ctx
            .sym
            .site(m, t.chain_id)
            .map_or_else(|| "a site without a call chain".to_string(), |f| f.site());
        let open = if t.open_waits > 0 {
            format!(
                " ({} still in progress: {})",
                t.open_waits,
                fmt_ns(t.open_ns)
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {:>46}  at {site}: {}, {}{open}",
            "",
            waits(t.waits),
            fmt_ns(t.wait_ns)
        );
    }
    let (n, w, ns) = c.other_sites;
    if n > 0 {
        let _ = writeln!(
            out,
            "  {:>46}  at {n} other site{}: {}, {}",
            "",
            if n == 1 { "" } else { "s" },
            waits(w),
            fmt_ns(ns)
        );
    }
    let (w, ns) = c.unsited();
    if c.top_site.is_some() && (w > 0 || ns > 0) {
        let _ = writeln!(
            out,
            "  {:>46}  at sites the log does not give: {}, {}",
            "",
            waits(w),
            fmt_ns(ns)
        );
    }
    if let Some(h) = ctx.histogram(c.object_id) {
        let _ = writeln!(out, "  {:>46}  {}", "", wait_times(h));
    }
}

/// An object's wait times as its per-wait events give them: how long half, 90 % and 99 % of the
/// waits took at most, as the bounds of their log-scale buckets (docs/report.md).
fn wait_times(h: &crate::histogram::Histogram) -> String {
    let at = |share| fmt_ns(h.at_most(share).unwrap_or(0));
    format!(
        "wait times: p50 <= {}, p90 <= {}, p99 <= {} ({} event{}, bucket bounds)",
        at(0.5),
        at(0.9),
        at(0.99),
        h.waits,
        if h.waits == 1 { "" } else { "s" },
    )
}

/// A share as a percentage, with a digit after the point below 10 %.
fn percent(f: f64) -> String {
    let p = f * 100.0;
    if p >= 10.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

/// What a thread blocked outside the shim's calls waited on: `read on pipe:[123]`; a futex word
/// that lies inside an object of the log is that object (`futex on mutex#3 @0x... created at
/// x.c:12, outside the shim's calls`), with the word's offset in it when not its first.
pub(super) fn blocked_label(ctx: &mut Ctx<'_>, syscall: i32, what: &str) -> String {
    if let Some((id, offset)) = ctx.model.states.futex_object(syscall, what) {
        let word = if offset == 0 {
            String::new()
        } else {
            format!("word +{offset} of ")
        };
        return format!(
            "futex on {word}{}, outside the shim's calls",
            ctx.object_label(id).replace("  ", " ")
        );
    }
    crate::states::blocked_text(&crate::states::BlockedIn {
        syscall,
        what: what.to_string(),
        ns: 0,
    })
}

/// The waits outside tracked objects by resource, over all threads, most waited first.
fn resources(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let st = &m.states;
    let rows = crate::states::resource_rows(st);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  Waited for outside tracked objects, by resource (sampled: a wait is a span seen blocked \
         in one call on one thing, so one that ended and began again between two looks counts \
         once):"
    );
    let _ = writeln!(
        out,
        "  {:>12} {:>12} {:>8} {:>8}  resource",
        "total", "longest", "waits", "threads"
    );
    let shown = ctx.opts.top.max(1);
    for r in rows.iter().take(shown) {
        let what = if r.syscall == -2 {
            format!(
                "other resources (past the {} kept)",
                crate::states::MAX_RESOURCES
            )
        } else {
            blocked_label(ctx, r.syscall, r.what)
        };
        let _ = writeln!(
            out,
            "  {:>12} {:>12} {:>8} {:>8}  {what}",
            fmt_ns(r.w.ns),
            fmt_ns(r.w.max_ns),
            r.w.waits,
            r.threads
        );
        // Where the threads were in their code: the chain most waits had (scanned from the
        // blocked thread's stack: its program counter, then return addresses found above its
        // stack pointer).
        if let Some(&(chain_id, n)) = r.w.chains.first() {
            let all: u64 = r.w.chains.iter().map(|c| c.1).sum::<u64>() + r.w.other_chains;
            let others = r.w.chains.len() - 1;
            let more = match (others, r.w.other_chains) {
                (o, more) if more > 0 => format!("; more than {o} other chains"),
                (0, _) => String::new(),
                (1, _) => "; 1 other chain".to_string(),
                (o, _) => format!("; {o} other chains"),
            };
            let _ = writeln!(
                out,
                "      blocked at ({n} of {all} waits with a chain; scanned from the stack{more}):"
            );
            scanned_chain(ctx, chain_id, "        ", out);
        }
    }
    if rows.len() > shown {
        let _ = writeln!(out, "  ... {} more resources (--top N)", rows.len() - shown);
    }
}

/// How each thread spent its life, from the shim's sampler: running, ready for a CPU,
/// waiting on tracked objects, blocked elsewhere (and in what); and how idle the CPUs were.
fn thread_states(ctx: &mut Ctx<'_>, out: &mut String) {
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

/// Waits still in progress when the log ended (its last look at them): what a program that
/// hangs was waiting for, and who held it.
fn still_waiting(ctx: &mut Ctx<'_>, out: &mut String) {
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
fn cross_process(ctx: &mut Ctx<'_>, out: &mut String) {
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
fn cycle(ctx: &mut Ctx<'_>, d: &Deadlock, out: &mut String) {
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
fn every_thread_waits(ctx: &mut Ctx<'_>, d: &Deadlock, out: &mut String) {
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
fn wait_chains(
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
fn potential_deadlocks(ctx: &mut Ctx<'_>, out: &mut String) {
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

fn potential_deadlock(ctx: &mut Ctx<'_>, rank: usize, p: &PotentialDeadlock, out: &mut String) {
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

/// The per-kind tables, in this order, with what their column prefixes mean; objects whose
/// creation was lost come last.
const TABLES: [(Option<ObjectKind>, &str, &str); 9] = [
    (Some(ObjectKind::Mutex), "MUTEXES", ""),
    (
        Some(ObjectKind::RwLock),
        "RWLOCKS",
        "; w-: write side, r-: read side",
    ),
    (Some(ObjectKind::Cond), "CONDITION VARIABLES", ""),
    (Some(ObjectKind::Semaphore), "SEMAPHORES", ""),
    (
        Some(ObjectKind::Spin),
        "SPINLOCKS",
        "; spinning counts as waiting",
    ),
    (Some(ObjectKind::Barrier), "BARRIERS", ""),
    (
        Some(ObjectKind::Thread),
        "THREADS JOINED",
        "; waits in pthread_join",
    ),
    (
        Some(ObjectKind::Futex),
        "FUTEXES",
        "; waits in syscall(SYS_futex): Rust std::sync, C++ atomic waits",
    ),
    (None, "OBJECTS OF UNKNOWN KIND", "; creation record lost"),
];

/// Column headings of a kind's table (the object label follows them).
fn columns(kind: Option<ObjectKind>) -> &'static [&'static str] {
    match kind {
        Some(ObjectKind::Mutex) | None => &[
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
            "timeouts",
        ],
        Some(ObjectKind::RwLock) => &[
            "w-acquired",
            "w-contended",
            "w-wait-tot",
            "w-wait-max",
            "w-waiters",
            "w-hold-tot",
            "w-hold-max",
            "r-acquired",
            "r-contended",
            "r-wait-tot",
            "r-wait-max",
            "r-waiters",
            "busy",
            "timeouts",
        ],
        Some(ObjectKind::Cond) => &[
            "waits",
            "signals",
            "broadcasts",
            "timeouts",
            "spurious",
            "wait-tot",
            "wait-max",
            "reacq-tot",
            "reacq-max",
            "waiters",
        ],
        Some(ObjectKind::Semaphore) => &[
            "acquired",
            "waited",
            "posts",
            "timeouts",
            "interrupted",
            "waiters",
            "wait-tot",
            "wait-max",
            "busy",
        ],
        Some(ObjectKind::Spin) => &[
            "acquired",
            "contended",
            "spin-tot",
            "spin-max",
            "hold-tot",
            "hold-max",
            "waiters",
            "busy",
        ],
        Some(ObjectKind::Barrier) => &[
            "arrivals", "waits", "rounds", "wait-tot", "wait-max", "waiters",
        ],
        Some(ObjectKind::Thread) => &[
            "joins", "waited", "wait-tot", "wait-max", "waiters", "timeouts", "busy",
        ],
        Some(ObjectKind::Futex) => &[
            "waits",
            "wakes",
            "timeouts",
            "interrupted",
            "waiters",
            "wait-tot",
            "wait-max",
        ],
    }
}

/// `400 (40.0%)`: a count and its share of `of`.
fn share(n: u64, of: u64) -> String {
    let pct = if of > 0 {
        (n as f64) * 100.0 / (of as f64)
    } else {
        0.0
    };
    format!("{n} ({pct:.1}%)")
}

/// The cells of an object's row, one per [`columns`]; `-` for counters the log does not have.
fn cells(kind: Option<ObjectKind>, o: &Object) -> Vec<String> {
    let dash = || "-".to_string();
    let c = o.counters.as_ref();
    let n = |f: fn(&Counters) -> u64| c.map_or_else(dash, |c| f(c).to_string());
    let t = |f: fn(&Counters) -> u64| c.map_or_else(dash, |c| fmt_ns(f(c)));
    let contended = || c.map_or_else(dash, |c| share(c.contended, c.acquisitions));
    let waiters = || c.map_or_else(dash, |c| c.max_waiters.to_string());
    let k = |key: u16| o.kind_counter(key).to_string();
    let kt = |key: u16| fmt_ns(o.kind_counter(key));
    // `~`: estimated from the timed holds (see `Object::hold_total_estimate`).
    let hold = || match o.hold_total_estimate() {
        Some((ns, true)) => format!("~{}", fmt_ns(ns)),
        Some((ns, false)) => fmt_ns(ns),
        None => c.map_or_else(dash, |_| fmt_ns(0)),
    };
    match kind {
        Some(ObjectKind::Mutex) | None => vec![
            n(|c| c.acquisitions),
            contended(),
            n(|c| c.owner_changes),
            t(|c| c.wait_total_ns),
            t(|c| c.wait_max_ns),
            hold(),
            t(|c| c.hold_max_ns),
            n(|c| c.hold_samples),
            waiters(),
            n(|c| c.busy),
            n(|c| c.timeouts),
        ],
        Some(ObjectKind::RwLock) => vec![
            n(|c| c.acquisitions),
            contended(),
            t(|c| c.wait_total_ns),
            t(|c| c.wait_max_ns),
            waiters(),
            hold(),
            t(|c| c.hold_max_ns),
            k(counter::READ_ACQUISITIONS),
            share(
                o.kind_counter(counter::READ_CONTENDED),
                o.kind_counter(counter::READ_ACQUISITIONS),
            ),
            kt(counter::READ_WAIT_TOTAL_NS),
            kt(counter::READ_WAIT_MAX_NS),
            k(counter::READ_MAX_WAITERS),
            n(|c| c.busy),
            n(|c| c.timeouts),
        ],
        Some(ObjectKind::Cond) => vec![
            n(|c| c.contended),
            k(counter::SIGNALS),
            k(counter::BROADCASTS),
            n(|c| c.timeouts),
            k(counter::ENDED_SPURIOUS),
            t(|c| c.wait_total_ns),
            t(|c| c.wait_max_ns),
            kt(counter::REACQUIRE_WAIT_TOTAL_NS),
            kt(counter::REACQUIRE_WAIT_MAX_NS),
            waiters(),
        ],
        Some(ObjectKind::Semaphore) => vec![
            n(|c| c.acquisitions),
            n(|c| c.contended),
            k(counter::POSTS),
            n(|c| c.timeouts),
            k(counter::ENDED_INTERRUPTED),
            waiters(),
            t(|c| c.wait_total_ns),
            t(|c| c.wait_max_ns),
            n(|c| c.busy),
        ],
        Some(ObjectKind::Spin) => vec![
            n(|c| c.acquisitions),
            contended(),
            t(|c| c.wait_total_ns),
            t(|c| c.wait_max_ns),
            hold(),
            t(|c| c.hold_max_ns),
            waiters(),
            n(|c| c.busy),
        ],
        Some(ObjectKind::Barrier) => vec![
            n(|c| c.acquisitions),
            n(|c| c.contended),
            k(counter::ROUNDS),
            t(|c| c.wait_total_ns),
            t(|c| c.wait_max_ns),
            waiters(),
        ],
        Some(ObjectKind::Thread) => vec![
            n(|c| c.acquisitions),
            n(|c| c.contended),
            t(|c| c.wait_total_ns),
            t(|c| c.wait_max_ns),
            waiters(),
            n(|c| c.timeouts),
            n(|c| c.busy),
        ],
        Some(ObjectKind::Futex) => vec![
            n(|c| c.contended),
            k(counter::WAKES),
            n(|c| c.timeouts),
            k(counter::ENDED_INTERRUPTED),
            waiters(),
            t(|c| c.wait_total_ns),
            t(|c| c.wait_max_ns),
        ],
    }
}

fn objects(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    if m.objects.is_empty() {
        return;
    }
    // Objects in a record or a deadlock count as active even when the run was killed before
    // their counters were flushed.
    let mut involved: HashSet<u64> = m.records.values().map(|r| r.object_id).collect();
    involved.extend(
        m.deadlocks
            .iter()
            .flat_map(|d| d.cycle.iter().map(|e| e.object_id)),
    );
    let objs: Vec<&Object> = m
        .objects
        .values()
        .filter(|o| ctx.opts.all_objects || o.has_activity() || involved.contains(&o.object_id))
        .collect();
    let objs = ctx.sorted_objects(objs, false);
    let which = if ctx.opts.all_objects {
        "all"
    } else {
        "with activity"
    };
    let by_lost = ctx.opts.sort == SortKey::Lost;
    let order = if by_lost {
        "sorted by lost parallelism, then total wait"
    } else {
        "sorted by total wait"
    };
    let _ = writeln!(
        out,
        "\nOBJECTS ({} {which} of {} tracked, {order}; one table per kind)",
        objs.len(),
        m.objects.len()
    );
    for (kind, title, note) in TABLES {
        let mut rows: Vec<&Object> = objs.iter().copied().filter(|o| o.kind() == kind).collect();
        if rows.is_empty() {
            continue;
        }
        let count = rows.len();
        rows.truncate(if ctx.opts.all_objects {
            MAX_ROWS_SHOWN
        } else {
            shown_rows(ctx)
        });
        let heads = columns(kind);
        let table: Vec<Option<Vec<String>>> = rows
            .iter()
            .map(|o| {
                (o.counters.is_some() || !o.kind_counters().is_empty()).then(|| cells(kind, o))
            })
            .collect();
        // Each column as wide as its widest cell (at least 8), so that every kind's table aligns.
        let mut widths: Vec<usize> = heads.iter().map(|h| h.chars().count().max(8)).collect();
        for row in table.iter().flatten() {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &mut dyn Iterator<Item = String>| -> String {
            let mut l = String::from(" ");
            for (w, cell) in widths.iter().zip(cells) {
                let pad = w.saturating_sub(cell.chars().count());
                let _ = write!(l, " {}{cell}", " ".repeat(pad));
            }
            l
        };
        // A `~` in a shown row's hold total says it is estimated; the heading says how.
        let estimated = rows
            .iter()
            .any(|o| matches!(o.hold_total_estimate(), Some((_, true))));
        let est_note = match kind {
            Some(ObjectKind::RwLock) if estimated => {
                "; w-hold-tot ~: holds that made others wait measured, from the first waiter if their start was not timed, the others scaled from the timed ones"
            }
            _ if estimated => {
                "; hold-tot ~: holds that made others wait measured, from the first waiter if their start was not timed, the others scaled from the hold-smp timed"
            }
            _ => "",
        };
        let _ = writeln!(out, "\n  {title} ({count}{note}{est_note})");
        let _ = writeln!(
            out,
            "{}  object",
            line(&mut heads.iter().map(|h| h.to_string()))
        );
        for (o, row) in rows.iter().zip(table) {
            let label = ctx.object_label(o.object_id);
            let destroyed = if o.destroy_ns.is_some() {
                " (destroyed)"
            } else {
                ""
            };
            match row {
                Some(row) => {
                    let _ = writeln!(out, "{}  {label}{destroyed}", line(&mut row.into_iter()));
                }
                None => {
                    let _ = writeln!(
                        out,
                        "  {:>8}  (no counters in the log)  {label}{destroyed}",
                        "-"
                    );
                }
            }
            // Sorted by it: each object's share of the lost parallelism, under its row.
            if let Some(lost) = ctx.lost_to(o.object_id).filter(|&n| by_lost && n > 0) {
                let all = m.states.lost.lost_ns.max(1);
                let _ = writeln!(
                    out,
                    "      lost parallelism: {} ({} of all)",
                    fmt_ns(lost),
                    percent(lost as f64 / all as f64)
                );
            }
            let ended = o.ended();
            if !ended.is_empty() {
                let errnos = o.ended_errnos();
                let list: Vec<String> = ended
                    .iter()
                    .map(|&(json, t, n)| {
                        if json != "error" || errnos.is_empty() {
                            return format!("{t} {n}");
                        }
                        let by: Vec<String> = errnos
                            .iter()
                            .map(|&(e, k)| format!("{} {k}", errno_name(e)))
                            .collect();
                        format!("{t} {n} ({})", by.join(", "))
                    })
                    .collect();
                let _ = writeln!(out, "      waits ended: {}", list.join(", "));
            } else if let Some(c) = o.counters.as_ref().filter(|c| c.errors > 0) {
                // Calls that failed without waiting (a relock of an error-checking mutex, an
                // invalid deadline): their errnos.
                let by: Vec<String> = o
                    .ended_errnos()
                    .iter()
                    .map(|&(e, k)| format!("{} {k}", errno_name(e)))
                    .collect();
                let by = if by.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", by.join(", "))
                };
                let _ = writeln!(out, "      errors: {}{by}", c.errors);
            }
        }
        if count > rows.len() {
            let _ = writeln!(
                out,
                "  ... {} more with less {} (all are in the JSON report)",
                count - rows.len(),
                if by_lost { "lost parallelism" } else { "wait" }
            );
        }
    }
}

/// Objects the shim summed instead of writing them one by one (created and destroyed without
/// contention), by kind and creation site, most created first.
fn short_lived(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    if m.churned.is_empty() {
        return;
    }
    let sums = m.churned_by_count();
    let rows: Vec<([String; 4], String)> = sums
        .iter()
        .take(shown_rows(ctx))
        .map(|c| {
            let mean = c
                .lifetime_total_ns
                .checked_div(c.count)
                .map_or_else(|| "-".to_string(), fmt_ns);
            let numbers = [
                c.count.to_string(),
                c.acquisitions.to_string(),
                mean,
                fmt_ns(c.lifetime_max_ns),
            ];
            (numbers, churn_kind_text(c.kind))
        })
        .collect();
    let heads = ["count", "acquired", "life-mean", "life-max"];
    // Numbers right-aligned in columns at least 8 wide, as in the per-object tables; the kind
    // left-aligned before the creation site.
    let mut widths = heads.map(|h| h.chars().count().max(8));
    let mut kind_width = 8;
    for (numbers, kind) in &rows {
        for (w, cell) in widths.iter_mut().zip(numbers) {
            *w = (*w).max(cell.chars().count());
        }
        kind_width = kind_width.max(kind.chars().count());
    }
    let line = |numbers: [&str; 4], kind: &str| -> String {
        let mut l = String::from(" ");
        for (&w, cell) in widths.iter().zip(numbers) {
            let _ = write!(l, " {cell:>w$}");
        }
        let _ = write!(l, "  {kind:<kind_width$}");
        l
    };
    let _ = writeln!(
        out,
        "\nSHORT-LIVED OBJECTS ({} created and destroyed without contention; by creation site)",
        m.objects_churned()
    );
    let _ = writeln!(out, "{}  created at", line(heads, "kind"));
    for (c, (numbers, kind)) in sums.iter().zip(&rows) {
        let site = ctx
            .sym
            .site(m, c.chain_id)
            .map_or_else(|| "creation site unknown".to_string(), |f| f.site());
        // Their posts, read acquisitions, signals, broadcasts: `posts 200`.
        let counts: Vec<String> = c
            .counters
            .iter()
            .map(|v| format!("{} {}", kind_counter_json(v.key).replace('_', " "), v.value))
            .collect();
        let counts = if counts.is_empty() {
            String::new()
        } else {
            format!("  ({})", counts.join(", "))
        };
        let _ = writeln!(
            out,
            "{}  {site}{counts}",
            line(numbers.each_ref().map(String::as_str), kind)
        );
    }
    if sums.len() > shown_rows(ctx) {
        let _ = writeln!(
            out,
            "  ... {} more creation sites (all are in the JSON report)",
            sums.len() - shown_rows(ctx)
        );
    }
}

/// Live objects the shim summed instead of tracking them one by one (never contended, beyond
/// its first few thousand), by kind and creation site, most first.
fn quiet_objects(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    if m.quiet.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nNEVER-CONTENDED OBJECTS ({} alive, summed by creation site: too many to track one by one)",
        m.objects_quiet()
    );
    let _ = writeln!(
        out,
        "     count   acquired  owner-chg  kind      created at"
    );
    let sums = m.quiet_by_count();
    for q in sums.iter().take(shown_rows(ctx)) {
        let site = ctx
            .sym
            .site(m, q.chain_id)
            .map_or_else(|| "creation site unknown".to_string(), |f| f.site());
        let _ = writeln!(
            out,
            "  {:>8} {:>10} {:>10}  {:<8}  {site}",
            q.count,
            q.acquisitions,
            q.owner_changes,
            churn_kind_text(q.kind)
        );
    }
    if sums.len() > shown_rows(ctx) {
        let _ = writeln!(
            out,
            "  ... {} more creation sites (all are in the JSON report)",
            sums.len() - shown_rows(ctx)
        );
    }
}

/// Objects shown in WHO WOKE WHOM at most, and wakers per object.
const MAX_WOKEN_OBJECTS: usize = 10;
const MAX_WAKERS_SHOWN: usize = 3;

/// The per-wait events (`WAITSHIM_EVENTS`): how many, what they cost in the log, what was
/// dropped, and per object the threads that woke its waiters most.
fn woken_by(ctx: &mut Ctx<'_>, out: &mut String) {
    let e = &ctx.model.events;
    if !e.any() {
        return;
    }
    let (kept, dropped) = e.kept_and_dropped(ctx.model.end_of_log());
    let per = if e.waits > 0 {
        format!(
            ", {:.1} bytes each in the log",
            e.log_bytes as f64 / e.waits as f64
        )
    } else {
        String::new()
    };
    let mut head = format!(
        "\nWHO WOKE WHOM ({} kept{per}",
        count(kept, "wait event", "wait events")
    );
    if dropped > 0 {
        let _ = write!(head, "; {dropped} dropped");
    }
    head.push(')');
    let _ = writeln!(out, "{head}");
    if let Some(c) = e.coverage(ctx.model.end_of_log()) {
        flight_recorder(e.keep_ns, &c, out);
    }
    let mut by_object: BTreeMap<u64, Vec<(u64, u32)>> = BTreeMap::new();
    for (&(object_id, tid), &n) in &e.woken_by(ctx.model.end_of_log()) {
        by_object.entry(object_id).or_default().push((n, tid));
    }
    // (waits woken by others, object, its wakers by count)
    type Woken = (u64, u64, Vec<(u64, u32)>);
    let mut objects: Vec<Woken> = by_object
        .into_iter()
        .map(|(o, mut w)| {
            w.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            (w.iter().map(|x| x.0).sum(), o, w)
        })
        .collect();
    objects.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, object_id, wakers) in objects.iter().take(MAX_WOKEN_OBJECTS) {
        let list: Vec<String> = wakers
            .iter()
            .take(MAX_WAKERS_SHOWN)
            .map(|&(n, tid)| format!("{} {}", ctx.thread_label(tid), count(n, "time", "times")))
            .collect();
        let more = if wakers.len() > MAX_WAKERS_SHOWN {
            format!(", {} more threads", wakers.len() - MAX_WAKERS_SHOWN)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {}: woken by {}{more}",
            ctx.object_short(*object_id),
            list.join(", ")
        );
    }
    if objects.len() > MAX_WOKEN_OBJECTS {
        let _ = writeln!(
            out,
            "  ... {} more objects",
            objects.len() - MAX_WOKEN_OBJECTS
        );
    }
}

/// What the flight recorder's kept waits cover: its window is what was asked, but each thread's
/// ring holds 64 KB, and a thread that waits often fills it in far less.
fn flight_recorder(keep_ns: u64, c: &crate::model::Coverage, out: &mut String) {
    let mut s = format!(
        "flight recorder: the last {} asked, {} KB per thread",
        fmt_ns(keep_ns),
        crate::model::RING_BYTES / 1024
    );
    match c.covers_ns {
        Some(ns) => {
            let _ = write!(
                s,
                ": the waits kept go back {} before the log's end",
                fmt_ns(ns)
            );
        }
        None => s.push_str(": no wait kept"),
    }
    match c.shortest {
        Some((tid, ns)) => {
            let _ = write!(
                s,
                "; {} filled and dropped older waits, thread {tid}'s going back the least: {} (every \
                 thread's waits are complete for the last {} only)",
                count(c.rings_full, "thread's ring", "threads' rings"),
                fmt_ns(ns),
                fmt_ns(ns)
            );
        }
        None if c.covers_ns.is_some() => {
            s.push_str("; no thread's ring filled: none dropped a wait of the window");
        }
        None => {}
    }
    if c.waits_not_stored > 0 {
        let _ = write!(
            s,
            " (from the first {} waits of the log's flight-recorder batches; {} more not read \
             for this)",
            crate::model::MAX_WINDOWED_WAITS,
            c.waits_not_stored
        );
    }
    for line in wrap(&s, 96) {
        let _ = writeln!(out, "  {line}");
    }
}

/// `text` cut into lines of at most `width` characters at spaces (a longer word stays whole).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn wait_sites(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let mut objs: Vec<_> = m
        .objects
        .values()
        .filter(|o| !o.wait_sites().is_empty())
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
    let shown = shown_rows(ctx).min(MAX_WAIT_SITE_OBJECTS);
    let more = objs.len().saturating_sub(shown);
    for o in objs.into_iter().take(shown) {
        let label = ctx.object_label(o.object_id);
        let _ = writeln!(out, "\n  {label}");
        let mut sites: Vec<_> = o.wait_sites().values().collect();
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
    if more > 0 {
        let _ = writeln!(
            out,
            "\n  ... {more} more objects with less wait (all are in the JSON report)"
        );
    }
}

/// The threads that called `sched_yield`, most calls first, on one line.
fn thread_yields(ctx: &mut Ctx<'_>, out: &mut String) {
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

fn threads(ctx: &mut Ctx<'_>, out: &mut String) {
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
fn shim_cost(ctx: &mut Ctx<'_>, out: &mut String) {
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

/// The policies in force, when a policy file was used: each version, from when, its rules and
/// how often each acted.
fn policy_section(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let p = &m.policy;
    if !p.has_user_policy() {
        return;
    }
    let n = p.versions.len();
    let _ = writeln!(
        out,
        "\nPOLICY ({n} {}; rule counts are cumulative, as last written to the log)",
        if n == 1 { "version" } else { "versions" }
    );
    let described: HashSet<(u32, u32)> = p
        .versions
        .iter()
        .filter(|v| !v.source.is_empty())
        .flat_map(|v| (0..v.rules.len()).map(move |i| (v.version, i)))
        .filter_map(|(version, i)| Some((version, u32::try_from(i).ok()?)))
        .collect();
    let skipped = n.saturating_sub(MAX_VERSIONS_SHOWN);
    if skipped > 0 {
        let _ = writeln!(
            out,
            "  ... {skipped} earlier versions not shown (all are in the JSON report)"
        );
    }
    for v in p.versions.iter().skip(skipped) {
        let at = fmt_ns(m.rel(v.ns));
        if v.source.is_empty() {
            let _ = writeln!(
                out,
                "  version {} from {at}: built-in (waiter chains on every contended wait)",
                v.version
            );
            continue;
        }
        let rules = v.rules.len();
        let _ = writeln!(
            out,
            "  version {} from {at}: {}, {rules} {}",
            v.version,
            v.source,
            if rules == 1 { "rule" } else { "rules" }
        );
        for (i, summary) in v.rules.iter().enumerate().take(MAX_RULES_SHOWN) {
            let rule = u32::try_from(i).unwrap_or(u32::MAX);
            let _ = writeln!(out, "    rule {}: {summary}", i + 1);
            match p.rule_stats.get(&(v.version, rule)) {
                Some(r) => {
                    let _ = writeln!(
                        out,
                        "      requests {}, acted {}, max_waiters suppressed {}",
                        r.requests, r.acted, r.suppressed
                    );
                }
                None => {
                    let _ = writeln!(out, "      no requests recorded");
                }
            }
        }
        if rules > MAX_RULES_SHOWN {
            let _ = writeln!(
                out,
                "    ... {} more rules (all are in the JSON report)",
                rules - MAX_RULES_SHOWN
            );
        }
    }
    let orphans: Vec<_> = p
        .rule_stats
        .values()
        .filter(|r| !described.contains(&(r.version, r.rule)))
        .collect();
    if !orphans.is_empty() {
        let _ = writeln!(out, "  statistics of rules the log does not describe:");
        for r in orphans.iter().take(MAX_ORPHAN_RULES_SHOWN) {
            let _ = writeln!(
                out,
                "    version {} rule {}: requests {}, acted {}, max_waiters suppressed {}",
                r.version,
                u64::from(r.rule) + 1,
                r.requests,
                r.acted,
                r.suppressed
            );
        }
        if orphans.len() > MAX_ORPHAN_RULES_SHOWN {
            let _ = writeln!(
                out,
                "    ... {} more (all are in the JSON report)",
                orphans.len() - MAX_ORPHAN_RULES_SHOWN
            );
        }
    }
}

/// `1 wait event`, `3 wait events`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `version 2 rule 1`: rules are numbered from 1 in the text report, as `policy check` does.
fn rule_name(version: u32, rule: u32) -> String {
    format!("version {version} rule {}", u64::from(rule) + 1)
}

/// The waits the policy rules selected, by object: how many, how long and how they ended per
/// rule; the holders that made them wait, with their stacks; the threads waiting together.
fn collected(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let p = &m.policy;
    if !p.has_collected() {
        return;
    }
    let objects = crate::findings::collected_by_object(m);

    let mut head = format!(
        "\nSELECTED WAITS (collected by policy rules, by object: {}, {}, {}",
        count(p.wait_events_total, "wait event", "wait events"),
        count(p.holder_stacks_total, "holder stack", "holder stacks"),
        count(
            p.waiter_chains_total,
            "waiter-chain record",
            "waiter-chain records"
        )
    );
    let listed = (p.holder_stacks.len() as u64) < p.holder_stacks_total
        || (p.waiter_chains.len() as u64) < p.waiter_chains_total;
    if listed {
        let _ = write!(
            head,
            "; the first {} holder stacks and {} waiter-chain records are shown",
            p.holder_stacks.len(),
            p.waiter_chains.len()
        );
    }
    head.push(')');
    let _ = writeln!(out, "{head}");
    let total = objects.len();
    for (object_id, c) in objects.iter().take(MAX_COLLECTED_OBJECTS) {
        collected_object(ctx, *object_id, c, out);
    }
    if total > MAX_COLLECTED_OBJECTS {
        let _ = writeln!(
            out,
            "\n  ... {} more objects with collected data (all are in the JSON report)",
            total - MAX_COLLECTED_OBJECTS
        );
    }
}

fn collected_object(
    ctx: &mut Ctx<'_>,
    object_id: u64,
    c: &crate::findings::Collected,
    out: &mut String,
) {
    let m = ctx.model;
    let label = ctx.object_label(object_id);
    let _ = writeln!(out, "\n  {label}");
    if !c.groups.is_empty() {
        let _ = writeln!(out, "    selected waits:");
        for ((version, rule), g) in &c.groups {
            let mut line = format!(
                "      {}: {} {}, total {}, max {}",
                rule_name(*version, *rule),
                g.count,
                if g.count == 1 { "wait" } else { "waits" },
                fmt_ns(g.wait_total_ns),
                fmt_ns(g.wait_max_ns)
            );
            if !g.reasons.is_empty() {
                let list: Vec<String> = g
                    .reasons
                    .iter()
                    .map(|&(code, n)| format!("{} {n}", reason_text(code)))
                    .collect();
                let _ = write!(line, "; ended: {}", list.join(", "));
            }
            let _ = writeln!(out, "{line}");
        }
    }
    if !c.holders.is_empty() {
        let _ = writeln!(out, "    holder stacks ({}):", c.holder_stacks);
        for g in c.holders.iter().take(MAX_HOLDER_STACKS) {
            let waiters: Vec<String> = g.waiters.iter().map(|&t| ctx.thread_label(t)).collect();
            let holder = ctx.thread_label(g.holder_tid);
            let rules: Vec<String> = g.rules.iter().map(|&(v, r)| rule_name(v, r)).collect();
            let what = match g.live {
                holder_stack::ACQUIRED => "where it acquired the object",
                holder_stack::BY_SIGNAL => "its live stack (what it was doing when asked)",
                _ => "its stack while blocked in a system call (scanned for return addresses)",
            };
            let _ = writeln!(
                out,
                "      {} waited behind holder {holder} (first at {}, {}); {what}:",
                waiters.join(", "),
                fmt_ns(m.rel(g.first_ns)),
                rules.join(", ")
            );
            chain_with(ctx, g.chain_id, "        ", true, out);
        }
        if c.holders.len() > MAX_HOLDER_STACKS {
            let _ = writeln!(
                out,
                "      ... {} more distinct holder stacks",
                c.holders.len() - MAX_HOLDER_STACKS
            );
        }
    }
    if !c.waiter_sets.is_empty() {
        let _ = writeln!(out, "    waiter chains ({}):", c.waiter_sets.len());
        for &i in c.waiter_sets.iter().take(MAX_WAITER_SETS) {
            let Some(w) = m.policy.waiter_chains.get(i) else {
                continue;
            };
            let n = w.waiters.len();
            let _ = writeln!(
                out,
                "      at {} ({}): {n} {} waiting",
                fmt_ns(m.rel(w.ns)),
                rule_name(w.version, w.rule),
                if n == 1 { "thread" } else { "threads" }
            );
            for r in w.waiters.iter().take(MAX_WAITERS_SHOWN) {
                let who = ctx.thread_label(r.tid);
                let site = if r.chain_id == 0 {
                    "(no call chain recorded)".to_string()
                } else {
                    ctx.sym.site(m, r.chain_id).map_or_else(
                        || format!("(chain {} is not in the log)", r.chain_id),
                        |f| format!("at {}", f.site()),
                    )
                };
                let _ = writeln!(out, "        {who} waiting {} {site}", fmt_ns(r.wait_ns));
            }
            if n > MAX_WAITERS_SHOWN {
                let _ = writeln!(out, "        ... {} more threads", n - MAX_WAITERS_SHOWN);
            }
        }
        if c.waiter_sets.len() > MAX_WAITER_SETS {
            let _ = writeln!(
                out,
                "      ... {} more waiter-chain records on this object",
                c.waiter_sets.len() - MAX_WAITER_SETS
            );
        }
    }
}

/// PROGRESS: the points the program marked through the C API, with their throughput and their
/// transactions' latency.
fn progress(ctx: &mut Ctx<'_>, out: &mut String) {
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
