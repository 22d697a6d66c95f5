/*
 * kube: kiln on Kubernetes — job and deployment specs rendered as
 * manifests, a small Kubernetes API client over libcurl, and the logic of
 * `kiln kube-scheduler`, a secondary scheduler that places pods asking for
 * `schedulerName: kiln` with the packing policies of sched/.
 *
 * Rendering and placement are pure functions over JSON (the API's own
 * objects), so the unit tests run them on recorded responses; only the
 * client does I/O. Placement never talks to the API: the caller lists and
 * watches, feeds the objects in, asks for a decision and binds.
 *
 * GPU shares: Kubernetes has no fractional nvidia.com/gpu, so a share is
 * an annotation (KN_KUBE_ANN_GPU_MILLI) on a pod that only kiln's
 * scheduler places. The binding it posts carries the chosen GPU index as
 * another annotation (KN_KUBE_ANN_GPU), which the API server copies onto
 * the pod; the container reads it through the downward API as
 * NVIDIA_VISIBLE_DEVICES when it starts (after binding), and the
 * scheduler charges it on the next relist.
 */
#ifndef KILN_KUBE_H
#define KILN_KUBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"
#include "exec/exec.h"
#include "sched/sched.h"
#include "spec/spec.h"

/* Annotations kiln writes and reads. */
#define KN_KUBE_ANN_GPU_MILLI "kiln.dev/gpu-milli"  /* share, 1..999 */
#define KN_KUBE_ANN_GPU "kiln.dev/gpu"              /* chosen GPU index */
#define KN_KUBE_ANN_SHARING "kiln.dev/gpu-sharing"  /* time-slicing, mps */
/* On each pod of a gang: its size. The gang is the pods of one namespace
   with the same kiln.dev/job label. */
#define KN_KUBE_ANN_GANG "kiln.dev/gang-size"
#define KN_KUBE_LABEL_JOB "kiln.dev/job"
#define KN_KUBE_LABEL_PRODUCT "nvidia.com/gpu.product"
#define KN_KUBE_DEFAULT_SCHEDULER "kiln"
/* Where rank 0 listens for the gang (torch.distributed's default). */
#define KN_KUBE_MASTER_PORT 29500

/* ---- GPU product labels (data/gpu-products.csv) ---- */

/* kiln's GPU model names ("H100-80GB") against the nvidia.com/gpu.product
   labels GPU feature discovery puts on nodes ("NVIDIA-H100-80GB-HBM3"). */
struct kn_kube_products;

/*
 * Parse the table (CSV, header model,product,source; one row per product,
 * several rows per model). Errors name file:line and the column. *out is
 * the caller's, freed with kn_kube_products_free.
 */
int kn_kube_products_parse(const char *text, size_t len, const char *file,
			   struct kn_kube_products **out,
			   struct kn_error *err);
int kn_kube_products_load(const char *path, struct kn_kube_products **out,
			  struct kn_error *err);
void kn_kube_products_free(struct kn_kube_products *p);
/*
 * The product labels of model into out[0..max-1] (pointers into p);
 * returns how many there are. A model matches exactly or as a prefix
 * before '-' ("H100" covers "H100-80GB"), ignoring case, as in sched/.
 */
size_t kn_kube_products_for(const struct kn_kube_products *p,
			    const char *model, const char **out, size_t max);
/* kiln's model for a product label, or NULL. */
const char *kn_kube_model_for(const struct kn_kube_products *p,
			      const char *product);

/* ---- rendering ---- */

struct kn_kube_render_opts {
	const char *image;     /* container image; required */
	const char *namespace_;/* written into metadata, or NULL */
	/* schedulerName for every pod, or NULL: then only pods with a GPU
	   share get KN_KUBE_DEFAULT_SCHEDULER (the default scheduler cannot
	   place shares). */
	const char *scheduler_name;
	const struct kn_kube_products *products; /* may be NULL */
	/*
	 * Jobs only: run the task under `kiln shim --kube` (checkpoint
	 * restore and sync, the checkpoint signal), kiln coming from this
	 * image's initContainer; NULL renders the bare command.
	 */
	const char *shim_image;
	/* The checkpoint store the shim syncs with when the spec names
	   none (KILN_STORE), or NULL; only for preemptible jobs and jobs
	   with a checkpoint section, as the server syncs. */
	const char *store_url;
	/* Jobs under the shim: KILN_INPUTS, what it fetches before the task
	   (kn_job_inputs_for_shim), or NULL. */
	const char *inputs;
	/* Jobs under the shim: KILN_REQUIRES, the prerequisites it checks
	   before the task (a workflow step's), or NULL. */
	const char *requires;
	/* runAsUser and runAsGroup of every container; 0 (never root):
	   KN_KUBE_DEFAULT_UID. */
	int64_t run_as_user;
};

