/*
 * kiln sim: replay an openb-format trace through the packing policies and
 * report, per policy, the median over seeds of the unallocated GPU and the
 * fragmentation at a few arrived-workload points (docs/scheduling.md).
 *
 * The experiment itself lives in src/sim/ and src/sched/; this file reads
 * flags, times the runs, prints the tables and writes the CSV and the
 * gnuplot figure. The figure is drawn by the gnuplot program (Debian
 * gnuplot-nox) fed a script on a pipe, with the data inline.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/sim_autoscale.h"
#include "cmd/sim_history.h"
#include "sim/sim.h"

#define DEFAULT_POLICIES \
	"random,dot-product,gpu-clustering,gpu-packing,best-fit,fgd,kiln"
/* More seeds than this is a typo, not an experiment. */
#define MAX_SEEDS 1000
#define MAX_POLICIES 16

static const int report_points[] = {90, 95, 100, 110, 130};
#define N_POINTS (sizeof(report_points) / sizeof(report_points[0]))

/* Per policy: every seed's curves, and the per-bin summaries. */
struct result {
	const struct kn_pack_policy *policy;
	struct kn_sim_curve *runs;
	double median[KN_SIM_BINS], p25[KN_SIM_BINS], p75[KN_SIM_BINS];
	double lo[KN_SIM_BINS], hi[KN_SIM_BINS], frag[KN_SIM_BINS];
	size_t offered, placed;
	int64_t ms;
};

static int parse_seeds(const struct cli_ctx *ctx, const char *s,
		       uint64_t **out, size_t *n)
{
	unsigned long long a, b;
	char *end;
	uint64_t *seeds = NULL;
	size_t k = 0;
	const char *p = s;

	while (*p) {
		errno = 0;
		a = strtoull(p, &end, 10);
		if (end == p || errno || *p == '-')
			goto bad;
		b = a;
		if (*end == '-') {
			p = end + 1;
			b = strtoull(p, &end, 10);
			if (end == p || errno || *p == '-' || b < a)
				goto bad;
		}
		if (*end && *end != ',')
			goto bad;
		if (b - a >= MAX_SEEDS || k + (b - a + 1) > MAX_SEEDS) {
			free(seeds);
			return cli_usage_error(ctx, "--seeds: at most %d seeds",
					       MAX_SEEDS);
		}
		seeds = kn_xrealloc(seeds, (k + (b - a + 1)) * sizeof(*seeds));
		for (unsigned long long x = a; x <= b; x++)
			seeds[k++] = x;
		p = *end ? end + 1 : end;
		if (*end && !*p)
			goto bad;
	}
	if (k == 0)
		goto bad;
	*out = seeds;
	*n = k;
	return CLI_GO;
bad:
	free(seeds);
	return cli_usage_error(ctx,
			       "--seeds: '%s' is not a seed list such as 42-51 "
			       "or 1,2,7",
			       s);
}

static int parse_policies(const struct cli_ctx *ctx, const char *list,
			  struct result *res, size_t *n)
{
	char *copy = kn_xstrdup(list), *save = NULL, *name;
	const char *names[MAX_POLICIES + 1];
	size_t k = 0, j = 0;
	int rc = CLI_GO;

	for (; kn_pack_policies[j] && j < MAX_POLICIES; j++)
		names[j] = kn_pack_policies[j]->name;
	names[j] = NULL;
	for (name = strtok_r(copy, ",", &save); name;
	     name = strtok_r(NULL, ",", &save)) {
		const struct kn_pack_policy *p = kn_pack_policy_find(name);
		const char *near;

		if (!p) {
			near = cli_closest(name, names);
			rc = near ? cli_usage_error(ctx,
						    "--policy: unknown policy "
						    "'%s'; did you mean '%s'?",
						    name, near)
				  : cli_usage_error(ctx,
						    "--policy: unknown policy "
						    "'%s' (one of " DEFAULT_POLICIES
						    ")",
						    name);
			goto out;
		}
		if (k == MAX_POLICIES) {
			rc = cli_usage_error(ctx, "--policy: at most %d",
					     MAX_POLICIES);
			goto out;
		}
		res[k++].policy = p;
	}
	if (k == 0)
		rc = cli_usage_error(ctx, "--policy: no policy named");
	*n = k;
out:
	free(copy);
	return rc;
}

