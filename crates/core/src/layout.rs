//! Segment layouts: what lives where in a rank's registered memory, and the byte formats
//! other ranks read and write. Plain integers only (no pointers), little-endian, so ranks
//! need not run identical binaries. Everything decoded from memory another rank wrote is
//! bounds-checked: a malformed slot or chunk is an error naming the rank, never a panic.

use crate::{CoreError, Rank};

/// Segment numbers, in the order the runtime registers them.
pub mod seg {
    use crate::SegmentId;

    /// Task headers, shared-set regions and the staging area.
    pub const TASKS: SegmentId = SegmentId(0);
    /// Result chunks routed to this rank.
    pub const INBOX: SegmentId = SegmentId(1);
    /// Chunks this rank sends: a pool of `Config::outbox_slots` slots of `chunk_bytes`
    /// (fewer when the rank has fewer next hops), each holding one chunk until its write
    /// completed.
    pub const OUTBOX: SegmentId = SegmentId(2);
    /// The epoch start's message slots, published records and landings
    /// (`crate::start`).
    pub const START: SegmentId = SegmentId(3);
}

/// Version word at offset 0 of TASKS: "TITUS" + layout version 4 (version 2: result
/// records carry their task's measured cost; chunks of pushed tasks; version 3: task
/// slots carry their task's estimated cost; version 4: a spawned task's slot and record
/// lead with its key, inside their counted length).
pub const LAYOUT_MAGIC: u64 = 0x5449_5455_5300_0004;

/// Offsets in the TASKS header (64 bytes).
pub mod tasks {
    /// Layout magic and version.
    pub const MAGIC: u64 = 0;
    /// `lock` protocol: AVAILABLE, REFILL, or the holder.
    pub const LOCK: u64 = 8;
    /// `claim` protocol: the packed (generation, count, ticket) word.
    pub const CLAIM: u64 = 16;
    /// `claim` protocol: batches read, cumulative, for regions 0 and 1.
    pub const DONE: [u64; 2] = [24, 32];
    /// `lock` protocol: tasks in region 0.
    pub const COUNT: u64 = 40;
    /// Header length.
    pub const HEADER: u64 = 64;
}

/// Lock-word states (`lock` protocol).
pub mod lock {
    /// Nobody holds the shared set.
    pub const AVAILABLE: u64 = 0;
    /// A thief took the shared set and handed the lock to the owner to refill it.
    pub const REFILL: u64 = 1;
    /// Held by `rank`.
    pub fn held_by(rank: crate::Rank) -> u64 {
        2 + u64::from(rank)
    }
}

/// The packed claim word: generation (16 bits), tasks in the generation (16 bits), tickets
/// taken (32 bits, low). A thief's fetch-add of 1 takes the next ticket and returns the
/// whole word, so one remote atomic both finds and claims a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClaimWord {
    /// Generation: its parity names the region holding its tasks.
    pub generation: u16,
    /// Tasks published in this generation.
    pub n: u16,
    /// Tickets taken so far (successful or not).
    pub ticket: u32,
}

impl ClaimWord {
    /// Decodes a word.
    pub fn unpack(w: u64) -> Self {
        Self {
            generation: (w >> 48) as u16,
            n: (w >> 32) as u16,
            ticket: w as u32,
        }
    }

    /// Encodes it.
    pub fn pack(self) -> u64 {
        u64::from(self.generation) << 48 | u64::from(self.n) << 32 | u64::from(self.ticket)
    }

    /// The region (0 or 1) of this generation.
    pub fn region(self) -> usize {
        usize::from(self.generation % 2)
    }
}

/// Batch `ticket` of a generation of `n` tasks: halving batches (the first thief takes
/// ⌈n/2⌉, the next half of the rest, ...), so early thieves get much and the last ones
/// little. Returns (first slot, count); count 0 once the tasks are gone.
pub fn claim_batch(n: u16, ticket: u32) -> (u16, u16) {
    let (mut start, mut left) = (0u32, u32::from(n));
    for _ in 0..ticket.min(32) {
        let take = left.div_ceil(2);
        start += take;
        left -= take;
    }
    if ticket >= 32 {
        return (n, 0);
    }
    (start as u16, left.div_ceil(2) as u16)
}

