//! A session's files over the wire (issue 48), end to end through the
//! official `ahp` client against the built daemon: the `resource*` commands
//! inside a session's folder, every kind of escape refused with nothing
//! changed on disk, a guest who reads and never writes, a watch that reports
//! the agent's write and another program's, and `@`-mentions found by a
//! partial name.

mod common;

use std::path::{Path, PathBuf};

use ahp::ahp_types::commands::{
    AuthenticateParams, CompletionItemKind, CompletionsParams, ContentEncoding, CreateResourceWatchParams, CreateSessionParams, ResourceCopyParams, ResourceDeleteParams,
    ResourceListParams, ResourceMkdirParams, ResourceMoveParams, ResourceReadParams, ResourceResolveParams, ResourceType, ResourceWriteParams,
};
use ahp::ahp_types::state::{MessageAttachment, SnapshotState, TurnState};
use ahp::ahp_types::ROOT_RESOURCE_URI;
use ahp::Client;
use common::*;
use serde_json::Value;

/// `NotFound`, `PermissionDenied`, `AlreadyExists` and `Conflict` (AHP 1.0).
const NOT_FOUND: i32 = -32008;
const PERMISSION_DENIED: i32 = -32009;
const ALREADY_EXISTS: i32 = -32010;
const CONFLICT: i32 = -32011;

/// A workspace: `proj/` (the session's folder, with `src/main.rs` and a
/// link `out` to the folder beside it) and `outside/secret.txt`, which no
/// session works in.
struct Workspace {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    proj: PathBuf,
    outside: PathBuf,
}

fn workspace() -> Workspace {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().canonicalize().expect("canonical tempdir");
    let proj = root.join("proj");
    let outside = root.join("outside");
    std::fs::create_dir_all(proj.join("src")).expect("proj");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(proj.join("src/main.rs"), "fn main() {}\n").expect("main.rs");
    std::fs::write(proj.join("README.md"), "# proj\n").expect("README");
    std::fs::write(outside.join("secret.txt"), "secret\n").expect("secret");
    std::os::unix::fs::symlink(&outside, proj.join("out")).expect("link out");
    Workspace { data: root.join("data"), _tmp: tmp, proj, outside }
}

/// Makes an echo session working in `dir`; its default chat's URI.
async fn session_in(c: &Client, dir: &Path) -> (String, String) {
    let sid = format!("ahp-session:/{}", fresh_id());
    let params = CreateSessionParams {
        channel: sid.clone(),
        meta: None,
        provider: Some("echo".to_owned()),
        working_directories: Some(vec![file_uri(dir)]),
        config: None,
        active_client: None,
        progress_token: None,
    };
    let created: Value = within("createSession", c.request("createSession", params)).await.expect("createSession");
    assert_eq!(created, Value::Null);
    let (state, _sub) = subscribe_session(c, &sid).await;
    let chat = default_chat(&state);
    (sid, chat)
}

fn read(uri: String) -> ResourceReadParams {
    ResourceReadParams { channel: String::new(), meta: None, uri, encoding: None }
}

fn write(uri: String, text: &str, if_match: Option<String>) -> ResourceWriteParams {
    ResourceWriteParams {
        channel: String::new(),
        meta: None,
        uri,
        data: text.to_owned(),
        encoding: ContentEncoding::Utf8,
        content_type: None,
        create_only: None,
        mode: None,
        position: None,
        if_match,
    }
}

fn resolve(uri: String, follow: Option<bool>) -> ResourceResolveParams {
    ResourceResolveParams { channel: String::new(), meta: None, uri, follow_symlinks: follow }
}

async fn read_text(c: &Client, path: &Path) -> String {
    let r = within("resourceRead", c.resource_read(read(file_uri(path)))).await.expect("resourceRead");
    assert_eq!(r.encoding, ContentEncoding::Utf8, "text comes back as utf-8");
    r.data
}

/// Runs `/write <rel> <text>` as a turn of `chat` to its end.
async fn write_turn(c: &Client, chat: &str, turn_id: &str, rel: &str, text: &str) {
    let (mut chat_state, mut csub) = subscribe_chat(c, chat).await;
    within("dispatch", c.dispatch(chat.to_owned(), user_turn(turn_id, &format!("/write {rel} {text}")))).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "write turn", |env, _| is_turn_complete(env)).await;
    let turn = chat_state.turns.last().expect("a turn");
    assert_eq!(turn.state, TurnState::Complete);
    assert!(markdown(turn).contains(&format!("Echo: wrote {rel}")), "{turn:?}");
}

