//! Signals: the 64-bit word delivered behind a write (a write of nothing is a bare
//! signal). A kind in the top 4 bits, a payload in the 60 below; each kind's payload is a
//! fixed set of fields, packed and unpacked here and nowhere else.
//!
//! | kind     | payload fields, high to low bits                   | sent by                     |
//! |----------|----------------------------------------------------|-----------------------------|
//! | CHUNK    | offset 30, length 30                               | results: chunk written      |
//! | OVERFLOW | generation 16, offset 44                           | results: reservation full   |
//! | RESET    | (none)                                             | results: inbox reset        |
//! | UP       | (32 zero bits), wave 28                            | termination                 |
//! | DONE     | (31 zero bits), again 1, wave 28                   | termination                 |
//! | REQUEST  | epoch 20, workers_idle 1, resource type 11, sequence 28  | `request` thief             |
//! | REPLY    | tasks 20, unsupported 1, (11 zero bits), sequence 28 | `request` victim          |
//! | ABORT    | (12 zero bits), origin rank 32, error code 16      | a failed rank, then floods  |
//! | LOAD     | epoch tag 8, report number 20, queue length 32     | work-sharing member         |
//! | FORWARD  | thief rank 24, epoch tag 8, sequence 28            | work-sharing master         |
//! | REFILL   | (none)                                             | `claim`, `lock` thief       |
//! | WAIT     | epoch 20, (39 zero bits), workers_idle 1                 | blacklisting thief          |
//! | ADVERT   | epoch 20, (4 zero bits), hops 8, tasks 28          | owner with work, to waiters |
//! | START    | (24 zero bits), start 8, step 4, round 8, length 16 | the epoch start (`crate::start`) |
//!
//! Kind 15 (top four bits all set) is reserved for the transport (the hybrid fabric's
//! remote atomics): the core never sends it.
//!
//! The word comes from another rank, so [`Signal::unpack`] trusts nothing: an unknown kind
//! or a bit set outside the kind's fields is an error naming the sender. Ranges that
//! depend on the job (a rank below its size, a length inside the inbox) are checked by the
//! part that handles the signal. Senders reduce values to their fields' widths first (an
//! epoch modulo 2^20, a sequence number modulo 2^28, ...): [`Signal::pack`] keeps the low
//! bits of a field that is too wide.

use crate::{CoreError, Rank};

/// A result chunk is in the inbox: offset (30 bits) and length (30 bits).
const CHUNK: u64 = 1;
/// A reservation overflowed the inbox at this offset: the sender waits for a reset.
const OVERFLOW: u64 = 2;
/// The inbox was emptied and reset: senders may reserve again.
const RESET: u64 = 3;
/// Termination: the sender's subtree is complete.
const UP: u64 = 4;
/// Termination: the epoch is over.
const DONE: u64 = 5;
/// `request` protocol: the sender asks for tasks.
const REQUEST: u64 = 6;
/// `request` protocol: the answer, with the number of tasks written.
const REPLY: u64 = 7;
/// The epoch failed on some rank; the payload is the error code.
const ABORT: u64 = 8;
/// Work sharing: a member's queue length, to its master.
const LOAD: u64 = 9;
/// Work sharing: the master passes a steal request on to a loaded member.
const FORWARD: u64 = 10;
/// `claim`, `lock`: a thief emptied the receiver's shared set: check it
/// now (a hint; owners also check every `check_interval`).
const REFILL: u64 = 11;
/// Advertisement: the sender found the receiver empty, blacklisted it, and waits for its
/// ADVERT (`claim`, `lock`; a `request` victim learns it from the empty request itself).
const WAIT: u64 = 12;
/// Advertisement: the sender has work to share again (to the thieves that wait for it).
const ADVERT: u64 = 13;
/// The epoch start: a message is in the receiver's slot for its step and round.
const START: u64 = 14;

/// Bits of the payload.
const PAYLOAD_BITS: u32 = 60;

