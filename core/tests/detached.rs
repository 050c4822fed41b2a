//! The window's own trees (Sessions page, "Isolation and worktrees": "The
//! window has five requests of its own"): create, claim, archive and
//! unarchive, delete, reconcile, as a client sees them. Git is answered by
//! hand here; `tests/e2e_detached.rs` runs them on real repositories.

use ahpd_core::git::{GitCmd, GitResult, RepoFacts, WorktreeRecord};
use ahpd_core::grants::{token_hash, Membership, Role, User, UsersDirectory};
use ahpd_core::{Config, Effect, OpId, Outcome};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

const CREATE: &str = "vscode/createAgentHostDetachedWorktree";
const CLAIM: &str = "vscode/claimAgentHostDetachedWorktree";
const ARCHIVE: &str = "vscode/setAgentHostDetachedWorktreeArchived";
const DELETE: &str = "vscode/deleteAgentHostDetachedWorktree";
const RECONCILE: &str = "vscode/reconcileAgentHostDetachedWorktrees";
const HOUR_MS: u64 = 3_600_000;

/// Creates a session in `/src/app` with `config` on `conn`, answering its
/// start; returns (session, default chat).
fn create_in_repo(h: &mut Harness, conn: u64, id: &str, config: Value) -> (String, String) {
    create_in(h, conn, id, "file:///src/app", config)
}

fn create_in(h: &mut Harness, conn: u64, id: &str, folder: &str, config: Value) -> (String, String) {
    let uri = format!("ahp-session:/{id}");
    let rid = h.send_request(conn, "createSession", json!({"channel": uri, "provider": "echo", "workingDirectories": [folder], "config": config}));
    // A local folder is a repository here: its facts are asked first.
    for (op, command) in h.git_cmds() {
        let GitCmd::Inspect { folder, .. } = command else { panic!("only the folder is asked about: {command:?}") };
        let facts = RepoFacts {
            root: Some(folder),
            current_branch: Some("develop".into()),
            default_branch: Some("develop".into()),
            branches: vec!["develop".into(), "main".into()],
            not_directories: Vec::new(),
            git_error: None,
        };
        h.done(op, Outcome::Git(GitResult::Repo(facts)));
    }
    h.settle_backend();
    let reply = h.take_reply(conn, rid).expect("createSession reply");
    assert_eq!(reply["result"], Value::Null, "{reply}");
    (uri, format!("ahp-chat:/ahp-session@{id}"))
}

fn worktree_config() -> Value {
    json!({"isolation": "worktree", "branch": "develop", "worktreeBranchPrefix": "me/",
           "worktreeSymlinkFolders": ["node_modules"], "worktreeIncludeFiles": [".env"]})
}

/// The tree git "made" for `branch`.
fn tree(name: &str) -> WorktreeRecord {
    WorktreeRecord {
        path: format!("/src/app.worktrees/{name}"),
        branch: format!("me/agents/{name}"),
        base_commit: "abc123".into(),
        base_branch: "develop".into(),
        name: name.into(),
        placed: vec!["node_modules".into(), ".env".into()],
        links: vec!["node_modules".into()],
        copies: vec![".env".into()],
        off_disk: false,
        repo_root: "/src/app".into(),
    }
}

/// Asks for a tree for `session` with `prompt`, answers git with `made`,
/// and returns the reply.
fn make(h: &mut Harness, conn: u64, session: &str, prompt: &str, made: WorktreeRecord) -> Value {
    let id = h.send_request(conn, CREATE, json!({"session": session, "prompt": prompt}));
    assert!(h.take_reply(conn, id).is_none(), "answered before the tree was made");
    let cmds = h.git_cmds();
    let op = match &cmds[..] {
        [(op, GitCmd::MakeTree { .. })] => *op,
        other => panic!("{other:?}"),
    };
    h.done(op, Outcome::Git(GitResult::TreeMade { worktree: made }));
    h.take_reply(conn, id).expect("create reply")
}

/// A handle from a successful create reply.
fn handle_of(reply: &Value) -> String {
    reply["result"]["handle"].as_str().unwrap_or_else(|| panic!("no handle: {reply}")).to_owned()
}

