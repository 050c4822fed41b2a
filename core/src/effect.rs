//! Everything the host asks the world to do, as data (docs/STYLE.md 3.2).
//!
//! The shell executes effects in the order `Host::handle` returns them. Every
//! backend and store command carries a fresh [`OpId`]; its result comes back
//! as `Input::Done { op, .. }`.

use ahp_types::actions::ActionEnvelope;
use ahp_types::messages::JsonRpcError;
use ahp_types::state::Message;
use ahp_types::Uri;
use serde::{Deserialize, Serialize};

use crate::record::SessionRecord;

/// A client connection, numbered by the shell (or the simulator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConnId(pub u64);

/// Ties a command effect to its `Input::Done`. Allocated by the host,
/// increasing, never reused within a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpId(pub u64);

/// Why the host closes a connection, as its close frame says
/// ([`Effect::Close`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The connection broke a policy (it kept exceeding its frame rate):
    /// close code 1008 "policy violation" and these words.
    Policy(String),
    /// The host is full (`Limits::connections_max`): close code 1013 "try
    /// again later" (IANA's registry of RFC 6455 close codes) and these
    /// words. The client broke no rule, and its place comes back when
    /// another connection leaves, so this is not 1008 (docs/DECISIONS.md,
    /// 28).
    TryAgainLater(String),
}

impl CloseReason {
    /// The RFC 6455 close code.
    pub fn code(&self) -> u16 {
        match self {
            CloseReason::Policy(_) => 1008,
            CloseReason::TryAgainLater(_) => 1013,
        }
    }

    /// The words of the close frame.
    pub fn words(&self) -> &str {
        match self {
            CloseReason::Policy(w) | CloseReason::TryAgainLater(w) => w,
        }
    }
}

/// One thing for the shell to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Write one JSON-RPC message to a connection. Messages to one
    /// connection must go out in the order given.
    Send {
        /// The connection.
        conn: ConnId,
        /// The message; `Outbound::to_json` gives the frame's text.
        message: Outbound,
    },
    /// Close a connection after its queued messages are written (e.g. after
    /// -32005 UnsupportedProtocolVersion). The shell answers with
    /// `Input::Disconnected`.
    Close {
        /// The connection.
        conn: ConnId,
        /// Why, when the client should be told in the close frame
        /// (RFC 6455 7.4): the shell closes with [`CloseReason::code`] and
        /// its words; `None`: a plain close.
        reason: Option<CloseReason>,
    },
    /// Drive a chat's agent; answered by `Input::Done { op, .. }`.
    Backend {
        /// Ties the answer to this command.
        op: OpId,
        /// The backend (provider) that runs the chat.
        provider: String,
        /// The chat whose agent this is about.
        chat: Uri,
        /// What to do.
        command: BackendCmd,
    },
    /// Write to the session store; answered by `Input::Done { op, .. }` with
    /// `Outcome::Ok` once the write is durable (fsynced), or, for a put
    /// made [`Durability::WithNext`], once it is written and ordered before
    /// every later write; `Outcome::Failed` otherwise.
    Store {
        /// Ties the answer to this command.
        op: OpId,
        /// What to write.
        command: StoreCmd,
    },
    /// One pass over a backend's own transcripts, for the catalogue
    /// (Sessions page, "Finding one": "the rows the last pass over the
    /// machine's transcripts found"). Answered by `Input::Done { op,
    /// outcome: Outcome::Scanned { .. } }`; a backend that keeps no
    /// transcripts answers with no rows.
    Scan {
        /// Ties the answer to this command.
        op: OpId,
        /// The backend or external source to scan (`echo`, `claude`).
        provider: String,
    },
    /// Ask git something or have it write (Sessions page, "Isolation and
    /// worktrees"); answered by `Input::Done { op, outcome: Outcome::Git(..)
    /// }` or `Outcome::Failed`.
    Git {
        /// Ties the answer to this command.
        op: OpId,
        /// What to do.
        command: crate::git::GitCmd,
    },
    /// Filesystem work for a session's files (issue 48,
    /// [`crate::files::fs`]), done off the thread every client waits on;
    /// answered by `Input::Done { op, outcome: Outcome::Fs(..) }` (but
    /// [`crate::files::fs::FsCmd::Unwatch`], which nothing waits on).
    Fs {
        /// Ties the answer to this command.
        op: OpId,
        /// What to do.
        command: crate::files::fs::FsCmd,
    },
    /// Work on the workspace-awareness registry (issue 10); answered by
    /// `Input::Done { op, .. }`: `Outcome::RegistryScanned` for a scan,
    /// `Outcome::Ok` or `Outcome::Failed` otherwise.
    Registry {
        /// Ties the answer to this command.
        op: OpId,
        /// What to do.
        command: RegistryCmd,
    },
    /// The one answer to `Input::HostTool { call, .. }` (issue 24): the
    /// shell hands `result` back to the agent that called (an MCP tool
    /// result, or echo's reply).
    HostToolAnswer {
        /// The call this answers.
        call: crate::tools::HostCallId,
        /// The tool's answer, or why it was refused.
        result: crate::tools::HostToolResult,
    },
    /// A line for the operator's log (one per session lifecycle event, and
    /// every refusal worth a look). Never carries secrets.
    Log(LogEvent),
    /// State the host let go of (a disposed session, the envelopes it will
    /// never replay), for the shell to free off the thread every client
    /// waits on: freeing a session that held 20 turns of 900 KB took the
    /// driver 5-9 ms (issue 25). Dropping it at once is always right.
    Release(Released),
}

