//! What each command the host has in flight is for, by op id: the
//! continuation a completion (`Input::Done`) is routed to
//! (`Host::on_done`). Each variant names its owner (a session, a
//! connection's request, a window's tree) and holds the typed request it
//! resumes, never raw JSON.

use ahp_types::Uri;

use crate::effect::ConnId;
use crate::git::WorktreePlan;

/// What an in-flight command effect was for, by op id.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A pass over a backend's transcripts.
    Scan {
        /// The backend or source.
        provider: String,
    },
    /// Starting (or resuming) a chat's agent.
    Start {
        /// The session.
        session: Uri,
        /// The chat.
        chat: Uri,
    },
    /// Handing turn `turn_id` to a chat's agent.
    Send {
        /// The session.
        session: Uri,
    },
    /// Letting a chat's agent go, cancelling or confirming: nothing waits on
    /// the answer.
    Fire,
    /// A chat's backend forgetting turns a rewind took away
    /// (`session/rewind.rs`): the record stops listing them once it
    /// answers.
    Forget {
        /// The session.
        session: Uri,
        /// The chat.
        chat: Uri,
        /// The turns it was asked to forget.
        turn_ids: Vec<String>,
    },
    /// Deleting a chat's conversation for `disposeSession`.
    Delete {
        /// The session.
        session: Uri,
    },
    /// Writing a session record.
    StorePut {
        /// The session.
        session: Uri,
    },
    /// Replacing a session record by its tombstone for `disposeSession`.
    StoreDelete {
        /// The session.
        session: Uri,
    },
    /// Removing a tombstone whose backend copy is gone: nothing waits on
    /// the answer.
    StoreForget {
        /// The disposed session.
        session: Uri,
    },
    /// Writing or removing an automation's record (`host/automations.rs`):
    /// nothing waits on the answer; a failure is logged.
    AutomationWrite {
        /// The automation.
        automation: Uri,
    },
    /// A git command (`host/git.rs`).
    Git(GitOp),
    /// A filesystem command (issue 48): the files owner keeps the request
    /// it continues, by this op (`crate::files::Files`).
    Fs,
    /// A command for the awareness registry (`scan`: a registry scan).
    Registry {
        /// Whether it is a scan.
        scan: bool,
    },
}

/// What an in-flight git command is for.
#[derive(Debug, Clone, PartialEq)]
pub enum GitOp {
    /// `createSession` waiting on the facts of its folder's repository,
    /// which its config is settled against.
    Create {
        /// The connection.
        conn: ConnId,
        /// The request id.
        id: u64,
        /// The request, decoded and its URI checked when it came; it runs
        /// on from there when the facts come.
        request: Box<crate::continuation::CreateSessionReq>,
    },
    /// `start_child_session` waiting on the facts of the child's folder's
    /// repository, as `createSession` does ([`GitOp::Create`]).
    Child {
        /// The tool call owed the answer.
        call: crate::tools::HostCallId,
        /// The child asked for, checked when the call came.
        request: Box<crate::tools::ChildStart>,
    },
    /// `resolveSessionConfig` (or `sessionConfigCompletions`) waiting on
    /// the repository's facts.
    Resolve {
        /// The connection.
        conn: ConnId,
        /// The request id.
        id: u64,
        /// The request, decoded when it came; answered from it when the
        /// facts come.
        request: Box<crate::continuation::ResolveReq>,
    },
    /// A session's first send: its tree and `turn/0`.
    Begin {
        /// The session.
        session: Uri,
        /// The folder git was asked about.
        folder: String,
    },
    /// A checkpoint and the session's change counts.
    Checkpoint {
        /// The session.
        session: Uri,
    },
    /// Removing a session's checkpoints and tree for `disposeSession`.
    Dispose {
        /// The session.
        session: Uri,
    },
    /// Removing a tree made for a session that was disposed meanwhile, or
    /// the refs and tree of a folder a disposed session moved away from.
    Cleanup,
    /// A session's tree taken off the disk (`archived`) or put back as the
    /// session's archived bit changed (`host/git.rs`).
    TreeArchive {
        /// The session.
        session: Uri,
        /// The tree's folder.
        path: String,
        /// Off the disk (true) or back (false).
        archived: bool,
    },
    /// A session's own tree put back before its agents start again.
    Restore {
        /// The session.
        session: Uri,
    },
    /// A window's own tree (`host/detached.rs`).
    Detached(DetachedOp),
    /// The facts of the folder a tree is to be cut in, read first because
    /// the session's config names no base branch (its folder offered none
    /// when the session was made): the base is settled from them
    /// ([`settle_base`](crate::session_config::settle_base)), then the cut is sent.
    Base(Box<TreeCut>),
}

/// A tree cut waiting for its base ([`GitOp::Base`]).
#[derive(Debug, Clone, PartialEq)]
pub enum TreeCut {
    /// A session's first send: `GitCmd::Begin` once the base is settled.
    Begin {
        /// The session.
        session: Uri,
        /// The folder git is asked about (and the tree cut from).
        folder: String,
        /// The ref of checkpoint `turn/0`.
        checkpoint_ref: String,
        /// The branch the tree creates (already checked).
        new_branch: String,
        /// The plan, its base and names still to settle.
        plan: WorktreePlan,
    },
    /// A window's tree: `GitCmd::MakeTree` once the base is settled.
    Make {
        /// A folder in the repository.
        folder: String,
        /// The branch the tree creates (already checked).
        new_branch: String,
        /// The plan, its base and names still to settle.
        plan: WorktreePlan,
        /// What the tree is for.
        purpose: DetachedOp,
    },
}

/// What an in-flight git command for a window's tree is for.
#[derive(Debug, Clone, PartialEq)]
pub enum DetachedOp {
    /// `createAgentHostDetachedWorktree` waiting for its tree.
    Make {
        /// The connection to answer.
        conn: ConnId,
        /// The request id.
        id: u64,
        /// The handle it will answer with.
        handle: String,
        /// The owner of the connection that asked.
        owner: Option<String>,
        /// The session the tree is cut for.
        session: Uri,
        /// That session's folder URI.
        folder_uri: Uri,
        /// That folder as a local path.
        repo: String,
    },
    /// One queued [`Step`](crate::detached::Step) of a handle.
    Step {
        /// The handle.
        handle: String,
        /// The step.
        step: crate::detached::Step,
    },
}

