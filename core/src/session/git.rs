//! A session's own git work (Sessions page, "Isolation and worktrees",
//! "Per-turn checkpoints"): its first send (or its first after a move)
//! held while its tree and `turn/0` are made, and a checkpoint per turn
//! that completed or failed for good. Git's answers, and the trees other
//! sessions share, are the host's (`host/git.rs`, `host/git.rs`).

use ahp_types::state::Message;
use ahp_types::Uri;

use ahp_types::actions::{SessionConfigChangedAction, SessionWorkingDirectoryReplacedAction, StateAction};

use crate::effect::{LogLevel, OpId};
use crate::git::{path_of_uri, same_folder_in_tree, uri_of_path, GitCmd, GitRecord, GitResult};
use crate::input::Outcome;
use crate::shared::{GitOp, Op, Shared, TreeCut};
use crate::session::{Phase, Session};
use crate::session_config as table;
use crate::session_config::plan_for;
use crate::worktree;

/// What the host does once git answered a session's first send
/// ([`Session::begun`]).
#[derive(Debug, Clone, PartialEq)]
pub enum BegunNext {
    /// Nothing: a stale answer, or a session being disposed (its tree, if
    /// one was made, is already on its way off the disk).
    Nothing,
    /// The tree could not be made: the held turns fail with `reason`.
    FailTurns {
        /// The turns held: (chat, turn id, message).
        pending: Vec<(Uri, String, std::sync::Arc<Message>)>,
        /// What they are told.
        reason: String,
    },
    /// No tree to move into: the held turns go to the agent.
    Release,
    /// The session works in its new tree now: a live one's agents start
    /// again there, a sleeping one wakes; the held turns follow.
    InTree,
}

/// What became of a turn about to go to its agent
/// ([`Session::hold_for_git`]).
#[derive(Debug, Clone, PartialEq)]
pub enum GitHold {
    /// Git has nothing to do first: the turn goes on.
    NotNeeded,
    /// Held until git answers.
    Held,
    /// No tree can be named: every held turn fails with `reason`.
    Failed {
        /// The turns held: (chat, turn id, message).
        pending: Vec<(Uri, String, std::sync::Arc<Message>)>,
        /// What they are told.
        reason: String,
    },
}

impl Session {
    /// Called before a turn goes to its agent. A session that has not asked
    /// git yet (its first send, in a local folder) holds the turn while its
    /// tree and `turn/0` are made; so does one whose git work is in flight.
    /// A session a client moved asks again about its new root, and works in
    /// the folder it was moved to: no tree is cut there (the one it had
    /// stays its own). A worktree whose config names no base reads the
    /// folder's facts first (`GitOp::Base`).
    pub(crate) fn hold_for_git(&mut self, sh: &mut Shared, chat: &Uri, turn_id: &str, message: &std::sync::Arc<Message>) -> GitHold {
        let begun = self.record.git.as_ref().is_some_and(|g| !g.moved);
        let beginning = self.work.git_begin.is_some();
        if begun && !beginning {
            return GitHold::NotNeeded;
        }
        let Some(folder) = self.record.working_directories.first().and_then(|u| path_of_uri(u)) else {
            return GitHold::NotNeeded;
        };
        self.work.pending_sends.push((chat.clone(), turn_id.to_owned(), message.clone()));
        if beginning {
            return GitHold::Held;
        }
        let session_uri = self.record.resource.clone();
        let key = self.record.key().into_owned();
        let values = &self.record.config;
        let moved = self.record.git.as_ref().is_some_and(|g| g.moved);
        let worktree = if table::worktree_asked(values) && !moved {
            let prefix = table::string_value(values, table::BRANCH_PREFIX, "");
            match worktree::session_branch(&prefix, &key) {
                Ok(new_branch) => Some((plan_for(values, &new_branch), new_branch)),
                Err(e) => {
                    let pending = std::mem::take(&mut self.work.pending_sends);
                    return GitHold::Failed { pending, reason: format!("the worktree could not be made: {e}") };
                }
            }
        } else {
            None
        };
        let checkpoint_ref = worktree::checkpoint_ref(&key, 0);
        let (purpose, command) = match worktree {
            Some((plan, new_branch)) if plan.base.is_none() => {
                let cut = TreeCut::Begin { session: session_uri, folder: folder.clone(), checkpoint_ref, new_branch, plan };
                (GitOp::Base(Box::new(cut)), GitCmd::Inspect { folder, also: Vec::new() })
            }
            worktree => (
                GitOp::Begin { session: session_uri, folder: folder.clone() },
                GitCmd::Begin { folder, checkpoint_ref, worktree: worktree.map(|(plan, _)| plan) },
            ),
        };
        let op = sh.git(Op::Git(purpose), command);
        self.work.git_begin = Some(op);
        self.work.git_ops.insert(op);
        GitHold::Held
    }

