/*
 * kiln sim: replay an openb-format trace through the packing policies and
 * report, per policy, the mean and spread over seeds of the unallocated
 * GPU and the fragmentation at a few arrived-workload points, and each
 * policy against a baseline seed by seed (docs/scheduling.md).
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
#include "cmd/sim_departures.h"
#include "cmd/sim_history.h"
#include "sim/sim.h"

static cli_runner cmd_sim;

const struct cli_command cmd_sim_entry = {
	.name = "sim",
	.run = cmd_sim,
	.summary = "replay a GPU trace: packing policies, or autoscaled pools",
	.help = "usage: kiln sim --nodes NODES.csv --pods PODS.csv [--policy P[,P...]]\n"
		"                [--seeds 42-51] [--baseline P] [--csv FILE]\n"
		"                [--plot FILE.png]\n"
		"       kiln sim --nodes NODES.csv --pods PODS.csv --departures\n"
		"                [--load F] [--policy ...] [--seeds ...] [--csv FILE]\n"
		"       kiln sim --from-history [--nodes NODES.csv] [--save-trace DIR]\n"
		"                [--policy ...] [--seeds ...] [--csv ...] [--plot ...]\n"
		"       kiln sim --autoscale POOLS (--pods PODS.csv | --from-history)\n"
		"                [--provision-delay 3m] [--policy P] [-o json]\n"
		"\n"
		"Replay an openb-format trace (Alibaba cluster-trace-gpu-v2023) the\n"
		"way the FGD paper measures GPU packing: pods arrive in random order,\n"
		"never leave, and are resampled up to 130 % of the GPU capacity. For\n"
		"each policy print the mean and standard deviation over the seeds of\n"
		"the unallocated GPU and of the fragmentation at 90, 95, 100, 110 and\n"
		"130 % arrived (the median as an extra), every policy against the\n"
		"baseline seed by seed (mean difference, t, seeds better and worse),\n"
		"and pods placed per second. Runs no server, except that\n"
		"--from-history reads the server's ended jobs (one pod per task) and,\n"
		"without --nodes, its nodes as the trace. See docs/scheduling.md.\n"
		"\n"
		"  --nodes FILE     node list: sn,cpu_milli,memory_mib,gpu,model\n"
		"  --pods FILE      pod list: name,cpu_milli,memory_mib,num_gpu,\n"
		"                   gpu_milli; optional gpu_spec (default: any model),\n"
		"                   creation_time, deletion_time, scheduled_time\n"
		"                   (--departures); other columns ignored\n"
		"  --policy LIST    comma-separated: random, dot-product,\n"
		"                   gpu-clustering, gpu-packing, best-fit, fgd, kiln\n"
		"                   (default: all)\n"
		"  --seeds LIST     seeds such as 42-51 (default) or 1,2,7\n"
		"  --baseline P     compare the others with P, paired by seed\n"
		"                   (default: fgd when it runs)\n"
		"  --csv FILE       write every policy's curves (per arrived %), or\n"
		"                   with --departures one row per policy and seed\n"
		"  --plot FILE.png  draw the means with gnuplot, like the paper's\n"
		"                   Fig. 9a\n"
		"  --departures     replay in time instead: pods arrive at\n"
		"                   creation_time, queue, run their recorded time and\n"
		"                   leave; prints GPU pods' queueing delay p50/p99,\n"
		"                   pods never placed and GPU-hours stranded\n"
		"  --load F         with --departures: arrivals F times as dense as\n"
		"                   recorded (default 1)\n"
		"  --from-history   the pods are the server's ended jobs (MIG jobs\n"
		"                   left out: openb has no MIG slices)\n"
		"  --save-trace DIR keep the history's pods.csv (and nodes.csv) there\n"
		"\n"
		"With --autoscale the pods arrive at creation_time and run until\n"
		"deletion_time (less scheduled_time's wait), through node pools that\n"
		"the server's autoscaler grows and shrinks, and again through the same\n"
		"pools fixed at their max; per pool and in total it prints node-hours,\n"
		"cost (the catalog's price for the SKU, spot or on demand), GPU\n"
		"utilisation, queue wait p50/p95/max and peak nodes.\n"
		"\n"
		"  --autoscale POOLS  pools as kiln server --pool writes them, joined\n"
		"                     by ';' (\"a100 Standard_NC24ads_A100_v4\n"
		"                     1xA100-80GB min=0 max=8; ...\"), or @FILE with one\n"
		"                     a line (# comments); provider=sim only, as a\n"
		"                     replay makes its nodes itself\n"
		"  --provision-delay D  from asking for a node to its being up\n"
		"                     (default 0s)\n"
		"  --policy P         one packing policy (default: kiln, as the\n"
		"                     server's)\n",
};

#define DEFAULT_POLICIES \
	"random,dot-product,gpu-clustering,gpu-packing,best-fit,fgd,kiln"
/* More seeds than this is a typo, not an experiment. */
#define MAX_SEEDS 1000
#define MAX_POLICIES 16

