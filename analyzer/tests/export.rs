//! `export` on synthetic logs: what the formats hold when the log is odd (waits listed twice,
//! a log with nothing in it, a damaged log), and that a large log exports in bounded time.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::*;
use serde_json::Value;
use waitshim_analyze::export::{run, ExportOptions, Format, Side};
use waitshim_format::{thread_state, CpuSample, ThreadSamples, ThreadState};

const FORMATS: [(Format, &str); 6] = [
    (Format::Pprof, "pprof"),
    (Format::Folded, "folded"),
    (Format::Flamegraph, "svg"),
    (Format::Chrome, "json"),
    (Format::Perfetto, "perfetto-trace"),
    (Format::Html, "html"),
];

/// Exports `log` to `dir/out.EXT`; the exit code, stderr and the file.
fn export(log: &Path, format: Format, side: Side, ext: &str) -> (i32, String, PathBuf) {
    let out = log.with_file_name(format!("out.{ext}"));
    let opts = ExportOptions {
        format,
        side,
        output: out.clone(),
        symbols: false,
        compress: false,
    };
    let mut err = Vec::new();
    let code = run(&[log.to_path_buf()], &opts, &mut err);
    (code, String::from_utf8_lossy(&err).into_owned(), out)
}

/// A complete slice of a Chrome trace: start, end (µs), name.
type Slice = (f64, f64, String);

/// The complete slices of a Chrome trace by thread, by start.
fn chrome_slices(file: &Path) -> Vec<(u64, Vec<Slice>)> {
    let doc: Value =
        serde_json::from_slice(&std::fs::read(file).expect("read")).expect("chrome is JSON");
    let mut by: std::collections::BTreeMap<u64, Vec<Slice>> = Default::default();
    for e in doc["traceEvents"].as_array().expect("events") {
        if e["ph"] == "X" {
            let ts = e["ts"].as_f64().expect("ts");
            let dur = e["dur"].as_f64().expect("dur");
            by.entry(e["tid"].as_u64().expect("tid"))
                .or_default()
                .push((ts, ts + dur, e["name"].as_str().expect("name").to_string()));
        }
    }
    by.into_iter()
        .map(|(t, mut v)| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (t, v)
        })
        .collect()
}

#[test]
fn a_thread_listed_by_two_overlapping_records_gets_disjoint_waits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = convoy_log();
    // Thread 102 waited through two episodes of mutex#4: the second record lists its wait
    // again, from the same start. Then it waits in two episodes of mutex#3 that overlap
    // without one holding the other (a log whose clocks disagree a little).
    b.open(10, 4, 2, 3000 * MS, (102, 11));
    b.close(10, 4, 2, 3100 * MS, 100 * MS, &[(102, 11)], 0);
    b.open(11, 4, 2, 3100 * MS, (102, 11));
    b.close(11, 4, 2, 3200 * MS, 200 * MS, &[(102, 11)], 0);
    b.open(12, 3, 2, 3300 * MS, (102, 11));
    b.close(12, 3, 2, 3400 * MS, 100 * MS, &[(102, 11)], 0);
    b.open(13, 3, 2, 3350 * MS, (102, 11));
    b.close(13, 3, 2, 3500 * MS, 150 * MS, &[(102, 11)], 0);
    b.end(4000 * MS, 7);
    let log = b.write(dir.path(), "x.log");
    let (code, err, out) = export(&log, Format::Chrome, Side::Waiters, "json");
    assert_eq!(code, 0, "{err}");
    for (tid, slices) in chrome_slices(&out) {
        let waits: Vec<_> = slices.iter().filter(|s| s.2.starts_with("Wait")).collect();
        for pair in waits.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0 + 1e-3,
                "thread {tid}: {:?} overlaps {:?}",
                pair[0],
                pair[1]
            );
        }
        let life = slices.iter().find(|s| s.2 == "Thread").expect("lifetime");
        for w in &waits {
            assert!(
                w.0 + 1e-3 >= life.0 && w.1 <= life.1 + 1e-3,
                "{w:?} outside {life:?}"
            );
        }
        if tid == 102 {
            // [10, 20] ms, [100, 600] ms, then each listing from where the one before ended:
            // [3000, 3100] ms and [3100, 3200] ms, [3300, 3400] ms and [3400, 3500] ms.
            let ms: Vec<(u64, u64)> = waits
                .iter()
                .map(|w| ((w.0 / 1000.0).round() as u64, (w.1 / 1000.0).round() as u64))
                .collect();
            assert_eq!(
                ms,
                [
                    (10, 20),
                    (100, 600),
                    (3000, 3100),
                    (3100, 3200),
                    (3300, 3400),
                    (3400, 3500)
                ]
            );
        }
    }
}

