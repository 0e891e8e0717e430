//! Perfetto's native trace format: a `perfetto.protos.Trace`, written packet by packet (each
//! packet is field 1 of the Trace message, so the file is their concatenation). The messages
//! are declared here with prost's derive, holding only the fields this exporter writes, with
//! the field numbers of Perfetto's `protos/perfetto/trace` definitions.
//!
//! One process track per log and a thread track per thread; on it the thread's lifetime
//! (`Thread`) and its waits (`Wait: lock`, `Wait: condition`, `Wait: semaphore`, `Wait:
//! barrier`, `Wait: join`) as slices, with the object, its creation site, where the thread
//! waited, its chain and the holder as arguments; deadlocks and highwater rises as instants.
//! With per-wait events in the log, each wait another thread ended has a flow (an arrow) from a
//! `Wake` instant on that thread's track to a `Woken` instant on the waiter's, at the wait's end.
//! Counter tracks on the process's: the highwater mark, the idle CPUs, and for each of the
//! [`waiters::HOTTEST`] objects threads waited on longest the number of threads waiting on it
//! (`Waiters on mutex#2 convoy_lock`), from the same waits as the slices.
//! Event names, argument names and argument values are interned: each distinct string is
//! written once per trace.

use std::collections::HashMap;
use std::io::{self, Write};

use prost::Message;

use super::chrome::{blocked_chains, exact_store, state_args, wait_detail_args, Arg};
use super::slices;
use super::timeline::{self, wait_name};
use super::waiters::{self, Waiters};
use super::{Exporter, Source};

#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    /// Packets (a `Trace`'s bytes), deflated (zlib).
    #[prost(bytes = "vec", optional, tag = "50")]
    pub compressed_packets: Option<Vec<u8>>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    /// The clock of `timestamp` when not the sequence's default ([`TracePacketDefaults`]).
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(message, optional, tag = "59")]
    pub trace_packet_defaults: Option<TracePacketDefaults>,
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

/// What every packet of the sequence has unless it says otherwise: here, the clock of its
/// timestamp.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacketDefaults {
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
}

/// Readings of clocks at one moment: ties the sequence's own clock to the trace's.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    /// `BuiltinClock`: the clock the trace's times are in.
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
    #[prost(bool, optional, tag = "3")]
    pub is_incremental: Option<bool>,
}

/// `BuiltinClock.BUILTIN_CLOCK_BOOTTIME`: the clock Perfetto takes a trace's times to be in when
/// none is named; the log's monotonic times are given as such, as before.
const TRACE_CLOCK: u32 = 6;
/// The sequence's own clock (ids 64 to 127 are a sequence's): incremental, in ns, so that each
/// packet's timestamp is the difference from the packet before it.
const DELTA_CLOCK: u32 = 64;

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

