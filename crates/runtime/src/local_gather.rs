//! The all-gather of an in-process job's ranks (threads of one process), for reports.

use super::*;

/// An all-gather across the job's ranks (a barrier when the blobs are empty).
pub type AllGatherFn = Box<dyn Fn(&[u8]) -> Result<Vec<Vec<u8>>, String> + Send + Sync>;

/// All-gather among the in-process ranks of one world. A rank whose runtime is dropped
/// has left it ([`LocalMember`]): a round that waits for it fails, naming it, where it
/// would otherwise wait forever (the rendezvous's ranks fail the same way when a process
/// goes).
pub(crate) struct LocalGather {
    state: Mutex<GatherState>,
    cv: Condvar,
}

pub(crate) struct GatherState {
    /// Rounds completed.
    round: u64,
    /// Ranks that gave their blob to the round under way.
    arrived: usize,
    /// One per rank: the world's size.
    slots: Vec<Vec<u8>>,
    /// The last completed round's blobs (a rank woken late still finds its round's).
    last: Vec<Vec<u8>>,
    /// The first rank that left.
    left: Option<u32>,
}

impl LocalGather {
    pub(crate) fn new(size: usize) -> Self {
        Self {
            state: Mutex::new(GatherState {
                round: 0,
                arrived: 0,
                slots: vec![Vec::new(); size],
                last: Vec::new(),
                left: None,
            }),
            cv: Condvar::new(),
        }
    }

    pub(crate) fn gather(&self, rank: u32, blob: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let gone = |r: u32| format!("rank {r} left the job (its runtime was dropped)");
        let mut st = lock(&self.state);
        if let Some(r) = st.left {
            return Err(gone(r));
        }
        st.slots[rank as usize] = blob.to_vec();
        st.arrived += 1;
        let size = st.slots.len();
        if st.arrived == size {
            st.last = std::mem::replace(&mut st.slots, vec![Vec::new(); size]);
            st.arrived = 0;
            st.round += 1;
            self.cv.notify_all();
            return Ok(st.last.clone());
        }
        // The next round cannot complete without this rank: `last` stays this round's.
        let mine = st.round;
        while st.round == mine && st.left.is_none() {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        match st.left {
            Some(r) if st.round == mine => Err(gone(r)),
            _ => Ok(st.last.clone()),
        }
    }

    pub(crate) fn leave(&self, rank: u32) {
        lock(&self.state).left.get_or_insert(rank);
        self.cv.notify_all();
    }
}

/// A rank's membership of its in-process world's all-gather, held by its runtime: the
/// rank leaves when the runtime is dropped.
pub(crate) struct LocalMember {
    pub(crate) gather: Arc<LocalGather>,
    pub(crate) rank: u32,
}

impl Drop for LocalMember {
    fn drop(&mut self) {
        self.gather.leave(self.rank);
    }
}
