//! What the host asks git, and what git answers, as data (Sessions page,
//! "Configuration keys", "Isolation and worktrees", and the `changes` of
//! "The state a session reports"). The shell runs these with git2 and
//! decides nothing: every name in them was checked (and the names a tree
//! is tried under chosen) by `crate::worktree` first, the base a tree is
//! cut from is settled by the host, and when a tree may be removed is
//! stated in the command ([`Removal`]). Paths are plain local paths with
//! `/` separators.

use serde::{Deserialize, Serialize};

/// One git command, answered by `Input::Done { op, outcome:
/// Outcome::Git(..) }` or `Outcome::Failed` with git's own words.
#[derive(Debug, Clone, PartialEq)]
pub enum GitCmd {
    /// Read the facts about the repository `folder` is in (for
    /// `resolveSessionConfig` and `sessionConfigCompletions`); a folder in
    /// no repository answers [`RepoFacts::not_a_repo`].
    Inspect {
        /// The folder the client picked.
        folder: String,
        /// More folders whose kind the answer reports beside `folder`'s
        /// ([`RepoFacts::not_directories`]): a `createSession`'s peers
        /// (issue 25). Empty everywhere else.
        also: Vec<String>,
    },
    /// A session's first send: make its worktree when `worktree` says so,
    /// then write checkpoint `turn/0` of the tree the session starts from.
    /// Answered by [`GitResult::Begun`]; a folder in no repository answers
    /// `Begun` with no repository (a folder session with nothing to diff).
    Begin {
        /// The folder the client picked.
        folder: String,
        /// The ref of checkpoint `turn/0`.
        checkpoint_ref: String,
        /// The tree to make, for a worktree session.
        worktree: Option<WorktreePlan>,
    },
    /// A turn ended (completed or failed for good): write its checkpoint
    /// and count the session's changes. Answered by
    /// [`GitResult::Checkpointed`].
    Checkpoint {
        /// The folder the session works in (its tree, for a worktree
        /// session).
        workdir: String,
        /// The ref of this turn's checkpoint.
        checkpoint_ref: String,
        /// What the changes are counted from: `turn/0`'s ref for a folder
        /// session (Session Changes), the commit the tree was cut from for a
        /// worktree session (Branch Changes).
        base: String,
        /// Paths (relative to `workdir`) that are the host's own links and
        /// copies, never counted or checkpointed.
        exclude: Vec<String>,
    },
    /// `disposeSession`: delete the session's checkpoint refs and take its
    /// tree off the disk as `removal` says. Answered by
    /// [`GitResult::Disposed`], saying whether the tree stayed.
    Dispose {
        /// The repository the session's refs are in (the folder it was
        /// given).
        repo: String,
        /// The prefix of every checkpoint ref of the session.
        refs_prefix: String,
        /// The session's tree, if it made one.
        worktree: Option<WorktreeRecord>,
        /// When the tree may go (the host's rule, stated here so the
        /// executor checks and removes in one step).
        removal: Removal,
    },
    /// Cut a tree and nothing else (no checkpoint): a tree the window asks
    /// for (`vscode/createAgentHostDetachedWorktree`). Answered by
    /// [`GitResult::TreeMade`].
    MakeTree {
        /// A folder in the repository.
        folder: String,
        /// How to cut it.
        plan: WorktreePlan,
    },
    /// Take a tree off the disk and out of git's list of worktrees, keeping
    /// its branch, as `removal` says. Archiving a session or a window's
    /// tree, deleting a window's tree. Answered by
    /// [`GitResult::TreeArchived`], saying whether the tree stayed.
    ArchiveTree {
        /// A folder in the repository the tree was cut from.
        repo: String,
        /// The tree.
        worktree: WorktreeRecord,
        /// When the tree may go.
        removal: Removal,
    },
    /// Put an archived tree back: the same branch at the same path, with
    /// its links and copies placed again. A tree already there is left as
    /// it is. Answered by [`GitResult::TreeRestored`].
    RestoreTree {
        /// A folder in the repository the tree was cut from.
        repo: String,
        /// The tree.
        worktree: WorktreeRecord,
    },
}

