//! The `periods` of an autoscaler policy: five-field unix cron expressions (minute,
//! hour, day of month, month, day of week), matched against a minute in UTC.
//!
//! Fields take `*`, numbers, `a-b` ranges, `,` lists and `/n` steps; months `jan`–`dec`
//! and weekdays `sun`–`sat` by name; weekday 0 and 7 are Sunday. When both day fields
//! are restricted a day matches if either does (cron's rule).

use std::fmt;

/// One parsed period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    text: String,
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    days_restricted: bool,
    weekdays_restricted: bool,
}

/// A period that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("period {text:?}: {detail}")]
pub struct CronError {
    text: String,
    detail: String,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Cron {
    /// Parses `text` (`"* 7-19 * * mon-fri"`).
    pub fn parse(text: &str) -> Result<Self, CronError> {
        let error = |detail: String| CronError {
            text: text.to_owned(),
            detail,
        };
        let fields: Vec<&str> = text.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(error(format!(
                "has {} fields; a period has five: minute hour day-of-month month day-of-week, as in \"* 7-19 * * mon-fri\"",
                fields.len()
            )));
        };
        let minutes = field(minute, 0, 59, &[]).map_err(|d| error(format!("minute: {d}")))?;
        let hours = field(hour, 0, 23, &[]).map_err(|d| error(format!("hour: {d}")))?;
        let days = field(day, 1, 31, &[]).map_err(|d| error(format!("day of month: {d}")))?;
        let months = field(month, 1, 12, &MONTHS).map_err(|d| error(format!("month: {d}")))?;
        let mut weekdays =
            field(weekday, 0, 7, &WEEKDAYS).map_err(|d| error(format!("day of week: {d}")))?;
        if weekdays & (1 << 7) != 0 {
            weekdays |= 1;
        }
        Ok(Self {
            text: text.to_owned(),
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: (weekdays & 0x7f) as u8,
            days_restricted: day != "*",
            weekdays_restricted: weekday != "*",
        })
    }

    /// Whether the minute holding `unix_seconds` (UTC) matches.
    pub fn matches(&self, unix_seconds: i64) -> bool {
        let days_since_epoch = unix_seconds.div_euclid(86_400);
        let second_of_day = unix_seconds.rem_euclid(86_400);
        let minute = second_of_day / 60 % 60;
        let hour = second_of_day / 3600;
        let (_, month, day) = gantry_protocol::time::civil_from_days(days_since_epoch);
        // 1970-01-01 was a Thursday (4).
        let weekday = (days_since_epoch + 4).rem_euclid(7);
        let day_ok = self.days & (1 << day) != 0;
        let weekday_ok = self.weekdays & (1 << weekday) != 0;
        let day_matches = match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => day_ok || weekday_ok,
            _ => day_ok && weekday_ok,
        };
        self.minutes & (1 << minute) != 0
            && self.hours & (1 << hour) != 0
            && self.months & (1 << month) != 0
            && day_matches
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The bit set of one field.
fn field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("step {step:?} is not a positive number"))?;
                (range, step)
            }
            None => (part, 1),
        };
        let (low, high) = if range == "*" {
            (min, max)
        } else if let Some((low, high)) = range.split_once('-') {
            (value(low, min, max, names)?, value(high, min, max, names)?)
        } else {
            let single = value(range, min, max, names)?;
            (single, if part.contains('/') { max } else { single })
        };
        if low > high {
            return Err(format!("range {range:?} runs backwards"));
        }
        let mut v = low;
        while v <= high {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

fn value(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(index) = names.iter().position(|n| *n == lower) {
        // Months are named from 1, weekdays from 0.
        return Ok(index as u32 + u32::from(names.len() == 12));
    }
    let number: u32 = text.parse().map_err(|_| {
        if names.is_empty() {
            format!("{text:?} is not a number")
        } else {
            format!(
                "{text:?} is neither a number nor one of {}",
                names.join(", ")
            )
        }
    })?;
    if number < min || number > max {
        return Err(format!("{number} is outside {min}-{max}"));
    }
    Ok(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-11-27 is a Friday.
    const FRIDAY_0930: i64 = 1_795_737_600 + 9 * 3600 + 30 * 60;

    #[test]
    fn every_minute_matches_always() {
        let cron = Cron::parse("* * * * *").unwrap();
        assert!(cron.matches(0));
        assert!(cron.matches(FRIDAY_0930));
    }

    #[test]
    fn office_hours_match_weekdays_only() {
        let cron = Cron::parse("* 7-19 * * mon-fri").unwrap();
        assert!(cron.matches(FRIDAY_0930));
        assert!(!cron.matches(FRIDAY_0930 + 86_400), "Saturday");
        assert!(!cron.matches(FRIDAY_0930 + 11 * 3600), "20:30");
    }

    #[test]
    fn steps_lists_names_and_sunday_as_seven() {
        let cron = Cron::parse("*/15 9 27 NOV 7,5").unwrap();
        assert!(cron.matches(FRIDAY_0930));
        assert!(!cron.matches(FRIDAY_0930 + 60));
        let sunday = Cron::parse("* * * * 7").unwrap();
        assert!(sunday.matches(FRIDAY_0930 + 2 * 86_400));
        assert!(!sunday.matches(FRIDAY_0930));
        let months = Cron::parse("* * * dec-dec *").unwrap();
        assert!(!months.matches(FRIDAY_0930));
    }

    #[test]
    fn restricted_day_fields_match_either() {
        let cron = Cron::parse("* * 1 * fri").unwrap();
        assert!(cron.matches(FRIDAY_0930), "a Friday that is not the 1st");
    }

    #[test]
    fn bad_periods_say_which_field_and_why() {
        for (text, message) in [
            ("* * * *", "has 4 fields"),
            ("60 * * * *", "minute: 60 is outside 0-59"),
            ("* 5-2 * * *", "hour: range \"5-2\" runs backwards"),
            (
                "* * * * funday",
                "day of week: \"funday\" is neither a number nor one of",
            ),
            ("*/0 * * * *", "minute: step \"0\" is not a positive number"),
        ] {
            let error = Cron::parse(text).unwrap_err().to_string();
            assert!(error.contains(message), "{text}: {error}");
        }
    }
}
