//! The single event loop (docs/STYLE.md 3.5): wait for the next event or the
//! core's next deadline, read both clocks once, call `Host::handle`, and
//! execute the returned effects in order. No other place calls the core.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ahpd_core::{ConnId, Effect, Host, HostCallId, HostToolResult, Input, LogEvent, LogLevel, MonoTime, Now, Outbound, WallTime};
use tokio::sync::{mpsc, oneshot};

use crate::events::Event;
use crate::exec::backend::Backends;
use crate::exec::net::{Writer, WriterCmd};
use std::sync::Arc;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use crate::exec::store::Store;
use crate::metrics::Metrics;

/// How long a shutdown waits for the clients' close frames (1001) to be
/// written; a client that does not read is not waited for longer.
const CLOSE_FRAMES_WAIT: Duration = Duration::from_secs(1);

/// The shell's two clocks, read together once per input.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock whose monotonic zero is now (process start).
    pub fn start() -> Clock {
        Clock { start: Instant::now() }
    }

    /// Monotonic ms since start, and wall-clock ms since the Unix epoch (0
    /// when the system clock reads before 1970), shifted by
    /// [`wall_offset_ms`].
    pub fn now(&self) -> Now {
        let mono = MonoTime(u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX));
        Now { mono, wall: WallTime(wall_ms()) }
    }

    /// The instant monotonic time `t` falls on.
    fn instant_of(&self, t: MonoTime) -> tokio::time::Instant {
        let at = self.start.checked_add(Duration::from_millis(t.0)).unwrap_or_else(|| self.start + Duration::from_secs(86_400 * 365));
        tokio::time::Instant::from_std(at)
    }
}

/// For tests only: `AHPD_TEST_WALL_OFFSET_MS` (a signed number of ms, read
/// once) shifts the daemon's wall clock, so an end-to-end test can show
/// what a wall clock set back (or forward) does without changing the
/// machine's clock. Unset or unparsable: 0. The monotonic clock is never
/// shifted. Not a setting: do not use it to run a real host.
pub fn wall_offset_ms() -> i64 {
    static OFFSET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| std::env::var("AHPD_TEST_WALL_OFFSET_MS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0))
}

/// Wall-clock ms since the Unix epoch (0 before 1970), shifted by
/// [`wall_offset_ms`]; every wall-clock reading of the daemon goes through
/// here.
pub fn wall_ms() -> i64 {
    let real = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0);
    real.saturating_add(wall_offset_ms())
}

/// Everything the loop drives.
pub struct Driver {
    /// The core.
    pub host: Host,
    /// The clocks.
    pub clock: Clock,
    /// The session store executor.
    pub store: Store,
    /// The backend executors, by provider.
    pub backends: Backends,
    /// How long the store may take to finish its queued writes after a
    /// shutdown signal.
    pub grace: Duration,
    /// How long running turns may go on after a shutdown signal before
    /// they are cancelled (`shutdown_grace_seconds`).
    pub turn_grace: Duration,
    writers: HashMap<ConnId, Writer>,
    /// The text of the last shared message encoded (see [`Encoded`]).
    encoded: Encoded,
    metrics: Metrics,
    /// The workspace-awareness registry executor, if awareness is on.
    registry: Option<crate::exec::registry::Registry>,
    /// Host tool calls waiting for the core's answer, by call id.
    tool_calls: HashMap<HostCallId, oneshot::Sender<HostToolResult>>,
    /// The last host tool call id given.
    last_tool_call: u64,
}

/// How the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Every queued store write finished.
    Clean,
    /// The store did not finish its writes within the grace period.
    StoreTimedOut,
}

impl Driver {
    /// A driver over `host` and its executors.
    pub fn new(host: Host, clock: Clock, store: Store, backends: Backends, grace: Duration) -> Driver {
        Driver {
            host,
            clock,
            store,
            backends,
            grace,
            turn_grace: Duration::from_millis(ahpd_core::config::SHUTDOWN_GRACE_MS),
            writers: HashMap::new(),
            encoded: Encoded::default(),
            metrics: Metrics::default(),
            registry: None,
            tool_calls: HashMap::new(),
            last_tool_call: 0,
        }
    }

