//! The harness that runs records of the gitlab-ci-local corpus
//! (`../shared/conformance/gitlab-ci-local/`) through the real `gantry run`, shared by two
//! suites:
//!
//! * `tests/gcl_run_conformance.rs`: records that run jobs without Docker, with
//!   `--executor shell`;
//! * `tests/gcl_docker_conformance.rs`: records that need Docker, with `--executor auto`
//!   and locally built stand-ins for the images they name.
//!
//! gitlab-ci-local ("gcl") runs pipelines on a developer machine; its integration tests
//! were turned into neutral records (`expectations.yaml` + `cases/<case>/`). The lint-only
//! records (previews, listings, …) are checked by `gantry-pipeline`'s `gcl_conformance`;
//! the suites take records with `scope: gitlab`, `needs_network: false` and none of the
//! lint-only `run` keys ([`is_run_record`]; each suite then selects on `needs_docker`),
//! and for each one:
//!
//! 1. copies `cases/<case>/` into a temp dir and makes it a git checkout with the corpus'
//!    git fixture (branch `master`, remote `origin` = `git@gitlab.com:gcl/test-project.git`
//!    or the record's `git_fixture.remote`, user `test@test.com` / `Testersen`, one commit,
//!    default branch `main` through `refs/remotes/origin/HEAD`); HOME is an empty temp dir
//!    and `GANTRY_CACHE_DIR` a per-record one;
//! 2. applies `setup` and runs `prior_runs` (each checked like the main run);
//! 3. runs the real binary: `gantry run [JOB...] [--needs] [--file F] [--manual J]...
//!    [--var K=V]... [--concurrency N] --executor <the suite's> --no-color --json-report
//!    <tmp> --artifacts-dir <tmp>` (`--concurrency` from the record's
//!    `gcl_options.concurrency`);
//! 4. checks the exit status, the output matchers, job statuses, coverage, caches and
//!    artifacts.
//!
//! # What is adapted (gcl's conventions → Gantry's output of the same fact)
//!
//! The corpus README lists gcl's output conventions that a GitLab-compatible system prints
//! differently; the harness maps Gantry's output onto them and changes nothing else:
//!
//! * log lines: gcl `<job> > <line>` (padded name) is Gantry's `<job> | <line>`; gcl's
//!   command trace `<job> $ <cmd>` is the runner's `$ <cmd>` log line. Padding is ignored.
//!   gcl prints a job's stderr lines on its own stderr; GitLab merges both streams into the
//!   job log, so job output lines count for stdout and stderr expectations alike.
//! * instance names: gcl `<job>: [i/n]` and `<job>: [a,b]` are GitLab's `<job> i/n` and
//!   `<job>: [a, b]` (in `run.jobs`, in expected lines, in job-keyed expectations);
//! * child pipeline jobs: gcl's `\t[<trigger>] -> <job>` (a tab per level, `[a -> b]` for
//!   a grandchild's path) is `gantry run`'s `<trigger> -> <job>` (`a -> b -> <job>`);
//! * gcl's `<job> >` lines are only what the job's scripts print; Gantry's job log also has
//!   the runner's own lines (preparing the executor, fetching, cleaning up, the result).
//!   Where a record lists every line of a job (`expect_stdout_lines_with_prefix`), only
//!   the lines of the `step_script` and `after_script` sections count;
//! * gcl's end-of-run summary is read from `--json-report`: ` PASS  <job>` (with
//!   ` <N>% coverage`) = success, ` FAIL  <job>` = failed, ` WARN  <job>  pre_script` =
//!   failed with allow_failure, `<job> environment: { name: n, url: u }` = the job's
//!   environment; ` WARN  <job>  after_script` is the runner's `after_script failed` warning
//!   in that job's log, and the `  > <line>` lines after a failure are lines of that job's
//!   output;
//! * gcl's imitations of runner messages are the runner's own: `found N artifact files` is
//!   the runner's `found N matching artifact files`, gcl's progress line `<job> exported
//!   artifacts` is the runner's `Uploading artifacts...` in that job's log, and gcl's
//!   `artifact reports dotenv '<f>' could not be found` is the runner's `<f>: no matching
//!   files` warning;
//! * git fixture values Gantry cannot force (the commit SHA) are the real ones;
//! * `remote_files` (what upstream serves for remote includes): the case files are placed
//!   in Gantry's offline include cache as upstream places them in gcl's
//!   (`<state-dir>/includes/<host>/…`): `.gantry/includes/<host>/<url path>` for a URL,
//!   `.gantry/includes/<origin host>/<project>/<ref>/<file>` for a project's files;
//! * `mocks` of the form `HTTP GET <url> returns <status>`: a loopback HTTP server answers
//!   the URL's path with that status, and `GANTRY_REMOTE_INCLUDE_MIRROR` sends the URL's
//!   origin there, so Gantry really fetches it and really gets the status. The run fails
//!   when that server saw no request for the path.
//!
//! An `expect_error` record passes when the run stops with exit status 2 before any job
//! runs and, where GitLab's wording is known, stderr holds GitLab's key phrase
//! ([`gitlab_phrases`]); gcl's own wording is never required.
//!
//! `expect_artifacts` is checked in what `--artifacts-dir` extracted after the run
//! (`<dir>/<job>/<path>`), the counterpart of gcl's artifact store.
//!
//! Records that do not pass are listed in the suite's exceptions file
//! (`tests/gcl-*-exceptions.txt`, one `<id> — [<tag>] <reason>` per line, the tags
//! documented at the top of the file). A suite fails on an unlisted failure, on a listed
//! record that passes, on a listed record it does not select, on a reason without one of
//! its tags, and when its selection changes size ([`run_suite`]). It prints
//! `gitlab-ci-local <suite> records: N/M passed`. Records run two at a time;
//! `GCL_RECORD=<id>` runs one and prints its output.

#![allow(clippy::panic, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gantry_test_support::corpus::{self, gcl, gcl::REMOTE, gcl::scalar, gcl::str_list};
use regex::Regex;
use serde_json::Value as J;

