//! Where threads waited: the call chain of each wait is its own, even when call paths share a
//! lock helper at the same stack depth (`fixtures/lock_helper.c`).

use std::path::Path;
use std::process::Command;

use waitshim_tests::{debian_program, export_beside, line_of, run_both, LogReport};

/// The mutex whose global variable is `name`.
fn mutex<'a>(log: &LogReport<'a>, name: &str) -> &'a serde_json::Value {
    log.objects()
        .into_iter()
        .find(|o| o["global"]["name"] == name)
        .unwrap_or_else(|| panic!("no object {name}"))
}

/// `go tool pprof ARGS FILE` (Debian's golang-go, installed when missing); its stdout.
fn go_pprof(args: &[&str], file: &Path) -> String {
    let go = debian_program("go", "golang-go");
    let home = file.parent().expect("dir");
    let o = Command::new(go)
        .args(["tool", "pprof", "-symbolize=none"])
        .args(args)
        .arg(file)
        .env("GOTOOLCHAIN", "local")
        .env("GOCACHE", home.join("gocache"))
        .env("PPROF_TMPDIR", home)
        .env("HOME", home)
        .output()
        .expect("run go tool pprof");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn three_callers_of_one_lock_helper_each_get_their_own_waits() {
    let run = run_both("lock_helper", &[]);
    assert_eq!(run.stdout_text(), "lock_helper: 12 waits\n");
    let a = run.analyze();
    let log = a.log(0);
    let callers = [
        ("orders_lock", "f_orders", "call-orders"),
        ("audit_lock", "f_audit", "call-audit"),
        ("stock_lock", "f_stock", "call-stock"),
    ];
    for (lock, caller, tag) in callers {
        let m = mutex(&log, lock);
        assert_eq!(log.counter(m, "contended"), 4, "{lock}: {m}");
        let sites = m["wait_sites"].as_array().expect("wait_sites");
        let waits: u64 = sites.iter().map(|s| s["count"].as_u64().unwrap_or(0)).sum();
        assert_eq!(waits, 4, "{lock}: {sites:?}");
        for s in sites {
            let chain = log.chain_text(&s["chain_id"]);
            assert!(
                log.chain_has(
                    &s["chain_id"],
                    "lock_helper.c",
                    line_of("lock_helper.c", tag)
                ),
                "{lock}: a wait not through {caller}: {chain}"
            );
            for (_, other, _) in callers.iter().filter(|c| c.1 != caller) {
                assert!(
                    !chain.contains(other),
                    "{lock} waited through {other}: {chain}"
                );
            }
        }
        assert!(
            a.text.contains(caller),
            "{caller} in the text report:\n{}",
            a.text
        );
    }

    // Folded stacks: each caller's frame over the helper, with its own lock's waits.
    let folded = std::fs::read_to_string(export_beside(run.single_log(), "folded", "w.folded"))
        .expect("folded export");
    for (_, caller, _) in callers {
        assert!(
            folded
                .lines()
                .any(|l| l.contains(&format!("{caller};")) && l.contains("lock_and_work")),
            "{caller} over lock_and_work in the folded stacks:\n{folded}"
        );
    }

    // pprof: each caller has a third of the helper's contentions.
    let pprof = export_beside(run.single_log(), "pprof", "w.pb.gz");
    let top = go_pprof(&["-top", "-cum", "-sample_index=contentions"], &pprof);
    for (_, caller, _) in callers {
        assert!(
            top.lines()
                .any(|l| l.ends_with(&format!(" {caller}"))
                    && l.split_whitespace().nth(3) == Some("4")),
            "{caller} with 4 contentions in pprof:\n{top}"
        );
    }
}

#[test]
fn workers_named_by_their_creator_before_they_ran_keep_their_names_alive_at_exit() {
    // Named before they registered, and still alive at exit (where a thread's name is read
    // again): the report had none of the four names.
    for _ in 0..3 {
        let run = run_both("named_by_creator", &[]);
        let a = run.analyze();
        let log = a.log(0);
        let mut names: Vec<&str> = log
            .threads()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .filter(|n| n.starts_with("worker-"))
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["worker-0", "worker-1", "worker-2", "worker-3"]);
    }
}
