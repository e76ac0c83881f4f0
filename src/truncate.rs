//! Cutting text that comes from outside (annotation values, API error bodies) to a bounded size
//! before it is kept, logged or sent on in an Event.

use std::borrow::Cow;

/// The most bytes of an outside value quoted in a log line, an error or an Event note.
pub const MAX_QUOTED_VALUE: usize = 128;

/// `s` if it has at most `max` bytes; otherwise its start, cut at a character boundary, followed by
/// `…(N bytes)` (N the original length), the whole at most `max` bytes (when `max` leaves room for
/// the marker at all).
pub fn truncate(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let marker = format!("…({} bytes)", s.len());
    let keep = max.saturating_sub(marker.len());
    let mut end = keep.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    if keep == 0 {
        // No room for the marker: the plain cut.
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        return Cow::Owned(s[..end].to_string());
    }
    Cow::Owned(format!("{}{marker}", &s[..end]))
}

/// [`truncate`] to [`MAX_QUOTED_VALUE`], owned: for a value kept in an error.
pub fn quoted_value(s: &str) -> String {
    truncate(s, MAX_QUOTED_VALUE).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_long_text_is_cut_with_its_length() {
        assert_eq!(truncate("bogus", 128), "bogus");
        let long = "x".repeat(300_000);
        let cut = truncate(&long, 128);
        assert!(cut.len() <= 128, "{}", cut.len());
        assert!(cut.ends_with("…(300000 bytes)"), "{cut}");
        assert!(cut.starts_with("xxxx"), "{cut}");
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let s = "é".repeat(1000);
        for max in [0, 1, 2, 3, 17, 18, 19, 20, 21, 100, 1024] {
            let cut = truncate(&s, max);
            assert!(cut.len() <= max, "{max}: {}", cut.len());
        }
        assert_eq!(truncate(&s, 1), "");
    }
}
