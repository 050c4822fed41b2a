//! The config file, the users directory and the policy file, and how every
//! option of `ahpd serve` is settled.
//!
//! Precedence, highest first: a command-line flag, its `AHPD_*`
//! environment variable (clap reads both into the same `Option`), the
//! config file, the built-in default. The config file is `--config FILE`
//! (or `AHPD_CONFIG`), else `$XDG_CONFIG_HOME/ahpd/config.toml`, else
//! `~/.config/ahpd/config.toml`; a default file that does not exist means
//! "all defaults", a named one that does not exist is an error. Relative
//! paths inside the file are relative to the file's folder.
//!
//! Every file is parsed with unknown keys refused; a parse error names the
//! file, the line and the key or value at fault.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ahpd_core::external::ExternalMode;
use ahpd_core::grants::{Membership, Plugin, Role, User, UsersDirectory};
use ahpd_core::policy::{Effect, Policy, Rule};
use ahpd_core::Limits;
use serde::{Deserialize, Deserializer};

use crate::exec::store::StoreKind;

/// The built-in listening address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8765";

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event (the default).
    #[default]
    Text,
    /// One JSON object per line (tracing-subscriber's JSON format).
    Json,
}

/// The session store named in the config file (`sessions = "file"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum FileStoreKind {
    File,
    Memory,
}

/// `[limits]` of the config file: each field of the core's [`Limits`].
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileLimits {
    /// Largest frame decoded, in bytes.
    pub frame_max_bytes: Option<usize>,
    /// Most channels one connection may subscribe to.
    pub subscriptions_per_conn: Option<usize>,
    /// Largest message text in a turn or a draft, in bytes.
    pub message_text_max_bytes: Option<usize>,
    /// Frames per second one connection may send, on average.
    pub frames_per_second: Option<u32>,
    /// Frames one connection may send in a burst above the average.
    pub frames_burst: Option<u32>,
    /// Most requests of one connection waiting for a wake at once.
    pub pending_requests_per_conn: Option<usize>,
    /// Most client connections open at once.
    pub connections_max: Option<usize>,
    /// Most bytes queued for one client that it has not read; over it the
    /// client is dropped.
    pub outgoing_buffer_max_bytes: Option<usize>,
    /// Most queued messages one chat holds at once.
    pub queued_messages_per_chat: Option<usize>,
    /// Largest session title a client may set, in bytes.
    pub title_max_bytes: Option<usize>,
    /// Largest attachments of one message, in bytes of their JSON.
    pub message_attachments_max_bytes: Option<usize>,
    /// Most bytes of envelopes the replay buffer keeps for `reconnect`.
    pub replay_buffer_max_bytes: Option<usize>,
}

/// The config file as written; every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    sessions: Option<FileStoreKind>,
    #[serde(default, deserialize_with = "de_minutes")]
    sleep_after_minutes: Option<f64>,
    residency_limit: Option<usize>,
    shutdown_grace_seconds: Option<u64>,
    worktrees_root: Option<PathBuf>,
    awareness_dir: Option<PathBuf>,
    claude_projects: Option<PathBuf>,
    #[serde(default, deserialize_with = "de_external_mode")]
    show_external_sessions: Option<ExternalMode>,
    /// `[agents]`: `NAME = "command args"` or an `[agents.NAME]` table
    /// (checked by [`crate::agents::from_file`]).
    #[serde(default)]
    agents: BTreeMap<String, toml::Value>,
    #[serde(default)]
    limits: FileLimits,
    /// `[files]`: a session's files over the wire (the core's
    /// `FilesConfig`, every key optional).
    files: Option<ahpd_core::files::FilesConfig>,
    users: Option<PathBuf>,
    policy: Option<PathBuf>,
    /// Folders agents may run in (relative to the file's folder).
    trusted_folders: Option<Vec<PathBuf>>,
    log_format: Option<LogFormat>,
    /// Web origins besides the daemon's own that may open a WebSocket.
    allowed_origins: Option<Vec<String>>,
    /// Host names besides loopback ones a request may be addressed to.
    allowed_hosts: Option<Vec<String>>,
    /// Take connections without a token on a host with no users directory.
    no_token: Option<bool>,
}

fn de_minutes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = f64::deserialize(d)?;
    parse_minutes_value(v).map(Some).map_err(serde::de::Error::custom)
}

fn de_external_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ExternalMode>, D::Error> {
    let text = String::deserialize(d)?;
    parse_external_mode(&text).map(Some).map_err(serde::de::Error::custom)
}

/// Checks a number of minutes: finite, 0 or more, at most 1e9.
fn parse_minutes_value(m: f64) -> Result<f64, String> {
    if m.is_finite() && (0.0..=1.0e9).contains(&m) {
        Ok(m)
    } else {
        Err(format!("{m} is not a number of minutes (0 or more, fractions allowed)"))
    }
}

