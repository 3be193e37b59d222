//! Job inputs (GitLab 18.10): `${{ job.inputs.NAME }}` in a job's payload, expanded
//! before anything runs, as gitlab-runner's `Build.expandInputs` does (before the
//! executor is chosen: an image name may hold one).
//!
//! Only when the payload declares inputs (a job without them keeps every `${{` as
//! written, even a malformed one), and unless `FF_ENABLE_JOB_INPUTS_INTERPOLATION` is
//! false (a job variable or `[runners.feature_flags]`; on by default as in gitlab-runner
//! 18.9). The expression language is the steps' (moa; `gantry_steps::template`), with
//! the context `job.inputs.<key>` only. Expanded, each string on its own: the `script`
//! and `after_script` steps' lines; the image's and each service's `name`,
//! `entrypoint` and `command`; each artifact's `name`, `paths`, `exclude`, `expire_in`;
//! each cache's `key`, `paths`, `fallback_keys` — gitlab-runner's fields tagged
//! `inputs:"expand"`, but for the typed ones (`when`, `policy`, `pull_policy`, the
//! executor options), which hold no text to expand here. Variables, hooks and `run:`
//! are not expanded (nor are they in gitlab-runner).
//!
//! A failure ends the job `runner_configuration_error` with
//! `failed to interpolate job inputs: <why>` (gitlab-runner's `InputInterpolationError`).

use gantry_protocol::payload::step::StepName;
use gantry_protocol::{JobResponse, JobVariable};
use serde_json::{Map, Value};

const FLAG: &str = "FF_ENABLE_JOB_INPUTS_INTERPOLATION";

/// Whether the job's inputs are interpolated: the runner's `feature_flags` entry wins
/// over the job's variable; on by default.
pub(crate) fn enabled(
    feature_flags: &std::collections::BTreeMap<String, bool>,
    variables: &[JobVariable],
) -> bool {
    feature_flags
        .get(FLAG)
        .copied()
        .or_else(|| super::variables::get_bool(variables, FLAG))
        .unwrap_or(true)
}

