//! Executes the core's `GitCmd`s with git2 (never the `git` program), on a
//! blocking thread, answering each with `Input::Done` (Sessions page,
//! "Isolation and worktrees"). Every decision is the core's and comes in
//! the command: the base branch, the names a tree is tried under, when a
//! tree may be removed. Tree locations and patterns are the core's rules
//! too (`ahpd_core::worktree`), called from here.
//!
//! Work on one repository is serialized (worktree creation and checkpoint
//! writes take a per-repository lock keyed by its common git folder).
//! Checkpoints are commits written from a tree of the working folder built
//! in memory: HEAD, branches, the index file and the stash are never
//! touched, and the host signs them itself.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use ahpd_core::git::{Changes, FolderKind, GitCmd, GitResult, Removal, RepoFacts, WorktreePlan, WorktreeRecord};
use ahpd_core::worktree::{pattern_matches, tree_path};
use ahpd_core::{Input, OpId, Outcome};
use git2::{BranchType, ErrorCode, IndexAddOption, Repository, Signature, StatusOptions, WorktreeAddOptions};

use crate::events::EventSink;

/// The name and address checkpoints are signed with.
const SIGNER: (&str, &str) = ("ahpd", "ahpd@localhost");
/// Most entries looked at when finding the ignored paths to link or copy.
const WALK_MAX_ENTRIES: usize = 200_000;

/// The git executor.
#[derive(Clone)]
pub struct GitExec {
    events: EventSink,
    worktrees_root: Option<String>,
}

impl GitExec {
    /// An executor answering through `events`; trees go under
    /// `worktrees_root` (`--worktrees-root`) when given, else beside their
    /// repository.
    pub fn new(events: EventSink, worktrees_root: Option<PathBuf>) -> GitExec {
        GitExec { events, worktrees_root: worktrees_root.map(|p| p.to_string_lossy().into_owned()) }
    }

    /// Runs `command` on a blocking thread; the answer comes back as
    /// `Input::Done { op, .. }`: `Outcome::Git` or `Outcome::Failed` with
    /// git's words.
    pub fn execute(&self, op: OpId, command: GitCmd) {
        let events = self.events.clone();
        let root = self.worktrees_root.clone();
        tokio::spawn(async move {
            let outcome = match super::bulk::spawn(move || run(&command, root.as_deref())).await {
                Ok(Ok(result)) => Outcome::Git(result),
                Ok(Err(message)) => Outcome::Failed { message },
                Err(e) => Outcome::Failed { message: format!("the git task failed: {e}") },
            };
            events.input(Input::Done { op, outcome });
        });
    }
}

/// Runs one command to its result; errors are git's words with what was
/// being done.
pub fn run(command: &GitCmd, worktrees_root: Option<&str>) -> Result<GitResult, String> {
    match command {
        GitCmd::Inspect { folder, also } => inspect_folders(folder, also).map(GitResult::Repo),
        GitCmd::Begin { folder, checkpoint_ref, worktree } => begin(Path::new(folder), checkpoint_ref, worktree.as_ref(), worktrees_root),
        GitCmd::Checkpoint { workdir, checkpoint_ref, base, exclude } => {
            checkpoint(Path::new(workdir), checkpoint_ref, base, exclude).map(|changes| GitResult::Checkpointed { changes })
        }
        GitCmd::Dispose { repo, refs_prefix, worktree, removal } => dispose(Path::new(repo), refs_prefix, worktree.as_ref(), *removal),
        GitCmd::MakeTree { folder, plan } => make_tree(Path::new(folder), plan, worktrees_root),
        GitCmd::ArchiveTree { repo, worktree, removal } => archive_tree(Path::new(repo), worktree, *removal),
        GitCmd::RestoreTree { repo, worktree } => restore_tree(Path::new(repo), worktree),
    }
}

fn err(what: &str, e: git2::Error) -> String {
    format!("{what}: {}", e.message())
}

/// The repository `folder` is in, or `None` when it is in none (or only in
/// a bare one, which has no folder to work in).
fn open(folder: &Path) -> Result<Option<Repository>, String> {
    match Repository::discover(folder) {
        Ok(repo) if repo.workdir().is_some() => Ok(Some(repo)),
        Ok(_) => Ok(None),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(err(&format!("could not open the repository at {}", folder.display()), e)),
    }
}

/// The lock that serializes work on one repository (its common folder, so
/// a worktree and its main checkout share it).
fn repo_lock(repo: &Repository) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    let key = fs::canonicalize(repo.commondir()).unwrap_or_else(|_| repo.commondir().to_path_buf());
    let mut locks = LOCKS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    locks.entry(key).or_default().clone()
}

fn workdir_string(repo: &Repository) -> String {
    let dir = repo.workdir().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    dir.trim_end_matches('/').to_owned()
}

/// The top folder of the repository's main checkout: for a linked
/// worktree, the checkout its common `.git` folder belongs to (when that
/// has one); else the repository's own.
fn main_workdir(repo: &Repository) -> String {
    if repo.is_worktree() {
        if let Ok(main) = Repository::open(repo.commondir()) {
            if main.workdir().is_some() {
                return workdir_string(&main);
            }
        }
    }
    workdir_string(repo)
}

/// What is at `path` when it is not a directory the daemon can open
/// (`None`: it is one). Read without following the rules of any repository:
/// only the path's own metadata.
fn kind_of(path: &str) -> Option<FolderKind> {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => None,
        Ok(_) => Some(FolderKind::NotADirectory),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(FolderKind::Missing),
        Err(_) => Some(FolderKind::Unreadable),
    }
}

/// [`inspect`] of `folder`, with the kind of it and of each of `also` when
/// not a directory (`RepoFacts::not_directories`; the core decides what
/// that means). A `folder` that is not a directory is in no repository;
/// one whose repository git cannot read is in none either, with git's
/// words in `RepoFacts::git_error`.
fn inspect_folders(folder: &str, also: &[String]) -> Result<RepoFacts, String> {
    let not_directories: Vec<(String, FolderKind)> =
        std::iter::once(folder).chain(also.iter().map(String::as_str)).filter_map(|p| kind_of(p).map(|k| (p.to_owned(), k))).collect();
    let root_is_dir = !not_directories.iter().any(|(p, _)| p == folder);
    // Git failing on a directory is answered, not failed: the folders'
    // kinds were read, and the core refuses a create only when it cannot
    // know them (an `Outcome::Failed` Inspect; docs/DECISIONS.md, 28).
    let mut facts = match root_is_dir.then(|| inspect(Path::new(folder))) {
        Some(Ok(facts)) => facts,
        Some(Err(message)) => RepoFacts { git_error: Some(message), ..RepoFacts::not_a_repo() },
        None => RepoFacts::not_a_repo(),
    };
    facts.not_directories = not_directories;
    Ok(facts)
}

