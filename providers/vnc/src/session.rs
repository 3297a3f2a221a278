//! The life of the RFB connection: connecting, the reader that keeps the local framebuffer current, the
//! writer that sends input, and reconnecting after the connection dropped.
//!
//! One *supervisor* thread per provider owns the connection. It runs the reader loop on the socket (a
//! blocking read per message; decoding happens here, off the async runtime), applies each update to the
//! shared [`Framebuffer`] under a short lock, and asks for the next incremental update at once, so the
//! server pushes changes as they happen and a screenshot is a copy of memory. Outgoing messages (input,
//! update requests) go through a *writer* thread fed by a channel, so the reader never waits on a write —
//! a server blocked on sending us pixels cannot deadlock against us blocked on sending it keys.
//!
//! **Fences.** A frame may be older than the last input: the server may not have drawn the input's effect
//! into what it sends yet, or an update sent before the input may still be on its way. So after every input
//! action the provider sends a *fence*: a non-incremental `FramebufferUpdateRequest` for one pixel, which
//! every server answers at once (with whatever else changed). Servers answer requests in order, never
//! unasked, and the reader keeps one request of its own outstanding; so of the updates that arrive after the
//! fence was written, the second at the latest answers it ([`Shared::fence`] holds that count). While a fence
//! is waiting the reader adds a one-pixel request to each of its own, so that second update comes at once even
//! on a still screen. A screenshot waits until the count is reached; on an unchanged screen with no input
//! since the last one, it is still a copy of memory.
//!
//! When the connection drops, the supervisor publishes [`Status::Lost`] and reconnects with backoff
//! (100 ms doubling to 2 s) for as long as the provider lives; a refused password ends that with
//! [`Status::Failed`]. Callers wait a bounded time for [`Status::Connected`] (see `VncProvider`).

use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::decode::{Decoder, Framebuffer, MAX_DIMENSION, Op};
use crate::error::{VncError, WireError};
use crate::proto::{self, PixelFormat, ServerInit};
use crate::{Encodings, VncConfig};

/// Where the connection stands, as callers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// The first connection attempt is under way.
    Connecting,
    /// Connected, and the framebuffer holds at least one complete update of this connection.
    Connected,
    /// The connection dropped; reconnecting. The reason of the last failure.
    Lost(String),
    /// Reconnecting is pointless (wrong password, not an RFB server): the error to report.
    Failed(VncError),
    /// The provider was dropped.
    Closed,
}

/// A message to send, and where to report that it was written.
pub struct Outgoing {
    pub bytes: Vec<u8>,
    pub done: Option<oneshot::Sender<Result<(), String>>>,
    /// The message is a fence (see the module docs): raise [`Shared::fence`] as it is written.
    pub fence: bool,
}

/// What the provider and the supervisor share.
pub struct Shared {
    pub address: String,
    pub framebuffer: Mutex<Framebuffer>,
    pub status: watch::Sender<Status>,
    /// How many updates with pixels in them have been applied (all connections).
    pub updates: watch::Sender<u64>,
    /// The value of `updates` at which the last fence written has been answered: a screenshot waits for it.
    pub fence: AtomicU64,
    /// The current connection's writer, `None` while disconnected.
    pub writer: Mutex<Option<mpsc::Sender<Outgoing>>>,
    /// The current socket, kept to shut it down when the provider is dropped.
    socket: Mutex<Option<TcpStream>>,
    /// Incremented for every connection, so input state (held buttons) resets with a new one.
    pub generation: Mutex<u64>,
    closed: AtomicBool,
}

impl Shared {
    pub fn new(address: String) -> Arc<Self> {
        Arc::new(Self {
            address,
            framebuffer: Mutex::new(Framebuffer::new(1, 1)),
            status: watch::channel(Status::Connecting).0,
            updates: watch::channel(0).0,
            fence: AtomicU64::new(0),
            writer: Mutex::new(None),
            socket: Mutex::new(None),
            generation: Mutex::new(0),
            closed: AtomicBool::new(false),
        })
    }

