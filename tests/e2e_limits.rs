//! End-to-end checks of the host's bounds (issue 11) against the real
//! daemon: connections in total, a client that stops reading, and hostile
//! ids that must touch nothing beside the data directory.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ahp::ahp_types::actions::StateAction;
use ahp::ahp_types::commands::{DisposeSessionParams, ReconnectResult};
use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// Reads text frames from a raw socket until it ends; returns them.
async fn read_to_end<S>(ws: &mut S) -> Vec<Value>
where
    S: futures_util::Stream<Item = Result<WsMessage, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    read_to_close(ws).await.0
}

/// Reads text frames from a raw socket until it ends; returns them and the
/// close frame's code and reason, if one came.
async fn read_to_close<S>(ws: &mut S) -> (Vec<Value>, Option<(u16, String)>)
where
    S: futures_util::Stream<Item = Result<WsMessage, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let mut frames = Vec::new();
    let mut close = None;
    within("the socket ends", async {
        while let Some(Ok(m)) = ws.next().await {
            match m {
                WsMessage::Text(t) => frames.push(serde_json::from_str::<Value>(t.as_str()).unwrap_or(Value::Null)),
                WsMessage::Close(frame) => {
                    close = frame.map(|f| (u16::from(f.code), f.reason.as_str().to_owned()));
                    break;
                }
                _ => {}
            }
        }
    })
    .await;
    (frames, close)
}

/// A connection over `connections_max` reads a -32600 error frame saying
/// so and is closed; the operator's log says so; the place comes back when
/// an admitted client leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_read_why_and_the_place_comes_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start_with(&tmp.path().join("data"), &["--limit-connections-max", "2"]);
    let (a, _, _) = connect_init(&daemon.url, "a").await;
    let (b, _, _) = connect_init(&daemon.url, "b").await;

    let (mut ws, _) = within("raw connect", tokio_tungstenite::connect_async(daemon.url.as_str())).await.expect("raw connect");
    let (frames, close) = read_to_close(&mut ws).await;
    // Closed with 1013 "try again later" and a reason, not dropped
    // silently (issue 25; docs/DECISIONS.md, 28).
    let (code, reason) = close.expect("a close frame with a code");
    assert_eq!(code, 1013, "{reason}");
    assert!(reason.contains("connection limit"), "{reason}");
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], Value::Null);
    assert_eq!(frames[0]["error"]["code"], -32600);
    assert!(frames[0]["error"]["message"].as_str().unwrap_or("").contains("connection limit"), "{frames:?}");
    assert!(daemon.log_text().contains("limit.connections"), "the refusal is logged");
    within("ping a", a.ping()).await.expect("the admitted clients are served");

    // One admitted client leaves: a new one gets in (once the daemon has
    // seen the close).
    b.shutdown().await;
    drop(b);
    let c = within("a place comes back", async {
        loop {
            let c = connect(&daemon.url).await;
            match c.initialize("c".to_owned(), vec!["1.0.0".to_owned()], vec![]).await {
                Ok(_) => return c,
                Err(_) => {
                    c.shutdown().await;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
        }
    })
    .await;
    within("ping c", c.ping()).await.expect("ping");
}

/// A daemon on a fresh data directory with `outgoing_buffer_max_bytes` at
/// `bound` bytes; the directory lives as long as the returned guard.
fn daemon_with_outgoing_bound(bound: usize) -> (tempfile::TempDir, Daemon) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start_with(&tmp.path().join("data"), &["--limit-outgoing-buffer-max-bytes", &bound.to_string()]);
    (tmp, daemon)
}

