//! The unwinder on real frames: Rust and C code, signal contexts (on the thread's stack and on
//! an altstack), a minimal-stack thread, PLT entries, and registers that make no sense.

mod common;

use std::ffi::c_void;
use std::hint::black_box;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use common::{function, has_run, names, CLib};
use waitshim_unwind::{backtrace, backtrace_from, backtrace_from_ucontext, Regs};

fn lib() -> &'static CLib {
    static LIB: OnceLock<CLib> = OnceLock::new();
    LIB.get_or_init(|| common::load("frames", true))
}

/// A chain captured into a buffer of 64 frames.
#[repr(C)]
pub struct Chain {
    frames: [u64; 64],
    n: usize,
    skip: std::ops::Range<u64>,
}

impl Chain {
    fn new() -> Chain {
        Chain {
            frames: [0; 64],
            n: 0,
            skip: 0..0,
        }
    }

    fn names(&self) -> Vec<String> {
        names(&self.frames[..self.n], true)
    }
}

#[no_mangle]
#[inline(never)]
extern "C" fn uw_rust_c(c: *mut Chain) {
    // SAFETY: the tests pass a valid, exclusive Chain.
    let c = unsafe { &mut *c };
    c.n = backtrace(&mut c.frames, c.skip.clone());
    black_box(&c);
}

#[no_mangle]
#[inline(never)]
extern "C" fn uw_rust_b(c: *mut Chain) {
    uw_rust_c(black_box(c));
    black_box(c);
}

#[no_mangle]
#[inline(never)]
extern "C" fn uw_rust_a(c: *mut Chain) {
    uw_rust_b(black_box(c));
    black_box(c);
}

#[test]
fn rust_frames_come_in_call_order() {
    let mut c = Chain::new();
    uw_rust_a(&mut c);
    let names = c.names();
    assert!(
        has_run(&names, &["uw_rust_c", "uw_rust_b", "uw_rust_a"]),
        "{names:?}"
    );
    // The first frame is the capture itself, then uw_rust_c.
    assert_eq!(names[1], "uw_rust_c", "{names:?}");
    // The chain goes on into the test harness and ends at the thread's start.
    assert!(c.n > 6 && c.n < 64, "{names:?}");
}

#[no_mangle]
#[inline(never)]
extern "C" fn uw_callback(arg: *mut c_void) {
    uw_rust_c(black_box(arg as *mut Chain));
    // Not the same code as uw_rust_b's, which the compiler would merge with it.
    black_box(arg as usize + 1);
}

#[no_mangle]
#[inline(never)]
extern "C" fn uw_into_c(c: *mut Chain) {
    (lib().c_top)(uw_callback, c as *mut c_void);
    black_box(c);
}

#[test]
fn c_frames_through_the_plt_and_an_rbp_based_frame_come_in_call_order() {
    lib();
    let mut c = Chain::new();
    uw_into_c(&mut c);
    let names = c.names();
    assert!(
        has_run(
            &names,
            &[
                "uw_rust_c",
                "uw_callback",
                "c_leaf",
                "c_alloca",
                "c_mid",
                "c_top",
                "uw_into_c"
            ]
        ),
        "{names:?}"
    );
}

#[test]
fn code_loaded_after_the_table_was_built_is_found_by_a_capture() {
    // Loaded without telling the unwinder, as glibc's own loads or a library loaded by a
    // constructor during a dlopen: the capture sees it is missing and builds the table again.
    let late = common::load("late", false);
    let mut c = Chain::new();
    (late.c_top)(uw_callback, &mut c as *mut Chain as *mut c_void);
    let names = c.names();
    assert!(
        has_run(
            &names,
            &["uw_callback", "c_leaf", "c_alloca", "c_mid", "c_top"]
        ),
        "{names:?}"
    );
}

#[test]
fn frames_in_the_skipped_range_are_left_out_at_the_start() {
    let mut c = Chain::new();
    uw_rust_a(&mut c);
    let all = c.frames[..c.n].to_vec();
    // The same path again, leaving out the capture's own frame.
    c.skip = all[0]..all[0] + 1;
    uw_rust_a(&mut c);
    assert_eq!(c.n, all.len() - 1);
    // Up to uw_rust_a's return address, which is another call site of this test.
    assert_eq!(&c.frames[..3], &all[1..4]);
}

