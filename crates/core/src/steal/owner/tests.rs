//! The owner's unit tests.

use super::*;
use crate::Config;
use crate::ctx::testing::{Discards, Mem};

/// A queue of `n` tasks of unknown cost, in the order given.
fn queue(n: u32) -> Queue {
    let mut q = Queue::default();
    q.start((0..n).map(|index| costed(index, 0)).collect(), false);
    q
}

#[test]
fn request_answers_one_thief_at_a_time_and_stale_ones_with_nothing() {
    let cfg = Config {
        protocol: Protocol::Request,
        ..Config::default()
    };
    let area = TaskArea::new(&cfg, 4);
    let mem = Mem::new([area.bytes(), 64, 64]);
    let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 4);
    let mut o = Owner::new(area);
    let mut q = queue(8);
    o.on_request(
        &mut cx,
        Request {
            thief: 1,
            stale: false,
            seq: 5,
            workers_idle: false,
            rtype: 0,
        },
        &mut q,
        &mem,
        false,
    );
    o.on_request(
        &mut cx,
        Request {
            thief: 2,
            stale: true,
            seq: 6,
            workers_idle: false,
            rtype: 0,
        },
        &mut q,
        &mem,
        false,
    );
    let c = cx.poll_command().expect("a reply");
    assert!(cx.poll_command().is_none(), "one answer at a time");
    let reply = Signal::Reply {
        tasks: 4,
        seq: 5,
        unsupported: false,
    }
    .pack();
    assert!(
        matches!(&c.op, Op::Write { peer: 1, signal: Some(s), pieces, .. } if *s == reply && pieces.len() == 1),
        "{c:?}"
    );
    // Packed: the four tasks' headers and payloads, not four whole slots.
    let Op::Write { pieces, .. } = &c.op else {
        unreachable!()
    };
    assert!(pieces[0].1 < 4 * area.slot, "{} bytes", pieces[0].1);
    assert_eq!(q.len(), 4, "half the queue went");
    let p = cx.complete(c.token).unwrap();
    o.complete(&mut cx, p, 0, &mut q, &mem, false).unwrap();
    let c = cx.poll_command().expect("the stale request's answer");
    let empty = Signal::Reply {
        tasks: 0,
        seq: 6,
        unsupported: false,
    }
    .pack();
    assert!(
        matches!(&c.op, Op::Write { peer: 2, signal: Some(s), pieces, .. } if *s == empty && pieces.is_empty()),
        "{c:?}"
    );
    assert_eq!(q.len(), 4);
}

