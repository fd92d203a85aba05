//! Each rank's fabric peers, and which of them it operated on.

/// Each rank's fabric peers, sorted, in one table (a rank's list is a slice of it), and
/// which of them it operated on (the entry's top bit: one cache line less per operation
/// than a table of flags beside it).
pub(super) struct Peers {
    /// Rank r's peers are `list[at[r]..at[r + 1]]`.
    at: Vec<u32>,
    list: Vec<u32>,
}

/// The top bit of a `Peers::list` entry: the rank operated on that peer.
pub(super) const USED: u32 = 1 << 31;

impl Peers {
    pub(super) fn new(lists: Vec<Vec<u32>>) -> Self {
        let mut at = Vec::with_capacity(lists.len() + 1);
        at.push(0);
        let mut list = Vec::with_capacity(lists.iter().map(Vec::len).sum());
        for l in lists {
            list.extend_from_slice(&l);
            at.push(u32::try_from(list.len()).expect("fewer than 2^32 peer entries"));
        }
        assert!(list.iter().all(|&p| p & USED == 0), "ranks below 2^31");
        Self { at, list }
    }

    pub(super) fn range(&self, r: u32) -> std::ops::Range<usize> {
        self.at[r as usize] as usize..self.at[r as usize + 1] as usize
    }

    /// Rank `r`'s peers, with the used bit.
    pub(super) fn entries(&self, r: u32) -> &[u32] {
        &self.list[self.range(r)]
    }

    /// Rank `r`'s peers.
    pub(super) fn of(&self, r: u32) -> impl Iterator<Item = u32> + '_ {
        self.entries(r).iter().map(|&p| p & !USED)
    }

    /// Where `peer` is in `r`'s list.
    pub(super) fn find(&self, r: u32, peer: u32) -> Option<usize> {
        let range = self.range(r);
        let i = self.list[range.clone()]
            .binary_search_by(|&p| (p & !USED).cmp(&peer))
            .ok()?;
        Some(range.start + i)
    }

    /// `from` operates on `peer`: false if `peer` is not its peer.
    pub(super) fn mark(&mut self, from: u32, peer: u32) -> bool {
        match self.find(from, peer) {
            Some(i) => {
                self.list[i] |= USED;
                true
            }
            None => false,
        }
    }

    /// The ranks `r` exchanged operations with, either way (the lists are symmetric).
    pub(super) fn used(&self, r: u32) -> u32 {
        self.entries(r)
            .iter()
            .filter(|&&e| {
                e & USED != 0
                    || self
                        .find(e & !USED, r)
                        .is_some_and(|j| self.list[j] & USED != 0)
            })
            .count() as u32
    }
}
