//! RFB wire format (RFC 6143): the handshake up to `ServerInit`, and the client-to-server messages.
//!
//! The handshake speaks protocol 3.8 (and 3.7 and 3.3 to older servers), security types None (1) and VNC
//! authentication (2). After `ServerInit` the client asks for its own pixel format, [`PixelFormat::RGBX`]:
//! 32 bits per pixel, little-endian, red in the lowest byte — so a raw pixel on the wire is the bytes
//! R, G, B, pad and a ZRLE compact pixel is R, G, B, and decoding is a copy.

use std::io::{Read, Write};

use crate::auth;
use crate::error::{VncError, WireError};

pub const RAW: i32 = 0;
pub const COPY_RECT: i32 = 1;
pub const ZRLE: i32 = 16;
pub const DESKTOP_SIZE: i32 = -223;
pub const LAST_RECT: i32 = -224;
pub const EXTENDED_DESKTOP_SIZE: i32 = -308;

/// RFB `PIXEL_FORMAT` (16 bytes on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PixelFormat {
    pub bits_per_pixel: u8,
    pub depth: u8,
    pub big_endian: bool,
    pub true_colour: bool,
    pub red_max: u16,
    pub green_max: u16,
    pub blue_max: u16,
    pub red_shift: u8,
    pub green_shift: u8,
    pub blue_shift: u8,
}

impl PixelFormat {
    /// The format this client asks every server for.
    pub const RGBX: PixelFormat = PixelFormat {
        bits_per_pixel: 32,
        depth: 24,
        big_endian: false,
        true_colour: true,
        red_max: 255,
        green_max: 255,
        blue_max: 255,
        red_shift: 0,
        green_shift: 8,
        blue_shift: 16,
    };

    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0] = self.bits_per_pixel;
        b[1] = self.depth;
        b[2] = u8::from(self.big_endian);
        b[3] = u8::from(self.true_colour);
        b[4..6].copy_from_slice(&self.red_max.to_be_bytes());
        b[6..8].copy_from_slice(&self.green_max.to_be_bytes());
        b[8..10].copy_from_slice(&self.blue_max.to_be_bytes());
        b[10] = self.red_shift;
        b[11] = self.green_shift;
        b[12] = self.blue_shift;
        b
    }

    pub fn from_bytes(b: &[u8; 16]) -> Self {
        Self {
            bits_per_pixel: b[0],
            depth: b[1],
            big_endian: b[2] != 0,
            true_colour: b[3] != 0,
            red_max: u16::from_be_bytes([b[4], b[5]]),
            green_max: u16::from_be_bytes([b[6], b[7]]),
            blue_max: u16::from_be_bytes([b[8], b[9]]),
            red_shift: b[10],
            green_shift: b[11],
            blue_shift: b[12],
        }
    }
}

/// What the server said about itself after the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInit {
    pub width: u16,
    pub height: u16,
    pub format: PixelFormat,
    pub name: String,
    /// The protocol minor version agreed (3, 7 or 8).
    pub minor: u8,
}

/// How the handshake failed, before the address is attached.
#[derive(Debug)]
pub enum HandshakeError {
    Wire(WireError),
    Refused(String),
    AuthFailed(String),
    PasswordRequired,
    Unsupported(Vec<u8>),
}

impl From<std::io::Error> for HandshakeError {
    fn from(e: std::io::Error) -> Self {
        HandshakeError::Wire(e.into())
    }
}

impl HandshakeError {
    pub fn at(self, address: &str) -> VncError {
        let address = address.to_string();
        match self {
            HandshakeError::Wire(WireError::Io(reason)) => VncError::Connect { address, reason },
            HandshakeError::Wire(WireError::Protocol(reason)) => VncError::Protocol { address, reason },
            HandshakeError::Refused(reason) => VncError::Refused { address, reason },
            HandshakeError::AuthFailed(reason) => VncError::AuthFailed { address, reason },
            HandshakeError::PasswordRequired => VncError::PasswordRequired { address },
            HandshakeError::Unsupported(offered) => VncError::UnsupportedSecurity { address, offered },
        }
    }
}

fn protocol(message: impl Into<String>) -> HandshakeError {
    HandshakeError::Wire(WireError::Protocol(message.into()))
}

pub fn read_u8(r: &mut impl Read) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

pub fn read_u16(r: &mut impl Read) -> std::io::Result<u16> {
    let mut b = [0u8; 2];
    r.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}

pub fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

