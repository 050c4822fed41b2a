//! How one ACP prompt turn becomes the chat's turn actions, and how a
//! `session/load` replay becomes the conversation's earlier turns.
//!
//! Mapping (ACP `session/update` → AHP action):
//! - `agent_message_chunk` → a markdown response part, then `chat/delta`s
//!   while chunks keep coming; anything else in between starts a new part.
//! - `agent_thought_chunk` → a reasoning part, then `chat/reasoning`.
//! - `tool_call` → `chat/toolCallStart`; its status `in_progress` →
//!   `chat/toolCallReady` (confirmed: not needed); `completed`/`failed` →
//!   `chat/toolCallComplete` (success = completed), after a ready when none
//!   was sent. `tool_call_update` does the same for a known call (an unknown
//!   one is started first).
//! - `session/request_permission` → `chat/toolCallReady` without
//!   `confirmed`: the call waits for the client's confirmation (status
//!   InputNeeded).
//! - `plan` → a `systemNotification` part listing the plan's entries (AHP
//!   1.0.0 has no plan part; each update of the plan is a new part, the
//!   latest is current).
//! - the prompt's stop reason: `end_turn` → `chat/turnComplete`;
//!   `max_tokens`, `max_turn_requests`, `refusal` and an unasked `cancelled`
//!   → `chat/error` naming it.
//!
//! Other updates (commands, modes, usage, session info) are not shown.

use std::collections::HashMap;

use agent_client_protocol::v1::schema::{
    ContentBlock, Plan, PlanEntryStatus, SessionUpdate, StopReason, ToolCallContent, ToolCallStatus, ToolCallUpdateFields,
    ToolKind,
};
use ahp_types::actions::{
    ChatDeltaAction, ChatErrorAction, ChatReasoningAction, ChatResponsePartAction, ChatToolCallCompleteAction,
    ChatToolCallReadyAction, ChatToolCallStartAction, ChatTurnCompleteAction, StateAction,
};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    ErrorInfo, ErrorResponsePart, MarkdownResponsePart, ReasoningResponsePart,
    ResponsePart, SystemNotificationResponsePart, ToolCallConfirmationReason, ToolCallResult, Turn,
};

/// Where a tool call is in its life, as far as the client was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    /// Started; neither ready nor waiting.
    Started,
    /// Waiting for the client's confirmation.
    Waiting,
    /// Running (ready sent, or confirmed by the client).
    Running,
    /// Complete, or denied: later updates are not shown.
    Done,
}

/// The text part being streamed, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Open {
    Markdown(String),
    Reasoning(String),
}

/// One running turn's mapping state.
pub struct TurnMap {
    turn_id: String,
    parts: u32,
    open: Option<Open>,
    tools: HashMap<String, Tool>,
}

impl TurnMap {
    /// A turn `turn_id` with nothing streamed yet.
    pub fn new(turn_id: String) -> TurnMap {
        TurnMap { turn_id, parts: 0, open: None, tools: HashMap::new() }
    }

