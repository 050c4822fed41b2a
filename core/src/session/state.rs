//! Building protocol shapes from what the host holds: the session and chat
//! states of a resident session, and the catalogue row (summary) of any
//! session (Sessions page, "The state a session reports").

use ahp_types::state::{
    ChatState, ChatSummary, Message, MessageKind, MessageOrigin, SessionChatSummary, SessionLifecycle, SessionState,
    SessionStatus, SessionSummary, Turn, TurnState,
};

use super::Session;
use crate::record::{ChatRecord, SessionRecord};

pub use crate::record::status::{ACTIVITY_MASK, ERROR, IDLE, INPUT_NEEDED, IN_PROGRESS, IS_ARCHIVED, IS_READ};

/// The session channel's state for `record`, with protocol lifecycle
/// `lifecycle` and its chats' summaries.
pub fn session_state(record: &SessionRecord, lifecycle: SessionLifecycle, chats: Vec<ChatSummary>) -> SessionState {
    SessionState {
        provider: record.provider.to_string(),
        title: record.title.to_string(),
        status: flags(record) | SessionStatus::Idle.0,
        activity: None,
        origin: record.tools.as_ref().and_then(|t| t.automation.as_ref()).map(|o| {
            ahp_types::state::SessionOrigin::Automation(ahp_types::state::AutomationSessionOrigin { automation: o.automation.clone(), run: o.run.clone() })
        }),
        project: None,
        working_directories: Some(record.working_directories.to_vec()),
        annotations: None,
        lifecycle,
        creation_error: None,
        server_tools: None,
        active_clients: Vec::new(),
        chats,
        default_chat: Some(record.default_chat().into_owned()),
        config: None,
        customizations: None,
        changesets: None,
        input_needed: None,
        // The row and the state carry the same mark (Sessions page,
        // "Finding one": "Its row and its state carry
        // _meta['vscode.external']: true"), from the first snapshot on.
        meta: state_meta(record),
    }
}

/// The `ahpd.wakes` value of a session's state: its waiting wakes as
/// `[{id, chat, at, prompt}]`, `None` when it has none.
pub fn wakes_value(record: &SessionRecord) -> Option<serde_json::Value> {
    record.tools.as_ref().filter(|t| !t.wakes.is_empty()).map(|t| {
        serde_json::Value::Array(t.wakes.iter().map(|w| serde_json::json!({"id": w.id, "chat": w.chat, "at": w.at.to_iso(), "prompt": w.prompt})).collect())
    })
}

/// The `ahpd.parent` value of a child session's state: its parent's URI
/// (`None` for a session no agent made, or whose parent was disposed).
pub fn parent_value(record: &SessionRecord) -> Option<serde_json::Value> {
    record.tools.as_ref().and_then(|t| t.parent.as_ref()).map(|p| serde_json::Value::String(p.session.clone()))
}

/// The `ahpd.children` value of a session's state: its children's URIs,
/// `None` when it has none.
pub fn children_value(record: &SessionRecord) -> Option<serde_json::Value> {
    record.tools.as_ref().filter(|t| !t.children.is_empty()).map(|t| {
        serde_json::Value::Array(t.children.iter().map(|c| serde_json::Value::String(c.session.clone())).collect())
    })
}

/// `_meta` of a session's state as its record gives it: the external
/// mark, and what the host tools keep (issue 24): the wakes its agents
/// asked for (`ahpd.wakes`), its parent (`ahpd.parent`) and children
/// (`ahpd.children`).
fn state_meta(record: &SessionRecord) -> Option<serde_json::Map<String, serde_json::Value>> {
    let tools = [
        (crate::shared::WAKES_META_KEY, wakes_value(record)),
        (crate::shared::PARENT_META_KEY, parent_value(record)),
        (crate::shared::CHILDREN_META_KEY, children_value(record)),
    ];
    if !record.external && tools.iter().all(|(_, v)| v.is_none()) {
        return None;
    }
    let mut meta = if record.external { external_meta() } else { serde_json::Map::new() };
    for (key, value) in tools {
        if let Some(v) = value {
            meta.insert(key.to_owned(), v);
        }
    }
    Some(meta)
}

/// The `config` a session's state reports (`{schema, values}`, Sessions
/// page, "Configuration keys"), composed from what its folder was offered
/// when it was made (a record stored before offers were kept gets one from
/// [`offer_from_git`] when it is read back); `None` when it has no offer:
/// an external session, one adopted from a backend's own list or imported,
/// or an old one that never asked git. Held as JSON, not in [`SessionState`], because
/// `ahp_types` keeps a schema's properties in a `HashMap` whose order
/// changes every run; this JSON keeps the page's order, and snapshots are
/// written with it.
pub fn session_config(record: &SessionRecord) -> Option<serde_json::Value> {
    let offer = record.offer.as_ref()?;
    Some(crate::session_config::reported(offer, record.scope.as_deref(), &record.config))
}

