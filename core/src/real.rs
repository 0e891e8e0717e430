//! The real-function table: the next definition of each interposed symbol (glibc's), found with
//! `dlsym(RTLD_NEXT)`. Every slot is resolved at start-up ([`resolve_all`], from the tracker's
//! start, also when tracking is off), so that nothing a signal handler reaches calls `dlsym`;
//! a slot still empty when called (another library's constructor called in before ours ran) is
//! resolved then, on a thread that is not in a handler yet.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use libc::{
    c_char, c_int, c_void, clockid_t, pthread_attr_t, pthread_mutex_t, pthread_mutexattr_t,
    pthread_t, timespec,
};

/// The address of a function [`RealFn::available`] found missing.
const MISSING: usize = 1;

pub struct RealFn {
    addr: AtomicUsize,
    name: &'static [u8],
    /// A symbol version (NUL-terminated) to bind to exactly, as `dlvsym` does.
    version: Option<&'static [u8]>,
}

impl RealFn {
    pub const fn new(name: &'static [u8]) -> Self {
        RealFn {
            addr: AtomicUsize::new(0),
            name,
            version: None,
        }
    }

    /// The definition of `name` at symbol version `version` (both NUL-terminated), e.g. the
    /// `GLIBC_2.3.2` condition variable functions.
    pub const fn versioned(name: &'static [u8], version: &'static [u8]) -> Self {
        RealFn {
            addr: AtomicUsize::new(0),
            name,
            version: Some(version),
        }
    }

    /// Address of the next definition. A missing symbol is a broken C library: there is no way
    /// to run the program without it, so say which and stop.
    #[inline(always)]
    pub fn get(&self) -> usize {
        let a = self.addr.load(Ordering::Relaxed);
        if a > MISSING {
            return a;
        }
        self.resolve()
    }

    /// Whether the C library has this function (resolving it if so): for optional ones, which
    /// [`RealFn::get`] would call missing. A missing one is remembered as `MISSING`.
    pub fn available(&self) -> bool {
        match self.addr.load(Ordering::Relaxed) {
            0 => {}
            MISSING => return false,
            _ => return true,
        }
        let p = self.lookup();
        if p.is_null() {
            self.addr.store(MISSING, Ordering::Relaxed);
            return false;
        }
        self.addr.store(p as usize, Ordering::Relaxed);
        true
    }

    /// Address of the next definition if it is resolved already, else 0: for fast paths that
    /// must stay free of calls (see [`resolve_all`]).
    #[inline(always)]
    pub fn resolved(&self) -> usize {
        self.addr.load(Ordering::Relaxed)
    }

    /// The next definition's address, null if there is none.
    fn lookup(&self) -> *mut c_void {
        // SAFETY: `name` and `version` are NUL-terminated literals; dlsym and dlvsym are safe to
        // call at any time.
        unsafe {
            match self.version {
                Some(v) => libc::dlvsym(
                    libc::RTLD_NEXT,
                    self.name.as_ptr() as *const c_char,
                    v.as_ptr() as *const c_char,
                ),
                None => libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr() as *const c_char),
            }
        }
    }

    #[cold]
    fn resolve(&self) -> usize {
        let p = self.lookup();
        if p.is_null() {
            crate::diag::fatal_missing_symbol(self.name);
        }
        self.addr.store(p as usize, Ordering::Relaxed);
        p as usize
    }
}

/// Declares, in the invoking module, a `slot` module of [`RealFn`]s and one forwarding function
/// per listed symbol: `real_fns! { sem_wait: fn(s: *mut sem_t) -> c_int; }` gives
/// `unsafe fn sem_wait(s) -> c_int` calling the C library's `sem_wait`. Each family of
/// interposed functions declares its own.
macro_rules! real_fns {
    ($($name:ident : fn($($arg:ident : $t:ty),*) -> $ret:ty;)*) => {
        pub mod slot {
            use $crate::real::RealFn;
            $(#[allow(non_upper_case_globals)]
            pub static $name: RealFn = RealFn::new(concat!(stringify!($name), "\0").as_bytes());)*

            /// Resolves every slot (at start-up: see [`$crate::real::resolve_all`]).
            pub fn resolve() {
                $($name.available();)*
            }
        }
        $(
            #[inline(always)]
            #[allow(clippy::missing_safety_doc)]
            pub unsafe fn $name($($arg: $t),*) -> $ret {
                let f: unsafe extern "C" fn($($t),*) -> $ret =
                    // SAFETY: the slot holds the address of the C library's function of this
                    // exact name, whose signature is the one declared here (from the C headers).
                    unsafe { ::std::mem::transmute::<usize, _>(slot::$name.get()) };
                // SAFETY: the caller passes arguments meeting the C function's own requirements,
                // as it would calling that function directly.
                unsafe { f($($arg),*) }
            }
        )*
    };
}

