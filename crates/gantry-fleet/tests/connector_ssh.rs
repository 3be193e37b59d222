#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The SSH connector against a real OpenSSH server ([`LocalSshd`] on loopback). These tests
//! fail when sshd is missing: `scripts/test-sshd.sh install` provides it.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use gantry_fleet::connector::{ConnectError, Exit, Session, Stream};
use gantry_fleet::sshd::{LocalSshd, generate_key};
use gantry_fleet::{ConnectInfo, ConnectorConfig};
use tempfile::TempDir;

struct Fixture {
    dir: TempDir,
    sshd: LocalSshd,
    info: ConnectInfo,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = generate_key(&dir.path().join("client"), "id_ed25519").unwrap();
    let sshd = LocalSshd::start(&dir.path().join("sshd"), &public)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let info = connect_info(&sshd.address(), sshd.user(), std::fs::read(key).unwrap());
    Fixture { dir, sshd, info }
}

fn connect_info(address: &str, user: &str, key: Vec<u8>) -> ConnectInfo {
    ConnectInfo {
        connector: ConnectorConfig {
            os: "linux".into(),
            protocol: "ssh".into(),
            username: user.into(),
            key,
            timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(30),
            ..ConnectorConfig::default()
        },
        id: "local-1".into(),
        internal_addr: address.into(),
        ..ConnectInfo::default()
    }
}

async fn connect(fixture: &Fixture) -> Session {
    Session::connect(&fixture.info, false)
        .await
        .unwrap_or_else(|e| panic!("{e}\nsshd log:\n{}", fixture.sshd.log()))
}

