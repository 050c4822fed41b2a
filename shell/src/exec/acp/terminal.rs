//! One chat's ACP terminals (`terminal/create`, `terminal/output`,
//! `terminal/wait_for_exit`, `terminal/kill`, `terminal/release`): commands
//! the agent asks the host to run, confined to the chat's working
//! directory (a `cwd` outside it is refused), each in a process group of
//! its own so [`Terminals::kill_all`] leaves nothing behind.
//!
//! A terminal still running is background work (issue 8): the first one to
//! start reports `BackendEvent::Busy(true)` for the chat and the last one to
//! exit `Busy(false)`, so the session does not sleep meanwhile. When the
//! chat's agent stops (the chat ends, sleeps, or its agent goes away) every
//! terminal is killed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_client_protocol::v1::schema::{CreateTerminalRequest, TerminalExitStatus, TerminalOutputResponse};
use ahp_types::Uri;
use ahpd_core::{BackendEvent, Input};
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::sync::watch;

use super::process::ProcessGroup;
use crate::events::EventSink;

/// Output kept per terminal when the agent names no limit, in bytes (1 MiB).
pub const DEFAULT_OUTPUT_LIMIT_BYTES: u64 = 1024 * 1024;

/// How long, after a terminal's command exits, its output pipes may stay
/// open (a child that kept them) before the exit is reported, in ms.
const OUTPUT_DRAIN_MS: u64 = 200;

/// One terminal.
struct Term {
    output: Arc<Mutex<Output>>,
    exit: watch::Receiver<Option<TerminalExitStatus>>,
    group: ProcessGroup,
}

/// A terminal's output: the last `limit` bytes, and whether any were cut.
struct Output {
    bytes: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Output {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.limit {
            let mut cut = self.bytes.len() - self.limit;
            // Cut on a character boundary (a UTF-8 continuation byte is 10xxxxxx).
            while cut < self.bytes.len() && (self.bytes[cut] & 0xC0) == 0x80 {
                cut += 1;
            }
            self.bytes.drain(..cut);
            self.truncated = true;
        }
    }
}

#[derive(Default)]
struct State {
    next: u64,
    terms: HashMap<String, Term>,
    running: usize,
}

/// The terminals of one chat's agent. Cloning shares them.
#[derive(Clone)]
pub struct Terminals {
    chat: Uri,
    root: PathBuf,
    events: EventSink,
    state: Arc<Mutex<State>>,
}

