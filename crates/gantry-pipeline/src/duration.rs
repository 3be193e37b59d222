//! Duration strings as GitLab understands them (`artifacts:expire_in`,
//! `start_in`, `timeout`, `environment:auto_stop_in`, `pages:expire_in`).
//!
//! GitLab validates these with the Ruby gem `ChronicDuration`
//! (`ChronicDuration.parse`, with `raise_exceptions = true` set by GitLab's
//! initializer and GitLab's `Gitlab::Patch::ChronicDuration` applied).
//! [`parse_duration`] is a faithful port of that algorithm rather than a
//! grammar of our own, so odd-but-accepted inputs behave the same:
//!
//! 1. The whole string is lower-cased.
//! 2. English number words are turned into digits (Ruby `Numerizer`; only a
//!    subset is supported here, see below).
//! 3. Colon form: if the string with spaces removed contains
//!    `N:N[:N…]` anywhere, the space-less string is split on `:` and the
//!    parts are read right to left as seconds, minutes, hours, days, months,
//!    years (`1:30` = 1 min 30 s, `1:02:03` = 1 h 2 min 3 s). More than six
//!    parts is an error.
//! 4. Every number (`[0-9]*\.?[0-9]+`) is split off into its own word, so
//!    `2h20min` reads like `2 h 20 min`.
//! 5. Every other word must be a unit (see `unit_of`), optionally with one
//!    leading and/or one trailing comma, or one of the joining words `and`,
//!    `with`, `plus`, which are dropped. Any other word (`forever`,
//!    `parsecs`, a lone `,` or `-`) makes the string invalid.
//!    If the first remaining word is a unit, an implicit `1` is put in front
//!    (`day` = `1 day`).
//! 6. Each number is multiplied by the unit that **immediately follows** it;
//!    a number at the end counts as seconds; a number followed by another
//!    number counts as zero (`1 2` = 2 s). The products are summed.
//! 7. A total of zero is invalid (`0`, `0 seconds`, empty or blank input all
//!    give "should be a duration" in GitLab).
//!
//! Units: minute = 60 s, hour = 3600 s, day = 86 400 s, week = 7 days,
//! month = 30 days (2 592 000 s), year = 31 557 600 s (365.25 days).
//!
//! Fractions are kept while summing (as Ruby does) and the total is truncated
//! to whole seconds at the end; a non-zero total below one second (`0.5`) is
//! therefore *valid* and yields `Some(0)`. Totals beyond `u64::MAX` saturate.
//! Because every limit is a whole number of seconds, `truncated < limit`
//! gives the same answer as Ruby's exact `value < limit` comparison.
//!
//! Number words: `zero`…`nineteen` (and the misspelling `ninteen`), the tens
//! `twenty`…`ninety` (and `fourty`), compounds written `twenty five`,
//! `twenty-five` or `twentyfive`, and `N and M` sums of number words (the
//! Numerizer "andition" rule). Not supported (rejected here although some
//! Numerizer versions accept them): `a`/`an`, `half`, fractions, ordinals,
//! `hundred`/`thousand`/….
//!
//! Callers must also mirror GitLab's type check: the validators only accept a
//! YAML **string**; `expire_in: 42` (an integer node) is "should be a
//! duration" although `expire_in: '42'` is fine.

/// One minute in seconds.
pub const ONE_MINUTE: u64 = 60;
/// One hour in seconds.
pub const ONE_HOUR: u64 = 3_600;
/// One day in seconds.
pub const ONE_DAY: u64 = 86_400;
/// One week in seconds (the `start_in` limit; GitLab compares strictly:
/// a value must be `< ONE_WEEK`).
pub const ONE_WEEK: u64 = 604_800;
/// One ChronicDuration month (30 days) in seconds, i.e. what `1 month` parses to.
pub const ONE_MONTH: u64 = 2_592_000;
/// One ChronicDuration year (365.25 days) in seconds.
pub const ONE_YEAR: u64 = 31_557_600;
/// GitLab's job `timeout` limit: `ChronicDuration.output(Project::MAX_BUILD_TIMEOUT)`
/// where `MAX_BUILD_TIMEOUT = 1.month` is an ActiveSupport month
/// (30.436875 days = 2 629 746 s, printed as `1 mo 10 hrs 29 mins 6 secs`).
/// GitLab compares strictly (`value < limit`), so `1 month` (2 592 000 s) is
/// accepted.
pub const TIMEOUT_LIMIT: u64 = 2_629_746;

