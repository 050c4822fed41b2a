//! Workspace awareness end to end (issue 10): live sessions of one or more
//! daemons see each other through the registry directory, are warned when
//! their claims overlap, wait for approval before writing a path another
//! session claims (`coordinate`), and stop seeing a session whose process
//! died. A session's `_meta` shows its peers in short (their count, the
//! events each change brings, warnings by kind); `ahpd/listPeers` answers
//! the records, the warnings one by one and the last events.

mod common;

use std::path::{Path, PathBuf};

use ahp::ahp_types::commands::CreateSessionParams;
use ahp::ahp_types::state::{ChatState, SessionState, TurnState};
use ahp::{Client, SessionSubscription, SubscriptionEvent};
use common::*;
use serde_json::{json, Value};

/// Creates an echo session working in `dir` with `sessionAwareness` =
/// `tier`, subscribed to the session and its default chat.
async fn session_in(c: &Client, dir: &Path, tier: &str) -> (String, String, SessionState, SessionSubscription, ChatState, SessionSubscription) {
    let sid = format!("ahp-session:/{}", fresh_id());
    let mut config = serde_json::Map::new();
    config.insert("sessionAwareness".to_owned(), Value::String(tier.to_owned()));
    let params = CreateSessionParams {
        channel: sid.clone(),
        meta: None,
        provider: Some("echo".to_owned()),
        working_directories: Some(vec![format!("file://{}", dir.display())]),
        config: Some(config),
        active_client: None,
        progress_token: None,
    };
    let created: Value = within("createSession", c.request("createSession", params)).await.expect("createSession");
    assert_eq!(created, Value::Null);
    let (state, ssub) = subscribe_session(c, &sid).await;
    let chat = default_chat(&state);
    let (chat_state, csub) = subscribe_chat(c, &chat).await;
    (sid, chat, state, ssub, chat_state, csub)
}

/// Applies session actions to `state` until its `_meta` satisfies `done`.
async fn wait_meta(sub: &mut SessionSubscription, state: &mut SessionState, what: &str, mut done: impl FnMut(&serde_json::Map<String, Value>) -> bool) {
    if state.meta.as_ref().is_some_and(|m| done(m)) {
        return;
    }
    within(what, async {
        loop {
            match sub.recv().await {
                Some(SubscriptionEvent::Action(env)) => {
                    let _ = ahp::reducers::apply_action_to_session(state, &env.action);
                    if state.meta.as_ref().is_some_and(|m| done(m)) {
                        return;
                    }
                }
                Some(_) => {}
                None => panic!("session subscription closed while waiting for {what}"),
            }
        }
    })
    .await
}

/// What `ahpd/listPeers` answers for `sid`.
async fn list_peers(c: &Client, sid: &str) -> Value {
    within("listPeers", c.request("ahpd/listPeers", json!({ "channel": sid }))).await.expect("listPeers")
}

