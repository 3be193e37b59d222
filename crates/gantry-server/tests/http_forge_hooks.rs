//! Forges' webhooks over HTTP, sent as GitHub, Gitea and GitLab send them (their headers,
//! their signatures, their documented payloads from `fixtures/forge_hooks/` with only
//! the branches, SHAs and numbers changed to this test's repository): merge request
//! pipelines with GitLab's variables, re-run on new commits and on pushes to the branch,
//! `CI_OPEN_MERGE_REQUESTS` on branch pipelines, GitLab's merge request API, and every
//! delivery that does not prove the project's secret refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const SECRET: &str = "a-shared-webhook-secret";

/// Branch pipelines only while the branch has no open merge request (GitLab's
/// documented "switch between branch and merge request pipelines" workflow).
const CI: &str = r#"
workflow:
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
    - if: $CI_COMMIT_BRANCH && $CI_OPEN_MERGE_REQUESTS
      when: never
    - if: $CI_COMMIT_BRANCH
test:
  script: [make test]
docs:
  script: [make docs]
  rules:
    - changes: ['docs/**/*']
"#;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/forge_hooks/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("JSON")
}

fn rev(repo: &Repo, rev: &str) -> String {
    let out = std::process::Command::new("git")
        .current_dir(repo.path())
        .args(["rev-parse", rev])
        .output()
        .expect("git");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn commit(repo: &Repo, path: &str, text: &str) -> String {
    let file = repo.path().join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, text).unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", &format!("change {path}")]);
    rev(repo, "HEAD")
}

/// A GitHub `pull_request` delivery of `action` for branch `feature` at `head`.
fn github_body(action: &str, number: i64, head: &str, base: &str) -> Vec<u8> {
    let mut v = fixture(if action == "opened" {
        "github_pull_request_opened.json"
    } else {
        "github_pull_request_synchronize.json"
    });
    v["action"] = json!(action);
    v["number"] = json!(number);
    let pr = &mut v["pull_request"];
    pr["number"] = json!(number);
    pr["head"]["ref"] = json!("feature");
    pr["head"]["sha"] = json!(head);
    pr["base"]["ref"] = json!("main");
    pr["base"]["sha"] = json!(base);
    if action == "closed" {
        pr["state"] = json!("closed");
    }
    serde_json::to_vec(&v).unwrap()
}

async fn post(
    server: &TestServer,
    project: i64,
    query: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let mut request = server
        .http
        .post(server.api(&format!("projects/{project}/forge_hook{query}")))
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.expect("delivery");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// GitHub's headers for `body`, signed with `secret`.
fn github_headers(event: &str, secret: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        ("User-Agent", "GitHub-Hookshot/044aadd".to_owned()),
        ("X-GitHub-Event", event.to_owned()),
        (
            "X-GitHub-Delivery",
            "72d3162e-cc78-11e3-81ab-4c9367dc0958".to_owned(),
        ),
        ("X-GitHub-Hook-ID", "292430182".to_owned()),
        (
            "X-Hub-Signature-256",
            format!(
                "sha256={}",
                gantry_server::coordinator::forge_hook_signature(secret, body)
            ),
        ),
    ]
}

async fn variables_of_first_job(server: &TestServer, runner: &str) -> Value {
    let (_, _, payload) = server.take_job(runner).await;
    payload
}

fn names(jobs: &[Value]) -> Vec<String> {
    let mut n: Vec<String> = jobs
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_owned())
        .collect();
    n.sort();
    n
}

