//! A session's files over the wire (issue 48) in the simulation: the
//! simulated machine's filesystem (`ahpd_core::files::memfs::MemFs`) laid
//! out with the sessions' folders, a zone outside every folder
//! ([`SECRET_DIR`]) and links and `..` paths that lead there; the clients'
//! files requests with hostile paths (arm 24 of `clients.rs`); and the
//! rules the world checks after every step (`World::route`):
//!
//! - `files_no_bytes_outside`: no frame to a client carries the bytes of a
//!   file outside every session folder (as text or as base64), and no
//!   `completions` answer or watch change names a path there;
//! - `files_outside_unchanged`: nothing outside every session folder ever
//!   changes (so every refused write changed nothing there);
//! - `files_watch_batches`: every `resourceWatch/changed` carries at least
//!   one change and names each path at most once.

use ahpd_core::files::memfs::{MemFs, Node};
use serde_json::{json, Value};

use ahp_types::Uri;

use crate::clients::{Client, ClientOut, ReqKind};
use crate::rng::SimRng;

/// The zone no session's folder holds.
pub const SECRET_DIR: &str = "/zz-secret";

/// The secret files' contents: markers no other file holds.
const SECRETS: [(&str, &str); 2] = [("/zz-secret/key", "ZZSECRET-ONE"), ("/zz-secret/dir/other", "ZZSECRET-TWO")];

/// The machine's filesystem as a run starts.
pub fn machine() -> MemFs {
    let mut fs = MemFs::new();
    for (path, data) in SECRETS {
        fs.put(path, data.as_bytes());
    }
    for folder in ["/work/a", "/work/b", "/work/repo1", "/work/repo1/pkg", "/work/repo2", "/work/plain", "/work/empty"] {
        fs.mkdir_p(folder);
    }
    fs.put("/work/a/notes.md", b"notes of a");
    fs.put("/work/a/src/main.rs", b"fn main() {}");
    fs.put("/work/b/readme.txt", b"b");
    fs.put("/work/repo1/src/lib.rs", b"pub fn lib() {}");
    fs.put("/work/repo1/pkg/key.txt", b"not a secret");
    fs.link("/work/a/out", SECRET_DIR);
    fs.link("/work/a/key", "../../zz-secret/key");
    fs.link("/work/repo1/up", "..");
    fs.link("/work/b/loop", "/work/b/loop");
    let _ = fs.take_batches();
    fs
}

