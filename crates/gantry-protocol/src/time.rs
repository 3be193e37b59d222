//! Calendar arithmetic for the timestamps Gantry writes (the API's, log line headers, zip
//! entries, step results): days since 1970-01-01 ↔ proleptic Gregorian dates (Howard
//! Hinnant's `civil_from_days`/`days_from_civil`), and RFC 3339 in UTC. No clock and no
//! time zone database: the one implementation every crate uses.

/// Days since 1970-01-01 (negative before) → (year, month 1–12, day 1–31).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // month is 1..=12 and day 1..=31 by construction.
    (year, month as u32, day as u32)
}

/// (year, month 1–12, day 1–31) → days since 1970-01-01 (negative before); `None` for a
/// month or day out of range.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> Option<i64> {
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let (month, day) = (i64::from(month), i64::from(day));
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

/// Unix milliseconds as `2026-01-31T10:00:00.123Z` (GitLab's API format).
pub fn rfc3339_millis(ms: i64) -> String {
    format!(
        "{}.{:03}Z",
        date_time(ms.div_euclid(1000)),
        ms.rem_euclid(1000)
    )
}

/// Unix seconds as `2026-01-31T10:00:00Z`.
pub fn rfc3339_secs(secs: i64) -> String {
    format!("{}Z", date_time(secs))
}

/// `2026-01-31T10:00:00`.
fn date_time(secs: i64) -> String {
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `2026-01-31T10:00:00Z` or `2026-01-31T10:00:00.123Z` (what [`rfc3339_millis`] and
/// [`rfc3339_secs`] write; UTC only) → Unix milliseconds; `None` for anything else.
pub fn parse_rfc3339_utc(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-');
    let year: i64 = d.next()?.parse().ok()?;
    let month: u32 = d.next()?.parse().ok()?;
    let day: u32 = d.next()?.parse().ok()?;
    let (hms, fraction) = match time.split_once('.') {
        Some((hms, f)) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => (hms, f),
        Some(_) => return None,
        None => (time, "0"),
    };
    let mut t = hms.splitn(3, ':');
    let hour: i64 = t.next()?.parse().ok().filter(|h| (0..24).contains(h))?;
    let minute: i64 = t.next()?.parse().ok().filter(|m| (0..60).contains(m))?;
    let second: i64 = t.next()?.parse().ok().filter(|s| (0..61).contains(s))?;
    let millis: i64 = format!("{fraction:0<3}")[..3].parse().ok()?;
    let days = days_from_civil(year, month, day)?;
    Some(((days * 86_400 + hour * 3600 + minute * 60 + second) * 1000) + millis)
}

/// Now as Unix milliseconds (0 before the epoch).
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_formats() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(1_769_853_600_123),
            "2026-01-31T10:00:00.123Z"
        );
        assert_eq!(rfc3339_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_secs(1_795_788_000), "2026-11-27T14:00:00Z");
        assert_eq!(rfc3339_secs(-1), "1969-12-31T23:59:59Z");
        for days in [-800_000, -1, 0, 1, 11_016, 20_000, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), Some(days), "{y}-{m}-{d}");
        }
        assert_eq!(days_from_civil(2026, 13, 1), None);
        assert_eq!(days_from_civil(2026, 1, 0), None);
    }

    #[test]
    fn parses_what_it_writes() {
        for ms in [0, 1_769_853_600_123, 951_782_400_000, -1000] {
            assert_eq!(parse_rfc3339_utc(&rfc3339_millis(ms)), Some(ms));
        }
        assert_eq!(
            parse_rfc3339_utc(&rfc3339_secs(1_795_788_000)),
            Some(1_795_788_000_000)
        );
        assert_eq!(
            parse_rfc3339_utc("2026-01-31T10:00:00.5Z"),
            Some(1_769_853_600_500)
        );
        for bad in [
            "",
            "2026-01-31",
            "2026-01-31T10:00:00+01:00",
            "2026-13-01T00:00:00Z",
            "2026-01-31T25:00:00Z",
            "2026-01-31T10:00:00.Z",
        ] {
            assert_eq!(parse_rfc3339_utc(bad), None, "{bad}");
        }
    }
}
