//! GitLab's repository API, read from the project's mirror: a file at a ref (base64 and
//! raw), one commit with its newest pipeline, a ref's commits a page at a time, the
//! branches, the tags with their releases.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use base64::Engine as _;
use http_support::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::Digest as _;

const CI: &str = "build:\n  script: [make]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_commits_and_branches_read_as_on_gitlab() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI), ("src/lib.rs", "pub fn a() {}\n")]);
    let first = repo.head();
    repo.git(&["checkout", "-q", "-b", "feature/x"]);
    let feature = repo.commit(&[("src/lib.rs", "pub fn b() {}\n")], "Change lib\n\nWhy.");
    repo.git(&["checkout", "-q", "main"]);
    repo.commit(&[("run.sh", "#!/bin/sh\necho hi\n")], "Add a script");
    repo.make_executable("run.sh");
    let main = repo.head();
    let project = server.create_project("group/app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let path = |p: &str| format!("projects/{project}/repository/{p}");

    // A file at a branch, its path URL-encoded as GitLab's clients send it.
    let (status, file) = server
        .admin(
            Method::GET,
            &path("files/src%2Flib.rs?ref=feature%2Fx"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{file}");
    let content = base64::engine::general_purpose::STANDARD
        .decode(file["content"].as_str().unwrap())
        .unwrap();
    assert_eq!(content, b"pub fn b() {}\n");
    assert_eq!(file["file_name"], "lib.rs");
    assert_eq!(file["file_path"], "src/lib.rs");
    assert_eq!(file["size"], 14);
    assert_eq!(file["encoding"], "base64");
    assert_eq!(file["ref"], "feature/x");
    assert_eq!(file["commit_id"], feature);
    assert_eq!(file["last_commit_id"], feature);
    assert_eq!(
        file["blob_id"],
        repo.git(&["rev-parse", "feature/x:src/lib.rs"])
    );
    assert_eq!(
        file["content_sha256"],
        format!("{:x}", sha2::Sha256::digest(&content))
    );
    assert_eq!(file["execute_filemode"], false);
    // At a commit; the last commit that touched it is older than the ref's.
    let (_, at_main) = server
        .admin(
            Method::GET,
            &path(&format!("files/src%2Flib.rs?ref={main}")),
            None,
        )
        .await;
    assert_eq!(at_main["commit_id"], main);
    assert_eq!(at_main["last_commit_id"], first);
    let (_, script) = server
        .admin(Method::GET, &path("files/run.sh?ref=main"), None)
        .await;
    assert_eq!(script["execute_filemode"], true, "{script}");
    // Raw: the bytes, the default branch without `ref`.
    let raw = server
        .http
        .get(server.api(&path("files/src%2Flib.rs/raw")))
        .header("PRIVATE-TOKEN", &server.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::OK);
    assert_eq!(raw.headers()["x-gitlab-commit-id"], main.as_str());
    assert_eq!(raw.text().await.unwrap(), "pub fn a() {}\n");
    // What is not there, and a missing `ref`.
    for (query, code, message) in [
        (
            "files/nope.rs?ref=main",
            StatusCode::NOT_FOUND,
            "404 File Not Found",
        ),
        (
            "files/src?ref=main",
            StatusCode::NOT_FOUND,
            "404 File Not Found",
        ),
        (
            "files/src%2Flib.rs?ref=nope",
            StatusCode::NOT_FOUND,
            "404 Commit Not Found",
        ),
        (
            "files/src%2Flib.rs",
            StatusCode::BAD_REQUEST,
            "ref is missing",
        ),
        (
            "commits/0123abc",
            StatusCode::NOT_FOUND,
            "404 Commit Not Found",
        ),
        (
            "branches/nope",
            StatusCode::NOT_FOUND,
            "404 Branch Not Found",
        ),
    ] {
        let (status, body) = server.admin(Method::GET, &path(query), None).await;
        assert_eq!(status, code, "{query}: {body}");
        let text = body.to_string();
        assert!(text.contains(message), "{query}: {text}");
    }

    // A commit, and the newest pipeline of it once there is one.
    let (status, commit) = server
        .admin(Method::GET, &path(&format!("commits/{feature}")), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{commit}");
    assert_eq!(commit["id"], feature);
    assert_eq!(commit["parent_ids"], json!([first]));
    assert_eq!(commit["title"], "Change lib");
    assert_eq!(commit["message"], "Change lib\n\nWhy.");
    assert_eq!(commit["project_id"], project);
    assert_eq!(commit["last_pipeline"], Value::Null);
    let pipeline = server.create_pipeline(project, "main").await;
    let (_, commit) = server.admin(Method::GET, &path("commits/main"), None).await;
    assert_eq!(commit["id"], main);
    assert_eq!(commit["last_pipeline"]["id"], pipeline["id"]);
    assert_eq!(commit["status"], pipeline["status"]);

    // Branches, by name.
    let (status, branches) = server.admin(Method::GET, &path("branches"), None).await;
    assert_eq!(status, StatusCode::OK, "{branches}");
    let names: Vec<&str> = branches
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["feature/x", "main"]);
    assert_eq!(branches[1]["default"], true);
    assert_eq!(branches[0]["default"], false);
    assert_eq!(branches[1]["commit"]["id"], main);
    let (status, branch) = server
        .admin(Method::GET, &path("branches/feature%2Fx"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(branch["commit"]["id"], feature);
    assert_eq!(branch["protected"], false);
    assert!(
        branch["web_url"]
            .as_str()
            .unwrap()
            .ends_with("/group/app/-/tree/feature/x")
    );

    // A ref's history, newest first, a page at a time; of one path.
    let commits_of = |query: &str| {
        let url = server.api(&path(&format!("commits{query}")));
        let http = server.http.clone();
        let token = server.admin.clone();
        async move {
            let response = http
                .get(url)
                .header("PRIVATE-TOKEN", token)
                .send()
                .await
                .unwrap();
            let headers = response.headers().clone();
            let body: Value = response.json().await.unwrap();
            let ids: Vec<String> = body
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["id"].as_str().unwrap().to_owned())
                .collect();
            (ids, headers)
        }
    };
    let history: Vec<String> = repo
        .git(&["log", "--format=%H", "main"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(history.len(), 3);
    let (all, _) = commits_of("").await;
    assert_eq!(all, history);
    let (first_page, headers) = commits_of("?per_page=2").await;
    assert_eq!(first_page, history[..2]);
    assert_eq!(
        (&headers["x-total"], &headers["x-next-page"]),
        (&"3".parse().unwrap(), &"2".parse().unwrap())
    );
    let (second_page, _) = commits_of("?per_page=2&page=2").await;
    assert_eq!(second_page, history[2..]);
    let (of_lib, _) = commits_of("?ref_name=feature%2Fx&path=src%2Flib.rs").await;
    assert_eq!(of_lib, [feature.clone(), first.clone()]);

    // Tags: annotated (its message, the tag object as target) and lightweight, and the
    // release a tag pipeline's `release:` job made of one.
    repo.git(&["tag", "-a", "v1.0", "-m", "First release", &first]);
    repo.git(&["tag", "light", &main]);
    repo.git(&["checkout", "-q", "-b", "rel", &main]);
    let released = repo.commit(
        &[(
            ".gitlab-ci.yml",
            "release:\n  script: [echo]\n  release:\n    tag_name: $CI_COMMIT_TAG\n    description: Notes\n",
        )],
        "Release it",
    );
    repo.git(&["tag", "-a", "v2.0", "-m", "Second release"]);
    let (status, _) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/mirror/pull"),
            None,
        )
        .await;
    assert!(status.is_success(), "{status}");
    // The pull made a push pipeline of each new ref (the tag `v2.0`'s among them): run
    // every job there is.
    let (_, runner) = server.create_runner(json!({})).await;
    loop {
        let response = server.request_job(&runner, None).await;
        if response.status() != StatusCode::CREATED {
            break;
        }
        let payload: Value = response.json().await.unwrap();
        let token = payload["token"].as_str().unwrap().to_owned();
        server
            .end_job(payload["id"].as_i64().unwrap(), &token, "success")
            .await;
    }
    let (status, tags) = server.admin(Method::GET, &path("tags"), None).await;
    assert_eq!(status, StatusCode::OK, "{tags}");
    let names: Vec<&str> = tags
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["light", "v1.0", "v2.0"]);
    assert_eq!(tags[0]["message"], "");
    assert_eq!(tags[0]["target"], main);
    assert_eq!(tags[0]["commit"]["id"], main);
    assert_eq!(tags[0]["release"], Value::Null);
    assert_eq!(tags[2]["commit"]["id"], released);
    assert_eq!(
        tags[2]["release"],
        json!({"tag_name": "v2.0", "description": "Notes"}),
        "{tags}"
    );
    let (_, v1) = server.admin(Method::GET, &path("tags/v1.0"), None).await;
    assert_eq!(v1["message"], "First release");
    assert_eq!(v1["target"], repo.git(&["rev-parse", "v1.0"]));
    assert_ne!(v1["target"], first);
    assert_eq!(v1["commit"]["id"], first);
    assert_eq!(v1["release"], Value::Null);
    assert_eq!(v1["protected"], false);
    let (status, _) = server.admin(Method::GET, &path("tags/nope"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
