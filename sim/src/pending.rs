//! What a simulated client does with a chat's pending messages (issue 23):
//! queue one (mostly while a turn runs, sometimes in an idle chat, which
//! starts it at once), remove one (sometimes one that is not there), or
//! reorder the queue it sees. Checked by the core's
//! `inv_queue_matches_record` and `inv_queue_never_stalls` and the
//! history rule `queued_message_once` (`checkers/queue.rs`).

use ahp_types::Uri;
use serde_json::json;

use crate::clients::{Client, ClientOut, MirrorState};
use crate::rng::SimRng;

impl Client {
    /// One pending-message action on a chat this client mirrors (else on
    /// `fallback`, its pick of a chat it may not watch).
    pub(crate) fn pending_action(&mut self, rng: &mut SimRng, fallback: &Uri) -> Option<ClientOut> {
        let mirrored: Vec<(Uri, bool, Vec<String>, Option<String>)> = self
            .mirrors
            .iter()
            .filter_map(|(u, m)| match &m.state {
                MirrorState::Chat(c) => Some((
                    u.clone(),
                    c.active_turn.is_some(),
                    c.queued_messages.as_deref().unwrap_or_default().iter().map(|p| p.id.clone()).collect(),
                    c.steering_message.as_ref().map(|s| s.id.clone()),
                )),
                _ => None,
            })
            .collect();
        let running: Vec<&(Uri, bool, Vec<String>, Option<String>)> = mirrored.iter().filter(|(_, r, _, _)| *r).collect();
        let (chat, queue, steering) = match rng.pick(&running) {
            Some((u, _, q, s)) if rng.chance(0.8) => (u.clone(), q.clone(), s.clone()),
            _ => match rng.pick(&mirrored) {
                Some((u, _, q, s)) => (u.clone(), q.clone(), s.clone()),
                None => (fallback.clone(), Vec::new(), None),
            },
        };
        let action = match rng.below(10) {
            0..=5 => {
                self.turns += 1;
                let id = format!("c{}-q{}", self.index, self.turns);
                // Now and then one replaced in place.
                let id = match rng.pick(&queue) {
                    Some(existing) if rng.chance(0.1) => existing.clone(),
                    _ => id,
                };
                // One in five steers (held as the next turn, before the queue).
                let kind = if rng.chance(0.2) { "steering" } else { "queued" };
                json!({"type": "chat/pendingMessageSet", "kind": kind, "id": id, "message": {"text": format!("{kind} {id}"), "origin": {"kind": "user"}}})
            }
            6 if steering.is_some() && rng.chance(0.5) => {
                json!({"type": "chat/pendingMessageRemoved", "kind": "steering", "id": steering})
            }
            6 | 7 => {
                let id = match rng.pick(&queue) {
                    Some(id) if rng.chance(0.9) => id.clone(),
                    _ => "not-queued".to_owned(),
                };
                json!({"type": "chat/pendingMessageRemoved", "kind": "queued", "id": id})
            }
            _ => {
                let mut order = queue;
                for i in (1..order.len()).rev() {
                    let j = rng.below(i as u64 + 1) as usize;
                    order.swap(i, j);
                }
                if rng.chance(0.2) {
                    order.pop();
                }
                json!({"type": "chat/queuedMessagesReordered", "order": order})
            }
        };
        Some(self.dispatch(&chat, action))
    }
}
