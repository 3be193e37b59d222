//! The step runner: runs a `run:` list, one step at a time, and returns the tree of
//! [`StepResult`]s (the step-runner's execution algorithm, `shared/spec/steps.md` §2.4).
//!
//! For each step: expand its reference and load the definition; check its inputs against
//! the spec (unknown or missing ones fail the step before anything runs), expand them and
//! apply defaults; layer the environment; then run the program (`exec`) or the children
//! (`run`), and read the outputs. The first failing step ends its sequence.
//!
//! Where programs run is the [`Launcher`]'s business (a local process, a stage of the
//! runner's executor in a container…); the engine only reads and writes files on this
//! machine, through [`PathMap`](crate::load::PathMap) when the job sees them elsewhere.
//!
//! Environment of a program, highest first: the definition's `env`, the invocation's
//! `env`, the enclosing `run` definitions' and invocations' `env`, variables exported by
//! earlier steps (`export_file`), the base environment ([`JobContext::env`]).
//!
//! Limits: steps nest at most [`MAX_NESTING`] deep (a step that calls itself stops
//! there); an output or export file holds at most [`MAX_OUTPUT_FILE_BYTES`].

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::definition::{Body, Invocation, Outputs, Param, Target};
use crate::expr::text;
use crate::load::{Loaded, Loader};
use crate::reference;
use crate::result::{ExecResult, ResultReference, ResultStep, Status, StepResult, now_rfc3339};
use crate::template::{expand_text, expand_value};

/// Deepest nesting of steps calling steps.
pub const MAX_NESTING: usize = 32;
/// Largest output or export file read.
pub const MAX_OUTPUT_FILE_BYTES: u64 = 1024 * 1024;

/// What a launched program is.
#[derive(Debug, Clone, Copy)]
pub enum Program<'a> {
    /// An argv, run without a shell.
    Exec(&'a [String]),
    /// Shell text, run by bash (or sh) with `errexit` and `pipefail`.
    Script(&'a str),
}

/// One program to run.
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    /// The step's dotted path (`build.compile`).
    pub step: &'a str,
    pub program: Program<'a>,
    /// Variables to set on top of the job's environment.
    pub env: &'a IndexMap<String, String>,
    /// Where it runs, as the job sees it.
    pub work_dir: &'a Path,
}

/// How a launched program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launched<S> {
    /// It exited with this code.
    Exited(i32),
    /// The launcher stopped it, or could not run it (a timeout, a cancellation, a
    /// failure of the environment): the whole run stops, and the launcher's reason is
    /// kept for its caller ([`Engine::stopped`]).
    Stopped(S),
}

/// Runs programs in the job's environment.
pub trait Launcher: Sync {
    /// Why a program was stopped.
    type Stop: Clone + std::fmt::Display + Send;
    /// Runs `launch` to its end; its output goes to the job's log.
    fn launch(&self, launch: Launch<'_>) -> impl Future<Output = Launched<Self::Stop>> + Send;
    /// A line for the job's log.
    fn log(&self, line: &str);
    /// Hides `value` in everything logged from now on: a `sensitive` input or output
    /// (values shorter than [`MIN_MASKED_LEN`] are not given, they would hide too much).
    fn mask(&self, value: &str) {
        let _ = value;
    }
}

/// Shortest sensitive value masked.
pub const MIN_MASKED_LEN: usize = 4;

/// Masks the text inside `value` (strings of arrays and structs too).
fn mask_value<L: Launcher>(launcher: &L, value: &Value) {
    match value {
        Value::String(s) if s.len() >= MIN_MASKED_LEN => launcher.mask(s),
        Value::Array(items) => items.iter().for_each(|v| mask_value(launcher, v)),
        Value::Object(o) => o.values().for_each(|v| mask_value(launcher, v)),
        Value::Number(_) | Value::Bool(_) => {
            let text = text(value);
            if text.len() >= MIN_MASKED_LEN {
                launcher.mask(&text);
            }
        }
        _ => {}
    }
}

/// What the engine knows of the job.
#[derive(Debug, Clone)]
pub struct JobContext {
    /// The job's directory on this machine (relative local references start here).
    pub work_dir: PathBuf,
    /// The job's CI/CD variables: `${{ vars.X }}` (and the legacy `${{ job.X }}`).
    pub vars: Map<String, Value>,
    /// The base environment of every program (and of `${{ env.X }}`).
    pub env: IndexMap<String, String>,
    /// A directory on this machine for output and export files (created if missing).
    pub files_dir: PathBuf,
}

/// The scope of one step: what its expressions see.
#[derive(Clone, Default)]
struct Scope {
    path: String,
    inputs: Map<String, Value>,
    /// Explicit `env` layers, outermost first (exports and the base go under them).
    env: IndexMap<String, String>,
    /// The definition's directory (host).
    func_dir: PathBuf,
    /// Outputs of the siblings run so far.
    steps: Map<String, Value>,
    output_file: Option<PathBuf>,
    export_file: Option<PathBuf>,
}

/// Runs steps.
pub struct Engine<'a, L: Launcher> {
    launcher: &'a L,
    loader: Loader,
    job: JobContext,
    exports: Mutex<IndexMap<String, String>>,
    files: AtomicU32,
    stopped: Mutex<Option<L::Stop>>,
}

