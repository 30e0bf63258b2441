//! Admission: what every method call and property read passes before the daemon does
//! anything for it. In order: the size of the message (from its header alone), who
//! called (the uid the bus vouches for, asked once per connection), the caller's rate
//! limit (one token per message, however many properties it reads), and for the
//! mutating methods root or polkit's answer (see `polkit`).
//!
//! Must not touch: daemon state; the loop. It holds only the per-caller rate limiter
//! and the uid cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zbus::fdo::{self, DBusProxy};
use zbus::message::Header;
use zbus::Connection;

use super::error::{MethodError, Result};
use crate::polkit::{self, Action, Verdict};
use crate::repeats::{Repeats, REPEATS_EVERY};

/// The longest string a method accepts, in bytes. Longer strings are refused before any
/// other work, so a caller cannot make the daemon parse or log unbounded input.
pub const MAX_STRING: usize = 64;

/// The largest message body any method or property read accepts, in bytes: the largest
/// legitimate one (`PinProcess` with two strings of [`MAX_STRING`]) is under 200. zbus
/// reads a message whole (up to the D-Bus limit of 128 MiB, which the bus daemon lowers)
/// and lends its strings to the method without copying them; this bound, checked from
/// the header before anything else, keeps a large message from costing more than that
/// read: no uid lookup, no parsing, no log of its content.
pub const MAX_BODY: u32 = 512;

/// A token bucket per caller uid: `burst` calls at once, then `per_second`. Its
/// refusals are logged summed up per caller (see `repeats`).
#[derive(Debug)]
pub struct RateLimiter {
    burst: f64,
    per_second: f64,
    buckets: Mutex<HashMap<u32, (f64, Instant)>>,
    /// Refusals counted for the log, per caller and reason.
    refused: Mutex<Repeats<(u32, &'static str)>>,
}

impl RateLimiter {
    pub fn new(burst: u32, per_second: u32) -> Self {
        RateLimiter {
            burst: f64::from(burst),
            per_second: f64::from(per_second),
            buckets: Mutex::new(HashMap::new()),
            refused: Mutex::new(Repeats::default()),
        }
    }

    /// Logs that a call of `uid` to `method` was refused (`why`: over its rate limit,
    /// refused by polkit, …): the first such refusal of a caller in a while is a warning
    /// of its own, the others are counted for [`RateLimiter::summarise`].
    pub fn log_refusal(&self, uid: u32, method: &str, why: &'static str, now: Instant) {
        let first = self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .note((uid, why), now);
        if first {
            tracing::warn!(
                uid,
                method,
                "uid {uid}, {method}: {why}; further such refusals of this caller are counted, one line each {} s",
                REPEATS_EVERY.as_secs()
            );
        }
    }

    /// Logs one line per caller and reason whose refusals were counted and are due at
    /// `now`.
    pub fn summarise(&self, now: Instant) {
        let due = self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .due(now);
        for ((uid, why), more) in due {
            tracing::warn!(uid, more, "{more} more calls refused for uid {uid} ({why})");
        }
    }

