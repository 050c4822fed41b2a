//! Typed continuations (issue 20): what waits in the host is kept as the
//! request it is, decoded and checked once, when it came.
//!
//! A request that waits (for a wake, a parked store write, the facts of a
//! folder's repository, or the wakes a handshake names) used to be kept as
//! its method name and raw params and run again from the top when the wait
//! ended. Now each is kept as one of the types below, built once its params
//! have decoded and passed every check that reads only the request (a URI's
//! shape, a protocol version, a count against a fixed limit); the resumed
//! path takes the value, never parses JSON and never dispatches on a method
//! name. Checks that read the host's state (grants, phases, what exists, the
//! limits a connection is at) run again when it resumes, in the order they
//! ran at arrival, since the state may have moved while it waited: a
//! resumed request answers exactly as the same request arriving then would.

use ahp_types::common::JsonObject;
use ahp_types::state::Message;
use ahp_types::Uri;

use crate::ids::ResourceId;

/// A request answered once a wake ends (Sessions page, "Sleep and wake":
/// "Wakers that arrive together share one resume"), kept in
/// [`crate::session::Waiter::Request`].
#[derive(Debug, Clone, PartialEq)]
pub enum WaitingRequest {
    /// `subscribe` to a channel of a session whose state is not held.
    Subscribe(SubscribeReq),
    /// `fetchTurns` of a chat of a session whose state is not held.
    FetchTurns(FetchTurnsReq),
    /// `createChat` in a session whose state is not held (boxed: it may
    /// carry a first message).
    CreateChat(Box<CreateChatReq>),
    /// `moveChat` of a chat of a session whose state is not held.
    MoveChat(MoveChatReq),
}

/// A command kept behind a session's parked store write, run in arrival
/// order once the write settles (docs/DECISIONS.md, 2: write-ahead), kept
/// in [`crate::session::Queued::Command`].
#[derive(Debug, Clone, PartialEq)]
pub enum QueuedCommand {
    /// `createChat` (boxed: it may carry a first message).
    CreateChat(Box<CreateChatReq>),
    /// `disposeChat`.
    DisposeChat(DisposeChatReq),
    /// `moveChat`.
    MoveChat(MoveChatReq),
}

/// A decoded `subscribe` (docs/REFERENCE-NOTES.md, AHP 2-4: the channel's
/// snapshot, then every later envelope on it).
#[derive(Debug, Clone, PartialEq)]
pub struct SubscribeReq {
    /// The channel: the root, a session or a chat.
    pub channel: Uri,
    /// How many of a chat's newest turns its snapshot holds (`view.turns`,
    /// at least one); `None` for all.
    pub view_turns: Option<usize>,
}

/// A decoded `fetchTurns` (Sessions page, "Commands").
#[derive(Debug, Clone, PartialEq)]
pub struct FetchTurnsReq {
    /// The chat channel.
    pub chat: Uri,
    /// The page cursor (`before:<turnId>`), read against the chat's turns
    /// when it runs; `None` for the newest page.
    pub cursor: Option<String>,
}

/// A `createChat` whose params passed every check that reads only them
/// (Sessions page, "Commands": "A second conversation in the session"):
/// no fork or side chat is asked for, the chat URI is valid, and a first
/// message is the user's.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateChatReq {
    /// The session channel.
    pub session: Uri,
    /// The new chat's validated URI.
    pub chat: ResourceId,
    /// The folders it asks for, checked against the session's when it runs.
    pub working_directories: Option<Vec<Uri>>,
    /// A first message (a user message) to start the chat with.
    pub initial_message: Option<Message>,
    /// The chat it is a fork or a side chat of, resolved against the
    /// session's state when the chat is made (`session/fork.rs`).
    pub source: Option<ahp_types::commands::ChatSource>,
}

/// A decoded `disposeChat` (Sessions page, "Commands": "End one chat; the
/// session's default chat is kept").
#[derive(Debug, Clone, PartialEq)]
pub struct DisposeChatReq {
    /// The chat channel.
    pub chat: Uri,
}

/// A decoded `moveChat` to a session (ahp-types `MoveChatParams` with a
/// `ChatMoveToSessionDestination`; docs/DECISIONS.md, 17).
#[derive(Debug, Clone, PartialEq)]
pub struct MoveChatReq {
    /// The chat moved.
    pub chat: Uri,
    /// The session it goes to (its own for a reorder).
    pub destination: Uri,
    /// The destination's chat it goes after; first when `None`.
    pub after: Option<Uri>,
}

/// A `createSession` whose params passed every check that reads only them
/// (Sessions page, "The life of a session"): the session URI is valid. It
/// waits for the facts of its folder's repository as a git op's purpose
/// (`GitOp::Create`, `host/git.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct CreateSessionReq {
    /// The client's session URI, validated.
    pub session: ResourceId,
    /// The provider asked for, else the first configured agent's; `None`
    /// only when no agent is configured (settled once, on arrival).
    pub provider: Option<String>,
    /// The folders asked for, the first the process root.
    pub working_directories: Option<Vec<Uri>>,
    /// The folders the session keeps: `working_directories` less
    /// duplicates, only the first when `provider` takes no peers
    /// (`folders::initial`; settled once, on arrival).
    pub kept: Vec<Uri>,
    /// The config asked for, settled against the folder's repository.
    pub config: Option<JsonObject>,
}

/// A decoded `resolveSessionConfig` or `sessionConfigCompletions`
/// (Sessions page, "Configuration keys") waiting for the facts of its
/// folder's repository as a git op's purpose (`GitOp::Resolve`,
/// `host/git.rs`).
#[derive(Debug, Clone, PartialEq)]
pub enum ResolveReq {
    /// `resolveSessionConfig`: the schema and values for a config.
    Resolve {
        /// The provider asked for; `None` for the first configured agent.
        provider: Option<String>,
        /// The config asked for.
        config: Option<JsonObject>,
    },
    /// `sessionConfigCompletions`: the values a property may take.
    Completions {
        /// The property.
        property: String,
        /// What the client typed so far.
        query: Option<String>,
        /// The config asked for.
        config: Option<JsonObject>,
    },
}

/// A handshake held for the wakes of the sessions it names
/// (`host/connections.rs`), kept in [`crate::host::Handshake`].
#[derive(Debug, Clone, PartialEq)]
pub enum HandshakeReq {
    /// `initialize`.
    Initialize(InitializeReq),
    /// `reconnect`.
    Reconnect(ReconnectReq),
}

/// An `initialize` whose params decoded, whose protocol version was agreed
/// and which names no more channels than a connection may hold
/// (docs/REFERENCE-NOTES.md, AHP 2-4 and 2.14).
#[derive(Debug, Clone, PartialEq)]
pub struct InitializeReq {
    /// The client's id.
    pub client_id: String,
    /// The protocol version agreed.
    pub protocol_version: String,
    /// `initialSubscriptions`, each once, in the order named; which of
    /// them the connection may read is asked each time it runs.
    pub subscriptions: Vec<Uri>,
}

/// A `reconnect` whose params decoded and which names no more channels than
/// a connection may hold (docs/REFERENCE-NOTES.md, AHP 2-4 and 2.14).
#[derive(Debug, Clone, PartialEq)]
pub struct ReconnectReq {
    /// The client's id.
    pub client_id: String,
    /// `lastSeenServerSeq`, a negative one read as 0.
    pub last_seen_server_seq: u64,
    /// `subscriptions` as named (repeats and all: each unknown one is
    /// `missing` as often as it is named).
    pub subscriptions: Vec<Uri>,
}
