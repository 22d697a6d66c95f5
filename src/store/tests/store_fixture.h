/*
 * What the store's unit tests share: a fresh database file in its own
 * temporary directory per test, and sample rows.
 */
#ifndef KN_STORE_TEST_FIXTURE_H
#define KN_STORE_TEST_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

struct fixture {
	char dir[64];
	char path[128];
	struct kn_store *st; /* NULL until setup_store, freed by teardown */
};

/* cmocka setups: an empty directory, or one with an open store. */
int setup_dir(void **state);
int setup_store(void **state);
/* Frees the store and removes the directory. */
int teardown(void **state);

/* Run one SQL text on the file through a separate connection. */
void raw_exec(const char *path, const char *sql);
struct kn_job_row sample_job(const char *name, const char *owner);
struct kn_audit sample_audit(const char *actor, const char *action,
			     const char *object, int64_t time_ms);
/* Insert a sample job in state s; its id. */
int64_t insert_job(struct kn_store *st, const char *name, const char *owner,
		   enum kn_job_state s);
size_t audit_count(struct kn_store *st);

#endif
