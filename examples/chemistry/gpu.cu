/*
 * gpu.cu: the chemistry example's cells on a CUDA GPU, as a Titus resource beside the CPU
 * workers (titus_add_resource: a launch and a test callback).
 *
 * Titus hands the resource one cell at a time (launch); a GPU wants thousands. So launch
 * only copies the cell into a pinned host batch, and test — which Titus calls about every
 * millisecond while the resource holds tasks — starts the batch as one kernel (one thread
 * per cell, the same code as the CPU task: cell.h) when no other batch is running, and
 * hands back a running batch's results one by one once its event has fired. Two host
 * batches: one fills while the other runs. The resource's capacity (`--gpu CAP`) bounds
 * the cells it holds, filling and running together.
 *
 * Build (the CUDA toolkit's nvcc; -fmad=false keeps the results bit-for-bit those of the
 * CPU, see cell.h; -arch for the GPU at hand, sm_90 for an H100):
 *   nvcc -O2 -fmad=false -arch=sm_90 -c gpu.cu $(pkg-config --cflags titus) -o gpu.o
 *   gcc -O2 -DTITUS_WITH_CUDA -c chemistry.c $(pkg-config --cflags titus) -o chemistry.o
 *   nvcc -arch=sm_90 chemistry.o gpu.o $(pkg-config --libs titus) -lm -o chemistry-gpu
 * Run: titus launch -n 2 -- ./chemistry-gpu --gpu 4096 --options dispatch=fixed
 * (`fixed` gives the GPU every task it has room for; under `least-loaded` it would hold
 * about as many cells as the rank has workers, batches too small for a GPU). Only the
 * cells below `--gpu-below` K (1150 by default) are of the GPU's kind (KIND_COOL): a hot
 * cell takes thousands of stiff solver steps, serial work that a GPU thread runs far
 * slower than a core, and a batch lasts as long as its dearest cell.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titus.h"
#include "cell.h"

namespace {

__global__ void cells_kernel(const cell_in *in, const double *rate, cell_out *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double y[3] = {in[i].y[0], in[i].y[1], in[i].y[2]};
    int steps = cell_integrate(y, rate[i], in[i].dt);
    out[i].y[0] = y[0];
    out[i].y[1] = y[1];
    out[i].y[2] = y[2];
    out[i].steps = steps;
}

struct batch {
    cell_in *h_in = nullptr, *d_in = nullptr;    // the cells
    double *h_rate = nullptr, *d_rate = nullptr; // their rate factors (host-computed)
    cell_out *h_out = nullptr, *d_out = nullptr; // their results
    uint64_t *handles = nullptr;                 // Titus's handles, in batch order
    cudaEvent_t done = nullptr;                  // recorded after the results' copy back
    int n = 0;                                   // cells in the batch
    int delivered = 0;                           // results handed back so far
    bool running = false, finished = false;
};

struct gpu {
    int device = 0, capacity = 0;
    cudaStream_t stream = nullptr;
    batch b[2];
    int filling = 0; // b[filling] takes new cells; b[1 - filling] may be running
    uint64_t next_handle = 1;
    unsigned long long batches = 0, cells = 0;
};

int cuda_failed(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 0;
    fprintf(stderr, "chemistry: CUDA %s: %s\n", what, cudaGetErrorString(e));
    return 1;
}
#define CUDA_OR(call, ret)                                    \
    do {                                                      \
        if (cuda_failed((call), #call)) return (ret);         \
    } while (0)

int launch_cell(int kind, const void *payload, size_t len, uint64_t *handle, void *ctx) {
    gpu *g = static_cast<gpu *>(ctx);
    batch &f = g->b[g->filling];
    if (kind != KIND_COOL || len != sizeof(cell_in)) return 1;
    if (f.n >= g->capacity) {
        fprintf(stderr, "chemistry: GPU batch over its capacity %d\n", g->capacity);
        return 1;
    }
    memcpy(&f.h_in[f.n], payload, sizeof(cell_in));
    f.h_rate[f.n] = cell_rate(f.h_in[f.n].T);
    f.handles[f.n] = g->next_handle++;
    *handle = f.handles[f.n];
    f.n++;
    return 0;
}

/* Starts b[filling] on the GPU and swaps the batches (b[1 - filling] is idle). */
int start_batch(gpu *g) {
    batch &f = g->b[g->filling];
    size_t n = (size_t)f.n;
    CUDA_OR(cudaMemcpyAsync(f.d_in, f.h_in, n * sizeof(cell_in), cudaMemcpyHostToDevice, g->stream), 1);
    CUDA_OR(cudaMemcpyAsync(f.d_rate, f.h_rate, n * sizeof(double), cudaMemcpyHostToDevice, g->stream), 1);
    int threads = 128, blocks = (f.n + threads - 1) / threads;
    cells_kernel<<<blocks, threads, 0, g->stream>>>(f.d_in, f.d_rate, f.d_out, f.n);
    CUDA_OR(cudaGetLastError(), 1);
    CUDA_OR(cudaMemcpyAsync(f.h_out, f.d_out, n * sizeof(cell_out), cudaMemcpyDeviceToHost, g->stream), 1);
    CUDA_OR(cudaEventRecord(f.done, g->stream), 1);
    f.running = true;
    f.finished = false;
    f.delivered = 0;
    g->batches++;
    g->cells += n;
    g->filling = 1 - g->filling;
    g->b[g->filling].n = 0;
    return 0;
}

