//! The node model (`Model::cpu`): ranks share their node's cores. Four ranks of one worker
//! on a node of two cores (a hybrid's node, or `Cpu::ranks`) take twice as long as with a
//! core each; a shared slowdown and the progress threads' share stretch every task by
//! their factor, which the cost that comes home carries, and the worker's time around
//! each task with it; a sleeping worker wakes before its first task; a polled fabric's
//! target serves atomics between its tasks; the bytes a rank moves through its own
//! segments cost its CPU (a worker's time before its next task where workers serve the
//! node); a take from the node pays the time around a task once for its
//! grain, more for each task of the grain beyond the first, and more while its rank
//! balances.

mod common;

use titus_core::{Balancing, Config};
use titus_sim::model::Cpu;
use titus_sim::{Job, Model, Outcome, SimTask, simulate};

const RANKS: u32 = 4;
const TASK_NS: u64 = 1_000_000;

/// 50 tasks of 1 ms on every rank: balanced, nothing to steal.
fn tasks() -> Vec<Vec<SimTask>> {
    (0..RANKS)
        .map(|r| {
            (0..50u64)
                .map(|i| SimTask {
                    kind: 0,
                    key: i,
                    cost_ns: TASK_NS,
                    payload: (u64::from(r) << 32 | i).to_le_bytes().to_vec(),
                    hint_ns: 0,
                    priority: 0,
                })
                .collect()
        })
        .collect()
}

fn run(cpu: Option<Cpu>, ranks_per_node: Option<u32>) -> Outcome {
    let (core, overlay) = common::balanced(Balancing::Smallworld, Config::default(), RANKS);
    let mut model = Model::preset("mem").unwrap();
    if let Some(k) = ranks_per_node {
        model = model.with_nodes(k, Model::preset("mem").unwrap());
    }
    model.cpu = cpu;
    let job = Job {
        seed: 5,
        ..Job::new(core, overlay, model, tasks())
    };
    simulate(&job).unwrap_or_else(|v| panic!("{v}"))
}

/// A rank's workers' time between tasks, ns.
fn between_ns(o: &titus_sim::RankOutcome) -> u64 {
    o.stats.between.as_nanos() as u64
}

fn cpu(cores: u32, busy_slowdown: f64, wake_ns: f64, progress_share: f64) -> Cpu {
    Cpu {
        cores,
        busy_slowdown,
        wake_ns,
        progress_share,
        task_overhead_ns: 0.0,
        foreign_task_ns: 0.0,
        grain_task_ns: 0.0,
        balanced_take_ns: 0.0,
        op_serve_ns: 0.0,
        op_issue_ns: 0.0,
        busy_op_ns: 0.0,
        own_op_ns: titus_sim::model::OWN_OP_NS,
        byte_ns: 0.0,
        ranks: None,
    }
}

#[test]
fn ranks_share_their_node_s_cores() {
    let alone = run(None, None).end_ns;
    assert!(
        (50 * TASK_NS..51 * TASK_NS).contains(&alone),
        "a core each: {alone} ns"
    );
    // Four ranks on one node of two cores (the hybrid's nodes say how many share one):
    // twice as long, and the cost that comes home says so (a task's rate is the one at
    // its start: the first ranks' first tasks started before the others were busy).
    let shared = run(Some(cpu(2, 1.0, 0.0, 0.0)), Some(4));
    let ratio = shared.end_ns as f64 / alone as f64;
    assert!((1.95..2.05).contains(&ratio), "{ratio}");
    let costs: Vec<u64> = shared
        .ranks
        .iter()
        .flat_map(|o| o.costs_ns.clone())
        .collect();
    assert!(costs.iter().all(|&c| (TASK_NS..=2 * TASK_NS).contains(&c)));
    let doubled = costs.iter().filter(|&&c| c == 2 * TASK_NS).count();
    assert!(
        doubled * 10 >= costs.len() * 9,
        "{doubled} of {}",
        costs.len()
    );
    // Without a hybrid, a node holds as many one-worker ranks as it has cores: two nodes
    // of two ranks here, each rank with a core.
    let placed = run(Some(cpu(2, 1.0, 0.0, 0.0)), None);
    assert_eq!(placed.end_ns, alone);
    // Unless the model says how many ranks share a node (`titus sim --node-ranks`: every
    // process of a job run on one machine): the four on one node of two cores again, over
    // the fabric's own costs, as long as the hybrid's.
    let one_node = run(
        Some(Cpu {
            ranks: Some(4),
            ..cpu(2, 1.0, 0.0, 0.0)
        }),
        None,
    );
    assert_eq!(one_node.end_ns, shared.end_ns);
}