/// Number of non-empty batches of a generation of `n` tasks.
pub fn claim_batches(n: u16) -> u32 {
    let mut left = u32::from(n);
    let mut b = 0;
    while left > 0 {
        left -= left.div_ceil(2);
        b += 1;
    }
    b
}

/// A task as it travels: its owner and index there, the kind, the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The rank that owns the task (and gets its result).
    pub owner: Rank,
    /// Index in the owner's task list.
    pub index: u32,
    /// Task kind (registered function).
    pub kind: u16,
    /// Priority: a rank runs higher first and shares lower first (0: the default).
    pub priority: i16,
    /// Its estimated cost, ns (0: unknown): the submitter's hint, else the prediction
    /// from its measured cost, else the mean of its kind on the rank that queued it. It
    /// travels with the task (slot bytes 16..24); a rank that receives it bounds it
    /// ([`COST_HINT_MAX_NS`], and the mapper's estimate for its kind): remote data.
    pub cost_ns: u64,
    /// Input bytes.
    pub payload: Vec<u8>,
    /// A spawned task's key, given by its spawner: its result reaches the owner with it
    /// (`crate::spawn`). Epoch tasks are named by their index and carry 0.
    pub key: u64,
}

/// Which task a result belongs to: its owner, its index there, its kind (and a spawned
/// task's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskId {
    /// The rank that owns the task.
    pub owner: Rank,
    /// Index in the owner's task list.
    pub index: u32,
    /// Task kind (registered function).
    pub kind: u16,
    /// A spawned task's key (0 for an epoch task).
    pub key: u64,
}

impl Task {
    /// Its identity.
    pub fn id(&self) -> TaskId {
        TaskId {
            owner: self.owner,
            index: self.index,
            kind: self.kind,
            key: self.key,
        }
    }

    /// Bytes its payload takes on the wire: a spawned task's key travels first
    /// ([`KEY_BYTES`]).
    pub fn wire_len(&self) -> usize {
        key_bytes(self.index) + self.payload.len()
    }
}

/// Bytes of the key that leads a spawned task's payload and a spawned result's data on
/// the wire, inside their counted length (so every walker of slots and records cuts them
/// by that length alone).
pub const KEY_BYTES: usize = 8;

/// [`KEY_BYTES`] for a spawned task's or result's `index`, else 0.
pub fn key_bytes(index: u32) -> usize {
    if index == crate::spawn::SPAWNED_INDEX {
        KEY_BYTES
    } else {
        0
    }
}

/// Refuses a spawned task's slot or record from `from` in a job that does not spawn
/// (`spawning` false): none can exist there, and its key would not fit the job's slots
/// and chunks.
pub fn refuse_spawned(index: u32, from: Rank, spawning: bool) -> Result<(), CoreError> {
    if key_bytes(index) > 0 && !spawning {
        return Err(CoreError::Malformed {
            from,
            what: "a spawned task's slot or record in a job that does not spawn".into(),
        });
    }
    Ok(())
}

/// Splits the key off a spawned record's counted bytes (`index`), or gives key 0;
/// `None` if a spawned record is too short to hold its key.
fn split_key(index: u32, bytes: &[u8]) -> Option<(u64, &[u8])> {
    let k = key_bytes(index);
    let key = bytes.get(..k)?;
    let mut word = [0u8; 8];
    word[..k].copy_from_slice(key);
    Some((u64::from_le_bytes(word), &bytes[k..]))
}

/// Appends a spawned record's key (none for an epoch task's) and then `bytes`.
fn extend_keyed(out: &mut Vec<u8>, index: u32, key: u64, bytes: &[u8]) {
    out.extend_from_slice(&key.to_le_bytes()[..key_bytes(index)]);
    out.extend_from_slice(bytes);
}

/// Bytes of a task slot before the payload: owner (4), index (4), kind (2), priority
/// (2), payload length (4), estimated cost (8).
pub const SLOT_HEADER: u64 = 24;

/// The largest cost estimate a task may carry, ns (a day, `dlb-bench`'s longest task):
/// larger hints, local or decoded, are taken as this.
pub const COST_HINT_MAX_NS: u64 = 86_400_000_000_000;

/// The largest payload a task slot may hold, and the largest result: 64 MiB (a slot is
/// allocated at this size in every region of every rank's TASKS segment).
pub const PAYLOAD_MAX: u32 = 64 << 20;

