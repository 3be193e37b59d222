#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::dummy::DummyGroup;

fn core(config: ScalerConfig) -> Core {
    Core::new(config, 100)
}

/// Adds a ready running instance idle since `since`.
fn ready(core: &mut Core, id: &str, since: Instant) {
    let mut record = Record::new(id.into(), State::Running, core.capacity(), since);
    record.readiness = Readiness::Ready;
    core.records.push(record);
}

fn idle(count: u32, idle_time: Duration) -> Policy {
    Policy {
        idle_count: count,
        idle_time,
        ..Policy::default()
    }
}

#[test]
fn one_use_instances_keep_five_idle_and_go_after_their_job() {
    let mut core = core(ScalerConfig {
        max_use_count: 1,
        ..ScalerConfig::default()
    });
    let now = Instant::now();
    let policy = idle(5, Duration::ZERO);
    assert_eq!(core.plan(now, &policy).increase, 5);
    for id in ["a", "b", "c", "d", "e"] {
        ready(&mut core, id, now);
    }
    assert_eq!(core.plan(now, &policy), Plan::default());
    let (id, slot, _) = core.take_slot().unwrap();
    assert_eq!(id, "a");
    // The job's instance is in use: one more keeps five idle.
    assert_eq!(core.plan(now, &policy).increase, 1);
    core.requested = 0;
    ready(&mut core, "f", now);
    core.release(&id, slot, now);
    let plan = core.plan(now, &policy);
    assert_eq!(plan.remove, vec![("a".to_string(), Removal::MaxUseCount)]);
    assert_eq!(plan.increase, 0);
}

#[test]
fn five_slots_per_instance_add_an_instance_when_fewer_than_five_are_free() {
    let mut core = core(ScalerConfig {
        capacity_per_instance: 5,
        ..ScalerConfig::default()
    });
    let now = Instant::now();
    let policy = idle(5, Duration::from_secs(600));
    assert_eq!(core.plan(now, &policy).increase, 1);
    ready(&mut core, "a", now);
    assert_eq!(core.plan(now, &policy).increase, 0);
    core.take_slot().unwrap();
    assert_eq!(core.plan(now, &policy).increase, 1, "4 free < 5");
}

#[test]
fn no_idle_target_scales_to_zero_once_idle_time_passed() {
    let mut core = core(ScalerConfig::default());
    let start = Instant::now();
    let policy = idle(0, Duration::from_secs(60));
    ready(&mut core, "a", start);
    assert_eq!(
        core.plan(start + Duration::from_secs(59), &policy),
        Plan::default()
    );
    let plan = core.plan(start + Duration::from_secs(60), &policy);
    assert_eq!(plan.remove, vec![("a".to_string(), Removal::IdleTime)]);
    // Not counted twice while its deletion is in flight.
    assert_eq!(
        core.plan(start + Duration::from_secs(61), &policy),
        Plan::default()
    );
}

#[test]
fn scale_down_takes_the_oldest_idle_instances_first_and_never_busy_ones() {
    let mut core = core(ScalerConfig::default());
    let start = Instant::now();
    ready(&mut core, "old", start);
    ready(&mut core, "busy", start);
    ready(&mut core, "new", start + Duration::from_secs(30));
    ready(&mut core, "newest", start + Duration::from_secs(40));
    core.records[1].slots[0] = true;
    let policy = idle(1, Duration::from_secs(10));
    let plan = core.plan(start + Duration::from_secs(45), &policy);
    // Needed: 1 busy + 1 idle = 2 instances; the oldest idle two of three go.
    assert_eq!(
        plan.remove,
        vec![
            ("old".to_string(), Removal::IdleTime),
            ("new".to_string(), Removal::IdleTime)
        ]
    );
}

#[test]
fn max_instances_counts_instances_being_deleted() {
    let mut core = core(ScalerConfig {
        max_instances: 3,
        ..ScalerConfig::default()
    });
    let now = Instant::now();
    ready(&mut core, "going", now);
    core.records[0].removing = Some((Removal::IdleTime, now));
    core.pending = 5;
    assert_eq!(core.plan(now, &Policy::default()).increase, 2);
    core.max_size = 1;
    core.records.clear();
    assert_eq!(
        core.plan(now, &Policy::default()).increase,
        1,
        "provider max_size"
    );
}

