//! Everything that can happen to the host, as data (docs/STYLE.md 3.2).

use ahp_types::actions::StateAction;
use ahp_types::state::Turn;
use ahp_types::Uri;
use std::collections::BTreeMap;

use crate::effect::{ConnId, OpId};

/// One event handed to `Host::handle`.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The shell accepted a new client connection. Sent once, before any
    /// `Frame` of that connection.
    Connected {
        /// The connection's id, chosen by the shell and never reused.
        conn: ConnId,
    },
    /// The connection's handshake carried a bearer token (`Authorization:
    /// Bearer`): it is signed in with it, before any frame of its, as an
    /// `authenticate` would sign it in (so its `initialize` and the
    /// subscriptions it names are checked against who it is). Nothing is
    /// sent to the client; a token that names nobody closes the connection
    /// (`Effect::Log` saying why, then `Effect::Close`). On a host with no
    /// users directory there is nobody to be and it changes nothing. Sent
    /// at most once, right after `Connected`.
    Authenticate {
        /// The connection.
        conn: ConnId,
        /// The token as the client sent it (never logged).
        token: String,
    },
    /// One WebSocket text frame from a client: one JSON-RPC message. The core
    /// decodes it (so the decoder is fuzzed with the core) and answers with
    /// `Effect::Send`.
    Frame {
        /// Which connection sent it.
        conn: ConnId,
        /// The frame's text, undecoded.
        text: String,
    },
    /// One client frame as [`Input::Frame`], decoded already by the caller
    /// with [`crate::protocol::codec::decode_bounded`] (the daemon decodes
    /// in the connection's reader, off the thread every client waits on:
    /// issue 25). Handled exactly as the same text sent as `Frame` would
    /// be: a frame longer than the host's `frame_max_bytes` is refused as
    /// that decoder refuses it, whatever bound the caller decoded with.
    FrameDecoded {
        /// Which connection sent it.
        conn: ConnId,
        /// The frame's length, in bytes.
        bytes: usize,
        /// What the decoder made of it.
        frame: crate::protocol::codec::Decoded,
    },
    /// The connection is gone. Its subscriptions end; sessions it watched may
    /// sleep.
    Disconnected {
        /// The connection that closed.
        conn: ConnId,
    },
    /// The completion of a command the core issued as `Effect::Backend` or
    /// `Effect::Store`, tied to it by `op`. Unknown or stale ops are ignored.
    Done {
        /// The op id of the effect this completes.
        op: OpId,
        /// What happened.
        outcome: Outcome,
    },
    /// A resource watch (`crate::files::fs::FsCmd::Watch`) saw changes:
    /// one batch, each path once with its last kind of change, in the
    /// order first seen (issue 48).
    FsChanged {
        /// The watch's id, as the core gave it.
        watch: u64,
        /// (real path, change) pairs.
        changes: Vec<(String, ahp_types::state::ResourceChangeType)>,
    },
    /// Something a backend says unprompted about one of a session's chats.
    Backend {
        /// The chat the event is about.
        chat: Uri,
        /// What happened.
        event: BackendEvent,
    },
    /// A host tool call (issue 24, `crate::tools`) from the agent running
    /// in `chat`: the shell has already checked the chat's secret (or, for
    /// echo, that the directive came from that chat's own turn). Answered by
    /// exactly one `Effect::HostToolAnswer` with the same `call`, in this
    /// `Host::handle` call or a later one; a chat that no longer exists is
    /// answered `not_found`.
    HostTool {
        /// Ties the answer to this call; chosen by the shell.
        call: crate::tools::HostCallId,
        /// The calling agent's chat.
        chat: Uri,
        /// What it asks.
        tool: crate::tools::HostToolRequest,
    },
    /// The operator reloaded the policy store (SIGHUP); it applies to
    /// sessions created from now on.
    PolicyChanged(crate::policy::Policy),
    /// The operator asked the host to stop (SIGTERM, SIGINT): no new turns
    /// are taken, running turns get `grace_ms` (milliseconds) to end and
    /// are then cancelled; [`crate::Host::drained`] says when the shell may
    /// exit (issue 19, `shutdown_grace_seconds`).
    Shutdown {
        /// How long running turns may go on, in milliseconds.
        grace_ms: u64,
    },
    /// Only time moved. Early or repeated ticks are no-ops.
    Tick,
}