#[test]
fn a_shared_slowdown_and_the_progress_threads_stretch_every_task() {
    let alone = run(None, None);
    // Two cores, both running tasks: 10% slower; two ranks' progress threads want 0.2 of
    // a core each on top: (2 + 0.4) / 2 = 1.2 more. 1.1 × 1.2 = 1.32.
    let out = run(Some(cpu(2, 1.1, 0.0, 0.2)), None);
    let ratio = out.end_ns as f64 / alone.end_ns as f64;
    assert!((1.30..1.34).contains(&ratio), "{ratio}");
    // A single busy core of two: half the shared slowdown.
    let c = cpu(2, 1.1, 0.0, 0.0);
    assert!((c.factor(1, 1) - 1.05).abs() < 1e-12);
    assert!(
        (c.factor(4, 2) - 2.2).abs() < 1e-12,
        "time-shared beyond the cores"
    );
}

#[test]
fn time_sharing_stretches_a_worker_s_time_around_its_tasks_like_the_tasks() {
    // 0.1 ms around each of a rank's 50 tasks: 5 ms more with a core each; four ranks on
    // one node of two cores share the cores for it too, so twice that.
    let around = |ranks: Option<u32>| {
        run(
            Some(Cpu {
                task_overhead_ns: 100_000.0,
                ranks,
                ..cpu(2, 1.0, 0.0, 0.0)
            }),
            None,
        )
        .end_ns
    };
    let own_core = around(None) - run(None, None).end_ns;
    assert!(
        (4_900_000..5_200_000).contains(&own_core),
        "{own_core} ns around the tasks with a core each"
    );
    let bare = run(
        Some(Cpu {
            ranks: Some(4),
            ..cpu(2, 1.0, 0.0, 0.0)
        }),
        None,
    )
    .end_ns;
    let shared = around(Some(4)) - bare;
    assert!(
        (9_500_000..10_500_000).contains(&shared),
        "{shared} ns around the tasks on shared cores"
    );
}

#[test]
fn a_sleeping_worker_wakes_before_its_first_task() {
    let alone = run(None, None);
    let woken = run(Some(cpu(2, 1.0, 200_000.0, 0.0)), None);
    // The first task of each rank waits for its worker; the next ones follow the last
    // at once (the worker is awake).
    let extra = woken.end_ns - alone.end_ns;
    assert!(
        (190_000..400_000).contains(&extra),
        "{extra} ns more than without wake-ups"
    );
}

/// Two ranks, 40 tasks of [`LONG_NS`] on rank 0, rank 1 with none (it steals), on
/// `model`.
fn one_owner(model: Model, what: &str) -> Outcome {
    let (core, overlay) = common::balanced(Balancing::Smallworld, Config::default(), 2);
    let tasks = vec![
        (0..40u64)
            .map(|i| SimTask {
                kind: 0,
                key: i,
                cost_ns: LONG_NS,
                payload: i.to_le_bytes().to_vec(),
                hint_ns: 0,
                priority: 0,
            })
            .collect(),
        Vec::new(),
    ];
    let job = Job {
        seed: 3,
        ..Job::new(core, overlay, model, tasks)
    };
    simulate(&job).unwrap_or_else(|v| panic!("{what}: {v}"))
}

const LONG_NS: u64 = 2_000_000;

/// libfabric's shm serves software atomics only when its target's progress turns: while
/// the victim's one worker runs a 2 ms task and it has no operation of its own in flight,
/// a thief's ticket waits for that task's end (the worker polls between tasks); where
/// progress does not poll, or the victim's own operation keeps its naps short, at once.
#[test]
fn a_polled_target_serves_atomics_between_its_tasks() {
    let latencies = |polled: bool| {
        let mut model = Model::preset("shm").unwrap();
        model.cpu = Some(cpu(2, 1.0, 0.0, 0.0));
        model.polled = polled;
        let out = one_owner(model, &format!("polled {polled}"));
        out.ranks[1].stats.core.steal_latency_ns.clone()
    };
    let at_once = latencies(false);
    let between = latencies(true);
    // The first attempts meet the owner's own operation in flight (it publishes and
    // advertises): served at once either way; later ones wait up to a task when polled.
    assert!(at_once.iter().all(|&l| l < LONG_NS / 10), "{at_once:?}");
    let waited = between
        .iter()
        .filter(|&&l| (LONG_NS / 2..=LONG_NS).contains(&l))
        .count();
    assert!(waited >= 2, "{between:?}");
}

