//! Sessions as plain JSON files a person can read: `ahpd session export`
//! and `ahpd session import` (coding-agent SDK page, "Saving and Loading
//! Sessions": "The saved JSON file contains the message history, session
//! ID, working directory, and creation timestamp ... it's not opaque
//! binary"). The same file is the audit trail: every message in order, with
//! who sent it. The layout is documented with a JSON Schema in
//! `docs/EXPORT.md`.

use std::collections::BTreeMap;

use ahp_types::state::{MarkdownResponsePart, ResponsePart, Turn, TurnState};
use ahp_types::Uri;
use serde::{Deserialize, Serialize};

use crate::ids::ResourceId;
use crate::record::{ChatRecord, Derived, SessionRecord, RECORD_FORMAT};

/// The `format` tag of this layout.
pub const EXPORT_FORMAT: &str = "ahpd.session.v1";

/// One exported session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedSession {
    /// Always [`EXPORT_FORMAT`].
    pub format: String,
    /// The session URI.
    pub id: Uri,
    /// The backend that ran it.
    pub provider: String,
    /// Its title.
    pub title: String,
    /// The folder relative paths resolve to (the first working directory).
    pub working_directory: Option<Uri>,
    /// When it was first started (ISO-8601).
    pub created_at: String,
    /// Its last change (ISO-8601).
    pub modified_at: String,
    /// The settings chosen.
    #[serde(default)]
    pub config: serde_json::Map<String, serde_json::Value>,
    /// Whose work it is, if anybody's.
    #[serde(default)]
    pub owner: Option<String>,
    /// The default chat's messages, oldest first.
    pub messages: Vec<ExportedMessage>,
    /// Every chat, the default first, with its own messages.
    pub chats: Vec<ExportedChat>,
}

/// One chat of an exported session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedChat {
    /// The chat URI.
    pub id: Uri,
    /// Its title.
    pub title: String,
    /// The messages, oldest first.
    pub messages: Vec<ExportedMessage>,
}

/// One message: what a person or the agent said, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
    /// Who sent it (a user message's sender as the host recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// The turn it belongs to.
    pub turn_id: String,
    /// When the turn started (ISO-8601), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// How the turn ended (`complete`, `cancelled`, `error`), on assistant
    /// messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

fn turn_state_name(state: TurnState) -> &'static str {
    match state {
        TurnState::Complete => "complete",
        TurnState::Cancelled => "cancelled",
        TurnState::Error => "error",
    }
}

fn reply_text(turn: &Turn) -> String {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.as_str()),
            ResponsePart::Error(e) => Some(e.error.message.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn messages_of(chat: &ChatRecord, turns: &[Turn]) -> Vec<ExportedMessage> {
    let mut out = Vec::with_capacity(turns.len() * 2);
    for turn in turns {
        out.push(ExportedMessage {
            role: "user".to_owned(),
            content: turn.message.text.clone(),
            sender: chat.senders.get(&turn.id).cloned(),
            turn_id: turn.id.clone(),
            at: turn.started_at.clone(),
            state: None,
        });
        out.push(ExportedMessage {
            role: "assistant".to_owned(),
            content: reply_text(turn),
            sender: None,
            turn_id: turn.id.clone(),
            at: turn.started_at.clone(),
            state: Some(turn_state_name(turn.state).to_owned()),
        });
    }
    out
}

/// Builds the export of a session from its record and each chat's turns
/// (as the backend handed them back), with the turns the host holds put
/// back in place ([`crate::kept_turns::merge`]: an interrupted turn is exported
/// with its message).
pub fn export(record: &SessionRecord, turns: &BTreeMap<Uri, Vec<Turn>>) -> ExportedSession {
    let mut chats: Vec<ExportedChat> = record
        .chats
        .iter()
        .map(|c| ExportedChat {
            id: c.resource.clone(),
            title: c.title.to_string(),
            messages: messages_of(c, &crate::session::rewind::without_forgotten(c, crate::kept_turns::merge(c, crate::session::fork::with_seed(c, turns.get(&c.resource).cloned().unwrap_or_default())).0)),
        })
        .collect();
    chats.sort_by_key(|c| !record.is_default_chat(&c.id));
    ExportedSession {
        format: EXPORT_FORMAT.to_owned(),
        id: record.resource.clone(),
        provider: record.provider.to_string(),
        title: record.title.to_string(),
        working_directory: record.working_directories.first().cloned(),
        created_at: record.created_at.to_string(),
        modified_at: record.modified_at.to_string(),
        config: (*record.config).clone(),
        owner: record.owner.as_deref().map(str::to_owned),
        messages: chats.first().map(|c| c.messages.clone()).unwrap_or_default(),
        chats,
    }
}

/// What an import yields: the record to store and each chat's turns for
/// the backend's transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The session record (under a fresh URI if the exported one is taken).
    pub record: SessionRecord,
    /// Each chat's turns, oldest first.
    pub turns: BTreeMap<Uri, Vec<Turn>>,
}

