//! `acp_test_agent`: a small ACP agent for ahpd's end-to-end tests, built on
//! the agent side of the `agent-client-protocol` crate. It speaks ACP v1 on
//! stdin/stdout and logs to stderr.
//!
//! What a prompt does, by the words it contains:
//! - `permission`: announces a tool call, asks for permission
//!   (`session/request_permission`, allow once / reject once); allowed, it
//!   writes `note.txt` in the session's folder through `fs/write_text_file`
//!   and completes the call; denied, the call fails. Then a reply.
//! - `outside`: tries to write a file outside the session's folder and
//!   replies with what the client said.
//! - `slow`: streams a chunk every 100 ms for 20 s unless cancelled
//!   (`session/cancel`), then stops with `cancelled`.
//! - `terminal`: asks the client for a terminal (`terminal/create`) running
//!   a shell that prints its pid and waits until a file `go` appears in the
//!   session's folder; replies `terminal <id> started: pid <pid>` once the
//!   pid shows in `terminal/output`, leaving it running (background work).
//! - `spawn-child`: starts `sleep 1000` (left running, in the agent's own
//!   process group) and replies `child pid <pid>`, so a test can check the
//!   child goes when the chat does.
//! - `/tool NAME [JSON]`: calls tool `NAME` of the MCP server the client
//!   gave this session in `session/new` / `session/load` (ahpd's host tools,
//!   over HTTP with the headers given, or a stdio server the agent starts),
//!   with the JSON object as its arguments, through the `rmcp` client, and
//!   replies `tool NAME ok: <text>`, `tool NAME error: <text>` (a tool
//!   error) or `tool NAME failed: <why>` (no answer at all);
//!   `/tool-bad-secret NAME` does the same over HTTP with a made-up secret.
//! - anything else: a thought, a plan, then `Reply: <prompt> (turn <n>)` in
//!   three chunks, `n` counting the conversation's turns (so a test can tell
//!   a loaded conversation from a fresh one).
//!
//! Options:
//! - `--store DIR`: keep every conversation as `DIR/<session id>.json` and
//!   advertise `loadSession`; `session/load` replays the stored turns.
//! - `--fault KIND`: misbehave on demand: `exit-mid-turn` (exit 3 after the
//!   first chunk), `hang-initialize` (never answer `initialize`), `garbage`
//!   (print a line that is not JSON mid-turn), `flood` (print a 10 MB line
//!   mid-turn). Each says on stderr what it is about to do.
//! - `--no-mcp-http`: do not advertise `mcpCapabilities.http`, so the
//!   client gives its MCP servers as stdio commands.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, CreateTerminalRequest, InitializeRequest,
    InitializeResponse, TerminalOutputRequest,
    LoadSessionRequest, LoadSessionResponse, NewSessionRequest, NewSessionResponse, PermissionOption,
    PermissionOptionKind, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, PromptRequest, PromptResponse,
    RequestPermissionOutcome, RequestPermissionRequest, SessionNotification, SessionUpdate, StopReason, TextContent,
    ToolCall, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind, WriteTextFileRequest, McpServer,
    McpCapabilities,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, Client, Stdio};
use serde::{Deserialize, Serialize};

/// One stored conversation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Conversation {
    cwd: PathBuf,
    turns: Vec<(String, String)>,
}

#[derive(Default)]
struct State {
    conversations: HashMap<String, Conversation>,
    /// The number of the latest prompt turn of each session.
    turns_started: HashMap<String, u64>,
    /// Each session's prompt turns up to this number are cancelled (a
    /// cancel covers the turn running when it came, never a later one).
    cancelled_upto: HashMap<String, u64>,
    /// The MCP servers the client gave each session.
    mcp_servers: HashMap<String, Vec<McpServer>>,
}

#[derive(Clone)]
struct Agent0 {
    store: Option<PathBuf>,
    fault: Option<String>,
    mcp_http: bool,
    state: Arc<Mutex<State>>,
}

impl Agent0 {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn save(&self, id: &str) {
        let Some(dir) = &self.store else { return };
        let Some(conv) = self.state().conversations.get(id).cloned() else { return };
        let bytes = serde_json::to_vec(&conv).unwrap_or_default();
        let tmp = dir.join(format!(".{id}.tmp"));
        if std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, dir.join(format!("{id}.json")))).is_err() {
            eprintln!("acp_test_agent: could not save {id}");
        }
    }

    fn load(&self, id: &str) -> Option<Conversation> {
        let dir = self.store.as_ref()?;
        if id.contains('/') || id.contains("..") {
            return None;
        }
        serde_json::from_slice(&std::fs::read(dir.join(format!("{id}.json"))).ok()?).ok()
    }
}

