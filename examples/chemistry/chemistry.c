/*
 * chemistry.c: a small stand-in for a combustion code, against titus.h.
 *
 * A 2-D grid of nx × ny cells is split in slabs along x across ranks. A flame front (a
 * band of hot gas) crosses the grid along x, one step after the other. Every cell carries
 * a stiff reaction system — the Oregonator (Field & Noyes 1974; Hairer & Wanner's stiff
 * test problem) with Arrhenius temperature dependence, rates × exp(Ta (1/Tb − 1/T)) — and
 * each time step integrates it over dt with an L-stable, adaptive-step, linearly
 * implicit solver (ROS2, Verwer et al. 1999). Cold cells barely react and take a step or
 * two; cells in the front oscillate and take hundreds: 10–100× the cost, on whichever
 * rank holds the front this step.
 *
 * Each time step: cells → tasks (fixed 48-byte records) → titus_run → results (32-byte
 * records) → update. The time loop runs three times: sequentially with no Titus (the
 * reference), through Titus with balancer=none (no balancing), and through Titus with
 * the chosen options (stealing by default; TITUS_OPTIONS, applied last, affects both Titus
 * runs, so leave `balancer` out of it). Every rank checks that both Titus runs give
 * exactly the reference's cell states; rank 0 prints the time per step of each.
 *
 * Figures (table and --json), for each Titus run:
 *   efficiency          TITUS's: Σ task time / Σ (step time × workers), summed over steps
 *                       and ranks (`efficiency_none`, `efficiency_titus`). It rises when
 *                       balancing slows the tasks themselves, so it can flatter a run.
 *   nominal efficiency  T_seq / (W × T), where T_seq is the calibrated cost of every cell of
 *                       every step: the sequential reference's time, summed over the ranks'
 *                       slabs (each rank times its own slab on one core, with no Titus,
 *                       while the other ranks wait: one rank after the other; per step
 *                       the median of --ref-passes passes, 3 by default);
 *                       W the run's worker threads summed over ranks (a core each: one per
 *                       rank where ranks fill the cores, more where a rank has a node or a
 *                       socket to itself); T the run's wall time (Σ over steps of
 *                       hand-over + titus_run + results on rank 0). Each rank states its
 *                       slab's calibrated cost per step with titus_nominal_work, and the
 *                       job stats' nominal_s gives the sum. Ideal: 1; it cannot be
 *                       flattered (`nominal_efficiency`, `nominal_efficiency_none`).
 *   speed-up            T_none / T_titus (`speedup`).
 *   workers             the job's worker threads in the Titus run, summed over ranks.
 *
 * --repeat R (default 1) runs the three R times, back to back (the order of the two Titus
 * runs alternating), and reports each figure's median over the repeats (the JSON adds
 * `repeat`, `nominal_efficiency_min`/`_max` and the per-repeat `nominal_efficiency_runs`
 * and `speedup_runs`): each repeat's ratios compare runs close in time, on a machine whose
 * speed drifts by ±8% between runs.
 *
 * Build: cc -O2 chemistry.c $(pkg-config --cflags --libs titus) -lm
 *        mpicc -O2 -DTITUS_WITH_MPI chemistry.c $(pkg-config --cflags --libs titus) -lm
 * Run:   titus launch -n 2 -- ./chemistry        mpirun -n 2 ./chemistry-mpi
 *
 * With a CUDA GPU (gpu.cu: the cells below --gpu-below K, 1150 by default, also run on
 * the GPU, a Titus resource of capacity --gpu CAP beside the workers; build and run as
 * gpu.cu says). Without -DTITUS_WITH_CUDA, --gpu and --gpu-below exit 2.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#include "titus.h"
#include "cell.h"
#ifdef TITUS_WITH_MPI
#include "titus_mpi.h"
#endif
#ifdef TITUS_WITH_CUDA
/* gpu.cu: the cells on a CUDA GPU, a resource beside the CPU workers. */
int chem_gpu_add(titus_t *t, int rank, int capacity, double speed);
void chem_gpu_counts(unsigned long long *batches, unsigned long long *cells);
#endif

