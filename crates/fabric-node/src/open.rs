//! Opening one rank, collectively: agree on the job's tag and that every rank shares this
//! node, create this rank's object, learn every peer's segments, map them, and unlink the
//! names once every rank has mapped what it needs.

use crate::fabric::{NodeFabric, View};
use crate::layout;
use crate::life::Life;
use crate::shm::Mapping;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;
use titus_fabric::bootstrap::{Exchange, node_identity};
use titus_fabric::versioned::{self, VersionedError};
use titus_fabric::{
    Addressing, Capabilities, Exposure, FabricConfig, FabricError, KeyMode, Rank, Segment,
    SharedWords,
};

/// The shared-memory object names of a job start with `titus-<tag>-` (then 8 random hex
/// digits of each opening, then the rank); the tag is derived from the job secret when
/// there is one (so `titus launch` can find what killed ranks left), random otherwise. 32
/// hex digits.
pub fn job_tag(secret: &str) -> String {
    // Two FNV-1a passes with different offset bases: a name, not a key — the objects are
    // owner-only and unlinked as soon as the job has mapped them; the tag only has to be
    // unguessable without the secret and say nothing usable about it (64 of its bits
    // cannot be inverted to a secret of 128).
    let fnv = |basis: u64| {
        let mut h = basis;
        for b in b"titus-node\0".iter().chain(secret.as_bytes()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x6c62_272e_07bb_0142)
    )
}

/// The prefix of every object name of the job with `tag` (in `/dev/shm`).
pub fn object_prefix(tag: &str) -> String {
    format!("titus-{tag}-")
}

/// Removes what a job left in `/dev/shm` (ranks that were killed before they unlinked
/// their objects); returns how many objects it removed.
pub fn remove_leftovers(secret: &str) -> usize {
    let prefix = object_prefix(&job_tag(secret));
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| rustix::shm::unlink(format!("/{}", e.file_name().to_string_lossy())).is_ok())
        .count()
}

fn random_tag() -> Result<String, FabricError> {
    let mut b = [0u8; 16];
    rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).map_err(|e| {
        FabricError::Transport {
            call: "getrandom",
            code: e.raw_os_error(),
            detail: e.to_string(),
        }
    })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn object_name(tag: &str, rank: Rank) -> String {
    format!("/{}{rank}", object_prefix(tag))
}

fn bad(rank: Rank, what: impl std::fmt::Display) -> FabricError {
    FabricError::Unsupported(format!("node backend: rank {rank}'s announcement: {what}"))
}

/// An announcement: its name and version, then its body (`titus_fabric::versioned`).
fn decode_with<'a, T: Deserialize<'a>>(magic: &[u8; 4], b: &'a [u8]) -> Result<T, String> {
    versioned::decode(magic, b).map_err(|e| match e {
        VersionedError::OtherVersion => "not a node-backend announcement of this version".into(),
        e => e.to_string(),
    })
}

/// Who a rank is: process id, node, and (rank 0's counts) the job tag.
#[derive(Debug, Serialize, Deserialize)]
struct Identity {
    pid: u32,
    node: String,
    tag: String,
}

fn encode_identity(id: &Identity) -> Vec<u8> {
    versioned::encode(b"TNI2", id)
}

fn decode_identity(b: &[u8]) -> Result<Identity, String> {
    decode_with(b"TNI2", b)
}

/// A segment's length and the ranks it is exposed to (`None`: every rank).
type SegmentEntry = (u64, Option<Vec<Rank>>);

/// A rank's segments: lengths and exposure.
fn encode_segments(config: &FabricConfig) -> Vec<u8> {
    let table: Vec<SegmentEntry> = config
        .segments
        .iter()
        .map(|s| {
            let exposure = match &s.exposure {
                Exposure::All => None,
                Exposure::Peers(p) => Some(p.clone()),
            };
            (s.len.div_ceil(8) * 8, exposure)
        })
        .collect();
    versioned::encode(b"TNS2", &table)
}

fn decode_segments(b: &[u8], size: u32) -> Result<Vec<(u64, Exposure)>, String> {
    let table: Vec<SegmentEntry> = decode_with(b"TNS2", b)?;
    if table.len() > usize::from(u16::MAX) {
        return Err(format!("{} segments (at most {})", table.len(), u16::MAX));
    }
    let mut out = Vec::with_capacity(table.len());
    for (i, (len, exposure)) in table.into_iter().enumerate() {
        if !len.is_multiple_of(8) || len > layout::MAX_OBJECT {
            return Err(format!("segment {i} of {len} bytes"));
        }
        let exposure = match exposure {
            None => Exposure::All,
            Some(ranks) => {
                if let Some(bad) = ranks.iter().find(|&&x| x >= size) {
                    return Err(format!("segment {i} exposed to rank {bad} of {size}"));
                }
                Exposure::Peers(ranks)
            }
        };
        out.push((len, exposure));
    }
    Ok(out)
}

