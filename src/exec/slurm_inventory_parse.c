/*
 * Slurm's inventory as text: the nodes of `sinfo --json`, the partitions
 * of `scontrol show partition -o`, and whether a gang could ever run in a
 * partition. Pure: no process, no file; the executor (slurm.c) runs the
 * commands and hands their output here. Everything read is Slurm's and
 * may be anything: sizes are capped, strings cut to their fields.
 */
#include "exec.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* More than any real cluster; a document with more nodes is refused. */
#define NODES_MAX 100000
#define PARTITIONS_MAX 10000

bool exec_slurm_name_ok(const char *name, size_t n, size_t len)
{
	if (n == 0 || n >= len || name[0] == '.' || name[0] == '_' ||
	    name[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') ||
		      (name[i] >= 'A' && name[i] <= 'Z') ||
		      (name[i] >= '0' && name[i] <= '9') || name[i] == '.' ||
		      name[i] == '_' || name[i] == '-'))
			return false;
	return true;
}

int kn_slurm_node_file_parse(const char *text, size_t len, char *out,
			     size_t len_out)
{
	const char *nl = memchr(text, '\n', len);
	size_t n = nl ? (size_t)(nl - text) : len;

	if (n + (nl ? 1 : 0) != len || !exec_slurm_name_ok(text, n, len_out))
		return -EINVAL;
	memcpy(out, text, n);
	out[n] = '\0';
	return 0;
}

static void copy_field(char *out, size_t len, const char *value)
{
	kn_strlcpy(out, value ? value : "", len);
}

/* ---- GRES ---- */

/*
 * Whether a gpu type names a MIG profile: "1g.10gb", or with a model in
 * front as Slurm's NVML detection names them, "a100_1g.10gb".
 */
static bool mig_type(const char *type)
{
	const char *p = strrchr(type, '_');
	unsigned g, mem;
	int end = 0;

	p = p ? p + 1 : type;
	return sscanf(p, "%ug.%ugb%n", &g, &mem, &end) == 2 &&
	       p[end] == '\0';
}

/* "64", "2K": a count, or -1. */
static int64_t gres_count(const char *text)
{
	char *end;
	long long n;

	if (*text < '0' || *text > '9')
		return -1;
	errno = 0;
	n = strtoll(text, &end, 10);
	if (errno || n < 0)
		return -1;
	if (*end == 'K' || *end == 'M' || *end == 'G') {
		int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : 30;

		if (n > (INT64_MAX >> shift))
			return -1;
		n <<= shift;
		end++;
	}
	return *end == '\0' ? n : -1;
}

/*
 * One GRES word without its "(...)" tail: NAME:COUNT or NAME:TYPE:COUNT.
 * 0 and *g (count and name, type), or -1 when it is neither.
 */
static int gres_word(const char *word, struct kn_slurm_gres *g)
{
	char buf[160], *first, *second;
	int64_t n;

	kn_strlcpy(buf, word, sizeof(buf));
	buf[strcspn(buf, "(")] = '\0';
	first = strchr(buf, ':');
	if (!first || first == buf)
		return -1;
	*first++ = '\0';
	second = strrchr(first, ':');
	memset(g, 0, sizeof(*g));
	copy_field(g->name, sizeof(g->name), buf);
	if (second) {
		*second++ = '\0';
		copy_field(g->type, sizeof(g->type), first);
		n = gres_count(second);
	} else {
		n = gres_count(first);
	}
	if (n < 0)
		return -1;
	g->count = n;
	g->mig = !strcmp(g->name, "gpu") && mig_type(g->type);
	return 0;
}

/* Split "a:1(S:0-1),b:t:2" at the commas outside parentheses. */
static size_t gres_split(const char *text, char words[][160], size_t max)
{
	size_t n = 0, k = 0;
	int depth = 0;

	for (const char *p = text;; p++) {
		if (*p == '\0' || (*p == ',' && depth == 0)) {
			if (k && n < max) {
				words[n][k < 159 ? k : 159] = '\0';
				n++;
			}
			k = 0;
			if (*p == '\0')
				break;
			continue;
		}
		depth += *p == '(' ? 1 : *p == ')' && depth ? -1 : 0;
		if (n < max && k < 159)
			words[n][k] = *p;
		k++;
	}
	return n;
}

