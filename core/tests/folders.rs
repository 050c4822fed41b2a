//! Working directories (issue 9; docs/REFERENCE-NOTES.md, AHP 6): the first is
//! the process root and can only be replaced, never removed; the rest are
//! peers; a backend that cannot take peers is told none; rows carry the
//! folders as recorded, a folder gone from disk included.

use ahpd_core::{AgentSpec, BackendCmd, Config};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

const ROOT: &str = "file:///work/root";
const PEER: &str = "file:///work/peer";
/// A folder that exists nowhere (the core never looks at the disk).
const GONE: &str = "file:///nowhere/gone-from-disk";

fn config() -> Config {
    let mut cfg = Config { residency_limit: 0, ..Config::default() };
    cfg.agents.push(AgentSpec { provider: "solo".into(), peer_directories: false, ..AgentSpec::echo() });
    cfg
}

/// Creates `id` on `provider` with `dirs`; returns the Start command the
/// agent got.
fn create(h: &mut Harness, id: &str, provider: &str, dirs: &[&str]) -> BackendCmd {
    let uri = format!("ahp-session:/{id}");
    let rid = h.send_request(1, "createSession", json!({"channel": uri, "provider": provider, "workingDirectories": dirs}));
    let cmds = h.settle_backend();
    assert_eq!(h.take_reply(1, rid).expect("reply")["result"], Value::Null);
    let chat = format!("ahp-chat:/ahp-session@{id}");
    h.start_turn(1, &chat, 1, "t1", "hello");
    h.settle_no_repo();
    h.agent_reply(&chat, "t1", "Echo: hello");
    h.settle_no_repo();
    cmds.into_iter().find_map(|(_, c)| matches!(c, BackendCmd::Start { .. }).then_some(c)).expect("a start")
}

fn row(h: &mut Harness, uri: &str) -> Value {
    h.list(1).into_iter().find(|r| r["resource"] == uri).expect("listed")
}

fn folders(h: &mut Harness, uri: &str) -> Value {
    row(h, uri)["workingDirectories"].clone()
}

/// Dispatches a session action; returns the echo this connection got.
fn act(h: &mut Harness, uri: &str, seq: i64, action: Value) -> Value {
    h.frames(1);
    h.dispatch(1, uri, seq, action);
    h.settle_no_repo();
    h.frames(1).into_iter().find(|f| f["method"] == "action" && f["params"]["channel"] == uri && f["params"]["origin"]["clientSeq"] == seq)
        .unwrap_or_else(|| panic!("no echo of action {seq}"))
}

