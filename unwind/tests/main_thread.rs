//! The main thread's stack (bounded by `__libc_stack_end`, not by `pthread_getattr_np`) unwinds
//! down to `_start`. Without the test harness, so that `main` runs on the main thread.

mod common;

use std::hint::black_box;

#[no_mangle]
#[inline(never)]
extern "C" fn uw_main_inner(out: *mut [u64; 64]) -> usize {
    // SAFETY: main passes its own buffer.
    let n = waitshim_unwind::backtrace(unsafe { &mut *out }, 0..0);
    black_box(n)
}

#[no_mangle]
#[inline(never)]
extern "C" fn uw_main_outer(out: *mut [u64; 64]) -> usize {
    let n = uw_main_inner(black_box(out));
    black_box(n + 1) - 1
}

fn main() {
    let mut out = [0u64; 64];
    let n = uw_main_outer(&mut out);
    let names = common::names(&out[..n], true);
    assert!(
        common::has_run(&names, &["uw_main_inner", "uw_main_outer"]),
        "{names:?}"
    );
    assert!(n < 64, "{names:?}");
    assert_eq!(
        names.last().map(String::as_str),
        Some("_start"),
        "{names:?}"
    );
    println!("main thread: {n} frames, from the capture down to _start: ok");
}
