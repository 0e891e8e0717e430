//! pprof: a gzipped `profile.proto` (the format of github.com/google/pprof), with the values of
//! Go's mutex profile, `contentions/count` and `delay/nanoseconds`. The messages are declared
//! here with prost's derive from the field numbers of pprof's `proto/profile.proto`.
//!
//! Stacks are innermost first, as pprof wants them; a location holds the functions inlined at
//! its address, innermost first. Each sample carries the labels `object` (`mutex#2
//! convoy_lock`), `object_kind` and `created_at`, and `thread`: on the holders side the holder,
//! on the waiters side the waiter where the log tells (its per-wait events, and the waits going
//! on at its end; the rest of a wait site's waits have no thread label); every log's samples
//! carry `pid`, and a wait still going on when the log ended (a
//! deadlock's) carries `ended` = `not by the end of the log`.

use std::collections::HashMap;
use std::io::{self, Write};

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use super::{frame_name, samples, Exporter, Side, Source, WaitsByThread};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// A sample's stack (location ids) and labels (key, string, number).
type SampleKey = (Vec<u64>, Vec<(i64, i64, i64)>);

/// Builds one profile from any number of logs: strings, functions and locations are shared,
/// samples with the same stack and labels are summed.
pub struct Pprof<W: Write> {
    out: W,
    side: Side,
    strings: HashMap<String, i64>,
    profile: Profile,
    functions: HashMap<(String, String), u64>,
    /// Locations by (pid, address): addresses mean something within one process only.
    locations: HashMap<(u32, u64), u64>,
    /// Pseudo-locations standing for an object waited on without a chain, by name.
    named_locations: HashMap<String, u64>,
    /// Where each distinct sample is in the profile, by (stack, labels).
    samples: HashMap<SampleKey, usize>,
    start_ns: Option<u64>,
    end_ns: u64,
    /// The current log's mappings: (first address, end, mapping id).
    ranges: Vec<(u64, u64, u64)>,
}

