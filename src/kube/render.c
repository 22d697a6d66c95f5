/*
 * Specs as Kubernetes manifests.
 *
 * A job becomes a batch/v1 Job whose pods are its tasks: for a gang an
 * Indexed Job (completions = parallelism = tasks, so all ranks run at
 * once), RANK from the completion-index annotation and a headless Service
 * so rank 0 has a DNS name (NAME-0.NAME) for MASTER_ADDR. A job array is
 * an Indexed Job too, its index the element's (completions = elements,
 * parallelism = the array's limit, retries per index), so an array of
 * gangs, which would need both indexes, is refused. A deployment
 * becomes an apps/v1 Deployment plus a Service in front of its port.
 * Both share the pod template: resources, GPU tolerations and product
 * affinity, placement, spot, the checkpoint grace.
 *
 * With a shim image the task runs under `kiln shim --kube`: an
 * initContainer from that image copies kiln with its libraries and
 * loader into an emptyDir (`kiln shim --install`), and the task's
 * container starts that copy through its own loader, so the task's image
 * needs neither kiln nor kiln's libraries. Rejected: kiln as a sidecar
 * (it could not be PID 1, the process the preStop hook signals, nor see
 * the task's exit), and requiring kiln in every task image.
 *
 * The output is the API's own JSON; kn_kube_yaml prints it. Everything is
 * derived from the normalized spec, so a spec kiln accepts renders the
 * same way every time.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/internal.h"

/* The port a deployment's server listens on (KILN_PORT) inside its pod;
   one pod per replica, so one fixed port is enough. */
#define SERVE_PORT 8000
/* The Service in front of a deployment listens here. */
#define SERVICE_PORT 80
/* A replica being stopped keeps serving this long before SIGTERM, while
   the endpoint controllers take it out of the Service (they learn of the
   deletion at the same time as the kubelet). */
#define SERVE_DRAIN_S "5"
/* Then the server has the rest of this to finish its requests. */
#define SERVE_GRACE_S 30
#define GPU_TAINT_KEY "sku"
#define SPOT_TAINT_KEY "kubernetes.azure.com/scalesetpriority"
#define ZONE_LABEL "topology.kubernetes.io/zone"
/* Product labels one spec may ask for across its models. */
#define MAX_PRODUCTS 32

/*
 * Kubernetes names: a DNS-1035 label (the Service needs it), from kiln's
 * [a-z0-9][a-z0-9-_.]{0,62}: '_' and '.' become '-'; a leading digit or a
 * trailing '-' cannot be mapped and is refused by name.
 */
static int kube_name(const char *name, char *out, size_t len,
		     struct kn_error *err)
{
	size_t n = strlen(name);

	if (n == 0 || n >= len || n > 63 || !(name[0] >= 'a' && name[0] <= 'z'))
		return kn_errorf(err, KN_EINVAL, "name",
				 "name: Kubernetes needs a name that starts "
				 "with a letter (a DNS label); got \"%s\"",
				 name);
	for (size_t i = 0; i < n; i++)
		out[i] = (name[i] == '_' || name[i] == '.') ? '-' : name[i];
	out[n] = '\0';
	if (out[n - 1] == '-')
		return kn_errorf(err, KN_EINVAL, "name",
				 "name: Kubernetes needs a name that ends "
				 "with a letter or digit; got \"%s\"", name);
	return 0;
}

/* "500m" or "2" for thousandths of a CPU. */
static json_t *cpu_quantity(int milli)
{
	char buf[32];

	if (milli % KN_MILLI == 0)
		snprintf(buf, sizeof(buf), "%d", milli / KN_MILLI);
	else
		snprintf(buf, sizeof(buf), "%dm", milli);
	return json_string(buf);
}

/* The largest binary unit that divides bytes exactly: "16Gi", "512Mi". */
static json_t *memory_quantity(int64_t bytes)
{
	static const char *const units[] = {"Ti", "Gi", "Mi", "Ki"};
	char buf[40];

	for (int i = 0; i < 4; i++) {
		int64_t unit = (int64_t)1 << (10 * (4 - i));
		if (bytes % unit == 0) {
			snprintf(buf, sizeof(buf), "%lld%s",
				 (long long)(bytes / unit), units[i]);
			return json_string(buf);
		}
	}
	snprintf(buf, sizeof(buf), "%lld", (long long)bytes);
	return json_string(buf);
}

static json_t *toleration(const char *key, const char *op, const char *value,
			  const char *effect)
{
	json_t *t = json_pack("{s:s, s:s}", "key", key, "operator", op);

	if (value)
		json_object_set_new(t, "value", json_string(value));
	if (effect)
		json_object_set_new(t, "effect", json_string(effect));
	return t;
}

