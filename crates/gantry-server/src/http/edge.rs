//! The server's connections: accepting them, the limits every client is held to, and
//! the shutdown deadline. hyper serves each connection (HTTP/1.1); this module decides
//! how long a client may take and how many connections it may hold.
//!
//! - **Connections**: at most [`Limits::max_connections`] in all and
//!   [`Limits::max_connections_per_ip`] from one source address. A connection over the
//!   per-address cap is answered `503` (JSON) and closed. At the total cap the connection
//!   that has waited longest without a request in progress (idle, or still sending its
//!   head) is closed to make room: clients that hold connections without using them
//!   cannot lock the others out.
//! - **Request head**: [`Limits::header_timeout`] from its first byte; then `408` (JSON)
//!   and the connection is closed. A connection idle between requests is closed after
//!   [`Limits::keepalive_timeout`] without a byte. hyper's own `header_read_timeout` is
//!   set to their sum as a backstop. A request hyper cannot read gets hyper's status
//!   with a JSON body naming what is wrong ([`Watched`] rewrites hyper's empty answer
//!   from the head's first [`HEAD_SAMPLE`] bytes, [`diagnose_bad_head`]): `400` for a
//!   malformed request line, header, `Content-Length` or `Transfer-Encoding`; `505` for
//!   an HTTP version other than 1.0 and 1.1 (hyper says `400`, nginx `505`), and for an
//!   HTTP/2 connection preface, which hyper closes without a word; `414` for a URL over
//!   64 KiB or a request line that does not end within the sample; `431` for more than
//!   100 headers or a head over 408 KiB.
//! - **Request body**: a read that waits [`Limits::body_timeout`] for the client's next
//!   bytes fails ([`StalledBody`]); the handler answers `408` (JSON,
//!   [`StalledBody::answer`]) and the connection closes. So does a response write the
//!   client does not take for as long (without an answer: it is being sent one).
//! - **Timeouts answer `408`.** nginx, in front of GitLab, closes a connection whose
//!   head or body timed out without an answer (it logs `408`). Gantry sends the `408`
//!   with its JSON message first: a client that is gone loses nothing, one that is only
//!   slow learns which limit it met (RFC 9110 §15.5.9 allows the answer).
//! - **Shutdown**: no new connection is accepted, held job requests answer `204` at once
//!   (`AppState::shutting_down`), idle connections and unfinished heads are closed, the
//!   requests in flight get [`Limits::shutdown_timeout`] to finish, and what is still open
//!   then is closed.
//!
//! Every connection carries its [`Peer`] (`ConnectInfo`) to its requests.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt as _;

use super::error::ApiError;
use super::peer::Peer;