int test_cell(uint64_t *handle, void *result, size_t cap, size_t *result_len, int *done, void *ctx) {
    gpu *g = static_cast<gpu *>(ctx);
    CUDA_OR(cudaSetDevice(g->device), 1);
    *done = 0;
    batch &r = g->b[1 - g->filling];
    if (r.running && !r.finished) {
        cudaError_t e = cudaEventQuery(r.done);
        if (e == cudaErrorNotReady) return 0;
        CUDA_OR(e, 1);
        r.finished = true;
    }
    if (r.running && r.delivered < r.n) {
        if (cap < sizeof(cell_out)) return 1;
        memcpy(result, &r.h_out[r.delivered], sizeof(cell_out));
        *result_len = sizeof(cell_out);
        *handle = r.handles[r.delivered++];
        *done = 1;
        return 0;
    }
    r.running = false;
    if (g->b[g->filling].n > 0) return start_batch(g);
    return 0;
}

gpu *the_gpu = nullptr; // one per process, handed to each runtime in turn

} // namespace

/* Adds this process's GPU (device `rank` modulo the devices) as a resource that runs
 * KIND_COOL at the given speed hint and holds up to `capacity` cells. Returns 0, or 1
 * with a message on stderr. The resource lives until the process ends. */
extern "C" int chem_gpu_add(titus_t *t, int rank, int capacity, double speed) {
    gpu *&g = the_gpu;
    if (capacity < 1) {
        fprintf(stderr, "chemistry: --gpu: capacity below 1\n");
        return 1;
    }
    if (g && g->capacity != capacity) {
        fprintf(stderr, "chemistry: --gpu: the capacity cannot change\n");
        return 1;
    }
    if (!g) {
        int count = 0;
        CUDA_OR(cudaGetDeviceCount(&count), 1);
        if (count < 1) {
            fprintf(stderr, "chemistry: --gpu: no CUDA device\n");
            return 1;
        }
        g = new gpu;
        g->device = rank % count;
        g->capacity = capacity;
        CUDA_OR(cudaSetDevice(g->device), 1);
        CUDA_OR(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), 1);
        size_t n = (size_t)capacity;
        for (batch &b : g->b) {
            CUDA_OR(cudaMallocHost((void **)&b.h_in, n * sizeof(cell_in)), 1);
            CUDA_OR(cudaMallocHost((void **)&b.h_rate, n * sizeof(double)), 1);
            CUDA_OR(cudaMallocHost((void **)&b.h_out, n * sizeof(cell_out)), 1);
            CUDA_OR(cudaMalloc((void **)&b.d_in, n * sizeof(cell_in)), 1);
            CUDA_OR(cudaMalloc((void **)&b.d_rate, n * sizeof(double)), 1);
            CUDA_OR(cudaMalloc((void **)&b.d_out, n * sizeof(cell_out)), 1);
            CUDA_OR(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming), 1);
            b.handles = static_cast<uint64_t *>(malloc(n * sizeof(uint64_t)));
            if (!b.handles) return 1;
        }
    }
    /* A failed step may have left cells behind: a new runtime starts empty. */
    CUDA_OR(cudaSetDevice(g->device), 1);
    CUDA_OR(cudaStreamSynchronize(g->stream), 1);
    for (batch &b : g->b) b.n = 0, b.running = false;
    g->filling = 0;
    int kinds[1] = {KIND_COOL};
    double speeds[1] = {speed};
    char name[32];
    snprintf(name, sizeof name, "cuda:%d", g->device);
    int rc = titus_add_resource(t, name, capacity, kinds, speeds, 1, launch_cell, test_cell, g);
    if (rc != TITUS_OK) {
        fprintf(stderr, "chemistry: titus_add_resource: %s (%s)\n", titus_strerror(rc), titus_last_error());
        return 1;
    }
    return 0;
}

/* The cells and batches this process's GPU ran so far. */
extern "C" void chem_gpu_counts(unsigned long long *batches, unsigned long long *cells) {
    *batches = the_gpu ? the_gpu->batches : 0;
    *cells = the_gpu ? the_gpu->cells : 0;
}
