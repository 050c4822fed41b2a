//! The single event loop (style guide 3.5): wait for the next event or the
//! core's next deadline, read both clocks once, call `Host::handle`, and
//! execute the returned effects in order. No other place calls the core.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ahpd_core::{ConnId, Effect, Host, Input, LogEvent, LogLevel, MonoTime, Now, WallTime};
use tokio::sync::mpsc;

use crate::exec::backend::Backends;
use crate::exec::net::{Writer, WriterCmd};
use crate::exec::store::Store;

/// Something for the driver: a core input, or a new connection's writer
/// (registered before its `Input::Connected` is handed to the core).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // `Input` is nearly every event; boxing it would allocate per frame
pub enum Event {
    /// An input for the core, from a connection task or an executor.
    Input(Input),
    /// A client connected: remember its writer, then feed
    /// `Input::Connected { conn }`.
    Opened {
        /// The connection's fresh id.
        conn: ConnId,
        /// Where its outgoing frames go, in order.
        writer: Writer,
    },
}

/// The sending side of the driver's one event channel, cloned into every
/// connection task and executor.
#[derive(Debug, Clone)]
pub struct EventSink(mpsc::UnboundedSender<Event>);

impl EventSink {
    /// A new event channel: the sink and the driver's receiving end.
    pub fn channel() -> (EventSink, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventSink(tx), rx)
    }

    /// Hands `input` to the driver. After shutdown it is dropped silently
    /// (nobody is left to act on it).
    pub fn input(&self, input: Input) {
        self.send(Event::Input(input));
    }

    /// Hands any event to the driver; dropped silently after shutdown.
    pub fn send(&self, event: Event) {
        let _ = self.0.send(event);
    }
}

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
    /// when the system clock reads before 1970).
    pub fn now(&self) -> Now {
        let mono = MonoTime(u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX));
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Now { mono, wall: WallTime(wall) }
    }

    /// The instant monotonic time `t` falls on.
    fn instant_of(&self, t: MonoTime) -> tokio::time::Instant {
        let at = self.start.checked_add(Duration::from_millis(t.0)).unwrap_or_else(|| self.start + Duration::from_secs(86_400 * 365));
        tokio::time::Instant::from_std(at)
    }
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
}

impl Driver {
    /// Runs until `shutdown` resolves (SIGINT/SIGTERM) or every event sender
    /// is gone, then lets the store finish its queued writes.
    pub async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>, shutdown: impl std::future::Future<Output = ()>) {
        let mut writers: HashMap<ConnId, Writer> = HashMap::new();
        tokio::pin!(shutdown);
        // The last tick's monotonic time: a deadline at or before it is
        // retried a millisecond later rather than spun on.
        let mut last_tick: Option<MonoTime> = None;
        loop {
            let deadline = self.host.next_deadline().map(|d| match last_tick {
                Some(t) if d <= t => t.plus_ms(1),
                _ => d,
            });
            let event = tokio::select! {
                biased;
                () = &mut shutdown => {
                    tracing::info!("shutting down: finishing queued store writes");
                    break;
                }
                event = events.recv() => match event {
                    Some(event) => event,
                    None => break,
                },
                () = sleep_until_opt(deadline.map(|d| self.clock.instant_of(d))) => Event::Input(Input::Tick),
            };
            let input = match event {
                Event::Opened { conn, writer } => {
                    writers.insert(conn, writer);
                    Input::Connected { conn }
                }
                Event::Input(input) => input,
            };
            let now = self.clock.now();
            last_tick = matches!(input, Input::Tick).then_some(now.mono);
            let disconnected = match &input {
                Input::Disconnected { conn } => Some(*conn),
                _ => None,
            };
            let effects = self.host.handle(now, input);
            for effect in effects {
                self.execute(&writers, effect);
            }
            if let Some(conn) = disconnected {
                writers.remove(&conn);
            }
        }
        drop(writers);
        self.store.finish().await;
    }

    fn execute(&mut self, writers: &HashMap<ConnId, Writer>, effect: Effect) {
        match effect {
            Effect::Send { conn, message } => match writers.get(&conn) {
                Some(w) => w.send(WriterCmd::Frame(message.to_json())),
                None => tracing::debug!(conn = conn.0, "frame for a connection that is gone"),
            },
            Effect::Close { conn } => {
                if let Some(w) = writers.get(&conn) {
                    w.send(WriterCmd::Close);
                }
            }
            Effect::Backend { op, provider, chat, command } => self.backends.execute(op, &provider, chat, command),
            Effect::Store { op, command } => self.store.submit(op, command),
            Effect::Scan { op, provider } => self.backends.scan(op, &provider),
            Effect::Log(event) => log(&event),
        }
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One operator log line for a core [`LogEvent`].
fn log(e: &LogEvent) {
    let session = e.session.as_deref().unwrap_or("");
    match e.level {
        LogLevel::Info => tracing::info!(event = e.event, session, detail = %e.detail, "{}", e.event),
        LogLevel::Warn => tracing::warn!(event = e.event, session, detail = %e.detail, "{}", e.event),
    }
}