/// Keys of `run` that make a record lint-only (checked by gantry-pipeline's harness).
const LINT_ONLY: [&str; 8] = [
    "preview",
    "list",
    "list_csv",
    "validate_dependency_chain",
    "config_only",
    "parse_only",
    "gcl_internal",
    "gcl_cli",
];
/// A run that takes longer is stopped (upstream's longest timeout is 120 s).
const RUN_TIMEOUT: Duration = Duration::from_secs(180);
const THREADS: usize = 2;

/// Key phrases of GitLab's message for the error an `expect_error` record expects (its
/// `expect_error` is gcl's wording). Each must occur on stderr. Records absent here only
/// need the run to stop at the configuration.
fn gitlab_phrases(id: &str) -> &'static [&'static str] {
    match id {
        "cache-key-invalid-files#1" => {
            &["cache:key:files config has too many items (maximum is 2)"]
        }
        "cache-key-invalid-files#2" => &["cache:key:files config requires at least 1 item"],
        "cache-paths-not-array#1" => {
            &["jobs:test-job:cache:cache:paths config should be an array of strings"]
        }
        "dependencies-not-found#1" => &["test-job job: undefined dependency: invalid"],
        "include-invalid-local#1" => &["Local file `.gitlab-ci-invalid.yml` does not exist!"],
        // GitLab's `File::Remote`, for the mocked 404 answer (a real one, from the harness'
        // loopback server).
        "include-invalid-remote#1" => &[
            "Remote file `https://gitlab.com/firecow/gitlab-ci-local-includes/-/raw/master/.itlab-http.yml` could not be fetched because of HTTP code `404` error!",
        ],
        "include-local#4" => &["Local file `../include-local/.gitlab-ci.yml` does not exist!"],
        "include-local#5" => &["Local file `./.gitlab-ci.yml` does not exist!"],
        "invalid-stages#1" => &["stages config should be an array of strings"],
        "needs-contains-dependencies#1" => {
            &["jobs:test-job dependencies the two should be part of needs"]
        }
        "needs-invalid-stage#1" => {
            &["build-job job: need test-job is not defined in current or prior stages"]
        }
        "needs-not-array#1" => &["jobs:dev-job:needs config can only be a hash or an array"],
        "needs-parallel-matrix-error#1" => &["test-job job: undefined need: build-job: [foo]"],
        "needs-parallel-matrix-error#2" => {
            &["test-plain-parallel job: undefined need: build-int: [foo]"]
        }
        "needs-parallel-matrix-error#3" => {
            &["test-zero-match job: undefined need: build-foo: [nope]"]
        }
        "needs-parallel-matrix-expressions-non-parallel-consumer#1" => {
            &["linux:test job: undefined need"]
        }
        "needs-parallel-matrix-expressions-unknown-identifier#1" => {
            &["linux:test job: 'NOPE' does not exist in matrix configuration"]
        }
        "needs-unspecified-job#1" => &["test-job job: undefined need: invalid"],
        "never-needs#1" => &[
            "'test-job' job needs 'never-job' job, but 'never-job' does not exist in the pipeline.",
        ],
        "no-script#1" => {
            &["jobs test-job config should implement the script:, run:, or trigger: keyword"]
        }
        "reference#6" | "script-multidimension#2" => {
            &["script config should be a string or a nested array of strings up to 10 levels deep"]
        }
        "reference-circular-chain#1" => {
            &["!reference [\"test-job\", \"script\"] is part of a circular chain"]
        }
        "rules-blank#1" => &["jobs:job:rules config can't be blank"],
        "rules-curly-bracket-if#1" => &["jobs:job:rules:rule if invalid expression syntax"],
        "schema-validation#1" => &[
            "jobs:test script can't be blank",
            "jobs:test when should be one of: on_success, on_failure, always, manual, delayed",
            "jobs:test:artifacts:reports junit should be an array of strings or a string",
            "jobs:test config contains unknown keys: data",
        ],
        "schema-validation#3" => &[
            "jobs:error1:variables config should be a hash",
            "jobs:error4:variables config should be a hash",
        ],
        "schema-validation#4" => &[
            "jobs:error1:variables config should be a hash",
            "jobs:error5:variables config should be a hash",
        ],
        "schema-validation#5" => &[
            "jobs:error1:variables config should be a hash",
            "jobs:error6:variables config should be a hash",
        ],
        "script-blank#1" => &["jobs:test-job script can't be blank"],
        "self-dependency#1" => &["The pipeline has circular dependencies"],
        "stage-not-found#1" => &[
            "test-job job: chosen stage invalid does not exist; available stages are .pre, build, test, deploy, .post",
        ],
        "when#1" => &[
            "jobs:test-job when should be one of: on_success, on_failure, always, manual, delayed",
        ],
        _ => &[],
    }
}

/// A record that runs jobs without the network: GitLab scope, not skipped, not lint-only,
/// `needs_network: false`. Suites select among these on `needs_docker`.
pub fn is_run_record(rec: &J) -> bool {
    let b = |k: &str| rec.get(k).and_then(J::as_bool).unwrap_or(false);
    let run = rec.get("run").and_then(J::as_object);
    rec.get("scope").and_then(J::as_str) == Some("gitlab")
        && !b("needs_network")
        && !b("skip")
        && run.is_some_and(|r| !LINT_ONLY.iter().any(|k| r.contains_key(*k)))
}

/// `needs_docker` of a record.
pub fn needs_docker(rec: &J) -> bool {
    rec.get("needs_docker")
        .and_then(J::as_bool)
        .unwrap_or(false)
}

// ---------------------------------------------------------------------------------------
// Job names: gcl's instance names ↔ GitLab's.

/// gcl's instance name → GitLab's: `job: [1/2]` → `job 1/2`, `job: [a,b]` → `job: [a, b]`.
fn gitlab_name(gcl: &str) -> String {
    let Some((base, rest)) = gcl.split_once(": [") else {
        return gcl.to_owned();
    };
    let Some(inner) = rest.strip_suffix(']') else {
        return gcl.to_owned();
    };
    if let Some((i, n)) = inner.split_once('/') {
        if !i.is_empty() && !n.is_empty() && i.bytes().chain(n.bytes()).all(|b| b.is_ascii_digit())
        {
            return format!("{base} {i}/{n}");
        }
    }
    let values: Vec<&str> = inner.split(',').map(str::trim).collect();
    format!("{base}: [{}]", values.join(", "))
}

