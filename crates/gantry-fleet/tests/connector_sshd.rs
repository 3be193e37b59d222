#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `LocalSshd`'s lifecycle: it listens on loopback, and stopping or dropping it ends it.
//! Fails when sshd is missing: `scripts/test-sshd.sh install` provides it.

use std::time::Duration;

use gantry_fleet::sshd::{LocalSshd, generate_key};

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped) counts as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

#[tokio::test]
async fn starts_on_loopback_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = generate_key(dir.path(), "id").unwrap();
    assert!(public.starts_with("ssh-ed25519 "), "{public}");
    let sshd = LocalSshd::start(&dir.path().join("sshd"), &public)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sshd.address(), format!("127.0.0.1:{}", sshd.port()));
    assert!(!sshd.user().is_empty());
    let config = std::fs::read_to_string(sshd.dir().join("sshd_config")).unwrap();
    assert!(config.contains("PasswordAuthentication no"));
    let mut banner = [0u8; 8];
    let mut stream = tokio::net::TcpStream::connect(sshd.address())
        .await
        .unwrap();
    tokio::io::AsyncReadExt::read_exact(&mut stream, &mut banner)
        .await
        .unwrap();
    assert_eq!(&banner, b"SSH-2.0-");

    let pid = sshd.pid();
    let address = sshd.address();
    assert!(alive(pid));
    sshd.stop().await.unwrap();
    assert!(!alive(pid));
    assert!(tokio::net::TcpStream::connect(address).await.is_err());
}

#[tokio::test]
async fn two_servers_get_their_own_ports_and_drop_kills() {
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = generate_key(dir.path(), "id").unwrap();
    let a = LocalSshd::start(&dir.path().join("a"), &public)
        .await
        .unwrap();
    let b = LocalSshd::start(&dir.path().join("b"), &public)
        .await
        .unwrap();
    assert_ne!(a.port(), b.port());
    let pid = a.pid();
    drop(a);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while alive(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "sshd {pid} survived its LocalSshd");
    b.stop().await.unwrap();
}

#[test]
fn generate_key_replaces_existing_files() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first) = generate_key(dir.path(), "id").unwrap();
    let (_, second) = generate_key(dir.path(), "id").unwrap();
    assert_ne!(first, second);
    assert!(
        std::fs::read_to_string(path)
            .unwrap()
            .contains("OPENSSH PRIVATE KEY")
    );
}