    /// Stops the supervisor: no more reconnects, the socket is shut down so the reader wakes up.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.status.send_replace(Status::Closed);
        if let Ok(mut socket) = self.socket.lock()
            && let Some(socket) = socket.take()
        {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// A connection after the handshake, before its reader runs.
pub struct Connection {
    stream: TcpStream,
    init: ServerInit,
}

impl Connection {
    pub fn name(&self) -> &str {
        &self.init.name
    }
}

/// Connects, authenticates and asks for our pixel format, the encodings and a full first update.
pub fn connect(config: &VncConfig) -> Result<Connection, VncError> {
    let address = config.address.as_str();
    let connect_error = |reason: String| VncError::Connect { address: address.to_string(), reason };
    let addrs: Vec<SocketAddr> =
        address.to_socket_addrs().map_err(|e| connect_error(format!("cannot resolve the address: {e}")))?.collect();
    let mut last = String::from("the address resolves to nothing");
    let mut stream = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, config.connect_timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e.to_string(),
        }
    }
    let mut stream = stream.ok_or_else(|| connect_error(last))?;
    let io = |e: std::io::Error| connect_error(e.to_string());
    stream.set_nodelay(true).map_err(io)?;
    stream.set_read_timeout(Some(config.connect_timeout)).map_err(io)?;
    stream.set_write_timeout(Some(config.connect_timeout)).map_err(io)?;
    let init = proto::handshake(&mut stream, config.password.as_deref()).map_err(|e| e.at(address))?;
    if init.width == 0
        || init.height == 0
        || u32::from(init.width) > MAX_DIMENSION
        || u32::from(init.height) > MAX_DIMENSION
    {
        return Err(VncError::Protocol {
            address: address.to_string(),
            reason: format!("a desktop of {}x{}", init.width, init.height),
        });
    }
    let encodings = encodings(config.encodings);
    let mut setup = proto::set_pixel_format(PixelFormat::RGBX);
    setup.extend_from_slice(&proto::set_encodings(&encodings));
    setup.extend_from_slice(&proto::update_request(false, init.width, init.height));
    stream.write_all(&setup).map_err(io)?;
    // From here on the reader waits as long as the screen stays still; a dead peer is found by keepalive.
    stream.set_read_timeout(None).map_err(io)?;
    stream.set_write_timeout(Some(Duration::from_secs(10))).map_err(io)?;
    keepalive(&stream);
    tracing::debug!(address, name = %init.name, width = init.width, height = init.height, minor = init.minor, "VNC connected");
    Ok(Connection { stream, init })
}

/// The encodings to ask for, preferred first.
fn encodings(choice: Encodings) -> Vec<i32> {
    let mut list = match choice {
        Encodings::Raw => vec![proto::RAW, proto::COPY_RECT, proto::ZRLE],
        Encodings::Zrle => vec![proto::ZRLE, proto::COPY_RECT, proto::RAW],
    };
    // Not ExtendedDesktopSize: with it, Xvnc answers every non-incremental request (every fence) with an
    // update holding only the screen layout and sends the pixels on the next request, a second round trip.
    // DesktopSize reports resizes all the same.
    list.extend([proto::DESKTOP_SIZE, proto::LAST_RECT]);
    list
}

/// TCP keepalive: a peer that vanished without closing (a VM powered off) is noticed within ~30 s (probes
/// after 10 s idle, every 5 s, 4 of them: `SO_KEEPALIVE`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL` and `TCP_KEEPCNT` on
/// Linux, their equivalents on macOS and Windows). Best effort: a socket that refuses them still works.
fn keepalive(stream: &TcpStream) {
    let params = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(4);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&params) {
        tracing::debug!(error = %e, "TCP keepalive not set");
    }
}