fn error_of(reply: &Value) -> (i64, String) {
    (reply["error"]["code"].as_i64().unwrap_or_default(), reply["error"]["message"].as_str().unwrap_or_default().to_owned())
}

fn assert_unknown(reply: &Value) {
    let (code, message) = error_of(reply);
    assert_eq!(code, -32602, "{reply}");
    assert!(message.contains("Unknown detached worktree handle"), "{reply}");
}

/// The one git command pending, which must be an ArchiveTree or a
/// RestoreTree of `path`; returns its op and whether it archives.
fn one_tree_cmd(h: &mut Harness, path: &str) -> (OpId, bool) {
    let cmds = h.git_cmds();
    match &cmds[..] {
        [(op, GitCmd::ArchiveTree { repo, worktree, removal })] => {
            assert_eq!(*removal, ahpd_core::git::Removal::UnlessUncommitted, "a tree with uncommitted work stays");
            assert_eq!(repo, "/src/app");
            assert_eq!(worktree.path, path);
            (*op, true)
        }
        [(op, GitCmd::RestoreTree { repo, worktree })] => {
            assert_eq!(repo, "/src/app");
            assert_eq!(worktree.path, path);
            (*op, false)
        }
        other => panic!("{other:?}"),
    }
}

fn logs(h: &mut Harness, event: &str) -> Vec<String> {
    h.pending
        .iter()
        .filter_map(|e| match e {
            Effect::Log(l) if l.event == event => Some(l.detail.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn initialize_advertises_detached_worktrees() {
    let mut h = Harness::new(Config::default());
    h.input(ahpd_core::Input::Connected { conn: ahpd_core::ConnId(1) });
    let r = h.request(1, "initialize", json!({"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "w"}));
    assert_eq!(r["result"]["_meta"]["vscode.detachedWorktrees"], true, "{r}");
}

#[test]
fn create_cuts_a_tree_from_the_sessions_folder_and_config_and_leaves_the_session_creating() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "w");
    let (uri, chat) = create_in_repo(&mut h, 1, "s", worktree_config());
    let id = h.send_request(1, CREATE, json!({"session": uri, "prompt": "Fix the login page, then the tests"}));
    let cmds = h.git_cmds();
    let (op, plan) = match &cmds[..] {
        [(op, GitCmd::MakeTree { folder, plan })] => {
            assert_eq!(folder, "/src/app");
            (*op, plan.clone())
        }
        other => panic!("{other:?}"),
    };
    let branches: Vec<&str> = plan.names.iter().map(|n| n.branch.as_str()).collect();
    assert_eq!(branches[..2], ["me/agents/fix-the-login-page-then", "me/agents/fix-the-login-page-then-2"]);
    assert_eq!(plan.names[0].folder, ahpd_core::worktree::folder_name("me/agents/fix-the-login-page-then"));
    assert_eq!(plan.base.as_deref(), Some("develop"));
    assert!(plan.create_new_branch);
    assert_eq!(plan.symlink_folders, ["node_modules"]);
    assert_eq!(plan.include_files, [".env"]);
    h.done(op, Outcome::Git(GitResult::TreeMade { worktree: tree("fix-the-login-page-then") }));
    let r = h.take_reply(1, id).expect("reply");
    let handle = handle_of(&r);
    let parts: Vec<usize> = handle.split('-').map(str::len).collect();
    assert_eq!(parts, [8, 4, 4, 4, 12], "UUID-shaped: {handle}");
    assert!(handle.chars().all(|c| c == '-' || c.is_ascii_hexdigit()), "{handle}");
    assert_eq!(r["result"]["resource"], "file:///src/app.worktrees/fix-the-login-page-then");

    // A second tree for the same session gets a handle of its own.
    let r2 = make(&mut h, 1, &uri, "Fix the login page, then the tests", tree("fix-the-login-page-then-2"));
    assert_ne!(handle_of(&r2), handle);
    // For a session in a folder inside the repository, the resource is the
    // tree's matching folder, as a session's own tree is entered.
    let (in_pkg, _) = create_in(&mut h, 1, "pkg", "file:///src/app/pkg", worktree_config());
    let r3 = make(&mut h, 1, &in_pkg, "Fix the package", tree("fix-the-package"));
    assert_eq!(r3["result"]["resource"], "file:///src/app.worktrees/fix-the-package/pkg", "{r3}");

    // The session is untouched: still creating, its tree still pending.
    let snap = h.request(1, "subscribe", json!({"channel": uri}));
    assert_eq!(snap["result"]["snapshot"]["state"]["lifecycle"], "creating", "{snap}");
    assert_eq!(snap["result"]["snapshot"]["state"]["workingDirectories"], json!(["file:///src/app"]));
    assert!(h.host.view().sessions.get(&uri).expect("held").record().git.is_none());
    // Its first send still makes its own tree.
    h.start_turn(1, &chat, 1, "t1", "hi");
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Begin { worktree: Some(_), .. })]), "{cmds:?}");
}

#[test]
fn handles_come_from_the_seed() {
    let run = || {
        let mut h = Harness::new(Config::default());
        h.connect(1, "w");
        let (uri, _) = create_in_repo(&mut h, 1, "s", worktree_config());
        handle_of(&make(&mut h, 1, &uri, "x", tree("x")))
    };
    assert_eq!(run(), run());
}

#[test]
fn create_is_refused_unless_the_session_is_creating_with_a_pending_tree() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "w");
    let refused = |h: &mut Harness, params: Value, says: &str| {
        let r = h.request(1, CREATE, params.clone());
        let (code, message) = error_of(&r);
        assert_eq!(code, -32602, "{params} -> {r}");
        assert!(message.contains(says), "{params} -> {message}");
        assert!(h.git_cmds().is_empty(), "git was asked for {params}");
    };
    let (folder, _) = create_in_repo(&mut h, 1, "f", json!({"isolation": "folder"}));
    refused(&mut h, json!({"session": folder, "prompt": "x"}), "isolation is not worktree");
    refused(&mut h, json!({"session": "ahp-session:/nope", "prompt": "x"}), "no such session");
    // A folder that is not a local `file:` URI is refused at create (issue
    // 25): no session is made there to cut a tree for.
    let r = h.request(1, "createSession", json!({"channel": "ahp-session:/r", "provider": "echo", "workingDirectories": ["vscode-remote://box/src/app"], "config": worktree_config()}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    refused(&mut h, json!({"session": "ahp-session:/r", "prompt": "x"}), "no such session");
    let (bad_prefix, _) = create_in_repo(&mut h, 1, "b", json!({"isolation": "worktree", "worktreeBranchPrefix": "a..b/"}));
    refused(&mut h, json!({"session": bad_prefix, "prompt": "x"}), "not a valid branch name");
    // Hostile params.
    refused(&mut h, json!({}), "invalid params");
    refused(&mut h, Value::Null, "invalid params");
    refused(&mut h, json!({"session": 7, "prompt": "x"}), "invalid params");
    refused(&mut h, json!({"session": folder, "prompt": ["x"]}), "invalid params");
    // A session whose first send was made has its own tree coming.
    let (started, chat) = create_in_repo(&mut h, 1, "t", worktree_config());
    h.start_turn(1, &chat, 1, "t1", "hi");
    let pending = h.git_cmds();
    assert!(matches!(&pending[..], [(_, GitCmd::Begin { .. })]), "{pending:?}");
    refused(&mut h, json!({"session": started, "prompt": "x"}), "has started");
}

#[test]
fn claim_archive_unarchive_and_delete() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "w");
    let (uri, _) = create_in_repo(&mut h, 1, "s", worktree_config());
    let handle = handle_of(&make(&mut h, 1, &uri, "work", tree("work")));
    let path = "/src/app.worktrees/work";

    let r = h.request(1, CLAIM, json!({"handle": handle}));
    assert_eq!(r["result"], json!({}), "{r}");

    // Archive: off the disk, answered when git is done.
    let id = h.send_request(1, ARCHIVE, json!({"handle": handle, "archived": true}));
    let (op, archives) = one_tree_cmd(&mut h, path);
    assert!(archives);
    assert!(h.take_reply(1, id).is_none());
    h.done(op, Outcome::Git(GitResult::TreeArchived { kept: false }));
    assert_eq!(h.take_reply(1, id).expect("reply")["result"], json!({}));

    // Unarchive: put back.
    let id = h.send_request(1, ARCHIVE, json!({"handle": handle, "archived": false}));
    let (op, archives) = one_tree_cmd(&mut h, path);
    assert!(!archives);
    h.done(op, Outcome::Git(GitResult::TreeRestored));
    assert_eq!(h.take_reply(1, id).expect("reply")["result"], json!({}));

    // Archive a tree with uncommitted work: it stays, and the reply and
    // the log say so.
    h.drop_logs();
    let id = h.send_request(1, ARCHIVE, json!({"handle": handle, "archived": true}));
    let (op, _) = one_tree_cmd(&mut h, path);
    h.done(op, Outcome::Git(GitResult::TreeArchived { kept: true }));
    let r = h.take_reply(1, id).expect("reply");
    assert_eq!(r["result"]["_meta"]["ahpd.treeKept"], true, "{r}");
    assert!(r["result"]["_meta"]["ahpd.treeKeptReason"].as_str().unwrap_or_default().contains("uncommitted"), "{r}");
    assert_eq!(logs(&mut h, "detached.tree_kept").len(), 1);

    // A git failure is an error, and the handle stays.
    let id = h.send_request(1, ARCHIVE, json!({"handle": handle, "archived": false}));
    let (op, _) = one_tree_cmd(&mut h, path);
    h.done(op, Outcome::Failed { message: "the branch is gone".into() });
    let (code, message) = error_of(&h.take_reply(1, id).expect("reply"));
    assert_eq!(code, -32603);
    assert!(message.contains("the branch is gone"), "{message}");

    // Delete: off the disk, forgotten; a second delete is still `{}`.
    let id = h.send_request(1, DELETE, json!({"handle": handle}));
    let (op, archives) = one_tree_cmd(&mut h, path);
    assert!(archives, "a delete takes the tree off the disk and keeps its branch");
    // Forgotten from the moment it was asked.
    assert_unknown(&h.request(1, CLAIM, json!({"handle": handle})));
    h.done(op, Outcome::Git(GitResult::TreeArchived { kept: false }));
    assert_eq!(h.take_reply(1, id).expect("reply")["result"], json!({}));
    assert_unknown(&h.request(1, CLAIM, json!({"handle": handle})));
    assert_unknown(&h.request(1, ARCHIVE, json!({"handle": handle, "archived": true})));
    assert_eq!(h.request(1, DELETE, json!({"handle": handle}))["result"], json!({}));
    assert!(h.git_cmds().is_empty());
}

