//! The host's own MCP server, the way its agents reach the host (issue 24;
//! docs/DECISIONS.md 22): `send_message`, `schedule_wakeup`,
//! `cancel_wakeup`, `start_child_session`, `child_status` and `list_peers`,
//! served with the MCP SDK `rmcp` over streamable HTTP on a loopback
//! listener the daemon opens at start (port 0: the OS picks).
//!
//! Transport only: every call is handed to the driver as one
//! `Input::HostTool` ([`EventSink::host_tool`]) and answered from the core's
//! one `Effect::HostToolAnswer`; no rule of a tool lives here.
//!
//! Who calls is told by a per-chat secret ([`Secrets`]): made from OS
//! randomness when a chat's agent is started, handed to that agent only
//! (an `Authorization: Bearer` header in ACP's `mcpServers`), mapping to
//! exactly that chat, forgotten when the chat's agent goes ([`ChatSecret`]
//! is dropped with it) and never logged. A request without a secret the
//! host holds is answered `401` before MCP sees it, so it reaches nothing.
//!
//! The server is stateless (rmcp's `legacy_session_mode` off, JSON
//! answers): every HTTP request is checked and served on its own, so no MCP
//! session outlives the secret it was opened with.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use ahp_types::Uri;
use ahpd_core::{HostToolRequest, HostToolResult};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper_util::rt::TokioIo;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;

use crate::events::EventSink;

/// The path the server answers on; anything else is `404`.
pub const PATH: &str = "/mcp";

/// The name agents see the server under (Claude Code shows its tools as
/// `mcp__ahpd__send_message`, ...).
pub const SERVER_NAME: &str = "ahpd";

/// The environment variable `ahpd mcp-bridge` reads the chat's secret from
/// (an agent without MCP over HTTP gets the bridge as a stdio server, with
/// the secret in its environment rather than on a command line anyone on
/// the machine can read).
pub const BRIDGE_TOKEN_ENV: &str = "AHPD_MCP_TOKEN";

/// Bytes of OS randomness in a chat's secret (256 bits, sent as 64 hex
/// digits).
const SECRET_BYTES: usize = 32;

/// The per-chat secrets the server takes: each maps to exactly one chat.
/// Cloned handles share one table.
#[derive(Clone, Default)]
pub struct Secrets(Arc<Mutex<HashMap<String, Uri>>>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets themselves.
        write!(f, "Secrets({} held)", self.table().len())
    }
}

impl Secrets {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Uri>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A fresh secret for `chat`'s agent, from OS randomness; forgotten
    /// when the returned value is dropped.
    ///
    /// Errors: the OS gave no randomness (the agent is then started
    /// without the host's tools rather than with a guessable secret).
    pub fn issue(&self, chat: &Uri) -> Result<ChatSecret, String> {
        let mut bytes = [0u8; SECRET_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| format!("no OS randomness for the chat's MCP secret: {e}"))?;
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        self.table().insert(token.clone(), chat.clone());
        Ok(ChatSecret { token, secrets: self.clone() })
    }

    /// The chat `token` belongs to, if the host holds it.
    pub fn chat_of(&self, token: &str) -> Option<Uri> {
        self.table().get(token).cloned()
    }

}

/// One chat's secret, held with its running agent: dropping it forgets the
/// secret, so a call with it is refused from then on.
pub struct ChatSecret {
    token: String,
    secrets: Secrets,
}

impl ChatSecret {
    /// The bearer token to hand the chat's agent (and nobody else).
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl std::fmt::Debug for ChatSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChatSecret(..)")
    }
}

impl Drop for ChatSecret {
    fn drop(&mut self) {
        self.secrets.table().remove(&self.token);
    }
}

/// Where the host's MCP server listens and the secrets it takes; handed to
/// the ACP executor, which issues a secret per chat and gives its agent
/// the server.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    /// The secrets the server takes.
    pub secrets: Secrets,
}

/// The chat a request was authenticated for, put in the request's
/// extensions by the listener before rmcp sees it.
#[derive(Clone, Debug)]
struct Caller(Uri);

