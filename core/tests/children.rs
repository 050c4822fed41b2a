//! Child sessions (issue 24; Sessions page, "Sleep and wake": "a child
//! session's childFinished"; docs/DECISIONS.md, 24): `start_child_session`
//! makes a session owned as its parent is, its first prompt its first
//! turn; each turn end of the child reaches the parent once as
//! `childFinished`, waking it; `child_status` answers only about one's own
//! children; refusals change nothing.

use std::collections::BTreeMap;

use ahp_types::actions::{ChatDeltaAction, ChatResponsePartAction, ChatTurnCompleteAction, StateAction};
use ahp_types::state::{MarkdownResponsePart, MessageKind, ResponsePart};
use ahpd_core::testkit::{users_directory, Harness};
use ahpd_core::tools::{HostToolErrorCode, HostToolRequest, MAX_CHILDREN_PER_SESSION};
use ahpd_core::{BackendCmd, BackendEvent, Config, Input, MonoTime, Now, Outcome, SessionRecord, StoreCmd, WallTime};
use serde_json::{json, Value};

fn config(sleep_after_ms: u64) -> Config {
    Config { sleep_after_ms, residency_limit: 0, ..Config::default() }
}

fn child(prompt: &str) -> HostToolRequest {
    HostToolRequest::StartChildSession { provider: "echo".into(), prompt: prompt.into(), working_directory: None }
}

fn record(h: &Harness, uri: &str) -> SessionRecord {
    h.host.view().sessions.get(uri).expect("the session is known").record().clone()
}

fn phase(h: &Harness, uri: &str) -> &'static str {
    h.host.view().sessions.get(uri).expect("the session is known").phase().name()
}

/// The turns handed to agents among `cmds`: (chat, turn id, text, `_meta["ahpd.hostTool"]`, kind).
fn sends(cmds: &[(String, BackendCmd)]) -> Vec<(String, String, String, Option<Value>, MessageKind)> {
    cmds.iter()
        .filter_map(|(chat, c)| match c {
            BackendCmd::Send { turn_id, message, .. } => Some((
                chat.clone(),
                turn_id.clone(),
                message.text.clone(),
                message.meta.as_ref().and_then(|m| m.get("ahpd.hostTool").cloned()),
                message.origin.kind.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// Every session's record as the host holds it, by store key: what is on
/// disk once every write was answered.
fn on_disk(h: &Harness) -> BTreeMap<String, SessionRecord> {
    h.host.view().sessions.iter().map(|(_, s)| (s.record().key().into_owned(), s.record().clone())).collect()
}

/// The agent of `chat` streams `text` and ends turn `turn`; its writes are
/// left pending (unlike `Harness::agent_reply`).
fn reply_unsettled(h: &mut Harness, chat: &str, turn: &str, text: &str) {
    let part = StateAction::ChatResponsePart(ChatResponsePartAction {
        turn_id: turn.into(),
        part: ResponsePart::Markdown(MarkdownResponsePart { id: "p1".into(), content: String::new() }),
        meta: None,
    });
    let delta = StateAction::ChatDelta(ChatDeltaAction { turn_id: turn.into(), part_id: "p1".into(), content: text.into(), meta: None });
    let done = StateAction::ChatTurnComplete(ChatTurnCompleteAction { turn_id: turn.into(), duration: 0, meta: None });
    for a in [part, delta, done] {
        h.input(Input::Backend { chat: chat.into(), event: BackendEvent::Action(a) });
    }
}

/// Makes a child of the session of `chat` with `prompt` and runs its
/// agent's start: returns (child, child's chat, its first turn's id).
fn make_child(h: &mut Harness, chat: &str, prompt: &str) -> (String, String, String) {
    let call = h.tool_call(chat, child(prompt));
    let cmds = h.settle();
    let answer = h.tool_answer(call).expect("answered once the child started").expect("made");
    let (uri, child_chat) = (answer["session"].as_str().expect("session").to_owned(), answer["chat"].as_str().expect("chat").to_owned());
    let first = sends(&cmds).into_iter().find(|s| s.0 == child_chat).expect("the child's first turn went to its agent");
    assert_eq!(first.2, prompt);
    assert_eq!(first.4, MessageKind::Tool);
    (uri, child_chat, first.1)
}

/// A child is made owned as its parent, both records name each other (and
/// both states say so), its prompt is its first turn; the end of that turn
/// reaches the parent once as a `childFinished` turn with the child's
/// reply; `child_status` tells where it stands.
#[test]
fn a_child_runs_its_prompt_and_its_finish_reaches_the_parent_once() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (parent, parent_chat) = h.session_with_turn("p");
    h.settle();
    let (kid, kid_chat, turn) = make_child(&mut h, &parent_chat, "count the files");
    let (p, k) = (record(&h, &parent), record(&h, &kid));
    assert_eq!((&k.owner, &k.scope), (&p.owner, &p.scope), "owned as its parent");
    assert_eq!(k.tools.as_ref().and_then(|t| t.parent.as_ref()).map(|l| l.session.clone()), Some(parent.clone()));
    assert_eq!(p.tools.as_ref().map(|t| t.children.iter().map(|c| c.session.clone()).collect::<Vec<_>>()), Some(vec![kid.clone()]));
    let state = h.request(1, "subscribe", json!({"channel": kid}));
    assert_eq!(state["result"]["snapshot"]["state"]["_meta"]["ahpd.parent"], json!(parent), "{state}");
    let state = h.request(1, "subscribe", json!({"channel": parent}));
    assert_eq!(state["result"]["snapshot"]["state"]["_meta"]["ahpd.children"], json!([kid]), "{state}");
    assert_eq!(h.tool(&parent_chat, HostToolRequest::ChildStatus { child: kid.clone() }).expect("mine")["status"], "running");

    h.agent_reply(&kid_chat, &turn, "42 files");
    let cmds = h.settle();
    let told = sends(&cmds);
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].0, parent_chat);
    assert!(told[0].2.starts_with("childFinished") && told[0].2.contains("42 files") && told[0].2.contains(&kid), "{}", told[0].2);
    assert_eq!(told[0].3, Some(json!({"childFinished": {"session": kid, "chat": kid_chat, "turnId": turn, "status": "complete", "finish": 1}})));
    assert_eq!(told[0].4, MessageKind::SystemNotification);
    h.agent_reply(&parent_chat, &told[0].1, "noted");
    assert!(sends(&h.settle()).is_empty(), "once");

    let status = h.tool(&parent_chat, HostToolRequest::ChildStatus { child: kid.clone() }).expect("mine");
    assert_eq!(status["status"], "idle");
    assert_eq!(status["lastReply"], "42 files");
}

/// The parent sleeps (evicted, even) while its child works; the child's
/// turn end wakes it and its `childFinished` starts a turn there.
#[test]
fn a_child_finishing_wakes_its_sleeping_parent() {
    let mut h = Harness::new(config(5_000));
    h.connect(1, "c1");
    let (parent, parent_chat) = h.session_with_turn("p");
    h.settle();
    let (_kid, kid_chat, turn) = make_child(&mut h, &parent_chat, "a long job");
    h.advance(6_000);
    assert_eq!(phase(&h, &parent), "asleep", "nothing in hand: the parent slept");
    h.agent_reply(&kid_chat, &turn, "done");
    let cmds = h.settle();
    assert!(cmds.iter().any(|(chat, c)| chat == &parent_chat && matches!(c, BackendCmd::Start { resume: true, .. })), "the parent resumed: {cmds:?}");
    let told = sends(&cmds);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].2.contains("done"));
    assert_eq!(phase(&h, &parent), "live");
}

