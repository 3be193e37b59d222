//! Crash recovery at start, applied: what a dead runner process left behind is found in
//! the job records ([`crate::journal`], whose `recovery` submodule decides where a lost
//! job can go on and ends it on the coordinator) and either taken over — a job whose script stages can go on
//! here ([`Poller::take_over`], `resume_lost_job`: its log continued where the coordinator's
//! ends, its detached stage followed or started) — or ended (`end_lost_job`: its processes
//! killed, the coordinator told, a custom driver's `cleanup_exec` run); Docker objects of
//! dead jobs are removed by their labels. The poll loop calls this once, before it takes a
//! job.

use super::*;

impl Poller {
    /// Before the first job: removes the containers, networks and volumes a previous
    /// (crashed) run of each Docker entry left behind, found by their runner label —
    /// except those of the jobs this process took over.
    pub(super) async fn remove_docker_leftovers(&self) {
        let kept: Vec<i64> = self.shared.lock().jobs.keys().copied().collect();
        let tokens: Vec<(String, Option<String>, String)> = {
            let state = self.shared.lock();
            state
                .entries
                .iter()
                .filter(|entry| entry.config.executor == ExecutorKind::Docker)
                .map(|entry| {
                    let host = entry.config.docker.as_ref().and_then(|d| d.host.clone());
                    (entry.name.clone(), host, short_token(&entry.config.token))
                })
                .collect()
        };
        for (runner, host, token) in tokens {
            let result = crate::executor::docker::remove_leftovers(host.as_deref(), &token, &kept)
                .await
                .map_err(|error| error.to_string());
            match result {
                Ok(removed) if removed.is_empty() => {}
                result => self
                    .shared
                    .emit(PollEvent::DockerLeftovers { runner, result }),
            }
        }
    }

    /// Before the first job: ends the jobs a previous runner process lost (see
    /// [`crate::journal`]). Their processes are killed now, before a new job can be given
    /// their build directory; the coordinator is told in the background, trying again
    /// with back-off while it cannot be reached.
    pub(super) fn end_lost_jobs(&self) {
        let Some(journal) = &self.shared.options.journal else {
            return;
        };
        let crate::journal::LostJobs { lost, unreadable } = journal.lost();
        for (path, error) in unreadable {
            self.shared
                .emit(PollEvent::LostJobUnreadable { path, error });
        }
        let mut taken = Vec::new();
        for (path, record) in lost {
            if let Some(takeover) = self.take_over(&path, &record) {
                taken.push(takeover);
                continue;
            }
            let killed = kill_lost_groups(&record);
            let (runner, client, custom) = {
                let state = self.shared.lock();
                let custom = record.custom.as_ref().map(|c| {
                    state
                        .entries
                        .iter()
                        .find(|e| {
                            e.config.url == record.url && short_token(&e.config.token) == c.runner
                        })
                        .and_then(|e| e.config.custom.clone().map(|cfg| (cfg, e.config.shell)))
                        .map(|(config, shell)| (config, shell, c.temp_dir.clone()))
                        .ok_or_else(|| {
                            format!(
                                "no [[runners]] entry of this configuration has its token and a [runners.custom] section any more; its directory `{}` is left as it was",
                                c.temp_dir.display()
                            )
                        })
                });
                match state.entries.iter().find(|e| e.config.url == record.url) {
                    Some(entry) => (entry.name.clone(), Ok(entry.client.clone()), custom),
                    None => (
                        record.url.clone(),
                        Client::new(&record.url, version_info(None)),
                        custom,
                    ),
                }
            };
            let shared = Arc::clone(&self.shared);
            tokio::spawn(async move {
                let cleanup = match custom {
                    None => None,
                    Some(Err(error)) => Some(Err(error)),
                    Some(Ok((config, _, dir))) if config.cleanup.is_none() => {
                        // Recorded for a takeover only: nothing to run, the directory goes.
                        let _ = std::fs::remove_dir_all(&dir);
                        let _ = crate::journal::forget_custom(&path, &record);
                        None
                    }
                    Some(Ok((config, shell, dir))) => {
                        let result =
                            clean_up_lost_job(&shared, &runner, record.job_id, config, shell, &dir)
                                .await;
                        // Not twice: the directory is gone, whatever the program said.
                        let _ = crate::journal::forget_custom(&path, &record);
                        Some(result)
                    }
                };
                let result = match client {
                    Ok(client) => tell_lost_job(&shared, &client, &runner, &record, None).await,
                    Err(error) => Err(error.to_string()),
                };
                if result.is_ok() {
                    crate::journal::remove_record(&path);
                }
                shared.emit(PollEvent::LostJob {
                    runner,
                    job_id: record.job_id,
                    killed,
                    why: None,
                    cleanup,
                    result,
                });
            });
        }
        // The fleets restore the acquisitions of the instance jobs taken over: known
        // before any of them starts.
        {
            let mut resuming = self
                .shared
                .resuming
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let state = self.shared.lock();
            for takeover in &taken {
                if let Some(instance) = &takeover.record.instance {
                    resuming
                        .entry(key(&state.entries[takeover.index].config))
                        .or_default()
                        .push(instance.key.clone());
                }
            }
        }
        for takeover in taken {
            tokio::spawn(resume_lost_job(Arc::clone(&self.shared), takeover));
        }
    }