/// The facts `resolveSessionConfig` needs about the repository `folder` is
/// in.
pub fn inspect(folder: &Path) -> Result<RepoFacts, String> {
    let Some(repo) = open(folder)? else { return Ok(RepoFacts::not_a_repo()) };
    facts_of(&repo)
}

fn facts_of(repo: &Repository) -> Result<RepoFacts, String> {
    let current_branch = match repo.head() {
        Ok(head) if head.is_branch() => head.shorthand().ok().map(str::to_owned),
        _ => None,
    };
    let mut default_branch = None;
    let mut remotes: Vec<String> = repo.remotes().map(|r| r.iter().filter_map(|n| n.ok().flatten()).map(str::to_owned).collect()).unwrap_or_default();
    remotes.sort_by_key(|r| r != "origin");
    for remote in &remotes {
        if let Ok(head) = repo.find_reference(&format!("refs/remotes/{remote}/HEAD")) {
            if let Ok(Some(target)) = head.symbolic_target() {
                if let Some(b) = target.strip_prefix(&format!("refs/remotes/{remote}/")) {
                    default_branch = Some(b.to_owned());
                    break;
                }
            }
        }
    }
    let mut branches: Vec<String> = Vec::new();
    let mut remote_only: Vec<String> = Vec::new();
    for item in repo.branches(None).map_err(|e| err("could not list branches", e))? {
        let (branch, kind) = item.map_err(|e| err("could not read a branch", e))?;
        let Ok(Some(name)) = branch.name() else { continue };
        match kind {
            BranchType::Local => branches.push(name.to_owned()),
            BranchType::Remote => {
                let short = remotes.iter().find_map(|r| name.strip_prefix(&format!("{r}/")));
                if let Some(short) = short.filter(|s| *s != "HEAD") {
                    remote_only.push(short.to_owned());
                }
            }
        }
    }
    for r in remote_only {
        if !branches.contains(&r) {
            branches.push(r);
        }
    }
    branches.sort();
    branches.dedup();
    Ok(RepoFacts { root: Some(workdir_string(repo)), current_branch, default_branch, branches, not_directories: Vec::new(), git_error: None })
}

/// A session's first send: its tree (for a worktree session), then
/// checkpoint `turn/0` of the folder it starts in.
fn begin(folder: &Path, checkpoint_ref: &str, plan: Option<&WorktreePlan>, worktrees_root: Option<&str>) -> Result<GitResult, String> {
    let Some(repo) = open(folder)? else { return Ok(GitResult::Begun { repo_root: None, worktree: None }) };
    let root = workdir_string(&repo);
    let lock = repo_lock(&repo);
    let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
    let worktree = match plan {
        Some(plan) => Some(make_worktree(&repo, plan, worktrees_root)?),
        None => None,
    };
    let start = worktree.as_ref().map(|w| PathBuf::from(&w.path)).unwrap_or_else(|| folder.to_path_buf());
    let exclude = worktree.as_ref().map(|w| w.placed.clone()).unwrap_or_default();
    let at = Repository::discover(&start).map_err(|e| err("could not open the session's folder", e))?;
    write_checkpoint(&at, checkpoint_ref, &exclude)?;
    Ok(GitResult::Begun { repo_root: Some(root), worktree })
}

/// The commit a base branch names: the local branch, else the remote one
/// of that name (origin first).
fn resolve_base<'r>(repo: &'r Repository, base: &str) -> Result<(git2::Commit<'r>, Option<String>), String> {
    if let Ok(b) = repo.find_branch(base, BranchType::Local) {
        let upstream = b.upstream().ok().and_then(|u| u.name().ok().flatten().map(str::to_owned));
        let commit = b.get().peel_to_commit().map_err(|e| err(&format!("branch {base} has no commit"), e))?;
        return Ok((commit, upstream));
    }
    let mut remotes: Vec<String> = repo.remotes().map(|r| r.iter().filter_map(|n| n.ok().flatten()).map(str::to_owned).collect()).unwrap_or_default();
    remotes.sort_by_key(|r| r != "origin");
    for remote in remotes {
        let name = format!("{remote}/{base}");
        if let Ok(b) = repo.find_branch(&name, BranchType::Remote) {
            let commit = b.get().peel_to_commit().map_err(|e| err(&format!("branch {name} has no commit"), e))?;
            return Ok((commit, Some(name)));
        }
    }
    Err(format!("the base branch {base} does not exist in this repository"))
}