/// The daemon's resident set size, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A client that subscribes and then never reads is dropped once its
/// unread frames pass the bound; a client that reads keeps being served
/// and the daemon's memory does not follow the stuck client's backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_is_dropped_and_others_are_served() {
    const BOUND: usize = 1 << 20;
    const TEXT_BYTES: usize = 256 << 10;
    const MAX_TURNS: usize = 80;
    let (_tmp, daemon) = daemon_with_outgoing_bound(BOUND);
    let (c, _, _) = connect_init(&daemon.url, "reader").await;
    let (sid, chat, _ssub, mut chat_state, mut csub) = new_session(&c).await;
    let rss_before = rss_kib(daemon.child.id());

    // The slow client: initializes with the chat subscribed, then reads
    // nothing more.
    let (mut slow, _) = within("raw connect", tokio_tungstenite::connect_async(daemon.url.as_str())).await.expect("raw connect");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "slow",
        "initialSubscriptions": ["ahp-root://", sid, chat]}});
    within("slow initialize", slow.send(WsMessage::Text(init.to_string().into()))).await.expect("send");

    let text = "x".repeat(TEXT_BYTES);
    let mut turns = 0;
    while !daemon.log_text().contains("slow client dropped") {
        assert!(turns < MAX_TURNS, "the slow client was not dropped after {turns} turns of {TEXT_BYTES} bytes");
        turns += 1;
        let turn_id = format!("t{turns}");
        within("dispatch", c.dispatch(chat.clone(), user_turn(&turn_id, &text))).await.expect("dispatch");
        follow_chat(&mut csub, &mut chat_state, "turn completes", |e, _| {
            matches!(&e.action, StateAction::ChatTurnComplete(a) if a.turn_id == turn_id)
        })
        .await;
    }
    // The reader goes on being served: a ping and a whole turn.
    within("ping", c.ping()).await.expect("ping after the drop");
    within("dispatch", c.dispatch(chat.clone(), user_turn("after", "still here"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "turn after the drop", |e, _| {
        matches!(&e.action, StateAction::ChatTurnComplete(a) if a.turn_id == "after")
    })
    .await;
    assert_eq!(chat_state.turns.last().map(markdown).as_deref(), Some("Echo: still here"));

    // The slow client sees its socket end once it reads what the kernel
    // held for it, and the core was told it went.
    let _ = read_to_end(&mut slow).await;
    let log = daemon.log_text();
    assert!(log.contains("client disconnected"), "the dropped client's disconnect reached the core");

    // Memory: the stuck client's backlog is bounded, so the daemon grew by
    // the session's own turns and buffers, far from what queuing every
    // frame for it would cost.
    let sent = (turns * TEXT_BYTES * 2) as u64 / 1024;
    let grown = rss_kib(daemon.child.id()).saturating_sub(rss_before);
    assert!(grown < 64 * 1024 + 4 * sent, "RSS grew by {grown} KiB for {sent} KiB of turn text");
}

/// One answer bigger than `outgoing_buffer_max_bytes` (a reconnect's
/// replay or snapshots of a chat holding more than the bound) goes to a
/// client that reads: the bound is on frames piling up unread, not on one
/// answer. Before, the client was dropped as a stuck one would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_answer_over_the_outgoing_bound_reaches_a_client_that_reads() {
    const BOUND: usize = 64 << 10;
    const TEXT_BYTES: usize = 40 << 10;
    let (_tmp, daemon) = daemon_with_outgoing_bound(BOUND);
    let (c, _, _) = connect_init(&daemon.url, "writer").await;
    let (_sid, chat, _ssub, mut chat_state, mut csub) = new_session(&c).await;
    // The chat now holds a message and its echo, each 40 KiB: more than
    // the bound together.
    run_turn(&c, &chat, &mut chat_state, &mut csub, "big", &"x".repeat(TEXT_BYTES)).await;

    let late = connect(&daemon.url).await;
    let answer = within("reconnect", late.reconnect("late".to_owned(), 0, vec![chat.clone()])).await.expect("the reconnect is answered");
    let size = serde_json::to_string(&answer).map(|t| t.len()).unwrap_or_default();
    assert!(size > BOUND, "the answer ({size} bytes) is over the bound ({BOUND})");
    within("ping", late.ping()).await.expect("the client is still served after the big answer");
    assert!(!daemon.log_text().contains("slow client dropped"), "nobody was dropped");
}

/// Runs one turn of `text` in `chat` to its end; returns the `serverSeq`
/// of the envelope that completed it.
async fn run_turn(c: &ahp::Client, chat: &str, state: &mut ahp::ahp_types::state::ChatState, sub: &mut ahp::SessionSubscription, turn_id: &str, text: &str) -> u64 {
    within("dispatch", c.dispatch(chat.to_owned(), user_turn(turn_id, text))).await.expect("dispatch");
    let seen = follow_chat(sub, state, "turn completes", |e, _| matches!(&e.action, StateAction::ChatTurnComplete(a) if a.turn_id == turn_id)).await;
    seen.last().map(|e| e.server_seq as u64).unwrap_or_default()
}

