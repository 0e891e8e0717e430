//! Chrome's Trace Event Format (JSON object form), for chrome://tracing, Perfetto's legacy
//! importer and speedscope: a process per log, a track per thread with its lifetime as a slice,
//! its waits as slices inside it (`Wait: lock`, `Wait: condition`, ...; never overlapping on
//! one thread, see [`super::timeline`]) and deadlocks and highwater rises as instants; as
//! counters, the highwater mark, the idle CPUs and the threads waiting on each of the hottest
//! objects (`Waiters on mutex#2 convoy_lock`, [`super::waiters`]).
//! Timestamps are microseconds since the first log's run start. Written event by event.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use super::slices;
use super::timeline::{self, wait_name};
use super::waiters::{self, Waiters};
use super::{Exporter, Source};

pub struct Chrome<W: Write> {
    out: W,
    first: bool,
    base_ns: Option<u64>,
    /// Events written, and whether the note that they are too many for JSON viewers was given.
    events: u64,
    told: bool,
}

/// Events past which JSON trace viewers (chrome://tracing, Perfetto's legacy importer) are
/// known to fail or crawl: about a million.
pub const MANY_EVENTS: u64 = 1_000_000;

impl<W: Write> Chrome<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"waitshim-analyze export\"},\"traceEvents\":[\n")?;
        Ok(Chrome {
            out,
            first: true,
            base_ns: None,
            events: 0,
            told: false,
        })
    }

    fn event(&mut self, v: &Value) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.events += 1;
        serde_json::to_writer(&mut self.out, v).map_err(io::Error::other)
    }

    fn ts(&self, ns: u64) -> f64 {
        let base = self.base_ns.unwrap_or(0);
        // Microseconds with nanosecond digits.
        (ns as i128 - base as i128) as f64 / 1000.0
    }
}

/// The value of an argument of a slice.
pub(super) enum Arg {
    Str(String),
    Uint(u64),
}

/// The arguments of a wait: what, where it was created, where and from which chain the thread
/// waited, the holder, the contention record.
pub(super) fn wait_args(src: &mut Source<'_>, w: &timeline::Wait) -> Vec<(&'static str, Arg)> {
    let mut args = vec![("object", Arg::Str(src.object_name(w.object_id)))];
    if let Some(site) = src.creation_site(w.object_id) {
        args.push(("created_at", Arg::Str(site)));
    }
    if let Some(site) = src.chain_site(w.chain_id) {
        args.push(("waited_at", Arg::Str(site)));
    }
    if let Some(chain) = src.chain_text(w.chain_id) {
        args.push(("chain", Arg::Str(chain)));
    }
    args.extend(wait_detail_args(src, w));
    args
}

/// The arguments of a wait that vary from one wait of a site to the next: the holder, the
/// contention record, how it ended and who ended it.
pub(super) fn wait_detail_args(
    src: &mut Source<'_>,
    w: &timeline::Wait,
) -> Vec<(&'static str, Arg)> {
    let mut args = Vec::new();
    if w.holder_tid != 0 {
        args.push(("holder", Arg::Str(src.thread_name(w.holder_tid))));
    }
    if let Some(r) = w.record_id {
        args.push(("contention_record", Arg::Uint(r)));
    }
    if w.unended {
        args.push(("ended", Arg::Str("not by the end of the log".into())));
    }
    if let Some((_, name, _)) = waitshim_format::counter::ENDED
        .iter()
        .find(|(k, _, _)| *k == w.reason)
    {
        args.push(("ended", Arg::Str((*name).into())));
    }
    if w.waker_tid != 0 {
        args.push(("woken_by", Arg::Str(src.thread_name(w.waker_tid))));
    }
    args
}

