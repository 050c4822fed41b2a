//! The WebSocket front door: one task accepts TCP connections; each
//! connection gets a reader (frames in, as `Input::Frame`) and a writer task
//! (frames out, in order). Nothing here interprets a frame: the core decodes
//! every message itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ahpd_core::{ConnId, Input};
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::driver::{Event, EventSink};

/// How long a client may take over the WebSocket handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest message accepted from a client, in bytes.
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// A command for a connection's writer task.
#[derive(Debug)]
pub enum WriterCmd {
    /// Write one text frame.
    Frame(String),
    /// Close the connection once everything queued before this is written.
    Close,
}

/// The driver's handle on one connection's writer task.
#[derive(Debug, Clone)]
pub struct Writer(mpsc::UnboundedSender<WriterCmd>);

impl Writer {
    /// Queues `cmd`; a connection that is already gone drops it.
    pub fn send(&self, cmd: WriterCmd) {
        let _ = self.0.send(cmd);
    }
}

/// Accepts connections on `listener` forever, numbering them from 1.
/// Accept errors (e.g. out of file descriptors) are logged and retried
/// after a short pause; they never end the daemon.
pub async fn serve(listener: TcpListener, events: EventSink) {
    let next_conn = Arc::new(AtomicU64::new(1));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let conn = ConnId(next_conn.fetch_add(1, Ordering::Relaxed));
                let events = events.clone();
                tokio::spawn(async move {
                    tracing::debug!(conn = conn.0, %peer, "tcp connection");
                    connection(stream, conn, events).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Runs one connection: handshake, register the writer, then read frames
/// until the client closes, the socket fails, or the writer closes it.
async fn connection(stream: TcpStream, conn: ConnId, events: EventSink) {
    let _ = stream.set_nodelay(true);
    let config = WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE_BYTES)).max_frame_size(Some(MAX_MESSAGE_BYTES));
    let ws = match tokio::time::timeout(HANDSHAKE_TIMEOUT, tokio_tungstenite::accept_async_with_config(stream, Some(config))).await {
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
    // Dropped (or fired) when the writer stops, which ends the reader too.
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _stop = stop_tx;
        while let Some(cmd) = rx.recv().await {
            match cmd {
                WriterCmd::Frame(text) => {
                    if let Err(e) = sink.send(Message::Text(text.into())).await {
                        tracing::debug!(conn = conn.0, error = %e, "write failed");
                        return;
                    }
                }
                WriterCmd::Close => {
                    let _ = sink.send(Message::Close(None)).await;
                    let _ = sink.close().await;
                    return;
                }
            }
        }
        // The driver let the connection go: close politely.
        let _ = sink.close().await;
    });
    events.send(Event::Opened { conn, writer: Writer(tx) });
    tracing::info!(conn = conn.0, "client connected");
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            _ = &mut stop_rx => break,
        };
        match message {
            Some(Ok(Message::Text(text))) => events.input(Input::Frame { conn, text: text.as_str().to_owned() }),
            Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                Ok(text) => events.input(Input::Frame { conn, text: text.to_owned() }),
                Err(_) => tracing::debug!(conn = conn.0, "ignored a binary frame that is not UTF-8"),
            },
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => {} // ping, pong and raw frames: tungstenite answers pings itself
            Some(Err(e)) => {
                tracing::debug!(conn = conn.0, error = %e, "read failed");
                break;
            }
        }
    }
    tracing::info!(conn = conn.0, "client disconnected");
    events.input(Input::Disconnected { conn });
}