/* The uid kiln's pods run as unless told otherwise: not root. */
#define KN_KUBE_DEFAULT_UID 1000

/*
 * Under the shim, an emptyDir mounted here holds kiln (bin/, lib/ with
 * the loader as lib/ld.so), the task directory (task/) and
 * KILN_CHECKPOINT_DIR (checkpoints/); the store's credentials come from
 * the Secret KN_KUBE_STORE_SECRET (optional: a store that needs none).
 */
#define KN_KUBE_SHIM_DIR "/kiln"
#define KN_KUBE_STORE_SECRET "kiln-store-credentials"
#define KN_KUBE_TERMINATION_LOG "/dev/termination-log"
/* The kubelet keeps this much of a termination message. */
#define KN_KUBE_TERMINATION_MAX 4096
/*
 * A job under Kubernetes may have this many inputs, named in at most
 * this many bytes each, so that what the shim reports about them fits
 * in its termination message with the rest (src/shimrt/pod.c).
 */
#define KN_KUBE_MAX_INPUTS 12
#define KN_KUBE_INPUT_NAME_MAX 100

/*
 * Whether a pod's shim can fetch spec's inputs (resolved to URLs by
 * kn_job_spec_resolve_inputs) when the pods' store is store (NULL:
 * none): few enough, and named briefly enough, to report back in the
 * termination message, and none a file only the server sees (a file://
 * input counts as readable under a file:// store's directory, which pods
 * must mount at the same path). -EINVAL naming the input as
 * FILE:LINE:COLUMN.
 */
int kn_kube_check_inputs(const struct kn_job_spec *spec, const char *store,
			 const char *filename, struct kn_error *err);

/*
 * A job spec as manifests: a JSON array of objects, a `batch/v1` Job and,
 * for a gang (tasks > 1), the headless Service that gives rank 0 a stable
 * name (MASTER_ADDR). New reference in *out on success; -EINVAL naming
 * the option or field otherwise (no image, a GPU model without a product
 * label).
 */
int kn_kube_render_job(const struct kn_job_spec *spec,
		       const struct kn_kube_render_opts *opts, json_t **out,
		       struct kn_error *err);

/* A deployment spec as an `apps/v1` Deployment and its Service. */
int kn_kube_render_deployment(const struct kn_deployment_spec *spec,
			      const struct kn_kube_render_opts *opts,
			      json_t **out, struct kn_error *err);

/*
 * The manifests as YAML documents separated by "---" (block style,
 * strings double-quoted so no value can change type). malloc'd.
 */
char *kn_kube_yaml(json_t *docs);

/* ---- credentials ---- */

struct kn_kube_auth {
	char *server;     /* "https://10.0.0.1:443" */
	char *token;      /* bearer token, or NULL */
	char *token_file; /* read before each request (rotated tokens) */
	char *ca_file;    /* PEM file, or NULL */
	char *ca_pem;     /* PEM text (certificate-authority-data), or NULL */
	char *cert_pem;   /* client certificate and key, PEM, or NULL */
	char *key_pem;
	char *cert_file;
	char *key_file;
	bool insecure;    /* insecure-skip-tls-verify */
};

/*
 * Read a kubeconfig (YAML): the context named context (NULL: its
 * current-context), its cluster's server, certificate-authority(-data)
 * and insecure-skip-tls-verify, its user's token, tokenFile,
 * client-certificate(-data) and client-key(-data). Relative paths are
 * relative to the file's directory. Errors name the file and the entry
 * ("kubeconfig: users[dev].user: exec credentials are not supported").
 * On success *out is filled (release with kn_kube_auth_release).
 */
