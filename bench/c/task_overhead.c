/* task_overhead: what Titus costs a time step per task, with tasks that do next to
 * nothing, through the C ABI as a solver calls it.
 *
 * Each step hands over --tasks 48-byte records (titus_tasks_fixed), their keys
 * (titus_task_keys), runs them (titus_run) and copies the 32-byte results out
 * (titus_results_fixed). A task adds two fields of its record: what is left is the
 * runtime's own work. The same loop over the records without Titus gives the baseline.
 * Prints one JSON line: the median and fastest step per task, each phase's median, and
 * the baseline, all in ns per task; within the run, the start (from the call to the first
 * task) and the time inside tasks as the workers measure it (the task and the call into
 * it). Every result is checked.
 *
 *   gcc -O2 bench/c/task_overhead.c $(pkg-config --cflags --libs titus) -o task_overhead
 *   titus launch -n 1 -- ./task_overhead --tasks 131072 --steps 30 --options workers=1
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "titus.h"

typedef struct {
    double v[6];
} record_in;

typedef struct {
    double v[4];
} record_out;

static void add_fields(const record_in *in, record_out *out) {
    for (int i = 0; i < 4; i++) out->v[i] = in->v[i] + in->v[5];
}

static int task(const void *payload, size_t payload_len, void *result, size_t capacity,
                size_t *result_len, void *ctx) {
    (void)ctx;
    if (payload_len != sizeof(record_in) || capacity < sizeof(record_out)) return 1;
    add_fields(payload, result);
    *result_len = sizeof(record_out);
    return 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[n / 2];
}

static void usage(const char *why) {
    fprintf(stderr, "task_overhead: error: %s\n", why);
    fprintf(stderr, "usage: task_overhead [--tasks N (1..16777216)] [--steps S (1..100000)] "
                    "[--options STRING]\n");
    exit(2);
}

#define CHECK(call)                                                                         \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_ != 0) {                                                                     \
            fprintf(stderr, "task_overhead: %s failed: %s (%s)\n", #call, titus_strerror(rc_), \
                    titus_last_error());                                                    \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

int main(int argc, char **argv) {
    long tasks = 131072, steps = 30;
    const char *options = "";
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage("a flag without its value");
        char *end = NULL;
        if (!strcmp(argv[i], "--tasks")) {
            tasks = strtol(argv[++i], &end, 10);
            if (*end || tasks < 1 || tasks > (1L << 24)) usage("--tasks takes 1 to 16777216");
        } else if (!strcmp(argv[i], "--steps")) {
            steps = strtol(argv[++i], &end, 10);
            if (*end || steps < 1 || steps > 100000) usage("--steps takes 1 to 100000");
        } else if (!strcmp(argv[i], "--options")) {
            options = argv[++i];
        } else {
            usage("unknown flag");
        }
    }
    size_t n = (size_t)tasks;
    record_in *in = malloc(n * sizeof *in);
    record_out *out = malloc(n * sizeof *out);
    uint64_t *keys = malloc(n * sizeof *keys);
    double *step = malloc((size_t)steps * sizeof *step), *hand = malloc((size_t)steps * sizeof *hand);
    double *run = malloc((size_t)steps * sizeof *run), *back = malloc((size_t)steps * sizeof *back);
    double *start = malloc((size_t)steps * sizeof *start), *busy = malloc((size_t)steps * sizeof *busy);
    if (!in || !out || !keys || !step || !hand || !run || !back || !start || !busy) {
        fprintf(stderr, "task_overhead: out of memory for %zu tasks\n", n);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        for (int j = 0; j < 6; j++) in[i].v[j] = (double)(i + (size_t)j);
        keys[i] = i;
    }
    /* The baseline: the same records through the same work, in place. */
    double *seq = malloc((size_t)steps * sizeof *seq);
    if (!seq) return 1;
    for (long s = 0; s < steps; s++) {
        double a = now_s();
        for (size_t i = 0; i < n; i++) add_fields(&in[i], &out[i]);
        seq[s] = now_s() - a;
    }

    titus_t *t = NULL;
    CHECK(titus_init(&t, options));
    CHECK(titus_register(t, 1, task, NULL));
    int rank = 0, size = 1;
    CHECK(titus_rank_size(t, &rank, &size));
    for (long s = 0; s < steps; s++) {
        memset(out, 0, n * sizeof *out);
        double a = now_s();
        CHECK(titus_tasks_fixed(t, 1, in, sizeof *in, n));
        CHECK(titus_task_keys(t, keys, n));
        double b = now_s();
        CHECK(titus_run(t));
        double c = now_s();
        CHECK(titus_results_fixed(t, out, sizeof *out, n));
        double d = now_s();
        step[s] = d - a;
        hand[s] = b - a;
        run[s] = c - b;
        back[s] = d - c;
        struct titus_stats st;
        CHECK(titus_stats_get(t, &st));
        start[s] = st.start_s;
        busy[s] = st.busy_s;
        for (size_t i = 0; i < n; i++) {
            if (out[i].v[0] != in[i].v[0] + in[i].v[5] || out[i].v[3] != in[i].v[3] + in[i].v[5]) {
                fprintf(stderr, "task_overhead: step %ld: task %zu's result is wrong\n", s, i);
                return 1;
            }
        }
    }
    CHECK(titus_finalize(&t));
    double per = 1e9 / (double)n;
    double fastest = step[0];
    for (long s = 1; s < steps; s++)
        if (step[s] < fastest) fastest = step[s];
    printf("{\"rank\":%d,\"ranks\":%d,\"tasks\":%zu,\"steps\":%ld,\"ns_per_task\":%.1f,"
           "\"ns_per_task_min\":%.1f,\"hand_over_ns\":%.1f,\"run_ns\":%.1f,\"results_ns\":%.1f,"
           "\"sequential_ns\":%.1f,\"start_ns\":%.1f,\"in_tasks_ns\":%.1f}\n",
           rank, size, n, steps, median(step, (int)steps) * per, fastest * per,
           median(hand, (int)steps) * per, median(run, (int)steps) * per,
           median(back, (int)steps) * per, median(seq, (int)steps) * per,
           median(start, (int)steps) * per, median(busy, (int)steps) * per);
    free(in), free(out), free(keys), free(step), free(hand), free(run), free(back), free(seq);
    free(start), free(busy);
    return 0;
}
