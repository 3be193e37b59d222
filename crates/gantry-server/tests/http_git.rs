//! The clone URL of the job payload works with real `git` over HTTP while the job runs
//! (and fetches the pipeline refspecs), and stops working when the job ends.

use crate::http_support;

use std::path::Path;
use std::process::{Command, Output};

use http_support::{Repo, TestServer};
use reqwest::StatusCode;
use serde_json::json;

fn git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .output()
        .expect("git runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_clone_with_the_job_token_while_the_job_runs() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[
        (".gitlab-ci.yml", "build:\n  script: [make]\n"),
        ("src/main.c", "int main(){}\n"),
    ]);
    let project = server.create_project("acme/widget", &repo).await;
    let project_id = project["id"].as_i64().expect("id");
    server.create_pipeline(project_id, "main").await;
    let (_, runner) = server.create_runner(json!({})).await;
    let (job_id, job_token, payload) = server.take_job(&runner).await;
    let git_info = &payload["git_info"];
    let url = git_info["repo_url"].as_str().expect("repo_url");
    assert!(url.starts_with("http://gitlab-ci-token:glcbt-"), "{url}");
    assert!(url.ends_with("/acme/widget.git"), "{url}");
    let sha = git_info["sha"].as_str().expect("sha");

    let work = tempfile::tempdir().expect("dir");
    let cloned = git(work.path(), &["clone", "-q", url, "checkout"]);
    assert!(
        cloned.status.success(),
        "clone: {}",
        String::from_utf8_lossy(&cloned.stderr)
    );
    let checkout = work.path().join("checkout");
    assert!(checkout.join("src/main.c").exists());
    let head = git(&checkout, &["rev-parse", "HEAD"]);
    assert_eq!(String::from_utf8_lossy(&head.stdout).trim(), sha);

    // What gitlab-runner does: fetch the refspecs of the payload, check out the sha.
    let mut fetch = vec!["fetch", "-q", "origin"];
    let refspecs: Vec<String> = git_info["refspecs"]
        .as_array()
        .expect("refspecs")
        .iter()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect();
    fetch.extend(refspecs.iter().map(String::as_str));
    let fetched = git(&checkout, &fetch);
    assert!(
        fetched.status.success(),
        "fetch {refspecs:?}: {}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert!(git(&checkout, &["checkout", "-q", sha]).status.success());

    // Without credentials git is asked for them; with another token it is refused.
    let anonymous = url.replacen(&format!("gitlab-ci-token:{job_token}@"), "", 1);
    assert!(
        !git(work.path(), &["clone", "-q", &anonymous, "anon"])
            .status
            .success()
    );
    let wrong = url.replacen(
        &job_token,
        "glcbt-0000000000000000000000000000000000000000",
        1,
    );
    assert!(
        !git(work.path(), &["clone", "-q", &wrong, "wrong"])
            .status
            .success()
    );
    let push = git(&checkout, &["push", "-q", "origin", "HEAD:refs/heads/evil"]);
    assert!(!push.status.success(), "the mirror is read-only");

    // The job ends: its token no longer opens the repository.
    let done = server
        .http
        .put(server.api(&format!("jobs/{job_id}")))
        .json(&json!({ "token": job_token, "state": "success" }))
        .send()
        .await
        .expect("update");
    assert_eq!(done.status(), StatusCode::OK);
    let after = git(work.path(), &["clone", "-q", url, "after"]);
    assert!(!after.status.success(), "a finished job's token is revoked");

    // The admin token works for people (any user name).
    let admin_url = format!("{}/acme/widget.git", server.url).replacen(
        "://",
        &format!("://root:{}@", server.admin),
        1,
    );
    let by_admin = git(work.path(), &["clone", "-q", &admin_url, "admin"]);
    assert!(
        by_admin.status.success(),
        "{}",
        String::from_utf8_lossy(&by_admin.stderr)
    );
}