type Boxed<'s> = Pin<Box<dyn Future<Output = StepResult> + Send + 's>>;

struct Failure(String);

impl<'a, L: Launcher> Engine<'a, L> {
    pub fn new(launcher: &'a L, loader: Loader, job: JobContext) -> Self {
        Self {
            launcher,
            loader,
            job,
            exports: Mutex::new(IndexMap::new()),
            files: AtomicU32::new(0),
            stopped: Mutex::new(None),
        }
    }

    /// The variables exported so far.
    fn exported(&self) -> IndexMap<String, String> {
        self.exports.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Why the run stopped early, when a launch was stopped.
    pub fn stopped(&self) -> Option<L::Stop> {
        self.stopped.lock().ok().and_then(|s| s.clone())
    }

    /// Runs a job's `run:` list as an anonymous `run` definition; the root result.
    pub async fn run(&self, steps: &[Invocation]) -> StepResult {
        let started_at = now_rfc3339();
        let scope = Scope {
            func_dir: self.job.work_dir.clone(),
            ..Scope::default()
        };
        let (children, status, _) = self.sequence(steps, &scope, 0).await;
        let error = children.iter().find_map(|c| c.error.clone());
        StepResult {
            step: ResultStep {
                name: String::new(),
                step: ResultReference {
                    protocol: "job".to_owned(),
                    ..ResultReference::default()
                },
                ..ResultStep::default()
            },
            spec: None,
            status,
            outputs: Map::new(),
            exports: self.exported(),
            env: IndexMap::new(),
            exec_result: None,
            sub_step_results: children,
            started_at,
            ended_at: now_rfc3339(),
            error,
        }
    }

    /// Runs `steps` in `scope` until one does not succeed; the results, the status of the
    /// sequence and the siblings' outputs.
    async fn sequence(
        &self,
        steps: &[Invocation],
        scope: &Scope,
        depth: usize,
    ) -> (Vec<StepResult>, Status, Map<String, Value>) {
        let mut scope = scope.clone();
        scope.steps = Map::new();
        let mut results = Vec::new();
        let mut status = Status::Success;
        for step in steps {
            let result = self.invoke(step, &scope, depth).await;
            let mut entry = Map::new();
            entry.insert("outputs".to_owned(), Value::Object(result.outputs.clone()));
            scope.steps.insert(step.name.clone(), Value::Object(entry));
            status = result.status;
            results.push(result);
            if status != Status::Success {
                break;
            }
        }
        (results, status, scope.steps)
    }

    fn invoke<'s>(&'s self, step: &'s Invocation, parent: &'s Scope, depth: usize) -> Boxed<'s> {
        Box::pin(async move {
            let started_at = now_rfc3339();
            let path = if parent.path.is_empty() {
                step.name.clone()
            } else {
                format!("{}.{}", parent.path, step.name)
            };
            self.launcher.log(&format!("Running step name={path}"));
            let mut result = StepResult {
                step: ResultStep {
                    name: step.name.clone(),
                    ..ResultStep::default()
                },
                spec: None,
                status: Status::Running,
                outputs: Map::new(),
                exports: IndexMap::new(),
                env: IndexMap::new(),
                exec_result: None,
                sub_step_results: Vec::new(),
                started_at,
                ended_at: String::new(),
                error: None,
            };
            let outcome = if depth >= MAX_NESTING {
                Err(Failure(format!(
                    "steps are nested more than {MAX_NESTING} deep (does a step call itself?)"
                )))
            } else {
                self.invoke_inner(step, parent, depth, &path, &mut result)
                    .await
            };
            match outcome {
                Ok(()) => {
                    if result.status == Status::Running {
                        result.status = Status::Success;
                    }
                }
                Err(Failure(message)) => {
                    self.launcher.log(&format!("step {path} failed: {message}"));
                    result.status = Status::Failure;
                    result.error = Some(message);
                }
            }
            if result.status == Status::Failure && result.error.is_none() {
                result.error = result.sub_step_results.iter().find_map(|c| c.error.clone());
            }
            result.ended_at = now_rfc3339();
            result
        })
    }

    async fn invoke_inner(
        &self,
        step: &Invocation,
        parent: &Scope,
        depth: usize,
        path: &str,
        result: &mut StepResult,
    ) -> Result<(), Failure> {
        let parent_cx = self.context(parent);
        let at = |what: &str, e: crate::expr::ExprError| Failure(format!("{what}: {}", e.message));
        let mut env = parent.env.clone();
        for (k, v) in &step.env {
            let value = expand_text(v, &parent_cx).map_err(|e| at(&format!("env {k}"), e))?;
            env.insert(k.clone(), value);
        }
        result.step.env = step
            .env
            .keys()
            .filter_map(|k| env.get_key_value(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let (output_file, export_file) = self.fresh_files()?;
        match &step.target {
            Target::Script(script) => {
                result.step.step = ResultReference {
                    protocol: "script".to_owned(),
                    ..ResultReference::default()
                };
                // The script's own output and export files (GitLab's script step is a
                // built-in exec step: its text is an input, expanded by the caller).
                let mut own = parent.clone();
                own.output_file = Some(output_file.clone());
                own.export_file = Some(export_file.clone());
                let text = expand_text(script, &self.context(&own)).map_err(|e| at("script", e))?;
                let work_dir = self.loader.paths.to_seen(&self.job.work_dir);
                let process_env = self.process_env(&env);
                let launched = self
                    .launcher
                    .launch(Launch {
                        step: path,
                        program: Program::Script(&text),
                        env: &process_env,
                        work_dir: &work_dir,
                    })
                    .await;
                result.exec_result = Some(ExecResult {
                    command: vec!["sh".to_owned(), "-c".to_owned(), text.clone()],
                    work_dir: work_dir.to_string_lossy().into_owned(),
                    exit_code: 0,
                });
                self.finish_exec(
                    launched,
                    result,
                    &Outputs::default(),
                    &output_file,
                    &export_file,
                )
            }
            Target::Func(raw) => {
                let expanded = expand_value(raw, &parent_cx).map_err(|e| at("reference", e))?;
                let reference = reference::parse(&expanded).map_err(Failure)?;
                let loaded: Loaded = self
                    .loader
                    .load(&reference, &parent.func_dir)
                    .await
                    .map_err(|e| Failure(e.0))?;
                result.step.step = loaded.reference.clone();
                result.spec = Some(loaded.spec.clone());
                let inputs = self.inputs(step, &loaded, &parent_cx)?;
                result.step.inputs = inputs.clone();
                let mut scope = Scope {
                    path: path.to_owned(),
                    inputs,
                    env,
                    func_dir: loaded.dir.clone(),
                    steps: Map::new(),
                    output_file: Some(output_file.clone()),
                    export_file: Some(export_file.clone()),
                };
                let cx = self.context(&scope);
                for (k, v) in &loaded.definition.env {
                    let value = expand_text(v, &cx).map_err(|e| at(&format!("env {k}"), e))?;
                    result.env.insert(k.clone(), value.clone());
                    scope.env.insert(k.clone(), value);
                }
                match &loaded.definition.body {
                    Body::Exec { command, work_dir } => {
                        let cx = self.context(&scope);
                        let argv = command
                            .iter()
                            .enumerate()
                            .map(|(i, a)| {
                                expand_text(a, &cx)
                                    .map_err(|e| at(&format!("exec.command[{i}]"), e))
                            })
                            .collect::<Result<Vec<_>, _>>()?;
                        let work_dir = match work_dir {
                            Some(w) => PathBuf::from(
                                expand_text(w, &cx).map_err(|e| at("exec.work_dir", e))?,
                            ),
                            None => self.loader.paths.to_seen(&self.job.work_dir),
                        };
                        let process_env = self.process_env(&scope.env);
                        let launched = self
                            .launcher
                            .launch(Launch {
                                step: path,
                                program: Program::Exec(&argv),
                                env: &process_env,
                                work_dir: &work_dir,
                            })
                            .await;
                        result.exec_result = Some(ExecResult {
                            command: argv.clone(),
                            work_dir: work_dir.to_string_lossy().into_owned(),
                            exit_code: 0,
                        });
                        self.finish_exec(
                            launched,
                            result,
                            &loaded.spec.outputs,
                            &output_file,
                            &export_file,
                        )
                    }
                    Body::Run {
                        steps,
                        outputs,
                        delegate,
                    } => {
                        let (children, status, siblings) =
                            self.sequence(steps, &scope, depth + 1).await;
                        result.sub_step_results = children;
                        if status != Status::Success {
                            result.status = status;
                            return Ok(());
                        }
                        scope.steps = siblings;
                        result.outputs = match (&loaded.spec.outputs, delegate) {
                            (Outputs::Delegate(_), Some(child)) => result
                                .sub_step_results
                                .iter()
                                .find(|r| &r.step.name == child)
                                .map(|r| r.outputs.clone())
                                .unwrap_or_default(),
                            (Outputs::Declared(declared), _) => {
                                let cx = self.context(&scope);
                                let mut values = Map::new();
                                for (name, v) in outputs {
                                    values.insert(
                                        name.clone(),
                                        expand_value(v, &cx)
                                            .map_err(|e| at(&format!("outputs.{name}"), e))?,
                                    );
                                }
                                typed_outputs(declared, values)?
                            }
                            (Outputs::Delegate(_), None) => Map::new(),
                        };
                        mask_outputs(self.launcher, &loaded.spec.outputs, &result.outputs);
                        Ok(())
                    }
                }
            }
        }
    }

    /// Checks the invocation's inputs against the spec, expands them and applies defaults.
    fn inputs(
        &self,
        step: &Invocation,
        loaded: &Loaded,
        cx: &Map<String, Value>,
    ) -> Result<Map<String, Value>, Failure> {
        let declared = &loaded.spec.inputs;
        if let Some(unknown) = step.inputs.keys().find(|k| !declared.contains_key(*k)) {
            return Err(Failure(format!(
                "the step does not accept input `{unknown}` ({})",
                accepted(declared)
            )));
        }
        let mut out = Map::new();
        for (name, param) in declared {
            let value = match step.inputs.get(name) {
                Some(v) => expand_value(v, cx)
                    .map_err(|e| Failure(format!("input {name}: {}", e.message)))?,
                None => match &param.default {
                    Some(d) => d.clone(),
                    None => {
                        return Err(Failure(format!(
                            "input `{name}` ({}) is required",
                            param.ty.name()
                        )));
                    }
                },
            };
            if !param.ty.accepts(&value) {
                return Err(Failure(format!(
                    "input `{name}` must be a {}, not {}",
                    param.ty.name(),
                    short(&value)
                )));
            }
            if param.sensitive {
                mask_value(self.launcher, &value);
            }
            out.insert(name.clone(), value);
        }
        Ok(out)
    }

    /// After a program: its exit, outputs and exports into `result`.
    fn finish_exec(
        &self,
        launched: Launched<L::Stop>,
        result: &mut StepResult,
        outputs: &Outputs,
        output_file: &Path,
        export_file: &Path,
    ) -> Result<(), Failure> {
        let code = match launched {
            Launched::Stopped(stop) => {
                result.status = Status::Cancelled;
                result.error = Some(stop.to_string());
                if let Ok(mut stopped) = self.stopped.lock() {
                    *stopped = Some(stop);
                }
                return Ok(());
            }
            Launched::Exited(code) => code,
        };
        if let Some(exec) = &mut result.exec_result {
            exec.exit_code = code;
        }
        if code != 0 {
            return Err(Failure(format!("exit status {code}")));
        }
        let lines = read_lines(output_file)?;
        result.outputs = match outputs {
            Outputs::Delegate(_) => delegated(output_file)?,
            Outputs::Declared(declared) => {
                let mut values = Map::new();
                for (line, name, value) in lines {
                    if !declared.contains_key(&name) {
                        return Err(Failure(format!(
                            "output file line {line}: unexpected output `{name}` ({})",
                            if declared.is_empty() {
                                "the step declares no outputs".to_owned()
                            } else {
                                format!(
                                    "declared: {}",
                                    declared.keys().cloned().collect::<Vec<_>>().join(", ")
                                )
                            }
                        )));
                    }
                    values.insert(name, value);
                }
                typed_outputs(declared, values)?
            }
        };
        mask_outputs(self.launcher, outputs, &result.outputs);
        for (line, name, value) in read_lines(export_file)? {
            let value = match value {
                Value::String(s) => s,
                Value::Number(_) | Value::Bool(_) => text(&value),
                other => {
                    return Err(Failure(format!(
                        "export file line {line}: `{name}` must be text, a number or a boolean, not {}",
                        short(&other)
                    )));
                }
            };
            result.exports.insert(name.clone(), value.clone());
            if let Ok(mut exports) = self.exports.lock() {
                exports.insert(name, value);
            }
        }
        Ok(())
    }

    /// Two new empty files for a step (host paths).
    fn fresh_files(&self) -> Result<(PathBuf, PathBuf), Failure> {
        let n = self.files.fetch_add(1, Ordering::Relaxed) + 1;
        std::fs::create_dir_all(&self.job.files_dir)
            .map_err(|e| Failure(format!("create {}: {e}", self.job.files_dir.display())))?;
        let make = |kind: &str| {
            let p = self.job.files_dir.join(format!("{n}.{kind}.jsonl"));
            std::fs::write(&p, b"")
                .map(|()| p)
                .map_err(|e| Failure(format!("create the {kind} file: {e}")))
        };
        Ok((make("output")?, make("export")?))
    }

    /// Base, then exports, then the explicit layers.
    fn process_env(&self, layers: &IndexMap<String, String>) -> IndexMap<String, String> {
        let mut env = IndexMap::new();
        for (k, v) in self.exported().iter().chain(layers) {
            env.insert(k.clone(), v.clone());
        }
        env
    }

    /// What `${{ }}` sees in `scope`.
    fn context(&self, scope: &Scope) -> Map<String, Value> {
        let mut env: Map<String, Value> = self
            .job
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        for (k, v) in self.exported().iter().chain(&scope.env) {
            env.insert(k.clone(), Value::String(v.clone()));
        }
        let seen =
            |p: &Path| Value::String(self.loader.paths.to_seen(p).to_string_lossy().into_owned());
        let mut cx = Map::new();
        cx.insert("inputs".to_owned(), Value::Object(scope.inputs.clone()));
        cx.insert("env".to_owned(), Value::Object(env));
        cx.insert("vars".to_owned(), Value::Object(self.job.vars.clone()));
        let mut job = self.job.vars.clone();
        job.entry("inputs")
            .or_insert_with(|| Value::Object(Map::new()));
        cx.insert("job".to_owned(), Value::Object(job));
        cx.insert("steps".to_owned(), Value::Object(scope.steps.clone()));
        cx.insert("func_dir".to_owned(), seen(&scope.func_dir));
        cx.insert("step_dir".to_owned(), seen(&scope.func_dir));
        cx.insert("work_dir".to_owned(), seen(&self.job.work_dir));
        if let Some(f) = &scope.output_file {
            cx.insert("output_file".to_owned(), seen(f));
        }
        if let Some(f) = &scope.export_file {
            cx.insert("export_file".to_owned(), seen(f));
        }
        cx
    }
}

fn accepted(declared: &IndexMap<String, Param>) -> String {
    if declared.is_empty() {
        "it takes no inputs".to_owned()
    } else {
        format!(
            "it takes: {}",
            declared.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    }
}

/// A value for a message: short JSON and its kind.
fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 60 {
        let cut = (0..=60).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        s.truncate(cut);
        s.push('…');
    }
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a struct",
    };
    format!("{kind} ({s})")
}

