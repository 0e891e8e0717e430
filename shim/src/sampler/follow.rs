//! Following a thread: its kept or rotated descriptors, its context switches, and the process's
//! memory map, read again at most every [`MAPS_EVERY_NS`].

use super::*;

/// A new thread to follow: with kept descriptors (`keep`, and they could be kept), else in
/// rotation.
pub(super) fn follow(tid: u32, keep: bool) -> Option<Followed> {
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
pub(super) fn open_kept(tid: u32) -> Result<(i32, i32), i32> {
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

/// Reads followed thread `f`'s context switches from its `status`, `on_cpu` being its CPU time
/// now: kept open for a thread with kept descriptors, opened for the moment otherwise (closed
/// with its other files, [`close_rotating`]). The counts when they are new, to be written.
pub(super) fn read_switches(
    f: &mut Followed,
    buf: &mut [u8],
    now: u64,
    on_cpu: u64,
) -> Option<SwitchCount> {
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
pub(super) enum Turn {
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
pub(super) struct Followed {
    pub(super) tid: u32,
    pub(super) schedstat: i32,
    pub(super) syscall: i32,
    /// Its `status`, opened the first time it is read.
    pub(super) status: Option<i32>,
    pub(super) status_ns: u64,
    /// Its CPU time when `status` was last read: a thread that ran since has newer counts.
    pub(super) status_cpu: u64,
    /// Context switches at the last read of `status` (None: not read yet), and the longest
    /// timeslice estimated.
    pub(super) switches: Option<(u64, u64)>,
    pub(super) longest_slice_ns: u64,
    /// Cumulative schedstat at the last look.
    pub(super) on_cpu: u64,
    pub(super) delay: u64,
    pub(super) slices: u64,
    /// What was written last: state, tracked kind, system call, argument, object.
    pub(super) last: (u8, u8, i32, u64, u64),
    /// The blocked wait it is in (state BLOCKED): the look that first saw it, what it waits
    /// on, and what the policy asked of it.
    pub(super) blocked_since: u64,
    pub(super) blocked_what: String,
    pub(super) ask: Ask,
    /// Its stack pointer and program counter in the call it is blocked in, at the last read of
    /// `syscall` (0: not blocked then).
    pub(super) sp_pc: (u64, u64),
    /// The chain taken last, and where: blocked again with the same stack pointer and program
    /// counter, a thread is at the same place in its code, and its stack is not scanned again.
    pub(super) last_chain: (u64, u64, u32),
    pub(super) written: bool,
    /// Its CPU clock at the last look that read its files ([`crate::clock::cpu_ns_of`]).
    pub(super) clock: Option<u64>,
    /// Without kept descriptors: its CPU clock as this look found it.
    pub(super) clock_now: Option<u64>,
    /// The thread registered with the shim (it is in its live count).
    pub(super) registered: bool,
    /// Its descriptors are kept (one of the first [`MAX_FOLLOWED`]); otherwise it is sampled
    /// without kept descriptors, its files open only during the look that reads them.
    pub(super) kept: bool,
    /// The last look that looked at it without kept descriptors (0: none yet).
    pub(super) looked_at: u64,
}

impl Followed {
    /// Whether the thread has not run since its files were last read, its CPU clock being
    /// `clock` now: then it is where it was (to block elsewhere, or wake, it must run).
    pub(super) fn still(&self, clock: Option<u64>) -> bool {
        self.written && clock.is_some() && clock == self.clock
    }
}

/// The process's memory map, for scanning blocked threads' stacks: which addresses are code, and
/// where a thread's stack ends. Reading `/proc/self/maps` costs about as much as a look at
/// every thread when there are a thousand (a stack and a guard page each), so it is read again
/// only when it is [`MAPS_EVERY_NS`] old, or when a stack is not in it (a thread started since),
/// at most once a look.
#[derive(Default)]
pub(super) struct Maps {
    pub(super) maps: Vec<Mapping>,
    pub(super) read_ns: Option<u64>,
    pub(super) read_this_look: bool,
}

/// How long a memory map read for scanning serves.
pub(super) const MAPS_EVERY_NS: u64 = 1_000_000_000;

impl Maps {
    pub(super) fn look_begins(&mut self) {
        self.read_this_look = false;
    }

    /// The map, read again if stale or without the stack at `sp`.
    pub(super) fn around(&mut self, sp: u64, now: u64) -> &[Mapping] {
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
