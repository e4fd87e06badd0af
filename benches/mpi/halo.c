/* Halo exchange of strided columns against an MPI: the C twin of benches/examples/halo.rs
 * (same layout, modes, iteration counts, timing and checks). `n` ranks in a periodic ring,
 * each with a rows x (16 + 2) row-major block of doubles; `vector` mode trades the boundary
 * columns by MPI_Sendrecv with an MPI_Type_vector, `contig` mode the same bytes from and into
 * contiguous buffers, `manual` mode packs the columns by hand, exchanges them contiguous and
 * copies them back. One JSON line per (mode, rows) from rank 0: the median over the
 * repetitions of the slowest rank's time per iteration.
 *
 *   mpicc -O2 -o halo benches/mpi/halo.c && mpirun -n 4 ./halo [--reps R] [--rows LIST] [--impl NAME]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NX 16
#define W (NX + 2)

static double val(int r, int y, int x, int rep) { return r * 1e7 + rep * 1e6 + (double)(y * W + x); }

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void vector(double *m, MPI_Datatype col, int iters, int left, int right) {
    for (int i = 0; i < iters; i++) {
        MPI_Sendrecv(m + NX, 1, col, right, 1, m, 1, col, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(m + 1, 1, col, left, 2, m + NX + 1, 1, col, right, 2, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int reps = 7;
    const char *rows_arg = "64,1024,16384", *impl = "mpi";
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--rows")) rows_arg = argv[i + 1];
        if (!strcmp(argv[i], "--impl")) impl = argv[i + 1];
    }
    int left = (r + n - 1) % n, right = (r + 1) % n;
    char *list = strdup(rows_arg);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int ny = atoi(tok);
        MPI_Datatype col;
        MPI_Type_vector(ny, 1, W, MPI_DOUBLE, &col);
        MPI_Type_commit(&col);
        int iters = 20000000 / (ny * 8 * 4);
        if (iters < 50) iters = 50;
        if (iters > 5000) iters = 5000;
        double *times[3];
        double *m = malloc(sizeof(double) * ny * W);
        double *out = calloc(ny, sizeof(double)), *in = calloc(ny, sizeof(double));
        for (int mode = 0; mode < 3; mode++) times[mode] = calloc(reps, sizeof(double));
        /* The modes take turns within each repetition (none is measured while the job warms
         * up); repetition 0 warms all of them. */
        for (int rep = 0; rep <= reps; rep++) {
            for (int mode = 0; mode < 3; mode++) {
                for (int i = 0; i < ny * W; i++) m[i] = val(r, i / W, i % W, rep);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                if (mode == 0) {
                    vector(m, col, iters, left, right);
                } else if (mode == 2) {
                    for (int i = 0; i < iters; i++) {
                        for (int y = 0; y < ny; y++) out[y] = m[y * W + NX];
                        MPI_Sendrecv(out, ny, MPI_DOUBLE, right, 1, in, ny, MPI_DOUBLE, left, 1,
                                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        for (int y = 0; y < ny; y++) m[y * W] = in[y];
                        for (int y = 0; y < ny; y++) out[y] = m[y * W + 1];
                        MPI_Sendrecv(out, ny, MPI_DOUBLE, left, 2, in, ny, MPI_DOUBLE, right, 2,
                                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        for (int y = 0; y < ny; y++) m[y * W + NX + 1] = in[y];
                    }
                } else {
                    for (int i = 0; i < iters; i++) {
                        MPI_Sendrecv(out, ny, MPI_DOUBLE, right, 1, in, ny, MPI_DOUBLE, left, 1,
                                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        MPI_Sendrecv(in, ny, MPI_DOUBLE, left, 2, out, ny, MPI_DOUBLE, right, 2,
                                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    }
                }
                double t = (MPI_Wtime() - t0) / iters, tmax;
                MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (mode == 1) vector(m, col, 1, left, right); /* untimed: fill the ghosts */
                for (int y = 0; y < ny; y++) {
                    if (m[y * W] != val(left, y, NX, rep) || m[y * W + NX + 1] != val(right, y, 1, rep)) {
                        fprintf(stderr, "rank %d: wrong ghost in row %d\n", r, y);
                        MPI_Abort(MPI_COMM_WORLD, 1);
                    }
                }
                if (rep > 0) times[mode][rep - 1] = tmax;
            }
        }
        for (int mode = 0; mode < 3; mode++) {
            qsort(times[mode], reps, sizeof(double), cmp);
            if (r == 0)
                printf("{\"bench\":\"halo\",\"impl\":\"%s\",\"ranks\":%d,\"mode\":\"%s\",\"rows\":%d,"
                       "\"bytes\":%d,\"us\":%.3f,\"iters\":%d,\"reps\":%d}\n",
                       impl, n, mode == 0 ? "vector" : mode == 1 ? "contig" : "manual", ny, ny * 8,
                       times[mode][reps / 2] * 1e6, iters, reps);
            fflush(stdout);
            free(times[mode]);
        }
        free(m); free(out); free(in);
        MPI_Type_free(&col);
    }
    free(list);
    MPI_Finalize();
    return 0;
}