    /// Takes over the lost job recorded at `path` when it can go on: its record names
    /// a detached script stage that still runs (or ended, its exit code kept), the end
    /// of its steps, or nothing yet (a shell executor job then starts again), and its
    /// `[[runners]]` entry is still configured. The job keeps its slot; it goes on in
    /// its own task ([`resume_lost_job`]) once every record was looked at. `None` when it
    /// cannot (the job is then ended as lost).
    fn take_over(&self, path: &std::path::Path, record: &JobRecord) -> Option<TakenOver> {
        let (Some(journal), Some(resume)) = (&self.shared.options.journal, &record.resume) else {
            return None;
        };
        let (at, found) = crate::journal::takeover_point(record)?;
        let mut state = self.shared.lock();
        let index = state.entries.iter().position(|e| {
            e.config.url == record.url && short_token(&e.config.token) == resume.runner
        })?;
        let (running, job) = journal.take_over(path, record).ok()?;
        if !resumable(&state.entries[index].config, &job) || job.id != record.job_id {
            return None;
        }
        let kind = ExecutorKind::for_job(&state.entries[index].config, &job);
        if !crate::journal::goes_on(kind, &at, record) {
            return None;
        }
        let slot = slots::RunningJob {
            job_id: job.id,
            project_id: job.job_info.project_id,
            concurrent_id: resume.concurrent_id,
            concurrent_project_id: resume.concurrent_project_id,
        };
        state.slots.job_resumed(index, slot);
        let stop = StopSignal::new();
        state.jobs.insert(job.id, stop.clone());
        let running = Arc::new(running);
        state.records.insert(job.id, Arc::clone(&running));
        if let crate::journal::TakeoverAt::Start = at {
            // What the dead runner had started (a fetch, a `hooks:` script) ends first.
            kill_lost_groups(record);
            running.groups_ended();
        }
        let entry = &state.entries[index];
        let name = entry.name.clone();
        let cx = job_context(
            &self.shared,
            entry,
            &slot,
            stop,
            job_events(&self.shared, &name),
            None,
            Some(running),
        );
        drop(state);
        self.shared.emit(PollEvent::JobTakenOver {
            runner: name.clone(),
            job_id: job.id,
            found,
        });
        Some(TakenOver {
            index,
            runner: name,
            record: record.clone(),
            at,
            job,
            cx,
        })
    }
}

/// Ends a lost job on the coordinator, trying again with back-off while the error is
/// transient (the network, `5xx`, `429`); a refusal is the answer.
/// Runs the custom executor's `cleanup_exec` of a lost job in the directory its record
/// names, with the environment its programs got; its lines become events.
async fn clean_up_lost_job(
    shared: &Arc<Shared>,
    runner: &str,
    job_id: i64,
    config: crate::config::CustomConfig,
    shell: crate::config::ShellKind,
    dir: &std::path::Path,
) -> Result<(), String> {
    let executor = crate::executor::custom::CustomExecutor::after_crash(config, shell, dir)
        .map_err(|e| e.to_string())?;
    let (events, runner) = (Arc::clone(shared), runner.to_owned());
    let log: crate::executor::DriverLog = Arc::new(move |stream, line| {
        events.emit(PollEvent::LostJobCleanupLine {
            runner: runner.clone(),
            job_id,
            stream: stream.to_owned(),
            line: line.to_owned(),
        });
    });
    // The job's log is the coordinator's; what the program says goes to the runner's.
    let unused = crate::trace::Trace::new(
        crate::trace::MaskSet::empty(),
        crate::trace::TraceOptions::default(),
    );
    executor
        .cleanup(&unused, log)
        .await
        .map_err(|e| e.to_string())
}

