//! A second real agent (issue 22): Gemini CLI (npm `@google/gemini-cli`,
//! pinned by `tests/real_agents/package-lock.json`) in its ACP mode
//! (`gemini --experimental-acp`), against `tests/real_agents/model_stub.mjs`
//! speaking the Gemini API (`GOOGLE_GEMINI_BASE_URL`). Observed through the
//! official AHP client: a reply streamed from the model, the next turn on the
//! same conversation, and a model error ending the turn.
//!
//! Needs `node` and the packages: `npm ci --prefix tests/real_agents`
//! (`.ci/run` does it). Without them the tests fail and say so.

mod common;

use common::*;

use std::path::Path;

use ahp::ahp_types::state::TurnState;

/// Starts the daemon with the `gemini` agent against `stub`, Gemini's
/// settings in a temp `HOME` (the API key sign-in, the folder trusted).
fn gemini_daemon(root: &Path, stub: &ModelStub) -> Daemon {
    let home = root.join("home");
    std::fs::create_dir_all(home.join(".gemini")).expect("gemini home");
    std::fs::write(home.join(".gemini/settings.json"), r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#).expect("settings");
    let agent = format!("gemini={} --experimental-acp", installed("node_modules/.bin/gemini").display());
    let home = home.display().to_string();
    let env = [
        ("HOME", home.as_str()),
        ("GEMINI_API_KEY", "stub-key"),
        ("GOOGLE_GEMINI_BASE_URL", stub.url.as_str()),
        // Headless: the session's folder is the one the host chose.
        ("GEMINI_CLI_TRUST_WORKSPACE", "true"),
    ];
    Daemon::start_with_env(&root.join("data"), &["--agent", agent.as_str(), "--awareness-dir", ""], &env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_streams_replies_and_reports_a_model_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let stub = ModelStub::start(&tmp.path().join("stub.log"));
    let daemon = gemini_daemon(tmp.path(), &stub);
    let (c, _, _root) = connect_init(&daemon.url, "gemini-1").await;
    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "gemini", &work).await;

    prompt(&c, &chat, &mut state, &mut sub, "t1", "hello gemini").await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}\nstub saw:\n{}", stub.requests());
    assert!(markdown(turn).contains("Stub says: hello gemini"), "{turn:?}");

    // The same conversation takes the next turn.
    prompt(&c, &chat, &mut state, &mut sub, "t2", "and again").await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert!(markdown(turn).contains("Stub says: and again"), "{turn:?}");
    assert!(stub.requests().contains("\"api\":\"gemini\""), "Gemini CLI asked the Gemini API: {}", stub.requests());

    // The model refuses: the turn does not complete, and the agent takes
    // the next one.
    prompt(&c, &chat, &mut state, &mut sub, "t3", "/error 400 the stub refuses this prompt").await;
    let turn = state.turns.last().expect("a turn");
    assert_ne!(turn.state, TurnState::Complete, "{turn:?}");
    prompt(&c, &chat, &mut state, &mut sub, "t4", "still there").await;
    assert!(markdown(state.turns.last().expect("turn")).contains("Stub says: still there"), "{:?}", state.turns.last());
    c.shutdown().await;
}
