//! The front door: one task accepts TCP connections. Each reads the HTTP
//! request head itself and passes it through the core's gate
//! (`protocol::front_door::Gate`: the Host, the Origin and the connection
//! token, refused on the request itself); then a WebSocket upgrade (any
//! path) becomes a client
//! connection with a reader (frames in) and a writer task (frames out, in
//! order); a plain `GET /healthz` or `GET /metrics` is answered on the spot;
//! anything else is 404. A client's frames are decoded here, in the
//! connection's reader, with the core's own decoder
//! (`protocol::codec::decode_bounded`), and an envelope's frame is encoded in
//! the writer of the first connection to send it: a 900 KB message is never
//! decoded or encoded on the driver's thread, which every client waits on
//! (issue 25). What a frame means is the core's business.

use std::collections::BTreeSet;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ahpd_core::effect::Broadcast;
use ahpd_core::protocol::codec::{self, Incoming};
use ahpd_core::protocol::front_door::{self, Admitted, Arrival, Gate, Refusal, RequestHead};
use ahpd_core::{ConnId, Input};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use super::bulk;
use crate::events::{Event, EventSink};

/// How long a client may take over the WebSocket handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest message accepted from a client, in bytes.
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Most bytes of one connection's frames handed to the driver and not yet
/// handled by it, in bytes. The driver's event queue has no bound of its
/// own: a client sending big frames faster than the core takes them (each
/// is decoded, checked and, over the rate, refused) would pile them up in
/// the daemon's memory. Past this the connection's reader waits for the
/// driver before it reads on, so the client meets TCP's backpressure
/// instead (issue 25). One frame over it (up to `MAX_MESSAGE_BYTES`) still
/// goes, alone.
const INBOUND_MAX_BYTES: usize = MAX_MESSAGE_BYTES;

/// The kernel's send buffer asked for each client connection, in bytes
/// (the kernel doubles it for its bookkeeping). Without it the kernel grows
/// a connection's buffer up to `net.ipv4.tcp_wmem`'s maximum (4 MiB here)
/// for a client that does not read, besides the daemon's own
/// `outgoing_buffer_max_bytes`: memory a client grows that no bound of
/// ours counts, and megabytes copied into it (issue 25).
const SEND_BUFFER_BYTES: usize = 512 << 10;

/// Largest HTTP request head read before the upgrade, in bytes.
const MAX_HEAD_BYTES: usize = 16 << 10;

/// How long `/metrics` waits for the driver's figures.
const METRICS_TIMEOUT: Duration = Duration::from_secs(5);

/// Most bytes of queued frames one write gathers (they are fed to the
/// socket's buffer and flushed together); the rest wait for the next.
const WRITE_BATCH_BYTES: usize = 256 << 10;

/// Largest WebSocket frame the writer sends, in bytes (256 KiB): a longer
/// message goes out as fragments of this size (RFC 6455 5.4; every client
/// joins them back into one message). The WebSocket library copies what is
/// left of its output buffer to the front after each partial write to the
/// socket, and the socket takes at most its send buffer
/// ([`SEND_BUFFER_BYTES`]) at a time: one 13 MiB frame cost hundreds of
/// such copies of megabytes each, a `resourceRead` of 10 MiB ran at a third
/// of a plain server's speed (issue 48). Fragments bound each copy.
const FRAGMENT_BYTES: usize = 256 << 10;

/// A command for a connection's writer task.
#[derive(Debug)]
pub enum WriterCmd {
    /// Write one text frame. Cheap to clone: one notification fanned out to
    /// many connections is encoded once and its bytes shared (issue 21).
    Frame(Utf8Bytes),
    /// Write one envelope's `action` frame ([`Broadcast::frame`]): encoded
    /// here, by the first writer to reach it, and shared by every other
    /// (issue 25: not on the driver's thread).
    Action(Arc<Broadcast>),
    /// Close the connection once everything queued before this is written.
    Close,
    /// Like [`WriterCmd::Close`], with an RFC 6455 close code and a reason
    /// (at most 123 bytes) in the close frame.
    CloseWith {
        /// The close code (RFC 6455 section 7.4.1, e.g. 1001 going away).
        code: u16,
        /// Why, in words, for the client's log (cut to the 123 bytes a
        /// close frame holds).
        reason: String,
    },
}