/// Value of `artifacts:expire_in` / `pages:expire_in`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpireIn {
    /// `never`: the artifacts do not expire.
    Never,
    /// Expire this many seconds after the job finishes.
    Seconds(u64),
}

impl ExpireIn {
    /// The number of seconds, or `None` for [`ExpireIn::Never`].
    pub fn seconds(self) -> Option<u64> {
        match self {
            ExpireIn::Never => None,
            ExpireIn::Seconds(secs) => Some(secs),
        }
    }
}

/// Parses a ChronicDuration duration string into whole seconds.
///
/// `None` means GitLab would report `… should be a duration` (unknown word,
/// zero total, empty input, too many `:` parts). See the module docs for the
/// exact algorithm.
pub fn parse_duration(text: &str) -> Option<u64> {
    parse_value(text).map(Value::to_secs)
}

/// Like [`parse_duration`] but keeps the fractional part, for callers that
/// need the exact value ChronicDuration computes (e.g. to show it).
pub fn parse_duration_f64(text: &str) -> Option<f64> {
    parse_value(text).map(Value::to_f64)
}

/// Parses `artifacts:expire_in` (and `pages:expire_in`): `never` (any ASCII
/// case, but exactly that word — GitLab uses `casecmp('never')`, so
/// `" never"` is invalid) or a [`parse_duration`] string.
pub fn parse_expire_in(text: &str) -> Option<ExpireIn> {
    if text.eq_ignore_ascii_case("never") {
        return Some(ExpireIn::Never);
    }
    parse_duration(text).map(ExpireIn::Seconds)
}

/// Formats seconds in a short human form, e.g. `1h 30m`, `2d 3h`, `1mo 2d`,
/// `1y`, `45s`; zero is `0s`.
///
/// Mirrors `ChronicDuration.output(secs, format: :short)`: years are only
/// used when `secs >= 1 year` and the remainder modulo a year is smaller than
/// the remainder modulo a (30-day) month; otherwise the largest unit is the
/// 30-day month. Weeks are never used.
pub fn format_duration(secs: u64) -> String {
    let (mut years, mut months, mut days, mut hours, mut minutes, mut seconds) =
        (0, 0, 0, 0, 0, secs);
    if secs >= ONE_YEAR && secs % ONE_YEAR < secs % ONE_MONTH {
        years = secs / ONE_YEAR;
        let rest = secs % ONE_YEAR;
        months = rest / ONE_MONTH;
        let rest = rest % ONE_MONTH;
        days = rest / ONE_DAY;
        let rest = rest % ONE_DAY;
        hours = rest / ONE_HOUR;
        let rest = rest % ONE_HOUR;
        minutes = rest / ONE_MINUTE;
        seconds = rest % ONE_MINUTE;
    } else if secs >= ONE_MINUTE {
        minutes = secs / 60;
        seconds = secs % 60;
        if minutes >= 60 {
            hours = minutes / 60;
            minutes %= 60;
            if hours >= 24 {
                days = hours / 24;
                hours %= 24;
                if days >= 30 {
                    months = days / 30;
                    days %= 30;
                }
            }
        }
    }
    let parts: Vec<String> = [
        (years, "y"),
        (months, "mo"),
        (days, "d"),
        (hours, "h"),
        (minutes, "m"),
        (seconds, "s"),
    ]
    .iter()
    .filter(|(n, _)| *n != 0)
    .map(|(n, unit)| format!("{n}{unit}"))
    .collect();
    if parts.is_empty() {
        "0s".to_string()
    } else {
        parts.join(" ")
    }
}