#[test]
fn every_format_exports_a_log_with_nothing_in_it_and_a_damaged_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty =
        LogBuilder::started("/nonexistent/idle", &["./idle"]).write(dir.path(), "empty.log");
    let mut damaged = convoy_log();
    damaged.bytes.truncate(damaged.bytes.len() - 7);
    let damaged = damaged.write(dir.path(), "damaged.log");
    for log in [&empty, &damaged] {
        for (format, ext) in FORMATS {
            for side in [Side::Waiters, Side::Holders] {
                let (code, err, out) = export(log, format, side, ext);
                assert_eq!(code, 0, "{format:?} of {}: {err}", log.display());
                assert!(out.is_file(), "{format:?} of {}", log.display());
            }
        }
    }
    // The folded stacks of the damaged convoy still sum to its objects' wait totals that
    // survived: 3000 ms + 30 ms + 2000 ms.
    let (_, _, out) = export(&damaged, Format::Folded, Side::Waiters, "folded");
    let text = std::fs::read_to_string(out).expect("read");
    let sum: u64 = text
        .lines()
        .map(|l| {
            l.rsplit_once(' ')
                .expect("weight")
                .1
                .parse::<u64>()
                .expect("number")
        })
        .sum();
    assert_eq!(sum, 5030 * MS, "{text}");
}

#[test]
fn holders_side_sums_each_records_waiters_under_the_release_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = convoy_log();
    b.end(3000 * MS, 7);
    let log = b.write(dir.path(), "h.log");
    let (code, err, out) = export(&log, Format::Folded, Side::Holders, "folded");
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(out).expect("read");
    // Records 1..3: 3 waiters x 10 ms, 7 x 500 ms, 1 x 2000 ms, all released at chain 30.
    let sum: u64 = text
        .lines()
        .map(|l| {
            l.rsplit_once(' ')
                .expect("weight")
                .1
                .parse::<u64>()
                .expect("number")
        })
        .sum();
    assert_eq!(sum, (30 + 3500 + 2000) * MS, "{text}");
    assert!(
        text.lines().all(|l| l.starts_with("convoy+0x4000;[")),
        "{text}"
    );
}

/// A lock-heavy run's log: `threads` threads and `records` contention records of 15 waiters
/// each on 8 mutexes, the records back to back.
fn heavy_log(threads: u32, records: u64) -> LogBuilder {
    let mut b = convoy_log();
    for tid in 109..100 + threads {
        b.thread(tid, &format!("worker-{tid}"));
    }
    for m in 10..18 {
        b.mutex(m, 0x7000_0001_0000 + m * 64, 1);
    }
    let waiters: Vec<(u32, u32)> = (101..101 + 15.min(threads - 1)).map(|t| (t, 10)).collect();
    for r in 0..records {
        let at = 3000 * MS + r * 100_000;
        b.open(100 + r, 10 + r % 8, 15, at, (101, 10));
        b.close(100 + r, 10 + r % 8, 15, at + 90_000, 90_000, &waiters, 0);
    }
    b.end(3000 * MS + records * 100_000 + MS, 15);
    b
}

#[test]
fn a_heavy_log_exports_in_every_format_in_seconds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = heavy_log(16, 20_000).write(dir.path(), "heavy.log");
    let log_bytes = std::fs::metadata(&log).expect("stat").len();
    for (format, ext) in FORMATS {
        let t = Instant::now();
        let (code, err, out) = export(&log, format, Side::Waiters, ext);
        let took = t.elapsed();
        assert_eq!(code, 0, "{format:?}: {err}");
        let size = std::fs::metadata(&out).expect("stat").len();
        println!(
            "{format:?}: {log_bytes} B of log, 300 000 waits -> {size} B in {:.2} s",
            took.as_secs_f64()
        );
        assert!(took.as_secs() < 60, "{format:?} took {took:?}");
    }
}

/// Past a million events a chrome trace is more than JSON viewers load: the export says so,
/// once, and names the formats made for it; a smaller trace says nothing.
#[test]
fn a_chrome_trace_past_a_million_events_says_json_viewers_will_not_cope() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = heavy_log(16, 70_000).write(dir.path(), "heavy.log");
    let (code, err, _) = export(&log, Format::Chrome, Side::Waiters, "json");
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.matches("JSON viewers").count(), 1, "{err}");
    assert!(err.contains("--format perfetto"), "{err}");
    let small = heavy_log(16, 1_000).write(dir.path(), "small.log");
    let (code, err, _) = export(&small, Format::Chrome, Side::Waiters, "json");
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("JSON viewers"), "{err}");
}

