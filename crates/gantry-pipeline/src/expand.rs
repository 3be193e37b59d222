//! Variable expansion and related string helpers shared by the pipeline crate.
//!
//! Three expansion flavours exist (spec §6.2):
//!
//! * [`expand_server`] – GitLab's `ExpandVariables.expand` /
//!   `expand_existing` ("G"), used for `environment:name`, `tags`,
//!   `rules:changes`, `include`, `trigger`, ….
//! * [`expand_nested`] – GitLab's `Collection#expand_value`, the nested
//!   pre-expansion of variable *values* before they are sent to the runner,
//!   where `$$` and `%%` are escapes. [`variable_references`] lists the names
//!   such a value depends on (for the topological sort).
//! * [`expand_runner`] – gitlab-runner's `JobVariables.ExpandValue`, i.e. Go's
//!   `os.Expand` with the runner's mapping function ("R").
//!
//! All expansions are single pass: inserted values are never rescanned.
//! Variable names are `[A-Za-z_][A-Za-z0-9_]*` for the GitLab flavours.

/// What an undefined variable reference becomes in server-side expansion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unknown {
    /// Replace it by the empty string (`ExpandVariables.expand`).
    Empty,
    /// Leave the reference text untouched (`ExpandVariables.expand_existing`).
    Keep,
}

/// GitLab server-side ("G") expansion, `ExpandVariables.expand` (with
/// [`Unknown::Empty`]) / `expand_existing` (with [`Unknown::Keep`]).
///
/// Recognises `$NAME`, `${NAME}` and `%NAME%`, NAME = `[A-Za-z_][A-Za-z0-9_]*`,
/// scanning left to right exactly like Ruby's
/// `gsub(/\$([a-zA-Z_][a-zA-Z0-9_]*)|\${\g<1>}|%\g<1>%/)`:
///
/// * `$` or `%` not starting a reference is copied literally, so `$$`, a
///   trailing `$`, `${}`, `${1}`, an unterminated `${NAME`, `%NAME` without a
///   closing `%`, `$1`, `$-` and `%%` all stay as they are.
/// * There is **no** escape syntax here: in `$$NAME` the second `$` still
///   starts `$NAME`, which is expanded (result `$` + value), and in
///   `%%NAME%` the inner `%NAME%` is expanded. Use [`expand_nested`] for the
///   escaping variant.
/// * Single pass: a value containing `$OTHER` is inserted verbatim.
pub fn expand_server(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    unknown: Unknown,
) -> String {
    expand_gitlab(text, false, lookup, unknown)
}

/// GitLab's nested pre-expansion of a variable value
/// (`Gitlab::Ci::Variables::Collection#expand_value`).
///
/// Same reference syntax as [`expand_server`], but `$$` and `%%` are consumed
/// as escapes and left intact (so `$$NAME` and `%%NAME%` are *not* expanded;
/// the runner later turns `$$` into `$`), and `${}` is left intact.
/// `unknown` corresponds to `keep_undefined`. The caller's `lookup` decides
/// about file / raw variables (return `None` with [`Unknown::Keep`] to defer
/// a reference to the runner).
pub fn expand_nested(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    unknown: Unknown,
) -> String {
    expand_gitlab(text, true, lookup, unknown)
}

/// Names referenced by a variable value, in order of appearance (duplicates
/// kept), as GitLab's `Collection::Item#depends_on` computes them: same
/// syntax and escapes as [`expand_nested`].
pub fn variable_references(text: &str) -> Vec<String> {
    scan_gitlab(text, true)
        .into_iter()
        .filter_map(|piece| match piece {
            Piece::Ref { name, .. } => Some(name.to_string()),
            Piece::Lit(_) => None,
        })
        .collect()
}

