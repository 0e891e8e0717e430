//! Cost of one capture of a ~20-frame chain: this unwinder against libunwind's `unw_backtrace`
//! (when `libunwind.so.8` can be loaded), in one run, interleaved round by round and
//! alternating which goes first, so that drift in machine load hits both alike.
//!
//! `cargo run --release -p waitshim-unwind --example bench [ROUNDS]`

use std::hint::black_box;
use std::time::Instant;

type UnwBacktrace = unsafe extern "C" fn(*mut *mut libc::c_void, libc::c_int) -> libc::c_int;

/// Captures per round and side.
const BATCH: usize = 1000;
/// Calls between the thread's start and the captures.
const DEPTH: u32 = 16;

fn libunwind() -> Option<UnwBacktrace> {
    // SAFETY: dlopen/dlsym with NUL-terminated names; RTLD_LOCAL keeps libunwind's `_Unwind_*`
    // out of the global scope. unw_backtrace is `int unw_backtrace(void **, int)`.
    unsafe {
        let h = libc::dlopen(
            c"libunwind.so.8".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        );
        if h.is_null() {
            return None;
        }
        let f = libc::dlsym(h, c"unw_backtrace".as_ptr());
        (!f.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, UnwBacktrace>(f))
    }
}

#[inline(never)]
fn ours(out: &mut [u64; 64]) -> usize {
    waitshim_unwind::backtrace(out, 0..0)
}

#[inline(never)]
fn theirs(f: UnwBacktrace, out: &mut [*mut libc::c_void; 64]) -> usize {
    // SAFETY: a buffer of 64 pointers, as announced.
    unsafe { f(out.as_mut_ptr(), 64) as usize }
}

fn measure(rounds: usize) {
    let unw = libunwind();
    let mut a = [0u64; 64];
    let mut b = [std::ptr::null_mut(); 64];
    let (mut ns_ours, mut ns_theirs) = (0u128, 0u128);
    let (n_ours, n_theirs) = (ours(&mut a), unw.map_or(0, |f| theirs(f, &mut b)));
    for round in 0..rounds {
        let run_ours = |ns: &mut u128, a: &mut [u64; 64]| {
            let t = Instant::now();
            for _ in 0..BATCH {
                black_box(ours(a));
            }
            *ns += t.elapsed().as_nanos();
        };
        let run_theirs = |ns: &mut u128, b: &mut [*mut libc::c_void; 64]| {
            if let Some(f) = unw {
                let t = Instant::now();
                for _ in 0..BATCH {
                    black_box(theirs(f, b));
                }
                *ns += t.elapsed().as_nanos();
            }
        };
        if round % 2 == 0 {
            run_ours(&mut ns_ours, &mut a);
            run_theirs(&mut ns_theirs, &mut b);
        } else {
            run_theirs(&mut ns_theirs, &mut b);
            run_ours(&mut ns_ours, &mut a);
        }
    }
    let per = |ns: u128| ns as f64 / (rounds * BATCH) as f64;
    println!(
        "waitshim-unwind: {:.0} ns per capture of {n_ours} frames ({:.1} ns per frame)",
        per(ns_ours),
        per(ns_ours) / n_ours as f64
    );
    match unw {
        Some(_) => println!(
            "libunwind unw_backtrace: {:.0} ns per capture of {n_theirs} frames ({:.1} ns per frame); ratio ours/theirs {:.2}",
            per(ns_theirs),
            per(ns_theirs) / n_theirs as f64,
            per(ns_ours) / per(ns_theirs)
        ),
        None => println!("libunwind.so.8 not found: no comparison"),
    }
}

#[inline(never)]
fn nest(depth: u32, rounds: usize) {
    if depth == 0 {
        measure(rounds);
    } else {
        nest(black_box(depth - 1), rounds);
    }
    black_box(depth);
}

fn main() {
    let rounds = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    std::thread::spawn(move || nest(DEPTH, rounds))
        .join()
        .expect("bench thread");
}