/// Per-type requests: a typed request gets only tasks of its type's
/// kinds; a type none of this epoch's tasks here has is unsupported; one whose tasks
/// are gone is "nothing now"; tasks the owner cannot run are not kept private.
#[test]
fn typed_requests_get_their_kinds_or_hear_unsupported() {
    let cfg = Config {
        protocol: Protocol::Request,
        resource_types: vec![None, Some(vec![1]), Some(vec![7])],
        ..Config::default()
    };
    let area = TaskArea::new(&cfg, 4);
    let mem = Mem::new([area.bytes(), 64, 64]);
    let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 4);
    let mut o = Owner::new(area);
    let mut q = Queue::default();
    q.start(
        (0..6)
            .map(|index| Task {
                key: 0,
                owner: 0,
                index,
                kind: (index % 2) as u16,
                priority: 0,
                cost_ns: 0,
                payload: vec![],
            })
            .collect(),
        false,
    );
    // This rank's CPUs run kind 0 only: its kind-1 tasks keep nothing private.
    q.local = Some(vec![0]);
    let mut answer = |o: &mut Owner, q: &mut Queue, seq: u64, rtype: u16| {
        o.on_request(
            &mut cx,
            Request {
                thief: 1,
                stale: false,
                seq,
                workers_idle: false,
                rtype,
            },
            q,
            &mem,
            false,
        );
        let c = cx.poll_command().expect("an answer");
        let Op::Write {
            signal: Some(s), ..
        } = &c.op
        else {
            panic!("{c:?}")
        };
        let sig = Signal::unpack(*s, 0).unwrap();
        let p = cx.complete(c.token).unwrap();
        o.complete(&mut cx, p, 0, q, &mem, false).unwrap();
        sig
    };
    // Type 1 (kind 1): half of the three, rounded up, then the last one.
    let r = answer(&mut o, &mut q, 1, 2);
    assert_eq!(
        r,
        Signal::Reply {
            tasks: 2,
            seq: 1,
            unsupported: false
        }
    );
    assert_eq!(q.count_of(&Some(vec![1])), 1);
    assert_eq!(q.count_of(&Some(vec![0])), 3, "kind 0 untouched");
    let r = answer(&mut o, &mut q, 2, 2);
    assert!(matches!(r, Signal::Reply { tasks: 1, .. }), "{r:?}");
    // Gone now, but it was here: nothing now, supported.
    let r = answer(&mut o, &mut q, 3, 2);
    assert_eq!(
        r,
        Signal::Reply {
            tasks: 0,
            seq: 3,
            unsupported: false
        }
    );
    // Kind 7 was never here; type 9 is no type of this job.
    for (seq, rtype) in [(4, 3), (5, 10)] {
        let r = answer(&mut o, &mut q, seq, rtype);
        assert_eq!(
            r,
            Signal::Reply {
                tasks: 0,
                seq,
                unsupported: true
            }
        );
    }
    // Any work (type 0): half of the kind-0 tasks, one kept private.
    let r = answer(&mut o, &mut q, 6, 1);
    assert!(matches!(r, Signal::Reply { tasks: 2, .. }), "{r:?}");
    assert_eq!(q.len(), 1);
}

#[test]
fn claim_publishes_once_the_region_is_free() {
    let cfg = Config::default();
    let area = TaskArea::new(&cfg, 4);
    let mem = Mem::new([area.bytes(), 64, 64]);
    let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 4);
    let mut o = Owner::new(area);
    let mut q = queue(8);
    assert_eq!(o.deadline(&q, &cx.cfg, None), Some(Time(0)));
    o.step(&mut cx, &mut q, &mem, false, None);
    let check = cx.poll_command().expect("word check");
    let p = cx.complete(check.token).unwrap();
    o.complete(&mut cx, p, ClaimWord::default().pack(), &mut q, &mem, false)
        .unwrap();
    let done = cx.poll_command().expect("done check of region 1");
    let p = cx.complete(done.token).unwrap();
    o.complete(&mut cx, p, 0, &mut q, &mem, false).unwrap();
    let swap = cx.poll_command().expect("generation swap");
    // Two thirds go: the first thief's batch (3) equals what the owner keeps (2)...
    let new = ClaimWord {
        generation: 1,
        n: 6,
        ticket: 0,
    };
    assert!(
        matches!(swap.op, Op::Cas { expected: 0, desired, .. } if desired == new.pack()),
        "{swap:?}"
    );
    assert_eq!(q.len(), 2);
    // A thief took a ticket meanwhile: the swap fails and the tasks come back.
    let p = cx.complete(swap.token).unwrap();
    o.complete(&mut cx, p, 1, &mut q, &mem, false).unwrap();
    assert_eq!(q.len(), 8);
    assert!(!o.is_sharing(&queue(0), &cx.cfg), "nothing was published");
}

