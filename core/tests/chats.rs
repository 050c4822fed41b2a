//! Sessions of several chats (Sessions page, "The state a session reports"
//! and "Commands"): createChat, disposeChat, status aggregation.

use ahp_types::actions::*;
use ahp_types::state::*;
use ahp_types::StringOrMarkdown;
use ahpd_core::{BackendCmd, BackendEvent, Config, Input};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

fn agent(h: &mut Harness, chat: &str, action: StateAction) {
    h.input(Input::Backend { chat: chat.into(), event: BackendEvent::Action(action) });
    h.settle();
}

fn row(h: &mut Harness, uri: &str) -> Value {
    h.list(1).into_iter().find(|r| r["resource"] == uri).expect("row")
}

fn ask_approval(h: &mut Harness, chat: &str, turn: &str) {
    agent(h, chat, StateAction::ChatActivityChanged(ChatActivityChangedAction { activity: Some("waiting for approval of rm".into()) }));
    agent(h, chat, StateAction::ChatToolCallStart(ChatToolCallStartAction {
        turn_id: turn.into(), tool_call_id: "tc1".into(), meta: None, tool_name: "rm".into(),
        display_name: "rm".into(), intention: None, contributor: None,
    }));
    agent(h, chat, StateAction::ChatToolCallReady(ChatToolCallReadyAction {
        turn_id: turn.into(), tool_call_id: "tc1".into(), meta: None, contributor: None, intention: None,
        invocation_message: StringOrMarkdown::Plain("rm -rf build".into()), tool_input: None,
        confirmation_title: None, risk_assessment: None, edits: None, editable: None, confirmed: None, options: None,
    }));
}

#[test]
fn the_row_aggregates_input_needed_then_in_progress_over_error() {
    let mut h = Harness::new(Config { residency_limit: 0, sleep_after_ms: 0, ..Config::default() });
    h.connect(1, "c1");
    let (uri, default_chat) = h.create(1, "multi");
    h.start_turn(1, &default_chat, 1, "t0", "hello");
    h.settle();
    h.agent_reply(&default_chat, "t0", "hi");
    // A second chat waiting for approval.
    let r = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/second"}));
    let cmds = h.settle();
    assert_eq!(h.take_reply(1, r).expect("reply")["result"], Value::Null);
    assert!(cmds.iter().any(|(c, cmd)| c == "ahp-chat:/second" && matches!(cmd, BackendCmd::Start { resume: false, .. })));
    h.start_turn(1, "ahp-chat:/second", 2, "t1", "delete build");
    h.settle();
    ask_approval(&mut h, "ahp-chat:/second", "t1");
    let r = row(&mut h, &uri);
    assert_eq!(r["status"].as_u64().unwrap_or(0) & 0x1F, 24, "InputNeeded: {r}");
    assert_eq!(r["activity"], "waiting for approval of rm");
    let chats = r["chats"].as_array().cloned().unwrap_or_default();
    assert_eq!(chats.len(), 2);
    // The session state carries the same aggregate on its _meta.
    let snap = h.request(1, "subscribe", json!({"channel": uri}));
    assert_eq!(snap["result"]["snapshot"]["state"]["_meta"]["ahpd.status"].as_u64().map(|s| s & 0x1F), Some(24));
    h.request(1, "unsubscribe", json!({"channel": uri}));

    // A third chat runs; the second errors: Error on its own row,
    // InProgress on the session.
    let r3 = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/third"}));
    h.settle();
    assert!(h.take_reply(1, r3).is_some());
    h.start_turn(1, "ahp-chat:/third", 3, "t3", "long job");
    h.settle();
    agent(&mut h, "ahp-chat:/second", StateAction::ChatError(ChatErrorAction {
        turn_id: "t1".into(), duration: 0, meta: None,
        part: ErrorResponsePart { error: ErrorInfo { error_type: "x".into(), message: "tool failed".into(), stack: None, meta: None }, resumable: None },
    }));
    let r = row(&mut h, &uri);
    assert_eq!(r["status"].as_u64().unwrap_or(0) & 0x1F, 8, "InProgress: {r}");
    let second = r["chats"].as_array().into_iter().flatten().find(|c| c["resource"] == "ahp-chat:/second").cloned().expect("chat row");
    assert_eq!(second["status"].as_u64().unwrap_or(0) & 0x1F, 2, "Error on the chat's own row");
}

#[test]
fn the_default_chat_is_kept_and_others_can_go() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    let (uri, default_chat) = h.create(1, "m");
    let r = h.request(1, "disposeChat", json!({"channel": default_chat}));
    assert_eq!(r["error"]["code"], -32602);
    let r = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/extra"}));
    h.settle();
    assert!(h.take_reply(1, r).is_some());
    let dup = h.send_request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/extra"}));
    h.settle();
    assert_eq!(h.take_reply(1, dup).expect("reply")["error"]["code"], -32010);
    // One resource per URI: a session at the chat's URI is refused, and the
    // chat stays the chat.
    let clash = h.request(1, "createSession", json!({"channel": "ahp-chat:/extra", "provider": "echo"}));
    assert_eq!(clash["error"]["code"], -32003, "{clash}");
    let bad = h.request(1, "createChat", json!({"channel": uri, "chat": "ahp-chat:/../x"}));
    assert_eq!(bad["error"]["code"], -32602);
    h.request(1, "subscribe", json!({"channel": uri}));
    h.frames(1);
    let r = h.send_request(1, "disposeChat", json!({"channel": "ahp-chat:/extra"}));
    let cmds = h.settle();
    assert_eq!(h.take_reply(1, r).expect("reply")["result"], Value::Null);
    assert!(cmds.iter().any(|(c, cmd)| c == "ahp-chat:/extra" && matches!(cmd, BackendCmd::Delete { .. })));
    let frames = h.frames(1);
    assert!(frames.iter().any(|f| f["params"]["action"]["type"] == "session/chatRemoved"));
    assert!(h.request(1, "subscribe", json!({"channel": "ahp-chat:/extra"}))["error"]["code"] == -32001);
}
