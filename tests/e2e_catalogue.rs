//! End-to-end tests of the catalogue's second half (Sessions page, "Finding
//! one"): sessions found again from the echo agent's own transcripts after a
//! `--sessions memory` restart, and Claude Code's transcripts listed as
//! external sessions, paged, filtered by `showExternalSessions`, and read
//! safely however hostile or large they are. The real `ahpd` binary on a
//! loopback port, driven by the official `ahp` client.
//!
//! Every await is bounded by [`STEP`]; waits for a background scan poll
//! `listSessions` until [`SCAN_WAIT`].

mod common;

use common::*;

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use ahp::ahp_types::actions::{
    RootConfigChangedAction, SessionIsArchivedChangedAction, SessionIsReadChangedAction,
    StateAction,
};
use ahp::ahp_types::commands::{CreateSessionParams, ListSessionsParams, ListSessionsResult};
use ahp::ahp_types::state::{
    SessionState, SessionSummary, SnapshotState,
};
use ahp::ahp_types::ROOT_RESOURCE_URI;
use ahp::{Client, ClientError, SessionSubscription, SubscriptionEvent};
use serde_json::{json, Value};

/// The longest any single step may take.
/// The longest a background scan may take to show up in a listing.
const SCAN_WAIT: Duration = Duration::from_secs(60);
/// Status bits of the host's own read and archived marks.
const IS_READ: u32 = 32;
const IS_ARCHIVED: u32 = 64;

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

async fn list_page(c: &Client, limit: Option<i64>, cursor: Option<String>) -> Result<ListSessionsResult, ClientError> {
    let params = ListSessionsParams { channel: ROOT_RESOURCE_URI.to_owned(), meta: None, limit, cursor };
    within("listSessions", c.request("listSessions", params)).await
}

/// Every row, walking pages of `limit` to the end; checks the walk ends.
async fn walk(c: &Client, limit: i64) -> Vec<SessionSummary> {
    let mut rows = Vec::new();
    let mut cursor = None;
    for _ in 0..10_000 {
        let page = list_page(c, Some(limit), cursor.take()).await.expect("listSessions page");
        assert!(page.items.len() <= limit as usize, "a page of {} rows for limit {limit}", page.items.len());
        rows.extend(page.items);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return rows,
        }
    }
    panic!("the walk did not end");
}

