/* The exec functions that take their arguments as a variadic list (execl, execle, execlp):
 * they collect them into an argument vector and call the vector form, which the shim
 * interposes (glibc's own ones call its internal execve, which no preloaded library sees).
 * Rust cannot define a variadic C function: these are reached from exported trampolines in
 * interpose/process.rs, which jump here with every register and the stack as the caller left
 * them. */
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

/* Number of arguments from `first` up to the terminating null pointer. */
#define COUNT(first, n)                                                                        \
    do {                                                                                       \
        va_list ap;                                                                            \
        va_start(ap, first);                                                                   \
        n = 0;                                                                                 \
        if (first)                                                                             \
            for (n = 1; va_arg(ap, const char *); n++)                                         \
                ;                                                                              \
        va_end(ap);                                                                            \
    } while (0)

/* argv[0..n) from the variadic list, then the null pointer. */
#define FILL(first, argv, n)                                                                   \
    do {                                                                                       \
        va_list ap;                                                                            \
        va_start(ap, first);                                                                   \
        argv[0] = (char *)first;                                                               \
        for (size_t i = 1; i <= n; i++)                                                        \
            argv[i] = va_arg(ap, char *);                                                      \
        argv[n] = NULL;                                                                        \
        va_end(ap);                                                                            \
    } while (0)

__attribute__((visibility("hidden"))) int waitshim_execl(const char *path, const char *arg, ...) {
    size_t n;
    COUNT(arg, n);
    char *argv[n + 1];
    FILL(arg, argv, n);
    return execv(path, argv);
}

__attribute__((visibility("hidden"))) int waitshim_execlp(const char *file, const char *arg, ...) {
    size_t n;
    COUNT(arg, n);
    char *argv[n + 1];
    FILL(arg, argv, n);
    return execvp(file, argv);
}

__attribute__((visibility("hidden"))) int waitshim_execle(const char *path, const char *arg, ...) {
    size_t n;
    COUNT(arg, n);
    char *argv[n + 1];
    va_list ap;
    va_start(ap, arg);
    argv[0] = (char *)arg;
    for (size_t i = 1; i <= n; i++)
        argv[i] = va_arg(ap, char *);
    argv[n] = NULL;
    /* After the null pointer that ends the arguments (`arg` itself when it is null): the
     * environment. */
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}