/// A sampled run of `threads` threads over `secs` seconds: a sample every 10 ms listing every
/// thread, each in a state drawn from a fixed pseudo-random sequence (running, ready, in a
/// tracked wait, blocked in read on a pipe), idle CPUs every 100 ms, and a contention record
/// every 10 ms.
fn sampled_log(threads: u32, secs: u64) -> LogBuilder {
    let mut b = convoy_log();
    for tid in 109..100 + threads {
        b.thread(tid, &format!("worker-{tid}"));
    }
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let interval = 10 * MS;
    let waiters: Vec<(u32, u32)> = (102..106).map(|t| (t, 10)).collect();
    for i in 1..=secs * 100 {
        let ns = T0 + 2 * MS + i * interval;
        let entries = (100..100 + threads)
            .map(|tid| {
                let r = next();
                let state = [
                    thread_state::RUNNING,
                    thread_state::RUNNING,
                    thread_state::TRACKED_WAIT,
                    thread_state::BLOCKED,
                ][(r % 4) as usize];
                ThreadState {
                    tid,
                    state,
                    waiting_kind: if state == thread_state::TRACKED_WAIT {
                        2
                    } else {
                        0
                    },
                    on_cpu_ns: (r >> 8) % interval,
                    run_delay_ns: (r >> 32) % (interval / 4),
                    timeslices: 1,
                    syscall: if state == thread_state::BLOCKED {
                        0
                    } else {
                        -1
                    },
                    arg0: 3,
                    what: if state == thread_state::BLOCKED {
                        "pipe:[77]".into()
                    } else {
                        String::new()
                    },
                    object_id: 0,
                }
            })
            .collect();
        b.push(ThreadSamples {
            ns,
            interval_ns: interval,
            threads: entries,
            unsampled: 0,
        });
        if i % 10 == 0 {
            b.push(CpuSample {
                ns,
                idle_ns: vec![(next() % 100) * MS, 0],
                iowait_ns: vec![0, 0],
            });
        }
        let at = 2 * MS + i * interval;
        b.open(1000 + i, 1 + i % 3, 4, at, (102, 10));
        b.close(1000 + i, 1 + i % 3, 4, at + 5 * MS, 5 * MS, &waiters, 0);
    }
    b.end(3 * MS + (secs * 100 + 1) * interval, 7);
    b
}

#[test]
fn html_of_a_64_thread_60_second_sampled_run_stays_small() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = sampled_log(64, 60).write(dir.path(), "sampled.log");
    let log_bytes = std::fs::metadata(&log).expect("stat").len();
    for (format, ext) in [
        (Format::Html, "html"),
        (Format::Perfetto, "pftrace"),
        (Format::Chrome, "json"),
    ] {
        let t = Instant::now();
        let (code, err, out) = export(&log, format, Side::Waiters, ext);
        let took = t.elapsed();
        assert_eq!(code, 0, "{err}");
        let size = std::fs::metadata(&out).expect("stat").len();
        println!(
            "{format:?}: 64 threads x 60 s sampled every 10 ms ({log_bytes} B of log) -> {size} B in {:.2} s",
            took.as_secs_f64()
        );
        // The binary's peak memory for the same export: threads and objects, not samples.
        let again = out.with_extension(format!("{ext}.2"));
        let b = run_analyzer(
            &[
                "export".as_ref(),
                "--format".as_ref(),
                match format {
                    Format::Html => "html",
                    Format::Perfetto => "perfetto",
                    _ => "chrome",
                }
                .as_ref(),
                "--no-symbols".as_ref(),
                "-o".as_ref(),
                again.as_os_str(),
                log.as_os_str(),
            ],
            std::time::Duration::from_secs(120),
        );
        assert_eq!(b.code, Some(0), "{}", b.stderr);
        println!("{format:?}: peak memory {} MB", b.max_rss_kb / 1024);
        assert!(b.max_rss_kb < 200 * 1024, "{format:?}: {} kB", b.max_rss_kb);
        if format == Format::Html {
            // 64 threads x 2000 buckets, runs of equal buckets written once, and the records.
            assert!(size < 3_000_000, "{size} B");
            let html = std::fs::read_to_string(&out).expect("read");
            assert!(html.contains("worker-163"), "every thread is on the page");
        }
    }
}

/// The thread states' slices the exporters get from the log at `log`, analysed as it was when
/// `analysis` read it; and the notes the second read left.
fn states_of(
    analysis: &waitshim_analyze::Analysis,
    opts: &waitshim_analyze::Options,
) -> (usize, Vec<String>) {
    use waitshim_analyze::export::{slices, Source};
    let src = Source::new(waitshim_analyze::report::Ctx::new(analysis, opts), 0);
    let mut n = 0;
    slices::for_each(&src, |ev| -> Result<(), ()> {
        if let slices::Event::Slice(_) = ev {
            n += 1;
        }
        Ok(())
    })
    .expect("no error of the sink");
    (n, src.notes.take())
}

