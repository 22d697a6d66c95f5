/*
 * The OpenAPI 3.1 document: every route of every route table, each with
 * its description from openapi_routes.c and its role from the table,
 * and the objects of openapi_schemas.c as components. openapi.h says
 * the notation the tables use.
 */
#include "openapi.h"
#include "service.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_REF "#/components/schemas/"

static json_t *type_schema(const char *t, size_t n, struct kn_error *err);

static const struct oa_object *object_named(const char *name, size_t n)
{
	for (size_t i = 0; i < oa_n_objects; i++)
		if (strlen(oa_objects[i].name) == n &&
		    !strncmp(oa_objects[i].name, name, n))
			return &oa_objects[i];
	return NULL;
}

/* s or null: {"type": T} becomes {"type": [T, "null"]}, else anyOf. */
static json_t *or_null(json_t *s)
{
	json_t *type = json_object_get(s, "type");

	if (json_object_size(s) == 1 && json_is_string(type)) {
		json_object_set_new(s, "type",
				    json_pack("[O, s]", type, "null"));
		return s;
	}
	return json_pack("{s:[o, {s:s}]}", "anyOf", s, "type", "null");
}

/* Where t's first top-level '|' is (outside [] and {}), or n. */
static size_t top_level_bar(const char *t, size_t n)
{
	int depth = 0;

	for (size_t i = 0; i < n; i++) {
		if (t[i] == '[' || t[i] == '{')
			depth++;
		else if (t[i] == ']' || t[i] == '}')
			depth--;
		else if (t[i] == '|' && depth == 0)
			return i;
	}
	return n;
}

static json_t *named_schema(const char *t, size_t n, struct kn_error *err)
{
	static const char *const primitives[] = {"integer", "number",
						 "string", "boolean",
						 "object"};

	for (size_t i = 0; i < KN_LEN(primitives); i++)
		if (strlen(primitives[i]) == n && !strncmp(primitives[i], t, n))
			return json_pack("{s:s}", "type", primitives[i]);
	if (n == 3 && !strncmp(t, "any", 3))
		return json_object();
	if (!object_named(t, n)) {
		kn_errorf(err, KN_EIO, "type", "no object named %.*s",
			  (int)n, t);
		return NULL;
	}
	return json_pack("{s:s+#}", "$ref", SCHEMA_REF, t, (int)n);
}

/* The JSON Schema of TYPE t[0..n) (openapi.h), or NULL with err. */
static json_t *type_schema(const char *t, size_t n, struct kn_error *err)
{
	size_t bar = top_level_bar(t, n);
	json_t *a, *b;

	if (n == 0) {
		kn_errorf(err, KN_EIO, "type", "an empty type");
		return NULL;
	}
	if (t[n - 1] == '?') {
		a = type_schema(t, n - 1, err);
		return a ? or_null(a) : NULL;
	}
	if (bar < n) {
		a = type_schema(t, bar, err);
		b = a ? type_schema(t + bar + 1, n - bar - 1, err) : NULL;
		if (!b) {
			json_decref(a);
			return NULL;
		}
		return json_pack("{s:[o, o]}", "anyOf", a, b);
	}
	if ((t[0] == '[' && t[n - 1] == ']') ||
	    (t[0] == '{' && t[n - 1] == '}')) {
		a = type_schema(t + 1, n - 2, err);
		if (!a)
			return NULL;
		return t[0] == '['
			       ? json_pack("{s:s, s:o}", "type", "array",
					   "items", a)
			       : json_pack("{s:s, s:o}", "type", "object",
					   "additionalProperties", a);
	}
	return named_schema(t, n, err);
}

/* The next whitespace-separated word of *p: its start and length. */
static size_t next_word(const char **p, const char **word)
{
	size_t n = 0;

	while (isspace((unsigned char)**p))
		(*p)++;
	*word = *p;
	while ((*p)[n] && !isspace((unsigned char)(*p)[n]))
		n++;
	*p += n;
	return n;
}

