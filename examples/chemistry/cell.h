/*
 * cell.h: one cell's chemistry in the chemistry example, shared by the CPU task
 * (chemistry.c) and the CUDA kernel (gpu.cu), so that both compute the same bits.
 *
 * The Oregonator (Field & Noyes 1974; Hairer & Wanner's stiff test problem) with
 * Arrhenius temperature dependence, rates × exp(Ta (1/Tb − 1/T)), integrated over dt with
 * an L-stable, adaptive-step, linearly implicit solver (ROS2, Verwer et al. 1999).
 *
 * Bit-for-bit equality between the two: the rate factor (the only transcendental
 * function, whose last bit differs between libm and CUDA) is computed on the host by both
 * (`cell_rate`); the rest is +, −, ×, ÷ and sqrt, correctly rounded on both, with the
 * GPU's multiply-adds left unfused (`nvcc -fmad=false`) as x86-64's SSE2 code has them.
 */
#ifndef TITUS_CHEMISTRY_CELL_H
#define TITUS_CHEMISTRY_CELL_H

#include <math.h>

#ifdef __CUDACC__
#define CELL_FN static inline __host__ __device__
#else
#define CELL_FN static inline
#endif

/* A task: one cell's state and conditions. */
typedef struct {
    double y[3]; /* concentrations */
    double T;    /* temperature, K */
    double dt;   /* chemistry time to integrate */
    double pad;
} cell_in;

/* A result: the new state and the solver's step count. */
typedef struct {
    double y[3];
    double steps;
} cell_out;

/* KIND_COOL: a cell below the GPU's temperature threshold (`--gpu-below`), the same
 * function; only it has a GPU variant. */
enum { KIND_CELL = 1, KIND_COOL = 2 };

#define CELL_S 77.27 /* Oregonator */
#define CELL_Q 8.375e-6
#define CELL_W 0.161
#define CELL_T_COLD 300.0
#define CELL_T_HOT 2000.0
#define CELL_T_ACT 8000.0

/* The Arrhenius factor at temperature T (host only: see above). */
static inline double cell_rate(double T) {
    return exp(CELL_T_ACT * (1.0 / CELL_T_HOT - 1.0 / T));
}

CELL_FN void cell_rhs(const double *y, double a, double *f) {
    f[0] = a * CELL_S * (y[1] + y[0] * (1.0 - CELL_Q * y[0] - y[1]));
    f[1] = a * (y[2] - (1.0 + y[0]) * y[1]) / CELL_S;
    f[2] = a * CELL_W * (y[0] - y[2]);
}

CELL_FN void cell_jac(const double *y, double a, double J[3][3]) {
    J[0][0] = a * CELL_S * (1.0 - 2.0 * CELL_Q * y[0] - y[1]);
    J[0][1] = a * CELL_S * (1.0 - y[0]);
    J[0][2] = 0.0;
    J[1][0] = -a * y[1] / CELL_S;
    J[1][1] = -a * (1.0 + y[0]) / CELL_S;
    J[1][2] = a / CELL_S;
    J[2][0] = a * CELL_W;
    J[2][1] = 0.0;
    J[2][2] = -a * CELL_W;
}

/* Solves M x = b (3×3, partial pivoting; rows swapped in place, so that a GPU keeps the
 * matrix in registers); M is left as it was. */
CELL_FN void cell_solve3(double M[3][3], const double *b, double *x) {
    double m[3][3], v[3];
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) m[i][j] = M[i][j];
        v[i] = b[i];
    }
    for (int k = 0; k < 3; k++) {
        int best = k;
        for (int i = k + 1; i < 3; i++)
            if (fabs(m[i][k]) > fabs(m[best][k])) best = i;
        for (int i = k + 1; i < 3; i++) /* row k <-> row best, unrolled by index */
            if (i == best) {
                for (int j = 0; j < 3; j++) {
                    double t = m[k][j];
                    m[k][j] = m[i][j];
                    m[i][j] = t;
                }
                double t = v[k];
                v[k] = v[i];
                v[i] = t;
            }
        for (int i = k + 1; i < 3; i++) {
            double l = m[i][k] / m[k][k];
            m[i][k] = l;
            for (int j = k + 1; j < 3; j++) m[i][j] -= l * m[k][j];
        }
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < i; j++) v[i] -= m[i][j] * v[j];
    for (int i = 2; i >= 0; i--) {
        x[i] = v[i];
        for (int j = i + 1; j < 3; j++) x[i] -= m[i][j] * x[j];
        x[i] /= m[i][i];
    }
}

/* Integrates one cell over [0, dt] at rate factor `a` with ROS2 and error control;
 * returns the step count. */
CELL_FN int cell_integrate(double *y, double a, double dt) {
    const double g = 1.0 + 1.0 / sqrt(2.0), rtol = 1e-4, atol = 1e-6;
    double t = 0.0, h = dt < 1e-3 ? dt : 1e-3;
    int steps = 0;
    while (t < dt && steps < 1000000) {
        if (t + h > dt) h = dt - t;
        double J[3][3], M[3][3], f0[3], k1[3], k2[3], y1[3], f1[3], b[3], err = 0.0;
        cell_jac(y, a, J);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) M[i][j] = (i == j) - g * h * J[i][j];
        cell_rhs(y, a, f0);
        cell_solve3(M, f0, k1);
        for (int i = 0; i < 3; i++) y1[i] = y[i] + h * k1[i];
        cell_rhs(y1, a, f1);
        for (int i = 0; i < 3; i++) b[i] = f1[i] - 2.0 * k1[i];
        cell_solve3(M, b, k2);
        double yn[3];
        for (int i = 0; i < 3; i++) {
            yn[i] = y[i] + 1.5 * h * k1[i] + 0.5 * h * k2[i];
            double e = 0.5 * h * (k1[i] + k2[i]);
            double sc = atol + rtol * fmax(fabs(y[i]), fabs(yn[i]));
            err += (e / sc) * (e / sc);
        }
        err = sqrt(err / 3.0);
        steps++;
        if (err <= 1.0) {
            t += h;
            for (int i = 0; i < 3; i++) y[i] = yn[i];
        }
        double fac = err > 0.0 ? 0.9 / sqrt(err) : 5.0;
        h *= fac < 0.2 ? 0.2 : (fac > 5.0 ? 5.0 : fac);
    }
    return steps;
}

#endif
