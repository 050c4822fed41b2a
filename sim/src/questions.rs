//! What a simulated client does with an agent's questions (issue 23,
//! "Questions"): draft an answer (`chat/inputAnswerChanged`), answer one
//! (`chat/inputCompleted`: accept, decline or cancel), or aim at a
//! question that is not open (a wrong id, or one already answered), which
//! the host refuses. The sim's agent asks now and then
//! (`backend.rs`, `Step::Ask`). Checked by the core's
//! `inv_questions_in_running_turn` and the history rule
//! `question_answered_once` (`checkers/questions.rs`).

use ahp_types::state::ResponsePart;
use ahp_types::Uri;
use serde_json::json;

use crate::clients::{Client, ClientOut, MirrorState};
use crate::rng::SimRng;

impl Client {
    /// One move on a question of a chat this client mirrors (else on
    /// `fallback` with an id that names nothing).
    pub(crate) fn question_action(&mut self, rng: &mut SimRng, fallback: &Uri) -> Option<ClientOut> {
        // (chat, request id, open) for each question this client has seen
        // in a running turn.
        let seen: Vec<(Uri, String, bool)> = self
            .mirrors
            .iter()
            .filter_map(|(u, m)| match &m.state {
                MirrorState::Chat(c) => c.active_turn.as_ref().map(|t| (u, t)),
                _ => None,
            })
            .flat_map(|(u, t)| {
                t.response_parts.iter().filter_map(move |p| match p {
                    ResponsePart::InputRequest(i) => Some((u.clone(), i.request.id.clone(), i.response.is_none())),
                    _ => None,
                })
            })
            .collect();
        let open: Vec<&(Uri, String, bool)> = seen.iter().filter(|(_, _, o)| *o).collect();
        let (chat, request_id) = match rng.pick(&open) {
            Some((c, id, _)) if rng.chance(0.85) => (c.clone(), id.clone()),
            // One already answered (refused), or a wrong id.
            _ => match rng.pick(&seen) {
                Some((c, id, _)) if rng.chance(0.5) => (c.clone(), id.clone()),
                _ => (fallback.clone(), "no-such-question".to_owned()),
            },
        };
        let text = format!("answer {}", rng.below(100));
        let action = match rng.below(10) {
            0..=2 => json!({
                "type": "chat/inputAnswerChanged", "requestId": request_id, "questionId": "answer",
                "answer": {"state": "draft", "value": {"kind": "text", "value": text}}
            }),
            3..=6 => json!({
                "type": "chat/inputCompleted", "requestId": request_id, "response": "accept",
                "answers": {"answer": {"state": "submitted", "value": {"kind": "text", "value": text}}}
            }),
            7 | 8 => json!({"type": "chat/inputCompleted", "requestId": request_id, "response": "decline"}),
            _ => json!({"type": "chat/inputCompleted", "requestId": request_id, "response": "cancel"}),
        };
        Some(self.dispatch(&chat, action))
    }
}
