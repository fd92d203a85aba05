//! The rendezvous's wire format. Frames are a u32 little-endian length then the payload;
//! a payload is [`MAGIC`] (name and version) then one message encoded by postcard (serde).
//! Nothing read from the socket is trusted: frames are bounded, every length inside is
//! checked against the bytes that came, and a message must fill its frame exactly.

use super::BootstrapError;
use crate::Rank;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::TcpStream;

/// The protocol's name and version, before every message.
pub(super) const MAGIC: &[u8; 8] = b"TITUSRV3";
/// Largest frame sent or accepted (an all-gather of 10^4 ranks × 4 KiB fits).
pub(super) const MAX_FRAME: u32 = 256 << 20;
/// [`text`]'s kinds.
pub(super) const TAG_REFUSED: u8 = 3;
pub(super) const TAG_ERROR: u8 = 6;

pub(super) fn io_fail(what: &str, e: std::io::Error) -> BootstrapError {
    BootstrapError::Failed(format!("{what}: {e}"))
}

/// Sends one frame; a payload over [`MAX_FRAME`] is refused unsent (its length would not be
/// read, and past 4 GiB would wrap in the u32 prefix).
pub(super) fn send(stream: &mut TcpStream, payload: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&n| n <= MAX_FRAME)
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "a message of {} bytes, more than the rendezvous's frame limit of {MAX_FRAME} bytes",
                    payload.len()
                ),
            )
        })?;
    let mut buf = Vec::with_capacity(4 + payload.len());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(payload);
    stream.write_all(&buf)
}

/// Reads one frame of at most `max` bytes that must arrive whole before `deadline` (a peer
/// trickling bytes cannot stretch it: the timeout of each read is what is left).
pub(super) fn recv_by(
    stream: &mut TcpStream,
    deadline: std::time::Instant,
    max: u32,
) -> std::io::Result<Vec<u8>> {
    let mut read_all = |buf: &mut [u8]| -> std::io::Result<()> {
        let mut at = 0;
        while at < buf.len() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            stream.set_read_timeout(Some(left))?;
            match stream.read(&mut buf[at..]) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Err(std::io::ErrorKind::TimedOut.into());
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    };
    let mut len = [0u8; 4];
    read_all(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes (at most {max} here)"),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    read_all(&mut buf)?;
    Ok(buf)
}

pub(super) fn recv(stream: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    stream.read_exact(&mut buf)?;
    Ok(buf)
}

/// Every message of the protocol, as postcard encodes it after [`MAGIC`] (the protocol's
/// name and version: a stranger's bytes, or another version's, are refused before any
/// decoding). Lengths inside are postcard's varints, bounded by the frame they arrive in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Msg {
    /// A rank's greeting.
    Hello {
        secret: Vec<u8>,
        rank: Rank,
        size: u32,
        runtime: u32,
    },
    /// Joined.
    Welcome,
    /// Refused, with the reason.
    Refused(String),
    /// A rank's contribution to an all-gather.
    Round(Vec<u8>),
    /// An all-gather's result, by rank.
    Result(Vec<Vec<u8>>),
    /// The rendezvous failed, with the reason.
    Error(String),
}

fn encode(m: &Msg) -> Vec<u8> {
    crate::versioned::encode(MAGIC, m)
}

/// Decodes a payload: the version, then one whole message.
fn decode(p: &[u8]) -> Result<Msg, BootstrapError> {
    crate::versioned::decode(MAGIC, p)
        .map_err(|e| BootstrapError::Protocol(format!("rendezvous message: {e}")))
}

/// A refusal or a failure (`tag`: [`TAG_REFUSED`] or [`TAG_ERROR`]) with its reason.
pub(super) fn text(tag: u8, msg: &str) -> Vec<u8> {
    encode(&if tag == TAG_REFUSED {
        Msg::Refused(msg.into())
    } else {
        Msg::Error(msg.into())
    })
}

/// The WELCOME payload.
pub(super) fn welcome() -> Vec<u8> {
    encode(&Msg::Welcome)
}

/// Constant-time comparison, so a prober learns nothing from timing.
pub(super) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A rank's greeting: the job secret it was given, its rank and the job size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hello {
    pub(super) secret: Vec<u8>,
    pub(super) rank: Rank,
    pub(super) size: u32,
    /// Which of the process's runtimes (one rendezvous serves them all).
    pub(super) runtime: u32,
}

