//! The ABI driven from Rust as a C caller would: single-rank behaviour and bad use here;
//! compiled C and Fortran programs across processes in the workspace's `tests/capi.rs`.

use super::*;
use std::ptr::null_mut;
use std::sync::{Arc, Barrier};

fn last_error() -> String {
    // SAFETY: titus_last_error returns a NUL-terminated thread-local string.
    unsafe { CStr::from_ptr(titus_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Squares a little-endian u64; a payload of 0xFF.. fails; 0xEE.. reports too many bytes.
unsafe extern "C" fn square(
    payload: *const c_void,
    len: usize,
    result: *mut c_void,
    cap: usize,
    result_len: *mut usize,
    ctx: *mut c_void,
) -> c_int {
    assert_eq!(payload as usize % 16, 0, "payload not 16-byte aligned");
    assert_eq!(result as usize % 16, 0, "result not 16-byte aligned");
    // SAFETY: Titus passes `len` readable bytes and `cap` writable bytes.
    let p = unsafe { std::slice::from_raw_parts(payload.cast::<u8>(), len) };
    let mut b = [0u8; 8];
    b[..len.min(8)].copy_from_slice(&p[..len.min(8)]);
    let v = u64::from_le_bytes(b);
    if v == u64::MAX {
        return 3;
    }
    if v == 0xEEEE_EEEE_EEEE_EEEE {
        // SAFETY: a valid out-pointer.
        unsafe { *result_len = cap + 1 };
        return 0;
    }
    // The context: a number added to every result.
    let add = ctx as u64;
    let r = (v.wrapping_mul(v).wrapping_add(add)).to_le_bytes();
    // SAFETY: cap ≥ 8 in these tests (max_result).
    unsafe {
        std::ptr::copy_nonoverlapping(r.as_ptr(), result.cast::<u8>(), 8);
        *result_len = 8;
    }
    0
}

fn init(options: &CStr) -> *mut titus_t {
    let mut t = null_mut();
    assert_eq!(
        titus_init(&mut t, options.as_ptr()),
        TITUS_OK,
        "{}",
        last_error()
    );
    assert!(!t.is_null());
    t
}

fn results(t: *mut titus_t) -> Vec<u64> {
    let mut n = 0usize;
    assert_eq!(titus_result_count(t, &mut n), TITUS_OK);
    let mut out = vec![0u64; n];
    assert_eq!(
        titus_results_fixed(t, out.as_mut_ptr().cast(), 8, n),
        TITUS_OK,
        "{}",
        last_error()
    );
    out
}

#[test]
fn one_rank_runs_fixed_and_variable_tasks_in_order() {
    let mut t = init(c"workers=2");
    assert_eq!(
        titus_register(t, 7, Some(square), 5 as *mut c_void),
        TITUS_OK
    );
    let fixed: Vec<u64> = (1..=100).collect();
    assert_eq!(
        titus_tasks_fixed(t, 7, fixed.as_ptr().cast(), 8, fixed.len()),
        TITUS_OK
    );
    // Variable payloads: 1, 2 or 3 bytes (values 200, 201, 202 in the first byte).
    let data = [200u8, 201, 0, 202, 0, 0];
    let offsets = [0usize, 1, 3, 6];
    assert_eq!(
        titus_tasks_var(t, 7, data.as_ptr().cast(), offsets.as_ptr(), 3),
        TITUS_OK
    );
    assert_eq!(titus_run(t), TITUS_OK, "{}", last_error());
    let mut expect: Vec<u64> = fixed.iter().map(|v| v * v + 5).collect();
    expect.extend([200u64, 201, 202].map(|v| v * v + 5));
    assert_eq!(results(t), expect);
    let mut s = titus_stats::default();
    assert_eq!(titus_stats_get(t, &mut s), TITUS_OK);
    assert_eq!((s.tasks_owned, s.tasks_run, s.workers), (103, 103, 2));
    let mut job = titus_stats::default();
    assert_eq!(titus_job_stats(t, &mut job), TITUS_OK);
    assert_eq!(job.tasks_run, 103);
    assert!(job.efficiency > 0.0 && job.efficiency <= 1.0, "{job:?}");
    // No nominal work stated: no nominal figure.
    assert_eq!((job.nominal_s, job.nominal_efficiency), (0.0, 0.0));
    let (mut r, mut n) = (-1, -1);
    assert_eq!(titus_rank_size(t, &mut r, &mut n), TITUS_OK);
    assert_eq!((r, n), (0, 1));
    // A second time step on the same handle, with its nominal work stated in two parts.
    let one = 9u64;
    assert_eq!(titus_task(t, 7, (&raw const one).cast(), 8), TITUS_OK);
    assert_eq!(titus_nominal_work(t, 0.25), TITUS_OK);
    assert_eq!(titus_nominal_work(t, 0.5), TITUS_OK);
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        assert_eq!(titus_nominal_work(t, bad), TITUS_ERR_INVALID);
        assert!(last_error().contains("nominal work"), "{}", last_error());
    }
    assert_eq!(titus_run(t), TITUS_OK);
    assert_eq!(results(t), vec![86]);
    assert_eq!(titus_stats_get(t, &mut s), TITUS_OK);
    assert_eq!(s.nominal_s, 0.75);
    let want = 0.75 / (s.session_s * s.workers as f64);
    assert!((s.nominal_efficiency - want).abs() < 1e-12, "{s:?}");
    assert_eq!(titus_job_stats(t, &mut job), TITUS_OK);
    assert_eq!(job.nominal_s, 0.75);
    assert!((job.nominal_efficiency - want).abs() < 1e-12, "{job:?}");
    // The next step starts without nominal work.
    assert_eq!(titus_task(t, 7, (&raw const one).cast(), 8), TITUS_OK);
    assert_eq!(titus_run(t), TITUS_OK);
    assert_eq!(titus_stats_get(t, &mut s), TITUS_OK);
    assert_eq!((s.nominal_s, s.nominal_efficiency), (0.0, 0.0));
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
    assert!(t.is_null());
    // Finalising a NULL handle is harmless.
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
}

/// Time steps carry their payloads in the buffers of the results two steps back: every
/// result stays right, and a step's results stay readable after the next hand-over, until
/// its titus_run.
#[test]
fn steps_reuse_result_buffers_and_keep_results_until_the_next_run() {
    let mut t = init(c"workers=2");
    assert_eq!(titus_register(t, 7, Some(square), null_mut()), TITUS_OK);
    let mut last: Option<Vec<u64>> = None;
    for step in 0..6u64 {
        // Sizes change between steps (8-byte records, then 40-byte ones whose first 8
        // bytes are the value): buffers that do not suit are not reused.
        let width = if step % 3 == 2 { 40 } else { 8 };
        let values: Vec<u64> = (0..500).map(|i| step * 1_000 + i).collect();
        let mut records = vec![0u8; values.len() * width];
        for (r, v) in records.chunks_mut(width).zip(&values) {
            r[..8].copy_from_slice(&v.to_le_bytes());
        }
        assert_eq!(
            titus_tasks_fixed(t, 7, records.as_ptr().cast(), width, values.len()),
            TITUS_OK
        );
        if let Some(want) = &last {
            assert_eq!(
                &results(t),
                want,
                "step {}'s results after the hand-over",
                step - 1
            );
        }
        assert_eq!(titus_run(t), TITUS_OK, "{}", last_error());
        let want: Vec<u64> = values.iter().map(|v| v * v).collect();
        assert_eq!(results(t), want, "step {step}");
        last = Some(want);
    }
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
}

#[test]
fn a_payload_goes_into_the_next_recycled_buffer_that_suits_it() {
    let mut recycled = vec![
        Vec::with_capacity(48),
        Vec::with_capacity(4096),
        vec![1u8; 8],
    ];
    let first = recycled[0].as_ptr();
    let mut at = 0;
    let p = [9u8; 40];
    let a = tasks::recycled_copy(&mut recycled, &mut at, &p);
    assert_eq!(
        (a.as_ptr(), &a[..]),
        (first, &p[..]),
        "the first buffer, filled"
    );
    // Far too large for 40 bytes: a new buffer, and the large one stays.
    let b = tasks::recycled_copy(&mut recycled, &mut at, &p);
    assert_eq!(&b[..], &p[..]);
    assert_eq!(recycled[1].capacity(), 4096);
    // Too small: a new one.
    let c = tasks::recycled_copy(&mut recycled, &mut at, &p);
    assert_eq!(&c[..], &p[..]);
    // None left.
    let d = tasks::recycled_copy(&mut recycled, &mut at, &p[..3]);
    assert_eq!((&d[..], at), (&p[..3], 4));
}

/// What the header says of re-registering, refused hand-overs, empty payloads, a NULL
/// handle pointer, init after finalise and the handle after TITUS_ERR_TASK.
#[test]
fn the_unsaid_cases_behave_as_the_header_says() {
    let mut t = init(c"workers=1,max_payload=16");
    assert_eq!(titus_register(t, 0, Some(square), null_mut()), TITUS_OK);
    // Re-registering a kind replaces its function's context (and function).
    assert_eq!(
        titus_register(t, 0, Some(square), 5 as *mut c_void),
        TITUS_OK
    );
    // Empty payloads: one task, then three of a zero record size (value 0: 0 * 0 + 5).
    assert_eq!(titus_task(t, 0, std::ptr::null(), 0), TITUS_OK);
    assert_eq!(titus_tasks_fixed(t, 0, std::ptr::null(), 0, 3), TITUS_OK);
    // Refused calls hand over nothing: a payload over max_payload in the middle of a batch,
    // decreasing offsets, an unregistered kind.
    let data = [1u8; 40];
    let offsets = [0usize, 1, 20, 21];
    assert_eq!(
        titus_tasks_var(t, 0, data.as_ptr().cast(), offsets.as_ptr(), 3),
        TITUS_ERR_INVALID
    );
    let offsets = [0usize, 2, 1];
    assert_eq!(
        titus_tasks_var(t, 0, data.as_ptr().cast(), offsets.as_ptr(), 2),
        TITUS_ERR_INVALID
    );
    assert_eq!(
        titus_tasks_fixed(t, 0, data.as_ptr().cast(), 20, 2),
        TITUS_ERR_INVALID
    );
    assert_eq!(titus_task(t, 9, data.as_ptr().cast(), 1), TITUS_ERR_INVALID);
    assert_eq!(titus_run(t), TITUS_OK, "{}", last_error());
    assert_eq!(results(t), vec![5, 5, 5, 5]);
    // After TITUS_ERR_TASK: no results, the last good step's figures, only finalise.
    let mut before = titus_stats::default();
    assert_eq!(titus_stats_get(t, &mut before), TITUS_OK);
    let bad = u64::MAX;
    assert_eq!(titus_task(t, 0, (&raw const bad).cast(), 8), TITUS_OK);
    assert_eq!(titus_run(t), TITUS_ERR_TASK);
    assert_eq!(results(t), Vec::<u64>::new());
    let mut after = titus_stats::default();
    assert_eq!(titus_stats_get(t, &mut after), TITUS_OK);
    assert_eq!(after.tasks_run, before.tasks_run);
    assert_eq!(titus_task(t, 0, std::ptr::null(), 0), TITUS_OK);
    assert_eq!(titus_run(t), TITUS_ERR_INVALID);
    assert!(
        last_error().contains("an earlier titus_run failed (TITUS_ERR_TASK)"),
        "{}",
        last_error()
    );
    // titus_finalize(NULL) is bad use; a NULL *handle is nothing to do.
    assert_eq!(titus_finalize(null_mut()), TITUS_ERR_INVALID);
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
    // Init after finalise: a new runtime; nothing carries over (kind 0 is unregistered).
    let mut t = init(c"workers=1");
    assert_eq!(titus_task(t, 0, std::ptr::null(), 0), TITUS_ERR_INVALID);
    assert_eq!(titus_register(t, 0, Some(square), null_mut()), TITUS_OK);
    assert_eq!(titus_task(t, 0, std::ptr::null(), 0), TITUS_OK);
    assert_eq!(titus_run(t), TITUS_OK);
    assert_eq!(results(t), vec![0]);
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
}

/// Keys and measured costs: every task's cost comes back in task order; keys must match
/// the tasks handed over; a repeated key fails the step, naming it.
#[test]
fn keys_and_costs() {
    let mut t = init(c"workers=2");
    assert_eq!(titus_register(t, 7, Some(square), null_mut()), TITUS_OK);
    let fixed: Vec<u64> = (1..=50).collect();
    let keys: Vec<u64> = fixed.iter().map(|v| 1000 + v).collect();
    assert_eq!(
        titus_tasks_fixed(t, 7, fixed.as_ptr().cast(), 8, fixed.len()),
        TITUS_OK
    );
    // A wrong count is refused and the hand-over stands.
    assert_eq!(titus_task_keys(t, keys.as_ptr(), 49), TITUS_ERR_INVALID);
    assert!(
        last_error().contains("49 keys for the 50 tasks"),
        "{}",
        last_error()
    );
    assert_eq!(titus_task_keys(t, std::ptr::null(), 50), TITUS_ERR_INVALID);
    assert_eq!(titus_task_keys(t, keys.as_ptr(), 50), TITUS_OK);
    assert_eq!(titus_run(t), TITUS_OK, "{}", last_error());
    assert_eq!(results(t), fixed.iter().map(|v| v * v).collect::<Vec<_>>());
    let mut costs = vec![0u64; 50];
    assert_eq!(
        titus_costs(t, costs.as_mut_ptr(), 49),
        TITUS_ERR_BUFFER_TOO_SMALL
    );
    assert_eq!(titus_costs(t, costs.as_mut_ptr(), 50), TITUS_OK);
    assert!(costs.iter().all(|&c| c > 0), "{costs:?}");
    // A repartition plan on one rank: nothing to move, and the keys are checked.
    let mut mk = vec![0u64; 50];
    let mut mt = vec![0 as c_int; 50];
    let mut nm = 99usize;
    assert_eq!(
        titus_repartition_plan(
            t,
            keys.as_ptr(),
            50,
            mk.as_mut_ptr(),
            mt.as_mut_ptr(),
            50,
            &mut nm
        ),
        TITUS_OK,
        "{}",
        last_error()
    );
    assert_eq!(nm, 0);
    let twice = [1u64, 1];
    assert_eq!(
        titus_repartition_plan(
            t,
            twice.as_ptr(),
            2,
            mk.as_mut_ptr(),
            mt.as_mut_ptr(),
            50,
            &mut nm
        ),
        TITUS_ERR_INVALID
    );
    // A repeated key fails the step on every rank (here the only one), naming the key.
    let mut dup = keys.clone();
    dup[7] = dup[3];
    assert_eq!(
        titus_tasks_fixed(t, 7, fixed.as_ptr().cast(), 8, fixed.len()),
        TITUS_OK
    );
    assert_eq!(titus_task_keys(t, dup.as_ptr(), 50), TITUS_OK);
    assert_eq!(titus_run(t), TITUS_ERR_EPOCH);
    assert!(
        last_error().contains(&dup[3].to_string()),
        "{}",
        last_error()
    );
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
}

#[test]
fn bad_use_gets_error_codes() {
    // Calls before init.
    let t: *mut titus_t = null_mut();
    assert_eq!(titus_run(t), TITUS_ERR_NOT_INITIALIZED);
    assert!(last_error().contains("titus_run"), "{}", last_error());
    assert_eq!(
        titus_register(t, 1, Some(square), null_mut()),
        TITUS_ERR_NOT_INITIALIZED
    );
    let mut n = 0;
    assert_eq!(titus_result_count(t, &mut n), TITUS_ERR_NOT_INITIALIZED);
    // Bad options.
    let mut t = null_mut();
    assert_eq!(
        titus_init(&mut t, c"workers=zero".as_ptr()),
        TITUS_ERR_INVALID
    );
    assert!(last_error().contains("workers='zero'"), "{}", last_error());
    assert!(t.is_null());
    assert_eq!(titus_init(null_mut(), null()), TITUS_ERR_INVALID);
    let mut t = init(c"workers=1,max_result=16,max_payload=8");
    // Init twice.
    let before = t;
    assert_eq!(titus_init(&mut t, null()), TITUS_ERR_ALREADY_INITIALIZED);
    assert_eq!(t, before);
    // A null task function, a bad kind, an unregistered kind.
    assert_eq!(titus_register(t, 1, None, null_mut()), TITUS_ERR_INVALID);
    assert!(last_error().contains("NULL"), "{}", last_error());
    assert_eq!(
        titus_register(t, 70_000, Some(square), null_mut()),
        TITUS_ERR_INVALID
    );
    let v = 3u64;
    assert_eq!(
        titus_task(t, 1, (&raw const v).cast(), 8),
        TITUS_ERR_INVALID
    );
    assert!(
        last_error().contains("no registered function"),
        "{}",
        last_error()
    );
    assert_eq!(titus_register(t, 1, Some(square), null_mut()), TITUS_OK);
    // A payload over max_payload; a NULL payload; decreasing offsets.
    let big = [0u8; 9];
    assert_eq!(titus_task(t, 1, big.as_ptr().cast(), 9), TITUS_ERR_INVALID);
    assert!(last_error().contains("max_payload=8"), "{}", last_error());
    assert_eq!(titus_task(t, 1, std::ptr::null(), 8), TITUS_ERR_INVALID);
    let offs = [0usize, 4, 2];
    assert_eq!(
        titus_tasks_var(t, 1, big.as_ptr().cast(), offs.as_ptr(), 2),
        TITUS_ERR_INVALID
    );
    // Run with no tasks anywhere: an error code, and the handle stays usable.
    assert_eq!(titus_run(t), TITUS_ERR_NO_TASKS);
    assert_eq!(titus_task(t, 1, (&raw const v).cast(), 8), TITUS_OK);
    assert_eq!(titus_task(t, 1, (&raw const v).cast(), 8), TITUS_OK);
    assert_eq!(titus_run(t), TITUS_OK, "{}", last_error());
    // Result buffers too small.
    let mut one = [0u64; 1];
    assert_eq!(
        titus_results_fixed(t, one.as_mut_ptr().cast(), 8, 1),
        TITUS_ERR_BUFFER_TOO_SMALL
    );
    let mut two = [0u64; 2];
    assert_eq!(
        titus_results_fixed(t, two.as_mut_ptr().cast(), 4, 2),
        TITUS_ERR_BUFFER_TOO_SMALL
    );
    assert_eq!(two, [0, 0], "nothing copied");
    let mut len = 0;
    assert_eq!(
        titus_result(t, 0, null_mut(), 0, &mut len),
        TITUS_ERR_BUFFER_TOO_SMALL
    );
    assert_eq!(len, 8);
    assert_eq!(
        titus_result(t, 0, two.as_mut_ptr().cast(), 8, &mut len),
        TITUS_OK
    );
    assert_eq!(two[0], 9);
    assert_eq!(
        titus_result(t, 2, two.as_mut_ptr().cast(), 8, &mut len),
        TITUS_ERR_INVALID
    );
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
    // Use after finalize: the handle is NULL again.
    assert_eq!(titus_run(t), TITUS_ERR_NOT_INITIALIZED);
}

#[test]
fn a_failing_task_fails_the_step_with_a_code() {
    for (payload, words) in [
        (u64::MAX, "returned 3"),
        (0xEEEE_EEEE_EEEE_EEEE, "over its 16-byte buffer"),
    ] {
        let mut t = init(c"workers=1,max_result=16");
        assert_eq!(titus_register(t, 0, Some(square), null_mut()), TITUS_OK);
        let tasks = [1u64, payload, 2];
        assert_eq!(
            titus_tasks_fixed(t, 0, tasks.as_ptr().cast(), 8, 3),
            TITUS_OK
        );
        assert_eq!(titus_run(t), TITUS_ERR_TASK);
        assert!(last_error().contains(words), "{}", last_error());
        assert_eq!(titus_finalize(&mut t), TITUS_OK);
    }
}

static RELEASE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Blocks until the test releases it (RELEASE), then succeeds with no result.
unsafe extern "C" fn blocks(
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: usize,
    result_len: *mut usize,
    _: *mut c_void,
) -> c_int {
    while !RELEASE.load(Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // SAFETY: a valid out-pointer.
    unsafe { *result_len = 0 };
    0
}

#[test]
fn an_epoch_timeout_says_what_the_rank_waits_for_in_one_sentence() {
    // The task blocks until released, so the step cannot end before its timeout.
    let mut t = init(c"workers=1,epoch_timeout=0.2");
    assert_eq!(titus_register(t, 0, Some(blocks), null_mut()), TITUS_OK);
    assert_eq!(titus_task(t, 0, [1u8].as_ptr().cast(), 1), TITUS_OK);
    assert_eq!(titus_run(t), TITUS_ERR_EPOCH);
    RELEASE.store(true, Ordering::Release);
    let e = last_error();
    assert!(
        e.starts_with("titus_run: the epoch did not end within 200ms: rank 0 waits for the results of 1 of its 1 tasks"),
        "{e}"
    );
    // The internal state is not the user's message.
    assert!(!e.contains("inbox") && !e.contains('{'), "{e}");
    assert_eq!(titus_finalize(&mut t), TITUS_OK, "{}", last_error());
}

#[test]
fn strerror_names_every_code() {
    for code in 0..=TITUS_ERR_INTERNAL {
        // SAFETY: static NUL-terminated strings.
        let s = unsafe { CStr::from_ptr(titus_strerror(code)) }
            .to_str()
            .unwrap();
        assert_ne!(s, "unknown error code", "code {code}");
    }
    // SAFETY: as above.
    let v = unsafe { CStr::from_ptr(titus_version()) }.to_str().unwrap();
    assert_eq!(v, env!("CARGO_PKG_VERSION"));
}

/// An in-process all-gather among threads (what MPI_Allgather does across processes).
struct Gather {
    barrier: Barrier,
    slots: Mutex<Vec<Vec<u8>>>,
    ranks: usize,
}

unsafe extern "C" fn gather(
    send: *const c_void,
    len: usize,
    recv: *mut c_void,
    ctx: *mut c_void,
) -> c_int {
    // SAFETY: ctx is the Gather of this rank, alive for the test.
    let g = unsafe { &*(ctx as *const (Arc<Gather>, usize)) };
    let (shared, rank) = (&g.0, g.1);
    // SAFETY: the contract of titus_allgather_fn.
    let mine = unsafe { std::slice::from_raw_parts(send.cast::<u8>(), len) }.to_vec();
    shared.slots.lock().unwrap()[rank] = mine;
    shared.barrier.wait();
    let all: Vec<u8> = shared.slots.lock().unwrap().concat();
    shared.barrier.wait();
    assert_eq!(
        all.len(),
        len * shared.ranks,
        "every rank sends the same length"
    );
    // SAFETY: recv holds size × len bytes.
    unsafe { std::ptr::copy_nonoverlapping(all.as_ptr(), recv.cast::<u8>(), all.len()) };
    0
}

#[test]
fn ranks_exchange_addresses_through_the_callback() {
    if !titus_fabric_ofi_available() {
        eprintln!("skipped: libfabric is not available");
        return;
    }
    /// Each rank's own figures and the job's, by rank.
    static SEEN: Mutex<Vec<(usize, titus_stats, titus_stats)>> = Mutex::new(Vec::new());
    on_ranks(2, c"workers=1,provider=tcp;ofi_rxm", |r, h| {
        let t = *h;
        assert_eq!(titus_register(t, 0, Some(square), null_mut()), TITUS_OK);
        // Rank 0 owns every task.
        let tasks: Vec<u64> = if r == 0 {
            (0..400).collect()
        } else {
            Vec::new()
        };
        assert_eq!(
            titus_tasks_fixed(t, 0, tasks.as_ptr().cast(), 8, tasks.len()),
            TITUS_OK
        );
        // Each rank states its own tasks' nominal work; the job's is the sum.
        assert_eq!(titus_nominal_work(t, 0.5 * r as f64 + 1.0), TITUS_OK);
        assert_eq!(titus_run(t), TITUS_OK, "rank {r}: {}", last_error());
        let got = results(t);
        let want: Vec<u64> = tasks.iter().map(|v| v * v).collect();
        assert_eq!(got, want, "rank {r}");
        let mut own = titus_stats::default();
        assert_eq!(titus_stats_get(t, &mut own), TITUS_OK);
        // Rank 0's tasks that did not run on rank 0 ran on rank 1; rank 1 owns none.
        assert_eq!(
            own.tasks_ran_elsewhere,
            own.tasks_owned - (own.tasks_run - own.tasks_run_for_others),
            "rank {r}: {own:?}"
        );
        let mut job = titus_stats::default();
        assert_eq!(titus_job_stats(t, &mut job), TITUS_OK);
        assert_eq!((job.tasks_owned, job.tasks_run), (400, 400));
        assert_eq!((job.nominal_s, job.workers), (2.5, 2));
        assert_eq!(job.tasks_ran_elsewhere, job.tasks_run_for_others);
        let want = 2.5 / (job.session_s * 2.0);
        assert!((job.nominal_efficiency - want).abs() < 1e-12, "{job:?}");
        SEEN.lock().unwrap().push((r, own, job));
        assert_eq!(titus_finalize(h), TITUS_OK, "{}", last_error());
    });
    // The job's figures: session_s the slowest rank's, times and counts summed.
    let mut seen = SEEN.lock().unwrap().clone();
    seen.sort_by_key(|s| s.0);
    let [(_, a, job), (_, b, job1)] = seen[..] else {
        panic!("{} ranks reported", seen.len())
    };
    assert_eq!(job.session_s, job1.session_s);
    assert_eq!(job.session_s, a.session_s.max(b.session_s));
    assert_eq!(job.busy_s, a.busy_s + b.busy_s);
    assert_eq!(job.idle_s, a.idle_s + b.idle_s);
    assert_eq!(job.tasks_stolen, a.tasks_stolen + b.tasks_stolen);
    assert_eq!(
        job.tasks_ran_elsewhere,
        a.tasks_ran_elsewhere + b.tasks_ran_elsewhere
    );
}

/// Runs `body(rank, handle)` on each of `size` ranks (threads) initialised with
/// titus_init_exchange over the in-process all-gather and tcp.
fn on_ranks(size: usize, options: &'static CStr, body: fn(usize, &mut *mut titus_t)) {
    let shared = Arc::new(Gather {
        barrier: Barrier::new(size),
        slots: Mutex::new(vec![Vec::new(); size]),
        ranks: size,
    });
    let threads: Vec<_> = (0..size)
        .map(|r| {
            let ctx = Box::new((shared.clone(), r));
            std::thread::spawn(move || {
                let ctx_ptr = (&raw const *ctx).cast_mut().cast::<c_void>();
                let mut t = null_mut();
                let rc = titus_init_exchange(
                    &mut t,
                    r as c_int,
                    size as c_int,
                    Some(gather),
                    ctx_ptr,
                    options.as_ptr(),
                );
                assert_eq!(rc, TITUS_OK, "rank {r}: {}", last_error());
                body(r, &mut t);
                drop(ctx);
            })
        })
        .collect();
    for t in threads {
        t.join().expect("rank thread");
    }
}

#[test]
fn a_task_failure_reaches_every_rank_with_its_cause() {
    if !titus_fabric_ofi_available() {
        eprintln!("skipped: libfabric is not available");
        return;
    }
    on_ranks(2, c"workers=1,provider=tcp;ofi_rxm", |r, t| {
        assert_eq!(titus_register(*t, 0, Some(square), null_mut()), TITUS_OK);
        // Rank 0 owns every task; task 150 fails, wherever it runs.
        let tasks: Vec<u64> = if r == 0 {
            (0..300)
                .map(|i| if i == 150 { u64::MAX } else { i })
                .collect()
        } else {
            Vec::new()
        };
        assert_eq!(
            titus_tasks_fixed(*t, 0, tasks.as_ptr().cast(), 8, tasks.len()),
            TITUS_OK
        );
        assert_eq!(titus_run(*t), TITUS_ERR_TASK, "rank {r}: {}", last_error());
        let e = last_error();
        assert!(
            e.starts_with("titus_run: task 150 of rank 0 failed on rank ")
                && e.ends_with(": the function of task kind 0 returned 3"),
            "rank {r}: {e}"
        );
        // The handle after TITUS_ERR_TASK: no results; it finalises.
        let mut n = 1usize;
        assert_eq!(titus_result_count(*t, &mut n), TITUS_OK);
        assert_eq!(n, 0);
        assert_eq!(titus_finalize(t), TITUS_OK, "rank {r}: {}", last_error());
    });
}

fn titus_fabric_ofi_available() -> bool {
    titus_fabric_ofi::available()
}

#[test]
fn exchange_rejects_bad_ranks_and_null_callbacks() {
    let mut t = null_mut();
    assert_eq!(
        titus_init_exchange(&mut t, 2, 2, Some(gather), null_mut(), null()),
        TITUS_ERR_INVALID
    );
    assert!(last_error().contains("rank 2 of 2"), "{}", last_error());
    assert_eq!(
        titus_init_exchange(&mut t, 0, 2, None, null_mut(), null()),
        TITUS_ERR_INVALID
    );
}

fn null() -> *const c_char {
    std::ptr::null()
}

#[test]
fn header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let cfg = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(cfg)
        .generate()
        .expect("cbindgen")
        .write(&mut generated);
    let path = format!("{dir}/include/titus.h");
    if std::env::var_os("TITUS_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/titus.h is not what cbindgen generates from the source: the ABI changed. \
         Review, then regenerate: TITUS_BLESS=1 cargo test -p titus-capi header_is_current"
    );
}

#[test]
fn fortran_module_covers_the_header() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let header = std::fs::read_to_string(format!("{dir}/include/titus.h")).unwrap();
    let module = std::fs::read_to_string(format!("{dir}/fortran/titus.f90")).unwrap();
    // Every `titus_name(` that is a declaration, not a typedef.
    let functions: Vec<&str> = header
        .lines()
        .filter(|l| !l.starts_with("typedef") && !l.starts_with("//") && !l.starts_with(" *"))
        .filter_map(|l| {
            let at = l.find("titus_")?;
            let rest = &l[at..];
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
            rest[end..].starts_with('(').then(|| &rest[6..end])
        })
        .collect();
    assert!(functions.len() >= 15, "{functions:?}");
    for f in &functions {
        assert!(
            module.contains(&format!("name=\"titus_{f}\"")),
            "fortran/titus.f90 has no binding for titus_{f}"
        );
    }
    for code in header
        .lines()
        .filter_map(|l| l.strip_prefix("#define TITUS_"))
    {
        let name = code.split_whitespace().next().unwrap();
        if name == "H" {
            continue; // the include guard
        }
        assert!(
            module.contains(&format!("TITUS_{name} =")),
            "fortran/titus.f90 has no constant TITUS_{name}"
        );
    }
}

/// Priorities and cost hints: a count that is not the hand-over's, or a priority outside
/// i16, is refused and nothing is set; hinted tasks give the same results.
#[test]
fn priorities_and_cost_hints() {
    let mut t = init(c"workers=2,cost_aware=on");
    assert_eq!(titus_register(t, 7, Some(square), null_mut()), TITUS_OK);
    let fixed: Vec<u64> = (1..=40).collect();
    assert_eq!(
        titus_tasks_fixed(t, 7, fixed.as_ptr().cast(), 8, fixed.len()),
        TITUS_OK
    );
    let mut prio: Vec<c_int> = (0..40).map(|i| if i % 10 == 0 { 5 } else { -1 }).collect();
    let cost: Vec<u64> = (0..40)
        .map(|i| if i % 10 == 0 { 30_000 } else { 1_000 })
        .collect();
    assert_eq!(
        titus_task_hints(t, prio.as_ptr(), cost.as_ptr(), 39),
        TITUS_ERR_INVALID
    );
    assert!(
        last_error().contains("39 hints for the 40 tasks"),
        "{}",
        last_error()
    );
    prio[3] = 32_768;
    assert_eq!(
        titus_task_hints(t, prio.as_ptr(), cost.as_ptr(), 40),
        TITUS_ERR_INVALID
    );
    assert!(
        last_error().contains("priority 32768 of task 3 is outside"),
        "{}",
        last_error()
    );
    prio[3] = -32_768;
    assert_eq!(
        titus_task_hints(t, prio.as_ptr(), cost.as_ptr(), 40),
        TITUS_OK
    );
    assert_eq!(titus_run(t), TITUS_OK, "{}", last_error());
    assert_eq!(results(t), fixed.iter().map(|v| v * v).collect::<Vec<_>>());
    // NULL arrays: no priorities, no hints.
    assert_eq!(
        titus_tasks_fixed(t, 7, fixed.as_ptr().cast(), 8, 2),
        TITUS_OK
    );
    assert_eq!(
        titus_task_hints(t, std::ptr::null(), std::ptr::null(), 2),
        TITUS_OK
    );
    assert_eq!(titus_run(t), TITUS_OK, "{}", last_error());
    assert_eq!(results(t), [1, 4]);
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
}

/// A device queue driven by `titus_add_resource`'s callbacks: `launch` squares the payload
/// (as `square` does, plus 1 so its results are told apart) into a queue; `test` hands
/// finished ones back last-in first-out; a payload of 0xDD.. fails at test.
#[derive(Default)]
struct Device {
    queue: Vec<(u64, u64, bool)>,
    next: u64,
    launched: u64,
}

unsafe extern "C" fn device_launch(
    kind: c_int,
    payload: *const c_void,
    len: usize,
    handle: *mut u64,
    ctx: *mut c_void,
) -> c_int {
    assert_eq!(kind, 1, "only kind 1 has a variant on the device");
    assert_eq!(payload as usize % 16, 0, "payload not 16-byte aligned");
    // SAFETY: the test's Device, alive for the run; Titus calls one callback at a time.
    let dev = unsafe { &mut *ctx.cast::<Device>() };
    // SAFETY: `len` readable bytes at `payload`.
    let p = unsafe { std::slice::from_raw_parts(payload.cast::<u8>(), len) };
    let mut b = [0u8; 8];
    b[..len.min(8)].copy_from_slice(&p[..len.min(8)]);
    let v = u64::from_le_bytes(b);
    dev.next += 1;
    dev.launched += 1;
    dev.queue.push((
        dev.next,
        v.wrapping_mul(v).wrapping_add(1),
        v == 0xDDDD_DDDD_DDDD_DDDD,
    ));
    // SAFETY: a valid out-pointer.
    unsafe { *handle = dev.next };
    0
}

unsafe extern "C" fn device_test(
    handle: *mut u64,
    result: *mut c_void,
    cap: usize,
    result_len: *mut usize,
    done: *mut c_int,
    ctx: *mut c_void,
) -> c_int {
    // SAFETY: as in device_launch.
    let dev = unsafe { &mut *ctx.cast::<Device>() };
    let Some((h, r, fail)) = dev.queue.pop() else {
        // SAFETY: a valid out-pointer.
        unsafe { *done = 0 };
        return 0;
    };
    assert!(cap >= 8);
    // SAFETY: valid out-pointers; `cap` ≥ 8 writable bytes at `result`.
    unsafe {
        *done = 1;
        *handle = h;
        std::ptr::copy_nonoverlapping(r.to_le_bytes().as_ptr(), result.cast::<u8>(), 8);
        *result_len = 8;
    }
    if fail { 9 } else { 0 }
}

#[test]
fn a_resource_from_c_callbacks_runs_its_kinds() {
    let mut t = init(c"workers=1,dispatch=fixed");
    assert_eq!(titus_register(t, 0, Some(square), null_mut()), TITUS_OK);
    assert_eq!(titus_register(t, 1, Some(square), null_mut()), TITUS_OK);
    let mut dev = Device::default();
    let (kinds, speeds) = ([1 as c_int], [4.0f64]);
    let ctx = (&mut dev as *mut Device).cast::<c_void>();
    assert_eq!(
        titus_add_resource(
            t,
            c"dev".as_ptr(),
            2,
            kinds.as_ptr(),
            speeds.as_ptr(),
            1,
            Some(device_launch),
            Some(device_test),
            ctx
        ),
        TITUS_OK,
        "{}",
        last_error()
    );
    let xs: Vec<u64> = (1..=60).collect();
    for (kind, half) in [(0, &xs[..30]), (1, &xs[30..])] {
        assert_eq!(
            titus_tasks_fixed(t, kind, half.as_ptr().cast(), 8, half.len()),
            TITUS_OK
        );
    }
    assert_eq!(titus_run(t), TITUS_OK, "{}", last_error());
    let got = results(t);
    // Kind 0 on the worker; kind 1 on the device whenever it has room (fixed), else the
    // worker: each result is one or the other, and the device ran some.
    for (i, (&x, &r)) in xs.iter().zip(&got).enumerate() {
        let sq = x * x;
        if i < 30 {
            assert_eq!(r, sq, "task {i}");
        } else {
            assert!(r == sq || r == sq + 1, "task {i}: {r}");
        }
    }
    let on_device = got
        .iter()
        .zip(&xs)
        .filter(|(r, x)| **r == **x * **x + 1)
        .count();
    assert!(
        on_device > 0 && on_device as u64 == dev.launched,
        "{on_device} / {}",
        dev.launched
    );
    // A submission the device fails fails the step with TITUS_ERR_TASK, naming it.
    let bad = [0xDDDD_DDDD_DDDD_DDDDu64];
    assert_eq!(titus_tasks_fixed(t, 1, bad.as_ptr().cast(), 8, 1), TITUS_OK);
    assert_eq!(titus_run(t), TITUS_ERR_TASK);
    assert!(
        last_error().contains("\"dev\"") && last_error().contains("returned 9"),
        "{}",
        last_error()
    );
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
}

#[test]
fn bad_resources_get_invalid() {
    let mut t = init(c"workers=1");
    let (kinds, speeds) = ([1 as c_int, 70_000], [4.0f64, 1.0]);
    let add = |t, name: *const c_char, cap, nk, launch: titus_launch_fn| {
        titus_add_resource(
            t,
            name,
            cap,
            kinds.as_ptr(),
            speeds.as_ptr(),
            nk,
            launch,
            Some(device_test),
            null_mut(),
        )
    };
    type Case = (*const c_char, c_int, usize, titus_launch_fn, &'static str);
    let cases: [Case; 4] = [
        (c"d".as_ptr(), 0, 1, Some(device_launch), "capacity 0"),
        (null(), 1, 1, Some(device_launch), "name is NULL"),
        (c"d".as_ptr(), 1, 1, None, "callback is NULL"),
        (c"d".as_ptr(), 1, 2, Some(device_launch), "70000"),
    ];
    for (name, cap, nk, launch, words) in cases {
        let rc = add(t, name, cap, nk, launch);
        assert_eq!(rc, TITUS_ERR_INVALID, "{}", last_error());
        assert!(last_error().contains(words), "{}", last_error());
    }
    let bad_speed = [0.0f64];
    let rc = titus_add_resource(
        t,
        c"d".as_ptr(),
        1,
        std::ptr::null(),
        bad_speed.as_ptr(),
        0,
        Some(device_launch),
        Some(device_test),
        null_mut(),
    );
    assert_eq!(rc, TITUS_ERR_INVALID);
    assert!(last_error().contains("speed 0"), "{}", last_error());
    assert!(Options::parse("dispatch=random", None).is_err());
    assert_eq!(titus_finalize(&mut t), TITUS_OK);
}

#[test]
fn a_result_is_copied_exactly_into_the_buffer_it_is_given() {
    let words: Vec<u128> = (0..4u128)
        .map(|w| w * 0x0101_0101_0101_0101_0101_0101_0101_0101)
        .collect();
    // SAFETY: `words` holds 64 bytes.
    let all = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), 64) };
    for len in [0, 1, 15, 16, 20, 32, 63, 64] {
        // A recycled buffer: old bytes and room to spare.
        let old = vec![0xee; 100];
        let at = old.as_ptr();
        let got = crate::result_bytes(&words, len, old);
        assert_eq!(&got[..], &all[..len], "{len} bytes");
        assert_eq!(
            got.as_ptr(),
            at,
            "{len} bytes: the buffer given, not a new one"
        );
    }
}

