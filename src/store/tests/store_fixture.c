/* The store tests' shared fixture (store_fixture.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include <sqlite3.h>

#include "base/base.h"
#include "store_fixture.h"

int setup_dir(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/kn-store-test-XXXXXX");
	if (!mkdtemp(fx->dir)) {
		free(fx);
		return -1;
	}
	snprintf(fx->path, sizeof(fx->path), "%s/kiln.db", fx->dir);
	*state = fx;
	return 0;
}

int setup_store(void **state)
{
	struct fixture *fx;
	struct kn_error err = {0};

	if (setup_dir(state) < 0)
		return -1;
	fx = *state;
	if (kn_store_open(fx->path, &fx->st, &err) < 0) {
		fprintf(stderr, "open: %s\n", err.message);
		return -1;
	}
	return 0;
}

int teardown(void **state)
{
	struct fixture *fx = *state;

	kn_store_free(fx->st);
	kn_rm_rf(fx->dir);
	free(fx);
	return 0;
}

void raw_exec(const char *path, const char *sql)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

struct kn_job_row sample_job(const char *name, const char *owner)
{
	struct kn_job_row j = {
		.name = (char *)name,
		.owner = (char *)owner,
		.state = KN_JOB_QUEUED,
		.priority = 10,
		.tasks = 2,
		.filename = (char *)"train.yaml",
		.spec_yaml = (char *)"kind: Job\n",
		.spec_json = (char *)"{\"kind\":\"Job\"}",
		.submitted_at = 1000,
		.exit_code = -1,
	};
	return j;
}

struct kn_audit sample_audit(const char *actor, const char *action,
				    const char *object, int64_t time_ms)
{
	struct kn_audit a = {
		.time_ms = time_ms,
		.actor = (char *)actor,
		.role = (char *)"user",
		.action = (char *)action,
		.object = (char *)object,
		.outcome = (char *)"ok",
	};
	return a;
}

int64_t insert_job(struct kn_store *st, const char *name,
			  const char *owner, enum kn_job_state s)
{
	struct kn_job_row j = sample_job(name, owner);
	struct kn_error err = {0};
	int64_t id = 0;

	j.state = s;
	assert_int_equal(kn_store_job_insert(st, &j, NULL, &id, &err), 0);
	return id;
}

size_t audit_count(struct kn_store *st)
{
	struct kn_audit_filter f = {.limit = 100000};
	struct kn_audit *rows = NULL;
	size_t n = 0;

	assert_int_equal(kn_store_audit_list(st, &f, &rows, &n, NULL), 0);
	kn_audit_list_free(rows, n);
	return n;
}
