//! Issue 19: "SIGTERM drains". After `Input::Shutdown` the host takes no
//! new turns (refused with a clear reason), lets running ones go on for
//! the grace, then cancels them through their backends, and says it has
//! drained so the shell may exit.

use ahpd_core::{BackendCmd, Config, Input};
use ahpd_core::testkit::Harness;
use serde_json::json;

#[test]
fn a_stop_refuses_new_turns_and_cancels_running_ones_when_the_grace_ends() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    let (_, busy) = h.create(1, "s1");
    let (_, idle) = h.create(1, "s2");
    h.start_turn(1, &busy, 1, "t1", "long");
    h.settle_backend();
    h.request(1, "subscribe", json!({"channel": busy}));
    h.request(1, "subscribe", json!({"channel": idle}));
    h.frames(1);

    h.input(Input::Shutdown { grace_ms: 5_000 });
    assert!(!h.host.drained(), "a turn still runs");
    h.dispatch(1, &idle, 2, json!({"type": "chat/turnStarted", "turnId": "t2", "startedAt": "2026-12-01T00:00:00Z",
        "message": {"text": "new", "origin": {"kind": "user"}}}));
    h.settle_store();
    let frames = h.frames(1);
    let refused = frames.iter().find(|f| f["params"]["action"]["type"] == "chat/turnStarted").expect("the turn is answered");
    assert!(refused["params"]["rejectionReason"].as_str().unwrap_or("").contains("shutting down"), "{refused}");

    // Within the grace nothing is cancelled; at its end the running turn is.
    h.advance(4_000);
    assert!(h.backend_cmds().iter().all(|(_, _, c)| !matches!(c, BackendCmd::Cancel { .. })));
    h.advance(1_000);
    let cancels: Vec<_> = h.backend_cmds().into_iter().filter(|(_, _, c)| matches!(c, BackendCmd::Cancel { turn_id } if turn_id == "t1")).collect();
    assert_eq!(cancels.len(), 1, "the running turn is cancelled through its backend");
    assert!(h.frames(1).iter().any(|f| f["params"]["action"]["type"] == "chat/turnCancelled"), "the client sees it end");
    h.settle_store();
    assert!(h.host.drained());
}

#[test]
fn a_stop_with_nothing_running_has_drained_at_once() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    h.create(1, "s1");
    h.input(Input::Shutdown { grace_ms: 30_000 });
    assert!(h.host.drained());
}
