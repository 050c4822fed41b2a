//! The users swarm option: a users directory (Sessions page, "Whose it is,
//! and what it is charged to" and "Grants") and who each simulated client
//! signs in as.
//!
//! About half the seeds run a host with a directory: persons with
//! memberships (one primary; one with several; one whose memberships do
//! not resolve to one place), a guest, an administrator, two plugins (a
//! member and a guest) and the host's own token, so some connections are
//! `root:sim`. Each client is given one [`Signer`] for the whole run, or
//! none (it never signs in and is refused everything but the handshake).
//! The draws come from a stream of their own, so switching this option on
//! shifts no other option of the seed.

use std::fmt;

use ahpd_core::grants::{token_hash, Membership, Plugin, Role, User, UsersDirectory};

use crate::rng::{SimRng, Stream};

/// The host's own token in the simulated data dir.
pub const HOST_TOKEN: &str = "sim-host-token";

/// What kind of principal a signer is (the grants table's rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A person with the `member` role.
    Member,
    /// A member who may delete anybody's session.
    Administrator,
    /// A person with the `guest` role (`session:read` only).
    Guest,
    /// A plugin with the `member` role (records no scope).
    PluginMember,
    /// A plugin with the `guest` role.
    PluginGuest,
    /// This host itself (`root:<host>`): every grant, no scope.
    Root,
}

/// Who one client signs in as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    /// The token it presents to `authenticate`.
    pub token: String,
    /// The owner string the host must record for it (`user:<id>`,
    /// `plugin:<name>`, `root:sim`).
    pub owner: String,
    /// Its kind.
    pub kind: Kind,
    /// Its memberships (persons only).
    pub memberships: Vec<Membership>,
}

impl Signer {
    /// Whether it holds the write group (every operation but the reads).
    pub fn writes(&self) -> bool {
        !matches!(self.kind, Kind::Guest | Kind::PluginGuest)
    }

    /// Whether it may delete anybody's session.
    pub fn administrator(&self) -> bool {
        matches!(self.kind, Kind::Administrator | Kind::Root)
    }

    /// The scope a session it makes is charged to when it names `asked`
    /// (the `scope` config key) or none: `Ok(None)` records no scope,
    /// `Err(())` is a create the host must refuse. Sessions page: "taken
    /// from the scope key or from the person's primary membership when the
    /// session names none. A principal whose memberships would not resolve
    /// to one place has nothing to charge ... a root connection and an
    /// automation are all work nobody owns".
    pub fn scope_for(&self, asked: Option<&str>) -> Result<Option<String>, ()> {
        if !matches!(self.kind, Kind::Member | Kind::Administrator | Kind::Guest) {
            return Ok(None);
        }
        if let Some(asked) = asked {
            return self.memberships.iter().find(|m| m.scope() == asked).map(|m| Some(m.scope())).ok_or(());
        }
        let primaries: Vec<&Membership> = self.memberships.iter().filter(|m| m.primary).collect();
        match (primaries.as_slice(), self.memberships.as_slice()) {
            ([one], _) => Ok(Some(one.scope())),
            ([], [only]) => Ok(Some(only.scope())),
            ([], []) => Ok(None),
            _ => Err(()),
        }
    }
}

/// The users directory of a seed and the signer of each client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cast {
    /// The directory the host is configured with.
    pub directory: UsersDirectory,
    /// Every principal the directory (and the host token) offers.
    pub signers: Vec<Signer>,
    /// Each client's signer, by client index (`None`: never signs in).
    pub of_client: Vec<Option<usize>>,
}

fn membership(team: &str, project: &str, primary: bool) -> Membership {
    Membership { team: team.to_owned(), project: project.to_owned(), primary }
}

fn person(id: &str, role: Role, administrator: bool, memberships: Vec<Membership>) -> (User, Signer) {
    let token = format!("token-{id}");
    let kind = match (role, administrator) {
        (Role::Guest, _) => Kind::Guest,
        (Role::Member, true) => Kind::Administrator,
        (Role::Member, false) => Kind::Member,
    };
    let user = User { id: id.to_owned(), token_sha256: token_hash(&token), role, administrator, memberships: memberships.clone() };
    (user, Signer { token, owner: format!("user:{id}"), kind, memberships })
}

