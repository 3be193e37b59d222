//! Cron expressions: when a pipeline schedule runs next (GitLab's `cron` and
//! `cron_timezone`, read by Fugit there) and whether a minute is in an autoscaler policy's
//! `periods` (fleeting's, with its `timezone`). One implementation for both. Pure: no
//! clock; a time zone's rules come from the system's zoneinfo through `jiff`.
//!
//! Syntax: five fields, `minute hour day-of-month month day-of-week`, each `*`, a value, a
//! range `a-b`, a step `*/n`, `a-b/n` or `a/n`, or a list of those; month names `jan`…`dec`
//! and day names `sun`…`sat` (any case); day-of-week `0`–`7` (`0` and `7` are Sunday),
//! `day#n` for the n-th such day of the month (`mon#1`); `L` as day-of-month for the last day;
//! `?` as `*` in either day field. Macros: `@yearly`/`@annually`, `@monthly`, `@weekly`,
//! `@daily`/`@midnight`, `@hourly`. When both day fields are restricted, a day matching
//! either runs, as in every cron. Times are the zone's wall-clock times: a time a DST change
//! skips runs when the clock reaches it (an hour later), a time it repeats runs once.

use jiff::civil::{Date, DateTime};
pub use jiff::tz::TimeZone;
use jiff::{Span, Timestamp};

/// How far ahead a next run is searched for; an expression that matches no day within it
/// (`0 0 30 2 *`) is refused.
const SEARCH_YEARS: i16 = 9;

/// A parsed cron expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    text: String,
    minutes: u64,
    hours: u32,
    /// Bits 1–31.
    days: u32,
    last_day: bool,
    /// Bits 1–12.
    months: u16,
    /// Bits 0–6, Sunday 0.
    weekdays: u8,
    /// `(weekday, n)`: the n-th such day of the month.
    nth_weekdays: Vec<(u8, u8)>,
    days_restricted: bool,
    weekdays_restricted: bool,
}

/// A cron expression that cannot be read, with what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cron `{cron}` is invalid syntax: {why}")]
pub struct CronError {
    pub cron: String,
    pub why: String,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Cron {
    pub fn parse(text: &str) -> Result<Cron, CronError> {
        let fail = |why: String| CronError {
            cron: text.to_owned(),
            why,
        };
        let expanded = match text.trim().to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_owned(),
            "@monthly" => "0 0 1 * *".to_owned(),
            "@weekly" => "0 0 * * 0".to_owned(),
            "@daily" | "@midnight" => "0 0 * * *".to_owned(),
            "@hourly" => "0 * * * *".to_owned(),
            other if other.starts_with('@') => {
                return Err(fail(format!(
                    "`{other}` is no macro (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)"
                )));
            }
            other => other.to_owned(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(fail(format!(
                "{} fields where there are 5: minute hour day-of-month month day-of-week",
                fields.len()
            )));
        };
        let field = |name: &str, spec: &str, min: u32, max: u32, names: &[&str]| {
            bits(spec, min, max, names).map_err(|why| fail(format!("{name} `{spec}`: {why}")))
        };
        let mut cron = Cron {
            text: text.to_owned(),
            minutes: field("minute", minute, 0, 59, &[])?,
            hours: u32::try_from(field("hour", hour, 0, 23, &[])?).unwrap_or(0),
            days: 0,
            last_day: false,
            months: u16::try_from(field("month", month, 1, 12, &MONTHS)?).unwrap_or(0),
            weekdays: 0,
            nth_weekdays: Vec::new(),
            days_restricted: !matches!(day, "*" | "?"),
            weekdays_restricted: !matches!(weekday, "*" | "?"),
        };
        for item in day.split(',') {
            if item == "l" {
                cron.last_day = true;
            } else {
                let b = field("day-of-month", item, 1, 31, &[])?;
                cron.days |= u32::try_from(b).unwrap_or(0);
            }
        }
        for item in weekday.split(',') {
            if let Some((d, n)) = item.split_once('#') {
                let d = field("day-of-week", d, 0, 7, &WEEKDAYS)?;
                let n: u8 = n
                    .parse()
                    .ok()
                    .filter(|n| (1..=5).contains(n))
                    .ok_or_else(|| fail(format!("day-of-week `{item}`: `#` takes 1 to 5")))?;
                if d.count_ones() != 1 {
                    return Err(fail(format!("day-of-week `{item}`: `#` follows one day")));
                }
                let day = u8::try_from(d.trailing_zeros() % 7).unwrap_or(0);
                cron.nth_weekdays.push((day, n));
            } else {
                let b = field("day-of-week", item, 0, 7, &WEEKDAYS)?;
                // 7 is Sunday too.
                cron.weekdays |= u8::try_from((b | (b >> 7)) & 0x7f).unwrap_or(0);
            }
        }
        if cron.weekdays_restricted && cron.weekdays == 0 && cron.nth_weekdays.is_empty() {
            return Err(fail("day-of-week selects no day".to_owned()));
        }
        Ok(cron)
    }

    fn day_matches(&self, date: Date) -> bool {
        let dom = (self.days >> date.day()) & 1 == 1
            || (self.last_day && date.day() == date.days_in_month());
        let weekday = date.weekday().to_sunday_zero_offset();
        let dow = (self.weekdays >> weekday) & 1 == 1
            || self.nth_weekdays.iter().any(|&(d, n)| {
                i8::try_from(d).is_ok_and(|d| d == weekday)
                    && i8::try_from(n).is_ok_and(|n| (date.day() - 1) / 7 + 1 == n)
            });
        match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => dom || dow,
            (true, false) => dom,
            (false, true) => dow,
            (false, false) => true,
        }
    }

