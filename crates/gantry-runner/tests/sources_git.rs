//! `get_sources` with real git: repositories made in temp dirs and served over
//! `file://` and over HTTP (`git http-backend` behind a tiny loopback server that
//! demands the job token), covering clone vs fetch reuse, depth, clean flags,
//! checkout, submodules, and that the token never reaches the log or `.git/config`.

#![allow(clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;

use gantry_protocol::GitInfo;
use gantry_runner::sources::{GitSettings, SourcesError, SourcesJob, get_sources};

const TOKEN: &str = "glcbt-64_SeCrEtJobToken0123";

// ---- repositories ---------------------------------------------------------------

use gantry_test_support::git;

/// A repository with `commits` commits on `main`, each adding `file<N>.txt`.
fn origin(dir: &Path, commits: usize) -> PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    git(dir, &["init", "-q", "-b", "main"]);
    for n in 1..=commits {
        commit(dir, n);
    }
    dir.to_path_buf()
}

fn commit(dir: &Path, n: usize) -> String {
    std::fs::write(dir.join(format!("file{n}.txt")), format!("content {n}\n")).expect("write");
    std::fs::write(dir.join(".gitignore"), "*.log\n").expect("write");
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", &format!("commit {n}")]);
    head(dir)
}

fn head(dir: &Path) -> String {
    git(dir, &["rev-parse", "HEAD"])
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// GitLab's payload for the current `main` of `origin`: the persistent pipeline ref
/// (created here as GitLab does) plus the refspecs for `depth` (§3.5.2).
fn git_info(origin: &Path, url: String, depth: i64, pipeline: u64) -> GitInfo {
    let sha = head(origin);
    git(
        origin,
        &["update-ref", &format!("refs/pipelines/{pipeline}"), &sha],
    );
    let mut refspecs = vec![format!(
        "+refs/pipelines/{pipeline}:refs/pipelines/{pipeline}"
    )];
    if depth > 0 {
        refspecs.push("+refs/heads/main:refs/remotes/origin/main".to_owned());
    } else {
        refspecs.push("+refs/heads/*:refs/remotes/origin/*".to_owned());
        refspecs.push("+refs/tags/*:refs/tags/*".to_owned());
    }
    GitInfo {
        repo_url: url,
        git_ref: "main".to_owned(),
        sha,
        refspecs,
        depth,
        ..GitInfo::default()
    }
}

// ---- running the stage ----------------------------------------------------------

struct Run {
    result: Result<(), SourcesError>,
    lines: Vec<String>,
}

impl Run {
    fn ok(self) -> Vec<String> {
        if let Err(error) = &self.result {
            panic!("get_sources failed: {error}\n{}", self.lines.join("\n"));
        }
        self.lines
    }
}

fn run(info: &GitInfo, vars: &[(&str, &str)], project_dir: &Path) -> Run {
    let lookup = |name: &str| {
        vars.iter()
            .rev()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    };
    let (settings, warnings) =
        GitSettings::from_variables(&lookup, true, info.depth).expect("settings");
    assert!(warnings.is_empty(), "{warnings:?}");
    let env: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let job = SourcesJob {
        git_info: info,
        settings: &settings,
        project_dir,
        env: &env,
        user_agent: "gantry-runner test",
        snapshot: None,
        tls: &gantry_runner::config::TlsFiles::default(),
    };
    let mut lines = Vec::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let result = runtime.block_on(get_sources(&job, &mut |line: &str| {
        lines.push(line.to_owned())
    }));
    Run { result, lines }
}

fn short(sha: &str) -> &str {
    &sha[..8]
}

// ---- tests ----------------------------------------------------------------------

#[test]
fn clone_then_fetch_reuses_the_repository_and_clone_starts_over() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let origin = origin(&tmp.path().join("origin"), 2);
    let project = tmp.path().join("builds/acme/widget");
    let info = git_info(&origin, file_url(&origin), 0, 1);

    let lines = run(&info, &[("GIT_STRATEGY", "clone")], &project).ok();
    assert_eq!(head(&project), info.sha);
    assert!(
        lines.contains(&"Fetching changes...".to_owned()),
        "{lines:#?}"
    );
    assert!(
        lines.contains(&"Created fresh repository.".to_owned()),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Initialized empty Git repository in ")),
        "{lines:#?}"
    );
    assert!(
        lines.contains(&format!(
            "Checking out {} as detached HEAD (ref is main)...",
            short(&info.sha)
        )),
        "{lines:#?}"
    );
    assert_eq!(
        lines.last().map(String::as_str),
        Some("Skipping Git submodules setup")
    );
    assert_eq!(git(&project, &["rev-parse", "refs/pipelines/1"]), info.sha);

    // Leave traces a fetch must keep (.git) or clean (work tree).
    std::fs::write(project.join(".git/marker"), "kept by fetch").expect("write");
    std::fs::write(project.join("untracked.txt"), "x").expect("write");
    std::fs::write(project.join("ignored.log"), "x").expect("write");
    let new_sha = commit(&origin, 3);
    let info = git_info(&origin, file_url(&origin), 0, 2);
    assert_eq!(info.sha, new_sha);

    let lines = run(&info, &[("GIT_STRATEGY", "fetch")], &project).ok();
    assert_eq!(head(&project), new_sha);
    assert!(
        project.join(".git/marker").exists(),
        "fetch reuses the repository"
    );
    assert!(
        !lines.contains(&"Created fresh repository.".to_owned()),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Reinitialized existing Git repository in ")),
        "{lines:#?}"
    );
    assert!(
        lines.contains(&"Removing ignored.log".to_owned()),
        "{lines:#?}"
    );
    assert!(!project.join("untracked.txt").exists() && !project.join("ignored.log").exists());
    assert!(project.join("file3.txt").exists());

    // The default strategy with `allow_git_fetch` is fetch: still reused.
    run(&info, &[], &project).ok();
    assert!(project.join(".git/marker").exists());

    run(&info, &[("GIT_STRATEGY", "clone")], &project).ok();
    assert!(
        !project.join(".git/marker").exists(),
        "clone starts from scratch"
    );
    assert_eq!(head(&project), new_sha);
}

