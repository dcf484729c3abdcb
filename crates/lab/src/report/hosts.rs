//! The "Hosts" table of a run across hosts (`--hosts`): each host as the
//! lab found it, and each system's version there. Runs in namespaces
//! have no hosts and no such table.

use super::tables::Table;
use crate::results::RunRecord;

/// The table, or `None` for a run in namespaces.
pub(super) fn hosts_table(record: &RunRecord) -> Option<Table> {
    if record.hosts.is_empty() {
        return None;
    }
    let rows = record
        .hosts
        .iter()
        .map(|host| {
            let speed = host
                .nic_speed_mbps
                .map_or_else(|| "—".to_string(), |mbps| format!("{mbps} Mbit/s"));
            let mtu = host
                .mtu
                .map_or_else(|| "—".to_string(), |mtu| mtu.to_string());
            let versions: Vec<String> = host
                .systems
                .iter()
                .map(|(system, version)| format!("{system}: {version}"))
                .collect();
            vec![
                host.name.clone(),
                host.role.clone(),
                host.underlay.clone(),
                format!("Linux {}", host.kernel),
                format!("{} × {}", host.cores, host.cpu_model),
                format!("{} ({}, {speed})", host.nic, host.nic_driver),
                mtu,
                versions.join("; "),
                format!("{:.1} s", host.setup_secs),
            ]
        })
        .collect();
    Some(Table {
        title: "Hosts".to_string(),
        caption: String::new(),
        header: [
            "host", "role", "underlay", "kernel", "CPU", "NIC", "MTU", "versions", "setup",
        ]
        .map(String::from)
        .to_vec(),
        label_columns: 9,
        rows,
        notes: Vec::new(),
    })
}