    /// Whether the minute holding `at` (Unix ms) matches, on `zone`'s wall clock.
    pub fn matches(&self, at: i64, zone: &TimeZone) -> bool {
        let Ok(ts) = Timestamp::from_millisecond(at) else {
            return false;
        };
        let t = ts.to_zoned(zone.clone()).datetime();
        (self.months >> t.month()) & 1 == 1
            && self.day_matches(t.date())
            && (self.hours >> t.hour()) & 1 == 1
            && (self.minutes >> t.minute()) & 1 == 1
    }

    /// The first time after `after` (Unix ms) the expression names in `zone`, Unix ms;
    /// `None` when there is none within `SEARCH_YEARS` years.
    pub fn next_after(&self, after: i64, zone: &TimeZone) -> Option<i64> {
        let now = Timestamp::from_millisecond(after).ok()?;
        let wall = now.to_zoned(zone.clone()).datetime();
        let minute = Span::new().minutes(1);
        let mut t = wall
            .date()
            .at(wall.hour(), wall.minute(), 0, 0)
            .checked_add(minute)
            .ok()?;
        let end = wall.year().saturating_add(SEARCH_YEARS);
        while t.year() <= end {
            if (self.months >> t.month()) & 1 == 0 {
                t = next_month(t)?;
            } else if !self.day_matches(t.date()) {
                t = t.date().tomorrow().ok()?.at(0, 0, 0, 0);
            } else if (self.hours >> t.hour()) & 1 == 0 {
                t = t
                    .date()
                    .at(t.hour(), 0, 0, 0)
                    .checked_add(Span::new().hours(1))
                    .ok()?;
            } else if (self.minutes >> t.minute()) & 1 == 0 {
                t = t.checked_add(minute).ok()?;
            } else {
                let at = t.to_zoned(zone.clone()).ok()?.timestamp().as_millisecond();
                if at > after {
                    return Some(at);
                }
                // A repeated wall-clock hour (DST ends): its second pass is not a new time.
                t = t.checked_add(minute).ok()?;
            }
        }
        None
    }
}

