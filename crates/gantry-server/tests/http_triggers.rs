//! Pipeline trigger tokens over HTTP, as another system's CI uses them: create one with
//! the admin token, start pipelines with it (multipart form, JSON, the webhook form),
//! variables reaching the job, `CI_PIPELINE_SOURCE=trigger`, `CI_TRIGGER_SHORT_TOKEN` and
//! `CI_PAGES_URL` seen by `rules`, and every
//! way a trigger is refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::*;
use reqwest::Method;
use reqwest::StatusCode;
use reqwest::multipart::Form;
use serde_json::{Value, json};

/// The rule also reads `CI_TRIGGER_SHORT_TOKEN` and `CI_PAGES_URL`, which GitLab's rules
/// see at creation: without them no job, and no pipeline, would be created.
const CI: &str = r#"
deploy:
  rules:
    - if: $CI_PIPELINE_SOURCE == "trigger" && $CI_TRIGGER_SHORT_TOKEN && $CI_PAGES_URL =~ /\/gantry\/app$/
  script: [echo "deploying to $DEPLOY_TARGET"]
"#;

fn var<'a>(payload: &'a Value, key: &str) -> Option<&'a str> {
    payload["variables"]
        .as_array()?
        .iter()
        .find(|v| v["key"] == key)
        .and_then(|v| v["value"].as_str())
}