/// Opens the server on a loopback port the OS picks and serves it until the
/// process ends; the address is in the returned [`Endpoint`].
///
/// Errors: the listener could not be opened.
pub async fn serve(events: EventSink) -> Result<Endpoint, String> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| format!("could not open the MCP listener on 127.0.0.1: {e}"))?;
    let local = listener.local_addr().map_err(|e| format!("could not read the MCP listener's address: {e}"))?;
    let secrets = Secrets::default();
    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(false).with_json_response(true);
    let tools_events = events.clone();
    let service: StreamableHttpService<HostTools, NeverSessionManager> =
        StreamableHttpService::new(move || Ok(HostTools::new(tools_events.clone())), Arc::new(NeverSessionManager::default()), config);
    let gate = Gate { secrets: secrets.clone(), service };
    tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "mcp: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let gate = gate.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let gate = gate.clone();
                    async move { Ok::<_, Infallible>(gate.handle(req).await) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await {
                    tracing::debug!(error = %e, "mcp: connection ended");
                }
            });
        }
    });
    let url = format!("http://{local}{PATH}");
    tracing::info!(%url, "host tools: MCP server for the agents (loopback, a secret per chat)");
    Ok(Endpoint { url, secrets })
}

/// The listener's one check before MCP: the path, then the secret.
#[derive(Clone)]
struct Gate {
    secrets: Secrets,
    service: StreamableHttpService<HostTools, NeverSessionManager>,
}

impl Gate {
    async fn handle(&self, mut req: Request<hyper::body::Incoming>) -> Response<BoxBody<Bytes, Infallible>> {
        if req.uri().path() != PATH {
            return plain(StatusCode::NOT_FOUND, "not found\n");
        }
        let token = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        let Some(chat) = token.and_then(|t| self.secrets.chat_of(t)) else {
            // No word of which secret: it is not logged, and the caller
            // learns nothing but "no".
            tracing::info!("mcp: a request without a secret the host holds was refused");
            let mut refused = plain(StatusCode::UNAUTHORIZED, "401 Unauthorized: a chat's secret is required (Authorization: Bearer)\n");
            refused.headers_mut().insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
            return refused;
        };
        // rmcp keeps the request's parts in each call's context (and its
        // debug log prints them): the secret stops here.
        req.headers_mut().remove(http::header::AUTHORIZATION);
        req.extensions_mut().insert(Caller(chat));
        self.service.handle(req).await
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<BoxBody<Bytes, Infallible>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// `send_message`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SendMessageArgs {
    /// The session to write to, by URI (`ahp-session:/...`).
    pub session: String,
    /// The message; it arrives as a turn on that session's default chat.
    pub text: String,
}

/// `schedule_wakeup`'s arguments: exactly one of `after_seconds` and `at`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ScheduleWakeupArgs {
    /// Seconds from now.
    #[serde(default)]
    pub after_seconds: Option<u64>,
    /// An RFC 3339 time, e.g. `2026-01-01T09:00:00Z`.
    #[serde(default)]
    pub at: Option<String>,
    /// The prompt the wake's turn starts with.
    pub prompt: String,
}

/// `cancel_wakeup`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CancelWakeupArgs {
    /// The id `schedule_wakeup` answered.
    pub id: String,
}

/// `start_child_session`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct StartChildArgs {
    /// The agent to run (`echo`, or an ACP agent's name).
    pub provider: String,
    /// The child's first prompt.
    pub prompt: String,
    /// The folder it works in, as a `file:` URI; this session's first when absent.
    #[serde(default)]
    pub working_directory: Option<String>,
}

/// `child_status`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ChildStatusArgs {
    /// The child session's URI, as `start_child_session` answered it.
    pub child: String,
}

/// The MCP server's handler: one per HTTP request (stateless), each call
/// forwarded to the core for the chat the request's secret names.
#[derive(Clone)]
pub struct HostTools {
    events: EventSink,
    tool_router: ToolRouter<HostTools>,
}

#[tool_router]
impl HostTools {
    fn new(events: EventSink) -> HostTools {
        HostTools { events, tool_router: Self::tool_router() }
    }