impl Terminals {
    /// No terminals yet, for `chat`'s agent confined to `root` (its
    /// working directory, canonicalized here).
    ///
    /// Errors: `root` does not exist or cannot be resolved.
    pub fn new(chat: Uri, root: &Path, events: EventSink) -> Result<Terminals, String> {
        let root = std::fs::canonicalize(root).map_err(|e| format!("working directory {}: {e}", root.display()))?;
        Ok(Terminals { chat, root, events, state: Arc::default() })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts `req.command req.args` (a command line with no arguments
    /// through `sh -c`) in `req.cwd` (default: the root), with
    /// `req.env` added, stdin closed, stdout and stderr kept together; the
    /// new terminal's id.
    ///
    /// Errors: the `cwd` is outside the root or does not exist; the command
    /// cannot be started.
    pub fn create(&self, req: &CreateTerminalRequest) -> Result<String, String> {
        let cwd = match &req.cwd {
            Some(asked) => {
                let joined = if asked.is_absolute() { asked.clone() } else { self.root.join(asked) };
                let resolved = std::fs::canonicalize(&joined).map_err(|e| format!("{}: {e}", asked.display()))?;
                if !resolved.starts_with(&self.root) {
                    return Err(format!("{} is outside the session's working directory", asked.display()));
                }
                resolved
            }
            None => self.root.clone(),
        };
        // A whole command line with no arguments (what Claude Code's
        // adapter sends for its Bash tool: `echo hi > out.txt`) is a shell's,
        // run by `sh -c` as an editor's terminal would; a program with its
        // arguments is run as given.
        let mut command = if req.args.is_empty() {
            let mut c = Command::new("sh");
            c.arg("-c").arg(&req.command);
            c
        } else {
            let mut c = Command::new(&req.command);
            c.args(&req.args);
            c
        };
        let mut child = command
            .envs(req.env.iter().map(|v| (v.name.as_str(), v.value.as_str())))
            .current_dir(&cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("could not start {:?}: {e}", req.command))?;
        let group = ProcessGroup::led_by(&child);
        let limit = req.output_byte_limit.unwrap_or(DEFAULT_OUTPUT_LIMIT_BYTES);
        let output = Arc::new(Mutex::new(Output { bytes: Vec::new(), limit: usize::try_from(limit).unwrap_or(usize::MAX), truncated: false }));
        let readers: Vec<_> = [child.stdout.take().map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Send + Unpin>), child.stderr.take().map(|e| Box::new(e) as _)]
            .into_iter()
            .flatten()
            .map(|mut pipe| {
                let sink = output.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    while let Ok(n) = pipe.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        sink.lock().unwrap_or_else(PoisonError::into_inner).push(&buf[..n]);
                    }
                })
            })
            .collect();
        let (exit_tx, exit_rx) = watch::channel(None);
        let id = {
            let mut state = self.lock();
            state.next += 1;
            let id = format!("term-{}", state.next);
            state.terms.insert(id.clone(), Term { output, exit: exit_rx, group });
            state.running += 1;
            if state.running == 1 {
                self.busy(true);
            }
            id
        };
        tracing::info!(chat = %self.chat, terminal = %id, command = %req.command, cwd = %cwd.display(), "acp.terminal.started");
        let this = self.clone();
        let tid = id.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            for reader in readers {
                let _ = tokio::time::timeout(Duration::from_millis(OUTPUT_DRAIN_MS), reader).await;
            }
            let exit = match status {
                Ok(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    TerminalExitStatus::new()
                        .exit_code(s.code().and_then(|c| u32::try_from(c).ok()))
                        .signal(s.signal().map(|n| format!("signal {n}")))
                }
                Err(e) => TerminalExitStatus::new().signal(format!("unknown: {e}")),
            };
            tracing::info!(chat = %this.chat, terminal = %tid, code = ?exit.exit_code, signal = ?exit.signal, "acp.terminal.exited");
            let _ = exit_tx.send(Some(exit));
            let mut state = this.lock();
            state.running = state.running.saturating_sub(1);
            if state.running == 0 {
                this.busy(false);
            }
        });
        Ok(id)
    }

    fn busy(&self, busy: bool) {
        self.events.input(Input::Backend { chat: self.chat.clone(), event: BackendEvent::Busy(busy) });
    }

    /// What terminal `id` printed so far, and its exit status once it
    /// exited.
    ///
    /// Errors: no such terminal (never made, or released).
    pub fn output(&self, id: &str) -> Result<TerminalOutputResponse, String> {
        let state = self.lock();
        let term = state.terms.get(id).ok_or_else(|| format!("no terminal {id}"))?;
        let out = term.output.lock().unwrap_or_else(PoisonError::into_inner);
        let exit = term.exit.borrow().clone();
        Ok(TerminalOutputResponse::new(String::from_utf8_lossy(&out.bytes).into_owned(), out.truncated).exit_status(exit))
    }

    /// Waits until terminal `id` exits; its exit status.
    ///
    /// Errors: no such terminal, or it was released before it exited.
    pub async fn wait_for_exit(&self, id: &str) -> Result<TerminalExitStatus, String> {
        let mut exit = self.lock().terms.get(id).map(|t| t.exit.clone()).ok_or_else(|| format!("no terminal {id}"))?;
        let status = match exit.wait_for(Option::is_some).await {
            Ok(status) => Ok(status.clone().unwrap_or_default()),
            Err(_) => Err(format!("terminal {id} was released before it exited")),
        };
        status
    }

    /// Kills terminal `id`'s command (its whole process group); the
    /// terminal stays, with its output and exit status.
    ///
    /// Errors: no such terminal.
    pub fn kill(&self, id: &str) -> Result<(), String> {
        let mut state = self.lock();
        let term = state.terms.get_mut(id).ok_or_else(|| format!("no terminal {id}"))?;
        term.group.kill();
        Ok(())
    }

    /// Kills terminal `id` if it still runs and forgets it.
    ///
    /// Errors: no such terminal.
    pub fn release(&self, id: &str) -> Result<(), String> {
        let mut term = self.lock().terms.remove(id).ok_or_else(|| format!("no terminal {id}"))?;
        term.group.kill();
        Ok(())
    }

    /// Kills every terminal (the chat's agent is stopping).
    pub fn kill_all(&self) {
        let terms: Vec<Term> = self.lock().terms.drain().map(|(_, t)| t).collect();
        for mut term in terms {
            term.group.kill();
        }
    }
}