/// Memory handed over with [`Effect::Release`]: opaque, only to be dropped.
/// Clones share it; two are equal when they share it.
#[derive(Clone)]
pub struct Released(std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl Released {
    /// `value`, to be dropped by whoever executes the effect.
    pub fn new<T: Send + Sync + 'static>(value: T) -> Released {
        Released(std::sync::Arc::new(value))
    }
}

impl std::fmt::Debug for Released {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Released")
    }
}

impl PartialEq for Released {
    fn eq(&self, other: &Released) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A command for a chat's agent.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendCmd {
    /// Start the chat's agent: a new conversation, or (when `resume`) the
    /// existing one, whose turns come back in `Outcome::Started::history`.
    Start {
        /// The session the chat belongs to, so the backend can write it
        /// down with the conversation (a restart with `--sessions memory`
        /// finds the session again from the backend's own copy).
        session: Uri,
        /// The conversation id: the client's own session id for a new
        /// session (Sessions page: "the backend is told that name"), or the
        /// id the backend recorded earlier.
        conversation_id: String,
        /// The folder the agent works in (the process root), if any.
        working_directory: Option<Uri>,
        /// The session's other working directories, in order; always empty
        /// for a backend that cannot take peers (`AgentSpec::peer_directories`).
        peer_directories: Vec<Uri>,
        /// Resume an existing conversation rather than start a new one.
        resume: bool,
    },
    /// Hand a user message to the agent as turn `turn_id`. Progress comes
    /// back as `Input::Backend` events; `Done` only acknowledges receipt.
    Send {
        /// The turn id the client chose.
        turn_id: String,
        /// The message, shared with the record's kept turn (one copy per
        /// turn, however big).
        message: std::sync::Arc<Message>,
        /// The message's `file:` attachments the backend reads for the
        /// agent, and the folders each must resolve inside
        /// (`files::attachments`); empty when it attaches no file.
        attachments: crate::files::attachments::AttachmentReads,
    },
    /// Stop the running turn `turn_id`.
    Cancel {
        /// The turn to stop.
        turn_id: String,
    },
    /// The client answered a tool call that waited for approval.
    ConfirmTool {
        /// The turn the tool call belongs to.
        turn_id: String,
        /// The tool call.
        tool_call_id: String,
        /// Whether the call may run.
        approved: bool,
    },
    /// A client answered a question the agent asked in turn `turn_id`
    /// (`chat/inputCompleted`, issue 23 "Questions",
    /// `session/questions.rs`). Sent once per question.
    Answer {
        /// The turn that asked.
        turn_id: String,
        /// The request as the chat now holds it: its id, its questions and
        /// the answers (the client's drafts with its final answers merged
        /// over them, as the `ahp` reducer merges them).
        request: Box<ahp_types::state::ChatInputRequest>,
        /// What the client chose: accept, decline or cancel.
        response: ahp_types::state::ChatInputResponseKind,
    },
    /// Hand steering message `id` to running turn `turn_id`, to be taken
    /// at the agent's next safe point (issue 23, `session/steering.rs`);
    /// it says so with `BackendEvent::SteeringTaken`. A newer one replaces
    /// one not taken yet; a turn that ends first takes none. Only sent to
    /// a backend that steers (`AgentSpec::steers`).
    Steer {
        /// The running turn.
        turn_id: String,
        /// The steering message's id.
        id: String,
        /// The message.
        message: Message,
    },
    /// Let the agent go and keep its conversation (a sleep or an eviction).
    Close,
    /// Tear the agent down and delete the backend's own copy of the
    /// conversation (`disposeSession`).
    Delete {
        /// The conversation to delete.
        conversation_id: String,
    },
    /// Forget turns `turn_ids` of the conversation (a rewind,
    /// `chat/truncated`): the backend's own history no longer has them, so
    /// a resume does not bring them back. Idempotent: an id the history
    /// does not hold is nothing to forget. Only sent to a backend that
    /// forgets (`AgentSpec::forgets`).
    Forget {
        /// The conversation.
        conversation_id: String,
        /// The turns to forget, oldest first.
        turn_ids: Vec<String>,
    },
    /// Resume turn `turn_id`, the chat's last, which the backend ended in
    /// an error it marked resumable (`chat/turnResume`, issue 23): the
    /// turn runs again under the same id, its progress coming back as
    /// `Input::Backend` events like a send's; `Done` only acknowledges
    /// receipt, and `Failed` ends the turn in a (not resumable) error.
    /// Only sent to a backend that resumes turns
    /// (`AgentSpec::resumes_turns`).
    Resume {
        /// The errored turn.
        turn_id: String,
    },
}