async fn tell_lost_job(
    shared: &Shared,
    client: &Client,
    runner: &str,
    record: &JobRecord,
    why: Option<&str>,
) -> Result<LostJobEnd, String> {
    let mut backoff = Backoff::new(Duration::from_secs(1), MAX_REQUEST_BACKOFF);
    loop {
        match end_lost_job(client, record, &shared.options.system_id, why).await {
            Ok(end) => return Ok(end),
            Err(error) if error.is_transient() => {
                let retry_in = backoff.next_delay();
                shared.emit(PollEvent::RequestFailed {
                    runner: runner.to_owned(),
                    error: format!("end the lost job {}: {error}", record.job_id),
                    retry_in,
                });
                tokio::time::sleep(retry_in).await;
            }
            Err(error) => return Err(error.to_string()),
        }
    }
}

/// Whether a job of `runner` may be taken over after a runner restart: its script
/// stages run detached from this process, their output in files (the shell executor,
/// the custom executor's `run_exec`, the Docker executor's build container, the
/// instance executor's instance, the docker-autoscaler executor's build container on
/// its instance; see [`crate::executor::shell::detached`]).
pub(super) fn resumable(runner: &RunnerConfig, job: &JobResponse) -> bool {
    matches!(
        ExecutorKind::for_job(runner, job),
        ExecutorKind::Shell
            | ExecutorKind::Custom
            | ExecutorKind::Docker
            | ExecutorKind::Instance
            | ExecutorKind::DockerAutoscaler
    )
}

/// The acquisition of the instance a taken-over job ran on, restored from the state
/// file of its entry's fleet (started now if need be); why not, when it cannot be.
async fn restore_instance(
    shared: &Arc<Shared>,
    index: usize,
    instance: &crate::journal::InstanceRecord,
) -> Result<FleetLease, String> {
    let fleet = fleet_of(shared, index).await?;
    match fleet.resume(&instance.key) {
        Ok(acquisition) => Ok(FleetLease::restored(fleet, acquisition)),
        Err(error) => Err(format!(
            "the acquisition of instance {} cannot be restored from the taskscaler's state storage: {error}",
            instance.id
        )),
    }
}

/// A lost job [`Poller::take_over`] took, to go on with.
struct TakenOver {
    /// Its entry.
    index: usize,
    /// The entry's name.
    runner: String,
    record: JobRecord,
    at: crate::journal::TakeoverAt,
    job: JobResponse,
    cx: JobContext,
}

/// Goes on with a lost job [`Poller::take_over`] took: the log says so, then the job
/// runs on from its detached stage ([`crate::job::resume_job`]). An instance job's
/// acquisition is restored first (its fleet started if need be).
async fn resume_lost_job(shared: Arc<Shared>, taken: TakenOver) {
    let TakenOver {
        index,
        runner,
        record,
        at,
        job,
        mut cx,
    } = taken;
    let job_id = job.id;
    let journal = cx.journal.clone();
    let gone = match &record.instance {
        Some(instance) => match restore_instance(&shared, index, instance).await {
            Ok(lease) => {
                cx.fleet = Some(lease);
                None
            }
            Err(why) => Some(why),
        },
        None => docker_gone(&cx, &record, &at).await,
    };
    if let Some(gone) = gone {
        // Nothing to go on in: the job ends as a lost one. (A docker-autoscaler job's
        // containers are on its instance's engine, not this machine's.)
        let host = cx.runner.docker.as_ref().and_then(|d| d.host.clone());
        if let Some(docker) = record.docker.as_ref().filter(|_| record.instance.is_none()) {
            let _ =
                crate::executor::docker::remove_instance(host.as_deref(), &docker.instance).await;
        }
        let result = tell_lost_job(&shared, &cx.client, &runner, &record, Some(&gone)).await;
        shared.emit(PollEvent::LostJob {
            runner,
            job_id,
            killed: 0,
            why: Some(gone),
            cleanup: None,
            result,
        });
        job_ended(&shared, index, job_id, journal, None);
        return;
    }
    let report = match continue_log(&shared, &runner, &record, at, &job, &cx).await {
        Some(takeover) => Some(crate::job::resume_job(job, cx, takeover).await),
        None => {
            // The coordinator ended the job, or will not hear of it: nothing of it
            // runs on.
            let killed = kill_lost_groups(&record);
            shared.emit(PollEvent::LostJob {
                runner,
                job_id,
                killed,
                why: None,
                cleanup: None,
                result: Ok(LostJobEnd::AlreadyEnded),
            });
            None
        }
    };
    job_ended(&shared, index, job_id, journal, report);
}

