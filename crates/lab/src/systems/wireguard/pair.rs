//! One implementation on both hosts of a [`TwoHosts`], for suites that
//! stop and start one side while the other runs on: the attack suite
//! restarts the initiator under a flood, the soak restarts a side every
//! ten minutes.
//!
//! The sides come from [`point_to_point`]; the right side starts first,
//! so an initiator's first handshake finds it listening. A restart drops
//! the side's [`Interface`] (the daemon stops and its interface goes) and
//! starts the same implementation again with the same [`WgSide`]: the
//! same keys, port and addresses, but none of the old sessions. If the
//! new start fails, the side stays down and says so when asked for.

use std::path::Path;
use std::time::Instant;

use super::{Implementation, Initiator, Interface, WgSide, point_to_point};
use crate::netns::Namespace;
use crate::topology::TwoHosts;

/// One end of a [`Pair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Left,
    Right,
}

impl End {
    pub fn name(self) -> &'static str {
        match self {
            End::Left => "left",
            End::Right => "right",
        }
    }
}

/// Both sides of a tunnel of one implementation, each restartable.
/// Field order matters: the left side (an initiator) stops before the
/// right one it talks to.
pub struct Pair<'a> {
    implementation: &'a dyn Implementation,
    hosts: &'a TwoHosts,
    workdir: &'a Path,
    left_side: WgSide,
    right_side: WgSide,
    /// `None` only while it restarts, or after a restart that failed.
    left: Option<Interface>,
    right: Option<Interface>,
}

impl<'a> Pair<'a> {
    /// Starts the right side, then the left; returns once both
    /// interfaces are up (not yet once a handshake went through).
    pub fn start(
        implementation: &'a dyn Implementation,
        hosts: &'a TwoHosts,
        initiator: Initiator,
        workdir: &'a Path,
    ) -> Result<Self, String> {
        let (left_side, right_side) =
            point_to_point(initiator).map_err(|error| error.to_string())?;
        let right = implementation
            .start(&hosts.right, &right_side, workdir)
            .map_err(|error| error.to_string())?;
        let left = implementation
            .start(&hosts.left, &left_side, workdir)
            .map_err(|error| error.to_string())?;
        Ok(Self {
            implementation,
            hosts,
            workdir,
            left_side,
            right_side,
            left: Some(left),
            right: Some(right),
        })
    }

    pub fn implementation(&self) -> &'a dyn Implementation {
        self.implementation
    }

    /// The configuration `end` runs with.
    pub fn side(&self, end: End) -> &WgSide {
        match end {
            End::Left => &self.left_side,
            End::Right => &self.right_side,
        }
    }

    /// The namespace `end` runs in.
    pub fn namespace(&self, end: End) -> &'a Namespace {
        match end {
            End::Left => &self.hosts.left,
            End::Right => &self.hosts.right,
        }
    }

    /// The running side at `end`; an error if its restart failed.
    pub fn interface(&self, end: End) -> Result<&Interface, String> {
        let interface = match end {
            End::Left => self.left.as_ref(),
            End::Right => self.right.as_ref(),
        };
        interface.ok_or_else(|| format!("the {} side is down: its restart failed", end.name()))
    }

    /// PIDs of the processes serving `end` (none while it is down).
    pub fn pids(&self, end: End) -> Vec<u32> {
        self.interface(end).map(Interface::pids).unwrap_or_default()
    }

    /// Stops `end` and starts it again with the same keys; returns when
    /// the new start began (the daemon's start and configuration follow).
    pub fn restart(&mut self, end: End) -> Result<Instant, String> {
        let slot = match end {
            End::Left => &mut self.left,
            End::Right => &mut self.right,
        };
        // Dropping stops the daemon and removes a control socket it left.
        drop(slot.take());
        let started = Instant::now();
        let side = match end {
            End::Left => &self.left_side,
            End::Right => &self.right_side,
        };
        let namespace = match end {
            End::Left => &self.hosts.left,
            End::Right => &self.hosts.right,
        };
        let interface = self
            .implementation
            .start(namespace, side, self.workdir)
            .map_err(|error| format!("restarting the {} side: {error}", end.name()))?;
        *slot = Some(interface);
        Ok(started)
    }
}
