/* Communicators, groups, attributes, info, error handlers and the environment through the C
 * ABI, checked against what each rank computes. Any number of ranks. */
#include "check.h"

static int rank, size;
static int copies, deletes;

static int copy_fn(MPI_Comm c, int key, void *extra, void *in, void *out, int *flag) {
    (void)c; (void)key;
    CHECK(extra == (void *)&copies, "extra_state");
    *(long *)out = (long)in + 1; /* the copy is one more */
    *flag = 1;
    copies++;
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Comm c, int key, void *val, void *extra) {
    (void)c; (void)key; (void)val; (void)extra;
    deletes++;
    return MPI_SUCCESS;
}

static int handler_calls, handler_code;
static void handler(MPI_Comm *c, int *code, ...) {
    (void)c;
    handler_calls++;
    handler_code = *code;
}

static void communicators(void) {
    MPI_Comm dup, half, self_split, created, grouped;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    int r, n, cmp;
    OK(MPI_Comm_rank(dup, &r));
    OK(MPI_Comm_size(dup, &n));
    CHECK(r == rank && n == size, "dup rank %d size %d", r, n);
    OK(MPI_Comm_compare(dup, MPI_COMM_WORLD, &cmp));
    CHECK(cmp == MPI_CONGRUENT, "compare dup %d", cmp);
    OK(MPI_Comm_compare(dup, dup, &cmp));
    CHECK(cmp == MPI_IDENT, "compare self %d", cmp);

    /* Split by parity, reversed order within each part. */
    OK(MPI_Comm_split(dup, rank % 2, -rank, &half));
    OK(MPI_Comm_rank(half, &r));
    OK(MPI_Comm_size(half, &n));
    int want_n = (size + 1 - rank % 2) / 2;
    CHECK(n == want_n, "split size %d want %d", n, want_n);
    CHECK(r == want_n - 1 - rank / 2, "split rank %d", r);
    /* A message on the half communicator stays there. */
    int token = rank, got = -1;
    OK(MPI_Sendrecv(&token, 1, MPI_INT, (r + 1) % n, 0, &got, 1, MPI_INT, (r + n - 1) % n, 0, half, MPI_STATUS_IGNORE));
    int prev_in_half_world = rank + 2 * ((r == n - 1) ? (n - 1) : -1);
    CHECK(n == 1 ? got == rank : got == prev_in_half_world, "half ring got %d", got);

    OK(MPI_Comm_split(dup, rank == 0 ? 0 : MPI_UNDEFINED, 0, &self_split));
    CHECK((rank == 0) == (self_split != MPI_COMM_NULL), "undefined color");
    if (self_split != MPI_COMM_NULL) OK(MPI_Comm_free(&self_split));

    MPI_Comm node;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    OK(MPI_Comm_size(node, &n));
    CHECK(n == size, "one node: shared split size %d", n);
    OK(MPI_Comm_free(&node));

    /* Guided splits go by the resource the info names (the node, mpi_shared_memory, is the
     * one rcomm knows); the unguided one only to something strictly smaller, here nothing.
     * Ranks passing MPI_UNDEFINED beside them take part in the same collectives. */
    MPI_Info hw;
    OK(MPI_Info_create(&hw));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, hw, &node));
    CHECK(node == MPI_COMM_NULL, "guided split without a resource");
    OK(MPI_Info_set(hw, "mpi_hw_resource_type", "no-such-resource"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, hw, &node));
    CHECK(node == MPI_COMM_NULL, "guided split by an unknown resource");
    OK(MPI_Info_set(hw, "mpi_hw_resource_type", "mpi_shared_memory"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, rank == 0 ? MPI_COMM_TYPE_HW_GUIDED : MPI_UNDEFINED,
                           0, hw, &node));
    CHECK((rank == 0) == (node != MPI_COMM_NULL), "guided split beside MPI_UNDEFINED");
    if (node != MPI_COMM_NULL) {
        OK(MPI_Comm_size(node, &n));
        CHECK(n == 1, "guided split of one rank: size %d", n);
        OK(MPI_Comm_free(&node));
    }
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, 0, hw, &node));
    CHECK(node == MPI_COMM_NULL, "one node: nothing smaller to split into");
    OK(MPI_Info_free(&hw));

    /* Groups: the even ranks, reversed. */
    MPI_Group world_g, evens, rev, u, i, d;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world_g));
    int ne = (size + 1) / 2, ranks[64];
    for (int k = 0; k < ne; k++) ranks[k] = 2 * (ne - 1 - k);
    OK(MPI_Group_incl(world_g, ne, ranks, &rev));
    int range[1][3] = {{0, size - 1, 2}};
    OK(MPI_Group_range_incl(world_g, 1, range, &evens));
    OK(MPI_Group_size(evens, &n));
    CHECK(n == ne, "range_incl size %d", n);
    OK(MPI_Group_compare(evens, rev, &cmp));
    CHECK(cmp == (ne == 1 ? MPI_IDENT : MPI_SIMILAR), "group compare %d", cmp);
    OK(MPI_Group_rank(rev, &r));
    CHECK(r == (rank % 2 ? MPI_UNDEFINED : ne - 1 - rank / 2), "group rank %d", r);
    int t_in[1] = {0}, t_out[1];
    OK(MPI_Group_translate_ranks(rev, 1, t_in, world_g, t_out));
    CHECK(t_out[0] == 2 * (ne - 1), "translate %d", t_out[0]);
    OK(MPI_Group_union(evens, world_g, &u));
    OK(MPI_Group_size(u, &n));
    CHECK(n == size, "union %d", n);
    OK(MPI_Group_intersection(evens, world_g, &i));
    OK(MPI_Group_compare(i, evens, &cmp));
    CHECK(cmp == MPI_IDENT, "intersection %d", cmp);
    OK(MPI_Group_difference(world_g, evens, &d));
    OK(MPI_Group_size(d, &n));
    CHECK(n == size - ne, "difference %d", n);
    MPI_Group odd;
    OK(MPI_Group_excl(world_g, ne, ranks, &odd));
    OK(MPI_Group_compare(odd, d, &cmp));
    CHECK(cmp == MPI_IDENT || (size == 1 && odd == MPI_GROUP_EMPTY), "excl %d", cmp);

    OK(MPI_Comm_create(MPI_COMM_WORLD, rev, &created));
    CHECK((rank % 2 == 0) == (created != MPI_COMM_NULL), "create membership");
    if (created != MPI_COMM_NULL) {
        OK(MPI_Comm_rank(created, &r));
        CHECK(r == ne - 1 - rank / 2, "created rank %d", r);
        OK(MPI_Comm_free(&created));
        CHECK(created == MPI_COMM_NULL, "free sets null");
    }
    if (rank % 2 == 0) {
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, evens, 5, &grouped));
        OK(MPI_Comm_size(grouped, &n));
        CHECK(n == ne, "create_group size %d", n);
        OK(MPI_Comm_free(&grouped));
    }
    MPI_Group gs[] = {world_g, evens, rev, u, i, d, odd};
    for (unsigned k = 0; k < sizeof gs / sizeof gs[0]; k++) OK(MPI_Group_free(&gs[k]));

    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Comm_set_name(half, "half"));
    OK(MPI_Comm_get_name(half, name, &len));
    CHECK(len == 4 && strcmp(name, "half") == 0, "name %s", name);
    OK(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0, "world name %s", name);
    int inter;
    OK(MPI_Comm_test_inter(half, &inter));
    CHECK(!inter, "test_inter");
    OK(MPI_Comm_free(&half));
    OK(MPI_Comm_free(&dup));
}