/// GitLab's instance name → gcl's (the inverse of [`gitlab_name`]). A job of a child
/// pipeline (Gantry's `<trigger> -> <job>`, `<trigger> -> <trigger> -> <job>` below a
/// child) is gcl's `[<trigger>] -> <job>` (`[<trigger> -> <trigger>] -> <job>`), indented
/// with one tab per level of nesting.
fn gcl_name(gitlab: &str) -> String {
    if let Some((path, job)) = gitlab.rsplit_once(" -> ") {
        let depth = path.matches(" -> ").count() + 1;
        let path: Vec<String> = path.split(" -> ").map(gcl_instance_name).collect();
        return format!(
            "{}[{}] -> {}",
            "\t".repeat(depth),
            path.join(" -> "),
            gcl_instance_name(job)
        );
    }
    gcl_instance_name(gitlab)
}

fn gcl_instance_name(gitlab: &str) -> String {
    if let Some((base, node)) = gitlab.rsplit_once(' ') {
        if let Some((i, n)) = node.split_once('/') {
            if !i.is_empty()
                && !n.is_empty()
                && i.bytes().chain(n.bytes()).all(|b| b.is_ascii_digit())
            {
                return format!("{base}: [{i}/{n}]");
            }
        }
    }
    match gitlab.split_once(": [") {
        Some((base, rest)) if rest.ends_with(']') => {
            format!("{base}: [{}", rest.replace(", ", ","))
        }
        _ => gitlab.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------
// Preparing and running a record.

/// A record's temp dir: the checkout, HOME, the cache dir and the report.
struct Workspace {
    _tmp: tempfile::TempDir,
    start: PathBuf,
    home: PathBuf,
    cache: PathBuf,
    report: PathBuf,
    /// `--artifacts-dir`: the jobs' artifacts after the run (gcl's artifact store).
    artifacts: PathBuf,
    /// Extra environment of every run.
    env: Vec<(String, String)>,
    /// The loopback server of the record's HTTP mocks.
    mock_http: Option<MockHttp>,
}

/// A loopback HTTP server answering each mocked path with its status (404 for others),
/// recording the paths it was asked for. Stops when dropped.
struct MockHttp {
    addr: std::net::SocketAddr,
    seen: std::sync::Arc<Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockHttp {
    fn start(answers: BTreeMap<String, u16>) -> std::io::Result<MockHttp> {
        use std::io::{BufRead as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                // The rest of the head.
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                let path = line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                let status = answers.get(&path).copied().unwrap_or(404);
                seen2.lock().unwrap().push(path);
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} Mocked\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        });
        Ok(MockHttp {
            addr,
            seen,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for MockHttp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `(origin, path, status)` of the record's `HTTP GET <url> returns <status>` mocks.
fn http_mocks(rec: &J) -> Vec<(String, String, u16)> {
    let re = Regex::new(r"^HTTP GET (https?://[^/\s]+)(/\S*) returns (\d{3})$").unwrap();
    str_list(rec.get("mocks"))
        .iter()
        .filter_map(|m| {
            let c = re.captures(m)?;
            Some((c[1].to_owned(), c[2].to_owned(), c[3].parse().ok()?))
        })
        .collect()
}

/// The host of a git remote URL (`git@gitlab.com:g/p.git`, `https://gitlab.com/g/p.git`).
fn remote_host(remote: &str) -> String {
    let rest = remote.split_once("://").map_or(remote, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split([':', '/']).next().unwrap_or_default().to_owned()
}

/// Places the record's `remote_files` in Gantry's offline include cache under `root`.
fn place_remote_files(rec: &J, src: &Path, root: &Path, remote: &str) -> Result<(), String> {
    let Some(rf) = rec.get("remote_files") else {
        return Ok(());
    };
    let cache = root.join(".gantry/includes");
    let mut places: Vec<(PathBuf, PathBuf)> = Vec::new();
    if let Some(urls) = rf.get("urls").and_then(J::as_object) {
        for (url, file) in urls {
            let rest = url
                .split_once("://")
                .map(|(_, r)| r)
                .ok_or(format!("remote_files: `{url}` is no URL"))?;
            places.push((src.join(scalar(file)), cache.join(rest)));
        }
    }
    if let Some(files) = rf.get("files").and_then(J::as_object) {
        let project = rf
            .get("project")
            .and_then(J::as_str)
            .ok_or("remote_files: files without project")?;
        let r = rf.get("ref").and_then(J::as_str).unwrap_or("HEAD");
        let dir = cache.join(remote_host(remote)).join(project).join(r);
        for (path, file) in files {
            places.push((
                src.join(scalar(file)),
                dir.join(path.trim_start_matches('/')),
            ));
        }
    }
    for (from, to) in places {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("create {}: {e}", parent.display()))?;
        }
        std::fs::copy(&from, &to)
            .map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))?;
    }
    Ok(())
}

fn git(dir: &Path, home: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Testersen")
        .env("GIT_AUTHOR_EMAIL", "test@test.com")
        .env("GIT_COMMITTER_NAME", "Testersen")
        .env("GIT_COMMITTER_EMAIL", "test@test.com")
        .output()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Copies `from` into `to`, dot-files included, writable, executable bits kept.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let meta = std::fs::symlink_metadata(&src)?;
        if meta.is_dir() {
            copy_tree(&src, &dst)?;
        } else if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
            let exec = meta.permissions().mode() & 0o111 != 0;
            std::fs::set_permissions(
                &dst,
                std::fs::Permissions::from_mode(if exec { 0o755 } else { 0o644 }),
            )?;
        }
    }
    Ok(())
}

