//! What a rank publishes so that others can reach it (its endpoint name and each segment's
//! key, base, length and exposure), and what it learns of its peers. The record: a name
//! and version (`TITUSAD1`), then postcard (serde) of the address, the segments (key, base,
//! length, the ranks it is exposed to or none for everyone) and the process's identity
//! (`Process`: node, pid, start time), and where its liveness port listens (host name,
//! port, nonce: [`crate::watch`]).

use crate::OfiFabric;
use crate::error::transport;
use crate::handle::Handle;
use serde::{Deserialize, Serialize};
use titus_fabric::{Exposure, FabricError, Rank};
use titus_ofi_sys as sys;

/// A peer's segment as it published it.
#[derive(Debug, Clone)]
pub(crate) struct RemoteSegment {
    pub(crate) key: u64,
    pub(crate) base: u64,
    pub(crate) len: u64,
    pub(crate) exposed_to_me: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) fi_addr: u64,
    pub(crate) segments: Vec<RemoteSegment>,
    /// The peer's process, when it runs where this one can see it (same node, same pid
    /// namespace): whether it still exists can be asked of the kernel.
    pub(crate) local: Option<Process>,
    /// Elsewhere: the connection to its liveness port, where one could be set up.
    pub(crate) watch: Option<std::sync::Arc<crate::watch::Watch>>,
    /// On this node: how long its process has been stopped (SIGSTOP, a debugger).
    pub(crate) stopped: std::sync::Arc<titus_fabric::process::Stillness>,
}

/// Where a rank's liveness port listens (an empty host: none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Liveness {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) nonce: u64,
}

/// A process as the kernel names it: the node and pid namespace (a hash of the boot id
/// and the namespace's inode; 0 when unknown), the pid, and its start time (clock ticks
/// after boot: a pid reused by another process has another start time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Process {
    pub(crate) node: u64,
    pub(crate) pid: u32,
    pub(crate) start: u64,
}

impl Process {
    /// This process.
    pub(crate) fn me() -> Process {
        let pid = std::process::id();
        // The node as the bootstrap names it (host, boot id, mount and pid namespaces, or
        // the identity a test forces to play several nodes on one machine): equal exactly
        // where a pid names the same process. 0 (no pid checks: peers are watched through
        // their liveness port) where the kernel does not say which.
        let forced = titus_fabric::env_var::non_blank(titus_fabric::env_var::NODE_ID).is_some();
        let known = forced
            || (std::path::Path::new("/proc/sys/kernel/random/boot_id").exists()
                && std::path::Path::new("/proc/self/ns/pid").exists());
        let node = if known {
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            for &c in titus_fabric::bootstrap::node_identity().as_bytes() {
                h = (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3);
            }
            h | 1
        } else {
            0
        };
        Process {
            node,
            pid,
            start: start_time(pid).unwrap_or(0),
        }
    }

    /// Whether this process is gone: no such pid, a zombie, or a pid now held by a process
    /// that started at another time. `false` when in doubt.
    pub(crate) fn gone(&self) -> bool {
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            Ok(stat) => {
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
                let zombie = fields.first().is_some_and(|s| *s == "Z" || *s == "X");
                let reused = fields
                    .get(19)
                    .and_then(|s| s.parse::<u64>().ok())
                    .is_some_and(|t| self.start != 0 && t != self.start);
                zombie || reused
            }
        }
    }
}

/// A process's start time, clock ticks after boot (field 22 of /proc/PID/stat).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The record's name and version, before the postcard body.
const RECORD_MAGIC: &[u8; 8] = b"TITUSAD2";
/// Bounds on what a record may announce.
const MAX_ADDRESS: usize = 4096;
const MAX_SEGMENTS: usize = 4096;

/// A published record as postcard encodes it.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    addr: Vec<u8>,
    segments: Vec<SegmentRecord>,
    node: u64,
    pid: u32,
    start: u64,
    host: String,
    port: u16,
    nonce: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct SegmentRecord {
    key: u64,
    base: u64,
    len: u64,
    /// The ranks it is exposed to; `None`: every rank.
    exposed_to: Option<Vec<Rank>>,
}

/// This rank's published record: [`RECORD_MAGIC`], then (postcard) its address, each
/// segment's key, base, length and exposure, and its process's identity.
pub(crate) fn encode(
    addr: &[u8],
    segs: &[(u64, u64, u64, &Exposure)],
    process: Process,
    live: &Liveness,
) -> Vec<u8> {
    let record = Record {
        addr: addr.to_vec(),
        segments: segs
            .iter()
            .map(|&(key, base, len, exp)| SegmentRecord {
                key,
                base,
                len,
                exposed_to: match exp {
                    Exposure::All => None,
                    Exposure::Peers(p) => Some(p.clone()),
                },
            })
            .collect(),
        node: process.node,
        pid: process.pid,
        start: process.start,
        host: live.host.clone(),
        port: live.port,
        nonce: live.nonce,
    };
    titus_fabric::versioned::encode(RECORD_MAGIC, &record)
}

