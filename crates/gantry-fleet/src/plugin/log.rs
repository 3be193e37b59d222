//! Plugin logs (spec `fleet.md` §2.6): a plugin writes hclog-shaped JSON lines to its
//! stderr ([`log`]); the host reads them back into [`PluginLog`]s ([`StderrParser`]).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

/// hclog's levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `trace`
    Trace,
    /// `debug`
    Debug,
    /// `info`
    Info,
    /// `warn`
    Warn,
    /// `error`
    Error,
}

impl LogLevel {
    /// hclog's spelling (`@level`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trace => "trace",
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }

    fn from_hclog(level: &str) -> Option<Self> {
        match level.to_ascii_lowercase().as_str() {
            "trace" => Some(Self::Trace),
            "debug" => Some(Self::Debug),
            "info" => Some(Self::Info),
            "warn" | "warning" => Some(Self::Warn),
            "error" => Some(Self::Error),
            _ => None,
        }
    }
}

/// One log entry of a plugin, as the host hands it to
/// [`PluginOptions::log`](super::PluginOptions::log).
#[derive(Debug, Clone, PartialEq)]
pub struct PluginLog {
    /// The plugin's file name (`fleeting-plugin-aws`).
    pub plugin: String,
    /// The level.
    pub level: LogLevel,
    /// The message.
    pub message: String,
    /// The entry's other keys (hclog's `@module` is kept under that name; `@timestamp`
    /// is dropped).
    pub fields: Map<String, Value>,
}

/// Reads a plugin's stderr lines the way go-plugin's host does.
#[derive(Debug, Default)]
pub(crate) struct StderrParser {
    /// A `panic: ` or `fatal error: ` line was seen: untagged lines are errors from now on.
    panicking: bool,
}

impl StderrParser {
    /// The level, message and fields of one stderr line (without its newline).
    pub(crate) fn parse(&mut self, line: &str) -> (LogLevel, String, Map<String, Value>) {
        if let Ok(Value::Object(mut entry)) = serde_json::from_str::<Value>(line) {
            let level = entry
                .remove("@level")
                .and_then(|level| level.as_str().and_then(LogLevel::from_hclog))
                .unwrap_or(LogLevel::Info);
            let message = match entry.remove("@message") {
                Some(Value::String(message)) => message,
                Some(other) => other.to_string(),
                None => String::new(),
            };
            entry.remove("@timestamp");
            return (level, message, entry);
        }
        const TAGS: [(&str, LogLevel); 5] = [
            ("[TRACE]", LogLevel::Trace),
            ("[DEBUG]", LogLevel::Debug),
            ("[INFO]", LogLevel::Info),
            ("[WARN]", LogLevel::Warn),
            ("[ERROR]", LogLevel::Error),
        ];
        for (tag, level) in TAGS {
            if let Some(rest) = line.strip_prefix(tag) {
                return (level, rest.trim().to_owned(), Map::new());
            }
        }
        if line.starts_with("panic: ") || line.starts_with("fatal error: ") {
            self.panicking = true;
        }
        let level = if self.panicking {
            LogLevel::Error
        } else {
            LogLevel::Debug
        };
        (level, line.to_owned(), Map::new())
    }
}

/// For plugin authors: writes one hclog JSON line (`@level`, `@message`, `@timestamp`,
/// then `fields`) to stderr, where the host picks it up. Never use stdout: it carries
/// the handshake only.
pub fn log(level: LogLevel, message: &str, fields: Map<String, Value>) {
    let mut entry = fields;
    entry.insert("@level".into(), level.as_str().into());
    entry.insert("@message".into(), message.into());
    entry.insert("@timestamp".into(), timestamp(SystemTime::now()).into());
    let mut line = Value::Object(entry).to_string();
    line.push('\n');
    // Nothing sensible is left to do when stderr is gone.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// hclog's timestamp format, `2006-01-02T15:04:05.000000Z07:00`, in UTC.
fn timestamp(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) =
        gantry_protocol::time::civil_from_days(i64::try_from(days).unwrap_or(i64::MAX));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    #[test]
    fn json_lines_give_level_message_and_fields() {
        let mut parser = StderrParser::default();
        let (level, message, fields) = parser.parse(
            r#"{"@level":"warn","@message":"slow API","@timestamp":"2024-01-02T03:04:05.000000Z","@module":"aws","region":"eu-west-1","tries":3}"#,
        );
        assert_eq!(level, LogLevel::Warn);
        assert_eq!(message, "slow API");
        assert_eq!(
            Value::Object(fields),
            json!({"@module": "aws", "region": "eu-west-1", "tries": 3})
        );
    }

    #[test]
    fn plain_lines_take_their_tag_or_debug_and_panics_turn_untagged_lines_into_errors() {
        let mut parser = StderrParser::default();
        assert_eq!(parser.parse("[INFO] started").0, LogLevel::Info);
        assert_eq!(parser.parse("[INFO] started").1, "started");
        assert_eq!(parser.parse("[WARN] hm").0, LogLevel::Warn);
        assert_eq!(parser.parse("[ERROR] no").0, LogLevel::Error);
        assert_eq!(parser.parse("[TRACE] t").0, LogLevel::Trace);
        assert_eq!(parser.parse("[DEBUG] d").0, LogLevel::Debug);
        assert_eq!(parser.parse("untagged").0, LogLevel::Debug);
        assert_eq!(parser.parse("[1,2]").0, LogLevel::Debug);
        assert_eq!(
            parser.parse("panic: runtime error: index out of range").0,
            LogLevel::Error
        );
        assert_eq!(parser.parse("goroutine 1 [running]:").0, LogLevel::Error);
        assert_eq!(parser.parse("[INFO] tagged still").0, LogLevel::Info);
        let mut fatal = StderrParser::default();
        assert_eq!(
            fatal.parse("fatal error: all goroutines are asleep").0,
            LogLevel::Error
        );
        assert_eq!(fatal.parse("main.main()").0, LogLevel::Error);
    }

    #[test]
    fn what_log_writes_reads_back() {
        let mut entry = Map::new();
        entry.insert("instance".into(), "i-1".into());
        entry.insert("@level".into(), "error".into());
        entry.insert("@message".into(), "gone".into());
        let line = Value::Object(entry).to_string();
        let (level, message, fields) = StderrParser::default().parse(&line);
        assert_eq!((level, message.as_str()), (LogLevel::Error, "gone"));
        assert_eq!(Value::Object(fields), json!({"instance": "i-1"}));
    }

    #[test]
    fn timestamps_are_hclog_shaped() {
        let time = UNIX_EPOCH + Duration::from_micros(1_709_251_199_123_456);
        assert_eq!(timestamp(time), "2024-02-29T23:59:59.123456Z");
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
    }
}
