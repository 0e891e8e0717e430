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

/// `waitshim-analyze --json LOG` with `env` set (and `DEBUGINFOD_*` only as given): the text
/// and JSON reports, and stderr.
fn analyze_env(log: &Path, env: &[(&str, &Path)]) -> (String, serde_json::Value, String) {
    let run = |json: bool| {
        let mut cmd = Command::new(waitshim_tests::analyzer_path());
        cmd.env_remove("DEBUGINFOD_URLS")
            .env_remove("DEBUGINFOD_CACHE_PATH");
        for (k, v) in env {
            cmd.env(k, v);
        }
        if json {
            cmd.arg("--json");
        }
        let out = cmd.arg(log).output().expect("run the analyzer");
        assert!(out.status.success(), "{out:?}");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (text, err) = run(false);
    let json = serde_json::from_str(&run(true).0).expect("JSON report");
    (text, json, err)
}

#[test]
fn a_program_without_debug_information_gets_its_lines_from_debuginfod_when_asked() {
    // The analyzer told a Debian user to `apt-get install <pkg>-dbgsym`, which fails until the
    // debug archive is added, and ignored DEBUGINFOD_URLS. The program's debug information is
    // moved to a file only a (fake) debuginfod-find can hand over.
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("debuginfod");
    std::fs::copy(waitshim_tests::fixture("debuginfod"), &exe).expect("copy the fixture");
    let debug = dir.path().join("kept.debug");
    for args in [
        vec![
            "--only-keep-debug".as_ref(),
            exe.as_os_str(),
            debug.as_os_str(),
        ],
        vec!["--strip-debug".as_ref(), exe.as_os_str()],
    ] {
        let ok = Command::new("objcopy").args(&args).status();
        assert!(ok.is_ok_and(|s| s.success()), "objcopy {args:?}");
    }
    let run = waitshim_tests::Launch::program(&exe).run();
    run.assert_success();
    assert_eq!(run.stdout_text(), "dbg: done\n");
    let log = run.single_log().to_path_buf();
    let site = |json: &serde_json::Value| {
        let o = json["logs"][0]["objects"]
            .as_array()
            .and_then(|os| os.iter().find(|o| o["kind"] == "mutex"))
            .cloned()
            .unwrap_or_default();
        o["creation_site"].clone()
    };

    // Not asked: the function from the symbol table, and advice that says how.
    let (text, json, _) = analyze_env(&log, &[]);
    assert_eq!(site(&json)["function"], "main", "{text}");
    assert!(site(&json)["line"].is_null(), "{text}");
    let advice = format!("ADVICE: {} has no debug information", exe.display());
    assert!(text.contains(&advice), "{text}");

    // Asked: debuginfod-find fetches the file into the client's cache, and the creation site
    // gets its function and line.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let tool = bin.join("debuginfod-find");
    std::fs::write(
        &tool,
        format!(
            "#!/bin/sh\n[ \"$1\" = debuginfo ] || exit 1\nmkdir -p \"$DEBUGINFOD_CACHE_PATH/$2\" \
             && cp '{}' \"$DEBUGINFOD_CACHE_PATH/$2/debuginfo\" \
             && echo \"$DEBUGINFOD_CACHE_PATH/$2/debuginfo\"\n",
            debug.display()
        ),
    )
    .expect("write the tool");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let cache = dir.path().join("cache");
    let url = Path::new("http://127.0.0.1:9");
    let env = [
        ("DEBUGINFOD_URLS", url),
        ("DEBUGINFOD_CACHE_PATH", cache.as_path()),
        ("PATH", Path::new(&path)),
    ];
    let (text, json, err) = analyze_env(&log, &env);
    let s = site(&json);
    assert_eq!(s["function"], "make_lock", "{text}");
    assert_eq!(
        s["line"].as_u64(),
        Some(u64::from(line_of("debuginfod.c", "make-lock"))),
        "{text}"
    );
    assert!(
        !text.contains(&format!("ADVICE: {}", exe.display())),
        "{text}"
    );
    assert!(err.contains("asking debuginfod"), "{err}");

    // The cache alone serves the next run, the tool gone.
    std::fs::remove_file(&tool).expect("remove the tool");
    let (text, json, _) = analyze_env(&log, &env);
    assert_eq!(site(&json)["function"], "make_lock", "{text}");
}
