//! A chat's activity text (`ChatState.activity`, "what the chat is
//! currently doing"), as the host derives it (issue 9: "the session's
//! activity is the activity of the chat that decided its status"). The host
//! says what a chat waits on when a tool call waits for the user's
//! approval; any other activity text is the backend's own
//! (`chat/activityChanged`) and is left alone.

use ahp_types::state::{ChatState, ResponsePart, ToolCallState};

/// What the activity text of a chat waiting for an approval starts with.
pub const WAITING_PREFIX: &str = "Waiting for approval: ";

/// The activity the host wants `chat` to show, or `None` for no change:
/// `Some(Some(text))` to say what a pending approval waits on when the chat
/// shows no activity, `Some(None)` to clear such a text of the host's once
/// nothing waits any more.
pub fn derived(chat: &ChatState) -> Option<Option<String>> {
    let waiting = chat.active_turn.as_ref().and_then(|turn| {
        turn.response_parts.iter().find_map(|p| match p {
            ResponsePart::ToolCall(tc) => match &tc.tool_call {
                ToolCallState::PendingConfirmation(s) => Some(s.display_name.clone()),
                _ => None,
            },
            _ => None,
        })
    });
    let current = chat.activity.as_deref();
    match waiting {
        // The backend's own words win; the host speaks only into silence.
        Some(name) => current.is_none().then(|| Some(format!("{WAITING_PREFIX}{name}"))),
        None => current.is_some_and(|a| a.starts_with(WAITING_PREFIX)).then_some(None),
    }
}