fn text(t: &str) -> ContentBlock {
    ContentBlock::Text(TextContent::new(t))
}

fn say(cx: &ConnectionTo<Client>, sid: &str, update: SessionUpdate) -> agent_client_protocol::Result<()> {
    cx.send_notification(SessionNotification::new(sid.to_owned(), update))
}

fn fresh_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("acp-test-{}-{nanos:x}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

fn stdout_raw(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes);
    let _ = out.flush();
}

/// Runs one prompt turn; the stop reason and the reply.
async fn turn(agent: &Agent0, cx: &ConnectionTo<Client>, sid: &str, prompt: &str) -> agent_client_protocol::Result<(StopReason, String)> {
    let me = {
        let mut state = agent.state();
        let n = state.turns_started.entry(sid.to_owned()).or_default();
        *n += 1;
        *n
    };
    let cancelled = || agent.state().cancelled_upto.get(sid).copied().unwrap_or(0) >= me;
    match agent.fault.as_deref() {
        Some("exit-mid-turn") => {
            say(cx, sid, SessionUpdate::AgentMessageChunk(ContentChunk::new(text("about to go"))))?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            eprintln!("acp_test_agent: exiting mid-turn as asked");
            std::process::exit(3);
        }
        Some("garbage") => {
            eprintln!("acp_test_agent: printing garbage as asked");
            stdout_raw(b"this is not JSON at all\n");
        }
        Some("flood") => {
            eprintln!("acp_test_agent: flooding a 10 MB line as asked");
            let mut line = vec![b'x'; 10 * 1024 * 1024];
            line.push(b'\n');
            stdout_raw(&line);
        }
        _ => {}
    }
    let cwd = agent.state().conversations.get(sid).map(|c| c.cwd.clone()).unwrap_or_default();
    if let Some(rest) = prompt.strip_prefix("/tool") {
        let servers = agent.state().mcp_servers.get(sid).cloned().unwrap_or_default();
        let reply = call_tool(&servers, rest).await;
        say(cx, sid, SessionUpdate::AgentMessageChunk(ContentChunk::new(text(&reply))))?;
        return Ok((StopReason::EndTurn, reply));
    }
    if prompt.contains("slow") {
        for i in 0..200 {
            if cancelled() {
                return Ok((StopReason::Cancelled, format!("slow, cancelled after {i} chunks")));
            }
            say(cx, sid, SessionUpdate::AgentMessageChunk(ContentChunk::new(text(&format!("tick {i}. ")))))?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        return Ok((StopReason::EndTurn, "slow, done".to_owned()));
    }
    if prompt.contains("permission") {
        let call = "call-1";
        say(cx, sid, SessionUpdate::ToolCall(ToolCall::new(call, "Write note.txt").kind(ToolKind::Edit)))?;
        let options = vec![
            PermissionOption::new("allow", "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
        ];
        let asked = RequestPermissionRequest::new(
            sid.to_owned(),
            ToolCallUpdate::new(call, ToolCallUpdateFields::new().title("Write note.txt".to_owned())),
            options,
        );
        let answer = cx.send_request(asked).block_task().await?;
        let allowed = match answer.outcome {
            RequestPermissionOutcome::Selected(s) => s.option_id.0.as_ref() == "allow",
            _ => return Ok((StopReason::Cancelled, "permission cancelled".to_owned())),
        };
        if allowed {
            say(cx, sid, SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call, ToolCallUpdateFields::new().status(ToolCallStatus::InProgress))))?;
            let write = WriteTextFileRequest::new(sid.to_owned(), cwd.join("note.txt"), "written by acp_test_agent\n");
            let status = match cx.send_request(write).block_task().await {
                Ok(_) => ToolCallStatus::Completed,
                Err(_) => ToolCallStatus::Failed,
            };
            say(cx, sid, SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call, ToolCallUpdateFields::new().status(status))))?;
        } else {
            say(cx, sid, SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call, ToolCallUpdateFields::new().status(ToolCallStatus::Failed))))?;
        }
        let reply = if allowed { "permission granted, note written" } else { "permission denied" };
        say(cx, sid, SessionUpdate::AgentMessageChunk(ContentChunk::new(text(reply))))?;
        return Ok((StopReason::EndTurn, reply.to_owned()));
    }
    if prompt.contains("terminal") {
        let script = "echo pid $$; while [ ! -e go ]; do sleep 0.05; done; echo finished";
        let create = CreateTerminalRequest::new(sid.to_owned(), "sh").args(vec!["-c".to_owned(), script.to_owned()]).cwd(cwd.clone());
        let id = cx.send_request(create).block_task().await?.terminal_id;
        let mut pid = None;
        for _ in 0..200 {
            let out = cx.send_request(TerminalOutputRequest::new(sid.to_owned(), id.clone())).block_task().await?;
            pid = out.output.lines().find_map(|l| l.strip_prefix("pid ").map(str::to_owned));
            if pid.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let reply = format!("terminal {} started: pid {}", id.0, pid.unwrap_or_default());
        say(cx, sid, SessionUpdate::AgentMessageChunk(ContentChunk::new(text(&reply))))?;
        return Ok((StopReason::EndTurn, reply));
    }
    if prompt.contains("spawn-child") {
        let reply = match std::process::Command::new("sleep").arg("1000").spawn() {
            Ok(child) => format!("child pid {}", child.id()),
            Err(e) => format!("could not start sleep: {e}"),
        };
        say(cx, sid, SessionUpdate::AgentMessageChunk(ContentChunk::new(text(&reply))))?;
        return Ok((StopReason::EndTurn, reply));
    }
    if prompt.contains("outside") {
        let target = cwd.parent().unwrap_or(&cwd).join("outside.txt");
        let reply = match cx.send_request(WriteTextFileRequest::new(sid.to_owned(), target, "nope")).block_task().await {
            Ok(_) => "outside write allowed".to_owned(),
            Err(e) => format!("outside write refused: {e}"),
        };
        say(cx, sid, SessionUpdate::AgentMessageChunk(ContentChunk::new(text(&reply))))?;
        return Ok((StopReason::EndTurn, reply));
    }
    say(cx, sid, SessionUpdate::AgentThoughtChunk(ContentChunk::new(text("Thinking it over."))))?;
    say(
        cx,
        sid,
        SessionUpdate::Plan(Plan::new(vec![PlanEntry::new("Answer", PlanEntryPriority::High, PlanEntryStatus::InProgress)])),
    )?;
    let n = agent.state().conversations.get(sid).map(|c| c.turns.len() + 1).unwrap_or(1);
    let reply = format!("Reply: {prompt} (turn {n})");
    let chars: Vec<char> = reply.chars().collect();
    for piece in chars.chunks(chars.len().div_ceil(3).max(1)) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        say(cx, sid, SessionUpdate::AgentMessageChunk(ContentChunk::new(text(&piece.iter().collect::<String>()))))?;
    }
    Ok((StopReason::EndTurn, reply))
}

