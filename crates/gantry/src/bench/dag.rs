//! The scale benchmark's `.gitlab-ci.yml`: a DAG of [`STAGES`] stages in which every job
//! after the first stage `needs` two jobs of the stage before (issue 36's pipeline).
//!
//! A pipeline of N jobs has N / 10 jobs a stage (the first stages one more when 10 does
//! not divide N). Job `i` of stage `s` is `s<s>-<i>` and needs jobs `2i` and `2i + 1`
//! (modulo the width) of stage `s - 1`, so every job is also needed by about two jobs of
//! the next stage: finishing a job makes about one job pending, and each job has two
//! edges to decide over.

/// Stages of the pipeline.
pub(super) const STAGES: usize = 10;

/// The jobs of each stage: `jobs` spread over [`STAGES`], the first stages one larger
/// when the division leaves a remainder. `jobs` is at least [`STAGES`].
fn stage_sizes(jobs: usize) -> [usize; STAGES] {
    let mut sizes = [jobs / STAGES; STAGES];
    for size in sizes.iter_mut().take(jobs % STAGES) {
        *size += 1;
    }
    sizes
}

fn job_name(stage: usize, index: usize) -> String {
    format!("s{stage}-{index}")
}

/// The indexes, in a stage of `width` jobs, of the jobs that job `index` of the next
/// stage needs: two different ones, or the only one.
fn needed(index: usize, width: usize) -> Vec<usize> {
    let first = (2 * index) % width;
    let second = (2 * index + 1) % width;
    if first == second {
        vec![first]
    } else {
        vec![first, second]
    }
}

/// The configuration of a DAG pipeline of `jobs` jobs (at least [`STAGES`]).
pub(super) fn dag_config(jobs: usize) -> String {
    let sizes = stage_sizes(jobs);
    let stages: Vec<String> = (0..STAGES).map(|s| format!("s{s}")).collect();
    // About 70 bytes a job: 10,000 jobs are ≈ 0.7 MB, under the 2 MiB a file may hold.
    let mut ci = String::with_capacity(80 * jobs + 100);
    ci.push_str(&format!("stages: [{}]\n", stages.join(", ")));
    for (stage, &width) in sizes.iter().enumerate() {
        for index in 0..width {
            let name = job_name(stage, index);
            if stage == 0 {
                ci.push_str(&format!("{name}: {{stage: s0, script: [\"true\"]}}\n"));
                continue;
            }
            let needs: Vec<String> = needed(index, sizes[stage - 1])
                .into_iter()
                .map(|i| job_name(stage - 1, i))
                .collect();
            ci.push_str(&format!(
                "{name}: {{stage: s{stage}, needs: [{}], script: [\"true\"]}}\n",
                needs.join(", ")
            ));
        }
    }
    ci
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use gantry_pipeline::{Context, MemoryLoader, Options, PipelineInfo, compile};

    use super::*;

    /// Job name → (stage, needs).
    type Jobs = HashMap<String, (String, Vec<String>)>;

    /// The configuration as the server compiles it: its stages and jobs.
    fn compiled(jobs: usize) -> (Vec<String>, Jobs) {
        let info = PipelineInfo {
            ref_name: "main".into(),
            default_branch: "main".into(),
            ..PipelineInfo::default()
        };
        let ctx = Context::new(&info, &[], None);
        let loader = MemoryLoader::new().with(".gitlab-ci.yml", dag_config(jobs));
        let compiled = compile(&Options::default(), &ctx, &loader);
        assert!(compiled.errors.is_empty(), "{:?}", compiled.errors);
        let pipeline = compiled.pipeline.expect("a pipeline");
        let jobs = pipeline
            .jobs
            .into_iter()
            .map(|job| {
                let needs = job
                    .needs
                    .unwrap_or_default()
                    .into_iter()
                    .map(|n| n.job)
                    .collect();
                (job.name, (job.stage, needs))
            })
            .collect();
        (pipeline.stages, jobs)
    }

    #[test]
    fn every_job_after_the_first_stage_needs_two_of_the_stage_before() {
        for total in [100, 1000, 25] {
            let (stages, jobs) = compiled(total);
            assert_eq!(jobs.len(), total, "{total} jobs");
            let declared: Vec<String> = (0..STAGES).map(|s| format!("s{s}")).collect();
            assert!(
                stages.windows(STAGES).any(|w| w == declared.as_slice()),
                "{stages:?}"
            );
            let mut needed_by: HashMap<&str, usize> = HashMap::new();
            for (name, (stage, needs)) in &jobs {
                let s: usize = stage[1..].parse().expect("stage sN");
                if s == 0 {
                    assert!(needs.is_empty(), "{name} needs {needs:?}");
                    continue;
                }
                assert_eq!(needs.len(), 2, "{name} needs {needs:?}");
                assert_ne!(needs[0], needs[1]);
                for need in needs {
                    assert_eq!(jobs[need].0, format!("s{}", s - 1), "{name} needs {need}");
                    *needed_by.entry(need).or_default() += 1;
                }
            }
            // Every job of stages 0..9 is needed by the next stage: no dangling branch.
            let last = format!("s{}", STAGES - 1);
            for (name, (stage, _)) in &jobs {
                if *stage != last {
                    assert!(
                        needed_by.contains_key(name.as_str()),
                        "{name} is needed by none"
                    );
                }
            }
        }
    }

    #[test]
    fn stages_share_the_jobs_evenly() {
        assert_eq!(stage_sizes(100), [10; STAGES]);
        assert_eq!(stage_sizes(10_000), [1000; STAGES]);
        assert_eq!(stage_sizes(23), [3, 3, 3, 2, 2, 2, 2, 2, 2, 2]);
        assert_eq!(stage_sizes(23).iter().sum::<usize>(), 23);
    }

    #[test]
    fn a_stage_of_one_job_is_needed_once() {
        let (_, jobs) = compiled(STAGES);
        assert_eq!(jobs.len(), STAGES);
        assert_eq!(jobs["s1-0"].1, vec!["s0-0".to_owned()]);
    }

    #[test]
    fn ten_thousand_jobs_fit_the_file_limit() {
        let ci = dag_config(10_000);
        assert!(ci.len() < 2 * 1024 * 1024, "{} bytes", ci.len());
        assert_eq!(ci.lines().count(), 10_001);
    }
}
