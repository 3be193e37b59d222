//! The job state machine (spec `ci-yaml.md` §5) end to end over real HTTP: a real server on
//! loopback, a real git repository, a client acting as a runner through the Runner API
//! (`POST /jobs/request`, `PUT /jobs/:id`, `PATCH /jobs/:id/trace`) and a user through the
//! user API (play, cancel, retry). Statuses are read back from the user API only.
//!
//! Every case in this file is a `.gitlab-ci.yml` and a script, run by the one function
//! [`check`]; each names the rules of [`RULES`] it covers, and
//! [`every_rule_has_a_case`] fails when a rule has none.
//!
//! Script language, one command per line (`#` starts a comment):
//!
//! - `take A [B …]` — job requests until exactly these jobs are held (each answer must be
//!   one of them); `idle` — a job request gets nothing (`204`).
//! - `trace A TEXT…` — `PATCH` the job's trace with `TEXT` and a newline.
//! - `ok A`, `fail A [exit=N] [reason=R]` — the final `PUT` (default: 200 and `Job-Status`
//!   = the job's new status); `alive A` — a keep-alive `PUT state=running`. Any of them may
//!   end in `=> CODE STATUS`: the HTTP status and `Job-Status` header expected instead.
//! - `pass A` — `take A` then `ok A`.
//! - user actions: `play A`, `cancel A`, `retry A`, `cancel-pipeline`, `retry-pipeline`.
//! - `graceful` — job requests from now on advertise `cancel_gracefully`.
//! - `expect pipeline=S A=S1[,S2…] A.reason=R A.exit=N A.allow_failure=B` — statuses from
//!   the user API; `A=S1,S2` lists every attempt of `A` oldest first, and every job of
//!   the pipeline must be named. `A.reason` is the latest attempt's, `A@2.reason` the
//!   second attempt's (`none` for an absent value). `await …` — the same, polled for up to 20 s (timers).

#![allow(clippy::panic)]

use crate::http_support;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use gantry_server::processor::Watchdog;
use http_support::{Options, Repo, TestServer};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

struct Case {
    /// Ids from [`RULES`], space-separated.
    rules: &'static str,
    ci: &'static str,
    script: &'static str,
    /// `Some`: the coordinator's timers run with these thresholds.
    timers: Option<Watchdog>,
}

/// The state-machine rules this suite drives over HTTP.
#[rustfmt::skip]
const RULES: &[(&str, &str)] = &[
    ("stages", "5.3/5.4 stages run in order, jobs of one stage in parallel"),
    ("on-failure", "5.5 when: on_failure runs after a failure"),
    ("always", "5.5 when: always runs after success and after failure"),
    ("skipped", "5.5 jobs whose prev is not VALID are skipped (later stages after a failure, on_failure after success)"),
    ("allow-failure", "5.5/5.6 an allowed failure lets later stages and the pipeline pass"),
    ("allow-failure-exit-codes", "allow_failure:exit_codes decides at failure time"),
    ("retry-max", "5.7 retry:max creates new attempts up to the limit"),
    ("retry-when", "5.7 retry:when filters failure reasons"),
    ("retry-exit-codes", "5.7 retry:exit_codes"),
    ("retry-user", "5.7 a user retries a job: new attempt, skipped dependents reset"),
    ("retry-pipeline", "5.7 a user retries a pipeline: failed jobs get new attempts"),
    ("manual-optional", "5.13 optional manual: later stages proceed, DAG dependents skipped until played"),
    ("manual-blocking", "5.13 blocking manual: the pipeline is blocked (manual) until played"),
    ("delayed", "5.13 when: delayed is scheduled, then queued when its time comes"),
    ("cancel-pipeline", "5.11 canceling a pipeline cancels running, pending and created jobs; the runner is told"),
    ("cancel-job", "5.2 canceling one job; later stages are skipped after a cancel"),
    ("cancel-graceful", "5.2 a graceful runner's job goes canceling, then canceled on its final update"),
    ("needs-overtake", "5.4 a job with needs starts before earlier stages finish"),
    ("needs-empty", "5.4 needs: [] starts at once"),
    ("needs-failed", "5.5 a failed need skips on_success dependents and runs on_failure ones"),
    ("job-timeout", "runner API §9: a job past its timeout fails job_execution_timeout"),
    ("silent-runner", "a running job without updates fails stuck_or_timeout_failure (and may be retried)"),
];

