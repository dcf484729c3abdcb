//! Why a configuration was refused. Every message is one line that names the
//! file, the line where it applies, and the problem:
//! `wg0.conf:7: unknown key 'Foo' in [Peer]`.

use std::fmt;
use std::io;
use std::path::PathBuf;

use fjord_mesh::CidrParseError;
use fjord_proto::{KeyParseError, PublicKey};

use super::endpoint::EndpointError;

/// A configuration could not be loaded.
///
/// I/O errors are printed as part of the message, so `source()` does not
/// return them again (reporters that print the chain would repeat them);
/// [`ConfigError::io_error`] gives access to them.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be opened or read.
    #[error("cannot read {}: {error}", path.display())]
    Read { path: PathBuf, error: io::Error },
    /// The file holds keys but is accessible by group or others.
    #[error(
        "{path}: holds private keys but is accessible by group or others (mode {mode:04o}); \
         run `chmod 600 {path}`",
        path = path.display()
    )]
    InsecurePermissions { path: PathBuf, mode: u32 },
    /// The text is not a valid configuration.
    #[error("{location}: {problem}")]
    Invalid {
        location: Location,
        problem: Problem,
    },
}

impl ConfigError {
    pub(super) fn invalid(source_name: &str, line: Option<usize>, problem: Problem) -> Self {
        ConfigError::Invalid {
            location: Location {
                source_name: source_name.to_string(),
                line,
            },
            problem,
        }
    }

    /// The I/O error behind a [`ConfigError::Read`].
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            ConfigError::Read { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Where a problem is: the source's name and, if the problem belongs to one
/// line, its 1-based number. Displays as `wg0.conf:7` or `wg0.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub source_name: String,
    pub line: Option<usize>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.source_name),
            None => f.write_str(&self.source_name),
        }
    }
}

/// The two kinds of section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionKind {
    Interface,
    Peer,
    Mesh,
}

impl fmt::Display for SectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SectionKind::Interface => "Interface",
            SectionKind::Peer => "Peer",
            SectionKind::Mesh => "Mesh",
        })
    }
}

/// What is wrong with the text. Text quoted from the file is shortened and
/// has control characters escaped, so a message stays one readable line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("not valid UTF-8")]
    NotUtf8,
    #[error("a section header is a name in brackets, like [Interface] or [Peer]")]
    MalformedSectionHeader,
    #[error("unknown section '[{0}]' (expected [Interface], [Peer] or [Mesh])")]
    UnknownSection(String),
    #[error("second [Mesh] section (the first starts at line {first_line})")]
    DuplicateMesh { first_line: usize },
    #[error("[Mesh] starting at line {line} has no {key}")]
    MeshKeyMissing { line: usize, key: &'static str },
    #[error("second [Interface] section (the first starts at line {first_line})")]
    DuplicateInterface { first_line: usize },
    #[error("'{key}' comes before any section; put it under [Interface] or [Peer]")]
    KeyOutsideSection { key: String },
    #[error("expected 'Key = value', a [Section] header or a # comment")]
    NotKeyValue,
    #[error("missing key before '='")]
    MissingKey,
    #[error("unknown key '{key}' in [{section}]")]
    UnknownKey { key: String, section: SectionKind },
    #[error("{key} belongs in [{belongs}], not in [{section}]")]
    WrongSection {
        key: &'static str,
        section: SectionKind,
        belongs: SectionKind,
    },
    #[error("{key} given twice in this [{section}] (first on line {first_line})")]
    DuplicateKey {
        key: &'static str,
        section: SectionKind,
        first_line: usize,
    },
    #[error("{key}: {error}")]
    InvalidValue {
        key: &'static str,
        error: ValueError,
    },
    #[error("no [Interface] section")]
    NoInterface,
    #[error("[Interface] has no PrivateKey")]
    NoPrivateKey,
    #[error("[Peer] starting at line {line} has no PublicKey")]
    NoPublicKey { line: usize },
    #[error("two [Peer] sections with public key {key} (lines {first_line} and {second_line})")]
    DuplicatePeer {
        key: PublicKey,
        first_line: usize,
        second_line: usize,
    },
    #[error("[Peer] starting at line {line} has the interface's own public key")]
    PeerIsSelf { line: usize },
    #[error("{key}: {problem}")]
    SwitchMode { key: &'static str, problem: String },
}

/// Why one value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error(transparent)]
    Key(#[from] KeyParseError),
    #[error(transparent)]
    Cidr(#[from] CidrParseError),
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    #[error("empty value")]
    Empty,
    #[error("empty entry in a comma-separated list")]
    EmptyListEntry,
    #[error("'{value}' is not {expected}")]
    Invalid {
        value: String,
        expected: &'static str,
    },
    #[error("{value} is out of range ({min} to {max})")]
    OutOfRange { value: u64, min: u64, max: u64 },
    #[error("{0}")]
    Mesh(String),
}

impl ValueError {
    pub(super) fn invalid(value: &str, expected: &'static str) -> Self {
        ValueError::Invalid {
            value: quote(value),
            expected,
        }
    }
}

/// Longest text quoted from the file in a message, in characters.
const QUOTE_MAX_CHARS: usize = 48;

/// Prepares text from the file for a message: shortened to
/// [`QUOTE_MAX_CHARS`], control characters escaped.
pub(super) fn quote(text: &str) -> String {
    let mut quoted = String::new();
    for (index, c) in text.chars().enumerate() {
        if index == QUOTE_MAX_CHARS {
            quoted.push('…');
            break;
        }
        if c.is_control() {
            quoted.extend(c.escape_debug());
        } else {
            quoted.push(c);
        }
    }
    quoted
}
