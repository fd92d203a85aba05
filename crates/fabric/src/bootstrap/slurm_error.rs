//! Why Slurm's variables give no rendezvous port ([`super::slurm_port`]) or no per-node
//! task counts ([`super::tasks_per_node`]). Every rank derives the same answer from them,
//! so a bad one is an error rather than a silent other choice.

/// The port derived for a Slurm step lies in the node's ephemeral range, where a listener
/// of srun or slurmstepd may hold it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the port derived for Slurm job {job} step {step}, {port}, is in this node's ephemeral \
     range {lo}-{hi} (net.ipv4.ip_local_port_range): set TITUS_BOOTSTRAP=host:port, or \
     reserve ports for the step (srun --resv-ports)"
)]
pub struct SlurmPortError {
    /// The Slurm job.
    pub job: u64,
    /// The step.
    pub step: u64,
    /// The port derived for them.
    pub port: u16,
    /// The ephemeral range's lowest port.
    pub lo: u16,
    /// Its highest.
    pub hi: u16,
}

/// An item of a Slurm per-node task list (`2(x3),1`) that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskListError {
    /// Neither `COUNT` nor `COUNT(xREPEAT)`.
    #[error("'{0}' is not COUNT or COUNT(xREPEAT)")]
    Form(String),
    /// A repeat that is not a number.
    #[error("the repeat in '{0}' is not a number")]
    RepeatNotNumber(String),
    /// An item without a task count in front.
    #[error("'{0}' does not start with a task count")]
    NoCount(String),
    /// A repeat of 0, or one that takes the list past 2^20 nodes.
    #[error("the repeat in '{0}' is out of range")]
    RepeatOutOfRange(String),
}
