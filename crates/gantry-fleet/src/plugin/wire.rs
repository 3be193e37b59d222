//! Between the [`crate::provider`] types and the provisional `gantry.fleeting.v1` messages,
//! for both sides: the one place where sentinel errors meet gRPC status codes.
//!
//! | [`ProviderError`] | gRPC code |
//! |---|---|
//! | `Unhealthy` | `FAILED_PRECONDITION` |
//! | `NotSupported` | `UNIMPLEMENTED` |
//! | `Failed` | `UNKNOWN` (any other code reads as `Failed`) |
//!
//! The status message is the error's own text, so it survives the round trip unchanged.

use std::time::{Duration, UNIX_EPOCH};

use tonic::{Code, Status};

use super::proto::fleeting as pb;
use crate::provider::{
    ConnectInfo, ConnectorConfig, Instance, Partial, ProviderError, ProviderInfo, State,
};

/// The status a plugin answers with for `error`.
pub(crate) fn status(error: ProviderError) -> Status {
    let (code, message) = split(error);
    Status::new(code, message)
}

/// The error a host reads from `status`.
pub(crate) fn provider_error(status: &Status) -> ProviderError {
    join(status.code(), status.message().to_owned())
}

fn split(error: ProviderError) -> (Code, String) {
    match error {
        ProviderError::Unhealthy(message) => (Code::FailedPrecondition, message),
        ProviderError::NotSupported(message) => (Code::Unimplemented, message),
        ProviderError::Failed(message) => (Code::Unknown, message),
    }
}

fn join(code: Code, message: String) -> ProviderError {
    match code {
        Code::FailedPrecondition => ProviderError::Unhealthy(message),
        Code::Unimplemented => ProviderError::NotSupported(message),
        _ => ProviderError::Failed(message),
    }
}

/// The wire form of a partial call's error.
pub(crate) fn failure(error: Option<ProviderError>) -> Option<pb::Failure> {
    error.map(|error| {
        let (code, message) = split(error);
        pb::Failure {
            code: code as i32,
            message,
        }
    })
}

/// A partial call's answer: what was done and why the rest was not.
pub(crate) fn partial<T>(done: T, failure: Option<pb::Failure>) -> Partial<T> {
    Partial {
        done,
        error: failure.map(|failure| join(Code::from_i32(failure.code), failure.message)),
    }
}

pub(crate) fn connector_to_wire(config: ConnectorConfig) -> pb::ConnectorConfig {
    pb::ConnectorConfig {
        os: config.os,
        arch: config.arch,
        protocol: config.protocol,
        protocol_port: config.protocol_port.into(),
        username: config.username,
        password: config.password,
        key: config.key,
        use_static_credentials: config.use_static_credentials,
        keepalive_nanos: nanos(config.keepalive),
        timeout_nanos: nanos(config.timeout),
    }
}

pub(crate) fn connector_from_wire(
    config: pb::ConnectorConfig,
) -> Result<ConnectorConfig, ProviderError> {
    let protocol_port = u16::try_from(config.protocol_port).map_err(|_| {
        ProviderError::Failed(format!(
            "protocol_port {} is not a TCP port",
            config.protocol_port
        ))
    })?;
    Ok(ConnectorConfig {
        os: config.os,
        arch: config.arch,
        protocol: config.protocol,
        protocol_port,
        username: config.username,
        password: config.password,
        key: config.key,
        use_static_credentials: config.use_static_credentials,
        keepalive: duration("keepalive", config.keepalive_nanos)?,
        timeout: duration("timeout", config.timeout_nanos)?,
    })
}

fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

fn duration(name: &str, nanos: i64) -> Result<Duration, ProviderError> {
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| ProviderError::Failed(format!("{name} is negative ({nanos} ns)")))
}

pub(crate) fn info_to_wire(info: ProviderInfo) -> pb::ProviderInfo {
    pb::ProviderInfo {
        id: info.id,
        max_size: info.max_size,
        version: info.version,
        build_info: info.build_info,
        capabilities: info.capabilities,
    }
}

pub(crate) fn info_from_wire(info: pb::ProviderInfo) -> ProviderInfo {
    ProviderInfo {
        id: info.id,
        max_size: info.max_size,
        version: info.version,
        build_info: info.build_info,
        capabilities: info.capabilities,
    }
}

pub(crate) fn instance_to_wire(instance: Instance) -> pb::Instance {
    let state = match instance.state {
        State::Creating => pb::State::Creating,
        State::Running => pb::State::Running,
        State::Deleting => pb::State::Deleting,
        State::Deleted => pb::State::Deleted,
        State::Timeout => pb::State::Timeout,
        State::Suspending => pb::State::Suspending,
        State::Suspended => pb::State::Suspended,
        State::Resuming => pb::State::Resuming,
    };
    pb::Instance {
        id: instance.id,
        state: state as i32,
    }
}

