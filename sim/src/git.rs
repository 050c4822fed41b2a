//! The simulated machine's git: a deterministic model of a few
//! repositories that answers exactly the `GitCmd`s the shell executes, with
//! the semantics of `shell/src/exec/git.rs` (Sessions page, "Isolation and
//! worktrees", and `changes` in "The state a session reports").
//!
//! A repository is its commits (each a tree of files, a file a list of
//! line ids), its branches, its checkpoint refs, its main checkout and the
//! worktrees in git's list; a checkout is its HEAD and its working files.
//! Trees go at `<repo>.worktrees/<name>` (no `--worktrees-root`). The
//! simulated agent "writes" into the checkout its turn runs in
//! ([`GitWorld::agent_turn`]), which is what change counts and
//! `kept_tree` see. A command is executed when the host issues it; its
//! answer reaches the host with the seed's git latency.
//!
//! Paths are compared by whole components, as `ahpd_core::trust::within`
//! does. A folder that is in no repository answers as one in none; the
//! folder of a tree taken off the disk does not exist, and git cannot open
//! it (as `Repository::discover` fails on a missing path).

use std::collections::{BTreeMap, BTreeSet};

use ahpd_core::git::{Changes, FolderKind, GitCmd, GitResult, Removal, RepoFacts, WorktreePlan, WorktreeRecord};
use ahpd_core::trust::within;
use ahpd_core::worktree::{pattern_matches, tree_path};

use crate::rng::SimRng;

/// A tree of files: path (relative to the repository's top) to its lines.
type Files = BTreeMap<String, Vec<u64>>;

/// What a checkout has checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Head {
    /// A branch (possibly unborn: no commit yet).
    Branch(String),
    /// A detached HEAD at a commit.
    Detached(u64),
}

/// One working folder of a repository: the main checkout or a worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Checkout {
    head: Head,
    work: Files,
}

/// A worktree in git's list; `checkout` is `None` once its folder is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    path: String,
    checkout: Option<Checkout>,
}

/// One repository.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Repo {
    root: String,
    /// `origin/HEAD`'s branch.
    remote_default: Option<String>,
    /// Local branches: name to commit.
    branches: BTreeMap<String, u64>,
    /// Upstreams of local branches (`origin/<name>`).
    upstreams: BTreeMap<String, String>,
    /// `origin/<name>` branches: name to commit.
    remote: BTreeMap<String, u64>,
    commits: BTreeMap<u64, Files>,
    /// Checkpoint refs.
    refs: BTreeMap<String, u64>,
    main: Checkout,
    /// Git's list of worktrees, by name.
    trees: BTreeMap<String, Entry>,
    /// Git-ignored paths in the main checkout: (path, is a folder).
    ignored: Vec<(String, bool)>,
}

/// Where a path is: repository index and `None` for the main checkout or
/// the name of a worktree.
type At = (usize, Option<String>);

/// A tree the model made, as it answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadeTree {
    /// Git's name for it.
    pub name: String,
    /// Its branch.
    pub branch: String,
    /// The commit it was cut from.
    pub base_commit: String,
}

/// Counters of what git was asked and answered, for the run summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitStats {
    /// Commands by kind.
    pub commands: BTreeMap<&'static str, u64>,
    /// Commands answered with `Outcome::Failed` by the model (git's own
    /// refusals), not by the `git_fail` fault.
    pub refusals: u64,
    /// Trees made.
    pub trees_made: u64,
    /// Trees taken off the disk.
    pub trees_removed: u64,
    /// Trees kept on disk for uncommitted work.
    pub trees_kept: u64,
}

/// A tree the last command took off the disk (for the trees checker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// The tree's folder.
    pub path: String,
}

/// The simulated machine's repositories.
#[derive(Debug, Clone, Default)]
pub struct GitWorld {
    /// False: the machine has no repositories (every folder answers as one
    /// in none, `GitCmd::no_repo_answer`).
    pub enabled: bool,
    repos: Vec<Repo>,
    next_id: u64,
    /// Every tree made, by folder.
    pub made: BTreeMap<String, MadeTree>,
    /// Every commit id handed out as a tree's `base_commit`.
    pub bases: BTreeSet<String>,
    /// Trees the last executed command took off the disk.
    pub removed: Vec<Removed>,
    /// Counters.
    pub stats: GitStats,
}

