//! Our runner against our coordinator, every stage of the job lifecycle: sources cloned
//! through the coordinator's git smart HTTP URL with the job token, cache restored (hit,
//! fallback key, miss) and archived, artifacts and a dotenv report uploaded by one job
//! and downloaded into (and injected into the variables of) a later one, `step_script`,
//! `after_script` seeing `CI_JOB_STATUS`, and artifacts `when: on_failure`. Every check
//! reads what the coordinator stored, through its user API.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::io::Read;
use std::time::Duration;

use e2e_runner_support::*;
use gantry_runner::job::{Delivery, JobEnding};

const PIPELINE: &str = r#"
stages: [build, test]

build:
  stage: build
  cache:
    key: deps-$CI_COMMIT_REF_SLUG
    paths: [vendor/]
  script:
    - echo "checked out $(git rev-parse HEAD) on $(git rev-parse --abbrev-ref HEAD 2>/dev/null || true)"
    - test "$(git rev-parse HEAD)" = "$CI_COMMIT_SHA"
    - echo "source says $(cat src/hello.txt)"
    - mkdir -p out vendor
    - cp src/hello.txt out/hello.txt
    - echo "built for $CI_COMMIT_SHORT_SHA" > out/build-info.txt
    - echo "vendored library" > vendor/lib.txt
    - echo "BUILD_VERSION=1.2.3" > build.env
    - echo "BUILD_CHANNEL=beta" >> build.env
  after_script:
    - echo "after_script of build saw CI_JOB_STATUS=$CI_JOB_STATUS"
  artifacts:
    paths: [out/]
    reports:
      dotenv: build.env

consume:
  stage: test
  dependencies: [build]
  cache:
    key: deps-$CI_COMMIT_REF_SLUG
    paths: [vendor/]
    policy: pull
  script:
    - echo "artifact says $(cat out/hello.txt)"
    - cat out/build-info.txt
    - echo "cache says $(cat vendor/lib.txt)"
    - echo "dotenv says BUILD_VERSION=$BUILD_VERSION BUILD_CHANNEL=$BUILD_CHANNEL"

fallback:
  stage: test
  dependencies: []
  cache:
    key: feature-branch-cache
    fallback_keys: [deps-main]
    paths: [vendor/]
    policy: pull
  script:
    - echo "fallback cache says $(cat vendor/lib.txt)"
    - test ! -e out/hello.txt && echo "no artifacts without dependencies"

miss:
  stage: test
  dependencies: []
  cache:
    key: never-saved
    paths: [vendor/]
    policy: pull
  script:
    - test ! -e vendor/lib.txt && echo "no cache for never-saved"

failing:
  stage: test
  dependencies: []
  allow_failure: true
  script:
    - echo "the failing job writes its report" > failure-report.txt
    - exit 7
    - echo "never printed"
  after_script:
    - echo "after_script of failing saw CI_JOB_STATUS=$CI_JOB_STATUS"
  artifacts:
    when: on_failure
    paths: [failure-report.txt]
"#;

fn zip_names(bytes: &[u8]) -> Vec<String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("a zip archive");
    (0..archive.len())
        .map(|i| archive.by_index(i).unwrap().name().to_owned())
        .collect()
}

fn zip_file(bytes: &[u8], name: &str) -> String {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("a zip archive");
    let mut text = String::new();
    archive
        .by_name(name)
        .expect(name)
        .read_to_string(&mut text)
        .unwrap();
    text
}