/// Unlinks an object's name when dropped, unless disarmed.
struct Unlink(Option<String>);

impl Drop for Unlink {
    fn drop(&mut self) {
        if let Some(n) = self.0.take() {
            Mapping::unlink(&n);
        }
    }
}

/// Segments over `map` at the places [`layout::place`] gives.
fn segments(
    map: &Arc<Mapping>,
    names: &[String],
    lens: &[u64],
) -> Result<Vec<Segment>, FabricError> {
    let (offsets, _) = layout::place(lens).ok_or(FabricError::Unsupported(
        "node backend: segments too large".into(),
    ))?;
    let mem: Arc<dyn SharedWords> = map.clone();
    names
        .iter()
        .zip(lens)
        .zip(offsets)
        .map(|((name, &len), off)| Segment::over(name.clone(), mem.clone(), off, len))
        .collect()
}

/// Opens rank `rank` of `size` (see [`crate::Node`]); every rank must share this node.
/// Returns the fabric and the exchange for the job's later all-gathers.
pub fn open(
    rank: Rank,
    size: u32,
    exchange: Option<Box<dyn Exchange>>,
    config: FabricConfig,
) -> Result<(NodeFabric, Option<Box<dyn Exchange>>), FabricError> {
    open_inner(rank, size, exchange, config, false)
}

/// [`open`] for a job across nodes (the hybrid fabric): maps the declared peers that
/// share this node only; operations to the others are refused (`NotAPeer`), for another
/// backend to carry. [`NodeFabric::is_local`] says which peers are mapped.
pub fn open_local(
    rank: Rank,
    size: u32,
    exchange: Option<Box<dyn Exchange>>,
    config: FabricConfig,
) -> Result<(NodeFabric, Option<Box<dyn Exchange>>), FabricError> {
    open_inner(rank, size, exchange, config, true)
}

