//! Floating-point numbers as Redis reads and prints them.
//!
//! Sorted-set scores, ZINCRBY and the INCRBYFLOAT family read floats with C's `strtod` rules
//! and refuse NaN; [`Float`] is such a number, so it can live in commands and values that are
//! compared, hashed and ordered. Redis prints a score with `%.17g`-like shortest digits
//! ([`format_double`]) and the result of INCRBYFLOAT in plain decimal notation
//! ([`format_human`]).
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

use bytes::Bytes;

/// A float that is never NaN; minus zero is stored as zero, so equal numbers have equal bits
/// and the order of [`f64::total_cmp`] is the numeric order.
#[derive(Clone, Copy, Debug, Default)]
pub struct Float(f64);

impl Float {
    /// The float `value`, or `None` for NaN.
    pub fn new(value: f64) -> Option<Float> {
        // Adding zero turns -0.0 into 0.0 and leaves every other number as it is.
        (!value.is_nan()).then_some(Float(value + 0.0))
    }

    /// The number.
    pub fn get(self) -> f64 {
        self.0
    }

    /// Parses a float argument with Redis's rules ([`parse_f64`]).
    pub fn parse(bytes: &[u8]) -> Option<Float> {
        parse_f64(bytes).and_then(Float::new)
    }

    /// The text Redis replies for this number ([`format_double`]).
    pub fn text(self) -> Bytes {
        Bytes::from(format_double(self.0))
    }
}

impl PartialEq for Float {
    fn eq(&self, other: &Float) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Float {}

impl PartialOrd for Float {
    fn partial_cmp(&self, other: &Float) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Float {
    fn cmp(&self, other: &Float) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Hash for Float {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

/// Parses a float as Redis does with `strtod`: no leading space, no trailing bytes, no NaN, and
/// a value that overflows to infinity or underflows to zero is refused (`inf` and `-inf`
/// spelled out are accepted). C's hexadecimal floats are not accepted.
pub fn parse_f64(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    let digits = text.trim_start_matches(['+', '-']);
    let spelled_infinite =
        digits.eq_ignore_ascii_case("inf") || digits.eq_ignore_ascii_case("infinity");
    if value.is_nan() || (value.is_infinite() && !spelled_infinite) {
        return None;
    }
    let mantissa = digits.split(['e', 'E']).next().unwrap_or("");
    let nonzero_digits = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if value == 0.0 && nonzero_digits {
        return None;
    }
    Some(value)
}

/// Redis's `d2string`: `inf`, `-inf`, `nan`, an integer in decimal when the number is integral
/// and within ±2^62, else the shortest digits that read back as the same number, in plain
/// notation for exponents from -7 to 20 and in `1.5e+25` form beyond.
pub fn format_double(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let integral_max = (i64::MAX / 2) as f64;
    if value.abs() <= integral_max && value.fract() == 0.0 {
        return (value as i64).to_string();
    }
    shortest(value)
}

/// The shortest digits of `value` (finite, not zero) laid out as Redis's `fpconv_dtoa` does.
fn shortest(value: f64) -> String {
    // `{:e}` gives the shortest round-trip digits: `d.ddde±x`.
    let sci = format!("{:e}", value.abs());
    let (mantissa, exp10) = sci.split_once('e').expect("`{:e}` writes an exponent");
    let exp10: i32 = exp10.parse().expect("`{:e}` writes a decimal exponent");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let ndigits = digits.len() as i32;
    // fpconv's K: the value is `digits × 10^k`.
    let k = exp10 - (ndigits - 1);
    let exp = exp10.abs();
    let sign = if value < 0.0 { "-" } else { "" };
    if k >= 0 && exp < ndigits + 7 {
        return format!("{sign}{digits}{}", "0".repeat(k as usize));
    }
    if k < 0 && (k > -7 || exp < 4) {
        let offset = ndigits + k;
        return if offset <= 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-offset) as usize))
        } else {
            let (int, frac) = digits.split_at(offset as usize);
            format!("{sign}{int}.{frac}")
        };
    }
    let (first, rest) = digits.split_at(1);
    let dot = if rest.is_empty() { "" } else { "." };
    let exp_sign = if exp10 < 0 { '-' } else { '+' };
    format!("{sign}{first}{dot}{rest}e{exp_sign}{exp}")
}

/// How INCRBYFLOAT and HINCRBYFLOAT print their result: plain decimal notation, no exponent,
/// no trailing zeros (`5200`, `10.6`, `0.0001`), `inf`/`-inf` as such.
///
/// Redis computes these in C's `long double` (80 bits on x86-64) and prints 17 decimals; logless
/// computes in `f64` on every replica alike and prints the shortest digits that read back as
/// the same `f64`. The two agree wherever the `f64` result is the nearest to the decimal one
/// (`10.5 + 0.1` is `10.6` in both) and differ in the last digits otherwise (`0.1 + 0.2` is
/// `0.30000000000000004` here and `0.3` in Redis on x86-64).
pub fn format_human(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // Rust's `Display` for f64 never uses an exponent and prints the shortest digits.
    format!("{value}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_redis_prints_them() {
        let cases = [
            (10.5, "10.5"),
            (5.0e3, "5000"),
            (1.0, "1"),
            (-2.0, "-2"),
            (0.1, "0.1"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (1e20, "1e+20"),
            (1e21, "1e+21"),
            (1.25e25, "1.25e+25"),
            (1e-10, "1e-10"),
            (1.2345e-300, "1.2345e-300"),
            (3.0e18, "3000000000000000000"),
            (1.23456789012e19, "1.23456789012e+19"),
            (1.234567890123e19, "12345678901230000000"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (0.0, "0"),
            (-0.0, "-0"),
            (123.456, "123.456"),
            (-0.5, "-0.5"),
        ];
        for (value, text) in cases {
            assert_eq!(format_double(value), text, "{value:e}");
        }
    }

    #[test]
    fn human_floats_have_no_exponent() {
        assert_eq!(format_human(5200.0), "5200");
        assert_eq!(format_human(10.5 + 0.1), "10.6");
        assert_eq!(format_human(1e-5), "0.00001");
        assert_eq!(format_human(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn floats_parse_with_strtod_rules() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"5.0e3"), Some(5000.0));
        assert_eq!(parse_f64(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b".5"), Some(0.5));
        assert_eq!(parse_f64(b"0"), Some(0.0));
        assert_eq!(parse_f64(b"0e5"), Some(0.0));
        for bad in ["", " 1", "1 ", "nan", "abc", "1e400", "1e-400", "1.2.3"] {
            assert_eq!(parse_f64(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn floats_order_numerically_and_minus_zero_is_zero() {
        let f = |v| Float::new(v).unwrap();
        assert!(f(-1.0) < f(0.0) && f(0.0) < f(f64::INFINITY));
        assert_eq!(f(-0.0), f(0.0));
        assert_eq!(Float::new(f64::NAN), None);
    }
}
