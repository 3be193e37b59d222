//! `gantry server`, `gantry project create` and `gantry pipeline create` end to end: the
//! real binary on an ephemeral loopback port, a real git repository, the messages a
//! user sees on first start (snapshotted), exit codes, SIGTERM, and a restart on the
//! same data directory.

#![allow(clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Vec<String>,
    url: String,
}

impl Server {
    fn start(data_dir: &Path) -> Self {
        Self::start_with(data_dir, &[])
    }

    fn start_with(data_dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_with_args(data_dir, env, &[])
    }

    fn start_with_args(data_dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gantry"));
        command
            .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(args)
            .envs(env.iter().copied());
        Self::spawn(command)
    }

    /// The server started by a shell whose umask is `umask` (what it inherits).
    fn start_under_umask(data_dir: &Path, umask: &str) -> Self {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_gantry"))
            .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir);
        Self::spawn(command)
    }

    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gantry server starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Self {
            child,
            lines,
            stderr: Vec::new(),
            url: String::new(),
        };
        let line = server.wait_for("gantry server: listening on ");
        let url = line
            .trim_start_matches("gantry server: listening on ")
            .split_whitespace()
            .next()
            .expect("url")
            .to_owned();
        server.url = url;
        // The first-start text follows the listening line; give it a moment to arrive.
        server.drain(Duration::from_secs(1));
        server
    }

    fn wait_for(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    self.stderr.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        panic!(
            "no `{prefix}` line from the server; it said:\n{}",
            self.stderr.join("\n")
        );
    }

    fn drain(&mut self, wait: Duration) {
        while let Ok(line) = self.lines.recv_timeout(wait) {
            self.stderr.push(line);
        }
    }

    fn token(&self, prefix: &str) -> Option<String> {
        self.stderr.iter().find_map(|line| {
            let start = line.find(prefix)?;
            Some(
                line[start..]
                    .split(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_')
                    .next()?
                    .to_owned(),
            )
        })
    }

    /// SIGTERM, then wait for a clean exit.
    fn stop(mut self) -> Vec<String> {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(
                    status.success(),
                    "gantry server exits 0 on SIGTERM: {status}"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "gantry server did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.drain(Duration::from_millis(200));
        std::mem::take(&mut self.stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gantry(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gantry"));
    command
        .args(args)
        .env_remove("GANTRY_URL")
        .env_remove("GANTRY_TOKEN");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("gantry runs")
}

fn repo() -> tempfile::TempDir {
    repo_with("build:\n  script: [echo $GREETING]\n")
}

/// A git repository whose `.gitlab-ci.yml` is `ci`, committed on `main`.
fn repo_with(ci: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .current_dir(dir.path())
            .args(args)
            .status()
            .expect("git");
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["config", "user.email", "dev@example.com"]);
    git(&["config", "user.name", "Dev"]);
    std::fs::write(dir.path().join(".gitlab-ci.yml"), ci).expect("write");
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "init"]);
    dir
}

/// `gantry project create NAME --repo REPO`, which must succeed.
fn create_project(env: &[(&str, &str)], name: &str, repo: &Path) {
    let repo = repo.display().to_string();
    let created = gantry(&["project", "create", name, "--repo", &repo], env);
    assert_eq!(created.status.code(), Some(0), "{}", text(&created.stderr));
}

/// `gantry pipeline create --project NAME --ref main`, which must succeed: its output.
fn create_pipeline(env: &[(&str, &str)], name: &str) -> Output {
    let pipeline = gantry(
        &["pipeline", "create", "--project", name, "--ref", "main"],
        env,
    );
    assert_eq!(
        pipeline.status.code(),
        Some(0),
        "{}",
        text(&pipeline.stderr)
    );
    pipeline
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `gantry pipeline show`: the jobs of a pipeline, and why each waiting one waits —
/// here a job whose tags the only runner (registered with `docker`) does not all have,
/// in GitLab's words, and one no runner of the project runs (untagged jobs).
#[test]
fn pipeline_show_says_why_each_job_waits() {
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start(&data.path().join("data"));
    let admin = server.token("glpat-").expect("admin token");
    let registration = server.token("GR1348941").expect("registration token");
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let repo = repo_with(
        "stages: [build, test]\n\
         compile:\n  stage: build\n  tags: [docker, linux]\n  script: [make]\n\
         lint:\n  stage: build\n  script: [make lint]\n\
         unit:\n  stage: test\n  script: [make test]\n",
    );
    create_project(&env, "demo", repo.path());
    let config = data.path().join("config.toml");
    let registered = gantry(
        &[
            "runner",
            "register",
            "--url",
            &server.url,
            "--token",
            &registration,
            "--tag-list",
            "docker",
            "--config",
            &config.display().to_string(),
        ],
        &[],
    );
    assert_eq!(
        registered.status.code(),
        Some(0),
        "{}",
        text(&registered.stderr)
    );
    let created = create_pipeline(&env, "demo");
    let pipeline: serde_json::Value =
        serde_json::from_slice(&created.stdout).expect("the pipeline as JSON");
    let id = pipeline["id"].to_string();
    let sha = pipeline["sha"].as_str().expect("sha");
    let shown = gantry(&["pipeline", "show", "--project", "demo", &id], &env);
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    insta::assert_snapshot!(
        "pipeline_show",
        text(&shown.stdout).replace(&sha[..8], "[SHA]")
    );
    let missing = gantry(&["pipeline", "show", "--project", "demo", "999"], &env);
    assert_eq!(missing.status.code(), Some(3), "{}", text(&missing.stderr));
}

#[test]
fn serve_create_a_project_and_a_pipeline_then_restart() {
    let data = tempfile::tempdir().expect("dir");
    let data_dir = data.path().join("data");
    let server = Server::start(&data_dir);
    let admin = server
        .token("glpat-")
        .expect("the first start prints an admin token");
    let registration = server
        .token("GR1348941")
        .expect("the first start prints a registration token");
    let url = server.url.clone();
    let canonical = data_dir.canonicalize().expect("data dir");
    let shown = server
        .stderr
        .join("\n")
        .replace(&admin, "[ADMIN TOKEN]")
        .replace(&registration, "[REGISTRATION TOKEN]")
        .replace(&url, "[URL]")
        .replace(&url.trim_start_matches("http://").to_owned(), "[ADDR]")
        .replace(&canonical.display().to_string(), "[DATA]")
        .trim_end()
        .to_owned();
    insta::assert_snapshot!("first_start", shown);

    let repo = repo();
    let env = [
        ("GANTRY_URL", url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let created = gantry(
        &[
            "project",
            "create",
            "demo",
            "--repo",
            &repo.path().display().to_string(),
        ],
        &env,
    );
    assert_eq!(created.status.code(), Some(0), "{}", text(&created.stderr));
    let project: serde_json::Value =
        serde_json::from_slice(&created.stdout).expect("project JSON on stdout");
    assert_eq!(project["name"], "demo");
    assert_eq!(
        project["http_url_to_repo"],
        format!("{url}/gantry/demo.git")
    );

    let pipeline = gantry(
        &[
            "pipeline",
            "create",
            "--project",
            "demo",
            "--ref",
            "main",
            "--var",
            "GREETING=hi",
        ],
        &env,
    );
    assert_eq!(
        pipeline.status.code(),
        Some(0),
        "{}",
        text(&pipeline.stderr)
    );
    let body: serde_json::Value =
        serde_json::from_slice(&pipeline.stdout).expect("pipeline JSON on stdout");
    assert_eq!(body["status"], "pending");
    assert_eq!(body["ref"], "main");
    assert!(
        text(&pipeline.stderr).starts_with("created pipeline "),
        "{}",
        text(&pipeline.stderr)
    );

    // Flags win over the environment; mistakes get precise messages and exit codes.
    let flags = gantry(
        &[
            "pipeline",
            "create",
            "--project",
            "demo",
            "--ref",
            "main",
            "--server",
            &url,
            "--token",
            &admin,
        ],
        &[],
    );
    assert_eq!(flags.status.code(), Some(0), "{}", text(&flags.stderr));
    let no_token = gantry(
        &[
            "pipeline",
            "create",
            "--project",
            "demo",
            "--ref",
            "main",
            "--server",
            &url,
        ],
        &[],
    );
    assert_eq!(no_token.status.code(), Some(2));
    assert!(
        text(&no_token.stderr).contains("GANTRY_TOKEN"),
        "{}",
        text(&no_token.stderr)
    );
    let wrong = gantry(
        &["pipeline", "create", "--project", "demo", "--ref", "main"],
        &[("GANTRY_URL", &url), ("GANTRY_TOKEN", "glpat-wrong")],
    );
    assert_eq!(wrong.status.code(), Some(3));
    assert!(
        text(&wrong.stderr).contains("401"),
        "{}",
        text(&wrong.stderr)
    );
    let no_ref = gantry(
        &["pipeline", "create", "--project", "demo", "--ref", "nope"],
        &env,
    );
    assert_eq!(no_ref.status.code(), Some(3));
    assert!(
        text(&no_ref.stderr).contains("400"),
        "{}",
        text(&no_ref.stderr)
    );
    let no_project = gantry(
        &[
            "project",
            "create",
            "ghost",
            "--repo",
            "/no/such/repository",
        ],
        &env,
    );
    assert_eq!(
        no_project.status.code(),
        Some(2),
        "{}",
        text(&no_project.stderr)
    );

    let said = server.stop();
    assert!(
        said.iter().any(|l| l == "gantry server: stopped"),
        "{said:?}"
    );

    // Same data directory: no new tokens, the old one still works, the data is there.
    let server = Server::start(&data_dir);
    assert_eq!(
        server.token("glpat-"),
        None,
        "tokens are shown on the first start only"
    );
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let listed = gantry(&["project", "list"], &env);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let projects: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(projects[0]["name"], "demo");
    // Deleting asks for --yes first.
    let unsure = gantry(&["project", "delete", "demo"], &env);
    assert_eq!(unsure.status.code(), Some(2), "{}", text(&unsure.stderr));
    assert!(
        text(&unsure.stderr).contains("--yes"),
        "{}",
        text(&unsure.stderr)
    );
    let deleted = gantry(&["project", "delete", "demo", "--yes"], &env);
    assert_eq!(deleted.status.code(), Some(0), "{}", text(&deleted.stderr));
    let listed = gantry(&["project", "list"], &env);
    let projects: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(projects, serde_json::json!([]));
    server.stop();
}

/// `gantry server` with `name=value` in its environment stops at start with exit 2, naming
/// the variable.
fn refuses_to_start(data_dir: &Path, name: &str, value: &str) {
    let bad = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env(name, value)
        .stdin(Stdio::null())
        .output()
        .expect("gantry server");
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert!(text(&bad.stderr).contains(name), "{}", text(&bad.stderr));
}

/// Creates a project whose pipeline includes GitLab's `Jobs/Build.gitlab-ci.yml` template
/// on `server` and returns the JSON of the pipeline's jobs.
fn template_pipeline_jobs(server: &Server) -> String {
    let admin = server.token("glpat-").expect("admin token");
    let repo = repo();
    std::fs::write(
        repo.path().join(".gitlab-ci.yml"),
        "include:\n  - template: Jobs/Build.gitlab-ci.yml\nbuild:\n  script: [echo own]\n",
    )
    .expect("write");
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .current_dir(repo.path())
            .args(args)
            .status()
            .expect("git")
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["commit", "-qam", "template"]);
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "tpl", repo.path());
    let pipeline = create_pipeline(&env, "tpl");
    let body: serde_json::Value = serde_json::from_slice(&pipeline.stdout).expect("JSON");
    assert_eq!(body["status"], "pending", "{body}");
    // The template's job is in the pipeline (GET …/pipelines/:id/jobs over loopback).
    {
        use std::io::{Read, Write};
        let project = body["project_id"].as_i64().expect("project id");
        let id = body["id"].as_i64().expect("id");
        let addr = server.url.trim_start_matches("http://").to_owned();
        let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
        write!(
            conn,
            "GET /api/v4/projects/{project}/pipelines/{id}/jobs HTTP/1.1\r\nHost: {addr}\r\nPRIVATE-TOKEN: {admin}\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut answer = String::new();
        conn.read_to_string(&mut answer).expect("answer");
        answer
    }
}

#[test]
fn the_server_reads_templates_from_an_offline_include_cache() {
    let data = tempfile::tempdir().expect("dir");
    let cache = data.path().join("includes");
    let template =
        cache.join("gitlab.com/gitlab-org/gitlab/-/raw/HEAD/lib/gitlab/ci/templates/Jobs");
    std::fs::create_dir_all(&template).expect("mkdir");
    std::fs::write(
        template.join("Build.gitlab-ci.yml"),
        "from-template:\n  script: [echo cached]\n",
    )
    .expect("write");
    let server = Server::start_with(
        &data.path().join("data"),
        &[("GANTRY_INCLUDE_CACHE", cache.to_str().expect("utf-8"))],
    );
    let listed = template_pipeline_jobs(&server);
    assert!(listed.contains("\"from-template\""), "{listed}");
    assert!(listed.contains("\"build\""), "{listed}");
    server.stop();

    let missing = data.path().join("missing");
    refuses_to_start(
        &data.path().join("data"),
        "GANTRY_INCLUDE_CACHE",
        missing.to_str().expect("utf-8"),
    );
}

#[test]
fn the_server_reads_templates_through_a_remote_include_mirror() {
    // A mirror of GitLab's templates on loopback: every path answers one template.
    let mirror = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mirror_url = format!("http://{}/templates/", mirror.local_addr().expect("addr"));
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut conn in mirror.incoming().map_while(Result::ok) {
            let mut buf = [0u8; 2048];
            let _ = conn.read(&mut buf);
            let body = "from-template:\n  script: [echo template]\n";
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start_with(
        &data.path().join("data"),
        &[(
            "GANTRY_REMOTE_INCLUDE_MIRROR",
            &format!(
                "https://gitlab.com/gitlab-org/gitlab/-/raw/HEAD/lib/gitlab/ci/templates/={mirror_url}"
            ),
        )],
    );
    let listed = template_pipeline_jobs(&server);
    assert!(listed.contains("\"from-template\""), "{listed}");
    assert!(listed.contains("\"build\""), "{listed}");
    server.stop();

    // A mistake in the mirror list stops the server before it serves.
    refuses_to_start(
        &data.path().join("data"),
        "GANTRY_REMOTE_INCLUDE_MIRROR",
        "no-equals-sign",
    );
}

#[test]
fn variables_are_imported_from_a_run_variables_file_listed_and_deleted() {
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start(&data.path().join("data"));
    let admin = server.token("glpat-").expect("admin token");
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let repo = repo();
    create_project(&env, "demo", repo.path());

    // The file `gantry run --variables-file` reads.
    let file = data.path().join("vars.yml");
    std::fs::write(
        &file,
        "GREETING: hello\nTOKEN: {value: s3cr3t-t0ken, masked: true, protected: true}\nURL:\n  - {value: a}\n  - {value: p, environment_scope: production}\n",
    )
    .expect("write");
    let file = file.display().to_string();
    let import = |env: &[(&str, &str)]| {
        gantry(
            &["variable", "import", "--project", "demo", file.as_str()],
            env,
        )
    };
    let first = import(&env);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert!(
        text(&first.stderr).contains("4 variable(s) created, 0 replaced"),
        "{}",
        text(&first.stderr)
    );
    std::fs::write(&file, "GREETING: bonjour\n").expect("write");
    let second = import(&env);
    assert!(
        text(&second.stderr).contains("0 variable(s) created, 1 replaced"),
        "{}",
        text(&second.stderr)
    );

    let listed = gantry(&["variable", "list", "--project", "demo"], &env);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let vars: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    let rows: Vec<(String, String, String, bool)> = vars
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| {
            (
                v["key"].as_str().unwrap_or_default().to_owned(),
                v["value"].as_str().unwrap_or_default().to_owned(),
                v["environment_scope"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                v["masked"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    let row = |k: &str, v: &str, s: &str, m: bool| (k.to_owned(), v.to_owned(), s.to_owned(), m);
    assert_eq!(
        rows,
        [
            row("GREETING", "bonjour", "*", false),
            row("TOKEN", "s3cr3t-t0ken", "*", true),
            row("URL", "a", "*", false),
            row("URL", "p", "production", false),
        ]
    );

    // A key with two scopes needs --scope; then it goes.
    let ambiguous = gantry(&["variable", "delete", "--project", "demo", "URL"], &env);
    assert_eq!(ambiguous.status.code(), Some(3));
    assert!(
        text(&ambiguous.stderr).contains("filter[environment_scope]"),
        "{}",
        text(&ambiguous.stderr)
    );
    let deleted = gantry(
        &[
            "variable",
            "delete",
            "--project",
            "demo",
            "URL",
            "--scope",
            "production",
        ],
        &env,
    );
    assert_eq!(deleted.status.code(), Some(0), "{}", text(&deleted.stderr));
    let listed = gantry(&["variable", "list", "--project", "demo"], &env);
    let vars: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(vars.as_array().map(Vec::len), Some(3));

    // A hidden variable: created hidden, listed without its value, imported again as it
    // is; the file cannot unhide it.
    std::fs::write(
        &file,
        "DEPLOY: {value: hidden-value-1, masked: true, hidden: true}\n",
    )
    .expect("write");
    let hidden = import(&env);
    assert_eq!(hidden.status.code(), Some(0), "{}", text(&hidden.stderr));
    let again = import(&env);
    assert!(
        text(&again.stderr).contains("0 variable(s) created, 1 replaced"),
        "{}",
        text(&again.stderr)
    );
    let listed = gantry(&["variable", "list", "--project", "demo"], &env);
    let vars: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    let deploy = vars
        .as_array()
        .and_then(|all| all.iter().find(|v| v["key"] == "DEPLOY"))
        .expect("DEPLOY listed");
    assert_eq!(
        (&deploy["value"], &deploy["hidden"]),
        (&serde_json::Value::Null, &serde_json::json!(true))
    );
    std::fs::write(&file, "DEPLOY: {value: hidden-value-1, masked: true}\n").expect("write");
    let unhide = import(&env);
    assert_ne!(unhide.status.code(), Some(0));
    assert!(
        text(&unhide.stderr).contains("`DEPLOY` is hidden on the server but not hidden in"),
        "{}",
        text(&unhide.stderr)
    );

    // More variables than one page of the API (100 at most): import and list read every
    // page, so a second import replaces them all and the list shows them all.
    let many: String = (1..=105).map(|i| format!("MANY_{i}: v{i}\n")).collect();
    std::fs::write(&file, &many).expect("write");
    let first = import(&env);
    assert!(
        text(&first.stderr).contains("105 variable(s) created, 0 replaced"),
        "{}",
        text(&first.stderr)
    );
    let again = import(&env);
    assert!(
        text(&again.stderr).contains("0 variable(s) created, 105 replaced"),
        "{}",
        text(&again.stderr)
    );
    let listed = gantry(&["variable", "list", "--project", "demo"], &env);
    let vars: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(vars.as_array().map(Vec::len), Some(3 + 1 + 105));

    // A bad file is a usage error before anything is sent.
    std::fs::write(&file, "A-B: x\n").expect("write");
    let bad = import(&env);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains(":1:6: key: `A-B` can contain only"),
        "{}",
        text(&bad.stderr)
    );
}

/// `gantry variable … --instance`: the instance's variables from a variables file (no
/// environment scopes), listed, deleted, and in the jobs of the server's projects.
#[test]
fn instance_variables_are_imported_listed_deleted_and_reach_jobs() {
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start(&data.path().join("data"));
    let admin = server.token("glpat-").expect("admin token");
    let registration = server.token("GR1348941").expect("registration token");
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let repo = repo();
    create_project(&env, "demo", repo.path());

    let file = data.path().join("instance.yml");
    std::fs::write(
        &file,
        "GREETING: hello\nTOKEN: {value: s3cr3t-t0ken, masked: true, type: file}\n",
    )
    .expect("write");
    let file = file.display().to_string();
    let import =
        |env: &[(&str, &str)]| gantry(&["variable", "import", "--instance", file.as_str()], env);
    let first = import(&env);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert!(
        text(&first.stderr).contains("instance: 2 variable(s) created, 0 replaced"),
        "{}",
        text(&first.stderr)
    );
    std::fs::write(&file, "GREETING: bonjour\n").expect("write");
    let second = import(&env);
    assert!(
        text(&second.stderr).contains("instance: 0 variable(s) created, 1 replaced"),
        "{}",
        text(&second.stderr)
    );

    let listed = gantry(&["variable", "list", "--instance"], &env);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let vars: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(
        vars,
        serde_json::json!([
            {"variable_type": "env_var", "key": "GREETING", "value": "bonjour", "protected": false,
             "masked": false, "raw": false, "description": null},
            {"variable_type": "file", "key": "TOKEN", "value": "s3cr3t-t0ken", "protected": false,
             "masked": true, "raw": false, "description": null},
        ])
    );

    // A job of the project gets them.
    create_pipeline(&env, "demo");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let job = runtime.block_on(async {
        let http = reqwest::Client::new();
        let api = |path: &str| format!("{}/api/v4/{path}", server.url);
        let runner: serde_json::Value = http
            .post(api("runners"))
            .json(&serde_json::json!({ "token": registration }))
            .send()
            .await
            .expect("register")
            .json()
            .await
            .expect("runner JSON");
        http.post(api("jobs/request"))
            .json(&serde_json::json!({ "token": runner["token"] }))
            .send()
            .await
            .expect("request")
            .json::<serde_json::Value>()
            .await
            .expect("job JSON")
    });
    let variable = |key: &str| {
        job["variables"]
            .as_array()
            .and_then(|all| all.iter().find(|v| v["key"] == key))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(variable("GREETING")["value"], "bonjour", "{job}");
    assert_eq!(
        (&variable("TOKEN")["masked"], &variable("TOKEN")["file"]),
        (&serde_json::json!(true), &serde_json::json!(true))
    );

    // Usage errors, before anything is sent: a scope in the file, both owners or none,
    // a scope to delete.
    std::fs::write(&file, "A:\n  value: x\n  environment_scope: production\n").expect("write");
    let scoped = import(&env);
    assert_eq!(scoped.status.code(), Some(2));
    assert!(
        text(&scoped.stderr).contains(":3:22: `A`: an instance variable has no environment_scope"),
        "{}",
        text(&scoped.stderr)
    );
    for args in [
        &["variable", "list", "--instance", "--project", "demo"][..],
        &["variable", "list"][..],
        &[
            "variable",
            "delete",
            "--instance",
            "GREETING",
            "--scope",
            "production",
        ][..],
    ] {
        let refused = gantry(args, &env);
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&refused.stderr)
        );
    }

    let deleted = gantry(&["variable", "delete", "--instance", "GREETING"], &env);
    assert_eq!(deleted.status.code(), Some(0), "{}", text(&deleted.stderr));
    assert!(text(&deleted.stderr).contains("instance: deleted `GREETING`"));
    let again = gantry(&["variable", "delete", "--instance", "GREETING"], &env);
    assert_eq!(again.status.code(), Some(3));
    assert!(
        text(&again.stderr).contains("InstanceVariable Not Found"),
        "{}",
        text(&again.stderr)
    );
    let listed = gantry(&["variable", "list", "--instance"], &env);
    let vars: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(vars.as_array().map(Vec::len), Some(1));
    // The project's variables are another list.
    let project = gantry(&["variable", "list", "--project", "demo"], &env);
    assert_eq!(text(&project.stdout).trim(), "[]");
}

/// `gantry variable … --group PATH`: a group's variables from a variables file (scopes
/// allowed), listed, deleted, and in the jobs of the group's projects; then `gantry project
/// protect|unprotect|protected` on one of its projects.
#[test]
fn group_variables_protected_refs_and_settings_from_the_command_line() {
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start(&data.path().join("data"));
    let admin = server.token("glpat-").expect("admin token");
    let registration = server.token("GR1348941").expect("registration token");
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let repo = repo();
    create_project(&env, "acme/platform/widget", repo.path());

    let file = data.path().join("group.yml");
    std::fs::write(
        &file,
        "GREETING: hello\nURL:\n  - {value: any}\n  - {value: prod, environment_scope: production}\n",
    )
    .expect("write");
    let file = file.display().to_string();
    let import = gantry(
        &["variable", "import", "--group", "acme", file.as_str()],
        &env,
    );
    assert_eq!(import.status.code(), Some(0), "{}", text(&import.stderr));
    assert!(
        text(&import.stderr).contains("group acme: 3 variable(s) created, 0 replaced"),
        "{}",
        text(&import.stderr)
    );
    std::fs::write(&file, "GREETING: nearer\n").expect("write");
    let sub = gantry(
        &[
            "variable",
            "import",
            "--group",
            "acme/platform",
            file.as_str(),
        ],
        &env,
    );
    assert_eq!(sub.status.code(), Some(0), "{}", text(&sub.stderr));

    let listed = gantry(&["variable", "list", "--group", "acme"], &env);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let vars: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    let scopes: Vec<String> = vars
        .as_array()
        .expect("list")
        .iter()
        .map(|v| format!("{}@{}", v["key"], v["environment_scope"]))
        .collect();
    assert_eq!(
        scopes,
        [r#""GREETING"@"*""#, r#""URL"@"*""#, r#""URL"@"production""#]
    );

    // A job of the project gets the nearest group's value.
    create_pipeline(&env, "acme/platform/widget");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let job = runtime.block_on(take_job(
        &reqwest::Client::new(),
        &server.url,
        &registration,
    ));
    let value = |key: &str| {
        job["variables"]
            .as_array()
            .and_then(|all| all.iter().find(|v| v["key"] == key))
            .map(|v| v["value"].clone())
            .unwrap_or_default()
    };
    assert_eq!(value("GREETING"), "nearer", "{job}");
    assert_eq!(value("URL"), "any");

    let deleted = gantry(
        &[
            "variable",
            "delete",
            "--group",
            "acme",
            "URL",
            "--scope",
            "production",
        ],
        &env,
    );
    assert_eq!(deleted.status.code(), Some(0), "{}", text(&deleted.stderr));
    assert!(text(&deleted.stderr).contains("group acme: deleted `URL`"));
    let missing = gantry(&["variable", "list", "--group", "nobody"], &env);
    assert_eq!(missing.status.code(), Some(3));
    assert!(
        text(&missing.stderr).contains("Group Not Found"),
        "{}",
        text(&missing.stderr)
    );
    let both = gantry(&["variable", "list", "--group", "acme", "--instance"], &env);
    assert_eq!(both.status.code(), Some(2), "{}", text(&both.stderr));

    // Protected branches and tags of the project, from the command line.
    let project = "acme/platform/widget";
    for args in [
        &["project", "protect", project, "release/*"][..],
        &["project", "protect", project, "v*", "--tag"][..],
        &["project", "unprotect", project, "main"][..],
    ] {
        let done = gantry(args, &env);
        assert_eq!(
            done.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&done.stderr)
        );
    }
    let listed = gantry(&["project", "protected", project], &env);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(listed["branches"][0]["name"], "release/*", "{listed}");
    assert_eq!(listed["branches"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed["tags"][0]["name"], "v*", "{listed}");
    let twice = gantry(&["project", "protect", project, "release/*"], &env);
    assert_eq!(twice.status.code(), Some(3), "{}", text(&twice.stderr));
    assert!(
        text(&twice.stderr).contains("is protected already"),
        "{}",
        text(&twice.stderr)
    );

    // Its settings.
    let updated = gantry(
        &[
            "project",
            "update",
            project,
            "--build-timeout",
            "1200",
            "--keep-latest-artifact",
            "false",
            "--git-strategy",
            "clone",
            "--git-depth",
            "10",
            "--auto-cancel",
            "disabled",
            "--separated-caches",
            "false",
            "--forward-deployment",
            "false",
        ],
        &env,
    );
    assert_eq!(updated.status.code(), Some(0), "{}", text(&updated.stderr));
    let updated: serde_json::Value = serde_json::from_slice(&updated.stdout).expect("JSON");
    assert_eq!(
        (&updated["build_timeout"], &updated["keep_latest_artifact"]),
        (&serde_json::json!(1200), &serde_json::json!(false)),
        "{updated}"
    );
    assert_eq!(
        [
            &updated["build_git_strategy"],
            &updated["ci_default_git_depth"],
            &updated["auto_cancel_pending_pipelines"],
            &updated["ci_separated_caches"],
            &updated["ci_forward_deployment_enabled"],
        ],
        [
            &serde_json::json!("clone"),
            &serde_json::json!(10),
            &serde_json::json!("disabled"),
            &serde_json::json!(false),
            &serde_json::json!(false),
        ],
        "{updated}"
    );
    let refused = gantry(
        &["project", "update", project, "--build-timeout", "60"],
        &env,
    );
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("build_timeout needs to be between 10 minutes and 1 month"),
        "{}",
        text(&refused.stderr)
    );
    let nothing = gantry(&["project", "update", project], &env);
    assert_eq!(nothing.status.code(), Some(2), "{}", text(&nothing.stderr));
    assert!(text(&nothing.stderr).contains("nothing to change"));
}

#[test]
fn max_artifacts_size_bounds_uploads() {
    let data = tempfile::tempdir().expect("dir");
    let bad = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--max-artifacts-size",
            "0",
        ])
        .arg("--data-dir")
        .arg(data.path())
        .stdin(Stdio::null())
        .output()
        .expect("gantry server");
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert!(
        text(&bad.stderr).contains("--max-artifacts-size"),
        "{}",
        text(&bad.stderr)
    );

    let server = Server::start_with_args(
        &data.path().join("data"),
        &[],
        &["--max-artifacts-size", "1"],
    );
    let admin = server.token("glpat-").expect("admin token");
    let registration = server.token("GR1348941").expect("registration token");
    let url = server.url.clone();
    let repo = repo();
    let env = [
        ("GANTRY_URL", url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "demo", repo.path());
    create_pipeline(&env, "demo");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let http = reqwest::Client::new();
        let api = |path: &str| format!("{url}/api/v4/{path}");
        let job = take_job(&http, &url, &registration).await;
        let (id, token) = (
            job["id"].as_i64().expect("a job"),
            job["token"].as_str().expect("token").to_owned(),
        );
        let upload = |bytes: usize| {
            let form = reqwest::multipart::Form::new().part(
                "file",
                reqwest::multipart::Part::bytes(vec![7u8; bytes]).file_name("artifacts.zip"),
            );
            http.post(api(&format!(
                "jobs/{id}/artifacts?artifact_type=archive&artifact_format=zip"
            )))
            .header("JOB-TOKEN", &token)
            .multipart(form)
            .send()
        };
        let too_big = upload(1024 * 1024 + 1).await.expect("upload");
        assert_eq!(too_big.status().as_u16(), 413);
        let why = too_big.text().await.expect("body");
        assert!(why.contains("size limit of 1048576 bytes"), "{why}");
        let fits = upload(1024 * 1024).await.expect("upload");
        assert_eq!(fits.status().as_u16(), 201);
    });
}

#[test]
fn gantry_db_key_encrypts_variables_and_only_that_key_reads_them() {
    let data = tempfile::tempdir().expect("dir");
    let data_dir = data.path().join("data");
    refuses_to_start(&data_dir, "GANTRY_DB_KEY", "not-hex");

    let key = "0123456789abcdef".repeat(4);
    let server = Server::start_with(&data_dir, &[("GANTRY_DB_KEY", key.as_str())]);
    let admin = server.token("glpat-").expect("admin token");
    let url = server.url.clone();
    let env = [
        ("GANTRY_URL", url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let repo = repo();
    create_project(&env, "demo", repo.path());
    let file = data.path().join("vars.yml");
    std::fs::write(&file, "TOKEN: s3cr3t-t0ken\n").expect("write");
    let file = file.display().to_string();
    let import = gantry(&["variable", "import", "--project", "demo", &file], &env);
    assert_eq!(import.status.code(), Some(0), "{}", text(&import.stderr));
    // The key came from the environment: no key file; the value is not in the database.
    assert!(!data_dir.join("db_key").exists());
    let db = std::fs::read(data_dir.join("gantry.db")).expect("database");
    let wal = std::fs::read(data_dir.join("gantry.db-wal")).unwrap_or_default();
    for bytes in [&db, &wal] {
        assert!(
            !bytes.windows(b"s3cr3t".len()).any(|w| w == b"s3cr3t"),
            "the value is stored in plain text"
        );
    }
    drop(server);

    // Started again without the key: a key file is made, and the old values cannot be read.
    let server = Server::start(&data_dir);
    let url = server.url.clone();
    let env = [
        ("GANTRY_URL", url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let listed = gantry(&["variable", "list", "--project", "demo"], &env);
    assert_ne!(listed.status.code(), Some(0));
    drop(server);

    // With the key again, they can.
    let server = Server::start_with(&data_dir, &[("GANTRY_DB_KEY", key.as_str())]);
    let url = server.url.clone();
    let env = [
        ("GANTRY_URL", url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let listed = gantry(&["variable", "list", "--project", "demo"], &env);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    assert!(
        text(&listed.stdout).contains("s3cr3t-t0ken"),
        "{}",
        text(&listed.stdout)
    );
}

/// `gantry server --database-url postgres://…`: the coordinator on PostgreSQL (a fresh
/// database of the test server `scripts/test-postgres.sh` starts), a pipeline created,
/// and the data there after a restart; the password never in a message.
#[test]
fn a_server_on_postgresql_keeps_its_data_across_a_restart() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let database = runtime
        .block_on(gantry_store::testing::postgres_database())
        .unwrap_or_else(|e| panic!("{e}"));
    let data = tempfile::tempdir().expect("dir");
    let data_dir = data.path().join("data");
    let server = Server::start_with_args(&data_dir, &[], &["--database-url", &database]);
    let admin = server
        .token("glpat-")
        .expect("the first start prints an admin token");
    let repo = repo();
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "demo", repo.path());
    let pipeline = create_pipeline(&env, "demo");
    let body: serde_json::Value = serde_json::from_slice(&pipeline.stdout).expect("JSON");
    assert_eq!(body["status"], "pending");
    server.stop();
    assert!(
        !data_dir.join("gantry.db").exists(),
        "no SQLite database beside PostgreSQL"
    );

    let server = Server::start_with(&data_dir, &[("GANTRY_DATABASE_URL", &database)]);
    assert_eq!(server.token("glpat-"), None, "the database has its tokens");
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let listed = gantry(&["project", "list"], &env);
    let projects: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(projects[0]["name"], "demo");
    server.stop();

    let refused = gantry(
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            &data_dir.display().to_string(),
            "--database-url",
            "postgres://gantry:hunter2@127.0.0.1:1/none",
        ],
        &[],
    );
    assert_ne!(refused.status.code(), Some(0));
    let said = text(&refused.stderr);
    assert!(
        said.contains("postgres://gantry:***@127.0.0.1:1/none"),
        "{said}"
    );
    assert!(!said.contains("hunter2"), "{said}");
}

/// `--blobs-url s3://…`: artifacts go to S3-compatible object storage (the test server of
/// `scripts/test-s3.sh`), not the data directory, and a restarted server serves them from
/// there; so does a finished job's log, archived there, when the data directory lost it
/// (another coordinator); a bucket that does not answer stops the start with the hint.
#[test]
fn blobs_url_keeps_artifacts_in_object_storage_across_restarts() {
    let bucket = std::env::var("GANTRY_TEST_S3_URL").unwrap_or_else(|_| {
        panic!("GANTRY_TEST_S3_URL is not set: start the test S3 server with `eval \"$(scripts/test-s3.sh start)\"` (scripts/test does)")
    });
    let data = tempfile::tempdir().expect("dir");
    let prefix = format!(
        "{bucket}/server-cli/{}",
        data.path()
            .file_name()
            .expect("name")
            .to_string_lossy()
            .trim_start_matches('.')
    );
    let missing = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["server", "--listen", "127.0.0.1:0", "--blobs-url"])
        .arg(format!("{bucket}-missing"))
        .arg("--data-dir")
        .arg(data.path().join("other"))
        .stdin(Stdio::null())
        .output()
        .expect("gantry server");
    assert_eq!(missing.status.code(), Some(3), "{}", text(&missing.stderr));
    assert!(
        text(&missing.stderr).contains("hint: check the bucket and the AWS_* credentials"),
        "{}",
        text(&missing.stderr)
    );

    let data_dir = data.path().join("data");
    let mut server = Server::start_with_args(&data_dir, &[], &["--blobs-url", &prefix]);
    let admin = server.token("glpat-").expect("admin token");
    let registration = server.token("GR1348941").expect("registration token");
    let repo = repo();
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "demo", repo.path());
    create_pipeline(&env, "demo");
    let archive: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = server.url.clone();
    let log = "line one\nline two of the log\n".repeat(100);
    let (job_id, _job_token, project_id) = runtime.block_on(async {
        let http = reqwest::Client::new();
        let api = |path: &str| format!("{url}/api/v4/{path}");
        let job = take_job(&http, &url, &registration).await;
        let (id, token) = (
            job["id"].as_i64().expect("a job"),
            job["token"].as_str().expect("token").to_owned(),
        );
        let project_id = job["job_info"]["project_id"].as_i64().expect("project id");
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(archive.clone()).file_name("artifacts.zip"),
        );
        let stored = http
            .post(api(&format!(
                "jobs/{id}/artifacts?artifact_type=archive&artifact_format=zip"
            )))
            .header("JOB-TOKEN", &token)
            .multipart(form)
            .send()
            .await
            .expect("upload");
        assert_eq!(stored.status().as_u16(), 201);
        // The job's log, then its final state: the log is archived with the artifacts.
        let patched = http
            .patch(api(&format!("jobs/{id}/trace")))
            .header("JOB-TOKEN", &token)
            .header("Content-Range", format!("0-{}", log.len() - 1))
            .body(log.clone())
            .send()
            .await
            .expect("trace");
        assert_eq!(patched.status().as_u16(), 202);
        let finished = http
            .put(api(&format!("jobs/{id}")))
            .json(&serde_json::json!({
                "token": token,
                "state": "success",
                "output": {"bytesize": log.len()},
            }))
            .send()
            .await
            .expect("final update");
        assert_eq!(finished.status().as_u16(), 200);
        (id, token, project_id)
    });
    // A second job, canceled while it runs: its log is archived once it ended.
    create_pipeline(&env, "demo");
    let canceled_log = "working…\ncanceled in the middle\n".repeat(50);
    let canceled_id = runtime.block_on(async {
        let http = reqwest::Client::new();
        let api = |path: &str| format!("{url}/api/v4/{path}");
        let job = take_job(&http, &url, &registration).await;
        let id = job["id"].as_i64().expect("a job");
        let token = job["token"].as_str().expect("token").to_owned();
        let patched = http
            .patch(api(&format!("jobs/{id}/trace")))
            .header("JOB-TOKEN", &token)
            .header("Content-Range", format!("0-{}", canceled_log.len() - 1))
            .body(canceled_log.clone())
            .send()
            .await
            .expect("trace");
        assert_eq!(patched.status().as_u16(), 202);
        let canceled = http
            .post(api(&format!("projects/{project_id}/jobs/{id}/cancel")))
            .header("PRIVATE-TOKEN", &admin)
            .send()
            .await
            .expect("cancel");
        assert_eq!(canceled.status().as_u16(), 201);
        id
    });
    // The archive appears in the bucket in the background.
    let staging = tempfile::tempdir().expect("dir");
    let archived = runtime.block_on(async {
        let blobs = std::sync::Arc::new(
            gantry_server::coordinator::ObjectBlobs::from_url(&prefix, staging.path().to_owned())
                .expect("the bucket"),
        );
        let key = format!("traces/{canceled_id}.log");
        for _ in 0..100 {
            let (blobs, key) = (std::sync::Arc::clone(&blobs), key.clone());
            let found = tokio::task::spawn_blocking(move || {
                gantry_server::coordinator::BlobStore::get(blobs.as_ref(), &key)
            })
            .await
            .expect("task")
            .expect("read the bucket");
            if let Some(bytes) = found {
                return bytes;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Vec::new()
    });
    assert_eq!(
        String::from_utf8_lossy(&archived),
        canceled_log,
        "the canceled job's log was archived"
    );
    // Nothing of it in the data directory.
    let local: Vec<_> = walk(&data_dir)
        .into_iter()
        .filter(|p| std::fs::read(p).is_ok_and(|b| b == archive))
        .collect();
    assert!(local.is_empty(), "the archive is on local disk: {local:?}");
    let lines = server.stop();
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("artifacts in {prefix}"))),
        "{lines:?}"
    );

    // No log is on this coordinator's disk: a running log is in the database (any
    // replica of the deployment takes its patches), a finished one in the archive, which
    // serves it after a restart.
    let traces = data_dir.join("traces");
    assert!(
        !traces.exists() || walk(&traces).is_empty(),
        "logs on local disk: {:?}",
        walk(&traces)
    );
    server = Server::start_with_args(&data_dir, &[], &["--blobs-url", &prefix]);
    let url = server.url.clone();
    runtime.block_on(async {
        let canceled = reqwest::Client::new()
            .get(format!(
                "{url}/api/v4/projects/{project_id}/jobs/{canceled_id}/trace"
            ))
            .header("PRIVATE-TOKEN", &admin)
            .send()
            .await
            .expect("trace");
        assert_eq!(canceled.text().await.expect("body"), canceled_log);
        let trace = reqwest::Client::new()
            .get(format!(
                "{url}/api/v4/projects/{project_id}/jobs/{job_id}/trace"
            ))
            .header("PRIVATE-TOKEN", &admin)
            .send()
            .await
            .expect("trace");
        assert_eq!(trace.status().as_u16(), 200);
        assert_eq!(trace.text().await.expect("body"), log);
        // The job is finished: its token is spent, the user API serves the archive.
        let downloaded = reqwest::Client::new()
            .get(format!(
                "{url}/api/v4/projects/{project_id}/jobs/{job_id}/artifacts"
            ))
            .header("PRIVATE-TOKEN", &admin)
            .send()
            .await
            .expect("download");
        assert_eq!(downloaded.status().as_u16(), 200);
        let body = downloaded.bytes().await.expect("body");
        assert!(body.as_ref() == archive.as_slice(), "the archive differs");
    });
    server.stop();
}

/// Every directory and file under `dir` with its permission bits (links left out: their
/// mode means nothing).
fn modes(dir: &Path) -> Vec<(std::path::PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let meta = std::fs::symlink_metadata(&d).expect("stat");
        out.push((d.clone(), meta.permissions().mode() & 0o7777));
        for entry in std::fs::read_dir(&d).expect("list").flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            if meta.is_dir() {
                todo.push(path);
            } else if !meta.file_type().is_symlink() {
                out.push((path, meta.permissions().mode() & 0o7777));
            }
        }
    }
    out
}

