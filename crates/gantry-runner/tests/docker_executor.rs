//! The Docker executor end to end: our coordinator, a real git repository, our runner's
//! poll loop with `executor = "docker"`, and the real Docker engine. The images come
//! from `scripts/test-images.sh` (no registry is reachable); every test fails, saying
//! why, when no engine answers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::docker_support;

use std::time::{Duration, Instant};

use docker_support::*;
use gantry_runner::job::JobEnding;

const LIMIT: Duration = Duration::from_secs(120);
const RUNNER_DOCKER: &str =
    "image = \"gantry-test/busybox:latest\"\npull_policy = [\"if-not-present\"]";

fn assert_no_leftovers(token: &str) {
    let left = leftovers(token);
    assert!(left.is_empty(), "the runner left these behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_with_entrypoint_override_runs_the_script_in_the_container() {
    require_docker().await;
    let ci = r#"
build:
  image:
    name: gantry-test/entrypoint:latest
    entrypoint: ["/bin/sh", "-c", "export FROM_ENTRYPOINT=yes; exec \"$@\"", "--"]
  variables:
    GREETING: "hello from $CI_JOB_NAME"
  script:
    - echo "entrypoint=$FROM_ENTRYPOINT"
    - echo "$GREETING"
    - test "$(pwd)" = "$CI_PROJECT_DIR"
    - cat README.md
    - head -n 1 /etc/passwd
    - echo to-stderr >&2
    - ls -l /bin/sh
failing:
  image: gantry-test/busybox:latest
  script:
    - echo before
    - exit 3
"#;
    let repo = Repo::new(&[
        (".gitlab-ci.yml", ci),
        ("README.md", "the readme, checked out on the host\n"),
    ]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER);
    let summary = runner.run(2, LIMIT).await;
    assert_eq!(summary.jobs.len(), 2);
    for report in &summary.jobs {
        let trace = server.trace(project, report.job_id).await;
        let name = server.job(project, report.job_id).await["name"]
            .as_str()
            .unwrap()
            .to_owned();
        match name.as_str() {
            "build" => {
                assert_eq!(report.ending, JobEnding::Success, "{trace}");
                assert!(
                    trace.contains("Preparing the \"docker\" executor"),
                    "{trace}"
                );
                assert!(
                    trace
                        .contains("Using Docker executor with image gantry-test/entrypoint:latest"),
                    "{trace}"
                );
                assert!(trace.contains("entrypoint=yes"), "{trace}");
                assert!(trace.contains("hello from build"), "{trace}");
                assert!(
                    trace.contains("the readme, checked out on the host"),
                    "{trace}"
                );
                assert!(
                    trace.contains("root:x:0:0"),
                    "the job runs in the image's file system: {trace}"
                );
                assert!(trace.contains("to-stderr"), "{trace}");
            }
            "failing" => {
                assert_eq!(
                    report.ending,
                    JobEnding::ScriptFailure { exit_code: 3 },
                    "{trace}"
                );
                assert!(trace.contains("before"), "{trace}");
                assert!(trace.contains("ERROR: Job failed: exit code 3"), "{trace}");
            }
            other => panic!("unexpected job {other}"),
        }
    }
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_is_reached_by_its_aliases() {
    require_docker().await;
    let ci = r#"
test:
  variables:
    SECOND_ALIAS: www
  services:
    - name: gantry-test/http:latest
      alias: web,$SECOND_ALIAS
      variables:
        SERVICE_ONLY: "yes"
  script:
    - wget -qO- http://web:8080/
    - wget -qO- http://www:8080/index.html
    - wget -qO- http://gantry-test__http:8080/
    - wget -qO- http://gantry-test-http:8080/
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER);
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert_eq!(report.ending, JobEnding::Success, "{trace}");
    assert!(
        trace.contains("Starting service gantry-test/http:latest"),
        "{trace}"
    );
    assert!(
        trace.contains("Waiting for services to be up and running"),
        "{trace}"
    );
    assert!(!trace.contains("probably didn't start properly"), "{trace}");
    assert_eq!(
        trace.matches("hello from the service").count(),
        4,
        "{trace}"
    );
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_script_runs_in_the_container_the_script_ran_in() {
    require_docker().await;
    let ci = r#"
test:
  image: gantry-test/busybox:latest
  script:
    - echo "left by the script" > /tmp/note
  after_script:
    - cat /tmp/note
    - rm /tmp/note && echo "removed by after_script"
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER);
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert_eq!(report.ending, JobEnding::Success, "{trace}");
    assert!(trace.contains("left by the script"), "{trace}");
    assert!(trace.contains("removed by after_script"), "{trace}");
    assert!(!trace.contains("after_script failed"), "{trace}");
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_entrypoint_sees_the_job_variables() {
    require_docker().await;
    let ci = r#"
test:
  image:
    name: gantry-test/busybox:latest
    entrypoint: ["sh", "-c", "echo \"entrypoint sees $GREETING\"; exec \"$@\"", "sh"]
  variables:
    GREETING: hello
  script:
    - echo "script sees $GREETING"
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER);
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert_eq!(report.ending, JobEnding::Success, "{trace}");
    assert!(trace.contains("entrypoint sees hello"), "{trace}");
    assert!(trace.contains("script sees hello"), "{trace}");
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_is_build_on_its_network() {
    require_docker().await;
    let ci = r#"
test:
  image: gantry-test/busybox:latest
  services: [gantry-test/http:latest]
  script:
    - nslookup build | tee ns.txt
    - 'grep -q "Address: $(hostname -i)" ns.txt && echo build-is-this-container'
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER);
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert_eq!(report.ending, JobEnding::Success, "{trace}");
    assert!(trace.contains("build-is-this-container"), "{trace}");
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkout_is_writable_for_any_user_of_the_image() {
    require_docker().await;
    let ci = r#"
test:
  image:
    name: gantry-test/busybox:latest
    docker: {user: nobody}
  script:
    - id -u
    - stat -c '%a %n' README.md run.sh . .git
    - echo "appended by nobody" >> README.md
    - mkdir made-by-nobody
"#;
    let repo = Repo::new(&[
        (".gitlab-ci.yml", ci),
        ("README.md", "the readme\n"),
        ("run.sh", "#!/bin/sh\n"),
    ]);
    repo.make_executable("run.sh");
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER);
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert_eq!(report.ending, JobEnding::Success, "{trace}");
    for line in ["65534", "666 README.md", "777 run.sh", "777 .", "777 .git"] {
        assert!(trace.contains(line), "`{line}` missing: {trace}");
    }
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_and_cache_pass_between_container_jobs() {
    require_docker().await;
    let ci = r#"
stages: [build, test]
build:
  stage: build
  variables:
    OUT: $CI_PROJECT_DIR/out
  cache:
    key: deps
    paths: [$CI_PROJECT_DIR/vendor/]
  script:
    # gitlab-runner's Docker executor's paths, whatever the runner's builds_dir.
    - echo "dirs=$CI_BUILDS_DIR $CI_PROJECT_DIR $(pwd)"
    - test "$CI_BUILDS_DIR" = /builds
    - test "$CI_PROJECT_DIR" = "/builds/$CI_PROJECT_PATH"
    - test "$(pwd)" = "$CI_PROJECT_DIR"
    - mkdir -p out vendor
    - echo "artifact made in a container" > out/result.txt
    - echo "cached in a container" > vendor/lib.txt
  artifacts:
    paths: [$OUT, "${CI_PROJECT_DIR}/out"]
test:
  stage: test
  cache:
    key: deps
    paths: [vendor/]
    policy: pull
  script:
    - cat out/result.txt
    - cat vendor/lib.txt
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER);
    let summary = runner.run(2, LIMIT).await;
    assert_eq!(summary.jobs.len(), 2);
    let build = summary.jobs.first().unwrap();
    let trace = server.trace(project, build.job_id).await;
    assert_eq!(build.ending, JobEnding::Success, "{trace}");
    assert!(trace.contains("dirs=/builds /builds/"), "{trace}");
    // Absolute paths under $CI_PROJECT_DIR name the files the host archives.
    assert!(
        !trace.contains("no matching files") && !trace.contains("not a subpath"),
        "{trace}"
    );
    let test = summary.jobs.last().unwrap();
    let trace = server.trace(project, test.job_id).await;
    assert_eq!(test.ending, JobEnding::Success, "{trace}");
    assert!(trace.contains("artifact made in a container"), "{trace}");
    assert!(trace.contains("cached in a container"), "{trace}");
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_leaves_no_container_behind() {
    require_docker().await;
    let ci = r#"
slow:
  variables:
    RUNNER_SCRIPT_TIMEOUT: 2s
  services:
    - gantry-test/http:latest
  script:
    - echo sleeping
    - sleep 300
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER);
    let started = Instant::now();
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert!(
        matches!(report.ending, JobEnding::Timeout { .. }),
        "{:?}\n{trace}",
        report.ending
    );
    assert!(trace.contains("sleeping"), "{trace}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the timeout took {:?}",
        started.elapsed()
    );
    assert_no_leftovers(&token);
}

/// With job records kept (`gantry runner run`), stages run detached, their files
/// written by the image's user, whoever it is; exit codes and both streams as
/// attached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_jobs_run_their_stages_detached_as_any_user_of_the_image() {
    require_docker().await;
    let ci = r#"
test:
  image:
    name: gantry-test/busybox:latest
    docker: {user: nobody}
  script:
    - id -u
    - echo "to stdout"
    - echo "to stderr" >&2
    - printf 'no line end'
    - exit 3
  after_script:
    - echo "after_script as $(id -u) sees $CI_JOB_STATUS"
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER).with_journal();
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert_eq!(
        report.ending,
        JobEnding::ScriptFailure { exit_code: 3 },
        "{trace}"
    );
    for line in [
        "\n65534\n",
        "\nto stdout\n",
        "\nto stderr\n",
        "no line end",
        "after_script as 65534 sees failed",
    ] {
        assert!(trace.contains(line), "{line:?} missing: {trace}");
    }
    assert_no_leftovers(&token);
    let records = std::fs::read_dir(runner.dir.path().join(".runner_jobs"))
        .unwrap()
        .count();
    assert_eq!(records, 0, "the record goes with the job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_jobs_detached_stage_stops_at_its_timeout() {
    require_docker().await;
    let ci = r#"
slow:
  variables:
    RUNNER_SCRIPT_TIMEOUT: 2s
  script:
    - echo sleeping
    - sleep 300
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER).with_journal();
    let started = Instant::now();
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert!(
        matches!(report.ending, JobEnding::Timeout { .. }),
        "{:?}\n{trace}",
        report.ending
    );
    assert!(trace.contains("sleeping"), "{trace}");
    assert!(
        trace.contains(
            "step_script could not run to completion because the timeout of 2s was exceeded"
        ),
        "{trace}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the timeout took {:?}",
        started.elapsed()
    );
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_leaves_no_container_behind() {
    require_docker().await;
    let ci = r#"
slow:
  services:
    - gantry-test/http:latest
  script:
    - echo sleeping
    - while true; do echo tick; sleep 1; done
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, pipeline) = server.project_with_pipeline(&repo).await;
    let (_, jobs) = server
        .admin(
            reqwest::Method::GET,
            &format!("projects/{project}/pipelines/{pipeline}/jobs"),
            None,
        )
        .await;
    let id = jobs[0]["id"].as_i64().expect("job id");
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, RUNNER_DOCKER);
    let poll = runner.run(1, LIMIT);
    let cancel = async {
        // Wait until the script runs, then cancel through the user API.
        let deadline = Instant::now() + LIMIT;
        loop {
            assert!(Instant::now() < deadline, "the job never started sleeping");
            if server.trace(project, id).await.contains("sleeping") {
                assert!(
                    !leftovers(&token).is_empty(),
                    "the job's containers are there while it runs"
                );
                server.cancel(project, id).await;
                return id;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let (summary, job_id) = tokio::join!(poll, cancel);
    let report = &summary.jobs[0];
    assert_eq!(report.job_id, job_id);
    let trace = server.trace(project, job_id).await;
    assert!(
        matches!(report.ending, JobEnding::Canceled | JobEnding::Aborted),
        "{:?}\n{trace}",
        report.ending
    );
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_policy_never_with_a_missing_image_is_a_clear_error() {
    require_docker().await;
    let ci = r#"
job:
  image: gantry-test/not-built-here:1
  script: [echo never runs]
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, "pull_policy = \"never\"");
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    match &report.ending {
        JobEnding::ImagePullFailure { message } => {
            assert!(
                message.contains("gantry-test/not-built-here:1"),
                "{message}"
            );
            assert!(message.contains("[never]"), "{message}");
            assert!(message.contains("not on this machine"), "{message}");
        }
        other => panic!("expected an image pull failure, got {other:?}\n{trace}"),
    }
    assert!(
        trace.contains("pull image \"gantry-test/not-built-here:1\" with pull policy [never]"),
        "{trace}"
    );
    assert!(!trace.contains("never runs\n"), "{trace}");
    // `image_pull_failure` when the coordinator lists it in `features.failure_reasons`,
    // else the wider `runner_system_failure` (spec §4.3).
    let job = server.job(project, report.job_id).await;
    assert!(
        ["image_pull_failure", "runner_system_failure"]
            .contains(&job["failure_reason"].as_str().unwrap_or("")),
        "{job}"
    );
    assert_no_leftovers(&token);
}

/// One of `scripts/test-images.sh`'s images: on the engine, in no registry.
const LOCAL_IMAGE: &str = "gantry-test/busybox:latest";

/// An image built on this machine under the default `pull_policy = always`: the pull
/// fails (no registry has it), and the job's log and its ending — what the runner's log
/// prints — say the image is here and name `pull_policy = ["if-not-present"]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_image_under_pull_policy_always_names_if_not_present() {
    require_docker().await;
    let ci = format!("job:\n  image: {LOCAL_IMAGE}\n  script: [echo never runs]\n");
    let repo = Repo::new(&[(".gitlab-ci.yml", ci.as_str())]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, "pull_policy = \"always\"");
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    let fix = "set pull_policy = [\"if-not-present\"] under [runners.docker]";
    match &report.ending {
        JobEnding::ImagePullFailure { message } => {
            assert!(
                message.contains(&format!(
                    "pull image {LOCAL_IMAGE:?} with pull policy [always]"
                )),
                "{message}"
            );
            assert!(message.contains("is on this machine"), "{message}");
            assert!(message.contains(fix), "{message}");
        }
        other => panic!("expected an image pull failure, got {other:?}\n{trace}"),
    }
    assert!(trace.contains("WARNING: the image"), "{trace}");
    assert!(trace.contains(fix), "{trace}");
    assert!(!trace.contains("never runs\n"), "{trace}");
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disallowed_image_or_service_is_refused_before_anything_starts() {
    require_docker().await;
    let ci = r#"
bad-image:
  image: gantry-test/entrypoint:latest
  script: [echo never runs]
bad-service:
  image: gantry-test/busybox:latest
  services: [gantry-test/http:latest]
  script: [echo never runs]
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let docker = format!(
        "{RUNNER_DOCKER}\nallowed_images = [\"gantry-test/busy*\"]\nallowed_services = [\"postgres:*\"]"
    );
    let runner = Runner::new(&server, &token, &docker);
    let summary = runner.run(2, LIMIT).await;
    assert_eq!(summary.jobs.len(), 2);
    for report in &summary.jobs {
        let trace = server.trace(project, report.job_id).await;
        let JobEnding::ConfigurationError { message } = &report.ending else {
            panic!(
                "expected a configuration error, got {:?}\n{trace}",
                report.ending
            );
        };
        assert!(
            message.contains("is not on the list of allowed"),
            "{message}"
        );
        // Refused before any pull, network, service or container.
        assert!(!trace.contains("Using docker image"), "{trace}");
        assert!(!trace.contains("Starting service"), "{trace}");
        assert!(!trace.contains("never runs\n"), "{trace}");
    }
    let traces = [
        server.trace(project, summary.jobs[0].job_id).await,
        server.trace(project, summary.jobs[1].job_id).await,
    ]
    .join("\n");
    assert!(
        traces.contains("use the image \"gantry-test/entrypoint:latest\""),
        "{traces}"
    );
    assert!(traces.contains("- gantry-test/busy*"), "{traces}");
    assert!(
        traces.contains("use the service \"gantry-test/http:latest\""),
        "{traces}"
    );
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_without_image_runs_imageless_jobs_on_the_host() {
    require_docker().await;
    let ci = r#"
imageless:
  script:
    - echo "on the host"
with-image:
  image: gantry-test/busybox:latest
  script:
    - echo "in a container"
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(
        &server,
        &token,
        "pull_policy = \"never\"\nshell_without_image = true",
    );
    let summary = runner.run(2, LIMIT).await;
    for report in &summary.jobs {
        let trace = server.trace(project, report.job_id).await;
        assert_eq!(report.ending, JobEnding::Success, "{trace}");
        if trace.contains("on the host") {
            assert!(
                trace.contains("Preparing the \"shell\" executor"),
                "{trace}"
            );
        } else {
            assert!(
                trace.contains("Preparing the \"docker\" executor"),
                "{trace}"
            );
        }
    }
    assert_no_leftovers(&token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_any_image_the_job_fails_saying_so() {
    require_docker().await;
    let ci = "imageless:\n  script: [echo never runs]\n";
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, "pull_policy = \"never\"");
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert!(
        matches!(&report.ending, JobEnding::ConfigurationError { message } if message.contains("the job has no `image:` and [runners.docker] image is not set")),
        "{:?}\n{trace}",
        report.ending
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_of_a_crashed_runner_are_removed_when_polling_starts() {
    require_docker().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "job:\n  script: [echo hi]\n")]);
    let server = TestServer::start().await;
    let (_project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let short = gantry_runner::config::short_token(&token);
    // What a runner killed mid-job leaves: a running container, a network, a volume.
    let label = format!("com.gantry.runner={short}");
    for args in [
        vec![
            "network",
            "create",
            "--label",
            &label,
            &format!("gantry-leftover-{short}"),
        ],
        vec![
            "volume",
            "create",
            "--label",
            &label,
            &format!("gantry-leftover-{short}"),
        ],
        vec!["run", "-d", "--label", &label, BUSYBOX, "sleep", "300"],
    ] {
        let out = std::process::Command::new("docker")
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(leftovers(&token).len(), 3);
    let runner = Runner::new(&server, &token, RUNNER_DOCKER);
    let (summary, events) = runner.run_with(1, LIMIT, |_| {}).await;
    assert_eq!(summary.jobs[0].ending, JobEnding::Success);
    assert!(
        events.iter().any(|e| e.contains(
            "removed what a previous run left behind: 1 container(s), 1 network(s), 1 volume(s)"
        )),
        "{events:?}"
    );
    assert_no_leftovers(&token);
}

#[tokio::test]
async fn an_unreachable_engine_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let host = format!("unix://{}/docker.sock", dir.path().display());
    let error = gantry_runner::executor::docker::docker_available_at(&host)
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("reach the Docker engine at {host}: ")),
        "{text}"
    );
    assert!(
        text.contains("is Docker installed and its engine running?"),
        "{text}"
    );
    // A socket nobody listens on any more: refused, read from the I/O error's kind.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let error = gantry_runner::executor::docker::docker_available_at(&format!(
        "unix://{}",
        stale.display()
    ))
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("nothing listens there"),
        "{error}"
    );
    let error = gantry_runner::executor::docker::docker_available_at("ftp://example")
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("set DOCKER_HOST to one of those"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_host_is_the_engine_used() {
    require_docker().await;
    let ci = r#"
job:
  image: gantry-test/busybox:latest
  script: [echo ran on the configured engine]
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;

    // An engine address where nothing listens: the job fails naming it, not DOCKER_HOST.
    let runner = Runner::new(
        &server,
        &token,
        "pull_policy = \"never\"\nhost = \"unix:///nonexistent/gantry-docker.sock\"",
    );
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert!(
        matches!(report.ending, JobEnding::SystemFailure { .. }),
        "{:?}\n{trace}",
        report.ending
    );
    assert!(
        trace.contains("unix:///nonexistent/gantry-docker.sock"),
        "{trace}"
    );
    assert!(!trace.contains("ran on the configured engine\n"), "{trace}");

    // The engine's real socket named as `host`: the job of a second pipeline runs there.
    let (status, pipeline) = server
        .admin(
            reqwest::Method::POST,
            &format!("projects/{project}/pipeline?ref=main"),
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{pipeline}");
    let runner = Runner::new(
        &server,
        &token,
        &format!(
            "pull_policy = \"never\"\nhost = \"{}\"",
            gantry_runner::executor::docker::docker_host()
        ),
    );
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert!(
        matches!(report.ending, JobEnding::Success),
        "{:?}\n{trace}",
        report.ending
    );
    assert!(trace.contains("ran on the configured engine\n"), "{trace}");
    assert_no_leftovers(&token);
}

/// `gpus` reaches the Engine as the build container's device request (gitlab-runner's
/// `[runners.docker] gpus`, the CLI's `--gpus` syntax). This machine kind has no GPU and
/// no NVIDIA runtime, so the Engine refuses the request with its own words, which shows
/// the request was made; `service_gpus` is for services only, so a job without services
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpus_become_the_containers_device_requests() {
    require_docker().await;
    let ci = "test:\n  image: gantry-test/busybox:latest\n  script:\n    - echo ran\n";
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, &format!("{RUNNER_DOCKER}\ngpus = \"all\""));
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert_ne!(report.ending, JobEnding::Success, "{trace}");
    assert!(
        trace.contains("could not select device driver") && trace.contains("[[gpu]]"),
        "{trace}"
    );
    assert!(!trace.contains("\nran"), "{trace}");
    assert_no_leftovers(&token);

    let (status, _) = server
        .admin(
            reqwest::Method::POST,
            &format!("projects/{project}/pipeline?ref=main"),
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED);
    let runner = Runner::new(
        &server,
        &token,
        &format!("{RUNNER_DOCKER}\nservice_gpus = \"count=1,capabilities=compute\""),
    );
    let summary = runner.run(1, LIMIT).await;
    let report = &summary.jobs[0];
    let trace = server.trace(project, report.job_id).await;
    assert_eq!(report.ending, JobEnding::Success, "{trace}");
    assert!(trace.contains("ran"), "{trace}");
}

/// A private registry on loopback: Debian's `docker-registry` (the CNCF Distribution
/// registry) with htpasswd authentication, an image pushed there by the test with the
/// Docker CLI. A job whose `DOCKER_AUTH_CONFIG` has the registry's credentials pulls it
/// (the log says where the credentials came from); a job without them cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_image_is_pulled_with_docker_auth_config() {
    require_docker().await;
    let registry = PrivateRegistry::start("gantry", "s3cret-pw");
    let image = registry.push("gantry-test/busybox:latest", "private/busybox:e2e");
    let auth = base64_encode("gantry:s3cret-pw");
    let ci = format!(
        r#"
with_credentials:
  image: {image}
  variables:
    DOCKER_AUTH_CONFIG: '{{"auths": {{"{host}": {{"auth": "{auth}"}}}}}}'
  script: [echo pulled-privately]
without_credentials:
  image: {image}
  script: [echo never-runs]
"#,
        host = registry.host
    );
    let repo = Repo::new(&[(".gitlab-ci.yml", &ci)]);
    let server = TestServer::start().await;
    let (project, _) = server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let runner = Runner::new(&server, &token, "pull_policy = [\"always\"]");
    let summary = runner.run(2, LIMIT).await;
    assert_eq!(summary.jobs.len(), 2);
    for report in &summary.jobs {
        let trace = server.trace(project, report.job_id).await;
        let job = server.job(project, report.job_id).await;
        match job["name"].as_str().unwrap() {
            "with_credentials" => {
                assert_eq!(report.ending, JobEnding::Success, "{trace}");
                assert!(
                    trace.contains("Authenticating with credentials from $DOCKER_AUTH_CONFIG"),
                    "{trace}"
                );
                assert!(trace.contains("pulled-privately"), "{trace}");
            }
            _ => {
                assert!(
                    matches!(report.ending, JobEnding::ImagePullFailure { .. }),
                    "{:?}\n{trace}",
                    report.ending
                );
                assert!(!trace.contains("Authenticating with"), "{trace}");
                assert!(!trace.contains("never-runs\n"), "{trace}");
            }
        }
    }
    let _ = std::process::Command::new("docker")
        .args(["image", "rm", "-f", &image])
        .output();
    assert_no_leftovers(&token);
}

