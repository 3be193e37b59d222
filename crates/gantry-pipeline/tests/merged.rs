//! What a compilation keeps for the CI Lint API: the files `include:` read (with GitLab's
//! kind names), and — only when asked — the configuration after `include:`, `extends:`
//! (the key stays, as in GitLab's `merged_yaml`) and `!reference`, whose YAML text reads
//! back as the same configuration.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use gantry_pipeline::compile::Included;
use gantry_pipeline::yaml::{FileId, Limits, parse_documents};
use gantry_pipeline::{Context, MemoryLoader, Options, PipelineInfo, compile};
use serde_json::json;

const CI: &str = r#"include:
  - local: ci/base.yml
  - local: ci/more.yml
build:
  extends: .base
  script: [make]
  after_script: !reference [.cleanup, script]
"#;

fn loader() -> MemoryLoader {
    MemoryLoader::new()
        .with(".gitlab-ci.yml", CI)
        .with(
            "ci/base.yml",
            "include: [{local: ci/nested.yml}]\n.base:\n  tags: [linux]\n",
        )
        .with("ci/nested.yml", ".cleanup:\n  script: [rm -rf out]\n")
        .with("ci/more.yml", "variables:\n  A: \"1\"\n")
}

#[test]
fn the_merged_configuration_is_kept_only_when_asked() {
    let info = PipelineInfo::default();
    let ctx = Context::new(&info, &[], None);
    let plain = compile(&Options::default(), &ctx, &loader());
    assert!(plain.errors.is_empty(), "{:?}", plain.errors);
    assert_eq!(plain.merged, None);
    assert_eq!(
        plain.includes,
        ["ci/base.yml", "ci/nested.yml", "ci/more.yml"]
            .map(|location| Included {
                kind: "local",
                location: location.to_owned(),
            })
            .to_vec()
    );

    let kept = compile(
        &Options {
            keep_merged: true,
            ..Options::default()
        },
        &ctx,
        &loader(),
    );
    let merged = kept.merged.expect("merged");
    assert_eq!(
        merged["build"],
        json!({"tags": ["linux"], "extends": ".base", "script": ["make"], "after_script": ["rm -rf out"]})
    );
    assert_eq!(merged["variables"], json!({"A": "1"}));
    assert!(merged.get("include").is_none(), "{merged}");
    let text = gantry_pipeline::emit::to_yaml(&merged);
    let docs = parse_documents(&text, FileId(0), Limits::default()).unwrap();
    assert_eq!(docs[0].to_json(), merged, "{text}");
}
