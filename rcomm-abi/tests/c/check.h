/* Shared by rcomm-abi's C test programs: a failed check names the rank, file and line and
 * ends the job (MPI_Abort once MPI is up, exit before), so a wrong result is a failed run,
 * never a printed line nobody reads. CHECK(cond) or CHECK(cond, "fmt", args...). */
#ifndef RCOMM_ABI_CHECK_H
#define RCOMM_ABI_CHECK_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int check_fail_begin(const char *file, int line, const char *cond) {
    int r = -1, init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    fprintf(stderr, "rank %d: FAIL %s:%d: %s:", r, file, line, cond);
    return init && !fin;
}

static inline void check_fail_end(int live) {
    fprintf(stderr, "\n");
    fflush(stderr);
    if (live) MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

/* The leading " " keeps a bare CHECK(cond) from handing fprintf an empty format. */
#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            int live_ = check_fail_begin(__FILE__, __LINE__, #cond);          \
            fprintf(stderr, " " __VA_ARGS__);                                 \
            check_fail_end(live_);                                            \
        }                                                                     \
    } while (0)

#define OK(call) CHECK((call) == MPI_SUCCESS, "call failed")

/* A barrier made of point-to-point (dissemination): the point-to-point and communicator
 * programs test those, not collectives. */
static inline void p2p_barrier(MPI_Comm comm) {
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    for (int k = 1; k < n; k *= 2) {
        char a = 0, b;
        MPI_Sendrecv(&a, 1, MPI_CHAR, (r + k) % n, 9999, &b, 1, MPI_CHAR, (r - k + n) % n, 9999,
                     comm, MPI_STATUS_IGNORE);
    }
}
#endif
