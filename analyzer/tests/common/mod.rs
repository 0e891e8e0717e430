//! Builds synthetic logs the way the shim writes them, for the analyzer's tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use waitshim_format::*;

/// Monotonic time the synthetic runs start at.
pub const T0: u64 = 5_000_000_000;
pub const MS: u64 = 1_000_000;

pub struct LogBuilder {
    pub bytes: Vec<u8>,
}

impl LogBuilder {
    pub fn new() -> Self {
        LogBuilder {
            bytes: file_header().to_vec(),
        }
    }

    /// Frames only, without the file header: to be put into a log.
    pub fn new_empty() -> Self {
        LogBuilder { bytes: Vec::new() }
    }

    /// A log that starts like every real one: the run start record.
    pub fn started(exe: &str, args: &[&str]) -> Self {
        let mut b = Self::new();
        b.push(RunStart {
            pid: 4242,
            ppid: 1,
            realtime_ns: 1_700_000_000_000_000_000,
            mono_ns: T0,
            ncpus: 2,
            exe: exe.into(),
            cmdline: args.iter().map(|s| s.to_string()).collect(),
            shim_version: "0.1.0".into(),
        });
        b
    }

    pub fn push(&mut self, rec: impl Into<Record>) -> &mut Self {
        append_frame(&rec.into(), &mut self.bytes);
        self
    }

    pub fn chain(&mut self, chain_id: u32, frames: &[u64]) -> &mut Self {
        self.push(Chain {
            chain_id,
            frames: frames.to_vec(),
        })
    }

    pub fn thread(&mut self, tid: u32, name: &str) -> &mut Self {
        self.push(ThreadStart {
            tid,
            parent_tid: 100,
            ns: T0 + MS,
            start_routine: 0,
            chain_id: 0,
            is_main: u8::from(tid == 100),
        });
        if !name.is_empty() {
            self.push(ThreadName {
                tid,
                ns: T0 + MS,
                name: name.into(),
            });
        }
        self
    }

    pub fn mutex(&mut self, object_id: u64, addr: u64, chain_id: u32) -> &mut Self {
        self.push(ObjectCreate {
            object_id,
            addr,
            kind: ObjectKind::Mutex as u8,
            subtype: 0,
            origin: origin::INIT,
            ns: T0 + MS,
            tid: 100,
            chain_id,
        })
    }

    /// A sync object of any kind, created by the main thread at `chain_id`.
    pub fn object(
        &mut self,
        kind: ObjectKind,
        object_id: u64,
        addr: u64,
        chain_id: u32,
    ) -> &mut Self {
        self.push(ObjectCreate {
            object_id,
            addr,
            kind: kind as u8,
            subtype: 0,
            origin: origin::INIT,
            ns: T0 + MS,
            tid: 100,
            chain_id,
        })
    }

    /// Kind-specific counters and reason codes of an object: ([`counter`] key, value).
    pub fn kind_counters(&mut self, object_id: u64, values: &[(u16, u64)]) -> &mut Self {
        self.push(KindCounters {
            object_id,
            ns: T0 + 900 * MS,
            values: values
                .iter()
                .map(|&(key, value)| CounterValue { key, value })
                .collect(),
        })
    }

    /// Lock order: `to` acquired while `from` held, by `tid` at `chain_id`.
    pub fn lock_order(&mut self, from: u64, to: u64, tid: u32, chain_id: u32) -> &mut Self {
        self.push(LockOrder {
            from_object: from,
            to_object: to,
            tid,
            chain_id,
            ns: T0 + 50 * MS,
        })
    }

    pub fn counters(
        &mut self,
        object_id: u64,
        acq: u64,
        contended: u64,
        wait_total: u64,
    ) -> &mut Self {
        self.push(Counters {
            object_id,
            ns: T0 + 900 * MS,
            acquisitions: acq,
            contended,
            owner_changes: contended,
            busy: 0,
            timeouts: 0,
            errors: 0,
            wait_total_ns: wait_total,
            wait_max_ns: wait_total / 2,
            hold_total_ns: 10 * MS,
            hold_max_ns: MS,
            hold_samples: contended,
            max_waiters: 3,
        })
    }

    pub fn open(
        &mut self,
        record_id: u64,
        object_id: u64,
        level: u32,
        at: u64,
        waiter: (u32, u32),
    ) -> &mut Self {
        self.push(ContentionOpen {
            record_id,
            object_id,
            ns: T0 + at,
            level,
            reason: contention_reason::EXCEEDED,
            holder_tid: 101,
            waiter_tid: waiter.0,
            waiter_chain: waiter.1,
        })
    }

