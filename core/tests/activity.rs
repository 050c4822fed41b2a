//! The session row carries the activity of the chat that decided its
//! status (issue 9); a chat waiting for an approval whose backend says
//! nothing about it is described by the host.

use ahp_types::actions::{ChatToolCallReadyAction, ChatToolCallStartAction, StateAction};
use ahp_types::common::StringOrMarkdown;
use ahpd_core::{BackendEvent, Config, Input};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

fn agent(h: &mut Harness, chat: &str, action: StateAction) {
    h.input(Input::Backend { chat: chat.into(), event: BackendEvent::Action(action) });
    h.settle_store();
}

fn row(h: &mut Harness, uri: &str) -> Value {
    h.list(1).into_iter().find(|r| r["resource"] == uri).expect("listed")
}

#[test]
fn a_silent_backend_waiting_for_approval_gets_the_hosts_words_on_the_row() {
    let mut h = Harness::new(Config { residency_limit: 0, sleep_after_ms: 0, ..Config::default() });
    h.connect(1, "c1");
    let (uri, default_chat) = h.create(1, "s");
    h.start_turn(1, &default_chat, 1, "t0", "hello");
    h.settle();
    h.agent_reply(&default_chat, "t0", "hi");
    let r = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/other"}));
    h.settle();
    assert_eq!(h.take_reply(1, r).expect("reply")["result"], Value::Null);
    h.request(1, "subscribe", json!({"channel": uri}));
    h.start_turn(1, "ahp-chat:/other", 2, "t1", "go");
    h.settle();
    agent(&mut h, "ahp-chat:/other", StateAction::ChatToolCallStart(ChatToolCallStartAction {
        turn_id: "t1".into(), tool_call_id: "tc".into(), meta: None, tool_name: "echo_tool".into(),
        display_name: "Echo tool".into(), intention: None, contributor: None,
    }));
    agent(&mut h, "ahp-chat:/other", StateAction::ChatToolCallReady(ChatToolCallReadyAction {
        turn_id: "t1".into(), tool_call_id: "tc".into(), meta: None, contributor: None, intention: None,
        invocation_message: StringOrMarkdown::Plain("echo".into()), tool_input: None,
        confirmation_title: None, risk_assessment: None, edits: None, editable: None, confirmed: None, options: None,
    }));
    let r = row(&mut h, &uri);
    assert_eq!(r["status"].as_u64().unwrap_or(0) & 0x1F, 24, "{r}");
    assert_eq!(r["activity"], "Waiting for approval: Echo tool", "{r}");
    // Subscribers of the session saw the chat's entry say the same.
    let frames = h.frames(1);
    let said = frames.iter().any(|f| f["params"]["action"]["type"] == "session/chatUpdated"
        && f["params"]["action"]["changes"]["activity"] == "Waiting for approval: Echo tool");
    assert!(said, "session/chatUpdated carried the activity: {frames:#?}");

    // Approved: the host's words are taken back from the chat.
    h.dispatch(1, "ahp-chat:/other", 3, json!({"type": "chat/toolCallConfirmed", "turnId": "t1", "toolCallId": "tc", "approved": true}));
    h.settle();
    let chat = &h.host.view().sessions.get(&uri).expect("the session is held").resident().expect("resident").chats["ahp-chat:/other"];
    assert_eq!(chat.activity, None);
}
