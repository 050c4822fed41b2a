//! The ACP agents an operator configures: `--agent NAME='command args'`
//! (repeatable) and the config file's `[agents]` table, where each entry is
//! either `NAME = "command args"` or a table:
//!
//! ```toml
//! [agents.gemini]
//! command = "gemini"                 # the program; with no `args`, the whole command line
//! args = ["--experimental-acp"]      # optional
//! display_name = "Gemini CLI"        # optional (default: the name)
//! description = "Google's agent"     # optional
//! can_resume = true                  # optional (default true): sessions may sleep and
//!                                    # resume with session/load
//! startup_timeout_seconds = 30       # optional: initialize / session/new / session/load
//! host_tools = true                  # optional (default true): its chats get the host's
//!                                    # MCP server (send_message, schedule_wakeup, ...)
//! ```
//!
//! A flag replaces the file's entry of the same name. Names are 1 to 64 of
//! `A-Z a-z 0-9 _ . -`, starting with a letter; `echo` is the built-in
//! agent's and cannot be configured.

use std::collections::BTreeMap;

use crate::exec::acp::process::split_command;
use crate::exec::acp::{AgentConfig, DEFAULT_STARTUP_TIMEOUT_MS};

/// Keys an `[agents.NAME]` table may hold.
const KEYS: [&str; 7] = ["command", "args", "display_name", "description", "can_resume", "startup_timeout_seconds", "host_tools"];

/// Checks an agent's name.
///
/// Errors: empty, too long, a character outside the set, or `echo`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !ok {
        return Err(format!("agent name {name:?}: use 1 to 64 of A-Z a-z 0-9 _ . - starting with a letter"));
    }
    if name == "echo" {
        return Err("agent name \"echo\" is the built-in agent's; pick another name".to_owned());
    }
    Ok(())
}

/// An agent from a command line, with every other setting at its default.
fn from_command_line(name: &str, line: &str) -> Result<AgentConfig, String> {
    let mut words = split_command(line).map_err(|e| format!("agent {name}: {e}"))?.into_iter();
    let Some(program) = words.next().filter(|p| !p.is_empty()) else {
        return Err(format!("agent {name}: the command is empty"));
    };
    Ok(AgentConfig {
        name: name.to_owned(),
        display_name: name.to_owned(),
        description: format!("ACP agent ({line})"),
        program,
        args: words.collect(),
        can_resume: true,
        startup_timeout_ms: DEFAULT_STARTUP_TIMEOUT_MS,
        host_tools: true,
    })
}

/// Parses one `--agent NAME='command args'`.
///
/// Errors: no `=`, a bad name, an empty or badly quoted command.
pub fn from_flag(text: &str) -> Result<AgentConfig, String> {
    let Some((name, line)) = text.split_once('=') else {
        return Err(format!("--agent {text:?}: expected NAME='command args'"));
    };
    let name = name.trim();
    check_name(name).map_err(|e| format!("--agent: {e}"))?;
    from_command_line(name, line).map_err(|e| format!("--agent: {e}"))
}

