//! Change counts (Sessions page, "The state a session reports" and
//! "Per-turn checkpoints"; issue 9): a checkpoint's diff is the session's
//! Session Changes, which its default chat carries; any other chat carries
//! the files its own tools were seen to write, across turns; a
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

use crate::effect::{LogLevel, OpId};
use crate::git::GitResult;
use crate::shared::Shared;
use crate::input::Outcome;
use crate::session::Session;
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

impl Session {
    /// Checkpoint `op` answered (Sessions page, "Per-turn checkpoints"): its
    /// diff is the session's Session Changes, carried by its default chat
    /// and its row. Checkpoints of two chats' turns may be answered out of
    /// order: the counts are the newest checkpoint's, never an older one's
    /// answered late (the sim found a row's changes going back, issue 18).
    pub(crate) fn on_checkpoint(&mut self, sh: &mut Shared, op: OpId, outcome: Outcome) {
        self.work.git_ops.remove(&op);
        match outcome {
            Outcome::Git(GitResult::Checkpointed { .. }) if self.work.counted_checkpoint.is_some_and(|c| c > op) => {
                crate::mark!("checkpoint_answer_superseded");
            }
            Outcome::Git(GitResult::Checkpointed { changes }) => {
                self.work.counted_checkpoint = Some(op);
                let summary = ChangesSummary {
                    files: Some(changes.files as i64),
                    additions: Some(changes.additions as i64),
                    deletions: Some(changes.deletions as i64),
                };
                if self.record.changes.as_deref() == Some(&summary) {
                    self.default_chat_follows_session(sh);
                    self.store_put(sh);
                    return;
                }
                self.record.changes = Some(Box::new(summary));
                self.default_chat_follows_session(sh);
                self.summary_changed(sh);
                self.store_put(sh);
            }
            Outcome::Failed { message } => sh.log(LogLevel::Warn, "git.checkpoint_failed", Some(self.record.resource.clone()), message),
            _ => {}
        }
    }

    /// The agent of `chat` reports files it wrote: a chat other than the
    /// default one counts them (each file once, across turns).
    pub(crate) fn count_chat_writes(&mut self, sh: &mut Shared, chat: &Uri, paths: &[String]) {
        self.count_session_writes(sh, paths);
        let session = &mut *self;
        if session.record.is_default_chat(chat) {
            return;
        }
        let base = session.record.working_directories.first().and_then(|d| rules::uri_to_path(d));
        let Some(record) = session.record.chats.iter_mut().find(|c| c.resource == *chat) else { return };
        let changes = note_written(&mut record.written, base.as_deref(), paths);
        self.set_chat_changes(sh, chat, changes);
    }

    /// A session in no git repository (git said so on its first send)
    /// counts the files its tools wrote, each once: `{files}` with no line
    /// counts, as its row and default chat show.
    fn count_session_writes(&mut self, sh: &mut Shared, paths: &[String]) {
        let session = &mut *self;
        let in_no_repo = session.record.git.as_ref().is_some_and(|g| g.repo_root.is_none());
        if !in_no_repo {
            return;
        }
        let base = session.record.working_directories.first().and_then(|d| rules::uri_to_path(d));
        let default_chat = session.record.default_chat().into_owned();
        let Some(record) = session.record.chats.iter_mut().find(|c| c.resource == default_chat) else { return };
        let changes = note_written(&mut record.written, base.as_deref(), paths);
        if session.record.changes.as_deref() == changes.as_ref() {
            return;
        }
        session.record.changes = changes.map(Box::new);
        self.default_chat_follows_session(sh);
        self.summary_changed(sh);
        self.store_put(sh);
    }

    /// The session's Session Changes moved: its default chat carries them.
    pub(crate) fn default_chat_follows_session(&mut self, sh: &mut Shared) {
        let (chat, changes) = (self.record.default_chat().into_owned(), self.record.changes.as_deref().cloned());
        self.set_chat_changes(sh, &chat, changes);
    }

    /// Sets one chat's count; when it moved, the record is written, the
    /// session's chat list is told (`session/chatUpdated`, while the
    /// session's state is held) and so are root subscribers.
    fn set_chat_changes(&mut self, sh: &mut Shared, chat: &Uri, changes: Option<ChangesSummary>) {
        let session = &mut *self;
        let Some(record) = session.record.chats.iter_mut().find(|c| c.resource == *chat) else { return };
        if record.changes.as_deref() == changes.as_ref() {
            return;
        }
        record.changes = changes.clone().map(Box::new);
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
                let session_uri = self.record.resource.clone();
                self.emit(sh, &session_uri, action, None);
            }
        }
        self.summary_changed(sh);
        self.store_put(sh);
    }
}