/// Declared outputs: each of its type, defaults for missing ones.
fn typed_outputs(
    declared: &IndexMap<String, Param>,
    mut values: Map<String, Value>,
) -> Result<Map<String, Value>, Failure> {
    let mut out = Map::new();
    for (name, param) in declared {
        let value = match values.remove(name) {
            Some(v) => v,
            None => match &param.default {
                Some(d) => d.clone(),
                None => {
                    return Err(Failure(format!(
                        "missing output `{name}` ({})",
                        param.ty.name()
                    )));
                }
            },
        };
        if !param.ty.accepts(&value) {
            return Err(Failure(format!(
                "output `{name}` must be a {}, not {}",
                param.ty.name(),
                short(&value)
            )));
        }
        out.insert(name.clone(), value);
    }
    Ok(out)
}

/// Masks the sensitive ones of `declared` in `outputs`.
fn mask_outputs<L: Launcher>(launcher: &L, outputs: &Outputs, values: &Map<String, Value>) {
    if let Outputs::Declared(declared) = outputs {
        for (name, _) in declared.iter().filter(|(_, p)| p.sensitive) {
            if let Some(v) = values.get(name) {
                mask_value(launcher, v);
            }
        }
    }
}

fn read_limited(path: &Path) -> Result<String, Failure> {
    let meta =
        std::fs::metadata(path).map_err(|e| Failure(format!("read {}: {e}", path.display())))?;
    if meta.len() > MAX_OUTPUT_FILE_BYTES {
        return Err(Failure(format!(
            "{} holds {} bytes; an output or export file may hold at most {MAX_OUTPUT_FILE_BYTES}",
            path.display(),
            meta.len()
        )));
    }
    std::fs::read_to_string(path).map_err(|e| Failure(format!("read {}: {e}", path.display())))
}