int kn_kube_kubeconfig_parse(const char *text, size_t len, const char *file,
			     const char *context, struct kn_kube_auth *out,
			     struct kn_error *err);
int kn_kube_kubeconfig_load(const char *path, const char *context,
			    struct kn_kube_auth *out, struct kn_error *err);

/*
 * In-cluster credentials: https://HOST:PORT from KUBERNETES_SERVICE_HOST
 * and KUBERNETES_SERVICE_PORT, the token and ca.crt in sa_dir (the
 * service account's mount). -ENOENT naming what is missing.
 */
int kn_kube_in_cluster(const char *sa_dir, struct kn_kube_auth *out,
		       struct kn_error *err);
/*
 * Credentials as kubectl finds them: the kubeconfig file (NULL: the
 * first file $KUBECONFIG lists, which kubectl would merge with the
 * others) with context, else in-cluster from sa_dir.
 */
int kn_kube_auth_load(const char *kubeconfig, const char *context,
		      const char *sa_dir, struct kn_kube_auth *out,
		      struct kn_error *err);
void kn_kube_auth_release(struct kn_kube_auth *auth);
/* A deep copy of src into dst (released with kn_kube_auth_release). */
void kn_kube_auth_copy(struct kn_kube_auth *dst,
		       const struct kn_kube_auth *src);
/*
 * The bearer token to send now (token_file read again, for rotated
 * tokens): 0 with *out malloc'd, or NULL when auth has none; -EIO with
 * err when the file cannot be read. The caller wipes and frees it.
 */
int kn_kube_auth_token(const struct kn_kube_auth *auth, char **out,
		       struct kn_error *err);

/* ---- the API client (blocking; the scheduler has no event loop) ---- */

/* A response body is refused above this: the largest pod list we expect
   from a cluster kiln schedules (thousands of pods) with room to spare. */
#define KN_KUBE_MAX_BODY (64 * 1024 * 1024)
/* One watch event: a single object, however large, stays below this. */
#define KN_KUBE_MAX_EVENT (4 * 1024 * 1024)

struct kn_kube_client;

/* A client for auth (copied). -EINVAL when libcurl refuses an option. */
int kn_kube_client_new(const struct kn_kube_auth *auth,
		       struct kn_kube_client **out, struct kn_error *err);
void kn_kube_client_free(struct kn_kube_client *c);

/*
 * Stop any transfer in progress at the next progress check (about once a
 * second) when *flag becomes true; the call then fails with -EINTR.
 */
void kn_kube_client_stop_on(struct kn_kube_client *c,
			    volatile const int *flag);

/*
 * GET path (with its query) and parse the JSON answer. *status is the
 * HTTP status; the body is returned for any status (a Status object on
 * errors). -EIO on transport errors, -EINVAL when the body is not JSON.
 */
int kn_kube_get(struct kn_kube_client *c, const char *path, long *status,
		json_t **body, struct kn_error *err);
/* POST body as JSON to path; the answer as kn_kube_get's. */
int kn_kube_post(struct kn_kube_client *c, const char *path, json_t *body,
		 long *status, json_t **answer, struct kn_error *err);

/* PUT body (a whole object, replacing it) to path; as kn_kube_post. */
int kn_kube_put(struct kn_kube_client *c, const char *path, json_t *body,
		long *status, json_t **answer, struct kn_error *err);
/*
 * PATCH path with body sent as content_type (KN_KUBE_MERGE_PATCH, or
 * "application/strategic-merge-patch+json"); the answer as kn_kube_get's.
 */
#define KN_KUBE_MERGE_PATCH "application/merge-patch+json"
int kn_kube_patch(struct kn_kube_client *c, const char *path,
		  const char *content_type, json_t *body, long *status,
		  json_t **answer, struct kn_error *err);

/* DELETE path with body (DeleteOptions); the answer as kn_kube_get's. */
int kn_kube_delete(struct kn_kube_client *c, const char *path, json_t *body,
		   long *status, json_t **answer, struct kn_error *err);
