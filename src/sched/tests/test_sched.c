/*
 * Unit tests for sched: gang placement, filters, reasons, release, queue
 * order. Clusters are built from small tables of node specs; every failed
 * placement is checked to leave the whole snapshot untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "sched/sched.h"

#define GIB ((int64_t)1 << 30)
#define MAX_NODES 4
#define NGPU KN_SCHED_MAX_GPUS_PER_TASK
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

struct node_spec {
	const char *name;
	bool down; /* not schedulable */
	int n_gpus;
	const char *model; /* NULL: H100-80GB */
	int used[NGPU];
	int cpu_total, cpu_used;
	int64_t mem_total, mem_used;
	struct kn_sched_label label; /* key NULL: none */
	struct kn_sched_taint taint; /* key NULL: none */
};

struct fixture {
	struct kn_sched_node nodes[MAX_NODES];
	struct kn_sched_device devices[MAX_NODES][NGPU];
	struct kn_sched_cluster cluster;
};

/* Device i of each node has index i, so bindings read as positions. */
static struct kn_sched_cluster *build(struct fixture *f,
				      const struct node_spec *specs, size_t n)
{
	memset(f, 0, sizeof(*f));
	assert_true(n <= MAX_NODES);
	for (size_t i = 0; i < n; i++) {
		const struct node_spec *s = &specs[i];
		struct kn_sched_node *node = &f->nodes[i];

		node->name = s->name;
		node->schedulable = !s->down;
		node->labels = &s->label;
		node->n_labels = s->label.key ? 1 : 0;
		node->taints = &s->taint;
		node->n_taints = s->taint.key ? 1 : 0;
		node->cpu_milli_total = s->cpu_total;
		node->cpu_milli_used = s->cpu_used;
		node->memory_total = s->mem_total;
		node->memory_used = s->mem_used;
		node->devices = f->devices[i];
		node->n_devices = (size_t)s->n_gpus;
		for (int d = 0; d < s->n_gpus; d++) {
			f->devices[i][d].index = d;
			f->devices[i][d].model =
				s->model ? s->model : "H100-80GB";
			f->devices[i][d].memory_bytes = 80 * GIB;
			f->devices[i][d].used_milli = s->used[d];
		}
	}
	f->cluster.nodes = f->nodes;
	f->cluster.n_nodes = n;
	return &f->cluster;
}

/* Everything placement may change, to compare before and after. */
struct snapshot {
	int used[MAX_NODES][NGPU];
	int cpu_used[MAX_NODES];
	int64_t mem_used[MAX_NODES];
};

static void take(const struct kn_sched_cluster *c, struct snapshot *s)
{
	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < c->n_nodes; i++) {
		for (size_t d = 0; d < c->nodes[i].n_devices; d++)
			s->used[i][d] = c->nodes[i].devices[d].used_milli;
		s->cpu_used[i] = c->nodes[i].cpu_milli_used;
		s->mem_used[i] = c->nodes[i].memory_used;
	}
}

/* Place and expect failure with reason, nothing charged, nothing bound. */
static void expect_refused(struct kn_sched_cluster *c,
			   const struct kn_sched_request *req, int rc,
			   const char *reason)
{
	struct kn_sched_binding b[8], untouched[8];
	struct snapshot before, after;
	char why[256];

	assert_true(req->tasks <= (int)COUNT(b));
	memset(b, 0xab, sizeof(b));
	memcpy(untouched, b, sizeof(b));
	take(c, &before);
	assert_int_equal(kn_sched_place(c, req, b, why, sizeof(why)), rc);
	assert_string_equal(why, reason);
	take(c, &after);
	assert_memory_equal(&before, &after, sizeof(before));
	assert_memory_equal(b, untouched, sizeof(b));
}

/* A task's binding as a case expects it: its node and device indexes,
   as many as the request asks per task. */
struct want {
	size_t node;
	int devices[NGPU];
};

