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
use crate::procmaps::Mapping;
use crate::track::threads::ThreadRec;
use crate::track::Tracker;
use crate::wants::{Act, Facts};

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

/// Every descriptor the sampler holds, so that a forked child can close them (the thread that
/// owns the sampler does not come along). -1: free.
static FDS: [AtomicI32; 3 * MAX_FOLLOWED + 2] =
    [const { AtomicI32::new(-1) }; 3 * MAX_FOLLOWED + 2];

/// The file each descriptor in [`FDS`] was kept for, (st_dev, st_ino), beside its slot. While
/// the shim shares the program's table, the program may close a kept descriptor (`close_range`,
/// `closefrom`) and get its number again for a file of its own: before a kept descriptor is
/// read, rewound or closed, it is checked to be still the one kept ([`intact`]), as the log's
/// is.
static IDS: [(AtomicU64, AtomicU64); 3 * MAX_FOLLOWED + 2] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; 3 * MAX_FOLLOWED + 2];

/// Whether `fd` may be used as the sampler's: always in the shim thread's own table (the program
/// cannot reach it); in the program's, unless it is a kept descriptor whose number now names
/// another file. A descriptor not kept (opened for the moment by this look) is the sampler's.
fn intact(fd: i32) -> bool {
    if crate::fdtable::own() {
        return true;
    }
    match FDS.iter().position(|s| s.load(Ordering::Acquire) == fd) {
        Some(i) => {
            let want = (
                IDS[i].0.load(Ordering::Acquire),
                IDS[i].1.load(Ordering::Acquire),
            );
            crate::log::file_id(fd) == Some(want)
        }
        None => true,
    }
}

/// [`pread_all`] of a descriptor the sampler keeps, if it is still the one kept ([`intact`]).
fn pread_kept(fd: i32, buf: &mut [u8]) -> Option<&[u8]> {
    if intact(fd) {
        pread_all(fd, buf)
    } else {
        None
    }
}

/// Set while the sampler follows threads without kept descriptors (past [`MAX_FOLLOWED`]): a
/// thread that ends without one then writes its totals from its own clock ([`thread_ending`]).
static PAST_CAP: AtomicBool = AtomicBool::new(false);

/// The `schedstat` descriptor of each thread followed, by tid (0: free), for the thread itself
/// to read at its end ([`thread_ending`]). A thread's entry is published after its descriptor
/// is kept and cleared before it is closed, which happens only once a listing of the process's
/// threads no longer has it: after it ended, never while its end is being read.
static SCHEDSTAT_OF: [(AtomicU32, AtomicI32); MAX_FOLLOWED] =
    [const { (AtomicU32::new(0), AtomicI32::new(-1)) }; MAX_FOLLOWED];

fn publish_schedstat(tid: u32, fd: i32) {
    for (t, f) in SCHEDSTAT_OF.iter() {
        if t.load(Ordering::Relaxed) == 0 {
            f.store(fd, Ordering::Relaxed);
            t.store(tid, Ordering::Release);
            return;
        }
    }
}

fn forget_schedstat(tid: u32) {
    for (t, f) in SCHEDSTAT_OF.iter() {
        if t.load(Ordering::Relaxed) == tid {
            f.store(-1, Ordering::Relaxed);
            t.store(0, Ordering::Release);
        }
    }
}

fn schedstat_of(tid: u32) -> Option<i32> {
    SCHEDSTAT_OF
        .iter()
        .find(|(t, _)| t.load(Ordering::Acquire) == tid)
        .map(|(_, f)| f.load(Ordering::Relaxed))
        .filter(|&fd| fd >= 0)
}

fn keep(fd: i32) -> bool {
    let id = crate::log::file_id(fd).unwrap_or((0, 0));
    for (slot, (dev, ino)) in FDS.iter().zip(IDS.iter()) {
        if slot
            .compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            dev.store(id.0, Ordering::Release);
            ino.store(id.1, Ordering::Release);
            return true;
        }
    }
    false
}

/// Forgets kept descriptor `fd` and closes it, unless its number now names a file of the
/// program's ([`intact`]): that one is only forgotten.
fn release(fd: i32) {
    let ours = intact(fd);
    for slot in FDS.iter() {
        if slot
            .compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            if ours {
                // SAFETY: our own descriptor, forgotten first.
                unsafe { libc::close(fd) };
            }
            return;
        }
    }
}

