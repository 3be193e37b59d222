//! `gantry step run`: one step (a GitLab Function) on this machine, as `step-runner run`
//! does — the same engine a `run:` job uses, its programs as local processes.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use gantry_steps::{Engine, JobContext, Loader, LocalLauncher, PathMap, Status};
use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::exit;
use crate::exit::Failure;
use crate::lint::parse_var;

#[derive(Subcommand)]
pub(crate) enum StepCommand {
    /// Run one step: a local directory (./dir, ./dir/file.yml) or a git reference
    /// (host/path@rev, host/path/-/dir@rev).
    Run(StepRunArgs),
}

#[derive(Args)]
pub(crate) struct StepRunArgs {
    /// The step to run.
    reference: String,
    /// An input, NAME=VALUE (repeatable). VALUE is read as JSON when it is JSON (2, true,
    /// [1,2], {"a":1}, "text"), else as text.
    #[arg(long = "input", value_name = "NAME=VALUE", value_parser = parse_var)]
    inputs: Vec<(String, String)>,
    /// An environment variable for the step, NAME=VALUE (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_var)]
    env: Vec<(String, String)>,
    /// A CI/CD job variable, `${{ vars.NAME }}` (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    vars: Vec<(String, String)>,
    /// Write the step results (JSON) to this file.
    #[arg(long, value_name = "PATH")]
    results: Option<PathBuf>,
}

pub(crate) fn run(command: &StepCommand) -> u8 {
    match command {
        StepCommand::Run(args) => run_step(args),
    }
}

fn run_step(args: &StepRunArgs) -> u8 {
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => {
            return Failure::usage(format!("cannot read the current directory: {e}")).report();
        }
    };
    let mut inputs = Map::new();
    for (k, v) in &args.inputs {
        let value = serde_json::from_str::<Value>(v).unwrap_or_else(|_| Value::String(v.clone()));
        inputs.insert(k.clone(), value);
    }
    // The step as the `run:` item it stands for, checked like one.
    let mut item = Map::new();
    item.insert("name".to_owned(), Value::String(step_name(&args.reference)));
    item.insert("func".to_owned(), Value::String(args.reference.clone()));
    item.insert("inputs".to_owned(), Value::Object(inputs));
    item.insert(
        "env".to_owned(),
        Value::Object(
            args.env
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        ),
    );
    let steps = match gantry_steps::parse_run_list(&Value::Array(vec![Value::Object(item)]), "") {
        Ok(steps) => steps,
        Err(problems) => {
            let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
            return Failure::usage(messages.join("\nerror: ")).report();
        }
    };
    // The environment as `step-runner run` passes it: this process's, without CI_,
    // GITLAB_, FF_ and DOCKER_ENV_ names (those reach steps as --var).
    let env: IndexMap<String, String> = std::env::vars()
        .filter(|(k, _)| {
            !["CI_", "GITLAB_", "FF_", "DOCKER_ENV_"]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .collect();
    let scratch = match tempfile::Builder::new().prefix("gantry-step-").tempdir() {
        Ok(dir) => dir,
        Err(e) => return Failure::usage(format!("create a temporary directory: {e}")).report(),
    };
    let launcher = LocalLauncher::new(true);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Failure::usage(format!("start the runtime: {e}")).report(),
    };
    let result = runtime.block_on(async {
        let engine = Engine::new(
            &launcher,
            Loader {
                paths: PathMap::identity(),
                cache_dir: step_cache_dir(scratch.path()),
            },
            JobContext {
                work_dir: cwd.clone(),
                vars: args
                    .vars
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
                env,
                files_dir: scratch.path().join("files"),
            },
        );
        engine.run(&steps).await
    });
    if let Some(path) = &args.results {
        let written = serde_json::to_vec_pretty(&result)
            .map_err(std::io::Error::other)
            .and_then(|json| std::fs::write(path, json));
        if let Err(e) = written {
            return Failure::failed(format!("write {}: {e}", path.display())).report();
        }
    }
    let outputs = result
        .sub_step_results
        .first()
        .map(|r| r.outputs.clone())
        .unwrap_or_default();
    match result.status {
        Status::Success => {
            for (k, v) in &outputs {
                eprintln!("output {k} = {v}");
            }
            exit::OK
        }
        _ => {
            eprintln!(
                "error: the step failed: {}",
                result.error.as_deref().unwrap_or("see its output above")
            );
            exit::INVALID
        }
    }
}

/// Git steps are cached per user (`$XDG_CACHE_HOME/gantry/steps`, else
/// `~/.cache/gantry/steps`); without a home, in the run's scratch directory.
fn step_cache_dir(scratch: &std::path::Path) -> PathBuf {
    crate::env::user_dir("XDG_CACHE_HOME", ".cache")
        .map(|c| c.join("gantry").join("steps"))
        .unwrap_or_else(|| scratch.join("cache"))
}

/// The step's name in the log and results: the reference's last path segment, as a
/// step name (`./tools/semver` → `semver`, `host/p/-/go/build@v1` → `build`).
fn step_name(reference: &str) -> String {
    let path = reference.rsplit_once('@').map_or(reference, |(p, _)| p);
    let last = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .trim_end_matches(".yml");
    let mut name: String = last
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.is_empty()
        || name.starts_with(|c: char| c.is_ascii_digit())
        || name.chars().all(|c| c == '_')
    {
        name.insert_str(0, "step_");
    }
    name
}
