//! The per-thread timeline the trace exports draw: for each thread, its lifetime and the waits
//! whose begin and end the log gives, laid out so that no two slices of a thread overlap
//! partly (every wait lies inside the lifetime, and the waits of a thread do not overlap), and
//! the moments (deadlocks, highwater rises) as instants. The waits are handed out one by one
//! ([`for_each_wait`]), never gathered: memory grows with threads, not with waits.
//!
//! What the log has: a contention record lists, at its close, each waiter with how long it had
//! waited by then, so each waiter's wait is known from its start to the release that closed
//! the episode (it may have gone on after it: the log does not say). A record never closed
//! (a deadlock, a killed program) has its opener waiting from the opening to the end of the
//! log; the log's last list of waits in progress gives those still waiting at its end. Waits of
//! quieter episodes are in the counters only: they have no place in time.
//!
//! A log with per-wait events (`WAITSHIM_EVENTS`, [`waitshim_format::WaitEvents`]) has every
//! blocked wait exactly, with the thread that ended it: then those are the waits (read again
//! from the log, one record at a time), and the reconstruction above is not used. Under the
//! flight recorder (`ring:N`), only the waits that ended within the last N seconds of the log
//! are drawn.

use std::collections::BTreeMap;

use waitshim_format::{ObjectKind, Record};

use crate::model::{EventsSeen, Model};
use crate::source::ReadSummary;

/// One wait of a thread, in absolute monotonic ns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub start: u64,
    pub end: u64,
    pub object_id: u64,
    pub chain_id: u32,
    /// The thread holding the object, when known (0 otherwise).
    pub holder_tid: u32,
    /// The contention record it comes from, if any.
    pub record_id: Option<u64>,
    /// The log ended with this wait still going on.
    pub unended: bool,
    /// The thread whose release, signal or post ended the wait (0: not known, or the wait is
    /// reconstructed from contention records).
    pub waker_tid: u32,
    /// How it ended ([`waitshim_format::counter`] `ENDED_*` key), 0 if not known.
    pub reason: u16,
}

/// A moment on a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instant {
    pub ns: u64,
    pub name: String,
    pub object_id: Option<u64>,
    pub detail: String,
}

#[derive(Debug, Clone, Default)]
pub struct Track {
    pub tid: u32,
    pub name: Option<String>,
    pub is_main: bool,
    /// The thread's lifetime as far as the log knows it, stretched to hold its waits and
    /// instants.
    pub start: u64,
    pub end: u64,
    /// By time.
    pub instants: Vec<Instant>,
}

/// The name a wait's slice gets, by what it waits on: fixed names, so that viewers that colour
/// slices by name colour each kind of wait alike.
pub fn wait_name(model: &Model, object_id: u64) -> &'static str {
    match model.objects.get(&object_id).and_then(|o| o.kind()) {
        Some(ObjectKind::Mutex | ObjectKind::RwLock | ObjectKind::Spin | ObjectKind::Futex) => {
            "Wait: lock"
        }
        Some(ObjectKind::Cond) => "Wait: condition",
        Some(ObjectKind::Semaphore) => "Wait: semaphore",
        Some(ObjectKind::Barrier) => "Wait: barrier",
        Some(ObjectKind::Thread) => "Wait: join",
        None => "Wait",
    }
}

/// Where the log's knowledge of the run ends.
pub fn run_end(model: &Model) -> u64 {
    model
        .run_end
        .as_ref()
        .map_or(model.last_ns, |e| e.ns.max(model.last_ns))
}

/// Keeps each thread's waits apart, in the order they are handed out: a wait is cut to begin
/// where the thread's previous one ended, and dropped if nothing of it is left.
#[derive(Default)]
struct Apart {
    last_end: crate::critical::FastMap<u32, u64>,
    /// The thread of the last call and where its previous wait ended: waits come in batches
    /// of one thread's, so most calls need no lookup.
    last: Option<(u32, u64)>,
}

impl Apart {
    #[inline]
    fn clip(&mut self, tid: u32, mut w: Wait) -> Option<Wait> {
        let prev = match self.last {
            Some((t, end)) if t == tid => end,
            last => {
                if let Some((t, end)) = last {
                    self.last_end.insert(t, end);
                }
                self.last_end.get(&tid).copied().unwrap_or(0)
            }
        };
        w.start = w.start.max(prev);
        if w.end <= w.start {
            self.last = Some((tid, prev));
            return None;
        }
        self.last = Some((tid, w.end));
        Some(w)
    }
}

