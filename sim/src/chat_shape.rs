//! The simulated clients' moves on a chat's shape (issue 23, part B): a
//! chat's own read and archived bits, and rewinds (`chat/truncated`). Kept
//! apart from the other moves (`clients.rs`) so each feature's workload
//! reads on its own; the client picks this arm (`think`, arm 18) and this
//! module picks the move.

use serde_json::json;

use ahp_types::Uri;

use crate::clients::{Client, ClientOut, MirrorState};
use crate::rng::SimRng;

/// One chat-shape move of `client` on `chat` of `session` (the default
/// chat sometimes, so the refusal of archiving it on its own is sent too).
pub fn think(client: &mut Client, rng: &mut SimRng, session: &Uri, chat: &Uri) -> Vec<ClientOut> {
    match rng.below(3) {
        0 => {
            let target = if rng.chance(0.2) { crate::clients::default_chat_of(session) } else { chat.clone() };
            let action = if rng.chance(0.5) {
                json!({"type": "chat/isReadChanged", "isRead": rng.chance(0.5)})
            } else {
                json!({"type": "chat/isArchivedChanged", "isArchived": rng.chance(0.5)})
            };
            vec![client.dispatch(&target, action)]
        }
        1 => rewind(client, rng, chat),
        _ => fork(client, rng, session),
    }
}

/// A fork (from a turn that ended) or a side chat (from one that ended or
/// the one running) of a chat this client watches in a session it watches,
/// with a wrong turn now and then; or, blind, of `session`'s default chat.
fn fork(client: &mut Client, rng: &mut SimRng, session: &Uri) -> Vec<ClientOut> {
    let mut sources: Vec<(Uri, Uri, Vec<String>, Option<String>)> = Vec::new();
    for (uri, m) in &client.mirrors {
        let MirrorState::Session(s) = &m.state else { continue };
        for c in &s.chats {
            if let Some(MirrorState::Chat(chat)) = client.mirrors.get(&c.resource).map(|m| &m.state) {
                let ended = chat.turns.iter().map(|t| t.id.clone()).collect();
                sources.push((uri.clone(), c.resource.clone(), ended, chat.active_turn.as_ref().map(|t| t.id.clone())));
            }
        }
    }
    let (session, chat, ended, running) = match rng.pick(&sources) {
        Some(s) => s.clone(),
        None => (session.clone(), crate::clients::default_chat_of(session), Vec::new(), None),
    };
    let side = rng.chance(0.4);
    let turn = match (side, &running) {
        (true, Some(r)) if rng.chance(0.5) => r.clone(),
        _ => match rng.pick(&ended) {
            Some(t) if rng.chance(0.9) => t.clone(),
            _ => "no-such-turn".to_owned(),
        },
    };
    let kind = if side { "sideChat" } else { "fork" };
    let new_chat = format!("ahp-chat:/{}-f{}", session.replacen(":/", "-", 1), rng.below(4));
    let params = json!({"channel": session, "chat": new_chat, "source": {"kind": kind, "chat": chat, "turnId": turn}});
    vec![client.send_request("createChat", params, crate::clients::ReqKind::Plain)]
}

/// A rewind of a chat this client watches (to one of the turns it shows,
/// to none now and then, or to a turn it does not have), or of `chat`
/// blind: a turn may be running, the backend may not forget, and the
/// host must refuse each with its reason and change nothing.
fn rewind(client: &mut Client, rng: &mut SimRng, chat: &Uri) -> Vec<ClientOut> {
    let watched: Vec<(Uri, Vec<String>)> = client
        .mirrors
        .iter()
        .filter_map(|(u, m)| match &m.state {
            MirrorState::Chat(c) if !c.turns.is_empty() => Some((u.clone(), c.turns.iter().map(|t| t.id.clone()).collect())),
            _ => None,
        })
        .collect();
    let (target, turns) = match rng.pick(&watched) {
        Some(w) if rng.chance(0.8) => w.clone(),
        _ => (chat.clone(), Vec::new()),
    };
    let action = match rng.pick(&turns) {
        Some(id) if rng.chance(0.85) => json!({"type": "chat/truncated", "turnId": id}),
        _ if rng.chance(0.5) => json!({"type": "chat/truncated"}),
        _ => json!({"type": "chat/truncated", "turnId": "no-such-turn"}),
    };
    vec![client.dispatch(&target, action)]
}
