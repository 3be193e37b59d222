//! The YAML processor's main line (spec §0): load → include → extends → `!reference` →
//! entries → `parallel` → graph checks → `workflow:rules` → job rules.
//!
//! Job assembly applies `default:` and `inherit:`, expands `parallel` into instances,
//! checks the graph (stages, `needs`, `dependencies`, cycles) and seeds each job. A value
//! many jobs take from one shared node (the `rules` or `artifacts` of an `extends` base) is
//! validated once (`NodeMemo`); only a value that validated without a diagnostic is reused,
//! so every job still gets its own messages.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use indexmap::IndexMap;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, SourceMap};
use crate::expand::job_name_slug;
use crate::include::Loading;
use crate::inputs::PipelineInputs;
use crate::keyword::{self, Inherit, InheritSet, Parallel, VarLevel};
use crate::loader::{Files, Loader};
use crate::model::*;
use crate::rules::{self, Policy, Rule, RuleTarget, Scope};
use crate::validate::{Cx, flatten_nodes, join};
use crate::yaml::{KeyKind, Limits, Map, Node, Pos, Value};
use crate::{duration, resolve};

/// Default stages when `stages` is absent.
pub const DEFAULT_STAGES: [&str; 5] = [".pre", "build", "test", "deploy", ".post"];
/// Maximum length of a job name.
pub const MAX_JOB_NAME: usize = 255;
/// Maximum length of a needed job's name.
pub const MAX_NEED_NAME: usize = 128;
/// `needs` per job (GitLab's `ci_needs_size_limit` default).
pub const MAX_NEEDS: usize = 50;

const RESERVED: [&str; 10] = [
    "default",
    "include",
    "stages",
    "variables",
    "workflow",
    "image",
    "services",
    "cache",
    "before_script",
    "after_script",
];
const JOB_KEYS: [&str; 40] = [
    "after_script",
    "allow_failure",
    "artifacts",
    "before_script",
    "cache",
    "coverage",
    "dast_configuration",
    "dependencies",
    "environment",
    "extends",
    "hooks",
    "id_tokens",
    "identity",
    "image",
    "inherit",
    "interruptible",
    "manual_confirmation",
    "needs",
    "pages",
    "parallel",
    "publish",
    "release",
    "resource_group",
    "retry",
    "rules",
    "run",
    "script",
    "secrets",
    "services",
    "stage",
    "start_in",
    "tags",
    "timeout",
    "trigger",
    "variables",
    "when",
    "only",
    "except",
    "type",
    "inputs",
];
const BRIDGE_KEYS: [&str; 15] = [
    "allow_failure",
    "environment",
    "extends",
    "inherit",
    "interruptible",
    "needs",
    "only",
    "except",
    "parallel",
    "resource_group",
    "rules",
    "stage",
    "trigger",
    "variables",
    "when",
];

/// How to compile.
#[derive(Clone, Debug)]
pub struct Options {
    /// Path of the root file inside the project (`.gitlab-ci.yml`).
    pub config_path: String,
    /// Lint a file meant to be included elsewhere: structure only; includes unresolved;
    /// references to jobs, stages or files outside the file are not errors.
    pub fragment: bool,
    pub limits: Limits,
    /// The pipeline's inputs, for the root file's `spec:inputs`.
    pub inputs: PipelineInputs,
    /// Keep the configuration as merged ([`Compiled::merged`]), for the CI Lint API.
    pub keep_merged: bool,
    /// Go on after an include that cannot be read, so every such include is reported
    /// (`gantry lint`, `gantry run`). GitLab stops at the first (the default, kept for
    /// pipelines and the CI Lint API). Nothing past the includes is checked either way
    /// when one failed.
    pub every_include_error: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            config_path: ".gitlab-ci.yml".into(),
            fragment: false,
            limits: Limits::default(),
            inputs: PipelineInputs::default(),
            keep_merged: false,
            every_include_error: false,
        }
    }
}

/// The result of a compilation.
#[derive(Debug, Default)]
pub struct Compiled {
    pub sources: SourceMap,
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
    /// Present when the configuration is valid.
    pub pipeline: Option<Pipeline>,
    /// The files `include:` brought in, in the order they were read.
    pub includes: Vec<Included>,
    /// With [`Options::keep_merged`], the configuration after `include:`, `extends:` and
    /// `!reference` (GitLab's `merged_yaml`), when those resolved without errors.
    pub merged: Option<serde_json::Value>,
}

pub use crate::include::Included;

/// Compile the project's configuration.
pub fn compile(opts: &Options, ctx: &Context, loader: &dyn Loader) -> Compiled {
    let mut sources = SourceMap::default();
    let mut cx = Cx::default();
    let text = match loader.read(opts.config_path.trim_start_matches('/')) {
        Ok(Some(t)) => t,
        Ok(None) => {
            cx.raw(
                format!(
                    "Missing CI config file: `{}` does not exist",
                    opts.config_path
                ),
                None,
            );
            return finish(sources, cx, None, Vec::new(), None);
        }
        Err(e) => {
            cx.raw(
                format!(
                    "CI config file `{}` could not be read: {e}",
                    opts.config_path
                ),
                None,
            );
            return finish(sources, cx, None, Vec::new(), None);
        }
    };
    let files = Files::new(loader);
    let mut included = Vec::new();
    let mut merged = None;
    let pipeline = {
        let mut loading = Loading {
            loader,
            ctx,
            sources: &mut sources,
            cx: &mut cx,
            limits: opts.limits,
            includes: 0,
            files: &files,
            origin: crate::include::Origin::Pipeline,
            included: &mut included,
            every_include_error: opts.every_include_error,
        };
        let root = loading.parse_file(
            &opts.config_path,
            text,
            crate::inputs::Given::Pipeline(&opts.inputs),
            None,
            None,
        );
        match root {
            Some(root) => {
                let root = loading.expand_includes(root, 0, opts.fragment);
                if cx.has_errors() {
                    None
                } else {
                    process(root, opts, ctx, &files, &mut cx, &mut merged)
                }
            }
            None => None,
        }
    };
    finish(sources, cx, pipeline, included, merged)
}

fn finish(
    sources: SourceMap,
    cx: Cx,
    pipeline: Option<Pipeline>,
    includes: Vec<Included>,
    merged: Option<serde_json::Value>,
) -> Compiled {
    let valid = cx.errors.is_empty();
    Compiled {
        sources,
        errors: cx.errors,
        warnings: cx.warnings,
        pipeline: if valid { pipeline } else { None },
        includes,
        merged,
    }
}

/// A job definition after entry validation, before `parallel` and rules.
struct JobDef {
    name: String,
    pos: Pos,
    bridge: bool,
    stage: String,
    stage_pos: Pos,
    when: Option<When>,
    allow_failure: Option<(bool, Vec<i64>)>,
    needs: Option<NeedList>,
    dependencies: Option<Vec<String>>,
    before_script: Vec<String>,
    script: Vec<String>,
    after_script: Vec<String>,
    hooks: Vec<String>,
    variables: Variables,
    inherit: Inherit,
    rules: Option<Rc<Vec<Rule>>>,
    only: Option<Policy>,
    except: Option<Policy>,
    parallel: Option<Parallel>,
    tags: Vec<String>,
    image: Option<Image>,
    services: Vec<Service>,
    artifacts: Option<Rc<Artifacts>>,
    caches: Vec<Cache>,
    retry: Retry,
    start_in: Option<String>,
    timeout: Option<u64>,
    interruptible: Option<bool>,
    coverage: Option<String>,
    environment: Option<Environment>,
    resource_group: Option<String>,
    trigger: Option<Trigger>,
    release: Option<serde_json::Value>,
    pages: Option<Pages>,
    secrets: Option<serde_json::Value>,
    inputs: Option<Vec<crate::model::JobInput>>,
    id_tokens: Option<serde_json::Value>,
    manual_confirmation: Option<String>,
    run: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default)]
struct NeedList {
    jobs: Vec<NeedSpec>,
    cross: Vec<CrossNeed>,
}

#[derive(Clone, Debug)]
struct NeedSpec {
    job: String,
    artifacts: bool,
    optional: bool,
    matrix: Option<Vec<IndexMap<String, Vec<String>>>>,
    pos: Pos,
}

/// Values validated once per shared node: the jobs that take a keyword's value from one
/// `extends` base (or alias, or `!reference`) share that node ([`Node::shared_id`]), e.g. a
/// `rules` list of 30 rules in 150 jobs. Only a value that validated without a diagnostic is
/// kept (messages name the job); the node is kept too, so its address is not reused.
struct NodeMemo<T>(HashMap<*const (), (Node, Rc<T>)>);