    /// The turn's id.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    fn next_part_id(&mut self, kind: &str) -> String {
        self.parts += 1;
        format!("{}.{kind}{}", self.turn_id, self.parts)
    }

    /// The actions one `session/update` makes.
    pub fn update(&mut self, update: SessionUpdate) -> Vec<StateAction> {
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => self.text(text_of(&chunk.content), false),
            SessionUpdate::AgentThoughtChunk(chunk) => self.text(text_of(&chunk.content), true),
            SessionUpdate::ToolCall(call) => {
                let id = call.tool_call_id.0.to_string();
                let mut out = self.start_tool(&id, call.name.as_deref(), call.kind, &call.title);
                out.extend(self.tool_status(&id, call.status, &call.title, &call.content));
                out
            }
            SessionUpdate::ToolCallUpdate(u) => {
                let id = u.tool_call_id.0.to_string();
                let title = u.fields.title.clone().unwrap_or_else(|| id.clone());
                let mut out = self.start_tool(&id, u.fields.name.as_deref(), u.fields.kind.unwrap_or_default(), &title);
                if let Some(status) = u.fields.status {
                    out.extend(self.tool_status(&id, status, &title, u.fields.content.as_deref().unwrap_or(&[])));
                }
                out
            }
            SessionUpdate::Plan(plan) => {
                self.open = None;
                vec![self.part(ResponsePart::SystemNotification(SystemNotificationResponsePart {
                    content: StringOrMarkdown::Plain(plan_text(&plan)),
                    meta: None,
                }))]
            }
            _ => Vec::new(),
        }
    }

    /// The actions a permission request makes: the call (started if the
    /// agent never announced it) waits for the client's confirmation.
    pub fn permission(&mut self, tool_call_id: &str, fields: &ToolCallUpdateFields) -> Vec<StateAction> {
        let title = fields.title.clone().unwrap_or_else(|| tool_call_id.to_owned());
        let mut out = self.start_tool(tool_call_id, fields.name.as_deref(), fields.kind.unwrap_or_default(), &title);
        if matches!(self.tools.get(tool_call_id), Some(Tool::Done)) {
            return out;
        }
        self.tools.insert(tool_call_id.to_owned(), Tool::Waiting);
        out.push(StateAction::ChatToolCallReady(ChatToolCallReadyAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: tool_call_id.to_owned(),
            meta: None,
            contributor: None,
            intention: None,
            invocation_message: StringOrMarkdown::Plain(title.clone()),
            tool_input: fields.raw_input.as_ref().map(|v| ahp_types::state::ToolInput::Inline(v.to_string())),
            confirmation_title: Some(StringOrMarkdown::Plain(format!("Allow: {title}?"))),
            risk_assessment: None,
            edits: None,
            editable: None,
            confirmed: None,
            options: None,
        }));
        out
    }

    /// The client answered a confirmation: later progress of an approved
    /// call is shown, a denied call's is not.
    pub fn confirmed(&mut self, tool_call_id: &str, approved: bool) {
        self.tools.insert(tool_call_id.to_owned(), if approved { Tool::Running } else { Tool::Done });
    }

    /// The action that ends the turn for `stop`.
    pub fn finish(&self, stop: StopReason) -> StateAction {
        let why = match stop {
            StopReason::EndTurn => {
                return StateAction::ChatTurnComplete(ChatTurnCompleteAction {
                    turn_id: self.turn_id.clone(),
                    duration: 0,
                    meta: None,
                })
            }
            StopReason::MaxTokens => "the agent stopped: it reached its token limit",
            StopReason::MaxTurnRequests => "the agent stopped: it reached its limit of requests in one turn",
            StopReason::Refusal => "the agent refused to continue",
            StopReason::Cancelled => "the agent cancelled the turn",
            _ => "the agent stopped for a reason this host does not know",
        };
        self.error("stopped", why.to_owned())
    }

    /// A `chat/error` ending the turn with `message`.
    pub fn error(&self, error_type: &str, message: String) -> StateAction {
        StateAction::ChatError(ChatErrorAction {
            turn_id: self.turn_id.clone(),
            duration: 0,
            part: ErrorResponsePart {
                error: ErrorInfo { error_type: error_type.to_owned(), message, stack: None, meta: None },
                resumable: Some(false),
            },
            meta: None,
        })
    }

    fn part(&mut self, part: ResponsePart) -> StateAction {
        StateAction::ChatResponsePart(ChatResponsePartAction { turn_id: self.turn_id.clone(), part, meta: None })
    }

    fn text(&mut self, text: Option<String>, reasoning: bool) -> Vec<StateAction> {
        let Some(text) = text.filter(|t| !t.is_empty()) else { return Vec::new() };
        match (&self.open, reasoning) {
            (Some(Open::Markdown(id)), false) => vec![StateAction::ChatDelta(ChatDeltaAction {
                turn_id: self.turn_id.clone(),
                part_id: id.clone(),
                content: text,
                meta: None,
            })],
            (Some(Open::Reasoning(id)), true) => vec![StateAction::ChatReasoning(ChatReasoningAction {
                turn_id: self.turn_id.clone(),
                part_id: id.clone(),
                content: text,
                meta: None,
            })],
            (_, false) => {
                let id = self.next_part_id("md");
                self.open = Some(Open::Markdown(id.clone()));
                vec![self.part(ResponsePart::Markdown(MarkdownResponsePart { id, content: text }))]
            }
            (_, true) => {
                let id = self.next_part_id("think");
                self.open = Some(Open::Reasoning(id.clone()));
                vec![self.part(ResponsePart::Reasoning(ReasoningResponsePart { id, content: text }))]
            }
        }
    }

    fn start_tool(&mut self, id: &str, name: Option<&str>, kind: ToolKind, title: &str) -> Vec<StateAction> {
        if self.tools.contains_key(id) {
            return Vec::new();
        }
        self.open = None;
        self.tools.insert(id.to_owned(), Tool::Started);
        let tool_name = name.map(str::to_owned).unwrap_or_else(|| kind_name(kind));
        vec![StateAction::ChatToolCallStart(ChatToolCallStartAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: id.to_owned(),
            meta: None,
            tool_name,
            display_name: title.to_owned(),
            intention: None,
            contributor: None,
        })]
    }

    fn ready(&mut self, id: &str, title: &str) -> StateAction {
        self.tools.insert(id.to_owned(), Tool::Running);
        StateAction::ChatToolCallReady(ChatToolCallReadyAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: id.to_owned(),
            meta: None,
            contributor: None,
            intention: None,
            invocation_message: StringOrMarkdown::Plain(title.to_owned()),
            tool_input: None,
            confirmation_title: None,
            risk_assessment: None,
            edits: None,
            editable: None,
            confirmed: Some(ToolCallConfirmationReason::NotNeeded),
            options: None,
        })
    }

    fn tool_status(&mut self, id: &str, status: ToolCallStatus, title: &str, content: &[ToolCallContent]) -> Vec<StateAction> {
        let now = self.tools.get(id).copied().unwrap_or(Tool::Started);
        let mut out = Vec::new();
        match status {
            ToolCallStatus::Pending => {}
            ToolCallStatus::InProgress if now == Tool::Started => out.push(self.ready(id, title)),
            ToolCallStatus::InProgress => {}
            ToolCallStatus::Completed | ToolCallStatus::Failed => {
                if now == Tool::Done || now == Tool::Waiting {
                    return out;
                }
                if now == Tool::Started {
                    out.push(self.ready(id, title));
                }
                self.tools.insert(id.to_owned(), Tool::Done);
                let output = content.iter().filter_map(tool_content_text).collect::<Vec<_>>().join("\n");
                let message = if output.is_empty() { title.to_owned() } else { format!("{title}\n\n{output}") };
                out.push(StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
                    turn_id: self.turn_id.clone(),
                    tool_call_id: id.to_owned(),
                    meta: None,
                    result: ToolCallResult {
                        success: status == ToolCallStatus::Completed,
                        past_tense_message: StringOrMarkdown::Plain(message),
                        content: None,
                        structured_content: None,
                        error: None,
                    },
                    requires_result_confirmation: None,
                }));
            }
            _ => {}
        }
        out
    }
}