/// Inside a session's folder every command works with the protocol's
/// shapes: a file the agent wrote reads back; resolve carries an etag that a
/// write checks (a stale one is `Conflict`, nothing written); mkdir, copy,
/// move, list and delete do what they say, with `failIfExists` and
/// `recursive` honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_folder_can_be_read_and_changed_over_the_wire() {
    let ws = workspace();
    let daemon = Daemon::start(&ws.data);
    let (c, init, _root) = connect_init(&daemon.url, "files").await;
    assert_eq!(init.completion_trigger_characters.as_deref(), Some(&["@".to_owned()][..]), "the host offers @-mentions");
    let (_sid, chat) = session_in(&c, &ws.proj).await;

    // The new user: a file the agent wrote is read back.
    write_turn(&c, &chat, "t1", "notes.md", "hello").await;
    assert_eq!(read_text(&c, &ws.proj.join("notes.md")).await, "hello\n");

    // List: sorted names with kinds.
    let listed = within("resourceList", c.resource_list(ResourceListParams { channel: String::new(), meta: None, uri: file_uri(&ws.proj) }))
        .await
        .expect("resourceList");
    let names: Vec<(&str, &str)> = listed.entries.iter().map(|e| (e.name.as_str(), e.r#type.as_str())).collect();
    assert!(names.contains(&("notes.md", "file")) && names.contains(&("src", "directory")), "{names:?}");

    // Resolve: type, size, etag; a link is a link unless followed.
    let notes = ws.proj.join("notes.md");
    let r = within("resolve", c.resource_resolve(resolve(file_uri(&notes), None))).await.expect("resolve");
    assert_eq!(r.r#type, ResourceType::File);
    assert_eq!(r.size, Some(6));
    let etag = r.etag.clone().expect("a file's resolve carries an etag");
    let link = within("resolve link", c.resource_resolve(resolve(file_uri(&ws.proj.join("src")), Some(false)))).await.expect("resolve");
    assert_eq!(link.r#type, ResourceType::Directory);

    // Write with the current etag, then with the stale one: Conflict, and
    // the file keeps the first write.
    within("write", c.resource_write(write(file_uri(&notes), "second\n", Some(etag.clone())))).await.expect("write with the current etag");
    assert_eq!(std::fs::read_to_string(&notes).expect("notes"), "second\n");
    let e = rpc_error(within("stale write", c.resource_write(write(file_uri(&notes), "third\n", Some(etag)))).await);
    assert_eq!(e.code, CONFLICT, "{e:?}");
    assert_eq!(std::fs::read_to_string(&notes).expect("notes"), "second\n", "a stale write changes nothing");

    // createOnly on an existing file: AlreadyExists.
    let mut only = write(file_uri(&notes), "x", None);
    only.create_only = Some(true);
    assert_eq!(rpc_error(within("createOnly", c.resource_write(only)).await).code, ALREADY_EXISTS);

    // Mkdir -p, copy, move (failIfExists), delete (recursive).
    let deep = ws.proj.join("a/b/c");
    within("mkdir", c.resource_mkdir(ResourceMkdirParams { channel: String::new(), meta: None, uri: file_uri(&deep) })).await.expect("mkdir");
    assert!(deep.is_dir());
    let copy = ws.proj.join("a/copy.md");
    let cp = |to: &Path, fail: Option<bool>| ResourceCopyParams { channel: String::new(), meta: None, source: file_uri(&notes), destination: file_uri(to), fail_if_exists: fail };
    within("copy", c.resource_copy(cp(&copy, None))).await.expect("copy");
    assert_eq!(std::fs::read_to_string(&copy).expect("copy"), "second\n");
    assert_eq!(rpc_error(within("copy again", c.resource_copy(cp(&copy, Some(true)))).await).code, ALREADY_EXISTS);
    let moved = ws.proj.join("a/b/moved.md");
    let mv = ResourceMoveParams { channel: String::new(), meta: None, source: file_uri(&copy), destination: file_uri(&moved), fail_if_exists: Some(true) };
    within("move", c.resource_move(mv)).await.expect("move");
    assert!(moved.is_file() && !copy.exists());
    let del = |uri: &Path, recursive: Option<bool>| ResourceDeleteParams { channel: String::new(), meta: None, uri: file_uri(uri), recursive };
    let e = rpc_error(within("delete non-empty", c.resource_delete(del(&ws.proj.join("a"), None))).await);
    assert_ne!(e.code, 0, "a non-empty folder is not deleted without recursive");
    assert!(moved.is_file());
    within("delete recursive", c.resource_delete(del(&ws.proj.join("a"), Some(true)))).await.expect("delete");
    assert!(!ws.proj.join("a").exists());

    // A missing file: NotFound.
    let e = rpc_error(within("read missing", c.resource_read(read(file_uri(&ws.proj.join("nope.txt"))))).await);
    assert_eq!(e.code, NOT_FOUND, "{e:?}");
}

/// Every escape is refused `PermissionDenied` with nothing changed on disk:
/// a path outside every session's folder, `..` out of one, a link that
/// leads out, and a write, move or delete through any of them. The refusal
/// is the same whether the target exists or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_escape_is_refused_and_changes_nothing() {
    let ws = workspace();
    let daemon = Daemon::start(&ws.data);
    let (c, _, _root) = connect_init(&daemon.url, "files-escape").await;
    let _ = session_in(&c, &ws.proj).await;
    let secret = ws.outside.join("secret.txt");
    let escapes = [
        file_uri(&secret),
        format!("{}/../outside/secret.txt", file_uri(&ws.proj)),
        file_uri(&ws.proj.join("out/secret.txt")),
        format!("{}/%2e%2e/outside/secret.txt", file_uri(&ws.proj)),
    ];
    for uri in &escapes {
        let e = rpc_error(within("read escape", c.resource_read(read(uri.clone()))).await);
        assert_eq!(e.code, PERMISSION_DENIED, "{uri}: {e:?}");
        assert!(!e.message.contains("secret\n"), "{e:?}");
        let e = rpc_error(within("write escape", c.resource_write(write(uri.clone(), "pwned\n", None))).await);
        assert_eq!(e.code, PERMISSION_DENIED, "{uri}: {e:?}");
        let e = rpc_error(within("delete escape", c.resource_delete(ResourceDeleteParams { channel: String::new(), meta: None, uri: uri.clone(), recursive: Some(true) })).await);
        assert_eq!(e.code, PERMISSION_DENIED, "{uri}: {e:?}");
    }
    // A move out of the folder and a copy in from outside.
    let mv = ResourceMoveParams { channel: String::new(), meta: None, source: file_uri(&ws.proj.join("README.md")), destination: file_uri(&ws.outside.join("r.md")), fail_if_exists: None };
    assert_eq!(rpc_error(within("move out", c.resource_move(mv)).await).code, PERMISSION_DENIED);
    let cp = ResourceCopyParams { channel: String::new(), meta: None, source: file_uri(&secret), destination: file_uri(&ws.proj.join("s.txt")), fail_if_exists: None };
    assert_eq!(rpc_error(within("copy in", c.resource_copy(cp)).await).code, PERMISSION_DENIED);
    // A missing file outside is refused with the same words as one there.
    let there = rpc_error(within("read outside", c.resource_read(read(file_uri(&secret)))).await);
    let missing = rpc_error(within("read missing outside", c.resource_read(read(file_uri(&ws.outside.join("missing.txt"))))).await);
    assert_eq!((there.code, there.message.replace("secret.txt", "X")), (missing.code, missing.message.replace("missing.txt", "X")));

    assert_eq!(std::fs::read_to_string(&secret).expect("secret"), "secret\n", "nothing outside changed");
    assert!(ws.proj.join("README.md").is_file() && !ws.outside.join("r.md").exists() && !ws.proj.join("s.txt").exists());
    assert_eq!(std::fs::read_dir(&ws.outside).expect("outside").count(), 1);
}

/// With a users directory, a guest (read grants only) reads a member's
/// session's files and is refused every write; a member with no grant on
/// another member's session reads nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_reads_and_never_writes() {
    let ws = workspace();
    let hash = ahpd_core::grants::token_hash;
    let users = ws.data.with_extension("users.toml");
    std::fs::write(
        &users,
        format!(
            "[[users]]\nid = \"alice\"\ntoken_sha256 = \"{}\"\nrole = \"member\"\n\n[[users]]\nid = \"gus\"\ntoken_sha256 = \"{}\"\nrole = \"guest\"\n",
            hash("token-alice-0123456789"),
            hash("token-gus-0123456789")
        ),
    )
    .expect("users");
    let daemon = Daemon::start_with(&ws.data, &["--users", users.to_str().expect("utf-8")]);
    let signed_in = |token: &'static str| {
        let url = daemon.url.clone();
        async move {
            let (c, _, root) = connect_init(&url, token).await;
            let params = AuthenticateParams { channel: ROOT_RESOURCE_URI.to_owned(), meta: None, resource: "ahpd".to_owned(), token: token.to_owned(), expires_in: None, scopes: None };
            let _: Value = within("authenticate", c.request("authenticate", params)).await.expect("authenticate");
            (c, root)
        }
    };
    let (alice, _ra) = signed_in("token-alice-0123456789").await;
    let _ = session_in(&alice, &ws.proj).await;
    let (gus, _rg) = signed_in("token-gus-0123456789").await;
    let readme = ws.proj.join("README.md");
    assert_eq!(read_text(&gus, &readme).await, "# proj\n", "a guest reads");
    let e = rpc_error(within("guest write", gus.resource_write(write(file_uri(&readme), "pwned\n", None))).await);
    assert_eq!(e.code, PERMISSION_DENIED, "{e:?}");
    let e = rpc_error(within("guest delete", gus.resource_delete(ResourceDeleteParams { channel: String::new(), meta: None, uri: file_uri(&readme), recursive: None })).await);
    assert_eq!(e.code, PERMISSION_DENIED, "{e:?}");
    let e = rpc_error(within("guest mkdir", gus.resource_mkdir(ResourceMkdirParams { channel: String::new(), meta: None, uri: file_uri(&ws.proj.join("g")) })).await);
    assert_eq!(e.code, PERMISSION_DENIED, "{e:?}");
    assert_eq!(std::fs::read_to_string(&readme).expect("readme"), "# proj\n");
    assert!(!ws.proj.join("g").exists());
}