#[test]
fn depth_makes_a_shallow_clone_and_a_full_fetch_unshallows_it() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let origin = origin(&tmp.path().join("origin"), 5);
    let project = tmp.path().join("project");

    let info = git_info(&origin, file_url(&origin), 2, 7);
    let lines = run(&info, &[("GIT_STRATEGY", "clone")], &project).ok();
    assert!(
        lines.contains(&"Fetching changes with git depth set to 2...".to_owned()),
        "{lines:#?}"
    );
    assert_eq!(git(&project, &["rev-list", "--count", "HEAD"]), "2");
    assert!(project.join(".git/shallow").exists());

    let info = git_info(&origin, file_url(&origin), 0, 8);
    run(&info, &[("GIT_STRATEGY", "fetch")], &project).ok();
    assert_eq!(git(&project, &["rev-list", "--count", "HEAD"]), "5");
    assert!(!project.join(".git/shallow").exists());
}

#[test]
fn clean_flags_checkout_switch_and_the_none_and_empty_strategies() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let origin = origin(&tmp.path().join("origin"), 1);
    let project = tmp.path().join("project");
    let info = git_info(&origin, file_url(&origin), 0, 1);
    run(&info, &[], &project).ok();

    std::fs::write(project.join("untracked.txt"), "x").expect("write");
    std::fs::write(project.join("ignored.log"), "x").expect("write");
    run(&info, &[("GIT_CLEAN_FLAGS", "none")], &project).ok();
    assert!(project.join("untracked.txt").exists() && project.join("ignored.log").exists());
    let lines = run(&info, &[("GIT_CLEAN_FLAGS", "-ffd")], &project).ok();
    assert!(
        lines.contains(&"Removing untracked.txt".to_owned()),
        "{lines:#?}"
    );
    assert!(!project.join("untracked.txt").exists() && project.join("ignored.log").exists());

    let fresh = tmp.path().join("no-checkout");
    let lines = run(&info, &[("GIT_CHECKOUT", "false")], &fresh).ok();
    assert!(lines.contains(&"Skipping Git checkout".to_owned()));
    assert!(!fresh.join("file1.txt").exists());
    assert_eq!(git(&fresh, &["rev-parse", "refs/pipelines/1"]), info.sha);

    let lines = run(&info, &[("GIT_STRATEGY", "none")], &project).ok();
    assert_eq!(lines, ["Skipping Git repository setup"]);
    assert!(
        project.join("ignored.log").exists(),
        "none leaves the directory alone"
    );
    let lines = run(&info, &[("GIT_STRATEGY", "empty")], &project).ok();
    assert_eq!(
        lines,
        ["Skipping Git repository setup and creating an empty build directory"]
    );
    assert_eq!(std::fs::read_dir(&project).expect("list").count(), 0);
}