/* The object schema of a field list (openapi.h), or NULL with err. */
static json_t *fields_schema(const char *fields, struct kn_error *err)
{
	json_t *props = json_object(), *required = json_array(), *o;
	const char *p = fields, *w;
	size_t n;

	while ((n = next_word(&p, &w)) > 0) {
		const char *colon = memchr(w, ':', n);
		bool optional = w[0] == '~';
		const char *name = w + optional;
		json_t *s;

		if (!colon || colon == name) {
			kn_errorf(err, KN_EIO, "fields",
				  "%.*s is not name:TYPE", (int)n, w);
			goto fail;
		}
		s = type_schema(colon + 1, (size_t)(w + n - colon - 1), err);
		if (!s)
			goto fail;
		json_object_setn_new(props, name, (size_t)(colon - name), s);
		if (!optional)
			json_array_append_new(
				required,
				json_stringn(name, (size_t)(colon - name)));
	}
	o = json_pack("{s:s, s:o}", "type", "object", "properties", props);
	if (json_array_size(required))
		json_object_set_new(o, "required", required);
	else
		json_decref(required);
	return o;
fail:
	json_decref(props);
	json_decref(required);
	return NULL;
}

/* A type or a field list: "Job", "[Job]" or "job:Job secret:string". */
static json_t *type_or_fields(const char *s, struct kn_error *err)
{
	return strchr(s, ':') ? fields_schema(s, err)
			      : type_schema(s, strlen(s), err);
}

static json_t *object_schema(const struct oa_object *o,
			     struct kn_error *err)
{
	json_t *s, *values;
	const char *p, *w;
	size_t n;

	if (strncmp(o->fields, "enum ", 5) != 0) {
		s = fields_schema(o->fields, err);
	} else {
		values = json_array();
		p = o->fields + 5;
		while ((n = next_word(&p, &w)) > 0)
			json_array_append_new(values, json_stringn(w, n));
		s = json_pack("{s:s, s:o}", "type", "string", "enum", values);
	}
	if (s && o->description)
		json_object_set_new(s, "description",
				    json_string(o->description));
	if (s && o->example) {
		json_t *example = json_loads(o->example, 0, NULL);

		if (!example) {
			json_decref(s);
			kn_errorf(err, KN_EIO, "example",
				  "the example of %s is not JSON", o->name);
			return NULL;
		}
		json_object_set_new(s, "examples", json_pack("[o]", example));
	}
	return s;
}

static json_t *json_content(json_t *schema)
{
	return json_pack("{s:{s:o}}", "application/json", "schema", schema);
}

static json_t *error_response(const char *when)
{
	return json_pack("{s:s, s:o}", "description", when, "content",
			 json_content(json_pack("{s:s}", "$ref",
						SCHEMA_REF "Error")));
}

/* One "STATUS KIND REST" answer into responses, or -1 with err. */
static int add_answer(json_t *responses, const char *answer,
		      struct kn_error *err)
{
	char status[4], kind[8];
	int used = 0;
	const char *rest;
	json_t *s, *content;

	if (sscanf(answer, " %3[0-9] %7[a-z] %n", status, kind, &used) < 2)
		return kn_errorf(err, KN_EIO, "answers",
				 "%s is not STATUS KIND ...", answer);
	rest = answer + used;
	if (!strcmp(kind, "upgrade")) { /* 101: the connection changes hands */
		json_object_set_new(responses, status,
				    json_pack("{s:s}", "description", rest));
		return 0;
	}
	if (!strcmp(kind, "error")) {
		json_object_set_new(responses, status, error_response(rest));
		return 0;
	}
	if (!strcmp(kind, "upgrade")) {
		json_object_set_new(responses, status,
				    json_pack("{s:s}", "description", rest));
		return 0;
	}
	if (!strcmp(kind, "text")) {
		content = json_pack("{s:{s:{s:s}}}", "text/plain", "schema",
				    "type", "string");
	} else if (!strcmp(kind, "json") || !strcmp(kind, "ndjson")) {
		s = type_or_fields(rest, err);
		if (!s)
			return -1;
		content = json_pack("{s:{s:o}}",
				    kind[0] == 'j' ? "application/json"
						   : "application/x-ndjson",
				    "schema", s);
	} else {
		return kn_errorf(err, KN_EIO, "answers", "no answer kind %s",
				 kind);
	}
	json_object_set_new(responses, status,
			    json_pack("{s:s, s:o}", "description",
				      status[0] == '2' ? "done" : "refused",
				      "content", content));
	return 0;
}

