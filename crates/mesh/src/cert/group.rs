//! Group names: the labels a certificate (or a `Member =` line) gives a
//! node, which the network policy names in its rules (`group db`).
//!
//! A name is 1 to [`MAX_GROUP_NAME_LEN`] characters of `a-z`, `0-9`, `_`
//! and `-`, starting with a letter, so it reads the same in a
//! certificate, a config line, a policy rule and `fjord show`.

use std::fmt;
use std::str::FromStr;

/// Longest group name, in bytes.
pub const MAX_GROUP_NAME_LEN: usize = 31;
/// Most groups one certificate may name.
pub const MAX_GROUPS: usize = 16;

/// A valid group name.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group(String);

/// Why text is not a group name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "group `{0}`: a group name is 1 to {MAX_GROUP_NAME_LEN} characters of a-z, 0-9, '_' or '-', starting with a letter"
)]
pub struct GroupNameError(pub String);

impl Group {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `name` is a valid group name.
pub(crate) fn valid_group_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=MAX_GROUP_NAME_LEN).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
}

impl FromStr for Group {
    type Err = GroupNameError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if valid_group_name(text) {
            Ok(Self(text.to_owned()))
        } else {
            // Quoted back in the message: keep it short.
            Err(GroupNameError(text.chars().take(40).collect()))
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Group({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rules() {
        for good in ["ops", "db", "a", "web-1", "x_y", &"a".repeat(31)] {
            assert_eq!(good.parse::<Group>().unwrap().as_str(), good);
        }
        for bad in [
            "",
            "1ops",
            "-ops",
            "_x",
            "Ops",
            "o ps",
            "ops.",
            "é",
            &"a".repeat(32),
        ] {
            let error = bad.parse::<Group>().unwrap_err();
            assert!(
                error.to_string().contains("starting with a letter"),
                "{bad}"
            );
        }
    }
}
