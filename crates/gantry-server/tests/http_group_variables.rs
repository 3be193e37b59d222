//! Group CI/CD variables over the user API (`/groups/:id/variables`, GitLab's shapes, a
//! group named by its URL-encoded full path) and what the jobs of the projects in the
//! group and its subgroups receive: the project above its groups, the nearest subgroup
//! above its parents, scopes and protection as for project variables.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::{Repo, TestServer, job_variable_value as var};
use reqwest::{Method, StatusCode};
use serde_json::json;

const PIPELINE: &str = r#"
build:
  rules:
    - if: $TEAM == "platform"
  script: [make]
deploy:
  environment: production
  script: [deploy]
"#;

#[tokio::test]
async fn group_variables_are_managed_by_path_and_reach_the_groups_projects() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    let project = server.create_project("acme/platform/widget", &repo).await;
    let pid = project["id"].as_i64().unwrap();
    let root = "groups/acme/variables";
    let sub = "groups/acme%2Fplatform/variables";

    for (path, body) in [
        (root, json!({"key": "TEAM", "value": "everyone"})),
        (sub, json!({"key": "TEAM", "value": "platform"})),
        (
            root,
            json!({"key": "REGISTRY", "value": "registry.acme.test"}),
        ),
        (
            root,
            json!({"key": "URL", "value": "root-prod", "environment_scope": "production"}),
        ),
        (sub, json!({"key": "URL", "value": "sub-any"})),
        (
            root,
            json!({"key": "DEPLOY_TOKEN", "value": "t0ken-for-main", "masked": true, "protected": true}),
        ),
        (sub, json!({"key": "SHADOW", "value": "from-subgroup"})),
    ] {
        let (status, answer) = server.admin(Method::POST, path, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{path}: {answer}");
    }
    let (status, _) = server
        .admin(
            Method::POST,
            &format!("projects/{pid}/variables"),
            Some(json!({"key": "SHADOW", "value": "from-project"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);

    // GitLab's shapes: list, show, update (no rename), the same key taken, delete.
    let (status, list) = server.admin(Method::GET, sub, None).await;
    assert_eq!(status, StatusCode::OK);
    let keys: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["SHADOW", "TEAM", "URL"]);
    let (status, shown) = server
        .admin(Method::GET, &format!("{root}/DEPLOY_TOKEN"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        shown,
        json!({"variable_type": "env_var", "key": "DEPLOY_TOKEN", "value": "t0ken-for-main",
               "protected": true, "masked": true, "hidden": false, "raw": false,
               "environment_scope": "*", "description": null})
    );
    let (status, body) = server
        .admin(
            Method::POST,
            root,
            Some(json!({"key": "TEAM", "value": "twice"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.to_string()
            .contains("(TEAM) has already been taken: the group has a variable `TEAM`"),
        "{body}"
    );
    let (status, updated) = server
        .admin(
            Method::PUT,
            &format!("{root}/REGISTRY"),
            Some(json!({"value": "registry.acme.example", "key": "RENAMED"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(
        (&updated["key"], &updated["value"]),
        (&json!("REGISTRY"), &json!("registry.acme.example"))
    );
    let (status, _) = server
        .admin(
            Method::POST,
            root,
            Some(json!({"key": "GONE", "value": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = server
        .admin(Method::DELETE, &format!("{root}/GONE"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server
        .admin(Method::DELETE, &format!("{root}/GONE"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A group no project is in, and a part of a name, are no groups.
    for missing in ["groups/nobody/variables", "groups/acm/variables"] {
        let (status, body) = server.admin(Method::GET, missing, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
        assert_eq!(body, json!({"message": "404 Group Not Found"}), "{missing}");
    }
    let (status, body) = server
        .admin(
            Method::POST,
            sub,
            Some(json!({"key": "BAD-KEY", "value": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.to_string().contains("can contain only letters"),
        "{body}"
    );

    // The jobs of the project on its protected default branch.
    let (_, runner) = server.create_runner(json!({})).await;
    let pipeline = server.create_pipeline(pid, "main").await;
    let jobs = server
        .pipeline_jobs(pid, pipeline["id"].as_i64().unwrap())
        .await;
    let mut names: Vec<&str> = jobs.iter().map(|j| j["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["build", "deploy"], "rules saw the subgroup's TEAM");
    let mut payloads = Vec::new();
    for _ in 0..2 {
        payloads.push(server.take_job(&runner).await.2);
    }
    let job = |name: &str| {
        payloads
            .iter()
            .find(|p| p["job_info"]["name"] == name)
            .unwrap()
    };
    let build = job("build");
    assert_eq!(var(build, "TEAM"), Some("platform"));
    assert_eq!(var(build, "REGISTRY"), Some("registry.acme.example"));
    assert_eq!(var(build, "SHADOW"), Some("from-project"));
    assert_eq!(var(build, "URL"), Some("sub-any"));
    assert_eq!(var(build, "DEPLOY_TOKEN"), Some("t0ken-for-main"));
    // The subgroup's `*` beats the root group's exact scope: the nearer group wins.
    assert_eq!(var(job("deploy"), "URL"), Some("sub-any"));
}

/// Groups have GitLab's numeric ids: `GET /groups` lists the namespaces of the projects,
/// `GET /groups/:id` takes the id or the path, and the ids work wherever GitLab takes
/// one (group variables, a group runner's `group_id`).
#[tokio::test]
async fn groups_have_ids_that_the_group_apis_take() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    let mut projects = Vec::new();
    for name in ["acme/app", "acme/platform/svc", "solo"] {
        projects.push(server.create_project(name, &repo).await);
    }
    let (status, groups) = server.admin(Method::GET, "groups", None).await;
    assert_eq!(status, StatusCode::OK, "{groups}");
    let paths: Vec<&str> = groups
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["full_path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["acme", "acme/platform", "gantry"]);
    let acme = groups[0]["id"].as_i64().unwrap();
    let platform = &groups[1];
    assert_eq!(platform["parent_id"], acme);
    assert_eq!(platform["name"], "platform");
    let id = platform["id"].as_i64().unwrap();
    let (status, by_id) = server
        .admin(Method::GET, &format!("groups/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{by_id}");
    let (_, by_path) = server
        .admin(Method::GET, "groups/acme%2Fplatform", None)
        .await;
    assert_eq!(by_id, by_path);
    let (_, again) = server.admin(Method::GET, "groups", None).await;
    assert_eq!(again, groups, "ids are kept");
    // A project shows its group as GitLab's `namespace`.
    assert_eq!(projects[1]["namespace"]["id"], id);
    assert_eq!(projects[1]["namespace"]["full_path"], "acme/platform");
    assert_eq!(projects[2]["namespace"]["full_path"], "gantry");
    assert_eq!(projects[2]["namespace"]["kind"], "group");

    // The id where GitLab takes one.
    let (status, created) = server
        .admin(
            Method::POST,
            &format!("groups/{acme}/variables"),
            Some(json!({"key": "REGION", "value": "eu"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (_, listed) = server
        .admin(Method::GET, "groups/acme/variables", None)
        .await;
    assert_eq!(listed[0]["key"], "REGION");
    let (status, runner) = server
        .admin(
            Method::POST,
            "user/runners",
            Some(json!({"runner_type": "group_type", "group_id": id})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{runner}");
    let (_, shown) = server
        .admin(Method::GET, &format!("runners/{}", runner["id"]), None)
        .await;
    assert_eq!(shown["groups"][0]["full_path"], "acme/platform");

    for path in ["groups/99999", "groups/nobody", "groups/99999/variables"] {
        let (status, body) = server.admin(Method::GET, path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
}

/// The groups are GitLab's namespaces too: `GET /namespaces` (filtered by `search`,
/// `top_level_only`, `full_path_search`), `GET /namespaces/:id` by id or path, and
/// `GET /namespaces/:path/exists` with the first free path as a suggestion.
#[tokio::test]
async fn groups_are_the_namespaces_of_the_namespaces_api() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    for name in ["acme/app", "acme/platform/svc", "acme1/x", "solo"] {
        server.create_project(name, &repo).await;
    }
    let (_, groups) = server.admin(Method::GET, "groups", None).await;
    let id_of = |path: &str| {
        groups
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["full_path"] == path)
            .map(|g| g["id"].as_i64().unwrap())
            .unwrap()
    };
    let list = async |query: &str| {
        let (status, body) = server
            .admin(Method::GET, &format!("namespaces{query}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{query}: {body}");
        body.as_array()
            .unwrap()
            .iter()
            .map(|n| n["full_path"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let mut all = list("").await;
    all.sort();
    assert_eq!(all, ["acme", "acme/platform", "acme1", "gantry"]);
    let mut top = list("?top_level_only=true").await;
    top.sort();
    assert_eq!(top, ["acme", "acme1", "gantry"]);
    assert_eq!(list("?search=PLAT").await, ["acme/platform"]);
    assert!(list("?search=acme/plat").await.is_empty());
    assert_eq!(
        list("?search=acme/plat&full_path_search=true").await,
        ["acme/platform"]
    );
    assert_eq!(list("?per_page=1&page=2").await.len(), 1);

    let platform = id_of("acme/platform");
    let (status, shown) = server
        .admin(Method::GET, &format!("namespaces/{platform}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(
        shown,
        json!({
            "id": platform,
            "name": "platform",
            "path": "platform",
            "kind": "group",
            "full_path": "acme/platform",
            "parent_id": id_of("acme"),
            "avatar_url": null,
            "web_url": shown["web_url"],
        })
    );
    assert!(
        shown["web_url"]
            .as_str()
            .unwrap()
            .ends_with("/groups/acme/platform"),
        "{shown}"
    );
    let (_, by_path) = server
        .admin(Method::GET, "namespaces/acme%2Fplatform", None)
        .await;
    assert_eq!(by_path, shown);
    let (status, missing) = server.admin(Method::GET, "namespaces/99999", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(missing["message"], "404 Namespace Not Found");

    let exists = async |query: &str| {
        server
            .admin(Method::GET, &format!("namespaces/{query}"), None)
            .await
            .1
    };
    assert_eq!(
        exists("acme/exists").await,
        json!({"exists": true, "suggests": ["acme2"]})
    );
    assert_eq!(
        exists("nobody/exists").await,
        json!({"exists": false, "suggests": []})
    );
    let acme = id_of("acme");
    assert_eq!(
        exists(&format!("Platform/exists?parent_id={acme}")).await,
        json!({"exists": true, "suggests": ["Platform1"]})
    );
    assert_eq!(
        exists("platform/exists").await,
        json!({"exists": false, "suggests": []}),
        "not a top-level namespace"
    );
}

/// `POST /groups` makes a group that exists without projects (a subgroup with
/// `parent_id`); its name and description are its own; a taken path is refused;
/// `DELETE /groups/:id` removes an empty one and refuses one with projects.
#[tokio::test]
async fn groups_are_made_and_deleted_through_the_api() {
    let server = TestServer::start().await;
    let (status, acme) = server
        .admin(
            Method::POST,
            "groups",
            Some(json!({"name": "Acme Corp", "path": "acme", "description": "All of Acme"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{acme}");
    assert_eq!(acme["full_path"], "acme");
    assert_eq!(acme["name"], "Acme Corp");
    assert_eq!(acme["description"], "All of Acme");
    assert!(acme["parent_id"].is_null(), "{acme}");
    let acme_id = acme["id"].as_i64().unwrap();

    let (status, platform) = server
        .admin(
            Method::POST,
            "groups",
            Some(json!({"name": "Platform", "path": "platform", "parent_id": acme_id})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{platform}");
    assert_eq!(platform["full_path"], "acme/platform");
    assert_eq!(platform["full_name"], "Acme Corp / Platform");
    assert_eq!(platform["parent_id"], acme_id);
    let (_, listed) = server.admin(Method::GET, "groups", None).await;
    let paths: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["full_path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["acme", "acme/platform"], "{listed}");
    // Group variables work on a group without projects.
    let (status, variable) = server
        .admin(
            Method::POST,
            "groups/acme%2Fplatform/variables",
            Some(json!({"key": "REGION", "value": "eu"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{variable}");

    for (body, want) in [
        (
            json!({"name": "Again", "path": "acme"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "Bad", "path": "a b"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "", "path": "empty-name"}),
            StatusCode::BAD_REQUEST,
        ),
        (json!({"path": "no-name"}), StatusCode::BAD_REQUEST),
        (
            json!({"name": "Orphan", "path": "orphan", "parent_id": 987_654}),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let (status, answer) = server
            .admin(Method::POST, "groups", Some(body.clone()))
            .await;
        assert_eq!(status, want, "{body} → {answer}");
    }

    // A project in the group: the group cannot be deleted while it is there.
    let repo = Repo::new(&[(".gitlab-ci.yml", "job:\n  script: [true]\n")]);
    server.create_project("acme/platform/app", &repo).await;
    let (status, refused) = server
        .admin(Method::DELETE, &format!("groups/{acme_id}"), None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let (status, _) = server.admin(Method::GET, "groups/acme", None).await;
    assert_eq!(status, StatusCode::OK);

    // An empty group goes.
    let (status, made) = server
        .admin(
            Method::POST,
            "groups",
            Some(json!({"name": "Tmp", "path": "tmp"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let (status, _) = server
        .admin(Method::DELETE, &format!("groups/{}", made["id"]), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _) = server.admin(Method::GET, "groups/tmp", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// `POST /projects` creates a project in a group as GitLab does: `namespace_id` (the
/// group's id or full path) and `path` (else `name`); the project's `name` is its own.
/// An unknown namespace, a path with `/` under a namespace, or neither name nor path is
/// `400` naming the fix.
#[tokio::test]
async fn a_project_is_created_in_a_namespace_by_id() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    let (status, tools) = server
        .admin(
            Method::POST,
            "groups",
            Some(json!({"name": "Tools", "path": "tools"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{tools}");
    let create = async |body: serde_json::Value| {
        let mut body = body;
        body["import_url"] = json!(repo.path());
        server.admin(Method::POST, "projects", Some(body)).await
    };
    let (status, cli) =
        create(json!({"name": "CLI", "path": "cli", "namespace_id": tools["id"]})).await;
    assert_eq!(status, StatusCode::CREATED, "{cli}");
    assert_eq!(
        (&cli["name"], &cli["path"], &cli["path_with_namespace"]),
        (&json!("cli"), &json!("cli"), &json!("tools/cli"))
    );
    assert_eq!(cli["namespace"]["id"], tools["id"]);
    // GitLab's names: the group's as made, then the project's own.
    assert_eq!(cli["namespace"]["name"], "Tools");
    assert_eq!(cli["name_with_namespace"], "Tools / cli");
    let (status, by_path) = create(json!({"name": "lint", "namespace_id": "tools"})).await;
    assert_eq!(status, StatusCode::CREATED, "{by_path}");
    assert_eq!(by_path["path_with_namespace"], "tools/lint");
    let (status, listed) = server
        .admin(Method::GET, "projects/tools%2Fcli", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["id"], cli["id"]);

    for (body, needle) in [
        (
            json!({"name": "x", "namespace_id": 99999}),
            "namespace_id `99999` names no namespace",
        ),
        (
            json!({"path": "a/b", "namespace_id": tools["id"]}),
            "path `a/b` contains `/`",
        ),
        (json!({"import_url": "unused"}), "name, path are missing"),
    ] {
        let (status, body) = create(body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.to_string().contains(needle), "{needle}: {body}");
    }
}