/// Asks a fresh connection for a `reconnect` from `last_seen` on `channels`.
async fn reconnect_from(url: &str, last_seen: u64, channels: &[String]) -> ReconnectResult {
    let c = connect(url).await;
    let result = within("reconnect", c.reconnect("again".to_owned(), last_seen as i64, channels.to_vec())).await.expect("reconnect");
    c.shutdown().await;
    result
}

/// Issue 25: the replay buffer is bounded in bytes (16 MiB by default), not
/// only by count. Before, it kept its last 1,000 envelopes whatever their
/// size, so after eleven turns of ~900 KB in another session (each carried
/// twice: the message and the echoed reply, ~20 MB in all, a few dozen
/// envelopes) a reconnect from before them was still replayed. Now the oldest go past
/// 16 MiB: a reconnect from before the big turns gets snapshots (AHP's
/// rule when the buffer no longer covers it), one from after them is still
/// replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_buffer_keeps_at_most_its_bytes_and_an_older_reconnect_gets_snapshots() {
    const TEXT_BYTES: usize = 900 << 10;
    const BIG_TURNS: usize = 11;
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _root) = connect_init(&daemon.url, "writer").await;
    let (sid, chat, _ssub, mut state, mut csub) = new_session(&c).await;
    let channels = vec![sid.clone(), chat.clone()];

    // A small turn, then another: a reconnect from between them is replayed.
    let before_small = run_turn(&c, &chat, &mut state, &mut csub, "small-1", "hello").await;
    run_turn(&c, &chat, &mut state, &mut csub, "small-2", "hello again").await;
    match reconnect_from(&daemon.url, before_small, &channels).await {
        ReconnectResult::Replay(r) => assert!(
            r.actions.iter().any(|e| matches!(&e.action, StateAction::ChatTurnComplete(a) if a.turn_id == "small-2")),
            "the replay carries the turn missed: {:?}",
            r.actions.iter().map(|e| e.server_seq).collect::<Vec<_>>()
        ),
        other => panic!("a reconnect within the window is replayed, got {other:?}"),
    }

    // Big turns in another session, far past 16 MiB of envelopes but far
    // below 1,000 of them. (The buffer is one for the host; the reconnect
    // below names only the small session, whose snapshot stays small: a
    // reply over `outgoing_buffer_max_bytes` would drop the client.)
    let (_big_sid, big_chat, _bsub, mut big_state, mut big_csub) = new_session(&c).await;
    let text = "x".repeat(TEXT_BYTES);
    for n in 0..BIG_TURNS {
        run_turn(&c, &big_chat, &mut big_state, &mut big_csub, &format!("big-{n}"), &text).await;
    }
    assert_eq!(big_state.turns.len(), BIG_TURNS);
    match reconnect_from(&daemon.url, before_small, &channels).await {
        ReconnectResult::Snapshot(s) => {
            let got: Vec<&str> = s.snapshots.iter().map(|s| s.resource.as_str()).collect();
            assert!(got.contains(&chat.as_str()) && got.contains(&sid.as_str()), "snapshots of both channels: {got:?}");
        }
        ReconnectResult::Replay(r) => panic!(
            "a reconnect from before ~20 MB of envelopes was replayed ({} envelopes): the buffer kept more than its byte bound",
            r.actions.len()
        ),
    }
    // What came after the big turns is within the window: still replayed.
    let after_big = run_turn(&c, &chat, &mut state, &mut csub, "small-3", "after the big ones").await;
    run_turn(&c, &chat, &mut state, &mut csub, "small-4", "and one more").await;
    match reconnect_from(&daemon.url, after_big, &channels).await {
        ReconnectResult::Replay(r) => assert!(
            r.actions.iter().any(|e| matches!(&e.action, StateAction::ChatTurnComplete(a) if a.turn_id == "small-4")),
            "the turn after the big ones is replayed"
        ),
        other => panic!("a reconnect from after the big turns is replayed, got {other:?}"),
    }
    within("ping", c.ping()).await.expect("the writer is still served");
}

// ---------------------------------------------------------------------------
// Hostile ids and the canary directory
// ---------------------------------------------------------------------------

