//! The pipeline context a configuration is evaluated in: the variables known before any
//! YAML is read (predefined `CI_*` values and the pipeline's own variables) and the set of
//! changed files for `rules:changes`.
//!
//! # Predefined variables
//!
//! [`PipelineInfo::predefined`] sets GitLab's pre-pipeline variables with GitLab's values
//! (`Project#predefined_project_variables`, `#predefined_ci_server_variables`,
//! `Gitlab::Ci::Variables::Builder::Pipeline`); the server adds the job-level ones
//! (`coordinator::payload`: `CI_JOB_*`, `CI_ENVIRONMENT_*`, `CI_RUNNER_*`, `CI_PAGES_*`,
//! `CI_TRIGGER_SHORT_TOKEN`, …) and the
//! runner its own (`CI_RUNNER_VERSION`, `CI_SHARED_ENVIRONMENT` or
//! `CI_DISPOSABLE_ENVIRONMENT`, `CI_JOB_STATUS`, the directories).
//!
//! Left out of GitLab's documented list (18.x), because Gantry has nothing they describe:
//! `CHAT_CHANNEL`/`CHAT_INPUT`/`CHAT_USER_ID` (no ChatOps), `CI_DEPENDENCY_PROXY_*` (no
//! dependency proxy), `CI_DEPLOY_FREEZE` (no freeze periods), `CI_DEPLOY_USER`/`_PASSWORD`
//! (no deploy tokens), `CI_GITLAB_FIPS_MODE` (set only in FIPS mode),
//! `CI_HAS_OPEN_REQUIREMENTS`, `CI_MERGE_REQUEST_APPROVED` and
//! `CI_PROJECT_CLASSIFICATION_LABEL` (EE features),
//! `CI_PROJECT_REPOSITORY_LANGUAGES` (no language detection), `CI_SERVER_SHELL_SSH_*` (no
//! Git over SSH), `KUBECONFIG`
//! (no Kubernetes agent). `CI_PROJECT_DESCRIPTION` and `CI_PROJECT_TOPICS` are empty:
//! Gantry's projects have neither. `CI_SERVER_VERSION*` name [`GITLAB_VERSION`], the
//! GitLab release whose behaviour Gantry follows; `CI_SERVER_NAME` stays `Gantry`.

use indexmap::IndexMap;

use crate::expand::ref_slug;

/// What triggered the pipeline (`CI_PIPELINE_SOURCE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Push,
    Web,
    Api,
    Schedule,
    Trigger,
    MergeRequestEvent,
    Pipeline,
    ParentPipeline,
    Chat,
    Webide,
    External,
    ExternalPullRequestEvent,
}

impl Source {
    pub const ALL: [Source; 12] = [
        Source::Push,
        Source::Web,
        Source::Api,
        Source::Schedule,
        Source::Trigger,
        Source::MergeRequestEvent,
        Source::Pipeline,
        Source::ParentPipeline,
        Source::Chat,
        Source::Webide,
        Source::External,
        Source::ExternalPullRequestEvent,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Push => "push",
            Source::Web => "web",
            Source::Api => "api",
            Source::Schedule => "schedule",
            Source::Trigger => "trigger",
            Source::MergeRequestEvent => "merge_request_event",
            Source::Pipeline => "pipeline",
            Source::ParentPipeline => "parent_pipeline",
            Source::Chat => "chat",
            Source::Webide => "webide",
            Source::External => "external",
            Source::ExternalPullRequestEvent => "external_pull_request_event",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// Facts about the commit and project from which predefined variables are derived.
#[derive(Clone, Debug)]
pub struct PipelineInfo {
    /// Branch or tag name.
    pub ref_name: String,
    pub is_tag: bool,
    pub source: Source,
    pub sha: String,
    /// Previous head of the branch; `None` for a new branch, a tag, or a non-push source.
    pub before_sha: Option<String>,
    pub default_branch: String,
    pub ref_protected: bool,
    pub commit_message: String,
    pub commit_author: String,
    pub commit_timestamp: String,
    pub tag_message: Option<String>,
    pub project_name: String,
    pub project_namespace: String,
    pub project_id: u64,
    pub server_url: String,
    pub config_path: String,
    pub user_login: String,
    pub user_name: String,
    pub user_email: String,
    pub user_id: u64,
    pub pipeline_iid: u64,
    /// The merge request of a merge request pipeline (`Source::MergeRequestEvent`):
    /// `ref_name` is then its source branch, and the pipeline has no `CI_COMMIT_BRANCH`.
    pub merge_request: Option<MergeRequestInfo>,
    /// The id of the project's group (`CI_PROJECT_NAMESPACE_ID`).
    pub namespace_id: u64,
    /// The pipeline schedule's description, for a scheduled pipeline
    /// (`CI_PIPELINE_SCHEDULE_DESCRIPTION`).
    pub schedule_description: Option<String>,
    /// The trigger job that created this pipeline, for a downstream pipeline
    /// (`CI_UPSTREAM_*`).
    pub upstream: Option<Upstream>,
    /// The container registry the server names (`host[:port]`, `CI_REGISTRY`).
    pub registry: Option<String>,
    /// The open merge requests from the pipeline's branch, newest first, at most four, as
    /// references (`group/project!3`): `CI_OPEN_MERGE_REQUESTS` when there are any
    /// (GitLab's `Ci::Pipeline#open_merge_requests_refs`; a merge request pipeline's own
    /// is among them).
    pub open_merge_requests: Vec<String>,
    /// The description of the release of the pipeline's tag, for a tag that has one
    /// (`CI_RELEASE_DESCRIPTION`, cut as [`release_description`] cuts it).
    pub release_description: Option<String>,
}

/// GitLab's `Gitlab::Ci::Variables::Builder::Release::DESCRIPTION_LIMIT`, in characters.
pub const RELEASE_DESCRIPTION_LIMIT: usize = 1024;

/// `CI_RELEASE_DESCRIPTION`'s value: a release's description cut as ActiveSupport's
/// `String#truncate(1024)` cuts it — at most [`RELEASE_DESCRIPTION_LIMIT`] characters,
/// the last three of a cut one `...`.
pub fn release_description(description: &str) -> String {
    if description.chars().count() <= RELEASE_DESCRIPTION_LIMIT {
        return description.to_owned();
    }
    let mut cut: String = description
        .chars()
        .take(RELEASE_DESCRIPTION_LIMIT - 3)
        .collect();
    cut.push_str("...");
    cut
}

/// The GitLab version Gantry's API answers with (`GET /version`) and its jobs see as
/// `CI_SERVER_VERSION`: the GitLab release whose behaviour Gantry follows.
pub const GITLAB_VERSION: &str = "18.6.0";

/// `CI_SERVER_REVISION` (and `GET /version`'s `revision`): Gantry's own version.
pub fn server_revision() -> String {
    format!("gantry-{}", env!("CARGO_PKG_VERSION"))
}

/// GitLab's `GITLAB_CI_MAX_COMMIT_MESSAGE_SIZE_IN_BYTES` default: `CI_COMMIT_MESSAGE` (and
/// the title and description made from it) are cut to this many bytes, and
/// `CI_COMMIT_MESSAGE_IS_TRUNCATED` says so.
pub const MAX_COMMIT_MESSAGE_BYTES: usize = 100 * 1024;

/// A downstream pipeline's trigger job (GitLab's `Ci::Sources::Pipeline`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Upstream {
    pub pipeline_id: u64,
    pub project_id: u64,
    pub job_id: u64,
}

/// A merge request pipeline's merge request: what GitLab's
/// `Gitlab::Ci::Variables::Builder::Pipeline#predefined_merge_request_variables` and
/// `MergeRequest#predefined_variables` read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeRequestInfo {
    pub id: u64,
    pub iid: u64,
    pub title: String,
    pub description: String,
    pub source_branch: String,
    pub target_branch: String,
    pub source_branch_protected: bool,
    pub target_branch_protected: bool,
    pub event_type: MergeRequestEventType,
    /// The source branch's head, for `merged_result` and `merge_train` pipelines only
    /// (GitLab leaves `CI_MERGE_REQUEST_SOURCE_BRANCH_SHA` empty in detached ones).
    pub source_sha: Option<String>,
    /// The target branch's head, for `merged_result` and `merge_train` pipelines only.
    pub target_sha: Option<String>,
    /// The merge request diff (`CI_MERGE_REQUEST_DIFF_ID`, `CI_MERGE_REQUEST_DIFF_BASE_SHA`:
    /// the merge base of the source and target branches), when there is one.
    pub diff: Option<MergeRequestDiff>,
    pub labels: Vec<String>,
    pub assignees: Vec<String>,
    pub milestone: Option<String>,
    pub squash_on_merge: bool,
    pub draft: bool,
    /// A forge's pull request (GitHub, Gitea/Forgejo): its `CI_EXTERNAL_PULL_REQUEST_*`
    /// variables too (GitLab's `Ci::ExternalPullRequest#predefined_variables`).
    pub external: Option<ExternalPullRequestInfo>,
}

