//! Turns the host keeps until the backend's own history has them (issue 19:
//! "an echoed turn is durable history from its echo on").
//!
//! A turn is echoed only once the record naming its sender is durable
//! (`host/requests.rs`, `Kind::Durable`); the same write keeps a
//! [`KeptTurn`]: the user's message, when it started and the turn before
//! it. The backend writes its own history as the turn goes (the echo
//! agent at the turn's end, an ACP agent as it runs), so a turn the
//! backend itself ended is dropped from the record; one the host ended (a
//! client's cancel, a failed send, a shutdown's cancel) or one that was
//! still running when the process stopped stays, and [`merge`] gives it
//! back wherever the backend's history is read (a wake, an export), at
//! the place it had, unless the backend's history has it after all.
use std::sync::Arc;

use ahp_types::state::{ErrorInfo, ErrorResponsePart, Message, ResponsePart, Turn, TurnState};
use serde::{Deserialize, Serialize};

use crate::record::ChatRecord;

/// The error an interrupted turn comes back with: it was running when the
/// host process stopped (a crash, kill -9, a power cut).
pub const INTERRUPTED: &str = "interrupted: the host stopped";

/// At most this many kept turns per chat; the oldest ended one goes first
/// (a running turn is never dropped).
pub const KEPT_MAX: usize = 64;

/// One turn the host holds (in its chat's record) until the backend's
/// history has it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptTurn {
    /// The client's turn id.
    pub id: String,
    /// When the turn started (ISO-8601, the client's `startedAt`).
    pub started_at: String,
    /// The user's message as the client sent it. Shared: the record is
    /// cloned for every write while the turn is kept, and a message may be
    /// megabytes (issue 25); written as the message itself.
    pub message: std::sync::Arc<Message>,
    /// The id of the turn before it when it started (`None`: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// How many turns the chat had before it when it started: its place
    /// when the backend hands its history back under ids of its own (an
    /// ACP agent's replay), where `after` names nothing.
    #[serde(default)]
    pub index: usize,
    /// How the host ended it; `None` while it runs, and so after a process
    /// that stopped mid-turn ([`INTERRUPTED`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<KeptEnd>,
}

/// How the host (not the backend) ended a kept turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "message")]
pub enum KeptEnd {
    /// A client cancelled it, or a shutdown's grace ran out.
    Cancelled,
    /// It failed with these words (a send the backend refused, an agent
    /// that exited).
    Error(String),
}

/// The message `chat` keeps for turn `turn_id`, shared (not copied), if
/// it keeps the turn.
pub fn message_of(chat: &ChatRecord, turn_id: &str) -> Option<Arc<Message>> {
    chat.kept.iter().find(|k| k.id == turn_id).map(|k| Arc::clone(&k.message))
}

/// Keeps `turn` on `chat` (a turn just echoed).
pub fn hold(chat: &mut ChatRecord, turn: KeptTurn) {
    chat.kept.retain(|h| h.id != turn.id);
    chat.kept.push(turn);
    while chat.kept.len() > KEPT_MAX {
        match chat.kept.iter().position(|h| h.ended.is_some()) {
            Some(i) => {
                chat.kept.remove(i);
            }
            None => break,
        }
    }
}

/// The backend ended `turn_id` itself: its history has it; the host lets
/// it go. Returns whether the record changed.
pub fn release(chat: &mut ChatRecord, turn_id: &str) -> bool {
    let before = chat.kept.len();
    chat.kept.retain(|h| h.id != turn_id);
    chat.kept.len() != before
}

/// The host ended `turn_id` (`end`): kept, with how it ended. Returns
/// whether the record changed.
pub fn end(chat: &mut ChatRecord, turn_id: &str, how: KeptEnd) -> bool {
    match chat.kept.iter_mut().find(|h| h.id == turn_id) {
        Some(h) if h.ended.as_ref() != Some(&how) => {
            h.ended = Some(how);
            true
        }
        _ => false,
    }
}

/// A process read `chat` back from the store: a turn it shows running was
/// running when the last process stopped. It ends in [`INTERRUPTED`] and
/// the chat rests in Error. Returns whether one did.
pub fn interrupt(chat: &mut ChatRecord) -> bool {
    let mut any = false;
    for kept in chat.kept.iter_mut().filter(|k| k.ended.is_none()) {
        kept.ended = Some(KeptEnd::Error(INTERRUPTED.to_owned()));
        any = true;
    }
    if any {
        chat.status = (chat.status & !crate::record::status::ACTIVITY_MASK) | crate::record::status::ERROR;
    }
    any
}