#[test]
fn peers_are_kept_and_told_where_the_backend_takes_them_and_dropped_where_not() {
    let mut h = Harness::new(config());
    h.connect(1, "c");
    let agents = h.request(1, "subscribe", json!({"channel": "ahp-root://"}));
    let caps: Vec<Value> = agents["result"]["snapshot"]["state"]["agents"].as_array().cloned().unwrap_or_default();
    let echo = caps.iter().find(|a| a["provider"] == "echo").expect("echo");
    assert_eq!(echo["capabilities"]["multipleWorkingDirectories"]["primaryReplacement"], true);
    let solo = caps.iter().find(|a| a["provider"] == "solo").expect("solo");
    assert!(solo["capabilities"]["multipleWorkingDirectories"].is_null(), "{solo}");

    let start = create(&mut h, "many", "echo", &[ROOT, PEER, ROOT, GONE]);
    match start {
        BackendCmd::Start { working_directory, peer_directories, .. } => {
            assert_eq!(working_directory.as_deref(), Some(ROOT));
            assert_eq!(peer_directories, vec![PEER.to_owned(), GONE.to_owned()]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(folders(&mut h, "ahp-session:/many"), json!([ROOT, PEER, GONE]), "as recorded, the one gone from disk included");

    let start = create(&mut h, "one", "solo", &[ROOT, PEER]);
    match start {
        BackendCmd::Start { working_directory, peer_directories, .. } => {
            assert_eq!(working_directory.as_deref(), Some(ROOT));
            assert!(peer_directories.is_empty(), "a backend that cannot take peers is told none");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(folders(&mut h, "ahp-session:/one"), json!([ROOT]));
    let e = act(&mut h, "ahp-session:/one", 1, json!({"type": "session/workingDirectorySet", "directory": PEER}));
    assert!(e["params"]["rejectionReason"].as_str().unwrap_or("").contains("cannot take"), "{e}");
    assert_eq!(folders(&mut h, "ahp-session:/one"), json!([ROOT]));
}

#[test]
fn the_root_is_never_removed_peers_come_and_go_and_it_survives_a_restart() {
    let mut h = Harness::new(config());
    h.connect(1, "c");
    let uri = "ahp-session:/s";
    create(&mut h, "s", "echo", &[ROOT]);
    h.request(1, "subscribe", json!({"channel": uri}));

    let e = act(&mut h, uri, 1, json!({"type": "session/workingDirectoryRemoved", "directory": ROOT}));
    assert!(e["params"]["rejectionReason"].as_str().unwrap_or("").contains("never removed"), "{e}");
    assert_eq!(folders(&mut h, uri), json!([ROOT]));

    let e = act(&mut h, uri, 2, json!({"type": "session/workingDirectorySet", "directory": PEER}));
    assert!(e["params"]["rejectionReason"].is_null(), "{e}");
    assert_eq!(folders(&mut h, uri), json!([ROOT, PEER]));
    let e = act(&mut h, uri, 3, json!({"type": "session/workingDirectoryRemoved", "directory": PEER}));
    assert!(e["params"]["rejectionReason"].is_null(), "{e}");
    assert_eq!(folders(&mut h, uri), json!([ROOT]));
    let e = act(&mut h, uri, 4, json!({"type": "session/workingDirectoryRemoved", "directory": GONE}));
    assert!(e["params"]["rejectionReason"].as_str().unwrap_or("").contains("not one of"), "{e}");

    // Every change was written ahead: the stored record holds the list.
    let e = act(&mut h, uri, 5, json!({"type": "session/workingDirectorySet", "directory": GONE}));
    assert!(e["params"]["rejectionReason"].is_null(), "{e}");
    let record = h.host.view().sessions.get(uri).expect("the session is held").record().clone();
    assert_eq!(*record.working_directories, vec![ROOT.to_owned(), GONE.to_owned()]);
    let mut again = Harness::with_records(config(), vec![record]);
    again.connect(1, "c");
    assert_eq!(folders(&mut again, uri), json!([ROOT, GONE]), "a restart lists the folders as recorded");
}

#[test]
fn replacing_the_root_restarts_the_agent_there_between_turns() {
    let mut h = Harness::new(config());
    h.connect(1, "c");
    let uri = "ahp-session:/r";
    let chat = "ahp-chat:/ahp-session@r";
    create(&mut h, "r", "echo", &[ROOT, PEER]);
    h.request(1, "subscribe", json!({"channel": uri}));
    h.backend_cmds();

    // Not while a turn runs.
    h.start_turn(1, chat, 2, "t2", "/slow");
    h.settle_no_repo();
    let e = act(&mut h, uri, 1, json!({"type": "session/workingDirectoryReplaced", "directory": ROOT, "replacement": "file:///work/new"}));
    assert!(e["params"]["rejectionReason"].as_str().unwrap_or("").contains("no turn is running"), "{e}");
    h.agent_reply(chat, "t2", "done");
    h.settle_no_repo();
    h.backend_cmds();

    let e = act(&mut h, uri, 2, json!({"type": "session/workingDirectoryReplaced", "directory": ROOT, "replacement": "file:///work/new"}));
    assert!(e["params"]["rejectionReason"].is_null(), "{e}");
    assert_eq!(folders(&mut h, uri), json!(["file:///work/new", PEER]));
    // The agent was let go; the next turn starts it again in the new root,
    // resuming the conversation.
    h.start_turn(1, chat, 3, "t3", "again");
    let cmds = h.settle_no_repo();
    let start = cmds.iter().find_map(|(_, c)| match c {
        BackendCmd::Start { working_directory, resume, peer_directories, .. } => Some((working_directory.clone(), *resume, peer_directories.clone())),
        _ => None,
    });
    assert_eq!(start, Some((Some("file:///work/new".to_owned()), true, vec![PEER.to_owned()])));

    // Replacing a peer with the root's own URI de-duplicates, as the
    // protocol's reducer does.
    h.agent_reply(chat, "t3", "ok");
    h.settle_no_repo();
    let e = act(&mut h, uri, 3, json!({"type": "session/workingDirectoryReplaced", "directory": PEER, "replacement": "file:///work/new"}));
    assert!(e["params"]["rejectionReason"].is_null(), "{e}");
    assert_eq!(folders(&mut h, uri), json!(["file:///work/new"]));
}

/// Issue 25: `createSession` takes only `file:` URIs of directories. Any
/// other URI is refused at once with -32602 naming it, before git or an
/// agent is asked; a folder the shell finds is not a directory (answered
/// with the repository's facts: `RepoFacts::not_directories`) is refused
/// with -32602 naming it; a peer is asked about too, where it is kept. A
/// refused session never existed.
#[test]
fn a_working_directory_must_be_a_file_uri_of_a_directory() {
    use ahpd_core::git::{FolderKind, GitCmd, GitResult, RepoFacts};
    use ahpd_core::Outcome;
    let mut h = Harness::new(config());
    h.connect(1, "c");
    for (id, bad) in [("bare", "/work/root"), ("web", "http://example.com/work/root"), ("rel", "file:work/root"), ("empty", "")] {
        let uri = format!("ahp-session:/{id}");
        let r = h.request(1, "createSession", json!({"channel": uri, "provider": "echo", "workingDirectories": [bad]}));
        assert_eq!(r["error"]["code"], -32602, "{bad}: {r}");
        let text = r["error"]["message"].as_str().unwrap_or("");
        assert!(text.contains("not a file: URI") && text.contains(bad), "{text}");
        assert!(h.git_cmds().is_empty() && h.backend_cmds().is_empty(), "{bad}: nothing asked");
        assert!(h.host.view().sessions.get(&uri).is_none(), "{bad}: never existed");
    }
    let cases = [
        ("gone", vec![GONE], "/nowhere/gone-from-disk", FolderKind::Missing, "does not exist"),
        ("file", vec!["file:///work/notes.txt"], "/work/notes.txt", FolderKind::NotADirectory, "is not a directory"),
        ("peer", vec![ROOT, GONE], "/nowhere/gone-from-disk", FolderKind::Missing, "does not exist"),
    ];
    for (id, dirs, path, kind, words) in cases {
        let uri = format!("ahp-session:/{id}");
        let rid = h.send_request(1, "createSession", json!({"channel": uri, "provider": "echo", "workingDirectories": dirs}));
        let cmds = h.git_cmds();
        let [(op, GitCmd::Inspect { folder, also })] = &cmds[..] else { panic!("{id}: the folders are asked about: {cmds:?}") };
        let asked: Vec<&str> = std::iter::once(folder.as_str()).chain(also.iter().map(String::as_str)).collect();
        assert!(asked.contains(&path), "{id}: {asked:?}");
        let facts = RepoFacts { not_directories: vec![(path.to_owned(), kind)], ..RepoFacts::not_a_repo() };
        h.done(*op, Outcome::Git(GitResult::Repo(facts)));
        let r = h.take_reply(1, rid).expect("answered");
        assert_eq!(r["error"]["code"], -32602, "{id}: {r}");
        let text = r["error"]["message"].as_str().unwrap_or("");
        assert!(text.contains(words) && text.contains(&format!("file://{path}")), "{id}: {text}");
        assert!(h.backend_cmds().is_empty(), "{id}: no agent started");
        assert!(h.host.view().sessions.get(&uri).is_none(), "{id}: never existed");
    }
    // A peer the agent cannot take is ignored, so it is neither asked about
    // nor refused.
    let rid = h.send_request(1, "createSession", json!({"channel": "ahp-session:/solo", "provider": "solo", "workingDirectories": [ROOT, "/bare/peer"]}));
    let cmds = h.git_cmds();
    assert!(matches!(&cmds[..], [(_, GitCmd::Inspect { also, .. })] if also.is_empty()), "{cmds:?}");
    h.done(cmds[0].0, Outcome::Git(GitResult::Repo(RepoFacts::not_a_repo())));
    h.settle_backend();
    assert_eq!(h.take_reply(1, rid).expect("answered")["result"], Value::Null);
}

/// Issue 25, sim seed 32282 (100k-seed run): a create whose folder could
/// not be looked at (the shell's `Inspect` did not run: `Outcome::Failed`)
/// is refused -32603 with words that say so, and no session is made, since
/// nothing says the folder is a directory (it was `/work/gone`, and the
/// session was made in it). Git failing on a folder that is a directory is
/// answered as facts (`RepoFacts::git_error`): the session is made as in a
/// folder in no repository, and the operator reads git's words.
#[test]
fn a_create_whose_folder_could_not_be_looked_at_makes_no_session() {
    use ahpd_core::git::{GitCmd, GitResult, RepoFacts};
    use ahpd_core::Outcome;
    let mut h = Harness::new(config());
    h.connect(1, "c");
    let rid = h.send_request(1, "createSession", json!({"channel": "ahp-session:/unread", "provider": "echo", "workingDirectories": [GONE]}));
    let cmds = h.git_cmds();
    let [(op, GitCmd::Inspect { .. })] = &cmds[..] else { panic!("the folder is asked about: {cmds:?}") };
    h.done(*op, Outcome::Failed { message: "the git task failed".into() });
    let r = h.take_reply(1, rid).expect("answered");
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let text = r["error"]["message"].as_str().unwrap_or("");
    assert!(text.contains("could not be looked at") && text.contains(GONE) && text.contains("the git task failed"), "{text}");
    assert!(h.backend_cmds().is_empty(), "no agent started");
    assert!(h.host.view().sessions.get("ahp-session:/unread").is_none(), "never existed");

    let rid = h.send_request(1, "createSession", json!({"channel": "ahp-session:/broken", "provider": "echo", "workingDirectories": [ROOT]}));
    let cmds = h.git_cmds();
    let [(op, GitCmd::Inspect { .. })] = &cmds[..] else { panic!("the folder is asked about: {cmds:?}") };
    let facts = RepoFacts { git_error: Some("could not open the repository: a broken .git".into()), ..RepoFacts::not_a_repo() };
    h.done(*op, Outcome::Git(GitResult::Repo(facts)));
    h.settle_backend();
    assert_eq!(h.take_reply(1, rid).expect("answered")["result"], Value::Null);
    assert!(h.host.view().sessions.get("ahp-session:/broken").is_some(), "made in a directory git could not read");
}
