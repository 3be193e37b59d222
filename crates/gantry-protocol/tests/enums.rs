//! String values of every closed set on the wire.

use std::fmt::Debug;
use std::str::FromStr;

use gantry_protocol::{
    AccessLevel, ArtifactFormat, ArtifactType, ArtifactUploadParams, CachePolicy, FailureReason,
    Feature, HookName, InputType, JobState, JobStatus, ObjectFormat, PortProtocol, ProtocolError,
    PullPolicy, RefType, RunnerType, StepName, When,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

fn check_all<T>(all: &[T], names: &[&str], as_str: fn(&T) -> &'static str)
where
    T: Copy + Debug + PartialEq + Serialize + DeserializeOwned + FromStr<Err = ProtocolError>,
{
    assert_eq!(all.len(), names.len());
    let mut seen = std::collections::BTreeSet::new();
    for (value, name) in all.iter().zip(names) {
        assert_eq!(as_str(value), *name);
        assert!(seen.insert(*name), "duplicate wire value {name}");
        assert_eq!(
            serde_json::to_value(value).expect("serializes"),
            serde_json::json!(name)
        );
        assert_eq!(
            serde_json::from_value::<T>(serde_json::json!(name)).expect("deserializes"),
            *value
        );
        assert_eq!(name.parse::<T>().expect("parses"), *value);
    }
    assert!(serde_json::from_value::<T>(serde_json::json!("definitely_not_a_value")).is_err());
    assert!(serde_json::from_value::<T>(serde_json::json!(1)).is_err());
}

#[test]
fn every_enum_round_trips_through_its_wire_strings() {
    check_all(FailureReason::ALL, FailureReason::NAMES, |v| v.as_str());
    check_all(JobState::ALL, JobState::NAMES, |v| v.as_str());
    check_all(JobStatus::ALL, JobStatus::NAMES, |v| v.as_str());
    check_all(ArtifactType::ALL, ArtifactType::NAMES, |v| v.as_str());
    check_all(ArtifactFormat::ALL, ArtifactFormat::NAMES, |v| v.as_str());
    check_all(Feature::ALL, Feature::NAMES, |v| v.as_str());
    check_all(When::ALL, When::NAMES, |v| v.as_str());
    check_all(PullPolicy::ALL, PullPolicy::NAMES, |v| v.as_str());
    check_all(PortProtocol::ALL, PortProtocol::NAMES, |v| v.as_str());
    check_all(StepName::ALL, StepName::NAMES, |v| v.as_str());
    check_all(HookName::ALL, HookName::NAMES, |v| v.as_str());
    check_all(RefType::ALL, RefType::NAMES, |v| v.as_str());
    check_all(ObjectFormat::ALL, ObjectFormat::NAMES, |v| v.as_str());
    check_all(InputType::ALL, InputType::NAMES, |v| v.as_str());
    check_all(AccessLevel::ALL, AccessLevel::NAMES, |v| v.as_str());
    check_all(RunnerType::ALL, RunnerType::NAMES, |v| v.as_str());
}

#[test]
fn failure_reasons_are_the_servers_list_plus_image_pull_failure() {
    let fixture: serde_json::Value =
        serde_json::from_slice(include_bytes!("fixtures/job_payload.json")).expect("fixture");
    let server: Vec<&str> = fixture["features"]["failure_reasons"]
        .as_array()
        .expect("list")
        .iter()
        .map(|v| v.as_str().expect("string"))
        .collect();
    assert_eq!(server.len(), 52);
    let (last, rest) = FailureReason::NAMES.split_last().expect("non-empty");
    assert_eq!(rest, server.as_slice());
    assert_eq!(*last, "image_pull_failure");
    let stored: Vec<&str> = FailureReason::ALL
        .iter()
        .filter(|r| r.is_stored_by_server())
        .map(|r| r.as_str())
        .collect();
    assert_eq!(stored, server);
    assert_eq!(
        FailureReason::RunnerSystemFailure.to_string(),
        "runner_system_failure"
    );
}

#[test]
fn unknown_values_are_clear_errors() {
    let error = "job_canceled"
        .parse::<FailureReason>()
        .expect_err("runner-internal value");
    let message = error.to_string();
    assert!(
        message.starts_with(
            "parse failure reason `job_canceled`: expected one of `unknown_failure`, "
        ),
        "{message}"
    );
    assert!(message.ends_with("`image_pull_failure`"), "{message}");
    assert!(matches!(
        error,
        ProtocolError::UnknownValue {
            kind: "failure reason",
            ..
        }
    ));
    assert!("".parse::<FailureReason>().is_err());
    assert!("Script_Failure".parse::<FailureReason>().is_err());
    assert_eq!(
        "bogus"
            .parse::<ArtifactFormat>()
            .expect_err("unknown")
            .to_string(),
        "parse artifact format `bogus`: expected one of `zip`, `gzip`, `raw`, `zipzstd`, `tarzstd`"
    );
}

#[test]
fn cache_policy_is_a_known_policy_or_a_variable_for_the_runner() {
    assert_eq!(CachePolicy::ALL.len(), CachePolicy::NAMES.len());
    for (value, name) in CachePolicy::ALL.iter().zip(CachePolicy::NAMES) {
        assert_eq!(value.as_str(), *name);
        assert_eq!(
            serde_json::to_value(value).expect("serializes"),
            serde_json::json!(name)
        );
        assert_eq!(
            &serde_json::from_value::<CachePolicy>(serde_json::json!(name)).expect("decodes"),
            value
        );
    }
    // GitLab passes `policy: $CACHE_POLICY` through; the runner expands it.
    let variable: CachePolicy =
        serde_json::from_value(serde_json::json!("$CACHE_POLICY")).expect("decodes");
    assert_eq!(variable, CachePolicy::Variable("$CACHE_POLICY".to_owned()));
    assert!(variable.is_variable());
    assert_eq!(
        serde_json::to_value(&variable).expect("serializes"),
        serde_json::json!("$CACHE_POLICY")
    );
    assert_eq!(
        "${P}".parse::<CachePolicy>().expect("parses"),
        CachePolicy::Variable("${P}".to_owned())
    );
    assert_eq!(
        "pul"
            .parse::<CachePolicy>()
            .expect_err("unknown")
            .to_string(),
        "parse cache policy `pul`: expected one of `pull`, `push`, `pull-push`, `$VARIABLE`"
    );
    assert!(serde_json::from_value::<CachePolicy>(serde_json::json!(1)).is_err());
}

#[test]
fn empty_when_and_cache_policy_take_gitlab_runner_defaults() {
    assert_eq!("".parse::<When>().expect("empty"), When::OnSuccess);
    assert_eq!(
        "".parse::<CachePolicy>().expect("empty"),
        CachePolicy::PullPush
    );
    assert_eq!(
        "".parse::<PortProtocol>().expect("empty"),
        PortProtocol::Http
    );
    assert!("".parse::<JobState>().is_err());
}

#[test]
fn failure_reason_negotiation_follows_the_compatibility_table() {
    let accepted = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let old = accepted(&["unknown_failure", "script_failure"]);
    // Always-supported reasons are sent as they are.
    assert_eq!(
        FailureReason::JobExecutionTimeout.negotiate(&[]),
        FailureReason::JobExecutionTimeout
    );
    // Mapped through the table when the server does not list them.
    assert_eq!(
        FailureReason::ImagePullFailure.negotiate(&old),
        FailureReason::RunnerSystemFailure
    );
    assert_eq!(
        FailureReason::RunnerConfigurationError.negotiate(&old),
        FailureReason::ScriptFailure
    );
    assert_eq!(
        FailureReason::RunnerExternalDependencyFailure.negotiate(&old),
        FailureReason::RunnerSystemFailure
    );
    assert_eq!(
        FailureReason::RunnerInterrupted.negotiate(&old),
        FailureReason::UnknownFailure
    );
    // Sent as is when listed.
    let new = accepted(&["image_pull_failure", "runner_interrupted"]);
    assert_eq!(
        FailureReason::ImagePullFailure.negotiate(&new),
        FailureReason::ImagePullFailure
    );
    assert_eq!(
        FailureReason::RunnerInterrupted.negotiate(&new),
        FailureReason::RunnerInterrupted
    );
    // Neither listed nor mappable.
    assert_eq!(
        FailureReason::ApiFailure.negotiate(&old),
        FailureReason::UnknownFailure
    );
}

#[test]
fn received_failure_reasons_are_read_as_rails_does() {
    assert_eq!(FailureReason::from_wire_lenient(""), None);
    assert_eq!(
        FailureReason::from_wire_lenient("script_failure"),
        Some(FailureReason::ScriptFailure)
    );
    assert_eq!(
        FailureReason::from_wire_lenient("from_the_future"),
        Some(FailureReason::UnknownFailure)
    );
    // What a coordinator records: GitLab's values as they are, the runner-only one as
    // `unknown_failure`.
    assert_eq!(
        FailureReason::ScriptFailure.as_stored(),
        FailureReason::ScriptFailure
    );
    assert_eq!(
        FailureReason::ImagePullFailure.as_stored(),
        FailureReason::UnknownFailure
    );
}

#[test]
fn job_status_header_semantics() {
    assert!(JobStatus::Canceled.aborts_job() && JobStatus::Failed.aborts_job());
    assert!(!JobStatus::Running.aborts_job() && !JobStatus::Canceling.aborts_job());
    assert!(JobStatus::Canceling.requests_cancel());
    assert_eq!(
        JobStatus::from_header(Some(" canceling ")),
        Some(JobStatus::Canceling)
    );
    assert_eq!(JobStatus::from_header(Some("exploded")), None);
    assert_eq!(JobStatus::from_header(None), None);
    assert!(
        JobState::Success.is_final()
            && JobState::Failed.is_final()
            && !JobState::Running.is_final()
    );
}

#[test]
fn artifact_types_require_their_format() {
    assert_eq!(ArtifactType::ALL.len(), 34);
    let format_of = |name: &str| {
        name.parse::<ArtifactType>()
            .expect("type")
            .required_format()
    };
    for name in ["archive", "lsif", "scip"] {
        assert_eq!(format_of(name), ArtifactFormat::Zip, "{name}");
    }
    for name in [
        "metadata",
        "junit",
        "dotenv",
        "cobertura",
        "jacoco",
        "cyclonedx",
        "annotations",
        "repository_xray",
    ] {
        assert_eq!(format_of(name), ArtifactFormat::Gzip, "{name}");
    }
    for name in [
        "trace",
        "sast",
        "dast",
        "codequality",
        "terraform",
        "requirements_v2",
        "sarif",
        "api_fuzzing",
    ] {
        assert_eq!(format_of(name), ArtifactFormat::Raw, "{name}");
    }
    assert_eq!(ArtifactFormat::Gzip.file_extension(), ".gz");
    assert_eq!(ArtifactFormat::Tarzstd.file_extension(), ".tar.zst");
    assert_eq!(ArtifactFormat::Raw.file_extension(), "");
}

#[test]
fn artifact_upload_params() {
    let none = ArtifactUploadParams::default();
    assert_eq!(none.to_query(), "");
    assert_eq!(
        (none.effective_type(), none.effective_format()),
        (ArtifactType::Archive, ArtifactFormat::Zip)
    );
    none.validate().expect("archive/zip");

    let report = ArtifactUploadParams {
        artifact_type: Some(ArtifactType::Junit),
        artifact_format: Some(ArtifactFormat::Gzip),
        expire_in: Some("30 days & 1/2 hour".to_owned()),
    };
    assert_eq!(
        report.to_query(),
        "artifact_format=gzip&artifact_type=junit&expire_in=30+days+%26+1%2F2+hour"
    );
    report.validate().expect("junit/gzip");

    let mismatch = ArtifactUploadParams {
        artifact_type: Some(ArtifactType::Dotenv),
        ..Default::default()
    };
    assert_eq!(
        mismatch
            .validate()
            .expect_err("dotenv must be gzip")
            .to_string(),
        "upload `dotenv` artifact: the format must be `gzip`, not `zip`"
    );

    // Form fields / query as serde sees them (the server's extractor).
    let parsed: ArtifactUploadParams =
        serde_json::from_str(r#"{"artifact_type": "sast", "artifact_format": "raw"}"#)
            .expect("decodes");
    assert_eq!(parsed.artifact_type, Some(ArtifactType::Sast));
    assert_eq!(
        serde_json::to_string(&parsed).expect("json"),
        r#"{"artifact_type":"sast","artifact_format":"raw"}"#
    );
}
