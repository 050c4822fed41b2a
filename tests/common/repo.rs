//! Real temporary git repositories for the worktree end-to-end tests.

use std::fs;
use std::path::Path;

use git2::{Repository, RepositoryInitOptions, Signature};

/// A repository on `main` at `dir` with one commit (`.gitignore` holding
/// `ignored`, and `README.md`), plus an ignored `.env` (`SECRET=1`) that
/// is not committed.
pub fn make_repo(dir: &Path, ignored: &str) -> Repository {
    let mut opts = RepositoryInitOptions::new();
    opts.initial_head("main");
    let repo = Repository::init_opts(dir, &opts).expect("init");
    fs::write(dir.join(".gitignore"), ignored).expect("write");
    fs::write(dir.join("README.md"), "hello\n").expect("write");
    {
        let mut index = repo.index().expect("index");
        index.add_path(Path::new(".gitignore")).expect("add");
        index.add_path(Path::new("README.md")).expect("add");
        index.write().expect("write index");
        let tree = repo.find_tree(index.write_tree().expect("tree")).expect("tree");
        let sig = Signature::now("Test", "test@example.com").expect("sig");
        repo.commit(Some("HEAD"), &sig, &sig, "one", &tree, &[]).expect("commit");
    }
    fs::write(dir.join(".env"), "SECRET=1\n").expect("write");
    repo
}
