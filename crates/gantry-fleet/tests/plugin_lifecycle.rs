//! The host and the SDK together: the `fleeting-plugin-dummy` binary driven over gRPC
//! through a real process and a real Unix socket.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gantry_fleet::plugin::{PluginClient, PluginLog, PluginOptions};
use gantry_fleet::{ConnectorConfig, InstanceGroup, ProviderError, State};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

const DUMMY: &str = env!("CARGO_BIN_EXE_fleeting-plugin-dummy");

/// Options that put the plugin's socket into `dir` and collect its logs.
fn options(dir: &Path) -> (PluginOptions, Arc<Mutex<Vec<PluginLog>>>) {
    let logs = Arc::new(Mutex::new(Vec::new()));
    let sink = logs.clone();
    let options = PluginOptions {
        env: vec![
            ("PLUGIN_UNIX_SOCKET_DIR".into(), dir.display().to_string()),
            ("DUMMY".into(), DUMMY.into()),
        ],
        log: Arc::new(move |entry| sink.lock().unwrap().push(entry)),
        ..PluginOptions::default()
    };
    (options, logs)
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn is_running(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
}

#[tokio::test]
async fn the_dummy_plugin_lives_its_whole_life_over_grpc() {
    let temp = tempfile::tempdir().unwrap();
    let (options, _) = options(temp.path());
    let plugin = PluginClient::start(Path::new(DUMMY), options)
        .await
        .unwrap();
    assert_eq!(plugin.name(), "fleeting-plugin-dummy");
    let socket = PathBuf::from(&plugin.handshake().address);
    assert!(socket.starts_with(temp.path()), "{}", socket.display());
    assert!(socket.exists());

    let error = plugin
        .init(
            &json!({"max_size": 2, "bogus": true}),
            ConnectorConfig::default(),
        )
        .await
        .unwrap_err();
    match error {
        ProviderError::Failed(message) => {
            assert!(
                message.starts_with("plugin_config: unknown field `bogus`"),
                "{message}"
            )
        }
        other => panic!("expected Failed, got {other:?}"),
    }

    let settings = ConnectorConfig {
        os: "linux".into(),
        protocol: "ssh".into(),
        protocol_port: 2222,
        username: "root".into(),
        key: b"-----BEGIN OPENSSH PRIVATE KEY-----\n".to_vec(),
        keepalive: Duration::from_secs(30),
        timeout: Duration::from_secs(600),
        ..ConnectorConfig::default()
    };
    let info = plugin
        .init(
            &json!({"max_size": 2, "name": "ci", "address": "10.1.2.3"}),
            settings.clone(),
        )
        .await
        .unwrap();
    assert_eq!(info.id, "dummy/ci");
    assert_eq!(info.max_size, 2);
    assert!(info.capabilities.is_empty());

    let increased = plugin.increase(3).await;
    assert_eq!(increased.done, 2);
    assert_eq!(
        increased.error,
        Some(ProviderError::Failed(
            "the group is at its max_size of 2".into()
        ))
    );

    let first = plugin.update().await.unwrap();
    let states: Vec<_> = first.iter().map(|i| (i.id.as_str(), i.state)).collect();
    assert_eq!(
        states,
        [("dummy-1", State::Creating), ("dummy-2", State::Creating)]
    );
    let second = plugin.update().await.unwrap();
    assert!(second.iter().all(|i| i.state == State::Running));

    let connect = plugin.connect_info("dummy-1").await.unwrap();
    assert_eq!(connect.id, "dummy-1");
    assert_eq!(connect.internal_addr, "10.1.2.3");
    assert_eq!(connect.connector, settings);
    assert_eq!(connect.expires, None);

    plugin.heartbeat("dummy-2").await.unwrap();
    assert_eq!(
        plugin.heartbeat("dummy-9").await,
        Err(ProviderError::Unhealthy("dummy-9 does not exist".into()))
    );

    let decreased = plugin
        .decrease(&["dummy-1".into(), "long-gone".into()])
        .await;
    assert_eq!(decreased.done, ["dummy-1", "long-gone"]);
    assert_eq!(decreased.error, None);
    let third = plugin.update().await.unwrap();
    assert!(
        third
            .iter()
            .any(|i| i.id == "dummy-1" && i.state == State::Deleting)
    );

    let suspended = plugin.suspend(&["dummy-2".into()]).await;
    assert!(suspended.done.is_empty());
    assert_eq!(
        suspended.error,
        Some(ProviderError::NotSupported("suspend".into()))
    );
    plugin.shutdown().await.unwrap();

    let pid = plugin.pid();
    let started = Instant::now();
    plugin.kill().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(!is_running(pid), "the plugin still runs");
    assert!(!socket.exists(), "the socket is still there");
    assert_eq!(fs::read_dir(temp.path()).unwrap().count(), 0, "leftovers");
}

#[tokio::test]
async fn a_plugin_killed_behind_the_hosts_back_fails_every_call_by_name() {
    let temp = tempfile::tempdir().unwrap();
    let (options, _) = options(temp.path());
    let plugin = PluginClient::start(Path::new(DUMMY), options)
        .await
        .unwrap();
    plugin
        .init(&serde_json::Value::Null, ConnectorConfig::default())
        .await
        .unwrap();
    kill(Pid::from_raw(plugin.pid() as i32), Signal::SIGKILL).unwrap();

    let expected = format!(
        "plugin fleeting-plugin-dummy (pid {}) is not running: it exited (signal: 9 (SIGKILL))",
        plugin.pid()
    );
    assert_eq!(
        plugin.update().await,
        Err(ProviderError::Failed(expected.clone()))
    );
    assert_eq!(
        plugin.exit_status().and_then(|s| {
            use std::os::unix::process::ExitStatusExt;
            s.signal()
        }),
        Some(9)
    );
    let increased = plugin.increase(1).await;
    assert_eq!(increased.done, 0);
    assert_eq!(increased.error, Some(ProviderError::Failed(expected)));
    plugin.kill().await;
}

#[tokio::test]
async fn a_plugin_that_ignores_shutdown_is_killed_with_its_process_group_after_the_grace() {
    let temp = tempfile::tempdir().unwrap();
    // The dummy serves and obeys Shutdown, but the script around it (the process the
    // host started) lingers on: only a SIGKILL to the group ends it.
    let path = script(
        temp.path(),
        "fleeting-plugin-stubborn",
        "\"$DUMMY\"\nexec sleep 30",
    );
    let (mut options, _) = options(temp.path());
    options.kill_grace = Duration::from_millis(500);
    let plugin = PluginClient::start(&path, options).await.unwrap();
    let pid = plugin.pid();
    let started = Instant::now();
    plugin.kill().await;
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(2000), "{elapsed:?}");
    assert!(!is_running(pid), "the plugin still runs");
}

#[tokio::test]
async fn dropping_the_client_kills_the_plugin() {
    let temp = tempfile::tempdir().unwrap();
    let (options, _) = options(temp.path());
    let plugin = PluginClient::start(Path::new(DUMMY), options)
        .await
        .unwrap();
    let pid = plugin.pid();
    drop(plugin);
    let deadline = Instant::now() + Duration::from_secs(3);
    while is_running(pid) {
        assert!(Instant::now() < deadline, "the plugin outlived its client");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
