//! The smallest HTTP/1.1 server Prometheus needs: one `GET /metrics` per
//! connection, answered and closed.
//!
//! Written by hand rather than taken from a crate: tiny_http, the small
//! blocking server, has had no release since 2022, and hyper needs an
//! async runtime (tokio) that fjord's control plane does not have. What a
//! scraper sends is one request head; this reads it with a size limit
//! ([`MAX_HEAD_BYTES`]) and a deadline ([`HEAD_DEADLINE`]), parses it with
//! [`parse_head`] (a pure function over the bytes, fuzzed as
//! `metrics_request`), and answers with `Connection: close`. A body, if
//! any, is never read.
//!
//! Answers: 200 for `GET /metrics` (a query string is ignored), 404 for
//! another path, 405 for another method, 400 for a head that is not
//! HTTP/1.x, 431 for a head past the limit, 408 for one not complete by
//! the deadline.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// The longest request head read (request line and header lines). A
/// scraper's is a few hundred bytes.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;

/// How long a client has to send its whole head. Connections are served
/// one at a time, so this bounds how long a silent client holds up the
/// next scrape.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);

/// The path metrics are served at.
pub const METRICS_PATH: &str = "/metrics";

/// What a complete request head asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `GET /metrics`.
    Metrics,
    /// `GET` of another path.
    OtherPath,
    /// Another method (`POST`, `HEAD`, ...).
    OtherMethod,
}

/// Why a head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("request head longer than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("malformed request head")]
    Malformed,
}

/// Reads the head at the start of `bytes`: `Ok(None)` while it is
/// incomplete (no empty line yet), the request once it is. Never panics,
/// whatever the bytes. Lines may end in CRLF or a bare LF (RFC 9112
/// allows a server to accept both).
pub fn parse_head(bytes: &[u8]) -> Result<Option<Request>, HeadError> {
    let Some(head_len) = head_length(bytes) else {
        return if bytes.len() >= MAX_HEAD_BYTES {
            Err(HeadError::TooLarge)
        } else {
            Ok(None)
        };
    };
    if head_len > MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    let head = std::str::from_utf8(&bytes[..head_len]).map_err(|_| HeadError::Malformed)?;
    let mut lines = head.lines();
    let request_line = lines.next().ok_or(HeadError::Malformed)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed);
    };
    let token = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_graphic());
    if !token(method) || !token(target) || !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(HeadError::Malformed);
    }
    // Header fields are not needed, but each must look like one.
    for line in lines.filter(|line| !line.is_empty()) {
        let Some((name, _)) = line.split_once(':') else {
            return Err(HeadError::Malformed);
        };
        if !token(name) {
            return Err(HeadError::Malformed);
        }
    }
    if method != "GET" {
        return Ok(Some(Request::OtherMethod));
    }
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    Ok(Some(if path == METRICS_PATH {
        Request::Metrics
    } else {
        Request::OtherPath
    }))
}

/// The length of the head up to and including its empty line, if it is
/// all there.
fn head_length(bytes: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    for (index, &byte) in bytes.iter().enumerate() {
        if byte != b'\n' {
            continue;
        }
        if matches!(&bytes[line_start..index], b"" | b"\r") {
            return Some(index + 1);
        }
        line_start = index + 1;
    }
    None
}

/// How reading a head ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadOutcome {
    Request(Request),
    Refused(HeadError),
    /// Not complete by the deadline.
    TimedOut,
    /// The client closed before completing it.
    Closed,
}

/// Reads a request head from `stream` within `deadline`, up to
/// [`MAX_HEAD_BYTES`]. Only errors other than a timeout are `Err`.
pub fn read_head(stream: &mut std::net::TcpStream, deadline: Duration) -> io::Result<HeadOutcome> {
    let until = Instant::now() + deadline;
    let mut buffer = [0u8; MAX_HEAD_BYTES];
    let mut filled = 0;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(HeadOutcome::TimedOut);
        }
        stream.set_read_timeout(Some(left))?;
        let read = match stream.read(&mut buffer[filled..]) {
            Ok(0) => return Ok(HeadOutcome::Closed),
            Ok(read) => read,
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(HeadOutcome::TimedOut);
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        filled += read;
        match parse_head(&buffer[..filled]) {
            Ok(Some(request)) => return Ok(HeadOutcome::Request(request)),
            Ok(None) => {}
            Err(error) => return Ok(HeadOutcome::Refused(error)),
        }
    }
}

