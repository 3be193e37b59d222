//! A project's settings over the user API (`PUT /projects/:id`, and `POST /projects` with
//! `default_branch` and `ci_config_path`, GitLab's names) and what each one changes: the
//! file a pipeline reads, `CI_DEFAULT_BRANCH`, the job timeout a runner gets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::{Repo, TestServer, job_variable_value as var};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const MAIN_CI: &str = "from-main-file:\n  script: [echo]\n";
const OTHER_CI: &str = "from-other-file:\n  script: [echo]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_change_what_the_next_pipelines_get() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", MAIN_CI), ("ci/other.yml", OTHER_CI)]);
    repo.git(&["branch", "stable"]);
    let project = server.create_project("acme/app", &repo).await;
    let pid = project["id"].as_i64().unwrap();
    assert_eq!(
        (
            &project["default_branch"],
            &project["ci_config_path"],
            &project["build_timeout"],
            &project["keep_latest_artifact"]
        ),
        (
            &json!("main"),
            &json!(".gitlab-ci.yml"),
            &json!(3600),
            &json!(true)
        )
    );
    let (_, runner) = server.create_runner(json!({})).await;

    let (status, updated) = server
        .admin(
            Method::PUT,
            &format!("projects/{pid}"),
            Some(json!({
                "default_branch": "stable",
                "ci_config_path": "ci/other.yml",
                "build_timeout": 900,
                "keep_latest_artifact": false,
                "description": "ignored: a GitLab setting Gantry does not have",
            })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(
        (
            &updated["default_branch"],
            &updated["ci_config_path"],
            &updated["build_timeout"],
            &updated["keep_latest_artifact"]
        ),
        (
            &json!("stable"),
            &json!("ci/other.yml"),
            &json!(900),
            &json!(false)
        )
    );
    // The project as read again, by id and by path, is the one the update answered.
    for path in [format!("projects/{pid}"), "projects/acme%2Fapp".to_owned()] {
        let (status, read) = server.admin(Method::GET, &path, None).await;
        assert_eq!((status, &read), (StatusCode::OK, &updated), "{path}");
    }

    let pipeline = server.create_pipeline(pid, "main").await;
    let jobs = server
        .pipeline_jobs(pid, pipeline["id"].as_i64().unwrap())
        .await;
    let names: Vec<&str> = jobs.iter().map(|j| j["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["from-other-file"]);
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(var(&payload, "CI_DEFAULT_BRANCH"), Some("stable"));
    assert_eq!(var(&payload, "CI_CONFIG_PATH"), Some("ci/other.yml"));
    assert_eq!(payload["runner_info"]["timeout"], 900);

    // An empty configuration path is the default one again; what is not named stays.
    let (status, reset) = server
        .admin(
            Method::PUT,
            &format!("projects/{pid}"),
            Some(json!({"ci_config_path": ""})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reset}");
    assert_eq!(reset["ci_config_path"], ".gitlab-ci.yml");
    assert_eq!(reset["default_branch"], "stable");
    assert_eq!(reset["build_timeout"], 900);
    let pipeline = server.create_pipeline(pid, "main").await;
    let jobs = server
        .pipeline_jobs(pid, pipeline["id"].as_i64().unwrap())
        .await;
    assert_eq!(jobs[0]["name"], "from-main-file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_setting_names_itself_and_changes_nothing() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", MAIN_CI)]);
    let pid = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let path = format!("projects/{pid}");
    let (_, before) = server.admin(Method::GET, &path, None).await;

    for (body, says) in [
        (
            json!({"ci_config_path": "ci/other.yml", "build_timeout": 599}),
            "build_timeout needs to be between 10 minutes and 1 month",
        ),
        (
            json!({"build_timeout": 2_629_746}),
            "build_timeout needs to be between 10 minutes and 1 month",
        ),
        (
            json!({"ci_config_path": "../elsewhere.yml"}),
            "must be relative to the repository root",
        ),
        (
            json!({"ci_config_path": "/abs.yml"}),
            "must be relative to the repository root",
        ),
        (
            json!({"ci_config_path": "x".repeat(256)}),
            "at most 255 are allowed",
        ),
        (
            json!({"build_timeout": 900, "default_branch": "nope"}),
            "the default branch `nope` is no branch of",
        ),
        (
            json!({"default_branch": ""}),
            "the default branch `` is no branch of",
        ),
        (
            json!({"keep_latest_artifact": "maybe"}),
            "keep_latest_artifact",
        ),
    ] {
        let (status, answer) = server.admin(Method::PUT, &path, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert!(answer.to_string().contains(says), "{body}: {answer}");
        let (_, now) = server.admin(Method::GET, &path, None).await;
        assert_eq!(now, before, "{body} changed the project");
    }

    // Typed as GitLab's API reads them: numbers and booleans as JSON strings too.
    let (status, body) = server
        .admin(
            Method::PUT,
            &path,
            Some(json!({"build_timeout": "1800", "keep_latest_artifact": "no"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["build_timeout"], &body["keep_latest_artifact"]),
        (&json!(1800), &json!(false))
    );

    // Forms, as GitLab's documentation sends them (`curl --data`).
    let response = server
        .http
        .put(server.api(&path))
        .header("PRIVATE-TOKEN", &server.admin)
        .form(&[("build_timeout", "7200"), ("keep_latest_artifact", "false")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (&body["build_timeout"], &body["keep_latest_artifact"]),
        (&json!(7200), &json!(false))
    );

    // Who may, and which project.
    let anonymous = server
        .http
        .put(server.api(&path))
        .json(&json!({"build_timeout": 900}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let (status, _) = server
        .admin(
            Method::PUT,
            "projects/4242",
            Some(json!({"build_timeout": 900})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// `POST /projects` takes GitLab's `default_branch` (a branch of the repository, when it
/// has any) and `ci_config_path` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_is_created_with_its_configuration_path_and_default_branch() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", MAIN_CI), ("ci/other.yml", OTHER_CI)]);
    repo.git(&["branch", "stable"]);
    let (status, project) = server
        .admin(
            Method::POST,
            "projects",
            Some(json!({"name": "app", "repo_url": repo.path(),
                        "default_branch": "stable", "ci_config_path": "ci/other.yml"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{project}");
    assert_eq!(project["default_branch"], "stable");
    assert_eq!(project["ci_config_path"], "ci/other.yml");
    let pid = project["id"].as_i64().unwrap();
    let pipeline = server.create_pipeline(pid, "main").await;
    let jobs = server
        .pipeline_jobs(pid, pipeline["id"].as_i64().unwrap())
        .await;
    assert_eq!(jobs[0]["name"], "from-other-file");

    let (status, refused) = server
        .admin(
            Method::POST,
            "projects",
            Some(json!({"name": "bad", "repo_url": repo.path(), "ci_config_path": "../x.yml"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    // A default branch the repository does not have: refused, and no project is made.
    let (status, refused) = server
        .admin(
            Method::POST,
            "projects",
            Some(json!({"name": "typo", "repo_url": repo.path(), "default_branch": "stabel"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused
            .to_string()
            .contains("the default branch `stabel` is no branch of"),
        "{refused}"
    );
    let (status, _) = server.admin(Method::GET, "projects/typo", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A repository without branches yet takes any name: its first push makes the branch.
    let empty = tempfile::tempdir().unwrap();
    let init = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(empty.path())
        .status()
        .unwrap();
    assert!(init.success());
    let (status, project) = server
        .admin(
            Method::POST,
            "projects",
            Some(json!({"name": "fresh", "repo_url": empty.path(), "default_branch": "trunk"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{project}");
    assert_eq!(project["default_branch"], "trunk");
}

/// `DELETE /projects/:id`: `202` as on GitLab, by id or path; then the project and its
/// pipelines are gone (`404`), and its name can be taken again.
#[tokio::test]
async fn a_project_is_deleted_by_id_or_path() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", MAIN_CI)]);
    let project = server.create_project("acme/app", &repo).await;
    let id = project["id"].as_i64().unwrap();
    let pipeline = server.create_pipeline(id, "main").await;
    let anonymous = server
        .http
        .delete(server.api(&format!("projects/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let (status, body) = server
        .admin(Method::DELETE, "projects/acme%2Fapp", None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body, json!({"message": "202 Accepted"}));
    for path in [
        format!("projects/{id}"),
        format!("projects/{id}/pipelines/{}", pipeline["id"]),
    ] {
        let (status, body) = server.admin(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    let (status, _) = server
        .admin(Method::DELETE, &format!("projects/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let again = server.create_project("acme/app", &repo).await;
    assert_ne!(again["id"], id);
}

/// The git strategy and depth, separated caches and auto-cancel settings: what the next
/// job payloads and pipelines get, and the refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_cache_and_auto_cancel_settings_reach_jobs_and_pipelines() {
    let server = TestServer::start().await;
    let ci = "workflow:\n  auto_cancel:\n    on_new_commit: interruptible\nbuild:\n  script: [make]\n  interruptible: true\n  cache:\n    key: deps\n    paths: [vendor]\n";
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let project = server.create_project("app", &repo).await;
    let pid = project["id"].as_i64().unwrap();
    assert_eq!(project["build_git_strategy"], "fetch");
    assert_eq!(project["ci_default_git_depth"], Value::Null);
    assert_eq!(project["auto_cancel_pending_pipelines"], "enabled");
    assert_eq!(project["ci_separated_caches"], true);
    assert_eq!(project["ci_forward_deployment_enabled"], true);
    let (_, runner) = server.create_runner(json!({})).await;
    server.create_pipeline(pid, "main").await;
    let (id, token, payload) = server.take_job(&runner).await;
    assert_eq!(payload["allow_git_fetch"], true);
    assert_eq!(payload["git_info"]["depth"], 0);
    assert_eq!(
        payload["cache"][0]["key"], "deps-protected",
        "main is protected"
    );
    server.end_job(id, &token, "success").await;

    let (status, updated) = server
        .admin(
            Method::PUT,
            &format!("projects/{pid}"),
            Some(json!({
                "build_git_strategy": "clone",
                "ci_default_git_depth": 5,
                "ci_separated_caches": false,
                "auto_cancel_pending_pipelines": "disabled",
            })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["auto_cancel_pending_pipelines"], "disabled");
    let first = server.create_pipeline(pid, "main").await;
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(payload["allow_git_fetch"], false);
    assert_eq!(payload["git_info"]["depth"], 5);
    assert_eq!(var(&payload, "GIT_DEPTH"), Some("5"));
    assert_eq!(payload["cache"][0]["key"], "deps");
    // A new commit does not cancel the running pipeline now.
    std::fs::write(repo.path().join("README"), "more").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "more"]);
    server.create_pipeline(pid, "main").await;
    let (_, first) = server
        .admin(
            Method::GET,
            &format!("projects/{pid}/pipelines/{}", first["id"]),
            None,
        )
        .await;
    assert_eq!(first["status"], "running", "{first}");

    for (body, what) in [
        (json!({"build_git_strategy": "copy"}), "fetch or clone"),
        (json!({"ci_default_git_depth": 1001}), "between 0 and 1000"),
        (
            json!({"auto_cancel_pending_pipelines": "maybe"}),
            "enabled or disabled",
        ),
    ] {
        let (status, answer) = server
            .admin(Method::PUT, &format!("projects/{pid}"), Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert!(answer.to_string().contains(what), "{body}: {answer}");
    }
}

/// "Prevent outdated deployment jobs" (on by default): a deployment created before the
/// environment's last successful one, of another commit, fails instead of deploying;
/// with the setting off it deploys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outdated_deployment_jobs_fail_unless_the_project_allows_them() {
    let server = TestServer::start().await;
    let ci = "deploy:\n  script: [deploy]\n  when: manual\n  environment: production\n";
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    repo.git(&["tag", "v1"]);
    std::fs::write(repo.path().join("README"), "v2").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "v2"]);
    let pid = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let deploy_job = |pipeline: &Value| {
        let pipeline = pipeline["id"].as_i64().unwrap();
        let server = &server;
        async move {
            server.pipeline_jobs(pid, pipeline).await[0]["id"]
                .as_i64()
                .unwrap()
        }
    };
    let old_a = deploy_job(&server.create_pipeline(pid, "v1").await).await;
    let old_b = deploy_job(&server.create_pipeline(pid, "v1").await).await;
    let new = deploy_job(&server.create_pipeline(pid, "main").await).await;
    let play = |job: i64| {
        let server = &server;
        async move {
            let (status, body) = server
                .admin(
                    Method::POST,
                    &format!("projects/{pid}/jobs/{job}/play"),
                    None,
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    };
    play(new).await;
    let (id, token, _) = server.take_job(&runner).await;
    assert_eq!(id, new);
    server.end_job(id, &token, "success").await;

    play(old_a).await;
    let answer = server.request_job(&runner, None).await;
    assert_eq!(answer.status(), StatusCode::NO_CONTENT);
    let dropped = server.job(pid, old_a).await;
    assert_eq!(dropped["status"], "failed");
    assert_eq!(dropped["failure_reason"], "failed_outdated_deployment_job");

    let (status, _) = server
        .admin(
            Method::PUT,
            &format!("projects/{pid}"),
            Some(json!({"ci_forward_deployment_enabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    play(old_b).await;
    let (id, _, _) = server.take_job(&runner).await;
    assert_eq!(id, old_b, "a rollback, allowed now");
}
