//! A registered segment's local memory.
//!
//! Remote ranks read, write and apply atomics to this memory while local threads use it,
//! so it is an array of `AtomicU64`: every access is an atomic access, and no safe code can
//! race. Byte ranges map onto words in native byte order, so the bytes a remote rank (or a
//! NIC) writes are the bytes read here.

use crate::FabricError;
use crate::sync::{AtomicU64, Ordering, fence};
use std::sync::Arc;

/// Memory that a transport maps from elsewhere (shared memory other processes map too),
/// seen as words. The transport crate that creates the mapping implements it (that is
/// where the `unsafe` of turning a mapping into words lives); a [`Segment`] built over it
/// with [`Segment::over`] keeps it alive.
pub trait SharedWords: Send + Sync + std::fmt::Debug {
    /// The whole mapping, as words.
    fn words(&self) -> &[AtomicU64];
}

/// Where a segment's words live.
#[derive(Debug)]
enum Words {
    /// This process's heap.
    Owned(Box<[AtomicU64]>),
    /// `len` words of a transport's mapping, from word `start`.
    Shared {
        mem: Arc<dyn SharedWords>,
        start: usize,
        len: usize,
    },
}

/// A segment's memory: `len()` bytes, 8-byte aligned, zeroed at creation.
#[derive(Debug)]
pub struct Segment {
    name: String,
    words: Words,
}

impl Segment {
    /// A zeroed segment of at least `len` bytes (rounded up to a multiple of 8).
    pub fn new(name: impl Into<String>, len: u64) -> Self {
        let words = len.div_ceil(8) as usize;
        Self {
            name: name.into(),
            words: Words::Owned((0..words).map(|_| AtomicU64::new(0)).collect()),
        }
    }

    /// A segment of `len` bytes (a multiple of 8) at byte `offset` (8-aligned) of a
    /// transport's mapping, which the segment keeps alive. Its contents are whatever the
    /// mapping holds. A range outside the mapping is an error.
    pub fn over(
        name: impl Into<String>,
        mem: Arc<dyn SharedWords>,
        offset: u64,
        len: u64,
    ) -> Result<Self, FabricError> {
        let name = name.into();
        let total = mem.words().len() as u64 * 8;
        let fits = offset.is_multiple_of(8)
            && len.is_multiple_of(8)
            && offset.checked_add(len).is_some_and(|end| end <= total);
        if !fits {
            return Err(FabricError::OutOfBounds {
                segment: format!("{name} (in a mapping)"),
                offset,
                len,
                segment_len: total,
            });
        }
        Ok(Self {
            name,
            words: Words::Shared {
                mem,
                start: (offset / 8) as usize,
                len: (len / 8) as usize,
            },
        })
    }

    #[inline]
    fn w(&self) -> &[AtomicU64] {
        match &self.words {
            Words::Owned(w) => w,
            Words::Shared { mem, start, len } => &mem.words()[*start..*start + *len],
        }
    }