/// The C spin loop's code range, for the handler to see where it interrupted.
static SPIN_LO: AtomicU64 = AtomicU64::new(0);
static SPIN_HI: AtomicU64 = AtomicU64::new(0);
static STOP: AtomicI32 = AtomicI32::new(0);
/// What the handler saw: the interrupted context's chain and its own chain.
static FROM_UCONTEXT: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
static FROM_HANDLER: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
static N_UCONTEXT: AtomicUsize = AtomicUsize::new(0);
static N_HANDLER: AtomicUsize = AtomicUsize::new(0);

#[no_mangle]
extern "C" fn uw_on_signal(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
    let rip =
        unsafe { (*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_RIP as usize] }
            as u64;
    // Only a signal that interrupted the spin loop itself counts: the sender tries again.
    if rip < SPIN_LO.load(Ordering::Relaxed) || rip >= SPIN_HI.load(Ordering::Relaxed) {
        return;
    }
    let mut f = [0u64; 64];
    // SAFETY: as above.
    let n = unsafe { backtrace_from_ucontext(ctx, &mut f, 0..0) };
    for (slot, &v) in FROM_UCONTEXT.iter().zip(&f[..n]) {
        slot.store(v, Ordering::Relaxed);
    }
    N_UCONTEXT.store(n, Ordering::Relaxed);
    let n = backtrace(&mut f, 0..0);
    for (slot, &v) in FROM_HANDLER.iter().zip(&f[..n]) {
        slot.store(v, Ordering::Relaxed);
    }
    N_HANDLER.store(n, Ordering::Relaxed);
    STOP.store(1, Ordering::Release);
}

#[no_mangle]
#[inline(never)]
extern "C" fn uw_spinning_thread(altstack: bool) {
    if altstack {
        let size = 64 * 1024;
        let stack = Box::leak(vec![0u8; size].into_boxed_slice());
        let ss = libc::stack_t {
            ss_sp: stack.as_mut_ptr() as *mut c_void,
            ss_flags: 0,
            ss_size: size,
        };
        // SAFETY: installs a leaked buffer as this thread's altstack.
        assert_eq!(unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) }, 0);
    }
    // Learn this thread's stack bounds outside the handler, as the shim's threads do.
    let mut f = [0u64; 4];
    backtrace(&mut f, 0..0);
    (lib().c_spin_top)(STOP.as_ptr());
    black_box(altstack);
}

fn run_signal_case(altstack: bool) -> (Vec<String>, Vec<String>) {
    let (_, lo, size) = common::symbol(
        // SAFETY: only the address of the symbol is taken.
        unsafe { libc::dlsym(lib().handle, c"c_spin".as_ptr()) } as u64,
    )
    .expect("c_spin");
    SPIN_LO.store(lo, Ordering::Relaxed);
    SPIN_HI.store(lo + size, Ordering::Relaxed);
    STOP.store(0, Ordering::Relaxed);
    // SAFETY: a handler with the SA_SIGINFO signature for SIGUSR1, which nothing else uses here.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = uw_on_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | if altstack { libc::SA_ONSTACK } else { 0 };
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let t = std::thread::spawn(move || uw_spinning_thread(altstack));
    use std::os::unix::thread::JoinHandleExt;
    let pt = t.as_pthread_t();
    while STOP.load(Ordering::Acquire) == 0 {
        // SAFETY: the thread is alive until STOP is set (it spins until then).
        unsafe { libc::pthread_kill(pt, libc::SIGUSR1) };
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    t.join().expect("spinning thread");
    let load = |a: &[AtomicU64], n: &AtomicUsize| -> Vec<u64> {
        a[..n.load(Ordering::Relaxed)]
            .iter()
            .map(|v| v.load(Ordering::Relaxed))
            .collect()
    };
    let uc = load(&FROM_UCONTEXT, &N_UCONTEXT);
    let handler = load(&FROM_HANDLER, &N_HANDLER);
    // Through the handler's own frames and glibc's signal trampoline: the frame after the
    // trampoline is the interrupted one, named by its exact program counter.
    let at = handler
        .iter()
        .position(|&pc| pc == uc[0])
        .unwrap_or_else(|| panic!("the interrupted pc is not in the handler's chain"));
    let mut after = vec![function(handler[at], true)];
    after.extend(names(&handler[at + 1..], false));
    (names(&uc, true), after)
}

#[test]
fn signal_contexts_unwind_from_the_ucontext_and_through_the_trampoline() {
    // One test for both: they share the handler and its statics.
    for altstack in [false, true] {
        let (uc, handler) = run_signal_case(altstack);
        let want = ["c_spin", "c_spin_mid", "c_spin_top", "uw_spinning_thread"];
        assert!(has_run(&uc, &want), "altstack {altstack}: {uc:?}");
        assert_eq!(uc[0], "c_spin");
        assert!(has_run(&handler, &want), "altstack {altstack}: {handler:?}");
        assert!(uc.len() < 64 && handler.len() < 64);
    }
}

#[no_mangle]
#[inline(never)]
extern "C" fn uw_min_stack_thread(arg: *mut c_void) -> *mut c_void {
    (lib().c_top)(uw_callback, arg);
    black_box(arg)
}

#[test]
fn a_thread_with_the_minimum_stack_unwinds_to_its_start() {
    lib();
    let mut c = Chain::new();
    // SAFETY: a thread with a PTHREAD_STACK_MIN stack running uw_min_stack_thread on `c`,
    // joined before `c` goes away.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        assert_eq!(
            libc::pthread_attr_setstacksize(&mut attr, libc::PTHREAD_STACK_MIN),
            0
        );
        let mut t: libc::pthread_t = 0;
        let rc = libc::pthread_create(
            &mut t,
            &attr,
            uw_min_stack_thread,
            &mut c as *mut Chain as *mut c_void,
        );
        assert_eq!(rc, 0);
        libc::pthread_join(t, std::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
    }
    let names = c.names();
    assert!(
        has_run(
            &names,
            &[
                "c_leaf",
                "c_alloca",
                "c_mid",
                "c_top",
                "uw_min_stack_thread"
            ]
        ),
        "{names:?}"
    );
    // uw_min_stack_thread is called by glibc's start_thread, called by clone3, where the
    // return address is undefined: the chain ends there, two frames later.
    let at = names
        .iter()
        .position(|n| n == "uw_min_stack_thread")
        .unwrap();
    assert!(c.n <= at + 3, "{names:?}");
}

