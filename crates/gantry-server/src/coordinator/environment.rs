//! A job's `environment:` as GitLab persists it at pipeline creation: the name and URL
//! expanded with the job's variables (`Ci::Build#expanded_environment_name`), and the
//! environment slug (`Gitlab::Slug::Environment`).

use std::collections::HashMap;

use gantry_pipeline::expand::{Unknown, expand_server};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::spec::EnvironmentModel;

/// The environment of one job, expanded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEnvironment {
    pub name: String,
    pub url: Option<String>,
}

impl JobEnvironment {
    /// `env`'s name and URL with `$VAR` references replaced from `variables` (already
    /// expanded values; unknown references become empty, as GitLab's `ExpandVariables`).
    pub(crate) fn expand(env: &EnvironmentModel, variables: &HashMap<String, String>) -> Self {
        let lookup = |n: &str| variables.get(n).cloned();
        JobEnvironment {
            name: expand_server(&env.name, &lookup, Unknown::Empty),
            url: env
                .url
                .as_ref()
                .map(|u| expand_server(u, &lookup, Unknown::Empty)),
        }
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
        let env = EnvironmentModel {
            name: "review/$CI_JOB_STAGE/${APP}".into(),
            url: Some("https://$APP.example.com$MISSING".into()),
            ..EnvironmentModel::default()
        };
        let vars: HashMap<String, String> = [("CI_JOB_STAGE", "test"), ("APP", "web")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(
            JobEnvironment::expand(&env, &vars),
            JobEnvironment {
                name: "review/test/web".into(),
                url: Some("https://web.example.com".into())
            }
        );
    }
}