#[test]
fn unknown_handles_and_hostile_params() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "w");
    assert_unknown(&h.request(1, CLAIM, json!({"handle": "00000000-0000-4000-8000-000000000000"})));
    assert_unknown(&h.request(1, ARCHIVE, json!({"handle": "nope", "archived": true})));
    assert_eq!(h.request(1, DELETE, json!({"handle": "nope"}))["result"], json!({}));
    for (method, params) in [
        (CLAIM, json!({})),
        (CLAIM, json!({"handle": 1})),
        (ARCHIVE, json!({"handle": "x"})),
        (ARCHIVE, json!({"handle": "x", "archived": "yes"})),
        (DELETE, json!([])),
        (DELETE, json!({"handle": null})),
        (RECONCILE, json!({"scope": "file:///src/app"})),
        (RECONCILE, json!({"scope": "file:///src/app", "activeHandles": "x"})),
        (RECONCILE, json!({"scope": 3, "activeHandles": []})),
        (RECONCILE, json!({"scope": "file:///src/app", "activeHandles": [1]})),
    ] {
        let r = h.request(1, method, params.clone());
        assert_eq!(error_of(&r).0, -32602, "{method} {params} -> {r}");
    }
    assert!(h.git_cmds().is_empty());
    // Before initialize: refused like every other command.
    h.input(ahpd_core::Input::Connected { conn: ahpd_core::ConnId(2) });
    let r = h.request(2, CLAIM, json!({"handle": "x"}));
    assert_eq!(error_of(&r).0, -32600, "{r}");
}

