//! Protected branches and tags over the user API (`/projects/:id/protected_branches`,
//! `…/protected_tags`, GitLab's shapes) and what they change: which pipelines are
//! protected (`CI_COMMIT_REF_PROTECTED`, protected variables).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::{Repo, TestServer, job_variable_value as var};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn protected_branches_and_tags_decide_which_pipelines_are_protected() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "job:\n  script: [echo]\n")]);
    for args in [
        &["branch", "release/1.0"][..],
        &["branch", "feature"][..],
        &["tag", "v1.0"][..],
        &["tag", "nightly"][..],
    ] {
        repo.git(args);
    }
    let project = server.create_project("acme/app", &repo).await;
    let pid = project["id"].as_i64().unwrap();
    let branches = format!("projects/{pid}/protected_branches");
    let tags = format!("projects/{pid}/protected_tags");

    // The default branch starts protected, as on GitLab.
    let (status, list) = server.admin(Method::GET, &branches, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(names(&list), ["main"]);
    let (_, list) = server.admin(Method::GET, &tags, None).await;
    assert_eq!(list, json!([]));

    // `name` in the query string, as GitLab's documentation sends it, or in the body.
    let (status, created) = server
        .admin(Method::POST, &format!("{branches}?name=release%2F*"), None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].clone();
    let level = json!([{"id": id, "access_level": 40, "access_level_description": "Maintainers",
                        "deploy_key_id": null, "user_id": null, "group_id": null}]);
    assert_eq!(
        created,
        json!({"id": id, "name": "release/*", "push_access_levels": level,
               "merge_access_levels": level, "allow_force_push": false,
               "code_owner_approval_required": false})
    );
    let (status, tag) = server
        .admin(Method::POST, &tags, Some(json!({"name": "v*"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{tag}");
    assert_eq!(tag["name"], "v*");
    assert_eq!(tag["create_access_levels"][0]["access_level"], 40);
    let (status, again) = server
        .admin(Method::POST, &format!("{branches}?name=release%2F*"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    assert!(
        again.to_string().contains("is protected already"),
        "{again}"
    );
    let (status, missing) = server.admin(Method::POST, &branches, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{missing}");
    let (status, refused) = server
        .admin(Method::POST, &tags, Some(json!({"name": "refs/tags/v1"})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused.to_string().contains("without `refs/"), "{refused}");
    let (status, shown) = server
        .admin(Method::GET, &format!("{branches}/release%2F*"), None)
        .await;
    assert_eq!(
        (status, &shown["name"]),
        (StatusCode::OK, &json!("release/*"))
    );
    let (status, absent) = server
        .admin(Method::GET, &format!("{branches}/feature"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(absent, json!({"message": "404 Not found"}));

    // A protected variable reaches the jobs of protected pipelines only.
    let (status, _) = server
        .admin(
            Method::POST,
            &format!("projects/{pid}/variables"),
            Some(json!({"key": "DEPLOY_KEY", "value": "k", "protected": true})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, runner) = server.create_runner(json!({})).await;
    let mut seen = Vec::new();
    for r in ["main", "release/1.0", "feature", "v1.0", "nightly"] {
        let (status, pipeline) = server
            .admin(
                Method::POST,
                &format!("projects/{pid}/pipeline"),
                Some(json!({"ref": r})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{r}: {pipeline}");
        let (_, _, payload) = server.take_job(&runner).await;
        seen.push((
            r,
            var(&payload, "CI_COMMIT_REF_PROTECTED")
                .unwrap_or_default()
                .to_owned(),
            var(&payload, "DEPLOY_KEY").is_some(),
        ));
    }
    assert_eq!(
        seen,
        [
            ("main", "true".to_owned(), true),
            ("release/1.0", "true".to_owned(), true),
            ("feature", "false".to_owned(), false),
            ("v1.0", "true".to_owned(), true),
            ("nightly", "false".to_owned(), false),
        ]
    );

    // Unprotected, the default branch's pipelines are not protected.
    let (status, _) = server
        .admin(Method::DELETE, &format!("{branches}/main"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server
        .admin(Method::DELETE, &format!("{branches}/main"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    server.create_pipeline(pid, "main").await;
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(var(&payload, "CI_COMMIT_REF_PROTECTED"), Some("false"));
    assert_eq!(var(&payload, "DEPLOY_KEY"), None);
    let (status, _) = server
        .admin(Method::GET, "projects/999/protected_tags", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
