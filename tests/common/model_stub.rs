//! The real agents' packages (`tests/real_agents`, installed by `npm ci
//! --prefix tests/real_agents`) and the model stub they talk to
//! (`tests/real_agents/model_stub.mjs`: the Anthropic Messages API and the
//! Gemini API on 127.0.0.1, answering what each test's prompt says).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The packages' folder.
pub fn real_agents_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/real_agents").canonicalize().expect("tests/real_agents")
}

/// A path inside the installed packages, or a failure saying how to get
/// them (the tests fail, never skip, without them).
pub fn installed(rel: &str) -> PathBuf {
    const HOW: &str = "run `npm ci --prefix tests/real_agents` (needs Node 20+ and npm)";
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("`node --version` failed ({}): {HOW}", out.status),
        Err(e) => panic!("`node` is not on PATH ({e}): install Node 20+, then {HOW}"),
    }
    let path = real_agents_dir().join(rel);
    assert!(path.exists(), "{} is missing: {HOW}", path.display());
    path
}

/// The model stub, running; killed on drop.
pub struct ModelStub {
    child: Child,
    /// Its base URL, `http://127.0.0.1:<port>`.
    pub url: String,
    /// Its request log (one JSON line per request).
    pub log: PathBuf,
}

impl ModelStub {
    /// Starts the stub, logging to `log`.
    pub fn start(log: &Path) -> ModelStub {
        let mut child = Command::new("node")
            .arg(real_agents_dir().join("model_stub.mjs"))
            .arg("--log")
            .arg(log)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the model stub");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stub stdout")).read_line(&mut line).expect("the stub's first line");
        let port = line.trim().strip_prefix("listening ").unwrap_or_else(|| panic!("unexpected stub line {line:?}")).to_owned();
        ModelStub { child, url: format!("http://127.0.0.1:{port}"), log: log.to_owned() }
    }

    /// What the agents asked so far (the log), for a failing test's message.
    pub fn requests(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ModelStub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