/// Bytes of the thread stack below the caller that an unwind into a 64-frame buffer touched.
static STACK_USED: AtomicUsize = AtomicUsize::new(0);
const PAINT: u8 = 0xa5;

#[no_mangle]
#[inline(never)]
extern "C" fn uw_measure_warm() -> usize {
    let mut frames = [0u64; 64];
    let n = backtrace(&mut frames, 0..0);
    black_box(&frames);
    n
}

/// Another call site, so that the row of its frame is not cached yet: decoded, the deepest
/// path of an unwind.
#[no_mangle]
#[inline(never)]
extern "C" fn uw_measure_cold() -> usize {
    let mut frames = [0u64; 64];
    let n = backtrace(&mut frames, 0..0);
    black_box(&frames);
    n + black_box(0)
}

extern "C" fn painted_thread(arg: *mut c_void) -> *mut c_void {
    let lo = arg as u64;
    // Warm up: bounds learnt, module table built, rows cached.
    uw_measure_warm();
    for measure in [uw_measure_warm as extern "C" fn() -> usize, uw_measure_cold] {
        let sp: u64;
        // SAFETY: reads the stack pointer.
        unsafe { std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack)) };
        // Paint everything below this frame, without calling anything.
        let mut p = lo;
        while p < sp - 128 {
            // SAFETY: below our own stack pointer, inside this thread's stack.
            unsafe { std::ptr::write_volatile(p as *mut u8, PAINT) };
            p += 1;
        }
        let n = measure();
        assert!(n > 3);
        let mut low = lo;
        // SAFETY: as above.
        while low < sp && unsafe { std::ptr::read_volatile(low as *const u8) } == PAINT {
            low += 1;
        }
        STACK_USED.fetch_max((sp - low) as usize, Ordering::Relaxed);
    }
    std::ptr::null_mut()
}

#[test]
fn an_unwind_uses_less_than_2_kib_of_stack_with_its_64_frame_buffer() {
    lib();
    let size = 256 * 1024;
    let stack = vec![0u8; size].into_boxed_slice();
    let lo = stack.as_ptr() as u64;
    // SAFETY: the thread runs on `stack`, which outlives it (joined below).
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setstack(&mut attr, stack.as_ptr() as *mut c_void, size);
        let mut t: libc::pthread_t = 0;
        assert_eq!(
            libc::pthread_create(&mut t, &attr, painted_thread, lo as *mut c_void),
            0
        );
        libc::pthread_join(t, std::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
    }
    let used = STACK_USED.load(Ordering::Relaxed);
    println!("stack used by an unwind, with the caller's 64-frame buffer: {used} bytes");
    // Unoptimised code keeps every temporary in its own stack slot.
    if !cfg!(debug_assertions) {
        assert!(used <= 2048, "{used} bytes");
    }
    drop(stack);
}

