//! The web UI: server-rendered HTML pages at the addresses the API's `web_url`s name, as
//! GitLab's, with small scripts of this server's for what must be live or drawn (the job
//! log, the `needs` edges).
//!
//! | module | pages |
//! |---|---|
//! | `projects` | `/` (projects), `/{project}/-/environments` (with Stop) |
//! | `pipelines` | `/{project}` and `/{project}/-/pipelines` (its pipelines), `/{project}/-/pipelines/new` (GitLab's "Run pipeline" form), `/{project}/-/pipelines/{id}` (stages and jobs) |
//! | `timeline` | `/{project}/-/pipelines/{id}/timeline` (each job's wait, run, sections, CPU and memory over time) |
//! | `job` | `/{project}/-/jobs/{id}` (a job and its live log), `…/trace.json`, `…/raw` |
//! | `job_details` | the job page's facts: runner, durations, failure reason in words, why it did not run, artifacts, variables |
//! | `artifacts` | `/{project}/-/jobs/{id}/artifacts/download`, `…/browse[/{dir}]`, `…/file/{path}`, `…/raw/{path}` |
//! | `pipeline_tabs` | `/{project}/-/pipelines/{id}/builds` (jobs), `…/test_report`, `…/variables` |
//! | `settings` | `/{project}/-/settings/ci_cd` (the project's CI/CD settings, read-only) |
//! | `runners` | `/-/runners` (with Pause and Resume) |
//! | `session` | `/-/login`, `/-/logout`; the checks of every form post |
//! | `shell`, `log`, `assets` | the frame, escaping and buttons; the log's lines as HTML; `/-/ui/app.css`, `/-/ui/job.js`, `/-/ui/pipeline.js` |
//!
//! Pages of something still running (a pipeline, a list) reload themselves every 3
//! seconds; the job page does not: its log comes in through `trace.json`. Buttons post
//! to the same addresses plus `/cancel`, `/retry` or `/play` and come back. Pages share
//! the fallback route with git (`git.rs`): a path with `/-/` or a project's path is a
//! page, one ending in `.git` is git's.
//!
//! Who may see them: a browser signed in with the admin token (a server-side session,
//! `session.rs`), or a client sending the admin token in a header. Every post of a session
//! carries its CSRF token and a same-site `Origin`. Every text from a repository, a job or
//! its log is HTML-escaped; the `Content-Security-Policy` allows scripts, styles and
//! requests only to this server and no framing (`shell.rs`).

mod artifacts;
mod assets;
mod job;
mod job_details;
mod log;
mod pipeline_tabs;
mod pipelines;
mod projects;
mod reports;
mod runners;
mod session;
mod settings;
mod shell;
mod timeline;

use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};

use super::AppState;
pub(crate) use session::COOKIE as SESSION_COOKIE;
use session::Who;
use shell::{CSRF, not_found};

/// Pipelines per page of a project's list.
const PER_PAGE: i64 = 50;
/// The largest form a page posts (a new pipeline's variables).
const MAX_FORM: usize = 256 * 1024;

