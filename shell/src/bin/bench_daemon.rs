//! `bench_daemon`: a load benchmark of the whole daemon (issue 21).
//!
//! It starts the release `ahpd` that sits next to this executable as a child
//! process (a free loopback port, a fresh temp data dir, its own temp
//! awareness directory so awareness is on as by default, the built-in `echo`
//! agent) and drives it over loopback WebSocket with raw JSON-RPC frames.
//! Every figure is printed beside a baseline measured in the same run: plain
//! reads of the same files, a minimal tokio-tungstenite server in this
//! process answering the same bytes, serde_json encoding of the same rows,
//! an inotify watcher or an `ignore` walk with a `nucleo-matcher` filter in
//! this process, or the same daemon measured at another size.
//!
//! ```sh
//! cargo build --release -p ahpd --bins
//! cargo run --release -p ahpd --bin bench_daemon -- catalogue --sessions 1000,10000,100000
//! cargo run --release -p ahpd --bin bench_daemon -- turns --clients 1,10,50
//! cargo run --release -p ahpd --bin bench_daemon -- fanout --subscribers 100
//! cargo run --release -p ahpd --bin bench_daemon -- wake
//! cargo run --release -p ahpd --bin bench_daemon -- peers --live 100
//! cargo run --release -p ahpd --bin bench_daemon -- soak               # issue 25's hostile phases
//! cargo run --release -p ahpd --bin bench_daemon -- files --file-mib 10 --repo-files 100000   # issue 48
//! cargo run --release -p ahpd --bin bench_daemon -- all
//! ```
//!
//! Every scenario takes `--runs K` (each figure is the median of K runs).
//! It is a program that prints figures, not a timed test
//! (docs/PERFORMANCE.md keeps the figures and the commands).

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ahp_types::actions::{ChatTurnStartedAction, StateAction};
use ahp_types::commands::DispatchActionParams;
use ahp_types::state::{
    MarkdownResponsePart, Message, MessageKind, MessageOrigin, ResponsePart, SessionSummary, Turn, TurnState,
};
use ahpd_core::{SessionRecord, WallTime};
use clap::{Parser, ValueEnum};
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Errors are messages a person can act on; `main` prints them.
type R<T> = Result<T, String>;

/// The longest any single request or wait may take before the benchmark
/// gives up (a hang must end the run, not stall it).
const STEP: Duration = Duration::from_secs(120);

/// Rows per `listSessions` page, as clients ask for them.
const PAGE: usize = 500;

/// Repetitions of a timed page request (the median is reported).
const PAGE_REPS: usize = 30;

/// Sequential pings timed for the latency figures.
const PINGS: usize = 300;

/// Folders the generated sessions' working directories are spread over.
const FOLDERS: usize = 5;

/// Frame rate limits passed to every daemon: the defaults (200/s, burst
/// 1000) would throttle the 1 ms ping probe and back-to-back turns, and the
/// benchmark measures the daemon's work, not its rate limiter.
const NO_RATE_LIMIT: &[&str] = &["--limit-frames-per-second", "1000000", "--limit-frames-burst", "1000000"];

/// Which part of the daemon to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// N pre-generated session records: start, pages, ping, RSS, scan stall.
    Catalogue,
    /// Clients running turns back to back, each on its own session.
    Turns,
    /// One session's chat streamed to many subscribers.
    Fanout,
    /// Waking an evicted session by a subscribe and a turn.
    Wake,
    /// Many live sessions in one folder (awareness peers): memory, snapshot.
    Peers,
    /// A session's files (issue 48): `resourceRead` throughput, a watch's
    /// latency, `completions` over a big repository with pings beside.
    Files,
    /// Issue 25's hostile phases (big turns, clients that never read, a
    /// frame flood) with one well-behaved client measured throughout, and
    /// RSS before, during and after each. Not part of `all`.
    Soak,
    /// Every scenario with modest sizes.
    All,
}

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "bench_daemon", about = "Load benchmark of the whole ahpd daemon (issue 21).")]
struct Cli {
    /// The scenario to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Runs per figure; each figure is the median over the runs.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// catalogue: session counts [default: 1000,10000,100000; `all`: 1000,10000].
    #[arg(long, value_delimiter = ',')]
    sessions: Option<Vec<usize>>,
    /// catalogue: every how many records get an echo transcript (1 = all).
    #[arg(long, default_value_t = 1)]
    transcript_every: usize,
    /// turns: client counts [default: 1,10,50].
    #[arg(long, value_delimiter = ',')]
    clients: Option<Vec<usize>>,
    /// fanout: subscriber connections [default: 100].
    #[arg(long)]
    subscribers: Option<usize>,
    /// peers: live sessions in one folder [default: 100].
    #[arg(long)]
    live: Option<usize>,
    /// turns and fanout: seconds each measured window lasts [default: 5; `all`: 3].
    #[arg(long)]
    seconds: Option<f64>,
    /// wake: wake rounds [default: 10].
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// soak: rounds of big turns, each on a fresh session disposed after.
    #[arg(long, default_value_t = 16)]
    soak_rounds: usize,
    /// soak: turns per round (both the big-turn and the stuck-client phase).
    #[arg(long, default_value_t = 20)]
    soak_turns: usize,
    /// soak: the size of each big turn's message, in KiB (echoed back whole).
    #[arg(long, default_value_t = 900)]
    message_kib: usize,
    /// soak: clients that subscribe to the turning session and never read.
    #[arg(long, default_value_t = 20)]
    stuck: usize,
    /// soak: rounds of the stuck-client phase.
    #[arg(long, default_value_t = 6)]
    stuck_rounds: usize,
    /// soak: frames per second the flooding client sends.
    #[arg(long, default_value_t = 10_000)]
    flood_rate: u64,
    /// soak: seconds the flood lasts (the daemon closes a connection that
    /// keeps over its rate for 10 s).
    #[arg(long, default_value_t = 12.0)]
    flood_seconds: f64,
    /// soak: seconds of the steady client's baseline, and of each settle
    /// after a phase before its "after" RSS is read [default: 5 and 3].
    #[arg(long)]
    baseline_seconds: Option<f64>,
    /// soak: seconds each phase is left to settle before RSS is read.
    #[arg(long, default_value_t = 3.0)]
    settle_seconds: f64,
    /// soak: print each steady probe slower than this many ms, with its
    /// phase and its start and end on CLOCK_MONOTONIC (seconds), to stderr:
    /// the times a `perf sched record -k CLOCK_MONOTONIC` trace of the same
    /// run can be read at (docs/PERFORMANCE.md "Soak").
    #[arg(long)]
    trace_slow_ms: Option<f64>,
    /// soak: one more argument for the daemon's `serve` (repeatable), e.g.
    /// `--daemon-arg=--limit-replay-buffer-max-bytes=1000000000`.
    #[arg(long = "daemon-arg", allow_hyphen_values = true)]
    daemon_args: Vec<String>,
    /// files: MiB of each file read (random bytes, text) [default: 10; `all`: 2].
    #[arg(long)]
    file_mib: Option<f64>,
    /// files: timed reads of each file per run [default: 10; `all`: 5].
    #[arg(long)]
    reads: Option<usize>,
    /// files: files written while the watch looks on [default: 200; `all`: 50].
    #[arg(long)]
    watch_writes: Option<usize>,
    /// files: milliseconds between two of those writes.
    #[arg(long, default_value_t = 20)]
    watch_gap_ms: u64,
    /// files: files of the generated repository, besides its ignored
    /// `target/` (a tenth more) [default: 100000; `all`: 10000].
    #[arg(long)]
    repo_files: Option<usize>,
    /// files: timed `completions` calls after the first.
    #[arg(long, default_value_t = 50)]
    queries: usize,
    /// Keep the temp data (the daemons' data dirs and logs) and print where.
    #[arg(long)]
    keep: bool,
    /// The ahpd binary [default: `ahpd` next to this executable].
    #[arg(long)]
    ahpd: Option<PathBuf>,
    /// Where temp data goes [default: the system temp dir]; removed at exit.
    #[arg(long)]
    tmp: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench_daemon: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench_daemon: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the chosen scenario(s) and prints their tables.
async fn run(cli: Cli) -> R<()> {
    let exe = match &cli.ahpd {
        Some(p) => p.clone(),
        None => {
            let me = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
            me.with_file_name("ahpd")
        }
    };
    if !exe.is_file() {
        return Err(format!("no daemon binary at {} (cargo build --release -p ahpd --bins)", exe.display()));
    }
    let root = cli.tmp.clone().unwrap_or_else(std::env::temp_dir).join(format!("ahpd-bench-{}", std::process::id()));
    let tmp = TempDir::create(root)?;
    let env = Env { exe, tmp: tmp.0.clone(), runs: cli.runs.max(1), counter: AtomicU64::new(0) };
    println!("bench_daemon: daemon {}, {} run(s) per figure, {} CPUs", env.exe.display(), env.runs, cpus());
    let all = cli.scenario == Scenario::All;
    let seconds = cli.seconds.unwrap_or(if all { 3.0 } else { 5.0 });
    if matches!(cli.scenario, Scenario::Catalogue | Scenario::All) {
        let sizes = cli.sessions.clone().unwrap_or_else(|| if all { vec![1000, 10_000] } else { vec![1000, 10_000, 100_000] });
        catalogue(&env, &sizes, cli.transcript_every.max(1)).await?;
    }
    if matches!(cli.scenario, Scenario::Turns | Scenario::All) {
        let clients = cli.clients.clone().unwrap_or_else(|| vec![1, 10, 50]);
        turns(&env, &clients, seconds).await?;
    }
    if matches!(cli.scenario, Scenario::Fanout | Scenario::All) {
        fanout(&env, cli.subscribers.unwrap_or(100), seconds).await?;
    }
    if matches!(cli.scenario, Scenario::Wake | Scenario::All) {
        wake(&env, if all { cli.rounds.min(6) } else { cli.rounds }).await?;
    }
    if matches!(cli.scenario, Scenario::Peers | Scenario::All) {
        peers(&env, cli.live.unwrap_or(100)).await?;
    }
    if matches!(cli.scenario, Scenario::Files | Scenario::All) {
        let opts = FilesOpts {
            file_bytes: (cli.file_mib.unwrap_or(if all { 2.0 } else { 10.0 }).max(0.001) * 1024.0 * 1024.0) as usize,
            reads: cli.reads.unwrap_or(if all { 5 } else { 10 }).max(1),
            writes: cli.watch_writes.unwrap_or(if all { 50 } else { 200 }).max(1),
            gap: Duration::from_millis(cli.watch_gap_ms),
            repo_files: cli.repo_files.unwrap_or(if all { 10_000 } else { 100_000 }).max(1),
            queries: cli.queries.max(1),
        };
        files(&env, &opts).await?;
    }
    if cli.scenario == Scenario::Soak {
        let opts = SoakOpts {
            rounds: cli.soak_rounds,
            turns: cli.soak_turns,
            message_bytes: cli.message_kib << 10,
            stuck: cli.stuck,
            stuck_rounds: cli.stuck_rounds,
            flood_rate: cli.flood_rate.max(1),
            flood: Duration::from_secs_f64(cli.flood_seconds.max(0.0)),
            baseline: Duration::from_secs_f64(cli.baseline_seconds.unwrap_or(5.0).max(0.5)),
            settle: Duration::from_secs_f64(cli.settle_seconds.max(0.0)),
            daemon_args: cli.daemon_args.clone(),
            trace_slow: cli.trace_slow_ms.map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1e3)),
        };
        soak(&env, &opts).await?;
    }
    if cli.keep {
        // Left for a look at the daemons' logs and data.
        println!("bench_daemon: kept {}", tmp.0.display());
        std::mem::forget(tmp);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Environment, temp dirs, the daemon child
// ---------------------------------------------------------------------------

/// What every scenario shares: the daemon binary, the temp root, the runs.
struct Env {
    exe: PathBuf,
    tmp: PathBuf,
    runs: usize,
    counter: AtomicU64,
}

impl Env {
    /// A fresh, empty directory under the temp root.
    fn fresh_dir(&self, what: &str) -> R<PathBuf> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let dir = self.tmp.join(format!("{what}-{n}"));
        fs::create_dir_all(&dir).map_err(|e| format!("could not create {}: {e}", dir.display()))?;
        Ok(dir)
    }
}

/// A directory removed (with everything in it) when dropped.
struct TempDir(PathBuf);

