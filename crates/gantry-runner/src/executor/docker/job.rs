//! [`DockerExecutor`]: one job's containers — prepared once, one build container for every
//! stage (started again for each), everything removed at the end. With a job record
//! that lets a restarted runner take the job over, script stages run detached
//! ([`detached`]).

mod detached;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::StartExecOptions;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, ExecConfig, HostConfig, NetworkCreateRequest,
    NetworkingConfig, VolumeCreateRequest,
};
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, StopContainerOptions,
};
use futures_util::StreamExt;
use gantry_pipeline::expand::expand_runner;
use gantry_protocol::{JobResponse, JobVariable, Service, StreamKind};
use tokio::io::AsyncWriteExt;

use super::auth::{Registries, home_dir};
use super::client::{connect, connect_to};
use super::error::{DockerError, describe};
use super::image::ensure_image;
use super::leftovers::{Removed, remove_labelled};
use super::names::{LABEL_INSTANCE, LABEL_ROLE, job_labels, nonce, sanitize, service_aliases};
use super::policy::{check_allowed, pull_policies};
use super::services::{
    ServicePlan, ServiceTarget, StartedService, exposed_tcp_ports, start_service, wait_for_services,
};
use crate::config::DockerConfig;
use crate::executor::quote;
use crate::executor::shell::{stage_script, warn_on_timeout};
use crate::executor::{CancelReason, Stage, StageOutcome};
use crate::trace::Trace;

/// Run by `sh -c` as the container's command: the first bash found, else sh, reading
/// the script from standard input (gitlab-runner's detection order).
const DETECT_SHELL: &str = "if [ -x /usr/local/bin/bash ]; then exec /usr/local/bin/bash; \
elif [ -x /usr/bin/bash ]; then exec /usr/bin/bash; \
elif [ -x /bin/bash ]; then exec /bin/bash; \
elif [ -x /usr/local/bin/sh ]; then exec /usr/local/bin/sh; \
elif [ -x /usr/bin/sh ]; then exec /usr/bin/sh; \
elif [ -x /bin/sh ]; then exec /bin/sh; \
elif [ -x /busybox/sh ]; then exec /busybox/sh; \
else echo shell not found; exit 1; fi";

/// The build container's name on the job's network, as gitlab-runner's network per
/// build gives it: services can reach the job as `build`.
const BUILD_ALIAS: &str = "build";

/// After a stage's container exited, how long its output may take to arrive.
const OUTPUT_DRAIN: Duration = Duration::from_secs(5);

/// What the lifecycle knows that the executor needs.
pub(crate) struct DockerJobSpec<'a> {
    pub config: &'a DockerConfig,
    pub job: &'a JobResponse,
    /// The job's variables, expanded (image names and service variables are expanded
    /// against them; services get them as environment).
    pub variables: &'a [JobVariable],
    /// `host:container` binds of the build and cache directories.
    pub binds: Vec<String>,
}

/// How stage containers are made, once the job's image is known.
struct BuildTemplate {
    image: String,
    entrypoint: Option<Vec<String>>,
    user: Option<String>,
    platform: String,
    host_config: HostConfig,
    /// The job's variables (the image's entrypoint runs before the script exports them).
    env: Vec<String>,
}

/// One job's Docker resources.
pub(crate) struct DockerExecutor {
    docker: Docker,
    instance: String,
    labels: HashMap<String, String>,
    prefix: String,
    kill_grace: Duration,
    /// Build containers made so far (for their names).
    builds: AtomicUsize,
    build: Option<BuildTemplate>,
    /// The build container, once made.
    container: std::sync::Mutex<Option<String>>,
    network: Option<String>,
    services: Vec<StartedService>,
    /// The services' samplers, one per service for the whole job (their use is
    /// cumulative), started with the first measured stage, stopped at cleanup.
    service_samplers: std::sync::Mutex<Vec<crate::resources::Sampler>>,
    /// Where detached stages keep their files ([`detached`]).
    detach: Option<detached::Detach>,
}