/// A watch on a session's folder reports a file the echo agent writes and
/// one another program writes, as `resourceWatch/changed` on the watch's
/// channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_reports_the_agents_write_and_another_programs() {
    let ws = workspace();
    let daemon = Daemon::start(&ws.data);
    let (c, _, _root) = connect_init(&daemon.url, "files-watch").await;
    let (_sid, chat) = session_in(&c, &ws.proj).await;
    let params = CreateResourceWatchParams { channel: String::new(), meta: None, uri: file_uri(&ws.proj), recursive: Some(true), excludes: None, includes: None };
    let watch = within("createResourceWatch", c.create_resource_watch(params)).await.expect("createResourceWatch");
    assert!(watch.channel.starts_with("ahp-resource-watch:"), "{}", watch.channel);
    let (snapshot, mut sub) = within("subscribe watch", c.subscribe(watch.channel.clone())).await.expect("subscribe watch");
    match snapshot.snapshot.map(|s| s.state) {
        Some(SnapshotState::ResourceWatch(w)) => assert!(w.recursive && w.root == file_uri(&ws.proj), "{w:?}"),
        other => panic!("expected a resource watch snapshot, got {other:?}"),
    }
    let changed = |name: &'static str| {
        move |ev: ahp::SubscriptionEvent| -> Option<()> {
            let ahp::SubscriptionEvent::Action(env) = ev else { return None };
            let ahp::ahp_types::actions::StateAction::ResourceWatchChanged(a) = env.action else { return None };
            serde_json::to_string(&a.changes).ok()?.contains(name).then_some(())
        }
    };
    write_turn(&c, &chat, "w1", "agent.md", "by the agent").await;
    wait_for(&mut sub, "the agent's write reported", changed("agent.md")).await;
    std::fs::write(ws.proj.join("src/other.rs"), "// by another program\n").expect("write other");
    wait_for(&mut sub, "another program's write reported", changed("other.rs")).await;
}