impl<T> Default for NodeMemo<T> {
    fn default() -> Self {
        Self(HashMap::new())
    }
}

impl<T> NodeMemo<T> {
    fn get_or(
        &mut self,
        node: &Node,
        cx: &mut Cx,
        validate: impl FnOnce(&mut Cx) -> Option<T>,
    ) -> Option<Rc<T>> {
        let Some(id) = node.shared_id() else {
            return validate(cx).map(Rc::new);
        };
        if let Some((_, value)) = self.0.get(&id) {
            return Some(Rc::clone(value));
        }
        let diagnostics = (cx.errors.len(), cx.warnings.len());
        let value = Rc::new(validate(cx)?);
        if (cx.errors.len(), cx.warnings.len()) == diagnostics {
            self.0.insert(id, (node.clone(), Rc::clone(&value)));
        }
        Some(value)
    }
}

/// What the validation of every job shares.
struct JobsCx<'a> {
    defaults: &'a Defaults,
    fragment: bool,
    rules: NodeMemo<Vec<Rule>>,
    artifacts: NodeMemo<Artifacts>,
}

/// Typed `default:` values.
#[derive(Default)]
struct Defaults {
    after_script: Option<Vec<String>>,
    artifacts: Option<Rc<Artifacts>>,
    before_script: Option<Vec<String>>,
    caches: Option<Vec<Cache>>,
    hooks: Option<Vec<String>>,
    id_tokens: Option<serde_json::Value>,
    image: Option<Image>,
    interruptible: Option<bool>,
    retry: Option<Retry>,
    services: Option<Vec<Service>>,
    tags: Option<Vec<String>>,
    timeout: Option<u64>,
}

fn process(
    mut root: Map,
    opts: &Options,
    ctx: &Context,
    files: &Files<'_>,
    cx: &mut Cx,
    merged: &mut Option<serde_json::Value>,
) -> Option<Pipeline> {
    // Most configurations hold no `!reference`: then the pass is skipped.
    let has_references = resolve::has_references(&root);
    resolve::extends(&mut root, cx);
    if cx.has_errors() && !opts.fragment {
        return None;
    }
    if opts.fragment {
        cx.errors.clear();
    }
    let before = cx.errors.len();
    if has_references {
        resolve::references(&mut root, cx);
    }
    if opts.fragment {
        cx.errors.truncate(before);
        strip_references(&mut root);
    }
    if cx.has_errors() {
        return None;
    }
    if opts.keep_merged {
        *merged = Some(serde_json::Value::Object(
            root.iter()
                .map(|(k, v)| (k.to_owned(), v.to_json()))
                .collect(),
        ));
    }

    let stages = parse_stages(&root, cx);
    let global_vars = match root.get("variables") {
        Some(n) => keyword::variables(n, "variables", VarLevel::Global, cx).unwrap_or_default(),
        None => Variables::new(),
    };
    let workflow = root.get("workflow").and_then(|w| parse_workflow(w, cx));
    let defaults = parse_defaults(&root, cx);

    // Jobs.
    let mut defs = Vec::new();
    let mut visible = 0;
    let mut jobs_cx = JobsCx {
        defaults: &defaults,
        fragment: opts.fragment,
        rules: NodeMemo::default(),
        artifacts: NodeMemo::default(),
    };
    if opts.fragment {
        if let Some(spec) = root.get("spec") {
            // A template checked on its own may carry its `spec:` header inline.
            let mut header = Map::new();
            header.insert_node("spec", spec.clone());
            crate::inputs::check_header(&Node::new(Value::Map(header), spec.pos), cx);
        }
    }
    for (name, entry) in root.entries() {
        if RESERVED.contains(&name) || (opts.fragment && name == "spec") {
            continue;
        }
        let node = &entry.value;
        if name.starts_with('.') {
            // `Entry::Jobs` passes `config || {}` to `Hidden`, which validates presence: `null`,
            // `false`, `""`, `[]` and `{}` are blank; `true` is not.
            if node.is_blank() {
                cx.config(&join("jobs", name), "can't be blank", node.pos);
            }
            continue;
        }
        visible += 1;
        if entry.key_kind == KeyKind::Other {
            cx.attr(
                &join("jobs", name),
                "name",
                "should be a symbol",
                entry.key_pos,
            );
            continue;
        }
        let Some(m) = node.as_map() else {
            if !opts.fragment {
                cx.push(
                    format!(
                        "jobs {name} config should implement the script:, run:, or trigger: keyword"
                    ),
                    node.pos,
                );
            } else {
                cx.config(&join("jobs", name), "should be a hash", node.pos);
            }
            continue;
        };
        let is_job = m.contains_key("script") || m.contains_key("run");
        let is_bridge = !is_job && (m.contains_key("trigger") || m.contains_key("needs"));
        if !is_job && !is_bridge && !opts.fragment {
            cx.push(
                format!(
                    "jobs {name} config should implement the script:, run:, or trigger: keyword"
                ),
                node.pos,
            );
            continue;
        }
        if is_bridge && !opts.fragment && !m.contains_key("trigger") {
            let bridge_need = m
                .get("needs")
                .and_then(|n| flatten_nodes(n).or_else(|| Some(vec![n])))
                .is_some_and(|items| {
                    items.iter().any(|i| {
                        i.as_map().is_some_and(|nm| {
                            nm.contains_key("pipeline") && !nm.contains_key("job")
                        })
                    })
                });
            if !bridge_need {
                cx.config(
                    &join("jobs", name),
                    "should contain either a trigger or a needs:pipeline",
                    node.pos,
                );
                continue;
            }
        }
        if let Some(def) = parse_job(name, node, m, is_bridge, &mut jobs_cx, cx) {
            defs.push(def);
        }
    }
    let has_workflow_rules = workflow.as_ref().is_some_and(|w| w.rules.is_some());
    if !has_workflow_rules {
        for def in &defs {
            let last = def.rules.as_ref().and_then(|r| r.last());
            if last.is_some_and(|r| {
                // GitLab: `last_rule&.keys == [:when] && last_rule[:when] != 'never'`.
                r.if_.is_none()
                    && r.changes.is_none()
                    && r.exists.is_none()
                    && r.start_in.is_none()
                    && r.allow_failure.is_none()
                    && r.variables.is_none()
                    && r.needs.is_none()
                    && r.interruptible.is_none()
                    && r.when.as_deref().is_some_and(|w| w != "never")
            }) {
                cx.warn(
                    format!(
                        "jobs:{} may allow multiple pipelines to run for a single action due to `rules:when` clause with no `workflow:rules` - read more: https://docs.gitlab.com/ee/ci/troubleshooting.html#pipeline-warnings",
                        def.name
                    ),
                    Some(def.pos),
                );
            }
        }
    }
    if visible == 0 && !opts.fragment {
        cx.config(
            "jobs",
            "should contain at least one visible job",
            Pos::default(),
        );
    }
    if cx.has_errors() {
        return None;
    }

    // parallel → instances.
    let mut jobs: Vec<Instance> = Vec::new();
    let mut groups: HashMap<String, Vec<usize>> = HashMap::new();
    for (di, def) in defs.iter().enumerate() {
        // The written name is limited; names generated by `parallel` are not (GitLab accepts
        // long matrix names, e.g. salsa-ci's test-pipeline).
        if def.name.chars().count() > MAX_JOB_NAME {
            cx.attr(
                &join("jobs", &def.name),
                "name",
                format!("is too long (maximum is {MAX_JOB_NAME} characters)"),
                def.pos,
            );
        }
        for inst in expand_parallel(def, di) {
            groups.entry(def.name.clone()).or_default().push(jobs.len());
            jobs.push(inst);
        }
    }

    // Resolve needs and dependencies to instance names, then the graph checks.
    let names: HashMap<String, usize> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.name.clone(), i))
        .collect();
    let matrices = jobs_names_matrix(&defs);
    let mut matrix_errors: Vec<(String, Pos)> = Vec::new();
    for j in &mut jobs {
        let def = &defs[j.def];
        j.needs = def.needs.as_ref().map(|n| {
            let mut errors = Vec::new();
            let specs = interpolate_matrix_needs(&n.jobs, &j.matrix, &mut errors);
            for e in errors {
                let e = format!("{} job: {e}", def.name);
                if !matrix_errors.iter().any(|(m, _)| *m == e) {
                    matrix_errors.push((e, def.pos));
                }
            }
            resolve_needs(&specs, &groups, &matrices)
        });
    }
    for (e, pos) in matrix_errors {
        cx.raw(e, Some(pos));
    }
    // Dependencies: expand parallel group names to their instances.
    let instance_names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    for j in &mut jobs {
        if let Some(deps) = &defs[j.def].dependencies {
            let mut out = Vec::new();
            for d in deps {
                match groups.get(d) {
                    Some(insts) if !names.contains_key(d) => {
                        out.extend(insts.iter().map(|&i| instance_names[i].clone()))
                    }
                    _ => out.push(d.clone()),
                }
            }
            j.dependencies = Some(out);
        }
    }
    if !opts.fragment {
        check_graph(&jobs, &defs, &stages, &names, cx);
    }
    if cx.has_errors() {
        return None;
    }

    // workflow:rules.
    let global_lookup = |n: &str| -> Option<String> {
        ctx.user_var(n)
            .or_else(|| global_vars.get(n).map(|v| v.value.clone()))
            .or_else(|| ctx.predefined.get(n).cloned())
    };
    let mut pipeline_vars = global_vars.clone();
    let mut auto_cancel = workflow
        .as_ref()
        .map(|w| w.auto_cancel.clone())
        .unwrap_or_else(|| AutoCancel {
            on_new_commit: "conservative".into(),
            on_job_failure: "none".into(),
        });
    let mut created = true;
    let mut not_created_reason = None;
    if let Some(rules) = workflow.as_ref().and_then(|w| w.rules.as_ref()) {
        let scope = Scope {
            ctx,
            lookup: &global_lookup,
            files,
        };
        // A rule that cannot be evaluated filters the pipeline out without a word, as
        // GitLab's `EvaluateWorkflowRules` does (its result is `never`).
        match rules::first_match(rules, &scope).ok().flatten() {
            Some(r) if r.when.as_deref() != Some("never") => {
                if let Some(v) = &r.variables {
                    for (k, val) in v {
                        pipeline_vars.insert(k.clone(), val.clone());
                    }
                }
                if let Some(ac) = &r.auto_cancel {
                    if let Some(ac) = parse_auto_cancel(ac, "workflow:rules:rule:auto_cancel", cx) {
                        auto_cancel = ac;
                    }
                }
            }
            _ => {
                created = false;
                not_created_reason = Some("Pipeline filtered out by workflow rules.".to_owned());
            }
        }
    }
    let name = workflow
        .as_ref()
        .and_then(|w| w.name.clone())
        .map(|n| {
            let lookup = |k: &str| {
                ctx.user_var(k)
                    .or_else(|| pipeline_vars.get(k).map(|v| v.value.clone()))
                    .or_else(|| ctx.predefined.get(k).cloned())
            };
            crate::expand::expand_server(&n, &lookup, crate::expand::Unknown::Empty)
                .trim()
                .to_owned()
        })
        .filter(|n| !n.is_empty());

    // Job rules.
    let mut out_jobs = Vec::new();
    if created {
        for inst in &jobs {
            let def = &defs[inst.def];
            if let Some(job) = seed(
                inst,
                def,
                &pipeline_vars,
                &stages,
                ctx,
                files,
                has_workflow_rules,
                cx,
            ) {
                out_jobs.push(job);
            }
        }
        if !opts.fragment {
            check_needs_present(&mut out_jobs, cx);
        }
        if cx.has_errors() {
            return None;
        }
        if out_jobs
            .iter()
            .all(|j| j.stage == ".pre" || j.stage == ".post")
        {
            created = false;
            not_created_reason = Some(
                "Pipeline will not run for the selected trigger. The rules configuration prevented any jobs from being added to the pipeline."
                    .to_owned(),
            );
            if opts.fragment {
                created = !out_jobs.is_empty();
            }
        }
    }
    if !created {
        out_jobs.clear();
    }
    Some(Pipeline {
        created,
        not_created_reason,
        stages,
        variables: pipeline_vars,
        name,
        auto_cancel,
        jobs: out_jobs,
    })
}