fn open_inner(
    rank: Rank,
    size: u32,
    mut exchange: Option<Box<dyn Exchange>>,
    config: FabricConfig,
    local_only: bool,
) -> Result<(NodeFabric, Option<Box<dyn Exchange>>), FabricError> {
    let origin = Instant::now();
    if size > 1 && exchange.is_none() {
        return Err(FabricError::Unsupported(
            "a job of several ranks needs a rendezvous".into(),
        ));
    }
    if rank >= size {
        return Err(FabricError::NoSuchRank { rank, size });
    }
    if let Some(&p) = config.peers.iter().find(|&&p| p >= size) {
        return Err(FabricError::NoSuchRank { rank: p, size });
    }
    let mut gather = |blob: Vec<u8>| -> Result<Vec<Vec<u8>>, FabricError> {
        match exchange.as_mut() {
            Some(x) => Ok(x.all_gather(&blob)?),
            None => Ok(vec![blob]),
        }
    };
    // 1. Who is who, and the tag (rank 0's): the job's, then one of this opening (a
    // process may open several fabrics in turn; no name is ever reused).
    let tag = if rank == 0 {
        let job = match titus_fabric::env_var::get(titus_fabric::env_var::JOB_SECRET) {
            Ok(Some(s)) if !s.is_empty() => job_tag(&s),
            _ => random_tag()?,
        };
        format!("{job}-{}", &random_tag()?[..8])
    } else {
        String::new()
    };
    let me = Identity {
        pid: std::process::id(),
        node: node_identity(),
        tag,
    };
    let ids = gather(encode_identity(&me))?
        .iter()
        .enumerate()
        .map(|(r, b)| decode_identity(b).map_err(|e| bad(r as Rank, e)))
        .collect::<Result<Vec<_>, _>>()?;
    if ids.len() != size as usize {
        return Err(FabricError::Unsupported(format!(
            "node backend: the exchange gathered {} ranks, the job has {size}",
            ids.len()
        )));
    }
    if !local_only && let Some(r) = ids.iter().position(|i| i.node != ids[0].node) {
        return Err(FabricError::Unsupported(format!(
            "the node backend joins ranks of one node, but rank {r} runs on another node than rank 0 ({} vs {}): use the ofi backend",
            ids[r].node, ids[0].node
        )));
    }
    let tag = ids[0].tag.clone();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !tag
        .split_once('-')
        .is_some_and(|(j, o)| hex(j, 32) && hex(o, 8))
    {
        return Err(bad(
            0,
            format!("job tag '{tag}' is not 32 hex digits, '-', 8 hex digits"),
        ));
    }
    // 2. This rank's object.
    let lens: Vec<u64> = config
        .segments
        .iter()
        .map(|s| s.len.div_ceil(8) * 8)
        .collect();
    let names: Vec<String> = config.segments.iter().map(|s| s.name.clone()).collect();
    let (_, total) = layout::place(&lens).ok_or(FabricError::Unsupported(
        "node backend: this rank's segments exceed 1 TiB".into(),
    ))?;
    let own_name = object_name(&tag, rank);
    let own = Arc::new(Mapping::create(&own_name, total as usize)?);
    let mut guard = Unlink(Some(own_name.clone()));
    layout::init(own.words(), rank, size);
    let own_view = View {
        segments: segments(&own, &names, &lens)?,
        exposure: config.segments.iter().map(|s| s.exposure.clone()).collect(),
        map: own,
        life: None,
    };
    // 3. Everyone's segments; map the peers'.
    let tables = gather(encode_segments(&config))?;
    let mut views: Vec<Option<View>> = (0..size).map(|_| None).collect();
    for &p in &config.peers {
        if p == rank || views[p as usize].is_some() || ids[p as usize].node != me.node {
            continue;
        }
        let table = decode_segments(&tables[p as usize], size).map_err(|e| bad(p, e))?;
        let (plens, exposure): (Vec<u64>, Vec<Exposure>) = table.into_iter().unzip();
        let (_, ptotal) = layout::place(&plens).ok_or_else(|| bad(p, "segments exceed 1 TiB"))?;
        let name = object_name(&tag, p);
        let map = Arc::new(Mapping::open(&name, ptotal as usize)?);
        layout::header_ok(map.words(), p, size).map_err(|e| bad(p, format!("{name}: {e}")))?;
        let pnames: Vec<String> = (0..plens.len())
            .map(|i| {
                names
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("segment {i}"))
            })
            .collect();
        let pid = ids[p as usize].pid;
        let pidfd = rustix::process::Pid::from_raw(pid as i32).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
        views[p as usize] = Some(View {
            segments: segments(&map, &pnames, &plens)?,
            exposure,
            map,
            life: Some(Life::new(pid, pidfd)),
        });
    }
    views[rank as usize] = Some(own_view);
    // 4. Everyone mapped what it needs: no name is needed any more.
    gather(Vec::new())?;
    drop(guard.0.take());
    Mapping::unlink(&own_name);
    let caps = Capabilities {
        backend: "node",
        provider: "node".into(),
        coherent_atomics: true,
        target_progress: false,
        ordered_signal: true,
        polled_progress: false,
        immediate: true,
        addressing: Addressing::Offset,
        keys: KeyMode::None,
    };
    let (offsets, _) = layout::place(&lens).expect("placed above");
    let own_layout = names
        .into_iter()
        .zip(offsets)
        .zip(lens)
        .map(|((n, o), l)| (n, o, l))
        .collect();
    let fabric = NodeFabric::new(
        rank,
        size,
        caps,
        config.op_timeout,
        views,
        origin,
        own_layout,
    )?;
    Ok((fabric, exchange))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_round_trip_and_bad_ones_are_named() {
        let id = Identity {
            pid: 42,
            node: "host|boot".into(),
            tag: job_tag("s"),
        };
        let back = decode_identity(&encode_identity(&id)).unwrap();
        assert_eq!((back.pid, back.node, back.tag), (42, id.node, id.tag));
        assert!(
            decode_identity(b"TNI2\x05")
                .unwrap_err()
                .contains("truncated")
        );
        assert!(
            decode_identity(b"XXXX")
                .unwrap_err()
                .contains("not a node-backend")
        );
        let config = FabricConfig {
            segments: vec![
                titus_fabric::SegmentSpec {
                    name: "a".into(),
                    len: 13,
                    exposure: Exposure::All,
                },
                titus_fabric::SegmentSpec {
                    name: "b".into(),
                    len: 8,
                    exposure: Exposure::Peers(vec![1, 3]),
                },
            ],
            peers: vec![],
            lazy: false,
            op_timeout: std::time::Duration::from_secs(1),
        };
        let blob = encode_segments(&config);
        assert_eq!(
            decode_segments(&blob, 4).unwrap(),
            vec![(16, Exposure::All), (8, Exposure::Peers(vec![1, 3]))]
        );
        assert!(
            decode_segments(&blob, 3)
                .unwrap_err()
                .contains("rank 3 of 3")
        );
        for cut in 0..blob.len() {
            assert!(decode_segments(&blob[..cut], 4).is_err(), "cut at {cut}");
        }
        let mut long = blob.clone();
        long.push(0);
        assert!(decode_segments(&long, 4).unwrap_err().contains("trailing"));
        // A count that claims more ranks than the bytes hold (one segment of 8 bytes,
        // exposed to 2^32 − 2 ranks, none of which follow).
        let mut huge = versioned::encode(b"TNS2", &(1u8, 8u64, 1u8));
        huge.extend([0xfe, 0xff, 0xff, 0xff, 0x0f]); // the varint 2^32 − 2
        assert!(decode_segments(&huge, 4).unwrap_err().contains("truncated"));
    }

    #[test]
    fn tags_are_stable_hex_and_differ_by_secret() {
        let a = job_tag("secret-a");
        assert_eq!(a, job_tag("secret-a"));
        assert_ne!(a, job_tag("secret-b"));
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        let r = random_tag().unwrap();
        assert_eq!(r.len(), 32);
        assert_ne!(r, random_tag().unwrap());
    }
}
