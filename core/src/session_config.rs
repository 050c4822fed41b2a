//! The session config table this host answers (Sessions page,
//! "Configuration keys"): which properties `resolveSessionConfig` offers
//! and in what order, their defaults, the shape each value is taken in,
//! what `sessionConfigCompletions` answers, and which changes are refused;
//! and how a tree is cut from a session's values (`plan_for`,
//! `settle_base`, with the names `crate::worktree` checks and chooses).
//!
//! The schema is emitted through an order-preserving JSON map, because
//! `ahp_types::state::SessionConfigSchema` keeps its properties in a
//! `HashMap` (docs/BUILD-NOTES.md): serialized through that struct, the order a
//! client draws the controls in would change every run.

use ahp_types::commands::SessionConfigValueItem;
use ahp_types::state::SessionConfigPropertySchema as Prop;
use serde_json::{Map, Value};

use crate::git::RepoFacts;
use crate::grants::Membership;

/// `isolation`: `folder` or `worktree`.
pub const ISOLATION: &str = "isolation";
/// `branch`: the base to work from.
pub const BRANCH: &str = "branch";
/// `worktreeBranchPrefix`: prepended to the branch a worktree creates.
pub const BRANCH_PREFIX: &str = "worktreeBranchPrefix";
/// `worktreeIncludeFiles`: git-ignored files copied into a worktree.
pub const INCLUDE_FILES: &str = "worktreeIncludeFiles";
/// `worktreeSymlinkFolders`: git-ignored folders linked into a worktree.
pub const SYMLINK_FOLDERS: &str = "worktreeSymlinkFolders";
/// `worktreeCreateNewBranch`: make a branch for the worktree.
pub const CREATE_NEW_BRANCH: &str = "worktreeCreateNewBranch";
/// `worktreeBranchTrack`: the new branch tracks the base's upstream.
pub const BRANCH_TRACK: &str = "worktreeBranchTrack";
/// `scope`: which membership the work is charged to.
pub const SCOPE: &str = "scope";
/// `computer`: a computer plugin's key (composed first when contributed).
pub const COMPUTER: &str = "computer";

/// Every key of the table after the backend's, in the page's order.
pub const TABLE_AFTER_BACKEND: [&str; 7] =
    [BRANCH, BRANCH_PREFIX, INCLUDE_FILES, SYMLINK_FOLDERS, CREATE_NEW_BRANCH, BRANCH_TRACK, SCOPE];

/// Whether `key` is one of this host's table keys (all `sessionMutable:
/// false`, and never a backend's).
pub fn is_table_key(key: &str) -> bool {
    key == ISOLATION || TABLE_AFTER_BACKEND.contains(&key)
}

/// A schema whose properties keep the order they were composed in.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OrderedSchema {
    /// The properties, in the order a client draws them.
    pub properties: Vec<(String, Prop)>,
}

impl OrderedSchema {
    /// The schema as JSON (`{type: "object", properties: {...}}`) with the
    /// properties in order.
    pub fn to_json(&self) -> Value {
        let mut props = Map::new();
        for (key, prop) in &self.properties {
            props.insert(key.clone(), serde_json::to_value(prop).unwrap_or(Value::Null));
        }
        let mut schema = Map::new();
        schema.insert("type".to_owned(), Value::String("object".to_owned()));
        schema.insert("properties".to_owned(), Value::Object(props));
        Value::Object(schema)
    }

    /// The property named `key`, if offered.
    pub fn get(&self, key: &str) -> Option<&Prop> {
        self.properties.iter().find(|(k, _)| k == key).map(|(_, p)| p)
    }
}

fn prop(kind: &str, title: &str, description: &str, default: Value) -> Prop {
    Prop {
        r#type: kind.to_owned(),
        title: title.to_owned(),
        description: Some(description.to_owned()),
        default: Some(default),
        r#enum: None,
        enum_labels: None,
        enum_descriptions: None,
        read_only: None,
        items: None,
        min_items: None,
        max_items: None,
        properties: None,
        required: None,
        additional_properties: None,
        enum_dynamic: None,
        session_mutable: Some(false),
    }
}

