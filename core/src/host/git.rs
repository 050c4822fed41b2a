//! The host's git work (Sessions page, "Configuration keys", "Isolation and
//! worktrees", and `changes` in "The state a session reports"):
//! `resolveSessionConfig` and `sessionConfigCompletions` answered from the
//! repository's facts, a worktree session's tree made on its first send,
//! a checkpoint per finished turn with the session's change counts, and
//! the checkpoints and the tree removed on `disposeSession`.
//!
//! An owner, not more of the host: [`Trees`] is a view built by
//! `Host::trees` borrowing only what these rules read and write (the
//! session table, the window's trees read to see who holds a tree, and
//! [`Shared`]). It decides, issues git's commands, writes the records it
//! changes, and returns what reaches past it as [`TreesOut`]s (a turn to
//! fail, waiters to fail, a wake, agents to start again, a dispose to
//! finish, a window's cut that failed), which the host applies in one
//! function (`Host::apply_trees`). Git's answers to the ops it issued
//! come back to it ([`Trees::on_git_done`]); a `createSession`'s or a
//! child's facts go to who asked (`host.rs`, `Host::on_done`), read with
//! [`folder_facts`] (a create must know its folders are directories) and a
//! config question's with [`facts_from`].
//!
//! ## A tree beyond its making
//!
//! A session's trees beyond their making (Sessions page, "Isolation and
//! worktrees"): archiving a session takes its trees off the disk once
//! nothing uses them (at once when it is asleep, else when its agents go;
//! their branches kept; a tree with work nobody committed stays),
//! unarchiving puts them back, and waking it (a turn sent, a client
//! subscribing) puts its own tree back before its agents start in it. A
//! session a client moves to another folder keeps the tree it worked in
//! as its own, archived, put back and removed with it by the same rules.
//!
//! A tree is taken off the disk only when no other session works in it
//! and no window's handle holds it (issue 19): archiving keeps a tree in
//! use on disk, and disposing its maker hands it to the sessions that work
//! in it ([`crate::git::SharedTree`]), the last of which removes it.

use ahp_types::Uri;
use serde_json::{Map, Value};
use super::{DetachedOp, GitOp, Op, Shared, TreeCut};
use crate::continuation::ResolveReq;
use crate::effect::{ConnId, LogLevel, OpId};
use crate::git::{GitCmd, GitResult, RepoFacts, SharedTree, TREE_REMOVAL, WorktreeRecord, path_of_uri};
use crate::session_config::settle_base;
use crate::grants::{Membership, Principal};
use crate::input::Outcome;
use crate::protocol::error::*;
use crate::session::git::BegunNext;
use crate::session::{Phase, Waiter};
use crate::{session_config as table, worktree};
use crate::session::table::SessionTable;

/// What a decision of [`Trees`] needs of the rest of the host, in the
/// order it is to happen: applied by `Host::apply_trees`.
#[derive(Debug)]
pub(crate) enum TreesOut {
    /// A turn held for git fails with `reason` (its tree could not be
    /// made or put back): `Host::fail_turn`.
    FailTurn {
        /// The session.
        session: Uri,
        /// The turn's chat.
        chat: Uri,
        /// The turn.
        turn_id: String,
        /// What the turn's error says.
        reason: String,
    },
    /// What waited on a wake that cannot go on fails with `reason`:
    /// `Host::fail_waiters`.
    FailWaiters {
        /// The session.
        session: Uri,
        /// The waiters, taken off the session.
        waiters: Vec<Waiter>,
        /// What they are answered with.
        reason: String,
    },
    /// The session wakes (its turns held for git go to its agents, or its
    /// tree is back): `Host::wake`.
    Wake(Uri),
    /// A live session's agents start again in its new tree:
    /// `Host::restart_agents`.
    RestartAgents(Uri),
    /// Every git step of the session's dispose answered: the dispose ends
    /// (`Host::dispose_finish`, no store error).
    FinishDispose(Uri),
    /// The facts a window's tree cut was to be settled from could not be
    /// read: the cut fails as its own failure would
    /// (`detached::Window::on_detached_done`).
    WindowCutFailed {
        /// The op the facts answered.
        op: OpId,
        /// The window's request the cut was for.
        purpose: Box<DetachedOp>,
        /// Git's failure.
        outcome: Box<Outcome>,
    },
}