/// What GitLab's `Ci::ExternalPullRequest#predefined_variables` read: a pull request of a
/// forge that is not GitLab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalPullRequestInfo {
    /// The pull request's number on the forge.
    pub iid: u64,
    /// `owner/name` of the repositories.
    pub source_repository: String,
    pub target_repository: String,
    /// The branches' heads the forge's event named.
    pub source_sha: String,
    pub target_sha: String,
}

impl ExternalPullRequestInfo {
    fn predefined(&self, source_branch: &str, target_branch: &str) -> Vec<(&'static str, String)> {
        vec![
            ("CI_EXTERNAL_PULL_REQUEST_IID", self.iid.to_string()),
            (
                "CI_EXTERNAL_PULL_REQUEST_SOURCE_REPOSITORY",
                self.source_repository.clone(),
            ),
            (
                "CI_EXTERNAL_PULL_REQUEST_TARGET_REPOSITORY",
                self.target_repository.clone(),
            ),
            (
                "CI_EXTERNAL_PULL_REQUEST_SOURCE_BRANCH_SHA",
                self.source_sha.clone(),
            ),
            (
                "CI_EXTERNAL_PULL_REQUEST_TARGET_BRANCH_SHA",
                self.target_sha.clone(),
            ),
            (
                "CI_EXTERNAL_PULL_REQUEST_SOURCE_BRANCH_NAME",
                source_branch.to_owned(),
            ),
            (
                "CI_EXTERNAL_PULL_REQUEST_TARGET_BRANCH_NAME",
                target_branch.to_owned(),
            ),
        ]
    }
}

/// A merge request's diff version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeRequestDiff {
    pub id: u64,
    pub base_sha: String,
}

/// `CI_MERGE_REQUEST_EVENT_TYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeRequestEventType {
    /// The source branch's head, on its own.
    Detached,
    /// The result of merging the source into the target branch.
    MergedResult,
    /// A merge train's merged result.
    MergeTrain,
}

impl MergeRequestEventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Detached => "detached",
            Self::MergedResult => "merged_result",
            Self::MergeTrain => "merge_train",
        }
    }
}

impl Default for PipelineInfo {
    fn default() -> Self {
        Self {
            ref_name: "main".into(),
            is_tag: false,
            source: Source::Push,
            sha: "0".repeat(40),
            before_sha: None,
            default_branch: "main".into(),
            ref_protected: false,
            commit_message: String::new(),
            commit_author: String::new(),
            commit_timestamp: String::new(),
            tag_message: None,
            project_name: "project".into(),
            project_namespace: "gantry".into(),
            project_id: 1,
            server_url: "http://localhost:8080".into(),
            config_path: ".gitlab-ci.yml".into(),
            user_login: "gantry".into(),
            user_name: "Gantry".into(),
            user_email: "gantry@localhost".into(),
            user_id: 1,
            pipeline_iid: 1,
            merge_request: None,
            namespace_id: 1,
            schedule_description: None,
            upstream: None,
            registry: None,
            open_merge_requests: Vec::new(),
            release_description: None,
        }
    }
}

