//! The shell executor against real bash (and sh): exit codes, echo, variables, file
//! variables, masking, after_script's CI_JOB_STATUS, timeout and cancellation killing
//! the whole process group.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gantry_protocol::JobVariable;
use gantry_runner::config::ShellKind;
use gantry_runner::executor::shell::{ShellExecutor, detect_shell};
use gantry_runner::executor::{
    CancelReason, CiJobStatus, PreparedVariables, Stage, StageOutcome, prepare_variables,
};
use gantry_runner::trace::{MaskSet, Trace, TraceOptions};

struct Job {
    dir: tempfile::TempDir,
}

impl Job {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir(dir.path().join("build")).expect("the build directory");
        Self { dir }
    }

    fn build_dir(&self) -> PathBuf {
        self.dir.path().join("build")
    }

    fn tmp_dir(&self) -> PathBuf {
        self.dir.path().join("build.tmp")
    }

    fn executor(&self, shell: ShellKind) -> ShellExecutor {
        let (shell, _) = detect_shell(shell).expect("bash or sh installed");
        ShellExecutor::new(shell, self.tmp_dir())
            .login(false)
            .kill_grace(Duration::from_millis(500))
    }

    fn variables(&self, vars: &[JobVariable]) -> PreparedVariables {
        prepare_variables(vars, &self.tmp_dir()).expect("variables prepared")
    }
}

fn var(key: &str, value: &str) -> JobVariable {
    JobVariable {
        key: key.into(),
        value: value.into(),
        public: true,
        ..JobVariable::default()
    }
}

fn trace_with(masks: MaskSet) -> Trace {
    Trace::new(masks, TraceOptions::default())
}

fn never() -> impl Future<Output = CancelReason> {
    std::future::pending()
}

async fn run_with(
    job: &Job,
    shell: ShellKind,
    commands: &[&str],
    variables: &PreparedVariables,
    status: CiJobStatus,
    trace: &Trace,
) -> StageOutcome {
    let commands: Vec<String> = commands.iter().map(|c| c.to_string()).collect();
    let build_dir = job.build_dir();
    let stage = Stage {
        name: "step_script",
        commands: &commands,
        variables,
        work_dir: &build_dir,
        timeout: Duration::from_secs(30),
        job_status: status,
        echo: true,
        detach: None,
        meter: None,
    };
    job.executor(shell).run(&stage, trace, never()).await
}

async fn run(commands: &[&str]) -> (StageOutcome, String) {
    let job = Job::new();
    let trace = trace_with(MaskSet::empty());
    let outcome = run_with(
        &job,
        ShellKind::Bash,
        commands,
        &PreparedVariables::default(),
        CiJobStatus::Running,
        &trace,
    )
    .await;
    (
        outcome,
        String::from_utf8_lossy(&trace.contents()).into_owned(),
    )
}

#[tokio::test]
async fn success_echoes_commands_in_green() {
    let (outcome, log) = run(&["echo hello", "echo world >&2"]).await;
    assert!(outcome.is_success(), "{outcome:?}\n{log}");
    assert!(
        log.contains("\x1b[32;1m$ echo hello\x1b[0;m\nhello\n"),
        "{log:?}"
    );
    assert!(
        log.contains("\x1b[32;1m$ echo world >&2\x1b[0;m\n"),
        "{log:?}"
    );
    assert!(log.contains("world\n"), "{log:?}");
}

#[tokio::test]
async fn exit_code_of_the_first_failing_command_stops_the_script() {
    let (outcome, log) = run(&["echo one", "(exit 3)", "echo never"]).await;
    assert_eq!(outcome.exit_code(), Some(3), "{log}");
    assert!(!log.contains("never\n"), "{log}");
    assert_eq!(
        outcome.failure_reason(),
        Some(gantry_protocol::FailureReason::ScriptFailure)
    );
    assert_eq!(outcome.ci_job_status(), CiJobStatus::Failed);
}

#[tokio::test]
async fn pipefail_and_multi_line_commands() {
    let (outcome, log) = run(&["false | true"]).await;
    assert_eq!(outcome.exit_code(), Some(1), "{log}");
    let (outcome, log) = run(&["if true; then\n  echo inside\nfi", "exit 7"]).await;
    assert_eq!(outcome.exit_code(), Some(7), "{log}");
    assert!(
        log.contains("$ if true; then # collapsed multi-line command"),
        "{log}"
    );
    assert!(log.contains("inside\n"), "{log}");
}

