//! Process-level events: `__libc_start_main` and `exit` (to learn the exit status), `_exit`/`_Exit` (which skip the library
//! destructor, so the log is finished here; unlike `exit`, no atexit handler of the program
//! runs), `dlopen` (new modules for symbolization and for the unwinder), `dlclose` (the
//! unwinder must stop reading an object before it is unmapped), and the `exec` family (the log
//! ends with the program it was written for), `fork` (to give back the task the shim's thread
//! holds when the program runs out of them), and `prctl` (a program that confines itself with
//! seccomp ends tracing first).

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_void};
use waitshim_format::end_reason;

use crate::real;
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
        track::library_loaded();
    }
    h
}

use crate::real::exec as real_exec;

/// Runs `call`, an exec of `what`, with the log ended before it (see [`track::before_exec`])
/// and taken up again if it fails; errno is the exec's.
fn exec(what: &dyn Fn() -> String, call: impl FnOnce() -> c_int) -> c_int {
    if tracker().is_none() {
        return call();
    }
    let name = what();
    let kept = track::before_exec(&name);
    let r = call();
    // SAFETY: errno of this thread.
    let e = unsafe { *libc::__errno_location() };
    if kept {
        track::exec_failed(&name, e);
        // SAFETY: as above; the program sees the exec's errno.
        unsafe { *libc::__errno_location() = e };
    }
    r
}

/// The program's name for an exec target (a path, or a file looked up in PATH).
fn name_of(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: exec targets are NUL-terminated strings (the real call reads them too).
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

#[no_mangle]
pub unsafe extern "C" fn execve(
    p: *const c_char,
    a: *const *const c_char,
    e: *const *const c_char,
) -> c_int {
    // SAFETY: forwarding.
    exec(&|| name_of(p), || unsafe { real_exec::execve(p, a, e) })
}

#[no_mangle]
pub unsafe extern "C" fn execv(p: *const c_char, a: *const *const c_char) -> c_int {
    // SAFETY: forwarding.
    exec(&|| name_of(p), || unsafe { real_exec::execv(p, a) })
}

#[no_mangle]
pub unsafe extern "C" fn execvp(f: *const c_char, a: *const *const c_char) -> c_int {
    // SAFETY: forwarding.
    exec(&|| name_of(f), || unsafe { real_exec::execvp(f, a) })
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(
    f: *const c_char,
    a: *const *const c_char,
    e: *const *const c_char,
) -> c_int {
    // SAFETY: forwarding.
    exec(&|| name_of(f), || unsafe { real_exec::execvpe(f, a, e) })
}

#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    a: *const *const c_char,
    e: *const *const c_char,
) -> c_int {
    // SAFETY: forwarding.
    exec(&|| format!("descriptor {fd}"), || unsafe {
        real_exec::fexecve(fd, a, e)
    })
}

#[no_mangle]
pub unsafe extern "C" fn execveat(
    dir: c_int,
    p: *const c_char,
    a: *const *const c_char,
    e: *const *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarding.
    exec(&|| name_of(p), || unsafe {
        real_exec::execveat(dir, p, a, e, flags)
    })
}

extern "C" {
    fn waitshim_execl();
    fn waitshim_execle();
    fn waitshim_execlp();
}

/// `execl(path, arg, ...)`: variadic, so written in C (`c/exec.c`); this exported entry jumps
/// there with the caller's registers and stack untouched.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execl() {
    std::arch::naked_asm!("jmp {}", sym waitshim_execl)
}

/// `execle(path, arg, ..., envp)`: as [`execl`].
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execle() {
    std::arch::naked_asm!("jmp {}", sym waitshim_execle)
}

/// `execlp(file, arg, ...)`: as [`execl`].
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execlp() {
    std::arch::naked_asm!("jmp {}", sym waitshim_execlp)
}

/// Not marked inside the shim: the destructors the real `dlclose` runs are the program's code,
/// tracked as usual, and the unwinder's table work calls no interposed function.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    // SAFETY: forwarding, while the unwinder's table leaves out what the call may unmap.
    waitshim_unwind::around_unload(|| unsafe { real::dlclose(handle) })
}

type MainFn = unsafe extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;
type StartMainFn = unsafe extern "C" fn(
    MainFn,
    c_int,
    *mut *mut c_char,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
) -> c_int;

/// The program's `main`, called through `main_returns` so its return value is the exit status.
static PROGRAM_MAIN: AtomicUsize = AtomicUsize::new(0);
use crate::real::process::START_MAIN;

use crate::real::process as real_process;

/// `prctl`, as glibc's (variadic there: x86-64 passes the four further arguments in the same
/// registers, which glibc reads whatever the caller passed, and so does this). A program that
/// confines itself with `PR_SET_SECCOMP`, strictly or with a filter that would kill or trap one
/// of the shim's calls (`crate::seccomp`), ends tracing first (see `track::confining`).
#[no_mangle]
pub unsafe extern "C" fn prctl(
    option: libc::c_int,
    a2: libc::c_ulong,
    a3: libc::c_ulong,
    a4: libc::c_ulong,
    a5: libc::c_ulong,
) -> libc::c_int {
    // SECCOMP_MODE_STRICT (1), or SECCOMP_MODE_FILTER (2) with a filter that would kill or
    // trap one of the shim's own calls.
    if option == libc::PR_SET_SECCOMP
        && (a2 == 1 || (a2 == 2 && !crate::seccomp::leaves_the_shim_be(a3 as usize)))
    {
        track::confining();
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { real_process::prctl(option, a2, a3, a4, a5) }
}

/// `fork`, as glibc's; when it fails for lack of tasks while the shim's thread holds one, the
/// thread steps back and the fork is tried again (see `service::step_back_for_tasks`).
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    // SAFETY: forwarding.
    let pid = unsafe { real_process::fork() };
    if pid < 0
        // SAFETY: errno is this thread's.
        && unsafe { *libc::__errno_location() } == libc::EAGAIN
        && crate::service::step_back_for_tasks()
    {
        // SAFETY: forwarding, the task the shim's thread held free again.
        return unsafe { real_process::fork() };
    }
    pid
}

unsafe extern "C" fn main_returns(
    argc: c_int,
    argv: *mut *mut c_char,
    envp: *mut *mut c_char,
) -> c_int {
    // SAFETY: PROGRAM_MAIN holds the `main` that __libc_start_main was given.
    let main: MainFn =
        unsafe { std::mem::transmute::<usize, MainFn>(PROGRAM_MAIN.load(Ordering::Relaxed)) };
    // SAFETY: calling the program's main with its own arguments.
    let status = unsafe { main(argc, argv, envp) };
    EXIT_STATUS.store(status as i64, Ordering::Relaxed);
    status
}

#[no_mangle]
pub unsafe extern "C" fn __libc_start_main(
    main: MainFn,
    argc: c_int,
    argv: *mut *mut c_char,
    init: *mut c_void,
    fini: *mut c_void,
    rtld_fini: *mut c_void,
    stack_end: *mut c_void,
) -> c_int {
    PROGRAM_MAIN.store(main as usize, Ordering::Relaxed);
    // SAFETY: glibc's __libc_start_main, whose signature is declared above, with our wrapper of
    // the program's main in its place.
    unsafe {
        let real: StartMainFn = std::mem::transmute::<usize, StartMainFn>(START_MAIN.get());
        real(main_returns, argc, argv, init, fini, rtld_fini, stack_end)
    }
}
