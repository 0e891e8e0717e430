//! Progress on stderr during an export's later passes over a log (the per-wait events, the
//! thread states), not only during its first read: a command that runs past a second says
//! what it is doing, one that ends within it says nothing.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use waitshim_tests::{analyzer_path, Launch, Run};

/// `waitshim-analyze export --format FORMAT -o OUT LOGS...` with stderr a pipe (not a terminal).
fn export(format: &str, out: &Path, logs: &[&Path]) -> (Output, Duration) {
    let start = Instant::now();
    let o = Command::new(analyzer_path())
        .args(["export", "--format", format, "-o"])
        .arg(out)
        .args(logs)
        .output()
        .expect("run waitshim-analyze export");
    let took = start.elapsed();
    assert!(
        o.status.success(),
        "export --format {format} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (o, took)
}

/// 16 threads on one mutex with every blocked wait in the log, until the log is at least
/// `min_bytes` (how many waits block varies from run to run: 1 MB is about 100 000).
fn lock_heavy(min_bytes: u64) -> Run {
    let mut pairs = 5_000_000u64;
    for _ in 0..4 {
        let run = Launch::fixture("bench_contended")
            .arg(pairs.to_string())
            .arg("16")
            .env("WAITSHIM_EVENTS", "all")
            .run();
        run.assert_success();
        let size = std::fs::metadata(run.single_log()).expect("log").len();
        if size >= min_bytes {
            return run;
        }
        pairs *= 2;
    }
    panic!("bench_contended never wrote a log of {min_bytes} bytes");
}

#[test]
fn an_export_past_a_second_shows_its_writing_pass_and_a_short_one_shows_nothing() {
    let run = lock_heavy(1 << 20);
    let log = run.single_log();
    // Three copies of the log in one export: the later copies' passes start after the first's
    // (half a second or more of work on a log this size), so they run past the command's quiet
    // second however fast the machine.
    let copies: Vec<_> = (1..=2)
        .map(|i| {
            let copy = log.with_file_name(format!("copy{i}.log"));
            std::fs::copy(log, &copy).expect("copy the log");
            copy
        })
        .collect();
    let out = log.with_file_name("out.json");
    let (o, took) = export("chrome", &out, &[log, &copies[0], &copies[1]]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(took > Duration::from_secs(1), "the export took {took:?}");
    // Off a terminal: whole lines, each naming the pass and how far it got.
    let line = stderr
        .lines()
        .find(|l| {
            l.starts_with("waitshim-analyze: writing chrome trace from ")
                && l.contains(".log (the per-wait events): ")
        })
        .unwrap_or_else(|| panic!("no progress of the writing pass in {took:?}:\n{stderr}"));
    assert!(line.contains(" MB (") && line.ends_with(" MB/s"), "{line}");
    assert!(!stderr.contains('\r'), "no bar off a terminal:\n{stderr}");
    assert!(o.stdout.is_empty(), "nothing on stdout");
    // A short export prints nothing at all.
    let small = Launch::fixture("convoy").run();
    small.assert_success();
    let small_log = small.single_log();
    let (o, took) = export(
        "perfetto",
        &small_log.with_file_name("out.pftrace"),
        &[small_log],
    );
    // Silent when it ended within its first second (a loaded machine may take longer: then
    // progress is what it should show).
    if took < Duration::from_secs(1) {
        assert_eq!(
            String::from_utf8_lossy(&o.stderr),
            "",
            "a short export is silent ({took:?})"
        );
    }
}