/* The task function Titus runs (on any rank's worker threads: no shared state). */
static int cell_task(const void *payload, size_t len, void *result, size_t cap, size_t *result_len,
                     void *ctx) {
    (void)ctx;
    if (len != sizeof(cell_in) || cap < sizeof(cell_out)) return 1;
    const cell_in *in = payload;
    cell_out *out = result;
    double y[3] = {in->y[0], in->y[1], in->y[2]};
    int steps = cell_integrate(y, cell_rate(in->T), in->dt);
    memcpy(out->y, y, sizeof y);
    out->steps = steps;
    *result_len = sizeof(cell_out);
    return 0;
}

/* The flame front: a hot band along y, wrinkled, at x = xf. */
static double temperature(int x, int y, int ny, double xf) {
    double d = (x - xf - 2.0 * sin(2.0 * M_PI * y / ny)) / 2.0;
    return CELL_T_COLD + (CELL_T_HOT - CELL_T_COLD) * exp(-d * d);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

typedef struct {
    int nx, ny, steps, x0, x1;
    double dt;
} grid;

static double front(const grid *g, int step) {
    return g->nx * (0.1 + 0.8 * step / (g->steps > 1 ? g->steps - 1 : 1));
}

static void initial(const grid *g, double *state) {
    for (int c = 0; c < (g->x1 - g->x0) * g->ny; c++) {
        state[3 * c] = 1.0;
        state[3 * c + 1] = 2.0;
        state[3 * c + 2] = 3.0;
    }
}

static void inputs(const grid *g, int step, const double *state, cell_in *in) {
    double xf = front(g, step);
    int c = 0;
    for (int x = g->x0; x < g->x1; x++)
        for (int y = 0; y < g->ny; y++, c++) {
            memcpy(in[c].y, state + 3 * c, 3 * sizeof(double));
            in[c].T = temperature(x, y, g->ny, xf);
            in[c].dt = g->dt;
            in[c].pad = 0.0;
        }
}

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ != TITUS_OK) {                                                             \
            fprintf(stderr, "chemistry: %s failed: %s (%s)\n", #call, titus_strerror(rc_), \
                    titus_last_error());                                                   \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

/* One pass of the time loop through Titus; fills per-step times, the job's efficiency and
 * its nominal work (Σ over steps and ranks of the calibrated costs `t_seq` stated). */
static int verbose = 0;
#ifdef TITUS_WITH_CUDA
static int gpu_capacity = 0; /* --gpu CAP: 0, none */
#endif
static double gpu_below = 1150.0; /* --gpu-below K (with a GPU) */

static void run_titus(const grid *g, const char *options, double *state, const double *t_seq,
                      double *times, double *eff, double *nominal, long *workers,
                      long *solver_steps, int *rank_out, int *size_out) {
    titus_t *t = NULL;
#ifdef TITUS_WITH_MPI
    CHECK(titus_init_mpi(&t, MPI_COMM_WORLD, options));
#else
    CHECK(titus_init(&t, options));
#endif
    CHECK(titus_register(t, KIND_CELL, cell_task, NULL));
    CHECK(titus_register(t, KIND_COOL, cell_task, NULL));
    CHECK(titus_rank_size(t, rank_out, size_out));
#ifdef TITUS_WITH_CUDA
    if (gpu_capacity > 0 && chem_gpu_add(t, *rank_out, gpu_capacity, 1.0)) exit(2);
#endif
    int n = (g->x1 - g->x0) * g->ny;
    cell_in *in = malloc(sizeof(cell_in) * (n ? n : 1));
    cell_out *out = malloc(sizeof(cell_out) * (n ? n : 1));
    /* A cell's key is its global index: the same every step, so its measured cost there
     * predicts its cost at the next step (Titus moves work before stealing from it). */
    uint64_t *keys = malloc(sizeof(uint64_t) * (n ? n : 1));
    uint64_t *costs = malloc(sizeof(uint64_t) * (n ? n : 1));
    for (int c = 0; c < n; c++) keys[c] = (uint64_t)g->x0 * (uint64_t)g->ny + (uint64_t)c;
    double busy = 0.0, avail = 0.0;
    *solver_steps = 0;
    *nominal = 0.0;
    /* With a GPU: the cells below --gpu-below go first, as KIND_COOL (the GPU's kind: a
     * GPU thread runs a hot cell's thousands of stiff steps far slower than a core, and a
     * batch lasts as long as its costliest cell), the others after them as KIND_CELL;
     * `order[i]` is the cell of the i-th task handed over. Without, the cells in order. */
    int *order = NULL;
    cell_in *handed = in;
    uint64_t *handed_keys = keys;
#ifdef TITUS_WITH_CUDA
    if (gpu_capacity > 0) {
        order = malloc(sizeof(int) * (n ? n : 1));
        handed = malloc(sizeof(cell_in) * (n ? n : 1));
        handed_keys = malloc(sizeof(uint64_t) * (n ? n : 1));
    }
#endif
    for (int s = 0; s < g->steps; s++) {
        inputs(g, s, state, in);
        int cool = 0;
        if (order) {
            for (int c = 0; c < n; c++)
                if (in[c].T < gpu_below) order[cool++] = c;
            for (int c = 0, i = cool; c < n; c++)
                if (!(in[c].T < gpu_below)) order[i++] = c;
            for (int i = 0; i < n; i++) handed[i] = in[order[i]], handed_keys[i] = keys[order[i]];
        }
        double t0 = now();
        if (cool) CHECK(titus_tasks_fixed(t, KIND_COOL, handed, sizeof(cell_in), cool));
        if (n > cool)
            CHECK(titus_tasks_fixed(t, KIND_CELL, handed + cool, sizeof(cell_in), n - cool));
        CHECK(titus_task_keys(t, handed_keys, (size_t)n));
        CHECK(titus_nominal_work(t, t_seq[s]));
        CHECK(titus_run(t));
        CHECK(titus_results_fixed(t, out, sizeof(cell_out), n));
        times[s] = now() - t0;
        CHECK(titus_costs(t, costs, (size_t)n));
        uint64_t costliest = 0;
        for (int c = 0; c < n; c++) costliest = costs[c] > costliest ? costs[c] : costliest;
        for (int i = 0; i < n; i++) {
            memcpy(state + 3 * (order ? order[i] : i), out[i].y, 3 * sizeof(double));
            *solver_steps += (long)out[i].steps;
        }
        titus_stats js;
        CHECK(titus_job_stats(t, &js));
        if (verbose && *rank_out == 0)
            printf("  step %d (%s): %.4f s (slowest titus_run %.4f s), efficiency %.3f, nominal %.3f, steals ok %llu empty "
                   "%llu locked %llu, tasks run off their owner %llu (stolen, with re-steals, %llu), costliest cell here %.1f us\n",
                   s, options, times[s], js.session_s, js.efficiency, js.nominal_efficiency,
                   (unsigned long long)js.steals_ok,
                   (unsigned long long)js.steals_empty, (unsigned long long)js.steals_locked,
                   (unsigned long long)js.tasks_ran_elsewhere, (unsigned long long)js.tasks_stolen,
                   (double)costliest / 1e3);
        busy += js.busy_s;
        avail += js.session_s * (double)js.workers;
        *nominal += js.nominal_s;
        *workers = (long)js.workers;
    }
    *eff = avail > 0.0 ? busy / avail : 0.0;
#ifdef TITUS_WITH_MPI
    CHECK(titus_finalize_mpi(&t));
#else
    CHECK(titus_finalize(&t));
#endif
    free(in);
    free(out);
    free(keys);
    free(costs);
    if (order) free(order), free(handed), free(handed_keys);
}

/* Every rank waits for every other: MPI's barrier, else the collective job stats. */
static void barrier(titus_t *t) {
#ifdef TITUS_WITH_MPI
    (void)t;
    MPI_Barrier(MPI_COMM_WORLD);
#else
    titus_stats unused;
    CHECK(titus_job_stats(t, &unused));
#endif
}

/* The median of v[0..n) (sorts v). */
static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(const char *why) {
    fprintf(stderr,
            "chemistry: %s (usage: chemistry [--nx N] [--ny N] [--steps S] [--dt T] "
            "[--ref-passes P] [--repeat R] [--options \"titus options\"] [--json] [--stats] "
            "[--gpu CAP [--gpu-below K]])\n",
            why);
    exit(2);
}

static int positive(const char *flag, const char *v) {
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || n <= 0 || n > 1 << 20) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s '%s': expected a positive integer", flag, v ? v : "");
        usage(msg);
    }
    return (int)n;
}

