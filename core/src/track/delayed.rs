//! `WAITSHIM_DELAY`: critical sections of selected locks lengthened on purpose by a fixed busy
//! delay just before their real release, so that the slope of run time against the delay can
//! be measured (`waitshim-analyze whatif --delayed`). Nothing is shortened, no call's result
//! changes: the delay spins on the shim's clock inside the section, never sleeps.
//!
//! Unarmed (the variable unset or refused), an unlock pays one relaxed load of `ARMED`.
//! Armed, an unlock finds the object's entry (the thread's cache, else the registry) and reads
//! the decision cached in its busy part; the rules (`crate::delay`, through `hooks::delay`)
//! are asked once per object, again only when it is named through the C API.
//!
//! Not delayed: the release inside `pthread_cond_wait` (glibc's own, never through the
//! interposed unlock), and unlocks in the program's signal handlers (no thread record there:
//! nothing is looked up or allocated).

use std::sync::atomic::{AtomicBool, Ordering};

use waitshim_format::{mutex_kind, Delayed, ObjectKind};

use super::objects::{Busy, ObjEntry, DEAD};
use super::threads::{current_fast, InShim, ThreadRec};
use super::{hooks, tracker, Tracker};
use crate::clock::now_ns;
use crate::layout::mutex as glibc_mutex;

/// Set once at start when `WAITSHIM_DELAY` holds a valid rule.
static ARMED: AtomicBool = AtomicBool::new(false);

/// [`Busy::delay`] of an object no rule selects.
const NONE: u64 = u64::MAX;

pub fn arm() {
    ARMED.store(true, Ordering::Relaxed);
}

/// Whether any delay is in force: the only cost of an unlock without `WAITSHIM_DELAY`.
#[inline(always)]
pub fn armed() -> bool {
    ARMED.load(Ordering::Relaxed)
}

/// The object's decision must be made again (it was just named).
pub fn forget(obj: &ObjEntry) {
    if let Some(b) = obj.busy_if() {
        b.delay.store(0, Ordering::Relaxed);
    }
}

/// The calling thread is about to release the lock of `kind` at `addr`: lengthens the section
/// if a rule selects the object. For a recursive mutex only its outermost release (glibc's
/// `__count` is 1), and for a mutex only by its owner (an unlock that glibc will refuse is not
/// a section's end).
///
/// # Safety
/// `addr` is the live lock being released.
#[cold]
#[inline(never)]
pub unsafe fn before_release(addr: usize, kind: ObjectKind) {
    let Some(t) = current_fast() else { return };
    if kind == ObjectKind::Mutex {
        // SAFETY: the live mutex being released (the caller's promise).
        let (owner, type_, count) = unsafe {
            (
                glibc_mutex::owner(addr),
                glibc_mutex::kind(addr) & mutex_kind::TYPE_MASK,
                glibc_mutex::count(addr),
            )
        };
        if owner != t.tid() || (type_ == mutex_kind::RECURSIVE && count > 1) {
            return;
        }
    }
    let Some(obj) = entry(t, addr) else { return };
    if obj.kind != kind {
        return;
    }
    let b = obj.busy();
    let mut d = b.delay.load(Ordering::Relaxed);
    if d == 0 {
        d = crate::stack::with_room(|| decide(obj));
        b.delay.store(d, Ordering::Relaxed);
    }
    if d == NONE {
        return;
    }
    let ns = d & 0xffff_ffff;
    let start = now_ns();
    let end = start + ns;
    let mut now = start;
    while now < end {
        std::hint::spin_loop();
        now = now_ns();
    }
    if b.delay_sections.fetch_add(1, Ordering::Relaxed) == 0 {
        // No longer a plain object: its destroy writes it and its last counts.
        b.version.fetch_add(1, Ordering::Relaxed);
    }
    b.delay_total.fetch_add(now - start, Ordering::Relaxed);
}

fn entry(t: &ThreadRec, addr: usize) -> Option<&'static ObjEntry> {
    if let Some((_, obj)) = t.cached(addr) {
        return Some(obj);
    }
    let tr = tracker()?;
    let _in = InShim::enter_quiet();
    tr.objects.get(addr).filter(|o| o.flags() & DEAD == 0)
}

/// Asks the rules about `obj`: `(rule + 1) << 32 | ns`, or [`NONE`].
fn decide(obj: &ObjEntry) -> u64 {
    let (Some(tr), Some(h)) = (tracker(), hooks::get()) else {
        return NONE;
    };
    // Symbols are looked up, the shim's heap used: straight to the real functions.
    let _in = InShim::enter();
    let name = obj
        .busy()
        .policy
        .get()
        .and_then(|c| c.name.lock().unwrap_or_else(|e| e.into_inner()).clone());
    let mut creation = || super::collect::creation_names(tr, obj);
    match (h.delay)(name.as_deref(), &mut creation) {
        Some((rule, ns)) => (u64::from(rule) + 1) << 32 | ns.clamp(1, 0xffff_ffff),
        None => NONE,
    }
}

/// Writes the object's delayed sections if they changed since last written (flushes, its
/// destroy, exit).
pub(super) fn write(tr: &Tracker, obj: &ObjEntry, now: u64) {
    let Some(b) = obj.busy_if() else { return };
    let sections = b.delay_sections.load(Ordering::Relaxed);
    if sections == 0 || b.delay_written.swap(sections, Ordering::Relaxed) == sections {
        return;
    }
    write_record(tr, obj, b, sections, now);
}

fn write_record(tr: &Tracker, obj: &ObjEntry, b: &Busy, sections: u64, now: u64) {
    let Some(object_id) = tr.try_id_of(obj) else {
        return;
    };
    let d = b.delay.load(Ordering::Relaxed);
    let rule = if d == 0 || d == NONE {
        0
    } else {
        ((d >> 32) - 1) as u32
    };
    tr.log.write(
        &Delayed {
            object_id,
            rule,
            ns: now,
            sections,
            total_ns: b.delay_total.load(Ordering::Relaxed),
        }
        .into(),
    );
}