fn artifact_types(job: &serde_json::Value) -> Vec<String> {
    let mut types: Vec<String> = job["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["file_type"].as_str().unwrap().to_owned())
        .collect();
    types.sort();
    types
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_lifecycle_stage_runs_against_the_coordinator() {
    let setup = Setup::new(
        PIPELINE,
        &[("src/hello.txt", "hello from the repository\n")],
    )
    .await;
    let server = &setup.server;
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = setup.runner("", "");
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(120))
        .await;
    let summary = runner.stop(Duration::from_secs(30)).await;

    // Server side: statuses and failure reasons.
    assert_eq!(
        done["status"], "success",
        "allow_failure keeps the pipeline green: {done}"
    );
    let job = |name: &'static str| server.job_named(setup.project, pipeline, name);
    let (build, consume, fallback, miss, failing) = (
        job("build").await,
        job("consume").await,
        job("fallback").await,
        job("miss").await,
        job("failing").await,
    );
    for ok in [&build, &consume, &fallback, &miss] {
        assert_eq!(ok["status"], "success", "{ok}");
        assert_eq!(ok["failure_reason"], serde_json::Value::Null, "{ok}");
    }
    assert_eq!(failing["status"], "failed", "{failing}");
    assert_eq!(failing["failure_reason"], "script_failure", "{failing}");
    assert_eq!(failing["exit_code"], 7, "{failing}");

    // Runner side: five jobs, all delivered.
    assert_eq!(summary.jobs.len(), 5);
    for report in &summary.jobs {
        assert_eq!(report.delivery, Delivery::Accepted, "{report:?}");
    }
    let failing_report = summary
        .jobs
        .iter()
        .find(|r| r.job_id == failing["id"].as_i64().unwrap())
        .unwrap();
    assert_eq!(
        failing_report.ending,
        JobEnding::ScriptFailure { exit_code: 7 }
    );

    // build: sources from the coordinator's clone URL, cache miss then archive, after_script,
    // artifacts + dotenv uploaded.
    let log = server
        .trace(setup.project, build["id"].as_i64().unwrap())
        .await;
    assert_eq!(
        sections(&log),
        [
            "prepare_executor",
            "prepare_script",
            "get_sources",
            "restore_cache",
            "step_script",
            "after_script",
            "archive_cache",
            "upload_artifacts_on_success",
            "cleanup_file_variables"
        ],
        "{log}"
    );
    assert!(
        log.contains(&format!("checked out {}", setup.repo.sha)),
        "{log}"
    );
    assert!(
        log.contains("source says hello from the repository"),
        "{log}"
    );
    assert!(
        log.contains("Cache not found for deps-main-protected"),
        "{log}"
    );
    assert!(log.contains("Creating cache deps-main-protected"), "{log}");
    assert!(
        log.contains("after_script of build saw CI_JOB_STATUS=success"),
        "{log}"
    );
    assert!(log.contains("Job succeeded"), "{log}");
    assert!(
        !log.contains("gitlab-ci-token:glcbt-"),
        "the job token leaked into the log:\n{log}"
    );
    assert_eq!(artifact_types(&build), ["archive", "dotenv"], "{build}");
    let archive = server
        .artifacts_archive(setup.project, build["id"].as_i64().unwrap())
        .await;
    let mut names = zip_names(&archive);
    names.sort();
    assert!(
        names.contains(&"out/hello.txt".to_owned())
            && names.contains(&"out/build-info.txt".to_owned()),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("vendor") || n.starts_with("src")),
        "{names:?}"
    );
    assert_eq!(
        zip_file(&archive, "out/hello.txt"),
        "hello from the repository\n"
    );

    // consume: artifacts downloaded from the coordinator, cache hit, dotenv variables.
    let log = server
        .trace(setup.project, consume["id"].as_i64().unwrap())
        .await;
    let stages = sections(&log);
    assert!(
        stages.iter().map(String::as_str).eq([
            "prepare_executor",
            "prepare_script",
            "get_sources",
            "restore_cache",
            "download_artifacts",
            "step_script",
            "archive_cache",
            "cleanup_file_variables"
        ]),
        "{stages:?}\n{log}"
    );
    assert!(
        log.contains(&format!(
            "Downloading artifacts for build ({})",
            build["id"]
        )),
        "{log}"
    );
    assert!(
        log.contains("artifact says hello from the repository"),
        "{log}"
    );
    assert!(
        log.contains(&format!("built for {}", &setup.repo.sha[..8])),
        "{log}"
    );
    assert!(log.contains("Successfully extracted cache"), "{log}");
    assert!(log.contains("cache says vendored library"), "{log}");
    assert!(
        log.contains("Not uploading cache deps-main due to policy")
            || !log.contains("Creating cache"),
        "{log}"
    );
    assert!(
        log.contains("dotenv says BUILD_VERSION=1.2.3 BUILD_CHANNEL=beta"),
        "{log}"
    );

    // fallback: the key misses, the fallback key hits.
    let log = server
        .trace(setup.project, fallback["id"].as_i64().unwrap())
        .await;
    assert!(
        log.contains("Cache not found for feature-branch-cache-protected"),
        "{log}"
    );
    assert!(
        log.contains("Restored the cache of fallback key deps-main-protected"),
        "{log}"
    );
    assert!(
        log.contains("fallback cache says vendored library"),
        "{log}"
    );
    assert!(log.contains("no artifacts without dependencies"), "{log}");

    // miss: nothing restored (and nothing left over from the jobs before it).
    let log = server
        .trace(setup.project, miss["id"].as_i64().unwrap())
        .await;
    assert!(
        log.contains("Cache not found for never-saved-protected"),
        "{log}"
    );
    assert!(!log.contains("Successfully extracted cache"), "{log}");
    assert!(log.contains("no cache for never-saved"), "{log}");

    // failing: after_script sees the failure, artifacts uploaded on failure.
    let log = server
        .trace(setup.project, failing["id"].as_i64().unwrap())
        .await;
    assert!(
        log.contains("after_script of failing saw CI_JOB_STATUS=failed"),
        "{log}"
    );
    assert!(!log.contains("never printed"), "{log}");
    assert!(
        sections(&log)
            .iter()
            .any(|s| s == "upload_artifacts_on_failure"),
        "{log}"
    );
    assert!(log.contains("ERROR: Job failed: exit code 7"), "{log}");
    assert_eq!(artifact_types(&failing), ["archive"], "{failing}");
    let archive = server
        .artifacts_archive(setup.project, failing["id"].as_i64().unwrap())
        .await;
    assert_eq!(
        zip_file(&archive, "failure-report.txt"),
        "the failing job writes its report\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_stored_trace_is_the_runner_s_log_byte_for_byte() {
    let ci = r#"
job:
  variables:
    GIT_STRATEGY: none
  script:
    - seq 1 150000 | sed 's/.*/line & of output with some ünïcödé/'
    - printf 'no newline at the end'
"#;
    let setup = Setup::new(ci, &[]).await;
    let server = &setup.server;
    let pipeline = server.create_pipeline(setup.project).await;
    // ~6 MB: more than the runner keeps in memory (the rest is in its spool file).
    let runner = setup.runner("", "output_limit = 16384");
    server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(60))
        .await;
    let summary = runner.stop(Duration::from_secs(30)).await;

    let job = server.job_named(setup.project, pipeline, "job").await;
    assert_eq!(job["status"], "success", "{job}");
    let stored = server
        .trace_bytes(setup.project, job["id"].as_i64().unwrap())
        .await;
    let report = &summary.jobs[0];
    assert!(
        stored.len() > gantry_runner::trace::MEMORY_WINDOW,
        "{}",
        stored.len()
    );
    assert_eq!(report.trace_bytes, stored.len() as u64);
    assert_eq!(report.trace_checksum, checksum(&stored));
    let text = String::from_utf8(stored).expect("the stored log is UTF-8");
    for i in [1, 99_999, 150_000] {
        assert_eq!(
            text.matches(&format!("line {i} of output with some ünïcödé\n"))
                .count(),
            1
        );
    }
    assert!(text.contains("no newline at the end"), "{text}");
}