#[test]
fn scale_throttle_limits_new_instances_per_second_with_a_burst() {
    let mut core = core(ScalerConfig {
        scale_throttle: ScaleThrottle {
            limit: Some(1.0),
            burst: 3,
        },
        ..ScalerConfig::default()
    });
    core.pending = 10;
    let start = Instant::now();
    assert_eq!(
        core.plan(start, &Policy::default()).increase,
        3,
        "the burst"
    );
    core.requested = 3;
    assert_eq!(core.plan(start, &Policy::default()).increase, 0);
    let later = start + Duration::from_millis(2500);
    assert_eq!(
        core.plan(later, &Policy::default()).increase,
        2,
        "1 per second"
    );
    let mut unlimited = ScaleThrottle::default_for(0);
    unlimited.limit = None;
    core.config.scale_throttle = unlimited;
    core.requested = 0;
    assert_eq!(core.plan(later, &Policy::default()).increase, 10);
}

#[tokio::test]
async fn an_idle_instance_failing_its_heartbeat_is_replaced() {
    let group = Arc::new(DummyGroup::new());
    let (sink, seen) = events();
    let scaler = start(
        &group,
        ScalerConfig {
            update_interval: Duration::from_millis(100),
            update_interval_when_expecting: Duration::from_millis(20),
            policies: vec![idle(1, Duration::from_secs(60))],
            ..ScalerConfig::default()
        },
        serde_json::Value::Null,
        sink,
    )
    .await;
    until("an idle instance", || {
        scaler.status().instances.iter().any(|i| i.ready)
    })
    .await;
    // It stopped answering; the listing still says it runs.
    group.fail_heartbeat("dummy-1");
    until("a replacement", || {
        group.instances().iter().any(|i| i.id == "dummy-2")
    })
    .await;
    assert!(group.calls().contains(&"decrease dummy-1".to_string()));
    assert!(seen.lock().unwrap().iter().any(|e| {
        e.warning
            && e.message
                .starts_with("instance dummy-1 failed its heartbeat")
    }));
    scaler.shutdown().await;
}

#[test]
fn increases_not_yet_listed_are_capacity_in_flight() {
    let mut core = core(ScalerConfig::default());
    core.pending = 2;
    let now = Instant::now();
    assert_eq!(core.plan(now, &Policy::default()).increase, 2);
    core.requested = 2;
    assert_eq!(core.plan(now, &Policy::default()).increase, 0);
}

#[test]
fn exhausted_uses_are_unavailable_capacity() {
    let mut core = core(ScalerConfig {
        capacity_per_instance: 2,
        max_use_count: 3,
        ..ScalerConfig::default()
    });
    let now = Instant::now();
    ready(&mut core, "a", now);
    core.records[0].uses = 3;
    core.records[0].slots[0] = true;
    // One slot free but no use left for it: a second job needs a new instance.
    core.pending = 1;
    assert_eq!(core.plan(now, &Policy::default()).increase, 1);
}

#[test]
fn timeouts_failed_readiness_and_unhealthy_idle_instances_are_removed() {
    let mut core = core(ScalerConfig::default());
    let now = Instant::now();
    core.records
        .push(Record::new("t".into(), State::Timeout, 1, now));
    ready(&mut core, "r", now);
    core.records[1].readiness = Readiness::Failed("exit 1".into());
    ready(&mut core, "u", now);
    core.records[2].failures = 3;
    ready(&mut core, "busy-unhealthy", now);
    core.records[3].failures = 3;
    core.records[3].slots[0] = true;
    let plan = core.plan(now, &idle(0, Duration::from_secs(3600)));
    assert_eq!(
        plan.remove,
        vec![
            ("t".to_string(), Removal::Timeout),
            ("r".to_string(), Removal::ReadyCommand),
            ("u".to_string(), Removal::Unhealthy),
        ]
    );
    assert!(core.take_slot().is_none(), "unhealthy instances get no job");
}

