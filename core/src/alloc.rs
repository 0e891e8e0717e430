//! The shim's own heap: every allocation of the shim's Rust code comes from pages it maps
//! itself (dlmalloc over `mmap` system calls), never from the program's `malloc`.
//!
//! The program may bring its own allocator (jemalloc, tcmalloc, mimalloc), whose locks are
//! pthread mutexes the shim interposes: a shim that allocated from it while handling one of
//! those locks would wait for the lock it is handling (jemalloc's start-up did exactly that).
//! Here nothing the program links can be re-entered: the heap's lock is a futex word of its own,
//! and its pages come from raw system calls, which no library can interpose.
//!
//! Fork: the forking thread takes the lock before the process forks and lets go after it, in
//! parent and child ([`lock_for_fork`], from the core's fork handlers), so a child never
//! inherits a heap another thread was changing. Signal handlers must not allocate (the rule for
//! the whole shim), so the lock is never wanted by a handler that interrupted its holder.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};

use dlmalloc::Dlmalloc;

use crate::sys;

/// Pages for the heap, by `mmap`/`mremap`/`munmap` system calls.
struct Pages;

// SAFETY: every method maps, remaps or unmaps only the pages it was handed or that it maps.
unsafe impl dlmalloc::Allocator for Pages {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        match sys::map_anonymous(size, 0) {
            Some(p) => (p as *mut u8, size, 0),
            None => (std::ptr::null_mut(), 0, 0),
        }
    }

    fn remap(&self, ptr: *mut u8, oldsize: usize, newsize: usize, can_move: bool) -> *mut u8 {
        let flags = if can_move { libc::MREMAP_MAYMOVE } else { 0 };
        // SAFETY: remaps a mapping of the heap's own.
        let r = unsafe {
            sys::call6(
                libc::SYS_mremap,
                [ptr as usize, oldsize, newsize, flags as usize, 0, 0],
            )
        };
        if sys::failed(r) {
            std::ptr::null_mut()
        } else {
            r as *mut u8
        }
    }

    fn free_part(&self, ptr: *mut u8, oldsize: usize, newsize: usize) -> bool {
        // SAFETY: shrinks a mapping of the heap's own in place.
        let r = unsafe { sys::call6(libc::SYS_mremap, [ptr as usize, oldsize, newsize, 0, 0, 0]) };
        // SAFETY: the tail dlmalloc gives back.
        !sys::failed(r) || unsafe { sys::unmap(ptr as usize + newsize, oldsize - newsize) }
    }

    fn free(&self, ptr: *mut u8, size: usize) -> bool {
        // SAFETY: a mapping dlmalloc gives back whole.
        unsafe { sys::unmap(ptr as usize, size) }
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        true
    }

    fn allocates_zeros(&self) -> bool {
        true
    }

    fn page_size(&self) -> usize {
        4096
    }
}

/// A lock on a futex word: 0 free, 1 held, 2 held with sleepers (as in Drepper's "Futexes Are
/// Tricky", mutex 2).
struct FutexLock(AtomicU32);

impl FutexLock {
    fn lock(&self) {
        if self
            .0
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        self.lock_contended();
    }

    #[cold]
    fn lock_contended(&self) {
        // The heap's critical sections are short: spin a little before sleeping.
        for _ in 0..100 {
            std::hint::spin_loop();
            if self.0.load(Ordering::Relaxed) == 0
                && self
                    .0
                    .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
        }
        while self.0.swap(2, Ordering::Acquire) != 0 {
            sys::futex_wait(&self.0, 2, None);
        }
    }

    fn unlock(&self) {
        if self.0.swap(0, Ordering::Release) == 2 {
            sys::futex_wake(&self.0, 1);
        }
    }
}

pub struct ShimHeap {
    lock: FutexLock,
    heap: UnsafeCell<Dlmalloc<Pages>>,
}

// SAFETY: `heap` is only touched with `lock` held.
unsafe impl Sync for ShimHeap {}