/// Size of a task slot for payloads of up to `max_payload` bytes (8-aligned).
pub fn slot_size(max_payload: u32) -> u64 {
    (SLOT_HEADER + u64::from(max_payload)).next_multiple_of(8)
}

/// Size of a task slot in a job of `cfg`: a spawning job's holds a spawned task's key
/// too; a fixed bag's is as it always was.
pub fn slot_size_of(cfg: &crate::Config) -> u64 {
    let key = if cfg.spawning.is_some() { KEY_BYTES } else { 0 };
    slot_size(cfg.max_payload.saturating_add(key as u32))
}

/// Writes `task` into `out` (one slot); the length field counts a spawned task's key.
pub fn encode_task(task: &Task, out: &mut [u8]) {
    let k = key_bytes(task.index);
    out[0..4].copy_from_slice(&task.owner.to_le_bytes());
    out[4..8].copy_from_slice(&task.index.to_le_bytes());
    out[8..10].copy_from_slice(&task.kind.to_le_bytes());
    out[10..12].copy_from_slice(&task.priority.to_le_bytes());
    out[12..16].copy_from_slice(&(task.wire_len() as u32).to_le_bytes());
    out[16..24].copy_from_slice(&task.cost_ns.to_le_bytes());
    out[24..24 + k].copy_from_slice(&task.key.to_le_bytes()[..k]);
    out[24 + k..24 + task.wire_len()].copy_from_slice(&task.payload);
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Reads a slot written by rank `from`; checks the owner and the payload length, bounds
/// the cost estimate ([`COST_HINT_MAX_NS`]).
pub fn decode_task(
    slot: &[u8],
    from: Rank,
    size: u32,
    max_payload: u32,
) -> Result<Task, CoreError> {
    let bad = |what: String| CoreError::Malformed { from, what };
    if slot.len() < SLOT_HEADER as usize {
        return Err(bad(format!("task slot of {} bytes", slot.len())));
    }
    let owner = u32_at(slot, 0);
    let index = u32_at(slot, 4);
    let kind = u16::from_le_bytes([slot[8], slot[9]]);
    let priority = i16::from_le_bytes([slot[10], slot[11]]);
    let len = u32_at(slot, 12);
    let cost_ns =
        u64::from_le_bytes(slot[16..24].try_into().expect("8 bytes")).min(COST_HINT_MAX_NS);
    if owner >= size {
        return Err(bad(format!(
            "task owner {owner} outside the job (size {size})"
        )));
    }
    let limit = max_payload as usize + key_bytes(index);
    if len as usize > limit || SLOT_HEADER as usize + len as usize > slot.len() {
        return Err(bad(format!("task payload of {len} bytes (limit {limit})")));
    }
    let Some((key, payload)) = split_key(index, &slot[24..24 + len as usize]) else {
        return Err(bad(format!(
            "spawned task of {len} bytes, short of its {KEY_BYTES}-byte key"
        )));
    };
    Ok(Task {
        owner,
        index,
        kind,
        priority,
        cost_ns,
        payload: payload.to_vec(),
        key,
    })
}

/// A result travelling to its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultRecord {
    /// The task's owner.
    pub owner: Rank,
    /// The task's index there.
    pub index: u32,
    /// How long the task ran where it ran, ns (the driver measured it).
    pub cost_ns: u64,
    /// The result bytes.
    pub data: Vec<u8>,
    /// A spawned task's key (0 for an epoch task's result).
    pub key: u64,
}

impl ResultRecord {
    /// Bytes its data takes on the wire: a spawned result's key travels first.
    pub fn wire_len(&self) -> usize {
        key_bytes(self.index) + self.data.len()
    }
}

/// A task pushed by diffusion, with the cost its owner predicted for it and the rank it
/// goes to (a neighbour, or under the string plan any rank: ranks on the way forward it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedTask {
    /// The task.
    pub task: Task,
    /// Its predicted cost, ns (0: unknown).
    pub predicted_ns: u64,
    /// The rank that runs it.
    pub dest: Rank,
}