impl std::fmt::Display for Cron {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

fn next_month(t: DateTime) -> Option<DateTime> {
    Some(
        t.date()
            .first_of_month()
            .checked_add(Span::new().months(1))
            .ok()?
            .at(0, 0, 0, 0),
    )
}

/// The bits of `min..=max` one field selects (a list of items).
fn bits(spec: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let value = |s: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| *n == s) {
            // Month names count from 1, day names from 0.
            let i = u32::try_from(i).unwrap_or(0);
            return Ok(if min == 1 { i + 1 } else { i });
        }
        let v: u32 = s
            .parse()
            .map_err(|_| format!("`{s}` is not a number from {min} to {max}"))?;
        if v < min || v > max {
            return Err(format!("{v} is outside {min}-{max}"));
        }
        Ok(v)
    };
    let mut out = 0u64;
    for item in spec.split(',') {
        if item.is_empty() {
            return Err("an empty item".to_owned());
        }
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("step `{s}` is not a positive number"))?;
                (r, step)
            }
            None => (item, 1),
        };
        let (from, to) = if range == "*" || range == "?" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else if item.contains('/') {
            (value(range)?, max)
        } else {
            let v = value(range)?;
            (v, v)
        };
        if from > to {
            return Err(format!("the range {from}-{to} runs backwards"));
        }
        let mut v = from;
        while v <= to {
            out |= 1 << v;
            v += step;
        }
    }
    Ok(out)
}

/// The time zone `name` names — an IANA name such as `Europe/Berlin`, `UTC`, or one of
/// the Rails names GitLab also accepts (`Pacific Time (US & Canada)`, `Berlin`: Rails'
/// `ActiveSupport::TimeZone::MAPPING`) — read from the system's zoneinfo; `None` when
/// there is none of that name.
pub fn zone(name: &str) -> Option<TimeZone> {
    if name.eq_ignore_ascii_case("utc") || name == "Etc/UTC" {
        return Some(TimeZone::UTC);
    }
    TimeZone::get(name).ok().or_else(|| {
        let iana = RAILS_ZONES
            .iter()
            .find(|(rails, _)| *rails == name)
            .map(|(_, iana)| *iana)?;
        TimeZone::get(iana).ok()
    })
}

