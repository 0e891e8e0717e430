//! The live commands, as a user runs them: `waitshim-analyze top` on finished and running
//! programs (the terminal view driven through tmux: keys sent with send-keys, the screen read
//! with capture-pane) and `waitshim-analyze request PID`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use waitshim_tests::{analyzer_path, compile_c, compile_c_with, line_of, Launch};

/// How long a test waits for the live view to show something (it refreshes every second).
const SCREEN_DEADLINE: Duration = Duration::from_secs(20);

fn analyzer(args: &[&OsStr]) -> Output {
    Command::new(analyzer_path())
        .args(args)
        .output()
        .expect("run waitshim-analyze")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The table row of the object created at `site` (`convoy.c:44`), split into its columns.
fn row_created_at<'a>(screen: &'a str, site: &str) -> Option<Vec<&'a str>> {
    screen
        .lines()
        .find(|l| l.contains(site) && l.trim_start().starts_with("mutex#"))
        .map(|l| l.split_whitespace().collect())
}

#[test]
fn top_once_on_a_finished_convoy_log_shows_the_contended_mutex() {
    let run = Launch::fixture("convoy").run();
    run.assert_success();
    let log = run.single_log();
    let out = analyzer(&["top".as_ref(), "--once".as_ref(), log.as_os_str()]);
    let screen = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{screen}{}", text(&out.stderr));

    let creation = format!("convoy.c:{}", line_of("convoy.c", "creation-site"));
    assert!(screen.contains("state      exited"), "{screen}");
    assert!(
        screen.contains("highwater  7 waiters on mutex#"),
        "{screen}"
    );
    assert!(screen.contains("objects by total waiting"), "{screen}");
    let row = row_created_at(&screen, &creation)
        .unwrap_or_else(|| panic!("no row for the mutex created at {creation}:\n{screen}"));
    // ... CONTENDED ACQUIRED MAX-WAITERS: 7 of the 8 threads waited, up to 7 at once.
    assert_eq!(row[row.len() - 3..], ["7", "8", "7"], "{screen}");
    // The mutex is the object threads waited on most: first row.
    let first = screen
        .lines()
        .skip_while(|l| !l.starts_with("OBJECT"))
        .nth(1)
        .unwrap_or_default();
    assert!(first.contains(&creation), "{screen}");
    assert!(!screen.contains('\x1b'), "plain text, no terminal control");
}

#[test]
fn top_on_a_file_that_is_not_a_log_fails_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("top");
    std::fs::write(&p, "not a log").unwrap();
    let out = analyzer(&["top".as_ref(), "--once".as_ref(), p.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not a waitshim log"),
        "{}",
        text(&out.stderr)
    );
    // A file named `top` is still a log to analyse when written as a path.
    let out = Command::new(analyzer_path())
        .current_dir(dir.path())
        .arg("./top")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("./top: not a waitshim log"),
        "{}",
        text(&out.stderr)
    );
}

/// A tmux server of its own (its own socket, no configuration file) with one detached session of
/// a fixed size running one command. The command runs under `sh`, which prints the command's exit
/// status on the pane when it exits and then keeps the pane open: tmux 3.3 may drop the last
/// output of a pane whose process has exited, and may leave its exit status unknown, so the
/// pane's own death tells nothing reliable. The server is killed on drop.
struct Tmux {
    socket: String,
}

/// What the shell prints when the command has exited, before its status.
const EXITED: &str = "[command exited with status ";

