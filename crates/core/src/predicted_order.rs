//! The predicted order of a rank's queue: costliest first by cost class (each octave of
//! cost cut in four equal parts, every task under [`FINE_NS`] in one class), and in the
//! order the tasks came within a class.
//!
//! Costly tasks run early, so an epoch ends on cheap tasks that split finely between the
//! ranks that finish (longest processing time first). An exact order by cost buys that
//! end no better than classes do (two tasks of one class differ by under 25%), yet it
//! scattered a step's tasks over memory: at 131,072 chemistry cells on one rank, every
//! task's payload, result slot and history entry became a cache miss, about 380 ns a
//! task against cells of 200 ns. Within a class the tasks keep their index order, and
//! classes are a counting sort, O(tasks).
//!
//! Below [`FINE_NS`] classes would sort by noise: a task's measured cost there is mostly
//! the clock's reads and the worker's own steps, and quarter-octave classes of it dealt a
//! step of no-op tasks into a dozen classes, every task a cache miss again (a no-op task
//! cost 480–550 ns against 330–380 with no predicted order). Any order of such tasks
//! ends an epoch within a microsecond, so they keep theirs.

use crate::layout::Task;
use std::collections::VecDeque;

/// Classes per octave of cost.
const CLASSES_PER_OCTAVE: u32 = 4;

/// How many classes there are: zero, then four per octave of a `u64`.
const CLASSES: usize = 1 + 64 * CLASSES_PER_OCTAVE as usize;

/// Tasks predicted cheaper than this (ns) share one class: their order is not worth a
/// cache miss a task.
pub(crate) const FINE_NS: u64 = 1_000;

/// The cost class of `cost_ns`: 0 for unknown (0), 1 for every cost under [`FINE_NS`],
/// then rising with the cost, four classes per octave (the two bits after the leading
/// one). Never decreasing in the cost.
pub(crate) fn cost_class(cost_ns: u64) -> u16 {
    if cost_ns == 0 {
        return 0;
    }
    if cost_ns < FINE_NS {
        return 1;
    }
    let octave = 63 - cost_ns.leading_zeros();
    // The two bits after the leading one (shifted up where the cost has fewer).
    let quarter = if octave >= 2 {
        (cost_ns >> (octave - 2)) & 3
    } else {
        (cost_ns << (2 - octave)) & 3
    };
    (1 + octave * CLASSES_PER_OCTAVE + quarter as u32) as u16
}

/// `tasks` costliest class first, each class in the order given; `estimate` gives each
/// task's cost (ns). `buckets`: the buffers of the classes, kept from epoch to epoch (a
/// step's worth of fresh buffers faulted in 7 MB a step at 131,072 tasks).
///
/// The most common class stays in the buffer the tasks came in, closed up in one pass;
/// only the others move through their classes' buffers, to the front or the back. A step
/// of tiny tasks with a few slow outliers (a preemption, a page fault) so moves each task
/// once, not twice through buffers as large as the step.
pub(crate) fn costliest_first(
    mut tasks: Vec<Task>,
    estimate: impl Fn(&Task) -> u64,
    buckets: &mut Vec<Vec<Task>>,
) -> VecDeque<Task> {
    let classes: Vec<u16> = tasks.iter().map(|t| cost_class(estimate(t))).collect();
    // Already in order (one class: a step of tiny tasks): no pass over the tasks.
    if classes.is_sorted_by(|a, b| a >= b) {
        return tasks.into();
    }
    let mut counts = vec![0usize; CLASSES];
    for &c in &classes {
        counts[usize::from(c)] += 1;
    }
    // (The first of the most common classes: any would do.)
    let stays = counts
        .iter()
        .enumerate()
        .rev()
        .max_by_key(|&(_, &n)| n)
        .map_or(0, |(c, _)| c as u16);
    buckets.resize_with(CLASSES, Vec::new);
    for (c, (b, &n)) in buckets.iter_mut().zip(&counts).enumerate() {
        if c != usize::from(stays) {
            b.reserve(n);
        }
    }
    let mut class = classes.iter();
    let moving = classes.iter().filter(|&&c| c != stays);
    let leaving = tasks.extract_if(.., |_| class.next() != Some(&stays));
    for (t, &c) in leaving.zip(moving) {
        buckets[usize::from(c)].push(t);
    }
    // Back into the buffer the tasks came in (room for all of them: no reallocation).
    let mut out = VecDeque::from(tasks);
    let stays = usize::from(stays);
    for (b, &n) in buckets.iter_mut().zip(&counts).skip(stays + 1) {
        for t in b.drain(..).rev() {
            out.push_front(t);
        }
        shrink_if_oversized(b, n);
    }
    for (b, &n) in buckets[..stays].iter_mut().zip(&counts).rev() {
        out.extend(b.drain(..));
        shrink_if_oversized(b, n);
    }
    out
}