static void attributes(void) {
    int key;
    OK(MPI_Comm_create_keyval(copy_fn, delete_fn, &key, &copies));
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, key, (void *)41L));
    MPI_Comm d;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    long v = 0;
    int flag;
    OK(MPI_Comm_get_attr(d, key, &v, &flag));
    CHECK(flag && v == 42 && copies == 1, "copied %ld flag %d copies %d", v, flag, copies);
    OK(MPI_Comm_free(&d));
    CHECK(deletes == 1, "deletes %d", deletes);
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, key));
    CHECK(deletes == 2, "deletes %d", deletes);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, key, &v, &flag));
    CHECK(!flag, "deleted attribute still there");
    OK(MPI_Comm_free_keyval(&key));
    CHECK(key == MPI_KEYVAL_INVALID, "keyval not reset");

    int *tag_ub;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag));
    CHECK(flag && *tag_ub >= 32767, "tag_ub");
    int *wtime_global;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &wtime_global, &flag));
    CHECK(flag && (*wtime_global == 0 || *wtime_global == 1), "wtime_is_global");
    int *usize;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &usize, &flag));
    CHECK(flag && *usize == size, "universe size");
}

static void info(void) {
    MPI_Info in, dup;
    OK(MPI_Info_create(&in));
    OK(MPI_Info_set(in, "alpha", "1"));
    OK(MPI_Info_set(in, "beta", "two"));
    OK(MPI_Info_set(in, "alpha", "one"));
    int n, flag, len = 16;
    OK(MPI_Info_get_nkeys(in, &n));
    CHECK(n == 2, "nkeys %d", n);
    char key[MPI_MAX_INFO_KEY], val[16];
    OK(MPI_Info_get_nthkey(in, 1, key));
    CHECK(strcmp(key, "beta") == 0, "nthkey %s", key);
    OK(MPI_Info_get_string(in, "alpha", &len, val, &flag));
    CHECK(flag && strcmp(val, "one") == 0 && len == 4, "get_string %s %d", val, len);
    OK(MPI_Info_dup(in, &dup));
    OK(MPI_Info_delete(in, "alpha"));
    OK(MPI_Info_get_nkeys(in, &n));
    CHECK(n == 1, "after delete %d", n);
    len = 16;
    OK(MPI_Info_get_string(dup, "alpha", &len, val, &flag));
    CHECK(flag, "dup lost a key");
    OK(MPI_Info_free(&in));
    OK(MPI_Info_free(&dup));
    CHECK(in == MPI_INFO_NULL, "free sets null");
    len = 0;
    OK(MPI_Info_get_string(MPI_INFO_ENV, "command", &len, val, &flag));
    CHECK(flag && len > 1, "MPI_INFO_ENV command");
}

