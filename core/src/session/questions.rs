//! An agent's questions (issue 23, "Questions"; Sessions page, "Grants":
//! "answer a tool or a question", `chat:answer`).
//!
//! A backend asks with `chat/inputRequested` inside its running turn: the
//! `ahp` reducer puts an unresolved `inputRequest` part into the turn and
//! the chat reads InputNeeded, with the question as its activity
//! (`session/activity.rs`). A client drafts answers with
//! `chat/inputAnswerChanged` and answers once with `chat/inputCompleted`
//! (accept, decline or cancel); the answer, with the drafts merged in as
//! the reducer merges them, goes to the backend
//! ([`BackendCmd::Answer`](crate::effect::BackendCmd::Answer)).
//!
//! A question lives only in its turn: when the turn ends (a client's
//! cancel, the backend's own end, an error the host gives it) every
//! question still open in it is cancelled first (`chat/inputCompleted`
//! with `cancel`, from the host, [`Session::close_questions`]), so no ended
//! turn holds an open question. Questions are not written to the record:
//! a turn running when the process stopped comes back interrupted
//! (`kept_turns::INTERRUPTED`) and its question with it (docs/DECISIONS.md,
//! 15).

use ahp_types::actions::{ActionOrigin, ChatInputCompletedAction, StateAction};
use ahp_types::state::{ChatInputRequest, ChatInputResponseKind, ChatState, ResponsePart};
use ahp_types::Uri;

use crate::effect::BackendCmd;
use crate::shared::{Op, Shared};
use crate::session::Session;

/// The refusal of an answer or a draft to a question no turn of the chat
/// has open (never asked, or asked in a turn that has ended).
pub const NO_SUCH_QUESTION: &str = "no such question is waiting for an answer in this chat";
/// The refusal of an answer or a draft to a question already answered.
pub const ALREADY_ANSWERED: &str = "that question was already answered";

/// Whether `action` is a client's move on a question: a draft
/// (`chat/inputAnswerChanged`) or an answer (`chat/inputCompleted`).
pub fn is_question_action(action: &StateAction) -> bool {
    matches!(action, StateAction::ChatInputAnswerChanged(_) | StateAction::ChatInputCompleted(_))
}

/// The questions of `chat`'s running turn still waiting for an answer, in
/// the order they were asked. Empty when no turn runs.
pub fn open(chat: &ChatState) -> Vec<&ChatInputRequest> {
    let Some(turn) = chat.active_turn.as_ref() else { return Vec::new() };
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::InputRequest(input) if input.response.is_none() => Some(&input.request),
            _ => None,
        })
        .collect()
}

/// Whether any turn of `chat` that has ended still holds a question with
/// no answer (the rule is that none does: [`Session::close_questions`]).
pub fn open_in_ended_turn(chat: &ChatState) -> Option<String> {
    chat.turns.iter().find_map(|t| {
        t.response_parts.iter().find_map(|p| match p {
            ResponsePart::InputRequest(input) if input.response.is_none() => Some(format!("turn {} question {}", t.id, input.request.id)),
            _ => None,
        })
    })
}

/// The host's cancel of every question still open in `chat`'s running turn
/// (`chat/inputCompleted` with `cancel`, one a question): what a turn's
/// end does first, in the host ([`Session::close_questions`]) and in a
/// backend's own copy of the turn (the echo agent's transcript), so both
/// keep the same ended turn.
pub fn cancel_actions(chat: &ChatState) -> Vec<StateAction> {
    open(chat)
        .into_iter()
        .map(|r| StateAction::ChatInputCompleted(ChatInputCompletedAction { request_id: r.id.clone(), response: ChatInputResponseKind::Cancel, answers: None }))
        .collect()
}

/// The activity text of a chat whose running turn asks something: the
/// first open question's message (or its first question's title).
pub fn activity_of(chat: &ChatState) -> Option<String> {
    let request = *open(chat).first()?;
    let first = || request.questions.as_ref().and_then(|q| q.first()).and_then(|q| field(q, "message"));
    Some(request.message.clone().or_else(first).unwrap_or_default())
}

/// A string field of a question, whatever its kind (every kind has an
/// `id` and a `message`; an unknown kind may have neither).
fn field(question: &ahp_types::state::ChatInputQuestion, key: &str) -> Option<String> {
    let value = serde_json::to_value(question).ok()?;
    value.get(key)?.as_str().map(str::to_owned)
}

