/* Point-to-point through the C ABI, checked against values each rank computes itself: every
 * send mode, blocking, non-blocking and persistent; wildcards and MPI_PROC_NULL; probes and
 * matched probes; send-receive; completion calls; cancel; counts. Any number of ranks. */
#include "check.h"
#include <stdint.h>

static int rank, size;

static int value(int from, int to, int i) { return from * 1000000 + to * 1000 + i; }

static void ring_modes(void) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    enum { N = 300 };
    int out[N], in[N];
    for (int mode = 0; mode < 4; mode++) {
        for (int i = 0; i < N; i++) out[i] = value(rank, next, i) + mode;
        MPI_Request r;
        OK(MPI_Irecv(in, N, MPI_INT, prev, 10 + mode, MPI_COMM_WORLD, &r));
        /* Ready mode needs the receive posted everywhere first. */
        p2p_barrier(MPI_COMM_WORLD);
        if (mode == 0) OK(MPI_Send(out, N, MPI_INT, next, 10, MPI_COMM_WORLD));
        if (mode == 1) {
            MPI_Request s;
            OK(MPI_Issend(out, N, MPI_INT, next, 11, MPI_COMM_WORLD, &s));
            OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
            CHECK(s == MPI_REQUEST_NULL, "request not freed");
        }
        if (mode == 2) OK(MPI_Rsend(out, N, MPI_INT, next, 12, MPI_COMM_WORLD));
        if (mode == 3) {
            int bufsize = N * sizeof(int) + MPI_BSEND_OVERHEAD;
            char *b = malloc(bufsize);
            OK(MPI_Buffer_attach(b, bufsize));
            OK(MPI_Bsend(out, N, MPI_INT, next, 13, MPI_COMM_WORLD));
            OK(MPI_Buffer_flush());
            void *back; int back_size;
            OK(MPI_Buffer_detach(&back, &back_size));
            CHECK(back == b && back_size == bufsize, "detach gave %p %d", back, back_size);
            free(b);
        }
        MPI_Status st;
        OK(MPI_Wait(&r, &st));
        CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 10 + mode, "status %d %d", st.MPI_SOURCE, st.MPI_TAG);
        int n;
        OK(MPI_Get_count(&st, MPI_INT, &n));
        CHECK(n == N, "count %d", n);
        for (int i = 0; i < N; i++)
            CHECK(in[i] == value(prev, rank, i) + mode, "mode %d in[%d]=%d", mode, i, in[i]);
    }
}

static void wildcards_and_proc_null(void) {
    /* Every rank sends one message to rank 0 with its rank as tag; rank 0 takes them in any order. */
    /* On a communicator of their own: the wildcards must not meet other sections' messages. */
    MPI_Comm wc;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &wc));
    double d = rank * 0.5;
    if (rank != 0) OK(MPI_Send(&d, 1, MPI_DOUBLE, 0, rank, wc));
    else {
        int seen = 0;
        for (int k = 1; k < size; k++) {
            MPI_Status st;
            double got;
            OK(MPI_Recv(&got, 1, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, wc, &st));
            CHECK(st.MPI_TAG == st.MPI_SOURCE && got == st.MPI_SOURCE * 0.5, "from %d tag %d got %g", st.MPI_SOURCE, st.MPI_TAG, got);
            seen |= 1 << st.MPI_SOURCE;
        }
        CHECK(seen == ((1 << size) - 2), "seen %x", seen);
    }
    OK(MPI_Comm_free(&wc));
    MPI_Status st;
    int x = 7;
    OK(MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
    OK(MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    int n = -1;
    OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && n == 0 && x == 7, "proc null status");
    /* Empty messages with null buffers, blocking and not, both ways round. */
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    MPI_Request zr[2];
    OK(MPI_Irecv(NULL, 0, MPI_INT, from, 5, MPI_COMM_WORLD, &zr[0]));
    OK(MPI_Isend(NULL, 0, MPI_INT, to, 5, MPI_COMM_WORLD, &zr[1]));
    OK(MPI_Waitall(2, zr, MPI_STATUSES_IGNORE));
    OK(MPI_Sendrecv(NULL, 0, MPI_BYTE, to, 6, NULL, 0, MPI_BYTE, from, 6, MPI_COMM_WORLD, &st));
    OK(MPI_Get_count(&st, MPI_BYTE, &n));
    CHECK(n == 0 && st.MPI_SOURCE == from && st.MPI_TAG == 6, "empty sendrecv status");
    OK(MPI_Issend(NULL, 0, MPI_INT, to, 7, MPI_COMM_WORLD, &zr[1]));
    OK(MPI_Recv(NULL, 0, MPI_INT, from, 7, MPI_COMM_WORLD, &st));
    OK(MPI_Wait(&zr[1], MPI_STATUS_IGNORE));
    /* A synchronous send to oneself completes only once its receive matched. */
    int y = 5, z = 0, fl = 1;
    OK(MPI_Issend(&y, 1, MPI_INT, rank, 8, MPI_COMM_WORLD, &zr[1]));
    OK(MPI_Test(&zr[1], &fl, MPI_STATUS_IGNORE));
    CHECK(!fl, "an Issend to oneself completed before any receive");
    OK(MPI_Recv(&z, 1, MPI_INT, rank, 8, MPI_COMM_WORLD, &st));
    OK(MPI_Wait(&zr[1], MPI_STATUS_IGNORE));
    CHECK(z == 5, "z %d", z);
}

