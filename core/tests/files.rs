//! A session's files over the wire (issue 48), end to end through
//! `Host::handle` with the testkit's in-memory filesystem: the `resource*`
//! commands inside a session's folder, every escape refused with nothing
//! changed, a guest refused every write, a watch's changes fanned out,
//! `completions` finding a file by a partial name.

use ahpd_core::files::fs::FsCmd;
use ahpd_core::grants::{token_hash, Membership, Role, User, UsersDirectory};
use ahpd_core::testkit::Harness;
use ahpd_core::{Config, ConnId, Input};
use serde_json::{json, Value};

const ROOT: &str = "ahp-root://";

/// A host with one echo session `s` in `/w` (no repository), made on
/// connection 1, and a filesystem holding `/w/notes.md`, `/w/src/main.rs`,
/// `/secret/key` and links out of `/w`.
fn host(config: Config) -> (Harness, String) {
    let mut h = Harness::new(config);
    h.fs.put("/w/notes.md", b"hello");
    h.fs.put("/w/src/main.rs", b"fn main() {}");
    h.fs.put("/secret/key", b"TOP SECRET");
    h.fs.link("/w/out", "/secret");
    h.fs.link("/w/key", "../secret/key");
    h.fs.put("/wide/x", b"not in w");
    (h, "ahp-session:/s".to_owned())
}

fn connect(h: &mut Harness, conn: u64, who: Option<&str>) {
    h.input(Input::Connected { conn: ConnId(conn) });
    if let Some(who) = who {
        let r = h.request(conn, "authenticate", json!({"channel": ROOT, "resource": "ahpd", "token": format!("token-{who}")}));
        assert!(r.get("result").is_some(), "{r}");
    }
    let r = h.request(conn, "initialize", json!({"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": format!("c{conn}")}));
    assert!(r.get("result").is_some(), "{r}");
}

fn create(h: &mut Harness, conn: u64, id: &str, folder: &str) -> String {
    let uri = format!("ahp-session:/{id}");
    let rid = h.send_request(conn, "createSession", json!({"channel": uri, "provider": "echo", "workingDirectories": [format!("file://{folder}")]}));
    h.settle_no_repo();
    let r = h.take_reply(conn, rid).expect("createSession reply");
    assert_eq!(r["result"], Value::Null, "{r}");
    uri
}

fn code(r: &Value) -> i64 {
    r["error"]["code"].as_i64().unwrap_or(0)
}

/// The users `alice` and `bob` (members, each their own project) and
/// `gus`, a guest in alice's project.
fn users() -> UsersDirectory {
    let user = |id: &str, role, project: &str| User {
        id: id.into(),
        token_sha256: token_hash(&format!("token-{id}")),
        role,
        administrator: false,
        memberships: vec![Membership { team: "t".into(), project: project.into(), primary: true }],
    };
    UsersDirectory { users: vec![user("alice", Role::Member, "alice"), user("bob", Role::Member, "bob"), user("gus", Role::Guest, "alice")], plugins: Vec::new() }
}

