//! A job's `environment:` as GitLab persists it at pipeline creation: the name, URL and
//! `auto_stop_in` expanded with the job's variables (`Ci::Build#expanded_environment_name`),
//! the environment slug (`Gitlab::Slug::Environment`), the tier guessed from a name, and
//! what a job's end does to its environment. The service over environments (stop, auto
//! stop) is in `environments.rs`.

use std::collections::HashMap;

use gantry_pipeline::expand::{Unknown, expand_server};
use gantry_store::{EnvironmentEvent, NewJobEnvironment};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::processor::Status;

/// The longest environment name (GitLab's `length: { maximum: 255 }`).
pub(crate) const MAX_NAME_LEN: usize = 255;

/// The environment of one job, expanded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEnvironment {
    pub name: String,
    pub url: Option<String>,
    /// `auto_stop_in:` in ms (`None`: not given, `never`, or not a duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_stop_in: Option<i64>,
    /// `deployment_tier:` expanded (`None`: not given, or empty once expanded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

impl JobEnvironment {
    /// `env`'s name, URL and `auto_stop_in` with `$VAR` references replaced from
    /// `variables` (already expanded values; unknown references become empty, as
    /// GitLab's `ExpandVariables`).
    ///
    /// The URL also sees the environment's own variables (`CI_ENVIRONMENT_NAME`,
    /// `CI_ENVIRONMENT_SLUG`, `CI_ENVIRONMENT_ACTION`, `CI_ENVIRONMENT_TIER` of the
    /// expanded name), as GitLab expands it with the persisted environment's variables:
    /// its dynamic-environments example `url: https://$CI_ENVIRONMENT_SLUG.example.com`.
    pub(crate) fn expand(
        env: &gantry_pipeline::Environment,
        variables: &HashMap<String, String>,
    ) -> Self {
        let lookup = |n: &str| variables.get(n).cloned();
        let expand = |text: &String| expand_server(text, &lookup, Unknown::Empty);
        let name = expand(&env.name);
        let tier = env
            .deployment_tier
            .as_ref()
            .map(expand)
            .filter(|t| !t.is_empty());
        let own = [
            ("CI_ENVIRONMENT_NAME", name.clone()),
            ("CI_ENVIRONMENT_SLUG", slug(&name)),
            ("CI_ENVIRONMENT_ACTION", env.action().to_owned()),
            (
                "CI_ENVIRONMENT_TIER",
                tier.clone().unwrap_or_else(|| guess_tier(&name).to_owned()),
            ),
        ];
        let url_lookup = |n: &str| {
            own.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.clone())
                .or_else(|| variables.get(n).cloned())
        };
        JobEnvironment {
            url: env
                .url
                .as_ref()
                .map(|u| expand_server(u, &url_lookup, Unknown::Empty)),
            name,
            auto_stop_in: env
                .auto_stop_in
                .as_ref()
                .map(expand)
                .filter(|d| !d.trim().eq_ignore_ascii_case("never"))
                .and_then(|d| gantry_pipeline::duration::parse_duration(&d))
                .and_then(|secs| i64::try_from(secs).ok())
                .map(|secs| secs.saturating_mul(1000)),
            tier,
        }
    }

    /// What the store keeps for the job: its environment, found or created by name.
    /// `Err` is why GitLab cannot create it (the job then fails
    /// `environment_creation_failure`).
    ///
    /// A `deployment_tier` that names no tier once expanded is such a reason (GitLab's
    /// `Environment` validates its `tier` enum). GitLab only meets it when it creates the
    /// environment; Gantry checks it for every job, so a job naming an existing
    /// environment with a bad tier fails too instead of keeping the old tier.
    pub(crate) fn to_new(
        &self,
        env: &gantry_pipeline::Environment,
    ) -> Result<NewJobEnvironment, String> {
        check_name(&self.name)?;
        if let Some(tier) = self.tier.as_deref().filter(|t| !TIERS.contains(t)) {
            return Err(format!(
                "the deployment tier `{tier}` is not one of {}",
                TIERS.join(", ")
            ));
        }
        Ok(NewJobEnvironment {
            name: self.name.clone(),
            slug: slug(&self.name),
            action: env.action().to_owned(),
            initial_tier: self
                .tier
                .clone()
                .unwrap_or_else(|| guess_tier(&self.name).to_owned()),
            declared_tier: self.tier.clone(),
            url: self.url.clone().filter(|u| !u.is_empty()),
            auto_stop_in: self.auto_stop_in,
            on_stop: env.on_stop.clone(),
        })
    }
}