/// Chunk header of a chunk of results: magic, record count, total length ("TRC2": version
/// 2, whose records carry a cost).
pub const CHUNK_MAGIC: u32 = 0x5452_4332; // "TRC2"
/// Chunk header of a chunk of tasks pushed by diffusion ("TTK2": version 2, whose records
/// name the rank they go to).
pub const TASK_CHUNK_MAGIC: u32 = 0x5454_4b32; // "TTK2"
/// Chunk header of the last chunk of tasks one diffusion push sends to a neighbour
/// ("TTL2"): its receiver may steal from the giver again.
pub const TASK_CHUNK_LAST_MAGIC: u32 = 0x5454_4c32; // "TTL2"
/// Bytes of the chunk header.
pub const CHUNK_HEADER: usize = 16;
/// Bytes of a record header, result or task: owner (4), index (4), data length (4), hops
/// (results) or kind and priority (tasks) (2 + 2), cost (8). The length sits at the same place
/// in both, so one walk cuts either kind of chunk.
pub const RECORD_HEADER: usize = 24;

/// Bytes a pushed task's record adds behind the record header: the rank it goes to (4),
/// reserved (4).
pub const TASK_RECORD_EXTRA: usize = 8;

/// Encoded length of a result record with `len` data bytes.
pub fn record_len(len: usize) -> usize {
    RECORD_HEADER + len.next_multiple_of(8)
}

/// Encoded length of a pushed task's record with `len` payload bytes.
pub fn task_record_len(len: usize) -> usize {
    record_len(len) + TASK_RECORD_EXTRA
}

/// Appends a result record to a chunk body under construction; `hops`: hops taken once
/// this chunk arrives.
pub fn push_record(body: &mut Vec<u8>, r: &ResultRecord, hops: u32) {
    body.extend_from_slice(&r.owner.to_le_bytes());
    body.extend_from_slice(&r.index.to_le_bytes());
    body.extend_from_slice(&(r.wire_len() as u32).to_le_bytes());
    body.extend_from_slice(&hops.to_le_bytes());
    body.extend_from_slice(&r.cost_ns.to_le_bytes());
    extend_keyed(body, r.index, r.key, &r.data);
    body.resize(body.len().next_multiple_of(8), 0);
}

/// Appends a pushed task's record to a chunk body under construction: the record header,
/// the rank it goes to, 4 reserved bytes, the payload.
pub fn push_task_record(body: &mut Vec<u8>, t: &Task, predicted_ns: u64, dest: Rank) {
    body.extend_from_slice(&t.owner.to_le_bytes());
    body.extend_from_slice(&t.index.to_le_bytes());
    body.extend_from_slice(&(t.wire_len() as u32).to_le_bytes());
    body.extend_from_slice(&t.kind.to_le_bytes());
    body.extend_from_slice(&t.priority.to_le_bytes());
    body.extend_from_slice(&predicted_ns.to_le_bytes());
    body.extend_from_slice(&dest.to_le_bytes());
    body.extend_from_slice(&[0u8; 4]);
    extend_keyed(body, t.index, t.key, &t.payload);
    body.resize(body.len().next_multiple_of(8), 0);
}

/// The header of a chunk (`magic`: [`CHUNK_MAGIC`] or [`TASK_CHUNK_MAGIC`]) holding
/// `count` records in `body_len` bytes.
pub fn chunk_header(magic: u32, count: u32, body_len: usize) -> [u8; CHUNK_HEADER] {
    let mut h = [0u8; CHUNK_HEADER];
    h[0..4].copy_from_slice(&magic.to_le_bytes());
    h[4..8].copy_from_slice(&count.to_le_bytes());
    h[8..16].copy_from_slice(&((CHUNK_HEADER + body_len) as u64).to_le_bytes());
    h
}

/// A decoded chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// Results, each with its hop count.
    Results(Vec<(ResultRecord, u32)>),
    /// Tasks pushed by diffusion; `last`: the push's last chunk.
    Tasks {
        /// The tasks.
        tasks: Vec<PushedTask>,
        /// No more tasks follow from this giver this epoch.
        last: bool,
    },
}

