/* Titus's C shim over libpmix: the few client calls the bootstrap needs, each bounded in
 * time. Every function returns a PMIx status (0 is PMIX_SUCCESS, negative is an error),
 * or TPMIX_LOCAL_TIMEOUT when the shim's own bound on a wait ran out first.
 *
 * Rules for callers:
 * - tpmix_init first; it may be called again (the same process identity comes back) and
 *   is thread-safe. The shim finalizes PMIx once, at process exit (atexit): a launcher
 *   treats a process that initialised PMIx and exits without finalizing as failed.
 * - keys are NUL-terminated and shorter than PMIX_MAX_KEYLEN (511 bytes);
 * - a buffer tpmix_get returns is released with tpmix_free. */
#ifndef TPMIX_H
#define TPMIX_H

#include <stddef.h>
#include <stdint.h>

/* The shim's own wait ran out (the PMIx server never answered). */
#define TPMIX_LOCAL_TIMEOUT (-100000)

/* Initialises the PMIx client (once per process). nspace receives the job's namespace
 * (NUL-terminated, truncated to nslen), rank and size this process's rank and the job's
 * size (PMIX_JOB_SIZE). On error, err receives a message. */
int tpmix_init(char *nspace, size_t nslen, uint32_t *rank, uint32_t *size, char *err,
               size_t errlen);

/* PMIx_Put of data (a byte object, len > 0) under key, global scope, then PMIx_Commit. */
int tpmix_put(const char *key, const void *data, size_t len);

/* PMIx_Fence over the whole namespace, with data collection when collect is not 0, with
 * PMIX_TIMEOUT timeout_s on the server and at most wait_ms of waiting here. */
int tpmix_fence(int collect, int timeout_s, int64_t wait_ms);

/* PMIx_Get of key as published by rank, with PMIX_TIMEOUT timeout_s and at most wait_ms
 * of waiting here. On success *data (malloc'd, release with tpmix_free) and *len hold the
 * value when it is a byte object of at most max_len bytes; *type receives its PMIx type
 * either way. A value of another type, or a longer one, comes back as no data (*data
 * NULL) with status 0, *len then holding the byte object's length: the caller rejects it. */
int tpmix_get(uint32_t rank, const char *key, int timeout_s, int64_t wait_ms, size_t max_len,
              void **data, size_t *len, int *type);

/* PMIx's text for a status (the shim's own for TPMIX_LOCAL_TIMEOUT). */
const char *tpmix_strerror(int status);

/* Releases a buffer tpmix_get returned. */
void tpmix_free(void *p);

/* PMIx status codes the caller tells apart. */
int tpmix_status_not_found(void);
int tpmix_status_timeout(void);

#endif
