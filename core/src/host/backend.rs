//! What a session's backend answers and says: a chat's agent started (or
//! not), a turn taken, what an agent says unprompted (`Input::Backend`:
//! turn actions, background work, files written, an exit).

use ahp_types::actions::StateAction;
use ahp_types::Uri;

use super::{Host, Op};
use crate::effect::{BackendCmd, LogLevel, OpId};
use crate::input::{BackendEvent, Outcome};
use crate::session::Phase;

impl Host {
    /// A chat's agent started (or failed to): the end of `createSession`'s
    /// wait, or one step of a wake.
    pub(crate) fn on_started(&mut self, session_uri: &Uri, chat: &Uri, op: OpId, outcome: Outcome) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let unanswered = session.starts_unanswered.remove(&op);
        // A start answered with its conversation supersedes the chat's
        // earlier ones still unanswered: their late answers name an older
        // agent's conversation (issue 19, sim seed 19510: one replaced the
        // conversation a tree's fresh start had named, and the turns under
        // it were gone after the next wake).
        if matches!(outcome, Outcome::Started { .. }) {
            session.starts_unanswered.retain(|o, c| !(c == chat && *o < op));
        }
        // The phase that asked must still be waiting for it: an op a live
        // session's chat start left behind is still listed after the
        // session slept, until a wake replaces the list (seed 1095 again,
        // with another schedule: the answer came while asleep).
        let awaited = session.phase_ops.remove(&op) && matches!(session.phase, Phase::Starting { .. } | Phase::Waking(_) | Phase::Live);
        if !awaited {
            self.shared.stats.stale_ops += 1;
            // Late for its phase (the agent exited, the session slept), but
            // the conversation it names is real: a wake must resume that
            // one, not the id the host first asked for (issue 19, seeds
            // 1095 and 1631: the chat's first turns were lost).
            if let (Some(started_chat), Outcome::Started { conversation_id, .. }) = (unanswered, &outcome) {
                let chat_record = session.record.chats.iter_mut().find(|c| c.resource == started_chat && c.resource == *chat);
                if let Some(c) = chat_record.filter(|c| c.conversation_id != *conversation_id) {
                    crate::mark!("late_start_names_conversation");
                    c.conversation_id = conversation_id.clone();
                    c.fresh = false;
                    self.store_put(session_uri);
                }
            }
            return;
        }
        // The phase without a wake's gathered turns (the arm reaches those
        // through the session): no copy of a whole history per answer.
        let phase = session.phase.shallow();
        match phase {
            Phase::Starting { conn, id } => match outcome {
                Outcome::Started { conversation_id, .. } => {
                    if let Some(c) = session.record.chats.iter_mut().find(|c| c.resource == *chat) {
                        c.conversation_id = conversation_id;
                        c.fresh = false;
                    }
                    self.set_phase(session_uri, Phase::Live);
                    self.touch(session_uri);
                    self.mark_activity(session_uri);
                    self.shared.reply(conn, id, serde_json::Value::Null);
                    self.shared.log(LogLevel::Info, "session.created", Some(session_uri.clone()), String::new());
                }
                Outcome::Failed { message } => {
                    self.forget_unborn(session_uri);
                    self.shared.reply_error(conn, id, crate::protocol::error::error(
                        crate::protocol::error::INTERNAL_ERROR,
                        format!("the backend would not start: {message}"),
                    ));
                    crate::mark!("create_refused_backend_failed");
                    self.shared.log(LogLevel::Warn, "session.create_failed", Some(session_uri.clone()), message);
                }
                Outcome::Ok | Outcome::Scanned { .. } | Outcome::Git(_) | Outcome::RegistryScanned { .. } => {
                    self.forget_unborn(session_uri);
                    self.shared.reply_error(conn, id, crate::protocol::error::error(crate::protocol::error::INTERNAL_ERROR, "the backend did not start the agent"));
                }
            },
            Phase::Waking(_) => {
                if let Outcome::Started { conversation_id, .. } = &outcome {
                    if let Some(c) = session.record.chats.iter_mut().find(|c| c.resource == *chat) {
                        c.conversation_id = conversation_id.clone();
                        c.fresh = false;
                    }
                }
                if let Phase::Waking(wake) = &mut session.phase {
                    match outcome {
                        Outcome::Started { history, .. } => {
                            wake.history.insert(chat.clone(), history);
                        }
                        Outcome::Failed { message } => {
                            wake.error.get_or_insert(message);
                        }
                        Outcome::Ok | Outcome::Scanned { .. } | Outcome::Git(_) | Outcome::RegistryScanned { .. } => {
                            wake.history.insert(chat.clone(), Vec::new());
                        }
                    }
                }
                if session.phase_ops.is_empty() {
                    self.finish_wake(session_uri);
                }
            }
            Phase::Live => match outcome {
                // A chat made in a live session: its agent's first start.
                Outcome::Started { conversation_id, .. } => {
                    if let Some(c) = session.record.chats.iter_mut().find(|c| c.resource == *chat) {
                        c.conversation_id = conversation_id;
                        c.fresh = false;
                    }
                    self.store_put(session_uri);
                    self.chat_start_answered(session_uri, chat, None);
                }
                Outcome::Failed { message } => {
                    crate::mark!("chat_start_failed");
                    self.chat_start_answered(session_uri, chat, Some(&message));
                    self.shared.log(LogLevel::Warn, "chat.start_failed", Some(session_uri.clone()), message);
                }
                Outcome::Ok | Outcome::Scanned { .. } | Outcome::Git(_) | Outcome::RegistryScanned { .. } => {
                    self.chat_start_answered(session_uri, chat, Some("the backend answered the start with something else"));
                }
            },
            // Not awaited: handled above.
            _ => {}
        }
    }

    /// Removes a session whose creation was refused: it never existed.
    fn forget_unborn(&mut self, session_uri: &Uri) {
        if let Some(s) = self.drop_session(session_uri) {
            self.shared.retired.insert(session_uri.clone());
            for chat in &s.record.chats {
                self.shared.chats.remove(&chat.resource);
                self.shared.retired.insert(chat.resource.clone());
            }
            for c in self.shared.conns.values_mut() {
                c.subscriptions.remove(session_uri);
                for chat in &s.record.chats {
                    c.subscriptions.remove(&chat.resource);
                }
            }
        }
    }

    /// The backend acknowledged (or refused) a turn. The first turn a
    /// backend takes announces a provisional session: `root/sessionAdded`
    /// then `session/ready` (Sessions page, "The life of a session").
    pub(crate) fn on_sent(&mut self, session_uri: &Uri, op: OpId, outcome: Outcome) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let Some((chat, turn_id)) = session.sends_in_flight.remove(&op) else { return };
        match outcome {
            Outcome::Failed { message } => self.fail_turn(session_uri, &chat, &turn_id, &message),
            _ => self.agent_took_turn(session_uri, &chat),
        }
    }

    pub(crate) fn on_backend_event(&mut self, chat: &Uri, event: BackendEvent) {
        let Some(session_uri) = self.shared.chats.get(chat).cloned() else {
            self.shared.stats.stale_events += 1;
            return;
        };
        let live = self.sessions.get(&session_uri).is_some_and(|s| s.phase == Phase::Live && s.resident.is_some());
        if !live {
            self.shared.stats.stale_events += 1;
            return;
        }
        match event {
            BackendEvent::Busy(busy) => {
                if let Some(s) = self.sessions.get_mut(&session_uri) {
                    if busy {
                        s.busy_chats.insert(chat.clone());
                    } else {
                        s.busy_chats.remove(chat);
                    }
                }
                self.mark_activity(&session_uri);
            }
            BackendEvent::Exited { message } => {
                let running = self
                    .sessions
                    .get(&session_uri)
                    .and_then(|s| s.resident.as_ref())
                    .and_then(|r| r.chats.get(chat))
                    .and_then(|c| c.active_turn.as_ref())
                    .map(|t| t.id.clone());
                if let Some(turn_id) = running {
                    self.fail_turn(&session_uri, chat, &turn_id, &format!("the agent exited: {message}"));
                }
                crate::mark!("agent_exited");
                if self.sessions.get(&session_uri).is_some_and(|s| s.can_resume) {
                    // The other chats' agents are closed below and the
                    // session sleeps, which it does with nothing running
                    // (Sessions page, "Sleep and wake"): their turns end too
                    // (one was left running on an asleep session: sim
                    // issue 18).
                    let others: Vec<(Uri, String)> = self
                        .sessions
                        .get(&session_uri)
                        .and_then(|s| s.resident.as_ref())
                        .map(|r| {
                            r.chats
                                .iter()
                                .filter(|(c, _)| *c != chat)
                                .filter_map(|(c, st)| st.active_turn.as_ref().map(|t| (c.clone(), t.id.clone())))
                                .collect()
                        })
                        .unwrap_or_default();
                    for (other, turn_id) in others {
                        self.fail_turn(&session_uri, &other, &turn_id, &format!("the session's agent exited: {message}"));
                    }
                }
                self.shared.log(LogLevel::Warn, "backend.exited", Some(session_uri.clone()), message);
                if !self.sessions.get(&session_uri).is_some_and(|s| s.can_resume) {
                    // A backend that cannot resume never sleeps.
                    self.in_session(&session_uri, |s, sh| s.agent_exited_for_good(sh, chat));
                    return;
                }
                // The agent is gone; the conversation is the backend's. The
                // session is asleep until something needs it.
                let provider = self.sessions.get(&session_uri).map(|s| s.record.provider.clone()).unwrap_or_default();
                let chats: Vec<Uri> = self.sessions.get(&session_uri).map(|s| s.record.chats.iter().map(|c| c.resource.clone()).collect()).unwrap_or_default();
                for other in chats.into_iter().filter(|c| c != chat) {
                    self.backend(Op::Fire, provider.clone(), other, BackendCmd::Close);
                }
                if let Some(s) = self.sessions.get_mut(&session_uri) {
                    s.busy_chats.clear();
                    s.sends_in_flight.clear();
                }
                // Ending the turn may already have let the agents go (a
                // failed creation, or an eviction once the turn ended).
                if self.sessions.get(&session_uri).is_some_and(|s| s.phase == Phase::Live) {
                    self.set_phase(&session_uri, Phase::Asleep);
                    self.archived_trees_go(&session_uri);
                }
            }
            BackendEvent::Wrote { paths } => {
                if let Some(s) = self.sessions.get_mut(&session_uri) {
                    s.count_chat_writes(&mut self.shared, chat, &paths);
                }
                self.on_wrote(&session_uri, paths);
            }
            BackendEvent::Action(action) => self.on_agent_action(&session_uri, chat, action),
        }
    }

    /// A chat action from the agent: it must name the running turn and be of
    /// a kind only a server sends; durations are the host's own.
    fn on_agent_action(&mut self, session_uri: &Uri, chat: &Uri, mut action: StateAction) {
        let active = self
            .sessions
            .get(session_uri)
            .and_then(|s| s.resident.as_ref())
            .and_then(|r| r.chats.get(chat))
            .and_then(|c| c.active_turn.as_ref())
            .map(|t| t.id.clone());
        let duration = self.turn_duration(session_uri, chat);
        use StateAction::*;
        // A turn that broke with an error the client may resume gets its
        // checkpoint when it ends again (Sessions page).
        let for_good = !matches!(&action, ChatError(a) if a.part.resumable == Some(true));
        let (turn_id, ends_turn) = match &mut action {
            ChatResponsePart(a) => (a.turn_id.clone(), false),
            ChatDelta(a) => (a.turn_id.clone(), false),
            ChatReasoning(a) => (a.turn_id.clone(), false),
            ChatUsage(a) => (a.turn_id.clone(), false),
            ChatToolCallStart(a) => (a.turn_id.clone(), false),
            ChatToolCallDelta(a) => (a.turn_id.clone(), false),
            ChatToolCallReady(a) => (a.turn_id.clone(), false),
            ChatToolCallComplete(a) => (a.turn_id.clone(), false),
            ChatActivityChanged(_) => (active.clone().unwrap_or_default(), false),
            ChatTurnComplete(a) => {
                a.duration = duration;
                (a.turn_id.clone(), true)
            }
            ChatError(a) => {
                a.duration = duration;
                (a.turn_id.clone(), true)
            }
            _ => {
                self.shared.stats.stale_events += 1;
                return self.shared.log(LogLevel::Warn, "backend.action_refused", Some(session_uri.clone()), "an agent sent an action only a client may send".to_owned());
            }
        };
        if active.as_deref() != Some(turn_id.as_str()) {
            self.shared.stats.stale_events += 1;
            return;
        }
        // A tool call declaring the paths it writes waits for the host's
        // word (workspace awareness, `host/awareness.rs`).
        let confirm = match &mut action {
            ChatToolCallReady(a) => self.vet_declared_write(session_uri, a).then(|| a.tool_call_id.clone()),
            _ => None,
        };
        if !self.emit(chat, action, None) {
            return;
        }
        self.agent_took_turn(session_uri, chat);
        if let Some(tool_call_id) = confirm {
            let provider = self.sessions.get(session_uri).map(|s| s.record.provider.clone()).unwrap_or_default();
            self.backend(Op::Fire, provider, chat.clone(), BackendCmd::ConfirmTool { turn_id: turn_id.clone(), tool_call_id, approved: true });
        }
        self.mark_activity(session_uri);
        if ends_turn {
            self.kept_turn_ended(session_uri, chat, &turn_id, None);
            self.end_turn_bookkeeping(session_uri, chat, for_good);
        } else {
            self.after_chat_change(session_uri, chat);
        }
    }
}