/// Expands `${{ job.inputs.* }}` in `job` (see the module docs); `Err` is the job's
/// failure message.
pub(crate) fn interpolate(job: &mut JobResponse) -> Result<(), String> {
    let Some(inputs) = job.inputs.as_ref().filter(|i| !i.is_empty()) else {
        return Ok(());
    };
    let mut values = Map::new();
    for input in inputs {
        input
            .validate()
            .map_err(|e| format!("failed to interpolate job inputs: {e}"))?;
        values.insert(input.key.clone(), input.value.content.clone());
    }
    let mut job_cx = Map::new();
    job_cx.insert("inputs".to_owned(), Value::Object(values));
    let mut cx = Map::new();
    cx.insert("job".to_owned(), Value::Object(job_cx));
    let expand = |s: &mut String| -> Result<(), String> {
        *s = gantry_steps::template::expand_text(s, &cx)
            .map_err(|e| format!("failed to interpolate job inputs: {e}"))?;
        Ok(())
    };
    let all = |list: &mut Vec<String>| list.iter_mut().try_for_each(expand);
    for step in job.steps.iter_mut().flatten() {
        if matches!(step.name, StepName::Script | StepName::AfterScript) {
            all(&mut step.script)?;
        }
    }
    if let Some(image) = &mut job.image {
        expand(&mut image.name)?;
        if let Some(entrypoint) = &mut image.entrypoint {
            all(entrypoint)?;
        }
    }
    for service in &mut job.services {
        expand(&mut service.name)?;
        if let Some(entrypoint) = &mut service.entrypoint {
            all(entrypoint)?;
        }
        if let Some(command) = &mut service.command {
            all(command)?;
        }
    }
    for artifact in job.artifacts.iter_mut().flatten() {
        if let Some(name) = &mut artifact.name {
            expand(name)?;
        }
        all(&mut artifact.paths)?;
        all(&mut artifact.exclude)?;
        if let Some(expire_in) = &mut artifact.expire_in {
            expand(expire_in)?;
        }
    }
    for cache in &mut job.cache {
        expand(&mut cache.key)?;
        all(&mut cache.paths)?;
        all(&mut cache.fallback_keys)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(json: &str) -> JobResponse {
        gantry_protocol::parse_job_response(json.as_bytes()).expect("payload")
    }

    #[test]
    fn inputs_expand_in_scripts_images_artifacts_and_caches_only() {
        let mut j = job(r#"{"id": 1,
                "inputs": [{"key": "env", "value": {"type": "string", "content": "prod"}},
                           {"key": "n", "value": {"type": "number", "content": 3}},
                           {"key": "list", "value": {"type": "array", "content": ["a", "b"]}}],
                "steps": [{"name": "script", "script": ["echo ${{ job.inputs.env }} x${{ job.inputs.n }}", "echo ${{ job.inputs.list[1] }} ${{ str(job.inputs.n + 1) }}"]},
                          {"name": "after_script", "script": ["echo after ${{ job.inputs.env }}"]},
                          {"name": "release", "script": ["echo ${{ job.inputs.env }}"]}],
                "image": {"name": "alpine:${{ job.inputs.env }}"},
                "services": [{"name": "db-${{ job.inputs.env }}", "command": ["--n=${{ job.inputs.n }}"]}],
                "artifacts": [{"name": "out-${{ job.inputs.env }}", "paths": ["dist/${{ job.inputs.env }}"]}],
                "cache": [{"key": "k-${{ job.inputs.env }}", "paths": ["c"]}],
                "variables": [{"key": "V", "value": "${{ job.inputs.env }}"}]}"#);
        interpolate(&mut j).expect("expands");
        let steps = j.steps.as_deref().unwrap();
        assert_eq!(steps[0].script, ["echo prod x3", "echo b 4"]);
        assert_eq!(steps[1].script, ["echo after prod"]);
        assert_eq!(steps[2].script, ["echo ${{ job.inputs.env }}"]);
        assert_eq!(j.image.as_ref().unwrap().name, "alpine:prod");
        assert_eq!(j.services[0].name, "db-prod");
        assert_eq!(j.services[0].command.as_deref().unwrap(), ["--n=3"]);
        let artifacts = j.artifacts.as_deref().unwrap();
        assert_eq!(artifacts[0].name.as_deref(), Some("out-prod"));
        assert_eq!(artifacts[0].paths, ["dist/prod"]);
        assert_eq!(j.cache[0].key, "k-prod");
        assert_eq!(j.variables[0].value, "${{ job.inputs.env }}");
    }

    #[test]
    fn without_inputs_nothing_is_touched_and_bad_expressions_fail() {
        let mut j = job(r#"{"steps": [{"name": "script", "script": ["echo ${{ 1 + 2 }} ${{"]}]}"#);
        interpolate(&mut j).expect("untouched");
        assert_eq!(
            j.steps.as_deref().unwrap()[0].script,
            ["echo ${{ 1 + 2 }} ${{"]
        );
        let mut j = job(
            r#"{"inputs": [{"key": "a", "value": {"type": "string", "content": "x"}}],
                "steps": [{"name": "script", "script": ["echo ${{ job.inputs.nope }}"]}]}"#,
        );
        let error = interpolate(&mut j).expect_err("unknown input");
        assert!(
            error.starts_with("failed to interpolate job inputs: "),
            "{error}"
        );
        let mut j = job(
            r#"{"inputs": [{"key": "a", "value": {"type": "string", "content": "x"}}],
                "steps": [{"name": "script", "script": ["echo ${{ job.inputs.a + }}"]}]}"#,
        );
        assert!(interpolate(&mut j).is_err());
    }

    #[test]
    fn the_feature_flag_turns_it_off_and_the_runner_setting_wins() {
        let var = |v: &str| {
            vec![JobVariable {
                key: FLAG.to_owned(),
                value: v.to_owned(),
                ..JobVariable::default()
            }]
        };
        let mut flags = std::collections::BTreeMap::new();
        assert!(enabled(&flags, &[]));
        assert!(!enabled(&flags, &var("false")));
        flags.insert(FLAG.to_owned(), true);
        assert!(enabled(&flags, &var("false")));
    }
}
