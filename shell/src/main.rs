//! `ahpd`: hosts AI-agent sessions over the Agent Host Protocol (JSON-RPC
//! 2.0 over WebSocket). Every session rule lives in `ahpd-core`; this binary
//! is the thin shell around it (style guide 3.5): a WebSocket listener, a
//! session store, agent backends, and one driver loop that feeds the core.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cli;
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
    /// Export or import one session as a plain JSON file.
    Session(cli::SessionArgs),
    /// Work with the whole session store (list).
    Sessions(cli::SessionsArgs),
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
    #[arg(long, env = "AHPD_SLEEP_AFTER_MINUTES", default_value_t = 30.0, value_parser = parse_minutes)]
    sleep_after_minutes: f64,
    /// Most sessions kept resident; 0 = no limit.
    #[arg(long, env = "AHPD_RESIDENCY_LIMIT", default_value_t = 10)]
    residency_limit: usize,
    /// Claude Code's transcripts folder, listed as external sessions
    /// (`claude:/<id>`) [default: ~/.claude/projects when it exists]; an
    /// empty value or a missing folder lists none. Only read, never written.
    #[arg(long, env = "AHPD_CLAUDE_PROJECTS", value_parser = clap::builder::TypedValueParser::map(clap::builder::OsStringValueParser::new(), PathBuf::from))]
    claude_projects: Option<PathBuf>,
    /// The root config's initial `showExternalSessions`: none, recent,
    /// last24Hours, last7Days or last30Days.
    #[arg(long, env = "AHPD_SHOW_EXTERNAL_SESSIONS", default_value = "none", value_parser = parse_external_mode)]
    show_external_sessions: ahpd_core::external::ExternalMode,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Session(args) => cli::run_session(args),
        Command::Sessions(args) => cli::run_sessions(args),
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
    let claude_projects = claude_projects_root(args.claude_projects.as_deref());
    let config = Config {
        host_name: host_name(),
        // Fractions of a minute are allowed (tests use seconds); the value
        // is finite and non-negative (checked by `parse_minutes`).
        sleep_after_ms: (args.sleep_after_minutes * 60_000.0).round() as u64,
        residency_limit: args.residency_limit,
        cursor_secret: cursor_secret(&data_dir)?,
        external_sources: claude_projects.iter().map(|_| exec::claude::PROVIDER.to_owned()).collect(),
        show_external_sessions: args.show_external_sessions,
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
    let backends = Backends::new(echo_dir, events.clone()).with_claude_projects(claude_projects);
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

/// Parses `--sleep-after-minutes`: a finite, non-negative number of minutes
/// (fractions allowed, e.g. `0.5`); 0 means never.
fn parse_minutes(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(m) if m.is_finite() && m >= 0.0 && m <= 1.0e9 => Ok(m),
        _ => Err(format!("{text:?} is not a number of minutes (0 or more, fractions allowed)")),
    }
}

/// Parses `--show-external-sessions` (one of the root config's modes).
fn parse_external_mode(text: &str) -> Result<ahpd_core::external::ExternalMode, String> {
    ahpd_core::external::ExternalMode::parse(text)
        .ok_or_else(|| format!("{text:?} is not one of none, recent, last24Hours, last7Days, last30Days"))
}

/// The Claude Code transcripts folder to scan: `--claude-projects` when
/// given (empty: none), else `~/.claude/projects` when it exists. A folder
/// that is not there is said once in the log and scanned as none.
fn claude_projects_root(flag: Option<&Path>) -> Option<PathBuf> {
    let root = match flag {
        Some(p) if p.as_os_str().is_empty() => return None,
        Some(p) => p.to_owned(),
        None => exec::claude::default_root()?,
    };
    if root.is_dir() {
        tracing::info!(root = %root.display(), "listing Claude Code transcripts as external sessions");
        Some(root)
    } else {
        tracing::warn!(root = %root.display(), "no Claude Code transcripts folder there; none are listed");
        None
    }
}
