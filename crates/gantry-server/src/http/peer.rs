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

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::net::{TcpListener, TcpStream};

/// While bytes the server has not read yet wait on the socket (a pipelined request),
/// how often to look again.
const UNREAD_RECHECK: Duration = Duration::from_millis(200);

/// The connection a request came on.
#[derive(Clone, Debug)]
pub(crate) struct Peer {
    /// A duplicate of the connection's socket; `None` when it could not be made (then
    /// [`Peer::hung_up`] never resolves, as before).
    socket: Option<Arc<OwnedFd>>,
}

impl Connected<IncomingStream<'_, Connections>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Connections>) -> Self {
        Peer {
            socket: stream.io().as_fd().try_clone_to_owned().ok().map(Arc::new),
        }
    }
}

/// The server's listener: accepted connections with `TCP_NODELAY` (without it a response
/// written in two parts waits for the peer's delayed ACK, ≈ 40 ms on Linux, before its
/// second part leaves: every job hand-over and update would carry that delay).
pub(crate) struct Connections(pub(crate) TcpListener);

impl Listener for Connections {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        let (stream, addr) = Listener::accept(&mut self.0).await;
        let _ = stream.set_nodelay(true);
        (stream, addr)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl Peer {
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
