//! What the shim knows of glibc's object layouts (x86-64, glibc 2.34 and later), in one place.
//!
//! Each reader is an `unsafe fn`: the caller promises that the address is a live object of that
//! type, mapped for the duration of the read (an object the calling thread is locking, waiting
//! on or releasing). Other threads change these words with atomic instructions, so they are
//! read with atomic loads (`Relaxed`: they are hints, the shim keeps its own state too), which
//! compile to the same plain load a volatile read would, without the data race. Addresses that
//! may no longer be mapped (a hop of a wait-for walk) are read through the kernel
//! ([`read_checked`]), which fails cleanly.

use std::sync::atomic::{AtomicU32, Ordering};

/// Loads the 32-bit word at `addr` atomically.
///
/// # Safety
/// `addr` is 4-byte aligned and mapped, and only accessed atomically (or not at all) by others
/// while this reads it.
#[inline(always)]
unsafe fn load(addr: usize) -> u32 {
    // SAFETY: as the caller promises.
    unsafe { AtomicU32::from_ptr(addr as *mut u32) }.load(Ordering::Relaxed)
}

/// Reads 4 bytes of this process's memory through the kernel: 0 if the address is unmapped.
pub fn read_checked(addr: usize) -> u32 {
    let mut v = [0u8; 4];
    read_into(addr, &mut v).map_or(0, |()| u32::from_ne_bytes(v))
}

/// Copies up to `out.len()` bytes of this process's memory at `addr` into `out` through the
/// kernel, which fails cleanly on what is not mapped readable: the count copied (less than
/// asked where the readable memory ends), or the errno when nothing could be.
pub fn read_some(addr: usize, out: &mut [u8]) -> Result<usize, i32> {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr() as *mut libc::c_void,
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: out.len(),
    };
    // SAFETY: the kernel writes at most `out.len()` bytes into `out`, and reads the program's
    // memory itself, failing on what is not mapped.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n >= 0 {
        return Ok(n as usize);
    }
    // SAFETY: errno is this thread's.
    Err(unsafe { *libc::__errno_location() })
}

/// Copies `out.len()` bytes of this process's memory at `addr` into `out` through the kernel:
/// the errno otherwise (EFAULT: some of it is not mapped readable).
pub fn read_into(addr: usize, out: &mut [u8]) -> Result<(), i32> {
    match read_some(addr, out)? {
        n if n == out.len() => Ok(()),
        // A partial read: the rest is not mapped.
        _ => Err(libc::EFAULT),
    }
}

/// `pthread_mutex_t`: `__lock` at byte 0, `__count` at 4, `__owner` (tid of the holder) at 8,
/// `__kind` at 16.
pub mod mutex {
    use super::{load, read_checked};

    /// A robust mutex's owner field holds these for "inconsistent" and "not recoverable".
    fn tid(v: u32) -> u32 {
        let v = v as i32;
        if v <= 0 || v >= 0x7fff_fffe {
            0
        } else {
            v as u32
        }
    }

    /// The thread holding the mutex (0: free, or a robust mutex's special values).
    ///
    /// # Safety
    /// `addr` is a live mutex (see the module's rule).
    pub unsafe fn owner(addr: usize) -> u32 {
        // SAFETY: as the caller promises.
        tid(unsafe { load(addr + 8) })
    }

    /// As [`owner`], for a mutex that may no longer exist: read through the kernel.
    pub fn owner_checked(addr: usize) -> u32 {
        tid(read_checked(addr + 8))
    }

    /// `__count`: how many times a recursive mutex is held by its owner (0 or 1 otherwise).
    ///
    /// # Safety
    /// `addr` is a live mutex.
    #[inline(always)]
    pub unsafe fn count(addr: usize) -> u32 {
        // SAFETY: as the caller promises.
        unsafe { load(addr + 4) }
    }

    /// `__lock`: 0 while the mutex is free.
    ///
    /// # Safety
    /// `addr` is a live mutex.
    #[inline(always)]
    pub unsafe fn lock_word(addr: usize) -> u32 {
        // SAFETY: as the caller promises.
        unsafe { load(addr) }
    }