#[test]
fn list_read_resolve_write_mkdir_copy_move_delete_inside_a_session_folder() {
    let (mut h, _) = host(Config::default());
    connect(&mut h, 1, None);
    let s = create(&mut h, 1, "s", "/w");
    let r = h.request_fs(1, "resourceList", json!({"channel": s, "uri": "file:///w"}));
    let names: Vec<&str> = r["result"]["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["key", "notes.md", "out", "src"], "{r}");
    let r = h.request_fs(1, "resourceRead", json!({"channel": s, "uri": "file:///w/notes.md"}));
    assert_eq!(r["result"], json!({"data": "hello", "encoding": "utf-8"}), "{r}");
    let r = h.request_fs(1, "resourceRead", json!({"channel": s, "uri": "file:///w/notes.md", "encoding": "base64"}));
    assert_eq!(r["result"]["data"], "aGVsbG8=", "{r}");
    let r = h.request_fs(1, "resourceResolve", json!({"channel": s, "uri": "file:///w/notes.md"}));
    assert_eq!(r["result"]["type"], "file", "{r}");
    assert_eq!(r["result"]["size"], 5, "{r}");
    let etag = r["result"]["etag"].as_str().unwrap().to_owned();
    // A link not followed is reported as a link.
    let r = h.request_fs(1, "resourceResolve", json!({"channel": s, "uri": "file:///w/out", "followSymlinks": false}));
    assert_eq!(r["result"]["type"], "symlink", "{r}");
    // A current ifMatch writes; the same (now stale) one conflicts.
    let r = h.request_fs(1, "resourceWrite", json!({"channel": s, "uri": "file:///w/notes.md", "data": "hi there", "encoding": "utf-8", "ifMatch": etag}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert_eq!(h.fs.file("/w/notes.md"), Some(&b"hi there"[..]));
    let r = h.request_fs(1, "resourceWrite", json!({"channel": s, "uri": "file:///w/notes.md", "data": "lost", "encoding": "utf-8", "ifMatch": etag}));
    assert_eq!(code(&r), -32011, "{r}");
    assert_eq!(h.fs.file("/w/notes.md"), Some(&b"hi there"[..]));
    let r = h.request_fs(1, "resourceWrite", json!({"channel": s, "uri": "file:///w/notes.md", "data": "x", "encoding": "utf-8", "createOnly": true}));
    assert_eq!(code(&r), -32010, "{r}");
    let r = h.request_fs(1, "resourceWrite", json!({"channel": s, "uri": "file:///w/bin.dat", "data": "AP8=", "encoding": "base64"}));
    assert_eq!(r["result"], json!({}), "{r}");
    let r = h.request_fs(1, "resourceRead", json!({"channel": s, "uri": "file:///w/bin.dat"}));
    assert_eq!(r["result"], json!({"data": "AP8=", "encoding": "base64"}), "binary comes back as base64: {r}");
    let r = h.request_fs(1, "resourceMkdir", json!({"channel": s, "uri": "file:///w/a/b"}));
    assert_eq!(r["result"], json!({}), "{r}");
    let r = h.request_fs(1, "resourceCopy", json!({"channel": s, "source": "file:///w/notes.md", "destination": "file:///w/a/b/copy.md"}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert_eq!(h.fs.file("/w/a/b/copy.md"), Some(&b"hi there"[..]));
    let r = h.request_fs(1, "resourceCopy", json!({"channel": s, "source": "file:///w/notes.md", "destination": "file:///w/a/b/copy.md", "failIfExists": true}));
    assert_eq!(code(&r), -32010, "{r}");
    let r = h.request_fs(1, "resourceMove", json!({"channel": s, "source": "file:///w/a/b/copy.md", "destination": "file:///w/moved.md"}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(h.fs.file("/w/a/b/copy.md").is_none() && h.fs.file("/w/moved.md").is_some());
    let r = h.request_fs(1, "resourceDelete", json!({"channel": s, "uri": "file:///w/a"}));
    assert_eq!(code(&r), -32602, "a folder with something in it needs recursive: {r}");
    let r = h.request_fs(1, "resourceDelete", json!({"channel": s, "uri": "file:///w/a", "recursive": true}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(!h.fs.nodes.contains_key("/w/a"));
    let r = h.request_fs(1, "resourceRead", json!({"channel": s, "uri": "file:///w/nothing"}));
    assert_eq!(code(&r), -32008, "{r}");
    // Deleting a link deletes the link, never what it points at.
    let r = h.request_fs(1, "resourceDelete", json!({"channel": s, "uri": "file:///w/key"}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert_eq!(h.fs.file("/secret/key"), Some(&b"TOP SECRET"[..]));
}

/// Every escape is refused -32009 with the same words whether or not the
/// path exists, and nothing is asked of the filesystem past the resolve.
#[test]
fn escapes_are_refused_and_change_nothing() {
    let mut config = Config::default();
    config.files.browse = Some(false);
    let (mut h, _) = host(config);
    connect(&mut h, 1, None);
    let s = create(&mut h, 1, "s", "/w");
    let before = h.fs.clone();
    let mut words = Vec::new();
    for uri in ["file:///secret/key", "file:///secret/none", "file:///w/../secret/key", "file:///w/%2e%2e/secret/key", "file:///w/out/key", "file:///w/key", "file:///wide/x", "file:///w/missing/../../secret/key"] {
        let r = h.request_fs(1, "resourceRead", json!({"channel": s, "uri": uri}));
        assert_eq!(code(&r), -32009, "{uri}: {r}");
        words.push(r["error"]["message"].as_str().unwrap().to_owned());
        let id = h.send_request(1, "resourceWrite", json!({"channel": s, "uri": uri, "data": "pwned", "encoding": "utf-8"}));
        let ran = h.settle_fs();
        assert!(ran.iter().all(|c| matches!(c, FsCmd::Resolve { .. })), "only the resolve ran for {uri}: {ran:?}");
        let r = h.take_reply(1, id).unwrap();
        assert_eq!(code(&r), -32009, "{uri}: {r}");
    }
    words.dedup();
    assert_eq!(words.len(), 1, "one refusal whatever is there: {words:?}");
    for (method, params) in [
        ("resourceCopy", json!({"channel": s, "source": "file:///secret/key", "destination": "file:///w/stolen"})),
        ("resourceCopy", json!({"channel": s, "source": "file:///w/notes.md", "destination": "file:///secret/planted"})),
        ("resourceMove", json!({"channel": s, "source": "file:///w/notes.md", "destination": "file:///w/out/planted"})),
        ("resourceDelete", json!({"channel": s, "uri": "file:///secret/key"})),
        ("resourceMkdir", json!({"channel": s, "uri": "file:///w/out/new"})),
        ("resourceList", json!({"channel": s, "uri": "file:///secret"})),
        ("resourceDelete", json!({"channel": s, "uri": "file:///w"})),
    ] {
        let r = h.request_fs(1, method, params.clone());
        assert_eq!(code(&r), -32009, "{method} {params}: {r}");
    }
    // Malformed URIs are refused at the edge, before any effect.
    for uri in ["http://x/y", "file:relative", "file:///a%00b", "file:///C:\\Windows", "file://server/share"] {
        let id = h.send_request(1, "resourceRead", json!({"channel": s, "uri": uri}));
        assert!(h.settle_fs().is_empty(), "{uri}");
        assert_eq!(code(&h.take_reply(1, id).unwrap()), -32602, "{uri}");
    }
    assert_eq!(h.fs.nodes, before.nodes, "nothing changed on the filesystem");
}

/// With a users directory: another member reads a session's folder as it
/// reads the session's turns, and never writes to it; a guest reads and
/// never writes.
#[test]
fn another_principals_session_and_a_guest() {
    let mut config = Config::default();
    config.users = Some(users());
    let (mut h, _) = host(config);
    connect(&mut h, 1, Some("alice"));
    connect(&mut h, 2, Some("bob"));
    connect(&mut h, 3, Some("gus"));
    let s = create(&mut h, 1, "s", "/w");
    let r = h.request_fs(1, "resourceRead", json!({"channel": s, "uri": "file:///w/notes.md"}));
    assert_eq!(r["result"]["data"], "hello", "{r}");
    for channel in [s.as_str(), ROOT] {
        let r = h.request_fs(2, "resourceRead", json!({"channel": channel, "uri": "file:///w/notes.md"}));
        assert_eq!(r["result"]["data"], "hello", "bob reads alice's folder as he reads her turns: {r}");
    }
    let r = h.request_fs(3, "resourceRead", json!({"channel": s, "uri": "file:///w/notes.md"}));
    assert_eq!(r["result"]["data"], "hello", "a guest reads: {r}");
    let before = h.fs.clone();
    let r = h.request_fs(2, "resourceWrite", json!({"channel": s, "uri": "file:///w/notes.md", "data": "x", "encoding": "utf-8"}));
    assert_eq!(code(&r), -32009, "bob never writes to alice's folder: {r}");
    for (method, params) in [
        ("resourceWrite", json!({"channel": s, "uri": "file:///w/notes.md", "data": "x", "encoding": "utf-8"})),
        ("resourceMkdir", json!({"channel": s, "uri": "file:///w/d"})),
        ("resourceDelete", json!({"channel": s, "uri": "file:///w/notes.md"})),
        ("resourceMove", json!({"channel": s, "source": "file:///w/notes.md", "destination": "file:///w/n2"})),
        ("resourceCopy", json!({"channel": s, "source": "file:///w/notes.md", "destination": "file:///w/n2"})),
    ] {
        let r = h.request_fs(3, method, params);
        assert_eq!(code(&r), -32009, "a guest never writes ({method}): {r}");
    }
    assert_eq!(h.fs.nodes, before.nodes);
    // Browsing is off on a host with a users directory by default.
    let r = h.request_fs(1, "resourceList", json!({"channel": ROOT, "uri": "file:///secret"}));
    assert_eq!(code(&r), -32009, "{r}");
}

/// Browsing for a folder picker: names and kinds of folders outside
/// every session, never a file's content.
#[test]
fn browsing_lists_names_but_reads_nothing_outside() {
    let (mut h, _) = host(Config::default());
    connect(&mut h, 1, None);
    let r = h.request_fs(1, "resourceList", json!({"channel": ROOT, "uri": "file:///secret"}));
    assert_eq!(r["result"]["entries"], json!([{"name": "key", "type": "file"}]), "{r}");
    let r = h.request_fs(1, "resourceResolve", json!({"channel": ROOT, "uri": "file:///secret/key"}));
    assert_eq!(r["result"], json!({"uri": "file:///secret/key", "type": "file"}), "the kind only: {r}");
    let r = h.request_fs(1, "resourceRead", json!({"channel": ROOT, "uri": "file:///secret/key"}));
    assert_eq!(code(&r), -32009, "{r}");
}

#[test]
fn watch_events_fan_out_once_per_path() {
    let (mut h, _) = host(Config::default());
    connect(&mut h, 1, None);
    let s = create(&mut h, 1, "s", "/w");
    let r = h.request_fs(1, "createResourceWatch", json!({"channel": s, "uri": "file:///w", "recursive": true}));
    let channel = r["result"]["channel"].as_str().unwrap().to_owned();
    assert!(channel.starts_with("ahp-resource-watch:/"), "{r}");
    let r = h.request(1, "subscribe", json!({"channel": channel}));
    assert_eq!(r["result"]["snapshot"]["state"]["root"], "file:///w", "{r}");
    // Another program writes twice and outside; a client writes too.
    h.fs.put("/w/src/lib.rs", b"a");
    h.fs.put("/w/src/lib.rs", b"b");
    h.fs.put("/secret/other", b"x");
    h.settle_fs();
    // A batch naming a path outside the watch (a shell's mistake) and one
    // path twice: the outside one dropped, the other once.
    h.input(Input::FsChanged { watch: 1, changes: vec![("/secret/key".into(), ahp_types::state::ResourceChangeType::Updated), ("/w/x".into(), ahp_types::state::ResourceChangeType::Added), ("/w/x".into(), ahp_types::state::ResourceChangeType::Updated)] });
    h.input(Input::FsChanged { watch: 1, changes: vec![("/secret/key".into(), ahp_types::state::ResourceChangeType::Updated)] });
    let frames = h.frames(1);
    let batches: Vec<&Value> = frames.iter().filter(|f| f["params"]["channel"] == channel.as_str()).map(|f| &f["params"]["action"]["changes"]["items"]).collect();
    assert_eq!(batches.len(), 2, "one action per batch with something in it: {frames:?}");
    assert_eq!(batches[0], &json!([{"uri": "file:///w/src/lib.rs", "type": "updated"}]), "{batches:?}");
    assert_eq!(batches[1], &json!([{"uri": "file:///w/x", "type": "updated"}]), "{batches:?}");
    // The last subscriber leaves: the watch ends.
    h.request(1, "unsubscribe", json!({"channel": channel}));
    let ran = h.settle_fs();
    assert!(ran.iter().any(|c| matches!(c, FsCmd::Unwatch { watch: 1 })), "{ran:?}");
    assert!(h.host.view().files.watches().is_empty());
}

#[test]
fn a_watch_ends_with_its_session() {
    let (mut h, _) = host(Config::default());
    connect(&mut h, 1, None);
    let s = create(&mut h, 1, "s", "/w");
    let r = h.request_fs(1, "createResourceWatch", json!({"channel": s, "uri": "file:///w/src"}));
    let channel = r["result"]["channel"].as_str().unwrap().to_owned();
    h.request(1, "subscribe", json!({"channel": channel}));
    let id = h.send_request(1, "disposeSession", json!({"channel": s}));
    h.settle_no_repo();
    let r = h.take_reply(1, id).unwrap();
    assert!(r.get("result").is_some(), "{r}");
    let ran = h.settle_fs();
    assert!(ran.iter().any(|c| matches!(c, FsCmd::Unwatch { .. })), "{ran:?}");
    assert!(h.host.view().files.watches().is_empty());
    assert!(!h.host.view().conns[&ConnId(1)].subscriptions.contains(&channel));
}

#[test]
fn watches_per_connection_are_bounded() {
    let mut config = Config::default();
    config.files.watches_per_conn = 2;
    let (mut h, _) = host(config);
    connect(&mut h, 1, None);
    let s = create(&mut h, 1, "s", "/w");
    for _ in 0..2 {
        let r = h.request_fs(1, "createResourceWatch", json!({"channel": s, "uri": "file:///w"}));
        assert!(r.get("result").is_some(), "{r}");
    }
    let r = h.request_fs(1, "createResourceWatch", json!({"channel": s, "uri": "file:///w"}));
    assert_eq!(code(&r), -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("too many resource watches"), "{r}");
}

#[test]
fn completions_find_a_file_by_a_partial_name() {
    let (mut h, _) = host(Config::default());
    connect(&mut h, 1, None);
    let s = create(&mut h, 1, "s", "/w");
    let r = h.request(1, "initialize", json!({"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": "again"}));
    let _ = r;
    let r = h.request_fs(1, "completions", json!({"channel": s, "kind": "userMessage", "text": "look at @mai", "offset": 12}));
    let items = r["result"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{r}");
    assert_eq!(items[0]["insertText"], "@src/main.rs");
    assert_eq!(items[0]["rangeStart"], 8);
    assert_eq!(items[0]["rangeEnd"], 12);
    assert_eq!(items[0]["attachment"]["type"], "resource");
    assert_eq!(items[0]["attachment"]["uri"], "file:///w/src/main.rs");
    // No mention at the cursor: no items, nothing asked.
    let id = h.send_request(1, "completions", json!({"channel": s, "kind": "userMessage", "text": "plain", "offset": 5}));
    assert!(h.settle_fs().is_empty());
    assert_eq!(h.take_reply(1, id).unwrap()["result"]["items"], json!([]));
}

#[test]
fn initialize_offers_mentions_and_a_default_directory() {
    let mut config = Config::default();
    config.trust = ahpd_core::trust::Trust::of(&["/w".to_owned()]);
    let mut h = Harness::new(config);
    h.input(Input::Connected { conn: ConnId(1) });
    let r = h.request(1, "initialize", json!({"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": "c"}));
    assert_eq!(r["result"]["completionTriggerCharacters"], json!(["@"]), "{r}");
    assert_eq!(r["result"]["defaultDirectory"], "file:///w", "{r}");
}