/// `/tool NAME [JSON]` or `/tool-bad-secret NAME` (`rest` is what follows
/// `/tool`): calls the tool on the first MCP server given and says what
/// came back.
async fn call_tool(servers: &[McpServer], rest: &str) -> String {
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ServiceExt;

    let (bad_secret, rest) = match rest.strip_prefix("-bad-secret") {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let rest = rest.trim();
    let (name, args) = match rest.split_once(char::is_whitespace) {
        Some((n, a)) => (n.to_owned(), a.trim()),
        None => (rest.to_owned(), ""),
    };
    let arguments = if args.is_empty() {
        serde_json::Map::new()
    } else {
        match serde_json::from_str::<serde_json::Value>(args) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => return format!("tool {name} failed: the arguments are not a JSON object"),
        }
    };
    let params = CallToolRequestParams::new(name.clone()).with_arguments(arguments);
    let answer = match servers.first() {
        None => return format!("tool {name} failed: no MCP server was given"),
        Some(McpServer::Http(http)) => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(http.url.clone());
            for h in &http.headers {
                if h.name.eq_ignore_ascii_case("authorization") {
                    let token = h.value.strip_prefix("Bearer ").unwrap_or(&h.value).to_owned();
                    config = config.auth_header(if bad_secret { "0".repeat(token.len()) } else { token });
                }
            }
            match ().serve(StreamableHttpClientTransport::from_config(config)).await {
                Ok(client) => {
                    let answer = client.call_tool(params).await.map_err(|e| e.to_string());
                    let _ = client.cancel().await;
                    answer
                }
                Err(e) => Err(e.to_string()),
            }
        }
        Some(McpServer::Stdio(stdio)) => {
            let mut command = tokio::process::Command::new(&stdio.command);
            command.args(&stdio.args).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).kill_on_drop(true);
            for e in &stdio.env {
                command.env(&e.name, &e.value);
            }
            match command.spawn() {
                Ok(mut child) => {
                    let (Some(out), Some(input)) = (child.stdout.take(), child.stdin.take()) else {
                        return format!("tool {name} failed: no pipes to the MCP server");
                    };
                    match ().serve((out, input)).await {
                        Ok(client) => {
                            let answer = client.call_tool(params).await.map_err(|e| e.to_string());
                            let _ = client.cancel().await;
                            answer
                        }
                        Err(e) => Err(e.to_string()),
                    }
                }
                Err(e) => Err(format!("could not start {}: {e}", stdio.command.display())),
            }
        }
        Some(_) => return format!("tool {name} failed: an MCP server of a kind this agent does not take"),
    };
    match answer {
        Err(e) => format!("tool {name} failed: {e}"),
        Ok(result) => {
            let text: String = result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join(" ");
            let verdict = if result.is_error == Some(true) { "error" } else { "ok" };
            format!("tool {name} {verdict}: {text}")
        }
    }
}

