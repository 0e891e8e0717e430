//! The per-wait events setting: what the shim writes of each blocked wait (its begin, end, object,
//! reason and the thread that ended it). Read from `WAITSHIM_EVENTS` and from a policy's `events`
//! field, with one parser so that both accept the same values.

use std::fmt;

/// What the shim writes of per-wait events.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EventsMode {
    Off,
    All,
    /// The flight recorder: only the waits that ended in the last `keep_ns`.
    Ring {
        keep_ns: u64,
    },
}

/// The flight recorder's window when `ring` is given without one.
pub const DEFAULT_RING_NS: u64 = 30_000_000_000;

/// Parses `all`, `off` (or `0`), `ring` (30 s) or `ring:DURATION` (`30s`, `500ms`, `2m`, `1h`;
/// a bare number is seconds; 1 ms to 24 h). Case and surrounding blanks do not matter.
pub fn parse(v: &str) -> Result<EventsMode, String> {
    let v = v.trim();
    if v.eq_ignore_ascii_case("all") {
        return Ok(EventsMode::All);
    }
    if v.eq_ignore_ascii_case("off") || v == "0" {
        return Ok(EventsMode::Off);
    }
    let Some(rest) = v.strip_prefix("ring") else {
        return Err(format!(
            "{v:?} is not all, off or ring:DURATION (such as ring:30s)"
        ));
    };
    let d = match rest.strip_prefix(':') {
        None if rest.is_empty() => {
            return Ok(EventsMode::Ring {
                keep_ns: DEFAULT_RING_NS,
            })
        }
        Some(d) => d.trim(),
        None => return Err(format!("{v:?}: write ring:DURATION (such as ring:30s)")),
    };
    let units = [
        ("", 1e9),
        ("s", 1e9),
        ("ms", 1e6),
        ("m", 60e9),
        ("min", 60e9),
        ("h", 3600e9),
    ];
    let ns = crate::duration::ns(d, &units).map_err(|e| match e {
        crate::duration::DurationError::Unit(u) => {
            format!("{v:?}: unknown unit {u:?} (use ms, s, m or h)")
        }
        crate::duration::DurationError::Number => {
            format!("{v:?}: {d:?} is not a duration like 30s")
        }
    })?;
    if !(1e6..=86_400e9).contains(&ns) {
        return Err(format!("{v:?}: the window must be 1ms to 24h"));
    }
    Ok(EventsMode::Ring { keep_ns: ns as u64 })
}

/// As [`parse`] reads it back: `all`, `off`, `ring:30s` (the window in its largest exact unit).
impl fmt::Display for EventsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EventsMode::Off => f.write_str("off"),
            EventsMode::All => f.write_str("all"),
            EventsMode::Ring { keep_ns } => {
                let units = [
                    (3_600_000_000_000, "h"),
                    (60_000_000_000, "m"),
                    (1_000_000_000, "s"),
                ];
                match units.iter().find(|(u, _)| keep_ns % u == 0) {
                    Some((u, name)) => write!(f, "ring:{}{name}", keep_ns / u),
                    None if keep_ns % 1_000_000 == 0 => write!(f, "ring:{}ms", keep_ns / 1_000_000),
                    // Not written by `parse` (whole ms), but read back by it.
                    None => write!(f, "ring:{}s", keep_ns as f64 / 1e9),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_settings_read_as_users_write_them() {
        assert_eq!(parse("all"), Ok(EventsMode::All));
        assert_eq!(parse(" OFF "), Ok(EventsMode::Off));
        assert_eq!(
            parse("ring"),
            Ok(EventsMode::Ring {
                keep_ns: 30_000_000_000
            })
        );
        assert_eq!(
            parse("ring:30s"),
            Ok(EventsMode::Ring {
                keep_ns: 30_000_000_000
            })
        );
        assert_eq!(
            parse("ring:1"),
            Ok(EventsMode::Ring {
                keep_ns: 1_000_000_000
            })
        );
        assert_eq!(
            parse("ring:250ms"),
            Ok(EventsMode::Ring {
                keep_ns: 250_000_000
            })
        );
        assert_eq!(
            parse("ring:2m"),
            Ok(EventsMode::Ring {
                keep_ns: 120_000_000_000
            })
        );
        for bad in [
            "some",
            "ring:",
            "ring:fast",
            "ring:5parsecs",
            "ring:0",
            "ring30s",
            "ring:100d",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_setting_is_written_as_it_is_read() {
        for text in [
            "all",
            "off",
            "ring:30s",
            "ring:2m",
            "ring:1h",
            "ring:250ms",
            "ring:90s",
        ] {
            let mode = parse(text).unwrap();
            assert_eq!(mode.to_string(), text);
        }
        assert_eq!(parse("ring:1.5s").unwrap().to_string(), "ring:1500ms");
    }
}