/// Asks `ahpd/listPeers` for `sid` until its answer satisfies `done`.
async fn wait_listed(c: &Client, sid: &str, what: &str, mut done: impl FnMut(&Value) -> bool) -> Value {
    within(what, async {
        loop {
            let listed = c.request::<_, Value>("ahpd/listPeers", json!({ "channel": sid })).await.expect("listPeers");
            if done(&listed) {
                return listed;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
}

/// The peer records a `listPeers` answer lists.
fn peers(listed: &Value) -> Vec<Value> {
    listed["peers"].as_array().cloned().unwrap_or_default()
}

fn peer_claims(listed: &Value, peer: &str, path: &str) -> bool {
    peers(listed).iter().any(|p| p["session"] == peer && p["claims"].as_array().is_some_and(|c| c.iter().any(|x| x == path)))
}

/// Whether `_meta` shows an event of `kind` about `peer` (the events the
/// latest change brought, grouped by kind).
fn shows_event(meta: &serde_json::Map<String, Value>, kind: &str, peer: &str) -> bool {
    meta.get("ahpd.awarenessEvents").and_then(|c| c.get(kind)).and_then(Value::as_array).is_some_and(|peers| peers.iter().any(|p| p == peer))
}

/// Runs `/write src/a.ts` in a chat to its end, approving nothing.
async fn write_turn(c: &Client, chat: &str, csub: &mut SessionSubscription, chat_state: &mut ChatState, turn_id: &str) {
    within("dispatch", c.dispatch(chat.to_owned(), user_turn(turn_id, "/write src/a.ts"))).await.expect("dispatch");
    follow_chat(csub, chat_state, "write turn", |env, _| is_turn_complete(env)).await;
    let turn = chat_state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete);
    assert!(markdown(turn).contains("Echo: wrote src/a.ts"), "{turn:?}");
}

fn workspace(tmp: &Path) -> (PathBuf, String) {
    let ws = tmp.join("ws");
    std::fs::create_dir_all(&ws).expect("workspace");
    let claim = ws.join("src/a.ts").display().to_string();
    (ws, claim)
}

/// Two sessions of one daemon in one workspace both write `src/a.ts`
/// (`warn` tier): the second sees the first as a peer claiming it, writes
/// without a pause, and is warned of the overlap; `ahpd/listPeers` lists the
/// peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warn_tier_warns_the_second_writer_of_an_overlap() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ws, claim) = workspace(tmp.path());
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _root) = connect_init(&daemon.url, "aware-warn").await;
    let (sid_a, chat_a, _sa, _ssub_a, mut cs_a, mut csub_a) = session_in(&c, &ws, "warn").await;
    let (sid_b, chat_b, mut sb, mut ssub_b, mut cs_b, mut csub_b) = session_in(&c, &ws, "warn").await;

    write_turn(&c, &chat_a, &mut csub_a, &mut cs_a, "a1").await;
    assert!(Path::new(&claim).exists(), "the echo agent wrote {claim}");
    // listPeers has A's claim (A may have written it before B's first scan,
    // so B may hear of A as joined with its claim, not as updated).
    let listed = wait_listed(&c, &sid_b, "B sees A claim src/a.ts", |l| peer_claims(l, &sid_a, &claim)).await;
    let events = listed["events"].as_array().cloned().unwrap_or_default();
    assert!(events.iter().any(|e| e["type"] == "session_peer_joined" && e["peer"] == sid_a.as_str()), "{events:?}");
    wait_meta(&mut ssub_b, &mut sb, "B's _meta counts its one peer", |m| m.get("ahpd.peers").is_some_and(|p| p["count"] == 1)).await;
    let meta = sb.meta.clone().unwrap_or_default();
    assert_eq!(meta["ahpd.awareness"]["tier"], "warn");

    write_turn(&c, &chat_b, &mut csub_b, &mut cs_b, "b1").await;
    wait_meta(&mut ssub_b, &mut sb, "B warned of an overlap", |m| {
        m.get("ahpd.awarenessWarnings").and_then(Value::as_array).is_some_and(|ws| ws.iter().any(|w| w["kind"] == "pathOverlap" && w["count"] == 1))
    })
    .await;
    let listed = list_peers(&c, &sid_b).await;
    let warnings = listed["warnings"].as_array().cloned().unwrap_or_default();
    assert!(
        warnings.iter().any(|w| w["kind"] == "pathOverlap" && w["peer"] == sid_a.as_str() && w["paths"][0] == claim.as_str()),
        "{warnings:?}"
    );
    assert_eq!(listed["tier"], "warn");
    let listed_peers = listed["peers"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed_peers.len(), 1, "{listed}");
    assert_eq!(listed_peers[0]["session"], sid_a.as_str());
    let bad = within("listPeers bad", c.request::<_, Value>("ahpd/listPeers", json!({ "channel": "not a uri" }))).await;
    assert_eq!(rpc_error(bad).code, -32602);
}

/// The second session is at the `coordinate` tier: its write to a path the
/// first claims waits for approval (InputNeeded); approved, it completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinate_tier_holds_a_conflicting_write_for_approval() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ws, claim) = workspace(tmp.path());
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _root) = connect_init(&daemon.url, "aware-coord").await;
    let (sid_a, chat_a, _sa, _ssub_a, mut cs_a, mut csub_a) = session_in(&c, &ws, "warn").await;
    let (sid_b, chat_b, _sb, _ssub_b, mut cs_b, mut csub_b) = session_in(&c, &ws, "coordinate").await;

    write_turn(&c, &chat_a, &mut csub_a, &mut cs_a, "a1").await;
    wait_listed(&c, &sid_b, "B sees A claim src/a.ts", |l| peer_claims(l, &sid_a, &claim)).await;

    within("dispatch", c.dispatch(chat_b.clone(), user_turn("b1", "/write src/a.ts"))).await.expect("dispatch");
    follow_chat(&mut csub_b, &mut cs_b, "write waiting for approval", |_, state| state.status & ACTIVITY == 24).await;
    let pending = pending_confirmation(&cs_b).expect("a write pending confirmation");
    assert_eq!(pending.tool_name, "write_file");
    let warning = pending.meta.as_ref().and_then(|m| m.get("ahpd.awarenessWarning")).and_then(Value::as_str).unwrap_or_default().to_owned();
    assert!(warning.contains(&sid_a) && warning.contains(&claim), "{warning:?}");

    let confirm = confirm_tool("b1", &pending.tool_call_id, true);
    within("dispatch confirm", c.dispatch(chat_b.clone(), confirm)).await.expect("dispatch confirm");
    follow_chat(&mut csub_b, &mut cs_b, "approved write", |env, _| is_turn_complete(env)).await;
    let turn = cs_b.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete);
    assert!(markdown(turn).contains("Echo: wrote src/a.ts"), "{turn:?}");
}