    /// The subtype of the mutex in the log: its type, robust and protocol bits (glibc keeps them
    /// together in `__kind`).
    ///
    /// # Safety
    /// `addr` is a live mutex.
    pub unsafe fn subtype(addr: usize) -> u32 {
        use waitshim_format::mutex_kind;
        // SAFETY: as the caller promises.
        let k = unsafe { kind(addr) };
        (k & mutex_kind::TYPE_MASK)
            | (k & (mutex_kind::ROBUST
                | mutex_kind::PRIO_INHERIT
                | mutex_kind::PRIO_PROTECT
                | mutex_kind::PSHARED))
    }

    /// `__kind`: type and protocol bits (`waitshim_format::mutex_kind`); written only by init.
    ///
    /// # Safety
    /// `addr` is a live mutex.
    #[inline(always)]
    pub unsafe fn kind(addr: usize) -> u32 {
        // SAFETY: as the caller promises.
        unsafe { load(addr + 16) }
    }
}

/// `pthread_rwlock_t`: `__readers` at byte 0 (bit 0: write phase, readers counted from bit 3),
/// `__cur_writer` (tid of the writer holding it) at 24, `__flags` (the `PTHREAD_RWLOCK_PREFER_*`
/// kind) at 48.
pub mod rwlock {
    use super::{load, read_checked};

    const WRITE_PHASE: u32 = 1;
    const READER_SHIFT: u32 = 3;

    /// Readers holding the lock now (0 in a write phase, where registered readers still wait).
    ///
    /// # Safety
    /// `addr` is a live rwlock.
    pub unsafe fn readers(addr: usize) -> u32 {
        // SAFETY: as the caller promises.
        let r = unsafe { load(addr) };
        if r & WRITE_PHASE != 0 {
            0
        } else {
            r >> READER_SHIFT
        }
    }

    /// # Safety
    /// `addr` is a live rwlock.
    pub unsafe fn preference(addr: usize) -> u32 {
        // SAFETY: as the caller promises.
        unsafe { load(addr + 48) }
    }

    /// The writer holding the lock (0: none). With `checked`, read through the kernel.
    ///
    /// # Safety
    /// Unless `checked`, `addr` is a live rwlock.
    pub unsafe fn writer(addr: usize, checked: bool) -> u32 {
        let v = if checked {
            read_checked(addr + 24)
        } else {
            // SAFETY: as the caller promises.
            unsafe { load(addr + 24) }
        };
        (v as i32).max(0) as u32
    }
}

/// `pthread_spinlock_t` (the x86-64 assembly version): an int that is 1 while free; taking it
/// decrements it (to 0, and below while others spin on it), unlocking stores 1 again.
pub mod spin {
    use super::load;

    /// # Safety
    /// `addr` is a live spinlock.
    #[inline(always)]
    pub unsafe fn word(addr: usize) -> u32 {
        // SAFETY: as the caller promises.
        unsafe { load(addr) }
    }

    #[inline(always)]
    pub fn is_free(word: u32) -> bool {
        (word as i32) > 0
    }
}

/// `struct pthread_barrier` (2.25+): `in`, `current_round`, `count` (threads per round) at byte 8,
/// `shared`, `out`.
pub mod barrier {
    use super::load;

    /// # Safety
    /// `addr` is a live barrier.
    pub unsafe fn count(addr: usize) -> u32 {
        // SAFETY: as the caller promises; written only by init.
        unsafe { load(addr + 8) }
    }
}

/// `sem_t` (2.21+): the value is the low 32 bits of its 64-bit `data` word.
pub mod sem {
    use super::load;

    /// # Safety
    /// `addr` is a live semaphore.
    pub unsafe fn value(addr: usize) -> u32 {
        // SAFETY: as the caller promises.
        unsafe { load(addr) }
    }
}

/// `struct pthread`: the thread's kernel tid at byte 0x2d0 (glibc 2.x), written by the kernel
/// (`CLONE_PARENT_SETTID`) before `pthread_create` returns and cleared when the thread exits.
/// The offset is checked on the calling thread before it is trusted (`track::threads`).
pub mod pthread {
    use super::load;

    pub const TID_OFFSET: usize = 0x2d0;