/// A command for the session store.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreCmd {
    /// Replace the record of one session, atomically.
    Put {
        /// The whole record; its `key` names the file.
        record: Box<SessionRecord>,
        /// When the write must be durable before it is answered.
        durability: Durability,
    },
    /// Remove one session's record.
    Delete {
        /// The validated store key (see `ids::store_key`).
        key: String,
    },
    /// Replace the record of one automation, atomically (its own folder,
    /// `automations/`; `crate::automation`).
    PutAutomation {
        /// The whole record; its `key()` names the file.
        record: Box<crate::automation::AutomationRecord>,
    },
    /// Remove one automation's record.
    DeleteAutomation {
        /// Its store key (`ahp-automation@<id>`, validated).
        key: String,
    },
}

/// How soon a session record's write must be durable (issue 21: a turn's
/// end need not cost an fsync of its own; docs/DECISIONS.md, 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Durable (fsynced) before it is answered: what every write that
    /// acknowledges something to a client, or that nothing else could
    /// rebuild, must be.
    Now,
    /// Answered once written in order; durable with the store's next
    /// durable write, its stop, or after 200 ms of quiet at the latest.
    /// A crash of the machine before then may lose it (never a later
    /// write's content, and never a write before it), so the core asks
    /// this only of a write whose loss a restart rebuilds: a turn its
    /// agent ended, whose record only drops the kept turn the agent's own
    /// history now holds (`crate::kept_turns`).
    WithNext,
}

