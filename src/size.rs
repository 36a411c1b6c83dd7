//! Byte sizes as people write them: `90MiB`, `8GiB`, `1.5GB`, `123456`.

use thiserror::Error;

/// A size string that could not be read.
#[derive(Debug, Error, PartialEq)]
pub enum SizeError {
    /// Not a number followed by a unit.
    #[error("`{0}` is not a size: write bytes (`123456`) or a number with a unit (`90MiB`, `8GiB`, `1.5GB`)")]
    Syntax(String),
    /// A unit remat does not know, or an ambiguous one.
    #[error(
        "`{input}`: unknown unit `{unit}`; use B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)"
    )]
    Unit {
        /// The whole argument.
        input: String,
        /// The unit part.
        unit: String,
    },
    /// A fraction of a byte.
    #[error("`{0}` is not a whole number of bytes")]
    Fraction(String),
    /// More than u64 bytes.
    #[error("`{0}` is more than 18446744073709551615 bytes")]
    TooLarge(String),
}

fn unit_factor(unit: &str) -> Option<u128> {
    Some(match unit {
        "" | "B" | "b" => 1,
        "kB" | "KB" | "kb" => 1_000,
        "MB" | "mb" => 1_000_000,
        "GB" | "gb" => 1_000_000_000,
        "TB" | "tb" => 1_000_000_000_000,
        "KiB" | "kiB" | "kib" => 1 << 10,
        "MiB" | "mib" => 1 << 20,
        "GiB" | "gib" => 1 << 30,
        "TiB" | "tib" => 1 << 40,
        _ => return None,
    })
}

/// Parses a size: a decimal number (`1.5`, `90`) followed by an optional unit.
///
/// Decimal arithmetic is exact: `1.5GB` is 1500000000 bytes; a result that is
/// not a whole number of bytes is an error, not silently rounded. O(length).
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    parse(input, false)
}

/// Parses a size like [`parse_size`], but rounds a fraction of a byte down
/// instead of refusing it: `11.2GiB` is 12025908428 bytes (12025908428.8
/// exactly). Meant for budgets, where the fraction of a byte could never be
/// used and a user writing `11.2GiB` should not have to find a multiple of
/// 5 that is exact. Every other error is [`parse_size`]'s. O(length).
pub fn parse_size_floor(input: &str) -> Result<u64, SizeError> {
    parse(input, true)
}

fn parse(input: &str, round_down: bool) -> Result<u64, SizeError> {
    let s = input.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim());
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') || frac.len() > 30 {
        return Err(SizeError::Syntax(input.to_string()));
    }
    let factor =
        unit_factor(unit).ok_or_else(|| SizeError::Unit { input: input.to_string(), unit: unit.to_string() })?;
    let too_large = || SizeError::TooLarge(input.to_string());
    let int_value: u128 = if int.is_empty() { 0 } else { int.parse().map_err(|_| too_large())? };
    let frac_value: u128 = if frac.is_empty() { 0 } else { frac.parse().map_err(|_| too_large())? };
    let scale = 10u128.checked_pow(frac.len() as u32).ok_or_else(too_large)?;
    let frac_bytes = frac_value.checked_mul(factor).ok_or_else(too_large)?;
    if frac_bytes % scale != 0 && !round_down {
        return Err(SizeError::Fraction(input.to_string()));
    }
    let total = int_value.checked_mul(factor).and_then(|v| v.checked_add(frac_bytes / scale)).ok_or_else(too_large)?;
    u64::try_from(total).map_err(|_| too_large())
}

/// Formats bytes with a binary unit and two decimals: `86.75 MiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.2} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_size("123456"), Ok(123456));
        assert_eq!(parse_size("90MiB"), Ok(90 << 20));
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size(" 2 kB "), Ok(2000));
        assert_eq!(parse_size("0.5KiB"), Ok(512));
        assert_eq!(parse_size(".5KiB"), Ok(512));
    }

    #[test]
    fn errors() {
        assert!(matches!(parse_size("90M"), Err(SizeError::Unit { .. })));
        assert!(matches!(parse_size("abc"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size("1.2.3"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size("-5"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size("0.3KiB"), Err(SizeError::Fraction(_))));
        assert!(matches!(parse_size("20000000TiB"), Err(SizeError::TooLarge(_))));
        assert!(matches!(parse_size("99999999999999999999999"), Err(SizeError::TooLarge(_))));
    }

    #[test]
    fn floor_rounds_fractions_of_a_byte_down() {
        // 11.2 * 2^30 = 12025908428.8
        assert_eq!(parse_size_floor("11.2GiB"), Ok(12_025_908_428));
        assert_eq!(parse_size_floor("0.3KiB"), Ok(307));
        assert_eq!(parse_size_floor("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size_floor("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size_floor("0.0000001B"), Ok(0));
        assert!(matches!(parse_size_floor("11.2G"), Err(SizeError::Unit { .. })));
        assert!(matches!(parse_size_floor("-1GiB"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size_floor("20000000TiB"), Err(SizeError::TooLarge(_))));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(90 << 20), "90.00 MiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
    }
}
