//! Symbolization against real binaries compiled for the test: function names, file:line from
//! DWARF, demangled C++ names, and the build-id check.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use goblin::elf::Elf;
use serde_json::{json, Value};
use waitshim_analyze::symbolize::{build_id, site_frame, Frame};
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
    compile_with(dir, file, compiler, &["-g", "-O0"], source)
}

fn compile_with(dir: &Path, file: &str, compiler: &str, flags: &[&str], source: &str) -> PathBuf {
    let src = dir.join(file);
    std::fs::write(&src, source).expect("write source");
    let bin = dir.join(file.split('.').next().unwrap_or("a"));
    let status = Command::new(compiler)
        .args(flags)
        .arg("-o")
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
        segments: load_segments(&elf),
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

/// `std::mutex` locked through `std::lock_guard` at -O1: the lock call sits in libstdc++ code
/// inlined into `push` (`__gthread_mutex_lock` ← `std::mutex::lock` ← the guard's constructor).
/// The program defines `pthread_mutex_lock` itself, so the call lands in it and it can print the
/// call's return address (relative to the binary's load base), exactly what the shim records.
const GUARD_SOURCE: &str = r#"#include <cstdio>
#include <mutex>
#include <pthread.h>

extern "C" const char __ehdr_start[];
static unsigned long lock_return, push_return;

static unsigned long offset_of(void *ra)
{
    return (unsigned long)ra - (unsigned long)__ehdr_start;
}

extern "C" __attribute__((noinline)) int pthread_mutex_lock(pthread_mutex_t *) noexcept
{
    lock_return = offset_of(__builtin_return_address(0));
    return 0;
}

extern "C" __attribute__((noinline)) int pthread_mutex_unlock(pthread_mutex_t *) noexcept
{
    return 0;
}

namespace {
std::mutex queue_mutex;
int items;
}

__attribute__((noinline)) void push(int x)
{
    push_return = offset_of(__builtin_return_address(0));
    std::lock_guard<std::mutex> guard(queue_mutex);
    items += x;
}

int main()
{
    push(1);
    std::printf("%#lx %#lx\n", lock_return, push_return);
    return items == 1 ? 0 : 1;
}
"#;
/// The line of the `std::lock_guard` in `GUARD_SOURCE`.
const GUARD_LINE: u32 = 32;

/// A libc that is not on disk: its frames are known by module name only.
const LIBC: &str = "/nonexistent/lib/libc.so.6";
const LIBC_BASE: u64 = 0x7f00_0000_0000;

/// Builds `GUARD_SOURCE` and runs it: the binary, and the return addresses (relative to its base)
/// of the inlined lock call in `push` and of the call of `push` in `main`.
fn guard_binary(dir: &Path) -> (PathBuf, Binary, u64, u64) {
    let bin = compile_with(
        dir,
        "lockq.cpp",
        "c++",
        &["-O1", "-g", "-pthread", "-std=c++20"],
        GUARD_SOURCE,
    );
    let out = Command::new(&bin).output().expect("run the test program");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let offsets: Vec<u64> = text
        .split_whitespace()
        .map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).expect("hex offset"))
        .collect();
    assert_eq!(offsets.len(), 2, "{text}");
    let b = inspect(&bin, "_Z4pushi");
    (bin, b, offsets[0], offsets[1])
}

fn thread(j: &Value, tid: u32) -> &Value {
    j["threads"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["tid"] == tid))
        .unwrap_or_else(|| panic!("no thread {tid}: {}", j["threads"]))
}

