//! A Prometheus stand-in for the lab system `fjord-metrics`: one thread
//! inside a side's namespace GETs `/metrics` every second while the side
//! runs, so the suites measure fjord as it runs when it is watched.
//!
//! The scrape's own cost (a connection and a few kilobytes a second) is
//! charged to the lab, not to fjord's processes: a real Prometheus runs
//! elsewhere too.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::netns::Namespace;

/// How often Prometheus would scrape in the worst case.
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);
/// A scrape slower than this counts as failed.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the first scrape may take to succeed after the side is up.
const FIRST_SCRAPE_WAIT: Duration = Duration::from_secs(5);
/// Granularity of the stop check while sleeping between scrapes.
const STOP_POLL: Duration = Duration::from_millis(50);

/// Scrapes until dropped.
#[derive(Debug)]
pub struct Scraper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Scraper {
    /// Starts scraping `address` from inside `namespace`; returns once a
    /// first scrape answered, or why none did.
    pub fn start(namespace: &Namespace, address: SocketAddr) -> Result<Self, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (first_tx, first_rx) = mpsc::channel();
        let thread_stop = Arc::clone(&stop);
        let thread = namespace
            .spawn_thread(move || {
                let mut first = Some(first_tx);
                let started = std::time::Instant::now();
                while !thread_stop.load(Ordering::Relaxed) {
                    let result = scrape(address);
                    if let Some(tx) = first.as_ref() {
                        // Retried until the endpoint answers or the wait is over.
                        if result.is_ok() || started.elapsed() >= FIRST_SCRAPE_WAIT {
                            let _ = tx.send(result);
                            first = None;
                        } else {
                            std::thread::sleep(Duration::from_millis(100));
                            continue;
                        }
                    }
                    sleep_unless_stopped(&thread_stop, SCRAPE_INTERVAL);
                }
                Ok(())
            })
            .map_err(|error| format!("starting the metrics scraper: {error}"))?;
        let mut scraper = Self {
            stop,
            thread: Some(thread),
        };
        match first_rx.recv_timeout(FIRST_SCRAPE_WAIT + SCRAPE_TIMEOUT) {
            Ok(Ok(_)) => Ok(scraper),
            Ok(Err(error)) => {
                scraper.finish();
                Err(format!("GET http://{address}/metrics: {error}"))
            }
            Err(_) => {
                scraper.finish();
                Err(format!("GET http://{address}/metrics: no answer"))
            }
        }
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.finish();
    }
}

fn sleep_unless_stopped(stop: &AtomicBool, total: Duration) {
    let mut slept = Duration::ZERO;
    while slept < total && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(STOP_POLL);
        slept += STOP_POLL;
    }
}

/// One GET of `/metrics`; the body's length.
fn scrape(address: SocketAddr) -> Result<usize, String> {
    let mut stream =
        TcpStream::connect_timeout(&address, SCRAPE_TIMEOUT).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(SCRAPE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&reply);
    let status = text.lines().next().unwrap_or_default();
    if !status.contains(" 200") {
        return Err(format!("answered {status:?}"));
    }
    Ok(reply.len())
}
