//! The host's git work (Sessions page, "Configuration keys", "Isolation and
//! worktrees", and `changes` in "The state a session reports"):
//! `resolveSessionConfig` and `sessionConfigCompletions` answered from the
//! repository's facts, a worktree session's tree made on its first send,
//! a checkpoint per finished turn with the session's change counts, and
//! the checkpoints and the tree removed on `disposeSession`.

use ahp_types::actions::{SessionWorkingDirectoryReplacedAction, StateAction};
use ahp_types::commands::{ResolveSessionConfigParams, SessionConfigCompletionsParams};
use ahp_types::Uri;
use serde_json::{Map, Value};

use crate::protocol::params as parse;
use super::{GitOp, Host, Op, TreeCut};
use crate::continuation::ResolveReq;
use crate::effect::{ConnId, LogLevel, OpId};
use crate::git::{path_of_uri, same_folder_in_tree, uri_of_path, GitCmd, GitRecord, GitResult, RepoFacts, TREE_REMOVAL};
use crate::worktree::{plan_for, settle_base};
use crate::grants::{Membership, Operation, Principal};
use crate::input::Outcome;
use crate::protocol::error::*;
use crate::session::Phase;
use crate::session_config as table;
use crate::worktree;

impl Host {
    /// The memberships of the person on `conn`; `None` for a connection
    /// with no person to ask (no principal, this host itself, a plugin).
    pub(crate) fn memberships_of(&self, conn: ConnId) -> Option<Vec<Membership>> {
        match self.shared.conns.get(&conn).and_then(|c| c.principal.as_ref()) {
            Some(Principal::User { memberships, .. }) => Some(memberships.clone()),
            _ => None,
        }
    }

    /// `resolveSessionConfig` and `sessionConfigCompletions`: the facts of
    /// the folder's repository are asked for first; the request is answered
    /// when they come. A folder that is not a local path is in no
    /// repository.
    pub(crate) fn on_resolve_request(&mut self, conn: ConnId, id: u64, params: Value, completions: bool) {
        if let Err(e) = self.shared.authorize(conn, Operation::SessionCreate) {
            return self.shared.reply_error(conn, id, e);
        }
        let (folder, request) = if completions {
            match parse::<SessionConfigCompletionsParams>(params) {
                Ok(p) => (p.working_directory, ResolveReq::Completions { property: p.property, query: p.query, config: p.config }),
                Err(e) => return self.shared.reply_error(conn, id, e),
            }
        } else {
            match parse::<ResolveSessionConfigParams>(params) {
                Ok(p) => (p.working_directory, ResolveReq::Resolve { provider: p.provider, config: p.config }),
                Err(e) => return self.shared.reply_error(conn, id, e),
            }
        };
        // Git is not asked about a folder the operator did not trust.
        if let Some(uri) = folder.as_ref() {
            if let Err(reason) = self.trusted(std::slice::from_ref(uri)) {
                return self.shared.reply_error(conn, id, error(PERMISSION_DENIED, reason));
            }
        }
        match folder.as_deref().and_then(path_of_uri) {
            Some(folder) => {
                self.shared.git(Op::Git(GitOp::Resolve { conn, id, request: Box::new(request) }), GitCmd::Inspect { folder });
            }
            None => self.answer_resolve(conn, id, request, &RepoFacts::not_a_repo()),
        }
    }

