//! Separate debug files and stripped modules, against binaries built and split by the test: a
//! program stripped of everything but linked to its debug file (`.gnu_debuglink`) still has
//! its functions and source lines; one whose debug file is gone or of another build is reported
//! as stripped, with one line of advice.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use goblin::elf::Elf;
use serde_json::Value;
use waitshim_analyze::symbolize::build_id;
use waitshim_analyze::{analyze_bytes, json_report, text_report, Options};
use waitshim_format::*;

const SOURCE: &str = "#include <stdio.h>
static int counter;
int worker(int x) { counter += x; return counter; }
int main(void) { printf(\"%d\\n\", worker(3)); return 0; }
";

const BASE: u64 = 0x5600_0000_0000;

/// Whether the tools the test builds its binaries with are there; says so when not.
fn tools_present() -> bool {
    ["gcc", "objcopy"].iter().all(|tool| {
        let ok = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            // Under CI a missing tool fails the run instead of passing it silently.
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
            assert!(
                !ci,
                "`{tool}` is not installed (needed to build the test's binaries); under CI=true a missing dependency fails the run"
            );
            eprintln!("SKIPPED: `{tool}` is not installed (needed to build the test's binaries)");
        }
        ok
    })
}

fn run(cmd: &mut Command) {
    let status = cmd.status().expect("run a tool");
    assert!(status.success(), "{cmd:?} failed");
}

/// `dir/sym`, built with `-g` from `source`; its functions exported (`-rdynamic`) so that a
/// stripped copy still names them from `.dynsym`.
fn build(dir: &Path, source: &str) -> PathBuf {
    let src = dir.join("sym.c");
    std::fs::write(&src, source).expect("write source");
    let bin = dir.join("sym");
    run(Command::new("gcc")
        .args(["-g", "-O0", "-rdynamic", "-Wl,--build-id=sha1", "-o"])
        .arg(&bin)
        .arg(&src));
    bin
}

/// What the log says of the binary, read before it is stripped.
struct Binary {
    build_id: Vec<u8>,
    segments: Vec<Segment>,
    worker: u64,
}

fn inspect(bin: &Path) -> Binary {
    let bytes = std::fs::read(bin).expect("read binary");
    let elf = Elf::parse(&bytes).expect("ELF");
    let worker = elf
        .syms
        .iter()
        .find(|s| elf.strtab.get_at(s.st_name) == Some("worker"))
        .map(|s| s.st_value)
        .expect("worker's symbol");
    Binary {
        build_id: build_id(&elf, &bytes).expect("build-id"),
        segments: load_segments(&elf),
        worker,
    }
}

/// A log whose mutex was created from inside `worker`.
fn log_for(bin: &Path, b: &Binary) -> LogBuilder {
    let mut log = LogBuilder::started(&bin.display().to_string(), &["sym"]);
    log.push(Module {
        module_id: 1,
        base: BASE,
        build_id: b.build_id.clone(),
        path: bin.display().to_string(),
        segments: b.segments.clone(),
    });
    log.chain(1, &[BASE + b.worker + 1]);
    log.mutex(1, 0x1000, 1);
    log.counters(1, 10, 2, 5 * MS);
    log.end(10 * MS, 0);
    log
}

fn reports(bin: &Path, b: &Binary) -> (String, Value) {
    let log = log_for(bin, b);
    let a = analyze_bytes(&log.bytes, Path::new("sym.log")).expect("log");
    (
        text_report(&a, &Options::default()),
        json_report(&a, &Options::default()),
    )
}

/// `objcopy --only-keep-debug bin debug`.
fn keep_debug(bin: &Path, debug: &Path) {
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(bin)
        .arg(debug));
}

