//! `ahpd`: hosts AI-agent sessions over the Agent Host Protocol (JSON-RPC
//! 2.0 over WebSocket). Every session rule lives in `ahpd-core`; this binary
//! is the thin shell around it (docs/STYLE.md 3.5): a WebSocket listener, a
//! session store, agent backends, and one driver loop that feeds the core.

// No unsafe code but the allocator settings (`allocator_settings`,
// `trim_freed_memory`, allowed there).
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod agents;
mod cli;
mod driver;
mod events;
mod exec;
mod metrics;
mod settings;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ahpd_core::{Config, Host};
use clap::{Parser, Subcommand};

use driver::{Clock, Driver, Ended};
use events::EventSink;
use exec::backend::Backends;
use exec::fsutil;
use exec::store::{Store, StoreKind};
use settings::{parse_external_mode, parse_minutes, Given, LogFormat, Settings};

/// Length of the cursor secret, in bytes.
const CURSOR_SECRET_BYTES: usize = 32;

/// How long a graceful shutdown may take to finish the store's writes.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Exit code of every configuration error `ahpd serve` and `ahpd config
/// check` report: a config file missing, unreadable or invalid (unknown
/// key, wrong type), a bad users directory or policy file, a bad flag or
/// `AHPD_*` value, an invalid `RUST_LOG`, a refused listening address.
/// sysexits.h's `EX_CONFIG`; contrib/ahpd.service names it in
/// `RestartPreventExitStatus=` because restarting will not fix the file
/// (docs/USER-GUIDE.md "Exit codes", DECISIONS 23).
const EXIT_CONFIG: u8 = 78;

/// Exit code of a usage error of the other subcommands (clap's own).
const EXIT_USAGE: u8 = 2;

/// Exit code after a second SIGINT/SIGTERM cut a shutdown short.
const EXIT_INTERRUPTED: i32 = 130;

/// Options precedence, shown in `--help`.
const PRECEDENCE: &str = "Each option is taken from, highest first: its flag, its AHPD_* environment variable, \
the config file (--config, else $XDG_CONFIG_HOME/ahpd/config.toml, else ~/.config/ahpd/config.toml), the built-in default.";

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "ahpd", version, about = "Hosts AI-agent sessions over the Agent Host Protocol.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve AHP over WebSocket (and /healthz, /metrics over HTTP on the
    /// same port) until SIGINT/SIGTERM.
    #[command(after_long_help = PRECEDENCE)]
    Serve(ServeArgs),
    /// Export or import one session as a plain JSON file.
    Session(cli::SessionArgs),
    /// Work with the whole session store (list).
    Sessions(cli::SessionsArgs),
    /// Check the config file, users directory and policy file.
    Config(ConfigArgs),
    /// Print the connection token a client presents to this daemon
    /// (`Authorization: Bearer <token>`, or `?token=<token>` in the URL),
    /// making it first if the data directory has none yet. It is the file
    /// `<data-dir>/host-token`, readable by its owner only.
    #[command(after_long_help = PRECEDENCE)]
    Token(ServeArgs),
    /// Print the version and exit (the same as `ahpd --version`).
    Version,
    /// Print a shell completion script for SHELL on stdout, e.g.
    /// `ahpd completions bash > ~/.local/share/bash-completion/completions/ahpd`.
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Relay MCP between stdin/stdout and the host's MCP server (issue 24):
    /// what an agent that takes only stdio MCP servers is given, started by
    /// the agent itself with the chat's secret in AHPD_MCP_TOKEN. Not for
    /// running by hand.
    #[command(name = "mcp-bridge", hide = true)]
    McpBridge {
        /// The host's MCP server, `http://127.0.0.1:<port>/mcp`.
        #[arg(long)]
        url: String,
    },
}

/// `ahpd config ...`.
#[derive(Debug, clap::Args)]
struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

/// The `ahpd config` subcommands.
#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate the config file, the users directory and the policy file,
    /// and print the settings `ahpd serve` would use with the same options
    /// (token hashes elided). Exit 0 valid, 78 invalid (as `ahpd serve`).
    #[command(after_long_help = PRECEDENCE)]
    Check(ServeArgs),
}