#[test]
fn reservations_need_a_free_slot_in_preemptive_mode_and_room_otherwise() {
    let mut core = core(ScalerConfig {
        max_instances: 2,
        ..ScalerConfig::default()
    });
    let preemptive = idle(1, Duration::ZERO);
    assert!(!core.try_reserve(&preemptive));
    ready(&mut core, "a", Instant::now());
    assert!(core.try_reserve(&preemptive));
    assert!(
        !core.try_reserve(&preemptive),
        "the one free slot is reserved"
    );
    core.reserved = 0;
    let lazy = Policy::default();
    assert!(core.try_reserve(&lazy));
    assert!(core.try_reserve(&lazy));
    assert!(!core.try_reserve(&lazy), "max_instances × capacity reached");
}

#[test]
fn reservations_hold_capacity_against_scale_down_but_do_not_create_it() {
    let mut core = core(ScalerConfig::default());
    let now = Instant::now();
    core.reserved = 1;
    assert_eq!(core.plan(now, &Policy::default()).increase, 0);
    ready(&mut core, "a", now);
    assert_eq!(core.plan(now, &Policy::default()), Plan::default());
}

#[test]
fn the_last_matching_policy_applies_and_scale_factor_is_clamped() {
    let config = ScalerConfig {
        policies: vec![
            idle(1, Duration::ZERO),
            Policy {
                periods: vec![Cron::parse("* * * * sat,sun").unwrap()],
                idle_count: 7,
                ..Policy::default()
            },
        ],
        ..ScalerConfig::default()
    };
    // 2026-11-27 (Friday) and 2026-11-28 (Saturday), noon UTC.
    assert_eq!(config.policy_at(1_795_780_800).idle_count, 1);
    assert_eq!(config.policy_at(1_795_780_800 + 86_400).idle_count, 7);
    let factor = Policy {
        idle_count: 2,
        scale_factor: 0.5,
        scale_factor_limit: 10,
        ..Policy::default()
    };
    assert_eq!(factor.idle_target(0), 2);
    assert_eq!(factor.idle_target(9), 5);
    assert_eq!(factor.idle_target(100), 10);
    assert!(factor.preemptive());
    assert!(!Policy::default().preemptive());
}

#[test]
fn an_instance_vanishing_under_a_job_tells_the_job() {
    let mut core = core(ScalerConfig::default());
    let now = Instant::now();
    ready(&mut core, "a", now);
    let (_, _, lost) = core.take_slot().unwrap();
    let vanished = core.reconcile(Vec::new(), now, false);
    assert_eq!(vanished, vec!["a".to_string()]);
    assert_eq!(
        lost.borrow().as_deref(),
        Some("instance a unexpectedly removed")
    );
}

// The scaler against the in-memory group, with real (short) timers.

/// Starts a scaler on `group` (no readiness check) reporting to `sink`.
async fn start(
    group: &Arc<DummyGroup>,
    config: ScalerConfig,
    plugin_config: serde_json::Value,
    sink: EventSink,
) -> Taskscaler {
    let group: Arc<dyn InstanceGroup> = group.clone();
    Taskscaler::start(
        group,
        config,
        &plugin_config,
        ConnectorConfig::default(),
        None,
        sink,
    )
    .await
    .unwrap()
}

fn fast(config: ScalerConfig) -> ScalerConfig {
    ScalerConfig {
        update_interval: Duration::from_millis(200),
        update_interval_when_expecting: Duration::from_millis(20),
        shutdown_deletion_interval: Duration::from_millis(20),
        ..config
    }
}

