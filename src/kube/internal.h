/*
 * Between the executor's worker (batchjobs.c) and the deployments it
 * keeps in step (deployments.c): one thread makes every API call.
 */
#ifndef KILN_KUBE_INTERNAL_H
#define KILN_KUBE_INTERNAL_H

#include <stdbool.h>
#include <string.h>
#include <sys/types.h>

#include <jansson.h>

#include "kube/kube.h"
#include "ws/ws.h"

/* obj.a.b (or obj.a when b is NULL) as a string, or NULL. */
static inline const char *kube_str_at(json_t *obj, const char *a,
				      const char *b)
{
	json_t *v = json_object_get(obj, a);

	if (b)
		v = json_object_get(v, b);
	return json_string_value(v);
}

/* A container's environment variable: {"name": name, "value": value}. */
static inline json_t *kube_env_value(const char *name, const char *value)
{
	return json_pack("{s:s, s:s}", "name", name, "value", value);
}

/* The item of an API list whose metadata.name is name, or NULL. */
/* An Indexed Job's pod's index, set by the Job controller. */
#define KUBE_INDEX_ANNOTATION "batch.kubernetes.io/job-completion-index"

/* A variable the kubelet fills from the pod's own field at path. */
static inline json_t *kube_env_field(const char *name, const char *path)
{
	return json_pack("{s:s, s:{s:{s:s}}}", "name", name, "valueFrom",
			 "fieldRef", "fieldPath", path);
}

static inline json_t *kube_item_named(json_t *list, const char *name)
{
	json_t *item;
	size_t i;

	json_array_foreach(json_object_get(list, "items"), i, item) {
		const char *n = kube_str_at(item, "metadata", "name");
		if (n && !strcmp(n, name))
			return item;
	}
	return NULL;
}

/* The items of an API list whose label is value: a new array. */
static inline json_t *kube_items_labelled(json_t *list, const char *label,
					  const char *value)
{
	json_t *out = json_array(), *item;
	size_t i;

	json_array_foreach(json_object_get(list, "items"), i, item) {
		const char *v = json_string_value(json_object_get(
			json_object_get(json_object_get(item, "metadata"),
					"labels"),
			label));
		if (v && !strcmp(v, value))
			json_array_append(out, item);
	}
	return out;
}

/* The Kubernetes executor's state (batchjobs.c). */
/* ---- a task's state from the API's objects (taskstate.c) ---- */

/* The condition of type in obj's status.conditions when it is True. */
json_t *kube_condition_true(json_t *obj, const char *type);
/* The newest of pods (a JSON array) that is rank's: its completion
   index, or any pod for rank 0 of a Job that is not Indexed. */
json_t *kube_rank_pod(json_t *pods, int rank);
/* v says the task ended with exit_code, sig and reason. */
/* pods by completion index 0..n-1, the newest of each, NULL where none:
   one pass over the pods for a run of many elements. New array. */
json_t **kube_pods_by_index(json_t *pods, int n);
void kube_view_ended(struct kn_kube_task_view *v, int exit_code, int sig,
		     const char *reason);

struct kube_exec;
/* The deployments an executor keeps (deployments.c). */
struct kube_deploys;

/* ex's state, or NULL when ex is another executor. */
struct kube_exec *kube_exec_of(struct kn_executor *ex);
/* Wake the worker now (deployments changed). */
void kube_exec_wake(struct kube_exec *ex);
/* Its configuration, as the loop thread reads it. */
const struct kn_kube_exec_config *kube_exec_config(const struct kube_exec *ex);
struct kube_deploys *kube_exec_deploys(struct kube_exec *ex);

/* The executor's deployments (deployments.c): its ops' deployments. */
extern const struct kn_deploy_ops kube_deploy_ops;

/* ---- job arrays under the executor (indexed.c) ---- */

/* An attempt's manifests, in its directory; kube-submitted beside them
   once the API took them. */
#define KUBE_MANIFEST_FILE "kube-job.json"
/* An attempt's manifests into dir/KUBE_MANIFEST_FILE as they are
   submitted, for adopt to take up after a restart: 0 or the error,
   naming the file. */
