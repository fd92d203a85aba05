//! Segment memory that costs only what is touched: 100,000 simulated ranks cannot each
//! hold megabytes of inbox and shared set.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::Entry;
use titus_core::fasthash::IntMap;
use titus_core::{Loc, Memory};

const PAGE: u64 = 512;

type Page = Box<[u8; PAGE as usize]>;

/// Pages of 512 bytes, allocated on first write; unwritten bytes read as zero.
///
/// It counts the bytes its rank's node reads and writes through [`Memory`] (encoding
/// tasks and results into its segments, decoding what arrived: CPU work in the runtime,
/// [`crate::model::Cpu::byte_ns`]), not the fabric's ([`SparseMem::copy_out`],
/// [`SparseMem::copy_in`]: the simulated NIC's).
#[derive(Debug, Default)]
pub(crate) struct SparseMem {
    pages: RefCell<IntMap<(u16, u64), Page>>,
    /// Bytes through [`Memory`]: in the TASKS segment, in the others.
    moved: Cell<(u64, u64)>,
}

impl SparseMem {
    /// Loads the page table's head (a hint for the cache: its pages are looked up next).
    pub(crate) fn touch(&self) -> usize {
        self.pages.borrow().len()
    }

    /// The little-endian word at `loc` (the fabric's: not counted).
    pub(crate) fn word(&self, loc: Loc) -> u64 {
        let mut w = [0u8; 8];
        self.copy_out(loc, &mut w);
        u64::from_le_bytes(w)
    }

    /// The bytes the node moved through [`Memory`] since the last call: in the TASKS
    /// segment (its slots: a simulation at scale charges them at a nominal payload's
    /// size, [`crate::Job::task_bytes_scale`]), and in the others.
    pub(crate) fn take_moved(&self) -> (u64, u64) {
        self.moved.take()
    }

    fn count(&self, loc: Loc, len: usize) {
        let (t, o) = self.moved.get();
        self.moved
            .set(if loc.segment == titus_core::layout::seg::TASKS {
                (t + len as u64, o)
            } else {
                (t, o + len as u64)
            });
    }

    /// Copies `buf.len()` bytes at `loc` into `buf` for the fabric (not counted).
    pub(crate) fn copy_out(&self, loc: Loc, buf: &mut [u8]) {
        let pages = self.pages.borrow();
        let mut off = loc.offset;
        let mut done = 0;
        while done < buf.len() {
            let (p, o) = (off / PAGE, (off % PAGE) as usize);
            let n = (PAGE as usize - o).min(buf.len() - done);
            match pages.get(&(loc.segment.0, p)) {
                Some(page) => buf[done..done + n].copy_from_slice(&page[o..o + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
            off += n as u64;
        }
    }

    /// Copies `data` to `loc` for the fabric (not counted).
    pub(crate) fn copy_in(&self, loc: Loc, data: &[u8]) {
        let mut pages = self.pages.borrow_mut();
        let mut off = loc.offset;
        let mut done = 0;
        while done < data.len() {
            let (p, o) = (off / PAGE, (off % PAGE) as usize);
            let n = (PAGE as usize - o).min(data.len() - done);
            let page = pages
                .entry((loc.segment.0, p))
                .or_insert_with(|| Box::new([0u8; PAGE as usize]));
            page[o..o + n].copy_from_slice(&data[done..done + n]);
            done += n;
            off += n as u64;
        }
    }
}

impl Memory for SparseMem {
    fn read(&self, loc: Loc, buf: &mut [u8]) {
        self.count(loc, buf.len());
        self.copy_out(loc, buf);
    }

    fn write(&self, loc: Loc, data: &[u8]) {
        self.count(loc, data.len());
        self.copy_in(loc, data);
    }

    /// Dead bytes read as zero from now on; a page that holds nothing else is freed (at
    /// 100,000 ranks the inboxes' decoded chunks were half of all pages).
    fn discard(&self, loc: Loc, len: u64) {
        let mut pages = self.pages.borrow_mut();
        let end = loc.offset.saturating_add(len);
        let mut off = loc.offset;
        while off < end {
            let (p, o) = (off / PAGE, (off % PAGE) as usize);
            let n = (PAGE - o as u64).min(end - off) as usize;
            if let Entry::Occupied(mut e) = pages.entry((loc.segment.0, p)) {
                let page = e.get_mut();
                let whole = n == PAGE as usize;
                if !whole {
                    page[o..o + n].fill(0);
                }
                if whole || page.iter().all(|&b| b == 0) {
                    e.remove();
                }
            }
            off += n as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use titus_core::SegmentId;

    #[test]
    fn reads_what_was_written_across_pages_and_zero_elsewhere() {
        let m = SparseMem::default();
        let data: Vec<u8> = (0..1500u32).map(|i| (i % 251) as u8).collect();
        m.write(Loc::new(SegmentId(1), 300), &data);
        let mut back = vec![0u8; 1500];
        m.read(Loc::new(SegmentId(1), 300), &mut back);
        assert_eq!(back, data);
        let mut z = [7u8; 16];
        m.read(Loc::new(SegmentId(2), 300), &mut z);
        assert_eq!(z, [0u8; 16]);
        m.write(Loc::new(SegmentId(0), 8), &42u64.to_le_bytes());
        assert_eq!(m.word(Loc::new(SegmentId(0), 8)), 42);
        // The node's bytes through `Memory` are counted, the fabric's are not.
        let tasks = titus_core::layout::seg::TASKS;
        m.write(Loc::new(tasks, 0), &data[..100]);
        // (Segment 0 is TASKS: the word above is one of its bytes' eight.)
        assert_eq!(m.take_moved(), (8 + 100, 1500 + 1500 + 16));
        m.copy_in(Loc::new(SegmentId(1), 0), &data);
        m.copy_out(Loc::new(SegmentId(1), 0), &mut back);
        assert_eq!(m.take_moved(), (0, 0));
    }

    #[test]
    fn discarded_bytes_read_as_zero_and_free_the_pages_they_filled() {
        let m = SparseMem::default();
        let data = vec![9u8; 2000];
        m.write(Loc::new(SegmentId(1), 100), &data); // Pages 0..=4 of segment 1.
        m.write(Loc::new(SegmentId(2), 0), &data[..8]);
        assert_eq!(m.pages.borrow().len(), 6);
        // Bytes 200..1300: page 1 whole, pages 0 and 2 in part.
        m.discard(Loc::new(SegmentId(1), 200), 1100);
        assert_eq!(m.pages.borrow().len(), 5, "page 1 freed");
        let mut back = vec![7u8; 2000];
        m.read(Loc::new(SegmentId(1), 100), &mut back);
        assert!(back[..100].iter().all(|&b| b == 9));
        assert!(back[100..1200].iter().all(|&b| b == 0));
        assert!(back[1200..].iter().all(|&b| b == 9));
        // The rest of page 0 and page 2: nothing else lives there, they go too.
        m.discard(Loc::new(SegmentId(1), 100), 100);
        m.discard(Loc::new(SegmentId(1), 1300), 236);
        assert_eq!(m.pages.borrow().len(), 3, "pages 0 and 2 freed");
        // Unwritten memory, and another segment's pages, are left alone.
        m.discard(Loc::new(SegmentId(1), 1 << 20), 4096);
        m.discard(Loc::new(SegmentId(1), 1536), 564);
        assert_eq!(m.pages.borrow().len(), 1, "only segment 2's page is left");
        assert_eq!(
            m.word(Loc::new(SegmentId(2), 0)),
            u64::from_le_bytes([9; 8])
        );
    }
}
