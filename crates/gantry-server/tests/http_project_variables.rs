//! Project CI/CD variables over the user API (`/projects/:id/variables`, GitLab's shapes)
//! and what a job then receives in its payload: precedence, file variables, masking,
//! protection, environment scopes, and rules that read them at pipeline creation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::{Repo, TestServer, job_variable as var};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const PIPELINE: &str = r#"
variables:
  GREETING: from-yaml
build:
  rules:
    - if: $ENABLE_BUILD == "yes"
  script: [make]
deploy:
  environment: production
  script: [deploy]
preview:
  environment: review/$CI_COMMIT_REF_SLUG
  rules:
    - if: $PREVIEW == "on"
  script: [preview]
ship:
  environment: $SHIP_TO
  rules:
    - if: $SHIP_ENABLED == "yes"
  script: [ship]
"#;

#[tokio::test]
async fn variables_are_created_listed_updated_and_deleted() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    let project = server.create_project("group/vars", &repo).await;
    let pid = project["id"].as_i64().unwrap();
    let path = format!("projects/{pid}/variables");

    let (status, created) = server
        .admin(
            Method::POST,
            &path,
            Some(
                json!({"key": "TOKEN", "value": "abc-12345678", "masked": true, "protected": true}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(
        created,
        json!({"variable_type": "env_var", "key": "TOKEN", "value": "abc-12345678", "protected": true,
               "masked": true, "hidden": false, "raw": false, "environment_scope": "*", "description": null})
    );
    // The same key for another scope, then one key twice for the same scope.
    let (status, _) = server
        .admin(
            Method::POST,
            &path,
            Some(json!({"key": "TOKEN", "value": "prod", "environment_scope": "production"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = server
        .admin(
            Method::POST,
            &path,
            Some(json!({"key": "TOKEN", "value": "again"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.to_string().contains("(TOKEN) has already been taken"),
        "{body}"
    );

    let (status, list) = server.admin(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK);
    let scopes: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["environment_scope"].as_str().unwrap())
        .collect();
    assert_eq!(scopes, ["*", "production"]);

    // Two scopes: the key alone is ambiguous, the filter picks one.
    let (status, body) = server
        .admin(Method::GET, &format!("{path}/TOKEN"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.to_string().contains("filter[environment_scope]"));
    let scoped = format!("{path}/TOKEN?filter%5Benvironment_scope%5D=production");
    let (status, shown) = server.admin(Method::GET, &scoped, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["value"], "prod");

    let (status, updated) = server
        .admin(
            Method::PUT,
            &scoped,
            Some(json!({"value": "prod-2", "variable_type": "file", "key": "RENAMED"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    // A `key` in the body does not rename the variable (GitLab ignores it).
    assert_eq!(
        (
            &updated["key"],
            &updated["value"],
            &updated["variable_type"],
            &updated["environment_scope"]
        ),
        (
            &json!("TOKEN"),
            &json!("prod-2"),
            &json!("file"),
            &json!("production")
        )
    );

    let (status, _) = server.admin(Method::DELETE, &scoped, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server.admin(Method::DELETE, &scoped, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, shown) = server
        .admin(Method::GET, &format!("{path}/TOKEN"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["environment_scope"], "*");
    let (status, _) = server
        .admin(Method::GET, "projects/999/variables", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_form_encoded_request_creates_a_variable_as_curl_data_does() {
    // GitLab's documentation uses `curl --data key=... --data masked=true`.
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    let project = server.create_project("group/form", &repo).await;
    let post_form = |body: &'static str| {
        let (server, project) = (&server, &project);
        async move {
            let response = server
                .http
                .post(server.api(&format!("projects/{}/variables", project["id"])))
                .header("PRIVATE-TOKEN", &server.admin)
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::CREATED, "{body}");
            response.json::<Value>().await.unwrap()
        }
    };
    let created = post_form(
        "key=DEPLOY_TOKEN&value=s3cr3t-t0ken&masked=true&protected=true&variable_type=file",
    )
    .await;
    assert_eq!(
        (
            &created["masked"],
            &created["protected"],
            &created["variable_type"]
        ),
        (&json!(true), &json!(true), &json!("file"))
    );

    // Grape reads a Boolean from more words than `true`/`false`, in forms and JSON strings.
    let created = post_form("key=OTHER&value=s3cr3t-v4lue&masked=1&protected=yes&raw=t").await;
    assert_eq!(
        (&created["masked"], &created["protected"], &created["raw"]),
        (&json!(true), &json!(true), &json!(true))
    );
    let (status, updated) = server
        .admin(
            reqwest::Method::PUT,
            &format!("projects/{}/variables/OTHER", project["id"]),
            Some(json!({"protected": "false", "masked": 0})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(
        (&updated["masked"], &updated["protected"]),
        (&json!(false), &json!(false))
    );
}

#[tokio::test]
async fn invalid_variables_are_refused_with_the_reason() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    let project = server.create_project("group/bad", &repo).await;
    let path = format!("projects/{}/variables", project["id"]);
    for (body, expected) in [
        (json!({"value": "x"}), "key is missing"),
        (json!({"key": "A"}), "value is missing"),
        (
            json!({"key": "A-B", "value": "x"}),
            "can contain only letters, digits and '_'",
        ),
        (
            json!({"key": "S", "value": "short", "masked": true}),
            "cannot be masked",
        ),
        (
            json!({"key": "T", "value": "x", "variable_type": "json"}),
            "use `env_var` or `file`",
        ),
        (
            json!({"key": "L", "value": "x".repeat(10_001)}),
            "maximum is 10000",
        ),
    ] {
        let (status, answer) = server.admin(Method::POST, &path, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(answer.to_string().contains(expected), "{answer}");
    }
    let (_, list) = server.admin(Method::GET, &path, None).await;
    assert_eq!(list, json!([]), "nothing was stored");

    let (status, answer) = server
        .admin(
            Method::POST,
            &format!("projects/{}/pipeline", project["id"]),
            Some(json!({"ref": "main", "variables": [{"key": "K", "value": "v", "variable_type": "json"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer.to_string().contains("use `env_var` or `file`"),
        "{answer}"
    );
}

#[tokio::test]
async fn jobs_receive_the_variables_that_apply_to_them() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    repo.git(&["checkout", "-qb", "feature"]);
    repo.git(&["checkout", "-q", "main"]);
    let project = server.create_project("group/jobs", &repo).await;
    let pid = project["id"].as_i64().unwrap();
    let path = format!("projects/{pid}/variables");
    for body in [
        json!({"key": "ENABLE_BUILD", "value": "yes"}),
        json!({"key": "GREETING", "value": "from-project"}),
        json!({"key": "SECRET", "value": "s3cr3t-value", "masked": true}),
        json!({"key": "KEY_FILE", "value": "line1\nline2", "variable_type": "file"}),
        json!({"key": "RAW", "value": "$GREETING", "raw": true}),
        json!({"key": "PROTECTED", "value": "p", "protected": true}),
        json!({"key": "URL", "value": "any"}),
        json!({"key": "URL", "value": "prod-url", "environment_scope": "production"}),
        json!({"key": "URL", "value": "review", "environment_scope": "review/*"}),
        // Rules see a variable scoped to the job's (expanded) environment name.
        json!({"key": "PREVIEW", "value": "on", "environment_scope": "review/m*"}),
        // An environment named by a project variable: rules and payload see its scope.
        json!({"key": "SHIP_TO", "value": "production"}),
        json!({"key": "SHIP_ENABLED", "value": "yes", "environment_scope": "production"}),
    ] {
        let (status, answer) = server.admin(Method::POST, &path, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    let (_, runner) = server.create_runner(json!({})).await;

    // main is the protected default branch; a pipeline variable beats the project's.
    let (status, pipeline) = server
        .admin(
            Method::POST,
            &format!("projects/{pid}/pipeline"),
            Some(json!({"ref": "main", "variables": [{"key": "GREETING", "value": "from-pipeline"}, {"key": "CERT", "value": "pem", "variable_type": "file"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{pipeline}");
    // The variables it was created with, as GitLab lists them.
    let (status, created_with) = server
        .admin(
            Method::GET,
            &format!("projects/{pid}/pipelines/{}/variables", pipeline["id"]),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        created_with,
        json!([{"key": "GREETING", "variable_type": "env_var", "value": "from-pipeline"},
               {"key": "CERT", "variable_type": "file", "value": "pem"}])
    );
    let jobs = server
        .pipeline_jobs(pid, pipeline["id"].as_i64().unwrap())
        .await;
    let mut names: Vec<&str> = jobs.iter().map(|j| j["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["build", "deploy", "preview", "ship"],
        "rules saw the project variables"
    );
    let mut payloads = Vec::new();
    for _ in 0..4 {
        payloads.push(server.take_job(&runner).await.2);
    }
    let build = payloads
        .iter()
        .find(|p| p["job_info"]["name"] == "build")
        .unwrap();
    let deploy = payloads
        .iter()
        .find(|p| p["job_info"]["name"] == "deploy")
        .unwrap();
    assert_eq!(var(build, "GREETING").unwrap()["value"], "from-pipeline");
    let secret = var(build, "SECRET").unwrap();
    assert_eq!(
        (&secret["masked"], &secret["public"]),
        (&json!(true), &json!(false))
    );
    let file = var(build, "KEY_FILE").unwrap();
    assert_eq!(
        (&file["file"], &file["value"]),
        (&json!(true), &json!("line1\nline2"))
    );
    let raw = var(build, "RAW").unwrap();
    assert_eq!(
        (&raw["raw"], &raw["value"]),
        (&json!(true), &json!("$GREETING"))
    );
    assert_eq!(var(build, "PROTECTED").unwrap()["value"], "p");
    // A file-type pipeline variable (API `variable_type: file`).
    let cert = var(build, "CERT").unwrap();
    assert_eq!(
        (&cert["file"], &cert["value"]),
        (&json!(true), &json!("pem"))
    );
    assert_ne!(var(build, "GREETING").unwrap()["file"], true);
    assert_eq!(
        var(build, "URL").unwrap()["value"],
        "any",
        "no environment: scope `*`"
    );
    assert_eq!(var(deploy, "URL").unwrap()["value"], "prod-url");
    let preview = payloads
        .iter()
        .find(|p| p["job_info"]["name"] == "preview")
        .unwrap();
    assert_eq!(var(preview, "URL").unwrap()["value"], "review");
    assert_eq!(var(preview, "PREVIEW").unwrap()["value"], "on");
    assert!(var(build, "PREVIEW").is_none());
    let ship = payloads
        .iter()
        .find(|p| p["job_info"]["name"] == "ship")
        .unwrap();
    assert_eq!(
        var(ship, "CI_ENVIRONMENT_NAME").unwrap()["value"],
        "production"
    );
    assert_eq!(var(ship, "URL").unwrap()["value"], "prod-url");

    // An unprotected branch: no protected variables, at creation nor in jobs.
    let pipeline = server.create_pipeline(pid, "feature").await;
    let (_, none) = server
        .admin(
            Method::GET,
            &format!("projects/{pid}/pipelines/{}/variables", pipeline["id"]),
            None,
        )
        .await;
    assert_eq!(none, json!([]));
    let jobs = server
        .pipeline_jobs(pid, pipeline["id"].as_i64().unwrap())
        .await;
    assert!(
        jobs.iter().all(|j| j["name"] != "preview"),
        "review/feature is outside the scope review/m*"
    );
    let (_, _, payload) = server.take_job(&runner).await;
    assert!(var(&payload, "PROTECTED").is_none(), "{payload}");
    assert_eq!(var(&payload, "GREETING").unwrap()["value"], "from-project");
}

#[tokio::test]
async fn a_hidden_variable_is_never_shown_again_but_reaches_jobs_masked() {
    // GitLab's `masked_and_hidden`: masked, the value absent (`null`) from every answer,
    // chosen at creation only.
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    let project = server.create_project("group/hidden", &repo).await;
    let pid = project["id"].as_i64().unwrap();
    let path = format!("projects/{pid}/variables");
    let (status, created) = server
        .admin(
            Method::POST,
            &path,
            Some(json!({"key": "DEPLOY_TOKEN", "value": "hidden-value-1", "masked_and_hidden": true})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(
        (&created["value"], &created["masked"], &created["hidden"]),
        (&Value::Null, &json!(true), &json!(true))
    );
    let (_, listed) = server.admin(Method::GET, &path, None).await;
    assert_eq!(listed[0]["value"], Value::Null, "{listed}");
    assert!(!listed.to_string().contains("hidden-value-1"), "{listed}");
    let one = format!("{path}/DEPLOY_TOKEN");
    let (_, shown) = server.admin(Method::GET, &one, None).await;
    assert_eq!(
        (&shown["value"], &shown["hidden"]),
        (&Value::Null, &json!(true))
    );

    // The value may change; hidden and masked may not.
    let (status, updated) = server
        .admin(Method::PUT, &one, Some(json!({"value": "hidden-value-2"})))
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(
        (&updated["value"], &updated["hidden"]),
        (&Value::Null, &json!(true))
    );
    let (status, refused) = server
        .admin(Method::PUT, &one, Some(json!({"masked": false})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("a hidden variable stays masked"),
        "{refused}"
    );
    // `masked_and_hidden` is a creation parameter: an update ignores it, as GitLab does.
    let (status, ignored) = server
        .admin(Method::PUT, &one, Some(json!({"masked_and_hidden": false})))
        .await;
    assert_eq!(status, StatusCode::OK, "{ignored}");
    assert_eq!(
        (&ignored["hidden"], &ignored["masked"]),
        (&json!(true), &json!(true))
    );
    // A value that cannot be masked cannot be hidden either.
    let (status, refused) = server
        .admin(
            Method::POST,
            &path,
            Some(json!({"key": "SHORT", "value": "short", "masked_and_hidden": true})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("cannot be masked"),
        "{refused}"
    );

    // The job gets the value, masked.
    let (_, runner) = server.create_runner(json!({})).await;
    let (status, pipeline) = server
        .admin(
            Method::POST,
            &format!("projects/{pid}/pipeline"),
            Some(json!({"ref": "main"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{pipeline}");
    let payload = server.take_job(&runner).await.2;
    let token = var(&payload, "DEPLOY_TOKEN").unwrap();
    assert_eq!(
        (&token["value"], &token["masked"]),
        (&json!("hidden-value-2"), &json!(true))
    );
}
