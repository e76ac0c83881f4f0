//! The C library's local time zone (`TZ` or `/etc/localtime`).

/// A moment in the local time zone, as `localtime_r(3)` breaks it down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalTime {
    /// Year (e.g. 2026).
    pub year: i64,
    /// Month, 0 = January.
    pub month0: u32,
    /// Day of the month, from 1.
    pub day: u32,
    /// Day of the week, 0 = Sunday.
    pub weekday: u32,
    /// Hour, minute and second.
    pub hour: u32,
    /// Minute.
    pub minute: u32,
    /// Second (60 at a leap second).
    pub second: u32,
    /// The zone's abbreviation (e.g. `CET`), when the C library gives one.
    pub zone: Option<String>,
}

/// `secs` since the epoch in the local time zone; `None` when the conversion fails.
pub fn local_time(secs: i64) -> Option<LocalTime> {
    let secs_t = libc::time_t::try_from(secs).unwrap_or(libc::time_t::MAX);
    // SAFETY: `tm` is a plain C struct for which all-zero bytes are a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is the re-entrant variant and writes
    // only into `tm`.
    if unsafe { libc::localtime_r(&secs_t, &mut tm) }.is_null() {
        return None;
    }
    let zone = (!tm.tm_zone.is_null()).then(|| {
        // SAFETY: tm_zone points at a NUL-terminated zone abbreviation owned by the C library, valid
        // until the next tzset; it is copied at once.
        unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) }
            .to_string_lossy()
            .into_owned()
    });
    let part = |v: libc::c_int| u32::try_from(v).unwrap_or(0);
    Some(LocalTime {
        year: i64::from(tm.tm_year) + 1900,
        month0: part(tm.tm_mon),
        day: part(tm.tm_mday),
        weekday: part(tm.tm_wday),
        hour: part(tm.tm_hour),
        minute: part(tm.tm_min),
        second: part(tm.tm_sec),
        zone,
    })
}