fn events() -> (EventSink, Arc<Mutex<Vec<ScalerEvent>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    (
        Arc::new(move |event| sink.lock().unwrap().push(event)),
        seen,
    )
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_job_waits_for_an_instance_to_be_created_then_it_is_removed_when_idle() {
    let group = Arc::new(DummyGroup::new());
    let (sink, _) = events();
    let scaler = start(
        &group,
        fast(ScalerConfig {
            policies: vec![idle(0, Duration::from_millis(100))],
            ..ScalerConfig::default()
        }),
        serde_json::json!({"max_size": 3}),
        sink,
    )
    .await;
    assert_eq!(scaler.provider().max_size, 3);
    assert!(scaler.status().instances.is_empty());
    let reservation = scaler.reserve().unwrap();
    let acquisition = reservation.acquire().await.unwrap();
    assert_eq!(acquisition.instance_id(), "dummy-1");
    assert_eq!(acquisition.slot(), 0);
    let info = acquisition.connect_info().await.unwrap();
    assert_eq!(info.internal_addr, "127.0.0.1");
    drop(acquisition);
    until("the idle instance to go", || group.instances().is_empty()).await;
    assert!(group.calls().contains(&"decrease dummy-1".to_string()));
    scaler.shutdown().await;
    assert_eq!(group.calls().last().map(String::as_str), Some("shutdown"));
}

#[tokio::test]
async fn instances_found_at_start_are_removed() {
    let group = Arc::new(DummyGroup::new());
    group
        .init(&serde_json::Value::Null, ConnectorConfig::default())
        .await
        .unwrap();
    group.increase(2).await;
    let (sink, seen) = events();
    let scaler = start(
        &group,
        fast(ScalerConfig::default()),
        serde_json::Value::Null,
        sink,
    )
    .await;
    assert!(
        group
            .calls()
            .contains(&"decrease dummy-1,dummy-2".to_string())
    );
    until("pre-existing instances to go", || {
        group.instances().is_empty()
    })
    .await;
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|e| e.message == "removing instance dummy-1: preexisting")
    );
    scaler.shutdown().await;
}

#[tokio::test]
async fn a_timed_out_instance_is_decreased_and_replaced() {
    let group = Arc::new(DummyGroup::new());
    let (sink, _) = events();
    let scaler = start(
        &group,
        fast(ScalerConfig {
            policies: vec![idle(1, Duration::from_secs(60))],
            ..ScalerConfig::default()
        }),
        serde_json::Value::Null,
        sink,
    )
    .await;
    until("an idle instance", || {
        scaler.status().instances.iter().any(|i| i.ready)
    })
    .await;
    group.set_state("dummy-1", State::Timeout);
    until("a replacement", || {
        group.instances().iter().any(|i| i.id == "dummy-2")
    })
    .await;
    assert!(group.calls().contains(&"decrease dummy-1".to_string()));
    scaler.shutdown().await;
}

#[tokio::test]
async fn readiness_failures_remove_instances_and_jobs_only_get_ready_ones() {
    let group = Arc::new(DummyGroup::new());
    let (sink, seen) = events();
    let attempts = Arc::new(Mutex::new(0));
    let counter = Arc::clone(&attempts);
    let check: ReadyCheck = Arc::new(move |info: ConnectInfo| {
        let first = {
            let mut n = counter.lock().unwrap();
            *n += 1;
            *n == 1
        };
        Box::pin(async move {
            if first {
                Err(format!("{} is not ready: exit status 1", info.id))
            } else {
                Ok(())
            }
        })
    });
    let scaler = Taskscaler::start(
        group.clone(),
        fast(ScalerConfig::default()),
        &serde_json::Value::Null,
        ConnectorConfig::default(),
        Some(check),
        sink,
    )
    .await
    .unwrap();
    let acquisition = scaler.acquire().await.unwrap();
    assert_eq!(acquisition.instance_id(), "dummy-2");
    assert!(seen.lock().unwrap().iter().any(|e| e.warning
        && e.message
            == "instance dummy-1 failed its readiness check: dummy-1 is not ready: exit status 1"));
    drop(acquisition);
    scaler.shutdown().await;
}