/// The sections named `.plt` of an ELF file: (address, size).
fn plt_of(path: &std::path::Path) -> (u64, u64) {
    let b = std::fs::read(path).expect("read the library");
    let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let shoff = u64_at(0x28) as usize;
    let (shentsize, shnum, shstrndx) = (u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let strtab = u64_at(shoff + shstrndx * shentsize + 0x18) as usize;
    for i in 0..shnum {
        let sh = shoff + i * shentsize;
        let name_at = strtab + u32_at(sh);
        let name = &b[name_at..name_at + b[name_at..].iter().position(|&c| c == 0).unwrap()];
        if name == b".plt" {
            return (u64_at(sh + 0x10), u64_at(sh + 0x20));
        }
    }
    panic!("no .plt in {}", path.display());
}

#[test]
fn a_pc_in_a_plt_entry_finds_its_return_address_before_and_after_the_push() {
    let lib = lib();
    let (plt, size) = plt_of(&lib.path);
    assert!(size >= 32, "no PLT entry");
    // SAFETY: Dl_info is plain pointers, for which zero is a valid value; dladdr on a function
    // of the library fills it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    assert_ne!(
        unsafe { libc::dladdr(lib.c_top as *const c_void, &mut info) },
        0
    );
    let base = info.dli_fbase as u64;
    // A return address inside c_top, as if c_top had called through the PLT.
    let ret = lib.c_top as usize as u64 + 1;
    // Entry 1 (entry 0 is the resolver's): `jmp *GOT` (6 bytes), `push $index` (5 bytes),
    // `jmp .plt`. At offset 0 the return address is at rsp; from offset 11 on, at rsp + 8.
    for (offset, stack) in [(0u64, [ret, 0, 0, 0]), (11, [7, ret, 0, 0])] {
        let stack = black_box(stack);
        let regs = Regs {
            rip: base + plt + 16 + offset,
            rsp: stack.as_ptr() as u64,
            ..Regs::default()
        };
        let mut out = [0u64; 8];
        let n = backtrace_from(&regs, &mut out, 0..0);
        assert!(n >= 2, "offset {offset}: {:?}", &out[..n]);
        assert_eq!(out[1], ret, "offset {offset}");
    }
}

/// xorshift: deterministic junk.
fn junk(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[test]
fn registers_that_make_no_sense_give_a_short_chain_and_never_a_crash() {
    let lib = lib();
    let code = lib.c_top as usize as u64;
    let mut out = [0u64; 64];
    // A program counter in no object.
    let regs = Regs {
        rip: 0x1234,
        rsp: &out as *const _ as u64,
        ..Regs::default()
    };
    assert_eq!(backtrace_from(&regs, &mut out, 0..0), 1);
    // Real code, with the stack pointer in unmapped memory (just past a page unmapped here).
    // SAFETY: maps then unmaps a page of our own.
    let hole = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        libc::munmap(p, 4096);
        p as u64
    };
    for sp in [hole, hole + 2048, 8, u64::MAX - 7, 0] {
        let regs = Regs {
            rip: code + 4,
            rsp: sp,
            rbp: sp,
            ..Regs::default()
        };
        assert_eq!(backtrace_from(&regs, &mut out, 0..0), 1, "sp {sp:#x}");
    }
    // Junk everywhere: program counters in real code, stacks of random words (some pointing
    // back into the buffer, some into code), random frame pointers.
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = vec![0u64; 4096];
    let libc_code = libc::malloc as *const () as usize as u64;
    for round in 0..3000 {
        let b = buf.as_ptr() as u64;
        for w in buf.iter_mut() {
            *w = match junk(&mut s) % 4 {
                0 => b + junk(&mut s) % (4096 * 8),
                1 => code + junk(&mut s) % 512,
                2 => libc_code + junk(&mut s) % 65536,
                _ => junk(&mut s),
            };
        }
        let pick = |s: &mut u64| match junk(s) % 3 {
            0 => b + junk(s) % (4096 * 8),
            1 => junk(s),
            _ => junk(s) % 65536,
        };
        let regs = Regs {
            rip: if round % 2 == 0 {
                code + junk(&mut s) % 512
            } else {
                libc_code + junk(&mut s) % 65536
            },
            rsp: b + junk(&mut s) % (4000 * 8),
            rbp: pick(&mut s),
            rbx: pick(&mut s),
            r12: pick(&mut s),
            r13: pick(&mut s),
            r14: pick(&mut s),
            r15: pick(&mut s),
        };
        let n = backtrace_from(&regs, &mut out, 0..0);
        assert!((1..=64).contains(&n));
    }
    black_box(&buf);
}