impl<W: Write> Pprof<W> {
    pub fn new(out: W, side: Side) -> Self {
        let mut p = Pprof {
            out,
            side,
            strings: HashMap::new(),
            profile: Profile::default(),
            functions: HashMap::new(),
            locations: HashMap::new(),
            named_locations: HashMap::new(),
            samples: HashMap::new(),
            start_ns: None,
            end_ns: 0,
            ranges: Vec::new(),
        };
        p.string(""); // index 0 is the empty string
        let contentions = p.string("contentions");
        let count = p.string("count");
        let delay = p.string("delay");
        let ns = p.string("nanoseconds");
        p.profile.sample_type = vec![
            ValueType {
                r#type: contentions,
                unit: count,
            },
            ValueType {
                r#type: delay,
                unit: ns,
            },
        ];
        p.profile.period_type = Some(ValueType {
            r#type: contentions,
            unit: count,
        });
        p.profile.period = 1;
        p.profile.default_sample_type = delay;
        let comment = match side {
            Side::Waiters => "waitshim: where threads waited (waiter chains), by wait time",
            Side::Holders => {
                "waitshim: where holders released what others waited for (holder chains), \
                 by the waiters' wait"
            }
        };
        let c = p.string(comment);
        p.profile.comment.push(c);
        p
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn function(&mut self, name: &str, file: &str) -> u64 {
        let key = (name.to_string(), file.to_string());
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        let (n, f) = (self.string(name), self.string(file));
        self.profile.function.push(Function {
            id,
            name: n,
            system_name: n,
            filename: f,
            start_line: 0,
        });
        self.functions.insert(key, id);
        id
    }

    /// The log's modules as pprof mappings (the program's first, as pprof expects), so that
    /// pprof names the binary and each location's module.
    fn mappings(&mut self, model: &crate::model::Model) {
        self.ranges.clear();
        let exe = model
            .run
            .as_ref()
            .map(|r| r.exe.clone())
            .unwrap_or_default();
        for m in model.modules.values() {
            let lo = m.segments.iter().map(|s| s.vaddr).min().unwrap_or(0);
            let hi = m
                .segments
                .iter()
                .map(|s| s.vaddr.saturating_add(s.memsz))
                .max()
                .unwrap_or(0);
            if hi <= lo {
                continue;
            }
            let path = if m.path.is_empty() { &exe } else { &m.path };
            let build_id: String = m.build_id.iter().map(|b| format!("{b:02x}")).collect();
            let id = self.profile.mapping.len() as u64 + 1;
            let (filename, build_id) = (self.string(path), self.string(&build_id));
            let start = m.base.wrapping_add(lo);
            let limit = m.base.wrapping_add(hi);
            self.profile.mapping.push(Mapping {
                id,
                memory_start: start,
                memory_limit: limit,
                file_offset: 0,
                filename,
                build_id,
                has_functions: true,
                has_filenames: true,
                has_line_numbers: true,
                has_inline_frames: true,
            });
            self.ranges.push((start, limit, id));
        }
    }

    fn new_location(&mut self, address: u64, line: Vec<Line>) -> u64 {
        let id = self.profile.location.len() as u64 + 1;
        let mapping_id = self
            .ranges
            .iter()
            .rev()
            .find(|&&(lo, hi, _)| address > lo && address <= hi)
            .map_or(0, |&(_, _, id)| id);
        self.profile.location.push(Location {
            id,
            mapping_id,
            address,
            line,
        });
        id
    }

    /// The location of one return address of a chain, with its inlined functions; None when
    /// the address is the shim's own.
    fn location(&mut self, src: &mut Source<'_>, addr: u64) -> Option<u64> {
        if let Some(&id) = self.locations.get(&(src.pid, addr)) {
            return (id != 0).then_some(id);
        }
        let frames: Vec<_> = src
            .ctx
            .sym
            .frames(addr, true)
            .into_iter()
            .filter(|f| !f.is_shim())
            .collect();
        let id = if frames.is_empty() {
            0
        } else {
            let lines = frames
                .iter()
                .map(|f| Line {
                    function_id: self.function(&frame_name(f), f.file.as_deref().unwrap_or("")),
                    line: f.line.map_or(0, i64::from),
                })
                .collect();
            self.new_location(addr, lines)
        };
        self.locations.insert((src.pid, addr), id);
        (id != 0).then_some(id)
    }

    fn named_location(&mut self, name: &str) -> u64 {
        if let Some(&id) = self.named_locations.get(name) {
            return id;
        }
        let f = self.function(name, "");
        let id = self.new_location(
            0,
            vec![Line {
                function_id: f,
                line: 0,
            }],
        );
        self.named_locations.insert(name.to_string(), id);
        id
    }
}

impl<W: Write> Exporter for Pprof<W> {
    fn add(&mut self, src: &mut Source<'_>) -> io::Result<()> {
        let model = src.ctx.model;
        self.mappings(model);
        if let Some(r) = &model.run {
            let start = self
                .start_ns
                .map_or(r.realtime_ns, |s| s.min(r.realtime_ns));
            self.start_ns = Some(start);
            let (duration, _) = model.duration_ns();
            self.end_ns = self.end_ns.max(r.realtime_ns.saturating_add(duration));
        }
        let keys = [
            self.string("object"),
            self.string("object_kind"),
            self.string("created_at"),
            self.string("thread"),
            self.string("pid"),
            self.string("ended"),
        ];
        let by_thread = match self.side {
            Side::Waiters => Some(WaitsByThread::of(src)),
            Side::Holders => None,
        };
        for s in samples(model, self.side, by_thread.as_ref()) {
            let mut stack = Vec::new();
            if let Some(addrs) = model.chains.get(&s.chain_id).filter(|_| s.chain_id != 0) {
                for &a in addrs {
                    if let Some(id) = self.location(src, a) {
                        stack.push(id);
                    }
                }
            }
            if stack.is_empty() {
                stack.push(self.named_location("(no chain in the log)"));
            }
            let object = src.object_name(s.object_id);
            let kind = model
                .objects
                .get(&s.object_id)
                .map_or("object", |o| o.kind_name());
            let created = src.creation_site(s.object_id);
            let mut labels = vec![
                (keys[0], self.string(&object), 0),
                (keys[1], self.string(kind), 0),
            ];
            if let Some(created) = created {
                labels.push((keys[2], self.string(&created), 0));
            }
            if let Some(tid) = s.tid {
                let t = src.thread_name(tid);
                labels.push((keys[3], self.string(&t), 0));
            }
            labels.push((keys[4], 0, i64::from(src.pid)));
            if s.unended {
                let v = self.string("not by the end of the log");
                labels.push((keys[5], v, 0));
            }
            let count = i64::try_from(s.count).unwrap_or(i64::MAX);
            let delay = i64::try_from(s.delay_ns).unwrap_or(i64::MAX);
            match self.samples.get(&(stack.clone(), labels.clone())) {
                Some(&i) => {
                    let v = &mut self.profile.sample[i].value;
                    v[0] = v[0].saturating_add(count);
                    v[1] = v[1].saturating_add(delay);
                }
                None => {
                    let label = labels
                        .iter()
                        .map(|&(key, str, num)| Label {
                            key,
                            str,
                            num,
                            num_unit: 0,
                        })
                        .collect();
                    self.samples
                        .insert((stack.clone(), labels), self.profile.sample.len());
                    self.profile.sample.push(Sample {
                        location_id: stack,
                        value: vec![count, delay],
                        label,
                    });
                }
            }
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        if let Some(start) = self.start_ns {
            self.profile.time_nanos = i64::try_from(start).unwrap_or(i64::MAX);
            self.profile.duration_nanos =
                i64::try_from(self.end_ns.saturating_sub(start)).unwrap_or(i64::MAX);
        }
        let bytes = self.profile.encode_to_vec();
        let mut gz = GzEncoder::new(&mut self.out, Compression::default());
        gz.write_all(&bytes)?;
        gz.finish()?;
        self.out.flush()
    }
}
