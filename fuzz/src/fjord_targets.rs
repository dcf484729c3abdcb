//! Fuzz target bodies for the `fjord` binary's parsers: the wg-quick
//! style configuration file, and WireGuard's configuration protocol
//! (requests `wg` sends to the configuration socket, and the replies
//! `fjord show` reads from any implementation's socket), and the metrics
//! endpoint's HTTP request heads.
//!
//! Besides never panicking, both must keep secrets out of their error
//! messages, which end up in logs: a refused key is named, never quoted.

use std::collections::HashSet;
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
    let set_refusal = |body: &[String]| parse_set(body).err().map(|error| error.reason);
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
            assert_no_key_value(&body, &error.reason, set_refusal);
        }
    }
    let get_refusal = |lines: &[String]| {
        parse_get(Path::new("fuzz.sock"), lines)
            .err()
            .map(|error| error.to_string())
    };
    if let Some(message) = get_refusal(&lines) {
        assert_no_key_value(&lines, &message, get_refusal);
    }
}

/// `message`, the refusal of `lines`, does not quote the value of a
/// `private_key=` or `preshared_key=` line. Finding the value in the
/// message is not proof: other lines, quoted beside the message's own
/// punctuation, can spell it (the fuzzer found four ways). So a suspect
/// value is changed to two others of its shape ([`disguise`]) that no
/// other line could help spell, and `refuse` parses the lines again: a
/// message that quotes the key quotes each disguise too, one that spelled
/// it from elsewhere does not.
fn assert_no_key_value(
    lines: &[String],
    message: &str,
    refuse: impl Fn(&[String]) -> Option<String>,
) {
    for (index, line) in lines.iter().enumerate() {
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        if !matches!(name, "private_key" | "preshared_key")
            || value.chars().filter(|c| disguise_char(*c, 1) != *c).count() < 16
            || !message.contains(value)
        {
            continue;
        }
        let quotes = |disguised: &str| {
            let mut changed = lines.to_vec();
            changed[index] = format!("{name}={disguised}");
            refuse(&changed).is_some_and(|again| again.contains(disguised))
        };
        // The fuzzer also spelled the first two disguises of a run of
        // zeros: a disguise that the first message holds already, or that
        // shares 8 bytes with another line, proves nothing, and the next
        // is tried. The windows are gathered only for a disguise that got
        // that far (gathering them for every suspect cut the rate to a
        // fifth).
        let mut others: Option<HashSet<u64>> = None;
        let mut quoted = 0;
        for shift in 1..10 {
            let disguised = disguise(value, shift);
            if message.contains(&disguised) {
                continue;
            }
            if !quotes(&disguised) {
                break;
            }
            let others = others.get_or_insert_with(|| {
                lines
                    .iter()
                    .enumerate()
                    .filter(|(other, _)| *other != index)
                    .flat_map(|(_, text)| windows(text))
                    .collect()
            });
            if !windows(&disguised).any(|window| others.contains(&window)) {
                quoted += 1;
            }
            assert!(quoted < 2, "a key value in: {message}");
        }
    }
}

/// Every 8 consecutive bytes of `text`, as numbers: a set of them answers
/// "does this text share 8 bytes with those" in one pass (a substring
/// search per window cut the fuzzer's rate tenfold).
fn windows(text: &str) -> impl Iterator<Item = u64> + '_ {
    text.as_bytes()
        .windows(8)
        .map(|window| u64::from_le_bytes(window.try_into().expect("8 bytes")))
}

/// `value` with every letter and digit moved `shift` places along its own
/// class (digits, hex letters, other letters; each case apart): a hex key
/// stays a hex key of the same length, punctuation stays where it was.
fn disguise(value: &str, shift: u32) -> String {
    value.chars().map(|c| disguise_char(c, shift)).collect()
}

fn disguise_char(c: char, shift: u32) -> char {
    const CLASSES: [(u32, u32); 5] = [
        ('0' as u32, 10),
        ('a' as u32, 6),
        ('A' as u32, 6),
        ('g' as u32, 20),
        ('G' as u32, 20),
    ];
    let code = c as u32;
    CLASSES
        .iter()
        .find(|(first, len)| (*first..first + len).contains(&code))
        .and_then(|(first, len)| char::from_u32(first + (code - first + shift) % len))
        .unwrap_or(c)
}