/// The bytes an `action` frame adds around its envelope:
/// `{"jsonrpc":"2.0","method":"action","params":` and `}`.
const ACTION_FRAME_OVERHEAD: usize = 45;

impl WriterCmd {
    /// What the command counts against its connection's backlog, in bytes:
    /// a frame's length; an envelope's weight and its frame's wrapping (the
    /// frame is not encoded yet when it is queued).
    fn bytes(&self) -> usize {
        match self {
            WriterCmd::Frame(text) => text.len(),
            WriterCmd::Action(broadcast) => broadcast.weight() + ACTION_FRAME_OVERHEAD,
            WriterCmd::Close | WriterCmd::CloseWith { .. } => 0,
        }
    }
}

/// An envelope's frame text, shared with the [`Broadcast`] that made it
/// (no copy): the bytes a `Utf8Bytes` is built over.
struct SharedText(Arc<str>);

impl AsRef<[u8]> for SharedText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// `broadcast`'s frame as a WebSocket text payload, encoded now if no
/// writer has yet.
fn action_frame(broadcast: &Broadcast) -> Utf8Bytes {
    let bytes = bytes::Bytes::from_owner(SharedText(Arc::clone(broadcast.frame())));
    // Not checked again: every subscriber's writer comes here, and a scan
    // of a 900 KB frame per subscriber is the fan-out's work done N times.
    // SAFETY: the bytes are those of an `Arc<str>`, UTF-8 by its type.
    #[allow(unsafe_code)]
    unsafe {
        Utf8Bytes::from_bytes_unchecked(bytes)
    }
}

/// Close code 1001 "going away": the host is shutting down (RFC 6455 7.4.1).
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// Close code 1007: a text frame that is not UTF-8 (RFC 6455 7.4.1).
const CLOSE_INVALID_DATA: u16 = 1007;

/// Close code 1009: a message too big to process (RFC 6455 7.4.1).
const CLOSE_TOO_BIG: u16 = 1009;

/// How long a connection closed for a bad frame is still read (and what is
/// read thrown away) after its close frame, so that the client, perhaps
/// still sending the frame, reads the close code instead of a TCP reset
/// (a socket closed with unread bytes answers with a reset).
const LINGER: Duration = Duration::from_secs(10);

/// Most bytes thrown away while lingering, in bytes.
const LINGER_MAX_BYTES: u64 = 256 << 20;

/// The driver's handle on one connection's writer task. Frames queue
/// without waiting, but only up to a bound in bytes: a client that does not
/// read its socket while frames pile up past it is dropped (issue 11, slow
/// clients), so one stuck client never grows the daemon's memory without end
/// and never holds up the others. One frame bigger than the whole bound
/// (a reconnect's snapshots of a huge chat) still goes when nothing else
/// is queued: the bound is on what piles up, not on one answer.
#[derive(Debug, Clone)]
pub struct Writer {
    tx: mpsc::UnboundedSender<WriterCmd>,
    backlog: Arc<Backlog>,
}

/// The bytes queued for one connection and not yet handed to its socket.
#[derive(Debug)]
struct Backlog {
    /// Bytes of frames queued and not yet written, in bytes.
    queued: AtomicUsize,
    /// The bound (`Limits::outgoing_buffer_max_bytes`), in bytes.
    max: usize,
    /// Fired once when the bound is passed: the writer task stops at once.
    overflow: Notify,
    /// Whether the bound was passed (later frames are dropped unqueued).
    overflowed: AtomicBool,
}

impl Writer {
    /// Queues `cmd`; a connection that is already gone drops it. A frame
    /// that would take the connection's backlog past its bound, with other
    /// frames still unwritten, is not queued: the connection is dropped
    /// instead (a log line says so; its reader then reports
    /// `Input::Disconnected`).
    pub fn send(&self, cmd: WriterCmd) {
        let b = &self.backlog;
        if b.overflowed.load(Ordering::Relaxed) {
            return;
        }
        let len = cmd.bytes();
        if len > 0 {
            let before = b.queued.fetch_add(len, Ordering::Relaxed);
            if before > 0 && before + len > b.max {
                b.overflowed.store(true, Ordering::Relaxed);
                // The writer task logs the drop, naming the connection.
                b.overflow.notify_one();
                return;
            }
        }
        let _ = self.tx.send(cmd);
    }

