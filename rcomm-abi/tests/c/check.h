/* Shared by rcomm-abi's C tests: a failed check names the rank, file and line, and exits
 * non-zero so the harness sees it. */
#ifndef RCOMM_ABI_CHECK_H
#define RCOMM_ABI_CHECK_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int check_rank(void) {
    int r = -1, init = 0;
    MPI_Initialized(&init);
    if (init) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", check_rank(),      \
                    __FILE__, __LINE__, #cond);                                       \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

#define OK(call) CHECK((call) == MPI_SUCCESS)

#endif
