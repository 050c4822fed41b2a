//! Client-dispatched actions (`dispatchAction`), write-ahead
//! (docs/REFERENCE-NOTES.md, AHP 5; docs/DECISIONS.md, 2): validate against the
//! current state, make what the host stores durable, then apply with the
//! protocol's reducer, stamp `serverSeq` and echo with the client's origin,
//! or echo unapplied with a `rejectionReason`.

use ahp_types::actions::{ActionOrigin, StateAction};
use ahp_types::commands::DispatchActionParams;
use ahp_types::{Uri, ROOT_RESOURCE_URI};
use serde_json::Value;

use crate::protocol::params as parse;
use super::Host;
use crate::effect::{ConnId, LogLevel, OpId};
use crate::input::Outcome;
use crate::session::actions::{ActionNext, ActionRules, Admission};
use crate::session::{ParkedWork, Queued, QueuedAction, Waiter};

/// How the host treats one client-dispatchable action type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Changes the host's own durable record: written before it is applied.
    Durable,
    /// Applied at once; nothing of it is stored.
    Volatile,
}

/// The client-dispatchable actions this host implements, and how. Anything
/// else a client sends is rejected unapplied.
fn kind_of(action: &StateAction) -> Option<Kind> {
    use StateAction::*;
    match action {
        SessionTitleChanged(_) | SessionIsReadChanged(_) | SessionIsArchivedChanged(_) | ChatTurnStarted(_) => {
            Some(Kind::Durable)
        }
        SessionWorkingDirectorySet(_) | SessionWorkingDirectoryRemoved(_) | SessionWorkingDirectoryReplaced(_) => Some(Kind::Durable),
        // A draft is written ahead like a title: kept across sleep,
        // eviction and restart, and taken without a wake.
        ChatDraftChanged(_) => Some(Kind::Durable),
        ChatTurnCancelled(_) | ChatToolCallConfirmed(_) => Some(Kind::Volatile),
        _ => None,
    }
}

/// The grant a client-dispatched action needs (Sessions page, "Grants").
fn operation_of(action: &StateAction) -> Option<crate::grants::Operation> {
    use crate::grants::Operation as Op;
    use StateAction::*;
    Some(match action {
        SessionTitleChanged(_) => Op::SessionRename,
        SessionIsReadChanged(_) | SessionIsArchivedChanged(_) | ChatIsReadChanged(_) | ChatIsArchivedChanged(_) => Op::SessionMark,
        SessionConfigChanged(_) => Op::SessionConfigure,
        SessionWorkingDirectorySet(_) | SessionWorkingDirectoryRemoved(_) | SessionWorkingDirectoryReplaced(_)
        | ChatWorkingDirectorySet(_) | ChatWorkingDirectoryRemoved(_) => Op::SessionFolders,
        ChatTurnStarted(_) | ChatPendingMessageSet(_) | ChatPendingMessageRemoved(_) | ChatQueuedMessagesReordered(_)
        | ChatTurnResume(_) => Op::ChatSend,
        ChatTurnCancelled(_) => Op::ChatCancel,
        ChatToolCallConfirmed(_) | ChatToolCallResultConfirmed(_) | ChatToolCallComplete(_) | ChatToolCallContentChanged(_) => Op::ChatTool,
        ChatInputAnswerChanged(_) | ChatInputCompleted(_) => Op::ChatAnswer,
        ChatDraftChanged(_) => Op::ChatDraft,
        ChatTruncated(_) => Op::ChatTruncate,
        _ => return None,
    })
}