#[tokio::test]
async fn a_syntax_error_is_a_script_failure() {
    let (outcome, log) = run(&["echo 'unterminated"]).await;
    assert!(
        matches!(outcome, StageOutcome::ScriptFailure { .. }),
        "{outcome:?}\n{log}"
    );
}

#[tokio::test]
async fn runs_in_the_build_directory_with_empty_stdin() {
    let (outcome, log) = run(&["pwd", "cat; echo stdin-done"]).await;
    assert!(outcome.is_success(), "{log}");
    assert!(log.contains("/build\n"), "{log}");
    assert!(log.contains("stdin-done"), "{log}");
}

#[tokio::test]
async fn variables_are_exported_with_their_exact_values() {
    let job = Job::new();
    let tricky = "it's \"$HOME\" `id` \\n\n$(echo no) ; & | *";
    let variables = job.variables(&[
        var("PLAIN", "value"),
        var("TRICKY", tricky),
        var("EMPTY", ""),
        var("UNICODE", "héllo wörld ✓"),
        var("bad-name", "x"),
    ]);
    let trace = trace_with(MaskSet::empty());
    let outcome = run_with(
        &job,
        ShellKind::Bash,
        &["printf '<%s>' \"$PLAIN\" \"$TRICKY\" \"$EMPTY\" \"$UNICODE\" \"$CI_JOB_STATUS\"; echo"],
        &variables,
        CiJobStatus::Running,
        &trace,
    )
    .await;
    let log = String::from_utf8_lossy(&trace.contents()).into_owned();
    assert!(outcome.is_success(), "{log}");
    assert!(
        log.contains(&format!("<value><{tricky}><><héllo wörld ✓><running>\n")),
        "{log}"
    );
    assert!(
        log.contains("WARNING: variable \"bad-name\" is not a valid shell variable name"),
        "{log}"
    );
}

#[tokio::test]
async fn falls_back_to_sh_semantics_when_asked() {
    let job = Job::new();
    let variables = job.variables(&[var("Q", "a'b\"c$d")]);
    let trace = trace_with(MaskSet::empty());
    let outcome = run_with(
        &job,
        ShellKind::Sh,
        &["printf '[%s]\\n' \"$Q\"", "false", "echo never"],
        &variables,
        CiJobStatus::Running,
        &trace,
    )
    .await;
    let log = String::from_utf8_lossy(&trace.contents()).into_owned();
    assert_eq!(outcome.exit_code(), Some(1), "{log}");
    assert!(log.contains("[a'b\"c$d]\n"), "{log}");
    assert!(!log.contains("never\n"), "{log}");
}

#[tokio::test]
async fn masked_values_never_reach_the_trace() {
    let job = Job::new();
    let secret = "Sup3r-S3cret-Value";
    let mut masked = var("SECRET", secret);
    masked.masked = true;
    let variables = job.variables(&[masked]);
    let trace = trace_with(MaskSet::builder().value(secret).build().unwrap());
    // The secret is printed whole, one byte at a time, and to stderr.
    let outcome = run_with(
        &job,
        ShellKind::Bash,
        &[
            "echo \"$SECRET\"",
            "for i in $(seq 0 17); do printf '%s' \"${SECRET:$i:1}\"; sleep 0.01; done; echo",
            "echo \"x${SECRET}y\" >&2",
        ],
        &variables,
        CiJobStatus::Running,
        &trace,
    )
    .await;
    let log = String::from_utf8_lossy(&trace.contents()).into_owned();
    assert!(outcome.is_success(), "{log}");
    assert!(!log.contains(secret), "{log}");
    assert_eq!(log.matches("[MASKED]").count(), 3, "{log}");
    assert!(log.contains("x[MASKED]y"), "{log}");
}

#[tokio::test]
async fn a_stage_script_is_emptied_after_it_ran_and_reused_by_the_next_stage() {
    use std::os::unix::fs::MetadataExt;
    let job = Job::new();
    let secret = "Sup3r-S3cret-Value";
    let variables = job.variables(&[var("SECRET", secret)]);
    let script = job.tmp_dir().join("script_step_script.sh");
    let mut inodes = Vec::new();
    for round in 0..2 {
        let trace = trace_with(MaskSet::empty());
        let outcome = run_with(
            &job,
            ShellKind::Bash,
            &["test -n \"$SECRET\"", "cat \"$0\" | grep -c SECRET"],
            &variables,
            CiJobStatus::Running,
            &trace,
        )
        .await;
        let log = String::from_utf8_lossy(&trace.contents()).into_owned();
        assert!(outcome.is_success(), "round {round}: {log}");
        // While it ran, the script held the exports; afterwards nothing of it is left.
        assert!(!log.contains("\n0\n"), "round {round}: {log}");
        let meta = std::fs::metadata(&script).expect("the emptied script stays");
        assert_eq!(meta.len(), 0, "round {round}");
        inodes.push(meta.ino());
    }
    assert_eq!(
        inodes[0], inodes[1],
        "the second stage rewrote the same file"
    );
}

