//! Client frames to requests: bounded and total. Every input either decodes
//! or yields the JSON-RPC error to answer with; nothing here panics. A
//! message's method is decoded here, once, to a [`Method`]: the one place
//! that reads method names; the host routes on the enum.

use ahp_types::messages::JsonRpcError;
use serde_json::Value;

use super::error::{error, INVALID_REQUEST, PARSE_ERROR};

/// Largest frame the decoder reads, in bytes (a larger one is -32600).
pub const FRAME_MAX_BYTES: usize = 4 * 1024 * 1024;

/// One decoded client message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: answer exactly once, with `id`.
    Request {
        /// The request id (AHP ids are non-negative integers).
        id: u64,
        /// The method, decoded ([`Method::Unknown`] for a name the host
        /// does not answer).
        method: Method,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A notification: no answer (`dispatchAction`, `unsubscribe`).
    Notification {
        /// The method, decoded as a request's is.
        method: Method,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A `dispatchAction` notification, its params decoded to their type
    /// already (with the frame, wherever the frame was decoded: the daemon
    /// decodes in the connection's reader, so a 900 KB message is never
    /// decoded on the thread every client waits on, issue 25). The same
    /// notification whose params do not decode to the type comes as
    /// [`Incoming::Notification`] (the host logs why and drops it).
    Action(Box<ahp_types::commands::DispatchActionParams>),
    /// A response to a request the host sent; the host sends none, so these
    /// are ignored.
    Response,
}

impl Incoming {
    /// The message as JSON-RPC text again (the fuzz target's round trip:
    /// whatever decodes re-encodes and decodes to the same value).
    pub fn to_json(&self) -> String {
        let value = match self {
            Incoming::Request { id, method, params } => {
                let mut m = serde_json::Map::new();
                m.insert("jsonrpc".into(), Value::from("2.0"));
                m.insert("id".into(), Value::from(*id));
                m.insert("method".into(), Value::from(method.name()));
                m.insert("params".into(), params.clone());
                Value::Object(m)
            }
            Incoming::Notification { method, params } => {
                let mut m = serde_json::Map::new();
                m.insert("jsonrpc".into(), Value::from("2.0"));
                m.insert("method".into(), Value::from(method.name()));
                m.insert("params".into(), params.clone());
                Value::Object(m)
            }
            Incoming::Action(params) => {
                let mut m = serde_json::Map::new();
                m.insert("jsonrpc".into(), Value::from("2.0"));
                m.insert("method".into(), Value::from(DISPATCH_ACTION));
                m.insert("params".into(), serde_json::to_value(params).unwrap_or(Value::Null));
                Value::Object(m)
            }
            Incoming::Response => {
                let mut m = serde_json::Map::new();
                m.insert("jsonrpc".into(), Value::from("2.0"));
                m.insert("id".into(), Value::Null);
                m.insert("result".into(), Value::Null);
                Value::Object(m)
            }
        };
        value.to_string()
    }
}

/// A frame that could not be decoded: the id to answer (if one could be
/// read) and the error. `id: None` with a notification-shaped frame means
/// "answer nothing".
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeError {
    /// The request id, when the frame had a readable one.
    pub id: Option<u64>,
    /// What to answer.
    pub error: JsonRpcError,
}

/// One frame's text as [`decode_bounded`] left it: the message, or the
/// error to answer it with. A frame that waits (behind a held handshake,
/// `host/connections.rs`) waits in this form, decoded once.
pub type Decoded = Result<Incoming, DecodeError>;

/// Decodes one frame's text.
///
/// Errors: not JSON (or nested deeper than serde_json's 128 levels) →
/// -32700; JSON that is not a JSON-RPC 2.0 request or notification, an id
/// that is not a non-negative integer, or a frame over [`FRAME_MAX_BYTES`]
/// → -32600. A frame with no `method` and a `result` or `error` is a
/// [`Incoming::Response`] whatever its id (never answered).
pub fn decode(text: &str) -> Result<Incoming, DecodeError> {
    decode_bounded(text, FRAME_MAX_BYTES)
}

/// The one notification decoded to its params' type ([`Incoming::Action`]).
const DISPATCH_ACTION: &str = "dispatchAction";

/// A client method, decoded from a frame's `method`: one variant per
/// method the host answers (requests, and the notifications
/// `dispatchAction` and `unsubscribe`), [`Method::Unknown`] for any other
/// name. The rule: [`Method::parse`] and [`Method::name`] are each
/// other's inverse (a known name never parses to `Unknown`), so a decoded
/// message re-encodes to the same method. Params are not read here: each
/// handler parses its own, after the checks that come before them (an
/// uninitialized connection is refused before its params are looked at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// `ping`: answered `null`.
    Ping,
    /// `initialize`: the handshake.
    Initialize,
    /// `reconnect`: the handshake again, after a drop.
    Reconnect,
    /// `authenticate`: signs the connection in (may come before the
    /// handshake).
    Authenticate,
    /// `subscribe`.
    Subscribe,
    /// `unsubscribe` (a request or a notification).
    Unsubscribe,
    /// `createSession`.
    CreateSession,
    /// `disposeSession`.
    DisposeSession,
    /// `listSessions`.
    ListSessions,
    /// `fetchTurns`.
    FetchTurns,
    /// `createChat`.
    CreateChat,
    /// `disposeChat`.
    DisposeChat,
    /// `moveChat`.
    MoveChat,
    /// `resolveSessionConfig`.
    ResolveSessionConfig,
    /// `sessionConfigCompletions`.
    SessionConfigCompletions,
    /// `ahpd/listPeers`: the daemon's own (awareness).
    ListPeers,
    /// `runAutomation`.
    RunAutomation,
    /// `fetchAutomationRuns`.
    FetchAutomationRuns,
    /// `listAutomationTriggerDefinitions`.
    ListAutomationTriggerDefinitions,
    /// `dispatchAction`: a notification (one whose params decode is
    /// [`Incoming::Action`]); sent as a request it is refused.
    DispatchAction,
    /// One of the window's five detached-worktree requests.
    Detached(DetachedMethod),
    /// One of the files commands (issue 48), answered by the files owner
    /// (`crate::files`).
    Files(FileMethod),
    /// Any other name, as sent (answered "method not found" as a request,
    /// logged and dropped as a notification).
    Unknown(String),
}