/// Rebuilds a conversation's turns from a `session/load` replay: each run
/// of user chunks opens a turn, agent chunks and thoughts fill it. Turn ids
/// are `<prefix>h<n>`, stable for the same replay.
pub struct History {
    prefix: String,
    turns: Vec<Turn>,
    open: Option<Open>,
    in_user: bool,
}

impl History {
    /// An empty history whose turn ids start with `prefix`.
    pub fn new(prefix: &str) -> History {
        History { prefix: prefix.to_owned(), turns: Vec::new(), open: None, in_user: false }
    }

    /// Adds one replayed update.
    pub fn update(&mut self, update: &SessionUpdate) {
        match update {
            SessionUpdate::UserMessageChunk(chunk) => {
                let text = text_of(&chunk.content).unwrap_or_default();
                if !self.in_user || self.turns.is_empty() {
                    let id = format!("{}h{}", self.prefix, self.turns.len() + 1);
                    self.turns.push(ahpd_core::session::state::replayed_turn(id, None, String::new()));
                    self.open = None;
                }
                self.in_user = true;
                if let Some(turn) = self.turns.last_mut() {
                    turn.message.text.push_str(&text);
                }
            }
            SessionUpdate::AgentMessageChunk(chunk) | SessionUpdate::AgentThoughtChunk(chunk) => {
                let reasoning = matches!(update, SessionUpdate::AgentThoughtChunk(_));
                self.in_user = false;
                let Some(text) = text_of(&chunk.content) else { return };
                let Some(turn) = self.turns.last_mut() else { return };
                match (turn.response_parts.last_mut(), &self.open, reasoning) {
                    (Some(ResponsePart::Markdown(m)), Some(Open::Markdown(_)), false) => m.content.push_str(&text),
                    (Some(ResponsePart::Reasoning(r)), Some(Open::Reasoning(_)), true) => r.content.push_str(&text),
                    _ => {
                        let id = format!("{}.p{}", turn.id, turn.response_parts.len() + 1);
                        if reasoning {
                            turn.response_parts.push(ResponsePart::Reasoning(ReasoningResponsePart { id: id.clone(), content: text }));
                            self.open = Some(Open::Reasoning(id));
                        } else {
                            turn.response_parts.push(ResponsePart::Markdown(MarkdownResponsePart { id: id.clone(), content: text }));
                            self.open = Some(Open::Markdown(id));
                        }
                    }
                }
            }
            _ => {
                self.in_user = false;
                self.open = None;
            }
        }
    }

    /// The turns, oldest first.
    pub fn into_turns(self) -> Vec<Turn> {
        self.turns
    }
}

