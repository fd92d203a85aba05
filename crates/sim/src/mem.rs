//! Segment memory that costs only what is touched: 100,000 simulated ranks cannot each
//! hold megabytes of inbox and shared set.

use std::cell::RefCell;
use titus_core::fasthash::IntMap;
use titus_core::{Loc, Memory};

const PAGE: u64 = 512;

type Page = Box<[u8; PAGE as usize]>;

/// Pages of 512 bytes, allocated on first write; unwritten bytes read as zero.
#[derive(Debug, Default)]
pub(crate) struct SparseMem {
    pages: RefCell<IntMap<(u16, u64), Page>>,
}

impl SparseMem {
    /// Loads the page table's head (a hint for the cache: its pages are looked up next).
    pub(crate) fn touch(&self) -> usize {
        self.pages.borrow().len()
    }

    /// The little-endian word at `loc`.
    pub(crate) fn word(&self, loc: Loc) -> u64 {
        let mut w = [0u8; 8];
        self.read(loc, &mut w);
        u64::from_le_bytes(w)
    }
}

impl Memory for SparseMem {
    fn read(&self, loc: Loc, buf: &mut [u8]) {
        let pages = self.pages.borrow();
        let mut off = loc.offset;
        let mut done = 0;
        while done < buf.len() {
            let (p, o) = (off / PAGE, (off % PAGE) as usize);
            let n = (PAGE as usize - o).min(buf.len() - done);
            match pages.get(&(loc.segment, p)) {
                Some(page) => buf[done..done + n].copy_from_slice(&page[o..o + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
            off += n as u64;
        }
    }

    fn write(&self, loc: Loc, data: &[u8]) {
        let mut pages = self.pages.borrow_mut();
        let mut off = loc.offset;
        let mut done = 0;
        while done < data.len() {
            let (p, o) = (off / PAGE, (off % PAGE) as usize);
            let n = (PAGE as usize - o).min(data.len() - done);
            let page = pages
                .entry((loc.segment, p))
                .or_insert_with(|| Box::new([0u8; PAGE as usize]));
            page[o..o + n].copy_from_slice(&data[done..done + n]);
            done += n;
            off += n as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_was_written_across_pages_and_zero_elsewhere() {
        let m = SparseMem::default();
        let data: Vec<u8> = (0..1500u32).map(|i| (i % 251) as u8).collect();
        m.write(Loc::new(1, 300), &data);
        let mut back = vec![0u8; 1500];
        m.read(Loc::new(1, 300), &mut back);
        assert_eq!(back, data);
        let mut z = [7u8; 16];
        m.read(Loc::new(2, 300), &mut z);
        assert_eq!(z, [0u8; 16]);
        m.write(Loc::new(0, 8), &42u64.to_le_bytes());
        assert_eq!(m.word(Loc::new(0, 8)), 42);
    }
}