#[test]
fn a_task_reads_its_payload_16_byte_aligned_wherever_it_lies() {
    // An aligned payload is passed where it is; one at an odd address is copied. Both
    // reach the function aligned, with the same bytes.
    let bytes: Vec<u8> = (0u8..48).collect();
    // The same 48 bytes at aligned and unaligned offsets of an aligned buffer.
    let place = |at: usize| {
        let mut v: Vec<u128> = vec![0; 8];
        // SAFETY: `v` holds 128 bytes; `at + 48` ≤ 128.
        let all = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), 128) };
        all[at..at + 48].copy_from_slice(&bytes);
        v
    };
    for at in [0usize, 16, 1, 7, 15] {
        let v = place(at);
        // SAFETY: as above.
        let all = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), 128) };
        let payload = &all[at..at + 48];
        let got = tasks::run_task(
            1,
            64,
            payload,
            Vec::with_capacity,
            |input, len, _result, _cap, result_len| {
                assert_eq!(input as usize % 16, 0, "payload at offset {at} not aligned");
                // SAFETY: `len` readable bytes at `input` (run_task's contract).
                let seen = unsafe { std::slice::from_raw_parts(input.cast::<u8>(), len) };
                assert_eq!(seen, &bytes[..], "payload at offset {at}");
                // SAFETY: a valid out-pointer.
                unsafe { *result_len = 0 };
                0
            },
        );
        assert_eq!(got, Ok(Vec::new()));
    }
}
