//! The offline subcommands: `ahpd session export|import` and `ahpd
//! sessions list`. They read and write the daemon's data directory
//! directly (the same files `ahpd serve` uses, through the same atomic
//! write path) and never talk to a running daemon.
//!
//! Exit codes: 0 ok, 1 a runtime error (one line on stderr), 2 a usage
//! error (clap's message on stderr).

pub mod list;
pub mod session;
pub mod transcript;

use std::path::PathBuf;
use std::process::ExitCode;

use ahpd_core::ids::ResourceId;

/// Exit code of a runtime error.
const EXIT_RUNTIME: u8 = 1;

/// The data directory option every offline subcommand shares.
#[derive(Debug, Clone, clap::Args)]
pub struct DataDirArg {
    /// The daemon's data directory, the one `ahpd serve` uses
    /// [default: $XDG_DATA_HOME/ahpd, else $HOME/.local/share/ahpd].
    #[arg(long, env = "AHPD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl DataDirArg {
    /// The directory chosen, or the default one.
    ///
    /// Errors: no option, no `AHPD_DATA_DIR`, and neither `XDG_DATA_HOME`
    /// nor `HOME` set.
    pub fn resolve(&self) -> Result<PathBuf, String> {
        match &self.data_dir {
            Some(dir) => Ok(dir.clone()),
            None => crate::default_data_dir(),
        }
    }
}

/// `ahpd session ...`: one session as a plain JSON file.
#[derive(Debug, clap::Args)]
pub struct SessionArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SessionCommand,
}

/// The `ahpd session` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum SessionCommand {
    /// Write one session (record and messages) as a plain JSON file.
    #[command(long_about = session::EXPORT_ABOUT, after_long_help = session::EXPORT_AFTER)]
    Export(session::ExportArgs),
    /// Bring back a session from a file written by `ahpd session export`.
    #[command(long_about = session::IMPORT_ABOUT, after_long_help = session::IMPORT_AFTER)]
    Import(session::ImportArgs),
    /// Print one session for a person: its row, then every message in order
    /// with who sent it (read from the store and the agent's transcripts).
    Show(session::ShowArgs),
}

/// `ahpd sessions ...`: the whole store.
#[derive(Debug, clap::Args)]
pub struct SessionsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SessionsCommand,
}

/// The `ahpd sessions` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum SessionsCommand {
    /// List the sessions in the store: URI, title, owner, status, modified.
    #[command(long_about = list::LIST_ABOUT, after_long_help = list::LIST_AFTER)]
    List(list::ListArgs),
}

/// Runs `ahpd session ...` and maps its result to an exit code.
pub fn run_session(args: SessionArgs) -> ExitCode {
    let result = match args.command {
        SessionCommand::Export(a) => session::export(&a),
        SessionCommand::Import(a) => session::import(&a),
        SessionCommand::Show(a) => session::show(&a),
    };
    finish(result)
}

/// Runs `ahpd sessions ...` and maps its result to an exit code.
pub fn run_sessions(args: SessionsArgs) -> ExitCode {
    let result = match args.command {
        SessionsCommand::List(a) => list::list(&a),
    };
    finish(result)
}

/// 0 on success; else the message on stderr and exit code 1.
fn finish(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("ahpd: {message}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// Parses a session URI argument (clap value parser: a refused URI is a
/// usage error, exit 2).
pub fn parse_session_uri(text: &str) -> Result<ResourceId, String> {
    ResourceId::parse(text).map_err(|e| e.to_string())
}

/// A note on stderr (not an error: the command goes on).
pub fn note(message: &str) {
    eprintln!("ahpd: note: {message}");
}
