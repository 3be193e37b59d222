//! GitLab's own pipeline configuration (`gantry-pipeline/tests/gitlab-config`, its README
//! says where it comes from) on a running server: pushed as the first commit of a project
//! `gitlab-org/gitlab` on its default branch `master`, with the CI templates and the remote
//! file it includes in the server's offline include cache (`GANTRY_INCLUDE_CACHE`, laid
//! out `<host>/<url path>`). The CI Lint API finds it valid and the push creates its
//! pipeline, with the job count `gantry-pipeline`'s `gitlabs_own_configuration_is_valid`
//! pins for the same push.

use std::path::{Path, PathBuf};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::http_support::{Options, Repo, TestServer};

/// The jobs of a push pipeline of GitLab's default branch, as
/// `gitlabs_own_configuration_is_valid` (`gantry-pipeline/tests/conformance.rs`) pins
/// them: the server must create exactly what the compiler does for the same push.
const JOBS: usize = 332;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../gantry-pipeline/tests/gitlab-config")
}

/// Every file under `dir`, as `/`-separated paths relative to it.
fn files(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().expect("a name").to_string_lossy();
        let rel = if prefix.is_empty() {
            name.into_owned()
        } else {
            format!("{prefix}/{name}")
        };
        if path.is_dir() {
            files(&path, &rel, out);
        } else {
            out.push((rel, path));
        }
    }
}

fn copy_into(from: &Path, to: &Path) {
    let mut all = Vec::new();
    files(from, "", &mut all);
    assert!(!all.is_empty(), "nothing under {}", from.display());
    for (rel, path) in all {
        let target = to.join(rel);
        std::fs::create_dir_all(target.parent().expect("a parent")).expect("mkdir");
        std::fs::copy(&path, &target).unwrap_or_else(|e| panic!("copy {}: {e}", path.display()));
    }
}

/// The include cache for what the configuration includes from outside the project: the
/// URLs `include:template` (GitLab's templates on gitlab.com) and its `include:remote`
/// name, each file where the cache looks for that URL.
fn include_cache(dir: &Path) {
    let includes = fixture().join("includes");
    copy_into(
        &includes.join("templates"),
        &dir.join("gitlab.com/gitlab-org/gitlab/-/raw/HEAD/lib/gitlab/ci/templates"),
    );
    copy_into(
        &includes.join("untamper-my-lockfile"),
        &dir.join("gitlab.com/gitlab-org/frontend/untamper-my-lockfile/-/raw/main/templates"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlabs_own_pipeline_is_created_by_a_push_to_its_default_branch() {
    let cache = tempfile::tempdir().expect("temp dir");
    include_cache(cache.path());
    let server = TestServer::start_with(Options {
        include_cache: Some(cache.path().to_path_buf()),
        ..Options::default()
    })
    .await;

    // The project starts empty, so its first push is a new branch: no
    // `CI_COMMIT_BEFORE_SHA` and every `rules:changes` holds, as in the compiler's test.
    let repo = Repo::empty("master");
    let (status, project) = server
        .admin(
            Method::POST,
            "projects",
            Some(json!({
                "name": "gitlab-org/gitlab",
                "repo_url": repo.path(),
                "default_branch": "master",
            })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{project}");
    let project = project["id"].as_i64().expect("id");
    copy_into(&fixture().join("project"), repo.path());
    repo.git(&["add", "-A"]);
    repo.git(&[
        "commit",
        "-q",
        "-m",
        "Sync from GitLab master at 2026-02-13 10:28:06",
    ]);

    // The CI Lint API (what `glab ci lint` calls): valid, with the same jobs.
    let (status, lint) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/ci/lint?include_jobs=true"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{lint}");
    assert_eq!(lint["valid"], true, "{:#}", lint["errors"]);
    let linted = lint["jobs"].as_array().expect("jobs").len();
    assert_eq!(linted, JOBS, "jobs of the lint");

    // The push (what a forge's push webhook asks for) creates the pipeline.
    let (status, pushed) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/mirror/pull"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{pushed}");
    let pushed = pushed.as_array().expect("a list of pushed refs");
    assert_eq!(pushed.len(), 1, "{pushed:?}");
    assert_eq!(pushed[0]["ref"], "refs/heads/master", "{pushed:?}");
    assert_eq!(pushed[0]["before"], Value::Null, "{pushed:?}");
    let pipeline = pushed[0]["pipeline_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no pipeline: {pushed:?}"));

    let (status, view) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/pipelines/{pipeline}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["source"], "push", "{view}");
    assert_eq!(view["ref"], "master", "{view}");
    // Created, not failed with a configuration error.
    assert_ne!(view["status"], "failed", "{view}");
    assert_eq!(view["yaml_errors"], Value::Null, "{view}");

    // GitLab lists trigger jobs (bridges) apart from the others; together they are the
    // pipeline's jobs. (Gantry answers both lists in one page.)
    let jobs = server.pipeline_jobs(project, pipeline).await;
    let (status, bridges) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/pipelines/{pipeline}/bridges"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{bridges}");
    let bridges = bridges.as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = jobs
        .iter()
        .chain(&bridges)
        .filter_map(|j| j["name"].as_str())
        .collect();
    assert_eq!(names.len(), JOBS, "{names:?}");
    for name in [
        "rspec unit pg17 44/44",
        "ruby_syntax: [${RUBY_VERSION_DEFAULT}]",
        "jest 11/11",
    ] {
        assert!(names.contains(&name), "{name} missing: {names:?}");
    }
}