/// The offer a record stored before offers were kept is read back with:
/// in a repository when its git record names one or a tree, the branch its
/// tree was cut from; `None` when it never asked git. Applied once, when
/// the record is read back (`Host::new`).
pub fn offer_from_git(record: &SessionRecord) -> Option<crate::session_config::ConfigOffer> {
    let git = record.git.as_ref()?;
    let branch = git.worktree.as_ref().map(|w| w.base_branch.clone()).filter(|b| !b.is_empty());
    Some(crate::session_config::ConfigOffer { repo: git.repo_root.is_some() || git.worktree.is_some(), branch })
}

/// A chat channel's state from its record and the turns the backend
/// handed back (oldest first), with the turns the host holds put back in
/// place ([`crate::kept_turns::merge`]). `default` says whether it is its
/// session's default chat, the one chat that is never `movable` (ahp-types
/// `ChatState.movable`: "A chat referenced by its owning session's
/// `defaultChat` MUST NOT be movable"; every other chat is, `moveChat`).
pub fn chat_state(chat: &ChatRecord, turns: Vec<Turn>, default: bool) -> ChatState {
    let (turns, _) = crate::kept_turns::merge(chat, crate::session::fork::with_seed(chat, turns));
    let turns = crate::session::rewind::without_forgotten(chat, turns);
    ChatState {
        resource: chat.resource.clone(),
        title: chat.title.to_string(),
        status: rest_status(chat.status, &turns),
        activity: None,
        modified_at: chat.modified_at.to_string(),
        changes: chat.changes.as_deref().cloned(),
        origin: chat.origin.as_deref().cloned(),
        movable: Some(!default),
        interactivity: None,
        working_directories: None,
        changesets: None,
        background_work: None,
        canvases: None,
        turns,
        turns_next_cursor: None,
        active_turn: None,
        steering_message: crate::session::pending::steering_state(chat),
        queued_messages: crate::session::pending::queued_state(chat),
        draft: chat.draft.as_deref().cloned(),
        meta: None,
    }
}

/// The status a chat rests at after a restart or a resume: Error when its
/// last turn ended in error, else Idle, keeping the stored flags.
fn rest_status(stored: u32, turns: &[Turn]) -> u32 {
    let flags = stored & !ACTIVITY_MASK;
    let activity = match turns.last() {
        Some(turn) if turn.state == TurnState::Error => SessionStatus::Error.0,
        Some(_) => SessionStatus::Idle.0,
        None if stored & ACTIVITY_MASK == SessionStatus::Error.0 => SessionStatus::Error.0,
        None => SessionStatus::Idle.0,
    };
    flags | activity
}

/// The summary of a chat state, as the session lists it.
pub fn chat_summary(chat: &ChatState) -> ChatSummary {
    ChatSummary {
        resource: chat.resource.clone(),
        title: chat.title.clone(),
        status: chat.status,
        activity: chat.activity.clone(),
        modified_at: chat.modified_at.clone(),
        changes: chat.changes.clone(),
        origin: chat.origin.clone(),
        movable: chat.movable,
        interactivity: chat.interactivity.clone(),
        working_directories: chat.working_directories.clone(),
    }
}

/// The session's own flags: read and archived (Sessions page: "This host's
/// own, shared by every client").
pub fn flags(record: &SessionRecord) -> u32 {
    (if record.is_read { IS_READ } else { 0 }) | (if record.is_archived { IS_ARCHIVED } else { 0 })
}

/// The aggregate activity of a session's chats and the activity text of the
/// chat that decided it (Sessions page, "The state a session reports":
/// InputNeeded while any chat waits on somebody, else InProgress while any
/// chat runs, else the default chat's bits).
///
/// `chats` is `(uri, status, activity)` for each chat; InputNeeded (24) is
/// tested before InProgress (8) because it carries the InProgress bit.
pub fn aggregate_activity<'a>(
    is_default_chat: impl Fn(&str) -> bool,
    chats: impl Iterator<Item = (&'a str, u32, Option<&'a String>)> + Clone,
) -> (u32, Option<String>) {
    let input_needed = SessionStatus::InputNeeded.0;
    let in_progress = SessionStatus::InProgress.0;
    if let Some((_, _, activity)) = chats.clone().find(|(_, s, _)| s & ACTIVITY_MASK == input_needed) {
        return (input_needed, activity.cloned());
    }
    if let Some((_, _, activity)) = chats.clone().find(|(_, s, _)| s & ACTIVITY_MASK == in_progress) {
        return (in_progress, activity.cloned());
    }
    match chats.clone().find(|(uri, _, _)| is_default_chat(uri)) {
        Some((_, status, activity)) => {
            let bits = status & ACTIVITY_MASK;
            (if bits == 0 { SessionStatus::Idle.0 } else { bits }, activity.cloned())
        }
        None => (SessionStatus::Idle.0, None),
    }
}

/// `_meta` of an external session's row and state: `vscode.external: true`
/// (Sessions page, "Finding one").
pub fn external_meta() -> serde_json::Map<String, serde_json::Value> {
    [("vscode.external".to_owned(), serde_json::Value::Bool(true))].into_iter().collect()
}