/// Runs the provider's connection until it is closed: `first` now, reconnections later.
pub fn supervise(shared: Arc<Shared>, config: VncConfig, first: Connection) {
    let mut next = Some(first);
    let mut backoff = Duration::from_millis(100);
    loop {
        if shared.is_closed() {
            return;
        }
        let connection = match next.take() {
            Some(connection) => connection,
            None => match connect(&config) {
                Ok(connection) => connection,
                Err(e) if e.is_retryable() => {
                    shared.status.send_replace(Status::Lost(e.to_string()));
                    sleep_unless_closed(&shared, backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
                Err(e) => {
                    tracing::warn!(address = %shared.address, error = %e, "VNC reconnect failed for good");
                    shared.status.send_replace(Status::Failed(e));
                    return;
                }
            },
        };
        backoff = Duration::from_millis(100);
        let reason = run_connection(&shared, connection);
        if shared.is_closed() {
            return;
        }
        tracing::warn!(address = %shared.address, %reason, "VNC connection lost; reconnecting");
        shared.status.send_replace(Status::Lost(reason));
    }
}

fn sleep_unless_closed(shared: &Shared, total: Duration) {
    let until = Instant::now() + total;
    while !shared.is_closed() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
    }
}

/// Serves one connection until it fails; returns why.
fn run_connection(shared: &Arc<Shared>, connection: Connection) -> String {
    let Connection { stream, init } = connection;
    let (width, height) = (u32::from(init.width), u32::from(init.height));
    let (writer_stream, socket) = match (stream.try_clone(), stream.try_clone()) {
        (Ok(w), Ok(s)) => (w, s),
        (Err(e), _) | (_, Err(e)) => return format!("cannot share the socket: {e}"),
    };
    if let Ok(mut slot) = shared.socket.lock() {
        *slot = Some(socket);
    }
    if shared.is_closed() {
        let _ = stream.shutdown(Shutdown::Both);
        return "closed".into();
    }
    let (tx, rx) = mpsc::channel::<Outgoing>();
    let writer = std::thread::Builder::new().name(format!("agentd-vnc-writer {}", shared.address)).spawn({
        let shared = shared.clone();
        move || write_loop(&shared, writer_stream, rx)
    });
    if let Err(e) = writer {
        return format!("cannot start the writer thread: {e}");
    }
    if let Ok(mut generation) = shared.generation.lock() {
        *generation += 1;
    }
    if let Ok(mut slot) = shared.writer.lock() {
        *slot = Some(tx.clone());
    }
    let reason = match read_loop(shared, &stream, &tx, width, height) {
        Ok(()) => "closed".to_string(),
        Err(e) => e.to_string(),
    };
    if let Ok(mut slot) = shared.writer.lock() {
        *slot = None;
    }
    let _ = stream.shutdown(Shutdown::Both);
    reason
}

fn write_loop(shared: &Shared, mut stream: TcpStream, rx: mpsc::Receiver<Outgoing>) {
    while let Ok(message) = rx.recv() {
        if message.fence {
            // Counted before writing: an update applied between this count and the write is one of the
            // (at most) two that can precede the fence's answer, so the answer is still within two.
            let answered = *shared.updates.borrow() + 2;
            shared.fence.fetch_max(answered, Ordering::SeqCst);
        }
        let result = stream.write_all(&message.bytes).map_err(|e| e.to_string());
        let failed = result.is_err();
        if let Some(done) = message.done {
            let _ = done.send(result);
        }
        if failed {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    }
}

fn read_loop(
    shared: &Shared,
    stream: &TcpStream,
    writer: &mpsc::Sender<Outgoing>,
    width: u32,
    height: u32,
) -> Result<(), WireError> {
    let mut reader = BufReader::with_capacity(1 << 18, stream);
    let mut decoder = Decoder::new(width, height);
    let (mut w, mut h) = (width, height);
    let mut first = true;
    loop {
        let message = proto::read_u8(&mut reader)?;
        match message {
            0 => {
                let ops = decoder.read_update(&mut reader)?;
                let has_pixels = ops.iter().any(|op| !matches!(op, Op::Resize { .. }));
                // A size announcement of the size we have is not a resize (x11vnc answers every full
                // request with one).
                let resized = ops
                    .iter()
                    .rev()
                    .find_map(|op| match op {
                        Op::Resize { width, height } => Some((*width, *height)),
                        _ => None,
                    })
                    .filter(|&size| size != (w, h));
                {
                    let mut fb = shared
                        .framebuffer
                        .lock()
                        .map_err(|_| WireError::Protocol("framebuffer lock poisoned".into()))?;
                    if first && (fb.width, fb.height) != (w, h) {
                        *fb = Framebuffer::new(w, h);
                    }
                    fb.apply(ops);
                }
                if let Some((nw, nh)) = resized {
                    tracing::debug!(address = %shared.address, width = nw, height = nh, "VNC desktop resized");
                    (w, h) = (nw, nh);
                }
                if has_pixels {
                    shared.updates.send_modify(|n| *n += 1);
                }
                // Connected once pixels arrived: the answer to the first, full request (an update with only a
                // size in it, as x11vnc sends first, is not a picture yet).
                if first && has_pixels {
                    first = false;
                    shared.status.send_replace(Status::Connected);
                }
                // A resize is followed by a full update of the new size; otherwise ask for changes only.
                let mut request = proto::update_request(
                    resized.is_none(),
                    w.min(u32::from(u16::MAX)) as u16,
                    h.min(u32::from(u16::MAX)) as u16,
                )
                .to_vec();
                // A fence is waiting: make sure the next update comes even if nothing changes. (Not after an
                // update without pixels: a server that answers a full request with only a size, keeping the
                // pixels for the next request, would answer another full request the same way, forever.)
                if has_pixels && *shared.updates.borrow() < shared.fence.load(Ordering::SeqCst) {
                    request.extend_from_slice(&proto::FENCE_REQUEST);
                }
                writer
                    .send(Outgoing { bytes: request, done: None, fence: false })
                    .map_err(|_| WireError::Io("the writer stopped".into()))?;
            }
            1 => {
                // SetColourMapEntries: only for colour-mapped formats, which we never ask for.
                let mut header = [0u8; 5];
                reader.read_exact(&mut header)?;
                let count = u16::from_be_bytes([header[3], header[4]]);
                let mut skip = vec![0u8; usize::from(count) * 6];
                reader.read_exact(&mut skip)?;
            }
            2 => {} // Bell.
            3 => {
                // ServerCutText: the remote clipboard; not used.
                let mut pad = [0u8; 3];
                reader.read_exact(&mut pad)?;
                let len = proto::read_u32(&mut reader)? as u64;
                std::io::copy(&mut (&mut reader).take(len), &mut std::io::sink())?;
            }
            other => {
                return Err(WireError::Protocol(format!("unknown server message type {other}")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same four options the provider set through libc before it used socket2 (Linux reads them back).
    #[cfg(target_os = "linux")]
    #[test]
    fn keepalive_probes_after_10_s_every_5_s_4_times() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let socket = socket2::SockRef::from(&stream);
        assert!(!socket.keepalive().unwrap());
        keepalive(&stream);
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), Duration::from_secs(10));
        assert_eq!(socket.tcp_keepalive_interval().unwrap(), Duration::from_secs(5));
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), 4);
    }
}