    fn answer_resolve(&mut self, conn: ConnId, id: u64, request: ResolveReq, facts: &RepoFacts) {
        let memberships = self.memberships_of(conn);
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

    /// Called before a turn goes to its agent. A session that has not asked
    /// git yet (its first send, in a local folder) holds the turn while its
    /// tree and `turn/0` are made; so does one whose git work is in flight.
    /// Returns true when the turn was held.
    pub(crate) fn hold_for_git(&mut self, session_uri: &Uri, chat: &Uri, turn_id: &str, message: &ahp_types::state::Message) -> bool {
        let Some(session) = self.sessions.get_mut(session_uri) else { return false };
        // A session that moved asks git again about its new root.
        let begun = session.record.git.as_ref().is_some_and(|g| !g.moved);
        let beginning = session.git_begin.is_some();
        if begun && !beginning {
            return false;
        }
        let Some(folder) = session.record.working_directories.first().and_then(|u| path_of_uri(u)) else {
            return false;
        };
        session.pending_sends.push((chat.clone(), turn_id.to_owned(), message.clone()));
        if beginning {
            return true;
        }
        let key = session.record.key.clone();
        let values = session.record.config.clone();
        // A session a client moved works in the folder it was moved to:
        // no tree is cut there (the one it had stays its own).
        let moved = session.record.git.as_ref().is_some_and(|g| g.moved);
        let worktree = if table::worktree_asked(&values) && !moved {
            let prefix = table::string_value(&values, table::BRANCH_PREFIX, "");
            let new_branch = match worktree::session_branch(&prefix, &key) {
                Ok(b) => b,
                Err(e) => {
                    let pending = std::mem::take(&mut session.pending_sends);
                    for (c, t, _) in pending {
                        self.fail_turn(session_uri, &c, &t, &format!("the worktree could not be made: {e}"));
                    }
                    return true;
                }
            };
            Some((plan_for(&values, &new_branch), new_branch))
        } else {
            None
        };
        let checkpoint_ref = worktree::checkpoint_ref(&key, 0);
        let (purpose, command) = match worktree {
            // No base named: the folder's facts first (`GitOp::Base`).
            Some((plan, new_branch)) if plan.base.is_none() => {
                let cut = TreeCut::Begin { session: session_uri.clone(), folder: folder.clone(), checkpoint_ref, new_branch, plan };
                (GitOp::Base(Box::new(cut)), GitCmd::Inspect { folder })
            }
            worktree => (
                GitOp::Begin { session: session_uri.clone(), folder: folder.clone() },
                GitCmd::Begin { folder, checkpoint_ref, worktree: worktree.map(|(plan, _)| plan) },
            ),
        };
        let op = self.shared.git(Op::Git(purpose), command);
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.git_begin = Some(op);
            s.git_ops.insert(op);
        }
        true
    }

