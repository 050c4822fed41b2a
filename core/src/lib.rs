//! # ahpd-core: the agent host as a deterministic state machine
//!
//! Everything ahpd decides about sessions lives here, and nothing here does
//! IO, reads a clock, draws OS randomness or iterates in an unstable order.
//! The contract (quinn/str0m style):
//!
//! 1. Build the host with [`Host::new`]`(config, seed, restored, now)`: the
//!    settings, a seed for its one random stream, and the records the store
//!    holds. Restarting is this same call.
//! 2. For every event, read both clocks once and call
//!    [`Host::handle`]`(now, input)`.
//! 3. Execute the returned [`Effect`]s in order: send frames, drive agents,
//!    write the store, log. Feed each command's result back as
//!    [`Input::Done`] with its [`OpId`].
//! 4. Sleep until [`Host::next_deadline`] (or the next event), then call
//!    `handle(now, Input::Tick)`.
//!
//! Protocol state is advanced only by the `ahp` crate's reducers over the
//! envelopes the host broadcasts, so every client that applies what it is
//! sent holds exactly the host's state. Wire types are `ahp-types` 1.0.0.
//!
//! Spec: the ahpd Sessions page; see `docs/ARCHITECTURE.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod automation;
pub mod awareness;
pub mod caps;
pub mod catalogue;
pub mod config;
pub mod continuation;
pub mod cursor;
pub mod detached;
pub mod effect;
pub mod export;
pub mod external;
pub mod git;
pub mod files;
pub mod folders;
pub mod grants;
pub mod kept_turns;
pub mod host;
mod facts;
pub mod ids;
pub mod input;
pub mod invariants;
pub mod json_size;
pub mod lru;
pub mod marks;
pub mod policy;
pub mod protocol;
pub mod record;
pub mod replay;
pub mod rng;
pub mod session;
pub mod session_config;
pub mod shared;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod time;
pub mod tools;
pub mod transcript;
pub mod trust;
pub mod worktree;

pub use config::{AgentSpec, Config, Limits};
pub use effect::{BackendCmd, ConnId, Durability, Effect, LogEvent, LogLevel, OpId, Outbound, RegistryCmd, ResultBody, StoreCmd};
pub use host::{Host, HostView, Went};
pub use input::{BackendEvent, Input, Outcome, ScannedRow};
pub use record::{ChatRecord, SessionRecord};
pub use time::{MonoTime, Now, WallTime};
pub use tools::{HostCallId, HostToolError, HostToolErrorCode, HostToolRequest, HostToolResult};
