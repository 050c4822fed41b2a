//! The driver's one event channel: what connection tasks and executors
//! hand the driver ([`Event`]: a core input, a new connection's writer, a
//! decoded frame, a host tool call, ...) and the sending side they each
//! hold a clone of ([`EventSink`]). The driver (`driver.rs`) owns the
//! receiving end and turns each event into a core input.

use ahpd_core::{ConnId, HostToolError, HostToolErrorCode, HostToolRequest, HostToolResult, Input};
use tokio::sync::{mpsc, oneshot};

use crate::exec::net::Writer;

/// Something for the driver: a core input, or a new connection's writer
/// (registered before its `Input::Connected` is handed to the core).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // `Input` is nearly every event; boxing it would allocate per frame
pub enum Event {
    /// An input for the core, from a connection task or an executor.
    Input(Input),
    /// A client connected: remember its writer, then feed
    /// `Input::Connected { conn }`.
    Opened {
        /// The connection's fresh id.
        conn: ConnId,
        /// Where its outgoing frames go, in order.
        writer: Writer,
        /// The handshake's `Authorization: Bearer` token, if any: fed to
        /// the core as `Input::Authenticate` right after
        /// `Input::Connected`, before the client's first frame.
        bearer: Option<String>,
    },
    /// One frame from a client, decoded by its connection's reader (fed as
    /// `Input::FrameDecoded`), with its request's id and method label when
    /// it is a request (for the metrics).
    Frame {
        /// Which connection sent it.
        conn: ConnId,
        /// The frame's length, in bytes.
        bytes: usize,
        /// The frame, decoded (`protocol::codec::decode_bounded`).
        frame: ahpd_core::protocol::codec::Decoded,
        /// `(id, method label)` of a request
        /// ([`crate::metrics::method_label`]).
        request: Option<(u64, &'static str)>,
        /// The frame's room in its connection's inbound bound
        /// (`exec::net`, `INBOUND_MAX_BYTES`), given back once the core
        /// has handled the frame.
        credit: tokio::sync::OwnedSemaphorePermit,
    },
    /// `/metrics` asks for the Prometheus text.
    Metrics(oneshot::Sender<String>),
    /// A WebSocket upgrade asks whether its bearer token signs in
    /// ([`ahpd_core::HostView::bearer_accepted`]) before it is accepted.
    CheckBearer {
        /// The token (never logged).
        token: String,
        /// The answer.
        reply: oneshot::Sender<bool>,
    },
    /// An agent called a host tool (issue 24): the driver numbers the call,
    /// feeds `Input::HostTool`, and sends the core's one
    /// `Effect::HostToolAnswer` to `reply`. Made by [`EventSink::host_tool`].
    HostTool {
        /// The calling agent's chat (its secret already checked).
        chat: ahp_types::Uri,
        /// The call.
        tool: HostToolRequest,
        /// Where the answer goes.
        reply: oneshot::Sender<HostToolResult>,
    },
}

/// The sending side of the driver's one event channel, cloned into every
/// connection task and executor.
#[derive(Debug, Clone)]
pub struct EventSink(mpsc::UnboundedSender<Event>);

impl EventSink {
    /// A new event channel: the sink and the driver's receiving end.
    pub fn channel() -> (EventSink, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventSink(tx), rx)
    }

    /// Hands `input` to the driver. After shutdown it is dropped silently
    /// (nobody is left to act on it).
    pub fn input(&self, input: Input) {
        self.send(Event::Input(input));
    }

    /// Calls host tool `tool` for the agent in `chat` and waits for the
    /// core's answer (issue 24; the MCP server and echo's directives both
    /// come here). After shutdown, or should the driver drop the call, the
    /// answer is an `unavailable` refusal.
    pub async fn host_tool(&self, chat: ahp_types::Uri, tool: HostToolRequest) -> HostToolResult {
        let (reply, answer) = oneshot::channel();
        self.send(Event::HostTool { chat, tool, reply });
        answer.await.unwrap_or_else(|_| Err(HostToolError::new(HostToolErrorCode::Unavailable, "the host is shutting down")))
    }

    /// Hands any event to the driver; dropped silently after shutdown.
    pub fn send(&self, event: Event) {
        let _ = self.0.send(event);
    }
}