/// Parses `--sleep-after-minutes`: a finite, non-negative number of
/// minutes (fractions allowed, e.g. `0.5`); 0 means never.
pub fn parse_minutes(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(m) => parse_minutes_value(m).map_err(|_| format!("{text:?} is not a number of minutes (0 or more, fractions allowed)")),
        Err(_) => Err(format!("{text:?} is not a number of minutes (0 or more, fractions allowed)")),
    }
}

/// Parses a `showExternalSessions` mode.
pub fn parse_external_mode(text: &str) -> Result<ExternalMode, String> {
    ExternalMode::parse(text).ok_or_else(|| format!("{text:?} is not one of none, recent, last24Hours, last7Days, last30Days"))
}

/// The line (1-based) of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.get(..at).map(|s| s.matches('\n').count() + 1).unwrap_or(1)
}

/// Parses `text` (read from `path`) as `T`, refusing unknown keys; the
/// error names the file and the line.
fn parse_toml<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, String> {
    toml::from_str::<T>(text).map_err(|e| {
        let message = e.message().trim_end().to_owned();
        match e.span() {
            Some(span) => format!("{} line {}: {message}", path.display(), line_of(text, span.start)),
            None => format!("{}: {message}", path.display()),
        }
    })
}

fn read(path: &Path, what: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("could not read the {what} {}: {e}", path.display()))
}

/// One entry of `trusted_folders` settled: a path (not a URI, not empty),
/// `~/…` taken from `$HOME`, a relative one joined to `base` (the config
/// file's folder, or the working directory for a flag).
pub fn trusted_folder(entry: &Path, base: &Path) -> Result<PathBuf, String> {
    let text = entry.to_string_lossy();
    if text.trim().is_empty() {
        return Err("an empty folder names no place".to_owned());
    }
    if text.contains("://") || text.starts_with("file:") {
        return Err(format!("{text:?} is a URI: name the folder by its path"));
    }
    let expanded = match text.strip_prefix("~/").or_else(|| (text == "~").then_some("")) {
        Some(rest) => match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(home) => PathBuf::from(home).join(rest),
            None => return Err(format!("{text:?} starts with ~ but HOME is not set")),
        },
        None => entry.to_owned(),
    };
    let absolute = if expanded.is_relative() { base.join(expanded) } else { expanded };
    // Shown and compared as the daemon compares them: `.` and `..` taken
    // lexically, no trailing slash.
    Ok(absolute.to_str().and_then(ahpd_core::git::normalize_path).map(PathBuf::from).unwrap_or(absolute))
}

/// `$XDG_CONFIG_HOME/ahpd/config.toml`, else `~/.config/ahpd/config.toml`.
pub fn default_config_path() -> Option<PathBuf> {
    if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(xdg).join("ahpd/config.toml"));
    }
    std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".config/ahpd/config.toml"))
}