/*
 * GET path as text (a pod's log): *text malloc'd, NUL-terminated, *len
 * bytes, for any status. -EIO on transport errors and above max bytes.
 */
int kn_kube_get_text(struct kn_kube_client *c, const char *path,
		     size_t max, long *status, char **text, size_t *len,
		     struct kn_error *err);

/*
 * One watch event: type ("ADDED", "MODIFIED", "DELETED", "BOOKMARK",
 * "ERROR") and the object (borrowed). Return 0 to go on, anything else
 * to end the watch (kn_kube_watch then returns it).
 */
typedef int (*kn_kube_event_fn)(void *arg, const char *type,
				json_t *object);

/*
 * GET path as a watch (newline-delimited JSON events) and call fn on each
 * until the server ends the stream (returns 0), fn returns non-zero
 * (returns that), or an error. A status other than 200 returns 0 with
 * *status set and no event delivered.
 */
int kn_kube_watch(struct kn_kube_client *c, const char *path,
		  kn_kube_event_fn fn, void *arg, long *status,
		  struct kn_error *err);

/* ---- the secondary scheduler's state and decisions ---- */

/*
 * The secondary scheduler's loop (scheduler.c): list, watch and bind the
 * pods whose spec.schedulerName is scheduler_name, placed with policy,
 * until *stop; *binds gets how many pods it bound. API failures are
 * logged and retried with a back-off; an error only when the client
 * cannot be made.
 */
struct kn_kube_scheduler_config {
	const struct kn_kube_auth *auth;
	const char *scheduler_name;
	const struct kn_pack_policy *policy;
	const struct kn_kube_products *products;
	int watch_seconds; /* each watch's timeoutSeconds, at least 1 */
};
int kn_kube_scheduler_run(const struct kn_kube_scheduler_config *cfg,
			  volatile int *stop, long *binds,
			  struct kn_error *err);

/* Pods and nodes as the scheduler last saw them. */
struct kn_kube_cluster;

struct kn_kube_cluster *kn_kube_cluster_new(const char *scheduler_name,
					    const struct kn_kube_products *p);
void kn_kube_cluster_free(struct kn_kube_cluster *c);

/*
 * Replace the nodes with a NodeList's items / the pods with a PodList's.
 * -EINVAL naming the item when one is not an object with a name.
 */
int kn_kube_cluster_set_nodes(struct kn_kube_cluster *c, json_t *node_list,
			      struct kn_error *err);
int kn_kube_cluster_set_pods(struct kn_kube_cluster *c, json_t *pod_list,
			     struct kn_error *err);
/*
 * Apply one pod watch event (ADDED, MODIFIED, DELETED); other types are
 * ignored. -EINVAL when the object is not a pod with a name.
 */
int kn_kube_cluster_pod_event(struct kn_kube_cluster *c, const char *type,
			      json_t *pod, struct kn_error *err);

struct kn_kube_pod_ref {
	const char *namespace_; /* borrowed from the cluster */
	const char *name;
};

/*
 * The pods waiting for this scheduler (schedulerName matches, no node,
 * phase Pending, not being deleted), oldest first (then namespace and
 * name), into out[0..max-1]; returns how many there are. Valid until the
 * cluster next changes.
 */
size_t kn_kube_cluster_pending(const struct kn_kube_cluster *c,
			       struct kn_kube_pod_ref *out, size_t max);

struct kn_kube_decision {
	char node[256];
	int n_gpus;     /* GPU indexes chosen on the node */
	int gpus[KN_PACK_MAX_GPUS];
	int gpu_milli;  /* per GPU: 1000, or the share */
};

/*
 * Where pod ns/name should go under policy: the nodes that are ready,
 * schedulable and match the pod's nodeSelector, required node affinity
 * and taints (NoSchedule and NoExecute) become a kn_pack cluster, charged
 * with every pod bound to them that has not ended (shares on their
 * annotated GPU), and kn_pack_place picks node and GPUs. 0 with *out
 * filled; -ENOSPC with a reason in err when nothing fits; -ENOENT when
 * the pod is not known or not pending; -EINVAL for a pod kiln cannot
 * place (a MIG resource, a bad share annotation).
 */