/// The folders of the simulated machine a client may pick, as `file:` URIs
/// (repositories, a subfolder, a plain folder, an empty repository).
pub const FOLDERS: [&str; 7] = [
    "file:///work/repo1",
    "file:///work/repo1/pkg",
    "file:///work/repo2",
    "file:///work/plain",
    "file:///work/empty",
    "file:///work/a",
    "file:///work/b",
];

/// A folder that does not exist on the simulated machine (issue 25: a
/// `createSession` in it is refused with -32602).
pub const MISSING_FOLDER: &str = "/work/gone";
/// A file, not a folder, on the simulated machine.
pub const A_FILE: &str = "/work/a/README.md";

/// What is at `path` on the simulated machine when it is not a directory
/// (the shell's `kind_of`): only [`MISSING_FOLDER`] and [`A_FILE`] are not.
fn folder_kind(path: &str) -> Option<FolderKind> {
    let path = ahpd_core::git::normalize_path(path).unwrap_or_else(|| path.to_owned());
    if within(&path, MISSING_FOLDER) {
        Some(FolderKind::Missing)
    } else if path == A_FILE {
        Some(FolderKind::NotADirectory)
    } else {
        None
    }
}


/// A commit id as git prints it.
pub fn oid(id: u64) -> String {
    format!("{id:040x}")
}

fn kind(command: &GitCmd) -> &'static str {
    match command {
        GitCmd::Inspect { .. } => "inspect",
        GitCmd::Begin { worktree: Some(_), .. } => "begin_tree",
        GitCmd::Begin { .. } => "begin",
        GitCmd::Checkpoint { .. } => "checkpoint",
        GitCmd::Dispose { .. } => "dispose",
        GitCmd::MakeTree { .. } => "make_tree",
        GitCmd::ArchiveTree { .. } => "archive_tree",
        GitCmd::RestoreTree { .. } => "restore_tree",
    }
}

/// The diff stat from `a` to `b`: files whose lines differ, lines only in
/// `b`, lines only in `a` (line ids are unique, so this is the diff).
fn diff(a: &Files, b: &Files) -> Changes {
    let mut c = Changes::default();
    let paths: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for p in paths {
        let (x, y) = (a.get(p).map(Vec::as_slice).unwrap_or_default(), b.get(p).map(Vec::as_slice).unwrap_or_default());
        if x == y && a.contains_key(p) == b.contains_key(p) {
            continue;
        }
        c.files += 1;
        c.additions += y.iter().filter(|l| !x.contains(l)).count() as u64;
        c.deletions += x.iter().filter(|l| !y.contains(l)).count() as u64;
    }
    c
}

fn without(files: &Files, exclude: &[String]) -> Files {
    files.iter().filter(|(p, _)| !exclude.iter().any(|e| within(p, e))).map(|(p, l)| (p.clone(), l.clone())).collect()
}