/// How to cut a worktree (Sessions page, "Isolation and worktrees"). Every
/// choice is the host's: the executor resolves `base` to a commit, takes
/// the first of `names` that is free, and says which in the
/// [`WorktreeRecord`] it answers (`branch`, `name`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorktreePlan {
    /// The branch to start from (a local branch, else the remote one of
    /// that name), settled by the host from the session's config; `None`:
    /// the commit checked out (a detached or unborn HEAD with no remote
    /// default, `crate::session_config::default_branch`).
    pub base: Option<String>,
    /// The branch and folder names to try, in order
    /// ([`crate::worktree::tree_names`]). With `create_new_branch` a name is
    /// free when neither its branch nor its folder exists; without it each
    /// names `base` itself, and a name is free when its folder does not
    /// exist. Empty when there is nothing to check out (no `base` and no
    /// new branch): the executor refuses the plan.
    pub names: Vec<TreeName>,
    /// Make a branch for the tree (`worktreeCreateNewBranch`); without
    /// it `base` is checked out as it is.
    pub create_new_branch: bool,
    /// The new branch tracks the base's upstream (`worktreeBranchTrack`).
    pub track: bool,
    /// Git-ignored files to copy in (`worktreeIncludeFiles`).
    pub include_files: Vec<String>,
    /// Git-ignored folders to link in (`worktreeSymlinkFolders`).
    pub symlink_folders: Vec<String>,
}

/// One name a tree may be cut under: its branch and its folder (git's
/// name for the worktree entry, the last part of its path).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeName {
    /// The branch the tree checks out (checked by
    /// [`crate::worktree::check_branch_name`] before it is tried).
    pub branch: String,
    /// The folder it goes in ([`crate::worktree::folder_name`], with a
    /// suffix when tried again).
    pub folder: String,
}

/// When a tree may be taken off the disk (Sessions page, "Isolation and
/// worktrees": a tree holding work nobody committed is never deleted). The
/// executor checks and removes in one step under the repository's lock,
/// and answers whether the tree stayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Removal {
    /// Only when it holds no work nobody committed: nothing in its status
    /// (tracked changes, untracked files that are not ignored) but the
    /// host's own links and copies ([`WorktreeRecord::placed`]). Otherwise
    /// it stays on disk, its entry and branch untouched.
    UnlessUncommitted,
}

/// Facts about the repository a folder is in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepoFacts {
    /// The repository's top folder, or `None` when the folder is in no
    /// repository.
    pub root: Option<String>,
    /// The branch checked out, `None` on a detached or unborn HEAD.
    pub current_branch: Option<String>,
    /// The branch its remote's HEAD names (`origin/HEAD -> origin/develop`
    /// gives `develop`), if any.
    pub default_branch: Option<String>,
    /// Every local branch, and every remote branch with no local one of
    /// its name, sorted.
    pub branches: Vec<String>,
    /// Of the folder asked about and the `also` of [`GitCmd::Inspect`],
    /// those that are not a directory the daemon can open, with what each
    /// is (issue 25: `createSession` refuses them). Empty: every one is a
    /// directory. Whether a path exists is IO, so the shell reads it; the
    /// rule that refuses is the core's (`folders::check_kinds`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_directories: Vec<(String, FolderKind)>,
    /// Git's words when the folder asked about is a directory but its
    /// repository could not be read (a broken `.git`, a lock): the rest of
    /// the facts are then a folder's in no repository, and the folders'
    /// kinds above were still read. The core logs them
    /// (`git.inspect_failed`). An `Inspect` answered `Outcome::Failed`
    /// instead did not run: nothing is known of the folders, not even
    /// whether they are directories, so a create refuses them
    /// (`folders::unread`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_error: Option<String>,
}

/// What is at a folder's path when it is not a directory the daemon can
/// open ([`RepoFacts::not_directories`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FolderKind {
    /// Nothing is there.
    Missing,
    /// Something that is not a directory (a file, a socket, ...).
    NotADirectory,
    /// The daemon may not read it (permissions, a broken mount).
    Unreadable,
}

impl RepoFacts {
    /// The facts of a folder in no repository.
    pub fn not_a_repo() -> RepoFacts {
        RepoFacts::default()
    }

    /// Whether the folder is in a repository.
    pub fn is_repo(&self) -> bool {
        self.root.is_some()
    }
}

/// A tree another session made that this one works in, handed to it when
/// its maker was disposed (issue 19: "A tree is taken off the disk only
/// when no session, detached handle or agent uses it, across restarts").
/// Kept in the holder's record so the tree is still the host's (trusted,
/// removed when its last user goes) after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SharedTree {
    /// A folder in the repository the tree was cut from.
    pub repo: String,
    /// The prefix of its maker's checkpoint refs (deleted with the tree);
    /// empty for a tree the window made, which has none.
    pub refs_prefix: String,
    /// The tree.
    pub tree: WorktreeRecord,
}

