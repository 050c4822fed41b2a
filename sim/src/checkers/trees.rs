//! History rules about git, trees and trust, checked against the
//! simulated git (`sim/src/git.rs`) and the host's records (Sessions page,
//! "Isolation and worktrees", and `changes` in "The state a session
//! reports").
//!
//! - `git_tree_known`: every tree the host hands git (to archive, put back
//!   or remove) is one git made, with the name, branch and base commit git
//!   answered.
//! - `git_checkpoint_known`: a checkpoint is written for a session the
//!   host holds, counted from that session's own `turn/0` or from a commit
//!   git handed out as a tree's base.
//! - `changes_match_git`: once the host read a checkpoint's answer, the
//!   session's `changes` are the counts of the newest checkpoint git
//!   answered for it.
//! - `worktree_session_in_its_tree`: a worktree session that did not move
//!   works in its tree (its root is the tree or a folder inside it).
//! - `trust_agent_starts_trusted`: no agent is started in a folder the
//!   operator did not trust ("A worktree the host made is trusted when the
//!   repository it came from is").
//! - `tree_in_use_removed` (issue 19): no tree is taken off the disk while
//!   a session that did not make it and is not being disposed works in it
//!   (a tree handed to a session, `SessionRecord::shared_trees`, is not
//!   its own: it goes only with its last user).

use std::collections::BTreeMap;

use ahp_types::state::ChangesSummary;
use ahpd_core::git::{path_of_uri, Changes, GitCmd, GitResult};
use ahpd_core::invariants::Violation;
use ahpd_core::session::Phase;
use ahpd_core::trust::{within, MadeTree};
use ahpd_core::worktree::checkpoint_prefix;
use ahpd_core::{HostView, OpId};

use crate::git::GitWorld;

fn breach(rule: &'static str, detail: String) -> Violation {
    Violation { rule, detail }
}

/// What the trees checker remembers between steps.
#[derive(Debug, Clone, Default)]
pub struct TreesChecker {
    issued: u64,
    /// Checkpoints answered by git and not yet read by the host: op to
    /// (refs prefix, issue order, counts).
    pending: BTreeMap<OpId, (String, u64, Changes)>,
    /// Per refs prefix, the newest checkpoint answer the host read.
    newest: BTreeMap<String, (u64, Changes)>,
}

fn prefix_of(checkpoint_ref: &str) -> &str {
    checkpoint_ref.rfind("turn/").map_or(checkpoint_ref, |i| &checkpoint_ref[..i])
}

fn summary(c: &Changes) -> ChangesSummary {
    ChangesSummary { files: Some(c.files as i64), additions: Some(c.additions as i64), deletions: Some(c.deletions as i64) }
}

impl TreesChecker {
    /// A checker with nothing seen yet.
    pub fn new() -> TreesChecker {
        TreesChecker::default()
    }

    /// The host restarted: answers in flight are gone.
    pub fn on_host_crash(&mut self) {
        self.pending.clear();
        self.newest.clear();
    }

    /// Before `command` runs: what it names must be known.
    pub fn before_command(&mut self, view: &HostView<'_>, git: &GitWorld, command: &GitCmd) -> Result<(), Violation> {
        let tree = match command {
            GitCmd::ArchiveTree { worktree, .. } | GitCmd::RestoreTree { worktree, .. } => Some(worktree),
            GitCmd::Dispose { worktree, .. } => worktree.as_ref(),
            _ => None,
        };
        if let Some(w) = tree.filter(|_| git.enabled) {
            let known = git.made.get(&w.path).is_some_and(|m| m.name == w.name && m.branch == w.branch && m.base_commit == w.base_commit);
            if !known {
                return Err(breach("git_tree_known", format!("the host asked git about a tree git never made: {w:?}")));
            }
        }
        if let GitCmd::Checkpoint { checkpoint_ref, base, .. } = command {
            let prefix = prefix_of(checkpoint_ref);
            if !view.sessions.values().any(|s| checkpoint_prefix(&s.record().key()) == prefix) {
                return Err(breach("git_checkpoint_known", format!("checkpoint {checkpoint_ref} for no session the host holds")));
            }
            let own = base.starts_with(prefix) && base.ends_with("turn/0");
            if !own && !(git.enabled && git.bases.contains(base)) && git.enabled {
                return Err(breach("git_checkpoint_known", format!("checkpoint {checkpoint_ref} counted from {base}, neither its turn/0 nor a tree's base")));
            }
        }
        Ok(())
    }