/// A session's trees and git's answers at work for one input or
/// completion: the session table, the window's trees (read: a handle
/// holds a tree) and [`Shared`]. Made by `Host::trees`.
pub(crate) struct Trees<'a> {
    pub(crate) sessions: &'a mut SessionTable,
    pub(crate) detached: &'a crate::detached::Registry,
    pub(crate) shared: &'a mut Shared,
}

/// The memberships of the person on `conn`; `None` for a connection with
/// no person to ask (no principal, this host itself, a plugin).
pub(crate) fn memberships_of(shared: &Shared, conn: ConnId) -> Option<Vec<Membership>> {
    match shared.conns.get(&conn).and_then(|c| c.principal.as_ref()) {
        Some(Principal::User { memberships, .. }) => Some(memberships.clone()),
        _ => None,
    }
}

/// The facts an `Inspect` answered, for a question about config only
/// (`resolveSessionConfig`): a folder git cannot read, or an `Inspect`
/// that did not run, is offered what a folder in no repository is; the
/// operator is told why.
pub(crate) fn facts_from(shared: &mut Shared, outcome: Outcome) -> RepoFacts {
    folder_facts(shared, outcome).unwrap_or_else(|_| RepoFacts::not_a_repo())
}

/// The facts an `Inspect` answered, for a create that must know what its
/// folders are (issue 25: only existing directories): `Err` with why when
/// the command did not run (`Outcome::Failed`) or answered out of turn,
/// since then nothing says the folders are directories. A directory whose
/// repository git could not read is answered as facts
/// ([`RepoFacts::git_error`]): a folder in no repository, its kinds read.
/// Git's words are logged for the operator either way.
pub(crate) fn folder_facts(shared: &mut Shared, outcome: Outcome) -> Result<RepoFacts, String> {
    match outcome {
        Outcome::Git(GitResult::Repo(mut facts)) => {
            if let Some(message) = facts.git_error.take() {
                crate::mark!("git_inspect_repo_unreadable");
                shared.log(LogLevel::Warn, "git.inspect_failed", None, message);
            }
            Ok(facts)
        }
        Outcome::Failed { message } => {
            crate::mark!("git_inspect_failed");
            shared.log(LogLevel::Warn, "git.inspect_failed", None, message.clone());
            Err(message)
        }
        other => Err(format!("git answered {other:?}")),
    }
}

