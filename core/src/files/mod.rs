//! A session's files over the wire (issue 48): the `resource*` commands,
//! resource watches and `@`-mention completions. The filesystem work itself
//! is the shell's ([`fs`]); every rule (which paths a principal may read or
//! write, the limits, the protocol's errors) is decided here.
//!
//! An owner, as the host's others are: [`Files`] (the watches, and the
//! requests in flight by op) at work as [`FileWork`] (made by
//! `Host::files`: its state, the session table read-only, `Shared`), whose
//! decisions return [`FilesOut`]s that `Host::apply_files` applies. The
//! host only routes: the requests (`Host::on_request`), `Op::Fs`
//! completions (`Host::on_done`), `Input::FsChanged`, and subscriptions of
//! `ahp-resource-watch:` channels.
//!
//! One job per file:
//! - this file: the state, the settings, the outs, the view;
//! - `path`: a `file:` URI read at the edge, containment by whole
//!   components;
//! - `reach`: which folders a principal may read or write (the roots);
//! - `requests`: each command, its two steps (resolve and check, then
//!   act) and its answer;
//! - `watch`: resource watches and their batches;
//! - `mention`: the `@token` of `completions`, in UTF-16 offsets;
//! - `attachments`: a message's attached files, read for its agent within
//!   the session's folders.

pub mod attachments;
pub mod fs;
#[cfg(any(feature = "testkit", feature = "sim"))]
pub mod memfs;
pub mod mention;
pub mod path;
pub mod reach;
mod requests;
mod watch;

use std::collections::BTreeMap;

use ahp_types::Uri;
use serde::{Deserialize, Serialize};

use crate::effect::{ConnId, OpId};
use crate::session::table::SessionTable;
use crate::shared::Shared;

pub use requests::FileReq;
pub use watch::{is_watch_channel, Watch, WATCH_SCHEME};

/// The settings of a session's files over the wire (`files` in the
/// daemon's config file; docs/USER-GUIDE.md "Files").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilesConfig {
    /// Whether `resourceList` and `resourceResolve` may name folders outside
    /// every session's folders, for a folder picker (names and kinds only,
    /// never a file's content), to a principal that may create sessions.
    /// `None` (the default): on a host with no users directory, off on one
    /// with a users directory.
    pub browse: Option<bool>,
    /// The folder clients are told to start browsing from
    /// (`InitializeResult.defaultDirectory`), an absolute path; `None`: the
    /// first trusted folder, else none.
    pub default_directory: Option<String>,
    /// Largest file `resourceRead` answers, in bytes (64 MiB); a larger one
    /// is refused with words that say so.
    pub read_max_bytes: u64,
    /// Most entries `resourceList` answers for one folder (10,000); a
    /// larger folder is refused with words that say so.
    pub list_max_entries: usize,
    /// Most resource watches one connection holds at once (64).
    pub watches_per_conn: usize,
    /// Most changes one `resourceWatch/changed` action carries (1,000);
    /// a larger batch goes out as several actions.
    pub watch_batch_max: usize,
    /// Most items one `completions` answer carries (50).
    pub completions_max: usize,
}

impl Default for FilesConfig {
    fn default() -> FilesConfig {
        FilesConfig {
            browse: None,
            default_directory: None,
            read_max_bytes: 64 << 20,
            list_max_entries: 10_000,
            watches_per_conn: 64,
            watch_batch_max: 1000,
            completions_max: 50,
        }
    }
}

impl FilesConfig {
    /// Whether browsing outside sessions is on, given whether the host has
    /// a users directory (see [`FilesConfig::browse`]).
    pub fn browsing(&self, has_users: bool) -> bool {
        self.browse.unwrap_or(!has_users)
    }
}

/// The files owner's state: the watches by id, and the requests waiting on
/// a filesystem command, by op (each `Op::Fs` in the op table has one).
#[derive(Debug, Clone, Default)]
pub struct Files {
    /// The last watch id given (ids start at 1, never reused in a process).
    pub(crate) last_watch: u64,
    /// The watches, by id.
    pub(crate) watches: BTreeMap<u64, Watch>,
    /// The requests waiting on a command, by its op.
    pub(crate) pending: BTreeMap<OpId, requests::Pending>,
}

impl Files {
    /// The watches, by id (for checkers).
    pub fn watches(&self) -> &BTreeMap<u64, Watch> {
        &self.watches
    }

    /// The number of requests waiting on a filesystem command.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

/// What the files owner asks of the host, applied in order by
/// `Host::apply_files`.
#[derive(Debug, Clone, PartialEq)]
pub enum FilesOut {
    /// A request answered from a session's folders marks the session used
    /// (its place in the residency limit's order), as a subscribe does.
    Touch(Uri),
}

/// The files owner at work: its state with what it may reach (the session
/// table, read, and [`Shared`]). Made by `Host::files`.
pub(crate) struct FileWork<'a> {
    /// The files state.
    pub(crate) state: &'a mut Files,
    /// Every session, read: whose folders a principal may reach.
    pub(crate) sessions: &'a SessionTable,
    /// What every part shares.
    pub(crate) shared: &'a mut Shared,
    /// What the host is asked to do, in order.
    pub(crate) outs: Vec<FilesOut>,
}

impl FileWork<'_> {
    /// A request's reply to `conn`, `id`.
    fn reply(&mut self, conn: ConnId, id: u64, result: serde_json::Value) {
        self.shared.reply(conn, id, result);
    }

    /// A request's error to `conn`, `id`.
    fn refuse(&mut self, conn: ConnId, id: u64, error: ahp_types::messages::JsonRpcError) {
        self.shared.reply_error(conn, id, error);
    }

    /// Sends `command` for `pending` (an `Op::Fs` op whose continuation the
    /// owner keeps).
    fn send(&mut self, pending: requests::Pending, command: fs::FsCmd) {
        let op = self.shared.new_op(crate::shared::Op::Fs);
        self.state.pending.insert(op, pending);
        self.shared.effects.push(crate::effect::Effect::Fs { op, command });
    }

    /// Sends a command nothing answers ([`fs::FsCmd::Unwatch`]): its op id
    /// is taken but not kept in the op table.
    fn send_unanswered(&mut self, command: fs::FsCmd) {
        self.shared.next_op += 1;
        let op = OpId(self.shared.next_op);
        self.shared.effects.push(crate::effect::Effect::Fs { op, command });
    }
}

/// `InitializeResult.defaultDirectory`: the configured folder, else the
/// first trusted folder, else none (as a `file:` URI).
pub fn default_directory(config: &crate::Config) -> Option<Uri> {
    config
        .files
        .default_directory
        .as_deref()
        .or_else(|| config.trust.folders.as_ref().and_then(|f| f.first()).map(String::as_str))
        .filter(|p| p.starts_with('/'))
        .map(crate::git::uri_of_path)
}