/// Runner-side ("R") expansion: gitlab-runner's `JobVariables.ExpandValue`,
/// which is Go's (>= 1.11) `os.Expand(value, variables.Get)`.
///
/// Behaviour, byte for byte as Go does it:
///
/// * `$NAME` – NAME is the longest run of `[A-Za-z0-9_]` (so `$1abc` is
///   handled by the next rule, but `$_1` and `$a1` are names). Unknown → empty.
/// * `$` followed by one of the shell-special characters
///   `* # $ @ ! ? - 0-9` – a one-character name. The runner maps `$` to `$`
///   (so `$$` → `$`), `* # @ ! ?` and the digits to the empty string, and
///   looks `-` up like any other name.
/// * `${…}` – everything up to the first `}` is the name, whatever it
///   contains (`${A B}` looks up `"A B"`); `${}` is removed; an unterminated
///   `${` is removed (just those two characters) and scanning goes on;
///   `${X}` with X shell-special is a one-character name as above.
/// * `$` followed by anything else (space, `%`, `/`, non-ASCII, …) and a `$`
///   at the very end are kept literally.
/// * `%NAME%` is **not** recognised. Single pass.
///
/// (The pre-13.0 runner used Go 1.10's `os.Expand`, which also dropped a `$`
/// followed by a non-name character; we follow the current runner.)
pub fn expand_runner(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let map = |name: &str| -> String {
        match name {
            "$" => "$".to_string(),
            "*" | "#" | "@" | "!" | "?" | "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7" | "8"
            | "9" => String::new(),
            _ => lookup(name).unwrap_or_default(),
        }
    };
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0; // start of not-yet-copied literal text
    let mut j = 0;
    while j < bytes.len() {
        if bytes[j] == b'$' && j + 1 < bytes.len() {
            out.push_str(text.get(copied..j).unwrap_or(""));
            let (name, width) = go_shell_name(text, j + 1);
            match name {
                Some(name) => out.push_str(&map(name)),
                // Valid syntax but no name: keep the `$`.
                None if width == 0 => out.push('$'),
                // Bad syntax (`${}` / unterminated `${`): eat it.
                None => {}
            }
            j += width;
            copied = j + 1;
        }
        j += 1;
    }
    out.push_str(text.get(copied.min(text.len())..).unwrap_or(""));
    out
}

/// Go's `getShellName(s[start..])`: the name (if any) and the number of bytes
/// consumed after the `$`. Every returned range starts and ends next to an
/// ASCII byte, hence on a char boundary.
fn go_shell_name(text: &str, start: usize) -> (Option<&str>, usize) {
    let bytes = text.as_bytes();
    let at = |i: usize| bytes.get(start + i).copied();
    let is_special = |c: Option<u8>| {
        matches!(
            c,
            Some(b'*' | b'#' | b'$' | b'@' | b'!' | b'?' | b'-' | b'0'..=b'9')
        )
    };
    let is_alnum = |c: Option<u8>| c.is_some_and(|c| c == b'_' || c.is_ascii_alphanumeric());

    if at(0) == Some(b'{') {
        if bytes.len() > start + 2 && is_special(at(1)) && at(2) == Some(b'}') {
            return (text.get(start + 1..start + 2), 3);
        }
        let mut i = 1;
        while let Some(c) = at(i) {
            if c == b'}' {
                if i == 1 {
                    return (None, 2); // `${}`
                }
                return (text.get(start + 1..start + i), i + 1);
            }
            i += 1;
        }
        return (None, 1); // unterminated `${`
    }
    if is_special(at(0)) {
        return (text.get(start..start + 1), 1);
    }
    let mut i = 0;
    while is_alnum(at(i)) {
        i += 1;
    }
    if i == 0 {
        (None, 0)
    } else {
        (text.get(start..start + i), i)
    }
}

/// `CI_COMMIT_REF_SLUG` (GitLab's `Gitlab::Utils.slugify`): lower-cased
/// (Unicode-aware, like Ruby's `downcase`), every character outside
/// `[a-z0-9]` replaced by `-`, cut to 63 characters (= bytes, all ASCII by
/// then), then leading and trailing `-` removed.
pub fn ref_slug(name: &str) -> String {
    let slug: String = name
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    slug.trim_matches('-').to_string()
}

/// `CI_JOB_NAME_SLUG`: the same `slugify` rules as [`ref_slug`].
pub fn job_name_slug(name: &str) -> String {
    ref_slug(name)
}