impl Tmux {
    /// Starts `command` in a `cols`×`rows` pane; None when tmux is not installed (outside CI).
    fn start(cols: u16, rows: u16, command: &[&OsStr]) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            waitshim_tests::skip_or_fail("the live view", "tmux is not installed");
            return None;
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let socket = format!(
            "waitshim-live-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null"])
            .args(["new-session", "-d", "-s", "live", "-x"])
            .arg(cols.to_string())
            .arg("-y")
            .arg(rows.to_string())
            .args(["--", "sh", "-c"])
            .arg(format!("\"$0\" \"$@\"; echo \"{EXITED}$?]\"; read _"))
            .args(command)
            .env_remove("TMUX")
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux new-session failed");
        Some(Tmux { socket })
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// The text on the pane now.
    fn screen(&self) -> String {
        text(&self.tmux(&["capture-pane", "-p", "-t", "live"]).stdout)
    }

    fn send_keys(&self, keys: &str) {
        assert!(self
            .tmux(&["send-keys", "-t", "live", keys])
            .status
            .success());
    }

    /// Polls the pane until `ready` holds for its text; fails the test after the deadline.
    fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + SCREEN_DEADLINE;
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the pane did not show {what} within {SCREEN_DEADLINE:?}; it shows:\n{screen}"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Presses `q` and waits for the command to exit; returns its status and the pane after.
    fn quit(&self) -> (i32, String) {
        self.send_keys("q");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let screen = self.screen();
            let status = screen
                .split_once(EXITED)
                .and_then(|(_, rest)| rest.split(']').next())
                .and_then(|code| code.parse().ok());
            if let Some(code) = status {
                return (code, screen);
            }
            assert!(
                Instant::now() < deadline,
                "top did not exit after q; the pane shows:\n{screen}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

#[test]
fn top_follows_a_running_program_by_pid_in_a_terminal_and_q_quits() {
    // Four threads take turns on one mutex, holding it 10 ms each, for a minute (killed when
    // the test ends).
    let program = Launch::fixture("sigkill").arg("60").spawn();
    program.wait_for_stdout("ready");
    let creation = format!("sigkill.c:{}", line_of("sigkill.c", "creation-site"));
    let pid = program.pid().to_string();
    let Some(tmux) = Tmux::start(
        160,
        30,
        &[
            analyzer_path().as_os_str(),
            "top".as_ref(),
            "--pid".as_ref(),
            pid.as_ref(),
        ],
    ) else {
        return;
    };

    let screen = tmux.wait_for("the contended mutex waited on in the last interval", |s| {
        s.contains("objects with the most waiting in the last 1s")
            && row_created_at(s, &creation).is_some()
    });
    assert!(screen.contains("state      running"), "{screen}");
    assert!(screen.contains(&format!("(pid {pid})")), "{screen}");
    assert!(screen.contains("threads    5 alive"), "{screen}");
    assert!(screen.contains("highwater  "), "{screen}");
    assert!(screen.contains("q: quit"), "{screen}");
    let row = row_created_at(&screen, &creation).unwrap();
    // ... CONT/1s, WAIT TOTAL (number and unit), CONTENDED, ACQUIRED, MAX WAITERS: the mutex
    // was contended in the last second (the four threads keep it busy all the time).
    let contended_last_interval: u64 = row[row.len() - 6].parse().unwrap_or(0);
    assert!(
        contended_last_interval > 0,
        "no contention in the last interval: {row:?}\n{screen}"
    );

    let (status, after) = tmux.quit();
    assert_eq!(status, 0, "top's exit status; the pane shows:\n{after}");
    assert!(
        !after.contains("waitshim top"),
        "the terminal was not restored (alternate screen still shown):\n{after}"
    );
    drop(program);
}

#[test]
fn top_keeps_showing_a_program_that_exited_while_it_watched() {
    // A short run: three seconds of contention, then a normal exit.
    let program = Launch::fixture("sigkill").arg("3").spawn();
    program.wait_for_stdout("ready");
    let log = program.logs().pop().expect("the program's log");
    let creation = format!("sigkill.c:{}", line_of("sigkill.c", "creation-site"));
    let Some(tmux) = Tmux::start(
        160,
        30,
        &[
            analyzer_path().as_os_str(),
            "top".as_ref(),
            "--interval".as_ref(),
            "300".as_ref(),
            log.as_os_str(),
        ],
    ) else {
        return;
    };
    let run = program.wait();
    run.assert_success();
    let screen = tmux.wait_for("the exited program", |s| s.contains("state      exited"));
    assert!(
        screen.contains("exited (status 0)") || screen.contains("exited (status not recorded)"),
        "{screen}"
    );
    assert!(screen.contains("objects by total waiting"), "{screen}");
    let row = row_created_at(&screen, &creation)
        .unwrap_or_else(|| panic!("no row for {creation}:\n{screen}"));
    assert!(
        row.contains(&"-"),
        "no interval figures once exited: {row:?}"
    );
    // The final state stays on screen until q.
    thread::sleep(Duration::from_millis(700));
    assert!(tmux.screen().contains("state      exited"));
    let (status, _) = tmux.quit();
    assert_eq!(status, 0);
}

#[test]
fn top_and_request_refuse_a_process_without_the_shim() {
    let dir = tempfile::tempdir().unwrap();
    let idle = compile_c(dir.path(), "idle", IDLE_PROGRAM);
    let program = Launch::program(&idle).native().spawn();
    program.wait_for_stdout("ready");
    let pid = program.pid().to_string();

    let out = analyzer(&["request".as_ref(), pid.as_ref()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("process {pid} is not running under waitshim")),
        "{err}"
    );
    let out = analyzer(&[
        "top".as_ref(),
        "--once".as_ref(),
        "--pid".as_ref(),
        pid.as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!("process {pid} is not running under waitshim")),
        "{}",
        text(&out.stderr)
    );
    drop(program);

    // A pid that names no process.
    let out = analyzer(&["request".as_ref(), "2147483647".as_ref()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no process with pid 2147483647"),
        "{}",
        text(&out.stderr)
    );
}

/// Waits for signals until killed; says `ready` once running.
const IDLE_PROGRAM: &str = r#"
#include <stdio.h>
#include <unistd.h>
int main(void)
{
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
"#;

/// A stand-in for libwaitshim.so that only serves data requests, the way the shim does: it
/// creates its log (`WAITSHIM_LOG`) as a zero-filled file mapped `MAP_SHARED`, writes the run
/// start, and for each request counted into the header's mailbox word appends a `Snapshot`
/// record (seq 1, 2, …). `FAKE_SHIM_SILENT=1`: takes requests but never answers.
const FAKE_SHIM: &str = r#"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LOG_SIZE (1 << 16)
static unsigned char *base;
static size_t end;
static uint64_t seq;
static int silent;

static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & -(crc & 1));
    }
    return ~crc;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Frame: u16 tag | u16 type | u32 len | u32 crc32(type, len, body) | body | pad to 4; the tag is
   stored last, as the shim publishes a frame. */
static void append(uint16_t type, const unsigned char *body, uint32_t len)
{
    unsigned char *f = base + end;
    unsigned char head[6];
    memcpy(head, &type, 2);
    memcpy(head + 2, &len, 4);
    uint32_t crc = crc32_update(crc32_update(0, head, 6), body, len);
    memcpy(f + 2, &type, 2);
    memcpy(f + 4, &len, 4);
    memcpy(f + 8, &crc, 4);
    memcpy(f + 12, body, len);
    __atomic_store_n((uint16_t *)f, (uint16_t)0x5357, __ATOMIC_RELEASE);
    end += (12 + len + 3) & ~(size_t)3;
}

static unsigned char *put(unsigned char *p, const void *v, size_t n)
{
    memcpy(p, v, n);
    return p + n;
}

static unsigned char *put_str(unsigned char *p, const char *s)
{
    uint32_t n = (uint32_t)strlen(s);
    return put(put(p, &n, 4), s, n);
}

/* Appends one Snapshot record answering a mailbox request. */
static void answer(void)
{
    unsigned char body[21], *p = body;
    uint64_t s = ++seq, ns = mono_ns();
    uint8_t source = 4; /* snapshot_source::REQUEST */
    uint32_t requester = 0;
    p = put(p, &s, 8);
    p = put(p, &ns, 8);
    p = put(p, &source, 1);
    put(p, &requester, 4);
    append(25, body, sizeof body);
}

/* The shim's own thread, named as the shim names it: it sleeps on the mailbox word (bytes 12..16
   of the log) and answers each request the requester counted into its low 16 bits. */
static void *fake_shim_thread(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "waitshim", 0, 0, 0);
    uint32_t *word = (uint32_t *)(base + 12);
    uint32_t served = 0;
    for (;;) {
        uint32_t w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        if ((w & 0xffff) == (served & 0xffff)) {
            syscall(SYS_futex, word, FUTEX_WAIT, w, NULL, NULL, 0);
            continue;
        }
        served++;
        if (!silent)
            answer();
    }
    return NULL;
}

__attribute__((constructor)) static void fake_shim_start(void)
{
    const char *path = getenv("WAITSHIM_LOG");
    if (!path)
        return;
    silent = getenv("FAKE_SHIM_SILENT") != NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, LOG_SIZE) != 0)
        return;
    base = mmap(NULL, LOG_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return;
    uint16_t major = 1, minor = 1;
    memcpy(base, "WAITSHIM", 8);
    memcpy(base + 8, &major, 2);
    memcpy(base + 10, &minor, 2);
    end = 16;

    unsigned char body[256], *p = body;
    uint32_t pid = (uint32_t)getpid(), ppid = (uint32_t)getppid(), ncpus = 1, argc = 1;
    uint64_t realtime = 0, mono = mono_ns();
    p = put(p, &pid, 4);
    p = put(p, &ppid, 4);
    p = put(p, &realtime, 8);
    p = put(p, &mono, 8);
    p = put(p, &ncpus, 4);
    p = put_str(p, "/fake/idle");
    p = put(p, &argc, 4);
    p = put_str(p, "idle");
    p = put_str(p, "fake");
    append(1, body, (uint32_t)(p - body)); /* RunStart */

    pthread_t t;
    pthread_create(&t, NULL, fake_shim_thread, NULL);
}
"#;

