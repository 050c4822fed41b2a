//! The host's settings, as plain data handed to `Host::new`.

use serde::{Deserialize, Serialize};

/// One agent backend the host can run, named by provider (Sessions page,
/// "Terms": the backend).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSpec {
    /// The provider id clients name in `createSession`, e.g. `echo`.
    pub provider: String,
    /// Human-readable name shown in pickers.
    pub display_name: String,
    /// One line on what the agent is.
    pub description: String,
    /// Whether the backend can resume a conversation after its agent was let
    /// go. A session whose backend cannot resume never sleeps (Sessions page,
    /// "Sleep and wake").
    pub can_resume: bool,
    /// Whether a session on this backend may hold several chats
    /// (`createChat`); advertised as `capabilities.multipleChats`.
    #[serde(default)]
    pub multiple_chats: bool,
    /// Whether the agent can work in peer folders besides its process root
    /// (`session/workingDirectorySet`); advertised as
    /// `capabilities.multipleWorkingDirectories` with `primaryReplacement`.
    /// A backend without it is told no peers (issue 9; see `folders`).
    #[serde(default)]
    pub peer_directories: bool,
    /// Whether the backend can forget a chat's turns after a given one
    /// (`chat/truncated`, issue 23): the echo agent rewrites its
    /// transcript; an ACP agent has no such request in the protocol version
    /// we speak, so a rewind there is refused with a reason and no change.
    #[serde(default)]
    pub forgets: bool,
    /// Whether a chat may be made as a fork or a side chat of another
    /// (`createChat` with a `source`, issue 23; `session/fork.rs`):
    /// advertised as `capabilities.multipleChats.fork` and `sideChat`. The
    /// echo agent does; an ACP agent does not (ACP v1 has no fork).
    #[serde(default)]
    pub forks: bool,
    /// Whether the backend can resume a turn that ended in an error it
    /// marked resumable (`chat/turnResume`, issue 23;
    /// `session/resume.rs`): the echo agent continues the reply; an ACP
    /// agent has no such request in the protocol version we speak, so a
    /// resume there is refused with a reason and no change.
    #[serde(default)]
    pub resumes_turns: bool,
    /// Whether a chat's conversation may be moved to another session
    /// (`moveChat` to another session, issue 23; docs/DECISIONS.md, 17): the
    /// backend resumes the conversation under the new session and in its
    /// folder. The echo agent does (its transcript is the conversation); an
    /// ACP agent does not: ACP v1 has no way to hand a conversation from one
    /// agent process to another in a different working directory, so such a
    /// move is refused with a reason and no change. A reorder within one
    /// session needs nothing of the backend and is offered on every agent.
    #[serde(default)]
    pub moves_chats: bool,
    /// Whether the backend can take a steering message into its running
    /// turn at a safe point (`BackendCmd::Steer`, issue 23;
    /// `session/steering.rs`): the echo agent does, between the chunks of
    /// its reply; an ACP agent cannot (ACP v1 takes no message while a
    /// prompt runs), so its steering message is held and runs as the next
    /// turn.
    #[serde(default)]
    pub steers: bool,
}

impl AgentSpec {
    /// The built-in `echo` agent: deterministic, resumable, always present.
    pub fn echo() -> AgentSpec {
        AgentSpec {
            provider: "echo".to_owned(),
            display_name: "Echo".to_owned(),
            description: "Built-in agent that streams back a reply quoting each message.".to_owned(),
            can_resume: true,
            multiple_chats: true,
            peer_directories: true,
            forgets: true,
            forks: true,
            resumes_turns: true,
            moves_chats: true,
            steers: true,
        }
    }
}

