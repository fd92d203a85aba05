//! The thief's unit tests.

use super::*;
use crate::Config;
use crate::ctx::testing::Mem;
use crate::layout::{ClaimWord, encode_task, seg};
use crate::{Loc, Op};

/// The pushes' tests: a thief of the default configuration, and its push wait (ns).
fn push_thief() -> (Config, Thief, u64) {
    let cfg = Config::default();
    let (t, _) = thief(&cfg);
    let wait = cfg.push_wait.as_nanos() as u64;
    (cfg, t, wait)
}

/// `ms` milliseconds into the epoch.
fn at(ms: u64) -> Time {
    Time(ms * 1_000_000)
}

#[test]
fn awaits_pushes_until_they_came_or_push_wait_passed() {
    let (cfg, mut t, wait) = push_thief();
    assert_eq!(t.push_hold(at(0)), None, "nothing expected");
    // The string plan: 800 ns owed; a chunk of 500 extends the wait, then the rest.
    t.expect_push(800, at(0), &cfg);
    assert_eq!(t.push_hold(at(0)), Some(Time(wait)));
    t.pushed_here(500, at(1), &cfg);
    assert_eq!(t.push_hold(at(1)), Some(Time(at(1).0 + wait)));
    assert_eq!(t.push_hold(Time(at(1).0 + wait)), None, "the bound");
    t.pushed_here(250, at(1), &cfg);
    assert_eq!(t.push_hold(at(1)), None, "all but an eighth came");
    // The neighbours' plan: two givers, until each one's last chunk.
    t.start_epoch(Rng::from_keys(&[2]));
    t.hold_for_push(&[2, 3], at(0), at(2));
    t.push_arrived(2, true, at(1), &cfg);
    assert_eq!(t.push_hold(at(1)), Some(at(2)));
    t.push_arrived(3, true, at(1), &cfg);
    assert_eq!(t.push_hold(at(1)), None);
}

#[test]
fn a_receiver_owed_much_awaits_its_first_chunk_longer() {
    let (cfg, mut t, wait) = push_thief();
    // Owed 1 s: the first chunk is awaited for 1/32 of it, 31 ms, not push_wait.
    t.expect_push(1_000_000_000, at(0), &cfg);
    let first = 1_000_000_000 / push::FIRST_PUSH_SHARE;
    assert!(first > wait);
    assert_eq!(t.push_hold(at(10)), Some(Time(first)));
    assert_eq!(t.push_hold(Time(first)), None, "the bound");
    // Once chunks come, each extends the wait by push_wait alone.
    t.expect_push(1_000_000_000, at(0), &cfg);
    t.pushed_here(400_000_000, at(12), &cfg);
    assert_eq!(t.push_hold(at(12)), Some(Time(at(12).0 + wait)));
    // Owed little, push_wait bounds the first wait as before.
    t.expect_push(push::FIRST_PUSH_SHARE * wait / 2, at(0), &cfg);
    assert_eq!(t.push_hold(at(0)), Some(Time(wait)));
}

/// The (sequence, resource type) of the REQUEST a command sends to rank 2.
fn request_to_2(op: &Op) -> (u64, u16) {
    let Op::Write {
        peer: 2,
        signal: Some(s),
        ..
    } = op
    else {
        panic!("{op:?}")
    };
    let Ok(Signal::Request { seq, rtype, .. }) = Signal::unpack(*s, 0) else {
        panic!("{s:#x}")
    };
    (seq, rtype)
}

fn thief(cfg: &Config) -> (Thief, Ctx<Pending>) {
    let area = TaskArea::new(cfg, 4);
    let t = Thief::new(
        Neighbours::List(vec![2]),
        area,
        Rng::from_keys(&[1]),
        cfg.resource_types.len(),
    );
    (t, Ctx::new(cfg.clone(), 0, 4))
}

#[test]
fn claim_takes_a_ticket_reads_its_batch_and_counts_itself_done() {
    let stats = claim_steal_of_two(true);
    assert_eq!(stats.steal_log[0].victim, 2);
    assert_eq!(stats.steal_latency_ns, vec![700]);
    assert_eq!(stats.steal_ns, 700);
}

/// Without the steal log (a simulation of 100,000 ranks) the attempt's latency is summed
/// and neither list grows.
#[test]
fn without_the_steal_log_only_the_latencies_sum_is_kept() {
    let stats = claim_steal_of_two(false);
    assert!(stats.steal_log.is_empty());
    assert!(stats.steal_latency_ns.is_empty());
    assert_eq!((stats.steals_ok, stats.steal_ns), (1, 700));
}

