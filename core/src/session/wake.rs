//! A session's agents starting (Sessions page, "The life of a session",
//! "Sleep and wake"): a provisional session made by `createSession` and its
//! first agent's start; a wake starting every chat's agent (resuming where
//! the backend can) and, once every start answered, either its state
//! rebuilt from what the backend kept and the session live, or the wake
//! failed and the session asleep, intact, for the next waker. Whether a
//! wake may begin (trust, a tree to put back) and serving what waited are
//! the host's (`host/agents.rs`).

use std::collections::BTreeSet;

use ahp_types::state::{Message, SessionLifecycle};
use ahp_types::Uri;

use crate::effect::{BackendCmd, LogLevel};
use crate::record::SessionRecord;
use crate::shared::{Op, Shared};
use crate::session::state::{chat_state, chat_summary, session_state};
use crate::session::{Phase, Resident, Session, Waiter, Wake};

/// How a wake ended ([`Session::end_wake`]): the turns it held and what
/// waited for it, for the host to serve or fail.
#[derive(Debug, Clone, PartialEq)]
pub enum WakeEnd {
    /// A resume failed: each turn and waiter fails with `reason`.
    Failed {
        /// The turns accepted while asleep: (chat, turn id, message).
        pending: Vec<(Uri, String, std::sync::Arc<Message>)>,
        /// What waited, in arrival order.
        waiters: Vec<Waiter>,
        /// What they are told.
        reason: String,
    },
    /// The session is live: the turns go to their agents, the waiters run.
    Woke {
        /// The turns accepted while asleep: (chat, turn id, message).
        pending: Vec<(Uri, String, std::sync::Arc<Message>)>,
        /// What waited, in arrival order.
        waiters: Vec<Waiter>,
    },
}

impl Session {
    /// Starts every chat's agent (resuming where the backend can) and moves
    /// the session to `Waking`. A backend that cannot resume is never asked
    /// to: its agents start afresh (the host keeps the chat's turns it
    /// holds); nor is a chat whose conversation never began, nor a session
    /// whose start is owed.
    pub(crate) fn start_agents(&mut self, sh: &mut Shared) {
        let session = self.record.resource.clone();
        let owed = self.start_owed;
        let can_resume = self.can_resume;
        let working_directory = self.record.working_directories.first().cloned();
        let peer_directories = sh.peers_for(&self.record);
        // A chat moved in (`moveChat`) brought a conversation of its own,
        // which a start owed by the session does not undo.
        let chats: Vec<(Uri, String, bool)> = self
            .record
            .chats
            .iter()
            .map(|c| (c.resource.clone(), c.conversation_id.to_string(), can_resume && (!owed || c.moved.is_some()) && !c.fresh))
            .collect();
        if can_resume {
            crate::mark!("wake_resumes");
        } else {
            crate::mark!("wake_starts_afresh_not_resumable");
        }
        self.set_phase(Phase::waking());
        let mut ops = BTreeSet::new();
        for (chat, conversation_id, resume) in chats {
            let command = BackendCmd::Start {
                session: session.clone(),
                conversation_id,
                working_directory: working_directory.clone(),
                peer_directories: peer_directories.clone(),
                resume,
            };
            ops.insert(self.backend(sh, Op::Start { session: session.clone(), chat: chat.clone() }, chat, command));
        }
        if let Phase::Waking(wake) = &mut self.phase {
            wake.ops = ops;
        }
        self.touch(sh);
        sh.log(LogLevel::Info, "session.waking", Some(session), String::new());
    }

