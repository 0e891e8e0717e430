//! Symbolization against real binaries compiled for the test: function names, file:line from
//! DWARF, demangled C++ names, and the build-id check.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use goblin::elf::program_header::PT_LOAD;
use goblin::elf::Elf;
use serde_json::Value;
use waitshim_analyze::symbolize::build_id;
use waitshim_analyze::{analyze_bytes, json_report, text_report, Options};
use waitshim_format::*;

const C_SOURCE: &str = "#include <stdio.h>
static int counter;
int worker(int x) { counter += x; return counter; }
int main(void) { printf(\"%d\\n\", worker(3)); return 0; }
";

const CXX_SOURCE: &str = "#include <cstdio>
namespace app {
struct Queue { int n = 0; int push(int x); };
int Queue::push(int x) { n += x; return n; }
}
int main() { app::Queue q; std::printf(\"%d\\n\", q.push(2)); return 0; }
";

const BASE: u64 = 0x5600_0000_0000;

/// Compiles `source` with debug info into `dir`, returning the binary.
fn compile(dir: &Path, file: &str, compiler: &str, source: &str) -> PathBuf {
    let src = dir.join(file);
    std::fs::write(&src, source).expect("write source");
    let bin = dir.join(file.split('.').next().unwrap_or("a"));
    let status = Command::new(compiler)
        .args(["-g", "-O0", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "{compiler} failed");
    bin
}

struct Binary {
    build_id: Vec<u8>,
    segments: Vec<Segment>,
    /// st_value of the named function.
    function: u64,
}

fn inspect(bin: &Path, mangled: &str) -> Binary {
    let bytes = std::fs::read(bin).expect("read binary");
    let elf = Elf::parse(&bytes).expect("ELF");
    let function = elf
        .syms
        .iter()
        .find(|s| elf.strtab.get_at(s.st_name) == Some(mangled))
        .map(|s| s.st_value)
        .expect("function symbol");
    Binary {
        build_id: build_id(&elf, &bytes).expect("build-id"),
        segments: elf
            .program_headers
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .map(|p| Segment {
                vaddr: p.p_vaddr,
                memsz: p.p_memsz,
            })
            .collect(),
        function,
    }
}

/// A log whose mutex was created from inside `function` of the binary.
fn log_for(bin: &Path, b: &Binary, logged_build_id: Vec<u8>) -> LogBuilder {
    let mut log = LogBuilder::started(&bin.display().to_string(), &["sym"]);
    log.push(Module {
        module_id: 1,
        base: BASE,
        build_id: logged_build_id,
        path: bin.display().to_string(),
        segments: b.segments.clone(),
    });
    // A return address one byte into the function: `addr - 1` is its first instruction.
    log.chain(1, &[BASE + b.function + 1]);
    log.mutex(1, 0x1000, 1);
    log.counters(1, 10, 2, 5 * MS);
    log.end(10 * MS, 0);
    log
}

#[test]
fn chains_show_function_and_source_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = compile(dir.path(), "sym.c", "cc", C_SOURCE);
    let b = inspect(&bin, "worker");
    let log = log_for(&bin, &b, b.build_id.clone());
    let a = analyze_bytes(&log.bytes, Path::new("sym.log")).expect("log");

    let r = text_report(&a, &Options::default());
    assert!(
        r.contains("mutex#1 @0x1000  created at sym.c:3 (worker)"),
        "{r}"
    );
    assert!(!r.contains("WARNING"), "{r}");

    let j = json_report(&a, &Options::default());
    let site = &j["objects"][0]["creation_site"];
    assert!(
        site["file"].as_str().is_some_and(|f| f.ends_with("sym.c")),
        "{site}"
    );
    assert_eq!(site["line"], 3);
    assert_eq!(site["function"], "worker");
    assert_eq!(site["offset"], 1);
    assert_eq!(j["chains"]["1"][0]["function"], "worker");

    // Without symbols the same frame is the module and offset.
    let r = text_report(
        &a,
        &Options {
            symbols: false,
            ..Options::default()
        },
    );
    assert!(
        r.contains(&format!("created at sym+{:#x}", b.function + 1)),
        "{r}"
    );
}

#[test]
fn chain_frame_reads_function_then_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = compile(dir.path(), "sym.c", "cc", C_SOURCE);
    let b = inspect(&bin, "worker");
    let mut log = log_for(&bin, &b, b.build_id.clone());
    log.open(1, 1, 2, MS, (101, 1));
    let a = analyze_bytes(&log.bytes, Path::new("sym.log")).expect("log");
    let r = text_report(&a, &Options::default());
    assert!(
        r.contains(&format!("#0 worker (sym.c:3)  [sym+{:#x}]", b.function + 1)),
        "{r}"
    );
}

#[test]
fn cxx_names_are_demangled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = compile(dir.path(), "queue.cpp", "c++", CXX_SOURCE);
    let b = inspect(&bin, "_ZN3app5Queue4pushEi");
    let log = log_for(&bin, &b, b.build_id.clone());
    let a = analyze_bytes(&log.bytes, Path::new("q.log")).expect("log");
    let r = text_report(&a, &Options::default());
    assert!(
        r.contains("created at queue.cpp:4 (app::Queue::push(int))"),
        "{r}"
    );
}

#[test]
fn rebuilt_binary_is_not_trusted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = compile(dir.path(), "sym.c", "cc", C_SOURCE);
    let b = inspect(&bin, "worker");
    let log = log_for(&bin, &b, vec![0xde, 0xad, 0xbe, 0xef]);
    let a = analyze_bytes(&log.bytes, Path::new("sym.log")).expect("log");
    let r = text_report(&a, &Options::default());
    assert!(
        r.contains("build-id differs from the log: the file was rebuilt since the run"),
        "{r}"
    );
    assert!(
        r.contains(&format!("created at sym+{:#x}", b.function + 1)),
        "{r}"
    );
    let j: Value = json_report(&a, &Options::default());
    assert_eq!(j["symbols"][0]["ok"], false);
    assert_eq!(j["objects"][0]["creation_site"]["function"], Value::Null);
}

#[test]
fn rust_and_cpp_demangling() {
    use waitshim_analyze::symbolize::demangle;
    assert_eq!(demangle("_ZN3app5Queue4pushEi"), "app::Queue::push(int)");
    assert_eq!(
        demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
        "core::ptr::drop_in_place"
    );
    assert_eq!(demangle("worker"), "worker");
    assert_eq!(demangle("_Z"), "_Z");
}