/* Place and expect want's bindings, each charged exactly what it binds. */
static void expect_placed(struct kn_sched_cluster *c,
			  const struct kn_sched_request *req,
			  const struct want *want)
{
	int per_task = req->gpu_milli >= 1000 ? req->gpu_milli / 1000
					      : req->gpu_milli > 0;
	int milli = req->gpu_milli >= 1000 ? 1000 : req->gpu_milli;
	struct kn_sched_binding b[8];
	struct snapshot charged, after;
	char why[128] = "stale";

	assert_true(req->tasks <= (int)COUNT(b));
	take(c, &charged);
	assert_int_equal(kn_sched_place(c, req, b, why, sizeof(why)), 0);
	assert_string_equal(why, "");
	for (int t = 0; t < req->tasks; t++) {
		size_t n = want[t].node;

		assert_int_equal(b[t].node, n);
		assert_int_equal(b[t].n_devices, per_task);
		assert_int_equal(b[t].milli_per_device, milli);
		for (int d = 0; d < per_task; d++) {
			assert_int_equal(b[t].devices[d], want[t].devices[d]);
			/* build() puts device index i at position i. */
			charged.used[n][want[t].devices[d]] += milli;
		}
		if (c->nodes[n].cpu_milli_total > 0)
			charged.cpu_used[n] += req->cpu_milli;
		if (c->nodes[n].memory_total > 0)
			charged.mem_used[n] += req->memory_bytes;
	}
	take(c, &after);
	assert_memory_equal(&charged, &after, sizeof(after));
}

static const struct kn_sched_label pool_train[] = {{"pool", "train"}};
static const struct kn_sched_label pool_infer = {"pool", "infer"};
static const char *const b200[] = {"B200"};

/* ---- cases: a cluster, a request, and its bindings or its refusal ------ */

