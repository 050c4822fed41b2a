//! What a simulated client does to move a chat (issue 23 "Move", client
//! move 22; docs/DECISIONS.md, 17): `moveChat` of a chat it saw listed (now
//! and then a default chat, which the host refuses) to another session it
//! knows or within its own session (now and then a chat seen only in the
//! catalogue's rows, whose session may be asleep), after a chat the destination lists or
//! first, and now and then a move the host must refuse (an anchor that is
//! the chat itself or no chat of the destination, a new session), now and
//! then with a `disposeSession` of either session right behind it. Checked by
//! the state rule `inv_chat_index_consistent` (every chat in exactly one
//! session's record, the host's chat index agreeing), the history rule
//! `echoed_turn_kept` (a moved chat shows every turn it showed), the grants
//! checker and the mirrors (`rule3_mirror_matches_host`: `session/chatRemoved`,
//! `session/chatAdded`, `session/chatsReordered`).

use ahp_types::Uri;
use serde_json::json;

use crate::clients::{default_chat_of, session_uri, Client, ClientOut, MirrorState, ReqKind};
use crate::rng::SimRng;

impl Client {
    /// One `moveChat`: of a chat listed in `session` (else `chat`) to a
    /// session this client knows (else `session` itself).
    pub(crate) fn move_chat(&mut self, rng: &mut SimRng, session: &Uri, chat: &Uri) -> Vec<ClientOut> {
        let listed = |client: &Client, s: &Uri| -> Vec<Uri> {
            match client.mirrors.get(s).map(|m| &m.state) {
                Some(MirrorState::Session(state)) => state.chats.iter().map(|c| c.resource.clone()).collect(),
                _ => Vec::new(),
            }
        };
        // A chat other than a default one, of any session this client
        // watches, mostly.
        let movable: Vec<(Uri, Uri)> = self
            .mirrors
            .iter()
            .filter_map(|(s, m)| match &m.state {
                MirrorState::Session(state) => Some(state.chats.iter().filter(|c| c.movable == Some(true)).map(|c| (s.clone(), c.resource.clone())).collect::<Vec<_>>()),
                _ => None,
            })
            .flatten()
            .collect();
        // Now and then a chat seen only in the catalogue's rows: its
        // session may be asleep, and the move wakes it first
        // (`move_wakes_source`).
        let from_rows: Vec<(Uri, Uri)> = self
            .current_rows()
            .map(|rows| {
                rows.iter()
                    .flat_map(|(s, row)| {
                        let default = row["defaultChat"].as_str().map(str::to_owned).unwrap_or_else(|| default_chat_of(s));
                        row["chats"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|c| c["resource"].as_str())
                            .filter(|c| *c != default)
                            .map(|c| (s.clone(), c.to_owned()))
                            .collect::<Vec<_>>()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let (session, source) = match rng.pick(&movable) {
            _ if !from_rows.is_empty() && rng.chance(0.5) => rng.pick(&from_rows).cloned().unwrap_or_else(|| (session.clone(), chat.clone())),
            Some(c) if rng.chance(0.9) => c.clone(),
            _ => (session.clone(), chat.clone()),
        };
        let session = &session;
        if rng.chance(0.05) {
            return vec![self.send_request("moveChat", json!({"channel": source, "destination": {"kind": "newSession"}}), ReqKind::Plain)];
        }
        let known: Vec<Uri> = self.known.iter().cloned().collect();
        let destination = if rng.chance(0.3) {
            session.clone()
        } else {
            match rng.pick(&known) {
                Some(s) => s.clone(),
                None => session_uri(rng.below(4)),
            }
        };
        let there = listed(self, &destination);
        let after = match rng.below(10) {
            0 => Some(source.clone()),
            1 => Some("ahp-chat:/no-such-chat".to_owned()),
            2..=5 => rng.pick(&there).cloned(),
            _ => None,
        };
        let mut dest = json!({"kind": "session", "session": destination});
        if let Some(after) = after {
            dest["after"] = json!(after);
        }
        let mut out = vec![self.send_request("moveChat", json!({"channel": source, "destination": dest}), ReqKind::Plain)];
        // Now and then a `disposeSession` of either session right behind
        // it, on the same connection: it arrives while the move is being
        // written, and is refused until the move answers
        // (`dispose_refused_moving`), or disposes once it has.
        if rng.chance(0.1) {
            let target = if rng.chance(0.5) { session.clone() } else { destination };
            out.push(self.send_request("disposeSession", json!({"channel": target}), ReqKind::Plain));
        }
        out
    }
}
