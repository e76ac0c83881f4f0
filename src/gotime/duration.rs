//! Go `time.Duration` syntax: parsing like `time.ParseDuration`, printing like `Duration.String()`.

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

const NS: u128 = 1;
const US: u128 = 1_000;
const MS: u128 = 1_000_000;
const SEC: u128 = 1_000_000_000;
const MIN: u128 = 60 * SEC;
const HOUR: u128 = 60 * MIN;

/// A signed duration in nanoseconds with Go's text form (`30s`, `15m0s`, `1h2m3.5s`, `-1s`, `500ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration(pub i64);

/// Why a Go duration string could not be parsed; the message matches Go's wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Malformed text.
    #[error("time: invalid duration \"{0}\"")]
    Invalid(String),
    /// A number without a unit (other than a bare `0`).
    #[error("time: missing unit in duration \"{0}\"")]
    MissingUnit(String),
    /// A unit Go does not know.
    #[error("time: unknown unit \"{unit}\" in duration \"{input}\"")]
    UnknownUnit { unit: String, input: String },
}

impl GoDuration {
    /// Zero duration.
    pub const ZERO: GoDuration = GoDuration(0);

    /// Build from whole seconds.
    pub const fn from_secs(secs: i64) -> Self {
        GoDuration(secs * 1_000_000_000)
    }

    /// Build from milliseconds.
    pub const fn from_millis(ms: i64) -> Self {
        GoDuration(ms * 1_000_000)
    }

    /// Nanoseconds (may be negative).
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// Whether the duration is exactly zero.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Whether the duration is negative.
    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// From a `std::time::Duration`, saturating at the largest Go duration (about 292 years): log fields
    /// print durations this way (`1m30s`, `12.5ms`, `1µs`).
    pub fn from_std(d: std::time::Duration) -> Self {
        GoDuration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }

    /// As a `std::time::Duration`; negative values become zero.
    pub fn to_std(self) -> std::time::Duration {
        std::time::Duration::from_nanos(u64::try_from(self.0).unwrap_or(0))
    }

    /// Parse Go's duration syntax (`time.ParseDuration`).
    pub fn parse(input: &str) -> Result<Self, DurationError> {
        let invalid = || DurationError::Invalid(input.to_string());
        let mut s = input;
        let mut neg = false;
        if let Some(rest) = s.strip_prefix('-') {
            neg = true;
            s = rest;
        } else if let Some(rest) = s.strip_prefix('+') {
            s = rest;
        }
        if s == "0" {
            return Ok(GoDuration(0));
        }
        if s.is_empty() {
            return Err(invalid());
        }
        let mut total: u128 = 0;
        while !s.is_empty() {
            let value = parse_term(&mut s, input)?;
            total = total.checked_add(value).ok_or_else(invalid)?;
            if total > (i64::MAX as u128) + u128::from(neg) {
                return Err(invalid());
            }
        }
        let nanos = if neg {
            // total <= 2^63 here.
            (total as i128).wrapping_neg() as i64
        } else {
            total as i64
        };
        Ok(GoDuration(nanos))
    }
}

/// One `<number>[.<fraction>]<unit>` term of a Go duration, in nanoseconds; advances `s` past it.
fn parse_term(s: &mut &str, input: &str) -> Result<u128, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    // Integer part.
    let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
    let int_digits = &s[..int_len];
    *s = &s[int_len..];
    // Optional fraction.
    let mut frac_digits = "";
    if let Some(rest) = s.strip_prefix('.') {
        let frac_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        frac_digits = &rest[..frac_len];
        *s = &rest[frac_len..];
        if int_len == 0 && frac_len == 0 {
            return Err(invalid());
        }
    } else if int_len == 0 {
        return Err(invalid());
    }
    // Unit: everything up to the next digit or '.'.
    let unit_len = s
        .char_indices()
        .find(|(_, c)| *c == '.' || c.is_ascii_digit())
        .map_or(s.len(), |(i, _)| i);
    let unit = &s[..unit_len];
    *s = &s[unit_len..];
    if unit.is_empty() {
        return Err(DurationError::MissingUnit(input.to_string()));
    }
    let scale = match unit {
        "ns" => NS,
        "us" | "\u{b5}s" | "\u{3bc}s" => US,
        "ms" => MS,
        "s" => SEC,
        "m" => MIN,
        "h" => HOUR,
        _ => {
            return Err(DurationError::UnknownUnit {
                unit: unit.to_string(),
                input: input.to_string(),
            });
        }
    };
    let int_val: u128 = if int_digits.is_empty() {
        0
    } else {
        int_digits.parse().map_err(|_| invalid())?
    };
    let mut value = int_val.checked_mul(scale).ok_or_else(invalid)?;
    // Fraction: truncate like Go (it rounds down the sub-nanosecond remainder).
    let mut frac_scale = scale;
    for d in frac_digits.bytes() {
        frac_scale /= 10;
        if frac_scale == 0 {
            break;
        }
        value += u128::from(d - b'0') * frac_scale;
    }
    Ok(value)
}