/// Every knob of the core. Units are in the names (`_ms`, counts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// This host's name, used for `root:<host>` owners and `serverInfo`.
    pub host_name: String,
    /// The backends sessions can be created on, in the order `RootState.agents`
    /// lists them.
    pub agents: Vec<AgentSpec>,
    /// Quiet time after which a session's agent is let go, in ms; 0 = never
    /// (Sessions page, "Sleep and wake": `sleepAfterMinutes`, 30 by default).
    pub sleep_after_ms: u64,
    /// Most sessions kept resident; 0 = no limit (Sessions page, "Sleep and
    /// wake": `sessionResidencyLimit`, 10 by default).
    pub residency_limit: usize,
    /// Period of the residency sweep, in ms ("once a minute").
    pub residency_sweep_ms: u64,
    /// How many action envelopes `reconnect` can replay, in envelopes. The
    /// buffer is bounded in bytes too (`Limits::replay_buffer_max_bytes`);
    /// whichever bound is reached first drops the oldest.
    pub replay_buffer_len: usize,
    /// Largest `listSessions` page a client may ask for, in rows (500).
    pub list_limit_max: usize,
    /// Rows answered when a client names no limit (the whole catalogue up to
    /// 1,000; Sessions page, "Finding one").
    pub list_default_max: usize,
    /// Turns per `fetchTurns` page, in turns.
    pub turns_page_len: usize,
    /// The host secret that authenticates paging cursors (docs/DECISIONS.md, 4),
    /// kept in the data dir by the shell so cursors outlive restarts.
    pub cursor_secret: Vec<u8>,
    /// Lowercase hex SHA-256 of the host's own token (the shell keeps the
    /// token in `<data-dir>/host-token`, mode 0600): a connection that
    /// authenticates with it is this host itself, `root:<host_name>`
    /// (issue 7). `None`: no connection can be root.
    #[serde(default)]
    pub host_token_sha256: Option<String>,
    /// The users directory, or `None` for a single-user host that has
    /// nobody to name: no owners recorded, nobody refused (Sessions page,
    /// "Whose it is").
    pub users: Option<crate::grants::UsersDirectory>,
    /// External transcript sources scanned for the catalogue besides the
    /// agents (e.g. `claude` for Claude Code's own transcripts).
    pub external_sources: Vec<String>,
    /// How old the last scan may be before a listing starts another behind
    /// its answer, in ms.
    pub scan_interval_ms: u64,
    /// How much of a pass over a backend's transcripts one slice merges, in
    /// rows (or eight times as many sessions, in the walk for external
    /// sessions whose transcript went); the next slice runs on a tick a
    /// millisecond later, so no input does work in proportion to the
    /// catalogue (issue 21: a 100k-row pass merged at once held every
    /// client back half a second).
    #[serde(default = "default_scan_merge_slice")]
    pub scan_merge_slice: usize,
    /// The root config's initial `showExternalSessions` (Sessions page:
    /// "none, the default").
    pub show_external_sessions: crate::external::ExternalMode,
    /// Bounds on what one client may ask of the host.
    pub limits: Limits,
    /// The policy store: which providers and folders each user, team or
    /// role may use (default: allow everything). Replaced at run time by
    /// `Input::PolicyChanged` (SIGHUP).
    pub policy: crate::policy::Policy,
    /// Workspace awareness (issue 10): off unless the shell turns it on.
    #[serde(default)]
    pub awareness: crate::awareness::AwarenessConfig,
    /// Which folders agents may run in (`trusted_folders`; default: no
    /// list, every folder). Sessions page, "Isolation and worktrees".
    #[serde(default)]
    pub trust: crate::trust::Trust,
    /// A session's files over the wire (issue 48): browsing, the default
    /// directory, the read, list, watch and completion bounds.
    #[serde(default)]
    pub files: crate::files::FilesConfig,
}

/// Bounds on what one client may ask of the host; each refusal is a clear
/// JSON-RPC error (or a rejected action) and a log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest frame decoded, in bytes.
    pub frame_max_bytes: usize,
    /// Most channels one connection may subscribe to.
    pub subscriptions_per_conn: usize,
    /// Largest message text in a turn or a draft, in bytes.
    pub message_text_max_bytes: usize,
    /// Frames per second one connection may send, on average.
    pub frames_per_second: u32,
    /// Frames one connection may send in a burst above the average.
    pub frames_burst: u32,
    /// Most requests of one connection waiting for a wake at once.
    pub pending_requests_per_conn: usize,
    /// Most client connections open at once, in connections. One over it is
    /// answered with a -32600 error frame (`id: null`) saying so and closed;
    /// its place is free again once it has gone.
    #[serde(default = "default_connections_max")]
    pub connections_max: usize,
    /// Most bytes of frames queued for one connection that the client has
    /// not read yet, in bytes. Enforced by the shell's writer (the core never
    /// sees a socket): a client over it is dropped and the core told
    /// `Input::Disconnected`.
    #[serde(default = "default_outgoing_buffer_max_bytes")]
    pub outgoing_buffer_max_bytes: usize,
    /// Most queued messages one chat holds at once (`chat/pendingMessageSet`
    /// of kind `queued`), in messages. One more is refused unapplied with a
    /// reason that says so; replacing a queued message in place is not
    /// counted again. Each is kept in the session's record until it runs.
    #[serde(default = "default_queued_messages_per_chat")]
    pub queued_messages_per_chat: usize,
    /// Largest session title a client may set (`session/titleChanged`), in
    /// bytes of UTF-8 (issue 25; `caps::check_title`). One over it is
    /// refused unapplied, nothing stored or broadcast.
    #[serde(default = "default_title_max_bytes")]
    pub title_max_bytes: usize,
    /// Largest attachments of one message a client sends (a turn, a draft,
    /// a pending message, `createChat`'s first message), in bytes of their
    /// JSON (issue 25; `caps::check_message`).
    #[serde(default = "default_message_attachments_max_bytes")]
    pub message_attachments_max_bytes: usize,
    /// Most bytes of envelope text the replay buffer keeps for `reconnect`,
    /// in bytes (issue 25: bounded by count alone, a thousand 900 KB turns'
    /// envelopes held ~300 MB with no session left). Past it the oldest are
    /// dropped; a client that reconnects from before the window is answered
    /// with snapshots, as AHP has it for any reconnect the buffer no longer
    /// covers. One envelope bigger than the whole bound is not kept (and
    /// ends the window there). Also at most `Config::replay_buffer_len`
    /// envelopes.
    #[serde(default = "default_replay_buffer_max_bytes")]
    pub replay_buffer_max_bytes: usize,
}