static void errors_and_env(void) {
    MPI_Errhandler eh;
    OK(MPI_Comm_create_errhandler(handler, &eh));
    MPI_Comm d;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    OK(MPI_Comm_set_errhandler(d, eh));
    int dummy = 0;
    int rc = MPI_Send(&dummy, 1, MPI_INT, size + 5, 0, d);
    CHECK(rc == MPI_ERR_RANK && handler_calls == 1 && handler_code == MPI_ERR_RANK, "user handler rc %d calls %d", rc, handler_calls);
    OK(MPI_Comm_call_errhandler(d, MPI_ERR_OTHER));
    CHECK(handler_calls == 2 && handler_code == MPI_ERR_OTHER, "call_errhandler");
    MPI_Errhandler got;
    OK(MPI_Comm_get_errhandler(d, &got));
    CHECK(got == eh, "get_errhandler");
    OK(MPI_Errhandler_free(&eh));
    CHECK(eh == MPI_ERRHANDLER_NULL, "errhandler free");
    OK(MPI_Comm_free(&d));

    int cls, len, myclass, mycode;
    char s[MPI_MAX_ERROR_STRING];
    OK(MPI_Error_class(MPI_ERR_TRUNCATE, &cls));
    CHECK(cls == MPI_ERR_TRUNCATE, "class");
    OK(MPI_Error_string(MPI_ERR_TRUNCATE, s, &len));
    CHECK(len > 0 && strstr(s, "TRUNCATE"), "string %s", s);
    OK(MPI_Add_error_class(&myclass));
    OK(MPI_Add_error_code(myclass, &mycode));
    /* Until a string is added, an added class's or code's string is empty. */
    len = -1;
    OK(MPI_Error_string(myclass, s, &len));
    CHECK(len == 0 && s[0] == 0, "added class without a string: %d", len);
    OK(MPI_Add_error_string(mycode, "my error"));
    OK(MPI_Error_class(mycode, &cls));
    CHECK(cls == myclass && myclass > MPI_ERR_LASTCODE, "added class %d code %d", myclass, mycode);
    OK(MPI_Error_string(mycode, s, &len));
    CHECK(strcmp(s, "my error") == 0, "added string %s", s);
    int *last, flag;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag));
    CHECK(flag && *last == mycode, "lastusedcode %d", *last);

    int v, sv, maj, min;
    OK(MPI_Get_version(&v, &sv));
    CHECK(v == MPI_VERSION && sv == MPI_SUBVERSION, "version");
    OK(MPI_Abi_get_version(&maj, &min));
    CHECK(maj == 1 && min == 0, "abi version %d.%d", maj, min);
    MPI_Info fi = MPI_INFO_ENV, hw = MPI_INFO_NULL;
    OK(MPI_Abi_get_fortran_info(&fi));
    CHECK(fi == MPI_INFO_NULL, "no Fortran: MPI_INFO_NULL");
    OK(MPI_Get_hw_resource_info(&hw));
    char hv[8];
    int hflag = 0, hlen = (int)sizeof hv;
    OK(MPI_Info_get_string(hw, "mpi_shared_memory", &hlen, hv, &hflag));
    CHECK(hflag && strcmp(hv, "true") == 0, "hw resource info");
    OK(MPI_Info_free(&hw));
    char lib[MPI_MAX_LIBRARY_VERSION_STRING], host[MPI_MAX_PROCESSOR_NAME];
    OK(MPI_Get_library_version(lib, &len));
    CHECK(strstr(lib, "rcomm") != NULL, "library %s", lib);
    OK(MPI_Get_processor_name(host, &len));
    CHECK(len > 0 && (int)strlen(host) == len, "processor name");
    double t0 = MPI_Wtime(), tick = MPI_Wtick();
    CHECK(t0 > 0 && tick > 0 && tick < 1, "wtime %g wtick %g", t0, tick);
    CHECK(MPI_Aint_add(100, 28) == 128 && MPI_Aint_diff(100, 28) == 72, "aint");
    int flagi, is_main, provided;
    OK(MPI_Initialized(&flagi));
    CHECK(flagi, "initialized");
    OK(MPI_Is_thread_main(&is_main));
    CHECK(is_main, "thread main");
    OK(MPI_Query_thread(&provided));
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
    /* Handles survive a round trip through int. */
    CHECK(MPI_Comm_fromint(MPI_Comm_toint(MPI_COMM_WORLD)) == MPI_COMM_WORLD, "toint world");
    MPI_Comm d2;
    OK(MPI_Comm_dup(MPI_COMM_SELF, &d2));
    MPI_Comm back = MPI_Comm_fromint(MPI_Comm_toint(d2));
    OK(MPI_Comm_size(back, &v));
    CHECK(v == 1, "toint dup");
    OK(MPI_Comm_free(&d2));
    CHECK(MPI_Type_fromint(MPI_Type_toint(MPI_DOUBLE)) == MPI_DOUBLE, "toint type");
}