impl DockerExecutor {
    /// Connects to the engine at `host` (`None`: `DOCKER_HOST`, else the default
    /// socket); nothing is created yet.
    pub(crate) async fn connect(
        host: Option<&str>,
        short_token: &str,
        job_id: i64,
        kill_grace: Duration,
    ) -> Result<Self, DockerError> {
        let docker = match host {
            Some(host) => connect_to(host).await?,
            None => connect().await?,
        };
        Ok(Self::with_engine(docker, short_token, job_id, kill_grace))
    }

    /// An executor on the engine `docker` is connected to; nothing is created yet.
    pub(crate) fn with_engine(
        docker: Docker,
        short_token: &str,
        job_id: i64,
        kill_grace: Duration,
    ) -> Self {
        let instance = nonce();
        Self {
            docker,
            labels: job_labels(short_token, job_id, &instance),
            prefix: sanitize(&format!("gantry-{short_token}-{job_id}-{instance}")),
            instance,
            kill_grace,
            builds: AtomicUsize::new(0),
            build: None,
            container: std::sync::Mutex::new(None),
            network: None,
            services: Vec::new(),
            service_samplers: std::sync::Mutex::new(Vec::new()),
            detach: None,
        }
    }

    /// `prepare_executor`: checks what the job asks for against the configuration
    /// (before anything is created), then fetches the images, makes the network and
    /// volumes, and starts the services and waits for them.
    pub(crate) async fn prepare(
        &mut self,
        spec: &DockerJobSpec<'_>,
        trace: &Trace,
    ) -> Result<(), DockerError> {
        let config = spec.config;
        let lookup =
            |name: &str| gantry_protocol::variable(spec.variables, name).map(str::to_owned);
        let job_image = spec
            .job
            .image
            .as_ref()
            .filter(|image| !image.name.trim().is_empty());
        let (image, entrypoint, options, asked_policies) = match job_image {
            Some(image) => {
                let name = expand_runner(image.name.trim(), &lookup);
                check_allowed("image", &name, &config.allowed_images)?;
                (
                    name,
                    image.entrypoint.clone(),
                    Some(&image.executor_opts),
                    image.pull_policy.as_deref(),
                )
            }
            None => {
                let name = config
                    .image
                    .as_deref()
                    .map(|name| expand_runner(name, &lookup))
                    .filter(|name| !name.is_empty())
                    .ok_or(DockerError::NoImage)?;
                (name, None, None, None)
            }
        };
        if let Some(options) = options {
            options
                .check()
                .map_err(|error| DockerError::ExecutorOptions {
                    what: format!("image {image}"),
                    reason: error.to_string(),
                })?;
        }
        let docker_options = options.and_then(|o| o.docker.as_ref());
        let user = docker_options
            .and_then(|o| o.user.as_ref())
            .map(|u| u.to_user_string())
            .or_else(|| config.user.clone());
        let platform = docker_options.and_then(|o| o.platform.clone());
        let policies = pull_policies(config, &image, asked_policies)?;

        // Services: everything checked before anything starts.
        let job_env: Vec<String> = container_environment(spec.variables, &spec.job.token);
        let mut plans = Vec::new();
        for service in &spec.job.services {
            let name = expand_runner(service.name.trim(), &lookup);
            if name.is_empty() {
                continue;
            }
            check_allowed("service", &name, &config.allowed_services)?;
            service
                .executor_opts
                .check()
                .map_err(|error| DockerError::ExecutorOptions {
                    what: format!("service {name}"),
                    reason: error.to_string(),
                })?;
            let service_policies = pull_policies(config, &name, service.pull_policy.as_deref())?;
            // gitlab-runner expands the alias text with the job's variables, then splits it.
            let expanded = Service {
                alias: service.alias.as_deref().map(|a| expand_runner(a, &lookup)),
                ..Service::default()
            };
            let mut aliases: Vec<String> =
                expanded.aliases().into_iter().map(str::to_owned).collect();
            for derived in service_aliases(&name) {
                if !aliases.contains(&derived) {
                    aliases.push(derived);
                }
            }
            let mut env = job_env.clone();
            for variable in &service.variables {
                env.push(format!(
                    "{}={}",
                    variable.key,
                    expand_runner(&variable.value, &lookup)
                ));
            }
            plans.push((
                ServicePlan {
                    service,
                    image: name,
                    aliases,
                    env,
                    ports: service
                        .ports
                        .iter()
                        .map(|p| p.number)
                        .filter(|&n| n > 0)
                        .collect(),
                },
                service_policies,
            ));
        }

        trace.runner_line(&format!("Using Docker executor with image {image} ..."));
        let registries = Registries::resolve(
            spec.variables,
            &spec.job.credentials,
            home_dir().as_deref(),
            None,
            &mut |warning| trace.warning(warning),
        )
        .await;
        let inspect = ensure_image(
            &self.docker,
            &image,
            &policies,
            platform.as_deref(),
            &registries,
            trace,
        )
        .await?;
        let image_ref = inspect.id.clone().unwrap_or_else(|| image.clone());

        let mut host_config = HostConfig {
            binds: Some(spec.binds.clone()),
            privileged: Some(config.privileged),
            memory: config
                .memory
                .as_ref()
                .and_then(|m| i64::try_from(m.bytes).ok()),
            nano_cpus: config.cpus.as_ref().map(|c| (c.value * 1e9) as i64),
            network_mode: config.network_mode.clone(),
            extra_hosts: non_empty(&config.extra_hosts),
            dns: non_empty(&config.dns),
            cap_add: non_empty(&config.cap_add),
            cap_drop: non_empty(&config.cap_drop),
            device_requests: device_requests(config.gpus.as_deref()),
            ..HostConfig::default()
        };
        for (index, volume) in config.volumes.iter().enumerate() {
            let bind = if volume.contains(':') {
                volume.clone()
            } else {
                let name = sanitize(&format!("{}-volume-{index}", self.prefix));
                self.docker
                    .create_volume(VolumeCreateRequest {
                        name: Some(name.clone()),
                        labels: Some(self.labels.clone()),
                        ..VolumeCreateRequest::default()
                    })
                    .await
                    .map_err(|error| {
                        DockerError::api(format!("create the volume for {volume}"), &error)
                    })?;
                format!("{name}:{volume}")
            };
            host_config.binds.get_or_insert_with(Vec::new).push(bind);
        }

        if !plans.is_empty() {
            if config.network_mode.is_none() {
                let name = self.prefix.clone();
                self.docker
                    .create_network(NetworkCreateRequest {
                        name: name.clone(),
                        driver: Some("bridge".to_owned()),
                        labels: Some(self.labels.clone()),
                        ..NetworkCreateRequest::default()
                    })
                    .await
                    .map_err(|error| DockerError::api("create the job's network", &error))?;
                host_config.network_mode = Some(name.clone());
                self.network = Some(name);
            }
            for (index, (plan, service_policies)) in plans.iter_mut().enumerate() {
                let service_platform = plan
                    .service
                    .executor_opts
                    .docker
                    .as_ref()
                    .and_then(|o| o.platform.clone());
                let service_image = ensure_image(
                    &self.docker,
                    &plan.image,
                    service_policies,
                    service_platform.as_deref(),
                    &registries,
                    trace,
                )
                .await?;
                for port in exposed_tcp_ports(
                    service_image
                        .config
                        .as_ref()
                        .and_then(|c| c.exposed_ports.as_ref()),
                ) {
                    if !plan.ports.contains(&port) {
                        plan.ports.push(port);
                    }
                }
                // Services get `service_gpus`, not the build container's `gpus`.
                let mut service_host = host_config.clone();
                service_host.device_requests = device_requests(config.service_gpus.as_deref());
                let target = ServiceTarget {
                    labels: &self.labels,
                    name: format!("{}-service-{index}", self.prefix),
                    network: self.network.as_deref(),
                    network_mode: config.network_mode.as_deref(),
                    host_config: &service_host,
                    platform: service_platform.as_deref(),
                };
                let started = start_service(&self.docker, plan, &target, trace).await?;
                self.services.push(started);
            }
            if let Some(timeout) = config.wait_for_services_timeout {
                wait_for_services(
                    &self.docker,
                    &self.services,
                    self.network.as_deref(),
                    timeout,
                    trace,
                )
                .await;
            }
        }

        self.build = Some(BuildTemplate {
            image: image_ref,
            entrypoint,
            user,
            platform: platform.unwrap_or_default(),
            host_config,
            env: job_env,
        });
        Ok(())
    }