/// A plain JSON-schema property of type `kind` titled `title`, every other
/// field absent (ahp-types gives `ConfigPropertySchema` no `Default`); the
/// root config's and a list's item schema start from it.
pub fn plain_property(kind: &str, title: &str) -> ahp_types::state::ConfigPropertySchema {
    ahp_types::state::ConfigPropertySchema {
        r#type: kind.to_owned(),
        title: title.to_owned(),
        description: None,
        default: None,
        r#enum: None,
        enum_labels: None,
        enum_descriptions: None,
        read_only: None,
        items: None,
        min_items: None,
        max_items: None,
        properties: None,
        required: None,
        additional_properties: None,
    }
}

fn string_list_prop(title: &str, description: &str) -> Prop {
    let mut p = prop("array", title, description, Value::Array(Vec::new()));
    p.items = Some(plain_property("string", "Pattern"));
    p
}

/// The isolations a folder is offered: both in a repository, `folder`
/// alone (read-only) outside one.
fn isolation_prop(facts: &RepoFacts) -> Prop {
    let mut p = prop("string", "Isolation", "Work in the folder itself, or in a git worktree of its own.", Value::String("folder".into()));
    if facts.is_repo() {
        p.r#enum = Some(vec![Value::String("folder".into()), Value::String("worktree".into())]);
        p.enum_labels = Some(vec!["Folder".into(), "Worktree".into()]);
    } else {
        p.r#enum = Some(vec![Value::String("folder".into())]);
        p.enum_labels = Some(vec!["Folder".into()]);
        p.read_only = Some(true);
    }
    p
}

/// Isolation as chosen: `true` for a worktree.
fn wants_worktree(asked: &Map<String, Value>, facts: &RepoFacts) -> bool {
    facts.is_repo() && asked.get(ISOLATION).and_then(Value::as_str) == Some("worktree")
}

/// The default `branch` (Sessions page): for a folder, the branch checked
/// out; for a worktree, the repository's default branch (its remote's
/// HEAD), else the one checked out. Never a hard-coded `main`; `None` on a
/// detached or unborn HEAD with no remote default.
pub fn default_branch(facts: &RepoFacts, worktree: bool) -> Option<String> {
    if worktree {
        facts.default_branch.clone().or_else(|| facts.current_branch.clone())
    } else {
        facts.current_branch.clone()
    }
}

/// The scope a person is charged to by default: their primary membership,
/// else their only one.
pub fn primary_scope(memberships: &[Membership]) -> Option<String> {
    let primaries: Vec<&Membership> = memberships.iter().filter(|m| m.primary).collect();
    match (primaries.as_slice(), memberships) {
        ([one], _) => Some(one.scope()),
        ([], [only]) => Some(only.scope()),
        _ => None,
    }
}

