//! A seccomp filter the program installs, judged before it is in force: would any system call
//! the shim makes (as the shim makes it) be answered by killing, trapping or a tracer's or
//! supervisor's say? The filter is a classic BPF program over `struct seccomp_data`; it is run
//! here, for each of those calls, with the arguments the shim passes. A filter that only
//! allows, logs or fails some of them with an errno leaves the shim tracing (it copes with a
//! refused call); any other answer to one of them ends tracing first (`track::confining`).

/// `struct seccomp_data` as the filter reads it: `nr`, `arch`, `instruction_pointer`, `args`.
const DATA_LEN: usize = 64;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

/// The actions (`SECCOMP_RET_*`, the high 16 bits) that leave the process as it was.
const RET_ACTION_FULL: u32 = 0xffff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_LOG: u32 = 0x7ffc_0000;
const RET_ALLOW: u32 = 0x7fff_0000;

/// One call the shim makes: its number and the arguments a filter might look at (pointers as
/// 0: a filter cannot read through them).
struct Call(libc::c_long, [u64; 6]);

/// The system calls the shim makes once it runs, on the program's threads and its own, with
/// the arguments that matter to a filter.
fn calls() -> Vec<Call> {
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    let anon = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
    let priv_ = libc::FUTEX_PRIVATE_FLAG as u64;
    let ro = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
    let rw_file = (libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
    let mut c = vec![
        Call(
            libc::SYS_futex,
            [0, libc::FUTEX_WAIT as u64 | priv_, 0, 0, 0, 0],
        ),
        Call(
            libc::SYS_futex,
            [0, libc::FUTEX_WAKE as u64 | priv_, 1, 0, 0, 0],
        ),
        Call(libc::SYS_futex, [0, libc::FUTEX_WAIT as u64, 0, 0, 0, 0]),
        Call(
            libc::SYS_futex,
            [0, libc::FUTEX_WAKE as u64, i32::MAX as u64, 0, 0, 0],
        ),
        Call(libc::SYS_mmap, [0, 1 << 16, rw, anon, u64::MAX, 0]),
        Call(
            libc::SYS_mmap,
            [
                0,
                1 << 16,
                rw,
                anon | libc::MAP_NORESERVE as u64,
                u64::MAX,
                0,
            ],
        ),
        Call(libc::SYS_munmap, [0; 6]),
        Call(
            libc::SYS_mremap,
            [0, 0, 0, libc::MREMAP_MAYMOVE as u64, 0, 0],
        ),
        Call(libc::SYS_mremap, [0; 6]),
        Call(
            libc::SYS_mprotect,
            [0, 4096, libc::PROT_NONE as u64, 0, 0, 0],
        ),
        Call(libc::SYS_openat, [libc::AT_FDCWD as u64, 0, ro, 0, 0, 0]),
        Call(libc::SYS_openat, [3, 0, ro, 0, 0, 0]),
        Call(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as u64,
                0,
                ro | libc::O_DIRECTORY as u64,
                0,
                0,
                0,
            ],
        ),
        Call(
            libc::SYS_openat,
            [libc::AT_FDCWD as u64, 0, rw_file, 0, 0, 0],
        ),
        Call(libc::SYS_close, [3, 0, 0, 0, 0, 0]),
        Call(libc::SYS_read, [3, 0, 4096, 0, 0, 0]),
        Call(libc::SYS_pread64, [3, 0, 4096, 0, 0, 0]),
        Call(libc::SYS_write, [2, 0, 100, 0, 0, 0]),
        Call(libc::SYS_lseek, [3, 0, libc::SEEK_SET as u64, 0, 0, 0]),
        Call(libc::SYS_getdents64, [3, 0, 4096, 0, 0, 0]),
        Call(libc::SYS_fstat, [3, 0, 0, 0, 0, 0]),
        Call(
            libc::SYS_newfstatat,
            [3, 0, 0, libc::AT_EMPTY_PATH as u64, 0, 0],
        ),
        Call(
            libc::SYS_statx,
            [3, 0, libc::AT_EMPTY_PATH as u64, 0xfff, 0, 0],
        ),
        Call(
            libc::SYS_readlinkat,
            [libc::AT_FDCWD as u64, 0, 0, 4096, 0, 0],
        ),
        Call(libc::SYS_readlink, [0, 0, 4096, 0, 0, 0]),
        Call(libc::SYS_fallocate, [3, 0, 0, 1 << 20, 0, 0]),
        Call(libc::SYS_ftruncate, [3, 1 << 20, 0, 0, 0, 0]),
        Call(libc::SYS_fstatfs, [3, 0, 0, 0, 0, 0]),
        Call(libc::SYS_msync, [0, 0, libc::MS_ASYNC as u64, 0, 0, 0]),
        Call(libc::SYS_msync, [0, 0, libc::MS_SYNC as u64, 0, 0, 0]),
        Call(libc::SYS_process_vm_readv, [0, 0, 1, 0, 1, 0]),
        Call(libc::SYS_sched_yield, [0; 6]),
        Call(libc::SYS_nanosleep, [0; 6]),
        Call(
            libc::SYS_clock_nanosleep,
            [libc::CLOCK_MONOTONIC as u64, 0, 0, 0, 0, 0],
        ),
        Call(
            libc::SYS_clock_gettime,
            [libc::CLOCK_MONOTONIC as u64, 0, 0, 0, 0, 0],
        ),
        Call(
            libc::SYS_clock_gettime,
            [libc::CLOCK_THREAD_CPUTIME_ID as u64, 0, 0, 0, 0, 0],
        ),
        Call(libc::SYS_gettid, [0; 6]),
        Call(libc::SYS_getpid, [0; 6]),
        Call(
            libc::SYS_getrusage,
            [libc::RUSAGE_THREAD as u64, 0, 0, 0, 0, 0],
        ),
        Call(
            libc::SYS_getrlimit,
            [libc::RLIMIT_NOFILE as u64, 0, 0, 0, 0, 0],
        ),
        Call(
            libc::SYS_prlimit64,
            [0, libc::RLIMIT_NOFILE as u64, 0, 0, 0, 0],
        ),
        Call(libc::SYS_prctl, [libc::PR_GET_NAME as u64, 0, 0, 0, 0, 0]),
        Call(libc::SYS_prctl, [libc::PR_SET_NAME as u64, 0, 0, 0, 0, 0]),
        Call(
            libc::SYS_prctl,
            [libc::PR_GET_DUMPABLE as u64, 0, 0, 0, 0, 0],
        ),
        Call(libc::SYS_tgkill, [0, 0, 0, 0, 0, 0]),
        Call(
            libc::SYS_rt_sigprocmask,
            [libc::SIG_SETMASK as u64, 0, 0, 8, 0, 0],
        ),
        Call(
            libc::SYS_rt_sigprocmask,
            [libc::SIG_UNBLOCK as u64, 0, 0, 8, 0, 0],
        ),
        Call(libc::SYS_rt_sigaction, [0, 0, 0, 8, 0, 0]),
        Call(
            libc::SYS_madvise,
            [0, 0, libc::MADV_DONTNEED as u64, 0, 0, 0],
        ),
        Call(
            libc::SYS_getsockopt,
            [3, libc::SOL_SOCKET as u64, 0, 0, 0, 0],
        ),
        Call(libc::SYS_getsockname, [3, 0, 0, 0, 0, 0]),
        Call(libc::SYS_getpeername, [3, 0, 0, 0, 0, 0]),
        Call(libc::SYS_pidfd_open, [0; 6]),
        Call(libc::SYS_pidfd_getfd, [0; 6]),
        Call(libc::SYS_exit, [0; 6]),
    ];
    // The shim's own thread, made at the program's first pthread_create: its start.
    c.push(Call(libc::SYS_clone3, [0, 88, 0, 0, 0, 0]));
    c.push(Call(
        libc::SYS_unshare,
        [libc::CLONE_FILES as u64, 0, 0, 0, 0, 0],
    ));
    c.push(Call(
        libc::SYS_close_range,
        [0, u32::MAX as u64, 0, 0, 0, 0],
    ));
    c
}