/// Why a Docker job `record` names cannot go on at `at`: the build container it needs
/// is gone (removed, the engine restarted without it), or the engine cannot say.
async fn docker_gone(
    cx: &JobContext,
    record: &JobRecord,
    at: &crate::journal::TakeoverAt,
) -> Option<String> {
    let docker = record.docker.as_ref()?;
    let needed = match at {
        crate::journal::TakeoverAt::Stage(_) => true,
        crate::journal::TakeoverAt::AfterSteps(after) => after.after_script_due,
        crate::journal::TakeoverAt::Start => false,
    };
    if !needed {
        return None;
    }
    let Some(container) = &docker.container else {
        return Some("the job's build container was never recorded".to_owned());
    };
    let host = cx.runner.docker.as_ref().and_then(|d| d.host.clone());
    match crate::executor::docker::container_exists(host.as_deref(), container).await {
        Ok(true) => None,
        Ok(false) => Some(format!("its build container {container} is gone")),
        Err(error) => Some(format!("look for its build container {container}: {error}")),
    }
}

/// Adds the takeover line to the coordinator's log of `record`'s job and says where
/// the log goes on; `None` when the coordinator has ended the job or refuses it.
async fn continue_log(
    shared: &Shared,
    runner: &str,
    record: &JobRecord,
    at: crate::journal::TakeoverAt,
    job: &JobResponse,
    cx: &JobContext,
) -> Option<crate::job::Takeover> {
    let received_unix_ms = record.resume.as_ref()?.received_unix_ms;
    let found = match &at {
        crate::journal::TakeoverAt::Stage(stage) => format!(
            "it found the job's {} still running on its own and took it over.",
            stage.place.name
        ),
        crate::journal::TakeoverAt::AfterSteps(_) => "the job's script stages were over; it took the job over from there (after_script if it had not run, then cache and artifacts).".to_owned(),
        crate::journal::TakeoverAt::Start => "the job had not reached its script; it ended what was left of it and started the job again (preparing the executor, sources, cache, artifacts).".to_owned(),
    };
    let client = &cx.client;
    let text = crate::journal::takeover_message(&shared.options.system_id, &found);
    let (first, message) = append_line(shared, (runner, client), record, job, &text).await?;
    let mut cancel_requested = first.cancel_requested;
    let mut held = first.at + message.len() as u64;
    let (at, crc) = match at {
        crate::journal::TakeoverAt::Stage(mut stage) => {
            // The coordinator's log ends at a recorded point, unless it was cut between
            // two (see `crate::executor::shell::detached`).
            let (point, exact) = stage.resume_point(first.at);
            let mut crc = None;
            if exact {
                // The log's CRC is known when the point's is.
                crc = point.and_then(|p| p.crc).map(|crc| {
                    let mut hasher = crc32fast::Hasher::new_with_initial_len(crc, first.at);
                    hasher.update(&message);
                    hasher.finalize()
                });
            } else {
                let twice = "\x1b[33;1mWARNING: Output written since the runner's last checkpoint may appear twice.\x1b[0m\n";
                let (second, line) =
                    append_line(shared, (runner, client), record, job, twice).await?;
                cancel_requested |= second.cancel_requested;
                held = second.at + line.len() as u64;
            }
            stage.checkpoint = point;
            stage.points.clear();
            (crate::journal::TakeoverAt::Stage(stage), crc)
        }
        at => (at, None),
    };
    Some(crate::job::Takeover {
        at,
        log: (held, crc),
        received_unix_ms,
        cancel_requested,
    })
}

/// Appends the runner's `text` (with timestamps, if the job's lines have them) to the
/// log of `record`'s job; returns where it went and its bytes.
async fn append_line(
    shared: &Shared,
    (runner, client): (&str, &Client),
    record: &JobRecord,
    job: &JobResponse,
    text: &str,
) -> Option<(crate::journal::Appended, Vec<u8>)> {
    let written = crate::trace::Trace::new(
        crate::trace::MaskSet::empty(),
        crate::trace::TraceOptions {
            timestamps: crate::job::timestamps(job),
            ..crate::trace::TraceOptions::default()
        },
    );
    written.runner_raw(text);
    let message = written.contents();
    let mut backoff = Backoff::new(Duration::from_secs(1), MAX_REQUEST_BACKOFF);
    loop {
        match crate::journal::append_to_log(client, record, &message).await {
            Ok(appended) => return Some((appended?, message)),
            Err(error) if error.is_transient() => {
                let retry_in = backoff.next_delay();
                shared.emit(PollEvent::RequestFailed {
                    runner: runner.to_owned(),
                    error: format!("take over the job {}: {error}", record.job_id),
                    retry_in,
                });
                tokio::time::sleep(retry_in).await;
            }
            Err(_) => return None,
        }
    }
}
