//! The server's HTTP surface, fed raw bytes: each input is what one client sends on one
//! connection to a real `gantry server` (the real edge, `http::serve_with`, over
//! loopback, with a real SQLite store in a temporary directory), so hyper's parsing, the
//! edge's rewriting of hyper's own answers, the credential gate, routing, and the
//! handlers' decoding of bodies (runner API JSON and forms, trace patches and their
//! `Content-Range`, multipart artifact uploads) all see it.
//!
//! Placeholders in the input are replaced before it is sent, so that the fuzzer can
//! reach what lies behind a credential: `@R@` a runner's token, `@G@` the registration
//! token, `@P@` the project's id, `@J@` the id of a running job and `@T@` its job token.
//! The admin token is not offered (its routes create projects from local paths). Before
//! each input the harness makes sure the runner and the running job exist (an input may
//! end the job or delete the runner).
//!
//! `GANTRY_FUZZ_SHOW=1` prints each exchange (`cargo fuzz run http -s none <file>`).
//!
//! The server runs with millisecond timeouts (head, body, keep-alive), so that it ends
//! every exchange itself, at once: the client never closes its side first (hyper, like
//! nginx, takes a half-closed connection for a client that is gone, and drops the
//! answer in flight).
//!
//! Checked for every input: no panic anywhere in the server (libFuzzer's panic hook
//! aborts), the server closes the connection within [`ANSWER_WAIT`], and every answer it sent is well framed and, when it is an error, a
//! JSON object with a `message` or `error` string (or the web UI's HTML page), never a
//! 5xx other than `505 HTTP Version Not Supported`.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use gantry_server::coordinator::{Coordinator, CoordinatorConfig};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How often a setup call of the harness is tried before it gives up.
const SETUP_TRIES: usize = 10;

/// How long the server may take to answer and close after the input's last byte.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

const PIPELINE: &str = "build:\n  script: [make]\n  artifacts:\n    paths: [out]\n";

struct Harness {
    rt: tokio::runtime::Runtime,
    addr: SocketAddr,
    coordinator: Coordinator,
    admin: String,
    registration: String,
    project: i64,
    world: Mutex<World>,
    /// Source addresses rotate over 127.0.0.2–251, so that closed connections'
    /// `TIME_WAIT` never exhausts one address's ports.
    next_source: AtomicU32,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// What the placeholders stand for now.
struct World {
    runner: String,
    job_id: i64,
    job_token: String,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(Harness::start)
}

impl Harness {
    fn start() -> Harness {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("temp dir");
        let repo = tempfile::tempdir().expect("temp dir");
        make_repo(repo.path());
        let (addr, coordinator, admin, registration) = rt.block_on(async {
            let url = gantry_store::testing::sqlite_url(&dir.path().join("gantry.db"));
            let store = gantry_store::Store::open(&url).await.expect("store");
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            let mut config =
                CoordinatorConfig::new(dir.path().join("data"), format!("http://{addr}"));
            // Job requests with nothing to give answer at once, not after 50 s.
            config.long_poll = Duration::from_millis(10);
            config.trace_body_idle_timeout = Duration::from_secs(2);
            let coordinator = gantry_server::testing::open_coordinator(store, config)
                .await
                .expect("coordinator");
            let tokens = coordinator.bootstrap().await.expect("bootstrap");
            // The server ends every exchange: the connection closes once the answers are
            // out and it is idle, or a head or body stops short (`408`). The client never
            // half-closes: hyper, like nginx, takes that for a client that is gone and
            // drops the answer of a request in flight.
            let limits = gantry_server::http::Limits {
                header_timeout: Duration::from_millis(10),
                body_timeout: Duration::from_millis(10),
                keepalive_timeout: Duration::from_millis(3),
                ..gantry_server::http::Limits::default()
            };
            tokio::spawn(gantry_server::http::serve_with(
                listener,
                coordinator.clone(),
                limits,
                std::future::pending(),
            ));
            (
                addr,
                coordinator,
                tokens.admin_token.expect("admin token"),
                tokens.registration_token.expect("registration token"),
            )
        });
        let mut harness = Harness {
            rt,
            addr,
            coordinator,
            admin,
            registration,
            project: 0,
            world: Mutex::new(World {
                runner: String::new(),
                job_id: 0,
                job_token: String::new(),
            }),
            next_source: AtomicU32::new(0),
            _dirs: (dir, repo),
        };
        let body = format!(
            r#"{{"name": "demo", "repo_url": {}}}"#,
            serde_json::Value::from(harness._dirs.1.path().to_string_lossy().into_owned())
        );
        let project = harness.admin_call("POST", "/api/v4/projects", &body, 201);
        harness.project = project["id"].as_i64().expect("project id");
        harness
    }

