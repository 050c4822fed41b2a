//! Backend executors keyed by provider. Each `Effect::Backend` goes to the
//! executor for its provider; a provider with no executor is answered
//! `Outcome::Failed` at once. Each `Effect::Scan` runs one pass over that
//! provider's transcripts on a blocking thread, off the driver task.

use std::path::PathBuf;

use ahp_types::Uri;
use ahpd_core::{BackendCmd, Input, OpId, Outcome, ScannedRow};

use super::acp::{Acp, AgentConfig};
use super::claude;
use super::echo::{self, Echo};
use crate::events::EventSink;

/// Every backend this daemon can drive, and the transcript sources it scans.
pub struct Backends {
    echo: Echo,
    acp: Acp,
    echo_dir: PathBuf,
    claude_projects: Option<PathBuf>,
    events: EventSink,
    git: super::git::GitExec,
    fs: super::fs::FsExec,
}

impl Backends {
    /// The built-in backends: `echo`, keeping its transcripts in `echo_dir`
    /// (which must exist). No external source is scanned until
    /// [`Backends::with_claude_projects`] names one.
    pub fn new(echo_dir: PathBuf, events: EventSink) -> Backends {
        let git = super::git::GitExec::new(events.clone(), None);
        Backends {
            echo: Echo::new(echo_dir.clone(), events.clone()),
            acp: Acp::new(Vec::new(), echo_dir.clone(), events.clone()),
            echo_dir,
            claude_projects: None,
            fs: super::fs::FsExec::new(events.clone()),
            events,
            git,
        }
    }

    /// Makes worktrees under `root` (`--worktrees-root`): `<root>/<repo>/<name>`
    /// rather than beside their repository.
    pub fn with_worktrees_root(mut self, root: Option<PathBuf>) -> Backends {
        self.git = super::git::GitExec::new(self.events.clone(), root);
        self
    }

    /// Runs one git command (`exec/git.rs`); its answer comes back as
    /// `Input::Done { op, .. }`.
    pub fn git(&mut self, op: OpId, command: ahpd_core::git::GitCmd) {
        self.git.execute(op, command);
    }

    /// Runs one filesystem command (`exec/fs.rs`, issue 48); its answer
    /// comes back as `Input::Done { op, .. }` (a watch's changes as
    /// `Input::FsChanged`).
    pub fn fs(&mut self, op: OpId, command: ahpd_core::files::fs::FsCmd) {
        self.fs.execute(op, command);
    }

    /// Drives each of `agents` over ACP under its name; a chat with no
    /// working directory runs its agent in `home` (which must exist). With
    /// `host_tools`, each chat's agent (where its config keeps `host_tools`
    /// on) gets the host's MCP server.
    pub fn with_acp_agents(mut self, agents: Vec<AgentConfig>, home: PathBuf, host_tools: Option<super::mcp::Endpoint>) -> Backends {
        self.acp = Acp::new(agents, home, self.events.clone()).with_host_tools(host_tools);
        self
    }

    /// Scans Claude Code's transcripts under `root` (`~/.claude/projects`)
    /// for the `claude` source; `None` scans none.
    pub fn with_claude_projects(mut self, root: Option<PathBuf>) -> Backends {
        self.claude_projects = root;
        self
    }

    /// One pass over `provider`'s own transcripts for the catalogue, on a
    /// blocking thread; the rows come back as `Input::Done { op, outcome:
    /// Scanned { .. } }`, or `Failed` when the pass could not run. A
    /// provider that keeps no transcripts answers no rows.
    pub fn scan(&mut self, op: OpId, provider: &str) {
        let pass: Box<dyn FnOnce() -> Result<echo::Scan, String> + Send> = match provider {
            "echo" => {
                let dir = self.echo_dir.clone();
                Box::new(move || echo::scan(&dir))
            }
            claude::PROVIDER => match self.claude_projects.clone() {
                Some(root) => Box::new(move || scan_claude(&root).map(|rows| echo::Scan { rows, damaged: Vec::new() })),
                None => Box::new(|| Ok(echo::Scan::default())),
            },
            other => {
                tracing::debug!(provider = other, "scan: no transcript listing for this provider");
                Box::new(|| Ok(echo::Scan::default()))
            }
        };
        let events = self.events.clone();
        let provider = provider.to_owned();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let outcome = match super::bulk::spawn(pass).await {
                Ok(Ok(echo::Scan { rows, damaged })) => {
                    tracing::debug!(provider, rows = rows.len(), damaged = damaged.len(), ms = started.elapsed().as_millis() as u64, "scan finished");
                    Outcome::Scanned { rows, damaged }
                }
                Ok(Err(message)) => Outcome::Failed { message },
                Err(e) => Outcome::Failed { message: format!("the scan task failed: {e}") },
            };
            events.input(Input::Done { op, outcome });
        });
    }

    /// Routes one command to `provider`'s executor; its answer comes back as
    /// `Input::Done { op, .. }`.
    pub fn execute(&mut self, op: OpId, provider: &str, chat: Uri, command: BackendCmd) {
        match provider {
            "echo" => self.echo.execute(op, chat, command),
            acp if self.acp.has(acp) => self.acp.execute(op, acp, chat, command),
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

/// One pass over Claude Code's transcripts, logging what it skipped in one
/// line.
fn scan_claude(root: &std::path::Path) -> Result<Vec<ScannedRow>, String> {
    let report = claude::scan(root)?;
    if report.refused > 0 || report.unreadable > 0 || report.symlinks > 0 {
        tracing::warn!(
            root = %root.display(),
            files = report.files,
            refused = report.refused,
            unreadable = report.unreadable,
            symlinks_not_followed = report.symlinks,
            "claude transcripts skipped by the scan"
        );
    }
    if report.bad_lines > 0 {
        tracing::info!(root = %root.display(), bad_lines = report.bad_lines, "claude transcripts hold lines that do not parse (skipped)");
    }
    Ok(report.rows)
}
