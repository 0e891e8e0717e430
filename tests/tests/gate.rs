//! The CI commands: `check` (exit codes, expressions, annotations), `run` (the launcher),
//! `baseline` and `history` (on SQLite, and on a PostgreSQL cluster the test starts itself).

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use waitshim_tests::{analyzer_path, fixture, line_of, shim_path, Launch, Run, POLL_DEADLINE};

fn analyzer(args: &[&str], logs: &[&Path]) -> Output {
    Command::new(analyzer_path())
        .args(args)
        .args(logs)
        .output()
        .expect("run waitshim-analyze")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

/// A run of `gate_load` with `threads` workers (HWM threads - 1).
fn load(threads: u32) -> Run {
    let run = Launch::fixture("gate_load").arg(threads.to_string()).run();
    run.assert_success();
    run
}

fn check(args: &[&str], log: &Path) -> Output {
    let mut a = vec!["check"];
    a.extend_from_slice(args);
    analyzer(&a, &[log])
}

#[test]
fn check_exit_codes_clean_inversion_fail_if_garbage_and_bad_expressions() {
    // convoy 3: the first holder sleeps 200 ms while the other two pile up: HWM 2.
    let clean = Launch::fixture("convoy").arg("3").run();
    clean.assert_success();
    let log = clean.single_log();
    let o = check(&[], log);
    assert_eq!(code(&o), 0, "{:?}", text(&o));
    assert!(text(&o).1.contains("passed"), "{:?}", text(&o));

    // True and false expressions, units, combinations.
    let creation = line_of("convoy.c", "creation-site");
    let o = check(&["--fail-if", "hwm > 1"], log);
    assert_eq!(code(&o), 1, "{:?}", text(&o));
    let (out, _) = text(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("hwm = 2"), "{out}");
    assert!(out.contains(&format!("convoy.c:{creation}")), "{out}");
    for (expr, want) in [
        ("hwm > 2", 0),
        ("hwm >= 2 && threads == 4", 1),
        ("hwm > 5 || !(deadlocks == 0)", 0),
        (&format!("wait_total(\"convoy.c:{creation}\") > 100ms"), 1),
        (&format!("wait_total(\"convoy.c:{creation}\") > 1000s"), 0),
        ("waits(\"convoy_lock\") == 2 && contended_ratio > 60%", 1),
        ("lost_parallelism > 100%", 0),
    ] {
        let o = check(&["--fail-if", expr], log);
        assert_eq!(code(&o), want, "{expr}: {:?}", text(&o));
    }
    // Every failing condition on its own line.
    let o = check(
        &["--fail-if", "hwm > 1", "--fail-if", "acquisitions > 0"],
        log,
    );
    assert_eq!(code(&o), 1);
    assert_eq!(
        text(&o)
            .0
            .lines()
            .filter(|l| l.starts_with("FAIL "))
            .count(),
        2,
        "{:?}",
        text(&o)
    );

    // GitHub annotations and a GitLab report point at the mutex's creation line.
    let o = check(&["--format", "github", "--fail-if", "hwm > 1"], log);
    let (out, _) = text(&o);
    let line = out.lines().next().unwrap_or_default();
    assert!(line.starts_with("::error file="), "{out}");
    assert!(
        line.contains(&format!("convoy.c,line={creation},")),
        "{out}"
    );
    let o = check(&["--format", "gitlab", "--fail-if", "hwm > 1"], log);
    assert_eq!(code(&o), 1);
    let report: Value = serde_json::from_slice(&o.stdout).expect("gitlab JSON");
    let item = &report[0];
    assert!(
        item["location"]["path"]
            .as_str()
            .unwrap()
            .ends_with("convoy.c"),
        "{report}"
    );
    assert_eq!(item["location"]["lines"]["begin"], creation);
    assert!(item["fingerprint"].as_str().is_some_and(|f| !f.is_empty()));

    // A bad expression: exit 2 and the column.
    let o = check(&["--fail-if", "hwm > 3 && wait_total > 200"], log);
    assert_eq!(code(&o), 2);
    assert!(text(&o).1.contains("column 25"), "{:?}", text(&o));
    let o = check(&["--fail-if", "hwmm > 3"], log);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o).1.contains("unknown metric 'hwmm'"),
        "{:?}",
        text(&o)
    );

    // A file that is not a log, and one that does not exist: exit 2.
    let garbage = clean.dir.path().join("garbage.log");
    std::fs::write(&garbage, b"not a log at all\n").unwrap();
    assert_eq!(code(&check(&[], &garbage)), 2);
    assert_eq!(code(&check(&[], &clean.dir.path().join("missing.log"))), 2);

    // A lock-order inversion fails the default gate; --no-default-gate lets it pass.
    let inv = Launch::fixture("lock_inversion").run();
    inv.assert_success();
    let o = check(&[], inv.single_log());
    assert_eq!(code(&o), 1, "{:?}", text(&o));
    assert!(
        text(&o).0.contains("lock-order inversion"),
        "{:?}",
        text(&o)
    );
    assert!(text(&o).0.contains("lock_inversion.c:"), "{:?}", text(&o));
    assert_eq!(code(&check(&["--no-default-gate"], inv.single_log())), 0);
    assert_eq!(
        code(&check(
            &["--no-default-gate", "--fail-if", "inversions > 0"],
            inv.single_log()
        )),
        1
    );
}

#[test]
fn check_fails_a_deadlocked_run() {
    let running = Launch::fixture("abba").spawn();
    running.wait_for_stdout("abba: armed");
    running.poll_log("a deadlock", |log| !log.deadlocks().is_empty());
    let run = running.kill();
    let o = check(&[], run.single_log());
    assert_eq!(code(&o), 1, "{:?}", text(&o));
    let (out, _) = text(&o);
    assert!(
        out.contains("deadlock: 2 threads wait for each other"),
        "{out}"
    );
    assert!(
        out.contains(&format!("abba.c:{}", line_of("abba.c", "creation-site-A"))),
        "{out}"
    );
}

