//! The shim's thread keeps its descriptors in a table of its own (`unshare(CLONE_FILES)`), so
//! that none of them is in the program's: the program can open as many files as it could without
//! the shim, gets the numbers it would get (the lowest free ones), and whatever it does to its
//! own descriptors (`dup2` onto any number, `close_range`, `closefrom`) cannot reach the shim's,
//! nor the shim's reads and closes reach the program's files.
//!
//! The new table starts as a copy of the program's: every copy is closed at once, so that no
//! file, pipe or socket of the program stays open one moment longer than the program keeps it.
//! Where the kernel refuses, or a seccomp filter might, the thread shares the program's table as
//! before and moves what it keeps to the high numbers (`crate::log::move_high`).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The shim's thread has a descriptor table of its own.
static OWN: AtomicBool = AtomicBool::new(false);
/// The thread with the table of its own (the shim's), by tid.
static OWNER: AtomicI32 = AtomicI32::new(0);
/// This process's pidfd, in the shim thread's table (-1: not opened yet; -2: not to be had).
static PIDFD: AtomicI32 = AtomicI32::new(-1);

/// On the shim's thread, as it starts: gives it a table of its own, empty. True on success.
/// Not to be called under a seccomp filter that may kill for `unshare` (the caller asks).
pub fn separate() -> bool {
    // SAFETY: unshare of the calling thread's descriptor table, by system call.
    let r = unsafe {
        crate::sys::call6(
            libc::SYS_unshare,
            [libc::CLONE_FILES as usize, 0, 0, 0, 0, 0],
        )
    };
    if crate::sys::failed(r) {
        return false;
    }
    // SAFETY: closes every descriptor of the new table, all of them copies of the program's.
    let closed =
        unsafe { crate::sys::call6(libc::SYS_close_range, [0, u32::MAX as usize, 0, 0, 0, 0]) };
    if crate::sys::failed(closed) {
        close_each();
    }
    OWNER.store(crate::sys::gettid() as i32, Ordering::Relaxed);
    OWN.store(true, Ordering::Release);
    true
}

/// Whether the calling thread is the one with the table of its own: the program's descriptors
/// (its stderr too) are then reached only through [`copy_of_programs`].
pub fn on_own_table() -> bool {
    own() && OWNER.load(Ordering::Relaxed) == crate::sys::gettid() as i32
}

/// Without `close_range` (kernels before 5.9): every number up to the descriptor limit.
fn close_each() {
    // SAFETY: getrlimit into a local struct.
    let limit = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur.min(1 << 20) as usize
        } else {
            1024
        }
    };
    for fd in 0..limit {
        // SAFETY: closes a copy in the thread's own table (EBADF where there is none).
        unsafe { crate::sys::call6(libc::SYS_close, [fd, 0, 0, 0, 0, 0]) };
    }
}

/// Whether the shim's thread has a table of its own: its descriptors are then never the
/// program's, and no other thread may use them.
pub fn own() -> bool {
    OWN.load(Ordering::Acquire)
}

/// A copy, in the shim thread's own table, of the program's descriptor `fd` (`pidfd_getfd` on
/// this process: kernel 5.6), to ask what it is; the caller closes it. None if it cannot be had.
pub fn copy_of_programs(fd: i32) -> Option<i32> {
    let mut pidfd = PIDFD.load(Ordering::Relaxed);
    if pidfd == -1 {
        // SAFETY: pidfd_open of this process, by system call.
        let r = unsafe {
            crate::sys::call6(
                libc::SYS_pidfd_open,
                [libc::getpid() as usize, 0, 0, 0, 0, 0],
            )
        };
        pidfd = if crate::sys::failed(r) { -2 } else { r as i32 };
        PIDFD.store(pidfd, Ordering::Relaxed);
    }
    if pidfd < 0 {
        return None;
    }
    // SAFETY: pidfd_getfd of a descriptor of this process into the calling thread's table.
    let r = unsafe {
        crate::sys::call6(
            libc::SYS_pidfd_getfd,
            [pidfd as usize, fd as usize, 0, 0, 0, 0],
        )
    };
    (!crate::sys::failed(r)).then_some(r as i32)
}

/// In a forked child: the child's table is a copy of the forking thread's, the program's; the
/// child's shim thread, when it starts, makes its own again.
pub fn after_fork_child() {
    OWN.store(false, Ordering::Release);
    OWNER.store(0, Ordering::Relaxed);
    PIDFD.store(-1, Ordering::Relaxed);
}