/// The child's turn end lands on disk and the parent's write does not (a
/// crash between them): after the restart the parent is told once; after
/// another restart, not again. The other way round (the parent's landed,
/// the child's not) the parent is not told twice, and the child's next
/// turn end is numbered past it.
#[test]
fn a_finish_is_delivered_exactly_once_across_restarts() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (parent, parent_chat) = h.session_with_turn("p");
    h.settle();
    let (kid, kid_chat, turn) = make_child(&mut h, &parent_chat, "job");
    h.settle();
    // Everything written so far is on disk.
    let mut disk = on_disk(&h);
    reply_unsettled(&mut h, &kid_chat, &turn, "first");
    // Only the child's writes land.
    let kid_key = record(&h, &kid).key().into_owned();
    for (_, cmd) in h.store_ops() {
        if let StoreCmd::Put { record, .. } = cmd {
            if record.key() == kid_key {
                disk.insert(kid_key.clone(), *record);
            }
        }
    }
    let at = Now { mono: MonoTime(0), wall: WallTime(h.now.wall.0 + 1_000) };
    let mut h = Harness::with_records_at(config(0), disk.values().cloned().collect(), at);
    h.connect(1, "c1");
    h.advance(0);
    let told = sends(&h.settle());
    assert_eq!(told.iter().filter(|s| s.0 == parent_chat).count(), 1, "told once after the restart: {told:?}");
    assert!(told[0].2.contains("first"));
    let disk = on_disk(&h);
    let mut again = Harness::with_records_at(config(0), disk.values().cloned().collect(), Now { mono: MonoTime(0), wall: WallTime(at.wall.0 + 1_000) });
    again.advance(0);
    assert!(sends(&again.settle()).is_empty(), "not again");

    // The parent's write lands, the child's does not.
    let mut h = again;
    h.connect(1, "c1");
    h.settle();
    let mut disk = on_disk(&h);
    let id = "t2";
    h.start_turn(1, &kid_chat, 1, id, "second job");
    h.settle();
    reply_unsettled(&mut h, &kid_chat, id, "second");
    let parent_key = record(&h, &parent).key().into_owned();
    for (_, cmd) in h.store_ops() {
        if let StoreCmd::Put { record, .. } = cmd {
            if record.key() == parent_key {
                disk.insert(parent_key.clone(), *record);
            }
        }
    }
    let delivered = disk[&parent_key].tools.as_ref().map(|t| t.children[0].delivered);
    let mut h = Harness::with_records_at(config(0), disk.values().cloned().collect(), Now { mono: MonoTime(0), wall: WallTime(at.wall.0 + 5_000) });
    h.connect(1, "c1");
    h.advance(0);
    let told = sends(&h.settle());
    assert_eq!(told.iter().filter(|s| s.0 == parent_chat).count(), 1, "the parent's queued message runs once, nothing more: {told:?}");
    assert!(told[0].2.contains("second"));
    h.agent_reply(&parent_chat, &told[0].1, "ok");
    // The child's next turn end is numbered past what the parent has.
    h.start_turn(1, &kid_chat, 1, "t3", "third job");
    h.settle();
    h.agent_reply(&kid_chat, "t3", "third");
    let told = sends(&h.settle());
    let finish = told.iter().find(|s| s.0 == parent_chat).and_then(|s| s.3.as_ref()).map(|m| m["childFinished"]["finish"].clone());
    assert_eq!(finish, delivered.map(|d| json!(d + 1)), "{told:?}");
}

