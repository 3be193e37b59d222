//! The CI/CD job token allowlist over real HTTP: GitLab's `/projects/:id/job_token_scope`
//! API (shapes and refusals snapshotted), who may change it, and what it decides — a
//! new project keeps another project's `needs:project` out (the job fails
//! `missing_dependency_failure`, the runner's download is `403`) until its allowlist
//! names that project or a group it is in, or its limit is turned off; the artifacts API
//! and git with a job token of another project follow the allowlist only.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use std::fmt::Write as _;
use std::io::Write as _;

use http_support::{Repo, TestServer, expect_client_error};
use reqwest::multipart::{Form, Part};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const LIB_CI: &str = "build:\n  script: [make]\n  artifacts:\n    paths: [out.txt]\n";
const APP_CI: &str = r"
uses:
  script: [cat out.txt]
  needs:
    - {project: acme/lib, job: build, ref: main, artifacts: true}
probe:
  script: [curl]
";

/// A transcript line's body: `created_at` and the server's address made stable.
fn stable(server: &TestServer, mut value: Value) -> String {
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    if key == "created_at" {
                        *v = json!("[time]");
                    } else {
                        walk(v);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut value);
    if value.is_null() {
        return String::new();
    }
    value.to_string().replace(&server.url, "http://gantry.test")
}

/// Sends `method path` (a JSON `body`, if any) with the admin token and writes
/// `METHOD path → status body` to `log`; returns the status and body.
async fn call(
    server: &TestServer,
    log: &mut String,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let shown = body.as_ref().map(|b| format!(" {b}")).unwrap_or_default();
    let (status, answer) = server.admin(method.clone(), path, body).await;
    let _ = writeln!(
        log,
        "{method} {path}{shown} → {} {}",
        status.as_u16(),
        stable(server, answer.clone())
    );
    (status, answer)
}

fn zip_of(name: &str, content: &str) -> Vec<u8> {
    let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    archive
        .start_file(name, zip::write::SimpleFileOptions::default())
        .unwrap();
    archive.write_all(content.as_bytes()).unwrap();
    archive.finish().unwrap().into_inner()
}

/// `acme/lib`'s `build` ran on `main` with an archive; returns its job id and the archive.
async fn lib_built(server: &TestServer, runner: &str, lib: i64) -> (i64, Vec<u8>) {
    server.create_pipeline(lib, "main").await;
    let (id, token, _) = server.take_job(runner).await;
    let archive = zip_of("out.txt", "built\n");
    let uploaded = server
        .http
        .post(server.api(&format!(
            "jobs/{id}/artifacts?artifact_format=zip&artifact_type=archive"
        )))
        .header("JOB-TOKEN", &token)
        .multipart(Form::new().part(
            "file",
            Part::bytes(archive.clone()).file_name("artifacts.zip"),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), StatusCode::CREATED);
    server.end_job(id, &token, "success").await;
    (id, archive)
}

/// The next job any pending pipeline gives `runner`: `(name, id, token, payload)`;
/// `None` when there is none (a job failed at assignment is not handed out).
async fn next_job(server: &TestServer, runner: &str) -> Option<(String, i64, String, Value)> {
    let response = server.request_job(runner, None).await;
    if response.status() == StatusCode::NO_CONTENT {
        return None;
    }
    assert_eq!(response.status(), StatusCode::CREATED);
    let payload: Value = response.json().await.unwrap();
    Some((
        payload["job_info"]["name"].as_str().unwrap().to_owned(),
        payload["id"].as_i64().unwrap(),
        payload["token"].as_str().unwrap().to_owned(),
        payload,
    ))
}

/// `GET /jobs/:id/artifacts` (the runner's download of a dependency) with `token`.
async fn runner_download(server: &TestServer, job: i64, token: &str) -> (StatusCode, Vec<u8>) {
    let response = server
        .http
        .get(server.api(&format!("jobs/{job}/artifacts")))
        .header("JOB-TOKEN", token)
        .send()
        .await
        .unwrap();
    (response.status(), response.bytes().await.unwrap().to_vec())
}

