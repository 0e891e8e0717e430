/* C frames for the unwinder's tests, built by the tests as a shared library (cc -shared -fPIC
 * -O1 -g): calls between these exported functions go through the PLT, c_alloca's frame is
 * addressed through rbp (its size is only known at run time), the others through rsp. */
#include <alloca.h>
#include <string.h>

typedef void (*cb_t)(void *);
#define KEEP __asm__ volatile("" ::: "memory")

__attribute__((noinline)) void c_leaf(cb_t cb, void *arg) { cb(arg); KEEP; }

__attribute__((noinline)) void c_alloca(cb_t cb, void *arg, unsigned long n) {
    char *p = alloca(n);
    memset(p, 1, n);
    __asm__ volatile("" ::"r"(p) : "memory");
    c_leaf(cb, arg);
    KEEP;
}

__attribute__((noinline)) void c_mid(cb_t cb, void *arg) { c_alloca(cb, arg, 200); KEEP; }

__attribute__((noinline)) void c_top(cb_t cb, void *arg) { c_mid(cb, arg); KEEP; }

/* Spins until *flag is set (a signal handler sets it). */
__attribute__((noinline)) void c_spin(volatile int *flag) {
    while (!*flag) {
    }
}

__attribute__((noinline)) void c_spin_mid(volatile int *flag) { c_spin(flag); KEEP; }

__attribute__((noinline)) void c_spin_top(volatile int *flag) { c_spin_mid(flag); KEEP; }