/// Composes the schema in the order VS Code's agent host does (Sessions
/// page, "Configuration keys"): `isolation` first, then `branch` …
/// `worktreeBranchTrack`, then `scope` when there is a person to ask
/// (`memberships` is `Some`). Outside a repository only `isolation`
/// (read-only `folder`) and `scope` are offered. No backend of this host
/// declares properties of its own and no computer plugin contributes
/// `computer`, so the page's places for those (after `isolation`, and
/// before it) stay empty.
pub fn compose(facts: &RepoFacts, memberships: Option<&[Membership]>, asked: &Map<String, Value>) -> OrderedSchema {
    let mut out = Vec::new();
    out.push((ISOLATION.to_owned(), isolation_prop(facts)));
    if facts.is_repo() {
        let worktree = wants_worktree(asked, facts);
        let seed = default_branch(facts, worktree);
        // With no branch to seed (an unborn or detached HEAD and no remote
        // default) the property has no default and no value.
        let mut branch = prop("string", "Branch", "The base to work from.", Value::Null);
        branch.default = seed.clone().map(Value::String);
        branch.r#enum = seed.map(|s| vec![Value::String(s)]);
        branch.enum_dynamic = Some(true);
        out.push((BRANCH.to_owned(), branch));
        out.push((BRANCH_PREFIX.to_owned(), prop("string", "Branch prefix", "Prepended to the branch the worktree creates.", Value::String(String::new()))));
        out.push((INCLUDE_FILES.to_owned(), string_list_prop("Include files", "Git-ignored files to copy into a worktree, in .gitignore syntax (e.g. .env).")));
        out.push((SYMLINK_FOLDERS.to_owned(), string_list_prop("Symlink folders", "Git-ignored folders to link into a worktree, in .gitignore syntax (e.g. node_modules).")));
        out.push((CREATE_NEW_BRANCH.to_owned(), prop("boolean", "Create a new branch", "Make a branch for the worktree, or check out the chosen one as it is.", Value::Bool(true))));
        out.push((BRANCH_TRACK.to_owned(), prop("boolean", "Track the upstream", "Whether the branch the worktree creates tracks the upstream of the one it started from.", Value::Bool(false))));
    }
    if let Some(memberships) = memberships {
        let scopes: Vec<String> = memberships.iter().map(Membership::scope).collect();
        out.push((SCOPE.to_owned(), scope_prop(scopes, primary_scope(memberships))));
    }
    OrderedSchema { properties: out }
}

/// The `scope` property: the scopes a person may charge to, `default` first
/// chosen.
fn scope_prop(scopes: Vec<String>, default: Option<String>) -> Prop {
    let mut scope = prop("string", "Scope", "Which team and project the session charges its work to.", default.map(Value::String).unwrap_or(Value::Null));
    scope.r#enum = Some(scopes.into_iter().map(Value::String).collect());
    scope.enum_dynamic = Some(true);
    scope
}

/// What a session's folder was offered when the session was made (Sessions
/// page, "Configuration keys"): whether it is in a git repository, and the
/// branch the `branch` key defaulted to for the isolation chosen. Kept in
/// the session's record so the config it reports, after a restart too, is
/// composed again from what its folder was offered then.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOffer {
    /// The folder was in a git repository: both isolations were offered.
    pub repo: bool,
    /// The default of `branch`; `None` outside a repository, or on a
    /// detached or unborn HEAD with no remote default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// `createSession`'s config, settled against the folder's repository
/// `facts` before anything else happens (Sessions page, "The life of a
/// session": "The config is settled, then the policy store is asked").
/// Returns the values the session keeps and what its folder was offered.
///
/// A table key is kept only when it was taken in its property's shape
/// ([`resolve_values`]): a worktree asked for outside a repository, a
/// branch the repository does not have, a list with a non-string entry
/// are left out so the default applies. A worktree session keeps the
/// branch it defaulted to, so its tree is cut from the branch the config
/// named when it was made. `scope` was settled by the caller and is kept
/// as sent; the backend's keys are kept as sent.
pub fn settle(asked: &Map<String, Value>, facts: &RepoFacts, memberships: Option<&[Membership]>) -> (Map<String, Value>, ConfigOffer) {
    let schema = compose(facts, memberships, asked);
    let resolved = resolve_values(&schema, facts, asked);
    let mut kept = Map::new();
    for (key, v) in take_at_creation(asked) {
        let taken = key == SCOPE || !is_table_key(&key) || resolved.get(&key) == Some(&v);
        if taken && key != COMPUTER {
            kept.insert(key, v);
        }
    }
    let worktree = wants_worktree(&kept, facts);
    let offer = ConfigOffer { repo: facts.is_repo(), branch: default_branch(facts, worktree) };
    if worktree && !kept.contains_key(BRANCH) {
        if let Some(b) = &offer.branch {
            kept.insert(BRANCH.to_owned(), Value::String(b.clone()));
        }
    }
    (kept, offer)
}