/// Matrix job name → its instances (name, matrix values).
type MatrixInstances = HashMap<String, Vec<(String, IndexMap<String, String>)>>;

fn jobs_names_matrix(defs: &[JobDef]) -> MatrixInstances {
    let mut out = HashMap::new();
    for def in defs {
        if let Some(Parallel::Matrix(_)) = &def.parallel {
            let insts = expand_parallel(def, 0);
            out.insert(
                def.name.clone(),
                insts.into_iter().map(|i| (i.name, i.matrix)).collect(),
            );
        }
    }
    out
}

/// Remove `!reference` nodes left unresolved (fragment mode).
fn strip_references(map: &mut Map) {
    let keys: Vec<String> = map.keys().map(str::to_owned).collect();
    for k in keys {
        let remove = matches!(map.get(&k).map(|n| &n.value), Some(Value::Reference(_)));
        if remove {
            map.remove(&k);
        } else if let Some(n) = map.get_mut(&k) {
            strip_node(n);
        }
    }
}

fn strip_node(n: &mut Node) {
    match &mut n.value {
        Value::Map(m) => strip_references(m),
        Value::Seq(items) => {
            let items = std::rc::Rc::make_mut(items);
            items.retain(|i| !matches!(i.value, Value::Reference(_)));
            items.iter_mut().for_each(strip_node);
        }
        _ => {}
    }
}

fn parse_stages(root: &Map, cx: &mut Cx) -> Vec<String> {
    let Some(n) = root.get("stages").or_else(|| root.get("types")) else {
        return DEFAULT_STAGES.iter().map(|s| (*s).to_owned()).collect();
    };
    let mut list = Vec::new();
    let ok = match &n.value {
        Value::Seq(_) => crate::validate::flatten_strings(n, 0, &mut list),
        _ => false,
    };
    if !ok {
        cx.config(
            "stages",
            "should be an array of strings or a nested array of strings up to 10 levels deep",
            n.pos,
        );
        return DEFAULT_STAGES.iter().map(|s| (*s).to_owned()).collect();
    }
    let mut out = vec![".pre".to_owned()];
    for s in list {
        if s != ".pre" && s != ".post" && !out.contains(&s) {
            out.push(s);
        }
    }
    out.push(".post".to_owned());
    out
}

struct Workflow {
    rules: Option<Vec<Rule>>,
    name: Option<String>,
    auto_cancel: AutoCancel,
}

fn parse_auto_cancel(n: &Node, path: &str, cx: &mut Cx) -> Option<AutoCancel> {
    let m = cx.map(n, path)?;
    cx.unknown_keys(m, &["on_new_commit", "on_job_failure"], path, n.pos);
    let mut ac = AutoCancel {
        on_new_commit: "conservative".into(),
        on_job_failure: "none".into(),
    };
    if let Some(v) = m.get("on_new_commit") {
        match v.as_str() {
            Some(s @ ("conservative" | "interruptible" | "none")) => {
                ac.on_new_commit = s.to_owned()
            }
            _ => cx.attr(
                path,
                "on_new_commit",
                "must be one of: conservative, interruptible, none",
                v.pos,
            ),
        }
    }
    if let Some(v) = m.get("on_job_failure") {
        match v.as_str() {
            Some(s @ ("none" | "all")) => ac.on_job_failure = s.to_owned(),
            _ => cx.attr(path, "on_job_failure", "must be one of: none, all", v.pos),
        }
    }
    Some(ac)
}

fn parse_workflow(n: &Node, cx: &mut Cx) -> Option<Workflow> {
    let m = cx.map(n, "workflow")?;
    cx.unknown_keys(m, &["rules", "name", "auto_cancel"], "workflow", n.pos);
    let rules = m
        .get("rules")
        .and_then(|r| rules::parse_rules(r, "workflow:rules", RuleTarget::Workflow, cx));
    if let Some(rules) = &rules {
        for (i, r) in rules.iter().enumerate() {
            if let Some(ac) = &r.auto_cancel {
                let _ = parse_auto_cancel(ac, &format!("workflow:rules:rule:{i}:auto_cancel"), cx);
            }
        }
    }
    let name = match m.get("name") {
        None => None,
        Some(v) => match v.as_str() {
            Some(s) if !s.is_empty() && s.chars().count() <= 255 => Some(s.to_owned()),
            Some(_) => {
                cx.attr(
                    "workflow",
                    "name",
                    "is too long (maximum is 255 characters)",
                    v.pos,
                );
                None
            }
            None => {
                cx.config("workflow:name", "should be a string", v.pos);
                None
            }
        },
    };
    let auto_cancel = match m.get("auto_cancel") {
        Some(a) => parse_auto_cancel(a, "workflow:auto_cancel", cx)?,
        None => AutoCancel {
            on_new_commit: "conservative".into(),
            on_job_failure: "none".into(),
        },
    };
    Some(Workflow {
        rules,
        name,
        auto_cancel,
    })
}

