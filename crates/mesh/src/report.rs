//! What `get=fjord` (and so `fjord show`) reports about mesh members, as
//! text lines: the configuration protocol's format, read back by the
//! command line and the lab.

use serde::Serialize;

use crate::membership::ExitNodeStatus;

/// One mesh member as `get=fjord` reports it, on one line:
/// `member=<key>,<name>,<addresses>,<endpoint>,<path>,<rtt_us>,<path_mtu>,<expires>,<groups>,<routes>`
/// with addresses, groups and routes separated by spaces and `-` for an
/// unknown field (or no groups, no routes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberLine {
    pub public_key: String,
    pub name: String,
    pub addresses: Vec<String>,
    pub endpoint: Option<String>,
    /// `direct` or `relay <name>` with a session up; without one,
    /// `connecting` while it is being opened, `on-demand` when none is
    /// kept (a large mesh: the first packet for the member opens one).
    pub path: String,
    pub rtt_micros: Option<u64>,
    /// The largest datagram (IP header included) probing found to get
    /// through to the member; `None` until the first search settles.
    pub path_mtu: Option<u64>,
    /// When the member's certificate expires (Unix seconds); `None` from
    /// a fjord that predates it, or for a listed member.
    pub expires_at: Option<u64>,
    /// The groups the member's certificate or `Member =` line names;
    /// empty from a fjord that predates groups.
    pub groups: Vec<String>,
    /// The networks behind the member its certificate routes to it;
    /// empty from a fjord that predates routes.
    pub routes: Vec<String>,
}

/// This node's choice of exit node, as `get=fjord` reports it:
/// `exit_node=<name> <state>`, the state `serving`, `unknown` (no member
/// of that name) or `no-default-route` (its certificate routes none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExitNodeLine {
    pub name: String,
    pub state: String,
}

/// The prefix of the exit node's `get=fjord` line.
pub const EXIT_NODE_PREFIX: &str = "exit_node=";

impl ExitNodeLine {
    /// The line for `status`; `None` when no exit node was chosen.
    pub fn of(status: &ExitNodeStatus) -> Option<Self> {
        let (name, state) = match status {
            ExitNodeStatus::NotChosen => return None,
            ExitNodeStatus::Serving { name, .. } => (name, "serving"),
            ExitNodeStatus::Unknown { name } => (name, "unknown"),
            ExitNodeStatus::NoDefaultRoute { name } => (name, "no-default-route"),
        };
        Some(Self {
            name: name.clone(),
            state: state.to_string(),
        })
    }

    pub fn to_line(&self) -> String {
        format!("{EXIT_NODE_PREFIX}{} {}", self.name, self.state)
    }

    /// Parses the value of an `exit_node=` line.
    pub fn parse(value: &str) -> Option<Self> {
        let (name, state) = value.split_once(' ')?;
        Some(Self {
            name: name.to_string(),
            state: state.to_string(),
        })
    }

    /// What a user reads: the exit node, or why it carries nothing.
    pub fn describe(&self) -> String {
        match self.state.as_str() {
            "serving" => format!(
                "{} (everything without a more specific route goes there)",
                self.name
            ),
            "unknown" => format!(
                "{}: warning: no member of that name is known; it takes effect when one joins",
                self.name
            ),
            "no-default-route" => format!(
                "{}: warning: its certificate routes no 0.0.0.0/0 or ::/0 (sign it with --route 0.0.0.0/0)",
                self.name
            ),
            other => format!("{} ({other})", self.name),
        }
    }
}

impl MemberLine {
    pub fn to_line(&self) -> String {
        format!(
            "member={},{},{},{},{},{},{},{},{},{}",
            self.public_key,
            self.name,
            self.addresses.join(" "),
            self.endpoint.as_deref().unwrap_or("-"),
            self.path,
            self.rtt_micros
                .map_or("-".to_string(), |rtt| rtt.to_string()),
            self.path_mtu.map_or("-".to_string(), |mtu| mtu.to_string()),
            self.expires_at
                .map_or("-".to_string(), |expires| expires.to_string()),
            dash_if_empty(&self.groups),
            dash_if_empty(&self.routes),
        )
    }