const STAGES: Case = Case {
    rules: "stages",
    ci: r#"
stages: [build, test, deploy]
build: {stage: build, script: [make]}
unit: {stage: test, script: [make test]}
lint: {stage: test, script: [make lint]}
deploy: {stage: deploy, script: [make deploy]}
"#,
    script: r#"
expect pipeline=pending build=pending unit=created lint=created deploy=created
take build
expect pipeline=running build=running unit=created lint=created deploy=created
idle                      # the next stage waits
trace build compiling
ok build
expect pipeline=running build=success unit=pending lint=pending deploy=created
take unit lint
ok unit
expect pipeline=running build=success unit=success lint=running deploy=created
ok lint
pass deploy
expect pipeline=success build=success unit=success lint=success deploy=success
idle
"#,
    timers: None,
};

const FAILURE_FLOW: Case = Case {
    rules: "on-failure always skipped",
    ci: r#"
stages: [build, test, cleanup]
build: {stage: build, script: [make]}
test: {stage: test, script: [make test]}
notify: {stage: cleanup, when: on_failure, script: [notify]}
tidy: {stage: cleanup, when: always, script: [tidy]}
"#,
    script: r#"
take build
trace build error: no rule to make target
fail build exit=2
expect pipeline=running build=failed build.reason=script_failure build.exit=2 test=skipped notify=pending tidy=pending
take notify tidy
ok notify
ok tidy
expect pipeline=failed build=failed test=skipped notify=success tidy=success
"#,
    timers: None,
};

const SUCCESS_FLOW: Case = Case {
    rules: "always skipped",
    ci: r#"
stages: [build, test, cleanup]
build: {stage: build, script: [make]}
test: {stage: test, script: [make test]}
notify: {stage: cleanup, when: on_failure, script: [notify]}
tidy: {stage: cleanup, when: always, script: [tidy]}
"#,
    script: r#"
pass build
pass test
expect pipeline=running build=success test=success notify=skipped tidy=pending
pass tidy
expect pipeline=success build=success test=success notify=skipped tidy=success
"#,
    timers: None,
};

const ALLOW_FAILURE: Case = Case {
    rules: "allow-failure",
    ci: r#"
stages: [test, deploy]
flaky: {stage: test, allow_failure: true, script: [x]}
deploy: {stage: deploy, script: [x]}
"#,
    script: r#"
take flaky
fail flaky exit=1
expect pipeline=running flaky=failed flaky.allow_failure=true deploy=pending # it was running
pass deploy
expect pipeline=success flaky=failed deploy=success
"#,
    timers: None,
};

const ALLOW_FAILURE_EXIT_CODES: Case = Case {
    rules: "allow-failure-exit-codes skipped",
    ci: r#"
stages: [test, deploy]
a: {stage: test, allow_failure: {exit_codes: [42]}, script: [x]}
b: {stage: test, allow_failure: {exit_codes: [42]}, script: [x]}
deploy: {stage: deploy, script: [x]}
"#,
    script: r#"
take a b
fail a exit=42
expect pipeline=running a=failed a.allow_failure=true a.exit=42 b=running deploy=created
fail b exit=1
expect pipeline=failed a=failed b=failed b.allow_failure=false b.exit=1 deploy=skipped
"#,
    timers: None,
};

const RETRY_MAX: Case = Case {
    rules: "retry-max",
    ci: "flaky: {script: [x], retry: 2}\n",
    script: r#"
take flaky
fail flaky
expect pipeline=running flaky=failed,pending # it was running
take flaky
fail flaky
expect pipeline=running flaky=failed,failed,pending flaky@2.reason=script_failure
take flaky
fail flaky
expect pipeline=failed flaky=failed,failed,failed
idle
"#,
    timers: None,
};

