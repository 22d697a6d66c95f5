/*
 * The VM advisor: Azure's compute recommendations (the table of AI phase
 * x workload in seed 004) as data, the memory a model needs, and the
 * cheapest catalog sizes that hold it.
 *
 * The arithmetic (docs/cost.md), in GB of 1e9 bytes:
 *   weights   = params x bytes(dtype)
 *   training  = params x 16 (bf16/fp16 weights 2 + gradients 2 + fp32
 *               master weights 4 + Adam m 4 and v 4; fp32 training is
 *               4 + 4 + 4 + 4, the same 16), plus 20% for activations
 *   inference = weights + KV cache, plus 10% for the runtime
 *   KV cache  = 2 (K and V) x layers x hidden x context x batch x bytes
 *               (fp16 for int8/int4 weights), the full multi-head size:
 *               grouped-query attention needs less, so this errs large
 *   shape     = from the user, else layers = cbrt(params / (12 x 128^2)),
 *               hidden = 128 x layers (a transformer has about 12 x
 *               layers x hidden^2 parameters; 128 is GPT-3's and Llama's
 *               hidden-to-layer ratio), said to be an estimate
 *   decode    = 0.5 x bandwidth of the GPUs x batch / (weights + KV)
 *               tokens/s per VM: each step reads the weights and the KV
 *               cache once and yields one token per sequence; serving
 *               engines reach about half of peak bandwidth
 * Training spreads its memory over --nodes VMs (sharded data parallel);
 * inference puts a whole copy on each VM, on a power-of-two number of
 * its GPUs (the tensor-parallel degrees serving engines take), and adds
 * VMs for throughput.
 * The alternative rejected: a FLOP-based training-time estimate, which
 * needs a token budget the user rarely knows; memory decides the size.
 */
#include "cost/cost.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_OPTIONS 5
/* Far above any model or cluster; keeps the arithmetic finite. */
#define PARAMS_MAX 1e15
#define NODES_MAX 10000
#define CONTEXT_MAX (16 * 1024 * 1024)
#define BATCH_MAX 65536
/* Bytes per KV element when the weights are int8/int4: fp16. */
#define KV_BYTES_QUANTISED 2.0
#define GB 1e9
#define GIB_IN_GB 1.073741824

static const char *const PHASES[] = {"train", "finetune", "infer"};
static const char *const WORKLOADS[] = {"generative", "complex", "small"};

static const struct {
	const char *name;
	double bytes;
} DTYPES[] = {
	{"fp32", 4}, {"bf16", 2}, {"fp16", 2}, {"fp8", 1}, {"int8", 1},
	{"int4", 0.5},
};

/*
 * Seed 004's table, indexed [training][gpu]. Fine-tuning is training
 * (the table has a training row and an inference row). Generative and
 * complex non-generative models: GPU; small non-generative: CPU.
 */
static const struct kn_family_advice ADVICE[2][2] = {
	{
		{false, KN_CLASS_CPU_COMPUTE, KN_CLASS_CPU_COMPUTE, false,
		 "CPU: compute-optimized sizes (F series)"},
		{true, KN_CLASS_NC, KN_CLASS_ND, false,
		 "GPU: NC or ND family, without InfiniBand (inference does "
		 "not need it)"},
	},
	{
		{false, KN_CLASS_CPU_MEMORY, KN_CLASS_CPU_MEMORY, false,
		 "CPU: memory-optimized sizes (E series)"},
		{true, KN_CLASS_ND, KN_CLASS_NC, false,
		 "GPU: ND family preferred, NC with Ethernet-connected VMs as "
		 "an alternative"},
	},
};

static const char MULTI_NODE_TEXT[] =
	"GPU: ND family with RDMA/InfiniBand for multi-node training; NC "
	"with Ethernet-connected VMs as an alternative";

static bool has_prefix_nc(const char *s, const char *prefix)
{
	return !strncasecmp(s, prefix, strlen(prefix));
}

const char *kn_phase_name(enum kn_phase p)
{
	return (unsigned)p < 3 ? PHASES[p] : "?";
}

const char *kn_workload_name(enum kn_workload w)
{
	return (unsigned)w < 3 ? WORKLOADS[w] : "?";
}

int kn_phase_parse(const char *s, enum kn_phase *out, struct kn_error *err)
{
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, PHASES[i])) {
			*out = (enum kn_phase)i;
			return 0;
		}
	return kn_errorf(err, KN_EINVAL, "phase",
			 "\"%s\" is not a phase (train, finetune, infer)", s);
}