/// A command for the awareness registry directory (`exec/registry`).
#[derive(Debug, Clone, PartialEq)]
pub enum RegistryCmd {
    /// Write `record` as the file `name`, atomically (replacing it).
    Publish {
        /// The file name: `<pid>-<store key>.json`, made of validated parts.
        name: String,
        /// The record.
        record: Box<crate::awareness::ActiveRecord>,
    },
    /// Remove this host's own file `name` (sleep, dispose).
    Remove {
        /// The file name, as published.
        name: String,
    },
    /// Read every record file, observe the process each names, and the Git
    /// repository of each of `dirs` (absolute paths).
    Scan {
        /// The working directories of this host's live sessions.
        dirs: Vec<String>,
    },
}

/// Severity of a [`LogEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogLevel {
    /// Routine lifecycle events.
    Info,
    /// Something was refused or failed and the host carried on.
    Warn,
}

/// One operator log line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEvent {
    /// How loud.
    pub level: LogLevel,
    /// A short machine-friendly event name, e.g. `session.ready`.
    pub event: &'static str,
    /// The session it is about, if any.
    pub session: Option<Uri>,
    /// Free text.
    pub detail: String,
}

/// One JSON-RPC message to a client.
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    /// A successful reply to request `id`.
    Result {
        /// The request's id.
        id: u64,
        /// The result (`null` for the null-typed commands).
        result: ResultBody,
    },
    /// An error reply; `id` is `None` when the request's id could not be read
    /// (e.g. -32700 ParseError), which goes out as `"id": null`.
    Error {
        /// The request's id, if known.
        id: Option<u64>,
        /// Code, message and data.
        error: JsonRpcError,
    },
    /// An `action` notification carrying one envelope. Shared: every
    /// subscriber's copy of one fan-out is the same [`Broadcast`], encoded
    /// once, by whoever first asks for its frame (issue 21, fan-out).
    Action(std::sync::Arc<Broadcast>),
    /// Any other notification (`root/sessionAdded`, `root/sessionRemoved`,
    /// `root/sessionSummaryChanged`).
    Notification {
        /// The method name.
        method: &'static str,
        /// Its params, shared by every subscriber it goes to (encoded once
        /// by the shell, like an envelope).
        params: std::sync::Arc<serde_json::Value>,
    },
}

/// The `result` of a successful reply: a JSON value, or JSON text already
/// encoded straight from the wire type (a `listSessions` page of 500 rows is
/// encoded once, never built as a `Value` tree first: issue 4's page
/// benchmark).
#[derive(Debug, Clone)]
pub enum ResultBody {
    /// A JSON value.
    Value(serde_json::Value),
    /// Valid JSON text, written into the frame as it is.
    Encoded(Box<serde_json::value::RawValue>),
}

impl ResultBody {
    /// The result as a JSON value (parsing encoded text; for tests and
    /// checkers, never on the hot path).
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            ResultBody::Value(v) => v.clone(),
            ResultBody::Encoded(raw) => serde_json::from_str(raw.get()).unwrap_or_default(),
        }
    }
}

impl PartialEq for ResultBody {
    fn eq(&self, other: &ResultBody) -> bool {
        match (self, other) {
            (ResultBody::Value(a), ResultBody::Value(b)) => a == b,
            _ => self.to_value() == other.to_value(),
        }
    }
}

impl Serialize for ResultBody {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ResultBody::Value(v) => v.serialize(s),
            ResultBody::Encoded(raw) => raw.serialize(s),
        }
    }
}

/// One envelope as it goes out. Its frame (the whole `action`
/// notification's JSON text) is made once, on first asking
/// ([`Broadcast::frame`]), and shared by every subscriber's writer: the
/// shell asks from the connections' writer tasks, so an envelope carrying a
/// 900 KB message is encoded off the thread every client waits on (issue
/// 25, the steady client's ping under big turns; issue 21, fan-out). The
/// core never encodes one: what it needs of the size (the replay buffer's
/// byte bound) is the envelope's weight ([`crate::json_size`]), fixed
/// when it is made. Reads as the envelope (`Deref`).
#[derive(Debug, Clone, PartialEq)]
pub struct Broadcast {
    envelope: ActionEnvelope,
    /// The length of the envelope's JSON text, weighed
    /// ([`crate::json_size::weigh`]), in bytes.
    weight: usize,
    /// The frame, once someone asked for it.
    frame: std::sync::OnceLock<std::sync::Arc<str>>,
}

