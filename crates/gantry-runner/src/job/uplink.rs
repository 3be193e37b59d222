//! The job's link to the coordinator while it runs (§4, §5): acceptance, the trace
//! streamed with `PATCH` + `Content-Range`, keep-alives, cancellation read from every
//! answer, and the final update with the `202` accept protocol.
//!
//! * **Acceptance** (§4.6): `PUT state=running` right after pick-up, sent beside the
//!   job's preparation ([`Uplink::accept_beside`]): the runner does not wait for the
//!   answer before it prepares its executor, only before the job's own code runs (see
//!   [`Accepted`]). An abort answer drops the job (`StopRequest::Abort`: what was
//!   prepared is cleaned up, nothing is reported); `Job-Status: canceling` cancels it.
//!   When the coordinator cannot be reached the job runs anyway (the trace is kept; a
//!   later `403` aborts it). Streaming starts once the answer is in, so the acceptance is
//!   the job's first request.
//! * **Streaming**: every update interval (3 s until the server says otherwise through
//!   `X-GitLab-Trace-Update-Interval`, clamped to 15 min) the bytes not yet accepted are
//!   sent in patches of at most 1 MiB; a whole 1 MiB patch goes as soon as it is waiting
//!   (the same patches gitlab-runner would send at the next tick, only sooner, so a
//!   fast log is uploaded while the job runs, not after it). `202` moves the sent offset; `416` moves it to the
//!   server's length (`Range`), re-sending what it lacks or skipping what it has; `404`
//!   and other errors keep it. Without a successful patch for 30 s a keep-alive
//!   `PUT state=running` carries the current checksum and size.
//! * **Outages**: a network error or a `5xx` keeps the offset and retries with
//!   exponential back-off with jitter (1 s doubling to 30 s). The job keeps running; the
//!   trace stays in memory (bounded by `output_limit` plus the runner's reserve, see
//!   [`crate::trace`]) and is delivered from the first missing byte when the coordinator
//!   answers again.
//! * **Cancellation**: `Job-Status: canceling` on any answer raises
//!   [`StopRequest::Cancel`]; `403` or `Job-Status: canceled|failed` raises
//!   [`StopRequest::Abort`] and streaming stops.
//! * **Final update** (§4.4): the interval is reset to 3 s; the rest of the trace is
//!   flushed, then `PUT state=success|failed` with `failure_reason` (negotiated against
//!   `features.failure_reasons`), `exit_code`, `output.checksum` and `output.bytesize`.
//!   `202` → wait the announced interval and send the same update again; `412` →
//!   re-send the whole trace, then the update; errors → back-off (1 s doubling to 5 min),
//!   at most 10 failed rounds ([`FINAL_UPDATE_RETRY_LIMIT`]). `416` answers during the
//!   final flush are followed at most [`MAX_FINAL_RANGE_MISMATCHES`] times (a server
//!   that answers `416` without `Range` would otherwise loop forever); then the update
//!   is sent anyway, its checksum and size telling the coordinator what it is missing.
//! * **Resources**: the job's resource use ([`crate::resources`]) rides on the
//!   keep-alive `PUT state=running` (sent at an update tick when the figures changed
//!   and the last were sent at least 3 s before) and on the final update, in the
//!   `resources` field GitLab ignores.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use gantry_protocol::trace::patch::MAX_PATCH_BYTES;
use gantry_protocol::update::FINAL_UPDATE_RETRY_LIMIT;
use gantry_protocol::update_interval::{DEFAULT_UPDATE_INTERVAL, FORCE_SEND_INTERVAL};
use gantry_protocol::{
    JobFeatures, JobState, PatchOutcome, PatchTraceParams, PatchTraceResponse, UpdateJobRequest,
    UpdateOutcome,
};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::backoff::Backoff;
use super::event::{Delivery, JobEvent, JobEvents};
use super::{JobEnding, StopRequest, StopSignal};
use crate::client::{Client, UpdateAnswer};
use crate::trace::{Trace, TraceChunk};

/// How long one patch or update may take before it counts as failed.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest wait between attempts while the coordinator is away during the job.
const MAX_LIVE_BACKOFF: Duration = Duration::from_secs(30);

/// Longest wait between final-update rounds.
const MAX_FINAL_BACKOFF: Duration = Duration::from_secs(300);

/// `416` answers followed during the final flush before the update is sent anyway.
pub const MAX_FINAL_RANGE_MISMATCHES: u32 = 5;