const PAGES_PIPELINE: &str = r#"
stages: [build, deploy]

pages:
  stage: deploy
  script:
    - mkdir -p public/docs
    - echo "<h1>site of $CI_PROJECT_PATH at $CI_PAGES_URL</h1>" > public/index.html
    - echo "docs index" > public/docs/index.html
    - echo "about page" > public/about.html
    - echo "custom not found" > public/404.html
    - echo "outside the site" > secret.txt
    - echo "domain=$CI_PAGES_DOMAIN hostname=$CI_PAGES_HOSTNAME"

review:
  stage: deploy
  pages:
    path_prefix: "Review/$CI_COMMIT_REF_NAME"
    publish: dist
  script:
    - mkdir -p dist
    - echo "review of $CI_PAGES_URL" > dist/index.html

release:
  stage: build
  script:
    - echo "VERSION=2.$CI_PIPELINE_IID.0" > release.env
  artifacts:
    reports:
      dotenv: release.env

quality:
  stage: build
  script: [ls reports]
  artifacts:
    reports:
      coverage_report:
        coverage_format: cobertura
        path: reports/coverage.xml
      codequality: reports/gl-code-quality.json

publish-release:
  stage: deploy
  needs: [release]
  script: [echo releasing]
  release:
    tag_name: v$VERSION
    description: "Built from $CI_COMMIT_SHORT_SHA"
    assets:
      links:
        - name: package
          url: https://example.com/pkg-$VERSION.tgz
          link_type: package
          filepath: /pkg.tgz

