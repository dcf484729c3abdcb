//! MAC1, MAC2 and cookie replies: WireGuard's denial-of-service defence.
//!
//! Every handshake message ends in two MACs:
//!
//! - `mac1 = MAC(HASH("mac1----" || receiver's public key), message up to mac1)`.
//!   It proves the sender knows whom it is talking to; a responder checks it
//!   before doing any Diffie–Hellman work.
//! - `mac2 = MAC(cookie, message up to mac2)`, or zeros without a cookie.
//!
//! A responder under load answers a handshake without a valid mac2 by a
//! cookie reply instead of a response: `cookie = MAC(secret, source address)`
//! with a secret that changes every two minutes, sent encrypted with
//! XChaCha20-Poly1305 under `HASH("cookie--" || responder's public key)` and
//! with the rejected message's mac1 as associated data. The initiator keeps
//! the cookie for two minutes and puts mac2 on its next messages. A fjord
//! initiator sends its initiation again with mac2 as soon as the reply
//! arrives (once per attempt, see `Peer::handle_cookie_reply`); a plain
//! WireGuard initiator waits for its retransmission timer.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::crypto::{self, HASH_LEN, Hash, MAC_LEN, TAG_LEN, XNONCE_LEN, hash, mac};
use crate::keys::PublicKey;
use crate::wire::{COOKIE_REPLY_LEN, CookieReply, MESSAGE_TYPE_COOKIE_REPLY, cookie_reply};
use zeroize::Zeroizing;

const LABEL_MAC1: &[u8] = b"mac1----";
const LABEL_COOKIE: &[u8] = b"cookie--";
/// How long a responder's cookie secret, and an initiator's cookie, stay valid.
pub const COOKIE_REFRESH_TIME: Duration = Duration::from_secs(120);

/// Why a cookie reply was ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CookieError {
    #[error("cookie reply without a handshake message awaiting it")]
    NotExpected,
    #[error("cookie reply failed to decrypt")]
    DecryptionFailed,
}

/// The positions of mac1 and mac2 in a handshake message.
#[derive(Debug, Clone, Copy)]
pub struct MacLayout {
    pub mac1: usize,
    pub mac2: usize,
}

impl MacLayout {
    pub const INITIATION: Self = Self {
        mac1: crate::wire::initiation::MAC1,
        mac2: crate::wire::initiation::MAC2,
    };
    pub const RESPONSE: Self = Self {
        mac1: crate::wire::response::MAC1,
        mac2: crate::wire::response::MAC2,
    };
}

fn source_bytes(source: &SocketAddr, out: &mut [u8; 18]) -> usize {
    let port = source.port().to_le_bytes();
    match source {
        SocketAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.ip().octets());
            out[4..6].copy_from_slice(&port);
            6
        }
        SocketAddr::V6(v6) => {
            out[..16].copy_from_slice(&v6.ip().octets());
            out[16..18].copy_from_slice(&port);
            18
        }
    }
}

fn mac1_key(public: &PublicKey) -> Hash {
    hash(&[LABEL_MAC1, public.as_bytes()])
}

fn cookie_key(public: &PublicKey) -> Hash {
    hash(&[LABEL_COOKIE, public.as_bytes()])
}

/// The handshake message a cookie reply answers, and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Answering<'a> {
    pub message: &'a [u8],
    pub layout: MacLayout,
    pub source: &'a SocketAddr,
}

/// The responder's side: checks MACs on incoming handshakes and makes
/// cookie replies. One per device.
pub struct CookieChecker {
    mac1_key: Hash,
    cookie_key: Hash,
    /// Wiped on drop: with it, anyone could compute valid cookies.
    secret: Zeroizing<[u8; HASH_LEN]>,
    secret_born: Option<Instant>,
}

impl CookieChecker {
    pub fn new(own_public: &PublicKey) -> Self {
        Self {
            mac1_key: mac1_key(own_public),
            cookie_key: cookie_key(own_public),
            secret: Zeroizing::new([0u8; HASH_LEN]),
            secret_born: None,
        }
    }

    /// Whether `message` carries a valid mac1 for us.
    pub fn check_mac1(&self, message: &[u8], layout: MacLayout) -> bool {
        let Some(expected) = message.get(layout.mac1..layout.mac1 + MAC_LEN) else {
            return false;
        };
        let computed = mac(&self.mac1_key, &[&message[..layout.mac1]]);
        crypto::constant_time_eq(&computed, expected)
    }

