//! A plugin process that dies is started again and given its `Init` again
//! (`SupervisedPlugin`), with the dummy plugin as a real process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use gantry_fleet::plugin::{PluginLog, PluginOptions, SupervisedPlugin};
use gantry_fleet::{ConnectorConfig, InstanceGroup, ProviderError};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

const DUMMY: &str = env!("CARGO_BIN_EXE_fleeting-plugin-dummy");

#[tokio::test]
async fn a_dead_plugin_is_started_again_with_its_init() {
    let temp = tempfile::tempdir().unwrap();
    let logs = Arc::new(Mutex::new(Vec::<PluginLog>::new()));
    let sink = logs.clone();
    let options = PluginOptions {
        env: vec![(
            "PLUGIN_UNIX_SOCKET_DIR".into(),
            temp.path().display().to_string(),
        )],
        log: Arc::new(move |entry| sink.lock().unwrap().push(entry)),
        ..PluginOptions::default()
    };
    let plugin = SupervisedPlugin::start(Path::new(DUMMY), options)
        .await
        .unwrap();
    plugin
        .init(&json!({"max_size": 3}), ConnectorConfig::default())
        .await
        .unwrap();
    assert_eq!(plugin.increase(2).await.done, 2);
    assert_eq!(plugin.update().await.unwrap().len(), 2);
    let first = plugin.pid().await.unwrap();

    kill(Pid::from_raw(first as i32), Signal::SIGKILL).unwrap();
    // The exit is noticed by the next call (give the reaper a moment).
    let mut listing = None;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        if plugin.pid().await != Some(first) {
            listing = Some(plugin.update().await.unwrap());
            break;
        }
    }
    // The new process is a new (empty) dummy group, initialized with max_size 3.
    assert_eq!(listing, Some(Vec::new()));
    assert_eq!(plugin.restarts().await, 1);
    let second = plugin.pid().await.unwrap();
    assert_ne!(first, second);
    let partial = plugin.increase(4).await;
    assert_eq!(partial.done, 3);
    assert!(
        matches!(&partial.error, Some(ProviderError::Failed(m)) if m.contains("max_size of 3")),
        "{partial:?}"
    );
    let messages: Vec<String> = logs
        .lock()
        .unwrap()
        .iter()
        .map(|l| l.message.clone())
        .collect();
    assert!(
        messages.iter().any(|m| m.contains(&format!(
            "the plugin process (pid {first}) exited unexpectedly"
        ))),
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m == &format!("the plugin runs again (pid {second})")),
        "{messages:#?}"
    );
    plugin.kill().await;
    assert!(kill(Pid::from_raw(second as i32), None).is_err());
}