/// Every file and folder under `dir`: relative path → (is_dir, contents,
/// mtime in ns).
fn tree(dir: &Path) -> BTreeMap<PathBuf, (bool, Vec<u8>, i128)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (bool, Vec<u8>, i128)>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            // A live daemon's atomic writes (`.<name>.tmp-<pid>-<n>`, then a
            // rename) come and go while the walk runs: they are not what
            // the daemon keeps, and one may vanish between the listing and
            // its stat.
            if entry.file_name().to_string_lossy().contains(".tmp-") {
                continue;
            }
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("stat {}: {e}", path.display()),
            };
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128);
            let rel = path.strip_prefix(root).expect("under root").to_path_buf();
            if meta.is_dir() {
                out.insert(rel, (true, Vec::new(), mtime));
                walk(root, &path, out);
            } else {
                out.insert(rel, (false, std::fs::read(&path).unwrap_or_default(), mtime));
            }
        }
    }
    let mut out = BTreeMap::new();
    let meta = std::fs::metadata(dir).expect("stat root");
    let mtime = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos() as i128);
    out.insert(PathBuf::new(), (true, Vec::new(), mtime));
    walk(dir, dir, &mut out);
    out
}

/// The names under `dir` (what exists, not what it holds).
fn names(dir: &Path) -> Vec<PathBuf> {
    tree(dir).into_keys().collect()
}


/// The hostile ids of issue 11, plus two aimed at the canary itself.
fn hostile_ids() -> Vec<String> {
    let mut ids: Vec<String> = ["../x", "..", ".", "a/b", "a\\b", "/etc/passwd", "%2e%2e%2f", "a\u{0}b", "", "CON", "../../canary", "../../canary/secret.txt"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    ids.push("a".repeat(300));
    ids
}

/// Every hostile id through createSession, disposeSession, subscribe, chat
/// URIs (createChat, subscribe, dispatchAction) and `ahpd session
/// export|import`: each refused, the canary beside the data dir unchanged
/// byte for byte (names, contents, mtimes), nothing new in the data dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_ids_touch_nothing_beside_or_in_the_data_dir() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let canary = tmp.path().join("canary");
    std::fs::create_dir_all(canary.join("sub")).expect("canary dir");
    std::fs::write(canary.join("secret.txt"), b"do not touch\n").expect("canary file");
    std::fs::write(canary.join("sub").join("x"), b"nor this\n").expect("canary file");
    let canary_before = tree(&canary);

    let mut daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "hostile").await;
    // One real session, so there is a record and a transcript to export.
    let (sid, chat, _ssub, mut chat_state, mut csub) = new_session(&c).await;
    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "hello"))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "first turn", |e, _| is_turn_complete(e)).await;
    let data_before = names(&data);

    for bad in hostile_ids() {
        for uri in [format!("ahp-session:/{bad}"), bad.clone()] {
            let e = rpc_error(create(&c, &uri).await);
            assert_eq!(e.code, -32602, "createSession {uri:?}: {e:?}");
            let dispose = DisposeSessionParams { channel: uri.clone(), meta: None };
            let e = rpc_error(within("disposeSession", c.request::<_, Value>("disposeSession", dispose)).await);
            assert!(e.code == -32602 || e.code == -32001, "disposeSession {uri:?}: {e:?}");
            let e = rpc_error(within("subscribe", c.request::<_, Value>("subscribe", json!({"channel": uri}))).await);
            assert!(e.code == -32602 || e.code == -32001, "subscribe {uri:?}: {e:?}");
        }
        for chat_uri in [format!("ahp-chat:/{bad}"), format!("{sid}/{bad}"), bad.clone()] {
            let r = within("createChat", c.request::<_, Value>("createChat", json!({"channel": sid, "chat": chat_uri}))).await;
            assert_eq!(rpc_error(r).code, -32602, "createChat {chat_uri:?}");
            let e = rpc_error(within("subscribe chat", c.request::<_, Value>("subscribe", json!({"channel": chat_uri}))).await);
            assert!(e.code == -32602 || e.code == -32001, "subscribe {chat_uri:?}: {e:?}");
            // A turn sent to it is a notification: nothing answers, nothing
            // may be written.
            let _ = within("dispatch hostile", c.dispatch(chat_uri.clone(), user_turn("h", "hello"))).await;
        }
    }
    within("ping", c.ping()).await.expect("the daemon still serves");
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

    // The offline CLI: export refuses the URI before reading anything;
    // import refuses a document whose id is hostile before writing anything.
    let d = data.to_str().expect("utf-8 path");
    let out = ahpd_cli(&["session", "export", &sid, "--data-dir", d], None);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let good: Value = serde_json::from_slice(&out.stdout).expect("export is JSON");
    let data_before_cli = names(&data);
    for bad in hostile_ids() {
        if bad.contains('\0') {
            // A NUL cannot travel in argv; it goes through import below.
        } else {
            for uri in [format!("ahp-session:/{bad}"), bad.clone()] {
                let out_file = tmp.path().join("export-out.json");
                let out = ahpd_cli(&["session", "export", &uri, "--data-dir", d, "-o", out_file.to_str().expect("utf-8")], None);
                assert_ne!(out.status.code(), Some(0), "export {uri:?} was accepted");
                assert!(!out.stderr.is_empty(), "export {uri:?} says why");
                assert!(!out_file.exists(), "export {uri:?} wrote a file");
            }
        }
        for id in [format!("ahp-session:/{bad}"), bad.clone()] {
            let mut doc = good.clone();
            doc["id"] = Value::String(id.clone());
            let bytes = serde_json::to_vec(&doc).expect("JSON");
            let out = ahpd_cli(&["session", "import", "-", "--data-dir", d], Some(&bytes));
            assert_eq!(out.status.code(), Some(1), "import {id:?}: {}", String::from_utf8_lossy(&out.stderr));
            assert!(!out.stderr.is_empty(), "import {id:?} says why");
        }
    }

    assert_eq!(tree(&canary), canary_before, "the canary directory changed");
    let data_after = names(&data);
    assert_eq!(data_after, data_before_cli, "the CLI created or removed something in the data dir");
    let new: Vec<_> = data_after.iter().filter(|p| !data_before.contains(p)).collect();
    assert!(new.is_empty(), "new files in the data dir: {new:?}");
    let parent: Vec<_> = std::fs::read_dir(tmp.path()).expect("read tmp").flatten().map(|e| e.file_name()).collect();
    for name in &parent {
        let name = name.to_string_lossy();
        assert!(["data", "canary", "data.log", "data.config"].contains(&name.as_ref()), "unexpected {name} beside the data dir");
    }
}

