//! `executor_opts` of `image` and `services` (§3.5.7).
//!
//! `{"docker": {"platform": "linux/amd64", "user": "1000"}, "kubernetes": {"user": "1000:1000"}}`.
//! gitlab-runner fails a job whose `executor_opts` contain keys it does not support
//! (`runner_system_failure`), but only when it prepares the image, not while decoding
//! the payload. Decoding therefore records unsupported keys instead of rejecting them;
//! [`ExecutorOptions::check`] reports them. They are not serialized.

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ProtocolError;

/// `executor_opts` (§3.5.7).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExecutorOptions {
    /// Options for the docker executors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerExecutorOptions>,
    /// Options for the kubernetes executor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesExecutorOptions>,
    /// Keys received that gitlab-runner does not support, as dotted paths
    /// (`podman`, `docker.privileged`). Never serialized.
    #[serde(skip)]
    pub unsupported: Vec<String>,
}

/// `executor_opts.docker`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DockerExecutorOptions {
    /// e.g. `linux/amd64`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// User to run the container as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<ImageUser>,
}

/// `executor_opts.kubernetes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KubernetesExecutorOptions {
    /// `uid` or `uid:gid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<ImageUser>,
}

/// A `user` option: the wire allows a string or an integer, and this keeps which one
/// was sent so a payload round-trips.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageUser {
    /// `"1000"`, `"1000:1000"`, `"nobody"`.
    Name(String),
    /// `1000`.
    Id(i64),
}

impl ImageUser {
    /// The user as gitlab-runner uses it: a string.
    pub fn to_user_string(&self) -> String {
        match self {
            Self::Name(name) => name.clone(),
            Self::Id(id) => id.to_string(),
        }
    }
}

impl ExecutorOptions {
    fn record_unsupported(&mut self, executor: &str, keys: Vec<String>) {
        self.unsupported
            .extend(keys.into_iter().map(|key| format!("{executor}.{key}")));
    }

    /// `Err` naming every unsupported option; gitlab-runner then fails the job with
    /// `runner_system_failure`.
    pub fn check(&self) -> Result<(), ProtocolError> {
        if self.unsupported.is_empty() {
            Ok(())
        } else {
            Err(ProtocolError::UnsupportedExecutorOptions {
                options: self.unsupported.clone(),
            })
        }
    }
}

impl Serialize for ImageUser {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Name(name) => serializer.serialize_str(name),
            Self::Id(id) => serializer.serialize_i64(*id),
        }
    }
}

impl<'de> Deserialize<'de> for ImageUser {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UserVisitor;

        impl Visitor<'_> for UserVisitor {
            type Value = ImageUser;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a user name or id (string or integer)")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<ImageUser, E> {
                Ok(ImageUser::Name(value.to_owned()))
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<ImageUser, E> {
                Ok(ImageUser::Id(value))
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<ImageUser, E> {
                i64::try_from(value)
                    .map(ImageUser::Id)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(value), &self))
            }
        }

        deserializer.deserialize_any(UserVisitor)
    }
}

impl<'de> Deserialize<'de> for ExecutorOptions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OptionsVisitor;

        impl<'de> Visitor<'de> for OptionsVisitor {
            type Value = ExecutorOptions;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of executor options")
            }

            fn visit_unit<E: de::Error>(self) -> Result<ExecutorOptions, E> {
                Ok(ExecutorOptions::default())
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExecutorOptions, A::Error> {
                let mut options = ExecutorOptions::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "docker" => {
                            if let Some(docker) = map.next_value::<Option<UserOptions<true>>>()? {
                                options.docker = Some(DockerExecutorOptions {
                                    platform: docker.platform,
                                    user: docker.user,
                                });
                                options.record_unsupported("docker", docker.unsupported);
                            }
                        }
                        "kubernetes" => {
                            if let Some(kubernetes) =
                                map.next_value::<Option<UserOptions<false>>>()?
                            {
                                options.kubernetes = Some(KubernetesExecutorOptions {
                                    user: kubernetes.user,
                                });
                                options.record_unsupported("kubernetes", kubernetes.unsupported);
                            }
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            options.unsupported.push(key);
                        }
                    }
                }
                Ok(options)
            }
        }

        deserializer.deserialize_any(OptionsVisitor)
    }
}

/// Decoding helper for one executor's options; `PLATFORM` says whether `platform` is
/// supported (docker) or not (kubernetes).
#[derive(Default)]
struct UserOptions<const PLATFORM: bool> {
    platform: Option<String>,
    user: Option<ImageUser>,
    unsupported: Vec<String>,
}

impl<'de, const PLATFORM: bool> Deserialize<'de> for UserOptions<PLATFORM> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UserOptionsVisitor<const P: bool>;

        impl<'de, const P: bool> Visitor<'de> for UserOptionsVisitor<P> {
            type Value = UserOptions<P>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of executor options")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UserOptions<P>, A::Error> {
                let mut options = UserOptions::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "platform" if P => options.platform = map.next_value()?,
                        "user" => options.user = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            options.unsupported.push(key);
                        }
                    }
                }
                Ok(options)
            }
        }

        deserializer.deserialize_map(UserOptionsVisitor::<PLATFORM>)
    }
}
