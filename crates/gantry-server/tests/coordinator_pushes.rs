//! Push pipelines: commits to a project's repository turn into `push` pipelines when the
//! coordinator looks (`pull_mirror`), with GitLab's facts of a push
//! (`CI_COMMIT_BEFORE_SHA`, the pushed paths for `rules:changes`), `[skip ci]`, the limit
//! of pipelines per push, and each change taken once even by two coordinators at once.
//! Also `rules:changes:compare_to`, which any pipeline can use.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::coordinator_support;

use coordinator_support::*;
use gantry_server::coordinator::{CoordinatorError, PUSH_PIPELINE_LIMIT, PushedRef};

const CI: &str = r"
always:
  script: [make]
docs:
  script: [make docs]
  rules:
    - changes: ['docs/**/*']
code:
  script: [make test]
  rules:
    - changes: ['src/**/*']
";

const ZEROS: &str = "0000000000000000000000000000000000000000";

async fn pull(env: &Env, project: i64) -> Vec<PushedRef> {
    env.coord.pull_mirror(project).await.expect("pull")
}

fn job_names(statuses: &std::collections::BTreeMap<String, String>) -> Vec<&str> {
    statuses.keys().map(String::as_str).collect()
}

#[tokio::test]
async fn a_pushed_commit_gets_a_push_pipeline_with_the_pushed_paths() {
    let env = env(CI).await;
    let first = git(&env.repo, &["rev-parse", "HEAD"]);
    let project = env.project().await;
    // What the repository held when the project was made is no push.
    assert_eq!(pull(&env, project).await, []);
    assert!(env.coord.pipelines(project).await.unwrap().is_empty());

    let second = commit(&env.repo, &[("src/lib.rs", "fn main() {}")], "add code");
    let pushed = pull(&env, project).await;
    assert_eq!(pushed.len(), 1, "{pushed:?}");
    assert_eq!(pushed[0].ref_name, "refs/heads/main");
    assert_eq!(pushed[0].before.as_deref(), Some(first.as_str()));
    assert_eq!(pushed[0].after.as_deref(), Some(second.as_str()));
    let id = pushed[0].pipeline_id.expect("a pipeline");
    let p = env.coord.pipeline(id).await.unwrap();
    assert_eq!(
        (p.source.as_str(), p.sha.as_str()),
        ("push", second.as_str())
    );
    assert_eq!(p.before_sha, first);
    // `docs` is left out: the push changed src/ only.
    assert_eq!(job_names(&env.statuses(id).await), ["always", "code"]);
    let runner = env.any_runner().await;
    let job = env.take_some(&runner).await;
    assert_eq!(var(&job, "CI_PIPELINE_SOURCE"), Some("push"));
    assert_eq!(var(&job, "CI_COMMIT_BEFORE_SHA"), Some(first.as_str()));
    assert_eq!(var(&job, "CI_COMMIT_SHA"), Some(second.as_str()));

    // Nothing moved: nothing new.
    assert_eq!(pull(&env, project).await, []);
    // Two commits between looks are one push: the paths of both count.
    commit(&env.repo, &[("docs/a.md", "a")], "docs");
    commit(&env.repo, &[("README", "r")], "readme");
    let pushed = pull(&env, project).await;
    let id = pushed[0].pipeline_id.expect("a pipeline");
    assert_eq!(job_names(&env.statuses(id).await), ["always", "docs"]);
    assert_eq!(env.coord.pipelines(project).await.unwrap().len(), 2);
}