/// Reads a length-prefixed string (reason strings, the desktop name), refusing absurd lengths.
fn read_string(r: &mut impl Read) -> Result<String, HandshakeError> {
    let len = read_u32(r)? as usize;
    if len > 64 * 1024 {
        return Err(protocol(format!("a string of {len} bytes")));
    }
    let mut bytes = vec![0u8; len];
    r.read_exact(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Runs the handshake on a fresh connection: version, security, `ClientInit` (shared), `ServerInit`.
pub fn handshake(stream: &mut (impl Read + Write), password: Option<&str>) -> Result<ServerInit, HandshakeError> {
    let mut version = [0u8; 12];
    stream.read_exact(&mut version)?;
    let text = String::from_utf8_lossy(&version);
    let parsed = text
        .strip_prefix("RFB ")
        .and_then(|v| v.strip_suffix('\n'))
        .and_then(|v| v.split_once('.'))
        .and_then(|(major, minor)| Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?)));
    let minor = match parsed {
        Some((3, m)) if m >= 8 => 8,
        Some((3, 7)) => 7,
        // 3.3, and the odd 3.4/3.6 some servers send, speak 3.3.
        Some((3, m)) if m < 7 => 3,
        Some((major, _)) if major > 3 => 8,
        // What the peer sent is not quoted: an address a task names must not become a way to read a banner.
        _ => return Err(protocol("not an RFB server (its greeting is not an RFB protocol version)".to_string())),
    };
    stream.write_all(format!("RFB 003.00{minor}\n").as_bytes())?;

    let security = if minor == 3 {
        match read_u32(stream)? {
            0 => return Err(HandshakeError::Refused(read_string(stream)?)),
            t @ (1 | 2) => t as u8,
            other => return Err(HandshakeError::Unsupported(vec![other.min(255) as u8])),
        }
    } else {
        let count = read_u8(stream)?;
        if count == 0 {
            return Err(HandshakeError::Refused(read_string(stream)?));
        }
        let mut offered = vec![0u8; usize::from(count)];
        stream.read_exact(&mut offered)?;
        // Prefer no authentication when the server allows it; else VNC authentication.
        let chosen = if offered.contains(&1) {
            1
        } else if offered.contains(&2) {
            2
        } else {
            return Err(HandshakeError::Unsupported(offered));
        };
        stream.write_all(&[chosen])?;
        chosen
    };

    if security == 2 {
        let Some(password) = password else {
            return Err(HandshakeError::PasswordRequired);
        };
        let mut challenge = [0u8; 16];
        stream.read_exact(&mut challenge)?;
        stream.write_all(&auth::response(password, &challenge))?;
    }
    // SecurityResult: always after VNC authentication; after None only from 3.8 on.
    if security == 2 || minor == 8 {
        match read_u32(stream)? {
            0 => {}
            _ if minor == 8 => return Err(HandshakeError::AuthFailed(read_string(stream)?)),
            _ => {
                return Err(HandshakeError::AuthFailed("the server rejected the password".into()));
            }
        }
    }

    // ClientInit: share the desktop with other clients.
    stream.write_all(&[1])?;
    let width = read_u16(stream)?;
    let height = read_u16(stream)?;
    let mut format = [0u8; 16];
    stream.read_exact(&mut format)?;
    let name = read_string(stream)?;
    Ok(ServerInit { width, height, format: PixelFormat::from_bytes(&format), name, minor })
}

/// `SetPixelFormat`.
pub fn set_pixel_format(format: PixelFormat) -> Vec<u8> {
    let mut m = vec![0u8, 0, 0, 0];
    m.extend_from_slice(&format.to_bytes());
    m
}

/// `SetEncodings`, in order of preference.
pub fn set_encodings(encodings: &[i32]) -> Vec<u8> {
    let mut m = vec![2u8, 0];
    m.extend_from_slice(&(encodings.len() as u16).to_be_bytes());
    for e in encodings {
        m.extend_from_slice(&e.to_be_bytes());
    }
    m
}

/// `FramebufferUpdateRequest` for the whole screen.
pub fn update_request(incremental: bool, width: u16, height: u16) -> [u8; 10] {
    let mut m = [0u8; 10];
    m[0] = 3;
    m[1] = u8::from(incremental);
    m[6..8].copy_from_slice(&width.to_be_bytes());
    m[8..10].copy_from_slice(&height.to_be_bytes());
    m
}

/// A non-incremental `FramebufferUpdateRequest` for the top-left pixel: servers answer it at once, changed or
/// not, and cheaply (see `session` on fences).
pub const FENCE_REQUEST: [u8; 10] = [3, 0, 0, 0, 0, 0, 0, 1, 0, 1];

/// `KeyEvent`.
pub fn key_event(down: bool, keysym: u32) -> [u8; 8] {
    let mut m = [0u8; 8];
    m[0] = 4;
    m[1] = u8::from(down);
    m[4..8].copy_from_slice(&keysym.to_be_bytes());
    m
}