/// Reads the config file: `explicit` must exist; the default one may be
/// absent (all defaults). Returns the file read, if any, and its contents.
pub fn load_config_file(explicit: Option<&Path>) -> Result<(Option<PathBuf>, FileConfig), String> {
    let path = match explicit {
        Some(p) => p.to_owned(),
        None => match default_config_path() {
            Some(p) if p.exists() => p,
            _ => return Ok((None, FileConfig::default())),
        },
    };
    let text = read(&path, "config file")?;
    let mut file: FileConfig = parse_toml(&path, &text)?;
    // Relative paths in the file are relative to the file's folder.
    let base = path.parent().map(Path::to_owned).unwrap_or_default();
    for p in [&mut file.data_dir, &mut file.worktrees_root, &mut file.users, &mut file.policy].into_iter().flatten() {
        if p.is_relative() {
            *p = base.join(&*p);
        }
    }
    if let Some(p) = file.awareness_dir.as_mut().filter(|p| p.is_relative() && !p.as_os_str().is_empty()) {
        *p = base.join(&*p);
    }
    if let Some(p) = file.claude_projects.as_mut().filter(|p| p.is_relative() && !p.as_os_str().is_empty()) {
        *p = base.join(&*p);
    }
    if let Some(list) = file.trusted_folders.take() {
        let settled = list.iter().map(|p| trusted_folder(p, &base)).collect::<Result<Vec<_>, _>>();
        file.trusted_folders = Some(settled.map_err(|e| format!("{}: trusted_folders: {e}", path.display()))?);
    }
    for (name, value) in &file.agents {
        crate::agents::from_file(name, value).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok((Some(path), file))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    users: Vec<UserEntry>,
    #[serde(default)]
    plugins: Vec<PluginEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginEntry {
    name: String,
    token_sha256: String,
    role: Role,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    id: String,
    token_sha256: String,
    role: Role,
    #[serde(default)]
    administrator: bool,
    #[serde(default)]
    memberships: Vec<MembershipEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MembershipEntry {
    team: String,
    project: String,
    #[serde(default)]
    primary: bool,
}

/// Reads and checks a users directory (`users.toml`): ids unique and
/// non-empty, each `token_sha256` 64 hex digits and unique, at most one
/// primary membership per user.
pub fn load_users(path: &Path) -> Result<UsersDirectory, String> {
    let text = read(path, "users directory")?;
    let file: UsersFile = parse_toml(path, &text)?;
    let mut users: Vec<User> = Vec::with_capacity(file.users.len());
    for u in file.users {
        let at = |m: &str| format!("{}: user {:?}: {m}", path.display(), u.id);
        if u.id.is_empty() || u.id.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(at("the id must be non-empty, without spaces"));
        }
        if users.iter().any(|o| o.id == u.id) {
            return Err(at("this id is listed twice"));
        }
        let hash = u.token_sha256.to_ascii_lowercase();
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(at("token_sha256 must be 64 hex digits: the SHA-256 of the token (printf %s \"$TOKEN\" | sha256sum)"));
        }
        if users.iter().any(|o| o.token_sha256 == hash) {
            return Err(at("this token_sha256 is also another user's; every user needs their own token"));
        }
        if u.memberships.iter().filter(|m| m.primary).count() > 1 {
            return Err(at("more than one membership is marked primary"));
        }
        users.push(User {
            id: u.id,
            token_sha256: hash,
            role: u.role,
            administrator: u.administrator,
            memberships: u.memberships.into_iter().map(|m| Membership { team: m.team, project: m.project, primary: m.primary }).collect(),
        });
    }
    let mut plugins: Vec<Plugin> = Vec::with_capacity(file.plugins.len());
    for p in file.plugins {
        let at = |m: &str| format!("{}: plugin {:?}: {m}", path.display(), p.name);
        if p.name.is_empty() || p.name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(at("the name must be non-empty, without spaces"));
        }
        if plugins.iter().any(|o| o.name == p.name) {
            return Err(at("this name is listed twice"));
        }
        let hash = p.token_sha256.to_ascii_lowercase();
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(at("token_sha256 must be 64 hex digits: the SHA-256 of the token (printf %s \"$TOKEN\" | sha256sum)"));
        }
        if users.iter().any(|u| u.token_sha256 == hash) || plugins.iter().any(|o| o.token_sha256 == hash) {
            return Err(at("this token_sha256 is also another user's or plugin's; each needs its own token"));
        }
        plugins.push(Plugin { name: p.name, token_sha256: hash, role: p.role });
    }
    Ok(UsersDirectory { users, plugins })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    rules: Vec<RuleEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    who: String,
    #[serde(default)]
    providers: Vec<String>,
    #[serde(default)]
    folders: Vec<String>,
    effect: Effect,
}

/// Reads and checks a policy file (`[[rules]] who, providers, folders,
/// effect`); `who` is `*`, `user:<id>`, `team:<name>`, `role:member` or
/// `role:guest`.
pub fn load_policy(path: &Path) -> Result<Policy, String> {
    let text = read(path, "policy file")?;
    let file: PolicyFile = parse_toml(path, &text)?;
    let mut rules = Vec::with_capacity(file.rules.len());
    for (i, r) in file.rules.into_iter().enumerate() {
        let ok = r.who == "*"
            || r.who == "role:member"
            || r.who == "role:guest"
            || r.who.strip_prefix("user:").is_some_and(|s| !s.is_empty())
            || r.who.strip_prefix("team:").is_some_and(|s| !s.is_empty());
        if !ok {
            return Err(format!(
                "{}: rule {}: who = {:?} is not one of \"*\", \"user:<id>\", \"team:<name>\", \"role:member\", \"role:guest\"",
                path.display(),
                i + 1,
                r.who
            ));
        }
        rules.push(Rule { who: r.who, providers: r.providers, folders: r.folders, effect: r.effect });
    }
    Ok(Policy { rules })
}

