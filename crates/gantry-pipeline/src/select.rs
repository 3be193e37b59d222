//! Running part of a pipeline (`gantry run JOB...`): GitLab has no such feature, so the
//! rules are gitlab-ci-local's, stated here once.
//!
//! * A name selects the job of that name, or every instance of a `parallel` job named
//!   as written (`test` selects `test 1/3` … and `test: [a, b]` …).
//! * With `with_needs`, what the selected jobs wait for is selected too, transitively:
//!   their `needs`, or — for a job without `needs` — every job of an earlier stage.
//! * The pipeline keeps only the selected jobs. `needs` and `dependencies` entries
//!   naming a job that is no longer there are dropped (a job whose every need was
//!   dropped starts at once, as with `needs: []`), so nothing waits for a job that will
//!   not run, and no artifacts are expected from one.

use std::collections::{BTreeSet, HashSet};

use crate::model::Pipeline;

/// Why a selection cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// A name matches no job of the pipeline.
    #[error("select jobs: no job named `{name}` in this pipeline{hint}")]
    UnknownJob {
        /// The name given.
        name: String,
        /// ` (did you mean `x`?)`, or a list of jobs, or nothing.
        hint: String,
    },
}

/// Keeps only the jobs `names` select (and, with `with_needs`, what they wait for); see
/// the module docs. Returns the names of the jobs kept, in pipeline order.
pub fn select_jobs(
    pipeline: &mut Pipeline,
    names: &[String],
    with_needs: bool,
) -> Result<Vec<String>, SelectError> {
    let mut selected: BTreeSet<usize> = BTreeSet::new();
    for name in names {
        let matches: Vec<usize> = pipeline
            .jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| &j.name == name || (j.node_total.is_some() && &j.group_name == name))
            .map(|(i, _)| i)
            .collect();
        if matches.is_empty() {
            return Err(SelectError::UnknownJob {
                name: name.clone(),
                hint: hint(pipeline, name),
            });
        }
        selected.extend(matches);
    }
    if with_needs {
        let mut todo: Vec<usize> = selected.iter().copied().collect();
        while let Some(i) = todo.pop() {
            let job = &pipeline.jobs[i];
            let waits_for: Vec<usize> = match &job.needs {
                Some(needs) => pipeline
                    .jobs
                    .iter()
                    .enumerate()
                    .filter(|(_, other)| needs.iter().any(|n| n.job == other.name))
                    .map(|(k, _)| k)
                    .collect(),
                None => pipeline
                    .jobs
                    .iter()
                    .enumerate()
                    .filter(|(_, other)| other.stage_idx < job.stage_idx)
                    .map(|(k, _)| k)
                    .collect(),
            };
            for k in waits_for {
                if selected.insert(k) {
                    todo.push(k);
                }
            }
        }
    }
    let mut index = 0;
    pipeline.jobs.retain(|_| {
        let keep = selected.contains(&index);
        index += 1;
        keep
    });
    let kept: HashSet<String> = pipeline.jobs.iter().map(|j| j.name.clone()).collect();
    for job in &mut pipeline.jobs {
        if let Some(needs) = &mut job.needs {
            needs.retain(|n| kept.contains(&n.job));
        }
        if let Some(dependencies) = &mut job.dependencies {
            dependencies.retain(|d| kept.contains(d));
        }
    }
    Ok(pipeline.jobs.iter().map(|j| j.name.clone()).collect())
}

fn hint(pipeline: &Pipeline, name: &str) -> String {
    let lower = name.to_lowercase();
    if let Some(close) = pipeline
        .jobs
        .iter()
        .map(|j| {
            if j.node_total.is_some() {
                &j.group_name
            } else {
                &j.name
            }
        })
        .find(|candidate| {
            candidate.to_lowercase() == lower || candidate.to_lowercase().starts_with(&lower)
        })
    {
        return format!(" (did you mean `{close}`?)");
    }
    let mut all: Vec<&str> = pipeline.jobs.iter().map(|j| j.name.as_str()).collect();
    all.dedup();
    if all.len() <= 20 {
        format!("; its jobs are: {}", all.join(", "))
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Context, MemoryLoader, Options, PipelineInfo, compile};

    fn pipeline(yaml: &str) -> Pipeline {
        let info = PipelineInfo {
            ref_name: "main".into(),
            default_branch: "main".into(),
            ..PipelineInfo::default()
        };
        let ctx = Context::new(&info, &[], None);
        let loader = MemoryLoader::new().with(".gitlab-ci.yml", yaml);
        let compiled = compile(&Options::default(), &ctx, &loader);
        assert!(compiled.errors.is_empty(), "{:?}", compiled.errors);
        compiled.pipeline.unwrap()
    }

    const YAML: &str = "
stages: [build, test, deploy]
a: {stage: build, script: [x]}
b: {stage: build, script: [x]}
t: {stage: test, script: [x], parallel: 2}
n: {stage: test, script: [x], needs: [a], dependencies: [a]}
m: {stage: test, script: [x], dependencies: [a, b]}
d: {stage: deploy, script: [x]}
";

    fn names(yaml: &str, select: &[&str], with_needs: bool) -> Result<Vec<String>, SelectError> {
        let mut p = pipeline(yaml);
        let names: Vec<String> = select.iter().map(|s| (*s).to_owned()).collect();
        select_jobs(&mut p, &names, with_needs)
    }

    #[test]
    fn a_base_name_selects_every_parallel_instance() {
        assert_eq!(names(YAML, &["t"], false).unwrap(), ["t 1/2", "t 2/2"]);
        assert_eq!(names(YAML, &["t 2/2"], false).unwrap(), ["t 2/2"]);
    }

    #[test]
    fn needs_add_what_a_job_waits_for_transitively() {
        assert_eq!(names(YAML, &["n"], true).unwrap(), ["a", "n"]);
        assert_eq!(
            names(YAML, &["d"], true).unwrap(),
            ["a", "b", "t 1/2", "t 2/2", "n", "m", "d"]
        );
        assert_eq!(names(YAML, &["t 1/2"], true).unwrap(), ["a", "b", "t 1/2"]);
    }

    #[test]
    fn needs_and_dependencies_on_jobs_left_out_are_dropped() {
        let mut p = pipeline(YAML);
        select_jobs(&mut p, &["n".to_owned()], false).unwrap();
        let n = &p.jobs[0];
        assert_eq!(n.needs.as_deref().map(<[_]>::len), Some(0));
        assert_eq!(n.dependencies.as_deref(), Some(&[][..]));
        let mut p = pipeline(YAML);
        select_jobs(&mut p, &["m".to_owned(), "b".to_owned()], false).unwrap();
        assert_eq!(p.jobs[1].name, "m");
        assert_eq!(
            p.jobs[1].dependencies.as_deref(),
            Some(&["b".to_owned()][..])
        );
    }

    #[test]
    fn an_unknown_name_is_an_error_with_a_hint() {
        let err = names(YAML, &["D"], false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "select jobs: no job named `D` in this pipeline (did you mean `d`?)"
        );
        let err = names(YAML, &["zzz"], false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "select jobs: no job named `zzz` in this pipeline; its jobs are: a, b, t 1/2, t 2/2, n, m, d"
        );
    }
}
