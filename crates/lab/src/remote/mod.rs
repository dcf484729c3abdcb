//! The lab across real hosts, over SSH (`fjord lab run --hosts lab.toml`).
//!
//! Flow: the [`inventory`] names the hosts; each gets one multiplexed
//! [`ssh`] control connection, a private run directory and the lab's
//! binary ([`host`]); [`facts`] describes it; the [`systems`] come up
//! between the left and right hosts, the [`quick`] suite runs its
//! traffic through the lab's own [`worker`] on each end (its RFC 2544
//! trials through [`udp`]) and reads the workers' reports back over the
//! same connections; [`run`] ties it
//! together and leaves every host as it found it (a host lost mid-run
//! keeps its run's directory until the next run there sweeps it,
//! [`stale`]).
//!
//! Nothing listens on the hosts but their own sshd, nothing is stored
//! but the run directory, and traffic goes only between the inventory's
//! addresses (or the overlay the lab's tunnel puts between them).

pub mod facts;
pub mod host;
pub mod inventory;
pub mod quick;
pub mod run;
pub mod ssh;
pub mod stale;
pub mod systems;
pub mod udp;
pub mod worker;

pub use inventory::{Inventory, InventoryError};
pub use run::{RemoteRunError, RemoteRunOptions};
pub use ssh::RemoteError;