/// JSON Lines of `{"name": …, "value": …}`: (line number, name, value); later lines win.
fn read_lines(path: &Path) -> Result<Vec<(usize, String, Value)>, Failure> {
    let text = read_limited(path)?;
    let kind = if path.to_string_lossy().ends_with(".export.jsonl") {
        "export"
    } else {
        "output"
    };
    let mut out: Vec<(usize, String, Value)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: &str| {
            Failure(format!(
                "{kind} file line {}: {why}; each line is {{\"name\": \"…\", \"value\": …}}",
                i + 1
            ))
        };
        let parsed: Value = serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
        let (Some(Value::String(name)), Some(value)) = (parsed.get("name"), parsed.get("value"))
        else {
            return Err(bad("`name` (text) and `value` are required"));
        };
        if name.is_empty() || value.is_null() {
            return Err(bad("`name` must not be empty and `value` not null"));
        }
        out.retain(|(_, n, _)| n != name);
        out.push((i + 1, name.clone(), value.clone()));
    }
    Ok(out)
}

/// `outputs: delegate` on an exec step: the output file holds a whole step result.
fn delegated(path: &Path) -> Result<Map<String, Value>, Failure> {
    let text = read_limited(path)?;
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    let parsed: Value = serde_json::from_str(&text).map_err(|e| {
        Failure(format!(
            "the output file of a delegating step must hold a step result (JSON): {e}"
        ))
    })?;
    match parsed.get("outputs") {
        None => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(_) => Err(Failure(
            "the delegated step result's `outputs` must be a mapping".to_owned(),
        )),
    }
}
