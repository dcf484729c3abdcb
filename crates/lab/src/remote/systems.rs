//! The systems the lab drives across hosts: `bare` (the underlay between
//! the inventory's addresses) and `fjord` (the lab's own binary on each
//! host, configured by the same [`Fjord`] driver and the same
//! [`point_to_point_between`] sides as between namespaces). Each side is
//! a background process in the host's run directory; the right side
//! starts first so the left one's first handshake finds it listening.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::host::RemoteHost;
use super::inventory::Overlay;
use super::ssh::{RemoteError, quote};
use crate::measure::CpuCharge;
use crate::systems::wireguard::{Fjord, Initiator, SideAddresses, WgSide, point_to_point_between};

/// The underlay's MTU as `bare` reports it, as between namespaces.
const BARE_MTU: u16 = 1500;
/// How long a tunnel may take to answer its first ping.
const FIRST_PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A system the lab can run across hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteSystem {
    Bare,
    Fjord,
}

impl RemoteSystem {
    /// The system called `name`, if the lab drives it across hosts.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "bare" => Some(Self::Bare),
            "fjord" => Some(Self::Fjord),
            _ => None,
        }
    }

    /// Its version on `host`.
    pub fn version(self, host: &RemoteHost) -> Result<String, RemoteError> {
        let script = match self {
            Self::Bare => "echo kernel $(uname -r)".to_string(),
            Self::Fjord => format!("{} --version", quote(host.binary())),
        };
        Ok(host
            .connection()
            .run(&format!("{} version", self.name()), &script)?
            .trim()
            .to_string())
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Bare => "bare",
            Self::Fjord => "fjord",
        }
    }

    /// Brings the system up between `left` and `right`.
    pub fn start(
        self,
        left: &mut RemoteHost,
        right: &mut RemoteHost,
        overlay: &Overlay,
    ) -> Result<Tunnel, RemoteError> {
        match self {
            Self::Bare => Ok(Tunnel {
                left_address: left.host.underlay,
                right_address: right.host.underlay,
                mtu: BARE_MTU,
                sides: Vec::new(),
            }),
            Self::Fjord => start_fjord(left, right, overlay),
        }
    }
}

/// A system that is up: where traffic goes, and the side processes to
/// stop ([`Tunnel::stop`]; the hosts' clean-up stops them otherwise).
pub struct Tunnel {
    pub left_address: IpAddr,
    pub right_address: IpAddr,
    /// The largest IP packet it carries unfragmented.
    pub mtu: u16,
    /// The names of the side processes on the left host and the right.
    sides: Vec<(End, String)>,
}

#[derive(Debug, Clone, Copy)]
enum End {
    Left,
    Right,
}

impl Tunnel {
    /// Whether it has processes to charge CPU to (bare has none).
    pub fn has_processes(&self) -> bool {
        !self.sides.is_empty()
    }

    /// CPU time its side processes used so far, on both hosts together,
    /// and their resident memory now.
    pub fn usage(&self, left: &RemoteHost, right: &RemoteHost) -> Result<CpuCharge, RemoteError> {
        let mut total = CpuCharge {
            cpu: Duration::ZERO,
            resident_bytes: 0,
        };
        for (end, name) in &self.sides {
            let side = match end {
                End::Left => left.usage(name)?,
                End::Right => right.usage(name)?,
            };
            total.cpu += side.cpu;
            total.resident_bytes += side.resident_bytes;
        }
        Ok(total)
    }

    /// Stops the sides (left first, the initiator).
    pub fn stop(&self, left: &RemoteHost, right: &RemoteHost) -> Result<(), RemoteError> {
        for (end, name) in &self.sides {
            match end {
                End::Left => left.stop(name)?,
                End::Right => right.stop(name)?,
            }
        }
        Ok(())
    }
}

fn start_fjord(
    left: &mut RemoteHost,
    right: &mut RemoteHost,
    overlay: &Overlay,
) -> Result<Tunnel, RemoteError> {
    let addresses = [
        SideAddresses {
            underlay: left.host.underlay,
            overlay: overlay.left(),
        },
        SideAddresses {
            underlay: right.host.underlay,
            overlay: overlay.right(),
        },
    ];
    let (left_side, right_side) =
        point_to_point_between(Initiator::Left, addresses, overlay.prefix_len).map_err(
            |error| RemoteError::Refused {
                host: left.name().to_string(),
                detail: format!("fjord: {error}"),
            },
        )?;
    let driver = Fjord::locate();
    let mut tunnel = Tunnel {
        left_address: IpAddr::V4(overlay.left()),
        right_address: IpAddr::V4(overlay.right()),
        mtu: left_side.mtu,
        sides: Vec::new(),
    };
    let brought_up = bring_up(left, right, &driver, [&left_side, &right_side], &mut tunnel);
    match brought_up {
        Ok(()) => Ok(tunnel),
        Err(error) => {
            // A side that came up must not outlive its failed tunnel.
            let _ = tunnel.stop(left, right);
            Err(error)
        }
    }
}

/// Starts the right side, then the left, and waits for the first ping
/// through the tunnel; each side started goes into `tunnel`.
fn bring_up(
    left: &mut RemoteHost,
    right: &mut RemoteHost,
    driver: &Fjord,
    [left_side, right_side]: [&WgSide; 2],
    tunnel: &mut Tunnel,
) -> Result<(), RemoteError> {
    start_side(right, driver, right_side, "fjord-right")?;
    tunnel.sides.push((End::Right, "fjord-right".into()));
    start_side(left, driver, left_side, "fjord-left")?;
    tunnel.sides.push((End::Left, "fjord-left".into()));

    let started = Instant::now();
    let destination = tunnel.right_address.to_string();
    loop {
        let answered = left.connection().run(
            &format!("ping {destination}"),
            &format!("ping -n -c 1 -W 1 {destination} > /dev/null && echo yes || true"),
        )?;
        if answered.trim() == "yes" {
            return Ok(());
        }
        for (host, name) in [(&*left, "fjord-left"), (&*right, "fjord-right")] {
            if !host.running(name)? {
                return Err(RemoteError::Refused {
                    host: host.name().to_string(),
                    detail: format!("fjord exited: {}", host.log_tail(name)),
                });
            }
        }
        if started.elapsed() > FIRST_PING_TIMEOUT {
            return Err(RemoteError::Refused {
                host: left.name().to_string(),
                detail: format!(
                    "fjord: no ping through the tunnel to {destination} within {FIRST_PING_TIMEOUT:?}"
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes `side`'s file and starts `fjord up` with it on `host` as `name`.
fn start_side(
    host: &mut RemoteHost,
    driver: &Fjord,
    side: &WgSide,
    name: &str,
) -> Result<(), RemoteError> {
    let file = format!("{name}.conf");
    host.write_file(&file, &driver.config_text(side))?;
    host.created_link(&side.ifname)?;
    let config = host.path(&file);
    let threads = driver.threads().map(|threads| threads.to_string());
    let mut words = vec![host.binary(), "up", config.as_str()];
    if let Some(threads) = &threads {
        words.extend(["--threads", threads.as_str()]);
    }
    host.start(name, &words)
}
