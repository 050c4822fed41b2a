//! End-to-end tests of what a restart must keep true for every client
//! (issue 19): the real `ahpd` binary on a loopback port, restarted over
//! the same data dir, driven by the official `ahp` client.

mod common;

use common::*;

use ahp::ahp_types::actions::{SessionIsArchivedChangedAction, SessionIsReadChangedAction, StateAction};
use ahp::{SessionSubscription, SubscriptionEvent};
use ahp::ahp_types::notifications::SessionSummaryChangedParams;

/// Status bits (Sessions page, "The state a session reports").
const IN_PROGRESS: u32 = 8;
const IS_READ: u32 = 32;
const IS_ARCHIVED: u32 = 64;

/// The next `root/sessionSummaryChanged` for `sid` on a root subscription.
async fn next_row_change(root: &mut SessionSubscription, sid: &str, what: &str) -> SessionSummaryChangedParams {
    wait_for(root, what, |event| match event {
        SubscriptionEvent::SessionSummaryChanged(p) if p.session == sid => Some(p),
        _ => None,
    })
    .await
}

/// A session read back from the store after a restart is one a second
/// window already holds as a row (from its listing): the first change of
/// that row — archived, read, or a turn starting — must reach it as
/// `root/sessionSummaryChanged`. Before the fix the restored session had no
/// row on record and its first change was only recorded, never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_sessions_first_row_changes_reach_every_root_subscriber() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "writer").await;
    let mut sids = Vec::new();
    for n in 0..3 {
        let (sid, chat, _ssub, _chat, mut csub) = new_session(&c).await;
        turn(&c, &chat, &mut csub, &format!("t{n}"), "hello").await;
        sids.push((sid, chat));
    }
    drop(c);
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

    let daemon = Daemon::start(&data);
    let (writer, _, _wroot) = connect_init(&daemon.url, "writer").await;
    let (watcher, _, mut root) = connect_init(&daemon.url, "watcher").await;
    let listed = list(&watcher).await;
    for (sid, _) in &sids {
        assert!(listed.iter().any(|r| &r.resource == sid), "{sid} not listed after the restart");
    }

    // Archived: the first change of session 0's row.
    let (archived, _) = &sids[0];
    let action = StateAction::SessionIsArchivedChanged(SessionIsArchivedChangedAction { is_archived: true });
    within("dispatch archived", writer.dispatch(archived.clone(), action)).await.expect("dispatch");
    let change = next_row_change(&mut root, archived, "archived row change").await;
    let status = change.changes.status.expect("the change carries the status");
    assert_ne!(status & IS_ARCHIVED, 0, "status {status} lacks IsArchived");

    // Read: the first change of session 1's row.
    let (read, _) = &sids[1];
    let action = StateAction::SessionIsReadChanged(SessionIsReadChangedAction { is_read: true });
    within("dispatch read", writer.dispatch(read.clone(), action)).await.expect("dispatch");
    let change = next_row_change(&mut root, read, "read row change").await;
    let status = change.changes.status.expect("the change carries the status");
    assert_ne!(status & IS_READ, 0, "status {status} lacks IsRead");

    // A turn: the first change of session 2's row says it is running.
    let (running, chat) = &sids[2];
    let (_state, mut csub) = subscribe_chat(&writer, chat).await;
    within("dispatch turn", writer.dispatch(chat.clone(), user_turn("after-restart", "/slow 300 hi"))).await.expect("dispatch");
    let change = next_row_change(&mut root, running, "running row change").await;
    let status = change.changes.status.expect("the change carries the status");
    assert_ne!(status & IN_PROGRESS, 0, "status {status} lacks InProgress");
    wait_for(&mut csub, "turn complete", |event| match event {
        SubscriptionEvent::Action(env) if is_turn_complete(&env) => Some(()),
        _ => None,
    })
    .await;
}

/// A crash between a temp file's create and its rename leaves
/// `.<name>.tmp-<pid>-<n>` behind in the store, the echo agent's folder and
/// the awareness registry; the next start removes every one whose writer is
/// gone, and keeps the files it does not own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_removes_the_temp_files_a_crash_left_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "writer").await;
    let (_sid, chat, _ssub, _chat, mut csub) = new_session(&c).await;
    turn(&c, &chat, &mut csub, "t0", "hello").await;
    drop(c);
    daemon.kill();

    // No process has pid 999999999 (above the kernel's largest pid).
    let folders = [data.join("sessions"), data.join("echo"), data.join("active-agents")];
    for folder in &folders {
        std::fs::create_dir_all(folder).expect("mkdir");
        std::fs::write(folder.join(".ahp-session@x.json.tmp-999999999-7"), b"half a write").expect("write temp");
        std::fs::write(folder.join("keep.txt"), b"not ours").expect("write other");
    }
    let daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "reader").await;
    assert!(!list(&c).await.is_empty(), "the session is still listed");
    for folder in &folders {
        let names: Vec<String> = std::fs::read_dir(folder)
            .expect("read dir")
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        assert!(!names.iter().any(|n| n.contains(".tmp-")), "{}: temp files left: {names:?}", folder.display());
        assert!(names.iter().any(|n| n == "keep.txt"), "{}: a file not ours was removed: {names:?}", folder.display());
    }
}

