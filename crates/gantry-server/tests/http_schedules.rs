//! Pipeline schedules over HTTP, GitLab's API shapes: create (JSON and form), list with
//! `scope`, show with variables and the last pipeline, change, play, variables, delete,
//! and the refusals (`400` naming the field, `401` without the admin token, `404`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::*;
use reqwest::{Method, StatusCode};
use serde_json::json;

const CI: &str = r#"
nightly:
  script: [make nightly]
  rules:
    - if: $CI_PIPELINE_SOURCE == "schedule"
"#;

#[tokio::test]
async fn schedules_are_made_shown_played_and_deleted_as_on_gitlab() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let base = format!("projects/{project}/pipeline_schedules");

    let (status, created) = server
        .admin(
            Method::POST,
            &base,
            Some(json!({"description": "nightly", "ref": "main", "cron": "0 1 * * *", "cron_timezone": "Europe/Berlin"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["ref"], "refs/heads/main");
    assert_eq!(created["cron_timezone"], "Europe/Berlin");
    assert_eq!(created["active"], true);
    assert_eq!(created["owner"]["username"], "root");
    // 01:00 in Berlin is midnight UTC in winter, 23:00 the day before in summer.
    let next = created["next_run_at"].as_str().unwrap();
    assert!(
        next.ends_with("T00:00:00.000Z") || next.ends_with("T23:00:00.000Z"),
        "{next}"
    );
    let id = created["id"].as_i64().unwrap();

    // A form, as `curl --form` sends it: inactive.
    let form = server
        .http
        .post(server.api(&base))
        .header("PRIVATE-TOKEN", &server.admin)
        .form(&[
            ("description", "weekly"),
            ("ref", "main"),
            ("cron", "@weekly"),
            ("active", "false"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), StatusCode::CREATED);
    let weekly: serde_json::Value = form.json().await.unwrap();
    assert_eq!(weekly["next_run_at"], serde_json::Value::Null);

    let (_, active) = server
        .admin(Method::GET, &format!("{base}?scope=active"), None)
        .await;
    assert_eq!(active.as_array().unwrap().len(), 1);
    let (_, inactive) = server
        .admin(Method::GET, &format!("{base}?scope=inactive"), None)
        .await;
    assert_eq!(inactive[0]["description"], "weekly");
    let (status, _) = server
        .admin(Method::GET, &format!("{base}?scope=sometimes"), None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, v) = server
        .admin(
            Method::POST,
            &format!("{base}/{id}/variables"),
            Some(json!({"key": "TARGET", "value": "staging"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(
        v,
        json!({"key": "TARGET", "value": "staging", "variable_type": "env_var"})
    );
    let (status, v) = server
        .admin(
            Method::PUT,
            &format!("{base}/{id}/variables/TARGET"),
            Some(json!({"value": "production"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");

    // python-gitlab's `take_ownership`: the schedule, owned by the one user already.
    let (status, taken) = server
        .admin(Method::POST, &format!("{base}/{id}/take_ownership"), None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{taken}");
    assert_eq!(taken["id"], id, "{taken}");
    assert!(taken["owner"]["username"].is_string(), "{taken}");
    let (status, _) = server
        .admin(Method::POST, &format!("{base}/999999/take_ownership"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, played) = server
        .admin(Method::POST, &format!("{base}/{id}/play"), None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{played}");
    assert_eq!(played["message"], "201 Created");
    let pipeline = played["pipeline_id"].as_i64().unwrap();

    let (_, shown) = server
        .admin(Method::GET, &format!("{base}/{id}"), None)
        .await;
    assert_eq!(shown["last_pipeline"]["id"], pipeline);
    assert_eq!(shown["last_pipeline"]["ref"], "main");
    assert_eq!(shown["variables"][0]["value"], "production");
    let (_, ran) = server
        .admin(Method::GET, &format!("{base}/{id}/pipelines"), None)
        .await;
    assert_eq!(ran[0]["id"], pipeline);
    assert_eq!(ran[0]["source"], "schedule");

    let (status, changed) = server
        .admin(
            Method::PUT,
            &format!("{base}/{id}"),
            Some(json!({"cron": "*/10 * * * *", "cron_timezone": "UTC"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["cron"], "*/10 * * * *");
    assert_eq!(changed["description"], "nightly");

    let (status, removed) = server
        .admin(
            Method::DELETE,
            &format!("{base}/{id}/variables/TARGET"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(removed["key"], "TARGET");
    let (status, _) = server
        .admin(Method::DELETE, &format!("{base}/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server
        .admin(Method::GET, &format!("{base}/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bad_schedules_are_refused_with_the_field_and_the_fix() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let base = format!("projects/{project}/pipeline_schedules");
    for (body, expected) in [
        (
            json!({"description": "d", "ref": "main", "cron": "61 * * * *"}),
            "cron: cron `61 * * * *` is invalid syntax: minute `61`: 61 is outside 0-59",
        ),
        (
            json!({"description": "d", "ref": "main", "cron": "* * * * *", "cron_timezone": "Nowhere"}),
            "cron_timezone: `Nowhere` is no time zone",
        ),
        (
            json!({"description": "d", "ref": "gone", "cron": "* * * * *"}),
            "ref: `gone` is no branch or tag of app",
        ),
        (
            json!({"ref": "main", "cron": "* * * * *"}),
            "description is missing",
        ),
    ] {
        let (status, answer) = server.admin(Method::POST, &base, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{message}");
    }
    let anonymous = server.http.get(server.api(&base)).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let (status, _) = server
        .admin(
            Method::POST,
            "projects/999/pipeline_schedules",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// A Rails time zone name, as GitLab's schedule form sends some, is read as its IANA zone
/// and kept as given.
#[tokio::test]
async fn a_rails_time_zone_name_is_taken_as_gitlab_takes_it() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (status, created) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/pipeline_schedules"),
            Some(json!({"description": "standup", "ref": "main", "cron": "0 9 * * *", "cron_timezone": "Pacific Time (US & Canada)"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["cron_timezone"], "Pacific Time (US & Canada)");
    // 09:00 in Los Angeles: 16:00 or 17:00 UTC.
    let next = created["next_run_at"].as_str().unwrap();
    assert!(
        next.ends_with("T17:00:00.000Z") || next.ends_with("T16:00:00.000Z"),
        "{next}"
    );
}