static const struct place_case {
	const char *what;
	struct node_spec nodes[2];
	size_t n_nodes;
	struct kn_sched_request req;
	int rc;
	const char *reason; /* NULL: placed as want says */
	struct want want[3];
} place_cases[] = {
	/* whole GPUs and gangs */
	{"a gang gets the lowest devices", {{.name = "local", .n_gpus = 4}},
	 1, {.tasks = 2, .gpu_milli = 1000}, .want = {{0, {0}}, {0, {1}}}},
	{"whole GPUs pass over a shared one",
	 {{.name = "local", .n_gpus = 4, .used = {100}}}, 1,
	 {.tasks = 1, .gpu_milli = 2000}, .want = {{0, {1, 2}}}},
	{"whole GPUs need idle devices",
	 {{.name = "local", .n_gpus = 4, .used = {100, 100, 100}}}, 1,
	 {.tasks = 1, .gpu_milli = 2000}, .rc = -ENOSPC,
	 "needs 2 GPUs per task; 1 of 4 GPUs free on local"},
	{"a gang split across nodes",
	 {{.name = "a", .n_gpus = 2}, {.name = "b", .n_gpus = 2}}, 2,
	 {.tasks = 2, .gpu_milli = 2000}, .want = {{0, {0, 1}}, {1, {0, 1}}}},
	/* a is fuller; b alone holds the whole 2 x 2 gang. */
	{"a gang on the one node that holds it",
	 {{.name = "a", .n_gpus = 4, .used = {1000}},
	  {.name = "b", .n_gpus = 4}},
	 2, {.tasks = 2, .gpu_milli = 2000},
	 .want = {{1, {0, 1}}, {1, {2, 3}}}},
	{"a gang on the fuller node when both hold it",
	 {{.name = "a", .n_gpus = 4, .used = {1000}},
	  {.name = "b", .n_gpus = 4}},
	 2, {.tasks = 3, .gpu_milli = 1000},
	 .want = {{0, {1}}, {0, {2}}, {0, {3}}}},
	/* Two tasks fit on a before the third finds no room anywhere. */
	{"a failed gang changes nothing",
	 {{.name = "a", .n_gpus = 4, .cpu_total = 32000, .mem_total = 64 * GIB},
	  {.name = "b", .n_gpus = 4, .used = {0, 1000, 1000, 1000},
	   .cpu_total = 32000, .cpu_used = 1000, .mem_total = 64 * GIB}},
	 2,
	 {.tasks = 3, .gpu_milli = 2000, .cpu_milli = 4000,
	  .memory_bytes = 8 * GIB},
	 .rc = -ENOSPC,
	 "needs 3 tasks x 2 GPUs; 4 of 4 GPUs free on a; room for 2 of 3 "
	 "tasks now"},
	/* shares */
	{"shares pack one device", {{.name = "local", .n_gpus = 2}}, 1,
	 {.tasks = 2, .gpu_milli = 500}, .want = {{0, {0}}, {0, {0}}}},
	{"a cordoned node is skipped",
	 {{.name = "a", .down = true, .n_gpus = 4, .used = {1000}},
	  {.name = "b", .n_gpus = 4}},
	 2, {.tasks = 1, .gpu_milli = 1000}, .want = {{1, {0}}}},
	/* GPU-free nodes are the best fit for work that needs no GPU. */
	{"CPU-only work on a node without GPUs",
	 {{.name = "gpu", .n_gpus = 4, .cpu_total = 64000},
	  {.name = "cpu", .cpu_total = 64000}},
	 2, {.tasks = 1, .cpu_milli = 2000}, .want = {{.node = 1}}},
	/* refusals and their reasons */
	{"larger than any node", {{.name = "local", .n_gpus = 4}}, 1,
	 {.tasks = 1, .gpu_milli = 8000}, .rc = -ENOSPC,
	 "can never fit: needs 8 GPUs per task but the largest node has 4 "
	 "(local)"},
	{"busy now",
	 {{.name = "local", .n_gpus = 4, .used = {1000, 1000, 1000}}}, 1,
	 {.tasks = 2, .gpu_milli = 2000}, .rc = -ENOSPC,
	 "needs 2 tasks x 2 GPUs; 1 of 4 GPUs free on local"},
	{"gang larger than the cluster", {{.name = "local", .n_gpus = 4}}, 1,
	 {.tasks = 3, .gpu_milli = 2000}, .rc = -ENOSPC,
	 "can never fit: needs 3 tasks x 2 GPUs but the cluster holds at "
	 "most 2 such tasks"},
	{"selector",
	 {{.name = "local", .n_gpus = 4, .label = {"pool", "infer"}}}, 1,
	 {.tasks = 1, .gpu_milli = 1000, .selector = pool_train,
	  .n_selector = 1},
	 .rc = -ENOSPC, "can never fit: no node matches selector pool=train"},
	{"taint",
	 {{.name = "local", .n_gpus = 4,
	   .taint = {"gpu", "true", "NoSchedule"}}},
	 1, {.tasks = 1, .gpu_milli = 1000}, .rc = -ENOSPC,
	 "can never fit: no node tolerates taint gpu=true:NoSchedule"},
	{"model",
	 {{.name = "a", .n_gpus = 2},
	  {.name = "b", .n_gpus = 2, .model = "T4-16GB"}},
	 2,
	 {.tasks = 1, .gpu_milli = 1000, .gpu_models = b200,
	  .n_gpu_models = 1},
	 .rc = -ENOSPC,
	 "can never fit: no GPU of model B200 (cluster has: H100-80GB, "
	 "T4-16GB)"},
	{"memory now",
	 {{.name = "local", .mem_total = 8 * GIB, .mem_used = 6 * GIB}}, 1,
	 {.tasks = 1, .memory_bytes = 4 * GIB}, .rc = -ENOSPC,
	 "needs 4096 MiB memory per task; most free on any node is 2048 MiB "
	 "(local)"},
	{"memory never", {{.name = "local", .mem_total = 2 * GIB}}, 1,
	 {.tasks = 1, .memory_bytes = 4 * GIB}, .rc = -ENOSPC,
	 "can never fit: needs 4096 MiB memory per task but the largest "
	 "node has 2048 MiB (local)"},
	{"cpu now", {{.name = "local", .cpu_total = 8000, .cpu_used = 6000}},
	 1, {.tasks = 1, .cpu_milli = 4000}, .rc = -ENOSPC,
	 "needs 4 CPUs per task; most free on any node is 2 CPUs (local)"},
	{"cpu never", {{.name = "local", .cpu_total = 2000}}, 1,
	 {.tasks = 1, .cpu_milli = 4000}, .rc = -ENOSPC,
	 "can never fit: needs 4 CPUs per task but the largest node has 2 "
	 "CPUs (local)"},
	{"cordoned", {{.name = "local", .down = true, .n_gpus = 4}}, 1,
	 {.tasks = 1, .gpu_milli = 1000}, .rc = -ENOSPC,
	 "no schedulable node (1 cordoned or unhealthy)"},
	{"mig", {{.name = "local", .n_gpus = 4}}, 1,
	 {.tasks = 1, .mig_profile = "1g.10gb"}, .rc = -ENOSPC,
	 KN_SCHED_NEVER "no GPU in MIG mode offers profile 1g.10gb"},
	{"share now", {{.name = "local", .n_gpus = 1, .used = {800}}}, 1,
	 {.tasks = 1, .gpu_milli = 500}, .rc = -ENOSPC,
	 "needs 0.5 GPU per task; most free on one GPU is 0.2 (local)"},
	{"part of the gang fits now",
	 {{.name = "a", .n_gpus = 2, .used = {1000, 1000}},
	  {.name = "b", .n_gpus = 2, .used = {0, 1000}}},
	 2, {.tasks = 2, .gpu_milli = 1000}, .rc = -ENOSPC,
	 "needs 2 tasks x 1 GPU; 1 of 2 GPUs free on b; room for 1 of 2 "
	 "tasks now"},
	{"no node has both",
	 {{.name = "a", .n_gpus = 4, .cpu_total = 2000},
	  {.name = "b", .cpu_total = 16000}},
	 2, {.tasks = 1, .gpu_milli = 1000, .cpu_milli = 4000}, .rc = -ENOSPC,
	 "can never fit: needs 1 GPU and 4 CPUs per task but no single node "
	 "has all of it"},
	{"no node has both free now",
	 {{.name = "a", .n_gpus = 2, .cpu_total = 8000, .cpu_used = 8000},
	  {.name = "b", .n_gpus = 2, .used = {1000, 1000},
	   .cpu_total = 8000}},
	 2, {.tasks = 1, .gpu_milli = 1000, .cpu_milli = 1000}, .rc = -ENOSPC,
	 "needs 1 GPU and 1 CPU per task; no node has all of it free now"},
	{"the node that fits is cordoned",
	 {{.name = "a", .n_gpus = 2}, {.name = "b", .down = true, .n_gpus = 8}},
	 2, {.tasks = 1, .gpu_milli = 4000}, .rc = -ENOSPC,
	 "needs 4 GPUs per task; 2 of 2 GPUs free on a; 1 node cordoned or "
	 "unhealthy"},
	{"shares on a cluster without GPUs", {{.name = "cpu", .cpu_total = 8}},
	 1, {.tasks = 1, .gpu_milli = 500}, .rc = -ENOSPC,
	 "can never fit: needs 0.5 GPU per task but no node has a GPU"},
	{"no nodes", {{0}}, 0, {.tasks = 1, .gpu_milli = 1000}, .rc = -ENOSPC,
	 "can never fit: the cluster has no nodes"},
	{"malformed gpu count", {{.name = "local", .n_gpus = 4}}, 1,
	 {.tasks = 1, .gpu_milli = 1500}, .rc = -EINVAL,
	 "invalid request: gpu_milli 1500 is neither a share (1..999) nor 1 "
	 "to 8 whole GPUs"},
	{"memory not in whole MiB", {{.name = "local", .mem_total = 2 * GIB}},
	 1, {.tasks = 1, .memory_bytes = 3000000000}, .rc = -ENOSPC,
	 "can never fit: needs 3000000000 bytes memory per task but the "
	 "largest node has 2048 MiB (local)"},
	{"model on a cluster without GPUs", {{.name = "cpu", .cpu_total = 8}},
	 1,
	 {.tasks = 1, .gpu_milli = 1000, .gpu_models = b200,
	  .n_gpu_models = 1},
	 .rc = -ENOSPC,
	 "can never fit: no GPU of model B200 (cluster has no GPUs)"},
	{"only the GPU node is cordoned",
	 {{.name = "cpu", .cpu_total = 8}, {.name = "g", .down = true,
					    .n_gpus = 1}},
	 2, {.tasks = 1, .gpu_milli = 500}, .rc = -ENOSPC,
	 "needs 0.5 GPU per task; none free on any schedulable node; 1 node "
	 "cordoned or unhealthy"},
	{"busy GPU node after a CPU node",
	 {{.name = "cpu", .cpu_total = 8},
	  {.name = "g", .n_gpus = 2, .used = {1000, 1000}}},
	 2, {.tasks = 1, .gpu_milli = 1000}, .rc = -ENOSPC,
	 "needs 1 GPU per task; 0 of 2 GPUs free on g"},
	{"negative memory", {{.name = "local", .n_gpus = 4}}, 1,
	 {.tasks = 1, .memory_bytes = -1}, .rc = -EINVAL,
	 "invalid request: negative cpu or memory"},
	{"no tasks", {{.name = "local", .n_gpus = 4}}, 1,
	 {.tasks = 0, .gpu_milli = 1000}, .rc = -EINVAL,
	 "invalid request: tasks must be at least 1 (got 0)"},
};

