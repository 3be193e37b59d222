//! `dotenv` reports parsed with GitLab's rules (`Ci::ParseDotenvArtifactService`):
//! one table of inputs and what GitLab makes of them; errors name the line.

use gantry_runner::artifacts::{DotenvLimits, parse_dotenv, parse_dotenv_files};

type Parsed = Result<Vec<(String, String)>, String>;

fn parsed(content: &[u8]) -> Parsed {
    parse_dotenv(content, DotenvLimits::default())
        .map(|vars| vars.into_iter().map(|v| (v.key, v.value)).collect())
        .map_err(|error| error.to_string())
}

fn ok(pairs: &[(&str, &str)]) -> Parsed {
    Ok(pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect())
}

fn err(message: &str) -> Parsed {
    Err(message.to_owned())
}

#[test]
fn gitlab_rules() {
    let cases: Vec<(&[u8], Parsed)> = vec![
        (b"A=1\nB=2\n", ok(&[("A", "1"), ("B", "2")])),
        (b"A=1\nB=2", ok(&[("A", "1"), ("B", "2")])),
        // Stripped on both sides; CRLF line ends are fine.
        (
            b"  KEY  =  spaced value \r\n",
            ok(&[("KEY", "spaced value")]),
        ),
        // Everything after the first `=` is the value; quotes are kept.
        (
            b"URL=https://x/?a=b\nQ=\"quoted\"\n",
            ok(&[("URL", "https://x/?a=b"), ("Q", "\"quoted\"")]),
        ),
        (b"EMPTY=\n", ok(&[("EMPTY", "")])),
        // A repeated key keeps its first position and takes the last value.
        (b"A=1\nB=2\nA=3\n", ok(&[("A", "3"), ("B", "2")])),
        // BOMs and UTF-16 (PowerShell's `Out-File`).
        (b"\xEF\xBB\xBFA=1\n", ok(&[("A", "1")])),
        (b"\xFF\xFEA\0=\x001\0\n\0", ok(&[("A", "1")])),
        (b"", ok(&[])),
        // Blank lines and comments are not allowed.
        (
            b"A=1\n\nB=2\n",
            err("parse dotenv report at line 2: Invalid Format: expected KEY=VALUE, found \"\""),
        ),
        (
            b"# comment\n",
            err(
                "parse dotenv report at line 1: Invalid Format: expected KEY=VALUE, found \"# comment\"",
            ),
        ),
        (
            b"A=1\n#B=2\n",
            err(
                "parse dotenv report at line 2: Validation failed: Key can contain only letters, digits and '_'. (key \"#B\")",
            ),
        ),
        (
            b"export A=1\n",
            err(
                "parse dotenv report at line 1: Validation failed: Key can contain only letters, digits and '_'. (key \"export A\")",
            ),
        ),
        (
            b"=value\n",
            err("parse dotenv report at line 1: Validation failed: Key can't be blank (key \"\")"),
        ),
        (
            b"A-B=1\n",
            err(
                "parse dotenv report at line 1: Validation failed: Key can contain only letters, digits and '_'. (key \"A-B\")",
            ),
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(
            parsed(input),
            expected,
            "input {:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn limits_of_twenty_variables_and_five_kilobytes() {
    let twenty: String = (1..=20).map(|i| format!("V{i}=x\n")).collect();
    assert_eq!(parsed(twenty.as_bytes()).map(|v| v.len()), Ok(20));
    let twenty_one = format!("{twenty}V21=x\n");
    assert_eq!(
        parsed(twenty_one.as_bytes()),
        err("parse dotenv report at line 21: Dotenv files cannot have more than 20 variables")
    );
    // Redefining a key does not count twice.
    let redefined = format!("{twenty}V1=y\n");
    assert_eq!(parsed(redefined.as_bytes()).map(|v| v.len()), Ok(20));

    let big = format!("A={}\n", "x".repeat(5 * 1024));
    assert_eq!(
        parsed(big.as_bytes()),
        err(
            "parse dotenv report: Dotenv Artifact Too Big. Maximum Allowable Size: 5120 (the report has 5123 bytes)"
        )
    );
    let limits = DotenvLimits {
        max_variables: 2,
        max_bytes: 100,
    };
    assert!(parse_dotenv(b"A=1\nB=2\nC=3\n", limits).is_err());
}

#[test]
fn several_files_share_the_limits_and_errors_name_the_file() {
    let first: &[u8] = b"A=1\n";
    let second: &[u8] = b"B=2\nbad line\n";
    let error = parse_dotenv_files(
        [(Some("build.env"), first), (Some("deploy.env"), second)],
        DotenvLimits::default(),
    )
    .expect_err("second file is invalid");
    assert_eq!(
        error.to_string(),
        "parse dotenv report at deploy.env:2: Invalid Format: expected KEY=VALUE, found \"bad line\""
    );
    let limits = DotenvLimits {
        max_variables: 1,
        max_bytes: 5120,
    };
    let error = parse_dotenv_files(
        [(Some("a.env"), first), (Some("b.env"), &b"B=2\n"[..])],
        limits,
    )
    .expect_err("two variables in total");
    assert_eq!(
        error.to_string(),
        "parse dotenv report at b.env:1: Dotenv files cannot have more than 1 variables"
    );
}