#[tokio::test]
async fn file_variables_hold_a_path_and_are_cleaned_up() {
    let job = Job::new();
    let mut file = var("CONFIG_FILE", "line 1\nline 'two'\n");
    file.file = true;
    let variables = job.variables(&[file]);
    let path = PathBuf::from(variables.get("CONFIG_FILE").unwrap());
    assert!(path.starts_with(job.tmp_dir()));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let trace = trace_with(MaskSet::empty());
    let outcome = run_with(
        &job,
        ShellKind::Bash,
        &["echo \"path=$CONFIG_FILE\"", "cat \"$CONFIG_FILE\""],
        &variables,
        CiJobStatus::Running,
        &trace,
    )
    .await;
    let log = String::from_utf8_lossy(&trace.contents()).into_owned();
    assert!(outcome.is_success(), "{log}");
    assert!(log.contains(&format!("path={}\n", path.display())), "{log}");
    assert!(log.contains("line 1\nline 'two'\n"), "{log}");
    variables.cleanup_file_variables().unwrap();
    assert!(!path.exists());
    variables.cleanup_file_variables().unwrap();
}

#[test]
fn file_variables_hold_the_path_the_job_sees() {
    let job = Job::new();
    let mut file = var("CONFIG_FILE", "text");
    file.file = true;
    let variables = gantry_runner::executor::prepare_variables_seen_at(
        &[file],
        &job.tmp_dir().join("variables"),
        Path::new("/builds/acme/widget.tmp/variables"),
    )
    .unwrap();
    assert_eq!(
        variables.get("CONFIG_FILE"),
        Some("/builds/acme/widget.tmp/variables/CONFIG_FILE")
    );
    // Written where this machine has it, and removed from there.
    let written = job.tmp_dir().join("variables/CONFIG_FILE");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "text");
    variables.cleanup_file_variables().unwrap();
    assert!(!written.exists());
}

#[tokio::test]
async fn after_script_runs_in_a_new_shell_and_sees_the_job_status() {
    let job = Job::new();
    let variables = job.variables(&[]);
    let trace = trace_with(MaskSet::empty());
    let script = run_with(
        &job,
        ShellKind::Bash,
        &["export FROM_SCRIPT=leaked", "exit 4"],
        &variables,
        CiJobStatus::Running,
        &trace,
    )
    .await;
    assert_eq!(script.exit_code(), Some(4));
    let after = run_with(
        &job,
        ShellKind::Bash,
        &["echo \"status=$CI_JOB_STATUS from_script=${FROM_SCRIPT:-unset}\""],
        &variables,
        script.ci_job_status(),
        &trace,
    )
    .await;
    let log = String::from_utf8_lossy(&trace.contents()).into_owned();
    assert!(after.is_success(), "{log}");
    assert!(log.contains("status=failed from_script=unset\n"), "{log}");
}

