//! Reading `/proc`'s text: schedstat, context switches, the system call a thread sits in, its
//! run state, the CPUs' idle times.

/// `schedstat`: time on a CPU (ns), time ready and waiting for one (ns), timeslices.
pub fn parse_schedstat(text: &[u8]) -> Option<(u64, u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let mut it = s.split_ascii_whitespace().map(|w| w.parse::<u64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// `status`: the thread's voluntary and involuntary context switches.
pub fn parse_switches(text: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let field = |name: &str| -> Option<u64> {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((
        field("voluntary_ctxt_switches:")?,
        field("nonvoluntary_ctxt_switches:")?,
    ))
}

/// The timeslices of a thread on a CPU, from its context switches: the kernel counts a
/// timeslice each time it puts a thread on a CPU and a switch (voluntary or not) each time it
/// takes one off to run another, so a running thread has had one more of the first.
pub fn slices_from_switches(voluntary: u64, involuntary: u64) -> u64 {
    voluntary.saturating_add(involuntary).saturating_add(1)
}

/// `syscall`: None while the thread runs (or is ready to); (-1, 0) blocked outside a system
/// call; (number, first argument) blocked in one.
pub fn parse_syscall(text: &[u8]) -> Option<(i32, u64)> {
    let s = std::str::from_utf8(text).ok()?.trim();
    if s.starts_with("running") || s.is_empty() {
        return None;
    }
    let mut it = s.split_ascii_whitespace();
    let nr: i32 = it.next()?.parse().ok()?;
    let arg0 = it.next().and_then(hex).unwrap_or(0);
    Some((nr, if nr < 0 { 0 } else { arg0 }))
}

/// `syscall` of a thread blocked in a system call: its second argument (0 if none).
pub fn parse_second_arg(text: &[u8]) -> u64 {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.split_ascii_whitespace().nth(2))
        .and_then(hex)
        .unwrap_or(0)
}

/// A field of `syscall`: hexadecimal, `0x` first.
pub(super) fn hex(field: &str) -> Option<u64> {
    u64::from_str_radix(field.trim_start_matches("0x"), 16).ok()
}

/// `syscall` of a thread blocked in a system call: its stack pointer and program counter (the
/// last two of the nine fields), which a chain is scanned from.
pub fn parse_stack_of(text: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let f: Vec<&str> = s.split_ascii_whitespace().collect();
    match f.as_slice() {
        [nr, .., sp, pc] if f.len() == 9 && !nr.starts_with('-') => Some((hex(sp)?, hex(pc)?)),
        _ => None,
    }
}

/// `stat`: the thread's state letter (`R` running, `S` asleep, `D` uninterruptible, `T`
/// stopped, `t` stopped by a tracer, `Z` zombie, ...) and the CPU it ran on last. The command
/// name between the parentheses may hold spaces and parentheses: the fields are counted from
/// the last `)`.
pub fn parse_stat(text: &[u8]) -> Option<(char, u32)> {
    let s = std::str::from_utf8(text).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // `processor` is field 39 of the line; the state is field 3.
    let cpu = fields.nth(39 - 4)?.parse().ok()?;
    Some((state, cpu))
}

/// What a blocked thread's state letter adds to what it waits on: the system call says where
/// it sleeps, not that nothing but the wait's end (a disk, most often) can wake it, or that it
/// is stopped.
pub fn run_state_words(state: char) -> Option<&'static str> {
    match state {
        'D' => Some("uninterruptible: disk or other I/O"),
        'T' => Some("stopped"),
        't' => Some("stopped by a tracer"),
        'Z' => Some("zombie"),
        _ => None,
    }
}

/// `/proc/stat`: (idle, iowait) ticks of each `cpuN` line, in CPU order.
pub fn parse_cpus(text: &[u8]) -> Vec<(u64, u64)> {
    let s = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    for line in s.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            continue;
        };
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let f: Vec<u64> = rest
            .split_ascii_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap_or(0))
            .collect();
        out.push((
            f.get(3).copied().unwrap_or(0),
            f.get(4).copied().unwrap_or(0),
        ));
    }
    out
}