/// Writes a complete response and nothing more: the connection closes
/// after it.
pub fn write_response(
    out: &mut impl Write,
    status: &str,
    content_type: &str,
    extra_header: Option<&str>,
    body: &[u8],
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(header) = extra_header {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(body)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrapers_request_is_metrics() {
        let head =
            b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9587\r\nUser-Agent: Prometheus/3.0\r\n\
                     Accept: application/openmetrics-text;version=1.0.0\r\n\r\n";
        assert_eq!(parse_head(head), Ok(Some(Request::Metrics)));
        assert_eq!(
            parse_head(b"GET /metrics?name[]=x HTTP/1.0\n\n"),
            Ok(Some(Request::Metrics))
        );
        // A body after the head is never looked at.
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\n\r\n\xff\xfe"),
            Ok(Some(Request::Metrics))
        );
    }

    #[test]
    fn an_incomplete_head_asks_for_more() {
        for partial in [&b""[..], b"GET", b"GET /metrics HTTP/1.1\r\n"] {
            assert_eq!(parse_head(partial), Ok(None), "{partial:?}");
        }
    }

    #[test]
    fn other_paths_and_methods() {
        for (head, expected) in [
            (&b"GET / HTTP/1.1\r\n\r\n"[..], Request::OtherPath),
            (b"GET /metrics/ HTTP/1.1\r\n\r\n", Request::OtherPath),
            (b"GET /Metrics HTTP/1.1\r\n\r\n", Request::OtherPath),
            (
                b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
                Request::OtherMethod,
            ),
            (b"HEAD /metrics HTTP/1.1\r\n\r\n", Request::OtherMethod),
            (b"get /metrics HTTP/1.1\r\n\r\n", Request::OtherMethod),
        ] {
            assert_eq!(parse_head(head), Ok(Some(expected)), "{head:?}");
        }
    }

    #[test]
    fn malformed_heads_are_refused() {
        for head in [
            &b"\r\n"[..],
            b"\n\nGET /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET /metrics HTTP/2.0\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1 extra\r\n\r\n",
            b"GET /met\x00rics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\n: empty name\r\n\r\n",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(parse_head(head), Err(HeadError::Malformed), "{head:?}");
        }
    }

    #[test]
    fn an_oversized_head_is_refused_once_the_limit_is_reached() {
        let mut head = b"GET /metrics HTTP/1.1\r\n".to_vec();
        while head.len() < MAX_HEAD_BYTES {
            head.extend_from_slice(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        assert_eq!(parse_head(&head), Err(HeadError::TooLarge));
        // Complete, but past the limit.
        head.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&head), Err(HeadError::TooLarge));
        // Just under the limit is fine.
        let mut fits = b"GET /metrics HTTP/1.1\r\nX-Padding: ".to_vec();
        fits.resize(MAX_HEAD_BYTES - 4, b'a');
        fits.extend_from_slice(b"\r\n\r\n");
        assert_eq!(fits.len(), MAX_HEAD_BYTES);
        assert_eq!(parse_head(&fits), Ok(Some(Request::Metrics)));
    }

    /// A loopback connection to a listener this test owns.
    fn connected_pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    #[test]
    fn a_slow_client_times_out_at_the_deadline() {
        let (mut client, mut server) = connected_pair();
        // One byte now and then never the rest: each read is short, so
        // only the deadline over the whole head ends the wait.
        client.write_all(b"G").expect("write");
        let started = Instant::now();
        let outcome = read_head(&mut server, Duration::from_millis(300)).expect("read");
        let waited = started.elapsed();
        assert_eq!(outcome, HeadOutcome::TimedOut);
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
    }

    #[test]
    fn a_head_in_pieces_is_read_whole() {
        let (mut client, mut server) = connected_pair();
        let writer = std::thread::spawn(move || {
            for piece in [&b"GET /met"[..], b"rics HTTP/1.1\r\nHost: x\r\n", b"\r\n"] {
                client.write_all(piece).expect("write");
                std::thread::sleep(Duration::from_millis(20));
            }
            client
        });
        let outcome = read_head(&mut server, Duration::from_secs(5)).expect("read");
        assert_eq!(outcome, HeadOutcome::Request(Request::Metrics));
        drop(writer.join());
    }

    #[test]
    fn an_endless_head_is_cut_at_the_limit() {
        let (mut client, mut server) = connected_pair();
        let writer = std::thread::spawn(move || {
            let _ = client.write_all(b"GET /metrics HTTP/1.1\r\n");
            let line = b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
            for _ in 0..1000 {
                if client.write_all(line).is_err() {
                    break;
                }
            }
        });
        let outcome = read_head(&mut server, Duration::from_secs(5)).expect("read");
        assert_eq!(outcome, HeadOutcome::Refused(HeadError::TooLarge));
        drop(server);
        let _ = writer.join();
    }

    #[test]
    fn responses_close_and_say_their_length() {
        let mut out = Vec::new();
        write_response(
            &mut out,
            "405 Method Not Allowed",
            "text/plain",
            Some("Allow: GET"),
            b"no\n",
        )
        .expect("write");
        assert_eq!(
            String::from_utf8(out).expect("text"),
            "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\
             Connection: close\r\nAllow: GET\r\n\r\nno\n"
        );
    }
}