#[tokio::test]
async fn new_branches_and_tags_have_unknown_changes_and_deletions_create_nothing() {
    let env = env(CI).await;
    let project = env.project().await;
    git(&env.repo, &["checkout", "-q", "-b", "feature"]);
    let head = commit(&env.repo, &[("README", "r")], "readme");
    git(&env.repo, &["tag", "-a", "v1.0", "-m", "release 1.0"]);
    let pushed = pull(&env, project).await;
    let names: Vec<&str> = pushed.iter().map(|p| p.ref_name.as_str()).collect();
    assert_eq!(names, ["refs/heads/feature", "refs/tags/v1.0"]);
    for p in &pushed {
        assert_eq!(p.before, None);
        // An annotated tag is recorded by the commit it names.
        assert_eq!(p.after.as_deref(), Some(head.as_str()));
        let id = p.pipeline_id.expect("a pipeline");
        let view = env.coord.pipeline(id).await.unwrap();
        assert_eq!(view.before_sha, ZEROS);
        // Unknown changes: every `rules:changes` holds, as on GitLab.
        assert_eq!(
            job_names(&env.statuses(id).await),
            ["always", "code", "docs"]
        );
    }
    let tag_pipeline = env
        .coord
        .pipeline(pushed[1].pipeline_id.unwrap())
        .await
        .unwrap();
    assert!(tag_pipeline.tag);
    assert_eq!(tag_pipeline.ref_name, "v1.0");

    git(&env.repo, &["checkout", "-q", "main"]);
    git(&env.repo, &["branch", "-q", "-D", "feature"]);
    let pushed = pull(&env, project).await;
    assert_eq!(pushed.len(), 1);
    assert_eq!(pushed[0].ref_name, "refs/heads/feature");
    assert_eq!(pushed[0].after, None);
    assert_eq!(pushed[0].pipeline_id, None);
    assert_eq!(pushed[0].reason.as_deref(), Some("the ref was deleted"));
    assert_eq!(env.coord.pipelines(project).await.unwrap().len(), 2);
    assert_eq!(pull(&env, project).await, []);
}

#[tokio::test]
async fn skip_ci_in_the_message_makes_a_skipped_pipeline_without_jobs() {
    let env = env(CI).await;
    let project = env.project().await;
    commit(&env.repo, &[("src/a.rs", "")], "wip\n\n[Skip CI] not yet");
    let pushed = pull(&env, project).await;
    let id = pushed[0].pipeline_id.expect("a pipeline");
    let p = env.coord.pipeline(id).await.unwrap();
    assert_eq!(p.status.as_str(), "skipped");
    assert!(env.statuses(id).await.is_empty());
    // A pipeline created through the API ignores the message, as GitLab's does.
    let api = env.pipeline(project, "main").await;
    assert_eq!(env.status(api.id).await, "pending");
}

#[tokio::test]
async fn one_push_creates_at_most_four_pipelines() {
    let env = env(CI).await;
    let project = env.project().await;
    for b in ["b1", "b2", "b3", "b4", "b5", "b6"] {
        git(&env.repo, &["branch", b]);
    }
    let pushed = pull(&env, project).await;
    assert_eq!(pushed.len(), 6);
    let created = pushed.iter().filter(|p| p.pipeline_id.is_some()).count();
    assert_eq!(created, PUSH_PIPELINE_LIMIT);
    assert!(
        pushed[PUSH_PIPELINE_LIMIT..]
            .iter()
            .all(|p| p.reason.as_deref().is_some_and(|r| r.contains("at most 4"))),
        "{pushed:?}"
    );
    // The others are recorded all the same: no pipeline for them later.
    assert_eq!(pull(&env, project).await, []);
}