/// The markers a frame must never carry: each secret as text and as
/// base64.
pub fn markers() -> Vec<String> {
    use std::fmt::Write as _;
    let mut out = Vec::new();
    for (_, data) in SECRETS {
        out.push(data.to_owned());
        // Base64 of the marker, whole (the file is the marker alone, so a
        // read answered as base64 is exactly this).
        let mut b64 = String::new();
        let bytes = data.as_bytes();
        const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..4 {
                if i <= chunk.len() {
                    let _ = b64.write_char(TABLE[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    b64.push('=');
                }
            }
        }
        out.push(b64);
    }
    out
}

/// Another program on the machine writes a file in one of the folders
/// sessions use (what watches report besides the clients' writes).
pub fn another_program(fs: &mut MemFs, rng: &mut SimRng) {
    let folder = ["/work/a", "/work/b", "/work/repo1", "/work/repo1/pkg", "/work/plain"][rng.below(5) as usize];
    let name = ["other.txt", "src/gen.rs", "notes.md"][rng.below(3) as usize];
    fs.put(&format!("{folder}/{name}"), b"another program");
}

/// What is outside every session folder now (compared after every step).
pub fn outside(fs: &MemFs) -> Vec<(String, Node)> {
    fs.nodes.range(SECRET_DIR.to_owned()..).take_while(|(k, _)| k.starts_with(SECRET_DIR)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The rules on one frame sent to a client (module docs); `Err` names the
/// broken rule and why.
pub fn check_frame(text: &str, markers: &[String]) -> Result<(), (&'static str, String)> {
    for m in markers {
        if text.contains(m.as_str()) {
            return Err(("files_no_bytes_outside", format!("a frame carries a secret's bytes ({m}): {text}")));
        }
    }
    if text.contains("insertText") && text.contains("zz-secret") {
        return Err(("files_no_bytes_outside", format!("a completion names a path outside every folder: {text}")));
    }
    if text.contains("resourceWatch/changed") {
        let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let items = v["params"]["action"]["changes"]["items"].as_array().cloned().unwrap_or_default();
        if items.is_empty() {
            return Err(("files_watch_batches", format!("an empty batch: {text}")));
        }
        let mut seen = std::collections::BTreeSet::new();
        for item in &items {
            let uri = item["uri"].as_str().unwrap_or_default();
            if !seen.insert(uri.to_owned()) {
                return Err(("files_watch_batches", format!("{uri} twice in one batch: {text}")));
            }
            if uri.contains("zz-secret") {
                return Err(("files_no_bytes_outside", format!("a watch reports a path outside every folder: {text}")));
            }
        }
    }
    Ok(())
}

/// Paths clients name: inside folders, hostile ones of every kind.
const PATHS: [&str; 16] = [
    "file:///work/a/notes.md",
    "file:///work/a/src/main.rs",
    "file:///work/a",
    "file:///work/repo1/src/lib.rs",
    "file:///zz-secret/key",
    "file:///zz-secret",
    "file:///work/a/../../zz-secret/key",
    "file:///work/a/%2e%2e/%2e%2e/zz-secret/key",
    "file:///work/a/out/key",
    "file:///work/a/key",
    "file:///work/a/missing/../../zz-secret/key",
    "file:///work/repo1/up/a/out/dir/other",
    "file://server/share/x",
    "file:///work/a\\..\\..\\zz-secret",
    "file:///work/a/%00key",
    "file:///work/b/loop",
];

/// A file a write may make.
fn fresh(rng: &mut SimRng) -> String {
    let dir = ["/work/a", "/work/b", "/work/repo1", "/work/a/out", "/zz-secret"][rng.below(5) as usize];
    format!("file://{dir}/new-{}.txt", rng.below(4))
}

/// One files move of `client` on `session` (its channel: the session, now
/// and then the root): a request with a path drawn from [`PATHS`] or a
/// fresh file, a subscribe to a watch channel that may not be its own.
pub fn think(client: &mut Client, rng: &mut SimRng, session: &Uri) -> Vec<ClientOut> {
    let channel = if rng.chance(0.8) { session.clone() } else { ahp_types::ROOT_RESOURCE_URI.to_owned() };
    // The session's own folder, when this client holds its state: most
    // requests there are answered, not refused.
    let own: Option<String> = match client.mirrors.get(session).map(|m| &m.state) {
        Some(crate::clients::MirrorState::Session(s)) => s.working_directories.as_ref().and_then(|l| l.first().cloned()),
        _ => None,
    };
    let path = |rng: &mut SimRng| match &own {
        Some(folder) if rng.chance(0.4) => format!("{folder}/{}", ["notes.md", "src", "new-0.txt", "src/main.rs", "out/key", "../zz-secret/key"][rng.below(6) as usize]),
        _ if rng.chance(0.3) => fresh(rng),
        _ => PATHS[rng.below(PATHS.len() as u64) as usize].to_owned(),
    };
    let (method, params) = match rng.below(11) {
        0 => ("resourceRead", json!({"channel": channel, "uri": path(rng), "encoding": if rng.chance(0.5) { "base64" } else { "utf-8" }})),
        1 => ("resourceList", json!({"channel": channel, "uri": path(rng)})),
        2 => ("resourceResolve", json!({"channel": channel, "uri": path(rng), "followSymlinks": rng.chance(0.7)})),
        3 => ("resourceWrite", json!({"channel": channel, "uri": path(rng), "data": "written by a client", "encoding": "utf-8", "createOnly": rng.chance(0.3)})),
        4 => ("resourceMkdir", json!({"channel": channel, "uri": path(rng)})),
        5 => ("resourceCopy", json!({"channel": channel, "source": path(rng), "destination": path(rng)})),
        6 => ("resourceMove", json!({"channel": channel, "source": path(rng), "destination": path(rng)})),
        7 => ("resourceDelete", json!({"channel": channel, "uri": path(rng), "recursive": rng.chance(0.3)})),
        8 => ("completions", json!({"channel": channel, "kind": "userMessage", "text": (["@ke", "see @oth", "@", "x @main"][rng.below(4) as usize]), "offset": 3})),
        9 => {
            let uri = match &own {
                Some(folder) if rng.chance(0.6) => folder.clone(),
                _ => ["file:///work/a", "file:///work/a/out", "file:///work/repo1", "file:///zz-secret"][rng.below(4) as usize].to_owned(),
            };
            ("createResourceWatch", json!({"channel": channel, "uri": uri, "recursive": rng.chance(0.5)}))
        }
        _ => ("subscribe", json!({"channel": format!("ahp-resource-watch:/{}", rng.range(1, 4))})),
    };
    vec![client.send_request(method, params, ReqKind::Plain)]
}
