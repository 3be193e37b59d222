//! Runner lifecycle bodies (§2): register (`POST /runners`), create
//! (`POST /user/runners`), verify, delete runner / manager, token reset, router
//! discovery.
//!
//! Timestamps (`token_expires_at`) are kept as the ISO 8601 strings of the wire.

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::info::VersionInfo;
use crate::json::zero_if_null;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// `access_level` of a runner (§2.1, §2.2).
    pub enum AccessLevel ("access level") {
        /// Runs jobs of any ref.
        NotProtected = "not_protected",
        /// Runs jobs of protected refs only (§3.4).
        RefProtected = "ref_protected",
    }
}

wire_enum! {
    /// `runner_type` of `POST /user/runners` (§2.2).
    pub enum RunnerType ("runner type") {
        /// Instance runner; tokens get partition prefix `t1_`.
        InstanceType = "instance_type",
        /// Group runner; `t2_`.
        GroupType = "group_type",
        /// Project runner; `t3_`.
        ProjectType = "project_type",
    }
}

impl RunnerType {
    /// The token partition prefix (§1.1): `t1_`, `t2_` or `t3_`.
    pub const fn partition_prefix(self) -> &'static str {
        match self {
            Self::InstanceType => "t1_",
            Self::GroupType => "t2_",
            Self::ProjectType => "t3_",
        }
    }
}

/// `tag_list`: Rails accepts an array or a comma-separated string (§2.1); the runner
/// sends the string form, which is what this serializes to. Tags are trimmed and empty
/// ones dropped when decoding. An array's items are split at commas too, as GitLab's
/// `CommaSeparatedToArray` coercion does (`["a,b", "c"]` is three tags): a tag never
/// holds a comma, so the string form carries every list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagList(pub Vec<String>);

impl TagList {
    /// Whether there are no tags (then `tag_list` is omitted).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for TagList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.join(","))
    }
}

impl<'de> Deserialize<'de> for TagList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TagListVisitor;

        impl<'de> Visitor<'de> for TagListVisitor {
            type Value = TagList;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a comma-separated string or an array of strings")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<TagList, E> {
                Ok(TagList(
                    value
                        .split(',')
                        .map(str::trim)
                        .filter(|tag| !tag.is_empty())
                        .map(str::to_owned)
                        .collect(),
                ))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TagList, A::Error> {
                let mut tags = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    tags.extend(
                        item.split(',')
                            .map(str::trim)
                            .filter(|tag| !tag.is_empty())
                            .map(str::to_owned),
                    );
                }
                Ok(TagList(tags))
            }

            fn visit_unit<E: de::Error>(self) -> Result<TagList, E> {
                Ok(TagList::default())
            }

            fn visit_none<E: de::Error>(self) -> Result<TagList, E> {
                Ok(TagList::default())
            }
        }

        deserializer.deserialize_any(TagListVisitor)
    }
}

/// Body of `POST /api/v4/runners`: register with a (deprecated) registration token
/// (§2.1). Booleans and integers are read as Grape reads them ([`crate::grape`]). `run_untagged`, `locked` and `paused` are always sent by gitlab-runner; when
/// absent Rails uses its defaults (`run_untagged` true, `locked` true for the CLI,
/// `paused` false), hence `Option`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RegisterRunnerRequest {
    /// Omitted when empty.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub description: String,
    /// ≤ 1024 chars; omitted when empty. Rails also accepts the deprecated
    /// `maintainer_note`.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null",
        alias = "maintainer_note"
    )]
    pub maintenance_note: String,
    /// Omitted when empty.
    #[serde(skip_serializing_if = "TagList::is_empty")]
    pub tag_list: TagList,
    /// The runner forces `true` when `tag_list` is empty.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::grape::opt_bool"
    )]
    pub run_untagged: Option<bool>,
    /// CLI default `true`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::grape::opt_bool"
    )]
    pub locked: Option<bool>,
    /// Omitted when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_level: Option<AccessLevel>,
    /// Seconds; omitted when 0. Rails validates ≥ 600.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::grape::opt_i64"
    )]
    pub maximum_timeout: Option<i64>,
    /// Whether the runner starts paused.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::grape::opt_bool"
    )]
    pub paused: Option<bool>,
    /// Built without executor/shell on this call.
    #[serde(deserialize_with = "zero_if_null")]
    pub info: VersionInfo,
    /// The registration token.
    #[serde(deserialize_with = "zero_if_null")]
    pub token: String,
}

/// `group_id` of `POST /user/runners`: GitLab's numeric id (a number, or its digits as
/// text), or a group's path (`acme/platform`), which servers whose groups have no ids
/// (Gantry) take instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRef {
    Id(i64),
    Path(String),
}