/// What a path of the UI names.
#[derive(Debug, PartialEq, Eq)]
enum Page<'a> {
    /// `/-/ui/…`: a static file.
    Asset(&'a str),
    Projects,
    Login,
    Logout,
    Pipelines(&'a str),
    NewPipeline(&'a str),
    Pipeline(&'a str, i64, Option<&'a str>),
    /// A pipeline's timeline.
    Timeline(&'a str, i64),
    Job(&'a str, i64, Option<&'a str>),
    /// A job's artifacts: the archive, a directory, a file.
    Artifacts(&'a str, i64, artifacts::View),
    /// A tab of a pipeline beside its graph.
    PipelineTab(&'a str, i64, pipeline_tabs::Tab),
    /// A project's CI/CD settings.
    Settings(&'a str),
    /// A job's log as lines (`trace.json`) or as text (`raw`).
    Trace(&'a str, i64),
    RawTrace(&'a str, i64),
    Environments(&'a str),
    /// Stop environment `id` of a project.
    StopEnvironment(&'a str, i64),
    Runners,
    /// `pause` or `resume` runner `id`.
    RunnerAction(i64, &'a str),
}

fn page(path: &str) -> Option<Page<'_>> {
    match path {
        "/" => return Some(Page::Projects),
        "/-/login" => return Some(Page::Login),
        "/-/logout" => return Some(Page::Logout),
        "/-/runners" => return Some(Page::Runners),
        p if assets::ASSETS.contains(&p) => return Some(Page::Asset(p)),
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/-/runners/") {
        return match rest.split('/').collect::<Vec<_>>()[..] {
            [id, action @ ("pause" | "resume")] => {
                Some(Page::RunnerAction(id.parse().ok()?, action))
            }
            _ => None,
        };
    }
    // The API's and the server's own addresses are never pages.
    if path.starts_with("/api/") || path.starts_with("/-/") {
        return None;
    }
    let path = path.strip_prefix('/')?.trim_end_matches('/');
    let Some((project, rest)) = path.split_once("/-/") else {
        // A project's own address (its `web_url`: `namespace/name`, two parts at least); a
        // git path has `.git` in it. `/favicon.ico` and the like are no page.
        return (path.contains('/') && !path.contains(".git")).then_some(Page::Pipelines(path));
    };
    let id = |s: &str| s.parse::<i64>().ok();
    if let Some((n, tail)) = rest
        .strip_prefix("jobs/")
        .and_then(|r| r.split_once("/artifacts/"))
    {
        let (kind, file) = tail.split_once('/').unwrap_or((tail, ""));
        return Some(Page::Artifacts(
            project,
            id(n)?,
            artifacts::View::parse(kind, file)?,
        ));
    }
    let parts: Vec<&str> = rest.split('/').collect();
    match parts[..] {
        ["pipelines"] => Some(Page::Pipelines(project)),
        ["pipelines", "new"] => Some(Page::NewPipeline(project)),
        ["pipelines", n] => Some(Page::Pipeline(project, id(n)?, None)),
        ["pipelines", n, "timeline"] => Some(Page::Timeline(project, id(n)?)),
        ["pipelines", n, action @ ("cancel" | "retry")] => {
            Some(Page::Pipeline(project, id(n)?, Some(action)))
        }
        ["pipelines", n, tab] => Some(Page::PipelineTab(
            project,
            id(n)?,
            pipeline_tabs::Tab::at(tab)?,
        )),
        ["settings", "ci_cd"] => Some(Page::Settings(project)),
        ["jobs", n] => Some(Page::Job(project, id(n)?, None)),
        ["jobs", n, "trace.json"] => Some(Page::Trace(project, id(n)?)),
        ["jobs", n, "raw"] => Some(Page::RawTrace(project, id(n)?)),
        ["environments"] => Some(Page::Environments(project)),
        ["environments", n, "stop"] => Some(Page::StopEnvironment(project, id(n)?)),
        ["jobs", n, action @ ("cancel" | "retry" | "play")] => {
            Some(Page::Job(project, id(n)?, Some(action)))
        }
        _ => None,
    }
}

/// Whether `path` is a page of the UI (else git's or nobody's).
pub(crate) fn is_page(path: &str) -> bool {
    page(path).is_some()
}

/// The UI's answer to `request`, or `None` when its path is not a page (the caller then
/// serves git or a `404`).
pub(crate) async fn serve(state: &AppState, request: Request) -> Option<Response> {
    let path = request.uri().path().to_owned();
    let page = page(&path)?;
    let method = request.method().clone();
    let post = method == Method::POST;
    if method != Method::GET && method != Method::HEAD && !post {
        return None;
    }
    if let Page::Asset(name) = page {
        return (!post).then(|| assets::serve(name));
    }
    let headers = request.headers().clone();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let body = if post {
        axum::body::to_bytes(request.into_body(), MAX_FORM)
            .await
            .unwrap_or_default()
    } else {
        axum::body::Bytes::new()
    };
    if page == Page::Login {
        let answer = if post {
            session::login(state, &headers, &body).await
        } else {
            Ok(session::login_page(axum::http::StatusCode::OK, None))
        };
        return Some(answer.unwrap_or_else(|e| e.into_response()));
    }
    let who = match session::who(state, &headers).await {
        Ok(Some(who)) => who,
        Ok(None) => {
            return Some(session::login_page(
                axum::http::StatusCode::UNAUTHORIZED,
                None,
            ));
        }
        Err(e) => return Some(e.into_response()),
    };
    if post {
        let external_url = &state.coordinator.config().external_url;
        let back = path.rsplit_once('/').map_or("/", |(b, _)| b);
        let back = if back.is_empty() || back == "/-" {
            "/"
        } else {
            back
        };
        if let Some(refused) = session::refuse_post(&who, &headers, &body, external_url, back) {
            return Some(refused);
        }
    }
    let answer = CSRF
        .scope(who.csrf(), dispatch(state, page, post, &who, &query, &body))
        .await;
    Some(answer.unwrap_or_else(|e| e.into_response()))
}

/// The page (or action) of a signed-in caller.
async fn dispatch(
    state: &AppState,
    page: Page<'_>,
    post: bool,
    who: &Who,
    query: &str,
    body: &[u8],
) -> Result<Response, super::error::ApiError> {
    match (page, post) {
        (Page::Logout, true) => session::logout(state, who).await,
        (Page::Logout, false) => Ok(session::logout_page()),
        (Page::Projects, _) => projects::projects(state).await,
        (Page::Pipelines(p), _) => pipelines::pipelines(state, p, query).await,
        (Page::NewPipeline(p), false) => pipelines::new_pipeline_page(state, p).await,
        (Page::NewPipeline(p), true) => pipelines::run_pipeline(state, p, body).await,
        (Page::Pipeline(p, id, Some(action)), true) => {
            pipelines::pipeline_action(state, p, id, action).await
        }
        (Page::Pipeline(p, id, _), _) => pipelines::pipeline(state, p, id, query).await,
        (Page::Timeline(p, id), false) => timeline::timeline(state, p, id).await,
        (Page::Job(p, id, Some(action)), true) => job::job_action(state, p, id, action).await,
        (Page::Job(p, id, _), _) => job::job(state, p, id).await,
        (Page::Artifacts(p, id, view), false) => artifacts::artifacts(state, p, id, view).await,
        (Page::PipelineTab(p, id, tab), false) => pipeline_tabs::tab(state, p, id, tab).await,
        (Page::Settings(p), false) => settings::settings(state, p).await,
        (Page::Trace(p, id), false) => job::trace_json(state, p, id, query).await,
        (Page::RawTrace(p, id), false) => job::raw(state, p, id).await,
        (Page::Environments(p), _) => projects::environments(state, p).await,
        (Page::StopEnvironment(p, id), true) => projects::stop_environment(state, p, id).await,
        (Page::Runners, _) => runners::runners(state).await,
        (Page::RunnerAction(id, action), true) => runners::runner_action(state, id, action).await,
        _ => Ok(not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_pages() {
        assert_eq!(page("/"), Some(Page::Projects));
        assert_eq!(page("/gantry/demo"), Some(Page::Pipelines("gantry/demo")));
        assert_eq!(page("/a/b/c/-/pipelines"), Some(Page::Pipelines("a/b/c")));
        assert_eq!(
            page("/g/d/-/pipelines/7"),
            Some(Page::Pipeline("g/d", 7, None))
        );
        assert_eq!(
            page("/g/d/-/pipelines/7/cancel"),
            Some(Page::Pipeline("g/d", 7, Some("cancel")))
        );
        assert_eq!(
            page("/g/d/-/jobs/9/play"),
            Some(Page::Job("g/d", 9, Some("play")))
        );
        assert_eq!(
            page("/g/d/-/jobs/9/trace.json"),
            Some(Page::Trace("g/d", 9))
        );
        assert_eq!(page("/g/d/-/jobs/9/raw"), Some(Page::RawTrace("g/d", 9)));
        assert_eq!(page("/-/ui/job.js"), Some(Page::Asset("/-/ui/job.js")));
        assert_eq!(page("/-/ui/other.js"), None);
        assert_eq!(page("/g/d/-/pipelines/new"), Some(Page::NewPipeline("g/d")));
        assert_eq!(page("/g/d.git/info/refs"), None);
        assert_eq!(page("/favicon.ico"), None);
        assert_eq!(page("/api/v4/projects"), None);
        assert_eq!(page("/g/d/-/jobs/x"), None);
        assert_eq!(page("/g/d/-/jobs/9/delete"), None);
        assert_eq!(
            page("/g/d/-/jobs/9/artifacts/file/out/a%20b.txt"),
            Some(Page::Artifacts(
                "g/d",
                9,
                artifacts::View::File("out/a b.txt".into())
            ))
        );
        assert_eq!(
            page("/g/d/-/jobs/9/artifacts/browse"),
            Some(Page::Artifacts(
                "g/d",
                9,
                artifacts::View::Browse(String::new())
            ))
        );
        assert_eq!(page("/g/d/-/jobs/9/artifacts/file/../x"), None);
        assert_eq!(
            page("/g/d/-/pipelines/7/test_report"),
            Some(Page::PipelineTab("g/d", 7, pipeline_tabs::Tab::Tests))
        );
        assert_eq!(page("/g/d/-/pipelines/7/other"), None);
        assert_eq!(page("/g/d/-/settings/ci_cd"), Some(Page::Settings("g/d")));
    }
}