impl Method {
    /// Every known method but the detached ones ([`DetachedMethod::ALL`]),
    /// each once: what [`Method::parse`] looks a name up in.
    pub const KNOWN: [Method; 20] = [
        Method::Ping,
        Method::Initialize,
        Method::Reconnect,
        Method::Authenticate,
        Method::Subscribe,
        Method::Unsubscribe,
        Method::CreateSession,
        Method::DisposeSession,
        Method::ListSessions,
        Method::FetchTurns,
        Method::CreateChat,
        Method::DisposeChat,
        Method::MoveChat,
        Method::ResolveSessionConfig,
        Method::SessionConfigCompletions,
        Method::ListPeers,
        Method::RunAutomation,
        Method::FetchAutomationRuns,
        Method::ListAutomationTriggerDefinitions,
        Method::DispatchAction,
    ];

    /// The method named `name` (looked up by [`Method::known_name`], the
    /// one place the names are written); [`Method::Unknown`] keeps a name
    /// the host does not answer.
    pub fn parse(name: String) -> Method {
        if let Some(known) = Method::KNOWN.iter().find(|m| m.known_name() == Some(name.as_str())) {
            return known.clone();
        }
        if let Some(f) = FileMethod::parse(&name) {
            return Method::Files(f);
        }
        match DetachedMethod::parse(&name) {
            Some(d) => Method::Detached(d),
            None => Method::Unknown(name),
        }
    }

    /// The wire name of a known method; `None` for [`Method::Unknown`].
    pub fn known_name(&self) -> Option<&'static str> {
        Some(match self {
            Method::Ping => "ping",
            Method::Initialize => "initialize",
            Method::Reconnect => "reconnect",
            Method::Authenticate => "authenticate",
            Method::Subscribe => "subscribe",
            Method::Unsubscribe => "unsubscribe",
            Method::CreateSession => "createSession",
            Method::DisposeSession => "disposeSession",
            Method::ListSessions => "listSessions",
            Method::FetchTurns => "fetchTurns",
            Method::CreateChat => "createChat",
            Method::DisposeChat => "disposeChat",
            Method::MoveChat => "moveChat",
            Method::ResolveSessionConfig => "resolveSessionConfig",
            Method::SessionConfigCompletions => "sessionConfigCompletions",
            Method::ListPeers => "ahpd/listPeers",
            Method::RunAutomation => "runAutomation",
            Method::FetchAutomationRuns => "fetchAutomationRuns",
            Method::ListAutomationTriggerDefinitions => "listAutomationTriggerDefinitions",
            Method::DispatchAction => DISPATCH_ACTION,
            Method::Detached(d) => d.name(),
            Method::Files(f) => f.name(),
            Method::Unknown(_) => return None,
        })
    }

    /// The wire name: a known method's, or an unknown one's as sent (not
    /// made printable: [`crate::ids::printable`] it before a log or an
    /// error message).
    pub fn name(&self) -> &str {
        match self {
            Method::Unknown(name) => name,
            known => known.known_name().unwrap_or_default(),
        }
    }
}

