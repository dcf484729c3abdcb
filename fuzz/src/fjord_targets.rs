//! Fuzz target bodies for the `fjord` binary's parsers: the wg-quick
//! style configuration file, and WireGuard's configuration protocol
//! (requests `wg` sends to the configuration socket, and the replies
//! `fjord show` reads from any implementation's socket).
//!
//! Besides never panicking, both must keep secrets out of their error
//! messages, which end up in logs: a refused key is named, never quoted.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use fjord::config::{Config, ConfigError, Resolve};
use fjord::uapi::lines::SecretLines;
use fjord::uapi::{parse_get, parse_set};

/// Resolves names without the network, the same way every time: a name
/// of odd length does not resolve, others map into 198.18.0.0/16.
struct FuzzResolver;

impl Resolve for FuzzResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<SocketAddr> {
        if host.len() % 2 == 1 {
            return Err(io::Error::other("no such host"));
        }
        let sum = host.bytes().fold(0u8, u8::wrapping_add);
        // Truncation intended: any byte will do.
        let third = host.len() as u8;
        Ok(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(198, 18, third, sum)),
            port,
        ))
    }
}

const SOURCE_NAME: &str = "fuzz.conf";

/// The value of `line` if its key is one whose value is a secret.
fn secret_value(line: &str) -> Option<&str> {
    let line = line.split('#').next()?;
    let (key, value) = line.split_once('=')?;
    let key = key.trim().to_ascii_lowercase();
    (key == "privatekey" || key == "presharedkey").then(|| value.trim())
}

/// `Config::parse` on arbitrary text. A success must write back
/// (`to_wg_format`) as text that parses to an equal config; a refusal
/// must be one line naming the source, and must not quote the value of
/// a `PrivateKey` or `PresharedKey` line.
pub fn config_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse_with_resolver(text, SOURCE_NAME, &FuzzResolver) {
        Ok(config) => {
            let written = config.to_wg_format();
            let again = Config::parse_with_resolver(&written, "written.conf", &FuzzResolver)
                .unwrap_or_else(|error| panic!("a written config is refused: {error}"));
            assert_eq!(again, config, "the written config reads back differently");
        }
        Err(error) => {
            let message = error.to_string();
            assert!(message.starts_with(SOURCE_NAME), "{message}");
            assert!(
                !message.contains('\n'),
                "a message of several lines: {message:?}"
            );
            let ConfigError::Invalid { location, .. } = &error else {
                return;
            };
            let Some(line) = location
                .line
                .and_then(|n| text.lines().nth(n.checked_sub(1)?))
            else {
                return;
            };
            // Long enough, and without spaces, so that it cannot be a
            // word of the message itself.
            if let Some(value) = secret_value(line)
                && value.len() >= 20
                && !value.contains(char::is_whitespace)
            {
                assert!(!message.contains(value), "a key value in: {message}");
            }
        }
    }
}

/// Lines read the way the configuration socket reads them.
fn protocol_lines(data: &[u8]) -> Vec<String> {
    let mut reader = SecretLines::new(data);
    let mut lines = Vec::new();
    while let Ok(Some(line)) = reader.next_line() {
        lines.push(line.to_string());
    }
    lines
}

/// A configuration-protocol exchange from arbitrary bytes: read as lines,
/// the body of a `set=1` request (everything up to the first empty line,
/// after the operation line) goes through `parse_set`, and all lines
/// through the `get=1` reply parser of `fjord show`. A refusal carries the
/// errno `wg` prints and never the value of a key line.
pub fn uapi_request(data: &[u8]) {
    let lines = protocol_lines(data);
    let body: Vec<String> = lines
        .iter()
        .skip(1)
        .take_while(|line| !line.is_empty())
        .cloned()
        .collect();
    match parse_set(&body) {
        Ok(request) => {
            let peer_lines = body
                .iter()
                .filter(|line| line.starts_with("public_key="))
                .count();
            assert_eq!(
                request.peers.len(),
                peer_lines,
                "one peer per public_key line"
            );
        }
        Err(error) => {
            assert!(
                error.errno == libc::EINVAL || error.errno == libc::EPROTO,
                "{error}"
            );
            assert_no_key_value(&body, &error.reason);
        }
    }
    if let Err(error) = parse_get(Path::new("fuzz.sock"), &lines) {
        assert_no_key_value(&lines, &error.to_string());
    }
}

/// `message` quotes no value of a `private_key=` or `preshared_key=` line
/// (of 16 characters or more, without spaces, so it cannot be words of
/// the message itself, and found on no other line, so the message cannot
/// have it from elsewhere).
fn assert_no_key_value(lines: &[String], message: &str) {
    for line in lines {
        let Some(value) = line
            .strip_prefix("private_key=")
            .or_else(|| line.strip_prefix("preshared_key="))
        else {
            continue;
        };
        if value.len() >= 16
            && !value.contains(char::is_whitespace)
            && lines.iter().filter(|other| other.contains(value)).count() == 1
            // The blanking costs a pass over the message per other line
            // (it cut the rate to a third): only for a suspect message.
            && message.contains(value)
        {
            let scrubbed = without_other_lines(lines, line, value, message);
            assert!(!scrubbed.contains(value), "a key value in: {message}");
        }
    }
}

/// `message` with what it may quote of lines other than `line` blanked
/// out: the other lines, their names and their values. A quoted name or
/// value beside the message's own punctuation can spell a key's value by
/// chance (the fuzzer found `allowed_ip=:000…0` quoted as `…:000…0: '…'`
/// against the key `000…0:`; then a trimmed `allowed_ip` value of control
/// characters and zeros quoted as `'…000'` against the key `000…0'`; then
/// the unknown name `endpoint000…0` quoted as `'endpoint000…0'` against
/// the same key). A text that is part of the key's value is left alone,
/// so a quoted key is never blanked out piece by piece.
fn without_other_lines(lines: &[String], line: &str, key: &str, message: &str) -> String {
    let mut scrubbed = message.to_string();
    let mut quotable: Vec<&str> = lines
        .iter()
        .filter(|other| other.as_str() != line)
        .flat_map(|other| {
            let (name, value) = other.split_once('=').unwrap_or((other, ""));
            // An address is quoted trimmed, and either side of its '/'.
            let trimmed = value.trim();
            let (address, length) = trimmed.split_once('/').unwrap_or((trimmed, ""));
            [other.as_str(), name, value, trimmed, address, length]
        })
        .filter(|text| !text.is_empty() && !key.contains(*text))
        .collect();
    // Whole lines before the values inside them.
    quotable.sort_by_key(|text| std::cmp::Reverse(text.len()));
    for text in quotable {
        scrubbed = scrubbed.replace(text, "\u{1}");
    }
    scrubbed
}
