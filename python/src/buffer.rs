//! Reading the bytes that any object exports (bytes, a bytearray, a contiguous memoryview
//! such as a numpy array's pickled out of band) straight into a payload, without a copy
//! in Python first.
//!
//! The stable ABI this package targets (CPython 3.9) declares the buffer protocol only
//! from 3.11 on, so PyO3 offers it to abi3 builds from 3.11. Every CPython 3 exports the
//! same two functions with the same `Py_buffer`, the structure 3.11 froze into the stable
//! ABI unchanged, so they are declared here.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::os::raw::{c_char, c_int, c_void};

/// CPython's `Py_buffer`.
#[repr(C)]
struct PyBufferView {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

unsafe extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut PyBufferView, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBufferView);
}

/// `PyBUF_SIMPLE`: the bytes as one C-contiguous run, or an error from the exporter.
const PYBUF_SIMPLE: c_int = 0;

/// Appends the bytes `obj` exports to `out`; an object without a contiguous buffer is a
/// Python error (`TypeError`, `BufferError`).
pub(crate) fn append_bytes(obj: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> PyResult<()> {
    let mut view = std::mem::MaybeUninit::<PyBufferView>::zeroed();
    // SAFETY: `obj` is a live object and its `Bound` proves the GIL is held; `view`
    // points to writable memory of `Py_buffer`'s layout, which the call fills on success
    // and leaves alone on failure.
    let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), PYBUF_SIMPLE) };
    if rc != 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    // SAFETY: the call succeeded, so the view is filled in: `buf` holds `len` readable
    // bytes until the view is released, which happens once, below, after the copy. The
    // GIL is held throughout, so no Python code can resize the exporter meanwhile.
    unsafe {
        let v = view.assume_init_mut();
        let len = usize::try_from(v.len).unwrap_or(0);
        if len > 0 && !v.buf.is_null() {
            out.extend_from_slice(std::slice::from_raw_parts(v.buf.cast::<u8>(), len));
        }
        PyBuffer_Release(v);
    }
    Ok(())
}

/// The bytes of a framed object: bytes as they are, or `(total, parts)`, each part an
/// object exporting a buffer, end to end, `total` bytes in all (allocated once; a wrong
/// total only costs a reallocation).
pub(crate) fn joined(framed: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = framed.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    let (total, parts): (usize, Bound<'_, PyAny>) = framed.extract()?;
    let mut out = Vec::with_capacity(total.min(1 << 32));
    for part in parts.try_iter()? {
        append_bytes(&part?, &mut out)?;
    }
    Ok(out)
}
