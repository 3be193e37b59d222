//! Bodies of the runner lifecycle (§2), job request (§3.1) and job update (§4).

use std::collections::BTreeMap;
use std::time::Duration;

use gantry_protocol::token::{self, is_created_runner_token, is_valid_system_id};
use gantry_protocol::update::accept_backoff;
use gantry_protocol::{
    AccessLevel, ConfigInfo, ErrorMessage, ErrorResponse, FailureReason, Feature, Features,
    JobRequest, JobState, RegisterRunnerRequest, RegisterRunnerResponse, ResetTokenResponse,
    RunnerType, SessionInfo, TagList, TraceChecksum, UpdateJobRequest, UpdateJobResponse,
    UpdateOutcome, VerifyRunnerRequest, VerifyRunnerResponse, VersionInfo, parse_json,
    parse_trace_update_interval, validate_labels,
};
use serde_json::json;

fn info() -> VersionInfo {
    VersionInfo {
        name: "gantry".to_owned(),
        version: "0.1.0".to_owned(),
        revision: "abcdef12".to_owned(),
        platform: "linux".to_owned(),
        architecture: "amd64".to_owned(),
        executor: "docker".to_owned(),
        shell: "bash".to_owned(),
        features: Features::advertise(&[
            Feature::Variables,
            Feature::Refspecs,
            Feature::CancelGracefully,
        ]),
        config: ConfigInfo {
            gpus: String::new(),
        },
        labels: BTreeMap::new(),
    }
}