/// The idle program under the fake shim, with its log in `dir`, and extra environment.
fn fake_shim_program(dir: &Path, env: &[(&str, &str)]) -> (waitshim_tests::Running, PathBuf) {
    let idle = compile_c(dir, "idle", IDLE_PROGRAM);
    let lib_dir = dir.join("lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    // Named as the shim: the analyzer recognises it by its file name in /proc/PID/maps.
    let src = compile_c_with(&lib_dir, "libwaitshim.so", FAKE_SHIM, &["-shared", "-fPIC"]);
    let log = dir.join("fake.log");
    let mut launch = Launch::program(&idle)
        .native()
        .env("LD_PRELOAD", &src)
        .env("WAITSHIM_LOG", &log);
    for (k, v) in env {
        launch = launch.env(k, v);
    }
    let program = launch.spawn();
    program.wait_for_stdout("ready");
    (program, log)
}

#[test]
fn request_waits_for_the_snapshot_and_prints_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let (program, log) = fake_shim_program(dir.path(), &[]);
    let pid = program.pid().to_string();

    let out = analyzer(&["request".as_ref(), pid.as_ref()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let first = stdout.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!("snapshot 1 of pid {pid} written to {}", log.display())
    );
    assert!(
        stdout.contains(&format!("waitshim report: {}", log.display())),
        "{stdout}"
    );
    assert!(stdout.contains("program:   idle"), "{stdout}");

    // The next request is answered by the next snapshot; --quiet prints only that line.
    let out = analyzer(&["request".as_ref(), "--quiet".as_ref(), pid.as_ref()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("snapshot 2 of pid {pid} written to {}\n", log.display())
    );
    drop(program);
}

/// Counts the signals it is sent, with handlers of its own for the two a request could have
/// used (given the argument `own`; without it, SIGUSR2 would end it); a thread of its own starts
/// the shim's thread. Says `ready`, then on each line of stdin prints `usr2 N rt N`.
const SIGNAL_COUNTER: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static volatile sig_atomic_t usr2, rt;
static void on_usr2(int s) { (void)s; usr2++; }
static void on_rt(int s) { (void)s; rt++; }
static void *nothing(void *a) { return a; }
int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "own") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_flags = SA_RESTART; /* the read of stdin goes on */
        sa.sa_handler = on_usr2;
        sigaction(SIGUSR2, &sa, NULL);
        sa.sa_handler = on_rt;
        sigaction(SIGRTMAX - 3, &sa, NULL);
    }
    pthread_t t;
    pthread_create(&t, NULL, nothing, NULL);
    pthread_join(t, NULL);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        printf("usr2 %d rt %d\n", (int)usr2, (int)rt);
        fflush(stdout);
    }
    return 0;
}
"#;

