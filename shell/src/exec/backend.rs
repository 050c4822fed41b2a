//! Backend executors keyed by provider. Each `Effect::Backend` goes to the
//! executor for its provider; a provider with no executor is answered
//! `Outcome::Failed` at once.

use std::path::PathBuf;

use ahp_types::Uri;
use ahpd_core::{BackendCmd, Input, OpId, Outcome};

use super::echo::Echo;
use crate::driver::EventSink;

/// Every backend this daemon can drive.
pub struct Backends {
    echo: Echo,
    events: EventSink,
}

impl Backends {
    /// The built-in backends: `echo`, keeping its transcripts in `echo_dir`
    /// (which must exist).
    pub fn new(echo_dir: PathBuf, events: EventSink) -> Backends {
        Backends { echo: Echo::new(echo_dir, events.clone()), events }
    }

    /// One pass over `provider`'s own transcripts for the catalogue. No
    /// executor lists its transcripts yet, so every scan answers no rows.
    pub fn scan(&mut self, op: OpId, provider: &str) {
        tracing::debug!(provider, "scan: no transcript listing for this provider");
        self.events.input(Input::Done { op, outcome: Outcome::Scanned { rows: Vec::new() } });
    }

    /// Routes one command to `provider`'s executor; its answer comes back as
    /// `Input::Done { op, .. }`.
    pub fn execute(&mut self, op: OpId, provider: &str, chat: Uri, command: BackendCmd) {
        match provider {
            "echo" => self.echo.execute(op, chat, command),
            other => {
                tracing::warn!(provider = other, "no backend for provider");
                self.events.input(Input::Done {
                    op,
                    outcome: Outcome::Failed { message: format!("no backend for provider {other:?} on this host") },
                });
            }
        }
    }
}