/// Runs `command` and collects (stdout, stderr, exit).
async fn capture(session: &Session, command: &str, stdin: &[u8]) -> (Vec<u8>, Vec<u8>, Exit) {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let exit = session
        .run(command, stdin, &mut |stream, data| match stream {
            Stream::Stdout => stdout.extend_from_slice(data),
            Stream::Stderr => stderr.extend_from_slice(data),
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (stdout, stderr, exit)
}

#[tokio::test]
async fn run_streams_stdout_stderr_and_exit_code() {
    let fixture = fixture().await;
    let session = connect(&fixture).await;
    assert_eq!(session.instance_id(), "local-1");
    assert_eq!(session.address(), fixture.sshd.address());
    let (out, err, exit) = capture(&session, "echo out; echo err >&2; exit 3", b"").await;
    assert_eq!(out, b"out\n");
    assert_eq!(err, b"err\n");
    assert_eq!(exit, Exit::Code(3));
    assert!(!exit.success());

    let (_, _, exit) = capture(&session, "true", b"").await;
    assert!(exit.success());
    let (_, _, exit) = capture(&session, "kill -TERM $$", b"").await;
    assert_eq!(exit, Exit::Signal("TERM".into()));
    session.close().await.unwrap();
}

#[tokio::test]
async fn stdin_reaches_the_command() {
    let fixture = fixture().await;
    let session = connect(&fixture).await;
    let (out, _, exit) = capture(&session, "cat", b"hello\nworld\n").await;
    assert_eq!(out, b"hello\nworld\n");
    assert_eq!(exit, Exit::Code(0));

    // Several MiB both ways at once: the writer and the reader must not wait for each other.
    let big: Vec<u8> = (0..6 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let (out, _, exit) = capture(&session, "cat", &big).await;
    assert_eq!(exit, Exit::Code(0));
    assert!(
        out == big,
        "cat returned {} bytes of {}",
        out.len(),
        big.len()
    );

    // A command that does not read its stdin still ends.
    let (_, _, exit) = capture(&session, "exit 7", &big).await;
    assert_eq!(exit, Exit::Code(7));
}

#[tokio::test]
async fn large_output_arrives_intact() {
    let fixture = fixture().await;
    let session = connect(&fixture).await;
    let (out, err, exit) = capture(&session, "seq 1 1000000; seq 1 1000 >&2", b"").await;
    assert_eq!(exit, Exit::Code(0));
    let expected: String = (1..=1_000_000).map(|i| format!("{i}\n")).collect();
    assert!(expected.len() > 6 * 1024 * 1024);
    assert!(
        out == expected.as_bytes(),
        "got {} bytes of {}",
        out.len(),
        expected.len()
    );
    let expected_err: String = (1..=1000).map(|i| format!("{i}\n")).collect();
    assert_eq!(String::from_utf8(err).unwrap(), expected_err);
}

#[tokio::test]
async fn runs_share_a_session_concurrently() {
    let fixture = fixture().await;
    let session = connect(&fixture).await;
    let started = Instant::now();
    let (a, b) = tokio::join!(
        capture(&session, "sleep 1; echo a", b""),
        capture(&session, "sleep 1; echo b", b""),
    );
    assert_eq!((a.0, a.2), (b"a\n".to_vec(), Exit::Code(0)));
    assert_eq!((b.0, b.2), (b"b\n".to_vec(), Exit::Code(0)));
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(1900),
        "the runs took {elapsed:?}: not concurrent"
    );
}

#[tokio::test]
async fn a_dropped_run_closes_its_channel() {
    let fixture = fixture().await;
    let session = connect(&fixture).await;
    let run = capture(&session, "sleep 30", b"");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), run)
            .await
            .is_err()
    );
    let (out, _, exit) = capture(&session, "echo after sleep", b"").await;
    assert_eq!((out, exit), (b"after sleep\n".to_vec(), Exit::Code(0)));

    // More dropped runs than the server's MaxSessions (20): had their channels stayed open,
    // the server would refuse new ones. (These commands write, so they notice the close;
    // OpenSSH keeps a session until its command exits, see `Session::run`.)
    for _ in 0..25 {
        let run = capture(&session, "while echo tick; do sleep 0.05; done", b"");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), run)
                .await
                .is_err()
        );
    }
    // Dropped while the channel is still being opened.
    for _ in 0..25 {
        let run = capture(&session, "while echo tick; do sleep 0.05; done", b"");
        assert!(
            tokio::time::timeout(Duration::from_micros(50), run)
                .await
                .is_err()
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (out, _, exit) = capture(&session, "echo still", b"").await;
    assert_eq!((out, exit), (b"still\n".to_vec(), Exit::Code(0)));
}

/// (mode, content or link target) of every entry under `root`, by relative path.
fn snapshot(root: &Path) -> BTreeMap<String, (u32, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap().display().to_string();
                out.insert(rel, (0, format!("-> {target}")));
            } else if meta.is_dir() {
                out.insert(rel, (mode, "dir".into()));
                walk(root, &path, out);
            } else {
                out.insert(rel, (mode, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("src/nested")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(root.join("src/nested/data.txt"), "nested data\n").unwrap();
    std::fs::set_permissions(
        root.join("src/nested/data.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::fs::set_permissions(root.join("empty"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink("run.sh", root.join("link")).unwrap();
    // A dangling symlink is copied as a link too.
    std::os::unix::fs::symlink("/nonexistent/target", root.join("dangling")).unwrap();
}

#[tokio::test]
async fn upload_then_download_keeps_files_modes_links_and_empty_dirs() {
    let fixture = fixture().await;
    let session = connect(&fixture).await;
    let local = fixture.dir.path().join("local");
    make_tree(&local);
    // The "instance" is this machine: its paths are ours.
    let remote = fixture.dir.path().join("remote tree/with 'quotes'");
    std::fs::create_dir_all(&remote).unwrap();
    std::fs::write(remote.join("stale"), "removed by the upload").unwrap();
    let remote_str = remote.to_str().unwrap();

    let sent = session
        .upload_dir(&local, remote_str)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        sent,
        ("#!/bin/sh\necho ran\n".len() + "nested data\n".len()) as u64
    );
    assert_eq!(snapshot(&remote), snapshot(&local));
    let (out, _, exit) = capture(
        &session,
        &format!("cd '{}' && ./link", remote_str.replace('\'', r"'\''")),
        b"",
    )
    .await;
    assert_eq!((out, exit), (b"ran\n".to_vec(), Exit::Code(0)));

    let back = fixture.dir.path().join("back");
    std::fs::create_dir_all(back.join("old/dir")).unwrap();
    std::fs::write(back.join("old/dir/file"), "removed by the download").unwrap();
    let received = session
        .download_dir(remote_str, &back)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(received, sent);
    assert_eq!(snapshot(&back), snapshot(&local));

    // Into a directory that does not exist yet.
    let fresh = fixture.dir.path().join("fresh/sub");
    session.download_dir(remote_str, &fresh).await.unwrap();
    assert_eq!(snapshot(&fresh), snapshot(&local));
}

#[tokio::test]
async fn a_large_tree_streams_both_ways() {
    let fixture = fixture().await;
    let session = connect(&fixture).await;
    let local = fixture.dir.path().join("big");
    std::fs::create_dir_all(&local).unwrap();
    let mut total = 0u64;
    for i in 0..40 {
        let content: Vec<u8> = (0..256 * 1024u32).map(|b| ((b + i) % 253) as u8).collect();
        total += content.len() as u64;
        std::fs::write(local.join(format!("f{i}")), content).unwrap();
    }
    let remote = fixture.dir.path().join("big-remote");
    let sent = session
        .upload_dir(&local, remote.to_str().unwrap())
        .await
        .unwrap();
    assert_eq!(sent, total);
    let back = fixture.dir.path().join("big-back");
    let received = session
        .download_dir(remote.to_str().unwrap(), &back)
        .await
        .unwrap();
    assert_eq!(received, total);
    for i in 0..40 {
        let name = format!("f{i}");
        assert!(
            std::fs::read(local.join(&name)).unwrap() == std::fs::read(back.join(&name)).unwrap()
        );
    }
}

#[tokio::test]
async fn transfer_failures_name_the_remote_error() {
    let fixture = fixture().await;
    let session = connect(&fixture).await;
    let missing = fixture.dir.path().join("does-not-exist");
    let error = session
        .download_dir(missing.to_str().unwrap(), &fixture.dir.path().join("x"))
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::Remote { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("local-1") && message.contains("does-not-exist"),
        "{message}"
    );

    // A regular file where the remote directory's parent should be: mkdir fails.
    let file = fixture.dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let local = fixture.dir.path().join("local");
    make_tree(&local);
    let error = session
        .upload_dir(&local, &format!("{}/sub", file.display()))
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::Remote { .. }), "{error:?}");
    assert!(error.to_string().contains("Not a directory"), "{error}");

    let error = session.upload_dir(&local, "/").await.unwrap_err();
    assert!(
        matches!(error, ConnectError::RemotePath { .. }),
        "{error:?}"
    );
    let error = session
        .upload_dir(&fixture.dir.path().join("no-such-dir"), "x")
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::Local { .. }), "{error:?}");
    // The session still works after failed transfers.
    let (out, _, _) = capture(&session, "echo ok", b"").await;
    assert_eq!(out, b"ok\n");
}

