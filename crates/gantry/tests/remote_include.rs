//! `include:remote` and `include:project` end to end: the real binary (`gantry lint`, and
//! `gantry run`, whose coordinator compiles the configuration again in a blocking task)
//! fetching from a real HTTP server on a loopback port, and reading the offline include
//! cache `.gantry/includes`. The user-visible messages are snapshotted (the port replaced
//! by `PORT`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// An HTTP/1.1 server on a loopback port: each path answers `(status, body)`, others 404.
/// Records the paths asked for; stops when dropped.
struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(routes: BTreeMap<&'static str, (u16, Vec<u8>)>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
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
                seen2.lock().unwrap().push(path.clone());
                let (status, body) = routes
                    .get(path.as_str())
                    .cloned()
                    .unwrap_or((404, b"not found".to_vec()));
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes());
                // A client that stops reading (the size limit) closes early: ignore.
                let _ = conn.write_all(&body);
            }
        });
        Server {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

use gantry_test_support::git;

/// A checkout (origin `git@gitlab.example.com:acme/widget.git`) with `files` committed.
fn checkout(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["config", "user.email", "tester@example.com"]);
    git(dir.path(), &["config", "user.name", "Tester"]);
    git(
        dir.path(),
        &[
            "remote",
            "add",
            "origin",
            "git@gitlab.example.com:acme/widget.git",
        ],
    );
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-qm", "initial"]);
    dir
}

fn lint(dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
        .current_dir(dir)
        .args(["lint", "--format", "json"])
        .env_remove("GANTRY_REMOTE_INCLUDE_MIRROR")
        .output()
        .unwrap()
}

/// `gantry run` in `dir` on the shell, with its cache under `home` and
/// `GANTRY_REMOTE_INCLUDE_MIRROR` set to `mirror` (unset for `None`).
fn gantry_run(dir: &Path, home: &Path, mirror: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gantry"));
    cmd.current_dir(dir)
        .args(["run", "--executor", "shell", "--no-color"])
        .env("HOME", home)
        .env("GANTRY_CACHE_DIR", home.join("cache"))
        .env_remove("XDG_CACHE_HOME")
        .stdin(Stdio::null());
    match mirror {
        Some(m) => cmd.env("GANTRY_REMOTE_INCLUDE_MIRROR", m),
        None => cmd.env_remove("GANTRY_REMOTE_INCLUDE_MIRROR"),
    };
    cmd.output().unwrap()
}

