//! `cache:policy`, possibly given as a `$VARIABLE`.

use gantry_protocol::CachePolicy;

use crate::artifacts::{Lookup, expand};

/// Expands `raw` (e.g. `$CACHE_POLICY`) and parses it; empty means `pull-push`.
/// Returns the expanded text when it is not a policy (expansion is single pass, so a
/// value that still holds a `$` reference is not one either). Never returns
/// [`CachePolicy::Variable`].
pub fn resolve_policy(raw: &str, lookup: Lookup<'_>) -> Result<CachePolicy, String> {
    let expanded = expand(raw, lookup);
    match expanded.parse::<CachePolicy>() {
        Ok(CachePolicy::Variable(_)) | Err(_) => Err(expanded),
        Ok(policy) => Ok(policy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies() {
        let lookup = |name: &str| (name == "POLICY").then(|| "pull".to_owned());
        assert_eq!(resolve_policy("push", &lookup), Ok(CachePolicy::Push));
        assert_eq!(resolve_policy("", &lookup), Ok(CachePolicy::PullPush));
        assert_eq!(resolve_policy("$POLICY", &lookup), Ok(CachePolicy::Pull));
        assert_eq!(resolve_policy("${POLICY}", &lookup), Ok(CachePolicy::Pull));
        assert_eq!(resolve_policy("$OTHER", &lookup), Ok(CachePolicy::PullPush));
        assert_eq!(resolve_policy("pul", &lookup), Err("pul".to_owned()));
        let nested = |name: &str| (name == "POLICY").then(|| "$OTHER".to_owned());
        assert_eq!(resolve_policy("$POLICY", &nested), Err("$OTHER".to_owned()));
    }
}