    /// Every resume of the wake answered: what they answered leaves the
    /// phase with it. On failure the agents are closed and the session is
    /// asleep again; on success its state is rebuilt from the backend's
    /// turns when it was not held (held turns the backend's history has
    /// after all are let go, `crate::kept_turns`; the rest come back in
    /// place), it is live, and root subscribers hear what the rebuilt row
    /// moved (issue 19, `root_rows_match_listing`). `None` when it is not
    /// waking.
    pub(crate) fn end_wake(&mut self, sh: &mut Shared) -> Option<WakeEnd> {
        let session_uri = self.record.resource.clone();
        let Phase::Waking(wake) = std::mem::replace(&mut self.phase, Phase::waking()) else {
            return None;
        };
        let Wake { history, error, .. } = *wake;
        let waiters = std::mem::take(&mut self.work.waiters);
        if let Some(message) = error {
            crate::mark!("resume_failed_fails_waiters");
            let chats: Vec<Uri> = self.record.chats.iter().map(|c| c.resource.clone()).collect();
            let pending = std::mem::take(&mut self.work.pending_sends);
            for chat in chats {
                self.backend(sh, Op::Fire, chat, BackendCmd::Close);
            }
            self.set_phase(Phase::Asleep);
            sh.stats.failed_resumes += 1;
            sh.log(LogLevel::Warn, "session.resume_failed", Some(session_uri), message.clone());
            let reason = format!("the session could not be resumed: {message}");
            return Some(WakeEnd::Failed { pending, waiters, reason });
        }
        let mut let_go = false;
        if self.resident.is_none() {
            crate::mark!("wake_rebuilds_evicted_state");
            for chat in &mut self.record.chats {
                let (_, found) = crate::kept_turns::merge(chat, history.get(&chat.resource).cloned().unwrap_or_default());
                for id in found {
                    let_go |= crate::kept_turns::release(chat, &id);
                }
            }
            // A chat moved in while the state was not held comes back as
            // it was held (`Work::moved_in`).
            let mut moved_in = std::mem::take(&mut self.work.moved_in);
            let chats: Vec<_> = self
                .record
                .chats
                .iter()
                .map(|c| moved_in.remove(&c.resource).unwrap_or_else(|| chat_state(c, history.get(&c.resource).cloned().unwrap_or_default(), self.record.is_default_chat(&c.resource))))
                .collect();
            let lifecycle = if self.start_owed { SessionLifecycle::Failed } else { SessionLifecycle::Ready };
            let state = session_state(&self.record, lifecycle, chats.iter().map(chat_summary).collect());
            self.resident = Some(Box::new(Resident {
                session: state,
                chats: chats.into_iter().map(|c| (c.resource.clone(), c)).collect(),
                turn_started_mono: Default::default(),
                born_seq: sh.server_seq,
            }));
        }
        let pending = std::mem::take(&mut self.work.pending_sends);
        self.set_phase(Phase::live());
        self.start_owed = false;
        sh.stats.wakes += 1;
        if let_go {
            self.store_put(sh);
        }
        self.summary_changed(sh);
        self.mark_activity(sh);
        sh.log(LogLevel::Info, "session.woke", Some(session_uri), String::new());
        Some(WakeEnd::Woke { pending, waiters })
    }

    /// A session `createSession` just made, provisional (Sessions page,
    /// "Provisional sessions"): its state held with the default chat, its
    /// lifecycle `creating`, the answer owed to `asker` (a client's
    /// `createSession`, an agent's `start_child_session`) until its agent
    /// starts.
    pub(crate) fn provisional(record: SessionRecord, asker: crate::session::Asker, can_resume: bool, sh: &Shared) -> Session {
        let chat = chat_state(&record.chats[0], Vec::new(), true);
        let state = session_state(&record, SessionLifecycle::Creating, vec![chat_summary(&chat)]);
        let resident = Resident {
            session: state,
            chats: [(record.default_chat().into_owned(), chat)].into_iter().collect(),
            turn_started_mono: Default::default(),
            born_seq: sh.server_seq,
        };
        Session::new(record, Phase::starting_for(asker), Some(resident), can_resume, sh.now.mono)
    }

    /// Starts a provisional session's default chat's agent, afresh, in its
    /// process root with its peers: `createSession` answers when it did.
    pub(crate) fn start_default_agent(&mut self, sh: &mut Shared) {
        let session = self.record.resource.clone();
        let chat = self.record.default_chat().into_owned();
        let command = BackendCmd::Start {
            session: session.clone(),
            conversation_id: self.record.key().into_owned(),
            working_directory: self.record.working_directories.first().cloned(),
            peer_directories: crate::folders::peers(&self.record.working_directories),
            resume: false,
        };
        let op = self.backend(sh, Op::Start { session, chat: chat.clone() }, chat, command);
        if let Some(ops) = self.phase.awaited_mut() {
            ops.insert(op);
        }
    }
}