/// The progress thread's CPU per operation: every operation charges its target on
/// arrival and its issuer on completion (a rank's report counts both), and what was
/// charged while a rank's workers all ran tasks lengthens its next task — at most
/// doubling it.
#[test]
fn operations_cost_their_ranks_progress_cpu_and_lengthen_busy_ranks_tasks() {
    let plain = run(Some(cpu(2, 1.0, 0.0, 0.0)), None);
    let mut c = cpu(2, 1.0, 0.0, 0.0);
    c.op_serve_ns = 30_000.0;
    c.op_issue_ns = 50_000.0;
    let charged = run(Some(c), None);
    // The epoch's operations and its start's (messages and reads).
    let ops: u64 = charged
        .ranks
        .iter()
        .map(|o| o.stats.core.ops + o.stats.start_figures.messages)
        .sum();
    // (No progress share: the progress CPU is the operations' alone.)
    let cpu: u64 = charged
        .ranks
        .iter()
        .map(|o| o.stats.progress_cpu.as_nanos() as u64)
        .sum();
    assert!(ops > 0);
    // Every operation arrived; all but those still completing at the end came back.
    assert!(
        cpu <= ops * 80_000 && cpu >= ops * 30_000 + (ops * 50_000) * 9 / 10,
        "{cpu} ns for {ops} operations"
    );
    assert!(plain.ranks.iter().all(|o| o.stats.progress_cpu.is_zero()));
    // The owners' own operations (their shared sets' checks) come while their workers
    // run tasks: tasks lengthen, never beyond twice their cost.
    let costs: Vec<u64> = charged
        .ranks
        .iter()
        .flat_map(|o| o.costs_ns.clone())
        .collect();
    assert!(costs.iter().all(|&c| (TASK_NS..=2 * TASK_NS).contains(&c)));
    assert!(
        costs.iter().any(|&c| c > TASK_NS),
        "no task paid for an operation"
    );
    assert!(charged.end_ns > plain.end_ns);
}

/// Where the target's progress does not poll, an operation on a rank whose workers all
/// run tasks waits `busy_op_ns` more (its progress thread waits for a core), and one on
/// the issuer's own memory takes `own_op_ns`: the thief's atomics on the busy owner and
/// each rank's own operations show it in their per-kind latencies.
#[test]
fn a_busy_target_serves_later_and_own_memory_takes_its_time() {
    let run = |busy_op_ns: f64, own_op_ns: f64| {
        let mut model = Model::preset("tcp-loopback").unwrap();
        let mut c = cpu(2, 1.0, 0.0, 0.0);
        c.busy_op_ns = busy_op_ns;
        c.own_op_ns = own_op_ns;
        model.cpu = Some(c);
        one_owner(model, &format!("busy {busy_op_ns}"))
    };
    let kind = |k: &str| titus_core::OP_KINDS.iter().position(|x| *x == k).unwrap();
    let (fa, own) = (kind("fetch-add"), kind("own"));
    let plain = run(0.0, 100.0);
    let late = run(300_000.0, 40_000.0);
    let mean = |o: &Outcome, r: usize, k: usize| {
        let l = o.ranks[r].stats.core.op_latency[k];
        assert!(
            l.count > 0,
            "rank {r} completed no {}",
            titus_core::OP_KINDS[k]
        );
        l.mean_ns()
    };
    // The thief's fetch-adds meet the owner busy (one worker, every task 2 ms): most of
    // them wait the 300 µs more.
    let extra = mean(&late, 1, fa) - mean(&plain, 1, fa);
    assert!((200_000.0..=320_000.0).contains(&extra), "{extra} ns more");
    // Own memory: 0.1 µs, then 40 µs (an atomic may wait behind the thief's at the
    // atomic unit).
    let (before, after) = (mean(&plain, 0, own), mean(&late, 0, own));
    assert!(before < 5_000.0, "{before} ns");
    assert!((40_000.0..45_000.0).contains(&after), "{after} ns");
}