/// How long and how much a client may take; [`Default`] gives `gantry server`'s defaults.
#[derive(Clone, Debug)]
pub struct Limits {
    /// A request head must be complete this long after its first byte (default 30 s).
    pub header_timeout: Duration,
    /// A request body read, or a response write, may wait this long for the client
    /// (default 60 s).
    pub body_timeout: Duration,
    /// A connection without a request is closed after this long (default 65 s, nginx's
    /// in GitLab's Omnibus package).
    pub keepalive_timeout: Duration,
    /// Open connections in all (default 1024).
    pub max_connections: usize,
    /// Open connections from one source address (default 256).
    pub max_connections_per_ip: usize,
    /// At shutdown, how long the requests in flight may take to finish (default 30 s).
    pub shutdown_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(65),
            max_connections: 1024,
            max_connections_per_ip: 256,
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// At most this many over-cap connections are being answered `503` at once; past it
/// they are closed without an answer.
const REFUSALS_IN_FLIGHT: usize = 64;
/// How long the `503` to an over-cap connection may take to send.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);
/// After the accept call fails for want of file descriptors, wait this long.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serve `app` on `listener` under `limits` until `shutdown` resolves; `down` is set
/// when it does (held job requests answer then). Returns when every connection has
/// closed, at most `limits.shutdown_timeout` after `shutdown`.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    down: watch::Sender<bool>,
) -> io::Result<()> {
    let limits = Arc::new(limits);
    let registry = Arc::new(Registry::default());
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT));
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    // Said once per run of failures, not every retry.
    let mut accept_failing = false;
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, addr) = match accepted {
            Ok(accepted) => {
                accept_failing = false;
                accepted
            }
            Err(e) if is_per_connection(&e) => continue,
            Err(e) => {
                // Out of file descriptors (or memory): what is open must close first.
                if !accept_failing {
                    eprintln!(
                        "gantry server: accepting a connection failed: {e}\n  hint: raise the open-file limit or lower --max-connections; retrying"
                    );
                    accept_failing = true;
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // Without TCP_NODELAY a response written in two parts waits for the peer's
        // delayed ACK (≈ 40 ms on Linux) before its second part leaves.
        let _ = stream.set_nodelay(true);
        let ip = addr.ip().to_canonical();
        let conn = match registry.admit(ip, &limits) {
            Admission::Admitted(conn) => conn,
            Admission::Refused(message) => {
                if let Ok(permit) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse(stream, &message).await;
                        drop(permit);
                    });
                }
                continue;
            }
        };
        let guard = Registered {
            registry: registry.clone(),
            conn: conn.clone(),
        };
        let stream = Arc::new(stream);
        let peer = Peer::of(&stream);
        connections.spawn(serve_one(
            stream,
            addr,
            peer,
            app.clone(),
            limits.clone(),
            guard,
            down.subscribe(),
        ));
    }
    drop(listener);
    let _ = down.send(true);
    let open = connections.len();
    let finished = tokio::time::timeout(limits.shutdown_timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        let left = connections.len();
        eprintln!(
            "gantry server: closed {left} of {open} connections still open after the shutdown timeout ({} s; --shutdown-timeout)",
            limits.shutdown_timeout.as_secs()
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// An accept error about one connection (the client gave up before it was accepted):
/// the listener itself is fine.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Answer an over-cap connection `503` without reading its request, and close it. What
/// the client sent is read and dropped until it closes its end (for at most
/// [`REFUSAL_WRITE`]): closing a socket with unread bytes resets it, and the reset could
/// reach the client before the answer does.
async fn refuse(mut stream: TcpStream, message: &str) {
    use tokio::io::AsyncReadExt as _;
    let response = json_answer(503, "Service Unavailable", message, &[("Retry-After", "1")]);
    let _ = tokio::time::timeout(REFUSAL_WRITE, async {
        let _ = stream.write_all(&response).await;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        while let Ok(1..) = stream.read(&mut sink).await {}
    })
    .await;
}

/// A whole HTTP/1.1 answer with a `{"message": "<code> <text>"}` body that closes the
/// connection: for the connection layer's own refusals, sent before hyper reads a
/// request or after it gave up on one.
fn json_answer(code: u16, reason: &str, text: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let body = serde_json::json!({ "message": format!("{code} {text}") }).to_string();
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}

/// Serve one connection to its end, its timeouts, an eviction, or the shutdown.
async fn serve_one(
    stream: Arc<TcpStream>,
    addr: SocketAddr,
    peer: Peer,
    app: Router,
    limits: Arc<Limits>,
    registered: Registered,
    mut down: watch::Receiver<bool>,
) {
    let conn = registered.conn.clone();
    let io = Watched {
        inner: stream,
        conn: conn.clone(),
        write_stall: limits.body_timeout,
        write_timer: None,
        rewrite: None,
    };
    let service = {
        let conn = conn.clone();
        let peer = peer.clone();
        let body_timeout = limits.body_timeout;
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let in_flight = InFlight::begin(conn.clone());
            let (mut parts, body) = request.into_parts();
            parts.extensions.insert(ConnectInfo(peer.clone()));
            parts.extensions.insert(ConnectInfo(addr));
            let body = axum::body::Body::new(StallLimit::new(body, body_timeout));
            let request = axum::http::Request::from_parts(parts, body);
            let app = app.clone();
            async move {
                let Ok(response) = app.oneshot(request).await;
                // The request counts as in flight until its answer is sent whole.
                Ok::<_, Infallible>(response.map(|body| {
                    axum::body::Body::new(Tracked {
                        inner: body,
                        _in_flight: in_flight,
                    })
                }))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(limits.keepalive_timeout + limits.header_timeout);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    let mut draining = false;
    loop {
        if conn.evicted.load(Ordering::Acquire) && !conn.phase().is_busy() {
            if let Phase::Head { .. } = conn.phase() {
                peer.answer_and_close(&json_answer(
                    503,
                    "Service Unavailable",
                    "Service Unavailable - the server is at its connection limit (--max-connections) and this connection had sent no whole request",
                    &[("Retry-After", "1")],
                ));
            }
            return;
        }
        let deadline = if draining {
            None
        } else {
            conn.phase().deadline(&limits)
        };
        tokio::select! {
            served = connection.as_mut() => {
                // hyper closes an HTTP/2 client's connection without a word.
                if served.is_err_and(|e| e.is_parse_version_h2()) {
                    peer.answer_and_close(&json_answer(
                        505,
                        "HTTP Version Not Supported",
                        "HTTP Version Not Supported - the request is HTTP/2 (its connection preface); the server speaks HTTP/1.1 (and HTTP/1.0)",
                        &[],
                    ));
                }
                return;
            }
            () = conn.changed.notified() => {}
            () = sleep_until(deadline) => match conn.phase() {
                Phase::Head { since } if since + limits.header_timeout <= Instant::now() => {
                    peer.answer_and_close(&json_answer(
                        408,
                        "Request Timeout",
                        &format!(
                            "Request Timeout - the request head was not complete within {} s (--header-timeout)",
                            limits.header_timeout.as_secs()
                        ),
                        &[],
                    ));
                    return;
                }
                Phase::Idle { since } if since + limits.keepalive_timeout <= Instant::now() => return,
                _ => {}
            },
            _ = down.wait_for(|down| *down), if !draining => {
                draining = true;
                if !conn.phase().is_busy() {
                    return;
                }
                // The request in flight finishes; hyper then closes the connection.
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Where a connection is between requests.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// No byte since the last answer (or since it opened).
    Idle { since: Instant },
    /// A request head has begun arriving.
    Head { since: Instant },
    /// Requests being answered.
    Busy { requests: usize },
    /// The last answer is complete but may not be flushed to the socket yet.
    Finishing,
}

impl Phase {
    fn is_busy(self) -> bool {
        matches!(self, Phase::Busy { .. } | Phase::Finishing)
    }

    /// When the connection times out unless something happens first.
    fn deadline(self, limits: &Limits) -> Option<Instant> {
        match self {
            Phase::Idle { since } => Some(since + limits.keepalive_timeout),
            Phase::Head { since } => Some(since + limits.header_timeout),
            Phase::Busy { .. } | Phase::Finishing => None,
        }
    }

    /// Since when a connection that is not busy has been waiting; `None` when busy.
    fn waiting_since(self) -> Option<Instant> {
        match self {
            Phase::Idle { since } | Phase::Head { since } => Some(since),
            Phase::Busy { .. } | Phase::Finishing => None,
        }
    }
}

/// One open connection, as its task, its reads and its requests see it.
struct Conn {
    id: u64,
    ip: IpAddr,
    phase: Mutex<Phase>,
    /// The phase changed or the connection was evicted: its task looks again.
    changed: Notify,
    /// Closed to make room at the total cap.
    evicted: AtomicBool,
    /// The first bytes (at most [`HEAD_SAMPLE`]) of the request head being read, as the
    /// client sent them: what a rewritten answer says is wrong with it. Let go once
    /// hyper hands the request over ([`InFlight::begin`]): a held request keeps none.
    head: Mutex<Vec<u8>>,
}

impl Conn {
    fn phase(&self) -> Phase {
        *self.lock()
    }

    fn head_sample(&self) -> MutexGuard<'_, Vec<u8>> {
        self.head
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock(&self) -> MutexGuard<'_, Phase> {
        self.phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set(&self, phase: Phase) {
        *self.lock() = phase;
        self.changed.notify_one();
    }

    /// Everything written so far reached the socket: a finished answer is out, and the
    /// connection is idle.
    fn flushed(&self) {
        let mut phase = self.lock();
        if let Phase::Finishing = *phase {
            *phase = Phase::Idle {
                since: Instant::now(),
            };
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// Whether what is written now is hyper's own answer to a request it could not read
    /// (no handler runs, no answer of one is being sent).
    fn between_requests(&self) -> bool {
        matches!(self.phase(), Phase::Idle { .. } | Phase::Head { .. })
    }

    /// Bytes arrived: an idle connection begins a request head.
    fn bytes_arrived(&self) -> Arrived {
        let mut phase = self.lock();
        match *phase {
            Phase::Idle { .. } => {
                *phase = Phase::Head {
                    since: Instant::now(),
                };
                drop(phase);
                self.changed.notify_one();
                Arrived::NewHead
            }
            Phase::Head { .. } => Arrived::InHead,
            Phase::Busy { .. } | Phase::Finishing => Arrived::Busy,
        }
    }
}

/// What bytes that arrived are part of.
enum Arrived {
    /// The first bytes of a request head.
    NewHead,
    /// More of the head being read.
    InHead,
    /// A request body, or a request read while the last is being answered.
    Busy,
}

/// A request between its head and the end of its answer.
struct InFlight(Arc<Conn>);

impl InFlight {
    fn begin(conn: Arc<Conn>) -> Self {
        drop(std::mem::take(&mut *conn.head_sample()));
        let requests = match conn.phase() {
            Phase::Busy { requests } => requests + 1,
            _ => 1,
        };
        conn.set(Phase::Busy { requests });
        InFlight(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let next = match self.0.phase() {
            Phase::Busy { requests } if requests > 1 => Phase::Busy {
                requests: requests - 1,
            },
            _ => Phase::Finishing,
        };
        self.0.set(next);
    }
}

/// The open connections, for the caps.
#[derive(Default)]
struct Registry {
    next_id: AtomicU64,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    conns: HashMap<u64, Arc<Conn>>,
    per_ip: HashMap<IpAddr, usize>,
}

enum Admission {
    Admitted(Arc<Conn>),
    /// Over a cap: the message of the `503`.
    Refused(String),
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn admit(&self, ip: IpAddr, limits: &Limits) -> Admission {
        let mut open = self.lock();
        let from_ip = open.per_ip.get(&ip).copied().unwrap_or(0);
        if from_ip >= limits.max_connections_per_ip {
            return Admission::Refused(format!(
                "Service Unavailable - {ip} has {from_ip} connections open, the most one address may (--max-connections-per-ip); close some and retry"
            ));
        }
        let live = open
            .conns
            .values()
            .filter(|c| !c.evicted.load(Ordering::Acquire))
            .count();
        if live >= limits.max_connections {
            // Make room: the connection waiting longest without a request in flight.
            let victim = open
                .conns
                .values()
                .filter(|c| !c.evicted.load(Ordering::Acquire))
                .filter_map(|c| c.phase().waiting_since().map(|since| (since, c)))
                .min_by_key(|(since, _)| *since)
                .map(|(_, c)| c.clone());
            match victim {
                Some(victim) => {
                    victim.evicted.store(true, Ordering::Release);
                    victim.changed.notify_one();
                }
                None => {
                    return Admission::Refused(format!(
                        "Service Unavailable - the server has {live} connections open, all of them busy, the most it takes (--max-connections); retry later"
                    ));
                }
            }
        }
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            ip,
            phase: Mutex::new(Phase::Idle {
                since: Instant::now(),
            }),
            changed: Notify::new(),
            evicted: AtomicBool::new(false),
            head: Mutex::new(Vec::new()),
        });
        open.conns.insert(conn.id, conn.clone());
        *open.per_ip.entry(ip).or_insert(0) += 1;
        Admission::Admitted(conn)
    }
}

/// A connection's place in the [`Registry`], given back when its task ends.
struct Registered {
    registry: Arc<Registry>,
    conn: Arc<Conn>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut open = self.registry.lock();
        open.conns.remove(&self.conn.id);
        if let Some(n) = open.per_ip.get_mut(&self.conn.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.per_ip.remove(&self.conn.ip);
            }
        }
    }
}

/// The connection's socket: notes the first byte of each request head and when an
/// answer is out, fails a write the client has not taken for `write_stall`, and turns
/// hyper's own answers to requests it could not read (`400`, `414`, `431`, sent with an
/// empty body) into JSON ones.
struct Watched {
    /// Shared with the connection's [`Peer`]: read and written through `&TcpStream`.
    inner: Arc<TcpStream>,
    conn: Arc<Conn>,
    write_stall: Duration,
    write_timer: Option<Pin<Box<Sleep>>>,
    /// hyper's own answer, rewritten: the bytes to send and how many are sent. hyper's
    /// bytes are taken and dropped meanwhile.
    rewrite: Option<(Vec<u8>, usize)>,
}

/// How much of a request head [`Conn::head`] keeps for the answer to a head hyper refuses.
const HEAD_SAMPLE: usize = 8 * 1024;

impl Watched {
    /// `poll` made no progress: time the wait, and fail it once it lasted too long.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.write_stall;
        let timer = self
            .write_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.write_timer = None;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the client took no bytes of the answer for {} s (--body-timeout)",
                        limit.as_secs()
                    ),
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(
        &mut self,
        result: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match result {
            Poll::Ready(r) => {
                self.write_timer = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stalled(cx),
        }
    }

    /// hyper writes `hyper_bytes` between requests: its own error answer. Send the JSON
    /// one instead; `hyper_len` is what hyper is told was written.
    fn write_rewritten(
        &mut self,
        cx: &mut Context<'_>,
        hyper_bytes: &[u8],
        hyper_len: usize,
    ) -> Poll<io::Result<usize>> {
        let (bytes, sent) = self.rewrite.get_or_insert_with(|| {
            (
                json_for_hyper_answer(hyper_bytes, &self.conn.head_sample()),
                0,
            )
        });
        while *sent < bytes.len() {
            match write_shared(&self.inner, cx, &bytes[*sent..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *sent += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.stalled(cx),
            }
        }
        self.write_timer = None;
        Poll::Ready(Ok(hyper_len))
    }
}

/// The JSON answer in place of hyper's own (`HTTP/1.1 431 Request Header Fields Too
/// Large` and an empty body, for a request it could not read); other bytes unchanged.
/// `head` is the start of the request head hyper refused: the message names what is
/// wrong with it where that can be told ([`diagnose_bad_head`]).
fn json_for_hyper_answer(hyper_bytes: &[u8], head: &[u8]) -> Vec<u8> {
    let code = hyper_bytes
        .strip_prefix(b"HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| std::str::from_utf8(code).ok())
        .and_then(|code| code.parse::<u16>().ok())
        .and_then(|code| StatusCode::from_u16(code).ok());
    let Some(code) = code else {
        return hyper_bytes.to_vec();
    };
    let (code, text) = match code.as_u16() {
        400 => diagnose_bad_head(head),
        414 => (code, URI_TOO_LONG.to_owned()),
        // A request line that never ended within the sample is an overlong URL (hyper
        // counts it against the whole head's size), as nginx answers it.
        431 if head.len() >= HEAD_SAMPLE && !head.contains(&b'\n') => {
            (StatusCode::URI_TOO_LONG, URI_TOO_LONG.to_owned())
        }
        431 => (
            code,
            format!(
                "Request Header Fields Too Large - the request head has more than {MAX_HEADERS} headers or is longer than {} KiB",
                MAX_HEAD / 1024
            ),
        ),
        _ => (code, code.canonical_reason().unwrap_or("Error").to_owned()),
    };
    json_answer(
        code.as_u16(),
        code.canonical_reason().unwrap_or("Error"),
        &text,
        &[],
    )
}

/// hyper's limits on a request head (`http1::Builder`'s defaults): headers, bytes, and
/// the bytes of the URL.
const MAX_HEADERS: usize = 100;
const MAX_HEAD: usize = 8192 + 4096 * 100;
const MAX_URI: usize = 65_534;

const URI_TOO_LONG: &str = "URI Too Long - the request's URL is longer than the server reads";

/// What is wrong with a request head hyper refused with `400`: the status and the text
/// of the answer. `head` is its start (leading empty lines included, as sent). A
/// version other than HTTP/1.0 and 1.1 is `505`, as nginx answers; the rest is `400`
/// naming the request line or the header that is malformed, or in general terms when
/// the sample does not show it.
pub(crate) fn diagnose_bad_head(head: &[u8]) -> (StatusCode, String) {
    let bad = |text: String| (StatusCode::BAD_REQUEST, format!("Bad Request - {text}"));
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        // hyper skips empty lines before a request, as RFC 9112 §2.2 allows.
        .skip_while(|line| line.is_empty());
    let Some(request_line) = lines.next() else {
        return bad("the request could not be read".to_owned());
    };
    let parts: Vec<&[u8]> = request_line.split(|&b| b == b' ').collect();
    if let [method, target, version] = parts.as_slice() {
        if let Some(number) = version.strip_prefix(b"HTTP/") {
            let known = matches!(number, b"1.0" | b"1.1");
            let looks_like_version =
                !number.is_empty() && number.iter().all(|b| b.is_ascii_digit() || *b == b'.');
            if !known && looks_like_version {
                return (
                    StatusCode::HTTP_VERSION_NOT_SUPPORTED,
                    format!(
                        "HTTP Version Not Supported - the request is {}; the server speaks HTTP/1.1 (and HTTP/1.0)",
                        shown(version)
                    ),
                );
            }
        }
        if !matches!(*version, b"HTTP/1.0" | b"HTTP/1.1") {
            return bad(format!(
                "the request line ends in {} where `HTTP/1.1` belongs",
                shown(version)
            ));
        }
        if method.is_empty() || !method.iter().all(|&b| is_token(b)) {
            return bad(format!(
                "the request's method {} is not a word",
                shown(method)
            ));
        }
        if target.len() <= MAX_URI && axum::http::Uri::try_from(*target).is_err() {
            return bad(format!(
                "the request's target {} is not a path such as `/api/v4/version`",
                shown(target)
            ));
        }
    } else if lines.clone().next().is_some() || head.len() >= HEAD_SAMPLE {
        return bad(format!(
            "the request line {} is not `<method> <path> HTTP/1.1`",
            shown(request_line)
        ));
    }
    let http_10 = parts.last().is_some_and(|v| *v == b"HTTP/1.0");
    let mut length: Option<u64> = None;
    let mut coding: Option<&[u8]> = None;
    for line in lines {
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return bad(format!("the header line {} has no `:`", shown(line)));
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
            return bad(format!("the header name {} is not a word", shown(name)));
        }
        if value.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
            return bad(format!(
                "the value of header `{}` has a control character",
                String::from_utf8_lossy(name)
            ));
        }
        // hyper ignores Content-Length once Transfer-Encoding was given.
        if name.eq_ignore_ascii_case(b"content-length") && coding.is_none() {
            // `5, 5` (a list of one value) is one length.
            let mut values = value.split(|&b| b == b',').map(|v| {
                let v = v.trim_ascii();
                std::str::from_utf8(v)
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
            });
            let Some(Some(first)) = values.next() else {
                return bad(format!(
                    "Content-Length {} is not a number of bytes",
                    shown(value)
                ));
            };
            for other in values {
                match other {
                    None => {
                        return bad(format!(
                            "Content-Length {} is not a number of bytes",
                            shown(value)
                        ));
                    }
                    Some(n) if n != first => {
                        return bad("the request gives two different Content-Lengths".to_owned());
                    }
                    Some(_) => {}
                }
            }
            if length.is_some_and(|n| n != first) {
                return bad("the request gives two different Content-Lengths".to_owned());
            }
            length = Some(first);
        }
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if http_10 {
                return bad("an HTTP/1.0 request cannot use Transfer-Encoding".to_owned());
            }
            coding = Some(value);
        }
    }
    if let Some(value) = coding {
        let last = value
            .rsplit(|&b| b == b',')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        if !last.eq_ignore_ascii_case(b"chunked") {
            return bad(format!(
                "Transfer-Encoding {} does not end in `chunked`, the only request body coding the server reads",
                shown(value)
            ));
        }
    }
    bad("the request could not be read: its request line, a header or its Content-Length is malformed".to_owned())
}

/// A byte RFC 9110 allows in a token (a method, a header name).
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Client bytes in a message: quoted, at most 64 characters, control characters
/// escaped.
fn shown(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text.chars().take(64).flat_map(char::escape_debug).collect();
    if text.chars().nth(64).is_some() {
        out.push('…');
    }
    format!("`{out}`")
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = read_shared(&this.inner, cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let mut head = this.conn.head_sample();
            match this.conn.bytes_arrived() {
                Arrived::NewHead => head.clear(),
                Arrived::InHead => {}
                // A body, or a request hyper has begun answering: no head to sample.
                Arrived::Busy => {
                    *head = Vec::new();
                    return result;
                }
            }
            let new = &buf.filled()[before..];
            let room = HEAD_SAMPLE.saturating_sub(head.len());
            head.extend_from_slice(&new[..new.len().min(room)]);
        }
        result
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.rewrite.is_some() || this.conn.between_requests() {
            return this.write_rewritten(cx, buf, buf.len());
        }
        let result = write_shared(&this.inner, cx, buf);
        this.progressed(result, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.rewrite.is_some() || this.conn.between_requests() {
            let joined: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            return this.write_rewritten(cx, &joined, joined.len());
        }
        let result = write_vectored_shared(&this.inner, cx, bufs);
        this.progressed(result, cx)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A TCP socket has nothing to flush: what `write` took is the kernel's.
        this.conn.flushed();
        this.write_timer = None;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.write_timer = None;
        let _ = cx;
        Poll::Ready(
            match socket2::SockRef::from(&*this.inner).shutdown(std::net::Shutdown::Write) {
                // Already shut, or the client is gone: nothing more to send either way.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
                other => other,
            },
        )
    }
}

/// The most a read asks the socket for at once (the part of hyper's buffer zeroed first).
const READ_CHUNK: usize = 64 * 1024;

/// `poll_read` through `&TcpStream`: wait for readability, read what is there.
fn read_shared(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    loop {
        match stream.poll_read_ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        let want = buf.remaining().min(READ_CHUNK);
        let unfilled = buf.initialize_unfilled_to(want);
        match stream.try_read(unfilled) {
            Ok(n) => {
                buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            // The readiness was stale (tokio cleared it): wait for the next.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// `poll_write` through `&TcpStream`.
fn write_shared(stream: &TcpStream, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
    loop {
        match stream.poll_write_ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        match stream.try_write(bytes) {
            Ok(n) => return Poll::Ready(Ok(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// `poll_write_vectored` through `&TcpStream`.
fn write_vectored_shared(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    bufs: &[io::IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    loop {
        match stream.poll_write_ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        match stream.try_write_vectored(bufs) {
            Ok(n) => return Poll::Ready(Ok(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// A request body read that waited too long for the client's next bytes.
#[derive(Debug, thiserror::Error)]
#[error("read the request body: the client sent nothing for {} s (--body-timeout)", .0.as_secs())]
pub(crate) struct StalledBody(Duration);

impl StalledBody {
    /// The stall among `error` and its sources, if it is one: how a handler that read a
    /// body tells a stalled client from a malformed body.
    pub(crate) fn in_chain<'a>(
        error: &'a (dyn std::error::Error + 'static),
    ) -> Option<&'a StalledBody> {
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(stalled) = error.downcast_ref::<StalledBody>() {
                return Some(stalled);
            }
            next = error.source();
        }
        None
    }

    /// The answer: `408 Request Timeout` (JSON), and the connection closes (what is left
    /// of the body is never read). nginx, in front of GitLab, closes such a connection
    /// without an answer; a client that is only slow learns here which limit it met.
    pub(crate) fn answer(&self) -> ApiError {
        ApiError::message(
            StatusCode::REQUEST_TIMEOUT,
            format!("Request Timeout - {self}"),
        )
        .with_header("connection", "close")
    }
}

/// A request body whose reads fail with [`StalledBody`] after `limit` without bytes.
struct StallLimit {
    inner: Incoming,
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl StallLimit {
    fn new(inner: Incoming, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            timer: None,
        }
    }
}

impl http_body::Body for StallLimit {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.timer = None;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let limit = this.limit;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.timer = None;
                        Poll::Ready(Some(Err(Box::new(StalledBody(limit)))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its request [`InFlight`] until it is sent or dropped.
struct Tracked {
    inner: axum::body::Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_handed_over_keeps_no_head_sample() {
        let conn = Arc::new(Conn {
            id: 1,
            ip: IpAddr::from([127, 0, 0, 1]),
            phase: Mutex::new(Phase::Idle {
                since: Instant::now(),
            }),
            changed: Notify::new(),
            evicted: AtomicBool::new(false),
            head: Mutex::new(b"POST /api/v4/jobs/request HTTP/1.1\r\n".repeat(40)),
        });
        let in_flight = InFlight::begin(conn.clone());
        // Held requests (10,000 waiting runners) keep no copy of their heads.
        assert_eq!(conn.head_sample().capacity(), 0);
        assert!(conn.phase().is_busy());
        drop(in_flight);
    }

    fn diagnosed(head: &str) -> (u16, String) {
        let (status, text) = diagnose_bad_head(head.as_bytes());
        (status.as_u16(), text)
    }

    #[test]
    fn a_refused_head_is_diagnosed_where_it_is_wrong() {
        for (head, status, says) in [
            ("GET / HTTP/2.0\r\nHost: g\r\n\r\n", 505, "`HTTP/2.0`"),
            ("GET / HTTP/1.2\r\n\r\n", 505, "`HTTP/1.2`"),
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "HTTP/2.0"),
            ("GET / HTTP/x\r\n\r\n", 400, "ends in `HTTP/x`"),
            (
                "GET /x\r\nHost: g\r\n\r\n",
                400,
                "request line `GET /x` is not",
            ),
            (
                "\r\n\r\nGET  /x HTTP/1.1\r\n\r\n",
                400,
                "request line `GET  /x HTTP/1.1`",
            ),
            ("G(T / HTTP/1.1\r\n\r\n", 400, "method `G(T`"),
            ("GET a b HTTP/1.1\r\n\r\n", 400, "is not `<method> <path>"),
            ("GET /\x01 HTTP/1.1\r\n\r\n", 400, "target `/\\u{1}`"),
            (
                "GET / HTTP/1.1\r\nHost g\r\n\r\n",
                400,
                "header line `Host g` has no `:`",
            ),
            ("GET / HTTP/1.1\r\nA B: c\r\n\r\n", 400, "header name `A B`"),
            (
                "GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n",
                400,
                "header `X` has a control",
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: ten\r\n\r\n",
                400,
                "Content-Length `ten` is not a number",
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
                400,
                "is not a number",
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\n",
                400,
                "two different",
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 3, 4\r\n\r\n",
                400,
                "two different",
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
                400,
                "Transfer-Encoding `gzip` does not end in `chunked`",
            ),
            (
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
                "HTTP/1.0 request cannot use Transfer-Encoding",
            ),
            ("", 400, "could not be read"),
            (
                "GET / HTTP/1.1\r\nHost: g\r\n\r\n",
                400,
                "could not be read",
            ),
        ] {
            let (got, text) = diagnosed(head);
            assert_eq!(got, status, "{head:?}: {text}");
            assert!(text.contains(says), "{head:?}: {text}");
        }
        // Well-formed lists and repeated equal lengths, a chunked coding after another.
        for head in [
            "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\ncontent-length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n",
        ] {
            let (_, text) = diagnosed(head);
            assert!(text.contains("could not be read"), "{head:?}: {text}");
        }
        // Client bytes are quoted, escaped and cut.
        let (_, text) = diagnosed(&format!("{} / HTTP/1.1\r\n\r\n", "(".repeat(100)));
        assert!(text.contains('…') && text.len() < 200, "{text}");
    }

    #[test]
    fn hyper_answers_become_json_with_the_diagnosis() {
        let answer = |hyper: &[u8], head: &[u8]| {
            let raw = json_for_hyper_answer(hyper, head);
            let raw = String::from_utf8(raw).expect("UTF-8");
            let (head, body) = raw.split_once("\r\n\r\n").expect("a head");
            let status: u16 = head[9..12].parse().expect("status");
            let body: serde_json::Value = serde_json::from_str(body).expect("JSON");
            assert!(head.contains("Content-Type: application/json"), "{head}");
            (status, body["message"].as_str().unwrap_or("").to_owned())
        };
        let empty_400 = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        let (status, message) = answer(empty_400, b"GET / HTTP/2.0\r\n\r\n");
        assert_eq!(status, 505);
        assert!(
            message.starts_with("505 HTTP Version Not Supported - "),
            "{message}"
        );
        let (status, message) = answer(empty_400, b"POST / HTTP/1.1\r\nContent-Length: x\r\n");
        assert_eq!(status, 400);
        assert!(message.contains("Content-Length `x`"), "{message}");
        let empty_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n";
        let long_line = format!("GET /{}", "a".repeat(HEAD_SAMPLE));
        let (status, message) = answer(empty_431, &long_line.as_bytes()[..HEAD_SAMPLE]);
        assert_eq!(status, 414, "{message}");
        let (status, message) = answer(empty_431, b"GET / HTTP/1.1\r\nA: b\r\n");
        assert_eq!(status, 431);
        assert!(message.contains("more than 100 headers"), "{message}");
        // Bytes that are not a status line pass unchanged.
        assert_eq!(json_for_hyper_answer(b"xyz", b""), b"xyz");
    }

    #[test]
    fn a_stall_is_found_among_an_errors_sources() {
        let stall = StalledBody(Duration::from_secs(3));
        let wrapped = axum::Error::new(axum::Error::new(stall));
        let found = StalledBody::in_chain(&wrapped).expect("found");
        assert_eq!(found.0, Duration::from_secs(3));
        let other = axum::Error::new(io::Error::other("reset"));
        assert!(StalledBody::in_chain(&other).is_none());
        let response = axum::response::IntoResponse::into_response(found.answer());
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(response.headers()["connection"], "close");
    }
}