#[cfg_attr(test, allow(unused_imports))]
pub(crate) use real_fns;

real_fns! {
    pthread_mutex_init: fn(m: *mut pthread_mutex_t, a: *const pthread_mutexattr_t) -> c_int;
    pthread_mutex_destroy: fn(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_lock: fn(m: *mut pthread_mutex_t) -> c_int;
    // For the counted `sched_yield` wrapper; the shim's own yields are system calls
    // (`crate::sys::sched_yield`).
    sched_yield: fn() -> c_int;
    pthread_mutex_trylock: fn(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_timedlock: fn(m: *mut pthread_mutex_t, t: *const timespec) -> c_int;
    pthread_mutex_clocklock: fn(m: *mut pthread_mutex_t, c: clockid_t, t: *const timespec) -> c_int;
    pthread_mutex_unlock: fn(m: *mut pthread_mutex_t) -> c_int;
    pthread_create: fn(t: *mut pthread_t, a: *const pthread_attr_t, f: extern "C" fn(*mut c_void) -> *mut c_void, arg: *mut c_void) -> c_int;
    pthread_join: fn(t: pthread_t, r: *mut *mut c_void) -> c_int;
    pthread_setname_np: fn(t: pthread_t, n: *const c_char) -> c_int;
    dlopen: fn(f: *const c_char, flags: c_int) -> *mut c_void;
    dlclose: fn(h: *mut c_void) -> c_int;
}

/// `pthread_exit`, `exit` and `_exit` do not return, which the table's macro cannot express.
pub static PTHREAD_EXIT: RealFn = RealFn::new(b"pthread_exit\0");
pub static EXIT: RealFn = RealFn::new(b"exit\0");
pub static UNDERSCORE_EXIT: RealFn = RealFn::new(b"_exit\0");
pub static UNDERSCORE_CAPITAL_EXIT: RealFn = RealFn::new(b"_Exit\0");

/// The C library's `sigaction`: the shim's own handlers must not go through the wrapper that
/// puts the program's handlers behind a trampoline (the signal family's wrappers).
pub static SIGACTION: RealFn = RealFn::new(b"sigaction\0");

/// Calls one of the non-returning `f(status)` / `f(retval)` functions above.
///
/// # Safety
/// `f` must be one of the statics above whose C signature is `void f(T) __attribute__((noreturn))`.
pub unsafe fn call_noreturn<T>(f: &RealFn, arg: T) -> ! {
    // SAFETY: per the contract above.
    let g: unsafe extern "C" fn(T) -> ! = unsafe { std::mem::transmute_copy::<usize, _>(&f.get()) };
    // SAFETY: `g` is the C library's non-returning `void f(T)` the caller names, given its one
    // argument.
    unsafe { g(arg) }
}

/// Resolves every function the shim forwards to, at start-up and before any thread is
/// registered: the fast paths read [`RealFn::resolved`] without checking it, and nothing a signal
/// handler can reach (a `sem_post`, `_exit` or `siglongjmp` in a handler) may run `dlsym`, which
/// takes the loader's lock and may allocate. Functions the C library lacks (older glibc has no
/// `*clock*` variants) are noted as missing.
pub fn resolve_all() {
    slot::resolve();
    for f in [
        &PTHREAD_EXIT,
        &EXIT,
        &UNDERSCORE_EXIT,
        &UNDERSCORE_CAPITAL_EXIT,
        &SIGACTION,
        &sem::SEM_OPEN,
        &signal::LONGJMP,
        &signal::UNDERSCORE_LONGJMP,
        &signal::SIGLONGJMP,
        &signal::LONGJMP_CHK,
        &process::START_MAIN,
        &futex::SYSCALL,
    ] {
        f.available();
    }
    barrier::slot::resolve();
    cond::resolve();
    rwlock::slot::resolve();
    spin::slot::resolve();
    sem::slot::resolve();
    signal::slot::resolve();
    join::slot::resolve();
    exec::slot::resolve();
    process::slot::resolve();
}

/// Read in place of `__libc_single_threaded` until it is found, or when it is not: always 0
/// (multi-threaded).
static NOT_KNOWN_SINGLE: u8 = 0;

/// glibc's `__libc_single_threaded` (2.32+): true until the process creates its first thread.
static SINGLE_THREADED: AtomicPtr<u8> = AtomicPtr::new(&NOT_KNOWN_SINGLE as *const u8 as *mut u8);

/// Finds `__libc_single_threaded`; without it the process is treated as multi-threaded.
pub fn init_single_threaded() {
    // SAFETY: dlsym of a data symbol of the C library.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr()) };
    if !p.is_null() {
        SINGLE_THREADED.store(p as *mut u8, Ordering::Release);
    }
}

/// True while the process has only one thread (as glibc itself sees it).
#[inline(always)]
pub fn single_threaded() -> bool {
    let p = SINGLE_THREADED.load(Ordering::Relaxed);
    // SAFETY: a pointer to the C library's `char __libc_single_threaded`, which lives as long as
    // the process, or to our own zero; read with an atomic load since pthread_create writes it.
    (unsafe { std::sync::atomic::AtomicU8::from_ptr(p) }).load(Ordering::Relaxed) != 0
}

/// The C library's `barrier` functions, for the wrappers of that family.
pub mod barrier {
    use libc::{c_int, c_uint, pthread_barrier_t, pthread_barrierattr_t};
    super::real_fns! {
        pthread_barrier_init: fn(b: *mut pthread_barrier_t, a: *const pthread_barrierattr_t, count: c_uint) -> c_int;
        pthread_barrier_destroy: fn(b: *mut pthread_barrier_t) -> c_int;
        pthread_barrier_wait: fn(b: *mut pthread_barrier_t) -> c_int;
    }
}

/// The C library's `cond` functions, for the wrappers of that family.
pub mod cond {
    use libc::{c_int, clockid_t, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, timespec};

    use super::RealFn;

    const V: &[u8] = b"GLIBC_2.3.2\0";
    static INIT: RealFn = RealFn::versioned(b"pthread_cond_init\0", V);
    static DESTROY: RealFn = RealFn::versioned(b"pthread_cond_destroy\0", V);
    static WAIT: RealFn = RealFn::versioned(b"pthread_cond_wait\0", V);
    static TIMEDWAIT: RealFn = RealFn::versioned(b"pthread_cond_timedwait\0", V);
    pub static SIGNAL: RealFn = RealFn::versioned(b"pthread_cond_signal\0", V);
    pub static BROADCAST: RealFn = RealFn::versioned(b"pthread_cond_broadcast\0", V);
    /// Added in glibc 2.30 (versions `GLIBC_2.30` and `GLIBC_2.34`, both the new implementation):
    /// the default version is the right one.
    static CLOCKWAIT: RealFn = RealFn::new(b"pthread_cond_clockwait\0");

    pub fn resolve() {
        for f in [
            &INIT, &DESTROY, &WAIT, &TIMEDWAIT, &SIGNAL, &BROADCAST, &CLOCKWAIT,
        ] {
            f.available();
        }
    }

    macro_rules! forward {
        ($($name:ident = $slot:ident: fn($($arg:ident: $t:ty),*);)*) => {$(
            #[allow(clippy::missing_safety_doc)]
            pub unsafe fn $name($($arg: $t),*) -> c_int {
                let f: unsafe extern "C-unwind" fn($($t),*) -> c_int =
                    // SAFETY: the slot holds the address of glibc's function of this name, whose
                    // C signature is the one declared here (from <pthread.h>).
                    unsafe { std::mem::transmute::<usize, _>($slot.get()) };
                // SAFETY: forwarding the caller's arguments.
                unsafe { f($($arg),*) }
            }
        )*};
    }

    forward! {
        init = INIT: fn(c: *mut pthread_cond_t, a: *const pthread_condattr_t);
        destroy = DESTROY: fn(c: *mut pthread_cond_t);
        wait = WAIT: fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t);
        timedwait = TIMEDWAIT: fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, ts: *const timespec);
        clockwait = CLOCKWAIT: fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, clk: clockid_t, ts: *const timespec);
        signal = SIGNAL: fn(c: *mut pthread_cond_t);
        broadcast = BROADCAST: fn(c: *mut pthread_cond_t);
    }
}

