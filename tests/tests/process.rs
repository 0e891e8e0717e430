//! Process life cycle under the shim: fork, exec, SIGKILL, `_exit`, programs without locks.

use std::path::Path;

use waitshim_tests::{
    analyze, compile_c_with, frame_text, line_of, run_both, workspace_root, Launch, Run,
};

fn file_name(p: &Path) -> String {
    p.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn fork_with_a_lock_held_gives_parent_and_child_each_their_own_log_and_contention() {
    let run = Launch::fixture("fork_locked").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "fork_locked: child ok\n");
    assert_eq!(run.logs.len(), 2, "logs: {:?}", run.logs);
    let a = analyze(&run.logs, &[]);
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    assert_eq!(a.logs().len(), 2);

    let parent_pid = u64::from(run.pid);
    let (parent, child) = match (
        a.log(0).run()["pid"].as_u64(),
        a.log(1).run()["pid"].as_u64(),
    ) {
        (Some(p), _) if p == parent_pid => (a.log(0), a.log(1)),
        (_, Some(p)) if p == parent_pid => (a.log(1), a.log(0)),
        pids => panic!("no log of the parent pid {parent_pid}: {pids:?}"),
    };
    let child_pid = child.run()["pid"].as_u64().expect("child pid");
    assert_ne!(child_pid, parent_pid);
    assert_eq!(child.run()["ppid"].as_u64(), Some(parent_pid));
    for (log, pid) in [(&parent, parent_pid), (&child, child_pid)] {
        let name = format!("waitshim.{pid}.log");
        assert!(
            run.logs.iter().any(|l| file_name(l) == name),
            "no {name} among {:?}",
            run.logs
        );
        assert!(log.run()["end"].is_object(), "run: {}", log.run());
    }

    // Parent: M contended once, main waiting at parent-lock-site.
    let m = parent.object_created_at("fork_locked.c", line_of("fork_locked.c", "creation-site-M"));
    let parent_lock = line_of("fork_locked.c", "parent-lock-site");
    assert!(parent.counter(m, "contended") >= 1, "M: {m}");
    assert!(
        m["wait_sites"]
            .as_array()
            .expect("wait_sites")
            .iter()
            .any(|w| parent.chain_has(&w["chain_id"], "fork_locked.c", parent_lock)),
        "no wait on M at fork_locked.c:{parent_lock}: {m}"
    );
    assert_eq!(parent.hwm(), 1);
    assert_eq!(
        parent.records_except_joins()[0]["object_id"],
        m["object_id"]
    );

    // Child: its own mutex C contended at child-lock-site; nobody waits on M there.
    let c = child.object_created_at(
        "fork_locked.c",
        line_of("fork_locked.c", "child-creation-site"),
    );
    let child_lock = line_of("fork_locked.c", "child-lock-site");
    assert!(child.counter(c, "contended") >= 1, "C: {c}");
    assert!(
        c["wait_sites"]
            .as_array()
            .expect("wait_sites")
            .iter()
            .any(|w| child.chain_has(&w["chain_id"], "fork_locked.c", child_lock)),
        "no wait on C at fork_locked.c:{child_lock}: {c}"
    );
    assert_eq!(child.hwm(), 1);
    // Joins are waits on thread objects and may have records of their own.
    for r in child.records_except_joins() {
        assert_eq!(r["object_id"], c["object_id"], "child record not on C: {r}");
    }
    for object in
        child.objects_created_at("fork_locked.c", line_of("fork_locked.c", "creation-site-M"))
    {
        assert!(
            object["wait_sites"]
                .as_array()
                .expect("wait_sites")
                .is_empty(),
            "the child waited on M: {object}"
        );
        assert!(object["counters"]["contended"].as_u64().unwrap_or(0) == 0);
    }
}