    /// Hands `tool` to the core for the caller's chat and turns its answer
    /// into a tool result: the answer as JSON, or a refusal as a tool
    /// error (`isError`) whose text starts with its code.
    async fn call(&self, parts: &http::request::Parts, tool: HostToolRequest) -> Result<CallToolResult, ErrorData> {
        let Some(Caller(chat)) = parts.extensions.get::<Caller>().cloned() else {
            // The gate puts it there on every request it lets through.
            return Err(ErrorData::internal_error("the request carries no authenticated chat", None));
        };
        let name = tool.name();
        let answer: HostToolResult = self.events.host_tool(chat.clone(), tool).await;
        match answer {
            Ok(value) => {
                tracing::debug!(chat = %chat, tool = name, "mcp: tool call answered");
                Ok(match value {
                    serde_json::Value::Object(_) => CallToolResult::structured(value),
                    other => CallToolResult::success(vec![ContentBlock::text(other.to_string())]),
                })
            }
            Err(refusal) => {
                tracing::info!(chat = %chat, tool = name, code = refusal.code.as_str(), "mcp: tool call refused");
                Ok(CallToolResult::error(vec![ContentBlock::text(refusal.to_string())]))
            }
        }
    }

    #[tool(description = "Send a message to another session on this host. It arrives there as a turn, \
        its origin naming this session, and wakes the session if it sleeps. Refused when the session \
        does not exist or this session's owner may not write to it.")]
    async fn send_message(
        &self,
        Parameters(args): Parameters<SendMessageArgs>,
        Extension(parts): Extension<http::request::Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&parts, HostToolRequest::SendMessage { session: args.session, text: args.text }).await
    }

    #[tool(description = "Ask to be woken later: when due, this session wakes (if asleep) and `prompt` \
        starts a turn in this chat. Give exactly one of `after_seconds` and `at`. Kept across sleep and \
        restart; a session has a bounded number waiting. Answers the wake's id.")]
    async fn schedule_wakeup(
        &self,
        Parameters(args): Parameters<ScheduleWakeupArgs>,
        Extension(parts): Extension<http::request::Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&parts, HostToolRequest::ScheduleWakeup { after_seconds: args.after_seconds, at: args.at, prompt: args.prompt }).await
    }

    #[tool(description = "Cancel one of this session's waiting wakes, by the id schedule_wakeup answered.")]
    async fn cancel_wakeup(
        &self,
        Parameters(args): Parameters<CancelWakeupArgs>,
        Extension(parts): Extension<http::request::Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&parts, HostToolRequest::CancelWakeup { id: args.id }).await
    }

    #[tool(description = "Start a child session on `provider` with `prompt` as its first turn, owned as \
        this session is. When a turn of the child ends, this session gets childFinished with the \
        child's last reply (and wakes if asleep). Answers the child's session URI.")]
    async fn start_child_session(
        &self,
        Parameters(args): Parameters<StartChildArgs>,
        Extension(parts): Extension<http::request::Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let tool = HostToolRequest::StartChildSession { provider: args.provider, prompt: args.prompt, working_directory: args.working_directory };
        self.call(&parts, tool).await
    }

    #[tool(description = "Where a child session of this session stands: its status and last reply.")]
    async fn child_status(
        &self,
        Parameters(args): Parameters<ChildStatusArgs>,
        Extension(parts): Extension<http::request::Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        self.call(&parts, HostToolRequest::ChildStatus { child: args.child }).await
    }

    #[tool(description = "The other live sessions working in this session's folders (workspace awareness), \
        as ahpd/listPeers answers them.")]
    async fn list_peers(&self, Extension(parts): Extension<http::request::Parts>) -> Result<CallToolResult, ErrorData> {
        self.call(&parts, HostToolRequest::ListPeers).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for HostTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools of the ahpd host this agent runs in: message another session, ask to be woken \
                 later, start and follow child sessions, see the peers working in the same folders.",
            )
    }
}