fn parse_defaults(root: &Map, cx: &mut Cx) -> Defaults {
    let mut node_map = Map::new();
    let default = root.get("default");
    if let Some(d) = default {
        if let Some(m) = cx.map(d, "default") {
            cx.unknown_keys(m, keyword::DEFAULT_KEYS, "default", d.pos);
            node_map = m.clone();
        }
    }
    for key in [
        "image",
        "services",
        "cache",
        "before_script",
        "after_script",
    ] {
        if let Some(n) = root.get(key) {
            if node_map.contains_key(key) && default.is_some() {
                cx.raw(
                    format!("{key} is defined in top-level and `default:` entry"),
                    Some(n.pos),
                );
            } else {
                node_map.insert_node(key, n.clone());
            }
        }
    }
    let mut d = Defaults::default();
    let p = |k: &str| join("default", k);
    for (key, n) in node_map.iter() {
        match key {
            "after_script" => d.after_script = cx.commands(n, &p(key)),
            "before_script" => d.before_script = cx.commands(n, &p(key)),
            "artifacts" => d.artifacts = keyword::artifacts(n, &p(key), cx).map(Rc::new),
            "cache" => d.caches = keyword::caches(n, &p(key), cx),
            "hooks" => d.hooks = keyword::hooks(n, &p(key), cx),
            "id_tokens" => d.id_tokens = keyword::id_tokens(n, &p(key), cx),
            "image" => d.image = keyword::image(n, &p(key), cx),
            "interruptible" => d.interruptible = keyword::interruptible(n, &p(key), cx),
            "retry" => d.retry = keyword::retry(n, &p(key), cx),
            "services" => d.services = keyword::services(n, &p(key), cx),
            "tags" => d.tags = keyword::tags(n, &p(key), cx),
            "timeout" => d.timeout = keyword::timeout(n, &p(key), cx),
            "identity" => {
                let _ = keyword::identity(n, &p(key), cx);
            }
            _ => {}
        }
    }
    d
}

fn no_retry() -> Retry {
    Retry {
        max: 0,
        when: vec!["always".into()],
        exit_codes: Vec::new(),
    }
}

