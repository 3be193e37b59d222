//! The job payload (runner API §3.5): everything a runner needs to run one job.
//!
//! Two steps: [`Coordinator::payload_facts`] reads what the payload is made of besides
//! the job's rows ([`PayloadFacts`]: its dependencies' artifacts and dotenv variables, its
//! environment row, the settings variables, the pipeline's origin facts, the signing key
//! when it asks for ID tokens); [`assemble::assemble`] puts it together without I/O, so
//! every decision below is tested with plain values.
//!
//! Variables (§3.5.4, precedence `ci-yaml.md` §6.1, lowest first; a later one replaces an
//! earlier one of the same name in place): persisted job variables (`CI_JOB_ID`,
//! `CI_JOB_TOKEN`, `CI_REPOSITORY_URL`, `CI_PIPELINE_ID`, …) → job predefined
//! (`CI_JOB_NAME`, `CI_NODE_*`, `CI_ENVIRONMENT_*`, …) → project and pipeline predefined
//! (what the YAML was compiled with) → runner (`CI_RUNNER_*`) → global then job YAML
//! variables → `GITLAB_USER_*` → dotenv reports of the job's dependencies → instance CI/CD
//! variables (`instance_variables.rs`) → project CI/CD variables (`variables.rs`) →
//! pipeline variables → manual job variables → the stored environment's slug and URL
//! (GitLab's `persisted_environment_variables`). Values are then pre-expanded as GitLab does
//! (nested, `$$` kept, unknown references kept for the runner, raw variables untouched).
//!
//! Not sent, on purpose: `CI_PROJECT_DIR`, `CI_BUILDS_DIR` and the other runner-set
//! variables. gitlab-runner appends the server's variables after its own, so a value
//! from here would replace the runner's real build directory.
//!
//! `git_info.repo_url` is `{scheme}://gitlab-ci-token:<job token>@{host}/{namespace}/{name}.git`
//! under the external URL: the http layer serves the project's mirror
//! ([`Coordinator::git_repo_path`]). `depth` is 0 (a full clone, which dumb HTTP can
//! serve too) unless the job or the project's `ci_default_git_depth` sets `GIT_DEPTH`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use gantry_pipeline::PipelineInfo;
use gantry_pipeline::expand::{Unknown, expand_nested, ref_slug};
use gantry_protocol::payload::executor_opts::{DockerExecutorOptions, ImageUser};
use gantry_protocol::{
    ArtifactFormat, ArtifactType, ExecutorOptions, Image, JobArtifact, JobResponse, JobVariable,
    PullPolicy, Service,
};
use indexmap::IndexMap;

use crate::processor::FailureReason;

use super::Coordinator;
use super::error::Result;
use super::spec::StoredSpec;
use super::views::Runner;

mod assemble;
use super::variables;

/// Why an assigned job cannot start: it fails with the matching reason, its log says why.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A dependency's artifacts are gone or a `needs:` cannot be resolved →
    /// `missing_dependency_failure`.
    MissingDependency(String),
    /// `secrets:` without a configured provider → `secrets_provider_not_found`.
    SecretsProviderNotFound(super::job_secrets::ProviderNotFound),
}

impl Refusal {
    /// The job's failure reason.
    pub(crate) fn reason(&self) -> FailureReason {
        match self {
            Refusal::MissingDependency(_) => FailureReason::MissingDependencyFailure,
            Refusal::SecretsProviderNotFound(_) => FailureReason::SecretsProviderNotFound,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::MissingDependency(why) => f.write_str(why),
            Refusal::SecretsProviderNotFound(why) => write!(f, "{why}"),
        }
    }
}

/// A job just assigned, with what was read to assign it.
pub(crate) struct Assigned<'a> {
    pub job: &'a gantry_store::Job,
    pub spec: &'a StoredSpec,
    pub pipeline: &'a gantry_store::Pipeline,
    pub project: &'a gantry_store::Project,
    pub token: &'a str,
    pub queue: QueueFacts,
}