/// Encodes (kind, payload).
fn pack(kind: u64, payload: u64) -> u64 {
    kind << PAYLOAD_BITS | (payload & mask(PAYLOAD_BITS))
}
/// Decodes (kind, payload).
fn unpack(v: u64) -> (u64, u64) {
    (v >> PAYLOAD_BITS, v & mask(PAYLOAD_BITS))
}

/// Whether a signalled word is one a thief waits on (a steal request, or one forwarded):
/// a driver asks the receiver's progress to serve it now ([`urgent`] words are rare, a
/// few per steal; the rest may wait for the receiver's next turn).
pub fn urgent(v: u64) -> bool {
    matches!(unpack(v).0, REQUEST | FORWARD)
}

/// The low `bits` bits.
const fn mask(bits: u32) -> u64 {
    (1 << bits) - 1
}

/// Bits of a CHUNK's length (its offset takes the 30 above).
const CHUNK_LEN_BITS: u32 = 30;
/// Bits of an OVERFLOW's offset (its generation takes the 16 above).
pub const OVERFLOW_OFFSET_BITS: u32 = 44;
/// Bits of a steal attempt's sequence number (REQUEST, REPLY, FORWARD).
pub const SEQ_BITS: u32 = 28;
/// A sequence number's bits ([`SEQ_BITS`]).
pub const SEQ_MASK: u64 = mask(SEQ_BITS);
/// Bits of the epoch a REQUEST carries, and of the task count of a REPLY.
pub const EPOCH_BITS: u32 = 20;
/// Where a REQUEST's epoch and a REPLY's task count start.
const HIGH_SHIFT: u32 = 40;
/// A REQUEST's workers_idle flag; a REPLY's "type not supported here".
const WORKERS_IDLE_BIT: u32 = 39;
/// Bits of a REQUEST's resource type (0: any work; t + 1: work for type t of
/// `Config::resource_types`), right above the sequence number.
pub const TYPE_BITS: u32 = 11;
/// Bits of an ADVERT's hop count.
pub const HOPS_BITS: u32 = 8;
/// Bits of an ADVERT's task count (its hops take the 8 above).
pub const ADVERT_TASKS_BITS: u32 = 28;
/// Bits of a termination wave's number (UP, DONE).
pub const WAVE_BITS: u32 = 28;
/// Bits of a LOAD's report number.
pub const REPORT_BITS: u32 = 20;
/// Bits of the rank a FORWARD names (work sharing supports at most 2^24 ranks).
pub const FORWARD_RANK_BITS: u32 = 24;