static const char *affinity_op(enum kn_affinity_op op)
{
	switch (op) {
	case KN_AFFINITY_IN:
		return "In";
	case KN_AFFINITY_NOT_IN:
		return "NotIn";
	case KN_AFFINITY_EXISTS:
		return "Exists";
	case KN_AFFINITY_DOES_NOT_EXIST:
		return "DoesNotExist";
	}
	return "In";
}

static json_t *match_expression(const struct kn_affinity_term *t)
{
	json_t *e = json_pack("{s:s, s:s}", "key", t->key, "operator",
			      affinity_op(t->op));
	json_t *values;

	if (t->op == KN_AFFINITY_IN || t->op == KN_AFFINITY_NOT_IN) {
		values = json_array();
		for (size_t i = 0; i < t->n_values; i++)
			json_array_append_new(values,
					      json_string(t->values[i]));
		json_object_set_new(e, "values", values);
	}
	return e;
}

/*
 * Node affinity: the spec's required terms and, with GPU models, the
 * product labels those models have, all in one term (every one must hold);
 * the preferred terms as weighted preferences. NULL when there is none.
 */
static int node_affinity(const struct kn_job_spec *spec,
			 const struct kn_kube_render_opts *opts,
			 json_t **out, struct kn_error *err)
{
	const struct kn_resources *res = &spec->resources;
	const struct kn_placement_spec *pl = &spec->placement;
	json_t *exprs = json_array(), *na = json_object(), *products;
	const char *names[MAX_PRODUCTS];
	size_t total = 0;

	for (size_t i = 0; i < pl->n_required; i++)
		json_array_append_new(exprs,
				      match_expression(&pl->required[i]));
	if (res->n_gpu_models) {
		products = json_array();
		for (size_t i = 0; i < res->n_gpu_models; i++) {
			size_t n = kn_kube_products_for(
				opts->products, res->gpu_models[i], names,
				MAX_PRODUCTS - total);
			if (n == 0 || total + n > MAX_PRODUCTS) {
				json_decref(products);
				json_decref(exprs);
				json_decref(na);
				return kn_errorf(
					err, KN_EINVAL, "resources.gpu_model",
					"resources.gpu_model: no %s label is "
					"known for %s (data/gpu-products.csv)",
					KN_KUBE_LABEL_PRODUCT,
					res->gpu_models[i]);
			}
			for (size_t k = 0; k < n; k++)
				json_array_append_new(products,
						      json_string(names[k]));
			total += n;
		}
		json_array_append_new(
			exprs, json_pack("{s:s, s:s, s:o}", "key",
					 KN_KUBE_LABEL_PRODUCT, "operator",
					 "In", "values", products));
	}
	if (json_array_size(exprs))
		json_object_set_new(
			na, "requiredDuringSchedulingIgnoredDuringExecution",
			json_pack("{s:[{s:o}]}", "nodeSelectorTerms",
				  "matchExpressions", json_incref(exprs)));
	json_decref(exprs);
	if (pl->n_preferred) {
		json_t *prefs = json_array();
		for (size_t i = 0; i < pl->n_preferred; i++)
			json_array_append_new(
				prefs,
				json_pack("{s:i, s:{s:[o]}}", "weight",
					  pl->preferred[i].weight,
					  "preference", "matchExpressions",
					  match_expression(&pl->preferred[i])));
		json_object_set_new(
			na, "preferredDuringSchedulingIgnoredDuringExecution",
			prefs);
	}
	if (json_object_size(na) == 0) {
		json_decref(na);
		*out = NULL;
		return 0;
	}
	*out = json_pack("{s:o}", "nodeAffinity", na);
	return 0;
}

static bool has_gpu(const struct kn_resources *res)
{
	return res->gpu_milli > 0 || res->mig_profile;
}

static bool is_share(const struct kn_resources *res)
{
	return res->gpu_milli > 0 && res->gpu_milli < KN_MILLI;
}

