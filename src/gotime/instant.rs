//! An instant in Go's text forms: RFC 3339 with nanoseconds (`time.Time`'s JSON) or whole seconds
//! (`metav1.Time`), `time.UnixDate`, klog's local month, day and time of day with microseconds,
//! component-base's JSON milliseconds since the epoch; and the civil date beneath them.

use std::time::{SystemTime, UNIX_EPOCH};

/// One instant, split the way klog's header prints it (local time, as Go's `time.Now()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Month, 1-12.
    pub month: u32,
    /// Day of the month, 1-31.
    pub day: u32,
    /// Hour, 0-23.
    pub hour: u32,
    /// Minute, 0-59.
    pub minute: u32,
    /// Second, 0-60.
    pub second: u32,
    /// Microseconds within the second.
    pub micros: u32,
}

/// Seconds and nanoseconds since the epoch (before it: zero).
fn since_epoch(t: SystemTime) -> (i64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    (
        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        d.subsec_nanos(),
    )
}

/// `t` in the local time zone (the `TZ` variable or `/etc/localtime`; UTC when neither says otherwise
/// or the conversion fails).
pub fn local(t: SystemTime) -> Stamp {
    let (secs, nanos) = since_epoch(t);
    let micros = nanos / 1000;
    let Some(tm) = crate::sys::time::local_time(secs) else {
        return utc(secs, micros);
    };
    Stamp {
        month: tm.month0 + 1,
        day: tm.day,
        hour: tm.hour,
        minute: tm.minute,
        second: tm.second,
        micros,
    }
}

/// `secs` since the epoch in UTC (civil-from-days, proleptic Gregorian calendar).
pub fn utc(secs: i64, micros: u32) -> Stamp {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (_, month, day) = civil_from_days(days);
    let part = |v: i64| u32::try_from(v).unwrap_or(0);
    Stamp {
        month,
        day,
        hour: part(rem / 3600),
        minute: part(rem % 3600 / 60),
        second: part(rem % 60),
        micros,
    }
}

/// Year, month and day of a day number counted from 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `t` in Go's `time.UnixDate` layout (`Mon Jan _2 15:04:05 MST 2006`) in the local time zone, as
/// upstream's `/statusz` prints its start time; UTC when the conversion fails.
pub fn unix_date(t: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (secs, _) = since_epoch(t);
    let local = crate::sys::time::local_time(secs);
    let Some((tm, zone)) = local.and_then(|tm| tm.zone.clone().map(|z| (tm, z))) else {
        let days = secs.div_euclid(86_400);
        let s = utc(secs, 0);
        let (year, _, _) = civil_from_days(days);
        let wday = usize::try_from((days + 4).rem_euclid(7)).unwrap_or(0);
        return format!(
            "{} {} {:>2} {:02}:{:02}:{:02} UTC {year}",
            DAYS[wday],
            MONTHS[usize::try_from(s.month).unwrap_or(1).clamp(1, 12) - 1],
            s.day,
            s.hour,
            s.minute,
            s.second
        );
    };
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} {zone} {}",
        DAYS[tm.weekday as usize % 7],
        MONTHS[tm.month0 as usize % 12],
        tm.day,
        tm.hour,
        tm.minute,
        tm.second,
        tm.year
    )
}

/// Milliseconds since the epoch as a float (component-base's JSON `ts`).
pub fn epoch_millis(t: SystemTime) -> f64 {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    // Nanoseconds fit a u64 until the year 2554; as upstream: nanoseconds / 1e6.
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    nanos as f64 / 1e6
}

/// What Go's `time.Time{}` marshals to: the zero time, used for "never".
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Seconds (negative before the epoch) and nanoseconds within the second, of `t`.
fn signed_since_epoch(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(e) => {
            let d = e.duration();
            let mut secs = -i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            let mut nanos = d.subsec_nanos();
            if nanos > 0 {
                secs -= 1;
                nanos = 1_000_000_000 - nanos;
            }
            (secs, nanos)
        }
    }
}

/// `YYYY-MM-DDThh:mm:ss` of `secs` since the epoch, in UTC.
fn date_time(secs: i64) -> String {
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Renders `t` in UTC the way Go's `time.Time` marshals to JSON (RFC 3339 with up to nine fractional
/// digits, trailing zeros dropped), e.g. `2026-11-22T17:52:59.1234Z`. `None` renders Go's zero time.
pub fn format_rfc3339_nano(t: Option<SystemTime>) -> String {
    let Some(t) = t else {
        return ZERO_TIME.to_string();
    };
    let (secs, nanos) = signed_since_epoch(t);
    let mut out = date_time(secs);
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// RFC 3339 in UTC with whole seconds, as `metav1.Time` marshals (before the epoch: the epoch).
pub fn format_rfc3339(t: SystemTime) -> String {
    let (secs, _) = since_epoch(t);
    format!("{}Z", date_time(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn utc_splits_a_known_instant() {
        // 2024-11-26T20:57:55.089326Z
        let s = utc(1_732_654_675, 89_326);
        assert_eq!((s.month, s.day), (11, 26));
        assert_eq!((s.hour, s.minute, s.second, s.micros), (20, 57, 55, 89_326));
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn local_time_keeps_microseconds() {
        let t = UNIX_EPOCH + Duration::from_micros(1_732_654_675_089_326);
        assert_eq!(local(t).micros, 89_326);
    }

    #[test]
    fn epoch_millis_keeps_sub_millisecond_digits() {
        // Upstream computes float64(nanos) / 1e6: the same rounding gives the same digits.
        let t = UNIX_EPOCH + Duration::from_nanos(1_732_654_675_089_326_500);
        assert_eq!(format!("{}", epoch_millis(t)), "1732654675089.3267");
    }

    #[test]
    fn formats_like_go_rfc3339nano() {
        assert_eq!(
            format_rfc3339_nano(Some(UNIX_EPOCH)),
            "1970-01-01T00:00:00Z"
        );
        // 2026-11-22T17:52:59Z = 1795369979
        let t = UNIX_EPOCH + Duration::new(1_795_369_979, 120_000_000);
        assert_eq!(format_rfc3339_nano(Some(t)), "2026-11-22T17:52:59.12Z");
        assert_eq!(format_rfc3339(t), "2026-11-22T17:52:59Z");
        let t = UNIX_EPOCH + Duration::new(951_782_400, 1); // 2000-02-29
        assert_eq!(
            format_rfc3339_nano(Some(t)),
            "2000-02-29T00:00:00.000000001Z"
        );
        let t = UNIX_EPOCH - Duration::from_millis(500);
        assert_eq!(format_rfc3339_nano(Some(t)), "1969-12-31T23:59:59.5Z");
        assert_eq!(format_rfc3339_nano(None), ZERO_TIME);
    }
}