    /// The tid in descriptor `th`, at `offset` (0: none, or exited).
    ///
    /// # Safety
    /// `th` is a live thread descriptor (not yet joined or detached-and-exited), larger than
    /// `offset + 4`.
    pub unsafe fn tid(th: usize, offset: usize) -> u32 {
        // SAFETY: as the caller promises.
        (unsafe { load(th + offset) } as i32).max(0) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_a_locked_mutex_read_as_glibc_wrote_them() {
        // SAFETY: all-zero bytes are a valid pthread_mutex_t; init below sets it up.
        let mut m: libc::pthread_mutex_t = unsafe { std::mem::zeroed() };
        // SAFETY: all-zero bytes are a valid pthread_mutexattr_t; init below sets it up.
        let mut attr: libc::pthread_mutexattr_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain pthread calls on local objects.
        unsafe {
            libc::pthread_mutexattr_init(&mut attr);
            libc::pthread_mutexattr_settype(&mut attr, libc::PTHREAD_MUTEX_RECURSIVE);
            libc::pthread_mutex_init(&mut m, &attr);
        }
        let addr = &mut m as *mut _ as usize;
        // SAFETY: `m` is live for every read below.
        unsafe {
            assert_eq!(mutex::owner(addr), 0);
            assert_eq!(mutex::lock_word(addr), 0);
            libc::pthread_mutex_lock(&mut m);
            libc::pthread_mutex_lock(&mut m);
            assert_eq!(mutex::owner(addr), libc::gettid() as u32);
            assert_eq!(mutex::count(addr), 2);
            assert_ne!(mutex::lock_word(addr), 0);
            assert_eq!(mutex::kind(addr) & 3, libc::PTHREAD_MUTEX_RECURSIVE as u32);
            libc::pthread_mutex_unlock(&mut m);
            libc::pthread_mutex_unlock(&mut m);
            assert_eq!(mutex::owner(addr), 0);
        }
        assert_eq!(mutex::owner_checked(addr), 0);
        assert_eq!(read_checked(0), 0, "an unmapped address reads as 0");
    }

    #[test]
    fn an_rwlock_shows_its_writer_and_its_readers() {
        // SAFETY: all-zero bytes are a valid pthread_rwlock_t; init below sets it up.
        let mut l: libc::pthread_rwlock_t = unsafe { std::mem::zeroed() };
        let addr = &mut l as *mut _ as usize;
        // SAFETY: `l` is live for every call and read below.
        unsafe {
            libc::pthread_rwlock_init(&mut l, std::ptr::null());
            libc::pthread_rwlock_wrlock(&mut l);
            assert_eq!(rwlock::writer(addr, false), libc::gettid() as u32);
            assert_eq!(rwlock::writer(addr, true), libc::gettid() as u32);
            assert_eq!(rwlock::readers(addr), 0);
            libc::pthread_rwlock_unlock(&mut l);
            libc::pthread_rwlock_rdlock(&mut l);
            libc::pthread_rwlock_rdlock(&mut l);
            assert_eq!(rwlock::readers(addr), 2);
            assert_eq!(rwlock::writer(addr, false), 0);
            libc::pthread_rwlock_unlock(&mut l);
            libc::pthread_rwlock_unlock(&mut l);
        }
    }

    #[test]
    fn spinlock_barrier_and_semaphore_words() {
        let mut s: libc::pthread_spinlock_t = 0;
        // SAFETY: all-zero bytes are a valid pthread_barrier_t; init below sets it up.
        let mut b: libc::pthread_barrier_t = unsafe { std::mem::zeroed() };
        // SAFETY: all-zero bytes are a valid sem_t; sem_init below sets it up.
        let mut sem: libc::sem_t = unsafe { std::mem::zeroed() };
        // SAFETY: local objects, live for every call and read below.
        unsafe {
            libc::pthread_spin_init(&mut s, 0);
            let sa = &mut s as *mut _ as usize;
            assert!(spin::is_free(spin::word(sa)));
            libc::pthread_spin_lock(&mut s);
            assert!(!spin::is_free(spin::word(sa)));
            libc::pthread_spin_unlock(&mut s);
            libc::pthread_barrier_init(&mut b, std::ptr::null(), 5);
            assert_eq!(barrier::count(&mut b as *mut _ as usize), 5);
            libc::sem_init(&mut sem, 0, 7);
            assert_eq!(sem::value(&mut sem as *mut _ as usize), 7);
            libc::sem_post(&mut sem);
            assert_eq!(sem::value(&mut sem as *mut _ as usize), 8);
        }
    }
}
