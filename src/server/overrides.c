/*
 * Submit-time overrides (`kiln submit --gpus 2 --env K=V ...`, the
 * ?overrides= object of POST /v1/jobs). They are applied to the spec in
 * the form the parser reads back (kn_job_spec_to_input_text), and that is
 * parsed again: an override is validated exactly as the same field in a
 * file. Only the fields below may be overridden; env entries are added
 * to the file's, replacing those of the same name.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static const char *const overridable[] = {
	"name", "env", "gpus", "tasks", "priority", "preemptible", "array",
	NULL,
};

static bool is_overridable(const char *key)
{
	for (size_t i = 0; overridable[i]; i++)
		if (!strcmp(key, overridable[i]))
			return true;
	return false;
}

/* The member key of doc, made an empty object when it is not one. */
static json_t *object_member(json_t *doc, const char *key)
{
	json_t *o = json_object_get(doc, key);

	if (!json_is_object(o)) {
		o = json_object();
		json_object_set_new(doc, key, o);
	}
	return o;
}

static void apply(json_t *doc, json_t *overrides)
{
	const char *key;
	json_t *v;

	json_object_foreach(overrides, key, v) {
		if (!strcmp(key, "gpus"))
			json_object_set(object_member(doc, "resources"), "gpus",
					v);
		else if (!strcmp(key, "env") && json_is_object(v))
			json_object_update(object_member(doc, "env"), v);
		else
			json_object_set(doc, key, v);
	}
}

int job_overrides_apply(struct kn_job_spec **spec, const char *text,
			const char *filename, char **effective,
			json_t **applied, struct kn_error *err)
{
	json_error_t jerr;
	json_t *overrides = json_loads(text, 0, &jerr), *doc = NULL;
	struct kn_job_spec *again = NULL;
	const char *key;
	char *input, *label;
	json_t *v;
	int rc;

	*effective = NULL;
	*applied = NULL;
	if (!json_is_object(overrides)) {
		json_decref(overrides);
		return kn_errorf(err, KN_EINVAL, "overrides",
				 "overrides must be a JSON object such as "
				 "{\"gpus\": 2}%s",
				 "");
	}
	json_object_foreach(overrides, key, v) {
		if (is_overridable(key))
			continue;
		rc = kn_errorf(err, KN_EINVAL, "overrides",
			       "overrides: \"%.64s\" cannot be overridden (name, "
			       "env, gpus, tasks, priority, preemptible, array can)",
			       key);
		json_decref(overrides);
		return rc;
	}
	input = kn_job_spec_to_input_text(*spec, NULL);
	doc = json_loads(input, 0, NULL);
	free(input);
	apply(doc, overrides);
	*effective = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	label = kn_asprintf("%s with overrides", filename ? filename : "job");
	rc = kn_job_spec_parse(*effective, strlen(*effective), label, &again,
			       err);
	free(label);
	if (rc < 0) {
		free(*effective);
		*effective = NULL;
		json_decref(overrides);
		return rc;
	}
	kn_job_spec_free(*spec);
	*spec = again;
	*applied = overrides;
	return 0;
}
