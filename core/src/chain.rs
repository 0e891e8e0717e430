//! Call chains: captured with the project's own unwinder (`waitshim-unwind`: about 215 ns for
//! 24 frames here, against 170 ns for libunwind's `unw_backtrace` measured side by side by
//! `cargo run --release -p waitshim-unwind --example bench`; the chain cache spares most
//! captures), interned so each distinct chain is written to the log once and records carry its
//! id.
//!
//! The unwinder reads the `.eh_frame` of the objects of its module table, built here at start
//! and again after every `dlopen` and `dlclose`; it takes no lock, allocates nothing and opens
//! no descriptor, so it may run in a signal handler and never touches the program's files.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use waitshim_format::Chain;

pub const MAX_DEPTH: usize = 64;

static OWN_LO: AtomicUsize = AtomicUsize::new(0);
static OWN_HI: AtomicUsize = AtomicUsize::new(0);

/// Builds the unwinder's module table and learns where the shim's own code is.
pub fn init() {
    let (lo, hi) = crate::modules::own_range();
    OWN_LO.store(lo, Ordering::Relaxed);
    OWN_HI.store(hi, Ordering::Relaxed);
    waitshim_unwind::refresh();
}

/// The shim's code, whose frames open every chain captured inside it (known once [`init`] has
/// run; learnt once: a scan of the loaded objects takes the loader's lock, which a child forked
/// while the shim held it would wait for forever).
pub fn own() -> std::ops::Range<u64> {
    OWN_LO.load(Ordering::Relaxed) as u64..OWN_HI.load(Ordering::Relaxed) as u64
}

/// Whether `addr` is in the shim's own code (known once [`init`] has run): a call the shim makes
/// itself, through a function it interposes, is not the program's.
pub fn own_code(addr: usize) -> bool {
    own().contains(&(addr as u64))
}

/// Frames of the current thread, innermost first, without the shim's own frames. Not in a
/// signal handler (see [`capture_interrupted`]).
pub fn capture(depth: usize, out: &mut [u64; MAX_DEPTH]) -> usize {
    let out = &mut out[..depth.min(MAX_DEPTH)];
    let switched = crate::words::switched_from();
    if switched.is_null() {
        waitshim_unwind::backtrace(out, own())
    } else {
        // On the shim's spare stack: from where the thread left its own (`crate::stack`).
        // SAFETY: the registers live in the frame of `stack::switched`, which runs this.
        waitshim_unwind::backtrace_from(unsafe { &*switched }, out, own())
    }
}

/// As [`capture`], also writing where each return address was read on the stack into `slots`
/// (see `waitshim_unwind::backtrace_slots`; all 0 on the shim's spare stack, whose chains are
/// not kept by call site).
pub fn capture_slots(
    depth: usize,
    out: &mut [u64; MAX_DEPTH],
    slots: &mut [u64; MAX_DEPTH],
) -> usize {
    let d = depth.min(MAX_DEPTH);
    let switched = crate::words::switched_from();
    if switched.is_null() {
        waitshim_unwind::backtrace_slots(&mut out[..d], Some(&mut slots[..d]), own())
    } else {
        // SAFETY: the registers live in the frame of `stack::switched`, which runs this.
        waitshim_unwind::backtrace_from(unsafe { &*switched }, &mut out[..d], own())
    }
}

/// Frames of the code a signal interrupted, from the handler's `ucontext`, without the shim's
/// own frames (async-signal-safe).
///
/// # Safety
/// `ucontext` must be the context the kernel passed to an `SA_SIGINFO` handler.
pub unsafe fn capture_interrupted(ucontext: *const libc::c_void, out: &mut [u64]) -> usize {
    // SAFETY: as the caller promises.
    unsafe { waitshim_unwind::backtrace_from_ucontext(ucontext, out, own()) }
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