/// The result of one backend or store command.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `BackendCmd::Start` succeeded: the chat's agent is running.
    Started {
        /// The backend's id for the conversation. An ACP server may assign
        /// its own; the host records it on the chat.
        conversation_id: String,
        /// The conversation so far, oldest first, when the start was a
        /// resume; empty for a new conversation.
        history: Vec<Turn>,
    },
    /// A backend or store command failed; `message` is the backend's or the
    /// store's own words.
    Failed {
        /// Why, in words a person can act on.
        message: String,
    },
    /// `BackendCmd::Start` with `resume` failed because the
    /// conversation's own transcript could not be read back (a damaged
    /// file, issue 25); the backend moved it aside, as the store does a
    /// damaged record. The host marks the chat (`session/damage.rs`).
    TranscriptDamaged {
        /// What was wrong with it, for the operator's log; no server path.
        detail: String,
    },
    /// `Effect::Scan` finished: the conversations the backend's own
    /// transcripts hold, in any order.
    Scanned {
        /// One row per conversation.
        rows: Vec<ScannedRow>,
        /// The conversations whose transcript the pass found but could not
        /// read (issue 25): the host marks the chat that holds each, when
        /// its state is not held (`session/damage.rs`).
        damaged: Vec<String>,
    },
    /// `Effect::Git` finished: what git answered.
    Git(crate::git::GitResult),
    /// `Effect::Fs`'s answer (issue 48).
    Fs(crate::files::fs::FsResult),
    /// `RegistryCmd::Scan` finished: what the shell read, unjudged.
    RegistryScanned {
        /// Every record file read, in name order.
        files: Vec<crate::awareness::RegistryFile>,
        /// The repository each asked directory is in (`None`: not in one).
        repos: BTreeMap<String, Option<crate::awareness::RepoObservation>>,
    },
    /// A command with nothing to return finished (close, delete, cancel,
    /// store write).
    Ok,
}

/// Unprompted news from a chat's agent.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendEvent {
    /// A chat action for the running turn (`chat/responsePart`,
    /// `chat/delta`, `chat/reasoning`, `chat/usage`, `chat/toolCallStart`,
    /// `chat/toolCallReady`, `chat/toolCallComplete`, `chat/turnComplete`,
    /// `chat/error`). The host validates it against the turn, fixes
    /// durations from its own clock, and broadcasts it.
    Action(StateAction),
    /// The backend reports background work (`Session.busy()`): while true
    /// the session does not sleep.
    Busy(bool),
    /// The chat's agent wrote these files (absolute paths, or relative to
    /// the session's first working directory): the session's claims
    /// (issue 10, workspace awareness).
    Wrote {
        /// The paths written.
        paths: Vec<String>,
    },
    /// The running turn `turn_id` took steering message `id` at a safe
    /// point (`BackendCmd::Steer`, issue 23): the host takes it off the
    /// chat's record and says `chat/pendingMessageRemoved`.
    SteeringTaken {
        /// The turn that took it.
        turn_id: String,
        /// The steering message's id.
        id: String,
    },
    /// The chat's agent process ended on its own; `message` says why (exit
    /// status, stderr tail). A running turn ends in a `chat/error`.
    Exited {
        /// What the backend said.
        message: String,
    },
}

/// One conversation a backend's transcripts hold, as a scan found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedRow {
    /// The backend's id for the conversation (validated by the core before
    /// it names anything).
    pub conversation_id: String,
    /// The session URI this host gave it, when the backend wrote it down
    /// (a conversation this host ran); `None` for one a CLI wrote outside
    /// this host (an external session).
    pub session: Option<Uri>,
    /// The chat URI this host gave it, when written down.
    pub chat: Option<Uri>,
    /// A title (custom title, summary or first prompt), possibly empty.
    pub title: String,
    /// The working directory recorded inside the transcript, as a URI.
    pub working_directory: Option<Uri>,
    /// When the conversation began (ms since the epoch).
    pub created_at: crate::time::WallTime,
    /// When it last changed (ms since the epoch).
    pub modified_at: crate::time::WallTime,
}

/// Turns of each chat handed back by a resume, keyed by chat URI.
pub type History = BTreeMap<Uri, Vec<Turn>>;
