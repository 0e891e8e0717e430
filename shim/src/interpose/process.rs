//! Process-level events: `exit` (to learn the status), `_exit`/`_Exit` (which skip the library
//! destructor, so the log is finished here; unlike `exit`, no atexit handler of the program
//! runs), and `dlopen` (new modules for symbolization).

use std::sync::atomic::Ordering;

use libc::{c_char, c_int, c_void};
use waitshim_format::end_reason;

use crate::real;
use crate::track::threads::Inside;
use crate::track::{self, tracker, EXIT_STATUS};

#[no_mangle]
pub unsafe extern "C" fn exit(status: c_int) -> ! {
    EXIT_STATUS.store(status as i64, Ordering::Relaxed);
    // SAFETY: glibc's exit with the caller's status.
    unsafe { real::call_noreturn(&real::EXIT, status) }
}

#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    EXIT_STATUS.store(status as i64, Ordering::Relaxed);
    track::finish(end_reason::UNDERSCORE_EXIT);
    // SAFETY: glibc's _exit with the caller's status.
    unsafe { real::call_noreturn(&real::UNDERSCORE_EXIT, status) }
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    EXIT_STATUS.store(status as i64, Ordering::Relaxed);
    track::finish(end_reason::UNDERSCORE_EXIT);
    // SAFETY: glibc's _Exit with the caller's status.
    unsafe { real::call_noreturn(&real::UNDERSCORE_CAPITAL_EXIT, status) }
}

#[no_mangle]
pub unsafe extern "C" fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void {
    // SAFETY: forwarding.
    let h = unsafe { real::dlopen(file, flags) };
    if !h.is_null() {
        if let Some(tr) = tracker() {
            let _in = Inside::enter();
            tr.modules.scan(&tr.log);
        }
    }
    h
}