impl PipelineInfo {
    /// The predefined variables available before the pipeline exists (spec §6.7, "P"
    /// and the pipeline-level "L" ones usable in rules).
    pub fn predefined(&self) -> IndexMap<String, String> {
        let mut v = IndexMap::new();
        let mut set = |k: &str, val: String| {
            v.insert(k.to_owned(), val);
        };
        let project_path = format!("{}/{}", self.project_namespace, self.project_name);
        let server = self.server_url.trim_end_matches('/').to_owned();
        let (protocol, host_port) = server.split_once("://").unwrap_or(("http", &server));
        let (host, port) = match host_port.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), p.to_owned()),
            None => (
                host_port.to_owned(),
                if protocol == "https" {
                    "443".into()
                } else {
                    "80".into()
                },
            ),
        };
        // Gantry has no licensed features (GitLab CE's empty list): templates' rules such
        // as `$GITLAB_FEATURES =~ /\bsast_advanced\b/` read it.
        set("GITLAB_FEATURES", String::new());
        set("CI", "true".into());
        set("GITLAB_CI", "true".into());
        set("CI_SERVER", "yes".into());
        set("CI_SERVER_URL", server.clone());
        set("CI_SERVER_HOST", host.clone());
        set("CI_SERVER_PORT", port.clone());
        set("CI_SERVER_PROTOCOL", protocol.to_owned());
        // GitLab's FQDN names a non-standard port (`gitlab.example.com:8080`).
        let standard = matches!((protocol, port.as_str()), ("https", "443") | ("http", "80"));
        set(
            "CI_SERVER_FQDN",
            if standard {
                host
            } else {
                format!("{host}:{port}")
            },
        );
        set("CI_SERVER_NAME", "Gantry".into());
        set("CI_SERVER_VERSION", GITLAB_VERSION.into());
        let mut parts = GITLAB_VERSION.split('.');
        for key in [
            "CI_SERVER_VERSION_MAJOR",
            "CI_SERVER_VERSION_MINOR",
            "CI_SERVER_VERSION_PATCH",
        ] {
            set(key, parts.next().unwrap_or("0").to_owned());
        }
        set("CI_SERVER_REVISION", server_revision());
        set("CI_API_V4_URL", format!("{server}/api/v4"));
        set("CI_API_GRAPHQL_URL", format!("{server}/api/graphql"));
        set("CI_PROJECT_ID", self.project_id.to_string());
        set("CI_PROJECT_NAME", self.project_name.clone());
        set("CI_PROJECT_TITLE", self.project_name.clone());
        set("CI_PROJECT_PATH", project_path.clone());
        set("CI_PROJECT_PATH_SLUG", ref_slug(&project_path));
        // Gantry's projects have no description or topics: GitLab's values for such a
        // project.
        set("CI_PROJECT_DESCRIPTION", String::new());
        set("CI_PROJECT_TOPICS", String::new());
        set("CI_PROJECT_NAMESPACE", self.project_namespace.clone());
        set(
            "CI_PROJECT_NAMESPACE_SLUG",
            ref_slug(&self.project_namespace),
        );
        set("CI_PROJECT_NAMESPACE_ID", self.namespace_id.to_string());
        set(
            "CI_PROJECT_ROOT_NAMESPACE",
            self.project_namespace
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned(),
        );
        set("CI_PROJECT_URL", format!("{server}/{project_path}"));
        set("CI_PROJECT_VISIBILITY", "private".into());
        set("CI_CONFIG_PATH", self.config_path.clone());
        set("CI_TEMPLATE_REGISTRY_HOST", "registry.gitlab.com".into());
        // GitLab's `Project#container_registry_variables`: the registry, and the project's
        // image path in it (lower-cased, as registry paths are).
        if let Some(registry) = self.registry.as_deref().filter(|r| !r.is_empty()) {
            set("CI_REGISTRY", registry.to_owned());
            set(
                "CI_REGISTRY_IMAGE",
                format!("{registry}/{}", project_path.to_lowercase()),
            );
        }
        set("CI_DEFAULT_BRANCH", self.default_branch.clone());
        set("CI_DEFAULT_BRANCH_SLUG", ref_slug(&self.default_branch));
        set("CI_COMMIT_SHA", self.sha.clone());
        set("CI_COMMIT_SHORT_SHA", self.sha.chars().take(8).collect());
        set(
            "CI_COMMIT_BEFORE_SHA",
            self.before_sha.clone().unwrap_or_else(|| "0".repeat(40)),
        );
        set("CI_COMMIT_REF_NAME", self.ref_name.clone());
        set("CI_COMMIT_REF_SLUG", ref_slug(&self.ref_name));
        set("CI_COMMIT_REF_PROTECTED", self.ref_protected.to_string());
        if self.is_tag {
            set("CI_COMMIT_TAG", self.ref_name.clone());
            set(
                "CI_COMMIT_TAG_MESSAGE",
                self.tag_message.clone().unwrap_or_default(),
            );
        } else if self.merge_request.is_none() {
            // A merge request pipeline runs for `refs/merge-requests/<iid>/head`, not a
            // branch (GitLab's `Ci::Pipeline#branch?` is false).
            set("CI_COMMIT_BRANCH", self.ref_name.clone());
        }
        let mut message = self.commit_message.clone();
        let truncated = message.len() > MAX_COMMIT_MESSAGE_BYTES;
        if truncated {
            let mut end = MAX_COMMIT_MESSAGE_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        let (title, description) = match message.split_once('\n') {
            Some((t, d)) => (t.to_owned(), d.trim_start_matches('\n').to_owned()),
            None => (message.clone(), String::new()),
        };
        set("CI_COMMIT_MESSAGE", message);
        set("CI_COMMIT_MESSAGE_IS_TRUNCATED", truncated.to_string());
        set("CI_COMMIT_TITLE", title);
        set("CI_COMMIT_DESCRIPTION", description);
        set("CI_COMMIT_AUTHOR", self.commit_author.clone());
        set("CI_COMMIT_TIMESTAMP", self.commit_timestamp.clone());
        set("CI_PIPELINE_SOURCE", self.source.as_str().to_owned());
        set("CI_PIPELINE_IID", self.pipeline_iid.to_string());
        if self.source == Source::Trigger {
            set("CI_PIPELINE_TRIGGERED", "true".into());
        }
        if let Some(description) = &self.schedule_description {
            set("CI_PIPELINE_SCHEDULE_DESCRIPTION", description.clone());
        }
        if let Some(up) = &self.upstream {
            set("CI_UPSTREAM_PIPELINE_ID", up.pipeline_id.to_string());
            set("CI_UPSTREAM_PROJECT_ID", up.project_id.to_string());
            set("CI_UPSTREAM_JOB_ID", up.job_id.to_string());
        }
        if let Some(mr) = &self.merge_request {
            for (k, val) in mr.predefined(
                &project_path,
                &format!("{server}/{project_path}"),
                self.project_id,
            ) {
                set(k, val);
            }
        }
        if !self.open_merge_requests.is_empty() {
            set("CI_OPEN_MERGE_REQUESTS", self.open_merge_requests.join(","));
        }
        if let Some(mr) = &self.merge_request {
            if let Some(external) = &mr.external {
                for (k, val) in external.predefined(&mr.source_branch, &mr.target_branch) {
                    set(k, val);
                }
            }
        }
        set("GITLAB_USER_ID", self.user_id.to_string());
        set("GITLAB_USER_LOGIN", self.user_login.clone());
        set("GITLAB_USER_NAME", self.user_name.clone());
        set("GITLAB_USER_EMAIL", self.user_email.clone());
        v
    }
}