fn prepare(rec: &J) -> Result<Workspace, String> {
    let case = rec
        .get("case")
        .and_then(J::as_str)
        .ok_or("record has no case")?;
    let tmp = tempfile::Builder::new()
        .prefix("gcl-run-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let root = tmp.path().join("test-project");
    let (home, cache) = (tmp.path().join("home"), tmp.path().join("cache"));
    std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let mut src = gcl::dir().join("cases").join(case);
    let run = rec.get("run").cloned().unwrap_or(J::Null);
    if let Some(dir) = run.get("project_dir").and_then(J::as_str) {
        src = src.join(dir);
    }
    copy_tree(&src, &root).map_err(|e| format!("copy {}: {e}", src.display()))?;
    let remote = rec
        .pointer("/git_fixture/remote")
        .and_then(J::as_str)
        .unwrap_or(REMOTE);
    place_remote_files(rec, &src, &root, remote)?;
    let mocks = http_mocks(rec);
    let (mut env, mut mock_http) = (Vec::new(), None);
    if !mocks.is_empty() {
        let answers = mocks.iter().map(|(_, p, s)| (p.clone(), *s)).collect();
        let server = MockHttp::start(answers).map_err(|e| format!("mock HTTP server: {e}"))?;
        let mut origins: Vec<&String> = mocks.iter().map(|(o, _, _)| o).collect();
        origins.dedup();
        let rewrites: Vec<String> = origins
            .iter()
            .map(|o| format!("{o}/=http://{}/", server.addr))
            .collect();
        env.push((
            "GANTRY_REMOTE_INCLUDE_MIRROR".to_owned(),
            rewrites.join(" "),
        ));
        mock_http = Some(server);
    }
    for args in [
        &["init", "-q", "-b", "master"][..],
        &["config", "user.email", "test@test.com"],
        &["config", "user.name", "Testersen"],
        &["remote", "add", "origin", remote],
        &["add", "-A"],
        &["commit", "-q", "--allow-empty", "-m", "Initial commit"],
        // The default branch, as a clone of a project whose HEAD is `main` knows it.
        &["update-ref", "refs/remotes/origin/main", "HEAD"],
        &[
            "symbolic-ref",
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/main",
        ],
    ] {
        git(&root, &home, args)?;
    }
    let start = match run.get("start_dir").and_then(J::as_str) {
        Some(dir) => root.join(dir),
        None => root.clone(),
    };
    let report = tmp.path().join("report.json");
    let artifacts = tmp.path().join("artifacts");
    Ok(Workspace {
        _tmp: tmp,
        start,
        home,
        cache,
        report,
        artifacts,
        env,
        mock_http,
    })
}

/// What one `gantry run` did.
pub struct Outcome {
    code: Option<i32>,
    stdout: String,
    pub stderr: String,
    report: Option<J>,
    elapsed: Duration,
}

fn run_gantry(ws: &Workspace, run: &J, executor: &str) -> Outcome {
    let _ = std::fs::remove_file(&ws.report);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gantry"));
    cmd.arg("run");
    for job in str_list(run.get("jobs")) {
        cmd.arg(gitlab_name(&job));
    }
    // gcl ignores `--needs` without job names (the whole pipeline runs).
    if run.get("needs").and_then(J::as_bool).unwrap_or(false) && run.get("jobs").is_some() {
        cmd.arg("--needs");
    }
    if let Some(file) = run.get("file").and_then(J::as_str) {
        cmd.args(["--file", file]);
    }
    for job in str_list(run.get("manual")) {
        cmd.args(["--manual", &gitlab_name(&job)]);
    }
    if let Some(vars) = run.get("variables").and_then(J::as_object) {
        for (k, v) in vars {
            cmd.args(["--var", &format!("{k}={}", scalar(v))]);
        }
    }
    // gcl's `--concurrency N`: how many jobs run at once (records use 1 for a set order).
    if let Some(n) = run
        .get("gcl_options")
        .and_then(|o| o.get("concurrency"))
        .and_then(J::as_u64)
    {
        cmd.args(["--concurrency", &n.to_string()]);
    }
    cmd.args(["--executor", executor, "--no-color", "--json-report"])
        .arg(&ws.report)
        .arg("--artifacts-dir")
        .arg(&ws.artifacts);
    cmd.envs(ws.env.iter().map(|(k, v)| (k, v)));
    cmd.current_dir(&ws.start)
        .env("HOME", &ws.home)
        .env("GANTRY_CACHE_DIR", &ws.cache)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("NO_COLOR")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    {
        use std::os::unix::process::CommandExt as _;
        cmd.process_group(0);
    }
    let started = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Outcome {
                code: None,
                stdout: String::new(),
                stderr: format!("spawn gantry: {e}"),
                report: None,
                elapsed: Duration::ZERO,
            };
        }
    };
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let err = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let mut interrupted = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(_) => break None,
        }
        let elapsed = started.elapsed();
        if elapsed > RUN_TIMEOUT && !interrupted {
            // Ctrl-C: the pipeline is canceled, after_script runs.
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            interrupted = true;
        } else if elapsed > RUN_TIMEOUT + Duration::from_secs(20) {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            break child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let stdout = out.join().unwrap_or_default();
    let mut stderr = err.join().unwrap_or_default();
    if interrupted {
        stderr.push_str(&format!("\n[harness: stopped after {RUN_TIMEOUT:?}]\n"));
    }
    let report = std::fs::read_to_string(&ws.report)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    Outcome {
        code: status.and_then(|s| s.code()),
        stdout,
        stderr,
        report,
        elapsed,
    }
}

// ---------------------------------------------------------------------------------------
// Gantry's output seen in gcl's conventions.

/// One job of the report.
struct ReportJob {
    /// gcl's form of the name.
    gcl: String,
    status: String,
    allow_failure: bool,
    coverage: Option<f64>,
    environment: Option<(String, Option<String>)>,
}

