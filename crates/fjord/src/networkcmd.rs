//! `fjord network`: the network key and the certificates of its members.
//!
//! ```text
//! fjord network new > network.key              a new secret network key
//! fjord network pubkey < network.key           its public key ([Mesh] Network)
//! fjord network sign --network-key network.key --public-key KEY \
//!     --name NAME --address 198.19.0.2/32 [--group ops ...]
//!     [--route 198.18.200.0/24 ...]            (a network behind it;
//!                                              0.0.0.0/0 offers an exit node)
//!     [--valid 12h | --days 365]               a certificate
//! fjord network revoke --network-key network.key --public-key KEY
//! fjord network policy --network-key network.key < policy.conf > policy.signed
//!                                              the policy with its signature line
//! fjord network policy --check --network PUBLIC_KEY < policy.signed
//! ```
//!
//! The secret network key never goes onto a node: it only signs. A key
//! file readable by group or others is refused, as config files are.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Subcommand;
use fjord_mesh::policy::{MAX_POLICY_BYTES, PolicyError, SignedPolicy};
use fjord_mesh::{Cidr, Grant, Group, NetworkPublicKey, NetworkSecret};
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
        /// A group to put the node in, for the network policy (repeat for
        /// more, up to 16): 1 to 31 of a-z, 0-9, '_', '-', starting with
        /// a letter.
        #[arg(long = "group", value_name = "GROUP")]
        groups: Vec<String>,
        /// A network behind the node that members route to it (repeat for
        /// more, up to 16): `198.18.200.0/24`, `fd00:1::/64`; `0.0.0.0/0`
        /// or `::/0` lets members choose it as their exit node.
        #[arg(long = "route", value_name = "PREFIX")]
        routes: Vec<String>,
        /// Days the certificate stays valid [default: 365].
        #[arg(long, conflicts_with = "valid",
              value_parser = clap::value_parser!(u32).range(1..=36_500))]
        days: Option<u32>,
        /// How long the certificate stays valid, for short-lived ones
        /// renewed by a reload: a number and a unit, `s`, `m`, `h`, `d`
        /// or `w` (`90m`, `12h`, `30d`); at least a minute.
        #[arg(long, value_name = "DURATION", value_parser = parse_validity)]
        valid: Option<Duration>,
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
    /// Sign the network policy read on stdin (who may reach whom) and
    /// print it with its signature line; with --check, verify a signed one.
    Policy {
        /// File holding the secret network key, to sign with.
        #[arg(long, required_unless_present = "check", conflicts_with = "check")]
        network_key: Option<PathBuf>,
        /// Check the signed policy on stdin instead of signing one.
        #[arg(long, requires = "network")]
        check: bool,
        /// The network's public key (`[Mesh] Network`), with --check.
        #[arg(long, requires = "check")]
        network: Option<String>,
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
            groups,
            routes,
            days,
            valid,
        } => {
            let secret = read_secret(&network_key)?;
            let node_key = parse_public_key(&public_key)?;
            let addresses: Vec<Cidr> = parse_each("--address", &addresses)?;
            let groups: Vec<Group> = parse_each("--group", &groups)?;
            let routes: Vec<Cidr> = parse_each("--route", &routes)?;
            check_routes(&routes)?;
            let now = unix_now();
            let validity = valid
                .unwrap_or_else(|| Duration::from_secs(u64::from(days.unwrap_or(365)) * 86_400));
            let expires = now + validity.as_secs();
            let grant = Grant {
                name: &name,
                addresses: &addresses,
                groups: &groups,
                routes: &routes,
            };
            let certificate = secret
                .issue(node_key, &grant, now, expires)
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
        NetworkCommand::Policy {
            network_key,
            check: _,
            network,
        } => {
            let text = read_policy_input()?;
            let in_input = |error: PolicyError| UsageError(error.in_file(STDIN).to_string());
            match (network_key, network) {
                (Some(path), _) => {
                    let secret = read_secret(&path)?;
                    let signed = SignedPolicy::sign(&text, &secret).map_err(in_input)?;
                    out.write_all(signed.text())?;
                }
                (None, Some(network)) => {
                    let network: NetworkPublicKey = network
                        .trim()
                        .parse()
                        .map_err(|error| UsageError(format!("--network: {error}")))?;
                    let signed = SignedPolicy::verify(&text, &network).map_err(in_input)?;
                    writeln!(
                        out,
                        "policy version {}, {} rules, signed by the network",
                        signed.policy.version(),
                        signed.policy.rules().len()
                    )?;
                }
                // clap requires one or the other.
                (None, None) => return Err(UsageError("--network-key or --check".into()).into()),
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// How `fjord network policy` names its input in messages.
const STDIN: &str = "standard input";

/// The policy on standard input, refusing more than a policy may hold.
fn read_policy_input() -> anyhow::Result<Vec<u8>> {
    let mut text = Vec::new();
    std::io::stdin()
        .take(MAX_POLICY_BYTES as u64 + 1)
        .read_to_end(&mut text)
        .map_err(|error| anyhow::anyhow!("reading the policy from {STDIN}: {error}"))?;
    if text.len() > MAX_POLICY_BYTES {
        return Err(UsageError(format!(
            "{STDIN}: the policy is longer than {MAX_POLICY_BYTES} bytes"
        ))
        .into());
    }
    Ok(text)
}

/// Longest `--valid`: what `--days` allows.
const MAX_VALIDITY: Duration = Duration::from_secs(36_500 * 86_400);

/// `--valid`: `12h`, `90m`, `30d` and the like.
fn parse_validity(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit: add s, m, h, d or w (e.g. 12h)"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number (e.g. 12h)"))?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{text}`: use s, m, h, d or w"
            ));
        }
    };
    let validity = number
        .checked_mul(unit_secs)
        .map(Duration::from_secs)
        .filter(|validity| *validity <= MAX_VALIDITY)
        .ok_or_else(|| format!("`{text}` is longer than 100 years"))?;
    if validity < Duration::from_secs(60) {
        return Err(format!("`{text}` is shorter than a minute"));
    }
    Ok(validity)
}

/// Every value of a repeated option, or the first that does not parse.
fn parse_each<T: std::str::FromStr>(option: &str, values: &[String]) -> Result<Vec<T>, UsageError>
where
    T::Err: std::fmt::Display,
{
    values
        .iter()
        .map(|text| {
            text.parse::<T>()
                .map_err(|error| UsageError(format!("{option} {text}: {error}")))
        })
        .collect()
}

/// A route is a network: `198.18.200.7/24` names a host in one, most
/// likely a typo for the network, and is refused rather than guessed.
fn check_routes(routes: &[Cidr]) -> Result<(), UsageError> {
    match routes.iter().find(|route| route.network() != **route) {
        Some(route) => Err(UsageError(format!(
            "--route {route}: host bits are set; the network is {}",
            route.network()
        ))),
        None => Ok(()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_takes_a_number_and_a_unit() {
        assert_eq!(parse_validity("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_validity("90m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_validity("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_validity("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in [
            "12",
            "h",
            "12x",
            "59s",
            "-1h",
            "1.5h",
            "",
            "36501d",
            "99999999999999999w",
        ] {
            assert!(parse_validity(bad).is_err(), "{bad}");
        }
    }
}