/// Everything `gantry server` creates in its data directory is its user's alone — the
/// database and its WAL, the mirror, a job's log and artifacts, staged uploads —
/// though it was started with the usual umask 022.
#[test]
fn the_data_directory_is_private_to_the_server_user() {
    let data = tempfile::tempdir().expect("dir");
    let data_dir = data.path().join("data");
    let server = Server::start_under_umask(&data_dir, "022");
    assert!(
        !server
            .stderr
            .iter()
            .any(|l| l.contains("open to other users")),
        "{:?}",
        server.stderr
    );
    let admin = server.token("glpat-").expect("admin token");
    let registration = server.token("GR1348941").expect("registration token");
    let repo = repo();
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "demo", repo.path());
    create_pipeline(&env, "demo");
    let archive = {
        let mut bytes = std::io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut bytes);
        zip.start_file("out/report.txt", zip::write::SimpleFileOptions::default())
            .expect("start");
        std::io::Write::write_all(&mut zip, b"secret build output\n").expect("write");
        zip.finish().expect("finish");
        bytes.into_inner()
    };
    let log = "a line of the job's log\n".repeat(50);
    let url = server.url.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let http = reqwest::Client::new();
        let api = |path: &str| format!("{url}/api/v4/{path}");
        let job = take_job(&http, &url, &registration).await;
        let id = job["id"].as_i64().expect("a job");
        let token = job["token"].as_str().expect("token").to_owned();
        let patched = http
            .patch(api(&format!("jobs/{id}/trace")))
            .header("JOB-TOKEN", &token)
            .header("Content-Range", format!("0-{}", log.len() - 1))
            .body(log.clone())
            .send()
            .await
            .expect("trace");
        assert_eq!(patched.status().as_u16(), 202);
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(archive.clone()).file_name("artifacts.zip"),
        );
        let stored = http
            .post(api(&format!(
                "jobs/{id}/artifacts?artifact_type=archive&artifact_format=zip"
            )))
            .header("JOB-TOKEN", &token)
            .multipart(form)
            .send()
            .await
            .expect("upload");
        assert_eq!(stored.status().as_u16(), 201);
        let finished = http
            .put(api(&format!("jobs/{id}")))
            .json(&serde_json::json!({
                "token": token,
                "state": "success",
                "output": {"bytesize": log.len()},
            }))
            .send()
            .await
            .expect("final update");
        assert_eq!(finished.status().as_u16(), 200);
    });

    let check = |when: &str| {
        let all = modes(&data_dir);
        let files = walk(&data_dir);
        let has = |what: &str, found: bool| assert!(found, "{when}: no {what} in {files:?}");
        has("database", data_dir.join("gantry.db").is_file());
        has(
            "log",
            files
                .iter()
                .any(|p| std::fs::read(p).is_ok_and(|b| b == log.as_bytes())),
        );
        has(
            "artifacts",
            files
                .iter()
                .any(|p| std::fs::read(p).is_ok_and(|b| b == archive)),
        );
        has(
            "mirror",
            files.iter().any(|p| p.starts_with(data_dir.join("repos"))),
        );
        let open: Vec<_> = all.iter().filter(|(_, mode)| mode & 0o077 != 0).collect();
        assert!(open.is_empty(), "{when}: open to others: {open:?}");
        let dirs: Vec<_> = all
            .iter()
            .filter(|(path, mode)| path.is_dir() && *mode != 0o700)
            .collect();
        assert!(dirs.is_empty(), "{when}: directories not 0700: {dirs:?}");
    };
    // While it runs (the database's -wal and -shm are there), and after it stopped.
    check("running");
    assert!(
        walk(&data_dir)
            .iter()
            .any(|p| p.to_string_lossy().ends_with("gantry.db-wal")),
        "{:?}",
        walk(&data_dir)
    );
    server.stop();
    check("stopped");
}