/// GitLab's rule for an environment's name: letters, digits, spaces and `- _ / $ { } .`,
/// not starting or ending with `/`, at most 255 characters.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the environment name is empty".to_owned());
    }
    if name.chars().count() > MAX_NAME_LEN {
        return Err(format!(
            "the environment name is longer than {MAX_NAME_LEN} characters"
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || " -_/${}.".contains(c);
    if !name.chars().all(allowed) || name.starts_with('/') || name.ends_with('/') {
        return Err(format!(
            "the environment name `{name}` can contain only letters, digits, '-', '_', '/', '$', '{{', '}}', '.', and spaces, but it cannot start or end with '/'"
        ));
    }
    Ok(())
}

/// The tier GitLab gives an environment whose job declares none, from words in its name
/// (`Environment#guess_tier`).
pub(crate) fn guess_tier(name: &str) -> &'static str {
    let name = name.to_ascii_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| name.contains(w));
    if any(&["dev", "review", "trunk"]) {
        "development"
    } else if any(&[
        "test", "tst", "int", "acpt", "accept", "qa", "qc", "control", "quality",
    ]) {
        "testing"
    } else if any(&["stag", "stg", "model", "modl", "pre", "demo", "non"]) {
        "staging"
    } else if any(&["prod", "prd", "live"]) {
        "production"
    } else {
        "other"
    }
}

/// The tiers an environment can have.
pub(crate) const TIERS: [&str; 5] = ["production", "staging", "testing", "development", "other"];

/// What a job's status change does to its environment: a deployment (`start`) that
/// succeeds updates it, a stop job that succeeds stops it, one that fails gives an
/// environment waiting for it back.
pub(crate) fn event_for(
    action: Option<&str>,
    from: Status,
    to: Status,
) -> Option<EnvironmentEvent> {
    if from == to {
        return None;
    }
    match (action?, to) {
        ("start", Status::Success) => Some(EnvironmentEvent::Deployed),
        ("stop", Status::Success) => Some(EnvironmentEvent::StopComplete),
        ("stop", Status::Failed) => Some(EnvironmentEvent::StopFailed),
        _ => None,
    }
}

/// `CI_ENVIRONMENT_SLUG`: lower-case letters, digits and single dashes, starting with a
/// letter, at most 24 characters; a name that had to change (or is longer) is cut to 17
/// characters and gets a 6-character suffix from the name's SHA-256, so different names
/// keep different slugs (`Stage Domain` → `stage-domain-ip33nk`).
pub(crate) fn slug(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    if !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        s.insert_str(0, "env-");
    }
    let mut squeezed = String::with_capacity(s.len());
    for c in s.chars() {
        if !(c == '-' && squeezed.ends_with('-')) {
            squeezed.push(c);
        }
    }
    if squeezed.len() > 24 || squeezed != name {
        // Only ASCII is left, so byte positions are character positions.
        squeezed.truncate(17);
        if !squeezed.ends_with('-') {
            squeezed.push('-');
        }
        squeezed.push_str(&suffix(name));
        squeezed
    } else {
        squeezed
            .strip_suffix('-')
            .map(str::to_owned)
            .unwrap_or(squeezed)
    }
}

