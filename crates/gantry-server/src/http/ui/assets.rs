//! The UI's static files, compiled in: `/-/ui/app.css` (the pages' styles and GitLab's
//! log palette, `log::palette_css`), `/-/ui/job.js` (the job page's live log) and
//! `/-/ui/pipeline.js` (the pipeline page's `needs` edges). Served to anybody (they hold no data), with the pages' security headers; the
//! pages load nothing from anywhere else.

use std::sync::LazyLock;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::log::palette_css;
use super::shell::with_headers;

const STYLE: &str = include_str!("app.css");
const JOB_SCRIPT: &str = include_str!("job.js");
const PIPELINE_SCRIPT: &str = include_str!("pipeline.js");

static CSS: LazyLock<String> = LazyLock::new(|| format!("{STYLE}{}", palette_css()));

/// The static files by path.
pub(super) const ASSETS: [&str; 3] = ["/-/ui/app.css", "/-/ui/job.js", "/-/ui/pipeline.js"];

/// The file at `path` (one of [`ASSETS`]).
pub(super) fn serve(path: &str) -> Response {
    let (body, content_type): (&str, &'static str) = match path {
        "/-/ui/app.css" => (CSS.as_str(), "text/css; charset=utf-8"),
        "/-/ui/job.js" => (JOB_SCRIPT, "text/javascript; charset=utf-8"),
        "/-/ui/pipeline.js" => (PIPELINE_SCRIPT, "text/javascript; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let mut response = with_headers(
        (StatusCode::OK, body.to_owned()).into_response(),
        content_type,
    );
    // A new server version may change them: revalidate after five minutes.
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}