/// The HELLO payload.
pub(super) fn hello(secret: &[u8], rank: Rank, size: u32, runtime: u32) -> Vec<u8> {
    encode(&Msg::Hello {
        secret: secret.to_vec(),
        rank,
        size,
        runtime,
    })
}

/// Parses a greeting (from anyone who connected): `Err` with the reason it is refused.
pub(super) fn parse_hello(p: &[u8]) -> Result<Hello, String> {
    if !p.starts_with(MAGIC) {
        return Err("not a Titus rendezvous client".into());
    }
    match decode(p) {
        Ok(Msg::Hello {
            secret,
            rank,
            size,
            runtime,
        }) => Ok(Hello {
            secret,
            rank,
            size,
            runtime,
        }),
        Ok(_) => Err("not a greeting".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The rendezvous's answer to a greeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answer {
    /// Joined.
    Welcome,
    /// Refused, with the reason.
    Refused(String),
    /// The rendezvous failed, with the reason.
    Error(String),
}

/// Parses the answer to a greeting.
pub(super) fn parse_answer(p: &[u8]) -> Result<Answer, BootstrapError> {
    match decode(p)? {
        Msg::Welcome => Ok(Answer::Welcome),
        Msg::Refused(why) => Ok(Answer::Refused(why)),
        Msg::Error(why) => Ok(Answer::Error(why)),
        _ => Err(BootstrapError::Protocol(
            "unexpected answer to a greeting".into(),
        )),
    }
}

/// A rank's contribution to an all-gather.
pub(super) fn round(blob: &[u8]) -> Vec<u8> {
    encode(&Msg::Round(blob.to_vec()))
}

/// Parses a rank's contribution: its blob.
pub(super) fn parse_round(p: &[u8]) -> Result<Vec<u8>, BootstrapError> {
    match decode(p)? {
        Msg::Round(b) => Ok(b),
        _ => Err(BootstrapError::Protocol("expected a round".into())),
    }
}

/// An all-gather's result: every rank's blob, by rank.
pub(super) fn result(blobs: &[Vec<u8>]) -> Vec<u8> {
    encode(&Msg::Result(blobs.to_vec()))
}

/// The length of [`result`] over blobs of `lens` bytes, without building it: the version,
/// the message's tag, then postcard's varint count and each blob's varint length and bytes.
pub(super) fn result_len(lens: impl ExactSizeIterator<Item = usize>) -> u64 {
    // A LEB128 varint: 7 bits a byte.
    let varint = |n: u64| u64::from((u64::BITS - n.leading_zeros()).div_ceil(7).max(1));
    let count = lens.len() as u64;
    let blobs: u64 = lens.map(|n| varint(n as u64) + n as u64).sum();
    MAGIC.len() as u64 + 1 + varint(count) + blobs
}

/// Parses the rendezvous's answer to a round in a job of `size` ranks: the blobs, or the
/// failure it reports (`Ok(Err(reason))`).
pub(super) fn parse_result(
    p: &[u8],
    size: u32,
) -> Result<Result<Vec<Vec<u8>>, String>, BootstrapError> {
    match decode(p)? {
        Msg::Result(blobs) => {
            if blobs.len() != size as usize {
                return Err(BootstrapError::Protocol(format!(
                    "{} blobs for {size} ranks",
                    blobs.len()
                )));
            }
            Ok(Ok(blobs))
        }
        Msg::Error(why) => Ok(Err(why)),
        _ => Err(BootstrapError::Protocol(
            "expected an all-gather's result".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_len_is_the_encoded_length() {
        for lens in [
            vec![],
            vec![0],
            vec![0, 1, 127, 128, 300],
            vec![16_384; 3],
            vec![5; 200],
        ] {
            let blobs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![7u8; n]).collect();
            assert_eq!(
                result_len(lens.iter().copied()),
                result(&blobs).len() as u64,
                "{lens:?}"
            );
        }
        // Counted, not built: two ranks of 3 GiB each.
        assert!(result_len([3 << 30, 3 << 30].into_iter()) > 6 << 30);
    }
}

/// Property tests of what the rendezvous decodes from sockets anyone may open: frames and
/// every message, from arbitrary bytes and from mutated valid messages — a value or a
/// typed error, never a panic; valid messages round-trip. Cases: `PROPTEST_CASES` (64;
/// 1,000,000 by hand take about 20 s per crate here; ~50,000,000 an hour).
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::proptest_config as config;

    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..max)
    }

    /// Any valid message of the protocol.
    fn any_message() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (bytes(40), any::<u32>(), any::<u32>(), any::<u32>())
                .prop_map(|(s, r, n, k)| hello(&s, r, n, k)),
            Just(welcome()),
            (prop_oneof![Just(TAG_REFUSED), Just(TAG_ERROR)], ".{0,40}")
                .prop_map(|(t, m)| text(t, &m)),
            bytes(64).prop_map(|b| round(&b)),
            proptest::collection::vec(bytes(24), 0..5).prop_map(|bs| result(&bs)),
        ]
    }

    /// Every decoder on the same bytes: none may panic.
    fn decode_all(p: &[u8], size: u32) {
        let _ = parse_hello(p);
        let _ = parse_answer(p);
        let _ = parse_round(p);
        let _ = parse_result(p, size);
        // And the same bytes after the version, where postcard decodes them.
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(p);
        let _ = (
            parse_hello(&v),
            parse_answer(&v),
            parse_round(&v),
            parse_result(&v, size),
        );
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_bytes_decode_or_are_refused(p in bytes(96), size in 0u32..6) {
            decode_all(&p, size);
        }

        #[test]
        fn any_tag_with_garbage_decodes_or_is_refused(tag in 0u8..8, rest in bytes(96), size in 0u32..6) {
            let mut p = vec![tag];
            p.extend_from_slice(&rest);
            decode_all(&p, size);
        }

        #[test]
        fn mutated_messages_decode_or_are_refused(
            m in any_message(),
            flips in proptest::collection::vec((any::<usize>(), 1..=255u8), 0..4),
            word in proptest::option::of((any::<usize>(), any::<u32>())),
            cut in any::<usize>(),
            size in 0u32..6,
        ) {
            let mut p = m;
            for (at, x) in flips {
                if !p.is_empty() {
                    let i = at % p.len();
                    p[i] ^= x;
                }
            }
            if let Some((at, w)) = word.filter(|_| p.len() >= 4) {
                let i = at % (p.len() - 3);
                p[i..i + 4].copy_from_slice(&w.to_le_bytes());
            }
            decode_all(&p, size);
            p.truncate(cut % (p.len() + 1));
            decode_all(&p, size);
        }

        #[test]
        fn frames_decode_or_are_refused(
            len in prop_oneof![any::<u32>(), 0u32..64, Just(MAX_FRAME), Just(MAX_FRAME + 1)],
            body in bytes(64),
        ) {
            let mut wire = len.to_le_bytes().to_vec();
            wire.extend_from_slice(&body);
            match recv(&mut std::io::Cursor::new(&wire)) {
                Ok(f) => {
                    prop_assert_eq!(f.len(), len as usize);
                    prop_assert_eq!(&f[..], &body[..len as usize]);
                }
                Err(e) => prop_assert!(
                    len > MAX_FRAME || (len as usize) > body.len(),
                    "{}", e
                ),
            }
        }

        #[test]
        fn valid_messages_round_trip(
            secret in bytes(40),
            rank in any::<u32>(),
            size in any::<u32>(),
            runtime in any::<u32>(),
            why in ".{0,40}",
            blobs in proptest::collection::vec(bytes(24), 0..5),
        ) {
            prop_assert_eq!(
                parse_hello(&hello(&secret, rank, size, runtime)),
                Ok(Hello { secret: secret.clone(), rank, size, runtime })
            );
            prop_assert_eq!(parse_answer(&welcome()), Ok(Answer::Welcome));
            prop_assert_eq!(
                parse_answer(&text(TAG_REFUSED, &why)),
                Ok(Answer::Refused(why.clone()))
            );
            prop_assert_eq!(
                parse_answer(&text(TAG_ERROR, &why)),
                Ok(Answer::Error(why.clone()))
            );
            prop_assert_eq!(
                parse_result(&text(TAG_ERROR, &why), 3),
                Ok(Err(why))
            );
            for b in &blobs {
                prop_assert_eq!(parse_round(&round(b)), Ok(b.clone()));
            }
            let n = blobs.len() as u32;
            prop_assert_eq!(parse_result(&result(&blobs), n), Ok(Ok(blobs.clone())));
            prop_assert!(parse_result(&result(&blobs), n + 1).is_err());
            let mut framed = Vec::new();
            let p = round(&secret);
            framed.extend_from_slice(&(p.len() as u32).to_le_bytes());
            framed.extend_from_slice(&p);
            prop_assert_eq!(recv(&mut std::io::Cursor::new(&framed)).unwrap(), p);
        }
    }
}
