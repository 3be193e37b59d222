//! `artifacts` and `artifacts:reports` — GitLab `Entry::Artifacts`, `Entry::Reports`,
//! `Reports::CoverageReport`. `paths: []` is accepted (GitLab does; the editor schema
//! does not).

use indexmap::IndexMap;

use crate::duration::parse_expire_in;
use crate::model::{Artifacts, ArtifactsWhen, CoverageReport};
use crate::validate::{Cx, join};
use crate::yaml::{Map, Node, Value};

use super::cache::when_of;
use super::common::{opt_bool, opt_string, string_or_strings};

const ARTIFACTS_KEYS: &[&str] = &[
    "name",
    "untracked",
    "paths",
    "reports",
    "when",
    "expire_in",
    "expose_as",
    "exclude",
    "public",
    "access",
];
pub(crate) const ACCESS_LEVELS: &[&str] = &["none", "developer", "maintainer", "all"];

/// Report types whose value is a path or a list of paths.
pub(crate) const REPORT_TYPES: &[&str] = &[
    "junit",
    "codequality",
    "sast",
    "secret_detection",
    "dependency_scanning",
    "container_scanning",
    "dast",
    "performance",
    "browser_performance",
    "load_performance",
    "license_scanning",
    "metrics",
    "lsif",
    "dotenv",
    "terraform",
    "accessibility",
    "coverage_fuzzing",
    "api_fuzzing",
    "cluster_image_scanning",
    "requirements",
    "requirements_v2",
    "cyclonedx",
    "annotations",
    // Accepted by GitLab's editor schema (older or EE report types).
    "license_management",
    "sarif",
    "repository_xray",
];

/// `expose_as` limits (`EXPOSE_AS_REGEX = /\A\w[-\w ]*\z/`, ≤ 100 characters).
const EXPOSE_AS_MAX: usize = 100;

pub(crate) fn artifacts(node: &Node, path: &str, cx: &mut Cx) -> Option<Artifacts> {
    let map = cx.map(node, path)?;
    let mut ok = cx.unknown_keys(map, ARTIFACTS_KEYS, path, node.pos);

    let present: Vec<&str> = map
        .keys()
        .filter(|k| matches!(*k, "access" | "public"))
        .collect();
    if present.len() > 1 {
        cx.config(
            path,
            format!("these keys cannot be used together: {}", present.join(", ")),
            node.pos,
        );
        ok = false;
    }

    let name = opt_string(map, "name", path, cx).unwrap_or_else(|()| {
        ok = false;
        None
    });
    let public = opt_bool(map, "public", path, cx).unwrap_or_else(|()| {
        ok = false;
        None
    });
    let untracked = opt_bool(map, "untracked", path, cx).unwrap_or_else(|()| {
        ok = false;
        None
    });

    let mut strings = |key: &str, cx: &mut Cx| -> Vec<String> {
        match map.get(key).filter(|n| !n.is_null()) {
            None => Vec::new(),
            Some(n) => crate::validate::string_array(n).unwrap_or_else(|| {
                cx.attr(path, key, "should be an array of strings", n.pos);
                ok = false;
                Vec::new()
            }),
        }
    };
    let paths = strings("paths", cx);
    let exclude = strings("exclude", cx);

    let expose_as = match expose_as(map, path, &paths, cx) {
        Ok(v) => v,
        Err(()) => {
            ok = false;
            None
        }
    };

    let when = match map.get("when").filter(|n| !n.is_null()) {
        None => Some(ArtifactsWhen::OnSuccess),
        Some(w) => when_of(w, path, cx),
    };
    ok &= when.is_some();

    let mut expire_in = None;
    if let Some(e) = map.get("expire_in").filter(|n| !n.is_null()) {
        match e.as_str().filter(|s| parse_expire_in(s).is_some()) {
            Some(s) => expire_in = Some(s.to_owned()),
            None => {
                cx.attr(path, "expire_in", "should be a duration", e.pos);
                ok = false;
            }
        }
    }

    let mut access = None;
    if let Some(a) = map.get("access").filter(|n| !n.is_null()) {
        match a.as_str() {
            Some(s) if ACCESS_LEVELS.contains(&s) => access = Some(s.to_owned()),
            other => {
                if other.is_none() {
                    cx.attr(path, "access", "should be a string", a.pos);
                }
                cx.attr(
                    path,
                    "access",
                    format!("should be one of: {}", ACCESS_LEVELS.join(", ")),
                    a.pos,
                );
                ok = false;
            }
        }
    }
    if access.is_none() && public == Some(false) {
        access = Some("developer".to_owned());
    }

    let mut reports_out = IndexMap::new();
    let mut coverage_report = None;
    if let Some(r) = map.get("reports").filter(|n| !n.is_null()) {
        match reports(r, &join(path, "reports"), cx) {
            Some((rep, cov)) => {
                reports_out = rep;
                coverage_report = cov;
            }
            None => ok = false,
        }
    }

    if !ok {
        return None;
    }
    Some(Artifacts {
        name,
        paths,
        exclude,
        untracked: untracked.unwrap_or(false),
        when: when?,
        expire_in,
        expose_as,
        access,
        reports: reports_out,
        coverage_report,
    })
}