/// Parses a chunk written by rank `from`: every length is checked against the chunk and
/// the limits (`max_result` for results, `max_payload` for tasks), every owner against the
/// job size.
pub fn decode_chunk(
    chunk: &[u8],
    from: Rank,
    size: u32,
    max_result: u32,
    max_payload: u32,
) -> Result<Chunk, CoreError> {
    let bad = |what: String| CoreError::Malformed { from, what };
    if chunk.len() < CHUNK_HEADER {
        return Err(bad("chunk without its header".into()));
    }
    let magic = u32_at(chunk, 0);
    let (tasks, what, limit, extra) = match magic {
        CHUNK_MAGIC => (false, "result", max_result, 0),
        TASK_CHUNK_MAGIC | TASK_CHUNK_LAST_MAGIC => {
            (true, "pushed task", max_payload, TASK_RECORD_EXTRA)
        }
        m => return Err(bad(format!("chunk with unknown magic {m:#010x}"))),
    };
    let count = u32_at(chunk, 4);
    let total = u64::from_le_bytes(chunk[8..16].try_into().expect("8 bytes"));
    if total != chunk.len() as u64 {
        return Err(bad(format!(
            "{what} chunk says {total} bytes, signalled {}",
            chunk.len()
        )));
    }
    let mut at = CHUNK_HEADER;
    let cap = count.min(1 << 16) as usize;
    let (mut results, mut pushed) = if tasks {
        (Vec::new(), Vec::with_capacity(cap))
    } else {
        (Vec::with_capacity(cap), Vec::new())
    };
    for i in 0..count {
        if at + RECORD_HEADER + extra > chunk.len() {
            return Err(bad(format!(
                "{what} record {i} of {count} past the chunk's end"
            )));
        }
        let owner = u32_at(chunk, at);
        let index = u32_at(chunk, at + 4);
        let len = u32_at(chunk, at + 8);
        let tag = u32_at(chunk, at + 12);
        let cost = u64::from_le_bytes(chunk[at + 16..at + 24].try_into().expect("8 bytes"));
        if owner >= size {
            return Err(bad(format!(
                "{what} owner {owner} outside the job (size {size})"
            )));
        }
        let limit = limit as usize + key_bytes(index);
        if len as usize > limit {
            return Err(bad(format!("{what} of {len} bytes (limit {limit})")));
        }
        let end = at + record_len(len as usize) + extra;
        if end > chunk.len() {
            return Err(bad(format!(
                "{what} record {i} of {len} bytes past the chunk's end"
            )));
        }
        let data_at = at + RECORD_HEADER + extra;
        let Some((key, data)) = split_key(index, &chunk[data_at..data_at + len as usize]) else {
            return Err(bad(format!(
                "spawned {what} of {len} bytes, short of its {KEY_BYTES}-byte key"
            )));
        };
        let data = data.to_vec();
        if tasks {
            let dest = u32_at(chunk, at + RECORD_HEADER);
            if dest >= size {
                return Err(bad(format!(
                    "{what} for rank {dest} outside the job (size {size})"
                )));
            }
            pushed.push(PushedTask {
                dest,
                task: Task {
                    owner,
                    index,
                    kind: tag as u16,
                    priority: (tag >> 16) as u16 as i16,
                    cost_ns: cost.min(COST_HINT_MAX_NS),
                    payload: data,
                    key,
                },
                predicted_ns: cost,
            });
        } else {
            results.push((
                ResultRecord {
                    owner,
                    index,
                    cost_ns: cost,
                    data,
                    key,
                },
                tag,
            ));
        }
        at = end;
    }
    if at != chunk.len() {
        return Err(bad(format!("trailing bytes after the last {what} record")));
    }
    Ok(if tasks {
        Chunk::Tasks {
            tasks: pushed,
            last: magic == TASK_CHUNK_LAST_MAGIC,
        }
    } else {
        Chunk::Results(results)
    })
}

