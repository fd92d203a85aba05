/* A resource from C (run by tests/capi.rs, 1 or more ranks): a "device" queue driven by
 * titus_add_resource's launch and test callbacks, finishing each task a few tests after its
 * launch, out of order. Every rank hands over tasks of kinds 0 (CPU only) and 1 (CPU or
 * device); each result says where it ran; the program checks every result and prints how
 * many ran on its device. The device's kinds are a resource type (option resource_types):
 * it asks other ranks for kind-1 work when it has room and none is queued. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "titus.h"

#define QUEUE 8

struct device {
    uint64_t handle[QUEUE];
    int64_t value[QUEUE];
    int age[QUEUE];
    int used;
    uint64_t next;
    long launched;
};

static int cpu_square(const void *p, size_t len, void *r, size_t cap, size_t *rlen, void *ctx) {
    (void)ctx;
    if (len != sizeof(int64_t) || cap < sizeof(int64_t)) return 1;
    int64_t v;
    memcpy(&v, p, sizeof v);
    v = 2 * (v * v); /* even: the CPU's */
    memcpy(r, &v, sizeof v);
    *rlen = sizeof v;
    return 0;
}

static int launch(int kind, const void *payload, size_t len, uint64_t *handle, void *ctx) {
    struct device *d = ctx;
    if (kind != 1 || len != sizeof(int64_t) || d->used == QUEUE) return 5;
    int i = d->used++;
    memcpy(&d->value[i], payload, sizeof(int64_t));
    d->handle[i] = ++d->next;
    d->age[i] = 0;
    d->launched++;
    *handle = d->handle[i];
    return 0;
}

/* Finishes the newest task that has waited two tests (out of launch order). */
static int test(uint64_t *handle, void *result, size_t cap, size_t *rlen, int *done, void *ctx) {
    struct device *d = ctx;
    *done = 0;
    for (int i = d->used - 1; i >= 0; i--) {
        if (d->age[i]++ < 2) continue;
        int64_t v = 2 * (d->value[i] * d->value[i]) + 1; /* odd: the device's */
        if (cap < sizeof v) return 6;
        memcpy(result, &v, sizeof v);
        *rlen = sizeof v;
        *handle = d->handle[i];
        *done = 1;
        d->used--;
        d->handle[i] = d->handle[d->used];
        d->value[i] = d->value[d->used];
        d->age[i] = d->age[d->used];
        return 0;
    }
    return 0;
}

int main(void) {
    titus_t *t = NULL;
    struct device dev;
    memset(&dev, 0, sizeof dev);
    int rank = 0, size = 1;
    if (titus_init(&t, "workers=1,dispatch=fixed,max_payload=8,max_result=8,resource_types=all/1") != TITUS_OK) goto fail;
    if (titus_rank_size(t, &rank, &size) != TITUS_OK) goto fail;
    if (titus_register(t, 0, cpu_square, NULL) != TITUS_OK) goto fail;
    if (titus_register(t, 1, cpu_square, NULL) != TITUS_OK) goto fail;
    const int kinds[1] = {1};
    const double speeds[1] = {4.0};
    if (titus_add_resource(t, "device", 4, kinds, speeds, 1, launch, test, &dev) != TITUS_OK) goto fail;
    enum { N = 400 };
    int64_t x[N];
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < N; i++) x[i] = rank * 1000 + i + step;
        if (titus_tasks_fixed(t, 0, x, sizeof x[0], N / 2) != TITUS_OK) goto fail;
        if (titus_tasks_fixed(t, 1, x + N / 2, sizeof x[0], N / 2) != TITUS_OK) goto fail;
        if (titus_run(t) != TITUS_OK) goto fail;
        int64_t r[N];
        size_t n = 0;
        if (titus_result_count(t, &n) != TITUS_OK || n != N) goto fail;
        if (titus_results_fixed(t, r, sizeof r[0], N) != TITUS_OK) goto fail;
        for (int i = 0; i < N; i++) {
            int64_t cpu = 2 * (x[i] * x[i]);
            /* Kind 0 only on a CPU; kind 1 on a CPU or a device (its own or a thief's). */
            if (r[i] != cpu && !(i >= N / 2 && r[i] == cpu + 1)) {
                fprintf(stderr, "rank %d step %d task %d: %lld\n", rank, step, i, (long long)r[i]);
                return 1;
            }
        }
    }
    printf("rank %d of %d: resource results right, %ld on its device\n", rank, size, dev.launched);
    if (titus_finalize(&t) != TITUS_OK) goto fail;
    return 0;
fail:
    fprintf(stderr, "rank %d: %s\n", rank, titus_last_error());
    return 1;
}