/// Options of `ahpd serve`; each may also come from its environment
/// variable or the config file (flag > env > file > default).
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The config file [default: $XDG_CONFIG_HOME/ahpd/config.toml, else
    /// ~/.config/ahpd/config.toml; a missing default file means defaults].
    #[arg(long, env = "AHPD_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on, `HOST:PORT` with an IP address or a host name
    /// (`localhost:8765`: every address it resolves to); `127.0.0.1:0` picks
    /// a free port [default: 127.0.0.1:8765]. A non-loopback address needs
    /// a users directory.
    #[arg(long, env = "AHPD_LISTEN")]
    listen: Option<String>,
    /// Where sessions, transcripts and the cursor secret live
    /// [default: $XDG_DATA_HOME/ahpd, else $HOME/.local/share/ahpd].
    #[arg(long, env = "AHPD_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Where the host's own session records go: `file` keeps them across
    /// restarts, `memory` forgets them [default: file].
    #[arg(long, env = "AHPD_SESSIONS", value_enum)]
    sessions: Option<StoreKind>,
    /// Minutes of quiet after which a session's agent is let go; 0 = never
    /// [default: 30].
    #[arg(long, env = "AHPD_SLEEP_AFTER_MINUTES", value_parser = parse_minutes)]
    sleep_after_minutes: Option<f64>,
    /// Most sessions kept resident; 0 = no limit [default: 10].
    #[arg(long, env = "AHPD_RESIDENCY_LIMIT")]
    residency_limit: Option<usize>,
    /// Seconds running turns may go on after SIGTERM/SIGINT before they are
    /// cancelled; no new turns are taken meanwhile [default: 30].
    #[arg(long, env = "AHPD_SHUTDOWN_GRACE_SECONDS")]
    shutdown_grace_seconds: Option<u64>,
    /// Where worktrees are made: `<dir>/<repo>/<name>` instead of
    /// `<repo>.worktrees/<name>` beside the repository.
    #[arg(long, env = "AHPD_WORKTREES_ROOT", value_name = "DIR")]
    worktrees_root: Option<PathBuf>,
    /// The workspace-awareness registry: one record per live session of
    /// every process on this machine [default: $AHPD_HOME/active-agents,
    /// else <data-dir>/active-agents]; an empty value turns awareness off.
    #[arg(long, env = "AHPD_AWARENESS_DIR", value_name = "DIR", value_parser = clap::builder::TypedValueParser::map(clap::builder::OsStringValueParser::new(), PathBuf::from))]
    awareness_dir: Option<PathBuf>,
    /// Claude Code's transcripts folder, listed as external sessions
    /// (`claude:/<id>`) [default: ~/.claude/projects when it exists]; an
    /// empty value or a missing folder lists none. Only read, never written.
    #[arg(long, env = "AHPD_CLAUDE_PROJECTS", value_parser = clap::builder::TypedValueParser::map(clap::builder::OsStringValueParser::new(), PathBuf::from))]
    claude_projects: Option<PathBuf>,
    /// The root config's initial `showExternalSessions`: none, recent,
    /// last24Hours, last7Days or last30Days [default: none].
    #[arg(long, env = "AHPD_SHOW_EXTERNAL_SESSIONS", value_parser = parse_external_mode)]
    show_external_sessions: Option<ahpd_core::external::ExternalMode>,
    /// The users directory (users.toml). Without one the host is
    /// single-user: it records no owners, refuses nobody, and listens on
    /// loopback only.
    #[arg(long, env = "AHPD_USERS", value_name = "FILE")]
    users: Option<PathBuf>,
    /// A folder agents may run in (repeatable; replaces the config file's
    /// `trusted_folders`). With none, every folder is trusted; with some, a
    /// session is made, moved or woken only in one of them or inside one,
    /// or in a worktree this host made from a trusted repository.
    /// Also `AHPD_TRUSTED_FOLDERS`, folders separated by `:` as in `PATH`
    /// (read when no flag is given).
    #[arg(long = "trusted-folder", value_name = "DIR")]
    trusted_folder: Vec<PathBuf>,
    /// The policy file (`[[rules]]`), re-read on SIGHUP [default: allow
    /// everything].
    #[arg(long, env = "AHPD_POLICY", value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Log lines as text or JSON, on stderr; filter with RUST_LOG
    /// [default: text].
    #[arg(long, env = "AHPD_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    /// An ACP agent clients may name as `provider`: NAME='command args'
    /// (repeatable; replaces the config file's `[agents.NAME]`).
    #[arg(long = "agent", value_name = "NAME=COMMAND")]
    agent: Vec<String>,
    /// Largest frame decoded, in bytes.
    #[arg(long, env = "AHPD_LIMIT_FRAME_MAX_BYTES", value_name = "BYTES")]
    limit_frame_max_bytes: Option<usize>,
    /// Most channels one connection may subscribe to.
    #[arg(long, env = "AHPD_LIMIT_SUBSCRIPTIONS_PER_CONN", value_name = "N")]
    limit_subscriptions_per_conn: Option<usize>,
    /// Largest message text in a turn or a draft, in bytes.
    #[arg(long, env = "AHPD_LIMIT_MESSAGE_TEXT_MAX_BYTES", value_name = "BYTES")]
    limit_message_text_max_bytes: Option<usize>,
    /// Frames per second one connection may send, on average.
    #[arg(long, env = "AHPD_LIMIT_FRAMES_PER_SECOND", value_name = "N")]
    limit_frames_per_second: Option<u32>,
    /// Frames one connection may send in a burst above the average.
    #[arg(long, env = "AHPD_LIMIT_FRAMES_BURST", value_name = "N")]
    limit_frames_burst: Option<u32>,
    /// Most requests of one connection waiting for a wake at once.
    #[arg(long, env = "AHPD_LIMIT_PENDING_REQUESTS_PER_CONN", value_name = "N")]
    limit_pending_requests_per_conn: Option<usize>,
    /// Most client connections open at once; one over it reads a -32600
    /// error frame and is closed [default: 256].
    #[arg(long, env = "AHPD_LIMIT_CONNECTIONS_MAX", value_name = "N")]
    limit_connections_max: Option<usize>,
    /// Most bytes queued for one client that it has not read; a client over
    /// it is dropped [default: 8388608].
    #[arg(long, env = "AHPD_LIMIT_OUTGOING_BUFFER_MAX_BYTES", value_name = "BYTES")]
    limit_outgoing_buffer_max_bytes: Option<usize>,
    /// Most queued messages one chat holds at once; one more is refused
    /// [default: 32].
    #[arg(long, env = "AHPD_LIMIT_QUEUED_MESSAGES_PER_CHAT", value_name = "N")]
    limit_queued_messages_per_chat: Option<usize>,
    /// Largest session title a client may set, in bytes; a longer one is
    /// refused [default: 1024].
    #[arg(long, env = "AHPD_LIMIT_TITLE_MAX_BYTES", value_name = "BYTES")]
    limit_title_max_bytes: Option<usize>,
    /// Largest attachments of one message, in bytes of their JSON; larger
    /// ones are refused [default: 2097152].
    #[arg(long, env = "AHPD_LIMIT_MESSAGE_ATTACHMENTS_MAX_BYTES", value_name = "BYTES")]
    limit_message_attachments_max_bytes: Option<usize>,
    /// Most bytes of envelopes kept for `reconnect` replays; a client that
    /// reconnects from before them gets snapshots [default: 16777216].
    #[arg(long, env = "AHPD_LIMIT_REPLAY_BUFFER_MAX_BYTES", value_name = "BYTES")]
    limit_replay_buffer_max_bytes: Option<usize>,
    /// Web origins, besides the daemon's own and VS Code desktop's, whose
    /// pages may open a WebSocket to it (comma-separated, e.g.
    /// https://vscode.dev); an upgrade from any other origin is refused
    /// with 403.
    #[arg(long, env = "AHPD_ALLOWED_ORIGINS", value_name = "ORIGIN", value_delimiter = ',')]
    allowed_origins: Vec<String>,
    /// Host names a request may be addressed to besides loopback ones (or
    /// the address it arrived on), e.g. a reverse proxy's name
    /// (comma-separated, HOST or HOST:PORT); any other Host is refused with
    /// 403 (DNS rebinding).
    #[arg(long, env = "AHPD_ALLOWED_HOSTS", value_name = "HOST", value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// Take WebSocket connections without the connection token on a host
    /// with no users directory: any local program or user may then drive
    /// the daemon. Off by default.
    #[arg(long, env = "AHPD_NO_TOKEN", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::SetTrue)]
    no_token: bool,
}