static void test_cases(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(place_cases); i++) {
		const struct place_case *pc = &place_cases[i];
		struct fixture f;
		struct kn_sched_cluster *c = build(&f, pc->nodes, pc->n_nodes);

		print_message("case: %s\n", pc->what);
		if (pc->reason)
			expect_refused(c, &pc->req, pc->rc, pc->reason);
		else
			expect_placed(c, &pc->req, pc->want);
	}
}

/* ---- shares, filters, device indexes, models ------------------------- */

static void test_share_best_fit(void **state)
{
	static const struct {
		int used[4];
		int share;
		int device;
	} shares[] = {
		{{0, 300, 600, 0}, 400, 2},  /* fullest with room */
		{{0, 300, 600, 0}, 500, 1},  /* 2 has only 400 left */
		{{0, 300, 600, 0}, 800, 0},  /* idle, lowest index */
		{{0, 600, 600, 0}, 100, 1},  /* tie: lowest index */
		{{1000, 0, 999, 0}, 1, 2},   /* the last milli */
	};

	(void)state;
	for (size_t i = 0; i < COUNT(shares); i++) {
		struct node_spec spec = {.name = "local", .n_gpus = 4};
		struct kn_sched_request req = {.tasks = 1,
					       .gpu_milli = shares[i].share};
		struct want want = {0, {shares[i].device}};
		struct fixture f;

		memcpy(spec.used, shares[i].used, sizeof(shares[i].used));
		expect_placed(build(&f, &spec, 1), &req, &want);
	}
}