/// Whether the shim may go on tracing once filter `prog` (the address of a `struct
/// sock_fprog`, as the program passes it to `prctl` or `seccomp`) is in force: no call of the
/// shim's would be answered otherwise than allowed, logged or failed with an errno. The
/// structure and the instructions are read through the kernel (`process_vm_readv`), so that a
/// filter at an address that is not mapped gets the program the kernel's EFAULT, as without the
/// shim, and tracing goes on (no filter is installed); false when the filter cannot be read
/// otherwise (a filter already in force refuses the read) or would not run.
pub fn leaves_the_shim_be(prog: usize) -> bool {
    // struct sock_fprog { unsigned short len; struct sock_filter *filter; }: 16 bytes.
    let mut head = [0u8; 16];
    match crate::layout::read_into(prog, &mut head) {
        Ok(()) => {}
        Err(e) => return e == libc::EFAULT,
    }
    let len = usize::from(u16::from_ne_bytes([head[0], head[1]]));
    let filter = u64::from_ne_bytes(head[8..16].try_into().expect("8 bytes")) as usize;
    if len == 0 || len > 4096 {
        return false;
    }
    // Up to 32 KiB: from the shim's own heap, not the program's stack.
    let mut bytes = vec![0u8; len * std::mem::size_of::<libc::sock_filter>()];
    if let Err(e) = crate::layout::read_into(filter, &mut bytes) {
        return e == libc::EFAULT;
    }
    let filter: Vec<libc::sock_filter> = bytes
        .chunks_exact(8)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    calls().iter().all(|Call(nr, args)| {
        let action = run(&filter, *nr as u32, args).map_or(0, |r| r & RET_ACTION_FULL);
        matches!(action, RET_ALLOW | RET_LOG | RET_ERRNO)
    })
}