/// Calls `f` with every wait the log has a time for, as (tid, wait), in the order of their
/// ends; a wait starts no earlier than the end of the thread's wait before it (a thread waits
/// for one thing at a time: a wait listed again by a later record, because it went on through
/// two episodes, continues where the earlier listing ended). Memory: one entry per thread, and
/// one per contention record for their order. Per-wait events are read from the log again
/// (`first` is what its first read found): a note when that read does not find what the first
/// did (see [`super::read_again`]), for the caller to keep.
pub fn for_each_wait<E>(
    model: &Model,
    first: &ReadSummary,
    mut f: impl FnMut(u32, Wait) -> Result<(), E>,
) -> Result<Option<String>, E> {
    if model.events.any() {
        return for_each_event(model, first, f);
    }
    let end_of_log = run_end(model);
    let mut order: Vec<(u64, u64)> = model
        .records
        .values()
        .filter_map(|r| match (&r.open, &r.close) {
            (_, Some(c)) => Some((c.ns, r.record_id)),
            (Some(o), None) => Some((end_of_log.max(o.ns), r.record_id)),
            (None, None) => None,
        })
        .collect();
    order.sort_unstable();
    let mut apart = Apart::default();
    let mut emit = |tid: u32, w: Wait| -> Result<(), E> {
        match apart.clip(tid, w) {
            Some(w) => f(tid, w),
            None => Ok(()),
        }
    };
    for (_, id) in order {
        let Some(r) = model.records.get(&id) else {
            continue;
        };
        match (&r.open, &r.close) {
            (_, Some(c)) => {
                for w in &c.waiters {
                    emit(
                        w.tid,
                        Wait {
                            start: c.ns.saturating_sub(w.wait_ns),
                            end: c.ns,
                            object_id: r.object_id,
                            chain_id: w.chain_id,
                            holder_tid: c.holder_tid,
                            record_id: Some(r.record_id),
                            unended: false,
                            waker_tid: 0,
                            reason: 0,
                        },
                    )?;
                }
            }
            (Some(o), None) => emit(
                o.waiter_tid,
                Wait {
                    start: o.ns,
                    end: end_of_log.max(o.ns),
                    object_id: r.object_id,
                    chain_id: o.waiter_chain,
                    holder_tid: o.holder_tid,
                    record_id: Some(r.record_id),
                    unended: true,
                    waker_tid: 0,
                    reason: 0,
                },
            )?,
            (None, None) => {}
        }
    }
    open_waits(model, end_of_log, &mut emit)?;
    Ok(None)
}

/// The waits still going on when the log ended (its last list of them), by their starts.
fn open_waits<E>(
    model: &Model,
    end_of_log: u64,
    emit: &mut impl FnMut(u32, Wait) -> Result<(), E>,
) -> Result<(), E> {
    if let Some(open) = &model.open_waits {
        let mut waits: Vec<_> = open.waits.iter().collect();
        waits.sort_by_key(|w| w.since_ns);
        for w in waits {
            emit(
                w.tid,
                Wait {
                    start: w.since_ns,
                    end: end_of_log.max(w.since_ns),
                    object_id: w.object_id,
                    chain_id: w.chain_id,
                    holder_tid: w.holder_tid,
                    record_id: None,
                    unended: true,
                    waker_tid: 0,
                    reason: 0,
                },
            )?;
        }
    }
    Ok(())
}

/// [`for_each_wait`] from the log's per-wait events: each batch as the log has it (a thread's
/// in order), then the waits still going on at the end.
fn for_each_event<E>(
    model: &Model,
    first: &ReadSummary,
    mut f: impl FnMut(u32, Wait) -> Result<(), E>,
) -> Result<Option<String>, E> {
    let mut fold = EventFold::new(model);
    let note = super::read_again(first, "the per-wait events", |bytes, path| {
        let mut result = Ok(());
        let summary = crate::source::read_from(bytes, path, |rec| {
            if result.is_ok() {
                result = fold.record(&rec, &mut f);
            }
        });
        let summary = summary.map_err(|e| e.why)?;
        Ok(result.map(|()| summary))
    })?;
    fold.finish(model, &mut f)?;
    Ok(note)
}

/// The waits of the per-wait events, record by record, for a read of the log that serves
/// others too ([`crate::critical`]): [`EventFold::record`] with each record, then
/// [`EventFold::finish`] for the waits still open at the end.
pub struct EventFold {
    /// Where the log ends: None in the model's own read ([`EventFold::streaming`]).
    end_of_log: Option<u64>,
    apart: Apart,
}

impl EventFold {
    /// For a read of the log after the model's (`model` is the whole log's).
    pub fn new(model: &Model) -> EventFold {
        EventFold {
            end_of_log: Some(run_end(model)),
            apart: Apart::default(),
        }
    }

    /// For the model's own read ([`crate::pass`]), where the end of the log is not yet known:
    /// a flight recorder's batches (which keep only the waits near the end) are left out, and
    /// the caller reads them again once the end is known.
    pub fn streaming() -> EventFold {
        EventFold {
            end_of_log: None,
            apart: Apart::default(),
        }
    }

