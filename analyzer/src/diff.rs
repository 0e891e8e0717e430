//! `waitshim-analyze diff BEFORE AFTER`: two runs compared. Addresses differ from run to run,
//! so objects are matched by what the program says of them: their kind, where they were
//! created (or first used: the first frame of the program's own code, function and
//! `file:line`) and the global that holds them, if any; objects alike in all three (a pool of
//! mutexes made in one loop) are summed. Wait sites are matched by their object and the
//! program's own frames of the waiting chain. Each metric is given before → after with its
//! change; the objects whose waiting changed most come first.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::report::{fmt_ns, Ctx, Options};
use crate::{analyze, Analysis, EXIT_BAD_INPUT};

/// What one run says of one matched object (or of the objects summed under one key).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectFigures {
    pub objects: u64,
    pub acquisitions: u64,
    pub waits: u64,
    pub wait_ns: u64,
    pub max_wait_ns: u64,
    pub max_waiters: u64,
    pub hold_ns: u64,
    pub records: u64,
    /// The name shown (the first object's).
    pub name: String,
    /// Wait times from the per-wait events (empty without them).
    pub wait_times: crate::histogram::Histogram,
}

impl ObjectFigures {
    /// Contended acquisitions per acquisition.
    pub fn contended_ratio(&self) -> f64 {
        if self.acquisitions == 0 {
            0.0
        } else {
            self.waits as f64 / self.acquisitions as f64
        }
    }
}

/// One run, reduced to what can be matched.
#[derive(Debug, Clone, Default)]
pub struct RunFigures {
    pub program: String,
    pub duration_ns: u64,
    pub threads: u64,
    /// By key: `kind created-at site [global]`.
    pub objects: BTreeMap<String, ObjectFigures>,
    /// By (object key, chain): (waits, wait ns).
    pub sites: BTreeMap<(String, String), (u64, u64)>,
    pub hwm: u64,
    pub hwm_object: Option<String>,
    pub deadlocks: u64,
    pub inversions: u64,
    /// Summed over threads: running, runnable, tracked waits, other waits (ns), when sampled.
    pub states: Option<[u64; 4]>,
    /// What is missing from the log (damage, a cut or unended log), if anything.
    pub incomplete: Option<String>,
    /// The critical path (BOTTLENECKS): its length, and its time by cause, keyed so that the
    /// same cause matches across runs (objects by their key, threads by name).
    pub critical: Option<(u64, BTreeMap<String, u64>)>,
}

/// A cause of the critical path as it matches across runs.
fn cause_key(ctx: &mut Ctx<'_>, c: &crate::critical::Cause) -> String {
    use crate::critical::Cause;
    let thread = |ctx: &Ctx<'_>, tid: u32| {
        ctx.model
            .threads
            .get(&tid)
            .and_then(|t| t.name.clone())
            .map_or_else(
                || "unnamed threads".to_string(),
                |n| format!("threads \"{n}\""),
            )
    };
    match c {
        Cause::Held(o) => format!("inside {}", object_key(ctx, *o)),
        Cause::Waited(o) => format!("waiting on {}", object_key(ctx, *o)),
        Cause::Work(t) => format!("work of {}", thread(ctx, *t)),
        Cause::CpusBusy(_) => "ready while every CPU was busy".into(),
        Cause::WakeLatency(0) => "wake-up latency".into(),
        Cause::WakeLatency(o) => format!("wake-up latency after {}", object_key(ctx, *o)),
        Cause::Blocked(sys, _) => format!(
            "blocked in {}",
            waitshim_format::syscalls::name(*sys).unwrap_or("a system call")
        ),
        Cause::Stopped => "stopped".into(),
    }
}

/// The key of an object: kind, creation site, global name.
fn object_key(ctx: &mut Ctx<'_>, object_id: u64) -> String {
    let kind = ctx
        .model
        .objects
        .get(&object_id)
        .map_or("?", |o| o.kind_name());
    let site = ctx
        .creation_site(object_id)
        .map(|f| format!("{} {}", ctx.site_words(object_id), f.site()))
        .unwrap_or_else(|| "created at an unknown site".into());
    match ctx.global_name(object_id) {
        Some(g) => format!("{kind} {g}, {site}"),
        None => format!("{kind}, {site}"),
    }
}