/// The turn a kept one comes back as: its message, no reply, ended as the
/// host ended it (or [`INTERRUPTED`]).
pub fn as_turn(held: &KeptTurn) -> Turn {
    let (state, words) = match &held.ended {
        Some(KeptEnd::Cancelled) => (TurnState::Cancelled, None),
        Some(KeptEnd::Error(message)) => (TurnState::Error, Some(message.clone())),
        None => (TurnState::Error, Some(INTERRUPTED.to_owned())),
    };
    let response_parts = match words {
        Some(message) => vec![ResponsePart::Error(ErrorResponsePart {
            error: ErrorInfo { error_type: "interrupted".to_owned(), message, stack: None, meta: None },
            resumable: Some(false),
        })],
        None => Vec::new(),
    };
    Turn {
        id: held.id.clone(),
        started_at: Some(held.started_at.clone()),
        duration: None,
        message: Message::clone(&held.message),
        response_parts,
        usage: None,
        state,
    }
}

/// The chat's history: the backend's `history` (oldest first) with every
/// kept turn it lacks put back where it was, after the turn it followed.
/// A kept turn the backend has is not repeated: the same id, or (an ACP
/// agent replaying the conversation under its own ids) the same user
/// text in the place the kept turn had. Also returns the ids of the held
/// turns the backend had (the host may let them go).
pub fn merge(chat: &ChatRecord, mut history: Vec<Turn>) -> (Vec<Turn>, Vec<String>) {
    let mut found = Vec::new();
    for held in &chat.kept {
        if history.iter().any(|t| t.id == held.id) {
            found.push(held.id.clone());
            continue;
        }
        let at = match &held.after {
            None => 0,
            Some(after) => history.iter().position(|t| t.id == *after).map_or(held.index.min(history.len()), |i| i + 1),
        };
        if history.get(at).is_some_and(|t| t.message.text == held.message.text) {
            found.push(held.id.clone());
            continue;
        }
        history.insert(at, as_turn(held));
    }
    (history, found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{MessageKind, MessageOrigin};

    fn chat() -> ChatRecord {
        ChatRecord {
            resource: "ahp-chat:/s@c".to_owned(),
            title: Box::default(),
            conversation_id: "c".into(),
            modified_at: Default::default(),
            status: 1,
            fresh: false,
            damaged: false,
            senders: Default::default(),
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
        }
    }

    fn message(text: &str) -> Message {
        Message { text: text.to_owned(), origin: MessageOrigin { kind: MessageKind::User }, attachments: None, model: None, agent: None, meta: None }
    }

    fn held(id: &str, text: &str, after: Option<&str>) -> KeptTurn {
        KeptTurn { id: id.to_owned(), started_at: "2026-12-01T00:00:00.000Z".to_owned(), message: std::sync::Arc::new(message(text)), after: after.map(str::to_owned), index: usize::from(after.is_some()), ended: None }
    }

    fn turn(id: &str, text: &str) -> Turn {
        crate::session::state::replayed_turn(id.to_owned(), None, text.to_owned())
    }

    #[test]
    fn an_interrupted_turn_comes_back_after_the_turn_it_followed_as_an_error() {
        let mut c = chat();
        hold(&mut c, held("t2", "second", Some("t1")));
        let (turns, found) = merge(&c, vec![turn("t1", "first"), turn("t3", "third")]);
        let ids: Vec<&str> = turns.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["t1", "t2", "t3"]);
        assert_eq!(turns[1].state, TurnState::Error);
        assert_eq!(turns[1].message.text, "second");
        assert!(matches!(&turns[1].response_parts[0], ResponsePart::Error(e) if e.error.message == INTERRUPTED));
        assert!(found.is_empty());
    }

    #[test]
    fn a_turn_the_backend_has_is_not_repeated_by_id_or_by_its_text_in_place() {
        let mut c = chat();
        hold(&mut c, held("t1", "hello", None));
        hold(&mut c, held("t2", "again", Some("t1")));
        // The backend replays t1 under its own id, and has t2 by id.
        let (turns, found) = merge(&c, vec![turn("acp-0", "hello"), turn("t2", "again")]);
        assert_eq!(turns.len(), 2);
        assert_eq!(found, ["t1", "t2"]);
    }

    #[test]
    fn a_cancelled_turn_comes_back_cancelled_and_a_released_one_is_gone() {
        let mut c = chat();
        hold(&mut c, held("t1", "a", None));
        hold(&mut c, held("t2", "b", Some("t1")));
        assert!(end(&mut c, "t1", KeptEnd::Cancelled));
        assert!(release(&mut c, "t2"));
        let (turns, _) = merge(&c, Vec::new());
        assert_eq!(turns.len(), 1);
        assert_eq!(turns[0].state, TurnState::Cancelled);
    }

    #[test]
    fn the_oldest_ended_turn_goes_first_when_the_chat_holds_too_many() {
        let mut c = chat();
        for i in 0..KEPT_MAX + 3 {
            hold(&mut c, held(&format!("t{i}"), "x", None));
            end(&mut c, &format!("t{i}"), KeptEnd::Cancelled);
        }
        assert_eq!(c.kept.len(), KEPT_MAX);
        assert_eq!(c.kept[0].id, "t3");
    }
}
