/*
 * spec devenv: `kind: DevEnvironment`, a dev environment read into a job
 * spec (spec->devenv set), so the server queues, places, limits, audits
 * and recovers it as any job.
 *
 * Its table is the job's fields that suit one interactive task (name,
 * command, image, env, workdir, resources, placement, priority) and its
 * own: idle_timeout, max_duration and idle_gpu_utilization. A gang, an
 * array, retries, a timeout (max_duration says it) or checkpoints are
 * refused as unknown fields, so a spec cannot promise what kiln will not
 * do with a dev environment.
 *
 * Rejected: a kind of its own beside the job (a struct and a store table
 * of its own): every path a job takes (submit, overrides, recovery,
 * cost) would need its copy.
 */
#include "spec/internal.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_IDLE_TIMEOUT_MS (60 * 60 * 1000)
#define DEFAULT_IDLE_GPU_MILLI 50

/* The job's fields a dev environment has. */
static const char *const KEPT[] = {
	"apiVersion", "name",      "command",  "env",   "workdir",
	"resources",  "placement", "priority", "image",
};

enum { DF_KIND, DF_IDLE_TIMEOUT, DF_MAX_DURATION, DF_IDLE_GPU, DF_OWN };

static int read_devenv_kind(struct walk *w, struct fy_node *node,
			    void *target)
{
	(void)target;
	return spec_check_kind(w, node, "DevEnvironment");
}

/* A share of a GPU's time, 0..1, in thousandths. */
static int read_idle_gpu(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;
	char got[GOT_BUF];
	struct value v;
	int64_t milli = 0;
	int rc = spec_read_thousandths(w, node, KN_MILLI, NULL, &v, &milli);

	if (rc < 0)
		return rc;
	if (rc == 0) {
		spec->devenv.idle_gpu_milli = (int)milli;
		return 0;
	}
	return spec_fail(w, node,
			 "must be a share of a GPU's time between 0 and 1 in "
			 "thousandths (e.g. 0.05); got %s",
			 spec_describe(&v, got, sizeof(got)));
}

static const struct field own_fields[DF_OWN] = {
	[DF_KIND] = {.name = "kind", .type = FT_CUSTOM,
		     .read = read_devenv_kind, .required = true},
	[DF_IDLE_TIMEOUT] = {.name = "idle_timeout", .type = FT_DURATION,
			     .offset = offsetof(struct kn_job_spec,
						devenv.idle_timeout_ms),
			     .min = 1},
	[DF_MAX_DURATION] = {.name = "max_duration", .type = FT_DURATION,
			     .offset = offsetof(struct kn_job_spec,
						devenv.max_duration_ms),
			     .zero_is_none = true},
	[DF_IDLE_GPU] = {.name = "idle_gpu_utilization", .type = FT_CUSTOM,
			 .read = read_idle_gpu},
};

#define DEVENV_FIELDS (DF_OWN + ARRAY_SIZE(KEPT))
_Static_assert(DEVENV_FIELDS <= MAX_FIELDS, "MAX_FIELDS");

/* own_fields, then the kept job fields in KEPT's order. */
static void devenv_fields(struct field *out)
{
	size_t n_sections, n = DF_OWN;
	const struct section *top = &spec_job_sections(&n_sections)[0];
	const struct field *job = top->fields;
	size_t n_job = top->n_fields;

	memcpy(out, own_fields, sizeof(own_fields));
	for (size_t k = 0; k < ARRAY_SIZE(KEPT); k++)
		for (size_t i = 0; i < n_job; i++)
			if (!strcmp(job[i].name, KEPT[k])) {
				out[n] = job[i];
				out[n].required = !strcmp(KEPT[k], "name");
				n++;
			}
}

bool spec_root_is_devenv(struct fy_node *root)
{
	struct fy_node *kind;
	const char *k;

	if (!root || !fy_node_is_mapping(root))
		return false;
	kind = fy_node_mapping_lookup_by_string(root, "kind", -1);
	k = kind && fy_node_is_scalar(kind) ? fy_node_get_scalar0(kind) : NULL;
	return k && !strcmp(k, "DevEnvironment");
}

int spec_read_devenv_root(struct walk *w, struct fy_node *root,
			  struct kn_job_spec *spec)
{
	struct field fields[DEVENV_FIELDS];
	const struct spec_kind kind = {
		.kind = "DevEnvironment",
		.root_name = "dev environment",
		.what = "a dev environment spec",
		.fields = fields,
		.n_fields = DEVENV_FIELDS,
	};
	int rc;

	devenv_fields(fields);
	w->root_name = kind.root_name;
	spec->devenv.set = true;
	spec->devenv.idle_timeout_ms = DEFAULT_IDLE_TIMEOUT_MS;
	spec->devenv.idle_gpu_milli = DEFAULT_IDLE_GPU_MILLI;
	rc = spec_read_root(w, root, &kind, spec, NULL);
	if (rc || spec->command)
		return rc;
	/* Kept up for `kiln exec`, attach and port-forward to come in. */
	spec->command = kn_xcalloc(3, sizeof(char *));
	spec->command[0] = kn_xstrdup("sleep");
	spec->command[1] = kn_xstrdup("infinity");
	spec->n_command = 2;
	return 0;
}