/// The run's output as gcl would show the same facts.
struct View {
    /// stdout: job lines as `<job> > <text>` / `<job> $ <cmd>` (gcl names, no padding),
    /// other lines as printed, then the summary lines synthesized from the report.
    stdout: Vec<String>,
    /// `stdout` without the runner's own lines: of a job's log, only what its scripts
    /// printed (the `step_script` and `after_script` sections), as gcl's `<job> >` lines.
    script_stdout: Vec<String>,
    /// Gantry's stderr, then every job output line (not command traces).
    stderr: Vec<String>,
    jobs: Vec<ReportJob>,
    /// Every job output line without its prefix (gcl prints some runner-like messages
    /// without one).
    texts: Vec<String>,
    /// gcl names, longest first (to parse expected lines).
    names: Vec<String>,
}

fn view(out: &Outcome) -> View {
    let mut jobs = Vec::new();
    if let Some(list) = out
        .report
        .as_ref()
        .and_then(|r| r.get("jobs"))
        .and_then(J::as_array)
    {
        for j in list {
            let name = j.get("name").and_then(J::as_str).unwrap_or_default();
            jobs.push(ReportJob {
                gcl: gcl_name(name),
                status: j
                    .get("status")
                    .and_then(J::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                allow_failure: j.get("allow_failure").and_then(J::as_bool).unwrap_or(false),
                coverage: j.get("coverage").and_then(J::as_f64),
                environment: j.get("environment").and_then(|e| {
                    let name = e.get("name").and_then(J::as_str)?;
                    Some((
                        name.to_owned(),
                        e.get("url").and_then(J::as_str).map(str::to_owned),
                    ))
                }),
            });
        }
    }
    // Gantry's names, longest first, with their gcl form.
    let mut gantry_names: Vec<(String, String)> = out
        .report
        .as_ref()
        .and_then(|r| r.get("jobs"))
        .and_then(J::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|j| j.get("name").and_then(J::as_str))
                .map(|n| (n.to_owned(), gcl_name(n)))
                .collect()
        })
        .unwrap_or_default();
    gantry_names.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    gantry_names.dedup();
    let mut stdout = Vec::new();
    let mut script_stdout = Vec::new();
    // Jobs whose log is in a script section now.
    let mut in_script: BTreeMap<String, bool> = BTreeMap::new();
    let mut stderr: Vec<String> = out.stderr.lines().map(str::to_owned).collect();
    let mut logs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut texts = Vec::new();
    for line in out.stdout.lines() {
        let job = gantry_names.iter().find_map(|(name, gcl)| {
            let rest = line.strip_prefix(name.as_str())?.trim_start_matches(' ');
            let text = rest
                .strip_prefix("| ")
                .or_else(|| (rest == "|").then_some(""))?;
            Some((gcl.clone(), text.to_owned()))
        });
        match job {
            Some((gcl, text)) => {
                let script = in_script.entry(gcl.clone()).or_default();
                let script_line = match script_boundary(&text) {
                    Some(opens) => {
                        *script = opens;
                        false
                    }
                    None => *script && !is_runner_line(&text),
                };
                let text = runner_message(&text);
                if let Some(cmd) = text.strip_prefix("$ ") {
                    stdout.push(format!("{gcl} $ {cmd}"));
                    if script_line {
                        script_stdout.push(format!("{gcl} $ {cmd}"));
                    }
                } else {
                    stdout.push(format!("{gcl} > {text}"));
                    if script_line {
                        script_stdout.push(format!("{gcl} > {text}"));
                    }
                    stderr.push(format!("{gcl} > {text}"));
                    texts.push(text.clone());
                    logs.entry(gcl).or_default().push(text);
                }
            }
            None => {
                stdout.push(line.to_owned());
                script_stdout.push(line.to_owned());
            }
        }
    }
    // gcl's summary, from the report.
    let summary_from = stdout.len();
    for j in &jobs {
        let log = logs.get(&j.gcl).map(Vec::as_slice).unwrap_or_default();
        match (j.status.as_str(), j.allow_failure) {
            ("success", _) => match j.coverage {
                Some(c) => stdout.push(format!(" PASS  {} {}% coverage", j.gcl, c)),
                None => stdout.push(format!(" PASS  {}", j.gcl)),
            },
            ("failed", true) => stdout.push(format!(" WARN  {}  pre_script", j.gcl)),
            ("failed", false) => stdout.push(format!(" FAIL  {}", j.gcl)),
            _ => {}
        }
        if log.iter().any(|l| l.contains("after_script failed")) {
            stdout.push(format!(" WARN  {}  after_script", j.gcl));
        }
        if j.status.as_str() == "failed" {
            stdout.extend(log.iter().map(|l| format!("  > {l}")));
        }
        if let Some((name, url)) = &j.environment {
            match url {
                Some(url) => stdout.push(format!(
                    "{} environment: {{ name: {name}, url: {url} }}",
                    j.gcl
                )),
                None => stdout.push(format!("{} environment: {{ name: {name} }}", j.gcl)),
            }
        }
        if log.iter().any(|l| l.starts_with("Uploading artifacts...")) {
            stdout.push(format!("{} exported artifacts", j.gcl));
        }
    }
    // The summary lines (after everything the jobs printed) are in both views.
    script_stdout.extend(stdout[summary_from..].iter().cloned());
    let mut names: Vec<String> = gantry_names.into_iter().map(|(_, g)| g).collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    View {
        stdout,
        script_stdout,
        stderr,
        jobs,
        texts,
        names,
    }
}

/// Whether a job log line opens a script section (`Some(true)`: `step_script`,
/// `after_script`) or closes it (`Some(false)`: the runner's next section or the job's
/// result); `None` for any other line.
fn script_boundary(text: &str) -> Option<bool> {
    let opens = (text.starts_with("Executing \"") && text.ends_with("\" stage of the job script"))
        || text == "Running after_script";
    let closes = [
        "Saving cache for ",
        "Uploading artifacts for ",
        "Cleaning up project directory and file based variables",
        "Job succeeded",
        "ERROR: Job failed",
        "finished: ",
    ]
    .iter()
    .any(|p| text.starts_with(p));
    match (opens, closes) {
        (true, _) => Some(true),
        (false, true) => Some(false),
        (false, false) => None,
    }
}

