//! `gantry run` with the Docker executor, on the real engine, with the images
//! `scripts/test-images.sh` builds locally (no registry is reachable). A missing engine
//! or image fails these tests with a message saying so; they never pass silently.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Stdio};

use gantry_test_support::git;

/// Fails (loudly) unless the engine answers and the test images exist.
fn require_docker() {
    let info = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output();
    assert!(
        info.as_ref().is_ok_and(|o| o.status.success()),
        "these tests need a Docker engine: `docker info` failed ({info:?}); start it or set DOCKER_HOST"
    );
    for image in [
        "gantry-test/busybox:latest",
        "gantry-test/entrypoint:latest",
        "gantry-test/http:latest",
    ] {
        let ok = Command::new("docker")
            .args(["image", "inspect", image])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "the test image {image} is missing: run scripts/test-images.sh (scripts/test does)"
        );
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn logged(&self, job: &str, text: &str) -> bool {
        self.stdout.lines().any(|l| {
            l.split_once(" | ")
                .is_some_and(|(name, rest)| name.trim_end() == job && rest.contains(text))
        })
    }

    fn explain(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn run_in(dir: &Path, cache: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("run")
        .arg("--no-color")
        .args(args)
        .current_dir(dir)
        .env("GANTRY_CACHE_DIR", cache)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn checkout(yaml: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join(".gitlab-ci.yml"), yaml).unwrap();
    std::fs::write(dir.path().join("input.txt"), "from the checkout\n").unwrap();
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-qm", "init"]);
    (dir, tempfile::tempdir().unwrap())
}

/// Containers and networks the run's runner created and did not remove (found by the
/// `com.gantry.runner=<short token>` label; the token is in the log's `on gantry-run …`).
fn leftovers(r: &Run) -> Vec<String> {
    let short = r
        .stdout
        .lines()
        .find_map(|l| {
            l.split_once("  on gantry-run ")
                .and_then(|(_, rest)| rest.split(',').next())
        })
        .expect("the log names the runner")
        .to_owned();
    let label = format!("label=com.gantry.runner={short}");
    let mut left = Vec::new();
    for (what, format) in [
        (&["ps", "-a"][..], "{{.Names}}"),
        (&["network", "ls"][..], "{{.Name}}"),
        (&["volume", "ls"][..], "{{.Name}}"),
    ] {
        let out = Command::new("docker")
            .args(what)
            .args(["--filter", &label, "--format", format])
            .output()
            .unwrap();
        left.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned),
        );
    }
    left
}