/// Cuts the tree `plan` describes: from its base (or the commit checked
/// out), under the first of its names that is free.
fn make_worktree(repo: &Repository, plan: &WorktreePlan, worktrees_root: Option<&str>) -> Result<WorktreeRecord, String> {
    // The tree goes beside the repository's main checkout, also when the
    // folder it is cut from is inside another worktree; ignored files are
    // placed from the checkout the folder is in.
    let checkout = workdir_string(repo);
    let root = main_workdir(repo);
    prune_stale(repo)?;
    let facts = facts_of(repo)?;
    if repo.head().is_err() && facts.branches.is_empty() {
        return Err("the repository has no commits yet: a worktree needs a commit to start from".to_owned());
    }
    let (commit, upstream) = match &plan.base {
        Some(b) => resolve_base(repo, b)?,
        // No base named: the commit checked out.
        None => {
            let head = repo.head().map_err(|e| err("the repository's HEAD names no commit", e))?;
            (head.peel_to_commit().map_err(|e| err("the repository's HEAD names no commit", e))?, None)
        }
    };
    let branch_taken = |name: &str| repo.find_branch(name, BranchType::Local).is_ok();
    let folder_taken = |folder: &str| Path::new(&tree_path(&root, worktrees_root, folder)).exists() || repo.find_worktree(folder).is_ok();
    let first = plan.names.first().map(|n| n.branch.clone()).unwrap_or_default();
    let (branch, folder) = if plan.create_new_branch {
        let chosen = plan.names.iter().find(|n| !branch_taken(&n.branch) && !folder_taken(&n.folder));
        let chosen = chosen.ok_or_else(|| format!("every name tried for the branch {first} is taken"))?;
        let name = chosen.branch.clone();
        let mut b = repo.branch(&name, &commit, false).map_err(|e| err(&format!("could not create branch {name}"), e))?;
        if plan.track {
            if let Some(up) = &upstream {
                b.set_upstream(Some(up)).map_err(|e| err(&format!("could not set {up} as the upstream of {name}"), e))?;
            }
        }
        (name, chosen.folder.clone())
    } else {
        let Some(name) = plan.base.clone() else {
            return Err("no branch is checked out and none was chosen: name a branch to check out".to_owned());
        };
        if !branch_taken(&name) {
            let mut b = repo.branch(&name, &commit, false).map_err(|e| err(&format!("could not create branch {name}"), e))?;
            if let Some(up) = &upstream {
                let _ = b.set_upstream(Some(up));
            }
        }
        let chosen = plan.names.iter().find(|n| !folder_taken(&n.folder));
        (name.clone(), chosen.ok_or_else(|| format!("every folder tried for the branch {name} is taken"))?.folder.clone())
    };
    let path = tree_path(&root, worktrees_root, &folder);
    if let Some(parent) = Path::new(&path).parent() {
        fs::create_dir_all(parent).map_err(|e| format!("could not make {}: {e}", parent.display()))?;
    }
    let reference = repo.find_reference(&format!("refs/heads/{branch}")).map_err(|e| err(&format!("branch {branch} vanished"), e))?;
    let mut opts = WorktreeAddOptions::new();
    opts.reference(Some(&reference));
    repo.worktree(&folder, Path::new(&path), Some(&opts)).map_err(|e| err(&format!("git could not make the worktree at {path} on {branch}"), e))?;
    let placed = place_ignored(repo, Path::new(&checkout), Path::new(&path), &plan.symlink_folders, &plan.include_files);
    Ok(WorktreeRecord {
        path,
        branch,
        base_commit: commit.id().to_string(),
        base_branch: plan.base.clone().unwrap_or_default(),
        name: folder,
        placed,
        links: plan.symlink_folders.clone(),
        copies: plan.include_files.clone(),
        off_disk: false,
        repo_root: root,
    })
}

/// Prunes worktree entries whose folder was deleted by hand.
fn prune_stale(repo: &Repository) -> Result<(), String> {
    let names = repo.worktrees().map_err(|e| err("could not list worktrees", e))?;
    for name in names.iter().filter_map(|n| n.ok().flatten()) {
        if let Ok(wt) = repo.find_worktree(name) {
            if wt.validate().is_err() && wt.is_prunable(None).unwrap_or(false) {
                wt.prune(None).map_err(|e| err(&format!("could not prune the stale worktree {name}"), e))?;
            }
        }
    }
    Ok(())
}

/// Links the git-ignored folders matching `links`, then copies the
/// git-ignored files (or folders) matching `copies` that are not inside a
/// linked folder, from `main` into `tree`. Best effort, pattern by
/// pattern: a path that cannot be placed is skipped and logged. Returns
/// the paths placed, relative to the tree.
fn place_ignored(repo: &Repository, main: &Path, tree: &Path, links: &[String], copies: &[String]) -> Vec<String> {
    let mut placed = Vec::new();
    if links.is_empty() && copies.is_empty() {
        return placed;
    }
    let mut to_link = Vec::new();
    let mut to_copy = Vec::new();
    let mut stack = vec![PathBuf::new()];
    let mut seen = 0usize;
    while let Some(rel_dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(main.join(&rel_dir)) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > WALK_MAX_ENTRIES {
                tracing::warn!(repo = %main.display(), "worktree: stopped looking for ignored paths after {WALK_MAX_ENTRIES} entries");
                break;
            }
            let rel = rel_dir.join(entry.file_name());
            let Some(rel_s) = rel.to_str().map(str::to_owned) else { continue };
            if rel_s == ".git" {
                continue;
            }
            let Ok(meta) = fs::symlink_metadata(main.join(&rel)) else { continue };
            let is_dir = meta.is_dir();
            let ignored = repo.is_path_ignored(if is_dir { format!("{rel_s}/") } else { rel_s.clone() }).unwrap_or(false);
            if ignored {
                if is_dir && links.iter().any(|p| pattern_matches(p, &rel_s, true)) {
                    to_link.push(rel_s);
                } else if copies.iter().any(|p| pattern_matches(p, &rel_s, is_dir)) {
                    to_copy.push(rel_s);
                }
            } else if is_dir {
                stack.push(rel);
            }
        }
    }
    to_link.sort();
    to_copy.sort();
    for rel in to_link {
        let target = tree.join(&rel);
        if target.symlink_metadata().is_ok() {
            continue;
        }
        let made = target.parent().map_or(Ok(()), fs::create_dir_all).and_then(|()| std::os::unix::fs::symlink(main.join(&rel), &target));
        match made {
            Ok(()) => placed.push(rel),
            Err(e) => tracing::warn!(path = %rel, "worktree: could not link {rel}: {e}"),
        }
    }
    if let Err(e) = exclude_links(repo, &placed) {
        tracing::warn!(repo = %main.display(), "worktree: could not exclude the linked folders from git status: {e}");
    }
    for rel in to_copy {
        if placed.iter().any(|l| rel.starts_with(&format!("{l}/"))) {
            continue;
        }
        let target = tree.join(&rel);
        if target.symlink_metadata().is_ok() {
            continue;
        }
        let made = target.parent().map_or(Ok(()), fs::create_dir_all).and_then(|()| copy_tree(&main.join(&rel), &target));
        match made {
            Ok(()) => placed.push(rel),
            Err(e) => tracing::warn!(path = %rel, "worktree: could not copy {rel}: {e}"),
        }
    }
    placed
}

/// The first line of the block the host keeps in a repository's
/// `info/exclude`.
const EXCLUDE_HEADER: &str = "# ahpd: folders linked into worktrees (worktreeSymlinkFolders)";

