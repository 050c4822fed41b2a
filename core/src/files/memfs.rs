//! An in-memory filesystem that executes [`FsCmd`] as the shell's executor
//! would (issue 48), deterministically: folders, files, symbolic links
//! (absolute or relative, pointing anywhere), `..` resolved against real
//! paths. For the testkit's end-to-end tests and the simulator; never in
//! the daemon (built with the `testkit` or `sim` feature only).
//!
//! Every change it makes is noted ([`MemFs::take_batches`]) for the watches
//! placed on it, so a test or the simulator can hand the core
//! `Input::FsChanged` batches as the shell's watcher would.

use std::collections::BTreeMap;

use ahp_types::state::ResourceChangeType;

use super::fs::{FsCmd, FsError, FsKind, FsResult, Resolved, WriteMode};

/// One thing at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A folder.
    Dir,
    /// A file and the version its etag names.
    File {
        /// Its bytes.
        data: Vec<u8>,
        /// Bumped on every change.
        version: u64,
    },
    /// A symbolic link to this target (absolute, or relative to its
    /// folder).
    Link(String),
}

/// The filesystem: every path (absolute, clean) to what is there; `/` is
/// always a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemFs {
    /// Every node by path.
    pub nodes: BTreeMap<String, Node>,
    /// The next version a change stamps.
    clock: u64,
    /// The watches placed: id → (real path, recursive).
    pub watches: BTreeMap<u64, (String, bool)>,
    /// Changes not yet handed out, in order.
    changes: Vec<(String, ResourceChangeType)>,
}

impl Default for MemFs {
    fn default() -> MemFs {
        MemFs::new()
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn parent(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".to_owned(),
        Some(i) => path[..i].to_owned(),
    }
}

impl MemFs {
    /// An empty filesystem: `/` alone.
    pub fn new() -> MemFs {
        let mut nodes = BTreeMap::new();
        nodes.insert("/".to_owned(), Node::Dir);
        MemFs { nodes, clock: 0, watches: BTreeMap::new(), changes: Vec::new() }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn note(&mut self, path: &str, change: ResourceChangeType) {
        self.changes.push((path.to_owned(), change));
    }

    /// Makes folder `path` and its parents (set-up; real paths).
    pub fn mkdir_p(&mut self, path: &str) {
        let mut cur = String::from("/");
        for part in path.split('/').filter(|p| !p.is_empty()) {
            cur = join(&cur, part);
            if !self.nodes.contains_key(&cur) {
                self.nodes.insert(cur.clone(), Node::Dir);
                self.note(&cur.clone(), ResourceChangeType::Added);
            }
        }
    }

    /// Puts a file at real path `path` (its folder made), as another
    /// program on the machine would.
    pub fn put(&mut self, path: &str, data: &[u8]) {
        self.mkdir_p(&parent(path));
        let version = self.tick();
        let change = if self.nodes.contains_key(path) { ResourceChangeType::Updated } else { ResourceChangeType::Added };
        self.nodes.insert(path.to_owned(), Node::File { data: data.to_vec(), version });
        self.note(path, change);
    }

    /// Puts a link at `path` pointing at `target`.
    pub fn link(&mut self, path: &str, target: &str) {
        self.mkdir_p(&parent(path));
        self.nodes.insert(path.to_owned(), Node::Link(target.to_owned()));
        self.note(path, ResourceChangeType::Added);
    }

    /// The bytes of the file at real path `path`, if one is there.
    pub fn file(&self, path: &str) -> Option<&[u8]> {
        match self.nodes.get(path) {
            Some(Node::File { data, .. }) => Some(data),
            _ => None,
        }
    }

    /// The real path of `path` and what is there: links followed (the last
    /// one only with `follow`), `..` against the real path; a missing name
    /// ends the walk (the rest appended, a `..` after it is
    /// [`FsError::Invalid`]).
    pub fn resolve(&self, path: &str, follow: bool) -> Result<(String, Option<FsKind>), FsError> {
        if !path.starts_with('/') || path.contains('\0') {
            return Err(FsError::Invalid);
        }
        let mut stack: Vec<String> = path.split('/').filter(|p| !p.is_empty()).rev().map(str::to_owned).collect();
        let mut cur = String::from("/");
        let mut missing = false;
        let mut hops = 0;
        while let Some(part) = stack.pop() {
            if part == "." {
                continue;
            }
            if part == ".." {
                if missing {
                    return Err(FsError::Invalid);
                }
                cur = parent(&cur);
                continue;
            }
            let next = join(&cur, &part);
            if missing {
                cur = next;
                continue;
            }
            match self.nodes.get(&next) {
                None => {
                    missing = true;
                    cur = next;
                }
                Some(Node::Link(target)) => {
                    if stack.is_empty() && !follow {
                        return Ok((next, Some(FsKind::Symlink)));
                    }
                    hops += 1;
                    if hops > 40 {
                        return Err(FsError::Other("too many levels of symbolic links".to_owned()));
                    }
                    if target.starts_with('/') {
                        cur = "/".to_owned();
                    }
                    stack.extend(target.split('/').filter(|p| !p.is_empty()).rev().map(str::to_owned));
                }
                Some(Node::File { .. }) if !stack.is_empty() => return Err(FsError::NotADirectory),
                Some(_) => cur = next,
            }
        }
        let kind = if missing {
            None
        } else {
            match self.nodes.get(&cur) {
                Some(Node::Dir) => Some(FsKind::Directory),
                Some(Node::File { .. }) => Some(FsKind::File),
                Some(Node::Link(_)) => Some(FsKind::Symlink),
                None => None,
            }
        };
        Ok((cur, kind))
    }

    fn resolved(&self, path: &str, follow: bool) -> Result<Resolved, FsError> {
        let (real, kind) = self.resolve(path, follow)?;
        let (size, etag, mtime) = match self.nodes.get(&real) {
            Some(Node::File { data, version }) if kind == Some(FsKind::File) => (Some(data.len() as u64), Some(format!("v{version}")), Some(*version as i64)),
            _ => (None, None, None),
        };
        Ok(Resolved { path: path.to_owned(), real, kind, size, mtime_ms: mtime, ctime_ms: mtime, etag })
    }

    /// Whether `path` still resolves to itself (the act's check: a link
    /// swapped in since the core's check is [`FsError::Moved`]).
    fn still(&self, path: &str, follow: bool) -> Result<(), FsError> {
        match self.resolve(path, follow) {
            Ok((real, _)) if real == path => Ok(()),
            _ => Err(FsError::Moved),
        }
    }

    /// Paths at or under `path`, in order.
    fn subtree(&self, path: &str) -> Vec<String> {
        let prefix = if path == "/" { "/".to_owned() } else { format!("{path}/") };
        let mut out: Vec<String> = Vec::new();
        if self.nodes.contains_key(path) {
            out.push(path.to_owned());
        }
        out.extend(self.nodes.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).map(|(k, _)| k.clone()).filter(|k| k != path));
        out
    }

