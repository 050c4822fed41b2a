//! Per-chat change counts (Sessions page, "The state a session reports";
//! issue 9): the default chat carries the session's Session Changes; any
//! other chat the files its own tools were seen to write, across turns; a
//! chat that wrote nothing carries none. Each count is kept on the chat's
//! record (so it survives a restart), shown on the chat's entry of the
//! session's chat list (`session/chatUpdated`) and on the catalogue row.
//!
//! A session in a folder that is not a git repository has no trees to
//! diff: its own count is the files any of its chats' tools were seen to
//! write (kept on the default chat's record, which carries it).

use ahp_types::actions::{PartialChatSummary, SessionChatUpdatedAction, StateAction};
use ahp_types::state::ChangesSummary;
use ahp_types::Uri;

use super::Host;
use crate::awareness as rules;

/// Most files one chat's count remembers; writes past it are not counted.
pub const WRITTEN_MAX: usize = 4096;

/// Adds the files in `paths` (relative to `base`, cleaned) to `written`,
/// each once and at most [`WRITTEN_MAX`]; returns the count they make,
/// `{files}` with no line counts, or none when nothing was written.
fn note_written(written: &mut std::collections::BTreeSet<String>, base: Option<&str>, paths: &[String]) -> Option<ChangesSummary> {
    for path in paths.iter().filter_map(|p| rules::join(base, &rules::clean_text(p, rules::TEXT_MAX_CHARS))) {
        if written.len() >= WRITTEN_MAX {
            break;
        }
        written.insert(path);
    }
    let files = written.len() as i64;
    (files > 0).then_some(ChangesSummary { files: Some(files), additions: None, deletions: None })
}

impl Host {
    /// The agent of `chat` reports files it wrote: a chat other than the
    /// default one counts them (each file once, across turns).
    pub(crate) fn count_chat_writes(&mut self, session_uri: &Uri, chat: &Uri, paths: &[String]) {
        self.count_session_writes(session_uri, paths);
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        if session.record.default_chat == *chat {
            return;
        }
        let base = session.record.working_directories.first().and_then(|d| rules::uri_to_path(d));
        let Some(record) = session.record.chats.iter_mut().find(|c| c.resource == *chat) else { return };
        let changes = note_written(&mut record.written, base.as_deref(), paths);
        self.set_chat_changes(session_uri, chat, changes);
    }

    /// A session in no git repository (git said so on its first send)
    /// counts the files its tools wrote, each once: `{files}` with no line
    /// counts, as its row and default chat show.
    fn count_session_writes(&mut self, session_uri: &Uri, paths: &[String]) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let in_no_repo = session.record.git.as_ref().is_some_and(|g| g.repo_root.is_none());
        if !in_no_repo {
            return;
        }
        let base = session.record.working_directories.first().and_then(|d| rules::uri_to_path(d));
        let default_chat = session.record.default_chat.clone();
        let Some(record) = session.record.chats.iter_mut().find(|c| c.resource == default_chat) else { return };
        let changes = note_written(&mut record.written, base.as_deref(), paths);
        if session.record.changes == changes {
            return;
        }
        session.record.changes = changes;
        self.default_chat_follows_session(session_uri);
        self.summary_changed(session_uri);
        self.store_put(session_uri);
    }

    /// The session's Session Changes moved: its default chat carries them.
    pub(crate) fn default_chat_follows_session(&mut self, session_uri: &Uri) {
        let Some(session) = self.sessions.get(session_uri) else { return };
        let (chat, changes) = (session.record.default_chat.clone(), session.record.changes.clone());
        self.set_chat_changes(session_uri, &chat, changes);
    }

    /// Sets one chat's count; when it moved, the record is written, the
    /// session's chat list is told (`session/chatUpdated`, while the
    /// session's state is held) and so are root subscribers.
    fn set_chat_changes(&mut self, session_uri: &Uri, chat: &Uri, changes: Option<ChangesSummary>) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let Some(record) = session.record.chats.iter_mut().find(|c| c.resource == *chat) else { return };
        if record.changes == changes {
            return;
        }
        record.changes = changes.clone();
        let listed = session.resident.as_ref().is_some_and(|r| r.session.chats.iter().any(|c| c.resource == *chat));
        if listed {
            if let Some(changes) = changes {
                let update = PartialChatSummary {
                    resource: None,
                    title: None,
                    status: None,
                    activity: None,
                    modified_at: None,
                    changes: Some(changes),
                    origin: None,
                    movable: None,
                    interactivity: None,
                    working_directories: None,
                };
                let action = StateAction::SessionChatUpdated(SessionChatUpdatedAction { chat: chat.clone(), changes: update });
                self.emit(session_uri, action, None);
            }
        }
        self.summary_changed(session_uri);
        self.store_put(session_uri);
    }
}