    /// A turn ended (completed, or failed for good): write its checkpoint
    /// and read the session's changes. A session in no repository, or one
    /// that has not asked git yet, has none.
    pub(crate) fn checkpoint_turn(&mut self, session_uri: &Uri) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let Some(git) = session.record.git.as_mut() else { return };
        if git.repo_root.is_none() || git.moved {
            return;
        }
        crate::mark!("checkpoint_written_at_turn_end");
        git.checkpoints += 1;
        let n = git.checkpoints;
        let key = session.record.key.clone();
        let (workdir, base, exclude) = match &git.worktree {
            Some(w) => (w.path.clone(), w.base_commit.clone(), w.placed.clone()),
            None => (git.folder.clone(), worktree::checkpoint_ref(&key, 0), Vec::new()),
        };
        let op = self.shared.git(
            Op::Git(GitOp::Checkpoint { session: session_uri.clone() }),
            GitCmd::Checkpoint { workdir, checkpoint_ref: worktree::checkpoint_ref(&key, n), base, exclude },
        );
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.git_ops.insert(op);
        }
    }

    /// `disposeSession`'s git step: the session's checkpoints and its tree.
    /// Returns the ops to wait for: the dispose answers once every tree it
    /// takes off the disk is gone (a client that sees the reply sees the
    /// tree gone).
    /// A tree another session still works in stays, handed to it
    /// ([`Host::hand_over_tree`]); only the refs go.
    pub(crate) fn dispose_git(&mut self, session_uri: &Uri) -> Vec<OpId> {
        let ops = self.remove_or_hand_over_trees(session_uri);
        self.let_go_of_trees(session_uri);
        ops
    }

    /// The commands [`Host::dispose_git`] waits for, trees handed over first.
    fn remove_or_hand_over_trees(&mut self, session_uri: &Uri) -> Vec<OpId> {
        let Some(session) = self.sessions.get(session_uri) else { return Vec::new() };
        let shared = session.record.shared_trees.clone();
        let git = session.record.git.clone();
        let refs_prefix = worktree::checkpoint_prefix(&session.record.key);
        let mut ops = Vec::new();
        let purpose = || Op::Git(GitOp::Dispose { session: session_uri.clone() });
        // Trees handed to it: passed on, or removed with their maker's refs.
        for tree in shared {
            if !self.hand_over_tree(session_uri, &tree) {
                ops.push(self.shared.git(purpose(), GitCmd::Dispose { repo: tree.repo, refs_prefix: tree.refs_prefix, worktree: Some(tree.tree), removal: TREE_REMOVAL }));
            }
        }
        let Some(git) = git else { return ops };
        let kept = |host: &mut Host, repo: &str, w: &crate::git::WorktreeRecord| {
            host.hand_over_tree(session_uri, &crate::git::SharedTree { repo: repo.to_owned(), refs_prefix: refs_prefix.clone(), tree: w.clone() })
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
        let Some(record) = self.sessions.get_mut(session_uri).map(|s| &mut s.record) else { return };
        record.shared_trees.clear();
        if let Some(git) = record.git.as_mut() {
            git.worktree = None;
            for former in &mut git.former {
                former.worktree = None;
            }
        }
    }

    pub(crate) fn on_git_done(&mut self, op: OpId, purpose: GitOp, outcome: Outcome) {
        match purpose {
            GitOp::Resolve { conn, id, request } => {
                let facts = self.facts_from(outcome);
                self.answer_resolve(conn, id, *request, &facts);
            }
            GitOp::Create { conn, id, request } => {
                let facts = self.facts_from(outcome);
                self.create_with_facts(conn, id, *request, &facts);
            }
            GitOp::Begin { session, folder } => self.on_begun(&session, op, folder, outcome),
            GitOp::Checkpoint { session } => match self.sessions.get_mut(&session) {
                Some(s) => s.on_checkpoint(&mut self.shared, op, outcome),
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
                let Some(s) = self.sessions.get_mut(&session) else { return };
                s.phase_ops.remove(&op);
                if s.phase_ops.is_empty() && matches!(s.phase, Phase::Disposing { .. }) {
                    self.dispose_finish(&session, None);
                }
            }
            GitOp::Detached(purpose) => self.on_detached_done(op, purpose, outcome),
            GitOp::Cleanup => {
                if let Outcome::Failed { message } = outcome {
                    self.shared.log(LogLevel::Warn, "git.dispose_failed", None, message);
                }
            }
            GitOp::TreeArchive { session, path, archived } => self.on_tree_archived(&session, &path, archived, outcome),
            GitOp::Restore { session } => self.on_restored_for_wake(&session, op, outcome),
            GitOp::Base(cut) => self.on_base_facts(op, *cut, outcome),
        }
    }

    /// The facts a tree's base is settled from came ([`GitOp::Base`]): the
    /// cut is sent with its base and names settled. A read git could not
    /// do fails the cut as the cut's own failure would (git's words).
    fn on_base_facts(&mut self, op: OpId, cut: TreeCut, outcome: Outcome) {
        crate::mark!("tree_base_from_folder_facts");
        let facts = match outcome {
            Outcome::Git(GitResult::Repo(facts)) => facts,
            Outcome::Failed { message } => {
                let failed = Outcome::Failed { message };
                return match cut {
                    TreeCut::Begin { session, folder, .. } => self.on_begun(&session, op, folder, failed),
                    TreeCut::Make { purpose, .. } => self.on_detached_done(op, purpose, failed),
                };
            }
            _ => RepoFacts::not_a_repo(),
        };
        match cut {
            TreeCut::Begin { session, folder, checkpoint_ref, new_branch, mut plan } => {
                let Some(s) = self.sessions.get_mut(&session) else { return };
                s.git_ops.remove(&op);
                if s.git_begin != Some(op) {
                    return;
                }
                s.git_begin = None;
                // Disposed meanwhile: no tree is cut for it.
                if matches!(s.phase, Phase::Disposing { .. }) {
                    return;
                }
                settle_base(&mut plan, &new_branch, &facts);
                let begin = self.shared.git(
                    Op::Git(GitOp::Begin { session: session.clone(), folder: folder.clone() }),
                    GitCmd::Begin { folder, checkpoint_ref, worktree: Some(plan) },
                );
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.git_begin = Some(begin);
                    s.git_ops.insert(begin);
                }
            }
            TreeCut::Make { folder, new_branch, mut plan, purpose } => {
                settle_base(&mut plan, &new_branch, &facts);
                self.shared.git(Op::Git(GitOp::Detached(purpose)), GitCmd::MakeTree { folder, plan });
            }
        }
    }

    /// The facts an `Inspect` answered. A folder git cannot read is offered
    /// what a folder in no repository is; the operator is told why.
    fn facts_from(&mut self, outcome: Outcome) -> RepoFacts {
        match outcome {
            Outcome::Git(GitResult::Repo(facts)) => facts,
            Outcome::Failed { message } => {
                crate::mark!("git_inspect_failed");
                self.shared.log(LogLevel::Warn, "git.inspect_failed", None, message);
                RepoFacts::not_a_repo()
            }
            _ => RepoFacts::not_a_repo(),
        }
    }

    /// The first send's git work answered: record it, move a worktree
    /// session into its tree (its agents started again there) and let the
    /// kept turns go; a tree git could not make fails them.
    fn on_begun(&mut self, session_uri: &Uri, op: OpId, folder: String, outcome: Outcome) {
        let Some(session) = self.sessions.get_mut(session_uri) else {
            // Disposed meanwhile: a tree made for it is nobody's.
            if let Outcome::Git(GitResult::Begun { repo_root: Some(_), worktree }) = outcome {
                if let Ok(rid) = crate::ids::ResourceId::parse(session_uri) {
                    let refs_prefix = worktree::checkpoint_prefix(&rid.store_key());
                    self.shared.git(Op::Git(GitOp::Cleanup), GitCmd::Dispose { repo: folder, refs_prefix, worktree, removal: TREE_REMOVAL });
                }
            }
            return;
        };
        session.git_ops.remove(&op);
        if session.git_begin != Some(op) {
            return;
        }
        session.git_begin = None;
        if matches!(session.phase, Phase::Disposing { .. }) {
            if let Outcome::Git(GitResult::Begun { repo_root: Some(_), worktree }) = outcome {
                let refs_prefix = worktree::checkpoint_prefix(&session.record.key);
                self.shared.git(Op::Git(GitOp::Cleanup), GitCmd::Dispose { repo: folder, refs_prefix, worktree, removal: TREE_REMOVAL });
            }
            return;
        }
        let mut git_warning = None;
        let (repo_root, tree) = match outcome {
            Outcome::Git(GitResult::Begun { repo_root, worktree }) => (repo_root, worktree),
            Outcome::Failed { message } if !table::worktree_asked(&session.record.config) => {
                // A folder session's turn runs whatever git says: it only
                // goes without checkpoints (and so without counts).
                git_warning = Some(message);
                (None, None)
            }
            Outcome::Failed { message } => {
                let pending = std::mem::take(&mut session.pending_sends);
                crate::mark!("worktree_failed_fails_send");
                self.shared.log(LogLevel::Warn, "git.worktree_failed", Some(session_uri.clone()), message.clone());
                for (chat, turn_id, _) in pending {
                    self.fail_turn(session_uri, &chat, &turn_id, &format!("the worktree could not be made: {message}"));
                }
                return;
            }
            _ => (None, None),
        };
        // A worktree asked for outside a repository is a folder session.
        let to_folder = repo_root.is_none() && table::worktree_asked(&session.record.config);
        // A session that moved keeps the folders (and trees) it worked in before.
        let former = session.record.git.take().map(|g| g.former).unwrap_or_default();
        session.record.git = Some(GitRecord { folder, repo_root, worktree: tree.clone(), checkpoints: 0, moved: false, former });
        if let Some(message) = git_warning {
            self.shared.log(LogLevel::Warn, "git.checkpoint_failed", Some(session_uri.clone()), message);
        }
        if to_folder {
            self.config_read_back(session_uri, table::ISOLATION, "folder");
        }
        let Some(tree) = tree else {
            self.store_put(session_uri);
            return self.release_held_sends(session_uri);
        };
        // Read back, the session is a worktree session on the branch its
        // tree was cut from (Sessions page, "Configuration keys").
        if !tree.base_branch.is_empty() {
            self.config_read_back(session_uri, table::BRANCH, &tree.base_branch);
        }
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        // Into the tree, at the folder matching the one the client picked
        // (a session made in `<repo>/pkg` works in `<tree>/pkg`): the process
        // root is replaced, and every agent is started again there before
        // the turn runs.
        let old = session.record.working_directories.first().cloned();
        let (picked, checkout_root) = session.record.git.as_ref().map(|g| (g.folder.clone(), g.repo_root.clone())).unwrap_or_default();
        let new = uri_of_path(&same_folder_in_tree(&picked, checkout_root.as_deref(), &tree.path));
        match session.record.working_directories.first_mut() {
            Some(first) => *first = new.clone(),
            None => session.record.working_directories.push(new.clone()),
        }
        // A conversation with nothing in it yet starts afresh in the tree;
        // one that holds turns is resumed there, or they are gone (issue
        // 19, seed 80116: the record naming the first tree was not saved,
        // the process stopped, and the next first send started the chat
        // over its turns).
        let resident = session.resident.as_deref();
        for chat in &mut session.record.chats {
            let finished = resident.and_then(|r| r.chats.get(&chat.resource)).is_some_and(|c| !c.turns.is_empty());
            if !finished && chat.kept.iter().all(|k| k.ended.is_none()) {
                chat.fresh = true;
            } else {
                crate::mark!("tree_resumes_chat_with_turns");
            }
        }
        if let Some(old) = old {
            let action = StateAction::SessionWorkingDirectoryReplaced(SessionWorkingDirectoryReplacedAction { directory: old, replacement: new });
            self.emit(session_uri, action, None);
        }
        crate::mark!("worktree_made_at_first_send");
        self.shared.log(LogLevel::Info, "git.worktree_made", Some(session_uri.clone()), format!("{} on {}", tree.path, tree.branch));
        self.store_put(session_uri);
        self.summary_changed(session_uri);
        match self.sessions.get(session_uri).map(|s| s.phase.clone()) {
            Some(Phase::Live) => self.restart_agents(session_uri),
            Some(Phase::Asleep) => self.wake(session_uri),
            _ => {}
        }
    }

    /// A config value of the session as git's work read it back (its
    /// branch, or `folder` isolation outside a repository): recorded, and
    /// when it differs from the value the session reported, told to its
    /// subscribers as `session/configChanged`, so the state a client holds
    /// is the host's.
    fn config_read_back(&mut self, session_uri: &Uri, key: &str, value: &str) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let value = Value::String(value.to_owned());
        if session.record.config.get(key) == Some(&value) {
            return;
        }
        session.record.config.insert(key.to_owned(), value.clone());
        let config = [(key.to_owned(), value)].into_iter().collect();
        let action = StateAction::SessionConfigChanged(ahp_types::actions::SessionConfigChangedAction { config, replace: None });
        self.emit(session_uri, action, None);
    }

    /// Hands the turns held for git to their agents (waking the session
    /// when its agents are not running).
    pub(crate) fn release_held_sends(&mut self, session_uri: &Uri) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        if session.phase != Phase::Live || session.start_owed {
            // Asleep meanwhile (its agent exited): the wake hands them over.
            if session.phase == Phase::Asleep {
                self.wake(session_uri);
            }
            return;
        }
        let pending = std::mem::take(&mut session.pending_sends);
        for (chat, turn_id, message) in pending {
            self.in_session(session_uri, |s, sh| s.hand_to_agent(sh, chat, turn_id, message));
        }
    }
}
