//! The C API of `include/waitshim.h`. Programs declare these weak, so they run unchanged (the
//! calls become no-ops) without the shim.

use libc::{c_char, c_int, c_void};
use waitshim_format::ThreadName;

use crate::clock::now_ns;
use crate::track::threads::{current, Inside};
use crate::track::tracker;

fn text(s: *const c_char) -> Option<String> {
    // SAFETY: the API takes NUL-terminated strings; null is refused.
    (!s.is_null()).then(|| {
        unsafe { std::ffi::CStr::from_ptr(s) }
            .to_string_lossy()
            .into_owned()
    })
}

/// 1 when the program runs under waitshim and tracking is on.
#[no_mangle]
pub extern "C" fn waitshim_present() -> c_int {
    c_int::from(tracker().is_some())
}

/// Names the sync object at `obj` in reports.
#[no_mangle]
pub extern "C" fn waitshim_name_object(obj: *const c_void, name: *const c_char) {
    let (Some(tr), Some(name)) = (tracker(), text(name)) else {
        return;
    };
    if current().is_none() {
        return;
    }
    let _in = Inside::enter();
    tr.name_object(obj as usize, name);
}

/// Names the calling thread in reports (without changing its kernel name).
#[no_mangle]
pub extern "C" fn waitshim_name_thread(name: *const c_char) {
    let (Some(tr), Some(name), Some(t)) = (tracker(), text(name), current()) else {
        return;
    };
    let _in = Inside::enter();
    t.named.store(true, std::sync::atomic::Ordering::Relaxed);
    tr.log.write(
        &ThreadName {
            tid: t.tid(),
            ns: now_ns(),
            name,
        }
        .into(),
    );
}
