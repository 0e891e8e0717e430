//! The sampler (seed 002): a periodic task of the shim's thread that looks at every thread of
//! the process from outside, through `/proc`, and never stops or signals one.
//!
//! Per thread it reads `/proc/self/task/TID/schedstat` (time on a CPU and time ready for one,
//! exact, from the scheduler) and `/proc/self/task/TID/syscall` (the system call a blocked
//! thread sits in, and its arguments), through descriptors kept open and read with `pread`;
//! and, every [`CPU_EVERY_NS`], `/proc/stat` for each CPU's idle time. It writes what changed
//! since the last sample: a thread that stayed blocked in the same call and did not run is not
//! listed again.
//!
//! Descriptors: the shim must not hold one the program can count on, so each is moved to the
//! high numbers the log uses (`log::move_high`), and the threads followed with kept
//! descriptors are capped by [`MAX_FOLLOWED`] and by what the descriptor limit leaves above
//! those numbers. Threads past the cap are looked at as often, without kept descriptors: each
//! look asks their CPU clocks, and opens, reads and closes the files of those that ran since
//! the last (dearer per thread: the looks' cost paces the interval); a note at the end says
//! how many there were and how often their files were opened. Opening a file
//! takes the lowest free number for the moment until it is moved or closed (as the log's own
//! growth does when it keeps no descriptor). In a forked child the descriptors are closed
//! ([`after_fork_child`]).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

use waitshim_format::syscalls::resource_kind;
use waitshim_format::{
    action, thread_state, BlockedChain, CpuSample, SwitchCount, ThreadSamples, ThreadState,
    ThreadSwitches, ThreadTotals,
};

use crate::clock::now_ns;
use crate::policy::BlockedWait;
use crate::policy_api::{Act, Facts};
use crate::procmaps::Mapping;
use crate::track::threads::ThreadRec;
use crate::track::Tracker;

mod blocked;
mod fds;
mod follow;
mod parse;
mod resource;

use blocked::*;
pub use fds::*;
use follow::*;
pub use parse::*;
pub use resource::*;

/// The sampler's interval in ns (0: off), settled when the shim starts from `WAITSHIM_SAMPLE`
/// and the policy file's `sample`.
static INTERVAL: AtomicU64 = AtomicU64::new(0);

/// Puts the sampler's interval in force (at start, before the shim's thread starts).
pub fn set_interval(ns: u64) {
    INTERVAL.store(ns, Ordering::Relaxed);
}

/// The sampler's interval in ns; 0: off.
pub fn interval() -> u64 {
    INTERVAL.load(Ordering::Relaxed)
}

/// An interval as `WAITSHIM_SAMPLE` takes it: `off`, `10ms`, `2500us`.
pub fn interval_text(ns: u64) -> String {
    match ns {
        0 => "off".to_string(),
        ns if ns % 1_000_000 == 0 => format!("{}ms", ns / 1_000_000),
        ns => format!("{}us", ns / 1_000),
    }
}

/// Blocked threads' stacks scanned for their chains at most per look (each a few reads of the
/// thread's stack through the kernel; the process's mappings are read once per look that
/// scans): the rest wait for the next looks.
pub const SCANS_PER_LOOK: u32 = 16;
/// Threads followed at most with kept descriptors (three each).
pub const MAX_FOLLOWED: usize = 256;
/// A thread's `status` (its context switches) is read at most this often, and only when it ran:
/// the file is several times dearer than `schedstat`.
pub const STATUS_EVERY_NS: u64 = 100_000_000;
/// The same for a thread without kept descriptors (past [`MAX_FOLLOWED`]): its `status` is
/// opened, read and closed, so a thousand such threads that run would cost a few ms a second.
pub const ROTATED_STATUS_EVERY_NS: u64 = 1_000_000_000;
/// Idle CPU time is sampled this often (the kernel counts it in 10 ms ticks).
pub const CPU_EVERY_NS: u64 = 100_000_000;
/// The sampler's budget: its looks take at most 1/`BUDGET_SHARE` of one CPU, on average. A
/// look's cost grows with the threads it follows (a few µs each); when the looks at the
/// interval asked for would cost more, the interval is stretched ([`Sampler::paced`]) and the
/// samples say the interval they were taken at.
pub const BUDGET_SHARE: u64 = 100;
/// The interval is never stretched beyond this.
pub const MAX_INTERVAL_NS: u64 = 1_000_000_000;

/// The interval that keeps looks costing `look_ns` of CPU each (a running mean) within the
/// budget, and never shorter than the one asked for.
pub fn paced_interval(asked_ns: u64, look_ns: u64) -> u64 {
    asked_ns.max(look_ns.saturating_mul(BUDGET_SHARE).min(MAX_INTERVAL_NS))
}

