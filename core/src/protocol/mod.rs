//! The JSON-RPC edge: decoding client frames and naming the error codes.

pub mod codec;
pub mod error;
pub mod front_door;

/// Parses a request's params into `T`, or the -32602 (`INVALID_PARAMS`)
/// error to answer with (JSON-RPC 2.0: params that do not fit the method).
pub fn params<T: serde::de::DeserializeOwned>(params: serde_json::Value) -> Result<T, ahp_types::messages::JsonRpcError> {
    serde_json::from_value(params).map_err(|e| error::error(error::INVALID_PARAMS, format!("invalid params: {e}")))
}
