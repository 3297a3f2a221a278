//! A TCP fault proxy for integration tests: it forwards bytes between clients and one upstream address, and can
//! be taken "down" — refusing new connections (accepted and closed at once) and cutting every live one — and
//! brought back up. Plain std threads, no dependencies.
//!
//! One accept thread polls a non-blocking listener (so it notices `Drop` within milliseconds), and each
//! connection has two pump threads, one per direction. Cutting a connection shuts both sockets down, which
//! wakes any pump blocked in `read` or `write`; so `set_down(true)` and `Drop` never wait on a peer, and every
//! thread is joined.

#![allow(dead_code)] // A shared helper: not every test uses every method.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long connecting to the upstream may take before the client's connection is dropped.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// Where new connections go ([`FaultProxy::set_upstream`] changes it).
    upstream: Mutex<SocketAddr>,
    down: AtomicBool,
    stop: AtomicBool,
    next_id: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    /// Live connections: id → (client socket, upstream socket), clones kept to cut them.
    live: Mutex<HashMap<u64, (TcpStream, TcpStream)>>,
    /// Pump threads, joined on drop (finished ones are reaped as new connections come).
    pumps: Mutex<Vec<JoinHandle<()>>>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards every connection to `upstream`. Starts up.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fault proxy");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            upstream: Mutex::new(upstream),
            down: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            live: Mutex::new(HashMap::new()),
            pumps: Mutex::new(Vec::new()),
        });
        let accept_shared = shared.clone();
        let accept_thread = std::thread::Builder::new()
            .name("fault-proxy-accept".into())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .expect("spawn the proxy's accept thread");
        FaultProxy { addr, shared, accept_thread: Some(accept_thread) }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for HTTP clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Down: new connections are closed at once and every live one is cut. Up: connections are forwarded.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
        if down {
            // Connections registered before this point are cut here; later ones see `down` under the same lock.
            let live: Vec<(TcpStream, TcpStream)> = match self.shared.live.lock() {
                Ok(mut live) => live.drain().map(|(_, pair)| pair).collect(),
                Err(_) => Vec::new(),
            };
            for (client, upstream) in live {
                cut(&client, &upstream);
            }
        }
    }

    /// Sends connections made from now on to `upstream` (live ones stay where they are): a server restarted
    /// elsewhere behind the same address.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        if let Ok(mut current) = self.shared.upstream.lock() {
            *current = upstream;
        }
    }

    pub fn is_down(&self) -> bool {
        self.shared.down.load(Ordering::SeqCst)
    }

    /// Connections forwarded so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections closed at once because the proxy was down (or the upstream refused).
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// Connections being forwarded now.
    pub fn live(&self) -> usize {
        self.shared.live.lock().map(|l| l.len()).unwrap_or(0)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.set_down(true);
        if let Some(thread) = self.accept_thread.take() {
            let _ = thread.join();
        }
        let pumps: Vec<JoinHandle<()>> = match self.shared.pumps.lock() {
            Ok(mut pumps) => pumps.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for pump in pumps {
            let _ = pump.join();
        }
    }
}