# `description` naming a committed file: its text (release-cli's file form).
publish-notes:
  stage: deploy
  needs: [release]
  script: [echo notes]
  release:
    tag_name: notes-$VERSION
    description: ./CHANGELOG.md
"#;

/// Pages (GitLab's `pages` job): the `public/` folder of a real runner's artifacts is
/// deployed when the job succeeds and served over HTTP under `/-/pages/<project path>/`,
/// with GitLab Pages' file resolution; a `pages:path_prefix` job deploys beside it; and a
/// `release:` job's release (variables from a dotenv report) is in the releases API.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_sites_are_deployed_and_served_and_releases_created() {
    let setup = Setup::new(
        PAGES_PIPELINE,
        &[
            (
                "reports/coverage.xml",
                include_str!("fixtures/code-reports/coverage.xml"),
            ),
            (
                "reports/gl-code-quality.json",
                include_str!("fixtures/code-reports/gl-code-quality.json"),
            ),
            ("CHANGELOG.md", "## 2.x\n\n- Faster pages.\n"),
        ],
    )
    .await;
    let server = &setup.server;
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = setup.runner("", "");
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(120))
        .await;
    runner.stop(Duration::from_secs(30)).await;
    assert_eq!(done["status"], "success", "{done}");

    let base = format!("{}/-/pages/gantry/e2e", server.url);
    let pages = server.job_named(setup.project, pipeline, "pages").await;
    let log = server
        .trace(setup.project, pages["id"].as_i64().unwrap())
        .await;
    let host = server.url.trim_start_matches("http://");
    assert!(
        log.contains(&format!("domain={host} hostname={host}")),
        "{log}"
    );
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |path: String| {
        let http = http.clone();
        async move {
            let r = http.get(&path).send().await.unwrap();
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            (status, headers, r.text().await.unwrap())
        }
    };
    let (status, headers, body) = get(format!("{base}/")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body.trim(),
        format!("<h1>site of gantry/e2e at {base}</h1>")
    );
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .starts_with("sandbox"),
        "{headers:?}"
    );
    let (status, headers, _) = get(base.clone()).await;
    assert_eq!(
        (status, headers["location"].to_str().unwrap()),
        (302, "/-/pages/gantry/e2e/")
    );
    let (status, headers, _) = get(format!("{base}/docs")).await;
    assert_eq!(
        (status, headers["location"].to_str().unwrap()),
        (302, "/-/pages/gantry/e2e/docs/")
    );
    let (status, _, body) = get(format!("{base}/docs/")).await;
    assert_eq!((status, body.trim()), (200, "docs index"));
    let (status, _, body) = get(format!("{base}/about")).await;
    assert_eq!((status, body.trim()), (200, "about page"));
    let (status, _, body) = get(format!("{base}/secret.txt")).await;
    assert_eq!((status, body.trim()), (404, "custom not found"));
    let (status, _, _) = get(format!("{}/-/pages/gantry/nope/", server.url)).await;
    assert_eq!(status, 404);

    // The prefixed deployment: slugified prefix, its own root, the main site untouched.
    let prefix = "review-main";
    let (status, _, body) = get(format!("{base}/{prefix}/")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.trim(), format!("review of {base}/{prefix}"));
    let settings = api_get(server, &format!("projects/{}/pages", setup.project)).await;
    assert_eq!(settings["url"], format!("{base}/"), "{settings}");
    let mut prefixes: Vec<String> = settings["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path_prefix"].as_str().unwrap_or("").to_owned())
        .collect();
    prefixes.sort();
    assert_eq!(prefixes, ["", prefix], "{settings}");

    // The release, named after the dotenv report's VERSION.
    let iid = done["iid"].as_i64().unwrap();
    let tag = format!("v2.{iid}.0");
    let releases = api_get(server, &format!("projects/{}/releases", setup.project)).await;
    assert_eq!(releases.as_array().map(Vec::len), Some(2), "{releases}");
    let release = releases
        .as_array()
        .and_then(|r| r.iter().find(|r| r["tag_name"] == tag.as_str()))
        .unwrap_or_else(|| panic!("no release {tag}: {releases}"));
    let notes = releases
        .as_array()
        .and_then(|r| {
            r.iter()
                .find(|r| r["tag_name"] == format!("notes-2.{iid}.0"))
        })
        .unwrap_or_else(|| panic!("no notes release: {releases}"));
    assert_eq!(
        notes["description"], "## 2.x\n\n- Faster pages.\n",
        "{notes}"
    );
    assert_eq!(release["tag_name"], tag, "{release}");
    assert_eq!(release["name"], tag);
    let short: String = setup.repo.sha.chars().take(8).collect();
    assert_eq!(release["description"], format!("Built from {short}"));
    assert_eq!(release["commit"]["id"], setup.repo.sha.as_str());
    assert_eq!(release["upcoming_release"], false);
    let link = &release["assets"]["links"][0];
    assert_eq!(
        link["url"],
        format!("https://example.com/pkg-2.{iid}.0.tgz")
    );
    assert_eq!(link["link_type"], "package");
    assert_eq!(
        link["direct_asset_url"],
        format!(
            "{}/gantry/e2e/-/releases/{tag}/downloads/pkg.tgz",
            server.url
        )
    );
    let one = api_get(
        server,
        &format!("projects/{}/releases/{tag}", setup.project),
    )
    .await;
    assert_eq!(one["tag_name"], tag);

    // coverage.py's Cobertura and ruff's Code Climate reports, uploaded by the runner.
    let coverage = api_get(
        server,
        &format!(
            "projects/{}/pipelines/{pipeline}/coverage_report",
            setup.project
        ),
    )
    .await;
    assert_eq!(
        coverage["files"]["calc.py"],
        serde_json::json!({"1": 1, "4": 1, "5": 1, "8": 1, "9": 1, "10": 0, "11": 1}),
        "{coverage}"
    );
    assert_eq!(coverage["summary"]["lines"], 10, "{coverage}");
    assert_eq!(coverage["summary"]["covered_lines"], 9);
    assert_eq!(coverage["summary"]["percent"], 90.0);
    assert_eq!(coverage["jobs"][0]["name"], "quality");
    assert_eq!(coverage["jobs"][0]["error"], serde_json::Value::Null);
    let quality = api_get(
        server,
        &format!(
            "projects/{}/pipelines/{pipeline}/codequality_report",
            setup.project
        ),
    )
    .await;
    assert_eq!(quality["summary"]["count"], 1, "{quality}");
    assert_eq!(quality["summary"]["major"], 1);
    let d = &quality["degradations"][0];
    assert_eq!(d["check_name"], "F401");
    assert_eq!(d["path"], "calc.py");
    assert_eq!(d["line"], 1);
    assert_eq!(
        d["web_url"],
        format!(
            "{}/gantry/e2e/-/blob/{}/calc.py#L1",
            server.url, setup.repo.sha
        )
    );

    // A second pipeline (a release of its own version): the site is replaced.
    let again = server.create_pipeline(setup.project).await;
    let runner = setup.runner("", "");
    let done = server
        .wait_pipeline(setup.project, again, Duration::from_secs(120))
        .await;
    runner.stop(Duration::from_secs(30)).await;
    assert_eq!(done["status"], "success", "{done}");
    let (status, _, body) = get(format!("{base}/")).await;
    assert_eq!(status, 200, "{body}");
}

/// A user API `GET` with the admin token that must answer `200`: its JSON.
async fn api_get(server: &Server, path: &str) -> serde_json::Value {
    let (status, value) = server.call(reqwest::Method::GET, path, None).await;
    assert_eq!(status, reqwest::StatusCode::OK, "GET {path}: {value}");
    value
}
