/*
 * The model registry's rules that need no server: which upload ids a
 * client may choose, where a rollback takes an alias, and an alias list's
 * JSON. Unit-tested on their own (tests/test_modelrules.c).
 */
#include "server/modelrules.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* 1..MODEL_UPLOAD_ID_MAX letters and digits. */
bool model_upload_id_ok(const char *id)
{
	size_t n = id ? strlen(id) : 0;

	if (n == 0 || n > MODEL_UPLOAD_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((id[i] >= 'a' && id[i] <= 'z') ||
		      (id[i] >= 'A' && id[i] <= 'Z') ||
		      (id[i] >= '0' && id[i] <= '9')))
			return false;
	return true;
}

/*
 * Where a rollback takes alias: replaying its history as a stack (a
 * promote pushes, a rollback pops), the version under the top. 0 when
 * there is none.
 */
int64_t model_rollback_target(const struct kn_model_alias_row *hist,
			       size_t n, const char *alias)
{
	int64_t *stack = kn_xcalloc(n + 1, sizeof(*stack)), target = 0;
	size_t depth = 0;

	for (size_t i = 0; i < n; i++) {
		if (strcmp(hist[i].alias, alias) != 0)
			continue;
		if (!strcmp(hist[i].action, "promote"))
			stack[depth++] = hist[i].version;
		else if (depth > 0)
			depth--;
	}
	if (depth >= 2)
		target = stack[depth - 2];
	free(stack);
	return target;
}

json_t *model_aliases_json(struct kn_model_alias_row *rows, size_t n,
			    bool history)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++) {
		json_t *o = json_pack("{s:s, s:I, s:s, s:I}", "alias",
				      rows[i].alias, "version",
				      (json_int_t)rows[i].version, "by",
				      rows[i].actor, "time_ms",
				      (json_int_t)rows[i].time_ms);
		if (history) {
			json_object_set_new(o, "action",
					    json_string(rows[i].action));
			json_object_set_new(
				o, "from",
				rows[i].from_version
					? json_integer(rows[i].from_version)
					: json_null());
		}
		json_array_append_new(a, o);
	}
	return a;
}
