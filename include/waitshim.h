/*
 * waitshim.h — optional C API of the waitshim profiler.
 *
 * A program built against this header runs unchanged without waitshim: the functions are
 * declared weak, so without libwaitshim.so preloaded their addresses are null and the inline
 * helpers below do nothing. Under `LD_PRELOAD=libwaitshim.so` they name objects and threads in
 * the report.
 *
 *     #include "waitshim.h"
 *     pthread_mutex_init(&queue_lock, NULL);
 *     WAITSHIM_NAME_OBJECT(&queue_lock, "queue");
 *     WAITSHIM_NAME_THREAD("io-worker");
 *
 * Call the helpers (upper case); they check that the shim is there before calling it.
 */
#ifndef WAITSHIM_H
#define WAITSHIM_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the program runs under waitshim with tracking on, else 0. */
int waitshim_present(void) __attribute__((weak));

/* Names the sync object (mutex, rwlock, condition variable, semaphore...) at `object`. The name
 * is copied. Naming an object before its first use is fine. */
void waitshim_name_object(const void *object, const char *name) __attribute__((weak));

/* Names the calling thread in reports, without changing its kernel name (`comm`). */
void waitshim_name_thread(const char *name) __attribute__((weak));

static inline int WAITSHIM_PRESENT(void)
{
    return waitshim_present ? waitshim_present() : 0;
}

static inline void WAITSHIM_NAME_OBJECT(const void *object, const char *name)
{
    if (waitshim_name_object)
        waitshim_name_object(object, name);
}

static inline void WAITSHIM_NAME_THREAD(const char *name)
{
    if (waitshim_name_thread)
        waitshim_name_thread(name);
}

#ifdef __cplusplus
}
#endif

#endif
