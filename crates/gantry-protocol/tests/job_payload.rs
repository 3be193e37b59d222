//! The job payload (§3.5) against the complete example of §3.6, plus hostile input.

use gantry_protocol::{
    ArtifactFormat, ArtifactType, CachePolicy, FailureReason, ImageUser, JobResponse,
    ProtocolError, PullPolicy, RefType, StepName, When, parse_job_response,
};
use serde_json::{Value, json};

const FIXTURE: &[u8] = include_bytes!("fixtures/job_payload.json");

fn fixture_value() -> Value {
    serde_json::from_slice(FIXTURE).expect("fixture is JSON")
}

#[test]
fn example_payload_round_trips_exactly() {
    let job = parse_job_response(FIXTURE).expect("example payload decodes");
    let back = serde_json::to_value(&job).expect("serializes");
    assert_eq!(back, fixture_value());
}

#[test]
fn example_payload_keeps_gitlab_key_order() {
    // serde_json has `preserve_order` on: compact strings are equal only if every
    // object lists its keys in the order GitLab emits them.
    let job = parse_job_response(FIXTURE).expect("decodes");
    let ours = serde_json::to_string(&job).expect("serializes");
    let theirs = serde_json::to_string(&fixture_value()).expect("serializes");
    assert_eq!(ours, theirs);
}

#[test]
fn example_payload_fields_are_typed() {
    let job = parse_job_response(FIXTURE).expect("decodes");
    assert_eq!(job.id, 1042);
    assert_eq!(job.job_info.name, "rspec 1/2");
    assert_eq!(job.job_info.scoped_user_id, None);
    assert!((job.job_info.time_in_queue_seconds - 3.52).abs() < f64::EPSILON);
    assert_eq!(job.git_info.git_ref, "main");
    assert_eq!(job.git_info.ref_type, RefType::Branch);
    assert_eq!(job.git_info.protected, Some(true));
    assert_eq!(job.runner_info.effective_timeout_secs(), 3600);

    let deploy_key = job.variable("DEPLOY_KEY").expect("DEPLOY_KEY");
    assert!(deploy_key.file && !deploy_key.raw && !deploy_key.public);
    assert!(job.variable("TEMPLATE").expect("TEMPLATE").raw);
    assert!(job.variable("CI_JOB_TOKEN").expect("CI_JOB_TOKEN").masked);

    let steps = job.steps.as_deref().expect("steps");
    assert_eq!(steps[0].name, StepName::Script);
    assert_eq!(steps[1].name, StepName::AfterScript);
    assert_eq!(steps[1].when, When::Always);

    let image = job.image.as_ref().expect("image");
    assert_eq!(
        image.pull_policy.as_deref(),
        Some(&[PullPolicy::IfNotPresent][..])
    );
    let docker = image.executor_opts.docker.as_ref().expect("docker options");
    assert_eq!(docker.user, Some(ImageUser::Name("1000".to_owned())));
    image.executor_opts.check().expect("supported options only");

    assert_eq!(job.services[0].aliases(), ["db", "postgres"]);
    assert_eq!(job.services[0].ports[0].number, 5432);

    let artifacts = job.artifacts.as_deref().expect("artifacts");
    assert_eq!(artifacts[0].artifact_type, ArtifactType::Archive);
    assert_eq!(artifacts[0].untracked, Some(false));
    assert_eq!(artifacts[1].artifact_type, ArtifactType::Junit);
    assert_eq!(artifacts[1].artifact_format, ArtifactFormat::Gzip);
    assert_eq!(artifacts[1].untracked, None);
    assert_eq!(
        artifacts[0].upload_params().to_query(),
        "artifact_format=zip&artifact_type=archive&expire_in=1+week"
    );

    assert_eq!(job.cache[0].policy, CachePolicy::PullPush);
    assert!(job.credentials[0].is_registry());
    assert_eq!(
        job.dependencies[0].artifacts_file.as_ref().map(|f| f.size),
        Some(1_048_576)
    );

    assert!(job.features.trace_sections);
    assert_eq!(
        job.features
            .failure_reason_for(FailureReason::RunnerInterrupted),
        FailureReason::RunnerInterrupted
    );
    assert_eq!(job.run_steps().expect("no run"), None);
}

/// Adds `zz_unknown` with a nested value to every object of `value`.
fn add_unknown_fields(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for child in map.values_mut() {
                add_unknown_fields(child);
            }
            map.insert(
                "zz_unknown".to_owned(),
                json!({"nested": [1, "two", null, {"deep": true}]}),
            );
        }
        Value::Array(items) => items.iter_mut().for_each(add_unknown_fields),
        _ => {}
    }
}