static void probes(void) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    long msg[5] = {rank, rank + 1, rank + 2, rank + 3, rank + 4};
    MPI_Request s;
    OK(MPI_Isend(msg, 5, MPI_LONG, next, 21, MPI_COMM_WORLD, &s));
    MPI_Status st;
    OK(MPI_Probe(prev, 21, MPI_COMM_WORLD, &st));
    int n;
    OK(MPI_Get_count(&st, MPI_LONG, &n));
    CHECK(n == 5 && st.MPI_SOURCE == prev, "probe count %d", n);
    OK(MPI_Get_elements(&st, MPI_INT, &n));
    CHECK(n == 10, "elements as int %d", n);
    OK(MPI_Get_count(&st, MPI_DOUBLE_INT, &n));
    CHECK(n == MPI_UNDEFINED, "40 bytes of 16-byte pairs: %d", n);
    MPI_Message m;
    OK(MPI_Mprobe(prev, 21, MPI_COMM_WORLD, &m, &st));
    long in[5];
    OK(MPI_Mrecv(in, 5, MPI_LONG, &m, &st));
    CHECK(m == MPI_MESSAGE_NULL && in[4] == prev + 4, "mrecv %ld", in[4]);
    OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
    /* Improbe until the message is there, then Imrecv. */
    OK(MPI_Isend(msg, 5, MPI_LONG, next, 22, MPI_COMM_WORLD, &s));
    int flag = 0;
    while (!flag) OK(MPI_Improbe(prev, 22, MPI_COMM_WORLD, &flag, &m, &st));
    MPI_Request r;
    OK(MPI_Imrecv(in, 5, MPI_LONG, &m, &r));
    OK(MPI_Wait(&r, &st));
    CHECK(in[0] == prev && st.MPI_TAG == 22, "imrecv");
    OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
    OK(MPI_Iprobe(MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &flag, &st));
    CHECK(!flag, "iprobe found a message nobody sent");
    OK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &st));
    CHECK(m == MPI_MESSAGE_NO_PROC, "mprobe proc null");
}

static void persistent_and_completion(void) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    enum { K = 4 };
    int out[K], in[K];
    MPI_Request reqs[2 * K];
    for (int k = 0; k < K; k++) {
        OK(MPI_Recv_init(&in[k], 1, MPI_INT, prev, 30 + k, MPI_COMM_WORLD, &reqs[k]));
        OK(MPI_Send_init(&out[k], 1, MPI_INT, next, 30 + k, MPI_COMM_WORLD, &reqs[K + k]));
    }
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < K; k++) out[k] = value(rank, round, k);
        OK(MPI_Startall(2 * K, reqs));
        if (round == 0) {
            MPI_Status sts[2 * K];
            OK(MPI_Waitall(2 * K, reqs, sts));
            for (int k = 0; k < K; k++) CHECK(sts[k].MPI_TAG == 30 + k, "tag %d", sts[k].MPI_TAG);
        } else if (round == 1) {
            int done = 0, idx[2 * K], outc;
            while (done < 2 * K) {
                OK(MPI_Waitsome(2 * K, reqs, &outc, idx, MPI_STATUSES_IGNORE));
                CHECK(outc != MPI_UNDEFINED, "waitsome saw no active request");
                done += outc;
            }
        } else {
            int flag = 0;
            while (!flag) OK(MPI_Testall(2 * K, reqs, &flag, MPI_STATUSES_IGNORE));
        }
        for (int k = 0; k < K; k++) CHECK(in[k] == value(prev, round, k), "round %d in[%d]=%d", round, k, in[k]);
        /* Persistent requests stay allocated between starts. */
        for (int k = 0; k < 2 * K; k++) CHECK(reqs[k] != MPI_REQUEST_NULL, "persistent request freed");
    }
    int idx;
    MPI_Status st;
    OK(MPI_Waitany(2 * K, reqs, &idx, &st));
    CHECK(idx == MPI_UNDEFINED, "waitany on inactive requests: %d", idx);
    for (int k = 0; k < 2 * K; k++) OK(MPI_Request_free(&reqs[k]));

    /* Testany / Request_get_status on a receive that completes later. */
    MPI_Request r;
    int x = -1, y = rank;
    OK(MPI_Irecv(&x, 1, MPI_INT, prev, 40, MPI_COMM_WORLD, &r));
    int flag = 0;
    OK(MPI_Request_get_status(r, &flag, &st));
    p2p_barrier(MPI_COMM_WORLD);
    OK(MPI_Send(&y, 1, MPI_INT, next, 40, MPI_COMM_WORLD));
    flag = 0;
    while (!flag) OK(MPI_Testany(1, &r, &idx, &flag, &st));
    CHECK(idx == 0 && x == prev && r == MPI_REQUEST_NULL, "testany idx %d x %d", idx, x);
}

