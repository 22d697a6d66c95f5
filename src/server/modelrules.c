/*
 * The model registry's rules that need no server: which upload ids a
 * client may choose, the byte ranges an upload has received, where a
 * rollback takes an alias, and an alias list's JSON. Unit-tested on their own (tests/test_modelrules.c).
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

/* ---- the byte ranges an upload has received ---- */

/* The first range that ends at or after start (touching counts). */
static size_t ranges_from(const struct model_ranges *rs, int64_t start)
{
	size_t lo = 0, hi = rs->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (rs->r[mid][1] < start)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

enum model_range_fit model_ranges_fit(const struct model_ranges *rs,
				      int64_t start, int64_t end)
{
	size_t i = ranges_from(rs, start);

	/* Skip one that only touches start: it holds none of the bytes. */
	if (i < rs->n && rs->r[i][1] == start && start < end)
		i++;
	if (i == rs->n || rs->r[i][0] >= end)
		return MODEL_RANGE_NEW;
	if (rs->r[i][0] <= start && end <= rs->r[i][1])
		return MODEL_RANGE_HELD;
	return MODEL_RANGE_OVERLAP;
}

int model_ranges_add(struct model_ranges *rs, int64_t start, int64_t end)
{
	size_t i = ranges_from(rs, start), j = i;

	/* [i, j): the ranges the new one touches, merged into one. */
	while (j < rs->n && rs->r[j][0] <= end)
		j++;
	if (i == j) {
		if (rs->n >= MODEL_RANGES_MAX)
			return -1;
		if (rs->n == rs->cap) {
			rs->cap = rs->cap ? 2 * rs->cap : 8;
			rs->r = kn_xrealloc(rs->r, rs->cap * sizeof(*rs->r));
		}
		memmove(rs->r + i + 1, rs->r + i, (rs->n - i) * sizeof(*rs->r));
		rs->r[i][0] = start;
		rs->r[i][1] = end;
		rs->n++;
		return 0;
	}
	if (rs->r[i][0] < start)
		start = rs->r[i][0];
	if (rs->r[j - 1][1] > end)
		end = rs->r[j - 1][1];
	rs->r[i][0] = start;
	rs->r[i][1] = end;
	memmove(rs->r + i + 1, rs->r + j, (rs->n - j) * sizeof(*rs->r));
	rs->n -= j - i - 1;
	return 0;
}

int64_t model_ranges_total(const struct model_ranges *rs)
{
	int64_t total = 0;

	for (size_t i = 0; i < rs->n; i++)
		total += rs->r[i][1] - rs->r[i][0];
	return total;
}

int64_t model_ranges_prefix(const struct model_ranges *rs)
{
	return rs->n && rs->r[0][0] == 0 ? rs->r[0][1] : 0;
}

json_t *model_ranges_json(const struct model_ranges *rs)
{
	json_t *a = json_array();

	for (size_t i = 0; i < rs->n; i++)
		json_array_append_new(a, json_pack("[I, I]",
						   (json_int_t)rs->r[i][0],
						   (json_int_t)rs->r[i][1]));
	return a;
}

void model_ranges_release(struct model_ranges *rs)
{
	free(rs->r);
	*rs = (struct model_ranges){0};
}