/// A decoded signal: its kind and that kind's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// A result chunk is in the receiver's inbox.
    Chunk {
        /// Offset in the inbox's data area (30 bits).
        offset: u64,
        /// Length in bytes, header included (30 bits).
        len: u64,
    },
    /// The sender's reservation did not fit: it waits for a RESET.
    Overflow {
        /// The reservation word's generation the sender saw.
        generation: u16,
        /// Its offset, at most 2^44 − 1 (44 bits).
        offset: u64,
    },
    /// The inbox was reset: the receiver may reserve again.
    Reset,
    /// Termination: the sender's subtree is complete (a fixed bag), or its report for a
    /// wave is in the receiver's slot (spawning: `crate::termination`).
    Up {
        /// The wave, modulo 2^28 (0 for a fixed bag).
        wave: u32,
    },
    /// Termination: the epoch is over, or (spawning) the next wave begins.
    Done {
        /// Not the end: wave `wave` begins.
        again: bool,
        /// The wave that begins, modulo 2^28 (0 for a fixed bag and at the end).
        wave: u32,
    },
    /// `request`: the sender asks for tasks.
    Request {
        /// The sender's epoch modulo 2^20.
        epoch: u64,
        /// The attempt's sequence number modulo 2^28.
        seq: u64,
        /// The sender's workers have nothing to run (advertisement's demand).
        workers_idle: bool,
        /// 0: any work; t + 1: only tasks with a variant on resource type t (11 bits).
        rtype: u16,
    },
    /// `request`: the answer; the tasks are in the thief's staging area.
    Reply {
        /// Tasks written (20 bits).
        tasks: u64,
        /// The answered attempt's sequence number (28 bits).
        seq: u64,
        /// A typed request: none of this rank's tasks this epoch has a variant on the
        /// type (the thief stops asking it for that type); with `tasks` 0 and this unset,
        /// no such work now.
        unsupported: bool,
    },
    /// The epoch failed.
    Abort {
        /// The rank that failed first.
        origin: Rank,
        /// Its error code ([`crate::error_code`]).
        code: u16,
    },
    /// Work sharing: a member's queue length, to its master.
    Load {
        /// The member's epoch modulo 2^8.
        tag: u8,
        /// The report's number modulo 2^20.
        report: u64,
        /// Queue length, at most 2^32 − 1.
        load: u64,
    },
    /// Work sharing: the master passes `thief`'s request on to the receiver.
    Forward {
        /// The rank to serve (24 bits).
        thief: Rank,
        /// The master's epoch modulo 2^8.
        tag: u8,
        /// The thief's sequence number (28 bits).
        seq: u64,
    },
    /// `claim`, `lock`: the receiver's shared set was emptied.
    Refill,
    /// Advertisement: the sender blacklisted the receiver (found it empty) and waits for
    /// its ADVERT.
    Wait {
        /// The sender's epoch modulo 2^20.
        epoch: u64,
        /// The sender's workers have nothing to run (not only its queue): it is idle.
        workers_idle: bool,
    },
    /// Advertisement: the sender has work to share again; the receiver may probe it.
    Advert {
        /// The sender's epoch modulo 2^20.
        epoch: u64,
        /// Overlay hops from the sender to the work it advertises (0: its own).
        hops: u8,
        /// Tasks on offer, at most 2^28 − 1.
        tasks: u64,
    },
    /// The epoch start: a message is in the receiver's slot.
    Start {
        /// The sender's start number modulo 2^8.
        start: u8,
        /// The message's step (`crate::start::wire::Step::code`).
        step: u8,
        /// Its round (a child's place, a scan's round).
        round: u8,
        /// Its bytes, header included.
        len: u16,
    },
}

impl Signal {
    /// The kind, as the top 4 bits carry it.
    pub fn kind(self) -> u64 {
        match self {
            Self::Chunk { .. } => CHUNK,
            Self::Overflow { .. } => OVERFLOW,
            Self::Reset => RESET,
            Self::Up { .. } => UP,
            Self::Done { .. } => DONE,
            Self::Request { .. } => REQUEST,
            Self::Reply { .. } => REPLY,
            Self::Abort { .. } => ABORT,
            Self::Load { .. } => LOAD,
            Self::Forward { .. } => FORWARD,
            Self::Refill => REFILL,
            Self::Wait { .. } => WAIT,
            Self::Advert { .. } => ADVERT,
            Self::Start { .. } => START,
        }
    }

