//! Environments and deployments over HTTP, GitLab's API shapes: a review app deployed by
//! a pipeline and stopped by its `on_stop` job, the variables its jobs get, the
//! deployments API with its filters, environments made and changed through the API,
//! `auto_stop_in`, and the refusals (`400` naming the field, `403`, `404`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use std::time::{SystemTime, UNIX_EPOCH};

use http_support::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const REVIEW_APP: &str = r#"
stages: [deploy, cleanup]
deploy_review:
  stage: deploy
  script: [deploy]
  environment:
    name: review/$CI_COMMIT_REF_SLUG
    url: https://$CI_COMMIT_REF_SLUG.example.com
    on_stop: stop_review
    auto_stop_in: 1 week
stop_review:
  stage: cleanup
  script: [teardown]
  when: manual
  environment:
    name: review/$CI_COMMIT_REF_SLUG
    action: stop
production:
  stage: deploy
  script: [ship]
  allow_failure: true
  environment: production
unnamed:
  stage: deploy
  script: [never runs]
  allow_failure: true
  environment:
    name: $NOT_SET
"#;

fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// The project's environments by name.
async fn environments(server: &TestServer, project: i64) -> Vec<Value> {
    let (status, body) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/environments"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().cloned().unwrap()
}

async fn environment_named(server: &TestServer, project: i64, name: &str) -> Value {
    let list = environments(server, project).await;
    let found = list.iter().find(|e| e["name"] == name);
    let id = found.unwrap_or_else(|| panic!("no {name} in {list:?}"))["id"]
        .as_i64()
        .unwrap();
    let (status, body) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/environments/{id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Takes the next job, which must be `name`: `(id, token, payload)`.
async fn take(server: &TestServer, runner: &str, name: &str) -> (i64, String, Value) {
    let (id, token, payload) = server.take_job(runner).await;
    assert_eq!(payload["job_info"]["name"], name, "{payload}");
    (id, token, payload)
}

#[tokio::test]
async fn a_review_app_is_deployed_and_stopped_by_its_stop_job() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", REVIEW_APP)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let pipeline = server.create_pipeline(project, "main").await;
    let pipeline_id = pipeline["id"].as_i64().unwrap();

    // The environments exist as soon as the pipeline does; a name that expands to
    // nothing fails its job instead.
    let names: Vec<Value> = environments(&server, project)
        .await
        .iter()
        .map(|e| e["name"].clone())
        .collect();
    assert_eq!(names, [json!("production"), json!("review/main")]);
    let jobs = server.pipeline_jobs(project, pipeline_id).await;
    let unnamed = jobs.iter().find(|j| j["name"] == "unnamed").unwrap();
    assert_eq!(unnamed["status"], "failed");
    assert_eq!(unnamed["failure_reason"], "environment_creation_failure");
    let review = environment_named(&server, project, "review/main").await;
    assert_eq!(review["state"], "available");
    assert_eq!(review["tier"], "development", "guessed from the name");
    assert_eq!(review["slug"], "review-main-yi2y9f");
    assert_eq!(review["external_url"], Value::Null);
    assert!(review["auto_stop_at"].is_string(), "{review}");
    assert_eq!(review.get("last_deployment"), None);

    // The deploying jobs get the environment's id, slug, tier and URL.
    let (first, first_token, payload) = server.take_job(&runner).await;
    let (second, second_token, other) = server.take_job(&runner).await;
    let (deploy, prod) = if payload["job_info"]["name"] == "deploy_review" {
        ((first, first_token, payload), (second, second_token, other))
    } else {
        ((second, second_token, other), (first, first_token, payload))
    };
    let review_id = review["id"].as_i64().unwrap();
    assert_eq!(
        job_variable_value(&deploy.2, "CI_ENVIRONMENT_ID"),
        Some(review_id.to_string().as_str())
    );
    for (key, value) in [
        ("CI_ENVIRONMENT_NAME", "review/main"),
        ("CI_ENVIRONMENT_SLUG", "review-main-yi2y9f"),
        ("CI_ENVIRONMENT_TIER", "development"),
        ("CI_ENVIRONMENT_ACTION", "start"),
        ("CI_ENVIRONMENT_URL", "https://main.example.com"),
    ] {
        assert_eq!(job_variable_value(&deploy.2, key), Some(value), "{key}");
    }
    assert_eq!(
        job_variable_value(&prod.2, "CI_ENVIRONMENT_TIER"),
        Some("production")
    );
    assert_eq!(job_variable_value(&prod.2, "CI_ENVIRONMENT_URL"), None);

    // Deployments follow their jobs.
    let (status, deployments) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/deployments"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{deployments}");
    let statuses: Vec<(Value, Value)> = deployments
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["iid"].clone(), d["status"].clone()))
        .collect();
    assert_eq!(
        statuses,
        [(json!(1), json!("running")), (json!(2), json!("running"))]
    );
    server.end_job(deploy.0, &deploy.1, "success").await;
    server.end_job(prod.0, &prod.1, "failed").await;

    let review = environment_named(&server, project, "review/main").await;
    assert_eq!(review["external_url"], "https://main.example.com");
    let last = &review["last_deployment"];
    assert_eq!(last["status"], "success");
    assert_eq!(last["ref"], "main");
    assert_eq!(last["deployable"]["name"], "deploy_review");
    assert_eq!(last["environment"]["name"], "review/main");
    let production = environment_named(&server, project, "production").await;
    assert_eq!(production.get("last_deployment"), None, "it failed");

    let query = |q: &str| format!("projects/{project}/deployments?{q}");
    let (_, successful) = server
        .admin(Method::GET, &query("status=success"), None)
        .await;
    assert_eq!(successful.as_array().unwrap().len(), 1);
    assert_eq!(successful[0]["environment"]["name"], "review/main");
    let (_, of_production) = server
        .admin(
            Method::GET,
            &query("environment=production&order_by=iid&sort=desc"),
            None,
        )
        .await;
    assert_eq!(of_production[0]["status"], "failed");
    let (_, later) = server
        .admin(
            Method::GET,
            &query("updated_after=2999-01-01T00:00:00Z"),
            None,
        )
        .await;
    assert_eq!(later, json!([]));
    let id = successful[0]["id"].as_i64().unwrap();
    let (status, one) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/deployments/{id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["deployable"]["id"], deploy.0);

    // Stopping plays the stop job (a manual job of the deployment's pipeline); the
    // environment is stopped when it succeeds.
    let stop_url = format!("projects/{project}/environments/{review_id}/stop");
    let (status, stopping) = server.admin(Method::POST, &stop_url, None).await;
    assert_eq!(status, StatusCode::OK, "{stopping}");
    assert_eq!(stopping["state"], "stopping");
    let (stop_id, stop_token, stop_payload) = take(&server, &runner, "stop_review").await;
    assert_eq!(
        job_variable_value(&stop_payload, "CI_ENVIRONMENT_ACTION"),
        Some("stop")
    );
    assert_eq!(
        job_variable_value(&stop_payload, "CI_ENVIRONMENT_URL"),
        Some("https://main.example.com"),
        "a job without a URL gets its environment's"
    );
    server.end_job(stop_id, &stop_token, "success").await;
    let review = environment_named(&server, project, "review/main").await;
    assert_eq!(review["state"], "stopped");
    assert_eq!(review["auto_stop_at"], Value::Null);
    let again = server
        .http
        .post(server.api(&stop_url))
        .header("PRIVATE-TOKEN", &server.admin)
        .send()
        .await
        .unwrap();
    let (status, body) = expect_client_error(again, "stop a stopped environment").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Only a stopped environment can be deleted; one without a stop job stops at once.
    let production_id = production["id"].as_i64().unwrap();
    let env_url = format!("projects/{project}/environments/{production_id}");
    let (status, body) = server.admin(Method::DELETE, &env_url, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, stopped) = server
        .admin(Method::POST, &format!("{env_url}/stop"), None)
        .await;
    assert_eq!(
        (status, &stopped["state"]),
        (StatusCode::OK, &json!("stopped"))
    );
    let (status, _) = server.admin(Method::DELETE, &env_url, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server.admin(Method::GET, &env_url, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, of_production) = server
        .admin(Method::GET, &query("environment=production"), None)
        .await;
    assert_eq!(of_production, json!([]), "its deployments went with it");
}