/// The `config` a session reports in its state (`SessionState.config`,
/// `{schema, values}`), composed from what its folder was `offer`ed, the
/// scope it is charged to and the values it keeps. The same for a session just made and for one read back after a
/// restart (Sessions page, "Configuration keys": "A session read back
/// after a restart has these keys resolved as a created session's are").
/// The schema's properties come in the page's order (see [`OrderedSchema`]).
pub fn reported(offer: &ConfigOffer, scope: Option<&str>, values: &Map<String, Value>) -> Value {
    let mut branches: Vec<String> = offer.branch.iter().cloned().collect();
    if let Some(b) = values.get(BRANCH).and_then(Value::as_str) {
        branches.push(b.to_owned());
    }
    let facts = RepoFacts {
        root: offer.repo.then(String::new),
        current_branch: offer.branch.clone(),
        default_branch: offer.branch.clone(),
        branches,
        not_directories: Vec::new(),
        git_error: None,
    };
    let mut schema = compose(&facts, None, values);
    if let Some(s) = scope {
        schema.properties.push((SCOPE.to_owned(), scope_prop(vec![s.to_owned()], Some(s.to_owned()))));
    }
    // Only what the schema offers: a key the backend took without declaring
    // it is the backend's, and is not read back after a restart either.
    let mut values = resolve_values(&schema, &facts, values);
    values.retain(|k, _| schema.get(k).is_some());
    let mut out = Map::new();
    out.insert("schema".to_owned(), schema.to_json());
    out.insert("values".to_owned(), Value::Object(values));
    Value::Object(out)
}

fn string_list(v: &Value) -> Option<Vec<String>> {
    v.as_array()?.iter().map(|e| e.as_str().map(str::to_owned)).collect()
}