/// Drives the owner's own operations (checks, swaps) with the given word values until
/// it issues nothing more of its own; returns the other commands (signals).
fn settle(
    o: &mut Owner,
    cx: &mut Ctx<Pending>,
    q: &mut Queue,
    mem: &dyn Memory,
    word: &mut ClaimWord,
) -> Vec<Op> {
    let mut out = Vec::new();
    // As the node does: a step after every completion.
    o.step(cx, q, mem, false, None);
    while let Some(c) = cx.poll_command().or_else(|| {
        o.step(cx, q, mem, false, None);
        cx.poll_command()
    }) {
        let value = match &c.op {
            Op::FetchAdd { peer: 0, .. } if matches!(c.op, Op::FetchAdd { remote, .. } if remote == tasks_loc(tasks::CLAIM)) => {
                word.pack()
            }
            Op::FetchAdd { peer: 0, .. } => 0,
            Op::Cas {
                peer: 0, desired, ..
            } => {
                let old = word.pack();
                *word = ClaimWord::unpack(*desired);
                old
            }
            _ => {
                out.push(c.op.clone());
                0
            }
        };
        let p = cx.complete(c.token).unwrap();
        o.complete(cx, p, value, q, mem, false).unwrap();
    }
    out
}

/// Rank 0's task `index` of kind 0, estimated at `cost_ns`.
fn costed(index: u32, cost_ns: u64) -> Task {
    Task {
        key: 0,
        owner: 0,
        index,
        kind: 0,
        priority: 0,
        cost_ns,
        payload: vec![],
    }
}

/// A `claim` owner's balanced start: six costly tasks in predicted order, four of them
/// published.
fn six_costly_four_published() -> (Owner, Ctx<Pending>, Queue, Mem, ClaimWord) {
    let cfg = Config::default();
    let area = TaskArea::new(&cfg, 4);
    let mem = Mem::new([area.bytes(), 64, 64]);
    let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 4);
    let mut o = Owner::new(area);
    let mut q = Queue::default();
    q.start((0..6).map(|i| costed(i, 1_000_000)).collect(), true);
    let mut word = ClaimWord::default();
    assert!(settle(&mut o, &mut cx, &mut q, &mem, &mut word).is_empty());
    assert_eq!((word.n, q.len()), (4, 2));
    (o, cx, q, mem, word)
}

#[test]
fn claim_takes_back_costly_tasks_published_before_cheaper_ones_came() {
    let (mut o, mut cx, mut q, mem, mut word) = six_costly_four_published();
    // Cheap pushes join: the costly published tasks come back at once, and what is
    // published anew (at once) is the cheap end (with cost estimates, two thirds of
    // the work from the back: the cheap tasks and some costly ones); what stays for the
    // workers is costly, and nothing cheaper than it is published.
    let generation = word.generation;
    q.extend((6..26).map(|i| costed(i, 10_000)));
    settle(&mut o, &mut cx, &mut q, &mem, &mut word);
    assert_eq!(
        word.generation,
        generation.wrapping_add(2),
        "closed, then anew"
    );
    assert_eq!(cx.stats.shares_retracted, 1);
    assert_eq!((word.n, q.len()), (24, 2));
    assert_eq!(q.cheapest_sorted(), Some(1_000_000));
    assert!(
        !o.retract(&q),
        "nothing cheaper came since: the generation stays"
    );
    let n = word.n;
    settle(&mut o, &mut cx, &mut q, &mem, &mut word);
    assert_eq!(word.n, n);
}

#[test]
fn claim_keeps_its_generation_when_what_joined_is_of_the_same_cost_class() {
    // Measured costs vary within a class, and the queue keeps them in class order only:
    // its back may be a little cheaper than a task just published from it. Taking the
    // set back for that published the same tasks anew without end.
    let (mut o, mut cx, mut q, mem, mut word) = six_costly_four_published();
    let generation = word.generation;
    // 5% cheaper: the same quarter-octave class.
    q.extend((6..8).map(|i| costed(i, 950_000)));
    assert_eq!(q.cheapest_sorted(), Some(950_000));
    assert!(!o.retract(&q), "nothing of a cheaper class came");
    settle(&mut o, &mut cx, &mut q, &mem, &mut word);
    assert_eq!(word.generation, generation, "the generation stays");
    assert_eq!(cx.stats.shares_retracted, 0);
}

