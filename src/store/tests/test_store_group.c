/*
 * Unit tests for the store's group commit: members' writes share one
 * COMMIT and are seen by another connection only after it, a member's
 * rollback undoes only its own writes, a write from outside the group
 * commits the group first, and a group cannot start inside a transaction.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/tests/testmain.h"
#include "store_fixture.h"

static int commits_seen;

static void count_commit(void *arg, double seconds)
{
	(void)arg;
	(void)seconds;
	commits_seen++;
}

/* setup_store, with every commit counted from 0. */
static int setup_counting(void **state)
{
	struct fixture *fx;

	if (setup_store(state) != 0)
		return -1;
	fx = *state;
	kn_store_on_commit(fx->st, count_commit, NULL);
	commits_seen = 0;
	return 0;
}

/* Queued jobs as a second connection (another thread's) sees them. */
static int64_t queued_seen(const char *path)
{
	struct kn_store *reader = NULL;
	struct kn_job_totals t;
	struct kn_error err = {0};

	assert_int_equal(kn_store_open_reader(path, &reader, &err), 0);
	assert_int_equal(kn_store_job_totals(reader, &t, &err), 0);
	kn_store_free(reader);
	return t.by_state[KN_JOB_QUEUED];
}

/* One job inserted by one member, kept or undone. */
static void member_insert(struct kn_store *st, const char *name, bool keep)
{
	struct kn_error err = {0};

	assert_int_equal(kn_store_group_begin(st, &err), 0);
	insert_job(st, name, "alice", KN_JOB_QUEUED);
	kn_store_group_end(st, keep);
}

static void test_members_share_one_commit(void **state)
{
	struct fixture *fx = *state;
	struct kn_error err = {0};

	for (int i = 0; i < 5; i++)
		member_insert(fx->st, "m", true);
	assert_true(kn_store_group_open(fx->st));
	/* Nothing is durable, nor visible elsewhere, before the commit. */
	assert_int_equal(commits_seen, 0);
	assert_int_equal(queued_seen(fx->path), 0);
	assert_int_equal(kn_store_group_commit(fx->st, &err), 0);
	assert_int_equal(commits_seen, 1);
	assert_false(kn_store_group_open(fx->st));
	assert_int_equal(queued_seen(fx->path), 5);
	/* Nothing open: nothing to commit. */
	assert_int_equal(kn_store_group_commit(fx->st, &err), 0);
	assert_int_equal(commits_seen, 1);
}

static void test_member_rollback_undoes_only_its_own(void **state)
{
	struct fixture *fx = *state;
	struct kn_job_filter f = {.state = -1};
	struct kn_job_row *rows = NULL;
	struct kn_error err = {0};
	size_t n = 0;

	member_insert(fx->st, "kept-1", true);
	member_insert(fx->st, "undone", false);
	member_insert(fx->st, "kept-2", true);
	assert_int_equal(kn_store_group_commit(fx->st, &err), 0);
	assert_int_equal(kn_store_job_list(fx->st, &f, &rows, &n, &err), 0);
	assert_int_equal(n, 2);
	for (size_t i = 0; i < n; i++)
		assert_null(strstr(rows[i].name, "undone"));
	kn_job_list_free(rows, n);
}

static void test_outside_write_commits_the_group_first(void **state)
{
	struct fixture *fx = *state;
	struct kn_error err = {0};

	member_insert(fx->st, "member", true);
	/* Another caller's write is durable when its call returns: the
	   group's commit comes first, then its own. */
	insert_job(fx->st, "outside", "bob", KN_JOB_QUEUED);
	assert_int_equal(commits_seen, 2);
	assert_false(kn_store_group_open(fx->st));
	assert_int_equal(queued_seen(fx->path), 2);
	/* So does another caller's transaction. */
	member_insert(fx->st, "member-2", true);
	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(commits_seen, 3);
	assert_int_equal(queued_seen(fx->path), 3);
	kn_store_rollback(fx->st);
	/* The early commit's result is the group's answer, once. */
	assert_int_equal(kn_store_group_commit(fx->st, &err), 0);
	assert_int_equal(commits_seen, 3);
}

static void test_group_refused_inside_a_transaction(void **state)
{
	struct fixture *fx = *state;
	struct kn_error err = {0};

	assert_int_equal(kn_store_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_group_begin(fx->st, &err), -EINVAL);
	assert_int_equal(err.code, KN_EINVAL);
	kn_store_rollback(fx->st);
	/* Nor may a member start another member. */
	assert_int_equal(kn_store_group_begin(fx->st, &err), 0);
	assert_int_equal(kn_store_group_begin(fx->st, &err), -EINVAL);
	kn_store_group_end(fx->st, true);
	assert_int_equal(kn_store_group_commit(fx->st, &err), 0);
}

static void test_free_commits_an_open_group(void **state)
{
	struct fixture *fx = *state;
	struct kn_error err = {0};

	member_insert(fx->st, "at-exit", true);
	kn_store_free(fx->st);
	fx->st = NULL;
	assert_int_equal(queued_seen(fx->path), 1);
	assert_int_equal(kn_store_open(fx->path, &fx->st, &err), 0);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test_setup_teardown(test_members_share_one_commit,
					setup_counting, teardown),
	cmocka_unit_test_setup_teardown(
		test_member_rollback_undoes_only_its_own, setup_store,
		teardown),
	cmocka_unit_test_setup_teardown(
		test_outside_write_commits_the_group_first,
		setup_counting, teardown),
	cmocka_unit_test_setup_teardown(
		test_group_refused_inside_a_transaction, setup_store,
		teardown),
	cmocka_unit_test_setup_teardown(test_free_commits_an_open_group,
					setup_store, teardown))
