//! A pipeline's inputs: values for the root file's `spec:inputs` (GitLab's pipeline
//! inputs: the `inputs` of the pipeline and trigger APIs, `trigger:inputs` of a
//! multi-project trigger job; `gantry run --input`). Typed values are used as they are;
//! text (a command line, a form field) is read as the type the input declares.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use gantry_pipeline::{
    Compiled, Context, InputValue, MAX_PIPELINE_INPUTS, MemoryLoader, Options, PipelineInfo,
    PipelineInputs, compile,
};
use serde_json::json;

const ROOT: &str = "spec:
  inputs:
    environment:
      options: [staging, production]
      default: staging
    replicas:
      type: number
    dry_run:
      type: boolean
      default: false
    targets:
      type: array
      default: [linux]
---
deploy:
  script:
    - echo env=$[[ inputs.environment ]] replicas=$[[ inputs.replicas ]] targets=$[[ inputs.targets ]]
  rules:
    - if: '\"$[[ inputs.dry_run ]]\" == \"false\"'
";

fn compile_with(root: &str, inputs: PipelineInputs) -> Compiled {
    let info = PipelineInfo {
        ref_name: "main".into(),
        ..PipelineInfo::default()
    };
    let ctx = Context::new(&info, &[], None);
    let loader = MemoryLoader::new().with(".gitlab-ci.yml", root);
    let opts = Options {
        inputs,
        ..Options::default()
    };
    compile(&opts, &ctx, &loader)
}

fn text(pairs: &[(&str, &str)]) -> PipelineInputs {
    let mut inputs = PipelineInputs::new();
    for (k, v) in pairs {
        inputs.insert(*k, InputValue::Text((*v).to_owned()));
    }
    inputs
}

fn errors(c: &Compiled) -> Vec<String> {
    c.errors.iter().map(|e| e.message.clone()).collect()
}

fn script(c: &Compiled) -> Vec<String> {
    let p = c.pipeline.as_ref().expect("a valid pipeline");
    p.jobs.iter().flat_map(|j| j.script.clone()).collect()
}

#[test]
fn a_required_input_without_a_value_is_an_error_at_the_header() {
    let c = compile_with(ROOT, PipelineInputs::new());
    assert_eq!(
        errors(&c),
        ["`replicas` input: required value has not been provided"]
    );
    let e = &c.errors[0];
    assert_eq!(e.pos.map(|p| (p.line, p.col)), Some((1, 1)));
}

