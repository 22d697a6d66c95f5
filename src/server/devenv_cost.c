/*
 * Dev environments in GET /v1/cost (docs/devenv.md): for each run in
 * the window, how long it ran and sat idle, and, for one kiln stopped
 * for idleness, what stopping it saved.
 *
 * Saved is the GPU time from the stop until its owner started the same
 * name again (or until the end of the window, when not yet), cut at its
 * max_duration: what it would have held had it been left running, which
 * is the idle box left overnight that idle stops are for. Priced at what
 * the job's own GPU time cost per GPU-second in the ledger (by_job), so
 * a run on an unpriced node saves GPU-hours but no dollars.
 */
#include "internal.h"

#include "devenvsvc.h"

#include <stdlib.h>
#include <string.h>

#define MS_PER_HOUR 3600000.0

struct totals {
	double idle_gpu_hours, idle_usd, saved_gpu_hours, saved_usd;
	int idle_stops;
};

/* What one GPU-second of the job cost, 0 when unknown or unpriced. */
static double gpu_second_price(const json_t *by_job, int64_t job_id)
{
	char key[32];
	const json_t *row;
	double seconds;

	snprintf(key, sizeof(key), "%lld", (long long)job_id);
	row = json_object_get(by_job, key);
	seconds = json_number_value(json_object_get(row, "gpu_seconds"));
	if (seconds <= 0)
		return 0;
	return json_number_value(json_object_get(row, "cost_usd")) / seconds;
}

/* The time an idle stop kept free: stop to next start, window end or
   max_duration, whichever came first. */
static int64_t saved_ms(struct server *s, const struct kn_devenv_row *d,
			int64_t until)
{
	struct kn_devenv_row next;
	struct kn_error err;
	int64_t end = until;

	if (strcmp(d->stop, "idle") != 0 || !d->ended_at)
		return 0;
	if (kn_store_devenv_next(s->store, d->owner, d->name, d->started_at,
				 &next, &err) == 0) {
		if (next.started_at < end)
			end = next.started_at;
		kn_devenv_row_release(&next);
	}
	if (d->max_end_at && d->max_end_at < end)
		end = d->max_end_at;
	return end > d->ended_at ? end - d->ended_at : 0;
}

static json_t *row_json(struct server *s, const struct kn_devenv_row *d,
			int64_t until, const json_t *by_job, struct totals *t)
{
	double gpus = (double)d->gpu_milli / KN_MILLI;
	double price = gpu_second_price(by_job, d->job_id);
	int64_t end = d->ended_at ? d->ended_at : until;
	int64_t saved = saved_ms(s, d, until);
	double idle_gh = (double)d->idle_ms / MS_PER_HOUR * gpus;
	double saved_gh = (double)saved / MS_PER_HOUR * gpus;

	t->idle_gpu_hours += idle_gh;
	t->idle_usd += idle_gh * 3600 * price;
	t->saved_gpu_hours += saved_gh;
	t->saved_usd += saved_gh * 3600 * price;
	t->idle_stops += !strcmp(d->stop, "idle");
	return json_pack(
		"{s:I, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:s?, s:f, s:f}",
		"job", (json_int_t)d->job_id, "owner", d->owner, "name",
		d->name, "gpus", gpus, "hours",
		(double)(end - d->started_at) / MS_PER_HOUR, "idle_hours",
		(double)d->idle_ms / MS_PER_HOUR, "idle_gpu_hours", idle_gh,
		"idle_cost_usd", idle_gh * 3600 * price, "stopped_for",
		*d->stop ? d->stop : NULL, "saved_gpu_hours", saved_gh,
		"saved_usd", saved_gh * 3600 * price);
}

json_t *devenv_cost_json(struct server *core, int64_t since, int64_t until,
			 const json_t *by_job, struct kn_error *err)
{
	struct kn_devenv_row *rows = NULL;
	struct totals t = {0};
	json_t *list;
	size_t n = 0;

	if (kn_store_devenv_list(core->store, since, until, &rows, &n, err) < 0)
		return NULL;
	list = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list,
				      row_json(core, &rows[i], until, by_job, &t));
	kn_devenv_rows_free(rows, n);
	return json_pack("{s:o, s:{s:f, s:f, s:i, s:f, s:f}}", "rows", list,
			 "total", "idle_gpu_hours", t.idle_gpu_hours,
			 "idle_cost_usd", t.idle_usd, "idle_stops",
			 t.idle_stops, "saved_gpu_hours", t.saved_gpu_hours,
			 "saved_usd", t.saved_usd);
}