/// Marks a track as a counter track (no field is needed for integer values).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int64, optional, tag = "2")]
    pub tid: Option<i64>,
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// `TrackEvent.Type`.
pub const SLICE_BEGIN: i32 = 1;
pub const SLICE_END: i32 = 2;
pub const INSTANT: i32 = 3;
pub const COUNTER: i32 = 4;

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    #[prost(double, optional, tag = "44")]
    pub double_counter_value: Option<f64>,
    /// Flows (arrows) that start at this event, and those that end at it.
    #[prost(fixed64, repeated, tag = "47")]
    pub flow_ids: Vec<u64>,
    #[prost(fixed64, repeated, tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    #[prost(uint64, optional, tag = "1")]
    pub name_iid: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    #[prost(uint64, optional, tag = "17")]
    pub string_value_iid: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedData {
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<EventName>,
    #[prost(message, repeated, tag = "3")]
    pub debug_annotation_names: Vec<DebugAnnotationName>,
    #[prost(message, repeated, tag = "29")]
    pub debug_annotation_string_values: Vec<InternedString>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EventName {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotationName {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedString {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub str: Option<Vec<u8>>,
}

/// `TracePacket.SequenceFlags`: set on the first packet. (`SEQ_NEEDS_INCREMENTAL_STATE`, which
/// only lets a reader skip packets of a sequence whose state it lost, is not written: this
/// sequence's state is never lost, and the flag would cost 2 bytes a packet.)
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
/// The one packet sequence this writer uses.
const SEQUENCE: u32 = 1;

/// Interned strings of one kind: iid by string (iids start at 1).
#[derive(Default)]
struct Interned {
    ids: HashMap<String, u64>,
}

impl Interned {
    /// The string's iid, and whether it is new (then it must go in this packet's interned data).
    fn get(&mut self, s: &str) -> (u64, bool) {
        if let Some(&id) = self.ids.get(s) {
            return (id, false);
        }
        let id = self.ids.len() as u64 + 1;
        self.ids.insert(s.to_string(), id);
        (id, true)
    }
}

pub struct Perfetto<W: Write> {
    out: W,
    names: Interned,
    arg_names: Interned,
    values: Interned,
    first: bool,
    /// The time of the last timestamped packet (the incremental clock's reading), once the
    /// clock is tied to the trace's.
    clock: Option<u64>,
    /// Track uuids handed out, by the track's key ([`process_uuid`], [`thread_uuid`], ...):
    /// small numbers, 1 or 2 bytes in each event instead of 9.
    uuids: HashMap<u64, u64>,
    buf: Vec<u8>,
    /// With compression, the packets written since the last batch was deflated.
    batch: Option<Vec<u8>>,
}

/// Bytes of packets deflated together: large enough for the deflate window to see the many
/// alike packets, small enough to keep memory flat.
const BATCH: usize = 1 << 20;

impl<W: Write> Perfetto<W> {
    pub fn new(out: W) -> Self {
        Perfetto {
            out,
            names: Interned::default(),
            arg_names: Interned::default(),
            values: Interned::default(),
            first: true,
            clock: None,
            uuids: HashMap::new(),
            buf: Vec::new(),
            batch: None,
        }
    }

    /// Deflates the packets in batches of `BATCH` bytes, each written as one packet's
    /// `compressed_packets` (as Perfetto's own tracing service does when asked to compress):
    /// Perfetto's readers inflate them and read the packets in their place.
    pub fn compressed(mut self, on: bool) -> Self {
        self.batch = on.then(Vec::new);
        self
    }

    /// Writes the packets held for compression.
    fn flush_batch(&mut self) -> io::Result<()> {
        let Some(batch) = self.batch.as_mut().filter(|b| !b.is_empty()) else {
            return Ok(());
        };
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(batch)?;
        let bytes = z.finish()?;
        batch.clear();
        let p = TracePacket {
            compressed_packets: Some(bytes),
            ..TracePacket::default()
        };
        let len = p.encoded_len();
        self.buf.clear();
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut self.buf);
        prost::encoding::encode_varint(len as u64, &mut self.buf);
        p.encode(&mut self.buf).map_err(io::Error::other)?;
        self.out.write_all(&self.buf)
    }

    /// The uuid of the track `key` names.
    fn uuid(&mut self, key: u64) -> u64 {
        let next = self.uuids.len() as u64 + 1;
        *self.uuids.entry(key).or_insert(next)
    }

    /// Writes `p` on the one sequence. Timestamps are written on the sequence's incremental
    /// clock ([`DELTA_CLOCK`]): each is the difference from the previous packet's, 1 to 3 bytes
    /// where an absolute time takes 6. The first packet clears the sequence's state and makes
    /// that clock the default; the first timestamped one is preceded by a clock snapshot tying
    /// the clock to the trace's at that time. Packets are written as the log gives them, not
    /// sorted (Perfetto sorts the whole file), so a time can be earlier than the one before
    /// it (a few in a thousand packets): such a packet is written on the trace's own clock
    /// instead, its absolute time, which leaves the incremental clock where it was (the next
    /// difference is from the last packet written on it). The field is unsigned: a negative
    /// difference is not written.
    fn packet(&mut self, mut p: TracePacket) -> io::Result<()> {
        if self.first {
            self.first = false;
            self.write(TracePacket {
                trusted_packet_sequence_id: Some(SEQUENCE),
                sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
                trace_packet_defaults: Some(TracePacketDefaults {
                    timestamp_clock_id: Some(DELTA_CLOCK),
                }),
                ..TracePacket::default()
            })?;
        }
        if let Some(ts) = p.timestamp {
            let last = match self.clock {
                Some(last) => last,
                None => {
                    self.write(TracePacket {
                        trusted_packet_sequence_id: Some(SEQUENCE),
                        clock_snapshot: Some(ClockSnapshot {
                            clocks: vec![
                                Clock {
                                    clock_id: Some(TRACE_CLOCK),
                                    timestamp: Some(ts),
                                    is_incremental: None,
                                },
                                Clock {
                                    clock_id: Some(DELTA_CLOCK),
                                    timestamp: Some(ts),
                                    is_incremental: Some(true),
                                },
                            ],
                            primary_trace_clock: Some(TRACE_CLOCK as i32),
                        }),
                        ..TracePacket::default()
                    })?;
                    ts
                }
            };
            if ts >= last {
                p.timestamp = Some(ts - last);
                self.clock = Some(ts);
            } else {
                p.timestamp_clock_id = Some(TRACE_CLOCK);
            }
        }
        p.trusted_packet_sequence_id = Some(SEQUENCE);
        self.write(p)
    }

    fn write(&mut self, p: TracePacket) -> io::Result<()> {
        // Trace.packet is field 1, length-delimited.
        let len = p.encoded_len();
        self.buf.clear();
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut self.buf);
        prost::encoding::encode_varint(len as u64, &mut self.buf);
        p.encode(&mut self.buf).map_err(io::Error::other)?;
        if let Some(batch) = &mut self.batch {
            batch.extend_from_slice(&self.buf);
            if batch.len() >= BATCH {
                self.flush_batch()?;
            }
            return Ok(());
        }
        self.out.write_all(&self.buf)
    }

    /// An integer value of a counter track.
    fn counter(&mut self, ts: u64, track: u64, value: i64) -> io::Result<()> {
        self.packet(TracePacket {
            timestamp: Some(ts),
            track_event: Some(TrackEvent {
                r#type: Some(COUNTER),
                track_uuid: Some(track),
                counter_value: Some(value),
                ..TrackEvent::default()
            }),
            ..TracePacket::default()
        })
    }

    /// A track event with its name and arguments interned.
    fn event(
        &mut self,
        ts: u64,
        track: u64,
        kind: i32,
        name: Option<&str>,
        args: &[(&str, Arg)],
    ) -> io::Result<()> {
        self.event_with(
            ts,
            TrackEvent {
                r#type: Some(kind),
                track_uuid: Some(track),
                ..TrackEvent::default()
            },
            name,
            args,
        )
    }

    /// As [`Perfetto::event`], for an event with more fields set (flows).
    fn event_with(
        &mut self,
        ts: u64,
        mut ev: TrackEvent,
        name: Option<&str>,
        args: &[(&str, Arg)],
    ) -> io::Result<()> {
        let mut interned = InternedData::default();
        if let Some(name) = name {
            let (iid, new) = self.names.get(name);
            if new {
                interned.event_names.push(EventName {
                    iid: Some(iid),
                    name: Some(name.to_string()),
                });
            }
            ev.name_iid = Some(iid);
        }
        for (k, v) in args {
            let (kid, new) = self.arg_names.get(k);
            if new {
                interned.debug_annotation_names.push(DebugAnnotationName {
                    iid: Some(kid),
                    name: Some(k.to_string()),
                });
            }
            let mut a = DebugAnnotation {
                name_iid: Some(kid),
                ..DebugAnnotation::default()
            };
            match v {
                Arg::Str(v) => {
                    let (vid, new) = self.values.get(v);
                    if new {
                        interned
                            .debug_annotation_string_values
                            .push(InternedString {
                                iid: Some(vid),
                                str: Some(v.as_bytes().to_vec()),
                            });
                    }
                    a.string_value_iid = Some(vid);
                }
                Arg::Uint(n) => a.uint_value = Some(*n),
            }
            ev.debug_annotations.push(a);
        }
        let any_new = !(interned.event_names.is_empty()
            && interned.debug_annotation_names.is_empty()
            && interned.debug_annotation_string_values.is_empty());
        self.packet(TracePacket {
            timestamp: Some(ts),
            track_event: Some(ev),
            interned_data: any_new.then_some(interned),
            ..TracePacket::default()
        })
    }
}

/// The arguments of the waits, those that are the same for every wait of an (object, wait
/// site) worked out once: the object's name, and where it was created, where the thread waited
/// and its chain as one string (`created at convoy.c:43 (main); waited at convoy.c:25
/// (worker); chain worker (convoy.c:25) <- start_thread <- clone3`), interned, so that each
/// wait carries two small references to them instead of four. Memory: one entry per
/// (object, site), at most [`MAX_SITES`].
#[derive(Default)]
struct Sites(HashMap<(u64, u32), (String, Option<String>)>);

impl Sites {
    fn args(&mut self, src: &mut Source<'_>, w: &timeline::Wait) -> Vec<(&'static str, Arg)> {
        let key = (w.object_id, w.chain_id);
        let (object, site) = match self.0.get(&key) {
            Some(known) => known.clone(),
            None => {
                let made = Self::make(src, w);
                // A log with more (object, site) pairs than kept: the rest worked out per wait.
                if self.0.len() < MAX_SITES {
                    self.0.insert(key, made.clone());
                }
                made
            }
        };
        let mut args = vec![("object", Arg::Str(object))];
        if let Some(site) = site {
            args.push(("site", Arg::Str(site)));
        }
        // The rest, which vary from wait to wait.
        args.extend(wait_detail_args(src, w));
        args
    }

    /// The object's name, and its creation site, wait site and chain as one string.
    fn make(src: &mut Source<'_>, w: &timeline::Wait) -> (String, Option<String>) {
        let mut parts = Vec::new();
        if let Some(site) = src.creation_site(w.object_id) {
            parts.push(format!("created at {site}"));
        }
        if let Some(site) = src.chain_site(w.chain_id) {
            parts.push(format!("waited at {site}"));
        }
        if let Some(chain) = src.chain_text(w.chain_id) {
            parts.push(format!("chain {chain}"));
        }
        let site = (!parts.is_empty()).then(|| parts.join("; "));
        (src.object_name(w.object_id), site)
    }
}

/// (object, site) pairs whose arguments are kept ([`Sites`]).
const MAX_SITES: usize = 100_000;

/// Track uuids: a process's from its pid, a thread's from pid and tid (distinct from every
/// process uuid: a tid is never 0).
fn process_uuid(pid: u32) -> u64 {
    (u64::from(pid) << 32) | 0xffff_ffff
}

fn thread_uuid(pid: u32, tid: u32) -> u64 {
    (u64::from(pid) << 32) | u64::from(tid.min(0xffff_fffd))
}

/// A thread's states track (a child of its thread track).
fn states_uuid(pid: u32, tid: u32) -> u64 {
    thread_uuid(pid, tid) | (1 << 63)
}

/// The process's idle-CPUs counter track.
fn idle_uuid(pid: u32) -> u64 {
    (1 << 62) | (u64::from(pid) << 32)
}

/// The counter track of the waiters on the process's `at`th hottest object.
fn waiters_uuid(pid: u32, at: usize) -> u64 {
    (1 << 61) | (u64::from(pid) << 32) | at as u64
}

/// The process's highwater-mark counter track.
fn highwater_uuid(pid: u32) -> u64 {
    (u64::from(pid) << 32) | 0xffff_fffe
}

impl<W: Write> Exporter for Perfetto<W> {
    fn add(&mut self, src: &mut Source<'_>) -> io::Result<()> {
        let model = src.ctx.model;
        let pid = src.pid;
        let program = model
            .run
            .as_ref()
            .map(|r| crate::symbolize::basename(&r.exe).to_string())
            .unwrap_or_else(|| "process".into());
        let puuid = self.uuid(process_uuid(pid));
        self.packet(TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(puuid),
                process: Some(ProcessDescriptor {
                    pid: Some(pid as i32),
                    process_name: Some(program),
                }),
                ..TrackDescriptor::default()
            }),
            ..TracePacket::default()
        })?;
        // The highwater mark as a counter: 0 from the start, then each rise.
        let huuid = self.uuid(highwater_uuid(pid));
        self.packet(TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(huuid),
                name: Some("Highwater mark (threads waiting at once on one object)".into()),
                parent_uuid: Some(puuid),
                counter: Some(CounterDescriptor {}),
                ..TrackDescriptor::default()
            }),
            ..TracePacket::default()
        })?;
        let mut rises: Vec<(u64, u32)> = vec![(model.start_ns(), 0)];
        rises.extend(model.highwater.iter().map(|h| (h.ns, h.hwm)));
        rises.sort_by_key(|&(ns, hwm)| (ns, hwm));
        for (ns, hwm) in rises {
            self.counter(ns, huuid, i64::from(hwm))?;
        }
        // The waiters on the hottest objects: a counter track each, 0 from the start.
        let mut counted = Waiters::new(waiters::hottest(model, timeline::run_end(model)));
        for (at, &o) in counted.objects().iter().enumerate() {
            let uuid = self.uuid(waiters_uuid(pid, at));
            let name = format!("Waiters on {}", src.object_name(o));
            self.packet(TracePacket {
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(uuid),
                    name: Some(name),
                    parent_uuid: Some(puuid),
                    counter: Some(CounterDescriptor {}),
                    ..TrackDescriptor::default()
                }),
                ..TracePacket::default()
            })?;
            self.counter(model.start_ns(), uuid, 0)?;
        }
        let tracks = timeline::tracks(model, src.ctx.summary);
        for t in &tracks {
            let uuid = self.uuid(thread_uuid(pid, t.tid));
            // Perfetto shows the tid beside the name itself.
            let mut name = t.name.clone().unwrap_or_else(|| "thread".into());
            if t.is_main {
                name.push_str(" (main)");
            }
            self.packet(TracePacket {
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(uuid),
                    parent_uuid: Some(puuid),
                    thread: Some(ThreadDescriptor {
                        pid: Some(pid as i32),
                        tid: Some(i64::from(t.tid)),
                        thread_name: Some(name),
                    }),
                    ..TrackDescriptor::default()
                }),
                ..TracePacket::default()
            })?;
            self.event(t.start, uuid, SLICE_BEGIN, Some("Thread"), &[])?;
            for i in &t.instants {
                let mut args = vec![("detail", Arg::Str(i.detail.clone()))];
                if let Some(o) = i.object_id {
                    args.push(("object", Arg::Str(src.object_name(o))));
                }
                self.event(i.ns, uuid, INSTANT, Some(&i.name), &args)?;
            }
        }
        // The waits, each thread's in time order; the trace is sorted by time when read
        // (a file has no flush points, so Perfetto sorts it whole).
        let known: std::collections::HashSet<u32> = tracks.iter().map(|t| t.tid).collect();
        let mut flows = 0u64;
        let first = src.ctx.summary;
        let mut exact = exact_store(model);
        let mut sites = Sites::default();
        let note = timeline::for_each_wait(model, first, |tid, w| -> io::Result<()> {
            counted.add(&w)?;
            if let Some(x) = &mut exact {
                x.add(model, tid, &w);
            }
            let uuid = self.uuid(thread_uuid(pid, tid));
            let args = sites.args(src, &w);
            let name = wait_name(model, w.object_id);
            self.event(w.start, uuid, SLICE_BEGIN, Some(name), &args)?;
            self.event(w.end, uuid, SLICE_END, None, &[])?;
            // Who woke whom: an arrow from the waker, when it is a thread of this log.
            if w.waker_tid != 0 && known.contains(&w.waker_tid) {
                let waker = self.uuid(thread_uuid(pid, w.waker_tid));
                flows += 1;
                let id = (u64::from(pid) << 32) | flows;
                let woke = Arg::Str(src.thread_name(tid));
                self.event_with(
                    w.end,
                    TrackEvent {
                        r#type: Some(INSTANT),
                        track_uuid: Some(waker),
                        flow_ids: vec![id],
                        ..TrackEvent::default()
                    },
                    Some("Wake"),
                    // The object is the waiter's wait's, at the flow's other end.
                    &[("woke", woke)],
                )?;
                // Its waker and object are the arguments of the wait that ends at this moment
                // on this track: not written twice.
                self.event_with(
                    w.end,
                    TrackEvent {
                        r#type: Some(INSTANT),
                        track_uuid: Some(uuid),
                        terminating_flow_ids: vec![id],
                        ..TrackEvent::default()
                    },
                    Some("Woken"),
                    &[],
                )?;
            }
            Ok(())
        })?;
        src.note(note);
        counted.finish(|at, ns, n| {
            let uuid = self.uuid(waiters_uuid(pid, at));
            self.counter(ns, uuid, n as i64)
        })?;
        for t in &tracks {
            let uuid = self.uuid(thread_uuid(pid, t.tid));
            self.event(t.end, uuid, SLICE_END, None, &[])?;
        }
        // The sampler's states, on a child track of each thread's (they overlap its waits).
        let mut described = std::collections::HashSet::new();
        let mut idle_described = false;
        let chains = blocked_chains(src);
        let exact = exact.and_then(|x| x.finish());
        slices::for_each_exact(src, exact, |ev| match ev {
            slices::Event::Slice(s) => {
                let uuid = self.uuid(states_uuid(pid, s.tid));
                let parent = self.uuid(thread_uuid(pid, s.tid));
                if described.insert(s.tid) {
                    self.packet(TracePacket {
                        track_descriptor: Some(TrackDescriptor {
                            uuid: Some(uuid),
                            name: Some("States".into()),
                            parent_uuid: Some(parent),
                            ..TrackDescriptor::default()
                        }),
                        ..TracePacket::default()
                    })?;
                }
                let args = state_args(&s, &chains);
                self.event(s.start, uuid, SLICE_BEGIN, Some(&s.state.name()), &args)?;
                self.event(s.end, uuid, SLICE_END, None, &[])
            }
            slices::Event::IdleCpus {
                start, idle, cpus, ..
            } => {
                let uuid = self.uuid(idle_uuid(pid));
                if !idle_described {
                    idle_described = true;
                    self.packet(TracePacket {
                        track_descriptor: Some(TrackDescriptor {
                            uuid: Some(uuid),
                            name: Some(format!("Idle CPUs (of {cpus}, the machine's)")),
                            parent_uuid: Some(puuid),
                            counter: Some(CounterDescriptor {}),
                            ..TrackDescriptor::default()
                        }),
                        ..TracePacket::default()
                    })?;
                }
                self.packet(TracePacket {
                    timestamp: Some(start),
                    track_event: Some(TrackEvent {
                        r#type: Some(COUNTER),
                        track_uuid: Some(uuid),
                        double_counter_value: Some(idle),
                        ..TrackEvent::default()
                    }),
                    ..TracePacket::default()
                })
            }
        })?;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.flush_batch()?;
        self.out.flush()
    }
}
