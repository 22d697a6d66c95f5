/*
 * Unit tests for the service table (server/service.h): every service is
 * named once, starts in a known phase and has handlers for all its
 * routes; api.c tries routes in order and the first match answers, so no
 * two services' routes may answer the same request, and within one
 * service no route may be hidden by an earlier one (a literal segment
 * before a capture that would match it is how a table says which wins).
 * The services that own jobs register job hooks; a route's {id} segment
 * is read one way, and one rule says who may change what a user owns.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "server/internal.h"
#include "server/service.h"

/* The next segment of a path pattern: its length, from *p. */
static size_t segment(const char *p)
{
	const char *end = strchr(p, '/');

	return end ? (size_t)(end - p) : strlen(p);
}

/*
 * Whether the patterns agree segment by segment: equal, or a "{...}"
 * capture in a, or (with b_captures) in b.
 */
static bool segments_agree(const char *a, const char *b, bool b_captures)
{
	while (*a && *b) {
		size_t na = segment(a), nb = segment(b);

		if (a[0] != '{' && !(b_captures && b[0] == '{') &&
		    (b[0] == '{' || na != nb || memcmp(a, b, na) != 0))
			return false;
		a += na;
		b += nb;
		if (*a != *b)
			return false;
		if (*a == '/') {
			a++;
			b++;
		}
	}
	return *a == '\0' && *b == '\0';
}

/* Whether some path matches both patterns. */
static bool overlap(const char *a, const char *b)
{
	return segments_agree(a, b, true);
}

/* Whether every path that matches b matches a too (a hides b). */
static bool covers(const char *a, const char *b)
{
	return segments_agree(a, b, false);
}

static void test_overlap_matcher(void **state)
{
	static const struct {
		const char *a, *b;
		bool overlap; /* some path matches both */
		bool covers;  /* every path b matches, a matches */
	} cases[] = {
		{"/v1/models/{name}", "/v1/models/x", true, true},
		{"/v1/pools/{name}/rolling", "/v1/pools/a/rolling", true, true},
		{"/v1/models/{name}", "/v1/models/{name}/revalidation", false,
		 false},
		{"/v1/keys", "/v1/keys/{name}", false, false},
		{"/v1/deployments", "/v1/workflows", false, false},
		{"/v1/model-blobs/{name}", "/v1/model-blobs/missing", true, true},
		{"/v1/model-blobs/missing", "/v1/model-blobs/{name}", true, false},
		{"/v1/models/{name}", "/v1/models/{name}", true, true},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (overlap(cases[i].a, cases[i].b) != cases[i].overlap)
			fail_msg("overlap(%s, %s) is not %d", cases[i].a,
				 cases[i].b, cases[i].overlap);
		if (covers(cases[i].a, cases[i].b) != cases[i].covers)
			fail_msg("covers(%s, %s) is not %d", cases[i].a,
				 cases[i].b, cases[i].covers);
	}
}

static void test_services_named_once(void **state)
{
	(void)state;
	for (size_t i = 0; kn_services[i]; i++) {
		const struct service *v = kn_services[i];

		assert_non_null(v->name);
		assert_true(v->phase == SERVICE_PHASE_NODES ||
			    v->phase == SERVICE_PHASE_LOOP ||
			    v->phase == SERVICE_PHASE_RECOVERED);
		for (size_t k = 0; k < i; k++)
			assert_string_not_equal(kn_services[k]->name, v->name);
		for (const struct route *r = v->routes; r && r->method; r++) {
			assert_non_null(r->fn);
			assert_true(r->pattern[0] == '/');
		}
	}
}

static void test_routes_do_not_shadow(void **state)
{
	(void)state;
	for (size_t i = 0; kn_services[i]; i++)
		for (const struct route *a = kn_services[i]->routes;
		     a && a->method; a++)
			for (size_t j = i; kn_services[j]; j++)
				for (const struct route *b =
					     j == i ? a + 1
						    : kn_services[j]->routes;
				     b && b->method; b++) {
					if (strcmp(a->method, b->method) ||
					    !(i == j ? covers(a->pattern,
							      b->pattern)
						     : overlap(a->pattern,
							       b->pattern)))
						continue;
					fail_msg("%s %s (%s) and %s (%s) answer "
						 "the same requests",
						 a->method, a->pattern,
						 kn_services[i]->name,
						 b->pattern,
						 kn_services[j]->name);
				}
}

/* Deployments, workflows and re-validation own jobs: the core asks them. */
static void test_job_owners_hooked(void **state)
{
	(void)state;
	assert_non_null(deploy_service.hooks);
	assert_non_null(deploy_service.hooks->model);
	assert_non_null(deploy_service.hooks->spread_group);
	assert_non_null(workflows_service.hooks);
	assert_non_null(workflows_service.hooks->job_ended);
	assert_non_null(workflows_service.hooks->task_env);
	assert_non_null(reval_service.hooks);
	assert_non_null(reval_service.hooks->job_ended);
	assert_non_null(reval_service.hooks->model);
	/* Workflows hear a job's end before re-validation. */
	for (size_t i = 0; kn_services[i]; i++) {
		if (kn_services[i] == &reval_service)
			fail_msg("re-validation comes before workflows");
		if (kn_services[i] == &workflows_service)
			break;
	}
}

/* An {id} segment is a positive decimal that fits in 64 bits: a 19-digit
   one past INT64_MAX is refused, not read as INT64_MAX. */
static void test_route_param_id(void **state)
{
	static const char *const refused[] = {
		"9223372036854775808", "99999999999999999999", "0", "-3", "",
		"12x", "x12", "1.5",
	};
	int64_t id = 0;

	(void)state;
	assert_true(route_param_id("42", &id));
	assert_int_equal(id, 42);
	assert_true(route_param_id("9223372036854775807", &id));
	assert_int_equal(id, INT64_MAX);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		id = -1;
		if (route_param_id(refused[i], &id))
			fail_msg("\"%s\" was taken as %lld", refused[i],
				 (long long)id);
		assert_int_equal(id, -1);
	}
}

/* A user changes only its own; an operator or admin changes anyone's. */
static void test_caller_owns(void **state)
{
	static const struct {
		enum kn_role role;
		const char *name;
		bool owns;
	} callers[] = {
		{KN_ROLE_VIEWER, "bob", false}, {KN_ROLE_USER, "bob", false},
		{KN_ROLE_USER, "alice", true},  {KN_ROLE_USER, "alicex", false},
		{KN_ROLE_USER, "", false},      {KN_ROLE_OPERATOR, "ops", true},
		{KN_ROLE_ADMIN, "root", true},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(callers) / sizeof(callers[0]); i++) {
		struct caller c = {.role = callers[i].role};

		snprintf(c.name, sizeof(c.name), "%s", callers[i].name);
		if (caller_owns(&c, "alice") != callers[i].owns)
			fail_msg("%s (%s) %s alice's", c.name,
				 role_name(c.role),
				 callers[i].owns ? "may not change"
						 : "may change");
	}
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_overlap_matcher),
	cmocka_unit_test(test_services_named_once),
	cmocka_unit_test(test_routes_do_not_shadow),
	cmocka_unit_test(test_job_owners_hooked),
	cmocka_unit_test(test_route_param_id),
	cmocka_unit_test(test_caller_owns))
