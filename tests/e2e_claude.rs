//! The real Claude Code end to end (issue 22): the daemon runs Claude Code
//! (npm `@anthropic-ai/claude-code`) through its ACP adapter (npm
//! `@zed-industries/claude-code-acp`), both pinned by
//! `tests/real_agents/package-lock.json`, against `tests/real_agents/model_stub.mjs`,
//! a stand-in for the Anthropic Messages API on 127.0.0.1 whose answers each
//! test writes in its prompt (`/write`, `/long`, `/error`, ...). Observed
//! through the official AHP client: a streamed reply, a permission asked by
//! the real agent and answered both ways (the real file written or not), the
//! change counts and the checkpoint of the real edit in a repository, a
//! cancel, an error from the model, a slow answer that keeps the session
//! awake, a sleep and a wake (`session/load`), a restart, Claude's own transcript in
//! `~/.claude/projects` never listed as a second session, and an external
//! session written by the real CLI (`claude -p --session-id`) listed, opened
//! and adopted.
//!
//! Needs `node` and the packages: `npm ci --prefix tests/real_agents`
//! (`.ci/run` does it). Without them the tests fail and say so.

mod common;

use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

use ahp::ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use ahp::ahp_types::state::{ResponsePart, ToolCallCancellationReason, ToolCallState, TurnState};

/// The model stub, Claude's home and the environment the daemon (and so
/// Claude Code) runs in.
struct Kit {
    stub: ModelStub,
    /// `HOME` of the daemon and of Claude Code (`.claude/projects` in it).
    home: PathBuf,
    env: Vec<(String, String)>,
}

impl Kit {
    fn new(root: &Path) -> Kit {
        let claude = installed("node_modules/@anthropic-ai/claude-code/bin/claude.exe");
        let home = root.join("home");
        std::fs::create_dir_all(&home).expect("home");
        let stub = ModelStub::start(&root.join("stub.log"));
        let env = vec![
            ("HOME".to_owned(), home.display().to_string()),
            ("ANTHROPIC_BASE_URL".to_owned(), stub.url.clone()),
            ("ANTHROPIC_API_KEY".to_owned(), "stub-key".to_owned()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(), "1".to_owned()),
            // The adapter refuses to skip permissions as root unless told it
            // runs in a sandbox (it does: a temp HOME, a local stub).
            ("IS_SANDBOX".to_owned(), "1".to_owned()),
            // Claude Code defers its tools behind a search on a custom base
            // URL; the stub plays the tools directly.
            ("ENABLE_TOOL_SEARCH".to_owned(), "false".to_owned()),
            // The adapter runs this CLI, not the copy its SDK bundles.
            ("CLAUDE_CODE_EXECUTABLE".to_owned(), claude.display().to_string()),
        ];
        Kit { stub, home, env }
    }

    fn projects(&self) -> PathBuf {
        self.home.join(".claude/projects")
    }

    /// Starts the daemon with the `claude` agent (the adapter), listing
    /// Claude's transcripts, plus `extra` flags.
    fn daemon(&self, data: &Path, extra: &[&str]) -> Daemon {
        let agent = format!("claude={}", installed("node_modules/.bin/claude-code-acp").display());
        let projects = self.projects().display().to_string();
        let mut args = vec!["--agent", agent.as_str(), "--claude-projects", projects.as_str(), "--awareness-dir", ""];
        args.extend_from_slice(extra);
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Daemon::start_with_env(data, &args, &env)
    }