fn default_title_max_bytes() -> usize {
    crate::caps::TITLE_MAX_BYTES
}

fn default_message_attachments_max_bytes() -> usize {
    crate::caps::MESSAGE_ATTACHMENTS_MAX_BYTES
}

/// The default `replay_buffer_max_bytes`: 16 MiB.
pub const REPLAY_BUFFER_MAX_BYTES: usize = 16 << 20;

fn default_replay_buffer_max_bytes() -> usize {
    REPLAY_BUFFER_MAX_BYTES
}

/// The default `queued_messages_per_chat`: 32 messages.
pub const QUEUED_MESSAGES_PER_CHAT: usize = 32;

fn default_queued_messages_per_chat() -> usize {
    QUEUED_MESSAGES_PER_CHAT
}

/// The default grace running turns get after a stop is asked, in ms
/// (`Input::Shutdown::grace_ms`; issue 19, `shutdown_grace_seconds`, 30 s
/// by default). Not a field of [`Config`]: the grace comes with the stop.
/// The shell's `shutdown_grace_seconds` defaults to it.
pub const SHUTDOWN_GRACE_MS: u64 = 30_000;

/// The default `connections_max`: 256 connections.
pub const CONNECTIONS_MAX: usize = 256;

/// The default `outgoing_buffer_max_bytes`: 8 MiB.
pub const OUTGOING_BUFFER_MAX_BYTES: usize = 8 << 20;

/// The default `scan_merge_slice`: 250 rows an input, ~1-3 ms of work at
/// 100k sessions on a busy 2-core machine (docs/PERFORMANCE.md, issue 21).
pub const SCAN_MERGE_SLICE: usize = 250;

fn default_scan_merge_slice() -> usize {
    SCAN_MERGE_SLICE
}

fn default_connections_max() -> usize {
    CONNECTIONS_MAX
}

fn default_outgoing_buffer_max_bytes() -> usize {
    OUTGOING_BUFFER_MAX_BYTES
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            frame_max_bytes: crate::protocol::codec::FRAME_MAX_BYTES,
            subscriptions_per_conn: 1024,
            message_text_max_bytes: 1024 * 1024,
            frames_per_second: 200,
            frames_burst: 1000,
            pending_requests_per_conn: 256,
            connections_max: CONNECTIONS_MAX,
            outgoing_buffer_max_bytes: OUTGOING_BUFFER_MAX_BYTES,
            queued_messages_per_chat: QUEUED_MESSAGES_PER_CHAT,
            title_max_bytes: crate::caps::TITLE_MAX_BYTES,
            message_attachments_max_bytes: crate::caps::MESSAGE_ATTACHMENTS_MAX_BYTES,
            replay_buffer_max_bytes: REPLAY_BUFFER_MAX_BYTES,
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            host_name: "localhost".to_owned(),
            agents: vec![AgentSpec::echo()],
            sleep_after_ms: 30 * 60 * 1000,
            residency_limit: 10,
            residency_sweep_ms: 60 * 1000,
            replay_buffer_len: 1000,
            list_limit_max: 500,
            list_default_max: 1000,
            turns_page_len: 50,
            cursor_secret: b"ahpd-default-cursor-secret".to_vec(),
            host_token_sha256: None,
            users: None,
            external_sources: Vec::new(),
            scan_interval_ms: 30_000,
            scan_merge_slice: SCAN_MERGE_SLICE,
            show_external_sessions: crate::external::ExternalMode::None,
            limits: Limits::default(),
            policy: crate::policy::Policy::default(),
            awareness: crate::awareness::AwarenessConfig::default(),
            trust: crate::trust::Trust::default(),
            files: crate::files::FilesConfig::default(),
        }
    }
}