impl Trees<'_> {
    /// `resolveSessionConfig` or `sessionConfigCompletions` (`request`)
    /// for `folder`, checked by the request's routing (grant, trust): the
    /// facts of the folder's repository are asked for first and the
    /// request is answered when they come ([`Trees::on_git_done`]). A
    /// folder that is not a local path is in no repository.
    pub(crate) fn resolve(&mut self, conn: ConnId, id: u64, folder: Option<&str>, request: ResolveReq) {
        match folder.and_then(path_of_uri) {
            Some(folder) => {
                self.shared.git(Op::Git(GitOp::Resolve { conn, id, request: Box::new(request) }), GitCmd::Inspect { folder, also: Vec::new() });
            }
            None => self.answer_resolve(conn, id, request, &RepoFacts::not_a_repo()),
        }
    }

    fn answer_resolve(&mut self, conn: ConnId, id: u64, request: ResolveReq, facts: &RepoFacts) {
        let memberships = memberships_of(self.shared, conn);
        let (provider, config) = match request {
            ResolveReq::Completions { property, query, config } => {
                let asked = config.map(|c| c.into_iter().collect::<Map<String, Value>>()).unwrap_or_default();
                match table::completions(&property, query.as_deref().unwrap_or(""), facts, memberships.as_deref(), &asked) {
                    Some(items) => self.shared.reply(conn, id, serde_json::json!({ "items": items })),
                    None => self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!(
                        "property {} has no completions here",
                        crate::ids::printable(&property)
                    ))),
                }
                return;
            }
            ResolveReq::Resolve { provider, config } => (provider, config),
        };
        let provider = provider.or_else(|| self.shared.config.agents.first().map(|a| a.provider.clone())).unwrap_or_default();
        if !self.shared.config.agents.iter().any(|a| a.provider == provider) {
            return self.shared.reply_error(conn, id, error(PROVIDER_NOT_FOUND, format!("no agent with provider {}", crate::ids::printable(&provider))));
        }
        let asked = config.map(|c| c.into_iter().collect::<Map<String, Value>>()).unwrap_or_default();
        let schema = table::compose(facts, memberships.as_deref(), &asked);
        let values = table::resolve_values(&schema, facts, &asked);
        let mut result = Map::new();
        result.insert("schema".to_owned(), schema.to_json());
        result.insert("values".to_owned(), Value::Object(values));
        self.shared.reply(conn, id, Value::Object(result));
    }

    /// Git answered op `op` issued for `purpose` (every [`GitOp`] but a
    /// create's, a child's and a window's own, which go to who asked).
    /// Returns what the host does next, in order.
    pub(crate) fn on_git_done(&mut self, op: OpId, purpose: GitOp, outcome: Outcome) -> Vec<TreesOut> {
        let mut outs = Vec::new();
        match purpose {
            GitOp::Resolve { conn, id, request } => {
                let facts = facts_from(self.shared, outcome);
                self.answer_resolve(conn, id, *request, &facts);
            }
            GitOp::Begin { session, folder } => self.on_begun(&session, op, folder, outcome, &mut outs),
            GitOp::Checkpoint { session } => match self.sessions.get_mut(&session) {
                Some(s) => s.on_checkpoint(self.shared, op, outcome),
                None => {
                    if let Outcome::Failed { message } = outcome {
                        self.shared.log(LogLevel::Warn, "git.checkpoint_failed", Some(session), message);
                    }
                }
            },
            GitOp::Dispose { session } => {
                match &outcome {
                    Outcome::Failed { message } => self.shared.log(LogLevel::Warn, "git.dispose_failed", Some(session.clone()), message.clone()),
                    Outcome::Git(GitResult::Disposed { kept_tree: true }) => self.shared.log(
                        LogLevel::Warn,
                        "git.tree_kept",
                        Some(session.clone()),
                        "the session's worktree holds uncommitted work: it stays on disk".to_owned(),
                    ),
                    _ => {}
                }
                if self.sessions.get_mut(&session).is_some_and(|s| s.dispose_step_done(op)) {
                    outs.push(TreesOut::FinishDispose(session));
                }
            }
            GitOp::Cleanup => {
                if let Outcome::Failed { message } = outcome {
                    self.shared.log(LogLevel::Warn, "git.dispose_failed", None, message);
                }
            }
            GitOp::TreeArchive { session, path, archived } => self.on_tree_archived(&session, &path, archived, outcome),
            GitOp::Restore { session } => self.on_restored_for_wake(&session, op, outcome, &mut outs),
            GitOp::Base(cut) => self.on_base_facts(op, *cut, outcome, &mut outs),
            // Routed to who asked (`Host::on_done`); never issued here.
            GitOp::Create { .. } | GitOp::Child { .. } | GitOp::Detached(_) => {}
        }
        outs
    }

    /// Git answered a session's first send ([`Session::begun`](crate::session::Session::begun)):
    /// a session disposed meanwhile has the tree made for it removed; else
    /// the held turns fail, go to the agent, or wait for the agents started
    /// again in the new tree.
    fn on_begun(&mut self, session_uri: &Uri, op: OpId, folder: String, outcome: Outcome, outs: &mut Vec<TreesOut>) {
        let Some(session) = self.sessions.get_mut(session_uri) else {
            // Disposed meanwhile: a tree made for it is nobody's.
            if let Ok(rid) = crate::ids::ResourceId::parse(session_uri) {
                self.shared.clean_up_begun(&rid.store_key(), folder, outcome);
            }
            return;
        };
        match session.begun(self.shared, op, folder, outcome) {
            BegunNext::Nothing => {}
            BegunNext::FailTurns { pending, reason } => {
                for (chat, turn_id, _) in pending {
                    outs.push(TreesOut::FailTurn { session: session_uri.clone(), chat, turn_id, reason: reason.clone() });
                }
            }
            // The turns held for git go to their agents (waking the
            // session when its agents are not running).
            BegunNext::Release => {
                if let Some(true) = self.sessions.get_mut(session_uri).map(|s| s.release_held_sends(self.shared)) {
                    outs.push(TreesOut::Wake(session_uri.clone()));
                }
            }
            BegunNext::InTree => match self.sessions.get(session_uri).map(|s| s.phase().shallow()) {
                Some(Phase::Live { .. }) => outs.push(TreesOut::RestartAgents(session_uri.clone())),
                Some(Phase::Asleep) => outs.push(TreesOut::Wake(session_uri.clone())),
                _ => {}
            },
        }
    }

    /// `disposeSession`'s git step: the session's checkpoints and its tree.
    /// Returns the ops to wait for: the dispose answers once every tree it
    /// takes off the disk is gone (a client that sees the reply sees the
    /// tree gone). A tree another session still works in stays, handed to
    /// it ([`Trees::hand_over_tree`]); only the refs go. From then on the
    /// session keeps no tree ([`Trees::let_go_of_trees`]).
    pub(crate) fn dispose(&mut self, session_uri: &Uri) -> Vec<OpId> {
        let ops = self.remove_or_hand_over_trees(session_uri);
        self.let_go_of_trees(session_uri);
        ops
    }

    /// The commands [`Trees::dispose`] waits for, trees handed over first.
    fn remove_or_hand_over_trees(&mut self, session_uri: &Uri) -> Vec<OpId> {
        let Some(session) = self.sessions.get(session_uri) else { return Vec::new() };
        let shared = session.record().shared_trees.to_vec();
        let git = session.record().git.clone();
        let refs_prefix = worktree::checkpoint_prefix(&session.record().key());
        let mut ops = Vec::new();
        let purpose = || Op::Git(GitOp::Dispose { session: session_uri.clone() });
        // Trees handed to it: passed on, or removed with their maker's refs.
        for tree in shared {
            if !self.hand_over_tree(session_uri, &tree) {
                ops.push(self.shared.git(purpose(), GitCmd::Dispose { repo: tree.repo, refs_prefix: tree.refs_prefix, worktree: Some(tree.tree), removal: TREE_REMOVAL }));
            }
        }
        let Some(git) = git else { return ops };
        let kept = |trees: &mut Trees<'_>, repo: &str, w: &WorktreeRecord| {
            trees.hand_over_tree(session_uri, &SharedTree { repo: repo.to_owned(), refs_prefix: refs_prefix.clone(), tree: w.clone() })
        };
        // The folders it moved away from: their refs and trees go too.
        for former in &git.former {
            let worktree = former.worktree.clone().filter(|w| !kept(self, &former.folder, w));
            ops.push(self.shared.git(purpose(), GitCmd::Dispose { repo: former.folder.clone(), refs_prefix: refs_prefix.clone(), worktree, removal: TREE_REMOVAL }));
        }
        if git.repo_root.is_none() || git.moved {
            return ops;
        }
        let worktree = git.worktree.clone().filter(|w| !kept(self, &git.folder, w));
        ops.push(self.shared.git(purpose(), GitCmd::Dispose { repo: git.folder, refs_prefix, worktree, removal: TREE_REMOVAL }));
        ops
    }

    /// From its dispose's git step on, a session keeps no tree: each one
    /// is handed to the sessions that work in it or on its way off the
    /// disk. Its record stops naming them, so a tree on its way off
    /// vouches for nothing ("A worktree the host made is trusted when the
    /// repository it came from is": it is no longer one the host keeps),
    /// and a session made in it meanwhile is refused as any folder outside
    /// the trusted ones is (sim seeds 806, 6807).
    fn let_go_of_trees(&mut self, session_uri: &Uri) {
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.trees_mut().let_go();
        }
    }

    /// The facts a tree's base is settled from came ([`GitOp::Base`]): the
    /// cut is sent with its base and names settled. A read git could not
    /// do fails the cut as the cut's own failure would (git's words).
    fn on_base_facts(&mut self, op: OpId, cut: TreeCut, outcome: Outcome, outs: &mut Vec<TreesOut>) {
        crate::mark!("tree_base_from_folder_facts");
        let facts = match outcome {
            Outcome::Git(GitResult::Repo(facts)) => facts,
            Outcome::Failed { message } => {
                let failed = Outcome::Failed { message };
                return match cut {
                    TreeCut::Begin { session, folder, .. } => self.on_begun(&session, op, folder, failed, outs),
                    TreeCut::Make { purpose, .. } => outs.push(TreesOut::WindowCutFailed { op, purpose: Box::new(purpose), outcome: Box::new(failed) }),
                };
            }
            _ => RepoFacts::not_a_repo(),
        };
        match cut {
            TreeCut::Begin { session, folder, checkpoint_ref, new_branch, mut plan } => {
                let Some(s) = self.sessions.get_mut(&session) else { return };
                if !s.git_answered(op) {
                    return;
                }
                // Disposed meanwhile: no tree is cut for it.
                if matches!(s.phase(), Phase::Disposing(_)) {
                    return;
                }
                settle_base(&mut plan, &new_branch, &facts);
                let begin = self.shared.git(
                    Op::Git(GitOp::Begin { session: session.clone(), folder: folder.clone() }),
                    GitCmd::Begin { folder, checkpoint_ref, worktree: Some(plan) },
                );
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.git_began(begin);
                }
            }
            TreeCut::Make { folder, new_branch, mut plan, purpose } => {
                settle_base(&mut plan, &new_branch, &facts);
                self.shared.git(Op::Git(GitOp::Detached(purpose)), GitCmd::MakeTree { folder, plan });
            }
        }
    }
}