const RETRY_WHEN: Case = Case {
    rules: "retry-when",
    ci: r#"
a: {script: [x], retry: {max: 2, when: [runner_system_failure]}}
b: {script: [x], retry: {max: 2, when: [runner_system_failure]}}
"#,
    script: r#"
take a b
fail a reason=script_failure
expect pipeline=running a=failed a.reason=script_failure b=running
fail b exit=0 reason=runner_system_failure
expect pipeline=running a=failed b=failed,pending b@1.reason=runner_system_failure b.reason=none
pass b
expect pipeline=failed a=failed b=failed,success
"#,
    timers: None,
};

const RETRY_EXIT_CODES: Case = Case {
    rules: "retry-exit-codes",
    ci: r#"
a: {script: [x], retry: {max: 1, exit_codes: [137]}}
b: {script: [x], retry: {max: 1, exit_codes: [137]}}
"#,
    script: r#"
take a b
fail a exit=1
expect pipeline=running a=failed b=running
fail b exit=137
expect pipeline=running a=failed b=failed,pending
take b
fail b exit=137
expect pipeline=failed a=failed b=failed,failed b.exit=137
"#,
    timers: None,
};

const USER_RETRY: Case = Case {
    rules: "retry-user retry-pipeline skipped",
    ci: r#"
stages: [build, test]
build: {stage: build, script: [x]}
test: {stage: test, script: [x]}
"#,
    script: r#"
take build
fail build
expect pipeline=failed build=failed test=skipped
retry build
expect pipeline=running build=failed,pending test=created # it has run before (GitLab's state machine)
pass build
expect pipeline=running build=failed,success test=pending
take test
fail test exit=3
expect pipeline=failed build=failed,success test=failed
retry-pipeline
expect pipeline=running build=failed,success test=failed,pending
pass test
expect pipeline=success build=failed,success test=failed,success
"#,
    timers: None,
};

const MANUAL_OPTIONAL: Case = Case {
    rules: "manual-optional",
    ci: r#"
stages: [build, deploy, verify]
build: {stage: build, script: [x]}
deploy: {stage: deploy, when: manual, script: [x]}
verify: {stage: verify, script: [x]}
smoke: {stage: verify, needs: [deploy], script: [x]}
"#,
    script: r#"
pass build
expect pipeline=running build=success deploy=manual verify=pending smoke=skipped
pass verify
expect pipeline=success build=success deploy=manual verify=success smoke=skipped
idle
play deploy
expect pipeline=running build=success deploy=pending verify=success smoke=created
pass deploy
expect pipeline=running build=success deploy=success verify=success smoke=pending
pass smoke
expect pipeline=success build=success deploy=success verify=success smoke=success
"#,
    timers: None,
};

const MANUAL_BLOCKING: Case = Case {
    rules: "manual-blocking",
    ci: r#"
stages: [build, deploy, verify]
build: {stage: build, script: [x]}
deploy: {stage: deploy, when: manual, allow_failure: false, script: [x]}
verify: {stage: verify, script: [x]}
"#,
    script: r#"
pass build
expect pipeline=manual build=success deploy=manual verify=created
idle
play deploy
expect pipeline=running build=success deploy=pending verify=created
pass deploy
pass verify
expect pipeline=success build=success deploy=success verify=success
"#,
    timers: None,
};

const DELAYED: Case = Case {
    rules: "delayed",
    ci: r#"
stages: [build, deploy]
build: {stage: build, script: [x]}
deploy: {stage: deploy, when: delayed, start_in: 1 second, script: [x]}
"#,
    script: r#"
pass build
expect pipeline=scheduled build=success deploy=scheduled
await pipeline=running build=success deploy=pending
pass deploy
expect pipeline=success build=success deploy=success
"#,
    timers: Some(Watchdog {
        timeout_grace: 300,
        running_without_update: 3600,
        pending_outdated: 86_400,
        scheduled_outdated: 3600,
    }),
};

