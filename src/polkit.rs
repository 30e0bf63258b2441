//! Who may change what: root always; anyone else as polkit decides, over the system
//! bus, for the two actions of `polkit/org.pinnerd.policy`; without polkit on the bus,
//! root only (what the daemon did before polkit).
//!
//! ```text
//!   caller uid, target's owner ──► Action::for_target ──► action id
//!   caller's unique bus name + action id ──► CheckAuthorization ──► Verdict
//! ```
//!
//! Owns: the action ids, which one a call needs, and the `CheckAuthorization` call with
//! the caller's bus name as its `system-bus-name` subject (never a pid, which can be
//! reused). Must not touch: the daemon's state, processes. `dbus` asks it before it
//! forwards a privileged call.

use std::collections::HashMap;

use zbus::{Connection, Variant};

/// The polkit service on the system bus.
pub const POLKIT_NAME: &str = "org.freedesktop.PolicyKit1";

/// What a privileged call does, as polkit names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `org.pinnerd.pin-own-process`: pin or release a process of one's own.
    PinOwnProcess,
    /// `org.pinnerd.manage`: Remeasure, Reload, and pinning other users' processes.
    Manage,
}

impl Action {
    /// The action id in the `.policy` file.
    pub const fn id(self) -> &'static str {
        match self {
            Action::PinOwnProcess => "org.pinnerd.pin-own-process",
            Action::Manage => "org.pinnerd.manage",
        }
    }

    /// The action a pin or release of a process owned by `owner` (its real uid) needs
    /// when `caller` asks: one's own process, or anyone else's.
    pub fn for_target(caller: u32, owner: u32) -> Action {
        if caller == owner {
            Action::PinOwnProcess
        } else {
            Action::Manage
        }
    }
}

/// polkit's answer, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// uid 0: polkit is not asked.
    Root,
    Authorized,
    /// Not authorized; `challenge`: it would be with authentication (an agent).
    Refused {
        challenge: bool,
    },
    /// polkit is not on the bus or did not answer: root only.
    Unavailable(String),
}

impl Verdict {
    pub fn allowed(&self) -> bool {
        matches!(self, Verdict::Root | Verdict::Authorized)
    }
}

/// `CheckAuthorization`'s one out argument, the struct `(bba{ss})`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, zbus::Type)]
pub struct AuthorizationResult {
    pub is_authorized: bool,
    pub is_challenge: bool,
    pub details: HashMap<String, String>,
}

/// polkit's `Authority` interface: only the call pinnerd makes.
#[zbus::proxy(
    interface = "org.freedesktop.PolicyKit1.Authority",
    default_service = "org.freedesktop.PolicyKit1",
    default_path = "/org/freedesktop/PolicyKit1/Authority"
)]
trait Authority {
    fn check_authorization(
        &self,
        subject: &(&str, HashMap<&str, Variant<'_>>),
        action_id: &str,
        details: HashMap<&str, &str>,
        flags: u32,
        cancellation_id: &str,
    ) -> zbus::Result<AuthorizationResult>;
}

/// `CheckAuthorizationFlags.AllowUserInteraction`.
const ALLOW_USER_INTERACTION: u32 = 1;

/// Asks polkit whether the connection `sender` (a unique name, `:1.42`) of uid
/// `caller_uid` may do `action`. `interactive`: the caller allowed interactive
/// authorization on its call (an authentication agent may ask for a password).
pub async fn check(
    conn: &Connection,
    sender: &str,
    caller_uid: u32,
    action: Action,
    interactive: bool,
) -> Verdict {
    if caller_uid == 0 {
        return Verdict::Root;
    }
    let proxy = match AuthorityProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
    {
        Ok(p) => p,
        Err(e) => return Verdict::Unavailable(e.to_string()),
    };
    let mut details = HashMap::new();
    details.insert("name", Variant::from(sender));
    let subject = ("system-bus-name", details);
    let flags = if interactive {
        ALLOW_USER_INTERACTION
    } else {
        0
    };
    match proxy
        .check_authorization(&subject, action.id(), HashMap::new(), flags, "")
        .await
    {
        Ok(r) if r.is_authorized => Verdict::Authorized,
        Ok(r) => Verdict::Refused {
            challenge: r.is_challenge,
        },
        Err(e) => Verdict::Unavailable(unavailable(&e)),
    }
}

/// Why polkit gave no answer, in words.
fn unavailable(e: &zbus::Error) -> String {
    match e {
        zbus::Error::FDO(f)
            if matches!(
                **f,
                zbus::fdo::Error::ServiceUnknown(_) | zbus::fdo::Error::NameHasNoOwner(_)
            ) =>
        {
            format!("{POLKIT_NAME} is not on the bus")
        }
        other => format!("{POLKIT_NAME} did not answer: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ones_own_process_needs_pin_own_and_anyone_elses_manage() {
        assert_eq!(Action::for_target(1000, 1000), Action::PinOwnProcess);
        assert_eq!(Action::for_target(1000, 0), Action::Manage);
        assert_eq!(Action::for_target(1000, 1001), Action::Manage);
        assert_eq!(
            Action::PinOwnProcess.id(),
            "org.pinnerd.pin-own-process",
            "the id in polkit/org.pinnerd.policy"
        );
        assert_eq!(Action::Manage.id(), "org.pinnerd.manage");
    }

    #[test]
    fn only_root_and_authorized_callers_are_allowed() {
        assert!(Verdict::Root.allowed());
        assert!(Verdict::Authorized.allowed());
        assert!(!Verdict::Refused { challenge: true }.allowed());
        assert!(!Verdict::Unavailable("gone".into()).allowed());
    }

    #[test]
    fn the_policy_file_names_both_actions_with_their_defaults() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("polkit/org.pinnerd.policy"),
        )
        .unwrap();
        for (action, any, inactive, active) in [
            (Action::PinOwnProcess, "auth_admin", "auth_admin", "yes"),
            (
                Action::Manage,
                "auth_admin_keep",
                "auth_admin_keep",
                "auth_admin_keep",
            ),
        ] {
            let start = text
                .find(&format!("<action id=\"{}\">", action.id()))
                .unwrap_or_else(|| panic!("{} missing", action.id()));
            let block = &text[start..start + text[start..].find("</action>").unwrap()];
            for (tag, want) in [
                ("allow_any", any),
                ("allow_inactive", inactive),
                ("allow_active", active),
            ] {
                assert!(
                    block.contains(&format!("<{tag}>{want}</{tag}>")),
                    "{}: {tag} should be {want}:\n{block}",
                    action.id()
                );
            }
        }
    }
}