/* One repeat's figures (rank 0's view of the job's). */
typedef struct {
    double seq, none, titus, eff_none, eff_titus, nom_none, nom_titus, speedup;
    long workers;
    int ok;
} figures;

/* The reference: this rank's slab, sequentially, without Titus, timed while the other
 * ranks wait (one rank after the other), so the time is the cells' cost on one core of an
 * otherwise idle machine: their calibrated cost. `first` (a runtime with no balancing,
 * kept up through the reference: its job stats are the barrier) is finalized here. */
static long reference(const grid *g, int rank, int size, int passes, titus_t *first, double *ref,
                      double *t_seq) {
    int n = (g->x1 - g->x0) * g->ny;
    cell_in *in = malloc(sizeof(cell_in) * (n ? n : 1));
    double *pass_s = malloc(sizeof(double) * (size_t)passes);
    long ref_steps = 0;
    initial(g, ref);
    for (int turn = 0; turn < rank; turn++) barrier(first);
    for (int s = 0; s < g->steps; s++) {
        inputs(g, s, ref, in);
        /* Each pass computes the same states from the same inputs; the step's calibrated
         * cost is the median pass (one pass alone moved nominal efficiency by ±0.1
         * between runs on a noisy machine). */
        for (int p = 0; p < passes; p++) {
            double t0 = now();
            for (int c = 0; c < n; c++) {
                cell_out o;
                size_t len;
                cell_task(&in[c], sizeof(cell_in), &o, sizeof o, &len, NULL);
                if (p == passes - 1) {
                    memcpy(ref + 3 * c, o.y, sizeof o.y);
                    ref_steps += (long)o.steps;
                }
            }
            pass_s[p] = now() - t0;
        }
        t_seq[s] = median(pass_s, passes);
    }
    for (int turn = rank; turn < size; turn++) barrier(first);
#ifndef TITUS_WITH_MPI
    CHECK(titus_finalize(&first));
#else
    (void)first;
#endif
    free(pass_s);
    free(in);
    return ref_steps;
}

