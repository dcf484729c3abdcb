//! The signed policy: the policy text as written, then one last line
//!
//! ```text
//! # fjord-policy-signature <base64: network public key 32 | signature 64>
//! ```
//!
//! so the file stays readable and diffable, and parses as a policy even
//! to a reader that skips the signature (it is a comment). The network
//! key signs `"fjord-policy" 1 | text`, where the text is every byte
//! before the signature line (its last newline included): a changed
//! byte, a line moved, or a signature by any other key is refused.

use base64ct::{Base64, Encoding};

use super::Policy;
use super::parse::{MAX_POLICY_BYTES, MAX_POLICY_LINE_BYTES, PolicyError, PolicyProblem};
use crate::cert::{NetworkPublicKey, NetworkSecret, SIGNATURE_LEN};

/// How the signature line starts.
pub const SIGNATURE_PREFIX: &str = "# fjord-policy-signature ";
/// What the signature covers before the text, so no other signed fjord
/// object can pass for a policy.
const SIGNED_CONTEXT: &[u8] = b"fjord-policy\x01";

/// Why a policy's signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureProblem {
    #[error(
        "no `# fjord-policy-signature` line at the end: sign the policy with `fjord network policy --network-key`"
    )]
    Unsigned,
    #[error("the signature line is not base64 of a network key and a signature")]
    Malformed,
    #[error("signed by another key than this network's")]
    WrongNetwork,
    #[error("the signature does not match the text (was it changed after signing?)")]
    BadSignature,
}

/// A policy whose signature by the network key checked out, with the
/// signed text to pass on as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedPolicy {
    pub policy: Policy,
    text: Vec<u8>,
}

impl SignedPolicy {
    /// Checks `text`'s signature line against `network`, then parses the
    /// policy above it.
    pub fn verify(text: &[u8], network: &NetworkPublicKey) -> Result<Self, PolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::at(0, PolicyProblem::TooLarge));
        }
        let (body, signature_line) = split_signature(text);
        let line = line_count(body) + 1;
        let at = |problem: SignatureProblem| PolicyError::at(line, problem.into());
        let encoded = signature_line
            .strip_prefix(SIGNATURE_PREFIX.as_bytes())
            .ok_or(at(SignatureProblem::Unsigned))?;
        if signature_line.len() > MAX_POLICY_LINE_BYTES {
            return Err(at(SignatureProblem::Malformed));
        }
        let encoded = std::str::from_utf8(encoded).map_err(|_| at(SignatureProblem::Malformed))?;
        let mut decoded = [0u8; 32 + SIGNATURE_LEN];
        let decoded_len = Base64::decode(encoded.trim(), &mut decoded).map(|bytes| bytes.len());
        if decoded_len != Ok(decoded.len()) {
            return Err(at(SignatureProblem::Malformed));
        }
        let (key, signature) = decoded.split_at(32);
        if key != network.as_bytes() {
            return Err(at(SignatureProblem::WrongNetwork));
        }
        let signature: &[u8; SIGNATURE_LEN] = signature
            .try_into()
            .map_err(|_| at(SignatureProblem::Malformed))?;
        network
            .verify(&signed_message(body), signature)
            .map_err(|_| at(SignatureProblem::BadSignature))?;
        let policy = Policy::parse(body)?;
        Ok(Self {
            policy,
            text: text.to_vec(),
        })
    }

    /// Signs policy `text` with the network key. The text must parse; a
    /// signature line it already ends with is replaced.
    pub fn sign(text: &[u8], secret: &NetworkSecret) -> Result<Self, PolicyError> {
        let (body, last) = split_signature(text);
        let mut body = if last.starts_with(SIGNATURE_PREFIX.as_bytes()) {
            body.to_vec()
        } else {
            text.to_vec()
        };
        if !body.is_empty() && !body.ends_with(b"\n") {
            body.push(b'\n');
        }
        let policy = Policy::parse(&body)?;
        let signature = secret.sign_message(&signed_message(&body));
        let signed = [secret.public_key().as_bytes().as_slice(), &signature].concat();
        let mut text = body;
        text.extend_from_slice(SIGNATURE_PREFIX.as_bytes());
        text.extend_from_slice(Base64::encode_string(&signed).as_bytes());
        text.push(b'\n');
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::at(0, PolicyProblem::TooLarge));
        }
        Ok(Self { policy, text })
    }

    /// The signed text: the policy, then its signature line.
    pub fn text(&self) -> &[u8] {
        &self.text
    }
}

/// Splits off the last line (ignoring one final newline): the text above
/// it, its newline included, and the line.
fn split_signature(text: &[u8]) -> (&[u8], &[u8]) {
    let trimmed = text.strip_suffix(b"\n").unwrap_or(text);
    match trimmed.iter().rposition(|&byte| byte == b'\n') {
        Some(newline) => trimmed.split_at(newline + 1),
        None => (&[], trimmed),
    }
}

fn line_count(text: &[u8]) -> usize {
    text.iter().filter(|&&byte| byte == b'\n').count()
}

fn signed_message(body: &[u8]) -> Vec<u8> {
    [SIGNED_CONTEXT, body].concat()
}
