//! `gantry job log --project NAME ID [-f]`: a job's log from a running server
//! (`GET /api/v4/projects/:id/jobs/:job_id/trace`), as `glab ci trace`.
//!
//! The log is written to stdout as the runner sent it: colours (ANSI sequences) and
//! GitLab's section markers (`section_start:…\r\e[0K`, which a terminal's carriage return
//! and erase-line hide) are kept, so a terminal shows what GitLab's job page shows and a
//! pipe gets the bytes the server stores.
//!
//! `-f` follows a job that has not ended: once a second ([`crate::pipeline::POLL`]) it
//! reads the job's status, then its log, and writes the bytes past those already
//! written; it stops after the read that follows the job's end (the runner sends the
//! last of the log before it reports the end, so that read is whole). Reading a log
//! also tells the server someone watches it, and the runner then sends it more often
//! (GitLab's trace update interval). Each read fetches the whole log (the API has no
//! range): O(log size) per second, the same as GitLab's job page and `glab ci trace`.
//! A log that reads shorter than what was written (a server restored after a crash
//! kept fewer bytes) writes nothing until it grows past that point.
//!
//! Exit status: `0` the log was written (whatever the job's result), `2` bad flags or
//! no token, `3` the server failed or has no such job.

use std::io::Write as _;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::client::{ApiClient, ServerArgs, block_on, encode_segment};
use crate::exit::Failure;
use crate::pipeline::POLL;

#[derive(Subcommand)]
pub(crate) enum JobCommand {
    /// Print a job's log, colours kept; `-f` follows it until the job ends.
    Log(LogArgs),
}

#[derive(Args)]
pub(crate) struct LogArgs {
    /// The job's id.
    id: i64,
    /// The project's name (or numeric id).
    #[arg(long, value_name = "NAME")]
    project: String,
    /// Keep printing the log as it grows until the job ends.
    #[arg(long, short = 'f')]
    follow: bool,
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(command: &JobCommand) -> Result<(), Failure> {
    match command {
        JobCommand::Log(args) => log(args),
    }
}

/// Whether a job in `status` has ended (or will not start without someone acting).
fn job_ended(status: &str) -> bool {
    matches!(
        status,
        "success" | "failed" | "canceled" | "skipped" | "manual"
    )
}

fn log(args: &LogArgs) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let base = format!(
        "projects/{}/jobs/{}",
        encode_segment(&args.project),
        args.id
    );
    block_on(async {
        let mut written = 0usize;
        loop {
            // The status before the log: a log read after the job's end is whole.
            let ended = if args.follow {
                let job: Value = client.get(&base).await?;
                job_ended(job["status"].as_str().unwrap_or(""))
            } else {
                true
            };
            let log = client.get_bytes(&format!("{base}/trace")).await?;
            if let Some(new) = log.get(written..).filter(|new| !new.is_empty()) {
                let mut out = std::io::stdout().lock();
                if out.write_all(new).and_then(|()| out.flush()).is_err() {
                    // A closed pipe (`gantry job log -f | head`): nothing more to write.
                    return Ok(());
                }
                written = log.len();
            }
            if ended {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
    })?
}
