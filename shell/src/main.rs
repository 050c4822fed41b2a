//! `ahpd`: hosts AI-agent sessions over the Agent Host Protocol (JSON-RPC
//! 2.0 over WebSocket). Every session rule lives in `ahpd-core`; this binary
//! is the thin shell around it (style guide 3.5): a WebSocket listener, a
//! session store, agent backends, and one driver loop that feeds the core.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod driver;
mod exec;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ahpd_core::{Config, Host};
use clap::{Parser, Subcommand};

use driver::{Clock, Driver, EventSink};
use exec::backend::Backends;
use exec::fsutil;
use exec::store::{Store, StoreKind};

/// Length of the cursor secret, in bytes.
const CURSOR_SECRET_BYTES: usize = 32;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "ahpd", about = "Hosts AI-agent sessions over the Agent Host Protocol.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve AHP over WebSocket until SIGINT/SIGTERM.
    Serve(ServeArgs),
    /// Print the version and exit.
    Version,
}

/// Options of `ahpd serve`; each may also come from its environment variable.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    #[arg(long, env = "AHPD_LISTEN", default_value = "127.0.0.1:8765")]
    listen: SocketAddr,
    /// Where sessions, transcripts and the cursor secret live
    /// [default: $XDG_DATA_HOME/ahpd, else $HOME/.local/share/ahpd].
    #[arg(long, env = "AHPD_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Where the host's own session records go: `file` keeps them across
    /// restarts, `memory` forgets them.
    #[arg(long, env = "AHPD_SESSIONS", value_enum, default_value = "file")]
    sessions: StoreKind,
    /// Minutes of quiet after which a session's agent is let go; 0 = never.
    #[arg(long, env = "AHPD_SLEEP_AFTER_MINUTES", default_value_t = 30)]
    sleep_after_minutes: u64,
    /// Most sessions kept resident; 0 = no limit.
    #[arg(long, env = "AHPD_RESIDENCY_LIMIT", default_value_t = 10)]
    residency_limit: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("ahpd {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Serve(args) => {
            init_tracing();
            let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("ahpd: could not start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => {
                    tracing::error!("{message}");
                    eprintln!("ahpd: {message}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();
}

/// `$XDG_DATA_HOME/ahpd`, else `$HOME/.local/share/ahpd`.
fn default_data_dir() -> Result<PathBuf, String> {
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(xdg).join("ahpd"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/ahpd")),
        None => Err("no data directory: pass --data-dir or set AHPD_DATA_DIR, XDG_DATA_HOME or HOME".to_owned()),
    }
}

fn create_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("could not create {}: {e}", dir.display()))
}

/// Reads `<data-dir>/cursor-secret`, creating it (32 random bytes, mode
/// 0600) when missing.
///
/// Errors: the file cannot be read or written, or is empty.
fn cursor_secret(data_dir: &Path) -> Result<Vec<u8>, String> {
    let path = data_dir.join("cursor-secret");
    match std::fs::read(&path) {
        Ok(bytes) if !bytes.is_empty() => return Ok(bytes),
        Ok(_) => return Err(format!("{} is empty; delete it to make a new one", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("could not read {}: {e}", path.display())),
    }
    let secret = fsutil::random_bytes(CURSOR_SECRET_BYTES);
    fsutil::write_durable(data_dir, "cursor-secret", &secret, Some(0o600))
        .map_err(|e| format!("could not write {}: {e}", path.display()))?;
    tracing::info!(file = %path.display(), "created a new cursor secret");
    Ok(secret)
}

/// This machine's name for `serverInfo` and `root:<host>` owners.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Sets everything up, prints the listening line, and runs the driver until
/// a signal.
async fn serve(args: ServeArgs) -> Result<(), String> {
    let clock = Clock::start();
    let data_dir = match args.data_dir {
        Some(d) => d,
        None => default_data_dir()?,
    };
    let sessions_dir = data_dir.join("sessions");
    let echo_dir = data_dir.join("echo");
    for dir in [&data_dir, &sessions_dir, &echo_dir] {
        create_dir(dir)?;
    }
    let config = Config {
        host_name: host_name(),
        sleep_after_ms: args.sleep_after_minutes.saturating_mul(60_000),
        residency_limit: args.residency_limit,
        cursor_secret: cursor_secret(&data_dir)?,
        ..Config::default()
    };
    let now = clock.now();
    let records = match args.sessions {
        StoreKind::File => exec::store::load(&sessions_dir, now.wall.0)
            .map_err(|e| format!("could not read the session store {}: {e}", sessions_dir.display()))?,
        StoreKind::Memory => Vec::new(),
    };
    let seed = u64::from_le_bytes(fsutil::random_bytes(8).try_into().unwrap_or([0x5e; 8]));
    tracing::info!(
        seed,
        data_dir = %data_dir.display(),
        sessions = ?args.sessions,
        restored = records.len(),
        sleep_after_minutes = args.sleep_after_minutes,
        residency_limit = args.residency_limit,
        "starting ahpd {}",
        env!("CARGO_PKG_VERSION")
    );
    let host = Host::new(config, seed, records, now);

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("could not listen on {}: {e}", args.listen))?;
    let local = listener.local_addr().map_err(|e| format!("could not read the listening address: {e}"))?;

    let (events, rx) = EventSink::channel();
    let store = match args.sessions {
        StoreKind::File => Store::file(sessions_dir, events.clone()),
        StoreKind::Memory => Store::memory(events.clone()),
    };
    let backends = Backends::new(echo_dir, events.clone());
    let accept = tokio::spawn(exec::net::serve(listener, events.clone()));
    drop(events);

    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "ahpd listening on ws://{local}/").and_then(|()| stdout.flush()).map_err(|e| format!("could not write to stdout: {e}"))?;
    drop(stdout);
    tracing::info!(%local, "listening");

    let driver = Driver { host, clock, store, backends };
    driver.run(rx, shutdown_signal(accept)).await;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM, after stopping the accept loop.
async fn shutdown_signal(accept: tokio::task::JoinHandle<()>) {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT"),
        () = term => tracing::info!("SIGTERM"),
    }
    accept.abort();
}