/// The runner's own lines inside a script section.
fn is_runner_line(text: &str) -> bool {
    text == "Running after script..." || text.starts_with("WARNING: after_script failed")
}

/// The runner's `<path>: no matching files. Ensure that the artifact path is relative to
/// the working directory (<dir>)` without the directory, as gcl imitates it.
fn runner_message(text: &str) -> String {
    const ENSURE: &str = "Ensure that the artifact path is relative to the working directory (";
    match text.find(ENSURE) {
        Some(at) if text.ends_with(')') => text[..at + ENSURE.len() - 2].to_owned(),
        _ => text.to_owned(),
    }
}

/// An expected gcl line in the view's form: a leading job name's padding removed.
fn canonical(expected: &str, names: &[String]) -> String {
    for name in names {
        let Some(rest) = expected.strip_prefix(name.as_str()) else {
            continue;
        };
        let trimmed = rest.trim_start_matches(' ');
        if trimmed.len() < rest.len() && (trimmed.starts_with('>') || trimmed.starts_with('$')) {
            let marker = &trimmed[..1];
            let text = trimmed[1..].strip_prefix(' ').unwrap_or(&trimmed[1..]);
            return format!("{name} {marker} {text}");
        }
    }
    // gcl's wording of runner messages → the runner's own.
    match expected.find(" artifact files and directories") {
        Some(at) if !expected[..at].ends_with(" matching") => {
            format!("{} matching{}", &expected[..at], &expected[at..])
        }
        _ => expected.to_owned(),
    }
}

/// gcl's `artifact reports dotenv '<f>' could not be found` → the runner's warning.
fn runner_wording(expected: &str) -> String {
    if let Some(f) = expected
        .strip_prefix("artifact reports dotenv '")
        .and_then(|r| r.strip_suffix("' could not be found"))
    {
        return format!("{f}: no matching files");
    }
    expected.to_owned()
}

/// One matcher of `expect_*_contains` lists.
enum Matcher {
    Line(String),
    Substring(String),
    Regex(Regex),
}

struct Item {
    matcher: Matcher,
    /// A plain line that names no job: also compared with job output lines.
    unprefixed: bool,
    count: Option<usize>,
    min_count: Option<usize>,
    text: String,
}

fn item(v: &J, names: &[String]) -> Result<Item, String> {
    let count = v.get("count").and_then(J::as_u64).map(|c| c as usize);
    let min_count = v.get("min_count").and_then(J::as_u64).map(|c| c as usize);
    let mut unprefixed = false;
    let (matcher, text) = if let Some(s) = v.as_str() {
        let line = canonical(s, names);
        unprefixed = !names
            .iter()
            .any(|n| line.starts_with(&format!("{n} > ")) || line.starts_with(&format!("{n} $ ")));
        (Matcher::Line(line), s.to_owned())
    } else if let Some(s) = v.get("substring").and_then(J::as_str) {
        (
            Matcher::Substring(runner_wording(&canonical(s, names))),
            s.to_owned(),
        )
    } else if let Some(r) = v.get("regex").and_then(J::as_str) {
        (
            Matcher::Regex(Regex::new(r).map_err(|e| format!("regex {r:?}: {e}"))?),
            format!("/{r}/"),
        )
    } else {
        return Err(format!("unknown matcher {v}"));
    };
    Ok(Item {
        matcher,
        unprefixed,
        count,
        min_count,
        text,
    })
}

/// How many lines match (for a substring: occurrences in the joined stream).
fn matches(item: &Item, lines: &[String], texts: &[String]) -> usize {
    match &item.matcher {
        Matcher::Line(l) => {
            let extra = if item.unprefixed { texts } else { &[] };
            lines
                .iter()
                .chain(extra)
                .filter(|x| x.trim_end() == l.trim_end())
                .count()
        }
        Matcher::Substring(s) => lines.join("\n").matches(s.as_str()).count(),
        Matcher::Regex(r) => lines.iter().filter(|x| r.is_match(x)).count(),
    }
}

fn check_contains(
    what: &str,
    list: Option<&J>,
    lines: &[String],
    v: &View,
    present: bool,
    problems: &mut Vec<String>,
) {
    let names = &v.names;
    for entry in list
        .and_then(J::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let it = match item(entry, names) {
            Ok(it) => it,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let n = matches(&it, lines, &v.texts);
        let ok = if !present {
            n == 0
        } else if let Some(c) = it.count {
            n == c
        } else {
            n >= it.min_count.unwrap_or(1)
        };
        if !ok {
            let want = match (present, it.count) {
                (false, _) => "absent".to_owned(),
                (true, Some(c)) => format!("{c} times"),
                (true, None) => "present".to_owned(),
            };
            problems.push(format!(
                "{what}: `{}` should be {want}, found {n} times",
                it.text
            ));
        }
    }
}

/// The job status in the corpus' neutral terms.
fn neutral_status(j: Option<&ReportJob>) -> &'static str {
    match j {
        Some(j) if j.status.as_str() == "success" => "success",
        Some(j) if j.status.as_str() == "failed" && j.allow_failure => "failed-allowed",
        Some(j) if j.status.as_str() == "failed" => "failed",
        _ => "not-run",
    }
}

/// The paths inside the cache archives of `key` (any `-<suffix>` the server appends).
fn cache_entries(cache: &Path, key: &str) -> Option<Vec<String>> {
    let mut archives = Vec::new();
    let mut stack = vec![cache.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "cache.tar.zst") {
                let dir_name = p
                    .parent()
                    .and_then(Path::file_name)
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if dir_name == key
                    || dir_name
                        .strip_prefix(key)
                        .is_some_and(|s| s.starts_with('-'))
                {
                    archives.push(p);
                }
            }
        }
    }
    if archives.is_empty() {
        return None;
    }
    let mut entries = Vec::new();
    for a in archives {
        let out = Command::new("tar")
            .arg("--zstd")
            .arg("-tf")
            .arg(&a)
            .output()
            .ok()?;
        entries.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| l.trim_start_matches("./").trim_end_matches('/').to_owned()),
        );
    }
    Some(entries)
}

