//! An ACP agent's process: spawned in the chat's working directory with its
//! three pipes, in a process group of its own (so whatever it starts goes
//! with it: [`ProcessGroup`]), its stdout framed into bounded JSON lines for
//! the `agent-client-protocol` transport, and the tail of its stderr kept
//! for error messages.
//!
//! Faults on stdout end the stream with an `io::Error` the connection
//! reports: a line longer than [`MAX_LINE_BYTES`], a line that is not UTF-8
//! or not JSON. (ACP reserves stdout for JSON-RPC, one message per line.)

use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{Sink, Stream};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

/// Longest line accepted from an agent's stdout, in bytes (4 MiB). A longer
/// line is a fault: the connection ends and the chat gets an error.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// How much of an agent's stderr is kept for error messages, in bytes.
pub const STDERR_TAIL_BYTES: usize = 2048;

/// A spawned agent: the child, its process group, its pipes, and its
/// stderr tail.
pub struct Spawned {
    /// The process (killed when dropped).
    pub child: Child,
    /// Its process group: the agent and everything it started (killed when
    /// dropped).
    pub group: ProcessGroup,
    /// Its stdin (our JSON-RPC output).
    pub stdin: ChildStdin,
    /// Its stdout (its JSON-RPC output).
    pub stdout: ChildStdout,
    /// The last bytes it wrote on stderr.
    pub stderr: StderrTail,
}

/// Starts `program args` in `cwd` with piped stdio, as the leader of a new
/// process group.
///
/// Errors: the program cannot be started (not found, not executable, `cwd`
/// missing), as a message naming the program.
pub fn spawn(agent: &str, program: &str, args: &[String], cwd: &Path) -> Result<Spawned, String> {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("could not start {program:?} in {}: {e}", cwd.display()))?;
    let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take()) else {
        return Err(format!("{program:?} started without its pipes"));
    };
    let group = ProcessGroup::led_by(&child);
    Ok(Spawned { child, group, stdin, stdout, stderr: StderrTail::read(agent.to_owned(), stderr) })
}

/// The process group an agent leads (it was spawned with
/// `process_group(0)`): the agent and every process it started that did not
/// leave the group (shells, tools, `sleep 1000`). [`ProcessGroup::kill`]
/// sends SIGKILL to all of them, once; dropping the value does the same, so
/// a chat that ends, sleeps, or goes with the daemon's runtime at shutdown
/// leaves nothing running.
pub struct ProcessGroup {
    pgid: Option<rustix::process::Pid>,
}

impl ProcessGroup {
    /// The group `child` leads (its pid is the group id); an empty value
    /// when the child has already been reaped.
    pub fn led_by(child: &Child) -> ProcessGroup {
        let pgid = child.id().and_then(|id| i32::try_from(id).ok()).and_then(rustix::process::Pid::from_raw);
        ProcessGroup { pgid }
    }

    /// Sends SIGKILL to every process of the group, once. A group with no
    /// process left is not an error; other errors are logged.
    pub fn kill(&mut self) {
        let Some(pgid) = self.pgid.take() else { return };
        match rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL) {
            Ok(()) => tracing::debug!(pgid = pgid.as_raw_nonzero().get(), "acp: agent process group killed"),
            Err(rustix::io::Errno::SRCH) => {}
            Err(e) => tracing::warn!(pgid = pgid.as_raw_nonzero().get(), "acp: could not kill the agent's process group: {e}"),
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The tail of an agent's stderr, read by a task of its own; every line is
/// also logged at debug level.
#[derive(Clone)]
pub struct StderrTail {
    bytes: Arc<Mutex<VecDeque<u8>>>,
    reader: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl StderrTail {
    fn read(agent: String, mut stderr: tokio::process::ChildStderr) -> StderrTail {
        let bytes = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL_BYTES)));
        let sink = bytes.clone();
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let n = match stderr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let chunk = &buf[..n];
                tracing::debug!(agent = %agent, "agent stderr: {}", String::from_utf8_lossy(chunk).trim_end());
                let mut tail = sink.lock().unwrap_or_else(PoisonError::into_inner);
                tail.extend(chunk.iter().copied());
                let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
                tail.drain(..excess);
            }
        });
        StderrTail { bytes, reader: Arc::new(Mutex::new(Some(reader))) }
    }

    /// What the tail holds now, trimmed, as text.
    pub fn now(&self) -> String {
        let tail = self.bytes.lock().unwrap_or_else(PoisonError::into_inner);
        let (a, b) = tail.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        String::from_utf8_lossy(&all).trim().to_owned()
    }

    /// The tail once the agent's stderr reached its end (or after `wait`,
    /// whichever is first).
    pub async fn after_exit(&self, wait: Duration) -> String {
        let handle = self.reader.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(handle) = handle {
            let _ = tokio::time::timeout(wait, handle).await;
        }
        self.now()
    }
}

