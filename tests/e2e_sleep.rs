//! Sleep, wake and the residency limit in the real daemon, driven by the
//! official client (Sessions page, "Sleep and wake"). Sessions left
//! unwatched are observed through `listSessions` and the daemon's log, since
//! subscribing would pin them.

mod common;

use common::*;

use std::time::Duration;

use ahp::ahp_types::state::TurnState;
use ahp::{Client, ClientError};

/// Sleep after 1.2 s of quiet.
const SLEEP_MINUTES: &str = "0.02";

/// Creates a session, sends `text` as its first turn and waits for the turn
/// to be handed over, then unsubscribes so nothing pins it. Returns (session,
/// chat).
async fn start_unwatched(c: &Client, text: &str, wait_done: bool) -> (String, String) {
    let (sid, chat, _ssub, mut chat_state, mut csub) = new_session(c).await;
    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", text))).await.expect("dispatch");
    if wait_done {
        follow_chat(&mut csub, &mut chat_state, "first turn", |env, _| is_turn_complete(env)).await;
    } else {
        follow_chat(&mut csub, &mut chat_state, "turn started", |_, chat| chat.active_turn.is_some()).await;
    }
    unwatch(&c, &sid, &chat).await;
    (sid, chat)
}

fn row<'a>(rows: &'a [ahp::ahp_types::state::SessionSummary], sid: &str) -> &'a ahp::ahp_types::state::SessionSummary {
    rows.iter().find(|r| r.resource == sid).unwrap_or_else(|| panic!("{sid} not listed"))
}


#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_turn_is_never_cut_and_evicted_sessions_wake_under_their_uri() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = Daemon::start_with(&data, &["--residency-limit", "2", "--sleep-after-minutes", SLEEP_MINUTES]);
    let (c, _, _root) = connect_init(&daemon.url, "sleep-1").await;
    // A runs a 6 s turn; B and C are made and prompted while it runs.
    let (a, a_chat) = start_unwatched(&c, "/slow 6000 long job", false).await;
    let (b, b_chat) = start_unwatched(&c, "b", true).await;
    let (cc, _) = start_unwatched(&c, "c", true).await;
    // Past A's quiet time, A is still running: neither slept nor evicted.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let rows = list(&c).await;
    assert_eq!(row(&rows, &a).status & ACTIVITY, 8, "A still in progress");
    assert_eq!(count_log(&data, 0, "session.evicted", &a), 0, "A not evicted mid-turn");
    assert_eq!(count_log(&data, 0, "session.slept", &a), 0, "A not asleep mid-turn");
    // B (least recently used) went for the limit; it is listed, not running.
    wait_log(&data, 0, "session.evicted", &b).await;
    assert_eq!(row(&rows, &b).status & ACTIVITY, 1);
    assert_eq!(count_log(&data, 0, "session.evicted", &cc), 0);
    // A's turn completes and is recorded as completed.
    within("A completes", async {
        loop {
            if list(&c).await.iter().any(|r| r.resource == a && r.status & ACTIVITY == 1) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let (a_state, _sub) = subscribe_chat(&c, &a_chat).await;
    let turn = a_state.turns.last().expect("A's turn");
    assert_eq!(turn.state, TurnState::Complete);
    assert!(markdown(turn).contains("long job"), "{turn:?}");
    // B wakes with the same URI on its next prompt.
    let mark = log_len(&data);
    let (mut b_state, mut bsub) = subscribe_chat(&c, &b_chat).await;
    assert_eq!(b_state.turns.len(), 1, "B's earlier turn came back from its transcript");
    within("dispatch", c.dispatch(b_chat.clone(), user_turn("t2", "again"))).await.expect("dispatch");
    follow_chat(&mut bsub, &mut b_state, "B's second turn", |env, _| is_turn_complete(env)).await;
    assert!(markdown(b_state.turns.last().expect("turn")).contains("Echo: again"));
    assert!(count_log(&data, mark, "session.woke", &b) >= 1);
    assert!(list(&c).await.iter().any(|r| r.resource == b));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_subscribers_at_once_share_one_resume() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = Daemon::start_with(&data, &["--residency-limit", "1", "--sleep-after-minutes", "0"]);
    let (c1, _, _r1) = connect_init(&daemon.url, "sleep-2a").await;
    let (c2, _, _r2) = connect_init(&daemon.url, "sleep-2b").await;
    let (a, a_chat) = start_unwatched(&c1, "hello", true).await;
    start_unwatched(&c1, "push a out", true).await;
    wait_log(&data, 0, "session.evicted", &a).await;
    let mark = log_len(&data);
    let (s1, s2) = tokio::join!(subscribe_chat(&c1, &a_chat), subscribe_chat(&c2, &a_chat));
    assert_eq!(s1.0.turns, s2.0.turns, "both got the same snapshot");
    assert_eq!(s1.0.turns.len(), 1);
    assert_eq!(count_log(&data, mark, "session.waking", &a), 1, "exactly one resume");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_resume_fails_the_waker_and_the_session_stays_for_the_next() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = Daemon::start_with(&data, &["--residency-limit", "1", "--sleep-after-minutes", "0"]);
    let (c, _, _root) = connect_init(&daemon.url, "sleep-3").await;
    let (a, a_chat) = start_unwatched(&c, "keep me", true).await;
    start_unwatched(&c, "push a out", true).await;
    wait_log(&data, 0, "session.evicted", &a).await;
    // Take the echo agent's transcript away: its resume fails.
    let echo_dir = data.join("echo");
    let transcript = std::fs::read_dir(&echo_dir)
        .expect("echo dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("keep me")))
        .expect("A's transcript");
    let aside = transcript.with_extension("aside");
    std::fs::rename(&transcript, &aside).expect("move transcript aside");
    let err = match within("subscribe", c.subscribe(a_chat.clone())).await {
        Err(ClientError::Rpc(e)) => e,
        Err(other) => panic!("expected the resume to fail with an RPC error, got {other:?}"),
        Ok(_) => panic!("expected the resume to fail, but the subscribe succeeded"),
    };
    assert_eq!(err.code, -32603);
    assert!(err.message.contains("could not be resumed"), "{}", err.message);
    assert!(list(&c).await.iter().any(|r| r.resource == a), "nothing deleted or replaced");
    // The next waker tries again and succeeds once the transcript is back.
    std::fs::rename(&aside, &transcript).expect("restore transcript");
    let (state, _sub) = subscribe_chat(&c, &a_chat).await;
    assert_eq!(state.turns.len(), 1);
    assert!(markdown(&state.turns[0]).contains("keep me"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_session_sleeps_stays_listed_and_a_prompt_wakes_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let daemon = Daemon::start_with(&data, &["--residency-limit", "0", "--sleep-after-minutes", SLEEP_MINUTES]);
    let (c, _, _root) = connect_init(&daemon.url, "sleep-4").await;
    let (a, a_chat) = start_unwatched(&c, "hello", true).await;
    wait_log(&data, 0, "session.slept", &a).await;
    let rows = list(&c).await;
    assert_eq!(row(&rows, &a).status & ACTIVITY, 1, "asleep and listed");
    let mark = log_len(&data);
    let (mut state, mut sub) = subscribe_chat(&c, &a_chat).await;
    within("dispatch", c.dispatch(a_chat.clone(), user_turn("t2", "wake up"))).await.expect("dispatch");
    follow_chat(&mut sub, &mut state, "turn after waking", |env, _| is_turn_complete(env)).await;
    assert!(markdown(state.turns.last().expect("turn")).contains("Echo: wake up"));
    assert_eq!(count_log(&data, mark, "session.woke", &a), 1);
}
