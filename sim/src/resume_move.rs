//! What a simulated client does to a chat's life past its queue (issue 23,
//! client move 21): resume the last turn of a chat it mirrors that ended in
//! a resumable error (`chat/turnResume`), and now and then a resume the host
//! must refuse (an earlier turn, a turn that is running, an id no turn
//! has). Checked by the history rule `turn_resumed_once`
//! (`checkers/resume.rs`) and the mirrors (`rule3_mirror_matches_host`).

use ahp_types::state::{ResponsePart, TurnState};
use ahp_types::Uri;
use serde_json::json;

use crate::clients::{Client, ClientOut, MirrorState};
use crate::rng::SimRng;

impl Client {
    /// One resume on a chat this client mirrors (else on `fallback`, its
    /// pick of a chat it may not watch).
    pub(crate) fn resume_or_move(&mut self, rng: &mut SimRng, fallback: &Uri) -> Option<ClientOut> {
        // Per mirrored chat: its last turn's id and whether it may be
        // resumed, an earlier turn's id, and its running turn's id.
        let chats: Vec<(Uri, Option<(String, bool)>, Option<String>, Option<String>)> = self
            .mirrors
            .iter()
            .filter_map(|(u, m)| match &m.state {
                MirrorState::Chat(c) => {
                    let last = c.turns.last().map(|t| {
                        let resumable = t.state == TurnState::Error
                            && matches!(t.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true));
                        (t.id.clone(), resumable && c.active_turn.is_none())
                    });
                    let earlier = c.turns.len().checked_sub(2).map(|i| c.turns[i].id.clone());
                    Some((u.clone(), last, earlier, c.active_turn.as_ref().map(|t| t.id.clone())))
                }
                _ => None,
            })
            .collect();
        let resumable: Vec<&(Uri, Option<(String, bool)>, Option<String>, Option<String>)> =
            chats.iter().filter(|(_, last, _, _)| last.as_ref().is_some_and(|(_, r)| *r)).collect();
        if let Some((chat, Some((id, _)), _, _)) = rng.pick(&resumable).filter(|_| rng.chance(0.8)).map(|c| (*c).clone()) {
            return Some(self.dispatch(&chat, json!({"type": "chat/turnResume", "turnId": id})));
        }
        // A resume the host refuses.
        let (chat, last, earlier, running) = match rng.pick(&chats) {
            Some(c) => c.clone(),
            None => (fallback.clone(), None, None, None),
        };
        let id = match rng.below(4) {
            0 => earlier,
            1 => running,
            2 => last.map(|(id, _)| id),
            _ => None,
        }
        .unwrap_or_else(|| "no-such-turn".to_owned());
        Some(self.dispatch(&chat, json!({"type": "chat/turnResume", "turnId": id})))
    }
}