#[test]
fn typed_values_are_used_as_they_are() {
    let inputs = PipelineInputs::from_json(&json!({
        "environment": "production",
        "replicas": 3,
        "targets": ["linux", "mac"],
    }))
    .unwrap();
    let c = compile_with(ROOT, inputs);
    assert_eq!(errors(&c), Vec::<String>::new());
    assert_eq!(
        script(&c),
        [r#"echo env=production replicas=3 targets=["linux","mac"]"#]
    );
}

#[test]
fn text_is_read_as_the_declared_type() {
    let c = compile_with(
        ROOT,
        text(&[
            ("replicas", "2.5"),
            ("targets", "[linux, 'mac os']"),
            ("dry_run", "false"),
        ]),
    );
    assert_eq!(errors(&c), Vec::<String>::new());
    assert_eq!(
        script(&c),
        [r#"echo env=staging replicas=2.5 targets=["linux","mac os"]"#]
    );
    // A boolean read from text takes part in rules like a YAML one.
    let c = compile_with(ROOT, text(&[("replicas", "1"), ("dry_run", "true")]));
    let p = c.pipeline.expect("compiled");
    assert!(!p.created, "dry_run=true filters the only job out");
    // A string input keeps text as it is, even when it looks like a number.
    let c = compile_with(
        "spec:\n  inputs:\n    version: {}\n---\nj:\n  script: echo v$[[ inputs.version ]]\n",
        text(&[("version", "1.10")]),
    );
    assert_eq!(script(&c), ["echo v1.10"]);
}

#[test]
fn values_of_the_wrong_type_or_unknown_names_are_errors_naming_them() {
    let c = compile_with(
        ROOT,
        text(&[
            ("replicas", "three"),
            ("dry_run", "maybe"),
            ("colour", "red"),
        ]),
    );
    assert_eq!(
        errors(&c),
        [
            "unknown input arguments: colour, `replicas` input: provided value is not a number, `dry_run` input: provided value is not a boolean"
        ]
    );
    let c = compile_with(ROOT, text(&[("replicas", "1"), ("targets", "linux")]));
    assert_eq!(
        errors(&c),
        ["`targets` input: provided value is not an array"]
    );
    let c = compile_with(ROOT, text(&[("replicas", "1"), ("environment", "qa")]));
    assert_eq!(
        errors(&c),
        [
            "`environment` input: `qa` cannot be used because it is not in the list of allowed options"
        ]
    );
    // JSON is typed: a string is no number.
    let inputs = PipelineInputs::from_json(&json!({"replicas": "3"})).unwrap();
    assert_eq!(
        errors(&compile_with(ROOT, inputs)),
        ["`replicas` input: provided value is not a number"]
    );
}

#[test]
fn inputs_for_a_configuration_without_a_header_are_an_error() {
    let c = compile_with("j:\n  script: echo\n", text(&[("x", "1")]));
    assert_eq!(
        errors(&c),
        [
            "Given inputs not defined in the `spec` section of the configuration file: the pipeline's configuration declares no `spec:inputs` header"
        ]
    );
    // Without inputs, such a file compiles as always.
    assert!(errors(&compile_with("j:\n  script: echo\n", PipelineInputs::new())).is_empty());
}

#[test]
fn limits_and_shapes_are_checked_with_the_fix() {
    let mut inputs = PipelineInputs::new();
    for i in 0..MAX_PIPELINE_INPUTS {
        inputs.insert(format!("i{i}"), InputValue::Text("x".into()));
    }
    assert_eq!(inputs.check(), Ok(()));
    inputs.insert("one_more", InputValue::Text("x".into()));
    assert_eq!(
        inputs.check(),
        Err("21 inputs given: a pipeline takes at most 20".to_owned())
    );
    let big = "x".repeat(1024 * 1024);
    let inputs = PipelineInputs::from_json(&json!({ "big": big }));
    assert!(
        inputs
            .as_ref()
            .is_err_and(|e| e.contains("a pipeline's inputs take at most 1048576 bytes")),
        "{inputs:?}"
    );
    assert_eq!(
        PipelineInputs::from_json(&json!(["a"])),
        Err("inputs must be an object of input names and values, like {\"environment\": \"staging\"}; got an array".to_owned())
    );
    assert_eq!(
        PipelineInputs::from_json(&json!(null)),
        Ok(PipelineInputs::new())
    );
}

#[test]
fn a_multi_project_trigger_keeps_its_inputs_for_the_downstream_pipeline() {
    let c = compile_with(
        "spec:\n  inputs:\n    env: {}\n---\ndeploy:\n  trigger:\n    project: group/app\n    inputs:\n      environment: $[[ inputs.env ]]\n      replicas: 3\n",
        text(&[("env", "production")]),
    );
    assert_eq!(errors(&c), Vec::<String>::new());
    let p = c.pipeline.expect("compiled");
    let trigger = p.jobs[0].trigger.as_ref().expect("a trigger job");
    assert_eq!(
        trigger.inputs,
        Some(json!({"environment": "production", "replicas": 3}))
    );
}

/// GitLab's `spec:inputs:rules` example: instance types by cloud provider and environment.
const RULES: &str = "spec:
  inputs:
    cloud_provider:
      options: ['aws', 'gcp', 'azure']
      default: 'aws'
    environment:
      options: ['development', 'staging', 'production']
      default: 'development'
    instance_type:
      description: 'VM instance type'
      rules:
        - if: $[[ inputs.cloud_provider ]] == 'aws' && $[[ inputs.environment ]] == 'development'
          options: ['t3.micro', 't3.small']
          default: 't3.micro'
        - if: $[[ inputs.cloud_provider ]] == 'aws' && $[[ inputs.environment ]] == 'production'
          options: ['t3.xlarge', 't3.2xlarge', 'm5.xlarge']
          default: 't3.xlarge'
        - if: $[[ inputs.cloud_provider ]] == 'gcp'
          options: ['e2-micro', 'e2-small', 'e2-standard-4']
          default: 'e2-micro'
        - options: ['small', 'medium', 'large']
          default: 'small'
---
deploy:
  script: echo $[[ inputs.cloud_provider ]] $[[ inputs.environment ]] $[[ inputs.instance_type ]]
";

#[test]
fn input_rules_give_the_options_and_default_of_the_first_rule_that_holds() {
    let run = |given: &[(&str, &str)]| {
        let c = compile_with(RULES, text(given));
        assert_eq!(errors(&c), Vec::<String>::new(), "{given:?}");
        script(&c).join("\n")
    };
    // Rules read the other inputs' values, given or default.
    assert_eq!(run(&[]), "echo aws development t3.micro");
    assert_eq!(
        run(&[("environment", "production")]),
        "echo aws production t3.xlarge"
    );
    assert_eq!(
        run(&[("cloud_provider", "gcp"), ("instance_type", "e2-small")]),
        "echo gcp development e2-small"
    );
    // No `if` holds: the fallback rule.
    assert_eq!(run(&[("environment", "staging")]), "echo aws staging small");
    // A value must be one of the matching rule's options.
    let c = compile_with(
        RULES,
        text(&[("environment", "production"), ("instance_type", "t3.micro")]),
    );
    assert_eq!(
        errors(&c),
        [
            "`instance_type` input: `t3.micro` cannot be used because it is not in the list of allowed options"
        ]
    );
}

#[test]
fn input_rules_with_a_null_default_ask_for_a_value_and_without_a_match_give_an_empty_string() {
    let root = "spec:
  inputs:
    deployment_type:
      options: ['standard', 'custom']
      default: 'standard'
    custom_config:
      rules:
        - if: $[[ inputs.deployment_type ]] == 'custom'
          default: null
    publish:
      type: boolean
      default: true
    publish_stage:
      rules:
        - if: $[[ inputs.publish ]] == true
          default: 'publish'
        - if: $[[ inputs.publish ]] == false
          default: 'test'
---
deploy:
  script: echo config=[$[[ inputs.custom_config ]]] stage=$[[ inputs.publish_stage ]]
";
    let c = compile_with(root, PipelineInputs::new());
    assert_eq!(errors(&c), Vec::<String>::new());
    assert_eq!(script(&c), ["echo config=[] stage=publish"]);
    let c = compile_with(root, text(&[("deployment_type", "custom")]));
    assert_eq!(
        errors(&c),
        ["`custom_config` input: required value has not been provided"]
    );
    let c = compile_with(
        root,
        text(&[
            ("deployment_type", "custom"),
            ("custom_config", "blue"),
            ("publish", "false"),
        ]),
    );
    assert_eq!(errors(&c), Vec::<String>::new());
    assert_eq!(script(&c), ["echo config=[blue] stage=test"]);
}

#[test]
fn input_rules_are_checked_as_gitlab_checks_them() {
    let header = |rules: &str| {
        format!(
            "spec:\n  inputs:\n    a:\n      default: x\n    b:\n      rules:\n{rules}---\nj:\n  script: echo $[[ inputs.b ]]\n"
        )
    };
    let cases = [
        (
            "        - if: $[[ inputs.a ]] == 'x'\n",
            "header:spec:inputs:b:rules:rule config rule with 'if' must define 'options' or 'default'",
        ),
        (
            "        - default: y\n",
            "header:spec:inputs:b:rules:rule config fallback rule must define 'options'",
        ),
        (
            "        - if: $[[ inputs.a ]] ==\n          default: y\n",
            "header:spec:inputs:b:rules:rule if invalid expression syntax",
        ),
        (
            "        - if: [x]\n          default: y\n",
            "header:spec:inputs:b:rules:rule if should be a string",
        ),
        (
            "        - options: y\n",
            "header:spec:inputs:b:rules:rule options should be an array",
        ),
        (
            "        - when: never\n          options: [y]\n",
            "header:spec:inputs:b:rules:rule config contains unknown keys: when",
        ),
    ];
    for (rules, expected) in cases {
        let c = compile_with(&header(rules), PipelineInputs::new());
        assert_eq!(errors(&c), [expected], "{rules}");
    }
    let c = compile_with(
        "spec:\n  inputs:\n    b:\n      default: y\n      rules:\n        - options: [y]\n---\nj:\n  script: echo\n",
        PipelineInputs::new(),
    );
    assert_eq!(
        errors(&c),
        ["header:spec:inputs:b:rules cannot be combined with a top-level `default` or `options`"]
    );
    // An empty list of rules is valid: no rule holds, the value is the empty string.
    let c = compile_with(&header("        []\n"), PipelineInputs::new());
    assert_eq!(errors(&c), Vec::<String>::new());
}

#[test]
fn inputs_whose_rules_read_each_other_are_an_error_naming_the_cycle() {
    let root = "spec:
  inputs:
    a:
      rules:
        - if: $[[ inputs.b ]] == 'x'
          default: 'x'
        - options: ['x', 'y']
          default: 'y'
    b:
      rules:
        - if: $[[ inputs.a ]] == 'x'
          default: 'x'
        - options: ['x', 'y']
          default: 'y'
---
j:
  script: echo $[[ inputs.a ]] $[[ inputs.b ]]
";
    let c = compile_with(root, PipelineInputs::new());
    assert_eq!(
        errors(&c),
        ["`a` input: its rules depend on each other in a cycle: a -> b -> a"]
    );
}

#[test]
fn inputs_rules_read_inputs_at_most_32_deep() {
    let chain = |n: usize| {
        let mut root = String::from("spec:\n  inputs:\n");
        for i in 0..n {
            root.push_str(&format!(
                "    a{i}:\n      rules:\n        - if: $[[ inputs.a{} ]] == 'x'\n          default: 'x'\n        - options: ['x', 'y']\n          default: 'x'\n",
                i + 1
            ));
        }
        root.push_str(&format!(
            "    a{n}:\n      default: 'x'\n---\nj:\n  script: echo $[[ inputs.a0 ]]\n"
        ));
        compile_with(&root, PipelineInputs::new())
    };
    let c = chain(32);
    assert_eq!(errors(&c), Vec::<String>::new());
    assert_eq!(script(&c), ["echo x"]);
    // A longer chain is an error (not a stack overflow), named at the input too deep.
    let c = chain(5_000);
    let [e] = errors(&c).try_into().unwrap();
    assert!(
        e.starts_with(
            "`a33` input: its rules read inputs whose rules read inputs more than 32 deep, "
        ),
        "{e}"
    );
}