/// `completions` for a message being typed finds a file of the session's
/// folder by a partial name after `@`, with a resource attachment naming it
/// and the range of the `@` token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_find_a_file_by_a_partial_name() {
    let ws = workspace();
    let daemon = Daemon::start(&ws.data);
    let (c, _, _root) = connect_init(&daemon.url, "files-complete").await;
    let (_sid, chat) = session_in(&c, &ws.proj).await;
    let text = "look at @mainr";
    let params = CompletionsParams { channel: chat, meta: None, kind: CompletionItemKind::UserMessage, text: text.to_owned(), offset: text.len() as i64 };
    let r = within("completions", c.completions(params)).await.expect("completions");
    let first = r.items.first().expect("an item");
    match &first.attachment {
        MessageAttachment::Resource(a) => assert_eq!(a.uri, file_uri(&ws.proj.join("src/main.rs")), "{a:?}"),
        other => panic!("expected a resource attachment, got {other:?}"),
    }
    assert_eq!((first.range_start, first.range_end), (Some(8), Some(text.len() as i64)), "{first:?}");
}

/// "Attachments reach agents": a message's file attachments are read by the
/// host within the session's folders and handed to its agent (the echo
/// agent names each with its size). The attachment `completions` offers is
/// read; one outside by absolute path, one through a link out and a missing
/// one are named as not read, all in the same words (the agent learns
/// nothing of what lies outside).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_messages_attached_files_reach_the_agent_within_the_sessions_folders() {
    let ws = workspace();
    let daemon = Daemon::start(&ws.data);
    let (c, _, _root) = connect_init(&daemon.url, "files-attach").await;
    let (_sid, chat) = session_in(&c, &ws.proj).await;
    let text = "read @mainr";
    let params = CompletionsParams { channel: chat.clone(), meta: None, kind: CompletionItemKind::UserMessage, text: text.to_owned(), offset: text.len() as i64 };
    let offered = within("completions", c.completions(params)).await.expect("completions").items.into_iter().next().expect("an item").attachment;
    let turn = user_turn_with(
        "t1",
        text,
        vec![
            offered,
            file_attachment("abs", &ws.outside.join("secret.txt")),
            file_attachment("link", &ws.proj.join("out/secret.txt")),
            file_attachment("missing", &ws.proj.join("nope.txt")),
        ],
    );
    let (mut chat_state, mut csub) = subscribe_chat(&c, &chat).await;
    within("dispatch", c.dispatch(chat.clone(), turn)).await.expect("dispatch");
    follow_chat(&mut csub, &mut chat_state, "attachment turn", |env, _| is_turn_complete(env)).await;
    let reply = markdown(chat_state.turns.last().expect("a turn"));
    let unread = "not read: no such file in this session's folders";
    assert!(
        reply.contains(&format!("Attached: src/main.rs (13 bytes), abs ({unread}), link ({unread}), missing ({unread})")),
        "{reply}"
    );
}

