/* See tpmix.h. */
#include "tpmix.h"

#include <errno.h>
#include <pmix.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool initialised = false;
static pmix_proc_t me;
static uint32_t job_size = 0;

static void finalize_at_exit(void) {
    pthread_mutex_lock(&init_lock);
    if (initialised) {
        initialised = false;
        PMIx_Finalize(NULL, 0);
    }
    pthread_mutex_unlock(&init_lock);
}

int tpmix_init(char *nspace, size_t nslen, uint32_t *rank, uint32_t *size, char *err,
               size_t errlen) {
    int rc = PMIX_SUCCESS;
    pthread_mutex_lock(&init_lock);
    if (!initialised) {
        PMIX_PROC_CONSTRUCT(&me);
        rc = PMIx_Init(&me, NULL, 0);
        if (rc != PMIX_SUCCESS) {
            snprintf(err, errlen, "PMIx_Init failed: %s", PMIx_Error_string(rc));
            goto out;
        }
        pmix_proc_t wild;
        PMIX_PROC_CONSTRUCT(&wild);
        PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
        pmix_value_t *v = NULL;
        rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v);
        if (rc != PMIX_SUCCESS || v == NULL) {
            snprintf(err, errlen, "PMIx_Get(%s) failed: %s", PMIX_JOB_SIZE,
                     PMIx_Error_string(rc));
            PMIx_Finalize(NULL, 0);
            if (rc == PMIX_SUCCESS) rc = PMIX_ERROR;
            goto out;
        }
        if (v->type != PMIX_UINT32 || v->data.uint32 == 0) {
            snprintf(err, errlen, "PMIx_Get(%s) gave a value of type %d, not a positive uint32",
                     PMIX_JOB_SIZE, (int)v->type);
            PMIX_VALUE_RELEASE(v);
            PMIx_Finalize(NULL, 0);
            rc = PMIX_ERR_BAD_PARAM;
            goto out;
        }
        job_size = v->data.uint32;
        PMIX_VALUE_RELEASE(v);
        static bool registered = false;
        if (!registered) {
            registered = true;
            atexit(finalize_at_exit);
        }
        initialised = true;
    }
    snprintf(nspace, nslen, "%s", me.nspace);
    *rank = me.rank;
    *size = job_size;
out:
    pthread_mutex_unlock(&init_lock);
    return rc;
}

int tpmix_put(const char *key, const void *data, size_t len) {
    pmix_value_t val;
    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_BYTE_OBJECT;
    /* PMIx_Put copies the value; it does not write through the pointer. */
    val.data.bo.bytes = (char *)data;
    val.data.bo.size = len;
    int rc = PMIx_Put(PMIX_GLOBAL, key, &val);
    if (rc != PMIX_SUCCESS) return rc;
    return PMIx_Commit();
}

/* One non-blocking call in flight: the waiter and the callback each hold a reference, so
 * a waiter that gives up (its bound ran out) leaves the memory to a late callback. */
struct op {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int refs;
    bool done;
    int status;
    pmix_info_t info[2];
    size_t ninfo;
    size_t max_len;
    void *data;
    size_t len;
    int type;
};

static struct op *op_new(void) {
    struct op *o = calloc(1, sizeof *o);
    if (o == NULL) return NULL;
    pthread_mutex_init(&o->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cv, &attr);
    pthread_condattr_destroy(&attr);
    o->refs = 2;
    return o;
}

/* Drops one reference (the caller holds the lock, which this releases). */
static void op_release_locked(struct op *o) {
    int left = --o->refs;
    pthread_mutex_unlock(&o->lock);
    if (left == 0) {
        for (size_t i = 0; i < o->ninfo; i++) PMIX_INFO_DESTRUCT(&o->info[i]);
        free(o->data);
        pthread_cond_destroy(&o->cv);
        pthread_mutex_destroy(&o->lock);
        free(o);
    }
}

/* Waits for the callback at most wait_ms; returns its status or TPMIX_LOCAL_TIMEOUT.
 * Drops the waiter's reference unless keep is set (the caller then reads the result and
 * releases it). */
static int op_wait(struct op *o, int64_t wait_ms) {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (wait_ms < 0) wait_ms = 0;
    deadline.tv_sec += wait_ms / 1000;
    deadline.tv_nsec += (wait_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&o->lock);
    while (!o->done) {
        if (pthread_cond_timedwait(&o->cv, &o->lock, &deadline) == ETIMEDOUT && !o->done) {
            return TPMIX_LOCAL_TIMEOUT; /* still locked */
        }
    }
    return o->status; /* still locked */
}

