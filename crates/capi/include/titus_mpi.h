/*
 * titus_mpi.h: initialise Titus from an MPI communicator (header-only).
 *
 * Compiled into the solver with its own MPI (mpicc), so libtitus itself never links MPI
 * and never calls MPI_Init or MPI_Finalize: the solver initialises MPI before
 * titus_init_mpi and finalises it after titus_finalize.
 *
 *   MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);  // Titus has threads
 *   titus_t *t = NULL;
 *   titus_init_mpi(&t, MPI_COMM_WORLD, "workers=4");
 *   ...
 *   titus_finalize(&t);
 *   MPI_Finalize();
 *
 * Titus's ranks are the communicator's. Titus runs MPI_Allgather on a duplicate of the
 * communicator inside titus_init_mpi, titus_run, titus_job_stats and titus_finalize_mpi,
 * on the calling thread only (its own threads never call MPI, so MPI_THREAD_FUNNELED
 * suffices): call those on every rank in the same order. One Titus handle at a time per
 * process through this header.
 */
#ifndef TITUS_MPI_H
#define TITUS_MPI_H

#include <limits.h>
#include <mpi.h>
#include "titus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The communicator a handle exchanges over; must outlive the handle (titus_finalize). */
static MPI_Comm titus_mpi_comm_ = MPI_COMM_NULL;

static inline int titus_mpi_allgather_(const void *send, size_t len, void *recv, void *ctx) {
    MPI_Comm comm = *(MPI_Comm *)ctx;
    if (len > (size_t)INT_MAX) return -1;
    return MPI_Allgather(send, (int)len, MPI_BYTE, recv, (int)len, MPI_BYTE, comm) == MPI_SUCCESS
               ? 0
               : -1;
}

/* titus_init_exchange over `comm` (a duplicate of it, freed by titus_finalize_mpi, or here
 * if initialisation fails). One handle at a time through this header. */
static inline int titus_init_mpi(titus_t **handle, MPI_Comm comm, const char *options) {
    int rank, size, rc;
    if (titus_mpi_comm_ != MPI_COMM_NULL) return TITUS_ERR_ALREADY_INITIALIZED;
    if (MPI_Comm_dup(comm, &titus_mpi_comm_) != MPI_SUCCESS) return TITUS_ERR_EXCHANGE;
    MPI_Comm_rank(titus_mpi_comm_, &rank);
    MPI_Comm_size(titus_mpi_comm_, &size);
    rc = titus_init_exchange(handle, rank, size, titus_mpi_allgather_, &titus_mpi_comm_, options);
    if (rc != TITUS_OK) MPI_Comm_free(&titus_mpi_comm_);
    return rc;
}

/* titus_finalize, then frees the duplicated communicator (before MPI_Finalize). */
static inline int titus_finalize_mpi(titus_t **handle) {
    int rc = titus_finalize(handle);
    if (titus_mpi_comm_ != MPI_COMM_NULL) MPI_Comm_free(&titus_mpi_comm_);
    return rc;
}

#ifdef __cplusplus
}
#endif

#endif /* TITUS_MPI_H */