/// Each refusal is a clear error and changes nothing: an unknown
/// provider, an empty prompt, a folder that is not one, one child too
/// many; `child_status` of a session that is not the caller's child (its
/// own, another's child, none) is `not_found`.
#[test]
fn refusals_change_nothing_and_status_is_only_for_ones_own_children() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (parent, parent_chat) = h.session_with_turn("p");
    let (other, other_chat) = h.session_with_turn("q");
    h.settle();
    let before = (record(&h, &parent), h.host.view().sessions.len());
    for (tool, code) in [
        (HostToolRequest::StartChildSession { provider: "nope".into(), prompt: "x".into(), working_directory: None }, HostToolErrorCode::InvalidArgument),
        (child("   "), HostToolErrorCode::InvalidArgument),
        (HostToolRequest::StartChildSession { provider: "echo".into(), prompt: "x".into(), working_directory: Some("../etc".into()) }, HostToolErrorCode::InvalidArgument),
    ] {
        let e = h.tool(&parent_chat, tool).expect_err("refused");
        assert_eq!(e.code, code, "{e}");
    }
    assert!(h.store_ops().is_empty());
    assert_eq!((record(&h, &parent), h.host.view().sessions.len()), before);

    let mut kids = Vec::new();
    for i in 0..MAX_CHILDREN_PER_SESSION {
        kids.push(make_child(&mut h, &parent_chat, &format!("job {i}")).0);
    }
    let before = (record(&h, &parent), h.host.view().sessions.len());
    assert_eq!(h.tool(&parent_chat, child("one too many")).expect_err("over the bound").code, HostToolErrorCode::LimitReached);
    assert!(h.store_ops().is_empty());
    assert_eq!((record(&h, &parent), h.host.view().sessions.len()), before);

    for (chat, target) in [(&other_chat, kids[0].clone()), (&parent_chat, other.clone()), (&parent_chat, parent.clone()), (&parent_chat, "ahp-session:/nobody".to_owned())] {
        let e = h.tool(chat, HostToolRequest::ChildStatus { child: target }).expect_err("not a child of the caller");
        assert_eq!(e.code, HostToolErrorCode::NotFound, "{e}");
    }
}