/// The values for `schema`, each taken from `asked` only in its property's
/// shape (Sessions page): isolation only as offered, the branch only as one
/// of the repository's branches, single values as strings or booleans, the
/// two pattern keys only as lists whose every entry is a string. Anything
/// else leaves the default. Keys `asked` names that the schema does not
/// offer are kept only when they are not table keys (a backend takes some
/// it does not declare).
pub fn resolve_values(schema: &OrderedSchema, facts: &RepoFacts, asked: &Map<String, Value>) -> Map<String, Value> {
    let mut values = Map::new();
    for (key, p) in &schema.properties {
        let given = asked.get(key);
        let taken = match key.as_str() {
            ISOLATION => given.filter(|v| p.r#enum.as_ref().is_some_and(|e| e.contains(v))).cloned(),
            BRANCH => given.filter(|v| v.as_str().is_some_and(|b| facts.branches.iter().any(|x| x == b))).cloned(),
            // A single value is taken as a string; a prefix git would
            // refuse fails the first send clearly, before git is asked.
            BRANCH_PREFIX => given.filter(|v| v.is_string()).cloned(),
            INCLUDE_FILES | SYMLINK_FOLDERS => given.and_then(string_list).map(|l| Value::Array(l.into_iter().map(Value::String).collect())),
            CREATE_NEW_BRANCH | BRANCH_TRACK => given.filter(|v| v.is_boolean()).cloned(),
            SCOPE => given.filter(|v| p.r#enum.as_ref().is_some_and(|e| e.contains(v))).cloned(),
            // Every property composed is one of the table's.
            _ => None,
        };
        // A property with no default (a branch with nothing to seed it)
        // has no value unless one was taken.
        if let Some(v) = taken.or_else(|| p.default.clone().filter(|d| !d.is_null())) {
            values.insert(key.clone(), v);
        }
    }
    for (key, v) in asked {
        if !values.contains_key(key) && !is_table_key(key) && key != COMPUTER {
            values.insert(key.clone(), v.clone());
        }
    }
    values
}

/// The config `createSession` stores: the table keys the client sent in
/// their shapes (isolation `folder`/`worktree`, strings, booleans, lists of
/// strings; anything else is left out so the default applies), and the
/// backend's keys as sent. Isolation outside a repository and the branch's
/// existence are settled at the first send, when git is asked.
pub fn take_at_creation(asked: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, v) in asked {
        let keep = match key.as_str() {
            ISOLATION => matches!(v.as_str(), Some("folder" | "worktree")),
            BRANCH => v.as_str().is_some_and(|b| crate::worktree::check_branch_name(b).is_ok()),
            BRANCH_PREFIX | SCOPE => v.is_string(),
            INCLUDE_FILES | SYMLINK_FOLDERS => string_list(v).is_some(),
            CREATE_NEW_BRANCH | BRANCH_TRACK => v.is_boolean(),
            _ => true,
        };
        if keep {
            out.insert(key.clone(), v.clone());
        }
    }
    out
}

/// A session read back from the store (Sessions page, last paragraph of
/// "Configuration keys"): a stored string for `worktreeIncludeFiles` is
/// read as the list it spells (entries split on commas and newlines), and a
/// value whose key the table does not offer (nor any backend: none
/// declares keys of its own) is left out so the default applies. Returns
/// the values and the keys left out.
pub fn restore_values(stored: &Map<String, Value>) -> (Map<String, Value>, Vec<String>) {
    let mut out = Map::new();
    let mut dropped = Vec::new();
    for (key, v) in stored {
        if key == INCLUDE_FILES {
            if let Some(s) = v.as_str() {
                let list = s.split([',', '\n']).map(str::trim).filter(|e| !e.is_empty()).map(|e| Value::String(e.to_owned())).collect();
                out.insert(key.clone(), Value::Array(list));
                continue;
            }
        }
        // The awareness keys are the host's own (spec 004: the session's
        // tier): a restart must not drop a session to the default tier.
        if is_table_key(key) || crate::awareness::is_host_key(key) {
            out.insert(key.clone(), v.clone());
        } else {
            dropped.push(key.clone());
        }
    }
    (out, dropped)
}

/// Why a `session/configChanged` on a started session is refused, if it
/// is: every table key is `sessionMutable: false`, and so is every other
/// key (no backend of this host declares one `sessionMutable: true`). The
/// first key named is the one the reason cites; `None` for an empty
/// change.
pub fn refused_change(change: &Map<String, Value>) -> Option<String> {
    change.keys().next().map(|key| {
        format!("{} is sessionMutable: false: it is decided once, when the session is made", crate::ids::printable(key))
    })
}

/// Most items `sessionConfigCompletions` answers.
pub const COMPLETIONS_MAX: usize = 100;

/// `sessionConfigCompletions` for `property`: for `branch`, the seed first
/// (when it matches) and then every branch containing `query`, at most
/// [`COMPLETIONS_MAX`]; for `scope`, the person's memberships containing
/// `query` (none when there is no person). `None` for a property this host
/// does not complete.
pub fn completions(
    property: &str,
    query: &str,
    facts: &RepoFacts,
    memberships: Option<&[Membership]>,
    asked: &Map<String, Value>,
) -> Option<Vec<SessionConfigValueItem>> {
    let q = query.to_lowercase();
    let hit = |s: &str| q.is_empty() || s.to_lowercase().contains(&q);
    match property {
        BRANCH => {
            let seed = default_branch(facts, wants_worktree(asked, facts));
            let mut items = Vec::new();
            if let Some(s) = seed.as_ref().filter(|s| hit(s)) {
                items.push(SessionConfigValueItem { value: s.clone(), label: s.clone(), description: Some("default".to_owned()) });
            }
            for b in facts.branches.iter().filter(|b| Some(*b) != seed.as_ref() && hit(b)) {
                if items.len() >= COMPLETIONS_MAX {
                    break;
                }
                items.push(SessionConfigValueItem { value: b.clone(), label: b.clone(), description: None });
            }
            Some(items)
        }
        SCOPE => Some(
            memberships
                .unwrap_or(&[])
                .iter()
                .filter(|m| hit(&m.scope()))
                .map(|m| SessionConfigValueItem {
                    value: m.scope(),
                    label: m.scope(),
                    description: m.primary.then(|| "primary".to_owned()),
                })
                .collect(),
        ),
        _ => None,
    }
}

/// The worktree a session's values ask for, or `None` for a folder
/// session.
pub fn worktree_asked(values: &Map<String, Value>) -> bool {
    values.get(ISOLATION).and_then(Value::as_str) == Some("worktree")
}

/// A string value, or `default`.
pub fn string_value(values: &Map<String, Value>, key: &str, default: &str) -> String {
    values.get(key).and_then(Value::as_str).unwrap_or(default).to_owned()
}

/// A boolean value, or `default`.
pub fn bool_value(values: &Map<String, Value>, key: &str, default: bool) -> bool {
    values.get(key).and_then(Value::as_bool).unwrap_or(default)
}

/// A list-of-strings value, or empty.
pub fn list_value(values: &Map<String, Value>, key: &str) -> Vec<String> {
    values.get(key).and_then(string_list).unwrap_or_default()
}

/// How to cut a tree on `new_branch` (already checked) from a session's
/// config `values`: its base branch, the names to try, branch options and
/// patterns. The base is the branch the config names: `settle` keeps the
/// default branch the folder offered when the session was made
/// (`session_config::default_branch`). A config that names none (the folder
/// offered none: a detached or unborn HEAD and no remote default) leaves
/// `base` unset, to be settled from the facts of the folder the tree is
/// cut in ([`settle_base`]) before the plan is sent.
pub fn plan_for(values: &Map<String, Value>, new_branch: &str) -> crate::git::WorktreePlan {
    let base = Some(string_value(values, BRANCH, "")).filter(|b| !b.is_empty());
    let create_new_branch = bool_value(values, CREATE_NEW_BRANCH, true);
    crate::git::WorktreePlan {
        names: crate::worktree::tree_names(create_new_branch, new_branch, base.as_deref()),
        base,
        create_new_branch,
        track: bool_value(values, BRANCH_TRACK, false),
        include_files: list_value(values, INCLUDE_FILES),
        symlink_folders: list_value(values, SYMLINK_FOLDERS),
    }
}

/// Settles the base of a plan whose config names none from the `facts` of
/// the folder the tree is cut in (Sessions page, "Configuration keys": the
/// default `branch` of a worktree is the repository's default branch, else
/// the one checked out; with neither, the commit checked out), and the
/// names to try with it.
pub fn settle_base(plan: &mut crate::git::WorktreePlan, new_branch: &str, facts: &RepoFacts) {
    plan.base = default_branch(facts, true);
    plan.names = crate::worktree::tree_names(plan.create_new_branch, new_branch, plan.base.as_deref());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn repo() -> RepoFacts {
        RepoFacts {
            root: Some("/r".into()),
            current_branch: Some("dev".into()),
            default_branch: Some("trunk".into()),
            branches: vec!["dev".into(), "feature/x".into(), "trunk".into()],
            not_directories: Vec::new(),
            git_error: None,
        }
    }

    #[test]
    fn order_is_the_pages() {
        let m = vec![Membership { team: "t".into(), project: "p".into(), primary: true }];
        let s = compose(&repo(), Some(&m), &Map::new());
        let keys: Vec<&str> = s.properties.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["isolation", "branch", "worktreeBranchPrefix", "worktreeIncludeFiles", "worktreeSymlinkFolders", "worktreeCreateNewBranch", "worktreeBranchTrack", "scope"]);
        let text = s.to_json().to_string();
        assert!(text.find("\"isolation\"") < text.find("\"scope\""));
        assert!(s.properties.iter().filter(|(k, _)| is_table_key(k)).all(|(_, p)| p.session_mutable == Some(false)));
    }

    #[test]
    fn shapes_and_defaults() {
        let f = repo();
        let asked = json!({"isolation": "worktree", "branch": 3, "worktreeIncludeFiles": [".env", 1], "worktreeSymlinkFolders": ["node_modules"], "worktreeCreateNewBranch": "yes"});
        let asked = asked.as_object().cloned().unwrap_or_default();
        let s = compose(&f, None, &asked);
        let v = resolve_values(&s, &f, &asked);
        assert_eq!(v["isolation"], "worktree");
        assert_eq!(v["branch"], "trunk");
        assert_eq!(v["worktreeIncludeFiles"], json!([]));
        assert_eq!(v["worktreeSymlinkFolders"], json!(["node_modules"]));
        assert_eq!(v["worktreeCreateNewBranch"], true);
        assert!(!v.contains_key("scope"));
        let folder = resolve_values(&compose(&f, None, &Map::new()), &f, &Map::new());
        assert_eq!(folder["branch"], "dev");
        let outside = RepoFacts::not_a_repo();
        let s = compose(&outside, None, &asked);
        assert_eq!(s.properties.len(), 1);
        assert_eq!(s.get("isolation").and_then(|p| p.read_only), Some(true));
        assert_eq!(resolve_values(&s, &outside, &asked)["isolation"], "folder");
    }

    #[test]
    fn settled_at_creation_and_reported_from_the_offer() {
        let asked = json!({"isolation": "worktree", "branch": "gone", "worktreeBranchPrefix": "a..b/", "worktreeSymlinkFolders": [1], "model": "m"});
        let asked = asked.as_object().cloned().unwrap_or_default();
        let (kept, offer) = settle(&asked, &repo(), None);
        assert_eq!(offer, ConfigOffer { repo: true, branch: Some("trunk".into()) });
        // The worktree keeps the branch it defaulted to; a prefix is taken
        // as a string (its name is refused at the first send); a list with
        // a number in it is left out; the backend's key is kept as sent.
        assert_eq!(Value::Object(kept.clone()), json!({"isolation": "worktree", "worktreeBranchPrefix": "a..b/", "model": "m", "branch": "trunk"}));
        let config = reported(&offer, Some("web/site"), &kept);
        let keys: Vec<&str> = config["schema"]["properties"].as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
        assert_eq!(keys, ["isolation", "branch", "worktreeBranchPrefix", "worktreeIncludeFiles", "worktreeSymlinkFolders", "worktreeCreateNewBranch", "worktreeBranchTrack", "scope"]);
        assert_eq!(config["values"]["branch"], "trunk");
        assert_eq!(config["values"]["scope"], "web/site");
        assert_eq!(config["values"]["worktreeSymlinkFolders"], json!([]));
        // Outside a repository the worktree asked for is not kept.
        let (kept, offer) = settle(&asked, &RepoFacts::not_a_repo(), None);
        assert!(!kept.contains_key("isolation") && offer == ConfigOffer::default(), "{kept:?}");
        assert_eq!(reported(&offer, None, &kept)["values"]["isolation"], "folder");
    }

    #[test]
    fn stored_values_read_back() {
        let stored = json!({"worktreeIncludeFiles": ".env, .npmrc\n.secret", "gone": 1, "branch": "dev"});
        let (v, dropped) = restore_values(stored.as_object().unwrap_or(&Map::new()));
        assert_eq!(v["worktreeIncludeFiles"], json!([".env", ".npmrc", ".secret"]));
        assert_eq!(dropped, ["gone"]);
        assert!(refused_change(json!({"branch": "x"}).as_object().unwrap_or(&Map::new())).is_some());
    }
}
