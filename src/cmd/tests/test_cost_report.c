/*
 * Unit tests for kiln cost's formats on a fixed answer: the table's
 * rounding to cents and GPU-hours, the unpriced mark and notes, CSV
 * quoting and the total line, the SVG's bars (their heights in
 * proportion to the dollars) and escaping, and --since parsing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "cmd/cost_report.h"

static const char ANSWER[] =
	"{\"by\": \"user\", \"rows\": ["
	"{\"key\": \"alice\", \"gpu_seconds\": 7200, \"cost_usd\": 4.254,"
	" \"idle_cost_usd\": 0, \"unhealthy_cost_usd\": 0,"
	" \"lost_cost_usd\": 1.0, \"total_cost_usd\": 4.254, \"goodput\": 0.75,"
	" \"efficiency\": 0.5, \"unpriced\": false},"
	"{\"key\": \"b,\\\"ob\\\"\", \"gpu_seconds\": 1800, \"cost_usd\": 0,"
	" \"idle_cost_usd\": 0, \"unhealthy_cost_usd\": 0,"
	" \"lost_cost_usd\": 0, \"total_cost_usd\": 0, \"goodput\": 1,"
	" \"efficiency\": null, \"unpriced\": true}],"
	" \"total\": {\"key\": \"total\", \"gpu_seconds\": 9000,"
	" \"cost_usd\": 4.254, \"idle_cost_usd\": 10.5,"
	" \"unhealthy_cost_usd\": 0, \"lost_cost_usd\": 1.0,"
	" \"total_cost_usd\": 14.754, \"goodput\": 0.8, \"efficiency\": 0.5,"
	" \"unpriced\": true},"
	" \"unpriced_nodes\": [\"n9\"]}";

static const char DAYS[] =
	"{\"by\": \"day\", \"rows\": ["
	"{\"key\": \"2026-12-01\", \"cost_usd\": 3, \"lost_cost_usd\": 1,"
	" \"idle_cost_usd\": 2, \"unhealthy_cost_usd\": 0},"
	"{\"key\": \"<&>\", \"cost_usd\": 1, \"lost_cost_usd\": 0,"
	" \"idle_cost_usd\": 0, \"unhealthy_cost_usd\": 0}],"
	" \"total\": {}}";

static const char RESERVATIONS[] =
	"{\"skus\": ["
	"{\"sku\": \"G4\", \"nodes\": [\"a\", \"b\"], \"utilisation\": 0.5,"
	" \"on_demand_usd_hr\": 8, \"reserved_1y_usd_hr\": 4.8,"
	" \"reserved_3y_usd_hr\": 3.2, \"break_even_1y\": 0.6,"
	" \"break_even_3y\": 0.4, \"pays_off_1y\": false,"
	" \"pays_off_3y\": true},"
	"{\"sku\": \"X\", \"nodes\": [\"c\"], \"utilisation\": 0.9,"
	" \"on_demand_usd_hr\": null, \"reserved_1y_usd_hr\": null,"
	" \"reserved_3y_usd_hr\": null, \"break_even_1y\": null,"
	" \"break_even_3y\": null, \"pays_off_1y\": false,"
	" \"pays_off_3y\": false}],"
	" \"spot_candidates\": [{\"job\": 7, \"name\": \"train\","
	" \"user\": \"alice\", \"checkpoint_every_ms\": 600000,"
	" \"longest_unsaved_ms\": 90000, \"on_spot\": false}]}";

static const char RIGHTSIZE[] =
	"{\"rule\": {\"percentile\": 0.95, \"headroom\": 1.15,"
	" \"margin\": 0.7, \"min_samples\": 10}, \"jobs\": ["
	"{\"name\": \"train\", \"resources\": ["
	"{\"resource\": \"cpu\", \"unit\": \"cores\", \"samples\": 40,"
	" \"p50\": 0.9, \"p95\": 1.0, \"max\": 1.1, \"requested\": 4,"
	" \"suggested\": 1.2, \"over\": true},"
	"{\"resource\": \"memory\", \"unit\": \"bytes\", \"samples\": 40,"
	" \"p50\": 209715200, \"p95\": 209715200, \"max\": 209715200,"
	" \"requested\": 268435456, \"suggested\": null, \"over\": false},"
	"{\"resource\": \"gpu_memory\", \"unit\": \"bytes\", \"samples\": 4,"
	" \"p50\": 8589934592, \"p95\": 8589934592, \"max\": 8589934592,"
	" \"requested\": 85899345920, \"suggested\": null, \"over\": false}]},"
	"{\"name\": \"a,b\", \"resources\": ["
	"{\"resource\": \"gpu_memory\", \"unit\": \"bytes\", \"samples\": 12,"
	" \"p50\": 8589934592, \"p95\": 8589934592, \"max\": 8589934592,"
	" \"requested\": 85899345920, \"suggested\": 10737418240,"
	" \"suggested_gpus\": 0.125, \"over\": true},"
	"{\"resource\": \"cpu\", \"unit\": \"cores\", \"samples\": 12,"
	" \"p50\": 0.5, \"p95\": 0.5, \"max\": 0.5, \"requested\": null,"
	" \"suggested\": null, \"over\": false}]}]}";

/* What f printed, NUL-terminated; the caller frees it. */
static char *render(void (*fn)(json_t *, FILE *), const char *text)
{
	json_t *j = json_loads(text, 0, NULL);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(j);
	fn(j, f);
	fclose(f);
	json_decref(j);
	return buf;
}