/// The mutex was created (first locked) at `frames` (chain 1), where thread 102 then waited for
/// it; thread 101 was started from the same chain.
fn guard_log(bin: &Path, b: &Binary, frames: &[u64]) -> LogBuilder {
    let mut log = LogBuilder::started(&bin.display().to_string(), &["lockq"]);
    log.push(Module {
        module_id: 1,
        base: BASE,
        build_id: b.build_id.clone(),
        path: bin.display().to_string(),
        segments: b.segments.clone(),
    });
    log.push(Module {
        module_id: 2,
        base: LIBC_BASE,
        build_id: Vec::new(),
        path: LIBC.into(),
        segments: vec![Segment {
            vaddr: 0,
            memsz: 0x10_0000,
        }],
    });
    log.chain(1, frames);
    log.mutex(1, 0x4080, 1);
    log.push(ThreadStart {
        tid: 101,
        parent_tid: 100,
        ns: T0 + MS,
        start_routine: 0,
        chain_id: 1,
        is_main: 0,
    });
    log.open(1, 1, 1, 2 * MS, (102, 1));
    log.counters(1, 10, 2, 5 * MS);
    log.end(10 * MS, 1);
    log
}

#[test]
fn std_lock_guard_creation_site_is_the_guard_line_with_inlined_frames_in_the_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bin, b, lock_ret, push_ret) = guard_binary(dir.path());
    let log = guard_log(&bin, &b, &[BASE + lock_ret, BASE + push_ret]);
    let a = analyze_bytes(&log.bytes, Path::new("lockq.log")).expect("log");

    let r = text_report(&a, &Options::default());
    let site = format!("lockq.cpp:{GUARD_LINE} (push(int))");
    assert!(
        r.contains(&format!("mutex#1 @0x4080  created at {site}")),
        "{r}"
    );
    assert!(!r.contains("created at gthr-default.h"), "{r}");
    // The waiter chain: libstdc++'s inlined frames, innermost first, then `push` and `main`.
    let label = format!("[lockq+{lock_ret:#x}]");
    let gthread = r
        .lines()
        .find(|l| l.contains("#0 __gthread_mutex_lock"))
        .unwrap_or_else(|| panic!("no inlined __gthread_mutex_lock frame:\n{r}"));
    assert!(
        gthread.contains("(gthr-default.h:") && gthread.ends_with(&format!("(inlined)  {label}")),
        "{gthread}"
    );
    assert!(
        r.contains("std::mutex::lock() (std_mutex.h:"),
        "no inlined std::mutex::lock frame:\n{r}"
    );
    let push = r
        .lines()
        .find(|l| l.contains(&format!("push(int) (lockq.cpp:{GUARD_LINE})")))
        .unwrap_or_else(|| panic!("no physical push frame:\n{r}"));
    assert!(push.ends_with(&format!(")  {label}")), "{push}");
    assert!(
        r.lines()
            .any(|l| l.contains("main (lockq.cpp:38)") && !l.contains("(inlined)")),
        "{r}"
    );
    // The thread started from the same chain is created at the guard too.
    assert!(
        r.lines()
            .any(|l| l.trim_start().starts_with("101 ") && l.ends_with(&site)),
        "{r}"
    );

    let j = json_report(&a, &Options::default());
    let site = &j["objects"][0]["creation_site"];
    assert!(
        site["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("/lockq.cpp")),
        "{site}"
    );
    assert_eq!(site["line"], GUARD_LINE, "{site}");
    assert_eq!(site["function"], "push(int)", "{site}");
    assert_eq!(site["inlined"], false, "{site}");
    assert_eq!(site["addr"], format!("{:#x}", BASE + lock_ret), "{site}");
    assert_eq!(thread(&j, 101)["created_at"], *site);

    let chain = j["chains"]["1"].as_array().expect("chain 1");
    let inlined: Vec<&Value> = chain.iter().take_while(|f| f["inlined"] == true).collect();
    assert!(inlined.len() >= 2, "{chain:?}");
    // GCC gives this static helper no linkage name: DWARF names it without parameters.
    assert!(
        inlined[0]["function"]
            .as_str()
            .is_some_and(|f| f.starts_with("__gthread_mutex_lock")),
        "{chain:?}"
    );
    assert!(
        inlined[0]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("/gthr-default.h")),
        "{chain:?}"
    );
    for f in &inlined {
        assert_eq!(f["offset"], Value::Null, "{f}");
        assert_eq!(f["module_offset"], lock_ret, "{f}");
    }
    let physical = &chain[inlined.len()];
    // The site is that frame, and says how many frames (the inlined ones) it passed over.
    let mut bare = site.clone();
    let skipped = bare
        .as_object_mut()
        .and_then(|o| o.remove("skipped_frames"));
    assert_eq!(skipped, Some(json!(inlined.len())), "{site}");
    assert_eq!(physical, &bare);
    assert_eq!(physical["offset"], lock_ret - b.function);
    assert_eq!(chain.last().map(|f| &f["function"]), Some(&json!("main")));
}

