//! The shim's own system calls, made with the `syscall` instruction. The C library's
//! `syscall` function is one the shim interposes (futex waits go through it), and a library
//! preloaded beside the shim may interpose it too: the shim's heap, its thread's sleeps and its
//! stack switches must reach the kernel without passing through either.

use std::arch::asm;

/// System call `n` with up to six arguments; the kernel's result (a negative errno on failure).
///
/// # Safety
/// The arguments must be valid for system call `n`, as for the C library's `syscall`.
#[inline]
pub unsafe fn call6(n: libc::c_long, a: [usize; 6]) -> isize {
    let r: isize;
    // SAFETY: as the caller promises; the instruction clobbers rcx and r11 only.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => r,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack, preserves_flags),
        );
    }
    r
}

/// A result of [`call6`] that is an error.
pub fn failed(r: isize) -> bool {
    (-4095..0).contains(&r)
}

/// A private anonymous mapping of `len` bytes (`extra` flags added), or None.
pub fn map_anonymous(len: usize, extra: libc::c_int) -> Option<usize> {
    // SAFETY: a new mapping chosen by the kernel.
    let r = unsafe {
        call6(
            libc::SYS_mmap,
            [
                0,
                len,
                (libc::PROT_READ | libc::PROT_WRITE) as usize,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra) as usize,
                usize::MAX,
                0,
            ],
        )
    };
    (!failed(r)).then_some(r as usize)
}

/// Unmaps `len` bytes at `addr`.
///
/// # Safety
/// The range is a mapping of the shim's own that nothing uses any more.
pub unsafe fn unmap(addr: usize, len: usize) -> bool {
    // SAFETY: as the caller promises.
    !failed(unsafe { call6(libc::SYS_munmap, [addr, len, 0, 0, 0, 0]) })
}

/// FUTEX_WAIT (private) on `word` while it holds `val`, for at most `timeout` (None: no limit).
pub fn futex_wait(word: &std::sync::atomic::AtomicU32, val: u32, timeout: Option<&libc::timespec>) {
    // SAFETY: a futex wait on a word of ours; the timeout, if any, lives across the call.
    unsafe {
        call6(
            libc::SYS_futex,
            [
                word.as_ptr() as usize,
                (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as usize,
                val as usize,
                timeout.map_or(0, |t| t as *const libc::timespec as usize),
                0,
                0,
            ],
        )
    };
}

/// FUTEX_WAIT on `word` in memory other processes may map (the log's mailbox), while it holds
/// `val`, for at most `timeout`.
pub fn futex_wait_shared(word: &std::sync::atomic::AtomicU32, val: u32, timeout: &libc::timespec) {
    // SAFETY: a futex wait on a word of ours; the timeout lives across the call.
    unsafe {
        call6(
            libc::SYS_futex,
            [
                word.as_ptr() as usize,
                libc::FUTEX_WAIT as usize,
                val as usize,
                timeout as *const libc::timespec as usize,
                0,
                0,
            ],
        )
    };
}

/// FUTEX_WAKE of every waiter on `word`, a word other processes may map. Async-signal-safe.
pub fn futex_wake_shared(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: a futex wake on a word of ours.
    unsafe {
        call6(
            libc::SYS_futex,
            [
                word.as_ptr() as usize,
                libc::FUTEX_WAKE as usize,
                i32::MAX as usize,
                0,
                0,
                0,
            ],
        )
    };
}

/// FUTEX_WAKE (private) of up to `n` waiters on `word`. Async-signal-safe.
pub fn futex_wake(word: &std::sync::atomic::AtomicU32, n: u32) {
    // SAFETY: a futex wake on a word of ours.
    unsafe {
        call6(
            libc::SYS_futex,
            [
                word.as_ptr() as usize,
                (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG) as usize,
                n as usize,
                0,
                0,
                0,
            ],
        )
    };
}

/// The calling thread's id, by system call (glibc's `gettid` is 2.30+).
pub fn gettid() -> u32 {
    // SAFETY: plain system call.
    unsafe { call6(libc::SYS_gettid, [0; 6]) as u32 }
}

/// Gives up the CPU (`sched_yield(2)`), by system call: the shim's own yields stay out of the
/// program's counted `sched_yield` and need nothing resolved.
pub fn sched_yield() {
    // SAFETY: plain system call.
    unsafe { call6(libc::SYS_sched_yield, [0; 6]) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instruction_answers_as_the_c_library_does() {
        // SAFETY: getpid and gettid take no arguments.
        unsafe {
            assert_eq!(call6(libc::SYS_getpid, [0; 6]), libc::getpid() as isize);
            assert_eq!(call6(libc::SYS_gettid, [0; 6]), libc::gettid() as isize);
            // An invalid descriptor: -EBADF, as the kernel returns it.
            assert_eq!(
                call6(libc::SYS_close, [usize::MAX, 0, 0, 0, 0, 0]),
                -(libc::EBADF as isize)
            );
        }
        let p = map_anonymous(8192, 0).expect("a mapping");
        // SAFETY: our own new mapping.
        unsafe {
            std::ptr::write_bytes(p as *mut u8, 1, 8192);
            assert!(unmap(p, 8192));
        }
    }
}