/// A `claim` steal of two tasks from rank 2 that takes 700 ns; the thief's figures.
fn claim_steal_of_two(steal_log: bool) -> crate::Stats {
    let cfg = Config {
        steal_log,
        ..Config::default()
    };
    let (mut t, mut cx) = thief(&cfg);
    let area = TaskArea::new(&cfg, 4);
    let mem = Mem::new([area.bytes(), 64, 64]);
    assert_eq!(
        t.deadline(0, 0, &cx.cfg),
        Some(Time(0)),
        "an idle thief steals now"
    );
    assert_eq!(t.deadline(1, 0, &cx.cfg), None, "a fed one does not");
    assert_eq!(
        t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
        None
    );
    let c = cx.poll_command().expect("step 1");
    assert!(
        matches!(
            c.op,
            Op::FetchAdd {
                peer: 2,
                delta: 1,
                ..
            }
        ),
        "{c:?}"
    );
    // Step 1 answered: generation 1 of 3 tasks, ticket 0 → batch (0, 2).
    let word = ClaimWord {
        generation: 1,
        n: 3,
        ticket: 0,
    };
    let p = cx.complete(c.token).unwrap();
    assert_eq!(t.complete(&mut cx, p, word.pack(), &mem), Ok(None));
    let c = cx.poll_command().expect("step 2");
    let Op::Read { peer: 2, len, .. } = c.op else {
        panic!("{c:?}")
    };
    assert_eq!(len, 2 * area.slot);
    // The batch lands in the staging area.
    let mut slot = vec![0u8; area.slot as usize];
    for i in 0..2u32 {
        let task = Task {
            key: 0,
            owner: 2,
            index: i,
            kind: 0,
            priority: 0,
            cost_ns: 0,
            payload: vec![],
        };
        encode_task(&task, &mut slot);
        mem.write(
            Loc::new(seg::TASKS, area.staging() + u64::from(i) * area.slot),
            &slot,
        );
    }
    let p = cx.complete(c.token).unwrap();
    cx.now = Time(700);
    let got = t.complete(&mut cx, p, 0, &mem).unwrap().expect("stolen");
    assert_eq!(got.len(), 2);
    let c = cx.poll_command().expect("step 3");
    assert!(matches!(
        c.op,
        Op::FetchAdd {
            peer: 2,
            delta: 1,
            ..
        }
    ));
    assert_eq!((cx.stats.steals_ok, cx.stats.tasks_stolen), (1, 2));
    cx.stats
}

/// Per-type requests: the REQUEST names the starved type (accelerators first, then in
/// turn); an unsupported answer holds that victim off for that type only; a thief
/// whose queue is not dry asks for nothing else.
#[test]
fn typed_requests_name_the_short_type_and_back_off_per_type() {
    let cfg = Config {
        protocol: Protocol::Request,
        resource_types: vec![None, Some(vec![1])],
        ..Config::default()
    };
    let (mut t, mut cx) = thief(&cfg);
    let mem = Mem::new([TaskArea::new(&cfg, 4).bytes(), 64, 64]);
    let ask = |t: &mut Thief, cx: &mut Ctx<Pending>, queued: usize, short: u64| {
        t.step(
            cx,
            queued,
            short,
            &mut crate::mapper::DefaultMapper::default(),
        );
        cx.poll_command().map(|c| request_to_2(&c.op))
    };
    // Both types short: the accelerator's (type 1, sent as 2) first.
    let (seq, rtype) = ask(&mut t, &mut cx, 0, 0b11).expect("a request");
    assert_eq!(rtype, 2);
    assert_eq!(t.on_reply(&mut cx, 2, 0, seq, true, &mem), Ok(Some(vec![])));
    // Unsupported: type 1 waits a long time for this victim; type 0 is asked now.
    let (seq, rtype) = ask(&mut t, &mut cx, 1, 0b11).expect("a request");
    assert_eq!(rtype, 1);
    assert_eq!(
        t.on_reply(&mut cx, 2, 0, seq, false, &mem),
        Ok(Some(vec![]))
    );
    assert!(
        t.deadline(1, 0b10, &cx.cfg).unwrap() >= Time(0).plus(cfg.backoff_max * 16),
        "type 1 held off"
    );
    assert_eq!(
        t.deadline(1, 0b01, &cx.cfg),
        Some(Time(0).plus(cfg.backoff_base)),
        "type 0 backed off once"
    );
    // Nothing short and the queue not dry: no request.
    assert_eq!(ask(&mut t, &mut cx, 1, 0), None);
    assert_eq!(cx.stats.steals_empty, 2);
}

