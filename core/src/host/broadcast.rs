//! `serverSeq`, fan-out and the replay buffer; keeping the session's chat
//! list, the catalogue row and the root's `activeSessions` in step with the
//! chats (docs/REFERENCE-NOTES.md, AHP 12: the host alone produces the
//! cross-channel mirrors).

use ahp::reducers::{apply_action_to_root, ReduceOutcome};
use ahp_types::actions::{
    ActionEnvelope, ActionOrigin, RootActiveSessionsChangedAction, SessionChatUpdatedAction, StateAction,
};
use ahp_types::notifications::{PartialSessionSummary, SessionSummaryChangedParams};
use ahp_types::actions::PartialChatSummary;
use ahp_types::{Uri, ROOT_RESOURCE_URI};

use super::Host;
use crate::effect::{ConnId, LogLevel, Outbound};
use crate::session::state::{chat_summary, ACTIVITY_MASK, ERROR, IDLE};
use crate::time::WallTime;

impl Host {
    /// Applies an accepted action to the authoritative state of `channel`
    /// with the protocol's own reducer, stamps the next `serverSeq`, keeps it
    /// for replay and sends it to every subscriber of the channel. Returns
    /// false (and sends nothing) when the reducer finds the action invalid.
    /// A session's channels go through the session ([`Session::emit`](crate::session::Session::emit)).
    pub(crate) fn emit(&mut self, channel: &Uri, action: StateAction, origin: Option<ActionOrigin>) -> bool {
        if channel == ROOT_RESOURCE_URI {
            match apply_action_to_root(&mut self.shared.root, &action) {
                ReduceOutcome::Invalid(e) => {
                    self.shared.log(LogLevel::Warn, "action.invalid", None, format!("not applied: {e}"));
                    return false;
                }
                ReduceOutcome::OutOfScope => {
                    self.shared.log(LogLevel::Warn, "action.out_of_scope", None, "action does not belong to its channel".to_owned());
                    return false;
                }
                _ => {}
            }
        } else if let Some(session) = self.session_of(channel).and_then(|uri| self.sessions.get_mut(&uri)) {
            return session.emit(&mut self.shared, channel, action, origin);
        }
        self.shared.fan_out(channel, action, origin);
        true
    }

    /// Sends a rejected client action back to the client that sent it,
    /// unapplied, with its reason (docs/REFERENCE-NOTES.md, AHP 5, step 4).
    pub(crate) fn reject(&mut self, conn: ConnId, channel: &Uri, action: StateAction, origin: Option<ActionOrigin>, reason: String) {
        self.shared.stats.rejections += 1;
        self.shared.server_seq += 1;
        let envelope = ActionEnvelope {
            channel: channel.clone(),
            action,
            server_seq: self.shared.server_seq,
            origin,
            rejection_reason: Some(reason.clone()),
        };
        self.shared.send(conn, Outbound::Action(Box::new(envelope)));
        crate::mark!("action_rejected");
        self.shared.log(LogLevel::Warn, "action.rejected", self.session_of(channel), reason);
    }

    /// After a chat changed: mirror its summary into the session's chat
    /// list (`session/chatUpdated`), move the session's `modifiedAt`
    /// forward only, keep the record in step, and tell root subscribers
    /// what moved.
    pub(crate) fn after_chat_change(&mut self, session_uri: &Uri, chat_uri: &Uri) {
        // Say what the chat waits on (or stop saying it) before mirroring it.
        let derived = self
            .sessions
            .get(session_uri)
            .and_then(|s| s.resident.as_ref())
            .and_then(|r| r.chats.get(chat_uri))
            .and_then(crate::session::activity::derived);
        if let Some(activity) = derived {
            let action = StateAction::ChatActivityChanged(ahp_types::actions::ChatActivityChangedAction { activity });
            self.emit(chat_uri, action, None);
        }
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let Some(resident) = session.resident.as_ref() else { return };
        let Some(chat) = resident.chats.get(chat_uri) else { return };
        let fresh = chat_summary(chat);
        let listed = resident.session.chats.iter().find(|c| c.resource == *chat_uri).cloned();
        // Forward-only modifiedAt (Sessions page: "it moves forward only").
        let to = WallTime::parse_iso(&fresh.modified_at).unwrap_or(session.modified_at);
        self.advance_modified_at(session_uri, to);
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let Some(resident) = session.resident.as_ref() else { return };
        let Some(chat) = resident.chats.get(chat_uri) else { return };
        let mut fresh = chat_summary(chat);
        // The chat's change count is the host's own (`host/chat_changes.rs`):
        // its record says it, whatever the chat's state held at its start.
        fresh.changes = session.chat_changes(chat_uri).cloned();
        if let Some(rec) = session.record.chats.iter_mut().find(|c| c.resource == *chat_uri) {
            // The record keeps where a chat rests: Error or Idle.
            rec.status = fresh.status & !ACTIVITY_MASK
                | match fresh.status & ACTIVITY_MASK {
                    ERROR => ERROR,
                    _ => IDLE,
                };
            rec.modified_at = fresh.modified_at.clone();
            rec.title = fresh.title.clone();
        }
        let changes = match listed {
            Some(old) => PartialChatSummary {
                resource: None,
                title: (old.title != fresh.title).then(|| fresh.title.clone()),
                status: (old.status != fresh.status).then_some(fresh.status),
                activity: if old.activity != fresh.activity { fresh.activity.clone() } else { None },
                modified_at: (old.modified_at != fresh.modified_at).then(|| fresh.modified_at.clone()),
                changes: if old.changes != fresh.changes { fresh.changes.clone() } else { None },
                origin: None,
                movable: None,
                interactivity: None,
                working_directories: None,
            },
            None => return,
        };
        let moved = changes.title.is_some()
            || changes.status.is_some()
            || changes.activity.is_some()
            || changes.modified_at.is_some()
            || changes.changes.is_some();
        if moved {
            let action = StateAction::SessionChatUpdated(SessionChatUpdatedAction { chat: chat_uri.clone(), changes });
            self.emit(session_uri, action, None);
        }
        self.summary_changed(session_uri);
    }