/// Where in the queue the job was found (`job_info.queue_size` / `queue_depth`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QueueFacts {
    pub size: i64,
    pub depth: i64,
}

/// What a job's payload is made of besides its own rows ([`Assigned`]) and its runner:
/// the read step's result ([`Coordinator::payload_facts`]), the assembly's input.
pub(crate) struct PayloadFacts {
    /// The server's external URL (clone URL, `CI_*_URL`, the ID tokens' issuer).
    pub external_url: String,
    /// The job's Pages site (`CI_PAGES_*`).
    pub pages: super::pages::PagesUrls,
    /// The job span's W3C context, while the coordinator traces.
    pub traceparent: Option<String>,
    /// The predefined variables the pipeline was compiled with.
    pub info: PipelineInfo,
    /// The jobs whose artifacts the job receives, in order.
    pub dependencies: Vec<DependencyFacts>,
    pub pipeline_variables: super::variables::PipelineVariables,
    /// The job's environment row (GitLab's `persisted_environment`).
    pub environment: Option<gantry_store::Environment>,
    pub instance_variables: Arc<Vec<gantry_store::InstanceVariable>>,
    pub settings_variables: variables::Layered,
    /// The variables a manual job was played with.
    pub manual_variables: Vec<(String, String)>,
    /// The instance's signing key, when the job asks for `id_tokens:`.
    pub id_token_key: Option<Arc<super::id_tokens::SigningKey>>,
}

/// One job whose artifacts a job receives.
pub(crate) struct DependencyFacts {
    pub id: i64,
    pub name: String,
    /// Its artifact rows (the archive, its dotenv report, …), expired or not.
    pub artifacts: Vec<gantry_store::Artifact>,
    /// Its dotenv report's variables (empty without one).
    pub dotenv: Vec<(String, String)>,
}

/// What a payload says of the runner that takes the job.
pub(crate) struct PayloadRunner<'a> {
    pub id: i64,
    pub description: &'a str,
    pub tags: &'a [String],
    /// A project runner (its projects' jobs only): `job_info`'s instance-runner count is
    /// `+Inf`.
    pub project_runner: bool,
}

/// Variables being assembled: a later `set` of a name replaces the value in place. A
/// name is stored once, as the map's key: an entry's own `key` stays empty until
/// [`Vars::expand`] moves the name into it.
#[derive(Default)]
struct Vars {
    map: IndexMap<String, JobVariable>,
}

impl Vars {
    /// Room for `n` variables: a payload has about a hundred, and growing the map
    /// rehashes it each time.
    fn with_capacity(n: usize) -> Self {
        Self {
            map: IndexMap::with_capacity(n),
        }
    }
    fn set(&mut self, key: &str, value: impl Into<String>, public: bool, masked: bool, raw: bool) {
        let v = JobVariable {
            key: String::new(),
            value: value.into(),
            public,
            masked,
            file: false,
            raw,
        };
        match self.map.get_mut(key) {
            Some(old) => *old = v,
            None => {
                self.map.insert(key.to_owned(), v);
            }
        }
    }
    /// A CI/CD variable of the settings (instance or project): not public, with its
    /// attributes.
    fn setting(&mut self, key: &str, value: &str, masked: bool, file: bool, raw: bool) {
        self.set(key, value, false, masked, raw);
        if let Some(v) = self.map.get_mut(key) {
            v.file = file;
        }
    }
    fn public(&mut self, key: &str, value: impl Into<String>) {
        self.set(key, value, true, false, false);
    }
    fn yaml(&mut self, vars: &gantry_pipeline::Variables) {
        for (k, v) in vars {
            self.set(k, v.value.clone(), true, false, !v.expand);
        }
    }