/// Keeps the folders linked into a tree out of git's view of it: a link is
/// not a directory, so an ignore pattern such as `node_modules/` does not
/// match it and `git add -A` in the tree would commit a link into the main
/// checkout. Each link's path is added, anchored (`/node_modules`), to the
/// repository's `info/exclude`, which git reads from the common directory
/// for every checkout (a tree's own `info/exclude` is never read). Only
/// git-ignored folders are linked, so the main checkout already ignores
/// each path: the entry changes nothing there. Idempotent.
///
/// Errors: the exclude file cannot be read or written.
fn exclude_links(repo: &Repository, links: &[String]) -> Result<(), String> {
    if links.is_empty() {
        return Ok(());
    }
    let info = repo.commondir().join("info");
    let path = info.join("exclude");
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("could not read {}: {e}", path.display())),
    };
    let present: std::collections::BTreeSet<&str> = text.lines().collect();
    let missing: Vec<String> = links.iter().map(|l| format!("/{l}")).filter(|l| !present.contains(l.as_str())).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut out = text.clone();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if !present.contains(EXCLUDE_HEADER) {
        out.push_str(EXCLUDE_HEADER);
        out.push('\n');
    }
    for line in missing {
        out.push_str(&line);
        out.push('\n');
    }
    fs::create_dir_all(&info).map_err(|e| format!("could not make {}: {e}", info.display()))?;
    fs::write(&path, out).map_err(|e| format!("could not write {}: {e}", path.display()))
}

/// Copies a file, or a folder recursively; a symlink is copied as a link,
/// never followed.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let meta = fs::symlink_metadata(from)?;
    if meta.file_type().is_symlink() {
        std::os::unix::fs::symlink(fs::read_link(from)?, to)
    } else if meta.is_dir() {
        fs::create_dir_all(to)?;
        for entry in fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        fs::copy(from, to).map(|_| ())
    }
}

/// Whether `path` is one of `exclude` or inside one.
fn excluded(path: &str, exclude: &[String]) -> bool {
    exclude.iter().any(|e| path == e || path.starts_with(&format!("{e}/")))
}

/// Writes a commit of the working folder's tree (tracked and untracked,
/// not ignored, not `exclude`) under `checkpoint_ref`, without touching
/// HEAD, a branch, the index file or the stash. Returns the tree.
fn write_checkpoint<'r>(repo: &'r Repository, checkpoint_ref: &str, exclude: &[String]) -> Result<git2::Tree<'r>, String> {
    // The repository's index is read into memory and changed there only:
    // it is never written back.
    let mut index = repo.index().map_err(|e| err("could not read the index", e))?;
    let mut skip = |path: &Path, _spec: &[u8]| -> i32 { i32::from(path.to_str().is_some_and(|p| excluded(p, exclude))) };
    index.add_all(["*"].iter(), IndexAddOption::DEFAULT, Some(&mut skip)).map_err(|e| err("could not read the working folder", e))?;
    let mut skip = |path: &Path, _spec: &[u8]| -> i32 { i32::from(path.to_str().is_some_and(|p| excluded(p, exclude))) };
    index.update_all(["*"].iter(), Some(&mut skip)).map_err(|e| err("could not read the working folder", e))?;
    for path in exclude {
        let _ = index.remove_all([path.as_str()].iter(), None);
    }
    let tree_id = index.write_tree().map_err(|e| err("could not write the checkpoint's tree", e))?;
    let tree = repo.find_tree(tree_id).map_err(|e| err("could not read the checkpoint's tree", e))?;
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let sig = Signature::now(SIGNER.0, SIGNER.1).map_err(|e| err("could not sign the checkpoint", e))?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let message = format!("ahpd checkpoint {checkpoint_ref}");
    let commit = repo.commit(None, &sig, &sig, &message, &tree, &parents).map_err(|e| err("could not write the checkpoint", e))?;
    repo.reference(checkpoint_ref, commit, true, &message).map_err(|e| err(&format!("could not write {checkpoint_ref}"), e))?;
    Ok(tree)
}

/// A turn's checkpoint, and the session's changes: the diff stat from
/// `base` (a ref or a commit id) to the tree just written.
fn checkpoint(workdir: &Path, checkpoint_ref: &str, base: &str, exclude: &[String]) -> Result<Changes, String> {
    // A folder inside a repository checkpoints the repository it is in.
    let repo = Repository::discover(workdir).map_err(|e| err(&format!("could not open {}", workdir.display()), e))?;
    let lock = repo_lock(&repo);
    let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
    let tree = write_checkpoint(&repo, checkpoint_ref, exclude)?;
    let base_tree = repo
        .revparse_single(base)
        .and_then(|o| o.peel_to_tree())
        .map_err(|e| err(&format!("could not read the base {base}"), e))?;
    let diff = repo.diff_tree_to_tree(Some(&base_tree), Some(&tree), None).map_err(|e| err("could not diff", e))?;
    let stats = diff.stats().map_err(|e| err("could not count the changes", e))?;
    Ok(Changes { files: stats.files_changed() as u64, additions: stats.insertions() as u64, deletions: stats.deletions() as u64 })
}

/// Whether the tree holds work nobody committed (tracked changes, or
/// untracked files that are not ignored and not the host's own
/// placements).
fn has_uncommitted_work(tree: &Path, placed: &[String]) -> Result<bool, String> {
    let repo = Repository::open(tree).map_err(|e| err(&format!("could not open {}", tree.display()), e))?;
    let mut opts = StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(true).include_ignored(false).exclude_submodules(true);
    let statuses = repo.statuses(Some(&mut opts)).map_err(|e| err("could not read the tree's status", e))?;
    Ok(statuses.iter().any(|s| s.path().is_ok_and(|p| !excluded(p.trim_end_matches('/'), placed))))
}

/// Removes a folder without ever following a link: a link is unlinked,
/// a file removed, a real folder emptied then removed.
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in fs::read_dir(path)? {
            remove_tree(&entry?.path())?;
        }
        fs::remove_dir(path)
    } else {
        fs::remove_file(path)
    }
}

/// `disposeSession`: delete the session's checkpoint refs, and take its
/// tree off the disk as `removal` says (its branch stays).
fn dispose(folder: &Path, refs_prefix: &str, worktree: Option<&WorktreeRecord>, removal: Removal) -> Result<GitResult, String> {
    let Some(repo) = open(folder)? else { return Ok(GitResult::Disposed { kept_tree: false }) };
    let lock = repo_lock(&repo);
    let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
    if refs_prefix.starts_with("refs/agents/") && refs_prefix.len() > "refs/agents/".len() {
        let names: Vec<String> = repo
            .references_glob(&format!("{refs_prefix}*"))
            .map_err(|e| err("could not list the checkpoints", e))?
            .names()
            .flatten()
            .map(str::to_owned)
            .collect();
        for name in names {
            if let Ok(mut r) = repo.find_reference(&name) {
                r.delete().map_err(|e| err(&format!("could not delete {name}"), e))?;
            }
        }
    }
    let Some(w) = worktree else { return Ok(GitResult::Disposed { kept_tree: false }) };
    Ok(GitResult::Disposed { kept_tree: take_off_disk(&repo, w, removal)? })
}