/// `run` with the gate_forks fixture: the parent's and the exec'd child's logs are reported,
/// and the command's status is said.
#[test]
fn run_reports_every_process_and_says_the_commands_status() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let prog = fixture("gate_forks");
    let o = Command::new(analyzer_path())
        .arg("run")
        .arg("--each")
        .arg("--log-dir")
        .arg(&logs)
        .arg("--")
        .arg(&prog)
        .arg("7")
        .output()
        .unwrap();
    let (out, err) = text(&o);
    // The command failed (status 7): exit 3, its own status said.
    assert_eq!(code(&o), 3, "{out}\n{err}");
    assert!(err.contains("the command ended with status 7"), "{err}");
    assert!(
        err.contains(&format!(
            "logs in {}",
            logs.canonicalize().unwrap().display()
        )),
        "{err}"
    );
    assert!(
        out.contains("gate_forks: child done") && out.contains("gate_forks: parent done"),
        "{out}"
    );
    let parent = format!(
        "gate_forks.c:{}",
        line_of("gate_forks.c", "creation-site-parent")
    );
    let child = format!(
        "gate_forks.c:{}",
        line_of("gate_forks.c", "creation-site-child")
    );
    assert!(
        out.contains(&parent),
        "no report of the parent's mutex {parent}:\n{out}"
    );
    assert!(
        out.contains(&child),
        "no report of the exec'd child's mutex {child}:\n{out}"
    );
    assert_eq!(std::fs::read_dir(&logs).unwrap().count(), 2);
    // Two processes: one summary, then with --each both reports.
    assert!(
        out.contains("waitshim summary: 2 log(s) of 1 program(s)"),
        "{out}"
    );
    assert_eq!(out.matches("waitshim report: ").count(), 2, "{out}");

    // --check with a passing gate keeps the command's status; --json reports as JSON.
    let o = Command::new(analyzer_path())
        .env("TMPDIR", dir.path())
        .args(["run", "--check", "--json", "--shim"])
        .arg(shim_path())
        .arg("--")
        .arg(&prog)
        .arg("0")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{:?}", text(&o));
    let (out, _) = text(&o);
    // stdout holds the document alone: the command's own lines went to stderr.
    let doc: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["report"]["logs"].as_array().map(Vec::len), Some(2));
    assert!(
        text(&o).1.contains("gate_forks: parent done"),
        "{:?}",
        text(&o)
    );

    // A failing --fail-if makes it 1: the exec'd child's mutex is taken 3 times (its log is
    // gated too), the parent's twice.
    let expr = format!("acquisitions(\"{child}\") == 3");
    let o = Command::new(analyzer_path())
        .env("TMPDIR", dir.path())
        .args(["run", "--no-report", "--check", "--fail-if", &expr, "--"])
        .arg(&prog)
        .arg("0")
        .output()
        .unwrap();
    assert_eq!(code(&o), 1, "{:?}", text(&o));
    assert!(text(&o).0.contains(&child), "{:?}", text(&o));
}

#[test]
fn run_check_turns_a_planted_deadlock_into_exit_4() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let mut child = Command::new(analyzer_path())
        .args(["run", "--check", "--no-report", "--log-dir"])
        .arg(&logs)
        .arg("--")
        .arg(fixture("abba"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "abba: armed\n");
    // Wait for the deadlock in the hung program's log, then kill the program (not the launcher).
    let deadline = Instant::now() + POLL_DEADLINE;
    let log: PathBuf = loop {
        let found: Vec<PathBuf> = std::fs::read_dir(&logs)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        if let [log] = found.as_slice() {
            let o = analyzer(&["check"], &[log]);
            if code(&o) == 1 && text(&o).0.contains("deadlock") {
                break log.clone();
            }
        }
        assert!(Instant::now() < deadline, "no deadlock in {found:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let pid: i32 = log
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| {
            n.strip_prefix("waitshim.")?
                .strip_suffix(".log")?
                .parse()
                .ok()
        })
        .expect("pid in the log's name");
    // SAFETY: kill(2) of the hung fixture, a child of the launcher we started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let o = child.wait_with_output().unwrap();
    let mut out = line;
    std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    // The command was killed and the gate failed: exit 4.
    assert_eq!(o.status.code(), Some(4), "{out}\n{err}");
    assert!(err.contains("killed by SIGKILL (status 137)"), "{err}");
    assert!(out.contains("FAIL ") && out.contains("deadlock"), "{out}");
}

#[test]
fn baselines_are_stable_and_name_what_got_worse() {
    let run = load(2);
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("waitshim-baseline.json");
    let o = analyzer(
        &["baseline", "-o", base.to_str().unwrap()],
        &[run.single_log()],
    );
    assert_eq!(code(&o), 0, "{:?}", text(&o));
    let first = std::fs::read_to_string(&base).unwrap();
    let o = analyzer(&["baseline", "-o", "-"], &[run.single_log()]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        first,
        "the same log gives the same file"
    );
    let creation = line_of("gate_load.c", "creation-site");
    let key = format!("mutex gate_load.c:{creation} (main)");
    assert!(first.contains(&key), "{first}");
    assert!(
        !first.contains("0x") && !first.contains(&run.pid.to_string()),
        "addresses or pids in:\n{first}"
    );
    let v: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["format"], "waitshim-baseline/1");
    assert_eq!(v["programs"]["gate_load"]["run"]["hwm"], 1);

    // The run it was made from passes; a run with three times the workers does not.
    let b = base.to_str().unwrap();
    assert_eq!(code(&check(&["--baseline", b], run.single_log())), 0);
    let worse = load(6);
    let o = check(&["--baseline", b], worse.single_log());
    assert_eq!(code(&o), 1, "{:?}", text(&o));
    let (out, _) = text(&o);
    // Six workers queue up to five deep and wait most of their time; how deep they got, and
    // how long they waited, is not forced: one of the figures must have risen, at the lock.
    assert!(
        out.contains("hwm rose from 1 to ") || out.contains("wait_share rose from"),
        "{out}"
    );
    assert!(out.contains(&key), "{out}");
    // A damaged baseline is an input error.
    std::fs::write(&base, "{\"format\": 3}").unwrap();
    assert_eq!(code(&check(&["--baseline", b], run.single_log())), 2);
}

