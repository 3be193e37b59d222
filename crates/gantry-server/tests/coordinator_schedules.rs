//! Pipeline schedules through the coordinator: a schedule's pipeline at its cron time
//! (`run_due_schedules`, which the timers call every second) with its variables and
//! `CI_PIPELINE_SOURCE=schedule`, `play`, inactive schedules, refusals that name the fix,
//! a ref that is gone, and one run when two coordinators see a schedule due.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::coordinator_support;

use coordinator_support::*;
use gantry_server::coordinator::{
    CoordinatorError, ScheduleRequest, ScheduleVariable, ScheduleView,
};

const CI: &str = r#"
nightly:
  script: [make nightly]
  rules:
    - if: $CI_PIPELINE_SOURCE == "schedule"
build:
  script: [make]
"#;

fn request(cron: &str, zone: &str) -> ScheduleRequest {
    ScheduleRequest {
        description: Some("nightly build".into()),
        ref_name: Some("main".into()),
        cron: Some(cron.into()),
        cron_timezone: Some(zone.into()),
        active: None,
    }
}

fn ms(iso: &str) -> i64 {
    iso.parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

fn next_run(s: &ScheduleView) -> i64 {
    ms(s.next_run_at.as_deref().expect("a next run"))
}

async fn variable(env: &Env, project: i64, id: i64, key: &str, value: &str, kind: &str) {
    env.coord
        .schedules()
        .set_variable(
            project,
            id,
            ScheduleVariable {
                key: key.into(),
                value: value.into(),
                variable_type: kind.into(),
            },
            true,
        )
        .await
        .expect("variable");
}

#[tokio::test]
async fn a_schedule_runs_its_ref_at_its_time_with_its_variables() {
    let env = env(CI).await;
    let project = env.project().await;
    let s = env
        .coord
        .schedules()
        .create(project, request("30 4 * * *", "Asia/Tokyo"))
        .await
        .expect("schedule");
    assert_eq!(s.ref_name, "refs/heads/main");
    assert!(s.active);
    // 04:30 in Tokyo is 19:30 UTC.
    let next = next_run(&s);
    assert!(
        s.next_run_at
            .as_deref()
            .unwrap()
            .ends_with("T19:30:00.000Z"),
        "{s:?}"
    );
    variable(&env, project, s.id, "TARGET", "staging", "env_var").await;
    variable(&env, project, s.id, "CONFIG", "a: 1", "file").await;

    // Not yet.
    assert_eq!(
        env.coord.run_due_schedules(next - 1).await.unwrap(),
        Vec::<i64>::new()
    );
    let created = env.coord.run_due_schedules(next).await.unwrap();
    assert_eq!(created.len(), 1);
    let p = env.coord.pipeline(created[0]).await.unwrap();
    assert_eq!(p.source, "schedule");
    assert_eq!(
        env.statuses(p.id).await.keys().collect::<Vec<_>>(),
        ["build", "nightly"]
    );
    let runner = env.any_runner().await;
    let job = env.take_some(&runner).await;
    assert_eq!(var(&job, "CI_PIPELINE_SOURCE"), Some("schedule"));
    assert_eq!(
        var(&job, "CI_PIPELINE_SCHEDULE_DESCRIPTION"),
        Some(s.description.as_str())
    );
    assert_eq!(var(&job, "TARGET"), Some("staging"));
    let config = job
        .variables
        .iter()
        .find(|v| v.key == "CONFIG")
        .expect("the file variable");
    assert!(config.file);

    // Ran once; the next run is the next day's 04:30 in Tokyo.
    assert_eq!(
        env.coord.run_due_schedules(next).await.unwrap(),
        Vec::<i64>::new()
    );
    let shown = env.coord.schedules().get(project, s.id).await.unwrap();
    assert_eq!(next_run(&shown), next + 24 * 3600 * 1000);
    assert_eq!(shown.last_pipeline.as_ref().map(|l| l.id), Some(p.id));
    assert_eq!(shown.variables.as_ref().map(Vec::len), Some(2));
    let ran = env.coord.schedule_pipelines(project, s.id).await.unwrap();
    assert_eq!(ran.iter().map(|p| p.id).collect::<Vec<_>>(), [p.id]);

    // Runs missed while the server was down are one run, then the next time from now.
    let late = next + 3 * 24 * 3600 * 1000 + 5_000;
    assert_eq!(env.coord.run_due_schedules(late).await.unwrap().len(), 1);
    let shown = env.coord.schedules().get(project, s.id).await.unwrap();
    assert!(next_run(&shown) > late && next_run(&shown) - late < 24 * 3600 * 1000);
}

#[tokio::test]
async fn play_runs_now_and_inactive_schedules_wait_to_be_played() {
    let env = env(CI).await;
    let project = env.project().await;
    let s = env
        .coord
        .schedules()
        .create(
            project,
            ScheduleRequest {
                active: Some(false),
                ..request("0 0 1 1 *", "UTC")
            },
        )
        .await
        .unwrap();
    assert!(!s.active);
    assert_eq!(s.next_run_at, None);
    // Never due while inactive, however late it is.
    assert_eq!(
        env.coord.run_due_schedules(i64::MAX / 2).await.unwrap(),
        Vec::<i64>::new()
    );
    let played = env
        .coord
        .play_pipeline_schedule(project, s.id)
        .await
        .unwrap();
    assert_eq!(played.source, "schedule");
    // Activated: a next run appears; played again, it stays.
    let active = env
        .coord
        .schedules()
        .update(
            project,
            s.id,
            ScheduleRequest {
                active: Some(true),
                ..ScheduleRequest::default()
            },
        )
        .await
        .unwrap();
    let next = next_run(&active);
    env.coord
        .play_pipeline_schedule(project, s.id)
        .await
        .unwrap();
    let shown = env.coord.schedules().get(project, s.id).await.unwrap();
    assert_eq!(next_run(&shown), next);
    assert_eq!(
        env.coord
            .schedule_pipelines(project, s.id)
            .await
            .unwrap()
            .len(),
        2
    );
    let listed = env.coord.schedules().list(project).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].variables, None);
    env.coord.schedules().delete(project, s.id).await.unwrap();
    assert!(matches!(
        env.coord.schedules().get(project, s.id).await,
        Err(CoordinatorError::NotFound(_))
    ));
}