impl Host {
    pub(crate) fn on_dispatch_action(&mut self, conn: ConnId, params: Value) {
        let params: DispatchActionParams = match parse(params) {
            Ok(p) => p,
            Err(e) => {
                return self.shared.log(LogLevel::Warn, "action.undecodable", None, e.message);
            }
        };
        let channel = params.channel;
        let origin = self.shared.origin_of(conn, params.client_seq);
        if channel == ROOT_RESOURCE_URI {
            return self.on_root_action(conn, channel, params.action, origin);
        }
        // The grant first, so that a caller without it is answered the
        // same whether the channel exists or not (an action no client may
        // send needs the grant to read the session, as knowing of the
        // channel does); then an action for a channel that does not exist is
        // dropped silently.
        let op = operation_of(&params.action).unwrap_or(crate::grants::Operation::SessionState);
        if let Err(e) = self.shared.authorize(conn, op) {
            return self.reject(conn, &channel, params.action, origin, e.message);
        }
        let Some(session_uri) = self.session_of(&channel) else { return };
        if let StateAction::SessionConfigChanged(change) = &params.action {
            // Every key of the table is sessionMutable: false, and so is
            // every other: no backend declares one mutable.
            let change: serde_json::Map<String, Value> = change.config.clone().into_iter().collect();
            let reason = crate::session_config::refused_change(&change)
                .unwrap_or_else(|| "this config change is not accepted".to_owned());
            return self.reject(conn, &channel, params.action, origin, reason);
        }
        let Some(kind) = kind_of(&params.action) else {
            // A known type whose fields do not read lands in the protocol's
            // catch-all variant: say that, not that the type is refused.
            let reason = match &params.action {
                StateAction::Unknown(raw) => match raw.get("type").and_then(Value::as_str) {
                    Some(t) => format!(
                        "{} is not an action this host takes from clients, or a required field of it is missing or of the wrong type",
                        crate::ids::printable(t)
                    ),
                    None => "an action needs a type".to_owned(),
                },
                _ => "this action type is not accepted from clients".to_owned(),
            };
            return self.reject(conn, &channel, params.action, origin, reason);
        };
        let _ = kind;
        let queued = QueuedAction { conn, channel, client_seq: params.client_seq, action: params.action };
        let Some(session) = self.sessions.get_mut(&session_uri) else { return };
        if session.parked.is_some() || !session.inbox.is_empty() {
            session.inbox.push_back(Queued::Action(queued));
            return;
        }
        self.process_action(&session_uri, queued);
    }

    /// A client action on the root channel: only `root/configChanged` of
    /// `showExternalSessions`.
    fn on_root_action(&mut self, conn: ConnId, channel: Uri, action: StateAction, origin: Option<ActionOrigin>) {
        let StateAction::RootConfigChanged(change) = &action else {
            return self.reject(conn, &channel, action, origin, "this root action is not accepted from clients".to_owned());
        };
        if let Err(e) = self.shared.authorize(conn, crate::grants::Operation::SessionConfigure) {
            return self.reject(conn, &channel, action, origin, e.message);
        }
        if let Err(reason) = self.change_root_config(change) {
            return self.reject(conn, &channel, action, origin, reason);
        }
        let before = self.shared.external_filter();
        if self.emit(&channel, action, origin) {
            self.reconcile_external(before);
        }
    }

    /// Validates one action against the session's current state and either
    /// rejects it, parks it behind its store write, queues it behind a wake,
    /// or applies it.
    pub(crate) fn process_action(&mut self, session_uri: &Uri, q: QueuedAction) {
        let origin = self.shared.origin_of(q.conn, q.client_seq);
        let Some(session) = self.sessions.get(session_uri) else { return };
        match session.admit_action(&q.action) {
            Admission::Refused(reason) => return self.reject(q.conn, &q.channel, q.action, origin, reason.to_owned()),
            Admission::AfterWake => {
                if let Some(s) = self.sessions.get_mut(session_uri) {
                    s.waiters.push(Waiter::Action(q));
                }
                return self.wake(session_uri);
            }
            Admission::Now => {}
        }
        let checked = {
            let trusted = |folder: &Uri| self.trusted(std::slice::from_ref(folder));
            let rules = ActionRules {
                takes_peers: self.shared.agent_takes_peers(&session.record.provider),
                stopping: self.stopping(),
                message_text_max_bytes: self.shared.config.limits.message_text_max_bytes,
                trusted: &trusted,
            };
            session.check_client_action(&q, &rules)
        };
        if let Err(reason) = checked {
            return self.reject(q.conn, &q.channel, q.action, origin, reason);
        }
        if matches!(q.action, StateAction::ChatDraftChanged(_)) && self.sessions.get(session_uri).is_some_and(|s| s.resident.is_none()) {
            crate::mark!("draft_kept_without_wake");
        }
        match kind_of(&q.action) {
            Some(Kind::Durable) => {
                // Write the record as it will be once the action applies;
                // apply and echo only when that write is durable.
                let sender = self.shared.sender_of(q.conn);
                self.in_session(session_uri, |s, sh| s.park(sh, ParkedWork::Action(q), sender));
            }
            _ => self.apply_client_action(session_uri, q),
        }
    }

    /// A record write finished: the write a parked action or command
    /// waits for goes on to [`Host::on_parked_write`]; any other failed
    /// write is logged (the next write carries the record whole).
    pub(crate) fn on_record_written(&mut self, session_uri: &Uri, op: OpId, outcome: Outcome) {
        let failure = match outcome {
            Outcome::Failed { message } => Some(message),
            _ => None,
        };
        let parked = self.sessions.get(session_uri).and_then(|s| s.parked.as_ref()).is_some_and(|p| p.op == op);
        if parked {
            self.on_parked_write(session_uri, failure);
        } else if let Some(message) = failure {
            crate::mark!("store_write_failed");
            self.shared.log(LogLevel::Warn, "store.write_failed", Some(session_uri.clone()), message);
        }
    }

