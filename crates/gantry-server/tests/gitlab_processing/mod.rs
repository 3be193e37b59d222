//! GitLab's own pipeline-processing test cases (`test_cases/*.yml`, unchanged copies of
//! GitLab's `spec/services/ci/pipeline_processing/test_cases/`; `SOURCE.md` says where
//! each came from, its license, and how the events map onto the processor's).
//!
//! One case: compile `config` (a push to `master`), process, compare `init.expect`; then per
//! transition apply its event to each named job (or to the pipeline), process once, compare
//! `expect`. The comparison is GitLab's spec's: the pipeline status, the status of every
//! stage that has jobs, and the status of every current job — equal as a whole, so a job or
//! a stage too many fails as much as a wrong status.
//!
//! `GITLAB_CASE=<substring>` runs only matching cases (the completeness checks still run).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use gantry_pipeline::yaml::{FileId, Limits, parse_documents};
use gantry_pipeline::{Context, Options, PipelineInfo, compile, emit};
use gantry_server::processor::{
    CancelCause, CancelScope, Event, FailureReason, JobId, PipelineState, Timestamp, apply,
    pipeline_status, process,
};
use serde_json::Value;

use super::Memory;

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gitlab_processing/test_cases")
}

/// `{pipeline, stages: {name: status}, jobs: {name: status}}`, as the spec compares it.
#[derive(Debug, PartialEq)]
struct Observed {
    pipeline: String,
    stages: BTreeMap<String, String>,
    jobs: BTreeMap<String, String>,
}

impl Observed {
    fn of(state: &PipelineState) -> Observed {
        let stages = state
            .stages()
            .iter()
            .enumerate()
            .filter_map(|(i, name)| Some((name.clone(), state.stage_status(i)?.status.to_string())))
            .collect();
        let jobs = state
            .current_jobs()
            .map(|j| (j.name.clone(), j.status.to_string()))
            .collect();
        Observed {
            pipeline: pipeline_status(state).status.to_string(),
            stages,
            jobs,
        }
    }

    /// An `expect` mapping of a case file.
    fn expected(v: &Value) -> Result<Observed, String> {
        let map = |key: &str| -> Result<BTreeMap<String, String>, String> {
            let m = v
                .get(key)
                .and_then(Value::as_object)
                .ok_or_else(|| format!("`expect` has no `{key}` mapping"))?;
            m.iter()
                .map(|(k, s)| {
                    let s = s
                        .as_str()
                        .ok_or_else(|| format!("`{key}.{k}` is not a string"))?;
                    Ok((k.clone(), s.to_owned()))
                })
                .collect()
        };
        if let Some(extra) = v.as_object().and_then(|o| {
            o.keys()
                .find(|k| !matches!(k.as_str(), "pipeline" | "stages" | "jobs"))
        }) {
            return Err(format!("`expect` has an unknown key `{extra}`"));
        }
        Ok(Observed {
            pipeline: v
                .get("pipeline")
                .and_then(Value::as_str)
                .ok_or("`expect` has no `pipeline` status")?
                .to_owned(),
            stages: map("stages")?,
            jobs: map("jobs")?,
        })
    }
}

/// What differs, one line per key.
fn difference(want: &Observed, got: &Observed) -> String {
    let mut out = Vec::new();
    if want.pipeline != got.pipeline {
        out.push(format!(
            "pipeline: expected {}, got {}",
            want.pipeline, got.pipeline
        ));
    }
    for (what, w, g) in [
        ("stage", &want.stages, &got.stages),
        ("job", &want.jobs, &got.jobs),
    ] {
        let keys: BTreeSet<&String> = w.keys().chain(g.keys()).collect();
        for k in keys {
            let (a, b) = (w.get(k), g.get(k));
            if a != b {
                let show = |s: Option<&String>| s.map_or("(absent)", String::as_str).to_owned();
                out.push(format!("{what} {k}: expected {}, got {}", show(a), show(b)));
            }
        }
    }
    out.join("; ")
}

fn compile_config(config: &Value) -> Result<PipelineState, String> {
    let yaml = emit::to_yaml(config);
    let files = BTreeMap::from([(".gitlab-ci.yml".to_owned(), yaml)]);
    let info = PipelineInfo {
        ref_name: "master".into(),
        default_branch: "master".into(),
        ..PipelineInfo::default()
    };
    let ctx = Context::new(&info, &[], None);
    let c = compile(&Options::default(), &ctx, &Memory(files));
    if !c.errors.is_empty() {
        let msgs: Vec<String> = c.errors.into_iter().map(|e| e.message).collect();
        return Err(format!("config does not compile: {}", msgs.join("; ")));
    }
    let p = c.pipeline.ok_or("config makes no pipeline")?;
    Ok(PipelineState::from_pipeline(&p))
}

/// The processor's event for GitLab's `event` on one job.
fn job_event(event: &str, job: JobId) -> Result<Event, String> {
    Ok(match event {
        "success" => Event::JobSucceeded { job },
        "drop" => Event::JobFailed {
            job,
            reason: FailureReason::UnknownFailure,
            exit_code: None,
        },
        "run" => Event::JobStarted {
            job,
            timeout: None,
            graceful_cancel: false,
        },
        "cancel" => Event::CancelJob { job },
        "play" => Event::PlayJob { job },
        "retry" => Event::RetryJob { job },
        other => {
            return Err(format!(
                "job event `{other}` is not mapped onto the processor"
            ));
        }
    })
}

