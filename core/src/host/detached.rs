//! The window's own trees (Sessions page, "Isolation and worktrees": "The
//! window has five requests of its own for trees it makes for itself"):
//! `vscode/createAgentHostDetachedWorktree`, `…claim…`, `…setArchived…`,
//! `…delete…` and `…reconcile…`, answered from [`crate::detached`]'s
//! registry with git's `MakeTree`, `ArchiveTree` and `RestoreTree`.
//!
//! A tree is cut for a creating session whose own tree is still pending,
//! from that session's folder and config, on a branch of its own; the
//! session is untouched (its first send still makes its own tree). A handle
//! is known only to the principal that made it. Handles live in memory for
//! the daemon's run; the trees stay on disk across a restart.

use ahp_types::Uri;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::protocol::codec::DetachedMethod;
use crate::protocol::params as parse;
use super::{DetachedOp, GitOp, TreeCut};
use crate::session_config::plan_for;
use super::{Op, Shared};
use crate::session::table::SessionTable;
use crate::detached::{self as data, Detached, Step, UNKNOWN_HANDLE};
use crate::effect::{ConnId, LogLevel, OpId};
use crate::git::{path_of_uri, uri_of_path, GitCmd, GitResult};
use crate::grants::Operation;
use crate::input::Outcome;
use crate::protocol::error::*;
use crate::session::Phase;
use crate::session_config as table;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateParams {
    session: Uri,
    #[serde(default)]
    prompt: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HandleParams {
    handle: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArchivedParams {
    handle: String,
    archived: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReconcileParams {
    scope: Uri,
    active_handles: Vec<String>,
}

/// The -32602 a handle this principal does not hold is answered with.
fn unknown(handle: &str) -> ahp_types::messages::JsonRpcError {
    error(INVALID_PARAMS, format!("{UNKNOWN_HANDLE}: {}", crate::ids::printable(handle)))
}

/// The reply to an archive or delete: `{}`, or with `_meta` saying the tree
/// stayed on disk and why.
fn kept_reply(kept: Option<&str>) -> Value {
    match kept {
        None => json!({}),
        Some(why) => json!({ "_meta": { "ahpd.treeKept": true, "ahpd.treeKeptReason": why } }),
    }
}

/// Why a tree stayed when git said it holds uncommitted work.
const UNCOMMITTED: &str = "the tree holds uncommitted work";

/// The window's trees at work for one request or completion: the registry
/// with what its rules may reach (the session table, read, to see who uses
/// a tree; [`Shared`]). Made by [`Host::window`](super::Host::window).
pub(crate) struct Window<'a> {
    pub(crate) detached: &'a mut data::Registry,
    pub(crate) sessions: &'a SessionTable,
    pub(crate) shared: &'a mut Shared,
    /// What reaches past the registry, for the host to apply in order
    /// (`Host::in_window`).
    pub(crate) outs: Vec<WindowOut>,
}

/// What the window's rules decided that the host must do with the
/// sessions, which the window only reads.
#[derive(Debug)]
pub(crate) enum WindowOut {
    /// The window let go of a tree (a delete, or a handle `reconcile` no
    /// longer names) that sessions work in: it stays on disk, and is handed
    /// to them (`git::Trees::keep_for_users`) as a disposed session's tree
    /// is, so it stays a tree the host made ("A worktree the host made is
    /// trusted when the repository it came from is") and goes with its
    /// last user (issue 19). Sim seeds 33923, 56606: forgotten, the
    /// session's next agent started in a folder nothing trusted.
    KeepForUsers(crate::git::SharedTree),
}

impl Window<'_> {
    /// Routes one of the five requests ([`DetachedMethod`]; the caller
    /// checked the connection is initialized). Every one needs
    /// `session:worktree`, checked before its params are read.
    pub(crate) fn on_detached_request(&mut self, conn: ConnId, id: u64, method: DetachedMethod, params: Value) {
        if let Err(e) = self.shared.authorize(conn, Operation::SessionWorktree) {
            return self.shared.reply_error(conn, id, e);
        }
        match method {
            DetachedMethod::Create => self.detached_create(conn, id, params),
            DetachedMethod::Claim => self.detached_claim(conn, id, params),
            DetachedMethod::SetArchived => self.detached_set_archived(conn, id, params),
            DetachedMethod::Delete => self.detached_delete(conn, id, params),
            DetachedMethod::Reconcile => self.detached_reconcile(conn, id, params),
        }
    }

    /// `createAgentHostDetachedWorktree {session, prompt}`: checks the
    /// session (creating, worktree isolation, its tree still pending, in a
    /// local folder), then asks git for the tree; answered
    /// `{handle, resource}` when it is made.
    fn detached_create(&mut self, conn: ConnId, id: u64, params: Value) {
        let p: CreateParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let refuse = |why: &str| error(INVALID_PARAMS, format!("no detached worktree for {}: {why}", crate::ids::printable(&p.session)));
        let Some(session) = self.sessions.get(&p.session) else {
            return self.shared.reply_error(conn, id, refuse("no such session"));
        };
        if matches!(session.phase(), Phase::Starting(_) | Phase::Disposing(_)) {
            return self.shared.reply_error(conn, id, refuse("the session is being created or disposed"));
        }
        if session.is_announced() || session.record().git.is_some() || session.work().git_begin.is_some() {
            return self.shared.reply_error(conn, id, refuse("the session has started: only a creating session whose tree is pending has one cut"));
        }
        if !table::worktree_asked(&session.record().config) {
            return self.shared.reply_error(conn, id, refuse("the session's isolation is not worktree"));
        }
        let Some(folder_uri) = session.record().working_directories.first().cloned() else {
            return self.shared.reply_error(conn, id, refuse("the session has no folder"));
        };
        let Some(repo) = path_of_uri(&folder_uri) else {
            return self.shared.reply_error(conn, id, refuse("the session's folder is not a local folder"));
        };
        let values = session.record().config.clone();
        let prefix = table::string_value(&values, table::BRANCH_PREFIX, "");
        let branch = match data::branch_for(&prefix, p.prompt.as_deref().unwrap_or("")) {
            Ok(b) => b,
            Err(e) => return self.shared.reply_error(conn, id, refuse(&e.0)),
        };
        let plan = plan_for(&values, &branch);
        let handle = data::handle_from(self.shared.rng.next_u64(), self.shared.rng.next_u64());
        let owner = self.shared.owner_of(conn);
        let make = DetachedOp::Make { conn, id, handle, owner, session: p.session, folder_uri, repo: repo.clone() };
        if plan.base.is_none() {
            // No base named: the folder's facts first (`GitOp::Base`).
            let cut = TreeCut::Make { folder: repo.clone(), new_branch: branch, plan, purpose: make };
            self.shared.git(Op::Git(GitOp::Base(Box::new(cut))), GitCmd::Inspect { folder: repo, also: Vec::new() });
            return;
        }
        self.shared.git(Op::Git(GitOp::Detached(make)), GitCmd::MakeTree { folder: repo, plan });
    }

    /// `claimAgentHostDetachedWorktree {handle}`: marks it claimed (and
    /// seen now).
    fn detached_claim(&mut self, conn: ConnId, id: u64, params: Value) {
        let p: HandleParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let owner = self.shared.owner_of(conn);
        let now = self.shared.now.mono;
        let Some(entry) = self.detached.visible_mut(owner.as_deref(), &p.handle) else {
            return self.shared.reply_error(conn, id, unknown(&p.handle));
        };
        entry.claimed = true;
        entry.last_seen = now;
        self.shared.reply(conn, id, json!({}));
    }

    /// `setAgentHostDetachedWorktreeArchived {handle, archived}`: archive
    /// (off the disk, branch kept) or put back, in the order asked.
    fn detached_set_archived(&mut self, conn: ConnId, id: u64, params: Value) {
        let p: ArchivedParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let owner = self.shared.owner_of(conn);
        let Some(entry) = self.detached.visible_mut(owner.as_deref(), &p.handle) else {
            return self.shared.reply_error(conn, id, unknown(&p.handle));
        };
        entry.queue.push_back(Step::SetArchived { conn, id, archived: p.archived });
        self.detached_next(&p.handle);
    }

    /// `deleteAgentHostDetachedWorktree {handle}`: off the disk and
    /// forgotten; a handle it does not hold is answered `{}`.
    fn detached_delete(&mut self, conn: ConnId, id: u64, params: Value) {
        let p: HandleParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let owner = self.shared.owner_of(conn);
        let Some(entry) = self.detached.visible_mut(owner.as_deref(), &p.handle) else {
            return self.shared.reply(conn, id, json!({}));
        };
        entry.leaving = true;
        entry.queue.push_back(Step::Delete { reply: Some((conn, id)) });
        self.detached_next(&p.handle);
    }

    /// `reconcileAgentHostDetachedWorktrees {scope, activeHandles}`: the
    /// principal's handles in scope that are named are seen now; one in
    /// scope not named for [`data::RETENTION_MS`] is let go.
    fn detached_reconcile(&mut self, conn: ConnId, id: u64, params: Value) {
        let p: ReconcileParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let owner = self.shared.owner_of(conn);
        let now = self.shared.now.mono;
        let mut expired = Vec::new();
        for handle in self.detached.handles_of(owner.as_deref()) {
            let Some(entry) = self.detached.get_mut(&handle) else { continue };
            if !entry.in_scope(&p.scope) {
                continue;
            }
            if p.active_handles.contains(&handle) {
                entry.last_seen = now;
            } else if entry.expired(now) {
                entry.leaving = true;
                entry.queue.push_back(Step::Delete { reply: None });
                expired.push(handle);
            }
        }
        for handle in expired {
            crate::mark!("detached_expired");
            self.shared.log(LogLevel::Info, "detached.expired", None, format!(
                "handle {handle} went unnamed for {} h: let go", data::RETENTION_MS / 3_600_000
            ));
            self.detached_next(&handle);
        }
        self.shared.reply(conn, id, json!({}));
    }

    /// The first session (not being disposed) that works in the tree at
    /// `path`, if any: such a tree is in use and stays on disk
    /// ([`super::git::tree_users`]).
    fn tree_user(&self, path: &str) -> Option<Uri> {
        super::git::tree_users(self.sessions, self.detached, path, None).0.into_iter().next()
    }

    /// Starts the handle's next queued step unless one is in flight. A
    /// tree in use is kept without asking git.
    fn detached_next(&mut self, handle: &str) {
        loop {
            let Some(entry) = self.detached.get_mut(handle) else { return };
            if entry.busy {
                return;
            }
            let Some(step) = entry.queue.pop_front() else { return };
            let (repo, tree) = (entry.repo.clone(), entry.tree.clone());
            let archive = !matches!(step, Step::SetArchived { archived: false, .. });
            if archive {
                if let Some(user) = self.tree_user(&tree.path) {
                    let why = format!("the tree is the working directory of {user}");
                    self.shared.log(LogLevel::Warn, "detached.tree_kept", Some(user), format!("{}: {why}; it stays on disk", tree.path));
                    self.detached_finish(handle, step, Ok(Some(why)));
                    continue;
                }
            }
            if let Some(entry) = self.detached.get_mut(handle) {
                entry.busy = true;
            }
            let command = if archive { GitCmd::ArchiveTree { repo, worktree: tree, removal: crate::git::TREE_REMOVAL } } else { GitCmd::RestoreTree { repo, worktree: tree } };
            self.shared.git(Op::Git(GitOp::Detached(DetachedOp::Step { handle: handle.to_owned(), step })), command);
            return;
        }
    }

    /// A step ended: `Ok(kept)` (with why the tree stayed, if it did) or
    /// `Err` with git's words. Answers its request and updates the handle.
    fn detached_finish(&mut self, handle: &str, step: Step, result: Result<Option<String>, String>) {
        match step {
            Step::SetArchived { conn, id, archived } => match result {
                Ok(kept) => {
                    if let Some(entry) = self.detached.get_mut(handle) {
                        entry.archived = archived;
                    }
                    self.shared.reply(conn, id, kept_reply(kept.as_deref()));
                }
                Err(message) => {
                    let what = if archived { "archived" } else { "put back" };
                    self.shared.reply_error(conn, id, error(INTERNAL_ERROR, format!("the detached worktree could not be {what}: {message}")));
                }
            },
            Step::Delete { reply } => match result {
                Ok(kept) => {
                    if let Some(entry) = self.detached.remove(handle) {
                        if self.tree_user(&entry.tree.path).is_some() {
                            crate::mark!("window_tree_handed_to_users");
                            // A window's tree has no checkpoint refs of its
                            // own: nothing to delete with it.
                            let tree = crate::git::SharedTree { repo: entry.repo, refs_prefix: String::new(), tree: entry.tree };
                            self.outs.push(WindowOut::KeepForUsers(tree));
                        }
                    }
                    if let Some((conn, id)) = reply {
                        self.shared.reply(conn, id, kept_reply(kept.as_deref()));
                    }
                }
                Err(message) => {
                    // Kept, so a later delete (or reconcile) tries again.
                    if let Some(entry) = self.detached.get_mut(handle) {
                        entry.leaving = false;
                    }
                    self.shared.log(LogLevel::Warn, "detached.delete_failed", None, format!("handle {handle}: {message}"));
                    if let Some((conn, id)) = reply {
                        self.shared.reply_error(conn, id, error(INTERNAL_ERROR, format!("the detached worktree could not be removed: {message}")));
                    }
                }
            },
        }
    }

    /// A git command for a window's tree answered.
    pub(crate) fn on_detached_done(&mut self, _op: OpId, purpose: DetachedOp, outcome: Outcome) {
        match purpose {
            DetachedOp::Make { conn, id, handle, owner, session, folder_uri, repo } => match outcome {
                Outcome::Git(GitResult::TreeMade { worktree }) => {
                    crate::mark!("detached_tree_made");
                    self.shared.log(LogLevel::Info, "detached.tree_made", Some(session.clone()), format!(
                        "{} on {} (handle {handle})", worktree.path, worktree.branch
                    ));
                    // The tree's folder matching the one the session was
                    // in, as a session's own tree is entered.
                    let checkout_root = (!worktree.repo_root.is_empty()).then_some(worktree.repo_root.as_str());
                    let resource = uri_of_path(&crate::git::same_folder_in_tree(&repo, checkout_root, &worktree.path));
                    let entry = Detached {
                        owner,
                        session,
                        folder_uri,
                        repo,
                        tree: worktree,
                        claimed: false,
                        archived: false,
                        last_seen: self.shared.now.mono,
                        leaving: false,
                        busy: false,
                        queue: Default::default(),
                    };
                    self.detached.insert(handle.clone(), entry);
                    let mut result = Map::new();
                    result.insert("handle".to_owned(), Value::String(handle));
                    result.insert("resource".to_owned(), Value::String(resource));
                    self.shared.reply(conn, id, Value::Object(result));
                }
                Outcome::Failed { message } => {
                    crate::mark!("detached_make_failed");
                    self.shared.log(LogLevel::Warn, "detached.make_failed", Some(session), message.clone());
                    self.shared.reply_error(conn, id, error(INTERNAL_ERROR, format!("the detached worktree could not be made: {message}")));
                }
                other => self.shared.reply_error(conn, id, error(INTERNAL_ERROR, format!("the detached worktree could not be made: git answered {other:?}"))),
            },
            DetachedOp::Step { handle, step } => {
                if let Some(entry) = self.detached.get_mut(&handle) {
                    entry.busy = false;
                }
                let result = match outcome {
                    Outcome::Git(GitResult::TreeArchived { kept: true }) => {
                        let path = self.detached.get_mut(&handle).map(|e| e.tree.path.clone()).unwrap_or_default();
                        self.shared.log(LogLevel::Warn, "detached.tree_kept", None, format!("{path}: {UNCOMMITTED}; it stays on disk"));
                        Ok(Some(UNCOMMITTED.to_owned()))
                    }
                    Outcome::Git(GitResult::TreeArchived { kept: false } | GitResult::TreeRestored) => Ok(None),
                    Outcome::Failed { message } => Err(message),
                    other => Err(format!("git answered {other:?}")),
                };
                self.detached_finish(&handle, step, result);
                self.detached_next(&handle);
            }
        }
    }
}