fn report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn job_names(j: &serde_json::Value) -> Vec<String> {
    j["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The errors of a lint report, the server's port replaced by `PORT`.
fn errors(j: &serde_json::Value, server: &Server) -> Vec<String> {
    let port = server.addr.port().to_string();
    j["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap().replace(&port, "PORT"))
        .collect()
}

fn routes() -> BTreeMap<&'static str, (u16, Vec<u8>)> {
    let mut r = BTreeMap::new();
    r.insert(
        "/ci/jobs.yml",
        (200, b"remote-job:\n  script: echo remote\n".to_vec()),
    );
    r.insert(
        "/ci/nested.yml",
        (200, b"include: /ci/local.yml\nx:\n  script: x\n".to_vec()),
    );
    r.insert("/ci/gone.yml", (404, b"gone".to_vec()));
    r.insert("/ci/broken.yml", (500, b"oops".to_vec()));
    r.insert("/ci/empty.yml", (200, Vec::new()));
    // One byte over the 2 MiB limit: a comment line, then nothing else.
    let mut big = b"#".to_vec();
    big.resize(2 * 1024 * 1024 + 1, b'x');
    r.insert("/ci/big.yml", (200, big));
    r
}

#[test]
fn a_remote_include_is_fetched_and_merged() {
    let server = Server::start(routes());
    let ci = format!(
        "include:\n  - remote: {}\n  - {}\nown:\n  script: x\n",
        server.url("/ci/jobs.yml"),
        server.url("/ci/jobs.yml")
    );
    let repo = checkout(&[(".gitlab-ci.yml", &ci)]);
    let out = lint(repo.path());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(job_names(&report(&out)), ["remote-job", "own"]);
    assert_eq!(server.seen(), ["/ci/jobs.yml", "/ci/jobs.yml"]);
}

#[test]
fn remote_failures_are_gitlab_messages() {
    let server = Server::start(routes());
    let mut messages = Vec::new();
    for path in [
        "/ci/gone.yml",
        "/ci/broken.yml",
        "/ci/empty.yml",
        "/ci/big.yml",
        "/ci/nested.yml",
    ] {
        let ci = format!(
            "include:\n  - remote: {}\nown:\n  script: x\n",
            server.url(path)
        );
        let repo = checkout(&[
            (".gitlab-ci.yml", &ci),
            ("ci/local.yml", "l:\n  script: l\n"),
        ]);
        let out = lint(repo.path());
        assert_eq!(
            out.status.code(),
            Some(1),
            "{path}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        messages.extend(errors(&report(&out), &server));
    }
    // Nothing listens on port 9 of the loopback address: refused.
    let repo = checkout(&[(
        ".gitlab-ci.yml",
        "include: http://127.0.0.1:9/ci.yml\nown:\n  script: x\n",
    )]);
    messages.extend(errors(&report(&lint(repo.path())), &server));
    insta::assert_yaml_snapshot!(messages);
}

#[test]
fn the_offline_cache_serves_remote_and_project_includes() {
    let server = Server::start(routes());
    let url = server.url("/cached/jobs.yml");
    let cached_remote = format!(
        ".gantry/includes/127.0.0.1:{}/cached/jobs.yml",
        server.addr.port()
    );
    let ci = format!(
        "include:\n  - remote: {url}\n  - project: Group/Templates\n    ref: v1\n    file: [/build.yml]\n  - project: acme/widget\n    file: own.yml\nown:\n  script: x\n"
    );
    let repo = checkout(&[
        (".gitlab-ci.yml", &ci),
        (&cached_remote, "from-cache:\n  script: c\n"),
        // Nested include:local in a project's file: that project, same ref.
        (
            ".gantry/includes/gitlab.example.com/Group/Templates/v1/build.yml",
            "include: /inner.yml\nbuild:\n  script: b\n",
        ),
        (
            ".gantry/includes/gitlab.example.com/Group/Templates/v1/inner.yml",
            "inner:\n  script: i\n",
        ),
        // include:project of the checkout's own project: its default branch.
        ("own.yml", "own-file:\n  script: o\n"),
        ("inner.yml", "wrong:\n  script: w\n"),
    ]);
    let out = lint(repo.path());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        job_names(&report(&out)),
        ["from-cache", "inner", "build", "own-file", "own"]
    );
    assert!(
        server.seen().is_empty(),
        "a cached URL is not fetched: {:?}",
        server.seen()
    );

    let ci =
        "include:\n  - {project: group/templates, ref: v2, file: build.yml}\nown:\n  script: x\n";
    let repo2 = checkout(&[
        (".gitlab-ci.yml", ci),
        (
            ".gantry/includes/gitlab.example.com/group/templates/v1/build.yml",
            "b:\n  script: b\n",
        ),
    ]);
    let ci = "include:\n  - {project: group/other, file: build.yml}\nown:\n  script: x\n";
    let repo3 = checkout(&[(".gitlab-ci.yml", ci)]);
    let messages: Vec<String> = [repo2, repo3]
        .iter()
        .flat_map(|r| errors(&report(&lint(r.path())), &server))
        .collect();
    insta::assert_yaml_snapshot!(messages);
}

/// Every include `gantry lint` cannot read is listed (GitLab stops at the first), each
/// with a hint naming what would resolve it: the path in the offline include cache, the
/// `GANTRY_REMOTE_INCLUDE_MIRROR` setting, or — with a mirror set — the mirror asked.
#[test]
fn lint_lists_every_unreadable_include_with_the_cache_path_or_mirror_that_resolves_it() {
    let ci = "include:\n  - remote: http://127.0.0.1:9/ci/one.yml\n  - remote: http://127.0.0.1:9/ci/two.yml\n  - {project: group/templates, ref: v1, file: build.yml}\nown:\n  script: x\n";
    let repo = checkout(&[(".gitlab-ci.yml", ci)]);
    let out = lint(repo.path());
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report = report(&out);
    let found: Vec<(String, String)> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["message"].as_str().unwrap().to_owned(),
                e["hint"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(found.len(), 3, "one error per include: {found:#?}");
    let cache = repo.path().canonicalize().unwrap().join(".gantry/includes");
    for (i, file) in ["one", "two"].iter().enumerate() {
        let (message, hint) = &found[i];
        assert!(
            message.contains(&format!("http://127.0.0.1:9/ci/{file}.yml")),
            "{message}"
        );
        let path = cache.join(format!("127.0.0.1:9/ci/{file}.yml"));
        assert!(
            hint.contains(&format!(
                "save it as {} (the offline include cache)",
                path.display()
            )),
            "{hint}"
        );
        assert!(
            hint.contains(
                "GANTRY_REMOTE_INCLUDE_MIRROR='http://127.0.0.1:9/=http://mirror.example/'"
            ),
            "{hint}"
        );
    }
    let (message, hint) = &found[2];
    assert!(message.contains("group/templates"), "{message}");
    let path = cache.join("gitlab.example.com/group/templates/v1/build.yml");
    assert!(
        hint.contains(&format!("save it as {}", path.display())),
        "{hint}"
    );

    // With a mirror set, the hint names the mirror that was asked.
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .current_dir(repo.path())
        .args(["lint", "--format", "json"])
        .env(
            "GANTRY_REMOTE_INCLUDE_MIRROR",
            "http://127.0.0.1:9/=http://127.0.0.1:9/mirror/",
        )
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hint = report["errors"][0]["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("it was fetched from http://127.0.0.1:9/mirror/ci/one.yml, the mirror GANTRY_REMOTE_INCLUDE_MIRROR names for http://127.0.0.1:9/"),
        "{hint}"
    );
}

#[test]
fn gantry_run_fetches_remote_includes_in_its_coordinator_too() {
    let server = Server::start(routes());
    let ci = format!(
        "include: {}\nown:\n  script: echo own\n",
        server.url("/ci/jobs.yml")
    );
    let repo = checkout(&[(".gitlab-ci.yml", &ci)]);
    let home = tempfile::tempdir().unwrap();
    let out = gantry_run(repo.path(), home.path(), None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("remote-job") && stdout.contains("echo remote"),
        "{stdout}"
    );
    // Fetched once: the configuration check and the coordinator compile the same text.
    assert_eq!(server.seen(), ["/ci/jobs.yml"]);

    // A mirror named by GANTRY_REMOTE_INCLUDE_MIRROR; the message names the URL as written.
    let ci = "include: https://templates.invalid/ci/gone.yml\nown:\n  script: echo own\n";
    let repo = checkout(&[(".gitlab-ci.yml", ci)]);
    let mirror = format!("https://templates.invalid/={}/", server.url(""));
    let out = gantry_run(repo.path(), home.path(), Some(&mirror));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("Remote file `https://templates.invalid/ci/gone.yml` could not be fetched because of HTTP code `404` error!"),
        "{stderr}"
    );
}

#[test]
fn templates_are_fetched_like_remote_includes_through_a_mirror() {
    let mut r = routes();
    r.insert(
        "/templates/Jobs/Build.gitlab-ci.yml",
        (
            200,
            b"template-job:\n  script: echo from template\n".to_vec(),
        ),
    );
    let server = Server::start(r);
    let home = tempfile::tempdir().unwrap();
    let mirror = format!(
        "https://gitlab.com/gitlab-org/gitlab/-/raw/HEAD/lib/gitlab/ci/templates/={}",
        server.url("/templates/")
    );
    let run = |ci: &str| {
        let repo = checkout(&[(".gitlab-ci.yml", ci)]);
        let out = gantry_run(repo.path(), home.path(), Some(&mirror));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) =
        run("include:\n  - template: Jobs/Build.gitlab-ci.yml\nown:\n  script: echo own\n");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("from template"), "{stdout}");
    let (code, _, stderr) = run("include:\n  - template: Jobs/Nope.gitlab-ci.yml\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("Included file `Jobs/Nope.gitlab-ci.yml` is empty or does not exist!"),
        "{stderr}"
    );
}

#[test]
fn gantry_run_includes_a_component_of_its_own_project_at_the_run_s_commit() {
    let repo = checkout(&[
        (
            ".gitlab-ci.yml",
            "include:\n  - component: $CI_SERVER_FQDN/$CI_PROJECT_PATH/greet@$CI_COMMIT_SHA\n    inputs:\n      greeting: hello from an input\n",
        ),
        (
            "templates/greet/template.yml",
            "spec:\n  component: [name, sha, reference]\n  inputs:\n    greeting:\n---\ncomponent-job:\n  script:\n    - echo \"$[[ inputs.greeting ]]\"\n    - echo \"component $[[ component.name ]] at $[[ component.sha ]] ($[[ component.reference ]])\"\n    - echo \"commit=$CI_COMMIT_SHA\"\n",
        ),
    ]);
    // (The origin remote makes the project gitlab.example.com's acme/widget.)
    let home = tempfile::tempdir().unwrap();
    let out = gantry_run(repo.path(), home.path(), None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("hello from an input"), "{stdout}");
    // `$[[ component.* ]]`: the reference as written (the run's commit) and the commit it
    // names, read from the run's snapshot repository.
    let sha = stdout
        .lines()
        .find_map(|l| {
            l.split_once("| commit=")
                .map(|(_, sha)| sha.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no commit line in {stdout}"));
    assert_eq!(sha.len(), 40, "{sha}");
    assert!(
        stdout.contains(&format!("component greet at {sha} ({sha})")),
        "{stdout}"
    );
}
