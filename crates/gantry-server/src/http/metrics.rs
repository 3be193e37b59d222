//! `GET /-/metrics` (GitLab's path): the coordinator's Prometheus metrics, for an admin
//! token (`PRIVATE-TOKEN`, or `Authorization: Bearer` — Prometheus' `authorization`
//! scrape setting). GitLab restricts the endpoint by client address instead; a token
//! keeps it closed whatever the network.

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};

use crate::coordinator::METRICS_CONTENT_TYPE;

use super::error::ApiResult;
use super::{AppState, auth};

pub(crate) async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let text = state.coordinator.metrics_text().await?;
    Ok(([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response())
}