/// Turns an export back into a resumable session.
///
/// `taken(uri)` says whether a session URI is already in use; a taken id
/// gets the suffix `-imported-<n>` with the smallest free `n`. Errors: a
/// wrong `format`, an id that fails validation (`ids::ResourceId`), a
/// message whose role is neither `user` nor `assistant`.
pub fn import(doc: &ExportedSession, taken: impl Fn(&str) -> bool) -> Result<Imported, String> {
    if doc.format != EXPORT_FORMAT {
        return Err(format!("not an ahpd session export (format {:?}, expected {EXPORT_FORMAT:?})", doc.format));
    }
    let original = ResourceId::parse(&doc.id).map_err(|e| format!("invalid session id: {e}"))?;
    let mut rid = original.clone();
    let mut n = 1;
    while taken(&rid.uri()) {
        let id = format!("{}-imported-{n}", original.id);
        rid = ResourceId::parse(&format!("{}:/{}", original.scheme, id)).map_err(|e| format!("no free id: {e}"))?;
        n += 1;
    }
    let key = rid.store_key();
    let source_chats: Vec<ExportedChat> = if doc.chats.is_empty() {
        vec![ExportedChat { id: String::new(), title: String::new(), messages: doc.messages.clone() }]
    } else {
        doc.chats.clone()
    };
    let mut chats = Vec::new();
    let mut turns = BTreeMap::new();
    for (i, chat) in source_chats.iter().enumerate() {
        let uri = if i == 0 { format!("ahp-chat:/{key}") } else { format!("ahp-chat:/{key}.{i}") };
        let mut senders: BTreeMap<String, String> = BTreeMap::new();
        let mut chat_turns: Vec<Turn> = Vec::new();
        for m in &chat.messages {
            match m.role.as_str() {
                "user" => {
                    if let Some(s) = &m.sender {
                        senders.insert(m.turn_id.clone(), s.clone());
                    }
                    chat_turns.push(crate::session::state::replayed_turn(m.turn_id.clone(), m.at.clone(), m.content.clone()));
                }
                "assistant" => {
                    if let Some(turn) = chat_turns.iter_mut().rev().find(|t| t.id == m.turn_id) {
                        turn.response_parts.push(ResponsePart::Markdown(MarkdownResponsePart {
                            id: format!("{}.md", m.turn_id),
                            content: m.content.clone(),
                        }));
                        turn.state = match m.state.as_deref() {
                            Some("cancelled") => TurnState::Cancelled,
                            Some("error") => TurnState::Error,
                            _ => TurnState::Complete,
                        };
                    }
                }
                other => return Err(format!("message role {other:?} is neither user nor assistant")),
            }
        }
        chats.push(ChatRecord {
            resource: uri.clone(),
            title: chat.title.as_str().into(),
            conversation_id: if i == 0 { key.as_str().into() } else { format!("{key}.{i}").into() },
            modified_at: doc.modified_at.as_str().into(),
            status: crate::session::state::IDLE,
            fresh: false,
            damaged: false,
            senders: senders.into_iter().collect(),
            changes: None,
            written: Default::default(),
            kept: Default::default(),
            draft: None,
            forgetting: Default::default(),
            origin: None,
            seed: Default::default(),
            queued: Default::default(),
            steering: None,
            moved: None,
        });
        turns.insert(uri, chat_turns);
    }
    let record = SessionRecord {
        format: RECORD_FORMAT,
        key: Derived::held(key.clone()),
        resource: rid.uri(),
        provider: doc.provider.as_str().into(),
        title: doc.title.as_str().into(),
        created_at: doc.created_at.as_str().into(),
        modified_at: doc.modified_at.as_str().into(),
        is_read: false,
        is_archived: false,
        working_directories: doc.working_directory.iter().cloned().collect(),
        config: doc.config.clone().into(),
        owner: doc.owner.as_deref().map(Box::from),
        scope: None,
        default_chat: Derived::held(format!("ahp-chat:/{key}")),
        chats,
        changes: None,
        external: false,
        offer: None,
        in_tree: None,
        shared_trees: Default::default(),
        deleted: false,
        tools: None,
        git: None,
    };
    Ok(Imported { record, turns })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(id: &str, text: &str, reply: &str) -> Turn {
        serde_json::from_value(serde_json::json!({
            "id": id, "startedAt": "2026-01-01T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}},
            "responseParts": [{"kind": "markdown", "id": "p", "content": reply}],
            "state": "complete"
        }))
        .expect("turn")
    }

    fn record() -> SessionRecord {
        SessionRecord {
            format: RECORD_FORMAT,
            key: Derived::held("ahp-session@a"),
            resource: "ahp-session:/a".into(),
            provider: "echo".into(),
            title: "t".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            modified_at: "2026-01-01T00:00:01.000Z".into(),
            is_read: true,
            is_archived: false,
            working_directories: vec!["file:///w".into()].into(),
            config: Default::default(),
            owner: None,
            scope: None,
            default_chat: Derived::held("ahp-chat:/ahp-session@a"),
            chats: vec![ChatRecord {
                resource: "ahp-chat:/ahp-session@a".into(),
                title: Box::default(),
                conversation_id: "ahp-session@a".into(),
                modified_at: "2026-01-01T00:00:01.000Z".into(),
                status: crate::session::state::IDLE,
                fresh: false,
                damaged: false,
                senders: [("t1".to_owned(), "alice".to_owned())].into_iter().collect(),
            changes: None,
            written: Default::default(),
            kept: Default::default(),
            draft: None,
            forgetting: Default::default(),
            origin: None,
            seed: Default::default(),
            queued: Default::default(),
            steering: None,
            moved: None,
            }],
            changes: None,
            external: false,
            offer: None,
            in_tree: None,
            shared_trees: Default::default(),
            deleted: false,
            tools: None,
            git: None,
        }
    }

    #[test]
    fn export_lists_messages_in_order_with_role_content_and_sender() {
        let turns = [("ahp-chat:/ahp-session@a".to_owned(), vec![turn("t1", "hi", "Echo: hi"), turn("t2", "yo", "Echo: yo")])]
            .into_iter()
            .collect();
        let doc = export(&record(), &turns);
        let roles: Vec<_> = doc.messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(roles, [("user", "hi"), ("assistant", "Echo: hi"), ("user", "yo"), ("assistant", "Echo: yo")]);
        assert_eq!(doc.messages[0].sender.as_deref(), Some("alice"));
        assert_eq!(doc.working_directory.as_deref(), Some("file:///w"));
    }

    #[test]
    fn import_round_trips_and_takes_a_new_id_when_taken() {
        let turns = [("ahp-chat:/ahp-session@a".to_owned(), vec![turn("t1", "hi", "Echo: hi")])].into_iter().collect();
        let doc = export(&record(), &turns);
        let back = import(&doc, |_| false).expect("import");
        assert_eq!(back.record.resource, "ahp-session:/a");
        assert_eq!(export(&back.record, &back.turns).messages, doc.messages);
        let renamed = import(&doc, |uri| uri == "ahp-session:/a").expect("import");
        assert_eq!(renamed.record.resource, "ahp-session:/a-imported-1");
        let bad = ExportedSession { id: "ahp-session:/../x".into(), ..doc.clone() };
        assert!(import(&bad, |_| false).is_err());
        let wrong = ExportedSession { format: "x".into(), ..doc };
        assert!(import(&wrong, |_| false).is_err());
    }
}
