//! A chat's agent start answered, as its session takes it: the end of
//! `createSession`'s wait, one step of a wake, or a chat's first start in
//! a live session (Sessions page, "The life of a session", "Sleep and
//! wake"). The session keeps the conversation the answer names and says
//! what the host must do next ([`StartNext`]).

use ahp_types::Uri;

use crate::effect::{LogLevel, OpId};
use crate::session::Asker;
use crate::tools::HostCallId;
use crate::shared::Shared;
use crate::input::Outcome;
use crate::session::{Phase, Session};

/// What the host does after a session took a start's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum StartNext {
    /// Nothing more: a late answer, a created session answered, or a
    /// wake still waiting for other starts.
    Nothing,
    /// `createSession` is refused with -32603 `message` on request `id`
    /// of `conn` (or `start_child_session` with `unavailable`); the
    /// session never existed. `logged` is what the backend said, when it
    /// said why.
    CreateRefused {
        /// Who asked for it.
        asker: Asker,
        /// The error's message.
        message: String,
        /// The backend's own words, logged.
        logged: Option<String>,
    },
    /// A child session `start_child_session` made started: its first
    /// prompt starts, and tool call `.0` is answered
    /// (`Tools::child_started`, `host/children.rs`).
    ChildStarted(HostCallId),
    /// Every start of the wake answered: the wake ends.
    WakeDone,
    /// A chat's agent in a live session started: turns it held go to it.
    ChatStarted,
    /// A chat's agent in a live session would not start: turns it held
    /// fail with the backend's words.
    ChatFailed(String),
}