/// Checks one run against the expectations in `exp` (a record or a `prior_runs` item).
fn check(id: &str, exp: &J, out: &Outcome, ws: &Workspace) -> Vec<String> {
    let mut problems = Vec::new();
    let v = view(out);
    let code = out.code;
    match exp.get("expect_exit").and_then(J::as_str) {
        Some("success") if code != Some(0) => {
            problems.push(format!("exit status {code:?}, expected 0"))
        }
        Some("failure") if code == Some(0) || code.is_none() => {
            problems.push(format!("exit status {code:?}, expected non-zero"))
        }
        _ => {}
    }
    if let Some(e) = exp.get("expect_error") {
        if code != Some(2) {
            problems.push(format!(
                "expected a configuration error (exit status 2), got {code:?} ({e})"
            ));
        }
        if v.jobs
            .iter()
            .any(|j| j.status.as_str() != "created" && j.status.as_str() != "skipped")
        {
            problems.push("expected no job to run".into());
        }
        for phrase in gitlab_phrases(id) {
            if !out.stderr.contains(phrase) {
                problems.push(format!("stderr lacks GitLab's `{phrase}`"));
            }
        }
    }
    check_contains(
        "stdout",
        exp.get("expect_stdout_contains"),
        &v.stdout,
        &v,
        true,
        &mut problems,
    );
    check_contains(
        "stdout",
        exp.get("expect_stdout_not_contains"),
        &v.stdout,
        &v,
        false,
        &mut problems,
    );
    check_contains(
        "stderr",
        exp.get("expect_stderr_contains"),
        &v.stderr,
        &v,
        true,
        &mut problems,
    );
    check_contains(
        "stderr",
        exp.get("expect_stderr_not_contains"),
        &v.stderr,
        &v,
        false,
        &mut problems,
    );
    if let Some(seq) = exp.get("expect_stdout_sequence").and_then(J::as_array) {
        let want: Vec<String> = seq
            .iter()
            .map(|l| canonical(&scalar(l), &v.names))
            .collect();
        let found = v.stdout.windows(want.len().max(1)).any(|w| {
            w.iter()
                .zip(&want)
                .all(|(a, b)| a.trim_end() == b.trim_end())
        });
        if !found {
            problems.push(format!("stdout lacks the sequence {want:?}"));
        }
    }
    if let Some(p) = exp.get("expect_stdout_lines_with_prefix") {
        let mut prefixes = str_list(p.get("prefixes"));
        prefixes.extend(str_list(p.get("prefix")));
        let ignore = p.get("ignore_suffix").and_then(J::as_str);
        // gcl's `<job> >` lines hold only what the job's scripts printed.
        let got: Vec<&String> = v
            .script_stdout
            .iter()
            .filter(|l| prefixes.iter().any(|p| l.starts_with(p.as_str())))
            .filter(|l| ignore.is_none_or(|s| !l.ends_with(s)))
            .collect();
        let want = str_list(p.get("equals"));
        if got
            .iter()
            .map(|s| s.as_str())
            .ne(want.iter().map(String::as_str))
        {
            problems.push(format!(
                "lines with prefix {prefixes:?}: expected {want:?}, got {got:?}"
            ));
        }
    }
    if let Some(statuses) = exp.get("expect_job_status").and_then(J::as_object) {
        for (name, want) in statuses {
            let gcl = gcl_name(&gitlab_name(name));
            let got = neutral_status(v.jobs.iter().rev().find(|j| j.gcl == gcl));
            if got != scalar(want) {
                problems.push(format!(
                    "job `{name}`: status {got}, expected {}",
                    scalar(want)
                ));
            }
        }
    }
    if let Some(cov) = exp.get("expect_coverage").and_then(J::as_object) {
        for (name, want) in cov {
            let gcl = gcl_name(&gitlab_name(name));
            let got = v
                .jobs
                .iter()
                .rev()
                .find(|j| j.gcl == gcl)
                .and_then(|j| j.coverage);
            let want_f: Option<f64> = scalar(want).parse().ok();
            if got.is_none() || got != want_f {
                problems.push(format!(
                    "job `{name}`: coverage {got:?}, expected {}",
                    scalar(want)
                ));
            }
        }
    }
    if let Some(caches) = exp.get("expect_cache").and_then(J::as_object) {
        for (key, facts) in caches {
            let entries = cache_entries(&ws.cache, key);
            for path in str_list(facts.get("contains")) {
                if !entries.as_ref().is_some_and(|e| e.contains(&path)) {
                    problems.push(format!("cache `{key}` lacks {path} (entries: {entries:?})"));
                }
            }
            for path in str_list(facts.get("not_contains")) {
                if entries.as_ref().is_some_and(|e| e.contains(&path)) {
                    problems.push(format!("cache `{key}` holds {path}"));
                }
            }
        }
    }
    // gcl's artifact store: what `--artifacts-dir` extracted for the job.
    if let Some(jobs) = exp.get("expect_artifacts").and_then(J::as_object) {
        for (name, facts) in jobs {
            let dir = ws.artifacts.join(gitlab_name(name).replace('/', "_"));
            for path in str_list(facts.get("contains")) {
                if !dir.join(&path).exists() {
                    problems.push(format!("artifacts of `{name}` lack {path}"));
                }
            }
            for path in str_list(facts.get("not_contains")) {
                if dir.join(&path).exists() {
                    problems.push(format!("artifacts of `{name}` hold {path}"));
                }
            }
        }
    }
    problems
}

