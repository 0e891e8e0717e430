//! The report names the code the user must look at (#13 §3): a global mutex by its variable and
//! where it was first used, a joined thread by where it was created, a wait by the program's own
//! frames rather than the C start-up code.

use serde_json::Value;
use waitshim_tests::{frame_is, line_of, Analysis, Launch};

const SRC: &str = "global_names.c";

fn run_fixture(args: &[&str]) -> Analysis {
    let run = Launch::fixture("global_names").run();
    run.assert_success();
    assert!(
        run.stdout_text().contains("global_names: 4 waits done"),
        "stdout: {}",
        run.stdout_text()
    );
    waitshim_tests::analyze(&[run.single_log()], args)
}

/// The object the JSON report names `name` (its `global.name`).
fn global<'a>(a: &'a Analysis, name: &str) -> &'a Value {
    let log = a.log(0);
    let found: Vec<&Value> = log
        .objects()
        .into_iter()
        .filter(|o| o["global"]["name"] == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "objects named {name}: {found:?}\nall: {:?}",
        log.objects()
    );
    found[0]
}

#[test]
fn global_mutexes_are_named_by_their_variable_and_first_used_where_first_locked() {
    let a = run_fixture(&[]);
    let first_use = line_of(SRC, "first-use");
    for (name, symbol, offset) in [
        ("stats_lock", "stats_lock", 0),
        ("locks[2]", "locks", 80),
        ("counters+0x8", "counters", 8),
    ] {
        let o = global(&a, name);
        assert_eq!(o["kind"], "mutex", "{o}");
        assert_eq!(o["origin"], "first_use", "{o}");
        assert_eq!(o["global"]["symbol"], symbol, "{o}");
        assert_eq!(o["global"]["offset"], offset, "{o}");
        // Each was contended: it is in the text report, named, with where it was first used.
        let line = a
            .text
            .lines()
            .find(|l| l.contains(&format!(" {name} @0x")))
            .unwrap_or_else(|| panic!("no line names {name}:\n{}", a.text));
        assert!(line.contains(&format!("first used in {SRC}:")), "{line}");
        assert!(!line.contains("created at"), "{line}");
    }
    for name in ["stats_lock", "locks[2]"] {
        let o = global(&a, name);
        assert!(frame_is(&o["creation_site"], SRC, first_use), "{o}");
        assert!(
            a.text.contains(&format!(
                " {name} @0x{}  first used in {SRC}:{first_use} (contend)",
                o["addr"].as_str().unwrap_or("").trim_start_matches("0x")
            )),
            "{}",
            a.text
        );
    }
}

#[test]
fn a_joined_threads_object_is_created_at_its_pthread_create() {
    let a = run_fixture(&[]);
    let log = a.log(0);
    let create = line_of(SRC, "slow-create");
    let join = line_of(SRC, "slow-join");
    let thread = log.object_created_at(SRC, create);
    assert_eq!(thread["kind"], "thread", "{thread}");
    assert!(
        log.objects_created_at(SRC, join).is_empty(),
        "no object is created at the join line"
    );
    // Its wait is the join: the site where the waiting happened is still the join line.
    assert!(
        a.text
            .contains(&format!("created at {SRC}:{create} (main)\n")),
        "{}",
        a.text
    );
    assert!(
        a.text.contains(&format!("at {SRC}:{join} (main)")),
        "{}",
        a.text
    );
    // Every joined thread object: created where its thread was.
    let creates = [line_of(SRC, "waiter-create"), create];
    for o in log.objects().into_iter().filter(|o| o["kind"] == "thread") {
        assert!(
            creates
                .iter()
                .any(|&l| frame_is(&o["creation_site"], SRC, l))
                || o["creation_site"]["function"] == "main",
            "{o}"
        );
    }
}

#[test]
fn main_thread_waits_group_by_main_not_by_the_c_start_up_code() {
    let a = run_fixture(&["--sort", "outer:1"]);
    let groups = a.log(0).0["groups"].as_array().cloned().unwrap_or_default();
    let names: Vec<String> = groups.iter().map(|g| g["frames"].to_string()).collect();
    assert!(names.contains(&"[\"main\"]".to_string()), "{names:?}");
    assert!(
        names.contains(&"[\"waiter_main\"]".to_string()),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.contains("_start")), "{names:?}");
    let heads: Vec<&str> = a.text.lines().filter(|l| l.starts_with("GROUP ")).collect();
    assert!(heads.iter().any(|l| l.contains(": main  (")), "{heads:?}");
    assert!(!heads.iter().any(|l| l.contains("_start")), "{heads:?}");
    // The wait of main on counters.lock is shown at main's own line, the runtime frames under
    // `main` passed over.
    let main_lock = line_of(SRC, "main-lock");
    assert!(
        a.text.contains(&format!("at {SRC}:{main_lock} (main)")),
        "{}",
        a.text
    );
}