static void test_selector(void **state)
{
	static const struct node_spec pools[] = {
		{.name = "a", .n_gpus = 4, .label = {"pool", "infer"}},
		{.name = "b", .n_gpus = 4, .label = {"pool", "train"}}};
	/* Each pool's selector, and where it lands. */
	static const struct {
		const struct kn_sched_label *pool;
		struct want on;
	} picks[] = {{&pool_infer, {0, {0}}}, {pool_train, {1, {0}}}};

	(void)state;
	for (size_t i = 0; i < COUNT(picks); i++) {
		struct kn_sched_request req = {.tasks = 1, .gpu_milli = 1000,
					       .selector = picks[i].pool,
					       .n_selector = 1};
		struct fixture f;

		expect_placed(build(&f, pools, 2), &req, &picks[i].on);
	}
}

static void test_prefer_no_schedule(void **state)
{
	/* a is first and fuller, but asks to be avoided. */
	static const struct node_spec spot_first[] = {
		{.name = "a", .n_gpus = 4, .used = {1000},
		 .taint = {"spot", NULL, "PreferNoSchedule"}},
		{.name = "b", .n_gpus = 4}};
	static const struct kn_sched_toleration spot_ok = {"spot", true, NULL,
							   NULL};
	static const struct want on_spot[] = {{0, {1}}}, on_b[] = {{1, {0}}};
	struct kn_sched_request req = {.tasks = 1, .gpu_milli = 1000};
	struct kn_sched_request tolerant = req;
	struct fixture f;

	(void)state;
	expect_placed(build(&f, spot_first, 2), &req, on_b);
	tolerant.tolerations = &spot_ok;
	tolerant.n_tolerations = 1;
	expect_placed(build(&f, spot_first, 2), &tolerant, on_spot);
	/* With b full, the spot node after all. */
	build(&f, spot_first, 2);
	for (int d = 0; d < 4; d++)
		f.devices[1][d].used_milli = 1000;
	expect_placed(&f.cluster, &req, on_spot);
}