// ---------------------------------------------------------------------------
// Implementation (port of ChronicDuration.parse)
// ---------------------------------------------------------------------------

/// Canonical duration units, in ChronicDuration's `duration_units_list` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Seconds,
    Minutes,
    Hours,
    Days,
    Weeks,
    Months,
    Years,
}

impl Unit {
    fn seconds(self) -> u64 {
        match self {
            Unit::Seconds => 1,
            Unit::Minutes => ONE_MINUTE,
            Unit::Hours => ONE_HOUR,
            Unit::Days => ONE_DAY,
            Unit::Weeks => ONE_WEEK,
            Unit::Months => ONE_MONTH,
            Unit::Years => ONE_YEAR,
        }
    }
}

/// ChronicDuration's `mappings` table (after lower-casing).
fn unit_of(word: &str) -> Option<Unit> {
    Some(match word {
        "seconds" | "second" | "secs" | "sec" | "s" => Unit::Seconds,
        "minutes" | "minute" | "mins" | "min" | "m" => Unit::Minutes,
        "hours" | "hour" | "hrs" | "hr" | "h" => Unit::Hours,
        "days" | "day" | "dy" | "d" => Unit::Days,
        "weeks" | "week" | "wks" | "wk" | "w" => Unit::Weeks,
        "months" | "mo" | "mos" | "month" => Unit::Months,
        "years" | "year" | "yrs" | "yr" | "y" => Unit::Years,
        _ => return None,
    })
}

const JOIN_WORDS: [&str; 3] = ["and", "with", "plus"];

/// Units used by the colon form, right to left (weeks are skipped).
const CHRONO_UNITS: [&str; 6] = ["seconds", "minutes", "hours", "days", "months", "years"];

/// Ruby numeric value: Integer (exact; saturating here) or Float.
#[derive(Debug, Clone, Copy)]
enum Value {
    Int(u128),
    Float(f64),
}

impl Value {
    fn add(self, other: Value) -> Value {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => Value::Int(a.saturating_add(b)),
            (Value::Int(a), Value::Float(b)) | (Value::Float(b), Value::Int(a)) => {
                Value::Float(a as f64 + b)
            }
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
        }
    }

    fn mul(self, factor: u64) -> Value {
        match self {
            Value::Int(a) => Value::Int(a.saturating_mul(u128::from(factor))),
            Value::Float(a) => Value::Float(a * factor as f64),
        }
    }

    fn is_zero(self) -> bool {
        match self {
            Value::Int(a) => a == 0,
            Value::Float(a) => a == 0.0,
        }
    }

    fn to_secs(self) -> u64 {
        match self {
            Value::Int(a) => u64::try_from(a).unwrap_or(u64::MAX),
            // `as` saturates (and maps NaN to 0); values here are never negative.
            Value::Float(a) => a.trunc() as u64,
        }
    }

    fn to_f64(self) -> f64 {
        match self {
            Value::Int(a) => a as f64,
            Value::Float(a) => a,
        }
    }
}

/// `ChronicDuration.parse`: `None` for an invalid string or a zero total.
fn parse_value(text: &str) -> Option<Value> {
    let words = cleanup(text)?;
    let total = calculate_from_words(&words);
    if total.is_zero() { None } else { Some(total) }
}

/// A word of the cleaned-up string: a number literal or a canonical unit.
#[derive(Debug, Clone, PartialEq)]
enum Word {
    Number(String),
    Unit(Unit),
}

/// `cleanup`: lower-case, numerize, colon form, split numbers, white-list.
fn cleanup(text: &str) -> Option<Vec<Word>> {
    let lowered = text.to_lowercase();
    let numerized = numerize(&lowered);
    let typed = filter_by_type(&numerized)?;
    let spaced = space_out_numbers(&typed);
    filter_through_white_list(&spaced)
}