/// `expose_as`: checked only when present; then `paths` is required and may not hold `*`.
fn expose_as(map: &Map, path: &str, paths: &[String], cx: &mut Cx) -> Result<Option<String>, ()> {
    let Some(e) = map.get("expose_as").filter(|n| !n.is_null()) else {
        return Ok(None);
    };
    let mut ok = true;
    let paths_node = map.get("paths");
    if paths_node.is_none_or(Node::is_blank) {
        cx.attr(
            path,
            "paths",
            "can't be blank",
            paths_node.map_or(e.pos, |n| n.pos),
        );
        ok = false;
    } else if paths.iter().any(|p| p.contains('*')) {
        cx.attr(
            path,
            "paths",
            "can't contain '*' when used with 'expose_as'",
            paths_node.map_or(e.pos, |n| n.pos),
        );
        ok = false;
    }
    let Some(s) = e.as_str() else {
        cx.attr(path, "expose_as", "should be a string", e.pos);
        return Err(());
    };
    if s.chars().count() > EXPOSE_AS_MAX {
        cx.attr(
            path,
            "expose_as",
            format!("is too long (maximum is {EXPOSE_AS_MAX} characters)"),
            e.pos,
        );
        ok = false;
    }
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut chars = s.chars();
    let valid = chars.next().is_some_and(word) && chars.all(|c| word(c) || c == '-' || c == ' ');
    if !valid {
        cx.attr(
            path,
            "expose_as",
            "can contain only letters, digits, '-', '_' and spaces",
            e.pos,
        );
        ok = false;
    }
    if ok { Ok(Some(s.to_owned())) } else { Err(()) }
}

type Reports = (IndexMap<String, Vec<String>>, Option<CoverageReport>);

fn reports(node: &Node, path: &str, cx: &mut Cx) -> Option<Reports> {
    let map = cx.map(node, path)?;
    let mut allowed: Vec<&str> = REPORT_TYPES.to_vec();
    allowed.push("coverage_report");
    let mut ok = cx.unknown_keys(map, &allowed, path, node.pos);
    let mut out = IndexMap::new();
    let mut coverage = None;
    for (key, value) in map.iter() {
        if value.is_null() {
            continue;
        }
        if key == "coverage_report" {
            match coverage_report(value, &join(path, key), cx) {
                Some(c) => coverage = Some(c),
                None => ok = false,
            }
        } else if REPORT_TYPES.contains(&key) {
            match string_or_strings(value) {
                Some(v) => {
                    out.insert(key.to_owned(), v);
                }
                None => {
                    cx.attr(
                        path,
                        key,
                        "should be an array of strings or a string",
                        value.pos,
                    );
                    ok = false;
                }
            }
        }
    }
    ok.then_some((out, coverage))
}

fn coverage_report(node: &Node, path: &str, cx: &mut Cx) -> Option<CoverageReport> {
    let map = cx.map(node, path)?;
    let mut ok = cx.unknown_keys(map, &["coverage_format", "path"], path, node.pos);
    let format = map.get("coverage_format");
    let format_value = match format.map(|n| &n.value) {
        Some(Value::Str(s)) if matches!(s.as_str(), "cobertura" | "jacoco") => Some(s.clone()),
        _ => {
            if !super::common::present(format) {
                cx.attr(
                    path,
                    "coverage_format",
                    "can't be blank",
                    format.map_or(node.pos, |n| n.pos),
                );
            }
            cx.attr(
                path,
                "coverage_format",
                "must be one of supported formats: cobertura, jacoco.",
                format.map_or(node.pos, |n| n.pos),
            );
            ok = false;
            None
        }
    };
    let report_path = super::common::required_string(map, "path", path, node.pos, cx);
    ok &= report_path.is_some();
    if !ok {
        return None;
    }
    Some(CoverageReport {
        coverage_format: format_value?,
        path: report_path?,
    })
}
