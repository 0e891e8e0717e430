//! What CI systems read: JUnit XML, SARIF 2.1.0 and GitHub's job summary, checked against the
//! schemas their publishers ship; and the CI recipes of docs/ci.md, run as GitHub-style and
//! GitLab-style runners would run them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use waitshim_tests::{
    analyzer_path, fixture, junit_validation, line_of, sarif_validation, shim_path, validate_junit,
    validate_sarif, workspace_root,
};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The rows of each markdown table in `md`: every row must have as many cells as its header.
fn tables(md: &str) -> Vec<Vec<Vec<String>>> {
    let mut out: Vec<Vec<Vec<String>>> = Vec::new();
    let mut in_table = false;
    for line in md.lines() {
        if line.starts_with('|') {
            // Split on pipes that are not escaped.
            let mut cells = Vec::new();
            let mut cur = String::new();
            let mut esc = false;
            for c in line.trim().trim_start_matches('|').chars() {
                match c {
                    '\\' if !esc => esc = true,
                    '|' if !esc => cells.push(std::mem::take(&mut cur).trim().to_string()),
                    c => {
                        if esc && c != '|' {
                            cur.push('\\');
                        }
                        esc = false;
                        cur.push(c);
                    }
                }
            }
            if !in_table {
                out.push(Vec::new());
                in_table = true;
            }
            out.last_mut().unwrap().push(cells);
        } else {
            in_table = false;
        }
    }
    out
}

