//! Keyword validator tests: exact GitLab messages for representative cases, the GitLab
//! schema fixtures for these keywords (inline copies of the relevant cases), and — when
//! the conformance corpus is present — a sweep over every fixture file.

use crate::model::{ArtifactsWhen, CacheKey};
use crate::validate::Cx;
use crate::yaml::{FileId, Limits, Node, parse_documents};

use super::*;

fn doc(text: &str) -> Node {
    let mut docs = parse_documents(text, FileId(0), Limits::default()).expect("test YAML parses");
    docs.remove(0)
}

/// The node at `job -> key` of a one-document YAML text.
fn node(text: &str, job: &str, key: &str) -> Node {
    let d = doc(text);
    d.as_map()
        .and_then(|m| m.get(job))
        .and_then(Node::as_map)
        .and_then(|m| m.get(key))
        .cloned()
        .expect("job key present")
}

fn messages(cx: &Cx) -> Vec<String> {
    cx.errors.iter().map(|d| d.message.clone()).collect()
}

/// Run the validator that owns `key` (the sweep's dispatcher). `None` when `key` is not a
/// keyword of this module.
fn validate(key: &str, n: &Node, path: &str, global: bool, cx: &mut Cx) -> Option<bool> {
    Some(match key {
        "artifacts" => artifacts(n, path, cx).is_some(),
        "cache" => caches(n, path, cx).is_some(),
        "image" => image(n, path, cx).is_some(),
        "services" => services(n, path, cx).is_some(),
        "environment" => environment(n, path, cx).is_some(),
        "retry" => retry(n, path, cx).is_some(),
        "variables" => {
            let level = if global {
                VarLevel::Global
            } else {
                VarLevel::Job
            };
            variables(n, path, level, cx).is_some()
        }
        "parallel" => parallel(n, path, cx).is_some(),
        "trigger" => trigger(n, path, cx).is_some(),
        "inherit" => inherit(n, path, cx).is_some(),
        "allow_failure" => allow_failure(n, path, cx).is_some(),
        "timeout" => timeout(n, path, cx).is_some(),
        "tags" => tags(n, path, cx).is_some(),
        "hooks" => hooks(n, path, cx).is_some(),
        "id_tokens" => id_tokens(n, path, cx).is_some(),
        "secrets" => secrets(n, path, cx).is_some(),
        "release" => release(n, path, cx).is_some(),
        "pages" => pages(n, path, cx).is_some(),
        "coverage" => coverage(n, path, cx).is_some(),
        "resource_group" => resource_group(n, path, cx).is_some(),
        "interruptible" => interruptible(n, path, cx).is_some(),
        "dast_configuration" => dast_configuration(n, path, cx).is_some(),
        "identity" => identity(n, path, cx).is_some(),
        "run" => run_steps(n, path, cx).is_some(),
        _ => return None,
    })
}

/// Validate one top-level case of a fixture the way the compiler would: global
/// `variables`/`image`/`services`/`cache`, `default:` keys, or a job's keys. Null values are
/// skipped (the caller treats them as unspecified). Returns whether everything passed,
/// with the messages.
fn check_case(name: &str, value: &Node) -> (bool, Vec<String>) {
    let mut cx = Cx::default();
    let mut ok = true;
    match name {
        "variables" | "image" | "services" | "cache" if !value.is_null() => {
            ok &= validate(name, value, name, true, &mut cx).unwrap_or(true);
        }
        _ => {
            if let Some(map) = value.as_map() {
                let base = if name == "default" {
                    "default".to_owned()
                } else {
                    format!("jobs:{name}")
                };
                for (key, v) in map.iter() {
                    if v.is_null() {
                        continue;
                    }
                    let path = format!("{base}:{key}");
                    ok &= validate(key, v, &path, false, &mut cx).unwrap_or(true);
                }
            }
        }
    }
    if ok {
        assert!(
            cx.errors.is_empty(),
            "{name}: accepted with errors {:?}",
            messages(&cx)
        );
    } else {
        assert!(!cx.errors.is_empty(), "{name}: rejected without an error");
    }
    (ok, messages(&cx))
}

fn accepts(text: &str) {
    let d = doc(text);
    for (name, value) in d.as_map().expect("mapping").iter() {
        let (ok, msgs) = check_case(name, value);
        assert!(ok, "case `{name}` should be accepted, got {msgs:?}");
    }
}

fn rejects(text: &str) {
    let d = doc(text);
    for (name, value) in d.as_map().expect("mapping").iter() {
        let (ok, _) = check_case(name, value);
        assert!(!ok, "case `{name}` should be rejected");
    }
}

// ---------------------------------------------------------------------------------------
// Exact messages

#[test]
fn artifacts_messages() {
    let mut cx = Cx::default();
    let n = node(
        "j:\n  artifacts:\n    public: true\n    access: all\n    when: later\n    expire_in: 42\n    foo: 1\n",
        "j",
        "artifacts",
    );
    assert!(artifacts(&n, "jobs:j:artifacts", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "jobs:j:artifacts config contains unknown keys: foo",
            "jobs:j:artifacts config these keys cannot be used together: public, access",
            "jobs:j:artifacts when should be one of: on_success, on_failure, always",
            "jobs:j:artifacts expire in should be a duration",
        ]
    );
    let mut cx = Cx::default();
    let n = node("j:\n  artifacts: [a]\n", "j", "artifacts");
    assert!(artifacts(&n, "jobs:j:artifacts", &mut cx).is_none());
    assert_eq!(messages(&cx), ["jobs:j:artifacts config should be a hash"]);
}

#[test]
fn artifacts_values() {
    let mut cx = Cx::default();
    let n = node(
        "j:\n  artifacts:\n    paths: []\n    public: false\n    expire_in: 1 week\n    when: always\n    reports:\n      junit: a.xml\n      dotenv: [a.env, b.env]\n      coverage_report: {coverage_format: cobertura, path: c.xml}\n",
        "j",
        "artifacts",
    );
    let a = artifacts(&n, "jobs:j:artifacts", &mut cx).expect("valid");
    assert!(cx.errors.is_empty());
    assert!(a.paths.is_empty());
    assert_eq!(a.access.as_deref(), Some("developer"));
    assert_eq!(a.when, ArtifactsWhen::Always);
    assert_eq!(a.expire_in.as_deref(), Some("1 week"));
    assert_eq!(a.reports.get("junit"), Some(&vec!["a.xml".to_owned()]));
    assert_eq!(a.reports.get("dotenv").map(Vec::len), Some(2));
    assert_eq!(
        a.coverage_report.map(|c| c.coverage_format),
        Some("cobertura".to_owned())
    );
}