#[tokio::test]
async fn acquiring_gives_up_after_the_timeout_when_the_group_is_full() {
    let group = Arc::new(DummyGroup::new());
    let (sink, _) = events();
    let scaler = start(
        &group,
        fast(ScalerConfig {
            instance_acquire_timeout: Duration::from_millis(300),
            ..ScalerConfig::default()
        }),
        serde_json::json!({"max_size": 1}),
        sink,
    )
    .await;
    let first = scaler.acquire().await.unwrap();
    let error = match scaler.acquire().await {
        Err(error) => error,
        Ok(_) => panic!("a second slot on a one-instance group"),
    };
    assert_eq!(
        error,
        ScalerError::AcquireTimeout(Duration::from_millis(300))
    );
    assert!(error.to_string().contains("instance_acquire_timeout"));
    // A waiting job gets the slot the first one releases.
    let second = tokio::spawn({
        let scaler = Arc::new(scaler);
        let waiter = Arc::clone(&scaler);
        async move {
            let acquisition = waiter.acquire().await.map(|a| a.instance_id().to_owned());
            (scaler, acquisition)
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(first);
    let (scaler, acquired) = second.await.unwrap();
    assert_eq!(acquired.unwrap(), "dummy-1");
    if let Ok(scaler) = Arc::try_unwrap(scaler) {
        scaler.shutdown().await;
    }
}

#[tokio::test]
async fn shutdown_deletes_instances_when_asked_and_wakes_waiting_jobs() {
    let group = Arc::new(DummyGroup::new());
    let (sink, _) = events();
    let scaler = start(
        &group,
        fast(ScalerConfig {
            delete_instances_on_shutdown: true,
            policies: vec![idle(2, Duration::from_secs(60))],
            ..ScalerConfig::default()
        }),
        serde_json::Value::Null,
        sink,
    )
    .await;
    until("two idle instances", || {
        scaler.status().instances.iter().filter(|i| i.ready).count() == 2
    })
    .await;
    scaler.shutdown().await;
    assert!(group.instances().is_empty());
    assert!(
        group
            .calls()
            .contains(&"decrease dummy-1,dummy-2".to_string())
    );
}

#[tokio::test]
async fn a_lost_instance_ends_the_jobs_wait_for_it() {
    let group = Arc::new(DummyGroup::new());
    let (sink, _) = events();
    let scaler = start(
        &group,
        fast(ScalerConfig::default()),
        serde_json::Value::Null,
        sink,
    )
    .await;
    let acquisition = scaler.acquire().await.unwrap();
    group.set_state("dummy-1", State::Deleted);
    let reason = tokio::time::timeout(Duration::from_secs(5), acquisition.lost())
        .await
        .unwrap();
    assert_eq!(reason, "instance dummy-1 unexpectedly removed");
    drop(acquisition);
    scaler.shutdown().await;
}

#[tokio::test]
async fn a_restarted_scaler_adopts_the_instances_of_its_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state").join("runner.json");
    let group = Arc::new(DummyGroup::new());
    let config = || {
        fast(ScalerConfig {
            max_use_count: 2,
            state_storage: Some(StateStorage {
                file: file.clone(),
                keep_instance_with_acquisitions: false,
                resume: Vec::new(),
            }),
            policies: vec![idle(0, Duration::from_secs(600))],
            ..ScalerConfig::default()
        })
    };
    let (sink, seen) = events();
    let scaler = start(
        &group,
        config(),
        serde_json::json!({"max_size": 3}),
        sink.clone(),
    )
    .await;
    let first = scaler.acquire().await.unwrap();
    let second = scaler.acquire().await.unwrap();
    assert_eq!(
        (first.instance_id(), second.instance_id()),
        ("dummy-1", "dummy-2")
    );
    drop(first);
    // The runner stops while the second job still runs.
    scaler.shutdown().await;
    drop(second);
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        saved,
        serde_json::json!({"instances": [
            {"id": "dummy-1", "uses": 1, "acquired": 0},
            {"id": "dummy-2", "uses": 1, "acquired": 1},
        ]})
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Started again: the idle instance is adopted with its use, the busy one removed.
    let scaler = start(&group, config(), serde_json::json!({"max_size": 3}), sink).await;
    assert!(group.calls().contains(&"decrease dummy-2".to_string()));
    let status = scaler.status();
    let adopted = status.instances.iter().find(|i| i.id == "dummy-1").unwrap();
    assert!(
        adopted.ready && adopted.removing.is_none() && adopted.uses == 1,
        "{status:?}"
    );
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|e| e.message == "adopted 1 instance(s) from the state file"
                || e.message == "removing instance dummy-2: restored_acquisitions")
    );
    // Its second (last) use, then it goes.
    let again = scaler.acquire().await.unwrap();
    assert_eq!(again.instance_id(), "dummy-1");
    drop(again);
    until("the used-up instance to go", || {
        group.instances().iter().all(|i| i.id != "dummy-1")
    })
    .await;
    scaler.shutdown().await;
}

