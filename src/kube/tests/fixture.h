/*
 * What the kube unit tests share: the recorded API server objects under
 * tests/fixtures/kube (the directory is the test's argv[1]), reading
 * values out of JSON by path, the GPU products and the specs they
 * render. Each fails the running test rather than return what it could
 * not read.
 */
#ifndef KN_KUBE_TEST_FIXTURE_H
#define KN_KUBE_TEST_FIXTURE_H

#include <jansson.h>

struct kn_job_spec;
struct kn_deployment_spec;
struct kn_kube_products;

/* The fixtures directory; set by main from argv[1]. */
extern const char *kube_fixtures;

/* The GPU products of data/gpu-products.csv, loaded by the group setup
   fixture_products_load and freed by fixture_products_free. */
extern struct kn_kube_products *fixture_products;
int fixture_products_load(void **state);
int fixture_products_free(void **state);

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

/* The job or deployment spec text ("j.yaml", "d.yaml") must parse to. */
struct kn_job_spec *fixture_job_spec(const char *text);
struct kn_deployment_spec *fixture_deployment_spec(const char *text);

#endif
