//! The web UI over HTTP: the API's `web_url`s open pages once signed in with the admin
//! token (a server-side session in a cookie), pages show projects, pipelines by stage,
//! jobs and their logs (`trace.json`: escaped lines, colours as classes), buttons cancel
//! and retry, and nothing is shown or done without a session, or posted without its CSRF
//! token; git clones and the API keep their own answers. (`crates/gantry/tests/browser.rs`
//! drives the same pages in Chromium.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::*;
use reqwest::{Method, StatusCode, header};
use serde_json::json;

const CI: &str = "
stages: [build, test]
compile:
  stage: build
  script: [make]
unit:
  stage: test
  script: [make test]
";

/// A client that keeps no cookies and follows no redirects: each step is visible.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn sign_in(server: &TestServer, http: &reqwest::Client) -> String {
    let answer = http
        .post(format!("{}/-/login", server.url))
        .form(&[("token", server.admin.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(answer.headers()[header::LOCATION], "/");
    let cookie = answer.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    // The cookie holds a session id, never the admin token.
    assert!(!cookie.contains(&server.admin), "{cookie}");
    cookie.split(';').next().unwrap().to_owned()
}

/// The CSRF token the pages of the session `cookie` carry in their forms.
async fn csrf(server: &TestServer, http: &reqwest::Client, cookie: &str) -> String {
    let (_, page) = get(http, &format!("{}/", server.url), cookie).await;
    let at = page
        .find("name=\"authenticity_token\" value=\"")
        .unwrap_or_else(|| panic!("no CSRF token on {page}"));
    let rest = &page[at + "name=\"authenticity_token\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// A form post of the session `cookie` with its CSRF token and `fields`.
async fn post(
    http: &reqwest::Client,
    url: &str,
    cookie: &str,
    token: &str,
    fields: &[(&str, &str)],
) -> reqwest::Response {
    let mut form = vec![("authenticity_token", token)];
    form.extend_from_slice(fields);
    http.post(url)
        .header(header::COOKIE, cookie)
        .form(&form)
        .send()
        .await
        .unwrap()
}

async fn get(http: &reqwest::Client, url: &str, cookie: &str) -> (StatusCode, String) {
    let answer = http
        .get(url)
        .header(header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    (status, answer.text().await.unwrap())
}

#[tokio::test]
async fn pages_show_projects_pipelines_jobs_and_logs_once_signed_in() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("acme/app", &repo).await;
    let project_id = project["id"].as_i64().unwrap();
    let pipeline = server.create_pipeline(project_id, "main").await;
    let pipeline_id = pipeline["id"].as_i64().unwrap();
    let http = browser();

    // Without the token: the sign-in page, and nothing else.
    let web_url = pipeline["web_url"].as_str().unwrap().to_owned();
    let (status, body) = get(&http, &web_url, "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("name=\"token\""), "{body}");
    assert!(!body.contains("compile"));
    let wrong = http
        .post(format!("{}/-/login", server.url))
        .form(&[("token", "glpat-wrong")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.text().await.unwrap().contains("not the admin token"));

    let cookie = sign_in(&server, &http).await;
    let (status, body) = get(&http, &format!("{}/", server.url), &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("href=\"/acme/app\""), "{body}");
    assert!(body.contains(&format!("#{pipeline_id}")), "{body}");
    let (status, body) = get(&http, project["web_url"].as_str().unwrap(), &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains(&format!("/acme/app/-/pipelines/{pipeline_id}")),
        "{body}"
    );

    // The pipeline's page: stages in order, its jobs, and it reloads while it runs.
    let (status, body) = get(&http, &web_url, &cookie).await;
    assert_eq!(status, StatusCode::OK);
    let (build, test) = (body.find(">build<").unwrap(), body.find(">test<").unwrap());
    assert!(build < test, "{body}");
    assert!(body.contains("http-equiv=\"refresh\""));
    assert!(
        body.contains(">compile</a>") && body.contains(">unit</a>"),
        "{body}"
    );
    // Why the pending job waits, under it and on its own page (the job API's
    // `pending_reason`); the created one does not wait.
    let stuck = "<p class=\"why\">This job is stuck because the project doesn&#39;t have any runners online assigned to it.</p>";
    assert_eq!(body.matches(stuck).count(), 1, "{body}");
    let compile = server.pipeline_jobs(project_id, pipeline_id).await[0].clone();
    assert_eq!(compile["name"], "compile");
    let (_, page) = get(&http, compile["web_url"].as_str().unwrap(), &cookie).await;
    assert!(page.contains(stuck), "{page}");

    // A job's log: escaped, without ANSI escapes or section markers.
    let (_, runner_token) = server.create_runner(json!({})).await;
    let (job_id, job_token, _) = server.take_job(&runner_token).await;
    let trace = "\x1b[0Ksection_start:1700000000:step_script\r\x1b[0K\x1b[32;1m$ make\x1b[0;m\n<script>alert(1)</script>\n";
    assert_eq!(
        server.patch_log(job_id, &job_token, 0, trace).await,
        StatusCode::ACCEPTED
    );
    let job = server.job(project_id, job_id).await;
    let job_url = job["web_url"].as_str().unwrap().to_owned();
    let (status, body) = get(&http, &job_url, &cookie).await;
    assert_eq!(status, StatusCode::OK);
    // The page loads its log through its script, from this server only.
    assert!(
        body.contains("<script src=\"/-/ui/job.js\" defer></script>")
            && body.contains(&format!(
                "data-trace=\"/acme/app/-/jobs/{job_id}/trace.json\""
            )),
        "{body}"
    );
    assert!(!body.contains("<script>"));
    let (status, piece) = get(&http, &format!("{job_url}/trace.json"), &cookie).await;
    assert_eq!(status, StatusCode::OK);
    let piece: serde_json::Value = serde_json::from_str(&piece).unwrap();
    assert_eq!(
        piece["lines"],
        json!([
            {"n": 1, "h": "<span class=\"term-fg-green term-bold\">$ make</span>",
             "m": [{"s": "start", "name": "step_script", "ts": 1_700_000_000}], "v": true},
            {"n": 2, "h": "&lt;script&gt;alert(1)&lt;/script&gt;", "v": true},
        ]),
        "{piece}"
    );
    assert_eq!(piece["offset"], trace.len());
    assert_eq!(piece["complete"], false);
    // What comes later continues at the offset, with the line number and the style.
    let more = "\x1b[31mred\nstill red\x1b[0m\npartial";
    assert_eq!(
        server
            .patch_log(job_id, &job_token, trace.len(), more)
            .await,
        StatusCode::ACCEPTED
    );
    let (_, piece) = get(
        &http,
        &format!("{job_url}/trace.json?offset={}&line=2&state=", trace.len()),
        &cookie,
    )
    .await;
    let piece: serde_json::Value = serde_json::from_str(&piece).unwrap();
    assert_eq!(
        piece["lines"],
        json!([
            {"n": 3, "h": "<span class=\"term-fg-red\">red</span>", "v": true},
            {"n": 4, "h": "<span class=\"term-fg-red\">still red</span>", "v": true},
        ]),
        "a running job's unfinished line waits for its end: {piece}"
    );
    assert_eq!(piece["line"], 4);
    let (_, raw) = get(&http, &format!("{job_url}/raw"), &cookie).await;
    assert!(raw.ends_with("still red\x1b[0m\npartial"), "{raw}");

    let token = csrf(&server, &http, &cookie).await;
    // Cancel from the page: the pipeline is canceled, the browser comes back to it.
    let canceled = post(&http, &format!("{web_url}/cancel"), &cookie, &token, &[]).await;
    assert_eq!(
        canceled.status(),
        StatusCode::SEE_OTHER,
        "{token} {:?}",
        canceled.text().await
    );
    let (_, p) = server
        .admin(
            Method::GET,
            &format!("projects/{project_id}/pipelines/{pipeline_id}"),
            None,
        )
        .await;
    assert!(
        matches!(p["status"].as_str(), Some("canceled" | "canceling")),
        "{p}"
    );
    // And retried: the failed and canceled jobs get new attempts.
    let retried = post(&http, &format!("{web_url}/retry"), &cookie, &token, &[]).await;
    assert_eq!(retried.status(), StatusCode::SEE_OTHER);

    // A button the coordinator refuses (the job is no manual job): a page saying why.
    let refused = post(&http, &format!("{job_url}/play"), &cookie, &token, &[]).await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let page = refused.text().await.unwrap();
    assert!(
        page.contains("<h1>Not done</h1>") && page.contains("Back</a>"),
        "{page}"
    );

    // A post without the cookie does nothing.
    let forged = http.post(format!("{web_url}/cancel")).send().await.unwrap();
    assert_eq!(forged.status(), StatusCode::UNAUTHORIZED);
    // Another project's pipeline number under this project: not found.
    let (status, _) = get(
        &http,
        &format!("{}/acme/other/-/pipelines/{pipeline_id}", server.url),
        &cookie,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // `GET /-/logout` (a link, an image) signs nobody out; the button (a post with the
    // CSRF token) ends the session, and its cookie is dead.
    let (status, page) = get(&http, &format!("{}/-/logout", server.url), &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("action=\"/-/logout\""), "{page}");
    let (status, _) = get(&http, &web_url, &cookie).await;
    assert_eq!(status, StatusCode::OK);
    let out = post(
        &http,
        &format!("{}/-/logout", server.url),
        &cookie,
        &token,
        &[],
    )
    .await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(
        out.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let (status, _) = get(&http, &web_url, &cookie).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// Every post of a session needs its CSRF token and a same-site `Origin`; the pages'
/// policy allows scripts only from the server and no framing; the pages and their
/// script stay small.
#[tokio::test]
async fn forms_need_their_csrf_token_and_origin() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("acme/app", &repo).await;
    let pipeline = server
        .create_pipeline(project["id"].as_i64().unwrap(), "main")
        .await;
    let web_url = pipeline["web_url"].as_str().unwrap().to_owned();
    let http = browser();
    let cookie = sign_in(&server, &http).await;
    let token = csrf(&server, &http, &cookie).await;
    let status_of = async || {
        let (_, p) = server
            .admin(
                Method::GET,
                &format!("projects/{}/pipelines/{}", project["id"], pipeline["id"]),
                None,
            )
            .await;
        p["status"].as_str().unwrap().to_owned()
    };
    let cancel = format!("{web_url}/cancel");
    let before = status_of().await;

    let missing = post(&http, &cancel, &cookie, "", &[]).await;
    assert_eq!(missing.status(), StatusCode::FORBIDDEN);
    assert!(missing.text().await.unwrap().contains("CSRF token"));
    let wrong = post(&http, &cancel, &cookie, &"0".repeat(64), &[]).await;
    assert_eq!(wrong.status(), StatusCode::FORBIDDEN);
    let cross_site = http
        .post(&cancel)
        .header(header::COOKIE, &cookie)
        .header(header::ORIGIN, "https://evil.example")
        .form(&[("authenticity_token", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(cross_site.status(), StatusCode::FORBIDDEN);
    assert_eq!(status_of().await, before, "nothing was canceled");
    let login_elsewhere = http
        .post(format!("{}/-/login", server.url))
        .header(header::ORIGIN, "https://evil.example")
        .form(&[("token", server.admin.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(login_elsewhere.status(), StatusCode::FORBIDDEN);

    let same_site = http
        .post(&cancel)
        .header(header::COOKIE, &cookie)
        .header(header::ORIGIN, &server.url)
        .form(&[("authenticity_token", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(same_site.status(), StatusCode::SEE_OTHER);
    assert!(matches!(
        status_of().await.as_str(),
        "canceled" | "canceling"
    ));
    // The admin token in a header needs no CSRF token (no site can make a browser send it).
    let with_header = http
        .post(format!("{web_url}/retry"))
        .header("PRIVATE-TOKEN", &server.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(with_header.status(), StatusCode::SEE_OTHER);

    // The policy, and the sizes.
    let page = http
        .get(&web_url)
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    let csp = page.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'")
            && csp.contains("frame-ancestors 'none'")
            && !csp.contains("unsafe"),
        "{csp}"
    );
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert!(page.text().await.unwrap().len() < 100 * 1024);
    for asset in ["/-/ui/job.js", "/-/ui/app.css"] {
        let (status, body) = get(&http, &format!("{}{asset}", server.url), "").await;
        assert_eq!(status, StatusCode::OK, "{asset}");
        assert!(body.len() < 100 * 1024, "{asset} is {} bytes", body.len());
    }
}

/// A 10 MB log: the job page and its first `trace.json` (the tail, with the right line
/// numbers) answer in well under a second; the earlier part comes on demand.
#[tokio::test]
async fn a_ten_megabyte_log_opens_fast() {
    let server = TestServer::start_with(Options {
        trace_limit: 20 * 1024 * 1024,
        ..Options::default()
    })
    .await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project_id = server.create_project("acme/app", &repo).await["id"]
        .as_i64()
        .unwrap();
    server.create_pipeline(project_id, "main").await;
    let (_, runner_token) = server.create_runner(json!({})).await;
    let (job_id, job_token, _) = server.take_job(&runner_token).await;
    let line = "\x1b[32mok\x1b[0m the quick brown fox jumps over the lazy dog 0123456789\n";
    let lines_per_mib = 1024 * 1024 / line.len();
    let chunk = line.repeat(lines_per_mib);
    let mut offset = 0usize;
    for _ in 0..10 {
        assert_eq!(
            server.patch_log(job_id, &job_token, offset, &chunk).await,
            StatusCode::ACCEPTED
        );
        offset += chunk.len();
    }
    let total_lines = 10 * lines_per_mib as u64;
    let http = browser();
    let cookie = sign_in(&server, &http).await;
    let job = server.job(project_id, job_id).await;
    let job_url = job["web_url"].as_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    let (status, page) = get(&http, &job_url, &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.len() < 100 * 1024);
    let (_, tail) = get(&http, &format!("{job_url}/trace.json"), &cookie).await;
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(1), "took {took:?}");
    assert!(tail.len() < 2 * 1024 * 1024, "{} bytes", tail.len());
    let tail: serde_json::Value = serde_json::from_str(&tail).unwrap();
    let lines = tail["lines"].as_array().unwrap();
    assert_eq!(lines.last().unwrap()["n"], total_lines);
    assert_eq!(tail["offset"], offset);
    let start = tail["start"].as_u64().unwrap();
    assert!(start > 9 * 1024 * 1024, "only the tail: from {start}");
    assert_eq!(
        lines[0]["n"].as_u64().unwrap(),
        start / line.len() as u64 + 1
    );
    // On demand: from an earlier offset, the server finds the next line and its number.
    let (_, earlier) = get(
        &http,
        &format!("{job_url}/trace.json?offset={}", line.len() * 10 + 5),
        &cookie,
    )
    .await;
    let earlier: serde_json::Value = serde_json::from_str(&earlier).unwrap();
    assert_eq!(earlier["start"], line.len() * 11);
    assert_eq!(earlier["lines"][0]["n"], 12);
}

#[tokio::test]
async fn the_api_and_git_keep_their_answers_beside_the_pages() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    server.create_project("app", &repo).await;
    let http = browser();
    // An unknown API route is still the API's JSON 404.
    let api = http.get(server.api("no/such/route")).send().await.unwrap();
    assert_eq!(api.status(), StatusCode::NOT_FOUND);
    assert!(
        api.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .contains("json")
    );
    // Git's clone address is git's: a challenge for credentials, not a page.
    let git = http
        .get(format!(
            "{}/gantry/app.git/info/refs?service=git-upload-pack",
            server.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(git.status(), StatusCode::UNAUTHORIZED);
    assert!(git.headers().contains_key(header::WWW_AUTHENTICATE));
}

#[tokio::test]
async fn the_run_pipeline_form_starts_a_web_pipeline_with_variables() {
    let server = TestServer::start().await;
    let ci =
        "deploy:\n  rules:\n    - if: $CI_PIPELINE_SOURCE == \"web\"\n  script: [echo $TARGET]\n";
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let http = browser();
    let cookie = sign_in(&server, &http).await;
    let token = csrf(&server, &http, &cookie).await;
    let form_url = format!("{}/gantry/app/-/pipelines/new", server.url);
    let (status, body) = get(&http, &form_url, &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("name=\"ref\" value=\"main\""), "{body}");
    let (_, list) = get(&http, &format!("{}/gantry/app", server.url), &cookie).await;
    assert!(
        list.contains("href=\"/gantry/app/-/pipelines/new\""),
        "{list}"
    );

    // A line that is no assignment: the form again, as entered, saying which line.
    let refused = post(
        &http,
        &form_url,
        &cookie,
        &token,
        &[("ref", "main"), ("variables", "TARGET=staging\n<oops>")],
    )
    .await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let body = refused.text().await.unwrap();
    assert!(
        body.contains("variables, line 2: `&lt;oops&gt;` is not KEY=value"),
        "{body}"
    );
    assert!(
        body.contains("TARGET=staging\n&lt;oops&gt;</textarea>"),
        "{body}"
    );
    // A ref the repository lacks: GitLab's message on the form.
    let missing = post(
        &http,
        &form_url,
        &cookie,
        &token,
        &[("ref", "nope"), ("variables", "")],
    )
    .await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert!(
        missing
            .text()
            .await
            .unwrap()
            .contains("Reference not found")
    );

    let created = post(
        &http,
        &form_url,
        &cookie,
        &token,
        &[("ref", "main"), ("variables", "TARGET=staging\r\n")],
    )
    .await;
    assert_eq!(created.status(), StatusCode::SEE_OTHER);
    let location = created.headers()[header::LOCATION]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        location.starts_with("/gantry/app/-/pipelines/"),
        "{location}"
    );
    let (_, pipelines) = server
        .admin(Method::GET, &format!("projects/{project}/pipelines"), None)
        .await;
    assert_eq!(pipelines[0]["source"], "web");
    let (_, runner) = server.create_runner(json!({})).await;
    let (_, _, payload) = server.take_job(&runner).await;
    let target = payload["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["key"] == "TARGET")
        .map(|v| v["value"].clone());
    assert_eq!(target, Some(json!("staging")));
}

/// `/-/runners`: every runner with its status and tags, and Pause / Resume, which the
/// runner's next job request obeys.
#[tokio::test]
async fn the_runners_page_pauses_and_resumes_runners() {
    let server = TestServer::start().await;
    let http = browser();
    let (id, runner_token) = server
        .create_runner(json!({"description": "<b>box</b>", "tag_list": ["docker"]}))
        .await;
    let runners = format!("{}/-/runners", server.url);
    let (status, _) = get(&http, &runners, "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let cookie = sign_in(&server, &http).await;
    let (status, page) = get(&http, &runners, &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("&lt;b&gt;box&lt;/b&gt;")
            && page.contains("never_contacted")
            && page.contains("docker"),
        "{page}"
    );
    assert!(page.contains(&format!("/-/runners/{id}/pause")), "{page}");
    assert!(
        page.contains("<td class=\"processes\"><span title=\"\">0</span></td>"),
        "{page}"
    );
    // A process of the runner verifies its token: one process, its id and version.
    let verified = server
        .http
        .post(server.api("runners/verify"))
        .json(&json!({"token": runner_token, "system_id": "s_0123456789ab", "info": {"version": "18.6.1"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(verified.status(), StatusCode::OK);
    let (_, page) = get(&http, &runners, &cookie).await;
    assert!(
        page.contains(
            "<td class=\"processes\"><span title=\"s_0123456789ab (18.6.1)\">1</span></td>"
        ),
        "{page}"
    );

    let token = csrf(&server, &http, &cookie).await;
    let act = async |action: &str, cookie: &str| {
        post(
            &http,
            &format!("{runners}/{id}/{action}"),
            cookie,
            &token,
            &[],
        )
        .await
    };
    assert_eq!(act("pause", "").await.status(), StatusCode::UNAUTHORIZED);
    let paused = act("pause", &cookie).await;
    assert_eq!(paused.status(), StatusCode::SEE_OTHER);
    assert_eq!(paused.headers()[header::LOCATION], "/-/runners");
    let (_, shown) = server
        .admin(Method::GET, &format!("runners/{id}"), None)
        .await;
    assert_eq!(shown["paused"], true, "{shown}");
    let (_, page) = get(&http, &runners, &cookie).await;
    assert!(
        page.contains("(paused)") && page.contains(&format!("/-/runners/{id}/resume")),
        "{page}"
    );
    assert_eq!(act("resume", &cookie).await.status(), StatusCode::SEE_OTHER);
    let (_, shown) = server
        .admin(Method::GET, &format!("runners/{id}"), None)
        .await;
    assert_eq!(shown["paused"], false, "{shown}");
    // No such runner: a page saying so.
    let missing = post(
        &http,
        &format!("{runners}/9999/pause"),
        &cookie,
        &token,
        &[],
    )
    .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

/// `/{project}/-/environments`: each environment with its state, URL and last deployment,
/// and Stop, which plays its stop job.
#[tokio::test]
async fn the_environments_page_shows_deployments_and_stops_environments() {
    let server = TestServer::start().await;
    let http = browser();
    let ci = r#"
deploy:
  script: [deploy]
  environment:
    name: review/$CI_COMMIT_REF_SLUG
    url: https://<i>$CI_COMMIT_REF_SLUG</i>.example.com
    on_stop: teardown
teardown:
  script: [teardown]
  when: manual
  environment:
    name: review/$CI_COMMIT_REF_SLUG
    action: stop
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let project = server.create_project("gantry/app", &repo).await;
    let project_id = project["id"].as_i64().unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    server.create_pipeline(project_id, "main").await;
    let (id, token, _) = server.take_job(&runner).await;
    server.end_job(id, &token, "success").await;

    let page_url = format!("{}/gantry/app/-/environments", server.url);
    let (status, _) = get(&http, &page_url, "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let cookie = sign_in(&server, &http).await;
    let (_, list) = get(&http, &format!("{}/gantry/app", server.url), &cookie).await;
    assert!(list.contains("/gantry/app/-/environments"), "{list}");
    let (status, page) = get(&http, &page_url, &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("review/main")
            && page.contains("available")
            && page.contains("development")
            && page.contains("https://&lt;i&gt;main&lt;/i&gt;.example.com")
            && page.contains(&format!("/gantry/app/-/jobs/{id}")),
        "{page}"
    );
    let (_, envs) = server
        .admin(
            Method::GET,
            &format!("projects/{project_id}/environments"),
            None,
        )
        .await;
    let env_id = envs[0]["id"].as_i64().unwrap();
    let stop = format!("{page_url}/{env_id}/stop");
    assert!(
        page.contains(&format!("/gantry/app/-/environments/{env_id}/stop")),
        "{page}"
    );
    let token = csrf(&server, &http, &cookie).await;
    let answer = post(&http, &stop, &cookie, &token, &[]).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        answer.headers()[header::LOCATION],
        "/gantry/app/-/environments"
    );
    let (_, page) = get(&http, &page_url, &cookie).await;
    assert!(
        page.contains("stopping") && !page.contains("/stop\""),
        "{page}"
    );
    // Stopping one that is not available says why.
    let again = post(&http, &stop, &cookie, &token, &[]).await;
    assert_eq!(again.status(), StatusCode::BAD_REQUEST);
}

/// A runner's `resources` reports land in the job API (an extra object on GitLab's job
/// shape, replaced by each report) and the job page; the pipeline's timeline page draws
/// each job's wait, run and log sections as SVG bars with its CPU and memory beside them,
/// without any script.
#[tokio::test]
async fn resource_reports_show_in_the_job_api_and_the_timeline_page() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("acme/app", &repo).await;
    let project_id = project["id"].as_i64().unwrap();
    let pipeline = server.create_pipeline(project_id, "main").await;
    let pipeline_id = pipeline["id"].as_i64().unwrap();
    let (_, runner_token) = server.create_runner(json!({})).await;
    let (job_id, job_token, _) = server.take_job(&runner_token).await;
    let update = |state: &str, cpu: f64, peak: u64| {
        json!({
            "token": job_token, "state": state,
            "resources": {"cpu_user_seconds": cpu, "cpu_system_seconds": 0.25,
                          "peak_memory_bytes": peak, "read_bytes": 4096, "written_bytes": 8192}
        })
    };
    let put = |body: serde_json::Value| {
        server
            .http
            .put(server.api(&format!("jobs/{job_id}")))
            .header("JOB-TOKEN", &job_token)
            .json(&body)
            .send()
    };
    // Before any report: no `resources` at all.
    assert!(
        server
            .job(project_id, job_id)
            .await
            .get("resources")
            .is_none()
    );
    assert_eq!(
        put(update("running", 0.5, 1 << 20)).await.unwrap().status(),
        200
    );
    let job = server.job(project_id, job_id).await;
    assert_eq!(job["resources"]["cpu_user_seconds"], 0.5, "{job}");
    assert_eq!(job["resources"]["peak_memory_bytes"], 1 << 20);
    let trace = "\x1b[0Ksection_start:1700000000:prepare_executor\r\x1b[0Kprepare\n\
                 \x1b[0Ksection_end:1700000001:prepare_executor\r\x1b[0K\n\
                 \x1b[0Ksection_start:1700000001:step_script\r\x1b[0K$ make\n";
    assert_eq!(
        server.patch_log(job_id, &job_token, 0, trace).await,
        StatusCode::ACCEPTED
    );
    // A later report replaces the first.
    assert_eq!(
        put(update("running", 1.75, 200 << 20))
            .await
            .unwrap()
            .status(),
        200
    );
    let job = server.job(project_id, job_id).await;
    assert_eq!(
        (
            &job["resources"]["cpu_user_seconds"],
            &job["resources"]["peak_memory_bytes"],
            &job["resources"]["written_bytes"]
        ),
        (&json!(1.75), &json!(200 << 20), &json!(8192)),
        "{job}"
    );
    let listed = server.pipeline_jobs(project_id, pipeline_id).await;
    let listed = listed.iter().find(|j| j["id"] == job_id).unwrap();
    assert_eq!(listed["resources"], job["resources"]);

    let http = browser();
    let cookie = sign_in(&server, &http).await;
    let (_, page) = get(&http, job["web_url"].as_str().unwrap(), &cookie).await;
    assert!(
        page.contains("CPU 2.00s") && page.contains("peak memory 200.0 MiB"),
        "{page}"
    );
    let web_url = pipeline["web_url"].as_str().unwrap();
    let (_, page) = get(&http, web_url, &cookie).await;
    let link = format!("/acme/app/-/pipelines/{pipeline_id}/timeline");
    assert!(page.contains(&format!("href=\"{link}\"")), "{page}");
    let answer = http
        .get(format!("{}{link}", server.url))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let csp = answer.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    let page = answer.text().await.unwrap();
    assert!(!page.contains("<script"), "{page}");
    // The running job: its wait, its run, both sections, its figures; the created job
    // has no bar and no figures.
    let row = page
        .split("<tr>")
        .find(|r| r.contains(">compile</a>"))
        .unwrap_or_else(|| panic!("no compile row: {page}"));
    for needle in [
        "<svg viewBox=\"0 0 1000",
        "class=\"waiting\"",
        "class=\"running\"",
        "<title>prepare_executor: 1.0s</title>",
        "<title>step_script: ",
        "2.00s <small>(1.75 user, 0.25 system)</small>",
        "200.0 MiB",
    ] {
        assert!(row.contains(needle), "{needle:?} missing from {row}");
    }
    let unit = page
        .split("<tr>")
        .find(|r| r.contains(">unit</a>"))
        .unwrap_or_else(|| panic!("no unit row: {page}"));
    assert!(!unit.contains("class=\"running\""), "{unit}");
    // It reloads while the pipeline runs.
    assert!(page.contains("http-equiv=\"refresh\""));
    // A pipeline of another project is not found there.
    let (status, _) = get(
        &http,
        &format!(
            "{}/acme/other/-/pipelines/{pipeline_id}/timeline",
            server.url
        ),
        &cookie,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