/// In a forked child: the descriptors name the parent's threads. When the parent's shim thread
/// had a table of its own, the child has none of them (its table is a copy of the program's,
/// where those numbers are the program's): they are forgotten. Otherwise they are copies in
/// the child's table, and closed.
pub fn after_fork_child() {
    let copied = !crate::fdtable::own();
    TASK_DIR.store(-1, Ordering::Relaxed);
    for (t, f) in SCHEDSTAT_OF.iter() {
        f.store(-1, Ordering::Relaxed);
        t.store(0, Ordering::Relaxed);
    }
    for slot in FDS.iter() {
        let fd = slot.load(Ordering::Acquire);
        let ours = fd >= 0 && copied && intact(fd);
        slot.store(-1, Ordering::Release);
        if ours {
            // SAFETY: a descriptor the parent's sampler held, copied into this process.
            unsafe { libc::close(fd) };
        }
    }
    // Those of a thread in rotation the parent was reading as it forked: low numbers.
    if copied {
        close_rotating();
    } else {
        for slot in &ROTATING {
            slot.store(-1, Ordering::Relaxed);
        }
    }
    PAST_CAP.store(false, Ordering::Relaxed);
}

/// A descriptor the sampler just opened, where it may keep it: as it is in the shim's thread's
/// own table, at the high numbers when it shares the program's (None when none is free there).
fn out_of_the_way(fd: i32) -> Option<i32> {
    if crate::fdtable::own() {
        Some(fd)
    } else {
        crate::log::move_high(fd)
    }
}

/// Opens `path` read-only and moves it to the high numbers; None if it cannot be kept.
fn open_high(path: &str) -> Option<i32> {
    open_high_or_errno(path).ok()
}