    /// GitLab's pre-expansion (`sort_and_expand_all(keep_undefined: true,
    /// expand_raw_refs: false)`): every non-raw value has references to other variables
    /// replaced by their expanded values; references to raw or unknown variables and
    /// circular ones are kept for the runner.
    ///
    /// Cost: O(variables) for values that reference nothing (most: predefined ones), one
    /// scan of each value that may; each value is expanded once (`done`).
    fn expand(self) -> Vec<JobVariable> {
        let mut done: HashMap<String, String> = HashMap::new();
        let mut visiting = HashSet::new();
        // `None`: the value stays as it is (raw, referencing nothing, or unresolvable).
        let values: Vec<Option<String>> = self
            .map
            .iter()
            .map(|(key, v)| {
                if v.raw || !may_reference(&v.value) {
                    None
                } else {
                    expanded(key, &self.map, &mut done, &mut visiting)
                }
            })
            .collect();
        self.map
            .into_iter()
            .zip(values)
            .map(|((key, v), value)| JobVariable {
                key,
                value: value.unwrap_or(v.value),
                ..v
            })
            .collect()
    }
}

/// Whether a value may reference a variable (`$NAME`, `${NAME}`, `%NAME%`): without
/// either character it expands to itself.
fn may_reference(value: &str) -> bool {
    value.bytes().any(|b| b == b'$' || b == b'%')
}

/// The variables a job's `environment:` is expanded with when its pipeline is created
/// (GitLab's `simple_variables`): job and pipeline predefined variables, YAML variables and
/// pipeline variables, expanded; no dotenv variables (no job has run yet).
pub(crate) fn creation_variables(
    m: &gantry_pipeline::Job,
    predefined: &IndexMap<String, String>,
    pipeline_variables: &[(String, String)],
) -> HashMap<String, String> {
    let mut vars = Vars::default();
    vars.public("CI_JOB_NAME", m.name.clone());
    vars.public("CI_JOB_NAME_SLUG", ref_slug(&m.name));
    vars.public("CI_JOB_STAGE", m.stage.clone());
    let group = if m.group_name.is_empty() {
        &m.name
    } else {
        &m.group_name
    };
    vars.public("CI_JOB_GROUP_NAME", group.clone());
    if let Some(i) = m.node_index {
        vars.public("CI_NODE_INDEX", i.to_string());
    }
    vars.public("CI_NODE_TOTAL", m.node_total.unwrap_or(1).to_string());
    for (k, v) in predefined {
        vars.public(k, v.clone());
    }
    vars.yaml(&m.inherited_variables);
    vars.yaml(&m.variables);
    for (k, v) in pipeline_variables {
        vars.set(k, v.clone(), false, false, false);
    }
    vars.expand()
        .into_iter()
        .map(|v| (v.key, v.value))
        .collect()
}

/// `key`'s value with its references expanded (see [`Vars::expand`]); `None` for an
/// unknown or raw variable, and for one met again while it is being expanded (a cycle:
/// the reference is kept). `visiting` is empty again when this returns.
fn expanded(
    key: &str,
    vars: &IndexMap<String, JobVariable>,
    done: &mut HashMap<String, String>,
    visiting: &mut HashSet<String>,
) -> Option<String> {
    if let Some(v) = done.get(key) {
        return Some(v.clone());
    }
    let var = vars.get(key)?;
    if var.raw {
        return None;
    }
    let value = var.value.as_str();
    if !may_reference(value) {
        return Some(value.to_owned());
    }
    if !visiting.insert(key.to_owned()) {
        return None; // a cycle: keep the reference
    }
    let refs = gantry_pipeline::expand::variable_references(value);
    let mut resolved: HashMap<String, String> = HashMap::new();
    for r in refs {
        if r != key && !resolved.contains_key(&r) {
            if let Some(v) = expanded(&r, vars, done, visiting) {
                resolved.insert(r, v);
            }
        }
    }
    visiting.remove(key);
    let result = expand_nested(value, &|n| resolved.get(n).cloned(), Unknown::Keep);
    done.insert(key.to_owned(), result.clone());
    Some(result)
}

