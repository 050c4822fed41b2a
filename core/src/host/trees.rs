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

use super::GitOp;
use super::{Host, Op};
use crate::effect::{LogLevel, OpId};
use crate::git::{path_of_uri, GitCmd, GitResult, SharedTree, WorktreeRecord};
use crate::input::Outcome;
use crate::session::Phase;

impl Host {
    /// Every tree the session keeps, with the folder of the repository it
    /// was cut from: its own (unless it moved away from it), then those of
    /// the folders it moved away from.
    fn trees_of(&self, session_uri: &Uri) -> Vec<(String, WorktreeRecord)> {
        let Some(git) = self.sessions.get(session_uri).and_then(|s| s.record.git.as_ref()) else { return Vec::new() };
        let own = git.worktree.iter().filter(|_| !git.moved).map(|w| (git.folder.clone(), w.clone()));
        let former = git.former.iter().filter_map(|f| f.worktree.clone().map(|w| (f.folder.clone(), w)));
        own.chain(former).collect()
    }

    /// Who uses the tree at `path` besides `except`: every session not
    /// being disposed with a working directory in it (its agents run
    /// there), in URI order, and whether a window's handle holds it. The
    /// one place the "in use" of issue 19 is decided: "A tree is taken off
    /// the disk only when no session, detached handle or agent uses it".
    pub(crate) fn tree_users(&self, path: &str, except: Option<&Uri>) -> (Vec<Uri>, bool) {
        let sessions = self
            .sessions
            .iter()
            .filter(|(uri, s)| Some(*uri) != except && !matches!(s.phase, Phase::Disposing { .. }))
            .filter(|(_, s)| s.record.working_directories.iter().any(|w| path_of_uri(w).is_some_and(|p| crate::trust::within(&p, path))))
            .map(|(uri, _)| uri.clone())
            .collect();
        let handle = self.detached.iter().any(|(_, d)| d.tree.path == path);
        (sessions, handle)
    }

    /// Whether the session's record keeps the tree at `path` (its own, one
    /// it moved away from, or one handed to it).
    fn holds_tree(&self, session_uri: &Uri, path: &str) -> bool {
        let Some(record) = self.sessions.get(session_uri).map(|s| &s.record) else { return false };
        let made = record.git.as_ref().is_some_and(|g| {
            g.made_trees().any(|w| w.path == path)
        });
        made || record.shared_trees.iter().any(|t| t.tree.path == path)
    }

    /// `from` is being disposed and keeps `tree`: if another session works
    /// in it (or a window's handle holds it), the tree stays on disk and
    /// each such session not already keeping it is handed it (written to
    /// its record). Returns whether the tree stays.
    pub(crate) fn hand_over_tree(&mut self, from: &Uri, tree: &SharedTree) -> bool {
        let (users, handle) = self.tree_users(&tree.tree.path, Some(from));
        if users.is_empty() && !handle {
            return false;
        }
        crate::mark!("tree_kept_in_use");
        for user in users {
            if self.holds_tree(&user, &tree.tree.path) {
                continue;
            }
            if let Some(s) = self.sessions.get_mut(&user) {
                s.record.shared_trees.push(tree.clone());
            }
            self.shared.log(LogLevel::Info, "git.tree_handed", Some(user.clone()), format!("{} (made by {from}) stays: this session works in it", tree.tree.path));
            self.store_put(&user);
        }
        true
    }

    /// A session went: archived sleeping sessions whose trees it kept on
    /// disk (it worked in them) may take them off now.
    pub(crate) fn trees_freed(&mut self) {
        let waiting: Vec<Uri> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.record.is_archived && s.phase == Phase::Asleep)
            .filter(|(u, _)| self.trees_of(u).iter().any(|(_, t)| !t.off_disk))
            .map(|(u, _)| u.clone())
            .collect();
        for uri in waiting {
            self.trees_follow_archive(&uri, true);
        }
    }

    /// The tree at `path` among the session's, to change.
    fn tree_mut(&mut self, session_uri: &Uri, path: &str) -> Option<&mut WorktreeRecord> {
        let git = self.sessions.get_mut(session_uri)?.record.git.as_mut()?;
        if let Some(w) = git.worktree.as_mut().filter(|w| w.path == path) {
            return Some(w);
        }
        git.former.iter_mut().filter_map(|f| f.worktree.as_mut()).find(|w| w.path == path)
    }

    /// The session's archived bit changed: its trees go off the disk
    /// (archived) or come back (unarchived). Only once nothing uses them:
    /// a session whose agents run, or with a turn about to go, keeps its
    /// trees until it sleeps ([`Host::archived_trees_go`]); a tree with
    /// uncommitted work stays (the shell checks that).
    pub(crate) fn trees_follow_archive(&mut self, session_uri: &Uri, archived: bool) {
        let Some(session) = self.sessions.get(session_uri) else { return };
        if archived && (session.phase != Phase::Asleep || !session.pending_sends.is_empty() || session.git_begin.is_some()) {
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
        if self.sessions.get(session_uri).is_some_and(|s| s.record.is_archived) {
            self.trees_follow_archive(session_uri, true);
        }
    }

    /// A tree went off the disk or came back.
    pub(crate) fn on_tree_archived(&mut self, session_uri: &Uri, path: &str, archived: bool, outcome: Outcome) {
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
        if session.git_begin.is_some() {
            // Already being put back: the wake goes on when it is.
            return session.record.git.as_ref().and_then(|g| g.worktree.as_ref()).is_some_and(|w| w.off_disk);
        }
        let Some(git) = session.record.git.as_ref().filter(|g| !g.moved) else { return false };
        let Some(tree) = git.worktree.clone().filter(|w| w.off_disk) else { return false };
        let repo = git.folder.clone();
        let op = self.shared.git(Op::Git(GitOp::Restore { session: session_uri.clone() }), GitCmd::RestoreTree { repo, worktree: tree });
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.git_begin = Some(op);
            s.git_ops.insert(op);
        }
        true
    }

    /// The session's own tree is back (the wake goes on) or could not be
    /// put back: the turns waiting on the wake fail saying why (never run
    /// in another folder), its waiters fail, and it stays asleep.
    pub(crate) fn on_restored_for_wake(&mut self, session_uri: &Uri, op: OpId, outcome: Outcome) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        session.git_ops.remove(&op);
        if session.git_begin != Some(op) {
            return;
        }
        session.git_begin = None;
        match outcome {
            Outcome::Git(GitResult::TreeRestored) => {
                if let Some(w) = session.record.git.as_mut().and_then(|g| g.worktree.as_mut()) {
                    w.off_disk = false;
                }
                self.shared.log(LogLevel::Info, "git.tree_restored", Some(session_uri.clone()), "before its agents start again".to_owned());
                self.store_put(session_uri);
                self.wake(session_uri);
            }
            other => {
                let message = match other {
                    Outcome::Failed { message } => message,
                    _ => "git answered something else".to_owned(),
                };
                let pending = std::mem::take(&mut session.pending_sends);
                let waiters = std::mem::take(&mut session.waiters);
                self.shared.log(LogLevel::Warn, "git.restore_failed", Some(session_uri.clone()), message.clone());
                let reason = format!("the session's worktree could not be put back: {message}");
                for (chat, turn_id, _) in pending {
                    self.fail_turn(session_uri, &chat, &turn_id, &reason);
                }
                self.fail_waiters(session_uri, waiters, &reason);
            }
        }
    }
}