/// The text of a content block: text as is, a resource link as a markdown
/// link, other kinds (images, audio, embedded resources) not shown.
fn text_of(block: &ContentBlock) -> Option<String> {
    match block {
        ContentBlock::Text(t) => Some(t.text.clone()),
        ContentBlock::ResourceLink(l) => Some(format!("[{}]({})", l.name, l.uri)),
        _ => None,
    }
}

fn tool_content_text(content: &ToolCallContent) -> Option<String> {
    match content {
        ToolCallContent::Content(c) => text_of(&c.content),
        ToolCallContent::Diff(d) => Some(format!("edited {}", d.path.display())),
        _ => None,
    }
}

fn kind_name(kind: ToolKind) -> String {
    serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| "other".to_owned())
}

fn plan_text(plan: &Plan) -> String {
    let mut text = String::from("Plan:");
    for entry in &plan.entries {
        let mark = match entry.status {
            PlanEntryStatus::Completed => "[x]",
            PlanEntryStatus::InProgress => "[~]",
            _ => "[ ]",
        };
        text.push_str(&format!("\n- {mark} {}", entry.content));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{ContentChunk, TextContent, ToolCall, ToolCallUpdate};

    fn chunk(text: &str) -> ContentChunk {
        ContentChunk::new(ContentBlock::Text(TextContent::new(text)))
    }

    #[test]
    fn chunks_stream_into_parts_and_tool_calls_split_them() {
        let mut t = TurnMap::new("t1".to_owned());
        let a = t.update(SessionUpdate::AgentMessageChunk(chunk("Hel")));
        assert!(matches!(&a[..], [StateAction::ChatResponsePart(p)] if matches!(&p.part, ResponsePart::Markdown(m) if m.content == "Hel")));
        let a = t.update(SessionUpdate::AgentMessageChunk(chunk("lo")));
        assert!(matches!(&a[..], [StateAction::ChatDelta(d)] if d.content == "lo" && d.part_id == "t1.md1"));
        let a = t.update(SessionUpdate::AgentThoughtChunk(chunk("hmm")));
        assert!(matches!(&a[..], [StateAction::ChatResponsePart(p)] if matches!(&p.part, ResponsePart::Reasoning(_))));
        let a = t.update(SessionUpdate::ToolCall(ToolCall::new("c1", "Read a file").status(ToolCallStatus::InProgress)));
        assert!(matches!(&a[..], [StateAction::ChatToolCallStart(_), StateAction::ChatToolCallReady(r)] if r.confirmed.is_some()));
        let a = t.update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            "c1",
            ToolCallUpdateFields::new().status(ToolCallStatus::Completed),
        )));
        assert!(matches!(&a[..], [StateAction::ChatToolCallComplete(c)] if c.result.success));
        let a = t.update(SessionUpdate::AgentMessageChunk(chunk("after")));
        assert!(matches!(&a[..], [StateAction::ChatResponsePart(p)] if matches!(&p.part, ResponsePart::Markdown(m) if m.id == "t1.md3")));
        assert!(matches!(t.finish(StopReason::EndTurn), StateAction::ChatTurnComplete(_)));
        assert!(matches!(t.finish(StopReason::Refusal), StateAction::ChatError(_)));
    }

    #[test]
    fn a_permission_waits_and_a_denied_call_shows_no_more() {
        let mut t = TurnMap::new("t1".to_owned());
        let a = t.permission("c9", &ToolCallUpdateFields::new().title("Write x".to_owned()));
        assert!(matches!(&a[..], [StateAction::ChatToolCallStart(_), StateAction::ChatToolCallReady(r)] if r.confirmed.is_none()));
        t.confirmed("c9", false);
        let a = t.update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            "c9",
            ToolCallUpdateFields::new().status(ToolCallStatus::Completed),
        )));
        assert!(a.is_empty());
    }

    #[test]
    fn a_replay_rebuilds_turns() {
        let mut h = History::new("x-");
        for u in [
            SessionUpdate::UserMessageChunk(chunk("hi ")),
            SessionUpdate::UserMessageChunk(chunk("there")),
            SessionUpdate::AgentMessageChunk(chunk("Hel")),
            SessionUpdate::AgentMessageChunk(chunk("lo")),
            SessionUpdate::UserMessageChunk(chunk("again")),
            SessionUpdate::AgentMessageChunk(chunk("ok")),
        ] {
            h.update(&u);
        }
        let turns = h.into_turns();
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].id, "x-h1");
        assert_eq!(turns[0].message.text, "hi there");
        assert!(matches!(&turns[0].response_parts[..], [ResponsePart::Markdown(m)] if m.content == "Hello"));
        assert_eq!(turns[1].message.text, "again");
    }
}
