/* A call on MPI_COMM_WORLD after MPI_Finalize is erroneous: rcomm ends the process with a
 * message naming the call and the communicator (the default handler), never undefined
 * behaviour; the line after it is never printed. */
#include "check.h"

int main(int argc, char **argv) {
    int x = 1;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Finalize());
    MPI_Send(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
    printf("NOT REACHED\n");
    return 0;
}