impl ServeArgs {
    /// What the flags and the environment said.
    fn given(self) -> Given {
        Given {
            config: self.config,
            listen: self.listen,
            data_dir: self.data_dir,
            sessions: self.sessions,
            sleep_after_minutes: self.sleep_after_minutes,
            residency_limit: self.residency_limit,
            shutdown_grace_seconds: self.shutdown_grace_seconds,
            worktrees_root: self.worktrees_root,
            awareness_dir: self.awareness_dir,
            claude_projects: self.claude_projects,
            show_external_sessions: self.show_external_sessions,
            users: self.users,
            policy: self.policy,
            trusted_folders: if self.trusted_folder.is_empty() {
                // `:`-separated as in PATH; a URI is kept whole so that it is
                // refused as one rather than split at its scheme.
                let from_env = std::env::var_os("AHPD_TRUSTED_FOLDERS").filter(|v| !v.is_empty());
                let folders = from_env.map(|v| match v.to_str() {
                    Some(text) if text.contains("://") || text.starts_with("file:") => vec![PathBuf::from(text)],
                    _ => std::env::split_paths(&v).collect(),
                });
                settings::TrustedGiven { source: "AHPD_TRUSTED_FOLDERS", folders: folders.unwrap_or_default() }
            } else {
                settings::TrustedGiven { source: "--trusted-folder", folders: self.trusted_folder }
            },
            log_format: self.log_format,
            agents: self.agent,
            limits: settings::FileLimits {
                frame_max_bytes: self.limit_frame_max_bytes,
                subscriptions_per_conn: self.limit_subscriptions_per_conn,
                message_text_max_bytes: self.limit_message_text_max_bytes,
                frames_per_second: self.limit_frames_per_second,
                frames_burst: self.limit_frames_burst,
                pending_requests_per_conn: self.limit_pending_requests_per_conn,
                connections_max: self.limit_connections_max,
                outgoing_buffer_max_bytes: self.limit_outgoing_buffer_max_bytes,
                queued_messages_per_chat: self.limit_queued_messages_per_chat,
                title_max_bytes: self.limit_title_max_bytes,
                message_attachments_max_bytes: self.limit_message_attachments_max_bytes,
                replay_buffer_max_bytes: self.limit_replay_buffer_max_bytes,
            },
            allowed_origins: self.allowed_origins,
            allowed_hosts: self.allowed_hosts,
            no_token: self.no_token.then_some(true),
        }
    }
}

