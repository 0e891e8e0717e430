//! Destructors of the shim's Rust thread-locals, kept on the shim's own heap.
//!
//! Rust's standard library registers a thread-local's destructor with the C library's
//! `__cxa_thread_atexit_impl`, which allocates from the program's heap (`calloc`). The shim's
//! thread-locals (crossbeam's epoch handle, touched by every skiplist operation) are first
//! touched on a thread's first tracked call, which may be inside the program's own allocator
//! (jemalloc takes its locks with the pthread functions the shim interposes): that `calloc`
//! waits for the lock the thread is handling. The library therefore defines its own
//! `__cxa_thread_atexit_impl`, hidden (never exported: the program's C++ destructors keep going
//! to the C library), which the standard library's weak reference binds to at link time. It keeps
//! the list on the shim's heap and runs it from the shim's thread-exit key
//! ([`super::threads`]).

use std::arch::global_asm;

use super::threads;

// Weak, as the standard library's reference to it is: where both end up in one module (fat LTO)
// a strong definition would be made weak anyway, with a warning. It is the library's only
// definition, so the reference binds to it all the same.
global_asm!(
    ".weak __cxa_thread_atexit_impl",
    ".hidden __cxa_thread_atexit_impl",
    ".type __cxa_thread_atexit_impl, @function",
    "__cxa_thread_atexit_impl:",
    "jmp {register}",
    ".size __cxa_thread_atexit_impl, . - __cxa_thread_atexit_impl",
    register = sym register,
);

type Dtor = unsafe extern "C" fn(*mut u8);

/// One registered destructor; the thread's list is newest first.
struct Node {
    dtor: Dtor,
    obj: *mut u8,
    next: *mut Node,
}

extern "C" fn register(dtor: Dtor, obj: *mut u8, _dso: *mut u8) -> libc::c_int {
    let node = Box::new(Node {
        dtor,
        obj,
        next: threads::tls_dtors() as *mut Node,
    });
    threads::set_tls_dtors(Box::into_raw(node) as usize);
    threads::arm_exit_hook();
    0
}

/// Runs the calling thread's registered destructors, newest first, including any that run
/// registers (at the thread's end).
pub fn run() {
    loop {
        let head = threads::tls_dtors() as *mut Node;
        if head.is_null() {
            return;
        }
        // SAFETY: nodes are made by `register` with `Box::into_raw` and taken off once.
        let node = unsafe { Box::from_raw(head) };
        threads::set_tls_dtors(node.next as usize);
        // SAFETY: the destructor and object the standard library registered for this thread.
        unsafe { (node.dtor)(node.obj) };
    }
}
