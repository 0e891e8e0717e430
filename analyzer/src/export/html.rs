//! `export --format html`: one self-contained page (inline script and style, nothing fetched)
//! with a timeline per thread in four colours (green running, blue runnable, red waiting on a
//! tracked object, yellow waiting for anything else), zoom and pan, a hover box naming the
//! state, the object, its creation site, where the thread waited and the system call; the
//! contention records and highwater rises marked on a row of their own; and the objects that
//! cost most waiting in a table below.
//!
//! The page stays small whatever the run's length: each thread's life is summarised in
//! [`BUCKETS`] equal time buckets over the run, each drawn in the colour of the state that
//! took most of its time, with the detail (object or system call) that took most of it; runs
//! of equal buckets are written once. The contention records drawn are the [`MAX_RECORDS`]
//! longest.

use std::collections::{BinaryHeap, HashMap};
use std::io::{self, Write};

use serde_json::{json, Value};

use super::slices::{self, Colour, State};
use super::timeline;
use super::{Exporter, Source};

/// Time buckets per thread.
pub const BUCKETS: usize = 2000;
/// Contention records drawn at most (the longest).
pub const MAX_RECORDS: usize = 2000;
/// Objects in the table.
pub const MAX_OBJECTS: usize = 50;

/// One bucket of one thread.
#[derive(Clone, Copy, Default)]
struct Bucket {
    /// ns per [`Colour`].
    ns: [f32; 4],
    /// The detail (interned: a system call and descriptor, a kind of wait) that took most of
    /// the bucket, and its ns.
    detail: (u32, f32),
    /// The recorded wait (interned object) that took most of the bucket.
    object: (u32, f32),
}

struct ThreadRow {
    buckets: Vec<Bucket>,
}

/// Strings used by the page, each written once.
#[derive(Default)]
struct Strings {
    list: Vec<String>,
    ids: HashMap<String, u32>,
}

/// Distinct strings kept at most (descriptor names can be many: a server's sockets); later
/// ones share one entry saying so.
const MAX_STRINGS: usize = 20_000;

impl Strings {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        if self.list.len() >= MAX_STRINGS {
            let more = "(more details than the page keeps)";
            if let Some(&i) = self.ids.get(more) {
                return i;
            }
            self.list.push(more.to_string());
            let i = self.list.len() as u32;
            self.ids.insert(more.to_string(), i);
            return i;
        }
        let i = self.list.len() as u32 + 1;
        self.list.push(s.to_string());
        self.ids.insert(s.to_string(), i);
        i
    }
}

pub struct Html<W: Write> {
    out: W,
    logs: Vec<Value>,
    /// `diff --html`: the runs are shown on one time axis, each with its label, the
    /// comparison's text above them.
    comparison: Option<Comparison>,
}

struct Comparison {
    labels: Vec<String>,
    text: String,
}

impl<W: Write> Html<W> {
    pub fn new(out: W) -> Self {
        Html {
            out,
            logs: Vec::new(),
            comparison: None,
        }
    }

    /// A page comparing runs (`diff --html`): the logs added in turn get `labels` (before,
    /// after), their timelines share one time axis (from each run's start), and `text` (the
    /// diff's report) heads the page.
    pub fn comparing(out: W, labels: &[&str], text: String) -> Self {
        Html {
            out,
            logs: Vec::new(),
            comparison: Some(Comparison {
                labels: labels.iter().map(|l| l.to_string()).collect(),
                text,
            }),
        }
    }
}

/// The run's time axis cut into [`BUCKETS`].
struct Axis {
    start: u64,
    end: u64,
}

impl Axis {
    fn width(&self) -> f64 {
        (self.end - self.start).max(1) as f64 / BUCKETS as f64
    }

    /// Calls `f(bucket, ns of [start, end) in it)` for each bucket the span covers.
    fn spread(&self, start: u64, end: u64, mut f: impl FnMut(usize, f32)) {
        let start = start.max(self.start);
        let end = end.min(self.end);
        if end <= start {
            return;
        }
        let w = self.width();
        let first = (((start - self.start) as f64) / w) as usize;
        let last = ((((end - self.start) as f64) / w) as usize).min(BUCKETS - 1);
        for b in first.min(BUCKETS - 1)..=last {
            let b0 = self.start as f64 + b as f64 * w;
            let b1 = b0 + w;
            let ns = (end as f64).min(b1) - (start as f64).max(b0);
            if ns > 0.0 {
                f(b, ns as f32);
            }
        }
    }
}