#[test]
fn exec_of_itself_keeps_the_first_images_log_and_writes_a_second_one_for_the_same_pid() {
    let native = Launch::fixture("exec_child").native().run();
    native.assert_success();
    let run = Launch::fixture("exec_child").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert_eq!(
        run.stdout_text(),
        "exec_child: first image done\nexec_child: second image done\n"
    );
    let names: Vec<String> = run.logs.iter().map(|l| file_name(l)).collect();
    let pid = run.pid;
    assert_eq!(
        names,
        [
            format!("waitshim.{pid}.1.log"),
            format!("waitshim.{pid}.log")
        ],
        "logs of the exec'ing process"
    );

    let a = analyze(&run.logs, &[]);
    let first_line = line_of("exec_child.c", "creation-site-first");
    let second_line = line_of("exec_child.c", "creation-site-second");
    let mut seen = Vec::new();
    for i in 0..2 {
        let log = a.log(i);
        assert_eq!(log.run()["pid"].as_u64(), Some(u64::from(pid)));
        let first = log.objects_created_at("exec_child.c", first_line);
        let second = log.objects_created_at("exec_child.c", second_line);
        match (first.len(), second.len()) {
            (1, 0) => {
                assert_eq!(log.hwm(), 1, "first image's log");
                assert_eq!(
                    log.records_except_joins()[0]["object_id"],
                    first[0]["object_id"]
                );
                seen.push("first");
            }
            (0, 1) => {
                assert_eq!(log.hwm(), 2, "second image's log");
                assert_eq!(
                    log.records_except_joins()[0]["object_id"],
                    second[0]["object_id"]
                );
                seen.push("second");
            }
            n => panic!(
                "log {i} has {n:?} objects of the first/second image: {:?}",
                log.objects()
                    .iter()
                    .map(|o| frame_text(&o["creation_site"]))
                    .collect::<Vec<_>>()
            ),
        }
    }
    seen.sort();
    assert_eq!(seen, ["first", "second"]);
}

#[test]
fn run_killed_with_sigkill_still_reports_the_contention_recorded_before_the_kill() {
    let running = Launch::fixture("sigkill").spawn();
    running.wait_for_stdout("ready");
    let run = running.kill();
    assert_eq!(run.stdout_text(), "ready\n");
    let a = run.analyze();
    let log = a.log(0);
    let creation = line_of("sigkill.c", "creation-site");
    let lock = line_of("sigkill.c", "lock-site");
    let object = log.object_created_at("sigkill.c", creation);

    assert!(log.hwm() >= 1);
    let records = log.records_on(object);
    assert!(!records.is_empty(), "no contention record on the mutex");
    assert!(
        log.counter(object, "contended") > 0,
        "contended acquisitions before the kill: {object}"
    );
    assert!(
        object["wait_sites"]
            .as_array()
            .expect("wait_sites")
            .iter()
            .any(|w| log.chain_has(&w["chain_id"], "sigkill.c", lock)),
        "no wait site at sigkill.c:{lock}: {object}"
    );
    assert!(log.run()["end"].is_null(), "run: {}", log.run());
    assert_eq!(log.run()["duration_is_lower_bound"], true);
    assert!(
        log.warnings().iter().any(|w| w["kind"] == "ending"),
        "no warning that the run did not end cleanly: {}",
        log.warning_text()
    );
    assert!(
        a.text.contains(&format!("sigkill.c:{creation}")),
        "text report:\n{}",
        a.text
    );
    assert!(
        a.text.contains("WARNING: ") && a.text.contains("killed"),
        "text report:\n{}",
        a.text
    );
}

const CONTEND_THEN_UNDERSCORE_EXIT: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "blocked.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void)
{
    pthread_t t;
    pthread_mutex_lock(&lock);
    if (pthread_create(&t, NULL, waiter, NULL) != 0)
        return 1;
    wait_for_sleepers_on(&lock, 1, 10); /* the waiter waits (fixtures/blocked.h) */
    pthread_mutex_unlock(&lock);
    pthread_join(t, NULL);
    printf("contended, now _exit(3)\n");
    fflush(stdout);
    _exit(3);
}
"#;

#[test]
fn program_ending_in_underscore_exit_3_keeps_its_status_and_the_report_says_so() {
    let build = tempfile::tempdir().expect("temp dir");
    let fixtures = format!("-I{}", workspace_root().join("fixtures").display());
    let exe = compile_c_with(
        build.path(),
        "underscore_exit",
        CONTEND_THEN_UNDERSCORE_EXIT,
        &[&fixtures],
    );
    let native = Launch::program(&exe).native().run();
    assert_eq!(native.status.code(), Some(3));
    let run = Launch::program(&exe).run();
    assert_eq!(run.status.code(), Some(3), "stderr: {}", run.stderr_text());
    assert_eq!(run.stdout_text(), native.stdout_text());

    let a = run.analyze();
    let log = a.log(0);
    assert_eq!(log.hwm(), 1);
    let on_locks = log.records_except_joins().len();
    assert_eq!(on_locks, 1, "records: {:?}", log.records());
    let end = &log.run()["end"];
    assert_eq!(end["reason"], "_exit", "run: {}", log.run());
    assert_eq!(end["exit_status"], 3, "run: {}", log.run());
    let ended = a
        .text
        .lines()
        .find(|l| l.starts_with("ended:"))
        .unwrap_or_else(|| panic!("no `ended:` line in:\n{}", a.text));
    assert!(
        ended.contains("_exit") && ended.contains('3'),
        "ended line: {ended:?}"
    );
}