#[tokio::main]
async fn main() -> agent_client_protocol::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut store = None;
    let mut fault = None;
    let mut mcp_http = true;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--no-mcp-http" => mcp_http = false,
            "--store" => store = args.next().map(PathBuf::from),
            "--fault" => fault = args.next(),
            other => {
                eprintln!("acp_test_agent: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    if let Some(dir) = &store {
        let _ = std::fs::create_dir_all(dir);
    }
    eprintln!("acp_test_agent: started (fault: {fault:?})");
    let agent = Agent0 { store, fault, mcp_http, state: Arc::default() };
    let (a1, a2, a3, a4, a5) = (agent.clone(), agent.clone(), agent.clone(), agent.clone(), agent.clone());
    Agent
        .v1()
        .name("acp_test_agent")
        .on_receive_request(
            async move |init: InitializeRequest, responder, _cx| {
                if a1.fault.as_deref() == Some("hang-initialize") {
                    eprintln!("acp_test_agent: not answering initialize as asked");
                    std::future::pending::<()>().await;
                }
                responder.respond(
                    InitializeResponse::new(init.protocol_version)
                        .agent_capabilities(
                            AgentCapabilities::new()
                                .load_session(a1.store.is_some())
                                .mcp_capabilities(McpCapabilities::new().http(a1.mcp_http)),
                        ),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder, _cx| {
                let id = fresh_id();
                a2.state().mcp_servers.insert(id.clone(), req.mcp_servers);
                a2.state().conversations.insert(id.clone(), Conversation { cwd: req.cwd, turns: Vec::new() });
                a2.save(&id);
                responder.respond(NewSessionResponse::new(id))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest, responder, cx| {
                let id = req.session_id.0.to_string();
                let Some(mut conv) = a3.load(&id) else {
                    return responder.respond_with_error(agent_client_protocol::Error::invalid_params().data(serde_json::json!(format!("no conversation {id}"))));
                };
                for (user, reply) in &conv.turns {
                    say(&cx, &id, SessionUpdate::UserMessageChunk(ContentChunk::new(text(user))))?;
                    say(&cx, &id, SessionUpdate::AgentMessageChunk(ContentChunk::new(text(reply))))?;
                }
                conv.cwd = req.cwd;
                a3.state().mcp_servers.insert(id.clone(), req.mcp_servers);
                a3.state().conversations.insert(id, conv);
                responder.respond(LoadSessionResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, cx| {
                let agent = a4.clone();
                let task_cx = cx.clone();
                cx.spawn(async move {
                    let sid = req.session_id.0.to_string();
                    if !agent.state().conversations.contains_key(&sid) {
                        return responder.respond_with_error(agent_client_protocol::Error::invalid_params().data(serde_json::json!("unknown session")));
                    }
                    let prompt: String = req
                        .prompt
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text(t) => Some(t.text.as_str()),
                            _ => None,
                        })
                        .collect();
                    let (stop, reply) = turn(&agent, &task_cx, &sid, &prompt).await?;
                    if let Some(conv) = agent.state().conversations.get_mut(&sid) {
                        conv.turns.push((prompt, reply));
                    }
                    agent.save(&sid);
                    responder.respond(PromptResponse::new(stop))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _cx| {
                let sid = n.session_id.0.to_string();
                let mut state = a5.state();
                let running = state.turns_started.get(&sid).copied().unwrap_or(0);
                state.cancelled_upto.insert(sid, running);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(Stdio::new())
        .await
}