/// What a state slice's arguments say: the system call and its descriptor (and where in its
/// code the thread was, from `chains`: [`blocked_chains`]), the kind of object, and whether its
/// place in the interval is an estimate.
pub(super) fn state_args(s: &slices::Slice, chains: &BlockedChains) -> Vec<(&'static str, Arg)> {
    let mut args = Vec::new();
    match &s.state {
        slices::State::Blocked {
            syscall,
            what,
            chain,
        } => {
            args.push(("syscall", Arg::Str(slices::syscall_text(*syscall))));
            if !what.is_empty() {
                args.push(("what", Arg::Str(what.clone())));
            }
            if let Some((site, text)) = chains.get(chain) {
                args.push(("waited_at", Arg::Str(site.clone())));
                args.push(("chain", Arg::Str(text.clone())));
            }
        }
        // An exact wait's object is on the wait beside it, on the thread's own track.
        slices::State::Tracked(Some(k)) if !s.exact => {
            if let Some(kind) = waitshim_format::ObjectKind::from_u8(*k) {
                args.push(("object_kind", Arg::Str(format!("{kind:?}").to_lowercase())));
            }
        }
        slices::State::Unseen => args.push((
            "note",
            Arg::Str("neither running nor ready, in no state a sample saw".into()),
        )),
        _ => {}
    }
    if s.estimated {
        args.push(("split", Arg::Str(ESTIMATE.into())));
    }
    if s.exact {
        args.push(("times", Arg::Str(EXACT.into())));
    }
    args
}

/// What an exact tracked-wait slice says of itself.
pub(super) const EXACT: &str = "exact: the begin and end of the wait from the per-wait events";

/// The site and the one-line text of each chain of a blocked thread in the log (at most 8 per
/// resource, 1000 resources: [`crate::states`]), worked out before the slices are walked.
pub(super) type BlockedChains = std::collections::HashMap<u32, (String, String)>;

pub(super) fn blocked_chains(src: &mut Source<'_>) -> BlockedChains {
    let ids: Vec<u32> = src
        .ctx
        .model
        .states
        .resources
        .by
        .values()
        .flat_map(|r| r.chains.iter().map(|c| c.0))
        .collect();
    let mut out = BlockedChains::new();
    for id in ids {
        if let Some(text) = src.chain_text(id) {
            let site = src.chain_site(id).unwrap_or_default();
            out.insert(id, (site, text));
        }
    }
    out
}

/// What an estimated slice says of itself.
pub(super) const ESTIMATE: &str = "proportional: the interval between two samples is split by \
the kernel's running and runnable times in it; where in the interval each part lay is an estimate";

/// Where the exact waits go for the states tracks, when the log has both per-wait events and
/// thread states.
pub(super) fn exact_store(model: &crate::model::Model) -> Option<super::exact::Store> {
    (model.events.any() && slices::any(model)).then(super::exact::Store::new)
}

/// The chrome tid of a thread's states track (beside its own: slices of the two overlap).
pub(super) fn states_tid(tid: u32) -> u64 {
    1_000_000_000 + u64::from(tid)
}