static void test_devices_by_index_not_position(void **state)
{
	static const struct node_spec spec[] = {{.name = "local", .n_gpus = 4}};
	struct kn_sched_request req = {.tasks = 1, .gpu_milli = 2000};
	struct kn_sched_binding b[1];
	struct fixture f;
	struct kn_sched_cluster *c = build(&f, spec, 1);

	(void)state;
	for (int d = 0; d < 4; d++)
		f.devices[0][d].index = 3 - d;
	assert_int_equal(kn_sched_place(c, &req, b, NULL, 0), 0);
	assert_int_equal(b[0].devices[0], 0);
	assert_int_equal(b[0].devices[1], 1);
	/* Index 0 and 1 sit at positions 3 and 2. */
	assert_int_equal(f.devices[0][3].used_milli, 1000);
	assert_int_equal(f.devices[0][2].used_milli, 1000);
	assert_int_equal(f.devices[0][0].used_milli, 0);
}

static void test_tolerations(void **state)
{
	static const struct {
		struct kn_sched_toleration tol;
		size_t n;
		bool placed;
	} cases[] = {
		{{0}, 0, false},
		{{"gpu", false, "true", NULL}, 1, true},
		{{"gpu", false, "false", NULL}, 1, false},
		{{"gpu", true, NULL, NULL}, 1, true},
		{{"other", true, NULL, NULL}, 1, false},
		{{NULL, true, NULL, NULL}, 1, true},
		{{NULL, false, "true", NULL}, 1, false},
		{{"gpu", false, "true", "NoSchedule"}, 1, true},
		{{"gpu", false, "true", "PreferNoSchedule"}, 1, false},
		{{"gpu", true, NULL, "NoSchedule"}, 1, true},
		{{NULL, true, NULL, "PreferNoSchedule"}, 1, false},
	};
	static const struct node_spec spec[] = {
		{.name = "local", .n_gpus = 4,
		 .taint = {"gpu", "true", "NoSchedule"}}};

	(void)state;
	for (size_t i = 0; i < COUNT(cases); i++) {
		struct kn_sched_request req = {.tasks = 1, .gpu_milli = 1000,
					       .tolerations = &cases[i].tol,
					       .n_tolerations = cases[i].n};
		struct kn_sched_binding b[1];
		struct fixture f;
		struct kn_sched_cluster *c = build(&f, spec, 1);

		print_message("toleration case %zu\n", i);
		if (cases[i].placed)
			assert_int_equal(kn_sched_place(c, &req, b, NULL, 0),
					 0);
		else
			expect_refused(c, &req, -ENOSPC,
				       "can never fit: no node tolerates taint "
				       "gpu=true:NoSchedule");
	}
}

static void test_gpu_models(void **state)
{
	static const struct {
		const char *wanted;
		const char *model;
		bool match;
	} cases[] = {
		{"H100", "H100-80GB", true},
		{"h100", "H100-80GB", true},
		{"H100-80GB", "H100-80GB", true},
		{"a100-80gb", "A100-80GB", true},
		{"A100", "A100-80GB", true},
		{"T4", "T4", true},
		{"H10", "H100-80GB", false},
		{"A100-80", "A100-80GB", false},
		{"H100-80GB", "H100", false},
		{"T4", "H100-80GB", false},
	};

	(void)state;
	for (size_t i = 0; i < COUNT(cases); i++) {
		struct node_spec spec = {.name = "local", .n_gpus = 1,
					 .model = cases[i].model};
		const char *const wanted[] = {cases[i].wanted};
		struct kn_sched_request req = {.tasks = 1, .gpu_milli = 1000,
					       .gpu_models = wanted,
					       .n_gpu_models = 1};
		struct kn_sched_binding b[1];
		struct fixture f;
		struct kn_sched_cluster *c = build(&f, &spec, 1);
		int rc = kn_sched_place(c, &req, b, NULL, 0);

		print_message("model %s vs %s\n", cases[i].wanted,
			      cases[i].model);
		assert_int_equal(rc, cases[i].match ? 0 : -ENOSPC);
	}
}