fn parse_job(
    name: &str,
    node: &Node,
    m: &Map,
    bridge: bool,
    jobs: &mut JobsCx<'_>,
    cx: &mut Cx,
) -> Option<JobDef> {
    let (defaults, fragment) = (jobs.defaults, jobs.fragment);
    let path = join("jobs", name);
    let errors = cx.errors.len();
    if bridge {
        let unknown: Vec<&str> = m.keys().filter(|k| !BRIDGE_KEYS.contains(k)).collect();
        if !unknown.is_empty() {
            cx.config(
                &path,
                format!("contains unknown keys: {}", unknown.join(", ")),
                node.pos,
            );
            cx.hint_last(crate::suggest::did_you_mean(&unknown, &BRIDGE_KEYS));
        }
    } else {
        cx.unknown_keys(m, &JOB_KEYS, &path, node.pos);
    }
    let p = |k: &str| join(&path, k);
    if m.contains_key("script") && m.contains_key("trigger") {
        cx.config(
            &path,
            "these keys cannot be used together: script, trigger",
            node.pos,
        );
    }
    if m.contains_key("script") && m.contains_key("run") {
        cx.config(
            &path,
            "these keys cannot be used together: script, run",
            node.pos,
        );
    }
    if m.get("rules").is_some_and(|r| !r.is_null()) {
        let bad: Vec<&str> = ["only", "except"]
            .into_iter()
            .filter(|k| m.get(k).is_some_and(|n| !n.is_null()))
            .collect();
        if !bad.is_empty() {
            cx.config(
                &path,
                format!("key may not be used with `rules`: {}", bad.join(", ")),
                node.pos,
            );
        }
    }
    let inherit = match m.get("inherit") {
        Some(n) => keyword::inherit(n, &p("inherit"), cx).unwrap_or(Inherit {
            default: InheritSet::All,
            variables: InheritSet::All,
        }),
        None => Inherit {
            default: InheritSet::All,
            variables: InheritSet::All,
        },
    };
    let inherits = |key: &str| -> bool {
        if bridge {
            return key == "interruptible" && inherit.default.allows(key);
        }
        inherit.default.allows(key)
    };
    let stage_node = m.get("stage").or_else(|| m.get("type"));
    let stage = match stage_node {
        Some(s) => cx.string(s, &p("stage")).unwrap_or_default(),
        None => "test".to_owned(),
    };
    let when = match m.get("when") {
        None => None,
        Some(n) => {
            let allowed: &[&str] = if bridge {
                &["on_success", "on_failure", "always", "manual"]
            } else {
                &["on_success", "on_failure", "always", "manual", "delayed"]
            };
            match n.as_str() {
                Some(w) if allowed.contains(&w) => When::parse(w),
                _ => {
                    cx.attr(
                        &path,
                        "when",
                        format!("should be one of: {}", allowed.join(", ")),
                        n.pos,
                    );
                    None
                }
            }
        }
    };
    let start_in = match m.get("start_in") {
        None => None,
        Some(n) => match n
            .as_str()
            .and_then(|s| duration::parse_duration(s).map(|d| (s, d)))
        {
            Some((s, d)) => {
                if d >= duration::ONE_WEEK {
                    cx.attr(&path, "start_in", "should not exceed the limit", n.pos);
                }
                Some(s.to_owned())
            }
            None => {
                cx.attr(&path, "start_in", "should be a duration", n.pos);
                None
            }
        },
    };
    // `start_in` is a build-job attribute: a bridge only reports it as an unknown key.
    if !bridge && !m.contains_key("rules") {
        if when == Some(When::Delayed) && start_in.is_none() && !m.contains_key("start_in") {
            cx.attr(&path, "start_in", "can't be blank", node.pos);
        }
        if when != Some(When::Delayed) && m.contains_key("start_in") {
            cx.attr(&path, "start_in", "must be blank", node.pos);
        }
    } else if !bridge && m.contains_key("start_in") {
        cx.config(
            &path,
            "key may not be used with `rules`: start_in",
            node.pos,
        );
    }
    let script = match m.get("script") {
        Some(n) => {
            if n.is_blank() {
                cx.attr(&path, "script", "can't be blank", n.pos);
            }
            cx.commands(n, &p("script")).unwrap_or_default()
        }
        None => Vec::new(),
    };
    let cmds = |cx: &mut Cx, key: &str, def: &Option<Vec<String>>| -> Vec<String> {
        match m.get(key).filter(|n| !n.is_null()) {
            Some(n) => cx.commands(n, &p(key)).unwrap_or_default(),
            None if inherits(key) => def.clone().unwrap_or_default(),
            None => Vec::new(),
        }
    };
    let before_script = cmds(cx, "before_script", &defaults.before_script);
    let after_script = cmds(cx, "after_script", &defaults.after_script);
    let hooks = match m.get("hooks").filter(|n| !n.is_null()) {
        Some(n) => keyword::hooks(n, &p("hooks"), cx).unwrap_or_default(),
        None if inherits("hooks") => defaults.hooks.clone().unwrap_or_default(),
        None => Vec::new(),
    };
    macro_rules! inherited {
        ($key:literal, $f:path, $def:expr) => {
            // `key: null` counts as unspecified: the default applies (GitLab).
            match m.get($key).filter(|n| !n.is_null()) {
                Some(n) => $f(n, &p($key), cx),
                None if inherits($key) => $def.clone(),
                None => None,
            }
        };
    }
    let artifacts = match m.get("artifacts").filter(|n| !n.is_null()) {
        Some(n) => jobs
            .artifacts
            .get_or(n, cx, |cx| keyword::artifacts(n, &p("artifacts"), cx)),
        None if inherits("artifacts") => defaults.artifacts.clone(),
        None => None,
    };
    let caches = inherited!("cache", keyword::caches, defaults.caches).unwrap_or_default();
    let image = inherited!("image", keyword::image, defaults.image);
    let services = inherited!("services", keyword::services, defaults.services).unwrap_or_default();
    let retry = inherited!("retry", keyword::retry, defaults.retry).unwrap_or_else(no_retry);
    let tags = inherited!("tags", keyword::tags, defaults.tags).unwrap_or_default();
    // GitLab validates `default:timeout` but never applies it: `Entry::Job#parsed_timeout`
    // reads the job's own `timeout` (`has_timeout?` is the job's hash), not the entry
    // inherited from `default:`. The job's own value, or the project's timeout.
    let timeout = match m.get("timeout").filter(|n| !n.is_null()) {
        Some(n) => keyword::timeout(n, &p("timeout"), cx),
        None => None,
    };
    let interruptible = inherited!(
        "interruptible",
        keyword::interruptible,
        defaults.interruptible
    );
    let id_tokens = inherited!("id_tokens", keyword::id_tokens, defaults.id_tokens);
    let variables = match m.get("variables") {
        Some(n) if n.is_null() => Variables::new(),
        Some(n) => keyword::variables(n, &p("variables"), VarLevel::Job, cx).unwrap_or_default(),
        None => Variables::new(),
    };
    let allow_failure = match m.get("allow_failure") {
        Some(n) => keyword::allow_failure(n, &p("allow_failure"), cx),
        None => None,
    };
    let needs = match m.get("needs") {
        Some(n) => parse_needs(n, &p("needs"), bridge, cx),
        None => None,
    };
    let dependencies = match m.get("dependencies") {
        Some(n) => {
            let d = flatten_nodes(n).and_then(|items| {
                items
                    .iter()
                    .map(|i| i.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            });
            if d.is_none() {
                cx.attr(
                    &path,
                    "dependencies",
                    "should be an array of strings",
                    n.pos,
                );
            }
            d
        }
        None => None,
    };
    // GitLab checks only when `needs` lists something (`next unless needs_value.present?`):
    // `needs: []` with `dependencies` is valid, and the job receives no artifacts.
    if let (Some(deps), Some(needs)) = (
        &dependencies,
        needs
            .as_ref()
            .filter(|n| !n.jobs.is_empty() || !n.cross.is_empty()),
    ) {
        let missing: Vec<&str> = deps
            .iter()
            .filter(|d| !needs.jobs.iter().any(|n| &n.job == *d))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() && !fragment {
            cx.attr(
                &path,
                "dependencies",
                format!("the {} should be part of needs", missing.join(", ")),
                node.pos,
            );
        }
    }
    let given = |k: &str| m.get(k).filter(|n| !n.is_null());
    let rules = given("rules").and_then(|r| {
        jobs.rules.get_or(r, cx, |cx| {
            rules::parse_rules(r, &p("rules"), RuleTarget::Job, cx)
        })
    });
    let only = given("only").and_then(|n| rules::parse_policy(n, &p("only"), cx));
    let except = given("except").and_then(|n| rules::parse_policy(n, &p("except"), cx));
    let parallel = match m.get("parallel") {
        Some(n) if n.is_null() => None,
        Some(n) => {
            let par = keyword::parallel(n, &p("parallel"), cx);
            if bridge && matches!(par, Some(Parallel::Count(_))) {
                cx.attr(
                    &path,
                    "parallel",
                    "cannot use \"parallel: <number>\".",
                    n.pos,
                );
            }
            par
        }
        None => None,
    };
    let opt = |cx: &mut Cx, key: &str, f: fn(&Node, &str, &mut Cx) -> Option<serde_json::Value>| {
        m.get(key).and_then(|n| f(n, &p(key), cx))
    };
    let release = opt(cx, "release", keyword::release);
    let secrets = opt(cx, "secrets", keyword::secrets);
    let run = m
        .get("run")
        .and_then(|n| keyword::run_steps(n, &p("run"), cx));
    if let Some(n) = m.get("run") {
        if m.contains_key("before_script") || m.contains_key("after_script") {
            cx.config(
                &path,
                "these keys cannot be used together: run, before_script, after_script",
                n.pos,
            );
        }
    }
    let inputs = m
        .get("inputs")
        .and_then(|n| keyword::job_inputs(n, &path, cx));
    let pages_keyword = match m.get("pages") {
        Some(n) => keyword::pages(n, &p("pages"), cx),
        None => Some(keyword::PagesKeyword::Empty),
    };
    let publish = m.get("publish").and_then(|n| n.as_str()).map(str::to_owned);
    let pages = pages_job(name, pages_keyword, publish);
    let artifacts = match &pages {
        Some(pages) => Some(Rc::new(with_publish_path(
            artifacts.as_deref(),
            &pages.publish,
        ))),
        None => artifacts,
    };
    if let Some(n) = m.get("dast_configuration") {
        let _ = keyword::dast_configuration(n, &p("dast_configuration"), cx);
    }
    if let Some(n) = m.get("identity") {
        let _ = keyword::identity(n, &p("identity"), cx);
    }
    if let Some(n) = m.get("publish") {
        if name != "pages" && !m.contains_key("pages") {
            cx.attr(
                &path,
                "publish",
                "can only be used within a `pages` job",
                n.pos,
            );
        } else if n.as_str().is_none() {
            cx.config(&p("publish"), "should be a string", n.pos);
        }
    }
    if let Some(n) = m.get("extends") {
        let ok = matches!(n.value, Value::Str(_)) || crate::validate::string_array(n).is_some();
        if !ok {
            cx.attr(
                &path,
                "extends",
                "should be an array of strings or a string",
                n.pos,
            );
        }
    }
    let coverage = m
        .get("coverage")
        .and_then(|n| keyword::coverage(n, &p("coverage"), cx));
    let environment = m
        .get("environment")
        .and_then(|n| keyword::environment(n, &p("environment"), cx));
    let resource_group = m
        .get("resource_group")
        .and_then(|n| keyword::resource_group(n, &p("resource_group"), cx));
    let trigger = m
        .get("trigger")
        .and_then(|n| keyword::trigger(n, &p("trigger"), cx));
    let manual_confirmation = m
        .get("manual_confirmation")
        .and_then(|n| cx.string(n, &p("manual_confirmation")));
    if cx.errors.len() > errors {
        return None;
    }
    Some(JobDef {
        name: name.to_owned(),
        pos: node.pos,
        bridge,
        stage,
        stage_pos: stage_node.map_or(node.pos, |s| s.pos),
        when,
        allow_failure,
        needs,
        dependencies,
        before_script,
        script,
        after_script,
        hooks,
        variables,
        inherit,
        rules,
        only,
        except,
        parallel,
        tags,
        image,
        services,
        artifacts,
        caches,
        retry,
        start_in,
        timeout,
        interruptible,
        coverage,
        environment,
        resource_group,
        trigger,
        release,
        secrets,
        inputs,
        id_tokens,
        manual_confirmation,
        pages,
        run,
    })
}

/// `Entry::Job#pages_job?` and `#pages_publish_path`: a job is a Pages job when `pages:`
/// is `true` or a non-empty hash, or when it is named `pages` and `pages:` is not `false`;
/// its site is `pages:publish`, else `publish:`, else `public`.
fn pages_job(
    name: &str,
    keyword: Option<keyword::PagesKeyword>,
    publish: Option<String>,
) -> Option<Pages> {
    let publish = publish.unwrap_or_else(|| "public".to_owned());
    match keyword? {
        keyword::PagesKeyword::Off => None,
        keyword::PagesKeyword::Empty => (name == "pages").then_some(Pages {
            publish,
            path_prefix: None,
            expire_in: None,
        }),
        keyword::PagesKeyword::On(o) => Some(Pages {
            publish: o.publish.unwrap_or(publish),
            path_prefix: o.path_prefix,
            expire_in: o.expire_in,
        }),
    }
}

/// `Entry::Job#artifacts_with_pages_publish_path`: a Pages job's artifacts hold its
/// publish folder (an artifacts entry is made when the job has none).
fn with_publish_path(artifacts: Option<&Artifacts>, publish: &str) -> Artifacts {
    let mut a = artifacts.cloned().unwrap_or(Artifacts {
        name: None,
        paths: Vec::new(),
        exclude: Vec::new(),
        untracked: false,
        when: ArtifactsWhen::OnSuccess,
        expire_in: None,
        expose_as: None,
        access: None,
        reports: IndexMap::new(),
        coverage_report: None,
    });
    if !a.paths.iter().any(|p| p == publish) {
        a.paths.push(publish.to_owned());
    }
    a
}

fn parse_needs(n: &Node, path: &str, bridge: bool, cx: &mut Cx) -> Option<NeedList> {
    let items = match &n.value {
        Value::Seq(_) => flatten_nodes(n)?,
        Value::Map(_) => vec![n],
        _ => {
            cx.config(path, "can only be a Hash or an Array", n.pos);
            return None;
        }
    };
    let mut list = NeedList::default();
    let need_path = join(path, "need");
    let mut bridge_needs = 0;
    for item in items {
        match &item.value {
            // An empty item (from an alias of a list holding `- `) is dropped, as GitLab does.
            Value::Null => {}
            Value::Str(s) => list.jobs.push(NeedSpec {
                job: s.clone(),
                artifacts: true,
                optional: false,
                matrix: None,
                pos: item.pos,
            }),
            Value::Map(m) => {
                let flag = |cx: &mut Cx, key: &str, default: bool| match m.get(key) {
                    None => default,
                    Some(v) => match v.as_bool() {
                        Some(b) => b,
                        None => {
                            cx.attr(&need_path, key, "should be a boolean value", v.pos);
                            default
                        }
                    },
                };
                if m.contains_key("pipeline") && !m.contains_key("job") {
                    cx.unknown_keys(m, &["pipeline"], &need_path, item.pos);
                    bridge_needs += 1;
                    if !bridge {
                        // A job with only `needs: {pipeline: x}` is a bridge; on a build job it's an
                        // invalid type.
                        cx.config(path, "uses invalid types: bridge", item.pos);
                    }
                    continue;
                }
                if m.contains_key("project") || m.contains_key("pipeline") {
                    cx.unknown_keys(
                        m,
                        &["project", "pipeline", "job", "ref", "artifacts", "optional"],
                        &need_path,
                        item.pos,
                    );
                    if bridge && m.contains_key("project") {
                        cx.config(path, "uses invalid types: cross_dependency", item.pos);
                    }
                    let s = |k: &str| m.get(k).and_then(Node::scalar_to_string);
                    list.cross.push(CrossNeed {
                        project: s("project"),
                        pipeline: s("pipeline"),
                        job: s("job"),
                        ref_: s("ref"),
                        artifacts: flag(cx, "artifacts", true),
                    });
                    continue;
                }
                cx.unknown_keys(
                    m,
                    &["job", "artifacts", "optional", "parallel"],
                    &need_path,
                    item.pos,
                );
                let Some(job) = m.get("job").and_then(Node::as_str) else {
                    cx.attr(&need_path, "job", "should be a string", item.pos);
                    continue;
                };
                let matrix = match m.get("parallel") {
                    None => None,
                    Some(p) => match keyword::parallel(p, &join(&need_path, "parallel"), cx) {
                        Some(Parallel::Matrix(mx)) => Some(mx),
                        Some(Parallel::Count(_)) => {
                            cx.config(&join(&need_path, "parallel"), "should be a hash", p.pos);
                            None
                        }
                        None => None,
                    },
                };
                list.jobs.push(NeedSpec {
                    job: job.to_owned(),
                    artifacts: flag(cx, "artifacts", true),
                    optional: flag(cx, "optional", false),
                    matrix,
                    pos: item.pos,
                });
            }
            _ => cx.config(&need_path, "has an unsupported type", item.pos),
        }
    }
    if bridge_needs > 1 {
        cx.config(path, "should contain at most one bridge need", n.pos);
    }
    Some(list)
}

/// One job instance (a `parallel` expansion of a definition, or the definition itself).
struct Instance {
    def: usize,
    name: String,
    node_index: Option<u32>,
    node_total: Option<u32>,
    matrix: IndexMap<String, String>,
    needs: Option<Vec<Need>>,
    dependencies: Option<Vec<String>>,
}

fn expand_parallel(def: &JobDef, di: usize) -> Vec<Instance> {
    let single = |name: String, idx, total, matrix| Instance {
        def: di,
        name,
        node_index: idx,
        node_total: total,
        matrix,
        needs: None,
        dependencies: None,
    };
    match &def.parallel {
        None => vec![single(def.name.clone(), None, None, IndexMap::new())],
        Some(Parallel::Count(n)) => (1..=*n)
            .map(|i| {
                single(
                    format!("{} {i}/{n}", def.name),
                    Some(i),
                    Some(*n),
                    IndexMap::new(),
                )
            })
            .collect(),
        Some(Parallel::Matrix(entries)) => {
            let combos = matrix_combinations(entries);
            let total = u32::try_from(combos.len()).unwrap_or(u32::MAX);
            // Identical value tuples collide: the last wins (GitLab).
            let mut by_name: IndexMap<String, IndexMap<String, String>> = IndexMap::new();
            for vars in combos {
                let values: Vec<&str> = vars.values().map(String::as_str).collect();
                let name = format!("{}: [{}]", def.name, values.join(", "));
                by_name.insert(name, vars);
            }
            by_name
                .into_iter()
                .enumerate()
                .map(|(i, (name, vars))| {
                    single(
                        name,
                        Some(u32::try_from(i + 1).unwrap_or(u32::MAX)),
                        Some(total),
                        vars,
                    )
                })
                .collect()
        }
    }
}

pub(crate) fn matrix_combinations(
    entries: &[IndexMap<String, Vec<String>>],
) -> Vec<IndexMap<String, String>> {
    let mut out = Vec::new();
    for entry in entries {
        let mut combos: Vec<IndexMap<String, String>> = vec![IndexMap::new()];
        for (k, values) in entry {
            let mut next = Vec::new();
            for c in &combos {
                for v in values {
                    let mut c = c.clone();
                    c.insert(k.clone(), v.clone());
                    next.push(c);
                }
            }
            combos = next;
        }
        out.extend(combos);
    }
    out
}

/// `$[[ matrix.NAME ]]` in `needs:parallel:matrix` values, replaced by the needing instance's
/// matrix values (GitLab's `MatrixInterpolator`); an unknown name (or any name, in a job
/// without `parallel:matrix`) is reported as `'NAME' does not exist in matrix configuration`.
fn interpolate_matrix_needs(
    specs: &[NeedSpec],
    vars: &IndexMap<String, String>,
    errors: &mut Vec<String>,
) -> Vec<NeedSpec> {
    static EXPR: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let Some(re) = EXPR
        .get_or_init(|| regex::Regex::new(r"\$\[\[\s*matrix\.([a-zA-Z0-9_-]+)\s*\]\]").ok())
        .as_ref()
    else {
        return specs.to_vec();
    };
    let mut out = specs.to_vec();
    for spec in &mut out {
        for entry in spec.matrix.iter_mut().flatten() {
            for v in entry.values_mut().flatten() {
                if !v.contains("$[[") {
                    continue;
                }
                *v = re
                    .replace_all(v, |c: &regex::Captures<'_>| match vars.get(&c[1]) {
                        Some(val) => val.clone(),
                        None => {
                            errors.push(format!(
                                "'{}' does not exist in matrix configuration",
                                &c[1]
                            ));
                            c[0].to_owned()
                        }
                    })
                    .into_owned();
            }
        }
    }
    out
}