/// Ruby's `Float#to_s`, used to stringify YAML floats in `variables` the way
/// GitLab does: shortest round-trip digits; fixed notation when the decimal
/// exponent is in `-4 < e <= 15` (`1000.0`, `0.0001`, `100000000000000.0`),
/// scientific otherwise (`1.0e+16`, `1.0e-05`, `1.234e+20`); always at least
/// one fractional digit; `Infinity`, `-Infinity`, `NaN`; `-0.0` for
/// negative zero.
pub fn ruby_float_to_string(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    // Rust's `{:e}` prints the shortest round-trip digits, like ruby_dtoa mode 0.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = if digits.is_empty() {
        "0".to_string()
    } else {
        digits
    };
    let digs = digits.len() as i64;
    let decpt = exponent + 1; // position of the decimal point relative to the digits

    let mut out = String::new();
    if f.is_sign_negative() {
        out.push('-');
    }
    if decpt > 0 && decpt < digs {
        let (int_part, frac_part) = digits.split_at(decpt as usize);
        out.push_str(int_part);
        out.push('.');
        out.push_str(frac_part);
    } else if decpt > 0 && decpt <= 15 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (decpt - digs) as usize));
        out.push_str(".0");
    } else if decpt <= 0 && decpt > -4 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-decpt) as usize));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        out.push('.');
        out.push_str(if rest.is_empty() { "0" } else { rest });
        out.push_str(&format!("e{:+03}", decpt - 1));
    }
    out
}

// ---------------------------------------------------------------------------
// GitLab-side scanner
// ---------------------------------------------------------------------------

/// A piece of a scanned string.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    /// Literal text, including escapes and non-matching `$` / `%`.
    Lit(&'a str),
    /// A reference: the variable name and the full matched text.
    Ref { name: &'a str, full: &'a str },
}

fn is_name_start(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphabetic()
}

fn is_name_char(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphanumeric()
}

/// Length of the variable name starting at byte `at` (0 if none).
fn name_len(bytes: &[u8], at: usize) -> usize {
    match bytes.get(at) {
        Some(&c) if is_name_start(c) => {
            1 + bytes.get(at + 1..).map_or(0, |rest| {
                rest.iter().take_while(|&&c| is_name_char(c)).count()
            })
        }
        _ => 0,
    }
}

/// A GitLab-syntax match at byte `i` (which holds `$` or `%`): the match
/// length and, for a reference, the byte range of the name (`None` for an
/// escape token).
fn match_at(bytes: &[u8], i: usize, escapes: bool) -> Option<(usize, Option<(usize, usize)>)> {
    let c = bytes.get(i).copied()?;
    let next = bytes.get(i + 1).copied();
    if escapes && next == Some(c) {
        return Some((2, None)); // `$$` / `%%`
    }
    if c == b'$' {
        let len = name_len(bytes, i + 1);
        if len > 0 {
            return Some((1 + len, Some((i + 1, i + 1 + len))));
        }
        if next == Some(b'{') {
            let len = name_len(bytes, i + 2);
            if bytes.get(i + 2 + len) == Some(&b'}') {
                if len > 0 {
                    return Some((3 + len, Some((i + 2, i + 2 + len))));
                }
                if escapes {
                    return Some((3, None)); // `${}`
                }
            }
        }
        None
    } else if c == b'%' {
        let len = name_len(bytes, i + 1);
        if len > 0 && bytes.get(i + 1 + len) == Some(&b'%') {
            return Some((2 + len, Some((i + 1, i + 1 + len))));
        }
        None
    } else {
        None
    }
}

/// Splits `text` into literal pieces and references. With `escapes`, `$$`,
/// `%%` and `${}` are literal tokens (GitLab's `Collection::Item` regexp);
/// without, GitLab's `ExpandVariables` regexp is used.
fn scan_gitlab(text: &str, escapes: bool) -> Vec<Piece<'_>> {
    let bytes = text.as_bytes();
    let mut pieces = Vec::new();
    let mut lit_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c != b'$' && c != b'%' {
            i += 1;
            continue;
        }
        let matched = match_at(bytes, i, escapes);
        match matched {
            None => i += 1,
            Some((len, None)) => i += len, // escape: stays part of the literal text
            Some((len, Some((name_start, name_end)))) => {
                if lit_start < i {
                    pieces.push(Piece::Lit(text.get(lit_start..i).unwrap_or("")));
                }
                pieces.push(Piece::Ref {
                    name: text.get(name_start..name_end).unwrap_or(""),
                    full: text.get(i..i + len).unwrap_or(""),
                });
                i += len;
                lit_start = i;
            }
        }
    }
    if lit_start < text.len() {
        pieces.push(Piece::Lit(text.get(lit_start..).unwrap_or("")));
    }
    pieces
}