int kn_workload_parse(const char *s, enum kn_workload *out,
		      struct kn_error *err)
{
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, WORKLOADS[i])) {
			*out = (enum kn_workload)i;
			return 0;
		}
	return kn_errorf(err, KN_EINVAL, "workload",
			 "\"%s\" is not a workload (generative, complex, "
			 "small)", s);
}

int kn_dtype_bytes(const char *dtype, double *out, struct kn_error *err)
{
	for (size_t i = 0; i < sizeof(DTYPES) / sizeof(*DTYPES); i++)
		if (!strcmp(dtype, DTYPES[i].name)) {
			*out = DTYPES[i].bytes;
			return 0;
		}
	return kn_errorf(err, KN_EINVAL, "dtype",
			 "\"%s\" is not a dtype (fp32, bf16, fp16, fp8, int8, "
			 "int4)", dtype);
}

int kn_parse_params(const char *s, double *out, struct kn_error *err)
{
	char *end;
	double v, scale = 1;

	errno = 0;
	v = strtod(s, &end);
	if (end != s && *end && !end[1]) {
		switch (*end) {
		case 'K': case 'k': scale = 1e3; end++; break;
		case 'M': case 'm': scale = 1e6; end++; break;
		case 'B': case 'b': case 'G': case 'g': scale = 1e9; end++; break;
		case 'T': case 't': scale = 1e12; end++; break;
		default: break;
		}
	}
	if (end == s || *end || errno || !isfinite(v) || !(v > 0) ||
	    v * scale > PARAMS_MAX || v * scale < 1)
		return kn_errorf(err, KN_EINVAL, "params",
				 "\"%s\" is not a parameter count (such as "
				 "7B, 350M or 125000)", s);
	*out = v * scale;
	return 0;
}

void kn_advise_family(enum kn_phase phase, enum kn_workload workload,
		      int nodes, struct kn_family_advice *out)
{
	bool train = phase != KN_PHASE_INFER;

	*out = ADVICE[train][workload != KN_WORKLOAD_SMALL];
	if (train && out->gpu && nodes > 1) {
		out->infiniband = true;
		out->text = MULTI_NODE_TEXT;
	}
}

const char *kn_family_class_name(enum kn_family_class c)
{
	static const char *const names[] = {
		"ND", "NC", "NV", "GPU", "CPU memory-optimized",
		"CPU compute-optimized", "CPU",
	};
	return (unsigned)c < sizeof(names) / sizeof(*names) ? names[c] : "?";
}

enum kn_family_class kn_vm_size_class(const struct kn_vm_size *s)
{
	if (s->gpus > 0) {
		if (has_prefix_nc(s->family, "ND"))
			return KN_CLASS_ND;
		if (has_prefix_nc(s->family, "NC"))
			return KN_CLASS_NC;
		if (has_prefix_nc(s->family, "NV"))
			return KN_CLASS_NV;
		return KN_CLASS_GPU_OTHER;
	}
	if (has_prefix_nc(s->family, "E"))
		return KN_CLASS_CPU_MEMORY;
	if (has_prefix_nc(s->family, "F"))
		return KN_CLASS_CPU_COMPUTE;
	return KN_CLASS_CPU_OTHER;
}

/* May sizes of this class carry the advice's workload? */
static bool eligible(const struct kn_family_advice *a,
		     enum kn_family_class c)
{
	if (a->gpu)
		return c == KN_CLASS_ND || c == KN_CLASS_NC ||
		       c == KN_CLASS_GPU_OTHER;
	return c == a->preferred || c == KN_CLASS_CPU_OTHER;
}

int kn_memory_need(const struct kn_advise_request *req,
		   struct kn_memory_need *out, struct kn_error *err)
{
	struct kn_memory_need m;
	bool train = req->phase != KN_PHASE_INFER;
	int rc;