    /// Tells root subscribers which fields of an announced session's row
    /// moved since they were last told (`root/sessionSummaryChanged`).
    pub(crate) fn summary_changed(&mut self, session_uri: &Uri) {
        self.mirror_aggregate(session_uri);
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        if !session.is_announced() {
            return;
        }
        let fresh = session.summary();
        let Some(old) = session.replace_sent_row(fresh.clone()) else { return };
        if !self.shown_to_clients(session_uri) {
            return;
        }
        let changes = PartialSessionSummary {
            provider: None,
            title: (old.title != fresh.title).then(|| fresh.title.clone()),
            status: (old.status != fresh.status).then_some(fresh.status),
            // An activity that ended is sent as "" (docs/DECISIONS.md, 7):
            // in ahp-types 1.0.0 an omitted field is unchanged and a null
            // reads as omitted, so neither would clear it in any client.
            activity: if old.activity != fresh.activity { Some(fresh.activity.clone().unwrap_or_default()) } else { None },
            origin: None,
            project: None,
            working_directories: if old.working_directories != fresh.working_directories {
                fresh.working_directories.clone()
            } else {
                None
            },
            annotations: None,
            resource: None,
            created_at: None,
            modified_at: (old.modified_at != fresh.modified_at).then(|| fresh.modified_at.clone()),
            changes: if old.changes != fresh.changes { fresh.changes.clone() } else { None },
            meta: None,
            chats: if old.chats != fresh.chats { fresh.chats.clone() } else { None },
            default_chat: None,
        };
        let moved = changes.title.is_some()
            || changes.status.is_some()
            || changes.activity.is_some()
            || changes.working_directories.is_some()
            || changes.modified_at.is_some()
            || changes.changes.is_some()
            || changes.chats.is_some();
        if moved {
            let params = SessionSummaryChangedParams {
                channel: ROOT_RESOURCE_URI.to_owned(),
                session: session_uri.clone(),
                changes,
            };
            self.shared.notify_root("root/sessionSummaryChanged", serde_json::to_value(params).unwrap_or_default());
        }
    }

    /// Carries the session's aggregate status and activity on its own
    /// state's `_meta` (`ahpd.status`, `ahpd.activity`) through
    /// `session/metaChanged`: ahp-types 1.0.0 has no action that sets a
    /// session state's activity bits, and the page asks that "the session's
    /// row and its state both carry the aggregate" (docs/DECISIONS.md, 1).
    fn mirror_aggregate(&mut self, session_uri: &Uri) {
        let Some(session) = self.sessions.get(session_uri) else { return };
        let Some(resident) = session.resident.as_ref() else { return };
        let (status, activity) = session.status();
        let mut meta = resident.session.meta.clone().unwrap_or_default();
        let status_value = serde_json::Value::from(status);
        let activity_value = activity.map(serde_json::Value::String).unwrap_or(serde_json::Value::Null);
        let external_now = meta.get("vscode.external") == Some(&serde_json::Value::Bool(true));
        if meta.get("ahpd.status") == Some(&status_value)
            && meta.get("ahpd.activity").unwrap_or(&serde_json::Value::Null) == &activity_value
            && external_now == session.record.external
        {
            return;
        }
        meta.insert("ahpd.status".to_owned(), status_value);
        meta.insert("ahpd.activity".to_owned(), activity_value);
        if session.record.external {
            meta.insert("vscode.external".to_owned(), serde_json::Value::Bool(true));
        } else {
            meta.remove("vscode.external");
        }
        let action = StateAction::SessionMetaChanged(ahp_types::actions::SessionMetaChangedAction { meta: Some(meta) });
        self.emit(session_uri, action, None);
    }

    /// Announces a session: `root/sessionAdded` with its row.
    pub(crate) fn announce(&mut self, session_uri: &Uri) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        if session.is_announced() {
            return;
        }
        let modified = session.modified_at.0;
        let external = session.record.external;
        let summary = session.summary();
        session.mark_announced(summary.clone());
        let Some(slot) = self.sessions.slot(session_uri) else { return };
        self.shared.catalogue.insert(modified, session_uri, slot, external);
        if !self.shown_to_clients(session_uri) {
            crate::mark!("announce_hidden_external");
            return;
        }
        let params = ahp_types::notifications::SessionAddedParams {
            channel: ROOT_RESOURCE_URI.to_owned(),
            summary,
        };
        self.shared.notify_root("root/sessionAdded", serde_json::to_value(params).unwrap_or_default());
        crate::mark!("announced_at_first_turn");
        self.shared.log(LogLevel::Info, "session.announced", Some(session_uri.clone()), String::new());
    }

    /// Recounts the sessions running a turn and says so on root when the
    /// number moved (Sessions page: "that number counts the sessions
    /// running a turn").
    pub(crate) fn recount_active(&mut self) {
        let count = self.held_sessions().filter(|(_, s)| s.has_active_turn()).count() as i64;
        if self.shared.root.active_sessions != Some(count) {
            let action = StateAction::RootActiveSessionsChanged(RootActiveSessionsChangedAction { active_sessions: count });
            self.emit(&ROOT_RESOURCE_URI.to_owned(), action, None);
        }
    }
}
