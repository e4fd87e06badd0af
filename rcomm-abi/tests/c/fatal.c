/* Under the default handler (MPI_ERRORS_ARE_FATAL) a call not built yet ends the job with a
 * message naming it; the line after it is never printed. */
#include "check.h"

/* Not built in rcomm yet: the standard's prototype (rcomm's mpi.h declares only what is built). */
int MPI_Win_create(void *base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                   MPI_Win *win);

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    MPI_Win win;
    MPI_Win_create(NULL, 0, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    printf("NOT REACHED\n");
    MPI_Finalize();
    return 0;
}
