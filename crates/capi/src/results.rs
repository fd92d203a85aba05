//! A time step's results and their measured costs, copied out in task order.

use super::*;

/// Copies the measured cost of each of this rank's tasks of the last titus_run, in
/// nanoseconds and task order (measured where the task ran, which may be another rank),
/// into `ns` (room for `count` values). TITUS_ERR_BUFFER_TOO_SMALL, copying nothing, when
/// `count` is below titus_result_count.
#[unsafe(no_mangle)]
pub extern "C" fn titus_costs(t: *mut titus_t, ns: *mut u64, count: usize) -> c_int {
    call("titus_costs", || {
        with(t, |inner| {
            let n = inner.costs.len();
            if count < n {
                return Err(Error::TooSmall(format!(
                    "{n} costs; the buffer holds {count}"
                )));
            }
            if n == 0 {
                return Ok(());
            }
            if ns.is_null() {
                return Err(Error::Invalid("the costs buffer is NULL".into()));
            }
            // SAFETY: the caller guarantees `count` writable values at `ns` (header), and
            // n ≤ count; Titus's buffer never overlaps the caller's.
            unsafe { std::ptr::copy_nonoverlapping(inner.costs.as_ptr(), ns, n) };
            Ok(())
        })
    })
}

/// The number of this rank's results of the last titus_run, in `*count`.
#[unsafe(no_mangle)]
pub extern "C" fn titus_result_count(t: *mut titus_t, count: *mut usize) -> c_int {
    call("titus_result_count", || {
        with(t, |inner| {
            *out(count, "count")? = inner.results.len();
            Ok(())
        })
    })
}

/// Copies result `index` (task order) into `buf` (`capacity` bytes) and its size into
/// `*len`. When `capacity` is too small, nothing is copied, `*len` is the size needed and
/// the call returns TITUS_ERR_BUFFER_TOO_SMALL (`buf` may be NULL to ask for the size).
#[unsafe(no_mangle)]
pub extern "C" fn titus_result(
    t: *mut titus_t,
    index: usize,
    buf: *mut c_void,
    capacity: usize,
    len: *mut usize,
) -> c_int {
    call("titus_result", || {
        with(t, |inner| {
            let len = out(len, "len")?;
            let n = inner.results.len();
            let r = inner
                .results
                .get(index)
                .ok_or_else(|| Error::Invalid(format!("result {index} of {n}: no such result")))?;
            *len = r.len();
            if capacity < r.len() {
                return Err(Error::TooSmall(format!(
                    "result {index} has {} bytes; the buffer holds {capacity}",
                    r.len()
                )));
            }
            copy_out(buf, r, "the buffer")
        })
    })
}

pub(crate) fn copy_out(buf: *mut c_void, data: &[u8], what: &str) -> Result<(), Error> {
    if data.is_empty() {
        return Ok(());
    }
    if buf.is_null() {
        return Err(Error::Invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller guarantees `capacity` writable bytes at `buf` (header), checked
    // above to hold `data`; Titus's buffers never overlap the caller's.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len()) };
    Ok(())
}

/// Copies every result into `out`, result i at byte `i * record_size` (zero-padded to
/// `record_size`). TITUS_ERR_BUFFER_TOO_SMALL, copying nothing, when `count` is below the
/// number of results or a result is longer than `record_size`.
#[unsafe(no_mangle)]
pub extern "C" fn titus_results_fixed(
    t: *mut titus_t,
    out_records: *mut c_void,
    record_size: usize,
    count: usize,
) -> c_int {
    call("titus_results_fixed", || {
        with(t, |inner| {
            let n = inner.results.len();
            if count < n {
                return Err(Error::TooSmall(format!(
                    "{n} results; the buffer holds {count} records"
                )));
            }
            if let Some((i, r)) = inner
                .results
                .iter()
                .enumerate()
                .find(|(_, r)| r.len() > record_size)
            {
                return Err(Error::TooSmall(format!(
                    "result {i} has {} bytes; records hold {record_size}",
                    r.len()
                )));
            }
            if n == 0 {
                return Ok(());
            }
            if out_records.is_null() {
                return Err(Error::Invalid("the records buffer is NULL".into()));
            }
            // SAFETY: the caller guarantees `count * record_size` writable bytes at
            // `out_records` (header); n ≤ count, and n results of ≤ record_size bytes exist,
            // so n * record_size fits in memory.
            let out = unsafe {
                std::slice::from_raw_parts_mut(out_records.cast::<u8>(), n * record_size)
            };
            for (r, rec) in inner.results.iter().zip(out.chunks_exact_mut(record_size)) {
                rec[..r.len()].copy_from_slice(r);
                rec[r.len()..].fill(0);
            }
            Ok(())
        })
    })
}
