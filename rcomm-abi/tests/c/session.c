/* Sessions without MPI_Init: process sets, their info and groups, communicators from groups
 * (used for a reduction checked here), session info and error handlers; then removing
 * added error classes, codes and strings. */
#include "check.h"

static int called, called_code;

static void on_error(MPI_Session *s, int *code, ...) {
    (void)s;
    called++;
    called_code = *code;
}

static int info_int(MPI_Info info, const char *key) {
    char v[64];
    int flag = 0;
    OK(MPI_Info_get_string(info, key, &(int){sizeof v}, v, &flag));
    CHECK(flag, "no %s", key);
    return atoi(v);
}

static void test_session(void) {
    MPI_Session s;
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    int np = 0;
    OK(MPI_Session_get_num_psets(s, MPI_INFO_NULL, &np));
    CHECK(np == 2);
    const char *want[2] = {"mpi://WORLD", "mpi://SELF"};
    for (int i = 0; i < np; i++) {
        int len = 0;
        char name[64];
        OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, NULL));
        CHECK(len == (int)strlen(want[i]) + 1, "len %d", len);
        OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, name));
        CHECK(strcmp(name, want[i]) == 0, "pset %d is %s", i, name);
    }

    MPI_Info info;
    OK(MPI_Session_get_pset_info(s, "mpi://WORLD", &info));
    int n = info_int(info, "mpi_size");
    OK(MPI_Info_free(&info));
    OK(MPI_Session_get_pset_info(s, "mpi://SELF", &info));
    CHECK(info_int(info, "mpi_size") == 1);
    OK(MPI_Info_free(&info));

    MPI_Group g;
    MPI_Comm c;
    int size, me, sum;
    OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    OK(MPI_Group_size(g, &size));
    CHECK(size == n);
    OK(MPI_Comm_create_from_group(g, "org.rcomm.test", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
    OK(MPI_Group_free(&g));
    OK(MPI_Comm_size(c, &size));
    OK(MPI_Comm_rank(c, &me));
    CHECK(size == n);
    OK(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, c));
    CHECK(sum == n * (n - 1) / 2);
    MPI_Errhandler eh;
    OK(MPI_Comm_get_errhandler(c, &eh));
    CHECK(eh == MPI_ERRORS_RETURN);
    OK(MPI_Comm_free(&c));

    OK(MPI_Group_from_session_pset(s, "mpi://SELF", &g));
    OK(MPI_Comm_create_from_group(g, "org.rcomm.self", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
    OK(MPI_Group_free(&g));
    OK(MPI_Comm_size(c, &size));
    CHECK(size == 1);

    /* The session's buffer serves buffered sends on a communicator made from its group (no
     * other buffer is attached); detach gives back what was attached. */
    {
        static char sbuf[2 * (64 + MPI_BSEND_OVERHEAD)];
        int out[16], in[16], bsize = -1, cls2;
        void *addr = NULL;
        for (int i = 0; i < 16; i++) out[i] = 100 + i;
        OK(MPI_Session_attach_buffer(s, sbuf, (int)sizeof sbuf));
        OK(MPI_Bsend(out, 16, MPI_INT, 0, 5, c));
        OK(MPI_Recv(in, 16, MPI_INT, 0, 5, c, MPI_STATUS_IGNORE));
        CHECK(in[15] == 115, "session bsend");
        int rc2 = MPI_Bsend(sbuf, (int)sizeof sbuf, MPI_BYTE, 0, 6, c);
        MPI_Error_class(rc2, &cls2);
        CHECK(cls2 == MPI_ERR_BUFFER, "a bsend larger than the session buffer: class %d", cls2);
        OK(MPI_Session_flush_buffer(s));
        MPI_Request fr;
        OK(MPI_Session_iflush_buffer(s, &fr));
        OK(MPI_Wait(&fr, MPI_STATUS_IGNORE));
        OK(MPI_Session_detach_buffer(s, &addr, &bsize));
        CHECK(addr == sbuf && bsize == (int)sizeof sbuf, "session detach %p %d", addr, bsize);
        rc2 = MPI_Session_detach_buffer(s, &addr, &bsize);
        MPI_Error_class(rc2, &cls2);
        CHECK(cls2 == MPI_ERR_BUFFER, "a second session detach: class %d", cls2);
    }
    OK(MPI_Comm_free(&c));

    char v[64];
    int flag = 0;
    OK(MPI_Session_get_info(s, &info));
    OK(MPI_Info_get_string(info, "mpi_thread_support_level", &(int){sizeof v}, v, &flag));
    CHECK(flag && strncmp(v, "MPI_THREAD_", 11) == 0, "level %s", v);
    OK(MPI_Info_free(&info));

    /* errors go to the session's handler: returned, then a user one */
    int cls, rc = MPI_Group_from_session_pset(s, "mpi://NOWHERE", &g);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "class %d", cls);
    MPI_Errhandler mine;
    OK(MPI_Session_create_errhandler(on_error, &mine));
    OK(MPI_Session_set_errhandler(s, mine));
    OK(MPI_Session_get_errhandler(s, &eh));
    CHECK(eh == mine);
    rc = MPI_Session_get_nth_pset(s, MPI_INFO_NULL, 5, &(int){0}, NULL);
    CHECK(rc != MPI_SUCCESS && called == 1 && called_code == rc, "rc %d called %d", rc, called);
    OK(MPI_Session_call_errhandler(s, MPI_ERR_OTHER));
    CHECK(called == 2 && called_code == MPI_ERR_OTHER);
    OK(MPI_Session_set_errhandler(s, MPI_ERRORS_RETURN));
    OK(MPI_Errhandler_free(&mine));

    /* added classes, codes and strings, removed again */
    int klass, code, len;
    char str[MPI_MAX_ERROR_STRING];
    OK(MPI_Add_error_class(&klass));
    OK(MPI_Add_error_code(klass, &code));
    OK(MPI_Add_error_string(code, "my code"));
    OK(MPI_Error_string(code, str, &len));
    CHECK(strcmp(str, "my code") == 0);
    OK(MPI_Remove_error_string(code));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    rc = MPI_Remove_error_string(code);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "a second removal: class %d", cls);
    rc = MPI_Remove_error_class(klass);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "a class with a code: class %d", cls);
    rc = MPI_Remove_error_class(MPI_ERR_OTHER);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "a standard class: class %d", cls);
    OK(MPI_Add_error_string(code, "again"));
    rc = MPI_Remove_error_code(code);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "a code with its string: class %d", cls);
    OK(MPI_Remove_error_string(code));
    OK(MPI_Remove_error_code(code));
    OK(MPI_Add_error_string(klass, "a class"));
    rc = MPI_Remove_error_class(klass);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "a class with its string: class %d", cls);
    OK(MPI_Remove_error_string(klass));
    OK(MPI_Remove_error_class(klass));
    rc = MPI_Add_error_code(klass, &code);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "a removed class: class %d", cls);

    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    printf("PASS session rank %d of %d\n", me, n);
    fflush(stdout);
    OK(MPI_Session_finalize(&s));
    CHECK(s == MPI_SESSION_NULL);
}

int main(void) {
    test_session();
    return 0;
}
