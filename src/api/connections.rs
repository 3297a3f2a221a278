//! Serving connections: the accept loop of a listener (the Unix socket or TCP), the bound on open connections
//! they share, and hyper's HTTP/1 settings that time out clients who are slow to send a request.
//!
//! A connection must send a complete request head within `api.header_timeout_secs` of opening, or of its
//! previous response — hyper's head timer starts as soon as a connection waits for a request, so this is the
//! idle keep-alive timeout too. Bodies are read (with their own timeout and size limit) by `read_body` in the
//! router. A response that is being streamed (SSE) is not idle and is never cut. At most
//! `api.max_connections` connections are served at once; the loop accepts no more until one closes, so
//! further clients wait in the kernel's listen backlog instead of being refused.
//!
//! On a TLS listener the handshake happens in the connection's own task (a slow client never holds up the
//! accept loop), within the same `api.header_timeout_secs`; a connection whose handshake fails (plain HTTP,
//! an untrusted certificate on the client's side) is closed.
//!
//! Clients that hold connections without using them must not starve the others (an unauthenticated client on
//! TCP can open hundreds): when fewer than a quarter of the connection slots are free, a new connection gets
//! [`PRESSED_HEAD_TIMEOUT`] for its request head instead of `header_timeout_secs`, so idle holders turn over
//! within a second or two and a probe that sends its request at once is served. And a response that cannot
//! be written for `api.write_timeout_secs` (a client that stopped reading, an SSE stream nobody drains) ends
//! its connection: a write that makes no progress never holds a slot for ever. The Unix socket has slots of
//! its own, so TCP clients can never take the local CLI's and probes' way in.
//!
//! Every request carries the address its connection came from as a [`Peer`] extension (the console's login
//! throttle counts wrong tokens by it).

use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_io_timeout::TimeoutStream;

use axum::Router;
use axum::serve::Listener;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where a request's connection came from: the client's IP address on TCP, `None` on the Unix socket (whose
/// clients are all of one kind: whoever may open it). A request extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub Option<IpAddr>);

/// The [`Peer`] of an accepted connection's address.
pub(super) trait PeerAddr {
    fn peer(&self) -> Peer;
}

impl PeerAddr for std::net::SocketAddr {
    fn peer(&self) -> Peer {
        Peer(Some(self.ip().to_canonical()))
    }
}

#[cfg(unix)]
impl PeerAddr for tokio::net::unix::SocketAddr {
    fn peer(&self) -> Peer {
        Peer(None)
    }
}

/// The router of one connection: every request gets the connection's [`Peer`].
#[derive(Clone)]
struct WithPeer {
    app: Router,
    peer: Peer,
}

impl<B> tower_service::Service<axum::http::Request<B>> for WithPeer
where
    Router: tower_service::Service<axum::http::Request<B>>,
{
    type Response = <Router as tower_service::Service<axum::http::Request<B>>>::Response;
    type Error = <Router as tower_service::Service<axum::http::Request<B>>>::Error;
    type Future = <Router as tower_service::Service<axum::http::Request<B>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower_service::Service::<axum::http::Request<B>>::poll_ready(&mut self.app, cx)
    }

    fn call(&mut self, mut request: axum::http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.peer);
        tower_service::Service::<axum::http::Request<B>>::call(&mut self.app, request)
    }
}

/// The request-head timeout of a connection accepted while few slots are free.
pub const PRESSED_HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// How connections are timed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    /// For a request head (and so for an idle keep-alive connection).
    pub header: Duration,
    /// For a write that makes no progress.
    pub write: Duration,
}