    fn remove_tree(&mut self, path: &str) {
        for k in self.subtree(path).into_iter().rev() {
            self.nodes.remove(&k);
            self.note(&k, ResourceChangeType::Deleted);
        }
    }

    fn copy_tree(&mut self, from: &str, to: &str) {
        for k in self.subtree(from) {
            let Some(node) = self.nodes.get(&k).cloned() else { continue };
            let dest = format!("{to}{}", &k[from.len()..]);
            let node = match node {
                Node::File { data, .. } => Node::File { data, version: self.tick() },
                other => other,
            };
            self.nodes.insert(dest.clone(), node);
            self.note(&dest, ResourceChangeType::Added);
        }
    }

    /// Runs `command` as the shell would; [`FsCmd::Unwatch`] answers
    /// [`FsResult::Done`] (nothing waits on it).
    pub fn run(&mut self, command: &FsCmd) -> FsResult {
        match self.act(command) {
            Ok(r) => r,
            Err(e) => FsResult::Failed(e),
        }
    }

    fn act(&mut self, command: &FsCmd) -> Result<FsResult, FsError> {
        match command {
            FsCmd::Resolve { paths, follow } => {
                let mut out = Vec::new();
                for (i, p) in paths.iter().enumerate() {
                    out.push(self.resolved(p, i > 0 || *follow)?);
                }
                Ok(FsResult::Resolved(out))
            }
            FsCmd::Read { path, max_bytes } => {
                self.still(path, true)?;
                match self.nodes.get(path) {
                    Some(Node::File { data, version }) if data.len() as u64 > *max_bytes => {
                        let _ = version;
                        Err(FsError::TooLarge)
                    }
                    Some(Node::File { data, version }) => Ok(FsResult::Read { data: data.clone(), etag: format!("v{version}") }),
                    Some(Node::Dir) => Err(FsError::IsADirectory),
                    _ => Err(FsError::NotFound),
                }
            }
            FsCmd::Write { path, data, mode, position, create_only, if_match } => {
                self.still(path, true)?;
                if self.nodes.get(&parent(path)) != Some(&Node::Dir) {
                    return Err(FsError::NotFound);
                }
                let old = match self.nodes.get(path) {
                    Some(Node::Dir) => return Err(FsError::IsADirectory),
                    Some(Node::File { data, version }) => Some((data.clone(), *version)),
                    _ => None,
                };
                if *create_only && old.is_some() {
                    return Err(FsError::AlreadyExists);
                }
                if let Some(want) = if_match {
                    if old.as_ref().map(|(_, v)| format!("v{v}")).as_deref() != Some(want.as_str()) {
                        return Err(FsError::Conflict);
                    }
                }
                let existed = old.is_some();
                let mut bytes = old.map(|(d, _)| d).unwrap_or_default();
                let pos = usize::try_from(*position).unwrap_or(usize::MAX);
                match mode {
                    WriteMode::Truncate => {
                        bytes.truncate(pos.min(bytes.len()));
                        bytes.extend_from_slice(data);
                    }
                    WriteMode::Append => {
                        let at = bytes.len().saturating_sub(pos);
                        bytes.splice(at..at, data.iter().copied());
                    }
                    WriteMode::Insert => {
                        let at = pos.min(bytes.len());
                        bytes.splice(at..at, data.iter().copied());
                    }
                }
                let version = self.tick();
                self.nodes.insert(path.clone(), Node::File { data: bytes, version });
                self.note(path, if existed { ResourceChangeType::Updated } else { ResourceChangeType::Added });
                Ok(FsResult::Done)
            }
            FsCmd::List { path, max_entries } => {
                self.still(path, true)?;
                match self.nodes.get(path) {
                    Some(Node::Dir) => {}
                    None => return Err(FsError::NotFound),
                    Some(_) => return Err(FsError::NotADirectory),
                }
                let mut out = Vec::new();
                for k in self.subtree(path) {
                    if k == *path || parent(&k) != *path {
                        continue;
                    }
                    let kind = match self.nodes.get(&k) {
                        Some(Node::Dir) => FsKind::Directory,
                        Some(Node::Link(_)) => FsKind::Symlink,
                        _ => FsKind::File,
                    };
                    out.push((super::path::base_name(&k).to_owned(), kind));
                }
                if out.len() > *max_entries {
                    return Err(FsError::TooLarge);
                }
                Ok(FsResult::Listed(out))
            }
            FsCmd::Mkdir { path } => {
                self.still(path, true)?;
                match self.nodes.get(path) {
                    Some(Node::Dir) => Ok(FsResult::Done),
                    Some(_) => Err(FsError::AlreadyExists),
                    None => {
                        self.mkdir_p(path);
                        Ok(FsResult::Done)
                    }
                }
            }
            FsCmd::Copy { from, to, fail_if_exists } | FsCmd::Move { from, to, fail_if_exists } => {
                self.still(from, false)?;
                self.still(to, true)?;
                if !self.nodes.contains_key(from) {
                    return Err(FsError::NotFound);
                }
                if self.nodes.get(&parent(to)) != Some(&Node::Dir) {
                    return Err(FsError::NotFound);
                }
                if self.nodes.contains_key(to) {
                    if *fail_if_exists {
                        return Err(FsError::AlreadyExists);
                    }
                    self.remove_tree(to);
                }
                self.copy_tree(from, to);
                if matches!(command, FsCmd::Move { .. }) {
                    self.remove_tree(from);
                }
                Ok(FsResult::Done)
            }
            FsCmd::Delete { path, recursive } => {
                self.still(path, false)?;
                match self.nodes.get(path) {
                    None => Err(FsError::NotFound),
                    Some(Node::Dir) if !*recursive && self.subtree(path).len() > 1 => Err(FsError::NotEmpty),
                    Some(_) => {
                        self.remove_tree(path);
                        Ok(FsResult::Done)
                    }
                }
            }
            FsCmd::Watch { watch, path, recursive } => {
                self.still(path, true)?;
                if !self.nodes.contains_key(path) {
                    return Err(FsError::NotFound);
                }
                self.watches.insert(*watch, (path.clone(), *recursive));
                Ok(FsResult::Done)
            }
            FsCmd::Unwatch { watch } => {
                self.watches.remove(watch);
                Ok(FsResult::Done)
            }
            FsCmd::Complete { roots, query, limit } => {
                let query: Vec<char> = query.to_lowercase().chars().collect();
                let mut found: Vec<(usize, String)> = Vec::new();
                for root in roots {
                    for k in self.subtree(root) {
                        if !matches!(self.nodes.get(&k), Some(Node::File { .. })) {
                            continue;
                        }
                        let rel = k[root.len()..].trim_start_matches('/').to_lowercase();
                        let mut q = query.iter().peekable();
                        for c in rel.chars() {
                            if q.peek() == Some(&&c) {
                                q.next();
                            }
                        }
                        if q.peek().is_none() && !found.iter().any(|(_, p)| *p == k) {
                            found.push((rel.len(), k));
                        }
                    }
                }
                found.sort();
                Ok(FsResult::Completed(found.into_iter().take(*limit).map(|(_, p)| p).collect()))
            }
        }
    }

    /// The changes since the last call, as the shell's watcher would batch
    /// them: for each watch (in id order), those at its path or under it
    /// (recursive) or its direct children, in order, repeats kept (the
    /// core keeps each path once). Watches with none are left out.
    pub fn take_batches(&mut self) -> Vec<(u64, Vec<(String, ResourceChangeType)>)> {
        let changes = std::mem::take(&mut self.changes);
        let mut out = Vec::new();
        for (id, (root, recursive)) in &self.watches {
            let batch: Vec<(String, ResourceChangeType)> = changes
                .iter()
                .filter(|(p, _)| super::path::within(p, root) && (*recursive || p == root || parent(p) == *root))
                .cloned()
                .collect();
            if !batch.is_empty() {
                out.push((*id, batch));
            }
        }
        out
    }
}
