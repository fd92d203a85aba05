//! Property tests of every decoder of memory another rank wrote: the claim word, task
//! slots as a thief reads them out of TASKS, and chunks (results `TRC2`, pushed tasks
//! `TTK2`/`TTL2`). Arbitrary bytes and mutations of valid encodings must decode to a value
//! or to [`CoreError::Malformed`] naming the sender, never panic; valid encodings round-trip.
//! Signals have their own properties beside their code (`signal.rs`). Cases:
//! `PROPTEST_CASES` (64; 1,000,000 by hand take about 20 s per crate here; ~50,000,000 an hour).

use super::*;
use crate::ctx::testing::{Mem, proptest_config};
use crate::steal::TaskArea;
use crate::{Config, Loc, Memory};
use proptest::prelude::*;

/// The sender every decoder is told about.
const FROM: Rank = 5;

fn names_the_sender(e: &CoreError) -> bool {
    matches!(e, CoreError::Malformed { from: FROM, .. })
}

/// An index: an epoch task's, or a spawned task's (whose key travels).
fn any_index() -> impl Strategy<Value = u32> {
    prop_oneof![any::<u32>(), Just(crate::spawn::SPAWNED_INDEX)]
}

/// The key a record of `index` carries: only a spawned one's travels.
fn key_of(index: u32, key: u64) -> u64 {
    if key_bytes(index) == 0 { 0 } else { key }
}

fn any_task(size: u32, max_payload: u32) -> impl Strategy<Value = Task> {
    (
        0..size,
        any_index(),
        any::<u16>(),
        any::<i16>(),
        0..=COST_HINT_MAX_NS,
        proptest::collection::vec(any::<u8>(), 0..=max_payload as usize),
        any::<u64>(),
    )
        .prop_map(
            |(owner, index, kind, priority, cost_ns, payload, key)| Task {
                key: key_of(index, key),
                owner,
                index,
                kind,
                priority,
                cost_ns,
                payload,
            },
        )
}

fn any_result(size: u32, max_result: u32) -> impl Strategy<Value = (ResultRecord, u32)> {
    (
        0..size,
        any_index(),
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..=max_result as usize),
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(|(owner, index, cost_ns, data, hops, key)| {
            (
                ResultRecord {
                    key: key_of(index, key),
                    owner,
                    index,
                    cost_ns,
                    data,
                },
                hops,
            )
        })
}

/// A valid chunk: results, or pushed tasks (last or not), and what it decodes to.
fn any_chunk() -> impl Strategy<Value = (Vec<u8>, Chunk)> {
    let results = proptest::collection::vec(any_result(8, 40), 0..6).prop_map(|recs| {
        let mut body = Vec::new();
        for (r, hops) in &recs {
            push_record(&mut body, r, *hops);
        }
        let mut chunk = chunk_header(CHUNK_MAGIC, recs.len() as u32, body.len()).to_vec();
        chunk.extend_from_slice(&body);
        (chunk, Chunk::Results(recs))
    });
    let tasks = (
        proptest::collection::vec((any_task(8, 40), any::<u64>(), 0u32..8), 0..6),
        any::<bool>(),
    )
        .prop_map(|(ts, last)| {
            let mut body = Vec::new();
            for (t, p, d) in &ts {
                push_task_record(&mut body, t, *p, *d);
            }
            let magic = if last {
                TASK_CHUNK_LAST_MAGIC
            } else {
                TASK_CHUNK_MAGIC
            };
            let mut chunk = chunk_header(magic, ts.len() as u32, body.len()).to_vec();
            chunk.extend_from_slice(&body);
            let tasks = ts
                .into_iter()
                .map(|(task, predicted_ns, dest)| PushedTask {
                    // The record's cost is the task's estimate on arrival, bounded.
                    task: Task {
                        cost_ns: predicted_ns.min(COST_HINT_MAX_NS),
                        ..task
                    },
                    predicted_ns,
                    dest,
                })
                .collect();
            (chunk, Chunk::Tasks { tasks, last })
        });
    prop_oneof![results, tasks]
}

