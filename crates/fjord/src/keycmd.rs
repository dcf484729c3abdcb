//! `fjord genkey`, `fjord pubkey` and `fjord genpsk`: the same input and
//! output, byte for byte, as `wg genkey`, `wg pubkey` and `wg genpsk`.
//!
//! - genkey: 32 random bytes, clamped for Curve25519, base64 and a newline.
//! - genpsk: 32 random bytes, unclamped, base64 and a newline.
//! - pubkey: reads exactly 44 characters of base64 private key; after them
//!   only whitespace (or NUL) may follow. Leading whitespace is refused, as
//!   `wg pubkey` refuses it. Prints the public key, base64 and a newline.
//!
//! The functions take the input and output streams so they can be tested;
//! the binary passes stdin and stdout.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;

use fjord_proto::keys::{KEY_BASE64_LEN, KEY_LEN};
use fjord_proto::{PresharedKey, PrivateKey};
use zeroize::Zeroizing;

/// Why a key command failed. I/O errors are printed as part of the message,
/// so `source()` does not repeat them; see [`KeyCommandError::io_error`].
#[derive(Debug, thiserror::Error)]
pub enum KeyCommandError {
    #[error("cannot get random bytes from the operating system: {0}")]
    Random(getrandom::Error),
    #[error("cannot read the private key: {0}")]
    Read(io::Error),
    #[error("cannot write the key: {0}")]
    Write(io::Error),
    #[error("invalid private key: expected 44 base64 characters ending in '='")]
    InvalidPrivateKey,
    #[error("invalid private key: trailing characters found after the key")]
    TrailingCharacters,
}

impl KeyCommandError {
    /// The I/O error behind a read or write failure (for example a broken
    /// pipe, which the binary may want to treat quietly).
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            KeyCommandError::Read(error) | KeyCommandError::Write(error) => Some(error),
            _ => None,
        }
    }
}

/// `genkey`: writes a new private key.
pub fn genkey(out: &mut impl Write) -> Result<(), KeyCommandError> {
    let bytes = random_key_bytes()?;
    let key = PrivateKey::from_bytes(*bytes);
    write_key_line(out, &key.to_base64())
}

/// `genpsk`: writes a new preshared key.
pub fn genpsk(out: &mut impl Write) -> Result<(), KeyCommandError> {
    let bytes = random_key_bytes()?;
    let key = PresharedKey::from_bytes(*bytes);
    write_key_line(out, &key.to_base64())
}

/// `pubkey`: reads a private key from `input` and writes its public key.
pub fn pubkey(input: &mut impl Read, out: &mut impl Write) -> Result<(), KeyCommandError> {
    let mut text = Zeroizing::new([0u8; KEY_BASE64_LEN]);
    read_full(input, text.as_mut())?;
    skip_trailing_space(input)?;
    let text =
        std::str::from_utf8(text.as_ref()).map_err(|_| KeyCommandError::InvalidPrivateKey)?;
    if text.starts_with(is_wg_space) {
        // `from_base64` trims; `wg` does not, so neither do we.
        return Err(KeyCommandError::InvalidPrivateKey);
    }
    let key = PrivateKey::from_base64(text).map_err(|_| KeyCommandError::InvalidPrivateKey)?;
    write_key_line(out, &key.public_key().to_base64())
}

/// The warning `wg genkey` prints when its output is a regular file that
/// others can access: the new key would be readable by them.
pub const WORLD_ACCESSIBLE_WARNING: &str = "Warning: writing to world accessible file.\nConsider setting the umask to 077 and trying again.\n";

/// Whether `genkey` should print [`WORLD_ACCESSIBLE_WARNING`]: `output` is a
/// regular file with any permission bit for others, as `wg` checks.
pub fn output_is_world_accessible(output: impl AsFd) -> bool {
    let Ok(owned) = output.as_fd().try_clone_to_owned() else {
        return false;
    };
    match std::fs::File::from(owned).metadata() {
        Ok(metadata) => metadata.is_file() && metadata.permissions().mode() & 0o007 != 0,
        Err(_) => false,
    }
}

fn random_key_bytes() -> Result<Zeroizing<[u8; KEY_LEN]>, KeyCommandError> {
    let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
    getrandom::fill(bytes.as_mut()).map_err(KeyCommandError::Random)?;
    Ok(bytes)
}