#[test]
fn unknown_fields_are_ignored_everywhere() {
    let original = fixture_value();
    let mut value = original.clone();
    add_unknown_fields(&mut value);
    // `executor_opts` is an open map whose unknown keys are recorded (next test).
    value["image"]["executor_opts"] = original["image"]["executor_opts"].clone();
    value["services"][0]["executor_opts"] = original["services"][0]["executor_opts"].clone();
    let job = parse_job_response(&serde_json::to_vec(&value).expect("json"))
        .expect("unknown fields are fine");
    assert_eq!(job, parse_job_response(FIXTURE).expect("decodes"));
}

#[test]
fn unsupported_executor_options_are_recorded_not_fatal() {
    let mut value = fixture_value();
    value["image"]["executor_opts"] = json!({
        "docker": {"platform": "linux/arm64", "user": 1000, "privileged": true},
        "kubernetes": {"user": "1000:1000", "platform": "x"},
        "podman": {}
    });
    let job = parse_job_response(&serde_json::to_vec(&value).expect("json")).expect("decodes");
    let opts = &job.image.as_ref().expect("image").executor_opts;
    assert_eq!(
        opts.docker.as_ref().and_then(|d| d.user.clone()),
        Some(ImageUser::Id(1000))
    );
    assert_eq!(
        opts.unsupported,
        ["docker.privileged", "kubernetes.platform", "podman"]
    );
    let message = opts.check().expect_err("unsupported").to_string();
    assert!(message.contains("`docker.privileged`"), "{message}");
    // Unsupported keys are not serialized; the integer user stays an integer.
    let back = serde_json::to_value(opts).expect("serializes");
    assert_eq!(
        back,
        json!({"docker": {"platform": "linux/arm64", "user": 1000}, "kubernetes": {"user": "1000:1000"}})
    );
}

#[test]
fn nulls_and_absent_fields_are_zero_values() {
    let job = parse_job_response(
        br#"{"id": 7, "token": null, "job_info": null, "variables": null, "hooks": null,
             "image": null, "services": null, "artifacts": null, "cache": null,
             "credentials": null, "features": null, "dependencies": [{"id": 1, "artifacts_file": null}],
             "git_info": {"ref_type": null, "depth": null, "protected": null},
             "steps": [{"name": "script", "when": ""}]}"#,
    )
    .expect("nulls decode as zero values");
    assert_eq!(job.id, 7);
    assert_eq!(job.token, "");
    assert!(job.variables.is_empty());
    assert_eq!(job.image, None);
    assert_eq!(job.artifacts, None);
    assert_eq!(job.dependencies[0].artifacts_file, None);
    assert_eq!(job.git_info.ref_type, RefType::Branch);
    assert_eq!(job.steps.expect("steps")[0].when, When::OnSuccess);

    let empty = parse_job_response(b"{}").expect("an empty object is a (useless) job");
    assert_eq!(empty, JobResponse::default());
}

#[test]
fn gitlab_runner_rs_mock_payload_decodes() {
    // The collabora mock (§11.1): a subset of keys, the misspelled `exprire_in`,
    // `artifacts_file: null` and an old failure_reasons list.
    let job = parse_job_response(
        br#"{"id": 1, "token": "job-token", "allow_git_fetch": false,
             "job_info": {"id": 1, "name": "build", "stage": "build", "project_id": 1, "project_name": "p"},
             "git_info": {"repo_url": "http://x/p.git", "ref": "main", "sha": "a", "before_sha": "b",
                          "ref_type": "branch", "refspecs": [], "depth": 1},
             "runner_info": {"timeout": 3600, "runner_session_url": null},
             "variables": [{"key": "A", "value": "1", "public": true, "masked": false}],
             "steps": [{"name": "script", "script": ["true"], "timeout": 3600, "when": "on_success", "allow_failure": false}],
             "image": null, "services": [],
             "artifacts": [{"name": "a", "paths": ["x"], "when": "on_success", "exprire_in": "1 day",
                            "artifact_type": "archive", "artifact_format": "zip"}],
             "cache": [], "credentials": [],
             "dependencies": [{"id": 2, "name": "dep", "token": "t", "artifacts_file": null}],
             "features": {"trace_sections": true, "failure_reasons": ["script_failure", "made_up_reason"]}}"#,
    )
    .expect("mock payload decodes");
    assert_eq!(job.artifacts.expect("artifacts")[0].expire_in, None);
    assert_eq!(job.features.failure_reasons.len(), 2);
    assert_eq!(
        job.features
            .failure_reason_for(FailureReason::RunnerInterrupted),
        FailureReason::UnknownFailure
    );
}