#[tokio::test]
async fn github_pull_requests_run_merge_request_pipelines() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI), ("src/a.txt", "a")]);
    let base = rev(&repo, "main");
    repo.git(&["checkout", "-q", "-b", "feature"]);
    let head = commit(&repo, "src/a.txt", "b");
    // GitHub keeps each pull request's head at `refs/pull/<n>/head`.
    repo.git(&["update-ref", "refs/pull/7/head", &head]);
    repo.git(&["checkout", "-q", "main"]);
    let project = server.create_project("acme/app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    // A shallow clone, GitLab's default for new projects: the runner fetches named refs.
    let (status, settings) = server
        .admin(
            Method::PUT,
            &format!("projects/{project}"),
            Some(json!({ "ci_default_git_depth": 20 })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{settings}");

    // No secret yet: refused.
    let body = github_body("opened", 7, &head, &base);
    let (status, refused) = post(
        &server,
        project,
        "",
        &github_headers("pull_request", SECRET, &body),
        body.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let (status, set) = server
        .admin(
            Method::PUT,
            &format!("projects/{project}/forge_hook"),
            Some(json!({ "secret": SECRET })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert!(
        set["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/api/v4/projects/{project}/forge_hook")),
        "{set}"
    );
    // A wrong signature, a signature of another body, no signature: refused.
    for headers in [
        github_headers("pull_request", "not-the-secret", &body),
        github_headers("pull_request", SECRET, b"another body"),
        github_headers("pull_request", SECRET, &body)[..4].to_vec(),
    ] {
        let (status, refused) = post(&server, project, "", &headers, body.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
        assert!(refused["message"].is_string(), "{refused}");
    }
    assert!(
        server
            .coordinator
            .pipelines(project)
            .await
            .unwrap()
            .is_empty()
    );

    // GitHub's ping when the webhook is made.
    let ping = br#"{"zen":"Keep it logically awesome.","hook_id":292430182}"#.to_vec();
    let (status, pong) = post(
        &server,
        project,
        "",
        &github_headers("ping", SECRET, &ping),
        ping.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{pong}");
    assert_eq!(pong["pipeline_id"], Value::Null);

    let (status, outcome) = post(
        &server,
        project,
        "",
        &github_headers("pull_request", SECRET, &body),
        body.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(
        (
            &outcome["forge"],
            &outcome["action"],
            &outcome["merge_request_iid"]
        ),
        (&json!("github"), &json!("opened"), &json!(7)),
        "{outcome}"
    );
    let first = outcome["pipeline_id"].as_i64().expect("a pipeline");
    let (_, p) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/pipelines/{first}"),
            None,
        )
        .await;
    assert_eq!(p["source"], "merge_request_event", "{p}");
    assert_eq!(p["ref"], "refs/merge-requests/7/head", "{p}");
    assert_eq!(p["sha"], head.as_str());
    assert!(!p["protected"].as_bool().unwrap(), "never a protected ref");
    // `rules:changes` against the merge base: src/ changed, docs/ did not.
    assert_eq!(names(&server.pipeline_jobs(project, first).await), ["test"]);

    let payload = variables_of_first_job(&server, &runner).await;
    let var = |k: &str| job_variable_value(&payload, k).map(str::to_owned);
    assert_eq!(
        var("CI_PIPELINE_SOURCE").as_deref(),
        Some("merge_request_event")
    );
    assert_eq!(var("CI_COMMIT_BRANCH"), None, "not a branch pipeline");
    assert_eq!(var("CI_COMMIT_REF_NAME").as_deref(), Some("feature"));
    assert_eq!(var("CI_COMMIT_SHA"), Some(head.clone()));
    assert_eq!(var("CI_MERGE_REQUEST_IID").as_deref(), Some("7"));
    assert_eq!(
        var("CI_MERGE_REQUEST_EVENT_TYPE").as_deref(),
        Some("detached")
    );
    assert_eq!(
        var("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME").as_deref(),
        Some("feature")
    );
    assert_eq!(
        var("CI_MERGE_REQUEST_TARGET_BRANCH_NAME").as_deref(),
        Some("main")
    );
    assert_eq!(
        var("CI_MERGE_REQUEST_SOURCE_BRANCH_SHA").as_deref(),
        Some("")
    );
    assert_eq!(var("CI_MERGE_REQUEST_DIFF_BASE_SHA"), Some(base.clone()));
    assert_eq!(
        var("CI_MERGE_REQUEST_REF_PATH").as_deref(),
        Some("refs/merge-requests/7/head")
    );
    assert_eq!(
        var("CI_MERGE_REQUEST_TITLE").as_deref(),
        Some("Update the README with new information.")
    );
    assert_eq!(var("CI_MERGE_REQUEST_LABELS").as_deref(), Some("bug"));
    assert_eq!(
        var("CI_MERGE_REQUEST_PROJECT_PATH").as_deref(),
        Some("acme/app")
    );
    assert_eq!(var("CI_OPEN_MERGE_REQUESTS").as_deref(), Some("acme/app!7"));
    // GitLab's variables of a GitHub pull request.
    assert_eq!(var("CI_EXTERNAL_PULL_REQUEST_IID").as_deref(), Some("7"));
    assert_eq!(
        var("CI_EXTERNAL_PULL_REQUEST_SOURCE_REPOSITORY").as_deref(),
        Some("Codertocat/Hello-World")
    );
    assert_eq!(
        var("CI_EXTERNAL_PULL_REQUEST_SOURCE_BRANCH_SHA"),
        Some(head.clone())
    );
    assert_eq!(
        var("CI_EXTERNAL_PULL_REQUEST_TARGET_BRANCH_SHA"),
        Some(base.clone())
    );
    // The runner fetches the pipeline's ref alone (GitLab's refspecs for such a ref).
    assert_eq!(
        payload["git_info"]["refspecs"],
        json!([format!("+refs/pipelines/{first}:refs/pipelines/{first}")])
    );
    assert_eq!(payload["git_info"]["ref"], "refs/merge-requests/7/head");

    // The branch has an open merge request: its branch pipeline is filtered out by the
    // workflow (`CI_OPEN_MERGE_REQUESTS` is set on it), main's is not.
    let (status, filtered) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/pipeline?ref=feature"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{filtered}");
    server.create_pipeline(project, "main").await;

    // The same delivery again (GitHub redelivers): no second pipeline.
    let (status, again) = post(
        &server,
        project,
        "",
        &github_headers("pull_request", SECRET, &body),
        body.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["pipeline_id"], Value::Null, "{again}");
    assert!(
        again["reason"].as_str().unwrap().contains("already"),
        "{again}"
    );

    // New commits: `synchronize`, a pipeline of the new head, with the docs changed.
    repo.git(&["checkout", "-q", "feature"]);
    let second = commit(&repo, "docs/guide.md", "guide");
    repo.git(&["checkout", "-q", "main"]);
    repo.git(&["update-ref", "refs/pull/7/head", &second]);
    let body = github_body("synchronize", 7, &second, &base);
    let (status, outcome) = post(
        &server,
        project,
        "",
        &github_headers("pull_request", SECRET, &body),
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    let synced = outcome["pipeline_id"].as_i64().expect("a pipeline");
    assert_eq!(
        names(&server.pipeline_jobs(project, synced).await),
        ["docs", "test"]
    );

    // A push to the branch (the forge's push webhook, or the poller) re-runs it too.
    let (status, _) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/mirror/pull"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    repo.git(&["checkout", "-q", "feature"]);
    let third = commit(&repo, "src/b.txt", "c");
    repo.git(&["checkout", "-q", "main"]);
    let (status, pushed) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/mirror/pull"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{pushed}");
    assert_eq!(
        pushed[0]["pipeline_id"],
        Value::Null,
        "the branch pipeline is filtered: {pushed}"
    );

    // GitLab's merge request API.
    let (status, list) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/merge_requests"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let mr = &list[0];
    assert_eq!(
        (
            &mr["iid"],
            &mr["state"],
            &mr["source_branch"],
            &mr["target_branch"],
            &mr["sha"]
        ),
        (
            &json!(7),
            &json!("opened"),
            &json!("feature"),
            &json!("main"),
            &json!(third)
        ),
        "{mr}"
    );
    assert_eq!(mr["references"]["full"], "acme/app!7");
    assert_eq!(
        mr["web_url"],
        "https://github.com/Codertocat/Hello-World/pull/2"
    );
    let (_, pipelines) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/merge_requests/7/pipelines"),
            None,
        )
        .await;
    let shas: Vec<&str> = pipelines
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["sha"].as_str().unwrap())
        .collect();
    assert_eq!(shas, [third.as_str(), second.as_str(), head.as_str()]);

    // Closed: no longer open, so the branch gets branch pipelines again.
    let body = github_body("closed", 7, &third, &base);
    let (status, closed) = post(
        &server,
        project,
        "",
        &github_headers("pull_request", SECRET, &body),
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{closed}");
    assert_eq!(closed["pipeline_id"], Value::Null);
    let (_, mr) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/merge_requests/7"),
            None,
        )
        .await;
    assert_eq!(mr["state"], "closed", "{mr}");
    let branch = server.create_pipeline(project, "feature").await;
    assert_eq!(branch["ref"], "feature");
}

#[tokio::test]
async fn gitea_pull_requests_run_merged_results() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI), ("src/a.txt", "a")]);
    repo.git(&["checkout", "-q", "-b", "feature"]);
    let head = commit(&repo, "src/feature.txt", "feature");
    repo.git(&["checkout", "-q", "main"]);
    // The target moved on since the branch was made: the merged result is a new commit.
    let target = commit(&repo, "src/main.txt", "main");
    repo.git(&["update-ref", "refs/pull/2/head", &head]);
    let project = server
        .create_project("Test-CI/multi-line-secrets", &repo)
        .await["id"]
        .as_i64()
        .unwrap();
    server
        .admin(
            Method::PUT,
            &format!("projects/{project}/forge_hook"),
            Some(json!({ "secret": SECRET })),
        )
        .await;
    let (_, runner) = server.create_runner(json!({})).await;

    let mut v = fixture("gitea_pull_request_synchronized.json");
    v["pull_request"]["head"]["ref"] = json!("feature");
    v["pull_request"]["head"]["label"] = json!("feature");
    v["pull_request"]["head"]["sha"] = json!(head);
    v["pull_request"]["base"]["sha"] = json!(target);
    let body = serde_json::to_vec(&v).unwrap();
    let signature = gantry_server::coordinator::forge_hook_signature(SECRET, &body);
    // Gitea sends GitHub's and Gogs' headers too; its own signature is the bare hex.
    let headers = vec![
        (
            "X-GitHub-Delivery",
            "f6266f16-1bf3-46a5-9ea4-602e06ead473".to_owned(),
        ),
        ("X-GitHub-Event", "pull_request".to_owned()),
        (
            "X-Gogs-Delivery",
            "f6266f16-1bf3-46a5-9ea4-602e06ead473".to_owned(),
        ),
        ("X-Gogs-Event", "pull_request".to_owned()),
        (
            "X-Gitea-Delivery",
            "f6266f16-1bf3-46a5-9ea4-602e06ead473".to_owned(),
        ),
        ("X-Gitea-Event", "pull_request".to_owned()),
        ("X-Gitea-Event-Type", "pull_request".to_owned()),
        ("X-Gitea-Signature", signature.clone()),
        ("X-Gogs-Signature", signature),
    ];
    let mut forged = headers.clone();
    forged[7].1 = gantry_server::coordinator::forge_hook_signature("another", &body);
    let (status, _) = post(&server, project, "", &forged, body.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let (status, outcome) = post(&server, project, "?merged_result=true", &headers, body).await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(
        (&outcome["forge"], &outcome["action"]),
        (&json!("gitea"), &json!("synchronized"))
    );
    let id = outcome["pipeline_id"].as_i64().expect("a pipeline");
    let (_, p) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/pipelines/{id}"),
            None,
        )
        .await;
    assert_eq!(p["ref"], "refs/merge-requests/2/merge", "{p}");
    let merge = p["sha"].as_str().unwrap().to_owned();
    assert_ne!(merge, head);
    // The merge is the target's head and the source's, in GitLab's order.
    let mirror = server.data_dir().join(format!("repos/{project}.git"));
    let parents = std::process::Command::new("git")
        .arg("-C")
        .arg(&mirror)
        .args(["rev-list", "--parents", "-n", "1", &merge])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(parents.stdout).unwrap().trim(),
        format!("{merge} {target} {head}")
    );
    let payload = variables_of_first_job(&server, &runner).await;
    let var = |k: &str| job_variable_value(&payload, k).map(str::to_owned);
    assert_eq!(
        var("CI_MERGE_REQUEST_EVENT_TYPE").as_deref(),
        Some("merged_result")
    );
    assert_eq!(
        var("CI_MERGE_REQUEST_SOURCE_BRANCH_SHA"),
        Some(head.clone())
    );
    assert_eq!(
        var("CI_MERGE_REQUEST_TARGET_BRANCH_SHA"),
        Some(target.clone())
    );
    assert_eq!(var("CI_COMMIT_SHA"), Some(merge));
    assert_eq!(var("CI_MERGE_REQUEST_TITLE").as_deref(), Some("New Pull"));
    assert_eq!(
        var("CI_MERGE_REQUEST_LABELS").as_deref(),
        Some("Kind/Bug,Kind/Security")
    );
    assert_eq!(var("CI_EXTERNAL_PULL_REQUEST_IID").as_deref(), Some("2"));
}