/// Takes a tree off the disk and out of git's list of worktrees as
/// `removal` says; its branch stays. Returns whether it stayed. The caller
/// holds the repository's lock, so the check and the removal are one step.
fn take_off_disk(repo: &Repository, w: &WorktreeRecord, removal: Removal) -> Result<bool, String> {
    let path = Path::new(&w.path);
    if path.exists() {
        let keep = match removal {
            Removal::UnlessUncommitted => has_uncommitted_work(path, &w.placed)?,
        };
        if keep {
            return Ok(true);
        }
        remove_tree(path).map_err(|e| format!("could not remove the worktree {}: {e}", w.path))?;
    }
    if let Ok(wt) = repo.find_worktree(&w.name) {
        if wt.validate().is_err() {
            wt.prune(None).map_err(|e| err(&format!("could not prune the worktree {}", w.name), e))?;
        }
    }
    if let Some(parent) = path.parent() {
        // The `<repo>.worktrees` folder goes once it is empty.
        let _ = fs::remove_dir(parent);
    }
    Ok(false)
}

/// A tree cut for the window: the tree only, no checkpoint.
fn make_tree(folder: &Path, plan: &WorktreePlan, worktrees_root: Option<&str>) -> Result<GitResult, String> {
    let Some(repo) = open(folder)? else { return Err(format!("{} is not in a git repository", folder.display())) };
    let lock = repo_lock(&repo);
    let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
    Ok(GitResult::TreeMade { worktree: make_worktree(&repo, plan, worktrees_root)? })
}

/// Archiving a tree: off the disk as `removal` says; the branch stays so
/// [`restore_tree`] can put it back.
fn archive_tree(folder: &Path, w: &WorktreeRecord, removal: Removal) -> Result<GitResult, String> {
    let Some(repo) = open(folder)? else { return Err(format!("{} is not in a git repository", folder.display())) };
    let lock = repo_lock(&repo);
    let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
    Ok(GitResult::TreeArchived { kept: take_off_disk(&repo, w, removal)? })
}