/// The process's allocator: mimalloc (docs/DECISIONS.md 29). With glibc's
/// malloc limited to one arena (chosen so memory freed on another thread
/// came back), the records parsed on every core at start queued on that
/// arena's lock: a 100k catalogue answered its first `listSessions` 2.0-2.6×
/// a plain read of its files; with glibc's arena per thread, 1.6× but more
/// bytes per row. mimalloc's per-thread heaps take no lock and free across
/// threads cheaply: 1.13× with fewer bytes per row (969 B vs 1,022 B), in
/// the same run (docs/PERFORMANCE.md, "Levers tried").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc 3.3's option numbers (`mi_option_e` in its `mimalloc.h`; the
/// crate's `extended` constants stop at 2.x's list, so they are named here,
/// with the crate pinned exactly in shell/Cargo.toml).
mod mi_option {
    /// `mi_option_arena_eager_commit`: commit a new arena's memory at once.
    pub const ARENA_EAGER_COMMIT: i32 = 4;
    /// `mi_option_purge_delay`: milliseconds before freed pages go back to
    /// the OS (default 10; 0 = at once).
    pub const PURGE_DELAY: i32 = 15;
}

#[allow(unsafe_code)]
extern "C" {
    /// mimalloc's `mi_option_set` (linked from `libmimalloc-sys`).
    fn mi_option_set(option: i32, value: std::ffi::c_long);
    /// mimalloc's `mi_collect`: frees what the heaps hold unused; `force`
    /// also collects what exited threads left.
    fn mi_collect(force: bool);
}

/// Sets the allocator's options before any thread starts: freed pages go
/// back to the OS at once (issue 25: memory returned once sessions and
/// clients go; issue 21: RSS per catalogue row), and arenas are committed
/// as they are used rather than whole. A `MIMALLOC_PURGE_DELAY` or
/// `MIMALLOC_ARENA_EAGER_COMMIT` the user set wins.
fn allocator_settings() {
    for (var, option, value) in [("MIMALLOC_PURGE_DELAY", mi_option::PURGE_DELAY, 0), ("MIMALLOC_ARENA_EAGER_COMMIT", mi_option::ARENA_EAGER_COMMIT, 0)] {
        if std::env::var_os(var).is_none() {
            // SAFETY: sets one of mimalloc's options (an integer in its
            // option table); takes no pointer.
            #[allow(unsafe_code)]
            unsafe {
                mi_option_set(option, value);
            }
        }
    }
}

/// Gives the allocator's free pages back to the OS and returns how long that
/// took. A pass over the backends' transcripts, once merged, leaves its
/// rows' pages free (26 MiB at 100k rows under glibc, issue 21,
/// docs/PERFORMANCE.md "Levers tried"); mimalloc
/// purges freed pages itself (`allocator_settings`), and this collects what
/// the scan's exited threads left in their heaps. The driver calls it on a
/// blocking thread once a merge ends; nothing else depends on it.
pub fn trim_freed_memory() -> std::time::Duration {
    let started = std::time::Instant::now();
    // SAFETY: mi_collect walks mimalloc's own heaps; takes no pointer.
    #[allow(unsafe_code)]
    unsafe {
        mi_collect(true);
    }
    started.elapsed()
}

