//! The thread timeline: the sampler's states as slices in the Chrome and Perfetto traces, and
//! `export --format html`, a page that draws them, checked in a real headless Chromium.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;
use waitshim_tests::{analyzer_path, debian_program, run_both, Launch, Run};

/// A Debian program, installed when missing, one install at a time.
fn tool(program: &str, package: &str) -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    debian_program(program, package)
}

/// `waitshim-analyze export --format FORMAT -o DIR/out.EXT LOG`: the file written.
fn export(log: &Path, format: &str, ext: &str) -> PathBuf {
    waitshim_tests::export_beside(log, format, &format!("out.{ext}"))
}

/// One run of the thread_states fixture (three spinners on one CPU, a reader on a pipe, a
/// locker on a held mutex), shared by the tests of this file.
fn thread_states() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| run_both("thread_states", &[]))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn chrome_trace_shows_each_threads_states_on_a_track_beside_it() {
    let run = thread_states();
    let a = run.analyze();
    let states = &a.log(0).0["thread_states"];
    let file = export(run.single_log(), "chrome", "json");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("chrome is JSON");
    let events = doc["traceEvents"].as_array().expect("events");
    let mut track_names: BTreeMap<u64, String> = BTreeMap::new();
    for e in events.iter().filter(|e| e["name"] == "thread_name") {
        track_names.insert(
            u(&e["tid"]),
            e["args"]["name"].as_str().expect("name").to_string(),
        );
    }
    // Per track: (start, end, name, args), and the time in each state by thread name.
    let mut by_track: BTreeMap<u64, Vec<(f64, f64, String, Value)>> = BTreeMap::new();
    let mut time: BTreeMap<(String, String), f64> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let ts = e["ts"].as_f64().expect("ts");
        let end = ts + e["dur"].as_f64().expect("dur");
        let tid = u(&e["tid"]);
        let name = e["name"].as_str().expect("name").to_string();
        by_track
            .entry(tid)
            .or_default()
            .push((ts, end, name.clone(), e["args"].clone()));
        if e["cat"] == "state" {
            let track = &track_names[&tid];
            *time.entry((track.clone(), name)).or_default() += end - ts;
        }
    }
    // No two slices of one track overlap partly.
    for (tid, mut slices) in by_track.clone() {
        slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<(f64, f64)> = Vec::new();
        for s in &slices {
            while open.last().is_some_and(|o| o.1 <= s.0 + 0.002) {
                open.pop();
            }
            if let Some(p) = open.last() {
                assert!(s.1 <= p.1 + 0.002, "track {tid}: {s:?} overlaps {p:?}");
            }
            open.push((s.0, s.1));
        }
    }
    let ms = |track: &str, state: &str| -> f64 {
        time.iter()
            .filter(|((t, s), _)| t.contains(track) && t.ends_with("states") && s == state)
            .map(|(_, v)| v / 1000.0)
            .sum()
    };
    // The spinners' running time is the kernel's figure the report gives, within one
    // interval; they were ready for the CPU a good part of their lives.
    for i in 1..=3 {
        let name = format!("spinner-{i}");
        let row = states["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .find(|t| t["name"] == name.as_str())
            .expect("spinner row");
        let running = u(&row["running_ns"]) as f64 / 1e6;
        let traced = ms(&format!("\"{name}\""), "Running");
        // Up to one interval may still be carried at the last sample; after the last sample
        // the thread's last state (running) lasts until it exits.
        assert!(
            traced >= running - 12.0 && traced <= running + 40.0,
            "{name}: {traced} ms of Running slices, the report says {running} ms: {time:?}"
        );
        assert!(ms(&format!("\"{name}\""), "Runnable") >= 50.0, "{time:?}");
    }
    assert!(ms("\"reader\"", "Wait: I/O") >= 50.0, "{time:?}");
    assert!(ms("\"locker\"", "Wait: lock") >= 50.0, "{time:?}");
    // The reader's wait names its system call and pipe; split slices say they are estimates.
    let reads: Vec<&Value> = by_track
        .values()
        .flatten()
        .filter(|s| s.2 == "Wait: I/O")
        .map(|s| &s.3)
        .collect();
    assert!(
        reads.iter().any(|a| a["syscall"] == "read"
            && a["what"].as_str().is_some_and(|w| w.starts_with("pipe:["))),
        "{reads:?}"
    );
    assert!(
        by_track.values().flatten().any(|s| s.2 == "Runnable"
            && s.3["split"]
                .as_str()
                .is_some_and(|t| t.contains("proportional"))),
        "no estimate said"
    );
    // The machine's idle CPUs as a counter.
    assert!(
        events.iter().any(|e| e["ph"] == "C"
            && e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("Idle CPUs"))),
        "no idle CPUs counter"
    );
}