fn write_key_line(out: &mut impl Write, base64: &str) -> Result<(), KeyCommandError> {
    let mut line = Zeroizing::new([0u8; KEY_BASE64_LEN + 1]);
    line[..KEY_BASE64_LEN].copy_from_slice(base64.as_bytes());
    line[KEY_BASE64_LEN] = b'\n';
    out.write_all(line.as_ref())
        .and_then(|()| out.flush())
        .map_err(KeyCommandError::Write)
}

/// Fills `buf`, or fails with `InvalidPrivateKey` if the input ends first.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> Result<(), KeyCommandError> {
    match input.read_exact(buf) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
            Err(KeyCommandError::InvalidPrivateKey)
        }
        Err(error) => Err(KeyCommandError::Read(error)),
    }
}

/// Consumes the rest of the input, which may only be whitespace or NUL.
fn skip_trailing_space(input: &mut impl Read) -> Result<(), KeyCommandError> {
    let mut chunk = [0u8; 256];
    loop {
        let len = match input.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(len) => len,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(KeyCommandError::Read(error)),
        };
        if !chunk[..len].iter().all(|&b| b == 0 || is_wg_space_byte(b)) {
            return Err(KeyCommandError::TrailingCharacters);
        }
    }
}

/// C's `isspace` in the C locale, which `wg` uses.
fn is_wg_space_byte(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

fn is_wg_space(c: char) -> bool {
    u8::try_from(c).is_ok_and(is_wg_space_byte)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::{Command, Stdio};

    use super::*;

    // A pair produced by `wg genkey | tee priv | wg pubkey`.
    const WG_PRIVATE: &str = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
    const WG_PUBLIC: &str = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=";
    const WG: &str = "/usr/bin/wg";

    fn run_pubkey(input: &[u8]) -> Result<String, KeyCommandError> {
        let mut out = Vec::new();
        pubkey(&mut &input[..], &mut out)?;
        Ok(String::from_utf8(out).expect("base64 output is ASCII"))
    }

    fn run_to_string(command: fn(&mut Vec<u8>) -> Result<(), KeyCommandError>) -> String {
        let mut out = Vec::new();
        command(&mut out).expect("writing to a Vec cannot fail");
        String::from_utf8(out).expect("base64 output is ASCII")
    }

    #[test]
    fn pubkey_matches_known_pair() {
        assert_eq!(
            run_pubkey(WG_PRIVATE.as_bytes()).unwrap(),
            format!("{WG_PUBLIC}\n")
        );
    }

    #[test]
    fn pubkey_accepts_trailing_whitespace_and_nul() {
        for tail in ["\n", "\r\n", " \t\n\n", "\0\n", "\x0b\x0c"] {
            let input = format!("{WG_PRIVATE}{tail}");
            assert_eq!(
                run_pubkey(input.as_bytes()).unwrap(),
                format!("{WG_PUBLIC}\n")
            );
        }
    }

    #[test]
    fn pubkey_refuses_bad_input() {
        let cases: [(&[u8], &str); 6] = [
            (b"", "invalid private key: expected"),
            (b"abc\n", "invalid private key: expected"),
            (
                b" yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=",
                "invalid private key",
            ),
            (
                b"yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk= x",
                "trailing characters",
            ),
            (
                b"yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\nyAnz",
                "trailing characters",
            ),
            (
                b"!Anz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=",
                "invalid private key: expected",
            ),
        ];
        for (input, expected) in cases {
            let error = run_pubkey(input).unwrap_err();
            assert!(
                error.to_string().contains(expected),
                "{input:?}: got '{error}', expected '{expected}'"
            );
        }
        // Non-canonical: the last character carries bits past the 256th.
        assert!(run_pubkey(b"yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmn=").is_err());
        assert!(run_pubkey(&[0xff; 44]).is_err());
    }

    #[test]
    fn genkey_prints_a_clamped_key() {
        let line = run_to_string(genkey);
        assert_eq!(line.len(), KEY_BASE64_LEN + 1);
        assert!(line.ends_with("=\n"));
        assert!(PrivateKey::from_base64(line.trim_end()).is_ok());
        // Same 32 bytes, read through the unclamped key type to inspect them.
        let key = PresharedKey::from_base64(line.trim_end()).unwrap();
        let bytes = key.as_bytes();
        assert_eq!(bytes[0] & 7, 0);
        assert_eq!(bytes[31] & 0xc0, 0x40);
        assert_ne!(line, run_to_string(genkey));
    }

    #[test]
    fn genpsk_prints_a_key() {
        let line = run_to_string(genpsk);
        assert_eq!(line.len(), KEY_BASE64_LEN + 1);
        assert!(PresharedKey::from_base64(line.trim_end()).is_ok());
        assert_ne!(line, run_to_string(genpsk));
    }

    #[test]
    fn write_errors_are_reported() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from(io::ErrorKind::BrokenPipe))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let error = genkey(&mut Broken).unwrap_err();
        assert_eq!(
            error.io_error().map(io::Error::kind),
            Some(io::ErrorKind::BrokenPipe)
        );
        assert!(error.to_string().starts_with("cannot write the key: "));
    }

    #[test]
    fn world_accessible_output_is_detected() {
        let path = std::env::temp_dir().join(format!("fjord-keycmd-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        file.set_permissions(std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert!(output_is_world_accessible(&file));
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .unwrap();
        assert!(!output_is_world_accessible(&file));
        std::fs::remove_file(&path).unwrap();
    }

    /// Runs `wg <args>` with `input` on stdin; `None` if `wg` is not installed.
    fn wg(args: &[&str], input: &[u8]) -> Option<std::process::Output> {
        if !Path::new(WG).exists() {
            eprintln!("note: {WG} not installed; skipping comparison with wg");
            return None;
        }
        let mut child = Command::new(WG)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("wg starts");
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(input)
            .expect("wg reads its input");
        Some(child.wait_with_output().expect("wg runs"))
    }

    #[test]
    fn pubkey_matches_wg_for_random_keys() {
        for _ in 0..16 {
            let mut bytes = [0u8; KEY_LEN];
            getrandom::fill(&mut bytes).unwrap();
            // Unclamped on purpose: `wg pubkey` accepts any 32 bytes.
            let text = PresharedKey::from_bytes(bytes).to_base64();
            let input = format!("{}\n", text.as_str());
            let Some(wg_out) = wg(&["pubkey"], input.as_bytes()) else {
                return;
            };
            assert!(wg_out.status.success());
            let ours = run_pubkey(input.as_bytes()).unwrap();
            assert_eq!(ours.as_bytes(), wg_out.stdout.as_slice());
        }
    }

    #[test]
    fn wg_accepts_our_genkey_and_genpsk() {
        for command in [genkey as fn(&mut Vec<u8>) -> _, genpsk] {
            let line = run_to_string(command);
            let Some(wg_out) = wg(&["pubkey"], line.as_bytes()) else {
                return;
            };
            assert!(
                wg_out.status.success(),
                "wg refused {}",
                line.trim_end().len()
            );
            assert_eq!(
                run_pubkey(line.as_bytes()).unwrap().as_bytes(),
                wg_out.stdout
            );
        }
    }

    #[test]
    fn pubkey_of_wg_genkey_matches_wg_pubkey() {
        for _ in 0..8 {
            let Some(generated) = wg(&["genkey"], b"") else {
                return;
            };
            assert!(generated.status.success());
            let Some(wg_out) = wg(&["pubkey"], &generated.stdout) else {
                return;
            };
            assert_eq!(
                run_pubkey(&generated.stdout).unwrap().as_bytes(),
                wg_out.stdout
            );
        }
    }

    #[test]
    fn pubkey_accepts_and_refuses_what_wg_does() {
        let inputs: [&[u8]; 7] = [
            b"yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=",
            b"yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\n\n \0",
            b" yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=",
            b"yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=x",
            b"yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmn=",
            b"yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk",
            b"",
        ];
        for input in inputs {
            let Some(wg_out) = wg(&["pubkey"], input) else {
                return;
            };
            let ours = run_pubkey(input);
            assert_eq!(ours.is_ok(), wg_out.status.success(), "input {input:?}");
            if let Ok(ours) = ours {
                assert_eq!(ours.as_bytes(), wg_out.stdout);
            }
        }
    }
}