impl Cast {
    /// The cast of `seed` with `clients` clients, or `None` (a host with no
    /// users directory) for about half the seeds.
    pub fn draw(seed: u64, clients: usize) -> Option<Cast> {
        // Its own stream: the options stream, re-seeded.
        let mut rng = SimRng::new(seed ^ 0x5553_4552_5321_0000, Stream::Options);
        if !rng.chance(0.5) {
            return None;
        }
        let people = [
            person("ann", Role::Member, false, vec![membership("core", "ahpd", true), membership("core", "web", false)]),
            person("bob", Role::Member, false, vec![membership("ops", "infra", false)]),
            // Two memberships and no primary: nothing to charge by default.
            person("cat", Role::Member, false, vec![membership("core", "ahpd", false), membership("ops", "infra", false)]),
            person("dee", Role::Member, true, vec![membership("ops", "infra", true)]),
            person("gus", Role::Guest, false, vec![membership("core", "ahpd", true)]),
        ];
        let mut directory = UsersDirectory::default();
        let mut signers = Vec::new();
        for (user, signer) in people {
            directory.users.push(user);
            signers.push(signer);
        }
        for (name, role, kind) in [("pm", Role::Member, Kind::PluginMember), ("pg", Role::Guest, Kind::PluginGuest)] {
            let token = format!("plugin-{name}");
            directory.plugins.push(Plugin { name: name.to_owned(), token_sha256: token_hash(&token), role });
            signers.push(Signer { token, owner: format!("plugin:{name}"), kind, memberships: Vec::new() });
        }
        signers.push(Signer { token: HOST_TOKEN.to_owned(), owner: "root:sim".to_owned(), kind: Kind::Root, memberships: Vec::new() });
        // Writers are the common case, so that sessions exist for the
        // others to be refused on.
        let weights = [6, 3, 2, 2, 3, 1, 1, 2];
        let of_client = (0..clients)
            .map(|_| if rng.chance(0.15) { None } else { Some(rng.weighted(&weights)) })
            .collect();
        Some(Cast { directory, signers, of_client })
    }

    /// The signer of client `index`, if it signs in.
    pub fn signer_of(&self, index: usize) -> Option<&Signer> {
        self.of_client.get(index).copied().flatten().and_then(|i| self.signers.get(i))
    }
}

impl fmt::Display for Cast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = (0..self.of_client.len()).map(|i| self.signer_of(i).map_or("-".to_owned(), |s| s.owner.clone())).collect();
        write!(f, "users: {}", names.join(","))
    }
}

/// Client `index` of a seed, with its signer when the host has a users
/// directory.
pub fn client(index: usize, options: &crate::Options) -> crate::clients::Client {
    let mut client = crate::clients::Client::new(index);
    if let Some(cast) = &options.users {
        client.users_host = true;
        client.signer = cast.signer_of(index).cloned();
    }
    client
}

/// The users part of a client's workload (about one think in eight): a
/// `createSession` naming a scope (one of its memberships, or one that is
/// not), `listSessions` of its own sessions and with a wrong filter
/// value, a draft, and a config change no client may make. Everything
/// else of the grants table (rename, mark, send, cancel, tool answers,
/// chats, fetchTurns, subscribe, dispose) is the common workload, sent by
/// whoever the client is. `None`: the common workload decides.
pub fn think(client: &mut crate::clients::Client, rng: &mut SimRng, session: &str, chat: &str) -> Option<Vec<crate::clients::ClientOut>> {
    use crate::clients::ReqKind;
    use serde_json::json;
    if !rng.chance(0.12) {
        return None;
    }
    let root = ahp_types::ROOT_RESOURCE_URI;
    let out = match rng.below(5) {
        0 => {
            let scopes: Vec<String> = client.signer.iter().flat_map(|s| s.memberships.iter().map(Membership::scope)).collect();
            let scope = match rng.pick(&scopes) {
                Some(s) if rng.chance(0.8) => s.clone(),
                _ => "nowhere/none".to_owned(),
            };
            let params = json!({"channel": session, "provider": "echo", "config": {"scope": scope}});
            client.send_request("createSession", params, ReqKind::Create { uri: session.to_owned() })
        }
        1 => {
            let params = json!({"channel": root, "_meta": {"ahpd.owner": "me"}});
            let empty = !client.users_host;
            client.send_request("listSessions", params, ReqKind::Mine { empty })
        }
        2 => {
            // Not signed in on a users host: refused before the params are
            // read for meaning (-32009); otherwise a wrong param (-32602).
            let code = if client.may_read() { -32602 } else { -32009 };
            let params = json!({"channel": root, "_meta": {"ahpd.owner": "you"}});
            client.send_request("listSessions", params, ReqKind::Expect { code })
        }
        3 => client.dispatch(chat, json!({"type": "chat/draftChanged", "draft": {"text": "draft", "origin": {"kind": "user"}}})),
        _ => client.dispatch(session, json!({"type": "session/configChanged", "config": {"scope": "ops/infra"}})),
    };
    Some(vec![out])
}
