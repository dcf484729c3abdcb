//! What `get=fjord` (and so `fjord show`) reports about mesh members, as
//! text lines: the configuration protocol's format, read back by the
//! command line and the lab.

use serde::Serialize;

/// One mesh member as `get=fjord` reports it, on one line:
/// `member=<key>,<name>,<addresses>,<endpoint>,<path>,<rtt_us>,<path_mtu>,<expires>,<groups>`
/// with addresses and groups separated by spaces and `-` for an unknown
/// field (or no groups).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberLine {
    pub public_key: String,
    pub name: String,
    pub addresses: Vec<String>,
    pub endpoint: Option<String>,
    /// `direct` or `relay <name>` with a session up, `connecting` without.
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
}

impl MemberLine {
    pub fn to_line(&self) -> String {
        format!(
            "member={},{},{},{},{},{},{},{},{}",
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
            if self.groups.is_empty() {
                "-".to_string()
            } else {
                self.groups.join(" ")
            },
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
        // Absent from a fjord that predates groups.
        let groups = match fields.next() {
            None | Some("-") => Vec::new(),
            Some(groups) => groups
                .split(' ')
                .filter(|group| !group.is_empty())
                .map(String::from)
                .collect(),
        };
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
        })
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
        };
        let text = line.to_line();
        assert!(text.ends_with(",310,1276,1800000000,-"), "{text}");
        assert_eq!(
            MemberLine::parse(&text["member=".len()..]),
            Some(line.clone())
        );
        let grouped = MemberLine {
            groups: vec!["ops".to_string(), "db".to_string()],
            ..line
        };
        let text = grouped.to_line();
        assert!(text.ends_with(",1800000000,ops db"), "{text}");
        assert_eq!(MemberLine::parse(&text["member=".len()..]), Some(grouped));
        // A fjord from before path MTU probing sends one field less.
        let older = MemberLine::parse("key,node1,,-,connecting,-").unwrap();
        assert_eq!(older.path_mtu, None);
    }
}