/// Rails' time zone names and the IANA zones they stand for (ActiveSupport 7.1's
/// `TimeZone::MAPPING`).
pub const RAILS_ZONES: &[(&str, &str)] = &[
    ("International Date Line West", "Etc/GMT+12"),
    ("Midway Island", "Pacific/Midway"),
    ("American Samoa", "Pacific/Pago_Pago"),
    ("Hawaii", "Pacific/Honolulu"),
    ("Alaska", "America/Juneau"),
    ("Pacific Time (US & Canada)", "America/Los_Angeles"),
    ("Tijuana", "America/Tijuana"),
    ("Mountain Time (US & Canada)", "America/Denver"),
    ("Arizona", "America/Phoenix"),
    ("Chihuahua", "America/Chihuahua"),
    ("Mazatlan", "America/Mazatlan"),
    ("Central Time (US & Canada)", "America/Chicago"),
    ("Saskatchewan", "America/Regina"),
    ("Guadalajara", "America/Mexico_City"),
    ("Mexico City", "America/Mexico_City"),
    ("Monterrey", "America/Monterrey"),
    ("Central America", "America/Guatemala"),
    ("Eastern Time (US & Canada)", "America/New_York"),
    ("Indiana (East)", "America/Indiana/Indianapolis"),
    ("Bogota", "America/Bogota"),
    ("Lima", "America/Lima"),
    ("Quito", "America/Lima"),
    ("Atlantic Time (Canada)", "America/Halifax"),
    ("Caracas", "America/Caracas"),
    ("La Paz", "America/La_Paz"),
    ("Santiago", "America/Santiago"),
    ("Newfoundland", "America/St_Johns"),
    ("Brasilia", "America/Sao_Paulo"),
    ("Buenos Aires", "America/Argentina/Buenos_Aires"),
    ("Montevideo", "America/Montevideo"),
    ("Georgetown", "America/Guyana"),
    ("Puerto Rico", "America/Puerto_Rico"),
    ("Greenland", "America/Nuuk"),
    ("Mid-Atlantic", "Atlantic/South_Georgia"),
    ("Azores", "Atlantic/Azores"),
    ("Cape Verde Is.", "Atlantic/Cape_Verde"),
    ("Dublin", "Europe/Dublin"),
    ("Edinburgh", "Europe/London"),
    ("Lisbon", "Europe/Lisbon"),
    ("London", "Europe/London"),
    ("Casablanca", "Africa/Casablanca"),
    ("Monrovia", "Africa/Monrovia"),
    ("UTC", "Etc/UTC"),
    ("Belgrade", "Europe/Belgrade"),
    ("Bratislava", "Europe/Bratislava"),
    ("Budapest", "Europe/Budapest"),
    ("Ljubljana", "Europe/Ljubljana"),
    ("Prague", "Europe/Prague"),
    ("Sarajevo", "Europe/Sarajevo"),
    ("Skopje", "Europe/Skopje"),
    ("Warsaw", "Europe/Warsaw"),
    ("Zagreb", "Europe/Zagreb"),
    ("Brussels", "Europe/Brussels"),
    ("Copenhagen", "Europe/Copenhagen"),
    ("Madrid", "Europe/Madrid"),
    ("Paris", "Europe/Paris"),
    ("Amsterdam", "Europe/Amsterdam"),
    ("Berlin", "Europe/Berlin"),
    ("Bern", "Europe/Zurich"),
    ("Zurich", "Europe/Zurich"),
    ("Rome", "Europe/Rome"),
    ("Stockholm", "Europe/Stockholm"),
    ("Vienna", "Europe/Vienna"),
    ("West Central Africa", "Africa/Algiers"),
    ("Bucharest", "Europe/Bucharest"),
    ("Cairo", "Africa/Cairo"),
    ("Helsinki", "Europe/Helsinki"),
    ("Kyiv", "Europe/Kiev"),
    ("Riga", "Europe/Riga"),
    ("Sofia", "Europe/Sofia"),
    ("Tallinn", "Europe/Tallinn"),
    ("Vilnius", "Europe/Vilnius"),
    ("Athens", "Europe/Athens"),
    ("Istanbul", "Europe/Istanbul"),
    ("Minsk", "Europe/Minsk"),
    ("Jerusalem", "Asia/Jerusalem"),
    ("Harare", "Africa/Harare"),
    ("Pretoria", "Africa/Johannesburg"),
    ("Kaliningrad", "Europe/Kaliningrad"),
    ("Moscow", "Europe/Moscow"),
    ("St. Petersburg", "Europe/Moscow"),
    ("Volgograd", "Europe/Volgograd"),
    ("Samara", "Europe/Samara"),
    ("Kuwait", "Asia/Kuwait"),
    ("Riyadh", "Asia/Riyadh"),
    ("Nairobi", "Africa/Nairobi"),
    ("Baghdad", "Asia/Baghdad"),
    ("Tehran", "Asia/Tehran"),
    ("Abu Dhabi", "Asia/Muscat"),
    ("Muscat", "Asia/Muscat"),
    ("Baku", "Asia/Baku"),
    ("Tbilisi", "Asia/Tbilisi"),
    ("Yerevan", "Asia/Yerevan"),
    ("Kabul", "Asia/Kabul"),
    ("Ekaterinburg", "Asia/Yekaterinburg"),
    ("Islamabad", "Asia/Karachi"),
    ("Karachi", "Asia/Karachi"),
    ("Tashkent", "Asia/Tashkent"),
    ("Chennai", "Asia/Kolkata"),
    ("Kolkata", "Asia/Kolkata"),
    ("Mumbai", "Asia/Kolkata"),
    ("New Delhi", "Asia/Kolkata"),
    ("Kathmandu", "Asia/Kathmandu"),
    ("Astana", "Asia/Dhaka"),
    ("Dhaka", "Asia/Dhaka"),
    ("Sri Jayawardenepura", "Asia/Colombo"),
    ("Almaty", "Asia/Almaty"),
    ("Novosibirsk", "Asia/Novosibirsk"),
    ("Rangoon", "Asia/Rangoon"),
    ("Bangkok", "Asia/Bangkok"),
    ("Hanoi", "Asia/Bangkok"),
    ("Jakarta", "Asia/Jakarta"),
    ("Krasnoyarsk", "Asia/Krasnoyarsk"),
    ("Beijing", "Asia/Shanghai"),
    ("Chongqing", "Asia/Chongqing"),
    ("Hong Kong", "Asia/Hong_Kong"),
    ("Urumqi", "Asia/Urumqi"),
    ("Kuala Lumpur", "Asia/Kuala_Lumpur"),
    ("Singapore", "Asia/Singapore"),
    ("Taipei", "Asia/Taipei"),
    ("Perth", "Australia/Perth"),
    ("Irkutsk", "Asia/Irkutsk"),
    ("Ulaanbaatar", "Asia/Ulaanbaatar"),
    ("Seoul", "Asia/Seoul"),
    ("Osaka", "Asia/Tokyo"),
    ("Sapporo", "Asia/Tokyo"),
    ("Tokyo", "Asia/Tokyo"),
    ("Yakutsk", "Asia/Yakutsk"),
    ("Darwin", "Australia/Darwin"),
    ("Adelaide", "Australia/Adelaide"),
    ("Canberra", "Australia/Canberra"),
    ("Melbourne", "Australia/Melbourne"),
    ("Sydney", "Australia/Sydney"),
    ("Brisbane", "Australia/Brisbane"),
    ("Hobart", "Australia/Hobart"),
    ("Vladivostok", "Asia/Vladivostok"),
    ("Guam", "Pacific/Guam"),
    ("Port Moresby", "Pacific/Port_Moresby"),
    ("Magadan", "Asia/Magadan"),
    ("Srednekolymsk", "Asia/Srednekolymsk"),
    ("Solomon Is.", "Pacific/Guadalcanal"),
    ("New Caledonia", "Pacific/Noumea"),
    ("Fiji", "Pacific/Fiji"),
    ("Kamchatka", "Asia/Kamchatka"),
    ("Marshall Is.", "Pacific/Majuro"),
    ("Auckland", "Pacific/Auckland"),
    ("Wellington", "Pacific/Auckland"),
    ("Nuku'alofa", "Pacific/Tongatapu"),
    ("Tokelau Is.", "Pacific/Fakaofo"),
    ("Chatham Is.", "Pacific/Chatham"),
    ("Samoa", "Pacific/Apia"),
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_millisecond()
    }

    fn next(cron: &str, zone_name: &str, after: &str) -> String {
        let at = Cron::parse(cron)
            .unwrap()
            .next_after(ms(after), &zone(zone_name).unwrap())
            .unwrap();
        Timestamp::from_millisecond(at).unwrap().to_string()
    }

    #[test]
    fn rails_zone_names_are_read_as_gitlab_reads_them() {
        for &(rails, iana) in RAILS_ZONES {
            assert!(zone(rails).is_some(), "{rails} ({iana}) is in the zoneinfo");
        }
        assert_eq!(
            next(
                "0 9 * * *",
                "Pacific Time (US & Canada)",
                "2026-11-28T10:15:30Z"
            ),
            "2026-11-28T17:00:00Z"
        );
        assert_eq!(
            next("0 9 * * *", "Berlin", "2026-07-01T00:00:00Z"),
            "2026-07-01T07:00:00Z"
        );
        assert!(zone("Atlantis").is_none());
    }

    #[test]
    fn common_expressions() {
        let t = "2026-11-28T10:15:30Z";
        assert_eq!(next("* * * * *", "UTC", t), "2026-11-28T10:16:00Z");
        assert_eq!(next("*/15 * * * *", "UTC", t), "2026-11-28T10:30:00Z");
        assert_eq!(next("0 3 * * *", "UTC", t), "2026-11-29T03:00:00Z");
        assert_eq!(next("@daily", "UTC", t), "2026-11-29T00:00:00Z");
        assert_eq!(next("@hourly", "UTC", t), "2026-11-28T11:00:00Z");
        assert_eq!(next("0 0 1 1 *", "UTC", t), "2027-01-01T00:00:00Z");
        // Weekdays by number and name; 2026-11-28 is a Saturday.
        assert_eq!(next("0 9 * * 1-5", "UTC", t), "2026-11-30T09:00:00Z");
        assert_eq!(next("0 9 * * MON-FRI", "UTC", t), "2026-11-30T09:00:00Z");
        assert_eq!(next("0 9 * * 7", "UTC", t), "2026-11-29T09:00:00Z");
        assert_eq!(next("30 8 * jan,Dec *", "UTC", t), "2026-12-01T08:30:00Z");
        // The last day, the second Tuesday, leap days.
        assert_eq!(next("0 0 L * *", "UTC", t), "2026-11-30T00:00:00Z");
        assert_eq!(next("0 0 * * tue#2", "UTC", t), "2026-12-08T00:00:00Z");
        assert_eq!(next("0 0 29 2 *", "UTC", t), "2028-02-29T00:00:00Z");
        // Both day fields restricted: either matches (the 1st, or a Monday).
        assert_eq!(next("0 0 1 * 1", "UTC", t), "2026-11-30T00:00:00Z");
        // Exactly on a run time: the next one, not the same.
        assert_eq!(
            next("0 3 * * *", "UTC", "2026-11-29T03:00:00Z"),
            "2026-11-30T03:00:00Z"
        );
    }

    #[test]
    fn wall_clock_times_of_a_zone_across_dst() {
        let t = "2026-11-28T10:15:30Z";
        assert_eq!(next("0 9 * * *", "Asia/Tokyo", t), "2026-11-29T00:00:00Z");
        // Berlin leaves summer time on 2026-10-25 (03:00 CEST → 02:00 CET).
        assert_eq!(
            next("0 9 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z"),
            "2026-10-25T08:00:00Z"
        );
        // 02:30 does not exist on 2026-03-29 in Berlin: it runs when the clock says 03:30.
        assert_eq!(
            next("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z"),
            "2026-03-29T01:30:00Z"
        );
        // 02:30 happens twice on 2026-10-25: once.
        let first = next("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z");
        assert_eq!(first, "2026-10-25T00:30:00Z");
        assert_eq!(
            next("30 2 * * *", "Europe/Berlin", &first),
            "2026-10-26T01:30:00Z"
        );
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        let why = |c: &str| Cron::parse(c).unwrap_err().to_string();
        assert_eq!(
            why("* * *"),
            "cron `* * *` is invalid syntax: 3 fields where there are 5: minute hour day-of-month month day-of-week"
        );
        assert_eq!(
            why("60 * * * *"),
            "cron `60 * * * *` is invalid syntax: minute `60`: 60 is outside 0-59"
        );
        assert_eq!(
            why("* * * * funday"),
            "cron `* * * * funday` is invalid syntax: day-of-week `funday`: `funday` is not a number from 0 to 7"
        );
        assert!(why("*/0 * * * *").contains("step `0` is not a positive number"));
        assert!(why("5-1 * * * *").contains("runs backwards"));
        assert!(why("@often").contains("is no macro"));
        assert!(why("0 0 * * mon#6").contains("`#` takes 1 to 5"));
        // Never: refused when the schedule is made (no next run).
        let never = Cron::parse("0 0 30 2 *").unwrap();
        assert_eq!(
            never.next_after(ms("2026-01-01T00:00:00Z"), &TimeZone::UTC),
            None
        );
        assert!(zone("Mars/Olympus").is_none());
    }
}
