//! `serverSeq`, fan-out and the replay buffer; keeping the session's chat
//! list, the catalogue row and the root's `activeSessions` in step with the
//! chats (docs/REFERENCE-NOTES.md, AHP 12: the host alone produces the
//! cross-channel mirrors).

use ahp::reducers::{apply_action_to_root, ReduceOutcome};
use ahp_types::actions::{
    ActionEnvelope, ActionOrigin, RootActiveSessionsChangedAction, StateAction,
};
use ahp_types::{Uri, ROOT_RESOURCE_URI};

use super::Host;
use crate::effect::{ConnId, LogLevel, Outbound};

impl Host {
    /// After a chat changed ([`Session::after_chat_change`](crate::session::Session::after_chat_change)).
    pub(crate) fn after_chat_change(&mut self, session_uri: &Uri, chat_uri: &Uri) {
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.after_chat_change(&mut self.shared, chat_uri);
        }
    }

    /// Tells root subscribers what moved in an announced session's row
    /// ([`Session::summary_changed`](crate::session::Session::summary_changed)).
    pub(crate) fn summary_changed(&mut self, session_uri: &Uri) {
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.summary_changed(&mut self.shared);
        }
    }

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