/// The calling thread ends (from the shim's thread-exit path, before its exit record): its
/// scheduler totals, which the sampler's last look, up to an interval old, does not have and
/// cannot get once the thread is gone. One `pread` of its `schedstat` through the sampler's
/// descriptor and one `getrusage`. When the sampler's descriptors are in a table of its own
/// (see `crate::fdtable`), or it follows threads past its cap without them, the thread's CPU
/// clock stands for the `pread`'s time on a CPU, and its timeslices are its context switches
/// plus one ([`slices_from_switches`]); its run delay then stands as the last look saw it.
/// Nothing when the sampler is off or never followed it.
pub fn thread_ending(tr: &Tracker, tid: u32) {
    if interval() == 0 {
        return;
    }
    // SAFETY: getrusage into a zeroed local of the right type.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } == 0;
    let (voluntary, involuntary) = if ok {
        (ru.ru_nvcsw.max(0) as u64, ru.ru_nivcsw.max(0) as u64)
    } else {
        (0, 0)
    };
    let without_file = || {
        let slices = if ok {
            slices_from_switches(voluntary, involuntary)
        } else {
            0
        };
        (crate::clock::thread_cpu_ns(), 0, slices)
    };
    // Only through the descriptor the sampler keeps for it, at the high numbers: opening one
    // here would hold, for a moment, the lowest free number, which another thread of the
    // program may be closing and reopening (closefrom) at the same time. A thread the sampler
    // never followed (it lived less than an interval) keeps the figures of its last sample, if
    // any. The sampler's descriptors in the shim thread's own table are not this thread's to
    // use; asking the shim's thread to read it would hold the thread's end until the shim's
    // thread gets a CPU, milliseconds on a busy machine. Run delay 0: unknown, the samples'
    // figure stands.
    let (on_cpu, delay, slices) = match schedstat_of(tid) {
        Some(_) if crate::fdtable::own() => without_file(),
        Some(fd) => {
            let mut buf = [0u8; 128];
            let sched = pread_kept(fd, &mut buf).and_then(parse_schedstat);
            let Some(sched) = sched else {
                return;
            };
            sched
        }
        None if PAST_CAP.load(Ordering::Relaxed) => without_file(),
        None => return,
    };
    tr.log.write(
        &ThreadTotals {
            tid,
            ns: now_ns(),
            on_cpu_ns: on_cpu,
            run_delay_ns: delay,
            timeslices: slices,
            voluntary,
            involuntary,
        }
        .into(),
    );
}

/// The sampler's state, owned by the shim's thread.
pub struct Sampler {
    interval_ns: u64,
    /// The interval in force: `interval_ns`, or longer when looks cost more than the budget.
    paced_ns: u64,
    /// The running mean of a look's CPU time.
    look_ns: u64,
    task_dir: Option<i32>,
    stat: Option<i32>,
    followed: Vec<Followed>,
    /// Where each tid is in `followed`, kept from look to look.
    index: std::collections::HashMap<u32, usize, std::hash::BuildHasherDefault<TidHasher>>,
    own_tid: u32,
    cpus: Vec<(u64, u64)>,
    last_cpu_ns: u64,
    tick_ns: u64,
    buf: Vec<u8>,
    /// Set when a look found nothing to follow with (no /proc): the sampler stops.
    broken: bool,
    /// The memory map blocked threads' stacks are scanned with.
    maps: Maps,
    /// The threads of the last listing of `/proc/self/task`, the shim's live count then, and
    /// looks since.
    tids: Vec<u32>,
    listed_live: i32,
    looks_since_list: u32,
    /// Looks taken, and what the rotation of the threads past [`MAX_FOLLOWED`] did.
    looks: u64,
    rotation: Rotation,
    /// The thread in rotation whose files are open (see [`ROTATING`]).
    rotating: Option<usize>,
}

/// Hashes a tid with one multiplication by an odd constant (Fibonacci hashing): tids are
/// distinct small integers, and SipHash, std's default, took a tenth of a steady look.
#[derive(Default)]
struct TidHasher(u64);

impl std::hash::Hasher for TidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(FIBONACCI);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(FIBONACCI);
    }
}

/// 2^64 divided by the golden ratio, made odd.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

/// How the threads followed without kept descriptors were read, said in a note at the end.
#[derive(Default)]
struct Rotation {
    /// Most such threads at once.
    most: usize,
    /// Looks at one that opened its files (it had run since it was last read), and looks that
    /// found by its CPU clock that it had not.
    opened: u64,
    still: u64,
}

impl Sampler {
    /// A sampler every `interval_ns` (0: none).
    pub fn new(interval_ns: u64, own_tid: u32) -> Option<Sampler> {
        if interval_ns == 0 {
            return None;
        }
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Some(Sampler {
            interval_ns,
            paced_ns: interval_ns,
            look_ns: 0,
            task_dir: None,
            stat: None,
            followed: Vec::new(),
            index: Default::default(),
            own_tid,
            cpus: Vec::new(),
            last_cpu_ns: 0,
            tick_ns: 1_000_000_000 / hz,
            buf: vec![0u8; 64 * 1024],
            broken: false,
            maps: Maps::default(),
            tids: Vec::new(),
            listed_live: 0,
            looks_since_list: 0,
            looks: 0,
            rotation: Rotation::default(),
            rotating: None,
        })
    }

    /// A look took `spent_ns` of CPU: the interval until the next one (see [`BUDGET_SHARE`]).
    /// The mean weighs the latest look by 1/8, so that one dear look (the first, which opens
    /// every thread's files) stretches the interval little.
    pub fn paced(&mut self, spent_ns: u64) -> u64 {
        self.look_ns = (self.look_ns.saturating_mul(7).saturating_add(spent_ns)) / 8;
        self.paced_ns = paced_interval(self.interval_ns, self.look_ns);
        self.paced_ns
    }

    /// The sampler cannot go on (`why`): it says so in the log, with when, so that the report
    /// tells which span the thread states cover.
    fn stop(&mut self, tr: &Tracker, now: u64, why: String) {
        self.broken = true;
        tr.log.write(
            &waitshim_format::Note {
                ns: now,
                level: waitshim_format::note_level::WARNING,
                text: format!(
                    "the sampler stopped: {why}; thread states, idle CPUs and lost parallelism \
                     cover the run up to here"
                ),
            }
            .into(),
        );
    }

