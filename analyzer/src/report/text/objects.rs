//! The per-kind object tables, short-lived objects by creation site, and quiet objects.

use super::*;

/// The per-kind tables, in this order, with what their column prefixes mean; objects whose
/// creation was lost come last.
pub(super) const TABLES: [(Option<ObjectKind>, &str, &str); 9] = [
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
pub(super) fn columns(kind: Option<ObjectKind>) -> &'static [&'static str] {
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

/// The cells of an object's row, one per [`columns`]; `-` for counters the log does not have.
pub(super) fn cells(kind: Option<ObjectKind>, o: &Object) -> Vec<String> {
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

pub(super) fn objects(ctx: &mut Ctx<'_>, out: &mut String) {
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
pub(super) fn short_lived(ctx: &mut Ctx<'_>, out: &mut String) {
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
pub(super) fn quiet_objects(ctx: &mut Ctx<'_>, out: &mut String) {
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