#[tokio::test]
async fn gitlab_merge_request_hooks_run_merge_request_pipelines() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI), ("src/a.txt", "a")]);
    let base = rev(&repo, "main");
    repo.git(&["checkout", "-q", "-b", "feature/booking-validation"]);
    let head = commit(&repo, "src/a.txt", "validated");
    repo.git(&["checkout", "-q", "main"]);
    let project = server
        .create_project("flightjs/flight-management", &repo)
        .await["id"]
        .as_i64()
        .unwrap();
    server
        .admin(
            Method::PUT,
            &format!("projects/{project}/forge_hook"),
            Some(json!({ "secret": SECRET })),
        )
        .await;
    let (_, runner) = server.create_runner(json!({})).await;

    let mut v = fixture("gitlab_merge_request_open.json");
    v["object_attributes"]["last_commit"]["id"] = json!(head);
    let body = serde_json::to_vec(&v).unwrap();
    let headers = |token: &str| {
        vec![
            ("X-Gitlab-Event", "Merge Request Hook".to_owned()),
            ("X-Gitlab-Token", token.to_owned()),
            ("X-Gitlab-Instance", "https://gitlab.example.com".to_owned()),
            (
                "X-Gitlab-Webhook-UUID",
                "5d1e5f2e-1a55-4b8c-9d7e-0c7c6c2d7f11".to_owned(),
            ),
            (
                "X-Gitlab-Event-UUID",
                "13792a34-cac6-4fda-95a8-c58e00a3954e".to_owned(),
            ),
        ]
    };
    let (status, _) = post(&server, project, "", &headers("wrong-token"), body.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, outcome) = post(&server, project, "", &headers(SECRET), body).await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(
        (
            &outcome["forge"],
            &outcome["action"],
            &outcome["merge_request_iid"]
        ),
        (&json!("gitlab"), &json!("open"), &json!(16))
    );
    assert!(outcome["pipeline_id"].is_i64(), "{outcome}");
    let payload = variables_of_first_job(&server, &runner).await;
    let var = |k: &str| job_variable_value(&payload, k).map(str::to_owned);
    assert_eq!(var("CI_MERGE_REQUEST_IID").as_deref(), Some("16"));
    assert_eq!(
        var("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME").as_deref(),
        Some("feature/booking-validation")
    );
    assert_eq!(
        var("CI_COMMIT_REF_SLUG").as_deref(),
        Some("feature-booking-validation")
    );
    assert_eq!(var("CI_MERGE_REQUEST_DIFF_BASE_SHA"), Some(base));
    assert_eq!(
        var("CI_MERGE_REQUEST_LABELS").as_deref(),
        Some("enhancement")
    );
    assert_eq!(
        var("CI_MERGE_REQUEST_DESCRIPTION").as_deref(),
        Some("This merge request adds input validation to the booking form.")
    );
    assert_eq!(
        var("CI_EXTERNAL_PULL_REQUEST_IID"),
        None,
        "a GitLab merge request"
    );
    assert_eq!(
        var("CI_OPEN_MERGE_REQUESTS").as_deref(),
        Some("flightjs/flight-management!16")
    );
}