#[test]
fn a_missing_commit_or_repository_fails_with_the_git_command() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let origin = origin(&tmp.path().join("origin"), 1);
    let project = tmp.path().join("project");
    let mut info = git_info(&origin, file_url(&origin), 0, 1);
    info.sha = "0123456789abcdef0123456789abcdef01234567".to_owned();
    let failed = run(&info, &[], &project);
    let error = failed.result.expect_err("unknown commit");
    assert_eq!(
        error.to_string(),
        "get sources: `git checkout -f -q 0123456789abcdef0123456789abcdef01234567` failed with exit status 128"
    );

    let info = git_info(&origin, file_url(&tmp.path().join("nowhere")), 0, 1);
    let failed = run(&info, &[], &tmp.path().join("other"));
    assert!(matches!(failed.result, Err(SourcesError::Git { .. })));
    assert!(
        failed
            .lines
            .iter()
            .any(|l| l.contains("does not appear to be a git repository")),
        "{:#?}",
        failed.lines
    );
}

/// A superproject with `sub` (which itself has `inner`) as submodules, over file://.
fn superproject(tmp: &Path) -> PathBuf {
    let inner = origin(&tmp.join("inner"), 1);
    let sub = origin(&tmp.join("sub"), 3);
    git(
        &sub,
        &["submodule", "add", "-q", &file_url(&inner), "inner"],
    );
    git(&sub, &["commit", "-q", "-m", "add inner"]);
    let top = origin(&tmp.join("top"), 1);
    git(&top, &["submodule", "add", "-q", &file_url(&sub), "sub"]);
    git(&top, &["commit", "-q", "-m", "add sub"]);
    top
}

/// The job allows file:// submodules through its own GIT_CONFIG_* variables, which
/// get_sources keeps when it appends its own.
const FILE_PROTOCOL: [(&str, &str); 3] = [
    ("GIT_CONFIG_COUNT", "1"),
    ("GIT_CONFIG_KEY_0", "protocol.file.allow"),
    ("GIT_CONFIG_VALUE_0", "always"),
];

#[test]
fn submodules_normal_with_depth_and_recursive() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let top = superproject(tmp.path());
    let info = git_info(&top, file_url(&top), 0, 1);

    let project = tmp.path().join("normal");
    let mut vars = FILE_PROTOCOL.to_vec();
    vars.extend([
        ("GIT_SUBMODULE_STRATEGY", "normal"),
        ("GIT_SUBMODULE_DEPTH", "1"),
    ]);
    let lines = run(&info, &vars, &project).ok();
    assert!(
        lines.contains(&"Updating/initializing submodules with git depth set to 1...".to_owned()),
        "{lines:#?}"
    );
    assert!(
        lines.contains(&"Updated submodules".to_owned()),
        "{lines:#?}"
    );
    assert!(project.join("sub/file3.txt").exists());
    assert_eq!(
        git(
            &project.join("sub"),
            &["rev-parse", "--is-shallow-repository"]
        ),
        "true"
    );
    assert!(
        !project.join("sub/inner/file1.txt").exists(),
        "normal is not recursive"
    );

    // Dirt inside a submodule is cleaned on the next run.
    std::fs::write(project.join("sub/dirt.txt"), "x").expect("write");
    std::fs::write(project.join("sub/file1.txt"), "changed").expect("write");
    run(&info, &vars, &project).ok();
    assert!(!project.join("sub/dirt.txt").exists());
    assert_eq!(
        std::fs::read_to_string(project.join("sub/file1.txt")).expect("read"),
        "content 1\n"
    );

    let project = tmp.path().join("recursive");
    let mut vars = FILE_PROTOCOL.to_vec();
    vars.push(("GIT_SUBMODULE_STRATEGY", "recursive"));
    let lines = run(&info, &vars, &project).ok();
    assert!(
        lines.contains(&"Updating/initializing submodules recursively...".to_owned()),
        "{lines:#?}"
    );
    assert!(project.join("sub/inner/file1.txt").exists());
}