fn to_map(args: Vec<(&'static str, Arg)>) -> Value {
    let mut m = Map::new();
    for (k, v) in args {
        let v = match v {
            Arg::Str(s) => Value::String(s),
            Arg::Uint(n) => Value::from(n),
        };
        m.insert(k.into(), v);
    }
    Value::Object(m)
}

impl<W: Write> Exporter for Chrome<W> {
    fn add(&mut self, src: &mut Source<'_>) -> io::Result<()> {
        let model = src.ctx.model;
        if self.base_ns.is_none() {
            self.base_ns = Some(model.start_ns());
        }
        let pid = src.pid;
        let program = model
            .run
            .as_ref()
            .map(|r| crate::symbolize::basename(&r.exe).to_string())
            .unwrap_or_else(|| "process".into());
        self.event(
            &json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                           "args": {"name": format!("{program} (pid {pid})")}}),
        )?;
        let mut rises: Vec<(u64, u32)> = vec![(model.start_ns(), 0)];
        rises.extend(model.highwater.iter().map(|h| (h.ns, h.hwm)));
        rises.sort_by_key(|&(ns, hwm)| (ns, hwm));
        for (ns, hwm) in rises {
            self.event(&json!({"ph": "C", "name": "Highwater mark", "pid": pid,
                               "ts": self.ts(ns), "args": {"threads waiting": hwm}}))?;
        }
        let first = src.ctx.summary;
        for t in timeline::tracks(model, first) {
            let tid = t.tid;
            let mut name = src.thread_name(tid);
            if t.is_main {
                name.push_str(" (main)");
            }
            self.event(
                &json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                               "args": {"name": name}}),
            )?;
            self.event(
                &json!({"ph": "X", "name": "Thread", "cat": "thread", "pid": pid,
                               "tid": tid, "ts": self.ts(t.start),
                               "dur": (t.end - t.start) as f64 / 1000.0}),
            )?;
            for i in &t.instants {
                let mut args = vec![("detail", Arg::Str(i.detail.clone()))];
                if let Some(o) = i.object_id {
                    args.push(("object", Arg::Str(src.object_name(o))));
                }
                self.event(&json!({"ph": "i", "s": "t", "name": i.name, "cat": "event",
                                   "pid": pid, "tid": tid, "ts": self.ts(i.ns),
                                   "args": to_map(args)}))?;
            }
        }
        // The waiters on the hottest objects: a counter each, 0 from the start.
        let mut counted = Waiters::new(waiters::hottest(model, timeline::run_end(model)));
        let counters: Vec<String> = counted
            .objects()
            .iter()
            .map(|&o| format!("Waiters on {}", src.object_name(o)))
            .collect();
        for name in &counters {
            self.event(&json!({"ph": "C", "name": name, "pid": pid,
                               "ts": self.ts(model.start_ns()), "args": {"waiting": 0}}))?;
        }
        let mut flows = 0u64;
        let mut exact = exact_store(model);
        let note = timeline::for_each_wait(model, first, |tid, w| -> io::Result<()> {
            counted.add(&w)?;
            if let Some(x) = &mut exact {
                x.add(model, tid, &w);
            }
            let args = to_map(wait_args(src, &w));
            self.event(&json!({"ph": "X", "name": wait_name(model, w.object_id),
                               "cat": "wait", "pid": pid, "tid": tid,
                               "ts": self.ts(w.start),
                               "dur": (w.end - w.start) as f64 / 1000.0, "args": args}))?;
            // Who woke whom: a flow from the waker's thread (inside its Thread slice) to the
            // waiter's, at the wait's end.
            if w.waker_tid != 0 && model.knows_tid(w.waker_tid) {
                flows += 1;
                let id = (u64::from(pid) << 32) | flows;
                self.event(&json!({"ph": "s", "name": "wake", "cat": "wake", "id": id,
                                   "pid": pid, "tid": w.waker_tid, "ts": self.ts(w.end)}))?;
                self.event(&json!({"ph": "f", "bp": "e", "name": "wake", "cat": "wake",
                                   "id": id, "pid": pid, "tid": tid, "ts": self.ts(w.end)}))?;
            }
            Ok(())
        })?;
        src.note(note);
        counted.finish(|at, ns, n| {
            self.event(&json!({"ph": "C", "name": counters[at], "pid": pid,
                               "ts": self.ts(ns), "args": {"waiting": n}}))
        })?;
        // The sampler's states, on a track of their own beside each thread's.
        let mut named = std::collections::HashSet::new();
        let chains = blocked_chains(src);
        let exact = exact.and_then(|x| x.finish());
        slices::for_each_exact(src, exact, |ev| match ev {
            slices::Event::Slice(s) => {
                let stid = states_tid(s.tid);
                if named.insert(s.tid) {
                    let name = format!("{} states", src.thread_name(s.tid));
                    self.event(&json!({"ph": "M", "name": "thread_name", "pid": pid,
                                       "tid": stid, "args": {"name": name}}))?;
                    self.event(&json!({"ph": "M", "name": "thread_sort_index", "pid": pid,
                                       "tid": stid, "args": {"sort_index": u64::from(s.tid) * 2 + 1}}))?;
                    self.event(&json!({"ph": "M", "name": "thread_sort_index", "pid": pid,
                                       "tid": s.tid, "args": {"sort_index": u64::from(s.tid) * 2}}))?;
                }
                let args = to_map(state_args(&s, &chains));
                self.event(&json!({"ph": "X", "name": s.state.name(), "cat": "state",
                                   "pid": pid, "tid": stid, "ts": self.ts(s.start),
                                   "dur": (s.end - s.start) as f64 / 1000.0, "args": args}))
            }
            slices::Event::IdleCpus {
                start, idle, cpus, ..
            } => {
                let idle = (idle * 100.0).round() / 100.0;
                self.event(
                    &json!({"ph": "C", "name": format!("Idle CPUs (of {cpus})"), "pid": pid,
                                   "ts": self.ts(start), "args": {"idle": idle}}),
                )
            }
        })?;
        if self.events > MANY_EVENTS && !self.told {
            self.told = true;
            src.notes.borrow_mut().push(format!(
                "the chrome trace holds {} events so far: JSON viewers (chrome://tracing, \
                 Perfetto's legacy JSON importer) fail or crawl past about {MANY_EVENTS}; \
                 --format perfetto (with --compress) is made for this many, and \
                 WAITSHIM_EVENTS=ring:30s keeps fewer waits",
                self.events
            ));
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()
    }
}