impl TempDir {
    /// Creates `path` (and its parents).
    fn create(path: PathBuf) -> R<TempDir> {
        fs::create_dir_all(&path).map_err(|e| format!("could not create {}: {e}", path.display()))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover temp dir is harmless but large at 100k.
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Awareness for a daemon: on with its own registry directory, or off.
#[derive(Clone)]
enum Awareness {
    On(PathBuf),
    Off,
}

/// A running daemon child; killed (SIGKILL) and reaped when dropped, so an
/// early error or a panic never leaves it running.
struct Daemon {
    child: Child,
    pid: u32,
    addr: SocketAddr,
    url: String,
    log: PathBuf,
    /// The log's length when this daemon was spawned: the log is appended to
    /// by every daemon run on the same data, and a run's probes read only
    /// its own daemon's lines (`Daemon::own_log`).
    log_from: usize,
    /// When `spawn` was called (start times are measured from here).
    spawned: Instant,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A wrapper given as `--ahpd` (a profiler, an RSS sampler) may run the
        // daemon as its own child, which killing the wrapper leaves running
        // (idle daemons from earlier diagnostics were found still up, taking
        // their share of a later measurement): its descendants go first.
        for pid in descendants_of(self.child.id()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The processes descended from `root`, children before grandchildren, read
/// from `/proc/<pid>/stat` (empty where there is no `/proc`).
fn descendants_of(root: u32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The field after the command (which may hold spaces, in parentheses) and the state.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse::<i32>().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![i32::try_from(root).unwrap_or(-1)];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &parents {
            if ppid == parent && !found.contains(&pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

/// A loopback port nobody listens on now (bound then released; the daemon
/// binds it a moment later).
/// The connection token of the daemon that runs on `data_dir`
/// (`<data-dir>/host-token`), made here first when the folder has none (64
/// random hex digits, mode 0600, as the daemon makes it), so that the URL is
/// known before the daemon starts: the daemon takes a token file it finds
/// as its own.
fn connection_token(data_dir: &Path) -> R<String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let path = data_dir.join("host-token");
    if let Ok(text) = fs::read_to_string(&path) {
        return Ok(text.trim().to_owned());
    }
    fs::DirBuilder::new().recursive(true).mode(0o700).create(data_dir).map_err(|e| format!("could not make {}: {e}", data_dir.display()))?;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no OS randomness: {e}"))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).map_err(|e| format!("could not write {}: {e}", path.display()))?;
    file.write_all(token.as_bytes()).map_err(|e| format!("could not write {}: {e}", path.display()))?;
    Ok(token)
}

fn free_port() -> R<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free loopback port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| format!("no local address: {e}"))
}

impl Daemon {
    /// Spawns `ahpd serve` on `data_dir` and returns at once (not yet
    /// listening; see [`Daemon::wait_listening`]). The daemon reads no config
    /// file or `AHPD_*` variable of the user's, scans no Claude transcripts,
    /// and logs warnings plus the backend's scan lines to `<data>.log`.
    fn spawn(env: &Env, data_dir: &Path, awareness: &Awareness, extra: &[&str]) -> R<Daemon> {
        let port = free_port()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let log = data_dir.with_extension("log");
        let stderr = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("could not open {}: {e}", log.display()))?;
        let config = data_dir.with_extension("toml");
        fs::write(&config, b"").map_err(|e| format!("could not write {}: {e}", config.display()))?;
        let mut cmd = Command::new(&env.exe);
        cmd.arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--config")
            .arg(&config)
            .args(["--claude-projects", ""])
            .arg("--awareness-dir");
        match awareness {
            Awareness::On(dir) => cmd.arg(dir),
            Awareness::Off => cmd.arg(""),
        };
        // A scenario that sets the rate limits itself (soak) keeps them.
        if !extra.iter().any(|a| a.starts_with("--limit-frames")) {
            cmd.args(NO_RATE_LIMIT);
        }
        cmd.args(extra);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("AHPD_") {
                cmd.env_remove(key);
            }
        }
        // Only warnings, plus the scan's "scan finished" line and the core's
        // log events (`catalogue.scan_merged`: a pass merged) the catalogue
        // scenario waits for: per-frame logging would be part of the load.
        // `BENCH_DAEMON_LOG` replaces the filter when a run needs looking into.
        let filter = std::env::var("BENCH_DAEMON_LOG").unwrap_or_else(|_| "warn,ahpd::exec::backend=debug,ahpd::driver=info".to_owned());
        cmd.env("RUST_LOG", filter).env("NO_COLOR", "1");
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(stderr));
        let log_from = fs::metadata(&log).map_or(0, |m| m.len() as usize);
        let spawned = Instant::now();
        let token = connection_token(data_dir)?;
        let child = cmd.spawn().map_err(|e| format!("could not start {}: {e}", env.exe.display()))?;
        let pid = child.id();
        Ok(Daemon { child, pid, addr, url: format!("ws://{addr}/?token={token}"), log, log_from, spawned })
    }

    /// Polls the port every millisecond until it accepts a TCP connection;
    /// returns the time since spawn.
    async fn wait_listening(&mut self) -> R<Duration> {
        loop {
            if TcpStream::connect(self.addr).await.is_ok() {
                return Ok(self.spawned.elapsed());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("ahpd exited ({status}) before listening; log:\n{}", self.log_tail()));
            }
            if self.spawned.elapsed() > STEP {
                return Err(format!("ahpd did not listen within {STEP:?}; log:\n{}", self.log_tail()));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// What this daemon logged (not the lines of an earlier daemon run on
    /// the same data: with those, a later run's stall probe saw the first
    /// run's "scan finished" at once and stopped before its own scan merged,
    /// so its stall and RSS figures were read mid-scan).
    fn own_log(&self) -> String {
        let bytes = fs::read(&self.log).unwrap_or_default();
        String::from_utf8_lossy(bytes.get(self.log_from..).unwrap_or_default()).into_owned()
    }

    /// The last 2 KB of the daemon's log.
    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let cut = text.len().saturating_sub(2048);
        text.get(cut..).unwrap_or(&text).to_owned()
    }

    /// The daemon's resident set size now, in bytes (`VmRSS`).
    fn rss(&self) -> R<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid)).map_err(|e| format!("could not read the daemon's status: {e}"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .ok_or_else(|| "no VmRSS in the daemon's status".to_owned())
    }

    /// One counter of `/metrics` (a plain HTTP GET on the same port).
    async fn metric(&self, name: &str) -> R<f64> {
        let addr = self.addr;
        let text = tokio::task::spawn_blocking(move || -> R<String> {
            let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("metrics connect: {e}"))?;
            s.set_read_timeout(Some(STEP)).map_err(|e| format!("metrics timeout: {e}"))?;
            s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).map_err(|e| format!("metrics write: {e}"))?;
            let mut body = String::new();
            s.read_to_string(&mut body).map_err(|e| format!("metrics read: {e}"))?;
            Ok(body)
        })
        .await
        .map_err(|e| format!("metrics task: {e}"))??;
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or_else(|| format!("/metrics has no {name} (is this daemon built from this tree?)"))
    }
}

// ---------------------------------------------------------------------------
// A raw JSON-RPC client over tokio-tungstenite
// ---------------------------------------------------------------------------

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The top level of a frame: enough to tell a reply from a notification.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    id: Option<Value>,
}

/// One WebSocket connection speaking raw JSON-RPC frames.
struct Client {
    ws: Ws,
    next_id: u64,
    next_seq: i64,
}

impl Client {
    /// Connects to `url`.
    async fn open(url: &str) -> R<Client> {
        let (ws, _) = tokio::time::timeout(STEP, tokio_tungstenite::connect_async(url))
            .await
            .map_err(|_| format!("connecting to {url} timed out"))?
            .map_err(|e| format!("could not connect to {url}: {e}"))?;
        Ok(Client { ws, next_id: 1, next_seq: 1 })
    }

    /// Connects and says `initialize` (no initial subscriptions).
    async fn open_init(url: &str, client_id: &str) -> R<Client> {
        let mut c = Client::open(url).await?;
        c.request("initialize", json!({"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": client_id})).await?;
        Ok(c)
    }

    /// Sends one text frame.
    async fn send(&mut self, text: String) -> R<()> {
        self.ws.send(WsMessage::Text(text.into())).await.map_err(|e| format!("send failed: {e}"))
    }

    /// The next text frame (control frames skipped).
    async fn next_text(&mut self) -> R<String> {
        loop {
            let msg = tokio::time::timeout(STEP, self.ws.next()).await.map_err(|_| format!("no frame within {STEP:?}"))?;
            match msg {
                Some(Ok(WsMessage::Text(t))) => return Ok(t.as_str().to_owned()),
                Some(Ok(WsMessage::Close(c))) => return Err(format!("the server closed the connection: {c:?}")),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(format!("read failed: {e}")),
                None => return Err("the connection ended".to_owned()),
            }
        }
    }

    /// A request frame with the next id; returns the frame and its id.
    fn request_frame(&mut self, method: &str, params: &Value) -> (String, u64) {
        let id = self.next_id;
        self.next_id += 1;
        (json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(), id)
    }

    /// Sends a request and returns the raw text of its reply (notifications
    /// read meanwhile are dropped). An error reply is an error.
    async fn request_raw(&mut self, method: &str, params: Value) -> R<String> {
        let (frame, id) = self.request_frame(method, &params);
        self.send(frame).await?;
        loop {
            let text = self.next_text().await?;
            let head: Head = serde_json::from_str(&text).map_err(|e| format!("unparsable frame ({e}): {}", clip(&text)))?;
            if head.id.as_ref().and_then(Value::as_u64) == Some(id) {
                if text.contains("\"error\":") && !text.contains("\"result\":") {
                    return Err(format!("{method} failed: {}", clip(&text)));
                }
                return Ok(text);
            }
        }
    }

    /// Sends a request and returns its `result`.
    async fn request(&mut self, method: &str, params: Value) -> R<Value> {
        let text = self.request_raw(method, params).await?;
        let mut v: Value = serde_json::from_str(&text).map_err(|e| format!("unparsable reply ({e})"))?;
        Ok(v.get_mut("result").map(Value::take).unwrap_or(Value::Null))
    }

    /// A `ping`, timed.
    async fn ping(&mut self) -> R<Duration> {
        let t = Instant::now();
        self.request_raw("ping", json!({"channel": "ahp-root://"})).await?;
        Ok(t.elapsed())
    }

    /// Creates an echo session `sid` in `folder`, subscribes to it and to its
    /// default chat; returns the chat URI.
    async fn new_session(&mut self, sid: &str, folder: &Path) -> R<String> {
        let wd = ahpd_core::git::uri_of_path(folder.to_str().ok_or("a temp path is not UTF-8")?);
        self.request("createSession", json!({"channel": sid, "provider": "echo", "workingDirectories": [wd]})).await?;
        let snap = self.request("subscribe", json!({"channel": sid})).await?;
        let state = &snap["snapshot"]["state"];
        let chat = state["defaultChat"]
            .as_str()
            .or_else(|| state["chats"][0]["resource"].as_str())
            .ok_or_else(|| format!("no default chat in the snapshot of {sid}"))?
            .to_owned();
        self.request("subscribe", json!({"channel": chat})).await?;
        Ok(chat)
    }

    /// The `dispatchAction` frame that starts turn `turn_id` with `text`.
    fn turn_frame(&mut self, chat: &str, turn_id: &str, text: &str) -> R<String> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let params = DispatchActionParams {
            channel: chat.to_owned(),
            client_seq: seq,
            action: StateAction::ChatTurnStarted(ChatTurnStartedAction {
                turn_id: turn_id.to_owned(),
                started_at: WallTime(wall_ms()).to_iso(),
                message: Message {
                    text: text.to_owned(),
                    origin: MessageOrigin { kind: MessageKind::User },
                    attachments: None,
                    model: None,
                    agent: None,
                    meta: None,
                },
                queued_message_id: None,
                meta: None,
            }),
        };
        let params = serde_json::to_value(params).map_err(|e| format!("could not encode a turn: {e}"))?;
        Ok(json!({"jsonrpc": "2.0", "method": "dispatchAction", "params": params}).to_string())
    }

    /// Runs one turn to its `chat/turnComplete`; returns its latency
    /// (dispatch to the completing action). Every frame read meanwhile is
    /// pushed to `record` when given. A rejected or failed turn is an error.
    async fn turn(&mut self, chat: &str, turn_id: &str, text: &str, mut record: Option<&mut Vec<String>>) -> R<Duration> {
        let frame = self.turn_frame(chat, turn_id, text)?;
        let t = Instant::now();
        self.send(frame).await?;
        loop {
            let f = self.next_text().await?;
            let done = f.contains(turn_id) && f.contains("\"chat/turnComplete\"");
            if f.contains(turn_id) && (f.contains("\"rejectionReason\"") || f.contains("\"chat/error\"")) {
                return Err(format!("turn {turn_id} failed: {}", clip(&f)));
            }
            if let Some(rec) = record.as_deref_mut() {
                rec.push(f);
            }
            if done {
                return Ok(t.elapsed());
            }
        }
    }
}

/// A frame shortened for an error message.
fn clip(text: &str) -> String {
    let end = text.char_indices().nth(300).map(|(i, _)| i).unwrap_or(text.len());
    text[..end].to_owned()
}

/// Wall-clock milliseconds since the epoch.
fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The CPUs this process may run on.
fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

// ---------------------------------------------------------------------------
// The minimal server (the baselines)
// ---------------------------------------------------------------------------

/// What the minimal server answers: the daemon's own reply bytes, recorded
/// in the same run.
#[derive(Default)]
struct Canned {
    /// The reply to a `listSessions` without a cursor.
    first_page: String,
    /// The reply to a `listSessions` with a cursor.
    middle_page: String,
    /// The frames one turn produced, with `turn_id` in them; a
    /// `dispatchAction` is answered with these, the turn id swapped for the
    /// new one (same width, so the same sizes).
    turn_frames: Vec<String>,
    /// The turn id in `turn_frames`.
    turn_id: String,
    /// Fan-out mode: turn frames go to every subscribed connection.
    broadcast: Option<tokio::sync::broadcast::Sender<tokio_tungstenite::tungstenite::Utf8Bytes>>,
}

/// Of a client frame, what the minimal server needs.
#[derive(Deserialize)]
struct MiniReq {
    #[serde(default)]
    id: Option<u64>,
    #[serde(default)]
    method: String,
    #[serde(default)]
    params: Value,
}

/// Starts the minimal tokio-tungstenite server on a free loopback port;
/// returns its URL and the accept task (abort it when done).
async fn mini_server(canned: Arc<Canned>) -> R<(String, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| format!("minimal server bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("minimal server address: {e}"))?;
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(mini_conn(stream, canned.clone()));
        }
    });
    Ok((format!("ws://{addr}/"), task))
}

/// One connection of the minimal server: ping, listSessions, subscribe and
/// dispatchAction answered with canned bytes; nothing else is modelled.
async fn mini_conn(stream: TcpStream, canned: Arc<Canned>) {
    let Ok(ws) = tokio_tungstenite::accept_async(stream).await else { return };
    let (mut tx, mut rx) = ws.split();
    let mut feed = None;
    loop {
        let frame = tokio::select! {
            m = rx.next() => match m {
                Some(Ok(WsMessage::Text(t))) => t,
                Some(Ok(_)) => continue,
                _ => return,
            },
            b = async { match feed.as_mut() { Some(r) => r_recv(r).await, None => std::future::pending().await } } => {
                match b {
                    Some(bytes) => { if tx.send(WsMessage::Text(bytes)).await.is_err() { return } continue }
                    None => return,
                }
            }
        };
        let Ok(req) = serde_json::from_str::<MiniReq>(frame.as_str()) else { continue };
        let replies: Vec<String> = match req.method.as_str() {
            "listSessions" => {
                let page = if req.params.get("cursor").is_some_and(|c| !c.is_null()) { &canned.middle_page } else { &canned.first_page };
                vec![with_id(page, req.id.unwrap_or(0))]
            }
            "dispatchAction" => {
                let new_id = req.params["action"]["turnId"].as_str().unwrap_or_default().to_owned();
                let frames: Vec<String> = canned.turn_frames.iter().map(|f| f.replace(&canned.turn_id, &new_id)).collect();
                match &canned.broadcast {
                    Some(b) => {
                        for f in frames {
                            let _ = b.send(f.into());
                        }
                        Vec::new()
                    }
                    None => frames,
                }
            }
            "subscribe" => {
                if let Some(b) = &canned.broadcast {
                    feed = Some(b.subscribe());
                }
                vec![format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{}}}}", req.id.unwrap_or(0))]
            }
            _ => match req.id {
                Some(id) => vec![format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":null}}")],
                None => Vec::new(),
            },
        };
        for r in replies {
            if tx.send(WsMessage::Text(r.into())).await.is_err() {
                return;
            }
        }
    }
}