    /// The waits of `rec`, if it is a record of per-wait events, each handed to `f`.
    pub fn record<E>(
        &mut self,
        rec: &Record,
        f: &mut impl FnMut(u32, Wait) -> Result<(), E>,
    ) -> Result<(), E> {
        let Record::WaitEvents(r) = rec else {
            return Ok(());
        };
        let Ok(waits) = r.waits() else {
            return Ok(());
        };
        self.batch(r.tid, r.keep_ns, &waits, f)
    }

    /// The waits of one batch of per-wait events (thread `tid`'s, already unpacked), each
    /// handed to `f`.
    pub fn batch<E>(
        &mut self,
        tid: u32,
        keep_ns: u64,
        waits: &[waitshim_format::events::WaitSpan],
        f: &mut impl FnMut(u32, Wait) -> Result<(), E>,
    ) -> Result<(), E> {
        let end_of_log = match (keep_ns, self.end_of_log) {
            (0, _) => 0,
            (_, Some(end)) => end,
            (_, None) => return Ok(()),
        };
        for w in waits {
            if !EventsSeen::keeps(keep_ns, w.end_ns, end_of_log) {
                continue;
            }
            let w = Wait {
                start: w.begin_ns,
                end: w.end_ns,
                object_id: w.object_id,
                chain_id: w.chain_id,
                holder_tid: 0,
                record_id: None,
                unended: false,
                waker_tid: w.waker,
                reason: w.reason,
            };
            if let Some(w) = self.apart.clip(tid, w) {
                f(tid, w)?;
            }
        }
        Ok(())
    }

    /// The waits still open when the log ends.
    pub fn finish<E>(
        mut self,
        model: &Model,
        f: &mut impl FnMut(u32, Wait) -> Result<(), E>,
    ) -> Result<(), E> {
        let apart = &mut self.apart;
        open_waits(
            model,
            run_end(model),
            &mut |tid, w| match apart.clip(tid, w) {
                Some(w) => f(tid, w),
                None => Ok(()),
            },
        )
    }
}

/// The threads of one log, by tid, each with its lifetime stretched over its waits
/// ([`for_each_wait`]) and its instants (deadlocks, highwater rises). Memory: one entry per
/// thread, plus the instants (bounded by the model's caps on deadlocks and rises).
pub fn tracks(model: &Model, first: &ReadSummary) -> Vec<Track> {
    let run_start = model.start_ns();
    let end_of_log = run_end(model);
    let mut tracks: BTreeMap<u32, Track> = BTreeMap::new();
    for t in model.threads.values() {
        let start = t.start_ns.unwrap_or(run_start);
        let end = t.exit_ns.unwrap_or(end_of_log).max(start);
        tracks.insert(
            t.tid,
            Track {
                tid: t.tid,
                name: t.name.clone(),
                is_main: t.is_main,
                start,
                end,
                ..Track::default()
            },
        );
    }
    // A second read that falls short is noted where the waits themselves are exported.
    let _ = for_each_wait(model, first, |tid, w| -> Result<(), ()> {
        let t = tracks.entry(tid).or_insert_with(|| lone(tid, w.start));
        t.start = t.start.min(w.start);
        t.end = t.end.max(w.end);
        Ok(())
    });
    for d in &model.deadlocks {
        let broken = model.broken(d).is_some();
        for e in &d.cycle {
            let name = if broken {
                "Deadlock (broke later)"
            } else {
                "Deadlock"
            };
            let t = tracks.entry(e.tid).or_insert_with(|| lone(e.tid, d.ns));
            t.instants.push(Instant {
                ns: d.ns,
                name: name.into(),
                object_id: Some(e.object_id),
                detail: match e.holder_tid {
                    0 => "every thread waits; nobody is left to act on this object".to_string(),
                    h => format!("waits for an object held by thread {h}"),
                },
            });
        }
    }
    for h in &model.highwater {
        let t = tracks.entry(h.tid).or_insert_with(|| lone(h.tid, h.ns));
        t.instants.push(Instant {
            ns: h.ns,
            name: format!("Highwater {}", h.hwm),
            object_id: Some(h.object_id),
            detail: format!("{} threads waiting at once on one object", h.hwm),
        });
    }
    for t in tracks.values_mut() {
        t.instants.sort_by_key(|i| i.ns);
        if let Some(i) = t.instants.first() {
            t.start = t.start.min(i.ns);
        }
        if let Some(i) = t.instants.last() {
            t.end = t.end.max(i.ns);
        }
    }
    tracks.into_values().collect()
}

/// A thread the log names only in a wait or an instant.
fn lone(tid: u32, ns: u64) -> Track {
    Track {
        tid,
        start: ns,
        end: ns,
        ..Track::default()
    }
}