/// A watch's `excludes` leave out what they match (and everything below a
/// folder they match); its state echoes them; a pattern that is not
/// relative is refused with -32602.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_leaves_out_what_its_excludes_match() {
    let ws = workspace();
    let daemon = Daemon::start(&ws.data);
    let (c, _, _root) = connect_init(&daemon.url, "files-watch-excludes").await;
    let (_sid, _chat) = session_in(&c, &ws.proj).await;
    let excludes = serde_json::json!({"items": ["build", "**/*.log"]});
    let params = CreateResourceWatchParams { channel: String::new(), meta: None, uri: file_uri(&ws.proj), recursive: Some(true), excludes: Some(excludes.clone()), includes: None };
    let watch = within("createResourceWatch", c.create_resource_watch(params)).await.expect("createResourceWatch");
    let (snapshot, mut sub) = within("subscribe watch", c.subscribe(watch.channel.clone())).await.expect("subscribe watch");
    match snapshot.snapshot.map(|s| s.state) {
        Some(SnapshotState::ResourceWatch(w)) => assert_eq!(w.excludes, Some(excludes), "{w:?}"),
        other => panic!("expected a resource watch snapshot, got {other:?}"),
    }
    std::fs::create_dir_all(ws.proj.join("build/deep")).expect("build");
    std::fs::write(ws.proj.join("build/deep/out.o"), "o").expect("out.o");
    std::fs::write(ws.proj.join("src/run.log"), "log").expect("log");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    std::fs::write(ws.proj.join("src/kept.rs"), "// kept\n").expect("kept");
    let mut seen = Vec::new();
    wait_for(&mut sub, "the kept file reported", |ev| {
        let ahp::SubscriptionEvent::Action(env) = ev else { return None };
        let ahp::ahp_types::actions::StateAction::ResourceWatchChanged(a) = env.action else { return None };
        let text = serde_json::to_string(&a.changes).ok()?;
        seen.push(text.clone());
        text.contains("kept.rs").then_some(())
    })
    .await;
    assert!(seen.iter().all(|t| !t.contains("/build") && !t.contains("run.log")), "excluded paths reported: {seen:?}");
    let bad = CreateResourceWatchParams { channel: String::new(), meta: None, uri: file_uri(&ws.proj), recursive: Some(true), excludes: Some(serde_json::json!({"items": ["/etc"]})), includes: None };
    let e = rpc_error(within("createResourceWatch", c.create_resource_watch(bad)).await);
    assert_eq!(e.code, -32602, "{e:?}");
    assert!(e.message.contains("relative"), "{e:?}");
}
