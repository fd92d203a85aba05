/* Titus's C shim over libfabric: a small, fixed C ABI for the Rust backend.
 *
 * libfabric's data-path calls are static inline functions over provider ops tables, and
 * its structs change between versions; this file is compiled against the installed
 * headers, so the Rust side only sees the functions below and opaque handles. */
#ifndef TITUS_TOFI_H
#define TITUS_TOFI_H
#include <stddef.h>
#include <stdint.h>

typedef struct tofi tofi;

/* Event kinds returned by tofi_poll. */
#define TOFI_DONE 0   /* operation `opid` completed; `value` is an atomic's old value */
#define TOFI_ERROR 1  /* operation `opid` failed with libfabric error `err` (positive) */
#define TOFI_SIGNAL 2 /* a signal arrived: `from`, `value` */

typedef struct tofi_event {
    uint64_t opid;
    uint64_t value;
    uint64_t from;
    int32_t kind;
    int32_t err;
} tofi_event;

/* Capability bits of tofi_caps. */
#define TOFI_CAP_VIRT_ADDR 1u
#define TOFI_CAP_PROV_KEY 2u
#define TOFI_CAP_MR_ENDPOINT 4u
#define TOFI_CAP_MR_LOCAL 8u
#define TOFI_CAP_MANUAL_PROGRESS 16u
#define TOFI_CAP_ORDERED_SAW 32u
#define TOFI_CAP_CQ_WAIT 64u
#define TOFI_CAP_LOOPBACK 128u /* opened on an address other hosts cannot reach */

/* Signals whose handler belongs to a library libfabric loads for its psm providers
 * (libinfinipath, libpsm): bit (1 << signal). The shim restores the default disposition of
 * those handlers when it is loaded and after every fi_getinfo (see tofi.c), so this is 0
 * unless something reinstalled them since. */
uint64_t tofi_foreign_crash_handlers(void);

/* Lists providers offering RDM endpoints with RMA and 64-bit atomics, ';'-separated
 * names of the form "tcp;ofi_rxm", into buf. Returns 0 or a negative libfabric error. */
int tofi_providers(char *buf, size_t len);

/* Opens provider `prov` on interface (domain) `iface` (NULL or "": the first other hosts
 * can reach, else the first) with `nsegs` segments to register, `nslots` operation slots
 * and `nrecv` signal receive buffers. On failure returns a negative error and a message. */
int tofi_open(const char *prov, const char *iface, size_t nsegs, void *const *bases, const uint64_t *lens,
              size_t nslots, size_t nrecv, tofi **out, char *err, size_t errlen);
void tofi_close(tofi *h);
const char *tofi_provider(const tofi *h);
uint32_t tofi_caps(const tofi *h);
/* How far an IP socket address reaches: 0 this host, 1 its link (169.254/16), 2 routable. */
int tofi_addr_reach(const void *addr, size_t len);
size_t tofi_iov_limit(const tofi *h);
int tofi_getname(tofi *h, void *buf, size_t *len);
/* Key and base address peers use for segment `seg`. */
void tofi_segment(const tofi *h, size_t seg, uint64_t *key, uint64_t *base);
/* Inserts one peer address; returns 0 and its fi_addr. */
int tofi_av_insert(tofi *h, const void *addr, uint64_t *fi_addr);

/* Data path. `slot` (below nslots) holds the operation's context and temporaries until
 * its completion; the caller owns slot allocation. Returns 0 or a negative error
 * (-FI_EAGAIN: queue full, poll and retry). */
int tofi_read(tofi *h, uint32_t slot, uint64_t opid, uint64_t peer, size_t lseg, uint64_t loff, uint64_t len,
              uint64_t raddr, uint64_t rkey);
int tofi_writev(tofi *h, uint32_t slot, uint64_t opid, uint64_t peer, size_t n, const size_t *lsegs,
                const uint64_t *loffs, const uint64_t *lens, uint64_t raddr, uint64_t rkey, int delivery_complete);
int tofi_cas(tofi *h, uint32_t slot, uint64_t opid, uint64_t peer, uint64_t raddr, uint64_t rkey, uint64_t expected,
             uint64_t desired);
int tofi_fadd(tofi *h, uint32_t slot, uint64_t opid, uint64_t peer, uint64_t raddr, uint64_t rkey, uint64_t delta);
int tofi_signal(tofi *h, uint32_t slot, uint64_t opid, uint64_t peer, uint64_t from, uint64_t value);

/* Reads up to n events; timeout_ms 0 polls, > 0 blocks in the completion queue up to that
 * long. Returns the number of events or a negative error. */
int tofi_poll(tofi *h, tofi_event *ev, size_t n, int timeout_ms);
const char *tofi_strerror(int err);
/* Makes a blocked tofi_poll return (fi_cq_signal, or a flag checked between naps). */
void tofi_wake(tofi *h);
/* Longest nap between polls of an idle poller on providers whose CQ cannot block. */
void tofi_set_max_nap(tofi *h, uint64_t ns);

/* Raw libfabric latency loop for the benchmark: `iters` operations of `kind`
 * (0 CAS, 1 fetch-add, 2 read, 3 write) to `peer`, each posted and then polled to
 * completion by spinning on fi_cq_read, nanoseconds per operation into ns. */
int tofi_raw_latency(tofi *h, int kind, uint64_t peer, size_t lseg, uint64_t len, uint64_t raddr, uint64_t rkey,
                     size_t iters, uint64_t *ns);
#endif