#[tokio::test]
async fn bad_settings_are_refused_with_what_to_fix() {
    let env = env(CI).await;
    let project = env.project().await;
    let refused = |r: Result<ScheduleView, CoordinatorError>| match r {
        Err(CoordinatorError::Invalid(m)) => m,
        other => panic!("not refused: {other:?}"),
    };
    let m = refused(
        env.coord
            .schedules()
            .create(project, request("* * *", "UTC"))
            .await,
    );
    assert_eq!(
        m,
        "cron: cron `* * *` is invalid syntax: 3 fields where there are 5: minute hour day-of-month month day-of-week"
    );
    let m = refused(
        env.coord
            .schedules()
            .create(project, request("0 3 * * *", "Mars/Olympus"))
            .await,
    );
    assert!(
        m.starts_with("cron_timezone: `Mars/Olympus` is no time zone"),
        "{m}"
    );
    let m = refused(
        env.coord
            .schedules()
            .create(project, request("0 0 30 2 *", "UTC"))
            .await,
    );
    assert!(m.contains("it would never run"), "{m}");
    let m = refused(
        env.coord
            .schedules()
            .create(
                project,
                ScheduleRequest {
                    ref_name: Some("nope".into()),
                    ..request("0 3 * * *", "UTC")
                },
            )
            .await,
    );
    assert_eq!(m, "ref: `nope` is no branch or tag of demo");
    let m = refused(
        env.coord
            .schedules()
            .create(
                project,
                ScheduleRequest {
                    description: None,
                    ..request("0 3 * * *", "UTC")
                },
            )
            .await,
    );
    assert!(m.starts_with("description is missing"), "{m}");
    assert!(
        env.coord
            .schedules()
            .list(project)
            .await
            .unwrap()
            .is_empty()
    );

    let s = env
        .coord
        .schedules()
        .create(project, request("@daily", "UTC"))
        .await
        .unwrap();
    variable(&env, project, s.id, "A", "1", "env_var").await;
    let twice = env
        .coord
        .schedules()
        .set_variable(
            project,
            s.id,
            ScheduleVariable {
                key: "A".into(),
                value: "2".into(),
                variable_type: "env_var".into(),
            },
            true,
        )
        .await;
    assert!(
        matches!(twice, Err(CoordinatorError::Conflict(_))),
        "{twice:?}"
    );
    let bad_key = env
        .coord
        .schedules()
        .set_variable(
            project,
            s.id,
            ScheduleVariable {
                key: "NO-DASH".into(),
                value: "2".into(),
                variable_type: "env_var".into(),
            },
            true,
        )
        .await;
    assert!(
        matches!(bad_key, Err(CoordinatorError::Invalid(_))),
        "{bad_key:?}"
    );
    let removed = env
        .coord
        .schedules()
        .delete_variable(project, s.id, "A")
        .await
        .unwrap();
    assert_eq!(removed.value, "1");
}

#[tokio::test]
async fn a_schedule_whose_ref_is_gone_moves_on_without_a_pipeline() {
    let env = env(CI).await;
    let project = env.project().await;
    git(&env.repo, &["branch", "release"]);
    let s = env
        .coord
        .schedules()
        .create(
            project,
            ScheduleRequest {
                ref_name: Some("release".into()),
                ..request("*/5 * * * *", "UTC")
            },
        )
        .await
        .unwrap();
    git(&env.repo, &["branch", "-D", "release"]);
    let due = next_run(&s);
    assert_eq!(
        env.coord.run_due_schedules(due).await.unwrap(),
        Vec::<i64>::new()
    );
    let shown = env.coord.schedules().get(project, s.id).await.unwrap();
    assert_eq!(next_run(&shown), due + 5 * 60 * 1000);
    assert_eq!(shown.last_pipeline, None);
}

#[tokio::test]
async fn two_coordinators_run_a_due_schedule_once() {
    let env = env(CI).await;
    let project = env.project().await;
    let other = second_coordinator(&env).await;
    let s = env
        .coord
        .schedules()
        .create(project, request("* * * * *", "UTC"))
        .await
        .unwrap();
    let mut due = next_run(&s);
    for round in 0..3 {
        let (a, b) = tokio::join!(
            env.coord.run_due_schedules(due),
            other.run_due_schedules(due)
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.len() + b.len(), 1, "round {round}: {a:?} {b:?}");
        due = next_run(&env.coord.schedules().get(project, s.id).await.unwrap());
    }
    assert_eq!(
        env.coord
            .schedule_pipelines(project, s.id)
            .await
            .unwrap()
            .len(),
        3
    );
}