/// The program's own frames of a chain, outermost last: `worker (convoy.c:25) <- main (...)`.
fn chain_key(ctx: &mut Ctx<'_>, chain_id: u32) -> String {
    if chain_id == 0 {
        return "(no chain)".into();
    }
    let frames = ctx.sym.chain(ctx.model, chain_id);
    let own: Vec<String> = frames
        .iter()
        .filter(|f| f.is_user())
        .map(|f| f.site())
        .collect();
    if own.is_empty() {
        frames
            .first()
            .map_or_else(|| "(no chain)".into(), |f| f.site())
    } else {
        own.join(" <- ")
    }
}

/// The figures of one analysed log.
pub fn figures(a: &Analysis, opts: &Options) -> RunFigures {
    let mut ctx = Ctx::new(a, opts);
    let m = &a.model;
    let mut out = RunFigures {
        program: m
            .run
            .as_ref()
            .map(|r| crate::symbolize::basename(&r.exe).to_string())
            .unwrap_or_default(),
        duration_ns: m.duration_ns().0,
        threads: m.threads_seen(),
        hwm: u64::from(m.hwm()),
        deadlocks: m.real_deadlocks().count() as u64,
        inversions: ctx.inversions.cycles.len() as u64,
        ..RunFigures::default()
    };
    let mut missing = Vec::new();
    if a.summary.damage_count > 0 {
        missing.push(format!(
            "{} damaged stretches ({} bytes) skipped",
            a.summary.damage_count, a.summary.damage_bytes
        ));
    }
    if a.summary.ending != crate::source::Ending::Clean {
        missing.push(format!("the file ends {}", a.summary.ending.as_str()));
    }
    if m.run_end.is_none() {
        missing.push("no end record (the program did not exit through the shim)".into());
    }
    if !missing.is_empty() {
        out.incomplete = Some(missing.join("; "));
    }
    let records = m.records_per_object();
    // Waits still in progress at the end, by object: they count at their sites, as in the
    // object's figures.
    let mut open: HashMap<u64, Vec<(u32, u64)>> = HashMap::new();
    if let Some(o) = &m.open_waits {
        for w in &o.waits {
            let waited = o.ns.saturating_sub(w.since_ns);
            open.entry(w.object_id)
                .or_default()
                .push((w.chain_id, waited));
        }
    }
    for c in ctx.costs() {
        let key = object_key(&mut ctx, c.object_id);
        let o = m.objects.get(&c.object_id);
        let name = match ctx.global_name(c.object_id) {
            Some(g) => format!("{} {g}", ctx.object_short(c.object_id)),
            None => ctx.object_short(c.object_id),
        };
        let e = out.objects.entry(key.clone()).or_default();
        if e.objects == 0 {
            e.name = name;
        }
        e.objects += 1;
        e.acquisitions += o
            .and_then(|o| o.counters.as_ref())
            .map_or(0, |c| c.acquisitions);
        e.waits += c.waits;
        e.wait_ns = e.wait_ns.saturating_add(c.wait_ns);
        e.max_wait_ns = e.max_wait_ns.max(c.max_wait_ns);
        e.max_waiters = e.max_waiters.max(c.max_waiters);
        e.hold_ns = e.hold_ns.saturating_add(
            o.and_then(|o| o.hold_total_estimate())
                .map_or(0, |(ns, _)| ns),
        );
        e.records += records.get(&c.object_id).copied().unwrap_or(0) as u64;
        if let Some(h) = ctx.histogram(c.object_id) {
            e.wait_times.merge(h);
        }
        if let Some(o) = o {
            for s in o.wait_sites().values() {
                let chain = chain_key(&mut ctx, s.chain_id);
                let site = out.sites.entry((key.clone(), chain)).or_default();
                site.0 += s.count;
                site.1 = site.1.saturating_add(s.wait_total_ns);
            }
        }
        for &(chain_id, waited) in open.get(&c.object_id).into_iter().flatten() {
            let chain = chain_key(&mut ctx, chain_id);
            let site = out.sites.entry((key.clone(), chain)).or_default();
            site.0 += 1;
            site.1 = site.1.saturating_add(waited);
        }
    }
    if let Some(h) = m.final_highwater() {
        out.hwm_object = Some(object_key(&mut ctx, h.object_id));
    }
    if m.states.any() {
        let mut s = [0u64; 4];
        let ended = m.ended_threads.iter().filter_map(|e| e.states.as_ref());
        for t in m.states.threads.values().chain(ended) {
            s[0] = s[0].saturating_add(t.on_cpu_ns);
            s[1] = s[1].saturating_add(t.run_delay_ns);
            s[2] = s[2].saturating_add(t.tracked_ns);
            s[3] = s[3].saturating_add(t.other_ns());
        }
        let sum = &m.ended_sum;
        s[0] = s[0].saturating_add(sum.on_cpu_ns);
        s[1] = s[1].saturating_add(sum.run_delay_ns);
        s[2] = s[2].saturating_add(sum.tracked_ns);
        s[3] = s[3].saturating_add(sum.other_ns);
        out.states = Some(s);
    }
    if let Some(p) = ctx.critical().cloned() {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for (c, ns) in &p.by {
            let k = cause_key(&mut ctx, c);
            *by.entry(k).or_default() += ns;
        }
        out.critical = Some((p.length_ns(), by));
    }
    out
}