/// The bytes a rank's node moves through its own segments (slots encoded as the owner
/// shares tasks, decoded as the thief takes them) cost that rank `byte_ns` each: the
/// thread that drives the node does it before the node's next commands and tasks, or
/// the next task pays it while the rank's workers all run tasks. The same tasks run,
/// later.
#[test]
fn the_bytes_through_a_rank_s_segments_cost_its_cpu() {
    let run = |byte_ns: f64| {
        let mut model = Model::preset("tcp-loopback").unwrap();
        let mut c = cpu(2, 1.0, 0.0, 0.0);
        c.byte_ns = byte_ns;
        model.cpu = Some(c);
        one_owner(model, &format!("{byte_ns} ns a byte"))
    };
    let (plain, some, more) = (run(0.0), run(20.0), run(200.0));
    assert!(
        plain.end_ns < some.end_ns && some.end_ns < more.end_ns,
        "{} {} {} ns",
        plain.end_ns,
        some.end_ns,
        more.end_ns
    );
    // What the owner's tasks paid while its worker ran them (its publications and
    // take-backs): nothing without the term, ten times as much at ten times the price —
    // each at most doubling its task.
    let paid =
        |o: &Outcome| -> Vec<u64> { o.ranks[0].costs_ns.iter().map(|&c| c - LONG_NS).collect() };
    assert!(paid(&plain).iter().all(|&c| c == 0));
    let (a, b): (u64, u64) = (paid(&some).iter().sum(), paid(&more).iter().sum());
    assert!(
        a > 0 && (5 * a..=15 * a).contains(&b),
        "{a} ns, then {b} ns"
    );
    assert!(paid(&more).iter().all(|&c| c <= LONG_NS));
}

/// Where a rank's workers serve its node between tasks (the node backend, shm:
/// `Model::workers_serve`), what its handlers moved while every worker ran a task is
/// that worker's time before its next task, not the task's: the owner's tasks pay
/// nothing, its time between tasks holds it, and the job ends about as late.
#[test]
fn where_workers_serve_the_node_its_bytes_are_time_between_tasks() {
    let run = |serve: bool| {
        let mut model = Model::preset("tcp-loopback").unwrap();
        let mut c = cpu(2, 1.0, 0.0, 0.0);
        c.byte_ns = 200.0;
        model.cpu = Some(c);
        model.workers_serve = serve;
        one_owner(model, &format!("workers serve: {serve}"))
    };
    let (debt, served) = (run(false), run(true));
    let paid = |o: &Outcome| -> u64 { o.ranks[0].costs_ns.iter().map(|&c| c - LONG_NS).sum() };
    assert!(paid(&debt) > 0, "the progress thread's debt: nothing paid");
    assert_eq!(paid(&served), 0, "a served node's tasks paid for bytes");
    // The owner's gaps hold what its tasks paid before (no other term here).
    let (before, after) = (between_ns(&debt.ranks[0]), between_ns(&served.ranks[0]));
    assert_eq!(before, 0, "no time between tasks without the bytes");
    let owed = paid(&debt);
    assert!(
        after * 2 >= owed && after <= owed * 2,
        "between {after} ns against {owed} ns paid by tasks"
    );
    let ratio = served.end_ns as f64 / debt.end_ns as f64;
    assert!((0.97..1.03).contains(&ratio), "{ratio}");
}

/// A worker's time around a task is paid per task it takes from the node: the next task
/// of its grain, taken from its own deque, adds none (the runtime starts its clock at the
/// last one's end). Two ranks of 200 tasks of 10 µs each, nothing to steal.
#[test]
fn a_grain_pays_the_time_around_a_task_once() {
    let run = |grain_ns| grain_run(Balancing::Smallworld, grain_ns, |_| {});
    let (single, grain) = (run(0), run(100_000));
    for (r, o) in single.ranks.iter().enumerate() {
        // One at a time: every task after the first came straight from the node (but
        // one, where the epoch start's last write completed between two tasks).
        let (ns, gaps) = (between_ns(o), o.stats.betweens);
        assert!((198..=199).contains(&gaps), "rank {r}: {gaps} gaps");
        assert_eq!(ns, gaps * OVERHEAD_NS as u64, "rank {r}");
    }
    for (r, o) in grain.ranks.iter().enumerate() {
        // Grains of ~10 tasks: the same gaps, a take from the node in about one of ten.
        let (ns, gaps) = (between_ns(o), o.stats.betweens);
        assert!((198..=199).contains(&gaps), "rank {r}: {gaps} gaps");
        assert!(
            ns > 0 && ns <= 199 * OVERHEAD_NS as u64 / 5,
            "rank {r}: {ns} ns"
        );
    }
    assert!(grain.end_ns < single.end_ns);
}