static void gres_parse(const char *gres, const char *used,
		       struct kn_slurm_node *node)
{
	char words[KN_SLURM_GRES_MAX][160];
	size_t n = gres_split(gres ? gres : "", words, KN_SLURM_GRES_MAX);

	node->n_gres = 0;
	for (size_t i = 0; i < n; i++)
		if (gres_word(words[i], &node->gres[node->n_gres]) == 0 &&
		    node->gres[node->n_gres].count > 0)
			node->n_gres++;
	n = gres_split(used ? used : "", words, KN_SLURM_GRES_MAX);
	for (size_t i = 0; i < n; i++) {
		struct kn_slurm_gres u;

		if (gres_word(words[i], &u) < 0)
			continue;
		for (size_t k = 0; k < node->n_gres; k++)
			if (!strcmp(node->gres[k].name, u.name) &&
			    !strcmp(node->gres[k].type, u.type))
				node->gres[k].used = u.count;
	}
}

int64_t kn_slurm_node_gpus(const struct kn_slurm_node *n)
{
	int64_t sum = 0;

	for (size_t i = 0; i < n->n_gres; i++)
		if (!strcmp(n->gres[i].name, "gpu") && !n->gres[i].mig)
			sum += n->gres[i].count;
	return sum;
}

const char *kn_slurm_node_gpu_type(const struct kn_slurm_node *n)
{
	for (size_t i = 0; i < n->n_gres; i++)
		if (!strcmp(n->gres[i].name, "gpu") && !n->gres[i].mig &&
		    n->gres[i].type[0])
			return n->gres[i].type;
	return "";
}

const char *kn_slurm_gres_mig_profile(const struct kn_slurm_gres *g)
{
	const char *us = strrchr(g->type, '_');

	return us ? us + 1 : g->type;
}

/* Of a node's GRES name (and type, when not NULL): the total count. */
static int64_t gres_total(const struct kn_slurm_node *n, const char *name,
			  const char *type)
{
	int64_t sum = 0;

	for (size_t i = 0; i < n->n_gres; i++) {
		const struct kn_slurm_gres *g = &n->gres[i];

		if (strcmp(g->name, name))
			continue;
		/* A MIG profile matches with or without the model in front. */
		if (type && strcmp(g->type, type) &&
		    !(g->mig && !strcmp(kn_slurm_gres_mig_profile(g), type)))
			continue;
		sum += g->count;
	}
	return sum;
}

/* ---- nodes ---- */

static bool has_flag(json_t *flags, const char *flag)
{
	size_t i;
	json_t *f;

	json_array_foreach(flags, i, f)
		if (json_is_string(f) && !strcmp(json_string_value(f), flag))
			return true;
	return false;
}

/* sinfo's base state and flags as sinfo %T names them. */
static void node_state(json_t *jn, struct kn_slurm_node *n)
{
	json_t *flags = json_object_get(jn, "state_flags");
	const char *base = json_string_value(json_object_get(jn, "state"));
	bool drain = has_flag(flags, "DRAIN");
	size_t i;
	json_t *f;

	copy_field(n->state, sizeof(n->state), base ? base : "unknown");
	for (char *p = n->state; *p; p++)
		*p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
	n->flags[0] = '\0';
	json_array_foreach(flags, i, f) {
		size_t used = strlen(n->flags);

		if (json_is_string(f))
			snprintf(n->flags + used, sizeof(n->flags) - used,
				 "%s%s", used ? "," : "",
				 json_string_value(f));
	}
	n->schedulable = (!strcmp(n->state, "idle") ||
			  !strcmp(n->state, "mixed") ||
			  !strcmp(n->state, "allocated")) &&
			 !drain && !has_flag(flags, "NOT_RESPONDING") &&
			 !has_flag(flags, "FAIL") &&
			 !has_flag(flags, "MAINTENANCE");
	if (drain && strcmp(n->state, "down"))
		copy_field(n->state, sizeof(n->state),
			   !strcmp(n->state, "mixed") ||
				   !strcmp(n->state, "allocated")
				   ? "draining"
				   : "drained");
	else if (has_flag(flags, "COMPLETING") &&
		 strcmp(n->state, "down"))
		copy_field(n->state, sizeof(n->state), "completing");
}

