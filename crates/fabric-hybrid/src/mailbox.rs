//! Remote atomics executed by their owner: the requester writes (kind, segment, offset,
//! operands) into the owner's request slot for it, with a reserved signal; the owner's
//! helper thread does the atomic with a CPU instruction on its own memory — the same
//! mechanism local ranks use on that word — and writes (sequence, previous value,
//! status) back with a reserved signal. One request per (requester, owner) pair is in
//! flight; later ones wait in order.
//!
//! Segments (appended to the job's): `REQUESTS` (a 64-byte slot per requester),
//! `REPLIES` (a 32-byte slot per owner), `OUT` (this rank's sources: a 64-byte request
//! slot per owner, then a 32-byte reply slot per requester). Nothing read from a slot is
//! trusted: the segment must be one of the job's, exposed to the requester, the offset
//! 8-aligned and inside it; a reply must carry the sequence number awaited.

use std::collections::{HashMap, VecDeque};
use titus_fabric::{Exposure, FabricError, Loc, Rank, SegmentId, SegmentSpec};

/// Signals whose top four bits are all set are the transport's own (the core's kinds end
/// at 11); bit 59 tells a reply from a request; the low 59 bits carry the sequence.
pub(crate) const RESERVED: u64 = 0xF << 60;
const REPLY_BIT: u64 = 1 << 59;
const SEQ_MASK: u64 = REPLY_BIT - 1;

pub(crate) const REQ_SLOT: u64 = 64;
pub(crate) const REP_SLOT: u64 = 32;

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Cas { expected: u64, desired: u64 },
    FetchAdd { delta: u64 },
}

/// A request waiting to be sent or answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    pub(crate) id: u64,
    pub(crate) remote: Loc,
    pub(crate) kind: Kind,
}

/// What a reserved signal says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Word {
    Request(u64),
    Reply(u64),
}

pub(crate) fn decode(value: u64) -> Option<Word> {
    if value & RESERVED != RESERVED {
        return None;
    }
    let seq = value & SEQ_MASK;
    Some(if value & REPLY_BIT != 0 {
        Word::Reply(seq)
    } else {
        Word::Request(seq)
    })
}

pub(crate) fn request_signal(seq: u64) -> u64 {
    RESERVED | (seq & SEQ_MASK)
}

pub(crate) fn reply_signal(seq: u64) -> u64 {
    RESERVED | REPLY_BIT | (seq & SEQ_MASK)
}

/// The three segments, for a job of `size` ranks.
pub(crate) fn segments(size: u32) -> [SegmentSpec; 3] {
    let n = u64::from(size);
    [
        SegmentSpec {
            name: "hybrid-requests".into(),
            len: n * REQ_SLOT,
            exposure: Exposure::All,
        },
        SegmentSpec {
            name: "hybrid-replies".into(),
            len: n * REP_SLOT,
            exposure: Exposure::All,
        },
        SegmentSpec {
            name: "hybrid-out".into(),
            len: n * (REQ_SLOT + REP_SLOT),
            exposure: Exposure::Peers(Vec::new()),
        },
    ]
}

/// A request's words: sequence, kind, segment, offset, operands.
pub(crate) fn encode_request(seq: u64, r: &Request) -> [u64; 8] {
    let (k, a, b) = match r.kind {
        Kind::Cas { expected, desired } => (1, expected, desired),
        Kind::FetchAdd { delta } => (2, delta, 0),
    };
    [
        seq,
        k,
        u64::from(r.remote.segment.0),
        r.remote.offset,
        a,
        b,
        0,
        0,
    ]
}

/// Decodes a request's words, trusting nothing: (sequence, location, kind) or why not.
pub(crate) fn decode_request(w: &[u64; 8], user_segments: usize) -> Result<(u64, Loc, Kind), u64> {
    let seg = w[2];
    if seg >= user_segments as u64 {
        return Err(1);
    }
    if !w[3].is_multiple_of(8) {
        return Err(3);
    }
    let kind = match w[1] {
        1 => Kind::Cas {
            expected: w[4],
            desired: w[5],
        },
        2 => Kind::FetchAdd { delta: w[4] },
        _ => return Err(4),
    };
    Ok((w[0], Loc::new(SegmentId(seg as u16), w[3]), kind))
}

