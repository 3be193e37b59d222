//! Property: any string (NUL aside, which no shell variable can hold) survives
//! `export VAR=<quote(s)>` + `printf %s "$VAR"` in bash and in sh, byte for byte; and
//! the same holds for whole generated scripts.

use std::path::Path;
use std::process::Command;

use gantry_runner::config::ShellKind;
use gantry_runner::executor::shell::{detect_shell, generate_script};
use gantry_runner::executor::{PreparedVariables, quote};
use proptest::prelude::*;

fn printed_by(shell: &Path, value: &str) -> Vec<u8> {
    let script = format!("export VAR={}\nprintf %s \"$VAR\"", quote(value));
    let output = Command::new(shell)
        .arg("-c")
        .arg(&script)
        .output()
        .expect("the shell runs");
    assert!(output.status.success(), "{script:?}: {output:?}");
    output.stdout
}

fn shells() -> Vec<std::path::PathBuf> {
    let (bash, _) = detect_shell(ShellKind::Bash).expect("bash or sh installed");
    let (sh, _) = detect_shell(ShellKind::Sh).expect("sh installed");
    vec![bash.path, sh.path]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn quoted_values_round_trip(value in any::<String>()) {
        let value = value.replace('\0', "");
        for shell in shells() {
            prop_assert_eq!(printed_by(&shell, &value), value.as_bytes(), "shell {}", shell.display());
        }
    }

    #[test]
    fn quoted_values_round_trip_with_shell_syntax(
        value in "[ -~\\t\\n\\r\\x1b'\"`$\\\\!*?~#&|;<>(){}\\[\\]é✓]{0,40}"
    ) {
        for shell in shells() {
            prop_assert_eq!(printed_by(&shell, &value), value.as_bytes(), "shell {}", shell.display());
        }
    }
}

#[test]
fn generated_script_exports_every_value_exactly() {
    let values = [
        "",
        "'",
        "''\"\"",
        "a\nb\r\nc",
        "$(touch /tmp/gantry-should-not-exist)`id`${HOME}",
        "\\\\n\\t\x1b[31mred",
        "-n",
        "--",
        "日本語 ✓ é",
    ];
    let mut variables = PreparedVariables::default();
    for (i, value) in values.iter().enumerate() {
        variables.set(&format!("V{i}"), value);
    }
    let dir = tempfile::tempdir().unwrap();
    let printers: Vec<String> = (0..values.len())
        .map(|i| format!("printf '%s\\0' \"$V{i}\""))
        .collect();
    for kind in [ShellKind::Bash, ShellKind::Sh] {
        let (shell, _) = detect_shell(kind).unwrap();
        let script = generate_script(kind, &variables, "running", dir.path(), &printers, true);
        let output = Command::new(&shell.path)
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        // Each field is the echoed command line, then the value.
        let printed: Vec<&[u8]> = output
            .stdout
            .split(|&b| b == 0)
            .map(|field| {
                let echo_end = field
                    .windows(6)
                    .position(|w| w == b"\x1b[0;m\n")
                    .map_or(0, |i| i + 6);
                &field[echo_end..]
            })
            .collect();
        for (i, value) in values.iter().enumerate() {
            assert_eq!(
                printed[i],
                value.as_bytes(),
                "{kind:?} V{i}: {:?}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
    }
    assert!(!Path::new("/tmp/gantry-should-not-exist").exists());
}
