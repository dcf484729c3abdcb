//! Interface addresses, routes and policy rules, set with `ip` as wg-quick
//! sets them, and undone in reverse order when the interface goes down.
//!
//! Routes for allowed IPs: none with `Table = off`; into the named table
//! with `Table = N`; otherwise (`auto`) a route per prefix unless an
//! existing route on the interface already covers it, and for a default
//! route (`/0`) wg-quick's policy routing: encrypted packets carry a
//! firewall mark and use the main table, everything else uses a table
//! holding only the tunnel's default route.

use std::process::Command;

use fjord_mesh::Cidr;

/// wg-quick's first choice of table (and mark) for default routes.
const DEFAULT_ROUTE_TABLE: u32 = 51820;

#[derive(Debug, thiserror::Error)]
#[error("`{command}` failed: {detail}")]
pub struct NetconfError {
    command: String,
    detail: String,
}

/// Runs `ip ARGS…`, returning stdout.
pub fn ip(args: &[&str]) -> Result<String, NetconfError> {
    let command = format!("ip {}", args.join(" "));
    tracing::debug!(%command, "run");
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|error| NetconfError {
            command: command.clone(),
            detail: error.to_string(),
        })?;
    if !output.status.success() {
        return Err(NetconfError {
            command,
            detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn family(cidr: &Cidr) -> &'static str {
    if cidr.is_ipv4() { "-4" } else { "-6" }
}

/// `Table =` as wg-quick reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteTable {
    Auto,
    Off,
    Named(u32),
}

impl RouteTable {
    pub fn parse(text: Option<&str>) -> Result<Self, String> {
        match text.map(str::trim) {
            None => Ok(Self::Auto),
            Some(t) if t.eq_ignore_ascii_case("auto") => Ok(Self::Auto),
            Some(t) if t.eq_ignore_ascii_case("off") => Ok(Self::Off),
            Some(t) => t
                .parse()
                .map(Self::Named)
                .map_err(|_| format!("Table = {t}: expected off, auto or a table number")),
        }
    }
}

/// Undo steps recorded while configuring, run in reverse on drop.
#[derive(Default)]
pub struct Netconf {
    undo: Vec<Vec<String>>,
}

impl Netconf {
    /// Gives the interface its addresses, MTU, and brings it up.
    pub fn configure_link(
        &mut self,
        interface: &str,
        addresses: &[Cidr],
        mtu: u16,
    ) -> Result<(), NetconfError> {
        for address in addresses {
            ip(&[
                family(address),
                "address",
                "add",
                &address.to_string(),
                "dev",
                interface,
            ])?;
        }
        ip(&[
            "link",
            "set",
            "mtu",
            &mtu.to_string(),
            "up",
            "dev",
            interface,
        ])?;
        Ok(())
    }

    /// Adds routes for `allowed_ips`, most specific first. A default route
    /// uses `fwmark` (the UDP socket's mark, chosen with [`free_table`]
    /// when the file sets none) as its table and mark.
    pub fn add_routes(
        &mut self,
        interface: &str,
        allowed_ips: &[Cidr],
        table: RouteTable,
        fwmark: u32,
    ) -> Result<(), NetconfError> {
        let mut prefixes: Vec<Cidr> = allowed_ips.iter().map(Cidr::network).collect();
        prefixes.sort_by_key(|cidr| std::cmp::Reverse(cidr.prefix_len()));
        prefixes.dedup();
        for prefix in prefixes {
            let text = prefix.to_string();
            match table {
                RouteTable::Off => {}
                RouteTable::Named(number) => {
                    ip(&[
                        family(&prefix),
                        "route",
                        "add",
                        &text,
                        "dev",
                        interface,
                        "table",
                        &number.to_string(),
                    ])?;
                }
                RouteTable::Auto if prefix.prefix_len() == 0 => {
                    self.add_default_route(interface, &prefix, fwmark)?;
                }
                RouteTable::Auto => {
                    let covered = ip(&[
                        family(&prefix),
                        "route",
                        "show",
                        "dev",
                        interface,
                        "match",
                        &text,
                    ])?;
                    if covered.trim().is_empty() {
                        ip(&[family(&prefix), "route", "add", &text, "dev", interface])?;
                    }
                }
            }
        }
        Ok(())
    }

    fn add_default_route(
        &mut self,
        interface: &str,
        prefix: &Cidr,
        table: u32,
    ) -> Result<(), NetconfError> {
        let table_text = table.to_string();
        let proto = family(prefix);
        for rule in default_route_rules(&table_text) {
            ip(&[&[proto, "rule", "add"], rule.as_slice()].concat())?;
            self.undo.push(
                [&[proto, "rule", "del"], rule.as_slice()]
                    .concat()
                    .into_iter()
                    .map(String::from)
                    .collect(),
            );
        }
        route_default(interface, prefix, &table_text)
    }
}

/// wg-quick's policy rules for a default route in `table` (also the
/// sockets' firewall mark), as `ip rule` arguments after `add`/`del`:
/// the main table answers first for all but its default route, so the
/// underlay's own routes keep working; what is left and unmarked (not
/// the tunnel's own datagrams) looks up `table`, which holds only the
/// route into the tunnel.
fn default_route_rules(table: &str) -> [Vec<&str>; 2] {
    [
        vec!["not", "fwmark", table, "table", table],
        vec!["table", "main", "suppress_prefixlength", "0"],
    ]
}

/// The route into the tunnel in `table`, once its rules exist.
fn route_default(interface: &str, prefix: &Cidr, table: &str) -> Result<(), NetconfError> {
    ip(&[
        family(prefix),
        "route",
        "add",
        &prefix.to_string(),
        "dev",
        interface,
        "table",
        table,
    ])?;
    if prefix.is_ipv4() {
        mark_sources_valid();
    }
    Ok(())
}

/// Lets replies to the tunnel's marked datagrams pass reverse-path
/// checks, as wg-quick does for a default route. Needs root: fjord run
/// with `--user` sets it at start, before giving root up.
pub fn mark_sources_valid() {
    if let Err(error) = std::fs::write("/proc/sys/net/ipv4/conf/all/src_valid_mark", "1") {
        tracing::warn!(%error, "could not set net.ipv4.conf.all.src_valid_mark=1");
    }
}

/// A default route into `interface` (an exit node's) with wg-quick's
/// policy routing in `table`; [`remove_default_route`] undoes it.
pub fn add_default_route(interface: &str, prefix: &Cidr, table: u32) -> Result<(), NetconfError> {
    let table_text = table.to_string();
    let proto = family(prefix);
    let [first, second] = default_route_rules(&table_text);
    ip(&[&[proto, "rule", "add"], first.as_slice()].concat())?;
    if let Err(error) = ip(&[&[proto, "rule", "add"], second.as_slice()].concat()) {
        let _ = ip(&[&[proto, "rule", "del"], first.as_slice()].concat());
        return Err(error);
    }
    route_default(interface, prefix, &table_text).inspect_err(|_| {
        remove_default_rules(proto, &table_text);
    })
}

/// Removes what [`add_default_route`] added. The route may be gone with
/// the interface already; the rules are what must not stay.
pub fn remove_default_route(interface: &str, prefix: &Cidr, table: u32) {
    let table_text = table.to_string();
    let proto = family(prefix);
    let text = prefix.to_string();
    let route = [
        "route",
        "del",
        &text,
        "dev",
        interface,
        "table",
        &table_text,
    ];
    if let Err(error) = ip(&[&[proto], route.as_slice()].concat()) {
        tracing::debug!(%error, "default route already gone");
    }
    remove_default_rules(proto, &table_text);
}

fn remove_default_rules(proto: &str, table: &str) {
    for rule in default_route_rules(table).iter().rev() {
        if let Err(error) = ip(&[&[proto, "rule", "del"], rule.as_slice()].concat()) {
            tracing::warn!(%error, "could not remove a default route's policy rule");
        }
    }
}

/// The first table from 51820 up that holds no routes.
/// Removes the route of `prefix` through `interface` (an allowed IP that a
/// reload took away), from the table routes were added to.
pub fn remove_route(interface: &str, prefix: &Cidr, table: RouteTable) -> Result<(), NetconfError> {
    let text = prefix.network().to_string();
    let mut args = vec![family(prefix), "route", "del", &text, "dev", interface];
    let number;
    match table {
        RouteTable::Off => return Ok(()),
        RouteTable::Named(named) => {
            number = named.to_string();
            args.extend(["table", &number]);
        }
        RouteTable::Auto => {}
    }
    ip(&args).map(drop)
}

pub fn free_table() -> Result<u32, NetconfError> {
    let mut table = DEFAULT_ROUTE_TABLE;
    loop {
        let text = table.to_string();
        let v4 = ip(&["-4", "route", "show", "table", &text]).unwrap_or_default();
        let v6 = ip(&["-6", "route", "show", "table", &text]).unwrap_or_default();
        if v4.trim().is_empty() && v6.trim().is_empty() {
            return Ok(table);
        }
        table += 1;
    }
}

impl Drop for Netconf {
    fn drop(&mut self) {
        while let Some(step) = self.undo.pop() {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            if let Err(error) = ip(&args) {
                tracing::warn!(%error, "could not undo a routing change");
            }
        }
    }
}

/// Runs a wg-quick hook (`PreUp` …) with `%i` replaced by the interface name.
pub fn run_hook(kind: &str, command: &str, interface: &str) -> Result<(), NetconfError> {
    let command = command.replace("%i", interface);
    tracing::info!(hook = kind, %command, "running hook");
    let status = Command::new("bash")
        .arg("-c")
        .arg(&command)
        .status()
        .map_err(|error| NetconfError {
            command: command.clone(),
            detail: error.to_string(),
        })?;
    if !status.success() {
        return Err(NetconfError {
            command,
            detail: status.to_string(),
        });
    }
    Ok(())
}