/// A runner that stopped with jobs on two instances comes back to take one of them
/// over: that acquisition is restored (same instance and slot, counted once), the other
/// instance's job is nobody's and the instance goes; a key the file does not list, or
/// whose instance is gone, is refused with the reason.
#[tokio::test]
async fn a_restarted_scaler_restores_the_acquisitions_it_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runner.json");
    let group = Arc::new(DummyGroup::new());
    let config = |resume: &[&str]| {
        fast(ScalerConfig {
            max_use_count: 3,
            state_storage: Some(StateStorage {
                file: file.clone(),
                keep_instance_with_acquisitions: false,
                resume: resume.iter().map(|k| (*k).to_owned()).collect(),
            }),
            policies: vec![idle(0, Duration::from_secs(600))],
            ..ScalerConfig::default()
        })
    };
    let (sink, _) = events();
    let scaler = start(
        &group,
        config(&[]),
        serde_json::json!({"max_size": 4}),
        sink.clone(),
    )
    .await;
    let first = scaler.acquire().await.unwrap();
    let second = scaler.acquire().await.unwrap();
    let third = scaler.acquire().await.unwrap();
    first.keep_as("job-1");
    second.keep_as("job-2");
    let ids: Vec<String> = [&first, &second, &third]
        .iter()
        .map(|a| a.instance_id().to_owned())
        .collect();
    assert_eq!(ids, ["dummy-1", "dummy-2", "dummy-3"]);
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        saved["instances"][0],
        serde_json::json!({"id": "dummy-1", "uses": 1, "acquired": 1,
            "acquisitions": [{"key": "job-1", "slot": 0}]})
    );
    // The runner dies: nothing is released, the file stays as it is.
    std::mem::forget((first, second, third));
    scaler.shutdown().await;
    group.set_state("dummy-2", State::Deleted);

    let scaler = start(
        &group,
        config(&["job-1", "job-2", "job-9"]),
        serde_json::json!({"max_size": 4}),
        sink,
    )
    .await;
    let resumed = scaler.resume("job-1").unwrap();
    assert_eq!((resumed.instance_id(), resumed.slot()), ("dummy-1", 0));
    let status = scaler.status();
    let one = status.instances.iter().find(|i| i.id == "dummy-1").unwrap();
    assert_eq!(
        (one.acquired, one.uses, one.removing),
        (1, 1, None),
        "{status:?}"
    );
    // dummy-3's job is nobody's: the instance goes.
    assert!(group.calls().contains(&"decrease dummy-3".to_string()));
    let refused = |key: &str| match scaler.resume(key) {
        Err(ScalerError::NotRestored(why)) => why,
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("{key} resumed"),
    };
    assert!(refused("job-2").contains(
        "instance dummy-2 (in the taskscaler's state file) is no longer in the instance group"
    ),);
    assert!(refused("job-9").contains("lists no acquisition"));
    assert!(refused("job-1").contains("was not restored"), "not twice");
    // Released as any acquisition: the slot is free for the next job (its second use).
    drop(resumed);
    let again = scaler.acquire().await.unwrap();
    assert_eq!(again.instance_id(), "dummy-1");
    drop(again);
    scaler.shutdown().await;

    // Without state storage nothing is restored, and the reason says so.
    let scaler = start(
        &group,
        fast(ScalerConfig::default()),
        serde_json::json!({"max_size": 4}),
        events().0,
    )
    .await;
    match scaler.resume("job-1") {
        Err(ScalerError::NotRestored(why)) => assert!(why.contains("state_storage"), "{why}"),
        _ => panic!("resumed without state storage"),
    }
    scaler.shutdown().await;
}

#[tokio::test]
async fn an_unreadable_state_file_stops_the_start_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runner.json");
    std::fs::write(&file, "not json").unwrap();
    let (sink, _) = events();
    let error = match Taskscaler::start(
        Arc::new(DummyGroup::new()),
        ScalerConfig {
            state_storage: Some(StateStorage {
                file: file.clone(),
                keep_instance_with_acquisitions: false,
                resume: Vec::new(),
            }),
            ..ScalerConfig::default()
        },
        &serde_json::Value::Null,
        ConnectorConfig::default(),
        None,
        sink,
    )
    .await
    {
        Err(error) => error.to_string(),
        Ok(_) => panic!("started with a broken state file"),
    };
    assert!(
        error.contains("is not the taskscaler's JSON") && error.contains("move it away"),
        "{error}"
    );
}
