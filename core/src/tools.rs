//! The tools the host gives its agents (issue 24; Sessions page, "Sleep and
//! wake": "a send_message from another session, ... a child session's
//! childFinished, and a wake its agent asked for with schedule_wakeup"), as
//! data: what an agent may ask ([`HostToolRequest`]), and what it is told
//! ([`HostToolError`] or a JSON value).
//!
//! An agent reaches these over the host's MCP server (`shell/`) or, for the
//! built-in echo agent, through its directives; either way the shell hands
//! the core one `Input::HostTool { call, chat, tool }` and the core answers
//! it with exactly one `Effect::HostToolAnswer { call, result }`, in the same
//! `Host::handle` call or a later one. Every rule of the tools lives in
//! `host/tools.rs`.

use ahp_types::Uri;
use serde::{Deserialize, Serialize};

/// Ties a host tool call to its answer: chosen by the shell, never reused
/// within a process (a counter). The core only echoes it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostCallId(pub u64);

/// Most wakes one session may have waiting at once ([`HostToolRequest::ScheduleWakeup`]);
/// one more is refused with [`HostToolErrorCode::LimitReached`].
pub const MAX_WAKES_PER_SESSION: usize = 16;

/// Most children one session may have at once ([`HostToolRequest::StartChildSession`]);
/// one more is refused with [`HostToolErrorCode::LimitReached`]. A child
/// disposed leaves room for another.
pub const MAX_CHILDREN_PER_SESSION: usize = 16;

/// Longest child reply a `childFinished` carries (and `child_status`
/// answers), in bytes; a longer one is cut at a character boundary and
/// ends with `…`.
pub const MAX_CHILD_REPLY_BYTES: usize = 8 * 1024;

/// Longest prompt or message text a tool takes, in bytes (a message to
/// another session, a wake's prompt, a child's first prompt).
pub const MAX_TOOL_TEXT_BYTES: usize = 64 * 1024;

/// One call of a host tool by the agent running in a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "tool", rename_all = "snake_case")]
pub enum HostToolRequest {
    /// `send_message(session, text)`: a message to another session the
    /// calling session's owner may write to (a `chat:send` on the target in
    /// the grants table). It arrives as a turn on the target's default chat
    /// (queued behind a running turn), its origin naming the sender, and
    /// wakes the target. Answer: `{"session", "chat", "turnId"}`.
    SendMessage {
        /// The target session's URI.
        session: Uri,
        /// The message.
        text: String,
    },
    /// `schedule_wakeup(after_seconds | at, prompt)`: when due, the calling
    /// chat's session wakes (if asleep) and `prompt` starts a turn on the
    /// calling chat. Exactly one of `after_seconds` and `at`. Durable
    /// across sleep and restart; at most [`MAX_WAKES_PER_SESSION`] per
    /// session. Answer: `{"id", "at", "chat"}` (`at` an RFC 3339 time).
    ScheduleWakeup {
        /// Seconds from now.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_seconds: Option<u64>,
        /// An RFC 3339 time (e.g. `2026-01-01T09:00:00Z`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<String>,
        /// The prompt the wake's turn starts with.
        prompt: String,
    },
    /// `cancel_wakeup(id)`: forgets one of this session's waiting wakes.
    /// Answer: `{"id", "cancelled": true}`.
    CancelWakeup {
        /// The id `schedule_wakeup` answered.
        id: String,
    },
    /// `start_child_session(provider, prompt, working_directory?)`: a new
    /// session owned as the caller's is (same owner and scope), with the
    /// caller's session recorded as its parent; `prompt` starts its first
    /// turn. When a turn of the child ends, the parent gets `childFinished`.
    /// Answer: `{"session", "chat"}`.
    StartChildSession {
        /// The agent to run (`echo`, or an ACP agent's name).
        provider: String,
        /// The child's first prompt.
        prompt: String,
        /// The folder it works in; the parent's first when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        working_directory: Option<Uri>,
    },
    /// `child_status(child)`: where a child of this session stands.
    /// Answer: `{"session", "status", "lastReply"}`.
    ChildStatus {
        /// The child session's URI.
        child: Uri,
    },
    /// `list_peers()`: the calling session's workspace-awareness peers, as
    /// `ahpd/listPeers` answers them.
    ListPeers,
}

impl HostToolRequest {
    /// The tool's name as agents call it (`send_message`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            HostToolRequest::SendMessage { .. } => "send_message",
            HostToolRequest::ScheduleWakeup { .. } => "schedule_wakeup",
            HostToolRequest::CancelWakeup { .. } => "cancel_wakeup",
            HostToolRequest::StartChildSession { .. } => "start_child_session",
            HostToolRequest::ChildStatus { .. } => "child_status",
            HostToolRequest::ListPeers => "list_peers",
        }
    }
}

/// Why a host tool call was refused. A refused call changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostToolErrorCode {
    /// The arguments are malformed (both or neither of `after_seconds` and
    /// `at`, a bad URI, an unknown provider, text too long).
    InvalidArgument,
    /// What the call names does not exist (the target session, the wake,
    /// the child), or the calling chat no longer does.
    NotFound,
    /// The calling session's owner may not do this (the grants table), or
    /// the target is the caller itself where that is refused.
    Forbidden,
    /// A bound was reached (too many wakes waiting, too many children).
    LimitReached,
    /// The host cannot take it now (it is shutting down, or the call came
    /// while the chat's session was being disposed).
    Unavailable,
}

impl HostToolErrorCode {
    /// The code as text (`invalid_argument`, `not_found`, `forbidden`,
    /// `limit_reached`, `unavailable`).
    pub fn as_str(self) -> &'static str {
        match self {
            HostToolErrorCode::InvalidArgument => "invalid_argument",
            HostToolErrorCode::NotFound => "not_found",
            HostToolErrorCode::Forbidden => "forbidden",
            HostToolErrorCode::LimitReached => "limit_reached",
            HostToolErrorCode::Unavailable => "unavailable",
        }
    }
}

/// A refused host tool call: a code and words an agent (or its user) can
/// act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostToolError {
    /// What kind of refusal.
    pub code: HostToolErrorCode,
    /// Why, in a sentence.
    pub message: String,
}

impl HostToolError {
    /// A refusal with `code` and `message`.
    pub fn new(code: HostToolErrorCode, message: impl Into<String>) -> HostToolError {
        HostToolError { code, message: message.into() }
    }
}

impl std::fmt::Display for HostToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

/// What a host tool call answers: a JSON value, or a refusal.
pub type HostToolResult = Result<serde_json::Value, HostToolError>;

/// A child session `start_child_session` asked for, once its arguments
/// were checked: what the host makes it from when the facts of its
/// folder's repository come (`GitOp::Child`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildStart {
    /// The calling session: the child's parent.
    pub parent: Uri,
    /// The calling chat.
    pub chat: Uri,
    /// The child's agent.
    pub provider: String,
    /// Its first prompt.
    pub prompt: String,
    /// Its folders (the parent's first one when the call named none).
    pub working_directories: Vec<Uri>,
}