#[test]
fn run_steps_decode_from_the_run_string() {
    let mut value = fixture_value();
    value.as_object_mut().expect("object").remove("steps");
    value["run"] = json!(
        r#"[{"name": "hello", "step": "gitlab.com/steps/echo@v1", "inputs": {"text": "hi"}}]"#
    );
    let job = parse_job_response(&serde_json::to_vec(&value).expect("json")).expect("decodes");
    assert_eq!(job.steps, None);
    let steps = job.run_steps().expect("valid run").expect("present");
    assert_eq!(steps[0]["name"], "hello");
    // `steps` stays omitted on the way back out.
    assert_eq!(serde_json::to_value(&job).expect("serializes"), value);

    let bad = JobResponse {
        run: Some("{not json".to_owned()),
        ..JobResponse::default()
    };
    let message = bad.run_steps().expect_err("bad run").to_string();
    assert!(message.starts_with("decode `run` steps:"), "{message}");
}

#[test]
fn optional_ee_and_experimental_blocks_round_trip() {
    let mut value = fixture_value();
    value["secrets"] = json!({"DB_PASSWORD": {"vault": {"server": {"url": "https://vault", "auth": {"name": "jwt", "path": "jwt", "data": {"jwt": "x", "role": "r"}}}, "engine": {"name": "kv-v2", "path": "kv"}, "path": "db", "field": "password"}, "file": false}});
    value["policy_options"] = json!({"execution_policy_job": true, "policy_name": "sec", "policy_variables_override_allowed": false});
    value["inputs"] = json!([
        {"key": "env", "value": {"type": "string", "content": "prod"}},
        {"key": "replicas", "value": {"type": "number", "content": 3, "sensitive": true}}
    ]);
    value["suspend_options"] = json!({"suspend_on_failure": true});
    value["features"]["token_mask_prefixes"] = json!(["glxyz-"]);
    value["features"]["tracing"] = json!({"trace_id": "t", "span_parent_id": "s", "otel_endpoints": [{"url": "https://otel", "auth": {"type": "http_bearer_gcp_oidc", "http_bearer_gcp_oidc": {"audience": "a"}}}]});
    value["runner_info"]["runner_session_url"] = json!("https://runner:8093/session/1");
    let job = parse_job_response(&serde_json::to_vec(&value).expect("json")).expect("decodes");
    assert_eq!(serde_json::to_value(&job).expect("serializes"), value);
    for input in job.inputs.as_deref().expect("inputs") {
        input.validate().expect("valid input");
    }
}

#[test]
fn job_inputs_are_validated_against_their_type() {
    let job = parse_job_response(
        br#"{"inputs": [{"key": "n", "value": {"type": "number", "content": "3"}},
                        {"key": "z", "value": {"type": "struct", "content": null}}]}"#,
    )
    .expect("decodes");
    let inputs = job.inputs.expect("inputs");
    assert_eq!(
        inputs[0].validate().expect_err("mismatch").to_string(),
        "validate job input `n`: content does not match type `number`"
    );
    assert_eq!(
        inputs[1].validate().expect_err("null").to_string(),
        "validate job input `z`: content is null"
    );
}

/// The reported path and message of a decoding error (empty path when the error is of
/// another kind, which then fails the caller's path assertion).
fn json_error(bytes: &[u8]) -> (String, String) {
    let error = parse_job_response(bytes).expect_err("malformed input");
    let path = match &error {
        ProtocolError::Json { path, .. } => path.clone(),
        _ => String::new(),
    };
    (path, error.to_string())
}