fn resolve_needs(
    specs: &[NeedSpec],
    groups: &HashMap<String, Vec<usize>>,
    matrices: &MatrixInstances,
) -> Vec<Need> {
    let mut out = Vec::new();
    for s in specs {
        let mk = |job: String| Need {
            job,
            artifacts: s.artifacts,
            optional: s.optional,
        };
        if let Some(mx) = &s.matrix {
            // A job without `parallel` is needed by its name; the matrix is ignored (GitLab's
            // `Normalizer#expand_parallelized_needs` only rewrites needs on parallel jobs).
            if !matrices.contains_key(&s.job) && groups.get(&s.job).is_none_or(|g| g.len() <= 1) {
                out.push(mk(s.job.clone()));
                continue;
            }
            let wanted = matrix_combinations(mx);
            let insts = matrices.get(&s.job);
            for w in wanted {
                let values: Vec<&str> = w.values().map(String::as_str).collect();
                let name = format!("{}: [{}]", s.job, values.join(", "));
                match insts.and_then(|i| i.iter().find(|(n, _)| *n == name)) {
                    Some((n, _)) => out.push(mk(n.clone())),
                    None => out.push(mk(name)),
                }
            }
            continue;
        }
        match (groups.get(&s.job), matrices.get(&s.job)) {
            (Some(insts), _) if insts.len() > 1 || matrices.contains_key(&s.job) => {
                let _ = insts;
                // A parallel job: needing it means needing all its instances.
                out.push(Need {
                    job: format!("\u{0}group:{}", s.job),
                    artifacts: s.artifacts,
                    optional: s.optional,
                });
            }
            _ => out.push(mk(s.job.clone())),
        }
    }
    out
}