    /// A call the harness itself makes with the admin token; its JSON answer.
    fn admin_call(&self, method: &str, path: &str, body: &str, want: u16) -> serde_json::Value {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: g\r\nConnection: close\r\nPRIVATE-TOKEN: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.admin,
            body.len()
        );
        for _ in 0..SETUP_TRIES {
            if let Some((status, answer)) = self.call(&request) {
                assert_eq!(status, want, "{request}\n→ {answer}");
                return answer;
            }
        }
        panic!("{request}: no answer in {SETUP_TRIES} tries");
    }

    /// A call of the harness's own: the status and JSON of its answer, `None` when the
    /// server closed without one. That happens when this process is not scheduled for
    /// the server's 3 ms keep-alive between its connect and its write (the machine is
    /// busy); the caller tries again, and says so on stderr.
    fn call(&self, request: &str) -> Option<(u16, serde_json::Value)> {
        let raw = self.exchange(request.as_bytes()).unwrap_or_default();
        let answers = parse_answers(&raw).expect("setup answer");
        let Some(answer) = answers.first() else {
            eprintln!("harness: no answer to a setup call; trying again");
            return None;
        };
        let value = serde_json::from_slice(&answer.body).unwrap_or(serde_json::Value::Null);
        Some((answer.status, value))
    }

    /// Make sure the runner and a running job of it exist.
    fn ensure_world(&self) {
        let mut world = self.world.lock().unwrap_or_else(|e| e.into_inner());
        let (runner_ok, job_ok) = self.rt.block_on(async {
            let runner = self.coordinator.runner_by_token(&world.runner).await;
            let job = self
                .coordinator
                .executing_job_by_token(&world.job_token)
                .await;
            (matches!(runner, Ok(Some(_))), matches!(job, Ok(Some(_))))
        });
        if !runner_ok {
            let runner = self.admin_call(
                "POST",
                "/api/v4/user/runners",
                r#"{"runner_type": "instance_type"}"#,
                201,
            );
            world.runner = runner["token"].as_str().expect("runner token").to_owned();
        }
        if runner_ok && job_ok {
            return;
        }
        for _ in 0..SETUP_TRIES {
            // A job whose answer was lost stays running, unknown to anyone: another
            // pipeline gives the next one.
            self.admin_call(
                "POST",
                &format!("/api/v4/projects/{}/pipeline?ref=main", self.project),
                "",
                201,
            );
            let body = format!(
                r#"{{"token": "{}", "system_id": "s_0123456789ab", "info": {{"features": {{"refspecs": true}}}}}}"#,
                world.runner
            );
            let request = format!(
                "POST /api/v4/jobs/request HTTP/1.1\r\nHost: g\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            match self.call(&request) {
                Some((201, job)) => {
                    world.job_id = job["id"].as_i64().expect("job id");
                    world.job_token = job["token"].as_str().expect("job token").to_owned();
                    return;
                }
                Some((status, answer)) => {
                    eprintln!("harness: job request answered {status} {answer}; trying again");
                }
                None => {}
            }
        }
        panic!("no job for the harness's runner in {SETUP_TRIES} tries");
    }