/// How long `202` answers to the final update are followed (twice GitLab's 5-minute
/// pending-state window).
const ACCEPT_WINDOW: Duration = Duration::from_secs(600);

/// Shortest time between two keep-alives sent for the resource figures alone (a job
/// whose use changes gets one update every this long, on top of its trace patches).
const RESOURCES_INTERVAL: Duration = Duration::from_secs(3);

/// Attempts at the acceptance `PUT state=running` before running the job anyway.
const ACCEPT_ATTEMPTS: u32 = 4;

/// What the acceptance update decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acceptance {
    /// Run the job.
    Run,
    /// `Job-Status: canceling` at once: fail it as canceled without running it.
    Canceled,
    /// The coordinator does not want it (`403`, `404`, `canceled`): drop it silently.
    Dropped,
}

/// The result of one pass over the unsent trace.
#[derive(Debug)]
enum Pass {
    /// Nothing was left to send.
    Idle,
    /// Everything left was accepted.
    Sent,
    /// `416`: the offset was moved to the server's length; try again later.
    RangeMismatch,
    /// `404`.
    NotFound,
    /// Another answer (`5xx`, `429`, …); the offset is kept.
    Failed,
    /// No answer (network error or timeout); the offset is kept.
    Unreachable(String),
    /// The coordinator aborted the job.
    Aborted,
}

/// The link of one job.
pub(crate) struct Uplink {
    client: Client,
    job_id: i64,
    token: String,
    trace: Trace,
    stop: StopSignal,
    params: PatchTraceParams,
    events: JobEvents,
    interval: Mutex<Duration>,
    /// When the streaming task lost the coordinator, if it had not reached it again when
    /// it stopped: the final update reports the outage's end (`CoordinatorBack`).
    outage: Mutex<Option<Instant>>,
    /// The job's resource use, sent with keep-alives and the final update.
    meter: crate::resources::JobMeter,
}

/// The streaming task; [`Streaming::stop`] ends it after its current request.
pub(crate) struct Streaming {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Streaming {
    /// Stops streaming and waits for a patch in flight to finish, so the final flush
    /// starts from a known offset.
    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The acceptance under way beside the job ([`Uplink::accept_beside`]): its task, which
/// starts streaming once the coordinator has said to run the job.
pub(crate) struct Accepting {
    answer: watch::Receiver<Option<Acceptance>>,
    task: JoinHandle<(Acceptance, Option<Streaming>)>,
}

/// Waits for the acceptance's answer: the lifecycle's gate before the job's own code
/// (the get_sources hooks, the scripts) runs. By the time it opens, a refusal has raised
/// the job's stop request.
#[derive(Clone)]
pub(crate) struct Accepted(watch::Receiver<Option<Acceptance>>);

impl Accepted {
    /// The coordinator's answer, once it is in.
    pub(crate) async fn answer(&mut self) -> Acceptance {
        match self.0.wait_for(Option::is_some).await {
            Ok(answer) => answer.unwrap_or(Acceptance::Run),
            // The task ended without an answer (it panicked or was aborted): the job runs,
            // as when the coordinator cannot be reached; a later `403` still aborts it.
            Err(_) => Acceptance::Run,
        }
    }
}

impl Accepting {
    /// The gate the lifecycle waits on.
    pub(crate) fn gate(&self) -> Accepted {
        Accepted(self.answer.clone())
    }

    /// The answer and the streaming task it started (waits for the answer).
    pub(crate) async fn finish(mut self) -> (Acceptance, Option<Streaming>) {
        match (&mut self.task).await {
            Ok(done) => done,
            Err(_) => (Acceptance::Run, None),
        }
    }
}

impl Drop for Accepting {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Uplink {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        client: Client,
        job_id: i64,
        token: String,
        trace: Trace,
        stop: StopSignal,
        params: PatchTraceParams,
        events: JobEvents,
        meter: crate::resources::JobMeter,
    ) -> Self {
        Self {
            client,
            job_id,
            token,
            trace,
            stop,
            params,
            events,
            interval: Mutex::new(DEFAULT_UPDATE_INTERVAL),
            outage: Mutex::new(None),
            meter,
        }
    }