/// What the command line and the environment said (clap merges the two);
/// `None` = not given.
#[derive(Debug, Default, Clone)]
pub struct Given {
    /// `--config` / `AHPD_CONFIG`.
    pub config: Option<PathBuf>,
    /// `--listen`, as given (`HOST:PORT`).
    pub listen: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--sessions`.
    pub sessions: Option<StoreKind>,
    /// `--sleep-after-minutes`.
    pub sleep_after_minutes: Option<f64>,
    /// `--residency-limit`.
    pub residency_limit: Option<usize>,
    /// `--shutdown-grace-seconds`.
    pub shutdown_grace_seconds: Option<u64>,
    /// `--worktrees-root`.
    pub worktrees_root: Option<PathBuf>,
    /// `--awareness-dir` (empty: awareness off).
    pub awareness_dir: Option<PathBuf>,
    /// `--claude-projects` (empty: none).
    pub claude_projects: Option<PathBuf>,
    /// `--show-external-sessions`.
    pub show_external_sessions: Option<ExternalMode>,
    /// `--users`.
    pub users: Option<PathBuf>,
    /// `--policy`.
    pub policy: Option<PathBuf>,
    /// `--trusted-folder` flags in order given, else `AHPD_TRUSTED_FOLDERS`
    /// (empty: neither given).
    pub trusted_folders: TrustedGiven,
    /// `--log-format`.
    pub log_format: Option<LogFormat>,
    /// `--agent NAME='command args'` flags, in order given.
    pub agents: Vec<String>,
    /// `--limit-*` flags.
    pub limits: FileLimits,
    /// `--allowed-origins` (empty: not given).
    pub allowed_origins: Vec<String>,
    /// `--allowed-hosts` (empty: not given).
    pub allowed_hosts: Vec<String>,
    /// `--no-token`.
    pub no_token: Option<bool>,
}

/// Trusted folders as the command line or the environment gave them, and
/// which of the two (named in errors).
#[derive(Debug, Default, Clone)]
pub struct TrustedGiven {
    /// `--trusted-folder` or `AHPD_TRUSTED_FOLDERS`.
    pub source: &'static str,
    /// The folders, in order given; empty: not given.
    pub folders: Vec<PathBuf>,
}

/// Every option settled, files read and checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The config file read, if any.
    pub config_file: Option<PathBuf>,
    /// Where to listen, as given (`HOST:PORT`, a host name or an IP).
    pub listen: String,
    /// The addresses `listen` resolved to, in the resolver's order, no
    /// duplicates, never empty; each is bound (`bind_all` in main.rs).
    pub listen_addrs: Vec<SocketAddr>,
    /// The data directory, or the error saying why there is none.
    pub data_dir: Result<PathBuf, String>,
    /// Which session store.
    pub sessions: StoreKind,
    /// Minutes of quiet before a session sleeps; 0 = never.
    pub sleep_after_minutes: f64,
    /// Most resident sessions; 0 = no limit.
    pub residency_limit: usize,
    /// Seconds running turns may go on after SIGTERM before they are
    /// cancelled; 0 = cancel at once.
    pub shutdown_grace_seconds: u64,
    /// Where worktrees are made (`<dir>/<repo>/<name>`), instead of beside
    /// their repository.
    pub worktrees_root: Option<PathBuf>,
    /// The workspace-awareness registry directory as given (`None`: the
    /// default, `$AHPD_HOME/active-agents` or `<data-dir>/active-agents`;
    /// empty: awareness off).
    pub awareness_dir: Option<PathBuf>,
    /// Claude Code's transcripts folder as given (`None`: the default
    /// lookup; empty: none).
    pub claude_projects: Option<PathBuf>,
    /// The root config's initial `showExternalSessions`.
    pub show_external_sessions: ExternalMode,
    /// The ACP agents besides the built-in `echo`, in name order: the
    /// config file's `[agents]`, each replaced by a `--agent` of the same
    /// name.
    pub agents: Vec<crate::exec::acp::AgentConfig>,
    /// The core's limits.
    pub limits: Limits,
    /// A session's files over the wire (`[files]`; docs/USER-GUIDE.md
    /// "Files").
    pub files: ahpd_core::files::FilesConfig,
    /// The users directory file, if any.
    pub users_file: Option<PathBuf>,
    /// The users directory read from it.
    pub users: Option<UsersDirectory>,
    /// The policy file, if any.
    pub policy_file: Option<PathBuf>,
    /// The policy read from it (default: allow everything).
    pub policy: Policy,
    /// The folders agents may run in: the `--trusted-folder` flags, else the
    /// file's `trusted_folders`; `None`: no list, every folder is trusted.
    pub trusted_folders: Option<Vec<PathBuf>>,
    /// How to log.
    pub log_format: LogFormat,
    /// Web origins besides the daemon's own (and VS Code desktop's) whose
    /// pages may open a WebSocket, as given (checked by
    /// `front_door::Gate::new`).
    pub allowed_origins: Vec<String>,
    /// Host names a request may be addressed to besides the daemon's own
    /// (loopback names, or the address a connection arrived on), as given.
    pub allowed_hosts: Vec<String>,
    /// Whether a host with no users directory takes connections without
    /// its connection token (`--no-token`; off by default).
    pub no_token: bool,
}

/// Settles every option (flag > env > file > default) and reads the users
/// directory and the policy file.
///
/// Errors: a file that cannot be read, parsed or checked, in words naming
/// the file and the line.
pub fn resolve(given: Given) -> Result<Settings, String> {
    let (config_file, file) = load_config_file(given.config.as_deref())?;
    let listen_source = if given.listen.is_some() { "--listen" } else { "listen" };
    let listen = given.listen.or(file.listen).unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let listen_addrs = resolve_listen(&listen).map_err(|e| format!("{listen_source} {listen:?}: {e}"))?;
    let data_dir = match given.data_dir.or(file.data_dir) {
        Some(d) => Ok(d),
        None => crate::default_data_dir(),
    };
    let sessions = given.sessions.unwrap_or(match file.sessions {
        Some(FileStoreKind::Memory) => StoreKind::Memory,
        Some(FileStoreKind::File) | None => StoreKind::File,
    });
    // The spec's defaults are the core's (`Config::default`), set once there.
    let defaults = ahpd_core::Config::default();
    let d = &defaults.limits;
    let (g, f) = (&given.limits, &file.limits);
    let limits = Limits {
        frame_max_bytes: g.frame_max_bytes.or(f.frame_max_bytes).unwrap_or(d.frame_max_bytes),
        subscriptions_per_conn: g.subscriptions_per_conn.or(f.subscriptions_per_conn).unwrap_or(d.subscriptions_per_conn),
        message_text_max_bytes: g.message_text_max_bytes.or(f.message_text_max_bytes).unwrap_or(d.message_text_max_bytes),
        frames_per_second: g.frames_per_second.or(f.frames_per_second).unwrap_or(d.frames_per_second),
        frames_burst: g.frames_burst.or(f.frames_burst).unwrap_or(d.frames_burst),
        pending_requests_per_conn: g.pending_requests_per_conn.or(f.pending_requests_per_conn).unwrap_or(d.pending_requests_per_conn),
        connections_max: g.connections_max.or(f.connections_max).unwrap_or(d.connections_max),
        outgoing_buffer_max_bytes: g.outgoing_buffer_max_bytes.or(f.outgoing_buffer_max_bytes).unwrap_or(d.outgoing_buffer_max_bytes),
        queued_messages_per_chat: g.queued_messages_per_chat.or(f.queued_messages_per_chat).unwrap_or(d.queued_messages_per_chat),
        title_max_bytes: g.title_max_bytes.or(f.title_max_bytes).unwrap_or(d.title_max_bytes),
        message_attachments_max_bytes: g.message_attachments_max_bytes.or(f.message_attachments_max_bytes).unwrap_or(d.message_attachments_max_bytes),
        replay_buffer_max_bytes: g.replay_buffer_max_bytes.or(f.replay_buffer_max_bytes).unwrap_or(d.replay_buffer_max_bytes),
    };
    if limits.frame_max_bytes == 0 || limits.frames_per_second == 0 || limits.connections_max == 0 || limits.outgoing_buffer_max_bytes == 0 {
        return Err("limits: frame_max_bytes, frames_per_second, connections_max and outgoing_buffer_max_bytes must be above 0".to_owned());
    }
    let files = file.files.unwrap_or_default();
    if files.default_directory.as_deref().is_some_and(|d| !Path::new(d).is_absolute()) {
        return Err("files.default_directory must be an absolute path".to_owned());
    }
    if files.list_max_entries == 0 || files.watches_per_conn == 0 || files.watch_batch_max == 0 || files.completions_max == 0 {
        return Err("files: list_max_entries, watches_per_conn, watch_batch_max and completions_max must be above 0".to_owned());
    }
    let users_file = given.users.or(file.users);
    let users = users_file.as_deref().map(load_users).transpose()?;
    let policy_file = given.policy.or(file.policy);
    let policy = policy_file.as_deref().map(load_policy).transpose()?.unwrap_or_default();
    let settings = Settings {
        config_file,
        listen,
        listen_addrs,
        data_dir,
        sessions,
        sleep_after_minutes: given.sleep_after_minutes.or(file.sleep_after_minutes).unwrap_or(defaults.sleep_after_ms as f64 / 60_000.0),
        residency_limit: given.residency_limit.or(file.residency_limit).unwrap_or(defaults.residency_limit),
        shutdown_grace_seconds: given
            .shutdown_grace_seconds
            .or(file.shutdown_grace_seconds)
            .unwrap_or(ahpd_core::config::SHUTDOWN_GRACE_MS / 1000),
        worktrees_root: given.worktrees_root.or(file.worktrees_root),
        awareness_dir: given.awareness_dir.or(file.awareness_dir),
        claude_projects: given.claude_projects.or(file.claude_projects),
        show_external_sessions: given.show_external_sessions.or(file.show_external_sessions).unwrap_or(defaults.show_external_sessions),
        agents: crate::agents::settle(&file.agents, &given.agents)?,
        limits,
        files,
        users_file,
        users,
        policy_file,
        policy,
        trusted_folders: if given.trusted_folders.folders.is_empty() {
            file.trusted_folders
        } else {
            let source = given.trusted_folders.source;
            let cwd = std::env::current_dir().map_err(|e| format!("{source}: no working directory to resolve against: {e}"))?;
            Some(given.trusted_folders.folders.iter().map(|p| trusted_folder(p, &cwd)).collect::<Result<_, _>>().map_err(|e| format!("{source}: {e}"))?)
        },
        log_format: given.log_format.or(file.log_format).unwrap_or_default(),
        allowed_origins: if given.allowed_origins.is_empty() { file.allowed_origins.unwrap_or_default() } else { given.allowed_origins },
        allowed_hosts: if given.allowed_hosts.is_empty() { file.allowed_hosts.unwrap_or_default() } else { given.allowed_hosts },
        no_token: given.no_token.or(file.no_token).unwrap_or(false),
    };
    settings.gate(None).map_err(|e| format!("allowed_origins / allowed_hosts: {e}"))?;
    Ok(settings)
}

impl Settings {
    /// The front door's settings (`front_door::Gate`): the allowed origins
    /// and host names, and the connection token whose SHA-256 is
    /// `token_sha256` when the host asks for one (no users directory and no
    /// `--no-token`).
    ///
    /// Errors: an origin or a host name that cannot be read, named.
    pub fn gate(&self, token_sha256: Option<String>) -> Result<ahpd_core::protocol::front_door::Gate, String> {
        let token = token_sha256.filter(|_| self.token_required());
        ahpd_core::protocol::front_door::Gate::new(&self.allowed_hosts, &self.allowed_origins, token)
    }

    /// Whether every WebSocket upgrade must present the connection token:
    /// on a host with no users directory, unless `--no-token`.
    pub fn token_required(&self) -> bool {
        self.users.is_none() && !self.no_token
    }
}

/// Resolves a listening address `HOST:PORT`: an IP address (`[::1]:8765`
/// for IPv6) or a host name looked up with the system resolver
/// (`localhost:8765`). Returns every address, in the resolver's order,
/// without duplicates.
///
/// Errors: no port, a port that is not a number, a name that does not
/// resolve or resolves to nothing.
pub fn resolve_listen(listen: &str) -> Result<Vec<SocketAddr>, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = listen.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let (host, port) = listen.rsplit_once(':').ok_or("not HOST:PORT (e.g. 127.0.0.1:8765 or localhost:8765)")?;
    let port: u16 = port.parse().map_err(|_| format!("{port:?} is not a port number (0 to 65535)"))?;
    if host.is_empty() {
        return Err("no host before the port (e.g. 127.0.0.1:8765 or localhost:8765)".to_owned());
    }
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for addr in (host, port).to_socket_addrs().map_err(|e| format!("{host:?} does not resolve: {e}"))? {
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    if addrs.is_empty() {
        return Err(format!("{host:?} resolves to no address"));
    }
    Ok(addrs)
}

/// TOML string literal for `s` (for printing effective settings).
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".to_owned())
}

fn path_str(p: &Path) -> String {
    quoted(&p.display().to_string())
}

impl Settings {
    /// The effective settings as TOML-like text, with no secrets: token
    /// hashes are elided.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(o, "# config file: {}", self.config_file.as_deref().map(|p| p.display().to_string()).unwrap_or_else(|| "(none: built-in defaults)".to_owned()));
        let _ = writeln!(o, "listen = {}", quoted(&self.listen));
        if self.listen_addrs.len() != 1 || self.listen_addrs[0].to_string() != self.listen {
            let addrs: Vec<String> = self.listen_addrs.iter().map(ToString::to_string).collect();
            let _ = writeln!(o, "# listen resolves to {}", addrs.join(", "));
        }
        match &self.data_dir {
            Ok(d) => { let _ = writeln!(o, "data_dir = {}", path_str(d)); }
            Err(e) => { let _ = writeln!(o, "# data_dir: {e}"); }
        }
        let _ = writeln!(o, "sessions = {}", quoted(match self.sessions { StoreKind::File => "file", StoreKind::Memory => "memory" }));
        let _ = writeln!(o, "sleep_after_minutes = {}", self.sleep_after_minutes);
        let _ = writeln!(o, "residency_limit = {}", self.residency_limit);
        let _ = writeln!(o, "shutdown_grace_seconds = {}", self.shutdown_grace_seconds);
        match &self.worktrees_root {
            Some(p) => { let _ = writeln!(o, "worktrees_root = {}  # trees at <root>/<repo>/<name>", path_str(p)); }
            None => { let _ = writeln!(o, "# worktrees_root: not set (trees at <repo>.worktrees/<name>, beside the repository)"); }
        }
        match &self.awareness_dir {
            Some(p) if p.as_os_str().is_empty() => { let _ = writeln!(o, "awareness_dir = \"\"  # workspace awareness off"); }
            Some(p) => { let _ = writeln!(o, "awareness_dir = {}", path_str(p)); }
            None => { let _ = writeln!(o, "# awareness_dir: default ($AHPD_HOME/active-agents, else <data_dir>/active-agents)"); }
        }
        match &self.claude_projects {
            Some(p) => { let _ = writeln!(o, "claude_projects = {}", path_str(p)); }
            None => { let _ = writeln!(o, "# claude_projects: default (~/.claude/projects when it exists)"); }
        }
        let _ = writeln!(o, "show_external_sessions = {}", quoted(self.show_external_sessions.name()));
        let _ = writeln!(o, "log_format = {}", quoted(match self.log_format { LogFormat::Text => "text", LogFormat::Json => "json" }));
        let list = |v: &[String]| format!("[{}]", v.iter().map(|s| quoted(s)).collect::<Vec<_>>().join(", "));
        let _ = writeln!(o, "allowed_origins = {}  # besides the daemon's own and VS Code desktop's (vscode-file://vscode-app)", list(&self.allowed_origins));
        let _ = writeln!(o, "allowed_hosts = {}  # besides loopback names, or the address a connection arrived on", list(&self.allowed_hosts));
        let _ = writeln!(o, "no_token = {}", self.no_token);
        match (self.users.is_some(), self.no_token) {
            (true, _) => { let _ = writeln!(o, "# connection token: not asked (the users directory signs connections in)"); }
            (false, true) => { let _ = writeln!(o, "# connection token: OFF: any local program or user can drive this daemon"); }
            (false, false) => { let _ = writeln!(o, "# connection token: required of every WebSocket upgrade (ahpd token prints it)"); }
        }
        match &self.users_file {
            Some(p) => { let _ = writeln!(o, "users = {}", path_str(p)); }
            None => { let _ = writeln!(o, "# users: none (single-user host: loopback only, nobody refused)"); }
        }
        match &self.policy_file {
            Some(p) => { let _ = writeln!(o, "policy = {}", path_str(p)); }
            None => { let _ = writeln!(o, "# policy: none (everything allowed)"); }
        }
        match &self.trusted_folders {
            Some(list) if list.is_empty() => {
                let _ = writeln!(o, "trusted_folders = []  # no folder is trusted: no session with a folder can be made");
            }
            Some(list) => {
                let _ = writeln!(o, "trusted_folders = [{}]", list.iter().map(|p| path_str(p)).collect::<Vec<_>>().join(", "));
                for p in list.iter().filter(|p| !p.is_dir()) {
                    let _ = writeln!(o, "# warning: trusted folder {} is not a folder here (yet)", path_str(p));
                }
            }
            None => { let _ = writeln!(o, "# trusted_folders: not set (agents may run in every folder)"); }
        }
        let l = &self.limits;
        let _ = writeln!(o, "\n[limits]");
        let _ = writeln!(o, "frame_max_bytes = {}", l.frame_max_bytes);
        let _ = writeln!(o, "subscriptions_per_conn = {}", l.subscriptions_per_conn);
        let _ = writeln!(o, "message_text_max_bytes = {}", l.message_text_max_bytes);
        let _ = writeln!(o, "frames_per_second = {}", l.frames_per_second);
        let _ = writeln!(o, "frames_burst = {}", l.frames_burst);
        let _ = writeln!(o, "pending_requests_per_conn = {}", l.pending_requests_per_conn);
        let _ = writeln!(o, "connections_max = {}", l.connections_max);
        let _ = writeln!(o, "outgoing_buffer_max_bytes = {}", l.outgoing_buffer_max_bytes);
        let _ = writeln!(o, "queued_messages_per_chat = {}", l.queued_messages_per_chat);
        let _ = writeln!(o, "title_max_bytes = {}", l.title_max_bytes);
        let _ = writeln!(o, "message_attachments_max_bytes = {}", l.message_attachments_max_bytes);
        let _ = writeln!(o, "replay_buffer_max_bytes = {}", l.replay_buffer_max_bytes);
        let f = &self.files;
        let _ = writeln!(o, "\n[files]");
        match f.browse {
            Some(b) => { let _ = writeln!(o, "browse = {b}"); }
            None => { let _ = writeln!(o, "# browse: not set (on without a users directory, off with one)"); }
        }
        match &f.default_directory {
            Some(d) => { let _ = writeln!(o, "default_directory = {}", quoted(d)); }
            None => { let _ = writeln!(o, "# default_directory: not set (the first trusted folder)"); }
        }
        let _ = writeln!(o, "read_max_bytes = {}", f.read_max_bytes);
        let _ = writeln!(o, "list_max_entries = {}", f.list_max_entries);
        let _ = writeln!(o, "watches_per_conn = {}", f.watches_per_conn);
        let _ = writeln!(o, "watch_batch_max = {}", f.watch_batch_max);
        let _ = writeln!(o, "completions_max = {}", f.completions_max);
        let _ = writeln!(o, "\n# agents: echo is built in; {} ACP agents", self.agents.len());
        for a in &self.agents {
            let args = a.args.iter().map(|s| quoted(s)).collect::<Vec<_>>().join(", ");
            let _ = writeln!(
                o,
                "[agents.{}]\ncommand = {}\nargs = [{args}]\ndisplay_name = {}\ndescription = {}\ncan_resume = {}\nstartup_timeout_seconds = {}\nhost_tools = {}",
                quoted(&a.name),
                quoted(&a.program),
                quoted(&a.display_name),
                quoted(&a.description),
                a.can_resume,
                a.startup_timeout_ms as f64 / 1000.0,
                a.host_tools
            );
        }
        if let Some(users) = &self.users {
            let _ = writeln!(o, "\n# users directory: {} users", users.users.len());
            for u in &users.users {
                let role = match u.role { Role::Member => "member", Role::Guest => "guest" };
                let _ = writeln!(o, "[[users]]\nid = {}\ntoken_sha256 = \"<elided>\"\nrole = {}\nadministrator = {}", quoted(&u.id), quoted(role), u.administrator);
                for m in &u.memberships {
                    let _ = writeln!(o, "[[users.memberships]]\nteam = {}\nproject = {}\nprimary = {}", quoted(&m.team), quoted(&m.project), m.primary);
                }
            }
        }
        let _ = writeln!(o, "\n# policy: {} rules (first match wins; none matching = allow)", self.policy.rules.len());
        for r in &self.policy.rules {
            let effect = match r.effect { Effect::Allow => "allow", Effect::Deny => "deny" };
            let list = |v: &[String]| format!("[{}]", v.iter().map(|s| quoted(s)).collect::<Vec<_>>().join(", "));
            let _ = writeln!(o, "[[rules]]\nwho = {}\nproviders = {}\nfolders = {}\neffect = {}", quoted(&r.who), list(&r.providers), list(&r.folders), quoted(effect));
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_name_the_key_and_line() {
        let e = parse_toml::<FileConfig>(Path::new("c.toml"), "listen = \"127.0.0.1:1\"\n\nlisen = 3\n").err().unwrap_or_default();
        assert!(e.contains("line 3") && e.contains("lisen"), "{e}");
        let e = parse_toml::<FileConfig>(Path::new("c.toml"), "[limits]\nframes = 1\n").err().unwrap_or_default();
        assert!(e.contains("line 2") && e.contains("frames"), "{e}");
    }

    #[test]
    fn bad_values_are_refused() {
        let e = parse_toml::<FileConfig>(Path::new("c.toml"), "sleep_after_minutes = -1\n").err().unwrap_or_default();
        assert!(e.contains("line 1") && e.contains("minutes"), "{e}");
        let e = parse_toml::<FileConfig>(Path::new("c.toml"), "show_external_sessions = \"all\"\n").err().unwrap_or_default();
        assert!(e.contains("not one of"), "{e}");
        assert!(parse_toml::<FileConfig>(Path::new("c.toml"), "sessions = \"disk\"\n").is_err());
        assert!(resolve_listen("nowhere").is_err());
        assert!(resolve_listen("localhost:http").is_err());
        assert_eq!(resolve_listen("[::1]:80").map(|a| a.len()), Ok(1));
    }

    /// `[files]` reaches the core's `FilesConfig`: keys given replace the
    /// defaults, the rest stay; an unknown key, a relative default folder
    /// or a zero bound is refused with words naming it.
    #[test]
    fn the_files_table_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let write = |text: &str| {
            let path = dir.path().join("c.toml");
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
            resolve(Given { config: Some(path), ..Given::default() })
        };
        let s = write("[files]\nbrowse = false\ndefault_directory = \"/srv/code\"\ncompletions_max = 7\n").unwrap_or_else(|e| panic!("{e}"));
        let d = ahpd_core::files::FilesConfig::default();
        assert_eq!(s.files, ahpd_core::files::FilesConfig { browse: Some(false), default_directory: Some("/srv/code".into()), completions_max: 7, ..d });
        assert!(s.render().contains("[files]\nbrowse = false\ndefault_directory = \"/srv/code\""), "{}", s.render());
        assert_eq!(write("").map(|s| s.files).ok(), Some(ahpd_core::files::FilesConfig::default()));
        let e = write("[files]\nbrowze = true\n").err().unwrap_or_default();
        assert!(e.contains("line 2") && e.contains("browze"), "{e}");
        let e = write("[files]\ndefault_directory = \"code\"\n").err().unwrap_or_default();
        assert!(e.contains("files.default_directory"), "{e}");
        let e = write("[files]\ncompletions_max = 0\n").err().unwrap_or_default();
        assert!(e.contains("completions_max"), "{e}");
    }
}
