//! A job log as the job page shows it: each line rendered to HTML with its ANSI colours
//! and GitLab's section markers and per-line timestamps taken out as data. The page's
//! script (`job.js`) builds the collapsible sections from the markers; everything here is
//! pure (bytes in, lines out) and escapes every character of the log.
//!
//! * Colours: SGR `30–37`/`40–47` (GitLab's palette, `term-fg-red`…), `90–97`/`100–107`
//!   (bright, `term-fg-l-red`…), `38;5;N`/`48;5;N` (`xterm-fg-N`, 256 colours), bold,
//!   italic, underline, conceal, crossed out; `0` resets, `22`–`29`/`39`/`49` turn one off.
//!   24-bit colours (`38;2;r;g;b`) are read and dropped, as GitLab's viewer does. Other
//!   escapes (`\e[0K`, cursor moves, OSC links) are dropped. The classes are GitLab's
//!   (`page_bundles/xterm.scss`), drawn by `app.css`.
//! * The style carries from line to line, as in a terminal; [`Style::encode`] hands it to
//!   the next request, so a log read in pieces renders as the whole would.
//! * `\r` inside a line: what follows overwrites the line (a progress bar shows its last
//!   state), as [`section::plain_line`] reads it; a trailing `\r` (CRLF) changes nothing.
//! * `section_start:<ts>:<name>[collapsed=true]\r\e[0K` and `section_end:…` anywhere in a
//!   line become [`Marker`]s; a line that held only markers is no line of its own
//!   ([`Line::visible`] false), as GitLab's viewer shows it.
//! * A line starting with gitlab-runner's 32-byte timestamp header (§5.6) shows its
//!   time; a `+` header continues the previous line.
//!
//! Cost: one pass over a line's bytes, O(n) in the line; the page asks for a window of
//! at most `job::WINDOW` bytes a time.

use std::fmt::Write as _;

use gantry_protocol::trace::section::{self, SectionBoundary};
use gantry_protocol::trace::timestamp::LineHeader;
use serde::Serialize;

use super::shell::escape;

/// The 8 base colours' names, GitLab's class suffixes.
const NAMES: [&str; 8] = [
    "black", "red", "green", "yellow", "blue", "magenta", "cyan", "white",
];

/// A colour of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Colour {
    /// `30–37`: index 0–7.
    Base(u8),
    /// `90–97`: index 0–7.
    Bright(u8),
    /// `38;5;N`.
    Xterm(u8),
}

impl Colour {
    fn class(self, ground: &str) -> String {
        match self {
            Colour::Base(n) => format!("term-{ground}-{}", NAMES[usize::from(n & 7)]),
            Colour::Bright(n) => format!("term-{ground}-l-{}", NAMES[usize::from(n & 7)]),
            Colour::Xterm(n) => format!("xterm-{ground}-{n}"),
        }
    }

    fn encode(self) -> String {
        match self {
            Colour::Base(n) => format!("b{n}"),
            Colour::Bright(n) => format!("l{n}"),
            Colour::Xterm(n) => format!("x{n}"),
        }
    }

    fn decode(text: &str) -> Option<Self> {
        let (kind, n) = text.split_at_checked(1)?;
        let n: u8 = n.parse().ok()?;
        match kind {
            "b" if n < 8 => Some(Colour::Base(n)),
            "l" if n < 8 => Some(Colour::Bright(n)),
            "x" => Some(Colour::Xterm(n)),
            _ => None,
        }
    }
}

const BOLD: u8 = 1;
const ITALIC: u8 = 2;
const UNDERLINE: u8 = 4;
const CONCEAL: u8 = 8;
const CROSS: u8 = 16;
const FLAGS: [(u8, &str); 5] = [
    (BOLD, "term-bold"),
    (ITALIC, "term-italic"),
    (UNDERLINE, "term-underline"),
    (CONCEAL, "term-conceal"),
    (CROSS, "term-cross"),
];

/// The text style in force (SGR state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Style {
    fg: Option<Colour>,
    bg: Option<Colour>,
    flags: u8,
}