/* One repeat: the reference, then the time loop through Titus with no balancing and with
 * the chosen options (in that order, or the other when `titus_first`), checked against the
 * reference. */
static figures one_repeat(const grid *g, int rank, int size, int passes, titus_t *first,
                          const char *options, int titus_first, double *t_seq, double *t_none,
                          double *t_titus) {
    int n = (g->x1 - g->x0) * g->ny;
    size_t bytes = sizeof(double) * 3 * (n ? n : 1);
    double *ref = malloc(bytes), *a = malloc(bytes), *b = malloc(bytes);
    long ref_steps = reference(g, rank, size, passes, first, ref, t_seq);

    char none_opts[512], titus_opts[512];
    snprintf(none_opts, sizeof none_opts, "%s%sbalancer=none", options, *options ? "," : "");
    snprintf(titus_opts, sizeof titus_opts, "%s", options);
    figures f = {0};
    double nominal_none, nominal_titus;
    long steps_none, steps_titus, workers_none = 0;
    int r2, s2;
    initial(g, a);
    initial(g, b);
    for (int turn = 0; turn < 2; turn++) {
        if (turn == titus_first)
            run_titus(g, none_opts, a, t_seq, t_none, &f.eff_none, &nominal_none, &workers_none,
                      &steps_none, &r2, &s2);
        else
            run_titus(g, titus_opts, b, t_seq, t_titus, &f.eff_titus, &nominal_titus,
                      &f.workers, &steps_titus, &r2, &s2);
    }
    f.ok = !memcmp(ref, a, sizeof(double) * 3 * n) && !memcmp(ref, b, sizeof(double) * 3 * n) &&
           steps_none == ref_steps && steps_titus == ref_steps;
    for (int s = 0; s < g->steps; s++) f.none += t_none[s], f.titus += t_titus[s];
    /* Both runs stated the same calibrated costs: the job's T_seq, against the cores their
     * workers had. */
    f.seq = nominal_titus;
    f.nom_none = f.none > 0 ? nominal_none / ((double)workers_none * f.none) : 0.0;
    f.nom_titus = f.titus > 0 ? nominal_titus / ((double)f.workers * f.titus) : 0.0;
    f.speedup = f.titus > 0 ? f.none / f.titus : 0.0;
    if (!f.ok)
        fprintf(stderr, "rank %d: RESULTS DIFFER FROM the sequential run (%d cells x %d steps)\n",
                rank, n, g->steps);
    free(ref), free(a), free(b);
    return f;
}