/// The C library's `rwlock` functions, for the wrappers of that family.
pub mod rwlock {
    use libc::{c_int, clockid_t, pthread_rwlock_t, pthread_rwlockattr_t, timespec};
    super::real_fns! {
        pthread_rwlock_init: fn(l: *mut pthread_rwlock_t, a: *const pthread_rwlockattr_t) -> c_int;
        pthread_rwlock_destroy: fn(l: *mut pthread_rwlock_t) -> c_int;
        pthread_rwlock_rdlock: fn(l: *mut pthread_rwlock_t) -> c_int;
        pthread_rwlock_tryrdlock: fn(l: *mut pthread_rwlock_t) -> c_int;
        pthread_rwlock_timedrdlock: fn(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int;
        pthread_rwlock_clockrdlock: fn(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec) -> c_int;
        pthread_rwlock_wrlock: fn(l: *mut pthread_rwlock_t) -> c_int;
        pthread_rwlock_trywrlock: fn(l: *mut pthread_rwlock_t) -> c_int;
        pthread_rwlock_timedwrlock: fn(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int;
        pthread_rwlock_clockwrlock: fn(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec) -> c_int;
        pthread_rwlock_unlock: fn(l: *mut pthread_rwlock_t) -> c_int;
    }
}

/// The C library's `spin` functions, for the wrappers of that family.
pub mod spin {
    use libc::{c_int, pthread_spinlock_t};
    super::real_fns! {
        pthread_spin_init: fn(l: *mut pthread_spinlock_t, pshared: c_int) -> c_int;
        pthread_spin_destroy: fn(l: *mut pthread_spinlock_t) -> c_int;
        pthread_spin_lock: fn(l: *mut pthread_spinlock_t) -> c_int;
        pthread_spin_trylock: fn(l: *mut pthread_spinlock_t) -> c_int;
        pthread_spin_unlock: fn(l: *mut pthread_spinlock_t) -> c_int;
    }
}

/// The C library's `sem` functions, for the wrappers of that family.
pub mod sem {
    /// `sem_open` is variadic, which the table's macro cannot declare.
    pub static SEM_OPEN: super::RealFn = super::RealFn::new(b"sem_open\0");

    use libc::{c_char, c_int, c_uint, clockid_t, sem_t, timespec};

    super::real_fns! {
        sem_init: fn(s: *mut sem_t, pshared: c_int, value: c_uint) -> c_int;
        sem_destroy: fn(s: *mut sem_t) -> c_int;
        sem_close: fn(s: *mut sem_t) -> c_int;
        sem_unlink: fn(name: *const c_char) -> c_int;
        sem_wait: fn(s: *mut sem_t) -> c_int;
        sem_trywait: fn(s: *mut sem_t) -> c_int;
        sem_timedwait: fn(s: *mut sem_t, t: *const timespec) -> c_int;
        sem_clockwait: fn(s: *mut sem_t, c: clockid_t, t: *const timespec) -> c_int;
        sem_post: fn(s: *mut sem_t) -> c_int;
        sem_getvalue: fn(s: *mut sem_t, v: *mut c_int) -> c_int;
    }
}

/// The C library's `signal` functions, for the wrappers of that family.
pub mod signal {
    use super::RealFn;

    /// The jumps out of a signal handler (`void f(jmp_buf, int)`, not returning).
    pub static LONGJMP: RealFn = RealFn::new(b"longjmp\0");
    pub static UNDERSCORE_LONGJMP: RealFn = RealFn::new(b"_longjmp\0");
    pub static SIGLONGJMP: RealFn = RealFn::new(b"siglongjmp\0");
    pub static LONGJMP_CHK: RealFn = RealFn::new(b"__longjmp_chk\0");

    use libc::c_int;

    super::real_fns! {
        sigaction: fn(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int;
        siginterrupt: fn(sig: c_int, flag: c_int) -> c_int;
    }
}

/// The C library's `join` functions, for the wrappers of that family.
pub mod join {
    use libc::{c_int, c_void, clockid_t, pthread_t, timespec};
    super::real_fns! {
        pthread_tryjoin_np: fn(t: pthread_t, r: *mut *mut c_void) -> c_int;
        pthread_timedjoin_np: fn(t: pthread_t, r: *mut *mut c_void, ts: *const timespec) -> c_int;
        pthread_clockjoin_np: fn(t: pthread_t, r: *mut *mut c_void, c: clockid_t, ts: *const timespec) -> c_int;
    }
}

/// The C library's `exec` functions, for the wrappers of that family.
pub mod exec {
    use libc::{c_char, c_int};
    super::real_fns! {
        execve: fn(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int;
        execv: fn(p: *const c_char, a: *const *const c_char) -> c_int;
        execvp: fn(f: *const c_char, a: *const *const c_char) -> c_int;
        execvpe: fn(f: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int;
        fexecve: fn(fd: c_int, a: *const *const c_char, e: *const *const c_char) -> c_int;
        execveat: fn(d: c_int, p: *const c_char, a: *const *const c_char, e: *const *const c_char, f: c_int) -> c_int;
    }
}

/// The C library's `process` functions, for the wrappers of that family.
pub mod process {
    /// The C library's program start, through which the wrapper learns `main`'s return value.
    pub static START_MAIN: super::RealFn = super::RealFn::new(b"__libc_start_main\0");

    super::real_fns! {
        fork: fn() -> libc::pid_t;
        prctl: fn(option: libc::c_int, a2: libc::c_ulong, a3: libc::c_ulong, a4: libc::c_ulong, a5: libc::c_ulong) -> libc::c_int;
    }
}

/// The C library's `syscall`, for the variadic trampoline of the futex family.
pub mod futex {
    pub static SYSCALL: super::RealFn = super::RealFn::new(b"syscall\0");
}