static void test_gpu_models_on_mixed_node(void **state)
{
	static const struct node_spec spec[] = {{.name = "mixed", .n_gpus = 4}};
	static const char *const wanted[] = {"B200", "t4"};
	static const struct want the_t4s[] = {{0, {1, 3}}};
	struct kn_sched_request req = {.tasks = 1, .gpu_milli = 2000,
				       .gpu_models = wanted,
				       .n_gpu_models = 2};
	struct fixture f;
	struct kn_sched_cluster *c = build(&f, spec, 1);

	(void)state;
	f.devices[0][1].model = "T4-16GB";
	f.devices[0][3].model = "T4-16GB";
	expect_placed(c, &req, the_t4s);
	expect_refused(c, &req, -ENOSPC,
		       "needs 2 GPUs per task; 0 of 2 GPUs free on mixed");
	req.gpu_milli = 4000;
	expect_refused(c, &req, -ENOSPC,
		       "can never fit: needs 4 GPUs per task but the largest "
		       "node has 2 (mixed)");
}

/* ---- cpu and memory ----------------------------------------------------- */

static void test_cpu_and_memory(void **state)
{
	static const struct node_spec spec[] = {
		{.name = "local", .n_gpus = 4, .cpu_total = 8000,
		 .mem_total = 16 * GIB},
		{.name = "untracked", .n_gpus = 4}};
	struct kn_sched_request req = {.tasks = 2, .gpu_milli = 1000,
				       .cpu_milli = 3000,
				       .memory_bytes = 4 * GIB};
	struct kn_sched_request one = {.tasks = 1, .cpu_milli = 3000};
	struct kn_sched_request big = {.tasks = 1, .memory_bytes = 9 * GIB};
	static const struct want both_on_local[] = {{0, {0}}, {0, {1}}};
	static const struct want on_untracked[] = {{.node = 1}};
	struct fixture f;
	struct kn_sched_cluster *c = build(&f, spec, 2);

	(void)state;
	expect_placed(c, &req, both_on_local);
	assert_int_equal(f.nodes[0].cpu_milli_used, 6000);
	assert_int_equal(f.nodes[0].memory_used, 8 * GIB);

	/* Only the untracked node is left; its counters stay at zero. */
	expect_placed(c, &one, on_untracked);

	c->nodes[1].schedulable = false;
	expect_refused(c, &one, -ENOSPC,
		       "needs 3 CPUs per task; most free on any node is 2 "
		       "CPUs (local); 1 node cordoned or unhealthy");
	expect_refused(c, &big, -ENOSPC,
		       "needs 9216 MiB memory per task; most free on any "
		       "node is 8192 MiB (local); 1 node cordoned or "
		       "unhealthy");
}

/* ---- release -------------------------------------------------------------- */