#[test]
fn perfetto_trace_has_a_states_track_per_thread_and_an_idle_cpu_counter() {
    let run = thread_states();
    let file = export(run.single_log(), "perfetto", "pftrace");
    let text = waitshim_tests::perfetto_decode(&file);
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())),
        "unknown fields in the trace"
    );
    for name in ["Running", "Runnable", "Wait: lock", "Wait: I/O"] {
        assert_eq!(
            text.matches(&format!("name: \"{name}\"")).count(),
            1,
            "{name} interned once"
        );
    }
    // thread_states has 6 threads: 6 states tracks.
    assert_eq!(text.matches("name: \"States\"").count(), 6, "{text}");
    assert!(
        text.contains("double_counter_value:"),
        "no idle CPUs values"
    );
    let begins = text.matches("type: TYPE_SLICE_BEGIN").count();
    assert_eq!(begins, text.matches("type: TYPE_SLICE_END").count());
}

/// Debian's chromium, installed when missing.
fn chromium() -> PathBuf {
    tool("chromium", "chromium")
}

/// Runs headless Chromium on `page` with `args` (`--dump-dom`, `--screenshot=...`): stdout.
fn chromium_run(page: &Path, args: &[&str]) -> String {
    let home = page.parent().expect("dir");
    let o = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1300,800",
        ])
        .arg(format!(
            "--user-data-dir={}",
            home.join("chromium-profile").display()
        ))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .env("HOME", home)
        .output()
        .expect("run chromium");
    assert!(
        o.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The RGB pixels of a PNG (8-bit RGB or RGBA, not interlaced, as Chromium writes them).
fn png_pixels(bytes: &[u8]) -> (u32, u32, Vec<[u8; 3]>) {
    use std::io::Read;
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut w, mut h, mut channels) = (0u32, 0u32, 0usize);
    let mut idat = Vec::new();
    let mut at = 8;
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let body = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                w = u32::from_be_bytes(body[0..4].try_into().unwrap());
                h = u32::from_be_bytes(body[4..8].try_into().unwrap());
                assert_eq!(body[8], 8, "bit depth");
                assert_eq!(body[12], 0, "interlaced");
                channels = match body[9] {
                    2 => 3,
                    6 => 4,
                    t => panic!("PNG colour type {t}"),
                };
            }
            b"IDAT" => idat.extend_from_slice(body),
            b"IEND" => break,
            _ => {}
        }
        at += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .expect("inflate");
    let stride = w as usize * channels;
    let mut prev = vec![0u8; stride];
    let mut pixels = Vec::with_capacity(w as usize * h as usize);
    for y in 0..h as usize {
        let line = &raw[y * (stride + 1)..(y + 1) * (stride + 1)];
        let (filter, data) = (line[0], &line[1..]);
        let mut cur = vec![0u8; stride];
        for i in 0..stride {
            let a = if i >= channels { cur[i - channels] } else { 0 };
            let b = prev[i];
            let c = if i >= channels { prev[i - channels] } else { 0 };
            let x = data[i];
            cur[i] = match filter {
                0 => x,
                1 => x.wrapping_add(a),
                2 => x.wrapping_add(b),
                3 => x.wrapping_add(((u16::from(a) + u16::from(b)) / 2) as u8),
                4 => {
                    let p = i16::from(a) + i16::from(b) - i16::from(c);
                    let (pa, pb, pc) = (
                        (p - i16::from(a)).abs(),
                        (p - i16::from(b)).abs(),
                        (p - i16::from(c)).abs(),
                    );
                    let pred = if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    };
                    x.wrapping_add(pred)
                }
                f => panic!("PNG filter {f}"),
            };
        }
        for px in cur.chunks(channels) {
            pixels.push([px[0], px[1], px[2]]);
        }
        prev = cur;
    }
    (w, h, pixels)
}