/// The user API's latest `build` archive of `acme/lib` and a git `info/refs` of its
/// repository, both with job token `token`: their statuses.
async fn api_and_git(server: &TestServer, lib: i64, token: &str) -> (u16, u16) {
    let api = server
        .http
        .get(server.api(&format!(
            "projects/{lib}/jobs/artifacts/main/download?job=build"
        )))
        .header("JOB-TOKEN", token)
        .send()
        .await
        .unwrap()
        .status();
    let git = server
        .http
        .get(format!(
            "{}/acme/lib.git/info/refs?service=git-upload-pack",
            server.url
        ))
        .basic_auth("gitlab-ci-token", Some(token))
        .send()
        .await
        .unwrap()
        .status();
    (api.as_u16(), git.as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scope_and_its_allowlists_answer_in_gitlabs_shapes() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", LIB_CI)]);
    let mut ids = Vec::new();
    for name in ["acme/lib", "acme/app", "tools/cli"] {
        ids.push(
            server.create_project(name, &repo).await["id"]
                .as_i64()
                .unwrap(),
        );
    }
    let [lib, app, _cli] = ids[..] else {
        unreachable!()
    };
    let (_, tools) = server.admin(Method::GET, "groups/tools", None).await;
    let tools = tools["id"].as_i64().unwrap();
    let scope = format!("projects/{lib}/job_token_scope");
    let allowlist = format!("{scope}/allowlist");
    let groups = format!("{scope}/groups_allowlist");
    let mut log = String::new();
    let log = &mut log;

    call(&server, log, Method::GET, &scope, None).await;
    call(
        &server,
        log,
        Method::GET,
        "projects/acme%2Flib/job_token_scope",
        None,
    )
    .await;
    call(&server, log, Method::GET, &allowlist, None).await;
    let target = json!({ "target_project_id": app });
    call(&server, log, Method::POST, &allowlist, Some(target.clone())).await;
    call(&server, log, Method::POST, &allowlist, Some(target.clone())).await;
    call(
        &server,
        log,
        Method::POST,
        &allowlist,
        Some(json!({ "target_project_id": lib })),
    )
    .await;
    call(
        &server,
        log,
        Method::POST,
        &allowlist,
        Some(json!({ "target_project_id": 999 })),
    )
    .await;
    call(&server, log, Method::POST, &allowlist, Some(json!({}))).await;
    call(
        &server,
        log,
        Method::POST,
        &allowlist,
        Some(json!({ "target_project_id": "two" })),
    )
    .await;
    call(
        &server,
        log,
        Method::POST,
        "projects/acme%2Flib/job_token_scope/allowlist",
        Some(target.clone()),
    )
    .await;
    call(&server, log, Method::GET, &allowlist, None).await;
    call(
        &server,
        log,
        Method::GET,
        &format!("{allowlist}?per_page=1&page=2"),
        None,
    )
    .await;
    call(&server, log, Method::GET, &groups, None).await;
    let group = json!({ "target_group_id": tools });
    call(&server, log, Method::POST, &groups, Some(group.clone())).await;
    call(&server, log, Method::POST, &groups, Some(group.clone())).await;
    call(
        &server,
        log,
        Method::POST,
        &groups,
        Some(json!({ "target_group_id": 999 })),
    )
    .await;
    call(&server, log, Method::GET, &groups, None).await;
    call(
        &server,
        log,
        Method::DELETE,
        &format!("{groups}/{tools}"),
        None,
    )
    .await;
    call(
        &server,
        log,
        Method::DELETE,
        &format!("{groups}/{tools}"),
        None,
    )
    .await;
    call(&server, log, Method::DELETE, &format!("{groups}/999"), None).await;
    call(
        &server,
        log,
        Method::DELETE,
        &format!("{allowlist}/{app}"),
        None,
    )
    .await;
    call(
        &server,
        log,
        Method::DELETE,
        &format!("{allowlist}/{app}"),
        None,
    )
    .await;
    call(
        &server,
        log,
        Method::DELETE,
        &format!("{allowlist}/{lib}"),
        None,
    )
    .await;
    call(
        &server,
        log,
        Method::DELETE,
        &format!("{allowlist}/999"),
        None,
    )
    .await;
    call(
        &server,
        log,
        Method::DELETE,
        &format!("{allowlist}/x"),
        None,
    )
    .await;
    call(
        &server,
        log,
        Method::PATCH,
        &scope,
        Some(json!({ "enabled": false })),
    )
    .await;
    call(&server, log, Method::GET, &scope, None).await;
    call(&server, log, Method::PATCH, &scope, Some(json!({}))).await;
    call(
        &server,
        log,
        Method::PATCH,
        "projects/999/job_token_scope",
        Some(json!({ "enabled": true })),
    )
    .await;
    call(
        &server,
        log,
        Method::GET,
        "projects/999/job_token_scope",
        None,
    )
    .await;
    // A form, as `curl --data` sends it.
    let response = server
        .http
        .patch(server.api(&scope))
        .header("PRIVATE-TOKEN", &server.admin)
        .form(&[("enabled", "true")])
        .send()
        .await
        .unwrap();
    let _ = writeln!(
        log,
        "PATCH {scope} enabled=true (form) → {}",
        response.status().as_u16()
    );
    call(&server, log, Method::GET, &scope, None).await;
    insta::assert_snapshot!(log);

    // GitLab's pagination headers on the allowlist.
    server.admin(Method::POST, &allowlist, Some(target)).await;
    let page = server
        .http
        .get(server.api(&format!("{allowlist}?per_page=1")))
        .header("PRIVATE-TOKEN", &server.admin)
        .send()
        .await
        .unwrap();
    let header = |name: &str| page.headers()[name].to_str().unwrap().to_owned();
    assert_eq!(
        (header("x-total"), header("x-page"), header("x-next-page")),
        ("2".to_owned(), "1".to_owned(), "2".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_administrator_changes_the_scope() {
    let server = TestServer::start().await;
    let lib_repo = Repo::new(&[(".gitlab-ci.yml", LIB_CI)]);
    let app_repo = Repo::new(&[(".gitlab-ci.yml", APP_CI)]);
    let lib = server.create_project("acme/lib", &lib_repo).await["id"]
        .as_i64()
        .unwrap();
    let app = server.create_project("acme/app", &app_repo).await["id"]
        .as_i64()
        .unwrap();
    let (status, reader) = server
        .admin(
            Method::POST,
            "users/1/personal_access_tokens",
            Some(json!({ "name": "reader", "scopes": ["read_api"], "expires_at": "2999-01-01" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{reader}");
    let reader = reader["token"].as_str().unwrap().to_owned();
    // A running job of `acme/lib` itself: its job token is no user credential.
    let (_, runner) = server.create_runner(json!({})).await;
    server.create_pipeline(lib, "main").await;
    let (_, job_token, _) = server.take_job(&runner).await;
    let (_, acme) = server.admin(Method::GET, "groups/acme", None).await;
    let acme = acme["id"].as_i64().unwrap();

    let scope = format!("projects/{lib}/job_token_scope");
    let calls: Vec<(Method, String, Value)> = vec![
        (Method::GET, scope.clone(), Value::Null),
        (Method::PATCH, scope.clone(), json!({ "enabled": false })),
        (Method::GET, format!("{scope}/allowlist"), Value::Null),
        (
            Method::POST,
            format!("{scope}/allowlist"),
            json!({ "target_project_id": app }),
        ),
        (
            Method::DELETE,
            format!("{scope}/allowlist/{app}"),
            Value::Null,
        ),
        (
            Method::GET,
            format!("{scope}/groups_allowlist"),
            Value::Null,
        ),
        (
            Method::POST,
            format!("{scope}/groups_allowlist"),
            json!({ "target_group_id": acme }),
        ),
        (
            Method::DELETE,
            format!("{scope}/groups_allowlist/{acme}"),
            Value::Null,
        ),
    ];
    for (method, path, body) in &calls {
        let request = |credential: Option<(&str, &str)>| {
            let mut request = server.http.request(method.clone(), server.api(path));
            if let Some((header, value)) = credential {
                request = request.header(header, value);
            }
            if !body.is_null() {
                request = request.json(body);
            }
            request
        };
        let what = format!("{method} {path}");
        for (credential, expected) in [
            (None, StatusCode::UNAUTHORIZED),
            (
                Some(("PRIVATE-TOKEN", "glpat-not-a-token")),
                StatusCode::UNAUTHORIZED,
            ),
            (
                Some(("JOB-TOKEN", job_token.as_str())),
                StatusCode::UNAUTHORIZED,
            ),
            (
                Some(("PRIVATE-TOKEN", job_token.as_str())),
                StatusCode::UNAUTHORIZED,
            ),
        ] {
            let response = request(credential).send().await.unwrap();
            let (status, _) = expect_client_error(response, &what).await;
            assert_eq!(status, expected, "{what} with {credential:?}");
        }
        // A `read_api` token reads and changes nothing.
        let response = request(Some(("PRIVATE-TOKEN", reader.as_str())))
            .send()
            .await
            .unwrap();
        if *method == Method::GET {
            assert_eq!(response.status(), StatusCode::OK, "{what} with read_api");
        } else {
            let (status, answer) = expect_client_error(response, &what).await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{what} with read_api: {answer}"
            );
        }
    }
    // Nothing changed.
    let (_, now) = server.admin(Method::GET, &scope, None).await;
    assert_eq!(
        now,
        json!({ "inbound_enabled": true, "outbound_enabled": false })
    );
    let (_, list) = server
        .admin(Method::GET, &format!("{scope}/allowlist"), None)
        .await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    let (_, list) = server
        .admin(Method::GET, &format!("{scope}/groups_allowlist"), None)
        .await;
    assert_eq!(list, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_project_keeps_other_projects_needs_out_until_its_allowlist_names_them() {
    let server = TestServer::start().await;
    let lib_repo = Repo::new(&[(".gitlab-ci.yml", LIB_CI)]);
    let app_repo = Repo::new(&[(".gitlab-ci.yml", APP_CI)]);
    let lib = server.create_project("acme/lib", &lib_repo).await["id"]
        .as_i64()
        .unwrap();
    let app = server.create_project("acme/app", &app_repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let (build, archive) = lib_built(&server, &runner, lib).await;

    // Limited (a new project's default) and `acme/app` not named: `uses` fails before it
    // runs, saying why and what to do; `probe` runs.
    let first = server.create_pipeline(app, "main").await["id"]
        .as_i64()
        .unwrap();
    let (name, _, probe, _) = next_job(&server, &runner).await.expect("probe runs");
    assert_eq!(name, "probe");
    assert!(next_job(&server, &runner).await.is_none());
    let uses = server
        .pipeline_jobs(app, first)
        .await
        .into_iter()
        .find(|j| j["name"] == "uses")
        .unwrap();
    assert_eq!(
        (&uses["status"], &uses["failure_reason"]),
        (&json!("failed"), &json!("missing_dependency_failure"))
    );
    let log = server.job_log(app, uses["id"].as_i64().unwrap()).await;
    assert_eq!(
        log.trim_end(),
        format!(
            "ERROR: the job could not start: needs:project `acme/lib`: project `acme/lib` limits CI/CD job token access to its allowlist, which does not name `acme/app`: add it to the allowlist (POST /api/v4/projects/{lib}/job_token_scope/allowlist with target_project_id={app}), or turn the limit off (PATCH /api/v4/projects/{lib}/job_token_scope with enabled=false)"
        )
    );
    // The runner API refuses the archive to another project's job token too.
    let (status, body) = runner_download(&server, build, &probe).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(api_and_git(&server, lib, &probe).await, (403, 403));

    // Named: the need resolves, the runner downloads the archive; the artifacts API and
    // git open to `acme/app`'s job tokens.
    let (status, _) = server
        .admin(
            Method::POST,
            &format!("projects/{lib}/job_token_scope/allowlist"),
            Some(json!({ "target_project_id": app })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(api_and_git(&server, lib, &probe).await, (200, 200));
    server.create_pipeline(app, "main").await;
    let mut uses = None;
    while let Some((name, _, token, payload)) = next_job(&server, &runner).await {
        if name == "uses" {
            uses = Some((token, payload));
        }
    }
    let (uses, payload) = uses.expect("uses runs");
    assert_eq!(payload["dependencies"][0]["id"], build);
    assert_eq!(
        runner_download(&server, build, &uses).await,
        (StatusCode::OK, archive.clone())
    );

    // Taken off again: checked at each download, so the running job is refused now.
    let (status, _) = server
        .admin(
            Method::DELETE,
            &format!("projects/{lib}/job_token_scope/allowlist/{app}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = runner_download(&server, build, &uses).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("limits CI/CD job token access to its allowlist"),
        "{body}"
    );
    assert_eq!(api_and_git(&server, lib, &probe).await, (403, 403));

    // The limit off: `needs:project` reads again, as before the allowlist existed; the
    // artifacts API and git stay with the allowlist.
    let (status, _) = server
        .admin(
            Method::PATCH,
            &format!("projects/{lib}/job_token_scope"),
            Some(json!({ "enabled": false })),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        runner_download(&server, build, &uses).await,
        (StatusCode::OK, archive.clone())
    );
    assert_eq!(api_and_git(&server, lib, &probe).await, (403, 403));
    server
        .end_job(payload["id"].as_i64().unwrap(), &uses, "success")
        .await;

    // On again, with the group `acme` named: `acme/app` is in it.
    let (_, acme) = server.admin(Method::GET, "groups/acme", None).await;
    for (method, path, body) in [
        (Method::PATCH, "job_token_scope", json!({ "enabled": true })),
        (
            Method::POST,
            "job_token_scope/groups_allowlist",
            json!({ "target_group_id": acme["id"] }),
        ),
    ] {
        let (status, answer) = server
            .admin(method, &format!("projects/{lib}/{path}"), Some(body))
            .await;
        assert!(status.is_success(), "{path}: {status} {answer}");
    }
    assert_eq!(api_and_git(&server, lib, &probe).await, (200, 200));
    server.create_pipeline(app, "main").await;
    let mut names = Vec::new();
    while let Some((name, _, _, payload)) = next_job(&server, &runner).await {
        if name == "uses" {
            assert_eq!(payload["dependencies"][0]["id"], build);
        }
        names.push(name);
    }
    names.sort();
    assert_eq!(names, ["probe", "uses"]);
}
