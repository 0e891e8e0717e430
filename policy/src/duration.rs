//! Durations in settings (`10ms`, `0.5s`, `ring:30s`): a decimal number and a unit, each setting
//! with its own units and its own unit for a bare number. One reader, so that the environment and
//! the policy file spell them alike.

/// Why a duration could not be read.
#[derive(Debug, PartialEq)]
pub enum DurationError {
    /// A unit not in the setting's list.
    Unit(String),
    /// No number before the unit.
    Number,
}

/// The nanoseconds of `d` (a decimal number followed by one of `units`, each with its
/// nanoseconds; `""` is the unit of a bare number), rounded; blanks between number and unit are
/// allowed.
pub fn ns(d: &str, units: &[(&str, f64)]) -> Result<f64, DurationError> {
    let split = d
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(d.len());
    let (num, unit) = d.split_at(split);
    let unit = unit.trim();
    let scale = units
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|&(_, s)| s)
        .ok_or_else(|| DurationError::Unit(unit.to_string()))?;
    let n: f64 = num.parse().map_err(|_| DurationError::Number)?;
    Ok((n * scale).round())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNITS: &[(&str, f64)] = &[("", 1e6), ("ms", 1e6), ("s", 1e9)];

    #[test]
    fn a_number_and_a_unit_of_the_settings_list() {
        assert_eq!(ns("10ms", UNITS), Ok(1e7));
        assert_eq!(ns("0.5 s", UNITS), Ok(5e8));
        assert_eq!(ns("3", UNITS), Ok(3e6));
        assert_eq!(ns("3h", UNITS), Err(DurationError::Unit("h".into())));
        assert_eq!(ns("ms", UNITS), Err(DurationError::Number));
    }
}