    /// The tids of the process's threads, from `/proc/self/task`.
    fn tids(&mut self) -> Option<Vec<u32>> {
        // Closed by the program and its number given to a file of its own: that file is not
        // rewound nor read; the directory is opened again.
        if let Some(fd) = self.task_dir.filter(|&fd| !intact(fd)) {
            release(fd);
            self.task_dir = None;
            TASK_DIR.store(-1, Ordering::Relaxed);
        }
        if self.task_dir.is_none() {
            let c = c"/proc/self/task";
            // SAFETY: a NUL-terminated path; our own descriptor.
            let fd = unsafe {
                libc::open(
                    c.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return None;
            }
            let high = out_of_the_way(fd)?;
            if !keep(high) {
                // SAFETY: ours, not kept.
                unsafe { libc::close(high) };
                return None;
            }
            self.task_dir = Some(high);
            TASK_DIR.store(high, Ordering::Relaxed);
        }
        let fd = self.task_dir?;
        // SAFETY: rewinding our own directory descriptor.
        unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
        let mut tids = Vec::new();
        loop {
            // SAFETY: getdents64 into our own buffer.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    fd,
                    self.buf.as_mut_ptr(),
                    self.buf.len(),
                )
            };
            if n <= 0 {
                break;
            }
            let mut off = 0usize;
            let n = n as usize;
            // linux_dirent64: ino u64, off i64, reclen u16, type u8, name NUL-terminated.
            while off + 19 < n {
                let reclen = u16::from_ne_bytes([self.buf[off + 16], self.buf[off + 17]]) as usize;
                if reclen == 0 || off + reclen > n {
                    break;
                }
                let name = &self.buf[off + 19..off + reclen];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                if let Some(tid) = std::str::from_utf8(name).ok().and_then(|s| s.parse().ok()) {
                    tids.push(tid);
                }
                off += reclen;
            }
        }
        Some(tids)
    }

    /// One sample: the threads' states and, when due, the CPUs'.
    pub fn sample(&mut self, tr: &Tracker) {
        self.look(tr, 0);
    }

    /// The last look, as the process ends (asked by the exiting thread `requester`, which
    /// waits for it: its state stays the one seen before, not that wait): what the threads
    /// ran since the previous look, which would be lost otherwise, with their context
    /// switches, and the CPUs.
    pub fn last_look(&mut self, tr: &Tracker, requester: u32) {
        self.last_cpu_ns = 0;
        self.look(tr, requester);
    }

    fn look(&mut self, tr: &Tracker, requester: u32) {
        if self.broken {
            return;
        }
        let last = requester != 0;
        let now = now_ns();
        if let Some(why) = proc_withdrawn() {
            self.stop(tr, now, why);
            return;
        }
        // The directory is listed again when a thread started or ended (the shim's count of
        // live threads moved) and every tenth look (threads the shim did not see created);
        // in between the last list serves, less the threads found gone.
        let live = tr.live_threads();
        if self.tids.is_empty() || live != self.listed_live || self.looks_since_list >= 10 {
            let Some(tids) = self.tids() else {
                let e = std::io::Error::last_os_error();
                self.stop(tr, now, format!("it cannot list /proc/self/task ({e})"));
                return;
            };
            self.tids = tids;
            self.listed_live = live;
            self.looks_since_list = 0;
        } else {
            self.looks_since_list += 1;
        }
        let tids = std::mem::take(&mut self.tids);
        let mut entries = Vec::new();
        let mut chains = Vec::new();
        // Taken for the look (the loop below borrows the sampler), and put back after it.
        let mut maps = std::mem::take(&mut self.maps);
        maps.look_begins();
        let mut scans = SCANS_PER_LOOK;
        let mut switches = Vec::new();
        let mut unsampled = 0u32;
        let mut seen = vec![false; self.followed.len()];
        self.looks += 1;
        self.ask_rotated_clocks();
        let mut kept = self.kept();
        let mut ended = Vec::new();
        let mut no_room = false;
        for &tid in &tids {
            if tid == self.own_tid {
                continue;
            }
            let i = match self.index.get(&tid) {
                Some(&i) => i,
                None => {
                    let Some(f) = follow(tid, kept < MAX_FOLLOWED) else {
                        // Ended since the listing: not followed, and not listed again.
                        ended.push(tid);
                        continue;
                    };
                    kept += usize::from(f.kept);
                    self.followed.push(f);
                    seen.push(false);
                    self.index.insert(tid, self.followed.len() - 1);
                    self.followed.len() - 1
                }
            };
            seen[i] = true;
            if !self.followed[i].kept && kept < MAX_FOLLOWED && !no_room {
                // A kept thread ended since this one went into rotation: it takes the place
                // (tried once a look when the process is out of descriptors).
                let f = &mut self.followed[i];
                match open_kept(tid) {
                    Ok((schedstat, syscall)) => {
                        (f.schedstat, f.syscall, f.kept) = (schedstat, syscall, true);
                        kept += 1;
                    }
                    Err(e) => no_room = !gone(e),
                }
            }
            if !self.followed[i].kept {
                match self.open_for_look(i) {
                    Turn::Read => {}
                    Turn::Unchanged => {
                        let f = &mut self.followed[i];
                        blocked_chain(tr, f, now, &mut maps, &mut scans, &mut chains);
                        continue;
                    }
                    Turn::NotDue => {
                        unsampled += 1;
                        continue;
                    }
                    Turn::Gone => {
                        // Dropped below, as the threads the listing no longer has.
                        seen[i] = false;
                        continue;
                    }
                }
            }
            let f = &mut self.followed[i];
            if !f.registered {
                f.registered = tr.is_registered(tid);
            }
            // The thread's CPU clock first: a third of the cost of its schedstat, and the same
            // answer to "did it run since the last look" (its run delay, the other figure, grows
            // only as it gets a CPU). Unchanged: where it was, as below. A thread without kept
            // descriptors had its clock asked at the start of this look (`clock_now`).
            let clock = match f.clock_now {
                Some(now) if !f.kept => Some(now),
                _ => crate::clock::cpu_ns_of(tid),
            };
            if f.still(clock) {
                blocked_chain(tr, f, now, &mut maps, &mut scans, &mut chains);
                continue;
            }
            f.clock = clock;
            let Some((on_cpu, delay, slices)) =
                pread_kept(f.schedstat, &mut self.buf).and_then(parse_schedstat)
            else {
                seen[i] = false;
                continue;
            };
            // A thread that neither ran nor waited for a CPU since the last look is where it
            // was (to change state it must run): its syscall file, the costly read, is skipped.
            if f.written && on_cpu == f.on_cpu && delay == f.delay {
                blocked_chain(tr, f, now, &mut maps, &mut scans, &mut chains);
                continue;
            }
            let mut arg1 = 0;
            let sys = if tid == requester {
                // Waiting for this look: its state is the one seen before (or running).
                None
            } else {
                let Some(text) = pread_kept(f.syscall, &mut self.buf) else {
                    seen[i] = false;
                    continue;
                };
                f.sp_pc = parse_stack_of(text).unwrap_or((0, 0));
                arg1 = parse_second_arg(text);
                parse_syscall(text)
            };
            let (kind, object_id) = if tid == requester {
                (0, 0)
            } else {
                tr.tracked_wait_of(tid).unwrap_or((0, 0))
            };
            let (state, nr, arg0) = match sys {
                None => (thread_state::RUNNING, -1, 0),
                Some((nr, arg0)) if kind != 0 => (thread_state::TRACKED_WAIT, nr, arg0),
                Some((nr, arg0)) => (thread_state::BLOCKED, nr, arg0),
            };
            let (kind, object_id) = if state == thread_state::TRACKED_WAIT {
                (kind, object_id)
            } else {
                (0, 0)
            };
            // For `openat` the first argument is the directory: the path's address tells one
            // open from the next.
            let key_arg = if cfg!(target_arch = "x86_64") && nr == 257 {
                arg1
            } else {
                arg0
            };
            let now_state = if tid == requester && f.written {
                f.last
            } else {
                (state, kind, nr, key_arg, object_id)
            };
            let (d_cpu, d_delay, d_slices) = (
                on_cpu.saturating_sub(f.on_cpu),
                delay.saturating_sub(f.delay),
                slices.saturating_sub(f.slices),
            );
            // The longest timeslice, estimated: the mean slice of the interval (the kernel
            // gives no single slices). The switches from `status`, at most every
            // STATUS_EVERY_NS per thread (and at the last look), when it ran.
            if let Some(mean) = d_cpu.checked_div(d_slices) {
                f.longest_slice_ns = f.longest_slice_ns.max(mean);
            }
            let every = if f.kept {
                STATUS_EVERY_NS
            } else {
                ROTATED_STATUS_EVERY_NS
            };
            if d_cpu != 0 && (last || now.saturating_sub(f.status_ns) >= every) {
                switches.extend(read_switches(f, &mut self.buf, now, on_cpu));
            }
            if !f.written || now_state != f.last || d_cpu != 0 || d_delay != 0 {
                let what = if state == thread_state::BLOCKED && (now_state != f.last || !f.written)
                {
                    with_run_state(describe(tid, nr, arg0, arg1), tid)
                } else {
                    String::new()
                };
                if now_state != f.last || !f.written {
                    // A new state: a new blocked wait, for the policy to look at.
                    if state == thread_state::BLOCKED {
                        f.blocked_since = now;
                        f.blocked_what.clone_from(&what);
                        f.ask = Ask::Undecided;
                    } else {
                        f.ask = Ask::Done;
                    }
                }
                entries.push(ThreadState {
                    tid,
                    state,
                    waiting_kind: kind,
                    on_cpu_ns: d_cpu,
                    run_delay_ns: d_delay,
                    timeslices: d_slices.min(u64::from(u32::MAX)) as u32,
                    syscall: nr,
                    arg0,
                    what,
                    object_id,
                });
                f.written = true;
                f.last = now_state;
            }
            (f.on_cpu, f.delay, f.slices) = (on_cpu, delay, slices);
            blocked_chain(tr, f, now, &mut maps, &mut scans, &mut chains);
        }
        self.maps = maps;
        if last {
            // As the process ends, the counts of every thread that ran since its `status` was
            // read (one whose counts were read as it ran, and that blocked before a later look):
            // what the report has of a thread that does not end before the process.
            self.close_rotated();
            for (f, _) in self.followed.iter_mut().zip(&seen).filter(|(_, &s)| s) {
                if f.written && f.on_cpu != f.status_cpu {
                    let on_cpu = f.on_cpu;
                    switches.extend(read_switches(f, &mut self.buf, now, on_cpu));
                    close_rotating();
                }
            }
        }
        // What the highwater's serialised rule counts as not ready to run besides the waits the
        // shim tracks (threads it registered: the others are not in its live count).
        let elsewhere = self
            .followed
            .iter()
            .zip(&seen)
            .filter(|(f, &seen)| seen && f.last.0 == thread_state::BLOCKED && f.registered)
            .count();
        tr.set_blocked_elsewhere(elsewhere);
        self.close_rotated();
        PAST_CAP.store(self.followed.iter().any(|f| !f.kept), Ordering::Relaxed);
        if last {
            self.say_rotation(tr);
        }
        // Threads gone since the last look: their descriptors go.
        let mut tids = tids;
        tids.retain(|t| !ended.contains(t));
        let mut i = 0;
        while i < self.followed.len() {
            if seen[i] {
                i += 1;
                continue;
            }
            let f = self.followed.swap_remove(i);
            self.index.remove(&f.tid);
            if let Some(moved) = self.followed.get(i) {
                self.index.insert(moved.tid, i);
            }
            tids.retain(|&t| t != f.tid);
            seen.swap_remove(i);
            if f.kept {
                forget_schedstat(f.tid);
                release(f.schedstat);
                release(f.syscall);
            }
            if let Some(fd) = f.status {
                release(fd);
            }
        }
        self.tids = tids;
        if !entries.is_empty() || unsampled != 0 {
            tr.log.write(
                &ThreadSamples {
                    ns: now,
                    // The gap since the previous look: what a sampled wait's ends are
                    // known to within.
                    interval_ns: self.paced_ns,
                    threads: entries,
                    unsampled,
                }
                .into(),
            );
        }
        // After the samples: a chain belongs to the wait its thread's entry began.
        for c in chains {
            tr.log.write(&c.into());
        }
        if !switches.is_empty() {
            tr.log.write(
                &ThreadSwitches {
                    ns: now,
                    threads: switches,
                }
                .into(),
            );
        }
        if now.saturating_sub(self.last_cpu_ns) >= CPU_EVERY_NS {
            self.last_cpu_ns = now;
            self.sample_cpus(tr, now);
        }
    }

    /// Threads followed with kept descriptors.
    fn kept(&self) -> usize {
        self.followed.iter().filter(|f| f.kept).count()
    }

    /// Asks the CPU clock of each thread followed without kept descriptors that a look read
    /// before (about 200 ns each): [`Self::open_for_look`] opens the files of those that ran.
    fn ask_rotated_clocks(&mut self) {
        let mut rotated = 0;
        for f in self.followed.iter_mut().filter(|f| !f.kept) {
            rotated += 1;
            if f.looked_at != 0 {
                f.clock_now = crate::clock::cpu_ns_of(f.tid);
            }
        }
        self.rotation.most = self.rotation.most.max(rotated);
    }

    /// Opens the files of followed thread `i`, one without kept descriptors, unless its CPU
    /// clock says it has not run since a look last read them: plain descriptors, closed before
    /// the next thread's are opened and at the look's end (a moment at a low number, as when
    /// a kept one is opened). Whether it is to be read.
    fn open_for_look(&mut self, i: usize) -> Turn {
        self.close_rotated();
        let looks = self.looks;
        let f = &mut self.followed[i];
        // First seen: read at the first look that finds it. After that: not run since it was
        // last read, where it was (nothing to open); run, read again.
        if f.looked_at != 0 && f.still(f.clock_now) {
            f.looked_at = looks;
            self.rotation.still += 1;
            return Turn::Unchanged;
        }
        let base = format!("/proc/self/task/{}/", f.tid);
        let opened = open_rotating(&(base.clone() + "schedstat"), 0).and_then(|schedstat| {
            open_rotating(&(base + "syscall"), 1).map(|syscall| (schedstat, syscall))
        });
        let (schedstat, syscall) = match opened {
            Ok(fds) => fds,
            Err(e) => {
                close_rotating();
                return if gone(e) { Turn::Gone } else { Turn::NotDue };
            }
        };
        (f.schedstat, f.syscall) = (schedstat, syscall);
        f.looked_at = looks;
        self.rotating = Some(i);
        self.rotation.opened += 1;
        Turn::Read
    }

    /// Closes the descriptors opened for the thread in rotation being read, if any.
    fn close_rotated(&mut self) {
        if let Some(f) = self.rotating.take().and_then(|i| self.followed.get_mut(i)) {
            (f.schedstat, f.syscall) = (-1, -1);
        }
        close_rotating();
    }

    /// At the last look: a note of how the threads past [`MAX_FOLLOWED`] were sampled, if any
    /// were.
    fn say_rotation(&self, tr: &Tracker) {
        let r = &self.rotation;
        if r.most == 0 {
            return;
        }
        tr.log.write(
            &waitshim_format::Note {
                ns: now_ns(),
                level: waitshim_format::note_level::INFO,
                text: format!(
                    "sampler: {} threads at most beyond the {MAX_FOLLOWED} it keeps descriptors \
                     for were sampled without them, at each of the {} looks: by their CPU clock \
                     when they had not run since the last ({} times), by opening and reading \
                     their files when they had ({} times)",
                    r.most, self.looks, r.still, r.opened
                ),
            }
            .into(),
        );
    }

    fn sample_cpus(&mut self, tr: &Tracker, now: u64) {
        if let Some(fd) = self.stat.filter(|&fd| !intact(fd)) {
            release(fd);
            self.stat = None;
        }
        if self.stat.is_none() {
            self.stat = open_high("/proc/stat");
        }
        let Some(fd) = self.stat else { return };
        let Some(text) = pread_all(fd, &mut self.buf) else {
            return;
        };
        let cpus = parse_cpus(text);
        if self.cpus.is_empty() && !cpus.is_empty() {
            // Dates the start of the span the next record covers.
            tr.log.write(
                &CpuSample {
                    ns: now,
                    idle_ns: vec![0; cpus.len()],
                    iowait_ns: vec![0; cpus.len()],
                }
                .into(),
            );
        } else if self.cpus.len() == cpus.len() {
            let tick = self.tick_ns;
            let idle = cpus
                .iter()
                .zip(&self.cpus)
                .map(|(n, o)| n.0.saturating_sub(o.0) * tick)
                .collect();
            let iowait = cpus
                .iter()
                .zip(&self.cpus)
                .map(|(n, o)| n.1.saturating_sub(o.1) * tick)
                .collect();
            tr.log.write(
                &CpuSample {
                    ns: now,
                    idle_ns: idle,
                    iowait_ns: iowait,
                }
                .into(),
            );
        }
        self.cpus = cpus;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> u32 {
        crate::track::threads::gettid()
    }

    #[test]
    fn the_interval_stretches_only_when_looks_cost_more_than_the_budget() {
        // 10 ms asked: looks of 50 µs are 0.5 % of a CPU, kept; looks of 300 µs would be 3 %.
        assert_eq!(paced_interval(10_000_000, 50_000), 10_000_000);
        assert_eq!(paced_interval(10_000_000, 300_000), 30_000_000);
        assert_eq!(paced_interval(10_000_000, 100_000_000), MAX_INTERVAL_NS);
        assert_eq!(paced_interval(2_000_000_000, 100_000_000), 2_000_000_000);
        let mut s = Sampler::new(10_000_000, 1).unwrap();
        // One dear first look moves the mean by an eighth.
        assert_eq!(s.paced(2_000_000), 25_000_000);
        let mut last = 0;
        for _ in 0..60 {
            last = s.paced(300_000);
        }
        assert!((29_000_000..=31_000_000).contains(&last), "{last}");
        for _ in 0..60 {
            last = s.paced(20_000);
        }
        assert_eq!(last, 10_000_000);
    }

    #[test]
    fn a_blocked_threads_cpu_clock_is_its_schedstat_time_and_stays_still() {
        let (tx, rx) = std::sync::mpsc::channel::<u32>();
        let (back_tx, back_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            back_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        // Asleep in recv (its syscall file says so) before it is measured.
        let path = format!("/proc/self/task/{tid}/syscall");
        while std::fs::read_to_string(&path).is_ok_and(|s| s.starts_with("running")) {
            std::thread::yield_now();
        }
        let clock = crate::clock::cpu_ns_of(tid).expect("a live thread's clock");
        let stat = std::fs::read(format!("/proc/self/task/{tid}/schedstat")).unwrap();
        let (on_cpu, _, _) = parse_schedstat(&stat).unwrap();
        assert_eq!(clock, on_cpu);
        assert_eq!(crate::clock::cpu_ns_of(tid), Some(clock), "it did not run");
        back_tx.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(
            crate::clock::cpu_ns_of(u32::MAX - 1),
            None,
            "no such thread: no clock"
        );
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        let before = crate::clock::cpu_ns_of(me).unwrap();
        let mut x = 0u64;
        while crate::clock::cpu_ns_of(me).unwrap() == before {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[test]
    fn a_thread_that_ended_before_its_files_were_opened_is_not_followed() {
        // No thread has this tid (above the kernel's pid_max limit of 2^22).
        assert!(follow(u32::MAX - 1, true).is_none());
        assert!(follow(u32::MAX - 1, false).is_some_and(|f| !f.kept));
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        let f = follow(me, true).expect("this thread is alive");
        assert!(f.kept && f.schedstat >= 0 && f.syscall >= 0);
        assert_eq!(schedstat_of(me), Some(f.schedstat));
        forget_schedstat(me);
        release(f.schedstat);
        release(f.syscall);
    }

    /// Checked against the kernel on this thread: its schedstat read while it runs has one
    /// timeslice more than its switches. Sleeps give it switches to count; a reading that a
    /// preemption fell between (the two schedstat readings differ) is taken again.
    #[test]
    fn a_running_threads_timeslices_are_its_switches_plus_one() {
        let slices = || {
            let text = std::fs::read("/proc/thread-self/schedstat").expect("schedstat");
            parse_schedstat(&text).expect("parsed").2
        };
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        for _ in 0..1000 {
            let before = slices();
            let status = std::fs::read("/proc/thread-self/status").expect("status");
            let (voluntary, involuntary) = parse_switches(&status).expect("switches");
            if slices() == before {
                assert!(voluntary >= 3);
                assert_eq!(slices_from_switches(voluntary, involuntary), before);
                return;
            }
        }
        panic!("preempted between the readings a thousand times");
    }

    #[test]
    fn schedstat_gives_cpu_time_run_delay_and_slices() {
        assert_eq!(
            parse_schedstat(b"839382 2921770 2\n"),
            Some((839382, 2921770, 2))
        );
        assert_eq!(parse_schedstat(b"12 x 3"), None);
        assert_eq!(parse_schedstat(b""), None);
    }

    #[test]
    fn the_syscall_file_tells_running_from_blocked_and_in_which_call() {
        assert_eq!(parse_syscall(b"running\n"), None);
        assert_eq!(
            parse_syscall(b"0 0x3 0x7f7aae3aa000 0x20000 0x0 0x0 0x0 0x7fff18 0x7f7aae\n"),
            Some((0, 3))
        );
        assert_eq!(
            parse_syscall(b"230 0x0 0x0 0x7ffdc04137b0 0x7ffdc04137f0 0x0 0x1 0x7ffd 0x7f6d\n"),
            Some((230, 0))
        );
        assert_eq!(parse_syscall(b"-1 0x7ffd 0x7f6d\n"), Some((-1, 0)));
    }

    #[test]
    fn a_blocked_threads_stack_pointer_and_program_counter_are_the_last_two_fields() {
        assert_eq!(
            parse_stack_of(b"0 0x3 0x7f7aae3aa000 0x20000 0x0 0x0 0x0 0x7fff18 0x7f7aae\n"),
            Some((0x7fff18, 0x7f7aae))
        );
        assert_eq!(parse_stack_of(b"running\n"), None);
        assert_eq!(
            parse_stack_of(b"-1 0x7ffd 0x7f6d\n"),
            None,
            "blocked outside a call: no chain is scanned"
        );
    }

    #[test]
    fn intervals_are_written_as_the_environment_takes_them() {
        assert_eq!(interval_text(0), "off");
        assert_eq!(interval_text(10_000_000), "10ms");
        assert_eq!(interval_text(2_500_000), "2500us");
        for ns in [10_000_000, 2_500_000, 0] {
            assert_eq!(crate::config::parse_sample(&interval_text(ns)), Ok(ns));
        }
    }

    #[test]
    fn status_gives_the_voluntary_and_involuntary_context_switches() {
        let text = b"Name:\tworker\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t150\n\
nonvoluntary_ctxt_switches:\t545\n";
        assert_eq!(parse_switches(text), Some((150, 545)));
        assert_eq!(parse_switches(b"Name:\tx\n"), None);
        let own = std::fs::read("/proc/thread-self/status").unwrap();
        assert!(parse_switches(&own).is_some());
    }

    #[test]
    fn a_threads_stat_gives_its_state_letter_and_last_cpu_whatever_its_name() {
        let line = b"4242 (a (b) c) D 4200 4200 1000 34816 4242 4194368 120 0 0 0 15 3 0 0 20 0 \
5 0 987654 10485760 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(parse_stat(line), Some(('D', 1)));
        assert_eq!(parse_stat(b"12 (x) S 1 2"), None);
        assert_eq!(parse_stat(b"garbage"), None);
        let own = std::fs::read("/proc/thread-self/stat").unwrap();
        let (state, _) = parse_stat(&own).unwrap();
        assert_eq!(state, 'R', "the test itself runs");
        assert_eq!(
            run_state_words('D'),
            Some("uninterruptible: disk or other I/O")
        );
        assert_eq!(run_state_words('S'), None);
        // A thread that is not there: what it waits on, unchanged.
        assert_eq!(with_run_state("pipe:[1]".into(), u32::MAX), "pipe:[1]");
    }

    #[test]
    fn proc_stat_gives_each_cpus_idle_and_iowait_ticks() {
        let text = b"cpu  1971640 164873 100994 336418 1764 0 1085 1554 0 0\n\
cpu0 986668 82091 50427 167741 1050 0 450 777 0 0\n\
cpu1 984972 82781 50566 168676 713 0 635 777 0 0\n\
intr 1 2 3\n";
        assert_eq!(parse_cpus(text), vec![(167741, 1050), (168676, 713)]);
    }

    #[test]
    fn a_loopback_listener_and_a_connected_socket_are_named_by_their_addresses() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(
            socket_text(l.as_raw_fd()).unwrap(),
            format!("tcp 127.0.0.1:{port} listening")
        );
        let text = socket_text(c.as_raw_fd()).unwrap();
        assert!(
            text.starts_with("tcp 127.0.0.1:") && text.ends_with(&format!(" -> 127.0.0.1:{port}")),
            "{text}"
        );
        if cfg!(target_arch = "x86_64") {
            let what = describe(me(), 43, l.as_raw_fd() as u64, 0);
            assert!(
                what.starts_with("socket:[") && what.ends_with("listening"),
                "{what}"
            );
            assert_eq!(
                describe(me(), 202, 0x1000, 0),
                "untracked futex word 0x1000"
            );
            assert_eq!(describe(me(), 61, u64::MAX, 0), "any child");
        }
    }

    /// Measurement for docs/report.md (ignored by default): what a look costs per thread, reading
    /// `schedstat` and `syscall` with `pread` on kept descriptors against opening, reading and
    /// closing them, as the threads in rotation are, and against asking only the thread's CPU
    /// clock, as for a thread that has not run since the last look. 100 threads blocked in a
    /// channel's recv; 40 rounds, the three ways taking turns going first; the median of each,
    /// in ns of the looking thread's CPU time per thread per look.
    /// `cargo test --release -p waitshim-shim --lib -- --ignored --nocapture look_cost`
    #[test]
    #[ignore]
    fn look_cost_pread_on_kept_descriptors_against_open_read_close() {
        const THREADS: usize = 100;
        let (tx, rx) = std::sync::mpsc::channel::<u32>();
        let mut stops = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..THREADS {
            let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
            let tx = tx.clone();
            handles.push(std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tx.send(unsafe { libc::gettid() } as u32).unwrap();
                let _ = stop_rx.recv();
            }));
            stops.push(stop_tx);
        }
        let tids: Vec<u32> = (0..THREADS).map(|_| rx.recv().unwrap()).collect();
        let paths: Vec<(String, String)> = tids
            .iter()
            .map(|t| {
                (
                    format!("/proc/self/task/{t}/schedstat"),
                    format!("/proc/self/task/{t}/syscall"),
                )
            })
            .collect();
        let kept: Vec<(i32, i32)> = paths
            .iter()
            .map(|(a, b)| (open_plain(a).unwrap(), open_plain(b).unwrap()))
            .collect();
        let mut buf = vec![0u8; 4096];
        let pread_look = |buf: &mut Vec<u8>| {
            let start = crate::clock::thread_cpu_ns();
            for &(a, b) in &kept {
                assert!(pread_all(a, buf).and_then(parse_schedstat).is_some());
                assert!(pread_all(b, buf).is_some());
            }
            crate::clock::thread_cpu_ns() - start
        };
        let open_look = |buf: &mut Vec<u8>| {
            let start = crate::clock::thread_cpu_ns();
            for (a, b) in &paths {
                let (a, b) = (open_plain(a).unwrap(), open_plain(b).unwrap());
                assert!(pread_all(a, buf).and_then(parse_schedstat).is_some());
                assert!(pread_all(b, buf).is_some());
                close_plain(a);
                close_plain(b);
            }
            crate::clock::thread_cpu_ns() - start
        };
        // What a look at a thread that has not run since the last costs: its CPU clock only.
        let clock_look = || {
            let start = crate::clock::thread_cpu_ns();
            for &t in &tids {
                assert!(crate::clock::cpu_ns_of(t).is_some());
            }
            crate::clock::thread_cpu_ns() - start
        };
        let (mut kept_ns, mut opened_ns, mut clock_ns) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..40 {
            match round % 3 {
                0 => {
                    kept_ns.push(pread_look(&mut buf));
                    opened_ns.push(open_look(&mut buf));
                    clock_ns.push(clock_look());
                }
                1 => {
                    opened_ns.push(open_look(&mut buf));
                    clock_ns.push(clock_look());
                    kept_ns.push(pread_look(&mut buf));
                }
                _ => {
                    clock_ns.push(clock_look());
                    kept_ns.push(pread_look(&mut buf));
                    opened_ns.push(open_look(&mut buf));
                }
            }
        }
        let median = |v: &mut Vec<u64>| {
            v.sort_unstable();
            v[v.len() / 2] / THREADS as u64
        };
        let (k, o, c) = (
            median(&mut kept_ns),
            median(&mut opened_ns),
            median(&mut clock_ns),
        );
        println!(
            "look cost per thread, median of 40 looks at {THREADS} threads, the three ways \
             taking turns: schedstat + syscall by pread on kept descriptors {k} ns, by \
             open/read/close {o} ns ({:.1}x); the CPU clock alone (a thread that has not run) \
             {c} ns ({:.1}x less than pread)",
            o as f64 / k.max(1) as f64,
            k as f64 / c.max(1) as f64
        );
        for &(a, b) in &kept {
            close_plain(a);
            close_plain(b);
        }
        drop(stops);
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn a_thread_blocked_opening_a_fifo_is_named_by_the_path_it_opens() {
        let dir = std::env::temp_dir().join(format!("waitshim-fifo-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let fifo = dir.join("go");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        let opener = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            // Blocks in openat until a writer opens the other end.
            std::fs::File::open(path).map(|_| ())
        });
        let tid = rx.recv().unwrap();
        let file = format!("/proc/self/task/{tid}/syscall");
        let text = loop {
            let text = std::fs::read(&file).unwrap();
            if parse_syscall(&text).is_some_and(|(nr, _)| nr == 257 || nr == 2) {
                break text;
            }
            assert!(!opener.is_finished(), "the opener did not block");
            std::thread::yield_now();
        };
        let (nr, arg0) = parse_syscall(&text).unwrap();
        let what = describe(me(), nr, arg0, parse_second_arg(&text));
        assert_eq!(what, fifo.display().to_string());
        // A pointer to nowhere is not read.
        assert_eq!(opened_path(257, libc::AT_FDCWD as u64, 8), None);
        std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        opener.join().unwrap().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_epoll_sets_watched_descriptors_are_named_as_many_as_fit() {
        let mut fds = [0i32; 2];
        // SAFETY: pipe into a local array of two.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let one = watched_text(me(), &fds[..1]);
        assert!(
            one.starts_with(&format!(" watching fd {} pipe:[", fds[0])),
            "{one}"
        );
        let many = watched_text(me(), &[fds[0]; 40]);
        assert!(many.starts_with(" watching fds "), "{many}");
        assert!(many.ends_with(" more") && many.len() <= 180, "{many}");
        assert_eq!(watched_text(me(), &[]), "");
        for fd in fds {
            // SAFETY: ours.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn read_and_accept_take_a_descriptor_first_and_futex_does_not() {
        if cfg!(target_arch = "x86_64") {
            assert!(takes_fd(0) && takes_fd(43) && takes_fd(232));
            assert!(!takes_fd(202) && !takes_fd(230) && !takes_fd(-1));
        }
    }
}
