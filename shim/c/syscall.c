/* `long syscall(long number, ...)`, for its futex calls: Rust's std::sync, libstdc++'s atomic
 * waits and hand-written futexes wait through it, never through a pthread function.
 *
 * The exported trampoline (interpose/futex.rs) sends every other system call straight to the C
 * library's `syscall` with a jump; it jumps here, with every register and the stack as the caller
 * left them, for `SYS_futex` and for any call made before the shim has resolved the C library's
 * function. This reads the six arguments as glibc's `syscall` does (five registers and one stack
 * word: what it reads is defined even when the caller passed fewer) and hands them to the Rust
 * side through `waitshim_syscall_hook`, which the shim sets at start-up. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>

typedef long (*syscall_fn)(long number, ...);
typedef long (*hook_fn)(long number, const long *args, unsigned long caller);

/* Set once by the shim's start-up (before the trampoline stops coming here for other calls). */
__attribute__((visibility("hidden"))) hook_fn waitshim_syscall_hook;

__attribute__((visibility("hidden"))) long waitshim_syscall(long number, ...) {
    long a[6];
    va_list ap;
    va_start(ap, number);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    hook_fn hook = __atomic_load_n(&waitshim_syscall_hook, __ATOMIC_ACQUIRE);
    if (hook)
        /* The trampoline jumped here: this function's return address is the caller's. */
        return hook(number, a, (unsigned long)__builtin_return_address(0));
    /* Before the shim's start-up (a constructor that runs before the shim's): forwarded. */
    syscall_fn real = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
    return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