fn keep_most(slot: &mut (u32, f32), id: u32, ns: f32) {
    if slot.0 == id {
        slot.1 += ns;
    } else if ns > slot.1 {
        *slot = (id, ns);
    }
}

/// The detail a state shows on hover: for a blocked thread, the call, what it waited on and,
/// when its chain was taken, where in its code.
fn state_detail(s: &State, chains: &super::chrome::BlockedChains) -> Option<String> {
    match s {
        State::Blocked {
            syscall,
            what,
            chain,
        } => {
            let mut d = slices::syscall_text(*syscall);
            if !what.is_empty() {
                d += &format!(" on {what}");
            }
            if let Some((_, text)) = chains.get(chain) {
                d += &format!(", at {text}");
            }
            Some(d)
        }
        State::Tracked(_) | State::Stopped | State::Unseen => Some(s.name()),
        _ => None,
    }
}

/// Each bucket as a letter (`g` running, `b` runnable, `r` tracked wait, `y` other wait, `.`
/// alive but nothing known, `-` not alive), runs written as the letter and their length.
fn encode_colours(row: &ThreadRow, axis: &Axis, life: (u64, u64)) -> String {
    let w = axis.width();
    let mut out = String::new();
    let mut run: Option<(char, usize)> = None;
    for (i, b) in row.buckets.iter().enumerate() {
        let b0 = axis.start as f64 + i as f64 * w;
        let alive = (life.0 as f64) < b0 + w && (life.1 as f64) > b0;
        let total: f32 = b.ns.iter().sum();
        let c = if total > 0.0 {
            let (best, _) =
                b.ns.iter()
                    .enumerate()
                    .fold((0, -1.0f32), |a, (k, &v)| if v > a.1 { (k, v) } else { a });
            ['g', 'b', 'r', 'y'][best]
        } else if alive {
            '.'
        } else {
            '-'
        };
        match &mut run {
            Some((rc, n)) if *rc == c => *n += 1,
            _ => {
                if let Some((rc, n)) = run.take() {
                    push_run(&mut out, rc, n);
                }
                run = Some((c, 1));
            }
        }
    }
    if let Some((rc, n)) = run {
        push_run(&mut out, rc, n);
    }
    out
}

fn push_run(out: &mut String, c: char, n: usize) {
    out.push(c);
    if n > 1 {
        out.push_str(&n.to_string());
    }
}

/// Runs of buckets with the same detail: `[first bucket, count, string id]`.
fn encode_runs(row: &ThreadRow, pick: impl Fn(&Bucket) -> u32) -> Vec<[u32; 3]> {
    let mut out: Vec<[u32; 3]> = Vec::new();
    for (i, b) in row.buckets.iter().enumerate() {
        let id = pick(b);
        if id == 0 {
            continue;
        }
        match out.last_mut() {
            Some(r) if r[2] == id && r[0] + r[1] == i as u32 => r[1] += 1,
            _ => out.push([i as u32, 1, id]),
        }
    }
    out
}

