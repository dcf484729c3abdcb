//! Policy text → [`Policy`]. Each line is split into words and read left
//! to right; the first problem stops the parse with its line number.
//! Bounds on size, line length and rule count refuse oversized input
//! before any work proportional to it.

use std::fmt;

use super::{Policy, PortRange, Protocol, Rule, Selector, Traffic, Transport};
use crate::cert::{GroupNameError, valid_name};
use crate::cidr::{Cidr, CidrParseError};

/// Longest policy text, in bytes (signature line included).
pub const MAX_POLICY_BYTES: usize = 1 << 20;
/// Longest line, in bytes.
pub const MAX_POLICY_LINE_BYTES: usize = 1024;
/// Most `allow` rules in one policy.
pub const MAX_POLICY_RULES: usize = 10_000;

/// A problem in a policy, and the line it is on (`0` for the text as a
/// whole). `Display` gives `line 3: problem`; [`Self::in_file`] gives
/// `policy.conf:3: problem`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub line: usize,
    pub problem: PolicyProblem,
}

/// What is wrong with a policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyProblem {
    #[error("the policy is longer than {MAX_POLICY_BYTES} bytes")]
    TooLarge,
    #[error("not UTF-8 text")]
    NotText,
    #[error("the line is longer than {MAX_POLICY_LINE_BYTES} bytes")]
    LineTooLong,
    #[error("more than {MAX_POLICY_RULES} rules")]
    TooManyRules,
    #[error("no `version N` line")]
    NoVersion,
    #[error("a second version line (the first is line {first})")]
    SecondVersion { first: usize },
    #[error("`{0}` is not a version number (a whole number, 0 to 18446744073709551615)")]
    BadVersion(String),
    #[error(
        "unknown statement `{0}`: a line is `version N`, `allow from ... to ...` or a # comment"
    )]
    UnknownStatement(String),
    #[error("expected {expected}, found {found}")]
    Expected {
        expected: &'static str,
        found: String,
    },
    #[error(transparent)]
    BadGroup(#[from] GroupNameError),
    #[error(
        "member `{0}`: a member name is 1 to 63 characters of letters, digits, '.', '-' or '_'"
    )]
    BadMemberName(String),
    #[error("`{word}` is not `any`, `group NAME`, `member NAME` or a prefix ({error})")]
    BadParty { word: String, error: CidrParseError },
    #[error("`{0}` is not a port or port range with /tcp or /udp (e.g. 5432/tcp, 8000-8100/udp)")]
    BadPort(String),
    #[error("`{0}` is not a protocol: use tcp, udp, icmp or any")]
    UnknownProtocol(String),
    #[error(transparent)]
    Signature(#[from] super::signed::SignatureProblem),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "line {}: {}", self.line, self.problem)
        }
    }
}

impl std::error::Error for PolicyError {}

impl PolicyError {
    /// `file:line: problem` (or `file: problem` for the whole text).
    pub fn in_file<'a>(&'a self, file: &'a str) -> impl fmt::Display + 'a {
        InFile { error: self, file }
    }

    pub(super) fn at(line: usize, problem: PolicyProblem) -> Self {
        Self { line, problem }
    }
}

struct InFile<'a> {
    error: &'a PolicyError,
    file: &'a str,
}

impl fmt::Display for InFile<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.error.line {
            0 => write!(f, "{}: {}", self.file, self.error.problem),
            line => write!(f, "{}:{line}: {}", self.file, self.error.problem),
        }
    }
}

impl Policy {
    /// Parses policy text; bytes, so that text which is not UTF-8 gets a
    /// line number too.
    pub fn parse(text: &[u8]) -> Result<Self, PolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::at(0, PolicyProblem::TooLarge));
        }
        let mut version: Option<(u64, usize)> = None;
        let mut rules = Vec::new();
        let mut rule_lines = Vec::new();
        for (index, line) in text.split(|&byte| byte == b'\n').enumerate() {
            let number = index + 1;
            let at = |problem| PolicyError::at(number, problem);
            if line.len() > MAX_POLICY_LINE_BYTES {
                return Err(at(PolicyProblem::LineTooLong));
            }
            let line = std::str::from_utf8(line).map_err(|_| at(PolicyProblem::NotText))?;
            let line = line.split('#').next().unwrap_or_default();
            let mut words = Words(line.split_whitespace());
            match words.0.next() {
                None => {}
                Some("version") => {
                    if let Some((_, first)) = version {
                        return Err(at(PolicyProblem::SecondVersion { first }));
                    }
                    version = Some((read_version(&mut words).map_err(at)?, number));
                }
                Some("allow") => {
                    if rules.len() == MAX_POLICY_RULES {
                        return Err(at(PolicyProblem::TooManyRules));
                    }
                    rules.push(read_rule(&mut words).map_err(at)?);
                    rule_lines.push(number);
                }
                Some(other) => {
                    return Err(at(PolicyProblem::UnknownStatement(other.to_owned())));
                }
            }
        }
        let (version, _) = version.ok_or(PolicyError::at(0, PolicyProblem::NoVersion))?;
        Ok(Self {
            version,
            rules,
            rule_lines,
        })
    }
}

