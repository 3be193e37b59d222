//! The `coverage` keyword: the percentage a job's regex finds in its log when it finishes
//! (GitLab's `Gitlab::Ci::Trace::Stream#extract_coverage`).
//!
//! The finished log is read backwards from its file a block at a time, and the coverage is
//! stored before the job's final state is applied (`jobs.rs`), so whoever sees the job
//! finished sees its coverage.

/// The coverage in `trace` for the job's `coverage` value (`/regex/`, RE2 syntax): the
/// lines are read from the last one up; in the first line the regex matches, the last
/// match is taken (its last capture group when the regex has groups), and the first
/// number in it (`\d+(\.\d+)?`) is the coverage. `None` when no line gives a number or
/// the regex is not valid.
pub(crate) fn extract(trace: &[u8], coverage: &str) -> Option<f64> {
    let regex = gantry_pipeline::expr::parse_regex_literal(coverage)?.ok()?;
    let text = String::from_utf8_lossy(trace);
    text.lines().rev().find_map(|line| in_line(&regex, line))
}

/// [`extract`] over the first `len` bytes of a log file, read backwards a block at a time
/// (most coverage lines are near the end; the log is never read whole).
pub(crate) fn extract_from_file(
    file: &mut std::fs::File,
    len: u64,
    coverage: &str,
) -> std::io::Result<Option<f64>> {
    let Some(Ok(regex)) = gantry_pipeline::expr::parse_regex_literal(coverage) else {
        return Ok(None);
    };
    rev_lines(file, len, |line| in_line(&regex, line))
}

/// Size of the blocks [`rev_lines`] reads.
const BLOCK: u64 = 64 * 1024;

/// Calls `f` on each line of the first `len` bytes of `file` (as `str::lines` splits
/// them, invalid UTF-8 replaced), the last line first, until it gives a value.
fn rev_lines<T>(
    file: &mut std::fs::File,
    len: u64,
    mut f: impl FnMut(&str) -> Option<T>,
) -> std::io::Result<Option<T>> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut call = |bytes: &[u8]| {
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        f(&String::from_utf8_lossy(bytes))
    };
    let mut end = len;
    // The start of the line that ends where the previous block began.
    let mut carry: Vec<u8> = Vec::new();
    // `str::lines` yields no empty line after a final newline.
    let mut skip_empty_last = true;
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let mut buf = vec![0u8; usize::try_from(end - start).unwrap_or(0)];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf)?;
        buf.extend_from_slice(&carry);
        while let Some(at) = buf.iter().rposition(|&b| b == b'\n') {
            let line = &buf[at + 1..];
            if !(skip_empty_last && line.is_empty()) {
                if let Some(found) = call(line) {
                    return Ok(Some(found));
                }
            }
            skip_empty_last = false;
            buf.truncate(at);
        }
        carry = buf;
        end = start;
    }
    if skip_empty_last && carry.is_empty() {
        return Ok(None);
    }
    Ok(call(&carry))
}

/// The coverage one line gives, if any.
fn in_line(regex: &regex::Regex, line: &str) -> Option<f64> {
    {
        let last = regex.captures_iter(line).last()?;
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
        first_number(matched)?.parse().ok()
    }
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
    fn reading_the_file_backwards_finds_what_reading_it_whole_finds() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("log");
        let regex = r"/Coverage: (\d+\.\d+)%/";
        // Lines across block boundaries, CRLF, invalid UTF-8, a final line without a
        // newline, and bytes past the committed length that must not count.
        let mut cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"\n".to_vec(),
            b"Coverage: 1.5%".to_vec(),
            b"Coverage: 1.5%\r\n".to_vec(),
            b"Coverage: 1.5%\nCoverage: 2.5%\n\n".to_vec(),
        ];
        let mut big = Vec::new();
        for i in 0..20_000 {
            big.extend_from_slice(format!("line {i} ").as_bytes());
            big.extend_from_slice(b"\xff\n");
            if i == 3_000 {
                big.extend_from_slice(b"Coverage: 42.5%\n");
            }
        }
        cases.push(big.clone());
        let mut spanning = vec![b'x'; BLOCK as usize - 5];
        spanning.extend_from_slice(b"Coverage: 7.25% ok\nnothing here");
        cases.push(spanning);
        for case in &cases {
            let mut bytes = case.clone();
            bytes.extend_from_slice(b"\nCoverage: 99.9%\n"); // not committed
            std::fs::write(&path, &bytes).expect("write");
            let mut file = std::fs::File::open(&path).expect("open");
            let streamed = extract_from_file(&mut file, case.len() as u64, regex).expect("read");
            assert_eq!(
                streamed,
                extract(case, regex),
                "{:?}",
                String::from_utf8_lossy(&case[..case.len().min(60)])
            );
        }
        assert_eq!(extract(&big, regex), Some(42.5));
    }

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
