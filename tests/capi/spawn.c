/* Tasks that spawn tasks from C (run by tests/capi.rs, 1 or more ranks). Every rank hands
 * over two roots of a random tree; a task spawns its node's children with titus_spawn and
 * returns (1, its depth) as the reduction's lanes (option spawn=sum+max). The program
 * counts every rank's trees itself and checks the job's reduction (titus_reduced) and its
 * own roots' results against them. Half the levels hand their children over at once
 * (titus_hand_over). It also checks that titus_spawn outside a task, and with the handle
 * of a task that returned, is TITUS_ERR_INVALID.
 *
 * With the argument `home` (option spawn=home), a task spawns each child under its seed
 * (titus_spawn_keyed) and returns its own node: every rank checks that the results of
 * exactly the nodes below its own roots came home, each once, under its key
 * (titus_spawned_count, titus_spawned_result).
 *
 * With the argument `custom` (option spawn=custom:2), the same reduction is the job's own
 * combine, given by titus_set_combine. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "titus.h"

struct node {
    uint64_t seed;
    uint32_t depth;
    uint32_t pad;
};

static uint64_t mix(uint64_t x) {
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

static unsigned children(const struct node *n) {
    return n->depth >= 8 ? 0 : (unsigned)(mix(n->seed) % 4);
}

static struct node child(const struct node *n, unsigned i) {
    struct node c = {mix(n->seed ^ ((uint64_t)(i + 1) * 0xa24baed4963ee407ull)), n->depth + 1, 0};
    return c;
}

/* Nodes below n (n included) and their greatest depth. */
static void count(const struct node *n, uint64_t *nodes, uint64_t *depth) {
    *nodes += 1;
    if (n->depth > *depth) *depth = n->depth;
    for (unsigned i = 0; i < children(n); i++) {
        struct node c = child(n, i);
        count(&c, nodes, depth);
    }
}

