//! Time source: CLOCK_MONOTONIC in nanoseconds (vDSO, no system call).

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn now_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CLOCK_MONOTONIC_COARSE: a few ns instead of a few tens, to the last timer tick (1–4 ms).
pub fn coarse_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC_COARSE)
}

/// The calling thread's CPU time (a system call: no vDSO for it, about 100–250 ns).
pub fn thread_cpu_ns() -> u64 {
    read(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The CPU time of thread `tid` of this process (the kernel's per-thread CPU clock, the same
/// count as the first field of its `schedstat`, plus the slice it is running now): a system
/// call of about 200 ns, a third of a `pread` of that file. None if it is gone.
pub fn cpu_ns_of(tid: u32) -> Option<u64> {
    // The clock id of a thread's CPU clock: the tid inverted, shifted past the three low bits
    // that say per-thread (4) and the scheduler's count (2) (`MAKE_THREAD_CPUCLOCK`).
    let clock = ((!(tid as libc::clockid_t)) << 3) | 4 | 2;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; an unknown clock id is an error, not a fault.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

/// `clock`'s current time plus `ns`, as an absolute timespec.
pub fn deadline_after(clock: libc::clockid_t, ns: u64) -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    let total = ts.tv_nsec as u64 + ns;
    ts.tv_sec += (total / 1_000_000_000) as libc::time_t;
    ts.tv_nsec = (total % 1_000_000_000) as libc::c_long;
    ts
}

/// A time in nanoseconds (of some clock) as a timespec.
pub fn timespec_of(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}
