//! Log sections (§5.7) and the ANSI colours gitlab-runner uses in the log.

use gantry_protocol::ProtocolError;
use gantry_protocol::SectionOptions;
use gantry_protocol::trace::section::{section_end, section_start_with};

/// Bold cyan: section headers.
pub const ANSI_BOLD_CYAN: &str = "\x1b[36;1m";
/// Bold green: echoed commands (`$ make`), notices.
pub const ANSI_BOLD_GREEN: &str = "\x1b[32;1m";
/// Yellow: warnings.
pub const ANSI_YELLOW: &str = "\x1b[0;33m";
/// Bold yellow: the output limit notice.
pub const ANSI_BOLD_YELLOW: &str = "\x1b[33;1m";
/// Bold red: errors.
pub const ANSI_BOLD_RED: &str = "\x1b[31;1m";
/// Reset.
pub const ANSI_RESET: &str = "\x1b[0;m";
/// Erase to end of line.
pub const ANSI_CLEAR: &str = "\x1b[0K";

/// The text gitlab-runner writes when a section starts:
/// `section_start:<ts>:<name>[options]\r\x1b[0K` + the header in bold cyan + `\n`.
pub fn section_start_text(
    name: &str,
    timestamp: u64,
    header: &str,
    options: SectionOptions,
) -> Result<String, ProtocolError> {
    let marker = section_start_with(name, timestamp, options)?;
    Ok(format!("{marker}{ANSI_BOLD_CYAN}{header}{ANSI_RESET}\n"))
}

/// The text gitlab-runner writes when a section ends: `section_end:<ts>:<name>\r\x1b[0K`
/// (no newline: the next line continues after the erase).
pub fn section_end_text(name: &str, timestamp: u64) -> Result<String, ProtocolError> {
    section_end(name, timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_gitlab_runner_s() {
        let start = section_start_text(
            "step_script",
            1_769_853_601,
            "Executing \"step_script\" stage of the job script",
            SectionOptions::default(),
        )
        .unwrap();
        assert_eq!(
            start,
            "section_start:1769853601:step_script\r\x1b[0K\x1b[36;1mExecuting \"step_script\" stage of the job script\x1b[0;m\n"
        );
        let collapsed = section_start_text(
            "prepare",
            1,
            "x",
            SectionOptions {
                collapsed: true,
                hide_duration: true,
            },
        )
        .unwrap();
        assert!(
            collapsed
                .starts_with("section_start:1:prepare[hide_duration=true,collapsed=true]\r\x1b[0K")
        );
        assert_eq!(
            section_end_text("step_script", 1_769_853_602).unwrap(),
            "section_end:1769853602:step_script\r\x1b[0K"
        );
        assert!(section_end_text("bad name", 1).is_err());
    }
}