static json_t *resources(const struct kn_resources *res)
{
	json_t *requests = json_object(), *limits = json_object();
	json_t *out = json_object();
	char key[96];

	/* Limits equal to requests: a task gets what it asked for, no more,
	   and the kubelet's accounting matches the scheduler's. */
	if (res->cpu_milli) {
		json_object_set_new(requests, "cpu",
				    cpu_quantity(res->cpu_milli));
		json_object_set_new(limits, "cpu",
				    cpu_quantity(res->cpu_milli));
	}
	if (res->memory_bytes) {
		json_object_set_new(requests, "memory",
				    memory_quantity(res->memory_bytes));
		json_object_set_new(limits, "memory",
				    memory_quantity(res->memory_bytes));
	}
	if (res->mig_profile) {
		snprintf(key, sizeof(key), "nvidia.com/mig-%s",
			 res->mig_profile);
		json_object_set_new(requests, key, json_string("1"));
		json_object_set_new(limits, key, json_string("1"));
	} else if (res->gpu_milli >= KN_MILLI) {
		char n[16];
		snprintf(n, sizeof(n), "%d", res->gpu_milli / KN_MILLI);
		json_object_set_new(requests, "nvidia.com/gpu", json_string(n));
		json_object_set_new(limits, "nvidia.com/gpu", json_string(n));
	}
	if (json_object_size(requests))
		json_object_set_new(out, "requests", requests);
	else
		json_decref(requests);
	if (json_object_size(limits))
		json_object_set_new(out, "limits", limits);
	else
		json_decref(limits);
	return out;
}

/*
 * How every container kiln renders runs: never as root, no privilege to
 * gain, no capabilities, the runtime's seccomp profile; the root file
 * system read-only where kiln gives the task writable directories.
 */
static json_t *security_context(const struct kn_kube_render_opts *opts,
				bool read_only_root)
{
	json_int_t uid = opts->run_as_user > 0 ? (json_int_t)opts->run_as_user
					       : KN_KUBE_DEFAULT_UID;

	return json_pack("{s:b, s:I, s:I, s:b, s:b, s:{s:[s]}, s:{s:s}}",
			 "runAsNonRoot", 1, "runAsUser", uid, "runAsGroup", uid,
			 "allowPrivilegeEscalation", 0,
			 "readOnlyRootFilesystem", read_only_root,
			 "capabilities", "drop", "ALL", "seccompProfile",
			 "type", "RuntimeDefault");
}

/*
 * The preStop hook: send the checkpoint signal to the task (PID 1 of the
 * container) and wait for it to exit, so the kubelet's own SIGTERM, sent
 * when the hook returns, cannot cut the last checkpoint short. The
 * whole is bounded by terminationGracePeriodSeconds.
 */
static json_t *pre_stop(int sig)
{
	const char *abbrev = sigabbrev_np(sig);
	char *script = abbrev ?
		kn_asprintf("kill -s %s 1; while kill -0 1 2>/dev/null; "
			    "do sleep 1; done", abbrev) :
		kn_asprintf("kill -%d 1; while kill -0 1 2>/dev/null; "
			    "do sleep 1; done", sig);
	json_t *hook = json_pack("{s:{s:{s:[s,s,s]}}}", "preStop", "exec",
				 "command", "/bin/sh", "-c", script);

	free(script);
	return hook;
}

/* Seconds, rounded up: Kubernetes counts in whole seconds. */
static json_int_t ceil_seconds(int64_t ms)
{
	return (json_int_t)((ms + 999) / 1000);
}

/*
 * What a Job and a Deployment are rendered from alike: the Kubernetes
 * name, the labels every object of the workload carries (selector_key
 * the one that picks its pods), the task's container, and the pod spec
 * with its annotations. Each reference is the workload's own until
 * workload_release.
 */
struct workload {
	char kname[64];
	const char *selector_key;
	json_t *labels, *container, *pod, *ann;
};

/* w named and labelled after name; 0 or the name's error. */
static int workload_name(struct workload *w, const char *name,
			 const char *selector_key, struct kn_error *err)
{
	int rc = kube_name(name, w->kname, sizeof(w->kname), err);

	if (rc < 0)
		return rc;
	w->selector_key = selector_key;
	w->labels = json_pack("{s:s, s:s}", "app.kubernetes.io/managed-by",
			      "kiln", selector_key, w->kname);
	return 0;
}

static void workload_release(struct workload *w)
{
	json_decref(w->labels);
	json_decref(w->container);
	json_decref(w->pod);
	json_decref(w->ann);
}

/*
 * The pod template's spec and its annotations (GPU shares) into w->pod
 * and w->ann. w->container gets env, resources and lifecycle added; the
 * caller has set its name, image, command and ports.
 */
static int pod_spec(const struct kn_job_spec *spec,
		    const struct kn_kube_render_opts *opts,
		    struct workload *w, json_t *env, struct kn_error *err)
{
	json_t *container = w->container;
	const struct kn_resources *res = &spec->resources;
	const struct kn_placement_spec *pl = &spec->placement;
	json_t *pod = json_object(), *ann = json_object();
	json_t *tolerations = json_array(), *affinity = NULL;
	char milli[16];
	int rc;