/// Runs one record: `Ok` with the elapsed time, `Err` with what differs.
fn run_record(rec: &J, suite: &Suite) -> Result<Duration, String> {
    let id = rec.get("id").and_then(J::as_str).unwrap_or_default();
    let ws = prepare(rec)?;
    // `setup`: a fresh cache dir is "no cache stored"; gcl's build-folder pre-creation has
    // no counterpart (every Gantry job gets a clean build directory).
    let mut elapsed = Duration::ZERO;
    for (i, prior) in rec
        .get("prior_runs")
        .and_then(J::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let out = run_gantry(&ws, prior.get("run").unwrap_or(&J::Null), suite.executor);
        elapsed += out.elapsed;
        let mut problems = (suite.check_run)(&out);
        problems.extend(check(id, prior, &out, &ws));
        if !problems.is_empty() {
            return Err(format!("prior run {}: {}", i + 1, problems.join("; ")));
        }
    }
    let out = run_gantry(&ws, rec.get("run").unwrap_or(&J::Null), suite.executor);
    elapsed += out.elapsed;
    if std::env::var("GCL_RECORD").is_ok_and(|r| r == id) {
        println!(
            "{id}: exit {:?}\n--- stdout\n{}--- stderr\n{}--- report\n{:#?}",
            out.code, out.stdout, out.stderr, out.report
        );
    }
    if std::env::var("GCL_RECORD").is_ok_and(|r| r == id) {
        let v = view(&out);
        println!("--- view\n{:#?}\n{:?}", v.stdout, v.names);
    }
    let mut problems = (suite.check_run)(&out);
    problems.extend(check(id, rec, &out, &ws));
    if let Some(server) = &ws.mock_http {
        let seen = server.seen.lock().unwrap().clone();
        for (_, path, _) in http_mocks(rec) {
            if !seen.contains(&path) {
                problems.push(format!(
                    "the mocked URL path {path} was not requested (requests: {seen:?})"
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(elapsed)
    } else {
        Err(problems.join("; "))
    }
}

// ---------------------------------------------------------------------------------------
// A suite: its records, run, compared with its exceptions file.

/// One selection of records and how it runs.
pub struct Suite {
    /// The suite's word in `gitlab-ci-local <name> records: N/M passed`.
    pub name: &'static str,
    /// `gantry run --executor <executor>`.
    pub executor: &'static str,
    /// Which records of the corpus the suite runs.
    pub select: fn(&J) -> bool,
    /// How many records `select` takes: the suite fails when the corpus or the rule moves.
    pub selected: usize,
    /// The exceptions file, under `tests/`.
    pub exceptions: &'static str,
    /// The tags a reason in the exceptions file may start with (`[gitlab]`, …).
    pub tags: &'static [&'static str],
    /// Problems of one run beyond its record's expectations (e.g. it did not use Docker).
    pub check_run: fn(&Outcome) -> Vec<String>,
}

/// What a suite's run came to; the suite's own targets are checked on it.
pub struct Summary {
    pub passed: usize,
    pub total: usize,
    /// Reasons of the listed records, by id.
    pub exceptions: BTreeMap<String, String>,
}

/// Runs the suite's records (two at a time), prints the listed exceptions, the unexpected
/// failures and `gitlab-ci-local <name> records: N/M passed`, and fails on an unlisted
/// failure, a listed record that passes or is not selected, a reason without one of the
/// suite's tags, or a selection of another size. `None` when `GCL_RECORD` picked one
/// record (nothing is asserted then).
pub fn run_suite(suite: &Suite) -> Option<Summary> {
    let entries = &gcl::records();
    let only = std::env::var("GCL_RECORD").ok();
    let selected: Vec<&J> = entries.iter().filter(|r| (suite.select)(r)).collect();
    let to_run: Vec<&J> = selected
        .iter()
        .copied()
        .filter(|r| {
            only.as_deref()
                .is_none_or(|o| r.get("id").and_then(J::as_str) == Some(o))
        })
        .collect();
    let results: Mutex<Vec<(String, Result<Duration, String>)>> = Mutex::new(Vec::new());
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                while let Some(rec) = to_run.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let id = rec
                        .get("id")
                        .and_then(J::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    let result = run_record(rec, suite);
                    results.lock().unwrap().push((id, result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let exceptions = corpus::exceptions(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests")
            .join(suite.exceptions),
    );
    let (mut passed, mut unexpected, mut stale, mut excepted) =
        (0, Vec::new(), Vec::new(), Vec::new());
    for (id, result) in &results {
        match result {
            Ok(_) => {
                passed += 1;
                if exceptions.contains_key(id) {
                    stale.push(id.clone());
                }
            }
            Err(why) => match exceptions.get(id) {
                Some(reason) => excepted.push(format!("  {id}: {reason}\n      ({why})")),
                None => unexpected.push(format!("  {id}: {why}")),
            },
        }
    }
    let total = results.len();
    println!(
        "gitlab-ci-local: {} listed exceptions (tests/{}):",
        excepted.len(),
        suite.exceptions
    );
    println!("{}", excepted.join("\n"));
    if !unexpected.is_empty() {
        println!(
            "gitlab-ci-local: unexpected failures:\n{}",
            unexpected.join("\n")
        );
    }
    println!(
        "gitlab-ci-local {} records: {passed}/{total} passed",
        suite.name
    );
    if only.is_some() {
        return None;
    }
    assert_eq!(
        selected.len(),
        suite.selected,
        "the selection changed: the corpus or the selection rule moved"
    );
    let listed_unknown: Vec<&String> = exceptions
        .keys()
        .filter(|k| !results.iter().any(|(id, _)| id == *k))
        .collect();
    assert!(
        listed_unknown.is_empty(),
        "{} lists records that are not selected: {listed_unknown:?}",
        suite.exceptions
    );
    let untagged: Vec<&String> = exceptions
        .iter()
        .filter(|(_, r)| !suite.tags.iter().any(|t| r.starts_with(t)))
        .map(|(id, _)| id)
        .collect();
    assert!(
        untagged.is_empty(),
        "every reason in {} starts with one of {:?}; these do not: {untagged:?}",
        suite.exceptions,
        suite.tags
    );
    assert!(
        stale.is_empty(),
        "{} lists records that now pass (remove them): {stale:?}",
        suite.exceptions
    );
    assert!(
        unexpected.is_empty(),
        "{} gitlab-ci-local records fail and are not listed in {}:\n{}",
        unexpected.len(),
        suite.exceptions,
        unexpected.join("\n")
    );
    Some(Summary {
        passed,
        total,
        exceptions,
    })
}