static const int report_points[] = {90, 95, 100, 110, 130};
#define N_POINTS (sizeof(report_points) / sizeof(report_points[0]))

/* Per policy: every seed's curves, and the per-bin figures over seeds. */
struct result {
	const struct kn_pack_policy *policy;
	struct kn_sim_curve *runs;
	struct kn_sim_stats unalloc[KN_SIM_BINS], frag[KN_SIM_BINS];
	double lo[KN_SIM_BINS], hi[KN_SIM_BINS];
	struct kn_sim_speed speed;
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
			  const struct kn_pack_policy **out, size_t *n)
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
		out[k++] = p;
	}
	if (k == 0)
		rc = cli_usage_error(ctx, "--policy: no policy named");
	*n = k;
out:
	free(copy);
	return rc;
}

/* The policy the others are compared with, seed by seed: --baseline, or
   fgd when it runs; -1 for none. */
static int pick_baseline(const struct cli_ctx *ctx, const char *name,
			 const struct kn_pack_policy *const *policies,
			 size_t n, int *out)
{
	*out = -1;
	for (size_t p = 0; p < n; p++)
		if (!strcmp(policies[p]->name, name ? name : "fgd"))
			*out = (int)p;
	if (name && *out < 0)
		return cli_usage_error(ctx,
				       "--baseline: '%s' is not among the "
				       "--policy list",
				       name);
	return CLI_GO;
}

/* Every seed's value at bin x: unallocated, or fragmentation. */
static void seed_values(const struct result *r, size_t n_seeds, int x,
			bool frag, double *v)
{
	for (size_t s = 0; s < n_seeds; s++)
		v[s] = frag ? r->runs[s].frag[x] : r->runs[s].unallocated[x];
}

static void summarize(struct result *r, size_t n_seeds)
{
	double *v = kn_xcalloc(n_seeds, sizeof(*v));

	for (int x = 0; x < KN_SIM_BINS; x++) {
		seed_values(r, n_seeds, x, false, v);
		kn_sim_stats(v, n_seeds, &r->unalloc[x]);
		r->lo[x] = kn_sim_quantile(v, n_seeds, 0.0);
		seed_values(r, n_seeds, x, false, v);
		r->hi[x] = kn_sim_quantile(v, n_seeds, 1.0);
		seed_values(r, n_seeds, x, true, v);
		kn_sim_stats(v, n_seeds, &r->frag[x]);
	}
	free(v);
}

/* b against a at bin x (unallocated GPU), seed by seed. */
static void compare(const struct result *a, const struct result *b,
		    size_t n_seeds, int x, struct kn_sim_paired *out)
{
	double *va = kn_xcalloc(n_seeds, sizeof(*va));
	double *vb = kn_xcalloc(n_seeds, sizeof(*vb));

	seed_values(a, n_seeds, x, false, va);
	seed_values(b, n_seeds, x, false, vb);
	kn_sim_paired(va, vb, n_seeds, out);
	KN_FREE_ALL(va, vb);
}

