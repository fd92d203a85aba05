//! The cause of a failed task, on every rank.
//!
//! A rank whose task fails floods an ABORT signal that carries only its rank and an error
//! code (one 64-bit word), so the other ranks would learn "rank 1 aborted the epoch
//! (code 7)". After a task failure every rank knows it (the code says so on every rank),
//! so all of them join one more all-gather in `titus_run`, each with a fixed-size record:
//! the rank where the task failed puts its message there, the others nothing, and each
//! rank reports the message of the rank its error names. Nothing in a record is trusted:
//! its version, length and text are checked, control characters become spaces, and a
//! record that does not decode leaves the rank with its own message.

/// The most bytes of a message carried to the other ranks.
pub(crate) const MAX_CAUSE: usize = 240;
/// Record version.
const VERSION: u8 = 1;
/// Bytes of a record: version, whether it holds a message, the message's length (u16 LE),
/// the message (zero-padded to `MAX_CAUSE`). Every rank sends this many (an application's
/// all-gather needs equal lengths).
pub(crate) const RECORD: usize = 4 + MAX_CAUSE;

/// The record of a rank: its own task failure's message (cut to `MAX_CAUSE` bytes at a
/// character boundary), or none.
pub(crate) fn encode(message: Option<&str>) -> Vec<u8> {
    let mut r = vec![0u8; RECORD];
    r[0] = VERSION;
    if let Some(m) = message {
        let mut n = m.len().min(MAX_CAUSE);
        while !m.is_char_boundary(n) {
            n -= 1;
        }
        r[1] = 1;
        r[2..4].copy_from_slice(&(n as u16).to_le_bytes());
        r[4..4 + n].copy_from_slice(&m.as_bytes()[..n]);
    }
    r
}

/// The message in a record from another rank, if it holds a valid one.
pub(crate) fn decode(record: &[u8]) -> Option<String> {
    if record.len() != RECORD || record[0] != VERSION || record[1] != 1 {
        return None;
    }
    let n = usize::from(u16::from_le_bytes([record[2], record[3]]));
    if n == 0 || n > MAX_CAUSE {
        return None;
    }
    let text = std::str::from_utf8(&record[4..4 + n]).ok()?;
    Some(
        text.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_travels_and_bad_records_are_refused() {
        let m = "task 3 of rank 0 failed on rank 1: the function of task kind 2 returned 7";
        assert_eq!(decode(&encode(Some(m))).as_deref(), Some(m));
        assert_eq!(decode(&encode(None)), None);
        // Cut at a character boundary.
        let long = "é".repeat(MAX_CAUSE);
        let got = decode(&encode(Some(&long))).unwrap();
        assert_eq!(got.len(), MAX_CAUSE);
        assert!(long.starts_with(&got));
        // Wrong size, version, length or text: refused; control characters neutralised.
        let good = encode(Some("ok\nthen"));
        assert_eq!(decode(&good).as_deref(), Some("ok then"));
        assert_eq!(decode(&good[..RECORD - 1]), None);
        assert_eq!(decode(&[]), None);
        let mut bad = good.clone();
        bad[0] = 2;
        assert_eq!(decode(&bad), None);
        let mut bad = good.clone();
        bad[2..4].copy_from_slice(&(MAX_CAUSE as u16 + 1).to_le_bytes());
        assert_eq!(decode(&bad), None);
        let mut bad = good.clone();
        bad[4] = 0xff;
        assert_eq!(decode(&bad), None);
    }
}