    /// An opening for `reason` ([`contention_reason`]), with the holder the shim saw then.
    #[allow(clippy::too_many_arguments)]
    pub fn open_as(
        &mut self,
        record_id: u64,
        object_id: u64,
        level: u32,
        at: u64,
        waiter: (u32, u32),
        reason: u8,
        holder_tid: u32,
    ) -> &mut Self {
        self.push(ContentionOpen {
            record_id,
            object_id,
            ns: T0 + at,
            level,
            reason,
            holder_tid,
            waiter_tid: waiter.0,
            waiter_chain: waiter.1,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn close(
        &mut self,
        record_id: u64,
        object_id: u64,
        level: u32,
        at: u64,
        elapsed: u64,
        waiters: &[(u32, u32)],
        coalesced: u32,
    ) -> &mut Self {
        self.push(ContentionClose {
            record_id,
            object_id,
            ns: T0 + at,
            level,
            elapsed_ns: elapsed,
            threads_tried: level + 1,
            holder_tid: 101,
            holder_chain: 30,
            waiters: waiters
                .iter()
                .map(|&(tid, chain_id)| WaiterRef {
                    tid,
                    chain_id,
                    wait_ns: elapsed,
                })
                .collect(),
            waiters_total: waiters.len() as u32,
            coalesced,
        })
    }

    pub fn end(&mut self, at: u64, hwm: u32) -> &mut Self {
        self.push(RunEnd {
            ns: T0 + at,
            reason: end_reason::EXIT,
            exit_status: 0,
            hwm,
            dropped: 0,
        })
    }

    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, &self.bytes).expect("write log");
        p
    }
}

/// A module that is not on disk: chains in it show as `convoy+0x…`.
pub const APP_BASE: u64 = 0x5555_5555_4000;

/// The scenario most tests start from: a convoy of 7 waiters on `mutex#1` plus lesser records on
/// two other mutexes.
///
/// - record 1: mutex#2, HWM 3, elapsed 10 ms, waiter chain 11
/// - record 2: mutex#1 "queue", HWM 7, elapsed 500 ms, +2 similar episodes, waiter chain 10 (x7)
/// - record 3: mutex#3, HWM 2, elapsed 2 s, waiter chain 12
pub fn convoy_log() -> LogBuilder {
    let mut b = LogBuilder::started("/nonexistent/convoy", &["./convoy", "8"]);
    b.push(Module {
        module_id: 1,
        base: APP_BASE,
        build_id: vec![1, 2, 3, 4],
        path: "/nonexistent/convoy".into(),
        segments: vec![Segment {
            vaddr: 0,
            memsz: 0x10000,
        }],
    });
    // Chains: innermost first. Outermost frames: 0x1010 for chains 10 and 11, 0x1020 for 12.
    b.chain(1, &[APP_BASE + 0x500, APP_BASE + 0x1000]);
    b.chain(
        10,
        &[APP_BASE + 0x2010, APP_BASE + 0x3000, APP_BASE + 0x1010],
    );
    b.chain(
        11,
        &[APP_BASE + 0x2020, APP_BASE + 0x3000, APP_BASE + 0x1010],
    );
    b.chain(
        12,
        &[APP_BASE + 0x2030, APP_BASE + 0x3000, APP_BASE + 0x1020],
    );
    b.chain(30, &[APP_BASE + 0x4000]);
    b.thread(100, "main");
    for tid in 101..=108 {
        b.thread(tid, &format!("worker-{tid}"));
    }
    b.mutex(1, 0x7000_0000_1000, 1);
    b.push(ObjectName {
        object_id: 1,
        name: "queue".into(),
    });
    b.mutex(2, 0x7000_0000_2000, 1);
    b.mutex(3, 0x7000_0000_3000, 1);
    b.mutex(4, 0x7000_0000_4000, 1);
    b.open(1, 2, 3, 10 * MS, (102, 11));
    b.close(
        1,
        2,
        3,
        20 * MS,
        10 * MS,
        &[(102, 11), (103, 11), (104, 11)],
        0,
    );
    b.push(Highwater {
        ns: T0 + 10 * MS,
        hwm: 3,
        object_id: 2,
        tid: 102,
    });
    b.open(2, 1, 7, 100 * MS, (102, 10));
    b.push(Highwater {
        ns: T0 + 100 * MS,
        hwm: 7,
        object_id: 1,
        tid: 108,
    });
    let waiters: Vec<(u32, u32)> = (102..=108).map(|t| (t, 10)).collect();
    b.close(2, 1, 7, 600 * MS, 500 * MS, &waiters, 2);
    b.open(3, 3, 2, 700 * MS, (103, 12));
    b.close(3, 3, 2, 2700 * MS, 2000 * MS, &[(103, 12)], 0);
    b.counters(1, 1000, 400, 3000 * MS);
    b.counters(2, 50, 10, 30 * MS);
    b.counters(3, 10, 1, 2000 * MS);
    b.push(WaitSite {
        object_id: 1,
        chain_id: 10,
        count: 400,
        wait_total_ns: 3000 * MS,
        wait_max_ns: 500 * MS,
    });
    b
}

/// The text and JSON reports of a built log (named `name` in messages), default options.
pub fn reports(b: &LogBuilder, name: &str) -> (String, serde_json::Value) {
    let a = waitshim_analyze::analyze_bytes(&b.bytes, Path::new(name)).expect("a log");
    let opts = waitshim_analyze::Options::default();
    (
        waitshim_analyze::text_report(&a, &opts),
        waitshim_analyze::json_report(&a, &opts),
    )
}

/// Where `needle` is in a report, which must have it.
pub fn pos(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in report:\n{hay}"))
}

/// A small C program compiled for its symbols and lines (debug information, no optimisation).
pub struct Program {
    pub path: PathBuf,
    pub build_id: Vec<u8>,
    pub segments: Vec<Segment>,
    symbols: Vec<(String, u64)>,
}

impl Program {
    /// A return address one byte into function `name`, relative to the load base.
    pub fn ret(&self, name: &str) -> u64 {
        self.symbols
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, a)| a + 1)
            .unwrap_or_else(|| panic!("no symbol {name}"))
    }
}