/// Whether the rendered DOM has an objects-table cell naming a mutex whose name ends in `tail`.
fn has_object_cell(dom: &str, tail: &str) -> bool {
    dom.split("<td class=\"obj\">").skip(1).any(|cell| {
        let text = cell.split("</td>").next().unwrap_or("");
        text.starts_with("mutex#") && text.ends_with(tail)
    })
}

/// The text of the rendered DOM's objects-table cells that name objects.
fn object_cells(dom: &str) -> Vec<&str> {
    dom.split("<td class=\"obj\">")
        .skip(1)
        .map(|cell| cell.split("</td>").next().unwrap_or(""))
        .collect()
}

/// Pixels within a few levels of `rgb`.
fn count_near(pixels: &[[u8; 3]], rgb: [u8; 3]) -> usize {
    pixels
        .iter()
        .filter(|p| p.iter().zip(rgb).all(|(&a, b)| a.abs_diff(b) <= 8))
        .count()
}

#[test]
fn html_timeline_renders_in_chromium_with_the_fixtures_objects_and_four_colours() {
    let run = thread_states();
    let page = export(run.single_log(), "html", "html");
    let html = std::fs::read_to_string(&page).expect("read page");
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "the page fetches nothing"
    );
    let dom = chromium_run(&page, &["--dump-dom"]);
    // Rendered by the script: the status line and the objects table's cells.
    assert!(dom.contains("rendered 1 log(s), 6 thread(s)"), "{dom}");
    assert!(has_object_cell(&dom, " m"), "{dom}");
    assert!(dom.contains("thread_states.c:"), "no creation site");
    let shot = page.with_file_name("shot.png");
    chromium_run(&page, &[&format!("--screenshot={}", shot.display())]);
    let (w, h, pixels) = png_pixels(&std::fs::read(&shot).expect("screenshot"));
    assert_eq!((w, h), (1300, 800));
    // Not blank: the spinners' green and blue, the locker's red, the reader's yellow.
    for (what, rgb) in [
        ("running", [0x2c, 0xa0, 0x2c]),
        ("runnable", [0x1f, 0x77, 0xb4]),
        ("tracked wait", [0xd6, 0x27, 0x28]),
        ("other wait", [0xe6, 0xc6, 0x19]),
    ] {
        let n = count_near(&pixels, rgb);
        assert!(n > 200, "{what}: only {n} pixels of {rgb:?}");
    }
}

/// A time as the page prints it (`fmt`: "0 ns", "12.5 µs", "3.40 ms", "1.250 s"), in ns.
fn page_ns(text: &str) -> f64 {
    let (n, unit) = text
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("not a time: {text:?}"));
    let n: f64 = n.parse().unwrap_or_else(|_| panic!("not a time: {text:?}"));
    n * match unit {
        "ns" => 1.0,
        "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => panic!("not a time: {text:?}"),
    }
}

/// The page's range line, "showing A – B of S": (A, B, S) in ns.
fn shown(line: &str) -> (f64, f64, f64) {
    let rest = line
        .trim()
        .strip_prefix("showing ")
        .unwrap_or_else(|| panic!("not a range: {line:?}"));
    let (a, rest) = rest.split_once(" – ").expect("A – B");
    let (b, span) = rest.split_once(" of ").expect("B of S");
    (page_ns(a), page_ns(b), page_ns(span))
}