/// With a users directory the tool acts as the parent's owner: a member's
/// session may start a child (owned by the member), a guest's may not
/// (`session:create`).
#[test]
fn a_child_is_made_as_the_parents_owner_would() {
    use ahpd_core::grants::Role;
    let users = users_directory(&[("m", Role::Member)]);
    let mut h = Harness::new(Config { users: Some(users), ..config(0) });
    h.input(ahpd_core::Input::Connected { conn: ahpd_core::ConnId(1) });
    h.input(ahpd_core::Input::Authenticate { conn: ahpd_core::ConnId(1), token: "token-m".into() });
    let r = h.request(1, "initialize", json!({"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "c1"}));
    assert!(r.get("result").is_some(), "{r}");
    let (parent, chat) = h.session_with_turn("p");
    h.settle();
    let (kid, _, _) = make_child(&mut h, &chat, "as m");
    assert_eq!(record(&h, &kid).owner.as_deref(), Some("user:m"));
    let mut disk: Vec<SessionRecord> = [&parent, &kid].iter().map(|u| record(&h, u)).collect();
    disk.sort_by(|x, y| x.resource.cmp(&y.resource));
    // The directory changes its mind about m: now a guest.
    let demoted = users_directory(&[("m", Role::Guest)]);
    let mut h = Harness::with_records(Config { users: Some(demoted), ..config(0) }, disk);
    h.advance(0);
    h.settle();
    let e = h.tool(&chat, child("x")).expect_err("a guest's session may not");
    assert_eq!(e.code, HostToolErrorCode::Forbidden, "{e}");
    assert!(h.store_ops().is_empty());
}

/// A child whose agent will not start never existed: the call is refused
/// `unavailable` and the parent lists nothing.
#[test]
fn a_child_whose_agent_will_not_start_is_refused() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (parent, parent_chat) = h.session_with_turn("p");
    h.settle();
    let n = h.host.view().sessions.len();
    let call = h.tool_call(&parent_chat, child("x"));
    h.settle_store();
    let starts: Vec<_> = h.backend_cmds().into_iter().filter(|(_, _, c)| matches!(c, BackendCmd::Start { .. })).collect();
    assert_eq!(starts.len(), 1);
    h.done(starts[0].0, Outcome::Failed { message: "no such binary".into() });
    let e = h.tool_answer(call).expect("answered").expect_err("refused");
    assert_eq!(e.code, HostToolErrorCode::Unavailable, "{e}");
    assert!(e.message.contains("no such binary"));
    h.settle();
    assert_eq!(h.host.view().sessions.len(), n, "it never existed");
    assert!(record(&h, &parent).tools.is_none_or(|t| t.children.is_empty()));
}

/// A disposed child leaves its parent's list and tells it nothing more; a
/// disposed parent's children are kept, their link dropped.
#[test]
fn dispose_drops_the_link_either_way() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (parent, parent_chat) = h.session_with_turn("p");
    h.settle();
    let (a, a_chat, a_turn) = make_child(&mut h, &parent_chat, "a");
    let (b, _, b_turn) = make_child(&mut h, &parent_chat, "b");
    h.agent_reply(&a_chat, &a_turn, "a done");
    h.settle();
    let rid = h.send_request(1, "disposeSession", json!({"channel": a}));
    h.settle();
    assert_eq!(h.take_reply(1, rid).expect("reply")["result"], Value::Null);
    let children: Vec<String> = record(&h, &parent).tools.map(|t| t.children.into_iter().map(|c| c.session).collect()).unwrap_or_default();
    assert_eq!(children, vec![b.clone()], "a left the list");
    let _ = b_turn;
    let rid = h.send_request(1, "disposeSession", json!({"channel": parent}));
    h.settle();
    assert_eq!(h.take_reply(1, rid).expect("reply")["result"], Value::Null);
    assert!(h.host.view().sessions.get(&b).is_some(), "the child is kept");
    assert!(record(&h, &b).tools.is_none_or(|t| t.parent.is_none()), "its link dropped");
}

/// A child's turn ends while its parent is being disposed, and the store
/// refuses the dispose: the parent stays (asleep), and the finish the
/// dispose held back reaches it once, waking it. Before the fix the finish
/// was numbered and never delivered (sim seed 1661 on the files branch).
#[test]
fn a_finish_held_by_a_refused_dispose_reaches_the_parent() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (parent, parent_chat) = h.session_with_turn("p");
    h.settle();
    let (kid, kid_chat, turn) = make_child(&mut h, &parent_chat, "a long job");
    let parent_key = record(&h, &parent).key().into_owned();
    let rid = h.send_request(1, "disposeSession", json!({"channel": parent}));
    // The dispose's write waits; meanwhile the child ends its turn.
    let held: Vec<_> = h.store_ops();
    assert!(!held.is_empty(), "the dispose wrote to the store");
    reply_unsettled(&mut h, &kid_chat, &turn, "done meanwhile");
    for (op, command) in held {
        let parents = match &command {
            StoreCmd::Put { record, .. } => record.key() == parent_key,
            StoreCmd::Delete { key } => *key == parent_key,
            _ => false,
        };
        h.done(op, if parents { Outcome::Failed { message: "disk full".into() } } else { Outcome::Ok });
    }
    let cmds = h.settle();
    let reply = h.take_reply(1, rid).expect("the dispose was answered");
    assert!(reply["error"]["message"].as_str().is_some_and(|m| m.contains("disk full")), "{reply}");
    assert!(h.host.view().sessions.get(&parent).is_some(), "the parent is kept");
    let told: Vec<_> = sends(&cmds).into_iter().filter(|s| s.0 == parent_chat).collect();
    assert_eq!(told.len(), 1, "told once: {told:?}");
    assert!(told[0].2.starts_with("childFinished") && told[0].2.contains("done meanwhile") && told[0].2.contains(&kid), "{}", told[0].2);
    assert_eq!(phase(&h, &parent), "live", "the finish woke the parent");
}
