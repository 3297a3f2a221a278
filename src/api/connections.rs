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

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Serves `app` on every connection `listener` accepts while a permit of `connections` is free, until `stop`
/// fires; then asks open connections to finish their response and close, and waits for them. With `tls`,
/// every connection speaks TLS first.
pub(super) async fn serve<L: Listener>(
    mut listener: L,
    app: Router,
    header_timeout: Duration,
    connections: Arc<Semaphore>,
    tls: Option<TlsAcceptor>,
    stop: CancellationToken,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(header_timeout);
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
        let (io, _) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (http, app, stop, tls) = (http.clone(), app.clone(), stop.clone(), tls.clone());
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
async fn drive<I>(http: &hyper::server::conn::http1::Builder, io: I, app: Router, stop: CancellationToken)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let connection = http.serve_connection(io, TowerToHyperService::new(app));
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