/// GitLab's `MergeRequest::CI_MERGE_REQUEST_DESCRIPTION_MAX_LENGTH`: longer descriptions
/// are cut and `CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED` is `true`.
const MR_DESCRIPTION_MAX: usize = 2700;

impl MergeRequestInfo {
    /// The `CI_MERGE_REQUEST_*` variables of a pipeline for
    /// this merge request, in GitLab's order, for a merge request of the pipeline's own
    /// project (no forks).
    fn predefined(
        &self,
        project_path: &str,
        project_url: &str,
        project_id: u64,
    ) -> Vec<(&'static str, String)> {
        let mut v = vec![
            (
                "CI_MERGE_REQUEST_EVENT_TYPE",
                self.event_type.as_str().to_owned(),
            ),
            (
                "CI_MERGE_REQUEST_SOURCE_BRANCH_SHA",
                self.source_sha.clone().unwrap_or_default(),
            ),
            (
                "CI_MERGE_REQUEST_TARGET_BRANCH_SHA",
                self.target_sha.clone().unwrap_or_default(),
            ),
        ];
        if let Some(diff) = &self.diff {
            v.push(("CI_MERGE_REQUEST_DIFF_ID", diff.id.to_string()));
            v.push(("CI_MERGE_REQUEST_DIFF_BASE_SHA", diff.base_sha.clone()));
        }
        let (description, truncated) = match self.description.char_indices().nth(MR_DESCRIPTION_MAX)
        {
            Some((at, _)) => (self.description[..at].to_owned(), true),
            None => (self.description.clone(), false),
        };
        v.extend([
            ("CI_MERGE_REQUEST_ID", self.id.to_string()),
            ("CI_MERGE_REQUEST_IID", self.iid.to_string()),
            (
                "CI_MERGE_REQUEST_REF_PATH",
                format!("refs/merge-requests/{}/head", self.iid),
            ),
            ("CI_MERGE_REQUEST_PROJECT_ID", project_id.to_string()),
            ("CI_MERGE_REQUEST_PROJECT_PATH", project_path.to_owned()),
            ("CI_MERGE_REQUEST_PROJECT_URL", project_url.to_owned()),
            (
                "CI_MERGE_REQUEST_TARGET_BRANCH_NAME",
                self.target_branch.clone(),
            ),
            (
                "CI_MERGE_REQUEST_TARGET_BRANCH_PROTECTED",
                self.target_branch_protected.to_string(),
            ),
            ("CI_MERGE_REQUEST_TITLE", self.title.clone()),
            ("CI_MERGE_REQUEST_DRAFT", self.draft.to_string()),
            ("CI_MERGE_REQUEST_DESCRIPTION", description),
            (
                "CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED",
                truncated.to_string(),
            ),
        ]);
        if !self.assignees.is_empty() {
            v.push(("CI_MERGE_REQUEST_ASSIGNEES", self.assignees.join(",")));
        }
        if let Some(m) = &self.milestone {
            v.push(("CI_MERGE_REQUEST_MILESTONE", m.clone()));
        }
        if !self.labels.is_empty() {
            v.push(("CI_MERGE_REQUEST_LABELS", self.labels.join(",")));
        }
        v.extend([
            (
                "CI_MERGE_REQUEST_SQUASH_ON_MERGE",
                self.squash_on_merge.to_string(),
            ),
            ("CI_MERGE_REQUEST_SOURCE_PROJECT_ID", project_id.to_string()),
            (
                "CI_MERGE_REQUEST_SOURCE_PROJECT_PATH",
                project_path.to_owned(),
            ),
            (
                "CI_MERGE_REQUEST_SOURCE_PROJECT_URL",
                project_url.to_owned(),
            ),
            (
                "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME",
                self.source_branch.clone(),
            ),
            (
                "CI_MERGE_REQUEST_SOURCE_BRANCH_PROTECTED",
                self.source_branch_protected.to_string(),
            ),
        ]);
        v
    }
}