/// `PointerEvent`: `mask` bit n is button n+1 (bits 3–6: wheel up, down, left, right; bit 7: button 8).
pub fn pointer_event(mask: u8, x: u16, y: u16) -> [u8; 6] {
    let mut m = [0u8; 6];
    m[0] = 5;
    m[1] = mask;
    m[2..4].copy_from_slice(&x.to_be_bytes());
    m[4..6].copy_from_slice(&y.to_be_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted server: what it sends, and what the client wrote.
    struct Script {
        input: std::io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Script {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn server_init(name: &str) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&640u16.to_be_bytes());
        b.extend_from_slice(&480u16.to_be_bytes());
        b.extend_from_slice(&PixelFormat::RGBX.to_bytes());
        b.extend_from_slice(&(name.len() as u32).to_be_bytes());
        b.extend_from_slice(name.as_bytes());
        b
    }

    fn script(parts: &[&[u8]]) -> Script {
        Script { input: std::io::Cursor::new(parts.concat()), output: Vec::new() }
    }

    #[test]
    fn version_38_with_no_authentication() {
        let init = server_init("desk");
        let mut s = script(&[b"RFB 003.008\n", &[2, 2, 1], &0u32.to_be_bytes(), &init]);
        let server = handshake(&mut s, None).unwrap();
        assert_eq!((server.width, server.height, server.name.as_str(), server.minor), (640, 480, "desk", 8));
        // Version, the chosen security type (None preferred), ClientInit shared.
        assert_eq!(s.output, [b"RFB 003.008\n".as_slice(), &[1], &[1]].concat());
    }

    #[test]
    fn vnc_authentication_sends_the_des_response() {
        let challenge = [9u8; 16];
        let init = server_init("x");
        let mut s = script(&[b"RFB 003.008\n", &[1, 2], &challenge, &0u32.to_be_bytes(), &init]);
        handshake(&mut s, Some("secret")).unwrap();
        let expected = auth::response("secret", &challenge);
        assert_eq!(&s.output[12..13], &[2]);
        assert_eq!(&s.output[13..29], &expected);
    }

    #[test]
    fn wrong_password_carries_the_server_reason() {
        let reason = b"Authentication failed";
        let mut s = script(&[
            b"RFB 003.008\n",
            &[1, 2],
            &[0u8; 16],
            &1u32.to_be_bytes(),
            &(reason.len() as u32).to_be_bytes(),
            reason,
        ]);
        match handshake(&mut s, Some("nope")) {
            Err(HandshakeError::AuthFailed(r)) => assert_eq!(r, "Authentication failed"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_password_for_a_server_that_wants_one() {
        let mut s = script(&[b"RFB 003.008\n", &[1, 2]]);
        assert!(matches!(handshake(&mut s, None), Err(HandshakeError::PasswordRequired)));
    }

    #[test]
    fn refusals_and_unsupported_types() {
        let reason = b"Too many security failures";
        let mut s = script(&[b"RFB 003.008\n", &[0], &(reason.len() as u32).to_be_bytes(), reason]);
        assert!(matches!(handshake(&mut s, None), Err(HandshakeError::Refused(r)) if r.contains("Too many")));
        let mut s = script(&[b"RFB 003.008\n", &[2, 19, 30]]);
        assert!(matches!(handshake(&mut s, None), Err(HandshakeError::Unsupported(t)) if t == vec![19, 30]));
        let mut s = script(&[b"HTTP/1.1 400"]);
        assert!(matches!(handshake(&mut s, None), Err(HandshakeError::Wire(WireError::Protocol(_)))));
    }

    #[test]
    fn version_33_lets_the_server_choose() {
        let init = server_init("old");
        let mut s = script(&[b"RFB 003.003\n", &1u32.to_be_bytes(), &init]);
        let server = handshake(&mut s, None).unwrap();
        assert_eq!(server.minor, 3);
        assert_eq!(s.output, [b"RFB 003.003\n".as_slice(), &[1]].concat());
        // A 3.3 server failing VNC authentication sends no reason.
        let mut s = script(&[b"RFB 003.003\n", &2u32.to_be_bytes(), &[0u8; 16], &1u32.to_be_bytes()]);
        assert!(matches!(handshake(&mut s, Some("pw")), Err(HandshakeError::AuthFailed(_))));
    }

    #[test]
    fn client_messages_match_the_rfc_layout() {
        assert_eq!(pointer_event(0b1000_0001, 300, 2), [5, 0x81, 1, 44, 0, 2]);
        assert_eq!(key_event(true, 0xff0d), [4, 1, 0, 0, 0, 0, 0xff, 0x0d]);
        assert_eq!(update_request(true, 1280, 800), [3, 1, 0, 0, 0, 0, 5, 0, 3, 32]);
        assert_eq!(FENCE_REQUEST, update_request(false, 1, 1));
        assert_eq!(set_encodings(&[0, -223]), [2, 0, 0, 2, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x21]);
        let pf = set_pixel_format(PixelFormat::RGBX);
        assert_eq!(pf.len(), 20);
        assert_eq!(PixelFormat::from_bytes(pf[4..20].try_into().unwrap()), PixelFormat::RGBX);
    }
}
