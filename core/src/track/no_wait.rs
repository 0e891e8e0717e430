//! Calls that wait for nothing: an init, a destroy, a try that found the object busy, an
//! acquisition that returned an error. Reached as `engage::*` like the rest of the operations
//! the interposed functions translate their calls into.

use std::sync::atomic::Ordering;

use waitshim_format::ObjectKind;

use super::engage::Subtype;
use super::threads::{current, InShim, ThreadRec};
use super::{tracker, CallSite};

/// An init function called from `site` returned `r` for the object at `addr`: on success, a
/// new generation of it.
pub fn initialised(r: libc::c_int, addr: usize, kind: ObjectKind, subtype: u32, site: CallSite) {
    crate::stack::with_room(|| initialised_here(r, addr, kind, subtype, site))
}

#[inline(always)]
fn initialised_here(r: libc::c_int, addr: usize, kind: ObjectKind, subtype: u32, site: CallSite) {
    if r == 0 {
        if let (Some(t), Some(tr)) = (current(), tracker()) {
            let _in = InShim::enter();
            tr.object_initialised(t, addr, kind, subtype, site);
        }
    }
}

/// A destroy function returned `r` for the object at `addr`: on success, that generation ends.
pub fn destroyed(r: libc::c_int, addr: usize) {
    crate::stack::with_room(|| destroyed_here(r, addr))
}

#[inline(always)]
fn destroyed_here(r: libc::c_int, addr: usize) {
    if r == 0 {
        if let (Some(t), Some(tr)) = (current(), tracker()) {
            let _in = InShim::enter();
            tr.object_destroyed(t, addr);
        }
    }
}

/// An attempt to acquire without waiting found the object busy.
///
/// # Safety
/// `addr` is a live object that `subtype` can read (the one the caller tried).
pub unsafe fn busy(t: &ThreadRec, addr: usize, kind: ObjectKind, subtype: Subtype) {
    // SAFETY: as the caller promises.
    crate::stack::with_room(|| unsafe { busy_here(t, addr, kind, subtype) })
}

/// # Safety
/// As [`busy`].
#[inline(always)]
unsafe fn busy_here(t: &ThreadRec, addr: usize, kind: ObjectKind, subtype: Subtype) {
    let Some(tr) = tracker() else { return };
    let _in = InShim::enter();
    // SAFETY: as the caller promises.
    let obj = tr.object(t, addr, kind, unsafe { subtype(addr) });
    obj.busy().stats.busy.fetch_add(1, Ordering::Relaxed);
    obj.touch();
}

/// An acquisition (or a wait that did not wait) returned error `errno` (owner died, not
/// recoverable, a relock of an error-checking mutex, an invalid deadline...): counted, with its
/// errno, like a wait that ended in error.
///
/// # Safety
/// `addr` is a live object that `subtype` can read (the one the caller called for).
pub unsafe fn failed(
    t: &ThreadRec,
    addr: usize,
    kind: ObjectKind,
    subtype: Subtype,
    errno: libc::c_int,
) {
    // SAFETY: as the caller promises.
    crate::stack::with_room(|| unsafe { failed_here(t, addr, kind, subtype, errno) })
}

/// # Safety
/// As [`failed`].
#[inline(always)]
unsafe fn failed_here(
    t: &ThreadRec,
    addr: usize,
    kind: ObjectKind,
    subtype: Subtype,
    errno: libc::c_int,
) {
    let Some(tr) = tracker() else { return };
    let _in = InShim::enter();
    // SAFETY: as the caller promises.
    let obj = tr.object(t, addr, kind, unsafe { subtype(addr) });
    obj.busy().stats.errors.fetch_add(1, Ordering::Relaxed);
    obj.count_errno(errno);
    obj.touch();
}

/// A wait ended by acquiring a robust mutex whose previous owner died: besides the wait's end in
/// error, the acquisition counts an error of its own.
pub fn acquired_owner_dead(obj: &super::objects::ObjEntry) {
    obj.busy().stats.errors.fetch_add(1, Ordering::Relaxed);
}
