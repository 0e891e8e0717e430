//! The sampler's interval: how often the shim's thread looks at the program's threads through
//! `/proc`. Read from `WAITSHIM_SAMPLE` and from a policy's `sample` field, with one parser so
//! that both accept the same values.

/// The shortest and longest intervals accepted.
pub const MIN_NS: u64 = 1_000_000;
pub const MAX_NS: u64 = 10_000_000_000;

/// Parses `off` (or `0`), or a duration from 1 ms to 10 s (`10ms`, `0.5s`, `2000us`; a bare
/// number is milliseconds). The interval in ns, 0 for off.
pub fn parse(v: &str) -> Result<u64, String> {
    let v = v.trim();
    if v.eq_ignore_ascii_case("off") || v == "0" {
        return Ok(0);
    }
    let units = [("", 1e6), ("ms", 1e6), ("us", 1e3), ("µs", 1e3), ("s", 1e9)];
    let ns = crate::duration::ns(v, &units).map_err(|e| match e {
        crate::duration::DurationError::Unit(u) => {
            format!("unknown unit {u:?} (use us, ms or s)")
        }
        crate::duration::DurationError::Number => {
            format!("{v:?} is not a duration like 10ms or off")
        }
    })?;
    if !(MIN_NS as f64..=MAX_NS as f64).contains(&ns) {
        return Err(format!("{v} is outside 1ms..10s"));
    }
    Ok(ns as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_off_and_out_of_range() {
        assert_eq!(parse("10ms"), Ok(10_000_000));
        assert_eq!(parse(" 0.5s "), Ok(500_000_000));
        assert_eq!(parse("2000us"), Ok(2_000_000));
        assert_eq!(parse("25"), Ok(25_000_000), "a bare number is milliseconds");
        assert_eq!(parse("OFF"), Ok(0));
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("100us"), Err("100us is outside 1ms..10s".into()));
        assert!(parse("20s").is_err(), "above 10 s");
        assert_eq!(
            parse("1m"),
            Err("unknown unit \"m\" (use us, ms or s)".into())
        );
        assert!(parse("often").is_err());
    }
}