impl Session {
    /// Takes the answer to start `op` of `chat`'s agent. A start answered
    /// with its conversation supersedes the chat's earlier ones still
    /// unanswered: their late answers name an older agent's conversation
    /// (issue 19, sim seed 19510: one replaced the conversation a tree's
    /// fresh start had named, and the turns under it were gone after the
    /// next wake).
    pub(crate) fn start_answered(&mut self, sh: &mut Shared, chat: &Uri, op: OpId, outcome: Outcome) -> StartNext {
        let unanswered = self.work.starts_unanswered.remove(&op);
        if matches!(outcome, Outcome::Started { .. }) {
            self.work.starts_unanswered.retain(|o, c| !(c == chat && *o < op));
        }
        // The phase that asked must still be waiting for it: an op a live
        // session's chat start left behind is still listed after the
        // session slept, until a wake replaces the list (seed 1095 again,
        // with another schedule: the answer came while asleep).
        let awaited = self.phase.awaited_mut().is_some_and(|ops| ops.remove(&op)) && matches!(self.phase, Phase::Starting(_) | Phase::Waking(_) | Phase::Live { .. });
        if !awaited {
            sh.stats.stale_ops += 1;
            // Late for its phase (the agent exited, the session slept), but
            // the conversation it names is real: a wake must resume that
            // one, not the id the host first asked for (issue 19, seeds
            // 1095 and 1631: the chat's first turns were lost).
            if let (Some(started_chat), Outcome::Started { conversation_id, .. }) = (unanswered, &outcome) {
                let chat_record = self.record.chats.iter_mut().find(|c| c.resource == started_chat && c.resource == *chat);
                if let Some(c) = chat_record.filter(|c| *c.conversation_id != **conversation_id) {
                    crate::mark!("late_start_names_conversation");
                    c.conversation_id = conversation_id.as_str().into();
                    c.fresh = false;
                    self.work.conversations_unsaved.insert(chat.clone());
                    self.store_put(sh);
                }
            }
            return StartNext::Nothing;
        }
        if let Outcome::Started { conversation_id, .. } = &outcome {
            self.name_conversation(chat, conversation_id);
        }
        // A transcript that cannot be read back (issue 25,
        // `session/damage.rs`): the chat is marked, and what clients read
        // is the host's words, which name no server path; a start that read
        // the conversation again clears the mark.
        let outcome = match outcome {
            Outcome::TranscriptDamaged { detail } => {
                sh.log(LogLevel::Warn, "backend.transcript_damaged", Some(self.record.resource.clone()), format!("{chat}: {detail}"));
                self.mark_transcript_damaged(sh, chat);
                Outcome::Failed { message: crate::session::damage::DAMAGED_TRANSCRIPT.to_owned() }
            }
            Outcome::Failed { message } if self.record.chats.iter().any(|c| c.resource == *chat && c.damaged) => {
                sh.log(LogLevel::Warn, "backend.transcript_damaged", Some(self.record.resource.clone()), format!("{chat}: {message}"));
                Outcome::Failed { message: crate::session::damage::DAMAGED_TRANSCRIPT.to_owned() }
            }
            started @ Outcome::Started { .. } => {
                if self.clear_transcript_damaged(chat) {
                    self.store_put(sh);
                }
                started
            }
            other => other,
        };
        // What the backend gave back, less the turns a rewind took away
        // (`session/rewind.rs`): a wake keeps it until its last start
        // answers, by when the forget may have been confirmed and the
        // record no longer list them.
        let mut outcome = outcome;
        if let (Outcome::Started { history, .. }, Some(rec)) = (&mut outcome, self.record.chats.iter().find(|c| c.resource == *chat)) {
            *history = crate::session::rewind::without_forgotten(rec, std::mem::take(history));
        }
        match &mut self.phase {
            Phase::Starting(owed) => {
                let asker = owed.asker;
                match outcome {
                    Outcome::Started { .. } => {
                        self.set_phase(Phase::live());
                        self.touch(sh);
                        self.mark_activity(sh);
                        sh.log(LogLevel::Info, "session.created", Some(self.record.resource.clone()), String::new());
                        match asker {
                            Asker::Client { conn, id } => {
                                sh.reply(conn, id, serde_json::Value::Null);
                                StartNext::Nothing
                            }
                            Asker::Tool(call) => StartNext::ChildStarted(call),
                        }
                    }
                    Outcome::Failed { message } => StartNext::CreateRefused {
                        asker,
                        message: format!("the backend would not start: {message}"),
                        logged: Some(message),
                    },
                    Outcome::Ok | Outcome::TranscriptDamaged { .. } | Outcome::Scanned { .. } | Outcome::Git(_) | Outcome::Fs(_) | Outcome::RegistryScanned { .. } => StartNext::CreateRefused {
                        asker,
                        message: "the backend did not start the agent".to_owned(),
                        logged: None,
                    },
                }
            }
            Phase::Waking(wake) => {
                match outcome {
                    Outcome::Started { history, .. } => {
                        wake.history.insert(chat.clone(), history);
                    }
                    Outcome::Failed { message } => {
                        wake.error.get_or_insert(message);
                    }
                    Outcome::Ok | Outcome::TranscriptDamaged { .. } | Outcome::Scanned { .. } | Outcome::Git(_) | Outcome::Fs(_) | Outcome::RegistryScanned { .. } => {
                        wake.history.insert(chat.clone(), Vec::new());
                    }
                }
                if wake.ops.is_empty() {
                    StartNext::WakeDone
                } else {
                    StartNext::Nothing
                }
            }
            // A chat made in a live session: its agent's first start.
            Phase::Live { .. } => match outcome {
                Outcome::Started { .. } => {
                    self.store_put(sh);
                    StartNext::ChatStarted
                }
                Outcome::Failed { message } => StartNext::ChatFailed(message),
                Outcome::Ok | Outcome::TranscriptDamaged { .. } | Outcome::Scanned { .. } | Outcome::Git(_) | Outcome::Fs(_) | Outcome::RegistryScanned { .. } => {
                    StartNext::ChatFailed("the backend answered the start with something else".to_owned())
                }
            },
            // Not awaited: handled above.
            Phase::Asleep | Phase::Disposing(_) => StartNext::Nothing,
        }
    }

    /// The conversation an agent's start names for `chat` (the client's
    /// id, or the one the agent assigned): what a wake resumes. The chat's
    /// conversation exists from now on.
    ///
    /// A name the record did not hold is unsaved until a write carrying it
    /// is durable: the chat's turns wait for it ([`Session::hand_to_agent`]).
    fn name_conversation(&mut self, chat: &Uri, conversation_id: &str) {
        if let Some(c) = self.record.chats.iter_mut().find(|c| c.resource == *chat) {
            if c.fresh || *c.conversation_id != *conversation_id {
                self.work.conversations_unsaved.insert(chat.clone());
            }
            c.conversation_id = conversation_id.into();
            c.fresh = false;
        }
    }
}