static json_t *responses_of(const struct oa_op *op, struct kn_error *err)
{
	json_t *responses = json_object();
	char *copy = strdup(op->answers), *save = NULL;

	for (char *a = strtok_r(copy, ";", &save); a;
	     a = strtok_r(NULL, ";", &save)) {
		if (add_answer(responses, a, err) < 0) {
			json_decref(responses);
			responses = NULL;
			break;
		}
	}
	free(copy);
	if (responses)
		json_object_set_new(responses, "default",
				    error_response("an error (docs/api.md)"));
	return responses;
}

static json_t *request_body(const char *body, struct kn_error *err)
{
	json_t *s, *content;

	if (!strcmp(body, "yaml")) {
		content = json_pack("{s:{s:{s:s}}, s:{s:{s:s}}}",
				    "application/yaml", "schema", "type",
				    "string", "application/json", "schema",
				    "type", "object");
	} else if (!strcmp(body, "bytes")) {
		content = json_pack("{s:{s:{}}}", "application/octet-stream",
				    "schema");
	} else if (!strncmp(body, "json ", 5)) {
		s = type_or_fields(body + 5, err);
		if (!s)
			return NULL;
		content = json_content(s);
	} else {
		kn_errorf(err, KN_EIO, "body", "no body kind %s", body);
		return NULL;
	}
	return json_pack("{s:b, s:o}", "required", 1, "content", content);
}

/* The path's captures, then the query's fields, as parameters. */
static json_t *parameters_of(const struct oa_op *op, struct kn_error *err)
{
	json_t *params = json_array(), *q, *props;
	const char *p = op->pattern, *end, *key;
	json_t *v;

	while ((p = strchr(p, '{')) && (end = strchr(p, '}'))) {
		json_array_append_new(
			params,
			json_pack("{s:s#, s:s, s:b, s:{s:s}}", "name", p + 1,
				  (int)(end - p - 1), "in", "path", "required",
				  1, "schema", "type",
				  !strncmp(p, "{id}", 4) ? "integer" : "string"));
		p = end + 1;
	}
	if (!op->query)
		return params;
	q = fields_schema(op->query, err);
	if (!q) {
		json_decref(params);
		return NULL;
	}
	props = json_object_get(q, "properties");
	json_object_foreach(props, key, v)
		json_array_append_new(params,
				      json_pack("{s:s, s:s, s:O}", "name", key,
						"in", "query", "schema", v));
	json_decref(q);
	return params;
}

/* "get /v1/jobs/{id}/logs" -> "get_jobs_id_logs". */
static json_t *operation_id(const struct route *r)
{
	char id[128];
	size_t n = 0;

	for (const char *m = r->method; *m && n < sizeof(id) - 1; m++)
		id[n++] = (char)tolower((unsigned char)*m);
	for (const char *p = r->pattern + (strncmp(r->pattern, "/v1/", 4)
						   ? 0
						   : 3);
	     *p && n < sizeof(id) - 1; p++) {
		if (isalnum((unsigned char)*p))
			id[n++] = *p;
		else if (*p == '/' || *p == '-' || *p == '.')
			id[n++] = '_';
	}
	id[n] = '\0';
	return json_string(id);
}

static json_t *operation(const struct route *r, const struct oa_op *op,
			 struct kn_error *err)
{
	const char *tag = strncmp(r->pattern, "/v1/", 4) ? "server"
							 : r->pattern + 4;
	size_t tag_len = strcspn(tag, "/");
	json_t *o, *params, *responses, *body = NULL;

	params = parameters_of(op, err);
	responses = params ? responses_of(op, err) : NULL;
	if (responses && op->body)
		body = request_body(op->body, err);
	if (!responses || (op->body && !body)) {
		json_decref(params);
		json_decref(responses);
		return NULL;
	}
	o = json_pack("{s:o, s:s, s:[s#], s:o, s:o, s:s}", "operationId",
		      operation_id(r), "summary", op->summary, "tags", tag,
		      (int)tag_len, "parameters", params, "responses",
		      responses, "x-kiln-role",
		      r->public_route ? "none" : role_name(r->least));
	if (body)
		json_object_set_new(o, "requestBody", body);
	if (r->public_route)
		json_object_set_new(o, "security", json_array());
	if (r->action)
		json_object_set_new(o, "x-kiln-audit-action",
				    json_string(r->action));
	return o;
}