/// Walks the catalogue until `done` holds of its rows (a background scan
/// has landed), or fails after [`SCAN_WAIT`] with `what`.
async fn wait_rows(c: &Client, what: &str, mut done: impl FnMut(&[SessionSummary]) -> bool) -> Vec<SessionSummary> {
    let deadline = Instant::now() + SCAN_WAIT;
    loop {
        let rows = walk(c, 500).await;
        if done(&rows) {
            return rows;
        }
        assert!(Instant::now() < deadline, "timed out after {SCAN_WAIT:?} waiting for {what}; last listing had {} rows", rows.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn is_external(row: &SessionSummary) -> bool {
    row.meta.as_ref().and_then(|m| m.get("vscode.external")) == Some(&Value::Bool(true))
}

fn claude_rows(rows: &[SessionSummary]) -> Vec<&SessionSummary> {
    rows.iter().filter(|r| r.resource.starts_with("claude:/")).collect()
}

/// Sets the root config's `showExternalSessions` through `root/configChanged`
/// and waits for its echo.
async fn set_mode(c: &Client, root: &mut SessionSubscription, mode: &str) {
    let mut config = serde_json::Map::new();
    config.insert("showExternalSessions".to_owned(), Value::from(mode));
    let action = StateAction::RootConfigChanged(RootConfigChangedAction { config, replace: None });
    within("dispatch root/configChanged", c.dispatch(ROOT_RESOURCE_URI.to_owned(), action)).await.expect("dispatch");
    within("root/configChanged echo", async {
        loop {
            match root.recv().await {
                Some(SubscriptionEvent::Action(env)) => {
                    assert!(env.rejection_reason.is_none(), "root/configChanged rejected: {env:?}");
                    if let StateAction::RootConfigChanged(a) = &env.action {
                        if a.config.get("showExternalSessions") == Some(&Value::from(mode)) {
                            return;
                        }
                    }
                }
                Some(_) => continue,
                None => panic!("root subscription closed"),
            }
        }
    })
    .await;
}

fn rpc_code<T: std::fmt::Debug>(r: Result<T, ClientError>) -> i32 {
    match r {
        Err(ClientError::Rpc(e)) => e.code,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// Waits on `sub` for the first action `pick` accepts.
async fn wait_action(sub: &mut SessionSubscription, what: &str, mut pick: impl FnMut(&StateAction) -> bool) {
    within(what, async {
        loop {
            match sub.recv().await {
                Some(SubscriptionEvent::Action(env)) => {
                    assert!(env.rejection_reason.is_none(), "{what}: rejected: {env:?}");
                    if pick(&env.action) {
                        return;
                    }
                }
                Some(_) => continue,
                None => panic!("subscription closed while waiting for {what}"),
            }
        }
    })
    .await;
}

/// Creates an echo session, has one turn in it, and marks it read and
/// archived. Returns the session and its default chat.
async fn session_with_a_read_archived_turn(c: &Client) -> (String, String) {
    let sid = format!("ahp-session:/{}", fresh_id());
    let params = CreateSessionParams {
        channel: sid.clone(),
        meta: None,
        provider: Some("echo".to_owned()),
        working_directories: Some(vec!["file:///tmp".to_owned()]),
        config: None,
        active_client: None,
        progress_token: None,
    };
    let r: Value = within("createSession", c.request("createSession", params)).await.expect("createSession");
    assert_eq!(r, Value::Null);
    let (r, mut ssub) = within("subscribe session", c.subscribe(sid.clone())).await.expect("subscribe session");
    let session: SessionState = match r.snapshot.map(|s| s.state) {
        Some(SnapshotState::Session(s)) => *s,
        other => panic!("expected a session snapshot, got {other:?}"),
    };
    let chat = session.default_chat.clone().or_else(|| session.chats.first().map(|c| c.resource.clone())).expect("a chat");
    let (_, mut csub) = subscribe_chat(c, &chat).await;
    within("dispatch turn", c.dispatch(chat.clone(), user_turn("t1", "hello"))).await.expect("dispatch");
    wait_action(&mut csub, "the echo turn completes", |a| matches!(a, StateAction::ChatTurnComplete(_))).await;

    let read = StateAction::SessionIsReadChanged(SessionIsReadChangedAction { is_read: true });
    within("dispatch isReadChanged", c.dispatch(sid.clone(), read)).await.expect("dispatch");
    wait_action(&mut ssub, "session/isReadChanged", |a| matches!(a, StateAction::SessionIsReadChanged(_))).await;
    let archived = StateAction::SessionIsArchivedChanged(SessionIsArchivedChangedAction { is_archived: true });
    within("dispatch isArchivedChanged", c.dispatch(sid.clone(), archived)).await.expect("dispatch");
    wait_action(&mut ssub, "session/isArchivedChanged", |a| matches!(a, StateAction::SessionIsArchivedChanged(_))).await;

    let rows = walk(c, 500).await;
    let row = rows.iter().find(|r| r.resource == sid).expect("listed after its first turn");
    assert_eq!(row.status & (IS_READ | IS_ARCHIVED), IS_READ | IS_ARCHIVED, "read and archived: {}", row.status);
    (sid, chat)
}

// ---------------------------------------------------------------------------
// Claude Code transcripts, generated
// ---------------------------------------------------------------------------

/// An ISO timestamp `secs_ago` seconds before now.
fn iso_ago(secs_ago: u64) -> String {
    let t = SystemTime::now() - Duration::from_secs(secs_ago);
    let ms = t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    ahpd_core::WallTime(ms).to_iso()
}

fn user_line(cwd: &str, ts: &str, text: &str) -> String {
    json!({"type": "user", "cwd": cwd, "sessionId": "x", "timestamp": ts, "message": {"role": "user", "content": text}}).to_string()
}

fn assistant_line(cwd: &str, ts: &str, text: &str) -> String {
    json!({"type": "assistant", "cwd": cwd, "timestamp": ts,
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})
    .to_string()
}

/// A UUID-shaped id from a number.
fn uuid(n: u64) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", n, n)
}

fn write_file(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(path, text).expect("write transcript");
}

/// Gives every file `mtime`.
fn set_mtime(path: &Path, mtime: SystemTime) {
    let f = std::fs::OpenOptions::new().write(true).open(path).expect("open for set_modified");
    f.set_modified(mtime).expect("set_modified");
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// `--sessions memory` keeps no records: after a restart the session is
/// found again from the echo agent's own transcript, unread and unarchived,
/// with its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_restart_finds_the_session_again_unread_and_unarchived() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let opts = ["--sessions", "memory", "--claude-projects", ""];
    let mut daemon = Daemon::start_with(&data, &opts);
    let (c, _, _root) = connect_init(&daemon.url, "cat-mem-1").await;
    let (sid, chat) = session_with_a_read_archived_turn(&c).await;
    c.shutdown().await;
    daemon.kill();

    let daemon = Daemon::start_with(&data, &opts);
    let (c, _, _root) = connect_init(&daemon.url, "cat-mem-2").await;
    let rows = wait_rows(&c, "the session found again from its transcript", |rows| rows.iter().any(|r| r.resource == sid)).await;
    let row = rows.iter().find(|r| r.resource == sid).expect("listed");
    assert_eq!(row.status & IS_READ, 0, "a memory restart marks every read session unread: {}", row.status);
    assert_eq!(row.status & IS_ARCHIVED, 0, "a memory restart returns every archived session: {}", row.status);
    assert!(!is_external(row), "this host's own session, not external: {row:?}");
    assert_eq!(row.provider, "echo");
    assert_eq!(row.title, "hello", "the title the transcript holds");
    let (chat_state, _csub) = subscribe_chat(&c, &chat).await;
    assert!(
        chat_state.turns.iter().any(|t| markdown(t).contains("Echo: hello")),
        "the turn comes back from the transcript: {:?}",
        chat_state.turns
    );
    c.shutdown().await;
}

/// The file store (the default) keeps the read and archived bits across the
/// same restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_store_restart_keeps_read_and_archived() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let opts = ["--claude-projects", ""];
    let mut daemon = Daemon::start_with(&data, &opts);
    let (c, _, _root) = connect_init(&daemon.url, "cat-file-1").await;
    let (sid, chat) = session_with_a_read_archived_turn(&c).await;
    c.shutdown().await;
    daemon.kill();

    let daemon = Daemon::start_with(&data, &opts);
    let (c, _, _root) = connect_init(&daemon.url, "cat-file-2").await;
    // Give the first scan time to land: it must not disturb the record.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rows = walk(&c, 500).await;
    let matching: Vec<_> = rows.iter().filter(|r| r.resource == sid).collect();
    assert_eq!(matching.len(), 1, "listed once: {rows:?}");
    assert_eq!(matching[0].status & (IS_READ | IS_ARCHIVED), IS_READ | IS_ARCHIVED, "kept: {}", matching[0].status);
    let (chat_state, _csub) = subscribe_chat(&c, &chat).await;
    assert!(chat_state.turns.iter().any(|t| markdown(t).contains("Echo: hello")), "{:?}", chat_state.turns);
    c.shutdown().await;
}

/// 120 transcripts with identical mtime and identical last timestamp: a
/// walk in pages of 50 yields each exactly once and ends; forged cursors
/// are refused; the default mode `none` lists none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_transcripts_page_exactly_once_and_forged_cursors_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let projects = tmp.path().join("projects");
    let last = iso_ago(3600);
    let first = iso_ago(7200);
    let mtime = SystemTime::now() - Duration::from_secs(1800);
    for n in 0..120u64 {
        // Two folders share one slug's worth of lossy names; attribution is
        // by the cwd inside.
        let cwd = if n % 2 == 0 { "/w/a_b" } else { "/w/a.b" };
        let path = projects.join(format!("-w-a-b-{}", n % 3)).join(format!("{}.jsonl", uuid(n)));
        let text = format!(
            "{}\n{}\n",
            user_line(cwd, &first, &format!("task number {n}")),
            assistant_line(cwd, &last, "done")
        );
        write_file(&path, &text);
        set_mtime(&path, mtime);
    }
    let data = tmp.path().join("data");
    let projects_arg = projects.to_str().expect("utf-8 path").to_owned();
    let daemon = Daemon::start_with(&data, &["--claude-projects", &projects_arg]);
    let (c, init, mut root) = connect_init(&daemon.url, "cat-claude-1").await;
    match init.snapshots.first().map(|s| &s.state) {
        Some(SnapshotState::Root(r)) => {
            let mode = r.config.as_ref().and_then(|c| c.values.get("showExternalSessions"));
            assert_eq!(mode, Some(&Value::from("none")), "the default mode");
        }
        other => panic!("expected a root snapshot, got {other:?}"),
    }
    assert!(claude_rows(&walk(&c, 500).await).is_empty(), "mode none lists no external session");

    set_mode(&c, &mut root, "last30Days").await;
    wait_rows(&c, "120 claude rows", |rows| claude_rows(rows).len() == 120).await;

    let rows = walk(&c, 50).await;
    let ids: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.resource.as_str()).collect();
    assert_eq!(rows.len(), 120, "exactly 120 rows");
    assert_eq!(ids.len(), 120, "120 distinct ids");
    for row in &rows {
        assert!(row.resource.starts_with("claude:/"), "{}", row.resource);
        assert!(is_external(row), "_meta[vscode.external] is true: {row:?}");
        assert_eq!(row.provider, "claude");
        assert_eq!(rows[0].modified_at, row.modified_at, "identical last timestamps");
        let dirs = row.working_directories.clone().unwrap_or_default();
        assert!(dirs == ["file:///w/a_b"] || dirs == ["file:///w/a.b"], "attributed by the cwd inside: {dirs:?}");
        assert!(row.title.starts_with("task number "), "{}", row.title);
    }
    // Paging by hand: three pages, the last without a cursor.
    let p1 = list_page(&c, Some(50), None).await.expect("page 1");
    let cursor = p1.next_cursor.clone().expect("a cursor after page 1");
    let p2 = list_page(&c, Some(50), Some(cursor.clone())).await.expect("page 2");
    let p3 = list_page(&c, Some(50), p2.next_cursor.clone()).await.expect("page 3");
    assert_eq!((p1.items.len(), p2.items.len(), p3.items.len()), (50, 50, 20));
    assert!(p3.next_cursor.is_none(), "the walk ends without nextCursor");

    let mut flipped: Vec<char> = cursor.chars().collect();
    let i = flipped.len() / 2;
    flipped[i] = if flipped[i] == '0' { '1' } else { '0' };
    let flipped: String = flipped.into_iter().collect();
    for bad in ["abc".to_owned(), String::new(), "Infinity".to_owned(), flipped] {
        assert_eq!(rpc_code(list_page(&c, Some(50), Some(bad.clone())).await), -32602, "cursor {bad:?}");
    }

    set_mode(&c, &mut root, "none").await;
    assert!(claude_rows(&walk(&c, 500).await).is_empty(), "back to none: none listed");
    c.shutdown().await;
}

/// Hostile transcripts are all listed, the listing never fails, titles are
/// valid UTF-8 cut on a character boundary (the mode is preset with
/// `--show-external-sessions`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_claude_transcripts_are_listed_and_never_fail_the_listing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let projects = tmp.path().join("projects");
    let slug = projects.join("-w-hostile");
    let cwd = "/w/hostile dir/ü";
    let t0 = iso_ago(600);
    let t1 = iso_ago(300);
    // A half-written last line: no closing brace, no newline.
    write_file(
        &slug.join(format!("{}.jsonl", uuid(1))),
        &format!("{}\n{{\"type\":\"assistant\",\"timestamp\":\"{t1}\",\"message\":{{\"content\":\"cut", user_line(cwd, &t0, "half written")),
    );
    // A malformed line in the middle, valid lines after it.
    write_file(
        &slug.join(format!("{}.jsonl", uuid(2))),
        &format!("{}\nthis is {{ not json\n{}\n", user_line(cwd, &t0, "malformed middle"), assistant_line(cwd, &t1, "later")),
    );
    // A raw U+2028 inside a message.
    write_file(
        &slug.join(format!("{}.jsonl", uuid(3))),
        &format!("{}\n", user_line(cwd, &t0, "line\u{2028}separator")),
    );
    // A lone surrogate escape.
    write_file(
        &slug.join(format!("{}.jsonl", uuid(4))),
        &format!(
            "{{\"type\":\"user\",\"cwd\":\"{cwd}\",\"timestamp\":\"{t0}\",\"message\":{{\"content\":\"bad \\ud83c here\"}}}}\n{}\n",
            user_line(cwd, &t1, "after the surrogate")
        ),
    );
    // A first prompt of 49 letters, an emoji, more text; a 100,000-char message.
    let prompt = format!("{}🦀{}", "a".repeat(49), " and then some more text that goes on");
    write_file(
        &slug.join(format!("{}.jsonl", uuid(5))),
        &format!("{}\n{}\n", user_line(cwd, &t0, &prompt), assistant_line(cwd, &t1, &"z".repeat(100_000))),
    );

    // A first prompt longer than the head the scan reads (a pasted file of
    // 100,000 characters, and one of 70 KB), written in Claude Code's own
    // field order, where `type` and `timestamp` follow the message: the row
    // is still titled by it and attributed by its cwd.
    for (n, len) in [(6, 100_000), (7, 70 * 1024)] {
        let prompt = format!("pasted {n}: {}", "p".repeat(len));
        let first = format!(
            "{{\"parentUuid\":null,\"isSidechain\":false,\"cwd\":{},\"sessionId\":\"x\",\"message\":{{\"role\":\"user\",\"content\":{}}},\"type\":\"user\",\"timestamp\":\"{t0}\"}}",
            json!(cwd),
            json!(prompt)
        );
        write_file(&slug.join(format!("{}.jsonl", uuid(n))), &format!("{first}\n{}\n", assistant_line(cwd, &t1, "read it")));
    }

    let data = tmp.path().join("data");
    let projects_arg = projects.to_str().expect("utf-8 path").to_owned();
    let daemon = Daemon::start_with(&data, &["--claude-projects", &projects_arg, "--show-external-sessions", "last30Days"]);
    let (c, _, _root) = connect_init(&daemon.url, "cat-hostile").await;
    let rows = wait_rows(&c, "7 hostile transcripts", |rows| claude_rows(rows).len() == 7).await;
    let by_id = |n: u64| {
        let uri = format!("claude:/{}", uuid(n));
        claude_rows(&rows).into_iter().find(|r| r.resource == uri).cloned().unwrap_or_else(|| panic!("{uri} listed"))
    };
    for row in claude_rows(&rows) {
        assert!(row.title.chars().count() <= 80, "{:?}", row.title);
        assert!(!row.title.contains('\u{2028}') && !row.title.chars().any(char::is_control), "{:?}", row.title);
        assert_eq!(
            row.working_directories.clone().unwrap_or_default(),
            ["file:///w/hostile%20dir/%C3%BC"],
            "the cwd as a percent-encoded file URI"
        );
        assert!(is_external(row));
    }
    assert_eq!(by_id(1).title, "half written");
    assert_eq!(by_id(2).title, "malformed middle");
    assert_eq!(by_id(2).modified_at.get(..19), t1.get(..19), "the valid line after the bad one counts");
    assert!(by_id(3).title.starts_with("line") && by_id(3).title.ends_with("separator"), "{:?}", by_id(3).title);
    assert_eq!(by_id(4).title, "after the surrogate");
    let emoji = by_id(5).title;
    assert!(emoji.starts_with(&"a".repeat(49)) && emoji.contains('🦀'), "{emoji:?}");
    for n in [6, 7] {
        let title = by_id(n).title;
        assert!(title.starts_with(&format!("pasted {n}: ppp")), "a long first prompt titles its row: {title:?}");
    }
    c.shutdown().await;
}