/// Writes each outgoing JSON-RPC message as one line on the agent's stdin.
pub fn line_sink(stdin: ChildStdin) -> impl Sink<String, Error = io::Error> + Send + 'static {
    futures_util::sink::unfold(stdin, |mut stdin, line: String| async move {
        stdin.write_all(line.as_bytes()).await?;
        stdin.write_all(b"\n").await?;
        stdin.flush().await?;
        Ok::<_, io::Error>(stdin)
    })
}

/// The agent's stdout as JSON lines: empty lines are skipped; a line too
/// long, not UTF-8 or not JSON yields one error and ends the stream.
pub fn line_stream(stdout: ChildStdout) -> impl Stream<Item = io::Result<String>> + Send + 'static {
    futures_util::stream::unfold(Some(BufReader::new(stdout)), |reader| async move {
        let mut reader = reader?;
        loop {
            match next_line(&mut reader, MAX_LINE_BYTES).await {
                None => return None,
                Some(Ok(line)) if line.trim().is_empty() => continue,
                Some(Ok(line)) => return Some((Ok(line), Some(reader))),
                Some(Err(e)) => return Some((Err(e), None)),
            }
        }
    })
}

/// Reads one line of at most `max` bytes (without its newline) and checks
/// it is JSON; `None` at the end of the stream.
async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(reader: &mut R, max: usize) -> Option<io::Result<String>> {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let available = match reader.fill_buf().await {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        if available.is_empty() {
            return if buf.is_empty() { None } else { Some(check(buf)) };
        }
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if buf.len() + take > max {
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the agent wrote a line longer than {max} bytes on stdout"),
            )));
        }
        buf.extend_from_slice(&available[..take]);
        reader.consume(if done { take + 1 } else { take });
        if done {
            return Some(check(buf));
        }
    }
}

/// A line as text, if it is UTF-8 and JSON (or blank).
fn check(mut buf: Vec<u8>) -> io::Result<String> {
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    let text = String::from_utf8(buf)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "the agent wrote a line that is not UTF-8 on stdout"))?;
    if text.trim().is_empty() || serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok() {
        return Ok(text);
    }
    let shown: String = text.chars().take(120).collect();
    Err(io::Error::new(io::ErrorKind::InvalidData, format!("the agent wrote a line that is not JSON on stdout: {shown:?}")))
}

/// Splits a command line into words the way a POSIX shell would for plain
/// words, single and double quotes and backslash escapes (no expansions).
///
/// Errors: an unterminated quote or a trailing backslash.
pub fn split_command(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(format!("unterminated ' in {text:?}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(format!("unterminated \" in {text:?}")),
                        },
                        Some(c) => word.push(c),
                        None => return Err(format!("unterminated \" in {text:?}")),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                None => return Err(format!("trailing \\ in {text:?}")),
            },
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_like_a_shell() {
        assert_eq!(split_command("gemini --experimental-acp").unwrap(), ["gemini", "--experimental-acp"]);
        assert_eq!(split_command(" a  'b c' \"d \\\"e\\\"\" f\\ g ''").unwrap(), ["a", "b c", "d \"e\"", "f g", ""]);
        assert!(split_command("a 'b").is_err());
        assert!(split_command("a \\").is_err());
        assert!(split_command("").unwrap().is_empty());
    }

    #[tokio::test]
    async fn lines_are_bounded_and_must_be_json() {
        let input: &[u8] = b"{\"a\":1}\r\n\n[2]\nnot json\n";
        let mut r = tokio::io::BufReader::new(input);
        assert_eq!(next_line(&mut r, 100).await.unwrap().unwrap(), "{\"a\":1}");
        assert_eq!(next_line(&mut r, 100).await.unwrap().unwrap(), "");
        assert_eq!(next_line(&mut r, 100).await.unwrap().unwrap(), "[2]");
        let e = next_line(&mut r, 100).await.unwrap().unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
        assert!(next_line(&mut r, 100).await.is_none());

        let long = vec![b'1'; 300];
        let mut r = tokio::io::BufReader::with_capacity(16, &long[..]);
        let e = next_line(&mut r, 100).await.unwrap().unwrap_err();
        assert!(e.to_string().contains("longer than 100"), "{e}");
    }
}