static const struct oa_op *op_for(const struct route *r)
{
	for (size_t i = 0; i < oa_n_ops; i++)
		if (!strcmp(oa_ops[i].method, r->method) &&
		    !strcmp(oa_ops[i].pattern, r->pattern))
			return &oa_ops[i];
	return NULL;
}

/* Every route of every table into paths; described counts the ops used. */
static int add_routes(json_t *paths, size_t *described,
		      struct kn_error *err)
{
	for (size_t k = 0; kn_services[k]; k++) {
		for (const struct route *r = kn_services[k]->routes;
		     r && r->method; r++) {
			const struct oa_op *op = op_for(r);
			json_t *path, *o;
			char method[8];

			if (!op)
				return kn_errorf(err, KN_EIO, "route",
						 "%s %s has no description in "
						 "openapi_routes.c",
						 r->method, r->pattern);
			o = operation(r, op, err);
			if (!o)
				return -1;
			snprintf(method, sizeof(method), "%s", r->method);
			for (char *m = method; *m; m++)
				*m = (char)tolower((unsigned char)*m);
			path = json_object_get(paths, r->pattern);
			if (!path) {
				path = json_object();
				json_object_set_new(paths, r->pattern, path);
			}
			json_object_set_new(path, method, o);
			(*described)++;
		}
	}
	return 0;
}

static json_t *components(struct kn_error *err)
{
	json_t *schemas = json_object(), *s;

	for (size_t i = 0; i < oa_n_objects; i++) {
		s = object_schema(&oa_objects[i], err);
		if (!s) {
			json_decref(schemas);
			return NULL;
		}
		json_object_set_new(schemas, oa_objects[i].name, s);
	}
	return json_pack("{s:o, s:{s:{s:s, s:s}}}", "schemas", schemas,
			 "securitySchemes", "bearer", "type", "http", "scheme",
			 "bearer");
}

/* The document, or NULL with err naming what no table describes. */
static json_t *document(struct kn_error *err)
{
	json_t *paths = json_object(), *comps;
	size_t described = 0;

	if (add_routes(paths, &described, err) < 0)
		goto fail;
	if (described != oa_n_ops) {
		kn_errorf(err, KN_EIO, "route",
			  "%zu descriptions in openapi_routes.c for %zu "
			  "routes: one describes a route no table has",
			  oa_n_ops, described);
		goto fail;
	}
	comps = components(err);
	if (!comps)
		goto fail;
	return json_pack(
		"{s:s, s:{s:s, s:s, s:s}, s:[{s:s}], s:[{s:[]}], s:o, s:o}",
		"openapi", "3.1.0", "info", "title", "kiln API", "version",
		KN_VERSION, "description",
		"Jobs, deployments, models and workflows on GPU machines; "
		"docs/api.md explains each route. x-kiln-role is the least "
		"role that may call a route (none: no token needed).",
		"servers", "url", "http://127.0.0.1:7070", "security",
		"bearer", "paths", paths, "components", comps);
fail:
	json_decref(paths);
	return NULL;
}

char *kn_server_openapi(struct kn_error *err)
{
	json_t *doc = document(err);
	char *text;

	if (!doc)
		return NULL;
	text = json_dumps(doc, JSON_INDENT(2));
	json_decref(doc);
	if (!text)
		kn_errorf(err, KN_EIO, NULL, "out of memory");
	return text;
}

void openapi_h_document(struct server *s, struct kn_http_req *req,
			const struct caller *c, const char *param)
{
	struct kn_error err;
	json_t *doc = document(&err);

	(void)s;
	(void)c;
	(void)param;
	if (!doc) {
		kn_http_reply_error(req, &err);
		return;
	}
	kn_http_reply_json(req, 200, doc);
}