/// The evaluation context of one pipeline.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// Predefined variables known before the pipeline exists.
    pub predefined: IndexMap<String, String>,
    /// Pipeline variables (trigger, API, `--var`): above every other variable.
    pub pipeline: IndexMap<String, String>,
    /// Group and project CI/CD variables of environment scope `*` (settings), the one that
    /// applies for each key: below pipeline variables, above YAML variables. Empty unless
    /// set with [`Context::with_settings_variables`].
    pub project: IndexMap<String, String>,
    /// Every group and project CI/CD variable the pipeline may see, in the order they
    /// apply: a job's rules see the ones whose scope matches its environment
    /// ([`Context::project_var_for`]).
    pub settings: Vec<SettingsVariable>,
    /// Instance CI/CD variables (Admin Area): below project variables, above YAML
    /// variables. Empty unless set with [`Context::with_instance_variables`].
    pub instance: IndexMap<String, String>,
    /// Files changed by the push; `None` when unknown (new branch, tag, web, API, ...), in
    /// which case `rules:changes` is true, as on GitLab.
    pub changed_files: Option<Vec<String>>,
    /// `CI_RELEASE_DESCRIPTION` of a tag pipeline whose tag has a release: GitLab's
    /// `Builder::Release` variables come after every other source, pipeline variables
    /// too, in what a job's rules see (`scoped_variables_for_pipeline_seed`) — but not in
    /// `workflow:rules` or `include:rules` (`config_variables`), so it is no predefined
    /// variable here ([`Context::job_var`]).
    pub release_description: Option<String>,
}

impl Context {
    pub fn new(
        info: &PipelineInfo,
        pipeline_variables: &[(String, String)],
        changed_files: Option<Vec<String>>,
    ) -> Self {
        Self {
            predefined: info.predefined(),
            pipeline: pipeline_variables.iter().cloned().collect(),
            project: IndexMap::new(),
            settings: Vec::new(),
            instance: IndexMap::new(),
            changed_files,
            release_description: info.release_description.clone().filter(|_| info.is_tag),
        }
    }

    /// A variable only a job's rules see above every other source
    /// (`CI_RELEASE_DESCRIPTION`), if `name` is one that is set.
    pub fn job_var(&self, name: &str) -> Option<String> {
        match name {
            "CI_RELEASE_DESCRIPTION" => self.release_description.clone(),
            _ => None,
        }
    }

    /// The group and project CI/CD variables this pipeline sees, in the order they apply
    /// (the caller has dropped what the pipeline may not see, such as protected
    /// variables; see [`SettingsVariable::layer`]).
    #[must_use]
    pub fn with_settings_variables(mut self, vars: &[SettingsVariable]) -> Self {
        self.project.extend(unscoped_in_order(vars));
        self.settings.extend(vars.iter().cloned());
        self
    }

    /// Whether some settings variable has an environment scope other than `*`.
    pub fn has_scoped_variables(&self) -> bool {
        self.settings.iter().any(|v| v.scope != "*")
    }

    /// The instance CI/CD variables this pipeline sees, `(key, value)` (the caller has
    /// dropped what the pipeline may not see, such as protected variables).
    #[must_use]
    pub fn with_instance_variables(mut self, vars: &[(String, String)]) -> Self {
        self.instance.extend(vars.iter().cloned());
        self
    }

    /// The group or project variable `name` that applies in the environment
    /// `environment` (`None`: scope `*` only): of those whose scope matches, the one of
    /// the nearest owner (project, then the nearest group), there the most specific scope
    /// ([`scope_rank`]).
    pub fn project_var_for(&self, name: &str, environment: Option<&str>) -> Option<String> {
        let Some(env) = environment else {
            return self.project.get(name).cloned();
        };
        self.settings
            .iter()
            .filter(|v| v.key == name && scope_matches(&v.scope, env))
            .max_by_key(|v| (v.layer, scope_rank(&v.scope, env)))
            .map(|v| v.value.clone())
    }

    /// A variable set by a user outside the YAML: a pipeline variable, else a project
    /// variable, else an instance variable.
    pub fn user_var(&self, name: &str) -> Option<String> {
        self.pipeline
            .get(name)
            .or_else(|| self.project.get(name))
            .or_else(|| self.instance.get(name))
            .cloned()
    }

    /// A variable of the pre-pipeline context (pipeline, then project, then instance
    /// variables win over predefined ones).
    pub fn var(&self, name: &str) -> Option<String> {
        self.user_var(name)
            .or_else(|| self.predefined.get(name).cloned())
    }
}

/// A CI/CD variable set in a group's or the project's settings, as pipeline creation
/// sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsVariable {
    /// Its owner's place in the order variables apply: the outermost group 0, each
    /// subgroup one more, the project last (the highest). A higher layer wins whatever the
    /// scopes (GitLab applies group variables, then project variables).
    pub layer: usize,
    pub key: String,
    pub value: String,
    /// Its environment scope: `*`, a name, or a pattern with `*`.
    pub scope: String,
}

/// `(key, value)` of the settings variables of scope `*`, in the order they apply (the
/// outermost owner first; a later one of a key replaces an earlier one).
pub fn unscoped_in_order(vars: &[SettingsVariable]) -> Vec<(String, String)> {
    let mut unscoped: Vec<&SettingsVariable> = vars.iter().filter(|v| v.scope == "*").collect();
    unscoped.sort_by_key(|v| v.layer);
    unscoped
        .into_iter()
        .map(|v| (v.key.clone(), v.value.clone()))
        .collect()
}

/// Of one owner's variables of one key matching environment `environment`, which
/// applies: the highest rank (GitLab's `on_environment` order: `*` first, then patterns,
/// the exact name last).
pub fn scope_rank(scope: &str, environment: &str) -> u8 {
    if scope == environment {
        2
    } else if scope == "*" {
        0
    } else {
        1
    }
}