    fn interval(&self) -> Duration {
        *self.interval.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_interval(&self, interval: Duration) {
        *self.interval.lock().unwrap_or_else(PoisonError::into_inner) = interval;
    }

    /// Applies what every answer may carry: a new update interval, a cancel request.
    fn observe(&self, cancel_requested: bool, update_interval: Option<Duration>) {
        if let Some(interval) = update_interval {
            self.set_interval(interval);
        }
        if cancel_requested && self.stop.request(StopRequest::Cancel) {
            self.trace
                .warning("The coordinator asked to cancel this job (Job-Status: canceling); stopping the script");
        }
    }

    async fn update(&self, request: &UpdateJobRequest) -> Result<UpdateAnswer, String> {
        match tokio::time::timeout(
            REQUEST_TIMEOUT,
            self.client.update_job(self.job_id, request),
        )
        .await
        {
            Ok(Ok(answer)) => {
                if request.state == Some(JobState::Running) {
                    self.observe(
                        answer.response.cancel_requested,
                        answer.response.update_interval,
                    );
                } else if let Some(interval) = answer.response.update_interval {
                    self.set_interval(interval);
                }
                Ok(answer)
            }
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!(
                "no answer to PUT /jobs/{} within {}s",
                self.job_id,
                REQUEST_TIMEOUT.as_secs()
            )),
        }
    }

    fn running_update(&self, with_output: bool) -> UpdateJobRequest {
        let mut request = UpdateJobRequest::new(
            self.token.clone(),
            JobState::Running,
            self.client.info().clone(),
        );
        if with_output {
            request.output = self.trace.output();
            request.resources = self.meter.snapshot();
        }
        request
    }

    /// Whether the job's resource use changed since it was last sent
    /// (`sent`) at least [`RESOURCES_INTERVAL`] ago: a keep-alive carries it.
    fn resources_due(&self, sent: Option<&(Instant, gantry_protocol::JobResources)>) -> bool {
        let Some(now) = self.meter.snapshot() else {
            return false;
        };
        match sent {
            None => true,
            Some((at, figures)) => *figures != now && at.elapsed() >= RESOURCES_INTERVAL,
        }
    }

