//! The policy store asked before a session runs (Sessions page, "The life
//! of a session": "the policy store is asked about the harness and the
//! machine"; POLICY.md). Rules say which providers and folders a user, a
//! team or a role may use. With no rules, everything is allowed.

use serde::{Deserialize, Serialize};

use crate::grants::{Principal, Role};

/// Whether a matching rule allows or denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// The use is allowed.
    Allow,
    /// The use is refused.
    Deny,
}

/// One rule. The first rule whose `who`, `providers` and `folders` all
/// match decides; when none matches, the use is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Whom it is about: `user:<id>`, `team:<name>`, `role:member`,
    /// `role:guest`, or `*` for everybody (including nobody signed in).
    pub who: String,
    /// Providers it is about; empty means every provider.
    #[serde(default)]
    pub providers: Vec<String>,
    /// Folder URI prefixes it is about; empty means every folder.
    #[serde(default)]
    pub folders: Vec<String>,
    /// Allow or deny.
    pub effect: Effect,
}

/// The whole rules file.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Policy {
    /// The rules, first match wins.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

fn who_matches(who: &str, principal: Option<&Principal>) -> bool {
    if who == "*" {
        return true;
    }
    let Some(Principal::User { id, role, memberships, .. }) = principal else { return false };
    if let Some(user) = who.strip_prefix("user:") {
        return user == id;
    }
    if let Some(team) = who.strip_prefix("team:") {
        return memberships.iter().any(|m| m.team == team);
    }
    match who {
        "role:member" => *role == Role::Member,
        "role:guest" => *role == Role::Guest,
        _ => false,
    }
}

impl Policy {
    /// Whether `principal` may run `provider` in `folder`; `Err` says which
    /// rule refused, in words.
    pub fn check(&self, principal: Option<&Principal>, provider: &str, folder: Option<&str>) -> Result<(), String> {
        for (i, rule) in self.rules.iter().enumerate() {
            let provider_ok = rule.providers.is_empty() || rule.providers.iter().any(|p| p == provider);
            let folder_ok = rule.folders.is_empty() || folder.is_some_and(|f| rule.folders.iter().any(|p| f.starts_with(p.as_str())));
            if who_matches(&rule.who, principal) && provider_ok && folder_ok {
                return match rule.effect {
                    Effect::Allow => Ok(()),
                    Effect::Deny => Err(format!(
                        "the host's policy (rule {}, for {}) does not allow provider {provider}{}",
                        i + 1,
                        rule.who,
                        folder.map(|f| format!(" in {f}")).unwrap_or_default()
                    )),
                };
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::Membership;

    fn user(id: &str, team: &str) -> Principal {
        Principal::User {
            id: id.into(),
            role: Role::Member,
            administrator: false,
            memberships: vec![Membership { team: team.into(), project: "p".into(), primary: true }],
        }
    }

    #[test]
    fn first_match_decides_and_no_rules_allow_everything() {
        assert!(Policy::default().check(None, "echo", None).is_ok());
        let p = Policy {
            rules: vec![
                Rule { who: "user:bob".into(), providers: vec!["gemini".into()], folders: vec![], effect: Effect::Deny },
                Rule { who: "team:red".into(), providers: vec![], folders: vec!["file:///secret".into()], effect: Effect::Deny },
            ],
        };
        assert!(p.check(Some(&user("bob", "blue")), "gemini", None).is_err());
        assert!(p.check(Some(&user("bob", "blue")), "echo", None).is_ok());
        assert!(p.check(Some(&user("amy", "blue")), "gemini", None).is_ok());
        assert!(p.check(Some(&user("amy", "red")), "echo", Some("file:///secret/x")).is_err());
        assert!(p.check(Some(&user("amy", "red")), "echo", Some("file:///open")).is_ok());
    }
}