/// What a mutation does to a valid encoding.
#[derive(Debug, Clone)]
enum Mutation {
    /// XOR one byte.
    Flip(usize, u8),
    /// Overwrite a little-endian u32 (a count, a length, an owner).
    Word(usize, u32),
    /// Cut the tail.
    Truncate(usize),
    /// Append bytes.
    Extend(Vec<u8>),
}

fn any_mutation() -> impl Strategy<Value = Vec<Mutation>> {
    let one = prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, x)| Mutation::Flip(at, x)),
        (
            any::<usize>(),
            prop_oneof![
                any::<u32>(),
                Just(0),
                Just(u32::MAX),
                Just(u32::MAX - 7),
                0..64u32
            ]
        )
            .prop_map(|(at, w)| Mutation::Word(at, w)),
        any::<usize>().prop_map(Mutation::Truncate),
        proptest::collection::vec(any::<u8>(), 1..32).prop_map(Mutation::Extend),
    ];
    proptest::collection::vec(one, 1..4)
}

fn mutate(mut b: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        match m {
            Mutation::Flip(at, x) if !b.is_empty() => {
                let i = at % b.len();
                b[i] ^= x;
            }
            Mutation::Word(at, w) if b.len() >= 4 => {
                // At a 4-aligned place: where the format's fields sit.
                let i = (at % (b.len() / 4)) * 4;
                b[i..i + 4].copy_from_slice(&w.to_le_bytes());
            }
            Mutation::Truncate(at) => b.truncate(at % (b.len() + 1)),
            Mutation::Extend(x) => b.extend_from_slice(x),
            _ => {}
        }
    }
    b
}