/// The last 6 base-36 digits of the name's SHA-256 read as a number (Ruby:
/// `Digest::SHA2.hexdigest(name).to_i(16).to_s(36).last(6)`).
fn suffix(name: &str) -> String {
    const MODULUS: u64 = 36u64.pow(6);
    let digest = Sha256::digest(name.as_bytes());
    let mut rest = digest
        .iter()
        .fold(0u64, |acc, b| (acc * 256 + u64::from(*b)) % MODULUS);
    let mut digits = [b'0'; 6];
    for d in digits.iter_mut().rev() {
        let digit = u8::try_from(rest % 36).unwrap_or(0);
        *d = if digit < 10 {
            b'0' + digit
        } else {
            b'a' + digit - 10
        };
        rest /= 36;
    }
    String::from_utf8_lossy(&digits).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_gitlab() {
        // Unchanged names stay as they are.
        assert_eq!(slug("production"), "production");
        assert_eq!(slug("dev-domain"), "dev-domain");
        // A changed name gets the suffix; a long one is cut to 17 characters first.
        assert_eq!(slug("Stage Domain"), "stage-domain-ip33nk");
        assert_eq!(
            slug("stage-domain-foobar-long-string"),
            "stage-domain-foob-yafktx"
        );
        assert_eq!(slug("review/test/deploy"), "review-test-deplo-l7h4se");
        // It must start with a letter.
        assert_eq!(slug("9-staging"), "env-9-staging-cnqix1");
        assert_eq!(slug(""), "env-qhkd3p");
    }

    #[test]
    fn names_and_urls_are_expanded_with_the_jobs_variables() {
        let env = gantry_pipeline::Environment {
            name: "review/$CI_JOB_STAGE/${APP}".into(),
            url: Some("https://$APP.example.com$MISSING".into()),
            ..gantry_pipeline::Environment::default()
        };
        let vars: HashMap<String, String> = [("CI_JOB_STAGE", "test"), ("APP", "web")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(
            JobEnvironment::expand(&env, &vars),
            JobEnvironment {
                name: "review/test/web".into(),
                url: Some("https://web.example.com".into()),
                auto_stop_in: None,
                tier: None,
            }
        );
    }

    /// GitLab's dynamic-environments example: the URL reads the environment's own slug.
    #[test]
    fn the_url_sees_the_environments_own_variables() {
        let env = gantry_pipeline::Environment {
            name: "review/$CI_COMMIT_REF_SLUG".into(),
            url: Some("https://$CI_ENVIRONMENT_SLUG.example.com/$CI_ENVIRONMENT_TIER".into()),
            deployment_tier: Some("$TIER".into()),
            ..gantry_pipeline::Environment::default()
        };
        let vars: HashMap<String, String> =
            [("CI_COMMIT_REF_SLUG", "feature-x"), ("TIER", "staging")]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
        let expanded = JobEnvironment::expand(&env, &vars);
        assert_eq!(expanded.name, "review/feature-x");
        // The name had to change for its slug, which then ends with a hash of the name.
        assert_eq!(
            expanded.url.as_deref(),
            Some("https://review-feature-x-bjrazc.example.com/staging")
        );
        assert_eq!(expanded.tier.as_deref(), Some("staging"));
        assert!(expanded.to_new(&env).is_ok());
        // A tier that is none once expanded cannot create the environment.
        let mut bad = vars.clone();
        bad.insert("TIER".to_owned(), "prod".to_owned());
        let expanded = JobEnvironment::expand(&env, &bad);
        let err = expanded.to_new(&env).unwrap_err();
        assert!(err.contains("`prod` is not one of"), "{err}");
    }

    #[test]
    fn auto_stop_in_is_expanded_and_read_as_a_duration() {
        let vars: HashMap<String, String> = [("DAYS".to_owned(), "2 days".to_owned())].into();
        let with = |text: &str| {
            let env = gantry_pipeline::Environment {
                name: "review".into(),
                auto_stop_in: Some(text.into()),
                ..gantry_pipeline::Environment::default()
            };
            JobEnvironment::expand(&env, &vars).auto_stop_in
        };
        assert_eq!(with("1 hour"), Some(3_600_000));
        assert_eq!(with("$DAYS"), Some(172_800_000));
        assert_eq!(with("never"), None);
        assert_eq!(with("soon"), None);
    }

    #[test]
    fn names_are_checked_as_gitlab_checks_them() {
        assert!(check_name("review/feature-1 ${X}.v2").is_ok());
        for bad in ["", "/review", "review/", "a|b", "ümlaut"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"a".repeat(255)).is_ok());
        assert!(check_name(&"a".repeat(256)).is_err());
    }

    #[test]
    fn tiers_are_guessed_from_names() {
        for (name, tier) in [
            ("production", "production"),
            ("Live", "production"),
            ("staging", "staging"),
            ("pre-prod", "staging"),
            ("review/feature", "development"),
            ("dev", "development"),
            ("test", "testing"),
            ("QA", "testing"),
            ("sandbox", "other"),
        ] {
            assert_eq!(guess_tier(name), tier, "{name}");
        }
    }

    #[test]
    fn job_ends_move_environments() {
        use EnvironmentEvent::*;
        let ev = |a, from, to| event_for(Some(a), from, to);
        assert_eq!(
            ev("start", Status::Running, Status::Success),
            Some(Deployed)
        );
        assert_eq!(ev("start", Status::Success, Status::Success), None);
        assert_eq!(ev("start", Status::Running, Status::Failed), None);
        assert_eq!(
            ev("stop", Status::Running, Status::Success),
            Some(StopComplete)
        );
        assert_eq!(
            ev("stop", Status::Running, Status::Failed),
            Some(StopFailed)
        );
        assert_eq!(ev("prepare", Status::Running, Status::Success), None);
        assert_eq!(event_for(None, Status::Running, Status::Success), None);
    }
}