/// One cause of the critical path in both runs: (key, before ns, after ns, before share, after
/// share).
type CauseRow = (String, u64, u64, f64, f64);

/// The causes of both critical paths, the largest change in share first, with the paths'
/// lengths before and after.
fn critical_rows(b: &RunFigures, a: &RunFigures) -> Option<(u64, u64, Vec<CauseRow>)> {
    let ((lb, bb), (la, ba)) = (b.critical.as_ref()?, a.critical.as_ref()?);
    let mut keys: Vec<&String> = bb.keys().chain(ba.keys()).collect();
    keys.sort();
    keys.dedup();
    let share = |ns: u64, len: u64| {
        if len == 0 {
            0.0
        } else {
            ns as f64 / len as f64
        }
    };
    let mut rows: Vec<CauseRow> = keys
        .into_iter()
        .map(|k| {
            let (x, y) = (
                bb.get(k).copied().unwrap_or(0),
                ba.get(k).copied().unwrap_or(0),
            );
            (k.clone(), x, y, share(x, *lb), share(y, *la))
        })
        .collect();
    rows.sort_by(|p, q| {
        (q.4 - q.3)
            .abs()
            .total_cmp(&(p.4 - p.3).abs())
            .then_with(|| p.0.cmp(&q.0))
    });
    Some((*lb, *la, rows))
}

/// `before → after (+change, +n%)`.
fn change(before: u64, after: u64, fmt: impl Fn(u64) -> String) -> String {
    let delta = after as i128 - before as i128;
    let sign = if delta >= 0 { "+" } else { "-" };
    let pct = if before > 0 {
        format!(
            ", {sign}{:.0}%",
            (delta.abs() as f64) * 100.0 / before as f64
        )
    } else {
        String::new()
    };
    format!(
        "{} → {} ({sign}{}{pct})",
        fmt(before),
        fmt(after),
        fmt(delta.unsigned_abs() as u64)
    )
}

fn num(n: u64) -> String {
    n.to_string()
}

/// The objects of both runs, the ones whose wait total changed most first.
fn matched(b: &RunFigures, a: &RunFigures) -> Vec<(String, ObjectFigures, ObjectFigures)> {
    let mut keys: Vec<&String> = b.objects.keys().chain(a.objects.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut rows: Vec<(String, ObjectFigures, ObjectFigures)> = keys
        .into_iter()
        .map(|k| {
            (
                k.clone(),
                b.objects.get(k).cloned().unwrap_or_default(),
                a.objects.get(k).cloned().unwrap_or_default(),
            )
        })
        .collect();
    rows.sort_by(|x, y| {
        let dx = (x.2.wait_ns as i128 - x.1.wait_ns as i128).abs();
        let dy = (y.2.wait_ns as i128 - y.1.wait_ns as i128).abs();
        dy.cmp(&dx).then(x.0.cmp(&y.0))
    });
    rows
}

fn contended(o: &ObjectFigures) -> bool {
    o.waits > 0 || o.wait_ns > 0
}

/// A wait site matched across the runs: its key, (waits, wait ns) before and after.
type SiteRow<'a> = (&'a (String, String), (u64, u64), (u64, u64));