    /// After `command` ran (answered `result`, delivered as `op`).
    pub fn after_command(&mut self, view: &HostView<'_>, git: &GitWorld, op: OpId, command: &GitCmd, result: &Result<GitResult, String>) -> Result<(), Violation> {
        self.issued += 1;
        if let (GitCmd::Checkpoint { checkpoint_ref, .. }, Ok(GitResult::Checkpointed { changes })) = (command, result) {
            self.pending.insert(op, (prefix_of(checkpoint_ref).to_owned(), self.issued, *changes));
        }
        for removed in &git.removed {
            for (uri, s) in view.sessions.iter() {
                if matches!(s.phase(), Phase::Disposing(_)) {
                    continue;
                }
                let owns = s.record().git.as_ref().is_some_and(|g| {
                    g.made_trees().any(|w| w.path == removed.path)
                });
                let works_in = s.record().working_directories.iter().any(|d| path_of_uri(d).is_some_and(|p| within(&p, &removed.path)));
                if works_in && !owns {
                    return Err(breach("tree_in_use_removed", format!(
                        "{command:?} took {} off the disk while {uri} ({}) works in it (issue 19)",
                        removed.path,
                        s.phase().name()
                    )));
                }
            }
        }
        Ok(())
    }

    /// After the host read the answer `op` (a checkpoint's counts must now
    /// be the newest the session's row shows).
    pub fn after_done(&mut self, view: &HostView<'_>, op: OpId) -> Result<(), Violation> {
        let Some((prefix, seq, changes)) = self.pending.remove(&op) else { return Ok(()) };
        let newest = self.newest.entry(prefix.clone()).or_insert((seq, changes));
        if seq > newest.0 {
            *newest = (seq, changes);
        }
        let want = summary(&newest.1);
        let Some((uri, s)) = view.sessions.iter().find(|(_, s)| checkpoint_prefix(&s.record().key()) == prefix) else { return Ok(()) };
        if s.record().changes.as_deref() != Some(&want) {
            return Err(breach("changes_match_git", format!(
                "{uri} shows changes {:?} after git answered {want:?} for its newest checkpoint",
                s.record().changes
            )));
        }
        Ok(())
    }

    /// After every step: worktree sessions work in their trees.
    pub fn after_step(&self, view: &HostView<'_>) -> Result<(), Violation> {
        for (uri, s) in view.sessions.iter() {
            let Some(g) = s.record().git.as_ref().filter(|g| !g.moved) else { continue };
            let Some(w) = g.worktree.as_ref() else { continue };
            let root = s.record().working_directories.first().and_then(|d| path_of_uri(d));
            if !root.as_deref().is_some_and(|r| within(r, &w.path)) {
                return Err(breach("worktree_session_in_its_tree", format!("{uri} has the tree {} but works in {root:?}", w.path)));
            }
        }
        Ok(())
    }
}

/// An agent is started in `folders`: each must be trusted, counting the
/// trees the host's records keep (its sessions' own, former and window
/// trees they were made in) and the window trees its handles hold.
pub fn check_start_trusted(view: &HostView<'_>, folders: &[String]) -> Result<(), Violation> {
    if !view.config.trust.gated() {
        return Ok(());
    }
    let mut trees: Vec<MadeTree<'_>> = Vec::new();
    for s in view.sessions.values() {
        if let Some(t) = &s.record().in_tree {
            trees.push(MadeTree { path: &t.path, repo: Some(&t.repo_root) });
        }
        for t in &s.record().shared_trees {
            let repo = if t.tree.repo_root.is_empty() { Some(t.repo.as_str()) } else { Some(t.tree.repo_root.as_str()) };
            trees.push(MadeTree { path: &t.tree.path, repo });
        }
        let Some(g) = s.record().git.as_ref() else { continue };
        for w in g.made_trees() {
            let repo = if w.repo_root.is_empty() { g.repo_root.as_deref() } else { Some(w.repo_root.as_str()) };
            trees.push(MadeTree { path: &w.path, repo });
        }
    }
    for w in view.window_trees() {
        trees.push(MadeTree { path: &w.path, repo: (!w.repo_root.is_empty()).then_some(w.repo_root.as_str()) });
    }
    for f in folders {
        if let Err(why) = view.config.trust.check(f, &trees) {
            return Err(breach("trust_agent_starts_trusted", format!("an agent was started in {f}: {why}")));
        }
    }
    Ok(())
}