#[test]
fn malformed_known_fields_name_their_path() {
    let cases: &[(&str, &str)] = &[
        (r#"{"id": "1042"}"#, "id"),
        (
            r#"{"job_info": {"project_id": "42"}}"#,
            "job_info.project_id",
        ),
        (
            r#"{"variables": [{"key": "A"}, {"key": "B", "public": "yes"}]}"#,
            "variables[1].public",
        ),
        (r#"{"steps": [{"name": "deploy"}]}"#, "steps[0].name"),
        (
            r#"{"artifacts": [{"artifact_type": "bogus"}]}"#,
            "artifacts[0].artifact_type",
        ),
        (
            r#"{"services": [{"ports": [{"number": 70000}]}]}"#,
            "services[0].ports[0].number",
        ),
        (
            r#"{"image": {"executor_opts": {"docker": {"user": true}}}}"#,
            "image.executor_opts.docker.user",
        ),
        (
            r#"{"image": {"pull_policy": ["sometimes"]}}"#,
            "image.pull_policy[0]",
        ),
        (
            r#"{"git_info": {"ref_type": "commit"}}"#,
            "git_info.ref_type",
        ),
        (
            r#"{"features": {"failure_reasons": [1]}}"#,
            "features.failure_reasons[0]",
        ),
        (
            r#"{"dependencies": [{"artifacts_file": {"size": -1}}]}"#,
            "dependencies[0].artifacts_file.size",
        ),
        (r#"{"run": ["not", "a", "string"]}"#, "run"),
    ];
    for (input, expected_path) in cases {
        let (path, message) = json_error(input.as_bytes());
        assert_eq!(&path, expected_path, "{input}");
        assert!(
            message.starts_with(&format!("decode job payload: at `{expected_path}`: ")),
            "{message}"
        );
        assert!(message.contains("line 1 column"), "{message}");
    }

    let (_, message) = json_error(br#"{"steps": [{"name": "deploy"}]}"#);
    assert!(
        message.contains("parse step name `deploy`: expected one of `script`, `release`"),
        "{message}"
    );
}

/// Replaces the value at every path of the fixture by one of the wrong type and checks
/// that decoding fails naming that path (or its parent, for open values).
#[test]
fn every_known_field_rejects_a_wrong_type_by_path() {
    fn visit(value: &Value, path: String, out: &mut Vec<(String, Value)>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let child_path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    visit(child, child_path, out);
                }
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    visit(child, format!("{path}[{index}]"), out);
                }
            }
            _ => {}
        }
        if !path.is_empty() && !value.is_null() {
            // A wrong type for anything: objects/arrays get a number, scalars an object.
            let wrong = if value.is_object() || value.is_array() || value.is_string() {
                json!(17)
            } else {
                json!({"x": 1})
            };
            out.push((path, wrong));
        }
    }

    let fixture = fixture_value();
    let mut paths = Vec::new();
    visit(&fixture, String::new(), &mut paths);
    assert!(paths.len() > 250, "walked {} paths", paths.len());

    let mut checked = 0;
    for (path, wrong) in paths {
        let mut mutated = fixture.clone();
        let pointer = format!("/{}", path.replace(['.', '['], "/").replace(']', ""));
        *mutated.pointer_mut(&pointer).expect("path exists") = wrong;
        match parse_job_response(&serde_json::to_vec(&mutated).expect("json")) {
            Err(ProtocolError::Json { path: reported, .. }) => {
                assert_eq!(reported, path, "wrong path reported");
                checked += 1;
            }
            // Open values: an executor option object (a number there is an error at the
            // parent) never reaches here; `ImageUser` accepts strings and integers, so
            // `17` for `user` is fine.
            Ok(_) if path.ends_with(".user") => {}
            other => panic!("{path}: expected an error naming the path, got {other:?}"),
        }
    }
    assert!(checked > 250, "checked {checked}");
}

#[test]
fn no_panic_on_truncated_or_corrupted_payloads() {
    let document = FIXTURE.trim_ascii_end();
    for len in 0..document.len() {
        assert!(
            parse_job_response(&document[..len]).is_err(),
            "prefix of {len} bytes decoded"
        );
    }
    let replacements: &[u8] = b"\"{}[],:0-\\\x00\xff";
    for index in (0..FIXTURE.len()).step_by(7) {
        for &byte in replacements {
            let mut corrupted = FIXTURE.to_vec();
            corrupted[index] = byte;
            let _ = parse_job_response(&corrupted);
        }
    }
}

#[test]
fn no_panic_on_hostile_documents() {
    let deep_array = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_secrets = format!(
        r#"{{"secrets": {{"a": {}1{}}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let inputs: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"\"job\"".to_vec(),
        b"{".to_vec(),
        b"{}{}".to_vec(),
        b"{\"id\": 1} trailing".to_vec(),
        b"{\"id\": 99999999999999999999999}".to_vec(),
        b"{\"id\": 1.5}".to_vec(),
        b"{\"token\": \"\\ud800\"}".to_vec(),
        b"\xef\xbb\xbf{}".to_vec(),
        b"{\"variables\": {}}".to_vec(),
        b"{\"image\": []}".to_vec(),
        b"{\"image\": {\"executor_opts\": []}}".to_vec(),
        b"{\"artifacts\": [null]}".to_vec(),
        b"{\"inputs\": [{\"value\": {\"type\": \"tuple\"}}]}".to_vec(),
        b"{\"\xff\": 1}".to_vec(),
        deep_array.into_bytes(),
        deep_secrets.into_bytes(),
    ];
    for input in inputs {
        let _ = parse_job_response(&input);
    }
    assert!(parse_job_response(b"{\"id\": 1} trailing").is_err());
}

#[test]
fn a_variable_cache_policy_decodes_for_the_runner_to_expand() {
    // GitLab passes `cache:policy: $CACHE_POLICY` through unexpanded (§3.5.9).
    let job = parse_job_response(
        br#"{"id": 3, "cache": [{"key": "k", "paths": ["v"], "policy": "$CACHE_POLICY", "when": "on_success"}]}"#,
    )
    .expect("a variable policy decodes");
    assert_eq!(
        job.cache[0].policy,
        CachePolicy::Variable("$CACHE_POLICY".to_owned())
    );
    let error =
        parse_job_response(br#"{"cache": [{"policy": "sometimes"}]}"#).expect_err("unknown policy");
    assert!(error.to_string().contains("`cache[0].policy`"), "{error}");
}