/* Appends the seeds of the nodes below n to (*seeds, *len), growing it. */
static void below(const struct node *n, uint64_t **seeds, size_t *len, size_t *cap) {
    for (unsigned i = 0; i < children(n); i++) {
        struct node c = child(n, i);
        if (*len == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            *seeds = realloc(*seeds, *cap * sizeof **seeds);
            if (!*seeds) abort();
        }
        (*seeds)[(*len)++] = c.seed;
        below(&c, seeds, len, cap);
    }
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The handle of the last task that ran on some thread: stale once it returned. */
static titus_task_t *volatile last_task;

static int expand(titus_task_t *task, const void *p, size_t len, void *r, size_t cap,
                  size_t *rlen, void *ctx) {
    (void)ctx;
    struct node n;
    if (len != sizeof n || cap < 16) return 1;
    memcpy(&n, p, sizeof n);
    for (unsigned i = 0; i < children(&n); i++) {
        struct node c = child(&n, i);
        if (titus_spawn(task, 0, &c, sizeof c) != TITUS_OK) return 2;
        /* Half the levels hand their children over while the task goes on. */
        if (n.depth % 2 == 0 && titus_hand_over(task) != TITUS_OK) return 3;
    }
    last_task = task;
    uint64_t lanes[2] = {1, n.depth};
    memcpy(r, lanes, sizeof lanes);
    *rlen = sizeof lanes;
    return 0;
}

/* spawn=home: children under their seeds; the result is the node itself. */
static int expand_home(titus_task_t *task, const void *p, size_t len, void *r, size_t cap,
                       size_t *rlen, void *ctx) {
    (void)ctx;
    struct node n;
    if (len != sizeof n || cap < sizeof n) return 1;
    memcpy(&n, p, sizeof n);
    for (unsigned i = 0; i < children(&n); i++) {
        struct node c = child(&n, i);
        if (titus_spawn_keyed(task, c.seed, 0, &c, sizeof c) != TITUS_OK) return 2;
        if (n.depth % 2 == 1 && titus_hand_over(task) != TITUS_OK) return 3;
    }
    memcpy(r, &n, sizeof n);
    *rlen = sizeof n;
    return 0;
}

/* spawn=custom:2: (sum, max), as the built-in lanes would combine. */
static void sum_max(uint64_t *acc, const uint64_t *value, size_t lanes, void *ctx) {
    if (lanes != 2 || ctx != (void *)&last_task) abort();
    acc[0] += value[0];
    if (value[1] > acc[1]) acc[1] = value[1];
}

static struct node root(int rank, int i) {
    struct node n = {mix(((uint64_t)rank << 20) | (uint64_t)i | 0x5eed0000000000ull), 0, 0};
    return n;
}

/* spawn=home: two steps; each rank checks what came home against its own trees. */
static int run_home(void) {
    titus_t *t = NULL;
    if (titus_init(&t, "workers=2 spawn=home") != TITUS_OK) {
        fprintf(stderr, "init: %s\n", titus_last_error());
        return 1;
    }
    int rank = 0, size = 1;
    titus_rank_size(t, &rank, &size);
    if (titus_register_spawning(t, 0, expand_home, NULL) != TITUS_OK) return 1;
    for (int step = 0; step < 2; step++) {
        uint64_t *want = NULL;
        size_t n_want = 0, cap = 0;
        for (int i = 0; i < 2; i++) {
            struct node n = root(rank + 100 * step, i);
            below(&n, &want, &n_want, &cap);
            if (titus_task(t, 0, &n, sizeof n) != TITUS_OK) return 1;
        }
        if (titus_run(t) != TITUS_OK) {
            fprintf(stderr, "rank %d: run: %s\n", rank, titus_last_error());
            return 1;
        }
        if (n_want) qsort(want, n_want, sizeof *want, by_value);
        size_t count = 0;
        if (titus_spawned_count(t, &count) != TITUS_OK) return 1;
        if (count != n_want) {
            fprintf(stderr, "rank %d step %d: %zu spawned results home, %zu below its roots\n",
                    rank, step, count, n_want);
            return 1;
        }
        for (size_t i = 0; i < count; i++) {
            struct node got;
            uint64_t key = 0;
            size_t len = 0;
            if (titus_spawned_result(t, i, &key, &got, sizeof got, &len) != TITUS_OK ||
                len != sizeof got) {
                return 1;
            }
            /* In key order, each once, and the result of the task of that key. */
            if (key != want[i] || got.seed != key) {
                fprintf(stderr, "rank %d step %d: result %zu has key %llu, expected %llu\n", rank,
                        step, i, (unsigned long long)key, (unsigned long long)want[i]);
                return 1;
            }
        }
        uint64_t key;
        size_t len;
        if (titus_spawned_result(t, count, &key, NULL, 0, &len) != TITUS_ERR_INVALID) return 1;
        free(want);
        if (rank == 0) fprintf(stderr, "step %d: %zu spawned results home\n", step, count);
    }
    printf("rank %d of %d: spawned results home right\n", rank, size);
    return titus_finalize(&t) == TITUS_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "home") == 0) return run_home();
    int custom = argc > 1 && strcmp(argv[1], "custom") == 0;
    titus_t *t = NULL;
    int rc = titus_init(&t, custom ? "workers=2 spawn=custom:2" : "workers=2 spawn=sum+max");
    if (rc != TITUS_OK) {
        fprintf(stderr, "init: %s\n", titus_last_error());
        return 1;
    }
    int rank = 0, size = 1;
    titus_rank_size(t, &rank, &size);
    uint64_t identity[2] = {0, 0};
    if (custom && titus_set_combine(t, identity, 2, sum_max, (void *)&last_task) != TITUS_OK) {
        fprintf(stderr, "rank %d: set_combine: %s\n", rank, titus_last_error());
        return 1;
    }
    /* Another number of lanes, or a job without custom lanes, is refused. */
    if (titus_set_combine(t, identity, 1, sum_max, NULL) != TITUS_ERR_INVALID) {
        fprintf(stderr, "rank %d: a combine of the wrong shape was not refused\n", rank);
        return 1;
    }
    if (titus_register_spawning(t, 0, expand, NULL) != TITUS_OK) return 1;
    struct node none = {0, 0, 0};
    if (titus_spawn(NULL, 0, &none, sizeof none) != TITUS_ERR_INVALID ||
        titus_hand_over(NULL) != TITUS_ERR_INVALID) {
        fprintf(stderr, "rank %d: titus_spawn outside a task was not refused\n", rank);
        return 1;
    }
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < 2; i++) {
            struct node n = root(rank + 100 * step, i);
            if (titus_task(t, 0, &n, sizeof n) != TITUS_OK) return 1;
        }
        if (titus_run(t) != TITUS_OK) {
            fprintf(stderr, "rank %d: run: %s\n", rank, titus_last_error());
            return 1;
        }
        uint64_t spawned = 0, depth = 0;
        for (int r = 0; r < size; r++) {
            for (int i = 0; i < 2; i++) {
                struct node n = root(r + 100 * step, i);
                uint64_t nodes = 0;
                count(&n, &nodes, &depth);
                spawned += nodes - 1;
            }
        }
        uint64_t got[2] = {0, 0};
        size_t lanes = 0;
        if (titus_reduced(t, got, 2, &lanes) != TITUS_OK || lanes != 2) return 1;
        if (got[0] != spawned || got[1] != depth) {
            fprintf(stderr, "rank %d step %d: reduced (%llu, %llu), counted (%llu, %llu)\n", rank,
                    step, (unsigned long long)got[0], (unsigned long long)got[1],
                    (unsigned long long)spawned, (unsigned long long)depth);
            return 1;
        }
        uint64_t mine[2][2];
        if (titus_results_fixed(t, mine, sizeof mine[0], 2) != TITUS_OK) return 1;
        if (mine[0][0] != 1 || mine[1][0] != 1) return 1;
        if (titus_spawn(last_task, 0, &none, sizeof none) != TITUS_ERR_INVALID) {
            fprintf(stderr, "rank %d: a stale task handle was not refused\n", rank);
            return 1;
        }
        if (rank == 0) fprintf(stderr, "step %d: %llu spawned\n", step, (unsigned long long)spawned);
    }
    printf("rank %d of %d: spawned trees right%s\n", rank, size, custom ? " (custom combine)" : "");
    return titus_finalize(&t) == TITUS_OK ? 0 : 1;
}