#[test]
fn program_without_pthread_locks_runs_unchanged_and_the_report_says_no_sync_object_was_seen() {
    let native = Launch::program("/bin/echo").arg("hello").native().run();
    native.assert_success();
    let run = Launch::program("/bin/echo").arg("hello").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "hello\n");
    assert!(run.stderr.is_empty(), "stderr: {}", run.stderr_text());
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    let log = a.log(0);
    assert!(log.objects().is_empty(), "objects: {:?}", log.objects());
    assert_eq!(log.run()["objects_tracked"], 0);
    assert_eq!(log.hwm(), 0);
    assert!(
        a.text
            .contains("No sync object was seen in this run: the program ran on one thread"),
        "text report:\n{}",
        a.text
    );
    assert!(!a.text.contains("statically linked"), "{}", a.text);
}

/// A library whose constructor locks: linked into the program, its constructor runs before the
/// preloaded shim's own, so the shim must start on that first call.
const EARLY_LIB: &str = r#"
#include <pthread.h>
pthread_mutex_t early_lock = PTHREAD_MUTEX_INITIALIZER;
int early_count;
__attribute__((constructor)) static void early(void)
{
    for (int i = 0; i < 3; i++) {
        pthread_mutex_lock(&early_lock); /* line 8 */
        early_count++;
        pthread_mutex_unlock(&early_lock);
    }
}
"#;

const EARLY_MAIN: &str = r#"
#include <pthread.h>
#include <stdio.h>
extern pthread_mutex_t early_lock;
extern int early_count;
int main(void)
{
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&early_lock);
        early_count++;
        pthread_mutex_unlock(&early_lock);
    }
    printf("early_count=%d\n", early_count);
    return early_count == 5 ? 0 : 1;
}
"#;

#[test]
fn mutex_locked_by_another_librarys_constructor_before_the_shim_started_is_tracked_from_that_call()
{
    let build = tempfile::tempdir().expect("temp dir");
    let dir = build.path();
    compile_c_with(dir, "libearly.so", EARLY_LIB, &["-shared", "-fPIC"]);
    let exe = compile_c_with(
        dir,
        "early_main",
        EARLY_MAIN,
        &[
            &format!("{}/libearly.so", dir.display()),
            &format!("-Wl,-rpath,{}", dir.display()),
        ],
    );

    let native = Launch::program(&exe).native().run();
    native.assert_success();
    let run = Launch::program(&exe).run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    assert_eq!(run.stdout_text(), "early_count=5\n");

    let a = run.analyze();
    let log = a.log(0);
    let lock = log.object_created_at("libearly.so.c", 8);
    assert_eq!(lock["kind"], "mutex", "object: {lock}");
    assert_eq!(
        log.counter(lock, "acquisitions"),
        5,
        "the 3 acquisitions made before the shim's constructor ran must be counted: {lock}"
    );
}

/// The waits at `fixtures/waits_in_flight.c`'s worker-lock site on its gate mutex, as the
/// report of `run` shows them: (contended acquisitions, waits listed at that site).
fn gate_waits(run: &Run) -> (u64, u64) {
    let a = run.analyze();
    let log = a.log(0);
    let gate = log.object_created_at(
        "waits_in_flight.c",
        line_of("waits_in_flight.c", "creation-site"),
    );
    let lock = line_of("waits_in_flight.c", "worker-lock");
    let at_site = gate["wait_sites"]
        .as_array()
        .expect("wait_sites")
        .iter()
        .filter(|w| log.chain_has(&w["chain_id"], "waits_in_flight.c", lock))
        .map(|w| w["count"].as_u64().expect("count"))
        .sum();
    (log.counter(gate, "contended"), at_site)
}

/// Three workers each wait once for a mutex, then stay alive, parked, while main asks for a
/// snapshot and is killed: the waits of threads that never ended are in the log.
#[test]
fn a_snapshot_holds_the_waits_of_threads_still_running() {
    let running = Launch::fixture("waits_in_flight").arg("hang").spawn();
    running.wait_for_stdout("snapshot");
    let run = running.kill();
    assert_eq!(gate_waits(&run), (3, 3));
}