/// The processor's event for GitLab's `event` on the whole pipeline.
fn pipeline_event(event: &str) -> Result<Event, String> {
    Ok(match event {
        "retry" => Event::RetryPipeline,
        "cancel" => Event::CancelPipeline {
            scope: CancelScope::All,
            cause: CancelCause::User,
        },
        other => {
            return Err(format!(
                "pipeline event `{other}` is not mapped onto the processor"
            ));
        }
    })
}

/// One processing pass, as a Sidekiq drain; one pass must reach the fixed point.
fn settle(state: &mut PipelineState, now: Timestamp) -> Result<(), String> {
    state.advance(now);
    if !process(state, now).is_empty() {
        return Err("processing again still decides something".into());
    }
    Ok(())
}

fn check_expect(state: &PipelineState, expect: Option<&Value>, at: &str) -> Result<(), String> {
    let want = Observed::expected(expect.ok_or_else(|| format!("{at}: no `expect`"))?)
        .map_err(|e| format!("{at}: {e}"))?;
    let got = Observed::of(state);
    if want == got {
        Ok(())
    } else {
        Err(format!("{at}: {}", difference(&want, &got)))
    }
}

/// Run one case file.
fn run_case(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("read: {e}"))?;
    let docs = parse_documents(&text, FileId(0), Limits::default())
        .map_err(|e| format!("parse: {}", e.message))?;
    let case = docs.first().ok_or("empty file")?.to_json();
    let config = case.get("config").ok_or("no `config`")?;
    let now = Timestamp(0);
    let mut state = compile_config(config)?;
    settle(&mut state, now)?;
    check_expect(&state, case.pointer("/init/expect"), "init")?;

    let transitions = match case.get("transitions") {
        None | Some(Value::Null) => &[][..],
        Some(t) => t
            .as_array()
            .ok_or("`transitions` is not a list")?
            .as_slice(),
    };
    for (idx, t) in transitions.iter().enumerate() {
        let at = format!("transition:{idx}");
        let event = t
            .get("event")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{at}: no `event`"))?;
        let events = match t.get("jobs") {
            None | Some(Value::Null) => {
                vec![pipeline_event(event).map_err(|e| format!("{at}: {e}"))?]
            }
            Some(jobs) => {
                let names = jobs
                    .as_array()
                    .ok_or_else(|| format!("{at}: `jobs` is not a list"))?;
                // GitLab finds the named jobs among the current ones, in creation order.
                let mut ids = Vec::new();
                for name in names {
                    let name = name
                        .as_str()
                        .ok_or_else(|| format!("{at}: a job name is not a string"))?;
                    let job = state
                        .current(name)
                        .ok_or_else(|| format!("{at}: no current job `{name}`"))?;
                    ids.push(job.id);
                }
                ids.sort_unstable();
                ids.into_iter()
                    .map(|id| job_event(event, id))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("{at}: {e}"))?
            }
        };
        for e in &events {
            apply(&mut state, e, now).map_err(|r| format!("{at}: `{event}` refused: {r}"))?;
        }
        settle(&mut state, now).map_err(|e| format!("{at}: {e}"))?;
        check_expect(&state, t.get("expect"), &at)?;
    }
    Ok(())
}

/// The case files, by name.
fn case_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
fn gitlab_processing_cases() {
    let filter = std::env::var("GITLAB_CASE").unwrap_or_default();
    let mut failures = Vec::new();
    let mut ran = 0;
    for path in case_files() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.contains(&filter) {
            continue;
        }
        ran += 1;
        if let Err(e) = run_case(&path) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(ran > 0, "no case matches GITLAB_CASE={filter}");
    assert!(
        failures.is_empty(),
        "{} of {ran} GitLab case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every file of `test_cases/` is a `.yml` case the harness runs, and `SOURCE.md` lists
/// exactly those files.
#[test]
fn gitlab_processing_cases_are_all_attributed() {
    let on_disk: BTreeSet<String> = case_files()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let strays: Vec<&String> = on_disk.iter().filter(|n| !n.ends_with(".yml")).collect();
    assert!(strays.is_empty(), "not a case file: {strays:?}");
    let source = std::fs::read_to_string(cases_dir().with_file_name("SOURCE.md")).unwrap();
    let listed: BTreeSet<String> = source
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name.to_owned())
        .filter(|n| n.ends_with(".yml"))
        .collect();
    let unlisted: Vec<&String> = on_disk.difference(&listed).collect();
    let missing: Vec<&String> = listed.difference(&on_disk).collect();
    assert!(
        unlisted.is_empty() && missing.is_empty(),
        "in test_cases/ but not in SOURCE.md: {unlisted:?}; in SOURCE.md but not in test_cases/: {missing:?}"
    );
    assert_eq!(on_disk.len(), 60, "GitLab's 60 cases");
}
