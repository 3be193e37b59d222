//! The gitlab-ci-local corpus (`../shared/conformance/gitlab-ci-local/`) run through
//! `gantry run --executor auto` on the local Docker engine: every record of GitLab scope
//! that needs Docker but no network (`needs_docker: true`, `needs_network: false`). How a
//! record is run and what is adapted from gcl's conventions: `tests/gcl_run_support/mod.rs`.
//!
//! # Executor
//!
//! `--executor auto`: jobs with `image:` run in the Docker executor, jobs without one in
//! the shell. That is gcl's default (`shell-executor-no-image`), which these records were
//! written against; a GitLab Docker runner would run such a job in its configured default
//! image instead. No engine is no pass: the test fails first, saying so, when `docker info`
//! fails or a stand-in image is missing, and a run that fell back to the shell fails its
//! record.
//!
//! # Images
//!
//! No registry is reachable. The images the cases name are replaced by stand-ins that
//! `scripts/test-images.sh` builds locally, **tagged with the names the cases use**
//! ([`STAND_INS`]) before the records run. Tagging, rather than rewriting `image:` and
//! `services:` in the copied cases, keeps what GitLab derives from a name — a service's
//! host names (`docker.io/library/redis` → `docker.io-library-redis` and
//! `docker.io__library__redis`) are what several records look up — and covers names the
//! jobs write themselves into dotenv reports. The tags stay on the engine (tagging again is
//! a no-op; `docker image rm <name>` removes one). A name that already exists on the engine
//! as an image of its own (a real `alpine` someone pulled) is left alone and used as it
//! is.
//!
//! A stand-in gives a record what it uses of the image: a shell with the usual tools
//! (busybox), an entrypoint that fails (for entrypoint overrides), a server that stays up
//! with an exposed port (services that must run to be resolvable), `host` for DNS
//! lookups. Where that is not enough — the record runs the image's own program (hugo,
//! nginx's pages and entrypoint script), pins it by digest (only a registry gives an image
//! a digest) or checks its entrypoint's output — the image is not stood in for, and the
//! record is listed with `[image]` in `tests/gcl-docker-exceptions.txt`.
//!
//! Besides the suite's checks, the test prints `gitlab-ci-local docker records: N/M
//! passed`.

#![allow(clippy::panic, clippy::unwrap_used)]

use crate::gcl_run_support;

use std::process::Command;

use gcl_run_support::{Outcome, Suite, is_run_record, needs_docker, run_suite};

/// A shell and busybox's tools (`CMD ["sh"]`).
const SHELL: &str = "gantry-test/busybox:latest";
/// `ENTRYPOINT ["/bin/false"]`: a job must override it.
const FAILING_ENTRYPOINT: &str = "gantry-test/entrypoint:latest";
/// busybox httpd, up until stopped (`EXPOSE 8080/tcp`).
const SERVER: &str = "gantry-test/http:latest";
/// The shell image plus `host NAME` (busybox nslookup, bind9's wording).
const DNSUTILS: &str = "gantry-test/dnsutils:latest";

/// The images the selected cases name (as the engine spells them: `docker.io/library/`
/// dropped, `:latest` added) → the local image tagged with that name.
const STAND_INS: &[(&str, &str)] = &[
    // Job images used for their shell and coreutils.
    ("alpine:latest", SHELL),
    ("busybox:latest", SHELL),
    ("debian:stable-slim", SHELL),
    ("nginx:alpine", SHELL),
    // image#4 runs `stat` in the kaniko debug image (a busybox).
    ("gcr.io/kaniko-project/executor:debug", SHELL),
    // image#3: an entrypoint that exits, overridden with `entrypoint: [""]`.
    (
        "firecow/gitlab-ci-local-test-image:entrypoint-with-exit",
        FAILING_ENTRYPOINT,
    ),
    // Services the jobs only resolve: a server that stays up (a stopped container has no
    // name on the network).
    ("nginx:latest", SERVER),
    ("redis:latest", SERVER),
    // A job that looks a service's alias up with `host`.
    ("massenz/dnsutils:2.4.0", DNSUTILS),
];

/// The label `scripts/test-images.sh` puts on its images.
const OUR_LABEL: &str = "com.gantry.test-images";

fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("docker {args:?}: {e} (is the docker CLI installed?)"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// Fails (loudly) unless the engine answers and the stand-ins exist; then tags them.
fn prepare_engine() {
    if let Err(e) = docker(&["info", "--format", "{{.ServerVersion}}"]) {
        panic!(
            "the gitlab-ci-local docker records need a Docker engine: `docker info` failed ({e}); start it or set DOCKER_HOST"
        );
    }
    for (name, local) in STAND_INS {
        if docker(&["image", "inspect", "--format", "{{.Id}}", local]).is_err() {
            panic!(
                "the test image {local} is missing: run scripts/test-images.sh (scripts/test does)"
            );
        }
        let ours = match docker(&[
            "image",
            "inspect",
            "--format",
            "{{json .Config.Labels}}",
            name,
        ]) {
            Err(_) => true,
            Ok(labels) => labels.contains(OUR_LABEL),
        };
        if ours {
            if let Err(e) = docker(&["tag", local, name]) {
                panic!("docker tag {local} {name}: {e}");
            }
        }
    }
}

/// `auto` falls back to the shell when no engine answers, saying so: that run proves
/// nothing about Docker.
fn used_docker(out: &Outcome) -> Vec<String> {
    if out.stderr.contains("no Docker engine is reachable") {
        vec!["the run fell back to the shell: no Docker engine answered".to_owned()]
    } else {
        Vec::new()
    }
}

#[test]
fn gitlab_ci_local_docker_records() {
    prepare_engine();
    let suite = Suite {
        name: "docker",
        executor: "auto",
        select: |rec| is_run_record(rec) && needs_docker(rec),
        selected: 45,
        exceptions: "gcl-docker-exceptions.txt",
        tags: &["[gitlab]", "[gantry]", "[image]"],
        check_run: used_docker,
    };
    let Some(summary) = run_suite(&suite) else {
        return;
    };
    let listed = |tag: &str| {
        summary
            .exceptions
            .values()
            .filter(|r| r.starts_with(tag))
            .count()
    };
    let runnable = summary.total - listed("[image]");
    println!(
        "gitlab-ci-local docker records whose images we can stand in for: {}/{runnable} passed ({} need an image we cannot build here, {} expect gcl's behaviour where GitLab's differs, {} are Gantry gaps)",
        summary.passed,
        listed("[image]"),
        listed("[gitlab]"),
        listed("[gantry]")
    );
}
