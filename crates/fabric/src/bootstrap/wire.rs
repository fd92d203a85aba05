//! The rendezvous's wire format. Frames are a u32 little-endian length then the payload;
//! payloads start with a tag byte. Nothing read from the socket is trusted: lengths are
//! bounded and checked.

use super::BootstrapError;
use std::io::{Read, Write};
use std::net::TcpStream;

pub(super) const MAGIC: &[u8; 8] = b"TITUSRV1";
/// Largest frame accepted (an all-gather of 10^4 ranks × 4 KiB fits).
const MAX_FRAME: u32 = 256 << 20;
pub(super) const TAG_HELLO: u8 = 1;
pub(super) const TAG_WELCOME: u8 = 2;
pub(super) const TAG_REFUSED: u8 = 3;
pub(super) const TAG_ROUND: u8 = 4;
pub(super) const TAG_RESULT: u8 = 5;
pub(super) const TAG_ERROR: u8 = 6;

pub(super) fn io_fail(what: &str, e: std::io::Error) -> BootstrapError {
    BootstrapError::Failed(format!("{what}: {e}"))
}

pub(super) fn send(stream: &mut TcpStream, payload: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4 + payload.len());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
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

pub(super) fn recv(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
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

/// A cursor over a received payload that fails on truncation instead of panicking.
pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl Reader<'_> {
    pub(super) fn take(&mut self, n: usize) -> Result<&[u8], BootstrapError> {
        if self.0.len() < n {
            return Err(BootstrapError::Protocol(format!(
                "truncated: wanted {n} bytes, {} left",
                self.0.len()
            )));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    pub(super) fn u8(&mut self) -> Result<u8, BootstrapError> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u32(&mut self) -> Result<u32, BootstrapError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub(super) fn bytes(&mut self) -> Result<Vec<u8>, BootstrapError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

pub(super) fn put_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    buf.extend_from_slice(&(b.len() as u32).to_le_bytes());
    buf.extend_from_slice(b);
}

pub(super) fn text(tag: u8, msg: &str) -> Vec<u8> {
    let mut p = vec![tag];
    put_bytes(&mut p, msg.as_bytes());
    p
}

/// Constant-time comparison, so a prober learns nothing from timing.
pub(super) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