/// A class's buffer that held far more in an earlier epoch than the `n` now gives the
/// room back.
fn shrink_if_oversized(bucket: &mut Vec<Task>, n: usize) {
    if bucket.capacity() > 2 * n + 1024 {
        bucket.shrink_to(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(index: u32, cost_ns: u64) -> Task {
        Task {
            owner: 0,
            index,
            kind: 0,
            priority: 0,
            cost_ns,
            payload: Vec::new(),
            key: 0,
        }
    }

    #[test]
    fn classes_rise_with_the_cost_four_to_an_octave() {
        assert_eq!(cost_class(0), 0);
        assert_eq!(cost_class(1), 1);
        assert_eq!(cost_class(FINE_NS - 1), 1);
        // 1,000 lies in 768..1,024: the last quarter of the octave from 512.
        assert_eq!(cost_class(FINE_NS), 1 + 9 * 4 + 3);
        // 1,024..1,280, 1,280..1,536, 1,536..1,792, 1,792..2,048: one class each.
        let tenth = 1 + 10 * 4;
        assert_eq!(cost_class(1024), tenth);
        assert_eq!(cost_class(1279), tenth);
        assert_eq!(cost_class(1280), tenth + 1);
        assert_eq!(cost_class(1535), tenth + 1);
        assert_eq!(cost_class(1536), tenth + 2);
        assert_eq!(cost_class(2047), tenth + 3);
        assert_eq!(cost_class(2048), tenth + 4);
        assert_eq!(usize::from(cost_class(u64::MAX)), CLASSES - 1);
        // Never decreasing, over a seeded sweep of costs of every magnitude.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let c = x >> (x % 64);
            assert!(cost_class(c) <= cost_class(c.saturating_add(1)), "cost {c}");
        }
    }

    #[test]
    fn a_class_spans_a_quarter_of_its_octave() {
        // The first cost of each class against the first of the next: at most 1.25×.
        let mut firsts = Vec::new();
        let mut last = u16::MAX;
        for c in 1..1_000_000u64 {
            let k = cost_class(c);
            if k != last {
                firsts.push(c);
                last = k;
            }
        }
        for w in firsts.windows(2).filter(|w| w[0] >= FINE_NS) {
            let ratio = w[1] as f64 / w[0] as f64;
            assert!(ratio <= 1.25, "{} .. {}: {ratio}", w[0], w[1]);
        }
    }

    #[test]
    fn orders_by_class_costliest_first_and_keeps_the_order_within_a_class() {
        let costs = [1_100u64, 5_000, 1_150, 0, 4_500, 1_000, 5_000, 1];
        let tasks: Vec<Task> = costs.iter().zip(0..).map(|(&c, i)| task(i, c)).collect();
        let got: Vec<u32> = costliest_first(tasks, |t| t.cost_ns, &mut Vec::new())
            .iter()
            .map(|t| t.index)
            .collect();
        // 5,000 and 4,500 share a class (4,096..5,120), as do 1,100 and 1,150
        // (1,024..1,280); 1,000 has its own below, then 1, then the unknown.
        assert_eq!(got, [1, 4, 6, 0, 2, 5, 7, 3]);
    }

    #[test]
    fn buckets_kept_from_epoch_to_epoch_order_every_epoch_alike() {
        let mut buckets = Vec::new();
        for epoch in 0..4u64 {
            // Classes that move between epochs, and one epoch far larger than the next.
            let n = if epoch == 1 { 50_000 } else { 40 };
            let costs: Vec<u64> = (0..n).map(|i| 1_000 << ((i * 7 + epoch) % 9)).collect();
            let tasks: Vec<Task> = costs.iter().zip(0..).map(|(&c, i)| task(i, c)).collect();
            let got: Vec<u32> = costliest_first(tasks.clone(), |t| t.cost_ns, &mut buckets)
                .iter()
                .map(|t| t.index)
                .collect();
            let fresh: Vec<u32> = costliest_first(tasks, |t| t.cost_ns, &mut Vec::new())
                .iter()
                .map(|t| t.index)
                .collect();
            assert_eq!(got, fresh, "epoch {epoch}");
            let mut want: Vec<u32> = (0..n as u32).collect();
            want.sort_by_key(|&i| std::cmp::Reverse(cost_class(costs[i as usize])));
            assert_eq!(got, want, "epoch {epoch}");
            assert!(buckets.iter().all(Vec::is_empty), "emptied");
        }
        let kept: usize = buckets.iter().map(Vec::capacity).sum();
        assert!(kept < 10_000, "the large epoch's room given back: {kept}");
    }

    #[test]
    fn tasks_already_in_order_stay_as_they_are() {
        for costs in [
            vec![300u64, 20, 999, 5],
            vec![9_000, 9_100, 2_000, 500, 0, 0],
        ] {
            let tasks: Vec<Task> = costs.iter().zip(0..).map(|(&c, i)| task(i, c)).collect();
            let got: Vec<u32> = costliest_first(tasks, |t| t.cost_ns, &mut Vec::new())
                .iter()
                .map(|t| t.index)
                .collect();
            let want: Vec<u32> = (0..costs.len() as u32).collect();
            assert_eq!(got, want, "{costs:?}");
        }
    }

    #[test]
    fn tasks_under_the_fine_cost_keep_their_order() {
        // Noisy measures of equal tiny tasks: one class, in the order given, after the
        // costly ones and before the unknown.
        let costs = [90u64, 310, 0, 45, 2_000, 999, 120, 1];
        let tasks: Vec<Task> = costs.iter().zip(0..).map(|(&c, i)| task(i, c)).collect();
        let got: Vec<u32> = costliest_first(tasks, |t| t.cost_ns, &mut Vec::new())
            .iter()
            .map(|t| t.index)
            .collect();
        assert_eq!(got, [4, 0, 1, 3, 5, 6, 7, 2]);
    }

    #[test]
    fn the_most_common_class_stays_and_the_rest_move_around_it() {
        // Mostly tiny tasks, a few costlier and a few unknown, over seeded steps: the
        // order is a stable sort by class, costliest first, whichever class is the most
        // common.
        let mut buckets = Vec::new();
        for seed in 1..=40u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let n = 1 + next() % 3_000;
            let costs: Vec<u64> = (0..n)
                .map(|_| match next() % 100 {
                    0..3 => 0,
                    3..8 => 1_000 + next() % 100_000,
                    _ if seed % 4 == 0 => 50_000,
                    _ => 1 + next() % 900,
                })
                .collect();
            let tasks: Vec<Task> = costs.iter().zip(0..).map(|(&c, i)| task(i, c)).collect();
            let got: Vec<u32> = costliest_first(tasks, |t| t.cost_ns, &mut buckets)
                .iter()
                .map(|t| t.index)
                .collect();
            let mut want: Vec<u32> = (0..n as u32).collect();
            want.sort_by_key(|&i| std::cmp::Reverse(cost_class(costs[i as usize])));
            assert_eq!(got, want, "seed {seed}");
            assert!(buckets.iter().all(Vec::is_empty), "seed {seed}: emptied");
        }
    }
}
