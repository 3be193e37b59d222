//! Artifacts on the wire (§6): types, formats, and the parameters of
//! `POST /api/v4/jobs/:id/artifacts` and `GET /api/v4/jobs/:id/artifacts`.
//!
//! The upload body is multipart with a single part named [`UPLOAD_FILE_FIELD`]; the
//! parameters go in the query string (the runner) or as form fields (other clients) —
//! the coordinator MUST accept both (§6.2).

use serde::{Deserialize, Serialize};

use crate::ProtocolError;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// `artifact_type` (§6.2; gitlabhq `Enums::Ci::JobArtifact`). Every type GitLab
    /// accepts on upload; [`ArtifactType::required_format`] gives its format.
    #[derive(Default)]
    pub enum ArtifactType ("artifact type") {
        /// The job's browsable archive (`artifacts:paths`); the only type downloads serve.
        #[default]
        Archive = "archive",
        /// Archive metadata (Workhorse-generated).
        Metadata = "metadata",
        /// The job log.
        Trace = "trace",
        /// JUnit XML report.
        Junit = "junit",
        /// Metrics report.
        Metrics = "metrics",
        /// Metrics referee report.
        MetricsReferee = "metrics_referee",
        /// Network referee report.
        NetworkReferee = "network_referee",
        /// dotenv report (variables for later jobs).
        Dotenv = "dotenv",
        /// Cobertura coverage report.
        Cobertura = "cobertura",
        /// JaCoCo coverage report.
        Jacoco = "jacoco",
        /// Cluster applications report.
        ClusterApplications = "cluster_applications",
        /// CycloneDX SBOM report.
        Cyclonedx = "cyclonedx",
        /// Annotations report.
        Annotations = "annotations",
        /// Repository X-Ray report.
        RepositoryXray = "repository_xray",
        /// LSIF code intelligence.
        Lsif = "lsif",
        /// SCIP code intelligence.
        Scip = "scip",
        /// SAST report.
        Sast = "sast",
        /// Secret detection report.
        SecretDetection = "secret_detection",
        /// Dependency scanning report.
        DependencyScanning = "dependency_scanning",
        /// Container scanning report.
        ContainerScanning = "container_scanning",
        /// Cluster image scanning report.
        ClusterImageScanning = "cluster_image_scanning",
        /// DAST report.
        Dast = "dast",
        /// License scanning report.
        LicenseScanning = "license_scanning",
        /// Accessibility report.
        Accessibility = "accessibility",
        /// Code quality report.
        Codequality = "codequality",
        /// Performance report.
        Performance = "performance",
        /// Browser performance report.
        BrowserPerformance = "browser_performance",
        /// Load performance report.
        LoadPerformance = "load_performance",
        /// Terraform plan report.
        Terraform = "terraform",
        /// Requirements report.
        Requirements = "requirements",
        /// Requirements report, version 2.
        RequirementsV2 = "requirements_v2",
        /// Coverage fuzzing report.
        CoverageFuzzing = "coverage_fuzzing",
        /// API fuzzing report.
        ApiFuzzing = "api_fuzzing",
        /// SARIF report.
        Sarif = "sarif",
    }
}

wire_enum! {
    /// `artifact_format` (§6.2). GitLab accepts `zip`, `gzip` and `raw`; gitlab-runner
    /// also knows `zipzstd` and `tarzstd` (whether GitLab accepts them as artifact
    /// formats is unconfirmed; no artifact type requires them).
    #[derive(Default)]
    pub enum ArtifactFormat ("artifact format") {
        /// A zip archive (the `archive` type).
        #[default]
        Zip = "zip",
        /// A multi-member gzip stream, one member per file (reports).
        Gzip = "gzip",
        /// A single file as is.
        Raw = "raw",
        /// Zip with zstd compression.
        Zipzstd = "zipzstd",
        /// tar + zstd.
        Tarzstd = "tarzstd",
    }
}

