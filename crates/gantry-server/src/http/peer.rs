//! Whether the client of a request is still there.
//!
//! hyper reads a connection only while it expects a request or a body: once a request's
//! body is read and its handler runs, a client that hangs up goes unnoticed until the
//! answer is written (checked: `tests/http_long_poll.rs`). A held job request must know
//! at once, or the job it is given goes to nobody. [`Peer`] shares each accepted
//! connection's socket with the connection's I/O (`edge.rs` reads and writes it through
//! `&TcpStream`; [`serve`](super::serve) attaches the peer to every request as
//! `ConnectInfo`); [`Peer::hung_up`] waits on it for the end of the stream without
//! reading a byte (`peek`): a client's close (its process exiting, however it died) or a
//! reset ends the wait. The socket is registered with the runtime once and no descriptor
//! is duplicated: a held request costs one file descriptor, so 10,000 waiting runners fit
//! under a 20,000-descriptor limit (`gantry bench idle-runners`). tokio keeps one waker
//! slot per direction for `poll_*_ready` (hyper's reads) and a list for `peek`'s
//! readiness future (this wait), so the two never take each other's wake-ups.
//! The same socket carries the connection layer's own answers (`edge.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

/// While bytes the server has not read yet wait on the socket (a pipelined request),
/// how often to look again.
const UNREAD_RECHECK: Duration = Duration::from_millis(200);

/// The address a request came from as text (`''` when not known): what a runner's
/// heartbeat records.
pub(crate) fn peer_ip(peer: Option<&axum::Extension<axum::extract::ConnectInfo<Peer>>>) -> String {
    peer.and_then(|axum::Extension(axum::extract::ConnectInfo(p))| p.address())
        .map(|a| a.ip().to_string())
        .unwrap_or_default()
}

/// The connection a request came on.
#[derive(Clone, Debug)]
pub(crate) struct Peer {
    /// The connection's socket, shared with its I/O; it closes when the connection and
    /// every request of it are done.
    socket: Arc<TcpStream>,
    /// The client's address (the runners page shows a runner's).
    address: Option<std::net::SocketAddr>,
}

impl Peer {
    /// The peer of an accepted connection.
    pub(crate) fn of(stream: &Arc<TcpStream>) -> Self {
        Peer {
            socket: Arc::clone(stream),
            address: stream.peer_addr().ok(),
        }
    }

    /// Send `answer` (a whole HTTP response, small enough for the socket's buffer) and
    /// close the connection: for the connection layer's own answers while hyper is not
    /// writing (a request head that took too long). Best effort: a client that is gone,
    /// or whose buffer is full, gets what fits.
    pub(crate) fn answer_and_close(&self, answer: &[u8]) {
        // Straight to the (non-blocking) socket: tokio's `try_write` would refuse to try
        // while its readiness does not say writable.
        let socket = socket2::SockRef::from(&*self.socket);
        let mut sent = 0;
        while sent < answer.len() {
            match socket.send(&answer[sent..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => sent += n,
            }
        }
        let _ = socket.shutdown(std::net::Shutdown::Write);
    }

    /// The client's address, when known.
    pub(crate) fn address(&self) -> Option<std::net::SocketAddr> {
        self.address
    }

    /// Resolves when the client has closed or reset the connection; never while it is
    /// open.
    pub(crate) async fn hung_up(&self) {
        let mut byte = [0u8; 1];
        loop {
            match self.socket.peek(&mut byte).await {
                Ok(0) | Err(_) => return,
                Ok(_) => tokio::time::sleep(UNREAD_RECHECK).await,
            }
        }
    }
}