// ---- credentials ----------------------------------------------------------------

/// What the HTTP server saw.
#[derive(Default)]
struct Seen {
    authorized: usize,
    refused: usize,
}

/// Serves the repositories under `root` with `git http-backend` on loopback,
/// answering 401 to any request without `Authorization: Basic` for
/// `gitlab-ci-token:TOKEN`.
fn serve(root: PathBuf) -> (u16, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let expected = format!(
        "Basic {}",
        base64(format!("gitlab-ci-token:{TOKEN}").as_bytes())
    );
    let shared = Arc::clone(&seen);
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (root, expected, seen) = (root.clone(), expected.clone(), Arc::clone(&shared));
            thread::spawn(move || {
                let _ = handle(stream, &root, &expected, &seen);
            });
        }
    });
    (port, seen)
}

fn handle(
    stream: TcpStream,
    root: &Path,
    expected: &str,
    seen: &Mutex<Seen>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if let Some(length) = header("content-length").and_then(|l| l.parse::<usize>().ok()) {
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
    } else if header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    let mut stream = stream;
    if header("authorization").as_deref() != Some(expected) {
        seen.lock().map(|mut s| s.refused += 1).ok();
        stream.write_all(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"gantry\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
        return Ok(());
    }
    seen.lock().map(|mut s| s.authorized += 1).ok();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut backend = Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", header("content-type").unwrap_or_default())
        .env("CONTENT_LENGTH", body.len().to_string())
        .env(
            "HTTP_CONTENT_ENCODING",
            header("content-encoding").unwrap_or_default(),
        )
        .env("GIT_PROTOCOL", header("git-protocol").unwrap_or_default())
        .env("REMOTE_USER", "gitlab-ci-token")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    if let Some(mut stdin) = backend.stdin.take() {
        stdin.write_all(&body)?;
    }
    let output = backend.wait_with_output()?;
    let raw = output.stdout;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4))
        .or_else(|| {
            raw.windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, i + 2))
        })
        .unwrap_or((raw.len(), raw.len()));
    let head = String::from_utf8_lossy(&raw[..split.0]).into_owned();
    let content = &raw[split.1..];
    let mut status = "200 OK".to_owned();
    let mut response = Vec::new();
    for line in head.lines() {
        match line.split_once(':') {
            Some((name, value)) if name.eq_ignore_ascii_case("status") => {
                status = value.trim().to_owned()
            }
            Some(_) => response.push(line.to_owned()),
            None => {}
        }
    }
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for line in response {
        out.push_str(&line);
        out.push_str("\r\n");
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        content.len()
    ));
    stream.write_all(out.as_bytes())?;
    stream.write_all(content)?;
    stream.flush()
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn assert_no_secret(lines: &[String], what: &str) {
    let encoded = base64(format!("gitlab-ci-token:{TOKEN}").as_bytes());
    for line in lines {
        assert!(
            !line.contains(TOKEN) && !line.contains(&encoded),
            "{what}: secret in {line:?}"
        );
    }
}

