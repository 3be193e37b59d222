//! `POST /api/v4/jobs/request` (`runner-api.md` §3): `201` with the job payload, or
//! `204` with `X-GitLab-Last-Update` after holding the request up to the configured
//! long-poll duration (§3.3). Bodies over 32 KiB are `413`, as Workhorse does. A held
//! request whose runner hangs up ends at once (`peer.rs`): it is never given a job.

use axum::Extension;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gantry_protocol::{Feature, JobRequest, header};

use crate::coordinator::RequestInfo;

use super::error::ApiResult;
use super::extract::{self, Body};
use super::peer::{Peer, peer_ip};
use super::{AppState, auth, json_response};

pub(crate) async fn request(
    State(state): State<AppState>,
    peer: Option<Extension<ConnectInfo<Peer>>>,
    headers: axum::http::HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    // The steps before the wait are boxed: a held request's future keeps room for its
    // largest step all the while it waits (10,000 held requests, 10,000 times).
    let req: JobRequest = Box::pin(extract::params(&headers, &body)).await?;
    // Not kept while the request is held (10,000 held requests are 10,000 copies).
    drop((headers, body));
    let runner = Box::pin(auth::require_requesting_runner(
        &state.coordinator,
        &req.token,
    ))
    .await?;
    // The version before looking: if the queue changes while this request is held, the
    // runner's next request carries a stale version and looks again at once, so no
    // change is missed.
    let version = state.coordinator.queue_version();
    let info = RequestInfo {
        cancel_gracefully: req.info.features.has(Feature::CancelGracefully),
        job_inputs: req.info.features.has(Feature::JobInputs),
        runner: gantry_store::RunnerInfo {
            version: req.info.version.clone(),
            revision: req.info.revision.clone(),
            platform: req.info.platform.clone(),
            architecture: req.info.architecture.clone(),
            executor: req.info.executor.clone(),
            ip_address: peer_ip(peer.as_ref()),
        },
        system_id: req.system_id,
    };
    let last_update = Some(req.last_update).filter(|v| !v.is_empty());
    let last_update = last_update.as_deref();
    // The rest of the request is not kept while it is held either.
    drop((req.info, req.token));
    let wait = state.coordinator.config().long_poll;
    // A request whose runner hung up stops waiting at once: no job can reach it.
    let hung_up = async {
        match &peer {
            Some(Extension(ConnectInfo(peer))) => peer.hung_up().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        outcome = state.coordinator.request_job_with(&runner, last_update, wait, &info) => Some(outcome?),
        () = state.shutting_down() => None,
        () = hung_up => None,
    };
    match outcome.flatten() {
        Some(job) => Ok(json_response(StatusCode::CREATED, &job)),
        None => {
            let mut response = StatusCode::NO_CONTENT.into_response();
            if let Ok(value) = HeaderValue::from_str(&version) {
                response.headers_mut().insert(header::LAST_UPDATE, value);
            }
            Ok(response)
        }
    }
}