impl Style {
    /// The style as a short token (`fg.bg.flags`, e.g. `b1..1`) for the next request.
    pub(crate) fn encode(&self) -> String {
        if *self == Style::default() {
            return String::new();
        }
        format!(
            "{}.{}.{}",
            self.fg.map(Colour::encode).unwrap_or_default(),
            self.bg.map(Colour::encode).unwrap_or_default(),
            self.flags
        )
    }

    /// The style a token of [`Style::encode`] names; the default for anything else.
    pub(crate) fn decode(token: &str) -> Style {
        let mut parts = token.split('.');
        let (Some(fg), Some(bg), Some(flags), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Style::default();
        };
        Style {
            fg: Colour::decode(fg),
            bg: Colour::decode(bg),
            flags: flags.parse().unwrap_or(0) & 31,
        }
    }

    fn classes(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        if let Some(fg) = self.fg {
            out.push(fg.class("fg"));
        }
        if let Some(bg) = self.bg {
            out.push(bg.class("bg"));
        }
        for (flag, class) in FLAGS {
            if self.flags & flag != 0 {
                out.push(class.to_owned());
            }
        }
        out.join(" ")
    }

    /// Applies an SGR sequence's parameters (`1;31`, `38;5;208`, empty = reset).
    fn apply(&mut self, params: &str) {
        let codes: Vec<u16> = params
            .split([';', ':'])
            .map(|p| p.parse().unwrap_or(0))
            .collect();
        let mut i = 0;
        while i < codes.len() {
            let code = codes[i];
            match code {
                0 => *self = Style::default(),
                1 => self.flags |= BOLD,
                3 => self.flags |= ITALIC,
                4 => self.flags |= UNDERLINE,
                8 => self.flags |= CONCEAL,
                9 => self.flags |= CROSS,
                21 | 22 => self.flags &= !BOLD,
                23 => self.flags &= !ITALIC,
                24 => self.flags &= !UNDERLINE,
                28 => self.flags &= !CONCEAL,
                29 => self.flags &= !CROSS,
                30..=37 => self.fg = Some(Colour::Base((code - 30) as u8)),
                39 => self.fg = None,
                40..=47 => self.bg = Some(Colour::Base((code - 40) as u8)),
                49 => self.bg = None,
                90..=97 => self.fg = Some(Colour::Bright((code - 90) as u8)),
                100..=107 => self.bg = Some(Colour::Bright((code - 100) as u8)),
                38 | 48 => {
                    let colour = match codes.get(i + 1) {
                        Some(5) => {
                            let n = codes.get(i + 2).copied();
                            i += 2;
                            n.and_then(|n| u8::try_from(n).ok()).map(Colour::Xterm)
                        }
                        Some(2) => {
                            i += 4;
                            None
                        }
                        _ => None,
                    };
                    if let Some(colour) = colour {
                        if code == 38 {
                            self.fg = Some(colour);
                        } else {
                            self.bg = Some(colour);
                        }
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// A section marker found in a line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Marker {
    /// `start` or `end`.
    #[serde(rename = "s")]
    pub boundary: &'static str,
    pub name: String,
    /// Unix seconds.
    pub ts: u64,
    /// `[collapsed=true]` (start markers).
    #[serde(rename = "c", skip_serializing_if = "std::ops::Not::not")]
    pub collapsed: bool,
}

/// One line of the log as the page gets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Line {
    /// Its number in the log (1-based, counting every `\n`).
    #[serde(rename = "n")]
    pub number: u64,
    /// Its text as HTML (escaped, colours as `<span class>`).
    #[serde(rename = "h")]
    pub html: String,
    /// `HH:MM:SS` of its timestamp header (UTC), when the log has them.
    #[serde(rename = "t", skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// A `+` timestamp header: it continues the previous line.
    #[serde(rename = "k", skip_serializing_if = "std::ops::Not::not")]
    pub continuation: bool,
    /// Section markers, in order.
    #[serde(rename = "m", skip_serializing_if = "Vec::is_empty")]
    pub markers: Vec<Marker>,
    /// `false` for a line that held only section markers.
    #[serde(rename = "v")]
    pub visible: bool,
}

/// Renders one line (without its `\n`) numbered `number`, in `style`, which it leaves
/// as the line's end left it.
pub(crate) fn render_line(raw: &[u8], number: u64, style: &mut Style) -> Line {
    let (time, continuation, body) = match LineHeader::parse(raw) {
        Some((header, rest)) => {
            let secs = header.time.as_secs() % 86_400;
            (
                Some(format!(
                    "{:02}:{:02}:{:02}",
                    secs / 3600,
                    secs / 60 % 60,
                    secs % 60
                )),
                header.continuation,
                rest,
            )
        }
        None => (None, false, raw),
    };
    let text = String::from_utf8_lossy(body);
    let mut markers = Vec::new();
    // Runs of text of one style; cleared by a `\r` that more text follows.
    let mut runs: Vec<(Style, String)> = Vec::new();
    let mut overwrite = false;
    let mut rest: &str = &text;
    while let Some(c) = rest.chars().next() {
        if c == 's'
            && (rest.starts_with("section_start:") || rest.starts_with("section_end:"))
            && let Some((marker, after)) = section::parse_section_marker(rest)
        {
            markers.push(Marker {
                boundary: match marker.boundary {
                    SectionBoundary::Start => "start",
                    SectionBoundary::End => "end",
                },
                collapsed: marker.collapsed(),
                name: marker.name,
                ts: marker.timestamp,
            });
            rest = after;
            continue;
        }
        rest = &rest[c.len_utf8()..];
        match c {
            '\x1b' => rest = escape_sequence(rest, style),
            '\r' => overwrite = true,
            c if c.is_control() && c != '\t' => {}
            c => {
                if overwrite {
                    runs.clear();
                    overwrite = false;
                }
                match runs.last_mut() {
                    Some((s, text)) if s == style => text.push(c),
                    _ => runs.push((*style, c.to_string())),
                }
            }
        }
    }
    let blank = runs.iter().all(|(_, t)| t.trim().is_empty());
    let mut html = String::new();
    for (s, t) in &runs {
        let classes = s.classes();
        if classes.is_empty() {
            html.push_str(&escape(t));
        } else {
            let _ = write!(html, "<span class=\"{classes}\">{}</span>", escape(t));
        }
    }
    Line {
        number,
        html,
        time,
        continuation,
        visible: !blank || markers.is_empty(),
        markers,
    }
}

/// Reads the escape sequence after an `ESC` at the start of `rest`, applies it when it is
/// an SGR, and returns what follows it.
fn escape_sequence<'a>(rest: &'a str, style: &mut Style) -> &'a str {
    if let Some(csi) = rest.strip_prefix('[') {
        // Parameters and intermediates, then one final byte in `@`..=`~`.
        let Some(end) = csi.find(|c: char| ('@'..='~').contains(&c)) else {
            return "";
        };
        if csi[end..].starts_with('m') {
            style.apply(&csi[..end]);
        }
        return &csi[end + 1..];
    }
    if let Some(osc) = rest.strip_prefix(']') {
        // Up to BEL or ST (`ESC \`).
        return match osc.find(['\x07', '\x1b']) {
            Some(end) if osc[end..].starts_with('\x07') => &osc[end + 1..],
            Some(end) => osc[end + 1..].strip_prefix('\\').unwrap_or(&osc[end + 1..]),
            None => "",
        };
    }
    rest
}

/// The CSS of GitLab's log palette (`page_bundles/xterm.scss`): the 16 named colours
/// with their bright variants, and the 256 xterm colours.
pub(crate) fn palette_css() -> String {
    const BASE: [&str; 8] = [
        "#000", "#df6d6d", "#4bb349", "#b2b215", "#4193e4", "#f330f3", "#1aa2a2", "#ccc",
    ];
    const BRIGHT: [&str; 8] = [
        "#918e95", "#ff6161", "#5cf759", "#cdcd1a", "#5797ff", "#ea4fea", "#00bdbd", "#fff",
    ];
    let mut css = String::from(
        ".term-bold{font-weight:600}.term-italic{font-style:italic}.term-conceal{visibility:hidden}\
         .term-underline{text-decoration:underline}.term-cross{text-decoration:line-through}",
    );
    for (i, name) in NAMES.iter().enumerate() {
        let (base, bright) = (BASE[i], BRIGHT[i]);
        let _ = write!(
            css,
            ".term-fg-{name}{{color:{base}}}.term-bold.term-fg-{name}{{color:{bright}}}.term-bg-{name}{{background-color:{base}}}\
             .term-fg-l-{name}{{color:{bright}}}.term-bg-l-{name}{{background-color:{bright}}}"
        );
    }
    for n in 0..=255u8 {
        let colour = match n {
            0..=7 => BASE[usize::from(n)].to_owned(),
            8..=15 => BRIGHT[usize::from(n - 8)].to_owned(),
            16..=231 => {
                let level = |v: u8| if v == 0 { 0 } else { 55 + 40 * u16::from(v) };
                let i = n - 16;
                format!(
                    "#{:02x}{:02x}{:02x}",
                    level(i / 36),
                    level(i / 6 % 6),
                    level(i % 6)
                )
            }
            232..=255 => {
                let g = 8 + 10 * u16::from(n - 232);
                format!("#{g:02x}{g:02x}{g:02x}")
            }
        };
        let _ = write!(
            css,
            ".xterm-fg-{n}{{color:{colour}}}.xterm-bg-{n}{{background-color:{colour}}}"
        );
    }
    css
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(raw: &str) -> Line {
        render_line(raw.as_bytes(), 1, &mut Style::default())
    }

    #[test]
    fn colours_become_gitlabs_classes_and_text_is_escaped() {
        let l = line("\x1b[32;1m$ make\x1b[0;m <b>&\x1b[38;5;208mhot\x1b[0m");
        assert_eq!(
            l.html,
            "<span class=\"term-fg-green term-bold\">$ make</span> &lt;b&gt;&amp;<span class=\"xterm-fg-208\">hot</span>"
        );
        assert!(l.visible && l.markers.is_empty());
        let l =
            line("\x1b[91;4mwarn\x1b[24m!\x1b[38;2;1;2;3m.\x1b]8;;http://x\x07link\x1b]8;;\x07");
        assert_eq!(
            l.html,
            "<span class=\"term-fg-l-red term-underline\">warn</span><span class=\"term-fg-l-red\">!.link</span>"
        );
    }

    #[test]
    fn the_style_carries_over_lines_and_requests() {
        let mut style = Style::default();
        render_line(b"\x1b[1;33mbuilding", 1, &mut style);
        let token = style.encode();
        assert_eq!(token, "b3..1");
        let mut again = Style::decode(&token);
        assert_eq!(again, style);
        let l = render_line(b"still\x1b[0m done", 2, &mut again);
        assert_eq!(
            l.html,
            "<span class=\"term-fg-yellow term-bold\">still</span> done"
        );
        assert_eq!(again.encode(), "");
        assert_eq!(Style::decode("junk"), Style::default());
    }

    #[test]
    fn sections_are_markers_and_carriage_returns_overwrite() {
        let l = line(
            "\x1b[0Ksection_start:1700000000:build_script[collapsed=true]\r\x1b[0K\x1b[36mStep\x1b[0m",
        );
        assert_eq!(
            l.markers,
            vec![Marker {
                boundary: "start",
                name: "build_script".into(),
                ts: 1_700_000_000,
                collapsed: true
            }]
        );
        assert_eq!(l.html, "<span class=\"term-fg-cyan\">Step</span>");
        assert!(l.visible);
        let l = line("\x1b[0Ksection_end:1700000003:build_script\r\x1b[0K");
        assert!(!l.visible);
        assert_eq!(l.markers[0].boundary, "end");
        assert_eq!(line("progress 10%\rprogress 100%\r").html, "progress 100%");
        assert_eq!(line("my section_x stays").html, "my section_x stays");
    }

    #[test]
    fn timestamps_show_their_time() {
        let l = line("2026-01-31T10:00:01.123456Z 01O $ make");
        assert_eq!(l.time.as_deref(), Some("10:00:01"));
        assert_eq!(l.html, "$ make");
        assert!(!l.continuation);
        assert!(line("2026-01-31T10:00:01.123456Z 01O+more").continuation);
    }

    #[test]
    fn the_palette_has_every_colour() {
        let css = palette_css();
        assert!(css.contains(".term-fg-red{color:#df6d6d}"));
        assert!(css.contains(".xterm-fg-196{color:#ff0000}"));
        assert!(css.contains(".xterm-bg-255{background-color:#eeeeee}"));
        assert!(css.contains(".xterm-fg-16{color:#000000}"));
    }
}
