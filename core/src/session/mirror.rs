//! The cross-channel mirrors a session keeps (docs/REFERENCE-NOTES.md, AHP
//! 12: the host alone produces them): a chat's summary on the session's
//! chat list (`session/chatUpdated`), the aggregate status and activity on
//! the session state's `_meta`, and the session's catalogue row on root
//! (`root/sessionSummaryChanged`), each sent only when something in it
//! moved; and an external session adopted by a person's turn.

use ahp_types::actions::{PartialChatSummary, SessionChatUpdatedAction, StateAction};
use ahp_types::notifications::{PartialSessionSummary, SessionSummaryChangedParams};
use ahp_types::{Uri, ROOT_RESOURCE_URI};

use crate::shared::Shared;
use crate::session::state::{chat_summary, ACTIVITY_MASK, ERROR, IDLE};
use crate::session::table::Place;
use crate::session::Session;
use crate::time::WallTime;

impl Session {
    /// Announces the session, once (Sessions page, "Provisional sessions":
    /// listed from its first turn): its row goes into the catalogue at
    /// `place` and, when clients are shown it, to root subscribers as
    /// `root/sessionAdded`. Nothing for a session already announced.
    pub(crate) fn announce(&mut self, sh: &mut Shared, place: &Place) {
        if self.is_announced() {
            return;
        }
        let summary = self.summary();
        self.mark_announced(summary.clone());
        sh.catalogue.insert(self.modified_at.0, place.uri.clone(), place.slot, self.record.external);
        if !sh.shows(&self.record, self.modified_at) {
            crate::mark!("announce_hidden_external");
            return;
        }
        let params = ahp_types::notifications::SessionAddedParams { channel: ROOT_RESOURCE_URI.to_owned(), summary };
        sh.notify_root("root/sessionAdded", serde_json::to_value(params).unwrap_or_default());
        crate::mark!("announced_at_first_turn");
        sh.log(crate::effect::LogLevel::Info, "session.announced", Some(self.record.resource.clone()), String::new());
    }

    /// After chat `chat_uri` changed: say what it waits on (or stop saying
    /// it), mirror its summary into the session's chat list, move the
    /// session's `modifiedAt` forward only, keep the record in step, and
    /// tell root subscribers what moved.
    pub(crate) fn after_chat_change(&mut self, sh: &mut Shared, chat_uri: &Uri) {
        let derived = self.resident.as_ref().and_then(|r| r.chats.get(chat_uri)).and_then(crate::session::activity::derived);
        if let Some(activity) = derived {
            let action = StateAction::ChatActivityChanged(ahp_types::actions::ChatActivityChangedAction { activity });
            self.emit(sh, chat_uri, action, None);
        }
        let Some(resident) = self.resident.as_ref() else { return };
        let Some(chat) = resident.chats.get(chat_uri) else { return };
        let fresh = chat_summary(chat);
        let listed = resident.session.chats.iter().find(|c| c.resource == *chat_uri).cloned();
        // Forward-only modifiedAt (Sessions page: "it moves forward only").
        let to = WallTime::parse_iso(&fresh.modified_at).unwrap_or(self.modified_at);
        self.advance_modified(sh, to);
        let Some(resident) = self.resident.as_ref() else { return };
        let Some(chat) = resident.chats.get(chat_uri) else { return };
        let mut fresh = chat_summary(chat);
        // The chat's change count is the host's own (`session/changes.rs`):
        // its record says it, whatever the chat's state held at its start.
        fresh.changes = self.chat_changes(chat_uri).cloned();
        if let Some(rec) = self.record.chats.iter_mut().find(|c| c.resource == *chat_uri) {
            // The record keeps where a chat rests: Error or Idle.
            rec.status = fresh.status & !ACTIVITY_MASK
                | match fresh.status & ACTIVITY_MASK {
                    ERROR => ERROR,
                    _ => IDLE,
                };
            rec.modified_at = fresh.modified_at.as_str().into();
            rec.title = fresh.title.as_str().into();
        }
        let Some(old) = listed else { return };
        let changes = PartialChatSummary {
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
        };
        let moved = changes.title.is_some()
            || changes.status.is_some()
            || changes.activity.is_some()
            || changes.modified_at.is_some()
            || changes.changes.is_some();
        if moved {
            let action = StateAction::SessionChatUpdated(SessionChatUpdatedAction { chat: chat_uri.clone(), changes });
            let session_uri = self.record.resource.clone();
            self.emit(sh, &session_uri, action, None);
        }
        self.summary_changed(sh);
    }

    /// Tells root subscribers which fields of an announced session's row
    /// moved since they were last told (`root/sessionSummaryChanged`), after
    /// carrying the aggregate on the session's own state.
    pub(crate) fn summary_changed(&mut self, sh: &mut Shared) {
        self.mirror_aggregate(sh);
        if !self.is_announced() {
            return;
        }
        let fresh = self.summary();
        let Some(old) = self.replace_sent_row(fresh.clone()) else { return };
        if !sh.shows(&self.record, self.modified_at) {
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
            let params = SessionSummaryChangedParams { channel: ROOT_RESOURCE_URI.to_owned(), session: self.record.resource.clone(), changes };
            sh.notify_root("root/sessionSummaryChanged", serde_json::to_value(params).unwrap_or_default());
        }
    }

