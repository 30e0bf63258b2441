//! Serving: connecting to a bus, exporting the object under the well-known name, and
//! the signals it emits. Callers' remembered uids are forgotten when their connection
//! leaves the bus.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use zbus::fdo::DBusProxy;
use zbus::object_server::SignalEmitter;
use zbus::Connection;

use super::admission::{Callers, RateLimiter};
use super::interface::Pinnerd1;
use crate::api::{Call, Signal, Snapshot};

/// The well-known bus name.
pub const BUS_NAME: &str = "org.pinnerd.Pinnerd1";
/// The object path.
pub const OBJECT_PATH: &str = "/org/pinnerd/Pinnerd1";
/// The interface name.
pub const INTERFACE: &str = "org.pinnerd.Pinnerd1";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum DbusError {
    /// The bus name is owned by another connection (another instance is running).
    #[error("the bus name {BUS_NAME} is already taken on {bus}: another pinnerd is running")]
    NameTaken { bus: String },
    /// Connecting to the bus failed.
    #[error("cannot connect to the {bus} bus: {source}")]
    Connect {
        bus: String,
        #[source]
        source: zbus::Error,
    },
}

/// Which bus to use: the system bus, the session bus, or an explicit address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusTarget {
    System,
    Session,
    Address(String),
}

impl std::str::FromStr for BusTarget {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "system" => BusTarget::System,
            "session" => BusTarget::Session,
            other => BusTarget::Address(other.to_string()),
        })
    }
}

impl std::fmt::Display for BusTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BusTarget::System => f.write_str("system"),
            BusTarget::Session => f.write_str("session"),
            BusTarget::Address(a) => write!(f, "address {a}"),
        }
    }
}

impl BusTarget {
    /// A connection builder for this bus.
    pub fn builder(&self) -> zbus::connection::Builder<'static> {
        match self {
            BusTarget::System => zbus::connection::Builder::system(),
            BusTarget::Session => zbus::connection::Builder::session(),
            BusTarget::Address(a) => zbus::connection::Builder::address(a.as_str()),
        }
    }

    /// A plain client connection (no name, no object).
    pub async fn connect(&self) -> Result<Connection, DbusError> {
        self.builder()
            .build()
            .await
            .map_err(|source| DbusError::Connect {
                bus: self.to_string(),
                source,
            })
    }
}

/// Connects to `bus`, serves the object and takes the bus name — refusing, not queueing
/// or stealing, when another instance holds it.
pub async fn serve<E: From<Call> + Send + Sync + 'static>(
    bus: &BusTarget,
    events: mpsc::Sender<E>,
    snapshot: watch::Receiver<Snapshot>,
    limiter: RateLimiter,
) -> Result<Connection, DbusError> {
    let object = Pinnerd1::new(events, snapshot, limiter);
    let callers = object.callers();
    let limiter = object.limiter();
    let conn = bus
        .builder()
        .serve_at(OBJECT_PATH, object)
        .name(BUS_NAME)
        .allow_name_replacements(false)
        .replace_existing_names(false)
        .build()
        .await
        .map_err(|source| match source {
            zbus::Error::NameTaken => DbusError::NameTaken {
                bus: bus.to_string(),
            },
            source => DbusError::Connect {
                bus: bus.to_string(),
                source,
            },
        })?;
    forget_departed_callers(&conn, callers)
        .await
        .map_err(|source| DbusError::Connect {
            bus: bus.to_string(),
            source,
        })?;
    tokio::spawn(summarise_refusals(limiter));
    Ok(conn)
}

/// Logs the counts of refused calls, once a second at most (each caller's once per
/// `repeats::REPEATS_EVERY`).
async fn summarise_refusals(limiter: Arc<RateLimiter>) {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        limiter.summarise(std::time::Instant::now());
    }
}

/// Drops a caller's remembered uid when its connection leaves the bus.
async fn forget_departed_callers(conn: &Connection, callers: Arc<Callers>) -> zbus::Result<()> {
    use futures_util::StreamExt;
    let proxy = DBusProxy::new(conn).await?;
    let mut changes = proxy.receive_name_owner_changed().await?;
    tokio::spawn(async move {
        while let Some(signal) = changes.next().await {
            let Ok(args) = signal.args() else { continue };
            if args.new_owner().is_none() {
                callers.forget(args.name().as_str());
            }
        }
    });
    Ok(())
}

/// Emits one signal from the object.
pub async fn emit(conn: &Connection, signal: &Signal) -> zbus::Result<()> {
    let emitter = SignalEmitter::new(conn, OBJECT_PATH)?;
    match signal {
        Signal::MeasurementFinished { job, ok, summary } => {
            Pinnerd1::<Call>::measurement_finished(&emitter, *job, *ok, summary).await
        }
        Signal::RulesReloaded { rules, errors } => {
            Pinnerd1::<Call>::rules_reloaded(&emitter, *rules, errors.clone()).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_target_words() {
        assert_eq!("system".parse::<BusTarget>().unwrap(), BusTarget::System);
        assert_eq!("session".parse::<BusTarget>().unwrap(), BusTarget::Session);
        assert_eq!(
            "unix:path=/run/x".parse::<BusTarget>().unwrap(),
            BusTarget::Address("unix:path=/run/x".into())
        );
    }
}
