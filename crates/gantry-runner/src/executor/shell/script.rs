//! The job script, as gitlab-runner's bash shell writes it.
//!
//! ```text
//! trap exit 1 TERM                                  # a TERM ends the script quietly
//! set -o pipefail                                   # under sh: only if it has it:
//!                                                   # (set -o pipefail) 2>/dev/null && set -o pipefail
//! set -o errexit                                    # stop at the first failing command
//! set +o noclobber
//! export CI_JOB_ID=1042                             # every variable, quoted
//! export CI_JOB_STATUS=running
//! cd /builds/group/project
//! printf '%s\n' '␛[32;1m$ make test␛[0;m'           # each command echoed in bold green
//! make test                                         # then run as written
//! exit 0
//! ```
//!
//! Commands are trimmed; an empty one prints an empty line; a multi-line one is echoed
//! by its first line with `# collapsed multi-line command`. The script is POSIX sh
//! apart from `pipefail`, so it runs under bash or sh.

use std::path::Path;

use crate::config::ShellKind;
use crate::executor::{PreparedVariables, quote};
use crate::trace::{ANSI_BOLD_GREEN, ANSI_RESET};

/// Writes the script for `commands`, exporting `variables` (and `CI_JOB_STATUS` =
/// `job_status`), run from `work_dir`; each command printed first when `echo`.
pub fn generate_script(
    shell: ShellKind,
    variables: &PreparedVariables,
    job_status: &str,
    work_dir: &Path,
    commands: &[String],
    echo: bool,
) -> String {
    let mut script = String::new();
    script.push_str(match shell {
        ShellKind::Bash => "#!/usr/bin/env bash\n\n",
        ShellKind::Sh => "#!/bin/sh\n\n",
    });
    script.push_str("trap exit 1 TERM\n\n");
    // bash has pipefail; testing for it costs a subshell (a fork) per script.
    script.push_str(match shell {
        ShellKind::Bash => "set -o pipefail\n",
        ShellKind::Sh => "(set -o pipefail) 2>/dev/null && set -o pipefail\n",
    });
    script.push_str("set -o errexit\n");
    script.push_str("set +o noclobber\n");
    if variables.debug_trace() {
        // CI_DEBUG_TRACE: every command, exports included, in the log (masked values
        // stay masked by the log's masker), as gitlab-runner's bash shell does.
        script.push_str("set -o xtrace\n");
    }
    script.push('\n');
    for (name, value) in variables.exports() {
        // `name` was checked by `prepare_variables`.
        script.push_str(&format!("export {name}={}\n", quote(value)));
    }
    script.push_str(&format!("export CI_JOB_STATUS={}\n", quote(job_status)));
    script.push_str(&format!("cd {}\n\n", quote(&work_dir.to_string_lossy())));
    for command in commands {
        let command = command.trim();
        if !echo {
        } else if command.is_empty() {
            script.push_str("echo\n");
        } else {
            let echoed = match command.split_once('\n') {
                Some((first, _)) => format!("$ {first} # collapsed multi-line command"),
                None => format!("$ {command}"),
            };
            script.push_str(&format!(
                "printf '%s\\n' {}\n",
                quote(&format!("{ANSI_BOLD_GREEN}{echoed}{ANSI_RESET}"))
            ));
        }
        script.push_str(command);
        script.push('\n');
    }
    script.push_str("\nexit 0\n");
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_shape() {
        let mut variables = PreparedVariables::default();
        variables.set("GREETING", "it's $HOME");
        let script = generate_script(
            ShellKind::Bash,
            &variables,
            "running",
            Path::new("/builds/p"),
            &[
                "echo hi".to_owned(),
                "".to_owned(),
                "if true; then\n  echo x\nfi".to_owned(),
            ],
            true,
        );
        assert_eq!(
            script,
            "#!/usr/bin/env bash\n\ntrap exit 1 TERM\n\n\
             set -o pipefail\nset -o errexit\nset +o noclobber\n\n\
             export GREETING='it'\\''s $HOME'\nexport CI_JOB_STATUS=running\ncd /builds/p\n\n\
             printf '%s\\n' '\x1b[32;1m$ echo hi\x1b[0;m'\necho hi\n\
             echo\n\n\
             printf '%s\\n' '\x1b[32;1m$ if true; then # collapsed multi-line command\x1b[0;m'\n\
             if true; then\n  echo x\nfi\n\
             \nexit 0\n"
        );
        let sh = generate_script(
            ShellKind::Sh,
            &variables,
            "running",
            Path::new("/builds/p"),
            &[],
            true,
        );
        assert!(sh.starts_with(
            "#!/bin/sh\n\ntrap exit 1 TERM\n\n(set -o pipefail) 2>/dev/null && set -o pipefail\n"
        ));
    }
}
