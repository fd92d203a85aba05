/* Bad use of titus.h gets error codes, not crashes (run by tests/capi.rs, 1 or more ranks). */
#include <stdio.h>
#include <string.h>
#include "titus.h"

static int failures = 0;
#define EXPECT(call, code)                                                                   \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != (code)) {                                                                 \
            fprintf(stderr, "FAIL %s: got %d (%s), expected %d; last error: %s\n", #call, rc_, \
                    titus_strerror(rc_), code, titus_last_error());                          \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

static int twice(const void *p, size_t len, void *r, size_t cap, size_t *rlen, void *ctx) {
    (void)ctx;
    if (len != sizeof(int) || cap < sizeof(int)) return 1;
    int v;
    memcpy(&v, p, sizeof v);
    v *= 2;
    memcpy(r, &v, sizeof v);
    *rlen = sizeof v;
    return 0;
}

/* Fails (returns 7) on the payload 13: the step fails on every rank, quietly. */
static int fails_on_13(const void *p, size_t len, void *r, size_t cap, size_t *rlen, void *ctx) {
    (void)r, (void)cap, (void)ctx;
    int v;
    if (len != sizeof v) return 1;
    memcpy(&v, p, sizeof v);
    *rlen = 0;
    return v == 13 ? 7 : 0;
}