/* The median over repeats of the figure at byte offset `off` of `figures`. */
static double median_at(const figures *f, int n, size_t off) {
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) v[i] = *(const double *)((const char *)&f[i] + off);
    double m = median(v, n);
    free(v);
    return m;
}
#define MEDIAN(field) median_at(rep, repeats, offsetof(figures, field))

int main(int argc, char **argv) {
#ifdef TITUS_WITH_MPI
    /* Titus starts threads (they never call MPI): FUNNELED. */
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
#endif
    grid g = {.nx = 64, .ny = 32, .steps = 8, .dt = 300.0};
    const char *options = "";
    int json = 0, passes = 3, repeats = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--nx")) g.nx = positive(a, v), i++;
        else if (!strcmp(a, "--ny")) g.ny = positive(a, v), i++;
        else if (!strcmp(a, "--steps")) g.steps = positive(a, v), i++;
        else if (!strcmp(a, "--ref-passes")) passes = positive(a, v), i++;
        else if (!strcmp(a, "--repeat")) repeats = positive(a, v), i++;
        else if (!strcmp(a, "--dt")) {
            char *end;
            g.dt = v ? strtod(v, &end) : 0.0;
            /* A cell's adaptive steps grow with dt: past 1e4 (33 times the default) one
             * step of a small grid takes minutes. */
            if (!v || *end || !(g.dt > 0.0 && g.dt <= 1e4))
                usage("--dt: expected a number in (0, 10000]");
            i++;
        } else if (!strcmp(a, "--options") && v) options = v, i++;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--stats")) verbose = 1;
        else if (!strcmp(a, "--gpu")) {
#ifdef TITUS_WITH_CUDA
            gpu_capacity = positive(a, v), i++;
#else
            usage("--gpu: this build has no GPU (build gpu.cu with nvcc and chemistry.c with "
                  "-DTITUS_WITH_CUDA: see gpu.cu)");
#endif
        } else if (!strcmp(a, "--gpu-below")) {
#ifdef TITUS_WITH_CUDA
            char *end;
            gpu_below = v ? strtod(v, &end) : 0.0;
            if (!v || *end || !(gpu_below >= 0.0)) usage("--gpu-below: expected a temperature in K");
            i++;
#else
            usage("--gpu-below: this build has no GPU (see gpu.cu)");
#endif
        }
        else {
            char msg[160];
            snprintf(msg, sizeof msg, "unknown argument '%s'", a);
            usage(msg);
        }
    }
    if ((long)g.nx * g.ny > (1L << 26)) usage("--nx x --ny: at most 2^26 cells");
    if (repeats > 1000) usage("--repeat: at most 1000");
    /* A first runtime (no balancing) tells this rank who it is; its slab follows. */
    int rank = 0, size = 1;
    titus_t *first = NULL;
#ifdef TITUS_WITH_MPI
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
#else
    CHECK(titus_init(&first, "workers=1,balancer=none"));
    CHECK(titus_rank_size(first, &rank, &size));