    /// The segment's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.w().len() as u64 * 8
    }

    /// Whether the segment has no bytes.
    pub fn is_empty(&self) -> bool {
        self.w().is_empty()
    }

    /// Base address, for registering the memory with a NIC or provider. Writing through it
    /// is the transport's business (and `unsafe` there); this crate never dereferences it.
    pub fn as_ptr(&self) -> *mut u8 {
        self.w().as_ptr() as *mut u8
    }

    /// Checks that `offset..offset + len` lies inside the segment.
    pub fn check(&self, offset: u64, len: u64) -> Result<(), FabricError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(FabricError::OutOfBounds {
                segment: self.name.clone(),
                offset,
                len,
                segment_len: self.len(),
            }),
        }
    }

    fn word(&self, offset: u64) -> Result<&AtomicU64, FabricError> {
        if !offset.is_multiple_of(8) {
            return Err(FabricError::Misaligned { offset });
        }
        self.check(offset, 8)?;
        Ok(&self.w()[(offset / 8) as usize])
    }

    /// The 64-bit word at `offset` (8-aligned), with acquire ordering.
    pub fn load(&self, offset: u64) -> Result<u64, FabricError> {
        Ok(self.word(offset)?.load(Ordering::Acquire))
    }

    /// Stores the 64-bit word at `offset` (8-aligned), with release ordering.
    pub fn store(&self, offset: u64, value: u64) -> Result<(), FabricError> {
        self.word(offset)?.store(value, Ordering::Release);
        Ok(())
    }

    /// CPU compare-and-swap on the word at `offset`; returns the previous value. Remote
    /// ranks' atomics only see it coherently when the backend says so
    /// (`Capabilities::coherent_atomics`); otherwise use the fabric's atomics to self.
    pub fn compare_exchange(
        &self,
        offset: u64,
        expected: u64,
        desired: u64,
    ) -> Result<u64, FabricError> {
        let w = self.word(offset)?;
        Ok(
            match w.compare_exchange(expected, desired, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            },
        )
    }

    /// CPU fetch-and-add (wrapping) on the word at `offset`; returns the previous value.
    /// Same coherence caveat as [`Segment::compare_exchange`].
    pub fn fetch_add(&self, offset: u64, delta: u64) -> Result<u64, FabricError> {
        Ok(self.word(offset)?.fetch_add(delta, Ordering::AcqRel))
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), FabricError> {
        self.check(offset, buf.len() as u64)?;
        // (The words once, not per word: a mapping's are behind a trait object, and a
        // batch of 1,024 tasks of 680 bytes is ~90,000 words: ~1 ms per copy, looked up
        // per word.)
        let words = self.w();
        let sp = Span::of(offset, buf.len());
        let (head, rest) = buf.split_at_mut(sp.head);
        let (body, tail) = rest.split_at_mut(sp.whole * 8);
        if sp.head > 0 {
            let bytes = words[sp.first].load(Ordering::Acquire).to_ne_bytes();
            head.copy_from_slice(&bytes[sp.skip..sp.skip + sp.head]);
        }
        let b = sp.body();
        for (c, word) in body.chunks_exact_mut(8).zip(&words[b..b + sp.whole]) {
            c.copy_from_slice(&word.load(Ordering::Acquire).to_ne_bytes());
        }
        if !tail.is_empty() {
            let bytes = words[b + sp.whole].load(Ordering::Acquire).to_ne_bytes();
            tail.copy_from_slice(&bytes[..tail.len()]);
        }
        Ok(())
    }

    /// Copies `data` to `offset`. Whole words are stored; the bytes of a partly covered
    /// word are merged with a compare-and-swap loop, so concurrent writers of disjoint
    /// byte ranges never clobber each other.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), FabricError> {
        self.check(offset, data.len() as u64)?;
        let words = self.w();
        let sp = Span::of(offset, data.len());
        let (head, rest) = data.split_at(sp.head);
        let (body, tail) = rest.split_at(sp.whole * 8);
        if sp.head > 0 {
            merge(&words[sp.first], sp.skip, head);
        }
        let b = sp.body();
        for (c, word) in body.chunks_exact(8).zip(&words[b..b + sp.whole]) {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            word.store(u64::from_ne_bytes(w), Ordering::Release);
        }
        if !tail.is_empty() {
            merge(&words[b + sp.whole], 0, tail);
        }
        Ok(())
    }

    /// Copies `len` bytes from `src` at `src_offset` to this segment at `offset`.
    pub fn copy_from(
        &self,
        offset: u64,
        src: &Segment,
        src_offset: u64,
        len: u64,
    ) -> Result<(), FabricError> {
        src.check(src_offset, len)?;
        self.check(offset, len)?;
        if offset.is_multiple_of(8) && src_offset.is_multiple_of(8) {
            // Aligned: whole words, then the tail through bytes.
            let (d, s, words) = (
                (offset / 8) as usize,
                (src_offset / 8) as usize,
                (len / 8) as usize,
            );
            let (dw, sw) = (&self.w()[d..d + words], &src.w()[s..s + words]);
            for (to, from) in dw.iter().zip(sw) {
                to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            // Publish the relaxed stores as the byte path's release stores would.
            fence(Ordering::Release);
            let done = words as u64 * 8;
            if done == len {
                return Ok(());
            }
            let mut tail = [0u8; 8];
            let n = (len - done) as usize;
            src.read(src_offset + done, &mut tail[..n])?;
            return self.write(offset + done, &tail[..n]);
        }
        let mut buf = [0u8; 4096];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            src.read(src_offset + done, &mut buf[..n])?;
            self.write(offset + done, &buf[..n])?;
            done += n as u64;
        }
        Ok(())
    }
}