/// A recorded reply with its top-level `"id":N` made `id` (the first
/// `"id":` before `"result"`; the daemon writes the id first), so the
/// client matches it; the rest of the bytes are the daemon's.
fn with_id(reply: &str, id: u64) -> String {
    let result_at = reply.find("\"result\"").unwrap_or(reply.len());
    let Some(at) = reply[..result_at].find("\"id\":") else { return reply.to_owned() };
    let digits = at + 5;
    let end = reply[digits..].find(|c: char| !c.is_ascii_digit()).map(|n| digits + n).unwrap_or(reply.len());
    format!("{}{id}{}", &reply[..digits], &reply[end..])
}

/// The next broadcast frame; a lagging receiver skips what it missed (the
/// baseline must not stall), a closed channel ends.
async fn r_recv(
    r: &mut tokio::sync::broadcast::Receiver<tokio_tungstenite::tungstenite::Utf8Bytes>,
) -> Option<tokio_tungstenite::tungstenite::Utf8Bytes> {
    loop {
        match r.recv().await {
            Ok(b) => return Some(b),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
        }
    }
}

// ---------------------------------------------------------------------------
// Figures and tables
// ---------------------------------------------------------------------------

/// One row of a result table.
struct Row {
    figure: String,
    value: String,
    baseline: String,
    ratio: String,
    goal: String,
}

/// A row; `ratio` is `value / baseline` when both are given.
fn row(figure: impl Into<String>, value: String, baseline: String, ratio: Option<f64>, goal: &str) -> Row {
    Row { figure: figure.into(), value, baseline, ratio: ratio.filter(|r| r.is_finite()).map(|r| if r < 0.1 { format!("{r:.3}×") } else { format!("{r:.2}×") }).unwrap_or_else(|| "–".into()), goal: goal.into() }
}

/// Prints a table as aligned Markdown (pasteable into docs/PERFORMANCE.md).
fn print_table(title: &str, rows: &[Row]) {
    let head = ["figure", "value", "baseline (same run)", "ratio", "goal"];
    let cells: Vec<[&str; 5]> = rows.iter().map(|r| [r.figure.as_str(), &r.value, &r.baseline, &r.ratio, &r.goal]).collect();
    let mut w = head.map(|h| h.chars().count());
    for c in &cells {
        for i in 0..5 {
            w[i] = w[i].max(c[i].chars().count());
        }
    }
    let line = |c: [&str; 5]| {
        let parts: Vec<String> = (0..5).map(|i| format!("{}{}", c[i], " ".repeat(w[i] - c[i].chars().count()))).collect();
        format!("| {} |", parts.join(" | "))
    };
    println!("\n### {title}\n");
    println!("{}", line(head));
    let dashes: Vec<String> = w.iter().map(|n| "-".repeat(*n)).collect();
    println!("|-{}-|", dashes.join("-|-"));
    for c in cells {
        println!("{}", line(c));
    }
    println!();
}

/// Median of `xs` (0 for none).
fn median(xs: &[f64]) -> f64 {
    percentile(xs, 0.5)
}

/// The `p` quantile of `xs` (nearest rank; 0 for none).
fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Milliseconds of `d`.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `x` ms shown with sensible precision.
fn fmt_ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0} ms")
    } else if x >= 1.0 {
        format!("{x:.2} ms")
    } else {
        format!("{x:.3} ms")
    }
}

/// `n` bytes as B / KiB / MiB.
fn fmt_bytes(n: f64) -> String {
    if n >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", n / (1024.0 * 1024.0))
    } else if n >= 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else {
        format!("{n:.0} B")
    }
}

/// Per-run values of named figures, reduced to medians at the end.
#[derive(Default)]
struct Runs(HashMap<String, Vec<f64>>);

impl Runs {
    /// Records one run's value of `key`.
    fn put(&mut self, key: impl Into<String>, v: f64) {
        self.0.entry(key.into()).or_default().push(v);
    }
    /// The median over runs of `key` (NaN when never recorded).
    fn get(&self, key: &str) -> f64 {
        self.0.get(key).map(|v| median(v)).unwrap_or(f64::NAN)
    }
}

// ---------------------------------------------------------------------------
// Catalogue
// ---------------------------------------------------------------------------