#[test]
fn request_sends_no_signal_and_a_signal_asks_only_when_the_user_chose_one() {
    let dir = tempfile::tempdir().unwrap();
    let program = compile_c(dir.path(), "counter", SIGNAL_COUNTER);

    // A request reaches the shim through its log: the program's handlers see nothing.
    let mut running = Launch::program(&program).arg("own").stdin_piped().spawn();
    running.wait_for_stdout("ready");
    let pid = running.pid().to_string();
    let out = analyzer(&["request".as_ref(), "--quiet".as_ref(), pid.as_ref()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with(&format!("snapshot 1 of pid {pid}")));
    running.send("count\n");
    running.wait_for_stdout("usr2 0 rt 0");

    // Without WAITSHIM_SIGNAL, SIGUSR2 is the program's: its handler runs.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(running.pid() as i32, libc::SIGUSR2) };
    running.send("count\n");
    running.wait_for_stdout("usr2 1 rt 0");
    let run = running.kill();
    let report = run.analyze();
    let snapshots = &report.log(0).0["snapshots"];
    assert_eq!(
        snapshots["total"], 1,
        "only the request's snapshot: {snapshots}"
    );

    // With WAITSHIM_SIGNAL=SIGUSR2, in a program with no handler for it, the shim takes that
    // signal, writes a snapshot, and the program lives on.
    let mut running = Launch::program(&program)
        .stdin_piped()
        .env("WAITSHIM_SIGNAL", "SIGUSR2")
        .spawn();
    running.wait_for_stdout("ready");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(running.pid() as i32, libc::SIGUSR2) };
    let analysis = running.poll_log("the signal's snapshot", |r| {
        r.0["snapshots"]["total"].as_u64().is_some_and(|n| n > 0)
    });
    let snapshot = &analysis.log(0).0["snapshots"]["listed"][0];
    assert_eq!(snapshot["source"], "signal", "{snapshot}");
    running.send("count\n");
    running.wait_for_stdout("usr2 0 rt 0");
    drop(running);
}

#[test]
fn request_gives_up_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (program, log) = fake_shim_program(dir.path(), &[("FAKE_SHIM_SILENT", "1")]);
    let pid = program.pid().to_string();
    let started = Instant::now();
    let out = analyzer(&[
        "request".as_ref(),
        "--timeout".as_ref(),
        "0.5".as_ref(),
        pid.as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(started.elapsed() >= Duration::from_millis(500));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "process {pid} wrote no snapshot to {} within 0.5 s",
            log.display()
        )),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    drop(program);
}

#[test]
fn request_to_a_contended_program_under_the_shim_reports_its_mutex() {
    let program = Launch::fixture("sigkill").arg("60").spawn();
    program.wait_for_stdout("ready");
    let pid = program.pid().to_string();
    let out = analyzer(&["request".as_ref(), pid.as_ref()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.starts_with(&format!("snapshot 1 of pid {pid} written to ")),
        "{stdout}"
    );
    let creation = format!("sigkill.c:{}", line_of("sigkill.c", "creation-site"));
    assert!(stdout.contains(&creation), "{stdout}");
    drop(program);
}