/// `ahpd mcp-bridge --url URL`: an MCP server on stdin/stdout that relays
/// every message to the host's MCP server at `url` with the chat's secret
/// from [`BRIDGE_TOKEN_ENV`], for an agent that takes only stdio MCP
/// servers. Both ends are rmcp transports; the bridge reads no message.
///
/// Errors: no secret in the environment, or either end failed.
pub async fn bridge(url: &str) -> Result<(), String> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::{IntoTransport, StreamableHttpClientTransport, Transport};
    use rmcp::{RoleClient, RoleServer};

    let token = std::env::var(BRIDGE_TOKEN_ENV).map_err(|_| format!("{BRIDGE_TOKEN_ENV} is not set: the bridge needs the chat's secret"))?;
    let mut down = IntoTransport::<RoleServer, _, _>::into_transport(rmcp::transport::io::stdio());
    let mut up: StreamableHttpClientTransport<_> =
        StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token));
    loop {
        tokio::select! {
            from_agent = Transport::<RoleServer>::receive(&mut down) => match from_agent {
                Some(message) => Transport::<RoleClient>::send(&mut up, message).await.map_err(|e| format!("to {url}: {e}"))?,
                None => break,
            },
            from_host = Transport::<RoleClient>::receive(&mut up) => match from_host {
                Some(message) => Transport::<RoleServer>::send(&mut down, message).await.map_err(|e| format!("to the agent: {e}"))?,
                None => break,
            },
        }
    }
    let _ = Transport::<RoleClient>::close(&mut up).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret maps to its own chat only, two chats never share one, and a
    /// dropped secret is refused from then on.
    #[test]
    fn a_secret_names_one_chat_and_goes_with_its_agent() {
        let secrets = Secrets::default();
        let a = secrets.issue(&"ahp-chat:/a".to_owned()).unwrap();
        let b = secrets.issue(&"ahp-chat:/b".to_owned()).unwrap();
        assert_ne!(a.token(), b.token());
        assert_eq!(a.token().len(), 2 * SECRET_BYTES);
        assert_eq!(secrets.chat_of(a.token()).as_deref(), Some("ahp-chat:/a"));
        assert_eq!(secrets.chat_of(b.token()).as_deref(), Some("ahp-chat:/b"));
        assert_eq!(secrets.chat_of("").as_deref(), None);
        let gone = a.token().to_owned();
        drop(a);
        assert_eq!(secrets.chat_of(&gone), None);
        assert_eq!(secrets.table().len(), 1);
        assert!(!format!("{b:?}{secrets:?}").contains(b.token()), "Debug never shows a secret");
    }

    /// Through the real server: a call with chat A's secret reaches the
    /// driver as A's call (and B's as B's), its answer comes back as the
    /// tool's result; once A's secret is dropped (its agent went), the same
    /// call is refused before MCP and the driver hears nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_call_acts_for_its_secrets_chat_until_the_secret_goes() {
        use rmcp::model::CallToolRequestParams;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::ServiceExt;

        let (events, mut rx) = EventSink::channel();
        let endpoint = serve(events).await.unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&heard);
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                if let crate::events::Event::HostTool { chat, tool, reply } = event {
                    log.lock().unwrap().push((chat.clone(), tool.name()));
                    let _ = reply.send(Ok(serde_json::json!({ "caller": chat })));
                }
            }
        });
        let call = |token: String| {
            let url = endpoint.url.clone();
            async move {
                let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
                let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.map_err(|e| e.to_string())?;
                let result = client.call_tool(CallToolRequestParams::new("list_peers")).await.map_err(|e| e.to_string());
                let _ = client.cancel().await;
                result.map(|r| r.structured_content)
            }
        };
        let a = endpoint.secrets.issue(&"ahp-chat:/a".to_owned()).unwrap();
        let b = endpoint.secrets.issue(&"ahp-chat:/b".to_owned()).unwrap();
        let a_token = a.token().to_owned();
        assert_eq!(call(a_token.clone()).await.unwrap(), Some(serde_json::json!({ "caller": "ahp-chat:/a" })));
        assert_eq!(call(b.token().to_owned()).await.unwrap(), Some(serde_json::json!({ "caller": "ahp-chat:/b" })));
        drop(a);
        let refused = call(a_token).await.unwrap_err();
        assert!(refused.contains("Auth required"), "{refused}");
        assert_eq!(*heard.lock().unwrap(), [("ahp-chat:/a".to_owned(), "list_peers"), ("ahp-chat:/b".to_owned(), "list_peers")]);
    }
}