fn cut(client: &TcpStream, upstream: &TcpStream) {
    let _ = client.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => handle(client, shared),
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn handle(client: TcpStream, shared: &Arc<Shared>) {
    let refuse = |client: TcpStream| {
        shared.refused.fetch_add(1, Ordering::SeqCst);
        let _ = client.shutdown(Shutdown::Both);
    };
    if shared.down.load(Ordering::SeqCst) {
        return refuse(client);
    }
    // The accepted socket may inherit non-blocking mode on some platforms; the pumps want blocking IO.
    let _ = client.set_nonblocking(false);
    let _ = client.set_nodelay(true);
    let Ok(target) = shared.upstream.lock().map(|u| *u) else {
        return refuse(client);
    };
    let Ok(upstream) = TcpStream::connect_timeout(&target, UPSTREAM_CONNECT_TIMEOUT) else {
        return refuse(client);
    };
    let _ = upstream.set_nodelay(true);
    let clones = (client.try_clone(), upstream.try_clone(), client.try_clone(), upstream.try_clone());
    let (Ok(client_kept), Ok(upstream_kept), Ok(client_read), Ok(upstream_read)) = clones else {
        cut(&client, &upstream);
        return refuse(client);
    };
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    {
        let Ok(mut live) = shared.live.lock() else {
            cut(&client, &upstream);
            return refuse(client);
        };
        // Checked under the lock `set_down` drains: a connection is either cut there or refused here.
        if shared.down.load(Ordering::SeqCst) {
            drop(live);
            cut(&client, &upstream);
            return refuse(client);
        }
        live.insert(id, (client_kept, upstream_kept));
    }
    shared.accepted.fetch_add(1, Ordering::SeqCst);
    let ended = Arc::new(AtomicU8::new(0));
    let to_upstream = spawn_pump(shared, id, &ended, client_read, upstream);
    let to_client = spawn_pump(shared, id, &ended, upstream_read, client);
    if let Ok(mut pumps) = shared.pumps.lock() {
        pumps.retain(|p| !p.is_finished());
        pumps.extend(to_upstream);
        pumps.extend(to_client);
    }
}

/// Copies `from` → `to` until either side ends, then half-closes `to`; the second pump of a connection to end
/// (counted in `ended`) forgets it.
fn spawn_pump(
    shared: &Arc<Shared>,
    id: u64,
    ended: &Arc<AtomicU8>,
    mut from: TcpStream,
    mut to: TcpStream,
) -> Option<JoinHandle<()>> {
    let shared = shared.clone();
    let ended = ended.clone();
    std::thread::Builder::new()
        .name(format!("fault-proxy-{id}"))
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = to.shutdown(Shutdown::Write);
            let _ = from.shutdown(Shutdown::Read);
            if ended.fetch_add(1, Ordering::SeqCst) == 1
                && let Ok(mut live) = shared.live.lock()
            {
                live.remove(&id);
            }
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free port; returns its address. Serves until the process ends.
    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind echo");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || stream.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn echo_once(addr: SocketAddr, message: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(message)?;
        let mut got = vec![0u8; message.len()];
        stream.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn forwards_refuses_cuts_and_recovers() {
        let proxy = FaultProxy::start(echo_server());
        assert_eq!(echo_once(proxy.addr(), b"hello").expect("echo through the proxy"), b"hello");

        // Many concurrent connections.
        let threads: Vec<_> = (0..32)
            .map(|i| {
                let addr = proxy.addr();
                std::thread::spawn(move || {
                    let message = format!("message {i} ").repeat(1000);
                    echo_once(addr, message.as_bytes()).map(|got| got == message.as_bytes())
                })
            })
            .collect();
        for thread in threads {
            assert!(thread.join().expect("thread").expect("echo"), "bytes forwarded intact");
        }

        // A live connection is cut when the proxy goes down.
        let mut held = TcpStream::connect(proxy.addr()).expect("connect");
        held.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        held.write_all(b"ping").expect("write");
        let mut buf = [0u8; 4];
        held.read_exact(&mut buf).expect("echo before the cut");
        proxy.set_down(true);
        let cut = held.read(&mut buf);
        assert!(matches!(cut, Ok(0) | Err(_)), "the live connection was cut: {cut:?}");

        // While down, new connections are closed at once.
        let started = std::time::Instant::now();
        assert!(echo_once(proxy.addr(), b"x").is_err(), "refused while down");
        assert!(started.elapsed() < Duration::from_secs(2), "refused at once, not timed out");
        assert!(proxy.refused() >= 1);

        proxy.set_down(false);
        assert_eq!(echo_once(proxy.addr(), b"back").expect("echo after recovery"), b"back");
        // Dropping joins every thread (a hang here would time the test out).
        let _still_open = TcpStream::connect(proxy.addr()).expect("connect");
        drop(proxy);
    }

    /// A server that answers every connection with `name` and closes it.
    fn greeter(name: &'static [u8]) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind greeter");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let _ = stream.write_all(name);
            }
        });
        addr
    }

    fn greeting(addr: SocketAddr) -> Vec<u8> {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let mut got = Vec::new();
        let _ = stream.read_to_end(&mut got);
        got
    }

    #[test]
    fn a_new_upstream_takes_the_connections_made_after_it() {
        let proxy = FaultProxy::start(greeter(b"first"));
        assert_eq!(greeting(proxy.addr()), b"first");
        proxy.set_upstream(greeter(b"second"));
        assert_eq!(greeting(proxy.addr()), b"second");
    }
}
