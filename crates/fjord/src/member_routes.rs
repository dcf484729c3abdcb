//! Kernel routes for the networks behind mesh members (their
//! certificates' routes) and for the exit node's default route.
//!
//! ```text
//! "routes" thread, every POLL_INTERVAL:
//!   control call ─▶ worker: Mesh::routes_generation changed since last?
//!                     no  ─▶ nothing (no list is built)
//!                     yes ─▶ Mesh::member_routes + Mesh::exit_node
//!   MemberRoutes::apply(wanted):
//!     gone     ─▶ ip route del PREFIX dev IFACE        (default: its rules too)
//!     new      ─▶ ip route add PREFIX dev IFACE        (Table = auto: main;
//!                                                       N: table N; off: none)
//!     new /0   ─▶ wg-quick's policy routing: rules `not fwmark M table M`
//!                 and `table main suppress_prefixlength 0`, the route in M
//!   exit node state changed ─▶ one log line (a warning if it carries nothing)
//! shutdown (up.rs) ─▶ MemberRoutes::clear
//! ```
//!
//! The mesh decides what is routed where (`fjord_mesh`'s
//! `membership/routes.rs`: only the chosen exit node's default route is
//! wanted); this module only mirrors that into the kernel. A poll rather
//! than an event from the worker keeps the data path free of it: routes
//! change when members do, seconds apart, and a poll that finds no change
//! costs one control call. Routes on the interface vanish with it if
//! fjord dies; the policy rules of a default route do not, and are
//! harmless without their table's route (the lookup falls through).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fjord_mesh::membership::is_default_route;
use fjord_mesh::{Cidr, ExitNodeStatus};
use fjord_net::ControlHandle;

use crate::netconf::{self, RouteTable};
use crate::status::ExitNodeLine;

/// How often the thread asks the worker whether members' routes changed.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The member routes installed on one interface.
pub struct MemberRoutes {
    interface: String,
    table: RouteTable,
    /// The table (and firewall mark) of a default route with `Table =
    /// auto`: the sockets' mark, chosen at start.
    fwmark: u32,
    installed: BTreeSet<Cidr>,
    /// The exit node's state last logged.
    exit_node: Option<ExitNodeStatus>,
}

/// Shared by the thread that applies changes and `up`, which clears them
/// at shutdown.
pub type SharedMemberRoutes = Arc<Mutex<MemberRoutes>>;

impl MemberRoutes {
    pub fn new(interface: &str, table: RouteTable, fwmark: u32) -> Self {
        Self {
            interface: interface.to_string(),
            table,
            fwmark,
            installed: BTreeSet::new(),
            exit_node: None,
        }
    }

    /// Makes the kernel route exactly `wanted` into the interface: routes
    /// no longer wanted go first, so a prefix moving between members is
    /// never routed twice.
    pub fn apply(&mut self, wanted: &[Cidr]) {
        if self.table == RouteTable::Off {
            return;
        }
        let wanted: BTreeSet<Cidr> = wanted.iter().map(Cidr::network).collect();
        let gone: Vec<Cidr> = self.installed.difference(&wanted).copied().collect();
        for prefix in gone {
            self.remove(&prefix);
            self.installed.remove(&prefix);
        }
        // Most specific first, as `Netconf::add_routes` adds them.
        let mut new: Vec<Cidr> = wanted.difference(&self.installed).copied().collect();
        new.sort_by_key(|prefix| std::cmp::Reverse(prefix.prefix_len()));
        for prefix in new {
            match self.add(&prefix) {
                Ok(()) => {
                    tracing::info!(interface = self.interface, %prefix, "routing a member's network");
                    self.installed.insert(prefix);
                }
                Err(error) => {
                    tracing::warn!(%error, %prefix, "could not route a member's network")
                }
            }
        }
    }

    /// Removes every route this added (shutdown).
    pub fn clear(&mut self) {
        self.apply(&[]);
    }

    /// Logs the exit node's state when it changes.
    pub fn note_exit_node(&mut self, status: ExitNodeStatus) {
        if self.exit_node.as_ref() == Some(&status) {
            return;
        }
        if let Some(line) = ExitNodeLine::of(&status) {
            let described = line.describe();
            match status {
                ExitNodeStatus::Serving { .. } => tracing::info!("exit node: {described}"),
                _ => tracing::warn!("ExitNode = {described}"),
            }
        }
        self.exit_node = Some(status);
    }

    fn add(&self, prefix: &Cidr) -> Result<(), netconf::NetconfError> {
        let text = prefix.to_string();
        let family = if prefix.is_ipv4() { "-4" } else { "-6" };
        match self.table {
            // `apply` mirrors nothing with `Table = off`.
            RouteTable::Off => Ok(()),
            RouteTable::Auto if is_default_route(prefix) => {
                netconf::add_default_route(&self.interface, prefix, self.fwmark)
            }
            RouteTable::Auto => {
                netconf::ip(&[family, "route", "add", &text, "dev", &self.interface]).map(drop)
            }
            RouteTable::Named(number) => netconf::ip(&[
                family,
                "route",
                "add",
                &text,
                "dev",
                &self.interface,
                "table",
                &number.to_string(),
            ])
            .map(drop),
        }
    }

    fn remove(&self, prefix: &Cidr) {
        if self.table == RouteTable::Auto && is_default_route(prefix) {
            netconf::remove_default_route(&self.interface, prefix, self.fwmark);
            return;
        }
        match netconf::remove_route(&self.interface, prefix, self.table) {
            Ok(()) => {
                tracing::info!(interface = self.interface, %prefix, "no longer routing a member's network")
            }
            Err(error) => tracing::debug!(%error, %prefix, "a member's route was gone already"),
        }
    }
}

/// What the worker reports when members' routes changed.
struct Changed {
    generation: u64,
    routes: Vec<Cidr>,
    exit_node: ExitNodeStatus,
}

/// Mirrors the mesh's member routes into the kernel until the worker
/// stops.
pub fn spawn(routes: SharedMemberRoutes, control: ControlHandle) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("routes".into())
        .spawn(move || {
            let mut seen: Option<u64> = None;
            loop {
                let changed = control.call(move |context| {
                    let mesh = context.node.mesh()?;
                    let generation = mesh.routes_generation();
                    (seen != Some(generation)).then(|| Changed {
                        generation,
                        routes: mesh.member_routes(),
                        exit_node: mesh.exit_node(),
                    })
                });
                match changed {
                    Err(_) => return,
                    Ok(Some(changed)) => {
                        seen = Some(changed.generation);
                        let mut routes = match routes.lock() {
                            Ok(guard) => guard,
                            Err(poisoned) => poisoned.into_inner(),
                        };
                        routes.apply(&changed.routes);
                        routes.note_exit_node(changed.exit_node);
                    }
                    Ok(None) => {}
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        })?;
    Ok(())
}