	memset(&m, 0, sizeof(m));
	if (!(req->params >= 1) || req->params > PARAMS_MAX)
		return kn_errorf(err, KN_EINVAL, "params",
				 "the parameter count must be between 1 and "
				 "%.0e", PARAMS_MAX);
	if ((rc = kn_dtype_bytes(req->dtype, &m.bytes_per_param, err)) < 0)
		return rc;
	if (req->layers < 0 || req->hidden < 0 ||
	    (req->layers > 0) != (req->hidden > 0))
		return kn_errorf(err, KN_EINVAL, "layers",
				 "layers and hidden are given together, both "
				 "whole numbers >= 1");
	if (req->context < 0 || req->context > CONTEXT_MAX)
		return kn_errorf(err, KN_EINVAL, "context",
				 "the context must be 1 to %d tokens",
				 CONTEXT_MAX);
	if (req->batch < 0 || req->batch > BATCH_MAX)
		return kn_errorf(err, KN_EINVAL, "batch",
				 "the batch must be 1 to %d sequences",
				 BATCH_MAX);
	m.weights_gb = req->params * m.bytes_per_param / GB;
	if (train) {
		if (m.bytes_per_param < 2)
			return kn_errorf(err, KN_EINVAL, "dtype",
					 "training in %s is not modelled: "
					 "give fp32, bf16 or fp16 (the "
					 "optimizer state is fp32 either way)",
					 req->dtype);
		m.train_bytes_per_param = KN_TRAIN_BYTES_PER_PARAM;
		m.gradients_gb = m.weights_gb;
		m.optimizer_gb = req->params * KN_TRAIN_BYTES_PER_PARAM / GB -
				 m.weights_gb - m.gradients_gb;
		m.activations_gb = (m.weights_gb + m.gradients_gb +
				    m.optimizer_gb) * KN_TRAIN_ACTIVATION_SHARE;
		m.total_gb = m.weights_gb + m.gradients_gb + m.optimizer_gb +
			     m.activations_gb;
		*out = m;
		return 0;
	}
	if (req->layers > 0) {
		m.layers = req->layers;
		m.hidden = req->hidden;
	} else {
		double l = cbrt(req->params / (12.0 * KN_SHAPE_HIDDEN_PER_LAYER *
					       KN_SHAPE_HIDDEN_PER_LAYER));

		m.layers = l < 1 ? 1 : (int)lround(l);
		m.hidden = KN_SHAPE_HIDDEN_PER_LAYER * m.layers;
		m.shape_estimated = true;
	}
	m.context = req->context ? req->context : KN_DEFAULT_CONTEXT;
	m.batch = req->batch ? req->batch : KN_DEFAULT_BATCH;
	m.kv_bytes = m.bytes_per_param < 2 ? KV_BYTES_QUANTISED
					   : m.bytes_per_param;
	m.kv_cache_gb = 2.0 * m.layers * (double)m.hidden * m.context *
			m.batch * m.kv_bytes / GB;
	m.headroom_gb = (m.weights_gb + m.kv_cache_gb) * KN_INFER_HEADROOM_SHARE;
	m.total_gb = m.weights_gb + m.kv_cache_gb + m.headroom_gb;
	*out = m;
	return 0;
}

/* What a VM offers: GPU memory, or RAM in GB on a CPU size. */
static double capacity_gb(const struct kn_vm_size *s)
{
	return s->gpus > 0 ? s->gpu_mem_total_gb : s->ram_gib * GIB_IN_GB;
}

/* The price options are ranked by: spot when interruptible and known. */
static double rank_price(const struct kn_advice_option *o, bool spot)
{
	if (spot && o->usd_hr[KN_PRICING_SPOT] >= 0)
		return o->usd_hr[KN_PRICING_SPOT];
	return o->usd_hr[KN_PRICING_ON_DEMAND];
}

static bool premium_gpu(const struct kn_vm_size *s)
{
	return has_prefix_nc(s->gpu_name, "A100") ||
	       has_prefix_nc(s->gpu_name, "H100") ||
	       has_prefix_nc(s->gpu_name, "H200");
}

__attribute__((format(printf, 4, 5))) static void
note(struct kn_advice *a, enum kn_advice_warning code, const char *size,
     const char *fmt, ...)
{
	struct kn_advice_note *n;
	va_list ap;

	if (a->n_notes >= (int)(sizeof(a->notes) / sizeof(*a->notes)))
		return;
	n = &a->notes[a->n_notes++];
	n->code = code;
	kn_strlcpy(n->size, size ? size : "", sizeof(n->size));
	va_start(ap, fmt);
	vsnprintf(n->message, sizeof(n->message), fmt, ap);
	va_end(ap);
}

const char *kn_advice_warning_name(enum kn_advice_warning w)
{
	static const char *const names[] = {
		"premium_gpu", "spot_without_checkpoints", "over_budget",
		"no_infiniband", "no_fit", "no_bandwidth",
	};
	return (unsigned)w < sizeof(names) / sizeof(*names) ? names[w] : "?";
}

/*
 * Size one VM for the request: how many VMs and GPUs, whether it fits.
 * false when it cannot carry the work (or cannot be sized).
 */
static bool size_option(const struct kn_vm_size *s,
			const struct kn_advise_request *req,
			const struct kn_memory_need *m,
			struct kn_advice_option *o)
{
	bool train = req->phase != KN_PHASE_INFER;
	int nodes = req->nodes > 0 ? req->nodes : 1;
	double cap = capacity_gb(s);