/// The words of one line.
struct Words<'a>(std::str::SplitWhitespace<'a>);

impl<'a> Words<'a> {
    /// The next word, or what was expected instead of the end of the line.
    fn expect(&mut self, expected: &'static str) -> Result<&'a str, PolicyProblem> {
        self.0.next().ok_or(PolicyProblem::Expected {
            expected,
            found: "the end of the line".to_owned(),
        })
    }

    /// The next word, which must be `keyword`.
    fn keyword(&mut self, keyword: &'static str) -> Result<(), PolicyProblem> {
        match self.expect(keyword)? {
            word if word == keyword => Ok(()),
            word => Err(PolicyProblem::Expected {
                expected: keyword,
                found: format!("`{word}`"),
            }),
        }
    }

    fn end(&mut self) -> Result<(), PolicyProblem> {
        match self.0.next() {
            None => Ok(()),
            Some(word) => Err(PolicyProblem::Expected {
                expected: "the end of the line",
                found: format!("`{word}`"),
            }),
        }
    }
}

/// The number after `version`, alone on its line.
fn read_version(words: &mut Words<'_>) -> Result<u64, PolicyProblem> {
    let word = words.expect("a version number")?;
    let version = word
        .parse()
        .map_err(|_| PolicyProblem::BadVersion(word.to_owned()))?;
    words.end()?;
    Ok(version)
}

/// `from <who> to <who> <what>`, after `allow`.
fn read_rule(words: &mut Words<'_>) -> Result<Rule, PolicyProblem> {
    words.keyword("from")?;
    let from = read_selector(words)?;
    words.keyword("to")?;
    let to = read_selector(words)?;
    let traffic = match words.expect("`port` or `proto`")? {
        "port" => read_ports(words.expect("a port, e.g. 5432/tcp")?)?,
        "proto" => Traffic::Protocol(read_protocol(words.expect("tcp, udp, icmp or any")?)?),
        other => {
            return Err(PolicyProblem::Expected {
                expected: "`port` or `proto`",
                found: format!("`{other}`"),
            });
        }
    };
    words.end()?;
    Ok(Rule { from, to, traffic })
}

fn read_selector(words: &mut Words<'_>) -> Result<Selector, PolicyProblem> {
    match words.expect("any, group NAME, member NAME or a prefix")? {
        "any" => Ok(Selector::Any),
        "group" => Ok(Selector::Group(words.expect("a group name")?.parse()?)),
        "member" => {
            let name = words.expect("a member name")?;
            if valid_name(name) {
                Ok(Selector::Member(name.to_owned()))
            } else {
                Err(PolicyProblem::BadMemberName(name.to_owned()))
            }
        }
        word => {
            word.parse::<Cidr>()
                .map(Selector::Prefix)
                .map_err(|error| PolicyProblem::BadParty {
                    word: word.to_owned(),
                    error,
                })
        }
    }
}

/// `5432/tcp`, `8000-8100/udp`.
fn read_ports(word: &str) -> Result<Traffic, PolicyProblem> {
    let bad = || PolicyProblem::BadPort(word.to_owned());
    let (range, transport) = word.split_once('/').ok_or_else(bad)?;
    let transport = match transport {
        "tcp" => Transport::Tcp,
        "udp" => Transport::Udp,
        _ => return Err(bad()),
    };
    let (first, last) = range.split_once('-').unwrap_or((range, range));
    let port = |text: &str| text.parse::<u16>().map_err(|_| bad());
    let ports = PortRange::new(port(first)?, port(last)?).ok_or_else(bad)?;
    Ok(Traffic::Ports { transport, ports })
}

fn read_protocol(word: &str) -> Result<Protocol, PolicyProblem> {
    match word {
        "tcp" => Ok(Protocol::Tcp),
        "udp" => Ok(Protocol::Udp),
        "icmp" => Ok(Protocol::Icmp),
        "any" => Ok(Protocol::Any),
        other => Err(PolicyProblem::UnknownProtocol(other.to_owned())),
    }
}