/// What a rank publishes instead of its record when it cannot take part (every rank
/// learns why in the same exchange, instead of waiting for a record that never comes).
const REFUSAL_MAGIC: &[u8; 8] = b"TITUSRF1";

/// Longest refusal kept from another rank (bytes).
const REFUSAL_MAX: usize = 1024;

/// A refusal to publish in place of this rank's record: why it cannot join.
pub(crate) fn encode_refusal(why: &str) -> Vec<u8> {
    titus_fabric::versioned::encode(REFUSAL_MAGIC, &why)
}

/// Another rank's refusal, if `blob` is one (cut to [`REFUSAL_MAX`] bytes, and anything
/// but printable ASCII — ours is, host names are — shown as `?`: not trusted beyond being
/// printed, and not able to reorder or hide the text around it).
pub(crate) fn refusal(blob: &[u8]) -> Option<String> {
    let why: String = titus_fabric::versioned::decode(REFUSAL_MAGIC, blob).ok()?;
    let mut cut = why.len().min(REFUSAL_MAX);
    while !why.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(
        why[..cut]
            .chars()
            .map(|c| {
                if c == ' ' || c.is_ascii_graphic() {
                    c
                } else {
                    '?'
                }
            })
            .collect(),
    )
}

/// Parses another rank's record; nothing in it is trusted (every length is bounded by the
/// bytes that came, the address and the segment count by [`MAX_ADDRESS`] and
/// [`MAX_SEGMENTS`], and the record must end where its bytes do).
pub(crate) fn decode(
    rank: Rank,
    me: Rank,
    blob: &[u8],
) -> Result<(Vec<u8>, Vec<RemoteSegment>, Process, Liveness), FabricError> {
    let bad = |what: &str| {
        FabricError::Unsupported(format!(
            "rank {rank} published a malformed address record ({what})"
        ))
    };
    let r: Record =
        titus_fabric::versioned::decode(RECORD_MAGIC, blob).map_err(|e| bad(&e.to_string()))?;
    if r.addr.len() > MAX_ADDRESS {
        return Err(bad("address longer than 4 KiB"));
    }
    if r.segments.len() > MAX_SEGMENTS {
        return Err(bad("more than 4096 segments"));
    }
    if r.host.len() > crate::watch::HOST_MAX || !crate::watch::valid_host(&r.host) {
        return Err(bad("a host name that is not one"));
    }
    let segs = r
        .segments
        .into_iter()
        .map(|s| RemoteSegment {
            key: s.key,
            base: s.base,
            len: s.len,
            exposed_to_me: rank == me || s.exposed_to.is_none_or(|p| p.contains(&me)),
        })
        .collect();
    let process = Process {
        node: r.node,
        pid: r.pid,
        start: r.start,
    };
    let live = Liveness {
        host: r.host,
        port: r.port,
        nonce: r.nonce,
    };
    Ok((r.addr, segs, process, live))
}

impl OfiFabric {
    pub(crate) fn name(h: &Handle) -> Result<Vec<u8>, FabricError> {
        {
            let mut buf = vec![0u8; 1024];
            let mut len = buf.len();
            // SAFETY: buf is writable for len bytes; the shim updates len to the name's size.
            let ret = unsafe { sys::tofi_getname(h.0.as_ptr(), buf.as_mut_ptr().cast(), &mut len) };
            if ret != 0 {
                return Err(transport("fi_getname", ret));
            }
            buf.truncate(len.min(1024));
            Ok(buf)
        }
    }

    pub(crate) fn segment_desc(h: &Handle, seg: usize) -> (u64, u64) {
        let (mut key, mut base) = (0u64, 0u64);
        // SAFETY: seg is below the number of segments registered at open; key and base are
        // valid for writing.
        unsafe { sys::tofi_segment(h.0.as_ptr(), seg, &mut key, &mut base) };
        (key, base)
    }

    pub(crate) fn insert(h: &Handle, addr: &[u8], rank: Rank) -> Result<u64, FabricError> {
        if addr.is_empty() {
            return Err(FabricError::Unsupported(format!(
                "rank {rank} published an empty address"
            )));
        }
        {
            let mut fi_addr = 0u64;
            // SAFETY: addr holds the peer's full fi_getname output (the provider reads its
            // own address format from it); fi_addr is valid for writing.
            let ret =
                unsafe { sys::tofi_av_insert(h.0.as_ptr(), addr.as_ptr().cast(), &mut fi_addr) };
            if ret != 0 {
                return Err(transport("fi_av_insert", ret));
            }
            Ok(fi_addr)
        }
    }
}