int kn_kube_place(struct kn_kube_cluster *c,
		  const struct kn_pack_policy *policy, const char *ns,
		  const char *name, struct kn_kube_decision *out,
		  struct kn_error *err);

/* One pod's placement in a gang decision. */
struct kn_kube_placement {
	char namespace_[64];
	char name[256];
	struct kn_kube_decision d;
};

/*
 * Place pod ns/name, and with it, when it belongs to a gang
 * (KN_KUBE_ANN_GANG), every pending pod of that gang: all of them or none,
 * each placed with the others charged. Writes the placements to
 * out[0..*n-1] (max must hold the gang: KN_SPEC_MAX_TASKS is enough) and
 * leaves the cluster unchanged. Errors as kn_kube_place's, and -EAGAIN
 * while the gang's pods (bound and pending) are fewer than its size: the
 * Job controller is still creating them.
 */
int kn_kube_place_gang(struct kn_kube_cluster *c,
		       const struct kn_pack_policy *policy, const char *ns,
		       const char *name, struct kn_kube_placement *out,
		       size_t max, size_t *n, struct kn_error *err);

/*
 * The Binding to POST to /api/v1/namespaces/NS/pods/NAME/binding for a
 * decision (with the KN_KUBE_ANN_GPU annotation for a share). New ref.
 */
json_t *kn_kube_binding(const char *ns, const char *name,
			const struct kn_kube_decision *d);

/*
 * Record a binding the API accepted, so later decisions count it before
 * the watch reports it. -ENOENT when the pod is not known.
 */
int kn_kube_cluster_assume(struct kn_kube_cluster *c, const char *ns,
			   const char *name,
			   const struct kn_kube_decision *d);

/*
 * Kubernetes quantities: "500m", "2", "1.5" as thousandths of a unit;
 * "16Gi", "1G", "131896204Ki", "1e9" as bytes. 0 or -EINVAL.
 */
int kn_kube_quantity_milli(const char *s, int64_t *out);
int kn_kube_quantity_bytes(const char *s, int64_t *out);

/* ---- the server's Kubernetes executor (batchjobs.c) ---- */

/*
 * `kiln server --executor kubernetes`: each attempt is one batch/v1 Job
 * (Indexed for a gang, and for the elements of a job array started
 * together: kn_kube_array_run), named kiln-JOBID-ATTEMPT, labelled with
 * KN_KUBE_LABEL_JOB_ID and KN_KUBE_LABEL_ATTEMPT. All API calls happen on
 * one worker thread; the ops (called on the server's loop) only write
 * files and queue work. The worker lists the namespace's kiln Jobs and
 * pods about once a second while attempts are live and writes each
 * task's state to TASK_DIR/kube.json, its pod log to TASK_DIR/output.log.
 */
#define KN_KUBE_LABEL_JOB_ID "kiln.dev/job-id"
#define KN_KUBE_LABEL_ATTEMPT "kiln.dev/attempt"
#define KN_KUBE_LABEL_MANAGED "app.kubernetes.io/managed-by"
/* On the Job of a job array's run of elements (and its pods). */
#define KN_KUBE_LABEL_ARRAY_ID "kiln.dev/array-id"

/* What the server hands the executor with each task (kn_task_launch). */
struct kn_kube_task {
	const struct kn_job_spec *spec;
	int64_t job_id;
	int attempt;
	int rank; /* rank 0 submits the attempt; the others ride along */
	/* KILN_INPUTS for the shim (the job's inputs with their recorded
	   digests, server/core_launch.c), or NULL. */
	const char *inputs;
	/* KILN_REQUIRES, a workflow step's prerequisites the shim checks
	   before the task, or NULL. */
	const char *requires;
};

struct kn_kube_exec_config {
	const struct kn_kube_auth *auth;   /* copied */
	const char *namespace_;            /* required */
	const char *image;                 /* for specs without one, or NULL */
	const char *scheduler_name;        /* every pod's, or NULL */
	const struct kn_kube_products *products; /* kept; may be NULL */
	/* The image whose kiln the pods' initContainer copies (`kiln shim
	   --install`); NULL: the task's image, which then has kiln. */
	const char *shim_image;
	/* The server's checkpoint store, for specs that name none. */
	const char *store_url;
	/* How often live attempts' Jobs and pods are listed; 0: the
	   default. */
	int64_t poll_ms;
};