/// Writes `n` session records in the store's format (the daemon's own
/// `serde_json::to_vec_pretty` of a `SessionRecord`, so each is checked
/// against the record type too) and, for every `every`-th one, an echo
/// transcript with one turn; two threads, files written in a tight loop.
/// Returns the total bytes of the record files.
fn generate(data: &Path, n: usize, every: usize) -> R<u64> {
    let sessions = data.join("sessions");
    let echo = data.join("echo");
    for d in [&sessions, &echo] {
        fs::create_dir_all(d).map_err(|e| format!("could not create {}: {e}", d.display()))?;
    }
    let folders: Vec<String> = (0..FOLDERS)
        .map(|i| {
            let p = data.with_extension("work").join(format!("app_{i}"));
            let _ = fs::create_dir_all(&p);
            ahpd_core::git::uri_of_path(&p.to_string_lossy())
        })
        .collect();
    let now = wall_ms();
    let turn_template = {
        let turn = Turn {
            id: "t-0001".to_owned(),
            started_at: Some(WallTime(now - 3_600_000).to_iso()),
            duration: Some(80),
            message: Message {
                text: "TEXT".to_owned(),
                origin: MessageOrigin { kind: MessageKind::User },
                attachments: None,
                model: None,
                agent: None,
                meta: None,
            },
            response_parts: vec![ResponsePart::Markdown(MarkdownResponsePart { id: "t-0001.md".to_owned(), content: "Echo: TEXT".to_owned() })],
            usage: None,
            state: TurnState::Complete,
        };
        serde_json::to_string(&turn).map_err(|e| format!("could not encode a turn: {e}"))?
    };
    let total = AtomicU64::new(0);
    let failed: Mutex<Option<String>> = Mutex::new(None);
    let threads = 2;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (sessions, echo, folders, turn_template, total, failed) = (&sessions, &echo, &folders, &turn_template, &total, &failed);
            s.spawn(move || {
                let result = (|| -> R<()> {
                    for i in (t..n).step_by(threads) {
                        let key = format!("ahp-session@bench-{i:07}");
                        let sid = format!("ahp-session:/bench-{i:07}");
                        let chat = format!("ahp-chat:/{key}");
                        let created = WallTime(now - 86_400_000 - (n - i) as i64 * 1000).to_iso();
                        let modified = WallTime(now - 3_600_000 - (n - i) as i64 * 1000).to_iso();
                        let title = format!("Refactor the parser so errors carry line numbers ({i})");
                        let folder = &folders[i % FOLDERS];
                        let text = format!(
                            r#"{{"format":{fmt},"key":"{key}","resource":"{sid}","provider":"echo","title":"{title}","createdAt":"{created}","modifiedAt":"{modified}","isRead":{read},"isArchived":false,"workingDirectories":["{folder}"],"config":{{}},"owner":null,"scope":null,"defaultChat":"{chat}","chats":[{{"resource":"{chat}","title":"","conversationId":"{key}","modifiedAt":"{modified}","status":1,"fresh":false,"senders":{{}}}}],"changes":null,"git":null,"external":false}}"#,
                            fmt = ahpd_core::record::RECORD_FORMAT,
                            read = i % 3 == 0,
                        );
                        let record: SessionRecord = serde_json::from_str(&text).map_err(|e| format!("the generated record does not parse as a SessionRecord (the record type changed?): {e}"))?;
                        let bytes = serde_json::to_vec_pretty(&record).map_err(|e| format!("could not encode a record: {e}"))?;
                        total.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        fs::write(sessions.join(format!("{key}.json")), &bytes).map_err(|e| format!("could not write a record: {e}"))?;
                        if i % every == 0 {
                            let turn = turn_template.replace("TEXT", &format!("hello {i}"));
                            // The echo agent's format (JSON lines: a head, then
                            // one line per turn ending in the summary the scan reads).
                            let transcript = format!(
                                "{{\"format\":\"ahpd.echo.lines/1\",\"session\":\"{sid}\",\"chat\":\"{chat}\",\"workingDirectory\":\"{folder}\",\"createdAt\":\"{created}\"}}\n\
                                 {{\"turn\":{turn},\"summary\":{{\"title\":\"{title}\",\"modifiedAt\":\"{modified}\"}}}}\n"
                            );
                            fs::write(echo.join(format!("{key}.json")), transcript).map_err(|e| format!("could not write a transcript: {e}"))?;
                        }
                    }
                    Ok(())
                })();
                if let Err(e) = result {
                    if let Ok(mut f) = failed.lock() {
                        f.get_or_insert(e);
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().ok().flatten() {
        return Err(e);
    }
    Ok(total.into_inner())
}

/// The baseline for the start: what `store::load` does minus the parsing,
/// in this process: list the directory, sort the names, read each file.
fn plain_read(dir: &Path) -> R<(Duration, u64)> {
    let t = Instant::now();
    let mut names: Vec<PathBuf> = fs::read_dir(dir).map_err(|e| format!("could not list {}: {e}", dir.display()))?.flatten().map(|e| e.path()).collect();
    names.sort();
    let mut bytes = 0u64;
    for p in names {
        bytes += fs::read(&p).map_err(|e| format!("could not read {}: {e}", p.display()))?.len() as u64;
    }
    Ok((t.elapsed(), bytes))
}

/// The longest ping latency while the start's transcript scan runs and
/// merges: one ping sent every ~1 ms (not waiting for replies) from now
/// until 1.5 s after the log says the scan finished, or, when the log says
/// the daemon merges the echo pass in slices (`catalogue.scan_merging`),
/// 1.5 s after it says the merge ended (at most `cap`).
/// Returns (longest latency, pings answered, whether the scan was seen).
async fn stall_probe(d: &Daemon, cap: Duration) -> R<(Duration, usize, bool)> {
    let c = Client::open_init(&d.url, "stall-probe").await?;
    let (mut tx, mut rx) = c.ws.split();
    let sent: Arc<Mutex<HashMap<u64, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (sent, stop) = (sent.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut id = 1_000_000u64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                id += 1;
                if let Ok(mut m) = sent.lock() {
                    m.insert(id, Instant::now());
                }
                let frame = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\",\"params\":{{\"channel\":\"ahp-root://\"}}}}");
                if tx.send(WsMessage::Text(frame.into())).await.is_err() {
                    break;
                }
            }
        })
    };
    let start = Instant::now();
    let mut longest = Duration::ZERO;
    let mut answered = 0usize;
    let mut scan_seen_at: Option<Instant> = None;
    let mut merged_seen = false;
    let mut longest_sent: Option<Instant> = None;
    let mut scan_finished_at: Option<Instant> = None;
    let mut next_log_check = Instant::now();
    loop {
        if let Some(at) = scan_seen_at {
            if at.elapsed() > Duration::from_millis(1500) {
                break;
            }
        }
        if start.elapsed() > cap {
            break;
        }
        if !merged_seen && Instant::now() >= next_log_check {
            next_log_check = Instant::now() + Duration::from_millis(50);
            let log = d.own_log();
            if scan_seen_at.is_none() && log.contains("scan finished") {
                scan_seen_at = Some(Instant::now());
                scan_finished_at = scan_seen_at;
            }
            let echo_line = |event: &str| log.lines().any(|l| l.contains(event) && l.contains("echo:"));
            if scan_seen_at.is_some() && echo_line("catalogue.scan_merging") {
                if echo_line("catalogue.scan_merged") {
                    merged_seen = true;
                }
                // Not done until the merge is: the window starts again.
                scan_seen_at = Some(Instant::now());
            }
        }
        let msg = match tokio::time::timeout(Duration::from_millis(50), rx.next()).await {
            Ok(Some(Ok(WsMessage::Text(t)))) => t,
            Ok(Some(Ok(_))) | Err(_) => continue,
            Ok(Some(Err(e))) => return Err(format!("stall probe read: {e}")),
            Ok(None) => return Err("stall probe: the connection ended".into()),
        };
        let now = Instant::now();
        let Ok(head) = serde_json::from_str::<Head>(msg.as_str()) else { continue };
        if let Some(id) = head.id.as_ref().and_then(Value::as_u64) {
            if let Some(t) = sent.lock().ok().and_then(|mut m| m.remove(&id)) {
                if now - t > longest {
                    longest = now - t;
                    longest_sent = Some(t);
                }
                answered += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = writer.await;
    // When the longest stall began, against when the probe saw the scan
    // finish (to within the 50 ms the log is polled at).
    if let (Some(sent), Some(finished)) = (longest_sent, scan_finished_at) {
        let offset = sent.duration_since(start).as_secs_f64() * 1e3 - finished.duration_since(start).as_secs_f64() * 1e3;
        println!("stall probe: the longest stall began {offset:+.0} ms from when the log said the scan finished (merged seen: {merged_seen})");
    }
    // The inputs the daemon says took long (its driver logs each over
    // 5 ms): where a stall came from.
    let log = d.own_log();
    let slow: Vec<&str> = log.lines().filter(|l| l.contains("slow input")).collect();
    if !slow.is_empty() {
        println!("stall probe: the daemon logged {} slow inputs; the longest:", slow.len());
        let total = |l: &str| l.split("total_ms=").nth(1).and_then(|t| t.split_whitespace().next()).and_then(|t| t.parse::<f64>().ok()).unwrap_or(0.0);
        let mut longest = slow.clone();
        longest.sort_by(|a, b| total(b).total_cmp(&total(a)));
        for line in longest.iter().take(5) {
            println!("  {}", line.split_once("slow input").map_or(*line, |(_, rest)| rest).trim());
        }
    }
    // Pings still unanswered at the end count as stalled that long.
    if let Ok(m) = sent.lock() {
        if let Some(oldest) = m.values().min() {
            longest = longest.max(oldest.elapsed().saturating_sub(Duration::from_millis(60)));
        }
    }
    Ok((longest, answered, scan_seen_at.is_some()))
}

/// Times `reps` identical requests on `c`; returns the median and the last
/// reply's text.
async fn time_requests(c: &mut Client, method: &str, params: Value, reps: usize) -> R<(f64, String)> {
    let mut times = Vec::with_capacity(reps);
    let mut last = String::new();
    for _ in 0..reps {
        let t = Instant::now();
        last = c.request_raw(method, params.clone()).await?;
        times.push(ms(t.elapsed()));
    }
    Ok((median(&times), last))
}

/// `reps` sequential pings; (median ms, p99 ms).
async fn time_pings(c: &mut Client, reps: usize) -> R<(f64, f64)> {
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        times.push(ms(c.ping().await?));
    }
    Ok((median(&times), percentile(&times, 0.99)))
}

/// Median time to `serde_json` the rows of a `listSessions` reply.
fn encode_rows(reply: &str, reps: usize) -> R<(f64, usize)> {
    let v: Value = serde_json::from_str(reply).map_err(|e| format!("unparsable page: {e}"))?;
    let items: Vec<SessionSummary> =
        serde_json::from_value(v["result"]["items"].clone()).map_err(|e| format!("the page's rows are not SessionSummary: {e}"))?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        let text = serde_json::to_string(&items).map_err(|e| format!("could not encode rows: {e}"))?;
        std::hint::black_box(&text);
        times.push(ms(t.elapsed()));
    }
    Ok((median(&times), items.len()))
}

/// The catalogue scenario over `sizes`.
async fn catalogue(env: &Env, sizes: &[usize], every: usize) -> R<()> {
    let mut rows = Vec::new();
    let mut runs = Runs::default();
    let base_n = sizes.iter().copied().min().unwrap_or(1000);
    // An empty daemon: the memory every daemon has before its catalogue.
    for _ in 0..env.runs {
        let data = env.fresh_dir("empty")?;
        let aw = env.fresh_dir("aware")?;
        let mut d = Daemon::spawn(env, &data, &Awareness::On(aw), &[])?;
        d.wait_listening().await?;
        let mut c = Client::open_init(&d.url, "bench").await?;
        c.request_raw("listSessions", json!({"channel": "ahp-root://", "limit": PAGE})).await?;
        let folder = data.with_extension("work");
        fs::create_dir_all(&folder).map_err(|e| format!("could not create {}: {e}", folder.display()))?;
        let chat = c.new_session("ahp-session:/live-empty", &folder).await?;
        c.turn(&chat, &turn_id(0, 1), TURN_TEXT, None).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (p50, _) = time_pings(&mut c, PINGS).await?;
        runs.put("ping0", p50);
        runs.put("rss0", d.rss()? as f64);
    }
    for &n in sizes {
        let data = env.fresh_dir(&format!("cat{n}"))?;
        let t = Instant::now();
        let record_bytes = generate(&data, n, every)?;
        println!(
            "catalogue: {n} records ({}, every {every} with an echo transcript) written in {:.1} s",
            fmt_bytes(record_bytes as f64),
            t.elapsed().as_secs_f64()
        );
        runs.put(format!("recbytes{n}"), record_bytes as f64 / n.max(1) as f64);
        for run in 0..env.runs {
            // Baseline first: the page cache is warm from the generation (or
            // the previous run) for both the plain read and the daemon.
            let (read, _) = plain_read(&data.join("sessions"))?;
            runs.put(format!("read{n}"), ms(read));
            let aw = env.fresh_dir("aware")?;
            let mut d = Daemon::spawn(env, &data, &Awareness::On(aw), &[])?;
            let listening = d.wait_listening().await?;
            let mut c = Client::open_init(&d.url, "bench").await?;
            c.request_raw("listSessions", json!({"channel": "ahp-root://", "limit": PAGE})).await?;
            let first_list = d.spawned.elapsed();
            runs.put(format!("listen{n}"), ms(listening));
            runs.put(format!("firstlist{n}"), ms(first_list));
            let cap = Duration::from_secs(10 + (n as u64 / 5_000));
            let (stall, answered, scan_seen) = stall_probe(&d, cap).await?;
            runs.put(format!("stall{n}"), ms(stall));
            println!(
                "catalogue {n} run {}: listening {:.0} ms, first listSessions {:.0} ms (plain read {:.0} ms); stall probe: {answered} pings, longest {:.1} ms{}",
                run + 1,
                ms(listening),
                ms(first_list),
                ms(read),
                ms(stall),
                if scan_seen { "" } else { " (no \"scan finished\" seen in the log before the cap)" }
            );
            // One live session in one of the catalogue's folders (a client
            // at work): awareness has a peer set to keep, as on a real host.
            let folder = data.with_extension("work").join("app_0");
            let chat = c.new_session(&format!("ahp-session:/live-{run}"), &folder).await?;
            c.turn(&chat, &turn_id(0, 1), TURN_TEXT, None).await?;
            // Pages, after the scan merged.
            let (first_ms, first_reply) = time_requests(&mut c, "listSessions", json!({"channel": "ahp-root://", "limit": PAGE}), PAGE_REPS).await?;
            let mut cursor = serde_json::from_str::<Value>(&first_reply).ok().and_then(|v| v["result"]["nextCursor"].as_str().map(str::to_owned));
            let pages_to_middle = (n / 2 / PAGE).max(1);
            for _ in 1..pages_to_middle {
                let Some(cur) = cursor.clone() else { break };
                let r = c.request("listSessions", json!({"channel": "ahp-root://", "limit": PAGE, "cursor": cur})).await?;
                cursor = r["nextCursor"].as_str().map(str::to_owned);
            }
            let (mid_ms, mid_reply) = match cursor.clone() {
                Some(cur) => time_requests(&mut c, "listSessions", json!({"channel": "ahp-root://", "limit": PAGE, "cursor": cur}), PAGE_REPS).await?,
                None => (f64::NAN, first_reply.clone()),
            };
            runs.put(format!("page{n}"), first_ms);
            runs.put(format!("mid{n}"), mid_ms);
            let (p50, p99) = time_pings(&mut c, PINGS).await?;
            runs.put(format!("ping{n}"), p50);
            runs.put(format!("ping99_{n}"), p99);
            runs.put(format!("rss{n}"), d.rss()? as f64);
            drop(c);
            drop(d);
            // Baselines: the minimal server answering the same bytes, and
            // serde_json encoding the same rows.
            let canned = Arc::new(Canned { first_page: first_reply.clone(), middle_page: mid_reply.clone(), ..Canned::default() });
            let (url, task) = mini_server(canned).await?;
            let mut m = Client::open(&url).await?;
            let (mfirst, _) = time_requests(&mut m, "listSessions", json!({"channel": "ahp-root://", "limit": PAGE}), PAGE_REPS).await?;
            let (mmid, _) = time_requests(&mut m, "listSessions", json!({"channel": "ahp-root://", "limit": PAGE, "cursor": "x"}), PAGE_REPS).await?;
            let (mping, _) = time_pings(&mut m, PINGS).await?;
            task.abort();
            let (enc_first, rows_first) = encode_rows(&first_reply, PAGE_REPS)?;
            let (enc_mid, _) = encode_rows(&mid_reply, PAGE_REPS)?;
            runs.put(format!("basepage{n}"), mfirst + enc_first);
            runs.put(format!("basemid{n}"), mmid + enc_mid);
            runs.put(format!("miniping{n}"), mping);
            runs.put(format!("pagebytes{n}"), first_reply.len() as f64);
            runs.put(format!("pagerows{n}"), rows_first as f64);
        }
    }
    let rss0 = runs.get("rss0");
    let ping_base = runs.get(&format!("ping{base_n}"));
    for &n in sizes {
        let g = |k: &str| runs.get(&format!("{k}{n}"));
        rows.push(row(format!("{n}: spawn → listening"), fmt_ms(g("listen")), "–".into(), None, "≤ 100 ms"));
        rows.push(row(
            format!("{n}: spawn → first listSessions answered"),
            fmt_ms(g("firstlist")),
            format!("{} plain sequential read", fmt_ms(g("read"))),
            Some(g("firstlist") / g("read")),
            "≤ 1.5×",
        ));
        rows.push(row(
            format!("{n}: first 500-row page ({} rows, {})", g("pagerows"), fmt_bytes(g("pagebytes"))),
            fmt_ms(g("page")),
            format!("{} minimal server + serde_json", fmt_ms(g("basepage"))),
            Some(g("page") / g("basepage")),
            "≤ 2×",
        ));
        rows.push(row(
            format!("{n}: middle page (cursor)"),
            fmt_ms(g("mid")),
            format!("{} minimal server + serde_json", fmt_ms(g("basemid"))),
            Some(g("mid") / g("basemid")),
            "≤ 2×",
        ));
        rows.push(row(
            format!("{n}: ping median (p99 {})", fmt_ms(g("ping99_"))),
            fmt_ms(g("ping")),
            format!("{} ping at {base_n}; minimal server {}", fmt_ms(ping_base), fmt_ms(g("miniping"))),
            Some(g("ping") / ping_base),
            "≤ 2× (÷ ping at 1k)",
        ));
        let per_row = (g("rss") - rss0) / n.max(1) as f64;
        rows.push(row(
            format!("{n}: RSS per catalogue row (total {})", fmt_bytes(g("rss"))),
            fmt_bytes(per_row),
            format!("{} record file per row; empty daemon {}", fmt_bytes(g("recbytes")), fmt_bytes(rss0)),
            Some(per_row / g("recbytes")),
            "≤ 1 KiB",
        ));
        rows.push(row(
            format!("{n}: longest ping stall while the start scan merges"),
            fmt_ms(g("stall")),
            format!("{} ping median, same daemon", fmt_ms(g("ping"))),
            Some(g("stall") / g("ping")),
            "≤ 10 ms",
        ));
    }
    rows.push(row("empty daemon: ping median", fmt_ms(runs.get("ping0")), "–".into(), None, ""));
    print_table(&format!("catalogue (awareness on, one live session; medians of {} run(s))", env.runs), &rows);
    Ok(())
}

// ---------------------------------------------------------------------------
// Turns
// ---------------------------------------------------------------------------

/// The message every benchmark turn sends: `/slow 0` streams the echo at
/// once, so a turn's time is the daemon's, not the agent's pacing.
const TURN_TEXT: &str = "/slow 0 hello from the load benchmark";

/// A fixed-width turn id (so a replayed frame keeps its size).
fn turn_id(client: usize, n: u64) -> String {
    format!("turn-{client:04}-{n:08}")
}

/// Runs `clients` loops of back-to-back turns against whatever serves
/// `conns` (daemon or minimal server) for `seconds`; returns (turns,
/// elapsed, latencies in ms).
async fn drive_turns(conns: Vec<(Client, String)>, seconds: f64, text: &str) -> R<(u64, Duration, Vec<f64>)> {
    let stop_at = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, (mut c, chat)) in conns.into_iter().enumerate() {
        let text = text.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut n = 100u64;
            while Instant::now() < stop_at {
                n += 1;
                lat.push(ms(c.turn(&chat, &turn_id(i, n), &text, None).await?));
            }
            Ok::<_, String>(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.map_err(|e| format!("turn task: {e}"))??);
    }
    Ok((all.len() as u64, start.elapsed(), all))
}

/// The turns scenario for each client count.
async fn turns(env: &Env, counts: &[usize], seconds: f64) -> R<()> {
    let mut runs = Runs::default();
    for &k in counts {
        for run in 0..env.runs {
            let data = env.fresh_dir(&format!("turns{k}"))?;
            let aw = env.fresh_dir("aware")?;
            let work = data.with_extension("work");
            // No residency limit: 50 clients' sessions stay resident, so the
            // figure is the turn path, not eviction churn (the wake scenario
            // measures that).
            let mut d = Daemon::spawn(env, &data, &Awareness::On(aw), &["--residency-limit", "0"])?;
            d.wait_listening().await?;
            let mut conns = Vec::new();
            let mut recorded = Vec::new();
            let mut rec_id = String::new();
            for i in 0..k {
                let mut c = Client::open_init(&d.url, &format!("client-{i}")).await?;
                let folder = work.join(format!("f{}", i % 4));
                fs::create_dir_all(&folder).map_err(|e| format!("could not create {}: {e}", folder.display()))?;
                let chat = c.new_session(&format!("ahp-session:/turns-{k}-{run}-{i}"), &folder).await?;
                // Warm-up turns; the last one's frames are what the minimal
                // server replays.
                for n in 0..3u64 {
                    let id = turn_id(i, n);
                    let rec = (i == 0 && n == 2).then_some(&mut recorded);
                    c.turn(&chat, &id, TURN_TEXT, rec).await?;
                    if i == 0 && n == 2 {
                        rec_id = id;
                    }
                }
                conns.push((c, chat));
            }
            let f0 = d.metric("ahpd_fsyncs_total").await?;
            let (count, elapsed, lat) = drive_turns(conns, seconds, TURN_TEXT).await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
            let f1 = d.metric("ahpd_fsyncs_total").await?;
            drop(d);
            let tps = count as f64 / elapsed.as_secs_f64();
            runs.put(format!("tps{k}"), tps);
            runs.put(format!("p50_{k}"), median(&lat));
            runs.put(format!("p99_{k}"), percentile(&lat, 0.99));
            runs.put(format!("fsync{k}"), (f1 - f0) / count.max(1) as f64);
            runs.put(format!("frames{k}"), recorded.len() as f64);
            // Baseline: the minimal server replaying the same frames per turn.
            let canned = Arc::new(Canned { turn_frames: recorded, turn_id: rec_id, ..Canned::default() });
            let (url, task) = mini_server(canned).await?;
            let mut mconns = Vec::new();
            for i in 0..k {
                let c = Client::open(&url).await?;
                mconns.push((c, format!("ahp-chat:/mini-{i}")));
            }
            let (mcount, melapsed, mlat) = drive_turns(mconns, seconds, TURN_TEXT).await?;
            task.abort();
            runs.put(format!("mtps{k}"), mcount as f64 / melapsed.as_secs_f64());
            runs.put(format!("mp50_{k}"), median(&mlat));
            println!(
                "turns {k} clients run {}: {count} turns in {:.1} s = {tps:.0}/s, p50 {:.2} ms; minimal server {:.0}/s",
                run + 1,
                elapsed.as_secs_f64(),
                median(&lat),
                runs.get(&format!("mtps{k}"))
            );
        }
    }
    let mut rows = Vec::new();
    let t10 = runs.get("tps10");
    for &k in counts {
        let g = |p: &str| runs.get(&format!("{p}{k}"));
        rows.push(row(
            format!("{k} client(s): turns/s ({} frames per turn)", g("frames")),
            format!("{:.0}", g("tps")),
            format!("{:.0} minimal server, same frames", g("mtps")),
            Some(g("tps") / g("mtps")),
            if k == 50 { "50 ÷ 10 clients ≥ 1" } else { "" },
        ));
        rows.push(row(
            format!("{k} client(s): turn latency p50 (p99 {})", fmt_ms(g("p99_"))),
            fmt_ms(g("p50_")),
            format!("{} minimal server", fmt_ms(g("mp50_"))),
            Some(g("p50_") / g("mp50_")),
            "",
        ));
        rows.push(row(format!("{k} client(s): fsyncs per turn"), format!("{:.2}", g("fsync")), "–".into(), None, if k == 1 { "≤ 3" } else { "" }));
    }
    if counts.contains(&50) && counts.contains(&10) {
        let t50 = runs.get("tps50");
        rows.push(row("turns/s with 50 clients ÷ with 10", format!("{t50:.0}"), format!("{t10:.0} with 10 clients"), Some(t50 / t10), "≥ 1"));
    }
    print_table(&format!("turns (echo `/slow 0`, {seconds} s windows, awareness on, no residency limit; medians of {} run(s))", env.runs), &rows);
    Ok(())
}

