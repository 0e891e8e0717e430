//! The C API of `include/waitshim.h`. Programs declare these weak, so they run unchanged (the
//! calls become no-ops) without the shim.

use libc::{c_char, c_int, c_void};
use waitshim_format::ThreadName;

use crate::clock::now_ns;
use crate::track::threads::{current, InShim};
use crate::track::tracker;

fn text(s: *const c_char) -> Option<String> {
    (!s.is_null()).then(|| {
        // SAFETY: the API takes NUL-terminated strings; null is refused.
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
    let _in = InShim::enter();
    tr.name_object(obj as usize, name);
}

/// Names the calling thread in reports (without changing its kernel name).
#[no_mangle]
pub extern "C" fn waitshim_name_thread(name: *const c_char) {
    let (Some(tr), Some(name), Some(t)) = (tracker(), text(name), current()) else {
        return;
    };
    let _in = InShim::enter();
    t.named.store(true, std::sync::atomic::Ordering::Relaxed);
    t.policy.set_name(&name);
    tr.log.write(
        &ThreadName {
            tid: t.tid(),
            ns: now_ns(),
            name,
        }
        .into(),
    );
}

/// A data request from the program itself: every counter and pending record reaches the log
/// before this returns. Returns the snapshot's number (1, 2, ...), or 0 without tracking.
#[no_mangle]
pub extern "C" fn waitshim_snapshot() -> c_int {
    let Some(tr) = tracker() else { return 0 };
    if current().is_none() {
        return 0;
    }
    let seq = crate::service::snapshot(tr, waitshim_format::snapshot_source::API, 0);
    c_int::try_from(seq).unwrap_or(c_int::MAX)
}

/// Reads the policy file (`WAITSHIM_POLICY`) again now. Returns the policy version in force
/// after the call if the file was valid, -1 if it was not (the old policy stays, and stderr
/// says why) or there is no policy file, 0 without tracking.
#[no_mangle]
pub extern "C" fn waitshim_policy_reload() -> c_int {
    let Some(tr) = tracker() else { return 0 };
    if current().is_none() {
        return 0;
    }
    let _in = InShim::enter();
    match crate::policy::reload(&tr.log) {
        Ok(v) => c_int::try_from(v).unwrap_or(c_int::MAX),
        Err(_) => -1,
    }
}

/// A progress point's call: `name` NUL-terminated (a string literal is fastest: it is matched
/// by its address). Threads the shim does not know yet count too.
fn progress(name: *const c_char, step: crate::track::progress::Step) {
    let Some(tr) = tracker() else { return };
    if name.is_null() {
        return;
    }
    let in_handler = crate::track::threads::in_handler();
    // Atomics, and at a point's first visit the shim's own lock and a log record: no
    // cancellation point.
    let _in = InShim::enter_quiet();
    tr.progress.step(name, step, &tr.log, now_ns(), in_handler);
}

/// One unit of work done (a request served, a row written): throughput.
#[no_mangle]
pub extern "C" fn waitshim_progress(name: *const c_char) {
    progress(name, crate::track::progress::Step::Visit);
}

/// A transaction named `name` begins (its end may come on another thread).
#[no_mangle]
pub extern "C" fn waitshim_progress_begin(name: *const c_char) {
    progress(name, crate::track::progress::Step::Begin);
}

/// A transaction named `name` ends: a visit of the point, and the end of one begun one.
#[no_mangle]
pub extern "C" fn waitshim_progress_end(name: *const c_char) {
    progress(name, crate::track::progress::Step::End);
}