#[test]
fn info_sends_every_feature_key() {
    let value = serde_json::to_value(info()).expect("serializes");
    let features = value["features"].as_object().expect("object");
    assert_eq!(features.len(), Feature::ALL.len());
    assert_eq!(features["refspecs"], json!(true));
    assert_eq!(features["two_phase_job_commit"], json!(false));
    assert_eq!(value["config"], json!({"gpus": ""}));
    assert!(value.get("labels").is_none(), "labels omitted when empty");

    // A client that sends only true keys, plus a key from a newer runner.
    let sparse: VersionInfo =
        parse_json(br#"{"features": {"refspecs": true, "teleport": true}, "config": null}"#)
            .expect("decodes");
    assert!(sparse.features.has(Feature::Refspecs));
    assert!(!sparse.features.has(Feature::Image));
    assert_eq!(
        sparse.features.0.get("teleport"),
        Some(&true),
        "unknown features are kept"
    );
    let mut features = sparse.features;
    features.set(Feature::Image, true);
    assert!(features.has(Feature::Image));

    // `info` built for `POST /runners` omits the empty executor and shell.
    let bare = VersionInfo {
        executor: String::new(),
        shell: String::new(),
        ..info()
    };
    let bare = serde_json::to_value(bare).expect("serializes");
    assert!(bare.get("executor").is_none() && bare.get("shell").is_none());
}

#[test]
fn labels_follow_the_rules() {
    let labels = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    validate_labels(&labels(&[("zone", "eu-1"), ("_x.y-z", "a.b_c-d")])).expect("valid");
    for (key, value) in [
        ("ab", "v"),
        ("-ab", "v"),
        ("zone!", "v"),
        ("zone", ""),
        ("zone", "a b"),
        (&"k".repeat(66)[..], "v"),
    ] {
        assert!(
            validate_labels(&labels(&[(key, value)])).is_err(),
            "{key}={value}"
        );
    }
    let many: BTreeMap<String, String> = (0..33)
        .map(|i| (format!("key{i:02}"), "v".to_owned()))
        .collect();
    assert!(validate_labels(&many).is_err());
}

#[test]
fn register_request_matches_gitlab_runner() {
    let request = RegisterRunnerRequest {
        description: "build box".to_owned(),
        tag_list: TagList(vec!["docker".to_owned(), "linux".to_owned()]),
        run_untagged: Some(false),
        locked: Some(true),
        access_level: Some(AccessLevel::RefProtected),
        paused: Some(false),
        info: VersionInfo {
            executor: String::new(),
            shell: String::new(),
            ..info()
        },
        token: "GR1348941abc".to_owned(),
        ..RegisterRunnerRequest::default()
    };
    let value = serde_json::to_value(&request).expect("serializes");
    assert_eq!(value["tag_list"], json!("docker,linux"));
    assert_eq!(value["access_level"], json!("ref_protected"));
    assert!(value.get("maintenance_note").is_none() && value.get("maximum_timeout").is_none());
    assert_eq!(
        serde_json::from_value::<RegisterRunnerRequest>(value).expect("decodes"),
        request
    );

    // Rails' alternative forms.
    let decoded: RegisterRunnerRequest = parse_json(
        br#"{"token": "t", "tag_list": [" a ", "", "b"], "maintainer_note": "old name", "maximum_timeout": 3600}"#,
    )
    .expect("decodes");
    assert_eq!(
        decoded.tag_list,
        TagList(vec!["a".to_owned(), "b".to_owned()])
    );
    assert_eq!(decoded.maintenance_note, "old name");
    assert_eq!(decoded.maximum_timeout, Some(3600));
    assert_eq!(
        decoded.run_untagged, None,
        "absent: the server applies its default"
    );
    // Booleans and integers as Grape reads them, from what a script might send.
    let typed: RegisterRunnerRequest = parse_json(
        br#"{"token": "t", "run_untagged": "false", "locked": 0, "paused": "yes", "maximum_timeout": "900"}"#,
    )
    .expect("decodes");
    assert_eq!(
        (
            typed.run_untagged,
            typed.locked,
            typed.paused,
            typed.maximum_timeout
        ),
        (Some(false), Some(false), Some(true), Some(900))
    );
    let error = parse_json::<RegisterRunnerRequest>(br#"{"paused": "perhaps"}"#)
        .expect_err("not a boolean");
    assert!(
        error.to_string().contains("at `paused`") && error.to_string().contains("a boolean"),
        "{error}"
    );
    let tags: RegisterRunnerRequest = parse_json(br#"{"tag_list": "a, b,,c"}"#).expect("decodes");
    assert_eq!(tags.tag_list.0, ["a", "b", "c"]);
    let error = parse_json::<RegisterRunnerRequest>(br#"{"access_level": "everyone"}"#)
        .expect_err("bad level");
    assert!(
        error
            .to_string()
            .contains("at `access_level`: parse access level `everyone`"),
        "{error}"
    );
}

/// Items of a list are split at commas, as GitLab's `CommaSeparatedToArray` does, so the
/// string form the runner sends carries the same tags. Found by fuzzing (`fuzz/`, target
/// `wire`): `tag_list[]=a,b` was one tag `a,b`, sent on as `"a,b"`, read back as two.
#[test]
fn tag_list_items_are_split_at_commas() {
    let tags: RegisterRunnerRequest =
        parse_json(br#"{"tag_list": ["a,b", " c ,", "d"]}"#).expect("decodes");
    assert_eq!(tags.tag_list.0, ["a", "b", "c", "d"]);
    let again: RegisterRunnerRequest =
        parse_json(&serde_json::to_vec(&tags).expect("encodes")).expect("decodes");
    assert_eq!(again, tags);
    let form: RegisterRunnerRequest =
        gantry_protocol::parse_form(b"token=x&tag_list[]=a/x,y&tag_list[]=z").expect("decodes");
    assert_eq!(form.tag_list.0, ["a/x", "y", "z"]);
    let again: RegisterRunnerRequest =
        parse_json(&serde_json::to_vec(&form).expect("encodes")).expect("decodes");
    assert_eq!(again, form);
}

#[test]
fn registration_details_always_carry_token_expires_at() {
    let response = RegisterRunnerResponse {
        id: 12,
        token: "glrtr-abc".to_owned(),
        token_expires_at: None,
    };
    assert_eq!(
        serde_json::to_value(&response).expect("json"),
        json!({"id": 12, "token": "glrtr-abc", "token_expires_at": null})
    );
    let verified: VerifyRunnerResponse = parse_json(
        br#"{"id": 7, "token": "glrt-t1_x", "token_expires_at": "2026-01-31T10:00:00.000Z"}"#,
    )
    .expect("decodes");
    assert_eq!(
        verified.token_expires_at.as_deref(),
        Some("2026-01-31T10:00:00.000Z")
    );

    let reset = ResetTokenResponse {
        token: "new".to_owned(),
        token_expires_at: None,
    };
    assert_eq!(
        serde_json::to_value(&reset).expect("json"),
        json!({"token": "new"})
    );

    let verify = VerifyRunnerRequest {
        token: "glrt-t1_x".to_owned(),
        system_id: "s_0123456789ab".to_owned(),
        info: info(),
    };
    let value = serde_json::to_value(&verify).expect("json");
    assert_eq!(value["system_id"], json!("s_0123456789ab"));
    assert_eq!(
        serde_json::from_value::<VerifyRunnerRequest>(value).expect("decodes"),
        verify
    );
}

#[test]
fn job_request_omits_what_gitlab_runner_omits() {
    let first = JobRequest {
        info: info(),
        token: "glrt-t1_x".to_owned(),
        system_id: "s_0123456789ab".to_owned(),
        ..JobRequest::default()
    };
    let value = serde_json::to_value(&first).expect("json");
    assert!(value.get("last_update").is_none() && value.get("session").is_none());

    let spec_example = br#"{
      "info": {"name": "gitlab-runner", "version": "19.4.0", "revision": "d79f3e7b", "platform": "linux",
               "architecture": "amd64", "executor": "docker", "shell": "bash",
               "features": {"variables": true, "image": true}, "config": {"gpus": ""}},
      "token": "glrt-t1_exampleRunnerToken123",
      "system_id": "s_0123456789ab",
      "last_update": "5c8f0e5a6bb24e0f9f6a2f0b6d1d3e77",
      "session": {"url": "https://runner-1.example.com:8093/session/7d9a", "certificate": "-----BEGIN CERTIFICATE-----\n", "authorization": "3f6c"}
    }"#;
    let request: JobRequest = parse_json(spec_example).expect("decodes");
    assert_eq!(request.last_update, "5c8f0e5a6bb24e0f9f6a2f0b6d1d3e77");
    assert_eq!(
        request
            .session
            .as_ref()
            .map(|s: &SessionInfo| s.authorization.as_str()),
        Some("3f6c")
    );
    let original: serde_json::Value = serde_json::from_slice(spec_example).expect("json");
    assert_eq!(serde_json::to_value(&request).expect("json"), original);
}

#[test]
fn update_request_matches_the_spec_example() {
    let mut checksum = TraceChecksum::new();
    checksum.update(b"log");
    let mut update = UpdateJobRequest::new("glcbt-x", JobState::Failed, info());
    update.failure_reason = Some(FailureReason::ScriptFailure);
    update.output = checksum.output();
    update.checksum = update.output.checksum.clone();
    update.exit_code = 1;
    let value = serde_json::to_value(&update).expect("json");
    let keys: Vec<&str> = value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "info",
            "token",
            "state",
            "failure_reason",
            "checksum",
            "output",
            "exit_code"
        ]
    );
    assert_eq!(value["output"]["bytesize"], json!(3));
    assert_eq!(
        serde_json::from_value::<UpdateJobRequest>(value).expect("decodes"),
        update
    );

    let running = UpdateJobRequest::new("glcbt-x", JobState::Running, VersionInfo::default());
    assert_eq!(
        serde_json::to_value(&running).expect("json"),
        json!({"info": {"features": {}, "config": {"gpus": ""}}, "token": "glcbt-x", "state": "running", "output": {}})
    );
    assert_eq!(running.trace_checksum(), None);
    assert_eq!(update.trace_checksum(), Some(checksum.to_wire().as_str()));
}

#[test]
fn update_request_spec_example_decodes() {
    let example = br#"{
      "info": { "...": "same object as in \u00a72.8" },
      "token": "glcbt-exampleJobToken0123456789abcdef",
      "state": "failed",
      "failure_reason": "script_failure",
      "checksum": "crc32:8a1f2c3d",
      "output": { "checksum": "crc32:8a1f2c3d", "bytesize": 48213 },
      "exit_code": 1
    }"#;
    let update: UpdateJobRequest = parse_json(example).expect("decodes");
    assert_eq!(update.state, Some(JobState::Failed));
    assert_eq!(update.failure_reason, Some(FailureReason::ScriptFailure));
    assert_eq!((update.output.bytesize, update.exit_code), (48_213, 1));
    assert_eq!(update.trace_checksum(), Some("crc32:8a1f2c3d"));
}

#[test]
fn update_request_decoding_is_as_strict_as_rails() {
    // `state` is optional in GitLab's API definition: without it the update is a keep-alive.
    let keep_alive: UpdateJobRequest =
        parse_json(br#"{"token": "t", "exit_code": 2}"#).expect("state is optional");
    assert_eq!((keep_alive.state, keep_alive.exit_code), (None, 2));
    let unknown_state =
        parse_json::<UpdateJobRequest>(br#"{"token": "t", "state": "canceled"}"#).expect_err("400");
    assert!(
        unknown_state
            .to_string()
            .contains("at `state`: parse job state `canceled`"),
        "{unknown_state}"
    );
    // Rails stores an unknown failure reason as unknown_failure.
    let lenient: UpdateJobRequest = parse_json(
        br#"{"token": "t", "state": "failed", "failure_reason": "job_canceled", "output": null}"#,
    )
    .expect("decodes");
    assert_eq!(lenient.failure_reason, Some(FailureReason::UnknownFailure));
    let empty: UpdateJobRequest =
        parse_json(br#"{"state": "failed", "failure_reason": ""}"#).expect("decodes");
    assert_eq!(empty.failure_reason, None);
}

#[test]
fn update_answers_are_classified_like_gitlab_runner() {
    let outcome =
        |status, job_status| UpdateJobResponse::classify(status, job_status, None).outcome;
    assert_eq!(outcome(200, Some("running")), UpdateOutcome::Succeeded);
    assert_eq!(outcome(202, None), UpdateOutcome::AcceptedButNotCompleted);
    assert_eq!(outcome(412, None), UpdateOutcome::TraceValidationFailed);
    assert_eq!(outcome(403, None), UpdateOutcome::Aborted);
    assert_eq!(outcome(404, None), UpdateOutcome::Aborted);
    assert_eq!(
        outcome(200, Some("canceled")),
        UpdateOutcome::Aborted,
        "Job-Status wins over 200"
    );
    assert_eq!(outcome(202, Some("failed")), UpdateOutcome::Aborted);
    assert_eq!(outcome(400, None), UpdateOutcome::Failed);
    assert_eq!(outcome(409, None), UpdateOutcome::Failed);
    assert_eq!(outcome(502, None), UpdateOutcome::Failed);

    let canceling = UpdateJobResponse::classify(200, Some("canceling"), Some("1"));
    assert_eq!(canceling.outcome, UpdateOutcome::Succeeded);
    assert!(canceling.cancel_requested);
    assert_eq!(canceling.update_interval, Some(Duration::from_secs(1)));
}

#[test]
fn trace_update_interval_header() {
    assert_eq!(
        parse_trace_update_interval(Some("60")),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        parse_trace_update_interval(Some(" 3 ")),
        Some(Duration::from_secs(3))
    );
    assert_eq!(
        parse_trace_update_interval(Some("3600")),
        Some(Duration::from_secs(900)),
        "clamped to 15 min"
    );
    for ignored in [
        None,
        Some(""),
        Some("0"),
        Some("-5"),
        Some("1.5"),
        Some("soon"),
    ] {
        assert_eq!(parse_trace_update_interval(ignored), None, "{ignored:?}");
    }
}

#[test]
fn accept_backoff_doubles_with_pending_state_age() {
    let expected = [
        (0, 1),
        (3, 1),
        (4, 2),
        (7, 2),
        (8, 4),
        (15, 4),
        (16, 8),
        (31, 8),
        (32, 16),
        (63, 16),
        (64, 32),
        (127, 32),
        (128, 64),
        (299, 64),
        (100_000, 64),
    ];
    for (age, backoff) in expected {
        assert_eq!(
            accept_backoff(Duration::from_secs(age)),
            Duration::from_secs(backoff),
            "age {age}"
        );
    }
}

#[test]
fn tokens_and_system_ids() {
    assert!(is_created_runner_token("glrt-t1_abc"));
    assert!(
        !is_created_runner_token("glrtr-abc"),
        "only the exact glrt- prefix"
    );
    assert!(!is_created_runner_token("GR1348941abc"));
    assert_eq!(
        RunnerType::GroupType.partition_prefix(),
        token::PARTITION_PREFIXES[1]
    );
    assert!(token::ALL_DEFAULT_MASKED_TOKEN_PREFIXES.contains(&token::JOB_TOKEN_PREFIX));

    assert!(is_valid_system_id("s_0123456789ab"));
    assert!(is_valid_system_id("r_ABCdef012345"));
    for bad in [
        "",
        "s_0123456789a",
        "s_0123456789abc",
        "x_0123456789ab",
        "s-0123456789ab",
        "s_0123456789a!",
        "s_0123456789aé",
    ] {
        assert!(!is_valid_system_id(bad), "{bad}");
    }
}

#[test]
fn error_bodies_have_two_shapes() {
    let text: ErrorResponse = parse_json(br#"{"message": "403 Forbidden"}"#).expect("decodes");
    assert_eq!(text, ErrorResponse::message("403 Forbidden"));
    let fields: ErrorResponse =
        parse_json(br#"{"message": {"tags_list": ["can not be empty when runner is not allowed to pick untagged jobs"]}}"#)
            .expect("decodes");
    let Some(ErrorMessage::Fields(map)) = &fields.message else {
        panic!("fields: {fields:?}")
    };
    assert_eq!(map["tags_list"].len(), 1);
    assert_eq!(
        serde_json::to_string(&ErrorResponse::message("404 Not found")).expect("json"),
        r#"{"message":"404 Not found"}"#
    );
    let rails: ErrorResponse = parse_json(br#"{"error": "token is missing"}"#).expect("decodes");
    assert_eq!(rails.error.as_deref(), Some("token is missing"));
    assert!(parse_json::<ErrorResponse>(br#"{"message": 403}"#).is_err());
}