/// The user zooms and pans the convoy's timeline in a real Chromium, by the page's own
/// controls: "+" halves the view around its middle, → moves it a quarter of its width later,
/// 0 shows the whole run again, the wheel over the middle of the plot zooms in by a fifth around
/// the moment under the pointer, and dragging 100 pixels to the left shows later moments.
/// The events are dispatched by a script added to a copy of the page; the range line the page
/// prints after each says what the view shows.
#[test]
fn html_timeline_zooms_and_pans_by_keys_wheel_and_drag_in_chromium() {
    let run = run_both("convoy", &[]);
    let page = export(run.single_log(), "html", "html");
    let html = std::fs::read_to_string(&page).expect("read page");
    let driver = r#"<pre id="zoomtest"></pre>
<script>
(function () {
  var out = [], range = function () { return document.getElementById("range").textContent; };
  var key = function (k) { window.dispatchEvent(new KeyboardEvent("keydown", { key: k })); };
  var c = document.querySelector("canvas"), box = c.getBoundingClientRect();
  var x = box.left + 230 + (c.width - 230) / 2, y = box.top + 30;
  out.push(range());
  key("+"); out.push(range());
  key("ArrowRight"); out.push(range());
  key("0"); out.push(range());
  c.dispatchEvent(new WheelEvent("wheel", { deltaY: -100, clientX: x, clientY: y, bubbles: true, cancelable: true }));
  out.push(range());
  c.dispatchEvent(new MouseEvent("mousedown", { clientX: x, clientY: y, bubbles: true }));
  window.dispatchEvent(new MouseEvent("mousemove", { clientX: x - 100, clientY: y }));
  window.dispatchEvent(new MouseEvent("mouseup", { clientX: x - 100, clientY: y }));
  out.push(range());
  out.push(String(c.width - 230));
  document.getElementById("zoomtest").textContent = out.join("\n");
})();
</script>
</body>"#;
    assert!(html.contains("</body>"), "no </body> in the page");
    let driven = page.with_file_name("zoom.html");
    std::fs::write(&driven, html.replacen("</body>", driver, 1)).expect("write page");
    let dom = chromium_run(&driven, &["--dump-dom"]);
    let start = dom.find("<pre id=\"zoomtest\">").expect("the driver ran") + 19;
    let end = start + dom[start..].find("</pre>").expect("</pre>");
    let lines: Vec<&str> = dom[start..end].lines().collect();
    assert_eq!(lines.len(), 7, "{lines:?}");
    let plot_w: f64 = lines[6].parse().expect("plot width");
    let views: Vec<(f64, f64, f64)> = lines[..6].iter().map(|l| shown(l)).collect();
    let span = views[0].2;
    assert!(span > 100e6, "the convoy runs for over 100 ms: {lines:?}");
    // The page prints 3 or 4 figures: within half a percent of the span.
    let near = |got: (f64, f64, f64), want: (f64, f64), what: &str| {
        let tol = span * 0.005;
        assert!(
            (got.0 - want.0).abs() <= tol && (got.1 - want.1).abs() <= tol && got.2 == span,
            "{what}: shows {got:?}, expected {want:?} of {span}: {lines:?}"
        );
    };
    near(views[0], (0.0, span), "at first");
    near(views[1], (span / 4.0, span * 3.0 / 4.0), "after +");
    near(views[2], (span * 3.0 / 8.0, span * 7.0 / 8.0), "after →");
    near(views[3], (0.0, span), "after 0");
    near(views[4], (span * 0.1, span * 0.9), "after the wheel");
    let moved = 100.0 / plot_w * span * 0.8;
    near(
        views[5],
        (span * 0.1 + moved, span * 0.9 + moved),
        "after the drag",
    );
}

#[test]
fn html_of_the_convoy_names_its_lock_and_marks_its_records() {
    let run = run_both("convoy", &[]);
    let a = run.analyze();
    let page = export(run.single_log(), "html", "html");
    let dom = chromium_run(&page, &["--dump-dom"]);
    assert!(has_object_cell(&dom, " convoy_lock"), "{dom}");
    let html = std::fs::read_to_string(&page).expect("read page");
    let start = html.find("id=\"data\">").expect("data") + "id=\"data\">".len();
    let end = start + html[start..].find("</script>").expect("end of data");
    let data: Value = serde_json::from_str(&html[start..end]).expect("data is JSON");
    let log = &data["logs"][0];
    assert_eq!(
        log["records"].as_array().expect("records").len(),
        a.log(0)
            .records()
            .iter()
            .filter(|r| !r["closed_at_ns"].is_null())
            .count()
            .min(2000),
        "every closed record is marked"
    );
    assert!(a.log(0).hwm() > 1, "the convoy piles threads up");
    assert!(!log["highwater"].as_array().expect("highwater").is_empty());
}