const CANCEL_PIPELINE: Case = Case {
    rules: "cancel-pipeline",
    ci: r#"
stages: [build, test]
a: {stage: build, script: [x]}
b: {stage: build, script: [x]}
test: {stage: test, script: [x]}
"#,
    script: r#"
take a
trace a working
expect pipeline=running a=running b=pending test=created
cancel-pipeline
expect pipeline=canceled a=canceled b=canceled test=canceled
idle                      # the pending job is not handed out any more
trace a still working => 403 canceled
alive a => 403 canceled
ok a => 403 canceled
expect pipeline=canceled a=canceled b=canceled test=canceled
"#,
    timers: None,
};

const CANCEL_JOB: Case = Case {
    rules: "cancel-job skipped",
    ci: r#"
stages: [build, test]
a: {stage: build, script: [x]}
b: {stage: build, script: [x]}
test: {stage: test, when: always, script: [x]}
"#,
    script: r#"
take a b
cancel a
expect pipeline=running a=canceled b=running test=created
alive a => 403 canceled
ok b
expect pipeline=canceled a=canceled b=success test=skipped
"#,
    timers: None,
};

const CANCEL_GRACEFUL: Case = Case {
    rules: "cancel-graceful",
    ci: "build: {script: [x]}\n",
    script: r#"
graceful
take build
cancel-pipeline
expect pipeline=canceling build=canceling
alive build => 200 canceling
trace build running after_script
fail build exit=130
expect pipeline=canceled build=canceled
"#,
    timers: None,
};

const NEEDS: Case = Case {
    rules: "needs-overtake needs-empty",
    ci: r#"
stages: [build, test]
build_a: {stage: build, script: [x]}
build_b: {stage: build, script: [x]}
test_a: {stage: test, needs: [build_a], script: [x]}
test_b: {stage: test, script: [x]}
lint: {stage: test, needs: [], script: [x]}
"#,
    script: r#"
expect pipeline=pending build_a=pending build_b=pending test_a=created test_b=created lint=pending
take build_a build_b lint
ok lint
ok build_a
expect pipeline=running build_a=success build_b=running test_a=pending test_b=created lint=success
pass test_a
expect pipeline=running build_a=success build_b=running test_a=success test_b=created lint=success
ok build_b
pass test_b
expect pipeline=success build_a=success build_b=success test_a=success test_b=success lint=success
"#,
    timers: None,
};

const NEEDS_FAILED: Case = Case {
    rules: "needs-failed",
    ci: r#"
stages: [build, test]
build: {stage: build, script: [x]}
other: {stage: build, script: [x]}
test: {stage: test, needs: [build], script: [x]}
rescue: {stage: test, needs: [build], when: on_failure, script: [x]}
"#,
    script: r#"
take build other
fail build
expect pipeline=running build=failed other=running test=skipped rescue=pending
pass rescue
ok other
expect pipeline=failed build=failed other=success test=skipped rescue=success
"#,
    timers: None,
};

const JOB_TIMEOUT: Case = Case {
    rules: "job-timeout",
    ci: "slow: {script: [sleep 3600], timeout: 1s}\nquick: {script: [x]}\n",
    script: r#"
take slow quick
trace slow sleeping
alive slow
await pipeline=running slow=failed slow.reason=job_execution_timeout quick=running
ok slow => 403 failed
ok quick
expect pipeline=failed slow=failed slow.reason=job_execution_timeout quick=success
"#,
    timers: Some(Watchdog {
        timeout_grace: 0,
        running_without_update: 3600,
        pending_outdated: 86_400,
        scheduled_outdated: 3600,
    }),
};

