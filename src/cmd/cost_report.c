/*
 * cost_report: the table, CSV and SVG of `kiln cost`.
 *
 * The server's answer carries GPU-seconds and dollars unrounded; here they
 * become GPU-hours and dollars to the cent (table), or stay full precision
 * (CSV, for spreadsheets that sum). The SVG is written by hand: a few
 * rects and texts need no library, and every text is XML-escaped.
 */
#include "cmd/cost_report.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"

static double num(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static void money(char *buf, size_t len, double usd, bool unpriced)
{
	snprintf(buf, len, "$%.2f%s", usd, unpriced ? "*" : "");
}

/* A cell with r's key in dollars, starred where unpriced. */
static void money_cell(struct cli_table *t, json_t *r, const char *key,
		       bool unpriced)
{
	char buf[48];

	money(buf, sizeof(buf), num(r, key), unpriced);
	cli_table_cell(t, buf);
}

static void table_row(struct cli_table *t, json_t *r)
{
	bool unpriced = json_is_true(json_object_get(r, "unpriced"));
	json_t *eff = json_object_get(r, "efficiency");
	const char *key = cli_json_str(r, "key");

	cli_table_cell(t, *key ? key : "(none)");
	cli_table_cellf(t, "%.2f", num(r, "gpu_seconds") / 3600);
	money_cell(t, r, "cost_usd", unpriced);
	money_cell(t, r, "idle_cost_usd", unpriced);
	money_cell(t, r, "unhealthy_cost_usd", unpriced);
	money_cell(t, r, "lost_cost_usd", unpriced);
	money_cell(t, r, "total_cost_usd", unpriced);
	cli_table_cellf(t, "%.1f%%", 100 * num(r, "goodput"));
	if (json_is_number(eff))
		cli_table_cellf(t, "%.1f%%", 100 * json_number_value(eff));
	else
		cli_table_cell(t, "-");
}

/* Dev environments: each run's idle time and what an idle stop saved. */
static void devenv_table(json_t *devenvs, FILE *out)
{
	static const char *const headers[] = {
		"DEVENV", "JOB", "OWNER", "HOURS", "IDLE-HOURS", "IDLE-COST",
		"STOPPED-FOR", "SAVED-GPU-HOURS", "SAVED", NULL,
	};
	json_t *rows = json_object_get(devenvs, "rows"), *r;
	json_t *total = json_object_get(devenvs, "total");
	struct cli_table *t;
	char buf[48];
	size_t i;

	if (!json_array_size(rows))
		return;
	t = cli_table_new(headers);
	json_array_foreach(rows, i, r) {
		cli_table_cell(t, cli_json_str(r, "name"));
		cli_table_cellf(t, "%lld", (long long)json_integer_value(
						   json_object_get(r, "job")));
		cli_table_cell(t, cli_json_str(r, "owner"));
		cli_table_cellf(t, "%.2f", num(r, "hours"));
		cli_table_cellf(t, "%.2f", num(r, "idle_hours"));
		money_cell(t, r, "idle_cost_usd", false);
		cli_table_cell(t, cli_json_str(r, "stopped_for"));
		cli_table_cellf(t, "%.2f", num(r, "saved_gpu_hours"));
		money_cell(t, r, "saved_usd", false);
	}
	fputs("\ndev environments:\n", out);
	cli_table_print(t, out, 0);
	cli_table_free(t);
	money(buf, sizeof(buf), num(total, "saved_usd"), false);
	fprintf(out, "%.2f idle GPU-hours; %d idle stop%s saved %.2f "
		"GPU-hours (%s): each from the stop to the next start, at most "
		"to max_duration\n",
		num(total, "idle_gpu_hours"),
		(int)json_integer_value(json_object_get(total, "idle_stops")),
		json_integer_value(json_object_get(total, "idle_stops")) == 1
			? ""
			: "s",
		num(total, "saved_gpu_hours"), buf);
}

void cost_report_table(json_t *reply, FILE *out)
{
	const char *by = cli_json_str(reply, "by");
	char key_header[32];
	const char *headers[] = {
		key_header, "GPU-HOURS", "COST", "IDLE", "UNHEALTHY", "LOST",
		"TOTAL", "GOODPUT", "EFFICIENCY", NULL,
	};
	json_t *rows = json_object_get(reply, "rows"), *r, *unpriced;
	struct cli_table *t;
	size_t i;

	snprintf(key_header, sizeof(key_header), "%s", by);
	for (char *p = key_header; *p; p++)
		if (*p >= 'a' && *p <= 'z')
			*p = (char)(*p - 'a' + 'A');
	t = cli_table_new(headers);
	json_array_foreach(rows, i, r)
		table_row(t, r);
	table_row(t, json_object_get(reply, "total"));
	cli_table_print(t, out, 0);
	cli_table_free(t);
	if (strcmp(by, "node") && strcmp(by, "day"))
		fprintf(out, "idle and unhealthy GPU time belongs to no %s: it "
			"is in the total only\n", by);
	unpriced = json_object_get(reply, "unpriced_nodes");
	if (json_array_size(unpriced)) {
		fputs("* unpriced: no size or price in the catalog for node",
		      out);
		fputs(json_array_size(unpriced) > 1 ? "s" : "", out);
		json_array_foreach(unpriced, i, r)
			fprintf(out, "%s %s", i ? "," : "",
				json_string_value(r));
		fputs(" (costed at $0; set label sku= and pricing=)\n", out);
	}
	if (json_is_string(json_object_get(reply, "efficiency_source")))
		fprintf(out, "efficiency: %s\n",
			cli_json_str(reply, "efficiency_source"));
	devenv_table(json_object_get(reply, "devenvs"), out);
}

/* A text cell (kn_csv_cell): quoted when it must be, never a formula. */
static void csv_field(FILE *out, const char *s)
{
	char *cell = kn_csv_cell(s);

	fputs(cell, out);
	free(cell);
}

static const char *const CSV_NUMBERS[] = {
	"gpu_seconds", "cost_usd", "idle_gpu_seconds", "idle_cost_usd",
	"unhealthy_gpu_seconds", "unhealthy_cost_usd", "lost_gpu_seconds",
	"lost_cost_usd", "total_cost_usd", "goodput",
};

static void csv_row(FILE *out, json_t *r)
{
	json_t *eff = json_object_get(r, "efficiency");

	csv_field(out, cli_json_str(r, "key"));
	for (size_t i = 0; i < sizeof(CSV_NUMBERS) / sizeof(CSV_NUMBERS[0]); i++)
		fprintf(out, ",%.6f", num(r, CSV_NUMBERS[i]));
	if (json_is_number(eff))
		fprintf(out, ",%.6f", json_number_value(eff));
	else
		fputc(',', out);
	fprintf(out, ",%s\n",
		json_is_true(json_object_get(r, "unpriced")) ? "true" : "false");
}

void cost_report_csv(json_t *reply, FILE *out)
{
	json_t *r;
	size_t i;

	csv_field(out, cli_json_str(reply, "by"));
	for (size_t k = 0; k < sizeof(CSV_NUMBERS) / sizeof(CSV_NUMBERS[0]); k++)
		fprintf(out, ",%s", CSV_NUMBERS[k]);
	fputs(",efficiency,unpriced\n", out);
	json_array_foreach(json_object_get(reply, "rows"), i, r)
		csv_row(out, r);
	csv_row(out, json_object_get(reply, "total"));
}

static void xml_text(FILE *out, const char *s)
{
	for (; *s; s++)
		switch (*s) {
		case '<': fputs("&lt;", out); break;
		case '>': fputs("&gt;", out); break;
		case '&': fputs("&amp;", out); break;
		case '"': fputs("&quot;", out); break;
		default: fputc(*s, out);
		}
}

/* The stacked categories, bottom up. */
static const struct {
	const char *name;
	const char *colour;
} STACK[] = {
	{"useful", "#2b8a3e"},
	{"lost", "#e8590c"},
	{"idle", "#adb5bd"},
	{"unhealthy", "#c92a2a"},
};
#define N_STACK (sizeof(STACK) / sizeof(STACK[0]))

static void day_parts(json_t *r, double parts[N_STACK])
{
	double lost = num(r, "lost_cost_usd");

	parts[0] = num(r, "cost_usd") - lost;
	parts[1] = lost;
	parts[2] = num(r, "idle_cost_usd");
	parts[3] = num(r, "unhealthy_cost_usd");
	for (size_t k = 0; k < N_STACK; k++)
		if (parts[k] < 0)
			parts[k] = 0;
}

void cost_report_svg(json_t *day_reply, FILE *out)
{
	enum { LEFT = 70, TOP = 40, PLOT_H = 240, BAR_W = 28, GAP = 12,
	       LEGEND_W = 130 };
	json_t *rows = json_object_get(day_reply, "rows"), *r;
	size_t n = json_array_size(rows), i;
	int plot_w = (int)(n ? n : 1) * (BAR_W + GAP) + GAP;
	int width = LEFT + plot_w + LEGEND_W, height = TOP + PLOT_H + 70;
	double max = 0, parts[N_STACK];

	json_array_foreach(rows, i, r) {
		double sum = 0;

		day_parts(r, parts);
		for (size_t k = 0; k < N_STACK; k++)
			sum += parts[k];
		if (sum > max)
			max = sum;
	}
	if (max <= 0)
		max = 1;
	fprintf(out,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
		"font-size=\"11\">\n"
		"<title>GPU cost per day by category</title>\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
		"<text x=\"%d\" y=\"20\" font-size=\"14\">GPU cost per day "
		"(USD)</text>\n",
		width, height, width, height, LEFT);
	/* The axis: 0, half and the highest day. */
	for (int k = 0; k <= 2; k++) {
		double v = max * k / 2;
		double y = TOP + PLOT_H - PLOT_H * (double)k / 2;

		fprintf(out,
			"<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
			"stroke=\"#dee2e6\"/>\n<text x=\"%d\" y=\"%.1f\" "
			"text-anchor=\"end\">$%.2f</text>\n",
			LEFT, y, LEFT + plot_w, y, LEFT - 6, y + 4, v);
	}
	json_array_foreach(rows, i, r) {
		int x = LEFT + GAP + (int)i * (BAR_W + GAP);
		double y = TOP + PLOT_H;

		day_parts(r, parts);
		fputs("<g>", out);
		for (size_t k = 0; k < N_STACK; k++) {
			double h = PLOT_H * parts[k] / max;

			if (h <= 0)
				continue;
			y -= h;
			fprintf(out,
				"<rect x=\"%d\" y=\"%.2f\" width=\"%d\" "
				"height=\"%.2f\" fill=\"%s\"><title>",
				x, y, BAR_W, h, STACK[k].colour);
			xml_text(out, cli_json_str(r, "key"));
			fprintf(out, " %s $%.2f</title></rect>", STACK[k].name,
				parts[k]);
		}
		fprintf(out,
			"<text x=\"%d\" y=\"%d\" transform=\"rotate(45 %d %d)\">",
			x + 4, TOP + PLOT_H + 14, x + 4, TOP + PLOT_H + 14);
		xml_text(out, cli_json_str(r, "key"));
		fputs("</text></g>\n", out);
	}
	for (size_t k = 0; k < N_STACK; k++) {
		int y = TOP + 10 + (int)k * 18;

		fprintf(out,
			"<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" "
			"fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
			LEFT + plot_w + 16, y, STACK[k].colour,
			LEFT + plot_w + 34, y + 10, STACK[k].name);
	}
	fputs("</svg>\n", out);
}

static void percent_or_dash(struct cli_table *t, json_t *v)
{
	if (json_is_number(v))
		cli_table_cellf(t, "%.1f%%", 100 * json_number_value(v));
	else
		cli_table_cell(t, "-");
}

static void price_or_dash(struct cli_table *t, json_t *v)
{
	if (json_is_number(v))
		cli_table_cellf(t, "$%.2f/h", json_number_value(v));
	else
		cli_table_cell(t, "-");
}

static const char *verdict(json_t *s)
{
	bool one = json_is_true(json_object_get(s, "pays_off_1y"));
	bool three = json_is_true(json_object_get(s, "pays_off_3y"));

	if (!json_is_number(json_object_get(s, "on_demand_usd_hr")))
		return "no on-demand price";
	return one && three ? "reserve: 1y and 3y pay off"
	       : three	    ? "reserve 3y (1y does not pay off)"
	       : one	    ? "reserve 1y"
			    : "stay on demand";
}

void cost_report_reservations(json_t *reply, FILE *out)
{
	static const char *const sku_headers[] = {
		"SKU", "NODES", "UTILISATION", "ON-DEMAND", "RESERVED-1Y",
		"BREAK-EVEN-1Y", "RESERVED-3Y", "BREAK-EVEN-3Y", "ADVICE", NULL,
	};
	static const char *const spot_headers[] = {
		"JOB", "NAME", "USER", "CHECKPOINT-EVERY", "LONGEST-UNSAVED",
		"ON-SPOT", NULL,
	};
	json_t *skus = json_object_get(reply, "skus");
	json_t *spot = json_object_get(reply, "spot_candidates");
	struct cli_table *t;
	json_t *s;
	size_t i;
	char buf[48];

	fputs("Reservations (a term pays off when the nodes' GPUs are busy at "
	      "least its break-even:\nreserved price / on-demand price):\n",
	      out);
	if (!json_array_size(skus)) {
		fputs("  no node has a size (label sku=)\n", out);
	} else {
		t = cli_table_new(sku_headers);
		json_array_foreach(skus, i, s) {
			cli_table_cell(t, cli_json_str(s, "sku"));
			cli_table_list(t, s, "nodes", "");
			percent_or_dash(t, json_object_get(s, "utilisation"));
			price_or_dash(t, json_object_get(s, "on_demand_usd_hr"));
			price_or_dash(t, json_object_get(s, "reserved_1y_usd_hr"));
			percent_or_dash(t, json_object_get(s, "break_even_1y"));
			price_or_dash(t, json_object_get(s, "reserved_3y_usd_hr"));
			percent_or_dash(t, json_object_get(s, "break_even_3y"));
			cli_table_cell(t, verdict(s));
		}
		cli_table_print(t, out, 2);
		cli_table_free(t);
	}
	fputs("\nSafe to move to spot (preemptible, with checkpoints):\n", out);
	if (!json_array_size(spot)) {
		fputs("  none in this window\n", out);
		return;
	}
	t = cli_table_new(spot_headers);
	json_array_foreach(spot, i, s) {
		cli_table_cellf(t, "%" JSON_INTEGER_FORMAT,
				json_integer_value(json_object_get(s, "job")));
		cli_table_cell(t, cli_json_str(s, "name"));
		cli_table_cell(t, cli_json_str(s, "user"));
		kn_format_duration(cli_json_int(s, "checkpoint_every_ms"), buf,
				   sizeof(buf));
		cli_table_cell(t, buf);
		kn_format_duration(cli_json_int(s, "longest_unsaved_ms"), buf,
				   sizeof(buf));
		cli_table_cell(t, buf);
		cli_table_cell(t, json_is_true(json_object_get(s, "on_spot"))
					  ? "yes" : "no");
	}
	cli_table_print(t, out, 2);
	cli_table_free(t);
}

/* An amount of a resource: cores, or bytes as MiB below a GiB. */
static void amount(char *buf, size_t len, json_t *v, const char *unit)
{
	double x = json_number_value(v);

	if (!json_is_number(v))
		snprintf(buf, len, "-");
	else if (strcmp(unit, "bytes"))
		snprintf(buf, len, "%.2f", x);
	else if (x >= 1024.0 * 1024 * 1024)
		snprintf(buf, len, "%.1fGiB", x / (1024.0 * 1024 * 1024));
	else
		snprintf(buf, len, "%.0fMiB", x / (1024.0 * 1024));
}

/* A cell with r's key as amount() writes it. */
static void amount_cell(struct cli_table *t, json_t *r, const char *key,
			const char *unit)
{
	char buf[96];

	amount(buf, sizeof(buf), json_object_get(r, key), unit);
	cli_table_cell(t, buf);
}

static void rightsize_advice(char *buf, size_t len, json_t *r,
			     int64_t min_samples)
{
	const char *unit = cli_json_str(r, "unit");
	json_t *gpus = json_object_get(r, "suggested_gpus");
	char to[32];

	if (json_is_true(json_object_get(r, "over"))) {
		amount(to, sizeof(to), json_object_get(r, "suggested"), unit);
		if (json_is_number(gpus))
			snprintf(buf, len, "lower to %s%s (gpus: %g)", to,
				 strcmp(unit, "bytes") ? " cores" : "",
				 json_number_value(gpus));
		else
			snprintf(buf, len, "lower to %s%s", to,
				 strcmp(unit, "bytes") ? " cores" : "");
	} else if (!json_is_number(json_object_get(r, "requested"))) {
		snprintf(buf, len, "not requested");
	} else if (json_integer_value(json_object_get(r, "samples")) <
		   min_samples) {
		snprintf(buf, len, "keep (too few samples)");
	} else {
		snprintf(buf, len, "keep");
	}
}

void cost_report_rightsize(json_t *reply, FILE *out)
{
	static const char *const headers[] = {
		"JOB", "RESOURCE", "SAMPLES", "P50", "P95", "MAX", "REQUESTED",
		"ADVICE", NULL,
	};
	json_t *rule = json_object_get(reply, "rule");
	int64_t min_samples =
		json_integer_value(json_object_get(rule, "min_samples"));
	json_t *jobs = json_object_get(reply, "jobs"), *j, *r;
	struct cli_table *t;
	size_t i, k;
	char buf[96];

	if (!json_array_size(jobs)) {
		fputs("no task usage sampled in this window\n", out);
		return;
	}
	t = cli_table_new(headers);
	json_array_foreach(jobs, i, j)
		json_array_foreach(json_object_get(j, "resources"), k, r) {
			const char *unit = cli_json_str(r, "unit");

			cli_table_cell(t, cli_json_str(j, "name"));
			cli_table_cell(t, cli_json_str(r, "resource"));
			cli_table_cellf(t, "%" JSON_INTEGER_FORMAT,
					json_integer_value(
						json_object_get(r, "samples")));
			amount_cell(t, r, "p50", unit);
			amount_cell(t, r, "p95", unit);
			amount_cell(t, r, "max", unit);
			amount_cell(t, r, "requested", unit);
			rightsize_advice(buf, sizeof(buf), r, min_samples);
			cli_table_cell(t, buf);
		}
	cli_table_print(t, out, 0);
	cli_table_free(t);
	fprintf(out, "rule: suggest p%.0f x %.2f (rounded up) where it is below "
		"%.0f%% of the request, from at least %" PRId64 " samples of "
		"the job name's runs; CPU in cores\n",
		100 * num(rule, "percentile"), num(rule, "headroom"),
		100 * num(rule, "margin"), min_samples);
}

void cost_report_rightsize_csv(json_t *reply, FILE *out)
{
	static const char *const numbers[] = {
		"p50", "p95", "max", "requested", "suggested", "suggested_gpus",
	};
	json_t *j, *r;
	size_t i, k;

	fputs("job,resource,unit,samples,p50,p95,max,requested,suggested,"
	      "suggested_gpus,over\n", out);
	json_array_foreach(json_object_get(reply, "jobs"), i, j)
		json_array_foreach(json_object_get(j, "resources"), k, r) {
			csv_field(out, cli_json_str(j, "name"));
			fputc(',', out);
			csv_field(out, cli_json_str(r, "resource"));
			fputc(',', out);
			csv_field(out, cli_json_str(r, "unit"));
			fprintf(out, ",%" JSON_INTEGER_FORMAT,
				json_integer_value(
					json_object_get(r, "samples")));
			for (size_t n = 0; n < sizeof(numbers) / sizeof(*numbers);
			     n++) {
				json_t *v = json_object_get(r, numbers[n]);

				if (json_is_number(v))
					fprintf(out, ",%.6f",
						json_number_value(v));
				else
					fputc(',', out);
			}
			fprintf(out, ",%s\n",
				json_is_true(json_object_get(r, "over"))
					? "true"
					: "false");
		}
}
