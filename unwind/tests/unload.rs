//! Unloading a library: the module table drops it before it is unmapped, and unwinds running
//! on other threads meanwhile neither crash nor hang.

mod common;

use std::ffi::c_void;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};

use waitshim_unwind::{around_unload, backtrace, backtrace_from, refresh, Regs};

/// Frames of a context stopped at the first instruction of `entry`, called from `ret`.
fn frames_at_entry(entry: u64, ret: u64) -> Vec<u64> {
    let stack = black_box([ret, 0, 0, 0]);
    let regs = Regs {
        rip: entry,
        rsp: stack.as_ptr() as u64,
        ..Regs::default()
    };
    let mut out = [0u64; 8];
    let n = backtrace_from(&regs, &mut out, 0..0);
    out[..n].to_vec()
}

/// One test: while any unload is under way, every dynamically loaded library is out of the
/// table, so the two parts must not run at once.
#[test]
fn unloads() {
    // The first table, as the shim builds it at start: what it lists is taken as never unloaded.
    refresh();
    an_unloaded_library_is_out_of_the_table_before_it_is_unmapped();
    loads_and_unloads_while_other_threads_unwind_neither_crash_nor_hang();
}

fn an_unloaded_library_is_out_of_the_table_before_it_is_unmapped() {
    let lib = common::load("unload", true);
    // SAFETY: only the address of the symbol is taken.
    let leaf = unsafe { libc::dlsym(lib.handle, c"c_leaf".as_ptr()) } as u64;
    let ret = frames_at_entry as *const () as usize as u64 + 1;
    assert_eq!(frames_at_entry(leaf, ret)[..2], [leaf, ret]);
    let (during, rc) = around_unload(|| {
        let during = frames_at_entry(leaf, ret);
        // SAFETY: nothing of the library is in use any more.
        (during, unsafe { libc::dlclose(lib.handle) })
    });
    assert_eq!(rc, 0);
    assert_eq!(during, [leaf], "unwound through a library being unloaded");
    // Unmapped now: its code is in no module of the table.
    assert_eq!(frames_at_entry(leaf, ret), [leaf]);
}

static STOP: AtomicBool = AtomicBool::new(false);

fn loads_and_unloads_while_other_threads_unwind_neither_crash_nor_hang() {
    let unwinders: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                let mut out = [0u64; 64];
                let mut count = 0u64;
                while !STOP.load(Ordering::Relaxed) {
                    assert!(backtrace(&mut out, 0..0) > 2);
                    count += 1;
                }
                count
            })
        })
        .collect();
    let lib = common::load("churn", true);
    // SAFETY: nothing of the library is in use; the loop below loads it again each time.
    assert_eq!(around_unload(|| unsafe { libc::dlclose(lib.handle) }), 0);
    let path = lib.path;
    let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    for _ in 0..200 {
        // SAFETY: loads and unloads a library of plain functions, none of them in use.
        unsafe {
            let h: *mut c_void = libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            assert!(!h.is_null());
            refresh();
            assert_eq!(around_unload(|| libc::dlclose(h)), 0);
        }
    }
    STOP.store(true, Ordering::Relaxed);
    for t in unwinders {
        assert!(t.join().expect("unwinder thread") > 0);
    }
}
