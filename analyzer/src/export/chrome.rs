//! Chrome's Trace Event Format (JSON object form), for chrome://tracing, Perfetto's legacy
//! importer and speedscope: a process per log, a track per thread with its lifetime as a slice,
//! its waits as slices inside it (`Wait: lock`, `Wait: condition`, ...; never overlapping on
//! one thread, see [`super::timeline`]) and deadlocks and highwater rises as instants.
//! Timestamps are microseconds since the first log's run start. Written event by event.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use super::timeline::{self, wait_name};
use super::{Exporter, Source};

pub struct Chrome<W: Write> {
    out: W,
    first: bool,
    base_ns: Option<u64>,
}

impl<W: Write> Chrome<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"waitshim-analyze export\"},\"traceEvents\":[\n")?;
        Ok(Chrome {
            out,
            first: true,
            base_ns: None,
        })
    }

    fn event(&mut self, v: &Value) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
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
    if w.holder_tid != 0 {
        args.push(("holder", Arg::Str(src.thread_name(w.holder_tid))));
    }
    if let Some(r) = w.record_id {
        args.push(("contention_record", Arg::Uint(r)));
    }
    if w.unended {
        args.push(("ended", Arg::Str("not by the end of the log".into())));
    }
    args
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
        for t in timeline::tracks(model) {
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
        timeline::for_each_wait(model, |tid, w| {
            let args = to_map(wait_args(src, &w));
            self.event(&json!({"ph": "X", "name": wait_name(model, w.object_id),
                               "cat": "wait", "pid": pid, "tid": tid,
                               "ts": self.ts(w.start),
                               "dur": (w.end - w.start) as f64 / 1000.0, "args": args}))
        })?;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()
    }
}
