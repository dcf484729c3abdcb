//! A session with fixed keys, for the crypto stage's tests and its
//! benchmark (which includes this file by path): what is sealed matters,
//! not who could open it.

use std::time::Instant;

use fjord_proto::handshake::SessionKeys;
use fjord_proto::session::Session;
use zeroize::Zeroizing;

pub fn fixed_session() -> Session {
    let keys = SessionKeys {
        sending: Zeroizing::new([7; 32]),
        receiving: Zeroizing::new([9; 32]),
        local_index: 1,
        remote_index: 2,
        is_initiator: true,
    };
    Session::new(
        &keys,
        Instant::now(),
        &fjord_proto::Timing::default(),
        fjord_proto::CipherPolicy::default(),
        false,
    )
}
