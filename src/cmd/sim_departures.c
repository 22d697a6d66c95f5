/*
 * kiln sim --departures: every policy replayed in time with every seed
 * (src/sim/replay.c), and the figures users feel, as mean ±sd over the
 * seeds and paired by seed against a baseline policy.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/sim_departures.h"

/* The figures of one replay, all lower-is-better. */
enum {
	M_WAIT_P50,
	M_WAIT_P99,
	M_GPU_NEVER,
	M_NEVER,
	M_STRANDED,
	M_FRAG,
	N_METRICS
};
static const char *const metric_names[N_METRICS] = {
	"GPU WAIT P50 S",   "GPU WAIT P99 S", "GPU NEVER PLACED",
	"NEVER PLACED",     "STRANDED GPU-H", "FRAG GPU-H",
};
static const char *const metric_columns[N_METRICS] = {
	"gpu_wait_p50_s", "gpu_wait_p99_s",      "gpu_never_placed",
	"never_placed",   "stranded_gpu_hours", "frag_gpu_hours",
};

void sim_paired_cells(struct cli_table *t, const struct kn_sim_paired *d)
{
	cli_table_cellf(t, "%+.3f", d->mean);
	cli_table_cellf(t, "%.3f", d->sd);
	cli_table_cellf(t, "%.2f", d->t);
	cli_table_cellf(t, "%zu", d->lower);
	cli_table_cellf(t, "%zu", d->higher);
	cli_table_cellf(t, "%zu", d->equal);
}

static void metrics(const struct kn_sim_replay *r, double *m)
{
	m[M_WAIT_P50] = r->wait_p50_s;
	m[M_WAIT_P99] = r->wait_p99_s;
	m[M_GPU_NEVER] = (double)r->gpu_never_placed;
	m[M_NEVER] = (double)r->never_placed;
	m[M_STRANDED] = r->stranded_gpu_hours;
	m[M_FRAG] = r->frag_gpu_hours;
}

/* values[policy][metric][seed] */
static double *value(double *values, size_t n_seeds, size_t p, int m)
{
	return &values[(p * N_METRICS + (size_t)m) * n_seeds];
}

static void print_means(const struct sim_departures_args *a, double *values)
{
	const char *headers[N_METRICS + 2];
	struct cli_table *t;

	headers[0] = "POLICY";
	for (int m = 0; m < N_METRICS; m++)
		headers[m + 1] = metric_names[m];
	headers[N_METRICS + 1] = NULL;
	t = cli_table_new(headers);
	for (size_t p = 0; p < a->n_policies; p++) {
		cli_table_cell(t, a->policies[p]->name);
		for (int m = 0; m < N_METRICS; m++) {
			struct kn_sim_stats s;

			kn_sim_stats(value(values, a->n_seeds, p, m),
				     a->n_seeds, &s);
			cli_table_cellf(t, "%.1f±%.1f", s.mean, s.sd);
		}
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

static void print_paired(const struct sim_departures_args *a, double *values)
{
	const char *headers[] = {"POLICY", "FIGURE", "MEAN DIFF", "SD", "T",
				 "BETTER", "WORSE",  "EQUAL",     NULL};
	const char *base = a->policies[a->baseline]->name;
	struct cli_table *t;

	printf("\nAgainst %s, paired by seed (policy minus %s; better = "
	       "lower):\n",
	       base, base);
	t = cli_table_new(headers);
	for (size_t p = 0; p < a->n_policies; p++) {
		if ((int)p == a->baseline)
			continue;
		for (int m = 0; m < N_METRICS; m++) {
			struct kn_sim_paired d;

			kn_sim_paired(value(values, a->n_seeds,
					    (size_t)a->baseline, m),
				      value(values, a->n_seeds, p, m),
				      a->n_seeds, &d);
			cli_table_cell(t, a->policies[p]->name);
			cli_table_cell(t, metric_columns[m]);
			sim_paired_cells(t, &d);
		}
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

static int write_csv(const struct cli_ctx *ctx,
		     const struct sim_departures_args *a, double *values)
{
	FILE *f = fopen(a->csv, "w");

	if (!f)
		return cli_fail(ctx, "--csv %s: %s", a->csv, strerror(errno));
	fputs("policy,seed", f);
	for (int m = 0; m < N_METRICS; m++)
		fprintf(f, ",%s", metric_columns[m]);
	fputc('\n', f);
	for (size_t p = 0; p < a->n_policies; p++) {
		char *policy = kn_csv_cell(a->policies[p]->name);

		for (size_t s = 0; s < a->n_seeds; s++) {
			fprintf(f, "%s,%llu", policy,
				(unsigned long long)a->seeds[s]);
			for (int m = 0; m < N_METRICS; m++) {
				double v = value(values, a->n_seeds, p, m)[s];

				if (isnan(v))
					fputc(',', f);
				else
					fprintf(f, ",%.4f", v);
			}
			fputc('\n', f);
		}
		free(policy);
	}
	if (fclose(f) != 0)
		return cli_fail(ctx, "--csv %s: %s", a->csv, strerror(errno));
	return CLI_GO;
}

static int parse_load(const struct cli_ctx *ctx, const char *text,
		      double *out)
{
	char *end;

	*out = 1.0;
	if (!text)
		return CLI_GO;
	errno = 0;
	*out = strtod(text, &end);
	if (end == text || *end || errno || !(*out > 0) || *out > 1e6)
		return cli_usage_error(ctx,
				       "--load: '%s' is not a factor above 0 "
				       "(2 = arrivals twice as dense)",
				       text);
	return CLI_GO;
}

int sim_departures_run(const struct cli_ctx *ctx,
		       const struct sim_departures_args *a)
{
	double *values = kn_xcalloc(a->n_policies * N_METRICS * a->n_seeds,
				    sizeof(*values));
	struct kn_sim_replay r = {0};
	struct kn_error err = {0};
	double load;
	int rc;

	rc = parse_load(ctx, a->load, &load);
	if (rc != CLI_GO)
		goto out;
	for (size_t p = 0; p < a->n_policies; p++) {
		for (size_t s = 0; s < a->n_seeds; s++) {
			double m[N_METRICS];

			if (kn_sim_replay_run(a->sim, a->policies[p],
					      a->seeds[s], load, &r,
					      &err) < 0) {
				rc = cli_fail(ctx, "%s", err.message);
				goto out;
			}
			metrics(&r, m);
			for (int k = 0; k < N_METRICS; k++)
				value(values, a->n_seeds, p, k)[s] = m[k];
		}
	}
	printf("Replay with departures, arrivals x%g as dense as recorded: "
	       "%zu pods (%zu asking for GPU, %zu left out: never ran), "
	       "%.0f hours; mean ±sd over %zu seed%s:\n",
	       load, r.pods, r.gpu_pods, r.left_out, r.span_hours,
	       a->n_seeds, a->n_seeds == 1 ? "" : "s");
	print_means(a, values);
	if (a->baseline >= 0 && a->n_policies > 1 && a->n_seeds > 1)
		print_paired(a, values);
	rc = a->csv ? write_csv(ctx, a, values) : CLI_GO;
	if (rc == CLI_GO)
		rc = CLI_EXIT_OK;
out:
	free(values);
	return rc;
}
