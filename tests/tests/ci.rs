//! What CI systems read: JUnit XML, SARIF 2.1.0 and GitHub's job summary, checked against the
//! schemas their publishers ship; and the README's CI recipes, run as GitHub-style and
//! GitLab-style runners would run them.

use std::process::{Command, Output};

use serde_json::Value;
use waitshim_tests::{
    analyzer_path, fixture, line_of, validate_junit, validate_sarif, workspace_root,
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