static void summarize(struct result *r, size_t n_seeds)
{
	double *v = kn_xcalloc(n_seeds, sizeof(*v));

	for (int x = 0; x < KN_SIM_BINS; x++) {
		double q[5] = {0.0, 0.25, 0.5, 0.75, 1.0};
		double *dst[5] = {r->lo, r->p25, r->median, r->p75, r->hi};

		for (int i = 0; i < 5; i++) {
			for (size_t s = 0; s < n_seeds; s++)
				v[s] = r->runs[s].unallocated[x];
			dst[i][x] = kn_sim_quantile(v, n_seeds, q[i]);
		}
		for (size_t s = 0; s < n_seeds; s++)
			v[s] = r->runs[s].frag[x];
		r->frag[x] = kn_sim_quantile(v, n_seeds, 0.5);
	}
	free(v);
}

static void print_tables(const struct result *res, size_t n, size_t n_seeds)
{
	const char *headers[N_POINTS + 4];
	struct cli_table *t;
	char label[32];

	headers[0] = "POLICY";
	for (size_t i = 0; i < N_POINTS; i++) {
		static char names[N_POINTS][16];

		snprintf(names[i], sizeof(names[i]), "%d%%", report_points[i]);
		headers[i + 1] = names[i];
	}
	headers[N_POINTS + 1] = "100% MIN-MAX";
	headers[N_POINTS + 2] = "FRAG@100%";
	headers[N_POINTS + 3] = NULL;
	printf("Unallocated GPU (%% of capacity) by arrived workload, median "
	       "of %zu seed%s:\n",
	       n_seeds, n_seeds == 1 ? "" : "s");
	t = cli_table_new(headers);
	for (size_t p = 0; p < n; p++) {
		cli_table_cell(t, res[p].policy->name);
		for (size_t i = 0; i < N_POINTS; i++)
			cli_table_cellf(t, "%.2f",
					res[p].median[report_points[i]]);
		cli_table_cellf(t, "%.2f-%.2f", res[p].lo[100],
				res[p].hi[100]);
		cli_table_cellf(t, "%.2f", res[p].frag[100]);
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);

	printf("\nFragmentation (%% of capacity) by arrived workload, "
	       "median:\n");
	headers[N_POINTS + 1] = NULL;
	t = cli_table_new(headers);
	for (size_t p = 0; p < n; p++) {
		cli_table_cell(t, res[p].policy->name);
		for (size_t i = 0; i < N_POINTS; i++)
			cli_table_cellf(t, "%.2f",
					res[p].frag[report_points[i]]);
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);

	printf("\nSpeed:\n");
	headers[0] = "POLICY";
	headers[1] = "PODS";
	headers[2] = "PLACED";
	headers[3] = "SECONDS";
	headers[4] = "PODS/S";
	headers[5] = NULL;
	t = cli_table_new(headers);
	for (size_t p = 0; p < n; p++) {
		double s = (double)res[p].ms / 1000.0;

		cli_table_cell(t, res[p].policy->name);
		cli_table_cellf(t, "%zu", res[p].offered);
		cli_table_cellf(t, "%zu", res[p].placed);
		cli_table_cellf(t, "%.2f", s);
		snprintf(label, sizeof(label), "%.0f",
			 s > 0 ? (double)res[p].offered / s : 0.0);
		cli_table_cell(t, s > 0 ? label : "-");
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

static void print_number(FILE *f, double v)
{
	if (isnan(v))
		fputs(",", f);
	else
		fprintf(f, ",%.4f", v);
}

static int write_csv(const struct cli_ctx *ctx, const char *path,
		     const struct result *res, size_t n)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return cli_fail(ctx, "--csv %s: %s", path, strerror(errno));
	fputs("policy,arrived_pct,unallocated_median,unallocated_p25,"
	      "unallocated_p75,unallocated_min,unallocated_max,frag_median\n",
	      f);
	for (size_t p = 0; p < n; p++) {
		char *policy = kn_csv_cell(res[p].policy->name);

		for (int x = 0; x < KN_SIM_BINS; x++) {
			fprintf(f, "%s,%d", policy, x);
			print_number(f, res[p].median[x]);
			print_number(f, res[p].p25[x]);
			print_number(f, res[p].p75[x]);
			print_number(f, res[p].lo[x]);
			print_number(f, res[p].hi[x]);
			print_number(f, res[p].frag[x]);
			fputc('\n', f);
		}
		free(policy);
	}
	if (fclose(f) != 0)
		return cli_fail(ctx, "--csv %s: %s", path, strerror(errno));
	return CLI_GO;
}

/* A PNG like the paper's Figure 9a: median lines, 25-75 % bands, and
   the ideal y = 100 - x. */
static int write_plot(const struct cli_ctx *ctx, const char *path,
		      const struct result *res, size_t n, size_t n_seeds)
{
	FILE *g;
	int status;

	if (strpbrk(path, "'\n"))
		return cli_usage_error(ctx, "--plot: the file name may not "
					    "contain a quote or a newline");
	g = popen("gnuplot", "w");
	if (!g)
		return cli_fail(ctx, "--plot: cannot run gnuplot: %s",
				strerror(errno));
	for (size_t p = 0; p < n; p++) {
		fprintf(g, "$d%zu << EOD\n", p);
		for (int x = 75; x <= KN_SIM_MAX_ARRIVED; x++)
			if (!isnan(res[p].median[x]))
				fprintf(g, "%d %.4f %.4f %.4f\n", x,
					res[p].median[x], res[p].p25[x],
					res[p].p75[x]);
		fputs("EOD\n", g);
	}
	fprintf(g,
		"set terminal pngcairo size 900,600 font ',11'\n"
		"set output '%s'\n"
		"set xlabel 'Arrived workload (%% of GPU capacity)'\n"
		"set ylabel 'Unallocated GPU (%%)'\n"
		"set title 'Unallocated GPU, median of %zu seeds "
		"(band: 25-75 %%)'\n"
		"set xrange [75:%d]\nset yrange [0:30]\nset grid\n"
		"set key top right\nset style fill transparent solid 0.2\n"
		"plot 100-x with lines dashtype 2 lc rgb 'black' title 'Ideal'",
		path, n_seeds, KN_SIM_MAX_ARRIVED);
	for (size_t p = 0; p < n; p++)
		fprintf(g,
			", $d%zu using 1:3:4 with filledcurves lc %zu notitle"
			", $d%zu using 1:2 with lines lw 2 lc %zu title '%s'",
			p, p + 1, p, p + 1, res[p].policy->name);
	fputs("\n", g);
	status = pclose(g);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return cli_fail(ctx,
				"--plot %s: gnuplot failed (is it installed? "
				"Debian: gnuplot-nox)",
				path);
	return CLI_GO;
}

/* --autoscale replays pods in time on its pools: the flags of the
   packing experiment do not apply. */
static int autoscale_checks(const struct cli_ctx *ctx, const char *nodes,
			    const char *pods, bool from_history,
			    const char *seed_list, const char *csv,
			    const char *plot)
{
	const char *which = nodes	      ? "--nodes"
			    : seed_list	      ? "--seeds"
			    : csv	      ? "--csv"
			    : plot	      ? "--plot"
					      : NULL;

	if (which)
		return cli_usage_error(ctx,
				       "%s: not with --autoscale (the pools "
				       "are the cluster; one run, no curves)",
				       which);
	if (!pods && !from_history)
		return cli_usage_error(ctx, "--autoscale: --pods is required "
					    "(a pod CSV with creation_time and "
					    "deletion_time), or --from-history");
	return CLI_GO;
}

int cmd_sim(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *const default_policies = DEFAULT_POLICIES;
	const char *nodes = NULL, *pods = NULL, *policies = default_policies;
	const char *seed_list = NULL, *csv = NULL, *plot = NULL;
	const char *save_trace = NULL, *autoscale = NULL;
	const char *provision_delay = NULL;
	bool from_history = false;
	const struct cli_flag flags[] = {
		{"nodes", 0, CLI_FLAG_STRING, &nodes},
		{"pods", 0, CLI_FLAG_STRING, &pods},
		{"policy", 0, CLI_FLAG_STRING, &policies},
		{"seeds", 0, CLI_FLAG_STRING, &seed_list},
		{"csv", 0, CLI_FLAG_STRING, &csv},
		{"plot", 0, CLI_FLAG_STRING, &plot},
		{"from-history", 0, CLI_FLAG_BOOL, &from_history},
		{"save-trace", 0, CLI_FLAG_STRING, &save_trace},
		{"autoscale", 0, CLI_FLAG_STRING, &autoscale},
		{"provision-delay", 0, CLI_FLAG_STRING, &provision_delay},
		{NULL, 0, 0, NULL},
	};
	struct sim_history hist;
	char *trace_dir = NULL, *hist_nodes = NULL, *hist_pods = NULL;
	struct result res[MAX_POLICIES];
	struct kn_error err = {0};
	struct kn_sim *sim = NULL;
	uint64_t *seeds = NULL;
	size_t n_seeds = 0, n_res = 0;
	int rc;

	memset(res, 0, sizeof(res));
	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	if (from_history && pods) {
		rc = cli_usage_error(ctx, "--from-history and --pods: give one "
					  "(the history is the pod list)");
		goto out;
	}
	if (save_trace && !from_history) {
		rc = cli_usage_error(ctx, "--save-trace: only with "
					  "--from-history");
		goto out;
	}
	if (provision_delay && !autoscale) {
		rc = cli_usage_error(ctx, "--provision-delay: only with "
					  "--autoscale");
		goto out;
	}
	if (autoscale) {
		rc = autoscale_checks(ctx, nodes, pods, from_history, seed_list,
				      csv, plot);
		if (rc != CLI_GO)
			goto out;
	} else if (!from_history && (!nodes || !pods)) {
		rc = cli_usage_error(ctx, "--nodes and --pods are required "
					  "(openb CSVs; see docs/scheduling.md), "
					  "or --from-history");
		goto out;
	}
	if (!autoscale) {
		rc = parse_policies(ctx, policies, res, &n_res);
		if (rc != CLI_GO)
			goto out;
		rc = parse_seeds(ctx, seed_list ? seed_list : "42-51", &seeds,
				 &n_seeds);
		if (rc != CLI_GO)
			goto out;
	}
	if (from_history) {
		trace_dir = save_trace ? kn_xstrdup(save_trace)
				       : kn_xstrdup("/tmp/kiln-sim.XXXXXX");
		if (save_trace ? kn_mkdir_p(trace_dir, 0755) < 0
			       : !mkdtemp(trace_dir)) {
			rc = cli_fail(ctx, "%s: %s", trace_dir,
				      strerror(errno));
			goto out;
		}
		hist_pods = kn_asprintf("%s/pods.csv", trace_dir);
		if (!nodes && !autoscale)
			hist_nodes = kn_asprintf("%s/nodes.csv", trace_dir);
		rc = sim_history_write(ctx, trace_dir, !nodes && !autoscale,
				       &hist);
		if (rc != CLI_GO)
			goto out;
		pods = hist_pods;
		if (hist_nodes)
			nodes = hist_nodes;
		fprintf(stderr,
			"%s: history: %zu ended job%s, %zu pod%s (one per "
			"task), %zu MIG job%s left out; trace in %s\n",
			ctx->prog, hist.jobs, hist.jobs == 1 ? "" : "s",
			hist.pods, hist.pods == 1 ? "" : "s", hist.skipped_mig,
			hist.skipped_mig == 1 ? "" : "s",
			save_trace ? save_trace : "a temporary directory");
	}
	if (autoscale) {
		struct sim_autoscale_args a = {
			.pools = autoscale,
			.pods = pods,
			.policy = policies == default_policies ? NULL : policies,
			.provision_delay = provision_delay,
			.seed = 42,
		};

		rc = sim_autoscale_run(ctx, &a);
		goto out;
	}
	if (kn_sim_load(nodes, pods, &sim, &err) < 0) {
		rc = err.code == KN_EIO
			     ? cli_fail(ctx,
					"%s (the openb traces come from "
					"github.com/alibaba/clusterdata, "
					"cluster-trace-gpu-v2023)",
					err.message)
			     : cli_fail(ctx, "%s", err.message);
		goto out;
	}
	fprintf(stderr, "%s: %zu nodes, %.0f GPUs, %zu pods; %zu polic%s x "
			"%zu seed%s\n",
		ctx->prog, kn_sim_n_nodes(sim),
		(double)kn_sim_capacity(sim) / 1000.0, kn_sim_n_pods(sim),
		n_res, n_res == 1 ? "y" : "ies", n_seeds,
		n_seeds == 1 ? "" : "s");
	for (size_t p = 0; p < n_res; p++) {
		int64_t start = kn_mono_ms();

		res[p].runs = kn_xcalloc(n_seeds, sizeof(*res[p].runs));
		for (size_t s = 0; s < n_seeds; s++) {
			kn_sim_run(sim, res[p].policy, seeds[s],
				   &res[p].runs[s]);
			res[p].offered += res[p].runs[s].offered;
			res[p].placed += res[p].runs[s].placed;
		}
		res[p].ms = kn_mono_ms() - start;
		summarize(&res[p], n_seeds);
	}
	print_tables(res, n_res, n_seeds);
	if (csv && (rc = write_csv(ctx, csv, res, n_res)) != CLI_GO)
		goto out;
	if (plot && (rc = write_plot(ctx, plot, res, n_res, n_seeds)) != CLI_GO)
		goto out;
	rc = CLI_EXIT_OK;
out:
	for (size_t p = 0; p < n_res; p++)
		free(res[p].runs);
	free(seeds);
	kn_sim_free(sim);
	if (trace_dir && !save_trace) {
		if (hist_pods)
			unlink(hist_pods);
		if (hist_nodes)
			unlink(hist_nodes);
		rmdir(trace_dir);
	}
	free(hist_pods);
	free(hist_nodes);
	free(trace_dir);
	return rc;
}