	rc = node_affinity(spec, opts, &affinity, err);
	if (rc < 0)
		goto out;
	/* The namespace's service-account token would let the task call the
	   API server as that account; the store's Secret is the only
	   credential a pod gets. */
	json_object_set_new(pod, "automountServiceAccountToken", json_false());
	if (opts->scheduler_name)
		json_object_set_new(pod, "schedulerName",
				    json_string(opts->scheduler_name));
	else if (is_share(res))
		json_object_set_new(pod, "schedulerName",
				    json_string(KN_KUBE_DEFAULT_SCHEDULER));
	if (is_share(res)) {
		snprintf(milli, sizeof(milli), "%d", res->gpu_milli);
		json_object_set_new(ann, KN_KUBE_ANN_GPU_MILLI,
				    json_string(milli));
		json_object_set_new(ann, KN_KUBE_ANN_SHARING,
				    json_string(res->sharing == KN_SHARING_MPS ?
						"mps" : "time-slicing"));
		json_array_append_new(
			env, kube_env_field("NVIDIA_VISIBLE_DEVICES",
				       "metadata.annotations['" KN_KUBE_ANN_GPU
				       "']"));
	}
	for (size_t i = 0; i < spec->n_env; i++)
		json_array_append_new(env, kube_env_value(spec->env[i].key,
						     spec->env[i].value));
	json_object_set_new(container, "env", env);
	env = NULL;
	if (spec->workdir)
		json_object_set_new(container, "workingDir",
				    json_string(spec->workdir));
	json_object_set_new(container, "resources", resources(res));
	json_object_set_new(container, "securityContext",
			    security_context(opts, false));
	if (spec->checkpoint.set) {
		json_object_set_new(container, "lifecycle",
				    pre_stop(spec->checkpoint.signal));
		json_object_set_new(
			pod, "terminationGracePeriodSeconds",
			json_integer(ceil_seconds(spec->checkpoint.grace_ms)));
	}
	if (pl->n_selector) {
		json_t *sel = json_object();
		for (size_t i = 0; i < pl->n_selector; i++)
			json_object_set_new(sel, pl->selector[i].key,
					    json_string(pl->selector[i].value));
		json_object_set_new(pod, "nodeSelector", sel);
	}
	if (affinity)
		json_object_set_new(pod, "affinity", affinity);
	affinity = NULL;
	if (has_gpu(res))
		json_array_append_new(tolerations,
				      toleration(GPU_TAINT_KEY, "Equal", "gpu",
						 "NoSchedule"));
	if (spec->preemptible)
		json_array_append_new(tolerations,
				      toleration(SPOT_TAINT_KEY, "Equal",
						 "spot", "NoSchedule"));
	for (size_t i = 0; i < pl->n_tolerations; i++) {
		const struct kn_toleration *t = &pl->tolerations[i];
		json_array_append_new(
			tolerations,
			toleration(t->key, t->operator_ ? t->operator_ : "Equal",
				   t->value, t->effect));
	}
	if (json_array_size(tolerations))
		json_object_set_new(pod, "tolerations", json_incref(tolerations));
	if (pl->spread != KN_SPREAD_NONE)
		json_object_set_new(
			pod, "topologySpreadConstraints",
			json_pack("[{s:i, s:s, s:s, s:{s:{s:s}}}]", "maxSkew",
				  1, "topologyKey", ZONE_LABEL,
				  "whenUnsatisfiable", "ScheduleAnyway",
				  "labelSelector", "matchLabels",
				  w->selector_key, w->kname));
	json_object_set_new(pod, "containers",
			    json_pack("[O]", container));
	w->pod = pod;
	pod = NULL;
	w->ann = ann;
	ann = NULL;
out:
	json_decref(pod);
	json_decref(ann);
	json_decref(tolerations);
	json_decref(affinity);
	json_decref(env);
	return rc;
}

/* A Job's or a Deployment's pod template: its labels, its annotations
   when there are any, and its pod spec. */
static json_t *pod_template(const struct workload *w)
{
	json_t *meta = json_pack("{s:O}", "labels", w->labels);

	if (json_object_size(w->ann))
		json_object_set(meta, "annotations", w->ann);
	return json_pack("{s:o, s:O}", "metadata", meta, "spec", w->pod);
}

/* The metadata of each object of w, in namespace ns (NULL: none). */
static json_t *metadata(const struct workload *w, const char *ns)
{
	json_t *m = json_pack("{s:s, s:O}", "name", w->kname, "labels",
			      w->labels);

	if (ns)
		json_object_set_new(m, "namespace", json_string(ns));
	return m;
}

static json_t *command(const struct kn_job_spec *spec)
{
	json_t *argv = json_array();

	for (size_t i = 0; i < spec->n_command; i++)
		json_array_append_new(argv, json_string(spec->command[i]));
	return argv;
}