/// Copies every file of `from` into `to` (one level, as the echo agent
/// keeps its transcripts).
fn copy_files(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
        }
    }
}

/// "disposeSession ... drops the row", for good: a disposed session whose
/// transcript is put back (restored from a backup) is not listed again by
/// the next start's pass over the transcripts. Before the store kept a
/// tombstone, it came back as a session whose record had been lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disposed_session_stays_disposed_when_its_transcript_is_put_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let backup = dir.path().join("backup");
    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "writer").await;
    let (sid, chat, _ssub, _chat, mut csub) = new_session(&c).await;
    turn(&c, &chat, &mut csub, "t0", "keep me out").await;
    copy_files(&data.join("echo"), &backup);
    let params = ahp::ahp_types::commands::DisposeSessionParams { channel: sid.clone(), meta: None };
    let _: serde_json::Value = within("disposeSession", c.request("disposeSession", params)).await.expect("disposeSession");
    drop(c);
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

    copy_files(&backup, &data.join("echo"));
    let daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "reader").await;
    // The start's pass over the transcripts found it and kept it unlisted.
    within("the pass over the transcripts", async {
        while !daemon.log_text().contains("catalogue.tombstones_held") {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let rows = list(&c).await;
    assert!(rows.iter().all(|r| r.resource != sid), "the disposed session is listed again: {rows:?}");
    let out = ahpd_cli(&["sessions", "list", "--data-dir", data.to_str().expect("utf-8")], None);
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&sid), "the offline listing shows the tombstone");
}

/// Waits until `chat`'s subscription shows `turn_id` started (echoed).
async fn echoed(csub: &mut SessionSubscription, turn_id: &str) {
    wait_for(csub, "turn echoed", |event| match event {
        SubscriptionEvent::Action(env) if matches!(&env.action, StateAction::ChatTurnStarted(a) if a.turn_id == turn_id) => {
            assert!(env.rejection_reason.is_none(), "turn rejected: {env:?}");
            Some(())
        }
        _ => None,
    })
    .await;
}

/// kill -9 while a turn runs (issue 19: 23 of 311 such turns were lost).
/// After the restart the turn is in the chat, ended in error
/// ("interrupted: the host stopped"), with the user's message, and in the
/// offline export; the turn before it is still first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_running_at_kill_9_comes_back_interrupted_with_its_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "writer").await;
    let (sid, chat, _ssub, _chat, mut csub) = new_session(&c).await;
    turn(&c, &chat, &mut csub, "t0", "first").await;
    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "/slow 60000 the long one"))).await.expect("dispatch");
    echoed(&mut csub, "t1").await;
    daemon.kill();

    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "reader").await;
    let (state, _csub) = subscribe_chat(&c, &chat).await;
    let ids: Vec<&str> = state.turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t0", "t1"], "{:?}", state.turns);
    let t1 = &state.turns[1];
    assert_eq!(t1.message.text, "/slow 60000 the long one");
    assert_eq!(t1.state, ahp::ahp_types::state::TurnState::Error);
    let words = serde_json::to_string(&t1.response_parts).expect("json");
    assert!(words.contains("interrupted: the host stopped"), "{words}");
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");

    let out = ahpd_cli(&["session", "export", &sid, "--data-dir", data.to_str().expect("utf-8")], None);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("/slow 60000 the long one"), "the export lacks the interrupted turn: {text}");
}

/// SIGTERM during a long turn (the upgrade path): the turn gets the grace
/// (`--shutdown-grace-seconds 1`), then ends cancelled and the client sees
/// it end; the daemon exits 0; after the restart the turn is in the
/// history with its message, cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_long_turn_cancels_it_after_the_grace_and_keeps_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let grace = ["--shutdown-grace-seconds", "1"];
    let mut daemon = Daemon::start_with(&data, &grace);
    let (c, _, _root) = connect_init(&daemon.url, "writer").await;
    let (_sid, chat, _ssub, _chat, mut csub) = new_session(&c).await;
    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "/slow 60000 upgrade me"))).await.expect("dispatch");
    echoed(&mut csub, "t1").await;
    daemon.signal_term();
    wait_for(&mut csub, "the turn ends cancelled", |event| match event {
        SubscriptionEvent::Action(env) if matches!(&env.action, StateAction::ChatTurnCancelled(a) if a.turn_id == "t1") => Some(()),
        _ => None,
    })
    .await;
    let status = tokio::task::spawn_blocking(move || {
        let status = daemon.wait_exit();
        (status, daemon)
    })
    .await
    .expect("join");
    assert!(status.0.success(), "ahpd exited badly after SIGTERM: {:?}", status.0);
    drop(status.1);

    let daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "reader").await;
    let (state, _csub) = subscribe_chat(&c, &chat).await;
    let t1 = state.turns.iter().find(|t| t.id == "t1").unwrap_or_else(|| panic!("t1 lost: {:?}", state.turns));
    assert_eq!(t1.message.text, "/slow 60000 upgrade me");
    assert_eq!(t1.state, ahp::ahp_types::state::TurnState::Cancelled);
}