/// The red of a wait on a tracked object, as the page draws it.
const TRACKED_WAIT: [u8; 3] = [0xd6, 0x27, 0x28];

#[test]
fn html_of_the_lock_condvar_semaphore_rwlock_and_deadlock_fixtures_renders_their_objects_and_waits()
{
    // Each fixture's objects, as the objects table names them: kind and global name (the ids
    // depend on the order the objects were first used in).
    let fixtures: [(&str, &[(&str, &str)]); 5] = [
        ("convoy", &[("mutex#", " convoy_lock")]),
        (
            "cond_queue",
            &[
                ("mutex#", " lock"),
                ("cond#", " not_full"),
                ("cond#", " not_empty"),
            ],
        ),
        ("sem_pool", &[("semaphore#", " pool")]),
        ("rwlock_starve", &[("rwlock#", " lock")]),
        ("abba", &[("mutex#", " mutex[0]"), ("mutex#", " mutex[1]")]),
    ];
    for (fixture, objects) in fixtures {
        let run = if fixture == "abba" {
            // It hangs by design: killed once the log has the deadlock and the two waits in
            // progress that never end.
            let running = Launch::fixture("abba").spawn();
            running.wait_for_stdout("abba: armed");
            running.poll_log("a deadlock and its waits in progress", |log| {
                log.deadlock_waits_listed()
            });
            running.kill()
        } else {
            run_both(fixture, &[])
        };
        let page = export(run.single_log(), "html", "html");
        let dom = chromium_run(&page, &["--dump-dom"]);
        assert!(dom.contains("rendered 1 log(s), "), "{fixture}: {dom}");
        let cells = object_cells(&dom);
        for (kind, tail) in objects {
            assert!(
                cells
                    .iter()
                    .any(|c| c.starts_with(kind) && c.ends_with(tail)),
                "{fixture}: no {kind}..{tail} in the objects table: {cells:?}"
            );
        }
        let shot = page.with_file_name("shot.png");
        chromium_run(&page, &[&format!("--screenshot={}", shot.display())]);
        let (w, h, pixels) = png_pixels(&std::fs::read(&shot).expect("screenshot"));
        assert_eq!((w, h), (1300, 800), "{fixture}");
        // Not blank: each fixture has threads wait on its objects for a good part of the run
        // (the deadlocked two until the end of the log).
        let red = count_near(&pixels, TRACKED_WAIT);
        assert!(red > 200, "{fixture}: only {red} pixels of tracked waits");
    }
}

/// `diff --html`: the convoy with 3 and with 8 threads on one page, each run labelled, both
/// timelines on the axis of the longer run, and the comparison's text above them, which names
/// the convoy's lock.
#[test]
fn diff_html_shows_both_runs_on_one_time_axis_under_the_comparison() {
    let before = run_both("convoy", &["3"]);
    let after = run_both("convoy", &["8"]);
    let page = before
        .single_log()
        .parent()
        .expect("dir")
        .join("convoy-diff.html");
    let o = Command::new(analyzer_path())
        .arg("diff")
        .arg(before.single_log())
        .arg(after.single_log())
        .arg("--html")
        .arg(&page)
        .output()
        .expect("run waitshim-analyze diff");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The text report still goes to stdout.
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("convoy_lock"), "{text}");
    let html = std::fs::read_to_string(&page).expect("read page");
    let start = html.find("id=\"data\">").expect("data") + "id=\"data\">".len();
    let end = start + html[start..].find("</script>").expect("end of data");
    let data: Value = serde_json::from_str(&html[start..end]).expect("data is JSON");
    assert_eq!(data["shared_axis"], true);
    assert_eq!(data["logs"][0]["label"], "before");
    assert_eq!(data["logs"][1]["label"], "after");
    assert_eq!(
        data["diff"].as_str().expect("diff text"),
        text.as_ref(),
        "the page carries the same comparison"
    );
    let dom = chromium_run(&page, &["--dump-dom"]);
    let threads = |i: usize| {
        data["logs"][i]["threads"]
            .as_array()
            .expect("threads")
            .len()
    };
    assert!(
        dom.contains(&format!(
            "rendered 2 log(s), {} thread(s)",
            threads(0) + threads(1)
        )),
        "{dom}"
    );
    assert!(dom.contains("before: convoy"), "{dom}");
    assert!(dom.contains("after: convoy"), "{dom}");
    assert!(dom.contains("id=\"diff\""), "{dom}");
    // One axis, as long as the longer run.
    assert!(dom.contains("on one time axis of "), "{dom}");
}