#[test]
fn creation_site_skips_libc_frames() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bin, b, lock_ret, push_ret) = guard_binary(dir.path());
    // As the shim sees a lock taken inside libc (two frames of it) on behalf of `push`.
    let log = guard_log(
        &bin,
        &b,
        &[
            LIBC_BASE + 0x9_1234,
            LIBC_BASE + 0x2_0040,
            BASE + lock_ret,
            BASE + push_ret,
        ],
    );
    let a = analyze_bytes(&log.bytes, Path::new("lockq.log")).expect("log");

    let j = json_report(&a, &Options::default());
    let site = &j["objects"][0]["creation_site"];
    assert_eq!(site["module_offset"], lock_ret, "{site}");
    assert_eq!(site["function"], "push(int)", "{site}");
    assert_eq!(site["line"], GUARD_LINE, "{site}");
    assert_eq!(thread(&j, 101)["created_at"], *site);
    // The chain itself still starts in libc.
    assert_eq!(j["chains"]["1"][0]["module"], LIBC);
    assert_eq!(j["chains"]["1"][0]["inlined"], false);

    let r = text_report(&a, &Options::default());
    assert!(
        r.contains(&format!("created at lockq.cpp:{GUARD_LINE} (push(int))")),
        "{r}"
    );
    assert!(r.contains("#0 libc.so.6+0x91234\n"), "{r}");
}

#[test]
fn sites_are_the_first_frame_of_the_programs_own_code() {
    let frame = |module: &str, file: Option<&str>| Frame {
        addr: 0x1000,
        module: Some(module.into()),
        module_offset: Some(0x1000),
        file: file.map(str::to_string),
        ..Frame::default()
    };
    let app = "/srv/app/bin/queue";
    let libc = frame("/lib/x86_64-linux-gnu/libc.so.6", None);
    let libstdcxx = frame("/lib/x86_64-linux-gnu/libstdc++.so.6", None);
    let loader = frame("/lib64/ld-linux-x86-64.so.2", None);
    let gthr = frame(
        app,
        Some("/usr/include/x86_64-linux-gnu/c++/12/bits/gthr-default.h"),
    );
    let clang_header = frame(app, Some("/usr/lib/llvm-16/include/c++/v1/__mutex_base"));
    let gcc_header = frame(
        app,
        Some("/usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h"),
    );
    let own = frame(app, Some("/srv/app/src/gthread_pool.cpp"));
    let stripped = frame(app, None);
    for f in [
        &libc,
        &libstdcxx,
        &loader,
        &gthr,
        &clang_header,
        &gcc_header,
    ] {
        assert!(!f.is_user(), "{f:?}");
    }
    assert!(own.is_user() && stripped.is_user());

    let chain = vec![
        libc.clone(),
        gthr.clone(),
        libstdcxx.clone(),
        own.clone(),
        stripped,
    ];
    assert_eq!(site_frame(&chain), Some(&own));
    // Nothing of the program's own: the innermost frame stands for the chain.
    assert_eq!(site_frame(&[gthr.clone(), libc]), Some(&gthr));
    assert_eq!(site_frame(&[]), None);
}