static void op_complete_locked(struct op *o, int status) {
    o->status = status;
    o->done = true;
    pthread_cond_broadcast(&o->cv);
    op_release_locked(o);
}

static void fence_cb(pmix_status_t status, void *cbdata) {
    struct op *o = cbdata;
    pthread_mutex_lock(&o->lock);
    op_complete_locked(o, status);
}

static void load_timeout(struct op *o, int timeout_s) {
    if (timeout_s > 0) {
        PMIX_INFO_LOAD(&o->info[o->ninfo], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
        o->ninfo++;
    }
}

int tpmix_fence(int collect, int timeout_s, int64_t wait_ms) {
    struct op *o = op_new();
    if (o == NULL) return PMIX_ERR_NOMEM;
    if (collect) {
        bool t = true;
        PMIX_INFO_LOAD(&o->info[o->ninfo], PMIX_COLLECT_DATA, &t, PMIX_BOOL);
        o->ninfo++;
    }
    load_timeout(o, timeout_s);
    pmix_proc_t wild;
    PMIX_PROC_CONSTRUCT(&wild);
    pthread_mutex_lock(&init_lock);
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    pthread_mutex_unlock(&init_lock);
    int rc = PMIx_Fence_nb(&wild, 1, o->info, o->ninfo, fence_cb, o);
    if (rc != PMIX_SUCCESS) {
        /* No callback will come: drop both references. */
        pthread_mutex_lock(&o->lock);
        o->refs = 1;
        op_release_locked(o);
        return rc == PMIX_OPERATION_SUCCEEDED ? PMIX_SUCCESS : rc;
    }
    rc = op_wait(o, wait_ms);
    op_release_locked(o);
    return rc;
}

static void get_cb(pmix_status_t status, pmix_value_t *kv, void *cbdata) {
    struct op *o = cbdata;
    pthread_mutex_lock(&o->lock);
    if (status == PMIX_SUCCESS && kv != NULL) {
        o->type = kv->type;
        if (kv->type == PMIX_BYTE_OBJECT) {
            size_t n = kv->data.bo.size;
            o->len = n;
            if (n > 0 && n <= o->max_len && kv->data.bo.bytes != NULL) {
                o->data = malloc(n);
                if (o->data == NULL) {
                    status = PMIX_ERR_NOMEM;
                } else {
                    memcpy(o->data, kv->data.bo.bytes, n);
                }
            }
        }
    } else if (status == PMIX_SUCCESS) {
        status = PMIX_ERR_NOT_FOUND;
    }
    /* kv belongs to the library, which releases it after the callback returns. */
    op_complete_locked(o, status);
}

int tpmix_get(uint32_t rank, const char *key, int timeout_s, int64_t wait_ms, size_t max_len,
              void **data, size_t *len, int *type) {
    *data = NULL;
    *len = 0;
    *type = 0;
    struct op *o = op_new();
    if (o == NULL) return PMIX_ERR_NOMEM;
    o->max_len = max_len;
    load_timeout(o, timeout_s);
    pmix_proc_t p;
    PMIX_PROC_CONSTRUCT(&p);
    pthread_mutex_lock(&init_lock);
    PMIX_LOAD_PROCID(&p, me.nspace, rank);
    pthread_mutex_unlock(&init_lock);
    int rc = PMIx_Get_nb(&p, key, o->info, o->ninfo, get_cb, o);
    if (rc != PMIX_SUCCESS) {
        pthread_mutex_lock(&o->lock);
        o->refs = 1;
        op_release_locked(o);
        return rc == PMIX_OPERATION_SUCCEEDED ? PMIX_ERR_NOT_FOUND : rc;
    }
    rc = op_wait(o, wait_ms);
    if (rc == PMIX_SUCCESS) {
        *data = o->data;
        o->data = NULL;
        *len = o->len;
        *type = o->type;
    }
    op_release_locked(o);
    return rc;
}

const char *tpmix_strerror(int status) {
    if (status == TPMIX_LOCAL_TIMEOUT) return "no answer from the PMIx server";
    return PMIx_Error_string(status);
}

void tpmix_free(void *p) { free(p); }

int tpmix_status_not_found(void) { return PMIX_ERR_NOT_FOUND; }
int tpmix_status_timeout(void) { return PMIX_ERR_TIMEOUT; }