static void test_release_restores(void **state)
{
	static const struct node_spec spec[] = {
		{.name = "a", .n_gpus = 4, .used = {300}, .cpu_total = 8000,
		 .cpu_used = 500, .mem_total = 8 * GIB},
		{.name = "b", .n_gpus = 4, .used = {0, 250},
		 .cpu_total = 8000, .mem_total = 8 * GIB}};
	static const struct kn_sched_request reqs[] = {
		{.tasks = 3, .gpu_milli = 500, .cpu_milli = 1000,
		 .memory_bytes = GIB},
		{.tasks = 2, .gpu_milli = 2000, .cpu_milli = 3000,
		 .memory_bytes = 2 * GIB},
		{.tasks = 4, .cpu_milli = 2000},
	};

	(void)state;
	for (size_t i = 0; i < COUNT(reqs); i++) {
		struct kn_sched_binding b[4];
		struct snapshot before, during, after;
		struct fixture f;
		struct kn_sched_cluster *c = build(&f, spec, 2);

		take(c, &before);
		assert_int_equal(kn_sched_place(c, &reqs[i], b, NULL, 0), 0);
		take(c, &during);
		assert_memory_not_equal(&before, &during, sizeof(before));
		kn_sched_release(c, &reqs[i], b);
		take(c, &after);
		assert_memory_equal(&before, &after, sizeof(before));
	}
}

static void test_release_stale_binding(void **state)
{
	/* Released twice, or into a rebuilt snapshot: nothing goes negative. */
	static const struct node_spec spec[] = {
		{.name = "a", .n_gpus = 2, .used = {300}, .cpu_total = 8000,
		 .mem_total = 8 * GIB}};
	struct kn_sched_request req = {.tasks = 1, .gpu_milli = 500,
				       .cpu_milli = 1000,
				       .memory_bytes = GIB};
	struct kn_sched_binding b[1], stale[1] = {{.node = 7}};
	struct snapshot before, after;
	struct fixture f;
	struct kn_sched_cluster *c = build(&f, spec, 1);

	(void)state;
	assert_int_equal(kn_sched_place(c, &req, b, NULL, 0), 0);
	assert_int_equal(b[0].devices[0], 0);
	assert_int_equal(f.devices[0][0].used_milli, 800);
	kn_sched_release(c, &req, b);
	kn_sched_release(c, &req, b);
	assert_int_equal(f.devices[0][0].used_milli, 0);
	assert_int_equal(f.nodes[0].cpu_milli_used, 0);
	assert_int_equal(f.nodes[0].memory_used, 0);

	/* An unknown node index is ignored altogether. */
	f.devices[0][0].used_milli = 500;
	f.nodes[0].cpu_milli_used = 1000;
	f.nodes[0].memory_used = GIB;
	take(c, &before);
	kn_sched_release(c, &req, stale);
	take(c, &after);
	assert_memory_equal(&before, &after, sizeof(before));

	/* An unknown device index skips the device, not the node's share. */
	b[0].devices[0] = 9;
	kn_sched_release(c, &req, b);
	assert_int_equal(f.devices[0][0].used_milli, 500);
	assert_int_equal(f.nodes[0].cpu_milli_used, 0);
	assert_int_equal(f.nodes[0].memory_used, 0);
}

/* ---- queue ------------------------------------------------------------- */

static void test_sort_queue(void **state)
{
	struct kn_sched_queue_entry q[] = {
		{.job_id = 5, .priority = 0, .submitted_at = 100},
		{.job_id = 4, .priority = 10, .submitted_at = 300},
		{.job_id = 3, .priority = 0, .submitted_at = 50},
		{.job_id = 2, .priority = 0, .submitted_at = 100},
		{.job_id = 1, .priority = -5, .submitted_at = 1},
		{.job_id = 6, .priority = 10, .submitted_at = 200},
	};
	static const int64_t order[] = {6, 4, 3, 2, 5, 1};

	(void)state;
	kn_sched_sort_queue(q, COUNT(q));
	for (size_t i = 0; i < COUNT(q); i++)
		assert_int_equal(q[i].job_id, order[i]);
	kn_sched_sort_queue(q, 0);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_cases),
	cmocka_unit_test(test_share_best_fit),
	cmocka_unit_test(test_selector),
	cmocka_unit_test(test_prefer_no_schedule),
	cmocka_unit_test(test_devices_by_index_not_position),
	cmocka_unit_test(test_tolerations),
	cmocka_unit_test(test_gpu_models),
	cmocka_unit_test(test_gpu_models_on_mixed_node),
	cmocka_unit_test(test_cpu_and_memory),
	cmocka_unit_test(test_release_restores),
	cmocka_unit_test(test_release_stale_binding),
	cmocka_unit_test(test_sort_queue))