    /// The kind's name, for messages.
    pub fn kind_name(kind: u64) -> &'static str {
        match kind {
            CHUNK => "CHUNK",
            OVERFLOW => "OVERFLOW",
            RESET => "RESET",
            UP => "UP",
            DONE => "DONE",
            REQUEST => "REQUEST",
            REPLY => "REPLY",
            ABORT => "ABORT",
            LOAD => "LOAD",
            FORWARD => "FORWARD",
            REFILL => "REFILL",
            WAIT => "WAIT",
            ADVERT => "ADVERT",
            START => "START",
            _ => "unknown",
        }
    }

    /// The word on the wire.
    pub fn pack(self) -> u64 {
        let payload = match self {
            Self::Chunk { offset, len } => {
                (offset & mask(CHUNK_LEN_BITS)) << CHUNK_LEN_BITS | len & mask(CHUNK_LEN_BITS)
            }
            Self::Overflow { generation, offset } => {
                u64::from(generation) << OVERFLOW_OFFSET_BITS | offset & mask(OVERFLOW_OFFSET_BITS)
            }
            Self::Reset | Self::Refill => 0,
            Self::Up { wave } => u64::from(wave) & mask(WAVE_BITS),
            Self::Done { again, wave } => {
                u64::from(again) << WAVE_BITS | u64::from(wave) & mask(WAVE_BITS)
            }
            Self::Request {
                epoch,
                seq,
                workers_idle,
                rtype,
            } => {
                (epoch & mask(EPOCH_BITS)) << HIGH_SHIFT
                    | u64::from(workers_idle) << WORKERS_IDLE_BIT
                    | (u64::from(rtype) & mask(TYPE_BITS)) << SEQ_BITS
                    | seq & mask(SEQ_BITS)
            }
            Self::Reply {
                tasks,
                seq,
                unsupported,
            } => {
                (tasks & mask(EPOCH_BITS)) << HIGH_SHIFT
                    | u64::from(unsupported) << WORKERS_IDLE_BIT
                    | seq & mask(SEQ_BITS)
            }
            Self::Abort { origin, code } => u64::from(origin) << 16 | u64::from(code),
            Self::Load { tag, report, load } => {
                u64::from(tag) << 52 | (report & mask(REPORT_BITS)) << 32 | load & mask(32)
            }
            Self::Forward { thief, tag, seq } => {
                (u64::from(thief) & mask(FORWARD_RANK_BITS)) << 36
                    | u64::from(tag) << SEQ_BITS
                    | seq & mask(SEQ_BITS)
            }
            Self::Wait {
                epoch,
                workers_idle,
            } => (epoch & mask(EPOCH_BITS)) << HIGH_SHIFT | u64::from(workers_idle),
            Self::Advert { epoch, hops, tasks } => {
                (epoch & mask(EPOCH_BITS)) << HIGH_SHIFT
                    | u64::from(hops) << ADVERT_TASKS_BITS
                    | tasks & mask(ADVERT_TASKS_BITS)
            }
            Self::Start {
                start,
                step,
                round,
                len,
            } => {
                u64::from(start) << 28
                    | u64::from(step & 0xf) << 24
                    | u64::from(round) << 16
                    | u64::from(len)
            }
        };
        pack(self.kind(), payload)
    }

    /// Decodes a word signalled by rank `from`: an unknown kind, or a bit set outside the
    /// kind's fields, is [`CoreError::Malformed`].
    pub fn unpack(v: u64, from: Rank) -> Result<Self, CoreError> {
        let (kind, p) = unpack(v);
        let sig = match kind {
            CHUNK => Self::Chunk {
                offset: p >> CHUNK_LEN_BITS,
                len: p & mask(CHUNK_LEN_BITS),
            },
            OVERFLOW => Self::Overflow {
                generation: (p >> OVERFLOW_OFFSET_BITS) as u16,
                offset: p & mask(OVERFLOW_OFFSET_BITS),
            },
            RESET => Self::Reset,
            UP => Self::Up {
                wave: (p & mask(WAVE_BITS)) as u32,
            },
            DONE => Self::Done {
                again: p >> WAVE_BITS & 1 == 1,
                wave: (p & mask(WAVE_BITS)) as u32,
            },
            REQUEST => Self::Request {
                epoch: p >> HIGH_SHIFT,
                seq: p & mask(SEQ_BITS),
                workers_idle: p >> WORKERS_IDLE_BIT & 1 == 1,
                rtype: (p >> SEQ_BITS & mask(TYPE_BITS)) as u16,
            },
            REPLY => Self::Reply {
                tasks: p >> HIGH_SHIFT,
                seq: p & mask(SEQ_BITS),
                unsupported: p >> WORKERS_IDLE_BIT & 1 == 1,
            },
            ABORT => Self::Abort {
                origin: (p >> 16) as Rank,
                code: p as u16,
            },
            LOAD => Self::Load {
                tag: (p >> 52) as u8,
                report: p >> 32 & mask(REPORT_BITS),
                load: p & mask(32),
            },
            FORWARD => Self::Forward {
                thief: (p >> 36) as Rank,
                tag: (p >> SEQ_BITS) as u8,
                seq: p & mask(SEQ_BITS),
            },
            REFILL => Self::Refill,
            WAIT => Self::Wait {
                epoch: p >> HIGH_SHIFT,
                workers_idle: p & 1 == 1,
            },
            ADVERT => Self::Advert {
                epoch: p >> HIGH_SHIFT,
                hops: (p >> ADVERT_TASKS_BITS) as u8,
                tasks: p & mask(ADVERT_TASKS_BITS),
            },
            START => Self::Start {
                start: (p >> 28) as u8,
                step: (p >> 24 & 0xf) as u8,
                round: (p >> 16) as u8,
                len: p as u16,
            },
            k => {
                return Err(CoreError::Malformed {
                    from,
                    what: format!("signal of unknown kind {k}"),
                });
            }
        };
        // Every field was read at its width: bits outside them make the word differ from
        // the one the fields pack into.
        if sig.pack() != v {
            return Err(CoreError::Malformed {
                from,
                what: format!(
                    "{} signal {v:#018x} with bits set outside its fields",
                    Self::kind_name(kind)
                ),
            });
        }
        Ok(sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Any signal whose fields fit their widths.
    fn any_signal() -> impl Strategy<Value = Signal> {
        let seq = 0..=mask(SEQ_BITS);
        let high = 0..=mask(EPOCH_BITS);
        prop_oneof![
            (0..=mask(30), 0..=mask(30)).prop_map(|(offset, len)| Signal::Chunk { offset, len }),
            (any::<u16>(), 0..=mask(OVERFLOW_OFFSET_BITS))
                .prop_map(|(generation, offset)| Signal::Overflow { generation, offset }),
            Just(Signal::Reset),
            (0..=mask(WAVE_BITS)).prop_map(|w| Signal::Up { wave: w as u32 }),
            (any::<bool>(), 0..=mask(WAVE_BITS)).prop_map(|(again, w)| Signal::Done {
                again,
                wave: w as u32
            }),
            (
                high.clone(),
                seq.clone(),
                any::<bool>(),
                0..=mask(TYPE_BITS) as u16
            )
                .prop_map(|(epoch, seq, workers_idle, rtype)| Signal::Request {
                    epoch,
                    seq,
                    workers_idle,
                    rtype
                }),
            (high, seq.clone(), any::<bool>()).prop_map(|(tasks, seq, unsupported)| {
                Signal::Reply {
                    tasks,
                    seq,
                    unsupported,
                }
            }),
            (any::<Rank>(), any::<u16>()).prop_map(|(origin, code)| Signal::Abort { origin, code }),
            (any::<u8>(), 0..=mask(REPORT_BITS), 0..=mask(32))
                .prop_map(|(tag, report, load)| Signal::Load { tag, report, load }),
            (0..=mask(FORWARD_RANK_BITS) as Rank, any::<u8>(), seq)
                .prop_map(|(thief, tag, seq)| Signal::Forward { thief, tag, seq }),
            Just(Signal::Refill),
            (0..=mask(EPOCH_BITS), any::<bool>()).prop_map(|(epoch, workers_idle)| Signal::Wait {
                epoch,
                workers_idle
            }),
            (
                0..=mask(EPOCH_BITS),
                any::<u8>(),
                0..=mask(ADVERT_TASKS_BITS)
            )
                .prop_map(|(epoch, hops, tasks)| Signal::Advert { epoch, hops, tasks }),
        ]
    }

    proptest! {
        #![proptest_config(crate::ctx::testing::proptest_config())]

        #[test]
        fn every_signal_round_trips(s in any_signal()) {
            prop_assert_eq!(Signal::unpack(s.pack(), 3), Ok(s));
            prop_assert_eq!(unpack(s.pack()).0, s.kind());
            // Only what a waiting thief asked for hurries its receiver.
            let asks = matches!(s, Signal::Request { .. } | Signal::Forward { .. });
            prop_assert_eq!(urgent(s.pack()), asks);
        }

        #[test]
        fn any_word_decodes_to_itself_or_is_refused(v in any::<u64>()) {
            // No word panics; a word that decodes is exactly its fields.
            if let Ok(s) = Signal::unpack(v, 3) {
                prop_assert_eq!(s.pack(), v);
            }
        }

        #[test]
        fn a_stray_bit_is_refused(s in any_signal(), bit in 0u32..60) {
            let v = s.pack() ^ 1 << bit;
            if let Ok(t) = Signal::unpack(v, 3) {
                prop_assert_eq!(t.kind(), s.kind());
                prop_assert_ne!(t, s);
            }
        }
    }

    #[test]
    fn the_wire_values_are_the_documented_ones() {
        // These words travel between ranks that may run different builds.
        assert_eq!(Signal::Up { wave: 0 }.pack(), 4 << 60);
        assert_eq!(Signal::Up { wave: 9 }.pack(), 4 << 60 | 9);
        assert_eq!(
            Signal::Done {
                again: false,
                wave: 0
            }
            .pack(),
            5 << 60
        );
        assert_eq!(
            Signal::Done {
                again: true,
                wave: 3
            }
            .pack(),
            5 << 60 | 1 << 28 | 3
        );
        assert_eq!(
            Signal::Chunk {
                offset: 64,
                len: 24
            }
            .pack(),
            1 << 60 | 64 << 30 | 24
        );
        assert_eq!(
            Signal::Abort { origin: 5, code: 7 }.pack(),
            8 << 60 | 5 << 16 | 7
        );
        assert_eq!(
            Signal::Request {
                epoch: 3,
                seq: 9,
                workers_idle: true,
                rtype: 0,
            }
            .pack(),
            6 << 60 | 3 << 40 | 1 << 39 | 9
        );
        assert_eq!(
            Signal::Request {
                epoch: 3,
                seq: 9,
                workers_idle: false,
                rtype: 2,
            }
            .pack(),
            6 << 60 | 3 << 40 | 2 << 28 | 9
        );
        assert_eq!(
            Signal::Reply {
                tasks: 0,
                seq: 9,
                unsupported: true,
            }
            .pack(),
            7 << 60 | 1 << 39 | 9
        );
        assert_eq!(
            Signal::Forward {
                thief: 2,
                tag: 1,
                seq: 4
            }
            .pack(),
            10 << 60 | 2 << 36 | 1 << 28 | 4
        );
        assert_eq!(
            Signal::Load {
                tag: 1,
                report: 2,
                load: 3
            }
            .pack(),
            9 << 60 | 1 << 52 | 2 << 32 | 3
        );
        assert_eq!(
            Signal::Wait {
                epoch: 5,
                workers_idle: true
            }
            .pack(),
            12 << 60 | 5 << 40 | 1
        );
        assert_eq!(
            Signal::Advert {
                epoch: 5,
                hops: 2,
                tasks: 7
            }
            .pack(),
            13 << 60 | 5 << 40 | 2 << 28 | 7
        );
    }

    #[test]
    fn garbage_is_an_error_naming_the_sender() {
        let e = Signal::unpack(0, 7).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rank 7 sent malformed data: signal of unknown kind 0"
        );
        let e = Signal::unpack(pack(UP, 1 << 28), 7).unwrap_err();
        assert!(e.to_string().contains("UP signal"), "{e}");
        let e = Signal::unpack(pack(REPLY, 1 << 30), 2).unwrap_err();
        assert!(e.to_string().contains("REPLY signal"), "{e}");
        let e = Signal::unpack(pack(ABORT, 1 << 50), 2).unwrap_err();
        assert!(e.to_string().contains("outside its fields"), "{e}");
        assert!(Signal::unpack(15 << 60, 2).is_err());
    }
}