/// A run with a contended lock and a lock-order inversion, gated: the JUnit report validates
/// against both versions of Jenkins' `junit-10.xsd` and has a test case per rule and per
/// process; the SARIF log validates against SARIF 2.1.0 and places its findings at the
/// creation and wait lines; the job summary is markdown whose tables hold together. A gate that
/// cannot be judged is a JUnit error, and still a valid file.
#[test]
fn junit_sarif_and_the_job_summary_validate_and_point_at_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let (junit, sarif, md) = (
        dir.path().join("waitshim.xml"),
        dir.path().join("waitshim.sarif"),
        dir.path().join("summary.md"),
    );
    let o = Command::new(analyzer_path())
        .current_dir(workspace_root())
        .env("TMPDIR", dir.path())
        .env("GITHUB_STEP_SUMMARY", &md)
        .env_remove("GITHUB_WORKSPACE")
        .env_remove("CI_PROJECT_DIR")
        .args(["run", "--check", "--no-report", "--junit"])
        .arg(&junit)
        .arg("--sarif")
        .arg(&sarif)
        .args(["--", "sh", "-c", "\"$0\" 3 && \"$1\""])
        .arg(fixture("convoy"))
        .arg(fixture("lock_inversion"))
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");

    validate_junit(&junit);
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("JUnit XML parses");
    let suites: Vec<roxmltree::Node> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testsuite"))
        .collect();
    let names: Vec<&str> = suites.iter().filter_map(|s| s.attribute("name")).collect();
    assert_eq!(names, ["waitshim gate", "waitshim processes"], "{xml}");
    let cases = |suite: &roxmltree::Node| -> Vec<(String, bool)> {
        suite
            .children()
            .filter(|n| n.has_tag_name("testcase"))
            .map(|c| {
                (
                    c.attribute("name").unwrap_or("").to_string(),
                    c.children().any(|n| n.has_tag_name("failure")),
                )
            })
            .collect()
    };
    let gate = cases(&suites[0]);
    assert!(
        gate[0].0.starts_with("command sh -c") && !gate[0].1,
        "{xml}"
    );
    assert_eq!(
        gate[1..],
        [
            ("no deadlock".to_string(), false),
            ("no lock-order inversion".to_string(), true)
        ],
        "{xml}"
    );
    let procs = cases(&suites[1]);
    assert!(procs.len() >= 3, "a test case per process: {xml}");
    let failing: Vec<&str> = procs
        .iter()
        .filter(|(_, f)| *f)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(failing.len(), 1, "{xml}");
    assert!(failing[0].starts_with("lock_inversion pid "), "{xml}");
    assert!(
        procs
            .iter()
            .any(|(n, f)| n.starts_with("convoy pid ") && !f),
        "{xml}"
    );

    validate_sarif(&sarif);
    let log: Value = serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    assert_eq!(log["version"], "2.1.0");
    let run = &log["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "waitshim");
    let results = run["results"].as_array().unwrap();
    let at = |r: &Value, key: &str| -> (String, u64) {
        let l = &r[key][0]["physicalLocation"];
        (
            l["artifactLocation"]["uri"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            l["region"]["startLine"].as_u64().unwrap_or(0),
        )
    };
    let inversion = results
        .iter()
        .find(|r| r["ruleId"] == "inversion")
        .unwrap_or_else(|| panic!("no inversion result: {log}"));
    assert_eq!(inversion["level"], "error");
    let (uri, line) = at(inversion, "locations");
    assert_eq!(uri, "fixtures/lock_inversion.c", "{inversion}");
    assert!(
        [
            line_of("lock_inversion.c", "forward-outer"),
            line_of("lock_inversion.c", "forward-inner")
        ]
        .contains(&(line as u32)),
        "{inversion}"
    );
    assert_eq!(
        inversion["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"],
        "%SRCROOT%"
    );
    let contention = results
        .iter()
        .find(|r| r["ruleId"] == "contention")
        .unwrap_or_else(|| panic!("no contention note: {log}"));
    assert_eq!(contention["level"], "note");
    assert_eq!(
        at(contention, "locations"),
        (
            "fixtures/convoy.c".to_string(),
            u64::from(line_of("convoy.c", "creation-site"))
        ),
        "{contention}"
    );
    assert_eq!(
        at(contention, "relatedLocations"),
        (
            "fixtures/convoy.c".to_string(),
            u64::from(line_of("convoy.c", "lock-site"))
        ),
        "{contention}"
    );

    let summary = std::fs::read_to_string(&md).unwrap();
    assert!(
        summary.starts_with("### waitshim: the gate failed (exit 1)"),
        "{summary}"
    );
    let t = tables(&summary);
    assert_eq!(t.len(), 2, "{summary}");
    for table in &t {
        assert!(table.len() >= 3, "{summary}");
        assert!(table[1]
            .iter()
            .all(|c| c.trim_matches(':').chars().all(|ch| ch == '-')));
        for row in table {
            assert_eq!(row.len(), table[0].len(), "{summary}");
        }
    }
    let inv_row = t[0]
        .iter()
        .find(|r| r[0] == "lock_inversion")
        .unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(inv_row.last().map(String::as_str), Some("failed"));
    assert!(
        summary.contains(&format!(
            "`fixtures/lock_inversion.c:{}`",
            line_of("lock_inversion.c", "forward-inner")
        )) || summary.contains(&format!(
            "`fixtures/lock_inversion.c:{}`",
            line_of("lock_inversion.c", "forward-outer")
        )),
        "{summary}"
    );

    // Not judged: a selector that matches nothing. Exit 2, a JUnit error, a valid file.
    let logs = dir.path().join("logs");
    let o = Command::new(analyzer_path())
        .args(["run", "--no-report", "--log-dir"])
        .arg(&logs)
        .arg("--")
        .arg(fixture("convoy"))
        .arg("2")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let log_file = std::fs::read_dir(&logs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let o = Command::new(analyzer_path())
        .args(["check", "--fail-if", "hwm(\"convoy_lokc\") > 1", "--junit"])
        .arg(&junit)
        .arg("--sarif")
        .arg(&sarif)
        .arg(&log_file)
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{:?}", text(&o));
    validate_junit(&junit);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<error type=\"not-judged\"") && xml.contains("matches no object"),
        "{xml}"
    );
    validate_sarif(&sarif);
    let log: Value = serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    let inv = &log["runs"][0]["invocations"][0];
    assert_eq!(inv["executionSuccessful"], false, "{log}");
    assert_eq!(inv["exitCode"], 2, "{log}");
}