/// A stack handed over to a thread, whose lowest page the program made its own guard.
static GUARD: AtomicU64 = AtomicU64::new(0);
static GUARD_FRAMES: AtomicUsize = AtomicUsize::new(0);

extern "C" fn guarded_thread(_: *mut c_void) -> *mut c_void {
    let mut out = [0u64; 8];
    // Learn the stack bounds (they include the guard page), then unwind a context whose stack
    // pointer lies in the guard page.
    backtrace(&mut out, 0..0);
    let guard = GUARD.load(Ordering::Relaxed);
    let regs = Regs {
        rip: lib().c_top as usize as u64 + 4,
        rsp: guard + 64,
        rbp: guard + 128,
        ..Regs::default()
    };
    GUARD_FRAMES.store(backtrace_from(&regs, &mut out, 0..0), Ordering::Relaxed);
    std::ptr::null_mut()
}

#[test]
fn a_stack_pointer_in_the_guard_page_of_a_handed_over_stack_ends_the_chain() {
    lib();
    let size = 256 * 1024;
    // SAFETY: a private mapping of our own, its lowest page made inaccessible, used as the
    // thread's stack until it is joined, then unmapped.
    unsafe {
        let mem = libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(mem, libc::MAP_FAILED);
        assert_eq!(libc::mprotect(mem, 4096, libc::PROT_NONE), 0);
        GUARD.store(mem as u64, Ordering::Relaxed);
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setstack(&mut attr, mem, size);
        let mut t: libc::pthread_t = 0;
        assert_eq!(
            libc::pthread_create(&mut t, &attr, guarded_thread, std::ptr::null_mut()),
            0
        );
        libc::pthread_join(t, std::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        libc::munmap(mem, size);
    }
    assert_eq!(GUARD_FRAMES.load(Ordering::Relaxed), 1);
}

#[test]
fn errno_is_kept() {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = 1234 };
    let regs = Regs {
        rip: lib().c_top as usize as u64 + 4,
        rsp: 8,
        ..Regs::default()
    };
    let mut out = [0u64; 8];
    backtrace_from(&regs, &mut out, 0..0);
    backtrace(&mut out, 0..0);
    // SAFETY: as above.
    assert_eq!(unsafe { *libc::__errno_location() }, 1234);
}

/// Where one path's chain was read, and whether it is still there when `check` runs at the same
/// depth through `common`.
#[inline(never)]
fn at_the_helper(capture: bool, saved: &mut ([u64; 64], [u64; 64], usize)) -> bool {
    if capture {
        let (frames, slots, n) = saved;
        *n = waitshim_unwind::backtrace_slots(&mut frames[..16], Some(&mut slots[..16]), 0..0);
        true
    } else {
        // From the return address into `common` on: the first two frames are in this
        // function's own calls, which differ between capture and check.
        let n = saved.2;
        let mut now = [0u64; 64];
        waitshim_unwind::read_slots(&saved.1[2..n], &mut now[2..n]) && now[2..n] == saved.0[2..n]
    }
}

#[inline(never)]
fn common(capture: bool, saved: &mut ([u64; 64], [u64; 64], usize)) -> bool {
    black_box(at_the_helper(black_box(capture), saved))
}

#[inline(never)]
fn orders(capture: bool, saved: &mut ([u64; 64], [u64; 64], usize)) -> bool {
    black_box(1u8);
    black_box(common(capture, saved))
}

#[inline(never)]
fn audit(capture: bool, saved: &mut ([u64; 64], [u64; 64], usize)) -> bool {
    black_box(2u16);
    black_box(common(capture, saved))
}

/// Two callers of one helper, at the same depth: the chain captured through one is found on
/// the stack again through it, never through the other (the shim's chain cache relies on it).
#[test]
fn a_chain_is_still_there_through_its_own_path_and_not_through_another() {
    type Path = fn(bool, &mut ([u64; 64], [u64; 64], usize)) -> bool;
    let mut saved = ([0u64; 64], [0u64; 64], 0usize);
    let mut found = Vec::new();
    // One call instruction for all three, so that only `orders` and `audit` differ.
    let paths: Vec<(Path, bool)> = vec![(orders, true), (orders, false), (audit, false)];
    for (path, capture) in black_box(paths) {
        found.push(path(capture, &mut saved));
    }
    assert!(saved.2 >= 5, "{} frames", saved.2);
    assert!(saved.1[1..5].iter().all(|&s| s != 0));
    assert_eq!(
        found,
        [true, true, false],
        "captured; the same path; another caller"
    );
}