    /// Parses the value of a `member=` line; `None` if it is malformed.
    pub fn parse(value: &str) -> Option<Self> {
        let mut fields = value.split(',');
        let public_key = fields.next()?.to_string();
        let name = fields.next()?.to_string();
        let addresses = fields
            .next()?
            .split(' ')
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
        let endpoint = Some(fields.next()?).filter(|e| *e != "-").map(String::from);
        let path = fields.next()?.to_string();
        let rtt_micros = match fields.next()? {
            "-" => None,
            rtt => Some(rtt.parse().ok()?),
        };
        // Absent from a fjord that predates path MTU probing.
        let path_mtu = match fields.next() {
            None | Some("-") => None,
            Some(mtu) => Some(mtu.parse().ok()?),
        };
        // Absent from a fjord that predates certificate renewal.
        let expires_at = match fields.next() {
            None | Some("-") => None,
            Some(expires) => Some(expires.parse().ok()?),
        };
        // Absent from a fjord that predates groups, or routes.
        let groups = space_list(fields.next());
        let routes = space_list(fields.next());
        fields.next().is_none().then_some(Self {
            public_key,
            name,
            addresses,
            endpoint,
            path,
            rtt_micros,
            path_mtu,
            expires_at,
            groups,
            routes,
        })
    }
}

fn dash_if_empty(items: &[String]) -> String {
    if items.is_empty() {
        "-".to_string()
    } else {
        items.join(" ")
    }
}

fn space_list(field: Option<&str>) -> Vec<String> {
    match field {
        None | Some("-") => Vec::new(),
        Some(list) => list
            .split(' ')
            .filter(|item| !item.is_empty())
            .map(String::from)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_lines_round_trip_with_their_path_mtu() {
        let line = MemberLine {
            public_key: "key".to_string(),
            name: "node1".to_string(),
            addresses: vec!["198.19.0.2/32".to_string()],
            endpoint: Some("198.18.0.2:51820".to_string()),
            path: "direct".to_string(),
            rtt_micros: Some(310),
            path_mtu: Some(1276),
            expires_at: Some(1_800_000_000),
            groups: Vec::new(),
            routes: Vec::new(),
        };
        let text = line.to_line();
        assert!(text.ends_with(",310,1276,1800000000,-,-"), "{text}");
        assert_eq!(
            MemberLine::parse(&text["member=".len()..]),
            Some(line.clone())
        );
        let grouped = MemberLine {
            groups: vec!["ops".to_string(), "db".to_string()],
            ..line
        };
        let text = grouped.to_line();
        assert!(text.ends_with(",1800000000,ops db,-"), "{text}");
        assert_eq!(
            MemberLine::parse(&text["member=".len()..]),
            Some(grouped.clone())
        );
        let routing = MemberLine {
            routes: vec!["198.18.200.0/24".to_string(), "0.0.0.0/0".to_string()],
            ..grouped
        };
        let text = routing.to_line();
        assert!(
            text.ends_with(",ops db,198.18.200.0/24 0.0.0.0/0"),
            "{text}"
        );
        assert_eq!(MemberLine::parse(&text["member=".len()..]), Some(routing));
        // A fjord from before routes sends one field less.
        let before_routes = MemberLine::parse("key,node1,,-,connecting,-,-,-,ops").unwrap();
        assert!(before_routes.routes.is_empty());
        // A fjord from before path MTU probing sends one field less.
        let older = MemberLine::parse("key,node1,,-,connecting,-").unwrap();
        assert_eq!(older.path_mtu, None);
    }

    #[test]
    fn exit_node_lines_round_trip_and_say_what_is_wrong() {
        let unknown = ExitNodeStatus::Unknown { name: "gw".into() };
        let line = ExitNodeLine::of(&unknown).unwrap();
        assert_eq!(line.to_line(), "exit_node=gw unknown");
        assert_eq!(ExitNodeLine::parse("gw unknown"), Some(line.clone()));
        assert!(line.describe().contains("warning: no member of that name"));
        assert_eq!(ExitNodeLine::of(&ExitNodeStatus::NotChosen), None);
    }
}