#[test]
fn the_job_token_authenticates_over_http_but_never_shows_or_persists() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let served = tmp.path().join("served");
    let origin = origin(&served.join("acme/widget.git"), 3);
    git(&origin, &["config", "http.receivepack", "false"]);
    let (port, seen) = serve(served.clone());
    let url = format!("http://gitlab-ci-token:{TOKEN}@127.0.0.1:{port}/acme/widget.git");
    let project = tmp.path().join("builds/acme/widget");

    let info = git_info(&origin, url.clone(), 2, 42);
    // GIT_CURL_VERBOSE with redaction off makes git print every request header,
    // Authorization included: the masker must catch it.
    let lines = run(
        &info,
        &[
            ("GIT_STRATEGY", "clone"),
            ("GIT_CURL_VERBOSE", "1"),
            ("GIT_TRACE_REDACT", "0"),
        ],
        &project,
    )
    .ok();
    assert_eq!(head(&project), info.sha);
    assert_eq!(git(&project, &["rev-list", "--count", "HEAD"]), "2");
    assert_no_secret(&lines, "verbose clone output");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("Authorization: Basic [MASKED]")),
        "the header was printed, masked: {lines:#?}"
    );
    let (authorized, refused) = seen
        .lock()
        .map(|s| (s.authorized, s.refused))
        .expect("lock");
    assert!(
        authorized > 0 && refused == 0,
        "every request carried the token ({authorized} ok, {refused} refused)"
    );

    let config = std::fs::read_to_string(project.join(".git/config")).expect("read config");
    assert!(
        !config.contains(TOKEN),
        "token persisted in .git/config:\n{config}"
    );
    assert_eq!(
        git(&project, &["remote", "get-url", "origin"]),
        format!("http://127.0.0.1:{port}/acme/widget.git")
    );

    // A fetch into the same directory authenticates again from the payload URL.
    commit(&origin, 4);
    let info = git_info(&origin, url, 2, 43);
    let lines = run(&info, &[("GIT_STRATEGY", "fetch")], &project).ok();
    assert_eq!(head(&project), info.sha);
    assert_no_secret(&lines, "fetch output");

    // A wrong token fails cleanly (no prompt, no hang) without printing either token.
    let wrong = format!("http://gitlab-ci-token:{TOKEN}-wrong@127.0.0.1:{port}/acme/widget.git");
    let info = git_info(&origin, wrong, 0, 44);
    let failed = run(
        &info,
        &[("GIT_STRATEGY", "clone")],
        &tmp.path().join("denied"),
    );
    let error = failed.result.expect_err("401");
    assert_no_secret(&failed.lines, "denied output");
    assert_no_secret(&[error.to_string()], "error message");
    // git asks for a password after the 401 and, with prompts and helpers off, gives up.
    assert!(
        failed.lines.iter().any(|l| l.starts_with("fatal: ")),
        "{:#?}",
        failed.lines
    );
}

#[test]
fn a_token_in_a_file_url_is_stripped_too() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let origin = origin(&tmp.path().join("origin"), 1);
    let url = format!("file://gitlab-ci-token:{TOKEN}@{}", origin.display());
    let project = tmp.path().join("project");
    let info = git_info(&origin, url, 0, 1);
    let lines = run(
        &info,
        &[("GIT_STRATEGY", "clone"), ("GIT_TRACE", "1")],
        &project,
    )
    .ok();
    assert_eq!(head(&project), info.sha);
    assert_no_secret(&lines, "traced output");
    let config = std::fs::read_to_string(project.join(".git/config")).expect("read config");
    assert!(!config.contains(TOKEN));
}

/// Processes whose command line mentions `needle` (zombies have none).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("procfs").flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(cmdline);
            }
        }
    }
    found
}

#[test]
fn dropping_the_stage_kills_git_and_its_helpers() {
    // A server that accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("addr").port();
    thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let tmp = tempfile::tempdir().expect("temp dir");
    let origin = origin(&tmp.path().join("origin"), 1);
    let url = format!("http://gitlab-ci-token:{TOKEN}@127.0.0.1:{port}/stalled.git");
    let info = git_info(&origin, url, 0, 1);
    let lookup = |_: &str| None;
    let (settings, _) = GitSettings::from_variables(&lookup, false, 0).expect("settings");
    let project = tmp.path().join("project");
    let job = SourcesJob {
        git_info: &info,
        settings: &settings,
        project_dir: &project,
        env: &[],
        user_agent: "gantry-runner test",
        snapshot: None,
        tls: &gantry_runner::config::TlsFiles::default(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let needle = format!("127.0.0.1:{port}");
    let outcome = runtime.block_on(async {
        let mut lines = Vec::new();
        let mut collect = |line: &str| lines.push(line.to_owned());
        let stage = get_sources(&job, &mut collect);
        tokio::time::timeout(std::time::Duration::from_secs(2), stage).await
    });
    assert!(
        outcome.is_err(),
        "the fetch should still be waiting on the server"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = processes_mentioning(&needle);
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running: {left:#?}"
        );
        thread::sleep(std::time::Duration::from_millis(50));
    }
}