/// Whether a CI/CD variable's environment scope matches an environment name: `*` matches
/// any run of characters (also none), everything else itself.
pub fn scope_matches(scope: &str, environment: &str) -> bool {
    let parts: Vec<&str> = scope.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return scope == environment;
    };
    let Some(mut rest) = environment.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_match_exactly_or_by_wildcard() {
        assert!(scope_matches("*", "production"));
        assert!(scope_matches("*", ""));
        assert!(scope_matches("production", "production"));
        assert!(!scope_matches("production", "production-eu"));
        assert!(scope_matches("review/*", "review/feature-1"));
        assert!(!scope_matches("review/*", "staging"));
        assert!(scope_matches("*-eu", "production-eu"));
        assert!(scope_matches("p*d*n", "production"));
        assert!(!scope_matches("p*d*x", "production"));
        assert!(scope_matches("a*a", "aa"));
        assert!(!scope_matches("a*a", "a"));
    }

    /// GitLab's `CI_COMMIT_MESSAGE` limit (100 KB): cut on a character boundary, flagged.
    #[test]
    fn a_long_commit_message_is_cut_and_flagged() {
        let short = PipelineInfo {
            commit_message: "Title\n\nBody".into(),
            ..PipelineInfo::default()
        }
        .predefined();
        assert_eq!(short["CI_COMMIT_MESSAGE_IS_TRUNCATED"], "false");
        assert_eq!(short["CI_COMMIT_DESCRIPTION"], "Body");
        let long = PipelineInfo {
            commit_message: format!("Title\n{}", "é".repeat(MAX_COMMIT_MESSAGE_BYTES)),
            ..PipelineInfo::default()
        }
        .predefined();
        assert_eq!(long["CI_COMMIT_MESSAGE_IS_TRUNCATED"], "true");
        assert!(long["CI_COMMIT_MESSAGE"].len() <= MAX_COMMIT_MESSAGE_BYTES);
        assert!(long["CI_COMMIT_MESSAGE"].len() > MAX_COMMIT_MESSAGE_BYTES - 2);
        assert_eq!(long["CI_COMMIT_TITLE"], "Title");
    }

    #[test]
    fn server_project_and_origin_variables() {
        let info = PipelineInfo {
            project_namespace: "Acme/Platform Team".into(),
            namespace_id: 42,
            schedule_description: Some("nightly".into()),
            upstream: Some(Upstream {
                pipeline_id: 7,
                project_id: 3,
                job_id: 99,
            }),
            project_name: "Web-App".into(),
            registry: Some("registry.example.com:5000".into()),
            ..PipelineInfo::default()
        };
        let v = info.predefined();
        assert_eq!(v["CI_REGISTRY"], "registry.example.com:5000");
        assert_eq!(
            v["CI_REGISTRY_IMAGE"],
            "registry.example.com:5000/acme/platform team/web-app"
        );
        assert_eq!(v["CI_SERVER_VERSION"], GITLAB_VERSION);
        let parts: Vec<&str> = GITLAB_VERSION.split('.').collect();
        assert_eq!(v["CI_SERVER_VERSION_MAJOR"], parts[0]);
        assert_eq!(v["CI_SERVER_VERSION_MINOR"], parts[1]);
        assert_eq!(v["CI_SERVER_VERSION_PATCH"], parts[2]);
        assert_eq!(v["CI_PROJECT_NAMESPACE_SLUG"], "acme-platform-team");
        assert_eq!(v["CI_PROJECT_NAMESPACE_ID"], "42");
        assert_eq!(v["CI_PIPELINE_SCHEDULE_DESCRIPTION"], "nightly");
        assert_eq!(v["CI_UPSTREAM_PIPELINE_ID"], "7");
        assert_eq!(v["CI_UPSTREAM_PROJECT_ID"], "3");
        assert_eq!(v["CI_UPSTREAM_JOB_ID"], "99");
        assert_eq!(v["GITLAB_FEATURES"], "");
        let plain = PipelineInfo::default().predefined();
        assert!(!plain.contains_key("CI_PIPELINE_SCHEDULE_DESCRIPTION"));
        assert!(!plain.contains_key("CI_UPSTREAM_JOB_ID"));
        assert!(!plain.contains_key("CI_REGISTRY"));
    }

    fn settings(layer: usize, key: &str, value: &str, scope: &str) -> SettingsVariable {
        SettingsVariable {
            layer,
            key: key.to_owned(),
            value: value.to_owned(),
            scope: scope.to_owned(),
        }
    }

    #[test]
    fn the_nearest_owner_wins_then_the_most_specific_scope() {
        let info = PipelineInfo::default();
        let ctx = Context::new(&info, &[], None).with_settings_variables(&[
            settings(0, "A", "group *", "*"),
            settings(0, "A", "group production", "production"),
            settings(1, "A", "subgroup review", "review/*"),
            settings(2, "A", "project *", "*"),
            settings(0, "B", "group *", "*"),
            settings(1, "B", "subgroup prod*", "prod*"),
            settings(1, "B", "subgroup production", "production"),
            settings(1, "B", "subgroup *", "*"),
        ]);
        let get = |k: &str, env: Option<&str>| ctx.project_var_for(k, env).unwrap_or_default();
        assert_eq!(get("A", None), "project *");
        assert_eq!(
            get("A", Some("production")),
            "project *",
            "project above group"
        );
        assert_eq!(get("A", Some("review/x")), "project *");
        assert_eq!(get("B", None), "subgroup *");
        assert_eq!(get("B", Some("production")), "subgroup production");
        assert_eq!(get("B", Some("prod-eu")), "subgroup prod*");
        assert_eq!(get("B", Some("staging")), "subgroup *");
        assert_eq!(ctx.var("B").as_deref(), Some("subgroup *"));
        assert!(ctx.has_scoped_variables());
    }

    #[test]
    fn instance_variables_rank_below_project_and_pipeline_variables() {
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let info = PipelineInfo::default();
        let ctx = Context::new(&info, &[pair("A", "pipeline")], None)
            .with_settings_variables(&[
                settings(1, "B", "project", "*"),
                settings(1, "C", "scoped", "production"),
            ])
            .with_instance_variables(&[
                pair("A", "instance"),
                pair("B", "instance"),
                pair("C", "instance"),
                pair("D", "instance"),
                pair("CI_PROJECT_ID", "instance"),
            ]);
        let got = |k: &str| ctx.var(k).unwrap_or_default();
        assert_eq!(got("A"), "pipeline");
        assert_eq!(got("B"), "project");
        assert_eq!(
            got("C"),
            "instance",
            "a scoped project variable needs its environment"
        );
        assert_eq!(
            ctx.project_var_for("C", Some("production")).as_deref(),
            Some("scoped")
        );
        assert_eq!(got("D"), "instance");
        assert_eq!(
            got("CI_PROJECT_ID"),
            "instance",
            "above predefined variables"
        );
    }

    fn merge_request() -> MergeRequestInfo {
        MergeRequestInfo {
            id: 1,
            iid: 1,
            title: "Add feature".into(),
            description: String::new(),
            source_branch: "feature".into(),
            target_branch: "main".into(),
            source_branch_protected: false,
            target_branch_protected: true,
            event_type: MergeRequestEventType::Detached,
            source_sha: None,
            target_sha: None,
            diff: Some(MergeRequestDiff {
                id: 1,
                base_sha: "b".repeat(40),
            }),
            labels: Vec::new(),
            assignees: Vec::new(),
            milestone: None,
            squash_on_merge: false,
            draft: false,
            external: None,
        }
    }

    #[test]
    fn a_merge_request_pipeline_has_gitlabs_merge_request_variables() {
        let info = PipelineInfo {
            ref_name: "feature".into(),
            source: Source::MergeRequestEvent,
            sha: "a".repeat(40),
            project_namespace: "group".into(),
            project_name: "app".into(),
            server_url: "https://gitlab.example.com".into(),
            project_id: 7,
            merge_request: Some(merge_request()),
            open_merge_requests: vec!["group/app!1".into()],
            ..PipelineInfo::default()
        };
        let v = info.predefined();
        let get = |k: &str| v.get(k).map(String::as_str);
        // Not a branch pipeline: the ref is the merge request's.
        assert_eq!(get("CI_COMMIT_BRANCH"), None);
        assert_eq!(get("CI_COMMIT_REF_NAME"), Some("feature"));
        assert_eq!(get("CI_COMMIT_REF_SLUG"), Some("feature"));
        assert_eq!(get("CI_PIPELINE_SOURCE"), Some("merge_request_event"));
        assert_eq!(get("CI_MERGE_REQUEST_EVENT_TYPE"), Some("detached"));
        // Set, but empty, outside merged results.
        assert_eq!(get("CI_MERGE_REQUEST_SOURCE_BRANCH_SHA"), Some(""));
        assert_eq!(get("CI_MERGE_REQUEST_TARGET_BRANCH_SHA"), Some(""));
        assert_eq!(get("CI_MERGE_REQUEST_DIFF_ID"), Some("1"));
        let base = "b".repeat(40);
        assert_eq!(get("CI_MERGE_REQUEST_DIFF_BASE_SHA"), Some(base.as_str()));
        assert_eq!(get("CI_MERGE_REQUEST_IID"), Some("1"));
        assert_eq!(
            get("CI_MERGE_REQUEST_REF_PATH"),
            Some("refs/merge-requests/1/head")
        );
        assert_eq!(get("CI_MERGE_REQUEST_PROJECT_ID"), Some("7"));
        assert_eq!(get("CI_MERGE_REQUEST_PROJECT_PATH"), Some("group/app"));
        assert_eq!(
            get("CI_MERGE_REQUEST_PROJECT_URL"),
            Some("https://gitlab.example.com/group/app")
        );
        assert_eq!(get("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME"), Some("feature"));
        assert_eq!(get("CI_MERGE_REQUEST_TARGET_BRANCH_NAME"), Some("main"));
        assert_eq!(
            get("CI_MERGE_REQUEST_SOURCE_BRANCH_PROTECTED"),
            Some("false")
        );
        assert_eq!(
            get("CI_MERGE_REQUEST_TARGET_BRANCH_PROTECTED"),
            Some("true")
        );
        assert_eq!(get("CI_MERGE_REQUEST_TITLE"), Some("Add feature"));
        assert_eq!(get("CI_MERGE_REQUEST_DESCRIPTION"), Some(""));
        assert_eq!(
            get("CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED"),
            Some("false")
        );
        assert_eq!(get("CI_MERGE_REQUEST_SQUASH_ON_MERGE"), Some("false"));
        assert_eq!(
            get("CI_MERGE_REQUEST_SOURCE_PROJECT_PATH"),
            Some("group/app")
        );
        assert_eq!(get("CI_OPEN_MERGE_REQUESTS"), Some("group/app!1"));
        assert_eq!(get("CI_EXTERNAL_PULL_REQUEST_IID"), None);
        // Only when set.
        assert_eq!(get("CI_MERGE_REQUEST_LABELS"), None);
        assert_eq!(get("CI_MERGE_REQUEST_ASSIGNEES"), None);
        assert_eq!(get("CI_MERGE_REQUEST_MILESTONE"), None);
        // A branch pipeline has none of them.
        let branch = PipelineInfo {
            merge_request: None,
            ..info.clone()
        }
        .predefined();
        assert_eq!(
            branch.get("CI_COMMIT_BRANCH").map(String::as_str),
            Some("feature")
        );
        assert!(!branch.keys().any(|k| k.starts_with("CI_MERGE_REQUEST_")));
    }

    #[test]
    fn merged_results_carry_the_heads_and_long_descriptions_are_cut() {
        let mr = MergeRequestInfo {
            event_type: MergeRequestEventType::MergedResult,
            source_sha: Some("s".into()),
            target_sha: Some("t".into()),
            description: "é".repeat(MR_DESCRIPTION_MAX + 5),
            labels: vec!["bug".into(), "ui".into()],
            diff: None,
            ..merge_request()
        };
        let info = PipelineInfo {
            merge_request: Some(mr),
            ..PipelineInfo::default()
        };
        let v = info.predefined();
        let get = |k: &str| v.get(k).cloned();
        assert_eq!(
            get("CI_MERGE_REQUEST_EVENT_TYPE").as_deref(),
            Some("merged_result")
        );
        assert_eq!(
            get("CI_MERGE_REQUEST_SOURCE_BRANCH_SHA").as_deref(),
            Some("s")
        );
        assert_eq!(
            get("CI_MERGE_REQUEST_TARGET_BRANCH_SHA").as_deref(),
            Some("t")
        );
        assert_eq!(get("CI_MERGE_REQUEST_DIFF_BASE_SHA"), None);
        assert_eq!(
            get("CI_MERGE_REQUEST_DESCRIPTION").map(|d| d.chars().count()),
            Some(MR_DESCRIPTION_MAX)
        );
        assert_eq!(
            get("CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED").as_deref(),
            Some("true")
        );
        assert_eq!(get("CI_MERGE_REQUEST_LABELS").as_deref(), Some("bug,ui"));
    }

    /// GitHub's and Gitea's pull requests add GitLab's `CI_EXTERNAL_PULL_REQUEST_*`, in
    /// `Ci::ExternalPullRequest#predefined_variables`' order, after
    /// `CI_OPEN_MERGE_REQUESTS`.
    #[test]
    fn a_pull_request_adds_the_external_pull_request_variables() {
        let mr = MergeRequestInfo {
            external: Some(ExternalPullRequestInfo {
                iid: 12,
                source_repository: "acme/app".into(),
                target_repository: "acme/app".into(),
                source_sha: "s".repeat(40),
                target_sha: "t".repeat(40),
            }),
            ..merge_request()
        };
        let info = PipelineInfo {
            merge_request: Some(mr),
            open_merge_requests: vec!["gantry/project!12".into()],
            ..PipelineInfo::default()
        };
        let v = info.predefined();
        let keys: Vec<&str> = v
            .keys()
            .map(String::as_str)
            .filter(|k| k.starts_with("CI_EXTERNAL") || *k == "CI_OPEN_MERGE_REQUESTS")
            .collect();
        assert_eq!(
            keys,
            [
                "CI_OPEN_MERGE_REQUESTS",
                "CI_EXTERNAL_PULL_REQUEST_IID",
                "CI_EXTERNAL_PULL_REQUEST_SOURCE_REPOSITORY",
                "CI_EXTERNAL_PULL_REQUEST_TARGET_REPOSITORY",
                "CI_EXTERNAL_PULL_REQUEST_SOURCE_BRANCH_SHA",
                "CI_EXTERNAL_PULL_REQUEST_TARGET_BRANCH_SHA",
                "CI_EXTERNAL_PULL_REQUEST_SOURCE_BRANCH_NAME",
                "CI_EXTERNAL_PULL_REQUEST_TARGET_BRANCH_NAME",
            ]
        );
        assert_eq!(v["CI_EXTERNAL_PULL_REQUEST_IID"], "12");
        assert_eq!(v["CI_EXTERNAL_PULL_REQUEST_SOURCE_BRANCH_NAME"], "feature");
        assert_eq!(v["CI_EXTERNAL_PULL_REQUEST_TARGET_BRANCH_NAME"], "main");
        assert_eq!(
            v["CI_PIPELINE_SOURCE"], "push",
            "the source is the caller's"
        );
    }

    #[test]
    fn the_server_fqdn_names_a_non_standard_port() {
        let vars = |url: &str| {
            let info = PipelineInfo {
                server_url: url.to_owned(),
                ..PipelineInfo::default()
            };
            let v = info.predefined();
            let get = |k: &str| v.get(k).cloned().unwrap_or_default();
            (
                get("CI_SERVER_HOST"),
                get("CI_SERVER_PORT"),
                get("CI_SERVER_FQDN"),
            )
        };
        assert_eq!(
            vars("https://gitlab.example.com"),
            (
                "gitlab.example.com".into(),
                "443".into(),
                "gitlab.example.com".into()
            )
        );
        assert_eq!(
            vars("http://gitlab.example.com:8080/"),
            (
                "gitlab.example.com".into(),
                "8080".into(),
                "gitlab.example.com:8080".into()
            )
        );
        assert_eq!(
            vars("https://gitlab.example.com:443").2,
            "gitlab.example.com"
        );
    }

    /// ActiveSupport's `truncate(1024)`: characters, not bytes; a cut text ends in `...`
    /// within the limit.
    #[test]
    fn a_release_description_is_cut_as_gitlab_cuts_it() {
        let fits = "é".repeat(RELEASE_DESCRIPTION_LIMIT);
        assert_eq!(release_description(&fits), fits);
        let long = "é".repeat(RELEASE_DESCRIPTION_LIMIT + 1);
        let cut = release_description(&long);
        assert_eq!(cut.chars().count(), RELEASE_DESCRIPTION_LIMIT);
        assert!(cut.ends_with("é..."));
        assert_eq!(release_description(""), "");
    }

    /// Only a tag's release counts, and only a job sees it (`Context::job_var`).
    #[test]
    fn a_release_description_is_no_predefined_variable() {
        let mut info = PipelineInfo {
            is_tag: true,
            release_description: Some("notes".into()),
            ..PipelineInfo::default()
        };
        let ctx = Context::new(&info, &[], None);
        assert_eq!(
            ctx.job_var("CI_RELEASE_DESCRIPTION").as_deref(),
            Some("notes")
        );
        assert_eq!(ctx.var("CI_RELEASE_DESCRIPTION"), None);
        assert!(!info.predefined().contains_key("CI_RELEASE_DESCRIPTION"));
        info.is_tag = false;
        let ctx = Context::new(&info, &[], None);
        assert_eq!(ctx.job_var("CI_RELEASE_DESCRIPTION"), None);
    }
}
