//! The JSON-RPC edge: decoding client frames and naming the error codes.

pub mod codec;
pub mod error;