/// Reads one `[agents]` entry: a command string or a table.
///
/// Errors: a bad name, an unknown key, a value of the wrong type, a
/// timeout that is not a positive number of seconds, an empty command.
pub fn from_file(name: &str, value: &toml::Value) -> Result<AgentConfig, String> {
    check_name(name).map_err(|e| format!("[agents]: {e}"))?;
    let table = match value {
        toml::Value::String(line) => return from_command_line(name, line).map_err(|e| format!("[agents]: {e}")),
        toml::Value::Table(t) => t,
        _ => return Err(format!("[agents]: {name} must be a command string or a table")),
    };
    let at = |m: String| format!("[agents.{name}]: {m}");
    if let Some(key) = table.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(at(format!("unknown key {key:?} (known: {})", KEYS.join(", "))));
    }
    let string = |key: &str| -> Result<Option<String>, String> {
        match table.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(at(format!("{key} must be a string"))),
        }
    };
    let Some(command) = string("command")? else {
        return Err(at("command is missing".to_owned()));
    };
    let mut agent = match table.get("args") {
        None => from_command_line(name, &command).map_err(at)?,
        Some(toml::Value::Array(items)) => {
            let mut args = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    toml::Value::String(s) => args.push(s.clone()),
                    _ => return Err(at("args must be a list of strings".to_owned())),
                }
            }
            if command.trim().is_empty() {
                return Err(at("command is empty".to_owned()));
            }
            let mut agent = from_command_line(name, "x").map_err(at)?;
            agent.description = format!("ACP agent ({command})");
            agent.program = command.clone();
            agent.args = args;
            agent
        }
        Some(_) => return Err(at("args must be a list of strings".to_owned())),
    };
    if let Some(d) = string("display_name")? {
        agent.display_name = d;
    }
    if let Some(d) = string("description")? {
        agent.description = d;
    }
    match table.get("can_resume") {
        None => {}
        Some(toml::Value::Boolean(b)) => agent.can_resume = *b,
        Some(_) => return Err(at("can_resume must be true or false".to_owned())),
    }
    match table.get("host_tools") {
        None => {}
        Some(toml::Value::Boolean(b)) => agent.host_tools = *b,
        Some(_) => return Err(at("host_tools must be true or false".to_owned())),
    }
    let seconds = match table.get("startup_timeout_seconds") {
        None => None,
        Some(toml::Value::Integer(i)) => Some(*i as f64),
        Some(toml::Value::Float(f)) => Some(*f),
        Some(_) => return Err(at("startup_timeout_seconds must be a number".to_owned())),
    };
    if let Some(s) = seconds {
        if !(s.is_finite() && s > 0.0 && s <= 86_400.0) {
            return Err(at(format!("startup_timeout_seconds = {s}: use a number of seconds above 0, at most 86400")));
        }
        agent.startup_timeout_ms = (s * 1000.0).round().max(1.0) as u64;
    }
    Ok(agent)
}

/// The agents to run, in name order: the file's entries, each replaced by a
/// flag of the same name.
///
/// Errors: the first entry or flag that does not parse.
pub fn settle(file: &BTreeMap<String, toml::Value>, flags: &[String]) -> Result<Vec<AgentConfig>, String> {
    let mut agents: BTreeMap<String, AgentConfig> = BTreeMap::new();
    for (name, value) in file {
        agents.insert(name.clone(), from_file(name, value)?);
    }
    for flag in flags {
        let agent = from_flag(flag)?;
        agents.insert(agent.name.clone(), agent);
    }
    Ok(agents.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> toml::Value {
        toml::from_str::<toml::Table>(text).map(toml::Value::Table).unwrap_or(toml::Value::Boolean(false))
    }

    #[test]
    fn flags_and_file_entries() {
        let a = from_flag("gemini=gemini --experimental-acp").unwrap();
        assert_eq!((a.program.as_str(), a.args.as_slice()), ("gemini", &["--experimental-acp".to_owned()][..]));
        assert!(a.can_resume);
        assert!(from_flag("gemini").is_err());
        assert!(from_flag("echo=x").unwrap_err().contains("built-in"));
        assert!(from_flag("g=").unwrap_err().contains("empty"));
        assert!(from_flag("bad name=x").is_err());

        let t = value("command = \"/bin/agent\"\nargs = [\"--a b\"]\ndisplay_name = \"A\"\ncan_resume = false\nstartup_timeout_seconds = 1.5\n");
        let a = from_file("a", &t).unwrap();
        assert_eq!(a.program, "/bin/agent");
        assert_eq!(a.args, ["--a b"]);
        assert_eq!(a.display_name, "A");
        assert!(!a.can_resume);
        assert_eq!(a.startup_timeout_ms, 1500);
        assert!(a.host_tools, "the host's tools are on unless turned off");
        assert!(!from_file("a", &value("command = \"x\"\nhost_tools = false\n")).unwrap().host_tools);
        assert!(from_file("a", &value("command = \"x\"\nhost_tools = 1\n")).unwrap_err().contains("host_tools"));
        assert!(from_file("a", &value("command = \"x\"\nflavour = 1\n")).unwrap_err().contains("flavour"));
        assert!(from_file("a", &value("args = []\n")).unwrap_err().contains("command is missing"));
        assert!(from_file("a", &value("command = \"x\"\nstartup_timeout_seconds = 0\n")).is_err());
        assert!(from_file("a", &toml::Value::String("x y".to_owned())).is_ok());

        let mut file = BTreeMap::new();
        file.insert("b".to_owned(), toml::Value::String("from-file".to_owned()));
        file.insert("a".to_owned(), toml::Value::String("a-file".to_owned()));
        let all = settle(&file, &["b=from-flag x".to_owned()]).unwrap();
        assert_eq!(all.iter().map(|a| a.program.as_str()).collect::<Vec<_>>(), ["a-file", "from-flag"]);
    }
}