    /// Resolves once the connection's writer task has ended (its socket
    /// written and closed, or dropped); at once if it already has.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }
}

/// Accepts connections on every one of `listeners` forever, numbering them
/// from 1 across all of them; each connection may have at most
/// `outgoing_max_bytes` of frames queued and unread. Accept errors (e.g.
/// out of file descriptors) are logged and retried after a short pause;
/// they never end the daemon.
/// Frames are decoded with a bound of `frame_max_bytes`
/// (`Limits::frame_max_bytes`; the core holds its own bound too).
/// Every request passes `gate` first (`front_door`: Host, Origin, token).
pub async fn serve(listeners: Vec<TcpListener>, events: EventSink, gate: Gate, outgoing_max_bytes: usize, frame_max_bytes: usize) {
    let next_conn = Arc::new(AtomicU64::new(1));
    let gate = Arc::new(gate);
    let loops = listeners.into_iter().map(|l| accept_loop(l, events.clone(), Arc::clone(&gate), Bounds { outgoing_max_bytes, frame_max_bytes }, next_conn.clone()));
    futures_util::future::join_all(loops).await;
}

/// A connection's two byte bounds (see [`serve`]).
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// `Limits::outgoing_buffer_max_bytes`, in bytes.
    outgoing_max_bytes: usize,
    /// `Limits::frame_max_bytes`, in bytes.
    frame_max_bytes: usize,
}