/// A data directory made open by hand (or by an older version) is reported at start
/// with the fix, and left as it is.
#[test]
fn an_open_data_directory_is_reported_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().expect("dir");
    let data_dir = data.path().join("data");
    std::fs::create_dir(&data_dir).expect("mkdir");
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let server = Server::start(&data_dir);
    let canonical = data_dir.canonicalize().expect("resolve");
    let said = server.stderr.join("\n");
    assert!(
        said.contains(&format!(
            "warning: the data directory {dir} is open to other users (mode 0755): they may read the database, job logs and artifacts\n\
             close it with: chmod -R go= {dir}",
            dir = canonical.display()
        )),
        "{said}"
    );
    server.stop();
    let mode = std::fs::metadata(&data_dir)
        .expect("stat")
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o755, "the server does not change it");
    // What the server created inside is closed all the same.
    let db = std::fs::metadata(data_dir.join("gantry.db")).expect("database");
    assert_eq!(db.permissions().mode() & 0o777, 0o600);

    // Closed as the warning says, the next start is quiet.
    let fixed = Command::new("chmod")
        .args(["-R", "go="])
        .arg(&data_dir)
        .status()
        .expect("chmod");
    assert!(fixed.success());
    let server = Server::start(&data_dir);
    assert!(
        !server
            .stderr
            .iter()
            .any(|l| l.contains("open to other users")),
        "{:?}",
        server.stderr
    );
    server.stop();
}