/// A kill -9 storm (issue 19, short version; `AHPD_STORM_ROUNDS=20` for the
/// figure in docs/USER-GUIDE.md): each round starts the daemon on the same
/// data dir, runs a turn in each of three sessions and renames each (every
/// one echoed, so acknowledged), starts a long turn, and kills the daemon
/// while it runs. At the end every acknowledged turn is in its chat, ended,
/// every session has its last acknowledged title, and no temp file is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_storm_loses_no_acknowledged_turn_or_rename() {
    use ahp::ahp_types::actions::SessionTitleChangedAction;
    let rounds: usize = std::env::var("AHPD_STORM_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(4);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut sessions: Vec<(String, String)> = Vec::new();
    let mut acked_turns: Vec<Vec<String>> = vec![Vec::new(); 3];
    let mut acked_titles: Vec<String> = vec![String::new(); 3];
    for round in 0..rounds {
        let mut daemon = Daemon::start(&data);
        let (c, _, _root) = connect_init(&daemon.url, "storm").await;
        if sessions.is_empty() {
            for _ in 0..3 {
                let (sid, chat, _s, _c, _cs) = new_session(&c).await;
                sessions.push((sid, chat));
            }
        }
        for (i, (sid, chat)) in sessions.iter().enumerate() {
            let (_state, mut ssub) = subscribe_session(&c, sid).await;
            let (_chat, mut csub) = subscribe_chat(&c, chat).await;
            let id = format!("r{round}-s{i}");
            turn(&c, chat, &mut csub, &id, &format!("/slow 20 {id}")).await;
            acked_turns[i].push(id.clone());
            let title = format!("title {id}");
            let action = StateAction::SessionTitleChanged(SessionTitleChangedAction { title: title.clone() });
            within("rename", c.dispatch(sid.clone(), action)).await.expect("dispatch rename");
            wait_for(&mut ssub, "rename echoed", |event| match event {
                SubscriptionEvent::Action(env) if matches!(&env.action, StateAction::SessionTitleChanged(a) if a.title == title) => {
                    assert!(env.rejection_reason.is_none(), "rename rejected: {env:?}");
                    Some(())
                }
                _ => None,
            })
            .await;
            acked_titles[i] = title;
        }
        let i = round % 3;
        let (_, chat) = &sessions[i];
        let (_chat, mut csub) = subscribe_chat(&c, chat).await;
        let id = format!("r{round}-long");
        within("dispatch", c.dispatch(chat.clone(), user_turn(&id, &format!("/slow 60000 {id}")))).await.expect("dispatch");
        echoed(&mut csub, &id).await;
        acked_turns[i].push(id);
        daemon.kill();
    }

    let mut daemon = Daemon::start(&data);
    let (c, _, _root) = connect_init(&daemon.url, "checker").await;
    let rows = list(&c).await;
    let mut lost = Vec::new();
    for (i, (sid, chat)) in sessions.iter().enumerate() {
        let (state, _csub) = subscribe_chat(&c, chat).await;
        assert!(state.active_turn.is_none(), "{chat} still shows a turn running after the restart");
        for id in &acked_turns[i] {
            if !state.turns.iter().any(|t| &t.id == id) {
                lost.push(id.clone());
            }
        }
        let row = rows.iter().find(|r| &r.resource == sid).unwrap_or_else(|| panic!("{sid} not listed"));
        assert_eq!(row.title, acked_titles[i], "{sid} lost its acknowledged title");
    }
    let total: usize = acked_turns.iter().map(Vec::len).sum();
    eprintln!("kill -9 storm: {rounds} kill points, {total} acknowledged turns, {} renames, {} lost", rounds * 3, lost.len());
    assert!(lost.is_empty(), "acknowledged turns lost: {lost:?}");
    c.shutdown().await;
    assert!(daemon.terminate().success(), "ahpd exited badly after SIGTERM");
    let mut temps = Vec::new();
    let mut stack = vec![data.clone()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.contains(".tmp")) {
                temps.push(path);
            }
        }
    }
    assert!(temps.is_empty(), "temp files left behind: {temps:?}");
}
