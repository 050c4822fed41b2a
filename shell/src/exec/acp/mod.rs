//! ACP backends: every configured agent (`--agent NAME='command args'` or
//! `[agents.NAME]`) is driven over stdio with the Agent Client Protocol,
//! through the client side of the `agent-client-protocol` crate.
//!
//! Each chat gets its own agent process, spawned in the session's working
//! directory, and one actor task that takes the chat's commands in issue
//! order (see [`chat`]). A process fault (exit, an `initialize` that never
//! answers, garbage or a huge line on stdout) ends that chat's agent only:
//! the daemon and every other chat keep running.
//!
//! The crate's futures are `Send` (5.x needs no `LocalSet`), so each
//! connection runs as ordinary tokio tasks on the daemon's runtime.
//!
//! Resuming: the host asks for a resume (`Start { resume: true }`) only for
//! providers whose config says `can_resume` (the core reads
//! `AgentSpec.can_resume` at session creation; a backend that cannot resume
//! never sleeps). Whether the agent really can (`loadSession` in its
//! `initialize` answer) is known only once it runs, so the config decides;
//! an agent that turns out not to load sessions fails the resume (the
//! session stays asleep) and a warning says to set `can_resume = false`.

pub mod chat;
pub mod fs;
pub mod process;
pub mod prompt;
pub mod terminal;
pub mod turn;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ahp_types::Uri;
use ahpd_core::{AgentSpec, BackendCmd, Input, OpId, Outcome};
use tokio::sync::mpsc;

use crate::events::EventSink;

/// How long an agent may take to answer `initialize`, `session/new` or
/// `session/load` unless its config says otherwise, in ms (30 s).
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 30_000;

/// One configured ACP agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// The provider id clients name in `createSession`.
    pub name: String,
    /// The program to run (looked up on `PATH` when it has no slash).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Shown in pickers (default: the name).
    pub display_name: String,
    /// One line on what it is.
    pub description: String,
    /// Whether sessions on it may sleep and be resumed with `session/load`.
    pub can_resume: bool,
    /// How long each start-up request may take, in ms.
    pub startup_timeout_ms: u64,
    /// Whether its chats get the host's own MCP server (issue 24, `host_tools`
    /// in its config; default on): `send_message`, `schedule_wakeup`, ...
    /// ([`crate::exec::mcp`]).
    pub host_tools: bool,
}

impl AgentConfig {
    /// What the core advertises for this agent (`RootState.agents`). Every
    /// chat has a process of its own, so sessions may hold several chats.
    pub fn spec(&self) -> AgentSpec {
        AgentSpec {
            provider: self.name.clone(),
            display_name: self.display_name.clone(),
            description: self.description.clone(),
            can_resume: self.can_resume,
            multiple_chats: true,
            // ACP `session/new` takes one working directory: no peers.
            peer_directories: false,
            forgets: false,
            forks: false,
            resumes_turns: false,
            moves_chats: false,
            steers: false,
        }
    }

    /// The command line, for logs and `config check`.
    pub fn command_line(&self) -> String {
        std::iter::once(self.program.as_str()).chain(self.args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
    }
}

/// The ACP executor: the configured agents and one actor per chat.
pub struct Acp {
    agents: HashMap<String, Arc<AgentConfig>>,
    events: EventSink,
    home: PathBuf,
    written: fs::Written,
    chats: HashMap<Uri, mpsc::UnboundedSender<chat::Msg>>,
    /// The host's MCP server, when it runs: each chat's agent whose config
    /// keeps `host_tools` on is given it with a secret of its own.
    tools: Option<crate::exec::mcp::Endpoint>,
}

impl Acp {
    /// An executor for `agents`; a chat with no working directory runs in
    /// `home` (which must exist).
    pub fn new(agents: Vec<AgentConfig>, home: PathBuf, events: EventSink) -> Acp {
        Acp {
            agents: agents.into_iter().map(|a| (a.name.clone(), Arc::new(a))).collect(),
            written: fs::Written::reporting_to(events.clone()),
            events,
            home,
            chats: HashMap::new(),
            tools: None,
        }
    }

    /// Gives every chat's agent (whose config keeps `host_tools` on) the
    /// host's MCP server at `endpoint`.
    pub fn with_host_tools(mut self, endpoint: Option<crate::exec::mcp::Endpoint>) -> Acp {
        self.tools = endpoint;
        self
    }

    /// Whether any configured agent takes the host's tools (the MCP server
    /// is opened only then).
    pub fn wants_host_tools(agents: &[AgentConfig]) -> bool {
        agents.iter().any(|a| a.host_tools)
    }

    /// Whether `provider` is one of the configured agents.
    pub fn has(&self, provider: &str) -> bool {
        self.agents.contains_key(provider)
    }

    /// Hands one command to `chat`'s actor (started on first use); the
    /// answer comes back as `Input::Done { op, .. }`.
    pub fn execute(&mut self, op: OpId, provider: &str, chat: Uri, command: BackendCmd) {
        let Some(agent) = self.agents.get(provider).cloned() else {
            self.events.input(Input::Done { op, outcome: Outcome::Failed { message: format!("no ACP agent {provider:?}") } });
            return;
        };
        let mut msg = chat::Msg { op, command: Box::new(command) };
        if let Some(tx) = self.chats.get(&chat) {
            match tx.send(msg) {
                Ok(()) => return,
                Err(mpsc::error::SendError(back)) => msg = back,
            }
        }
        let tools = self.tools.clone().filter(|_| agent.host_tools);
        let tx = chat::ChatActor::spawn(chat.clone(), agent, self.home.clone(), self.written.clone(), self.events.clone(), tools);
        if tx.send(msg).is_err() {
            self.events.input(Input::Done { op, outcome: Outcome::Failed { message: "acp: the chat's actor could not start".to_owned() } });
        }
        self.chats.insert(chat, tx);
    }
}

/// The start-up timeout as a duration.
fn startup_timeout(agent: &AgentConfig) -> Duration {
    Duration::from_millis(agent.startup_timeout_ms.max(1))
}