fn main() -> ExitCode {
    allocator_settings();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return refused_command_line(e),
    };
    match cli.command {
        Command::Session(args) => cli::run_session(args),
        Command::Sessions(args) => cli::run_sessions(args),
        Command::Version => {
            println!("ahpd {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Token(args) => {
            let token = settings::resolve(args.given()).and_then(|s| s.data_dir).and_then(|dir| {
                create_private_dir(&dir)?;
                host_token(&dir)
            });
            match token {
                Ok(token) => {
                    println!("{token}");
                    ExitCode::SUCCESS
                }
                Err(message) => {
                    eprintln!("ahpd: {message}");
                    ExitCode::from(EXIT_CONFIG)
                }
            }
        }
        Command::McpBridge { url } => {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("ahpd mcp-bridge: could not start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(exec::mcp::bridge(&url)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => {
                    eprintln!("ahpd mcp-bridge: {message}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "ahpd", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Config(ConfigArgs { command: ConfigCommand::Check(args) }) => {
            match settings::resolve(args.given()).and_then(|s| log_filter().map(|f| (s, f))) {
                Ok((s, _)) => {
                    print!("{}", s.render());
                    match loopback_refusal(&s) {
                        Some(message) => {
                            eprintln!("ahpd: invalid: {message}");
                            ExitCode::from(EXIT_CONFIG)
                        }
                        None => {
                            eprintln!("ahpd: the configuration is valid");
                            ExitCode::SUCCESS
                        }
                    }
                }
                Err(message) => {
                    eprintln!("ahpd: invalid: {message}");
                    ExitCode::from(EXIT_CONFIG)
                }
            }
        }
        Command::Serve(args) => {
            let (settings, filter) = match settings::resolve(args.given()).and_then(|s| log_filter().map(|f| (s, f))) {
                Ok(s) => s,
                Err(message) => {
                    eprintln!("ahpd: {message}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            if let Some(message) = loopback_refusal(&settings) {
                eprintln!("ahpd: {message}");
                return ExitCode::from(EXIT_CONFIG);
            }
            init_tracing(settings.log_format, filter);
            let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("ahpd: could not start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(settings)) {
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

/// Reports a command line clap refused and returns the exit code: help
/// and `--version` print on stdout and exit 0; an error under `serve` or
/// `config` is a configuration error ([`EXIT_CONFIG`]), any other a usage
/// error ([`EXIT_USAGE`]). A bad value that came from an `AHPD_*`
/// variable, not from its flag, is reported under the variable's name.
fn refused_command_line(e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut text = e.render().to_string();
    if let Some(clap::error::ContextValue::String(arg)) = e.get(clap::error::ContextKind::InvalidArg) {
        if let Some(var) = env_var_of(arg, &args) {
            text = text.replace(&format!("'{arg}'"), &format!("the environment variable {var}"));
        }
    }
    eprint!("{text}");
    let daemon = args.iter().find(|a| !a.starts_with('-')).is_some_and(|c| c == "serve" || c == "config");
    ExitCode::from(if daemon { EXIT_CONFIG } else { EXIT_USAGE })
}

/// The environment variable an invalid value of `arg` (clap's rendering,
/// `--long <VALUE>`) came from: the flag's `env`, when the flag is not on
/// the command line `args` and the variable is set.
fn env_var_of(arg: &str, args: &[String]) -> Option<String> {
    let long = arg.strip_prefix("--")?.split([' ', '=']).next()?;
    let on_command_line = args.iter().any(|a| a == &format!("--{long}") || a.starts_with(&format!("--{long}=")));
    if on_command_line {
        return None;
    }
    let command = <Cli as clap::CommandFactory>::command();
    let mut stack = vec![&command];
    while let Some(c) = stack.pop() {
        for a in c.get_arguments() {
            if a.get_long() == Some(long) {
                if let Some(var) = a.get_env().and_then(|v| v.to_str()) {
                    if std::env::var_os(var).is_some() {
                        return Some(var.to_owned());
                    }
                }
            }
        }
        stack.extend(c.get_subcommands());
    }
    None
}

/// The log filter from `RUST_LOG` (default `info`).
///
/// Errors: `RUST_LOG` is set but is not a valid filter (a configuration
/// error like any other bad setting, so a typo does not silently log at a
/// level nobody asked for); the message names the variable.
fn log_filter() -> Result<tracing_subscriber::EnvFilter, String> {
    match std::env::var("RUST_LOG") {
        Ok(value) if !value.trim().is_empty() => {
            tracing_subscriber::EnvFilter::builder().parse(&value).map_err(|e| format!("RUST_LOG={value:?} is not a valid log filter: {e}"))
        }
        Err(std::env::VarError::NotUnicode(_)) => Err("RUST_LOG is not valid UTF-8".to_owned()),
        _ => Ok(tracing_subscriber::EnvFilter::new("info")),
    }
}

/// Why the daemon refuses to listen where it was told, if it does: a
/// non-loopback address with no users directory would let any network
/// peer run agents.
fn loopback_refusal(s: &Settings) -> Option<String> {
    (s.users.is_none() && !s.listen_addrs.iter().all(|a| a.ip().is_loopback())).then(|| {
        format!(
            "refusing to listen on {}: without a users directory (--users FILE) ahpd serves loopback addresses only, \
             because anybody who can connect could run agents as you. Pass --users, or listen on 127.0.0.1.",
            s.listen
        )
    })
}

/// Logs to stderr as text or JSON lines, filtered by `filter` ([`log_filter`]).
fn init_tracing(format: LogFormat, filter: tracing_subscriber::EnvFilter) {
    use std::io::IsTerminal;
    match format {
        LogFormat::Text => {
            let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();
        }
        LogFormat::Json => tracing_subscriber::fmt().json().with_env_filter(filter).with_writer(std::io::stderr).init(),
    }
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

/// The awareness registry directory: the one given (empty: none), else
/// `$AHPD_HOME/active-agents`, else `<data-dir>/active-agents`.
fn awareness_dir(given: Option<&Path>, data_dir: &Path) -> Option<PathBuf> {
    match given {
        Some(p) if p.as_os_str().is_empty() => None,
        Some(p) => Some(p.to_owned()),
        None => match std::env::var_os("AHPD_HOME").filter(|v| !v.is_empty()) {
            Some(home) => Some(PathBuf::from(home).join("active-agents")),
            None => Some(data_dir.join("active-agents")),
        },
    }
}

/// Makes `dir` (and its missing parents) readable by this user only (0700),
/// whatever the umask; an existing one with wider modes is tightened
/// (issue 46: any other user of the machine could read every
/// conversation). Returns whether it had to be tightened.
///
/// Errors: it cannot be made, or its mode cannot be read or set.
fn create_private_dir(dir: &Path) -> Result<bool, String> {
    fsutil::create_private_dir(dir).map_err(|e| format!("could not create {} (mode 0700): {e}", dir.display()))
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

/// The host's own token, `<data-dir>/host-token` (64 hex digits, mode
/// 0600), made on first start. On a host with no users directory it is the
/// connection token every WebSocket upgrade presents (issue 46); on one
/// with a users directory a local program that can read it (the daemon's
/// own user) proves it is this host and authenticates as `root:<host>`,
/// with `authenticate` or an `Authorization: Bearer` header
/// (docs/USER-GUIDE.md "Security"). `ahpd token` prints it; the daemon
/// keeps only its SHA-256 ([`host_token_hash`]).
///
/// Errors: the file cannot be read or written, or is empty.
fn host_token(data_dir: &Path) -> Result<String, String> {
    let path = data_dir.join("host-token");
    let token = match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => text.trim().to_owned(),
        Ok(_) => return Err(format!("{} is empty; delete it to make a new one", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token: String = fsutil::random_bytes(32).iter().map(|b| format!("{b:02x}")).collect();
            fsutil::write_durable(data_dir, "host-token", token.as_bytes(), Some(0o600))
                .map_err(|e| format!("could not write {}: {e}", path.display()))?;
            tracing::info!(file = %path.display(), "created the host token (root:<host> for local tools)");
            token
        }
        Err(e) => return Err(format!("could not read {}: {e}", path.display())),
    };
    Ok(token)
}

/// The SHA-256 of [`host_token`], for the core and the front door; the
/// token itself is not kept.
fn host_token_hash(data_dir: &Path) -> Result<String, String> {
    host_token(data_dir).map(|token| ahpd_core::grants::token_hash(&token))
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
async fn serve(settings: Settings) -> Result<(), String> {
    let clock = Clock::start();
    let data_dir = settings.data_dir.clone()?;
    let sessions_dir = data_dir.join("sessions");
    let echo_dir = data_dir.join("echo");
    let automations_dir = exec::store::automations_dir(&sessions_dir);
    let acp_home = data_dir.join("acp");
    let mut tightened = false;
    for dir in [&data_dir, &sessions_dir, &echo_dir, &automations_dir, &acp_home] {
        tightened |= create_private_dir(dir)?;
    }
    if tightened {
        tracing::warn!(data_dir = %data_dir.display(), "the data directory was readable by other users of this machine: its folders are now 0700 and the files in them are being made 0600");
    }
    for agent in &settings.agents {
        tracing::info!(agent = %agent.name, command = %agent.command_line(), can_resume = agent.can_resume, "ACP agent offered to clients");
    }
    if let Some(root) = &settings.worktrees_root {
        tracing::info!(worktrees_root = %root.display(), "worktrees are made under this root");
    }
    let claude_projects = claude_projects_root(settings.claude_projects.as_deref());
    let awareness_dir = awareness_dir(settings.awareness_dir.as_deref(), &data_dir);
    let trust = trust(settings.trusted_folders.as_deref());
    let host_token_sha256 = host_token_hash(&data_dir)?;
    let gate = settings.gate(Some(host_token_sha256.clone()))?;
    if !settings.token_required() && settings.users.is_none() {
        tracing::warn!("--no-token: WebSocket connections are taken without the connection token, so any local program or user of this machine can drive this daemon and its agents");
    }
    let config = Config {
        host_name: host_name(),
        // Fractions of a minute are allowed (tests use seconds); the value
        // is finite and non-negative (checked by `parse_minutes`).
        sleep_after_ms: (settings.sleep_after_minutes * 60_000.0).round() as u64,
        residency_limit: settings.residency_limit,
        cursor_secret: cursor_secret(&data_dir)?,
        host_token_sha256: Some(host_token_sha256.clone()),
        external_sources: claude_projects.iter().map(|_| exec::claude::PROVIDER.to_owned()).collect(),
        show_external_sessions: settings.show_external_sessions,
        limits: settings.limits.clone(),
        files: settings.files.clone(),
        users: settings.users.clone(),
        policy: settings.policy.clone(),
        trust,
        agents: std::iter::once(ahpd_core::AgentSpec::echo()).chain(settings.agents.iter().map(|a| a.spec())).collect(),
        awareness: ahpd_core::awareness::AwarenessConfig {
            enabled: awareness_dir.is_some(),
            pid: std::process::id(),
            pid_start: exec::registry::own_start(),
            ..Default::default()
        },
        ..Config::default()
    };
    // Listening comes first (issue 21: "listening within 100 ms"): a
    // client that connects while the store is read waits for its answers
    // in the event queue, which the driver serves once the host is built.
    let listeners = bind_all(&settings.listen, &settings.listen_addrs).await?;
    let local = listeners[0].local_addr().map_err(|e| format!("could not read the listening address: {e}"))?;

    let (events, rx) = EventSink::channel();
    let store = match settings.sessions {
        StoreKind::File => Store::file(sessions_dir.clone(), events.clone()),
        StoreKind::Memory => Store::memory(events.clone()),
    };
    // The host's MCP server, opened only when some agent takes its tools
    // (issue 24, docs/DECISIONS.md 22).
    let host_tools = if exec::acp::Acp::wants_host_tools(&settings.agents) { Some(exec::mcp::serve(events.clone()).await?) } else { None };
    let backends = Backends::new(echo_dir.clone(), events.clone())
        .with_claude_projects(claude_projects)
        .with_worktrees_root(settings.worktrees_root.clone())
        .with_acp_agents(settings.agents.clone(), acp_home, host_tools);
    let accept = tokio::spawn(exec::net::serve(listeners, events.clone(), gate, settings.limits.outgoing_buffer_max_bytes, settings.limits.frame_max_bytes));
    let reload = tokio::spawn(reload_policy_on_hup(settings.policy_file.clone(), events.clone()));
    let driver_events = events.clone();
    drop(events);

    let mut stdout = std::io::stdout().lock();
    // The first line is the URL alone (tools read it); the second says how
    // a client gets in.
    let how = if settings.token_required() {
        format!("ahpd connection token: `ahpd token` prints it (the file {}); send it as Authorization: Bearer <token> or ws://{local}/?token=<token>", data_dir.join("host-token").display())
    } else if settings.users.is_some() {
        "ahpd users: sign in with your token (Authorization: Bearer <token>, ?token=<token>, or authenticate)".to_owned()
    } else {
        "ahpd connection token: none asked (--no-token): any local program or user can drive this daemon".to_owned()
    };
    writeln!(stdout, "ahpd listening on ws://{local}/").and_then(|()| stdout.flush()).map_err(|e| format!("could not write to stdout: {e}"))?;
    // Best effort: a tool that read the URL may have closed the pipe
    // already, and that is no reason to stop.
    let _ = writeln!(stdout, "{how}").and_then(|()| stdout.flush());
    drop(stdout);
    tracing::info!(%local, "listening (WebSocket; HTTP /healthz and /metrics on the same port)");

    let reading = std::time::Instant::now();
    // What a crash mid-write left in the other folders is swept while the
    // store is read (the store's own listing sweeps its folder), after
    // listening (issue 21: a 100k-file folder is not listed before that)
    // and before the host answers anything: once it answers, no
    // half-written file is left.
    let sweep_dirs: Vec<PathBuf> = std::iter::once(echo_dir.clone()).chain(awareness_dir.clone()).collect();
    // A data directory an older build wrote under the usual umask (0644
    // files) is narrowed once, here, off the listening path.
    let narrow = tightened.then(|| data_dir.clone());
    let sweep = tokio::task::spawn_blocking(move || {
        for dir in &sweep_dirs {
            exec::fsutil::remove_stray_temps(dir);
        }
        if let Some(dir) = narrow {
            let (narrowed, failed) = exec::fsutil::narrow_modes_below(&dir);
            tracing::info!(data_dir = %dir.display(), narrowed, failed, "files and folders of the data directory made this user's alone (0600, 0700)");
        }
    });
    let seed = u64::from_le_bytes(fsutil::random_bytes(8).try_into().unwrap_or([0x5e; 8]));
    // The host is built while the store is read: each batch of records is
    // restored as it comes, in the store's order (`store::load_each`).
    let mut host = Host::restoring(config, seed, clock.now());
    let host = match settings.sessions {
        StoreKind::File => {
            let (dir, wall_ms) = (sessions_dir.clone(), clock.now().wall.0);
            let automations_dir = automations_dir.clone();
            tokio::task::spawn_blocking(move || {
                exec::store::load_each(&dir, wall_ms, |loaded| match loaded {
                    exec::store::Loaded::Expect(n) => host.expect_records(n),
                    exec::store::Loaded::Records(batch) => host.restore_records(batch),
                })?;
                host.finish_restoring();
                // Automations after the sessions: a pinned one is checked
                // against the sessions restored.
                host.restore_automations(exec::store::load_automations(&automations_dir, wall_ms)?);
                Ok::<_, std::io::Error>(host)
            })
            .await
            .map_err(|e| format!("could not read the session store {}: {e}", sessions_dir.display()))?
            .map_err(|e| format!("could not read the session store {}: {e}", sessions_dir.display()))?
        }
        StoreKind::Memory => {
            host.finish_restoring();
            host
        }
    };
    if let Err(e) = sweep.await {
        tracing::warn!(error = %e, "the sweep of stray temp files ended abnormally");
    }
    tracing::info!(
        seed,
        config_file = %settings.config_file.as_deref().map(|p| p.display().to_string()).unwrap_or_default(),
        data_dir = %data_dir.display(),
        sessions = ?settings.sessions,
        restored = host.view().sessions.len(),
        load_ms = reading.elapsed().as_millis(),
        sleep_after_minutes = settings.sleep_after_minutes,
        residency_limit = settings.residency_limit,
        users = settings.users.as_ref().map(|u| u.users.len()),
        policy_rules = settings.policy.rules.len(),
        "starting ahpd {}",
        env!("CARGO_PKG_VERSION")
    );

    let mut driver = Driver::new(host, clock, store, backends, SHUTDOWN_GRACE)
        .with_turn_grace(std::time::Duration::from_secs(settings.shutdown_grace_seconds));
    if let Some(dir) = awareness_dir {
        tracing::info!(dir = %dir.display(), "workspace awareness: publishing live sessions");
        driver = driver.with_registry(exec::registry::Registry::new(dir, driver_events));
    }
    let ended = driver.run(rx, shutdown_signal(accept)).await;
    reload.abort();
    match ended {
        Ended::Clean => {
            tracing::info!("stopped");
            Ok(())
        }
        Ended::StoreTimedOut => Err(format!("the store did not finish its writes within {}s of the shutdown signal", SHUTDOWN_GRACE.as_secs())),
    }
}

/// Binds every address `--listen` resolved to (`addrs`, in resolver
/// order, never empty). The first must bind: it is the one printed on the
/// listening line. The others are bound on the same port (so that port 0
/// gives one port for all); one that cannot bind (e.g. `::1` on a host
/// without IPv6) is logged and skipped.
///
/// Errors: the first address cannot be bound (in use, not this host's).
async fn bind_all(listen: &str, addrs: &[std::net::SocketAddr]) -> Result<Vec<tokio::net::TcpListener>, String> {
    let first = *addrs.first().ok_or_else(|| format!("{listen} resolves to no address"))?;
    let listener = tokio::net::TcpListener::bind(first).await.map_err(|e| format!("could not listen on {first} ({listen}): {e}"))?;
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(first.port());
    let mut listeners = vec![listener];
    for addr in &addrs[1..] {
        let addr = std::net::SocketAddr::new(addr.ip(), port);
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => listeners.push(l),
            Err(e) => tracing::warn!(%addr, listen, error = %e, "could not listen on this address too; skipped"),
        }
    }
    Ok(listeners)
}

/// Re-reads the policy file on every SIGHUP and hands it to the core; a file
/// that does not read or parse is logged and the old policy kept.
async fn reload_policy_on_hup(path: Option<PathBuf>, events: EventSink) {
    #[cfg(unix)]
    {
        let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGHUP; the policy is read at startup only");
                return;
            }
        };
        while hup.recv().await.is_some() {
            let Some(path) = &path else {
                tracing::info!("SIGHUP: no policy file configured; nothing to reload");
                continue;
            };
            match settings::load_policy(path) {
                Ok(policy) => {
                    tracing::info!(file = %path.display(), "SIGHUP: policy re-read");
                    events.input(ahpd_core::Input::PolicyChanged(policy));
                }
                Err(message) => tracing::error!("SIGHUP: {message}; keeping the old policy"),
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (path, events);
    }
}

/// Resolves on the first SIGINT or SIGTERM, after stopping the accept
/// loop; a second one exits the process at once with code 130.
async fn shutdown_signal(accept: tokio::task::JoinHandle<()>) {
    let which = next_signal().await;
    tracing::info!("{which}: shutting down (a second signal exits at once)");
    accept.abort();
    tokio::spawn(async {
        let which = next_signal().await;
        eprintln!("ahpd: {which} again: exiting at once");
        std::process::exit(EXIT_INTERRUPTED);
    });
}

/// Waits for the next SIGINT or SIGTERM and names it.
async fn next_signal() -> &'static str {
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
        () = ctrl_c => "SIGINT",
        () = term => "SIGTERM",
    }
}

/// The core's folder trust from `trusted_folders` (`None`: no list, every
/// folder trusted; the paths are absolute, settled by `settings`). Each
/// folder is kept as given and also as its canonical path when that differs
/// (a client may name it either way); the list is logged once.
fn trust(folders: Option<&[PathBuf]>) -> ahpd_core::trust::Trust {
    let Some(folders) = folders else { return ahpd_core::trust::Trust::default() };
    let mut names = Vec::new();
    for absolute in folders {
        if let Ok(real) = std::fs::canonicalize(absolute) {
            if real != *absolute {
                names.push(real.to_string_lossy().into_owned());
            }
        } else {
            tracing::warn!(folder = %absolute.display(), "a trusted folder does not exist (yet)");
        }
        names.push(absolute.to_string_lossy().into_owned());
    }
    tracing::info!(trusted_folders = ?names, "agents run only in these folders and the worktrees made from their repositories");
    ahpd_core::trust::Trust::of(&names)
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
