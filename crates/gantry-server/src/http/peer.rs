//! Whether the client of a request is still there.
//!
//! hyper reads a connection only while it expects a request or a body: once a request's
//! body is read and its handler runs, a client that hangs up goes unnoticed until the
//! answer is written (checked: `tests/http_long_poll.rs`). A held job request must know
//! at once, or the job it is given goes to nobody. [`Peer`] keeps a duplicate of each
//! accepted connection's socket ([`serve`](super::serve) attaches it to every request as
//! `ConnectInfo`); [`Peer::hung_up`] waits on that duplicate for the end of the stream
//! without reading a byte (`peek`): a client's close (its process exiting, however it
//! died) or a reset ends the wait. The duplicate is closed with the connection.
//! The same duplicate carries the connection layer's own answers (`edge.rs`).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

/// While bytes the server has not read yet wait on the socket (a pipelined request),
/// how often to look again.
const UNREAD_RECHECK: Duration = Duration::from_millis(200);

/// The connection a request came on.
#[derive(Clone, Debug)]
pub(crate) struct Peer {
    /// A duplicate of the connection's socket; `None` when it could not be made (then
    /// [`Peer::hung_up`] never resolves, as before).
    socket: Option<Arc<OwnedFd>>,
    /// The client's address (the runners page shows a runner's).
    address: Option<std::net::SocketAddr>,
}

impl Peer {
    /// The peer of an accepted connection.
    pub(crate) fn of(stream: &TcpStream) -> Self {
        Peer {
            socket: stream.as_fd().try_clone_to_owned().ok().map(Arc::new),
            address: stream.peer_addr().ok(),
        }
    }

    /// Send `answer` (a whole HTTP response, small enough for the socket's buffer) and
    /// close the connection: for the connection layer's own answers while hyper is not
    /// writing (a request head that took too long). Best effort: a client that is gone
    /// gets nothing.
    pub(crate) fn answer_and_close(&self, answer: &[u8]) {
        use std::io::Write as _;
        let Some(fd) = self.socket.as_ref().and_then(|s| s.try_clone().ok()) else {
            return;
        };
        let mut stream = std::net::TcpStream::from(fd);
        if stream.set_nonblocking(true).is_ok() {
            let _ = stream.write_all(answer);
        }
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }

    /// The client's address, when known.
    pub(crate) fn address(&self) -> Option<std::net::SocketAddr> {
        self.address
    }

    /// Resolves when the client has closed or reset the connection; never while it is
    /// open.
    pub(crate) async fn hung_up(&self) {
        let Some(stream) = self.watch() else {
            return std::future::pending().await;
        };
        let mut byte = [0u8; 1];
        loop {
            match stream.peek(&mut byte).await {
                Ok(0) | Err(_) => return,
                Ok(_) => tokio::time::sleep(UNREAD_RECHECK).await,
            }
        }
    }

    /// Another duplicate, registered with the runtime for as long as the wait lasts.
    fn watch(&self) -> Option<tokio::net::TcpStream> {
        let fd = self.socket.as_ref()?.try_clone().ok()?;
        let stream = std::net::TcpStream::from(fd);
        stream.set_nonblocking(true).ok()?;
        tokio::net::TcpStream::from_std(stream).ok()
    }
}
