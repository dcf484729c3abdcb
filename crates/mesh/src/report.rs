//! What `get=fjord` (and so `fjord show`) reports about mesh members, as
//! text lines: the configuration protocol's format, read back by the
//! command line and the lab.

use serde::Serialize;

/// One mesh member as `get=fjord` reports it, on one line:
/// `member=<key>,<name>,<addresses>,<endpoint>,<path>,<rtt_us>` with
/// addresses separated by spaces and `-` for an unknown field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberLine {
    pub public_key: String,
    pub name: String,
    pub addresses: Vec<String>,
    pub endpoint: Option<String>,
    /// `direct` or `relay <name>` with a session up, `connecting` without.
    pub path: String,
    pub rtt_micros: Option<u64>,
}

impl MemberLine {
    pub fn to_line(&self) -> String {
        format!(
            "member={},{},{},{},{},{}",
            self.public_key,
            self.name,
            self.addresses.join(" "),
            self.endpoint.as_deref().unwrap_or("-"),
            self.path,
            self.rtt_micros
                .map_or("-".to_string(), |rtt| rtt.to_string()),
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
        fields.next().is_none().then_some(Self {
            public_key,
            name,
            addresses,
            endpoint,
            path,
            rtt_micros,
        })
    }
}