#[test]
fn a_stripped_binary_gets_names_and_lines_from_its_debuglink_file() {
    if !tools_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = build(dir.path(), SOURCE);
    let b = inspect(&bin);
    // The debug file in the binary's `.debug` directory, the binary stripped of everything
    // (the symbol table too) and linked to it.
    let dot_debug = dir.path().join(".debug");
    std::fs::create_dir(&dot_debug).expect("mkdir");
    let debug = dot_debug.join("sym.debug");
    keep_debug(&bin, &debug);
    let mut link = std::ffi::OsString::from("--add-gnu-debuglink=");
    link.push(&debug);
    run(Command::new("objcopy")
        .arg("--strip-all")
        .arg(link)
        .arg(&bin));
    let stripped = std::fs::read(&bin).expect("read");
    let elf = Elf::parse(&stripped).expect("ELF");
    assert!(elf.syms.is_empty(), "the binary kept its symbol table");
    drop(elf);

    let (text, json) = reports(&bin, &b);
    assert!(
        text.contains("mutex#1 @0x1000  created at sym.c:3 (worker)"),
        "{text}"
    );
    assert!(!text.contains("ADVICE"), "{text}");
    assert!(!text.contains("WARNING"), "{text}");
    let symbols = &json["symbols"][0];
    assert_eq!(symbols["ok"], true, "{symbols}");
    assert_eq!(symbols["status"], "symbols and source lines", "{symbols}");
    assert_eq!(symbols["advice"], Value::Null, "{symbols}");
    let site = &json["objects"][0]["creation_site"];
    assert_eq!(site["function"], "worker", "{site}");
    assert_eq!(site["line"], 3, "{site}");

    // The debug file of another build under that name: its CRC32 differs, it is not used, and
    // the binary is what it is, stripped.
    let other_dir = dir.path().join("other");
    std::fs::create_dir(&other_dir).expect("mkdir");
    let other = build(&other_dir, &SOURCE.replace("counter += x", "counter -= x"));
    keep_debug(&other, &debug);
    assert_stripped(&bin, &b);

    // No debug file at all: the same.
    std::fs::remove_file(&debug).expect("remove");
    assert_stripped(&bin, &b);
}

/// The report names `worker` from `.dynsym` only, calls the module stripped, and advises once.
fn assert_stripped(bin: &Path, b: &Binary) {
    let (text, json) = reports(bin, b);
    assert!(
        text.contains("mutex#1 @0x1000  created at worker+0x1 (sym)"),
        "{text}"
    );
    let advice: Vec<&str> = text.lines().filter(|l| l.starts_with("ADVICE: ")).collect();
    assert_eq!(advice.len(), 1, "{text}");
    let path = bin.display().to_string();
    assert!(
        advice[0].starts_with(&format!(
            "ADVICE: {path} has no debug information and is stripped: only exported symbols"
        )),
        "{advice:?}"
    );
    assert!(
        advice[0].contains("install its debug package")
            && advice[0].contains("rebuild it without stripping"),
        "{advice:?}"
    );
    assert!(!text.contains("WARNING"), "{text}");
    let symbols = &json["symbols"][0];
    assert_eq!(symbols["ok"], true, "{symbols}");
    assert!(
        symbols["status"]
            .as_str()
            .is_some_and(|s| s.starts_with("stripped: only exported symbols")),
        "{symbols}"
    );
    assert!(
        symbols["advice"]
            .as_str()
            .is_some_and(|a| a.contains("is stripped")),
        "{symbols}"
    );
    let site = &json["objects"][0]["creation_site"];
    assert_eq!(site["function"], "worker", "{site}");
    assert_eq!(site["line"], Value::Null, "{site}");
}

/// Stripped of its debug information only (`strip --strip-debug`, no link): the symbol table
/// is still there, so it is not "stripped" but "symbols only", with the advice to rebuild
/// with -g.
#[test]
fn a_binary_without_debug_information_but_with_symbols_is_not_called_stripped() {
    if !tools_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = build(dir.path(), SOURCE);
    let b = inspect(&bin);
    run(Command::new("objcopy").arg("--strip-debug").arg(&bin));
    let (text, json) = reports(&bin, &b);
    assert!(
        text.contains("mutex#1 @0x1000  created at worker+0x1 (sym)"),
        "{text}"
    );
    assert_eq!(
        json["symbols"][0]["status"], "symbols only (no debug info)",
        "{json}"
    );
    assert!(!text.contains("stripped"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("ADVICE: ") && l.contains("rebuild it with -g")),
        "{text}"
    );
}
