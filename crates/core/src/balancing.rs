//! The load balancers a job can run, and what each one sets: the one mapping from a
//! balancer's name to the core's [`Config`] and the overlay's [`OverlayParams`], used by
//! the runtime (`RuntimeConfig::balance`), the C ABI (`balancer=` option), DLB_Bench and
//! `titus sim` (`--balancer`) and the simulator's checker.
//!
//! | balancer       | stealing or sharing          | overlay            | protocol | routing |
//! |----------------|------------------------------|--------------------|----------|---------|
//! | `none`         | neither (`steal_below` = 0)  | as given           | as given | as given|
//! | `smallworld`   | steal from overlay neighbours| as given           | as given | as given|
//! | `random`       | steal from any rank          | complete graph     | as given | greedy  |
//! | `master`       | rank 0 brokers every request | complete graph     | request  | greedy  |
//! | `hierarchical` | groups, rotating masters     | complete graph     | request  | greedy  |
//!
//! The complete graph: victims are drawn uniformly over every other rank. Every rank is
//! a neighbour, so a result's next hop is its owner and routing is greedy (NoN routing
//! would hold every neighbour's row, N² entries per rank). Work sharing returns results
//! straight to their owners over it too.
//!
//! Hierarchical groups come from load estimates ([`Sharing::balanced_groups`]), as YALES2
//! forms them from previous iterations; without estimates every rank weighs the same
//! (ranks dealt out to the groups in turn). A group holds ⌈√N⌉ ranks unless told otherwise
//! ([`default_group_size`]): √N groups of √N ranks balance the masters' load against the
//! number of groups a rank's work may not leave.

use crate::{Config, CoreError, Protocol, Routing, Sharing};
use titus_overlay::OverlayParams;

/// How idle ranks find work; every rank of a job the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Balancing {
    /// No balancing: every rank runs its own tasks.
    None,
    /// Titus: work stealing from neighbours in the small-world overlay (the default).
    #[default]
    Smallworld,
    /// Work stealing from victims drawn over all ranks (the complete graph).
    Random,
    /// Centralised work sharing: rank 0 brokers every request.
    Master,
    /// Work sharing within groups formed from load estimates, each with a master rotating
    /// per epoch (YALES2's built-in balancer).
    Hierarchical {
        /// Ranks per group (None: [`default_group_size`]).
        group_size: Option<u32>,
    },
}

/// Ranks per hierarchical group unless told otherwise: ⌈√ranks⌉ (at least 1).
pub fn default_group_size(ranks: u32) -> u32 {
    (f64::from(ranks).sqrt().ceil() as u32).max(1)
}

impl Balancing {
    /// Every balancer, in the order `all` runs them (hierarchical with default groups).
    pub const ALL: [Balancing; 5] = [
        Balancing::None,
        Balancing::Smallworld,
        Balancing::Random,
        Balancing::Master,
        Balancing::Hierarchical { group_size: None },
    ];

    /// The names users type, as an error message lists them.
    pub const NAMES: &'static str = "none, smallworld, random, master or hierarchical";

    /// The name users type (`--balancer`, `balancer=`).
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Smallworld => "smallworld",
            Self::Random => "random",
            Self::Master => "master",
            Self::Hierarchical { .. } => "hierarchical",
        }
    }

    /// One line on what it does (command-line help).
    pub fn about(self) -> &'static str {
        match self {
            Self::None => "No balancing: every rank runs its own tasks",
            Self::Smallworld => "Titus: work stealing over the small-world overlay",
            Self::Random => "Work stealing from random victims over all ranks (the complete graph)",
            Self::Master => "Centralised work sharing: rank 0 brokers every request",
            Self::Hierarchical { .. } => {
                "Groups formed from load estimates, each with a master rotating per epoch (YALES2's built-in balancer)"
            }
        }
    }

    /// Whether idle ranks steal (`smallworld`, `random`): only then does the steal
    /// protocol matter (work sharing always answers requests; `none` never steals).
    pub fn steals(self) -> bool {
        matches!(self, Self::Smallworld | Self::Random)
    }

    /// Ranks per group in a job of `ranks` ranks: the hierarchical balancer's, 0 for the
    /// others.
    pub fn group_size(self, ranks: u32) -> u32 {
        match self {
            Self::Hierarchical { group_size } => {
                group_size.unwrap_or_else(|| default_group_size(ranks))
            }
            _ => 0,
        }
    }

    /// Sets the overlay, routing, protocol and sharing this balancer needs in a job of
    /// `ranks` ranks (module doc). `loads` are the ranks' load estimates that hierarchical
    /// groups are balanced over, in any unit (None: every rank the same).
    pub fn apply(
        self,
        core: &mut Config,
        overlay: &mut OverlayParams,
        ranks: u32,
        loads: Option<&[u64]>,
    ) -> Result<(), CoreError> {
        let complete = |core: &mut Config, overlay: &mut OverlayParams| {
            overlay.shortcuts = ranks.saturating_sub(3);
            overlay.exponent = Some(0.0);
            core.routing = Routing::Greedy;
        };
        match self {
            Self::None => core.steal_below = 0,
            Self::Smallworld => {}
            Self::Random => complete(core, overlay),
            Self::Master => {
                complete(core, overlay);
                core.protocol = Protocol::Request;
                core.sharing = Some(Sharing::master(ranks));
            }
            Self::Hierarchical { group_size } => {
                if let Some(g) = group_size
                    && !(1..=ranks.max(1)).contains(&g)
                {
                    return Err(crate::ConfigError::GroupSize {
                        size: g,
                        ranks: ranks.max(1),
                    }
                    .into());
                }
                let groups = match loads {
                    Some(loads) => {
                        if loads.len() != ranks as usize {
                            return Err(crate::ConfigError::LoadEstimates {
                                loads: loads.len(),
                                ranks,
                            }
                            .into());
                        }
                        Sharing::balanced_groups(loads, self.group_size(ranks))
                    }
                    None => {
                        Sharing::balanced_groups(&vec![1; ranks as usize], self.group_size(ranks))
                    }
                };
                complete(core, overlay);
                core.protocol = Protocol::Request;
                core.sharing = Some(Sharing::groups(groups, ranks, true)?);
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for Balancing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Balancing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| format!("unknown balancer '{s}' (expected {})", Self::NAMES))
    }
}