/// Checks what `decode_chunk` made of `bytes` (job of `size` ranks, limits as given):
/// a value within the limits, or an error naming the sender.
fn check_chunk(
    bytes: &[u8],
    size: u32,
    max_result: u32,
    max_payload: u32,
) -> Result<Option<Chunk>, TestCaseError> {
    match decode_chunk(bytes, FROM, size, max_result, max_payload) {
        Ok(c) => {
            match &c {
                Chunk::Results(rs) => {
                    for (r, _) in rs {
                        prop_assert!(r.owner < size);
                        prop_assert!(r.data.len() <= max_result as usize);
                    }
                }
                Chunk::Tasks { tasks, .. } => {
                    for t in tasks {
                        prop_assert!(t.task.owner < size);
                        prop_assert!(t.dest < size);
                        prop_assert!(t.task.payload.len() <= max_payload as usize);
                    }
                }
            }
            Ok(Some(c))
        }
        Err(e) => {
            prop_assert!(names_the_sender(&e), "{e:?}");
            Ok(None)
        }
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn any_claim_word_round_trips(w in any::<u64>(), ticket in any::<u32>()) {
        let c = ClaimWord::unpack(w);
        prop_assert_eq!(c.pack(), w);
        prop_assert!(c.region() < 2);
        // Any word a victim returns names a batch inside its generation.
        let (start, n) = claim_batch(c.n, ticket.max(c.ticket));
        prop_assert!(u32::from(start) + u32::from(n) <= u32::from(c.n));
        prop_assert!(claim_batches(c.n) <= 17);
    }

    #[test]
    fn any_slot_decodes_or_names_the_sender(
        slot in proptest::collection::vec(any::<u8>(), 0..96),
        size in 1u32..=u32::MAX,
        max_payload in prop_oneof![0u32..128, Just(u32::MAX)],
    ) {
        match decode_task(&slot, FROM, size, max_payload) {
            Ok(t) => {
                prop_assert!(t.owner < size);
                prop_assert!(t.payload.len() <= max_payload as usize);
                prop_assert!(SLOT_HEADER as usize + t.wire_len() <= slot.len());
                // What decoded encodes back into the same slot's fields.
                let mut again = vec![0u8; slot.len()];
                encode_task(&t, &mut again);
                prop_assert_eq!(decode_task(&again, FROM, size, max_payload), Ok(t));
            }
            Err(e) => prop_assert!(names_the_sender(&e), "{:?}", e),
        }
    }

    #[test]
    fn valid_slots_round_trip(t in any_task(16, 64), extra in 0u32..64) {
        let mut slot = vec![0u8; slot_size(64 + extra + KEY_BYTES as u32) as usize];
        encode_task(&t, &mut slot);
        prop_assert_eq!(decode_task(&slot, FROM, 16, 64 + extra), Ok(t));
    }

    /// A thief's read of `n` slots out of its staging area (`TaskArea::read`), whatever
    /// the victim wrote there.
    #[test]
    fn any_tasks_segment_reads_or_names_the_sender(
        tasks in proptest::collection::vec(any_task(4, 24), 0..4),
        noise in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..12),
        n in 0u64..=4,
        size in 1u32..8,
    ) {
        // (A spawning job's slots: the tasks drawn may be spawned ones, with keys.)
        let cfg = Config {
            max_payload: 24,
            shared_capacity: 4,
            spawning: Some(crate::spawn::Spawning::home()),
            ..Config::default()
        };
        let area = TaskArea::new(&cfg, size);
        let mem = Mem::new([area.bytes(), 0, 0]);
        area.write(&mem, 2, &tasks);
        // Scribble over the staging area: lengths, owners, payload bytes.
        let staging = area.staging();
        let len = (area.bytes() - staging) as usize;
        for (at, b) in &noise {
            mem.write(Loc::new(seg::TASKS, staging + (at % len) as u64), &[*b]);
        }
        match area.read(&mem, staging, n, FROM) {
            Ok(read) => {
                prop_assert_eq!(read.len() as u64, n);
                for t in &read {
                    prop_assert!(t.owner < size);
                    prop_assert!(t.payload.len() <= 24);
                }
                if noise.is_empty() && size >= 4 && n as usize <= tasks.len() {
                    prop_assert_eq!(&read[..], &tasks[..n as usize]);
                }
            }
            Err(e) => prop_assert!(names_the_sender(&e), "{:?}", e),
        }
    }

    #[test]
    fn any_bytes_decode_as_a_chunk_or_name_the_sender(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
        size in 1u32..16,
        max_result in prop_oneof![0u32..64, Just(u32::MAX)],
        max_payload in prop_oneof![0u32..64, Just(u32::MAX)],
    ) {
        check_chunk(&bytes, size, max_result, max_payload)?;
    }

    /// Random bytes rarely carry a magic and a matching length: give them both, so the
    /// record walk sees garbage too.
    #[test]
    fn garbage_behind_a_valid_header_is_refused_or_decoded(
        magic in prop_oneof![Just(CHUNK_MAGIC), Just(TASK_CHUNK_MAGIC), Just(TASK_CHUNK_LAST_MAGIC)],
        count in prop_oneof![0u32..8, any::<u32>()],
        body in proptest::collection::vec(any::<u8>(), 0..256),
        size in 1u32..16,
        max in prop_oneof![0u32..64, Just(u32::MAX)],
    ) {
        let mut chunk = chunk_header(magic, count, body.len()).to_vec();
        chunk.extend_from_slice(&body);
        check_chunk(&chunk, size, max, max)?;
    }

    #[test]
    fn valid_chunks_round_trip((chunk, expected) in any_chunk()) {
        prop_assert_eq!(decode_chunk(&chunk, FROM, 8, 40, 40), Ok(expected));
    }

    #[test]
    fn mutated_chunks_are_refused_or_decoded(
        (chunk, expected) in any_chunk(),
        ms in any_mutation(),
        size in 1u32..=8,
    ) {
        let bad = mutate(chunk.clone(), &ms);
        let got = check_chunk(&bad, size, 40, 40)?;
        if bad == chunk && size == 8 {
            prop_assert_eq!(got, Some(expected));
        }
    }
}