#[test]
fn artifacts_expose_as() {
    let mut cx = Cx::default();
    let n = node(
        "j:\n  artifacts:\n    expose_as: 'bad!'\n",
        "j",
        "artifacts",
    );
    assert!(artifacts(&n, "jobs:j:artifacts", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "jobs:j:artifacts paths can't be blank",
            "jobs:j:artifacts expose as can contain only letters, digits, '-', '_' and spaces",
        ]
    );
    let mut cx = Cx::default();
    let n = node(
        "j:\n  artifacts:\n    expose_as: Coverage report\n    paths: [a/*.html]\n",
        "j",
        "artifacts",
    );
    assert!(artifacts(&n, "jobs:j:artifacts", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        ["jobs:j:artifacts paths can't contain '*' when used with 'expose_as'"]
    );
}

#[test]
fn cache_messages() {
    let mut cx = Cx::default();
    let n = node(
        "j:\n  cache: [{key: ., policy: nope, when: never}, {key: a%2Fb, fallback_keys: [a, b, c, d, e, f]}]\n",
        "j",
        "cache",
    );
    assert!(caches(&n, "jobs:j:cache", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            r#"jobs:j:cache:cache:key config cannot be "." or "..""#,
            "jobs:j:cache:cache policy should be a variable or one of: pull-push, push, pull",
            "jobs:j:cache:cache when should be one of: on_success, on_failure, always",
            r#"jobs:j:cache:cache:key config cannot contain the "/" character"#,
            "jobs:j:cache:cache fallback keys has to many entries (maximum 5)",
        ]
    );
    let mut cx = Cx::default();
    let n = node("j:\n  cache: [{}, {}, {}, {}, {}]\n", "j", "cache");
    assert!(caches(&n, "jobs:j:cache", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        ["jobs:j:cache config no more than 4 caches can be created"]
    );
    let mut cx = Cx::default();
    let n = node("j:\n  cache: nope\n", "j", "cache");
    assert!(caches(&n, "jobs:j:cache", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        ["jobs:j:cache config can only be a hash or an array"]
    );
    let mut cx = Cx::default();
    let n = node(
        "j:\n  cache: {key: {files: [a, b], files_commits: [x]}}\n",
        "j",
        "cache",
    );
    assert!(caches(&n, "jobs:j:cache", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        ["jobs:j:cache:cache:key config these keys cannot be used together: files, files_commits"]
    );
    // GitLab's default limit (without `increase_ci_cache_key_files_limit`).
    let mut cx = Cx::default();
    let n = node("j:\n  cache: {key: {files: [a, b, c]}}\n", "j", "cache");
    assert!(caches(&n, "jobs:j:cache", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        ["jobs:j:cache:cache:key:files config has too many items (maximum is 2)"]
    );
}

#[test]
fn cache_values() {
    let mut cx = Cx::default();
    let n = node(
        "j:\n  cache:\n    key: {files: [/Gemfile.lock], prefix: $CI_JOB_NAME}\n    paths: [vendor]\n    policy: $POLICY\n    untracked: true\n",
        "j",
        "cache",
    );
    let c = caches(&n, "jobs:j:cache", &mut cx).expect("valid");
    assert_eq!(c.len(), 1);
    let c = &c[0];
    assert_eq!(
        c.key,
        CacheKey::Files {
            files: vec!["Gemfile.lock".into()],
            prefix: Some("$CI_JOB_NAME".into())
        }
    );
    assert_eq!(c.policy, "$POLICY");
    assert!(c.untracked && !c.unprotect);
    assert_eq!(c.when, ArtifactsWhen::OnSuccess);
    let mut cx = Cx::default();
    let n = node("j:\n  cache: {paths: [a]}\n", "j", "cache");
    let c = caches(&n, "jobs:j:cache", &mut cx).expect("valid");
    assert_eq!(c[0].key, CacheKey::Literal("default".into()));
    assert_eq!(c[0].policy, "pull-push");
}

#[test]
fn nested_arrays_are_flattened() {
    // An alias of a list used as an item (`cache: [*list]`), as GitLab's `[@config].flatten`.
    let text = "a: &c\n  - {key: k, paths: [p]}\ns: &s\n  - redis\nj:\n  cache: [*c, {paths: [q]}]\n  services: [*s, postgres]\n";
    let mut cx = Cx::default();
    assert_eq!(
        caches(&node(text, "j", "cache"), "jobs:j:cache", &mut cx).map(|c| c.len()),
        Some(2)
    );
    assert_eq!(
        services(&node(text, "j", "services"), "jobs:j:services", &mut cx).map(|s| s.len()),
        Some(2)
    );
    assert!(cx.errors.is_empty());
}

#[test]
fn image_and_services() {
    let mut cx = Cx::default();
    let n = node(
        "j:\n  image:\n    name: alpine\n    entrypoint: ['']\n    docker: {platform: linux/arm64, user: dave}\n    pull_policy: [always, if-not-present]\n",
        "j",
        "image",
    );
    let i = image(&n, "jobs:j:image", &mut cx).expect("valid");
    assert_eq!(i.name, "alpine");
    assert_eq!(i.docker_user.as_deref(), Some("dave"));
    assert_eq!(i.docker_platform.as_deref(), Some("linux/arm64"));
    assert_eq!(i.pull_policy, ["always", "if-not-present"]);

    let mut cx = Cx::default();
    let n = node(
        "j:\n  image:\n    entrypoint: /bin/sh\n    docker: {user: '', os: x}\n    pull_policy: []\n    ports: [80]\n",
        "j",
        "image",
    );
    assert!(image(&n, "jobs:j:image", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "jobs:j:image config contains disallowed keys: ports",
            "jobs:j:image name should be a string",
            "jobs:j:image name can't be blank",
            "jobs:j:image entrypoint should be an array of strings",
            "jobs:j:image executor opts property '/docker/user' is invalid: error_type=minlength",
            "jobs:j:image executor opts property '/docker/os' is invalid: error_type=schema",
            "jobs:j:image:pull_policy config can't be blank",
        ]
    );

    let mut cx = Cx::default();
    let n = node(
        "j:\n  services:\n    - postgres:15\n    - name: redis\n      alias: cache\n      command: [redis-server]\n      variables: {A: 1}\n",
        "j",
        "services",
    );
    let s = services(&n, "jobs:j:services", &mut cx).expect("valid");
    assert_eq!(s.len(), 2);
    assert_eq!(s[1].alias.as_deref(), Some("cache"));
    assert_eq!(s[1].variables.get("A").map(|v| v.value.as_str()), Some("1"));

    let mut cx = Cx::default();
    let n = node(
        "j:\n  services:\n    - ''\n    - {name: x, alias: [a], variables: {A: {value: b}}}\n",
        "j",
        "services",
    );
    assert!(services(&n, "jobs:j:services", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "jobs:j:services:service name can't be blank",
            "jobs:j:services:service alias should be a string",
            "jobs:j:services:service:variables:a config must be a string",
        ]
    );
}

#[test]
fn environment_messages() {
    let mut cx = Cx::default();
    let n = node(
        "j:\n  environment: {name: /prod, action: go, deployment_tier: live, auto_stop_in: forever}\n",
        "j",
        "environment",
    );
    assert!(environment(&n, "jobs:j:environment", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "jobs:j:environment name can contain only letters, digits, '-', '_', '/', '$', '{', '}', '.', and spaces, but it cannot start or end with '/'",
            "jobs:j:environment action should be start, stop, prepare, verify, or access",
            "jobs:j:environment auto stop in should be a duration",
        ]
    );
    let mut cx = Cx::default();
    let n = node(
        "j:\n  environment: {url: 'https://x'}\n",
        "j",
        "environment",
    );
    assert!(environment(&n, "jobs:j:environment", &mut cx).is_none());
    assert_eq!(messages(&cx)[0], "jobs:j:environment name can't be blank");

    let mut cx = Cx::default();
    let n = node(
        "j:\n  environment: {name: review/$CI_COMMIT_REF_SLUG, auto_stop_in: $TTL, action: stop}\n",
        "j",
        "environment",
    );
    let e = environment(&n, "jobs:j:environment", &mut cx).expect("valid");
    assert_eq!(e.action, "stop");
    assert_eq!(e.auto_stop_in.as_deref(), Some("$TTL"));
    let n = node("j:\n  environment: production\n", "j", "environment");
    assert_eq!(
        environment(&n, "jobs:j:environment", &mut cx).map(|e| e.action),
        Some("start".to_owned())
    );
}

#[test]
fn retry_locations() {
    let cases: &[(&str, &[&str])] = &[
        ("3", &["retry config must be less than or equal to 2"]),
        ("-1", &["retry config must be greater than or equal to 0"]),
        (
            "'2'",
            &["retry config has to be either an integer or a hash"],
        ),
        (
            "{max: 2.5, when: nope, exit_codes: '1', x: 1}",
            &[
                "retry config contains unknown keys: x",
                "retry max must be an integer",
                "retry when is not included in the list",
                "retry exit codes should be an array of integers or an integer",
            ],
        ),
        (
            "{when: [api_failure, nope, zap]}",
            &["retry when contains unknown values: nope, zap"],
        ),
    ];
    for (value, expected) in cases {
        let mut cx = Cx::default();
        let n = node(&format!("j:\n  retry: {value}\n"), "j", "retry");
        assert!(retry(&n, "jobs:j:retry", &mut cx).is_none(), "{value}");
        assert_eq!(&messages(&cx), expected, "{value}");
    }
    let mut cx = Cx::default();
    let n = node(
        "j:\n  retry: {max: 1, when: script_failure, exit_codes: [137, 255]}\n",
        "j",
        "retry",
    );
    let r = retry(&n, "jobs:j:retry", &mut cx).expect("valid");
    assert_eq!(
        (r.max, r.when, r.exit_codes),
        (1, vec!["script_failure".to_owned()], vec![137, 255])
    );
}

#[test]
fn variables_levels() {
    let text = "variables:\n  A: 012\n  B: on\n  C: 1.10\n  D: {value: 0, description: x}\n  123: n\n  E: ~\n  F: {value: b, options: [a, b], expand: false}\n";
    let d = doc(text);
    let n = d
        .as_map()
        .and_then(|m| m.get("variables"))
        .cloned()
        .expect("variables");
    let mut cx = Cx::default();
    let v = variables(&n, "variables", VarLevel::Global, &mut cx).expect("valid");
    let get = |k: &str| v.get(k).map(|x| x.value.clone());
    assert_eq!(get("A").as_deref(), Some("10"));
    assert_eq!(get("B").as_deref(), Some("true"));
    assert_eq!(get("C").as_deref(), Some("1.1"));
    assert_eq!(get("D").as_deref(), Some("0"));
    assert_eq!(
        v.get("D").and_then(|x| x.description.clone()).as_deref(),
        Some("x")
    );
    assert_eq!(get("123").as_deref(), Some("n"));
    assert_eq!(get("E").as_deref(), Some(""));
    assert_eq!(
        v.get("F").map(|x| (x.expand, x.options.len())),
        Some((false, 2))
    );

    let mut cx = Cx::default();
    assert!(variables(&n, "jobs:j:variables", VarLevel::Job, &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "jobs:j:variables:d config uses invalid data keys: description",
            "jobs:j:variables:f config uses invalid data keys: options",
        ]
    );

    let mut cx = Cx::default();
    let n = node(
        "j:\n  variables:\n    true: x\n    L: [a]\n    M: {value: [a], expand: 1, options: [a]}\n",
        "j",
        "variables",
    );
    assert!(variables(&n, "jobs:j:variables", VarLevel::Global, &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "jobs:j:variables:true key must be an alphanumeric string",
            "variable definition must be either a string or a hash",
            "jobs:j:variables:m config value must be a scalar",
            "jobs:j:variables:m config expand should be a boolean value",
            "jobs:j:variables:m config value must be present in options",
        ]
    );

    let mut cx = Cx::default();
    let n = node("j:\n  variables: {A: {value: x}, B: ~}\n", "j", "variables");
    assert!(variables(&n, "rules:rule:variables", VarLevel::Rule, &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "rules:rule:variables:a config must be a string",
            "rules:rule:variables:b config must be a string"
        ]
    );
}

#[test]
fn parallel_forms() {
    let mut cx = Cx::default();
    let n = node("j:\n  parallel: 5\n", "j", "parallel");
    assert_eq!(
        parallel(&n, "jobs:j:parallel", &mut cx),
        Some(Parallel::Count(5))
    );
    let n = node(
        "j:\n  parallel: {matrix: [{A: [x, 1], B: y}, {A: z}]}\n",
        "j",
        "parallel",
    );
    let parsed = parallel(&n, "jobs:j:parallel", &mut cx);
    assert!(
        matches!(parsed, Some(Parallel::Matrix(_))),
        "matrix expected, got {parsed:?}"
    );
    let Some(Parallel::Matrix(m)) = parsed else {
        return;
    };
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].get("A"), Some(&vec!["x".to_owned(), "1".to_owned()]));
    assert_eq!(m[0].get("B"), Some(&vec!["y".to_owned()]));
    assert!(cx.errors.is_empty());

    let cases: &[(&str, &[&str])] = &[
        (
            "0",
            &["jobs:j:parallel config must be greater than or equal to 1"],
        ),
        (
            "201",
            &["jobs:j:parallel config must be less than or equal to 200"],
        ),
        ("1.5", &["jobs:j:parallel config must be an integer"]),
        ("'5'", &["jobs:j:parallel should be an integer or a hash"]),
        (
            "{matrix: x}",
            &["jobs:j:parallel:matrix config should be an array of hashes"],
        ),
        (
            "{foo: 1}",
            &[
                "jobs:j:parallel config contains unknown keys: foo",
                "jobs:j:parallel config missing required keys: matrix",
            ],
        ),
        (
            "{matrix: [{}]}",
            &["jobs:j:parallel:matrix:variables config requires at least 1 items"],
        ),
        (
            "{matrix: [{A: [[a]]}]}",
            &[
                "jobs:j:parallel:matrix:variables config should be a hash of key value pairs, value can be an array",
            ],
        ),
        (
            "{matrix: [{A: ''}]}",
            &[
                "jobs:j:parallel:matrix:variables config should be a hash of key value pairs, value can be an array",
            ],
        ),
        (
            "{matrix: [{A: 1.5}]}",
            &[
                "jobs:j:parallel:matrix:variables config should be a hash of key value pairs, value can be an array",
            ],
        ),
    ];
    for (value, expected) in cases {
        let mut cx = Cx::default();
        let n = node(&format!("j:\n  parallel: {value}\n"), "j", "parallel");
        assert!(
            parallel(&n, "jobs:j:parallel", &mut cx).is_none(),
            "{value}"
        );
        assert_eq!(&messages(&cx), expected, "{value}");
    }

    // 15 * 14 = 210 permutations.
    let a: Vec<String> = (0..15).map(|i| i.to_string()).collect();
    let b: Vec<String> = (0..14).map(|i| i.to_string()).collect();
    let text = format!(
        "j:\n  parallel: {{matrix: [{{A: [{}], B: [{}]}}]}}\n",
        a.join(", "),
        b.join(", ")
    );
    let mut cx = Cx::default();
    assert!(parallel(&node(&text, "j", "parallel"), "jobs:j:parallel", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        ["jobs:j:parallel:matrix config generates too many jobs (maximum is 200)"]
    );
}

#[test]
fn trigger_forms() {
    let mut cx = Cx::default();
    let t = trigger(
        &node("j:\n  trigger: group/project\n", "j", "trigger"),
        "jobs:j:trigger",
        &mut cx,
    )
    .expect("valid");
    assert_eq!(t.project.as_deref(), Some("group/project"));
    assert!(t.forward_yaml_variables && !t.forward_pipeline_variables);

    let text = "j:\n  trigger:\n    include: [{local: a.yml}, {project: g/p, file: b.yml}, {artifact: c.yml, job: gen}]\n    strategy: depend\n    forward: {pipeline_variables: true}\n";
    let t = trigger(&node(text, "j", "trigger"), "jobs:j:trigger", &mut cx).expect("valid");
    assert_eq!(t.include.len(), 3);
    assert_eq!(t.strategy.as_deref(), Some("depend"));
    assert!(t.forward_pipeline_variables);
    assert!(cx.errors.is_empty());

    let cases: &[(&str, &[&str])] = &[
        ("''", &["jobs:j:trigger config can't be blank"]),
        (
            "[a]",
            &["jobs:j:trigger has to be either a string or a hash"],
        ),
        (
            "{project: '', strategy: x}",
            &[
                "jobs:j:trigger project can't be blank",
                "jobs:j:trigger strategy should be depend or mirror",
            ],
        ),
        (
            "{include: [a.yml, b.yml, c.yml, d.yml]}",
            &["jobs:j:trigger:include config is too long (maximum is 3)"],
        ),
        (
            "{include: [{project: g/p}]}",
            &[
                "jobs:j:trigger:include:include config must specify the file where to fetch the config from",
            ],
        ),
        (
            "{include: [{artifact: x.yml}]}",
            &[
                "jobs:j:trigger:include:include config must specify the job where to fetch the artifact from",
            ],
        ),
        (
            "{include: [{inputs: {a: 1}}]}",
            &[
                "`{\"inputs\":{\"a\":1}}` does not have a valid subkey for include. Valid subkeys are: `local`, `project`, `remote`, `template`, `artifact`, `component`",
            ],
        ),
        (
            "{project: g/p, forward: {yaml_variables: 1}}",
            &["jobs:j:trigger:forward yaml variables should be a boolean value"],
        ),
    ];
    for (value, expected) in cases {
        let mut cx = Cx::default();
        let n = node(&format!("j:\n  trigger: {value}\n"), "j", "trigger");
        assert!(trigger(&n, "jobs:j:trigger", &mut cx).is_none(), "{value}");
        assert_eq!(&messages(&cx), expected, "{value}");
    }
}

#[test]
fn inherit_forms() {
    let mut cx = Cx::default();
    let n = node(
        "j:\n  inherit: {default: [image, tags], variables: false}\n",
        "j",
        "inherit",
    );
    let i = inherit(&n, "jobs:j:inherit", &mut cx).expect("valid");
    assert!(i.default.allows("image") && !i.default.allows("cache"));
    assert_eq!(i.variables, InheritSet::Nothing);
    let n = node("j:\n  inherit: {}\n", "j", "inherit");
    assert_eq!(
        inherit(&n, "jobs:j:inherit", &mut cx).map(|i| i.default),
        Some(InheritSet::All)
    );

    let mut cx = Cx::default();
    let n = node(
        "j:\n  inherit: {default: [secrets], variables: yes please, x: 1}\n",
        "j",
        "inherit",
    );
    assert!(inherit(&n, "jobs:j:inherit", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "jobs:j:inherit config contains unknown keys: x",
            "jobs:j:inherit:default config contains unknown values: secrets",
            "jobs:j:inherit:variables should be a bool or array of strings",
        ]
    );
}

#[test]
fn small_keywords() {
    let run = |key: &str, value: &str| -> (bool, Vec<String>) {
        let mut cx = Cx::default();
        let n = node(&format!("j:\n  {key}: {value}\n"), "j", key);
        let ok =
            validate(key, &n, &format!("jobs:j:{key}"), false, &mut cx).expect("known keyword");
        (ok, messages(&cx))
    };
    assert_eq!(run("allow_failure", "{exit_codes: [1, 2]}"), (true, vec![]));
    assert_eq!(
        run("allow_failure", "maybe"),
        (
            false,
            vec!["jobs:j:allow_failure config should be a hash or a boolean value".into()]
        )
    );
    assert_eq!(
        run("allow_failure", "{exit_codes: x}"),
        (
            false,
            vec![
                "jobs:j:allow_failure exit codes should be an array of integers or an integer"
                    .into()
            ]
        )
    );
    assert_eq!(run("timeout", "1h 30m"), (true, vec![]));
    assert_eq!(run("timeout", "1 month"), (true, vec![]));
    assert_eq!(
        run("timeout", "2 months"),
        (
            false,
            vec!["jobs:j:timeout config should not exceed the limit".into()]
        )
    );
    assert_eq!(run("timeout", "'3600'"), (true, vec![]));
    // An integer node is not a duration string (GitLab's type check).
    assert_eq!(
        run("timeout", "3600"),
        (
            false,
            vec![
                "jobs:j:timeout config should be a duration".into(),
                "jobs:j:timeout config should not exceed the limit".into()
            ]
        )
    );
    let (ok, msgs) = run("timeout", "soon");
    assert!(!ok);
    assert_eq!(
        msgs,
        [
            "jobs:j:timeout config should be a duration",
            "jobs:j:timeout config should not exceed the limit"
        ]
    );
    let many: Vec<String> = (0..50).map(|i| format!("t{i}")).collect();
    assert_eq!(
        run("tags", &format!("[{}]", many.join(", "))),
        (
            false,
            vec!["jobs:j:tags config must be less than the limit of 50 tags".into()]
        )
    );
    assert_eq!(run("tags", "[a, [b, c]]"), (true, vec![]));
    assert_eq!(
        run("tags", "[a, 1]"),
        (
            false,
            vec!["jobs:j:tags config should be an array of strings".into()]
        )
    );
    assert_eq!(run("coverage", "'/Total: (\\d+)%/'"), (true, vec![]));
    assert_eq!(
        run("coverage", "'Total'"),
        (
            false,
            vec!["jobs:j:coverage config must be a regular expression with re2 syntax".into()]
        )
    );
    assert_eq!(
        run("coverage", "'/(?<=a)b/'"),
        (
            false,
            vec!["jobs:j:coverage config must be a regular expression with re2 syntax".into()]
        )
    );
    assert_eq!(
        run("resource_group", "[a]"),
        (
            false,
            vec!["jobs:j resource group should be a string".into()]
        )
    );
    assert_eq!(
        run("interruptible", "'true'"),
        (
            false,
            vec!["jobs:j:interruptible config should be a boolean value".into()]
        )
    );
    assert_eq!(
        run("pages", "{publish: dist, expire_in: never}"),
        (true, vec![])
    );
    assert_eq!(
        run("pages", "{expire_in: 1 eon}"),
        (
            false,
            vec!["jobs:j:pages expire in should be a duration".into()]
        )
    );
    assert_eq!(
        run("pages", "public"),
        (
            false,
            vec!["jobs:j:pages config should be a hash or a boolean value".into()]
        )
    );
    assert_eq!(
        run("hooks", "{pre_get_sources_script: [a, [b]]}"),
        (true, vec![])
    );
    assert_eq!(
        run("hooks", "{pre_get_sources_script: true}"),
        (
            false,
            vec!["jobs:j:hooks:pre_get_sources_script config should be a string or a nested array of strings up to 10 levels deep".into()]
        )
    );
    assert_eq!(run("id_tokens", "{T: {aud: [a, b]}}"), (true, vec![]));
    assert_eq!(
        run("id_tokens", "{T: {aud: {x: 1}, sub: s}}"),
        (
            false,
            vec![
                "jobs:j:id_tokens:t config contains unknown keys: sub".into(),
                "jobs:j:id_tokens:t aud should be an array of strings or a string".into(),
            ]
        )
    );
    assert_eq!(run("identity", "google_cloud"), (true, vec![]));

    let mut cx = Cx::default();
    let n = node(
        "j:\n  hooks: {pre_get_sources_script: [a, [b]]}\n",
        "j",
        "hooks",
    );
    assert_eq!(
        hooks(&n, "jobs:j:hooks", &mut cx),
        Some(vec!["a".to_owned(), "b".to_owned()])
    );
    let n = node("j:\n  timeout: 1h 30m\n", "j", "timeout");
    assert_eq!(timeout(&n, "jobs:j:timeout", &mut cx), Some(5400));
    let n = node(
        "j:\n  allow_failure: {exit_codes: 137}\n",
        "j",
        "allow_failure",
    );
    assert_eq!(
        allow_failure(&n, "jobs:j:allow_failure", &mut cx),
        Some((false, vec![137]))
    );
}

#[test]
fn release_and_secrets() {
    let mut cx = Cx::default();
    let n = node(
        "j:\n  release:\n    tag_name: $CI_COMMIT_TAG\n    description: d\n    milestones: [m1]\n    assets:\n      links:\n        - {name: a, url: 'https://x/a', link_type: package}\n",
        "j",
        "release",
    );
    assert!(release(&n, "jobs:j:release", &mut cx).is_some());
    assert!(cx.errors.is_empty());
    let mut cx = Cx::default();
    let n = node(
        "j:\n  release: {description: '', assets: {links: []}}\n",
        "j",
        "release",
    );
    assert!(release(&n, "jobs:j:release", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "jobs:j:release tag name should be a string",
            "jobs:j:release tag name can't be blank",
            "jobs:j:release description can't be blank",
            "jobs:j:release:assets links can't be blank",
        ]
    );

    let mut cx = Cx::default();
    let n = node(
        "j:\n  secrets:\n    P: {vault: a/b@c, file: false}\n    Q: {gcp_secret_manager: {name: s, version: 2}, token: $T}\n",
        "j",
        "secrets",
    );
    let json = secrets(&n, "jobs:j:secrets", &mut cx).expect("valid");
    assert_eq!(json["P"]["file"], serde_json::Value::Bool(false));
    let mut cx = Cx::default();
    let n = node("j:\n  secrets:\n    P: {token: $T}\n", "j", "secrets");
    assert!(secrets(&n, "jobs:j:secrets", &mut cx).is_none());
    assert!(
        messages(&cx)[0]
            .starts_with("jobs:j:secrets:p config must use exactly one of these keys: vault")
    );
}

#[test]
fn run_steps_structure() {
    let mut cx = Cx::default();
    let n = node(
        "j:\n  run:\n    - name: a\n      script: echo hi\n      env: {X: '1'}\n    - name: b\n      step: {git: {url: gitlab.com/x, rev: v1}}\n      inputs: {n: 1}\n",
        "j",
        "run",
    );
    assert!(run_steps(&n, "jobs:j:run", &mut cx).is_some());
    assert!(cx.errors.is_empty());
    let mut cx = Cx::default();
    let n = node(
        "j:\n  run:\n    - name: 1a\n      step: 123\n      script: ''\n",
        "j",
        "run",
    );
    assert!(run_steps(&n, "jobs:j:run", &mut cx).is_none());
    assert_eq!(
        messages(&cx),
        [
            "jobs:j:run config property '/0/step' is invalid: error_type=schema",
            "jobs:j:run config property '/0/name' does not match pattern: ^[a-za-z_][a-za-z0-9_]*$",
            "jobs:j:run config property '/0/script' is invalid: error_type=minlength",
            "jobs:j:run config property '/0/step' should be a string, a git reference or an oci reference",
        ]
    );
}

/// Nothing panics on odd input.
#[test]
fn no_panics_on_odd_values() {
    let values = [
        "~",
        "true",
        "0",
        "-1",
        "1.5",
        ".nan",
        "''",
        "' '",
        "[]",
        "{}",
        "[[]]",
        "[~]",
        "[{}]",
        "{a: ~}",
        "{'': ''}",
        "[[[[[[[[[[[[a]]]]]]]]]]]]",
        "{matrix: [{}]}",
        "{key: {}}",
        "{include: ~}",
        "{links: [~]}",
        "{name: ~, docker: [], kubernetes: {user: 1}}",
        "{aud: ~}",
        "{vault: {engine: 1}}",
        "[{name: x, step: {git: 1}}]",
        "{exit_codes: [1, a]}",
        "{default: [1]}",
        "{when: [1]}",
        "{reports: {coverage_report: 1, junit: [1]}}",
        "é/ü",
        "'%2F'",
        "{A: {value: ~, options: ~}}",
        "{project: ' / '}",
        "{include: [~, 1, {project: 1, file: [1]}]}",
    ];
    let keys = [
        "artifacts",
        "cache",
        "image",
        "services",
        "environment",
        "retry",
        "variables",
        "parallel",
        "trigger",
        "inherit",
        "allow_failure",
        "timeout",
        "tags",
        "hooks",
        "id_tokens",
        "secrets",
        "release",
        "pages",
        "coverage",
        "resource_group",
        "interruptible",
        "dast_configuration",
        "identity",
        "run",
    ];
    for v in values {
        let text = format!("j:\n  k: {v}\n");
        let n = node(&text, "j", "k");
        for key in keys {
            for global in [false, true] {
                let mut cx = Cx::default();
                let ok = validate(key, &n, key, global, &mut cx).expect("known");
                assert_eq!(ok, cx.errors.is_empty(), "{key}: {v}: {:?}", messages(&cx));
            }
        }
        let mut cx = Cx::default();
        let ok = variables(&n, "v", VarLevel::Rule, &mut cx).is_some();
        assert_eq!(ok, cx.errors.is_empty());
        let _ = super::parallel::matrix(&n, "m", &mut cx);
    }
}

// ---------------------------------------------------------------------------------------
// GitLab schema fixtures (inline copies of the cases for these keywords)

#[test]
fn fixture_negatives_inline() {
    rejects(
        "a:\n  artifacts:\n    reports:\n      cyclonedx:\n        paths: [foo, bar]\nb:\n  artifacts:\n    cyclonedx: foo\nc:\n  artifacts:\n    reports:\n      coverage_report: cobertura\nd:\n  artifacts:\n    when: unknown\ne:\n  artifacts:\n    when: [always]\nf:\n  artifacts:\n    when: true\ng:\n  artifacts:\n    public: true\n    accesss: all\nh:\n  artifacts:\n    access: random\ni:\n  artifacts:\n    reports:\n      annotations: 1\n",
    );
    rejects(
        "a:\n  cache:\n    key:\n      files: package.json\nb:\n  cache:\n    key: {files: [f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11]}\nc:\n  cache:\n    key: {files_commits: [a, b, c]}\nd:\n  cache:\n    key: {files: [a], prefix: [b]}\ne:\n  cache: {key: .}\nf:\n  cache: {key: ..}\ng:\n  cache: {key: binaries-ca/che}\nh:\n  cache: {paths: binaries/*.apk}\ni:\n  cache: {untracked: 'true'}\nj:\n  cache: {when: 0}\nk:\n  cache: {when: [always]}\nl:\n  cache: {when: true}\nm:\n  cache: {when: 'never'}\nn:\n  cache: {policy: [push]}\no:\n  cache: {policy: true}\np:\n  cache: {policy: unknown}\nq:\n  cache:\n    - policy: [push]\n    - policy: true\n",
    );
    rejects(
        "job1:\n  hooks:\n    invalid_script: [a]\njob2:\n  hooks:\n    pre_get_sources_script: true\n",
    );
    rejects(
        "a:\n  id_tokens:\n    T:\n      aud: {invalid_prop: invalid}\nb:\n  id_tokens:\n    T:\n      aud: x\n      sub: y\n",
    );
    rejects(
        "a:\n  image: [alpine:latest, ubuntu:latest]\nb:\n  image:\n    entrypoint: [/bin/sh]\nc:\n  image: {name: x, entrypoint: /bin/sh}\nd:\n  image: {name: x, pull_policy: []}\ne:\n  image: {name: x, docker: {platform: [arm64]}}\nf:\n  image: {name: x, docker: {user: [dave]}}\ng:\n  image: {name: x, docker: {user: ''}}\nh:\n  image: {name: x, docker: {unknown_key: test}}\ni:\n  image: {name: x, kubernetes: {user: [dave]}}\nj:\n  image: {name: x, kubernetes: {user: ''}}\nk:\n  image: {name: x, kubernetes: {unknown_key: test}}\n",
    );
    rejects(
        "a:\n  services:\n    - alias: db\nb:\n  services:\n    - {name: x, entrypoint: /bin/x}\nc:\n  services:\n    - {name: x, pull_policy: []}\nd:\n  services:\n    - {name: x, docker: {unknown_key: test}}\ne:\n  services:\n    - {name: x, docker: {platform: [arm64]}}\nf:\n  services:\n    - {name: x, docker: {user: ''}}\ng:\n  services:\n    - {name: x, kubernetes: {user: [dave]}}\n",
    );
    rejects(
        "a:\n  retry: -1\nb:\n  retry: '2'\nc:\n  retry: {max: 2, unknown: 2}\nd:\n  retry: {max: 2, when: gitlab-ci-retry-object-unknown-when}\ne:\n  retry: {when: [api_failure, gitlab-ci-retry-object-unknown-when]}\nf:\n  retry: {exit_codes: '137'}\ng:\n  retry: {exit_codes: [137, '1']}\n",
    );
    rejects("a:\n  parallel: '5'\nb:\n  parallel: 0\nc:\n  parallel: 201\n");
    rejects(
        "a:\n  secrets:\n    P: {token: $T}\nb:\n  secrets:\n    P: {vault: a/b, extra_prop: T}\nc:\n  secrets:\n    P:\n      vault: {invalid: T}\nd:\n  secrets:\n    P:\n      vault: {path: gitlab}\ne:\n  secrets:\n    P:\n      vault:\n        engine: {path: kv}\nf:\n  secrets:\n    P:\n      azure_key_vault: {name: p, extra_prop: T}\ng:\n  secrets:\n    P:\n      azure_key_vault: {invalid: T}\nh:\n  secrets:\n    P:\n      azure_key_vault: {version: latest}\ni:\n  secrets:\n    P:\n      azure_key_vault: {name: ~, version: latest}\nj:\n  secrets:\n    P:\n      gcp_secret_manager: {version: latest}\n      token: $T\nk:\n  secrets:\n    P:\n      gcp_secret_manager: {name: s}\n",
    );
    rejects(
        "a:\n  trigger: ''\nb:\n  trigger: 'slug#'\nc:\n  trigger: '/slug'\nd:\n  trigger: 'slug'\ne:\n  trigger: 'slug/'\nf:\n  trigger: {project: ''}\ng:\n  trigger: {project: 'slug#'}\nh:\n  trigger: {project: '/slug'}\ni:\n  trigger:\n    include:\n      - {file: /p.yml, project: ''}\nj:\n  trigger:\n    include:\n      - {file: /p.yml, project: 'slug#'}\nk:\n  trigger:\n    include:\n      - {file: /p.yml, project: '/slug'}\nl:\n  trigger:\n    include:\n      - {file: /p.yml, project: slug}\nm:\n  trigger:\n    include:\n      - {file: /p.yml, project: 'slug/'}\n",
    );
    rejects("variables:\n  FOO:\n    value: BAR\n    desc: A single value variable\n");
    rejects("variables:\n  INVALID_OPTIONS:\n    value: staging\n    options: staging\n");
    rejects("variables:\n  RAW_VAR:\n    value: Hello $FOO\n    expand: okay\n");
    rejects(
        "a:\n  dast_configuration: {site_profile: a, scanner_profile: b, dast_profile: c}\nb:\n  dast_configuration: Example Co\n",
    );
    rejects("a:\n  identity: ''\nb:\n  identity: unknown\n");
    rejects(
        "a:\n  run:\n    - {name: s, step: x, script: y}\nb:\n  run:\n    step: x\nc:\n  run:\n    script: rspec\nd:\n  run:\n    - {name: s, invalid_key: v}\ne:\n  run: ''\nf:\n  run: not an array\ng:\n  run:\n    - {name: e, script: x, env: [a]}\nh:\n  run:\n    - {name: i, step: x, inputs: [a]}\ni:\n  run:\n    - {name: m, env: {T: v}}\nj:\n  run:\n    - {name: s, step: 123}\nk:\n  run:\n    - {name: s, script: [a, 123]}\nl:\n  run:\n    - {name: s, script: x, inputs: [{msg: hi}]}\nm:\n  run:\n    - {name: g, step: {git: {url: x}}}\nn:\n  run:\n    - {name: g, step: {git: {dir: r, rev: v1}}}\n",
    );
    // json-negative
    rejects("karma:\n  inherit:\n    default: [secrets]\n");
    rejects("j:\n  variables:\n    D:\n      value: staging\n      description: d\n");
    rejects("j:\n  retry:\n    when: gitlab-ci-retry-object-unknown-when\n");
    rejects(
        "a:\n  release: {description: d, tag_name: t, assets: {}}\nb:\n  release: {description: d, tag_name: t, assets: {links: []}}\nc:\n  release:\n    description: d\n    tag_name: t\n    assets:\n      links:\n        - {name: a, url: 'https://e/1'}\n        - {name: b, url: 'https://e/2', filepath: /p, link_type: invalid}\n",
    );
}

#[test]
fn fixture_positives_inline() {
    accepts(
        "a:\n  artifacts:\n    reports:\n      browser_performance: foo\n      cyclonedx: ['./foo', 'bar/*.baz']\n      coverage_report: null\n      annotations: upload_report.json\nb:\n  artifacts:\n    reports:\n      coverage_report: {coverage_format: cobertura, path: c.xml}\nc:\n  artifacts: {access: none}\nd:\n  artifacts: {when: on_failure, paths: [binaries/]}\n",
    );
    accepts(
        "a:\n  cache: {key: random-..string}\nb:\n  cache: {key: .random-string}\nc:\n  cache: {key: $CI_COMMIT_REF_SLUG}\nd:\n  cache:\n    key: {files: [f1, f2]}\ne:\n  cache:\n    key: {files_commits: [Gemfile], prefix: test-cache}\nf:\n  cache:\n    - when: on_success\n    - when: on_failure\n    - when: always\n",
    );
    accepts(
        "a:\n  image:\n    name: ubuntu\n    kubernetes: {user: 1001:1001}\nb:\n  image:\n    name: ubuntu\n    kubernetes: {user: '1001'}\nc:\n  image:\n    name: alpine\n    docker: {platform: linux/amd64}\n    pull_policy: if-not-present\n",
    );
    accepts(
        "a:\n  services: [php:7, node:latest, golang:1.10]\nb:\n  services:\n    - name: nginx\n      alias: nginx\n      variables: {PORT: '${PORT}'}\nc:\n  services:\n    - {name: postgres, pull_policy: [always, if-not-present]}\n",
    );
    accepts(
        "a:\n  retry:\n    max: 2\n    when: [always, unknown_failure, script_failure, api_failure, stuck_or_timeout_failure, runner_system_failure, runner_unsupported, stale_schedule, job_execution_timeout, archived_failure, unmet_prerequisites, scheduler_failure, data_integrity_failure]\nb:\n  retry: {exit_codes: 137}\nc:\n  retry: {when: [runner_system_failure, runner_system_failure]}\n",
    );
    accepts(
        "variables:\n  TEST_VAR: hello\n  123456: '123456'\n  FOO: {value: BAR, description: d}\n  VAR_WITH_DESCRIPTION: {description: d}\n  RAW_VAR: {value: x, expand: false}\n  VAR_WITH_OPTIONS: {value: staging, options: [production, staging, canary], description: d}\nrspec:\n  variables:\n    RAW_VAR2: {value: x, expand: false}\n",
    );
    accepts(
        "a:\n  trigger: {project: group/project, inputs: {example: a}}\nb:\n  trigger: {include: /path/to/child-pipeline.yml}\nc:\n  trigger:\n    include:\n      - {template: t.yml, inputs: {x: a}}\nd:\n  trigger:\n    include:\n      - {component: '/path/to/c@1.0.0'}\ne:\n  trigger:\n    include:\n      - {remote: 'https://gitlab.com/x/.child.yml'}\nf:\n  trigger: '$.'\ng:\n  trigger: group/$VAR/project\n",
    );
    accepts(
        "a:\n  secrets:\n    P:\n      vault:\n        engine: {name: e, path: p}\n        path: test/db\n        field: password\n      file: true\n      token: $T\nb:\n  secrets:\n    P:\n      azure_key_vault: {name: test, version: v}\n",
    );
    accepts(
        "a:\n  dast_configuration: {}\nb:\n  dast_configuration: {site_profile: '', scanner_profile: q}\n",
    );
    accepts(
        "a:\n  run:\n    - name: oci\n      step:\n        oci: {registry: gitlab.com/c, repository: bash, tag: 1.0.4, dir: /p, file: s.yml}\n      inputs: {p: v}\n      env: {e: v}\n    - name: s\n      step: ./steps/my-step\n      inputs:\n        param3: {nested: data, array: [a, b]}\n",
    );
    accepts(
        "j1:\n  allow_failure: true\nj2:\n  allow_failure: {exit_codes: 137}\nj3:\n  allow_failure: {exit_codes: [137, 255]}\nr:\n  inherit: {default: [after_script, artifacts, before_script, cache, image, interruptible, retry, services, tags, timeout]}\ne:\n  environment: {name: production, kubernetes: {namespace: production}}\nf:\n  environment: {name: customer-portal, deployment_tier: production}\ng:\n  environment: {name: review/$CI_COMMIT_REF_NAME, url: 'https://$CI_ENVIRONMENT_SLUG.example.com/', on_stop: stop}\n",
    );
}

// ---------------------------------------------------------------------------------------
// Whole-corpus sweep (runs when the conformance corpus is available)

/// Schema negatives that these validators accept, because GitLab's backend accepts them
/// too (or because the case is rejected elsewhere). `(file, case)`.
const ACCEPTED_NEGATIVES: &[(&str, &str)] = &[
    // `reports:<type>` accepts null (allow_nil) and arrays (`array_of_strings_or_string`).
    ("negative/artifacts.yml", "browser_performance no paths"),
    (
        "negative/artifacts.yml",
        "browser_performance list of string paths",
    ),
    (
        "negative/artifacts.yml",
        "browser_performance mixed list of string paths and globs",
    ),
    ("negative/artifacts.yml", "browser_performance string array"),
    ("negative/artifacts.yml", "cyclonedx no paths"),
    // `performance` is still an allowed report type in the backend (spec §3 artifacts).
    ("negative/artifacts.yml", "performance string path"),
    // `key: null` = unspecified; handled by the caller.
    ("negative/image.yml", "empty_image"),
    ("negative/services.yml", "empty_services"),
    // `executor_opts` drops null sections before the JSON-schema check.
    ("negative/image.yml", "image_with_empty_executor_opts"),
    (
        "negative/image.yml",
        "image_with_empty_executor_opts_kubernetes",
    ),
    // `array_of_strings` accepts empty arrays.
    ("negative/services.yml", "empty_entrypoint"),
    ("negative/services.yml", "empty_command"),
    // `array_of_integers_or_integer` does not check uniqueness.
    (
        "negative/retry.yml",
        "invalid_job_with_retry_exit_codes_duplicate",
    ),
    // Mis-indented upstream: `trigger: null` plus a job-level `project` key — rejected by
    // the job/bridge validation, not by `trigger`.
    ("negative/trigger.yml", "trigger-project-no-slash"),
    ("negative/trigger.yml", "trigger-project-trailing-slash"),
];

/// Schema positives these validators reject (see the corpus README).
const REJECTED_POSITIVES: &[(&str, &str)] = &[
    // Uses `action:`, which the stored schema no longer allows (corpus README caveat).
    ("positive/run.yml", "step_using_action"),
    // `expose_as` with `paths: [..., "target/*.war"]`: GitLab's backend rejects it
    // ("can't contain '*' when used with 'expose_as'"); only the editor schema allows it.
    ("json-positive/gitlab-ci.json", "default"),
    // Ten `cache:key:files` need GitLab's `increase_ci_cache_key_files_limit` (off by default).
    ("positive/cache.yml", "cache-key-files-ten"),
];

/// Negative fixture files whose cases are about the keywords of this module.
fn owned_negative(file: &str) -> bool {
    let name = file
        .trim_start_matches("negative/")
        .trim_start_matches("json-negative/");
    [
        "artifacts.yml",
        "cache",
        "hooks.yml",
        "id_tokens.yml",
        "image.yml",
        "services.yml",
        "retry.yml",
        "parallel.yml",
        "secrets.yml",
        "trigger.yml",
        "project_path__trigger__",
        "variables",
        "dast_configuration.yml",
        "identity_provider.yml",
        "run.yml",
        "inherit_default_no_additional_properties.json",
        "job_variables_must_not_contain_objects.json",
        "release_assets_links.json",
        "retry_unknown_when.json",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

#[test]
fn fixture_corpus_sweep() {
    let root = std::env::var("GANTRY_SCHEMA_FIXTURES")
        .unwrap_or_else(|_| "/work/shared/conformance/gitlab-schema".to_owned());
    let root = std::path::Path::new(&root);
    if !root.is_dir() {
        eprintln!(
            "schema fixtures not found at {}; sweep skipped",
            root.display()
        );
        return;
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for dir in ["positive", "json-positive", "negative", "json-negative"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut files: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
        files.sort();
        for path in files {
            let file_name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            let file = format!("{dir}/{file_name}");
            if file_name.starts_with("workflow__") {
                continue;
            }
            let negative = dir.ends_with("negative");
            if negative && !owned_negative(&file) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let Ok(docs) = parse_documents(&text, FileId(0), Limits::default()) else {
                failures.push(format!("{file}: does not parse"));
                continue;
            };
            for d in &docs {
                let Some(map) = d.as_map() else {
                    continue;
                };
                for (case, value) in map.iter() {
                    checked += 1;
                    let (ok, msgs) = check_case(case, value);
                    let key = (file.as_str(), case);
                    if negative {
                        let excepted = ACCEPTED_NEGATIVES.contains(&key);
                        if ok && !excepted {
                            failures.push(format!("{file}: `{case}` should be rejected"));
                        }
                        if !ok && excepted {
                            failures.push(format!(
                                "{file}: `{case}` is listed as accepted but is rejected: {msgs:?}"
                            ));
                        }
                    } else {
                        let excepted = REJECTED_POSITIVES.contains(&key);
                        if !ok && !excepted {
                            failures.push(format!("{file}: `{case}` should be accepted: {msgs:?}"));
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} cases checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Files GitLab runs in production: no keyword value of theirs may be rejected. Values
/// holding an unresolved `!reference` are skipped (resolved before validation).
#[test]
fn real_world_sweep() {
    fn has_reference(n: &Node) -> bool {
        match &n.value {
            crate::yaml::Value::Reference(_) => true,
            crate::yaml::Value::Seq(items) => items.iter().any(has_reference),
            crate::yaml::Value::Map(m) => m.iter().any(|(_, v)| has_reference(v)),
            _ => false,
        }
    }
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| x == "yml" || x == "yaml")
            {
                out.push(p);
            }
        }
    }
    let root = std::env::var("GANTRY_REAL_WORLD")
        .unwrap_or_else(|_| "/work/shared/conformance/real-world".to_owned());
    let root = std::path::Path::new(&root);
    if !root.is_dir() {
        eprintln!(
            "real-world corpus not found at {}; sweep skipped",
            root.display()
        );
        return;
    }
    let mut files = Vec::new();
    walk(root, &mut files);
    files.sort();
    let mut failures = Vec::new();
    let mut checked = 0;
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(docs) = parse_documents(&text, FileId(0), Limits::default()) else {
            continue;
        };
        for d in &docs {
            let Some(map) = d.as_map() else {
                continue;
            };
            for (name, value) in map.iter() {
                if matches!(name, "include" | "stages" | "workflow" | "spec") {
                    continue;
                }
                let mut cx = Cx::default();
                let mut check = |key: &str, v: &Node, p: &str, global: bool, cx: &mut Cx| {
                    if v.is_null() || has_reference(v) {
                        return;
                    }
                    checked += 1;
                    if validate(key, v, p, global, cx) == Some(false) {
                        failures.push(format!("{}: {p}: {:?}", path.display(), messages(cx)));
                    }
                };
                match name {
                    "variables" | "image" | "services" | "cache" => {
                        check(name, value, name, true, &mut cx)
                    }
                    _ => {
                        if let Some(m) = value.as_map() {
                            // Hash values of a job that `extends` others may be partial
                            // until merged (`trigger: {inputs}` with the project inherited).
                            let extends = m.contains_key("extends");
                            for (key, v) in m.iter() {
                                if extends && v.as_map().is_some() {
                                    continue;
                                }
                                check(key, v, &format!("{name}:{key}"), false, &mut cx);
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} values checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Job inputs (GitLab 18.10): each entry's own checks first (`jobs:J:inputs:N …`),
/// then — only when every entry is valid — each default against its type, options and
/// regex (``jobs:J inputs `n`: …``), lower-cased as GitLab writes them.
#[test]
fn job_inputs_messages_and_values() {
    let run = |yaml: &str| {
        let n = node(yaml, "Deploy", "inputs");
        let mut cx = Cx::default();
        let out = job_inputs(&n, "jobs:Deploy", &mut cx);
        (out, messages(&cx))
    };
    let (ok, errors) = run(
        "Deploy:\n  inputs:\n    env: {default: staging, options: [staging, production]}\n    replicas: {type: number, default: '3'}\n    debug: {type: boolean, default: false}\n    tags: {type: array, default: [a, b]}\n    version: {default: '', regex: '^[a-z0-9.]*$', description: the version}\n",
    );
    assert_eq!(errors, Vec::<String>::new());
    let inputs = ok.expect("valid");
    let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["env", "replicas", "debug", "tags", "version"]);
    // A number given as text is stored as the number (GitLab parses it as JSON).
    assert_eq!(inputs[1].default, serde_json::json!(3));
    assert_eq!(inputs[1].kind, crate::model::JobInputType::Number);
    assert_eq!(inputs[3].default, serde_json::json!(["a", "b"]));

    for (yaml, expected) in [
        (
            "Deploy:\n  inputs: [a]\n",
            "jobs:deploy:inputs config should be a hash",
        ),
        (
            "Deploy:\n  inputs:\n    a:\n",
            "jobs:deploy:inputs:a must have a default value",
        ),
        (
            "Deploy:\n  inputs:\n    a: {default: null}\n",
            "jobs:deploy:inputs:a must have a default value",
        ),
        (
            "Deploy:\n  inputs:\n    a: 5\n",
            "jobs:deploy:inputs:a config should be a hash",
        ),
        (
            "Deploy:\n  inputs:\n    a: {default: 1, rules: []}\n",
            "jobs:deploy:inputs:a config contains unknown keys: rules",
        ),
        (
            "Deploy:\n  inputs:\n    a: {default: 1, type: Integer}\n",
            "jobs:deploy:inputs:a input type unknown value: integer",
        ),
        (
            "Deploy:\n  inputs:\n    a: {default: x, options: x}\n",
            "jobs:deploy:inputs:a input options should be an array",
        ),
        (
            "Deploy:\n  inputs:\n    a: {default: x, regex: [x]}\n",
            "jobs:deploy:inputs:a input regex should be a string",
        ),
        (
            "Deploy:\n  inputs:\n    n: {type: number, default: many}\n",
            "jobs:deploy inputs `n`: default value is not a number",
        ),
        (
            "Deploy:\n  inputs:\n    b: {type: boolean, default: 'yes'}\n",
            "jobs:deploy inputs `b`: default value is not a boolean",
        ),
        (
            "Deploy:\n  inputs:\n    l: {type: array, default: x}\n",
            "jobs:deploy inputs `l`: default value is not an array",
        ),
        (
            "Deploy:\n  inputs:\n    e: {default: Dev, options: [staging]}\n",
            "jobs:deploy inputs `e`: `dev` cannot be used because it is not in the list of allowed options",
        ),
        (
            "Deploy:\n  inputs:\n    n: {type: number, default: 4, options: [1, 2]}\n",
            "jobs:deploy inputs `n`: `4` cannot be used because it is not in the list of the allowed options",
        ),
        (
            "Deploy:\n  inputs:\n    b: {type: boolean, default: true, options: [true]}\n",
            "jobs:deploy inputs `b`: options can only be used with string and number inputs",
        ),
        (
            "Deploy:\n  inputs:\n    n: {type: number, default: 1, regex: x}\n",
            "jobs:deploy inputs `n`: regex validation can only be used with string inputs",
        ),
        (
            "Deploy:\n  inputs:\n    v: {default: 'v1', regex: '^[0-9]+$'}\n",
            "jobs:deploy inputs `v`: default value does not match required regex pattern",
        ),
        (
            "Deploy:\n  inputs:\n    v: {default: 'v1', regex: '('}\n",
            "jobs:deploy inputs `v`: invalid regular expression",
        ),
    ] {
        let (out, errors) = run(yaml);
        assert!(out.is_none(), "{yaml}");
        assert_eq!(errors, [expected], "{yaml}");
    }
    // The semantic pass waits until every entry is valid.
    let (_, errors) = run("Deploy:\n  inputs:\n    n: {type: number, default: x}\n    m: {}\n");
    assert_eq!(errors, ["jobs:deploy:inputs:m must have a default value"]);
    let many: String = (0..51)
        .map(|i| format!("    i{i}: {{default: x}}\n"))
        .collect();
    let (_, errors) = run(&format!("Deploy:\n  inputs:\n{many}"));
    assert_eq!(
        errors,
        ["jobs:deploy inputs has too many entries (maximum 50)"]
    );
}