/// The same mutex destroyed while the three workers that waited for it still run: its last
/// counters hold their waits.
#[test]
fn a_mutex_destroyed_while_its_waiters_still_run_keeps_their_waits() {
    let run = Launch::fixture("waits_in_flight").arg("destroy").run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "destroyed\ndone\n");
    assert_eq!(gate_waits(&run), (3, 3));
}

#[test]
fn signal_handlers_behave_as_without_the_shim_and_a_semaphore_posted_in_one_during_malloc_never_hangs(
) {
    let run = run_both("signals", &[]);
    let out = run.stdout_text();
    assert!(out.ends_with("signals: all checks passed\n"), "{out}");
    assert!(out.lines().filter(|l| l.starts_with("check ")).count() >= 25);

    let a = run.analyze();
    let log = a.log(0);
    let sem = log.object_created_at("signals.c", line_of("signals.c", "sem-site"));
    assert_eq!(
        log.counter(sem, "posts"),
        200,
        "posts from the handler: {sem}"
    );
    assert_eq!(log.counter(sem, "acquisitions"), 200, "{sem}");
    assert!(log.counter(sem, "contended") > 0, "{sem}");
    // Tracked as usual after a handler was left by siglongjmp.
    let convoy = log.object_created_at("signals.c", line_of("signals.c", "convoy-site"));
    assert_eq!(log.counter(convoy, "max_waiters"), 3, "{convoy}");
    assert!(log.counter(convoy, "contended") >= 3, "{convoy}");
}

#[test]
fn underscore_exit_from_a_signal_handler_that_interrupted_malloc_ends_the_run_with_its_status() {
    let native = Launch::fixture("signals").native().arg("exit").run();
    assert_eq!(native.status.code(), Some(3));
    for _ in 0..3 {
        let run = Launch::fixture("signals").arg("exit").loud().run();
        assert_eq!(run.status.code(), Some(3), "stderr: {}", run.stderr_text());
        assert_eq!(run.stdout_text(), native.stdout_text());
        assert!(
            run.stderr_text().contains("in a signal handler"),
            "stderr: {}",
            run.stderr_text()
        );
        let a = run.analyze();
        let log = a.log(0);
        let end = &log.run()["end"];
        assert_eq!(end["reason"], "_exit", "run: {}", log.run());
        assert_eq!(end["exit_status"], 3, "run: {}", log.run());
        assert!(log.warnings().is_empty(), "{}", log.warning_text());
    }
}

#[test]
fn a_build_leaves_one_log_and_one_line_not_one_per_compiler_and_shell() {
    // make -j2 wrote 44 logs and printed 44 lines: its shells and compilers each ran on one
    // thread and never waited. Children like those leave nothing; the process the user started
    // keeps its log and line, and so does a child that ran threads.
    let script = format!(
        "/bin/true; /bin/echo from-a-child; {} 2>/dev/null",
        waitshim_tests::fixture("convoy").display()
    );
    let native = Launch::program("/bin/sh")
        .arg("-c")
        .arg(&script)
        .native()
        .run();
    native.assert_success();
    let run = Launch::program("/bin/sh")
        .arg("-c")
        .arg(&script)
        .loud()
        .run();
    run.assert_success();
    assert_eq!(run.stdout_text(), native.stdout_text());
    // The shell's log and the threaded fixture's, not true's nor echo's.
    assert_eq!(run.logs.len(), 2, "logs: {:?}", run.logs);
    let lines = run.stderr_text().matches("waitshim: log written").count();
    assert_eq!(lines, 1, "stderr: {}", run.stderr_text());
    let a = analyze(&run.logs, &[]);
    let exes: Vec<String> = a
        .logs()
        .iter()
        .map(|l| l["run"]["exe"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(exes.iter().any(|e| e.ends_with("/convoy")), "{exes:?}");
    assert!(
        exes.iter()
            .any(|e| e.ends_with("sh") || e.ends_with("dash")),
        "{exes:?}"
    );
    // Asked for, every process keeps its log.
    let all = Launch::program("/bin/sh")
        .arg("-c")
        .arg(&script)
        .env("WAITSHIM_CHILD_LOGS", "all")
        .run();
    all.assert_success();
    assert_eq!(all.logs.len(), 4, "logs: {:?}", all.logs);
}
