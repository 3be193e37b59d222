//! OpenTelemetry traces end to end (issue 37): real OTLP receivers in the test — a gRPC
//! server built from the `opentelemetry-proto` crate's tonic `TraceService`, and an HTTP
//! one taking `POST /v1/traces` as protobuf or JSON — and the real binaries: `gantry
//! server` + `gantry runner run` (shell executor), and `gantry run` (also with
//! `--trace-file`). Checked: one trace per pipeline; the span tree across the
//! coordinator/runner boundary (pipeline → job → runner execution → sections; creation
//! and queue spans); the CI/CD convention and GitLab attributes; span status from the
//! result; and that a job's script sees its job span's `traceparent` in `TRACEPARENT`.
//! The gRPC receiver also takes OTLP metrics (`MetricsService`): the server's `cicd.*`
//! and `gantry.job.*` metrics and the runner's capacity arrive under their
//! OpenTelemetry names, with the conventions' attributes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use prost::Message as _;

// ---- the receivers --------------------------------------------------------------------

/// Every export a receiver got, with how it came (`grpc`, `http/protobuf`, `http/json`).
#[derive(Clone, Default)]
struct Received(
    Arc<Mutex<Vec<(&'static str, ExportTraceServiceRequest)>>>,
    Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
);

impl Received {
    /// Every data point received so far, newest last.
    fn points(&self) -> Vec<Point> {
        let requests = self.1.lock().unwrap();
        requests.iter().flat_map(points_of).collect()
    }

    fn push(&self, how: &'static str, request: ExportTraceServiceRequest) {
        self.0.lock().unwrap().push((how, request));
    }

    fn spans(&self) -> Vec<Span> {
        let requests = self.0.lock().unwrap();
        requests.iter().flat_map(|(_, r)| spans_of(r)).collect()
    }

    fn protocols(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().iter().map(|(how, _)| *how).collect()
    }
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.push("grpc", request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Received {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.1.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// One metric data point as the checks read it: a gauge's or sum's value, a
/// histogram's count.
#[derive(Clone, Debug)]
struct Point {
    service: String,
    name: String,
    attributes: HashMap<String, String>,
    value: f64,
}

fn points_of(request: &ExportMetricsServiceRequest) -> Vec<Point> {
    let mut out = Vec::new();
    for rm in &request.resource_metrics {
        let service = rm
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| value(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                let attributes = |kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]| {
                    kvs.iter()
                        .map(|kv| {
                            (
                                kv.key.clone(),
                                value(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                            )
                        })
                        .collect::<HashMap<_, _>>()
                };
                let number = |v: Option<&Number>| match v {
                    Some(Number::AsDouble(d)) => *d,
                    #[allow(clippy::cast_precision_loss)]
                    Some(Number::AsInt(i)) => *i as f64,
                    None => f64::NAN,
                };
                let mut push = |attributes, value| {
                    out.push(Point {
                        service: service.clone(),
                        name: m.name.clone(),
                        attributes,
                        value,
                    });
                };
                match &m.data {
                    Some(Data::Gauge(g)) => g.data_points.iter().for_each(|p| {
                        push(attributes(&p.attributes), number(p.value.as_ref()));
                    }),
                    Some(Data::Sum(sum)) => sum.data_points.iter().for_each(|p| {
                        push(attributes(&p.attributes), number(p.value.as_ref()));
                    }),
                    #[allow(clippy::cast_precision_loss)]
                    Some(Data::Histogram(h)) => h.data_points.iter().for_each(|p| {
                        push(attributes(&p.attributes), p.count as f64);
                    }),
                    _ => {}
                }
            }
        }
    }
    out
}

/// Waits until a point of `service` named `name` with `attributes` reaches `at_least`.
async fn wait_point(
    received: &Received,
    service: &str,
    name: &str,
    attributes: &[(&str, &str)],
    at_least: f64,
) -> Point {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = received.points().into_iter().rev().find(|p| {
            p.service == service
                && p.name == name
                && p.value >= at_least
                && attributes
                    .iter()
                    .all(|(k, v)| p.attributes.get(*k).map(String::as_str) == Some(*v))
        });
        if let Some(point) = found {
            return point;
        }
        assert!(
            Instant::now() < deadline,
            "no {name} ≥ {at_least} with {attributes:?} from {service} within 30 s; received: {:#?}",
            received.points()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A gRPC OTLP receiver (traces and metrics) on a loopback port:
/// `http://127.0.0.1:<port>`.
async fn grpc_receiver() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Received::default();
    let service = TraceServiceServer::new(received.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .add_service(MetricsServiceServer::new(received.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (format!("http://{addr}"), received)
}

/// An OTLP/HTTP receiver on a loopback port (`POST /v1/traces`, protobuf or JSON):
/// `http://127.0.0.1:<port>`.
async fn http_receiver() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Received::default();
    let state = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let state = state.clone();
                async move {
                    let json = headers
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| v.starts_with("application/json"));
                    if json {
                        let request: ExportTraceServiceRequest =
                            serde_json::from_slice(&body).expect("OTLP JSON");
                        state.push("http/json", request);
                        ([("content-type", "application/json")], b"{}".to_vec())
                    } else {
                        let request =
                            ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                        state.push("http/protobuf", request);
                        ([("content-type", "application/x-protobuf")], Vec::new())
                    }
                }
            },
        ),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), received)
}

/// One span as the checks read it.
#[derive(Clone, Debug)]
struct Span {
    trace: String,
    id: String,
    parent: String,
    name: String,
    kind: i32,
    /// `status.code`: 0 unset, 1 ok, 2 error.
    status: i32,
    status_message: String,
    service: String,
    attributes: HashMap<String, String>,
    start: u64,
    end: u64,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn value(v: Option<&Any>) -> String {
    match v {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn spans_of(request: &ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| value(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for ss in &rs.scope_spans {
            for s in &ss.spans {
                out.push(Span {
                    trace: hex(&s.trace_id),
                    id: hex(&s.span_id),
                    parent: hex(&s.parent_span_id),
                    name: s.name.clone(),
                    kind: s.kind,
                    status: s.status.as_ref().map_or(0, |st| st.code),
                    status_message: s
                        .status
                        .as_ref()
                        .map(|st| st.message.clone())
                        .unwrap_or_default(),
                    service: service.clone(),
                    attributes: s
                        .attributes
                        .iter()
                        .map(|kv| {
                            (
                                kv.key.clone(),
                                value(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                            )
                        })
                        .collect(),
                    start: s.start_time_unix_nano,
                    end: s.end_time_unix_nano,
                });
            }
        }
    }
    out
}

/// Waits until `received` holds spans named as each of `names`.
async fn wait_spans(received: &Received, names: &[&str]) -> Vec<Span> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let spans = received.spans();
        if names.iter().all(|n| spans.iter().any(|s| s.name == *n)) {
            // Spans of the same batch window may still be on their way.
            tokio::time::sleep(Duration::from_millis(700)).await;
            return received.spans();
        }
        assert!(
            Instant::now() < deadline,
            "no spans {names:?} within 60 s; received: {:#?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---- the checks -----------------------------------------------------------------------

const PIPELINE: &str = r#"
stages: [build, test]
include:
  - local: ci/checks.yml

compile:
  stage: build
  script:
    - echo "traceparent=$TRACEPARENT"
"#;

/// Included by [`PIPELINE`].
const CHECKS: &str = r#"
checks:
  stage: test
  allow_failure: true
  script:
    - exit 3
"#;

fn named<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one span `{name}`: {spans:#?}");
    found[0]
}

fn attr<'a>(span: &'a Span, key: &str) -> &'a str {
    span.attributes
        .get(key)
        .unwrap_or_else(|| panic!("span `{}` has no `{key}`: {:?}", span.name, span.attributes))
}

/// The tree of one pipeline run, wherever its spans came from: returns the trace id.
/// `coordinator`/`runner`: the services the two sides report as; `executor`: the runner's.
fn check_tree(
    spans: &[Span],
    pipeline_id: &str,
    sha: &str,
    coordinator: &str,
    runner: &str,
    executor: &str,
) -> String {
    // One trace: every span has the pipeline span's trace id.
    let root = spans
        .iter()
        .find(|s| s.name.starts_with("RUN "))
        .unwrap_or_else(|| panic!("no pipeline span: {spans:#?}"));
    for s in spans {
        assert_eq!(s.trace, root.trace, "span `{}` is in another trace", s.name);
    }
    assert_eq!(root.parent, "", "the pipeline span is the root");
    assert_eq!(root.kind, 2, "SERVER");
    assert_eq!(root.service, coordinator);
    assert_eq!(attr(root, "cicd.pipeline.run.id"), pipeline_id);
    assert_eq!(attr(root, "cicd.pipeline.result"), "success");
    assert_eq!(attr(root, "cicd.pipeline.action.name"), "RUN");
    assert_eq!(attr(root, "vcs.ref.head.name"), "main");
    assert_eq!(attr(root, "vcs.ref.head.type"), "branch");
    assert_eq!(attr(root, "vcs.ref.head.revision"), sha);
    assert_eq!(attr(root, "vcs.provider.name"), "gitlab");
    assert_eq!(attr(root, "gitlab.pipeline.id"), pipeline_id);
    assert_eq!(attr(root, "gitlab.pipeline.iid"), "1");
    assert!(!attr(root, "gitlab.project.path").is_empty());
    assert_eq!(root.status, 1, "OK");

    // Creation: fetching the commit and compiling, under the pipeline span.
    let create = named(spans, "create pipeline");
    assert_eq!(create.parent, root.id);
    let compile = named(spans, "compile configuration");
    assert_eq!(compile.parent, create.id);
    assert_eq!(named(spans, "fetch commit").parent, create.id);
    // The files compiling read: the configuration and its include.
    for file in ["read .gitlab-ci.yml", "read ci/checks.yml"] {
        let read = spans
            .iter()
            .find(|s| s.name == file)
            .unwrap_or_else(|| panic!("no `{file}` span: {spans:#?}"));
        assert_eq!(read.parent, compile.id, "{file}");
    }

    for (job, stage, result, status) in [
        ("compile", "build", "success", 1),
        ("checks", "test", "failure", 2),
    ] {
        let span = named(spans, job);
        assert_eq!(span.parent, root.id, "job `{job}` under the pipeline");
        assert_eq!(span.service, coordinator);
        assert_eq!(attr(span, "cicd.pipeline.task.name"), job);
        assert_eq!(attr(span, "cicd.pipeline.task.type"), stage);
        assert_eq!(attr(span, "cicd.pipeline.task.run.result"), result);
        assert_eq!(attr(span, "cicd.pipeline.run.id"), pipeline_id);
        let id = attr(span, "cicd.pipeline.task.run.id");
        assert_eq!(attr(span, "gitlab.job.id"), id);
        assert!(
            attr(span, "cicd.pipeline.task.run.url.full").ends_with(&format!("/-/jobs/{id}")),
            "{:?}",
            span.attributes
        );
        assert!(!attr(span, "cicd.worker.id").is_empty());
        assert_eq!(span.status, status, "job `{job}`: {span:?}");
        // Its queue wait, inside it.
        let queue: Vec<&Span> = spans
            .iter()
            .filter(|s| s.name == "queue" && s.parent == span.id)
            .collect();
        assert_eq!(queue.len(), 1, "job `{job}`'s queue span");
        assert!(queue[0].start >= span.start && queue[0].end <= span.end);
        // The runner's execution, a child across the boundary, and its sections.
        let execution = named(spans, &format!("execute {job}"));
        assert_eq!(
            execution.parent, span.id,
            "the runner's span under job `{job}`"
        );
        assert_eq!(execution.service, runner);
        assert_eq!(attr(execution, "cicd.pipeline.task.run.id"), id);
        assert_eq!(attr(execution, "cicd.pipeline.task.run.result"), result);
        assert_eq!(attr(execution, "gitlab.runner.executor"), executor);
        assert_eq!(execution.status, status);
        let sections: Vec<&str> = spans
            .iter()
            .filter(|s| s.parent == execution.id)
            .map(|s| s.name.as_str())
            .collect();
        for section in ["prepare_executor", "get_sources", "step_script"] {
            assert!(
                sections.contains(&section),
                "job `{job}` sections: {sections:?}"
            );
        }
    }
    let checks = named(spans, "checks");
    assert_eq!(attr(checks, "error.type"), "script_failure");
    assert_eq!(checks.status_message, "script_failure");
    root.trace.clone()
}

/// The `traceparent` the `compile` job's script printed is its job span's.
fn check_traceparent(log: &str, spans: &[Span]) {
    let job = named(spans, "compile");
    let expected = format!("traceparent=00-{}-{}-01", job.trace, job.id);
    assert!(
        log.contains(&expected),
        "`{expected}` not in the job's log:\n{log}"
    );
}

// ---- gantry server + gantry runner ----------------------------------------------------

fn gantry() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gantry"));
    for (key, _) in std::env::vars() {
        if key.starts_with("OTEL_") || key.starts_with("GANTRY_") {
            c.env_remove(key);
        }
    }
    c
}

use gantry_test_support::git;

fn repo(ci: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join(".gitlab-ci.yml"), ci).unwrap();
    std::fs::create_dir_all(dir.path().join("ci")).unwrap();
    std::fs::write(dir.path().join("ci/checks.yml"), CHECKS).unwrap();
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-qm", "init"]);
    dir
}

/// A child process killed when dropped, its stderr lines on a channel.
struct Process {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Process {
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gantry starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Process {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                self.seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
        }
        panic!("no `{needle}` line; it said:\n{}", self.seen.join("\n"));
    }

    fn token(&mut self, prefix: &str) -> String {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(line);
        }
        self.seen
            .iter()
            .find_map(|line| {
                let start = line.find(prefix)?;
                line[start..]
                    .split(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_')
                    .next()
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("no {prefix} token:\n{}", self.seen.join("\n")))
    }

    /// SIGTERM (the runner: SIGQUIT, finish and stop) and wait: spans are flushed at exit.
    fn stop(mut self, signal: &str) {
        let pid = self.child.id().to_string();
        Command::new("kill").args([signal, &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "{pid} did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn output(command: &mut Command) -> String {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_and_runner_join_one_trace_over_grpc() {
    server_and_runner(&["--executor", "shell"], "shell").await;
}

/// The same through the Docker executor (the jobs in `gantry-test/busybox`, built by
/// `scripts/test-images.sh`; fails loudly without an engine or the image).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_and_docker_runner_join_one_trace_over_grpc() {
    let inspect = Command::new("docker")
        .args(["image", "inspect", "gantry-test/busybox:latest"])
        .output()
        .expect("the docker CLI runs");
    assert!(
        inspect.status.success(),
        "the test image gantry-test/busybox is missing (or no engine answers): run scripts/test-images.sh\n{}",
        String::from_utf8_lossy(&inspect.stderr)
    );
    server_and_runner(
        &[
            "--executor",
            "docker",
            "--docker-image",
            "gantry-test/busybox:latest",
        ],
        "docker",
    )
    .await;
}

/// A pipeline through `gantry server` and `gantry runner run`, registered with
/// `register` (its executor), both exporting over gRPC.
async fn server_and_runner(register: &[&str], executor: &str) {
    let (endpoint, received) = grpc_receiver().await;
    let data = tempfile::tempdir().unwrap();
    // The server by its variables, the runner by its config.toml's `[otel]`.
    let mut command = gantry();
    command
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--poll-interval",
            "0",
            "--data-dir",
        ])
        .arg(data.path().join("data"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300");
    let mut server = Process::spawn(command);
    let listening = server.wait_for("gantry server: listening on ");
    let url = listening
        .trim_start_matches("gantry server: listening on ")
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let admin = server.token("glpat-");
    let registration = server.token("GR1348941");
    assert!(
        server
            .seen
            .iter()
            .any(|l| l.contains(&format!("info: traces to {endpoint} over grpc"))),
        "{}",
        server.seen.join("\n")
    );

    let repo = repo(PIPELINE);
    let sha = git(repo.path(), &["rev-parse", "HEAD"]);
    let client = |args: &[&str]| {
        output(
            gantry()
                .args(args)
                .env("GANTRY_URL", &url)
                .env("GANTRY_TOKEN", &admin),
        )
    };
    let project: serde_json::Value = serde_json::from_str(&client(&[
        "project",
        "create",
        "demo",
        "--repo",
        &repo.path().display().to_string(),
    ]))
    .unwrap();
    let config = data.path().join("config.toml");
    output(
        gantry()
            .args([
                "runner",
                "register",
                "--url",
                &url,
                "--token",
                &registration,
                "--config",
                &config.display().to_string(),
            ])
            .args(register),
    );
    // No registry is reachable: the test image is local.
    let mut text = std::fs::read_to_string(&config).unwrap().replace(
        "[runners.docker]\n",
        "[runners.docker]\npull_policy = \"if-not-present\"\n",
    );
    text.push_str(&format!(
        "\n[otel]\nendpoint = \"{endpoint}\"\nprotocol = \"grpc\"\nservice_name = \"ci-runner\"\n"
    ));
    std::fs::write(&config, text).unwrap();
    let mut command = gantry();
    command
        .args(["runner", "run", "--config"])
        .arg(&config)
        .current_dir(data.path())
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300");
    let runner = Process::spawn(command);

    let pipeline: serde_json::Value = serde_json::from_str(&client(&[
        "pipeline",
        "create",
        "--project",
        "demo",
        "--ref",
        "main",
    ]))
    .unwrap();
    let pipeline_id = pipeline["id"].to_string();
    let http = reqwest::Client::new();
    let api = |path: String| {
        let (http, url, admin) = (http.clone(), url.clone(), admin.clone());
        async move {
            http.get(format!("{url}/api/v4/{path}"))
                .header("PRIVATE-TOKEN", admin)
                .send()
                .await
                .unwrap()
        }
    };
    let project_id = project["id"].to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let p: serde_json::Value = api(format!("projects/{project_id}/pipelines/{pipeline_id}"))
            .await
            .json()
            .await
            .unwrap();
        if p["status"] == "success" {
            break;
        }
        if p["status"] == "failed" || Instant::now() >= deadline {
            let jobs: Vec<serde_json::Value> = api(format!(
                "projects/{project_id}/pipelines/{pipeline_id}/jobs"
            ))
            .await
            .json()
            .await
            .unwrap();
            let mut logs = String::new();
            for job in jobs {
                let log = api(format!("projects/{project_id}/jobs/{}/trace", job["id"]))
                    .await
                    .text()
                    .await
                    .unwrap();
                logs.push_str(&format!(
                    "--- {} ({}):\n{log}\n",
                    job["name"], job["status"]
                ));
            }
            panic!("the pipeline did not succeed: {p}\n{logs}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let spans = wait_spans(
        &received,
        &[
            "RUN gantry/demo",
            "compile",
            "checks",
            "execute compile",
            "execute checks",
        ],
    )
    .await;
    assert!(received.protocols().iter().all(|p| *p == "grpc"));
    check_tree(
        &spans,
        &pipeline_id,
        &sha,
        "gantry-server",
        "ci-runner",
        executor,
    );
    let compile = named(&spans, "compile");
    let log = api(format!(
        "projects/{project_id}/jobs/{}/trace",
        attr(compile, "gitlab.job.id")
    ))
    .await
    .text()
    .await
    .unwrap();
    check_traceparent(&log, &spans);
    check_metrics(&received).await;
    runner.stop("-TERM");
    server.stop("-TERM");
}

/// The metrics of that pipeline (`compile` succeeds, `checks` fails allowed): the run's
/// `executing` state with its result, the jobs' queue waits and durations, the failure
/// reason, the runners by state, the runner's capacity.
async fn check_metrics(received: &Received) {
    let server = "gantry-server";
    let run = [
        ("cicd.pipeline.name", "gantry/demo"),
        ("cicd.pipeline.run.state", "executing"),
        ("cicd.pipeline.result", "success"),
    ];
    wait_point(received, server, "cicd.pipeline.run.duration", &run, 1.0).await;
    let pending = [
        ("cicd.pipeline.name", "gantry/demo"),
        ("cicd.pipeline.run.state", "pending"),
    ];
    let point = wait_point(
        received,
        server,
        "cicd.pipeline.run.duration",
        &pending,
        1.0,
    )
    .await;
    assert!(
        !point.attributes.contains_key("cicd.pipeline.result"),
        "the result is on the state it was reached in: {point:?}"
    );
    wait_point(received, server, "gantry.job.queue.duration", &[], 2.0).await;
    wait_point(
        received,
        server,
        "gantry.job.duration",
        &[("gitlab.job.status", "failed")],
        1.0,
    )
    .await;
    wait_point(
        received,
        server,
        "gantry.job.failures",
        &[("gitlab.job.failure_reason", "script_failure")],
        1.0,
    )
    .await;
    wait_point(
        received,
        server,
        "cicd.worker.count",
        &[("cicd.worker.state", "available")],
        1.0,
    )
    .await;
    wait_point(
        received,
        "ci-runner",
        "gantry.runner.capacity.limit",
        &[],
        1.0,
    )
    .await;
}

// ---- gantry run ---------------------------------------------------------------------

/// `gantry run` in `repo` with `env`; its stdout (the jobs' logs) and stderr.
fn gantry_run(repo: &Path, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let home = tempfile::tempdir().unwrap();
    let out = gantry()
        .args(["run", "--executor", "shell", "--no-color"])
        .args(args)
        .current_dir(repo)
        .env("HOME", home.path())
        .env("GANTRY_CACHE_DIR", home.path().join("cache"))
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CI")
        .env_remove("GITLAB_CI")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    (stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gantry_run_exports_over_http_and_writes_the_trace_file() {
    let (endpoint, received) = http_receiver().await;
    let repo = repo(PIPELINE);
    let sha = git(repo.path(), &["rev-parse", "HEAD"]);
    // Outside the checkout: `gantry run` runs the working tree as it is.
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("spans.jsonl");
    let (stdout, stderr) = tokio::task::spawn_blocking({
        let (repo, file, endpoint) = (repo.path().to_owned(), file.clone(), endpoint.clone());
        move || {
            gantry_run(
                &repo,
                &["--trace-file", &file.display().to_string()],
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                    ("OTEL_SERVICE_NAME", "laptop"),
                ],
            )
        }
    })
    .await
    .unwrap();
    assert!(stderr.contains("info: traces to "), "{stderr}");
    // Exported before the exit: nothing to wait for.
    let spans = received.spans();
    assert!(received.protocols().iter().all(|p| *p == "http/protobuf"));
    let trace = check_tree(&spans, "1", &sha, "laptop", "laptop", "shell");
    check_traceparent(&stdout, &spans);

    // The file: OTLP JSON, one export request a line, the same spans.
    let text = std::fs::read_to_string(&file).unwrap();
    let mut from_file = Vec::new();
    for line in text.lines() {
        let request: ExportTraceServiceRequest =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        from_file.extend(spans_of(&request));
        let raw: serde_json::Value = serde_json::from_str(line).unwrap();
        let first = &raw["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert!(
            first["traceId"].as_str().is_some_and(|t| t.len() == 32),
            "hex ids: {first}"
        );
        assert!(first["kind"].is_number(), "integer enums: {first}");
    }
    assert_eq!(
        check_tree(&from_file, "1", &sha, "laptop", "laptop", "shell"),
        trace
    );
    let mut ids: Vec<&str> = spans.iter().map(|s| s.id.as_str()).collect();
    let mut file_ids: Vec<&str> = from_file.iter().map(|s| s.id.as_str()).collect();
    ids.sort_unstable();
    file_ids.sort_unstable();
    assert_eq!(ids, file_ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gantry_run_exports_otlp_json_and_is_silent_when_off() {
    let (endpoint, received) = http_receiver().await;
    let repo = repo(PIPELINE);
    let sha = git(repo.path(), &["rev-parse", "HEAD"]);
    let (_, stderr) = tokio::task::spawn_blocking({
        let (repo, endpoint) = (repo.path().to_owned(), endpoint.clone());
        move || {
            gantry_run(
                &repo,
                &["--otel-endpoint", &endpoint, "--otel-protocol", "http/json"],
                &[],
            )
        }
    })
    .await
    .unwrap();
    assert!(stderr.contains("over http/json"), "{stderr}");
    assert!(received.protocols().iter().all(|p| *p == "http/json"));
    check_tree(
        &received.spans(),
        "1",
        &sha,
        "gantry-run",
        "gantry-run",
        "shell",
    );

    // Off by default: no endpoint, no spans, no TRACEPARENT, nothing said.
    let before = received.spans().len();
    let (stdout, stderr) = tokio::task::spawn_blocking({
        let repo = repo.path().to_owned();
        move || gantry_run(&repo, &[], &[])
    })
    .await
    .unwrap();
    assert!(!stderr.contains("traces to"), "{stderr}");
    assert!(
        stdout.contains("traceparent=\n") || stdout.contains("traceparent=\r\n"),
        "{stdout}"
    );
    assert_eq!(received.spans().len(), before);

    // A bad setting names its place.
    let home = tempfile::tempdir().unwrap();
    let out = gantry()
        .args(["run", "--executor", "shell"])
        .current_dir(repo.path())
        .env("HOME", home.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "udp")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "error: OTEL_EXPORTER_OTLP_PROTOCOL: `udp` is not valid; give `grpc`, `http/protobuf` or `http/json`"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
