//! [`LocalLauncher`]: programs as processes on this machine (`gantry step run`), their
//! output kept and, when asked, printed.

use std::path::PathBuf;
use std::sync::Mutex;

use crate::engine::{Launch, Launched, Launcher, Program};

/// Runs programs here: argv directly, scripts with bash (`errexit`, `pipefail`), or sh
/// when there is no bash.
#[derive(Debug, Default)]
pub struct LocalLauncher {
    /// Print output and log lines as they come (else only kept).
    pub echo: bool,
    output: Mutex<Vec<u8>>,
}

impl LocalLauncher {
    pub fn new(echo: bool) -> Self {
        Self {
            echo,
            output: Mutex::new(Vec::new()),
        }
    }

    /// Everything the programs printed and the log lines, in order.
    pub fn output(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().map(|o| o.clone()).unwrap_or_default())
            .into_owned()
    }

    fn keep(&self, bytes: &[u8]) {
        if self.echo {
            use std::io::Write;
            let _ = std::io::stdout().write_all(bytes);
        }
        if let Ok(mut o) = self.output.lock() {
            o.extend_from_slice(bytes);
        }
    }
}

/// bash where gitlab-runner looks for it, else sh.
fn shell() -> (PathBuf, bool) {
    for p in ["/usr/local/bin/bash", "/usr/bin/bash", "/bin/bash"] {
        if std::path::Path::new(p).exists() {
            return (PathBuf::from(p), true);
        }
    }
    (PathBuf::from("/bin/sh"), false)
}

impl Launcher for LocalLauncher {
    type Stop = String;

    async fn launch(&self, launch: Launch<'_>) -> Launched<String> {
        let mut command = match launch.program {
            Program::Exec(argv) => {
                let Some((program, args)) = argv.split_first() else {
                    return Launched::Stopped("an empty command".to_owned());
                };
                let mut c = tokio::process::Command::new(program);
                c.args(args);
                c
            }
            Program::Script(text) => {
                let (shell, bash) = shell();
                let mut c = tokio::process::Command::new(shell);
                if bash {
                    c.args(["-e", "-o", "pipefail", "-c", text]);
                } else {
                    c.args(["-e", "-c", text]);
                }
                c
            }
        };
        command
            .envs(launch.env)
            .current_dir(launch.work_dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                let what = match launch.program {
                    Program::Exec(argv) => argv.first().cloned().unwrap_or_default(),
                    Program::Script(_) => "the shell".to_owned(),
                };
                // A program that cannot start fails its step, as a shell's 127 would.
                self.keep(format!("{}: cannot run {what}: {e}\n", launch.step).as_bytes());
                return Launched::Exited(if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                });
            }
        };
        // Both streams as they come, into one log.
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let pump = |stream: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>| async move {
            let Some(mut stream) = stream else {
                return;
            };
            let mut buf = vec![0u8; 8192];
            while let Ok(n) = tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await {
                if n == 0 {
                    break;
                }
                self.keep(&buf[..n]);
            }
        };
        let ((), (), status) = tokio::join!(
            pump(out.map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Unpin + Send>)),
            pump(err.map(|e| Box::new(e) as Box<dyn tokio::io::AsyncRead + Unpin + Send>)),
            child.wait()
        );
        match status {
            Ok(s) => Launched::Exited(s.code().unwrap_or_else(|| {
                128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0)
            })),
            Err(e) => Launched::Stopped(format!("{}: wait: {e}", launch.step)),
        }
    }

    fn log(&self, line: &str) {
        self.keep(format!("{line}\n").as_bytes());
    }
}