/// Runs classic BPF program `filter` on the seccomp data of call `nr` with `args`: the value
/// it returns, None if the program is not one the kernel would accept as it runs.
fn run(filter: &[libc::sock_filter], nr: u32, args: &[u64; 6]) -> Option<u32> {
    let mut data = [0u8; DATA_LEN];
    data[0..4].copy_from_slice(&nr.to_ne_bytes());
    data[4..8].copy_from_slice(&AUDIT_ARCH_X86_64.to_ne_bytes());
    for (i, a) in args.iter().enumerate() {
        data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
    }
    let word = |k: u32| -> Option<u32> {
        let k = k as usize;
        (k.is_multiple_of(4) && k + 4 <= DATA_LEN)
            .then(|| u32::from_ne_bytes([data[k], data[k + 1], data[k + 2], data[k + 3]]))
    };
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; 16];
    let mut pc = 0usize;
    // Every jump goes forward: a program ends within its length.
    while let Some(ins) = filter.get(pc) {
        let (code, k) = (ins.code, ins.k);
        pc += 1;
        let src = if code & 0x08 != 0 { x } else { k };
        match code & 0x07 {
            // LD: W ABS from the data, IMM, MEM, LEN.
            0x00 => {
                a = match code & 0xe0 {
                    0x20 if code & 0x18 == 0 => word(k)?,
                    0x00 => k,
                    0x60 => *mem.get(k as usize)?,
                    0x80 => DATA_LEN as u32,
                    _ => return None,
                }
            }
            // LDX: IMM, MEM, LEN.
            0x01 => {
                x = match code & 0xe0 {
                    0x00 => k,
                    0x60 => *mem.get(k as usize)?,
                    0x80 => DATA_LEN as u32,
                    _ => return None,
                }
            }
            0x02 => *mem.get_mut(k as usize)? = a,
            0x03 => *mem.get_mut(k as usize)? = x,
            // ALU
            0x04 => {
                a = match code & 0xf0 {
                    0x00 => a.wrapping_add(src),
                    0x10 => a.wrapping_sub(src),
                    0x20 => a.wrapping_mul(src),
                    0x30 => a.checked_div(src)?,
                    0x40 => a | src,
                    0x50 => a & src,
                    0x60 => a.checked_shl(src).unwrap_or(0),
                    0x70 => a.checked_shr(src).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0x90 => a.checked_rem(src)?,
                    0xa0 => a ^ src,
                    _ => return None,
                }
            }
            // JMP
            0x05 => {
                let op = code & 0xf0;
                if op == 0x00 {
                    pc = pc.checked_add(k as usize)?;
                    continue;
                }
                let taken = match op {
                    0x10 => a == src,
                    0x20 => a > src,
                    0x30 => a >= src,
                    0x40 => a & src != 0,
                    _ => return None,
                };
                pc += usize::from(if taken { ins.jt } else { ins.jf });
            }
            // RET: K or A.
            0x06 => return Some(if code & 0x18 == 0x10 { a } else { k }),
            // MISC: TAX, TXA.
            _ => {
                if code & 0xf8 == 0x80 {
                    a = x;
                } else {
                    x = a;
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const KILL: u32 = 0x8000_0000;

    fn stmt(code: u16, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    fn jeq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
        libc::sock_filter {
            code: 0x15,
            jt,
            jf,
            k,
        }
    }

    /// Load the call's number; `action` for `nr`, allow the rest.
    fn one(nr: libc::c_long, action: u32) -> Vec<libc::sock_filter> {
        vec![
            stmt(0x20, 0),
            jeq(nr as u32, 0, 1),
            stmt(0x06, action),
            stmt(0x06, RET_ALLOW),
        ]
    }

    fn judge(filter: &[libc::sock_filter]) -> bool {
        let prog = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr() as *mut libc::sock_filter,
        };
        leaves_the_shim_be(&prog as *const libc::sock_fprog as usize)
    }

    #[test]
    fn a_filter_at_an_address_that_is_not_mapped_leaves_the_shim_be_without_a_fault() {
        // The kernel answers such a call with EFAULT and installs nothing; the shim must not
        // fault first.
        assert!(leaves_the_shim_be(0));
        assert!(leaves_the_shim_be(8));
        let prog = libc::sock_fprog {
            len: 4,
            filter: 8 as *mut libc::sock_filter,
        };
        assert!(leaves_the_shim_be(
            &prog as *const libc::sock_fprog as usize
        ));
    }

    #[test]
    fn a_filter_that_fails_one_of_the_shims_calls_with_an_errno_leaves_it_tracing() {
        assert!(judge(&one(libc::SYS_process_vm_readv, RET_ERRNO | 1)));
        assert!(judge(&one(libc::SYS_openat, RET_ERRNO | 13)));
    }

    #[test]
    fn a_filter_that_kills_for_a_call_the_shim_makes_ends_tracing() {
        assert!(!judge(&one(libc::SYS_openat, KILL)));
        assert!(
            !judge(&one(libc::SYS_pread64, 0x0003_0000)),
            "a trap is SIGSYS"
        );
        assert!(
            !judge(&one(libc::SYS_process_vm_readv, 0x7ff0_0000)),
            "a tracer decides"
        );
    }

    #[test]
    fn a_filter_that_kills_only_what_the_shim_never_calls_leaves_it_tracing() {
        assert!(judge(&one(libc::SYS_ptrace, KILL)));
        assert!(judge(&one(libc::SYS_execve, KILL)));
    }

    #[test]
    fn a_whitelist_that_leaves_out_the_shims_calls_ends_tracing() {
        let mut f = vec![stmt(0x20, 0)];
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_futex,
            libc::SYS_exit_group,
        ] {
            f.push(jeq(nr as u32, 0, 1));
            f.push(stmt(0x06, RET_ALLOW));
        }
        f.push(stmt(0x06, KILL));
        assert!(!judge(&f));
    }

    #[test]
    fn arguments_are_those_the_shim_passes() {
        // Kills mmap with PROT_EXEC only: the shim maps read-write.
        let f = vec![
            stmt(0x20, 0),
            jeq(libc::SYS_mmap as u32, 0, 3),
            stmt(0x20, 16 + 16), // args[2], low word
            libc::sock_filter {
                code: 0x45,
                jt: 0,
                jf: 1,
                k: libc::PROT_EXEC as u32,
            },
            stmt(0x06, KILL),
            stmt(0x06, RET_ALLOW),
        ];
        assert!(judge(&f));
    }

    #[test]
    fn a_program_that_cannot_be_run_is_no_leave() {
        assert!(!judge(&[stmt(0x20, 1)]), "a misaligned load");
        assert!(!judge(&[stmt(0x20, 0)]), "no return");
    }
}