/* "a,b" from a JSON array of strings (sinfo's partitions). */
static void join_strings(json_t *list, char *out, size_t len)
{
	size_t i;
	json_t *v;

	out[0] = '\0';
	json_array_foreach(list, i, v) {
		size_t used = strlen(out);

		if (json_is_string(v))
			snprintf(out + used, len - used, "%s%s",
				 used ? "," : "", json_string_value(v));
	}
}

static int64_t int_field(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) > 0
		       ? (int64_t)json_integer_value(v)
		       : 0;
}

static int node_parse(json_t *jn, size_t i, struct kn_slurm_node *n,
		      struct kn_error *err)
{
	const char *name = json_string_value(json_object_get(jn, "name"));

	memset(n, 0, sizeof(*n));
	if (!name || !exec_slurm_name_ok(name, strlen(name), sizeof(n->name)))
		return kn_errorf(err, KN_EINVAL, "nodes", "sinfo --json: node "
				 "%zu has no name of 1..%zu letters, digits, "
				 "'.', '_' or '-' starting with a letter or "
				 "digit", i, sizeof(n->name) - 1);
	copy_field(n->name, sizeof(n->name), name);
	node_state(jn, n);
	copy_field(n->reason, sizeof(n->reason),
		   json_string_value(json_object_get(jn, "reason")));
	join_strings(json_object_get(jn, "partitions"), n->partitions,
		     sizeof(n->partitions));
	copy_field(n->features, sizeof(n->features),
		   json_string_value(json_object_get(jn, "active_features")));
	n->cpus = (int)(int_field(jn, "cpus") > INT32_MAX ? INT32_MAX
							 : int_field(jn, "cpus"));
	n->cpus_alloc = (int)(int_field(jn, "alloc_cpus") > n->cpus
				      ? n->cpus
				      : int_field(jn, "alloc_cpus"));
	n->memory_mb = int_field(jn, "real_memory");
	n->memory_alloc_mb = int_field(jn, "alloc_memory");
	gres_parse(json_string_value(json_object_get(jn, "gres")),
		   json_string_value(json_object_get(jn, "gres_used")), n);
	return 0;
}

int kn_slurm_nodes_parse(const char *text, size_t len,
			 struct kn_slurm_inventory *inv, struct kn_error *err)
{
	json_error_t jerr;
	json_t *doc = json_loadb(text, len, 0, &jerr), *list;
	struct kn_slurm_node *nodes = NULL;
	size_t n;
	int rc = 0;

	if (!doc)
		return kn_errorf(err, KN_EINVAL, "nodes", "sinfo --json:%d:%d: "
				 "%s", jerr.line, jerr.column, jerr.text);
	list = json_object_get(doc, "nodes");
	if (!json_is_array(list) || json_array_size(list) > NODES_MAX) {
		rc = kn_errorf(err, KN_EINVAL, "nodes", "sinfo --json: no "
			       "\"nodes\" list of at most %d nodes",
			       NODES_MAX);
		goto out;
	}
	n = json_array_size(list);
	nodes = kn_xcalloc(n ? n : 1, sizeof(*nodes));
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = node_parse(json_array_get(list, i), i, &nodes[i], err);
	if (rc < 0) {
		free(nodes);
		goto out;
	}
	free(inv->nodes);
	inv->nodes = nodes;
	inv->n_nodes = n;
out:
	json_decref(doc);
	return rc;
}

/* ---- partitions ---- */

/* The value of KEY= in one line of KEY=VALUE words, or NULL. */
static const char *line_value(const char *line, size_t line_len,
			      const char *key, size_t *vlen)
{
	size_t klen = strlen(key);

	for (const char *p = line; p + klen < line + line_len; p++) {
		if ((p != line && p[-1] != ' ') || strncmp(p, key, klen) ||
		    p[klen] != '=')
			continue;
		p += klen + 1;
		*vlen = 0;
		while (p + *vlen < line + line_len && p[*vlen] != ' ')
			(*vlen)++;
		return p;
	}
	return NULL;
}