impl ArtifactType {
    /// The only format GitLab accepts for this type; a mismatch is a `400` (§6.2).
    pub const fn required_format(self) -> ArtifactFormat {
        match self {
            Self::Archive | Self::Lsif | Self::Scip => ArtifactFormat::Zip,
            Self::Metadata
            | Self::Junit
            | Self::Metrics
            | Self::MetricsReferee
            | Self::NetworkReferee
            | Self::Dotenv
            | Self::Cobertura
            | Self::Jacoco
            | Self::ClusterApplications
            | Self::Cyclonedx
            | Self::Annotations
            | Self::RepositoryXray => ArtifactFormat::Gzip,
            Self::Trace
            | Self::Sast
            | Self::SecretDetection
            | Self::DependencyScanning
            | Self::ContainerScanning
            | Self::ClusterImageScanning
            | Self::Dast
            | Self::LicenseScanning
            | Self::Accessibility
            | Self::Codequality
            | Self::Performance
            | Self::BrowserPerformance
            | Self::LoadPerformance
            | Self::Terraform
            | Self::Requirements
            | Self::RequirementsV2
            | Self::CoverageFuzzing
            | Self::ApiFuzzing
            | Self::Sarif => ArtifactFormat::Raw,
        }
    }
}

impl ArtifactFormat {
    /// File name extension of an upload in this format (§6.2): `.zip`, `.gz`,
    /// `.tar.zst`, or none for `raw`.
    pub const fn file_extension(self) -> &'static str {
        match self {
            Self::Zip | Self::Zipzstd => ".zip",
            Self::Gzip => ".gz",
            Self::Tarzstd => ".tar.zst",
            Self::Raw => "",
        }
    }
}

/// Name of the multipart part holding the file.
pub const UPLOAD_FILE_FIELD: &str = "file";

/// Query parameter of the first download attempt: `direct_download=true` lets GitLab
/// redirect to object storage (§6.4).
pub const DIRECT_DOWNLOAD_QUERY: &str = "direct_download=true";

/// Parameters of `POST /jobs/:id/artifacts` (§6.2); each is sent only when set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArtifactUploadParams {
    /// Default `archive`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<ArtifactType>,
    /// Default `zip`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact_format: Option<ArtifactFormat>,
    /// e.g. `30 days`, `1 week`, `never`; default: the instance setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expire_in: Option<String>,
}

impl ArtifactUploadParams {
    /// The query string as gitlab-runner builds it (Go `url.Values.Encode`: keys sorted,
    /// form-encoded), e.g. `artifact_format=zip&artifact_type=archive&expire_in=1+week`.
    pub fn to_query(&self) -> String {
        let mut pairs = Vec::new();
        if let Some(format) = self.artifact_format {
            pairs.push(format!("artifact_format={}", form_encode(format.as_str())));
        }
        if let Some(kind) = self.artifact_type {
            pairs.push(format!("artifact_type={}", form_encode(kind.as_str())));
        }
        if let Some(expire_in) = self.expire_in.as_deref().filter(|e| !e.is_empty()) {
            pairs.push(format!("expire_in={}", form_encode(expire_in)));
        }
        pairs.join("&")
    }

    /// The type, defaulting to `archive` as Rails does.
    pub fn effective_type(&self) -> ArtifactType {
        self.artifact_type.unwrap_or_default()
    }

    /// The format, defaulting to `zip` as Rails does.
    pub fn effective_format(&self) -> ArtifactFormat {
        self.artifact_format.unwrap_or_default()
    }

    /// The server's check: the format is the one the type requires (§6.2).
    pub fn validate(&self) -> Result<(), ProtocolError> {
        let (kind, format) = (self.effective_type(), self.effective_format());
        let expected = kind.required_format();
        if format == expected {
            Ok(())
        } else {
            Err(ProtocolError::ArtifactFormatMismatch {
                artifact_type: kind.as_str(),
                expected: expected.as_str(),
                actual: format.as_str(),
            })
        }
    }
}

/// `application/x-www-form-urlencoded` value encoding as Go's `url.QueryEscape`:
/// `A-Za-z0-9-_.~` kept, space as `+`, every other byte `%XX`.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}