    /// A turn ended (completed, or failed for good): write its checkpoint
    /// and read the session's changes. A session in no repository, or one
    /// that has not asked git yet, or one a client moved, has none.
    pub(crate) fn checkpoint_turn(&mut self, sh: &mut Shared) {
        let key = self.record.key().into_owned();
        let Some(git) = self.record.git.as_mut() else { return };
        if git.repo_root.is_none() || git.moved {
            return;
        }
        crate::mark!("checkpoint_written_at_turn_end");
        git.checkpoints += 1;
        let n = git.checkpoints;
        let (workdir, base, exclude) = match &git.worktree {
            Some(w) => (w.path.clone(), w.base_commit.clone(), w.placed.clone()),
            None => (git.folder.clone(), worktree::checkpoint_ref(&key, 0), Vec::new()),
        };
        let op = sh.git(
            Op::Git(GitOp::Checkpoint { session: self.record.resource.clone() }),
            GitCmd::Checkpoint { workdir, checkpoint_ref: worktree::checkpoint_ref(&key, n), base, exclude },
        );
        self.work.git_ops.insert(op);
    }

    /// Git answered this session's first send (op `op`, about `folder`):
    /// the facts and the tree become its git record. A worktree asked for
    /// outside a repository is a folder session; a folder session's turn
    /// runs whatever git says (it only goes without checkpoints); a
    /// worktree git could not make fails the held turns. In a new tree the
    /// session works at the folder matching the one the client picked (a
    /// session made in `<repo>/pkg` works in `<tree>/pkg`): the process
    /// root is replaced, and a conversation with nothing in it yet starts
    /// afresh there, while one that holds turns is resumed there, or they
    /// are gone (issue 19, seed 80116).
    pub(crate) fn begun(&mut self, sh: &mut Shared, op: OpId, folder: String, outcome: Outcome) -> BegunNext {
        let session_uri = self.record.resource.clone();
        self.work.git_ops.remove(&op);
        if self.work.git_begin != Some(op) {
            return BegunNext::Nothing;
        }
        self.work.git_begin = None;
        if matches!(self.phase, Phase::Disposing(_)) {
            sh.clean_up_begun(&self.record.key(), folder, outcome);
            return BegunNext::Nothing;
        }
        let mut git_warning = None;
        let (repo_root, tree) = match outcome {
            Outcome::Git(GitResult::Begun { repo_root, worktree }) => (repo_root, worktree),
            Outcome::Failed { message } if !table::worktree_asked(&self.record.config) => {
                git_warning = Some(message);
                (None, None)
            }
            Outcome::Failed { message } => {
                let pending = std::mem::take(&mut self.work.pending_sends);
                crate::mark!("worktree_failed_fails_send");
                sh.log(LogLevel::Warn, "git.worktree_failed", Some(session_uri), message.clone());
                return BegunNext::FailTurns { pending, reason: format!("the worktree could not be made: {message}") };
            }
            _ => (None, None),
        };
        let to_folder = repo_root.is_none() && table::worktree_asked(&self.record.config);
        // A session that moved keeps the folders (and trees) it worked in before.
        let former = self.record.git.take().map(|g| g.former).unwrap_or_default();
        self.record.git = Some(Box::new(GitRecord { folder, repo_root, worktree: tree.clone(), checkpoints: 0, moved: false, former }));
        if let Some(message) = git_warning {
            sh.log(LogLevel::Warn, "git.checkpoint_failed", Some(session_uri.clone()), message);
        }
        if to_folder {
            self.config_read_back(sh, table::ISOLATION, "folder");
        }
        let Some(tree) = tree else {
            self.store_put(sh);
            return BegunNext::Release;
        };
        // Read back, the session is a worktree session on the branch its
        // tree was cut from (Sessions page, "Configuration keys").
        if !tree.base_branch.is_empty() {
            self.config_read_back(sh, table::BRANCH, &tree.base_branch);
        }
        let old = self.record.working_directories.first().cloned();
        let (picked, checkout_root) = self.record.git.as_ref().map(|g| (g.folder.clone(), g.repo_root.clone())).unwrap_or_default();
        let new = uri_of_path(&same_folder_in_tree(&picked, checkout_root.as_deref(), &tree.path));
        match self.record.working_directories.first_mut() {
            Some(first) => *first = new.clone(),
            None => self.record.working_directories.push(new.clone()),
        }
        let resident = self.resident.as_deref();
        for chat in &mut self.record.chats {
            let finished = resident.and_then(|r| r.chats.get(&chat.resource)).is_some_and(|c| !c.turns.is_empty());
            if !finished && chat.kept.iter().all(|k| k.ended.is_none()) {
                chat.fresh = true;
            } else {
                crate::mark!("tree_resumes_chat_with_turns");
            }
        }
        if let Some(old) = old {
            let action = StateAction::SessionWorkingDirectoryReplaced(SessionWorkingDirectoryReplacedAction { directory: old, replacement: new });
            self.emit(sh, &session_uri, action, None);
        }
        crate::mark!("worktree_made_at_first_send");
        sh.log(LogLevel::Info, "git.worktree_made", Some(session_uri), format!("{} on {}", tree.path, tree.branch));
        self.store_put(sh);
        self.summary_changed(sh);
        BegunNext::InTree
    }

    /// Says a config value git settled (`key` = `value`) on the session's
    /// state (`session/configChanged`), when it moved.
    fn config_read_back(&mut self, sh: &mut Shared, key: &str, value: &str) {
        let value = serde_json::Value::String(value.to_owned());
        if self.record.config.get(key) == Some(&value) {
            return;
        }
        self.record.config.insert(key.to_owned(), value.clone());
        let config = [(key.to_owned(), value)].into_iter().collect();
        let action = StateAction::SessionConfigChanged(SessionConfigChangedAction { config, replace: None });
        let session_uri = self.record.resource.clone();
        self.emit(sh, &session_uri, action, None);
    }
}
