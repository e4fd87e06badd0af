/*
 * msg_cost: instructions per small message in an MPI library, for callgrind; the C twin of
 * benches/examples/msg_cost.rs (same pattern, see benches/scripts/msg-cost.sh).
 *
 * Built with -fno-ipa-icf and noinline/noclone: the counted functions must keep their names
 * (two identical ones would otherwise be folded into one), and no other function's name may
 * contain a counted one's: callgrind toggles counting on entering any function that matches.
 *
 * Per round rank 0 sends a window of W 8-byte messages while rank 1 sleeps, so the messages
 * are there when rank 1 receives them; each pattern is a function callgrind counts.
 */
#define _POSIX_C_SOURCE 199309L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define W 64
#define ROUNDS 20
#define DATA 7
#define SYNC 8

static uint64_t bufs[W];
static int w = W; /* MSG_COST_WINDOW, at most W */

__attribute__((noinline, noclone)) static void send_window(void)
{
    for (int i = 0; i < w; i++) MPI_Send(&bufs[i], 8, MPI_BYTE, 1, DATA, MPI_COMM_WORLD);
}

__attribute__((noinline, noclone)) static void recv_window(void)
{
    for (int i = 0; i < w; i++)
        MPI_Recv(&bufs[i], 8, MPI_BYTE, 0, DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

__attribute__((noinline, noclone)) static void isend_window(void)
{
    MPI_Request r[W];
    for (int i = 0; i < w; i++) MPI_Isend(&bufs[i], 8, MPI_BYTE, 1, DATA, MPI_COMM_WORLD, &r[i]);
    for (int i = 0; i < w; i++) MPI_Wait(&r[i], MPI_STATUS_IGNORE);
}

__attribute__((noinline, noclone)) static void irecv_window(void)
{
    MPI_Request r[W];
    for (int i = 0; i < w; i++) MPI_Irecv(&bufs[i], 8, MPI_BYTE, 0, DATA, MPI_COMM_WORLD, &r[i]);
    for (int i = 0; i < w; i++) MPI_Wait(&r[i], MPI_STATUS_IGNORE);
}

static void sync_pair(int rank);

__attribute__((noinline, noclone)) static void posted_send_window(void)
{
    for (int i = 0; i < w; i++) MPI_Send(&bufs[i], 8, MPI_BYTE, 1, DATA, MPI_COMM_WORLD);
}

__attribute__((noinline, noclone)) static void post_window(MPI_Request *r)
{
    for (int i = 0; i < w; i++) MPI_Irecv(&bufs[i], 8, MPI_BYTE, 0, DATA, MPI_COMM_WORLD, &r[i]);
}

__attribute__((noinline, noclone)) static void wait_window(MPI_Request *r)
{
    for (int i = 0; i < w; i++) MPI_Wait(&r[i], MPI_STATUS_IGNORE);
}

/* The window bandwidth test's receive: posted before the messages come (see msg_cost.rs). */
static void posted_receive(int rank, const struct timespec *settle)
{
    MPI_Request r[W];
    post_window(r);
    sync_pair(rank);
    nanosleep(settle, NULL);
    wait_window(r);
}

static void sync_pair(int rank)
{
    char b = 0;
    if (rank == 0) {
        MPI_Send(&b, 1, MPI_BYTE, 1, SYNC, MPI_COMM_WORLD);
        MPI_Recv(&b, 1, MPI_BYTE, 1, SYNC, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(&b, 1, MPI_BYTE, 0, SYNC, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&b, 1, MPI_BYTE, 0, SYNC, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "msg_cost runs with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *s = getenv("MSG_COST_SETTLE_MS");
    long ms = s ? atol(s) : 200;
    const char *ws = getenv("MSG_COST_WINDOW");
    if (ws && atoi(ws) > 0 && atoi(ws) <= W) w = atoi(ws);
    struct timespec settle = {ms / 1000, (ms % 1000) * 1000000L};
    for (int blocking = 1; blocking >= 0; blocking--) {
        for (int round = 0; round < ROUNDS; round++) {
            sync_pair(rank);
            if (rank == 0) {
                for (int i = 0; i < w; i++) bufs[i] = (uint64_t)(round * w + i);
                if (blocking) send_window(); else isend_window();
            } else {
                nanosleep(&settle, NULL);
                if (blocking) recv_window(); else irecv_window();
                for (int i = 0; i < w; i++)
                    if (bufs[i] != (uint64_t)(round * w + i)) {
                        fprintf(stderr, "msg_cost: wrong message %d in round %d\n", i, round);
                        MPI_Abort(MPI_COMM_WORLD, 1);
                    }
            }
        }
    }
    for (int round = 0; round < ROUNDS; round++) {
        sync_pair(rank);
        if (rank == 0) {
            for (int i = 0; i < w; i++) bufs[i] = (uint64_t)(round * w + i);
            sync_pair(rank);
            posted_send_window();
        } else {
            posted_receive(rank, &settle);
            for (int i = 0; i < w; i++)
                if (bufs[i] != (uint64_t)(round * w + i)) {
                    fprintf(stderr, "msg_cost: wrong posted message %d in round %d\n", i, round);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
        }
    }
    sync_pair(rank);
    if (rank == 0) printf("msg_cost: %d rounds of %d messages per pattern\n", ROUNDS, w);
    MPI_Finalize();
    return 0;
}