/// The validators are real: the files `check` writes validate, and the same files, broken as
/// a careless writer would break them, do not (a SARIF result without its message or with a
/// level SARIF does not know; a JUnit test case without a name, a suite without the failure
/// count Surefire's schema requires).
#[test]
fn the_schemas_refuse_what_ci_systems_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let o = Command::new(analyzer_path())
        .args(["run", "--no-report", "--log-dir"])
        .arg(&logs)
        .arg("--")
        .arg(fixture("convoy"))
        .arg("3")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let log = std::fs::read_dir(&logs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let (junit, sarif) = (dir.path().join("w.xml"), dir.path().join("w.sarif"));
    let o = Command::new(analyzer_path())
        .current_dir(workspace_root())
        .env_remove("GITHUB_STEP_SUMMARY")
        .args(["check", "--fail-if", "hwm > 1", "--junit"])
        .arg(&junit)
        .arg("--sarif")
        .arg(&sarif)
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    junit_validation(&junit).unwrap();
    sarif_validation(&sarif).unwrap();

    let original: Value = serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    // A result placed in the source (the gate's failure, at the object that set the mark).
    let i = original["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .position(|r| r["locations"][0]["physicalLocation"]["region"]["startLine"].is_u64())
        .unwrap_or_else(|| panic!("no result with a place: {original}"));
    let broken = dir.path().join("broken.sarif");
    for (what, edit) in [
        (
            "a result without its message",
            Box::new(|r: &mut Value| {
                r.as_object_mut().unwrap().remove("message");
            }) as Box<dyn Fn(&mut Value)>,
        ),
        (
            "a level SARIF does not know",
            Box::new(|r: &mut Value| r["level"] = "fatal".into()),
        ),
        (
            "a start line of 0",
            Box::new(|r: &mut Value| {
                r["locations"][0]["physicalLocation"]["region"]["startLine"] = 0.into()
            }),
        ),
    ] {
        let mut doc = original.clone();
        edit(&mut doc["runs"][0]["results"][i]);
        std::fs::write(&broken, doc.to_string()).unwrap();
        let e = sarif_validation(&broken).expect_err(what);
        assert!(e.contains(&format!("runs/0/results/{i}")), "{what}: {e}");
    }

    let xml = std::fs::read_to_string(&junit).unwrap();
    let broken = dir.path().join("broken.xml");
    let nameless = xml.replacen("<testcase name=", "<testcase label=", 1);
    assert_ne!(nameless, xml, "{xml}");
    std::fs::write(&broken, &nameless).unwrap();
    let e = junit_validation(&broken).expect_err("a test case without a name");
    assert!(e.contains("junit-10-lenient.xsd"), "{e}");
    // The first suite's failure count taken out: the lenient schema lets it be, Surefire's not.
    let suite = xml.find("<testsuite name=").expect("a suite");
    let from = suite + xml[suite..].find(" failures=\"").expect("a failure count");
    let to =
        from + " failures=\"".len() + xml[from + " failures=\"".len()..].find('"').unwrap() + 1;
    let uncounted = format!("{}{}", &xml[..from], &xml[to..]);
    std::fs::write(&broken, &uncounted).unwrap();
    let e = junit_validation(&broken).expect_err("a suite without its failure count");
    assert!(e.contains("junit-10.xsd") && e.contains("failures"), "{e}");
}

/// A checkout as a CI runner has it before the job's steps: the code under test (built with
/// `-g`), its `run-tests.sh`, a committed baseline, and waitshim under `target/release/`.
struct Checkout {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    /// Stand-ins for `cargo` and `make`: the checkout is built already.
    stubs: PathBuf,
    tmp: PathBuf,
}

/// A program whose threads never wait: a gate with `lost_parallelism > 30%` passes on it.
const QUIET_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
static long counter;
int main(void)
{
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&counter_lock);
        counter++;
        pthread_mutex_unlock(&counter_lock);
    }
    printf("quiet: %ld\n", counter);
    return 0;
}
"#;

fn write_exe(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

fn run_ok(cmd: &mut Command) -> Output {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?}: {:?}", text(&o));
    o
}