    /// Running turns get `grace` to end after a shutdown signal.
    pub fn with_turn_grace(mut self, grace: Duration) -> Driver {
        self.turn_grace = grace;
        self
    }

    /// Executes `Effect::Registry` with `registry` (workspace awareness).
    pub fn with_registry(mut self, registry: crate::exec::registry::Registry) -> Driver {
        self.registry = Some(registry);
        self
    }

    /// Runs until `shutdown` resolves (SIGINT/SIGTERM) and the core has
    /// drained (running turns ended or, after `turn_grace`, cancelled;
    /// `Host::drained`), or every event sender is gone, then lets the store
    /// finish its queued writes (at most `grace`) and lets the agents go.
    pub async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>, shutdown: impl std::future::Future<Output = ()>) -> Ended {
        tokio::pin!(shutdown);
        // The last tick's monotonic time: a deadline at or before it is
        // retried a millisecond later rather than spun on.
        let mut last_tick: Option<MonoTime> = None;
        let mut stopping = false;
        loop {
            let deadline = self.host.next_deadline().map(|d| match last_tick {
                Some(t) if d <= t => t.plus_ms(1),
                _ => d,
            });
            let event = tokio::select! {
                biased;
                () = &mut shutdown, if !stopping => {
                    stopping = true;
                    tracing::info!(grace_s = self.turn_grace.as_secs(), "shutting down: no new connections or turns; running turns get the grace to end");
                    Event::Input(Input::Shutdown { grace_ms: u64::try_from(self.turn_grace.as_millis()).unwrap_or(u64::MAX) })
                }
                event = events.recv() => match event {
                    Some(event) => event,
                    None => break,
                },
                () = sleep_until_opt(deadline.map(|d| self.clock.instant_of(d))) => Event::Input(Input::Tick),
            };
            let mut bearer_token = None;
            let mut credit = None;
            let input = match event {
                Event::Opened { conn, writer, bearer } => {
                    self.writers.insert(conn, writer);
                    bearer_token = bearer.map(|token| (conn, token));
                    Input::Connected { conn }
                }
                Event::Frame { conn, bytes, frame, request, credit: room } => {
                    if let Some((id, label)) = request {
                        self.metrics.request_in(conn, id, label);
                    }
                    credit = Some(room);
                    Input::FrameDecoded { conn, bytes, frame }
                }
                Event::CheckBearer { token, reply } => {
                    let _ = reply.send(self.host.view().bearer_accepted(&token));
                    continue;
                }
                Event::Metrics(reply) => {
                    let _ = reply.send(self.metrics.render(&self.host.view(), self.writers.len()));
                    continue;
                }
                Event::HostTool { chat, tool, reply } => {
                    self.last_tool_call += 1;
                    let call = HostCallId(self.last_tool_call);
                    self.tool_calls.insert(call, reply);
                    Input::HostTool { call, chat, tool }
                }
                Event::Input(input) => input,
            };
            last_tick = matches!(input, Input::Tick).then(|| self.clock.now().mono);
            self.feed(input);
            drop(credit);
            if let Some((conn, token)) = bearer_token {
                self.feed(Input::Authenticate { conn, token });
            }
            if stopping && self.host.drained() {
                tracing::info!("every turn has ended; finishing queued store writes");
                break;
            }
        }
        // Every client is told the host is going away (close 1001), and
        // given a moment for that frame to be written before the process
        // ends.
        let closing: Vec<Writer> = self.writers.drain().map(|(_, w)| w).collect();
        for w in &closing {
            w.send(WriterCmd::CloseWith { code: crate::exec::net::CLOSE_GOING_AWAY, reason: "the host is shutting down".to_owned() });
        }
        let _ = tokio::time::timeout(CLOSE_FRAMES_WAIT, futures_util::future::join_all(closing.iter().map(Writer::closed))).await;
        drop(closing);
        let ended = match tokio::time::timeout(self.grace, self.store.finish()).await {
            Ok(()) => Ended::Clean,
            Err(_) => Ended::StoreTimedOut,
        };
        // Remove this process's awareness records (graceful shutdown).
        if let Some(registry) = self.registry.take() {
            let _ = tokio::time::timeout(self.grace, registry.finish()).await;
        }
        // Let the agents go (the echo agent keeps nothing running; dropping
        // the executors ends whatever tasks they hold).
        drop(self.backends);
        ended
    }

    /// Hands one input to the core and executes its effects.
    fn feed(&mut self, input: Input) {
        let now = self.clock.now();
        let disconnected = match &input {
            Input::Disconnected { conn } => Some(*conn),
            _ => None,
        };
        let kind = input_kind(&input);
        let merging = self.host.view().merging_scan();
        let started = Instant::now();
        let effects = self.host.handle(now, input);
        let handled = started.elapsed();
        let count = effects.len();
        for effect in effects {
            self.execute(effect);
        }
        let took = started.elapsed();
        if took >= SLOW_INPUT {
            // Every client waits behind one input (issue 21): say which.
            tracing::warn!(input = kind, handle_ms = handled.as_secs_f64() * 1e3, total_ms = took.as_secs_f64() * 1e3, effects = count, "slow input");
        }
        if let Some(conn) = disconnected {
            self.writers.remove(&conn);
            self.metrics.forget_conn(conn);
        }
        if merging && !self.host.view().merging_scan() {
            // A pass was merged: the pages its rows were read into are
            // free; what the scan's threads left in their heaps is
            // collected (issue 21: memory per catalogue row), off the
            // driver's thread.
            crate::exec::bulk::spawn(|| {
                let took = crate::trim_freed_memory();
                tracing::info!(trim_ms = took.as_secs_f64() * 1e3, "freed memory given back after a merge");
            });
        }
    }

    fn execute(&mut self, effect: Effect) {
        match effect {
            Effect::Send { conn, message } => {
                let reply = match &message {
                    Outbound::Result { id, .. } => Some((Some(*id), None)),
                    Outbound::Error { id, error } => Some((*id, Some(error.code))),
                    _ => None,
                };
                if let Some((id, code)) = reply {
                    self.metrics.reply_out(conn, id, code.map(i64::from));
                }
                match self.writers.get(&conn) {
                    // An envelope is encoded by the writers, off this thread.
                    Some(w) => match &message {
                        Outbound::Action(broadcast) => w.send(WriterCmd::Action(Arc::clone(broadcast))),
                        _ => w.send(WriterCmd::Frame(self.encoded.text(&message))),
                    },
                    None => tracing::debug!(conn = conn.0, "frame for a connection that is gone"),
                }
            }
            Effect::Close { conn, reason } => {
                if let Some(w) = self.writers.get(&conn) {
                    w.send(match reason {
                        Some(reason) => WriterCmd::CloseWith { code: reason.code(), reason: reason.words().to_owned() },
                        None => WriterCmd::Close,
                    });
                }
            }
            Effect::Backend { op, provider, chat, command } => self.backends.execute(op, &provider, chat, command),
            Effect::Store { op, command } => self.store.submit(op, command),
            Effect::Scan { op, provider } => self.backends.scan(op, &provider),
            Effect::Git { op, command } => self.backends.git(op, command),
            Effect::Fs { op, command } => self.backends.fs(op, command),
            Effect::Registry { op, command } => match &self.registry {
                Some(registry) => registry.submit(op, command),
                None => tracing::debug!(op = op.0, "registry command with no registry"),
            },
            Effect::HostToolAnswer { call, result } => match self.tool_calls.remove(&call) {
                Some(reply) => {
                    let _ = reply.send(result);
                }
                None => tracing::debug!(call = call.0, "answer to a host tool call nobody waits for"),
            },
            Effect::Log(event) => log(&event),
            // Freed on a blocking thread: freeing megabytes (and giving
            // the pages back) on this one stalled every client (issue 25).
            Effect::Release(released) => {
                drop(crate::exec::bulk::spawn(move || drop(released)));
            }
        }
    }
}