#[tokio::test]
async fn environments_are_made_and_changed_through_the_api() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "job:\n  script: [true]\n")]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let base = format!("projects/{project}/environments");
    let (status, created) = server
        .admin(
            Method::POST,
            &base,
            Some(json!({"name": "staging", "external_url": "https://staging.example.com"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["tier"], "staging");
    assert_eq!(created["slug"], "staging");
    assert_eq!(created["state"], "available");
    // A form, as `curl --form` sends it.
    let form = server
        .http
        .post(server.api(&base))
        .header("PRIVATE-TOKEN", &server.admin)
        .form(&[("name", "Stage Domain"), ("tier", "other")])
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), StatusCode::CREATED);
    let domain: Value = form.json().await.unwrap();
    assert_eq!(domain["slug"], "stage-domain-ip33nk");

    for (body, what) in [
        (json!({"name": "staging"}), "has already been taken"),
        (json!({"name": "/staging"}), "cannot start or end with '/'"),
        (json!({}), "name is missing"),
        (json!({"name": "qa", "tier": "moon"}), "not a tier"),
        (
            json!({"name": "qa", "external_url": "javascript:alert(1)"}),
            "http(s)",
        ),
    ] {
        let response = server
            .http
            .post(server.api(&base))
            .header("PRIVATE-TOKEN", &server.admin)
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, answer) = expect_client_error(response, what).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert!(answer.to_string().contains(what), "{body}: {answer}");
    }

    let id = created["id"].as_i64().unwrap();
    let (status, changed) = server
        .admin(
            Method::PUT,
            &format!("{base}/{id}"),
            Some(json!({"tier": "production", "external_url": ""})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["tier"], "production");
    assert_eq!(changed["external_url"], Value::Null);
    let (status, body) = server
        .admin(
            Method::PUT,
            &format!("{base}/{id}"),
            Some(json!({"name": "other"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let (_, found) = server
        .admin(Method::GET, &format!("{base}?search=STAG"), None)
        .await;
    assert_eq!(found.as_array().unwrap().len(), 2, "{found}");
    let (_, found) = server
        .admin(
            Method::GET,
            &format!("{base}?name=staging&states=available"),
            None,
        )
        .await;
    assert_eq!(found.as_array().unwrap().len(), 1, "{found}");
    for (path, status) in [
        (format!("{base}?states=gone"), StatusCode::BAD_REQUEST),
        (format!("{base}?name=a&search=b"), StatusCode::BAD_REQUEST),
        (format!("{base}/999"), StatusCode::NOT_FOUND),
        (
            format!("projects/{project}/deployments?status=done"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("projects/{project}/deployments?order_by=name"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("projects/{project}/deployments?updated_after=yesterday"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("projects/{project}/deployments/999"),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let (got, body) = server.admin(Method::GET, &path, None).await;
        assert_eq!(got, status, "{path}: {body}");
    }
    let anonymous = server.http.get(server.api(&base)).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn environments_stop_when_their_auto_stop_in_has_passed() {
    let server = TestServer::start().await;
    let ci = r#"
deploy:
  script: [deploy]
  environment:
    name: review/$CI_COMMIT_REF_NAME
    on_stop: teardown
    auto_stop_in: 1 hour
teardown:
  script: [teardown]
  when: manual
  environment:
    name: review/$CI_COMMIT_REF_NAME
    action: stop
preview:
  script: [preview]
  environment:
    name: preview
    auto_stop_in: 2 hours
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    server.create_pipeline(project, "main").await;
    for _ in 0..2 {
        let (id, token, _) = server.take_job(&runner).await;
        server.end_job(id, &token, "success").await;
    }
    let in_90_minutes = now_ms() + 90 * 60 * 1000;
    let stopped = server
        .coordinator
        .stop_due_environments(in_90_minutes)
        .await
        .unwrap();
    assert_eq!(stopped, 1);
    let review = environment_named(&server, project, "review/main").await;
    assert_eq!(review["state"], "stopping");
    let preview = environment_named(&server, project, "preview").await;
    assert_eq!(preview["state"], "available");
    let (id, token, _) = take(&server, &runner, "teardown").await;
    server.end_job(id, &token, "success").await;
    let review = environment_named(&server, project, "review/main").await;
    assert_eq!(review["state"], "stopped");

    // Without a stop job the environment stops at once.
    let stopped = server
        .coordinator
        .stop_due_environments(in_90_minutes + 60 * 60 * 1000)
        .await
        .unwrap();
    assert_eq!(stopped, 1);
    let preview = environment_named(&server, project, "preview").await;
    assert_eq!(preview["state"], "stopped");
    assert_eq!(
        server
            .coordinator
            .stop_due_environments(in_90_minutes * 2)
            .await
            .unwrap(),
        0
    );
}

/// A job whose environment cannot be created fails at once, and so does its retry
/// when a runner asks for work: no runner ever gets it.
#[tokio::test]
async fn a_job_whose_environment_cannot_be_created_never_runs() {
    let server = TestServer::start().await;
    let ci = "unnamed:\n  script: [deploy]\n  environment:\n    name: review/$NOT_SET\n";
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let pipeline = server.create_pipeline(project, "main").await;
    assert_eq!(pipeline["status"], "failed", "{pipeline}");
    let jobs = server
        .pipeline_jobs(project, pipeline["id"].as_i64().unwrap())
        .await;
    assert_eq!(jobs[0]["failure_reason"], "environment_creation_failure");
    assert_eq!(environments(&server, project).await, Vec::<Value>::new());
    let id = jobs[0]["id"].as_i64().unwrap();
    // Its log says why.
    let log = server.job_log(project, id).await;
    assert_eq!(
        log,
        "ERROR: the job could not start: the environment name `review/` can contain only \
         letters, digits, '-', '_', '/', '$', '{', '}', '.', and spaces, but it cannot start \
         or end with '/'\n"
    );
    let (status, retried) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/jobs/{id}/retry"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{retried}");
    assert_eq!(retried["status"], "pending");
    let answer = server.request_job(&runner, None).await;
    assert_eq!(answer.status(), StatusCode::NO_CONTENT);
    let again = server.job(project, retried["id"].as_i64().unwrap()).await;
    assert_eq!(again["status"], "failed");
    assert_eq!(again["failure_reason"], "environment_creation_failure");
}

/// Deployments made outside pipelines (a deploy tool reporting to Gantry): the
/// environment is created by name, the status moves by GitLab's rules, and a job's
/// deployment cannot be moved through the API.
#[tokio::test]
async fn deployments_made_outside_pipelines_are_recorded_and_moved() {
    let server = TestServer::start().await;
    let ci = "deploy:\n  script: [deploy]\n  environment: staging\n";
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let base = format!("projects/{project}/deployments");
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let (status, created) = server
        .admin(
            Method::POST,
            &base,
            Some(json!({"environment": "production", "sha": sha, "ref": "main", "tag": false, "status": "running"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["iid"], 1);
    assert_eq!(created["status"], "running");
    assert_eq!(created["deployable"], Value::Null);
    assert_eq!(created["environment"]["name"], "production");
    let production = environment_named(&server, project, "production").await;
    assert_eq!(production["tier"], "production");
    assert_eq!(production.get("last_deployment"), None);

    let id = created["id"].as_i64().unwrap();
    let (status, done) = server
        .admin(
            Method::PUT,
            &format!("{base}/{id}"),
            Some(json!({"status": "success"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["status"], "success");
    assert!(done["finished_at"].is_string(), "{done}");
    let production = environment_named(&server, project, "production").await;
    assert_eq!(production["last_deployment"]["id"], id);
    // `running` follows `created` only.
    let (status, body) = server
        .admin(
            Method::PUT,
            &format!("{base}/{id}"),
            Some(json!({"status": "running"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // A job's deployment is its job's.
    server.create_pipeline(project, "main").await;
    let (_, jobs) = server
        .admin(Method::GET, &format!("{base}?environment=staging"), None)
        .await;
    let job_deployment = jobs[0]["id"].as_i64().unwrap();
    assert_eq!(jobs[0]["iid"], 2);
    let (status, body) = server
        .admin(
            Method::PUT,
            &format!("{base}/{job_deployment}"),
            Some(json!({"status": "success"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("can not be updated"), "{body}");

    for (body, what) in [
        (
            json!({"sha": sha, "ref": "main", "tag": false, "status": "success"}),
            "environment is missing",
        ),
        (
            json!({"environment": "qa", "sha": "xyz", "ref": "main", "tag": false, "status": "success"}),
            "not a commit SHA",
        ),
        (
            json!({"environment": "qa", "sha": sha, "ref": "main", "status": "success"}),
            "tag is missing",
        ),
        (
            json!({"environment": "qa", "sha": sha, "ref": "main", "tag": false, "status": "created"}),
            "not a status",
        ),
        (
            json!({"environment": "qa/", "sha": sha, "ref": "main", "tag": false, "status": "success"}),
            "cannot start or end",
        ),
    ] {
        let (status, answer) = server.admin(Method::POST, &base, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert!(answer.to_string().contains(what), "{body}: {answer}");
    }
    let (status, _) = server
        .admin(
            Method::PUT,
            &format!("{base}/999"),
            Some(json!({"status": "success"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// `POST …/environments/stop_stale`: `before` must lie between ten years and a week ago;
/// environments used since stay available.
#[tokio::test]
async fn stale_environments_are_stopped_on_request() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "job:\n  script: [true]\n")]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (status, _) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/environments"),
            Some(json!({"name": "review/fresh"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let url = format!("projects/{project}/environments/stop_stale");
    let (status, body) = server
        .admin(
            Method::POST,
            &url,
            Some(json!({"before": "2026-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["message"],
        "Successfully requested stop for all stale environments"
    );
    let fresh = environment_named(&server, project, "review/fresh").await;
    assert_eq!(fresh["state"], "available");
    // As a query parameter, as some clients send it.
    let (status, body) = server
        .admin(Method::POST, &format!("{url}?before=2025-06-01"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let yesterday = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24);
    for body in [
        json!({}),
        json!({"before": "last year"}),
        json!({"before": yesterday.to_string()}),
        json!({"before": "1990-01-01T00:00:00Z"}),
    ] {
        let (status, answer) = server.admin(Method::POST, &url, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
    }
}

/// `GET /job`: a script asks about its own job with `$CI_JOB_TOKEN`; the token works
/// while the job runs only.
#[tokio::test]
async fn a_running_job_reads_itself_with_its_token() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    server.create_pipeline(project, "main").await;
    let (id, token, _) = server.take_job(&runner).await;
    let ask = |header: Option<&str>, query: &str| {
        let mut request = server.http.get(format!("{}{query}", server.api("job")));
        if let Some(t) = header {
            request = request.header("JOB-TOKEN", t);
        }
        request.send()
    };
    let mine = ask(Some(&token), "").await.unwrap();
    assert_eq!(mine.status(), StatusCode::OK);
    let mine: Value = mine.json().await.unwrap();
    assert_eq!(
        (mine["id"].as_i64(), &mine["name"]),
        (Some(id), &json!("build"))
    );
    let by_param = ask(None, &format!("?job_token={token}")).await.unwrap();
    assert_eq!(by_param.status(), StatusCode::OK);
    assert_eq!(
        ask(None, "").await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        ask(Some("glcbt-nonsense"), "").await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    server.end_job(id, &token, "success").await;
    assert_eq!(
        ask(Some(&token), "").await.unwrap().status(),
        StatusCode::UNAUTHORIZED,
        "the token died with the job"
    );
}

/// `GET …/pipelines/latest`: the newest pipeline of a ref, the default branch's without one.
#[tokio::test]
async fn the_latest_pipeline_of_a_ref() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    repo.git(&["branch", "topic"]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let url = format!("projects/{project}/pipelines/latest");
    let (status, _) = server.admin(Method::GET, &url, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    server.create_pipeline(project, "main").await;
    let second = server.create_pipeline(project, "main").await;
    let topic = server.create_pipeline(project, "topic").await;
    let (status, latest) = server.admin(Method::GET, &url, None).await;
    assert_eq!(status, StatusCode::OK, "{latest}");
    assert_eq!(latest["id"], second["id"]);
    let (_, latest) = server
        .admin(Method::GET, &format!("{url}?ref=topic"), None)
        .await;
    assert_eq!(latest["id"], topic["id"]);
    let (status, _) = server
        .admin(Method::GET, &format!("{url}?ref=nothing"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
