//! The `gantry` binary: argument parsing and dispatch only. Business logic lives in the
//! library crates.

mod bench;
mod client;
mod env;
mod git;
mod includes;
mod job;
mod lint;
mod otel;
mod pipeline;
mod project;
mod run;
mod runner;
mod schedule;
mod server;
mod step;
mod variable;
mod variables_file;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit statuses shared by every command.
pub(crate) mod exit {
    /// The command succeeded (for `lint`: the configuration is valid).
    pub const OK: u8 = 0;
    /// The command ran and found a problem (for `lint`: the configuration is invalid; for
    /// `pipeline watch`: the pipeline did not succeed).
    pub const INVALID: u8 = 1;
    /// Usage error: bad flags, not a git checkout, unreadable file, no API token, a port
    /// in use.
    pub const USAGE: u8 = 2;
    /// The command could not do its work: the server failed, or it answered a client
    /// command with an error.
    pub const FAILED: u8 = 3;

    /// Why a command stopped: the binary's one error type at its edge. [`Failure::report`]
    /// prints `error: …` on standard error and gives the status documented above; no status
    /// is chosen from a message's text.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Failure {
        /// Bad or missing flags, an unusable file or directory, no token: the user must
        /// change the command ([`USAGE`]).
        Usage(String),
        /// The command did its work and what it checked or watched did not succeed
        /// ([`INVALID`]).
        Invalid(String),
        /// The command could not do its work: a server, the network, the system
        /// ([`FAILED`]).
        Failed(String),
    }

    impl Failure {
        pub(crate) fn usage(message: impl Into<String>) -> Self {
            Self::Usage(message.into())
        }

        pub(crate) fn invalid(message: impl Into<String>) -> Self {
            Self::Invalid(message.into())
        }

        pub(crate) fn failed(message: impl Into<String>) -> Self {
            Self::Failed(message.into())
        }

        /// The exit status.
        pub(crate) fn code(&self) -> u8 {
            match self {
                Self::Usage(_) => USAGE,
                Self::Invalid(_) => INVALID,
                Self::Failed(_) => FAILED,
            }
        }

        /// Prints the message (`error: …`) and returns the exit status.
        pub(crate) fn report(self) -> u8 {
            eprintln!("error: {self}");
            self.code()
        }
    }

    impl std::fmt::Display for Failure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Self::Usage(message) | Self::Invalid(message) | Self::Failed(message) => {
                    f.write_str(message)
                }
            }
        }
    }

    /// A Tokio runtime from `builder` (with I/O and timers); failing to start one is
    /// [`Failure::Failed`].
    pub(crate) fn runtime(
        builder: &mut tokio::runtime::Builder,
    ) -> Result<tokio::runtime::Runtime, Failure> {
        builder
            .enable_all()
            .build()
            .map_err(|e| Failure::failed(format!("failed to start the async runtime: {e}")))
    }

    /// The exit status of a command's result, its failure reported.
    pub(crate) fn status(result: Result<u8, Failure>) -> u8 {
        result.unwrap_or_else(Failure::report)
    }
}

#[derive(Parser)]
#[command(
    name = "gantry",
    version,
    about = "Gantry: GitLab-compatible CI/CD",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the checkout's pipeline on this machine, with the real engine.
    Run(run::RunArgs),
    /// Validate and expand a .gitlab-ci.yml as GitLab would for a given ref.
    Lint(lint::LintArgs),
    /// Run the coordinator: Runner API, user API and git clones over HTTP.
    #[command(args_conflicts_with_subcommands = true)]
    Server(server::ServerArgs),
    /// Manage projects on a running server.
    #[command(subcommand)]
    Project(project::ProjectCommand),
    /// Manage pipelines on a running server.
    #[command(subcommand)]
    Pipeline(pipeline::PipelineCommand),
    /// Read jobs' logs on a running server.
    #[command(subcommand)]
    Job(job::JobCommand),
    /// Manage a project's pipeline schedules on a running server.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// Manage a project's (or the instance's) CI/CD variables on a running server.
    #[command(subcommand)]
    Variable(variable::VariableCommand),
    /// The runner agent: register, run jobs, verify, list, unregister.
    #[command(subcommand)]
    Runner(runner::RunnerCommand),
    /// Run a step (GitLab Functions) on this machine, as a `run:` job would.
    #[command(subcommand)]
    Step(step::StepCommand),
    /// Measure Gantry: `bench dispatch` times job pick-up and assignment, `bench scale`
    /// the cost of large pipelines, `bench idle-runners` many waiting runners.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

/// Writes a line to standard output. A closed pipe (`gantry … | head`) ends the output
/// quietly, where `println!` would panic.
pub(crate) fn out_line(text: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Lint(args) => lint::run(&args),
        Command::Server(args) => server::run(&args),
        Command::Project(command) => client::exit_code(project::run(&command)),
        Command::Pipeline(command) => client::exit_code(pipeline::run(&command)),
        Command::Job(command) => client::exit_code(job::run(&command)),
        Command::Variable(command) => client::exit_code(variable::run(&command)),
        Command::Schedule(command) => client::exit_code(schedule::run(&command)),
        Command::Runner(command) => runner::run(&command),
        Command::Step(command) => step::run(&command),
        Command::Bench(command) => bench::run(&command),
    };
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::exit::{FAILED, Failure, INVALID, OK, USAGE, status};

    #[test]
    fn each_failure_has_its_documented_status() {
        assert_eq!(Failure::usage("bad flag").code(), USAGE);
        assert_eq!(Failure::invalid("the pipeline failed").code(), INVALID);
        assert_eq!(Failure::failed("the server answered 500").code(), FAILED);
        assert_eq!(status(Ok(OK)), OK);
        assert_eq!(status(Ok(INVALID)), INVALID);
        assert_eq!(status(Err(Failure::usage("bad flag"))), USAGE);
        assert_eq!(Failure::failed("boom").to_string(), "boom");
    }
}
