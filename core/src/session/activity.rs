//! A chat's activity text (`ChatState.activity`, "what the chat is
//! currently doing"), as the host derives it (issue 9: "the session's
//! activity is the activity of the chat that decided its status"). The host
//! says what a chat waits on when a tool call waits for the user's
//! approval; any other activity text is the backend's own
//! (`chat/activityChanged`) and is left alone.

use ahp_types::state::{ChatState, ResponsePart, ToolCallState};

/// What the activity text of a chat waiting for an approval starts with.
pub const WAITING_PREFIX: &str = "Waiting for approval: ";
/// What the activity text of a chat whose agent asks a question starts
/// with; the question's message follows (`session/questions.rs`).
pub const QUESTION_PREFIX: &str = "Question: ";

/// The activity the host wants `chat` to show, or `None` for no change:
/// `Some(Some(text))` to say what a pending approval (else an open
/// question) waits on when the chat shows no activity, `Some(None)` to
/// clear such a text of the host's once nothing waits any more.
pub fn derived(chat: &ChatState) -> Option<Option<String>> {
    let approval = chat.active_turn.as_ref().and_then(|turn| {
        turn.response_parts.iter().find_map(|p| match p {
            ResponsePart::ToolCall(tc) => match &tc.tool_call {
                ToolCallState::PendingConfirmation(s) => Some(format!("{WAITING_PREFIX}{}", s.display_name)),
                _ => None,
            },
            _ => None,
        })
    });
    let waiting = approval.or_else(|| crate::session::questions::activity_of(chat).map(|q| format!("{QUESTION_PREFIX}{q}")));
    let current = chat.activity.as_deref();
    let hosts = |a: &str| a.starts_with(WAITING_PREFIX) || a.starts_with(QUESTION_PREFIX);
    match waiting {
        // The backend's own words win; the host speaks only into silence,
        // and replaces only its own words.
        Some(text) => match current {
            None => Some(Some(text)),
            Some(a) if hosts(a) && a != text => Some(Some(text)),
            Some(_) => None,
        },
        None => current.is_some_and(hosts).then_some(None),
    }
}
