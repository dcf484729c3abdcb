//! A node's own certificate renewed while it runs (a reload, before the
//! old one expires): every member in session hears a Hello with the new
//! one, as at a first greeting, and keeps it because it was issued later
//! (`upsert`). No session is touched, so no member drops the node.

use std::time::Instant;

use fjord_proto::PublicKey;

use super::{Mesh, MeshDrop};
use crate::cert::{CertError, Certificate};

impl Mesh {
    /// Takes `certificate` as this node's own if it is valid, ours and
    /// issued after the one in use; whether it was taken.
    pub fn renew_certificate(
        &mut self,
        now: Instant,
        certificate: Certificate,
    ) -> Result<bool, MeshDrop> {
        if certificate.node_key != self.own_key() {
            return Err(CertError::WrongNode.into());
        }
        let certificate = self.accept(now, &certificate)?;
        if certificate.issued_at <= self.config.certificate.issued_at {
            return Ok(false);
        }
        self.config.certificate = certificate;
        let members: Vec<PublicKey> = self.direct_members().collect();
        for key in members {
            self.greet(key);
        }
        Ok(true)
    }
}