impl Broadcast {
    /// `envelope`, weighed (not encoded).
    pub fn new(envelope: ActionEnvelope) -> Broadcast {
        let weight = crate::json_size::weigh(&envelope);
        Broadcast { envelope, weight, frame: std::sync::OnceLock::new() }
    }

    /// The envelope.
    pub fn envelope(&self) -> &ActionEnvelope {
        &self.envelope
    }

    /// The length of the envelope's JSON text, as weighed
    /// ([`crate::json_size`]: exact but for escapes), in bytes.
    pub fn weight(&self) -> usize {
        self.weight
    }

    /// The frame, if someone asked for it already ([`Broadcast::frame`]).
    pub fn encoded(&self) -> Option<&std::sync::Arc<str>> {
        self.frame.get()
    }

    /// The `action` notification carrying the envelope, as frame text:
    /// encoded by the first caller, shared by every later one (callers on
    /// other threads wait for the first to finish). Serializing an
    /// envelope cannot fail in practice (every map key is a string);
    /// should it, the frame is an internal-error frame.
    pub fn frame(&self) -> &std::sync::Arc<str> {
        self.frame.get_or_init(|| {
            #[derive(Serialize)]
            struct Notify<'a> {
                jsonrpc: &'static str,
                method: &'static str,
                params: &'a ActionEnvelope,
            }
            let text = serde_json::to_string(&Notify { jsonrpc: "2.0", method: "action", params: &self.envelope });
            std::sync::Arc::from(text.unwrap_or_else(|_| UNENCODABLE.to_owned()))
        })
    }
}

/// The frame sent in place of a message serde could not encode.
const UNENCODABLE: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"internal error: unencodable message"}}"#;

impl std::ops::Deref for Broadcast {
    type Target = ActionEnvelope;

    fn deref(&self) -> &ActionEnvelope {
        &self.envelope
    }
}

impl Outbound {
    /// The frame's text. Serializing these shapes cannot fail in practice
    /// (every map key is a string); should it ever, an internal-error frame
    /// is returned instead of a panic.
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct Response<'a> {
            jsonrpc: &'static str,
            id: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            result: Option<&'a ResultBody>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<&'a JsonRpcError>,
        }
        #[derive(Serialize)]
        struct Notify<'a, P: Serialize> {
            jsonrpc: &'static str,
            method: &'a str,
            params: P,
        }
        let text = match self {
            Outbound::Result { id, result } => serde_json::to_string(&Response {
                jsonrpc: "2.0",
                id: Some(*id),
                result: Some(result),
                error: None,
            }),
            Outbound::Error { id, error } => serde_json::to_string(&Response {
                jsonrpc: "2.0",
                id: *id,
                result: None,
                error: Some(error),
            }),
            Outbound::Action(broadcast) => Ok(broadcast.frame().to_string()),
            Outbound::Notification { method, params } => serde_json::to_string(&Notify {
                jsonrpc: "2.0",
                method,
                params: &**params,
            }),
        };
        text.unwrap_or_else(|_| UNENCODABLE.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::{SessionTitleChangedAction, StateAction};

    /// A broadcast's frame, made from the text encoded once, is byte for
    /// byte the frame serde writes for the whole notification.
    #[test]
    fn a_broadcast_frame_is_the_notification_serde_writes() {
        let envelope = ActionEnvelope {
            channel: "ahp-session:/a".into(),
            action: StateAction::SessionTitleChanged(SessionTitleChangedAction { title: "a \"quoted\" title".into() }),
            server_seq: 7,
            origin: None,
            rejection_reason: Some("why".into()),
        };
        let expected = serde_json::to_string(&serde_json::json!({"jsonrpc": "2.0", "method": "action", "params": envelope}));
        let frame = Outbound::Action(std::sync::Arc::new(Broadcast::new(envelope))).to_json();
        assert_eq!(Some(frame), expected.ok());
    }
}