impl<W: Write> Exporter for Html<W> {
    fn add(&mut self, src: &mut Source<'_>) -> io::Result<()> {
        let model = src.ctx.model;
        let axis = Axis {
            start: model.start_ns(),
            end: model
                .run_end
                .as_ref()
                .map_or(model.last_ns, |e| e.ns.max(model.last_ns))
                .max(model.start_ns() + 1),
        };
        let mut strings = Strings::default();
        let tracks = timeline::tracks(model, src.ctx.summary);
        let index: HashMap<u32, usize> =
            tracks.iter().enumerate().map(|(i, t)| (t.tid, i)).collect();
        let mut rows: Vec<ThreadRow> = tracks
            .iter()
            .map(|_| ThreadRow {
                buckets: vec![Bucket::default(); BUCKETS],
            })
            .collect();
        let sampled = slices::any(model);
        let chains = super::chrome::blocked_chains(src);
        // The waits (exact with per-wait events, else from the contention records): the object
        // on hover; the colour too when the run was not sampled (else the states below have
        // them). The longest records are kept for the records row.
        let mut objects: HashMap<(u64, u32), u32> = HashMap::new();
        let mut longest: BinaryHeap<std::cmp::Reverse<(u64, u64)>> = BinaryHeap::new();
        let first = src.ctx.summary;
        let mut exact = super::chrome::exact_store(model);
        let note = timeline::for_each_wait(model, first, |tid, w| -> Result<(), ()> {
            if let Some(x) = &mut exact {
                x.add(model, tid, &w);
            }
            let Some(&i) = index.get(&tid) else {
                return Ok(());
            };
            let oid = match objects.get(&(w.object_id, w.waker_tid)) {
                Some(&id) => id,
                None => {
                    let mut text = src.object_name(w.object_id);
                    if let Some(site) = src.creation_site(w.object_id) {
                        text.push_str(&format!(", {} {site}", src.ctx.site_words(w.object_id)));
                    }
                    if let Some(site) = src.chain_site(w.chain_id) {
                        text.push_str(&format!("; waited at {site}"));
                    }
                    if w.waker_tid != 0 {
                        // `thread 41 "ping"`, as the other exports and the report name it.
                        text.push_str(&format!("; woken by {}", src.thread_name(w.waker_tid)));
                    }
                    let id = strings.id(&text);
                    objects.insert((w.object_id, w.waker_tid), id);
                    id
                }
            };
            let row = &mut rows[i];
            axis.spread(w.start, w.end, |b, ns| {
                keep_most(&mut row.buckets[b].object, oid, ns);
                if !sampled {
                    row.buckets[b].ns[Colour::Tracked as usize] += ns;
                }
            });
            Ok(())
        });
        src.note(note.ok().flatten());
        // The sampler's states, their tracked waits the exact ones where the log has them.
        let exact = exact.and_then(|x| x.finish());
        let _ = slices::for_each_exact(src, exact, |ev| -> Result<(), ()> {
            if let slices::Event::Slice(s) = ev {
                let Some(&i) = index.get(&s.tid) else {
                    return Ok(());
                };
                let colour = s.state.colour() as usize;
                let detail = state_detail(&s.state, &chains).map(|d| strings.id(&d));
                let row = &mut rows[i];
                axis.spread(s.start, s.end, |b, ns| {
                    row.buckets[b].ns[colour] += ns;
                    if let Some(d) = detail {
                        keep_most(&mut row.buckets[b].detail, d, ns);
                    }
                });
            }
            Ok(())
        });
        for r in model.records.values() {
            let (Some(start), Some(c)) = (r.opened_ns(), r.close.as_ref()) else {
                continue;
            };
            let len = c.ns.saturating_sub(start);
            longest.push(std::cmp::Reverse((len, r.record_id)));
            if longest.len() > MAX_RECORDS {
                longest.pop();
            }
        }
        let mut records: Vec<Value> = Vec::new();
        let mut kept: Vec<u64> = longest.into_iter().map(|r| r.0 .1).collect();
        kept.sort_unstable();
        for id in kept {
            let Some(r) = model.records.get(&id) else {
                continue;
            };
            let (Some(start), Some(c)) = (r.opened_ns(), r.close.as_ref()) else {
                continue;
            };
            let name = src.object_name(r.object_id);
            let holder = src.thread_name(c.holder_tid);
            let release = src.chain_site(c.holder_chain).unwrap_or_default();
            records.push(json!([
                start - axis.start.min(start),
                c.ns.saturating_sub(axis.start),
                strings.id(&name),
                r.level(),
                strings.id(&format!(
                    "held by {holder}{}",
                    if release.is_empty() {
                        String::new()
                    } else {
                        format!(", released at {release}")
                    }
                )),
                id
            ]));
        }
        let mut highwater: Vec<Value> = Vec::new();
        for h in &model.highwater {
            let name = src.object_name(h.object_id);
            highwater.push(json!([
                h.ns.saturating_sub(axis.start),
                h.hwm,
                strings.id(&name),
                h.tid
            ]));
        }
        let mut threads = Vec::new();
        for (t, row) in tracks.iter().zip(&rows) {
            let mut name = src.thread_name(t.tid);
            if t.is_main {
                name.push_str(" (main)");
            }
            let marks: Vec<Value> = t
                .instants
                .iter()
                .filter(|i| i.name.starts_with("Deadlock"))
                .map(|i| json!([i.ns.saturating_sub(axis.start), i.name]))
                .collect();
            let mut totals = [0f64; 4];
            for b in &row.buckets {
                for (k, v) in b.ns.iter().enumerate() {
                    totals[k] += f64::from(*v);
                }
            }
            threads.push(json!({
                "tid": t.tid,
                "name": name,
                "life": [t.start.saturating_sub(axis.start), t.end.saturating_sub(axis.start)],
                "c": encode_colours(row, &axis, (t.start, t.end)),
                "d": encode_runs(row, |b| b.detail.0),
                "o": encode_runs(row, |b| b.object.0),
                "ms": totals.iter().map(|v| (v / 1e6).round()).collect::<Vec<_>>(),
                "marks": marks,
            }));
        }
        // In WHERE THE WAITING WENT's order, a runtime's futex words in the group their code
        // says, and named so: a Rust `Condvar`'s word is not a lock.
        let costs = src.ctx.costs();
        let mut table = Vec::new();
        for c in costs.iter().take(MAX_OBJECTS) {
            let kind = model
                .objects
                .get(&c.object_id)
                .map_or("?", |o| o.kind_name());
            let kind = match src.ctx.runtime_groups().get(&c.object_id) {
                Some(crate::findings::Group::Lock) => format!("{kind} (a lock)"),
                Some(crate::findings::Group::Event) => {
                    format!("{kind} (waits for another thread to act)")
                }
                Some(crate::findings::Group::Join) => format!("{kind} (a join)"),
                None => kind.to_string(),
            };
            let created = src
                .creation_site(c.object_id)
                .map(|s| format!("{} {s}", src.ctx.site_words(c.object_id)));
            let site = c.top_site.and_then(|s| src.chain_site(s.chain_id));
            let hold = model
                .objects
                .get(&c.object_id)
                .and_then(|o| o.hold_total_estimate())
                .map(|(ns, est)| json!({"ns": ns, "estimated": est}));
            table.push(json!({
                "object": src.object_name(c.object_id),
                "kind": kind,
                "created": created,
                "waits": c.waits,
                "wait_ns": c.wait_ns,
                "max_wait_ns": c.max_wait_ns,
                "max_waiters": c.max_waiters,
                "share": c.share,
                "site": site,
                "hold": hold,
            }));
        }
        let program = model
            .run
            .as_ref()
            .map(|r| crate::symbolize::basename(&r.exe).to_string())
            .unwrap_or_else(|| "process".into());
        let label = self
            .comparison
            .as_ref()
            .and_then(|c| c.labels.get(self.logs.len()).cloned());
        self.logs.push(json!({
            "label": label,
            "pid": src.pid,
            "program": program,
            "duration_ns": axis.end - axis.start,
            "buckets": BUCKETS,
            "sampled": sampled,
            "hwm": model.hwm(),
            "strings": strings.list,
            "threads": threads,
            "records": records,
            "highwater": highwater,
            "objects": table,
        }));
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        let data = serde_json::to_string(&json!({
            "logs": self.logs,
            "shared_axis": self.comparison.is_some(),
            "diff": self.comparison.as_ref().map(|c| c.text.clone()),
        }))
        .map_err(io::Error::other)?;
        // Inside a script element: no `</script>` or `<!--` may appear; `<` only occurs in
        // strings, where \u003c means the same.
        let data = data.replace('<', "\\u003c");
        let page = TEMPLATE.replace("/*DATA*/null", &data);
        self.out.write_all(page.as_bytes())?;
        self.out.flush()
    }
}

const TEMPLATE: &str = include_str!("html_template.html");