/// Up to this many ranks a job connects every fabric peer when the fabric opens, whatever
/// its overlay: a connection made inside the first epoch costs that epoch a provider's
/// handshake (`tcp;ofi_rxm`: three messages, each answered at the next connection-
/// management turn, 10 ms apart by default — a 2-rank chemistry step 0 waited 18–35 ms
/// for its first steal), and few connections cost little memory (tcp: about 1.2 MiB
/// each).
pub const EAGER_RANKS_MAX: u32 = 16;

/// Whether the ranks of a job over `overlay` connect each fabric peer on its first
/// operation rather than all when the fabric opens: exactly where the overlay is the
/// complete graph (`random`, `master`, `hierarchical`, or any overlay over few ranks:
/// every rank a peer, few ever contacted) of more than [`EAGER_RANKS_MAX`] ranks. The
/// runtime's default and the simulator's model.
pub fn connects_lazily(overlay: &titus_overlay::Overlay) -> bool {
    overlay.is_complete() && overlay.ranks() > EAGER_RANKS_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_valid_ones() {
        for b in Balancing::ALL {
            assert_eq!(b.to_string().parse::<Balancing>(), Ok(b));
        }
        let e = "fast".parse::<Balancing>().unwrap_err();
        assert!(e.contains("'fast'") && e.contains(Balancing::NAMES), "{e}");
    }

    #[test]
    fn every_balancer_but_none_leaves_a_configuration_that_balances() {
        for b in Balancing::ALL {
            let (mut core, mut overlay) = (Config::default(), OverlayParams::default());
            b.apply(&mut core, &mut overlay, 8, None).unwrap();
            assert_eq!(core.balances(), b != Balancing::None, "{b}");
        }
    }

    #[test]
    fn group_size_defaults_to_the_ceiling_of_the_square_root() {
        assert_eq!(default_group_size(0), 1);
        assert_eq!(default_group_size(1), 1);
        assert_eq!(default_group_size(16), 4);
        assert_eq!(default_group_size(17), 5);
        let h = Balancing::Hierarchical { group_size: None };
        assert_eq!(h.group_size(100), 10);
        assert_eq!(
            Balancing::Hierarchical {
                group_size: Some(3)
            }
            .group_size(100),
            3
        );
        assert_eq!(Balancing::Master.group_size(100), 0);
    }

    #[test]
    fn each_balancer_sets_what_it_needs() {
        let run = |b: Balancing, loads: Option<&[u64]>| {
            let (mut c, mut o) = (Config::default(), OverlayParams::default());
            b.apply(&mut c, &mut o, 9, loads).map(|()| (c, o))
        };
        let (c, o) = run(Balancing::Smallworld, None).unwrap();
        assert_eq!((c, o), (Config::default(), OverlayParams::default()));
        let (c, _) = run(Balancing::None, None).unwrap();
        assert_eq!(c.steal_below, 0);
        let (c, o) = run(Balancing::Random, None).unwrap();
        assert_eq!(
            (o.shortcuts, o.exponent, c.routing),
            (6, Some(0.0), Routing::Greedy)
        );
        assert!(c.sharing.is_none());
        let (c, _) = run(Balancing::Master, None).unwrap();
        assert_eq!(c.protocol, Protocol::Request);
        assert_eq!(c.sharing, Some(Sharing::master(9)));
        // Default groups of ⌈√9⌉ = 3 ranks without estimates (equal loads are dealt out
        // in turn).
        let (c, _) = run(Balancing::Hierarchical { group_size: None }, None).unwrap();
        let groups = c.sharing.unwrap().all_groups().to_vec();
        assert_eq!(groups, vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5, 8]]);
        // Estimates spread the heavy ranks over the groups.
        let loads = [9, 9, 9, 0, 0, 0, 0, 0, 0];
        let h = Balancing::Hierarchical { group_size: None };
        let (c, _) = run(h, Some(&loads)).unwrap();
        for g in c.sharing.unwrap().all_groups() {
            assert_eq!(g.iter().filter(|&&r| r < 3).count(), 1, "{g:?}");
        }
        let e = run(h, Some(&[1, 2])).unwrap_err();
        assert!(
            e.to_string().contains("2 load estimates for 9 ranks"),
            "{e}"
        );
    }
}