/// A tree the host made for a session, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeRecord {
    /// The tree's folder.
    pub path: String,
    /// The branch checked out in it.
    pub branch: String,
    /// The commit the tree was cut from (what Branch Changes count from).
    pub base_commit: String,
    /// The branch the tree was cut from; empty when it was cut from a
    /// detached HEAD.
    #[serde(default)]
    pub base_branch: String,
    /// Git's name for the worktree entry.
    pub name: String,
    /// Paths (relative to the tree) the host linked or copied in.
    #[serde(default)]
    pub placed: Vec<String>,
    /// The `worktreeSymlinkFolders` patterns it was cut with, placed again
    /// when the tree is put back.
    #[serde(default)]
    pub links: Vec<String>,
    /// The `worktreeIncludeFiles` patterns it was cut with, placed again
    /// when the tree is put back.
    #[serde(default)]
    pub copies: Vec<String>,
    /// True while the tree is off the disk because its session was
    /// archived (its branch kept); put back when the session is unarchived
    /// or a turn is sent in it.
    #[serde(default)]
    pub off_disk: bool,
    /// The top folder of the repository the tree is a checkout of (the
    /// main checkout, even when the tree was cut from a folder inside
    /// another worktree): a path inside the tree is the same path inside
    /// this folder, which is what its trust is read from (`crate::trust`).
    /// Empty in records written before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub repo_root: String,
}

/// A tree this host made, not the session's own, that a session was made
/// in (a window's detached worktree): kept in the session's record so the
/// tree is still known as the host's after a restart, when the window's
/// handles are gone (`crate::trust`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeOrigin {
    /// The tree's folder.
    pub path: String,
    /// The top folder of the repository it is a checkout of.
    pub repo_root: String,
}

/// A diff stat: files touched, lines added and removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Changes {
    /// Files with changes, a count.
    pub files: u64,
    /// Lines added, a count.
    pub additions: u64,
    /// Lines removed, a count.
    pub deletions: u64,
}

/// What a git command answered.
#[derive(Debug, Clone, PartialEq)]
pub enum GitResult {
    /// Answer to [`GitCmd::Inspect`].
    Repo(RepoFacts),
    /// Answer to [`GitCmd::Begin`].
    Begun {
        /// The repository's top folder; `None` for a folder in no
        /// repository (no checkpoint was written).
        repo_root: Option<String>,
        /// The tree made, for a worktree session.
        worktree: Option<WorktreeRecord>,
    },
    /// Answer to [`GitCmd::Checkpoint`]: the session's changes now.
    Checkpointed {
        /// The counts.
        changes: Changes,
    },
    /// Answer to [`GitCmd::Dispose`].
    Disposed {
        /// Whether the tree was kept because it held uncommitted work.
        kept_tree: bool,
    },
    /// Answer to [`GitCmd::MakeTree`].
    TreeMade {
        /// The tree made.
        worktree: WorktreeRecord,
    },
    /// Answer to [`GitCmd::ArchiveTree`].
    TreeArchived {
        /// Whether the tree stayed on disk because it held uncommitted
        /// work.
        kept: bool,
    },
    /// Answer to [`GitCmd::RestoreTree`].
    TreeRestored,
}

/// What a session's record keeps of its git work (Sessions page: "the
/// worktree a session owns, change counts").
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GitRecord {
    /// The folder the session was given, which git was asked about.
    pub folder: String,
    /// The repository's top folder; `None` when the folder is in none.
    #[serde(default)]
    pub repo_root: Option<String>,
    /// The tree it made, for a worktree session.
    #[serde(default)]
    pub worktree: Option<WorktreeRecord>,
    /// The number of the last checkpoint written (`turn/0` is the start).
    #[serde(default)]
    pub checkpoints: u32,
    /// True once a client moved the session's root away from the folder
    /// (or tree) above: its next send asks git again about the new root.
    #[serde(default)]
    pub moved: bool,
    /// The folders the session worked in before it moved, each with the
    /// tree it made there, kept as the session's: archived, put back and
    /// removed with it (Sessions page, "Isolation and worktrees").
    #[serde(default)]
    pub former: Vec<FormerFolder>,
}

impl GitRecord {
    /// Every tree the session made: its own, then those of the folders it
    /// moved away from (whether or not it still works in them).
    pub fn made_trees(&self) -> impl Iterator<Item = &WorktreeRecord> + '_ {
        self.worktree.iter().chain(self.former.iter().filter_map(|f| f.worktree.as_ref()))
    }
}

/// A folder a session moved away from, and the tree it made there.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FormerFolder {
    /// The folder it was given there (its checkpoint refs are in its
    /// repository).
    pub folder: String,
    /// The tree it made there, if any.
    #[serde(default)]
    pub worktree: Option<WorktreeRecord>,
}