#[test]
fn a_take_pays_for_each_task_of_its_grain_beyond_the_first() {
    const GRAIN_TASK_NS: f64 = 300.0;
    // Without balancing, 200 tasks of 10 µs a rank in grains of 100 µs: takes of up to
    // 10 tasks; the two runs go alike but for the time around the tasks.
    let plain = grain_run(Balancing::None, 100_000, |_| {});
    let costly = grain_run(Balancing::None, 100_000, |c| {
        c.grain_task_ns = GRAIN_TASK_NS
    });
    for (r, (p, d)) in plain.ranks.iter().zip(&costly.ranks).enumerate() {
        let takes = p.stats.core.grains;
        assert_eq!(d.stats.core.grains, takes, "rank {r}");
        assert!((20..40).contains(&takes), "rank {r}: {takes} takes");
        // Takes that came straight after a task (not the first) paid the time around a
        // task once each, and now the grain's other tasks' share with it.
        let counted = between_ns(p) / OVERHEAD_NS as u64;
        assert_eq!(between_ns(p), counted * OVERHEAD_NS as u64, "rank {r}");
        assert!(
            counted < takes && counted + 3 >= takes,
            "rank {r}: {counted}"
        );
        let extra = between_ns(d) - between_ns(p);
        assert_eq!(extra % GRAIN_TASK_NS as u64, 0, "rank {r}: {extra} ns");
        let tasks = extra / GRAIN_TASK_NS as u64;
        let beyond = 200 - takes;
        let uncounted = takes - counted;
        assert!(
            tasks <= beyond - uncounted && tasks + 9 * uncounted >= beyond,
            "rank {r}: {tasks} tasks paid for, {beyond} beyond a take's first"
        );
        assert_eq!(d.stats.betweens, p.stats.betweens, "rank {r}");
    }
    // One at a time, a take holds no more than its task.
    let single = grain_run(Balancing::None, 0, |_| {});
    let single_costly = grain_run(Balancing::None, 0, |c| c.grain_task_ns = GRAIN_TASK_NS);
    for (p, d) in single.ranks.iter().zip(&single_costly.ranks) {
        assert_eq!(p.stats.core.grains, 200);
        assert_eq!(
            (d.stats.between, d.stats.betweens),
            (p.stats.between, p.stats.betweens)
        );
    }
}

#[test]
fn a_take_pays_more_while_its_rank_balances() {
    const BALANCED_NS: f64 = 700.0;
    let balanced = |c: &mut Cpu| c.balanced_take_ns = BALANCED_NS;
    // One task a take: every gap is a take, balanced or not.
    let plain = grain_run(Balancing::None, 0, balanced);
    let stealing = grain_run(Balancing::Smallworld, 0, balanced);
    for (p, s) in plain.ranks.iter().zip(&stealing.ranks) {
        assert_eq!(between_ns(p), p.stats.betweens * OVERHEAD_NS as u64);
        assert_eq!(
            between_ns(s),
            s.stats.betweens * (OVERHEAD_NS + BALANCED_NS) as u64
        );
    }
}

/// The worker's time around a task in the last three tests, ns.
const OVERHEAD_NS: f64 = 2_000.0;

/// Two ranks of 200 tasks of 10 µs (hinted) under `balancing`, workers taking grains of
/// `grain_ns`; each take from the node costs [`OVERHEAD_NS`] and what `terms` adds.
fn grain_run(balancing: Balancing, grain_ns: u64, terms: impl Fn(&mut Cpu)) -> Outcome {
    let (core, overlay) = common::balanced(balancing, Config::default(), 2);
    let mut model = Model::preset("mem").unwrap();
    let mut c = cpu(2, 1.0, 0.0, 0.0);
    c.task_overhead_ns = OVERHEAD_NS;
    terms(&mut c);
    model.cpu = Some(c);
    let tasks = (0..2u64)
        .map(|r| {
            (0..200u64)
                .map(|i| SimTask {
                    kind: 0,
                    key: i,
                    cost_ns: 10_000,
                    payload: (r << 32 | i).to_le_bytes().to_vec(),
                    // (A grain holds tasks of known cost.)
                    hint_ns: 10_000,
                    priority: 0,
                })
                .collect()
        })
        .collect();
    let job = Job {
        seed: 9,
        worker_grain_ns: Some(grain_ns),
        start_cpu: titus_sim::StartCpu::NONE,
        spawn: None,
        ..Job::new(core, overlay, model, tasks)
    };
    simulate(&job).unwrap_or_else(|v| panic!("grain {grain_ns}: {v}"))
}