/// Issue 25: a session title over the cap (1,024 bytes by default) is
/// refused: the sender's echo carries a reason naming the field and the
/// cap, nothing is stored (the list keeps the old title, across a restart)
/// and nothing is broadcast (a watcher of the root hears the next title
/// change, never the refused one). A title at the cap is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_title_over_the_cap_is_refused_naming_the_field_and_the_cap() {
    use ahp::ahp_types::actions::SessionTitleChangedAction;
    use ahp::SubscriptionEvent;
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "namer").await;
    let (watcher, _, mut root) = connect_init(&daemon.url, "watcher").await;
    let (sid, chat, mut ssub, _, mut csub) = new_session(&c).await;
    turn(&c, &chat, &mut csub, "t1", "hello").await;
    let titled = |title: &str| StateAction::SessionTitleChanged(SessionTitleChangedAction { title: title.to_owned() });

    within("dispatch", c.dispatch(sid.clone(), titled(&"x".repeat(1025)))).await.expect("dispatch");
    let reason = wait_for(&mut ssub, "the refused title's echo", |e| match e {
        SubscriptionEvent::Action(env) if matches!(env.action, StateAction::SessionTitleChanged(_)) => env.rejection_reason,
        _ => None,
    })
    .await;
    assert!(reason.contains("title") && reason.contains("1025 bytes") && reason.contains("1024 bytes"), "{reason}");
    let at_cap = "y".repeat(1024);
    within("dispatch", c.dispatch(sid.clone(), titled(&at_cap))).await.expect("dispatch");
    let mut heard = Vec::new();
    wait_for(&mut root, "the title taken, on the root", |e| match e {
        SubscriptionEvent::SessionSummaryChanged(p) if p.session == sid => {
            let title = p.changes.title?;
            heard.push(title.clone());
            (title == at_cap).then_some(())
        }
        _ => None,
    })
    .await;
    assert!(heard.iter().all(|t| t.len() <= 1024), "the refused title was never broadcast: {:?}", heard.iter().map(String::len).collect::<Vec<_>>());
    let row = list(&c).await.into_iter().find(|r| r.resource == sid).expect("listed");
    assert_eq!(row.title, at_cap);
    drop(watcher);
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly");
    let daemon = Daemon::start(&data);
    let (c, _, _) = connect_init(&daemon.url, "again").await;
    assert_eq!(list(&c).await.into_iter().find(|r| r.resource == sid).expect("listed").title, at_cap, "stored as taken");
}