/// The comparison as text.
pub fn text(b: &RunFigures, a: &RunFigures, top: usize) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "DIFF: {} ({}, {} threads) → {} ({}, {} threads)\n",
        b.program,
        fmt_ns(b.duration_ns),
        b.threads,
        a.program,
        fmt_ns(a.duration_ns),
        a.threads
    ));
    for (which, r) in [("before", b), ("after", a)] {
        if let Some(why) = &r.incomplete {
            s.push_str(&format!(
                "WARNING: the {which} log is incomplete: {why}; its figures stop where it does\n"
            ));
        }
    }
    s.push_str(&format!("highwater: {}", change(b.hwm, a.hwm, num)));
    if let Some(o) = &a.hwm_object {
        s.push_str(&format!(" (after: on {o})"));
    }
    s.push('\n');
    s.push_str(&format!(
        "deadlocks: {}\n",
        change(b.deadlocks, a.deadlocks, num)
    ));
    s.push_str(&format!(
        "lock-order inversions: {}\n",
        change(b.inversions, a.inversions, num)
    ));
    match critical_rows(b, a) {
        Some((lb, la, rows)) => {
            s.push_str(&format!(
                "\nBOTTLENECKS (the critical path: {}; each cause's share of it, the largest changes first)\n",
                change(lb, la, fmt_ns)
            ));
            for r in rows.iter().filter(|r| r.3 >= 0.01 || r.4 >= 0.01).take(top) {
                s.push_str(&format!(
                    "  {:>5.1}% → {:>5.1}%  ({})  {}\n",
                    100.0 * r.3,
                    100.0 * r.4,
                    change(r.1, r.2, fmt_ns),
                    r.0
                ));
            }
        }
        None => s.push_str(
            "\nBOTTLENECKS: not compared (a log without per-wait events has no critical path)\n",
        ),
    }
    let rows = matched(b, a);
    let new: Vec<_> = rows
        .iter()
        .filter(|r| !contended(&r.1) && contended(&r.2))
        .collect();
    let gone: Vec<_> = rows
        .iter()
        .filter(|r| contended(&r.1) && !contended(&r.2))
        .collect();
    s.push_str(&format!("\nNEW CONTENTION ({})\n", new.len()));
    for r in new.iter().take(top) {
        s.push_str(&format!(
            "  {}: {} waits, {}\n",
            r.0,
            r.2.waits,
            fmt_ns(r.2.wait_ns)
        ));
    }
    s.push_str(&format!("\nVANISHED CONTENTION ({})\n", gone.len()));
    for r in gone.iter().take(top) {
        s.push_str(&format!(
            "  {}: was {} waits, {}\n",
            r.0,
            r.1.waits,
            fmt_ns(r.1.wait_ns)
        ));
    }
    s.push_str(&format!(
        "\nOBJECTS (matched by kind, creation site and global; {} in all, the largest changes in wait first)\n",
        rows.len()
    ));
    for r in rows.iter().take(top) {
        let (x, y) = (&r.1, &r.2);
        let name = if y.objects > 0 { &y.name } else { &x.name };
        s.push_str(&format!("  {name} — {}\n", r.0));
        if x.objects != y.objects {
            s.push_str(&format!(
                "    objects      {}\n",
                change(x.objects, y.objects, num)
            ));
        }
        s.push_str(&format!(
            "    waits        {}\n",
            change(x.waits, y.waits, num)
        ));
        s.push_str(&format!(
            "    wait total   {}\n",
            change(x.wait_ns, y.wait_ns, fmt_ns)
        ));
        s.push_str(&format!(
            "    contended    {:.1}% → {:.1}% of acquisitions\n",
            x.contended_ratio() * 100.0,
            y.contended_ratio() * 100.0
        ));
        s.push_str(&format!(
            "    max waiters  {}\n",
            change(x.max_waiters, y.max_waiters, num)
        ));
        s.push_str(&format!(
            "    max wait     {}\n",
            change(x.max_wait_ns, y.max_wait_ns, fmt_ns)
        ));
        if x.wait_times.waits > 0 && y.wait_times.waits > 0 {
            let p = |h: &crate::histogram::Histogram, share| h.at_most(share).unwrap_or(0);
            for (label, share) in [("p50 wait <=", 0.5), ("p99 wait <=", 0.99)] {
                s.push_str(&format!(
                    "    {label:<12} {}\n",
                    change(p(&x.wait_times, share), p(&y.wait_times, share), fmt_ns)
                ));
            }
        }
        s.push_str(&format!(
            "    hold total   {}\n",
            change(x.hold_ns, y.hold_ns, fmt_ns)
        ));
        s.push_str(&format!(
            "    records      {}\n",
            change(x.records, y.records, num)
        ));
    }
    if rows.len() > top {
        s.push_str(&format!("  ... {} more (--top)\n", rows.len() - top));
    }
    let mut sites: Vec<SiteRow<'_>> = Vec::new();
    let mut keys: Vec<&(String, String)> = b.sites.keys().chain(a.sites.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        sites.push((
            k,
            b.sites.get(k).copied().unwrap_or_default(),
            a.sites.get(k).copied().unwrap_or_default(),
        ));
    }
    sites.sort_by_key(|x| std::cmp::Reverse((x.2 .1 as i128 - x.1 .1 as i128).unsigned_abs()));
    s.push_str(&format!(
        "\nWAIT SITES ({}, matched by object and the program's own frames)\n",
        sites.len()
    ));
    for (k, x, y) in sites.iter().take(top) {
        s.push_str(&format!(
            "  {}\n    on {}: waits {}, wait {}\n",
            k.1,
            k.0,
            change(x.0, y.0, num),
            change(x.1, y.1, fmt_ns)
        ));
    }
    match (b.states, a.states) {
        (Some(x), Some(y)) => {
            s.push_str("\nTHREAD STATES (summed over threads)\n");
            for (i, what) in ["running", "runnable", "tracked waits", "other waits"]
                .iter()
                .enumerate()
            {
                s.push_str(&format!("  {what:<14} {}\n", change(x[i], y[i], fmt_ns)));
            }
        }
        _ => s.push_str("\nTHREAD STATES: not compared (both runs must be sampled)\n"),
    }
    s
}

