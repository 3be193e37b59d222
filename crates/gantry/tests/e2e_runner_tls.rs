//! The runner's `tls-ca-file`, `tls-cert-file` and `tls-key-file` end to end: our
//! coordinator behind a TLS-terminating proxy (rustls, in this test) whose certificate
//! comes from a private CA and which asks every client for a certificate of that CA.
//! The runner's API calls, git fetch, artifact upload and download all go through it;
//! the job sees the CA as `CI_SERVER_TLS_CA_FILE`. Without the CA the runner is refused
//! with the TLS error. Certificates are made with the `openssl` CLI (`scripts/test`
//! installs it when missing).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use e2e_runner_support::*;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

const PIPELINE: &str = r#"
stages: [build, test]

build:
  stage: build
  script:
    - echo "fetched from ${CI_REPOSITORY_URL%%//*}//${CI_REPOSITORY_URL#*@}"
    - grep -q "BEGIN CERTIFICATE" "$CI_SERVER_TLS_CA_FILE"
    - test -s "$CI_SERVER_TLS_CERT_FILE"
    - cat input.txt > out.txt
    - echo "built behind TLS" >> out.txt
  artifacts:
    paths: [out.txt]

test:
  stage: test
  script:
    - cat out.txt
"#;

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `dir`.
fn make_certificates(dir: &Path) {
    let script = r#"
set -eu
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2 -subj "/CN=Gantry Test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
for who in server client; do
  openssl req $ec -keyout $who.key -out $who.csr -subj "/CN=gantry-$who"
done
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' > server.ext
printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' > client.ext
for who in server client; do
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem \
    -days 2 -extfile $who.ext
done
"#;
    let output = std::process::Command::new("bash")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .expect("bash runs (the openssl CLI makes the certificates)");
    assert!(
        output.status.success(),
        "making the certificates with openssl failed (is openssl installed? Debian: apt-get install openssl):\n{}",
        text(&output.stderr)
    );
}

/// A TLS proxy on `listener` to the plain HTTP `backend`, with `dir`'s server
/// certificate, requiring a client certificate of `dir`'s CA. Counts handshakes that
/// succeeded.
fn start_proxy(
    listener: tokio::net::TcpListener,
    backend: std::net::SocketAddr,
    dir: &Path,
) -> Arc<AtomicUsize> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.join("ca.pem")).unwrap())
        .unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let chain = vec![CertificateDer::from_pem_file(dir.join("server.pem")).unwrap()];
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let handshakes = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&handshakes);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    handshakes
}

fn runner_toml(url: &str, token: &str, dir: &Path, certs: &Path, with_ca: bool) -> String {
    let tls = if with_ca {
        format!(
            "tls-ca-file = \"{ca}\"\ntls-cert-file = \"{cert}\"\ntls-key-file = \"{key}\"\n",
            ca = certs.join("ca.pem").display(),
            cert = certs.join("client.pem").display(),
            key = certs.join("client.key").display(),
        )
    } else {
        String::new()
    };
    format!(
        r#"concurrent = 2
check_interval = 1

[[runners]]
name = "tls"
url = "{url}"
token = "{token}"
executor = "shell"
builds_dir = "{builds}"
cache_dir = "{cache}"
{tls}"#,
        builds = dir.join("builds").display(),
        cache = dir.join("cache").display(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_reaches_a_coordinator_behind_a_private_ca_with_a_client_certificate() {
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https = format!("https://{}", listener.local_addr().unwrap());
    let options = ServerOptions {
        external_url: Some(https.clone()),
        ..ServerOptions::default()
    };
    let setup = Setup::with(options, PIPELINE, &[("input.txt", "from git over https\n")]).await;
    let server = &setup.server;
    let backend: std::net::SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    let handshakes = start_proxy(listener, backend, certs.path());

    // Without the CA: the runner is refused with the TLS error, before any job.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        runner_toml(&https, &setup.runner_token, dir.path(), certs.path(), false),
    )
    .unwrap();
    let out = runner_command(&config, &["verify"]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr).to_lowercase();
    assert!(
        stderr.contains("certificate") && stderr.contains(&https),
        "{stderr}"
    );
    assert_eq!(handshakes.load(Ordering::SeqCst), 0);

    // With the CA and the client certificate: `verify`, then a pipeline.
    std::fs::write(
        &config,
        runner_toml(&https, &setup.runner_token, dir.path(), certs.path(), true),
    )
    .unwrap();
    let out = runner_command(&config, &["verify"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("is valid"),
        "{}",
        text(&out.stdout)
    );

    let toml = runner_toml(&https, &setup.runner_token, dir.path(), certs.path(), true);
    let runner = Runner::from_text(dir, &toml);
    let pipeline = server.create_pipeline(setup.project).await;
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(90))
        .await;
    runner.stop(Duration::from_secs(30)).await;
    let build = server.job_named(setup.project, pipeline, "build").await;
    let log = server
        .trace(setup.project, build["id"].as_i64().unwrap())
        .await;
    assert_eq!(done["status"], "success", "{done}\n{log}");
    let host = https.trim_start_matches("https://");
    assert!(
        log.contains(&format!("fetched from https://{host}/gantry/e2e.git")),
        "the checkout came over https:\n{log}"
    );
    let test = server.job_named(setup.project, pipeline, "test").await;
    let log = server
        .trace(setup.project, test["id"].as_i64().unwrap())
        .await;
    assert!(
        log.contains("from git over https\nbuilt behind TLS"),
        "the artifact went up and came down through the proxy:\n{log}"
    );
    assert!(handshakes.load(Ordering::SeqCst) >= 3);
}