/// The window's five requests for detached worktrees (Sessions page,
/// "Isolation and worktrees"), answered in `host/detached.rs` (the data
/// in [`crate::detached`]). Every one needs `session:worktree`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetachedMethod {
    /// `vscode/createAgentHostDetachedWorktree` `{session, prompt}` ->
    /// `{handle, resource}`.
    Create,
    /// `vscode/claimAgentHostDetachedWorktree` `{handle}` -> `{}`.
    Claim,
    /// `vscode/setAgentHostDetachedWorktreeArchived` `{handle, archived}`
    /// -> `{}`.
    SetArchived,
    /// `vscode/deleteAgentHostDetachedWorktree` `{handle}` -> `{}`.
    Delete,
    /// `vscode/reconcileAgentHostDetachedWorktrees` `{scope,
    /// activeHandles}` -> `{}`.
    Reconcile,
}

impl DetachedMethod {
    /// The five, in the page's order.
    pub const ALL: [DetachedMethod; 5] =
        [DetachedMethod::Create, DetachedMethod::Claim, DetachedMethod::SetArchived, DetachedMethod::Delete, DetachedMethod::Reconcile];

    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            DetachedMethod::Create => "vscode/createAgentHostDetachedWorktree",
            DetachedMethod::Claim => "vscode/claimAgentHostDetachedWorktree",
            DetachedMethod::SetArchived => "vscode/setAgentHostDetachedWorktreeArchived",
            DetachedMethod::Delete => "vscode/deleteAgentHostDetachedWorktree",
            DetachedMethod::Reconcile => "vscode/reconcileAgentHostDetachedWorktrees",
        }
    }

    /// The one of the five named `name`, if any.
    pub fn parse(name: &str) -> Option<DetachedMethod> {
        DetachedMethod::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// The files commands (issue 48; AHP 1.0's `resource*` family,
/// `createResourceWatch` and `completions`), answered by the files owner
/// (`crate::files`): each reads its params after the handshake check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileMethod {
    /// `resourceList`.
    List,
    /// `resourceRead`.
    Read,
    /// `resourceWrite`.
    Write,
    /// `resourceResolve`.
    Resolve,
    /// `resourceMkdir`.
    Mkdir,
    /// `resourceCopy`.
    Copy,
    /// `resourceMove`.
    Move,
    /// `resourceDelete`.
    Delete,
    /// `resourceRequest`.
    Request,
    /// `createResourceWatch`.
    CreateWatch,
    /// `completions`.
    Completions,
}