    /// Runs `stage` in the job's build container (see the module docs).
    pub(crate) async fn run(
        &self,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let Some(build) = &self.build else {
            return StageOutcome::SystemFailure {
                error: DockerError::NotPrepared.into(),
            };
        };
        if let (Some(detach), Some(place)) = (&self.detach, stage.detach) {
            return self
                .run_detached(detach, build, stage, place, trace, cancel)
                .await;
        }
        let script = stage_script(crate::config::ShellKind::Sh, stage, trace);
        // `: |` gives the script's commands an empty standard input, so a command that
        // reads it cannot eat the rest of the script (gitlab-runner does the same).
        let input = format!(": | eval {}\n", quote(&script));
        let id = match self.build_container(build, stage).await {
            Ok(id) => id,
            Err(outcome) => return outcome,
        };
        let outcome = self.run_in(&id, &input, stage, trace, cancel).await;
        warn_on_timeout(trace, stage.name, outcome)
    }

    /// The job's build container: made for the first stage and started again for each
    /// later one, as gitlab-runner does, so what a stage leaves outside the mounted
    /// directories (`/tmp`, installed packages) is still there for the next
    /// (`after_script` sees what `step_script` did). One that disappeared is made anew.
    async fn build_container(
        &self,
        build: &BuildTemplate,
        stage: &Stage<'_>,
    ) -> Result<String, StageOutcome> {
        let failed = |action: &str, error: &bollard::errors::Error| StageOutcome::SystemFailure {
            error: DockerError::api(format!("{action} of {}", stage.name), error).into(),
        };
        let existing = self
            .container
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(id) = existing {
            match self.docker.inspect_container(&id, None).await {
                Ok(_) => return Ok(id),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => {}
                Err(error) => return Err(failed("inspect the build container", &error)),
            }
        }
        let mut labels = self.labels.clone();
        labels.insert(LABEL_ROLE.to_owned(), "build".to_owned());
        let body = ContainerCreateBody {
            image: Some(build.image.clone()),
            entrypoint: build.entrypoint.clone(),
            cmd: Some(vec![
                "sh".to_owned(),
                "-c".to_owned(),
                DETECT_SHELL.to_owned(),
            ]),
            user: build.user.clone(),
            env: Some(build.env.clone()),
            // Each stage's script changes to its own directory.
            working_dir: Some(stage.work_dir.to_string_lossy().into_owned()),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(true),
            tty: Some(false),
            labels: Some(labels),
            host_config: Some(build.host_config.clone()),
            networking_config: self.network.as_ref().map(|network| NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    network.clone(),
                    EndpointSettings {
                        aliases: Some(vec![BUILD_ALIAS.to_owned()]),
                        ..EndpointSettings::default()
                    },
                )])),
            }),
            ..ContainerCreateBody::default()
        };
        let number = self.builds.fetch_add(1, Ordering::Relaxed);
        let options = CreateContainerOptions {
            name: Some(sanitize(&format!("{}-build-{number}", self.prefix))),
            platform: build.platform.clone(),
        };
        let id = match self.docker.create_container(Some(options), body).await {
            Ok(created) => created.id,
            Err(error) => return Err(failed("create the build container", &error)),
        };
        *self
            .container
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(id.clone());
        self.record();
        Ok(id)
    }

    async fn run_in(
        &self,
        id: &str,
        input: &str,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let pump = match self.start_attached(id, input, stage.name, trace).await {
            Ok(pump) => pump,
            Err(outcome) => return outcome,
        };
        let _sampler = stage.meter.map(|meter| self.measure(meter, id));

        enum Stop {
            Exited(Result<i64, String>),
            Timeout,
            Canceled(CancelReason),
        }
        let stop = {
            let cancel = std::pin::pin!(cancel);
            tokio::select! {
                exited = self.wait_exit(id) => Stop::Exited(exited),
                () = tokio::time::sleep(stage.timeout) => Stop::Timeout,
                reason = cancel => Stop::Canceled(reason),
            }
        };
        let outcome = match stop {
            Stop::Exited(exited) => exit_outcome(exited, stage.name),
            Stop::Timeout => {
                self.terminate(id).await;
                StageOutcome::Timeout {
                    after: stage.timeout,
                }
            }
            Stop::Canceled(reason) => {
                self.terminate(id).await;
                StageOutcome::Canceled { reason }
            }
        };
        drain(pump, stage.name, trace).await;
        outcome
    }

    /// Samples the build container `id`'s use into a new stage of `meter` until the
    /// returned sampler is dropped (see `super::stats`); the last sample is the
    /// stage's figure. The first call also starts sampling each service container into
    /// a part of `meter` of its own, alongside the stages, until cleanup: a job's
    /// figures are its build container's and its services' together.
    fn measure(&self, meter: &crate::resources::JobMeter, id: &str) -> crate::resources::Sampler {
        {
            let mut services = self
                .service_samplers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if services.is_empty() {
                for service in &self.services {
                    services.push(self.sample(meter, &service.id));
                }
            }
        }
        self.sample(meter, id)
    }

    fn sample(&self, meter: &crate::resources::JobMeter, id: &str) -> crate::resources::Sampler {
        let (docker, id) = (self.docker.clone(), id.to_owned());
        crate::resources::sample_every(std::sync::Arc::new(meter.stage()), move || {
            let (docker, id) = (docker.clone(), id.clone());
            async move { super::stats::sample(&docker, &id).await }
        })
    }

    /// Attaches to the container `id`, starts it, feeds it `input` (then closes its
    /// standard input) and copies its output into `trace` until it ends (the returned
    /// task).
    async fn start_attached(
        &self,
        id: &str,
        input: &str,
        stage: &str,
        trace: &Trace,
    ) -> Result<tokio::task::JoinHandle<()>, StageOutcome> {
        let failed = |action: &str, error: &bollard::errors::Error| StageOutcome::SystemFailure {
            error: DockerError::api(format!("{action} of {stage}"), error).into(),
        };
        let attach = AttachContainerOptions {
            stream: true,
            stdin: true,
            stdout: true,
            stderr: true,
            ..AttachContainerOptions::default()
        };
        let attached = match self.docker.attach_container(id, Some(attach)).await {
            Ok(attached) => attached,
            Err(error) => return Err(failed("attach to the container", &error)),
        };
        if let Err(error) = self.docker.start_container(id, None).await {
            return Err(failed("start the container", &error));
        }
        let mut stdin = attached.input;
        let mut output = attached.output;
        let mut out = trace.writer(StreamKind::Stdout);
        let mut err = trace.writer(StreamKind::Stderr);
        let pump = tokio::spawn(async move {
            while let Some(item) = output.next().await {
                match item {
                    Ok(LogOutput::StdErr { message }) => err.write(&message),
                    Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                        out.write(&message)
                    }
                    Ok(LogOutput::StdIn { .. }) => {}
                    Err(_) => break,
                }
            }
            out.finish();
            err.finish();
        });
        // A script that exits early closes stdin: the write error does not matter.
        let _ = stdin.write_all(input.as_bytes()).await;
        let _ = stdin.shutdown().await;
        Ok(pump)
    }

    /// Waits for the container `id` to stop; its exit code.
    async fn wait_exit(&self, id: &str) -> Result<i64, String> {
        let mut wait = self.docker.wait_container(id, None);
        match wait.next().await {
            Some(Ok(response)) => Ok(response.status_code),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(error)) => Err(describe(&error)),
            None => Err("the engine closed the wait without an exit code".to_owned()),
        }
    }

    /// SIGTERM to every process of the container (as the shell executor signals the
    /// script's process group), then SIGKILL after the grace period.
    async fn terminate(&self, id: &str) {
        let exec = ExecConfig {
            cmd: Some(vec![
                "sh".to_owned(),
                "-c".to_owned(),
                "kill -TERM -1 2>/dev/null; true".to_owned(),
            ]),
            user: Some("0".to_owned()),
            ..ExecConfig::default()
        };
        if let Ok(created) = self.docker.create_exec(id, exec).await {
            let _ = self
                .docker
                .start_exec(
                    &created.id,
                    Some(StartExecOptions {
                        detach: true,
                        ..StartExecOptions::default()
                    }),
                )
                .await;
        }
        let grace = i32::try_from(self.kill_grace.as_secs()).unwrap_or(i32::MAX);
        let stop = StopContainerOptions {
            t: Some(grace),
            signal: None,
        };
        let _ = self.docker.stop_container(id, Some(stop)).await;
    }

    /// Removes every container, network and volume of this job run.
    pub(crate) async fn cleanup(&self) -> Result<Removed, DockerError> {
        // The services' last samples become their figures before they go.
        self.service_samplers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        remove_labelled(&self.docker, LABEL_INSTANCE, &self.instance).await
    }

    /// [`DockerExecutor::cleanup`], its problems as warnings in the job's log.
    pub(crate) async fn cleanup_logged(&self, trace: &Trace) {
        match self.cleanup().await {
            Ok(removed) => {
                for failure in &removed.failures {
                    trace.warning(&format!("cleaning up: {failure}"));
                }
            }
            Err(error) => trace.warning(&format!("cleaning up: failed to {error}")),
        }
    }
}