// ---- A tree beyond its making (module docs) ----
impl Trees<'_> {
    /// Every tree the session keeps, with the folder of the repository it
    /// was cut from: its own (unless it moved away from it), then those of
    /// the folders it moved away from.
    fn trees_of(&self, session_uri: &Uri) -> Vec<(String, WorktreeRecord)> {
        let Some(git) = self.sessions.get(session_uri).and_then(|s| s.record().git.as_ref()) else { return Vec::new() };
        let own = git.worktree.iter().filter(|_| !git.moved).map(|w| (git.folder.clone(), w.clone()));
        let former = git.former.iter().filter_map(|f| f.worktree.clone().map(|w| (f.folder.clone(), w)));
        own.chain(former).collect()
    }

    /// Who uses the tree at `path` besides `except` ([`tree_users`]).
    fn tree_users(&self, path: &str, except: Option<&Uri>) -> (Vec<Uri>, bool) {
        tree_users(self.sessions, self.detached, path, except)
    }

    /// Whether the session's record keeps the tree at `path` (its own, one
    /// it moved away from, or one handed to it).
    fn holds_tree(&self, session_uri: &Uri, path: &str) -> bool {
        let Some(record) = self.sessions.get(session_uri).map(|s| s.record()) else { return false };
        let made = record.git.as_ref().is_some_and(|g| {
            g.made_trees().any(|w| w.path == path)
        });
        made || record.shared_trees.iter().any(|t| t.tree.path == path)
    }

    /// `from` is being disposed and keeps `tree`: if another session works
    /// in it (or a window's handle holds it), the tree stays on disk and
    /// each such session not already keeping it is handed it (written to
    /// its record). Returns whether the tree stays.
    fn hand_over_tree(&mut self, from: &Uri, tree: &SharedTree) -> bool {
        let (users, handle) = self.tree_users(&tree.tree.path, Some(from));
        if users.is_empty() && !handle {
            return false;
        }
        crate::mark!("tree_kept_in_use");
        self.hand_to(users, tree, from);
        true
    }

    /// The window let go of `tree` while sessions work in it
    /// (`detached::WindowOut::KeepForUsers`): each of them
    /// not already keeping it is handed it, as a disposed session's tree
    /// is ([`Trees::hand_over_tree`]).
    pub(crate) fn keep_for_users(&mut self, tree: &SharedTree) {
        let (users, _) = self.tree_users(&tree.tree.path, None);
        self.hand_to(users, tree, "the window");
    }

    /// Hands `tree` (made by `maker`) to each of `users` that does not keep
    /// it yet, written to its record.
    fn hand_to(&mut self, users: Vec<Uri>, tree: &SharedTree, maker: &str) {
        for user in users {
            if self.holds_tree(&user, &tree.tree.path) {
                continue;
            }
            if let Some(s) = self.sessions.get_mut(&user) {
                s.trees_mut().keep(tree.clone());
            }
            self.shared.log(LogLevel::Info, "git.tree_handed", Some(user.clone()), format!("{} (made by {maker}) stays: this session works in it", tree.tree.path));
            self.store_put(&user);
        }
    }

    /// Writes the session's record ([`Session::store_put`](crate::session::Session::store_put)).
    fn store_put(&mut self, session_uri: &Uri) {
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.store_put(self.shared);
        }
    }

    /// A session went: archived sleeping sessions whose trees it kept on
    /// disk (it worked in them) may take them off now.
    pub(crate) fn trees_freed(&mut self) {
        let waiting: Vec<Uri> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.record().is_archived && s.is_asleep())
            .filter(|(u, _)| self.trees_of(u).iter().any(|(_, t)| !t.off_disk))
            .map(|(u, _)| u.clone())
            .collect();
        for uri in waiting {
            self.trees_follow_archive(&uri, true);
        }
    }

    /// The tree at `path` among the session's, to change.
    fn tree_mut(&mut self, session_uri: &Uri, path: &str) -> Option<&mut WorktreeRecord> {
        self.sessions.get_mut(session_uri)?.trees_mut().at(path)
    }

    /// The session's archived bit changed: its trees go off the disk
    /// (archived) or come back (unarchived). Only once nothing uses them:
    /// a session whose agents run, or with a turn about to go, keeps its
    /// trees until it sleeps ([`Trees::archived_trees_go`]); a tree with
    /// uncommitted work stays (the shell checks that).
    pub(crate) fn trees_follow_archive(&mut self, session_uri: &Uri, archived: bool) {
        let Some(session) = self.sessions.get(session_uri) else { return };
        if archived && (!session.is_asleep() || !session.work().pending_sends.is_empty() || session.work().git_begin.is_some()) {
            return;
        }
        for (repo, tree) in self.trees_of(session_uri) {
            if archived == tree.off_disk {
                continue;
            }
            let path = tree.path.clone();
            if archived {
                let (users, handle) = self.tree_users(&path, Some(session_uri));
                if !users.is_empty() || handle {
                    crate::mark!("archive_keeps_tree_in_use");
                    let who = users.first().map_or_else(|| "a window's handle holds it".to_owned(), |u| format!("{u} works in it"));
                    self.shared.log(LogLevel::Info, "git.tree_kept", Some(session_uri.clone()), format!("{path} stays on disk: {who}"));
                    continue;
                }
            }
            let command = if archived { GitCmd::ArchiveTree { repo, worktree: tree, removal: crate::git::TREE_REMOVAL } } else { GitCmd::RestoreTree { repo, worktree: tree } };
            self.shared.git(Op::Git(GitOp::TreeArchive { session: session_uri.clone(), path, archived }), command);
        }
    }

    /// A session just went to sleep: if it is archived, its trees go off
    /// the disk now that its agents are gone.
    pub(crate) fn archived_trees_go(&mut self, session_uri: &Uri) {
        if self.sessions.get(session_uri).is_some_and(|s| s.record().is_archived) {
            self.trees_follow_archive(session_uri, true);
        }
    }

    /// A tree went off the disk or came back.
    fn on_tree_archived(&mut self, session_uri: &Uri, path: &str, archived: bool, outcome: Outcome) {
        match outcome {
            Outcome::Git(GitResult::TreeArchived { kept: true }) => {
                crate::mark!("tree_kept_dirty");
                self.shared.log(LogLevel::Warn, "git.tree_kept", Some(session_uri.clone()), format!("{path} holds uncommitted work: it stays on disk"));
            }
            Outcome::Git(GitResult::TreeArchived { kept: false }) | Outcome::Git(GitResult::TreeRestored) => {
                let Some(tree) = self.tree_mut(session_uri, path) else { return };
                tree.off_disk = archived;
                crate::mark!("tree_restored_before_wake");
                let event = if archived { "git.tree_archived" } else { "git.tree_restored" };
                self.shared.log(LogLevel::Info, event, Some(session_uri.clone()), path.to_owned());
                self.store_put(session_uri);
            }
            Outcome::Failed { message } => {
                crate::mark!("tree_restore_failed");
                let event = if archived { "git.archive_failed" } else { "git.restore_failed" };
                self.shared.log(LogLevel::Warn, event, Some(session_uri.clone()), format!("{path}: {message}"));
            }
            _ => {}
        }
    }

    /// Before a sleeping session's agents start again: its own tree, off
    /// the disk since it was archived, is put back first (its agents run
    /// in it). Returns true when the wake waits for that.
    pub(crate) fn restore_before_wake(&mut self, session_uri: &Uri) -> bool {
        let Some(session) = self.sessions.get(session_uri) else { return false };
        if session.work().git_begin.is_some() {
            // Already being put back: the wake goes on when it is.
            return session.record().git.as_ref().and_then(|g| g.worktree.as_ref()).is_some_and(|w| w.off_disk);
        }
        let Some(git) = session.record().git.as_ref().filter(|g| !g.moved) else { return false };
        let Some(tree) = git.worktree.clone().filter(|w| w.off_disk) else { return false };
        let repo = git.folder.clone();
        let op = self.shared.git(Op::Git(GitOp::Restore { session: session_uri.clone() }), GitCmd::RestoreTree { repo, worktree: tree });
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.git_began(op);
        }
        true
    }

    /// The session's own tree is back (the wake goes on) or could not be
    /// put back: the turns waiting on the wake fail saying why (never run
    /// in another folder), its waiters fail, and it stays asleep.
    fn on_restored_for_wake(&mut self, session_uri: &Uri, op: OpId, outcome: Outcome, outs: &mut Vec<TreesOut>) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        if !session.git_answered(op) {
            return;
        }
        match outcome {
            Outcome::Git(GitResult::TreeRestored) => {
                if let Some(w) = session.trees_mut().own() {
                    w.off_disk = false;
                }
                self.shared.log(LogLevel::Info, "git.tree_restored", Some(session_uri.clone()), "before its agents start again".to_owned());
                self.store_put(session_uri);
                outs.push(TreesOut::Wake(session_uri.clone()));
            }
            other => {
                let message = match other {
                    Outcome::Failed { message } => message,
                    _ => "git answered something else".to_owned(),
                };
                let (pending, waiters) = session.take_held();
                self.shared.log(LogLevel::Warn, "git.restore_failed", Some(session_uri.clone()), message.clone());
                let reason = format!("the session's worktree could not be put back: {message}");
                for (chat, turn_id, _) in pending {
                    outs.push(TreesOut::FailTurn { session: session_uri.clone(), chat, turn_id, reason: reason.clone() });
                }
                outs.push(TreesOut::FailWaiters { session: session_uri.clone(), waiters, reason });
            }
        }
    }
}

/// Who uses the tree at `path` besides `except`: every session not
/// being disposed with a working directory in it (its agents run
/// there), in URI order, and whether a window's handle holds it. The
/// one place the "in use" of issue 19 is decided: "A tree is taken off
/// the disk only when no session, detached handle or agent uses it".
pub(crate) fn tree_users(sessions: &SessionTable, window: &crate::detached::Registry, path: &str, except: Option<&Uri>) -> (Vec<Uri>, bool) {
    let users = sessions
        .iter()
        .filter(|(uri, s)| Some(*uri) != except && !matches!(s.phase(), Phase::Disposing(_)))
        .filter(|(_, s)| s.record().working_directories.iter().any(|w| path_of_uri(w).is_some_and(|p| crate::trust::within(&p, path))))
        .map(|(uri, _)| uri.clone())
        .collect();
    let handle = window.iter().any(|(_, d)| d.tree.path == path);
    (users, handle)
}
