//! How the host fails when a plugin misbehaves, with plugins written as shell scripts,
//! and how the plugin SDK refuses to run without its host.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gantry_fleet::plugin::{
    DEFAULT_COOKIE_KEY, HandshakeError, LogLevel, PluginClient, PluginError, PluginLog,
    PluginOptions,
};
use nix::sys::signal::kill;
use nix::unistd::Pid;
use serde_json::json;

const DUMMY: &str = env!("CARGO_BIN_EXE_fleeting-plugin-dummy");

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn options(dir: &Path) -> PluginOptions {
    PluginOptions {
        start_timeout: Duration::from_secs(10),
        env: vec![
            ("PLUGIN_UNIX_SOCKET_DIR".into(), dir.display().to_string()),
            ("DUMMY".into(), DUMMY.into()),
        ],
        ..PluginOptions::default()
    }
}

async fn start_error(path: &Path, options: PluginOptions) -> PluginError {
    match PluginClient::start(path, options).await {
        Ok(plugin) => {
            plugin.kill().await;
            panic!("{} started", path.display())
        }
        Err(error) => error,
    }
}

async fn wait_gone(pid_file: &Path) {
    let pid: i32 = fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while kill(Pid::from_raw(pid), None).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the failed plugin {pid} still runs"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_banner_before_the_handshake_is_refused_and_the_plugin_killed() {
    let temp = tempfile::tempdir().unwrap();
    let pid_file = temp.path().join("pid");
    let path = script(
        temp.path(),
        "fleeting-plugin-banner",
        &format!(
            "echo $$ > {}\necho 'Name: fleeting-plugin-banner Version: 1.0.0'\nexec sleep 30",
            pid_file.display()
        ),
    );
    let error = start_error(&path, options(temp.path())).await;
    assert!(
        matches!(
            &error,
            PluginError::Handshake {
                source: HandshakeError::Unrecognized { .. },
                ..
            }
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with(
            "start plugin fleeting-plugin-banner: Unrecognized remote plugin message: \
             Name: fleeting-plugin-banner Version: 1.0.0\n"
        ),
        "{message}"
    );
    assert!(
        message.contains("must print nothing to stdout"),
        "{message}"
    );
    wait_gone(&pid_file).await;
}

#[tokio::test]
async fn a_plugin_that_never_answers_times_out() {
    let temp = tempfile::tempdir().unwrap();
    let pid_file = temp.path().join("pid");
    let path = script(
        temp.path(),
        "fleeting-plugin-silent",
        &format!("echo $$ > {}\nexec sleep 30", pid_file.display()),
    );
    let mut options = options(temp.path());
    options.start_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let error = start_error(&path, options).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        error
            .to_string()
            .starts_with("start plugin fleeting-plugin-silent: no handshake line within 300ms"),
        "{error}"
    );
    wait_gone(&pid_file).await;
}

#[tokio::test]
async fn a_plugin_that_exits_at_once_reports_its_status_and_stderr() {
    let temp = tempfile::tempdir().unwrap();
    let path = script(
        temp.path(),
        "fleeting-plugin-broken",
        "echo 'loading config' >&2\necho 'fatal: HCLOUD_TOKEN is not set' >&2\nexit 3",
    );
    let error = start_error(&path, options(temp.path())).await;
    assert_eq!(
        error.to_string(),
        "start plugin fleeting-plugin-broken: it exited (exit status: 3) before printing its \
         handshake line; the end of its stderr:\n  loading config\n  fatal: HCLOUD_TOKEN is not set"
    );
}