/*
 * The task under the shim: kiln from the initContainer, its emptyDir,
 * the checkpoint, input and output environment and the store's Secret.
 */
static void shim_wrap(const struct kn_job_spec *spec,
		      const struct kn_kube_render_opts *opts, json_t *pod,
		      json_t *container)
{
	const char *store = spec->checkpoint.store ? spec->checkpoint.store
						   : opts->store_url;
	json_t *env = json_object_get(container, "env");
	json_t *argv = json_pack("[s, s, s, s, s, s, s]",
				 KN_KUBE_SHIM_DIR "/lib/ld.so",
				 "--library-path", KN_KUBE_SHIM_DIR "/lib",
				 KN_KUBE_SHIM_DIR "/bin/kiln", "shim", "--kube",
				 "--");
	json_t *mounts = json_pack("[{s:s, s:s}]", "name", "kiln",
				   "mountPath", KN_KUBE_SHIM_DIR);
	const char *sig = sigabbrev_np(spec->checkpoint.signal);
	char buf[32];

	json_array_extend(argv, json_object_get(container, "command"));
	json_object_set_new(container, "command", argv);
	/* Under the shim the task writes only kiln's directories and /tmp,
	   so its root file system can be read-only. */
	json_object_set_new(container, "volumeMounts",
			    json_pack("[O, {s:s, s:s}]",
				      json_array_get(mounts, 0), "name", "tmp",
				      "mountPath", "/tmp"));
	json_object_set_new(container, "securityContext",
			    security_context(opts, true));
	json_array_append_new(env, kube_env_value("KILN_TASK_DIR",
					     KN_KUBE_SHIM_DIR "/task"));
	json_array_append_new(env, kube_env_value("KILN_CHECKPOINT_DIR",
					     KN_KUBE_SHIM_DIR "/checkpoints"));
	json_array_append_new(env, kube_env_value("KILN_TERMINATION_LOG",
					     KN_KUBE_TERMINATION_LOG));
	snprintf(buf, sizeof(buf), "SIG%s", sig ? sig : "TERM");
	json_array_append_new(env,
			      kube_env_value("KILN_CHECKPOINT_SIGNAL", buf));
	/* The pod's terminationGracePeriodSeconds: Kubernetes' default
	   (30 s) without a checkpoint section. */
	snprintf(buf, sizeof(buf), "%lld",
		 spec->checkpoint.set ?
			 (long long)ceil_seconds(spec->checkpoint.grace_ms) *
				 1000 : 30000LL);
	json_array_append_new(env,
			      kube_env_value("KILN_CHECKPOINT_GRACE_MS", buf));
	/* What the shim fetches the job's inputs into and uploads from
	   when the task succeeds: the emptyDir, as the checkpoints. */
	json_array_append_new(env, kube_env_value("KILN_INPUT_DIR",
					     KN_KUBE_SHIM_DIR "/inputs"));
	json_array_append_new(env, kube_env_value("KILN_OUTPUT_DIR",
					     KN_KUBE_SHIM_DIR "/outputs"));
	if (opts->inputs)
		json_array_append_new(env, kube_env_value("KILN_INPUTS",
						     opts->inputs));
	if (opts->requires)
		json_array_append_new(env, kube_env_value("KILN_REQUIRES",
						     opts->requires));
	if (store && (spec->preemptible || spec->checkpoint.set)) {
		json_array_append_new(env, kube_env_value("KILN_STORE", store));
		snprintf(buf, sizeof(buf), "%d",
			 spec->checkpoint.set ? spec->checkpoint.keep : 3);
		json_array_append_new(
			env, kube_env_value("KILN_CHECKPOINT_KEEP", buf));
	}
	/* Every job's outputs go to the store; inputs come from stores. */
	if (store) {
		json_array_append_new(env, kube_env_value("KILN_OUTPUT_STORE",
						     store));
		json_object_set_new(
			container, "envFrom",
			json_pack("[{s:{s:s, s:b}}]", "secretRef", "name",
				  KN_KUBE_STORE_SECRET, "optional", 1));
	}
	json_object_set_new(
		pod, "initContainers",
		json_pack("[{s:s, s:s, s:[s, s, s, s], s:o, s:o}]", "name",
			  "kiln-shim", "image", opts->shim_image, "command",
			  "kiln", "shim", "--install", KN_KUBE_SHIM_DIR,
			  "volumeMounts", mounts, "securityContext",
			  security_context(opts, true)));
	json_object_set_new(pod, "volumes",
			    json_pack("[{s:s, s:{}}, {s:s, s:{}}]", "name",
				      "kiln", "emptyDir", "name", "tmp",
				      "emptyDir"));
}