impl GitWorld {
    /// The machine of a seed: with `enabled`, `/work/repo1` (branches
    /// `main` and `dev`, `origin/HEAD` naming `main` or `dev`, a remote-only
    /// `feature`, ignored `node_modules/` and `.env`, a subfolder `pkg`),
    /// `/work/repo2` (one branch; a detached HEAD when `detached`, no
    /// remote) and `/work/empty` (a repository with no commits).
    pub fn new(enabled: bool, remote_default_dev: bool, detached: bool) -> GitWorld {
        let mut g = GitWorld { enabled, next_id: 0x5eed_0000, ..GitWorld::default() };
        if !enabled {
            return g;
        }
        let files1 = g.files(&[("README.md", 3), ("pkg/lib.rs", 5), ("src/main.rs", 4)]);
        let c1 = g.id();
        let mut dev_files = files1.clone();
        dev_files.insert("src/dev.rs".into(), g.lines(2));
        let c2 = g.id();
        let feature = g.id();
        let mut feature_files = files1.clone();
        feature_files.insert("FEATURE.md".into(), g.lines(1));
        g.repos.push(Repo {
            root: "/work/repo1".into(),
            remote_default: Some(if remote_default_dev { "dev" } else { "main" }.into()),
            branches: [("main".to_owned(), c1), ("dev".to_owned(), c2)].into_iter().collect(),
            upstreams: [("main".to_owned(), "origin/main".to_owned())].into_iter().collect(),
            remote: [("main".to_owned(), c1), ("dev".to_owned(), c2), ("feature".to_owned(), feature)].into_iter().collect(),
            commits: [(c1, files1.clone()), (c2, dev_files), (feature, feature_files)].into_iter().collect(),
            refs: BTreeMap::new(),
            main: Checkout { head: Head::Branch("main".into()), work: files1 },
            trees: BTreeMap::new(),
            ignored: vec![("node_modules".into(), true), (".env".into(), false)],
        });
        let files2 = g.files(&[("lib.c", 6)]);
        let c3 = g.id();
        g.repos.push(Repo {
            root: "/work/repo2".into(),
            remote_default: None,
            branches: [("trunk".to_owned(), c3)].into_iter().collect(),
            upstreams: BTreeMap::new(),
            remote: BTreeMap::new(),
            commits: [(c3, files2.clone())].into_iter().collect(),
            refs: BTreeMap::new(),
            main: Checkout { head: if detached { Head::Detached(c3) } else { Head::Branch("trunk".into()) }, work: files2 },
            trees: BTreeMap::new(),
            ignored: Vec::new(),
        });
        g.repos.push(Repo {
            root: "/work/empty".into(),
            remote_default: None,
            branches: BTreeMap::new(),
            upstreams: BTreeMap::new(),
            remote: BTreeMap::new(),
            commits: BTreeMap::new(),
            refs: BTreeMap::new(),
            main: Checkout { head: Head::Branch("main".into()), work: Files::new() },
            trees: BTreeMap::new(),
            ignored: Vec::new(),
        });
        g
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn lines(&mut self, n: usize) -> Vec<u64> {
        (0..n).map(|_| self.id()).collect()
    }

    fn files(&mut self, spec: &[(&str, usize)]) -> Files {
        spec.iter().map(|(p, n)| ((*p).to_owned(), self.lines(*n))).collect()
    }

    /// The checkout `path` is in, if any: the longest checkout folder on
    /// disk that is `path` or holds it. `Err` for a path inside a tree
    /// folder that is gone (git cannot open a missing folder).
    /// The shell's answer to an `Inspect` of `folder` and `also` when git
    /// fails on the folder's repository with `message` (half of the
    /// `git_fail` fault): the kinds are still read, and a root that is a
    /// directory is answered as one in no repository with git's words; a
    /// root that is not one never reached git.
    pub fn inspect_unreadable(&mut self, folder: &str, also: &[String], message: &str) -> GitResult {
        let not_directories = self.kinds(folder, also);
        let reached_git = !not_directories.iter().any(|(p, _)| p == folder);
        GitResult::Repo(RepoFacts { not_directories, git_error: reached_git.then(|| message.to_owned()), ..RepoFacts::not_a_repo() })
    }

    /// The answer's `not_directories` for `folder` and `also` (the shell's
    /// `kind_of` on each): [`folder_kind`]'s fixed paths, and the folder
    /// of a tree git made and took off the disk, which is missing.
    fn kinds(&self, folder: &str, also: &[String]) -> Vec<(String, FolderKind)> {
        std::iter::once(folder).chain(also.iter().map(String::as_str)).filter_map(|p| self.kind_of(p).map(|k| (p.to_owned(), k))).collect()
    }

    fn kind_of(&self, path: &str) -> Option<FolderKind> {
        if let Some(kind) = folder_kind(path) {
            return Some(kind);
        }
        let normal = ahpd_core::git::normalize_path(path).unwrap_or_else(|| path.to_owned());
        let removed = self.made.keys().any(|t| within(&normal, t)) && !self.on_disk_tree(&normal);
        removed.then_some(FolderKind::Missing)
    }

    /// Whether `path` is inside a tree that is on disk now.
    fn on_disk_tree(&self, path: &str) -> bool {
        self.repos.iter().any(|r| r.trees.values().any(|e| e.checkout.is_some() && within(path, &e.path)))
    }

    fn locate(&self, path: &str) -> Result<Option<At>, String> {
        let path = ahpd_core::git::normalize_path(path).unwrap_or_else(|| path.to_owned());
        let mut best: Option<(usize, At)> = None;
        for (i, repo) in self.repos.iter().enumerate() {
            if within(&path, &repo.root) && best.as_ref().is_none_or(|(len, _)| repo.root.len() > *len) {
                best = Some((repo.root.len(), (i, None)));
            }
            for (name, e) in &repo.trees {
                if e.checkout.is_some() && within(&path, &e.path) && best.as_ref().is_none_or(|(len, _)| e.path.len() > *len) {
                    best = Some((e.path.len(), (i, Some(name.clone()))));
                }
            }
        }
        if best.is_none() && self.made.keys().any(|t| within(&path, t)) {
            return Err(format!("could not open the repository at {path}: failed to resolve path '{path}': No such file or directory"));
        }
        Ok(best.map(|(_, at)| at))
    }

    fn checkout(&self, at: &At) -> &Checkout {
        let repo = &self.repos[at.0];
        match &at.1 {
            None => &repo.main,
            Some(name) => repo.trees[name].checkout.as_ref().expect("located checkouts are on disk"),
        }
    }

    fn checkout_mut(&mut self, at: &At) -> &mut Checkout {
        let repo = &mut self.repos[at.0];
        match &at.1 {
            None => &mut repo.main,
            Some(name) => repo.trees.get_mut(name).and_then(|e| e.checkout.as_mut()).expect("located checkouts are on disk"),
        }
    }

    fn workdir(&self, at: &At) -> String {
        match &at.1 {
            None => self.repos[at.0].root.clone(),
            Some(name) => self.repos[at.0].trees[name].path.clone(),
        }
    }

    fn head_commit(&self, at: &At) -> Option<u64> {
        match &self.checkout(at).head {
            Head::Branch(b) => self.repos[at.0].branches.get(b).copied(),
            Head::Detached(c) => Some(*c),
        }
    }

    fn head_files(&self, at: &At) -> Files {
        self.head_commit(at).and_then(|c| self.repos[at.0].commits.get(&c).cloned()).unwrap_or_default()
    }

    /// Whether a branch is checked out in any checkout of the repository.
    fn checked_out(&self, repo: usize, branch: &str) -> bool {
        let r = &self.repos[repo];
        let is = |c: &Checkout| c.head == Head::Branch(branch.to_owned());
        is(&r.main) || r.trees.values().filter_map(|e| e.checkout.as_ref()).any(is)
    }

    fn facts(&self, at: &At) -> RepoFacts {
        let repo = &self.repos[at.0];
        let current_branch = match &self.checkout(at).head {
            Head::Branch(b) if repo.branches.contains_key(b) => Some(b.clone()),
            _ => None,
        };
        let mut branches: Vec<String> = repo.branches.keys().cloned().collect();
        for r in repo.remote.keys() {
            if !branches.contains(r) {
                branches.push(r.clone());
            }
        }
        branches.sort();
        RepoFacts { root: Some(self.workdir(at)), current_branch, default_branch: repo.remote_default.clone(), branches, not_directories: Vec::new(), git_error: None }
    }

    /// Runs one command; `Err` is git's words. Trees it takes off the disk
    /// are left in [`GitWorld::removed`].
    pub fn run(&mut self, command: &GitCmd) -> Result<GitResult, String> {
        self.removed.clear();
        *self.stats.commands.entry(kind(command)).or_default() += 1;
        if let GitCmd::Inspect { folder, also } = command {
            // As the shell's `inspect_folders`: the kinds first, then git
            // on a root that is a directory; git's error there is answered
            // as a folder in no repository with its words.
            let not_directories = self.kinds(folder, also);
            if !self.enabled || not_directories.iter().any(|(p, _)| p == folder) {
                return Ok(GitResult::Repo(RepoFacts { not_directories, ..RepoFacts::not_a_repo() }));
            }
            let facts = match self.execute(command) {
                Ok(GitResult::Repo(facts)) => facts,
                Ok(other) => return Ok(other),
                Err(message) => {
                    self.stats.refusals += 1;
                    RepoFacts { git_error: Some(message), ..RepoFacts::not_a_repo() }
                }
            };
            return Ok(GitResult::Repo(RepoFacts { not_directories, ..facts }));
        }
        if !self.enabled {
            return Ok(command.no_repo_answer());
        }
        let result = self.execute(command);
        if result.is_err() {
            self.stats.refusals += 1;
        }
        result
    }

    fn execute(&mut self, command: &GitCmd) -> Result<GitResult, String> {
        match command {
            GitCmd::Inspect { folder, .. } => Ok(GitResult::Repo(match self.locate(folder)? {
                Some(at) => self.facts(&at),
                None => RepoFacts::not_a_repo(),
            })),
            GitCmd::Begin { folder, checkpoint_ref, worktree } => {
                let Some(at) = self.locate(folder)? else { return Ok(GitResult::Begun { repo_root: None, worktree: None }) };
                let root = self.workdir(&at);
                let tree = match worktree {
                    Some(plan) => Some(self.make_worktree(&at, plan)?),
                    None => None,
                };
                let start = match &tree {
                    Some(w) => self.locate(&w.path)?.ok_or("the new tree vanished")?,
                    None => at,
                };
                let exclude = tree.as_ref().map(|w| w.placed.clone()).unwrap_or_default();
                self.write_checkpoint(&start, checkpoint_ref, &exclude);
                Ok(GitResult::Begun { repo_root: Some(root), worktree: tree })
            }
            GitCmd::Checkpoint { workdir, checkpoint_ref, base, exclude } => {
                let at = self
                    .locate(workdir)?
                    .ok_or_else(|| format!("could not open {workdir}: could not find repository at '{workdir}'"))?;
                let written = self.write_checkpoint(&at, checkpoint_ref, exclude);
                let repo = &self.repos[at.0];
                let base_id = repo
                    .refs
                    .get(base)
                    .copied()
                    .or_else(|| u64::from_str_radix(base, 16).ok().filter(|c| repo.commits.contains_key(c)))
                    .ok_or_else(|| format!("could not read the base {base}: revspec '{base}' not found"))?;
                Ok(GitResult::Checkpointed { changes: diff(&repo.commits[&base_id], &repo.commits[&written]) })
            }
            GitCmd::Dispose { repo, refs_prefix, worktree, removal } => {
                let Some(at) = self.locate(repo)? else { return Ok(GitResult::Disposed { kept_tree: false }) };
                if refs_prefix.starts_with("refs/agents/") && refs_prefix.len() > "refs/agents/".len() {
                    self.repos[at.0].refs.retain(|r, _| !r.starts_with(refs_prefix.as_str()));
                }
                let Some(w) = worktree else { return Ok(GitResult::Disposed { kept_tree: false }) };
                Ok(GitResult::Disposed { kept_tree: self.take_off_disk(at.0, w, *removal) })
            }
            GitCmd::MakeTree { folder, plan } => {
                let at = self.locate(folder)?.ok_or_else(|| format!("{folder} is not in a git repository"))?;
                Ok(GitResult::TreeMade { worktree: self.make_worktree(&at, plan)? })
            }
            GitCmd::ArchiveTree { repo, worktree, removal } => {
                let at = self.locate(repo)?.ok_or_else(|| format!("{repo} is not in a git repository"))?;
                Ok(GitResult::TreeArchived { kept: self.take_off_disk(at.0, worktree, *removal) })
            }
            GitCmd::RestoreTree { repo, worktree } => {
                let at = self.locate(repo)?.ok_or_else(|| format!("{repo} is not in a git repository"))?;
                self.restore(at.0, worktree)
            }
        }
    }

    /// Writes checkpoint `name` of the checkout's working files (minus
    /// `exclude`) and returns its commit.
    fn write_checkpoint(&mut self, at: &At, name: &str, exclude: &[String]) -> u64 {
        let files = without(&self.checkout(at).work, exclude);
        let id = self.id();
        let repo = &mut self.repos[at.0];
        repo.commits.insert(id, files);
        repo.refs.insert(name.to_owned(), id);
        id
    }

    /// The shell's `make_worktree`: the plan's base, the first of its
    /// names that is free; git's refusals as errors.
    fn make_worktree(&mut self, at: &At, plan: &WorktreePlan) -> Result<WorktreeRecord, String> {
        let ri = at.0;
        let root = self.repos[ri].root.clone();
        // Entries whose folder is gone are pruned first.
        self.repos[ri].trees.retain(|_, e| e.checkout.is_some());
        let facts = self.facts(at);
        if self.head_commit(at).is_none() && facts.branches.is_empty() {
            return Err("the repository has no commits yet: a worktree needs a commit to start from".to_owned());
        }
        let base = plan.base.clone();
        let (commit, upstream) = match &base {
            Some(b) => {
                let repo = &self.repos[ri];
                match (repo.branches.get(b), repo.remote.get(b)) {
                    (Some(c), _) => (*c, repo.upstreams.get(b).cloned()),
                    (None, Some(c)) => (*c, Some(format!("origin/{b}"))),
                    (None, None) => return Err(format!("the base branch {b} does not exist in this repository")),
                }
            }
            None => (self.head_commit(at).ok_or("the repository's HEAD names no commit: reference 'HEAD' not found")?, None),
        };
        let repo = &self.repos[ri];
        let branch_taken = |name: &str| repo.branches.contains_key(name);
        let folder_taken = |folder: &str| {
            let path = tree_path(&root, None, folder);
            repo.trees.contains_key(folder) || repo.trees.values().any(|e| e.path == path)
        };
        let (branch, folder) = if plan.create_new_branch {
            let first = plan.names.first().map(|n| n.branch.as_str()).unwrap_or_default();
            let chosen = plan.names.iter().find(|n| !branch_taken(&n.branch) && !folder_taken(&n.folder));
            let chosen = chosen.ok_or_else(|| format!("every name tried for the branch {first} is taken"))?;
            (chosen.branch.clone(), chosen.folder.clone())
        } else {
            let Some(name) = base.clone() else {
                return Err("no branch is checked out and none was chosen: name a branch to check out".to_owned());
            };
            let chosen = plan.names.iter().find(|n| !folder_taken(&n.folder));
            (name.clone(), chosen.ok_or_else(|| format!("every folder tried for the branch {name} is taken"))?.folder.clone())
        };
        let path = tree_path(&root, None, &folder);
        // The branch is made (or already there) before git adds the tree,
        // as the shell does: a refused add leaves the branch behind.
        let repo = &mut self.repos[ri];
        if !repo.branches.contains_key(&branch) {
            repo.branches.insert(branch.clone(), commit);
            if let Some(up) = upstream.filter(|_| plan.track || !plan.create_new_branch) {
                repo.upstreams.insert(branch.clone(), up);
            }
        }
        if self.checked_out(ri, &branch) {
            return Err(format!(
                "git could not make the worktree at {path} on {branch}: reference 'refs/heads/{branch}' is already checked out"
            ));
        }
        let repo = &mut self.repos[ri];
        let files = repo.commits.get(&repo.branches[&branch]).cloned().unwrap_or_default();
        repo.trees.insert(folder.clone(), Entry { path: path.clone(), checkout: Some(Checkout { head: Head::Branch(branch.clone()), work: files }) });
        let placed = self.placed(ri, &plan.symlink_folders, &plan.include_files);
        let base_commit = oid(commit);
        self.made.insert(path.clone(), MadeTree { name: folder.clone(), branch: branch.clone(), base_commit: base_commit.clone() });
        self.bases.insert(base_commit.clone());
        self.stats.trees_made += 1;
        Ok(WorktreeRecord {
            path,
            branch,
            base_commit,
            base_branch: base.unwrap_or_default(),
            name: folder,
            placed,
            links: plan.symlink_folders.clone(),
            copies: plan.include_files.clone(),
            off_disk: false,
            repo_root: root,
        })
    }

    /// The ignored paths the patterns place: linked folders, then copied
    /// files not inside a linked folder.
    fn placed(&self, ri: usize, links: &[String], copies: &[String]) -> Vec<String> {
        let ignored = &self.repos[ri].ignored;
        let mut placed: Vec<String> = Vec::new();
        for (p, is_dir) in ignored {
            if *is_dir && links.iter().any(|l| pattern_matches(l, p, true)) {
                placed.push(p.clone());
            }
        }
        for (p, is_dir) in ignored {
            if copies.iter().any(|c| pattern_matches(c, p, *is_dir)) && !placed.iter().any(|l| within(p, l)) {
                placed.push(p.clone());
            }
        }
        placed
    }

    /// The shell's `take_off_disk`: as `removal` says, a tree with
    /// uncommitted work stays (true); else its folder goes and its entry is
    /// pruned, its branch kept.
    fn take_off_disk(&mut self, ri: usize, w: &WorktreeRecord, removal: Removal) -> bool {
        let on_disk = self.repos[ri].trees.iter().find(|(_, e)| e.path == w.path && e.checkout.is_some()).map(|(n, _)| n.clone());
        if let Some(name) = on_disk {
            let at = (ri, Some(name.clone()));
            let keep = match removal {
                Removal::UnlessUncommitted => without(&self.checkout(&at).work, &w.placed) != without(&self.head_files(&at), &w.placed),
            };
            if keep {
                self.stats.trees_kept += 1;
                return true;
            }
            self.repos[ri].trees.remove(&name);
            self.removed.push(Removed { path: w.path.clone() });
            self.stats.trees_removed += 1;
        }
        if self.repos[ri].trees.get(&w.name).is_some_and(|e| e.checkout.is_none()) {
            self.repos[ri].trees.remove(&w.name);
        }
        false
    }

    /// The shell's `restore_tree`: a tree there is left alone; else the
    /// same branch at the same path.
    fn restore(&mut self, ri: usize, w: &WorktreeRecord) -> Result<GitResult, String> {
        if self.repos[ri].trees.values().any(|e| e.path == w.path && e.checkout.is_some()) {
            return Ok(GitResult::TreeRestored);
        }
        let repo = &mut self.repos[ri];
        repo.trees.retain(|_, e| e.checkout.is_some());
        let Some(&commit) = repo.branches.get(&w.branch) else {
            return Err(format!("the branch {} of the archived tree is gone: it cannot be put back: reference 'refs/heads/{}' not found", w.branch, w.branch));
        };
        if repo.trees.contains_key(&w.name) {
            return Err(format!("git could not put the worktree back at {} on {}: worktree '{}' already exists", w.path, w.branch, w.name));
        }
        if self.checked_out(ri, &w.branch) {
            return Err(format!(
                "git could not put the worktree back at {} on {}: reference 'refs/heads/{}' is already checked out",
                w.path, w.branch, w.branch
            ));
        }
        let repo = &mut self.repos[ri];
        let files = repo.commits.get(&commit).cloned().unwrap_or_default();
        repo.trees.insert(w.name.clone(), Entry { path: w.path.clone(), checkout: Some(Checkout { head: Head::Branch(w.branch.clone()), work: files }) });
        Ok(GitResult::TreeRestored)
    }

    /// The simulated agent's turn in folder `path` wrote something (or
    /// not): edits a line, adds lines or a file, or deletes a file under
    /// that folder of its checkout; sometimes commits all of its checkout's
    /// work on its branch. Nothing happens outside a repository or on an
    /// unborn branch's commit.
    pub fn agent_turn(&mut self, path: &str, rng: &mut SimRng) {
        if !self.enabled {
            return;
        }
        let Ok(Some(at)) = self.locate(path) else { return };
        let prefix = ahpd_core::git::rebase_path(path, &self.workdir(&at), "/").map(|p| p.trim_start_matches('/').to_owned()).unwrap_or_default();
        match rng.weighted(&[4, 3, 2, 1, 3, 2]) {
            0 | 1 | 2 | 3 => {
                let choice = rng.below(4);
                let new_line = self.id();
                let new_file_lines = self.lines(2);
                let n = self.next_id;
                let work = &mut self.checkout_mut(&at).work;
                let mine: Vec<String> = work.keys().filter(|p| prefix.is_empty() || within(p, &prefix)).cloned().collect();
                let target = mine.get((n as usize) % mine.len().max(1)).cloned();
                match (choice, target) {
                    (0, Some(f)) => {
                        if let Some(lines) = work.get_mut(&f) {
                            if !lines.is_empty() {
                                let i = (n as usize) % lines.len();
                                lines[i] = new_line;
                            }
                        }
                    }
                    (1, Some(f)) => work.entry(f).or_default().push(new_line),
                    (3, Some(f)) if mine.len() > 1 => {
                        work.remove(&f);
                    }
                    _ => {
                        let name = if prefix.is_empty() { format!("agent-{n:x}.txt") } else { format!("{prefix}/agent-{n:x}.txt") };
                        work.insert(name, new_file_lines);
                    }
                }
            }
            4 => {
                // The agent commits its checkout's work.
                let Head::Branch(branch) = self.checkout(&at).head.clone() else { return };
                let files = self.checkout(&at).work.clone();
                let id = self.id();
                let repo = &mut self.repos[at.0];
                repo.commits.insert(id, files);
                repo.branches.insert(branch, id);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan for a new branch cut from `base`, named as the core names it.
    fn plan_from(base: Option<&str>, new_branch: &str, create_new_branch: bool) -> WorktreePlan {
        WorktreePlan {
            base: base.map(str::to_owned),
            names: ahpd_core::worktree::tree_names(create_new_branch, new_branch, base),
            create_new_branch,
            track: false,
            include_files: vec![".env".into()],
            symlink_folders: vec!["node_modules".into()],
        }
    }

    /// The plan the core makes for a worktree session in `folder` whose
    /// config named no branch: the default it settles from the folder's
    /// facts (`session_config::settle`).
    fn plan(g: &mut GitWorld, folder: &str, new_branch: &str) -> WorktreePlan {
        let facts = match g.run(&GitCmd::Inspect { folder: folder.to_owned(), also: Vec::new() }) {
            Ok(GitResult::Repo(f)) => f,
            other => panic!("{other:?}"),
        };
        plan_from(ahpd_core::session_config::default_branch(&facts, true).as_deref(), new_branch, true)
    }

    #[test]
    fn a_tree_is_made_beside_the_repository_checkpointed_archived_and_put_back() {
        let mut g = GitWorld::new(true, false, false);
        let p = plan(&mut g, "/work/repo1/pkg", "agents/s1");
        let begun = g.run(&GitCmd::Begin { folder: "/work/repo1/pkg".into(), checkpoint_ref: "refs/agents/s1/checkpoints/turn/0".into(), worktree: Some(p) });
        let Ok(GitResult::Begun { repo_root: Some(root), worktree: Some(w) }) = begun else { panic!("{begun:?}") };
        assert_eq!(root, "/work/repo1");
        assert!(w.path.starts_with("/work/repo1.worktrees/agents-s1-"), "{}", w.path);
        assert_eq!(w.base_branch, "main");
        assert_eq!(w.placed, vec!["node_modules".to_owned(), ".env".to_owned()]);
        let facts = g.run(&GitCmd::Inspect { folder: format!("{}/pkg", w.path), also: Vec::new() });
        assert!(matches!(facts, Ok(GitResult::Repo(RepoFacts { root: Some(ref r), current_branch: Some(ref b), .. })) if *r == w.path && b == "agents/s1"));
        let mut rng = SimRng::new(1, crate::rng::Stream::World);
        let cp = |g: &mut GitWorld, n: u32| g.run(&GitCmd::Checkpoint { workdir: w.path.clone(), checkpoint_ref: format!("refs/agents/s1/checkpoints/turn/{n}"), base: w.base_commit.clone(), exclude: w.placed.clone() });
        assert_eq!(cp(&mut g, 1), Ok(GitResult::Checkpointed { changes: Changes::default() }));
        while g.run(&GitCmd::Checkpoint { workdir: w.path.clone(), checkpoint_ref: "refs/x".into(), base: w.base_commit.clone(), exclude: vec![] }) == Ok(GitResult::Checkpointed { changes: Changes::default() }) {
            g.agent_turn(&format!("{}/pkg", w.path), &mut rng);
        }
        assert!(matches!(cp(&mut g, 2), Ok(GitResult::Checkpointed { changes }) if changes.files > 0));
        // Dirty or committed: archive keeps a dirty tree, removes a clean one.
        let archived = g.run(&GitCmd::ArchiveTree { repo: "/work/repo1".into(), worktree: w.clone(), removal: Removal::UnlessUncommitted });
        let Ok(GitResult::TreeArchived { kept }) = archived else { panic!("{archived:?}") };
        assert_eq!(kept, g.removed.is_empty());
        if !kept {
            assert!(g.run(&GitCmd::Inspect { folder: w.path.clone(), also: Vec::new() }).is_err(), "a removed tree's folder is gone");
            assert_eq!(g.run(&GitCmd::RestoreTree { repo: "/work/repo1".into(), worktree: w.clone() }), Ok(GitResult::TreeRestored));
        }
        assert_eq!(g.run(&GitCmd::RestoreTree { repo: "/work/repo1".into(), worktree: w.clone() }), Ok(GitResult::TreeRestored));
    }

    #[test]
    fn git_refuses_what_the_shell_refuses() {
        let mut g = GitWorld::new(true, false, true);
        let p = plan_from(Some("main"), "x", false);
        let r = g.run(&GitCmd::MakeTree { folder: "/work/repo1".into(), plan: p });
        assert!(matches!(&r, Err(m) if m.contains("already checked out")), "{r:?}");
        let p = plan(&mut g, "/work/empty", "agents/e");
        let r = g.run(&GitCmd::Begin { folder: "/work/empty".into(), checkpoint_ref: "refs/agents/e/checkpoints/turn/0".into(), worktree: Some(p) });
        assert!(matches!(&r, Err(m) if m.contains("no commits yet")), "{r:?}");
        let p = plan(&mut g, "/work/plain", "y");
        let r = g.run(&GitCmd::MakeTree { folder: "/work/plain".into(), plan: p });
        assert!(matches!(&r, Err(m) if m.contains("is not in a git repository")), "{r:?}");
        let facts = g.run(&GitCmd::Inspect { folder: "/work/repo2".into(), also: Vec::new() });
        assert!(matches!(facts, Ok(GitResult::Repo(RepoFacts { current_branch: None, default_branch: None, .. }))), "a detached HEAD");
        let facts = g.run(&GitCmd::Inspect { folder: "/work/repo1".into(), also: Vec::new() });
        let Ok(GitResult::Repo(f)) = facts else { panic!() };
        assert_eq!(f.branches, vec!["dev".to_owned(), "feature".to_owned(), "main".to_owned()]);
    }
}