/// GitLab's default file name of a report type (`artifacts[].name` of report entries).
fn report_file_name(t: ArtifactType) -> Option<&'static str> {
    use ArtifactType as T;
    Some(match t {
        T::Junit => "junit.xml",
        T::Accessibility => "gl-accessibility.json",
        T::Codequality => "gl-code-quality-report.json",
        T::Sast => "gl-sast-report.json",
        T::SecretDetection => "gl-secret-detection-report.json",
        T::DependencyScanning => "gl-dependency-scanning-report.json",
        T::ContainerScanning => "gl-container-scanning-report.json",
        T::ClusterImageScanning => "gl-cluster-image-scanning-report.json",
        T::Dast => "gl-dast-report.json",
        T::LicenseScanning => "gl-license-scanning-report.json",
        T::Performance => "performance.json",
        T::BrowserPerformance => "browser-performance.json",
        T::LoadPerformance => "load-performance.json",
        T::Metrics => "metrics.txt",
        T::Lsif | T::RepositoryXray => "lsif.json",
        T::Scip => "index.scip",
        T::Dotenv => ".env",
        T::Cobertura => "cobertura-coverage.xml",
        T::Jacoco => "jacoco.xml",
        T::Terraform => "tfplan.json",
        T::ClusterApplications => "gl-cluster-applications.json",
        T::Requirements => "requirements.json",
        T::RequirementsV2 => "requirements_v2.json",
        T::Cyclonedx => "gl-sbom.cdx.json",
        T::Annotations => "gl-annotations.json",
        T::Archive
        | T::Metadata
        | T::Trace
        | T::MetricsReferee
        | T::NetworkReferee
        | T::CoverageFuzzing
        | T::ApiFuzzing
        | T::Sarif => return None,
    })
}

fn artifacts(a: &gantry_pipeline::Artifacts) -> Vec<JobArtifact> {
    let mut out = Vec::new();
    if !a.paths.is_empty() || a.untracked {
        out.push(JobArtifact {
            name: a.name.clone(),
            untracked: Some(a.untracked),
            paths: a.paths.clone(),
            exclude: a.exclude.clone(),
            when: Some(artifacts_when(a.when)),
            expire_in: a.expire_in.clone(),
            artifact_type: ArtifactType::Archive,
            artifact_format: ArtifactFormat::Zip,
        });
    }
    let mut reports: Vec<(String, Vec<String>)> = a
        .reports
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(c) = &a.coverage_report {
        reports.push((c.coverage_format.clone(), vec![c.path.clone()]));
    }
    for (kind, paths) in reports {
        let Ok(t) = kind.parse::<ArtifactType>() else {
            continue;
        };
        out.push(JobArtifact {
            name: report_file_name(t).map(str::to_owned),
            untracked: None,
            paths,
            exclude: Vec::new(),
            when: Some(gantry_protocol::When::Always),
            expire_in: a.expire_in.clone(),
            artifact_type: t,
            artifact_format: t.required_format(),
        });
    }
    out
}

/// `artifacts:when` and `cache:when` on the wire.
fn artifacts_when(when: gantry_pipeline::ArtifactsWhen) -> gantry_protocol::When {
    match when {
        gantry_pipeline::ArtifactsWhen::OnSuccess => gantry_protocol::When::OnSuccess,
        gantry_pipeline::ArtifactsWhen::OnFailure => gantry_protocol::When::OnFailure,
        gantry_pipeline::ArtifactsWhen::Always => gantry_protocol::When::Always,
    }
}

fn pull_policy(p: &[String]) -> Option<Vec<PullPolicy>> {
    let v: Vec<PullPolicy> = p.iter().filter_map(|s| s.parse().ok()).collect();
    (!v.is_empty()).then_some(v)
}