// ---------------------------------------------------------------------------
// Fan-out
// ---------------------------------------------------------------------------

/// Subscriber connections counting the action frames they receive until
/// `stop`; returns the reader tasks (each yields its count).
fn count_frames(conns: Vec<Client>, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<u64>> {
    conns
        .into_iter()
        .map(|c| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let (_tx, mut rx) = c.ws.split();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match tokio::time::timeout(Duration::from_millis(100), rx.next()).await {
                        Ok(Some(Ok(WsMessage::Text(t)))) => {
                            if t.as_str().contains("\"method\":\"action\"") {
                                n += 1;
                            }
                        }
                        Ok(Some(Ok(_))) | Err(_) => {}
                        Ok(Some(Err(_))) | Ok(None) => break,
                    }
                }
                n
            })
        })
        .collect()
}

/// Runs turns on `producer` for `seconds` while `subs` count; returns
/// (envelopes delivered to the subscribers per second, turns).
async fn fanout_window(mut producer: Client, chat: String, subs: Vec<Client>, seconds: f64, text: &str) -> R<(f64, u64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let readers = count_frames(subs, stop.clone());
    let start = Instant::now();
    let mut turns = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        turns += 1;
        producer.turn(&chat, &turn_id(0, 1000 + turns), text, None).await?;
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed();
    let mut total = 0u64;
    for r in readers {
        total += r.await.map_err(|e| format!("subscriber task: {e}"))?;
    }
    Ok((total as f64 / elapsed.as_secs_f64(), turns))
}

/// The fan-out scenario: `subs` connections subscribed to one chat.
async fn fanout(env: &Env, subs: usize, seconds: f64) -> R<()> {
    let mut runs = Runs::default();
    // ~4 KB of streamed content per turn (the echo repeats the message).
    let text = format!("/slow 0 {}", "lorem ipsum dolor sit amet, ".repeat(146));
    for run in 0..env.runs {
        let data = env.fresh_dir("fanout")?;
        let aw = env.fresh_dir("aware")?;
        let work = data.with_extension("work");
        fs::create_dir_all(&work).map_err(|e| format!("could not create {}: {e}", work.display()))?;
        let mut d = Daemon::spawn(env, &data, &Awareness::On(aw), &[])?;
        d.wait_listening().await?;
        let mut producer = Client::open_init(&d.url, "producer").await?;
        let chat = producer.new_session("ahp-session:/fanout", &work).await?;
        // One turn recorded before the subscribers connect: its envelopes on
        // the chat's channel are what each subscriber receives per turn, and
        // what the minimal server broadcasts.
        let rec_id = turn_id(0, 1);
        let mut seen = Vec::new();
        producer.turn(&chat, &rec_id, &text, Some(&mut seen)).await?;
        let on_chat = format!("\"channel\":\"{chat}\"");
        let recorded: Vec<String> = seen.into_iter().filter(|f| f.contains("\"method\":\"action\"") && f.contains(&on_chat)).collect();
        let mut subscribers = Vec::new();
        for i in 0..subs {
            let mut c = Client::open_init(&d.url, &format!("sub-{i}")).await?;
            c.request("subscribe", json!({"channel": chat})).await?;
            subscribers.push(c);
        }
        let streamed: usize = recorded.iter().map(String::len).sum();
        let (rate, turns) = fanout_window(producer, chat, subscribers, seconds, &text).await?;
        drop(d);
        runs.put("rate", rate);
        runs.put("frames", recorded.len() as f64);
        runs.put("bytes", streamed as f64);
        // Baseline: the minimal broadcast server, the same frames to the
        // same number of connections.
        let (btx, _) = tokio::sync::broadcast::channel(8192);
        let canned = Arc::new(Canned { turn_frames: recorded, turn_id: rec_id, broadcast: Some(btx), ..Canned::default() });
        let (url, task) = mini_server(canned).await?;
        let mut mprod = Client::open(&url).await?;
        mprod.request("subscribe", json!({"channel": "ahp-chat:/mini"})).await?;
        let mut msubs = Vec::new();
        for _ in 0..subs {
            let mut c = Client::open(&url).await?;
            c.request("subscribe", json!({"channel": "ahp-chat:/mini"})).await?;
            msubs.push(c);
        }
        let (mrate, mturns) = fanout_window(mprod, "ahp-chat:/mini".into(), msubs, seconds, &text).await?;
        task.abort();
        runs.put("mrate", mrate);
        println!("fanout run {}: daemon {rate:.0} envelopes/s ({turns} turns), minimal server {mrate:.0}/s ({mturns} turns)", run + 1);
    }
    let rows = vec![
        row(
            format!("{subs} subscribers: envelopes delivered/s ({} per turn, {} per turn per subscriber)", runs.get("frames"), fmt_bytes(runs.get("bytes"))),
            format!("{:.0}", runs.get("rate")),
            format!("{:.0} minimal broadcast server", runs.get("mrate")),
            Some(runs.get("rate") / runs.get("mrate")),
            "≥ 0.5",
        ),
    ];
    print_table(&format!("fanout ({seconds} s windows, awareness on; medians of {} run(s))", env.runs), &rows);
    Ok(())
}

// ---------------------------------------------------------------------------
// Wake
// ---------------------------------------------------------------------------

/// On a fresh connection: subscribe to `chat`, then one turn; returns
/// (subscribe ms, turn ms). The connection is closed after, so no
/// subscription keeps the session resident.
async fn sub_and_turn(url: &str, chat: &str, id: &str) -> R<(f64, f64)> {
    let mut c = Client::open_init(url, "waker").await?;
    let t = Instant::now();
    c.request("subscribe", json!({"channel": chat})).await?;
    let sub = ms(t.elapsed());
    let turn = ms(c.turn(chat, id, TURN_TEXT, None).await?);
    Ok((sub, turn))
}