/// Putting an archived tree back: the same branch at the same path, its
/// links and copies placed again. A tree still there is left alone.
fn restore_tree(folder: &Path, w: &WorktreeRecord) -> Result<GitResult, String> {
    let Some(repo) = open(folder)? else { return Err(format!("{} is not in a git repository", folder.display())) };
    let lock = repo_lock(&repo);
    let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
    let path = Path::new(&w.path);
    if path.exists() {
        return Ok(GitResult::TreeRestored);
    }
    prune_stale(&repo)?;
    if let Ok(wt) = repo.find_worktree(&w.name) {
        // An entry left behind whose folder is gone.
        if wt.validate().is_err() {
            wt.prune(None).map_err(|e| err(&format!("could not prune the worktree {}", w.name), e))?;
        }
    }
    let reference = repo
        .find_reference(&format!("refs/heads/{}", w.branch))
        .map_err(|e| err(&format!("the branch {} of the archived tree is gone: it cannot be put back", w.branch), e))?;
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("could not make {}: {e}", parent.display()))?;
    }
    let mut opts = WorktreeAddOptions::new();
    opts.reference(Some(&reference));
    repo.worktree(&w.name, path, Some(&opts)).map_err(|e| err(&format!("git could not put the worktree back at {} on {}", w.path, w.branch), e))?;
    let root = workdir_string(&repo);
    place_ignored(&repo, Path::new(&root), path, &w.links, &w.copies);
    Ok(GitResult::TreeRestored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahpd_core::session_config::default_branch;
    use ahpd_core::worktree::tree_names;
    use git2::{Oid, RepositoryInitOptions};

    fn init(dir: &Path, branch: &str) -> Repository {
        let mut opts = RepositoryInitOptions::new();
        opts.initial_head(branch);
        Repository::init_opts(dir, &opts).expect("init")
    }

    /// Writes `files` and commits them on HEAD (git2, with a test identity).
    fn commit(repo: &Repository, files: &[(&str, &str)], message: &str) -> Oid {
        let root = repo.workdir().expect("workdir").to_path_buf();
        let mut index = repo.index().expect("index");
        for (path, text) in files {
            let p = root.join(path);
            fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            fs::write(&p, text).expect("write");
            index.add_path(Path::new(path)).expect("add");
        }
        index.write().expect("write index");
        let tree = repo.find_tree(index.write_tree().expect("tree")).expect("find tree");
        let sig = Signature::now("Test", "test@example.com").expect("sig");
        let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents).expect("commit")
    }

    /// A plan for a tree on `new_branch` (or, without `create_new_branch`,
    /// on `base` itself) cut from `base` (`None`: the commit checked out),
    /// with the names the core offers ([`tree_names`]).
    fn plan_on(base: Option<&str>, new_branch: &str, create_new_branch: bool) -> WorktreePlan {
        WorktreePlan {
            base: base.map(str::to_owned),
            names: tree_names(create_new_branch, new_branch, base),
            create_new_branch,
            track: false,
            include_files: Vec::new(),
            symlink_folders: Vec::new(),
        }
    }

    /// A plan for a new branch `agents/s1` cut from `base`.
    fn plan(base: &str) -> WorktreePlan {
        plan_on(Some(base), "agents/s1", true)
    }

    /// The plan the core makes for a worktree session in `dir` whose config
    /// named no branch: the base it settles from the folder's facts
    /// (`default_branch(facts, true)`, `session_config::settle`).
    fn plan_in(dir: &Path) -> WorktreePlan {
        let facts = inspect(dir).expect("facts");
        plan_on(default_branch(&facts, true).as_deref(), "agents/s1", true)
    }

    fn begin_tree(dir: &Path, plan: &WorktreePlan) -> Result<WorktreeRecord, String> {
        match begin(dir, "refs/agents/s1/checkpoints/turn/0", Some(plan), None)? {
            GitResult::Begun { worktree: Some(w), .. } => Ok(w),
            other => Err(format!("unexpected {other:?}")),
        }
    }

    fn head_of(path: &str) -> Oid {
        Repository::open(path).expect("open tree").head().expect("head").peel_to_commit().expect("commit").id()
    }

    /// A tree archived goes off the disk and out of git's list with its
    /// branch kept; put back, it is the same branch at the same path with
    /// its links and copies placed again. A tree with uncommitted work
    /// stays on archive.
    #[test]
    fn an_archived_tree_keeps_its_branch_and_comes_back_with_its_placements() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("web");
        let repo = init(&dir, "main");
        commit(&repo, &[(".gitignore", "node_modules/\n.env\n"), ("seed.txt", "x\n")], "one");
        fs::create_dir_all(dir.join("node_modules/pkg")).expect("mkdir");
        fs::write(dir.join("node_modules/pkg/index.js"), "1\n").expect("write");
        fs::write(dir.join(".env"), "SECRET=1\n").expect("write");
        let mut p = plan_on(Some("main"), "agents/summarize-the-seed", true);
        p.symlink_folders = vec!["node_modules".into()];
        p.include_files = vec![".env".into()];
        let w = match make_tree(&dir, &p, None).expect("make") {
            GitResult::TreeMade { worktree } => worktree,
            other => panic!("unexpected {other:?}"),
        };
        let tree = PathBuf::from(&w.path);
        assert!(tree.join("seed.txt").exists());
        assert!(repo.references_glob("refs/agents/*").expect("glob").next().is_none(), "no checkpoint for a window's tree");
        let listed = |repo: &Repository| -> Vec<String> { repo.worktrees().expect("list").iter().filter_map(|n| n.ok().flatten().map(str::to_owned)).collect() };
        assert!(listed(&repo).contains(&w.name));

        assert_eq!(archive_tree(&dir, &w, Removal::UnlessUncommitted).expect("archive"), GitResult::TreeArchived { kept: false });
        assert!(!tree.exists());
        assert!(!listed(&repo).contains(&w.name));
        assert!(repo.find_branch(&w.branch, BranchType::Local).is_ok(), "the branch stays");
        assert!(dir.join("node_modules/pkg/index.js").exists() && dir.join(".env").exists(), "the originals stay");

        assert_eq!(restore_tree(&dir, &w).expect("restore"), GitResult::TreeRestored);
        assert!(tree.join("seed.txt").exists());
        assert!(listed(&repo).contains(&w.name));
        let head = Repository::open(&tree).expect("open").head().expect("head").shorthand().map(str::to_owned).ok();
        assert_eq!(head.as_deref(), Some(w.branch.as_str()));
        assert!(fs::symlink_metadata(tree.join("node_modules")).expect("link").file_type().is_symlink());
        assert_eq!(fs::read_to_string(tree.join(".env")).expect("copy"), "SECRET=1\n");
        // Neither the link nor the copy is in the tree's status.
        let mut opts = git2::StatusOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(true);
        let in_tree = Repository::open(&tree).expect("open");
        let listed: Vec<String> = in_tree.statuses(Some(&mut opts)).expect("status").iter().filter_map(|e| e.path().ok().map(str::to_owned)).collect();
        assert!(listed.is_empty(), "placed paths show in the tree's status: {listed:?}");
        let exclude = fs::read_to_string(repo.commondir().join("info/exclude")).expect("exclude");
        assert_eq!(exclude.matches("/node_modules\n").count(), 1, "written once, however often the tree is placed: {exclude}");
        // Putting back a tree that is there changes nothing.
        assert_eq!(restore_tree(&dir, &w).expect("again"), GitResult::TreeRestored);

        // Work nobody committed keeps the tree on disk.
        fs::write(tree.join("seed.txt"), "edited\n").expect("edit");
        assert_eq!(archive_tree(&dir, &w, Removal::UnlessUncommitted).expect("archive"), GitResult::TreeArchived { kept: true });
        assert!(tree.join("seed.txt").exists());
    }

    /// A tree cut from a folder inside another worktree goes beside the
    /// repository's main checkout and says so (`repo_root`); a folder
    /// session in a subfolder of a repository checkpoints that repository.
    #[test]
    fn trees_go_beside_the_main_checkout_and_subfolders_checkpoint_their_repository() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("app");
        let repo = init(&dir, "main");
        commit(&repo, &[("pkg/a.txt", "a\n")], "one");
        let first = begin_tree(&dir, &plan("main")).expect("tree");
        assert_eq!(first.repo_root, dir.display().to_string());
        let second_plan = plan_on(Some("main"), "agents/s2", true);
        let inside = PathBuf::from(&first.path).join("pkg");
        let second = match begin(&inside, "refs/agents/s2/checkpoints/turn/0", Some(&second_plan), None).expect("begin") {
            GitResult::Begun { repo_root, worktree: Some(w) } => {
                assert_eq!(repo_root.as_deref(), Some(first.path.as_str()), "the checkout the folder is in");
                w
            }
            other => panic!("unexpected {other:?}"),
        };
        assert!(second.path.starts_with(&format!("{}.worktrees/", dir.display())), "{}", second.path);
        assert_eq!(second.repo_root, dir.display().to_string());

        // A folder session in app/pkg: turn/0 and later checkpoints work.
        let sub = dir.join("pkg");
        assert!(matches!(begin(&sub, "refs/agents/s3/checkpoints/turn/0", None, None), Ok(GitResult::Begun { repo_root: Some(_), worktree: None })));
        fs::write(sub.join("a.txt"), "b\n").expect("edit");
        let changes = checkpoint(&sub, "refs/agents/s3/checkpoints/turn/1", "refs/agents/s3/checkpoints/turn/0", &[]).expect("checkpoint");
        assert_eq!(changes, Changes { files: 1, additions: 1, deletions: 1 });
    }

    #[test]
    fn only_master_cuts_from_master() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("app");
        let repo = init(&dir, "master");
        let c = commit(&repo, &[("a.txt", "a\n")], "one");
        let facts = inspect(&dir).expect("inspect");
        assert_eq!(facts.current_branch.as_deref(), Some("master"));
        assert_eq!(facts.default_branch, None);
        assert_eq!(facts.branches, ["master"]);
        let w = begin_tree(&dir, &plan_in(&dir)).expect("tree");
        assert_eq!(w.base_commit, c.to_string());
        assert_eq!(head_of(&w.path), c);
        assert!(w.path.starts_with(&format!("{}.worktrees/", dir.display())), "{}", w.path);
        assert_eq!(w.branch, "agents/s1");
        // The worktree holds turn/0 (refs are shared by every worktree).
        assert!(repo.find_reference("refs/agents/s1/checkpoints/turn/0").is_ok());
        // HEAD of the main checkout did not move.
        assert_eq!(repo.head().expect("head").shorthand().ok(), Some("master"));
    }

    #[test]
    fn trunk_without_remote_cuts_from_trunk() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("svc");
        let repo = init(&dir, "trunk");
        let c = commit(&repo, &[("a.txt", "a\n")], "one");
        assert_eq!(inspect(&dir).expect("facts").current_branch.as_deref(), Some("trunk"));
        let w = begin_tree(&dir, &plan_in(&dir)).expect("tree");
        assert_eq!(head_of(&w.path), c);
    }

    #[test]
    fn clone_with_origin_head_develop_and_stale_main() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("clone");
        let repo = init(&dir, "main");
        let stale = commit(&repo, &[("a.txt", "old\n")], "old main");
        // origin/develop is ahead; origin/HEAD names it; local main is stale.
        let sig = Signature::now("Test", "test@example.com").expect("sig");
        let tree = repo.find_commit(stale).expect("c").tree().expect("t");
        let parent = repo.find_commit(stale).expect("c");
        let develop = repo.commit(None, &sig, &sig, "develop", &tree, &[&parent]).expect("commit");
        repo.remote("origin", "https://example.invalid/x.git").expect("remote");
        repo.reference("refs/remotes/origin/develop", develop, true, "test").expect("ref");
        repo.reference_symbolic("refs/remotes/origin/HEAD", "refs/remotes/origin/develop", true, "test").expect("sym");
        let facts = inspect(&dir).expect("facts");
        assert_eq!(facts.default_branch.as_deref(), Some("develop"));
        assert_eq!(facts.current_branch.as_deref(), Some("main"));
        assert_eq!(facts.branches, ["develop", "main"]);
        assert_eq!(default_branch(&facts, true).as_deref(), Some("develop"));
        assert_eq!(default_branch(&facts, false).as_deref(), Some("main"));
        let mut p = plan_in(&dir);
        p.track = true;
        let w = begin_tree(&dir, &p).expect("tree");
        assert_eq!(w.base_commit, develop.to_string());
        assert_eq!(w.base_branch, "develop");
        assert_eq!(head_of(&w.path), develop);
        let b = repo.find_branch(&w.branch, BranchType::Local).expect("branch");
        assert_eq!(b.upstream().expect("upstream").name().ok().flatten(), Some("origin/develop"));
    }

    #[test]
    fn empty_repository_fails_clearly_and_folder_sessions_still_begin() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("empty");
        let repo = init(&dir, "main");
        let e = begin_tree(&dir, &plan_in(&dir)).expect_err("no tree in an empty repository");
        assert!(e.contains("no commits yet"), "{e}");
        assert!(repo.worktrees().expect("list").is_empty());
        fs::write(dir.join("new.txt"), "x\n").expect("write");
        let r = begin(&dir, "refs/agents/s2/checkpoints/turn/0", None, None).expect("begin");
        assert!(matches!(r, GitResult::Begun { repo_root: Some(_), worktree: None }));
        assert!(repo.find_reference("refs/agents/s2/checkpoints/turn/0").is_ok());
        assert!(repo.head().is_err(), "the unborn HEAD stays unborn");
    }

    #[test]
    fn detached_head_cuts_from_the_commit_checked_out() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("det");
        let repo = init(&dir, "main");
        let first = commit(&repo, &[("a.txt", "1\n")], "one");
        commit(&repo, &[("a.txt", "2\n")], "two");
        repo.set_head_detached(first).expect("detach");
        let facts = inspect(&dir).expect("facts");
        assert_eq!(facts.current_branch, None);
        let w = begin_tree(&dir, &plan_in(&dir)).expect("tree");
        assert_eq!(w.base_commit, first.to_string());
        assert_eq!(w.base_branch, "", "cut from a detached HEAD");
        assert_eq!(head_of(&w.path), first);
        // Naming no branch to check out as it is, on a detached HEAD, is a
        // clear error.
        let p = plan_on(default_branch(&facts, true).as_deref(), "agents/s9", false);
        let e = begin(&dir, "refs/agents/s9/checkpoints/turn/0", Some(&p), None).expect_err("no branch");
        assert!(e.contains("no branch is checked out"), "{e}");
    }

    #[test]
    fn ignored_folders_are_linked_files_copied_and_teardown_keeps_the_originals() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("web");
        let repo = init(&dir, "main");
        commit(&repo, &[(".gitignore", "node_modules/\n.env\n"), ("src/app.js", "x\n")], "one");
        fs::create_dir_all(dir.join("node_modules/pkg")).expect("mkdir");
        fs::write(dir.join("node_modules/pkg/index.js"), "module.exports = 1;\n").expect("write");
        fs::write(dir.join(".env"), "SECRET=1\n").expect("write");
        let mut p = plan("main");
        p.symlink_folders = vec!["node_modules".into()];
        p.include_files = vec![".env".into(), "node_modules/".into()];
        let w = begin_tree(&dir, &p).expect("tree");
        let tree = PathBuf::from(&w.path);
        assert!(fs::symlink_metadata(tree.join("node_modules")).expect("link").file_type().is_symlink());
        assert!(tree.join("node_modules/pkg/index.js").exists());
        assert!(!fs::symlink_metadata(tree.join(".env")).expect("copy").file_type().is_symlink());
        assert_eq!(w.placed, ["node_modules", ".env"]);
        fs::write(tree.join(".env"), "SECRET=2\n").expect("edit");
        assert_eq!(fs::read_to_string(dir.join(".env")).expect("read"), "SECRET=1\n");
        // A checkpoint in the tree counts neither the copy nor the link, and
        // the copy is never staged.
        let base = w.base_commit.clone();
        let changes = checkpoint(&tree, "refs/agents/s1/checkpoints/turn/1", &base, &w.placed).expect("checkpoint");
        assert_eq!(changes, Changes::default());
        let tree_repo = Repository::open(&tree).expect("open");
        assert!(tree_repo.index().expect("index").get_path(Path::new(".env"), 0).is_none());
        assert!(tree_repo.index().expect("index").get_path(Path::new("node_modules"), 0).is_none());
        // Teardown.
        let r = dispose(&dir, "refs/agents/s1/checkpoints/", Some(&w), Removal::UnlessUncommitted).expect("dispose");
        assert_eq!(r, GitResult::Disposed { kept_tree: false });
        assert!(dir.join("node_modules/pkg/index.js").exists());
        assert_eq!(fs::read_to_string(dir.join(".env")).expect("read"), "SECRET=1\n");
        assert!(!tree.exists());
        let names: Vec<String> = repo.worktrees().expect("list").iter().filter_map(|n| n.ok().flatten().map(str::to_owned)).collect();
        assert!(!names.contains(&w.name), "{names:?}");
        assert!(repo.references_glob("refs/agents/s1/*").expect("glob").next().is_none());
        assert!(repo.find_branch(&w.branch, BranchType::Local).is_ok(), "the branch stays");
    }

    #[test]
    fn a_tree_with_uncommitted_work_stays_on_dispose() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("keep");
        let repo = init(&dir, "main");
        commit(&repo, &[("a.txt", "a\n")], "one");
        let w = begin_tree(&dir, &plan("main")).expect("tree");
        fs::write(Path::new(&w.path).join("a.txt"), "changed\n").expect("edit");
        let r = dispose(&dir, "refs/agents/s1/checkpoints/", Some(&w), Removal::UnlessUncommitted).expect("dispose");
        assert_eq!(r, GitResult::Disposed { kept_tree: true });
        assert!(Path::new(&w.path).join("a.txt").exists());
    }

    #[test]
    fn stale_entries_are_pruned_and_names_never_collide() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("prune");
        let repo = init(&dir, "main");
        commit(&repo, &[("a.txt", "a\n")], "one");
        let first = begin_tree(&dir, &plan("main")).expect("tree");
        remove_tree(Path::new(&first.path)).expect("delete by hand");
        let second = begin_tree(&dir, &plan("main")).expect("tree again");
        assert_ne!(second.branch, first.branch, "the branch name is taken");
        assert_ne!(second.path, first.path);
        let names: Vec<String> = repo.worktrees().expect("list").iter().filter_map(|n| n.ok().flatten().map(str::to_owned)).collect();
        assert_eq!(names, std::slice::from_ref(&second.name), "the stale entry was pruned");
    }

    #[test]
    fn trees_made_at_once_in_one_repository_get_distinct_names() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("busy");
        let repo = init(&dir, "main");
        commit(&repo, &[("a.txt", "a\n")], "one");
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let dir = dir.clone();
                std::thread::spawn(move || begin_tree(&dir, &plan("main")))
            })
            .collect();
        let mut paths: Vec<String> = threads.into_iter().map(|t| t.join().expect("thread").expect("tree").path).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), 4, "{paths:?}");
        assert_eq!(repo.worktrees().expect("list").len(), 4);
    }

    #[test]
    fn checkpoints_need_no_identity_and_survive_gc() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("noid");
        let repo = init(&dir, "main");
        let head = commit(&repo, &[("a.txt", "a\n")], "one");
        let index_before = fs::read(dir.join(".git/index")).expect("index");
        begin(&dir, "refs/agents/s/checkpoints/turn/0", None, None).expect("begin");
        for n in 1..=3 {
            fs::write(dir.join("a.txt"), format!("a{n}\n")).expect("edit");
            checkpoint(&dir, &format!("refs/agents/s/checkpoints/turn/{n}"), "refs/agents/s/checkpoints/turn/0", &[]).expect("checkpoint");
        }
        // Checkpoints are signed by the host (no identity is read), and
        // HEAD, the branch and the index file are untouched.
        for n in 0..=3 {
            let c = repo.find_reference(&format!("refs/agents/s/checkpoints/turn/{n}")).expect("ref").peel_to_commit().expect("commit");
            assert_eq!(c.author().name().ok(), Some(SIGNER.0));
        }
        assert_eq!(repo.head().expect("head").peel_to_commit().expect("c").id(), head);
        assert_eq!(fs::read(dir.join(".git/index")).expect("index"), index_before);
        // `git gc --prune=now` (run only when a git binary is installed; the
        // product never runs it): objects reachable from refs are kept.
        if let Ok(out) = std::process::Command::new("git").arg("-C").arg(&dir).args(["gc", "--prune=now", "--quiet"]).output() {
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        let repo = Repository::open(&dir).expect("reopen");
        for n in 1..=3 {
            let c = repo.find_reference(&format!("refs/agents/s/checkpoints/turn/{n}")).expect("ref").peel_to_commit().expect("commit");
            assert!(repo.find_tree(c.tree_id()).is_ok());
        }
    }

    #[test]
    fn a_folder_session_counts_its_own_work_not_the_branch() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("dev");
        let repo = init(&dir, "main");
        let lines: String = (0..20).map(|i| format!("line {i}\n")).collect();
        let base = commit(&repo, &[("f.txt", &lines)], "base");
        let main = repo.find_commit(base).expect("c");
        repo.branch("dev", &main, false).expect("dev");
        repo.set_head("refs/heads/dev").expect("checkout dev");
        for i in 0..50 {
            commit(&repo, &[(&format!("d/{i}.txt"), "x\n")], "ahead");
        }
        begin(&dir, "refs/agents/d/checkpoints/turn/0", None, None).expect("begin");
        fs::write(dir.join("f.txt"), lines.replace("line 7\n", "line seven\n")).expect("edit");
        let c = checkpoint(&dir, "refs/agents/d/checkpoints/turn/1", "refs/agents/d/checkpoints/turn/0", &[]).expect("checkpoint");
        assert_eq!(c, Changes { files: 1, additions: 1, deletions: 1 });
        // A commit in the folder does not take it to zero.
        commit(&repo, &[("f.txt", &lines.replace("line 7\n", "line seven\n"))], "commit it");
        let c = checkpoint(&dir, "refs/agents/d/checkpoints/turn/2", "refs/agents/d/checkpoints/turn/0", &[]).expect("checkpoint");
        assert_eq!(c, Changes { files: 1, additions: 1, deletions: 1 });
    }

    #[test]
    fn a_folder_in_no_repository_is_answered_as_such() {
        let tmp = tempfile::tempdir().expect("tmp");
        assert_eq!(inspect(tmp.path()).expect("facts"), RepoFacts::not_a_repo());
        assert_eq!(inspect(&tmp.path().join("gone")).expect("a missing folder"), RepoFacts::not_a_repo());
        let r = begin(tmp.path(), "refs/agents/x/checkpoints/turn/0", Some(&plan_in(tmp.path())), None).expect("begin");
        assert_eq!(r, GitResult::Begun { repo_root: None, worktree: None });
    }

    #[test]
    fn trees_go_under_the_worktrees_root_when_given() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("proj");
        let repo = init(&dir, "main");
        commit(&repo, &[("a.txt", "a\n")], "one");
        let root = tmp.path().join("trees");
        let r = begin(&dir, "refs/agents/r/checkpoints/turn/0", Some(&plan_in(&dir)), root.to_str()).expect("begin");
        let GitResult::Begun { worktree: Some(w), .. } = r else { panic!("no tree: {r:?}") };
        assert!(w.path.starts_with(&format!("{}/proj/", root.display())), "{}", w.path);
        assert!(Path::new(&w.path).join("a.txt").exists());
    }
}
