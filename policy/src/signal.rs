//! Signal names as users write them in `WAITSHIM_SIGNAL` and in a policy's `stack_signal`:
//! a number (`60`), a name (`SIGUSR2`, `USR2`) or a real-time offset (`SIGRTMIN+3`,
//! `SIGRTMAX-3`). `none` disables.

/// The default data-request signal.
pub const DEFAULT_REQUEST: &str = "SIGRTMAX-3";
/// The default signal for live holder stacks.
pub const DEFAULT_STACK: &str = "SIGRTMAX-4";

/// What a signal specification names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalSpec {
    None,
    Number(i32),
}

const NAMED: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("USR1", 10),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("CHLD", 17),
    ("CONT", 18),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("PWR", 30),
];

/// The classic signals a profiler may take: the two left to applications. Every other one
/// means something to the program or its environment (SIGTERM must still end it, SIGCHLD
/// announce children, SIGWINCH resize it...); the real-time signals are free.
const USER: &[i32] = &[10, 12];

/// Parses a signal specification. `rtmin`/`rtmax` are the process's `SIGRTMIN`/`SIGRTMAX`
/// (glibc reserves the first real-time signals for itself, so they are not constants).
pub fn parse(spec: &str, rtmin: i32, rtmax: i32) -> Result<SignalSpec, String> {
    let s = spec.trim();
    if s.eq_ignore_ascii_case("none") {
        return Ok(SignalSpec::None);
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let number = if let Ok(n) = name.parse::<i32>() {
        n
    } else if let Some(rest) = name.strip_prefix("RTMIN") {
        rtmin + offset(rest, spec)?
    } else if let Some(rest) = name.strip_prefix("RTMAX") {
        rtmax + offset(rest, spec)?
    } else if let Some(&(_, n)) = NAMED.iter().find(|(n, _)| *n == name) {
        n
    } else {
        return Err(format!(
            "`{spec}` is not a signal (use a number, a name such as SIGUSR2, SIGRTMIN+N, SIGRTMAX-N, or none)"
        ));
    };
    if number <= 0 || number > rtmax {
        return Err(format!("`{spec}` is signal {number}, outside 1..={rtmax}"));
    }
    if number < 32 && !USER.contains(&number) {
        return Err(format!(
            "`{spec}` (signal {number}) means something to the program or its environment; \
             choose SIGUSR1, SIGUSR2 or a real-time signal (SIGRTMIN+N, SIGRTMAX-N)"
        ));
    }
    if (32..rtmin).contains(&number) {
        return Err(format!(
            "`{spec}` (signal {number}) is reserved by the C library"
        ));
    }
    Ok(SignalSpec::Number(number))
}

fn offset(rest: &str, spec: &str) -> Result<i32, String> {
    if rest.is_empty() {
        return Ok(0);
    }
    let bad = || format!("`{spec}`: expected SIGRTMIN+N or SIGRTMAX-N");
    let (sign, digits) = match rest.as_bytes()[0] {
        b'+' => (1, &rest[1..]),
        b'-' => (-1, &rest[1..]),
        _ => return Err(bad()),
    };
    let n: i32 = digits.parse().map_err(|_| bad())?;
    Ok(sign * n)
}

/// A signal number as a user reads it (`SIGRTMAX-3`, `SIGUSR2`, `40`).
pub fn name(number: i32, rtmin: i32, rtmax: i32) -> String {
    if let Some((n, _)) = NAMED.iter().find(|(_, v)| *v == number) {
        return format!("SIG{n}");
    }
    if (rtmin..=rtmax).contains(&number) {
        let from_max = rtmax - number;
        let from_min = number - rtmin;
        return if from_max <= from_min {
            if from_max == 0 {
                "SIGRTMAX".into()
            } else {
                format!("SIGRTMAX-{from_max}")
            }
        } else if from_min == 0 {
            "SIGRTMIN".into()
        } else {
            format!("SIGRTMIN+{from_min}")
        };
    }
    format!("signal {number}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(parse("SIGRTMAX-3", 34, 64), Ok(SignalSpec::Number(61)));
        assert_eq!(parse("rtmin+2", 34, 64), Ok(SignalSpec::Number(36)));
        assert_eq!(parse("SIGUSR2", 34, 64), Ok(SignalSpec::Number(12)));
        assert_eq!(parse("usr1", 34, 64), Ok(SignalSpec::Number(10)));
        assert_eq!(parse("40", 34, 64), Ok(SignalSpec::Number(40)));
        assert_eq!(parse(" none ", 34, 64), Ok(SignalSpec::None));
        assert!(parse("SIGSEGV", 34, 64).is_err());
        assert!(parse("9", 34, 64).is_err());
        assert!(parse("33", 34, 64).is_err());
        assert!(parse("65", 34, 64).is_err());
        assert!(parse("SIGRTMAX+1", 34, 64).is_err());
        assert!(parse("bogus", 34, 64).is_err());
        assert_eq!(name(61, 34, 64), "SIGRTMAX-3");
        assert_eq!(name(12, 34, 64), "SIGUSR2");
        assert_eq!(name(35, 34, 64), "SIGRTMIN+1");
    }
}