#[test]
fn jobs_run_in_their_image_with_an_entrypoint_override_and_reach_a_service_by_alias() {
    require_docker();
    let (dir, cache) = checkout(
        "container:
  image: {name: 'gantry-test/entrypoint:latest', entrypoint: ['']}
  script:
    - test -f /.dockerenv && echo in-a-container
    - cat input.txt
service:
  image: gantry-test/busybox:latest
  services:
    - name: gantry-test/http:latest
      alias: web
  script:
    - wget -qO- http://web:8080/
",
    );
    let r = run_in(dir.path(), cache.path(), &["--executor", "docker"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.logged("container", "in-a-container"), "{}", r.explain());
    assert!(
        r.logged("container", "from the checkout"),
        "{}",
        r.explain()
    );
    assert!(
        r.logged("service", "hello from the service"),
        "{}",
        r.explain()
    );
}

#[test]
fn artifacts_and_cache_flow_between_container_jobs_and_across_runs() {
    require_docker();
    let (dir, cache) = checkout(
        "stages: [build, test]
build:
  stage: build
  image: gantry-test/busybox:latest
  cache: {key: c, paths: [cached/]}
  script:
    - 'if [ -f cached/mark ]; then echo cache-hit; else echo cache-miss; fi'
    - mkdir -p cached out && echo x > cached/mark && echo built-in-docker > out/a.txt
  artifacts: {paths: [out/]}
use:
  stage: test
  image: gantry-test/busybox:latest
  script: [cat out/a.txt]
",
    );
    let first = run_in(dir.path(), cache.path(), &["--executor", "docker"]);
    assert_eq!(first.code, 0, "{}", first.explain());
    assert!(first.logged("build", "cache-miss"), "{}", first.explain());
    assert!(
        first.logged("use", "built-in-docker"),
        "{}",
        first.explain()
    );
    let second = run_in(dir.path(), cache.path(), &["--executor", "docker"]);
    assert!(second.logged("build", "cache-hit"), "{}", second.explain());
}

/// `GIT_CLONE_PATH` (gantry run allows it in every executor): in a container the checkout
/// lies where the path says below `/builds`; on the host below the run's builds directory.
#[test]
fn git_clone_path_moves_the_checkout_in_containers_and_on_the_host() {
    require_docker();
    let (dir, cache) = checkout(
        "variables: {GIT_CLONE_PATH: '$CI_BUILDS_DIR/go/src/$CI_CONCURRENT_ID/app'}
boxed:
  image: gantry-test/busybox:latest
  script:
    - 'echo \"dir=$CI_PROJECT_DIR pwd=$(pwd) $(cat input.txt)\"'
host:
  script:
    - 'test \"$(pwd)\" = \"$CI_BUILDS_DIR/go/src/$CI_CONCURRENT_ID/app\" && echo host-moved'
    - cat input.txt
outside:
  variables: {GIT_CLONE_PATH: /tmp/elsewhere}
  script: [echo never]
",
    );
    let r = run_in(dir.path(), cache.path(), &[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    let moved = (0..4).any(|id| {
        r.logged(
            "boxed",
            &format!("dir=/builds/go/src/{id}/app pwd=/builds/go/src/{id}/app from the checkout"),
        )
    });
    assert!(moved, "{}", r.explain());
    assert!(r.logged("host", "host-moved"), "{}", r.explain());
    assert!(r.logged("host", "from the checkout"), "{}", r.explain());
    assert!(
        r.logged(
            "outside",
            "the GIT_CLONE_PATH=\"/tmp/elsewhere\" has to be within"
        ),
        "{}",
        r.explain()
    );
    assert!(!r.logged("outside", "never"), "{}", r.explain());
    assert!(leftovers(&r).is_empty(), "{:?}", leftovers(&r));
}

#[test]
fn auto_runs_jobs_without_an_image_in_the_shell_and_the_others_in_docker() {
    require_docker();
    let (dir, cache) = checkout(
        "host: {script: ['test ! -f /.dockerenv && echo on-the-host']}
boxed: {image: gantry-test/busybox:latest, script: ['test -f /.dockerenv && echo in-docker']}
",
    );
    let r = run_in(dir.path(), cache.path(), &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.logged("host", "on-the-host"), "{}", r.explain());
    assert!(r.logged("boxed", "in-docker"), "{}", r.explain());
}

#[test]
fn a_missing_image_fails_the_job_with_its_name_and_nothing_is_left_behind() {
    require_docker();
    let (dir, cache) = checkout(
        "missing: {image: 'gantry-test/does-not-exist:1', script: [echo never]}
slow:
  image: gantry-test/busybox:latest
  timeout: 10s
  script: [sleep 60]
",
    );
    let r = run_in(dir.path(), cache.path(), &["--executor", "docker"]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert!(
        r.logged("missing", "gantry-test/does-not-exist:1"),
        "{}",
        r.explain()
    );
    assert!(!r.logged("missing", "never"), "{}", r.explain());
    // The summary names the image and why it could not be had, not only the failure
    // reason (`image_pull_failure` or `runner_system_failure`).
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("missing ") && l.contains("failed"))
        .unwrap_or_else(|| panic!("no summary row for `missing`: {}", r.explain()));
    assert!(
        row.contains(
            "image pull failure: pull image \"gantry-test/does-not-exist:1\" with pull policy [if-not-present]: "
        ),
        "{row}\n{}",
        r.explain()
    );
    assert!(!row.trim_end().ends_with("failure"), "{row}");
    assert!(
        r.stdout.contains("job_execution_timeout") || r.logged("slow", "timed out"),
        "{}",
        r.explain()
    );
    let left = leftovers(&r);
    assert!(left.is_empty(), "containers left behind: {left:?}");
}

/// `run:` steps in the job's container: the step file is read by the runner, its
/// program runs in the image (busybox's `sh`, `/.dockerenv`), `${{ func_dir }}` and
/// `${{ output_file }}` are the paths the container sees, and an output written in the
/// container reaches the next step.
#[test]
fn run_steps_execute_in_the_jobs_container() {
    require_docker();
    let (dir, cache) = checkout(
        "steps:
  image: gantry-test/busybox:latest
  run:
    - name: probe
      func: ./steps/probe
    - name: show
      script: echo \"probe said ${{ steps.probe.outputs.where }}\"
",
    );
    let step = dir.path().join("steps/probe");
    std::fs::create_dir_all(&step).unwrap();
    std::fs::write(
        step.join("func.yml"),
        "spec:
  outputs:
    where: {type: string}
---
exec:
  command: [sh, \"${{ func_dir }}/probe.sh\", \"${{ output_file }}\"]
",
    )
    .unwrap();
    std::fs::write(
        step.join("probe.sh"),
        "test -f /.dockerenv\necho \"probe runs in $(pwd) from $(dirname \"$0\")\"\necho '{\"name\":\"where\",\"value\":\"container\"}' > \"$1\"\n",
    )
    .unwrap();
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-qm", "steps"]);
    let r = run_in(dir.path(), cache.path(), &["--executor", "docker"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(
        r.stdout
            .lines()
            .any(|l| l.contains("probe runs in /builds/")
                && l.contains("from /builds/")
                && l.ends_with("/steps/probe")),
        "{}",
        r.explain()
    );
    assert!(r.logged("steps", "probe said container"), "{}", r.explain());
    assert!(leftovers(&r).is_empty(), "{:?}", leftovers(&r));
}
