//! Collapsible log sections (§5.7): in-band markers GitLab's log viewer folds.
//!
//! ```text
//! section_start:<unix seconds>:<name>[<options>]\r\x1b[0K<header text…>
//! section_end:<unix seconds>:<name>\r\x1b[0K
//! ```
//!
//! `<name>` matches `[a-zA-Z0-9_.-]+`; options are `[key=value,…]`, e.g.
//! `[hide_duration=true,collapsed=true]`. The trailing CR + "erase line" is mandatory.
//! With per-line timestamps on, a marker follows the 32-byte line header.

use crate::ProtocolError;

/// CR + ANSI "erase line": ends every marker.
pub const ERASE_LINE: &str = "\r\x1b[0K";

/// Options of a `section_start` marker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SectionOptions {
    /// `collapsed=true`: the viewer shows the section folded.
    pub collapsed: bool,
    /// `hide_duration=true`: the viewer shows no duration (gitlab-runner sets it on
    /// each `section_script_step_<n>`).
    pub hide_duration: bool,
}

/// `section_start:<ts>:<name>[collapsed=true]\r\x1b[0K` (options only when
/// `collapsed`). The caller writes the header text and a newline after it.
pub fn section_start(name: &str, timestamp: u64, collapsed: bool) -> Result<String, ProtocolError> {
    section_start_with(
        name,
        timestamp,
        SectionOptions {
            collapsed,
            hide_duration: false,
        },
    )
}

/// `section_start` with any [`SectionOptions`]; written as gitlab-runner does
/// (`[hide_duration=true,collapsed=true]`).
pub fn section_start_with(
    name: &str,
    timestamp: u64,
    options: SectionOptions,
) -> Result<String, ProtocolError> {
    check_name(name)?;
    let mut list = Vec::new();
    if options.hide_duration {
        list.push("hide_duration=true");
    }
    if options.collapsed {
        list.push("collapsed=true");
    }
    let options = if list.is_empty() {
        String::new()
    } else {
        format!("[{}]", list.join(","))
    };
    Ok(format!(
        "section_start:{timestamp}:{name}{options}{ERASE_LINE}"
    ))
}

/// `section_end:<ts>:<name>\r\x1b[0K`.
pub fn section_end(name: &str, timestamp: u64) -> Result<String, ProtocolError> {
    check_name(name)?;
    Ok(format!("section_end:{timestamp}:{name}{ERASE_LINE}"))
}

/// Whether `name` is a valid section name (`[a-zA-Z0-9_.-]+`).
pub fn is_valid_section_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn check_name(name: &str) -> Result<(), ProtocolError> {
    if is_valid_section_name(name) {
        Ok(())
    } else {
        Err(ProtocolError::InvalidSectionName {
            name: name.to_owned(),
        })
    }
}

/// Start or end marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionBoundary {
    /// `section_start`.
    Start,
    /// `section_end`.
    End,
}

/// A parsed marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionMarker {
    /// Start or end.
    pub boundary: SectionBoundary,
    /// Unix seconds.
    pub timestamp: u64,
    /// Section name.
    pub name: String,
    /// `key=value` options, in order (start markers only).
    pub options: Vec<(String, String)>,
}

impl SectionMarker {
    /// Whether the options say `collapsed=true`.
    pub fn collapsed(&self) -> bool {
        self.options
            .iter()
            .any(|(key, value)| key == "collapsed" && value == "true")
    }
}

/// Parses a marker at the start of `text` (after any timestamp header) and returns it
/// with the text after its `\r\x1b[0K` (a start marker's header text). `None` when
/// `text` does not start with a well-formed marker.
pub fn parse_section_marker(text: &str) -> Option<(SectionMarker, &str)> {
    let (boundary, rest) = if let Some(rest) = text.strip_prefix("section_start:") {
        (SectionBoundary::Start, rest)
    } else {
        (SectionBoundary::End, text.strip_prefix("section_end:")?)
    };
    let (timestamp, rest) = rest.split_once(':')?;
    if timestamp.is_empty() || !timestamp.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let timestamp = timestamp.parse().ok()?;
    let name_len = rest
        .bytes()
        .take_while(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        .count();
    if name_len == 0 {
        return None;
    }
    let (name, rest) = rest.split_at(name_len);
    let (options, rest) = match rest.strip_prefix('[') {
        Some(inner) => {
            let (list, rest) = inner.split_once(']')?;
            (parse_options(list)?, rest)
        }
        None => (Vec::new(), rest),
    };
    let rest = rest.strip_prefix(ERASE_LINE)?;
    Some((
        SectionMarker {
            boundary,
            timestamp,
            name: name.to_owned(),
            options,
        },
        rest,
    ))
}

fn parse_options(list: &str) -> Option<Vec<(String, String)>> {
    let word = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    };
    list.split(',')
        .map(|option| {
            let (key, value) = option.split_once('=')?;
            (word(key) && word(value)).then(|| (key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// `text` without its `section_start:…\r\x1b[0K` / `section_end:…\r\x1b[0K` markers
/// (what a reader of the log is shown).
pub fn strip_section_markers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("section_") {
        let tail = &rest[at..];
        if tail.starts_with("section_start:") || tail.starts_with("section_end:") {
            out.push_str(&rest[..at]);
            match tail.find("\r\x1b[0K") {
                Some(end) => rest = &tail[end + "\r\x1b[0K".len()..],
                None => {
                    rest = "";
                }
            }
        } else {
            out.push_str(&rest[..at + "section_".len()]);
            rest = &tail["section_".len()..];
        }
    }
    out.push_str(rest);
    out
}

/// `text` without ANSI escape sequences (CSI, such as colours, and OSC, such as links).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                while let Some(c) = chars.next() {
                    if c == '\x07' {
                        break;
                    }
                    if c == '\x1b' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// One line of a log as plain text, as a reader sees it: without section markers and ANSI
/// escapes, and of a line rewritten with `\r`, what was written last; `None` for a line
/// that held only section markers (no line of the log).
pub fn plain_line(line: &str) -> Option<String> {
    let unmarked = strip_section_markers(line);
    if unmarked.trim().is_empty() && !line.trim().is_empty() {
        return None;
    }
    let shown = unmarked.rsplit('\r').find(|s| !s.is_empty()).unwrap_or("");
    Some(strip_ansi(shown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_are_what_a_reader_sees() {
        assert_eq!(plain_line("section_end:1:x\r\x1b[0K"), None);
        assert_eq!(
            plain_line("progress 10%\rprogress \x1b[32m100%\x1b[0m").as_deref(),
            Some("progress 100%")
        );
        assert_eq!(plain_line("").as_deref(), Some(""));
    }

    #[test]
    fn markers_and_colours_are_removed() {
        let raw = "section_start:1700000000:step_script\r\x1b[0K\x1b[0;36m\x1b[1mExecuting \"step_script\" stage\x1b[0;m";
        assert_eq!(
            strip_ansi(&strip_section_markers(raw)),
            "Executing \"step_script\" stage"
        );
        assert_eq!(
            strip_section_markers("section_end:1700000000:step_script\r\x1b[0K"),
            ""
        );
        assert_eq!(
            strip_section_markers("my section_x stays"),
            "my section_x stays"
        );
        assert_eq!(
            strip_ansi("\x1b]8;;http://x\x07link\x1b]8;;\x07 \x1b[31mred\x1b[0m"),
            "link red"
        );
    }
}