const SILENT_RUNNER: Case = Case {
    rules: "silent-runner retry-when",
    ci: r#"
silent: {script: [x], retry: {max: 1, when: [stuck_or_timeout_failure]}}
"#,
    script: r#"
take silent
await pipeline=running silent=failed,pending silent@1.reason=stuck_or_timeout_failure silent.reason=none
ok silent => 403 failed
take silent
alive silent
ok silent
expect pipeline=success silent=failed,success
"#,
    timers: Some(Watchdog {
        timeout_grace: 300,
        running_without_update: 2,
        pending_outdated: 86_400,
        scheduled_outdated: 3600,
    }),
};

/// One test per case (so they run in parallel and fail alone), and [`CASES`] for
/// [`every_rule_has_a_case`].
macro_rules! cases {
    ($($name:ident => $case:ident),* $(,)?) => {
        const CASES: &[(&str, &Case)] = &[$((stringify!($name), &$case)),*];
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                check(stringify!($name), &$case).await;
            }
        )*
    };
}

cases! {
    stages => STAGES,
    failure_flow => FAILURE_FLOW,
    success_flow => SUCCESS_FLOW,
    allow_failure => ALLOW_FAILURE,
    allow_failure_exit_codes => ALLOW_FAILURE_EXIT_CODES,
    retry_max => RETRY_MAX,
    retry_when => RETRY_WHEN,
    retry_exit_codes => RETRY_EXIT_CODES,
    user_retry => USER_RETRY,
    manual_optional => MANUAL_OPTIONAL,
    manual_blocking => MANUAL_BLOCKING,
    delayed => DELAYED,
    cancel_pipeline => CANCEL_PIPELINE,
    cancel_job => CANCEL_JOB,
    cancel_graceful => CANCEL_GRACEFUL,
    needs => NEEDS,
    needs_failed => NEEDS_FAILED,
    job_timeout => JOB_TIMEOUT,
    silent_runner => SILENT_RUNNER,
}

#[test]
fn every_rule_has_a_case() {
    for (id, what) in RULES {
        assert!(
            CASES
                .iter()
                .any(|(_, c)| c.rules.split_whitespace().any(|r| r == *id)),
            "rule `{id}` ({what}) has no case"
        );
    }
    for (name, case) in CASES {
        for rule in case.rules.split_whitespace() {
            assert!(
                RULES.iter().any(|(id, _)| *id == rule),
                "case {name} cites unknown rule `{rule}`"
            );
        }
    }
}

/// A job the runner holds.
struct Held {
    id: i64,
    token: String,
    /// Trace bytes sent so far.
    sent: usize,
}

/// One test's server, project, pipeline and runner.
struct Run {
    server: TestServer,
    project: i64,
    pipeline: i64,
    runner: String,
    graceful: bool,
    held: HashMap<String, Held>,
    /// `case:line` of the step running, for messages.
    at: String,
}