	memset(o, 0, sizeof(*o));
	o->vm = s;
	o->capacity_gb = cap;
	o->need_per_vm_gb = train ? m->total_gb / nodes : m->total_gb;
	if (o->need_per_vm_gb > cap)
		return false;
	if (s->gpus > 0) {
		o->gpus_used = (int)ceil(o->need_per_vm_gb / s->gpu_mem_gb -
					 1e-9);
		if (o->gpus_used < 1)
			o->gpus_used = 1;
		/* Serving engines split a model over 1, 2, 4 or 8 GPUs. */
		if (!train) {
			int tp = 1;

			while (tp < o->gpus_used)
				tp *= 2;
			o->gpus_used = tp <= s->gpus ? tp : (int)ceil(s->gpus);
		}
	}
	if (!train && req->throughput > 0) {
		double bytes_per_step = (m->weights_gb + m->kv_cache_gb) * GB;
		double need;

		if (!(s->gpu_bandwidth_gbs > 0))
			return false;
		/* The copy is tensor-parallel over all the VM's GPUs. */
		o->gpus_used = (int)ceil(s->gpus);
		o->tokens_per_s = KN_DECODE_EFFICIENCY * s->gpu_bandwidth_gbs *
				  GB * s->gpus * m->batch / bytes_per_step;
		need = ceil(req->throughput / o->tokens_per_s - 1e-9);
		if (need > NODES_MAX)
			return false;
		if (need > nodes)
			nodes = (int)need;
	}
	o->nodes = nodes;
	for (int p = 0; p < KN_PRICINGS; p++)
		o->usd_hr[p] = s->usd_hr[p] >= 0 ? s->usd_hr[p] * nodes : -1;
	return true;
}

/*
 * The order options are listed in: with RDMA wanted (multi-node
 * training), sizes with InfiniBand first, as the table recommends; then
 * by price.
 */
static int by_price(const struct kn_advice_option *a,
		    const struct kn_advice_option *b, bool spot, bool ib_first)
{
	double pa = rank_price(a, spot), pb = rank_price(b, spot);

	if (ib_first && a->vm->infiniband != b->vm->infiniband)
		return a->vm->infiniband ? -1 : 1;
	if ((pa < 0) != (pb < 0))
		return pa < 0 ? 1 : -1; /* unpriced last */
	if (pa != pb)
		return pa < pb ? -1 : 1;
	/* Equal or both unknown: fewer VMs, then the smallest that fits. */
	if (a->nodes != b->nodes)
		return a->nodes < b->nodes ? -1 : 1;
	if (a->capacity_gb != b->capacity_gb)
		return a->capacity_gb < b->capacity_gb ? -1 : 1;
	return strcmp(a->vm->size, b->vm->size);
}

static void check_request(const struct kn_advise_request *req,
			  struct kn_error *err, int *rc)
{
	if (req->nodes < 0 || req->nodes > NODES_MAX)
		*rc = kn_errorf(err, KN_EINVAL, "nodes",
				"the node count must be 1 to %d", NODES_MAX);
	else if (req->throughput < 0 || !isfinite(req->throughput))
		*rc = kn_errorf(err, KN_EINVAL, "throughput",
				"the throughput must be a number of tokens/s "
				"> 0");
	else if (req->throughput > 0 && req->phase != KN_PHASE_INFER)
		*rc = kn_errorf(err, KN_EINVAL, "throughput",
				"a throughput target sizes inference; "
				"training is sized by --nodes");
	else if (req->budget_usd_month < 0 || !isfinite(req->budget_usd_month))
		*rc = kn_errorf(err, KN_EINVAL, "budget",
				"the budget must be USD per month >= 0");
	else if (req->max_options < 0 || req->max_options > KN_ADVISE_OPTIONS_MAX)
		*rc = kn_errorf(err, KN_EINVAL, "max_options",
				"at most %d options", KN_ADVISE_OPTIONS_MAX);
}

int kn_advise(const struct kn_catalog *c, const struct kn_advise_request *req,
	      struct kn_advice *out, struct kn_error *err)
{
	struct kn_advice *a;
	struct kn_advice_option *all = NULL, tmp;
	size_t n_all = 0, ncat = kn_catalog_count(c);
	bool train = req->phase != KN_PHASE_INFER;
	bool spot = req->interruptible;
	int rc = 0, want, nodes = req->nodes > 0 ? req->nodes : 1;
	double largest = -1;
	const struct kn_advice_option *cheap_plain = NULL;