/// Two victims owed most that keep answering nothing (each ready again by the time
/// the other answered) do not take every request: the one owed less, that answered
/// nothing fewer times in a row, is asked (it may hold the type's only work).
#[test]
fn typed_victims_that_keep_answering_nothing_yield_to_one_that_did_less_often() {
    let cfg = Config {
        protocol: Protocol::Request,
        resource_types: vec![None],
        ..Config::default()
    };
    let mut t = Thief::new(
        Neighbours::List(vec![1, 2, 3]),
        TaskArea::new(&cfg, 4),
        Rng::from_keys(&[1]),
        1,
    );
    let mut cx = Ctx::new(cfg.clone(), 0, 4);
    // Rank 1 supplied work earlier (owed least), then answered nothing once; ranks 2
    // and 3 never supplied (owed most) and answered nothing five times each.
    t.typed.fetched.insert(1, 1e9);
    t.typed.total = 1e9;
    let b = &mut t.typed.backoff[0];
    b.empty(0, Time(0), &cfg);
    for _ in 0..5 {
        b.empty(1, Time(0), &cfg);
        b.empty(2, Time(0), &cfg);
    }
    cx.now = Time(0).plus(cfg.backoff_max * 2);
    let peer_asked = |t: &mut Thief, cx: &mut Ctx<Pending>| {
        t.step(cx, 0, 1, &mut crate::mapper::DefaultMapper::default());
        match cx.poll_command().map(|c| c.op) {
            Some(Op::Write { peer, .. }) => peer,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(peer_asked(&mut t, &mut cx), 1);
    // Rank 1 answers nothing again (2 in a row), then 3 more times: with equal runs
    // of nothing the debt decides, rank 2 or 3 (owed most).
    t.end_unanswered(&mut cx);
    assert_eq!(t.typed.backoff[0].failures(0), 2);
    for _ in 0..3 {
        t.typed.backoff[0].empty(0, cx.now, &cfg);
    }
    cx.now = cx.now.plus(cfg.backoff_max * 2);
    let p = peer_asked(&mut t, &mut cx);
    assert!(p == 2 || p == 3, "asked {p}");
}

#[test]
fn an_empty_victim_is_backed_off_and_a_stale_reply_ignored() {
    let cfg = Config {
        protocol: Protocol::Request,
        advertise: false,
        ..Config::default()
    };
    let (mut t, mut cx) = thief(&cfg);
    let mem = Mem::new([TaskArea::new(&cfg, 4).bytes(), 64, 64]);
    assert_eq!(
        t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
        None
    );
    let c = cx.poll_command().expect("REQUEST");
    let (seq, _) = request_to_2(&c.op);
    // A reply to another attempt, or from another rank: nothing.
    assert_eq!(t.on_reply(&mut cx, 2, 0, seq + 1, false, &mem), Ok(None));
    assert_eq!(t.on_reply(&mut cx, 3, 0, seq, false, &mem), Ok(None));
    assert!(
        t.on_reply(&mut cx, 2, 1 << 17, seq, false, &mem).is_err(),
        "over capacity"
    );
    assert_eq!(
        t.on_reply(&mut cx, 2, 0, seq, false, &mem),
        Ok(Some(vec![]))
    );
    assert_eq!(cx.stats.steals_empty, 1);
    // Its only victim is backed off: the next attempt waits.
    assert_eq!(
        t.deadline(0, 0, &cx.cfg),
        Some(Time(0).plus(cfg.backoff_base))
    );
    assert_eq!(
        t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
        None
    );
    assert!(cx.poll_command().is_none());
}

#[test]
fn an_empty_victim_is_blacklisted_until_it_advertises() {
    for protocol in [Protocol::Claim, Protocol::Request] {
        let cfg = Config {
            protocol,
            ..Config::default()
        };
        let (mut t, mut cx) = thief(&cfg);
        let mem = Mem::new([TaskArea::new(&cfg, 4).bytes(), 64, 64]);
        assert_eq!(
            t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
            None
        );
        let c = cx.poll_command().expect("first operation");
        let p = cx.complete(c.token).unwrap();
        if protocol == Protocol::Claim {
            // An empty generation: the ticket names no batch.
            assert_eq!(t.complete(&mut cx, p, 0, &mem), Ok(None));
            // The victim saw nothing: the thief tells it to advertise here.
            let c = cx.poll_command().expect("WAIT");
            let Op::Write {
                peer: 2,
                signal: Some(s),
                ..
            } = c.op
            else {
                panic!("{c:?}")
            };
            assert_eq!(
                Signal::unpack(s, 0),
                Ok(Signal::Wait {
                    epoch: 0,
                    workers_idle: false
                })
            );
        } else {
            let (seq, _) = request_to_2(&c.op);
            let _ = p;
            assert_eq!(
                t.on_reply(&mut cx, 2, 0, seq, false, &mem),
                Ok(Some(vec![]))
            );
            assert!(
                cx.poll_command().is_none(),
                "a request victim needs no WAIT"
            );
        }
        assert_eq!(cx.stats.steals_empty, 1);
        // Blacklisted: no deadline, no attempt, however late.
        assert_eq!(t.deadline(0, 0, &cx.cfg), None, "{protocol:?}");
        cx.now = Time(u64::MAX / 2);
        assert_eq!(
            t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
            None
        );
        assert!(cx.poll_command().is_none());
        // Another epoch's advertisement, or another rank's, changes nothing.
        t.on_advert(&mut cx, 2, 1);
        t.on_advert(&mut cx, 3, 0);
        assert_eq!(t.deadline(0, 0, &cx.cfg), None);
        // Its own: probed at once.
        t.on_advert(&mut cx, 2, 0);
        assert_eq!(t.deadline(0, 0, &cx.cfg), Some(Time(0)));
        assert_eq!(
            t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
            None
        );
        assert!(cx.poll_command().is_some(), "{protocol:?}: probes again");
    }
}