/// A stage's outcome from its exit code (or why it is unknown).
fn exit_outcome(exited: Result<i64, String>, stage: &str) -> StageOutcome {
    match exited {
        Ok(0) => StageOutcome::Success,
        Ok(code) => StageOutcome::ScriptFailure {
            exit_code: i32::try_from(code).unwrap_or(-1),
        },
        Err(reason) => StageOutcome::SystemFailure {
            error: DockerError::Api {
                action: format!("wait for the container of {stage}"),
                reason,
                status: None,
            }
            .into(),
        },
    }
}

/// Waits (a little) for the copy of a stage's container output to end.
async fn drain(pump: tokio::task::JoinHandle<()>, stage: &str, trace: &Trace) {
    if tokio::time::timeout(OUTPUT_DRAIN, pump).await.is_err() {
        trace.warning(&format!(
            "the output of {stage} did not end; it may be incomplete"
        ));
    }
}

fn non_empty(list: &[String]) -> Option<Vec<String>> {
    (!list.is_empty()).then(|| list.to_vec())
}

/// The job's variables as the environment of its containers (services, and the build
/// container, whose image entrypoint runs before the script exports them), without
/// anything that holds the job token (it would show in `docker inspect`).
fn container_environment(variables: &[JobVariable], job_token: &str) -> Vec<String> {
    variables
        .iter()
        .filter(|v| job_token.is_empty() || !v.value.contains(job_token))
        .filter(|v| crate::executor::is_variable_name(&v.key))
        .map(|v| format!("{}={}", v.key, v.value))
        .collect()
}

/// The Engine API's device requests for a `gpus` text of the configuration (checked when
/// the configuration was read; `None` when it asks for none).
fn device_requests(gpus: Option<&str>) -> Option<Vec<bollard::models::DeviceRequest>> {
    let request = crate::config::gpus::device_request(gpus?).ok()??;
    Some(vec![request])
}