/// `tests`: the lines of `run-tests.sh`, over the programs `build/convoy`,
/// `build/lock_inversion` and `build/quiet`.
fn checkout(tests: &str) -> Checkout {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let src = ws.join("src");
    let build = ws.join("build");
    let tmp = dir.path().join("tmp");
    let stubs = dir.path().join("stubs");
    for d in [&src, &build, &tmp, &stubs, &ws.join("target/release")] {
        std::fs::create_dir_all(d).unwrap();
    }
    let fixtures = workspace_root().join("fixtures");
    for f in ["convoy.c", "lock_inversion.c", "blocked.h"] {
        std::fs::copy(fixtures.join(f), src.join(f)).unwrap();
    }
    std::fs::write(src.join("quiet.c"), QUIET_C).unwrap();
    for name in ["convoy", "lock_inversion", "quiet"] {
        run_ok(
            Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
                .current_dir(&ws)
                .args(["-O1", "-g", "-pthread", "-o"])
                .arg(format!("build/{name}"))
                .arg(format!("src/{name}.c")),
        );
    }
    std::os::unix::fs::symlink(analyzer_path(), ws.join("target/release/waitshim-analyze"))
        .unwrap();
    std::os::unix::fs::symlink(shim_path(), ws.join("target/release/libwaitshim.so")).unwrap();
    write_exe(
        &ws.join("run-tests.sh"),
        &format!("#!/bin/sh\nset -e\n{tests}\n"),
    );
    // The committed baseline: of a clean run of the contended program.
    let base_logs = tmp.join("baseline-logs");
    run_ok(
        Command::new(analyzer_path())
            .current_dir(&ws)
            .args(["run", "--no-report", "--log-dir"])
            .arg(&base_logs)
            .args(["--", "./build/convoy", "2"]),
    );
    let logs: Vec<PathBuf> = std::fs::read_dir(&base_logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    run_ok(
        Command::new(analyzer_path())
            .current_dir(&ws)
            .args(["baseline", "-o", "waitshim-baseline.json"])
            .args(&logs),
    );
    for tool in ["cargo", "make"] {
        write_exe(
            &stubs.join(tool),
            "#!/bin/sh\necho \"(simulated runner: '$(basename \"$0\") $*' built the checkout already)\"\n",
        );
    }
    Checkout {
        _dir: dir,
        ws,
        stubs,
        tmp,
    }
}

/// The YAML block of docs/ci.md (the CI guide the README leads to) that follows the paragraph
/// starting with `intro`.
fn readme_recipe(intro: &str) -> serde_yaml::Value {
    let readme = std::fs::read_to_string(workspace_root().join("docs/ci.md")).unwrap();
    let at = readme
        .find(intro)
        .unwrap_or_else(|| panic!("docs/ci.md has no {intro:?}"));
    let rest = &readme[at..];
    let start = rest.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let len = rest[start..].find("```").expect("the block's end");
    serde_yaml::from_str(&rest[start..start + len])
        .unwrap_or_else(|e| panic!("docs/ci.md's {intro:?} recipe is not YAML: {e}"))
}

/// The environment of a job: the machine's, less what a runner would not have (the shim's
/// settings, another CI system's variables), with the stubs first in PATH.
fn job_command(co: &Checkout, program: &str) -> Command {
    let mut c = Command::new(program);
    c.current_dir(&co.ws).env("TMPDIR", &co.tmp).env(
        "PATH",
        format!(
            "{}:{}",
            co.stubs.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    );
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("WAITSHIM_")
            || k.starts_with("GITHUB_")
            || k.starts_with("RUNNER_")
            || k.starts_with("CI_")
            || k == "GITLAB_CI"
            || k == "LD_PRELOAD"
        {
            c.env_remove(&k);
        }
    }
    c.env("CI", "true");
    c
}

/// One step of a simulated GitHub Actions job.
struct Step {
    name: String,
    ran: bool,
    code: i32,
    stdout: String,
    stderr: String,
    summary: String,
}

impl Step {
    /// The `::error` workflow commands the runner reads from the step's output (stdout and
    /// stderr both reach it).
    fn annotations(&self) -> Vec<&str> {
        self.stdout
            .lines()
            .chain(self.stderr.lines())
            .filter(|l| l.starts_with("::error"))
            .collect()
    }
}

/// Runs the job's steps as GitHub's runner does on Linux: each `run:` with `bash --noprofile
/// --norc -eo pipefail`, in the checkout, with the variables the runner sets (a step summary
/// file of its own); a failed step skips the later ones but those with `if: always()`. Of the
/// `uses:` actions, checkout and cache have nothing to do here; upload-sarif and
/// upload-artifact check that what they would upload is there (and the SARIF log valid).
fn run_github_job(co: &Checkout, job: &serde_yaml::Value) -> Vec<Step> {
    let runner_temp = co.tmp.join("runner");
    std::fs::create_dir_all(&runner_temp).unwrap();
    let mut failed = false;
    let mut out = Vec::new();
    let steps = job["steps"].as_sequence().expect("steps");
    for (i, step) in steps.iter().enumerate() {
        let name = step["name"]
            .as_str()
            .or_else(|| step["run"].as_str())
            .or_else(|| step["uses"].as_str())
            .unwrap_or("?")
            .to_string();
        let always = step["if"].as_str() == Some("always()");
        if let Some(cond) = step["if"].as_str() {
            assert_eq!(
                cond, "always()",
                "{name}: a condition this runner does not know"
            );
        }
        if failed && !always {
            out.push(Step {
                name,
                ran: false,
                code: 0,
                stdout: String::new(),
                stderr: String::new(),
                summary: String::new(),
            });
            continue;
        }
        let (code, stdout, stderr, summary) = if let Some(script) = step["run"].as_str() {
            assert!(!script.contains("${{"), "{name}: expressions in a script");
            let file = runner_temp.join(format!("step-{i}.sh"));
            std::fs::write(&file, script).unwrap();
            let summary = runner_temp.join(format!("step-{i}-summary.md"));
            std::fs::write(&summary, "").unwrap();
            let o = job_command(co, "bash")
                .args(["--noprofile", "--norc", "-eo", "pipefail"])
                .arg(&file)
                .env("GITHUB_ACTIONS", "true")
                .env("GITHUB_WORKSPACE", &co.ws)
                .env("GITHUB_STEP_SUMMARY", &summary)
                .env("GITHUB_REF_NAME", "main")
                .env("GITHUB_RUN_ID", "1")
                .env("RUNNER_TEMP", &runner_temp)
                .output()
                .unwrap();
            let (so, se) = text(&o);
            (
                o.status.code().unwrap_or(-1),
                so,
                se,
                std::fs::read_to_string(&summary).unwrap(),
            )
        } else {
            let uses = step["uses"].as_str().expect("run or uses");
            let with = &step["with"];
            if uses.starts_with("actions/checkout@") || uses.starts_with("actions/cache@") {
                // The checkout is laid out; a cache starts empty.
            } else if uses.starts_with("github/codeql-action/upload-sarif@") {
                let f = co.ws.join(with["sarif_file"].as_str().expect("sarif_file"));
                assert!(f.is_file(), "{name}: no {}", f.display());
                validate_sarif(&f);
            } else if uses.starts_with("actions/upload-artifact@") {
                for p in with["path"].as_str().expect("path").lines() {
                    let p = p.trim();
                    assert!(
                        p.is_empty() || co.ws.join(p).exists(),
                        "{name}: nothing to upload at {p}"
                    );
                }
            } else {
                panic!("{name}: an action this runner does not know: {uses}");
            }
            (0, String::new(), String::new(), String::new())
        };
        failed |= code != 0;
        out.push(Step {
            name,
            ran: true,
            code,
            stdout,
            stderr,
            summary,
        });
    }
    out
}

/// The GitLab job's `script`, run as GitLab's runner runs it with the bash shell: one script,
/// `set -eo pipefail`, in the project directory, with its CI variables. Status, stdout, stderr.
fn run_gitlab_job(co: &Checkout, job: &serde_yaml::Value) -> (i32, String, String) {
    let lines: Vec<&str> = job["script"]
        .as_sequence()
        .expect("script")
        .iter()
        .map(|l| l.as_str().expect("a script line"))
        .collect();
    let file = co.tmp.join("gitlab-job.sh");
    std::fs::write(&file, format!("set -eo pipefail\n{}\n", lines.join("\n"))).unwrap();
    let o = job_command(co, "bash")
        .args(["--noprofile", "--norc"])
        .arg(&file)
        .env("GITLAB_CI", "true")
        .env("CI_PROJECT_DIR", &co.ws)
        .env("CI_JOB_NAME", "waitshim")
        .env("CI_COMMIT_REF_SLUG", "main")
        .output()
        .unwrap();
    let (so, se) = text(&o);
    (o.status.code().unwrap_or(-1), so, se)
}

/// A `::error` annotation's file and line, checked to name a line of a file of the checkout.
fn annotated_place(co: &Checkout, annotation: &str) -> (String, u32) {
    let props = annotation
        .strip_prefix("::error ")
        .and_then(|r| r.split_once("::"))
        .map(|(p, _)| p)
        .unwrap_or_else(|| panic!("not an annotation with properties: {annotation}"));
    let get = |k: &str| {
        props
            .split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .map(str::to_string)
    };
    let file = get("file").unwrap_or_else(|| panic!("no file: {annotation}"));
    let line: u32 = get("line")
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no line: {annotation}"));
    let lines = std::fs::read_to_string(co.ws.join(&file))
        .unwrap_or_else(|e| panic!("{annotation}: {file} is not a file of the checkout: {e}"))
        .lines()
        .count();
    assert!(line >= 1 && line as usize <= lines, "{annotation}");
    (file, line)
}

/// The GitHub Actions job of docs/ci.md, run as GitHub's runner would, on tests that pass and code
/// with a lock-order inversion: the gate fails the step (exit 1), the annotations reach the
/// step's output (not the report file) and point at the source line, the job summary and the
/// JUnit and SARIF files are written, and the `if: always()` steps still run. On code without
/// contention the same job passes.
#[test]
fn the_readme_github_actions_job_runs_as_the_runner_runs_it() {
    let job = readme_recipe("A GitHub Actions job");
    let job = &job["waitshim"];

    let co = checkout("for i in 1 2 3; do ./build/convoy 2; done\n./build/lock_inversion");
    let steps = run_github_job(&co, job);
    let tests = steps
        .iter()
        .find(|s| s.name == "tests under waitshim")
        .expect("the tests step");
    assert_eq!(
        tests.code, 1,
        "the gate failed: {}\n{}",
        tests.stdout, tests.stderr
    );
    assert_eq!(
        tests.stdout.matches("convoy: 2 threads done").count(),
        3,
        "the tests' output is in the job log: {}",
        tests.stdout
    );
    let annotations = tests.annotations();
    let inversion: Vec<&&str> = annotations
        .iter()
        .filter(|a| a.contains("title=waitshim inversion::"))
        .collect();
    assert_eq!(inversion.len(), 1, "{annotations:?}\n{}", tests.stderr);
    let (file, line) = annotated_place(&co, inversion[0]);
    assert_eq!(file, "src/lock_inversion.c");
    assert!(
        [
            line_of("lock_inversion.c", "forward-outer"),
            line_of("lock_inversion.c", "forward-inner")
        ]
        .contains(&line),
        "{}",
        inversion[0]
    );
    for a in &annotations {
        annotated_place(&co, a);
    }
    let report = std::fs::read_to_string(co.ws.join("waitshim-report.txt")).unwrap();
    assert!(report.starts_with("waitshim summary: "), "{report}");
    assert!(
        report.contains("FAIL ") && !report.contains("::error"),
        "{report}"
    );
    assert!(
        tests
            .summary
            .starts_with("### waitshim: the gate failed (exit 1)"),
        "{}",
        tests.summary
    );
    validate_junit(&co.ws.join("waitshim-junit.xml"));
    for s in &steps {
        assert!(s.ran, "{} did not run", s.name);
        if s.name != "tests under waitshim" {
            assert_eq!(s.code, 0, "{}: {}\n{}", s.name, s.stdout, s.stderr);
        }
    }
    assert!(co.ws.join(".waitshim/history.sqlite").is_file());

    // No contention, no inversion: every step passes, nothing is annotated.
    let co = checkout("./build/quiet\n./build/quiet");
    let steps = run_github_job(&co, job);
    for s in &steps {
        assert!(
            s.ran && s.code == 0,
            "{}: {}\n{}",
            s.name,
            s.stdout,
            s.stderr
        );
        assert!(
            s.annotations().is_empty(),
            "{}: {:?}",
            s.name,
            s.annotations()
        );
    }
    let tests = steps
        .iter()
        .find(|s| s.name == "tests under waitshim")
        .unwrap();
    assert!(
        tests.summary.starts_with("### waitshim: passed (exit 0)"),
        "{}",
        tests.summary
    );

    // Tests that fail: the step fails with 3, not with the gate's 1.
    let co = checkout("./build/quiet\nexit 1");
    let steps = run_github_job(&co, job);
    let tests = steps
        .iter()
        .find(|s| s.name == "tests under waitshim")
        .unwrap();
    assert_eq!(tests.code, 3, "{}\n{}", tests.stdout, tests.stderr);
    assert!(
        tests.stderr.contains("the command ended with status 1"),
        "{}",
        tests.stderr
    );
}

/// The GitLab CI job of docs/ci.md, run as GitLab's runner would: the job fails with the gate's
/// status, the Code Quality report is the JSON array GitLab reads (the tests' output went to
/// the job log, not into it) and points at the source line, the JUnit report validates, and
/// the artifacts and the cache are there.
#[test]
fn the_readme_gitlab_job_runs_as_the_runner_runs_it() {
    let job = readme_recipe("A GitLab CI job");
    let job = &job["waitshim"];
    let co = checkout("for i in 1 2 3; do ./build/convoy 2; done\n./build/lock_inversion");
    let (code, stdout, stderr) = run_gitlab_job(&co, job);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert_eq!(
        stderr.matches("convoy: 2 threads done").count(),
        3,
        "the tests' output is in the job log: {stderr}"
    );
    let reports = &job["artifacts"]["reports"];
    let cq = co
        .ws
        .join(reports["codequality"].as_str().expect("codequality"));
    let items: Value = serde_json::from_str(&std::fs::read_to_string(&cq).unwrap())
        .unwrap_or_else(|e| panic!("{}: not JSON: {e}", cq.display()));
    let items = items.as_array().expect("a JSON array");
    let inversion = items
        .iter()
        .find(|i| i["check_name"] == "waitshim-inversion")
        .unwrap_or_else(|| panic!("{items:?}"));
    assert_eq!(inversion["location"]["path"], "src/lock_inversion.c");
    for i in items {
        let path = i["location"]["path"].as_str().unwrap();
        assert!(co.ws.join(path).is_file(), "{i}");
        assert!(
            i["fingerprint"].as_str().is_some_and(|f| !f.is_empty())
                && i["description"].is_string()
                && i["severity"].is_string()
                && i["location"]["lines"]["begin"]
                    .as_u64()
                    .is_some_and(|l| l >= 1),
            "{i}"
        );
    }
    validate_junit(&co.ws.join(reports["junit"].as_str().expect("junit")));
    for p in job["artifacts"]["paths"].as_sequence().unwrap() {
        let p = p.as_str().unwrap();
        assert!(co.ws.join(p).exists(), "artifact {p} missing");
    }
    for p in job["cache"]["paths"].as_sequence().unwrap() {
        assert!(co.ws.join(p.as_str().unwrap()).exists());
    }

    let co = checkout("./build/quiet");
    let (code, stdout, stderr) = run_gitlab_job(&co, job);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let items: Value = serde_json::from_str(
        &std::fs::read_to_string(co.ws.join("gl-code-quality-report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(items, serde_json::json!([]));
}

/// Stands for the tests that need a tool the machine may lack (objcopy here): run by
/// [`under_ci_a_missing_dependency_fails_the_test_instead_of_skipping_it`] only.
#[test]
#[ignore = "run by under_ci_a_missing_dependency_fails_the_test_instead_of_skipping_it"]
fn needs_objcopy() {
    let found = Command::new("objcopy")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        waitshim_tests::skip_or_fail("needs_objcopy", "`objcopy` is not installed");
        return;
    }
    println!("objcopy found");
}

/// A test whose dependency is missing says SKIPPED and passes on a developer's machine, and
/// fails under CI=true (as CI runs the suite), so that a CI machine that lost a tool does not
/// pass silently: this test runs [`needs_objcopy`] with a PATH that has every program of
/// /usr/bin but objcopy.
#[test]
fn under_ci_a_missing_dependency_fails_the_test_instead_of_skipping_it() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for e in std::fs::read_dir("/usr/bin").unwrap() {
        let e = e.unwrap();
        if e.file_name() != "objcopy" {
            let _ = std::os::unix::fs::symlink(e.path(), bin.join(e.file_name()));
        }
    }
    let probe = |ci: Option<&str>| -> (Option<i32>, String) {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--ignored", "--exact", "needs_objcopy", "--nocapture"])
            .env("PATH", &bin)
            .env_remove("CI");
        if let Some(v) = ci {
            c.env("CI", v);
        }
        let o = c.output().unwrap();
        let (out, err) = text(&o);
        (o.status.code(), format!("{out}{err}"))
    };
    let (code, said) = probe(None);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("SKIPPED needs_objcopy: `objcopy` is not installed"),
        "{said}"
    );
    for ci in ["true", "1"] {
        let (code, said) = probe(Some(ci));
        assert_ne!(code, Some(0), "CI={ci}: {said}");
        assert!(
            said.contains("under CI=true a missing dependency fails the run"),
            "{said}"
        );
    }
    let (code, said) = probe(Some("false"));
    assert_eq!(code, Some(0), "CI=false: {said}");
}