impl FileMethod {
    /// The eleven, each once.
    pub const ALL: [FileMethod; 11] = [
        FileMethod::List,
        FileMethod::Read,
        FileMethod::Write,
        FileMethod::Resolve,
        FileMethod::Mkdir,
        FileMethod::Copy,
        FileMethod::Move,
        FileMethod::Delete,
        FileMethod::Request,
        FileMethod::CreateWatch,
        FileMethod::Completions,
    ];

    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            FileMethod::List => "resourceList",
            FileMethod::Read => "resourceRead",
            FileMethod::Write => "resourceWrite",
            FileMethod::Resolve => "resourceResolve",
            FileMethod::Mkdir => "resourceMkdir",
            FileMethod::Copy => "resourceCopy",
            FileMethod::Move => "resourceMove",
            FileMethod::Delete => "resourceDelete",
            FileMethod::Request => "resourceRequest",
            FileMethod::CreateWatch => "createResourceWatch",
            FileMethod::Completions => "completions",
        }
    }

    /// The one named `name`, if any.
    pub fn parse(name: &str) -> Option<FileMethod> {
        FileMethod::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// [`decode`] with a frame limit of `max_bytes`.
pub fn decode_bounded(text: &str, max_bytes: usize) -> Result<Incoming, DecodeError> {
    if let Some(refused) = over_limit(text.len(), max_bytes) {
        return Err(refused);
    }
    if let Some(action) = as_action(text) {
        return Ok(action);
    }
    let value: Value = serde_json::from_str(text).map_err(|e| DecodeError {
        id: None,
        error: error(PARSE_ERROR, format!("parse error: {e}")),
    })?;
    let Value::Object(mut object) = value else {
        return Err(DecodeError {
            id: None,
            error: error(INVALID_REQUEST, "a JSON-RPC message must be a JSON object"),
        });
    };
    // A response is never answered (JSON-RPC 2.0, section 5): one whose
    // id is null (an error the peer could not tie to a request) or not an
    // integer is still a response, and the host sent no request to match.
    if !object.contains_key("method") && (object.contains_key("result") || object.contains_key("error")) {
        return Ok(Incoming::Response);
    }
    let id = match object.get("id") {
        None => None,
        // A request whose id is null is still a request (JSON-RPC 2.0): it
        // is answered, with an error, rather than taken as a notification.
        Some(Value::Null) => {
            return Err(DecodeError {
                id: None,
                error: error(INVALID_REQUEST, "the id must be a non-negative integer, not null"),
            })
        }
        Some(Value::Number(n)) => match n.as_u64() {
            Some(id) => Some(id),
            None => {
                return Err(DecodeError {
                    id: None,
                    error: error(INVALID_REQUEST, "the id must be a non-negative integer"),
                })
            }
        },
        Some(_) => {
            return Err(DecodeError {
                id: None,
                error: error(INVALID_REQUEST, "the id must be a non-negative integer"),
            })
        }
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(DecodeError { id, error: error(INVALID_REQUEST, "jsonrpc must be \"2.0\"") });
    }
    let method = match object.remove("method") {
        Some(Value::String(method)) => method,
        Some(_) => {
            return Err(DecodeError { id, error: error(INVALID_REQUEST, "method must be a string") })
        }
        None => return Err(DecodeError { id, error: error(INVALID_REQUEST, "method is missing") }),
    };
    let method = Method::parse(method);
    let params = object.remove("params").unwrap_or(Value::Null);
    Ok(match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method, params },
    })
}

/// `text` as an [`Incoming::Action`] when it is a well-formed
/// `dispatchAction` notification whose params decode to their type, read
/// straight from the text (no tree of JSON values first, no copy of its
/// strings); `None` for anything else, which the general decoder then reads
/// (and answers or drops exactly as before: a frame decoded here is one it
/// would have taken as this notification).
fn as_action(text: &str) -> Option<Incoming> {
    #[derive(serde::Deserialize)]
    struct ActionFrame {
        jsonrpc: String,
        method: String,
        /// Present (even `null`) makes it a request, which this is not.
        #[serde(default, deserialize_with = "present")]
        id: Option<()>,
        params: ahp_types::commands::DispatchActionParams,
    }
    /// `Some` whatever the value, when the field is there at all.
    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<()>, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Some(()))
    }
    use serde::Deserialize;
    // Only a frame that names the method is tried: anything else costs
    // one search of its text, not a failed decode.
    if !text.contains(DISPATCH_ACTION) {
        return None;
    }
    let frame: ActionFrame = serde_json::from_str(text).ok()?;
    (frame.jsonrpc == "2.0" && frame.method == DISPATCH_ACTION && frame.id.is_none()).then(|| Incoming::Action(Box::new(frame.params)))
}