/// Five runs, a like run, 20 A/A runs, a run whose contention grew, and two writers at once.
fn history_scenario(db: &str) {
    let job = format!("gate-{}", std::process::id());
    let hist = |args: &[&str], logs: &[&Path]| {
        let mut a = args.to_vec();
        a.extend_from_slice(&["--job", &job, "--db", db]);
        analyzer(&a, logs)
    };
    for _ in 0..5 {
        let r = load(2);
        let o = hist(&["history", "add"], &[r.single_log()]);
        assert_eq!(code(&o), 0, "{:?}", text(&o));
    }
    let like = load(2);
    let o = hist(&["history", "check"], &[like.single_log()]);
    assert_eq!(code(&o), 0, "a like run alerted: {:?}", text(&o));
    for i in 0..20 {
        let r = load(2);
        let o = hist(&["history", "check", "--add"], &[r.single_log()]);
        assert_eq!(code(&o), 0, "A/A run {i} alerted: {:?}", text(&o));
    }
    let grown = load(6);
    let o = hist(&["history", "check", "--json"], &[grown.single_log()]);
    let (out, err) = text(&o);
    assert_eq!(code(&o), 1, "{out}\n{err}");
    let site = format!("gate_load.c:{}", line_of("gate_load.c", "creation-site"));
    assert!(err.contains("REGRESSION") && err.contains(&site), "{err}");
    let alerts: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert!(
        alerts
            .iter()
            .any(|a| a["scope"].as_str().unwrap().contains(&site)),
        "{out}"
    );
    let o = hist(&["history", "show", "--last", "1000"], &[]);
    let (out, _) = text(&o);
    assert!(out.starts_with(&format!("job {job}: 25 run(s)")), "{out}");
    assert!(out.contains("by hour of day (UTC)"), "{out}");

    // Two writers adding 8 runs each at once lose none.
    let log = grown.single_log().to_path_buf();
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let (db, job, log) = (db.to_string(), format!("{job}-w"), log.clone());
            std::thread::spawn(move || {
                for _ in 0..8 {
                    let o = Command::new(analyzer_path())
                        .args(["history", "add", "--no-symbols", "--job", &job, "--db", &db])
                        .arg(&log)
                        .output()
                        .unwrap();
                    assert_eq!(
                        o.status.code(),
                        Some(0),
                        "{}",
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let o = analyzer(
        &[
            "history",
            "show",
            "--last",
            "1000",
            "--job",
            &format!("{job}-w"),
            "--db",
            db,
        ],
        &[],
    );
    assert!(
        text(&o).0.starts_with(&format!("job {job}-w: 16 run(s)")),
        "{:?}",
        text(&o)
    );
}

/// With 3 runs stored, `history check` judges nothing: it says so, and does not claim that no
/// figure regressed against those 3 runs; a window smaller than the 5 runs needed says that no
/// run will ever be judged with it.
#[test]
fn history_check_with_too_few_runs_says_the_run_was_not_judged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.sqlite");
    let db = db.to_str().unwrap();
    let run = load(2);
    for _ in 0..3 {
        let o = analyzer(
            &["history", "add", "--job", "few", "--db", db],
            &[run.single_log()],
        );
        assert_eq!(code(&o), 0, "{:?}", text(&o));
    }
    let o = analyzer(
        &["history", "check", "--job", "few", "--db", db],
        &[run.single_log()],
    );
    assert_eq!(code(&o), 0, "{:?}", text(&o));
    let (_, err) = text(&o);
    assert_eq!(
        err.trim_end(),
        "waitshim history: job few: not judged: 3 earlier run(s), 5 needed before a run is judged"
    );
    let o = analyzer(
        &[
            "history", "check", "--job", "few", "--window", "3", "--db", db,
        ],
        &[run.single_log()],
    );
    let (_, err) = text(&o);
    assert!(
        err.contains("(--window 3 compares with fewer: no run will be judged)"),
        "{err}"
    );
}

#[test]
fn history_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ci/history.sqlite");
    history_scenario(db.to_str().unwrap());
    notify_and_show(dir.path(), db.to_str().unwrap());
    // The schema is versioned.
    let o = analyzer(
        &[
            "history",
            "show",
            "--job",
            "none",
            "--db",
            db.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code(&o), 0);
    // A file that is not a database is an input error.
    let bad = dir.path().join("bad.sqlite");
    std::fs::write(&bad, vec![b'x'; 4096]).unwrap();
    let o = analyzer(
        &[
            "history",
            "show",
            "--job",
            "j",
            "--db",
            bad.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code(&o), 2, "{:?}", text(&o));
}

/// After [`history_scenario`]: a regression runs the `--notify` command with the event's JSON
/// on its stdin, a run like the others does not, a hook that fails is said; `history show`
/// prints every scope stored, the figures kept for trends, by hour and by day of week. (Idle CPU
/// time is kept too, from the sampler's second look at the CPUs on: these runs are too short.)
fn notify_and_show(dir: &Path, db: &str) {
    let job = format!("gate-{}", std::process::id());
    let event = dir.join("event.json");
    let said = dir.join("event-name");
    let hook = format!(
        "cat > '{}' && printf '%s' \"$WAITSHIM_EVENT\" > '{}'",
        event.display(),
        said.display()
    );
    let check = |log: &Path, hook: &str| {
        analyzer(
            &[
                "history", "check", "--job", &job, "--db", db, "--notify", hook,
            ],
            &[log],
        )
    };
    let grown = load(6);
    let o = check(grown.single_log(), &hook);
    let (_, err) = text(&o);
    assert_eq!(code(&o), 1, "{err}");
    assert!(
        err.contains("--notify: the regression was passed on"),
        "{err}"
    );
    let e: Value =
        serde_json::from_str(&std::fs::read_to_string(&event).unwrap()).expect("the event is JSON");
    assert_eq!(e["event"], "waitshim-regression");
    assert_eq!(e["job"], job.as_str());
    assert_eq!(e["run"]["program"], "gate_load");
    let site = format!("gate_load.c:{}", line_of("gate_load.c", "creation-site"));
    let alerts = e["alerts"].as_array().unwrap();
    assert!(
        alerts
            .iter()
            .any(|a| a["scope"].as_str().unwrap().contains(&site)
                && a["value"].as_f64() > a["threshold"].as_f64()),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(&said).unwrap(),
        "waitshim-regression"
    );

    // A run like the others: no regression, no notification.
    std::fs::remove_file(&event).unwrap();
    let like = load(2);
    let o = check(like.single_log(), &hook);
    assert_eq!(code(&o), 0, "{:?}", text(&o));
    assert!(!event.exists(), "the hook ran without a regression");

    // A hook that fails is said; the regression still fails the check.
    let o = check(grown.single_log(), "cat >/dev/null; exit 3");
    let (_, err) = text(&o);
    assert_eq!(code(&o), 1, "{err}");
    assert!(err.contains("was not passed on"), "{err}");

    let o = analyzer(
        &[
            "history", "show", "--last", "1000", "--job", &job, "--db", db,
        ],
        &[],
    );
    let (out, _) = text(&o);
    assert_eq!(code(&o), 0);
    for want in [
        "gate_load: run:\n",
        &format!("gate_load: mutex {site} (main):\n"),
        "  contended_ratio: ",
        "  wait_total_ns (not judged): ",
        "  wait_all_ns (not judged): ",
        "  duration_ns (not judged): ",
        "  running_ns (not judged): ",
        "  lost_parallelism_ns (not judged): ",
        "    by hour of day (UTC): ",
        "    by day of week (UTC): ",
    ] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
}

/// A throw-away PostgreSQL cluster in a temporary directory, on a Unix socket; stopped on drop.
struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    as_nobody: bool,
}

impl Cluster {
    fn find_bin() -> Option<PathBuf> {
        let mut candidates = vec![PathBuf::from("/usr/local/bin")];
        if let Ok(d) = std::fs::read_dir("/usr/lib/postgresql") {
            let mut v: Vec<PathBuf> = d
                .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
                .collect();
            v.sort();
            candidates.extend(v.into_iter().rev());
        }
        candidates
            .into_iter()
            .find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file())
    }

    fn cmd(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        if self.as_nobody {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    /// `psql` on the cluster's socket, as the user the cluster runs as.
    fn psql(&self) -> Command {
        let exe = match self.bin.join("psql") {
            p if p.is_file() => p,
            _ => PathBuf::from("psql"),
        };
        let mut c = if self.as_nobody {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        c.args(["-X", "-At", "-U", "postgres", "-p", "5432", "-h"])
            .arg(self.dir.path());
        c
    }

    fn start() -> Result<Cluster, String> {
        let bin = match Self::find_bin() {
            Some(b) => b,
            None => {
                let _ = Command::new("apt-get")
                    .args(["install", "-y", "-q", "postgresql"])
                    .output();
                Self::find_bin().ok_or(
                    "no initdb/pg_ctl, and apt-get install postgresql did not provide them",
                )?
            }
        };
        let dir = tempfile::Builder::new()
            .prefix("wspg")
            .tempdir_in("/tmp")
            .map_err(|e| e.to_string())?;
        // SAFETY: geteuid has no preconditions.
        let as_nobody = unsafe { libc::geteuid() } == 0;
        if as_nobody {
            let c = std::ffi::CString::new(dir.path().to_str().unwrap()).unwrap();
            // SAFETY: a valid path; nobody is uid 65534 on Debian.
            if unsafe { libc::chown(c.as_ptr(), 65534, 65534) } != 0 {
                return Err("cannot chown the cluster directory to nobody".into());
            }
        }
        let cluster = Cluster {
            bin,
            dir,
            as_nobody,
        };
        let data = cluster.dir.path().join("data");
        let o = cluster
            .cmd("initdb")
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(&data)
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err(format!("initdb: {}", String::from_utf8_lossy(&o.stderr)));
        }
        let opts = format!(
            "-k {} -c listen_addresses='' -p 5432 -c fsync=off",
            cluster.dir.path().display()
        );
        let o = cluster
            .cmd("pg_ctl")
            .args(["-w", "-t", "60", "-l"])
            .arg(cluster.dir.path().join("log"))
            .args(["-o", &opts, "-D"])
            .arg(&data)
            .arg("start")
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err(format!(
                "pg_ctl start: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(cluster)
    }

    fn url(&self) -> String {
        let host = self.dir.path().display().to_string().replace('/', "%2F");
        format!("postgresql://postgres@{host}:5432/postgres")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .cmd("pg_ctl")
            .args(["-m", "immediate", "-D"])
            .arg(self.dir.path().join("data"))
            .arg("stop")
            .output();
    }
}

#[test]
fn history_on_postgresql() {
    let cluster = match Cluster::start() {
        Ok(c) => c,
        Err(e) => {
            waitshim_tests::skip_or_fail(
                "history_on_postgresql",
                &format!("no PostgreSQL server could be started: {e}"),
            );
            return;
        }
    };
    history_scenario(&cluster.url());
}

#[test]
fn run_timeout_stops_a_command_that_runs_too_long() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let o = Command::new(analyzer_path())
        .env("TMPDIR", dir.path())
        .args([
            "run",
            "--no-report",
            "--timeout",
            "300ms",
            "--",
            "sleep",
            "60",
        ])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    // The command failed (killed by SIGTERM, 128 + 15): exit 3.
    assert_eq!(code(&o), 3, "{err}");
    assert!(err.contains("status 143"), "{err}");
    assert!(err.contains("sending SIGTERM"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(30));
    // A command that cannot be started is an error of the launcher (2), not the command's.
    let o = Command::new(analyzer_path())
        .env("TMPDIR", dir.path())
        .args(["run", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{:?}", text(&o));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the sleep's directory is left"
    );
    let o = Command::new(analyzer_path())
        .args(["run", "--shim", "/nonexistent/libwaitshim.so", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{:?}", text(&o));
    assert!(text(&o).1.contains("no shim at"), "{:?}", text(&o));
}

#[test]
fn run_history_job_adds_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.sqlite");
    let db = db.to_str().unwrap();
    let o = Command::new(analyzer_path())
        .env("TMPDIR", dir.path())
        .args([
            "run",
            "--no-report",
            "--history-job",
            "launch",
            "--db",
            db,
            "--",
        ])
        .arg(fixture("gate_load"))
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{:?}", text(&o));
    let o = analyzer(&["history", "show", "--job", "launch", "--db", db], &[]);
    let (out, _) = text(&o);
    assert!(out.starts_with("job launch: 1 run(s)"), "{out}");
    assert!(
        out.contains("gate_load: run:\n") && out.contains("\n  lost_parallelism: "),
        "{out}"
    );
}

/// `waitshim-analyze ARGS...` run natively in a fresh working directory, ended (and the test
/// failed) if it takes longer than `limit`.
fn analyzer_within(limit: Duration, args: &[&OsStr]) -> Run {
    Launch::program(analyzer_path())
        .native()
        .timeout(limit)
        .args(args)
        .run()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A history database that is not a file SQLite may keep (an empty name, a device, a FIFO, a
/// directory, `:memory:`) is refused with exit status 2 before anything is written beside it,
/// and the read-only commands never create a database for a mistyped path.
#[test]
fn history_refuses_what_is_not_a_database_file_and_creates_nothing() {
    let run = load(2);
    let log = run.single_log().as_os_str();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.sqlite");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let subdir = dir.path().join("a-directory");
    std::fs::create_dir(&subdir).unwrap();
    let journal_before = Path::new("/dev/zero-journal").exists();
    let refused: [(&OsStr, &str); 5] = [
        (OsStr::new(""), "empty"),
        (
            OsStr::new("/dev/zero"),
            "is a device, not a history database",
        ),
        (fifo.as_os_str(), "is a FIFO, not a history database"),
        (subdir.as_os_str(), "is a directory, not a history database"),
        (OsStr::new(":memory:"), "keeps nothing"),
    ];
    for (db, why) in refused {
        for cmd in [&["add"][..], &["check", "--add"][..]] {
            let mut args: Vec<&OsStr> = vec![OsStr::new("history")];
            args.extend(cmd.iter().map(OsStr::new));
            args.extend([
                OsStr::new("--job"),
                OsStr::new("j"),
                OsStr::new("--db"),
                db,
                log,
            ]);
            let o = analyzer_within(Duration::from_secs(60), &args);
            let err = o.stderr_text();
            assert_eq!(o.status.code(), Some(2), "--db {db:?} {cmd:?}: {err}");
            assert!(err.contains(why), "--db {db:?}: {err}");
            assert!(!err.contains("added"), "--db {db:?}: {err}");
            assert!(
                files_in(o.dir.path()).is_empty(),
                "--db {db:?} left {:?} in the working directory",
                files_in(o.dir.path())
            );
        }
    }
    assert_eq!(
        files_in(dir.path()),
        ["a-directory", "fifo.sqlite"],
        "files were created beside the refused paths"
    );
    assert!(files_in(&subdir).is_empty());
    if !journal_before {
        assert!(!Path::new("/dev/zero-journal").exists());
    }

    // Reading a history that is not there: an error naming the path, and nothing created.
    let missing = dir.path().join("mistyped/history.sqlite");
    for cmd in [&["show"][..], &["check"][..]] {
        let mut args: Vec<&OsStr> = vec![OsStr::new("history")];
        args.extend(cmd.iter().map(OsStr::new));
        args.extend([OsStr::new("--job"), OsStr::new("j"), OsStr::new("--db")]);
        args.push(missing.as_os_str());
        if cmd == ["check"] {
            args.push(log);
        }
        let o = analyzer_within(Duration::from_secs(60), &args);
        let err = o.stderr_text();
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains(&format!("no history database at {}", missing.display())),
            "{cmd:?}: {err}"
        );
        assert!(!dir.path().join("mistyped").exists(), "{cmd:?} created it");
    }
    // Adding creates it, with its directory; then it reads.
    let o = analyzer_within(
        Duration::from_secs(60),
        &[
            OsStr::new("history"),
            OsStr::new("add"),
            OsStr::new("--job"),
            OsStr::new("j"),
            OsStr::new("--db"),
            missing.as_os_str(),
            log,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", o.stderr_text());
    let o = analyzer_within(
        Duration::from_secs(60),
        &[
            OsStr::new("history"),
            OsStr::new("show"),
            OsStr::new("--job"),
            OsStr::new("j"),
            OsStr::new("--db"),
            missing.as_os_str(),
        ],
    );
    assert!(
        o.stdout_text().starts_with("job j: 1 run(s)"),
        "{}",
        o.stdout_text()
    );
}

/// Accepts TCP connections on 127.0.0.1 and never answers; stops when dropped.
struct SilentServer {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SilentServer {
    fn start() -> SilentServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            for c in listener.incoming() {
                if stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                held.extend(c.ok());
            }
        });
        SilentServer {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accept so that the thread sees the flag.
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A PostgreSQL server that accepts the connection and never answers: `history add` gives up
/// after the connect timeout (10 s by default, or `--connect-timeout`), with exit status 2 and a
/// message that says so, and no password of the URL or of a key=value string is printed.
#[test]
fn history_gives_up_on_a_server_that_never_answers_and_never_prints_a_password() {
    let run = load(2);
    let log = run.single_log().to_path_buf();
    let server = SilentServer::start();
    let port = server.addr.port().to_string();
    let url = format!("postgres://ci:hunter2@127.0.0.1:{port}/waitshim");
    let key_value = format!("host=127.0.0.1 port={port} user=ci password='hunter2' dbname=w");
    let cases = [
        (url.clone(), Some("1s"), "within 1s"),
        (key_value.clone(), None, "within 10s"),
    ];
    let runs: Vec<_> = cases
        .iter()
        .map(|(db, timeout, _)| {
            let mut l = Launch::program(analyzer_path())
                .native()
                .timeout(Duration::from_secs(40))
                .args(["history", "add", "--job", "j", "--db", db]);
            if let Some(t) = timeout {
                l = l.arg("--connect-timeout").arg(t);
            }
            l.arg(&log).spawn()
        })
        .collect();
    for (r, (db, _, within)) in runs.into_iter().zip(&cases) {
        let o = r.wait();
        let err = o.stderr_text();
        assert_eq!(o.status.code(), Some(2), "{db}: {err}");
        assert!(
            err.contains(within) && err.contains("--connect-timeout"),
            "{db}: {err}"
        );
        assert!(
            !err.contains("hunter2") && err.contains("***"),
            "{db}: {err}"
        );
        assert!(files_in(o.dir.path()).is_empty(), "{db}: a file was made");
    }
    // A server that is not there: the URL and the key=value string are named, without password.
    for db in [
        "postgresql://ci:hunter2@%2Fnonexistent%2Fsocket/w".to_string(),
        "host=/nonexistent/socket user=ci password = hunter2 dbname=w".to_string(),
    ] {
        let o = analyzer_within(
            Duration::from_secs(40),
            &[
                OsStr::new("history"),
                OsStr::new("show"),
                OsStr::new("--job"),
                OsStr::new("j"),
                OsStr::new("--db"),
                OsStr::new(&db),
            ],
        );
        let err = o.stderr_text();
        assert_eq!(o.status.code(), Some(2), "{db}: {err}");
        assert!(err.contains("PostgreSQL"), "{db}: {err}");
        assert!(
            !err.contains("hunter2") && err.contains("***"),
            "{db}: {err}"
        );
        assert!(files_in(o.dir.path()).is_empty(), "{db}: a file was made");
    }
}

/// On a real server: a statement the server holds (another session keeps the lock the schema
/// migration takes) fails after `--statement-timeout` with exit status 2; an error the server
/// reports after the connection (a table gone) names the URL without its password.
#[test]
fn postgresql_statements_are_bounded_and_errors_keep_the_password_out() {
    let cluster = match Cluster::start() {
        Ok(c) => c,
        Err(e) => {
            waitshim_tests::skip_or_fail(
                "postgresql_statements_are_bounded_and_errors_keep_the_password_out",
                &format!("no PostgreSQL server could be started: {e}"),
            );
            return;
        }
    };
    let url = cluster.url().replace("postgres@", "postgres:hunter2@");
    let show = |extra: &[&str]| {
        let mut args = vec!["history", "show", "--job", "j", "--db", &url];
        args.extend_from_slice(extra);
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        analyzer_within(Duration::from_secs(40), &args)
    };
    let o = show(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", o.stderr_text());

    let mut psql = cluster
        .psql()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql");
    let mut stdin = psql.stdin.take().unwrap();
    let mut lines = BufReader::new(psql.stdout.take().unwrap()).lines();
    use std::io::Write as _;
    writeln!(stdin, "SELECT 'locked' FROM pg_advisory_lock(7316501016);").unwrap();
    let first = lines.next().and_then(Result::ok);
    if first.as_deref() != Some("locked") {
        let mut why = String::new();
        let _ = std::io::Read::read_to_string(&mut psql.stderr.take().unwrap(), &mut why);
        panic!("psql did not take the lock: {first:?} {why}");
    }
    let o = show(&["--statement-timeout", "1s"]);
    let err = o.stderr_text();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("PostgreSQL")
            && (err.contains("statement timeout") || err.contains("--statement-timeout")),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");

    writeln!(stdin, "ALTER TABLE metrics RENAME TO metrics_gone;").unwrap();
    drop(stdin);
    assert!(psql.wait().unwrap().success());
    let o = show(&[]);
    let err = o.stderr_text();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("metrics") && err.contains("postgres:***@"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

/// Whether process `pid` has ended (gone, or a zombie no one reaped yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .is_some_and(|i| stat[i + 1..].trim_start().starts_with(['Z', 'X'])),
    }
}

/// Waits (at most `POLL_DEADLINE`) for process `pid` to end; if it does not, ends it and fails
/// the test.
fn assert_ends(pid: u32, what: &str) {
    let deadline = Instant::now() + POLL_DEADLINE;
    while !ended(pid) {
        if Instant::now() >= deadline {
            // SAFETY: kill(2) on the process this test's command started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{what}: process {pid} still runs");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `run --timeout` stops every process of the command, not only the first: a child left in
/// the background ends with it, and one that ignores SIGTERM gets SIGKILL 5 s later.
#[test]
fn run_timeout_stops_the_commands_children_too() {
    for (script, status, said) in [
        (
            "sleep 60 >/dev/null 2>&1 & echo $!; wait",
            "killed by SIGTERM (status 143)",
            "sending SIGTERM",
        ),
        (
            "trap '' TERM; sleep 60 >/dev/null 2>&1 & echo $!; wait",
            "killed by SIGKILL (status 137)",
            "sending SIGKILL",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let o = Launch::program(analyzer_path())
            .native()
            .timeout(Duration::from_secs(60))
            .env("TMPDIR", dir.path())
            .args(["run", "--no-report", "--timeout", "300ms", "--", "sh", "-c"])
            .arg(script)
            .run();
        let (out, err) = (o.stdout_text(), o.stderr_text());
        let child: u32 = out.lines().next().and_then(|l| l.parse().ok()).expect(&out);
        assert_ends(child, script);
        assert_eq!(o.status.code(), Some(3), "{script}: {err}");
        assert!(err.contains(status), "{script}: {err}");
        assert!(err.contains(said), "{script}: {err}");
    }
}

/// SIGTERM, SIGINT or SIGHUP sent to `run` (a CI runner cancelling the job) reaches the
/// command and its children; `run` waits for them, reports on what they logged, and exits
/// with the command's status.
#[test]
fn a_signal_to_run_reaches_the_command_and_the_report_still_comes() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let dir = tempfile::tempdir().unwrap();
        let mut run = Command::new(analyzer_path())
            .env("TMPDIR", dir.path())
            .args(["run", "--", "sh", "-c"])
            // The child prints its pid (the ready line), then becomes the sleep.
            .arg(r#"sh -c 'echo $$; exec sleep 60 >/dev/null 2>&1'; echo not reached"#)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(run.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let child: u32 = line.trim().parse().expect(&line);
        // SAFETY: kill(2) on the analyzer this test started.
        unsafe { libc::kill(run.id() as libc::pid_t, sig) };
        let deadline = Instant::now() + Duration::from_secs(40);
        let status = loop {
            if let Some(s) = run.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = run.kill();
                let _ = run.wait();
                panic!("signal {sig}: run did not end");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_ends(child, "the command's child");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(3), "signal {sig}: {err}");
        assert!(
            err.contains(&format!("(status {})", 128 + sig)),
            "signal {sig}: {err}"
        );
        assert!(err.contains("received: passed on"), "signal {sig}: {err}");
        assert!(!rest.lines().any(|l| l == "not reached"), "{rest}");
        assert!(
            rest.contains("waitshim summary: ") || rest.contains("waitshim report: "),
            "signal {sig}: {rest}\n{err}"
        );
    }
}

/// Logs already in `--log-dir` (an earlier run's, here one with a lock-order inversion) are
/// not this run's: `run --check -- true` passes, and they are left where they were.
#[test]
fn run_leaves_out_the_logs_already_in_its_log_directory() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let earlier = Command::new(analyzer_path())
        .args(["run", "--no-report", "--log-dir"])
        .arg(&logs)
        .arg("--")
        .arg(fixture("lock_inversion"))
        .output()
        .unwrap();
    assert_eq!(code(&earlier), 0, "{:?}", text(&earlier));
    let before = files_in(&logs);
    assert_eq!(before.len(), 1, "{before:?}");
    let o = Command::new(analyzer_path())
        .args(["run", "--check", "--log-dir"])
        .arg(&logs)
        .args(["--", "true"])
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(code(&o), 0, "{out}\n{err}");
    assert!(err.contains("1 log(s) in"), "{err}");
    assert!(err.contains("1 log(s) that were in"), "{err}");
    assert!(!out.contains("lock_inversion"), "{out}");
    let after = files_in(&logs);
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.contains(&before[0]), "{after:?}");
}

/// The analyzer ignores SIGXFSZ for its own writes; the command `run` starts gets it back: a
/// write past `ulimit -f` kills it as it does natively.
#[test]
fn run_gives_the_command_the_file_size_signal_it_had() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"ulimit -f 1 && exec head -c 65536 /dev/zero > "$0""#;
    let native = Command::new("sh")
        .args(["-c", script])
        .arg(dir.path().join("native"))
        .status()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(native.signal(), Some(libc::SIGXFSZ), "{native:?}");
    let o = Command::new(analyzer_path())
        .env("TMPDIR", dir.path())
        .args(["run", "--no-report", "--", "sh", "-c", script])
        .arg(dir.path().join("profiled"))
        .output()
        .unwrap();
    // The shim could not grow its log either: no log, so the tool could not judge (2); the
    // command's death is said.
    assert_eq!(code(&o), 2, "{:?}", text(&o));
    assert!(
        text(&o).1.contains(&format!(
            "was killed by SIGXFSZ (status {})",
            128 + libc::SIGXFSZ
        )),
        "{:?}",
        text(&o)
    );
}

/// `waitshim-analyze ARGS...` with its temporary directory (for run's logs) in `tmp`.
fn analyzer_in(tmp: &Path, env: &[(&str, &str)], args: &[&OsStr]) -> Output {
    Command::new(analyzer_path())
        .env("TMPDIR", tmp)
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run waitshim-analyze")
}

fn os<'a>(args: &[&'a str]) -> Vec<&'a OsStr> {
    args.iter().map(|a| OsStr::new(*a)).collect()
}

/// A CI job tells "the tests failed" (3), "the gate failed" (1), both (4) and "the tool could
/// not judge" (2) apart by the exit status alone; the command's own status is said on stderr
/// and in the JSON document, and `--help` lists the codes.
#[test]
fn run_exit_codes_tell_the_tests_the_gate_and_the_tool_apart() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let inversion = fixture("lock_inversion");
    let inv = inversion.as_os_str();
    // The tests fail with 1 or 2, the gate passes: 3, whatever the command's status.
    for status in ["1", "2"] {
        let script = format!("exit {status}");
        let o = analyzer_in(
            tmp,
            &[],
            &os(&["run", "--check", "--", "sh", "-c", &script]),
        );
        let (_, err) = text(&o);
        assert_eq!(code(&o), 3, "exit {status}: {err}");
        assert!(
            err.contains(&format!("the command ended with status {status}"))
                && err.contains("exit 3 (the command failed)"),
            "{err}"
        );
    }
    // The tests pass, the gate fails (a lock-order inversion): 1.
    let mut args = os(&["run", "--check", "--no-report", "--"]);
    args.push(inv);
    let o = analyzer_in(tmp, &[], &args);
    assert_eq!(code(&o), 1, "{:?}", text(&o));
    // Both: 4.
    let mut args = os(&[
        "run",
        "--check",
        "--no-report",
        "--",
        "sh",
        "-c",
        "\"$0\"; exit 1",
    ]);
    args.push(inv);
    let o = analyzer_in(tmp, &[], &args);
    assert_eq!(code(&o), 4, "{:?}", text(&o));
    assert!(
        text(&o).1.contains("the command and the gate failed"),
        "{:?}",
        text(&o)
    );
    // The tool could not judge: no log written (the shim disabled), a baseline that cannot be
    // read, no shim. The command succeeded each time.
    let o = analyzer_in(
        tmp,
        &[("WAITSHIM_DISABLE", "1")],
        &os(&["run", "--check", "--", "true"]),
    );
    assert_eq!(code(&o), 2, "{:?}", text(&o));
    assert!(text(&o).1.contains("no log was written"), "{:?}", text(&o));
    let o = analyzer_in(
        tmp,
        &[],
        &os(&[
            "run",
            "--check",
            "--baseline",
            "/nonexistent.json",
            "--",
            "true",
        ]),
    );
    assert_eq!(code(&o), 2, "{:?}", text(&o));
    let o = analyzer_in(
        tmp,
        &[],
        &os(&["run", "--shim", "/nonexistent.so", "--", "true"]),
    );
    assert_eq!(code(&o), 2, "{:?}", text(&o));

    // --json: stdout is the document alone, with the command's status; its output on stderr.
    let o = analyzer_in(
        tmp,
        &[],
        &os(&[
            "run",
            "--json",
            "--",
            "sh",
            "-c",
            "echo tests say hello; exit 7",
        ]),
    );
    let (out, err) = text(&o);
    assert_eq!(code(&o), 3, "{err}");
    let doc: Value = serde_json::from_str(&out).expect("run --json is one JSON document");
    assert_eq!(doc["schema"], "waitshim-run/1");
    assert_eq!(doc["command"]["status"], 7);
    assert_eq!(doc["command"]["exit_code"], 7);
    assert_eq!(doc["command"]["failed"], true);
    assert_eq!(doc["exit_code"], 3);
    assert_eq!(doc["outcome"], "the command failed");
    assert_eq!(doc["gate"]["result"], "not checked");
    assert!(err.contains("tests say hello"), "{err}");

    // The codes are documented where a user looks: --help, run --help, check --help, and the
    // docs/ci.md's table, each code with its outcome.
    let help = text(&analyzer(&["--help"], &[])).0;
    assert!(
        help.contains("0 passed; 1 the gate failed; 2 the tool could not judge")
            && help.contains("3 the command given to run failed")
            && help.contains("4 the command and the gate failed"),
        "{help}"
    );
    let help = text(&analyzer(&["run", "--help"], &[])).0;
    for want in [
        "0 passed",
        "1 the gate failed",
        "2 the tool could not judge",
        "3 CMD failed",
        "4 CMD and the gate failed",
    ] {
        assert!(help.contains(want), "run --help lacks {want:?}: {help}");
    }
    let help = text(&analyzer(&["check", "--help"], &[])).0;
    assert!(
        help.contains("exit 0 when it passes, 1 when it fails")
            && help.contains("2 when it cannot be judged"),
        "{help}"
    );
    let readme =
        std::fs::read_to_string(waitshim_tests::workspace_root().join("docs/ci.md")).unwrap();
    let table: Vec<(String, String)> = readme
        .split_once("Exit statuses of `check`, `history check` and `run`")
        .expect("docs/ci.md's table of exit statuses")
        .1
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let code = cells.first()?.trim_matches('*');
            code.parse::<u8>()
                .ok()
                .map(|_| (code.to_string(), cells[1..].join("|")))
        })
        .collect();
    let codes: Vec<&str> = table.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(codes, ["0", "1", "2", "3", "4"], "{table:?}");
    for (code, words) in [
        ("0", "passed"),
        ("1", "the gate failed"),
        ("2", "the tool could not judge"),
        ("3", "CMD failed"),
        ("4", "CMD failed and the gate failed"),
    ] {
        let said = &table.iter().find(|(c, _)| c == code).unwrap().1;
        assert!(said.contains(words), "docs/ci.md, status {code}: {said}");
    }
}

/// A selector that names no object in any log is an error, not a 0 that makes the condition
/// pass; a figure of the whole run names no object in its FAIL line.
#[test]
fn a_selector_that_matches_nothing_is_refused_and_run_figures_name_no_object() {
    let clean = Launch::fixture("convoy").arg("3").run();
    clean.assert_success();
    let log = clean.single_log();
    for expr in [
        "hwm(\"nonexistent\") > 0",
        "hwm > 100 || wait_total(\"convoy.c:9999\") > 1ns",
        "!(waits(\"convoy_lokc\") == 0)",
    ] {
        let o = check(&["--fail-if", expr], log);
        let (out, err) = text(&o);
        assert_eq!(code(&o), 2, "{expr}: {out}{err}");
        assert!(err.contains("matches no object"), "{expr}: {err}");
        assert!(err.contains("not judged"), "{expr}: {err}");
    }
    // The same selector spelt right.
    let o = check(&["--fail-if", "waits(\"convoy_lock\") == 0"], log);
    assert_eq!(code(&o), 0, "{:?}", text(&o));

    for expr in ["duration > 1ms", "threads > 1"] {
        let o = check(&["--fail-if", expr], log);
        let (out, _) = text(&o);
        assert_eq!(code(&o), 1, "{expr}: {out}");
        assert!(
            !out.contains("about") && !out.contains("mutex#") && !out.contains("convoy_lock"),
            "{expr}: a figure of the whole run names an object: {out}"
        );
    }
    // A run-wide lock figure says which lock made most of it, and is anchored there.
    let o = check(&["--fail-if", "wait_total > 1ms"], log);
    let (out, _) = text(&o);
    assert_eq!(code(&o), 1, "{out}");
    assert!(
        out.contains("the lock waited for most: mutex#")
            && out.contains(&format!(
                "convoy.c:{}]",
                line_of("convoy.c", "creation-site")
            )),
        "{out}"
    );
}

/// A test suite under `run`: 20 runs of a program from a shell loop give one summary (the
/// program's 20 processes summed), not a report per process; `--each` and `--report-dir` give
/// those; `-o` sends the report to a file; `--json` stays one document though the tests print.
#[test]
fn a_test_suite_under_run_gets_one_summary_and_per_process_reports_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let convoy = fixture("convoy");
    let suite = |n: u32| -> Vec<OsString> {
        vec![
            "sh".into(),
            "-c".into(),
            format!("for i in $(seq {n}); do \"$0\" 2; done").into(),
            convoy.clone().into_os_string(),
        ]
    };
    let row = |summary: &str, program: &str| -> Vec<String> {
        summary
            .lines()
            .find(|l| l.split_whitespace().next() == Some(program))
            .unwrap_or_else(|| panic!("no row for {program}:\n{summary}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };

    let mut args: Vec<OsString> = vec!["run".into(), "--".into()];
    args.extend(suite(20));
    let o = Command::new(analyzer_path())
        .env("TMPDIR", tmp)
        .args(&args)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(code(&o), 0, "{err}");
    assert_eq!(out.matches("convoy: 2 threads done").count(), 20, "{out}");
    assert_eq!(out.matches("waitshim summary: ").count(), 1, "{out}");
    assert_eq!(out.matches("waitshim report: ").count(), 0, "{out}");
    // PROGRAM PROCESSES HWM LOCK-WAIT(2 words) DEADLOCKS INVERSIONS GATE
    let convoy_row = row(&out, "convoy");
    assert_eq!(convoy_row[1], "20", "{out}");
    assert_eq!(convoy_row[2], "1", "{out}");
    assert_eq!(
        convoy_row.last().map(String::as_str),
        Some("checked"),
        "{out}"
    );
    let site = format!(
        "mutex convoy.c:{} (main)",
        line_of("convoy.c", "creation-site")
    );
    assert!(
        out.contains(&format!("{site}: ")) && out.contains("in 20 process(es)"),
        "{out}"
    );
    assert!(out.contains("run --each"), "{out}");

    // --each, --report-dir and -o: the command's output alone on stdout.
    let reports = tmp.join("reports");
    let file = tmp.join("waitshim-report.txt");
    let mut args: Vec<OsString> = vec![
        "run".into(),
        "--check".into(),
        "--each".into(),
        "--report-dir".into(),
        reports.clone().into(),
        "-o".into(),
        file.clone().into(),
        "--".into(),
    ];
    args.extend(suite(3));
    let o = Command::new(analyzer_path())
        .env("TMPDIR", tmp)
        .args(&args)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(code(&o), 0, "{err}");
    assert_eq!(out, "convoy: 2 threads done\n".repeat(3), "{err}");
    let written = std::fs::read_to_string(&file).unwrap();
    // A report per log: the shell's, and the three programs' (with the processes the shell
    // forked to start them, which exec'd).
    let logs = files_in(&reports).len();
    assert!(logs >= 4, "{:?}", files_in(&reports));
    assert!(written.starts_with("waitshim summary: "), "{written}");
    assert_eq!(
        written.matches("waitshim report: ").count(),
        logs,
        "{written}"
    );
    assert_eq!(row(&written, "convoy")[1], "3", "{written}");
    assert_eq!(
        row(&written, "convoy").last().map(String::as_str),
        Some("passed")
    );
    for name in files_in(&reports) {
        assert!(
            name.starts_with("waitshim.") && name.ends_with(".txt"),
            "{name}"
        );
        let r = std::fs::read_to_string(reports.join(&name)).unwrap();
        assert!(r.starts_with("waitshim report: "), "{name}: {r}");
    }

    // --json with tests that print: valid JSON, the summary per program, every log's report.
    let mut args: Vec<OsString> = vec!["run".into(), "--json".into(), "--".into()];
    args.extend(suite(3));
    let o = Command::new(analyzer_path())
        .env("TMPDIR", tmp)
        .args(&args)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(code(&o), 0, "{err}");
    let doc: Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(err.matches("convoy: 2 threads done").count(), 3, "{err}");
    let programs = doc["programs"].as_array().unwrap();
    let c = programs
        .iter()
        .find(|p| p["program"] == "convoy")
        .expect("convoy summed");
    assert_eq!(c["processes"], 3);
    assert_eq!(c["worst"][0]["object"], site.as_str());
    assert_eq!(
        doc["report"]["logs"].as_array().map(Vec::len),
        doc["logs"].as_array().map(Vec::len)
    );
}
