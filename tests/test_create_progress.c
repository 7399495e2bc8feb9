/*
 * test_create_progress.c - qw_engine_create's progress callback and its
 * cancellation (issue 14): monotonic bytes up to done == total, reported on
 * the creating thread, the weight check counted as a second pass, and a
 * cancel at any point giving QW_ERR_CANCELLED with nothing leaked (the
 * ASan build runs this too) and the options still usable.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qwinfer.h"
#include "util/testutil.h"

typedef struct {
    int calls;
    uint64_t last_done, total;
    int monotonic, same_thread;
    pthread_t creator;
    int cancel_at_call;      /* 0: never */
} tracker;

static int on_progress(void *ud, uint64_t done, uint64_t total) {
    tracker *t = ud;
    t->calls++;
    if (done < t->last_done || done > total || (t->total && total != t->total)) t->monotonic = 0;
    if (!pthread_equal(pthread_self(), t->creator)) t->same_thread = 0;
    t->last_done = done;
    t->total = total;
    return t->cancel_at_call && t->calls == t->cancel_at_call;
}

static qw_status create(const char *dir, tracker *t, int check_weights, int numerics, qw_engine **e,
                        qw_engine_options **keep) {
    qw_engine_options *o;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_CHECK_WEIGHTS, check_weights), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUMERICS, numerics), QW_OK);
    if (t) {
        int at = t->cancel_at_call;
        memset(t, 0, sizeof *t);
        t->cancel_at_call = at;
        t->monotonic = t->same_thread = 1;
        t->creator = pthread_self();
        cr_assert_eq(qw_engine_options_set_progress(o, on_progress, t), QW_OK);
    }
    qw_status st = qw_engine_create(o, e);
    if (keep) *keep = o;
    else qw_engine_options_destroy(o);
    return st;
}

static char *model(void) {
    char *dir = qwt_model("create-progress-small", "--shape tiny --dtype bf16 --layers 4 --seed 9");
    cr_assert_not_null(dir);
    return dir;
}

Test(create_progress, reports_every_pass_to_done_equals_total) {
    char *dir = model();
    qw_engine *e = NULL;
    tracker with_check = {0}, without = {0};
    cr_assert_eq(create(dir, &with_check, 1, QW_NUMERICS_FAST, &e, NULL), QW_OK, "%s", qw_last_error());
    qw_engine_destroy(e);
    cr_assert_eq(create(dir, &without, 0, QW_NUMERICS_FAST, &e, NULL), QW_OK, "%s", qw_last_error());
    qw_engine_destroy(e);
    cr_assert(with_check.calls >= 4, "%d calls", with_check.calls);
    cr_assert(with_check.monotonic && with_check.same_thread);
    cr_assert_eq(with_check.last_done, with_check.total, "the last call has done == total");
    cr_assert(without.monotonic && without.same_thread);
    cr_assert_eq(without.last_done, without.total);
    cr_assert_eq(with_check.total, 2 * without.total, "the weight check is a second pass over the weights");
    /* exact numerics from the file mapping (no copy): still ends at total */
    tracker mm = {0};
    setenv("QWINFER_CPU_WEIGHTS", "mmap", 1);
    qw_status st = create(dir, &mm, 0, QW_NUMERICS_EXACT, &e, NULL);
    unsetenv("QWINFER_CPU_WEIGHTS");
    cr_assert_eq(st, QW_OK, "%s", qw_last_error());
    qw_engine_destroy(e);
    cr_assert(mm.calls >= 1 && mm.last_done == mm.total && mm.total == without.total);
    free(dir);
}

Test(create_progress, cancel_anywhere_fails_cleanly) {
    char *dir = model();
    qw_engine *e = (qw_engine *)0x1;
    tracker full = {0};
    cr_assert_eq(create(dir, &full, 1, QW_NUMERICS_FAST, &e, NULL), QW_OK);
    qw_engine_destroy(e);
    /* at the first report (in the weight check), in the packing, at the very end */
    int at[] = {1, full.calls / 2 + 1, full.calls};
    for (int i = 0; i < 3; i++) {
        tracker t = {0};
        t.cancel_at_call = at[i];
        qw_engine_options *o;
        e = (qw_engine *)0x1;
        cr_assert_eq(create(dir, &t, 1, QW_NUMERICS_FAST, &e, &o), QW_ERR_CANCELLED, "cancel at call %d", at[i]);
        cr_assert_null(e);
        cr_assert_eq(t.calls, at[i], "no call after the cancel");
        cr_assert(strstr(qw_last_error(), "cancelled"), "%s", qw_last_error());
        char buf[512];
        size_t len;
        cr_assert_eq(qw_engine_options_get_error(o, buf, sizeof buf, &len), QW_OK);
        cr_assert(strstr(buf, "cancelled"), "%s", buf);
        /* the same options create an engine once the callback lets it */
        cr_assert_eq(qw_engine_options_set_progress(o, NULL, NULL), QW_OK);
        cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
        qw_engine_destroy(e);
        qw_engine_options_destroy(o);
    }
    cr_assert_eq(qw_engine_options_set_progress(NULL, on_progress, NULL), QW_ERR_INVALID_ARGUMENT);
    cr_assert_str_eq(qw_status_string(QW_ERR_CANCELLED), "QW_ERR_CANCELLED: cancelled by the caller");
    free(dir);
}