fn executor_opts(user: &Option<String>, platform: &Option<String>) -> ExecutorOptions {
    if user.is_none() && platform.is_none() {
        return ExecutorOptions::default();
    }
    ExecutorOptions {
        docker: Some(DockerExecutorOptions {
            platform: platform.clone(),
            user: user.clone().map(ImageUser::Name),
        }),
        kubernetes: None,
        unsupported: Vec::new(),
    }
}

fn image(i: &gantry_pipeline::Image) -> Image {
    Image {
        name: i.name.clone(),
        entrypoint: i.entrypoint.clone(),
        ports: Vec::new(),
        executor_opts: executor_opts(&i.docker_user, &i.docker_platform),
        pull_policy: pull_policy(&i.pull_policy),
    }
}

fn service(s: &gantry_pipeline::Service) -> Service {
    Service {
        name: s.name.clone(),
        entrypoint: s.entrypoint.clone(),
        ports: Vec::new(),
        executor_opts: executor_opts(&s.docker_user, &s.docker_platform),
        pull_policy: pull_policy(&s.pull_policy),
        alias: s.alias.clone(),
        command: s.command.clone(),
        variables: s
            .variables
            .iter()
            .map(|(k, v)| JobVariable {
                key: k.clone(),
                value: v.value.clone(),
                public: true,
                masked: false,
                file: false,
                raw: !v.expand,
            })
            .collect(),
    }
}

/// What dependency resolution needs of a job row (names, stages and attempts never
/// change; new attempts are new rows).
#[derive(Clone, Debug)]
pub(crate) struct DepRow {
    pub id: i64,
    pub name: String,
    pub stage_idx: i64,
    pub retried: bool,
    pub bridge: bool,
}

impl DepRow {
    pub fn new(r: &gantry_store::Job, spec: &StoredSpec) -> DepRow {
        DepRow {
            id: r.id,
            name: r.name.clone(),
            stage_idx: r.stage_idx,
            retried: r.retried,
            bridge: spec.is_bridge(),
        }
    }
}

/// A pipeline's [`DepRow`]s, with the current attempt of each name indexed (a DAG job's
/// dependencies are found in O(needs), not O(jobs)) and the rows ordered by stage (a stage
/// job's, the jobs of earlier stages, in O(log jobs + those jobs · log)): a job of a
/// pipeline's first stage finds none without looking at the others.
#[derive(Clone, Debug, Default)]
pub(crate) struct DepRows {
    rows: Vec<DepRow>,
    current: std::collections::HashMap<String, usize>,
    /// Indexes into `rows`, by stage, then by their place in `rows`.
    by_stage: Vec<usize>,
}

impl DepRows {
    pub fn new(rows: Vec<DepRow>) -> DepRows {
        let current = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.retried)
            .map(|(i, r)| (r.name.clone(), i))
            .collect();
        let mut by_stage: Vec<usize> = (0..rows.len()).collect();
        by_stage.sort_by_key(|&i| (rows[i].stage_idx, i));
        DepRows {
            rows,
            current,
            by_stage,
        }
    }

    /// The rows of the stages before `stage_idx`, in their order in `rows`.
    fn before_stage(&self, stage_idx: i64) -> impl Iterator<Item = &DepRow> {
        let end = self
            .by_stage
            .partition_point(|&i| self.rows[i].stage_idx < stage_idx);
        let mut earlier = self.by_stage[..end].to_vec();
        earlier.sort_unstable();
        earlier.into_iter().map(|i| &self.rows[i])
    }
}

