/*
 * waitshim.h — optional C API of the waitshim profiler.
 *
 * A program built against this header runs unchanged without waitshim: the functions are
 * declared weak, so without libwaitshim.so preloaded their addresses are null and the inline
 * helpers below do nothing. Under `LD_PRELOAD=libwaitshim.so` they name objects and threads in
 * the report, ask for a data snapshot while the program runs, and reload the policy.
 *
 *     #include "waitshim.h"
 *     pthread_mutex_init(&queue_lock, NULL);
 *     WAITSHIM_NAME_OBJECT(&queue_lock, "queue");
 *     WAITSHIM_NAME_THREAD("io-worker");
 *     WAITSHIM_PROGRESS("request served");
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

/* A data request: every counter and pending record reaches the log before it returns, followed
 * by a snapshot record. Returns the snapshot's number (1, 2, ...), 0 without the shim. Not
 * async-signal-safe: do not call it from a signal handler (send the request signal instead). */
int waitshim_snapshot(void) __attribute__((weak));

/* Reads the policy file (WAITSHIM_POLICY) again now. Returns the policy version in force after
 * the call, -1 if the file is invalid (the old policy stays; stderr says why) or there is no
 * policy file, 0 without the shim. */
int waitshim_policy_reload(void) __attribute__((weak));

/* Progress points, for programs judged by their throughput and latency rather than by their run
 * time (servers, pipelines that never end). Each `name` is a point; pass a string literal (it is
 * matched by its address first, then by its text), at most 64 points. Safe from any thread; in a
 * signal handler only at a point the program has already reached through the same string.
 *
 * waitshim_progress: one unit of work done (a request served, a block written).
 * waitshim_progress_begin / _end: a transaction begins / ends (the end may come on another
 * thread, and need not match the begin: the report's mean latency is exact whatever the order).
 * An end also counts as a visit of the point. */
void waitshim_progress(const char *name) __attribute__((weak));
void waitshim_progress_begin(const char *name) __attribute__((weak));
void waitshim_progress_end(const char *name) __attribute__((weak));

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

static inline int WAITSHIM_SNAPSHOT(void)
{
    return waitshim_snapshot ? waitshim_snapshot() : 0;
}

static inline int WAITSHIM_POLICY_RELOAD(void)
{
    return waitshim_policy_reload ? waitshim_policy_reload() : 0;
}

static inline void WAITSHIM_PROGRESS(const char *name)
{
    if (waitshim_progress)
        waitshim_progress(name);
}

static inline void WAITSHIM_BEGIN(const char *name)
{
    if (waitshim_progress_begin)
        waitshim_progress_begin(name);
}

static inline void WAITSHIM_END(const char *name)
{
    if (waitshim_progress_end)
        waitshim_progress_end(name);
}

#ifdef __cplusplus
}
#endif

#endif