/// Issue 25: a message over a cap is refused naming the field and the cap:
/// `createChat` with a first message whose text or attachments are too big
/// answers -32602 and makes no chat; a turn with attachments too big is
/// echoed back unapplied with the reason. (Caps set small by flag.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_its_caps_is_refused_naming_the_field_and_the_cap() {
    use ahp::ahp_types::commands::CreateChatParams;
    use ahp::ahp_types::state::{Message, MessageKind, MessageOrigin};
    use ahp::SubscriptionEvent;
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start_with(
        &tmp.path().join("data"),
        &["--limit-message-text-max-bytes", "100", "--limit-message-attachments-max-bytes", "200"],
    );
    let (c, _, _) = connect_init(&daemon.url, "sender").await;
    let (sid, chat, _ssub, _, mut csub) = new_session(&c).await;
    turn(&c, &chat, &mut csub, "t1", "hello").await;
    let message = |text: &str, label_len: usize| -> Message {
        let attachments = (label_len > 0).then(|| vec![serde_json::from_value(json!({"type": "simple", "label": "a".repeat(label_len)})).expect("attachment")]);
        Message { text: text.to_owned(), origin: MessageOrigin { kind: MessageKind::User }, attachments, model: None, agent: None, meta: None }
    };
    for (m, field, cap) in [(message(&"t".repeat(101), 0), "initialMessage.text", "100 bytes"), (message("hi", 300), "initialMessage.attachments", "200 bytes")] {
        let new_chat = format!("ahp-chat:/{}", fresh_id());
        let params = CreateChatParams { channel: sid.clone(), meta: None, chat: new_chat.clone(), initial_message: Some(m), source: None, working_directories: None };
        let e = rpc_error(within("createChat", c.request::<_, Value>("createChat", params)).await);
        assert_eq!(e.code, -32602, "{e:?}");
        assert!(e.message.contains(field) && e.message.contains(cap), "{e:?}");
        let (state, _) = subscribe_session(&c, &sid).await;
        assert!(state.chats.iter().all(|c| c.resource != new_chat), "no chat was made");
    }
    let mut big = user_turn("t2", "hi");
    if let StateAction::ChatTurnStarted(a) = &mut big {
        a.message = message("hi", 300);
    }
    within("dispatch", c.dispatch(chat.clone(), big)).await.expect("dispatch");
    let reason = wait_for(&mut csub, "the refused turn's echo", |e| match e {
        SubscriptionEvent::Action(env) if matches!(env.action, StateAction::ChatTurnStarted(_)) => env.rejection_reason,
        _ => None,
    })
    .await;
    assert!(reason.contains("message.attachments") && reason.contains("200 bytes"), "{reason}");
}

/// Issue 25: `createSession` refuses a working directory that is not a
/// `file:` URI of an existing directory with -32602 naming the folder: a
/// bare path, an `http:` URI, a folder that does not exist, a file. A real
/// folder is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_session_refuses_a_folder_that_is_not_a_file_uri_of_a_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("data"));
    let (c, _, _) = connect_init(&daemon.url, "folders").await;
    let dir = tmp.path().join("work");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("notes.txt");
    std::fs::write(&file, b"x").expect("write");
    let cases = [
        (dir.display().to_string(), "not a file: URI"),
        ("http://example.com/work".to_owned(), "not a file: URI"),
        (file_uri(&dir.join("missing")), "does not exist"),
        (file_uri(&file), "is not a directory"),
    ];
    for (folder, words) in cases {
        let sid = format!("ahp-session:/{}", fresh_id());
        let params = json!({"channel": sid, "provider": "echo", "workingDirectories": [folder]});
        let e = rpc_error(within("createSession", c.request::<_, Value>("createSession", params)).await);
        assert_eq!(e.code, -32602, "{folder}: {e:?}");
        assert!(e.message.contains(words) && e.message.contains(&folder), "{folder}: {e:?}");
        let e = rpc_error(within("subscribe", c.subscribe(sid.clone())).await.map(|(r, _)| r));
        assert_ne!(e.code, 0, "{folder}: the session never existed");
    }
    let sid = format!("ahp-session:/{}", fresh_id());
    let params = json!({"channel": sid, "provider": "echo", "workingDirectories": [file_uri(&dir)]});
    let r: Value = within("createSession", c.request("createSession", params)).await.expect("a real folder is taken");
    assert_eq!(r, Value::Null);
}
