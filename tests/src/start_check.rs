//! Every rank's epoch start held to the whole job's plan, computed plainly from what the
//! ranks brought to it: the facts' reduce, the string scan and search, the neighbours'
//! exchange, each checked exactly over a real backend. Each rank's start outcome (with what
//! it brought: `EpochOutput::start_view`) travels to every rank as words ([`encode`]), and
//! every rank checks the whole job ([`check`]).

use titus_core::StringLoads;
use titus_core::start::StartOutcome;
use titus_core::start::string::{RankSplit, RankString};

/// `v` as little-endian words: what a rank sends the others.
pub fn encode(v: &StartOutcome) -> Vec<u8> {
    let mut w: Vec<u64> = vec![v.input.tasks as u64];
    let opt = |w: &mut Vec<u64>, x: Option<u64>| w.extend([u64::from(x.is_some()), x.unwrap_or(0)]);
    opt(&mut w, v.input.load);
    w.extend([
        v.facts.tasks,
        v.facts.predicting,
        v.facts.load as u64,
        (v.facts.load >> 64) as u64,
        u64::from(v.facts.refused_by.is_some()),
        v.movement.shift as u64,
    ]);
    opt(&mut w, v.load);
    w.push(v.input.neighbours.len() as u64);
    w.extend(v.input.neighbours.iter().map(|&r| u64::from(r)));
    w.push(v.neighbour_loads.len() as u64);
    for &(r, l) in &v.neighbour_loads {
        w.extend([u64::from(r), l]);
    }
    match &v.string {
        None => w.push(0),
        Some(s) => {
            w.extend([
                1,
                u64::from(s.split.is_some()),
                s.receives,
                s.sends.len() as u64,
            ]);
            for &(r, x) in &s.sends {
                w.extend([u64::from(r), x]);
            }
        }
    }
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A view [`encode`] wrote (a split string's sends are not carried: [`check`] skips
/// split plans).
pub fn decode(b: &[u8]) -> Result<StartOutcome, String> {
    let mut words = b.chunks(8).map(|c| {
        c.try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| "a torn word".to_string())
    });
    let mut next = || words.next().unwrap_or_else(|| Err("too short".into()));
    let mut v = StartOutcome::default();
    v.input.tasks = next()? as usize;
    let (some, x) = (next()?, next()?);
    v.input.load = (some == 1).then_some(x);
    v.facts.tasks = next()?;
    v.facts.predicting = next()?;
    v.facts.load = u128::from(next()?) | u128::from(next()?) << 64;
    v.facts.refused_by = (next()? == 1).then_some(0);
    v.movement.shift = next()? as i64;
    let (some, x) = (next()?, next()?);
    v.load = (some == 1).then_some(x);
    for _ in 0..next()? {
        v.input.neighbours.push(next()? as u32);
    }
    for _ in 0..next()? {
        let r = next()? as u32;
        v.neighbour_loads.push((r, next()?));
    }
    if next()? == 1 {
        let split = next()? == 1;
        let mut s = RankString {
            receives: next()?,
            split: split.then(RankSplit::default),
            ..RankString::default()
        };
        for _ in 0..next()? {
            let r = next()? as u32;
            s.sends.push((r, next()?));
        }
        v.string = Some(s);
    }
    Ok(v)
}

/// Checks every rank's view of one epoch's start against the plain computation from the
/// ranks' own loads and tasks. Returns how many of the three collectives it could hold
/// to it (the string plan's check is skipped for a split plan, whose per-rank split no
/// view carries).
pub fn check(views: &[StartOutcome]) -> Result<usize, String> {
    let tasks: u64 = views.iter().map(|v| v.input.tasks as u64).sum();
    let predicting = views.iter().filter(|v| v.input.load.is_some()).count() as u64;
    let load: u128 = views
        .iter()
        .filter_map(|v| v.input.load)
        .map(u128::from)
        .sum();
    let shift = views.first().map_or(0, |v| v.movement.shift);
    for (r, v) in views.iter().enumerate() {
        let f = &v.facts;
        if (f.tasks, f.predicting, f.load) != (tasks, predicting, load) || v.movement.shift != shift
        {
            return Err(format!(
                "rank {r}'s facts: {} tasks, {} predicting, load {}, shift {}; the job's: {tasks}, {predicting}, {load}, {shift}",
                f.tasks, f.predicting, f.load, v.movement.shift
            ));
        }
    }
    if tasks == 0 {
        return Ok(1);
    }
    let loads: Vec<Option<u64>> = views.iter().map(|v| v.load).collect();
    let mut checked = 1;
    for (r, v) in views.iter().enumerate() {
        if shift == 0 && v.load != v.input.load {
            return Err(format!(
                "rank {r}: load {:?} after a front that did not move, its own {:?}",
                v.load, v.input.load
            ));
        }
        let want: Vec<(u32, u64)> = v
            .input
            .neighbours
            .iter()
            .filter_map(|&j| Some((j, loads.get(j as usize).copied().flatten()?)))
            .collect();
        if v.neighbour_loads != want {
            return Err(format!(
                "rank {r}: its neighbours' loads {:?}, theirs {want:?}",
                v.neighbour_loads
            ));
        }
    }
    checked += usize::from(views.iter().any(|v| !v.input.neighbours.is_empty()));
    let strings: Vec<&RankString> = views.iter().filter_map(|v| v.string.as_ref()).collect();
    if !strings.is_empty() && strings.iter().all(|s| s.split.is_none()) {
        let plan = StringLoads::new(&loads);
        for (r, v) in views.iter().enumerate() {
            let want = plan.rank_string(r as u32);
            if v.string.as_ref() != Some(&want) {
                return Err(format!(
                    "rank {r}: its part of the string plan {:?}, the whole job's {want:?}",
                    v.string
                ));
            }
        }
        checked += 1;
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three ranks' views as a right start gives them: rank 0 loaded.
    fn views() -> Vec<StartOutcome> {
        let own = [Some(90), Some(0), Some(30)];
        let plan = StringLoads::new(&own);
        (0..3)
            .map(|r| {
                let mut v = StartOutcome {
                    load: own[r],
                    string: Some(plan.rank_string(r as u32)),
                    ..StartOutcome::default()
                };
                v.input.tasks = [9, 0, 3][r];
                v.input.load = own[r];
                v.input.neighbours = vec![((r + 1) % 3) as u32];
                v.facts.tasks = 12;
                v.facts.predicting = 3;
                v.facts.load = 120;
                v.neighbour_loads = vec![(((r + 1) % 3) as u32, own[(r + 1) % 3].unwrap())];
                v
            })
            .collect()
    }

    #[test]
    fn a_right_start_passes_and_each_kind_of_wrong_one_is_named() {
        let v = views();
        let round: Vec<StartOutcome> = v.iter().map(|x| decode(&encode(x)).unwrap()).collect();
        assert_eq!(round, v, "the words carry every field the check reads");
        assert_eq!(check(&v), Ok(3));
        let mut bad = v.clone();
        bad[1].facts.load = 119;
        assert!(check(&bad).unwrap_err().contains("rank 1's facts"));
        let mut bad = v.clone();
        bad[2].neighbour_loads[0].1 = 1;
        assert!(
            check(&bad)
                .unwrap_err()
                .contains("rank 2: its neighbours' loads")
        );
        let mut bad = v.clone();
        bad[0].string.as_mut().unwrap().sends.clear();
        assert!(
            check(&bad)
                .unwrap_err()
                .contains("rank 0: its part of the string plan")
        );
        let mut bad = v;
        bad[0].load = Some(80);
        assert!(check(&bad).unwrap_err().contains("did not move"));
    }
}
