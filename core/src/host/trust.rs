//! Where folder trust is asked ([`crate::trust`]; Sessions page,
//! "Isolation and worktrees"): before a session is made, before a client
//! gives it another folder, and before a session is woken, so no agent
//! starts in a folder the operator did not trust.

use ahp_types::Uri;

use super::Host;
use crate::effect::LogLevel;
use crate::trust::MadeTree;

impl Host {
    /// The trees this host made, each with the repository it is a checkout
    /// of: every session's own tree, the ones sessions kept from folders
    /// they moved away from, and the window's detached trees.
    fn made_trees(&self) -> Vec<MadeTree<'_>> {
        fn known(w: &crate::git::WorktreeRecord) -> Option<&str> {
            (!w.repo_root.is_empty()).then_some(w.repo_root.as_str())
        }
        let mut trees = Vec::new();
        for session in self.sessions.values() {
            if let Some(t) = &session.record.in_tree {
                trees.push(MadeTree { path: &t.path, repo: Some(&t.repo_root) });
            }
            for t in &session.record.shared_trees {
                trees.push(MadeTree { path: &t.tree.path, repo: known(&t.tree).or(Some(t.repo.as_str())) });
            }
            let Some(git) = session.record.git.as_ref() else { continue };
            if let Some(w) = &git.worktree {
                trees.push(MadeTree { path: &w.path, repo: known(w).or(git.repo_root.as_deref()) });
            }
            for w in git.former.iter().filter_map(|f| f.worktree.as_ref()) {
                trees.push(MadeTree { path: &w.path, repo: known(w) });
            }
        }
        for (_, d) in self.detached.iter() {
            trees.push(MadeTree { path: &d.tree.path, repo: known(&d.tree) });
        }
        trees
    }

    /// The window's tree (a detached worktree) `folder` is inside, if any,
    /// as a new session's record keeps it.
    pub(crate) fn window_tree_of(&self, folder: Option<&Uri>) -> Option<crate::git::TreeOrigin> {
        let path = crate::git::path_of_uri(folder?).and_then(|p| crate::git::normalize_path(&p))?;
        self.detached.iter().map(|(_, d)| &d.tree).find(|t| !t.repo_root.is_empty() && crate::trust::within(&path, &t.path)).map(|t| {
            crate::git::TreeOrigin { path: t.path.clone(), repo_root: t.repo_root.clone() }
        })
    }

    /// Whether agents may run in every one of `folders` (Sessions page: "A
    /// worktree the host made is trusted when the repository it came from
    /// is"). `Err` is the reason a client reads. Free when no list of
    /// trusted folders is kept. With a list, a session with no folder is
    /// refused: its agent would start wherever the host runs it, which no
    /// entry of the list names.
    pub(crate) fn trusted(&self, folders: &[Uri]) -> Result<(), String> {
        if !self.config.trust.gated() {
            return Ok(());
        }
        if folders.is_empty() {
            return Err("this host runs agents only in trusted folders: name a working directory in one of them".to_owned());
        }
        let trees = self.made_trees();
        for folder in folders {
            self.config.trust.check(folder, &trees)?;
        }
        Ok(())
    }

    /// Before a wake: a session read back whose folder is no longer trusted
    /// (the list changed since it was made) is not started; the turns and
    /// requests waiting on it fail saying why, and it stays asleep.
    /// Returns true when the wake was refused.
    pub(crate) fn refuse_untrusted_wake(&mut self, session_uri: &Uri) -> bool {
        let Some(session) = self.sessions.get(session_uri) else { return false };
        let Err(reason) = self.trusted(&session.record.working_directories) else { return false };
        crate::mark!("wake_refused_untrusted_folder");
        self.log(LogLevel::Warn, "session.untrusted_folder", Some(session_uri.clone()), reason.clone());
        let Some(session) = self.sessions.get_mut(session_uri) else { return true };
        let pending = std::mem::take(&mut session.pending_sends);
        let waiters = std::mem::take(&mut session.waiters);
        let reason = format!("the session was not woken: {reason}");
        for (chat, turn_id, _) in pending {
            self.fail_turn(session_uri, &chat, &turn_id, &reason);
        }
        self.fail_waiters_with(session_uri, waiters, crate::protocol::error::PERMISSION_DENIED, &reason);
        true
    }
}