/// `calculate_from_words`: each number times the unit right after it.
fn calculate_from_words(words: &[Word]) -> Value {
    let mut total = Value::Int(0);
    for (index, word) in words.iter().enumerate() {
        if let Word::Number(number) = word {
            let factor = match words.get(index + 1) {
                None => Unit::Seconds.seconds(),
                Some(Word::Unit(unit)) => unit.seconds(),
                Some(Word::Number(_)) => 0,
            };
            total = total.add(convert_to_number(number).mul(factor));
        }
    }
    total
}

/// `convert_to_number`: `s.to_f % 1 > 0 ? s.to_f : s.to_i`.
/// `number` always matches `[0-9]*\.?[0-9]+` exactly.
fn convert_to_number(number: &str) -> Value {
    let float = number.parse::<f64>().unwrap_or(0.0);
    if float.is_finite() && float % 1.0 > 0.0 {
        return Value::Float(float);
    }
    let integer_part = number.split('.').next().unwrap_or("");
    let mut value: u128 = 0;
    for digit in integer_part.bytes() {
        value = value
            .saturating_mul(10)
            .saturating_add(u128::from(digit.wrapping_sub(b'0')));
    }
    Value::Int(value)
}

/// Whitespace as Ruby's awk-style `split(' ')` sees it.
fn is_ruby_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0b}' | '\u{0c}' | '\r')
}

/// Characters removed by Ruby's `String#strip`.
fn is_ruby_strip(c: char) -> bool {
    is_ruby_space(c) || c == '\0'
}

/// Ruby's `str.split(' ')`: split on runs of ASCII whitespace, ignoring
/// leading and trailing whitespace.
fn ruby_split_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(is_ruby_space).filter(|word| !word.is_empty())
}

/// Leftmost match of `[0-9]*\.?[0-9]+` at or after byte `from`, as
/// `(start, end)` byte offsets (both on ASCII bytes, hence char boundaries).
fn find_number(bytes: &[u8], from: usize) -> Option<(usize, usize)> {
    let is_digit = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_digit);
    let mut start = from;
    while start < bytes.len() {
        let mut end = start;
        while is_digit(end) {
            end += 1;
        }
        if bytes.get(end) == Some(&b'.') && is_digit(end + 1) {
            end += 1;
            while is_digit(end) {
                end += 1;
            }
            return Some((start, end));
        }
        if end > start {
            return Some((start, end));
        }
        start += 1;
    }
    None
}

fn contains_number(text: &str) -> bool {
    find_number(text.as_bytes(), 0).is_some()
}

/// `res.gsub(float_matcher) { " #{n} " }`.
fn space_out_numbers(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 8);
    let mut last = 0;
    let mut pos = 0;
    while let Some((start, end)) = find_number(bytes, pos) {
        out.push_str(text.get(last..start).unwrap_or(""));
        out.push(' ');
        out.push_str(text.get(start..end).unwrap_or(""));
        out.push(' ');
        last = end;
        pos = end;
    }
    out.push_str(text.get(last..).unwrap_or(""));
    out
}

/// `filter_by_type`: the `h:m:s` colon form. `None` when there are more
/// parts than units (Ruby returns `nil` there and the caller crashes).
fn filter_by_type(text: &str) -> Option<String> {
    let compact: String = text.chars().filter(|&c| c != ' ').collect();
    if !has_colon_form(&compact) {
        return Some(text.to_string());
    }
    // Ruby's `split(':')` drops trailing empty fields.
    let mut parts: Vec<&str> = compact.split(':').collect();
    while parts.last().is_some_and(|part| part.is_empty()) {
        parts.pop();
    }
    if parts.len() > CHRONO_UNITS.len() {
        return None;
    }
    let units = CHRONO_UNITS.iter().take(parts.len()).rev();
    let pieces: Vec<String> = parts
        .iter()
        .zip(units)
        .map(|(part, unit)| format!("{part} {unit}"))
        .collect();
    Some(pieces.join(" "))
}

/// Whether `[0-9]*\.?[0-9]+(:[0-9]*\.?[0-9]+)+` matches anywhere. That holds
/// iff some number is immediately followed by `:` and another number
/// starting right after the colon.
fn has_colon_form(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut pos = 0;
    while let Some((_, end)) = find_number(bytes, pos) {
        if bytes.get(end) == Some(&b':') {
            if let Some((next_start, _)) = find_number(bytes, end + 1) {
                if next_start == end + 1 {
                    return true;
                }
            }
        }
        pos = end;
    }
    false
}