fn check_graph(
    jobs: &[Instance],
    defs: &[JobDef],
    stages: &[String],
    names: &HashMap<String, usize>,
    cx: &mut Cx,
) {
    let stage_idx = |s: &str| stages.iter().position(|x| x == s);
    for j in jobs {
        let def = &defs[j.def];
        let Some(my_stage) = stage_idx(&def.stage) else {
            cx.raw(
                format!(
                    "{} job: chosen stage {} does not exist; available stages are {}",
                    j.name,
                    def.stage,
                    stages.join(", ")
                ),
                Some(def.stage_pos),
            );
            continue;
        };
        // `environment:on_stop` must name a job stopping the same environment (GitLab's
        // `YamlProcessor#validate_on_stop_job!`, on the expanded job names).
        if let Some((env, stop)) = def
            .environment
            .as_ref()
            .and_then(|e| e.on_stop.as_ref().map(|s| (e, s)))
        {
            let problem = match names
                .get(stop)
                .map(|&i| defs[jobs[i].def].environment.as_ref())
            {
                None => Some("is not defined"),
                Some(None) => Some("does not have environment defined"),
                Some(Some(e)) if e.name != env.name => Some("have different environment name"),
                Some(Some(e)) if e.action != "stop" => Some("needs to have action stop defined"),
                Some(Some(_)) => None,
            };
            if let Some(problem) = problem {
                cx.raw(
                    format!("{} job: on_stop job {stop} {problem}", j.name),
                    Some(def.pos),
                );
            }
        }
        if let Some(deps) = &j.dependencies {
            for d in deps {
                match names.get(d) {
                    None => cx.raw(
                        format!("{} job: undefined dependency: {d}", j.name),
                        Some(def.pos),
                    ),
                    Some(&i) => {
                        if stage_idx(&defs[jobs[i].def].stage).is_some_and(|s| s > my_stage) {
                            cx.raw(format!("{} job: dependency {d} is not defined in current or prior stages", j.name), Some(def.pos));
                        }
                    }
                }
            }
        }
        let need_pos = |name: &str| {
            def.needs
                .as_ref()
                .and_then(|l| l.jobs.iter().find(|s| s.job == name))
                .map_or(def.pos, |s| s.pos)
        };
        if let Some(needs) = &j.needs {
            let mut seen = HashSet::new();
            let mut dup = Vec::new();
            for n in needs {
                let Some(group) = n.job.strip_prefix("\u{0}group:") else {
                    if n.job.chars().count() > MAX_NEED_NAME {
                        cx.raw(format!("{} job: need `{}` name is too long (maximum is {MAX_NEED_NAME} characters)", j.name, n.job), Some(need_pos(&n.job)));
                    }
                    if !seen.insert(n.job.clone()) {
                        dup.push(n.job.clone());
                    }
                    match names.get(&n.job) {
                        None if !n.optional => cx.raw(
                            format!("{} job: undefined need: {}", j.name, n.job),
                            Some(need_pos(&n.job)),
                        ),
                        None => {}
                        Some(&i)
                            if stage_idx(&defs[jobs[i].def].stage)
                                .is_some_and(|s| s > my_stage) =>
                        {
                            cx.raw(
                                format!(
                                    "{} job: need {} is not defined in current or prior stages",
                                    j.name, n.job
                                ),
                                Some(need_pos(&n.job)),
                            );
                        }
                        Some(_) => {}
                    }
                    continue;
                };
                let _ = group;
            }
            if !dup.is_empty() {
                cx.raw(
                    format!(
                        "{} has the following needs duplicated: {}.",
                        j.name,
                        dup.join(", ")
                    ),
                    Some(def.pos),
                );
            }
        }
    }
    // Cycles in the needs graph.
    let mut state = vec![0u8; jobs.len()];
    fn visit(
        i: usize,
        jobs: &[Instance],
        names: &HashMap<String, usize>,
        state: &mut [u8],
    ) -> bool {
        if state[i] == 1 {
            return true;
        }
        if state[i] == 2 {
            return false;
        }
        state[i] = 1;
        if let Some(needs) = &jobs[i].needs {
            for n in needs {
                if let Some(&k) = names.get(&n.job) {
                    if visit(k, jobs, names, state) {
                        return true;
                    }
                }
            }
        }
        state[i] = 2;
        false
    }
    for i in 0..jobs.len() {
        if visit(i, jobs, names, &mut state) {
            cx.raw("The pipeline has circular dependencies", None);
            break;
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn seed(
    inst: &Instance,
    def: &JobDef,
    pipeline_vars: &Variables,
    stages: &[String],
    ctx: &Context,
    files: &Files<'_>,
    has_workflow_rules: bool,
    cx: &mut Cx,
) -> Option<Job> {
    // The variables are looked up where they are and copied only for a job that is created
    // (rules leave out most jobs of a large configuration).
    let own: std::borrow::Cow<'_, Variables> = if inst.matrix.is_empty() {
        std::borrow::Cow::Borrowed(&def.variables)
    } else {
        let mut own = def.variables.clone();
        for (k, v) in &inst.matrix {
            own.insert(k.clone(), Variable::plain(v.clone()));
        }
        std::borrow::Cow::Owned(own)
    };
    let stage_idx = stages.iter().position(|s| *s == def.stage).unwrap_or(0);
    let mut job_predefined: IndexMap<&str, String> = IndexMap::new();
    job_predefined.insert("CI_JOB_NAME", inst.name.clone());
    job_predefined.insert("CI_JOB_NAME_SLUG", job_name_slug(&inst.name));
    job_predefined.insert("CI_JOB_STAGE", def.stage.clone());
    job_predefined.insert("CI_JOB_GROUP_NAME", def.name.clone());
    job_predefined.insert("CI_NODE_TOTAL", inst.node_total.unwrap_or(1).to_string());
    if let Some(i) = inst.node_index {
        job_predefined.insert("CI_NODE_INDEX", i.to_string());
    }
    if matches!(def.when, Some(When::Manual | When::Delayed)) {
        job_predefined.insert("CI_JOB_MANUAL", "true".into());
    }
    if let Some(env) = &def.environment {
        job_predefined.insert("CI_ENVIRONMENT_NAME", env.name.clone());
        job_predefined.insert("CI_ENVIRONMENT_ACTION", env.action.clone());
        if let Some(u) = &env.url {
            job_predefined.insert("CI_ENVIRONMENT_URL", u.clone());
        }
        if let Some(t) = &env.deployment_tier {
            job_predefined.insert("CI_ENVIRONMENT_TIER", t.clone());
        }
    }
    // Without group or project variables scoped to an environment: what the environment's name is
    // expanded with (GitLab's `simple_variables`).
    let unscoped = |n: &str| -> Option<String> {
        ctx.job_var(n)
            .or_else(|| ctx.user_var(n))
            .or_else(|| own.get(n).map(|v| v.value.clone()))
            .or_else(|| {
                pipeline_vars
                    .get(n)
                    .filter(|_| def.inherit.variables.allows(n))
                    .map(|v| v.value.clone())
            })
            .or_else(|| job_predefined.get(n).cloned())
            .or_else(|| ctx.predefined.get(n).cloned())
    };
    let environment = match &def.environment {
        Some(env) if ctx.has_scoped_variables() => Some(crate::expand::expand_server(
            &env.name,
            &unscoped,
            crate::expand::Unknown::Empty,
        )),
        _ => None,
    };
    let lookup = |n: &str| -> Option<String> {
        match &environment {
            Some(env) => ctx
                .job_var(n)
                .or_else(|| ctx.pipeline.get(n).cloned())
                .or_else(|| ctx.project_var_for(n, Some(env)))
                .or_else(|| unscoped(n)),
            None => unscoped(n),
        }
    };
    let scope = Scope {
        ctx,
        lookup: &lookup,
        files,
    };
    let mut when = def.when.unwrap_or(When::OnSuccess);
    let mut allow_failure = def
        .allow_failure
        .clone()
        .unwrap_or((def.when == Some(When::Manual), Vec::new()));
    let mut start_in = def.start_in.clone();
    let mut needs = inst.needs.clone();
    let mut interruptible = def.interruptible;
    let mut rule_vars = Variables::new();
    if let Some(rules) = &def.rules {
        let rule = match rules::first_match(rules, &scope) {
            Ok(rule) => rule?,
            Err(e) => {
                cx.raw(
                    format!("Failed to parse rule for {}: {e}", inst.name),
                    Some(def.pos),
                );
                return None;
            }
        };
        if rule.when.as_deref() == Some("never") {
            return None;
        }
        if let Some(w) = rule.when.as_deref().and_then(When::parse) {
            when = w;
        }
        allow_failure = match rule.allow_failure {
            Some(b) => (b, Vec::new()),
            None => def
                .allow_failure
                .clone()
                .unwrap_or((def.when == Some(When::Manual), Vec::new())),
        };
        if rule.start_in.is_some() {
            start_in = rule.start_in.clone();
        }
        if let Some(v) = &rule.variables {
            rule_vars = v.clone();
        }
        if let Some(n) = &rule.needs {
            if let Some(list) =
                parse_needs(n, &format!("jobs:{}:rules:needs", def.name), def.bridge, cx)
            {
                needs = Some(
                    list.jobs
                        .iter()
                        .map(|s| Need {
                            job: s.job.clone(),
                            artifacts: s.artifacts,
                            optional: s.optional,
                        })
                        .collect(),
                );
            }
        }
        if rule.interruptible.is_some() {
            interruptible = rule.interruptible;
        }
    } else {
        // GitLab: `only` defaults to `{refs: [branches, tags]}` unless the job has `rules`
        // or the configuration has `workflow:rules`; an `only` without `refs` has the
        // default refs merged in.
        let only = match &def.only {
            Some(p) => {
                let mut p = p.clone();
                if p.refs.is_none() {
                    p.refs = Policy::default_only().refs;
                }
                Some(p)
            }
            None if !has_workflow_rules => Some(Policy::default_only()),
            None => None,
        };
        if only.as_ref().is_some_and(|p| !p.all_hold(&scope)) {
            return None;
        }
        if def.except.as_ref().is_some_and(|p| p.any_holds(&scope)) {
            return None;
        }
    }
    if when != When::Delayed {
        start_in = None;
    }
    let mut variables = own.as_ref().clone();
    for (k, v) in rule_vars {
        variables.insert(k, v);
    }
    let tags = def
        .tags
        .iter()
        .map(|t| {
            crate::expand::expand_server(
                t,
                &|n| {
                    variables
                        .get(n)
                        .map(|v| v.value.clone())
                        .or_else(|| lookup(n))
                },
                crate::expand::Unknown::Keep,
            )
        })
        .collect();
    let inherited: Variables = match &def.inherit.variables {
        InheritSet::All => pipeline_vars.clone(),
        InheritSet::Nothing => Variables::new(),
        InheritSet::Only(list) => pipeline_vars
            .iter()
            .filter(|(k, _)| list.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    Some(Job {
        name: inst.name.clone(),
        stage: def.stage.clone(),
        stage_idx,
        when,
        allow_failure: allow_failure.0,
        allow_failure_exit_codes: allow_failure.1,
        needs,
        cross_needs: def
            .needs
            .as_ref()
            .map(|n| n.cross.clone())
            .unwrap_or_default(),
        dependencies: inst.dependencies.clone(),
        before_script: def.before_script.clone(),
        script: def.script.clone(),
        after_script: def.after_script.clone(),
        pre_get_sources_script: def.hooks.clone(),
        variables,
        inherited_variables: inherited,
        tags,
        image: def.image.clone(),
        services: def.services.clone(),
        artifacts: def.artifacts.as_deref().cloned(),
        caches: def.caches.clone(),
        retry: def.retry.clone(),
        start_in,
        timeout: def.timeout,
        interruptible,
        coverage: def.coverage.clone(),
        environment: def.environment.clone(),
        resource_group: def.resource_group.clone(),
        trigger: def.trigger.clone(),
        release: def.release.clone(),
        secrets: def.secrets.clone(),
        inputs: def.inputs.clone(),
        id_tokens: def.id_tokens.clone(),
        manual_confirmation: def.manual_confirmation.clone(),
        pages: def.pages.clone(),
        run: def.run.clone(),
        node_index: inst.node_index,
        node_total: inst.node_total,
        group_name: def.name.clone(),
        pos: def.pos,
    })
}

/// Expand needs on parallel groups to the instances present, drop absent optional needs,
/// report absent required ones and the needs limit.
fn check_needs_present(jobs: &mut [Job], cx: &mut Cx) {
    let present: HashSet<String> = jobs.iter().map(|j| j.name.clone()).collect();
    let mut by_group: HashMap<String, Vec<String>> = HashMap::new();
    for j in jobs.iter() {
        by_group
            .entry(j.group_name.clone())
            .or_default()
            .push(j.name.clone());
    }
    for j in jobs.iter_mut() {
        let Some(needs) = j.needs.take() else {
            continue;
        };
        let mut out = Vec::new();
        for n in needs {
            if let Some(group) = n.job.strip_prefix("\u{0}group:") {
                match by_group.get(group) {
                    Some(insts) => out.extend(insts.iter().map(|i| Need {
                        job: i.clone(),
                        artifacts: n.artifacts,
                        optional: n.optional,
                    })),
                    None if n.optional => {}
                    None => cx.raw(needs_absent(&j.name, group), Some(j.pos)),
                }
                continue;
            }
            if present.contains(&n.job) {
                out.push(n);
            } else if !n.optional {
                cx.raw(needs_absent(&j.name, &n.job), Some(j.pos));
            }
        }
        if out.len() > MAX_NEEDS {
            cx.raw(
                format!(
                    "{}: one job can only need {MAX_NEEDS} others, but you have listed {}. See needs keyword documentation for more details",
                    j.name,
                    out.len()
                ),
                Some(j.pos),
            );
        }
        j.needs = Some(out);
    }
}

fn needs_absent(job: &str, need: &str) -> String {
    format!(
        "'{job}' job needs '{need}' job, but '{need}' does not exist in the pipeline. This might be because of the only, except, or rules keywords. To need a job that sometimes does not exist in the pipeline, use needs:optional."
    )
}

#[cfg(test)]
mod pages_tests {
    use crate::context::{Context, PipelineInfo};
    use crate::loader::Loader;
    use crate::model::Pages;

    struct One(&'static str);
    impl Loader for One {
        fn read(&self, _: &str) -> Result<Option<String>, crate::ReadError> {
            Ok(Some(self.0.to_owned()))
        }
        fn files(&self) -> std::result::Result<Vec<String>, crate::loader::ReadError> {
            Ok(vec![".gitlab-ci.yml".into()])
        }
    }

    /// GitLab's `Entry::Job#pages_job?` and `#artifacts_with_pages_publish_path`.
    #[test]
    fn pages_jobs_and_their_publish_folder() {
        let text = "pages:\n  script: [x]\nlegacy:\n  script: [x]\ndocs:\n  pages: true\n  publish: site\n  script: [x]\n  artifacts: {paths: [report.txt]}\nreview:\n  pages: {publish: dist, path_prefix: $CI_COMMIT_REF_SLUG, expire_in: 1 week}\n  script: [x]\n  artifacts: {paths: [dist]}\nnot-pages:\n  pages: {}\n  script: [x]\n";
        let ctx = Context::new(&PipelineInfo::default(), &[], None);
        let compiled = super::compile(&super::Options::default(), &ctx, &One(text));
        let pipeline = compiled.pipeline.expect("valid");
        let job = |n: &str| {
            pipeline
                .jobs
                .iter()
                .find(|j| j.name == n)
                .unwrap_or_else(|| panic!("job {n}"))
        };
        let paths = |n: &str| job(n).artifacts.as_ref().map(|a| a.paths.clone());
        assert_eq!(
            job("pages").pages,
            Some(Pages {
                publish: "public".into(),
                path_prefix: None,
                expire_in: None
            })
        );
        assert_eq!(paths("pages"), Some(vec!["public".to_owned()]));
        assert_eq!(
            job("docs").pages.as_ref().map(|p| p.publish.as_str()),
            Some("site")
        );
        assert_eq!(
            paths("docs"),
            Some(vec!["report.txt".into(), "site".into()])
        );
        let review = job("review").pages.clone().expect("a pages job");
        assert_eq!(review.publish, "dist");
        assert_eq!(review.path_prefix.as_deref(), Some("$CI_COMMIT_REF_SLUG"));
        assert_eq!(review.expire_in.as_deref(), Some("1 week"));
        assert_eq!(paths("review"), Some(vec!["dist".into()]));
        assert_eq!(job("not-pages").pages, None);
        assert_eq!(job("not-pages").artifacts, None);
        assert_eq!(job("legacy").pages, None);
    }

    #[test]
    fn pages_false_turns_the_legacy_name_off() {
        let ctx = Context::new(&PipelineInfo::default(), &[], None);
        let compiled = super::compile(
            &super::Options::default(),
            &ctx,
            &One("pages:\n  pages: false\n  script: [x]\n"),
        );
        let pipeline = compiled.pipeline.expect("valid");
        assert_eq!(pipeline.jobs[0].pages, None);
        assert_eq!(pipeline.jobs[0].artifacts, None);
    }
}