    /// Whether `message` carries a valid mac2 for a cookie we gave `source`.
    pub fn check_mac2(
        &self,
        now: Instant,
        message: &[u8],
        layout: MacLayout,
        source: &SocketAddr,
    ) -> bool {
        let Some(born) = self.secret_born else {
            return false;
        };
        if now.saturating_duration_since(born) >= COOKIE_REFRESH_TIME {
            return false;
        }
        let Some(expected) = message.get(layout.mac2..layout.mac2 + MAC_LEN) else {
            return false;
        };
        // An initiator without a cookie sends zeros, and so does a flood:
        // no MAC to compute for them (a real mac2 is zeros with
        // probability 2^-128). mac2 is public, so the check may be fast.
        if expected.iter().all(|&byte| byte == 0) {
            return false;
        }
        let cookie = self.cookie_for(source);
        let computed = mac(&cookie, &[&message[..layout.mac2]]);
        crypto::constant_time_eq(&computed, expected)
    }

    fn cookie_for(&self, source: &SocketAddr) -> [u8; MAC_LEN] {
        let mut bytes = [0u8; 18];
        let len = source_bytes(source, &mut bytes);
        mac(self.secret.as_ref(), &[&bytes[..len]])
    }

    /// Writes a cookie reply to the handshake `answering`.
    /// `nonce` is random bytes from the caller; `fresh_secret` gives more
    /// when the secret is due to change, which is rarely: under a flood
    /// every reply costs the randomness it draws.
    pub fn create_reply(
        &mut self,
        now: Instant,
        fresh_secret: impl FnOnce() -> [u8; HASH_LEN],
        nonce: [u8; XNONCE_LEN],
        answering: Answering<'_>,
        out: &mut [u8; COOKIE_REPLY_LEN],
    ) {
        let Answering {
            message,
            layout,
            source,
        } = answering;
        let expired = self
            .secret_born
            .is_none_or(|born| now.saturating_duration_since(born) >= COOKIE_REFRESH_TIME);
        if expired {
            self.secret = Zeroizing::new(fresh_secret());
            self.secret_born = Some(now);
        }
        // The sender index sits right after the type in both handshake messages.
        let receiver_index = message.get(4..8).unwrap_or(&[0; 4]);
        let message_mac1 = message
            .get(layout.mac1..layout.mac1 + MAC_LEN)
            .unwrap_or(&[0; MAC_LEN]);
        let mut cookie = self.cookie_for(source);

        out.fill(0);
        out[..4].copy_from_slice(&MESSAGE_TYPE_COOKIE_REPLY.to_le_bytes());
        out[cookie_reply::RECEIVER..cookie_reply::RECEIVER + 4].copy_from_slice(receiver_index);
        out[cookie_reply::NONCE..cookie_reply::NONCE + XNONCE_LEN].copy_from_slice(&nonce);
        let tag = crypto::xaead_seal(&self.cookie_key, &nonce, &mut cookie, message_mac1);
        out[cookie_reply::COOKIE..cookie_reply::COOKIE + MAC_LEN].copy_from_slice(&cookie);
        out[cookie_reply::COOKIE + MAC_LEN..].copy_from_slice(&tag);
    }
}

/// The initiator's side, per peer: writes MACs on outgoing handshakes and
/// keeps the cookie from the peer's last cookie reply.
pub struct CookieState {
    mac1_key: Hash,
    cookie_key: Hash,
    cookie: Option<([u8; MAC_LEN], Instant)>,
    last_mac1: Option<[u8; MAC_LEN]>,
}

impl CookieState {
    pub fn new(remote_public: &PublicKey) -> Self {
        Self {
            mac1_key: mac1_key(remote_public),
            cookie_key: cookie_key(remote_public),
            cookie: None,
            last_mac1: None,
        }
    }

    /// Fills mac1 and mac2 of an outgoing handshake message.
    pub fn write_macs(&mut self, now: Instant, message: &mut [u8], layout: MacLayout) {
        let mac1 = mac(&self.mac1_key, &[&message[..layout.mac1]]);
        message[layout.mac1..layout.mac1 + MAC_LEN].copy_from_slice(&mac1);
        self.last_mac1 = Some(mac1);
        let mac2 = match self.cookie {
            Some((cookie, received))
                if now.saturating_duration_since(received) < COOKIE_REFRESH_TIME =>
            {
                mac(&cookie, &[&message[..layout.mac2]])
            }
            _ => [0u8; MAC_LEN],
        };
        message[layout.mac2..layout.mac2 + MAC_LEN].copy_from_slice(&mac2);
    }

