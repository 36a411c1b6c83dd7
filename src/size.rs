//! Byte sizes as people write them: `90MiB`, `8GiB`, `1.5GB`, `123456`.

use thiserror::Error;

/// A size string that could not be read.
#[derive(Debug, Error, PartialEq)]
pub enum SizeError {
    /// Not a number followed by a unit.
    #[error("`{0}` is not a size: write bytes (`123456`, `1e9`) or a number with a unit (`90MiB`, `11.2GiB`, `1.5GB`)")]
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

/// The length of the leading decimal number of `s` (digits, one `.`, and an
/// exponent `e7`/`E-3` when digits follow it).
fn number_len(s: &str) -> usize {
    let b = s.as_bytes();
    let mut i = b.iter().take_while(|c| c.is_ascii_digit() || **c == b'.').count();
    if i > 0 && matches!(b.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let digits = b[j.min(b.len())..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 {
            i = j + digits;
        }
    }
    i
}

/// Parses a size: a decimal number (`1.5`, `90`, `1e9`) followed by an
/// optional unit (`11.2GiB`, `11.82 GiB`).
///
/// The arithmetic is exact decimal, and a result that is not a whole number
/// of bytes is rounded **down** (a budget never grows by rounding): `1.5GB` is
/// 1500000000 bytes, `11.2GiB` is 12025908428 bytes. So every size remat
/// prints (`11.82 GiB`) can be pasted back.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let s = input.trim();
    let split = number_len(s);
    let (number, unit) = (&s[..split], s[split..].trim());
    let (mantissa, exponent) = match number.find(['e', 'E']) {
        Some(k) => (&number[..k], number[k + 1..].parse::<i32>().map_err(|_| SizeError::Syntax(input.to_string()))?),
        None => (number, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(SizeError::Syntax(input.to_string()));
    }
    let factor =
        unit_factor(unit).ok_or_else(|| SizeError::Unit { input: input.to_string(), unit: unit.to_string() })?;
    let too_large = || SizeError::TooLarge(input.to_string());
    // value = digits * 10^shift * factor, with `digits` the mantissa without its point.
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let shift = i64::from(exponent) - frac.len() as i64;
    if digits.is_empty() {
        return Ok(0);
    }
    // More than 39 significant digits cannot be a u64 of bytes once scaled back.
    if digits.len() as i64 + shift > 40 {
        return Err(too_large());
    }
    let (kept, shift) = if digits.len() > 38 {
        // u128 holds 38 digits: truncate the rest and shift by as much, which
        // rounds down like the final division does.
        let drop = digits.len() - 38;
        (&digits[..38], shift + drop as i64)
    } else {
        (digits, shift)
    };
    let value: u128 = kept.parse().map_err(|_| SizeError::Syntax(input.to_string()))?;
    let scaled = value.checked_mul(factor).ok_or_else(too_large)?;
    let total = if shift >= 0 {
        10u128.checked_pow(shift as u32).and_then(|p| scaled.checked_mul(p)).ok_or_else(too_large)?
    } else {
        match 10u128.checked_pow((-shift) as u32) {
            Some(p) => scaled / p,
            None => 0,
        }
    };
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
        assert_eq!(parse_size("1e9"), Ok(1_000_000_000));
        assert_eq!(parse_size("1.5e3MiB"), Ok(1500 << 20));
        assert_eq!(parse_size("2E+3"), Ok(2000));
    }

    #[test]
    fn fractions_round_down_to_bytes() {
        // 11.2 * 2^30 = 12025908428.8
        assert_eq!(parse_size("11.2GiB"), Ok(12_025_908_428));
        assert_eq!(parse_size("0.1GiB"), Ok(107_374_182));
        assert_eq!(parse_size("0.3KiB"), Ok(307));
        assert_eq!(parse_size("1e-3"), Ok(0));
        assert_eq!(parse_size("12.5"), Ok(12));
    }

    #[test]
    fn printed_sizes_paste_back_at_or_below_the_value() {
        for bytes in [1u64, 1023, 1024, 94_371_840, 12_693_360_000, u64::MAX / 3] {
            let printed = format_size(bytes);
            let back = parse_size(&printed).unwrap();
            assert!(back <= bytes, "{printed} -> {back} > {bytes}");
            assert!(back as f64 >= bytes as f64 * 0.99, "{printed} -> {back} far below {bytes}");
        }
    }

    #[test]
    fn errors() {
        assert!(matches!(parse_size("90M"), Err(SizeError::Unit { .. })));
        assert!(matches!(parse_size("abc"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size("1.2.3"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size("-5"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size("20000000TiB"), Err(SizeError::TooLarge(_))));
        assert!(matches!(parse_size("99999999999999999999999"), Err(SizeError::TooLarge(_))));
        assert!(matches!(parse_size("1e400"), Err(SizeError::TooLarge(_))));
        assert!(matches!(parse_size("e9"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size("1e"), Err(SizeError::Unit { .. })));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(90 << 20), "90.00 MiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
    }
}
