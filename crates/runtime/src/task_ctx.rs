//! What a running task may ask of its rank: spawn children (a job that declared
//! spawning, `CoreConfig::spawning`).

use titus_core::NewTask;
use titus_core::spawn::SpawnError;

/// Hands children to the rank now (the worker's, under the node's lock).
pub(crate) type Hand<'a> = &'a dyn Fn(Vec<NewTask>);

/// A running task's handle on its rank, passed to functions registered with
/// [`crate::Runtime::register_spawning`]. It lives as long as the task's call: children
/// spawned through it join the rank's queue when the task returns, before its result is
/// reported, or earlier with [`TaskCtx::hand_over`].
pub struct TaskCtx<'a> {
    rank: u32,
    /// Tasks queued on this rank when its worker last took from the node.
    queued: usize,
    /// The job's payload limit, or None when it does not spawn.
    max_payload: Option<u32>,
    spawned: &'a mut Vec<NewTask>,
    hand: Option<Hand<'a>>,
    /// The buffer of a payload this worker ran before, for [`TaskCtx::result_buffer`].
    spare: Option<&'a mut Vec<u8>>,
}

impl std::fmt::Debug for TaskCtx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskCtx")
            .field("rank", &self.rank)
            .field("queued", &self.queued)
            .field("spawned", &self.spawned.len())
            .finish_non_exhaustive()
    }
}

impl<'a> TaskCtx<'a> {
    pub(crate) fn new(
        rank: u32,
        queued: usize,
        max_payload: Option<u32>,
        spawned: &'a mut Vec<NewTask>,
        hand: Option<Hand<'a>>,
        spare: Option<&'a mut Vec<u8>>,
    ) -> Self {
        Self {
            rank,
            queued,
            max_payload,
            spawned,
            hand,
            spare,
        }
    }

    /// An empty buffer with room for `len` bytes, for the task's result: the buffer of a
    /// payload that this worker ran before, where its size suits `len` (at most twice it
    /// plus 64 bytes: a small result does not hold a large buffer), else a new one.
    /// Payloads come from the thread that hands the epoch over and results go back to it:
    /// a worker that recycles one into the other neither allocates nor frees, and no
    /// memory crosses between threads' allocator arenas (two of each per task were a
    /// third of a worker's time with 0.2 µs tasks).
    pub fn result_buffer(&mut self, len: usize) -> Vec<u8> {
        match self.spare.as_deref_mut() {
            Some(spare) if (len..=2 * len + 64).contains(&spare.capacity()) => {
                let mut buf = std::mem::take(spare);
                buf.clear();
                buf
            }
            _ => Vec::with_capacity(len),
        }
    }

    /// Hands the children spawned so far to the rank now, while this task goes on: they
    /// may run on other workers or be stolen before it ends (a lock of the rank's node).
    /// A task that splits its work for thieves calls it once, not per child.
    pub fn hand_over(&mut self) {
        if let Some(hand) = self.hand
            && !self.spawned.is_empty()
        {
            hand(std::mem::take(self.spawned));
        }
    }

    /// The rank the task runs on.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The tasks its rank held queued when this task's worker last took from it (no lock:
    /// a recent count). None queued means that the rank has nothing for thieves: a task
    /// that can split its work should split it now.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Spawns a task of `kind` with `payload` under `key`: it joins this rank's queue
    /// (the front: a rank goes depth first, thieves take the oldest) and may be stolen
    /// like any other. Its result travels home to the owner of the epoch task this one
    /// descends from, which gets it with `key` ([`crate::EpochOutput::spawned`]); or,
    /// where the job declared a reduction, it is one little-endian u64 per lane and joins
    /// the reduction that every rank gets at the epoch's end
    /// ([`crate::EpochOutput::reduced`]; the key is then unused).
    pub fn spawn(&mut self, key: u64, kind: u16, payload: Vec<u8>) -> Result<(), SpawnError> {
        self.spawn_task(NewTask {
            key,
            kind,
            payload,
            ..NewTask::default()
        })
    }

    /// [`TaskCtx::spawn`] with a priority and a cost hint ([`NewTask::key`] is the key).
    pub fn spawn_task(&mut self, task: NewTask) -> Result<(), SpawnError> {
        let Some(limit) = self.max_payload else {
            return Err(SpawnError::NotSpawning);
        };
        if task.payload.len() > limit as usize {
            return Err(SpawnError::PayloadTooLarge {
                len: task.payload.len(),
                limit,
            });
        }
        self.spawned.push(task);
        Ok(())
    }

    /// The job's payload limit for a spawned task, or None when the job declared no
    /// spawning (every spawn is then refused).
    pub fn max_payload(&self) -> Option<u32> {
        self.max_payload
    }

    /// Tasks spawned so far by this call.
    pub fn spawned(&self) -> usize {
        self.spawned.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result takes the spare payload buffer where its size suits, emptied; otherwise a
    /// new buffer, and the spare stays for a later task.
    #[test]
    fn a_result_buffer_recycles_a_payload_that_fits() {
        let mut spawned = Vec::new();
        let mut spare = vec![7u8; 48];
        let at = spare.as_ptr();
        let mut ctx = TaskCtx::new(0, 0, None, &mut spawned, None, Some(&mut spare));
        // Too small for 100 bytes.
        let big = ctx.result_buffer(100);
        assert!(big.capacity() >= 100 && big.as_ptr() != at && big.is_empty());
        let fit = ctx.result_buffer(32);
        assert_eq!((fit.as_ptr(), fit.len()), (at, 0), "the spare, emptied");
        assert!(fit.capacity() >= 48);
        let none = ctx.result_buffer(32);
        assert!(
            none.capacity() >= 32 && none.as_ptr() != at,
            "the spare went once"
        );
        assert_eq!(spare.capacity(), 0);
        // A small result does not hold a large buffer.
        let mut spare = vec![0u8; 4096];
        let mut ctx = TaskCtx::new(0, 0, None, &mut spawned, None, Some(&mut spare));
        assert!(ctx.result_buffer(8).capacity() < 4096);
        assert_eq!(spare.len(), 4096, "kept");
        // Without a spare (an emulated device's task): a new buffer.
        let mut ctx = TaskCtx::new(0, 0, None, &mut spawned, None, None);
        assert!(ctx.result_buffer(16).capacity() >= 16);
    }
}