/// The jobs whose artifacts (and dotenv variables) this job receives (`ci-yaml.md` §5.8):
/// none with `dependencies: []`; the needed jobs with `artifacts: true` for a DAG job,
/// else every job of earlier stages; narrowed to `dependencies` when listed. Current
/// attempts only, no trigger jobs.
pub(crate) fn dependency_rows<'a>(
    spec: &StoredSpec,
    job: &gantry_store::Job,
    rows: &'a DepRows,
) -> Vec<&'a DepRow> {
    if spec.job.dependencies.as_ref().is_some_and(Vec::is_empty) {
        return Vec::new();
    }
    let candidates: Vec<&DepRow> = match &spec.job.needs {
        Some(needs) => needs
            .iter()
            .filter(|n| n.artifacts)
            .filter_map(|n| rows.current.get(&n.job).map(|&i| &rows.rows[i]))
            .filter(|r| !r.bridge && r.id != job.id)
            .collect(),
        None => rows
            .before_stage(job.stage_idx)
            .filter(|r| !r.retried && !r.bridge && r.id != job.id)
            .collect(),
    };
    match &spec.job.dependencies {
        Some(names) => candidates
            .into_iter()
            .filter(|r| names.contains(&r.name))
            .collect(),
        None => candidates,
    }
}

