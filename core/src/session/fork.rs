//! Forks and side chats (issue 23, part B, 3): `createChat` with a
//! `source` (ahp-types `ChatSource::{Fork, SideChat}`), where the session's
//! agent offers them (`AgentSpec::forks`, advertised as
//! `capabilities.multipleChats.fork` / `sideChat`).
//!
//! A fork names a turn of a chat of the same session that has ended; the
//! new chat's history starts with the source's turns through it. A side
//! chat names a turn that has ended or the one running; its own history
//! starts empty (ahp-types: "without copying it into the side chat's
//! visible history"). Both carry their `origin` (`ChatOrigin::Fork` /
//! `SideChat`, the selection of a side chat as given) on their state and
//! summaries.
//!
//! The copied turns are the host's own (`ChatRecord::seed`): written into
//! the new chat's record in the same write as the chat itself, before
//! `createChat` is answered (docs/DECISIONS.md, 2), and put in front of
//! whatever the chat's backend conversation holds wherever its history is
//! read ([`with_seed`], in `session::state::chat_state` and the export).
//! So a fork is one durable write: a crash before it leaves no chat (the
//! request was never answered), a crash after it leaves the whole fork.
//! The echo agent needs no context of what came before; an ACP agent's
//! chat is refused a source ("forks and side chats are not offered by this
//! agent"): ACP v1 has no fork, and replaying a history into a new
//! conversation would be a second conversation the agent never had, so it
//! is not offered (docs/DECISIONS.md, 14).
//!
//! Config: "a fork or a side chat [starts] with what its source set". A
//! chat here sets nothing of its own (no chat-mutable key is offered and a
//! chat's folders are the session's), so the new chat runs on what its
//! source runs on: the session's.

use ahp_types::commands::ChatSource;
use ahp_types::state::{ChatOrigin, Turn};
use ahp_types::Uri;

use crate::record::ChatRecord;
use crate::session::Session;

/// `turns` (the chat's backend history, oldest first) with the turns the
/// chat was forked with in front, unless the history has them already.
pub fn with_seed(chat: &ChatRecord, turns: Vec<Turn>) -> Vec<Turn> {
    if chat.seed.is_empty() {
        return turns;
    }
    let mut all: Vec<Turn> = chat.seed.iter().filter(|s| !turns.iter().any(|t| t.id == s.id)).cloned().collect();
    all.extend(turns);
    all
}

/// What a source resolves to when the new chat is made: its origin and
/// the turns it starts with.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The new chat's origin.
    pub origin: ChatOrigin,
    /// The turns copied into it (a fork's; a side chat's are none).
    pub seed: Vec<Turn>,
}

impl Session {
    /// Resolves `source` against this session's held state, for a new
    /// chat: the source chat must be one of the session's; a fork's turn
    /// one that has ended in it, a side chat's one that has ended or the
    /// one running. `Err` is the reason the client reads (-32602).
    pub fn resolve_source(&self, source: &ChatSource) -> Result<Resolved, String> {
        let (chat, turn_id) = match source {
            ChatSource::Fork(f) => (&f.chat, &f.turn_id),
            ChatSource::SideChat(s) => (&s.chat, &s.turn_id),
            ChatSource::Unknown(_) => return Err(UNKNOWN_KIND.into()),
        };
        if !self.record.chats.iter().any(|c| c.resource == *chat) {
            crate::mark!("fork_refused_source_elsewhere");
            return Err("the source chat must be a chat of this session".into());
        }
        let resident = self.resident.as_ref().ok_or("the session's state is not loaded")?;
        let state = resident.chats.get(chat).ok_or("no such source chat")?;
        let ended = state.turns.iter().position(|t| t.id == *turn_id);
        match source {
            ChatSource::Fork(_) => {
                let Some(i) = ended else {
                    crate::mark!("fork_refused_turn_not_ended");
                    return Err("a fork names a turn of the source chat that has ended".into());
                };
                crate::mark!("fork_made");
                Ok(Resolved { origin: ChatOrigin::Fork { chat: chat.clone(), turn_id: turn_id.clone() }, seed: state.turns[..=i].to_vec() })
            }
            ChatSource::Unknown(_) => Err(UNKNOWN_KIND.into()),
            ChatSource::SideChat(s) => {
                let running = state.active_turn.as_ref().is_some_and(|t| t.id == *turn_id);
                if ended.is_none() && !running {
                    crate::mark!("side_chat_refused_unknown_turn");
                    return Err("a side chat names a turn of the source chat".into());
                }
                if running {
                    crate::mark!("side_chat_from_running_turn");
                } else {
                    crate::mark!("side_chat_made");
                }
                let origin = ChatOrigin::SideChat { chat: chat.clone(), turn_id: turn_id.clone(), selection: s.selection.clone() };
                Ok(Resolved { origin, seed: Vec::new() })
            }
        }
    }
}

/// The refusal of a source of a kind this host does not know.
pub const UNKNOWN_KIND: &str = "a chat source is a fork or a side chat (kind \"fork\" or \"sideChat\")";

/// The chat `source` names; `None` for a kind this host does not know.
pub fn source_chat(source: &ChatSource) -> Option<&Uri> {
    match source {
        ChatSource::Fork(f) => Some(&f.chat),
        ChatSource::SideChat(s) => Some(&s.chat),
        ChatSource::Unknown(_) => None,
    }
}
