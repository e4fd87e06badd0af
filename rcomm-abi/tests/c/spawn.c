/* MPI_Comm_spawn: the parents (1-3 ranks) start two copies of this program; both sides
 * check the intercommunicator (test_inter, sizes, remote size), exchange values naming
 * remote ranks, pass a barrier on it, merge (parents first) and reduce over the merged
 * communicator. */
#define _DEFAULT_SOURCE
#include "check.h"
#include <unistd.h>

#define CHILDREN 2

static void check_merged(MPI_Comm ic, int high, int want_rank, int want_size) {
    MPI_Comm m;
    int r, s, sum, flag;
    OK(MPI_Intercomm_merge(ic, high, &m));
    OK(MPI_Comm_test_inter(m, &flag));
    CHECK(!flag);
    OK(MPI_Comm_rank(m, &r));
    OK(MPI_Comm_size(m, &s));
    CHECK(r == want_rank && s == want_size, "merged rank %d of %d", r, s);
    OK(MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, m));
    CHECK(sum == s * (s - 1) / 2);
    OK(MPI_Comm_free(&m));
}

static void parent_side(void) {
    int n, me, flag, rs, v;
    OK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    self[len] = 0;
    MPI_Comm ic;
    int errs[CHILDREN] = {-1, -1};
    OK(MPI_Comm_spawn(self, MPI_ARGV_NULL, CHILDREN, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &ic, errs));
    /* The error codes are an output on every parent, not only the root. */
    for (int j = 0; j < CHILDREN; j++) CHECK(errs[j] == MPI_SUCCESS, "errs[%d] %d", j, errs[j]);
    OK(MPI_Comm_test_inter(ic, &flag));
    CHECK(flag);
    OK(MPI_Comm_remote_size(ic, &rs));
    CHECK(rs == CHILDREN);
    OK(MPI_Comm_size(ic, &v));
    CHECK(v == n);
    OK(MPI_Comm_rank(ic, &v));
    CHECK(v == me);
    for (int j = 0; j < CHILDREN; j++) {
        int out = 1000 * me + j, in = -1;
        MPI_Status st;
        MPI_Request rq;
        OK(MPI_Send(&out, 1, MPI_INT, j, 7, ic));
        /* non-blocking here, blocking on the children's side: both name remote ranks */
        OK(MPI_Irecv(&in, 1, MPI_INT, j, 8, ic, &rq));
        OK(MPI_Wait(&rq, &st));
        CHECK(in == 100 * j + me && st.MPI_SOURCE == j, "in %d source %d", in, st.MPI_SOURCE);
    }
    /* a barrier spans both groups; other collectives on it are refused */
    /* The children enter 0.2 s after their last message: a barrier that waits for the other
     * group cannot return sooner (one that does not wait would). */
    double t0 = MPI_Wtime();
    OK(MPI_Barrier(ic));
    CHECK(MPI_Wtime() - t0 >= 0.1, "the barrier returned after %.3f s", MPI_Wtime() - t0);
    OK(MPI_Comm_set_errhandler(ic, MPI_ERRORS_RETURN));
    int cls, rc = MPI_Bcast(&v, 1, MPI_INT, MPI_ROOT, ic);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COMM, "class %d", cls);
    MPI_Group g;
    rc = MPI_Comm_group(ic, &g);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COMM, "class %d", cls);
    /* Calls not built for intercommunicators are refused, not run on the joint world
     * (local calls only: the children make none of these, so nothing collective is left). */
    MPI_Comm bad = MPI_COMM_NULL;
    rc = MPI_Comm_dup(ic, &bad);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COMM && bad == MPI_COMM_NULL, "dup: class %d", cls);
    rc = MPI_Comm_split(ic, 0, 0, &bad);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COMM && bad == MPI_COMM_NULL, "split: class %d", cls);
    int newrank;
    rc = MPI_Cart_map(ic, 1, (int[]){n}, (int[]){0}, &newrank);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COMM, "cart_map: class %d", cls);
    MPI_Message msg;
    rc = MPI_Improbe(0, 9, ic, &flag, &msg, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COMM, "improbe: class %d", cls);
    check_merged(ic, 0, me, n + CHILDREN);
    OK(MPI_Comm_free(&ic));
    printf("PASS spawn rank %d of %d\n", me, n);
}

static void child_side(MPI_Comm parent) {
    int n, me, flag, np, v;
    OK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    CHECK(n == CHILDREN);
    OK(MPI_Comm_test_inter(parent, &flag));
    CHECK(flag);
    OK(MPI_Comm_remote_size(parent, &np));
    OK(MPI_Comm_size(parent, &v));
    CHECK(v == CHILDREN);
    OK(MPI_Comm_rank(parent, &v));
    CHECK(v == me);
    MPI_Comm again;
    OK(MPI_Comm_get_parent(&again));
    CHECK(again == parent);
    for (int p = 0; p < np; p++) {
        int in = -1, out = 100 * me + p;
        MPI_Status st;
        OK(MPI_Recv(&in, 1, MPI_INT, p, 7, parent, &st));
        CHECK(in == 1000 * p + me && st.MPI_SOURCE == p, "in %d source %d", in, st.MPI_SOURCE);
        OK(MPI_Send(&out, 1, MPI_INT, p, 8, parent));
    }
    usleep(200000);
    OK(MPI_Barrier(parent));
    check_merged(parent, 1, np + me, np + CHILDREN);
    OK(MPI_Comm_free(&parent));
    OK(MPI_Comm_get_parent(&again));
    CHECK(again == MPI_COMM_NULL);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    OK(MPI_Init(&argc, &argv));
    MPI_Comm parent;
    OK(MPI_Comm_get_parent(&parent));
    if (parent == MPI_COMM_NULL)
        parent_side();
    else
        child_side(parent);
    OK(MPI_Finalize());
    return 0;
}