/// The error for a frame of `bytes` bytes when the limit is `max_bytes`
/// (-32600 naming the limit), or `None` when it is within it.
pub fn over_limit(bytes: usize, max_bytes: usize) -> Option<DecodeError> {
    (bytes > max_bytes).then(|| DecodeError {
        id: None,
        error: error(INVALID_REQUEST, format!("frame larger than the limit of {max_bytes} bytes")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_requests_and_notifications() {
        let r = decode(r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"channel":"ahp-root://"}}"#);
        assert!(matches!(r, Ok(Incoming::Request { id: 3, method: Method::Ping, .. })));
        let n = decode(r#"{"jsonrpc":"2.0","method":"unsubscribe","params":{}}"#);
        assert!(matches!(n, Ok(Incoming::Notification { .. })));
    }

    /// Every known name parses to its method and back; the detached five
    /// to theirs; any other name (a known one's near miss included) is
    /// kept as sent, and a request re-encodes to the same method.
    #[test]
    fn methods_parse_to_their_names_and_back() {
        let known = Method::KNOWN.into_iter().chain(DetachedMethod::ALL.map(Method::Detached)).chain(FileMethod::ALL.map(Method::Files));
        let mut names = std::collections::BTreeSet::new();
        for m in known {
            let name = m.known_name().expect("a known method has a name");
            assert!(names.insert(name), "{name} twice");
            assert_eq!(Method::parse(name.to_owned()), m);
            assert_eq!(m.name(), name);
        }
        assert_eq!(names.len(), 36);
        assert!(names.contains("vscode/reconcileAgentHostDetachedWorktrees") && names.contains("ahpd/listPeers"));
        for other in ["Ping", "listPeers", "vscode/createAgentHostDetachedWorktre", "", "ping "] {
            let m = Method::parse(other.to_owned());
            assert_eq!((m.known_name(), m.name()), (None, other));
        }
        let frame = r#"{"jsonrpc":"2.0","id":9,"method":"vscode/claimAgentHostDetachedWorktree","params":{"handle":"h"}}"#;
        let r = decode(frame).expect("decodes");
        assert!(matches!(r, Incoming::Request { id: 9, method: Method::Detached(DetachedMethod::Claim), .. }));
        assert_eq!(decode(&r.to_json()), Ok(r));
        let unknown = decode(r#"{"jsonrpc":"2.0","id":1,"method":"nope\u0000"}"#).expect("decodes");
        assert!(matches!(unknown, Incoming::Request { method: Method::Unknown(ref n), .. } if n == "nope\0"));
    }

    /// Fuzz finding (decode, CI of c36a70d): a response re-encodes with
    /// `id: null`, which the decoder answered as a bad request.
    #[test]
    fn responses_are_taken_whatever_their_id_and_round_trip() {
        for frame in [
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#,
            r#"{"jsonrpc":"2.0","id":"a","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":null}"#,
            r#"{"jsonrpc":"2.0","result":"x","params":{"channel":"ahp-root://"}}"#,
        ] {
            let message = decode(frame);
            assert_eq!(message, Ok(Incoming::Response), "{frame}");
            assert_eq!(decode(&Incoming::Response.to_json()), Ok(Incoming::Response));
        }
    }

    /// A `dispatchAction` notification is decoded to its type at once; one
    /// whose params are not an action, or sent with an id, is what the
    /// general decoder makes of it; the typed one round-trips.
    #[test]
    fn actions_are_decoded_to_their_type() {
        let frame = r#"{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"ahp-session:/a","clientSeq":4,"action":{"type":"session/titleChanged","title":"t"}}}"#;
        let Ok(Incoming::Action(params)) = decode(frame) else { panic!("not an action: {:?}", decode(frame)) };
        assert_eq!((params.channel.as_str(), params.client_seq), ("ahp-session:/a", 4));
        assert_eq!(decode(&Incoming::Action(params.clone()).to_json()), Ok(Incoming::Action(params)));
        let bad = r#"{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"ahp-session:/a","clientSeq":"four","action":{"type":"session/titleChanged","title":"t"}}}"#;
        assert!(matches!(decode(bad), Ok(Incoming::Notification { method: Method::DispatchAction, .. })));
        let with_id = frame.replacen("{\"jsonrpc\"", "{\"id\":null,\"jsonrpc\"", 1);
        assert_eq!(decode(&with_id).map_err(|e| e.error.code), Err(INVALID_REQUEST), "a null id is a request, refused as before");
        let with_id = frame.replacen("{\"jsonrpc\"", "{\"id\":5,\"jsonrpc\"", 1);
        assert!(matches!(decode(&with_id), Ok(Incoming::Request { id: 5, .. })));
        let old = frame.replace("\"2.0\"", "\"1.0\"");
        assert_eq!(decode(&old).map_err(|e| e.error.code), Err(INVALID_REQUEST));
    }

    #[test]
    fn refuses_what_is_not_json_rpc() {
        assert_eq!(decode("{").map_err(|e| e.error.code), Err(PARSE_ERROR));
        assert_eq!(decode("[1]").map_err(|e| e.error.code), Err(INVALID_REQUEST));
        assert_eq!(decode(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#).map_err(|e| (e.id, e.error.code)), Err((Some(1), INVALID_REQUEST)));
        assert_eq!(decode(r#"{"jsonrpc":"2.0","id":"a","method":"x"}"#).map_err(|e| e.error.code), Err(INVALID_REQUEST));
        assert_eq!(decode(r#"{"jsonrpc":"2.0","id":null,"method":"listSessions"}"#).map_err(|e| e.error.code), Err(INVALID_REQUEST));
        let deep = "[".repeat(10_000);
        assert_eq!(decode(&deep).map_err(|e| e.error.code), Err(PARSE_ERROR));
    }
}