#[tokio::test]
async fn a_wrong_core_version_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    let path = script(
        temp.path(),
        "fleeting-plugin-future",
        "echo '2|1|unix|/nonexistent.sock|grpc|'\nexec sleep 30",
    );
    let error = start_error(&path, options(temp.path())).await;
    assert!(
        matches!(
            &error,
            PluginError::Handshake {
                source: HandshakeError::IncompatibleCore { version: 2 },
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("incompatible core API version"),
        "{error}"
    );
}

#[tokio::test]
async fn stderr_log_lines_reach_the_hosts_log_with_level_and_fields() {
    let temp = tempfile::tempdir().unwrap();
    let path = script(
        temp.path(),
        "fleeting-plugin-chatty",
        "echo '{\"@level\":\"warn\",\"@message\":\"rate limited\",\"@timestamp\":\"2024-01-02T03:04:05.000000Z\",\"@module\":\"cloud\",\"retry_in\":5}' >&2\n\
         echo '[ERROR] plain and tagged' >&2\n\
         exec \"$DUMMY\"",
    );
    let logs = Arc::new(Mutex::new(Vec::<PluginLog>::new()));
    let sink = logs.clone();
    let mut options = options(temp.path());
    options.log = Arc::new(move |entry| sink.lock().unwrap().push(entry));
    let plugin = PluginClient::start(&path, options).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while logs.lock().unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "{:?}", logs.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    plugin.kill().await;
    let logs = logs.lock().unwrap();
    assert_eq!(logs[0].plugin, "fleeting-plugin-chatty");
    assert_eq!(logs[0].level, LogLevel::Warn);
    assert_eq!(logs[0].message, "rate limited");
    assert_eq!(
        serde_json::Value::Object(logs[0].fields.clone()),
        json!({"@module": "cloud", "retry_in": 5})
    );
    assert_eq!(logs[1].level, LogLevel::Error);
    assert_eq!(logs[1].message, "plain and tagged");
}

#[test]
fn the_plugin_run_by_hand_says_it_is_a_plugin_and_exits_1() {
    let output = Command::new(DUMMY)
        .env_remove(DEFAULT_COOKIE_KEY)
        .env_remove("GANTRY_FLEETING_COOKIE_KEY")
        .env_remove("GANTRY_FLEETING_COOKIE_VALUE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with(
            "This binary is a plugin. These are not meant to be executed directly.\n\
             Please execute the program that consumes these plugins, which will\n\
             load any plugins automatically\n"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("magic cookie FLEETING_PLUGIN"), "{stderr}");
}

#[test]
fn the_version_flag_prints_name_and_version() {
    let output = Command::new(DUMMY).arg("--version").output().unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        format!("fleeting-plugin-dummy {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn an_overridden_cookie_is_accepted_and_the_plugin_stops_when_its_stdin_closes() {
    let temp = tempfile::tempdir().unwrap();
    let mut child = Command::new(DUMMY)
        .env_remove(DEFAULT_COOKIE_KEY)
        .env("GANTRY_FLEETING_COOKIE_KEY", "TEST_COOKIE")
        .env("GANTRY_FLEETING_COOKIE_VALUE", "let-me-in")
        .env("TEST_COOKIE", "let-me-in")
        .env("PLUGIN_PROTOCOL_VERSIONS", "1")
        .env("PLUGIN_UNIX_SOCKET_DIR", temp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let prefix = format!("1|1|unix|{}/plugin", temp.path().display());
    assert!(line.starts_with(&prefix), "{line}");
    assert!(line.ends_with("/plugin.sock|grpc|\n"), "{line}");
    let socket = PathBuf::from(line.split('|').nth(3).unwrap());
    assert!(socket.exists());
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!socket.exists());
    assert_eq!(fs::read_dir(temp.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_handshake_naming_a_socket_nobody_serves_fails_to_connect() {
    let temp = tempfile::tempdir().unwrap();
    let socket = temp.path().join("nobody.sock");
    let path = script(
        temp.path(),
        "fleeting-plugin-liar",
        &format!("echo '1|1|unix|{}|grpc|'\nexec sleep 30", socket.display()),
    );
    let error = start_error(&path, options(temp.path())).await;
    assert!(matches!(error, PluginError::Connect { .. }), "{error}");
    assert!(
        error.to_string().contains("No such file or directory"),
        "{error}"
    );
    assert!(
        error.to_string().starts_with(&format!(
            "connect to plugin fleeting-plugin-liar at {}: ",
            socket.display()
        )),
        "{error}"
    );
}
