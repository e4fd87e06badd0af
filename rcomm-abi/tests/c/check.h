/* What every ABI test program uses: a check that names the rank, file and line and aborts the
 * job, so a wrong result is a failed run, never a printed line nobody reads. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            int r_ = -1;                                                              \
            MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                       \
            fprintf(stderr, "rank %d: FAIL %s:%d: %s: ", r_, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
            fflush(stderr);                                                           \
            MPI_Abort(MPI_COMM_WORLD, 3);                                             \
        }                                                                             \
    } while (0)

#define OK(call) CHECK((call) == MPI_SUCCESS, "call failed")

/* A barrier made of point-to-point (dissemination): these programs test point-to-point and
 * communicators, not collectives. */
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
