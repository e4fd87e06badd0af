/* Bad input through the C ABI gives the MPI error class, never a crash or a hang: with
 * MPI_ERRORS_RETURN each call below returns its class. Any number of ranks. */
#include "check.h"

/* Not built in rcomm yet, so rcomm's mpi.h does not declare them (a program built against
 * another ABI header may still call them); the standard's prototypes. */
int MPI_Win_fence(int assert_, MPI_Win win);
int MPI_Comm_remote_group(MPI_Comm comm, MPI_Group *group);
int MPI_Comm_connect(const char *port_name, MPI_Info info, int root, MPI_Comm comm,
                     MPI_Comm *newcomm);

#define EXPECT(call, cls)                                                   \
    do {                                                                    \
        int rc_ = (call);                                                   \
        int c_ = -1;                                                        \
        MPI_Error_class(rc_, &c_);                                          \
        CHECK(c_ == (cls), "%s gave class %d, want %s", #call, c_, #cls);   \
    } while (0)

static int seen;
static MPI_Comm seen_comm;
static void on_error(MPI_Comm *c, int *code, ...) {
    seen_comm = *c;
    seen = *code;
}

int main(int argc, char **argv) {
    int rank, size, x = 0, flag;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    MPI_Status st;
    MPI_Request req;

    /* Handles: null, forged, freed, of another kind. */
    EXPECT(MPI_Comm_size(MPI_COMM_NULL, &x), MPI_ERR_COMM);
    EXPECT(MPI_Comm_size((MPI_Comm)(intptr_t)0x12345678, &x), MPI_ERR_COMM);
    EXPECT(MPI_Comm_size((MPI_Comm)&x, &x), MPI_ERR_COMM);
    MPI_Comm d;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    MPI_Comm stale = d;
    OK(MPI_Comm_free(&d));
    EXPECT(MPI_Comm_size(stale, &x), MPI_ERR_COMM);
    EXPECT(MPI_Comm_free(&stale), MPI_ERR_COMM);
    MPI_Group g;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &g));
    EXPECT(MPI_Comm_size((MPI_Comm)g, &x), MPI_ERR_COMM);
    EXPECT(MPI_Group_size((MPI_Group)MPI_COMM_WORLD, &x), MPI_ERR_GROUP);
    OK(MPI_Group_free(&g));
    EXPECT(MPI_Group_size(MPI_GROUP_NULL, &x), MPI_ERR_GROUP);
    EXPECT(MPI_Comm_free((MPI_Comm[]){MPI_COMM_WORLD}), MPI_ERR_COMM);

    /* Arguments of point-to-point. */
    EXPECT(MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT(MPI_Send(&x, 1, MPI_INT, -7, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT(MPI_Send(&x, 1, MPI_INT, 0, -5, MPI_COMM_WORLD), MPI_ERR_TAG);
    EXPECT(MPI_Recv(&x, 1, MPI_INT, 0, -5, MPI_COMM_WORLD, &st), MPI_ERR_TAG);
    EXPECT(MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Send(NULL, 4, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    EXPECT(MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Send(&x, 1, (MPI_Datatype)(intptr_t)0x7777, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Isend(&x, 1, MPI_INT, 0, 0, MPI_COMM_NULL, &req), MPI_ERR_COMM);
    EXPECT(MPI_Comm_rank(MPI_COMM_WORLD, NULL), MPI_ERR_ARG);

    /* A receive too small for what came: truncation, on the common path (predefined
     * communicator and type) and on the general one (a derived type), the sender unharmed. */
    {
        int two[2] = {7, 8}, one[2] = {0, -1};
        MPI_Request s;
        MPI_Datatype one_int;
        OK(MPI_Type_contiguous(1, MPI_INT, &one_int));
        OK(MPI_Type_commit(&one_int));
        for (int k = 0; k < 2; k++) {
            OK(MPI_Isend(two, 2, MPI_INT, rank, 41, MPI_COMM_WORLD, &s));
            EXPECT(MPI_Recv(one, 1, k ? one_int : MPI_INT, rank, 41, MPI_COMM_WORLD, &st),
                   MPI_ERR_TRUNCATE);
            OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
            CHECK(one[1] == -1, "a truncated receive wrote past its buffer");
        }
        OK(MPI_Type_free(&one_int));
        /* A receive larger than the message, on MPI_COMM_SELF: the count is what came. */
        int got = -1, big[4] = {0};
        OK(MPI_Isend(two, 2, MPI_INT, 0, 42, MPI_COMM_SELF, &s));
        OK(MPI_Recv(big, 4, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &st));
        OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        OK(MPI_Get_count(&st, MPI_INT, &got));
        CHECK(got == 2 && big[0] == 7 && big[1] == 8 && big[2] == 0, "self receive: %d", got);
        CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 42, "self status %d %d", st.MPI_SOURCE,
              st.MPI_TAG);
        /* Zero elements from a null buffer are a message, on both paths. */
        OK(MPI_Send(NULL, 0, MPI_INT, rank, 43, MPI_COMM_WORLD));
        OK(MPI_Recv(NULL, 0, MPI_INT, rank, 43, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_INT, &got));
        CHECK(got == 0 && st.MPI_TAG == 43, "empty message: count %d tag %d", got, st.MPI_TAG);
        /* A pair type (a gap in its layout) takes the general path and arrives whole. */
        struct { float v; int i; } fi[2] = {{1.5f, 3}, {2.5f, 4}}, fo[2] = {{0, 0}, {0, 0}};
        OK(MPI_Isend(fi, 2, MPI_FLOAT_INT, rank, 44, MPI_COMM_WORLD, &s));
        OK(MPI_Recv(fo, 2, MPI_FLOAT_INT, rank, 44, MPI_COMM_WORLD, &st));
        OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        CHECK(fo[1].v == 2.5f && fo[1].i == 4, "float-int pair");
    }

    /* Requests. */
    MPI_Request bogus = (MPI_Request)(intptr_t)0x4321;
    EXPECT(MPI_Wait(&bogus, &st), MPI_ERR_REQUEST);
    EXPECT(MPI_Test(&bogus, &flag, &st), MPI_ERR_REQUEST);
    MPI_Request nul = MPI_REQUEST_NULL;
    OK(MPI_Wait(&nul, &st));
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG, "empty status");
    EXPECT(MPI_Request_free(&nul), MPI_ERR_REQUEST);
    EXPECT(MPI_Start(&nul), MPI_ERR_REQUEST);

    /* Truncation: the message is consumed and the class is MPI_ERR_TRUNCATE. */
    int big[4] = {1, 2, 3, 4}, small[2];
    int me = rank;
    OK(MPI_Isend(big, 4, MPI_INT, me, 77, MPI_COMM_WORLD, &req));
    EXPECT(MPI_Recv(small, 2, MPI_INT, me, 77, MPI_COMM_WORLD, &st), MPI_ERR_TRUNCATE);
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    OK(MPI_Iprobe(me, 77, MPI_COMM_WORLD, &flag, &st));
    CHECK(!flag, "the truncated message is still there");
    /* The same through a non-blocking receive (posted before, and after, the message came):
     * the wait reports it, and what fits is not written past. */
    for (int posted_first = 0; posted_first < 2; posted_first++) {
        int dst[3] = {-1, -1, -1};
        MPI_Request rr;
        if (posted_first) {
            OK(MPI_Irecv(dst, 2, MPI_INT, me, 78, MPI_COMM_WORLD, &rr));
            OK(MPI_Isend(big, 4, MPI_INT, me, 78, MPI_COMM_WORLD, &req));
        } else {
            OK(MPI_Isend(big, 4, MPI_INT, me, 78, MPI_COMM_WORLD, &req));
            OK(MPI_Irecv(dst, 2, MPI_INT, me, 78, MPI_COMM_WORLD, &rr));
        }
        EXPECT(MPI_Wait(&rr, &st), MPI_ERR_TRUNCATE);
        CHECK(dst[2] == -1, "a truncated receive wrote past its buffer");
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    }

    /* Info, keyvals, errhandlers, error codes. */
    EXPECT(MPI_Info_set(MPI_INFO_NULL, "a", "b"), MPI_ERR_INFO);
    MPI_Info info;
    OK(MPI_Info_create(&info));
    EXPECT(MPI_Info_delete(info, "missing"), MPI_ERR_INFO_NOKEY);
    EXPECT(MPI_Info_set(info, "", "b"), MPI_ERR_INFO_KEY);
    OK(MPI_Info_free(&info));
    EXPECT(MPI_Comm_set_attr(MPI_COMM_WORLD, 424242, &x), MPI_ERR_KEYVAL);
    EXPECT(MPI_Comm_set_errhandler(MPI_COMM_WORLD, (MPI_Errhandler)(intptr_t)0x99), MPI_ERR_ERRHANDLER);
    EXPECT(MPI_Error_class(123456, &x), MPI_ERR_ARG);
    EXPECT(MPI_Group_incl(MPI_GROUP_EMPTY, 1, (int[]){0}, &g), MPI_ERR_RANK);

    /* A function not built yet: its class, through the communicator's handler. */
    EXPECT(MPI_Win_fence(0, MPI_WIN_NULL), MPI_ERR_UNSUPPORTED_OPERATION);
    /* Through a user handler of the communicator passed first. */
    MPI_Errhandler eh;
    OK(MPI_Comm_create_errhandler(on_error, &eh));
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    OK(MPI_Comm_set_errhandler(d, eh));
    MPI_Group rg;
    int rc = MPI_Comm_remote_group(d, &rg);
    CHECK(rc == MPI_ERR_UNSUPPORTED_OPERATION && seen == rc && seen_comm == d, "stub rc %d seen %d", rc, seen);
    OK(MPI_Comm_free(&d));
    OK(MPI_Errhandler_free(&eh));
    EXPECT(MPI_Comm_connect("x", MPI_INFO_NULL, 0, MPI_COMM_WORLD, &d), MPI_ERR_UNSUPPORTED_OPERATION);

    p2p_barrier(MPI_COMM_WORLD);
    printf("PASS errors rank %d of %d\n", rank, size);
    OK(MPI_Finalize());
    return 0;
}