/// Why an owner refused a request, in words.
pub(crate) fn refusal(peer: Rank, status: u64) -> FabricError {
    let why = match status {
        1 => "no such segment",
        2 => "the segment is not exposed to this rank",
        3 => "outside the segment or not 8-aligned",
        _ => "a malformed request",
    };
    FabricError::Unsupported(format!("rank {peer} refused a remote atomic: {why}"))
}

/// The requester's side: per owner, the request in flight and those waiting.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    next_seq: u64,
    pub(crate) in_flight: HashMap<Rank, (u64, Request)>,
    pub(crate) waiting: HashMap<Rank, VecDeque<Request>>,
}

impl Outbox {
    /// Queues `r` for `peer`; returns the sequence to send now, if none is in flight.
    pub(crate) fn push(&mut self, peer: Rank, r: Request) -> Option<u64> {
        if self.in_flight.contains_key(&peer) {
            self.waiting.entry(peer).or_default().push_back(r);
            return None;
        }
        self.next_seq = (self.next_seq + 1) & SEQ_MASK;
        self.in_flight.insert(peer, (self.next_seq, r));
        Some(self.next_seq)
    }

    /// The reply `seq` from `peer` arrived: the request it answers, and the next one to
    /// send (with its sequence), if any. A reply nobody awaits gives nothing.
    pub(crate) fn answered(
        &mut self,
        peer: Rank,
        seq: u64,
    ) -> Option<(Request, Option<(u64, Request)>)> {
        match self.in_flight.get(&peer) {
            Some(&(s, _)) if s == seq => {}
            _ => return None,
        }
        let (_, done) = self.in_flight.remove(&peer).expect("checked");
        let next = self
            .waiting
            .get_mut(&peer)
            .and_then(VecDeque::pop_front)
            .map(|r| {
                self.next_seq = (self.next_seq + 1) & SEQ_MASK;
                self.in_flight.insert(peer, (self.next_seq, r));
                (self.next_seq, r)
            });
        Some((done, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_nothing_else_is_reserved() {
        assert_eq!(decode(request_signal(5)), Some(Word::Request(5)));
        assert_eq!(decode(reply_signal(7)), Some(Word::Reply(7)));
        // Every kind the core sends (1..=11 in the top four bits) passes through.
        for kind in 0..15u64 {
            assert_eq!(decode(kind << 60 | 0x1234), None);
        }
        let r = Request {
            id: 1,
            remote: Loc::new(SegmentId(2), 16),
            kind: Kind::Cas {
                expected: 3,
                desired: 4,
            },
        };
        let w = encode_request(9, &r);
        assert_eq!(decode_request(&w, 3), Ok((9, r.remote, r.kind)));
        assert_eq!(decode_request(&w, 2), Err(1));
        let mut bad = w;
        bad[3] = 12;
        assert_eq!(decode_request(&bad, 3), Err(3));
        bad = w;
        bad[1] = 7;
        assert_eq!(decode_request(&bad, 3), Err(4));
    }

    #[test]
    fn one_request_per_owner_in_flight_the_rest_in_order() {
        let mut o = Outbox::default();
        let r = |id| Request {
            id,
            remote: Loc::new(SegmentId(0), 0),
            kind: Kind::FetchAdd { delta: 1 },
        };
        let s1 = o.push(4, r(1)).unwrap();
        assert_eq!(o.push(4, r(2)), None);
        assert_eq!(o.push(4, r(3)), None);
        let s4 = o.push(5, r(4)).unwrap();
        assert!(o.answered(4, s1 + 100).is_none(), "a stale reply");
        let (done, next) = o.answered(4, s1).unwrap();
        assert_eq!(done.id, 1);
        let (s2, n2) = next.unwrap();
        assert_eq!(n2.id, 2);
        let (done, next) = o.answered(4, s2).unwrap();
        assert_eq!((done.id, next.unwrap().1.id), (2, 3));
        assert_eq!(o.answered(5, s4).unwrap().0.id, 4);
    }
}