/// Property tests of the address-record parse (a record comes from another rank through
/// the rendezvous): arbitrary bytes and mutated valid records give a record or a typed
/// error naming the rank, never a panic; valid records round-trip. Cases:
/// `PROPTEST_CASES` (64; 1,000,000 by hand take about 20 s per crate here; ~50,000,000 an hour).
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(64),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    type Seg = (u64, u64, u64, Exposure);

    fn any_record() -> impl Strategy<Value = (Vec<u8>, Vec<Seg>, Process)> {
        let exposure = prop_oneof![
            Just(Exposure::All),
            proptest::collection::vec(0u32..8, 0..4).prop_map(Exposure::Peers),
        ];
        (
            proptest::collection::vec(any::<u8>(), 0..48),
            proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>(), exposure), 0..4),
            (any::<u64>(), any::<u32>(), any::<u64>()),
        )
            .prop_map(|(addr, segs, (node, pid, start))| (addr, segs, Process { node, pid, start }))
    }

    fn encoded(addr: &[u8], segs: &[Seg], p: Process) -> Vec<u8> {
        let refs: Vec<(u64, u64, u64, &Exposure)> =
            segs.iter().map(|(k, b, l, e)| (*k, *b, *l, e)).collect();
        let live = Liveness {
            host: "node-7.cluster".into(),
            port: 4242,
            nonce: 99,
        };
        encode(addr, &refs, p, &live)
    }

    fn check(blob: &[u8]) -> Result<(), TestCaseError> {
        match decode(3, 1, blob) {
            Ok((addr, segs, _, live)) => {
                prop_assert!(live.host.len() <= crate::watch::HOST_MAX);
                prop_assert!(crate::watch::valid_host(&live.host));
                prop_assert!(addr.len() <= 4096);
                prop_assert!(segs.len() <= 4096);
            }
            Err(e) => prop_assert!(
                matches!(&e, FabricError::Unsupported(m)
                    if m.starts_with("rank 3 published a malformed address record")),
                "{}",
                e
            ),
        }
        Ok(())
    }

    #[test]
    fn a_refusal_travels_bounded_and_printable() {
        let why = "rank 0 on host h0: provider tcp offers only a loopback address";
        assert_eq!(refusal(&encode_refusal(why)).as_deref(), Some(why));
        // Text that could reorder or hide what is printed around it.
        let odd = "rank 1\u{202e}txet\u{1b}[2J\u{200b}end\u{e9}";
        assert_eq!(
            refusal(&encode_refusal(odd)).as_deref(),
            Some("rank 1?txet?[2J?end?")
        );
        let long = "x".repeat(5000);
        assert_eq!(
            refusal(&encode_refusal(&long)).map(|w| w.len()),
            Some(REFUSAL_MAX)
        );
        // A record is not a refusal, nor is a refusal a record.
        let rec = encoded(
            &[1, 2],
            &[],
            Process {
                node: 1,
                pid: 2,
                start: 3,
            },
        );
        assert_eq!(refusal(&rec), None);
        assert!(decode(0, 1, &encode_refusal(why)).is_err());
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_bytes_parse_or_name_the_rank(blob in proptest::collection::vec(any::<u8>(), 0..160)) {
            check(&blob)?;
        }

        #[test]
        fn valid_records_round_trip((addr, segs, p) in any_record()) {
            let (a, got, q, live) = decode(3, 1, &encoded(&addr, &segs, p)).unwrap();
            prop_assert_eq!(a, addr);
            prop_assert_eq!(q, p);
            prop_assert_eq!((live.host.as_str(), live.port, live.nonce), ("node-7.cluster", 4242, 99));
            prop_assert_eq!(got.len(), segs.len());
            for (g, (k, b, l, e)) in got.iter().zip(&segs) {
                prop_assert_eq!((g.key, g.base, g.len), (*k, *b, *l));
                let mine = match e {
                    Exposure::All => true,
                    Exposure::Peers(ps) => ps.contains(&1),
                };
                prop_assert_eq!(g.exposed_to_me, mine);
            }
        }

        #[test]
        fn mutated_records_parse_or_name_the_rank(
            (addr, segs, p) in any_record(),
            flips in proptest::collection::vec((any::<usize>(), 1..=255u8), 0..4),
            word in proptest::option::of((any::<usize>(), prop_oneof![any::<u32>(), Just(u32::MAX), 0u32..5000])),
            cut in proptest::option::of(any::<usize>()),
        ) {
            let mut blob = encoded(&addr, &segs, p);
            for (at, x) in flips {
                let i = at % blob.len();
                blob[i] ^= x;
            }
            if let Some((at, w)) = word {
                let i = at % (blob.len() - 3);
                blob[i..i + 4].copy_from_slice(&w.to_le_bytes());
            }
            if let Some(c) = cut {
                blob.truncate(c % (blob.len() + 1));
            }
            check(&blob)?;
        }
    }
}