/// The last fanned-out notification the driver encoded, by the address of
/// what it shares: the core sends one root notification to every
/// subscriber as clones of one `Arc`, one `Effect::Send` after another, so
/// remembering the last one encodes each fan-out once and hands every
/// subscriber's writer the same bytes (issue 21: "an envelope encoded once
/// and its bytes shared by every subscriber's writer"). Envelopes do not
/// come here: their writers encode them ([`WriterCmd::Action`]).
#[derive(Default)]
struct Encoded {
    /// The shared value's address and the text it encoded to, with the
    /// value itself, kept so that its address cannot be taken by another
    /// value while it is remembered.
    last: Option<(usize, Utf8Bytes, Arc<serde_json::Value>)>,
}

impl Encoded {
    /// `message` as frame text: the remembered bytes when it shares the
    /// last encoded notification, else encoded now (and remembered when
    /// shared).
    fn text(&mut self, message: &Outbound) -> Utf8Bytes {
        let Outbound::Notification { params, .. } = message else { return Utf8Bytes::from(message.to_json()) };
        let addr = Arc::as_ptr(params) as usize;
        if let Some((last, text, _)) = &self.last {
            if *last == addr {
                return text.clone();
            }
        }
        let text = Utf8Bytes::from(message.to_json());
        self.last = Some((addr, text.clone(), Arc::clone(params)));
        text
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One operator log line for a core [`LogEvent`]; every line carries the
/// `session` field (empty when the event is about no session).
/// An input whose handling (the core's and its effects' execution) takes
/// longer is logged: every other client waited that long.
const SLOW_INPUT: Duration = Duration::from_millis(5);

/// The name of an input's kind, for the log.
fn input_kind(input: &Input) -> &'static str {
    match input {
        Input::Connected { .. } => "connected",
        Input::Authenticate { .. } => "authenticate",
        Input::Frame { .. } | Input::FrameDecoded { .. } => "frame",
        Input::Disconnected { .. } => "disconnected",
        // Which kind of result: a 100k scan's rows and a store write's
        // answer are both `Done`, and only one of them may be slow.
        Input::Done { outcome, .. } => match outcome {
            ahpd_core::input::Outcome::Started { .. } => "done.started",
            ahpd_core::input::Outcome::Failed { .. } => "done.failed",
            ahpd_core::input::Outcome::TranscriptDamaged { .. } => "done.transcript_damaged",
            ahpd_core::input::Outcome::Scanned { .. } => "done.scanned",
            ahpd_core::input::Outcome::Git(_) => "done.git",
            ahpd_core::input::Outcome::Fs(_) => "done.fs",
            ahpd_core::input::Outcome::RegistryScanned { .. } => "done.registry_scanned",
            ahpd_core::input::Outcome::Ok => "done.ok",
        },
        Input::FsChanged { .. } => "fs_changed",
        Input::Backend { .. } => "backend",
        Input::PolicyChanged(_) => "policy",
        Input::Shutdown { .. } => "shutdown",
        Input::HostTool { .. } => "host_tool",
        Input::Tick => "tick",
    }
}

fn log(e: &LogEvent) {
    let session = e.session.as_deref().unwrap_or("");
    match e.level {
        LogLevel::Info => tracing::info!(event = e.event, session, detail = %e.detail, "{}", e.event),
        LogLevel::Warn => tracing::warn!(event = e.event, session, detail = %e.detail, "{}", e.event),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notification(n: u64) -> Outbound {
        Outbound::Notification { method: "root/sessionRemoved", params: Arc::new(serde_json::json!({"session": format!("ahp-session:/{n}")})) }
    }

    /// One fan-out (clones of one `Arc`) is encoded once: every subscriber
    /// gets the same bytes, equal to the message's own encoding; the next
    /// notification is encoded anew.
    #[test]
    fn a_fanned_out_notification_is_encoded_once_and_shared() {
        let mut encoded = Encoded::default();
        let first = notification(1);
        let a = encoded.text(&first);
        let b = encoded.text(&first.clone());
        assert_eq!(a.as_str(), first.to_json());
        assert_eq!(a.as_str().as_ptr(), b.as_str().as_ptr(), "the second subscriber shares the first one's bytes");
        let c = encoded.text(&notification(2));
        assert_ne!(a.as_str(), c.as_str());
        assert!(c.as_str().contains("ahp-session:/2"));
    }
}
