//! `PUT /api/v4/runners/:id`: a runner's settings change (tags, `run_untagged`,
//! `access_level`, `maximum_timeout`, description), and it is paused and resumed, with
//! the effect on which jobs its next requests get. Parameters come as JSON, a URL-encoded
//! form or a multipart form (`curl --form`, as GitLab's documentation shows), typed as
//! Grape reads them; `POST /user/runners` takes `paused` too.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const CI: &str = "build:\n  tags: [gpu]\n  script: [make]\n";

/// `PUT runners/:id` with a multipart form of `fields`.
async fn put_form(server: &TestServer, id: i64, fields: &[(&str, &str)]) -> (StatusCode, Value) {
    let mut form = reqwest::multipart::Form::new();
    for (name, value) in fields {
        form = form.text(name.to_string(), value.to_string());
    }
    let response = server
        .http
        .put(server.api(&format!("runners/{id}")))
        .header("PRIVATE-TOKEN", &server.admin)
        .multipart(form)
        .send()
        .await
        .unwrap();
    (
        response.status(),
        response.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_runner_gets_no_jobs_until_resumed_and_new_tags_pick_new_jobs() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    // Created paused, as a URL-encoded form with Grape's words for its booleans.
    let response = server
        .http
        .post(server.api("user/runners"))
        .header("PRIVATE-TOKEN", &server.admin)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("runner_type=instance_type&paused=yes&run_untagged=0&tag_list=docker,linux")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let created: Value = response.json().await.unwrap();
    let (id, token) = (
        created["id"].as_i64().unwrap(),
        created["token"].as_str().unwrap().to_owned(),
    );
    let (_, shown) = server
        .admin(Method::GET, &format!("runners/{id}"), None)
        .await;
    assert_eq!(
        (&shown["paused"], &shown["active"], &shown["run_untagged"]),
        (&json!(true), &json!(false), &json!(false)),
        "{shown}"
    );
    assert_eq!(shown["tag_list"], json!(["docker", "linux"]));

    server.create_pipeline(project, "main").await;
    // Paused: no job. Resumed, but without the job's tag: still none.
    let no_job = async || {
        let status = server.request_job(&token, None).await.status();
        status == StatusCode::NO_CONTENT
    };
    assert!(no_job().await, "paused");
    // A runner asking again is not read again; a change made here is seen at once.
    let reads = server.coordinator.runner_reads();
    assert!(no_job().await, "still paused");
    assert_eq!(server.coordinator.runner_reads(), reads, "asked again");
    let (status, resumed) = put_form(&server, id, &[("paused", "false")]).await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(
        (&resumed["paused"], &resumed["active"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(resumed["tag_list"], shown["tag_list"], "the rest stays");
    assert!(no_job().await, "not tagged gpu");
    assert_eq!(
        server.coordinator.runner_reads(),
        reads + 1,
        "read again after the change"
    );

    // The job's tag: the next request gets it.
    let (status, tagged) = put_form(
        &server,
        id,
        &[("tag_list", "gpu, linux"), ("description", "the gpu box")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{tagged}");
    assert_eq!(tagged["tag_list"], json!(["gpu", "linux"]));
    assert_eq!(tagged["description"], "the gpu box");
    let (job, job_token, _) = server.take_job(&token).await;
    server.end_job(job, &job_token, "success").await;

    // GitLab's deprecated `active`, as JSON; and the integer as a JSON string.
    let (status, paused) = server
        .admin(
            Method::PUT,
            &format!("runners/{id}"),
            Some(json!({ "active": false, "maximum_timeout": "3600" })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(
        (&paused["paused"], &paused["maximum_timeout"]),
        (&json!(true), &json!(3600))
    );
    repo.git(&["branch", "feature"]);
    server.create_pipeline(project, "feature").await;
    assert!(no_job().await, "paused again");
    let (status, _) = server
        .admin(
            Method::PUT,
            &format!("runners/{id}"),
            Some(json!({ "paused": false, "access_level": "ref_protected" })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // `feature` is not protected: a ref_protected runner does not take its job; it takes
    // the job of `main`, the default branch, protected as on GitLab.
    assert!(no_job().await, "feature is not protected");
    server.create_pipeline(project, "main").await;
    let (job, _, _) = server.take_job(&token).await;
    let (_, shown) = server
        .admin(Method::GET, &format!("projects/{project}/jobs/{job}"), None)
        .await;
    assert_eq!(shown["ref"], "main", "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_runner_settings_change_nothing() {
    let server = TestServer::start().await;
    let (id, _) = server
        .create_runner(json!({ "tag_list": ["docker"], "run_untagged": false }))
        .await;
    let (_, before) = server
        .admin(Method::GET, &format!("runners/{id}"), None)
        .await;
    let path = format!("runners/{id}");
    let cases: [(Value, StatusCode, &str); 6] = [
        (
            json!({ "tag_list": "", "description": "renamed" }),
            StatusCode::BAD_REQUEST,
            "tags_list can not be empty when runner is not allowed to pick untagged jobs",
        ),
        (
            json!({}),
            StatusCode::BAD_REQUEST,
            "at least one parameter must be provided",
        ),
        (
            json!({ "paused": true, "active": true }),
            StatusCode::BAD_REQUEST,
            "active, paused are mutually exclusive",
        ),
        (
            json!({ "maximum_timeout": 300 }),
            StatusCode::BAD_REQUEST,
            "maximum_timeout must be at least 600 seconds, not 300",
        ),
        (
            json!({ "paused": "perhaps" }),
            StatusCode::BAD_REQUEST,
            "expected a boolean",
        ),
        (
            json!({ "access_level": "everything" }),
            StatusCode::BAD_REQUEST,
            "access_level",
        ),
    ];
    for (body, code, says) in cases {
        let response = server
            .http
            .put(server.api(&path))
            .header("PRIVATE-TOKEN", &server.admin)
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, error) = expect_client_error(response, &body.to_string()).await;
        assert_eq!(status, code, "{body}: {error}");
        assert!(error.to_string().contains(says), "{body}: {error}");
    }
    let (_, after) = server.admin(Method::GET, &path, None).await;
    assert_eq!(after, before);

    let (status, _) = server
        .admin(Method::PUT, "runners/9999", Some(json!({ "paused": true })))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let response = server
        .http
        .put(server.api(&path))
        .json(&json!({ "paused": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

/// `GET /runners/all` filtered by `type`, `paused`, `tag_list` and `status` and paged;
/// `GET /runners/:id/jobs` lists what a runner took, newest first, by `status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_are_listed_by_type_state_and_tags_with_the_jobs_they_took() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "a:\n  script: [a]\nb:\n  script: [b]\n")]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (docker, token) = server.create_runner(json!({"tag_list": ["docker"]})).await;
    let (paused, _) = server
        .create_runner(json!({"tag_list": ["docker", "linux"], "paused": true}))
        .await;
    let (own, _) = server
        .create_runner(json!({"runner_type": "project_type", "project_id": project}))
        .await;
    let ids = |runners: &Value| -> Vec<i64> {
        runners
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect()
    };
    let list = async |query: &str| {
        let (status, body) = server
            .admin(Method::GET, &format!("runners/all{query}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{query}: {body}");
        body
    };
    let all = list("").await;
    assert_eq!(ids(&all), [docker, paused, own]);
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "never_contacted" && r["online"] == false),
        "{all}"
    );
    assert_eq!(ids(&list("?type=project_type").await), [own]);
    assert_eq!(ids(&list("?paused=true").await), [paused]);
    assert_eq!(ids(&list("?status=paused").await), [paused]);
    assert_eq!(ids(&list("?tag_list=linux,docker").await), [paused]);
    assert_eq!(ids(&list("?per_page=1&page=2").await), [paused]);
    for bad in ["?type=group", "?status=busy", "?paused=perhaps"] {
        let (status, body) = server
            .admin(Method::GET, &format!("runners/all{bad}"), None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }

    // The docker runner asks for jobs: online; it finishes one and still runs the other.
    server.create_pipeline(project, "main").await;
    let (first, first_token, _) = server.take_job(&token).await;
    server.end_job(first, &first_token, "success").await;
    let (second, _, _) = server.take_job(&token).await;
    assert_eq!(ids(&list("?status=online").await), [docker]);
    let jobs = async |query: &str| {
        server
            .admin(Method::GET, &format!("runners/{docker}/jobs{query}"), None)
            .await
    };
    let (status, taken) = jobs("").await;
    assert_eq!(status, StatusCode::OK, "{taken}");
    assert_eq!(ids(&taken), [second, first], "newest first");
    assert_eq!(taken[0]["pipeline"]["project_id"], project, "{taken}");
    assert_eq!(ids(&jobs("?status=running").await.1), [second]);
    assert_eq!(ids(&jobs("?status=success").await.1), [first]);
    // Any of GitLab's job statuses filters (`Ci::Build::AVAILABLE_STATUSES`); the order
    // is by id, descending unless `order_by=id&sort=asc` (`sort` alone orders nothing).
    assert_eq!(jobs("?status=pending").await, (StatusCode::OK, json!([])));
    assert_eq!(ids(&jobs("?order_by=id&sort=asc").await.1), [first, second]);
    assert_eq!(
        ids(&jobs("?order_by=id&sort=desc").await.1),
        [second, first]
    );
    assert_eq!(ids(&jobs("?sort=asc").await.1), [second, first]);
    for (bad, name) in [
        ("?status=busy", "status"),
        ("?order_by=created_at", "order_by"),
        ("?order_by=id&sort=up", "sort"),
    ] {
        let (status, body) = jobs(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        let message = format!("{name} does not have a valid value");
        assert_eq!(body["error"], message.as_str(), "{bad}");
    }
    let (status, none) = server
        .admin(Method::GET, &format!("runners/{own}/jobs"), None)
        .await;
    assert_eq!((status, none), (StatusCode::OK, json!([])));
    let (status, _) = server.admin(Method::GET, "runners/9999/jobs", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Each process of a runner (its `system_id`) is a runner manager, as on GitLab: made
/// by a verify or a job request, listed by `GET /runners/:id/managers`, shown as the
/// `runner_manager` of the jobs it took (`active` while one runs), deleted by
/// `DELETE /runners/managers`. The job's JSON also carries GitLab's `project` and shows
/// `failure_reason` only for a failed job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_managers_are_the_runner_processes_that_took_jobs() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "a:\n  script: [a]\n")]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (runner, token) = server.create_runner(json!({})).await;
    let verified = server
        .http
        .post(server.api("runners/verify"))
        .json(
            &json!({"token": token, "system_id": "r_verifiedonly", "info": {"version": "18.5.0"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(verified.status(), StatusCode::OK);
    server.create_pipeline(project, "main").await;
    let asked = server
        .http
        .post(server.api("jobs/request"))
        .json(&json!({
            "token": token,
            "system_id": "s_0123456789ab",
            "info": {"version": "18.6.1", "revision": "abcd1234", "platform": "linux", "architecture": "amd64"}
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), StatusCode::CREATED);
    let payload: Value = asked.json().await.unwrap();
    let (job, job_token) = (
        payload["id"].as_i64().unwrap(),
        payload["token"].as_str().unwrap().to_owned(),
    );

    let (status, managers) = server
        .admin(Method::GET, &format!("runners/{runner}/managers"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{managers}");
    let managers = managers.as_array().unwrap().clone();
    assert_eq!(managers.len(), 2, "{managers:?}");
    assert_eq!(managers[0]["system_id"], "r_verifiedonly");
    assert_eq!(managers[0]["version"], "18.5.0");
    assert_eq!(managers[0]["job_execution_status"], "idle");
    let taker = &managers[1];
    assert_eq!(taker["system_id"], "s_0123456789ab");
    assert_eq!(
        (
            &taker["version"],
            &taker["revision"],
            &taker["platform"],
            &taker["architecture"]
        ),
        (
            &json!("18.6.1"),
            &json!("abcd1234"),
            &json!("linux"),
            &json!("amd64")
        )
    );
    assert_eq!(taker["ip_address"], "127.0.0.1");
    assert_eq!(taker["status"], "online");
    assert_eq!(taker["job_execution_status"], "active");
    assert!(taker["contacted_at"].as_str().unwrap().ends_with('Z'));

    let running = server.job(project, job).await;
    assert_eq!(running["runner_manager"], *taker, "{running}");
    assert_eq!(running["runner"]["id"], runner);
    assert_eq!(running["runner"]["name"], Value::Null);
    assert_eq!(
        running["project"],
        json!({"ci_job_token_scope_enabled": false})
    );
    assert!(running.get("failure_reason").is_none(), "{running}");
    server.end_job(job, &job_token, "failed").await;
    let failed = server.job(project, job).await;
    assert_eq!(failed["failure_reason"], "script_failure");
    assert_eq!(failed["runner_manager"]["job_execution_status"], "idle");
    let listed = server
        .pipeline_jobs(project, failed["pipeline"]["id"].as_i64().unwrap())
        .await;
    assert_eq!(listed[0]["runner_manager"]["id"], taker["id"]);

    // `gitlab-runner unregister` of a `glrt-` runner deletes its own manager only.
    let unregister = async |system_id: &str| {
        server
            .http
            .delete(server.api("runners/managers"))
            .json(&json!({"token": token, "system_id": system_id}))
            .send()
            .await
            .unwrap()
    };
    assert_eq!(
        unregister("s_0123456789ab").await.status(),
        StatusCode::NO_CONTENT
    );
    let (status, body) = expect_client_error(unregister("s_0123456789ab").await, "again").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["message"], "404 Runner manager not found Not Found");
    let after = server.job(project, job).await;
    assert_eq!(after["runner_manager"], Value::Null);
    assert_eq!(after["runner"]["id"], runner);
    let (_, managers) = server
        .admin(Method::GET, &format!("runners/{runner}/managers"), None)
        .await;
    assert_eq!(managers.as_array().unwrap().len(), 1, "{managers}");
    let (status, _) = server
        .admin(Method::GET, "runners/9999/managers", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// `GET /runners/:id` is GitLab's `RunnerDetails`: a registration-token runner keeps
/// the `info.name` it registered with (one made through the API has none), the version,
/// revision, platform and architecture are those its process last in contact sent, and
/// the maintenance note is kept from creation, registration or `PUT`.
#[tokio::test]
async fn a_runners_details_show_its_name_note_and_latest_process() {
    let server = TestServer::start().await;
    let registration = server.registration.clone();
    let registered = server
        .http
        .post(server.api("runners"))
        .json(
            &json!({"token": registration, "description": "old", "maintenance_note": "rack 4",
                      "info": {"name": "gitlab-runner"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), StatusCode::CREATED);
    let registered: Value = registered.json().await.unwrap();
    let id = registered["id"].as_i64().unwrap();
    let (_, shown) = server
        .admin(Method::GET, &format!("runners/{id}"), None)
        .await;
    assert_eq!(shown["name"], "gitlab-runner", "{shown}");
    assert_eq!(shown["maintenance_note"], "rack 4");
    assert_eq!(
        (&shown["version"], &shown["ip_address"]),
        (&Value::Null, &Value::Null),
        "no process yet"
    );
    // Two processes ask for jobs; the details show the one last in contact.
    let token = registered["token"].as_str().unwrap();
    for (system_id, version) in [("s_aaaaaaaaaaaa", "18.5.0"), ("s_bbbbbbbbbbbb", "18.6.1")] {
        let asked = server
            .http
            .post(server.api("jobs/request"))
            .json(&json!({"token": token, "system_id": system_id,
                          "info": {"version": version, "platform": "linux", "architecture": "arm64"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(asked.status(), StatusCode::NO_CONTENT);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let (_, shown) = server
        .admin(Method::GET, &format!("runners/{id}"), None)
        .await;
    assert_eq!(
        (
            &shown["version"],
            &shown["platform"],
            &shown["architecture"],
            &shown["revision"]
        ),
        (
            &json!("18.6.1"),
            &json!("linux"),
            &json!("arm64"),
            &Value::Null
        ),
        "{shown}"
    );
    let (status, changed) = server
        .admin(
            Method::PUT,
            &format!("runners/{id}"),
            Some(json!({"maintainer_note": "rack 5"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["maintenance_note"], "rack 5");
    assert_eq!(changed["version"], "18.6.1", "PUT answers the details too");

    let (made, _) = server
        .create_runner(json!({"maintenance_note": "made here"}))
        .await;
    let (_, shown) = server
        .admin(Method::GET, &format!("runners/{made}"), None)
        .await;
    assert_eq!(shown["name"], Value::Null, "{shown}");
    assert_eq!(shown["maintenance_note"], "made here");
}

/// A group runner (`runner_type: group_type`, `group_id` the group's path) takes the jobs
/// of the group's projects and its subgroups', not others'; a numeric `group_id` is `400`
/// (Gantry's groups have no ids).
#[tokio::test]
async fn a_group_runner_runs_the_jobs_of_its_groups_projects() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    let mut projects = Vec::new();
    for name in ["acme/app", "acme/platform/svc", "acmecorp/app", "other/app"] {
        let id = server.create_project(name, &repo).await["id"]
            .as_i64()
            .unwrap();
        server.create_pipeline(id, "main").await;
        projects.push((name, id));
    }
    let (status, created) = server
        .admin(
            Method::POST,
            "user/runners",
            Some(json!({"runner_type": "group_type", "group_id": "acme", "description": "acme's"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let token = created["token"].as_str().unwrap().to_owned();
    let (_, shown) = server
        .admin(Method::GET, &format!("runners/{}", created["id"]), None)
        .await;
    assert_eq!(shown["runner_type"], "group_type");
    assert_eq!(shown["is_shared"], false);
    assert_eq!(
        shown["groups"],
        json!([{"name": "acme", "full_path": "acme"}])
    );
    let mut taken = Vec::new();
    for _ in 0..2 {
        let (_, _, payload) = server.take_job(&token).await;
        taken.push(
            payload["job_info"]["project_name"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    taken.sort();
    assert_eq!(taken, ["app", "svc"]);
    let none = server.request_job(&token, None).await;
    assert_eq!(
        none.status(),
        StatusCode::NO_CONTENT,
        "acmecorp and other are not acme"
    );
    let (_, listed) = server
        .admin(Method::GET, "runners/all?type=group_type", None)
        .await;
    assert_eq!(listed.as_array().unwrap().len(), 1);

    for body in [
        json!({"runner_type": "group_type", "group_id": 12}),
        json!({"runner_type": "group_type"}),
        json!({"runner_type": "group_type", "group_id": "acme//x"}),
    ] {
        let (status, answer) = server
            .admin(Method::POST, "user/runners", Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
    }
}

/// The job API's `pending_reason` (Gantry's key, `null` unless the job waits): from the
/// same matching rules as the queue, over the runners there are, the condition that
/// stops the runners closest to taking the job — in GitLab's words where GitLab has
/// some — and, once runners may take it, whether they are paused, offline or busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_api_says_why_a_pending_job_waits() {
    const TAGGED: &str = "stages: [build, test]
compile:
  stage: build
  tags: [docker, linux]
  script: [make]
lint:
  stage: build
  script: [make lint]
unit:
  stage: test
  script: [make test]
";
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", TAGGED)]);
    // Not the default branch: its jobs are not protected.
    repo.git(&["branch", "feature"]);
    let project = server.create_project("acme/app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let other = server.create_project("acme/other", &repo).await["id"]
        .as_i64()
        .unwrap();
    let pipeline = server.create_pipeline(project, "feature").await["id"]
        .as_i64()
        .unwrap();
    let reasons = || async {
        let jobs = server.pipeline_jobs(project, pipeline).await;
        let of = |name: &str| {
            jobs.iter()
                .find(|j| j["name"] == name)
                .map(|j| j["pending_reason"].clone())
                .unwrap()
        };
        (of("compile"), of("lint"), of("unit"))
    };
    let code = |why: &Value| why["code"].as_str().unwrap_or("null").to_owned();

    let (compile, lint, unit) = reasons().await;
    assert_eq!(
        compile,
        json!({"code": "no_runner", "message": "This job is stuck because the project doesn't have any runners online assigned to it."})
    );
    assert_eq!(code(&lint), "no_runner");
    assert_eq!(unit, Value::Null, "a created job does not wait");

    server
        .create_runner(json!({"tag_list": ["docker"], "run_untagged": false}))
        .await;
    let (compile, lint, _) = reasons().await;
    assert_eq!(
        compile,
        json!({
            "code": "no_runner_matches_tags",
            "message": "This job is stuck because you don't have any active runners online or available with any of these tags assigned to them: docker linux"
        })
    );
    assert_eq!(code(&lint), "no_runner_runs_untagged", "{lint}");

    let (elsewhere, _) = server
        .create_runner(json!({
            "runner_type": "project_type",
            "project_id": other,
            "tag_list": ["docker", "linux"],
        }))
        .await;
    assert_eq!(code(&reasons().await.0), "runners_locked");
    let (status, _) = server
        .admin(Method::DELETE, &format!("runners/{elsewhere}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    server
        .create_runner(json!({"tag_list": ["docker", "linux"], "access_level": "ref_protected"}))
        .await;
    assert_eq!(code(&reasons().await.0), "ref_not_protected");

    let (id, token) = server
        .create_runner(json!({"tag_list": ["docker", "linux"], "paused": true}))
        .await;
    let (compile, lint, _) = reasons().await;
    assert_eq!(code(&compile), "runners_paused");
    assert_eq!(code(&lint), "runners_paused", "it runs untagged jobs too");
    let (status, _) = put_form(&server, id, &[("paused", "false")]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        code(&reasons().await.0),
        "runners_offline",
        "it never asked for a job"
    );

    // It asks: it takes the oldest job, and the other waits for it.
    let (taken, _, _) = server.take_job(&token).await;
    let job = server.job(project, taken).await;
    assert_eq!(job["name"], "compile");
    assert_eq!(
        job["pending_reason"],
        Value::Null,
        "a running job does not wait"
    );
    let lint = reasons().await.1;
    assert_eq!(
        lint,
        json!({
            "code": "runners_busy",
            "message": "This job is waiting for the runner that can run it, which is busy with other jobs."
        })
    );
    let single = server
        .job(project, lint_id(&server, project, pipeline).await)
        .await;
    assert_eq!(
        single["pending_reason"], lint,
        "the job's own answer says the same"
    );
    let (status, listed) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/jobs?scope[]=pending"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed[0]["pending_reason"], lint, "{listed}");
}

async fn lint_id(server: &TestServer, project: i64, pipeline: i64) -> i64 {
    server
        .pipeline_jobs(project, pipeline)
        .await
        .iter()
        .find(|j| j["name"] == "lint")
        .and_then(|j| j["id"].as_i64())
        .unwrap()
}