#endif
    g.x0 = (int)((long)g.nx * rank / size);
    g.x1 = (int)((long)g.nx * (rank + 1) / size);
    int n = (g.x1 - g.x0) * g.ny;
    double *t_seq = calloc(g.steps, sizeof(double)), *t_none = calloc(g.steps, sizeof(double)),
           *t_titus = calloc(g.steps, sizeof(double));
    figures *rep = calloc((size_t)repeats, sizeof(figures));

    /* Each repeat: the reference, no balancing and balancing, back to back, so that each
     * repeat's ratios compare runs close in time on a machine whose speed drifts; the order
     * of the two Titus runs alternates between repeats. The figures are the medians. */
    int ok = 1;
    for (int r = 0; r < repeats; r++) {
#ifndef TITUS_WITH_MPI
        if (!first) CHECK(titus_init(&first, "workers=1,balancer=none"));
#endif
        rep[r] = one_repeat(&g, rank, size, passes, first, options, r % 2, t_seq, t_none,
                            t_titus);
        first = NULL;
        ok &= rep[r].ok;
        if (rank == 0 && !json && repeats > 1)
            printf("repeat %d (%s first): sequential %.3f s, none %.3f s, titus %.3f s, nominal "
                   "efficiency none %.3f titus %.3f, speed-up %.2fx\n",
                   r, r % 2 ? "titus" : "none", rep[r].seq, rep[r].none, rep[r].titus,
                   rep[r].nom_none, rep[r].nom_titus, rep[r].speedup);
    }
    figures m = {
        .seq = MEDIAN(seq),
        .none = MEDIAN(none),
        .titus = MEDIAN(titus),
        .eff_none = MEDIAN(eff_none),
        .eff_titus = MEDIAN(eff_titus),
        .nom_none = MEDIAN(nom_none),
        .nom_titus = MEDIAN(nom_titus),
        .speedup = MEDIAN(speedup),
        .workers = rep[repeats - 1].workers,
    };
    double nom_lo = rep[0].nom_titus, nom_hi = rep[0].nom_titus;
    for (int r = 1; r < repeats; r++) {
        nom_lo = rep[r].nom_titus < nom_lo ? rep[r].nom_titus : nom_lo;
        nom_hi = rep[r].nom_titus > nom_hi ? rep[r].nom_titus : nom_hi;
    }
    if (rank == 0 && !json) {
        printf("chemistry: %dx%d cells, %d ranks, %ld workers in all, %d steps of dt %g, titus "
               "options \"%s\"\n",
               g.nx, g.ny, size, m.workers, g.steps, g.dt, options);
        if (repeats > 1) printf("per step: the last repeat\n");
        printf("%5s %8s %12s %12s %12s\n", "step", "front_x", "seq_own_s", "none_s", "titus_s");
        for (int s = 0; s < g.steps; s++)
            printf("%5d %8.1f %12.4f %12.4f %12.4f\n", s, front(&g, s), t_seq[s], t_none[s],
                   t_titus[s]);
        if (repeats > 1) printf("medians of %d repeats:\n", repeats);
        printf("total: sequential reference %.3f s (all ranks' cells, calibrated cost)\n", m.seq);
        printf("%-6s %10s %12s %20s\n", "run", "time_s", "efficiency", "nominal_efficiency");
        printf("%-6s %10.3f %12.3f %20.3f\n", "none", m.none, m.eff_none, m.nom_none);
        printf("%-6s %10.3f %12.3f %20.3f\n", "titus", m.titus, m.eff_titus, m.nom_titus);
        if (repeats > 1)
            printf("titus nominal efficiency over the repeats: %.3f to %.3f\n", nom_lo, nom_hi);
        printf("speed-up over none %.2fx\n", m.speedup);
    }
    if (rank == 0 && json) {
        printf("{\"nx\":%d,\"ny\":%d,\"ranks\":%d,\"workers\":%ld,\"steps\":%d,\"dt\":%g,\"repeat\":%d,"
               "\"seq_s\":%.6f,\"none_s\":%.6f,\"titus_s\":%.6f,\"efficiency_none\":%.4f,"
               "\"efficiency_titus\":%.4f,\"nominal_efficiency_none\":%.4f,"
               "\"nominal_efficiency\":%.4f,\"speedup\":%.4f,"
               "\"nominal_efficiency_min\":%.4f,\"nominal_efficiency_max\":%.4f,"
               "\"nominal_efficiency_runs\":[",
               g.nx, g.ny, size, m.workers, g.steps, g.dt, repeats, m.seq, m.none, m.titus,
               m.eff_none, m.eff_titus, m.nom_none, m.nom_titus, m.speedup, nom_lo, nom_hi);
        for (int r = 0; r < repeats; r++) printf("%s%.4f", r ? "," : "", rep[r].nom_titus);
        printf("],\"speedup_runs\":[");
        for (int r = 0; r < repeats; r++) printf("%s%.4f", r ? "," : "", rep[r].speedup);
        printf("]}\n");
    }
    fflush(stdout);
#ifdef TITUS_WITH_CUDA
    if (gpu_capacity > 0) {
        unsigned long long batches, cells;
        chem_gpu_counts(&batches, &cells);
        fprintf(stderr, "rank %d: the GPU ran %llu cells in %llu batches (both Titus runs, every repeat)\n",
                rank, cells, batches);
    }
#endif
    if (ok)
        fprintf(stderr, "rank %d: results equal the sequential run (%d cells x %d steps, %d repeats)\n",
                rank, n, g.steps, repeats);
    free(t_seq), free(t_none), free(t_titus), free(rep);
#ifdef TITUS_WITH_MPI
    MPI_Finalize();
#endif
    return ok ? 0 : 1;
}