/// What the timeline's hover shows over each thread, as Chromium renders the page: the page
/// with a script added at its end that moves the mouse over every pixel column of every row
/// (every 4 px down) and notes each tip naming a waker, as `row name` → `object: ...` lines.
fn hover_wakers(page: &Path) -> BTreeMap<String, Vec<String>> {
    const PROBE: &str = r#"<script>
(function () {
  var c = document.querySelector("canvas"), r = c.getBoundingClientRect();
  var tip = document.getElementById("tip"), seen = {};
  for (var y = 0; y < c.height; y += 4) for (var x = 0; x < c.width; x++) {
    c.dispatchEvent(new MouseEvent("mousemove", { clientX: r.left + x + 0.5, clientY: r.top + y + 0.5, bubbles: true }));
    if (tip.style.display !== "block") continue;
    var lines = tip.textContent.split("\n");
    lines.forEach(function (l) { if (l.indexOf("woken by") >= 0) seen[lines[0] + "\t" + l] = 1; });
  }
  var out = document.createElement("pre");
  out.id = "hovered";
  out.textContent = Object.keys(seen).join("\n");
  document.body.appendChild(out);
})();
</script>
"#;
    let html = std::fs::read_to_string(page).expect("read page");
    let at = html.rfind("</body>").expect("</body>");
    let probe = page.with_file_name("hover.html");
    std::fs::write(&probe, format!("{}{PROBE}{}", &html[..at], &html[at..])).unwrap();
    let dom = chromium_run(&probe, &["--dump-dom"]);
    let start = dom.find("<pre id=\"hovered\">").expect("the probe ran") + 18;
    let text = &dom[start..start + dom[start..].find("</pre>").expect("</pre>")];
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in text.lines() {
        let l = l.replace("&quot;", "\"").replace("&amp;", "&");
        let (row, tip) = l.split_once('\t').expect("row and tip");
        out.entry(row.to_string())
            .or_default()
            .push(tip.to_string());
    }
    out
}

#[test]
fn html_hover_over_a_handed_over_wait_says_who_woke_it() {
    let run = waitshim_tests::Launch::fixture("handover").run();
    run.assert_success();
    let a = run.analyze();
    let log = a.log(0);
    let tid = |name: &str| -> u64 {
        log.threads()
            .iter()
            .find(|t| t["name"] == name)
            .and_then(|t| t["tid"].as_u64())
            .unwrap_or_else(|| panic!("thread {name}"))
    };
    let page = export(run.single_log(), "html", "html");
    let hovered = hover_wakers(&page);
    // Each woken thread's row, hovered over its wait, names the object and who woke it.
    for (woken, kind, waker) in [
        ("blocked", "mutex#", "holder"),
        ("sleeper", "cond#", "ringer"),
        ("taker", "semaphore#", "giver"),
        ("dozer", "futex#", "alarm"),
        ("early-0", "barrier#", "closer"),
        ("early-1", "barrier#", "closer"),
    ] {
        let row = format!("thread {} \"{woken}\"", tid(woken));
        let tips = hovered
            .get(&row)
            .unwrap_or_else(|| panic!("no tip naming a waker on the row {row}: {hovered:#?}"));
        let by = format!("woken by thread {} \"{waker}\"", tid(waker));
        assert!(
            tips.iter()
                .any(|t| t.starts_with(&format!("object: {kind}")) && t.ends_with(&by)),
            "{row}: {tips:?}, expected {kind}... {by}"
        );
    }
}