    /// The real CLI, headless, in `cwd`: `claude -p <prompt> --session-id <id>`.
    fn claude_print(&self, cwd: &Path, session_id: &str, prompt: &str) -> String {
        let out = Command::new(installed("node_modules/.bin/claude"))
            .args(["-p", prompt, "--session-id", session_id])
            .current_dir(cwd)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("run claude -p");
        assert!(out.status.success(), "claude -p failed: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Claude's transcript files, wherever its project folders are.
    fn transcripts(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for dir in std::fs::read_dir(self.projects()).into_iter().flatten().flatten() {
            for f in std::fs::read_dir(dir.path()).into_iter().flatten().flatten() {
                if f.path().extension().is_some_and(|e| e == "jsonl") {
                    found.push(f.path());
                }
            }
        }
        found.sort();
        found
    }

    fn stub_requests(&self) -> String {
        self.stub.requests()
    }
}

/// A temp root with `work/` made; Claude Code sees the canonical path.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir work");
    let work = work.canonicalize().expect("canonical work");
    (tmp, work)
}

/// Runs `/write <path> <text>` as turn `turn_id`, answers the real agent's
/// permission request `approved`, and follows the turn to its end.
async fn write_turn(c: &ahp::Client, chat: &str, state: &mut ahp::ahp_types::state::ChatState, sub: &mut ahp::SessionSubscription, turn_id: &str, path: &Path, text: &str, approved: bool) {
    let prompt_text = format!("/write {} {text}", path.display());
    within("dispatch", c.dispatch(chat.to_owned(), user_turn(turn_id, &prompt_text))).await.expect("dispatch");
    follow_chat(sub, state, "the agent asks to write", |_, s| s.status & ACTIVITY == 24).await;
    let pending = pending_confirmation(state).expect("a tool call pending confirmation");
    assert_eq!(pending.display_name, "Write", "{pending:?}");
    within("confirm", c.dispatch(chat.to_owned(), confirm_tool(turn_id, &pending.tool_call_id, approved))).await.expect("confirm");
    follow_chat(sub, state, "the write turn ends", |env, _| ends_turn(env)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_streams_asks_before_writing_and_is_listed_once() {
    let (tmp, work) = workspace();
    let kit = Kit::new(tmp.path());
    let daemon = kit.daemon(&tmp.path().join("data"), &[]);
    let (c, _, _root) = connect_init(&daemon.url, "claude-1").await;
    let (sid, chat, _ssub, mut state, mut sub) = session_on(&c, "claude", &work).await;

    // A reply, streamed from the model through the real agent.
    prompt(&c, &chat, &mut state, &mut sub, "t1", "hello claude").await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}\nstub saw:\n{}", kit.stub_requests());
    assert!(markdown(turn).contains("Stub says: hello claude"), "{turn:?}");

    // The model asks for the Write tool: the real agent asks permission,
    // ahpd shows the tool call waiting, the approval lets it write.
    let approved = work.join("approved.txt");
    write_turn(&c, &chat, &mut state, &mut sub, "t2", &approved, "yes please", true).await;
    assert_eq!(std::fs::read_to_string(&approved).expect("the approved file was written"), "yes please\n");
    assert!(markdown(state.turns.last().expect("turn")).contains(&format!("Wrote {}.", approved.display())), "{:?}", state.turns.last());

    // Denied: the file is never written and the tool call shows the
    // denial. (The adapter, 0.16.2, then ends the prompt with an error of
    // its own rather than a completed turn: the turn ends either way.)
    let denied = work.join("denied.txt");
    write_turn(&c, &chat, &mut state, &mut sub, "t3", &denied, "no thanks", false).await;
    assert!(!denied.exists(), "a denied write must not happen");
    let turn = state.turns.last().expect("a turn");
    let denial = turn.response_parts.iter().any(|p| {
        matches!(p, ResponsePart::ToolCall(tc) if matches!(&tc.tool_call, ToolCallState::Cancelled(c) if c.reason == ToolCallCancellationReason::Denied))
    });
    assert!(denial, "the tool call shows the denial: {turn:?}");
    assert!(matches!(turn.state, TurnState::Complete | TurnState::Error), "{turn:?}");
    prompt(&c, &chat, &mut state, &mut sub, "t4", "after the denial").await;
    assert!(markdown(state.turns.last().expect("turn")).contains("Stub says: after the denial"), "{:?}", state.turns.last());

    // The real edit counts as a change of the session.
    let rows = list(&c).await;
    let row = rows.iter().find(|r| r.resource == sid).expect("the session is listed");
    assert!(row.changes.as_ref().and_then(|ch| ch.files).unwrap_or(0) >= 1, "the written file counts: {row:?}");

    // Claude kept its own transcript, and the catalogue lists the session
    // once: the chat's backend conversation is not a second session.
    let transcripts = kit.transcripts();
    assert_eq!(transcripts.len(), 1, "one Claude transcript: {transcripts:?}");
    let listed: Vec<&str> = rows.iter().map(|r| r.resource.as_str()).collect();
    assert_eq!(listed, vec![sid.as_str()], "only the session itself is listed");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_turns_cancel_and_fail_with_what_the_model_said() {
    let (tmp, work) = workspace();
    let kit = Kit::new(tmp.path());
    let daemon = kit.daemon(&tmp.path().join("data"), &[]);
    let (c, _, _root) = connect_init(&daemon.url, "claude-2").await;
    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "claude", &work).await;

    // A long streamed reply, cancelled once it streams.
    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "/long 2000"))).await.expect("dispatch");
    follow_chat(&mut sub, &mut state, "the long reply streams", |env, _| matches!(env.action, StateAction::ChatDelta(_))).await;
    let cancel = StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id: "t1".to_owned(), duration: 0, meta: None });
    within("cancel", c.dispatch(chat.clone(), cancel)).await.expect("cancel");
    follow_chat(&mut sub, &mut state, "cancelled", |env, _| ends_turn(env)).await;
    assert_eq!(state.turns.last().map(|t| t.state), Some(TurnState::Cancelled), "{:?}", state.turns.last());

    // The model answers with an HTTP error: the turn ends in the chat's
    // error with what the agent said. (Claude Code itself says "API Error:
    // 400 the stub refuses this prompt"; its ACP adapter, 0.16.2, reports
    // only its own diagnostic, which is what a client sees.)
    prompt(&c, &chat, &mut state, &mut sub, "t2", "/error 400 the stub refuses this prompt").await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Error, "{turn:?}");
    let error = last_error(&state);
    assert!(error.starts_with("claude: session/prompt failed:") && error.len() > "claude: session/prompt failed:".len(), "the agent's words: {error:?}");
    assert!(kit.stub_requests().contains("\"decision\":\"error\""), "the model was asked and refused: {}", kit.stub_requests());

    // And the agent takes the next turn.
    prompt(&c, &chat, &mut state, &mut sub, "t3", "still there?").await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert!(markdown(turn).contains("Stub says: still there?"), "{turn:?}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_sleeps_wakes_and_restarts_with_its_conversation() {
    let (tmp, work) = workspace();
    let kit = Kit::new(tmp.path());
    let data = tmp.path().join("data");
    let extra = ["--sleep-after-minutes", "0.02"];
    let mut daemon = kit.daemon(&data, &extra);
    let (c, _, _root) = connect_init(&daemon.url, "claude-3").await;
    let (sid, chat, ssub, mut state, mut sub) = session_on(&c, "claude", &work).await;
    prompt(&c, &chat, &mut state, &mut sub, "t1", "remember the heron").await;
    unwatch(&c, &sid, &chat).await;
    drop((sub, ssub));
    until_logged(&daemon, "sleep", "session.slept", &sid).await;

    // A prompt wakes it: the adapter loads Claude's conversation
    // (`session/load`) and the chat keeps its history.
    let (mut state, mut sub) = subscribe_chat(&c, &chat).await;
    prompt(&c, &chat, &mut state, &mut sub, "t2", "and now").await;
    let texts = turn_texts(&state);
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(texts[0].0 == "remember the heron" && texts[0].1.contains("Stub says: remember the heron"), "{texts:?}");
    assert!(texts[1].0 == "and now" && texts[1].1.contains("Stub says: and now"), "{texts:?}");
    let log = daemon.log_text();
    assert!(count(&log, "session.woke", &sid) >= 1, "woke:\n{log}");
    // The model saw the earlier turn again: the conversation was resumed,
    // not started afresh.
    let requests = kit.stub_requests();
    assert!(requests.lines().any(|l| l.contains("and now")), "{requests}");
    c.shutdown().await;

    // A restart: the chat's turns come back, and the next turn runs.
    daemon.terminate();
    drop(daemon);
    let daemon = kit.daemon(&data, &extra);
    let (c, _, _root) = connect_init(&daemon.url, "claude-4").await;
    let (mut state, mut sub) = subscribe_chat(&c, &chat).await;
    assert_eq!(turn_texts(&state).len(), 2, "the turns came back after a restart: {:?}", turn_texts(&state));
    prompt(&c, &chat, &mut state, &mut sub, "t3", "third").await;
    assert!(markdown(state.turns.last().expect("turn")).contains("Stub says: third"), "{:?}", state.turns.last());
    assert_eq!(kit.transcripts().len(), 1, "one Claude conversation throughout: {:?}", kit.transcripts());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_real_claude_cli_wrote_is_listed_opened_and_adopted() {
    let (tmp, work) = workspace();
    let kit = Kit::new(tmp.path());
    let id = "5f0c8a3e-2b1d-4c6e-9a7f-1e2d3c4b5a69";
    let said = kit.claude_print(&work, id, "written outside ahpd");
    assert!(said.contains("Stub says: written outside ahpd"), "{said}");

    // Listed as the page's external sessions are when a client asks for
    // them (`showExternalSessions`, here from the start).
    let daemon = kit.daemon(&tmp.path().join("data"), &["--show-external-sessions", "last7Days"]);
    let (c, _, _root) = connect_init(&daemon.url, "claude-5").await;
    let external = format!("claude:/{id}");
    let row = within("the external session is listed", async {
        loop {
            if let Some(row) = list(&c).await.into_iter().find(|r| r.resource == external) {
                return row;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(row.provider, "claude", "{row:?}");

    // Opened: its turn comes back from Claude's own transcript.
    let (s, _ssub) = subscribe_session(&c, &external).await;
    let chat = default_chat(&s);
    let (mut state, mut sub) = subscribe_chat(&c, &chat).await;
    let texts = turn_texts(&state);
    assert!(texts.iter().any(|(asked, reply)| asked.contains("written outside ahpd") && reply.contains("Stub says: written outside ahpd")), "{texts:?}");

    // A person's turn adopts it: the same Claude conversation goes on.
    prompt(&c, &chat, &mut state, &mut sub, "t-adopt", "picked up in ahpd").await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}\nstub saw:\n{}", kit.stub_requests());
    assert!(markdown(turn).contains("Stub says: picked up in ahpd"), "{turn:?}");
    let listed: Vec<String> = list(&c).await.into_iter().map(|r| r.resource).collect();
    assert_eq!(listed.iter().filter(|r| r.ends_with(id)).count(), 1, "listed once: {listed:?}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agents_edit_in_a_repository_is_counted_and_checkpointed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo_dir = tmp.path().join("app");
    std::fs::create_dir(&repo_dir).expect("mkdir app");
    let repo_dir = repo_dir.canonicalize().expect("canonical app");
    let repo = make_repo(&repo_dir, "target/\n");
    let kit = Kit::new(tmp.path());
    let daemon = kit.daemon(&tmp.path().join("data"), &[]);
    let (c, _, mut root) = connect_init(&daemon.url, "claude-git").await;
    let (sid, chat, _ssub, mut state, mut sub) = session_on(&c, "claude", &repo_dir).await;

    // The model writes a new file through the real agent, approved.
    let notes = repo_dir.join("notes.txt");
    write_turn(&c, &chat, &mut state, &mut sub, "t1", &notes, "from claude", true).await;
    assert_eq!(state.turns.last().map(|t| t.state), Some(TurnState::Complete), "{:?}", state.turns.last());
    assert_eq!(std::fs::read_to_string(&notes).expect("written"), "from claude\n");

    // The row's change counts are the repository's: one new file, one line.
    let changes = within("the row's changes", async {
        loop {
            let row = list(&c).await.into_iter().find(|r| r.resource == sid).expect("listed");
            if let Some(ch) = row.changes.filter(|ch| ch.files == Some(1)) {
                return ch;
            }
            let _ = tokio::time::timeout(std::time::Duration::from_millis(200), root.recv()).await;
        }
    })
    .await;
    assert_eq!((changes.files, changes.additions, changes.deletions), (Some(1), Some(1), Some(0)), "{changes:?}");

    // The turn's checkpoint is a ref in the repository.
    let refs: Vec<String> = within("a checkpoint ref", async {
        loop {
            let refs: Vec<String> =
                repo.references_glob("refs/agents/*").expect("glob").flatten().filter_map(|r| r.name().ok().map(str::to_owned)).collect();
            if refs.iter().any(|r| r.contains("/checkpoints/")) {
                return refs;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(refs.iter().all(|r| r.starts_with("refs/agents/")), "{refs:?}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_stays_awake_while_the_real_agent_works_and_sleeps_after() {
    let (tmp, work) = workspace();
    let kit = Kit::new(tmp.path());
    // Sleep after 1.2 s of quiet; the model takes 3 s to answer.
    let daemon = kit.daemon(&tmp.path().join("data"), &["--sleep-after-minutes", "0.02"]);
    let (c, _, _root) = connect_init(&daemon.url, "claude-slow").await;
    let (sid, chat, ssub, mut state, mut sub) = session_on(&c, "claude", &work).await;
    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "/slow 3000 hold on"))).await.expect("dispatch");
    follow_chat(&mut sub, &mut state, "the turn runs", |_, s| s.status & ACTIVITY == 8).await;
    // Nobody watches now: only the running turn keeps it awake.
    unwatch(&c, &sid, &chat).await;
    drop((sub, ssub));
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    assert_eq!(count(&daemon.log_text(), "session.slept", &sid), 0, "slept while its agent worked:\n{}", daemon.log_text());
    // The turn ends, the quiet passes, it sleeps; the reply was kept.
    until_logged(&daemon, "sleep after the turn", "session.slept", &sid).await;
    let (state, _sub) = subscribe_chat(&c, &chat).await;
    let turn = state.turns.last().expect("the turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    assert!(markdown(turn).contains("Stub says: /slow 3000 hold on"), "{turn:?}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agent_runs_a_command_through_the_host_once_approved() {
    let (tmp, work) = workspace();
    let kit = Kit::new(tmp.path());
    let daemon = kit.daemon(&tmp.path().join("data"), &[]);
    let (c, _, _root) = connect_init(&daemon.url, "claude-bash").await;
    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "claude", &work).await;
    // The model asks for Bash; the real agent asks the client first.
    let out = work.join("from-bash.txt");
    let command = format!("/bash echo ran-by-claude > {}", out.display());
    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", &command))).await.expect("dispatch");
    follow_chat(&mut sub, &mut state, "the agent asks to run a command", |_, s| s.status & ACTIVITY == 24).await;
    let pending = pending_confirmation(&state).expect("a tool call pending confirmation");
    assert!(!out.exists(), "nothing ran before the approval");
    within("confirm", c.dispatch(chat.clone(), confirm_tool("t1", &pending.tool_call_id, true))).await.expect("confirm");
    follow_chat(&mut sub, &mut state, "the command turn ends", |env, _| ends_turn(env)).await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}\nstub saw:\n{}", kit.stub_requests());
    assert!(markdown(turn).contains("Ran it."), "{turn:?}");
    assert_eq!(std::fs::read_to_string(&out).expect("the command ran").trim(), "ran-by-claude");
    c.shutdown().await;
}

/// The host's tools (issue 24) on the real Claude Code: its ACP adapter
/// advertises MCP over HTTP, so the host names its MCP server with the
/// chat's secret in `session/new`; the model calls `mcp__ahpd__list_peers`
/// and `mcp__ahpd__send_message`, and Claude Code calls the host (asking the
/// client first where its adapter does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_calls_the_hosts_tools() {
    let (tmp, work) = workspace();
    let kit = Kit::new(tmp.path());
    let daemon = kit.daemon(&tmp.path().join("data"), &[]);
    let (c, _, _root) = connect_init(&daemon.url, "claude-tools").await;
    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "claude", &work).await;
    let (sid_b, chat_b, _sb, mut state_b, mut sub_b) = session_on(&c, "echo", &work).await;
    // A session is a send_message target once announced, at its first turn
    // (Sessions page, "Provisional sessions"; DECISIONS 21).
    prompt(&c, &chat_b, &mut state_b, &mut sub_b, "b1", "hello").await;
    let send = format!("/calltool ahpd send_message {}", serde_json::json!({ "session": sid_b, "text": "hello from claude" }));
    for (turn_id, text) in [("t1", "/calltool ahpd list_peers {}".to_owned()), ("t2", send)] {
        within("dispatch", c.dispatch(chat.clone(), user_turn(turn_id, &text))).await.expect("dispatch");
        let asked = follow_chat(&mut sub, &mut state, "the tool call runs or asks", |env, s| ends_turn(env) || s.status & ACTIVITY == 24).await;
        if !asked.iter().any(ends_turn) {
            let pending = pending_confirmation(&state).expect("a tool call pending confirmation");
            within("confirm", c.dispatch(chat.clone(), confirm_tool(turn_id, &pending.tool_call_id, true))).await.expect("confirm");
            follow_chat(&mut sub, &mut state, "the tool turn ends", |env, _| ends_turn(env)).await;
        }
        let turn = state.turns.last().expect("a turn");
        assert_eq!(turn.state, TurnState::Complete, "{turn:?}\nstub saw:\n{}", kit.stub_requests());
        assert!(markdown(turn).contains("Tool said:"), "{turn:?}\nstub saw:\n{}", kit.stub_requests());
    }
    assert!(kit.stub_requests().contains("mcp__ahpd__send_message"), "the model was offered the host's tools");
    // The message arrived on the echo session as a turn, and echo answered.
    follow_chat(&mut sub_b, &mut state_b, "the message's turn", |env, s| {
        ends_turn(env) && s.turns.iter().any(|t| t.message.text.contains("hello from claude"))
    })
    .await;
    assert!(!daemon.log_text().contains("Bearer "), "no secret in the log");
    c.shutdown().await;
}

/// A rewind (`chat/truncated`, issue 23) on the real Claude Code: ACP v1 has
/// no way to make an agent forget turns, so ahpd refuses it with that
/// reason, and the chat keeps every turn (the agent's context still has
/// them) and takes the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_refuses_a_rewind_clearly_and_keeps_its_turns() {
    let (tmp, work) = workspace();
    let kit = Kit::new(tmp.path());
    let daemon = kit.daemon(&tmp.path().join("data"), &[]);
    let (c, _, _root) = connect_init(&daemon.url, "claude-rewind").await;
    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "claude", &work).await;
    prompt(&c, &chat, &mut state, &mut sub, "t1", "first words").await;
    prompt(&c, &chat, &mut state, &mut sub, "t2", "second words").await;
    let rewind = StateAction::ChatTruncated(ahp::ahp_types::actions::ChatTruncatedAction { turn_id: Some("t1".to_owned()) });
    within("dispatch", c.dispatch(chat.clone(), rewind)).await.expect("dispatch");
    let reason = wait_for(&mut sub, "the rewind's echo", |e| match e {
        ahp::SubscriptionEvent::Action(env) if matches!(env.action, StateAction::ChatTruncated(_)) => Some(env.rejection_reason.clone()),
        _ => None,
    })
    .await;
    assert!(reason.as_deref().is_some_and(|r| r.contains("cannot forget turns")), "{reason:?}");
    let (fresh, _) = subscribe_chat(&c, &chat).await;
    let ids: Vec<&str> = fresh.turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t1", "t2"], "nothing changed");
    prompt(&c, &chat, &mut state, &mut sub, "t3", "still there?").await;
    assert!(markdown(state.turns.last().expect("a turn")).contains("Stub says: still there?"));
    c.shutdown().await;
}

/// A message queued while the real agent answers runs as its next turn
/// (issue 23): the host takes it off the queue when the first turn ends and
/// sends it to Claude Code as any turn, recorded with its `queuedMessageId`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_a_queued_message_as_the_next_turn() {
    use ahp::ahp_types::actions::ChatPendingMessageSetAction;
    use ahp::ahp_types::state::{Message, MessageKind, MessageOrigin, PendingMessageKind};
    let (tmp, work) = workspace();
    let kit = Kit::new(tmp.path());
    let daemon = kit.daemon(&tmp.path().join("data"), &[]);
    let (c, _, _root) = connect_init(&daemon.url, "claude-queue").await;
    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "claude", &work).await;

    within("dispatch", c.dispatch(chat.clone(), user_turn("t1", "/long 40"))).await.expect("dispatch");
    follow_chat(&mut sub, &mut state, "the long reply streams", |env, _| matches!(env.action, StateAction::ChatDelta(_))).await;
    let message = Message { text: "queued for claude".to_owned(), origin: MessageOrigin { kind: MessageKind::User }, attachments: None, model: None, agent: None, meta: None };
    let queue = StateAction::ChatPendingMessageSet(ChatPendingMessageSetAction { kind: PendingMessageKind::Queued, id: "q1".to_owned(), message });
    within("queue", c.dispatch(chat.clone(), queue)).await.expect("queue");
    let seen = follow_chat(&mut sub, &mut state, "the queued message runs after t1", |_, s| {
        s.active_turn.is_none() && s.queued_messages.is_none() && s.turns.iter().any(|t| t.id == "q1")
    })
    .await;
    assert!(
        seen.iter().any(|e| matches!(&e.action, StateAction::ChatTurnStarted(a) if a.queued_message_id.as_deref() == Some("q1"))),
        "the turn names the queued message"
    );
    let states: Vec<(&str, TurnState)> = state.turns.iter().map(|t| (t.id.as_str(), t.state)).collect();
    assert_eq!(states, [("t1", TurnState::Complete), ("q1", TurnState::Complete)], "{:?}", state.turns);
    let reply = markdown(state.turns.last().expect("q1"));
    assert!(reply.contains("Stub says: queued for claude"), "the real agent answered the queued message: {reply:?}");
    c.shutdown().await;
}

/// "Attachments reach agents" (issue 48): a file attached to a message is
/// read by the host within the session's folder and reaches the real agent
/// as embedded context (the adapter advertises `embeddedContext`), so the
/// model sees its text; a file outside the folder attached beside it does
/// not reach the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_receives_a_file_attached_to_its_message() {
    let (tmp, work) = workspace();
    std::fs::write(work.join("notes.md"), "the magic word is PLUGH-7\n").expect("notes");
    let outside = tmp.path().canonicalize().expect("canonical").join("outside.md");
    std::fs::write(&outside, "outside says PLUGH-7 too\n").expect("outside");
    let kit = Kit::new(tmp.path());
    let daemon = kit.daemon(&tmp.path().join("data"), &[]);
    let (c, _, _root) = connect_init(&daemon.url, "claude-attach").await;
    let (_sid, chat, _ssub, mut state, mut sub) = session_on(&c, "claude", &work).await;
    let turn = user_turn_with("t1", "/seen PLUGH-7", vec![file_attachment("notes.md", &work.join("notes.md")), file_attachment("outside.md", &outside)]);
    within("dispatch", c.dispatch(chat.clone(), turn)).await.expect("dispatch");
    follow_chat(&mut sub, &mut state, "the attachment turn ends", |env, _| ends_turn(env)).await;
    let turn = state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}\nstub saw:\n{}", kit.stub_requests());
    assert!(markdown(turn).contains("Seen PLUGH-7 in 1 of 1 attached files."), "{turn:?}\nstub saw:\n{}", kit.stub_requests());
    c.shutdown().await;
}