/*
 * A file:// input is a file on the server's machine, which pods do not
 * see, with one exception: when the store the pods use is file:// too,
 * its directory must be mounted in the pods at the same path (else
 * neither checkpoints nor outputs would work), so an input under that
 * directory is readable there. Anything else must come from a store.
 */
static bool pod_can_read(const char *input_url, const char *store_url)
{
	const char *dir;
	size_t n;

	if (strncmp(input_url, "file://", 7) != 0)
		return true;
	if (strncmp(store_url, "file://", 7) != 0)
		return false;
	dir = store_url + 7;
	n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	return !strncmp(input_url + 7, dir, n) && input_url[7 + n] == '/';
}

int kn_kube_check_inputs(const struct kn_job_spec *spec, const char *store,
			 const char *filename, struct kn_error *err)
{
	if (!spec->n_inputs)
		return 0;
	if (!store)
		store = "";
	if (spec->n_inputs > KN_KUBE_MAX_INPUTS)
		return kn_errorf(err, KN_EINVAL, "inputs",
				 "%s:%d:%d: inputs: %zu under the kubernetes "
				 "executor, at most %d (their digests come "
				 "back in the pod's termination message)",
				 filename, spec->inputs[0].line,
				 spec->inputs[0].column, spec->n_inputs,
				 KN_KUBE_MAX_INPUTS);
	for (size_t i = 0; i < spec->n_inputs; i++) {
		const struct kn_job_input *in = &spec->inputs[i];

		if (strlen(in->name) > KN_KUBE_INPUT_NAME_MAX)
			return kn_errorf(err, KN_EINVAL, "inputs",
					 "%s:%d:%d: inputs[%zu]: its name %.40s... "
					 "is over %d bytes under the kubernetes "
					 "executor", filename, in->line,
					 in->column, i, in->name,
					 KN_KUBE_INPUT_NAME_MAX);
		if (in->url && pod_can_read(in->url, store))
			continue;
		if (!strncmp(store, "file://", 7))
			return kn_errorf(err, KN_EINVAL, "inputs",
					 "%s:%d:%d: inputs[%zu]: \"%s\" is a "
					 "file on the server, which pods cannot "
					 "read: give a store URL (https://, "
					 "azure://) or a path under the store's "
					 "directory %s (mounted in the pods)",
					 filename, in->line, in->column, i,
					 in->text, store + 7);
		return kn_errorf(err, KN_EINVAL, "inputs",
				 "%s:%d:%d: inputs[%zu]: \"%s\" is a file on "
				 "the server, which pods cannot read: give a "
				 "store URL (https://, azure://)", filename,
				 in->line, in->column, i, in->text);
	}
	return 0;
}

/*
 * An array's Indexed Job numbers its pods from 0 and can add nothing to
 * that number, so the element's index is the completion index itself.
 */
static int check_array(const struct kn_job_spec *spec, struct kn_error *err)
{
	if (!spec->array.count)
		return 0;
	if (spec->tasks > 1)
		return kn_errorf(err, KN_EINVAL, "array",
				 "array: an array of gangs (tasks: %d) is not "
				 "rendered: an Indexed Job indexes either the "
				 "ranks or the elements", spec->tasks);
	if (spec->array.first != 0)
		return kn_errorf(err, KN_EINVAL, "array",
				 "array: an Indexed Job numbers its elements "
				 "from 0; this array starts at %d",
				 spec->array.first);
	return 0;
}

/* The array's variables, the index read from the pod's annotation. */
static void array_env(const struct kn_job_spec *spec, json_t *env)
{
	static const char *const index_names[] = {"KILN_ARRAY_INDEX",
						  "SLURM_ARRAY_TASK_ID"};
	char buf[16];

	for (size_t i = 0; i < 2; i++)
		json_array_append_new(
			env, kube_env_field(index_names[i],
				       "metadata.annotations['" KUBE_INDEX_ANNOTATION
				       "']"));
	snprintf(buf, sizeof(buf), "%d", spec->array.count);
	json_array_append_new(env, kube_env_value("KILN_ARRAY_COUNT", buf));
	json_array_append_new(env,
			      kube_env_value("SLURM_ARRAY_TASK_COUNT", buf));
	json_array_append_new(env, kube_env_value("SLURM_ARRAY_TASK_MIN", "0"));
	snprintf(buf, sizeof(buf), "%d", spec->array.count - 1);
	json_array_append_new(env, kube_env_value("SLURM_ARRAY_TASK_MAX", buf));
}

/* A terminal's task runs without the shim (see kn_kube_render_job), so
   without what only the shim does in a pod. */