    /// Carries the session's aggregate status and activity on its own
    /// state's `_meta` (`ahpd.status`, `ahpd.activity`) through
    /// `session/metaChanged`: ahp-types 1.0.0 has no action that sets a
    /// session state's activity bits, and the page asks that "the session's
    /// row and its state both carry the aggregate" (docs/DECISIONS.md, 1).
    fn mirror_aggregate(&mut self, sh: &mut Shared) {
        let Some(resident) = self.resident.as_ref() else { return };
        let (status, activity) = self.status();
        let status_value = serde_json::Value::from(status);
        let activity_value = activity.map(serde_json::Value::String).unwrap_or(serde_json::Value::Null);
        // Compared in place first: most calls change nothing, and the
        // `_meta` (awareness peers included) is copied only when it moves
        // (issue 21: this ran on every chat change).
        let current = resident.session.meta.as_ref();
        let external_now = current.and_then(|m| m.get("vscode.external")) == Some(&serde_json::Value::Bool(true));
        if current.and_then(|m| m.get("ahpd.status")) == Some(&status_value)
            && current.and_then(|m| m.get("ahpd.activity")).unwrap_or(&serde_json::Value::Null) == &activity_value
            && external_now == self.record.external
        {
            return;
        }
        let mut meta = current.cloned().unwrap_or_default();
        // The awareness events the last change brought are not brought
        // again: each rides on one `session/metaChanged` (docs/AWARENESS.md;
        // issue 21: re-sending them with every status change filled the
        // replay buffer).
        if let Some(events) = meta.get_mut(crate::awareness::EVENTS_META_KEY) {
            *events = serde_json::Value::Object(serde_json::Map::new());
        }
        meta.insert("ahpd.status".to_owned(), status_value);
        meta.insert("ahpd.activity".to_owned(), activity_value);
        if self.record.external {
            meta.insert("vscode.external".to_owned(), serde_json::Value::Bool(true));
        } else {
            meta.remove("vscode.external");
        }
        let action = StateAction::SessionMetaChanged(ahp_types::actions::SessionMetaChangedAction { meta: Some(meta) });
        let session_uri = self.record.resource.clone();
        self.emit(sh, &session_uri, action, None);
    }

    /// A person's turn went out in this external session: it is adopted
    /// (the mark goes, every mode lists it) and clients that were not shown
    /// it are told `root/sessionAdded` (Sessions page, "External
    /// sessions").
    pub(crate) fn adopt(&mut self, sh: &mut Shared) {
        if !self.record.external {
            return;
        }
        let was_shown = sh.shows(&self.record, self.modified_at);
        self.record.external = false;
        let modified = self.modified_at.0;
        let summary = self.summary();
        self.replace_sent_row(summary.clone());
        self.store_put(sh);
        sh.catalogue.adopted(modified, &self.record.resource);
        if !was_shown {
            let params = ahp_types::notifications::SessionAddedParams { channel: ROOT_RESOURCE_URI.to_owned(), summary };
            sh.notify_root("root/sessionAdded", serde_json::to_value(params).unwrap_or_default());
        } else {
            self.summary_changed(sh);
        }
        crate::mark!("external_adopted_by_person_turn");
        sh.log(crate::effect::LogLevel::Info, "session.adopted", Some(self.record.resource.clone()), String::new());
    }
}

impl Session {
    /// The `_meta` value listing this session's waiting wakes (`None`
    /// when it has none).
    pub fn wakes_meta(&self) -> Option<serde_json::Value> {
        super::state::wakes_value(&self.record)
    }

    /// Says what the host tools keep on the session on its state's `_meta`
    /// through `session/metaChanged` when it moved (a held state only; a
    /// state made later reads it from the record): its waiting wakes
    /// (`ahpd.wakes`), its parent (`ahpd.parent`), its children
    /// (`ahpd.children`).
    pub(crate) fn expose_tool_meta(&mut self, sh: &mut crate::shared::Shared) {
        let Some(resident) = self.resident.as_deref() else { return };
        let fresh = [
            (crate::shared::WAKES_META_KEY, self.wakes_meta()),
            (crate::shared::PARENT_META_KEY, super::state::parent_value(&self.record)),
            (crate::shared::CHILDREN_META_KEY, super::state::children_value(&self.record)),
        ];
        let current = resident.session.meta.as_ref();
        if fresh.iter().all(|(k, v)| current.and_then(|m| m.get(*k)) == v.as_ref()) {
            return;
        }
        let mut meta = resident.session.meta.clone().unwrap_or_default();
        for (key, value) in fresh {
            match value {
                Some(v) => meta.insert(key.to_owned(), v),
                None => meta.remove(key),
            };
        }
        let uri = &self.record.resource.clone();
        let action = ahp_types::actions::StateAction::SessionMetaChanged(ahp_types::actions::SessionMetaChangedAction { meta: Some(meta) });
        self.emit(sh, &uri, action, None);
    }
}