    /// The input with its placeholders replaced. A `Content-Length` whose body holds
    /// placeholders grows by what they add, so that seeds written with placeholders
    /// stay well framed (requests are found by `\r\n\r\n` and `Content-Length`; a
    /// mutated input is framed however this finds it).
    fn substitute(&self, input: &[u8]) -> Vec<u8> {
        let world = self.world.lock().unwrap_or_else(|e| e.into_inner());
        let (project, job) = (self.project.to_string(), world.job_id.to_string());
        let values: [(&[u8], &[u8]); 5] = [
            (b"@R@", world.runner.as_bytes()),
            (b"@G@", self.registration.as_bytes()),
            (b"@P@", project.as_bytes()),
            (b"@J@", job.as_bytes()),
            (b"@T@", world.job_token.as_bytes()),
        ];
        let fill = |bytes: &[u8]| {
            let mut out = bytes.to_vec();
            for (placeholder, value) in values {
                out = replace(&out, placeholder, value);
            }
            out
        };
        let mut out = Vec::with_capacity(input.len() + 256);
        let mut rest = input;
        while let Some(end) = find(rest, b"\r\n\r\n") {
            let (head, after) = (&rest[..end + 4], &rest[end + 4..]);
            let length = content_length(head);
            let body = &after[..length.unwrap_or(0).min(after.len())];
            let filled = fill(body);
            let mut head = fill(head);
            if let Some(length) = length {
                let grown = (length + filled.len()).saturating_sub(body.len());
                head = set_content_length(&head, grown);
            }
            out.extend_from_slice(&head);
            out.extend_from_slice(&filled);
            rest = &after[body.len()..];
        }
        out.extend_from_slice(&fill(rest));
        out
    }

    /// Send `request` on a new connection and read until the server closes it. `None`
    /// when the server reset the connection (it may when it closes with unread input),
    /// so that what it sent cannot be trusted to be whole.
    fn exchange(&self, request: &[u8]) -> Option<Vec<u8>> {
        let n = self.next_source.fetch_add(1, Ordering::Relaxed) % 250;
        let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + n as u8));
        self.rt.block_on(async {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            // No TIME_WAIT on this side: the socket closes with a reset once read.
            socket.set_zero_linger().expect("SO_LINGER");
            socket.bind(SocketAddr::new(source, 0)).expect("bind");
            let stream = socket.connect(self.addr).await.expect("connect");
            let (mut read, mut write) = stream.into_split();
            let request = request.to_vec();
            let writer = tokio::spawn(async move {
                // The server may answer and close before it has read everything.
                let _ = write.write_all(&request).await;
                write
            });
            let mut raw = Vec::new();
            let read = tokio::time::timeout(ANSWER_WAIT, read.read_to_end(&mut raw)).await;
            let write = writer.await.expect("writer");
            let Ok(read) = read else {
                panic!(
                    "the server kept the connection open {ANSWER_WAIT:?} after the input; it sent {:?}",
                    String::from_utf8_lossy(&raw)
                );
            };
            drop(write);
            read.ok().map(|_| raw)
        })
    }
}

fn make_repo(dir: &Path) {
    std::fs::write(dir.join(".gitlab-ci.yml"), PIPELINE).expect("write");
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.email=f@example.com",
            "-c",
            "user.name=F",
            "commit",
            "-q",
            "-m",
            "init",
        ],
    ] {
        let status = Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .expect("git");
        assert!(status.success(), "git {args:?}");
    }
}