/// Integer part of `value / scale` followed by the fraction without trailing zeros.
fn fmt_scaled(value: u128, scale: u128) -> String {
    let int = value / scale;
    let mut rem = value % scale;
    if rem == 0 {
        return int.to_string();
    }
    let mut digits = String::new();
    let mut s = scale / 10;
    while s > 0 {
        digits.push(char::from(b'0' + (rem / s) as u8));
        rem %= s;
        s /= 10;
    }
    let digits = digits.trim_end_matches('0');
    format!("{int}.{digits}")
}

impl fmt::Display for GoDuration {
    /// Same text as Go's `time.Duration.String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("0s");
        }
        let u = u128::from(self.0.unsigned_abs());
        let sign = if self.0 < 0 { "-" } else { "" };
        if u < SEC {
            let (scale, unit) = if u < US {
                (NS, "ns")
            } else if u < MS {
                (US, "\u{b5}s")
            } else {
                (MS, "ms")
            };
            return write!(f, "{sign}{}{unit}", fmt_scaled(u, scale));
        }
        let hours = u / HOUR;
        let minutes = (u % HOUR) / MIN;
        let secs = fmt_scaled(u % MIN, SEC);
        if hours > 0 {
            write!(f, "{sign}{hours}h{minutes}m{secs}s")
        } else if minutes > 0 {
            write!(f, "{sign}{minutes}m{secs}s")
        } else {
            write!(f, "{sign}{secs}s")
        }
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GoDuration::parse(s)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = GoDuration;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string such as \"30s\" or \"1h2m3s\"")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<GoDuration, E> {
        GoDuration::parse(v).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(DurationVisitor)
    }
}

/// A logging flush interval: Go duration text, or an integer count of nanoseconds
/// (component-base's `TimeOrMetaDuration`). Always written back as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeOrDuration(pub GoDuration);

impl Serialize for TimeOrDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

struct TimeOrDurationVisitor;

impl Visitor<'_> for TimeOrDurationVisitor {
    type Value = TimeOrDuration;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string such as \"5s\" or an integer number of nanoseconds")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<TimeOrDuration, E> {
        GoDuration::parse(v).map(TimeOrDuration).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<TimeOrDuration, E> {
        Ok(TimeOrDuration(GoDuration(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<TimeOrDuration, E> {
        i64::try_from(v)
            .map(|n| TimeOrDuration(GoDuration(n)))
            .map_err(|_| E::custom("duration out of range"))
    }
}

impl<'de> Deserialize<'de> for TimeOrDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TimeOrDurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> i64 {
        GoDuration::parse(s).unwrap().0
    }

    #[test]
    fn parses_go_syntax() {
        assert_eq!(p("0"), 0);
        assert_eq!(p("0s"), 0);
        assert_eq!(p("-0"), 0);
        assert_eq!(p("30s"), 30_000_000_000);
        assert_eq!(p("15m0s"), 900_000_000_000);
        assert_eq!(p("1h2m3s"), 3_723_000_000_000);
        assert_eq!(p("500ms"), 500_000_000);
        assert_eq!(p("-1s"), -1_000_000_000);
        assert_eq!(p("+5s"), 5_000_000_000);
        assert_eq!(p("1.5h"), 5_400_000_000_000);
        assert_eq!(p(".5s"), 500_000_000);
        assert_eq!(p("5.s"), 5_000_000_000);
        assert_eq!(p("1us"), 1_000);
        assert_eq!(p("1\u{b5}s"), 1_000);
        assert_eq!(p("1\u{3bc}s"), 1_000);
        assert_eq!(p("3ns"), 3);
        assert_eq!(p("1h1h"), 7_200_000_000_000);
        assert_eq!(p("2562047h47m16.854775807s"), i64::MAX);
        assert_eq!(p("-2562047h47m16.854775808s"), i64::MIN);
    }

    #[test]
    fn rejects_bad_syntax_with_go_messages() {
        assert_eq!(
            GoDuration::parse("30").unwrap_err().to_string(),
            "time: missing unit in duration \"30\""
        );
        assert_eq!(
            GoDuration::parse("1d").unwrap_err().to_string(),
            "time: unknown unit \"d\" in duration \"1d\""
        );
        for bad in [
            "",
            "-",
            "s",
            ".s",
            "1s ",
            " 1s",
            "abc",
            "2562047h47m16.854775808s",
            "1.2.3s",
        ] {
            assert!(GoDuration::parse(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1\u{b5}s"),
            (2_200_000, "2.2ms"),
            (500_000_000, "500ms"),
            (1_000_000_000, "1s"),
            (3_500_000_000, "3.5s"),
            (60_000_000_000, "1m0s"),
            (900_000_000_000, "15m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (86_400_000_000_000, "24h0m0s"),
            (3_723_000_000_000, "1h2m3s"),
            (4_000_000_001, "4.000000001s"),
            (-1_000_000_000, "-1s"),
            (-1_500_000, "-1.5ms"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for (nanos, text) in cases {
            assert_eq!(GoDuration(nanos).to_string(), text);
            assert_eq!(p(text), nanos, "round trip of {text}");
        }
    }

    #[test]
    fn round_trips_many_values() {
        let mut n: i64 = 1;
        while n < i64::MAX / 7 {
            for v in [n, -n, n + 13, n * 3 + 1] {
                let d = GoDuration(v);
                assert_eq!(GoDuration::parse(&d.to_string()).unwrap(), d);
            }
            n *= 7;
        }
    }
}