/// The wake scenario: two sessions, residency limit 1, used in turn: each
/// round wakes the evicted one (subscribe + turn), then does the same again
/// on it while resident (the baseline).
async fn wake(env: &Env, rounds: usize) -> R<()> {
    let mut runs = Runs::default();
    for run in 0..env.runs {
        let data = env.fresh_dir("wake")?;
        let aw = env.fresh_dir("aware")?;
        let work = data.with_extension("work");
        fs::create_dir_all(&work).map_err(|e| format!("could not create {}: {e}", work.display()))?;
        let mut d = Daemon::spawn(env, &data, &Awareness::On(aw), &["--residency-limit", "1"])?;
        d.wait_listening().await?;
        let mut chats = Vec::new();
        for s in 0..2 {
            let mut c = Client::open_init(&d.url, "maker").await?;
            let chat = c.new_session(&format!("ahp-session:/wake-{s}"), &work).await?;
            c.turn(&chat, &turn_id(s, 1), TURN_TEXT, None).await?;
            chats.push(chat);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let ev0 = d.metric("ahpd_residency_evictions_total").await?;
        let wk0 = d.metric("ahpd_session_wakes_total").await?;
        let (mut ws, mut wt, mut rs, mut rt) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 0..rounds {
            // Session 0 was made first and evicted when 1 became resident.
            let chat = &chats[r % 2];
            let (s1, t1) = sub_and_turn(&d.url, chat, &turn_id(r, 10)).await?;
            let (s2, t2) = sub_and_turn(&d.url, chat, &turn_id(r, 11)).await?;
            ws.push(s1);
            wt.push(t1);
            rs.push(s2);
            rt.push(t2);
            // Let the connection's close reach the host before the other
            // session wakes and this one is evicted.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ev = d.metric("ahpd_residency_evictions_total").await? - ev0;
        let wk = d.metric("ahpd_session_wakes_total").await? - wk0;
        drop(d);
        runs.put("wsub", median(&ws));
        runs.put("wturn", median(&wt));
        runs.put("rsub", median(&rs));
        runs.put("rturn", median(&rt));
        runs.put("wboth", median(&ws.iter().zip(&wt).map(|(a, b)| a + b).collect::<Vec<_>>()));
        runs.put("rboth", median(&rs.iter().zip(&rt).map(|(a, b)| a + b).collect::<Vec<_>>()));
        runs.put("evictions", ev);
        runs.put("wakes", wk);
        println!("wake run {}: {rounds} rounds, {ev} evictions and {wk} wakes counted by /metrics", run + 1);
    }
    let g = |k: &str| runs.get(k);
    let rows = vec![
        row("subscribe to an evicted session's chat", fmt_ms(g("wsub")), format!("{} resident", fmt_ms(g("rsub"))), Some(g("wsub") / g("rsub")), ""),
        row("then its first turn (dispatch → complete)", fmt_ms(g("wturn")), format!("{} resident", fmt_ms(g("rturn"))), Some(g("wturn") / g("rturn")), ""),
        row("time to wake: subscribe + turn", fmt_ms(g("wboth")), format!("{} resident", fmt_ms(g("rboth"))), Some(g("wboth") / g("rboth")), ""),
        row("evictions / wakes counted (per run)", format!("{:.0} / {:.0}", g("evictions"), g("wakes")), format!("{rounds} rounds"), None, ""),
    ];
    print_table(&format!("wake (residency limit 1, two sessions used in turn; medians of {} run(s))", env.runs), &rows);
    Ok(())
}

// ---------------------------------------------------------------------------
// Peers
// ---------------------------------------------------------------------------

/// One daemon with `live` sessions in one folder, each with one turn;
/// returns (RSS per session in bytes, session snapshot bytes, chat snapshot
/// bytes, fsyncs per session made).
async fn peers_once(env: &Env, live: usize, awareness: bool) -> R<(f64, f64, f64, f64)> {
    let data = env.fresh_dir("peers")?;
    let work = data.with_extension("work");
    fs::create_dir_all(&work).map_err(|e| format!("could not create {}: {e}", work.display()))?;
    let aw = if awareness { Awareness::On(env.fresh_dir("aware")?) } else { Awareness::Off };
    let mut d = Daemon::spawn(env, &data, &aw, &["--residency-limit", "0"])?;
    d.wait_listening().await?;
    let conns_n = 10.min(live.max(1));
    let mut conns = Vec::new();
    for i in 0..conns_n {
        conns.push(Client::open_init(&d.url, &format!("peer-{i}")).await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss0 = d.rss()? as f64;
    let f0 = d.metric("ahpd_fsyncs_total").await?;
    for s in 0..live {
        let c = &mut conns[s % conns_n];
        let chat = c.new_session(&format!("ahp-session:/peer-{s:04}"), &work).await?;
        c.turn(&chat, &turn_id(s, 1), TURN_TEXT, None).await?;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let rss1 = d.rss()? as f64;
    let f1 = d.metric("ahpd_fsyncs_total").await?;
    let mut c = Client::open_init(&d.url, "snapshot").await?;
    let snap = c.request_raw("subscribe", json!({"channel": "ahp-session:/peer-0000"})).await?;
    let chat = serde_json::from_str::<Value>(&snap)
        .ok()
        .and_then(|v| v["result"]["snapshot"]["state"]["defaultChat"].as_str().map(str::to_owned))
        .ok_or("no default chat in the peer's snapshot")?;
    let chat_snap = c.request_raw("subscribe", json!({"channel": chat})).await?.len() as f64;
    drop(c);
    drop(conns);
    drop(d);
    Ok(((rss1 - rss0) / live.max(1) as f64, snap.len() as f64, chat_snap, (f1 - f0) / live.max(1) as f64))
}

/// The peers scenario: `live` live sessions in one folder, awareness on vs
/// off in the same run.
async fn peers(env: &Env, live: usize) -> R<()> {
    let mut runs = Runs::default();
    for run in 0..env.runs {
        let (on_rss, on_snap, on_chat, on_f) = peers_once(env, live, true).await?;
        let (off_rss, off_snap, off_chat, off_f) = peers_once(env, live, false).await?;
        for (k, v) in [("onrss", on_rss), ("onsnap", on_snap), ("onchat", on_chat), ("onf", on_f), ("offrss", off_rss), ("offsnap", off_snap), ("offchat", off_chat), ("offf", off_f)] {
            runs.put(k, v);
        }
        println!("peers run {}: awareness on {} per session, off {}", run + 1, fmt_bytes(on_rss), fmt_bytes(off_rss));
    }
    let g = |k: &str| runs.get(k);
    let rows = vec![
        row(format!("RSS per resident session, {live} live in one folder"), fmt_bytes(g("onrss")), format!("{} awareness off", fmt_bytes(g("offrss"))), Some(g("onrss") / g("offrss")), "≤ 100 KiB"),
        row("one session's snapshot (subscribe reply)", fmt_bytes(g("onsnap")), format!("{} awareness off", fmt_bytes(g("offsnap"))), Some(g("onsnap") / g("offsnap")), ""),
        row("its default chat's snapshot", fmt_bytes(g("onchat")), format!("{} awareness off", fmt_bytes(g("offchat"))), Some(g("onchat") / g("offchat")), ""),
        row("fsyncs per session made (create + one turn)", format!("{:.1}", g("onf")), format!("{:.1} awareness off", g("offf")), Some(g("onf") / g("offf")), ""),
    ];
    print_table(&format!("peers ({live} live sessions in one folder; medians of {} run(s))", env.runs), &rows);
    Ok(())
}

// ---------------------------------------------------------------------------
// Soak (issue 25): hostile phases, one well-behaved client measured throughout
// ---------------------------------------------------------------------------

/// The soak scenario's sizes (see the command line's `soak` flags).
struct SoakOpts {
    rounds: usize,
    turns: usize,
    message_bytes: usize,
    stuck: usize,
    stuck_rounds: usize,
    flood_rate: u64,
    flood: Duration,
    baseline: Duration,
    settle: Duration,
    /// More arguments for the daemon's `serve`.
    daemon_args: Vec<String>,
    /// Print the steady client's probes slower than this (`--trace-slow-ms`).
    trace_slow: Option<Duration>,
}

/// The soak's phases, in order; the steady client's probes and the RSS
/// samples are tagged with the phase running when they were taken.
const SOAK_PHASES: [&str; 5] = ["baseline", "(a) big turns", "(b) clients that never read", "(c) frame flood", "after"];

/// One probe of the steady client: a ping (or, now and then, a small turn).
struct Probe {
    phase: usize,
    ms: f64,
    ok: bool,
    turn: bool,
}

/// What the steady client and the RSS sampler share with the phases.
struct Watch {
    phase: std::sync::atomic::AtomicUsize,
    stop: AtomicBool,
    probes: Mutex<Vec<Probe>>,
    errors: Mutex<Vec<String>>,
    /// Peak `VmRSS` seen per phase, in bytes.
    peak: Mutex<[u64; SOAK_PHASES.len()]>,
    /// Probes slower than this are printed with their monotonic times.
    trace_slow: Option<Duration>,
}

impl Watch {
    fn phase(&self) -> usize {
        self.phase.load(Ordering::Relaxed)
    }
}

/// The well-behaved client: its own session, a ping every 10 ms (under the
/// default 200 frames/s), and every 100th probe a small turn; every
/// failure counted, nothing retried. Ends at `stop` or when its connection
/// is gone.
async fn steady_client(url: String, folder: PathBuf, watch: Arc<Watch>) {
    let run = async {
        let mut c = Client::open_init(&url, "steady").await?;
        let chat = c.new_session("ahp-session:/soak-steady", &folder).await?;
        let mut n = 0u64;
        while !watch.stop.load(Ordering::Relaxed) {
            n += 1;
            let phase = watch.phase();
            let turn = n % 100 == 0;
            let t = Instant::now();
            let r = if turn { c.turn(&chat, &turn_id(9999, n), "/slow 0 steady", None).await.map(|_| ()) } else { c.ping().await.map(|_| ()) };
            let elapsed = t.elapsed();
            let took = ms(elapsed);
            if watch.trace_slow.is_some_and(|slow| elapsed > slow) {
                let end = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
                let end = end.tv_sec as f64 + end.tv_nsec as f64 * 1e-9;
                eprintln!("slow probe: phase {phase} turn {turn} start {:.6} end {end:.6} ms {took:.3}", end - elapsed.as_secs_f64());
            }
            let ok = r.is_ok();
            watch.probes.lock().map_err(|_| "poisoned")?.push(Probe { phase, ms: took, ok, turn });
            if let Err(e) = r {
                watch.errors.lock().map_err(|_| "poisoned")?.push(format!("{}: {e}", SOAK_PHASES[phase]));
                if e.contains("closed") || e.contains("ended") || e.contains("failed: IO") {
                    return Err::<(), String>(e);
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    };
    if let Err(e) = run.await {
        if let Ok(mut errors) = watch.errors.lock() {
            errors.push(format!("the steady client stopped: {e}"));
        }
    }
}

/// Samples the daemon's `VmRSS` every 20 ms into the running phase's peak.
async fn rss_sampler(pid: u32, watch: Arc<Watch>) {
    while !watch.stop.load(Ordering::Relaxed) {
        if let Some(rss) = rss_of(pid) {
            if let Ok(mut peak) = watch.peak.lock() {
                let p = watch.phase();
                peak[p] = peak[p].max(rss);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `VmRSS` of process `pid`, in bytes.
fn rss_of(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).map(|kb| kb * 1024)
}

/// One round on a fresh session: `turns` turns of `text`, then the session
/// disposed; with `stuck` > 0, that many clients subscribe to the session
/// and its chat first and never read a frame. Returns the stuck sockets
/// (the caller drops them once the round is over).
async fn soak_round(url: &str, folder: &Path, sid: &str, turns: usize, text: &str, stuck: usize, round: usize) -> R<Vec<Client>> {
    let mut c = Client::open_init(url, "turner").await?;
    let chat = c.new_session(sid, folder).await?;
    let mut stuck_clients = Vec::new();
    for i in 0..stuck {
        let mut s = Client::open(url).await?;
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": format!("stuck-{i}"),
            "initialSubscriptions": ["ahp-root://", sid, chat]}});
        s.send(init.to_string()).await?;
        stuck_clients.push(s);
    }
    for t in 0..turns {
        c.turn(&chat, &turn_id(round, t as u64), text, None).await?;
    }
    c.request("disposeSession", json!({"channel": sid})).await?;
    drop(c);
    Ok(stuck_clients)
}

/// The flood: one client sending `rate` pings a second for `length` (as
/// fast as it can when it falls behind), reading every answer. Returns
/// (frames sent, answered, refused with -32600, the close code and the
/// seconds after the flood's start it came at, if the daemon closed).
async fn flood(url: &str, rate: u64, length: Duration) -> R<(u64, u64, u64, Option<(u16, f64)>)> {
    let c = Client::open_init(url, "flood").await?;
    let (mut sink, mut stream) = c.ws.split();
    let start = Instant::now();
    let reader = tokio::spawn(async move {
        let (mut answered, mut refused, mut closed) = (0u64, 0u64, None);
        while let Some(Ok(m)) = stream.next().await {
            match m {
                WsMessage::Text(t) => {
                    if t.as_str().contains("\"error\"") {
                        refused += 1;
                    } else {
                        answered += 1;
                    }
                }
                WsMessage::Close(frame) => {
                    closed = Some((frame.map_or(1005, |f| u16::from(f.code)), start.elapsed().as_secs_f64()));
                    break;
                }
                _ => {}
            }
        }
        (answered, refused, closed)
    });
    let per_ms = (rate / 1000).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0u64;
    'flood: while start.elapsed() < length {
        tick.tick().await;
        for _ in 0..per_ms {
            sent += 1;
            let frame = json!({"jsonrpc": "2.0", "id": 1_000_000 + sent, "method": "ping", "params": {"channel": "ahp-root://"}}).to_string();
            if sink.feed(WsMessage::Text(frame.into())).await.is_err() {
                break 'flood;
            }
        }
        if sink.flush().await.is_err() {
            break;
        }
    }
    // Let the last answers (or the close) arrive, then hang up.
    let _ = sink.close().await;
    let (answered, refused, closed) = tokio::time::timeout(Duration::from_secs(5), reader).await.map_err(|_| "the flood's reader did not end".to_owned())?.map_err(|e| format!("flood reader: {e}"))?;
    Ok((sent, answered, refused, closed))
}

/// Lines of the daemon's log containing `needle`, and the log's size.
fn log_count(d: &Daemon, needle: &str) -> (usize, u64) {
    let text = fs::read_to_string(&d.log).unwrap_or_default();
    (text.lines().filter(|l| l.contains(needle)).count(), text.len() as u64)
}

/// The soak scenario (issue 25): the release daemon with its default
/// limits, one well-behaved client pinging throughout (its baseline first,
/// alone), then (a) rounds of big turns on sessions disposed after each,
/// (b) rounds with clients that subscribe and never read, (c) one client
/// flooding frames; RSS before, at its peak during, and after each phase.
async fn soak(env: &Env, o: &SoakOpts) -> R<()> {
    let data = env.fresh_dir("soak")?;
    let aw = env.fresh_dir("aware")?;
    let work = data.with_extension("work");
    fs::create_dir_all(&work).map_err(|e| format!("could not create {}: {e}", work.display()))?;
    // The defaults of a real host, said out loud (the other scenarios lift
    // the rate limits).
    let mut args = vec!["--limit-frames-per-second", "200", "--limit-frames-burst", "1000"];
    args.extend(o.daemon_args.iter().map(String::as_str));
    let mut d = Daemon::spawn(env, &data, &Awareness::On(aw), &args)?;
    d.wait_listening().await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let empty = d.rss()?;
    let watch = Arc::new(Watch {
        phase: std::sync::atomic::AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        probes: Mutex::new(Vec::new()),
        errors: Mutex::new(Vec::new()),
        peak: Mutex::new([0; SOAK_PHASES.len()]),
        trace_slow: o.trace_slow,
    });
    let sampler = tokio::spawn(rss_sampler(d.pid, Arc::clone(&watch)));
    // The steady client runs on a thread and runtime of its own, as a real
    // client is a process of its own: on the bench's shared runtime its
    // pings waited behind the bench's other clients decoding 900 KB
    // frames, and that wait was counted as the daemon's.
    let steady = {
        let (url, folder, watch) = (d.url.clone(), work.clone(), Arc::clone(&watch));
        let (done, ended) = tokio::sync::oneshot::channel::<()>();
        // Named, so that a scheduler trace (`perf sched`) tells its
        // waits from the bench's other threads'.
        let spawned = std::thread::Builder::new().name("soak-steady".into()).spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                rt.block_on(steady_client(url, folder, watch));
            }
            let _ = done.send(());
        });
        spawned.map_err(|e| format!("could not start the steady client's thread: {e}"))?;
        ended
    };
    tokio::time::sleep(o.baseline).await;
    let mut before = vec![d.rss()?];
    let mut after = Vec::new();
    let text = format!("/slow 0 {}", "x".repeat(o.message_bytes));
    let settle = |what: &'static str| {
        let d = &d;
        async move {
            tokio::time::sleep(o.settle).await;
            let rss = d.rss()?;
            println!("soak: {what} settled, RSS {}", fmt_bytes(rss as f64));
            Ok::<u64, String>(rss)
        }
    };
    println!("soak: empty daemon {}, with the steady client after its {:.0} s baseline {}", fmt_bytes(empty as f64), o.baseline.as_secs_f64(), fmt_bytes(before[0] as f64));

    // (a) Big turns, every session disposed after its round.
    watch.phase.store(1, Ordering::Relaxed);
    let started = Instant::now();
    for r in 0..o.rounds {
        let _ = soak_round(&d.url, &work, &format!("ahp-session:/soak-a-{r}"), o.turns, &text, 0, r).await?;
        println!("soak (a) round {}/{}: RSS {} ({:.1} s)", r + 1, o.rounds, fmt_bytes(d.rss()? as f64), started.elapsed().as_secs_f64());
    }
    after.push(settle("(a)").await?);

    // (b) Clients that subscribe and never read, beside the same turns.
    before.push(d.rss()?);
    watch.phase.store(2, Ordering::Relaxed);
    let (dropped0, _) = log_count(&d, "slow client dropped");
    for r in 0..o.stuck_rounds {
        let stuck = soak_round(&d.url, &work, &format!("ahp-session:/soak-b-{r}"), o.turns, &text, o.stuck, 1000 + r).await?;
        drop(stuck);
        println!("soak (b) round {}/{}: RSS {}", r + 1, o.stuck_rounds, fmt_bytes(d.rss()? as f64));
    }
    let (dropped1, _) = log_count(&d, "slow client dropped");
    after.push(settle("(b)").await?);

    // (c) One client flooding frames at the default rate limit.
    before.push(d.rss()?);
    watch.phase.store(3, Ordering::Relaxed);
    let (rate_lines0, log0) = log_count(&d, "limit.rate");
    let flood_started = Instant::now();
    let (sent, answered, refused, closed) = flood(&d.url, o.flood_rate, o.flood).await?;
    let flood_secs = flood_started.elapsed().as_secs_f64();
    let (rate_lines1, log1) = log_count(&d, "limit.rate");
    after.push(settle("(c)").await?);

    // After: the steady client alone again.
    watch.phase.store(4, Ordering::Relaxed);
    tokio::time::sleep(o.baseline).await;
    let last = d.rss()?;
    watch.stop.store(true, Ordering::Relaxed);
    let _ = steady.await;
    let _ = sampler.await;
    drop(d);

    let probes = watch.probes.lock().map_err(|_| "poisoned")?;
    let errors = watch.errors.lock().map_err(|_| "poisoned")?.clone();
    let peak = *watch.peak.lock().map_err(|_| "poisoned")?;
    let pings = |p: usize| probes.iter().filter(|x| x.phase == p && x.ok && !x.turn).map(|x| x.ms).collect::<Vec<_>>();
    let fails = |p: usize| probes.iter().filter(|x| x.phase == p && !x.ok).count();
    let count = |p: usize| probes.iter().filter(|x| x.phase == p).count();
    let base = pings(0);
    let (b50, b99) = (median(&base), percentile(&base, 0.99));
    let mib = |b: u64| fmt_bytes(b as f64);
    let goal_rss = |b: u64| ((b as f64 * 1.5).max(b as f64 + 64.0 * 1024.0 * 1024.0)) as u64;
    let mut rows = vec![
        row("empty daemon: RSS", mib(empty), "–".into(), None, ""),
        row(format!("steady client alone: ping p50 (p99 {}, {} probes)", fmt_ms(b99), count(0)), fmt_ms(b50), "–".into(), None, ""),
    ];
    for (i, name) in SOAK_PHASES.iter().enumerate().skip(1) {
        let p = pings(i);
        rows.push(row(
            format!("{name}: steady ping p99 (p50 {}, {} probes)", fmt_ms(median(&p)), count(i)),
            fmt_ms(percentile(&p, 0.99)),
            format!("{} p99 alone", fmt_ms(b99)),
            Some(percentile(&p, 0.99) / b99),
            "≤ 3×",
        ));
        rows.push(row(format!("{name}: steady client errors"), format!("{}", fails(i)), "–".into(), None, "0"));
        if i <= 3 {
            rows.push(row(format!("{name}: RSS peak during"), mib(peak[i]), format!("{} before", mib(before[i - 1])), Some(peak[i] as f64 / before[i - 1] as f64), ""));
            rows.push(row(
                format!("{name}: RSS after ({:.0} s settle)", o.settle.as_secs_f64()),
                mib(after[i - 1]),
                format!("{} before", mib(before[i - 1])),
                Some(after[i - 1] as f64 / before[i - 1] as f64),
                "",
            ));
        }
    }
    rows.push(row(
        "(b): clients dropped at outgoing_buffer_max_bytes",
        format!("{}", dropped1.saturating_sub(dropped0)),
        format!("{} stuck clients", o.stuck * o.stuck_rounds),
        None,
        "",
    ));
    rows.push(row(
        format!("(c): frames sent in {flood_secs:.1} s / answered / refused"),
        format!("{sent} / {answered} / {refused}"),
        format!("{} a second asked", o.flood_rate),
        None,
        "",
    ));
    rows.push(row(
        "(c): the flooder closed with",
        closed.map_or("not closed".to_owned(), |(code, at)| format!("{code} after {at:.1} s")),
        "–".into(),
        None,
        "1008",
    ));
    rows.push(row(
        "(c): log written during the flood",
        format!("{} in {} `limit.rate` lines", fmt_bytes(log1.saturating_sub(log0) as f64), rate_lines1.saturating_sub(rate_lines0)),
        format!("{refused} frames refused"),
        None,
        "a line per interval",
    ));
    let verdict = if last <= goal_rss(before[0]) { "met" } else { "NOT met" };
    rows.push(row(
        "RSS after every phase (only the steady client left)",
        mib(last),
        format!("{} before the phases", mib(before[0])),
        Some(last as f64 / before[0] as f64),
        &format!("≤ {} ({verdict})", mib(goal_rss(before[0]))),
    ));
    print_table(
        &format!(
            "soak ({} rounds × {} turns of {} KiB, then {} rounds with {} clients that never read, then {} frames/s for {:.0} s; default limits; one steady client throughout)",
            o.rounds,
            o.turns,
            o.message_bytes >> 10,
            o.stuck_rounds,
            o.stuck,
            o.flood_rate,
            o.flood.as_secs_f64()
        ),
        &rows,
    );
    for e in errors.iter().take(10) {
        println!("steady client error: {e}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Files (issue 48)
// ---------------------------------------------------------------------------

/// Sizes of the files scenario.
struct FilesOpts {
    /// Bytes of each file read (one of random bytes, one of text).
    file_bytes: usize,
    /// Timed `resourceRead`s per file per run (after one untimed).
    reads: usize,
    /// Files written while a watch looks on.
    writes: usize,
    /// Pause between two of those writes.
    gap: Duration,
    /// Files of the generated repository (besides its ignored subtree).
    repo_files: usize,
    /// Timed `completions` calls after the first.
    queries: usize,
}

/// Names the generated repository's paths are made of.
const WORDS: &[&str] = &[
    "parser", "lexer", "render", "widget", "socket", "buffer", "config", "driver", "engine", "format", "handle", "layout", "loader",
    "module", "object", "output", "packet", "reader", "record", "schema", "server", "stream", "thread", "vector", "writer", "cache",
    "event", "index", "query", "route", "store", "token", "graph", "shell", "actor", "timer", "frame",
];

/// A small deterministic generator (xorshift64*): the repository and the
/// queries are the same in every run and on every machine.
struct Rng(u64);

impl Rng {
    /// The next number.
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number below `n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The relative path of the repository's file `i`: nested folders
/// (`src/<word><n>/<word>_<leaf>/`), 200 files a folder.
fn repo_path(i: usize) -> String {
    let leaf = i / 200;
    let w = WORDS.len();
    let (a, b, c, d) = (WORDS[leaf % w], WORDS[(leaf / w) % w], WORDS[(i * 7) % w], WORDS[(i / 3 + leaf) % w]);
    let ext = ["rs", "ts", "md", "json", "py"][i % 5];
    format!("src/{a}{}/{b}_{leaf}/{c}_{d}_{i}.{ext}", leaf % 7)
}

/// Writes the repository of `n` files under `repo`, with `target/` (another
/// `n / 10` files) excluded by its `.gitignore`; two threads.
fn generate_repo(repo: &Path, n: usize) -> R<()> {
    fs::create_dir_all(repo).map_err(|e| format!("could not create {}: {e}", repo.display()))?;
    fs::write(repo.join(".gitignore"), "/target/\n*.tmp\n").map_err(|e| format!("could not write the .gitignore: {e}"))?;
    let ignored = n / 10;
    let failed: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|s| {
        for t in 0..2usize {
            let failed = &failed;
            s.spawn(move || {
                let result = (|| -> R<()> {
                    for i in (t..n + ignored).step_by(2) {
                        let rel = if i < n { repo_path(i) } else { format!("target/debug/build/{}", repo_path(i - n)) };
                        let path = repo.join(&rel);
                        if i % 200 < 2 {
                            if let Some(dir) = path.parent() {
                                fs::create_dir_all(dir).map_err(|e| format!("could not create {}: {e}", dir.display()))?;
                            }
                        }
                        fs::write(&path, format!("// {rel}\n")).map_err(|e| format!("could not write {}: {e}", path.display()))?;
                    }
                    Ok(())
                })();
                if let Err(e) = result {
                    if let Ok(mut f) = failed.lock() {
                        f.get_or_insert(e);
                    }
                }
            });
        }
    });
    match failed.into_inner().ok().flatten() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `count` queries of 3-6 characters, each a subsequence of a file name of
/// the repository (as a user types part of a name they remember).
fn queries(n_files: usize, count: usize) -> Vec<String> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..count)
        .map(|_| {
            let path = repo_path(rng.below(n_files));
            let name: Vec<char> = path.rsplit('/').next().unwrap_or(&path).chars().filter(|c| c.is_ascii_alphabetic()).collect();
            let len = 3 + rng.below(4);
            let mut picks: Vec<usize> = Vec::new();
            while picks.len() < len.min(name.len()) {
                let k = rng.below(name.len());
                if !picks.contains(&k) {
                    picks.push(k);
                }
            }
            picks.sort_unstable();
            picks.into_iter().map(|k| name[k]).collect()
        })
        .collect()
}

/// The `rg --files` half of the completions baseline: the repository's
/// files, relative to it, with the daemon's walker settings (`.gitignore`
/// also outside git, `.ignore`, hidden files skipped, links not followed,
/// two threads), sorted.
fn walk_files(root: &Path) -> Vec<String> {
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    ignore::WalkBuilder::new(root)
        .hidden(true)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .threads(2)
        .build_parallel()
        .run(|| {
            let tx = tx.clone();
            Box::new(move |entry| {
                if let Ok(entry) = entry {
                    if entry.file_type().is_some_and(|t| t.is_file()) {
                        if let Some(rel) = entry.path().strip_prefix(root).ok().and_then(Path::to_str) {
                            let _ = tx.send(rel.to_owned());
                        }
                    }
                }
                ignore::WalkState::Continue
            })
        });
    drop(tx);
    let mut files: Vec<String> = rx.into_iter().collect();
    files.sort_unstable();
    files
}

/// The `fzf -f QUERY` half: `files` scored against `query` with
/// `nucleo-matcher` (path matching, smart case), the best `limit` sorted
/// (ties by path), as absolute paths under `root`.
fn filter_files(root: &str, files: &[String], query: &str, limit: usize) -> Vec<String> {
    use nucleo_matcher::pattern::{CaseMatching, Normalization, Pattern};
    let mut matcher = nucleo_matcher::Matcher::new(nucleo_matcher::Config::DEFAULT.match_paths());
    let pattern = Pattern::parse(query, CaseMatching::Smart, Normalization::Smart);
    let mut buf = Vec::new();
    let mut found: Vec<(i64, &str)> = files
        .iter()
        .filter_map(|rel| pattern.score(nucleo_matcher::Utf32Str::new(rel, &mut buf), &mut matcher).map(|s| (-i64::from(s), rel.as_str())))
        .collect();
    if limit < found.len() {
        found.select_nth_unstable(limit);
        found.truncate(limit);
    }
    found.sort_unstable();
    found.into_iter().map(|(_, rel)| format!("{root}/{rel}")).collect()
}

/// Connects with no message or frame size limit (a 10 MB file's reply is
/// one 14 MB frame) and says `initialize`.
async fn open_big(url: &str, client_id: &str) -> R<Client> {
    use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
    let config = WebSocketConfig::default().max_message_size(None).max_frame_size(None);
    let (ws, _) = tokio::time::timeout(STEP, tokio_tungstenite::connect_async_with_config(url, Some(config), false))
        .await
        .map_err(|_| format!("connecting to {url} timed out"))?
        .map_err(|e| format!("could not connect to {url}: {e}"))?;
    let mut c = Client { ws, next_id: 1, next_seq: 1 };
    c.request("initialize", json!({"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": client_id})).await?;
    Ok(c)
}

/// Whether the first or last 96 bytes of `text` hold `needle` (where a
/// reply's id and `result`/`error` sit, without scanning a 14 MB frame).
fn ends_hold(text: &str, needle: &str) -> bool {
    let b = text.as_bytes();
    let n = needle.as_bytes();
    let head = &b[..b.len().min(96)];
    let tail = &b[b.len().saturating_sub(96)..];
    head.windows(n.len()).any(|w| w == n) || tail.windows(n.len()).any(|w| w == n)
}

/// One `resourceRead` of `uri`, timed from the send to the whole reply
/// frame received; (ms, reply frame).
async fn timed_read(c: &mut Client, uri: &str) -> R<(f64, String)> {
    let params = ahp_types::commands::ResourceReadParams { channel: String::new(), meta: None, uri: uri.to_owned(), encoding: None };
    let params = serde_json::to_value(params).map_err(|e| format!("could not encode resourceRead: {e}"))?;
    let (frame, id) = c.request_frame("resourceRead", &params);
    let t = Instant::now();
    c.send(frame).await?;
    let (id_a, id_b) = (format!("\"id\":{id},"), format!("\"id\":{id}}}"));
    loop {
        let text = c.next_text().await?;
        if ends_hold(&text, &id_a) || ends_hold(&text, &id_b) {
            let took = ms(t.elapsed());
            if !ends_hold(&text, "\"result\"") && text.len() < 4096 {
                return Err(format!("resourceRead of {uri} failed: {}", clip(&text)));
            }
            return Ok((took, text));
        }
    }
}

/// The reply's `result` checked once: its encoding is `want` and its data
/// decodes to `bytes` bytes (base64) or is `bytes` bytes of text.
fn check_read(reply: &str, want: &str, bytes: usize) -> R<()> {
    let v: Value = serde_json::from_str(reply).map_err(|e| format!("unparsable resourceRead reply: {e}"))?;
    let r = &v["result"];
    let (enc, data) = (r["encoding"].as_str().unwrap_or(""), r["data"].as_str().unwrap_or(""));
    let len = if enc == "base64" { data.len() / 4 * 3 - data.bytes().rev().take_while(|&c| c == b'=').count() } else { data.len() };
    if enc != want || len != bytes {
        return Err(format!("resourceRead answered {enc} of {len} bytes, expected {want} of {bytes}: {}", clip(reply)));
    }
    Ok(())
}

/// The `resourceRead` baseline: a minimal tokio-tungstenite server that
/// answers a `resourceRead` frame by reading the file from disk, taking it
/// as UTF-8 text or else base64-encoding it (what the daemon's answer does),
/// and sending the JSON-RPC result frame; any other request gets `null`.
async fn mini_read_server() -> R<(String, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| format!("minimal server bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("minimal server address: {e}"))?;
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let Ok(ws) = tokio_tungstenite::accept_async(stream).await else { return };
                let (mut tx, mut rx) = ws.split();
                while let Some(Ok(msg)) = rx.next().await {
                    let WsMessage::Text(t) = msg else { continue };
                    let Ok(req) = serde_json::from_str::<MiniReq>(t.as_str()) else { continue };
                    let Some(id) = req.id else { continue };
                    let reply = if req.method == "resourceRead" {
                        let uri = req.params["uri"].as_str().unwrap_or("");
                        let data = ahpd_core::files::path::parse_file_uri(uri).ok().and_then(|p| fs::read(p).ok()).unwrap_or_default();
                        let result = match String::from_utf8(data) {
                            Ok(text) => ahp_types::commands::ResourceReadResult { data: text, encoding: ahp_types::commands::ContentEncoding::Utf8, content_type: None },
                            Err(e) => {
                                use base64::Engine as _;
                                let data = base64::engine::general_purpose::STANDARD.encode(e.as_bytes());
                                ahp_types::commands::ResourceReadResult { data, encoding: ahp_types::commands::ContentEncoding::Base64, content_type: None }
                            }
                        };
                        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{}}}", serde_json::to_string(&result).unwrap_or_default())
                    } else {
                        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":null}}")
                    };
                    if tx.send(WsMessage::Text(reply.into())).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok((format!("ws://{addr}/"), task))
}

/// Pings on their own connection, one every 2 ms after the last answered,
/// until `stop` (or `count` answered); the latencies in ms.
fn pinger(mut c: Client, stop: Arc<AtomicBool>, count: usize) -> tokio::task::JoinHandle<R<Vec<f64>>> {
    tokio::spawn(async move {
        let mut lat = Vec::new();
        while !stop.load(Ordering::Relaxed) && lat.len() < count {
            lat.push(ms(c.ping().await?));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(lat)
    })
}

/// Where a name the watch benchmark wrote first arrived: (index → instant).
type Arrivals = Arc<Mutex<HashMap<usize, Instant>>>;

/// The index `i` of every `bench-watch-<tag>-<i>.txt` in `text`.
fn watch_names(text: &str, tag: &str) -> Vec<usize> {
    let prefix = format!("bench-watch-{tag}-");
    text.match_indices(&prefix)
        .filter_map(|(at, _)| {
            let rest = &text[at + prefix.len()..];
            let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
        .collect()
}

/// Records the first arrival of each index in `names`.
fn arrived(arrivals: &Arrivals, names: Vec<usize>, at: Instant) {
    if let Ok(mut m) = arrivals.lock() {
        for i in names {
            m.entry(i).or_insert(at);
        }
    }
}

/// Latencies (ms) from each write to its first arrival, and how many never
/// arrived.
fn watch_latencies(written: &[Instant], arrivals: &Arrivals) -> (Vec<f64>, usize) {
    let m = arrivals.lock().map(|m| m.clone()).unwrap_or_default();
    let mut lat = Vec::new();
    let mut lost = 0;
    for (i, w) in written.iter().enumerate() {
        match m.get(&i) {
            Some(at) => lat.push(ms(at.saturating_duration_since(*w))),
            None => lost += 1,
        }
    }
    (lat, lost)
}

/// The files scenario: `resourceRead` throughput, watch latency and
/// `completions` over a big repository, each beside its baseline.
async fn files(env: &Env, o: &FilesOpts) -> R<()> {
    let mut runs = Runs::default();
    // The workspace, made once: the read files, the watched folder, the repository.
    let ws = env.fresh_dir("files")?;
    fs::create_dir_all(ws.join("proj")).map_err(|e| format!("could not create the session folder: {e}"))?;
    let proj = ws.join("proj").canonicalize().map_err(|e| format!("could not resolve the session folder: {e}"))?;
    let mut random = vec![0u8; o.file_bytes];
    getrandom::fill(&mut random).map_err(|e| format!("no OS randomness: {e}"))?;
    fs::write(proj.join("random.bin"), &random).map_err(|e| format!("could not write random.bin: {e}"))?;
    drop(random);
    let mut text = String::with_capacity(o.file_bytes + 100);
    let mut i = 0usize;
    while text.len() < o.file_bytes {
        let w = WORDS[i % WORDS.len()];
        text.push_str(&format!("    let {w}_{i} = \"{w}\\t{i}\"; // {} line {i}\n", WORDS[(i * 7) % WORDS.len()]));
        i += 1;
    }
    text.truncate(o.file_bytes);
    fs::write(proj.join("text.txt"), &text).map_err(|e| format!("could not write text.txt: {e}"))?;
    drop(text);
    let repo = ws.join("repo");
    let t = Instant::now();
    generate_repo(&repo, o.repo_files)?;
    let repo = repo.canonicalize().map_err(|e| format!("could not resolve the repository: {e}"))?;
    println!("files: {} and {} of text written; repository of {} files (+{} ignored) in {:.1} s", fmt_bytes(o.file_bytes as f64), fmt_bytes(o.file_bytes as f64), o.repo_files, o.repo_files / 10, t.elapsed().as_secs_f64());
    let repo_str = repo.to_str().ok_or("a temp path is not UTF-8")?.to_owned();
    let uri_of = |p: &Path| ahpd_core::git::uri_of_path(&p.to_string_lossy());
    let reads = [("random", uri_of(&proj.join("random.bin")), "base64"), ("text", uri_of(&proj.join("text.txt")), "utf-8")];
    let qs = queries(o.repo_files, o.queries + 1);
    let limit = ahpd_core::files::FilesConfig::default().completions_max;
    let mib = o.file_bytes as f64 / (1024.0 * 1024.0);

    for run in 0..env.runs {
        let data = env.fresh_dir("filesd")?;
        let aw = env.fresh_dir("aware")?;
        let mut d = Daemon::spawn(env, &data, &Awareness::On(aw), &[])?;
        d.wait_listening().await?;
        let mut c = open_big(&d.url, "files").await?;
        c.new_session(&format!("ahp-session:/files-{run}"), &proj).await?;

        // 1. resourceRead through the daemon, then the minimal server.
        let (mini_url, mini_task) = mini_read_server().await?;
        let mut m = open_big(&mini_url, "mini").await?;
        for (name, uri, enc) in &reads {
            let (_, first) = timed_read(&mut c, uri).await?;
            check_read(&first, enc, o.file_bytes)?;
            let (_, mfirst) = timed_read(&mut m, uri).await?;
            check_read(&mfirst, enc, o.file_bytes)?;
            runs.put(format!("{name}frame"), first.len() as f64);
            runs.put(format!("{name}mframe"), mfirst.len() as f64);
            drop((first, mfirst));
            // Alternated, so that both see the same machine.
            let (mut dt, mut mt) = (Vec::new(), Vec::new());
            for _ in 0..o.reads {
                dt.push(timed_read(&mut c, uri).await?.0);
                mt.push(timed_read(&mut m, uri).await?.0);
            }
            runs.put(format!("{name}rate"), mib / (median(&dt) / 1e3));
            runs.put(format!("{name}mrate"), mib / (median(&mt) / 1e3));
        }
        mini_task.abort();
        drop(m);

        // 2. A recursive watch on the session folder; the same writes seen
        // by an inotify watcher (the notify crate) in this process.
        let tag = format!("r{run}");
        let mut wc = Client::open_init(&d.url, "watcher").await?;
        let params = ahp_types::commands::CreateResourceWatchParams { channel: String::new(), meta: None, uri: uri_of(&proj), recursive: Some(true), excludes: None, includes: None };
        let created = wc.request("createResourceWatch", serde_json::to_value(params).map_err(|e| format!("could not encode createResourceWatch: {e}"))?).await?;
        let channel = created["channel"].as_str().ok_or("createResourceWatch answered no channel")?.to_owned();
        wc.request("subscribe", json!({"channel": channel})).await?;
        let (daemon_seen, local_seen): (Arrivals, Arrivals) = Default::default();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (seen, stop, tag) = (daemon_seen.clone(), stop.clone(), tag.clone());
            let (_tx, mut rx) = wc.ws.split();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(Some(Ok(WsMessage::Text(t)))) = tokio::time::timeout(Duration::from_millis(50), rx.next()).await {
                        let at = Instant::now();
                        if t.as_str().contains("resourceWatch/changed") {
                            arrived(&seen, watch_names(t.as_str(), &tag), at);
                        }
                    }
                }
                drop(_tx);
            })
        };
        let local = {
            let (seen, tag) = (local_seen.clone(), tag.clone());
            let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
                let at = Instant::now();
                if let Ok(ev) = ev {
                    for p in &ev.paths {
                        arrived(&seen, watch_names(&p.to_string_lossy(), &tag), at);
                    }
                }
            })
            .map_err(|e| format!("could not make the baseline watcher: {e}"))?;
            notify::Watcher::watch(&mut w, &proj, notify::RecursiveMode::Recursive).map_err(|e| format!("could not watch {}: {e}", proj.display()))?;
            w
        };
        let mut written = Vec::with_capacity(o.writes);
        for i in 0..o.writes {
            let path = proj.join(format!("bench-watch-{tag}-{i:05}.txt"));
            written.push(Instant::now());
            fs::write(&path, format!("write {i}\n")).map_err(|e| format!("could not write {}: {e}", path.display()))?;
            tokio::time::sleep(o.gap).await;
        }
        // Stragglers: up to 2 s for the last writes to arrive.
        let waited = Instant::now();
        while waited.elapsed() < Duration::from_secs(2) && daemon_seen.lock().map(|m| m.len()).unwrap_or(0) < o.writes {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.store(true, Ordering::Relaxed);
        let _ = reader.await;
        drop(local);
        let (lat, lost) = watch_latencies(&written, &daemon_seen);
        let (llat, llost) = watch_latencies(&written, &local_seen);
        runs.put("w50", percentile(&lat, 0.5));
        runs.put("w99", percentile(&lat, 0.99));
        runs.put("wlost", lost as f64);
        runs.put("l50", percentile(&llat, 0.5));
        runs.put("l99", percentile(&llat, 0.99));
        runs.put("llost", llost as f64);

        // 3. completions over the repository, with pings on another
        // connection alone, then while the completions run.
        let mut cc = Client::open_init(&d.url, "completer").await?;
        let chat = cc.new_session(&format!("ahp-session:/repo-{run}"), &repo).await?;
        let pc = Client::open_init(&d.url, "pinger").await?;
        let alone = pinger(pc, Arc::new(AtomicBool::new(false)), PINGS).await.map_err(|e| format!("ping task: {e}"))??;
        let pc = Client::open_init(&d.url, "pinger-2").await?;
        let stop = Arc::new(AtomicBool::new(false));
        let during = pinger(pc, stop.clone(), usize::MAX);
        let complete = |q: &str| {
            let text = format!("@{q}");
            let params = ahp_types::commands::CompletionsParams {
                channel: chat.clone(),
                meta: None,
                kind: ahp_types::commands::CompletionItemKind::UserMessage,
                offset: text.len() as i64,
                text,
            };
            serde_json::to_value(params).map_err(|e| format!("could not encode completions: {e}"))
        };
        let t = Instant::now();
        let first = cc.request("completions", complete(&qs[0])?).await?;
        let first_ms = ms(t.elapsed());
        let first_items = first["items"].as_array().map_or(0, Vec::len);
        let window = Instant::now();
        let mut later = Vec::with_capacity(o.queries);
        let mut items = 0usize;
        for q in &qs[1..] {
            let t = Instant::now();
            let r = cc.request("completions", complete(q)?).await?;
            later.push(ms(t.elapsed()));
            items += r["items"].as_array().map_or(0, Vec::len);
        }
        let window = window.elapsed();
        stop.store(true, Ordering::Relaxed);
        let during = during.await.map_err(|e| format!("ping task: {e}"))??;
        drop(d);
        if first_items == 0 || items == 0 {
            return Err(format!("completions found nothing (first call {first_items} items, later calls {items} in all)"));
        }
        runs.put("cfirst", first_ms);
        runs.put("c50", median(&later));
        runs.put("cwindow", window.as_secs_f64() * 1e3);
        runs.put("citems", items as f64 / later.len().max(1) as f64);
        runs.put("ping_alone99", percentile(&alone, 0.99));
        runs.put("ping_alone50", median(&alone));
        runs.put("ping_during99", percentile(&during, 0.99));
        runs.put("ping_during50", median(&during));
        runs.put("ping_during_n", during.len() as f64);

        // The completions baseline in this process: one walk, then the
        // filter per query.
        let t = Instant::now();
        let listed = walk_files(&repo);
        let walk_ms = ms(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(filter_files(&repo_str, &listed, &qs[0], limit));
        let bfirst = walk_ms + ms(t.elapsed());
        let mut filt = Vec::with_capacity(o.queries);
        for q in &qs[1..] {
            let t = Instant::now();
            std::hint::black_box(filter_files(&repo_str, &listed, q, limit));
            filt.push(ms(t.elapsed()));
        }
        // The daemon keeps a root's list for COMPLETE_FRESH (2 s), then walks
        // it again in the background while the old list answers: over the
        // later calls' window it makes about one walk per (2 s + a walk).
        let refresh_walks = (window.as_secs_f64() / (2.0 + walk_ms / 1e3)).floor();
        runs.put("bwalk", walk_ms);
        runs.put("bfiles", listed.len() as f64);
        runs.put("bfirst", bfirst);
        runs.put("bfilter", median(&filt));
        runs.put("bamort", walk_ms * refresh_walks / later.len().max(1) as f64);
        runs.put("brefresh", refresh_walks);
        println!(
            "files run {}: read {:.0} MiB/s random (minimal {:.0}), {:.0} text (minimal {:.0}); watch p50 {:.1} ms ({} lost; inotify {:.1} ms); completions first {:.0} ms, p50 {:.1} ms (walk {:.0} ms, filter {:.1} ms); ping p99 {:.2} alone, {:.2} during",
            run + 1,
            runs.0["randomrate"].last().copied().unwrap_or(f64::NAN),
            runs.0["randommrate"].last().copied().unwrap_or(f64::NAN),
            runs.0["textrate"].last().copied().unwrap_or(f64::NAN),
            runs.0["textmrate"].last().copied().unwrap_or(f64::NAN),
            percentile(&lat, 0.5),
            lost,
            percentile(&llat, 0.5),
            first_ms,
            median(&later),
            walk_ms,
            median(&filt),
            percentile(&alone, 0.99),
            percentile(&during, 0.99),
        );
    }
    let g = |k: &str| runs.get(k);
    let size = fmt_bytes(o.file_bytes as f64);
    let base_q = g("bfilter") + g("bamort");
    let rows = vec![
        row(
            format!("resourceRead {size} random bytes → base64 ({} frame), MiB/s of file", fmt_bytes(g("randomframe"))),
            format!("{:.0}", g("randomrate")),
            format!("{:.0} minimal server ({} frame)", g("randommrate"), fmt_bytes(g("randommframe"))),
            Some(g("randomrate") / g("randommrate")),
            "≥ 0.5×",
        ),
        row(
            format!("resourceRead {size} text → utf-8 ({} frame), MiB/s of file", fmt_bytes(g("textframe"))),
            format!("{:.0}", g("textrate")),
            format!("{:.0} minimal server ({} frame)", g("textmrate"), fmt_bytes(g("textmframe"))),
            Some(g("textrate") / g("textmrate")),
            "≥ 0.5×",
        ),
        row(
            format!("watch: write → resourceWatch/changed p50 ({} writes, {} ms apart; {:.0} lost)", o.writes, o.gap.as_millis(), g("wlost")),
            fmt_ms(g("w50")),
            format!("{} inotify (notify) in the bench ({:.0} lost)", fmt_ms(g("l50")), g("llost")),
            Some(g("w50") / g("l50")),
            "≤ 50 ms",
        ),
        row("watch: the same, p99", fmt_ms(g("w99")), format!("{} inotify in the bench", fmt_ms(g("l99"))), Some(g("w99") / g("l99")), "≤ 200 ms"),
        row(
            format!("completions, first call ({} files listed)", g("bfiles")),
            fmt_ms(g("cfirst")),
            format!("{} walk + one filter in the bench", fmt_ms(g("bfirst"))),
            Some(g("cfirst") / g("bfirst")),
            "",
        ),
        row(
            format!("completions p50 of {} later calls (@ + 3-6 chars; {:.1} items each)", o.queries, g("citems")),
            fmt_ms(g("c50")),
            format!("{} = filter {} + walk {} × {:.0} refresh(es) ÷ {}", fmt_ms(base_q), fmt_ms(g("bfilter")), fmt_ms(g("bwalk")), g("brefresh"), o.queries),
            Some(g("c50") / base_q),
            "≤ 50 ms; ≤ 2×",
        ),
        row(
            format!("ping p99 while completions run ({:.0} pings; p50 {})", g("ping_during_n"), fmt_ms(g("ping_during50"))),
            fmt_ms(g("ping_during99")),
            format!("{} alone (p50 {}), same daemon", fmt_ms(g("ping_alone99")), fmt_ms(g("ping_alone50"))),
            Some(g("ping_during99") / g("ping_alone99")),
            "unchanged",
        ),
    ];
    print_table(&format!("files (awareness on; medians of {} run(s))", env.runs), &rows);
    Ok(())
}