/// `filter_through_white_list` (with `raise_exceptions = true`): `None` on an
/// unknown word.
fn filter_through_white_list(text: &str) -> Option<Vec<Word>> {
    let text = text.trim_matches(is_ruby_strip);
    let mut words = Vec::new();
    for raw in ruby_split_words(text) {
        if contains_number(raw) {
            words.push(Word::Number(raw.trim_matches(is_ruby_strip).to_string()));
            continue;
        }
        let word = raw.trim_matches(is_ruby_strip);
        let word = word.strip_prefix(',').unwrap_or(word);
        let word = word.strip_suffix(',').unwrap_or(word);
        if let Some(unit) = unit_of(word) {
            words.push(Word::Unit(unit));
        } else if !JOIN_WORDS.contains(&word) {
            return None;
        }
    }
    if matches!(words.first(), Some(Word::Unit(_))) {
        words.insert(0, Word::Number("1".to_string()));
    }
    Some(words)
}

// ---------------------------------------------------------------------------
// Numerizer (subset)
// ---------------------------------------------------------------------------

/// Value of a single number word supported by our Numerizer subset.
fn number_word(word: &str) -> Option<u64> {
    const SINGLES: [(&str, u64); 9] = [
        ("one", 1),
        ("two", 2),
        ("three", 3),
        ("four", 4),
        ("five", 5),
        ("six", 6),
        ("seven", 7),
        ("eight", 8),
        ("nine", 9),
    ];
    const TENS: [(&str, u64); 9] = [
        ("twenty", 20),
        ("thirty", 30),
        ("forty", 40),
        ("fourty", 40),
        ("fifty", 50),
        ("sixty", 60),
        ("seventy", 70),
        ("eighty", 80),
        ("ninety", 90),
    ];
    const DIRECT: [(&str, u64); 12] = [
        ("zero", 0),
        ("ten", 10),
        ("eleven", 11),
        ("twelve", 12),
        ("thirteen", 13),
        ("fourteen", 14),
        ("fifteen", 15),
        ("sixteen", 16),
        ("seventeen", 17),
        ("eighteen", 18),
        ("nineteen", 19),
        ("ninteen", 19),
    ];
    let lookup = |table: &[(&str, u64)], word: &str| {
        table
            .iter()
            .find(|(name, _)| *name == word)
            .map(|(_, value)| *value)
    };
    if let Some(value) = lookup(&DIRECT, word).or_else(|| lookup(&SINGLES, word)) {
        return Some(value);
    }
    for (tens_name, tens_value) in TENS {
        if let Some(rest) = word.strip_prefix(tens_name) {
            if rest.is_empty() {
                return Some(tens_value);
            }
            if let Some(single) = lookup(&SINGLES, rest) {
                return Some(tens_value + single);
            }
        }
    }
    None
}

/// A piece of a numerized string: plain text, or a number that came from
/// words (Numerizer's `<num>` marker).
enum Piece {
    Text(String),
    Num(u64),
}

/// Numerizer subset: hyphen/space preprocessing, whole-word number words,
/// and the "andition" rule (`twenty five` → 25, `one and two` → 3).
fn numerize(text: &str) -> String {
    let pre = numerize_preprocess(text);

    // Split into \w-runs ([a-z0-9_]) and the rest; replace number words.
    let mut pieces: Vec<Piece> = Vec::new();
    let mut text_buf = String::new();
    let mut word_buf = String::new();
    let flush_word = |word_buf: &mut String, text_buf: &mut String, pieces: &mut Vec<Piece>| {
        if word_buf.is_empty() {
            return;
        }
        if let Some(value) = number_word(word_buf) {
            if !text_buf.is_empty() {
                pieces.push(Piece::Text(std::mem::take(text_buf)));
            }
            pieces.push(Piece::Num(value));
        } else {
            text_buf.push_str(word_buf);
        }
        word_buf.clear();
    };
    for c in pre.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word_buf.push(c);
        } else {
            flush_word(&mut word_buf, &mut text_buf, &mut pieces);
            text_buf.push(c);
        }
    }
    flush_word(&mut word_buf, &mut text_buf, &mut pieces);
    if !text_buf.is_empty() {
        pieces.push(Piece::Text(text_buf));
    }

    andition(&mut pieces);

    let mut out = String::with_capacity(pre.len());
    for piece in &pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Num(value) => out.push_str(&value.to_string()),
        }
    }
    out
}