impl Serialize for GroupRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Id(id) => s.serialize_i64(*id),
            Self::Path(path) => s.serialize_str(path),
        }
    }
}

impl<'de> Deserialize<'de> for GroupRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = GroupRef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a group id or a group path")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GroupRef, E> {
                Ok(GroupRef::Id(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GroupRef, E> {
                i64::try_from(v)
                    .map(GroupRef::Id)
                    .map_err(|_| E::custom("the group id is too large"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GroupRef, E> {
                let v = v.trim();
                Ok(match v.parse::<i64>() {
                    Ok(id) => GroupRef::Id(id),
                    Err(_) => GroupRef::Path(v.to_owned()),
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Body of `POST /api/v4/user/runners` (§2.2), sent by a user or automation with
/// `PRIVATE-TOKEN`, never by the runner; a form or JSON, its booleans and integers read as
/// Grape reads them ([`crate::grape`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CreateRunnerRequest {
    /// Required by Rails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner_type: Option<RunnerType>,
    /// Required for `group_type`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<GroupRef>,
    /// Required for `project_type`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::grape::opt_i64"
    )]
    pub project_id: Option<i64>,
    /// Free text.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub description: String,
    /// ≤ 1024 chars.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub maintenance_note: String,
    /// Default `false`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::grape::opt_bool"
    )]
    pub paused: Option<bool>,
    /// Default `false`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::grape::opt_bool"
    )]
    pub locked: Option<bool>,
    /// Default `not_protected`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_level: Option<AccessLevel>,
    /// Default `true`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::grape::opt_bool"
    )]
    pub run_untagged: Option<bool>,
    /// Array or comma-separated string.
    #[serde(skip_serializing_if = "TagList::is_empty")]
    pub tag_list: TagList,
    /// Seconds.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::grape::opt_i64"
    )]
    pub maximum_timeout: Option<i64>,
}

/// `201`/`200` body of `POST /runners`, `POST /user/runners` and `POST /runners/verify`
/// (Rails entity `RunnerRegistrationDetails`, §2.1–§2.3). `token_expires_at` is always
/// present, `null` when the token does not expire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunnerRegistrationDetails {
    /// Runner id.
    #[serde(deserialize_with = "zero_if_null")]
    pub id: i64,
    /// Runner authentication token.
    #[serde(deserialize_with = "zero_if_null")]
    pub token: String,
    /// ISO 8601, or `null`.
    pub token_expires_at: Option<String>,
}

/// `201` body of `POST /api/v4/runners` (§2.1).
pub type RegisterRunnerResponse = RunnerRegistrationDetails;

/// `200` body of `POST /api/v4/runners/verify` (§2.3). The coordinator MUST send this
/// JSON form (a plain-text `200` leaves the runner with id 0).
pub type VerifyRunnerResponse = RunnerRegistrationDetails;

/// Body of `POST /api/v4/runners/verify` (§2.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VerifyRunnerRequest {
    /// Runner authentication token.
    #[serde(deserialize_with = "zero_if_null")]
    pub token: String,
    /// Runner manager id (§1.3); the runner always sends it.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub system_id: String,
    /// Sent so Rails records features early.
    #[serde(deserialize_with = "zero_if_null")]
    pub info: VersionInfo,
}

/// Body of `DELETE /api/v4/runners` (§2.4) and of
/// `POST /api/v4/runners/reset_authentication_token` (§2.6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunnerTokenRequest {
    /// Runner authentication token.
    #[serde(deserialize_with = "zero_if_null")]
    pub token: String,
}

/// Body of `DELETE /api/v4/runners/managers` (§2.5); both fields required.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UnregisterManagerRequest {
    /// Runner authentication token.
    #[serde(deserialize_with = "zero_if_null")]
    pub token: String,
    /// The manager to delete.
    #[serde(deserialize_with = "zero_if_null")]
    pub system_id: String,
}

/// `201` body of both token reset endpoints (§2.6). `token_expires_at` is present only
/// when the new token expires.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResetTokenResponse {
    /// The new runner authentication token.
    #[serde(deserialize_with = "zero_if_null")]
    pub token: String,
    /// ISO 8601.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_expires_at: Option<String>,
}

/// `200` body of `GET /api/v4/runners/router/discovery` (§2.7). A coordinator without a
/// job router answers `501` instead.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RouterDiscoveryResponse {
    /// The job router (KAS) URL.
    #[serde(deserialize_with = "zero_if_null")]
    pub server_url: String,
}
