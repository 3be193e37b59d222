//! `GET /projects/:id/jobs`: every job of the project, newest first, filtered by
//! `scope[]` and paged as GitLab pages (`page`, `per_page`, `X-Next-Page`, …); `scope[]`
//! on a pipeline's jobs too; `GET /projects/:id/pipelines` paged the same way.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

const CI: &str = "build:\n  script: [make]\ntest:\n  script: [make test]\n";

async fn end(server: &TestServer, runner: &str, state: &str) -> i64 {
    let (id, token, _) = server.take_job(runner).await;
    server.end_job(id, &token, state).await;
    id
}

async fn list(server: &TestServer, path: &str) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let response = server
        .http
        .get(server.api(path))
        .header("PRIVATE-TOKEN", &server.admin)
        .send()
        .await
        .unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    (
        status,
        headers,
        response.json().await.unwrap_or(Value::Null),
    )
}

fn ids(jobs: &Value) -> Vec<i64> {
    jobs.as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_jobs_are_listed_newest_first_by_scope_and_page() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let first = server.create_pipeline(project, "main").await["id"]
        .as_i64()
        .unwrap();
    let a = end(&server, &runner, "success").await;
    let b = end(&server, &runner, "failed").await;
    let second = server.create_pipeline(project, "main").await["id"]
        .as_i64()
        .unwrap();
    let c = end(&server, &runner, "success").await;
    // The fourth job stays pending.
    let (_, _, all) = list(&server, &format!("projects/{project}/jobs")).await;
    let newest = ids(&all);
    assert_eq!(newest.len(), 4);
    assert!(newest.windows(2).all(|w| w[0] > w[1]), "{newest:?}");
    assert!(newest.contains(&a) && newest.contains(&b) && newest.contains(&c));

    let (status, headers, page) =
        list(&server, &format!("projects/{project}/jobs?per_page=3")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&page), newest[..3]);
    assert_eq!(headers["x-next-page"], "2");
    assert_eq!(headers["x-total"], "4");
    // GitLab's `OffsetHeaderBuilder`: the previous page (none), the number of pages, and
    // `Link`, which python-gitlab's iterators follow, its parameters sorted by name.
    assert_eq!(headers["x-prev-page"], "");
    assert_eq!(headers["x-total-pages"], "2");
    let url = server.api(&format!("projects/{project}/jobs"));
    assert_eq!(
        headers["link"],
        format!(
            "<{url}?page=2&per_page=3>; rel=\"next\", <{url}?page=1&per_page=3>; rel=\"first\", \
             <{url}?page=2&per_page=3>; rel=\"last\""
        )
    );
    let (_, headers, page) = list(
        &server,
        &format!("projects/{project}/jobs?per_page=3&page=2&scope[]=success&scope[]=failed"),
    )
    .await;
    assert_eq!(
        ids(&page),
        Vec::<i64>::new(),
        "three done jobs fit on the first page"
    );
    assert_eq!(headers["x-prev-page"], "1");
    let (_, headers, page) = list(
        &server,
        &format!("projects/{project}/jobs?per_page=3&page=2"),
    )
    .await;
    assert_eq!(ids(&page), newest[3..]);
    assert_eq!(headers["x-next-page"], "");
    assert_eq!(headers["x-prev-page"], "1");
    assert!(
        headers["link"].to_str().unwrap().starts_with(&format!(
            "<{url}?page=1&per_page=3>; rel=\"prev\", <{url}?page=1"
        )),
        "{:?}",
        headers["link"]
    );
    // A page that is no number is GitLab's parameter error.
    let (status, _, refused) =
        list(&server, &format!("projects/{project}/jobs?per_page=many")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(refused["error"], "per_page is invalid");

    let (_, _, succeeded) =
        list(&server, &format!("projects/{project}/jobs?scope[]=success")).await;
    assert_eq!(ids(&succeeded), [c, a]);
    let (_, _, done) = list(
        &server,
        &format!("projects/{project}/jobs?scope[]=success&scope[]=failed"),
    )
    .await;
    assert_eq!(ids(&done), [c, b, a]);
    let (_, _, failed) = list(
        &server,
        &format!("projects/{project}/pipelines/{first}/jobs?scope=failed"),
    )
    .await;
    assert_eq!(ids(&failed), [b]);

    // Pipelines: newest first, a page at a time.
    let (_, headers, page) =
        list(&server, &format!("projects/{project}/pipelines?per_page=1")).await;
    assert_eq!(ids(&page), [second]);
    assert_eq!(headers["x-total"], "2");
    assert_eq!(headers["x-next-page"], "2");
    let (_, headers, page) = list(
        &server,
        &format!("projects/{project}/pipelines?per_page=1&page=2&ref=main"),
    )
    .await;
    assert_eq!(ids(&page), [first]);
    assert_eq!(headers["x-next-page"], "");
    // By status: GitLab's names; any other is a parameter error naming the valid ones.
    let (_, _, running) = list(
        &server,
        &format!("projects/{project}/pipelines?status=running"),
    )
    .await;
    assert!(ids(&running).contains(&second), "{running:?}");
    assert!(
        running
            .as_array()
            .is_some_and(|l| l.iter().all(|p| p["status"] == "running")),
        "{running:?}"
    );
    // `waiting_for_callback` is one of GitLab's (no pipeline of Gantry's is in it).
    let (_, _, waiting) = list(
        &server,
        &format!("projects/{project}/pipelines?status=waiting_for_callback"),
    )
    .await;
    assert_eq!(waiting, serde_json::json!([]));
    let response = server
        .http
        .get(server.api(&format!("projects/{project}/pipelines?status=blocked")))
        .header("PRIVATE-TOKEN", &server.admin)
        .send()
        .await
        .unwrap();
    let (status, error) = expect_client_error(response, "bad status").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error
            .to_string()
            .contains("status does not have a valid value: give one of created,"),
        "{error}"
    );

    let response = server
        .http
        .get(server.api(&format!("projects/{project}/jobs?scope[]=broken")))
        .header("PRIVATE-TOKEN", &server.admin)
        .send()
        .await
        .unwrap();
    let (status, error) = expect_client_error(response, "bad scope").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error
            .to_string()
            .contains("scope does not have a valid value"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelines_retried_jobs_are_listed_when_asked_in_any_of_grapes_words() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let pipeline = server.create_pipeline(project, "main").await["id"]
        .as_i64()
        .unwrap();
    let failed = end(&server, &runner, "failed").await;
    let (status, _) = server
        .admin(
            reqwest::Method::POST,
            &format!("projects/{project}/jobs/{failed}/retry"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let jobs = format!("projects/{project}/pipelines/{pipeline}/jobs");
    let (_, _, current) = list(&server, &jobs).await;
    assert_eq!(ids(&current).len(), 2);
    assert!(!ids(&current).contains(&failed), "{current}");
    for word in ["true", "1", "yes", "t", "on"] {
        let (status, _, all) = list(&server, &format!("{jobs}?include_retried={word}")).await;
        assert_eq!(status, StatusCode::OK, "{word}: {all}");
        assert_eq!(ids(&all).len(), 3, "{word}: {all}");
        assert!(ids(&all).contains(&failed), "{word}: {all}");
    }
    for word in ["false", "0", "no"] {
        let (_, _, listed) = list(&server, &format!("{jobs}?include_retried={word}")).await;
        assert_eq!(ids(&listed), ids(&current), "{word}");
    }
    let (status, _, error) = list(&server, &format!("{jobs}?include_retried=perhaps")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let error = error.to_string();
    assert!(
        error.contains("include_retried") && error.contains("expected a boolean"),
        "{error}"
    );
}

/// `GET /projects/:id/pipelines` with GitLab's filters: `scope`, `source`, `sha`,
/// `yaml_errors`, times, `order_by` and `sort`; a value GitLab refuses is `400`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_are_filtered_and_ordered_as_on_gitlab() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    repo.git(&["branch", "topic"]);
    repo.git(&["tag", "v1"]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let main_1 = server.create_pipeline(project, "main").await;
    let topic = server.create_pipeline(project, "topic").await;
    let tag = server.create_pipeline(project, "v1").await;
    let main_2 = server.create_pipeline(project, "main").await;
    let ids = |path: String| {
        let server = &server;
        async move {
            let (status, _, body) = list(server, &path).await;
            assert_eq!(status, StatusCode::OK, "{path}: {body}");
            body.as_array()
                .unwrap()
                .iter()
                .map(|p| p["id"].clone())
                .collect::<Vec<_>>()
        }
    };
    let base = format!("projects/{project}/pipelines");
    assert_eq!(
        ids(format!("{base}?scope=branches")).await,
        [main_2["id"].clone(), topic["id"].clone()]
    );
    assert_eq!(ids(format!("{base}?scope=tags")).await, [tag["id"].clone()]);
    assert_eq!(
        ids(format!("{base}?ref=main&sort=asc")).await,
        [main_1["id"].clone(), main_2["id"].clone()]
    );
    assert_eq!(
        ids(format!("{base}?source=push")).await,
        Vec::<Value>::new()
    );
    assert_eq!(ids(format!("{base}?source=api")).await.len(), 4);
    let sha = main_1["sha"].as_str().unwrap();
    assert_eq!(ids(format!("{base}?sha={sha}")).await.len(), 4);
    assert_eq!(
        ids(format!("{base}?yaml_errors=true")).await,
        Vec::<Value>::new()
    );
    assert_eq!(
        ids(format!("{base}?created_after=2999-01-01T00:00:00Z")).await,
        Vec::<Value>::new()
    );
    assert_eq!(
        ids(format!("{base}?updated_before=2999-01-01")).await.len(),
        4
    );
    assert_eq!(
        ids(format!("{base}?order_by=ref&sort=desc")).await[0],
        tag["id"].clone(),
        "v1 sorts after topic and main"
    );
    for query in [
        "scope=done",
        "status=great",
        "order_by=name",
        "sort=up",
        "created_after=yesterday",
    ] {
        let (status, _, body) = list(&server, &format!("{base}?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }
}

/// One pipeline is GitLab's `Ci::Pipeline` entity — who made it, its queue time, its
/// jobs' mean coverage, its `detailed_status` (a success with a failure allowed is
/// "passed with warnings") — where a list's rows are `PipelineBasic`; a job carries the
/// commit it ran (parents, author and committer apart), its pipeline's basic entity
/// and its user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pipeline_shows_gitlab_s_detail_and_a_job_its_commit() {
    let server = TestServer::start().await;
    let ci = "covered:\n  script: [make]\n  coverage: '/^Lines: (\\d+\\.\\d+)%/'\n\
              flaky:\n  script: [make]\n  allow_failure: true\n";
    let repo = Repo::new(&[("README", "first\n")]);
    let parent = repo.head();
    let sha = repo.commit(&[(".gitlab-ci.yml", ci)], "Add CI\n\nWith a body.");
    let project = server.create_project("group/app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (runner_id, runner) = server.create_runner(json!({})).await;
    let created = server.create_pipeline(project, "main").await;
    let id = created["id"].as_i64().unwrap();
    // Creation answers with the detail too, before any job ran.
    assert_eq!(created["detailed_status"]["group"], "pending", "{created}");
    assert_eq!(created["coverage"], Value::Null);
    for _ in 0..2 {
        let (job, token, payload) = server.take_job(&runner).await;
        if payload["job_info"]["name"] == "covered" {
            let log = "Lines: 83.5%\n";
            assert_eq!(
                server.patch_log(job, &token, 0, log).await,
                StatusCode::ACCEPTED
            );
            server.end_job(job, &token, "success").await;
        } else {
            server.end_job(job, &token, "failed").await;
        }
    }

    let (status, shown) = server
        .admin(
            reqwest::Method::GET,
            &format!("projects/{project}/pipelines/{id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["status"], "success");
    assert_eq!(shown["coverage"], "83.50", "{shown}");
    assert_eq!(shown["committed_at"], Value::Null);
    assert_eq!(shown["archived"], false);
    assert!(shown["queued_duration"].is_null() || shown["queued_duration"].is_i64());
    assert!(!shown["user"]["username"].as_str().unwrap().is_empty());
    assert!(shown["user"]["id"].is_i64() && shown["user"]["state"] == "active");
    let details = &shown["detailed_status"];
    assert_eq!(details["group"], "success-with-warnings");
    assert_eq!(details["text"], "Warning");
    assert_eq!(details["label"], "passed with warnings");
    assert_eq!(details["icon"], "status_warning");
    assert_eq!(details["has_details"], true);
    assert_eq!(
        details["details_path"],
        format!("/group/app/-/pipelines/{id}")
    );
    assert_eq!(
        details["favicon"],
        "/assets/ci_favicons/favicon_status_success.png"
    );
    // A list's rows are GitLab's `PipelineBasic`: no detail read per row.
    let (_, _, listed) = list(&server, &format!("projects/{project}/pipelines")).await;
    assert_eq!(listed[0]["id"], id);
    assert!(listed[0].get("detailed_status").is_none(), "{listed}");

    let jobs = server.pipeline_jobs(project, id).await;
    let job = server.job(project, jobs[0]["id"].as_i64().unwrap()).await;
    for shown in [&jobs[0], &job] {
        let commit = &shown["commit"];
        assert_eq!(commit["id"], sha);
        assert_eq!(commit["short_id"], &sha[..8]);
        assert_eq!(commit["parent_ids"], json!([parent]));
        assert_eq!(commit["title"], "Add CI");
        assert_eq!(commit["message"], "Add CI\n\nWith a body.");
        let show = |format: &str| repo.git(&["show", "-s", &format!("--format={format}"), "HEAD"]);
        assert_eq!(commit["author_name"], show("%an"));
        assert_eq!(commit["author_email"], show("%ae"));
        assert_eq!(commit["committer_name"], show("%cn"));
        // The time in the author's zone (`+00:00` where git prints `Z`).
        let in_zone = |value: &Value| value.as_str().unwrap()[..19].to_owned();
        assert_eq!(in_zone(&commit["authored_date"]), show("%aI")[..19]);
        assert_eq!(in_zone(&commit["committed_date"]), show("%cI")[..19]);
        assert_eq!(commit["created_at"], commit["committed_date"]);
        assert!(
            commit["web_url"]
                .as_str()
                .unwrap()
                .ends_with(&format!("/group/app/-/commit/{sha}")),
            "{commit}"
        );
        assert_eq!(shown["pipeline"]["iid"], created["iid"]);
        assert_eq!(shown["pipeline"]["source"], "api");
        assert_eq!(shown["pipeline"]["web_url"], created["web_url"]);
        assert_eq!(shown["user"], created["user"]);
        assert_eq!(shown["archived"], false);
        assert_eq!(shown["runner_id"], runner_id);
        let taker = &shown["runner"];
        assert_eq!(taker["id"], runner_id, "{shown}");
        assert_eq!(
            (
                &taker["runner_type"],
                &taker["is_shared"],
                &taker["ip_address"]
            ),
            (&json!("instance_type"), &json!(true), &Value::Null)
        );
        assert_eq!(
            (&taker["online"], &taker["status"]),
            (&json!(true), &json!("online"))
        );
    }
    // A deleted runner's jobs no longer name it.
    let (status, _) = server
        .admin(
            reqwest::Method::DELETE,
            &format!("runners/{runner_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let job = server.job(project, jobs[0]["id"].as_i64().unwrap()).await;
    assert_eq!(
        (&job["runner_id"], &job["runner"]),
        (&Value::Null, &Value::Null)
    );
}