    /// Stores the cookie from `reply` if it answers our last handshake message.
    pub fn consume_reply(
        &mut self,
        now: Instant,
        reply: &CookieReply<'_>,
    ) -> Result<(), CookieError> {
        let last_mac1 = self.last_mac1.ok_or(CookieError::NotExpected)?;
        let sealed = reply.encrypted_cookie();
        let mut cookie = [0u8; MAC_LEN];
        cookie.copy_from_slice(&sealed[..MAC_LEN]);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&sealed[MAC_LEN..]);
        crypto::xaead_open(
            &self.cookie_key,
            reply.nonce(),
            &mut cookie,
            &tag,
            &last_mac1,
        )
        .map_err(|_| CookieError::DecryptionFailed)?;
        self.cookie = Some((cookie, now));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::PrivateKey;
    use crate::wire::{HANDSHAKE_INITIATION_LEN, Message};

    fn responder_public() -> PublicKey {
        PrivateKey::from_bytes([5; 32]).public_key()
    }

    #[test]
    fn mac1_round_trip_and_tamper() {
        let public = responder_public();
        let mut state = CookieState::new(&public);
        let checker = CookieChecker::new(&public);
        let mut message = [7u8; HANDSHAKE_INITIATION_LEN];
        let now = Instant::now();
        state.write_macs(now, &mut message, MacLayout::INITIATION);
        assert!(checker.check_mac1(&message, MacLayout::INITIATION));
        assert_eq!(&message[MacLayout::INITIATION.mac2..], &[0u8; 16]);
        message[10] ^= 1;
        assert!(!checker.check_mac1(&message, MacLayout::INITIATION));
        let other = CookieChecker::new(&PrivateKey::from_bytes([6; 32]).public_key());
        message[10] ^= 1;
        assert!(!other.check_mac1(&message, MacLayout::INITIATION));
    }

    #[test]
    fn cookie_reply_enables_mac2() {
        let public = responder_public();
        let mut state = CookieState::new(&public);
        let mut checker = CookieChecker::new(&public);
        let source: SocketAddr = "198.18.0.1:51820".parse().unwrap();
        let now = Instant::now();
        let mut message = [1u8; HANDSHAKE_INITIATION_LEN];
        state.write_macs(now, &mut message, MacLayout::INITIATION);
        assert!(!checker.check_mac2(now, &message, MacLayout::INITIATION, &source));

        let mut reply = [0u8; COOKIE_REPLY_LEN];
        checker.create_reply(
            now,
            || [8; 32],
            [9; 24],
            Answering {
                message: &message,
                layout: MacLayout::INITIATION,
                source: &source,
            },
            &mut reply,
        );
        let Ok(Message::CookieReply(view)) = Message::parse(&reply) else {
            panic!()
        };
        assert_eq!(view.receiver_index(), u32::from_le_bytes([1, 1, 1, 1]));
        state.consume_reply(now, &view).unwrap();

        state.write_macs(now, &mut message, MacLayout::INITIATION);
        assert!(checker.check_mac2(now, &message, MacLayout::INITIATION, &source));
        let elsewhere: SocketAddr = "198.18.0.9:51820".parse().unwrap();
        assert!(!checker.check_mac2(now, &message, MacLayout::INITIATION, &elsewhere));
        let later = now + COOKIE_REFRESH_TIME;
        assert!(!checker.check_mac2(later, &message, MacLayout::INITIATION, &source));
    }

    #[test]
    fn cookie_reply_for_another_message_is_refused() {
        let public = responder_public();
        let mut state = CookieState::new(&public);
        let mut checker = CookieChecker::new(&public);
        let source: SocketAddr = "[fd00::1]:1".parse().unwrap();
        let now = Instant::now();
        let mut reply = [0u8; COOKIE_REPLY_LEN];
        let unrelated = [3u8; HANDSHAKE_INITIATION_LEN];
        checker.create_reply(
            now,
            || [8; 32],
            [9; 24],
            Answering {
                message: &unrelated,
                layout: MacLayout::INITIATION,
                source: &source,
            },
            &mut reply,
        );
        let Ok(Message::CookieReply(view)) = Message::parse(&reply) else {
            panic!()
        };
        assert_eq!(
            state.consume_reply(now, &view),
            Err(CookieError::NotExpected)
        );
        let mut mine = [4u8; HANDSHAKE_INITIATION_LEN];
        state.write_macs(now, &mut mine, MacLayout::INITIATION);
        assert_eq!(
            state.consume_reply(now, &view),
            Err(CookieError::DecryptionFailed)
        );
    }
}