/// Whether `pid` is gone (or a zombie nobody reaped yet).
fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Whether `pid` dies within a moment: a signalled process exits asynchronously (its
/// pipes close a little before it becomes a zombie).
fn is_dead(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if is_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Starts a background grandchild (and one that ignores SIGTERM), records their pids,
/// then blocks.
fn spawn_grandchildren_commands(pid_file: &Path) -> Vec<String> {
    let pid_file = pid_file.display();
    vec![
        format!("sleep 1000 & echo $! >> {pid_file}"),
        format!("(trap '' TERM; while true; do sleep 0.1; done) & echo $! >> {pid_file}"),
        "echo started".to_owned(),
        "sleep 1000".to_owned(),
    ]
}

async fn wait_for_pids(path: &Path, count: usize) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = read_pids(path);
        if pids.len() >= count || Instant::now() > deadline {
            return pids;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let job = Job::new();
    let pid_file = job.dir.path().join("pids");
    let commands = spawn_grandchildren_commands(&pid_file);
    let variables = job.variables(&[]);
    let trace = trace_with(MaskSet::empty());
    let build_dir = job.build_dir();
    let stage = Stage {
        name: "step_script",
        commands: &commands,
        variables: &variables,
        work_dir: &build_dir,
        timeout: Duration::from_millis(1500),
        job_status: CiJobStatus::Running,
        echo: true,
        detach: None,
        meter: None,
    };
    let started = Instant::now();
    let outcome = job
        .executor(ShellKind::Bash)
        .run(&stage, &trace, never())
        .await;
    let log = String::from_utf8_lossy(&trace.contents()).into_owned();
    assert!(
        matches!(outcome, StageOutcome::Timeout { .. }),
        "{outcome:?}\n{log}"
    );
    assert_eq!(
        outcome.failure_reason(),
        Some(gantry_protocol::FailureReason::JobExecutionTimeout)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(log.contains("started\n"), "{log}");
    assert!(
        log.contains("could not run to completion because the timeout of 1.500s was exceeded"),
        "{log}"
    );
    let pids = read_pids(&pid_file);
    assert_eq!(pids.len(), 2, "{log}");
    for pid in pids {
        assert!(is_dead(pid), "grandchild {pid} survived the timeout");
    }
}

#[tokio::test]
async fn cancel_kills_the_whole_process_group() {
    let job = Job::new();
    let pid_file = job.dir.path().join("pids");
    let commands = spawn_grandchildren_commands(&pid_file);
    let variables = job.variables(&[]);
    let trace = trace_with(MaskSet::empty());
    let build_dir = job.build_dir();
    let stage = Stage {
        name: "step_script",
        commands: &commands,
        variables: &variables,
        work_dir: &build_dir,
        timeout: Duration::from_secs(60),
        job_status: CiJobStatus::Running,
        echo: true,
        detach: None,
        meter: None,
    };
    let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel::<CancelReason>();
    let cancel = async move { cancel_rx.await.unwrap_or(CancelReason::JobCanceled) };
    let executor = job.executor(ShellKind::Bash);
    let run = executor.run(&stage, &trace, cancel);
    let pids_file = pid_file.clone();
    let canceller = async move {
        let pids = wait_for_pids(&pids_file, 2).await;
        cancel_tx.send(CancelReason::JobCanceled).unwrap();
        pids
    };
    let (outcome, pids) = tokio::join!(run, canceller);
    let log = String::from_utf8_lossy(&trace.contents()).into_owned();
    assert!(
        matches!(
            outcome,
            StageOutcome::Canceled {
                reason: CancelReason::JobCanceled
            }
        ),
        "{outcome:?}\n{log}"
    );
    assert_eq!(outcome.ci_job_status(), CiJobStatus::Canceled);
    assert_eq!(pids.len(), 2, "{log}");
    for pid in pids {
        assert!(is_dead(pid), "grandchild {pid} survived cancellation");
    }
}

#[tokio::test]
async fn background_jobs_do_not_outlive_a_successful_stage() {
    let job = Job::new();
    let pid_file = job.dir.path().join("pids");
    let commands = vec![
        format!("sleep 1000 & echo $! > {}", pid_file.display()),
        "echo done".to_owned(),
    ];
    let variables = job.variables(&[]);
    let trace = trace_with(MaskSet::empty());
    let build_dir = job.build_dir();
    let stage = Stage {
        name: "step_script",
        commands: &commands,
        variables: &variables,
        work_dir: &build_dir,
        timeout: Duration::from_secs(60),
        job_status: CiJobStatus::Running,
        echo: true,
        detach: None,
        meter: None,
    };
    let started = Instant::now();
    let outcome = job
        .executor(ShellKind::Bash)
        .run(&stage, &trace, never())
        .await;
    assert!(outcome.is_success());
    // The sleep held stdout open; the stage still ended promptly.
    assert!(started.elapsed() < Duration::from_secs(10));
    for pid in read_pids(&pid_file) {
        assert!(is_dead(pid), "background job {pid} outlived the stage");
    }
}

#[tokio::test]
async fn a_missing_work_dir_is_a_system_failure() {
    let job = Job::new();
    let variables = job.variables(&[]);
    let trace = trace_with(MaskSet::empty());
    let missing = job.dir.path().join("missing");
    let commands = vec!["true".to_owned()];
    let stage = Stage {
        name: "step_script",
        commands: &commands,
        variables: &variables,
        work_dir: &missing,
        timeout: Duration::from_secs(5),
        job_status: CiJobStatus::Running,
        echo: true,
        detach: None,
        meter: None,
    };
    let outcome = job
        .executor(ShellKind::Bash)
        .run(&stage, &trace, never())
        .await;
    assert!(
        matches!(outcome, StageOutcome::SystemFailure { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        outcome.failure_reason(),
        Some(gantry_protocol::FailureReason::RunnerSystemFailure)
    );
}