/// `gsub(/ +|([^\d])-([^\d])/, '\1 \2')`.
fn numerize_preprocess(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        if c == ' ' {
            while chars.get(i) == Some(&' ') {
                i += 1;
            }
            out.push(' ');
            continue;
        }
        if !c.is_ascii_digit() && chars.get(i + 1) == Some(&'-') {
            if let Some(&after) = chars.get(i + 2) {
                if !after.is_ascii_digit() {
                    out.push(c);
                    out.push(' ');
                    out.push(after);
                    i += 3;
                    continue;
                }
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// Numerizer's `andition`: `<num>A( | and )<num>B` becomes `A+B` when joined
/// by `and` or when A has more digits than B; rescans from the start after
/// each merge, and continues after the pair when it does not merge.
fn andition(pieces: &mut Vec<Piece>) {
    let digits = |n: u64| n.to_string().len();
    let mut i = 0;
    while i + 2 < pieces.len() {
        let merged = match (&pieces[i], &pieces[i + 1], &pieces[i + 2]) {
            (Piece::Num(a), Piece::Text(sep), Piece::Num(b)) if sep == " " || sep == " and " => {
                if sep == " and " || digits(*a) > digits(*b) {
                    Some(a.saturating_add(*b))
                } else {
                    i += 2;
                    None
                }
            }
            _ => {
                i += 1;
                None
            }
        };
        if let Some(sum) = merged {
            pieces.splice(i..i + 3, [Piece::Num(sum)]).for_each(drop);
            i = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn ok(text: &str, secs: u64) {
        assert_eq!(parse_duration(text), Some(secs), "parse_duration({text:?})");
    }

    #[track_caller]
    fn bad(text: &str) {
        assert_eq!(parse_duration(text), None, "parse_duration({text:?})");
    }

    #[test]
    fn duration_documented_examples() {
        ok("42", 42);
        ok("3 mins 4 sec", 184);
        ok("2h20min", 2 * 3600 + 20 * 60);
        ok("2 hrs 20 min", 2 * 3600 + 20 * 60);
        ok("1 day", 86_400);
        ok("6 mos 1 day", 6 * ONE_MONTH + ONE_DAY);
        ok("1 week", ONE_WEEK);
        ok("1 month", ONE_MONTH);
        ok("1 year", ONE_YEAR);
        ok("30 minutes", 1800);
        ok("1h 30m", 5400);
        ok("10 seconds", 10);
        ok("1.5 hours", 5400);
        ok("3 weeks and 2 days", 3 * ONE_WEEK + 2 * ONE_DAY);
        ok("2d", 2 * ONE_DAY);
        ok("5", 5);
    }

    #[test]
    fn duration_colon_forms() {
        ok("1:30", 90);
        ok("01:30", 90);
        ok("1:02:03", 3723);
        ok("1:00:00:00", ONE_DAY);
        ok("1 : 30", 90); // spaces are removed before the colon check
        ok(
            "1:2:3:4:5:6",
            ONE_YEAR + 2 * ONE_MONTH + 3 * ONE_DAY + 4 * 3600 + 5 * 60 + 6,
        );
        bad("1:2:3:4:5:6:7"); // more parts than units
        ok("1:30:", 90); // trailing empty field dropped like Ruby's split
        ok("0:0:1.5", 1); // 1.5 s truncated
        bad("0:00");
    }

    #[test]
    fn duration_units_all_spellings() {
        for unit in ["s", "sec", "secs", "second", "seconds"] {
            ok(&format!("2 {unit}"), 2);
        }
        for unit in ["m", "min", "mins", "minute", "minutes"] {
            ok(&format!("2 {unit}"), 120);
        }
        for unit in ["h", "hr", "hrs", "hour", "hours"] {
            ok(&format!("2 {unit}"), 7200);
        }
        for unit in ["d", "dy", "day", "days"] {
            ok(&format!("2 {unit}"), 2 * ONE_DAY);
        }
        for unit in ["w", "wk", "wks", "week", "weeks"] {
            ok(&format!("2 {unit}"), 2 * ONE_WEEK);
        }
        for unit in ["mo", "mos", "month", "months"] {
            ok(&format!("2 {unit}"), 2 * ONE_MONTH);
        }
        for unit in ["y", "yr", "yrs", "year", "years"] {
            ok(&format!("2 {unit}"), 2 * ONE_YEAR);
        }
    }

    #[test]
    fn duration_case_whitespace_and_separators() {
        ok("  1 DAY  ", ONE_DAY);
        ok("1 Hour 30 Minutes", 5400);
        ok("\t1h\n30m\r\n", 5400);
        ok("1 day, 2 hours", ONE_DAY + 7200);
        ok("1 day,2 hours", ONE_DAY + 7200);
        ok("1 day and 2 hours", ONE_DAY + 7200);
        ok("1 day with 2 hours plus 3 mins", ONE_DAY + 7200 + 180);
        ok("1h30m", 5400);
        ok("1 h  30   m", 5400);
        bad("1 day , 2 hours"); // a lone comma is an invalid word
    }

    #[test]
    fn duration_chronic_quirks() {
        ok("day", ONE_DAY); // implicit leading 1
        ok("hour 30", 3630); // trailing number counts as seconds
        ok("1 2", 2); // number followed by number counts as 0
        ok("2 3 days", 3 * ONE_DAY);
        ok(".5 min", 30);
        ok("007", 7);
        ok("0.5", 0); // valid (non-zero) but below one second
        ok("2.0 hours", 7200);
        ok("1.5.5 hours", 1800); // "1.5" (times 0: next word is a number) then ".5 hours"
        ok(
            "99999999999999999999999999 years",
            u64::MAX, // saturates
        );
    }

    #[test]
    fn duration_number_words() {
        ok("two hours and twenty minutes", 2 * 3600 + 20 * 60);
        ok("one day", ONE_DAY);
        ok("twenty-five minutes", 25 * 60);
        ok("twenty five minutes", 25 * 60);
        ok("Twelve Hours", 12 * 3600);
        ok("ten seconds", 10);
        bad("zero seconds");
        bad("a day");
        bad("half an hour");
    }

    #[test]
    fn duration_rejections() {
        bad("");
        bad("   ");
        bad("0");
        bad("0 seconds");
        bad("forever");
        bad("never");
        bad("5 parsecs");
        bad("-5 min");
        bad("5 min ago");
        bad("1.");
        bad("1 day!");
        bad("1 jour");
        bad("１ day"); // full-width digit
        bad("1\u{a0}day"); // NBSP is not a separator for Ruby's split
        bad("∞");
        bad("1:");
    }

    #[test]
    fn duration_never_panics_on_odd_input() {
        for text in [
            "::::",
            ":1",
            "1::2",
            "....",
            ".",
            "-",
            "- - -",
            "é:1",
            "日本 1 day",
            "1 dayé",
            "\0",
            "5\0",
            "twenty-",
            "-twenty",
            "one and",
            "and one",
            "ninety nine and one hours",
        ] {
            let _ = parse_duration(text);
            let _ = parse_expire_in(text);
        }
        ok("ninety nine and one hours", 100 * 3600);
    }

    #[test]
    fn duration_f64_keeps_fraction() {
        assert_eq!(parse_duration_f64("1.5 sec"), Some(1.5));
        assert_eq!(parse_duration_f64("1.5 min"), Some(90.0));
        assert_eq!(parse_duration_f64("nope"), None);
    }

    #[test]
    fn expire_in_never_and_durations() {
        assert_eq!(parse_expire_in("never"), Some(ExpireIn::Never));
        assert_eq!(parse_expire_in("NEVER"), Some(ExpireIn::Never));
        assert_eq!(parse_expire_in("Never"), Some(ExpireIn::Never));
        assert_eq!(parse_expire_in(" never "), None);
        assert_eq!(parse_expire_in("1 week"), Some(ExpireIn::Seconds(ONE_WEEK)));
        assert_eq!(parse_expire_in("42"), Some(ExpireIn::Seconds(42)));
        assert_eq!(parse_expire_in("forever"), None);
        assert_eq!(parse_expire_in(""), None);
        assert_eq!(ExpireIn::Never.seconds(), None);
        assert_eq!(ExpireIn::Seconds(5).seconds(), Some(5));
    }

    #[test]
    fn duration_limits() {
        assert_eq!(ONE_WEEK, 7 * ONE_DAY);
        assert_eq!(ONE_MONTH, 30 * ONE_DAY);
        assert_eq!(
            parse_duration("1 mo 10 hrs 29 mins 6 secs"),
            Some(TIMEOUT_LIMIT)
        );
        // start_in must be strictly below one week
        assert!(parse_duration("6 days 23 hours").is_some_and(|s| s < ONE_WEEK));
        assert!(parse_duration("1 week").is_some_and(|s| s >= ONE_WEEK));
    }

    #[test]
    fn format_duration_short_forms() {
        assert_eq!(format_duration(0), "0s");
        assert_eq!(format_duration(45), "45s");
        assert_eq!(format_duration(60), "1m");
        assert_eq!(format_duration(5400), "1h 30m");
        assert_eq!(format_duration(3723), "1h 2m 3s");
        assert_eq!(format_duration(ONE_DAY + 3 * 3600), "1d 3h");
        assert_eq!(format_duration(ONE_WEEK), "7d");
        assert_eq!(format_duration(ONE_MONTH + 2 * ONE_DAY), "1mo 2d");
        assert_eq!(format_duration(ONE_YEAR), "1y");
        assert_eq!(format_duration(TIMEOUT_LIMIT), "1mo 10h 29m 6s");
        // ChronicDuration only uses years when that leaves a smaller remainder
        // than 30-day months do.
        assert_eq!(format_duration(400 * ONE_DAY), "13mo 10d");
        assert_eq!(format_duration(366 * ONE_DAY), "1y 18h");
        let _ = format_duration(u64::MAX);
    }

    #[test]
    fn format_duration_round_trips() {
        for secs in [
            1,
            59,
            61,
            3599,
            3601,
            86_399,
            90_061,
            ONE_MONTH,
            TIMEOUT_LIMIT,
            ONE_YEAR,
        ] {
            assert_eq!(parse_duration(&format_duration(secs)), Some(secs), "{secs}");
        }
    }

    /// Deterministic pseudo-random strings over an alphabet full of the
    /// characters the parsers care about; nothing may panic.
    fn fuzz_inputs() -> Vec<String> {
        const ALPHABET: &[&str] = &[
            "$", "%", "{", "}", "$$", "%%", "${", "A", "B", "_", "1", "0", "9", ".", ":", ",", " ",
            "\t", "-", "é", "日", "🎉", "\0", "d", "h", "m", "s", "min", "day", "and", "twenty",
            "one", "never", "İ", "\u{212A}",
        ];
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        (0..3000)
            .map(|_| {
                let len = (next() % 12) as usize;
                (0..len)
                    .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize])
                    .collect()
            })
            .collect()
    }

    #[test]
    fn duration_fuzz_never_panics() {
        for input in fuzz_inputs() {
            let secs = parse_duration(&input);
            let _ = parse_duration_f64(&input);
            let _ = parse_expire_in(&input);
            if let Some(secs) = secs {
                let _ = format_duration(secs);
            }
        }
    }
}
