//! `--user NAME` (or `FJORD_USER=NAME`): once the interface is set up,
//! fjord runs as NAME and keeps one capability, `CAP_NET_ADMIN`.
//!
//! What the running tunnel still does, and what each needs:
//!
//! | at run time | needs |
//! |---|---|
//! | read and write the TUN device, UDP and the configuration socket (open already) | nothing |
//! | re-read the interface's MTU (`SIOCGIFMTU`), list host addresses, resolve endpoint names | nothing |
//! | path MTU probes (`IP_MTU_DISCOVER`), punch TTLs (`IP_TTL`), source addresses (`IP_PKTINFO`) | nothing |
//! | new UDP sockets on ports ≥ 1024: `wg set listen-port`, port prediction's 256 sockets | nothing |
//! | a connected socket per peer on the listen port (floods), beside the one bound as root | that socket handed to NAME first (`hand_over`) |
//! | socket buffers past the sysctl caps on those sockets (`SO_*BUFFORCE`) | `CAP_NET_ADMIN` |
//! | a firewall mark on any socket (`wg set fwmark`, which wg-quick sends for a default route) | `CAP_NET_ADMIN` |
//! | shutdown: remove the policy rules of a default route (`ip rule del`) | `CAP_NET_ADMIN` (ambient, so `ip` gets it) |
//! | routes of members' networks and an exit node's default route as members come and go (`ip route`, `ip rule`) | `CAP_NET_ADMIN` (ambient, so `ip` gets it) |
//! | shutdown: the interface disappears when fjord closes the TUN device | nothing |
//!
//! What is given up: binding a listen port below 1024 after start
//! (`CAP_NET_BIND_SERVICE`), and removing the configuration socket's file
//! at exit (its directory is root's). The file is then stale: the next
//! `fjord up` of that interface replaces it, and `fjord show` and `wg`
//! remove it when nobody answers. PostUp, PreDown and PostDown hooks run
//! as NAME with `CAP_NET_ADMIN` (PreUp still runs as root).

use fjord_net::Egress;
use fjord_sys::privilege::{self, Account, CAP_NET_ADMIN, Capability};

use crate::up::UsageError;

/// The capabilities fjord keeps after dropping root (see the table above).
pub const KEPT_CAPABILITIES: &[Capability] = &[CAP_NET_ADMIN];

/// Looks up the account to run as, before anything is set up, so an
/// unknown user fails with exit code 2 and leaves nothing behind.
pub fn resolve_user(name: &str) -> Result<Account, UsageError> {
    match privilege::lookup_user(name) {
        Ok(Some(account)) => Ok(account),
        Ok(None) => Err(UsageError(format!("--user {name}: no such user"))),
        Err(error) => Err(UsageError(format!(
            "--user {name}: cannot read the user database: {error}"
        ))),
    }
}

/// Gives the interface's UDP socket, bound as root, to `account`, so that
/// the sockets of its own fjord opens for each peer after [`drop_to`] can
/// share its port (`Egress::hand_to`). Call it before
/// [`drop_to`].
pub fn hand_over(udp: &Egress, account: &Account) -> anyhow::Result<()> {
    udp.hand_to(account.uid, account.gid)
        .map_err(|error| anyhow::anyhow!("giving the UDP socket to {}: {error}", account.name))
}

/// Switches to `account`, keeping [`KEPT_CAPABILITIES`]. Call it before
/// any thread starts.
pub fn drop_to(account: &Account) -> anyhow::Result<()> {
    privilege::drop_to(account, KEPT_CAPABILITIES)?;
    tracing::info!(
        user = %account.name,
        uid = account.uid,
        gid = account.gid,
        "dropped root; keeping CAP_NET_ADMIN only"
    );
    Ok(())
}
