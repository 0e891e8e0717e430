//! Call chains: captured with libunwind's `unw_backtrace` (about 170 ns for 20 frames here; the
//! step-by-step cursor API costs tens of microseconds and must not be used), interned so each
//! distinct chain is written to the log once and records carry its id.
//!
//! libunwind is `dlopen`ed with RTLD_LOCAL rather than linked: linked, its `_Unwind_*` symbols
//! would enter the program's global scope ahead of libgcc's and take over C++ exception
//! unwinding. Without libunwind, glibc's `backtrace` is the (slower) fallback.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use waitshim_format::Chain;

pub const MAX_DEPTH: usize = 64;

type BacktraceFn = unsafe extern "C" fn(*mut *mut libc::c_void, libc::c_int) -> libc::c_int;

static UNWINDER: AtomicUsize = AtomicUsize::new(0);
/// The unwinder is libunwind's, which may be called from a signal handler (glibc's `backtrace`
/// may not: its first call loads libgcc).
static SIGNAL_SAFE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static OWN_LO: AtomicUsize = AtomicUsize::new(0);
static OWN_HI: AtomicUsize = AtomicUsize::new(0);

/// Finds an unwinder. Returns a warning for the log if only the fallback is available.
pub fn init() -> Option<&'static str> {
    let (lo, hi) = crate::modules::own_range();
    OWN_LO.store(lo, Ordering::Relaxed);
    OWN_HI.store(hi, Ordering::Relaxed);
    // SAFETY: dlopen/dlsym with NUL-terminated names; RTLD_LOCAL keeps libunwind's symbols out of
    // the global scope.
    unsafe {
        let h = libc::dlopen(
            c"libunwind.so.8".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        );
        if !h.is_null() {
            let f = libc::dlsym(h, c"unw_backtrace".as_ptr());
            if !f.is_null() {
                UNWINDER.store(f as usize, Ordering::Relaxed);
                SIGNAL_SAFE.store(true, Ordering::Relaxed);
                return None;
            }
        }
        let f = libc::dlsym(libc::RTLD_DEFAULT, c"backtrace".as_ptr());
        UNWINDER.store(f as usize, Ordering::Relaxed);
    }
    Some("libunwind.so.8 not found (install libunwind8): call chains use glibc backtrace(), which is slower")
}

/// Whether [`capture`] may be called from a signal handler.
pub fn signal_safe() -> bool {
    SIGNAL_SAFE.load(Ordering::Relaxed)
}

/// Frames of the current thread, innermost first, without the shim's own frames.
pub fn capture(depth: usize, out: &mut [u64; MAX_DEPTH]) -> usize {
    let f = UNWINDER.load(Ordering::Relaxed);
    if f == 0 {
        return 0;
    }
    let mut raw = [std::ptr::null_mut::<libc::c_void>(); MAX_DEPTH + 8];
    let want = (depth + 8).min(raw.len());
    // SAFETY: `f` is unw_backtrace or backtrace, both `int f(void **buf, int size)`.
    let n = unsafe {
        let f: BacktraceFn = std::mem::transmute::<usize, BacktraceFn>(f);
        f(raw.as_mut_ptr(), want as libc::c_int)
    };
    let (lo, hi) = (
        OWN_LO.load(Ordering::Relaxed),
        OWN_HI.load(Ordering::Relaxed),
    );
    let mut k = 0;
    let mut skipping = true;
    for &p in raw.iter().take(n.max(0) as usize) {
        let a = p as usize;
        if skipping && a >= lo && a < hi {
            continue;
        }
        skipping = false;
        if k == depth {
            break;
        }
        out[k] = a as u64;
        k += 1;
    }
    k
}

/// Cheap hash for the per-thread chain cache.
pub fn hash(frames: &[u64]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ frames.len() as u64;
    for &f in frames {
        h = (h ^ f).wrapping_mul(0x100_0000_01b3).rotate_left(29);
    }
    h | 1
}

/// The process-wide table of interned chains, by frames and by id.
pub struct Chains {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    ids: HashMap<Arc<[u64]>, u32>,
    /// Frames of chain `id` at index `id - 1`.
    by_id: Vec<Arc<[u64]>>,
}

impl Chains {
    pub fn new() -> Self {
        Chains {
            table: Mutex::new(Table::default()),
        }
    }

    /// The frames of an interned chain (policy selectors look at where objects were created).
    pub fn frames(&self, id: u32) -> Option<Arc<[u64]>> {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.by_id.get((id as usize).checked_sub(1)?).cloned()
    }

    /// Id of this chain, writing it to the log the first time it is seen.
    pub fn intern(&self, frames: &[u64], log: &crate::log::Log) -> u32 {
        if frames.is_empty() {
            return 0;
        }
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = t.ids.get(frames) {
            return id;
        }
        let shared: Arc<[u64]> = frames.into();
        t.by_id.push(shared.clone());
        let id = t.by_id.len() as u32;
        t.ids.insert(shared, id);
        drop(t);
        log.write(
            &Chain {
                chain_id: id,
                frames: frames.to_vec(),
            }
            .into(),
        );
        id
    }
}