    /// The acceptance update right after pick-up (§3.7, §4.6).
    pub(crate) async fn accept(&self) -> Acceptance {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(8));
        for attempt in 1..=ACCEPT_ATTEMPTS {
            match self.update(&self.running_update(false)).await {
                Ok(UpdateAnswer { response, .. }) => match response.outcome {
                    UpdateOutcome::Succeeded | UpdateOutcome::AcceptedButNotCompleted => {
                        return if response.cancel_requested {
                            Acceptance::Canceled
                        } else {
                            Acceptance::Run
                        };
                    }
                    UpdateOutcome::Aborted => return Acceptance::Dropped,
                    UpdateOutcome::TraceValidationFailed | UpdateOutcome::Failed => {}
                },
                Err(error) => {
                    if attempt == ACCEPT_ATTEMPTS {
                        break;
                    }
                    let retry_in = backoff.next_delay();
                    (self.events)(JobEvent::CoordinatorUnreachable {
                        job_id: self.job_id,
                        error,
                        retry_in,
                    });
                    tokio::time::sleep(retry_in).await;
                    continue;
                }
            }
            if attempt < ACCEPT_ATTEMPTS {
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
        // Run it anyway: the trace is kept, and a coordinator that does not want the
        // job says so with a 403 on the next patch.
        Acceptance::Run
    }

    /// [`Uplink::accept`] in the background, beside the job's preparation: a refusal
    /// raises the job's stop request (`Abort` for a coordinator that does not want the
    /// job, `Cancel` for `Job-Status: canceling`), then the answer is published to
    /// [`Accepted`]; a job to run starts streaming its trace.
    pub(crate) fn accept_beside(self: &Arc<Self>) -> Accepting {
        let (publish, answer) = watch::channel(None);
        let uplink = Arc::clone(self);
        let task = tokio::spawn(async move {
            let acceptance = uplink.accept().await;
            match acceptance {
                Acceptance::Dropped => {
                    uplink.stop.request(StopRequest::Abort);
                }
                Acceptance::Canceled => {
                    uplink.stop.request(StopRequest::Cancel);
                }
                Acceptance::Run => {}
            }
            let _ = publish.send(Some(acceptance));
            let streaming = (acceptance == Acceptance::Run).then(|| uplink.stream());
            (acceptance, streaming)
        });
        Accepting { answer, task }
    }

    /// Sends the unsent trace, patch after patch, until nothing is left (with
    /// `whole_only`, until less than a whole patch is left) or an answer stops the pass.
    async fn send_pending(&self, whole_only: bool) -> Pass {
        let mut sent_any = false;
        loop {
            if self.stop.current() == StopRequest::Abort {
                return Pass::Aborted;
            }
            let chunk = {
                let buffer = self.trace.buffer();
                let waiting = buffer.unsent();
                if whole_only && waiting < MAX_PATCH_BYTES as u64 {
                    None
                } else {
                    buffer.next_chunk(MAX_PATCH_BYTES)
                }
            };
            let Some(TraceChunk { offset, data }) = chunk else {
                return if sent_any { Pass::Sent } else { Pass::Idle };
            };
            let end = offset + data.len() as u64;
            let answer = tokio::time::timeout(
                REQUEST_TIMEOUT,
                self.client
                    .patch_trace(self.job_id, &self.token, self.params, offset, data),
            )
            .await;
            let response: PatchTraceResponse = match answer {
                Ok(Ok(response)) => response,
                Ok(Err(error)) => return Pass::Unreachable(error.to_string()),
                Err(_) => {
                    return Pass::Unreachable(format!(
                        "no answer to PATCH /jobs/{}/trace within {}s",
                        self.job_id,
                        REQUEST_TIMEOUT.as_secs()
                    ));
                }
            };
            self.observe(response.cancel_requested, response.update_interval);
            match response.outcome {
                PatchOutcome::Succeeded => {
                    self.trace.buffer().chunk_accepted(offset, end);
                    sent_any = true;
                }
                PatchOutcome::RangeMismatch { resume_at } => {
                    self.trace.buffer().rewind(resume_at);
                    return Pass::RangeMismatch;
                }
                PatchOutcome::NotFound => return Pass::NotFound,
                PatchOutcome::Aborted => {
                    self.stop.request(StopRequest::Abort);
                    return Pass::Aborted;
                }
                PatchOutcome::Failed => return Pass::Failed,
            }
        }
    }

    /// Starts streaming the trace in the background.
    pub(crate) fn stream(self: &Arc<Self>) -> Streaming {
        let (stop, stopped) = oneshot::channel();
        let uplink = Arc::clone(self);
        Streaming {
            stop: Some(stop),
            task: tokio::spawn(async move { uplink.streaming(stopped).await }),
        }
    }

    async fn streaming(&self, mut stopped: oneshot::Receiver<()>) {
        let mut backoff = Backoff::new(Duration::from_secs(1), MAX_LIVE_BACKOFF);
        let mut last_contact = Instant::now();
        let mut outage: Option<Instant> = None;
        let mut resources_sent: Option<(Instant, gantry_protocol::JobResources)> = None;
        let mut tick = tokio::time::Instant::now() + self.interval();
        loop {
            // Whole patches go as soon as they are waiting (not during an outage: then
            // the back-off decides); the rest waits for the tick.
            let whole_only = tokio::select! {
                _ = &mut stopped => {
                    *self.outage.lock().unwrap_or_else(PoisonError::into_inner) = outage;
                    return;
                }
                () = tokio::time::sleep_until(tick) => false,
                () = self.trace.full_patch_waiting(), if outage.is_none() => true,
            };
            let problem = match self.send_pending(whole_only).await {
                Pass::Idle => None,
                Pass::Sent => {
                    last_contact = Instant::now();
                    None
                }
                Pass::RangeMismatch | Pass::NotFound => {
                    last_contact = Instant::now();
                    None
                }
                Pass::Aborted => return,
                Pass::Failed => {
                    Some("the coordinator answered a trace patch with an error".to_owned())
                }
                Pass::Unreachable(error) => Some(error),
            };
            let problem = match problem {
                Some(problem) => Some(problem),
                None if last_contact.elapsed() >= FORCE_SEND_INTERVAL
                    || self.resources_due(resources_sent.as_ref()) =>
                {
                    let request = self.running_update(true);
                    if let Some(resources) = request.resources {
                        resources_sent = Some((Instant::now(), resources));
                    }
                    match self.update(&request).await {
                        Ok(UpdateAnswer { response, .. }) => match response.outcome {
                            UpdateOutcome::Aborted => {
                                self.stop.request(StopRequest::Abort);
                                return;
                            }
                            UpdateOutcome::Failed => Some(
                                "the coordinator answered a keep-alive with an error".to_owned(),
                            ),
                            _ => {
                                last_contact = Instant::now();
                                None
                            }
                        },
                        Err(error) => Some(error),
                    }
                }
                None => None,
            };
            match problem {
                None => {
                    if let Some(since) = outage.take() {
                        (self.events)(JobEvent::CoordinatorBack {
                            job_id: self.job_id,
                            after: since.elapsed(),
                        });
                    }
                    backoff.reset();
                    if !whole_only {
                        tick = tokio::time::Instant::now() + self.interval();
                    }
                }
                Some(error) => {
                    outage.get_or_insert_with(Instant::now);
                    let wait = backoff.next_delay();
                    tick = tokio::time::Instant::now() + wait;
                    (self.events)(JobEvent::CoordinatorUnreachable {
                        job_id: self.job_id,
                        error,
                        retry_in: wait,
                    });
                }
            }
        }
    }

    /// Flushes the trace and delivers the final status (§4.4).
    pub(crate) async fn finish(&self, ending: &JobEnding, features: &JobFeatures) -> Delivery {
        let Some(state) = ending.state() else {
            return Delivery::NotSent;
        };
        let failure_reason = ending
            .failure_reason()
            .map(|reason| features.failure_reason_for(reason));
        self.set_interval(DEFAULT_UPDATE_INTERVAL);
        let mut backoff = Backoff::new(Duration::from_secs(1), MAX_FINAL_BACKOFF);
        let mut failures = 0u32;
        let mut mismatches = 0u32;
        // An outage the streaming task saw begin and not end ends here.
        let mut outage: Option<Instant> = self
            .outage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let started = Instant::now();
        loop {
            let error = match self.send_pending(false).await {
                Pass::Idle | Pass::Sent | Pass::NotFound => None,
                Pass::RangeMismatch if mismatches < MAX_FINAL_RANGE_MISMATCHES => {
                    mismatches += 1;
                    tokio::time::sleep(self.interval()).await;
                    continue;
                }
                Pass::RangeMismatch => None,
                Pass::Aborted => return Delivery::Refused,
                Pass::Failed => {
                    Some("the coordinator answered a trace patch with an error".to_owned())
                }
                Pass::Unreachable(error) => Some(error),
            };
            let error = match error {
                Some(error) => error,
                None => {
                    let output = self.trace.output();
                    let mut request = UpdateJobRequest::new(
                        self.token.clone(),
                        state,
                        self.client.info().clone(),
                    );
                    request.failure_reason = failure_reason;
                    request.checksum = output.checksum.clone();
                    request.output = output;
                    request.exit_code = ending.exit_code().map_or(0, i64::from);
                    request.resources = self.meter.snapshot();
                    match self.update(&request).await {
                        // `200` means applied, whatever `Job-Status` says: after a
                        // `state=failed` update GitLab reports the job as `failed`.
                        Ok(UpdateAnswer { status: 200, .. }) => {
                            if let Some(since) = outage {
                                (self.events)(JobEvent::CoordinatorBack {
                                    job_id: self.job_id,
                                    after: since.elapsed(),
                                });
                            }
                            return Delivery::Accepted;
                        }
                        Ok(UpdateAnswer { response, .. }) => match response.outcome {
                            UpdateOutcome::Succeeded => {
                                if let Some(since) = outage {
                                    (self.events)(JobEvent::CoordinatorBack {
                                        job_id: self.job_id,
                                        after: since.elapsed(),
                                    });
                                }
                                return Delivery::Accepted;
                            }
                            UpdateOutcome::Aborted => return Delivery::Refused,
                            UpdateOutcome::AcceptedButNotCompleted => {
                                if started.elapsed() > ACCEPT_WINDOW {
                                    return Delivery::GaveUp {
                                        last_error: format!(
                                            "the coordinator kept answering 202 for {}s",
                                            ACCEPT_WINDOW.as_secs()
                                        ),
                                    };
                                }
                                tokio::time::sleep(
                                    response.update_interval.unwrap_or(self.interval()),
                                )
                                .await;
                                continue;
                            }
                            UpdateOutcome::TraceValidationFailed => {
                                self.trace.buffer().rewind(0);
                                tokio::time::sleep(self.interval()).await;
                                continue;
                            }
                            UpdateOutcome::Failed => {
                                "the coordinator answered the final update with an error".to_owned()
                            }
                        },
                        Err(error) => error,
                    }
                }
            };
            failures += 1;
            if failures > FINAL_UPDATE_RETRY_LIMIT {
                return Delivery::GaveUp { last_error: error };
            }
            outage.get_or_insert_with(Instant::now);
            let retry_in = backoff.next_delay();
            (self.events)(JobEvent::CoordinatorUnreachable {
                job_id: self.job_id,
                error,
                retry_in,
            });
            tokio::time::sleep(retry_in).await;
        }
    }
}