/* "[D-]HH:MM:SS", "MM:SS", "MM", "UNLIMITED": minutes, -1, or -2. */
static int64_t time_minutes(const char *v, size_t n)
{
	char buf[48];
	unsigned long d = 0, a = 0, b = 0, c = 0;
	int end = 0;

	if (n == 0 || n >= sizeof(buf))
		return -2;
	memcpy(buf, v, n);
	buf[n] = '\0';
	if (!strcmp(buf, "UNLIMITED") || !strcmp(buf, "INFINITE"))
		return -1;
	if (sscanf(buf, "%lu-%lu:%lu:%lu%n", &d, &a, &b, &c, &end) == 4 &&
	    !buf[end])
		return (int64_t)((d * 24 + a) * 60 + b + (c ? 1 : 0));
	if (sscanf(buf, "%lu-%lu%n", &d, &a, &end) == 2 && !buf[end])
		return (int64_t)((d * 24 + a) * 60);
	if (sscanf(buf, "%lu:%lu:%lu%n", &a, &b, &c, &end) == 3 && !buf[end])
		return (int64_t)(a * 60 + b + (c ? 1 : 0));
	if (sscanf(buf, "%lu:%lu%n", &a, &b, &end) == 2 && !buf[end])
		return (int64_t)(a + (b ? 1 : 0));
	if (sscanf(buf, "%lu%n", &a, &end) == 1 && !buf[end] &&
	    a < (1UL << 40))
		return (int64_t)a;
	return -2;
}

/* A count or UNLIMITED: the number, -1, or -2 when neither. */
static int64_t limit_value(const char *v, size_t n)
{
	char buf[32], *end;
	long long x;

	if (n == 0 || n >= sizeof(buf))
		return -2;
	memcpy(buf, v, n);
	buf[n] = '\0';
	if (!strcmp(buf, "UNLIMITED"))
		return -1;
	errno = 0;
	x = strtoll(buf, &end, 10);
	return errno || *end || x < 0 ? -2 : x;
}

/* One limit of line lineno into *out: 0, or -EINVAL naming it. */
static int partition_limit(const char *line, size_t len, size_t lineno,
			   const char *key, bool is_time, int64_t *out,
			   struct kn_error *err)
{
	size_t vlen;
	const char *v = line_value(line, len, key, &vlen);
	int64_t x;

	*out = -1;
	if (!v)
		return 0;
	x = is_time ? time_minutes(v, vlen) : limit_value(v, vlen);
	if (x == -2)
		return kn_errorf(err, KN_EINVAL, key, "scontrol show "
				 "partition:%zu: %s=%.*s is not %s or "
				 "UNLIMITED", lineno, key, (int)(vlen > 64 ? 64
								: vlen),
				 v, is_time ? "a time" : "a number");
	*out = x;
	return 0;
}

static int partition_parse(const char *line, size_t len, size_t lineno,
			   struct kn_slurm_partition *p, struct kn_error *err)
{
	size_t vlen;
	const char *v = line_value(line, len, "PartitionName", &vlen);
	int64_t nodes = -1, cpus = -1;
	int rc;

	memset(p, 0, sizeof(*p));
	if (!v || !exec_slurm_name_ok(v, vlen, sizeof(p->name)))
		return kn_errorf(err, KN_EINVAL, "PartitionName",
				 "scontrol show partition:%zu: no "
				 "PartitionName of 1..%zu letters, digits, "
				 "'.', '_' or '-' starting with a letter or "
				 "digit", lineno, sizeof(p->name) - 1);
	memcpy(p->name, v, vlen);
	v = line_value(line, len, "Default", &vlen);
	p->is_default = v && vlen == 3 && !strncmp(v, "YES", 3);
	v = line_value(line, len, "State", &vlen);
	p->up = v && vlen == 2 && !strncmp(v, "UP", 2);
	rc = partition_limit(line, len, lineno, "MaxTime", true,
			     &p->max_time_min, err);
	if (rc == 0)
		rc = partition_limit(line, len, lineno, "MaxNodes", false,
				     &nodes, err);
	if (rc == 0)
		rc = partition_limit(line, len, lineno, "MaxCPUsPerNode",
				     false, &cpus, err);
	if (rc == 0)
		rc = partition_limit(line, len, lineno, "MaxMemPerNode", false,
				     &p->max_mem_per_node_mb, err);
	p->max_nodes = nodes > INT32_MAX ? INT32_MAX : (int)nodes;
	p->max_cpus_per_node = cpus > INT32_MAX ? INT32_MAX : (int)cpus;
	return rc;
}

int kn_slurm_partitions_parse(const char *text, size_t len,
			      struct kn_slurm_inventory *inv,
			      struct kn_error *err)
{
	struct kn_slurm_partition *parts = NULL;
	size_t n = 0, lineno = 0;
	const char *p = text, *end = text + len;
	int rc = 0;