pub mod signal;

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_word_and_batches() {
        let w = ClaimWord {
            generation: 7,
            n: 100,
            ticket: 3,
        };
        assert_eq!(ClaimWord::unpack(w.pack()), w);
        // Tickets increment the low field without touching the others.
        assert_eq!(ClaimWord::unpack(w.pack() + 1).ticket, 4);
        // Batches tile 0..n exactly once.
        for n in [0u16, 1, 2, 3, 7, 100, 65_535] {
            let mut next = 0u32;
            let batches = claim_batches(n);
            for t in 0..40 {
                let (s, c) = claim_batch(n, t);
                if c == 0 {
                    assert!(t >= batches, "n={n} t={t}");
                    continue;
                }
                assert_eq!(u32::from(s), next, "n={n} t={t}");
                next += u32::from(c);
            }
            assert_eq!(next, u32::from(n));
        }
        assert_eq!(claim_batch(10, 0), (0, 5));
        assert_eq!(claim_batch(10, 1), (5, 3));
    }

    #[test]
    fn tasks_and_chunks_round_trip_and_reject_garbage() {
        let t = Task {
            key: 0,
            owner: 3,
            index: 9,
            kind: 2,
            priority: -7,
            cost_ns: 4_000,
            payload: b"hello".to_vec(),
        };
        let mut slot = vec![0u8; slot_size(8) as usize];
        encode_task(&t, &mut slot);
        assert_eq!(decode_task(&slot, 1, 4, 8).unwrap(), t);
        // A hostile estimate is bounded: remote data.
        let mut costly = slot.clone();
        costly[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            decode_task(&costly, 1, 4, 8).unwrap().cost_ns,
            COST_HINT_MAX_NS
        );
        assert!(
            decode_task(&slot, 1, 3, 8).is_err(),
            "owner outside the job"
        );
        assert!(
            decode_task(&slot, 1, 4, 4).is_err(),
            "payload over the limit"
        );
        let recs = vec![
            ResultRecord {
                key: 0,
                owner: 0,
                index: 1,
                cost_ns: 12_345,
                data: vec![1, 2, 3],
            },
            ResultRecord {
                key: 0,
                owner: 2,
                index: 5,
                cost_ns: 0,
                data: vec![],
            },
        ];
        let mut body = Vec::new();
        for r in &recs {
            push_record(&mut body, r, 2);
        }
        let mut chunk = chunk_header(CHUNK_MAGIC, 2, body.len()).to_vec();
        chunk.extend_from_slice(&body);
        let Chunk::Results(back) = decode_chunk(&chunk, 1, 3, 16, 0).unwrap() else {
            panic!("a result chunk");
        };
        let back: Vec<ResultRecord> = back
            .into_iter()
            .map(|(r, h)| {
                assert_eq!(h, 2);
                r
            })
            .collect();
        assert_eq!(back, recs);
        assert!(decode_chunk(&chunk[..chunk.len() - 8], 1, 3, 16, 0).is_err());
        assert!(
            decode_chunk(&chunk, 1, 2, 16, 0).is_err(),
            "owner 2 in a job of 2"
        );
        let mut lying = chunk.clone();
        lying[4] = 200; // 200 records claimed
        assert!(decode_chunk(&lying, 1, 3, 16, 0).is_err());
        assert!(
            decode_chunk(&chunk, 1, 3, 2, 0).is_err(),
            "result over the limit"
        );
        let mut unknown = chunk.clone();
        unknown[0] ^= 0xff;
        assert!(
            decode_chunk(&unknown, 1, 3, 16, 0).is_err(),
            "unknown magic"
        );
        // Pushed tasks: the same walk, their own magic and limit.
        let mut body = Vec::new();
        push_task_record(&mut body, &t, 777, 3);
        let mut chunk = chunk_header(TASK_CHUNK_MAGIC, 1, body.len()).to_vec();
        chunk.extend_from_slice(&body);
        assert_eq!(
            decode_chunk(&chunk, 1, 4, 0, 8).unwrap(),
            Chunk::Tasks {
                tasks: vec![PushedTask {
                    task: Task {
                        cost_ns: 777,
                        ..t.clone()
                    },
                    predicted_ns: 777,
                    dest: 3
                }],
                last: false
            }
        );
        assert!(
            decode_chunk(&chunk, 1, 4, 0, 4).is_err(),
            "payload over the limit"
        );
        let mut end = chunk.clone();
        end[0..4].copy_from_slice(&TASK_CHUNK_LAST_MAGIC.to_le_bytes());
        assert!(
            matches!(decode_chunk(&end, 1, 4, 0, 8), Ok(Chunk::Tasks { last: true, ref tasks }) if tasks.len() == 1),
            "the push's last chunk"
        );
        assert!(
            decode_chunk(&chunk, 1, 3, 0, 8).is_err(),
            "owner 3 in a job of 3"
        );
        assert!(decode_chunk(&chunk[..chunk.len() - 8], 1, 4, 0, 8).is_err());
        let mut far = chunk.clone();
        far[CHUNK_HEADER + RECORD_HEADER] = 9;
        let e = decode_chunk(&far, 1, 4, 0, 8).unwrap_err().to_string();
        assert!(e.contains("rank 9 outside the job"), "{e}");
    }
}
