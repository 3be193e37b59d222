//! The user API where GitLab's clients start, over real HTTP: `GET /user`, `/version`,
//! `/metadata`; personal access tokens (`api` and `read_api` scopes, expiry, revocation);
//! `GET /runners` and a project's runners (list, enable another project's runner — which
//! then gets that project's jobs — and disable it); `GET /projects` with GitLab's search,
//! order and `simple`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A user API call with `token`; the status and JSON body.
async fn call(
    server: &TestServer,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = server
        .http
        .request(method, server.api(path))
        .header("PRIVATE-TOKEN", token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status();
    let bytes = response.bytes().await.expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_the_version_and_the_metadata() {
    let server = TestServer::start().await;
    let (status, user) = server.admin(Method::GET, "user", None).await;
    assert_eq!(status, StatusCode::OK, "{user}");
    assert_eq!(user["id"], 1);
    assert_eq!(user["username"], "root");
    assert_eq!(user["name"], "Administrator");
    assert_eq!(user["state"], "active");
    assert_eq!(user["is_admin"], true);
    assert_eq!(user["web_url"], format!("{}/root", server.url));
    let (status, same) = server.admin(Method::GET, "users/1", None).await;
    assert_eq!(
        (status, &same["username"]),
        (StatusCode::OK, &json!("root"))
    );
    let (status, _) = server.admin(Method::GET, "users/2", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // `GET /users`: the one user, found by username (any case) or a part of its name.
    for query in ["users", "users?username=ROOT", "users?search=admin"] {
        let (status, users) = server.admin(Method::GET, query, None).await;
        assert_eq!(status, StatusCode::OK, "{query}: {users}");
        assert_eq!(users[0]["id"], 1, "{query}: {users}");
    }
    for query in ["users?username=ro", "users?search=nobody"] {
        let (_, users) = server.admin(Method::GET, query, None).await;
        assert_eq!(users, json!([]), "{query}");
    }

    for path in ["version", "metadata"] {
        let (status, version) = server.admin(Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {version}");
        assert_eq!(version["version"], "18.6.0", "{path}");
        assert!(
            version["revision"]
                .as_str()
                .is_some_and(|r| r.starts_with("gantry-")),
            "{version}"
        );
        assert_eq!(version["kas"]["enabled"], false);
    }
    let anonymous = server.http.get(server.api("user")).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn personal_access_tokens_have_scopes_expiry_and_revocation() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    let project_id = server.create_project("demo", &repo).await["id"]
        .as_i64()
        .unwrap();

    let (status, reader) = server
        .admin(
            Method::POST,
            "users/1/personal_access_tokens",
            Some(
                json!({ "name": "dashboards", "scopes": ["read_api"], "expires_at": "2999-01-01" }),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{reader}");
    let read_token = reader["token"].as_str().unwrap().to_owned();
    assert!(read_token.starts_with("glpat-"), "{read_token}");
    assert_eq!(reader["scopes"], json!(["read_api"]));
    assert_eq!(reader["active"], true);
    assert_eq!(reader["revoked"], false);
    assert_eq!(reader["expires_at"], "2999-01-01");
    assert_eq!(reader["user_id"], 1);

    // A form works too (`curl --data`), for the calling user.
    let form = server
        .http
        .post(server.api("user/personal_access_tokens"))
        .header("PRIVATE-TOKEN", &server.admin)
        .form(&[("name", "ci bot"), ("scopes[]", "api")])
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), StatusCode::CREATED);
    let writer: Value = form.json().await.unwrap();
    let write_token = writer["token"].as_str().unwrap().to_owned();
    assert_eq!(writer["expires_at"], Value::Null);

    // `read_api` reads and may not write; `api` does both.
    let (status, user) = call(&server, &read_token, Method::GET, "user", None).await;
    assert_eq!(
        (status, &user["username"]),
        (StatusCode::OK, &json!("root"))
    );
    let (status, projects) = call(&server, &read_token, Method::GET, "projects", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(projects[0]["id"], project_id);
    let pipeline = format!("projects/{project_id}/pipeline?ref=main");
    let (status, refused) = call(&server, &read_token, Method::POST, &pipeline, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("insufficient_scope") && m.contains("scope api")),
        "{refused}"
    );
    let (status, created) = call(&server, &write_token, Method::POST, &pipeline, None).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");

    // The list shows no secrets; `self` is the calling token.
    let (status, tokens) = server
        .admin(Method::GET, "personal_access_tokens", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let tokens = tokens.as_array().unwrap();
    assert_eq!(tokens.len(), 2);
    assert!(
        tokens.iter().all(|t| t.get("token").is_none()),
        "{tokens:?}"
    );
    let (status, me) = call(
        &server,
        &read_token,
        Method::GET,
        "personal_access_tokens/self",
        None,
    )
    .await;
    assert_eq!(
        (status, &me["name"]),
        (StatusCode::OK, &json!("dashboards"))
    );

    // Revoked: it stops working at once; revoking again is 404.
    let revoke = format!("personal_access_tokens/{}", reader["id"]);
    let (status, _) = server.admin(Method::DELETE, &revoke, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&server, &read_token, Method::GET, "user", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = server.admin(Method::DELETE, &revoke, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, shown) = server.admin(Method::GET, &revoke, None).await;
    assert_eq!(
        (shown["revoked"].clone(), shown["active"].clone()),
        (json!(true), json!(false))
    );
    // A token revokes itself with `self`.
    let (status, _) = call(
        &server,
        &write_token,
        Method::DELETE,
        "personal_access_tokens/self",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&server, &write_token, Method::GET, "projects", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // What is refused, and why.
    for (body, needle) in [
        (json!({ "scopes": ["api"] }), "name is missing"),
        (json!({ "name": "x" }), "scopes is missing"),
        (json!({ "name": "x", "scopes": ["sudo"] }), "scope `sudo`"),
        (
            json!({ "name": "x", "scopes": ["api"], "expires_at": "2001-01-01" }),
            "not in the future",
        ),
        (
            json!({ "name": "x", "scopes": ["api"], "expires_at": "soon" }),
            "not a date",
        ),
    ] {
        let (status, error) = server
            .admin(
                Method::POST,
                "user/personal_access_tokens",
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert!(
            error["error"].as_str().is_some_and(|e| e.contains(needle)),
            "{body}: {error}"
        );
    }
    let (status, _) = server
        .admin(
            Method::POST,
            "users/7/personal_access_tokens",
            Some(json!({ "name": "x", "scopes": ["api"] })),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_runner_enabled_for_another_project_takes_its_jobs() {
    let server = TestServer::start().await;
    let ci = "build:\n  tags: [arm]\n  script: [make]\n";
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let first = server.create_project("acme/first", &repo).await["id"]
        .as_i64()
        .unwrap();
    let second = server.create_project("acme/second", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (shared, _) = server.create_runner(json!({ "tag_list": "x86" })).await;
    let (own, own_token) = server
        .create_runner(
            json!({ "runner_type": "project_type", "project_id": first, "tag_list": "arm" }),
        )
        .await;

    // `GET /runners` lists owned runners (not instance ones); `/runners/all` every one.
    let ids = |list: &Value| -> Vec<i64> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect()
    };
    let (_, owned) = server.admin(Method::GET, "runners", None).await;
    assert_eq!(ids(&owned), [own]);
    let (_, all) = server
        .admin(Method::GET, "runners/all?type=instance_type", None)
        .await;
    assert_eq!(ids(&all), [shared]);
    let (status, _) = server.admin(Method::GET, "runners?type=cloud", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, tagged) = server
        .admin(Method::GET, "runners?tag_list=arm&paused=false", None)
        .await;
    assert_eq!(ids(&tagged), [own]);

    let (status, runners) = server
        .admin(Method::GET, &format!("projects/{first}/runners"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&runners), [shared, own]);
    let (_, runners) = server
        .admin(Method::GET, &format!("projects/{second}/runners"), None)
        .await;
    assert_eq!(ids(&runners), [shared]);

    // Not enabled for the second project: its job waits.
    server.create_pipeline(second, "main").await;
    assert_eq!(
        server.request_job(&own_token, None).await.status(),
        StatusCode::NO_CONTENT
    );

    let enable = format!("projects/{second}/runners");
    let (status, enabled) = server
        .admin(Method::POST, &enable, Some(json!({ "runner_id": own })))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{enabled}");
    assert_eq!(enabled["id"], own);
    let (status, again) = server
        .admin(Method::POST, &enable, Some(json!({ "runner_id": own })))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{again}");
    let (status, refused) = server
        .admin(Method::POST, &enable, Some(json!({ "runner_id": shared })))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let (_, runners) = server
        .admin(Method::GET, &format!("projects/{second}/runners"), None)
        .await;
    assert_eq!(ids(&runners), [shared, own]);
    // Its details list the projects it runs for (GitLab's `projects`), its owner first;
    // an instance runner's are none.
    let (_, details) = server
        .admin(Method::GET, &format!("runners/{own}"), None)
        .await;
    let projects: Vec<(i64, &str)> = details["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_i64().unwrap(),
                p["path_with_namespace"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        projects,
        [(first, "acme/first"), (second, "acme/second")],
        "{details}"
    );
    let (_, details) = server
        .admin(Method::GET, &format!("runners/{shared}"), None)
        .await;
    assert_eq!(details["projects"], json!([]), "{details}");

    let (job_id, job_token, payload) = server.take_job(&own_token).await;
    assert_eq!(payload["job_info"]["project_id"], second);
    server.end_job(job_id, &job_token, "success").await;

    // Disabled again: the second project's next job waits; its own project stays.
    let (status, _) = server
        .admin(
            Method::DELETE,
            &format!("projects/{second}/runners/{own}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server
        .admin(
            Method::DELETE,
            &format!("projects/{second}/runners/{own}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, own_project) = server
        .admin(
            Method::DELETE,
            &format!("projects/{first}/runners/{own}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{own_project}");
    server.create_pipeline(second, "main").await;
    assert_eq!(
        server.request_job(&own_token, None).await.status(),
        StatusCode::NO_CONTENT
    );

    // Deleting the second project leaves the runner; deleting the first removes it.
    let (status, _) = server
        .admin(Method::POST, &enable, Some(json!({ "runner_id": own })))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = server
        .admin(Method::DELETE, &format!("projects/{second}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _) = server
        .admin(Method::GET, &format!("runners/{own}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = server
        .admin(Method::DELETE, &format!("projects/{first}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _) = server
        .admin(Method::GET, &format!("runners/{own}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_are_searched_ordered_and_shown_simply() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    for name in ["acme/web", "acme/api", "tools/Webhooks"] {
        server.create_project(name, &repo).await;
    }
    let names = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|p| p["path_with_namespace"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, all) = server.admin(Method::GET, "projects", None).await;
    assert_eq!(status, StatusCode::OK);
    // Newest first by default, as GitLab lists them.
    assert_eq!(names(&all), ["tools/Webhooks", "acme/api", "acme/web"]);
    let (_, found) = server.admin(Method::GET, "projects?search=WEB", None).await;
    assert_eq!(names(&found), ["tools/Webhooks", "acme/web"]);
    let (_, found) = server
        .admin(
            Method::GET,
            "projects?search=acme&order_by=name&sort=asc",
            None,
        )
        .await;
    assert_eq!(names(&found), ["acme/api", "acme/web"]);
    let (_, none) = server
        .admin(Method::GET, "projects?search=nothing", None)
        .await;
    assert_eq!(none, json!([]));
    let (_, archived) = server
        .admin(Method::GET, "projects?archived=true", None)
        .await;
    assert_eq!(archived, json!([]));
    let (_, mine) = server
        .admin(
            Method::GET,
            "projects?membership=true&owned=true&archived=false&per_page=2",
            None,
        )
        .await;
    assert_eq!(names(&mine), ["tools/Webhooks", "acme/api"]);
    let (_, simple) = server
        .admin(
            Method::GET,
            "projects?simple=true&order_by=id&sort=asc",
            None,
        )
        .await;
    let first = simple[0].as_object().unwrap();
    assert_eq!(first["path_with_namespace"], "acme/web");
    assert!(first.contains_key("http_url_to_repo") && first.contains_key("namespace"));
    assert!(!first.contains_key("build_timeout"), "{first:?}");
    for bad in ["order_by=stars", "sort=up"] {
        let (status, error) = server
            .admin(Method::GET, &format!("projects?{bad}"), None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {error}");
    }
}