impl ShimHeap {
    const fn new() -> Self {
        ShimHeap {
            lock: FutexLock(AtomicU32::new(0)),
            heap: UnsafeCell::new(Dlmalloc::new_with_allocator(Pages)),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Dlmalloc<Pages>) -> R) -> R {
        self.lock.lock();
        // SAFETY: the lock is held, so this is the only reference to the heap.
        let r = f(unsafe { &mut *self.heap.get() });
        self.lock.unlock();
        r
    }
}

// SAFETY: dlmalloc's methods keep GlobalAlloc's contracts (size and alignment as asked, null on
// failure); each runs with the heap's lock held.
unsafe impl GlobalAlloc for ShimHeap {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: as above.
        self.with(|h| unsafe { h.malloc(l.size(), l.align()) })
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as above.
        self.with(|h| unsafe { h.calloc(l.size(), l.align()) })
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from this heap with layout `l` (GlobalAlloc's contract).
        self.with(|h| unsafe { h.free(p, l.size(), l.align()) })
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `dealloc`.
        self.with(|h| unsafe { h.realloc(p, l.size(), l.align(), new_size) })
    }
}

#[cfg_attr(not(test), global_allocator)]
pub static HEAP: ShimHeap = ShimHeap::new();

/// Takes the heap's lock before the process forks (the core's fork handler). Until
/// [`unlock_after_fork`], the forking thread must not allocate: the core marks it as inside
/// the shim, so that the program's own fork handlers, which may run in between, go straight to
/// the real functions.
pub fn lock_for_fork() {
    HEAP.lock.lock();
}

/// Lets the heap's lock go after a fork, in the parent and in the child.
pub fn unlock_after_fork() {
    HEAP.lock.unlock();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_every_size_and_alignment_come_back_intact_from_many_threads() {
        let heap: &'static ShimHeap = Box::leak(Box::new(ShimHeap::new()));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut kept = Vec::new();
                    for i in 0..20_000usize {
                        let size = 1 + (i * 7919 + t * 31) % 5000;
                        let align = 1 << (i % 7);
                        let l = Layout::from_size_align(size, align).unwrap();
                        // SAFETY: a non-zero layout; the block is written within its size.
                        let p = unsafe { heap.alloc(l) };
                        assert!(!p.is_null());
                        assert_eq!(p as usize % align, 0);
                        // SAFETY: as above.
                        unsafe { std::ptr::write_bytes(p, (i % 251) as u8, size) };
                        kept.push((p, l, (i % 251) as u8));
                        if kept.len() > 64 {
                            let (q, lq, v) = kept.swap_remove(i % 64);
                            // SAFETY: allocated above with `lq`, filled with `v`.
                            let s = unsafe { std::slice::from_raw_parts(q, lq.size()) };
                            assert!(s.iter().all(|&b| b == v), "a block was overwritten");
                            // SAFETY: as above.
                            unsafe { heap.dealloc(q, lq) };
                        }
                    }
                    for (q, lq, _) in kept {
                        // SAFETY: allocated above with `lq`.
                        unsafe { heap.dealloc(q, lq) };
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn zeroed_and_grown_blocks_keep_their_contents() {
        let heap = ShimHeap::new();
        let l = Layout::from_size_align(100, 16).unwrap();
        // SAFETY: a non-zero layout.
        let p = unsafe { heap.alloc_zeroed(l) };
        // SAFETY: 100 bytes just allocated.
        assert!(unsafe { std::slice::from_raw_parts(p, 100) }
            .iter()
            .all(|&b| b == 0));
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(p, 7, 100) };
        // SAFETY: `p` has layout `l`; grown to 1 MiB, past dlmalloc's mapped-chunk threshold.
        let q = unsafe { heap.realloc(p, l, 1 << 20) };
        // SAFETY: the first 100 bytes were carried over.
        assert!(unsafe { std::slice::from_raw_parts(q, 100) }
            .iter()
            .all(|&b| b == 7));
        // SAFETY: `q` has the grown layout.
        unsafe { heap.dealloc(q, Layout::from_size_align(1 << 20, 16).unwrap()) };
    }
}