/// One 100 MB transcript (35,000 progress records of ~3 KB, 14 real
/// messages, a custom title near the end) among 500 small ones: listed with
/// its custom title. Not a timed test: the scan time is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_transcript_among_500_small_ones_is_listed_with_its_custom_title() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let projects = tmp.path().join("projects");
    let cwd = "/w/big";
    let ts = iso_ago(900);
    for n in 0..500u64 {
        let text = format!("{}\n{}\n", user_line("/w/small", &ts, &format!("small {n}")), assistant_line("/w/small", &ts, "ok"));
        write_file(&projects.join(format!("-w-small-{}", n % 10)).join(format!("{}.jsonl", uuid(n))), &text);
    }
    let big_id = uuid(999_999);
    let big = projects.join("-w-big").join(format!("{big_id}.jsonl"));
    std::fs::create_dir_all(big.parent().expect("parent")).expect("mkdir");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&big).expect("create big"));
    let filler = "x".repeat(2900);
    let mut message = 0;
    let mut line = String::with_capacity(4096);
    for i in 0..35_000u32 {
        // 7 messages at the start, 7 at the end; the title 5 lines from the end.
        if !(7..35_000 - 7).contains(&i) {
            let text = format!("message {message}");
            let l = if message % 2 == 0 { user_line(cwd, &ts, &text) } else { assistant_line(cwd, &ts, &text) };
            writeln!(out, "{l}").expect("write");
            message += 1;
        }
        if i == 35_000 - 5 {
            writeln!(out, "{}", json!({"type": "custom-title", "customTitle": "Big one", "sessionId": big_id})).expect("write");
        }
        line.clear();
        let _ = write!(line, "{{\"type\":\"progress\",\"cwd\":\"{cwd}\",\"timestamp\":\"{ts}\",\"toolUseID\":\"t{i}\",\"data\":{{\"output\":\"{filler}\"}}}}");
        writeln!(out, "{line}").expect("write");
    }
    out.flush().expect("flush");
    drop(out);
    let size = std::fs::metadata(&big).expect("stat").len();
    assert!(size >= 100_000_000, "the big transcript is {size} bytes");
    assert_eq!(message, 14);

    let data = tmp.path().join("data");
    let projects_arg = projects.to_str().expect("utf-8 path").to_owned();
    let started = Instant::now();
    let daemon = Daemon::start_with(&data, &["--claude-projects", &projects_arg, "--show-external-sessions", "last7Days"]);
    let (c, _, _root) = connect_init(&daemon.url, "cat-big").await;
    let rows = wait_rows(&c, "501 claude rows", |rows| claude_rows(rows).len() == 501).await;
    eprintln!("501 transcripts (one of {size} bytes) listed {:?} after start", started.elapsed());
    let row = rows.iter().find(|r| r.resource == format!("claude:/{big_id}")).expect("the big one is listed");
    assert_eq!(row.title, "Big one");
    assert_eq!(row.working_directories.clone().unwrap_or_default(), ["file:///w/big"]);
    let first = Instant::now();
    let page = list_page(&c, Some(50), None).await.expect("first page");
    assert_eq!(page.items.len(), 50);
    eprintln!("a 50-row page answered in {:?}", first.elapsed());
    c.shutdown().await;
}