#[tokio::test]
async fn a_push_workflow_rules_filter_out_is_recorded_without_a_pipeline() {
    let env = env(r#"
workflow:
  rules:
    - if: $CI_COMMIT_BRANCH == "main"
build:
  script: [make]
"#)
    .await;
    let project = env.project().await;
    git(&env.repo, &["branch", "topic"]);
    let pushed = pull(&env, project).await;
    assert_eq!(pushed[0].pipeline_id, None);
    assert_eq!(
        pushed[0].reason.as_deref(),
        Some("Pipeline filtered out by workflow rules.")
    );
    assert_eq!(pull(&env, project).await, []);
    commit(&env.repo, &[("a", "")], "on main");
    let pushed = pull(&env, project).await;
    assert!(pushed[0].pipeline_id.is_some(), "{pushed:?}");
}

#[tokio::test]
async fn two_coordinators_looking_at_once_create_one_pipeline() {
    let env = env(CI).await;
    let project = env.project().await;
    let other = second_coordinator(&env).await;
    for round in 0..3 {
        commit(&env.repo, &[("src/x.rs", &round.to_string())], "change");
        let (a, b) = tokio::join!(env.coord.pull_mirror(project), other.pull_mirror(project));
        let (a, b) = (a.unwrap(), b.unwrap());
        let created = a
            .iter()
            .chain(&b)
            .filter(|p| p.pipeline_id.is_some())
            .count();
        assert_eq!(created, 1, "round {round}: {a:?} {b:?}");
    }
    assert_eq!(env.coord.pipelines(project).await.unwrap().len(), 3);
}

#[tokio::test]
async fn compare_to_takes_the_paths_changed_since_the_merge_base() {
    let env = env(r"
docs:
  script: [make docs]
  rules:
    - changes:
        paths: ['docs/**/*']
        compare_to: refs/heads/main
code:
  script: [make test]
  rules:
    - changes:
        paths: ['src/**/*']
        compare_to: main
")
    .await;
    let project = env.project().await;
    git(&env.repo, &["checkout", "-q", "-b", "feature"]);
    commit(&env.repo, &[("docs/guide.md", "g")], "document");
    // main moves on after the branch point: its own changes are not the branch's.
    git(&env.repo, &["checkout", "-q", "main"]);
    commit(&env.repo, &[("src/main.rs", "")], "code on main");
    let p = env.pipeline(project, "feature").await;
    assert_eq!(job_names(&env.statuses(p.id).await), ["docs"]);
    // On main itself nothing changed since main: no job, so no pipeline.
    let none = env
        .coord
        .create_pipeline(project, "main", Vec::new(), gantry_pipeline::Source::Api)
        .await;
    assert!(
        matches!(&none, Err(CoordinatorError::Invalid(m)) if m.contains("The rules configuration prevented any jobs")),
        "{none:?}"
    );
}

#[tokio::test]
async fn an_unknown_compare_to_ref_fails_the_pipeline_with_gitlabs_message() {
    let env = env(r"
build:
  script: [make]
  rules:
    - changes:
        paths: [README]
        compare_to: no-such-branch
")
    .await;
    let project = env.project().await;
    let p = env.pipeline(project, "main").await;
    assert_eq!(p.status.as_str(), "failed");
    assert_eq!(
        p.yaml_errors,
        ["Failed to parse rule for build: rules:changes:compare_to is not a valid ref"]
    );
}

/// GitLab's review apps: deleting a branch stops the environments it deployed last, by
/// playing their stop jobs; an environment last deployed from another branch stays.
#[tokio::test]
async fn a_deleted_branch_stops_the_environments_it_deployed() {
    let ci = r"
deploy:
  script: [deploy]
  environment:
    name: review/$CI_COMMIT_REF_SLUG
    on_stop: stop
stop:
  script: [teardown]
  when: manual
  environment:
    name: review/$CI_COMMIT_REF_SLUG
    action: stop
";
    let env = env(ci).await;
    let project = env.project().await;
    let runner = env.any_runner().await;
    assert_eq!(pull(&env, project).await, []);
    git(&env.repo, &["checkout", "-q", "-b", "feature"]);
    commit(&env.repo, &[("README", "r")], "readme");
    git(&env.repo, &["checkout", "-q", "main"]);
    commit(&env.repo, &[("NEWS", "n")], "news");
    let pushed = pull(&env, project).await;
    assert_eq!(pushed.len(), 2, "{pushed:?}");
    for _ in &pushed {
        let job = env.take_some(&runner).await;
        assert_eq!(job.job_info.name, "deploy");
        env.run(&job, true).await;
    }
    let states = || async {
        let (envs, _) = env
            .coord
            .environments()
            .page(project, &gantry_store::EnvironmentFilter::default(), 0, 10)
            .await
            .unwrap();
        envs.into_iter()
            .map(|e| (e.name, e.state))
            .collect::<Vec<_>>()
    };
    let pair = |n: &str, s: &str| (n.to_owned(), s.to_owned());
    assert_eq!(
        states().await,
        [
            pair("review/feature", "available"),
            pair("review/main", "available")
        ]
    );

    git(&env.repo, &["branch", "-q", "-D", "feature"]);
    let pushed = pull(&env, project).await;
    assert_eq!(pushed[0].reason.as_deref(), Some("the ref was deleted"));
    assert_eq!(
        states().await,
        [
            pair("review/feature", "stopping"),
            pair("review/main", "available")
        ]
    );
    let stop = env.take_some(&runner).await;
    assert_eq!(stop.job_info.name, "stop");
    assert_eq!(stop.git_info.git_ref, "feature");
    env.run(&stop, true).await;
    assert_eq!(
        states().await,
        [
            pair("review/feature", "stopped"),
            pair("review/main", "available")
        ]
    );
}