/// A second daemon shares the registry; killed with SIGKILL, its record
/// stays on disk (no reader deletes it) but is judged stale: the peer
/// leaves. A record naming a dead pid, and one naming a live unrelated
/// process (pid 1) with another start time, are never peers. A graceful
/// shutdown removes the daemon's own records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_writer_is_judged_stale_and_leaves() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ws, claim) = workspace(tmp.path());
    let data = tmp.path().join("data");
    let registry = data.join("active-agents");
    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "aware-stale-1").await;
    let (sid_a, _chat_a, mut sa, mut ssub_a, _cs_a, _csub_a) = session_in(&c, &ws, "warn").await;

    // Left-over records in the workspace: a dead pid, and pid 1 (alive,
    // but not the writer: another start time).
    let mut child = std::process::Command::new("true").spawn().expect("spawn true");
    let dead = child.id();
    child.wait().expect("wait");
    for (name, pid) in [("9-dead.json", dead), ("9-init.json", 1)] {
        let record = json!({
            "version": 1, "session": format!("ahp-session:/ghost-{pid}"), "host": daemon_host(),
            "pid": pid, "pidStart": 987_654_321u64, "workingDirectories": [ws.display().to_string()],
            "status": 8, "activity": "ghost", "claims": [claim], "updatedAt": now_ms(),
        });
        std::fs::write(registry.join(name), record.to_string()).expect("write ghost record");
    }

    let data2 = tmp.path().join("data2");
    let mut other = Daemon::start_with(&data2, &["--awareness-dir", registry.to_str().expect("utf-8 path")]);
    let (c2, _, _root2) = connect_init(&other.url, "aware-stale-2").await;
    let (sid_b, _chat_b, _sb, _ssub_b, _cs_b, _csub_b) = session_in(&c2, &ws, "warn").await;
    let listed = wait_listed(&c, &sid_a, "A sees the other daemon's session", |l| peers(l).iter().any(|p| p["session"] == sid_b.as_str())).await;
    assert!(peers(&listed).iter().all(|p| !p["session"].as_str().unwrap_or_default().contains("ghost")), "stale records are not peers: {listed}");
    wait_meta(&mut ssub_a, &mut sa, "A's _meta counts its one peer", |m| m.get("ahpd.peers").is_some_and(|p| p["count"] == 1)).await;
    let before: Vec<String> = ls(&registry);
    assert!(before.iter().any(|n| n.starts_with(&format!("{}-", other.child.id()))), "{before:?}");

    let other_pid = other.child.id();
    other.kill();
    drop(c2);
    wait_meta(&mut ssub_a, &mut sa, "the killed daemon's session leaves", |m| shows_event(m, "session_peer_left", &sid_b)).await;
    assert_eq!(sa.meta.as_ref().expect("meta")["ahpd.peers"]["count"], 0);
    assert!(peers(&list_peers(&c, &sid_a).await).iter().all(|p| p["session"] != sid_b.as_str()));
    // Nobody deleted the dead writer's record: it is judged, not removed.
    assert!(ls(&registry).iter().any(|n| n.starts_with(&format!("{other_pid}-"))));
    assert!(ls(&registry).contains(&"9-dead.json".to_owned()));

    // A graceful shutdown removes this daemon's own records.
    let mine = format!("{}-", daemon.child.id());
    assert!(ls(&registry).iter().any(|n| n.starts_with(&mine)));
    assert!(daemon.terminate().success());
    assert!(!ls(&registry).iter().any(|n| n.starts_with(&mine)), "{:?}", ls(&registry));
    let _ = sid_a;
}

fn ls(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).expect("ls").flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
    names.sort();
    names
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The host name the daemon writes into its records (`host_name` in
/// shell/src/main.rs): the records here pretend to be from this machine.
fn daemon_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