static void sendrecv_and_cancel(void) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    float a[64], b[64];
    for (int i = 0; i < 64; i++) a[i] = rank + i * 0.25f;
    MPI_Status st;
    OK(MPI_Sendrecv(a, 64, MPI_FLOAT, next, 50, b, 64, MPI_FLOAT, prev, 50, MPI_COMM_WORLD, &st));
    for (int i = 0; i < 64; i++) CHECK(b[i] == prev + i * 0.25f, "sendrecv b[%d]", i);
    int got = -1;
    OK(MPI_Get_count(&st, MPI_FLOAT, &got));
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 50 && got == 64, "sendrecv status %d %d %d",
          st.MPI_SOURCE, st.MPI_TAG, got);
    /* Fewer elements than the receive holds, from any source with any tag. */
    OK(MPI_Sendrecv(a, 32, MPI_FLOAT, next, 53, b, 64, MPI_FLOAT, MPI_ANY_SOURCE, MPI_ANY_TAG,
                    MPI_COMM_WORLD, &st));
    OK(MPI_Get_count(&st, MPI_FLOAT, &got));
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 53 && got == 32, "sendrecv any %d %d %d",
          st.MPI_SOURCE, st.MPI_TAG, got);
    for (int i = 0; i < 32; i++) CHECK(b[i] == prev + i * 0.25f, "sendrecv any b[%d]", i);
    OK(MPI_Sendrecv_replace(a, 64, MPI_FLOAT, next, 51, prev, 51, MPI_COMM_WORLD, &st));
    for (int i = 0; i < 64; i++) CHECK(a[i] == prev + i * 0.25f, "replace a[%d]", i);
    MPI_Request r;
    OK(MPI_Isendrecv(b, 64, MPI_FLOAT, next, 52, a, 64, MPI_FLOAT, prev, 52, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, &st));
    CHECK(st.MPI_SOURCE == prev && a[63] == (float)((prev + size - 1) % size) + 63 * 0.25f, "isendrecv");
    /* A receive nobody matches can be cancelled. */
    int z;
    OK(MPI_Irecv(&z, 1, MPI_INT, MPI_ANY_SOURCE, 12345, MPI_COMM_WORLD, &r));
    OK(MPI_Cancel(&r));
    OK(MPI_Wait(&r, &st));
    int c = 0;
    OK(MPI_Test_cancelled(&st, &c));
    CHECK(c, "receive not cancelled");
}

static void large_count(void) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Count n = 1 << 20;
    unsigned char *out = malloc(n), *in = malloc(n);
    for (MPI_Count i = 0; i < n; i++) out[i] = (unsigned char)(i * 7 + rank);
    MPI_Status st;
    OK(MPI_Sendrecv_c(out, n, MPI_BYTE, next, 60, in, n, MPI_BYTE, prev, 60, MPI_COMM_WORLD, &st));
    MPI_Count got;
    OK(MPI_Get_count_c(&st, MPI_BYTE, &got));
    CHECK(got == n, "count_c %lld", (long long)got);
    for (MPI_Count i = 0; i < n; i++) CHECK(in[i] == (unsigned char)(i * 7 + prev), "byte %lld", (long long)i);
    free(out);
    free(in);
}