/// A generation closed before thieves claimed all of it: the owner reads the unclaimed
/// batches back, and their bytes are dead (no ticket reaches them now), so memory that
/// costs what it holds frees them; the claimed batch, which its thief may still be
/// reading, stays.
#[test]
fn unclaimed_batches_taken_back_are_discarded() {
    let cfg = Config::default();
    let area = TaskArea::new(&cfg, 4);
    let mem = Discards::new(Mem::new([area.bytes(), 64, 64]));
    let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 4);
    let mut o = Owner::new(area);
    let mut q = Queue::default();
    q.start((0..6).map(|i| costed(i, 1_000_000)).collect(), true);
    let mut word = ClaimWord::default();
    settle(&mut o, &mut cx, &mut q, &mem, &mut word);
    assert_eq!(word.n, 4);
    assert!(mem.1.borrow().is_empty(), "nothing dead yet");
    // A thief claims the first batch; cheaper pushes then make the owner close the
    // generation and take the rest back.
    word.ticket = 1;
    let published = word;
    q.extend((6..26).map(|i| costed(i, 10_000)));
    settle(&mut o, &mut cx, &mut q, &mem, &mut word);
    let (start, _) = claim_batch(published.n, 1);
    let at = area.region(published.region()) + u64::from(start) * area.slot;
    assert_eq!(
        mem.1.take(),
        vec![(
            Loc::new(seg::TASKS, at),
            u64::from(published.n - start) * area.slot
        )]
    );
}

#[test]
fn waiters_hear_of_new_work_as_many_as_can_get_some() {
    let cfg = Config::default();
    let area = TaskArea::new(&cfg, 8);
    let mem = Mem::new([area.bytes(), 64, 64]);
    let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 8);
    cx.epoch = 3;
    let mut o = Owner::new(area);
    let mut q = queue(0);
    let mut word = ClaimWord::default();
    // Four thieves found it empty (one of another epoch: ignored); nothing to offer.
    for t in 1..=4 {
        o.on_wait(&cx, t, 3, t == 2);
    }
    o.on_wait(&cx, 5, 2, true);
    assert!(settle(&mut o, &mut cx, &mut q, &mem, &mut word).is_empty());
    // Work arrives: 4 tasks: 3 published (two thirds), in 2 batches (2, 1): the two
    // longest waiting thieves are told.
    q.extend(queue(4).take_front(4));
    o.work_arrived(cx.now);
    let sent = settle(&mut o, &mut cx, &mut q, &mem, &mut word);
    assert_eq!(word.n, 3, "{word:?}");
    let told: Vec<Rank> = sent
        .iter()
        .map(|op| match op {
            Op::Write {
                peer,
                signal: Some(s),
                ..
            } => {
                assert_eq!(
                    Signal::unpack(*s, 0),
                    Ok(Signal::Advert {
                        epoch: 3,
                        hops: 0,
                        tasks: 3
                    })
                );
                *peer
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(told, [1, 2]);
    assert_eq!(cx.stats.adverts_sent, 2);
    // Told once per offer: nothing more until it changes.
    assert!(settle(&mut o, &mut cx, &mut q, &mem, &mut word).is_empty());
    // Both batches taken, the last queued task left: the waiters still here (3, 4)
    // have busy workers: it stays private.
    word.ticket = 2;
    o.on_refill(&cx);
    assert!(settle(&mut o, &mut cx, &mut q, &mem, &mut word).is_empty());
    assert_eq!(
        (q.len(), word.generation),
        (1, 1),
        "not published: {word:?}"
    );
    // Thief 3 runs dry and says so: the last task goes to it.
    o.on_wait(&cx, 3, 3, true);
    let sent = settle(&mut o, &mut cx, &mut q, &mem, &mut word);
    assert_eq!((q.len(), word.generation, word.n), (0, 2, 1), "{word:?}");
    assert!(matches!(sent[..], [Op::Write { peer: 3, .. }]), "{sent:?}");
    // A new epoch forgets the rest.
    o.start_epoch();
    assert!(o.waiters.is_empty());
}
