//! The byte formats ranks exchange outside remote memory (rendezvous messages, address
//! records, announcements): a format-and-version tag, then one postcard (serde) value
//! that must fill the rest. Nothing decoded is trusted: every length inside is bounded
//! by the bytes that came.

use serde::{Deserialize, Serialize};

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionedError {
    /// The tag is not the expected one: another format, or another version of it.
    #[error("another format or version")]
    OtherVersion,
    /// The value ends before its bytes say it does.
    #[error("truncated")]
    Truncated,
    /// Bytes follow the value.
    #[error("{0} trailing bytes")]
    Trailing(usize),
    /// Anything else postcard refused.
    #[error("{0}")]
    Malformed(String),
}

/// `tag` then `value`.
pub fn encode<T: Serialize>(tag: &[u8], value: &T) -> Vec<u8> {
    let mut out = tag.to_vec();
    out.extend(postcard::to_allocvec(value).expect("a value of these formats always encodes"));
    out
}

/// The value after `tag`, which must fill `bytes`.
pub fn decode<'a, T: Deserialize<'a>>(tag: &[u8], bytes: &'a [u8]) -> Result<T, VersionedError> {
    let body = bytes
        .strip_prefix(tag)
        .ok_or(VersionedError::OtherVersion)?;
    let (value, rest) = postcard::take_from_bytes::<T>(body).map_err(|e| match e {
        postcard::Error::DeserializeUnexpectedEnd => VersionedError::Truncated,
        e => VersionedError::Malformed(e.to_string()),
    })?;
    if !rest.is_empty() {
        return Err(VersionedError::Trailing(rest.len()));
    }
    Ok(value)
}