fn people() -> Config {
    let user = |id: &str, role: Role| User {
        id: id.into(),
        token_sha256: token_hash(&format!("token-{id}")),
        role,
        administrator: false,
        memberships: vec![Membership { team: "t".into(), project: id.into(), primary: true }],
    };
    let users = vec![user("ana", Role::Member), user("bob", Role::Member), user("gus", Role::Guest)];
    Config { users: Some(UsersDirectory { users, plugins: Vec::new() }), ..Config::default() }
}

fn login(h: &mut Harness, conn: u64, id: &str) {
    h.connect(conn, &format!("client-{conn}"));
    let r = h.request(conn, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": format!("token-{id}")}));
    assert_eq!(r["result"], json!({}), "{r}");
}

#[test]
fn a_handle_is_the_window_principals_alone() {
    let mut h = Harness::new(people());
    login(&mut h, 1, "ana");
    login(&mut h, 2, "bob");
    login(&mut h, 3, "gus");
    let (uri, _) = create_in_repo(&mut h, 1, "s", worktree_config());
    let handle = handle_of(&make(&mut h, 1, &uri, "mine", tree("mine")));
    assert_unknown(&h.request(2, CLAIM, json!({"handle": handle})));
    assert_unknown(&h.request(2, ARCHIVE, json!({"handle": handle, "archived": true})));
    assert_eq!(h.request(2, DELETE, json!({"handle": handle}))["result"], json!({}));
    h.request(2, RECONCILE, json!({"scope": "file:///src/app", "activeHandles": []}));
    h.advance(25 * HOUR_MS);
    h.request(2, RECONCILE, json!({"scope": "file:///src/app", "activeHandles": []}));
    assert!(h.git_cmds().is_empty(), "another principal reached the tree");
    // A guest holds no session:worktree.
    let r = h.request(3, CREATE, json!({"session": uri, "prompt": "x"}));
    assert_eq!(error_of(&r).0, -32009, "{r}");
    let r = h.request(3, DELETE, json!({"handle": handle}));
    assert_eq!(error_of(&r).0, -32009, "{r}");
    // A connection that did not sign in, neither.
    h.connect(4, "anon");
    assert_eq!(error_of(&h.request(4, CLAIM, json!({"handle": handle}))).0, -32009);
    // The owner still holds it, from another window of theirs too.
    login(&mut h, 5, "ana");
    assert_eq!(h.request(5, CLAIM, json!({"handle": handle}))["result"], json!({}));
}

#[test]
fn a_tree_a_session_works_in_stays_on_disk() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "w");
    let (uri, _) = create_in_repo(&mut h, 1, "s", worktree_config());
    let r = make(&mut h, 1, &uri, "used", tree("used"));
    let handle = handle_of(&r);
    let resource = r["result"]["resource"].as_str().expect("resource").to_owned();
    // The window starts a session in the tree it claimed.
    h.request(1, CLAIM, json!({"handle": handle}));
    let (user, _) = create_in(&mut h, 1, "u", &resource, json!({}));
    h.drop_logs();
    let r = h.request(1, ARCHIVE, json!({"handle": handle, "archived": true}));
    assert_eq!(r["result"]["_meta"]["ahpd.treeKept"], true, "{r}");
    assert!(r["result"]["_meta"]["ahpd.treeKeptReason"].as_str().unwrap_or_default().contains(&user), "{r}");
    assert!(h.git_cmds().is_empty(), "a tree in use is not handed to git");
    assert_eq!(logs(&mut h, "detached.tree_kept").len(), 1);
    let r = h.request(1, DELETE, json!({"handle": handle}));
    assert_eq!(r["result"]["_meta"]["ahpd.treeKept"], true, "{r}");
    assert!(h.git_cmds().is_empty());
    assert_unknown(&h.request(1, CLAIM, json!({"handle": handle})));

    // Once that session is disposed, nothing uses a tree any more.
    let handle = handle_of(&make(&mut h, 1, &uri, "used", tree("used")));
    let id = h.send_request(1, "disposeSession", json!({"channel": user}));
    h.settle_no_repo();
    assert_eq!(h.take_reply(1, id).expect("dispose reply")["result"], Value::Null);
    let id = h.send_request(1, DELETE, json!({"handle": handle}));
    let (op, archives) = one_tree_cmd(&mut h, "/src/app.worktrees/used");
    assert!(archives);
    h.done(op, Outcome::Git(GitResult::TreeArchived { kept: false }));
    assert_eq!(h.take_reply(1, id).expect("reply")["result"], json!({}));
}