fn base64_encode(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// `docker-registry serve` on a free loopback port with htpasswd authentication, stopped
/// when dropped.
struct PrivateRegistry {
    host: String,
    user: String,
    password: String,
    dir: tempfile::TempDir,
    child: std::process::Child,
}

impl PrivateRegistry {
    fn start(user: &str, password: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let htpasswd = std::process::Command::new("htpasswd")
            .args(["-Bbn", user, password])
            .output()
            .expect("htpasswd (apache2-utils; scripts/test installs it)");
        assert!(htpasswd.status.success(), "{htpasswd:?}");
        std::fs::write(dir.path().join("htpasswd"), &htpasswd.stdout).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let host = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\nhttp:\n  addr: {host}\nauth:\n  htpasswd:\n    realm: gantry-test\n    path: {root}/htpasswd\n",
            root = dir.path().display()
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let binary = ["/usr/bin/docker-registry", "/usr/sbin/docker-registry"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("docker-registry (Debian's package; scripts/test installs it)");
        let child = std::process::Command::new(binary)
            .args([
                "serve",
                &dir.path().join("config.yml").display().to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("registry.log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&host).is_err() {
            assert!(Instant::now() < deadline, "the registry did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            host,
            user: user.to_owned(),
            password: password.to_owned(),
            dir,
            child,
        }
    }

    /// Tags the local image `local` as `<host>/<name>`, pushes it with a login kept in a
    /// config directory of its own, and removes the tag: only the registry has it.
    fn push(&self, local: &str, name: &str) -> String {
        let target = format!("{}/{name}", self.host);
        let config = self.dir.path().join("docker-config");
        let docker = |args: &[&str], input: Option<&str>| {
            let mut command = std::process::Command::new("docker");
            command.arg("--config").arg(&config).args(args);
            if input.is_some() {
                command.stdin(std::process::Stdio::piped());
            }
            command
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = command.spawn().unwrap();
            if let Some(input) = input {
                use std::io::Write as _;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(input.as_bytes())
                    .unwrap();
            }
            let output = child.wait_with_output().unwrap();
            assert!(output.status.success(), "docker {args:?}: {output:?}");
        };
        docker(
            &["login", &self.host, "-u", &self.user, "--password-stdin"],
            Some(&self.password),
        );
        docker(&["tag", local, &target], None);
        docker(&["push", &target], None);
        docker(&["image", "rm", &target], None);
        target
    }
}

impl Drop for PrivateRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