int main(void) {
    titus_t *t = NULL;
    int rank = -1, size = -1, v = 21;
    size_t n = 0, len = 0;
    /* Calls before init. */
    EXPECT(titus_run(t), TITUS_ERR_NOT_INITIALIZED);
    EXPECT(titus_register(t, 0, twice, NULL), TITUS_ERR_NOT_INITIALIZED);
    EXPECT(titus_task(t, 0, &v, sizeof v), TITUS_ERR_NOT_INITIALIZED);
    EXPECT(titus_result_count(t, &n), TITUS_ERR_NOT_INITIALIZED);
    EXPECT(titus_rank_size(t, &rank, &size), TITUS_ERR_NOT_INITIALIZED);
    /* A bad option. */
    EXPECT(titus_init(&t, "workers=-1"), TITUS_ERR_INVALID);
    if (!strstr(titus_last_error(), "workers")) {
        fprintf(stderr, "FAIL the message does not name the option: %s\n", titus_last_error());
        failures++;
    }
    EXPECT(titus_init(&t, "cost_aware=maybe"), TITUS_ERR_INVALID);
    if (!strstr(titus_last_error(), "cost_aware")) {
        fprintf(stderr, "FAIL the message does not name the option: %s\n", titus_last_error());
        failures++;
    }
    EXPECT(titus_init(&t, "workers=1,max_result=8,cost_aware=on"), TITUS_OK);
    EXPECT(titus_rank_size(t, &rank, &size), TITUS_OK);
    /* Init twice. */
    titus_t *before = t;
    EXPECT(titus_init(&t, NULL), TITUS_ERR_ALREADY_INITIALIZED);
    if (t != before) fprintf(stderr, "FAIL the handle changed\n"), failures++;
    /* A null task function. */
    EXPECT(titus_register(t, 0, NULL, NULL), TITUS_ERR_INVALID);
    EXPECT(titus_task(t, 0, &v, sizeof v), TITUS_ERR_INVALID); /* kind 0 unregistered */
    EXPECT(titus_register(t, 0, twice, NULL), TITUS_OK);
    /* Run with no tasks anywhere (collective): every rank gets the code. */
    EXPECT(titus_run(t), TITUS_ERR_NO_TASKS);
    /* Then a real step: rank 0 owns every task. */
    if (rank == 0)
        for (int i = 0; i < 50; i++) EXPECT(titus_task(t, 0, &i, sizeof i), TITUS_OK);
    EXPECT(titus_run(t), TITUS_OK);
    EXPECT(titus_result_count(t, &n), TITUS_OK);
    if (n != (rank == 0 ? 50u : 0u)) fprintf(stderr, "FAIL %zu results\n", n), failures++;
    if (rank == 0) {
        int out[50];
        /* Result buffers too small. */
        EXPECT(titus_results_fixed(t, out, sizeof(int), 49), TITUS_ERR_BUFFER_TOO_SMALL);
        EXPECT(titus_results_fixed(t, out, 2, 50), TITUS_ERR_BUFFER_TOO_SMALL);
        EXPECT(titus_result(t, 0, out, 2, &len), TITUS_ERR_BUFFER_TOO_SMALL);
        if (len != sizeof(int)) fprintf(stderr, "FAIL size %zu\n", len), failures++;
        EXPECT(titus_results_fixed(t, out, sizeof(int), 50), TITUS_OK);
        for (int i = 0; i < 50; i++)
            if (out[i] != 2 * i) fprintf(stderr, "FAIL result %d = %d\n", i, out[i]), failures++;
        EXPECT(titus_result(t, 50, out, sizeof out, &len), TITUS_ERR_INVALID);
    }
    EXPECT(titus_results_fixed(t, NULL, sizeof(int), 0), rank == 0 ? TITUS_ERR_BUFFER_TOO_SMALL : TITUS_OK);
    /* Priorities and cost hints: a priority out of range, or a wrong count, is refused;
       then a bimodal step (every tenth task 30x costlier, run first) gives the same results. */
    {
        int m = rank == 0 ? 50 : 0, prio[50];
        uint64_t cost[50];
        for (int i = 0; i < m; i++) {
            EXPECT(titus_task(t, 0, &i, sizeof i), TITUS_OK);
            prio[i] = i % 10 == 0 ? 1 : 0;
            cost[i] = i % 10 == 0 ? 30000 : 1000;
        }
        if (rank == 0) {
            prio[7] = 40000;
            EXPECT(titus_task_hints(t, prio, cost, 50), TITUS_ERR_INVALID);
            if (!strstr(titus_last_error(), "priority 40000 of task 7")) {
                fprintf(stderr, "FAIL the message does not name the priority: %s\n", titus_last_error());
                failures++;
            }
            prio[7] = -32768;
            EXPECT(titus_task_hints(t, prio, cost, 49), TITUS_ERR_INVALID);
        }
        EXPECT(titus_task_hints(t, prio, cost, (size_t)m), TITUS_OK);
        EXPECT(titus_run(t), TITUS_OK);
        EXPECT(titus_result_count(t, &n), TITUS_OK);
        if (n != (size_t)m) fprintf(stderr, "FAIL %zu hinted results\n", n), failures++;
        if (rank == 0) {
            int out[50];
            EXPECT(titus_results_fixed(t, out, sizeof(int), 50), TITUS_OK);
            for (int i = 0; i < 50; i++)
                if (out[i] != 2 * i) fprintf(stderr, "FAIL hinted result %d = %d\n", i, out[i]), failures++;
        }
        /* Only priorities (no hints), every task the same. */
        if (rank == 0) EXPECT(titus_task(t, 0, &v, sizeof v), TITUS_OK);
        EXPECT(titus_task_hints(t, prio, NULL, rank == 0 ? 1 : 0), TITUS_OK);
        EXPECT(titus_run(t), TITUS_OK);
    }
    /* A failing task: TITUS_ERR_TASK on every rank, its cause in every rank's last error,
       nothing printed (tests/capi.rs checks stderr); the handle then finalises. */
    EXPECT(titus_register(t, 1, fails_on_13, NULL), TITUS_OK);
    if (rank == 0)
        for (int i = 0; i < 50; i++) EXPECT(titus_task(t, 1, &i, sizeof i), TITUS_OK);
    EXPECT(titus_run(t), TITUS_ERR_TASK);
    if (!strstr(titus_last_error(), "task 13 of rank 0 failed on rank ") ||
        !strstr(titus_last_error(), "the function of task kind 1 returned 7")) {
        fprintf(stderr, "FAIL the cause is not in the last error: %s\n", titus_last_error());
        failures++;
    }
    EXPECT(titus_result_count(t, &n), TITUS_OK);
    if (n != 0) fprintf(stderr, "FAIL %zu results after a failed step\n", n), failures++;
    EXPECT(titus_finalize(&t), TITUS_OK);
    /* After finalize the handle is NULL: calls fail cleanly. */
    EXPECT(titus_run(t), TITUS_ERR_NOT_INITIALIZED);
    EXPECT(titus_finalize(&t), TITUS_OK);
    printf("rank %d of %d: bad use %s\n", rank, size, failures ? "NOT HANDLED" : "handled");
    return failures ? 1 : 0;
}