#[test]
fn requests_on_one_handle_run_in_order_one_at_a_time() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "w");
    let (uri, _) = create_in_repo(&mut h, 1, "s", worktree_config());
    let handle = handle_of(&make(&mut h, 1, &uri, "q", tree("q")));
    let a = h.send_request(1, ARCHIVE, json!({"handle": handle, "archived": true}));
    let b = h.send_request(1, ARCHIVE, json!({"handle": handle, "archived": false}));
    let c = h.send_request(1, DELETE, json!({"handle": handle}));
    let path = "/src/app.worktrees/q";
    let (op, archives) = one_tree_cmd(&mut h, path);
    assert!(archives);
    h.done(op, Outcome::Git(GitResult::TreeArchived { kept: false }));
    assert!(h.take_reply(1, a).is_some());
    let (op, archives) = one_tree_cmd(&mut h, path);
    assert!(!archives, "the put back runs after the archive");
    h.done(op, Outcome::Git(GitResult::TreeRestored));
    assert!(h.take_reply(1, b).is_some());
    let (op, archives) = one_tree_cmd(&mut h, path);
    assert!(archives);
    h.done(op, Outcome::Git(GitResult::TreeArchived { kept: false }));
    assert_eq!(h.take_reply(1, c).expect("delete reply")["result"], json!({}));
}