/* A report printed from an answer holds each of want[], in its place. */
static const struct report_case {
	const char *name;
	void (*fn)(json_t *, FILE *);
	const char *answer;
	const char *want[12]; /* ends at the first NULL */
} REPORTS[] = {
	{"table", cost_report_table, ANSWER, {
		 /* 7200 GPU-s = 2.00 GPU-hours; dollars to the cent. */
		 "USER ",
		 "GPU-HOURS",
		 "alice   2.00       $4.25   $0.00 ",
		 "75.0%",
		 "50.0%",
		 "$0.00*",  /* bob, unpriced */
		 "$10.50*", /* total idle */
		 "$14.75*",
		 "total   2.50       $4.25*  $10.50* ",
		 "unpriced: no size or price in the catalog for node n9",
		 "idle and unhealthy GPU time belongs to no user",
	 }},
	{"reservations", cost_report_reservations, RESERVATIONS, {
		 /* G4 at 50 %: the 3-year break-even (40 %) is passed, the
		    1-year (60 %) is not. */
		 "G4   a,b    50.0%        $8.00/h    $4.80/h      "
		 "60.0%          $3.20/h      40.0%          "
		 "reserve 3y (1y does not pay off)\n",
		 "X    c      90.0%        -",
		 "no on-demand price",
		 "7    train  alice  10m0s             1m30s            no\n",
	 }},
	{"no reservations", cost_report_reservations,
	 "{\"skus\": [], \"spot_candidates\": []}",
	 {"no node has a size", "none in this window"}},
	{"rightsize", cost_report_rightsize, RIGHTSIZE, {
		 "train  cpu         40       0.90    1.00    1.10    "
		 "4.00       lower to 1.20 cores\n",
		 /* Within the margin; too few samples; not asked for. */
		 "200MiB  200MiB  200MiB  256MiB     keep\n",
		 "80.0GiB    keep (too few samples)\n",
		 "lower to 10.0GiB (gpus: 0.125)\n",
		 "-          not requested\n",
		 "rule: suggest p95 x 1.15",
	 }},
	{"rightsize as CSV", cost_report_rightsize_csv, RIGHTSIZE, {
		 "job,resource,unit,samples,p50,p95,max,requested,suggested,"
		 "suggested_gpus,over\n"
		 "train,cpu,cores,40,0.900000,1.000000,1.100000,4.000000,"
		 "1.200000,,true\n",
		 "\"a,b\",gpu_memory,bytes,12,",
		 ",10737418240.000000,0.125000,true\n",
		 "\"a,b\",cpu,cores,12,0.500000,0.500000,0.500000,,,,false\n",
	 }},
	{"no rightsizing", cost_report_rightsize, "{\"jobs\": []}",
	 {"no task usage sampled"}},
};

static void test_reports(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(REPORTS) / sizeof(REPORTS[0]); i++) {
		const struct report_case *c = &REPORTS[i];
		char *out = render(c->fn, c->answer);

		for (const char *const *w = c->want; *w; w++)
			if (!strstr(out, *w))
				fail_msg("%s: \"%s\" is not in:\n%s", c->name,
					 *w, out);
		free(out);
	}
}

static void test_csv(void **state)
{
	char *out = render(cost_report_csv, ANSWER);
	char *line2, *line3, *line4;

	(void)state;
	assert_true(!strncmp(out, "user,gpu_seconds,cost_usd,idle_gpu_seconds,",
			     43));
	line2 = strchr(out, '\n') + 1;
	assert_true(!strncmp(line2, "alice,7200.000000,4.254000,", 27));
	line3 = strchr(line2, '\n') + 1;
	/* Quoted, with the quotes doubled; no efficiency; unpriced. */
	assert_true(!strncmp(line3, "\"b,\"\"ob\"\"\",1800.000000,", 23));
	line4 = strchr(line3, '\n') + 1;
	assert_non_null(strstr(line3, ",,true\n"));
	assert_true(!strncmp(line4, "total,9000.000000,", 18));
	assert_non_null(strstr(line4, ",14.754000,"));
	assert_string_equal(strchr(line4, '\n'), "\n");
	free(out);
}

/* A key a spreadsheet would run is neutralised; numbers stay numbers. */
static void test_csv_formula_key(void **state)
{
	char *out = render(cost_report_csv,
			   "{\"by\": \"job\", \"rows\": [{\"key\": "
			   "\"=HYPERLINK(\\\"http://x\\\")\", "
			   "\"gpu_seconds\": 60, \"cost_usd\": -3.5}],"
			   " \"total\": {\"key\": \"total\"}}");
	char *line2 = strchr(out, '\n') + 1;

	(void)state;
	assert_true(!strncmp(line2,
			     "\"'=HYPERLINK(\"\"http://x\"\")\",60.000000,"
			     "-3.500000,",
			     42));
	free(out);
}

static void test_svg(void **state)
{
	char *out = render(cost_report_svg, DAYS);

	(void)state;
	assert_true(!strncmp(out, "<?xml", 5));
	assert_non_null(strstr(out, "</svg>\n"));
	/* The highest day ($5: useful 2, lost 1, idle 2) fills the 240px
	   plot: useful 96px, lost 48px, idle 96px; the second day's useful
	   $1 is 48px. */
	assert_non_null(strstr(out, "height=\"96.00\" fill=\"#2b8a3e\""));
	assert_non_null(strstr(out, "height=\"48.00\" fill=\"#e8590c\""));
	assert_non_null(strstr(out, "height=\"96.00\" fill=\"#adb5bd\""));
	assert_non_null(strstr(out, "height=\"48.00\" fill=\"#2b8a3e\""));
	assert_non_null(strstr(out, "&lt;&amp;&gt;"));
	assert_null(strstr(out, "<&>"));
	free(out);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_reports),
	cmocka_unit_test(test_csv),
	cmocka_unit_test(test_csv_formula_key),
	cmocka_unit_test(test_svg))
