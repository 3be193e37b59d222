//! POSIX shell quoting, valid for bash and sh alike.

/// Quotes `value` as one shell word that expands to exactly `value`.
///
/// Words made only of safe characters are left bare; anything else is wrapped in
/// single quotes, with each `'` written as `'\''`. Inside single quotes every byte is
/// literal (newlines, `$`, `\`, escape sequences), in bash and in POSIX `sh`, so no
/// other escaping is needed. The one byte a shell word cannot hold is NUL: it is
/// dropped (callers that care warn first, see `contains_nul`).
pub fn quote(value: &str) -> String {
    let safe = !value.is_empty()
        && value.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'_' | b'-' | b'.' | b'/' | b',' | b':' | b'@' | b'%' | b'+' | b'='
                )
        });
    if safe {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Whether `value` has a NUL byte, which no shell variable can hold.
pub fn contains_nul(value: &str) -> bool {
    value.contains('\0')
}

/// Whether `name` can be a shell variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(quote("abc_1.2/x"), "abc_1.2/x");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("$HOME"), "'$HOME'");
        assert_eq!(quote("a\0b"), "'ab'");
    }

    #[test]
    fn variable_names() {
        assert!(is_variable_name("CI_JOB_ID"));
        assert!(is_variable_name("_x1"));
        assert!(!is_variable_name("1x"));
        assert!(!is_variable_name("a-b"));
        assert!(!is_variable_name(""));
        assert!(!is_variable_name("../x"));
    }
}
