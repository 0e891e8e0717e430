//! Where the waiting went: by object and group, the resources blocked calls waited on, who woke
//! whom, the flight recorder's reach, and the wait sites.

use super::*;

/// HotSpot's per-thread park primitives: a Java monitor (`synchronized`), `Object.wait` and the
/// java.util.concurrent locks park each thread on its own condition variable and mutex, made
/// in these constructors.
pub(super) const JVM_PARK_CONSTRUCTORS: &[&str] = &["os::PlatformEvent::", "os::PlatformParker::"];

/// Says, before a JVM's rows, that its park events are one object per thread, not per Java
/// lock: one contended `synchronized` block showed as 4 unrelated condition variables.
pub(super) fn jvm_park_note(ctx: &mut Ctx<'_>, costs: &[crate::findings::Cost], out: &mut String) {
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
pub(super) fn unattributed_futex_text(ns: u64) -> String {
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
pub(super) fn waiting_went(ctx: &mut Ctx<'_>, out: &mut String) {
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
pub(super) fn waiting_went_row(ctx: &mut Ctx<'_>, c: &crate::findings::Cost, out: &mut String) {
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
pub(super) fn wait_times(h: &crate::histogram::Histogram) -> String {
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

/// The waits outside tracked objects by resource, over all threads, most waited first.
pub(super) fn resources(ctx: &mut Ctx<'_>, out: &mut String) {
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

/// Objects shown in WHO WOKE WHOM at most, and wakers per object.
pub(super) const MAX_WOKEN_OBJECTS: usize = 10;
pub(super) const MAX_WAKERS_SHOWN: usize = 3;

/// The per-wait events (`WAITSHIM_EVENTS`): how many, what they cost in the log, what was
/// dropped, and per object the threads that woke its waiters most.
pub(super) fn woken_by(ctx: &mut Ctx<'_>, out: &mut String) {
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
pub(super) fn flight_recorder(keep_ns: u64, c: &crate::model::Coverage, out: &mut String) {
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

pub(super) fn wait_sites(ctx: &mut Ctx<'_>, out: &mut String) {
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