static int check_tty(const struct kn_job_spec *spec, struct kn_error *err)
{
	if (!spec->tty)
		return 0;
	if (spec->checkpoint.set)
		return kn_errorf(err, KN_EINVAL, "checkpoint",
				 "checkpoint: a job with a terminal (tty) runs "
				 "as its pod's first process on Kubernetes, "
				 "without kiln's shim to sync checkpoints");
	if (spec->n_inputs)
		return kn_errorf(err, KN_EINVAL, "inputs",
				 "inputs: a job with a terminal (tty) runs as "
				 "its pod's first process on Kubernetes, without "
				 "kiln's shim to fetch inputs");
	return 0;
}

static int check_opts(const struct kn_kube_render_opts *opts,
		      struct kn_error *err)
{
	if (!opts->image || !*opts->image)
		return kn_errorf(err, KN_EINVAL, "image",
				 "image: no container image: give one with "
				 "--image (a job spec may name its own in "
				 "`image`; a deployment spec cannot)");
	return 0;
}

int kn_kube_render_job(const struct kn_job_spec *spec,
		       const struct kn_kube_render_opts *opts, json_t **out,
		       struct kn_error *err)
{
	struct workload w = {0};
	json_t *docs = NULL, *env, *job_spec;
	char buf[160];
	bool gang = spec->tasks > 1;
	int rc;

	rc = check_opts(opts, err);
	if (rc == 0)
		rc = check_array(spec, err);
	if (rc == 0)
		rc = check_tty(spec, err);
	if (rc == 0)
		rc = workload_name(&w, spec->name, "kiln.dev/job", err);
	if (rc < 0)
		return rc;
	w.container = json_pack("{s:s, s:s, s:o}", "name", "task", "image",
				opts->image, "command", command(spec));
	env = json_array();
	snprintf(buf, sizeof(buf), "%d", spec->tasks);
	json_array_append_new(env, kube_env_value("WORLD_SIZE", buf));
	json_array_append_new(env, kube_env_value("LOCAL_RANK", "0"));
	json_array_append_new(env, kube_env_value("KILN_JOB", w.kname));
	if (gang) {
		json_array_append_new(
			env, kube_env_field("RANK", "metadata.annotations['"
					       KUBE_INDEX_ANNOTATION "']"));
		snprintf(buf, sizeof(buf), "%s-0.%s", w.kname, w.kname);
		json_array_append_new(env, kube_env_value("MASTER_ADDR", buf));
		snprintf(buf, sizeof(buf), "%d", KN_KUBE_MASTER_PORT);
		json_array_append_new(env, kube_env_value("MASTER_PORT", buf));
	} else {
		json_array_append_new(env, kube_env_value("RANK", "0"));
	}
	if (spec->array.count)
		array_env(spec, env);
	/* A dev environment's home is not kept in a pod (the server cannot
	   reach its files); the image's may lie on the read-only root, so
	   it gets the writable /tmp, which ends with the pod. */
	if (spec->devenv.set)
		json_array_append_new(env, kube_env_value("HOME", "/tmp"));
	rc = pod_spec(spec, opts, &w, env, err);
	if (rc < 0)
		goto out;
	json_object_set_new(w.pod, "restartPolicy", json_string("Never"));
	if (gang)
		json_object_set_new(w.pod, "subdomain", json_string(w.kname));
	if (spec->tty) {
		/* A terminal to attach to (pods/attach): the task is the
		   container's first process, on the terminal the runtime
		   gives it, as `kubectl run -it` makes it. kiln's shim would
		   sit between them and give the task no terminal. */
		json_object_set_new(w.container, "stdin", json_true());
		json_object_set_new(w.container, "tty", json_true());
	} else if (opts->shim_image) {
		shim_wrap(spec, opts, w.pod, w.container);
	}
	if (gang) {
		/* kiln's scheduler places the gang's pods all at once. */
		snprintf(buf, sizeof(buf), "%d", spec->tasks);
		json_object_set_new(w.ann, KN_KUBE_ANN_GANG, json_string(buf));
	}
	job_spec = json_pack("{s:i, s:i, s:i, s:o}", "completions",
			     spec->tasks, "parallelism", spec->tasks,
			     "backoffLimit", spec->retries, "template",
			     pod_template(&w));
	if (gang || spec->array.count)
		json_object_set_new(job_spec, "completionMode",
				    json_string("Indexed"));
	if (spec->array.count) {
		/* Each element retries on its own, as kiln's elements do. */
		json_object_del(job_spec, "backoffLimit");
		json_object_set_new(job_spec, "backoffLimitPerIndex",
				    json_integer(spec->retries));
		json_object_set_new(job_spec, "completions",
				    json_integer(spec->array.count));
		json_object_set_new(job_spec, "parallelism",
				    json_integer(spec->array.parallel
							 ? spec->array.parallel
							 : spec->array.count));
	}
	if (spec->timeout_ms)
		json_object_set_new(job_spec, "activeDeadlineSeconds",
				    json_integer(ceil_seconds(spec->timeout_ms)));
	docs = json_array();
	json_array_append_new(
		docs, json_pack("{s:s, s:s, s:o, s:o}", "apiVersion",
				"batch/v1", "kind", "Job", "metadata",
				metadata(&w, opts->namespace_),
				"spec", job_spec));
	if (gang)
		json_array_append_new(
			docs,
			json_pack("{s:s, s:s, s:o, s:{s:s, s:b, s:{s:s}, "
				  "s:[{s:s, s:i}]}}",
				  "apiVersion", "v1", "kind", "Service",
				  "metadata",
				  metadata(&w, opts->namespace_),
				  "spec", "clusterIP", "None",
				  "publishNotReadyAddresses", 1, "selector",
				  "kiln.dev/job", w.kname, "ports", "name",
				  "master", "port", KN_KUBE_MASTER_PORT));
	*out = docs;
out:
	workload_release(&w);
	return rc;
}