#[test]
fn a_program_without_debug_information_gets_one_line_of_advice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let source =
        std::fs::read_to_string(waitshim_tests::workspace_root().join("fixtures").join(SRC))
            .expect("read fixture");
    // The same program built without debug information (-g0 after -g).
    let exe = waitshim_tests::compile_c_with(dir.path(), "nodebug", &source, &["-g0"]);
    let run = Launch::program(&exe).run();
    run.assert_success();
    let a = run.analyze();
    let exe = exe.display().to_string();
    let advice: Vec<&str> = a
        .text
        .lines()
        .filter(|l| l.starts_with("ADVICE: "))
        .collect();
    assert_eq!(advice.len(), 1, "{}", a.text);
    assert!(advice[0].contains(&exe), "{advice:?}");
    assert!(advice[0].contains("rebuild it with -g"), "{advice:?}");
    // It is in the JSON report with the module.
    let symbols = a.log(0).0["symbols"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let module = symbols
        .iter()
        .find(|s| s["path"] == exe.as_str())
        .unwrap_or_else(|| panic!("{symbols:?}"));
    assert!(module["advice"].as_str().is_some(), "{module}");
    // The names of the globals still come from the symbol table.
    assert!(a.text.contains(" stats_lock @0x"), "{}", a.text);

    // Built with -g: no advice for the program.
    let a = run_fixture(&[]);
    assert!(
        !a.text
            .lines()
            .any(|l| l.starts_with("ADVICE: ") && l.contains("global_names")),
        "{}",
        a.text
    );
}

const CXX: &str = "names_cxx.cpp";

/// Runs `names_cxx` under a policy with one rule selecting objects by `creation_site`.
fn run_cxx_with_creation_site(glob: &str) -> Analysis {
    run_cxx_with_selector("creation_site", glob)
}

/// Runs `names_cxx` under a policy with one rule recording the waits `field` (a selector)
/// matching `glob` picks.
fn run_cxx_with_selector(field: &str, glob: &str) -> Analysis {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("policy.json");
    std::fs::write(
        &policy,
        format!(r#"{{"rules":[{{"match":{{"{field}":"{glob}"}},"actions":["record"]}}]}}"#),
    )
    .expect("write policy");
    let run = Launch::fixture("names_cxx")
        .env("WAITSHIM_POLICY", &policy)
        .run();
    run.assert_success();
    assert_eq!(run.stderr_text(), "", "a valid policy prints nothing");
    assert!(
        run.stdout_text().contains("names_cxx: 3 waits done"),
        "{}",
        run.stdout_text()
    );
    run.analyze()
}

#[test]
fn a_creation_site_glob_copied_from_the_report_selects_a_cxx_constructors_lock() {
    for glob in ["db::Pool::*", "_ZN2db4Pool*"] {
        let a = run_cxx_with_creation_site(glob);
        let log = a.log(0);
        let pool = log.object_created_at(CXX, line_of(CXX, "pool-create"));
        // The report shows the constructor as the glob names it.
        assert_eq!(
            pool["creation_site"]["function"], "db::Pool::Pool()",
            "{pool}"
        );
        let events: Vec<&Value> = log.0["wait_events"]["listed"]
            .as_array()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        assert!(!events.is_empty(), "{glob}: no event recorded");
        for e in &events {
            assert_eq!(e["object_id"], pool["object_id"], "{glob}: {e}");
        }
    }
}

#[test]
fn a_global_std_mutex_is_named_and_first_used_in_the_programs_code() {
    let a = run_cxx_with_creation_site("db::Pool::*");
    let guard = global(&a, "cache::guard");
    assert_eq!(guard["origin"], "first_use", "{guard}");
    let site = &guard["creation_site"];
    assert!(
        frame_is(site, CXX, line_of(CXX, "guard-first-use")),
        "{guard}"
    );
    assert_eq!(site["function"], "main", "{guard}");
    // std::mutex::lock and the gthread layer, inlined into main, were passed over.
    assert!(site["skipped_frames"].as_u64() >= Some(1), "{guard}");
    assert!(
        a.text.contains(&format!(
            " cache::guard @{}  first used in {CXX}:{} (main)",
            guard["addr"].as_str().unwrap_or(""),
            line_of(CXX, "guard-first-use")
        )),
        "{}",
        a.text
    );
}

/// A thread_group glob copied from a report (the demangled start routine
/// `db::Pool::worker(void*)`) selects the thread started there, as the mangled name does; the
/// two std::threads (started by libstdc++) are not selected.
#[test]
fn a_thread_group_glob_copied_from_the_report_selects_a_cxx_start_routine() {
    for glob in ["db::Pool::worker*", "_ZN2db4Pool6worker*"] {
        let a = run_cxx_with_selector("thread_group", glob);
        let log = a.log(0);
        let worker = log
            .threads()
            .into_iter()
            .find(|t| t["name"] == "pool-worker")
            .unwrap_or_else(|| panic!("no pool-worker thread: {}", log.0["threads"]))["tid"]
            .clone();
        let events = log.0["wait_events"]["listed"]
            .as_array()
            .expect("wait_events.listed");
        assert!(!events.is_empty(), "{glob}: the worker's wait is recorded");
        for e in events {
            assert_eq!(
                e["tid"], worker,
                "{glob}: an event from another thread: {e}"
            );
        }
    }
}