/// A byte range over words: `head` bytes from byte `skip` of word `first` (none when the
/// range starts on a word boundary), then `whole` words, then the rest, from the start of
/// the word after them.
struct Span {
    first: usize,
    skip: usize,
    head: usize,
    whole: usize,
}

impl Span {
    fn of(offset: u64, len: usize) -> Self {
        let skip = (offset % 8) as usize;
        let head = if skip == 0 { 0 } else { (8 - skip).min(len) };
        Self {
            first: (offset / 8) as usize,
            skip,
            head,
            whole: (len - head) / 8,
        }
    }

    /// The first whole word.
    fn body(&self) -> usize {
        self.first + usize::from(self.head > 0)
    }
}

/// Stores `bytes` at byte `skip` of `w`, keeping its other bytes: a compare-and-swap
/// loop, so that concurrent writers of the word's other bytes are not clobbered.
fn merge(w: &AtomicU64, skip: usize, bytes: &[u8]) {
    let mut cur = w.load(Ordering::Acquire);
    loop {
        let mut b = cur.to_ne_bytes();
        b[skip..skip + bytes.len()].copy_from_slice(bytes);
        match w.compare_exchange_weak(
            cur,
            u64::from_ne_bytes(b),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// Model checks (loom): every interleaving of the operations below.
#[cfg(loom)]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn disjoint_writers_of_one_word_never_clobber_each_other() {
        loom::model(|| {
            let s = Arc::new(Segment::new("t", 8));
            let a = {
                let s = s.clone();
                loom::thread::spawn(move || s.write(0, &[1, 2, 3]).unwrap())
            };
            let b = {
                let s = s.clone();
                loom::thread::spawn(move || s.write(3, &[4, 5]).unwrap())
            };
            // A third writer of a whole other part, and a CPU atomic on the word.
            s.write(5, &[6, 7, 8]).unwrap();
            a.join().unwrap();
            b.join().unwrap();
            let mut all = [0u8; 8];
            s.read(0, &mut all).unwrap();
            assert_eq!(all, [1, 2, 3, 4, 5, 6, 7, 8]);
        });
    }

    #[test]
    fn fetch_add_and_compare_exchange_lose_nothing() {
        loom::model(|| {
            let s = Arc::new(Segment::new("t", 8));
            let t = {
                let s = s.clone();
                loom::thread::spawn(move || s.fetch_add(0, 1).unwrap())
            };
            // A CAS loop increment racing with the fetch-add.
            let mut cur = s.load(0).unwrap();
            loop {
                let seen = s.compare_exchange(0, cur, cur + 1).unwrap();
                if seen == cur {
                    break;
                }
                cur = seen;
            }
            t.join().unwrap();
            assert_eq!(s.load(0).unwrap(), 2);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_words() {
        let s = Segment::new("t", 20);
        assert_eq!(s.len(), 24);
        // Aligned copy with a byte tail, and an unaligned one.
        let src = Segment::new("src", 24);
        src.write(0, b"abcdefghijklmnopqrstuvwx").unwrap();
        s.copy_from(8, &src, 0, 11).unwrap();
        s.copy_from(1, &src, 13, 3).unwrap();
        let mut all = [0u8; 24];
        s.read(0, &mut all).unwrap();
        assert_eq!(&all[..4], b"\0nop");
        assert_eq!(&all[8..19], b"abcdefghijk");
        assert_eq!(all[19], 0);
        let s = Segment::new("t", 20);
        s.write(3, b"hello, world").unwrap();
        let mut buf = [0u8; 12];
        s.read(3, &mut buf).unwrap();
        assert_eq!(&buf, b"hello, world");
        let mut all = [0u8; 24];
        s.read(0, &mut all).unwrap();
        assert_eq!(&all[..3], &[0, 0, 0]);
        assert_eq!(&all[15..], &[0; 9]);
        s.store(16, 7).unwrap();
        assert_eq!(s.fetch_add(16, 5).unwrap(), 7);
        assert_eq!(s.compare_exchange(16, 12, 1).unwrap(), 12);
        assert_eq!(s.load(16).unwrap(), 1);
    }

    proptest::proptest! {
        /// Writes and reads at any offset and length agree with a byte array: the head
        /// and tail words merged, the whole words between stored.
        #[test]
        fn byte_ranges_agree_with_a_byte_array(
            ops in proptest::collection::vec(
                (0u64..80, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)),
                1..12,
            ),
            at in 0u64..80,
            len in 0usize..40,
        ) {
            let s = Segment::new("t", 120);
            let mut model = vec![0u8; 120];
            for (off, data) in &ops {
                s.write(*off, data).unwrap();
                model[*off as usize..*off as usize + data.len()].copy_from_slice(data);
            }
            let mut all = vec![0u8; 120];
            s.read(0, &mut all).unwrap();
            proptest::prop_assert_eq!(&all, &model);
            let mut part = vec![0u8; len];
            s.read(at, &mut part).unwrap();
            proptest::prop_assert_eq!(&part[..], &model[at as usize..at as usize + len]);
        }
    }

    #[derive(Debug)]
    struct Words(Vec<AtomicU64>);
    impl SharedWords for Words {
        fn words(&self) -> &[AtomicU64] {
            &self.0
        }
    }

    #[test]
    fn segments_over_a_mapping_see_its_words_and_stay_inside_it() {
        let mem: Arc<dyn SharedWords> =
            Arc::new(Words((0..8).map(|_| AtomicU64::new(0)).collect()));
        let a = Segment::over("a", mem.clone(), 16, 24).unwrap();
        let b = Segment::over("b", mem.clone(), 0, 64).unwrap();
        assert_eq!(a.len(), 24);
        a.store(8, 7).unwrap();
        assert_eq!(b.load(24).unwrap(), 7, "one mapping, two views");
        assert!(matches!(a.load(24), Err(FabricError::OutOfBounds { .. })));
        for (off, len) in [(0, 72), (8, 64), (4, 8), (8, 12), (u64::MAX - 7, 16)] {
            assert!(
                matches!(
                    Segment::over("x", mem.clone(), off, len),
                    Err(FabricError::OutOfBounds { .. })
                ),
                "{off}+{len}"
            );
        }
    }

    #[test]
    fn bounds_and_alignment() {
        let s = Segment::new("t", 16);
        assert!(matches!(
            s.read(10, &mut [0u8; 7]),
            Err(FabricError::OutOfBounds { .. })
        ));
        assert!(matches!(
            s.write(u64::MAX, b"x"),
            Err(FabricError::OutOfBounds { .. })
        ));
        assert!(matches!(
            s.load(4),
            Err(FabricError::Misaligned { offset: 4 })
        ));
        assert!(matches!(s.load(16), Err(FabricError::OutOfBounds { .. })));
        s.read(16, &mut []).unwrap();
    }

    #[test]
    fn concurrent_disjoint_byte_writers() {
        let s = Segment::new("t", 8);
        std::thread::scope(|sc| {
            for b in 0..8u8 {
                let s = &s;
                sc.spawn(move || {
                    for i in 0..1000u32 {
                        s.write(u64::from(b), &[(i as u8).wrapping_add(b)]).unwrap();
                    }
                });
            }
        });
        let mut buf = [0u8; 8];
        s.read(0, &mut buf).unwrap();
        for b in 0..8u8 {
            assert_eq!(buf[b as usize], (999u32 as u8).wrapping_add(b));
        }
    }
}
