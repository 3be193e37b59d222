//! The `coverage` keyword: the percentage a job's regex finds in its log when it finishes
//! (GitLab's `Gitlab::Ci::Trace::Stream#extract_coverage`).

/// The coverage in `trace` for the job's `coverage` value (`/regex/`, RE2 syntax): the
/// lines are read from the last one up; in the first line the regex matches, the last
/// match is taken (its last capture group when the regex has groups), and the first
/// number in it (`\d+(\.\d+)?`) is the coverage. `None` when no line gives a number or
/// the regex is not valid.
pub(crate) fn extract(trace: &[u8], coverage: &str) -> Option<f64> {
    let regex = gantry_pipeline::expr::parse_regex_literal(coverage)?.ok()?;
    let text = String::from_utf8_lossy(trace);
    for line in text.lines().rev() {
        let Some(last) = regex.captures_iter(line).last() else {
            continue;
        };
        // Ruby's `scan(...).flatten.last`: the last group of the last match, or the match.
        let matched = if last.len() > 1 {
            last.iter()
                .skip(1)
                .last()
                .flatten()
                .map_or("", |m| m.as_str())
        } else {
            last.get(0).map_or("", |m| m.as_str())
        };
        if let Some(number) = first_number(matched) {
            return number.parse().ok();
        }
    }
    None
}

/// The first `\d+(\.\d+)?` in `s`.
fn first_number(s: &str) -> Option<&str> {
    let bytes = s.as_bytes();
    let start = bytes.iter().position(u8::is_ascii_digit)?;
    let mut end = start
        + bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
    if bytes.get(end) == Some(&b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_digit) {
        end += 1 + bytes[end + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
    }
    s.get(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_matching_line_wins() {
        let log =
            b"$ run\n  Lines:   48.46% (510/650)\n  Lines:   78.46% (510/650)\nJob succeeded\n";
        assert_eq!(extract(log, r"/^\s*Lines:\s*(\d+.\d+)\%/"), Some(78.46));
    }

    #[test]
    fn the_last_group_of_the_last_match_is_read() {
        let log = b"All files            |    99.3 |    97.91 |     100 |     100 |\n";
        assert_eq!(
            extract(log, r"/All files.*?\|.*?\|.*?([\d\.]+)/"),
            Some(97.91)
        );
        // Without groups: the whole match; the first number in it.
        assert_eq!(
            extract(b"Total: 12.5% of 3\n", r"/Total: \d+(?:\.\d+)?%/"),
            Some(12.5)
        );
    }

    #[test]
    fn inline_flags_and_misses() {
        let log = b"TOTAL                        18      0   100%\n";
        assert_eq!(
            extract(
                log,
                r"/(?i)total.*? (100(?:\.0+)?\%|[1-9]?\d(?:\.\d+)?\%)$/"
            ),
            Some(100.0)
        );
        assert_eq!(extract(log, r"/nothing (\d+)/"), None);
        // A match without a number is skipped: an earlier line may still give one.
        assert_eq!(extract(b"cov 40\ncov none\n", r"/cov (\w+)/"), Some(40.0));
        assert_eq!(extract(log, "not a regex"), None);
    }

    #[test]
    fn numbers() {
        assert_eq!(first_number("a 12.5.6%"), Some("12.5"));
        assert_eq!(first_number("7."), Some("7"));
        assert_eq!(first_number("none"), None);
    }
}
