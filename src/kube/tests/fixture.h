/*
 * What the kube unit tests share: the recorded API server objects under
 * tests/fixtures/kube (the directory is the test's argv[1]) and reading
 * values out of JSON by path. Each fails the running test rather than
 * return what it could not read.
 */
#ifndef KN_KUBE_TEST_FIXTURE_H
#define KN_KUBE_TEST_FIXTURE_H

#include <jansson.h>

/* The fixtures directory; set by main from argv[1]. */
extern const char *kube_fixtures;

/* The JSON file name in the fixtures' subdirectory dir ("" for none). */
json_t *fixture_load(const char *dir, const char *name);

/*
 * The value at a dotted path ("spec.template.spec"), NULL when absent;
 * "[n]" indexes an array. Keys may hold dots ("nvidia.com/gpu"): the
 * longest key present wins.
 */
json_t *fixture_at(json_t *v, const char *path);
/* The text or the integer at path, which must be there. */
const char *fixture_str(json_t *v, const char *path);
json_int_t fixture_num(json_t *v, const char *path);

#endif
