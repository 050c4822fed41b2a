//! JSON-RPC error replies with the codes of the AHP contract
//! (docs/REFERENCE-NOTES.md, AHP 10).

use ahp_types::errors::UnsupportedProtocolVersionErrorData;
use ahp_types::messages::JsonRpcError;

/// -32700: the frame is not JSON.
pub const PARSE_ERROR: i32 = -32700;
/// -32600: JSON, but not a JSON-RPC request.
pub const INVALID_REQUEST: i32 = -32600;
/// -32601: no such method.
pub const METHOD_NOT_FOUND: i32 = -32601;
/// -32602: the params are wrong (also unknown cursors and hostile ids).
pub const INVALID_PARAMS: i32 = -32602;
/// -32603: the host failed (a backend or store error).
pub const INTERNAL_ERROR: i32 = -32603;
/// -32001: no session or chat at that URI.
pub const SESSION_NOT_FOUND: i32 = -32001;
/// -32002: no agent with that provider.
pub const PROVIDER_NOT_FOUND: i32 = -32002;
/// -32003: `createSession` on a URI that exists (docs/DECISIONS.md, 3).
pub const SESSION_ALREADY_EXISTS: i32 = -32003;
/// -32004: the operation needs no turn to be running.
pub const TURN_IN_PROGRESS: i32 = -32004;
/// -32005: none of the offered protocol versions is supported.
pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32005;
/// -32008: the requested file, folder or URI does not exist (`NotFound`).
pub const NOT_FOUND: i32 = -32008;
/// -32009: the caller may not do this.
pub const PERMISSION_DENIED: i32 = -32009;
/// -32010: the target exists and the operation does not overwrite
/// (`AlreadyExists`).
pub const ALREADY_EXISTS: i32 = -32010;
/// -32011: a precondition token no longer matches (`Conflict`: a stale
/// `ifMatch`).
pub const CONFLICT: i32 = -32011;

/// An error with `code` and `message` and no data.
pub fn error(code: i32, message: impl Into<String>) -> JsonRpcError {
    JsonRpcError { code, message: message.into(), data: None }
}

/// -32005 with the required `data.supportedVersions`.
pub fn unsupported_version(offered: &[String]) -> JsonRpcError {
    let data = UnsupportedProtocolVersionErrorData {
        supported_versions: ahp_types::SUPPORTED_PROTOCOL_VERSIONS
            .iter()
            .map(|v| (*v).to_owned())
            .collect(),
    };
    JsonRpcError {
        code: UNSUPPORTED_PROTOCOL_VERSION,
        message: format!("none of the offered protocol versions {offered:?} is supported"),
        data: serde_json::to_value(data).ok(),
    }
}