/// The metrics endpoint's HTTP request head parser on arbitrary bytes:
/// never panics; a head is complete only with its empty line inside the
/// size limit, incomplete input under the limit asks for more, and what
/// follows a complete head (a body, the next bytes of a stream) never
/// changes the answer, so reading in pieces gives what reading whole does.
pub fn metrics_request(data: &[u8]) {
    use fjord::metrics::http::{HeadError, MAX_HEAD_BYTES, parse_head};
    let result = parse_head(data);
    let ends_head = |bytes: &[u8]| {
        bytes.windows(2).any(|pair| pair == b"\n\n") || bytes.windows(3).any(|w| w == b"\n\r\n")
    };
    let window = &data[..data.len().min(MAX_HEAD_BYTES)];
    match result {
        Ok(Some(_)) => assert!(ends_head(window), "complete without an empty line"),
        Ok(None) => assert!(data.len() < MAX_HEAD_BYTES, "past the limit yet incomplete"),
        Err(HeadError::TooLarge) => assert!(data.len() >= MAX_HEAD_BYTES),
        Err(HeadError::Malformed) => {}
    }
    if let Ok(Some(_)) | Err(HeadError::Malformed) = result {
        let mut longer = data.to_vec();
        longer.extend_from_slice(b"GET /metrics HTTP/1.1\r\n\r\n");
        assert_eq!(
            parse_head(&longer),
            result,
            "more bytes changed a complete head"
        );
    }
    // Every prefix of a complete head is incomplete: its first empty line
    // is its end.
    if let Ok(Some(_)) = result {
        for cut in [data.len() / 2, data.len().saturating_sub(1)] {
            let prefix = &data[..cut];
            if !ends_head(prefix) {
                assert_eq!(parse_head(prefix), Ok(None), "a prefix read as complete");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "e84b5a6d2717c1003a13b431570353dbaca9146cf150c5d8575680feba52027a";

    fn lines(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|text| text.to_string()).collect()
    }

    #[test]
    #[should_panic(expected = "a key value in")]
    fn a_message_that_quotes_the_key_line_is_caught() {
        let body = lines(&["listen_port=1", &format!("private_key={KEY}")]);
        let quote_last = |body: &[String]| Some(format!("refused: {}", body[body.len() - 1]));
        let message = quote_last(&body).unwrap();
        assert_no_key_value(&body, &message, quote_last);
    }

    #[test]
    fn a_key_spelled_by_another_line_is_not_a_leak() {
        let spelled = "0000000000000000000000000000000000000000";
        let body = lines(&[
            &format!("allowed_ip=\u{c}{spelled}"),
            &format!("private_key={spelled}'"),
        ]);
        let quote_first = |body: &[String]| {
            let value = body[0].split_once('=').unwrap().1.trim();
            Some(format!("'{value}' is not an IP address"))
        };
        let message = quote_first(&body).unwrap();
        assert!(message.contains(&format!("{spelled}'")));
        assert_no_key_value(&body, &message, quote_first);
    }

    #[test]
    fn a_key_spelled_with_its_disguises_beside_it_is_not_a_leak() {
        let zeros = "0".repeat(40);
        let body = lines(&[
            &format!("endpoint{zeros}{}{}", "1".repeat(40), "2".repeat(40)),
            &format!("private_key={zeros}"),
        ]);
        let quote_first = |body: &[String]| Some(format!("malformed line: {}", body[0]));
        let message = quote_first(&body).unwrap();
        assert_no_key_value(&body, &message, quote_first);
    }

    #[test]
    fn a_disguise_keeps_the_shape_of_a_key() {
        let disguised = disguise(KEY, 1);
        assert_eq!(disguised.len(), KEY.len());
        assert!(disguised.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(disguised, KEY);
        assert_ne!(disguise(KEY, 2), disguised);
        assert_eq!(disguise("a-Z:9", 1), "b-G:0");
    }
}
