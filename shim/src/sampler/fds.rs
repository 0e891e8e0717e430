//! The sampler's descriptors: kept open at the high numbers the log uses, checked before each
//! read, rotated for threads past the cap, closed in a forked child.

use super::*;

/// Every descriptor the sampler holds, so that a forked child can close them (the thread that
/// owns the sampler does not come along). -1: free.
pub(super) static FDS: [AtomicI32; 3 * MAX_FOLLOWED + 2] =
    [const { AtomicI32::new(-1) }; 3 * MAX_FOLLOWED + 2];

/// The file each descriptor in [`FDS`] was kept for, (st_dev, st_ino), beside its slot. While
/// the shim shares the program's table, the program may close a kept descriptor (`close_range`,
/// `closefrom`) and get its number again for a file of its own: before a kept descriptor is
/// read, rewound or closed, it is checked to be still the one kept ([`intact`]), as the log's
/// is.
pub(super) static IDS: [(AtomicU64, AtomicU64); 3 * MAX_FOLLOWED + 2] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; 3 * MAX_FOLLOWED + 2];

/// Whether `fd` may be used as the sampler's: always in the shim thread's own table (the program
/// cannot reach it); in the program's, unless it is a kept descriptor whose number now names
/// another file. A descriptor not kept (opened for the moment by this look) is the sampler's.
pub(super) fn intact(fd: i32) -> bool {
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
pub(super) fn pread_kept(fd: i32, buf: &mut [u8]) -> Option<&[u8]> {
    if intact(fd) {
        pread_all(fd, buf)
    } else {
        None
    }
}

/// Set while the sampler follows threads without kept descriptors (past [`MAX_FOLLOWED`]): a
/// thread that ends without one then writes its totals from its own clock ([`thread_ending`]).
pub(super) static PAST_CAP: AtomicBool = AtomicBool::new(false);

/// The `schedstat` descriptor of each thread followed, by tid (0: free), for the thread itself
/// to read at its end ([`thread_ending`]). A thread's entry is published after its descriptor
/// is kept and cleared before it is closed, which happens only once a listing of the process's
/// threads no longer has it: after it ended, never while its end is being read.
pub(super) static SCHEDSTAT_OF: [(AtomicU32, AtomicI32); MAX_FOLLOWED] =
    [const { (AtomicU32::new(0), AtomicI32::new(-1)) }; MAX_FOLLOWED];

pub(super) fn publish_schedstat(tid: u32, fd: i32) {
    for (t, f) in SCHEDSTAT_OF.iter() {
        if t.load(Ordering::Relaxed) == 0 {
            f.store(fd, Ordering::Relaxed);
            t.store(tid, Ordering::Release);
            return;
        }
    }
}

pub(super) fn forget_schedstat(tid: u32) {
    for (t, f) in SCHEDSTAT_OF.iter() {
        if t.load(Ordering::Relaxed) == tid {
            f.store(-1, Ordering::Relaxed);
            t.store(0, Ordering::Release);
        }
    }
}

pub(super) fn schedstat_of(tid: u32) -> Option<i32> {
    SCHEDSTAT_OF
        .iter()
        .find(|(t, _)| t.load(Ordering::Acquire) == tid)
        .map(|(_, f)| f.load(Ordering::Relaxed))
        .filter(|&fd| fd >= 0)
}

pub(super) fn keep(fd: i32) -> bool {
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
pub(super) fn release(fd: i32) {
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
pub(super) fn out_of_the_way(fd: i32) -> Option<i32> {
    if crate::fdtable::own() {
        Some(fd)
    } else {
        crate::log::move_high(fd)
    }
}

/// Opens `path` read-only and moves it to the high numbers; None if it cannot be kept.
pub(super) fn open_high(path: &str) -> Option<i32> {
    open_high_or_errno(path).ok()
}

/// [`open_high`], or why not: the `open` error (`ENOENT` for the file of a thread gone), or 0
/// when the descriptor could not be moved or kept.
pub(super) fn open_high_or_errno(path: &str) -> Result<i32, i32> {
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

pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Whether an `open` error under `/proc/self/task/TID/` says the thread is gone (it ended
/// between the listing of the directory and the open).
pub(super) fn gone(errno: i32) -> bool {
    errno == libc::ENOENT || errno == libc::ESRCH
}

/// Reads a `/proc` file from its start into `buf`; the bytes read.
pub(super) fn pread_all(fd: i32, buf: &mut [u8]) -> Option<&[u8]> {
    // SAFETY: reading into our own buffer.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    (n >= 0).then(|| &buf[..n as usize])
}

/// Why the process's own `/proc` files are no longer its to read, if they are not: a process
/// that is not root and made itself undumpable (`PR_SET_DUMPABLE` 0, or a change of user or
/// group, which does that) has them owned by root from then on. Two cheap system calls a look.
pub(super) fn proc_withdrawn() -> Option<String> {
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

/// The descriptors open for a thread in rotation while the look reads it (-1: none), so that a
/// forked child closes them too ([`after_fork_child`]).
pub(super) static ROTATING: [AtomicI32; 3] = [const { AtomicI32::new(-1) }; 3];

/// Opens `path` read-only as `ROTATING[slot]` for the thread in rotation being read (not
/// moved: closed within the look); the `open` error otherwise.
pub(super) fn open_rotating(path: &str, slot: usize) -> Result<i32, i32> {
    let fd = open_plain(path).ok_or_else(errno)?;
    ROTATING[slot].store(fd, Ordering::Release);
    Ok(fd)
}

pub(super) fn close_rotating() {
    for slot in &ROTATING {
        close_plain(slot.swap(-1, Ordering::AcqRel));
    }
}

/// Opens `path` read-only for a moment (not kept, not moved).
pub(super) fn open_plain(path: &str) -> Option<i32> {
    let fd = open_proc(path);
    (fd >= 0).then_some(fd)
}

/// The sampler's descriptor of `/proc/self/task` (-1 until listed), which thread files are
/// opened relative to: one lookup less each, and still there after the program `chroot`s
/// somewhere without `/proc`.
pub(super) static TASK_DIR: AtomicI32 = AtomicI32::new(-1);

/// Opens `path` read-only: a file under `/proc/self/task/` relative to [`TASK_DIR`] when it is
/// open. The descriptor, or -1 with errno set.
pub(super) fn open_proc(path: &str) -> i32 {
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
pub(super) fn close_plain(fd: i32) -> i32 {
    if fd >= 0 {
        // SAFETY: opened by this look, closed once.
        unsafe { libc::close(fd) };
    }
    -1
}