static void extras(void) {
    int *mem;
    OK(MPI_Alloc_mem(64 * sizeof(int), MPI_INFO_NULL, &mem));
    CHECK(((uintptr_t)mem & 63) == 0, "alloc_mem alignment");
    for (int i = 0; i < 64; i++) mem[i] = i;
    OK(MPI_Free_mem(mem));
    OK(MPI_Pcontrol(1));
    /* Request_get_status_all looks without completing. */
    int a = -1, b = -1, x = rank * 3, y = rank * 5, flag;
    MPI_Request rr[2];
    MPI_Status sts[2];
    OK(MPI_Irecv(&a, 1, MPI_INT, rank, 70, MPI_COMM_WORLD, &rr[0]));
    OK(MPI_Irecv(&b, 1, MPI_INT, rank, 71, MPI_COMM_WORLD, &rr[1]));
    OK(MPI_Request_get_status_all(2, rr, &flag, sts));
    CHECK(!flag, "done before anything was sent");
    OK(MPI_Send(&x, 1, MPI_INT, rank, 70, MPI_COMM_WORLD));
    OK(MPI_Send(&y, 1, MPI_INT, rank, 71, MPI_COMM_WORLD));
    do OK(MPI_Request_get_status_all(2, rr, &flag, sts)); while (!flag);
    CHECK(sts[1].MPI_TAG == 71 && rr[0] != MPI_REQUEST_NULL, "get_status_all freed a request");
    OK(MPI_Waitall(2, rr, MPI_STATUSES_IGNORE));
    CHECK(a == x && b == y && rr[1] == MPI_REQUEST_NULL, "self messages %d %d", a, b);
}

/* MPI-4.1 buffers: a communicator's own, used before the process's; sends that do not fit
 * give MPI_ERR_BUFFER; flush and detach wait for the sends; MPI_BUFFER_AUTOMATIC. */
static void comm_buffers(void) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, cls, rc, n = -1;
    static char cbuf[3 * (4 * sizeof(int) + MPI_BSEND_OVERHEAD)];
    int out[4] = {rank, rank + 1, rank + 2, rank + 3}, in[4];
    void *addr = NULL;
    MPI_Comm d;
    MPI_Request r;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    OK(MPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN));
    OK(MPI_Comm_attach_buffer(d, cbuf, (int)sizeof cbuf));
    rc = MPI_Comm_attach_buffer(d, cbuf, (int)sizeof cbuf);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_BUFFER, "a second attach: class %d", cls);
    OK(MPI_Bsend(out, 4, MPI_INT, next, 70, d));
    OK(MPI_Ibsend(out, 4, MPI_INT, next, 71, d, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    rc = MPI_Bsend(cbuf, (int)sizeof cbuf, MPI_BYTE, next, 72, d);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_BUFFER, "a bsend larger than the buffer: class %d", cls);
    OK(MPI_Recv(in, 4, MPI_INT, prev, 70, d, MPI_STATUS_IGNORE));
    CHECK(in[0] == prev && in[3] == prev + 3, "comm bsend");
    OK(MPI_Recv(in, 4, MPI_INT, prev, 71, d, MPI_STATUS_IGNORE));
    CHECK(in[1] == prev + 1, "comm ibsend");
    OK(MPI_Comm_flush_buffer(d));
    OK(MPI_Comm_iflush_buffer(d, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Comm_detach_buffer(d, &addr, &n));
    CHECK(addr == cbuf && n == (int)sizeof cbuf, "comm detach %p %d", addr, n);
    rc = MPI_Comm_detach_buffer(d, &addr, &n);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_BUFFER, "a second detach: class %d", cls);
    OK(MPI_Comm_attach_buffer(d, MPI_BUFFER_AUTOMATIC, 0));
    OK(MPI_Bsend(out, 4, MPI_INT, next, 73, d));
    OK(MPI_Recv(in, 4, MPI_INT, prev, 73, d, MPI_STATUS_IGNORE));
    OK(MPI_Comm_detach_buffer(d, &addr, &n));
    CHECK(addr == MPI_BUFFER_AUTOMATIC && n == 0, "automatic detach %p %d", addr, n);
    OK(MPI_Comm_free(&d));
    /* The process's buffer: a non-blocking flush. */
    static char pbuf[4 * sizeof(int) + MPI_BSEND_OVERHEAD];
    OK(MPI_Buffer_attach(pbuf, (int)sizeof pbuf));
    OK(MPI_Bsend(out, 4, MPI_INT, next, 74, MPI_COMM_WORLD));
    OK(MPI_Recv(in, 4, MPI_INT, prev, 74, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    OK(MPI_Buffer_iflush(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Buffer_detach(&addr, &n));
    CHECK(addr == pbuf && n == (int)sizeof pbuf, "process detach %p %d", addr, n);
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    ring_modes();
    wildcards_and_proc_null();
    probes();
    persistent_and_completion();
    sendrecv_and_cancel();
    large_count();
    extras();
    comm_buffers();
    p2p_barrier(MPI_COMM_WORLD);
    printf("PASS p2p rank %d of %d\n", rank, size);
    OK(MPI_Finalize());
    return 0;
}