/// Compiles `source` as `dir/name` with the system's C compiler.
pub fn compile_program(dir: &Path, name: &str, source: &str) -> Program {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write source");
    let path = dir.join(name);
    let status = std::process::Command::new("cc")
        .args(["-g", "-O0", "-o"])
        .arg(&path)
        .arg(&src)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "cc failed");
    let bytes = std::fs::read(&path).expect("read binary");
    let elf = goblin::elf::Elf::parse(&bytes).expect("ELF");
    let symbols = elf
        .syms
        .iter()
        .filter_map(|s| Some((elf.strtab.get_at(s.st_name)?.to_string(), s.st_value)))
        .collect();
    Program {
        build_id: waitshim_analyze::symbolize::build_id(&elf, &bytes).expect("build-id"),
        segments: load_segments(&elf),
        symbols,
        path,
    }
}

/// The loadable segments of an ELF file, as the shim's module record lists them.
pub fn load_segments(elf: &goblin::elf::Elf) -> Vec<Segment> {
    elf.program_headers
        .iter()
        .filter(|p| p.p_type == goblin::elf::program_header::PT_LOAD)
        .map(|p| Segment {
            vaddr: p.p_vaddr,
            memsz: p.p_memsz,
        })
        .collect()
}

/// A frame as any writer could write it: type `ty`, `body` as given, a valid checksum. For
/// records of a newer writer: types this analyzer does not know, or fields appended to a known
/// record.
pub fn raw_frame(ty: u16, body: &[u8]) -> Vec<u8> {
    let len = body.len() as u32;
    let mut h = crc32fast::Hasher::new();
    h.update(&ty.to_le_bytes());
    h.update(&len.to_le_bytes());
    h.update(body);
    let mut f = Vec::new();
    f.extend(frame::FRAME_TAG.to_le_bytes());
    f.extend(ty.to_le_bytes());
    f.extend(len.to_le_bytes());
    f.extend(h.finalize().to_le_bytes());
    f.extend(body);
    f.resize(f.len().next_multiple_of(4), 0);
    f
}

/// A record's body with `extra` bytes of fields a newer minor version appended.
pub fn extended_body(rec: &Record, extra: usize) -> Vec<u8> {
    let mut body = Vec::new();
    rec.encode_body(&mut body);
    body.extend((0..extra).map(|i| i as u8 | 0x80));
    body
}

/// How a run of the analyzer binary ended.
pub struct Bounded {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Peak resident memory of the process, in KiB, as last seen while it ran (its `VmHWM`,
    /// read every few milliseconds: `wait4`'s `ru_maxrss` would count the memory of this test
    /// process that spawned it).
    pub max_rss_kb: u64,
}

/// The peak resident memory of a running process, in KiB, if it can be read.
fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `waitshim-analyze ARGS`, killing it if it has not ended after `limit` (then the test
/// fails: the analyzer hung). Its output goes to files, so that a large report cannot block it.
pub fn run_analyzer(args: &[&std::ffi::OsStr], limit: std::time::Duration) -> Bounded {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_waitshim-analyze"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("run waitshim-analyze");
    let deadline = std::time::Instant::now() + limit;
    let mut max_rss_kb = 0;
    let status = loop {
        max_rss_kb = max_rss_kb.max(vm_hwm_kb(child.id()).unwrap_or(0));
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("waitshim-analyze {args:?} still running after {limit:?}: it hangs");
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    Bounded {
        code: status.code(),
        stdout: String::from_utf8_lossy(&std::fs::read(&out).unwrap_or_default()).into_owned(),
        stderr: String::from_utf8_lossy(&std::fs::read(&err).unwrap_or_default()).into_owned(),
        max_rss_kb,
    }
}