/// The exporters read a sampled log twice (the model, then the thread states): a log cut short
/// or removed between the two reads gives the states of what could be read and a note on stderr,
/// and a log that grew in between (the shim still writes it) is read as far as the first read
/// went, with no note.
#[test]
fn a_log_changed_between_the_two_reads_of_an_export_is_said_on_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = sampled_log(4, 2).write(dir.path(), "sampled.log");
    let bytes = std::fs::read(&log).expect("read");
    let opts = waitshim_analyze::Options::default();
    let a = waitshim_analyze::analyze(&log).expect("a log");
    let (whole, notes) = states_of(&a, &opts);
    assert!(whole > 0);
    assert_eq!(notes, Vec::<String>::new());

    // Grown: the same slices, no note.
    let mut grown = bytes.clone();
    grown.extend_from_slice(&bytes[bytes.len() / 2..]);
    std::fs::write(&log, &grown).expect("write");
    assert_eq!(states_of(&a, &opts), (whole, Vec::new()));

    // Cut short in the middle of a record: fewer slices, and a note that says why.
    std::fs::write(&log, &bytes[..bytes.len() / 2 + 3]).expect("write");
    let (cut, notes) = states_of(&a, &opts);
    assert!(cut < whole, "{cut} of {whole}");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with(
            "the log changed since it was read: reading it again for the thread states gave "
        ),
        "{}",
        notes[0]
    );

    // Removed.
    std::fs::remove_file(&log).expect("remove");
    let (none, notes) = states_of(&a, &opts);
    assert_eq!(none, 0);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0]
            .starts_with("the log could not be read again for the thread states (cannot open: "),
        "{}",
        notes[0]
    );

    // `export` of an unchanged log: nothing on stderr.
    let cut_log = dir.path().join("cut.log");
    std::fs::write(&cut_log, &bytes).expect("write");
    let (code, err, out) = export(&cut_log, Format::Chrome, Side::Waiters, "json");
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.exists());
}

/// A flight recorder's log: the profile's split of a wait site by waiting thread takes the
/// waits within the recorder's window, as the traces do; the older ones, like the waits it
/// dropped, stay with the site but with no thread.
#[test]
fn a_profile_splits_a_site_by_thread_from_the_flight_recorders_window_only() {
    use waitshim_analyze::export::{samples, Source, WaitsByThread};
    use waitshim_format::events::WaitSpan;
    use waitshim_format::{counter, WaitEvents, WaitSite};
    let mut b = LogBuilder::started("/nonexistent/ring", &["./ring"]);
    b.thread(100, "main").thread(101, "worker");
    b.mutex(1, 0x7000_0000_1000, 0);
    let span = |begin: u64| WaitSpan {
        begin_ns: T0 + begin,
        end_ns: T0 + begin + 2 * MS,
        object_id: 1,
        chain_id: 10,
        reason: counter::ENDED_ACQUIRED,
        shared: false,
        waker: 100,
    };
    // A window of 100 ms before the end at 1 s: the wait at 100 ms is older, the one at 950 ms
    // within it.
    let window = 100 * MS;
    b.push(WaitEvents::pack(101, T0, 0, window, &[span(100 * MS)]));
    b.push(WaitEvents::pack(
        101,
        T0 + 900 * MS,
        0,
        window,
        &[span(950 * MS)],
    ));
    b.counters(1, 10, 3, 6 * MS);
    b.push(WaitSite {
        object_id: 1,
        chain_id: 10,
        count: 3,
        wait_total_ns: 6 * MS,
        wait_max_ns: 2 * MS,
    });
    b.end(1000 * MS, 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = b.write(dir.path(), "ring.log");
    let a = waitshim_analyze::analyze(&log).expect("a log");
    let opts = waitshim_analyze::Options::default();
    let src = Source::new(waitshim_analyze::report::Ctx::new(&a, &opts), 0);
    let by = WaitsByThread::of(&src);
    let mut split: Vec<(Option<u32>, u64, u64)> = samples(&a.model, Side::Waiters, Some(&by))
        .into_iter()
        .filter(|s| s.object_id == 1 && s.chain_id == 10)
        .map(|s| (s.tid, s.count, s.delay_ns))
        .collect();
    split.sort_unstable();
    assert_eq!(split, vec![(None, 2, 4 * MS), (Some(101), 1, 2 * MS)]);
}