int kube_manifests_write(const char *dir, json_t *docs,
			 struct kn_error *err);

struct kube_runs;
struct kube_runs *kube_runs_new(void);
void kube_runs_free(struct kube_runs *r);
/* Keep array element task (in task_dir) for the next flush, its own
   Job rendered now. */
int kube_runs_add(struct kube_runs *r, const struct kn_kube_exec_config *cfg,
		  const struct kn_kube_task *task, const char *task_dir,
		  struct kn_error *err);
/* A run's manifests (taken) in its first element's attempt directory
   dir, to submit; why: the run cannot be, and its elements end so. */
typedef void (*kube_run_track_fn)(void *ctx, const char *dir,
				  json_t *manifests, const char *why);
/* Every kept element, cut into runs, each an Indexed Job for track. */
void kube_runs_flush(struct kube_runs *r, kube_run_track_fn track, void *ctx);
/* The attempt directory of the run of task_dir's element: its own
   attempt directory unless it points to its run's first. New string. */
char *kube_run_dir_of(const char *task_dir);

struct kube_deploys *kube_deploys_new(void);
/* After the worker has stopped; NULL is a no-op. */
void kube_deploys_free(struct kube_deploys *d);
/*
 * One pass of the worker over the deployments: create, update, scale and
 * delete what differs from what the API has, and take each one's status.
 * No request when no deployment is wanted nor left to delete.
 */
void kube_deploy_turn(struct kube_deploys *deploys, struct kn_kube_client *c,
		      const char *ns, volatile const int *stop);

/* ---- WebSocket connections to the API server (wsconn.c) ---- */

struct kube_ws;

/* The credentials a client was made with. */
const struct kn_kube_auth *kube_client_auth(const struct kn_kube_client *c);

/*
 * Connect to auth's API server (TLS, token, client certificate as for
 * every kube call) and upgrade GET path to a WebSocket with one of
 * protocols: 0 with *out and the chosen subprotocol, or a negative errno
 * with err (KN_EPERM for a 401 or 403, KN_ENOTFOUND for a 404, with the
 * API's Status message). Blocking: a session's thread only.
 */
int kube_ws_open(const struct kn_kube_auth *auth, const char *path,
		 const char *protocols, struct kube_ws **out, char *chosen,
		 size_t cap, struct kn_error *err);
void kube_ws_close(struct kube_ws *c);
int kube_ws_fd(const struct kube_ws *c);
/* Bytes are held already (read with the handshake, or TLS's): read
   without polling. */
bool kube_ws_buffered(const struct kube_ws *c);
/* Raw bytes: the count, 0 at the end, a negative errno. */
ssize_t kube_ws_read(struct kube_ws *c, void *buf, size_t cap);
/* One masked frame of prefix then data: 0 or a negative errno. */
int kube_ws_send(struct kube_ws *c, enum kn_ws_opcode opcode,
		 const void *prefix, size_t prefix_len, const void *data,
		 size_t len);

/*
 * The session bridges an executor started and that have not ended yet.
 * Its release waits for them: a bridge still sending to the API server
 * when the process exits would use OpenSSL after its exit-time cleanup.
 */
struct kube_bridges;
struct kube_bridges *kube_bridges_new(void);
/*
 * End every bridge and wait up to wait_ms for them, then free bs. Bridges
 * still running then (one blocked connecting to the API server) are left
 * to the process's exit, and bs with them.
 */
void kube_bridges_free(struct kube_bridges *bs, int wait_ms);

/*
 * A session on, or a connection to a port of, the pod of rank in the
 * Job called job (session.c): a connected socket whose other end a
 * thread of its own, counted in bs, bridges to the API server's
 * pods/exec, pods/attach (port 0: the server's SESSION frame says which)
 * or pods/portforward. The descriptor (non-blocking), or a negative
 * errno with err.
 */
int kube_session_start(struct kube_bridges *bs,
		       const struct kn_kube_auth *auth, const char *ns,
		       const char *job, int rank, int port,
		       struct kn_error *err);

#endif