/// Registers a runner with the legacy registration token and takes the queued job: its
/// payload.
async fn take_job(http: &reqwest::Client, url: &str, registration: &str) -> serde_json::Value {
    let runner: serde_json::Value = http
        .post(format!("{url}/api/v4/runners"))
        .json(&serde_json::json!({ "token": registration }))
        .send()
        .await
        .expect("register")
        .json()
        .await
        .expect("runner JSON");
    http.post(format!("{url}/api/v4/jobs/request"))
        .json(&serde_json::json!({ "token": runner["token"] }))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("job JSON")
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// `gantry pipeline create --input NAME=VALUE --var K=V`: the form GitLab's API takes
/// (`inputs[NAME]`, `variables[][key]`/`[value]`); the server reads each input as its
/// declared type, and every variable reaches the job.
#[test]
fn pipeline_create_passes_inputs_and_variables() {
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start(&data.path().join("data"));
    let admin = server.token("glpat-").expect("admin token");
    let registration = server.token("GR1348941").expect("registration token");
    let repo = repo();
    std::fs::write(
        repo.path().join(".gitlab-ci.yml"),
        "spec:\n  inputs:\n    replicas: {type: number}\n    canary: {type: boolean, default: false}\n---\nbuild:\n  script: [\"echo n$[[ inputs.replicas ]] c$[[ inputs.canary ]] $GREETING\"]\n",
    )
    .expect("write");
    let commit = Command::new("git")
        .current_dir(repo.path())
        .args(["commit", "-qam", "inputs"])
        .status()
        .expect("git");
    assert!(commit.success());
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "demo", repo.path());
    let created = gantry(
        &[
            "pipeline",
            "create",
            "--project",
            "demo",
            "--ref",
            "main",
            "--input",
            "replicas=3",
            "--var",
            "GREETING=hi",
            "--input",
            "canary=true",
            "--var",
            "EMPTY=",
            "--var",
            "OTHER=x",
        ],
        &env,
    );
    assert_eq!(created.status.code(), Some(0), "{}", text(&created.stderr));
    let pipeline: serde_json::Value = serde_json::from_slice(&created.stdout).expect("JSON");
    assert_eq!(pipeline["status"], "pending", "{pipeline}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = server.url.clone();
    let job = runtime.block_on(take_job(&reqwest::Client::new(), &url, &registration));
    assert_eq!(job["steps"][0]["script"][0], "echo n3 ctrue $GREETING");
    let var = |key: &str| {
        job["variables"]
            .as_array()
            .and_then(|vars| vars.iter().find(|v| v["key"] == key))
            .map(|v| v["value"].clone())
    };
    assert_eq!(var("GREETING"), Some(serde_json::json!("hi")));
    assert_eq!(var("EMPTY"), Some(serde_json::json!("")));
    assert_eq!(var("OTHER"), Some(serde_json::json!("x")));

    // A value that is not the declared type: the pipeline is created failed, saying why.
    let wrong = gantry(
        &[
            "pipeline",
            "create",
            "--project",
            "demo",
            "--ref",
            "main",
            "--input",
            "replicas=many",
        ],
        &env,
    );
    assert_eq!(wrong.status.code(), Some(0), "{}", text(&wrong.stderr));
    let pipeline: serde_json::Value = serde_json::from_slice(&wrong.stdout).expect("JSON");
    assert_eq!(pipeline["status"], "failed", "{pipeline}");
    assert_eq!(
        pipeline["yaml_errors"],
        "`replicas` input: provided value is not a number"
    );
    server.stop();
}

/// Commits `file` in `repo`.
fn commit_file(repo: &Path, file: &str, message: &str) {
    std::fs::write(repo.join(file), message).expect("write");
    for args in [&["add", "-A"][..], &["commit", "-q", "-m", message]] {
        let status = Command::new("git")
            .current_dir(repo)
            .args(args)
            .status()
            .expect("git");
        assert!(status.success(), "git {args:?}");
    }
}

/// The project's pipelines as `(source, status)`, newest first.
async fn pipelines(http: &reqwest::Client, url: &str, admin: &str) -> Vec<(String, String)> {
    let list: serde_json::Value = http
        .get(format!("{url}/api/v4/projects/gantry%2Fdemo/pipelines"))
        .header("PRIVATE-TOKEN", admin)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("pipelines JSON");
    list.as_array()
        .expect("a list")
        .iter()
        .map(|p| {
            (
                p["source"].as_str().unwrap_or_default().to_owned(),
                p["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn pushes_create_pipelines_when_the_server_looks_and_when_asked() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let http = reqwest::Client::new();
    let repo = repo();

    // Asked: `gantry project pull` (the server itself never looks with --poll-interval 0).
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start_with_args(&data.path().join("data"), &[], &["--poll-interval", "0"]);
    let admin = server.token("glpat-").expect("admin token");
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "demo", repo.path());
    commit_file(repo.path(), "a.txt", "second [skip ci]");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(rt.block_on(pipelines(&http, &server.url, &admin)), []);
    let pulled = gantry(&["project", "pull", "demo"], &env);
    assert_eq!(pulled.status.code(), Some(0), "{}", text(&pulled.stderr));
    assert!(
        text(&pulled.stderr).starts_with("refs/heads/main: pipeline "),
        "{}",
        text(&pulled.stderr)
    );
    assert_eq!(
        rt.block_on(pipelines(&http, &server.url, &admin)),
        [("push".to_owned(), "skipped".to_owned())]
    );
    let again = gantry(&["project", "pull", "demo"], &env);
    assert_eq!(text(&again.stderr).trim(), "nothing moved in demo");
    // The webhook form: the token in the query; without one, 401.
    let hook = format!("{}/api/v4/projects/gantry%2Fdemo/mirror/pull", server.url);
    let refused = rt.block_on(http.post(&hook).send()).expect("post");
    assert_eq!(refused.status().as_u16(), 401);
    let hooked = rt
        .block_on(http.post(format!("{hook}?private_token={admin}")).send())
        .expect("post");
    assert_eq!(hooked.status().as_u16(), 200);
    server.stop();

    // Looking every second: a commit becomes a pipeline without anybody asking.
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start_with_args(&data.path().join("data"), &[], &["--poll-interval", "1"]);
    let admin = server.token("glpat-").expect("admin token");
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "demo", repo.path());
    commit_file(repo.path(), "b.txt", "third");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = rt.block_on(pipelines(&http, &server.url, &admin));
        // `created` is the instant between the pipeline's row and its first processing.
        if !seen.is_empty() && seen[0].1 != "created" {
            assert_eq!(seen, [("push".to_owned(), "pending".to_owned())]);
            break;
        }
        assert!(Instant::now() < deadline, "no push pipeline within 20 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    server.stop();
}

#[test]
fn schedules_are_created_listed_played_and_deleted_from_the_command_line() {
    let repo = repo();
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start_with_args(&data.path().join("data"), &[], &["--poll-interval", "0"]);
    let admin = server.token("glpat-").expect("admin token");
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "demo", repo.path());
    let created = gantry(
        &[
            "schedule",
            "create",
            "--project",
            "demo",
            "--ref",
            "main",
            "--cron",
            "0 4 * * *",
            "--timezone",
            "Asia/Tokyo",
            "--description",
            "nightly",
            "--var",
            "GREETING=hi",
        ],
        &env,
    );
    assert_eq!(created.status.code(), Some(0), "{}", text(&created.stderr));
    let schedule: serde_json::Value = serde_json::from_slice(&created.stdout).expect("JSON");
    assert_eq!(schedule["ref"], "refs/heads/main");
    // 04:00 in Tokyo is 19:00 UTC.
    assert!(
        schedule["next_run_at"]
            .as_str()
            .is_some_and(|t| t.ends_with("T19:00:00.000Z")),
        "{schedule}"
    );
    let id = schedule["id"].to_string();
    let listed = gantry(&["schedule", "list", "--project", "demo"], &env);
    let list: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(list[0]["description"], "nightly");
    let played = gantry(&["schedule", "play", &id, "--project", "demo"], &env);
    assert_eq!(played.status.code(), Some(0), "{}", text(&played.stderr));
    assert!(text(&played.stderr).starts_with(&format!("schedule {id}: pipeline ")));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let http = reqwest::Client::new();
    assert_eq!(
        rt.block_on(pipelines(&http, &server.url, &admin)),
        [("schedule".to_owned(), "pending".to_owned())]
    );
    let bad = gantry(
        &[
            "schedule",
            "create",
            "--project",
            "demo",
            "--ref",
            "main",
            "--cron",
            "0 4 * *",
            "--description",
            "broken",
        ],
        &env,
    );
    assert_ne!(bad.status.code(), Some(0));
    assert!(
        text(&bad.stderr).contains("4 fields where there are 5"),
        "{}",
        text(&bad.stderr)
    );
    let deleted = gantry(&["schedule", "delete", &id, "--project", "demo"], &env);
    assert_eq!(deleted.status.code(), Some(0), "{}", text(&deleted.stderr));
    let listed = gantry(&["schedule", "list", "--project", "demo"], &env);
    assert_eq!(text(&listed.stdout).trim(), "[]");
    server.stop();
}

/// `SIGTERM` while clients stall in every way a client can: an unfinished request head,
/// a body that stops, an anonymous upload, an authenticated upload that stops, a large
/// download nobody reads, and a held job request. The held request is answered `204` at
/// once; the server exits 0 within its `--shutdown-timeout`.
#[test]
fn sigterm_with_stalled_clients_exits_within_the_shutdown_timeout() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    const DEADLINE: u64 = 2;
    let data = tempfile::tempdir().expect("dir");
    let mut server = Server::start_with_args(
        &data.path().join("data"),
        &[],
        &[
            "--shutdown-timeout",
            &DEADLINE.to_string(),
            "--max-artifacts-size",
            "64",
        ],
    );
    let admin = server.token("glpat-").expect("admin token");
    let registration = server.token("GR1348941").expect("registration token");
    let url = server.url.clone();
    let addr = url.trim_start_matches("http://").to_owned();
    let repo = repo();
    let env = [
        ("GANTRY_URL", url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "demo", repo.path());
    create_pipeline(&env, "demo");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let http = reqwest::Client::new();
        let api = |path: &str| format!("{url}/api/v4/{path}");
        let job = take_job(&http, &url, &registration).await;
        let (id, token) = (
            job["id"].as_i64().expect("a job"),
            job["token"].as_str().expect("token").to_owned(),
        );
        // A 48 MiB archive to download.
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(vec![7u8; 48 << 20]).file_name("artifacts.zip"),
        );
        let uploaded = http
            .post(api(&format!(
                "jobs/{id}/artifacts?artifact_type=archive&artifact_format=zip"
            )))
            .header("JOB-TOKEN", &token)
            .multipart(form)
            .send()
            .await
            .expect("upload");
        assert_eq!(uploaded.status().as_u16(), 201);
        let runner: serde_json::Value = http
            .post(api("runners"))
            .json(&serde_json::json!({ "token": registration }))
            .send()
            .await
            .expect("register")
            .json()
            .await
            .expect("runner JSON");

        let connect = || tokio::net::TcpStream::connect(addr.clone());
        let mut stalled = Vec::new();
        // An unfinished head.
        let mut head = connect().await.expect("connect");
        head.write_all(b"GET /api/v4/projects HTTP/1.1\r\nHost: g\r\n")
            .await
            .expect("write");
        stalled.push(head);
        // A user API body that stops.
        let mut body = connect().await.expect("connect");
        body.write_all(
            format!(
                "POST /api/v4/projects HTTP/1.1\r\nHost: g\r\nPRIVATE-TOKEN: {admin}\r\n\
                 Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{{\"name\":"
            )
            .as_bytes(),
        )
        .await
        .expect("write");
        stalled.push(body);
        // Uploads that stop after 64 KiB: anonymous, and with the job's token.
        for token in [None, Some(token.as_str())] {
            let mut upload = connect().await.expect("connect");
            let mut head = format!(
                "POST /api/v4/jobs/{id}/artifacts?artifact_type=archive HTTP/1.1\r\nHost: g\r\n\
                 Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: 10485760\r\n"
            );
            if let Some(token) = token {
                head.push_str(&format!("JOB-TOKEN: {token}\r\n"));
            }
            head.push_str("\r\n");
            let mut bytes = head.into_bytes();
            bytes.extend_from_slice(
                b"--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.zip\"\r\n\r\n",
            );
            bytes.resize(bytes.len() + 64 * 1024, b'z');
            let _ = upload.write_all(&bytes).await;
            stalled.push(upload);
        }
        // A 48 MiB download of which only the first bytes are read.
        let mut download = connect().await.expect("connect");
        download
            .write_all(
                format!(
                    "GET /api/v4/projects/demo/jobs/{id}/artifacts HTTP/1.1\r\nHost: g\r\nPRIVATE-TOKEN: {admin}\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .expect("write");
        let mut first = [0u8; 1024];
        let n = download.read(&mut first).await.expect("read");
        assert!(
            String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&first[..n])
        );
        stalled.push(download);
        // A held job request.
        let held = {
            let http = http.clone();
            let url = api("jobs/request");
            let token = runner["token"].as_str().expect("runner token").to_owned();
            tokio::spawn(async move {
                let response = http
                    .post(url)
                    .json(&serde_json::json!({ "token": token }))
                    .send()
                    .await
                    .expect("job request");
                (response.status().as_u16(), Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;

        let pid = server.child.id().to_string();
        let signalled = Instant::now();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let (code, answered) = held.await.expect("held request");
        assert_eq!(code, 204, "a held job request is answered at shutdown");
        assert!(
            answered.duration_since(signalled) < Duration::from_secs(1),
            "the held request was answered {:?} after SIGTERM",
            answered.duration_since(signalled)
        );
        let exited = loop {
            if let Some(status) = server.child.try_wait().expect("wait") {
                break status;
            }
            assert!(
                signalled.elapsed() < Duration::from_secs(DEADLINE + 3),
                "gantry server did not exit within {DEADLINE} s of SIGTERM (+3 s)"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let took = signalled.elapsed();
        assert!(exited.success(), "exit status {exited}");
        eprintln!("gantry server exited {took:?} after SIGTERM");
        drop(stalled);
    });
    server.drain(Duration::from_millis(200));
    let said = server.stderr.join("\n");
    assert!(
        said.contains("still open after the shutdown timeout"),
        "the server says it closed what was left:\n{said}"
    );
    assert!(said.contains("gantry server: stopped"), "{said}");
}

/// GitLab's own clients from PyPI, unpatched, against a real `gantry server`: python-gitlab
/// through the calls a team makes daily, and the runner implementations
/// gitlab-runner-api and gitlab-python-runner taking, logging and finishing jobs
/// (`scripts/test-gitlab-clients.sh` installs them in a virtual environment and runs
/// `scripts/gitlab_clients.py`, which prints one line per call).
#[test]
fn gitlab_clients_from_pypi_work_against_the_server() {
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start(&data.path().join("data"));
    let admin = server.token("glpat-").expect("an admin token");
    let registration = server.token("GR1348941").expect("a registration token");
    let repo = repo_with(
        "runner-api:\n  tags: [runner-api]\n  script: [echo from gitlab-runner-api]\n\
         python-runner:\n  tags: [python-runner]\n  script:\n    - echo hello from gitlab-python-runner > out.txt\n    - cat out.txt\n  artifacts:\n    paths: [out.txt]\n",
    );
    let work = tempfile::tempdir().expect("dir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new("bash")
        .arg(root.join("scripts/test-gitlab-clients.sh"))
        .args([&server.url, &admin, &registration])
        .arg(repo.path())
        .arg(work.path())
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .expect("bash runs");
    let stdout = text(&output.stdout);
    assert!(
        output.status.success(),
        "the clients failed:\n{stdout}\n{}",
        text(&output.stderr)
    );
    for call in [
        "gl.auth()",
        "gl.version()",
        "projects.create",
        "projects.list(search=…), simple, order_by, get",
        "project.variables create/list/get/update/delete",
        "project.job_token_scope get/save, allowlist and groups_allowlist create/list/delete",
        "personal access tokens: create, read_api, revoke",
        "pipelines.create, list, get",
        "gitlab-runner-api: register, request a job, stream its log, finish it",
        "gitlab-python-runner: register, run a job with an artifact, finish it",
        "repository: files.get/raw, commits.get/list, branches.list/get, tags.list",
        "jobs list, get, trace, artifacts, a page at a time",
        "runners: runners_all.list, runners.list, project runners enable/disable",
        "namespaces: list(search=…), get, exists, a project created in one",
        "pipeline.cancel, pipeline.retry",
        "pipeline schedules and triggers: create, get, save, take_ownership, play, trigger_pipeline",
        "Debian gitlab-cli: current-user, project-pipeline list/get, project-job list/trace",
        "Debian ruby-gitlab: user, version, pipelines, pipeline_jobs, job_trace",
    ] {
        assert!(
            stdout.contains(&format!("ok - {call}\n")),
            "no `ok - {call}`:\n{stdout}"
        );
    }
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

/// `GET /api/v4/<path>` over loopback with `token`: the JSON body.
fn api_get(server: &Server, token: &str, path: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let addr = server.url.trim_start_matches("http://").to_owned();
    let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
    write!(
        conn,
        "GET /api/v4/{path} HTTP/1.1\r\nHost: {addr}\r\nPRIVATE-TOKEN: {token}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {answer}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// `gantry runner run --config CONFIG` in the background; killed when dropped.
struct RunnerProcess(Child);

impl RunnerProcess {
    fn start(config: &Path) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_gantry"))
            .args(["runner", "run", "--config"])
            .arg(config)
            .current_dir(config.parent().expect("a directory"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gantry runner run starts");
        Self(child)
    }
}

impl Drop for RunnerProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server, a project `demo` of `ci`, and a shell runner registered with the admin token
/// (`gantry runner register --token glpat-…` creates it) and running.
fn server_with_runner(ci: &str) -> (Server, String, RunnerProcess, [tempfile::TempDir; 2]) {
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start(&data.path().join("data"));
    let admin = server.token("glpat-").expect("an admin token");
    let repo = repo_with(ci);
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    create_project(&env, "demo", repo.path());
    let config = data.path().join("runner.toml");
    let builds = data.path().join("builds");
    let registered = gantry(
        &[
            "runner",
            "register",
            "--url",
            &server.url,
            "--token",
            &admin,
            "--config",
            &config.display().to_string(),
            "--builds-dir",
            &builds.display().to_string(),
        ],
        &[],
    );
    assert_eq!(
        registered.status.code(),
        Some(0),
        "{}",
        text(&registered.stderr)
    );
    let written = std::fs::read_to_string(&config).expect("the configuration");
    assert!(written.contains("token = \"glrt-"), "{written}");
    assert!(written.contains("builds_dir = "), "{written}");
    let runner = RunnerProcess::start(&config);
    (server, admin, runner, [data, repo])
}

/// `gantry job log -f` follows a running job's log to its end, its colours kept; `gantry
/// pipeline watch` follows the pipeline to its end and exits 0 for a success; `list`
/// shows it; a failed pipeline makes `create --watch` exit 1 naming the job and the
/// command for its log; `cancel` and `retry` change it. A real server and `gantry runner`.
#[test]
fn pipeline_watch_list_cancel_retry_and_job_log_follow_a_real_runner() {
    let ci = "stages: [build, test]\n\
              build:\n  stage: build\n  script:\n    - printf '\\033[32mgreen line\\033[0m\\n'\n    - sleep ${PAUSE:-2}\n    - if [ \"$FAIL\" = 1 ]; then exit 3; fi\n    - echo done building\n\
              test:\n  stage: test\n  script: [echo testing]\n";
    let (server, admin, _runner, _dirs) = server_with_runner(ci);
    let env = [
        ("GANTRY_URL", server.url.as_str()),
        ("GANTRY_TOKEN", admin.as_str()),
    ];
    let created = create_pipeline(&env, "demo");
    let pipeline: serde_json::Value = serde_json::from_slice(&created.stdout).expect("JSON");
    let id = pipeline["id"].as_i64().expect("id");
    let sha = pipeline["sha"].as_str().expect("sha").to_owned();
    let jobs = api_get(
        &server,
        &admin,
        &format!("projects/demo/pipelines/{id}/jobs"),
    );
    let build = jobs
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["name"] == "build")
        .expect("the build job")["id"]
        .to_string();

    // Started while the job waits or runs (it sleeps 2 s): follows it to its end.
    let log = gantry(&["job", "log", "--project", "demo", &build, "-f"], &env);
    assert_eq!(log.status.code(), Some(0), "{}", text(&log.stderr));
    let followed = text(&log.stdout);
    assert!(
        followed.contains("\u{1b}[32mgreen line\u{1b}[0m"),
        "the colours are kept: {followed:?}"
    );
    assert!(followed.contains("done building"), "{followed}");
    assert!(followed.contains("Job succeeded"), "to the end: {followed}");
    let once = gantry(&["job", "log", "--project", "demo", &build], &env);
    assert_eq!(text(&once.stdout), followed, "the same log without -f");

    let watched = gantry(&["pipeline", "watch", "--project", "demo"], &env);
    assert_eq!(watched.status.code(), Some(0), "{}", text(&watched.stderr));
    let shown: Vec<String> = text(&watched.stdout)
        .lines()
        .filter(|l| l.contains("success"))
        .map(|l| l.replace(&sha[..8], "[SHA]"))
        .collect();
    insta::assert_snapshot!("pipeline_watch", shown.join("\n"));

    // A failing pipeline: `create --watch` exits 1 and says which job, and how to see why.
    let failing = gantry(
        &[
            "pipeline",
            "create",
            "--project",
            "demo",
            "--ref",
            "main",
            "--var",
            "FAIL=1",
            "--var",
            "PAUSE=0",
            "--watch",
        ],
        &env,
    );
    assert_eq!(failing.status.code(), Some(1), "{}", text(&failing.stderr));
    let said = text(&failing.stderr);
    let failed_build = id + 2;
    assert!(
        said.contains(&format!(
            "job `build` failed (script_failure): see its log with `gantry job log --project demo {failed_build}`"
        )),
        "{said}"
    );
    assert!(
        text(&failing.stdout).contains(": failed\n"),
        "{}",
        text(&failing.stdout)
    );

    // A long one, canceled and retried.
    let long = gantry(
        &[
            "pipeline",
            "create",
            "--project",
            "demo",
            "--ref",
            "main",
            "--var",
            "PAUSE=60",
        ],
        &env,
    );
    let long: serde_json::Value = serde_json::from_slice(&long.stdout).expect("JSON");
    let long = long["id"].to_string();
    let canceled = gantry(&["pipeline", "cancel", "--project", "demo", &long], &env);
    assert_eq!(
        canceled.status.code(),
        Some(0),
        "{}",
        text(&canceled.stderr)
    );
    assert!(
        text(&canceled.stdout).trim_end().ends_with(": canceled")
            || text(&canceled.stdout).trim_end().ends_with(": canceling"),
        "{}",
        text(&canceled.stdout)
    );
    let watched = gantry(&["pipeline", "watch", "--project", "demo", &long], &env);
    assert_eq!(watched.status.code(), Some(1), "{}", text(&watched.stderr));
    assert!(
        text(&watched.stderr).contains(&format!("pipeline {long} was canceled")),
        "{}",
        text(&watched.stderr)
    );
    let retried = gantry(&["pipeline", "retry", "--project", "demo", &long], &env);
    assert_eq!(retried.status.code(), Some(0), "{}", text(&retried.stderr));
    let after = text(&retried.stdout);
    assert!(
        after.trim_end().ends_with(": running") || after.trim_end().ends_with(": pending"),
        "{after}"
    );
    let canceled = gantry(&["pipeline", "cancel", "--project", "demo", &long], &env);
    assert_eq!(
        canceled.status.code(),
        Some(0),
        "{}",
        text(&canceled.stderr)
    );
    // Until its running job has stopped: `canceling`, then `canceled`.
    let watched = gantry(&["pipeline", "watch", "--project", "demo", &long], &env);
    assert_eq!(watched.status.code(), Some(1), "{}", text(&watched.stderr));

    let listed = gantry(&["pipeline", "list", "--project", "demo"], &env);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let time = regex::Regex::new(r"\d{4}-\d\d-\d\dT[0-9:.]+Z").expect("regex");
    let listed = time
        .replace_all(&text(&listed.stdout), "[TIME]")
        .replace(&sha[..8], "[SHA]");
    insta::assert_snapshot!("pipeline_list", listed);
    let failed_only = gantry(
        &[
            "pipeline",
            "list",
            "--project",
            "demo",
            "--status",
            "failed",
        ],
        &env,
    );
    assert_eq!(
        text(&failed_only.stdout).lines().count(),
        2,
        "{}",
        text(&failed_only.stdout)
    );
}

/// The README's "A server and a runner": its commands, taken from README.md, run from
/// nothing by `scripts/test-quickstart.sh` to a green pipeline.
#[test]
fn readme_quick_start_reaches_a_green_pipeline() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new("bash")
        .arg(root.join("scripts/test-quickstart.sh"))
        .arg(env!("CARGO_BIN_EXE_gantry"))
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "the quick start failed:\n{}\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    let out = text(&output.stdout);
    assert!(
        out.lines()
            .any(|l| l.starts_with("pipeline 1 (#1) for `main` at ") && l.ends_with(": success")),
        "{out}"
    );
}

/// `gantry server admin-token`: a new admin token for a running server, usable at once;
/// `--revoke-others` ends the earlier ones, and a client refused with one says how to get
/// a new one.
#[test]
fn a_lost_admin_token_is_replaced_while_the_server_runs() {
    let data = tempfile::tempdir().expect("dir");
    let dir = data.path().join("data");
    let server = Server::start(&dir);
    let first = server.token("glpat-").expect("an admin token");
    let dir_arg = dir.display().to_string();
    let made = gantry(&["server", "admin-token", "--data-dir", &dir_arg], &[]);
    assert_eq!(made.status.code(), Some(0), "{}", text(&made.stderr));
    let second = text(&made.stdout).trim().to_owned();
    assert!(second.starts_with("glpat-") && second != first, "{second}");
    assert!(
        text(&made.stderr).contains("works at once"),
        "{}",
        text(&made.stderr)
    );
    for token in [&first, &second] {
        let listed = gantry(
            &["project", "list"],
            &[("GANTRY_URL", server.url.as_str()), ("GANTRY_TOKEN", token)],
        );
        assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    }
    let revoked = gantry(
        &[
            "server",
            "admin-token",
            "--data-dir",
            &dir_arg,
            "--revoke-others",
        ],
        &[],
    );
    assert_eq!(revoked.status.code(), Some(0), "{}", text(&revoked.stderr));
    let third = text(&revoked.stdout).trim().to_owned();
    let refused = gantry(
        &["project", "list"],
        &[
            ("GANTRY_URL", server.url.as_str()),
            ("GANTRY_TOKEN", first.as_str()),
        ],
    );
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("`gantry server admin-token --data-dir DIR`"),
        "{}",
        text(&refused.stderr)
    );
    let accepted = gantry(
        &["project", "list"],
        &[
            ("GANTRY_URL", server.url.as_str()),
            ("GANTRY_TOKEN", third.as_str()),
        ],
    );
    assert_eq!(
        accepted.status.code(),
        Some(0),
        "{}",
        text(&accepted.stderr)
    );
}

/// `gantry runner register --docker-pull-policy` writes `[runners.docker] pull_policy`;
/// a policy that is not one is refused, naming the three.
#[test]
fn register_writes_the_docker_pull_policy() {
    let data = tempfile::tempdir().expect("dir");
    let server = Server::start(&data.path().join("data"));
    let registration = server.token("GR1348941").expect("a registration token");
    let config = data.path().join("runner.toml");
    let config_arg = config.display().to_string();
    let register = |policy: &str| {
        gantry(
            &[
                "runner",
                "register",
                "--url",
                &server.url,
                "--token",
                &registration,
                "--executor",
                "docker",
                "--docker-pull-policy",
                policy,
                "--docker-pull-policy",
                "never",
                "--config",
                &config_arg,
            ],
            &[],
        )
    };
    let refused = register("sometimes");
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr)
            .contains("--docker-pull-policy \"sometimes\" is not a pull policy; expected one of always, never, if-not-present"),
        "{}",
        text(&refused.stderr)
    );
    let registered = register("if-not-present");
    assert_eq!(
        registered.status.code(),
        Some(0),
        "{}",
        text(&registered.stderr)
    );
    let written = std::fs::read_to_string(&config).expect("the configuration");
    assert!(
        written.contains("pull_policy = [\"if-not-present\", \"never\"]"),
        "{written}"
    );
}
