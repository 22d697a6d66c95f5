/*
 * The API's OpenAPI 3.1 description, built from tables beside the route
 * tables: each object the API answers with (openapi_schemas.c) and each
 * route's query, body and answers (openapi_routes.c). The route tables
 * stay the authority on which routes exist and who may call them: the
 * document is built by walking them, and a route without a description
 * is an error, so the two cannot drift apart unnoticed.
 *
 * The tables use a compact field notation, parsed by openapi.c:
 *   fields   "name:TYPE name:TYPE ..."; a name starting with '~' is
 *            optional (not in "required"), every object stays open to
 *            fields added later
 *   TYPE     integer number string boolean object any, an object's Name
 *            ($ref), [TYPE] (array), {TYPE} (map), A|B (either), and a
 *            trailing '?' for "or null"
 *   enum     an object whose fields start with "enum " lists its values
 * An object's example, JSON text, becomes its schema's "examples".
 *
 * Rejected: a hand-written docs/openapi.json (it drifts from the code on
 * the first new route), and JSON Schema text in C string literals (hard
 * to read and review beside the routes it describes).
 */
#ifndef KILN_SERVER_OPENAPI_H
#define KILN_SERVER_OPENAPI_H

#include <stddef.h>

#include "internal.h"

/* One object of the API: its component name, its fields, and an example
   answer (JSON text) or NULL. */
struct oa_object {
	const char *name;
	const char *description;
	const char *fields;
	const char *example;
};

/*
 * One route's description, matched to its route by method and pattern.
 * query: fields (all optional). body: NULL, "json TYPE", "json FIELDS",
 * "yaml" (a spec's text, YAML or JSON) or "bytes". answers: entries
 * separated by ';', each "STATUS json TYPE|FIELDS", "STATUS text",
 * "STATUS ndjson TYPE" (one TYPE per line) or "STATUS error WHEN"; any
 * other status answers an Error.
 */
struct oa_op {
	const char *method;
	const char *pattern;
	const char *summary;
	const char *query;
	const char *body;
	const char *answers;
};

extern const struct oa_object oa_objects[];
extern const size_t oa_n_objects;
extern const struct oa_op oa_ops[];
extern const size_t oa_n_ops;

/* GET /v1/openapi.json: public, like /healthz. */
route_handler openapi_h_document;

#endif