/// Serves `app` on every connection `listener` accepts while a permit of `connections` (of `slots` in all)
/// is free, until `stop` fires; then asks open connections to finish their response and close, and waits for
/// them. With `tls`, every connection speaks TLS first.
pub(super) async fn serve<L: Listener>(
    mut listener: L,
    app: Router,
    timeouts: Timeouts,
    (connections, slots): (Arc<Semaphore>, usize),
    tls: Option<TlsAcceptor>,
    stop: CancellationToken,
) where
    L::Io: Send + 'static,
    L::Addr: PeerAddr,
{
    let header_timeout = timeouts.header;
    let mut relaxed = hyper::server::conn::http1::Builder::new();
    relaxed.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let mut pressed = hyper::server::conn::http1::Builder::new();
    pressed.timer(TokioTimer::new()).header_read_timeout(header_timeout.min(PRESSED_HEAD_TIMEOUT));
    let open = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            () = stop.cancelled() => break,
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        // `Listener::accept` retries failed accepts itself (with a pause when out of file descriptors).
        let (io, address) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let http = if connections.available_permits() < slots / 4 { pressed.clone() } else { relaxed.clone() };
        let mut io = TimeoutStream::new(io);
        io.set_write_timeout(Some(timeouts.write));
        let io = Box::pin(io);
        let app = WithPeer { app: app.clone(), peer: address.peer() };
        let (stop, tls) = (stop.clone(), tls.clone());
        open.spawn(async move {
            match tls {
                None => drive(&http, TokioIo::new(io), app, stop).await,
                Some(tls) => {
                    let handshake = tokio::select! {
                        () = stop.cancelled() => None,
                        done = tokio::time::timeout(header_timeout, tls.accept(io)) => Some(done),
                    };
                    match handshake {
                        Some(Ok(Ok(stream))) => drive(&http, TokioIo::new(stream), app, stop).await,
                        // Plain HTTP, a client that does not trust the certificate: theirs to know.
                        Some(Ok(Err(e))) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Some(Err(_)) => tracing::debug!("TLS handshake timed out"),
                        None => {}
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    open.close();
    open.wait().await;
}

/// Serves one connection until it ends, or until `stop` fires and its response in flight is done.
async fn drive<I>(http: &hyper::server::conn::http1::Builder, io: I, app: WithPeer, stop: CancellationToken)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    // With upgrades: the live view's WebSocket (`api::live`) takes the connection over after its 101.
    let connection = http.serve_connection(io, TowerToHyperService::new(app)).with_upgrades();
    let mut connection = std::pin::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        // Timeouts, clients that went away, malformed requests: theirs to know, not the operator's.
        tracing::debug!(error = %e, "API connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A router with `/` (a short answer) and `/stream` (an endless body), served on loopback with `slots`
    /// connection slots.
    async fn served(slots: usize, timeouts: Timeouts) -> (std::net::SocketAddr, CancellationToken) {
        // One handler for every path (routes are added only through `api::endpoints`).
        let app = Router::new().fallback(|uri: axum::http::Uri, peer: Option<axum::Extension<Peer>>| async move {
            if uri.path() == "/peer" {
                axum::body::Body::from(format!("{:?}", peer.map(|p| p.0)))
            } else if uri.path() == "/stream" {
                let chunk = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
                let stream = futures_util::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
                axum::body::Body::from_stream(stream)
            } else {
                axum::body::Body::from("ok")
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let connections = (Arc::new(Semaphore::new(slots)), slots);
        tokio::spawn(serve(listener, app, timeouts, connections, None, stop.clone()));
        (address, stop)
    }

    async fn get_root(address: std::net::SocketAddr) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer).await;
        answer
    }

    #[tokio::test]
    async fn every_request_knows_the_address_its_connection_came_from() {
        let long = Duration::from_secs(60);
        let (address, stop) = served(4, Timeouts { header: long, write: long }).await;
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET /peer HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer).await;
        assert!(answer.ends_with("Some(Peer(Some(127.0.0.1)))"), "{answer}");
        stop.cancel();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_connections_holding_every_slot_do_not_starve_a_client_with_a_request() {
        let long = Duration::from_secs(60);
        let (address, stop) = served(4, Timeouts { header: long, write: long }).await;
        // Every slot taken by a connection that never sends a request (and one more waiting behind them).
        let mut idle = Vec::new();
        for _ in 0..5 {
            idle.push(tokio::net::TcpStream::connect(address).await.unwrap());
        }
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(30), get_root(address))
            .await
            .unwrap_or_else(|_| panic!("starved: no answer within 30 s (the idle connections' head timeout is 60 s)"));
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{answer}");
        assert!(started.elapsed() < long, "served only after an idle holder's full head timeout");
        stop.cancel();
        drop(idle);
    }

    /// On tokio's paused clock: time moves only when every task waits, so the server's writes have stalled
    /// on the full socket buffers (the client reads nothing) before the write timeout can pass.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_is_disconnected_after_the_write_timeout() {
        let (address, stop) =
            served(8, Timeouts { header: Duration::from_secs(60), write: Duration::from_secs(1) }).await;
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        // What was buffered is read to its end and then the connection is over; a connection still open would
        // stream on without end (bounded here at 256 MiB, far beyond any socket buffer).
        let mut buffer = vec![0u8; 1 << 20];
        let mut total = 0usize;
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
            assert!(total < 256 << 20, "the stalled connection is still open: {total} bytes read after the timeout");
        }
        assert!(total > 0, "the stream sent nothing at all");
        stop.cancel();
    }
}