	while (rc == 0 && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t llen = nl ? (size_t)(nl - p) : (size_t)(end - p);

		lineno++;
		if (llen > 0) {
			if (n == PARTITIONS_MAX) {
				rc = kn_errorf(err, KN_EINVAL, "PartitionName",
					       "scontrol show partition: more "
					       "than %d partitions",
					       PARTITIONS_MAX);
				break;
			}
			parts = kn_xrealloc(parts, (n + 1) * sizeof(*parts));
			rc = partition_parse(p, llen, lineno, &parts[n], err);
			n++;
		}
		p += llen + 1;
	}
	if (rc < 0) {
		free(parts);
		return rc;
	}
	free(inv->partitions);
	inv->partitions = parts;
	inv->n_partitions = n;
	return 0;
}

void kn_slurm_inventory_release(struct kn_slurm_inventory *inv)
{
	KN_FREE_ALL(inv->nodes, inv->partitions);
	memset(inv, 0, sizeof(*inv));
}

/* ---- admission ---- */

int64_t kn_slurm_time_minutes(const struct kn_slurm_task *t,
			      int64_t timeout_ms)
{
	if (timeout_ms <= 0)
		return 0;
	return (timeout_ms + t->checkpoint_grace_ms + 59999) / 60000 + 1;
}

static bool in_partition(const struct kn_slurm_node *n, const char *name)
{
	size_t len = strlen(name);

	for (const char *p = n->partitions; *p;) {
		size_t k = strcspn(p, ",");

		if (k == len && !strncmp(p, name, len))
			return true;
		p += k + (p[k] == ',');
	}
	return false;
}

/* How many of t's tasks node n could hold empty, within p's limits. */
static int64_t node_tasks(const struct kn_slurm_node *n,
			  const struct kn_slurm_partition *p,
			  const struct kn_slurm_task *t)
{
	int64_t cpus = n->cpus, mem = n->memory_mb, cap;

	if (p->max_cpus_per_node >= 0 && p->max_cpus_per_node < cpus)
		cpus = p->max_cpus_per_node;
	if (p->max_mem_per_node_mb >= 0 && p->max_mem_per_node_mb < mem)
		mem = p->max_mem_per_node_mb;
	cap = cpus / (t->cpus > 0 ? t->cpus : 1);
	if (t->memory_mb > 0 && mem / t->memory_mb < cap)
		cap = mem / t->memory_mb;
	if (t->gpus > 0 && kn_slurm_node_gpus(n) / t->gpus < cap)
		cap = kn_slurm_node_gpus(n) / t->gpus;
	else if (t->gpus <= 0 && t->mig_profile &&
		 gres_total(n, "gpu", t->mig_profile) < cap)
		cap = gres_total(n, "gpu", t->mig_profile);
	else if (t->gpus <= 0 && !t->mig_profile && t->shards > 0 &&
		 gres_total(n, "shard", NULL) / t->shards < cap)
		cap = gres_total(n, "shard", NULL) / t->shards;
	return cap;
}

static int cmp_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* "1 GPU, 4 CPUs, 512 MiB" for one task. */
static void task_words(const struct kn_slurm_task *t, char *out, size_t len)
{
	char gpu[80] = "", mem[40] = "";

	if (t->gpus > 0)
		snprintf(gpu, sizeof(gpu), "%d GPU%s, ", t->gpus,
			 t->gpus == 1 ? "" : "s");
	else if (t->mig_profile)
		snprintf(gpu, sizeof(gpu), "MIG %.40s, ", t->mig_profile);
	else if (t->shards > 0)
		snprintf(gpu, sizeof(gpu), "%d shards, ", t->shards);
	if (t->memory_mb > 0)
		snprintf(mem, sizeof(mem), ", %" PRId64 " MiB", t->memory_mb);
	snprintf(out, len, "%s%d CPU%s%s", gpu, t->cpus > 0 ? t->cpus : 1,
		 t->cpus > 1 ? "s" : "", mem);
}