/* Kubernetes is asked about live attempts once a second by default: a
   task's end reaches kiln within that, for two list requests. */
#define KN_KUBE_POLL_DEFAULT_MS 1000

/*
 * The Job (and, for a gang, the headless Service) one attempt becomes:
 * kn_kube_render_job's documents under the shim (cfg's shim image and
 * store) renamed kiln-JOBID-ATTEMPT, with kiln's
 * labels, KILN_JOB_ID, KILN_ATTEMPT and KILN_JOB_NAME in the
 * environment, backoffLimit 0 (kiln retries whole attempts) and
 * ttlSecondsAfterFinished. Errors as kn_kube_render_job's.
 */
int kn_kube_attempt_manifests(const struct kn_kube_exec_config *cfg,
			      const struct kn_kube_task *task, json_t **out,
			      struct kn_error *err);

/*
 * A job array's run of n elements as one Indexed Job (indexed.c): docs,
 * the run's first element's kn_kube_attempt_manifests, becomes a Job of
 * n completions (parallelism: parallel, 0 = n), backoffLimitPerIndex 0,
 * labelled KN_KUBE_LABEL_ARRAY_ID, its timeout each pod's; completion
 * index i is the element first_index + i, kiln job first_job_id + i,
 * which the pod's shim derives from KILN_COMPLETION_INDEX (the index
 * annotation), KILN_ARRAY_RUN_INDEX, KILN_ARRAY_RUN_JOB_ID and
 * KILN_ARRAY_RUN_SIZE. 0, or -EINVAL when docs is no one-task Job.
 */
int kn_kube_array_run(json_t *docs, int64_t array_id, int first_index,
		      int64_t first_job_id, int n, int parallel,
		      struct kn_error *err);

/* A task's state as read from its Job and pods. */
struct kn_kube_task_view {
	bool ended;
	bool running;    /* its container runs */
	bool preempted;  /* ended by a disruption (spot eviction, ...) */
	int exit_code;   /* -1 when none was recorded */
	int signal;
	char reason[96]; /* "timeout", "OOMKilled", "Evicted: ...", or "" */
	char pod[256];   /* the pod's name, "" when none is known */
	int64_t started_at_ms;
	int64_t ended_at_ms;
	/* From the shim's termination message (the task's container). */
	char checkpoint[128];
	int64_t checkpoint_at_ms;
	char restored[128];
	int64_t restore_ms;
	/* The inputs it fetched (a JSON list of {name, sha256, size}, as
	   TASK_DIR/inputs.json locally) or "", and its outputs' upload: how
	   many files and the sha256 of JOB/outputs/MANIFEST.json, or 0 and
	   "". */
	char inputs[KN_KUBE_TERMINATION_MAX + 1];
	int outputs_files;
	char outputs_manifest_sha256[65];
};

/*
 * Task rank's state from the attempt's Job (NULL: the API no longer has
 * it) and its pods (a JSON array of Pod objects of this Job). stopping:
 * kiln has deleted the Job, so pods that are gone ended by that. Pure.
 */
void kn_kube_task_state(json_t *job, json_t *pods, int rank, bool stopping,
			struct kn_kube_task_view *out);

/*
 * The executor the server drives, with its worker started: *out's
 * instance owns the worker, which also keeps the deployments below in
 * step, and its release stops it (an API call in flight is cut
 * within a second). cfg is copied, but cfg->products is taken, freed with
 * the executor (or here on failure). When the server's environment holds
 * store credentials (AZURE_STORAGE_CONNECTION_STRING,
 * AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN), the
 * worker first writes them to the Secret KN_KUBE_STORE_SECRET (POST, or
 * PUT when it exists), which the pods' shims read through envFrom. Its
 * check op: whether a spec can run there, that is renders (image, name,
 * GPU model).
 */
int kn_kube_executor_new(const struct kn_kube_exec_config *cfg,
			 struct kn_executor **out, struct kn_error *err);