    /// Takes one token for `uid` at `now`; false when the caller is over its limit.
    pub fn allow(&self, uid: u32, now: Instant) -> bool {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        // Forget idle callers so the map cannot grow without bound.
        if buckets.len() > 4096 {
            let horizon = Duration::from_secs_f64(self.burst / self.per_second.max(1e-9));
            buckets.retain(|_, (_, last)| now.duration_since(*last) < horizon);
        }
        let (tokens, last) = buckets.entry(uid).or_insert((self.burst, now));
        let refill = now.duration_since(*last).as_secs_f64() * self.per_second;
        *tokens = (*tokens + refill).min(self.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Callers by unique bus name: the uid the bus vouched for (asked once per connection)
/// and the last message charged to the rate limiter. An entry goes when its connection
/// does (`NameOwnerChanged`); the map is bounded besides.
#[derive(Debug, Default)]
pub struct Callers {
    map: Mutex<HashMap<String, Caller>>,
}

#[derive(Debug, Clone, Copy)]
struct Caller {
    uid: u32,
    /// The last `GetAll` charged: its serial, how many more property reads it may make
    /// without paying, and whether it was admitted. `GetAll` reads every property with
    /// one message and pays once; a client chooses its serials, so a reused serial buys
    /// no more than one `GetAll`'s reads, and any other message always pays.
    charged: Option<(std::num::NonZeroU32, usize, bool)>,
}

/// Most connections whose uids are remembered at once.
const MAX_CALLERS: usize = 4096;

impl Callers {
    fn uid(&self, name: &str) -> Option<u32> {
        self.lock().get(name).map(|c| c.uid)
    }

    fn remember(&self, name: &str, uid: u32) {
        let mut map = self.lock();
        if map.len() >= MAX_CALLERS {
            map.clear();
        }
        map.insert(name.to_string(), Caller { uid, charged: None });
    }

    /// Forgets a connection that left the bus.
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    /// How many connections are remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Charges a message of `name`: `charge` runs for every message, except for the
    /// property reads of one `GetAll` (`get_all`, with serial `serial`), which read
    /// `properties` properties and pay once.
    fn charge_once(
        &self,
        name: &str,
        serial: std::num::NonZeroU32,
        get_all: bool,
        properties: usize,
        charge: impl FnOnce() -> bool,
    ) -> bool {
        let mut map = self.lock();
        let Some(c) = map.get_mut(name) else {
            return charge();
        };
        if !get_all {
            c.charged = None;
            return charge();
        }
        match &mut c.charged {
            Some((s, left, admitted)) if *s == serial && *left > 0 => {
                *left -= 1;
                *admitted
            }
            _ => {
                let admitted = charge();
                c.charged = Some((serial, properties.saturating_sub(1), admitted));
                admitted
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Caller>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The admission state of one object: the rate limiter, the callers it remembers, and
/// how many properties one `GetAll` reads.
pub(super) struct Admission {
    limiter: Arc<RateLimiter>,
    callers: Arc<Callers>,
    /// How many properties the interface has: the reads one `GetAll` makes.
    pub(super) properties: usize,
}

impl Admission {
    /// Admission with `limiter`, for an interface of `properties` properties.
    pub(super) fn new(limiter: RateLimiter, properties: usize) -> Self {
        Admission {
            limiter: Arc::new(limiter),
            callers: Arc::new(Callers::default()),
            properties,
        }
    }

    /// The callers remembered (shared with the `NameOwnerChanged` watcher).
    pub(super) fn callers(&self) -> Arc<Callers> {
        self.callers.clone()
    }

    /// The rate limiter (shared with the task that logs its refusals' counts).
    pub(super) fn limiter(&self) -> Arc<RateLimiter> {
        self.limiter.clone()
    }

    /// Who called, from the bus (never from a pid, which can be reused): asked once per
    /// connection, then remembered until it leaves the bus.
    async fn caller_uid(&self, conn: &Connection, header: &Header<'_>) -> Result<u32> {
        let sender = header
            .sender()
            .ok_or_else(|| MethodError::NotPermitted("the call carries no sender".into()))?;
        if let Some(uid) = self.callers.uid(sender.as_str()) {
            return Ok(uid);
        }
        let proxy = DBusProxy::new(conn).await?;
        let uid = proxy
            .get_connection_unix_user(sender.clone().into())
            .await
            .map_err(|e| MethodError::NotPermitted(format!("cannot identify the caller: {e}")))?;
        self.callers.remember(sender.as_str(), uid);
        Ok(uid)
    }

    /// The checks every method and property read makes: the uid, then the rate limit
    /// (one token per message, however many properties it reads).
    pub(super) async fn admit(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
    ) -> Result<u32> {
        check_body(header, method)?;
        let uid = self.caller_uid(conn, header).await?;
        if uid == 0 {
            return Ok(uid);
        }
        let sender = header.sender().map(|s| s.as_str()).unwrap_or_default();
        let serial = header.primary().serial_num();
        let get_all = header.member().is_some_and(|m| m.as_str() == "GetAll")
            && header
                .interface()
                .is_some_and(|i| i.as_str() == "org.freedesktop.DBus.Properties");
        let admitted = self
            .callers
            .charge_once(sender, serial, get_all, self.properties, || {
                self.limiter.allow(uid, Instant::now())
            });
        if !admitted {
            self.limiter
                .log_refusal(uid, method, "caller over its rate limit", Instant::now());
            return Err(MethodError::RateLimited(format!(
                "{method}: too many calls from uid {uid}; slow down"
            )));
        }
        Ok(uid)
    }

    /// [`Self::admit`] for a property read: the caller's uid; reads the daemon makes
    /// itself (no header) pass, with no uid.
    pub(super) async fn admit_read(
        &self,
        conn: &Connection,
        header: Option<Header<'_>>,
        property: &str,
    ) -> fdo::Result<Option<u32>> {
        let Some(header) = header else {
            return Ok(None);
        };
        match self.admit(conn, &header, property).await {
            Ok(uid) => Ok(Some(uid)),
            Err(MethodError::RateLimited(m)) => Err(fdo::Error::LimitsExceeded(m)),
            Err(e) => Err(fdo::Error::AccessDenied(e.to_string())),
        }
    }

    /// As [`Self::admit`], and only root or a caller polkit authorizes for
    /// `org.pinnerd.manage` may pass.
    pub(super) async fn admit_root(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
    ) -> Result<()> {
        let uid = self.admit(conn, header, method).await?;
        self.authorize(conn, header, method, uid, Action::Manage, None)
            .await
    }

    /// After [`Self::admit`] for a pin or release of process `pid` owned by `owner`, by
    /// a caller `uid` other than root: polkit's `org.pinnerd.pin-own-process` for a
    /// process of their own, `org.pinnerd.manage` for anyone else's. Returns, for one's
    /// own process, the uid the loop checks the owner against again in the step that
    /// pins (`PinRequest::for_owner`).
    pub(super) async fn authorize_pin(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
        uid: u32,
        owner: u32,
        pid: u32,
    ) -> Result<Option<u32>> {
        let action = Action::for_target(uid, owner);
        self.authorize(conn, header, method, uid, action, Some(pid))
            .await?;
        Ok(match action {
            Action::PinOwnProcess => Some(uid),
            Action::Manage => None,
        })
    }

    /// A caller who may pin its own processes asks for what only a caller allowed to pin
    /// others may give (a real-time class): polkit's `org.pinnerd.manage`, or root.
    pub(super) async fn authorize_manage(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
        uid: u32,
        pid: u32,
    ) -> Result<()> {
        self.authorize(conn, header, method, uid, Action::Manage, Some(pid))
            .await
    }

    /// Root passes; anyone else as polkit decides for `action`; without polkit, root
    /// only.
    async fn authorize(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
        uid: u32,
        action: Action,
        pid: Option<u32>,
    ) -> Result<()> {
        let sender = header.sender().map(|s| s.as_str()).unwrap_or_default();
        let interactive = header
            .primary()
            .flags()
            .contains(zbus::message::Flags::ALLOW_INTERACTIVE_AUTH);
        let verdict = polkit::check(conn, sender, uid, action, interactive).await;
        let what = match pid {
            Some(pid) => format!("{method} of pid {pid}"),
            None => method.to_string(),
        };
        match verdict {
            Verdict::Root | Verdict::Authorized => {
                if uid != 0 {
                    tracing::info!(
                        uid,
                        method,
                        pid,
                        action = action.id(),
                        "{what} by uid {uid} authorized by polkit ({})",
                        action.id()
                    );
                }
                Ok(())
            }
            Verdict::Refused { challenge } => {
                // Once, then counted: a caller may ask 20 times a second.
                self.limiter
                    .log_refusal(uid, &what, "refused by polkit", Instant::now());
                let how = if challenge {
                    "; it needs authentication (run it with an authentication agent, e.g. pkttyagent, and allow interactive authorization)"
                } else {
                    ""
                };
                Err(MethodError::NotPermitted(format!(
                    "{what}: not authorized for {} (caller uid {uid}){how}",
                    action.id()
                )))
            }
            Verdict::Unavailable(why) => {
                tracing::debug!(uid, method, pid, why, "polkit unavailable");
                self.limiter
                    .log_refusal(uid, &what, "refused a privileged method", Instant::now());
                Err(MethodError::NotPermitted(format!(
                    "{method} requires root (caller uid {uid}): polkit cannot authorize {}: {why}",
                    action.id()
                )))
            }
        }
    }
}

/// Refuses a message whose body is over [`MAX_BODY`], from its header alone.
pub(super) fn check_body(header: &Header<'_>, method: &str) -> Result<()> {
    let len = header.primary().body_len();
    if len > MAX_BODY {
        return Err(MethodError::InvalidArgs(format!(
            "{method}: a message body of {len} bytes; at most {MAX_BODY} are accepted"
        )));
    }
    Ok(())
}

pub(super) fn check_len(what: &str, s: &str) -> Result<()> {
    if s.len() > MAX_STRING {
        return Err(MethodError::InvalidArgs(format!(
            "{what}: longer than {MAX_STRING} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limiter_allows_a_burst_then_refills() {
        let l = RateLimiter::new(3, 10);
        let t0 = Instant::now();
        assert!(l.allow(1000, t0));
        assert!(l.allow(1000, t0));
        assert!(l.allow(1000, t0));
        assert!(!l.allow(1000, t0), "fourth call in the same instant");
        assert!(l.allow(1001, t0), "another caller has its own bucket");
        assert!(
            l.allow(1000, t0 + Duration::from_millis(100)),
            "one token back"
        );
        assert!(!l.allow(1000, t0 + Duration::from_millis(100)));
    }

    #[test]
    fn long_strings_are_refused() {
        assert!(check_len("policy", "compact").is_ok());
        let e = check_len("policy", &"x".repeat(65)).unwrap_err();
        assert!(e.to_string().contains("longer than 64 bytes"), "{e}");
    }
}