impl Coordinator {
    /// The payload of a job just assigned to `runner`: what it is made of is read
    /// ([`Coordinator::payload_facts`]), then put together without I/O
    /// ([`assemble::assemble`]). The inner `Err` says why the job cannot start.
    pub(crate) async fn build_payload(
        &self,
        a: &Assigned<'_>,
        runner: &Runner,
        now: i64,
    ) -> Result<std::result::Result<JobResponse, Refusal>> {
        let facts = match self.payload_facts(a).await? {
            Ok(facts) => facts,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let runner = PayloadRunner {
            id: runner.id,
            description: &runner.description,
            tags: &runner.tag_list,
            project_runner: runner.project_id.is_some(),
        };
        assemble::assemble(a, &runner, &facts, now)
    }

    /// GitLab's dynamic environment URL, when a deploy job stores its dotenv report
    /// `dotenv`: its URL expanded with the variables its payload had and that report
    /// ([`deployment_url`]), kept on its deployment for its environment to take when the
    /// job succeeds. Cost: the job's payload facts, as when it was assigned; only for a
    /// deploy job whose `url:` names a variable.
    pub(crate) async fn renew_deployment_url(
        &self,
        job: &gantry_store::Job,
        dotenv: &[(String, String)],
    ) -> Result<()> {
        let spec = StoredSpec::parse(&job.spec)?;
        if written_deployment_url(&spec, job).is_none() {
            return Ok(());
        }
        let pipeline = self.inner.store.pipeline(job.pipeline_id).await?;
        let project = self.facts().project(job.project_id).await?;
        let runner = match job.runner_id {
            Some(id) => self.inner.store.runner(id).await.ok(),
            None => None,
        };
        let a = Assigned {
            job,
            spec: &spec,
            pipeline: &pipeline,
            project: &project,
            token: "",
            queue: QueueFacts::default(),
        };
        let mut facts = match self.payload_facts(&a).await? {
            Ok(facts) => facts,
            Err(_) => return Ok(()),
        };
        facts.id_token_key = None;
        let no_tags = Vec::new();
        let runner = PayloadRunner {
            id: runner.as_ref().map_or(0, |r| r.id),
            description: runner.as_ref().map_or("", |r| r.description.as_str()),
            tags: runner.as_ref().map_or(&no_tags, |r| &r.tags),
            project_runner: runner.as_ref().is_some_and(|r| r.project_id.is_some()),
        };
        let Ok(payload) = assemble::assemble(&a, &runner, &facts, job.started_at.unwrap_or(0))?
        else {
            return Ok(());
        };
        self.keep_deployment_url(&a, &payload, dotenv).await
    }

    /// Keeps on the deploy job `a`'s deployment its URL expanded with `payload`'s
    /// variables and `dotenv` ([`deployment_url`]), when that differs from the one its
    /// pipeline's creation could expand (creation knows no CI/CD or dotenv variables).
    /// One write, for such jobs only: at assignment and at their dotenv report.
    pub(crate) async fn keep_deployment_url(
        &self,
        a: &Assigned<'_>,
        payload: &JobResponse,
        dotenv: &[(String, String)],
    ) -> Result<()> {
        let Some(written) = written_deployment_url(a.spec, a.job) else {
            return Ok(());
        };
        let Some(url) = deployment_url(written, &payload.variables, dotenv) else {
            return Ok(());
        };
        let at_creation = a.spec.environment.as_ref().and_then(|e| e.url.as_deref());
        if at_creation != Some(url.as_str()) {
            self.inner.store.set_deployment_url(a.job.id, &url).await?;
        }
        Ok(())
    }

    /// The read step of a payload: everything besides the job's own rows, from the
    /// store, git and this coordinator's settings. Cached where the source is
    /// (dependency rows per pipeline, settings variables, commit facts): a job's reads
    /// are its dependencies' artifacts and dotenv rows, its environment row, and the
    /// pipeline's origin facts. A `needs:pipeline:job` that cannot be resolved refuses
    /// the job here.
    async fn payload_facts(
        &self,
        a: &Assigned<'_>,
    ) -> Result<std::result::Result<PayloadFacts, Refusal>> {
        let store = &self.inner.store;
        let (job, spec, pipeline, project) = (a.job, a.spec, a.pipeline, a.project);
        let m = &spec.job;

        // Dependencies: the rows whose artifacts (and dotenv variables) the job gets.
        let rows = self.dep_rows(pipeline.id).await?;
        let same_pipeline = dependency_rows(spec, job, &rows);
        let mut deps: Vec<(i64, String)> = same_pipeline
            .iter()
            .map(|d| (d.id, d.name.clone()))
            .collect();
        // `needs:pipeline:job`: jobs of another pipeline of the same hierarchy.
        match self
            .cross_pipeline_dependencies(pipeline, project, spec)
            .await?
        {
            Ok(cross) => deps.extend(cross.into_iter().map(|(id, name, _)| (id, name))),
            Err(message) => return Ok(Err(Refusal::MissingDependency(message))),
        }
        // The dependencies' artifacts: O(dependencies), not O(jobs of their pipelines).
        let mut by_job: HashMap<i64, Vec<gantry_store::Artifact>> = HashMap::new();
        if !deps.is_empty() {
            let ids: Vec<i64> = deps.iter().map(|(id, _)| *id).collect();
            for a in store.artifacts_of_jobs(&ids).await? {
                by_job.entry(a.job_id).or_default().push(a);
            }
        }
        let mut dependencies = Vec::with_capacity(deps.len());
        for (id, name) in deps {
            let artifacts = by_job.get(&id).cloned().unwrap_or_default();
            let dotenv = if artifacts.iter().any(|a| a.file_type == "dotenv") {
                self.artifacts().dotenv_variables(id).await?
            } else {
                Vec::new()
            };
            dependencies.push(DependencyFacts {
                id,
                name,
                artifacts,
                dotenv,
            });
        }

        // The environment row (GitLab's `persisted_environment`).
        let environment = match job.environment_id.filter(|_| m.environment.is_some()) {
            Some(id) => store.environments_by_id(&[id]).await?.pop(),
            None => None,
        };
        let id_token_key = match &m.id_tokens {
            Some(tokens) if tokens.as_object().is_some_and(|t| !t.is_empty()) => {
                Some(self.signing_key().await?)
            }
            _ => None,
        };
        Ok(Ok(PayloadFacts {
            external_url: self.external_url().to_owned(),
            pages: self.facts().pages_urls(
                &project.name,
                m.pages.as_ref().and_then(|p| p.path_prefix.as_deref()),
            ),
            traceparent: self.job_traceparent(pipeline, job.id),
            info: self
                .facts()
                .pipeline_info(self.sources(), self.settings(), project, pipeline)
                .await,
            dependencies,
            pipeline_variables: self.settings().pipeline_variables(pipeline)?,
            environment,
            instance_variables: self.settings().kept_instance_variables().await?,
            settings_variables: self
                .settings()
                .settings_variables(project.id, &project.name)
                .await?,
            manual_variables: self.settings().manual_variables(job, spec)?,
            id_token_key,
        }))
    }
}

/// The `environment:url` as written of a deploy job (action `start`, with an
/// environment) when it names a variable: a URL that may be known only once the job has
/// its variables (CI/CD, dotenv).
fn written_deployment_url<'a>(spec: &'a StoredSpec, job: &gantry_store::Job) -> Option<&'a str> {
    let env = spec.job.environment.as_ref()?;
    if env.action() != "start" || job.environment_id.is_none() {
        return None;
    }
    env.url.as_deref().filter(|u| u.contains('$'))
}