fn expand_gitlab(
    text: &str,
    escapes: bool,
    lookup: &dyn Fn(&str) -> Option<String>,
    unknown: Unknown,
) -> String {
    let mut out = String::with_capacity(text.len());
    for piece in scan_gitlab(text, escapes) {
        match piece {
            Piece::Lit(lit) => out.push_str(lit),
            Piece::Ref { name, full } => match lookup(name) {
                Some(value) => out.push_str(&value),
                None => {
                    if unknown == Unknown::Keep {
                        out.push_str(full);
                    }
                }
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(name: &str) -> Option<String> {
        match name {
            "A" => Some("a".into()),
            "B" => Some("b".into()),
            "HOME" => Some("/home/x".into()),
            "NESTED" => Some("$A-${B}".into()),
            "EMPTY" => Some(String::new()),
            "UNI" => Some("日本".into()),
            "_x1" => Some("under".into()),
            "A B" => Some("spaced".into()),
            "-" => Some("dash".into()),
            "12" => Some("twelve".into()),
            "1" => Some("one".into()),
            _ => None,
        }
    }

    fn g(text: &str) -> String {
        expand_server(text, &vars, Unknown::Empty)
    }
    fn gk(text: &str) -> String {
        expand_server(text, &vars, Unknown::Keep)
    }
    fn n(text: &str) -> String {
        expand_nested(text, &vars, Unknown::Empty)
    }
    fn nk(text: &str) -> String {
        expand_nested(text, &vars, Unknown::Keep)
    }
    fn r(text: &str) -> String {
        expand_runner(text, &vars)
    }

    #[test]
    fn expand_server_basic_forms() {
        assert_eq!(g("$A"), "a");
        assert_eq!(g("${A}"), "a");
        assert_eq!(g("%A%"), "a");
        assert_eq!(g("x-$A-y"), "x-a-y");
        assert_eq!(g("$_x1"), "under");
        assert_eq!(g("$HOME/bin"), "/home/x/bin");
        assert_eq!(g("$EMPTY|"), "|");
        assert_eq!(g(""), "");
        assert_eq!(g("plain text"), "plain text");
    }

    #[test]
    fn expand_server_adjacent_and_greedy_names() {
        assert_eq!(g("$A$B"), "ab");
        assert_eq!(g("${A}B"), "aB");
        assert_eq!(g("${A}${B}"), "ab");
        assert_eq!(g("$AB"), ""); // greedy name `AB`, undefined
        assert_eq!(gk("$AB"), "$AB");
        assert_eq!(g("%A%%B%"), "ab");
        assert_eq!(g("%A%B%"), "aB%");
        assert_eq!(g("$A%B%"), "ab");
    }

    #[test]
    fn expand_server_unknown_modes() {
        assert_eq!(g("[$NOPE]"), "[]");
        assert_eq!(gk("[$NOPE]"), "[$NOPE]");
        assert_eq!(g("[${NOPE}]"), "[]");
        assert_eq!(gk("[${NOPE}]"), "[${NOPE}]");
        assert_eq!(g("[%NOPE%]"), "[]");
        assert_eq!(gk("[%NOPE%]"), "[%NOPE%]");
    }

    #[test]
    fn expand_server_non_references_stay_literal() {
        assert_eq!(g("$"), "$");
        assert_eq!(g("a$"), "a$");
        assert_eq!(g("$$"), "$$");
        assert_eq!(g("100%"), "100%");
        assert_eq!(g("%%"), "%%");
        assert_eq!(g("${"), "${");
        assert_eq!(g("${A"), "${A");
        assert_eq!(gk("${A"), "${A");
        assert_eq!(g("${}"), "${}");
        assert_eq!(g("${1}"), "${1}");
        assert_eq!(g("$1"), "$1");
        assert_eq!(g("%A"), "%A");
        assert_eq!(g("% A%"), "% A%");
        assert_eq!(g("${A B}"), "${A B}");
        assert_eq!(g("$-"), "$-");
        assert_eq!(g("$ A"), "$ A");
    }

    #[test]
    fn expand_server_has_no_escapes() {
        // ExpandVariables' regexp has no `$$` alternative: the inner `$A` matches.
        assert_eq!(g("$$A"), "$a");
        assert_eq!(gk("$$NOPE"), "$$NOPE");
        assert_eq!(g("%%A%"), "%a");
        assert_eq!(g("$$$"), "$$$");
    }

    #[test]
    fn expand_server_is_single_pass() {
        assert_eq!(g("$NESTED"), "$A-${B}");
        assert_eq!(g("${NESTED}!"), "$A-${B}!");
    }

    #[test]
    fn expand_server_unicode() {
        assert_eq!(g("é$A日本"), "éa日本");
        assert_eq!(g("$UNI/ü"), "日本/ü");
        assert_eq!(g("$é"), "$é"); // not a name start
        assert_eq!(g("$Aé"), "aé"); // name stops at non-ASCII
        assert_eq!(g("${Aé}"), "${Aé}");
        assert_eq!(g("%é%"), "%é%");
        assert_eq!(g("🎉$A🎉"), "🎉a🎉");
    }

    #[test]
    fn expand_nested_escapes() {
        assert_eq!(n("$$"), "$$");
        assert_eq!(n("$$A"), "$$A");
        assert_eq!(n("%%A%"), "%%A%");
        assert_eq!(n("$$$A"), "$$a");
        assert_eq!(n("${}"), "${}");
        assert_eq!(n("$A$B ${A}B %A%"), "ab aB a");
        assert_eq!(n("[$NOPE]"), "[]");
        assert_eq!(nk("[$NOPE]"), "[$NOPE]");
        assert_eq!(n("$"), "$");
        assert_eq!(n("${A"), "${A");
        assert_eq!(n("$NESTED"), "$A-${B}");
        assert_eq!(n("é$A"), "éa");
    }

    #[test]
    fn variable_references_like_depends_on() {
        assert_eq!(
            variable_references("$A ${B} %C% $$D %%E% ${} $A"),
            ["A", "B", "C", "A"]
        );
        assert!(variable_references("no refs, 100% $").is_empty());
        assert!(variable_references("").is_empty());
    }

    #[test]
    fn expand_runner_basic_forms() {
        assert_eq!(r("$A"), "a");
        assert_eq!(r("${A}"), "a");
        assert_eq!(r("%A%"), "%A%"); // not a runner syntax
        assert_eq!(r("$A$B"), "ab");
        assert_eq!(r("${A}B"), "aB");
        assert_eq!(r("$AB"), "");
        assert_eq!(r("$NOPE|"), "|");
        assert_eq!(r("$HOME/bin"), "/home/x/bin");
        assert_eq!(r("$NESTED"), "$A-${B}"); // single pass
        assert_eq!(r(""), "");
        assert_eq!(r("plain"), "plain");
    }

    #[test]
    fn expand_runner_dollar_handling() {
        assert_eq!(r("$$"), "$");
        assert_eq!(r("$$A"), "$A");
        assert_eq!(r("$$$A"), "$a");
        assert_eq!(r("$"), "$");
        assert_eq!(r("cost: 5$"), "cost: 5$");
        assert_eq!(r("$ A"), "$ A");
        assert_eq!(r("$/"), "$/");
        assert_eq!(r("$%"), "$%");
        assert_eq!(r("${$}"), "$");
    }

    #[test]
    fn expand_runner_braces() {
        assert_eq!(r("${}"), "");
        assert_eq!(r("x${}y"), "xy");
        assert_eq!(r("${"), "");
        assert_eq!(r("${A"), "A"); // `${` eaten, rest is literal
        assert_eq!(r("a${A"), "aA");
        assert_eq!(r("${A B}"), "spaced");
        assert_eq!(r("${NOPE}x"), "x");
        assert_eq!(r("${12}"), "twelve"); // not special: looked up
    }

    #[test]
    fn expand_runner_shell_specials() {
        assert_eq!(r("$1"), ""); // digits are special, mapped to ""
        assert_eq!(r("${1}"), "");
        assert_eq!(r("$1abc"), "abc");
        assert_eq!(r("$12"), "2");
        assert_eq!(r("$*$#$@$!$?"), "");
        assert_eq!(r("$-"), "dash"); // special but looked up like a name
        assert_eq!(r("${-}"), "dash");
        assert_eq!(r("$_x1"), "under");
    }

    #[test]
    fn expand_runner_unicode() {
        assert_eq!(r("é$A日本"), "éa日本");
        assert_eq!(r("$é"), "$é");
        assert_eq!(r("$Aé"), "aé");
        assert_eq!(r("${日本}"), "");
        assert_eq!(r("${é"), "é");
        assert_eq!(r("$UNI$"), "日本$");
        assert_eq!(r("🎉$"), "🎉$");
    }

    #[test]
    fn slugs() {
        assert_eq!(ref_slug("main"), "main");
        assert_eq!(ref_slug("Feature/My_Branch"), "feature-my-branch");
        assert_eq!(ref_slug("-release-1.2-"), "release-1-2");
        assert_eq!(ref_slug("///"), "");
        assert_eq!(ref_slug(""), "");
        assert_eq!(ref_slug("Ünïcödé-ß"), "n-c-d"); // non-ASCII letters become '-'
        assert_eq!(ref_slug("日本語"), "");
        assert_eq!(ref_slug("\u{212A}elvin"), "kelvin"); // KELVIN SIGN lower-cases to ASCII k
        assert_eq!(ref_slug("İx"), "i-x"); // U+0130 lower-cases to i + U+0307
        let long = "a".repeat(100);
        assert_eq!(ref_slug(&long).len(), 63);
        let long_dash = format!("{}-tail", "b".repeat(62));
        assert_eq!(ref_slug(&long_dash), "b".repeat(62)); // cut at 63, then trailing '-' stripped
        let long_uni = "é".repeat(100) + "x";
        assert_eq!(ref_slug(&long_uni), "");
        assert_eq!(
            job_name_slug("build: [linux, amd64] 1/2"),
            "build---linux--amd64--1-2"
        );
        assert_eq!(job_name_slug("Test Job"), "test-job");
    }

    #[test]
    fn ruby_floats() {
        let cases: &[(f64, &str)] = &[
            (1.1, "1.1"),
            (1000.0, "1000.0"),
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (1.0e-5, "1.0e-05"),
            (1.5e-7, "1.5e-07"),
            (1e20, "1.0e+20"),
            (1.234e20, "1.234e+20"),
            (1e15, "1.0e+15"),
            (1e14, "100000000000000.0"),
            (123456789012345.0, "123456789012345.0"),
            (1234567890123456.0, "1.234567890123456e+15"),
            (12345.678, "12345.678"),
            (1e100, "1.0e+100"),
            (-1e-100, "-1.0e-100"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (5e-324, "5.0e-324"),
            (0.1 + 0.2, "0.30000000000000004"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (f64::NAN, "NaN"),
        ];
        for (value, expected) in cases {
            assert_eq!(ruby_float_to_string(*value), *expected, "{value:?}");
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
    fn expand_fuzz_never_panics_and_is_identity_without_sigils() {
        for input in fuzz_inputs() {
            let _ = g(&input);
            let _ = gk(&input);
            let _ = n(&input);
            let _ = nk(&input);
            let _ = r(&input);
            let _ = variable_references(&input);
            let slug = ref_slug(&input);
            assert!(slug.len() <= 63);
            assert!(!slug.starts_with('-') && !slug.ends_with('-'));
            // Keep mode with an empty lookup never changes the text.
            assert_eq!(expand_server(&input, &|_| None, Unknown::Keep), input);
            assert_eq!(expand_nested(&input, &|_| None, Unknown::Keep), input);
        }
        for bits in [
            0u64,
            1,
            0x7ff0_0000_0000_0001,
            0x8000_0000_0000_0000,
            u64::MAX,
            0x3ff0_0000_0000_0001,
        ] {
            let _ = ruby_float_to_string(f64::from_bits(bits));
        }
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let value = f64::from_bits(state);
            if value.is_finite() {
                let text = ruby_float_to_string(value);
                assert_eq!(text.parse::<f64>().ok(), Some(value), "{text}");
                assert!(text.contains('.'), "{text}");
            }
        }
    }
}
