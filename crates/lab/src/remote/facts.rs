//! What a host is, as results.json records it: kernel, CPU model and
//! cores, and the interface holding its underlay address (driver, speed,
//! MTU). One shell command over the host's connection, printing
//! `key=value` lines that [`parse`] reads; a fact the host cannot tell
//! (no `ethtool`, a virtual NIC without speed) stays empty.

use super::host::RemoteHost;
use super::ssh::{RemoteError, quote};
use crate::results::HostFacts;

/// The facts of `host`, without system versions and setup time.
pub fn gather(host: &RemoteHost) -> Result<HostFacts, RemoteError> {
    let underlay = host.host.underlay.to_string();
    let script = format!(
        "echo kernel=$(uname -r); echo cores=$(nproc); \
         echo cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2-); \
         i=$(ip -o addr show to {address} | {{ read -r _ n _; echo \"$n\"; }}); \
         echo nic=$i; \
         if [ -n \"$i\" ]; then \
           echo nic_driver=$(ethtool -i \"$i\" 2>/dev/null | sed -n 's/^driver: //p'); \
           echo nic_speed=$(cat /sys/class/net/\"$i\"/speed 2>/dev/null); \
           echo mtu=$(cat /sys/class/net/\"$i\"/mtu 2>/dev/null); \
         fi",
        address = quote(&underlay)
    );
    let text = host.connection().run("describe the host", &script)?;
    let mut facts = parse(&text);
    facts.name = host.host.name.clone();
    facts.role = host.host.role.name().to_string();
    facts.underlay = underlay;
    Ok(facts)
}

/// Reads the `key=value` lines of [`gather`]'s script.
pub fn parse(text: &str) -> HostFacts {
    let mut facts = HostFacts::default();
    for (key, value) in text.lines().filter_map(|line| line.split_once('=')) {
        let value = value.trim();
        match key.trim() {
            "kernel" => facts.kernel = value.to_string(),
            "cores" => facts.cores = value.parse().unwrap_or(0),
            "cpu_model" => facts.cpu_model = value.to_string(),
            "nic" => facts.nic = value.to_string(),
            "nic_driver" => facts.nic_driver = value.to_string(),
            // Links without a speed (down, or virtual) report -1.
            "nic_speed" => facts.nic_speed_mbps = value.parse().ok(),
            "mtu" => facts.mtu = value.parse().ok(),
            _ => {}
        }
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_host_said_and_leaves_the_rest_empty() {
        let facts = parse(
            "kernel=6.18.0-1-amd64\ncores=2\ncpu_model= Intel(R) Xeon(R) Platinum\n\
             nic=eth0\nnic_driver=veth\nnic_speed=10000\nmtu=1500\n",
        );
        assert_eq!(facts.kernel, "6.18.0-1-amd64");
        assert_eq!(facts.cores, 2);
        assert_eq!(facts.cpu_model, "Intel(R) Xeon(R) Platinum");
        assert_eq!(
            (facts.nic.as_str(), facts.nic_driver.as_str()),
            ("eth0", "veth")
        );
        assert_eq!(
            (facts.nic_speed_mbps, facts.mtu),
            (Some(10_000), Some(1500))
        );
        let bare = parse("kernel=6.1\ncores=\nnic=\nnic_speed=-1\n");
        assert_eq!((bare.cores, bare.nic_speed_mbps, bare.mtu), (0, None, None));
    }
}