    /// A parked action's store write finished: apply it (or reject it when
    /// the write failed), then take the next queued action.
    pub(crate) fn on_parked_write(&mut self, session_uri: &Uri, failure: Option<String>) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let Some(parked) = session.parked.take() else { return };
        match (parked.work, failure) {
            (ParkedWork::Action(q), None) => {
                let client_id = self.shared.sender_of(q.conn);
                if let Some(session) = self.sessions.get_mut(session_uri) {
                    session.write_ahead(&q, client_id);
                }
                self.apply_client_action(session_uri, q);
            }
            (ParkedWork::Action(q), Some(message)) => {
                let origin = self.shared.origin_of(q.conn, q.client_seq);
                self.reject(q.conn, &q.channel, q.action, origin, format!("not saved: the session store failed: {message}"));
            }
            (ParkedWork::CreateChat { conn, id, chat, initial_message }, failure) => {
                self.finish_create_chat(session_uri, conn, id, *chat, initial_message.map(|m| *m), failure)
            }
            (ParkedWork::DisposeChat { conn, id, chat }, failure) => self.finish_dispose_chat(session_uri, conn, id, chat, failure),
        }
        if self.sessions.get_mut(session_uri).is_some_and(|s| std::mem::take(&mut s.put_owed)) {
            self.store_put(session_uri);
        }
        self.drain_inbox(session_uri);
    }

    /// Takes queued actions in order until one parks again.
    pub(crate) fn drain_inbox(&mut self, session_uri: &Uri) {
        loop {
            let Some(session) = self.sessions.get_mut(session_uri) else { return };
            if session.parked.is_some() {
                return;
            }
            let Some(next) = session.inbox.pop_front() else { return };
            match next {
                Queued::Action(q) => self.process_action(session_uri, q),
                Queued::Command { conn, id, command } => {
                    if self.may_resume(conn, id) {
                        // It is next in order: run it as though nothing
                        // waited behind it, or it would queue itself again
                        // behind the rest (out of order, and for ever when
                        // only commands remain).
                        let behind = self.sessions.get_mut(session_uri).map(|s| std::mem::take(&mut s.inbox)).unwrap_or_default();
                        self.run_queued_command(conn, id, command);
                        if let Some(s) = self.sessions.get_mut(session_uri) {
                            let added = std::mem::replace(&mut s.inbox, behind);
                            s.inbox.extend(added);
                        }
                    }
                }
            }
        }
    }

    /// Applies a validated (and, if durable, saved) action: reducer,
    /// `serverSeq`, echo, then its side effect on the backend.
    fn apply_client_action(&mut self, session_uri: &Uri, q: QueuedAction) {
        let origin = self.shared.origin_of(q.conn, q.client_seq);
        match q.action {
            action if crate::folders::is_folder_action(&action) => {
                // The record already holds the new list (written ahead).
                // A new process root is the side effect, taken before the
                // broadcast: the agent is let go, so its next start (the
                // next turn wakes it) runs in the new root with the
                // conversation resumed.
                let root_now = self.sessions.get(session_uri).and_then(|s| s.record.working_directories.first().cloned());
                let root_shown = self
                    .sessions
                    .get(session_uri)
                    .and_then(|s| s.resident.as_ref())
                    .and_then(|r| r.session.working_directories.as_ref())
                    .and_then(|l| l.first().cloned());
                if root_now != root_shown {
                    self.let_agents_go(session_uri);
                    crate::mark!("root_replaced_agent_restarts");
                    self.shared.log(LogLevel::Info, "session.root_replaced", Some(session_uri.clone()), format!(
                        "the agent starts again in {}", crate::ids::printable(root_now.as_deref().unwrap_or(""))
                    ));
                }
                self.emit(&q.channel, action, origin);
                self.summary_changed(session_uri);
            }
            action => {
                let next = self.in_session(session_uri, |s, sh| s.apply_client_action(sh, &q.channel, action, origin)).flatten();
                match next {
                    None => {}
                    Some(ActionNext::TurnStarted { turn_id, message }) => {
                        self.recount_active();
                        self.send_turn(session_uri, q.channel, turn_id, *message);
                    }
                    Some(ActionNext::TurnCancelled) => self.end_turn_bookkeeping(session_uri, &q.channel, false),
                    // Before the residency check: a live session archived now
                    // lets its agents go there, which takes its trees then.
                    Some(ActionNext::Archived(archived)) => self.trees_follow_archive(session_uri, archived),
                }
            }
        }
    }
}