#[tokio::test]
async fn a_trigger_token_starts_pipelines_with_variables_until_it_is_deleted() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let other = server.create_project("other", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;

    let (status, refused) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/triggers"),
            Some(json!({"description": " "})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused.to_string().contains("description"), "{refused}");
    let (status, created) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/triggers"),
            Some(json!({"description": "nightly from the release repo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let token = created["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("glptt-") && token.len() == 46, "{token}");
    let trigger_id = created["id"].as_i64().unwrap();

    // Lists show the token's first characters only; without the admin token, nothing.
    let (status, listed) = server
        .admin(Method::GET, &format!("projects/{project}/triggers"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed[0]["description"], "nightly from the release repo");
    let shown = listed[0]["token"].as_str().unwrap();
    assert!(token.starts_with(shown.trim_end_matches('…')) && shown.len() < token.len());
    // One trigger, and a new description for it (python-gitlab's `triggers.get`, `save`).
    let one = format!("projects/{project}/triggers/{trigger_id}");
    let (status, got) = server.admin(Method::GET, &one, None).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["token"], shown);
    let (status, changed) = server
        .admin(
            Method::PUT,
            &one,
            Some(json!({"description": "from the release repo"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["description"], "from the release repo");
    let (status, refused) = server
        .admin(Method::PUT, &one, Some(json!({"description": ""})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let (status, _) = server
        .admin(
            Method::GET,
            &format!("projects/{other}/triggers/{trigger_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another project's trigger");
    let anonymous = server
        .http
        .get(server.api(&format!("projects/{project}/triggers")))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);

    // `curl -F token=… -F ref=main -F "variables[DEPLOY_TARGET]=staging"`: no user token.
    let form = Form::new()
        .text("token", token.clone())
        .text("ref", "main")
        .text("variables[DEPLOY_TARGET]", "staging");
    let response = server
        .http
        .post(server.api(&format!("projects/{project}/trigger/pipeline")))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let pipeline: Value = response.json().await.unwrap();
    assert_eq!(pipeline["source"], "trigger", "{pipeline}");
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(var(&payload, "DEPLOY_TARGET"), Some("staging"));
    assert_eq!(var(&payload, "CI_PIPELINE_SOURCE"), Some("trigger"));
    assert_eq!(var(&payload, "CI_PIPELINE_TRIGGERED"), Some("true"));
    // GitLab's `Ci::Trigger#short_token`: 4 characters after `glptt-`.
    assert_eq!(var(&payload, "CI_TRIGGER_SHORT_TOKEN"), Some(&token[6..10]));

    // JSON, and the webhook form with the token in the query.
    let response = server
        .http
        .post(server.api(&format!("projects/{project}/trigger/pipeline")))
        .json(&json!({"token": token, "ref": "main", "variables": {"DEPLOY_TARGET": "prod"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(var(&payload, "DEPLOY_TARGET"), Some("prod"));
    let response = server
        .http
        .post(server.api(&format!(
            "projects/{project}/ref/main/trigger/pipeline?token={token}&variables[DEPLOY_TARGET]=hook"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(var(&payload, "DEPLOY_TARGET"), Some("hook"));
    // Every triggered pipeline gets the request (its token left out) as GitLab's raw file
    // variable `TRIGGER_PAYLOAD`; a webhook's JSON body arrives as it was sent.
    let hook_body =
        json!({"object_kind": "push", "after": "$NOT_EXPANDED", "commits": [{"id": "abc"}]});
    let response = server
        .http
        .post(server.api(&format!(
            "projects/{project}/ref/main/trigger/pipeline?token={token}"
        )))
        .json(&hook_body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let (_, _, payload) = server.take_job(&runner).await;
    let trigger_payload = payload["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["key"] == "TRIGGER_PAYLOAD")
        .expect("TRIGGER_PAYLOAD is set");
    assert_eq!(trigger_payload["file"], true, "{trigger_payload}");
    assert_eq!(trigger_payload["raw"], true, "{trigger_payload}");
    let sent: Value = serde_json::from_str(trigger_payload["value"].as_str().unwrap()).unwrap();
    assert_eq!(sent["object_kind"], "push");
    assert_eq!(sent["after"], "$NOT_EXPANDED");
    assert_eq!(sent["commits"][0]["id"], "abc");
    assert_eq!(sent["ref"], "main");
    assert_eq!(sent["id"], project.to_string());
    assert!(sent.get("token").is_none(), "{sent}");
    let (_, listed) = server
        .admin(Method::GET, &format!("projects/{project}/triggers"), None)
        .await;
    assert!(listed[0]["last_used"].is_string(), "{listed}");

    // Refusals: each a 4xx naming what is wrong.
    let post = |project: i64, body: Value| {
        server
            .http
            .post(server.api(&format!("projects/{project}/trigger/pipeline")))
            .json(&body)
            .send()
    };
    for (project, body, status, needle) in [
        (
            project,
            json!({"token": "glptt-nope", "ref": "main"}),
            StatusCode::NOT_FOUND,
            "Not Found",
        ),
        (
            other,
            json!({"token": token, "ref": "main"}),
            StatusCode::NOT_FOUND,
            "Not Found",
        ),
        (
            project,
            json!({"ref": "main"}),
            StatusCode::BAD_REQUEST,
            "token is missing",
        ),
        (
            project,
            json!({"token": token}),
            StatusCode::BAD_REQUEST,
            "ref is missing",
        ),
        (
            project,
            json!({"token": token, "ref": "main", "variables": {"NOT-A-NAME": "x"}}),
            StatusCode::BAD_REQUEST,
            "is not a variable name",
        ),
        (
            project,
            json!({"token": token, "ref": "main", "variables": ["x"]}),
            StatusCode::BAD_REQUEST,
            "variables must be an object",
        ),
        (
            project,
            json!({"token": token, "ref": "no-such-branch"}),
            StatusCode::BAD_REQUEST,
            "no-such-branch",
        ),
    ] {
        let response = post(project, body.clone()).await.unwrap();
        let (got, error) = expect_client_error(response, "trigger").await;
        assert_eq!(got, status, "{body}: {error}");
        assert!(error.to_string().contains(needle), "{body}: {error}");
    }

    // Deleted: the token starts nothing any more.
    let (status, _) = server
        .admin(
            Method::DELETE,
            &format!("projects/{project}/triggers/{trigger_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let response = post(project, json!({"token": token, "ref": "main"}))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let (status, _) = server
        .admin(
            Method::DELETE,
            &format!("projects/{project}/triggers/{trigger_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Files made unwritable for this process, even as root (`chattr +i`; `chmod a-w`
/// otherwise), and writable again when dropped.
struct Unwritable(Vec<std::path::PathBuf>);

impl Unwritable {
    fn new(paths: &[std::path::PathBuf]) -> Self {
        for path in paths {
            // Immutable files hold against root too; chmod serves any other user.
            let run = |program: &str, flag: &str| {
                std::process::Command::new(program)
                    .arg("-R")
                    .arg(flag)
                    .arg(path)
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            let status = run("chattr", "+i") || run("chmod", "a-w");
            assert!(
                status,
                "this test makes {} unwritable with `chattr +i` (root) or `chmod a-w`: install e2fsprogs, or run on a file system with immutable files",
                path.display()
            );
        }
        Self(paths.to_vec())
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::process::Command::new("chattr")
                .arg("-R")
                .arg("-i")
                .arg(path)
                .status();
            let _ = std::process::Command::new("chmod")
                .arg("-R")
                .arg("u+w")
                .arg(path)
                .status();
        }
    }
}

/// Issue 35: a pipeline creation that cannot write the project's mirror (a read-only
/// `repos` directory, or a ref write failing after the pipeline was stored) leaves no
/// pipeline, answers `500`, and tells a trigger token's holder no server path. GitLab
/// has no idempotency key on pipeline creation: each request that succeeds creates one
/// pipeline, and one that fails creates none, so a retry after a failure yields one.
#[tokio::test]
async fn a_pipeline_whose_ref_cannot_be_written_is_not_created() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, created) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/triggers"),
            Some(json!({"description": "ci"})),
        )
        .await;
    let token = created["token"].as_str().unwrap().to_owned();
    let data_dir = server.data_dir().display().to_string();
    let create = || async {
        server
            .admin(
                Method::POST,
                &format!("projects/{project}/pipeline"),
                Some(json!({"ref": "main"})),
            )
            .await
    };
    let trigger = || async {
        let response = server
            .http
            .post(server.api(&format!("projects/{project}/trigger/pipeline")))
            .json(&json!({"token": token, "ref": "main"}))
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json::<Value>().await.unwrap())
    };
    let pipelines = || async {
        let (status, list) = server
            .admin(Method::GET, &format!("projects/{project}/pipelines"), None)
            .await;
        assert_eq!(status, StatusCode::OK);
        list.as_array().unwrap().len()
    };

    // The ref write itself fails after the pipeline was stored: the trial write passes,
    // the pipeline's own ref cannot be replaced.
    let refs = server
        .data_dir()
        .join("repos")
        .join(format!("{project}.git"))
        .join("refs")
        .join("pipelines");
    std::fs::create_dir_all(&refs).unwrap();
    let sha = repo_head(&repo, "HEAD");
    // Another object than the commit, so that git has to replace the file.
    let tree = repo_head(&repo, "HEAD^{tree}");
    let blocked: Vec<_> = (1..=10)
        .map(|id| {
            let path = refs.join(id.to_string());
            std::fs::write(&path, format!("{tree}\n")).unwrap();
            path
        })
        .collect();
    {
        let _ro = Unwritable::new(&blocked);
        let (status, body) = create().await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        let (status, body) = trigger().await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert!(!body.to_string().contains(&data_dir), "{body}");
        assert_eq!(
            pipelines().await,
            0,
            "the stored pipeline was removed again"
        );
    }
    for path in &blocked {
        std::fs::remove_file(path).unwrap();
    }

    // The whole `repos` directory read-only, the project's mirror in it.
    {
        let _ro = Unwritable::new(&[server.data_dir().join("repos")]);
        let (status, body) = create().await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("no pipeline was created"),
            "the admin is told why: {body}"
        );
        let (status, body) = trigger().await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert!(
            !body.to_string().contains(&data_dir) && !body.to_string().contains("repos"),
            "a trigger token's holder sees no server path: {body}"
        );
        assert_eq!(pipelines().await, 0);
    }

    // Writable again: a retry creates one pipeline, with its ref.
    let (status, body) = create().await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(pipelines().await, 1);
    let id = body["id"].as_i64().unwrap();
    let written = std::fs::read_to_string(refs.join(id.to_string())).unwrap();
    assert_eq!(written.trim(), sha);
}

fn repo_head(repo: &Repo, rev: &str) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo.path())
        .args(["rev-parse", rev])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