/* The partition's limits and its largest node, for a refusal. */
static void partition_words(const struct kn_slurm_inventory *inv,
			    const struct kn_slurm_partition *p, size_t nodes,
			    char *out, size_t len)
{
	int64_t gpus = 0, cpus = 0, mem = 0, shards = 0;
	int n;

	for (size_t i = 0; i < inv->n_nodes; i++) {
		const struct kn_slurm_node *node = &inv->nodes[i];

		if (!in_partition(node, p->name))
			continue;
		if (kn_slurm_node_gpus(node) > gpus)
			gpus = kn_slurm_node_gpus(node);
		if (gres_total(node, "shard", NULL) > shards)
			shards = gres_total(node, "shard", NULL);
		cpus = node->cpus > cpus ? node->cpus : cpus;
		mem = node->memory_mb > mem ? node->memory_mb : mem;
	}
	n = snprintf(out, len, "%zu node%s, the largest with %" PRId64
		     " GPUs, %" PRId64 " shards, %" PRId64 " CPUs, %" PRId64
		     " MiB", nodes, nodes == 1 ? "" : "s", gpus, shards, cpus,
		     mem);
	if (n < 0 || (size_t)n >= len)
		return;
	if (p->max_nodes >= 0)
		n += snprintf(out + n, len - (size_t)n, "; MaxNodes=%d",
			      p->max_nodes);
	if (n >= 0 && (size_t)n < len && p->max_cpus_per_node >= 0)
		n += snprintf(out + n, len - (size_t)n, "; MaxCPUsPerNode=%d",
			      p->max_cpus_per_node);
	if (n >= 0 && (size_t)n < len && p->max_mem_per_node_mb >= 0)
		snprintf(out + n, len - (size_t)n, "; MaxMemPerNode=%" PRId64
			 "M", p->max_mem_per_node_mb);
}

static const struct kn_slurm_partition *
partition_of(const struct kn_slurm_inventory *inv, const char *name)
{
	for (size_t i = 0; i < inv->n_partitions; i++)
		if (name ? !strcmp(inv->partitions[i].name, name)
			 : inv->partitions[i].is_default)
			return &inv->partitions[i];
	return NULL;
}

int kn_slurm_admit(const struct kn_slurm_inventory *inv,
		   const struct kn_slurm_task *t, int64_t timeout_ms,
		   char *why, size_t len)
{
	const char *name = t->partition && *t->partition ? t->partition
							 : NULL;
	const struct kn_slurm_partition *p = partition_of(inv, name);
	int64_t *caps, minutes = kn_slurm_time_minutes(t, timeout_ms);
	int64_t total = 0;
	size_t n = 0;
	char task[128], limits[384];

	why[0] = '\0';
	if (inv->n_partitions == 0 || (!p && !name))
		return 0;
	if (!p) {
		int k = snprintf(why, len, "Slurm has no partition %s (it "
				 "has:", name);

		for (size_t i = 0; k >= 0 && (size_t)k < len &&
				   i < inv->n_partitions; i++)
			k += snprintf(why + k, len - (size_t)k, " %s",
				      inv->partitions[i].name);
		if (k >= 0 && (size_t)k < len)
			snprintf(why + k, len - (size_t)k, ")");
		return -ENOENT;
	}
	if (p->max_time_min >= 0 && minutes > p->max_time_min) {
		snprintf(why, len, "can never fit in Slurm partition %s: its "
			 "MaxTime is %" PRId64 " min, the job's limit %" PRId64
			 " min (its timeout, checkpoint grace and a minute)",
			 p->name, p->max_time_min, minutes);
		return -ENOSPC;
	}
	caps = kn_xcalloc(inv->n_nodes ? inv->n_nodes : 1, sizeof(*caps));
	for (size_t i = 0; i < inv->n_nodes; i++)
		if (in_partition(&inv->nodes[i], p->name))
			caps[n++] = node_tasks(&inv->nodes[i], p, t);
	qsort(caps, n, sizeof(*caps), cmp_desc);
	for (size_t i = 0; i < n && (p->max_nodes < 0 ||
				     i < (size_t)p->max_nodes); i++)
		total += caps[i];
	free(caps);
	if (total >= t->ntasks)
		return 0;
	task_words(t, task, sizeof(task));
	partition_words(inv, p, n, limits, sizeof(limits));
	snprintf(why, len, "can never fit in Slurm partition %s: needs %d "
		 "task%s x (%s) but it holds at most %" PRId64 " (%s)",
		 p->name, t->ntasks, t->ntasks == 1 ? "" : "s", task, total,
		 limits);
	return -ENOSPC;
}