/// [`open_high`], or why not: the `open` error (`ENOENT` for the file of a thread gone), or 0
/// when the descriptor could not be moved or kept.
fn open_high_or_errno(path: &str) -> Result<i32, i32> {
    let fd = open_proc(path);
    if fd < 0 {
        return Err(errno());
    }
    let high = out_of_the_way(fd).ok_or(0)?;
    if keep(high) {
        Ok(high)
    } else {
        // SAFETY: ours, not kept.
        unsafe { libc::close(high) };
        Err(0)
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Whether an `open` error under `/proc/self/task/TID/` says the thread is gone (it ended
/// between the listing of the directory and the open).
fn gone(errno: i32) -> bool {
    errno == libc::ENOENT || errno == libc::ESRCH
}

/// Reads a `/proc` file from its start into `buf`; the bytes read.
fn pread_all(fd: i32, buf: &mut [u8]) -> Option<&[u8]> {
    // SAFETY: reading into our own buffer.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    (n >= 0).then(|| &buf[..n as usize])
}

/// Why the process's own `/proc` files are no longer its to read, if they are not: a process
/// that is not root and made itself undumpable (`PR_SET_DUMPABLE` 0, or a change of user or
/// group, which does that) has them owned by root from then on. Two cheap system calls a look.
fn proc_withdrawn() -> Option<String> {
    // SAFETY: plain system calls.
    let (dumpable, euid) = unsafe {
        (
            libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0),
            libc::geteuid(),
        )
    };
    (dumpable != 1 && euid != 0).then(|| {
        "the process made itself undumpable (PR_SET_DUMPABLE 0, or a change of its user or \
         group), so its /proc files are no longer its own to read"
            .to_string()
    })
}

/// `schedstat`: time on a CPU (ns), time ready and waiting for one (ns), timeslices.
pub fn parse_schedstat(text: &[u8]) -> Option<(u64, u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let mut it = s.split_ascii_whitespace().map(|w| w.parse::<u64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// `status`: the thread's voluntary and involuntary context switches.
pub fn parse_switches(text: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let field = |name: &str| -> Option<u64> {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((
        field("voluntary_ctxt_switches:")?,
        field("nonvoluntary_ctxt_switches:")?,
    ))
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

/// The timeslices of a thread on a CPU, from its context switches: the kernel counts a
/// timeslice each time it puts a thread on a CPU and a switch (voluntary or not) each time it
/// takes one off to run another, so a running thread has had one more of the first.
pub fn slices_from_switches(voluntary: u64, involuntary: u64) -> u64 {
    voluntary.saturating_add(involuntary).saturating_add(1)
}

/// `syscall`: None while the thread runs (or is ready to); (-1, 0) blocked outside a system
/// call; (number, first argument) blocked in one.
pub fn parse_syscall(text: &[u8]) -> Option<(i32, u64)> {
    let s = std::str::from_utf8(text).ok()?.trim();
    if s.starts_with("running") || s.is_empty() {
        return None;
    }
    let mut it = s.split_ascii_whitespace();
    let nr: i32 = it.next()?.parse().ok()?;
    let arg0 = it.next().and_then(hex).unwrap_or(0);
    Some((nr, if nr < 0 { 0 } else { arg0 }))
}

/// `syscall` of a thread blocked in a system call: its second argument (0 if none).
pub fn parse_second_arg(text: &[u8]) -> u64 {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.split_ascii_whitespace().nth(2))
        .and_then(hex)
        .unwrap_or(0)
}

/// A field of `syscall`: hexadecimal, `0x` first.
fn hex(field: &str) -> Option<u64> {
    u64::from_str_radix(field.trim_start_matches("0x"), 16).ok()
}

/// The path a thread blocked in `open` or `openat` opens (the numbers are x86-64's: 2 and 257,
/// the path their first and second argument), read from the process's own memory with
/// `process_vm_readv`, which fails cleanly on an address that is not mapped. None for other
/// calls.
fn opened_path(nr: i32, arg0: u64, arg1: u64) -> Option<String> {
    let ptr = match nr {
        2 if cfg!(target_arch = "x86_64") => arg0,
        257 if cfg!(target_arch = "x86_64") => arg1,
        _ => return None,
    };
    if ptr == 0 {
        return None;
    }
    let mut buf = [0u8; 256];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // The whole buffer's worth, or, when that crosses into an unmapped page (the call reads
    // one piece whole or not at all), up to the end of the page the path starts in.
    let room = 4096 - (ptr as usize % 4096);
    let read = |len: usize| {
        let remote = libc::iovec {
            iov_base: ptr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: reads this process's memory through the kernel into a local buffer; an
        // unmapped address gives an error, not a fault.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        usize::try_from(n).ok()
    };
    let n = read(buf.len()).or_else(|| read(buf.len().min(room)))?;
    let bytes = &buf[..n];
    let path = &bytes[..bytes.iter().position(|&b| b == 0)?];
    // Not looked up (no `stat`): the file system the thread is stuck in (a network or FUSE
    // mount) would hold the sampler too.
    Some(String::from_utf8_lossy(path).into_owned())
}

/// `syscall` of a thread blocked in a system call: its stack pointer and program counter (the
/// last two of the nine fields), which a chain is scanned from.
pub fn parse_stack_of(text: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let f: Vec<&str> = s.split_ascii_whitespace().collect();
    match f.as_slice() {
        [nr, .., sp, pc] if f.len() == 9 && !nr.starts_with('-') => Some((hex(sp)?, hex(pc)?)),
        _ => None,
    }
}

/// Whether the first argument of system call `nr` is a descriptor (the numbers are x86-64's).
pub fn takes_fd(nr: i32) -> bool {
    cfg!(target_arch = "x86_64") && waitshim_format::syscalls::takes_fd(nr)
}

/// What a thread blocked in system call `nr` with first arguments `arg0` and `arg1` waits on
/// (seed 004): the path it opens, the descriptor's file, pipe or socket (with its protocol and
/// addresses: the shim is in the process, so the descriptor is its own to ask), the
/// descriptors an epoll set watches, the child a `wait4` waits for, the word of a futex the
/// shim does not track. Empty when nothing more than the call's name can be said. Called only when a thread enters the state.
///
/// The descriptors are the program's, named through thread `tid`'s view in `/proc` (the
/// sampler's thread has a table of its own: see `crate::fdtable`).
pub fn describe(tid: u32, nr: i32, arg0: u64, arg1: u64) -> String {
    let mut out = String::new();
    if let Some(path) = opened_path(nr, arg0, arg1) {
        out = path;
    } else if takes_fd(nr) {
        let fd = arg0 as i32;
        let link = std::fs::read_link(format!("/proc/self/task/{tid}/fd/{fd}"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push_str(&link);
        if link.starts_with("socket:[") {
            if let Some(s) = program_socket_text(fd) {
                out.push(' ');
                out.push_str(&s);
            }
        } else if link == "anon_inode:[eventpoll]" {
            // One open of the set's fdinfo, when the thread enters its wait.
            let info = std::fs::read_to_string(format!("/proc/self/task/{tid}/fdinfo/{fd}"))
                .unwrap_or_default();
            let watched: Vec<i32> = info
                .lines()
                .filter_map(|l| l.strip_prefix("tfd:"))
                .filter_map(|l| l.split_ascii_whitespace().next()?.parse().ok())
                .collect();
            out.push_str(&watched_text(tid, &watched));
        }
    } else if cfg!(target_arch = "x86_64") && nr == 202 {
        out = format!("untracked futex word {arg0:#x}");
    } else if cfg!(target_arch = "x86_64") && nr == 61 {
        out = match arg0 as i64 as i32 {
            -1 => "any child".to_string(),
            pid if pid > 0 => format!("child {pid}"),
            pid => format!("process group {}", -pid),
        };
    }
    out.chars().take(200).collect()
}

/// What an epoll set watches: each descriptor with what it is (a pipe, a file's path, a
/// socket with its addresses), as many as fit in the 200 characters a description keeps, then
/// how many more.
fn watched_text(tid: u32, fds: &[i32]) -> String {
    let mut out = String::new();
    if fds.is_empty() {
        return out;
    }
    out.push_str(if fds.len() == 1 {
        " watching fd"
    } else {
        " watching fds"
    });
    for (i, &fd) in fds.iter().enumerate() {
        let mut item = format!("{} {fd}", if i == 0 { "" } else { "," });
        if let Ok(link) = std::fs::read_link(format!("/proc/self/task/{tid}/fd/{fd}")) {
            let link = link.to_string_lossy();
            item.push(' ');
            match link
                .starts_with("socket:[")
                .then(|| program_socket_text(fd))
                .flatten()
            {
                Some(s) => item.push_str(&s),
                None => item.push_str(&link),
            }
        }
        // The 200 less what the set's own name took ("anon_inode:[eventpoll]").
        if out.len() + item.len() > 150 {
            out.push_str(&format!(" and {} more", fds.len() - i));
            break;
        }
        out.push_str(&item);
    }
    out
}

/// `stat`: the thread's state letter (`R` running, `S` asleep, `D` uninterruptible, `T`
/// stopped, `t` stopped by a tracer, `Z` zombie, ...) and the CPU it ran on last. The command
/// name between the parentheses may hold spaces and parentheses: the fields are counted from
/// the last `)`.
pub fn parse_stat(text: &[u8]) -> Option<(char, u32)> {
    let s = std::str::from_utf8(text).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // `processor` is field 39 of the line; the state is field 3.
    let cpu = fields.nth(39 - 4)?.parse().ok()?;
    Some((state, cpu))
}

/// What a blocked thread's state letter adds to what it waits on: the system call says where
/// it sleeps, not that nothing but the wait's end (a disk, most often) can wake it, or that it
/// is stopped.
pub fn run_state_words(state: char) -> Option<&'static str> {
    match state {
        'D' => Some("uninterruptible: disk or other I/O"),
        'T' => Some("stopped"),
        't' => Some("stopped by a tracer"),
        'Z' => Some("zombie"),
        _ => None,
    }
}

/// `what` with the thread's run state, when it says more than the system call (see
/// [`run_state_words`]): `/data/db (uninterruptible: disk or other I/O)`. One open, `pread`
/// and close of `/proc/self/task/TID/stat`, only when a thread is seen entering a blocked
/// state (the file is not kept: the ones read at every look are).
fn with_run_state(mut what: String, tid: u32) -> String {
    let Some(fd) = open_plain(&format!("/proc/self/task/{tid}/stat")) else {
        return what;
    };
    let mut buf = [0u8; 1024];
    let words = pread_all(fd, &mut buf)
        .and_then(parse_stat)
        .and_then(|(state, _)| run_state_words(state));
    close_plain(fd);
    if let Some(words) = words {
        if !what.is_empty() {
            what.push(' ');
        }
        what.push('(');
        what.push_str(words);
        what.push(')');
    }
    what
}

/// A socket's protocol and addresses: `tcp 127.0.0.1:8080 listening`, `tcp 127.0.0.1:41234 ->
/// 127.0.0.1:8080`, `unix /run/x.sock`.
/// [`socket_text`] of the program's descriptor `fd`: asked of a copy in the sampler's own table
/// (`pidfd_getfd` on this process, closed after) when it has one, else of `fd` itself.
fn program_socket_text(fd: i32) -> Option<String> {
    if !crate::fdtable::own() {
        return socket_text(fd);
    }
    let copy = crate::fdtable::copy_of_programs(fd)?;
    let text = socket_text(copy);
    // SAFETY: the copy this call made, in the sampler's own table.
    unsafe { libc::close(copy) };
    text
}

fn socket_text(fd: i32) -> Option<String> {
    let opt = |name: libc::c_int| -> Option<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt into a local int of the right size.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(v)
    };
    let domain = opt(libc::SO_DOMAIN)?;
    let ty = opt(libc::SO_TYPE).unwrap_or(0);
    let listening = opt(libc::SO_ACCEPTCONN).unwrap_or(0) != 0;
    let proto = match (domain, ty) {
        (libc::AF_INET | libc::AF_INET6, libc::SOCK_STREAM) => "tcp",
        (libc::AF_INET | libc::AF_INET6, libc::SOCK_DGRAM) => "udp",
        (libc::AF_UNIX, _) => "unix",
        (libc::AF_NETLINK, _) => "netlink",
        _ => "socket",
    };
    let addr = |peer: bool| -> Option<String> {
        // SAFETY: a zeroed sockaddr_storage is a valid out-parameter; its length is passed.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let p = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
        // SAFETY: as above.
        let r = unsafe {
            if peer {
                libc::getpeername(fd, p, &mut len)
            } else {
                libc::getsockname(fd, p, &mut len)
            }
        };
        if r != 0 {
            return None;
        }
        sockaddr_text(&ss, len as usize)
    };
    let mut out = proto.to_string();
    if let Some(local) = addr(false) {
        out.push(' ');
        out.push_str(&local);
    }
    if listening {
        out.push_str(" listening");
    } else if let Some(peer) = addr(true) {
        out.push_str(" -> ");
        out.push_str(&peer);
    }
    Some(out)
}

fn sockaddr_text(ss: &libc::sockaddr_storage, len: usize) -> Option<String> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(format!("{ip}:{}", u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(format!("[{ip}]:{}", u16::from_be(a.sin6_port)))
        }
        libc::AF_UNIX => {
            // SAFETY: the family says the storage holds a sockaddr_un.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_un>() };
            let path_len = len.saturating_sub(std::mem::size_of::<libc::sa_family_t>());
            let bytes: Vec<u8> = a.sun_path[..path_len.min(a.sun_path.len())]
                .iter()
                .map(|&c| c as u8)
                .take_while(|&b| b != 0)
                .collect();
            (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned())
        }
        _ => None,
    }
}

/// `/proc/stat`: (idle, iowait) ticks of each `cpuN` line, in CPU order.
pub fn parse_cpus(text: &[u8]) -> Vec<(u64, u64)> {
    let s = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    for line in s.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            continue;
        };
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let f: Vec<u64> = rest
            .split_ascii_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap_or(0))
            .collect();
        out.push((
            f.get(3).copied().unwrap_or(0),
            f.get(4).copied().unwrap_or(0),
        ));
    }
    out
}

/// A new thread to follow: with kept descriptors (`keep`, and they could be kept), else in
/// rotation.
fn follow(tid: u32, keep: bool) -> Option<Followed> {
    let mut f = Followed {
        tid,
        schedstat: -1,
        syscall: -1,
        status: None,
        status_ns: 0,
        status_cpu: 0,
        switches: None,
        longest_slice_ns: 0,
        on_cpu: 0,
        delay: 0,
        slices: 0,
        last: (0, 0, -1, 0, 0),
        blocked_since: 0,
        blocked_what: String::new(),
        ask: Ask::Done,
        sp_pc: (0, 0),
        last_chain: (0, 0, 0),
        written: false,
        clock: None,
        clock_now: None,
        registered: false,
        kept: false,
        looked_at: 0,
    };
    if keep {
        match open_kept(tid) {
            Ok((schedstat, syscall)) => {
                (f.schedstat, f.syscall, f.kept) = (schedstat, syscall, true)
            }
            Err(e) if gone(e) => return None,
            // No descriptor to keep (the process is out of them): sampled in rotation.
            Err(_) => {}
        }
    }
    Some(f)
}

/// Opens and keeps thread `tid`'s `schedstat` and `syscall`; the `open` error otherwise.
fn open_kept(tid: u32) -> Result<(i32, i32), i32> {
    let base = format!("/proc/self/task/{tid}/");
    let schedstat = open_high_or_errno(&(base.clone() + "schedstat"))?;
    match open_high_or_errno(&(base + "syscall")) {
        Ok(syscall) => {
            publish_schedstat(tid, schedstat);
            Ok((schedstat, syscall))
        }
        Err(e) => {
            release(schedstat);
            Err(e)
        }
    }
}

/// The descriptors open for a thread in rotation while the look reads it (-1: none), so that a
/// forked child closes them too ([`after_fork_child`]).
static ROTATING: [AtomicI32; 3] = [const { AtomicI32::new(-1) }; 3];

/// Opens `path` read-only as `ROTATING[slot]` for the thread in rotation being read (not
/// moved: closed within the look); the `open` error otherwise.
fn open_rotating(path: &str, slot: usize) -> Result<i32, i32> {
    let fd = open_plain(path).ok_or_else(errno)?;
    ROTATING[slot].store(fd, Ordering::Release);
    Ok(fd)
}

fn close_rotating() {
    for slot in &ROTATING {
        close_plain(slot.swap(-1, Ordering::AcqRel));
    }
}

/// Opens `path` read-only for a moment (not kept, not moved).
fn open_plain(path: &str) -> Option<i32> {
    let fd = open_proc(path);
    (fd >= 0).then_some(fd)
}

/// The sampler's descriptor of `/proc/self/task` (-1 until listed), which thread files are
/// opened relative to: one lookup less each, and still there after the program `chroot`s
/// somewhere without `/proc`.
static TASK_DIR: AtomicI32 = AtomicI32::new(-1);

/// Opens `path` read-only: a file under `/proc/self/task/` relative to [`TASK_DIR`] when it is
/// open. The descriptor, or -1 with errno set.
fn open_proc(path: &str) -> i32 {
    let dir = TASK_DIR.load(Ordering::Relaxed);
    let (at, rel) = match path.strip_prefix("/proc/self/task/") {
        Some(rel) if dir >= 0 => (dir, rel),
        _ => (libc::AT_FDCWD, path),
    };
    let Ok(c) = std::ffi::CString::new(rel) else {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return -1;
    };
    // SAFETY: a NUL-terminated path, relative to our own directory descriptor or absolute.
    unsafe { libc::openat(at, c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }
}

/// Closes a descriptor [`open_plain`] gave, if any; -1.
fn close_plain(fd: i32) -> i32 {
    if fd >= 0 {
        // SAFETY: opened by this look, closed once.
        unsafe { libc::close(fd) };
    }
    -1
}

/// Reads followed thread `f`'s context switches from its `status`, `on_cpu` being its CPU time
/// now: kept open for a thread with kept descriptors, opened for the moment otherwise (closed
/// with its other files, [`close_rotating`]). The counts when they are new, to be written.
fn read_switches(f: &mut Followed, buf: &mut [u8], now: u64, on_cpu: u64) -> Option<SwitchCount> {
    f.status_ns = now;
    f.status_cpu = on_cpu;
    let path = format!("/proc/self/task/{}/status", f.tid);
    let fd = if f.kept {
        if f.status.is_none() {
            f.status = open_high(&path);
        }
        f.status
    } else {
        open_rotating(&path, 2).ok()
    };
    let sw = fd
        .and_then(|fd| pread_kept(fd, buf))
        .and_then(parse_switches)?;
    if f.switches == Some(sw) {
        return None;
    }
    f.switches = Some(sw);
    Some(SwitchCount {
        tid: f.tid,
        voluntary: sw.0,
        involuntary: sw.1,
        longest_slice_ns: f.longest_slice_ns,
    })
}

/// Whether a look reads a thread in rotation.
enum Turn {
    /// Its files are open for this look.
    Read,
    /// It has not run since its files were last read: where it was.
    Unchanged,
    /// Its files could not be opened now (not for want of the thread): a later look tries.
    NotDue,
    /// It ended since the directory was listed.
    Gone,
}

/// One followed thread.
struct Followed {
    tid: u32,
    schedstat: i32,
    syscall: i32,
    /// Its `status`, opened the first time it is read.
    status: Option<i32>,
    status_ns: u64,
    /// Its CPU time when `status` was last read: a thread that ran since has newer counts.
    status_cpu: u64,
    /// Context switches at the last read of `status` (None: not read yet), and the longest
    /// timeslice estimated.
    switches: Option<(u64, u64)>,
    longest_slice_ns: u64,
    /// Cumulative schedstat at the last look.
    on_cpu: u64,
    delay: u64,
    slices: u64,
    /// What was written last: state, tracked kind, system call, argument, object.
    last: (u8, u8, i32, u64, u64),
    /// The blocked wait it is in (state BLOCKED): the look that first saw it, what it waits
    /// on, and what the policy asked of it.
    blocked_since: u64,
    blocked_what: String,
    ask: Ask,
    /// Its stack pointer and program counter in the call it is blocked in, at the last read of
    /// `syscall` (0: not blocked then).
    sp_pc: (u64, u64),
    /// The chain taken last, and where: blocked again with the same stack pointer and program
    /// counter, a thread is at the same place in its code, and its stack is not scanned again.
    last_chain: (u64, u64, u32),
    written: bool,
    /// Its CPU clock at the last look that read its files ([`crate::clock::cpu_ns_of`]).
    clock: Option<u64>,
    /// Without kept descriptors: its CPU clock as this look found it.
    clock_now: Option<u64>,
    /// The thread registered with the shim (it is in its live count).
    registered: bool,
    /// Its descriptors are kept (one of the first [`MAX_FOLLOWED`]); otherwise it is sampled
    /// without kept descriptors, its files open only during the look that reads them.
    kept: bool,
    /// The last look that looked at it without kept descriptors (0: none yet).
    looked_at: u64,
}

impl Followed {
    /// Whether the thread has not run since its files were last read, its CPU clock being
    /// `clock` now: then it is where it was (to block elsewhere, or wake, it must run).
    fn still(&self, clock: Option<u64>) -> bool {
        self.written && clock.is_some() && clock == self.clock
    }
}

/// The process's memory map, for scanning blocked threads' stacks: which addresses are code, and
/// where a thread's stack ends. Reading `/proc/self/maps` costs about as much as a look at
/// every thread when there are a thousand (a stack and a guard page each), so it is read again
/// only when it is [`MAPS_EVERY_NS`] old, or when a stack is not in it (a thread started since),
/// at most once a look.
#[derive(Default)]
struct Maps {
    maps: Vec<Mapping>,
    read_ns: Option<u64>,
    read_this_look: bool,
}

/// How long a memory map read for scanning serves.
const MAPS_EVERY_NS: u64 = 1_000_000_000;

impl Maps {
    fn look_begins(&mut self) {
        self.read_this_look = false;
    }

    /// The map, read again if stale or without the stack at `sp`.
    fn around(&mut self, sp: u64, now: u64) -> &[Mapping] {
        let stale = self
            .read_ns
            .is_none_or(|at| now.saturating_sub(at) >= MAPS_EVERY_NS);
        let has_stack = self.maps.iter().any(|m| (m.start..m.end).contains(&sp));
        if !self.read_this_look && (stale || !has_stack) {
            self.maps = crate::procmaps::read();
            self.read_ns = Some(now);
            self.read_this_look = true;
        }
        &self.maps
    }
}

/// What the policy asked of a thread's blocked wait.
#[derive(Clone, Copy)]
enum Ask {
    /// Not asked yet.
    Undecided,
    /// A rule acts once the wait has lasted its `min_wait`.
    Pending(Act),
    /// Acted on, or nothing to do.
    Done,
}

/// What the policy may ask of a thread the sampler sees: its name and its group.
struct Sampled {
    tid: u32,
    rec: Option<&'static ThreadRec>,
}

impl Facts for Sampled {
    fn creation_site(&mut self) -> Vec<Box<str>> {
        Vec::new()
    }

    fn thread_name(&mut self) -> Option<String> {
        let named = self.rec.and_then(|r| {
            r.policy
                .name
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        });
        named.or_else(|| {
            let comm =
                std::fs::read_to_string(format!("/proc/self/task/{}/comm", self.tid)).ok()?;
            Some(comm.trim_end_matches('\n').to_string())
        })
    }

    fn thread_group(&mut self) -> Vec<Box<str>> {
        self.rec
            .map(crate::track::collect::thread_group)
            .unwrap_or_default()
    }

    fn stack_depth(&mut self) -> u32 {
        0
    }
}

/// The policy's part in one look at a thread blocked outside the sync objects (seed 004): asked
/// once per wait which rule acts, and when one does (at once, or once the wait has lasted its
/// `min_wait`), the thread's chain, scanned from its stack without stopping or signalling it.
/// `maps` is the process's memory map as last read ([`Maps`]); `scans` is what is left of the look's
/// [`SCANS_PER_LOOK`]: a wait whose chain must be scanned when none is left waits for a later
/// look (a thousand threads that block at once are scanned over many looks, not in one).
fn blocked_chain(
    tr: &Tracker,
    f: &mut Followed,
    now: u64,
    maps: &mut Maps,
    scans: &mut u32,
    out: &mut Vec<BlockedChain>,
) {
    if f.last.0 != thread_state::BLOCKED {
        return;
    }
    let act = match f.ask {
        Ask::Done => return,
        Ask::Pending(act) => act,
        Ask::Undecided => {
            let rec = tr.thread(f.tid);
            let wait = BlockedWait {
                resource: resource_kind(f.last.2, &f.blocked_what),
                what: &f.blocked_what,
                thread: rec.map(|r| &r.policy),
            };
            let mut facts = Sampled { tid: f.tid, rec };
            match crate::policy::decide_blocked(&wait, &mut facts) {
                Some(act) => act,
                None => {
                    f.ask = Ask::Done;
                    return;
                }
            }
        }
    };
    if now.saturating_sub(f.blocked_since) < act.min_wait_ns {
        f.ask = Ask::Pending(act);
        return;
    }
    let (sp, pc) = f.sp_pc;
    let wants_chain = act.collect & action::WAITER_CHAIN != 0 && sp != 0;
    let cached = (sp, pc) == (f.last_chain.0, f.last_chain.1) && f.last_chain.2 != 0;
    if wants_chain && !cached && *scans == 0 {
        f.ask = Ask::Pending(act);
        return;
    }
    f.ask = Ask::Done;
    act.acted.fetch_add(1, Ordering::Relaxed);
    if !wants_chain {
        return;
    }
    let chain = if cached {
        f.last_chain.2
    } else {
        *scans -= 1;
        let frames = crate::livestack::scan_in(maps.around(sp, now), sp, pc, tr.config.depth);
        let id = tr.chains.intern(&frames, &tr.log);
        f.last_chain = (sp, pc, id);
        id
    };
    if chain != 0 {
        out.push(BlockedChain {
            tid: f.tid,
            ns: now,
            since_ns: f.blocked_since,
            syscall: f.last.2,
            arg0: f.last.3,
            version: act.version,
            rule: act.rule,
            chain_id: chain,
        });
    }
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
        let live = tr.live.load(Ordering::Relaxed);
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
        tr.blocked_elsewhere
            .store(elsewhere.min(i32::MAX as usize) as i32, Ordering::Relaxed);
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
