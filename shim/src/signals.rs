//! The shim's signal handlers (data requests, live holder stacks): installed only on signals the
//! program leaves alone, with `SA_RESTART` so that the system calls that can be restarted are.

use crate::real::SIGACTION;

/// The real `sigaction`.
///
/// # Safety
/// As `sigaction(2)`.
pub unsafe fn real_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    type F = unsafe extern "C" fn(
        libc::c_int,
        *const libc::sigaction,
        *mut libc::sigaction,
    ) -> libc::c_int;
    // SAFETY: the slot holds the address of the C library's `sigaction`, of this signature.
    let f: F = unsafe { std::mem::transmute::<usize, F>(SIGACTION.get()) };
    // SAFETY: forwarding the caller's arguments.
    unsafe { f(sig, act, old) }
}

pub type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Installs `handler` for `sig`, unless the program has a handler of its own there.
pub fn install(sig: libc::c_int, handler: Handler) -> Result<(), String> {
    // SAFETY: sigaction with a zeroed struct queries the current disposition only.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if real_sigaction(sig, std::ptr::null(), &mut old) != 0 {
            return Err("cannot query its disposition".into());
        }
        if old.sa_sigaction == handler as usize {
            return Ok(());
        }
        if old.sa_sigaction == libc::SIG_IGN {
            // Taking it would also undo the ignoring for programs it execs.
            return Err("the program ignores it".into());
        }
        if old.sa_sigaction != libc::SIG_DFL {
            return Err("the program has a handler of its own for it".into());
        }
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigfillset(&mut act.sa_mask);
        if real_sigaction(sig, &act, std::ptr::null_mut()) != 0 {
            return Err("sigaction failed".into());
        }
    }
    Ok(())
}

/// Whether `handler` is still the one installed for `sig` (the program may have replaced it).
pub fn still_ours(sig: libc::c_int, handler: Handler) -> bool {
    // SAFETY: querying only.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        real_sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == handler as usize
    }
}
