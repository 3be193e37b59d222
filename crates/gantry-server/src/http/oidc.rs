//! The instance as an OIDC issuer of jobs' ID tokens (`id_tokens:`), at GitLab's paths:
//! `GET /.well-known/openid-configuration` (the discovery document) and
//! `GET /oauth/discovery/keys` (also `/-/jwks`: the public key). No token is needed: the
//! clouds and Vaults that verify job tokens read these. Keys and claims:
//! `coordinator/id_tokens.rs`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::ApiResult;
use super::{AppState, json_response};

pub(crate) async fn configuration(State(state): State<AppState>) -> Response {
    json_response(StatusCode::OK, &state.coordinator.openid_configuration())
}

pub(crate) async fn keys(State(state): State<AppState>) -> ApiResult<Response> {
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.jwks().await?,
    ))
}