/// One listener's accept loop of [`serve`]; `next_conn` is shared by all.
async fn accept_loop(listener: TcpListener, events: EventSink, gate: Arc<Gate>, bounds: Bounds, next_conn: Arc<AtomicU64>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let conn = ConnId(next_conn.fetch_add(1, Ordering::Relaxed));
                let events = events.clone();
                let gate = Arc::clone(&gate);
                tokio::spawn(async move {
                    tracing::debug!(conn = conn.0, %peer, "tcp connection");
                    connection(stream, peer, conn, events, &gate, bounds).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads until the end of the request head (`\r\n\r\n`); returns every
/// byte read (the head and whatever followed it) and the head's length.
async fn read_head(stream: &mut TcpStream) -> io::Result<Option<(Vec<u8>, usize)>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some((buf, at + 4)));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A stream that first replays bytes already read from it.
struct Replay {
    prefix: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl AsyncRead for Replay {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Replay {
    /// At most `fsutil::WRITE_PIECE_BYTES` per call: a socket write of a
    /// megabyte is one long stretch in the kernel (on loopback it carries
    /// the receiving side's work too) that no other thread can preempt;
    /// the WebSocket layer writes the rest in further calls (issue 25).
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let piece = buf.len().min(super::fsutil::WRITE_PIECE_BYTES);
        Pin::new(&mut self.inner).poll_write(cx, &buf[..piece])
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Answers a plain HTTP request: `/healthz`, `/metrics`, else 404.
async fn http(mut stream: TcpStream, head: RequestHead, events: &EventSink) {
    let (status, content_type, body) = match (head.method.as_str(), head.path.as_str()) {
        ("GET", "/healthz") => ("200 OK", "text/plain; charset=utf-8", "ok\n".to_owned()),
        ("GET", "/metrics") => {
            let (tx, rx) = oneshot::channel();
            events.send(Event::Metrics(tx));
            match tokio::time::timeout(METRICS_TIMEOUT, rx).await {
                Ok(Ok(text)) => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", text),
                _ => ("503 Service Unavailable", "text/plain; charset=utf-8", "the host is shutting down or busy\n".to_owned()),
            }
        }
        (_, "/healthz" | "/metrics") => ("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET\n".to_owned()),
        _ => ("404 Not Found", "text/plain; charset=utf-8", "not found: this port serves the AHP WebSocket, /healthz and /metrics\n".to_owned()),
    };
    respond_typed(&mut stream, status, "", content_type, &body).await;
}

/// A request's `id` and its method's label ([`crate::metrics::method_label`]),
/// for the metrics; `None` for notifications and frames that are not
/// JSON-RPC requests.
fn request_of(frame: &codec::Decoded) -> Option<(u64, &'static str)> {
    match frame {
        Ok(Incoming::Request { id, method, .. }) => Some((*id, crate::metrics::method_label(method))),
        _ => None,
    }
}

/// Requests the front door refused since start, by [`Refusal::label`]
/// (`host`, `origin`, `token`), for `/metrics`.
static REFUSED: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// The labels of [`REFUSED`], in its order.
const REFUSED_LABELS: [&str; 3] = ["host", "origin", "token"];

/// Refused origins already logged (each is logged once, with the peer that
/// first sent it); at most [`LOGGED_ORIGINS_MAX`], then no more are named.
static LOGGED_ORIGINS: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());

/// Most distinct refused origins named in the log.
const LOGGED_ORIGINS_MAX: usize = 1024;

/// The front door's refusals since start, by reason (`host`, `origin`,
/// `token`), for `/metrics` (`ahpd_http_refused_total`).
pub fn refused_counts() -> [(&'static str, u64); 3] {
    std::array::from_fn(|i| (REFUSED_LABELS[i], REFUSED[i].load(Ordering::Relaxed)))
}

/// Counts a refusal by the front door and logs it: a foreign origin once
/// per origin, with the peer address that first sent it (a page a user
/// keeps open retries for as long as it is open); a foreign host or a bad
/// token each time, as a failed sign-in always was.
fn note_refusal(conn: ConnId, peer: SocketAddr, refusal: &Refusal) {
    if let Some(i) = REFUSED_LABELS.iter().position(|l| *l == refusal.label()) {
        REFUSED[i].fetch_add(1, Ordering::Relaxed);
    }
    match refusal {
        Refusal::ForeignOrigin(origin) => {
            let first = LOGGED_ORIGINS.lock().map(|mut seen| seen.len() < LOGGED_ORIGINS_MAX && seen.insert(origin.clone())).unwrap_or(false);
            if first {
                tracing::warn!(conn = conn.0, %peer, origin = %origin, event = "client.origin_refused", "a WebSocket upgrade from a web page of a foreign origin refused (403); logged once per origin");
            } else {
                tracing::debug!(conn = conn.0, %peer, origin = %origin, event = "client.origin_refused", "a WebSocket upgrade from a foreign origin refused (403)");
            }
        }
        Refusal::ForeignHost => {
            tracing::warn!(conn = conn.0, %peer, event = "client.host_refused", "a request under a host name this daemon does not answer to refused (403; DNS rebinding?)");
        }
        Refusal::MissingToken | Refusal::WrongToken => {
            let what = if *refusal == Refusal::MissingToken { "no connection token" } else { "a wrong connection token" };
            tracing::warn!(conn = conn.0, %peer, event = "client.auth_failed", "a WebSocket upgrade with {what} refused (401)");
        }
    }
}

/// Writes a short plain-text HTTP response and closes the connection.
async fn respond(stream: &mut TcpStream, status: &str, extra_headers: &str, body: &str) {
    respond_typed(stream, status, extra_headers, "text/plain; charset=utf-8", body).await;
}

/// [`respond`] with a `Content-Type` of its own.
async fn respond_typed(stream: &mut TcpStream, status: &str, extra_headers: &str, content_type: &str, body: &str) {
    let response = format!(
        "HTTP/1.1 {status}\r\n{extra_headers}Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Feeds one text message to `sink`: whole up to [`FRAGMENT_BYTES`], else
/// as a text frame and continuation frames of that size, the last final.
/// The pieces share the message's bytes (no copy).
async fn feed_text<S>(sink: &mut S, text: Utf8Bytes) -> Result<(), tokio_tungstenite::tungstenite::Error>
where
    S: futures_util::Sink<Message, Error = tokio_tungstenite::tungstenite::Error> + Unpin,
{
    if text.len() <= FRAGMENT_BYTES {
        return sink.feed(Message::Text(text)).await;
    }
    let bytes = bytes::Bytes::from(text);
    let mut at = 0;
    while at < bytes.len() {
        let end = (at + FRAGMENT_BYTES).min(bytes.len());
        let opcode = if at == 0 { OpCode::Data(Data::Text) } else { OpCode::Data(Data::Continue) };
        sink.feed(Message::Frame(Frame::message(bytes.slice(at..end), opcode, end == bytes.len()))).await?;
        at = end;
    }
    Ok(())
}

/// Runs one connection: read the request head and pass it through the
/// front door (`gate`: Host, Origin, token; a refusal is answered on the
/// HTTP request, before any upgrade); answer plain HTTP, or do the
/// WebSocket handshake, register the writer, then read frames until the
/// client closes, the socket fails, or the writer closes it.
async fn connection(mut stream: TcpStream, peer: SocketAddr, conn: ConnId, events: EventSink, gate: &Gate, bounds: Bounds) {
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER_BYTES);
    let (bytes, head_len) = match tokio::time::timeout(HANDSHAKE_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(read))) => read,
        Ok(Ok(None)) | Ok(Err(_)) => {
            tracing::debug!(conn = conn.0, "no readable HTTP request head");
            return;
        }
        Err(_) => {
            tracing::debug!(conn = conn.0, "request head timed out");
            return;
        }
    };
    let Some((head, _)) = bytes.get(..head_len).and_then(|b| front_door::parse_head(b).ok()) else {
        return respond(&mut stream, "400 Bad Request", "", "not an HTTP/1.1 request head\n").await;
    };
    let arrival = match stream.local_addr() {
        Ok(local) => Arrival { ip: local.ip(), port: local.port() },
        Err(e) => {
            tracing::debug!(conn = conn.0, error = %e, "no local address");
            return;
        }
    };
    let bearer = match gate.admit(&head, arrival) {
        Ok(Admitted::Http) => return http(stream, head, &events).await,
        Ok(Admitted::Upgrade { credential }) => credential,
        Err(refusal) => {
            note_refusal(conn, peer, &refusal);
            return respond(&mut stream, refusal.status(), refusal.headers(), refusal.body()).await;
        }
    };
    if let Some(token) = bearer.as_ref().filter(|_| !gate.requires_token()) {
        // A token that signs nobody in is refused on the upgrade itself
        // (401 and a reason), not accepted and then closed (issue 25). A
        // host that required a connection token has checked it already.
        let (reply, answer) = oneshot::channel();
        events.send(Event::CheckBearer { token: token.clone(), reply });
        let refusal = match tokio::time::timeout(METRICS_TIMEOUT, answer).await {
            Ok(Ok(true)) => None,
            Ok(Ok(false)) => Some(("401 Unauthorized", "WWW-Authenticate: Bearer realm=\"ahpd\", error=\"invalid_token\"\r\n", "the bearer token matches no user of this host\n")),
            _ => Some(("503 Service Unavailable", "", "the host is shutting down or busy\n")),
        };
        if let Some((status, extra, body)) = refusal {
            tracing::warn!(conn = conn.0, %peer, event = "client.auth_failed", status, "a WebSocket upgrade refused: its bearer token matches no user");
            return respond(&mut stream, status, extra, body).await;
        }
    }
    // A second handle on the socket, to linger after a close for a bad
    // frame (`LINGER`); dropped with the connection otherwise.
    let (stream, spare) = match duplicate(stream) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::debug!(conn = conn.0, error = %e, "could not duplicate the socket");
            return;
        }
    };
    let replay = Replay { prefix: bytes, at: 0, inner: stream };
    let config = WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE_BYTES)).max_frame_size(Some(MAX_MESSAGE_BYTES));
    let ws = match tokio::time::timeout(HANDSHAKE_TIMEOUT, tokio_tungstenite::accept_async_with_config(replay, Some(config))).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            tracing::debug!(conn = conn.0, error = %e, "websocket handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(conn = conn.0, "websocket handshake timed out");
            return;
        }
    };
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<WriterCmd>();
    let backlog = Arc::new(Backlog {
        queued: AtomicUsize::new(0),
        max: bounds.outgoing_max_bytes,
        overflow: Notify::new(),
        overflowed: AtomicBool::new(false),
    });
    // Dropped (or fired) when the writer stops, which ends the reader too.
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let writer_backlog = Arc::clone(&backlog);
    tokio::spawn(async move {
        let _stop = stop_tx;
        let backlog = writer_backlog;
        let write = async {
            while let Some(mut cmd) = rx.recv().await {
                // The command taken and every one queued behind it go out
                // in one write (issue 21, fan-out: a subscriber that lags
                // gets its envelopes in one syscall, not one each), up to
                // WRITE_BATCH_BYTES; a close ends the batch.
                let (mut len, mut frames, mut fed, mut close) = (0, 0, Ok(()), None);
                loop {
                    len += cmd.bytes();
                    match cmd {
                        WriterCmd::Frame(text) => {
                            frames += 1;
                            fed = feed_text(&mut sink, text).await;
                        }
                        WriterCmd::Action(broadcast) => {
                            frames += 1;
                            fed = feed_text(&mut sink, action_frame_off_workers(&broadcast).await).await;
                        }
                        WriterCmd::Close => {
                            close = Some(None);
                            break;
                        }
                        WriterCmd::CloseWith { code, reason } => {
                            close = Some(Some(CloseFrame { code: CloseCode::from(code), reason: Utf8Bytes::from(cut(reason, 123)) }));
                            break;
                        }
                    }
                    if fed.is_err() || len >= WRITE_BATCH_BYTES {
                        break;
                    }
                    match rx.try_recv() {
                        Ok(more) => cmd = more,
                        Err(_) => break,
                    }
                }
                if frames > 0 {
                    let sent = match fed {
                        Ok(()) => sink.flush().await,
                        Err(e) => Err(e),
                    };
                    backlog.queued.fetch_sub(len, Ordering::Relaxed);
                    if let Err(e) = sent {
                        tracing::debug!(conn = conn.0, error = %e, "write failed");
                        return;
                    }
                }
                if let Some(frame) = close {
                    let _ = sink.send(Message::Close(frame)).await;
                    let _ = sink.close().await;
                    return;
                }
            }
            // The driver let the connection go: close politely.
            let _ = sink.close().await;
        };
        tokio::select! {
            () = write => {}
            // Over the bound: stop writing (a write may be stuck on a full
            // socket); dropping the sink and ending the reader closes it.
            () = backlog.overflow.notified() => {
                tracing::warn!(conn = conn.0, limit_bytes = backlog.max, "slow client dropped: its unread frames passed outgoing_buffer_max_bytes");
            }
        }
    });
    let closer = tx.clone();
    let inbound = Arc::new(Semaphore::new(INBOUND_MAX_BYTES));
    events.send(Event::Opened { conn, writer: Writer { tx, backlog }, bearer });
    let mut linger = false;
    tracing::info!(conn = conn.0, "client connected");
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            _ = &mut stop_rx => break,
        };
        match message {
            Some(Ok(Message::Text(text))) => frame(&events, conn, text, bounds.frame_max_bytes, &inbound).await,
            Some(Ok(Message::Binary(bytes))) => match Utf8Bytes::try_from(bytes) {
                Ok(text) => frame(&events, conn, text, bounds.frame_max_bytes, &inbound).await,
                Err(_) => tracing::debug!(conn = conn.0, "ignored a binary frame that is not UTF-8"),
            },
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => {} // ping, pong and raw frames: tungstenite answers pings itself
            Some(Err(tokio_tungstenite::tungstenite::Error::Capacity(e))) => {
                // Past the WebSocket layer's own bound (above the JSON-RPC
                // frame limit, which answers -32600): nothing of the frame
                // is kept; the connection goes, and the log says why.
                tracing::warn!(conn = conn.0, limit_bytes = MAX_MESSAGE_BYTES, error = %e, "a frame over the WebSocket message limit: connection closed (1009)");
                let _ = closer.send(WriterCmd::CloseWith { code: CLOSE_TOO_BIG, reason: "frame too big: over 16 MiB".to_owned() });
                linger = true;
                break;
            }
            Some(Err(tokio_tungstenite::tungstenite::Error::Utf8(e))) => {
                tracing::warn!(conn = conn.0, error = %e, "a text frame that is not UTF-8: connection closed (1007)");
                let _ = closer.send(WriterCmd::CloseWith { code: CLOSE_INVALID_DATA, reason: "a text frame that is not valid UTF-8".to_owned() });
                linger = true;
                break;
            }
            Some(Err(e)) => {
                tracing::debug!(conn = conn.0, error = %e, "read failed");
                break;
            }
        }
    }
    tracing::info!(conn = conn.0, "client disconnected");
    events.input(Input::Disconnected { conn });
    drop(closer);
    if linger {
        drop(stream);
        linger_then_close(spare).await;
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
    }
    text
}