async fn check(name: &str, case: &Case) {
    let server = TestServer::start_with(Options {
        long_poll: Duration::from_millis(300),
        timers: case.timers,
        ..Options::default()
    })
    .await;
    let repo = Repo::new(&[(".gitlab-ci.yml", case.ci)]);
    let project = server.create_project("state-machine", &repo).await["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("{name}: project id"));
    let pipeline = server.create_pipeline(project, "main").await["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("{name}: pipeline id"));
    let (_, runner) = server.create_runner(json!({ "run_untagged": true })).await;
    let mut run = Run {
        server,
        project,
        pipeline,
        runner,
        graceful: false,
        held: HashMap::new(),
        at: String::new(),
    };
    for (n, line) in case.script.lines().enumerate() {
        let line = line.split_once('#').map_or(line, |(code, _)| code).trim();
        if line.is_empty() {
            continue;
        }
        run.at = format!("{name}:{}: `{line}`", n + 1);
        run.step(line).await;
    }
}

/// `… => CODE STATUS`: the expected HTTP status and `Job-Status` instead of the default.
fn split_outcome(line: &str) -> (&str, Option<(u16, String)>) {
    match line.split_once("=>") {
        Some((head, tail)) => {
            let mut words = tail.split_whitespace();
            let code = words
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or_else(|| panic!("`{line}`: `=> CODE STATUS`"));
            let status = words
                .next()
                .unwrap_or_else(|| panic!("`{line}`: `=> CODE STATUS`"))
                .to_owned();
            (head.trim(), Some((code, status)))
        }
        None => (line, None),
    }
}

impl Run {
    async fn step(&mut self, line: &str) {
        let (line, outcome) = split_outcome(line);
        let mut words = line.split_whitespace();
        let command = words.next().unwrap_or_default();
        let args: Vec<&str> = words.collect();
        let at = self.at.clone();
        let arg = |i: usize| -> &str {
            args.get(i)
                .copied()
                .unwrap_or_else(|| panic!("{at}: argument {} missing", i + 1))
        };
        match command {
            "take" => self.take(&args).await,
            "idle" => self.idle().await,
            "pass" => {
                self.take(&[arg(0)]).await;
                self.finish(arg(0), "success", &[], outcome).await;
            }
            "ok" => self.finish(arg(0), "success", &args[1..], outcome).await,
            "fail" => self.finish(arg(0), "failed", &args[1..], outcome).await,
            "alive" => self.alive(arg(0), outcome).await,
            "trace" => {
                let text = format!("{}\n", args[1..].join(" "));
                self.trace(arg(0), text.as_bytes(), outcome).await;
            }
            "graceful" => self.graceful = true,
            "play" => self.user(arg(0), "play", StatusCode::OK).await,
            "cancel" => self.user(arg(0), "cancel", StatusCode::CREATED).await,
            "retry" => self.user(arg(0), "retry", StatusCode::CREATED).await,
            "cancel-pipeline" | "retry-pipeline" => {
                let action = command.trim_end_matches("-pipeline");
                let path = format!(
                    "projects/{}/pipelines/{}/{action}",
                    self.project, self.pipeline
                );
                let (status, body) = self.server.admin(Method::POST, &path, None).await;
                assert_eq!(status, StatusCode::CREATED, "{}: {body}", self.at);
            }
            "expect" => {
                let expected = parse_expectation(&args, &self.at);
                let actual = self.state().await;
                if let Some(diff) = mismatch(&expected, &actual) {
                    panic!("{}: {diff}\nstate: {}", self.at, describe(&actual));
                }
            }
            "await" => {
                let expected = parse_expectation(&args, &self.at);
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let actual = self.state().await;
                    match mismatch(&expected, &actual) {
                        None => break,
                        Some(diff) if Instant::now() > deadline => {
                            panic!(
                                "{}: still not there after 20 s: {diff}\nstate: {}",
                                self.at,
                                describe(&actual)
                            )
                        }
                        Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            }
            other => panic!("{}: unknown command `{other}`", self.at),
        }
    }

    async fn request(&self) -> reqwest::Response {
        let body = json!({
            "token": self.runner,
            "system_id": "s_0123456789ab",
            "info": { "features": { "refspecs": true, "cancel_gracefully": self.graceful } },
        });
        self.server
            .http
            .post(self.server.api("jobs/request"))
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{}: job request: {e}", self.at))
    }

    async fn take(&mut self, names: &[&str]) {
        let mut wanted: Vec<&str> = names.to_vec();
        while !wanted.is_empty() {
            let response = self.request().await;
            assert_eq!(
                response.status(),
                StatusCode::CREATED,
                "{}: still waiting for {wanted:?}, no job came",
                self.at
            );
            let payload: Value = response
                .json()
                .await
                .unwrap_or_else(|e| panic!("{}: payload: {e}", self.at));
            let name = payload["job_info"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let Some(i) = wanted.iter().position(|w| *w == name) else {
                panic!("{}: got job `{name}`, expected one of {wanted:?}", self.at);
            };
            wanted.remove(i);
            let id = payload["id"]
                .as_i64()
                .unwrap_or_else(|| panic!("{}: job id in {payload}", self.at));
            let token = payload["token"].as_str().unwrap_or_default().to_owned();
            assert!(
                token.starts_with("glcbt-"),
                "{}: job token {token}",
                self.at
            );
            self.held.insert(name, Held { id, token, sent: 0 });
        }
    }

    async fn idle(&self) {
        let response = self.request().await;
        if response.status() != StatusCode::NO_CONTENT {
            let status = response.status();
            let body: Value = response.json().await.unwrap_or_default();
            panic!(
                "{}: expected no job (204), got {status}: job `{}`",
                self.at, body["job_info"]["name"]
            );
        }
    }

    fn held(&self, name: &str) -> &Held {
        self.held
            .get(name)
            .unwrap_or_else(|| panic!("{}: the runner does not hold `{name}`", self.at))
    }

    /// Check an answer's status and `Job-Status` against `outcome` (default: `code` and
    /// no check of the header).
    async fn answer(
        &self,
        what: &str,
        response: reqwest::Response,
        code: StatusCode,
        outcome: &Option<(u16, String)>,
    ) -> Option<String> {
        let status = response.status();
        let job_status = response
            .headers()
            .get("job-status")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.text().await.unwrap_or_default();
        let (want_code, want_job_status) = match outcome {
            Some((c, s)) => (*c, Some(s.as_str())),
            None => (code.as_u16(), None),
        };
        assert_eq!(status.as_u16(), want_code, "{}: {what}: {body}", self.at);
        if let Some(want) = want_job_status {
            assert_eq!(
                job_status.as_deref(),
                Some(want),
                "{}: {what}: Job-Status",
                self.at
            );
        }
        job_status
    }

    async fn trace(&mut self, name: &str, data: &[u8], outcome: Option<(u16, String)>) {
        let held = self.held(name);
        let (id, token, start) = (held.id, held.token.clone(), held.sent);
        let response = self
            .server
            .http
            .patch(self.server.api(&format!("jobs/{id}/trace")))
            .header("JOB-TOKEN", &token)
            .header(
                "Content-Range",
                format!("{start}-{}", start + data.len() - 1),
            )
            .body(data.to_vec())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{}: trace: {e}", self.at));
        let accepted = outcome.is_none();
        self.answer("trace", response, StatusCode::ACCEPTED, &outcome)
            .await;
        if accepted {
            if let Some(h) = self.held.get_mut(name) {
                h.sent += data.len();
            }
        }
    }

    async fn put(&self, name: &str, body: Value) -> reqwest::Response {
        let id = self.held(name).id;
        self.server
            .http
            .put(self.server.api(&format!("jobs/{id}")))
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{}: update: {e}", self.at))
    }

    async fn alive(&self, name: &str, outcome: Option<(u16, String)>) {
        let held = self.held(name);
        let response = self
            .put(name, json!({ "token": held.token, "state": "running" }))
            .await;
        let outcome = outcome.or(Some((200, "running".to_owned())));
        self.answer("keep-alive", response, StatusCode::OK, &outcome)
            .await;
    }

    /// The final update: `state` with `exit=N` / `reason=R` options.
    async fn finish(
        &self,
        name: &str,
        state: &str,
        options: &[&str],
        outcome: Option<(u16, String)>,
    ) {
        let held = self.held(name);
        let mut body = json!({
            "token": held.token,
            "state": state,
            "output": { "bytesize": held.sent },
            "exit_code": if state == "failed" { 1 } else { 0 },
        });
        if state == "failed" {
            body["failure_reason"] = json!("script_failure");
        }
        for option in options {
            match option.split_once('=') {
                Some(("exit", n)) => {
                    body["exit_code"] = json!(
                        n.parse::<i64>()
                            .unwrap_or_else(|_| panic!("{}: exit={n}", self.at))
                    )
                }
                Some(("reason", r)) => body["failure_reason"] = json!(r),
                _ => panic!("{}: unknown option `{option}`", self.at),
            }
        }
        let response = self.put(name, body).await;
        let job_status = self
            .answer(
                &format!("final update ({state})"),
                response,
                StatusCode::OK,
                &outcome,
            )
            .await;
        if outcome.is_none() {
            // Applied: the header carries the job's new status (a retried job stays failed).
            let expected = if state == "success" {
                "success"
            } else {
                "failed"
            };
            let job_status = job_status.unwrap_or_default();
            assert!(
                job_status == expected || job_status == "canceled",
                "{}: Job-Status {job_status} after {state}",
                self.at
            );
        }
    }

    /// A user action on the latest attempt of `name`.
    async fn user(&self, name: &str, action: &str, code: StatusCode) {
        let jobs = self.jobs().await;
        let id = jobs
            .iter()
            .filter(|j| j["name"] == name)
            .filter_map(|j| j["id"].as_i64())
            .max()
            .unwrap_or_else(|| panic!("{}: no job `{name}`", self.at));
        let (status, body) = self
            .server
            .admin(
                Method::POST,
                &format!("projects/{}/jobs/{id}/{action}", self.project),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, code, "{}: {action} {name}: {body}", self.at);
    }

    async fn jobs(&self) -> Vec<Value> {
        let path = format!(
            "projects/{}/pipelines/{}/jobs?include_retried=true",
            self.project, self.pipeline
        );
        let (status, body) = self.server.admin(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{}: {body}", self.at);
        body.as_array().cloned().unwrap_or_default()
    }

    /// `pipeline`, `NAME` (attempts oldest first, comma-joined), `NAME.reason`, `NAME.exit`,
    /// `NAME.allow_failure` (latest attempt) and `NAME@N.…` (attempt N) — as the user API
    /// shows them.
    async fn state(&self) -> BTreeMap<String, String> {
        let (status, pipeline) = self
            .server
            .admin(
                Method::GET,
                &format!("projects/{}/pipelines/{}", self.project, self.pipeline),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{}: {pipeline}", self.at);
        let mut out = BTreeMap::new();
        out.insert(
            "pipeline".to_owned(),
            pipeline["status"].as_str().unwrap_or_default().to_owned(),
        );
        let mut jobs = self.jobs().await;
        jobs.sort_by_key(|j| j["id"].as_i64());
        let text = |v: &Value| match v {
            Value::Null => "none".to_owned(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        for j in &jobs {
            let name = j["name"].as_str().unwrap_or_default().to_owned();
            let status = text(&j["status"]);
            out.entry(name.clone())
                .and_modify(|s: &mut String| *s = format!("{s},{status}"))
                .or_insert(status);
            let attempt = j["attempt"].as_i64().unwrap_or(0);
            for (key, field) in [
                ("reason", "failure_reason"),
                ("exit", "exit_code"),
                ("allow_failure", "allow_failure"),
            ] {
                out.insert(format!("{name}.{key}"), text(&j[field]));
                out.insert(format!("{name}@{attempt}.{key}"), text(&j[field]));
            }
        }
        out
    }
}

fn parse_expectation(args: &[&str], at: &str) -> BTreeMap<String, String> {
    args.iter()
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("{at}: `{kv}` is not key=value"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// What differs; every job of the pipeline must be named.
fn mismatch(
    expected: &BTreeMap<String, String>,
    actual: &BTreeMap<String, String>,
) -> Option<String> {
    let mut diffs = Vec::new();
    for (k, v) in expected {
        match actual.get(k) {
            Some(a) if a == v => {}
            Some(a) => diffs.push(format!("{k}={a} (expected {v})")),
            None => diffs.push(format!("{k} is absent (expected {v})")),
        }
    }
    for k in actual.keys().filter(|k| !k.contains('.')) {
        if !expected.contains_key(k) {
            diffs.push(format!("{k} is not named in the expectation"));
        }
    }
    (!diffs.is_empty()).then(|| diffs.join(", "))
}

fn describe(state: &BTreeMap<String, String>) -> String {
    state
        .iter()
        .filter(|(k, _)| !k.contains('.'))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}
