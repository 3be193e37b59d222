//! The `gantry` binary: argument parsing and dispatch only. Business logic lives in the
//! library crates.

mod git;
mod lint;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit statuses shared by every command.
pub(crate) mod exit {
    /// The command succeeded (for `lint`: the configuration is valid).
    pub const OK: u8 = 0;
    /// The command ran and found a problem (for `lint`: the configuration is invalid).
    pub const INVALID: u8 = 1;
    /// Usage error: bad flags, not a git checkout, unreadable file.
    pub const USAGE: u8 = 2;
}

#[derive(Parser)]
#[command(name = "gantry", version, about = "Gantry: GitLab-compatible CI/CD", propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate and expand a .gitlab-ci.yml as GitLab would for a given ref.
    Lint(lint::LintArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Lint(args) => lint::run(&args),
    };
    ExitCode::from(code)
}