impl Session {
    /// The session's aggregate status: chat activity plus its own flags.
    pub fn status(&self) -> (u32, Option<String>) {
        let (activity, text) = match &self.resident {
            Some(resident) => aggregate_activity(
                |c| self.record.is_default_chat(c),
                resident.chats.values().map(|c| (c.resource.as_str(), c.status, c.activity.as_ref())),
            ),
            None => aggregate_activity(
                |c| self.record.is_default_chat(c),
                self.record.chats.iter().map(|c| (c.resource.as_str(), c.status, None)),
            ),
        };
        // A transcript that cannot be read back rests the row at Error,
        // with what to do (issue 25, `session/damage.rs`); while a chat
        // works (a turn sent to it wakes the session to try the transcript
        // again) the row says so, as the state does.
        if self.transcript_damaged() && !matches!(activity, IN_PROGRESS | INPUT_NEEDED) {
            return (ERROR | flags(&self.record), Some(crate::session::damage::DAMAGED_TRANSCRIPT.to_owned()));
        }
        (activity | flags(&self.record), text)
    }

    /// The catalogue row (`SessionSummary`) for `listSessions` and
    /// `root/sessionAdded`. Row and state carry the same aggregate.
    pub fn summary(&self) -> SessionSummary {
        let (status, activity) = self.status();
        let chats = self
            .chat_rows()
            .map(|c| SessionChatSummary {
                resource: c.resource.to_owned(),
                title: c.title.to_owned(),
                origin: c.origin.cloned(),
                interactivity: None,
                status: Some(c.status),
                changes: c.changes.cloned(),
            })
            .collect();
        SessionSummary {
            provider: self.record.provider.to_string(),
            title: self.record.title.to_string(),
            status,
            activity,
            origin: None,
            project: None,
            working_directories: Some(self.record.working_directories.to_vec()),
            annotations: None,
            resource: self.record.resource.clone(),
            created_at: self.created_at().to_iso(),
            modified_at: self.modified_at.to_iso(),
            changes: self.record.changes.as_deref().cloned(),
            meta: self.record.external.then(external_meta),
            chats: Some(chats),
            default_chat: Some(self.record.default_chat().into_owned()),
        }
    }

    /// A chat's own change count, as its record keeps it (see
    /// `ChatRecord::changes`).
    /// The chats of the session's catalogue row, in its record's order
    /// (the default chat first, then as they were made), with what the
    /// held state says of each when the state is held: one order whether
    /// the session sleeps or not, so a sleep or a wake never reorders a
    /// row without a broadcast (issue 19, `root_rows_match_listing`: the
    /// held chats were listed in URI order, the record's in its own).
    /// Both [`Session::summary`] and [`Session::row`] read it.
    pub fn chat_rows(&self) -> impl Iterator<Item = ChatRowFacts<'_>> + '_ {
        self.record.chats.iter().map(move |rec| {
            let held = self.resident.as_ref().and_then(|r| r.chats.get(&rec.resource));
            ChatRowFacts {
                resource: &rec.resource,
                title: held.map_or(&*rec.title, |c| &*c.title),
                origin: held.and_then(|c| c.origin.as_ref()),
                status: held.map_or(rec.status, |c| c.status),
                changes: rec.changes.as_deref(),
            }
        })
    }

    /// The chat's change count, as its record keeps it.
    pub fn chat_changes(&self, chat: &str) -> Option<&ahp_types::state::ChangesSummary> {
        self.record.chats.iter().find(|c| c.resource == chat).and_then(|c| c.changes.as_deref())
    }

    /// Whether any chat has a turn running.
    pub fn has_active_turn(&self) -> bool {
        self.resident
            .as_ref()
            .is_some_and(|r| r.chats.values().any(|c| c.active_turn.is_some()))
    }

}

/// A finished turn as a transcript replays it: the person's message `text`,
/// no parts yet, state Complete. Resumes and imports fill in the rest.
pub fn replayed_turn(id: String, started_at: Option<String>, text: String) -> Turn {
    Turn {
        id,
        started_at,
        duration: None,
        message: Message { text, origin: MessageOrigin { kind: MessageKind::User }, attachments: None, model: None, agent: None, meta: None },
        response_parts: Vec::new(),
        usage: None,
        state: TurnState::Complete,
    }
}

/// One chat of a catalogue row ([`Session::chat_rows`]), borrowed.
#[derive(Debug, Clone, Copy)]
pub struct ChatRowFacts<'a> {
    /// The chat's URI.
    pub resource: &'a str,
    /// Its title.
    pub title: &'a str,
    /// Where it came from, when its state is held and says so.
    pub origin: Option<&'a ahp_types::state::ChatOrigin>,
    /// Its status bits.
    pub status: u32,
    /// Its change count.
    pub changes: Option<&'a ahp_types::state::ChangesSummary>,
}