	check_request(req, err, &rc);
	if (rc < 0)
		return rc;
	a = kn_xcalloc(1, sizeof(*a));
	if ((rc = kn_memory_need(req, &a->memory, err)) < 0)
		goto out;
	kn_advise_family(req->phase, req->workload, nodes, &a->family);
	all = kn_xcalloc(ncat ? ncat : 1, sizeof(*all));
	for (size_t i = 0; i < ncat; i++) {
		const struct kn_vm_size *s = kn_catalog_at(c, i);

		if (s->retired || !eligible(&a->family, kn_vm_size_class(s)))
			continue;
		if (capacity_gb(s) > largest) {
			largest = capacity_gb(s);
			a->largest = s;
		}
		if (size_option(s, req, &a->memory, &tmp))
			all[n_all++] = tmp;
		else if (!train && req->throughput > 0 &&
			 !(s->gpu_bandwidth_gbs > 0) &&
			 a->memory.total_gb <= capacity_gb(s))
			note(a, KN_WARN_NO_BANDWIDTH, s->size,
			     "%s left out: no memory bandwidth figure for %s "
			     "to size a throughput by", s->size,
			     s->gpus > 0 ? s->gpu_name : "its CPUs");
	}
	/* Insertion sort: tens of rows. */
	for (size_t i = 1; i < n_all; i++)
		for (size_t j = i; j > 0 && by_price(&all[j], &all[j - 1], spot,
					       a->family.infiniband) < 0; j--) {
			tmp = all[j];
			all[j] = all[j - 1];
			all[j - 1] = tmp;
		}
	want = req->max_options ? req->max_options : DEFAULT_OPTIONS;
	for (size_t i = 0; i < n_all && a->n_options < want; i++)
		a->options[a->n_options++] = all[i];
	for (size_t i = 0; i < n_all; i++)
		if (!premium_gpu(all[i].vm) && rank_price(&all[i], spot) >= 0) {
			cheap_plain = &all[i];
			break;
		}
	if (spot && train && !req->checkpoints)
		note(a, KN_WARN_SPOT_NO_CHECKPOINT, NULL,
		     "spot VMs can be taken back at any time: a training job "
		     "without checkpoints loses all its work each time");
	for (int i = 0; i < a->n_options; i++) {
		struct kn_advice_option *o = &a->options[i];
		double price = rank_price(o, spot);

		if (premium_gpu(o->vm) && cheap_plain && price >= 0 &&
		    rank_price(cheap_plain, spot) < price)
			note(a, KN_WARN_PREMIUM_GPU, o->vm->size,
			     "%s has %s GPUs, but %s (%s) also fits for $%.2f/h "
			     "against $%.2f/h", o->vm->size, o->vm->gpu_name,
			     cheap_plain->vm->size, cheap_plain->vm->gpu_name,
			     rank_price(cheap_plain, spot), price);
		if (train && o->nodes > 1 && o->vm->gpus > 0 &&
		    !o->vm->infiniband)
			note(a, KN_WARN_NO_INFINIBAND, o->vm->size,
			     "%s has no InfiniBand: %d-node training would "
			     "synchronise gradients over Ethernet",
			     o->vm->size, o->nodes);
		if (req->budget_usd_month > 0 && price >= 0 &&
		    price * KN_HOURS_PER_MONTH > req->budget_usd_month) {
			o->over_budget = true;
			if (i == 0)
				note(a, KN_WARN_OVER_BUDGET, o->vm->size,
				     "the cheapest fit, %s, costs $%.0f/month "
				     "%s, over the budget of $%.0f/month",
				     o->vm->size, price * KN_HOURS_PER_MONTH,
				     spot && o->usd_hr[KN_PRICING_SPOT] >= 0
					     ? "on spot" : "on demand",
				     req->budget_usd_month);
		}
	}
	if (a->n_options == 0) {
		if (a->largest)
			note(a, KN_WARN_NO_FIT, NULL,
			     "no size fits: %s needs %.1f GB%s; the largest "
			     "eligible size, %s, has %.1f GB%s", train ?
			     "the job" : "one copy of the model",
			     a->memory.total_gb,
			     train && nodes > 1 ? " over all nodes" : "",
			     a->largest->size, capacity_gb(a->largest),
			     train ? " per node (more --nodes share the load)"
				   : "");
		else
			note(a, KN_WARN_NO_FIT, NULL,
			     "no size fits: the catalog has no size of the "
			     "recommended family");
	}
	*out = *a;
out:
	KN_FREE_ALL(all, a);
	return rc;
}