pub(crate) fn instance_from_wire(instance: pb::Instance) -> Result<Instance, ProviderError> {
    let state = match pb::State::try_from(instance.state) {
        Ok(pb::State::Creating) => State::Creating,
        Ok(pb::State::Running) => State::Running,
        Ok(pb::State::Deleting) => State::Deleting,
        Ok(pb::State::Deleted) => State::Deleted,
        Ok(pb::State::Timeout) => State::Timeout,
        Ok(pb::State::Suspending) => State::Suspending,
        Ok(pb::State::Suspended) => State::Suspended,
        Ok(pb::State::Resuming) => State::Resuming,
        Ok(pb::State::Unspecified) | Err(_) => {
            return Err(ProviderError::Failed(format!(
                "the plugin reported instance {:?} in unknown state {}",
                instance.id, instance.state
            )));
        }
    };
    Ok(Instance {
        id: instance.id,
        state,
    })
}

pub(crate) fn connect_info_to_wire(info: ConnectInfo) -> pb::ConnectInfoResponse {
    let expires_unix_millis = info.expires.map_or(0, |expires| {
        let millis = expires
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        // 0 means "never": an expiry at or before 1970 is sent as 1 ms after.
        i64::try_from(millis).unwrap_or(i64::MAX).max(1)
    });
    pb::ConnectInfoResponse {
        connector: Some(connector_to_wire(info.connector)),
        id: info.id,
        internal_addr: info.internal_addr,
        external_addr: info.external_addr,
        expires_unix_millis,
    }
}

pub(crate) fn connect_info_from_wire(
    info: pb::ConnectInfoResponse,
) -> Result<ConnectInfo, ProviderError> {
    let expires = match u64::try_from(info.expires_unix_millis) {
        Ok(0) => None,
        Ok(millis) => Some(UNIX_EPOCH + Duration::from_millis(millis)),
        Err(_) => {
            return Err(ProviderError::Failed(format!(
                "the plugin sent a negative expiry ({} ms) for instance {:?}",
                info.expires_unix_millis, info.id
            )));
        }
    };
    Ok(ConnectInfo {
        connector: connector_from_wire(info.connector.unwrap_or_default())?,
        id: info.id,
        internal_addr: info.internal_addr,
        external_addr: info.external_addr,
        expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinels_survive_the_status_round_trip_with_their_message() {
        for error in [
            ProviderError::Unhealthy("dummy-1 does not exist".into()),
            ProviderError::NotSupported("suspend".into()),
            ProviderError::Failed("the cloud said no".into()),
        ] {
            assert_eq!(provider_error(&status(error.clone())), error);
            let back = partial(0, failure(Some(error.clone())));
            assert_eq!(back.error, Some(error));
        }
        assert_eq!(
            provider_error(&Status::unavailable("gone")),
            ProviderError::Failed("gone".into())
        );
        assert_eq!(
            status(ProviderError::Unhealthy("x".into())).code(),
            Code::FailedPrecondition
        );
        assert_eq!(
            status(ProviderError::NotSupported("x".into())).code(),
            Code::Unimplemented
        );
        assert_eq!(
            status(ProviderError::Failed("x".into())).code(),
            Code::Unknown
        );
    }

    #[test]
    fn connect_info_round_trips_with_durations_and_expiry() {
        let info = ConnectInfo {
            connector: ConnectorConfig {
                os: "linux".into(),
                protocol: "ssh".into(),
                protocol_port: 2222,
                key: b"-----BEGIN OPENSSH PRIVATE KEY-----".to_vec(),
                keepalive: Duration::from_secs(30),
                timeout: Duration::from_millis(1500),
                ..ConnectorConfig::default()
            },
            id: "i-1".into(),
            internal_addr: "10.0.0.1".into(),
            external_addr: String::new(),
            expires: Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)),
        };
        assert_eq!(
            connect_info_from_wire(connect_info_to_wire(info.clone())).unwrap(),
            info
        );
        let never = ConnectInfo::default();
        assert_eq!(connect_info_to_wire(never.clone()).expires_unix_millis, 0);
        assert_eq!(
            connect_info_from_wire(connect_info_to_wire(never.clone())).unwrap(),
            never
        );
    }

    #[test]
    fn unknown_states_and_bad_numbers_are_precise_errors() {
        let error = instance_from_wire(pb::Instance {
            id: "i-1".into(),
            state: 42,
        })
        .unwrap_err();
        assert_eq!(
            error,
            ProviderError::Failed(
                "the plugin reported instance \"i-1\" in unknown state 42".into()
            )
        );
        let port = connector_from_wire(pb::ConnectorConfig {
            protocol_port: 70000,
            ..pb::ConnectorConfig::default()
        });
        assert!(port.is_err());
        let negative = connector_from_wire(pb::ConnectorConfig {
            timeout_nanos: -1,
            ..pb::ConnectorConfig::default()
        });
        assert_eq!(
            negative,
            Err(ProviderError::Failed("timeout is negative (-1 ns)".into()))
        );
    }
}