#[test]
fn reconcile_keeps_named_and_fresh_handles_and_lets_go_of_the_stale() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "w");
    let (uri, _) = create_in_repo(&mut h, 1, "s", worktree_config());
    let named = handle_of(&make(&mut h, 1, &uri, "named", tree("named")));
    let stale = handle_of(&make(&mut h, 1, &uri, "stale", tree("stale")));
    let (elsewhere_session, _) = create_in(&mut h, 1, "o", "file:///src/other", worktree_config());
    let id = h.send_request(1, CREATE, json!({"session": elsewhere_session, "prompt": "elsewhere"}));
    let cmds = h.git_cmds();
    let mut other_tree = tree("elsewhere");
    other_tree.path = "/src/other.worktrees/elsewhere".into();
    h.done(cmds[0].0, Outcome::Git(GitResult::TreeMade { worktree: other_tree }));
    let elsewhere = handle_of(&h.take_reply(1, id).expect("reply"));

    // 23 h on, the window names one (its scope written in another case).
    h.advance(23 * HOUR_MS);
    let r = h.request(1, RECONCILE, json!({"scope": "FILE:///SRC/APP", "activeHandles": [named]}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(h.git_cmds().is_empty(), "nothing is 24 h stale yet");
    // 25 h on: the unnamed one is let go, the named one was seen 2 h ago.
    h.advance(2 * HOUR_MS);
    let fresh = handle_of(&make(&mut h, 1, &uri, "fresh", tree("fresh")));
    h.request(1, RECONCILE, json!({"scope": "file:///src/app", "activeHandles": []}));
    let (op, archives) = one_tree_cmd(&mut h, "/src/app.worktrees/stale");
    assert!(archives);
    assert_unknown(&h.request(1, CLAIM, json!({"handle": stale})));
    h.done(op, Outcome::Git(GitResult::TreeArchived { kept: false }));
    assert!(h.git_cmds().is_empty());
    for kept in [&named, &fresh] {
        assert_eq!(h.request(1, CLAIM, json!({"handle": kept}))["result"], json!({}), "{kept} is still claimable");
    }
    // A handle out of the scope is not touched, however old.
    assert_eq!(h.request(1, CLAIM, json!({"handle": elsewhere}))["result"], json!({}));
    h.advance(25 * HOUR_MS);
    h.request(1, RECONCILE, json!({"scope": "file:///src/app.worktrees/named", "activeHandles": []}));
    let (op, _) = one_tree_cmd(&mut h, "/src/app.worktrees/named");
    h.done(op, Outcome::Git(GitResult::TreeArchived { kept: false }));
    assert!(h.git_cmds().is_empty(), "only the tree in that scope went");
    assert_unknown(&h.request(1, CLAIM, json!({"handle": named})));
    assert_eq!(h.request(1, CLAIM, json!({"handle": fresh}))["result"], json!({}));
}

/// Sim seeds 33923 and 56606 (100k-seed run): a session moved its root
/// into a window's tree, then the window deleted its handle. The tree
/// stayed on disk for the session, but nothing the host keeps named it any
/// more, so it was no longer "a worktree the host made" (untrusted: the
/// session's next agent started in a folder nothing trusted, and a create
/// there was refused) and nothing would ever take it off the disk. The
/// window's tree is handed to the sessions that work in it, as a disposed
/// session's tree is: kept in their records, trusted, and removed with its
/// last user.
#[test]
fn a_tree_the_window_lets_go_of_is_handed_to_the_sessions_in_it() {
    let trust = ahpd_core::trust::Trust::of(&["/src/app".to_owned()]);
    let mut h = Harness::new(Config { trust, ..Config::default() });
    h.connect(1, "w");
    let (uri, _) = create_in_repo(&mut h, 1, "s", worktree_config());
    let r = make(&mut h, 1, &uri, "used", tree("used"));
    let handle = handle_of(&r);
    let resource = r["result"]["resource"].as_str().expect("resource").to_owned();
    // A session made in the repository moves its root into the tree,
    // trusted while the window holds it.
    let (user, _) = create_in(&mut h, 1, "u", "file:///src/app", json!({}));
    h.dispatch(1, &user, 1, json!({"type": "session/workingDirectoryReplaced", "directory": "file:///src/app", "replacement": resource}));
    h.settle_no_repo();
    let record = h.host.view().sessions.get(&user).expect("u").record().clone();
    assert_eq!(record.working_directories.to_vec(), vec![resource.clone()]);
    h.drop_logs();
    let r = h.request(1, DELETE, json!({"handle": handle}));
    assert_eq!(r["result"]["_meta"]["ahpd.treeKept"], true, "{r}");
    assert!(h.git_cmds().is_empty(), "a tree in use is not handed to git");
    assert_eq!(logs(&mut h, "git.tree_handed").len(), 1);
    let record = h.host.view().sessions.get(&user).expect("u").record().clone();
    let kept: Vec<&str> = record.shared_trees.iter().map(|t| t.tree.path.as_str()).collect();
    assert_eq!(kept, vec!["/src/app.worktrees/used"], "the session keeps the tree");
    // Still a tree the host made, from a trusted repository.
    create_in(&mut h, 1, "v", &resource, json!({}));
    // It goes with its last user.
    for who in [user, "ahp-session:/v".to_owned()] {
        let id = h.send_request(1, "disposeSession", json!({"channel": who}));
        let mut removed = false;
        loop {
            h.settle();
            let cmds = h.git_cmds();
            if cmds.is_empty() {
                break;
            }
            for (op, command) in cmds {
                if let GitCmd::Dispose { worktree: Some(w), .. } = &command {
                    removed |= w.path == "/src/app.worktrees/used";
                }
                h.done(op, Outcome::Git(command.no_repo_answer()));
            }
        }
        assert_eq!(h.take_reply(1, id).expect("dispose reply")["result"], Value::Null);
        assert_eq!(removed, who == "ahp-session:/v", "{who}: the tree goes with its last user only");
    }
}