static json_t *probe(const struct kn_probe *p)
{
	return json_pack("{s:{s:s, s:s}, s:I, s:i, s:I}", "httpGet", "path",
			 p->path, "port", "http", "periodSeconds",
			 ceil_seconds(p->period_ms), "failureThreshold",
			 p->failure_threshold, "initialDelaySeconds",
			 (json_int_t)(p->initial_delay_ms / 1000));
}

int kn_kube_render_deployment(const struct kn_deployment_spec *d,
			      const struct kn_kube_render_opts *opts,
			      json_t **out, struct kn_error *err)
{
	struct workload w = {0};
	json_t *env, *docs;
	char port[16];
	int rc;

	rc = check_opts(opts, err);
	if (rc == 0)
		rc = workload_name(&w, d->job.name, "kiln.dev/deployment", err);
	if (rc < 0)
		return rc;
	w.container = json_pack("{s:s, s:s, s:o, s:[{s:s, s:i}]}", "name",
				"server", "image", opts->image, "command",
				command(&d->job), "ports", "name", "http",
				"containerPort", SERVE_PORT);
	if (d->readiness.set)
		json_object_set_new(w.container, "readinessProbe",
				    probe(&d->readiness));
	if (d->liveness.set)
		json_object_set_new(w.container, "livenessProbe",
				    probe(&d->liveness));
	snprintf(port, sizeof(port), "%d", SERVE_PORT);
	env = json_pack("[o, o]", kube_env_value("KILN_PORT", port),
			kube_env_value("KILN_MODEL", d->model));
	json_object_set_new(w.container, "lifecycle",
			    json_pack("{s:{s:{s:[s,s,s]}}}", "preStop", "exec",
				      "command", "/bin/sh", "-c",
				      "sleep " SERVE_DRAIN_S));
	rc = pod_spec(&d->job, opts, &w, env, err);
	if (rc < 0)
		goto out;
	json_object_set_new(w.pod, "terminationGracePeriodSeconds",
			    json_integer(SERVE_GRACE_S));
	docs = json_array();
	/* One replica at a time, never below the wanted count: the rolling
	   replacement the well-architected guidance asks for. */
	json_array_append_new(
		docs,
		json_pack("{s:s, s:s, s:o, s:{s:i, s:{s:{s:s}}, "
			  "s:{s:s, s:{s:i, s:i}}, s:o}}",
			  "apiVersion", "apps/v1", "kind", "Deployment",
			  "metadata", metadata(&w, opts->namespace_),
			  "spec", "replicas", d->replicas, "selector",
			  "matchLabels", "kiln.dev/deployment", w.kname,
			  "strategy", "type", "RollingUpdate", "rollingUpdate",
			  "maxUnavailable", 0, "maxSurge", 1, "template",
			  pod_template(&w)));
	json_array_append_new(
		docs,
		json_pack("{s:s, s:s, s:o, s:{s:{s:s}, s:[{s:s, s:i, s:s}]}}",
			  "apiVersion", "v1", "kind", "Service", "metadata",
			  metadata(&w, opts->namespace_), "spec",
			  "selector", "kiln.dev/deployment", w.kname, "ports",
			  "name", "http", "port", SERVICE_PORT, "targetPort",
			  "http"));
	*out = docs;
out:
	workload_release(&w);
	return rc;
}