/* ---- deployments under the Kubernetes executor (deployments.c) ---- */

/*
 * A deployment is an apps/v1 Deployment and a Service, both named as
 * kn_kube_render_deployment names them, labelled KN_KUBE_LABEL_MANAGED
 * kiln and KN_KUBE_LABEL_DEPLOYMENT; the Deployment also carries
 * KN_KUBE_LABEL_GENERATION, the kiln generation it was last written at
 * (only on its metadata: a scale must not change the pod template).
 * Kubernetes runs the rollout (RollingUpdate, maxUnavailable 0) and the
 * probes. The executor's worker makes every API call, about once a
 * second: the loop thread only says what it wants and reads back the
 * status.
 */
#define KN_KUBE_LABEL_DEPLOYMENT "kiln.dev/deployment"
#define KN_KUBE_LABEL_GENERATION "kiln.dev/generation"
/* The cluster's DNS domain (kubelet's --cluster-domain default). */
#define KN_KUBE_CLUSTER_DOMAIN "cluster.local"

/*
 * The Deployment and Service of spec with `replicas` replicas at kiln
 * generation `generation`: kn_kube_render_deployment's documents with
 * the image from cfg, kiln's labels and the kiln.dev/name annotation.
 */
int kn_kube_deploy_manifests(const struct kn_kube_exec_config *cfg,
			     const struct kn_deployment_spec *spec,
			     int replicas, int64_t generation, json_t **out,
			     struct kn_error *err);

/*
 * Want deployment spec->job.name as spec with `replicas` at generation;
 * spec_changed: the spec itself changed at this generation (the worker
 * PUTs the Deployment) rather than only the count (it PATCHes
 * spec.replicas). ex is the Kubernetes executor whose worker keeps the
 * deployments (the functions below take it too, and do nothing, or
 * answer NULL or -EINVAL, for another executor). Renders with ex's
 * configuration; errors as kn_kube_render_deployment's. Loop thread.
 */
int kn_kube_deploy_set(struct kn_executor *ex,
		       const struct kn_deployment_spec *spec, int replicas,
		       int64_t generation, bool spec_changed,
		       struct kn_error *err);
/* Whether spec renders with ex's configuration. */
int kn_kube_deploy_check(struct kn_executor *ex,
			 const struct kn_deployment_spec *spec,
			 struct kn_error *err);
/* The pod template annotation `kubectl rollout restart` sets. */
#define KN_KUBE_RESTARTED_AT "kubectl.kubernetes.io/restartedAt"
/*
 * Restart deployment name's pods as `kubectl rollout restart` does: the
 * worker's next turn merge-PATCHes the pod template's
 * KN_KUBE_RESTARTED_AT annotation to at_ms (RFC 3339, UTC), and the
 * Deployment controller rolls the change out. -ENOENT when name is not
 * wanted. Loop thread.
 */
int kn_kube_deploy_restart(struct kn_executor *ex, const char *name,
			   int64_t at_ms, struct kn_error *err);
/* Delete deployment name's Deployment and Service. Loop thread. */
void kn_kube_deploy_remove(struct kn_executor *ex, const char *name);
/*
 * Every deployment the server keeps has been set: Deployments labelled
 * as kiln's whose name is not among them are deleted (one the server
 * was told to delete before it stopped).
 */
void kn_kube_deploy_loaded(struct kn_executor *ex);
/*
 * The status of deployment name as the worker last saw it (a new
 * object: kn_kube_deployment_view's fields plus "deployment",
 * "namespace", "service" (the cluster DNS name and port), "synced" and
 * "error"), or NULL when name is not wanted.
 */
json_t *kn_kube_deploy_status(struct kn_executor *ex, const char *name);

/*
 * Pure: a Deployment (NULL: not created yet) and its pods (a JSON array)
 * as kiln's view: {"desired", "ready", "updated", "available",
 * "rollout": "pending" | "progressing" | "complete" | "failed",
 * "reason", "message", "conditions": [{type, status, reason, message}],
 * "pods": [{name, node, phase, ready, restarts, reason}] by name}.
 */
json_t *kn_kube_deployment_view(json_t *deployment, json_t *pods);

#endif
