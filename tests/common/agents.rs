//! Sessions on a named agent (ACP backends and the echo agent alike) for the
//! end-to-end tests: create one in a folder, watch its default chat, send a
//! turn and follow it to its end, read what went wrong.

use std::path::Path;

use ahp::ahp_types::actions::{ActionEnvelope, StateAction};
use ahp::ahp_types::commands::CreateSessionParams;
use ahp::ahp_types::state::{ChatState, ResponsePart};
use ahp::{Client, ClientError, SessionSubscription};
use serde_json::Value;

use super::*;

/// `createSession` of `sid` on `provider` in the folder `wd`.
pub async fn create_on(c: &Client, sid: &str, provider: &str, wd: &Path) -> Result<Value, ClientError> {
    let params = CreateSessionParams {
        channel: sid.to_owned(),
        meta: None,
        provider: Some(provider.to_owned()),
        working_directories: Some(vec![file_uri(wd)]),
        config: None,
        active_client: None,
        progress_token: None,
    };
    within("createSession", c.request("createSession", params)).await
}

/// A session on `provider` working in `wd`, with its default chat watched.
pub async fn session_on(c: &Client, provider: &str, wd: &Path) -> (String, String, SessionSubscription, ChatState, SessionSubscription) {
    let sid = format!("ahp-session:/{}", fresh_id());
    assert_eq!(create_on(c, &sid, provider, wd).await.expect("createSession"), Value::Null);
    let (s, ssub) = subscribe_session(c, &sid).await;
    let chat = default_chat(&s);
    let (state, csub) = subscribe_chat(c, &chat).await;
    (sid, chat, ssub, state, csub)
}

/// Whether the envelope ends a turn (completed, failed or cancelled).
pub fn ends_turn(env: &ActionEnvelope) -> bool {
    matches!(env.action, StateAction::ChatTurnComplete(_) | StateAction::ChatError(_) | StateAction::ChatTurnCancelled(_))
}

/// Sends `text` as turn `turn_id` and follows the chat until the turn ends.
pub async fn prompt(c: &Client, chat: &str, state: &mut ChatState, sub: &mut SessionSubscription, turn_id: &str, text: &str) -> Vec<ActionEnvelope> {
    within("dispatch", c.dispatch(chat.to_owned(), user_turn(turn_id, text))).await.expect("dispatch");
    follow_chat(sub, state, &format!("turn {turn_id} ({text})"), |env, _| ends_turn(env)).await
}

/// The error text of the chat's last turn, empty when it has none.
pub fn last_error(state: &ChatState) -> String {
    state
        .turns
        .last()
        .and_then(|t| {
            t.response_parts.iter().find_map(|p| match p {
                ResponsePart::Error(e) => Some(e.error.message.clone()),
                _ => None,
            })
        })
        .unwrap_or_default()
}

/// How many log lines hold both `needle` and `also`.
pub fn count(log: &str, needle: &str, also: &str) -> usize {
    log.lines().filter(|l| l.contains(needle) && l.contains(also)).count()
}

/// Waits (bounded, named `what`) until the daemon's log has a line holding
/// both `event` and `also` (e.g. `session.slept` and the session's URI).
pub async fn until_logged(daemon: &Daemon, what: &str, event: &str, also: &str) {
    within(what, async {
        while count(&daemon.log_text(), event, also) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// Each turn of the chat as (what was asked, the reply's markdown).
pub fn turn_texts(state: &ChatState) -> Vec<(String, String)> {
    state.turns.iter().map(|t| (t.message.text.clone(), markdown(t))).collect()
}

/// Unsubscribes from the session `sid` and its chat `chat`, so nothing
/// watches it (a watched session never sleeps).
pub async fn unwatch(c: &Client, sid: &str, chat: &str) {
    within("unsubscribe chat", c.unsubscribe(chat.to_owned())).await.expect("unsubscribe");
    within("unsubscribe session", c.unsubscribe(sid.to_owned())).await.expect("unsubscribe");
}