#[tokio::test]
async fn a_wrong_key_is_rejected_without_retrying() {
    let fixture = fixture().await;
    let (other, _) = generate_key(&fixture.dir.path().join("other"), "id_other").unwrap();
    let mut info = fixture.info.clone();
    info.connector.key = std::fs::read(other).unwrap();
    let started = Instant::now();
    let error = Session::connect(&info, false).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(error, ConnectError::AuthRejected { .. }),
        "{error:?}"
    );
    assert!(
        elapsed < Duration::from_secs(3),
        "took {elapsed:?}: retried?"
    );
    let message = error.to_string();
    assert!(
        message.contains(&fixture.sshd.address()) && message.contains("SHA256:"),
        "{message}"
    );
}

#[tokio::test]
async fn a_closed_port_fails_after_the_timeout_naming_the_address() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let address = format!("127.0.0.1:{port}");
    let mut info = connect_info(&address, "root", b"unused".to_vec());
    info.connector.key.clear();
    info.connector.password = "unused".into();
    info.connector.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let error = Session::connect(&info, false).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(error, ConnectError::Unreachable { attempts: 2.., .. }),
        "{error:?}"
    );
    assert!(
        elapsed >= Duration::from_millis(1900) && elapsed < Duration::from_secs(4),
        "gave up after {elapsed:?}"
    );
    assert!(error.to_string().contains(&address), "{error}");

    // Zero timeout: one attempt.
    info.connector.timeout = Duration::ZERO;
    let error = Session::connect(&info, false).await.unwrap_err();
    assert!(
        matches!(error, ConnectError::Unreachable { attempts: 1, .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn connecting_retries_until_the_server_is_up() {
    let fixture = fixture().await;
    // A port that refuses connections now and forwards to sshd in a moment.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut info = fixture.info.clone();
    info.internal_addr = "127.0.0.1".into();
    info.connector.protocol_port = port; // the address names no port
    let upstream = fixture.sshd.address();
    let forwarder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        loop {
            let (mut inbound, _) = listener.accept().await.unwrap();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    let started = Instant::now();
    let session = Session::connect(&info, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(started.elapsed() >= Duration::from_millis(1400));
    assert_eq!(session.address(), format!("127.0.0.1:{port}"));
    let (out, _, _) = capture(&session, "echo up", b"").await;
    assert_eq!(out, b"up\n");
    forwarder.abort();
}

#[tokio::test]
async fn winrm_is_not_supported() {
    let mut info = connect_info("10.0.0.1", "Administrator", Vec::new());
    info.connector.protocol = "winrm".into();
    let error = Session::connect(&info, false).await.unwrap_err();
    assert!(
        matches!(error, ConnectError::UnsupportedProtocol { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("winrm") && message.contains("local-1"),
        "{message}"
    );
}

#[tokio::test]
async fn bad_configs_are_reported_before_dialing() {
    let mut info = connect_info("10.0.0.1", "root", b"not a key".to_vec());
    let error = Session::connect(&info, false).await.unwrap_err();
    assert!(
        matches!(error, ConnectError::Credentials { .. }),
        "{error:?}"
    );
    info.connector.key.clear();
    let error = Session::connect(&info, false).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("neither a private key nor a password"),
        "{error}"
    );
    info.connector.password = "pw".into();
    info.internal_addr = "host:notaport".into();
    let error = Session::connect(&info, false).await.unwrap_err();
    assert!(
        matches!(error, ConnectError::InvalidAddress { .. }),
        "{error:?}"
    );
    info.internal_addr.clear();
    let error = Session::connect(&info, false).await.unwrap_err();
    assert!(
        matches!(error, ConnectError::InvalidAddress { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_external_address_is_used_when_asked() {
    let fixture = fixture().await;
    let mut info = fixture.info.clone();
    info.external_addr = info.internal_addr.clone();
    info.internal_addr = "127.0.0.1:1".into(); // nothing listens there
    info.connector.timeout = Duration::ZERO;
    let session = Session::connect(&info, true)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    session.close().await.unwrap();
    assert!(Session::connect(&info, false).await.is_err());
}

#[tokio::test]
async fn sessions_and_their_futures_can_move_across_tasks() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let fixture = fixture().await;
    let session = std::sync::Arc::new(connect(&fixture).await);
    send_sync(&session);
    let mut sink = |_: Stream, _: &[u8]| {};
    let run = session.run("true", b"", &mut sink);
    send(&run);
    drop(run);
    let local = fixture.dir.path().to_path_buf();
    send(&session.upload_dir(&local, "x"));
    send(&session.download_dir("x", &local));
    let shared = std::sync::Arc::clone(&session);
    let exit =
        tokio::spawn(async move { shared.run("exit 4", b"", &mut |_, _| {}).await.unwrap() })
            .await
            .unwrap();
    assert_eq!(exit, Exit::Code(4));
}

#[tokio::test]
async fn rsa_and_ecdsa_keys_authenticate_in_openssh_and_pem_formats() {
    // Keys as users have them: `ssh-keygen`'s default OpenSSH format and the older PEM
    // (`-m PEM`), RSA (signed with SHA-2, as OpenSSH servers require) and ECDSA.
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str]); 4] = [
        ("id_rsa", &["-t", "rsa", "-b", "3072"]),
        ("id_rsa_pem", &["-t", "rsa", "-b", "2048", "-m", "PEM"]),
        ("id_ecdsa", &["-t", "ecdsa", "-b", "256"]),
        ("id_ecdsa_pem", &["-t", "ecdsa", "-b", "384", "-m", "PEM"]),
    ];
    for (name, args) in cases {
        let key = dir.path().join(name);
        let status = std::process::Command::new("ssh-keygen")
            .args(args)
            .args(["-q", "-N", "", "-C", name, "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(status.success(), "ssh-keygen {args:?}");
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let sshd = LocalSshd::start(&dir.path().join(format!("sshd-{name}")), &public)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let info = connect_info(&sshd.address(), sshd.user(), std::fs::read(&key).unwrap());
        let session = Session::connect(&info, false)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}\nsshd log:\n{}", sshd.log()));
        let (out, _, exit) = capture(&session, "echo signed-in", b"").await;
        assert_eq!(
            (out.as_slice(), exit),
            (&b"signed-in\n"[..], Exit::Code(0)),
            "{name}"
        );
        sshd.stop().await.unwrap();
    }
}

#[tokio::test]
async fn dial_run_is_a_byte_stream_to_a_remote_command() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fixture = fixture().await;
    let session = connect(&fixture).await;
    // `sed` answers line by line: a request/response exchange over one stream.
    let mut tunnel = session
        .dial_run("exec sed -u 's/^/echo: /'")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for line in ["one", "two"] {
        tunnel
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        tunnel.flush().await.unwrap();
        let mut answer = vec![0u8; format!("echo: {line}\n").len()];
        tokio::time::timeout(Duration::from_secs(10), tunnel.read_exact(&mut answer))
            .await
            .expect("the answer arrives")
            .unwrap();
        assert_eq!(
            String::from_utf8(answer).unwrap(),
            format!("echo: {line}\n")
        );
    }
    // Closing our side ends the command's input: it exits and the stream ends.
    tunnel.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tunnel.read_to_end(&mut rest))
        .await
        .expect("the stream ends")
        .unwrap();
    assert!(rest.is_empty(), "{rest:?}");

    // Several tunnels share the session with ordinary runs.
    let (a, b) = tokio::join!(session.dial_run("cat"), session.dial_run("cat"));
    let (mut a, mut b) = (a.unwrap(), b.unwrap());
    a.write_all(b"a").await.unwrap();
    b.write_all(b"b").await.unwrap();
    let (mut x, mut y) = ([0u8; 1], [0u8; 1]);
    a.read_exact(&mut x).await.unwrap();
    b.read_exact(&mut y).await.unwrap();
    assert_eq!((&x, &y), (b"a", b"b"));
    let (out, _, exit) = capture(&session, "echo still here", b"").await;
    assert_eq!(
        (out.as_slice(), exit),
        (&b"still here\n"[..], Exit::Code(0))
    );
}

#[tokio::test]
async fn dial_unix_reaches_a_socket_on_the_instance() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fixture = fixture().await;
    let path = fixture.dir.path().join("echo.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 4];
        stream.read_exact(&mut request).await.unwrap();
        stream.write_all(b"pong").await.unwrap();
        request
    });
    let session = connect(&fixture).await;
    let mut tunnel = session
        .dial_unix(path.to_str().unwrap())
        .await
        .unwrap_or_else(|e| panic!("{e}\nsshd log:\n{}", fixture.sshd.log()));
    tunnel.write_all(b"ping").await.unwrap();
    let mut answer = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), tunnel.read_exact(&mut answer))
        .await
        .expect("the answer arrives")
        .unwrap();
    assert_eq!(&answer, b"pong");
    assert_eq!(&server.await.unwrap(), b"ping");

    // A socket nobody listens on: the server refuses the forward, named in the error.
    let missing = fixture.dir.path().join("missing.sock");
    let error = session
        .dial_unix(missing.to_str().unwrap())
        .await
        .expect_err("nothing listens there");
    let message = error.to_string();
    assert!(
        message.contains("forward to the socket") && message.contains("missing.sock"),
        "{message}"
    );
}