fn replace(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = haystack;
    while let Some(at) = find(rest, needle) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// The value of the first `Content-Length` header in `head`, when it is digits.
fn content_length(head: &[u8]) -> Option<usize> {
    let at = content_length_value(head)?;
    let digits: Vec<u8> = head[at..]
        .iter()
        .copied()
        .take_while(u8::is_ascii_digit)
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// `head` with the digits of its first `Content-Length` replaced by `length`.
fn set_content_length(head: &[u8], length: usize) -> Vec<u8> {
    let Some(at) = content_length_value(head) else {
        return head.to_vec();
    };
    let digits = head[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    let mut out = head[..at].to_vec();
    out.extend_from_slice(length.to_string().as_bytes());
    out.extend_from_slice(&head[at + digits..]);
    out
}

/// Where the value of the first `Content-Length:` header of `head` begins.
fn content_length_value(head: &[u8]) -> Option<usize> {
    const NAME: &[u8] = b"\ncontent-length:";
    let lower = head.to_ascii_lowercase();
    let at = find(&lower, NAME)? + NAME.len();
    let spaces = head[at..].iter().take_while(|&&b| b == b' ').count();
    Some(at + spaces)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One answer of the server.
struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

/// The answers in what the server sent, in order; an error names what is malformed.
/// Answers to `HEAD` carry no body whatever their `Content-Length` says, and which
/// request an answer belongs to is not tracked: [`check`] reads only the first answer
/// when the input has a `HEAD`.
fn parse_answers(raw: &[u8]) -> Result<Vec<Answer>, String> {
    let mut answers = Vec::new();
    let mut rest = raw;
    while !rest.is_empty() {
        let end = find(rest, b"\r\n\r\n").ok_or("an answer's head does not end")?;
        let head = std::str::from_utf8(&rest[..end]).map_err(|_| "a head is not UTF-8")?;
        rest = &rest[end + 4..];
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or("");
        let mut words = status_line.splitn(3, ' ');
        if !matches!(words.next(), Some("HTTP/1.1" | "HTTP/1.0")) {
            return Err(format!("not a status line: {status_line:?}"));
        }
        let status: u16 = words
            .next()
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("no status code: {status_line:?}"))?;
        let (mut length, mut chunked, mut content_type) = (None, false, String::new());
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| format!("not a header: {line:?}"))?;
            let value = value.trim();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => {
                    length = Some(
                        value
                            .parse::<usize>()
                            .map_err(|_| format!("Content-Length {value:?}"))?,
                    );
                }
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "content-type" => content_type = value.to_owned(),
                _ => {}
            }
        }
        let no_body = status / 100 == 1 || status == 204 || status == 304;
        let body = if no_body {
            Vec::new()
        } else if chunked {
            let mut body = Vec::new();
            loop {
                let line_end = find(rest, b"\r\n").ok_or("a chunk size line does not end")?;
                let size = std::str::from_utf8(&rest[..line_end])
                    .ok()
                    .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
                    .ok_or("a chunk size is malformed")?;
                rest = &rest[line_end + 2..];
                if size == 0 {
                    // No trailers from this server.
                    rest = rest
                        .strip_prefix(b"\r\n")
                        .ok_or("the last chunk lacks CRLF")?;
                    break;
                }
                if rest.len() < size + 2 {
                    // Cut off: the body failed midway (a download whose file broke).
                    body.extend_from_slice(&rest[..size.min(rest.len())]);
                    rest = &[];
                    break;
                }
                body.extend_from_slice(&rest[..size]);
                rest = &rest[size + 2..];
            }
            body
        } else if let Some(length) = length {
            let take = length.min(rest.len());
            let body = rest[..take].to_vec();
            rest = &rest[take..];
            body
        } else {
            // Until the connection closes.
            std::mem::take(&mut rest).to_vec()
        };
        answers.push(Answer {
            status,
            content_type,
            body,
        });
    }
    Ok(answers)
}

/// Panics unless every answer in `raw` is well framed and every error answer is JSON
/// with a `message` or `error` string (or the UI's HTML), and none is a 5xx other than
/// `505`.
fn check(input: &[u8], raw: &[u8]) {
    let answers = match parse_answers(raw) {
        Ok(answers) => answers,
        Err(why) => panic!("{why}: {:?}", String::from_utf8_lossy(raw)),
    };
    let checked = if find(input, b"HEAD").is_some() {
        answers.len().min(1)
    } else {
        answers.len()
    };
    for answer in &answers[..checked] {
        let shown = || {
            format!(
                "{} {} {:?}",
                answer.status,
                answer.content_type,
                String::from_utf8_lossy(&answer.body)
            )
        };
        assert!(
            answer.status < 500 || answer.status == 505,
            "a server error for a client's input: {}",
            shown()
        );
        if answer.status < 400 || answer.content_type.starts_with("text/html") {
            continue;
        }
        assert!(
            answer.content_type.starts_with("application/json"),
            "an error that is not JSON: {}",
            shown()
        );
        let value: serde_json::Value = serde_json::from_slice(&answer.body)
            .unwrap_or_else(|e| panic!("an error body that is not JSON ({e}): {}", shown()));
        assert!(
            value["message"].is_string() || value["error"].is_string(),
            "an error without `message` or `error`: {}",
            shown()
        );
    }
}

fuzz_target!(|input: &[u8]| {
    let harness = harness();
    harness.ensure_world();
    let request = harness.substitute(input);
    let raw = harness.exchange(&request);
    if std::env::var_os("GANTRY_FUZZ_SHOW").is_some() {
        eprintln!(
            "---- sent\n{}\n---- received\n{}",
            String::from_utf8_lossy(&request),
            raw.as_deref()
                .map_or("(reset)".into(), String::from_utf8_lossy)
        );
    }
    if let Some(raw) = raw {
        check(&request, &raw);
    }
});