/// Two handles on one socket: the stream, and a spare for
/// [`linger_then_close`].
fn duplicate(stream: TcpStream) -> io::Result<(TcpStream, std::net::TcpStream)> {
    let std = stream.into_std()?;
    let spare = std.try_clone()?;
    Ok((TcpStream::from_std(std)?, spare))
}

/// Reads and throws away what the client still sends, for at most
/// [`LINGER`] and [`LINGER_MAX_BYTES`], until it closes; then closes the
/// socket. Keeps the client's close frame from being lost to a reset.
async fn linger_then_close(spare: std::net::TcpStream) {
    let Ok(mut socket) = TcpStream::from_std(spare) else { return };
    let drain = async {
        let mut buf = vec![0u8; 64 << 10];
        let mut read = 0u64;
        while read < LINGER_MAX_BYTES {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n as u64,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// Decodes one frame (bounded by `max_bytes`) and hands it to the driver
/// with its request's method and id, once the connection's frames not yet
/// handled leave room for it ([`INBOUND_MAX_BYTES`]); the room comes back
/// when the driver has handled it (the credit travels with the event). A
/// frame over [`bulk::BULK_BYTES`] is decoded on a bulk thread, so the
/// runtime's workers stay free for small requests (issue 25).
async fn frame(events: &EventSink, conn: ConnId, text: Utf8Bytes, max_bytes: usize, inbound: &Arc<Semaphore>) {
    let len = text.len();
    let room = u32::try_from(len.clamp(1, INBOUND_MAX_BYTES)).unwrap_or(u32::MAX);
    // The semaphore is never closed, so this waits or succeeds.
    let Ok(credit) = Arc::clone(inbound).acquire_many_owned(room).await else { return };
    let decode = move || {
        let decoded = codec::decode_bounded(text.as_str(), max_bytes);
        let request = request_of(&decoded);
        (decoded, request)
    };
    let (decoded, request) = if len > bulk::BULK_BYTES { bulk::run(decode).await } else { decode() };
    events.send(Event::Frame { conn, bytes: len, frame: decoded, request, credit });
}

/// `broadcast`'s frame, encoded on a bulk thread first if it is big and
/// no writer has encoded it yet (issue 25).
async fn action_frame_off_workers(broadcast: &Arc<Broadcast>) -> Utf8Bytes {
    if broadcast.encoded().is_none() && broadcast.weight() > bulk::BULK_BYTES {
        let shared = Arc::clone(broadcast);
        bulk::run(move || {
            shared.frame();
        })
        .await;
    }
    action_frame(broadcast)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(max: usize) -> (Writer, mpsc::UnboundedReceiver<WriterCmd>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog { queued: AtomicUsize::new(0), max, overflow: Notify::new(), overflowed: AtomicBool::new(false) });
        (Writer { tx, backlog }, rx)
    }

    fn text(len: usize) -> WriterCmd {
        WriterCmd::Frame(Utf8Bytes::from("x".repeat(len)))
    }

    /// A message over `FRAGMENT_BYTES` (with multi-byte characters cut
    /// across fragments) reaches a WebSocket client whole, as one text
    /// message, and a small one after it too.
    #[tokio::test]
    async fn a_long_message_goes_in_fragments_and_arrives_whole() {
        use tokio_tungstenite::tungstenite::protocol::Role;
        use tokio_tungstenite::WebSocketStream;
        let (a, b) = tokio::io::duplex(64 << 10);
        let mut server = WebSocketStream::from_raw_socket(a, Role::Server, None).await;
        let mut client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        let long: String = "é€x".repeat(FRAGMENT_BYTES / 2 + 7);
        assert!(long.len() > 2 * FRAGMENT_BYTES);
        let sent = long.clone();
        let send = tokio::spawn(async move {
            let r = feed_text(&mut server, Utf8Bytes::from(sent)).await;
            let r2 = feed_text(&mut server, Utf8Bytes::from("after")).await;
            let r3 = server.flush().await;
            (r.is_ok() && r2.is_ok() && r3.is_ok(), server)
        });
        let first = client.next().await.and_then(Result::ok);
        let second = client.next().await.and_then(Result::ok);
        assert_eq!(first, Some(Message::Text(Utf8Bytes::from(long))));
        assert_eq!(second, Some(Message::Text(Utf8Bytes::from("after"))));
        assert!(send.await.is_ok_and(|(ok, _)| ok));
    }

    /// One answer bigger than the whole bound (a reconnect's snapshots of a
    /// huge chat) goes when nothing else waits; a frame behind it that
    /// would pile past the bound drops the client, as any pile-up does.
    #[test]
    fn one_frame_over_the_bound_goes_alone_but_nothing_piles_up_behind_it() {
        let (w, mut rx) = writer(100);
        w.send(text(500));
        assert!(matches!(rx.try_recv(), Ok(WriterCmd::Frame(t)) if t.len() == 500), "the big answer is queued");
        assert!(!w.backlog.overflowed.load(Ordering::Relaxed));
        w.send(text(10));
        assert!(w.backlog.overflowed.load(Ordering::Relaxed), "a frame behind an unwritten one past the bound drops the client");
        assert!(rx.try_recv().is_err());
        let (w, mut rx) = writer(100);
        w.send(text(60));
        w.send(text(60));
        assert!(w.backlog.overflowed.load(Ordering::Relaxed), "two that pile past the bound, as before");
        assert!(matches!(rx.try_recv(), Ok(WriterCmd::Frame(_))));
        assert!(rx.try_recv().is_err());
    }

    /// An envelope's frame, encoded by the writer, is the `action`
    /// notification serde writes, shared by every writer; it counts its
    /// weight and wrapping against the backlog, which for text with nothing
    /// to escape is the frame's length.
    #[test]
    fn an_envelope_is_encoded_by_its_first_writer_and_shared() {
        use ahp_types::actions::{ActionEnvelope, SessionTitleChangedAction, StateAction};
        let envelope = ActionEnvelope { channel: "ahp-session:/a".into(), action: StateAction::SessionTitleChanged(SessionTitleChangedAction { title: "a title".into() }), server_seq: 9, origin: None, rejection_reason: None };
        let expected = serde_json::to_string(&serde_json::json!({"jsonrpc": "2.0", "method": "action", "params": envelope})).unwrap_or_default();
        let broadcast = Arc::new(Broadcast::new(envelope));
        let (a, b) = (action_frame(&broadcast), action_frame(&broadcast));
        assert_eq!(a.as_str(), expected);
        assert_eq!(a.as_str().as_ptr(), b.as_str().as_ptr(), "one encoding, shared");
        assert_eq!(WriterCmd::Action(broadcast).bytes(), expected.len());
    }

    #[test]
    fn requests_are_named_for_the_metrics() {
        let of = |text: &str| request_of(&codec::decode(text));
        assert_eq!(of(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#), Some((3, "ping")));
        assert_eq!(of(r#"{"jsonrpc":"2.0","id":4,"method":"disposeChat"}"#), Some((4, "disposeChat")));
        // Only the methods counted by name have a label of their own.
        for other in ["moveChat", "ahpd/listPeers", "vscode/claimAgentHostDetachedWorktree", "dispatchAction", "nope"] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":5,"method":"{other}"}}"#);
            assert_eq!(of(&text), Some((5, "other")), "{other}");
        }
        assert_eq!(of(r#"{"jsonrpc":"2.0","method":"dispatchAction"}"#), None);
        assert_eq!(of("nope"), None);
    }
}