impl GitCmd {
    /// What a machine with no git repositories answers to this command:
    /// every folder is in none, nothing to checkpoint or remove. The
    /// simulator and the scenario tests answer git with it.
    pub fn no_repo_answer(&self) -> GitResult {
        match self {
            GitCmd::Inspect { .. } => GitResult::Repo(RepoFacts::not_a_repo()),
            GitCmd::Begin { .. } => GitResult::Begun { repo_root: None, worktree: None },
            GitCmd::Checkpoint { .. } => GitResult::Checkpointed { changes: Changes::default() },
            GitCmd::Dispose { .. } => GitResult::Disposed { kept_tree: false },
            GitCmd::MakeTree { .. } => GitResult::TreeMade { worktree: WorktreeRecord::default() },
            GitCmd::ArchiveTree { .. } => GitResult::TreeArchived { kept: false },
            GitCmd::RestoreTree { .. } => GitResult::TreeRestored,
        }
    }
}

/// `path` made absolute-normal: `.` and empty components dropped, `..`
/// taken lexically (never above `/`), no trailing slash. `None` when `path`
/// is not absolute. Used wherever the host compares local paths
/// (awareness, trusted folders).
pub fn normalize_path(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    // Most paths arrive normal already (awareness normalises every record
    // path at every scan): then the answer is the path itself, without
    // splitting and joining.
    if path == "/" || path[1..].split('/').all(|p| !p.is_empty() && p != "." && p != "..") {
        return Some(path.to_owned());
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// `path` moved from under `from` to under `to` (`/r/pkg/x` from `/r` to
/// `/t` is `/t/pkg/x`; `from` itself is `to`), all three normalized first;
/// `None` when `path` is not `from` or inside it by whole components, or
/// `from` is `/`. A worktree is a second checkout of one repository, so
/// this maps a folder between the two (into a tree for a session's folder,
/// back to the repository for its trust).
pub fn rebase_path(path: &str, from: &str, to: &str) -> Option<String> {
    let (path, from, to) = (normalize_path(path)?, normalize_path(from)?, normalize_path(to)?);
    if from == "/" {
        return None;
    }
    let rest = path.strip_prefix(from.as_str())?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return None;
    }
    Some(if to == "/" && !rest.is_empty() { rest.to_owned() } else { format!("{to}{rest}") })
}

/// A local path from a `file:` URI (`file:///a%20b` is `/a b`); `None` for
/// any other scheme.
pub fn path_of_uri(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("file://")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(b) = hex {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    let path = String::from_utf8(out).ok()?;
    (!path.contains('\0')).then_some(path)
}

/// The `file:` URI of a local path, percent-encoding what a URI cannot
/// carry.
pub fn uri_of_path(path: &str) -> String {
    let mut out = String::from("file://");
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_moves_between_checkouts_by_whole_components() {
        assert_eq!(rebase_path("/r/pkg/x", "/r", "/t").as_deref(), Some("/t/pkg/x"));
        assert_eq!(rebase_path("/r/", "/r", "/t/").as_deref(), Some("/t"));
        assert_eq!(rebase_path("/r/pkg/../y", "/r", "/t").as_deref(), Some("/t/y"));
        assert_eq!(rebase_path("/r2/x", "/r", "/t"), None, "a prefix sibling");
        assert_eq!(rebase_path("/other", "/r", "/t"), None);
        assert_eq!(rebase_path("/x", "/", "/t"), None, "from / moves nothing");
        assert_eq!(rebase_path("/r/x", "/r", "/").as_deref(), Some("/x"));
        assert_eq!(rebase_path("r/x", "/r", "/t"), None, "relative");
    }

    #[test]
    fn file_uris_round_trip() {
        for p in ["/a/b", "/a b/ü", "/x%y"] {
            assert_eq!(path_of_uri(&uri_of_path(p)).as_deref(), Some(p));
        }
        assert_eq!(path_of_uri("file:///tmp/x").as_deref(), Some("/tmp/x"));
        assert_eq!(path_of_uri("http://x/y"), None);
        assert_eq!(path_of_uri("file:///a%00b"), None);
    }
}

/// The folder of the tree at `tree` that matches `folder` of the checkout
/// whose top is `checkout_root`: `<tree>/pkg` for `<checkout>/pkg`; the
/// tree's top when `folder` is not inside `checkout_root` (or either is not
/// an absolute path).
pub fn same_folder_in_tree(folder: &str, checkout_root: Option<&str>, tree: &str) -> String {
    checkout_root.and_then(|root| rebase_path(folder, root, tree)).unwrap_or_else(|| tree.to_owned())
}

/// How every tree the host takes off the disk goes (Sessions page,
/// "Isolation and worktrees"): never with work nobody committed in it. A
/// tree that stays is answered as kept, and said in the log.
pub const TREE_REMOVAL: Removal = Removal::UnlessUncommitted;