fn figures_json(o: &ObjectFigures) -> Value {
    json!({
        "objects": o.objects,
        "acquisitions": o.acquisitions,
        "waits": o.waits,
        "wait_total_ns": o.wait_ns,
        "contended_ratio": o.contended_ratio(),
        "max_waiters": o.max_waiters,
        "max_wait_ns": o.max_wait_ns,
        "hold_total_ns": o.hold_ns,
        "records": o.records,
        "name": o.name,
        "wait_times": (o.wait_times.waits > 0).then(|| json!({
            "events": o.wait_times.waits,
            "p50_at_most_ns": o.wait_times.at_most(0.5),
            "p90_at_most_ns": o.wait_times.at_most(0.9),
            "p99_at_most_ns": o.wait_times.at_most(0.99),
            "max_ns": o.wait_times.max_ns,
        })),
    })
}

/// The comparison as JSON (schema `waitshim-diff/1`).
pub fn json(b: &RunFigures, a: &RunFigures) -> Value {
    let rows = matched(b, a);
    let pair = |x: u64, y: u64| json!({"before": x, "after": y, "change": y as i128 - x as i128});
    let objects: Vec<Value> = rows
        .iter()
        .map(|r| {
            let status = match (contended(&r.1), contended(&r.2)) {
                (false, true) => "new",
                (true, false) => "vanished",
                (true, true) => "both",
                (false, false) => "uncontended",
            };
            json!({"key": r.0, "contention": status,
                   "before": figures_json(&r.1), "after": figures_json(&r.2)})
        })
        .collect();
    let mut keys: Vec<&(String, String)> = b.sites.keys().chain(a.sites.keys()).collect();
    keys.sort();
    keys.dedup();
    let sites: Vec<Value> = keys
        .into_iter()
        .map(|k| {
            let x = b.sites.get(k).copied().unwrap_or_default();
            let y = a.sites.get(k).copied().unwrap_or_default();
            json!({"object": k.0, "chain": k.1, "waits": pair(x.0, y.0),
                   "wait_total_ns": pair(x.1, y.1)})
        })
        .collect();
    let states = match (b.states, a.states) {
        (Some(x), Some(y)) => json!({
            "running_ns": pair(x[0], y[0]),
            "runnable_ns": pair(x[1], y[1]),
            "tracked_wait_ns": pair(x[2], y[2]),
            "other_wait_ns": pair(x[3], y[3]),
        }),
        _ => Value::Null,
    };
    let critical = match critical_rows(b, a) {
        Some((lb, la, rows)) => json!({
            "length_ns": pair(lb, la),
            "by": rows.iter().map(|r| json!({
                "cause": r.0,
                "ns": pair(r.1, r.2),
                "share": {"before": r.3, "after": r.4},
            })).collect::<Vec<Value>>(),
        }),
        None => Value::Null,
    };
    json!({
        "schema": "waitshim-diff/1",
        "before": {"program": b.program, "duration_ns": b.duration_ns, "threads": b.threads,
                   "incomplete": b.incomplete},
        "after": {"program": a.program, "duration_ns": a.duration_ns, "threads": a.threads,
                  "incomplete": a.incomplete},
        "highwater": {"before": b.hwm, "after": a.hwm, "change": a.hwm as i128 - b.hwm as i128,
                      "object_before": b.hwm_object, "object_after": a.hwm_object},
        "deadlocks": pair(b.deadlocks, a.deadlocks),
        "inversions": pair(b.inversions, a.inversions),
        "objects": objects,
        "wait_sites": sites,
        "thread_states": states,
        "critical_path": critical,
    })
}