/* A generalized request: done only once the program says so; its query function gives the
 * status and the free function runs after it, both by the completing call. */
static int greq_calls;
static int greq_query(void *extra, MPI_Status *st) {
    greq_calls += *(int *)extra;
    MPI_Status_set_elements(st, MPI_BYTE, 7);
    MPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}
static int greq_free(void *extra) {
    greq_calls += 10 * *(int *)extra;
    return MPI_SUCCESS;
}
static int greq_cancel(void *extra, int complete) {
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

static void generalized_requests(void) {
    int one = 1, flag = 1, count = 0;
    MPI_Request req;
    MPI_Status st;
    OK(MPI_Grequest_start(greq_query, greq_free, greq_cancel, &one, &req));
    OK(MPI_Test(&req, &flag, &st));
    CHECK(!flag && greq_calls == 0, "not complete yet: flag %d calls %d", flag, greq_calls);
    OK(MPI_Grequest_complete(req));
    OK(MPI_Wait(&req, &st));
    CHECK(req == MPI_REQUEST_NULL, "a completed generalized request is freed");
    CHECK(greq_calls == 11, "query then free, once each: %d", greq_calls);
    OK(MPI_Get_count(&st, MPI_BYTE, &count));
    CHECK(count == 7, "the query function's status: count %d", count);
}

int main(int argc, char **argv) {
    int provided;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    communicators();
    attributes();
    info();
    errors_and_env();
    generalized_requests();
    p2p_barrier(MPI_COMM_WORLD);
    printf("PASS comm rank %d of %d\n", rank, size);
    OK(MPI_Finalize());
    int fin;
    OK(MPI_Finalized(&fin));
    CHECK(fin, "finalized");
    return 0;
}