/// GitLab's `Deployments::UpdateEnvironmentService#expanded_environment_url`: `written`
/// expanded with a job's variables, its own dotenv report's last, unknown ones empty;
/// `None` when the result is not a URL an environment may keep (GitLab does not save it).
fn deployment_url(
    written: &str,
    variables: &[JobVariable],
    dotenv: &[(String, String)],
) -> Option<String> {
    let mut values: HashMap<&str, &str> = variables
        .iter()
        .map(|v| (v.key.as_str(), v.value.as_str()))
        .collect();
    values.extend(dotenv.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let url = gantry_pipeline::expand::expand_server(
        written,
        &|name: &str| values.get(name).map(|v| (*v).to_owned()),
        Unknown::Empty,
    );
    super::environments::check_url(&url).is_ok().then_some(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str, bool)]) -> Vec<(String, String)> {
        let mut v = Vars::default();
        for (k, val, raw) in list {
            v.set(k, *val, true, false, *raw);
        }
        v.expand().into_iter().map(|j| (j.key, j.value)).collect()
    }

    #[test]
    fn values_are_pre_expanded_like_gitlab() {
        let got = vars(&[
            ("A", "a", false),
            ("B", "${A}-$A-$UNKNOWN-$$A", false),
            ("C", "$B!", false),
            ("R", "$A", true),
            ("D", "$R", false),
            ("X", "$Y", false),
            ("Y", "$X", false),
            ("P", "%A%/p", false),
            ("Q", "${P}/q", false),
        ]);
        let get = |k: &str| {
            got.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert_eq!(get("B"), "a-a-$UNKNOWN-$$A");
        assert_eq!(get("C"), "a-a-$UNKNOWN-$$A!");
        assert_eq!(get("R"), "$A", "raw values are never expanded");
        assert_eq!(
            get("D"),
            "$R",
            "references to raw variables are left to the runner"
        );
        assert_eq!((get("X"), get("Y")), ("$X".to_owned(), "$X".to_owned()));
        assert_eq!((get("P"), get("Q")), ("a/p".to_owned(), "a/p/q".to_owned()));
    }

    #[test]
    fn the_jobs_of_earlier_stages_come_in_the_rows_order() {
        let row = |id: i64, stage_idx: i64| DepRow {
            id,
            name: format!("job{id}"),
            stage_idx,
            retried: false,
            bridge: false,
        };
        // A later attempt of a first-stage job has a higher id than the next stages' jobs.
        let rows = DepRows::new(vec![row(1, 0), row(2, 1), row(3, 0), row(4, 2), row(5, 0)]);
        let before = |stage: i64| -> Vec<i64> { rows.before_stage(stage).map(|r| r.id).collect() };
        assert_eq!(before(0), Vec::<i64>::new());
        assert_eq!(before(1), [1, 3, 5]);
        assert_eq!(before(2), [1, 2, 3, 5]);
        assert_eq!(before(9), [1, 2, 3, 4, 5]);
        assert_eq!(DepRows::new(Vec::new()).before_stage(3).count(), 0);
    }

    #[test]
    fn later_sources_replace_earlier_ones() {
        let got = vars(&[("A", "1", false), ("B", "$A", false), ("A", "2", false)]);
        assert_eq!(
            got,
            [
                ("A".to_owned(), "2".to_owned()),
                ("B".to_owned(), "2".to_owned())
            ]
        );
    }
}