static void point_headers(const char **headers)
{
	static char names[N_POINTS][16];

	headers[0] = "POLICY";
	for (size_t i = 0; i < N_POINTS; i++) {
		snprintf(names[i], sizeof(names[i]), "%d%%", report_points[i]);
		headers[i + 1] = names[i];
	}
}

static void print_paired(const struct result *res, size_t n, size_t n_seeds,
			 int baseline)
{
	const char *headers[] = {"POLICY", "ARRIVED", "MEAN DIFF", "SD",
				 "T",      "BETTER",  "WORSE",     "EQUAL",
				 NULL};
	struct cli_table *t;

	printf("\nAgainst %s, paired by seed (policy minus %s, unallocated "
	       "GPU %%; better = less unallocated):\n",
	       res[baseline].policy->name, res[baseline].policy->name);
	t = cli_table_new(headers);
	for (size_t p = 0; p < n; p++) {
		if ((int)p == baseline)
			continue;
		for (size_t i = 0; i < N_POINTS; i++) {
			struct kn_sim_paired d;

			compare(&res[baseline], &res[p], n_seeds,
				report_points[i], &d);
			cli_table_cell(t, res[p].policy->name);
			cli_table_cellf(t, "%d%%", report_points[i]);
			sim_paired_cells(t, &d);
		}
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

static void print_speed(const struct result *res, size_t n)
{
	const char *headers[] = {"POLICY",	   "OFFERED", "PLACED",
				 "SECONDS",	   "PLACED/S",
				 "OFFERED/S", NULL};
	struct cli_table *t;

	printf("\nSpeed (pods placed per second of wall time; offered "
	       "includes the pods that fit nowhere):\n");
	t = cli_table_new(headers);
	for (size_t p = 0; p < n; p++) {
		const struct kn_sim_speed *s = &res[p].speed;

		cli_table_cell(t, res[p].policy->name);
		cli_table_cellf(t, "%zu", s->offered);
		cli_table_cellf(t, "%zu", s->placed);
		cli_table_cellf(t, "%.2f", s->seconds);
		cli_table_cellf(t, "%.0f", s->placed_per_s);
		cli_table_cellf(t, "%.0f", s->offered_per_s);
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

/* A policy's name, then series' mean ±sd at each reported point. */
static void points_row(struct cli_table *t, const char *policy,
		       const struct kn_sim_stats *series)
{
	cli_table_cell(t, policy);
	for (size_t i = 0; i < N_POINTS; i++)
		cli_table_cellf(t, "%.2f±%.2f", series[report_points[i]].mean,
				series[report_points[i]].sd);
}

static void print_tables(const struct result *res, size_t n, size_t n_seeds,
			 int baseline)
{
	const char *headers[N_POINTS + 5];
	struct cli_table *t;

	point_headers(headers);
	headers[N_POINTS + 1] = "100% MEDIAN";
	headers[N_POINTS + 2] = "100% MIN-MAX";
	headers[N_POINTS + 3] = "FRAG@100%";
	headers[N_POINTS + 4] = NULL;
	printf("Unallocated GPU (%% of capacity) by arrived workload, mean "
	       "±sd over %zu seed%s:\n",
	       n_seeds, n_seeds == 1 ? "" : "s");
	t = cli_table_new(headers);
	for (size_t p = 0; p < n; p++) {
		points_row(t, res[p].policy->name, res[p].unalloc);
		cli_table_cellf(t, "%.2f", res[p].unalloc[100].median);
		cli_table_cellf(t, "%.2f-%.2f", res[p].lo[100],
				res[p].hi[100]);
		cli_table_cellf(t, "%.2f", res[p].frag[100].mean);
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);

	printf("\nFragmentation (%% of capacity) by arrived workload, "
	       "mean ±sd:\n");
	headers[N_POINTS + 1] = NULL;
	t = cli_table_new(headers);
	for (size_t p = 0; p < n; p++)
		points_row(t, res[p].policy->name, res[p].frag);
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
	if (baseline >= 0 && n > 1 && n_seeds > 1)
		print_paired(res, n, n_seeds, baseline);
	print_speed(res, n);
}

static void print_number(FILE *f, double v)
{
	if (isnan(v))
		fputs(",", f);
	else
		fprintf(f, ",%.4f", v);
}

static int write_csv(const struct cli_ctx *ctx, const char *path,
		     const struct result *res, size_t n, size_t n_seeds,
		     int baseline)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return cli_fail(ctx, "--csv %s: %s", path, strerror(errno));
	fputs("policy,arrived_pct,seeds,unallocated_mean,unallocated_sd,"
	      "unallocated_median,unallocated_min,unallocated_max,frag_mean,"
	      "frag_sd,baseline,diff_mean,diff_sd,diff_t,seeds_better,"
	      "seeds_worse\n",
	      f);
	for (size_t p = 0; p < n; p++) {
		char *policy = kn_csv_cell(res[p].policy->name);
		bool paired = baseline >= 0 && (int)p != baseline;

		for (int x = 0; x < KN_SIM_BINS; x++) {
			struct kn_sim_paired d;

			fprintf(f, "%s,%d,%zu", policy, x, res[p].unalloc[x].n);
			print_number(f, res[p].unalloc[x].mean);
			print_number(f, res[p].unalloc[x].sd);
			print_number(f, res[p].unalloc[x].median);
			print_number(f, res[p].lo[x]);
			print_number(f, res[p].hi[x]);
			print_number(f, res[p].frag[x].mean);
			print_number(f, res[p].frag[x].sd);
			if (!paired) {
				fputs(",,,,,,\n", f);
				continue;
			}
			compare(&res[baseline], &res[p], n_seeds, x, &d);
			fprintf(f, ",%s", res[baseline].policy->name);
			print_number(f, d.mean);
			print_number(f, d.sd);
			print_number(f, isfinite(d.t) ? d.t : NAN);
			fprintf(f, ",%zu,%zu\n", d.lower, d.higher);
		}
		free(policy);
	}
	if (fclose(f) != 0)
		return cli_fail(ctx, "--csv %s: %s", path, strerror(errno));
	return CLI_GO;
}

/* A PNG like the paper's Figure 9a, with means: mean lines, ±1 sd
   bands, and the ideal y = 100 - x. */
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
		for (int x = 75; x <= KN_SIM_MAX_ARRIVED; x++) {
			const struct kn_sim_stats *u = &res[p].unalloc[x];

			if (!isnan(u->mean))
				fprintf(g, "%d %.4f %.4f %.4f\n", x, u->mean,
					u->mean - u->sd, u->mean + u->sd);
		}
		fputs("EOD\n", g);
	}
	fprintf(g,
		"set terminal pngcairo size 900,600 font ',11'\n"
		"set output '%s'\n"
		"set xlabel 'Arrived workload (%% of GPU capacity)'\n"
		"set ylabel 'Unallocated GPU (%%)'\n"
		"set title 'Unallocated GPU, mean of %zu seeds "
		"(band: ±1 sd)'\n"
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

/* The flags of one `kiln sim`. */
struct sim_flags {
	const char *nodes, *pods, *policies, *seed_list, *csv, *plot;
	const char *save_trace, *autoscale, *provision_delay, *baseline;
	const char *load;
	bool from_history, departures;
};

/* Combinations that make no sense, before anything is read. */
static int check_flags(const struct cli_ctx *ctx, const struct sim_flags *f)
{
	if (f->from_history && f->pods)
		return cli_usage_error(ctx, "--from-history and --pods: give "
					    "one (the history is the pod list)");
	if (f->save_trace && !f->from_history)
		return cli_usage_error(ctx, "--save-trace: only with "
					    "--from-history");
	if (f->provision_delay && !f->autoscale)
		return cli_usage_error(ctx, "--provision-delay: only with "
					    "--autoscale");
	if (f->load && !f->departures)
		return cli_usage_error(ctx, "--load: only with --departures");
	if (f->departures && (f->plot || f->autoscale))
		return cli_usage_error(ctx, "--departures: not with %s (a "
					    "replay in time has no curves)",
				       f->plot ? "--plot" : "--autoscale");
	if (f->autoscale)
		return autoscale_checks(ctx, f->nodes, f->pods,
					f->from_history, f->seed_list, f->csv,
					f->plot);
	if (!f->from_history && (!f->nodes || !f->pods))
		return cli_usage_error(ctx, "--nodes and --pods are required "
					    "(openb CSVs; see docs/scheduling.md), "
					    "or --from-history");
	return CLI_GO;
}

/* The paper's experiment: every policy with every seed, then tables. */
static int run_packing(const struct cli_ctx *ctx, struct kn_sim *sim,
		       const struct kn_pack_policy *const *policies, size_t n,
		       const uint64_t *seeds, size_t n_seeds, int baseline,
		       const struct sim_flags *f)
{
	struct result *res = kn_xcalloc(n, sizeof(*res));
	int rc = CLI_EXIT_OK;

	for (size_t p = 0; p < n; p++) {
		int64_t start = kn_mono_ms();

		res[p].policy = policies[p];
		res[p].runs = kn_xcalloc(n_seeds, sizeof(*res[p].runs));
		for (size_t s = 0; s < n_seeds; s++)
			kn_sim_run(sim, policies[p], seeds[s], &res[p].runs[s]);
		kn_sim_speed(res[p].runs, n_seeds,
			     (double)(kn_mono_ms() - start) / 1000.0,
			     &res[p].speed);
		summarize(&res[p], n_seeds);
	}
	print_tables(res, n, n_seeds, baseline);
	if (f->csv)
		rc = write_csv(ctx, f->csv, res, n, n_seeds, baseline);
	if (rc == CLI_GO)
		rc = CLI_EXIT_OK;
	if (rc == CLI_EXIT_OK && f->plot &&
	    (rc = write_plot(ctx, f->plot, res, n, n_seeds)) == CLI_GO)
		rc = CLI_EXIT_OK;
	for (size_t p = 0; p < n; p++)
		free(res[p].runs);
	free(res);
	return rc;
}

/* Load the trace and run the experiment or the replay the flags ask. */
static int run_trace(const struct cli_ctx *ctx, const struct sim_flags *f)
{
	const struct kn_pack_policy *policies[MAX_POLICIES];
	struct kn_error err = {0};
	struct kn_sim *sim = NULL;
	uint64_t *seeds = NULL;
	size_t n_seeds = 0, n = 0;
	int baseline, rc;

	rc = parse_policies(ctx, f->policies, policies, &n);
	if (rc == CLI_GO)
		rc = parse_seeds(ctx, f->seed_list ? f->seed_list : "42-51",
				 &seeds, &n_seeds);
	if (rc == CLI_GO)
		rc = pick_baseline(ctx, f->baseline, policies, n, &baseline);
	if (rc != CLI_GO)
		goto out;
	if (kn_sim_load(f->nodes, f->pods, &sim, &err) < 0) {
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
		(double)kn_sim_capacity(sim) / 1000.0, kn_sim_n_pods(sim), n,
		n == 1 ? "y" : "ies", n_seeds, n_seeds == 1 ? "" : "s");
	if (f->departures) {
		struct sim_departures_args a = {
			.sim = sim,
			.policies = policies,
			.n_policies = n,
			.seeds = seeds,
			.n_seeds = n_seeds,
			.baseline = baseline,
			.load = f->load,
			.csv = f->csv,
		};

		rc = sim_departures_run(ctx, &a);
	} else {
		rc = run_packing(ctx, sim, policies, n, seeds, n_seeds,
				 baseline, f);
	}
out:
	free(seeds);
	kn_sim_free(sim);
	return rc;
}

static int cmd_sim(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *const default_policies = DEFAULT_POLICIES;
	struct sim_flags f = {.policies = default_policies};
	const struct cli_flag flags[] = {
		{"nodes", 0, CLI_FLAG_STRING, &f.nodes},
		{"pods", 0, CLI_FLAG_STRING, &f.pods},
		{"policy", 0, CLI_FLAG_STRING, &f.policies},
		{"seeds", 0, CLI_FLAG_STRING, &f.seed_list},
		{"baseline", 0, CLI_FLAG_STRING, &f.baseline},
		{"csv", 0, CLI_FLAG_STRING, &f.csv},
		{"plot", 0, CLI_FLAG_STRING, &f.plot},
		{"departures", 0, CLI_FLAG_BOOL, &f.departures},
		{"load", 0, CLI_FLAG_STRING, &f.load},
		{"from-history", 0, CLI_FLAG_BOOL, &f.from_history},
		{"save-trace", 0, CLI_FLAG_STRING, &f.save_trace},
		{"autoscale", 0, CLI_FLAG_STRING, &f.autoscale},
		{"provision-delay", 0, CLI_FLAG_STRING, &f.provision_delay},
		{NULL, 0, 0, NULL},
	};
	struct kn_sim_history hist;
	char *trace_dir = NULL, *hist_nodes = NULL, *hist_pods = NULL;
	int rc;

	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	rc = check_flags(ctx, &f);
	if (rc != CLI_GO)
		goto out;
	if (f.from_history) {
		trace_dir = f.save_trace ? kn_xstrdup(f.save_trace)
					 : kn_xstrdup("/tmp/kiln-sim.XXXXXX");
		if (f.save_trace ? kn_mkdir_p(trace_dir, 0755) < 0
				 : !mkdtemp(trace_dir)) {
			rc = cli_fail(ctx, "%s: %s", trace_dir,
				      strerror(errno));
			goto out;
		}
		hist_pods = kn_asprintf("%s/pods.csv", trace_dir);
		if (!f.nodes && !f.autoscale)
			hist_nodes = kn_asprintf("%s/nodes.csv", trace_dir);
		rc = sim_history_write(ctx, trace_dir,
				       !f.nodes && !f.autoscale, &hist);
		if (rc != CLI_GO)
			goto out;
		f.pods = hist_pods;
		if (hist_nodes)
			f.nodes = hist_nodes;
		fprintf(stderr,
			"%s: history: %zu ended job%s, %zu pod%s (one per "
			"task), %zu MIG job%s left out; trace in %s\n",
			ctx->prog, hist.jobs, hist.jobs == 1 ? "" : "s",
			hist.pods, hist.pods == 1 ? "" : "s", hist.skipped_mig,
			hist.skipped_mig == 1 ? "" : "s",
			f.save_trace ? f.save_trace : "a temporary directory");
	}
	if (f.autoscale) {
		struct sim_autoscale_args a = {
			.pools = f.autoscale,
			.pods = f.pods,
			.policy = f.policies == default_policies ? NULL
								 : f.policies,
			.provision_delay = f.provision_delay,
			.seed = 42,
		};

		rc = sim_autoscale_run(ctx, &a);
	} else {
		rc = run_trace(ctx, &f);
	}
out:
	if (trace_dir && !f.save_trace) {
		if (hist_pods)
			unlink(hist_pods);
		if (hist_nodes)
			unlink(hist_nodes);
		rmdir(trace_dir);
	}
	KN_FREE_ALL(hist_pods, hist_nodes, trace_dir);
	return rc;
}