/// The checks a client's draft or answer on `chat` must pass (its
/// `rejectionReason` otherwise): the request must be open in the running
/// turn ([`NO_SUCH_QUESTION`], [`ALREADY_ANSWERED`]); a draft must name a
/// question of the request when the request lists its questions, and a
/// draft or answer's JSON must be at most `max_bytes` long
/// (`Limits::message_text_max_bytes`).
pub fn check(action: &StateAction, chat: &ChatState, max_bytes: usize) -> Result<(), String> {
    let request_id = match action {
        StateAction::ChatInputAnswerChanged(a) => &a.request_id,
        StateAction::ChatInputCompleted(a) => &a.request_id,
        _ => return Err("this action type is not accepted from clients".into()),
    };
    let Some(request) = open(chat).into_iter().find(|r| r.id == *request_id) else {
        let answered_in = |parts: &[ResponsePart]| {
            parts.iter().any(|p| matches!(p, ResponsePart::InputRequest(i) if i.request.id == *request_id && i.response.is_some()))
        };
        let answered = chat.active_turn.as_ref().is_some_and(|t| answered_in(&t.response_parts)) || chat.turns.iter().any(|t| answered_in(&t.response_parts));
        crate::mark!("question_refused");
        return Err(if answered { ALREADY_ANSWERED } else { NO_SUCH_QUESTION }.into());
    };
    let size = match action {
        StateAction::ChatInputAnswerChanged(a) => {
            if let Some(questions) = &request.questions {
                let named = questions.iter().any(|q| field(q, "id").as_deref() == Some(a.question_id.as_str()));
                if !named {
                    crate::mark!("question_refused");
                    return Err("no such question in that request".into());
                }
            }
            serde_json::to_string(&a.answer).map_or(0, |s| s.len())
        }
        StateAction::ChatInputCompleted(a) => serde_json::to_string(&a.answers).map_or(0, |s| s.len()),
        _ => 0,
    };
    if size > max_bytes {
        return Err(format!("answer larger than the limit of {max_bytes} bytes"));
    }
    Ok(())
}

impl Session {
    /// Applies a checked draft or answer on `channel` with `origin`: the
    /// reducer and the echo; an answer then goes to the backend with the
    /// request as it now reads (drafts and final answers merged) and what
    /// the client chose. Nothing is written: a question does not outlive
    /// its turn, and a turn does not outlive the process.
    pub(crate) fn apply_question_action(&mut self, sh: &mut Shared, channel: &Uri, action: StateAction, origin: Option<ActionOrigin>) {
        let answer = match &action {
            StateAction::ChatInputCompleted(a) => Some((a.request_id.clone(), a.response)),
            _ => None,
        };
        let turn_id = self.resident.as_ref().and_then(|r| r.chats.get(channel)).and_then(|c| c.active_turn.as_ref()).map(|t| t.id.clone());
        if !self.emit(sh, channel, action, origin) {
            return;
        }
        self.mark_activity(sh);
        self.after_chat_change(sh, channel);
        let Some((request_id, response)) = answer else {
            crate::mark!("question_drafted");
            return;
        };
        crate::mark!("question_answered");
        let request = self.resident.as_ref().and_then(|r| r.chats.get(channel)).and_then(|c| {
            c.active_turn.as_ref()?.response_parts.iter().find_map(|p| match p {
                ResponsePart::InputRequest(i) if i.request.id == request_id => Some(i.request.clone()),
                _ => None,
            })
        });
        if let (Some(turn_id), Some(request)) = (turn_id, request) {
            self.backend(sh, Op::Fire, channel.clone(), BackendCmd::Answer { turn_id, request: Box::new(request), response });
        }
    }

    /// The one rule of a turn's end for its questions: before `action`
    /// ends `chat`'s running turn (`chat/turnComplete`, `chat/error`,
    /// `chat/turnCancelled` naming it), every question still open in it is
    /// cancelled by the host (`chat/inputCompleted` with `cancel`), so the
    /// ended turn holds none. Called by [`Session::emit`] only.
    pub(crate) fn close_questions(&mut self, sh: &mut Shared, chat: &Uri, action: &StateAction) {
        let ending = match action {
            StateAction::ChatTurnComplete(a) => &a.turn_id,
            StateAction::ChatError(a) => &a.turn_id,
            StateAction::ChatTurnCancelled(a) => &a.turn_id,
            _ => return,
        };
        let Some(state) = self.resident.as_ref().and_then(|r| r.chats.get(chat)) else { return };
        if state.active_turn.as_ref().is_none_or(|t| t.id != *ending) {
            return;
        }
        for cancel in cancel_actions(state) {
            crate::mark!("question_cancelled_with_turn");
            self.emit(sh, chat, cancel, None);
        }
    }
}