/// `--html FILE`: both runs' timelines on one time axis, the comparison's text above them,
/// written beside `path` and renamed over it when complete.
fn write_page(
    path: &Path,
    analyses: &[Analysis],
    text: String,
    opts: &Options,
) -> Result<Vec<String>, String> {
    use crate::export::{html::Html, Exporter, Source};
    let mut notes = Vec::new();
    let cannot = |what: &str, e: std::io::Error| format!("cannot {what} {}: {e}", path.display());
    let (tmp, file) = crate::export::tempout::TempOut::create(path)?;
    let out = std::io::BufWriter::with_capacity(1 << 16, file);
    let mut page = Box::new(Html::comparing(out, &["before", "after"], text));
    let written = analyses
        .iter()
        .try_for_each(|a| {
            let mut src = Source::new(Ctx::new(a, opts), a.model.run.as_ref().map_or(0, |r| r.pid));
            page.add(&mut src)?;
            notes.extend(
                src.notes
                    .take()
                    .into_iter()
                    .map(|n| format!("{}: {n}", a.summary.path.display())),
            );
            Ok(())
        })
        .and_then(|_| page.finish())
        .and_then(|_| tmp.commit(path));
    written.map(|_| notes).map_err(|e| cannot("write", e))
}

/// Compares the logs; the exit code (2 when either is not a log or the page cannot be
/// written).
pub fn run(
    before: &PathBuf,
    after: &PathBuf,
    json_out: bool,
    html: Option<&Path>,
    opts: &Options,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut analyses = Vec::new();
    for p in [before, after] {
        match analyze(p) {
            Ok(a) => analyses.push(a),
            Err(e) => {
                let _ = writeln!(err, "waitshim-analyze diff: {e}");
                return EXIT_BAD_INPUT;
            }
        }
    }
    let runs: Vec<RunFigures> = analyses.iter().map(|a| figures(a, opts)).collect();
    let (b, a) = (&runs[0], &runs[1]);
    if let Some(page) = html {
        match write_page(page, &analyses, text(b, a, opts.top), opts) {
            Ok(notes) => {
                for note in notes {
                    let _ = writeln!(err, "waitshim-analyze diff: {note}");
                }
            }
            Err(e) => {
                let _ = writeln!(err, "waitshim-analyze diff: {e}");
                return EXIT_BAD_INPUT;
            }
        }
    }
    let written = if json_out {
        serde_json::to_writer_pretty(&mut *out, &json(b, a))
            .map_err(std::io::Error::other)
            .and_then(|_| writeln!(out))
    } else {
        write!(out, "{}", crate::plain::guarded(&text(b, a, opts.top)))
    };
    let _ = written;
    0
}
