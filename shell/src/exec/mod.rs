//! The executors: each turns one kind of core command into IO and reports
//! the result back to the driver as an `Input`. They do not retry or time
//! out by policy; they report.

pub mod acp;
pub mod backend;
pub mod bulk;
pub mod claude;
pub mod echo;
pub mod echo_transcript;
pub mod fs;
pub mod fsutil;
pub mod git;
pub mod journal;
pub mod mcp;
pub mod net;
pub mod registry;
pub mod store;
