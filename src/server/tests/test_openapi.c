/*
 * Unit tests for the OpenAPI document (server/openapi.c): it builds, and
 * every route of every route table is in it under its method, with the
 * table's role, so a route added without a description fails here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "server/internal.h"
#include "server/service.h"

static json_t *load_document(void)
{
	struct kn_error err;
	char *text = kn_server_openapi(&err);
	json_t *doc;

	if (!text)
		fail_msg("the document does not build: %s", err.message);
	doc = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(doc);
	return doc;
}

/* The operation for route r in doc, failing the test when absent. */
static json_t *operation_of(json_t *doc, const struct route *r)
{
	char method[8];
	json_t *op;

	snprintf(method, sizeof(method), "%s", r->method);
	for (char *m = method; *m; m++)
		*m = (char)tolower((unsigned char)*m);
	op = json_object_get(json_object_get(json_object_get(doc, "paths"),
					     r->pattern),
			     method);
	if (!op)
		fail_msg("%s %s is not described", r->method, r->pattern);
	return op;
}

static void every_route_is_described(void **state)
{
	json_t *doc = load_document(), *op;
	size_t routes = 0, described = 0;
	const char *path;
	json_t *item;

	(void)state;
	for (size_t k = 0; kn_services[k]; k++) {
		for (const struct route *r = kn_services[k]->routes;
		     r && r->method; r++, routes++) {
			op = operation_of(doc, r);
			assert_string_equal(
				json_string_value(
					json_object_get(op, "x-kiln-role")),
				r->public_route ? "none"
						: role_name(r->least));
			assert_non_null(json_object_get(op, "responses"));
		}
	}
	json_object_foreach(json_object_get(doc, "paths"), path, item)
		described += json_object_size(item);
	/* Nothing described that no table routes. */
	assert_int_equal(described, routes);
	json_decref(doc);
}

static void public_routes_need_no_token(void **state)
{
	json_t *doc = load_document();
	json_t *spec = json_object_get(
		json_object_get(json_object_get(doc, "paths"),
				"/v1/openapi.json"),
		"get");

	(void)state;
	assert_non_null(spec);
	assert_int_equal(json_array_size(json_object_get(spec, "security")),
			 0);
	assert_string_equal(json_string_value(json_object_get(doc, "openapi")),
			    "3.1.0");
	json_decref(doc);
}

/* Every $ref names a component schema that exists. */
static void check_refs(json_t *v, json_t *schemas)
{
	const char *key;
	json_t *item;
	size_t i;

	if (json_is_array(v)) {
		json_array_foreach(v, i, item)
			check_refs(item, schemas);
		return;
	}
	json_object_foreach(v, key, item) {
		if (!strcmp(key, "$ref")) {
			const char *ref = json_string_value(item);
			const char *prefix = "#/components/schemas/";

			assert_non_null(ref);
			assert_memory_equal(ref, prefix, strlen(prefix));
			if (!json_object_get(schemas, ref + strlen(prefix)))
				fail_msg("dangling $ref %s", ref);
		}
		check_refs(item, schemas);
	}
}

static void refs_resolve(void **state)
{
	json_t *doc = load_document();

	(void)state;
	check_refs(doc, json_object_get(json_object_get(doc, "components"),
					"schemas"));
	json_decref(doc);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(every_route_is_described),
	cmocka_unit_test(public_routes_need_no_token),
	cmocka_unit_test(refs_resolve))
