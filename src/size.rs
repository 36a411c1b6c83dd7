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
    /// A share (`90%`) where bytes are wanted.
    #[error("`{0}` is a share of store-all's peak, and this takes bytes or a size: give one (`90MiB`)")]
    ShareNotHere(String),
    /// A share out of range or malformed.
    #[error("`{0}` is not a share: give a percentage above 0% and at most 100% (`90%`, `12.5%`)")]
    Share(String),
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
    if unit == "%" {
        return Err(SizeError::ShareNotHere(input.trim().to_string()));
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
    if let Ok(bytes) = u64::try_from(total) {
        return Ok(bytes);
    }
    // Past u64::MAX, but within half a unit of the last digit written: a
    // rounding of u64::MAX, as `format_size` prints it (`16777216.00 TiB`,
    // issue 36). Read as the largest size there is.
    if within_rounding_of_max(value, factor, shift) { Ok(u64::MAX) } else { Err(too_large()) }
}

/// Whether `value` x 10^`shift` x `factor` (a number as written, its last
/// digit worth 10^`shift` x `factor` bytes) is at most half of that last
/// digit above `u64::MAX`: what rounding `u64::MAX` to that digit can print.
/// Exact integer arithmetic; `false` where it would overflow (far above).
fn within_rounding_of_max(value: u128, factor: u128, shift: i64) -> bool {
    // value x 10^shift x factor - ulp / 2 <= MAX, with ulp = 10^shift x factor:
    // (2 value - 1) x factor x 10^shift <= 2 MAX (both sides x 10^-shift when shift < 0).
    let Some(lhs) = value.checked_mul(2).and_then(|v| v.checked_sub(1)).and_then(|v| v.checked_mul(factor)) else {
        return false;
    };
    let max = 2 * u128::from(u64::MAX);
    let Ok(power) = u32::try_from(shift.unsigned_abs()) else { return false };
    match 10u128.checked_pow(power) {
        Some(p) if shift >= 0 => lhs.checked_mul(p).is_some_and(|l| l <= max),
        Some(p) => max.checked_mul(p).is_none_or(|m| lhs <= m),
        None => shift < 0,
    }
}

/// A memory argument as a command line takes it: bytes (a size, as
/// [`parse_size`] reads it) or a share of a whole (`90%`; front ends take
/// the chain's store-all peak as the whole, as `remat.torch`'s `memory=`
/// does).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeOrShare {
    /// This many bytes; `unit` says whether the text named a unit (a plain
    /// number is bytes, which front ends may question when it is tiny).
    Bytes {
        /// The bytes.
        bytes: u64,
        /// Whether a unit was written (`90MiB`, `90B`), not a plain `90`.
        unit: bool,
    },
    /// `numerator / denominator` percent, above 0 and at most 100.
    Share {
        /// The percentage's digits without its point.
        numerator: u64,
        /// 10^(its decimals).
        denominator: u64,
    },
}

impl SizeOrShare {
    /// The bytes of this amount of `whole` (a share rounded down, exact:
    /// `50%` of 101 bytes is 50). O(1).
    ///
    /// ```
    /// use remat::size::SizeOrShare;
    /// assert_eq!(SizeOrShare::parse("12.5%")?.of(1000), 125);
    /// assert_eq!(SizeOrShare::parse("90MiB")?.of(1000), 90 << 20);
    /// assert_eq!(SizeOrShare::parse("100%")?.of(u64::MAX), u64::MAX);
    /// # Ok::<(), remat::size::SizeError>(())
    /// ```
    pub fn of(self, whole: u64) -> u64 {
        match self {
            SizeOrShare::Bytes { bytes, .. } => bytes,
            SizeOrShare::Share { numerator, denominator } => {
                // At most 100%: the result is at most `whole`.
                let bytes = u128::from(whole) * u128::from(numerator) / (u128::from(denominator) * 100);
                u64::try_from(bytes).unwrap_or(u64::MAX)
            }
        }
    }

    /// Reads bytes or a size ([`parse_size`]) or a share: a percentage
    /// above 0% and at most 100%, with up to 12 decimals (`90%`, `12.5%`).
    pub fn parse(input: &str) -> Result<SizeOrShare, SizeError> {
        let s = input.trim();
        let Some(number) = s.strip_suffix('%') else {
            let unit = s.len() > number_len(s);
            return parse_size(s).map(|bytes| SizeOrShare::Bytes { bytes, unit });
        };
        let bad = || SizeError::Share(s.to_string());
        let number = number.trim();
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        let digits_only = |t: &str| t.bytes().all(|c| c.is_ascii_digit());
        if int.is_empty() && frac.is_empty() || !digits_only(int) || !digits_only(frac) || frac.len() > 12 {
            return Err(bad());
        }
        let denominator = 10u64.pow(frac.len() as u32);
        let digits = format!("{int}{frac}");
        let numerator = digits.trim_start_matches('0');
        // Above 100% (or so long it cannot be at most 100%): refused.
        if numerator.len() > 15 {
            return Err(bad());
        }
        let numerator: u64 = if numerator.is_empty() { 0 } else { numerator.parse().map_err(|_| bad())? };
        if numerator == 0 || numerator > 100 * denominator {
            return Err(bad());
        }
        Ok(SizeOrShare::Share { numerator, denominator })
    }
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
    fn every_printed_size_reads_back() {
        // Issue 36: `16777216.00 TiB` (u64::MAX, rounded) was "more than"
        // u64::MAX. Within half its last digit of it, it is u64::MAX.
        for bytes in [u64::MAX, u64::MAX - 1, u64::MAX - (1 << 40), 1 << 63, (1 << 63) - 1, 1048575, 1023] {
            let printed = format_size(bytes);
            let back = parse_size(&printed).unwrap_or_else(|e| panic!("{printed}: {e}"));
            let off = back.abs_diff(bytes) as f64;
            assert!(off <= bytes as f64 * 0.005, "{printed} -> {back}, from {bytes}");
        }
        assert_eq!(parse_size("16777216.00 TiB"), Ok(u64::MAX));
        assert_eq!(parse_size("16777216 TiB"), Ok(u64::MAX));
        // One more hundredth is past what rounding can print.
        assert!(matches!(parse_size("16777216.01 TiB"), Err(SizeError::TooLarge(_))));
        assert!(matches!(parse_size("18446744073709551616"), Err(SizeError::TooLarge(_))));
        assert!(matches!(parse_size("18446744073709551615.5"), Ok(u64::MAX)));
    }

    #[test]
    fn shares() {
        assert_eq!(SizeOrShare::parse("90%"), Ok(SizeOrShare::Share { numerator: 90, denominator: 1 }));
        assert_eq!(SizeOrShare::parse(" 12.5 % ").map(|s| s.of(1000)), Ok(125));
        assert_eq!(SizeOrShare::parse("90"), Ok(SizeOrShare::Bytes { bytes: 90, unit: false }));
        assert_eq!(SizeOrShare::parse("90 MiB"), Ok(SizeOrShare::Bytes { bytes: 90 << 20, unit: true }));
        for bad in ["0%", "100.01%", "-5%", "%", "1e2%", "abc%", "1.0000000000001%", "99999999999999999999%"] {
            assert!(matches!(SizeOrShare::parse(bad), Err(SizeError::Share(_))), "{bad}");
        }
        assert!(matches!(parse_size("90%"), Err(SizeError::ShareNotHere(_))));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(90 << 20), "90.00 MiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
    }
}
