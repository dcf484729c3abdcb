//! `fjord network`: the network key and the certificates of its members.
//!
//! ```text
//! fjord network new > network.key              a new secret network key
//! fjord network pubkey < network.key           its public key ([Mesh] Network)
//! fjord network sign --network-key network.key --public-key KEY \
//!     --name NAME --address 198.19.0.2/32 [--days 365]   a certificate
//! fjord network revoke --network-key network.key --public-key KEY
//! ```
//!
//! The secret network key never goes onto a node: it only signs. A key
//! file readable by group or others is refused, as config files are.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Subcommand;
use fjord_mesh::{Cidr, NetworkSecret};
use fjord_proto::PublicKey;
use zeroize::Zeroizing;

use crate::up::UsageError;

#[derive(Subcommand)]
pub enum NetworkCommand {
    /// Print a new secret network key (keep it off the nodes; chmod 600).
    New,
    /// Read a secret network key on stdin, print the network's public key.
    Pubkey,
    /// Print a certificate that admits a node to the network.
    Sign {
        /// File holding the secret network key.
        #[arg(long)]
        network_key: PathBuf,
        /// The node's WireGuard public key (`fjord pubkey < private.key`).
        #[arg(long)]
        public_key: String,
        /// The node's name (letters, digits, '.', '-', '_'; up to 63).
        #[arg(long)]
        name: String,
        /// An overlay address or prefix the node may use (repeat for more).
        #[arg(long = "address", required = true)]
        addresses: Vec<String>,
        /// Days the certificate stays valid.
        #[arg(long, default_value_t = 365,
              value_parser = clap::value_parser!(u32).range(1..=36_500))]
        days: u32,
    },
    /// Print a revocation of every certificate issued so far to a node key.
    Revoke {
        /// File holding the secret network key.
        #[arg(long)]
        network_key: PathBuf,
        /// The WireGuard public key of the node to revoke.
        #[arg(long)]
        public_key: String,
    },
}

pub fn run(command: NetworkCommand, out: &mut impl Write) -> anyhow::Result<()> {
    match command {
        NetworkCommand::New => {
            let mut seed = Zeroizing::new([0u8; 32]);
            getrandom::fill(seed.as_mut())
                .map_err(|error| anyhow::anyhow!("no randomness from the OS: {error}"))?;
            let secret = NetworkSecret::from_seed(*seed);
            writeln!(out, "{}", secret.to_base64().as_str())?;
        }
        NetworkCommand::Pubkey => {
            // Room for a key line and more, so reading never reallocates
            // (a reallocation would free a copy of the key unwiped).
            let mut text = Zeroizing::new(String::with_capacity(4096));
            std::io::stdin().take(4000).read_to_string(&mut text)?;
            let secret = parse_secret(&text, "standard input")?;
            writeln!(out, "{}", secret.public_key())?;
        }
        NetworkCommand::Sign {
            network_key,
            public_key,
            name,
            addresses,
            days,
        } => {
            let secret = read_secret(&network_key)?;
            let node_key = parse_public_key(&public_key)?;
            let addresses = addresses
                .iter()
                .map(|text| {
                    text.parse::<Cidr>()
                        .map_err(|error| UsageError(format!("--address {text}: {error}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let now = unix_now();
            let expires = now + Duration::from_secs(u64::from(days) * 86_400).as_secs();
            let certificate = secret
                .sign(node_key, &name, &addresses, now, expires)
                .map_err(|error| UsageError(format!("cannot sign: {error}")))?;
            writeln!(out, "{}", certificate.to_base64())?;
        }
        NetworkCommand::Revoke {
            network_key,
            public_key,
        } => {
            let secret = read_secret(&network_key)?;
            let node_key = parse_public_key(&public_key)?;
            writeln!(out, "{}", secret.revoke(node_key, unix_now()).to_base64())?;
        }
    }
    out.flush()?;
    Ok(())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

fn parse_public_key(text: &str) -> Result<PublicKey, UsageError> {
    text.trim()
        .parse()
        .map_err(|error| UsageError(format!("--public-key: {error}")))
}

fn parse_secret(text: &str, source: &str) -> Result<NetworkSecret, UsageError> {
    NetworkSecret::from_base64(text)
        .map_err(|error| UsageError(format!("{source}: not a secret network key ({error})")))
}

/// Reads the secret network key, refusing a file others may read.
fn read_secret(path: &Path) -> anyhow::Result<NetworkSecret> {
    let metadata = std::fs::metadata(path)
        .map_err(|error| UsageError(format!("{}: {error}", path.display())))?;
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(UsageError(format!(
            "{}: mode {mode:04o} lets group or others read the network key; chmod 600 it",
            path.display()
        ))
        .into());
    }
    let text = Zeroizing::new(
        std::fs::read_to_string(path)
            .map_err(|error| UsageError(format!("{}: {error}", path.display())))?,
    );
    Ok(parse_secret(&text, &path.display().to_string())?)
}
