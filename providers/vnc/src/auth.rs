//! VNC authentication (RFB security type 2): the DES challenge–response of RFC 6143, section 7.2.2.
//!
//! The server sends 16 random bytes; the client encrypts them with DES (ECB, two blocks) keyed by the
//! password — its first 8 bytes, zero-padded — and sends the 16 result bytes back. RFB's historical DES code
//! reads key bytes least significant bit first, so with a standard DES the bits of every key byte are
//! reversed first. Passwords longer than 8 bytes are cut, as every VNC server does.

use des::Des;
use des::cipher::{Array, BlockCipherEncrypt, KeyInit};

/// The response to `challenge` for `password`.
pub fn response(password: &str, challenge: &[u8; 16]) -> [u8; 16] {
    let mut key = [0u8; 8];
    for (slot, byte) in key.iter_mut().zip(password.as_bytes()) {
        *slot = byte.reverse_bits();
    }
    encrypt(key, challenge)
}

fn encrypt(key: [u8; 8], data: &[u8; 16]) -> [u8; 16] {
    let cipher = Des::new(&Array::from(key));
    let mut out = [0u8; 16];
    for (src, dst) in data.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
        let mut block = [0u8; 8];
        block.copy_from_slice(src);
        let mut block = Array::from(block);
        cipher.encrypt_block(&mut block);
        dst.copy_from_slice(&block);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixed key `vncpasswd` files are "encrypted" with, in RFB's bit order.
    const OBFUSCATION_KEY: [u8; 8] = [23, 82, 107, 6, 35, 78, 88, 7];

    /// What `x11vnc -storepasswd PW file` writes: the password's 8 bytes DES-encrypted with the fixed key,
    /// through the same bit-reversed key schedule — the same construction as the auth response.
    fn stored(password: &str) -> [u8; 8] {
        let mut key = [0u8; 8];
        for (slot, byte) in key.iter_mut().zip(OBFUSCATION_KEY) {
            *slot = byte.reverse_bits();
        }
        let mut data = [0u8; 16];
        data[..password.len().min(8)].copy_from_slice(&password.as_bytes()[..password.len().min(8)]);
        let out = encrypt(key, &data);
        let mut first = [0u8; 8];
        first.copy_from_slice(&out[..8]);
        first
    }

    #[test]
    fn matches_files_written_by_x11vnc() {
        // `x11vnc -storepasswd secret12 f; xxd -p f` and the same for `ab`, on Debian 12's x11vnc 0.9.16.
        assert_eq!(stored("secret12"), 0x24b5ae4ce15503c6u64.to_be_bytes());
        assert_eq!(stored("ab"), 0xf9b845297cb5d3f2u64.to_be_bytes());
    }

    #[test]
    fn response_depends_on_the_first_eight_bytes_only() {
        let challenge = [7u8; 16];
        assert_eq!(response("password", &challenge), response("password-long", &challenge));
        assert_ne!(response("password", &challenge), response("passwore", &challenge));
        assert_ne!(response("", &challenge), challenge);
        // The two halves of the challenge are encrypted independently (ECB).
        let out = response("pw", &challenge);
        assert_eq!(out[..8], out[8..]);
    }
}
