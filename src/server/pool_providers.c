/*
 * Where node pools' nodes come from (docs/capacity.md): the sim provider
 * (nodes in this process), the command provider (a user's script, run in
 * the background and polled) and the azure provider (a VM Scale Set, its
 * calls on a worker thread of the pool's own). The pools themselves and
 * the autoscaler are pools.c.
 */
#include "poolsvc.h"

#include "vmss/vmss.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* ---- the sim provider: nodes in this process ---- */

static int sim_scale_up(struct server *s, struct pool *p, int n,
			struct kn_error *err)
{
	for (int k = 0; k < n; k++) {
		char name[64];
		int rc;

		snprintf(name, sizeof(name), "%s-%d", p->spec.name, p->next_index);
		rc = pool_node_add(s, p, name, "ready", NULL, true, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int sim_delete(struct server *s, struct pool *p, const char *node,
		      struct kn_error *err)
{
	int i = nodes_find(s, node);

	(void)p;
	if (i < 0)
		return kn_errorf(err, KN_ENOTFOUND, "node", "node %s not found",
				 node);
	return pool_node_remove(s, (size_t)i, err);
}

const struct pool_provider_ops sim_provider = {
	.name = "sim",
	.scale_up = sim_scale_up,
	.delete_node = sim_delete,
};

/* ---- the command provider: a user's script ---- */

/*
 * Run cmd[0] with cmd[1..] in its own session, stdin from /dev/null, its
 * stdout, stderr and exit status going to files in dir (out, err, rc),
 * which the caller reads once rc is there: the loop never waits. extra
 * ("NAME=value", NULL-ended) is added to the server's environment.
 */
int pool_run_in_background(const char *dir, char *const *cmd,
			     char *const *extra, struct kn_error *err)
{
	static const char wrapper[] =
		"\"$0\" \"$@\" >\"$KILN_POOL_DIR/out\" 2>\"$KILN_POOL_DIR/err\"; "
		"echo $? >\"$KILN_POOL_DIR/rc.tmp\" && "
		"mv \"$KILN_POOL_DIR/rc.tmp\" \"$KILN_POOL_DIR/rc\"";
	char *argv[20], **env, *dir_env = kn_asprintf("KILN_POOL_DIR=%s", dir);
	size_t n = 0, k = 0;
	pid_t pid;
	int rc;

	kn_rm_rf(dir);
	rc = kn_mkdir_p(dir, 0700);
	if (rc < 0) {
		free(dir_env);
		return kn_errorf(err, KN_EIO, "pool", "cannot create %s: %s",
				 dir, strerror(-rc));
	}
	argv[k++] = "/bin/sh";
	argv[k++] = "-c";
	argv[k++] = (char *)wrapper;
	for (size_t i = 0; cmd[i] && k < 19; i++)
		argv[k++] = cmd[i];
	argv[k] = NULL;
	for (char **e = environ; *e; e++)
		n++;
	for (char *const *e = extra; *e; e++)
		n++;
	env = kn_xcalloc(n + 2, sizeof(*env));
	n = 0;
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "KILN_POOL_", 10) != 0 &&
		    strncmp(*e, "KILN_NODE=", 10) != 0)
			env[n++] = *e;
	for (char *const *e = extra; *e; e++)
		env[n++] = *e;
	env[n++] = dir_env;
	rc = kn_spawn_detached(&(struct kn_spawn){.path = "/bin/sh",
						  .argv = argv,
						  .envp = env},
			       &pid);
	KN_FREE_ALL(env, dir_env);
	if (rc != 0)
		return kn_errorf(err, KN_EIO, "pool", "cannot run %s: %s",
				 cmd[0], strerror(rc));
	return 0;
}

/* A background run's status, out and err's first line once rc is there:
   true then (out and errline malloc'd). */
bool pool_background_done(const char *dir, int *status, char **out,
			    char **errline)
{
	char *path = kn_asprintf("%s/rc", dir), *text = NULL;

	if (kn_read_file(path, 64, &text, NULL) < 0) {
		free(path);
		return false;
	}
	*status = -1;
	sscanf(text, "%d", status);
	KN_FREE_ALL(text, path);
	path = kn_asprintf("%s/out", dir);
	if (kn_read_file(path, 1 << 20, out, NULL) < 0)
		*out = kn_xstrdup("");
	free(path);
	path = kn_asprintf("%s/err", dir);
	if (kn_read_file(path, 1 << 16, errline, NULL) < 0)
		*errline = kn_xstrdup("");
	free(path);
	*strchrnul(*errline, '\n') = '\0';
	return true;
}

/* Run the pool's script as SCRIPT VERB POOL ARGS... for op. */
static int command_start(struct server *s, struct pool_op *op,
			 char *const *args, struct kn_error *err)
{
	struct pool *p = op->pool;
	char *cmd[16], *extra[4];
	size_t k = 0;
	int rc;

	op->dir = kn_asprintf("%s/pools/%s-%lld", core_home(s), p->spec.name,
			      (long long)pools_state(s)->next_op++);
	cmd[k++] = p->spec.command;
	for (size_t i = 0; args[i] && k < 15; i++)
		cmd[k++] = args[i];
	cmd[k] = NULL;
	extra[0] = kn_asprintf("KILN_POOL_SKU=%s", p->spec.sku);
	extra[1] = kn_asprintf("KILN_POOL_PRICING=%s",
			       p->spec.spot ? "spot" : "on_demand");
	extra[2] = kn_asprintf("KILN_POOL_GPUS=%s", p->spec.gpus);
	extra[3] = NULL;
	rc = pool_run_in_background(op->dir, cmd, extra, err);
	for (size_t i = 0; extra[i]; i++)
		free(extra[i]);
	if (rc < 0)
		return rc;
	op->next = pools_state(s)->ops;
	pools_state(s)->ops = op;
	return 0;
}

void pool_op_free(struct pool_op *op, bool remove)
{
	if (op->dir && remove)
		kn_rm_rf(op->dir);
	KN_FREE_ALL(op->dir, op);
}

/* SCRIPT scale-up POOL N NAME...: the names kiln will give the nodes. */
static int command_scale_up(struct server *s, struct pool *p, int n,
			    struct kn_error *err)
{
	struct pool_op *op = kn_xcalloc(1, sizeof(*op));
	char count[16], *args[16], names[8][64];
	int k = 0, rc;

	/* At most 8 a call: the rest comes next round. */
	if (n > 8)
		n = 8;
	snprintf(count, sizeof(count), "%d", n);
	args[k++] = "scale-up";
	args[k++] = p->spec.name;
	args[k++] = count;
	op->first = p->next_index;
	for (int i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "%s-%d", p->spec.name,
			 p->next_index++);
		args[k++] = names[i];
	}
	args[k] = NULL;
	op->pool = p;
	op->scale_up = true;
	op->n = n;
	rc = command_start(s, op, args, err);
	if (rc < 0) {
		pool_op_free(op, true);
		return rc;
	}
	p->provisioning += n;
	return 0;
}

/* SCRIPT delete POOL NODE; the node is cordoned until it answers. */
static int command_delete(struct server *s, struct pool *p, const char *node,
			  struct kn_error *err)
{
	struct pool_op *op = kn_xcalloc(1, sizeof(*op));
	char *args[4] = {"delete", p->spec.name, (char *)node, NULL};
	int rc;

	op->pool = p;
	kn_strlcpy(op->node, node, sizeof(op->node));
	rc = nodes_set_state(s, NULL, node, "cordoned", "being deleted", err);
	if (rc == 0)
		rc = command_start(s, op, args, err);
	if (rc < 0) {
		pool_op_free(op, true);
		return rc;
	}
	return 0;
}

const struct pool_provider_ops command_provider = {
	.name = "command",
	.scale_up = command_scale_up,
	.delete_node = command_delete,
};

/* A provider's call failed: the pool's last_error, the log, the audit. */
static void pool_failed(struct server *s, struct pool *p, bool scale_up,
			const char *why)
{
	char object[96];

	snprintf(object, sizeof(object), "pool/%s", p->spec.name);
	kn_log(KN_LOG_ERROR, "pool %s: %s", p->spec.name, why);
	kn_strlcpy(p->error, why, sizeof(p->error));
	p->error_at = kn_now_ms();
	core_audit(s, NULL, scale_up ? "pool.scale_up" : "node.remove", object,
		   "failed", why);
}

static void op_failed(struct server *s, struct pool_op *op, const char *why)
{
	pool_failed(s, op->pool, op->scale_up, why);
}

/* The names a scale-up's script says are up: {"nodes": [NAME, ...]}. */
static void scale_up_done(struct server *s, struct pool_op *op,
			  const char *out, char *why, size_t why_len)
{
	json_error_t jerr;
	json_t *doc = json_loads(out, 0, &jerr), *nodes, *name;
	size_t i;

	nodes = json_object_get(doc, "nodes");
	if (!json_is_array(nodes)) {
		snprintf(why, why_len,
			 "scale-up: %s printed no {\"nodes\": [...]}: %.80s",
			 op->pool->spec.command, doc ? "nodes missing" : jerr.text);
		goto out;
	}
	json_array_foreach(nodes, i, name) {
		const char *text = json_string_value(name);
		struct kn_error err;
		bool asked = false;
		int k;

		/* Only the names it was given: kiln owns its nodes' names. */
		for (k = 0; text && k < op->n; k++) {
			char want[64];

			snprintf(want, sizeof(want), "%s-%d", op->pool->spec.name,
				 op->first + k);
			asked |= !strcmp(want, text);
		}
		if (!asked || nodes_find(s, text) >= 0) {
			snprintf(why, why_len,
				 "scale-up: %s named node %.60s, which it was "
				 "not asked for",
				 op->pool->spec.command, text ? text : "(not a string)");
			continue;
		}
		if (pool_node_add(s, op->pool, text, "ready", NULL, true,
				  &err) < 0)
			snprintf(why, why_len, "adding node %s: %.160s", text,
				 err.message);
	}
out:
	json_decref(doc);
}

/* Settle the command provider's calls whose status is in; true when
   nodes came up. */
bool pool_ops_poll(struct server *s)
{
	struct pool_op **link = &pools_state(s)->ops;
	bool added = false;

	while (*link) {
		struct pool_op *op = *link;
		char *out = NULL, *errtext = NULL, why[KN_AUTOSCALE_WHY_LEN] = "";
		struct kn_error err;
		int status = -1;

		if (!pool_background_done(op->dir, &status, &out, &errtext)) {
			link = &op->next;
			continue;
		}
		*link = op->next;
		if (status != 0)
			snprintf(why, sizeof(why), "%s %s: %s exited %d: %.120s",
				 op->scale_up ? "scale-up" : "delete",
				 op->scale_up ? op->pool->spec.name : op->node,
				 op->pool->spec.command, status, errtext);
		else if (op->scale_up) {
			scale_up_done(s, op, out, why, sizeof(why));
			added = true;
		} else {
			int i = nodes_find(s, op->node);

			if (i >= 0 && pool_node_remove(s, (size_t)i, &err) < 0)
				snprintf(why, sizeof(why), "removing %s: %.160s",
					 op->node, err.message);
		}
		if (op->scale_up)
			op->pool->provisioning -= op->n;
		else if (status != 0 && nodes_find(s, op->node) >= 0) {
			/* Back in service; the next try waits a whole delay. */
			if (nodes_set_state(s, NULL, op->node, "ready", "",
					    &err) < 0)
				kn_log(KN_LOG_ERROR, "pool %s: %s",
				       op->pool->spec.name, err.message);
			pool_idle_from_now(s, op->node);
		}
		if (why[0])
			op_failed(s, op, why);
		KN_FREE_ALL(out, errtext);
		pool_op_free(op, true);
	}
	if (added)
		jobs_wake(s);
	return added;
}

/* ---- the azure provider: a VM Scale Set ---- */

/*
 * Calls go to the pool's own worker thread, one at a time in order, so
 * the event loop never waits on Azure and a delete never overtakes the
 * scale-up before it. After a failed scale-up, its nodes stay counted
 * as provisioning this long, so the autoscaler does not ask again at
 * once (a 403 would otherwise be retried twice a second).
 */
#define AZURE_COOLDOWN_MS (30 * 1000)

struct azure_pool {
	struct kn_vmss_client *client;
	struct kn_workers *worker;
	volatile int stop;
	/* The worker's alone: computer names handed to kiln as nodes. */
	char (*known)[64];
	size_t n_known;
	struct kn_timer *cooldown;
	struct pool *pool;
	int held; /* provisioning kept by the cooldown */
};

struct azure_call {
	struct server *s;
	struct pool *pool;
	bool scale_up;
	int n;             /* scale-up: nodes asked for */
	char node[64];     /* delete: the node */
	/* What the worker found. */
	struct kn_vmss_vm *joined;
	size_t n_joined;
	int rc;
	struct kn_error err;
};

void pool_azure_free(struct azure_pool *a)
{
	if (!a)
		return;
	/* Interrupts a call in flight; its done sees the server closing. */
	a->stop = 1;
	kn_workers_free(a->worker);
	kn_timer_free(a->cooldown);
	kn_vmss_client_free(a->client);
	KN_FREE_ALL(a->known, a);
}

static const char *env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* Make provider=azure's client (kn_pool_spec_parse checked its options). */
int pool_azure_open(struct pool *p, const char *text, struct kn_error *err)
{
	struct kn_vmss_config cfg = {0};
	const char *missing = NULL;
	bool sp;
	int rc;

	if (p->provider != &azure_provider)
		return 0;
	sp = p->spec.azure_identity &&
	     !strcmp(p->spec.azure_identity, "service-principal");
	cfg.id = p->spec.vmss;
	cfg.arm_url = p->spec.azure_arm_url;
	cfg.imds_url = p->spec.azure_imds_url;
	cfg.login_url = p->spec.azure_login_url;
	cfg.identity = sp ? KN_VMSS_SERVICE_PRINCIPAL : KN_VMSS_MANAGED_IDENTITY;
	cfg.client_id = p->spec.azure_client_id;
	if (sp) {
		cfg.tenant_id = env_nonempty("AZURE_TENANT_ID");
		if (!cfg.client_id)
			cfg.client_id = env_nonempty("AZURE_CLIENT_ID");
		cfg.client_secret = env_nonempty("AZURE_CLIENT_SECRET");
		missing = !cfg.tenant_id	 ? "AZURE_TENANT_ID"
			  : !cfg.client_id	 ? "AZURE_CLIENT_ID"
			  : !cfg.client_secret ? "AZURE_CLIENT_SECRET"
					       : NULL;
		if (missing)
			return kn_errorf(err, KN_EINVAL, "pool",
					 "--pool \"%s\": azure-identity: "
					 "service-principal needs $%s",
					 text, missing);
	}
	p->azure = kn_xcalloc(1, sizeof(*p->azure));
	p->azure->pool = p;
	rc = kn_vmss_client_new(&cfg, &p->azure->stop, &p->azure->client, err);
	if (rc < 0) {
		char why[sizeof(err->message)];

		kn_strlcpy(why, err->message, sizeof(why));
		return kn_errorf(err, KN_EINVAL, "pool", "--pool \"%s\": %s",
				 text, why);
	}
	return 0;
}

static bool azure_known(const struct azure_pool *a, const char *name)
{
	for (size_t i = 0; i < a->n_known; i++)
		if (!strcmp(a->known[i], name))
			return true;
	return false;
}

static void azure_know(struct azure_pool *a, const char *name)
{
	a->known = kn_xrealloc(a->known, (a->n_known + 1) * sizeof(*a->known));
	kn_strlcpy(a->known[a->n_known++], name, sizeof(a->known[0]));
}

static void azure_forget(struct azure_pool *a, const char *name)
{
	for (size_t i = 0; i < a->n_known; i++)
		if (!strcmp(a->known[i], name)) {
			a->known[i][0] = '\0';
			memmove(a->known[i], a->known[a->n_known - 1],
				sizeof(a->known[0]));
			a->n_known--;
			return;
		}
}

/* Hand the VMs that are up and not kiln's yet to call; count in *coming
   those Azure is still making. */
static void azure_take_new(struct azure_call *call,
			   const struct kn_vmss_vm *vms, size_t n, int *coming)
{
	struct azure_pool *a = call->pool->azure;

	for (size_t i = 0; i < n; i++) {
		if (azure_known(a, vms[i].computer_name))
			continue;
		if (!strcmp(vms[i].state, "Succeeded")) {
			call->joined = kn_xrealloc(call->joined,
						   (call->n_joined + 1) *
							   sizeof(*call->joined));
			call->joined[call->n_joined++] = vms[i];
			azure_know(a, vms[i].computer_name);
		} else if (coming && strcmp(vms[i].state, "Failed") != 0 &&
			   strcmp(vms[i].state, "Deleting") != 0) {
			(*coming)++;
		}
	}
}

/*
 * Scale-up: VMs already there and not kiln's count first (a scale-up of
 * an earlier run, or one made by hand); the capacity grows by the rest.
 */
static void azure_scale_up_work(struct azure_call *call)
{
	struct azure_pool *a = call->pool->azure;
	struct kn_vmss_vm *vms = NULL;
	size_t n = 0;
	int coming = 0, need;
	int64_t capacity = 0;

	call->rc = kn_vmss_list(a->client, &vms, &n, &call->err);
	if (call->rc < 0)
		return;
	azure_take_new(call, vms, n, &coming);
	free(vms);
	need = call->n - (int)call->n_joined - coming;
	if (need <= 0)
		return;
	call->rc = kn_vmss_capacity(a->client, &capacity, &call->err);
	if (call->rc == 0)
		call->rc = kn_vmss_set_capacity(a->client, capacity + need,
						&call->err);
	if (call->rc == 0)
		call->rc = kn_vmss_list(a->client, &vms, &n, &call->err);
	if (call->rc == 0) {
		azure_take_new(call, vms, n, NULL);
		free(vms);
	}
}

/* Delete: the instance whose computer name is the node's. */
static void azure_delete_work(struct azure_call *call)
{
	struct azure_pool *a = call->pool->azure;
	struct kn_vmss_vm *vms = NULL;
	size_t n = 0;

	call->rc = kn_vmss_list(a->client, &vms, &n, &call->err);
	for (size_t i = 0; call->rc == 0 && i < n; i++)
		if (!strcmp(vms[i].computer_name, call->node))
			call->rc = kn_vmss_delete_instance(
				a->client, vms[i].instance_id, &call->err);
	/* Not listed: gone already, nothing to delete. */
	if (call->rc == 0)
		azure_forget(a, call->node);
	free(vms);
}

static void azure_work(void *arg)
{
	struct azure_call *call = arg;

	if (call->scale_up)
		azure_scale_up_work(call);
	else
		azure_delete_work(call);
}

static void azure_cooldown_over(void *arg)
{
	struct azure_pool *a = arg;

	a->pool->provisioning -= a->held;
	a->held = 0;
}

static void azure_done(void *arg, bool ran)
{
	struct azure_call *call = arg;
	struct server *s = call->s;
	struct pool *p = call->pool;
	/* Cut to the pool's last_error by pool_failed. */
	char why[1024] = "";
	struct kn_error err;

	if (!ran || core_closing(s))
		goto out;
	if (call->scale_up) {
		int held = call->rc < 0 ? call->n - (int)call->n_joined : 0;

		p->provisioning -= call->n - (held > 0 ? held : 0);
		if (held > 0) {
			p->azure->held += held;
			kn_timer_arm(p->azure->cooldown, AZURE_COOLDOWN_MS);
		}
		for (size_t i = 0; i < call->n_joined; i++) {
			const char *name = call->joined[i].computer_name;

			if (nodes_find(s, name) >= 0) {
				snprintf(why, sizeof(why),
					 "VM %s: a node has its name already",
					 name);
				continue;
			}
			p->joining_zone = call->joined[i].zone[0]
						  ? call->joined[i].zone
						  : NULL;
			if (pool_node_add(s, p, name, "ready", NULL, true,
					  &err) < 0)
				snprintf(why, sizeof(why), "adding node %s: %.160s",
					 name, err.message);
			p->joining_zone = NULL;
		}
		if (call->n_joined)
			jobs_wake(s);
	} else {
		int i = nodes_find(s, call->node);

		if (call->rc == 0 && i >= 0 &&
		    pool_node_remove(s, (size_t)i, &err) < 0)
			snprintf(why, sizeof(why), "removing %s: %.160s",
				 call->node, err.message);
		if (call->rc < 0 && i >= 0) {
			/* Back in service; the next try waits a whole delay. */
			if (nodes_set_state(s, NULL, call->node, "ready", "",
					    &err) < 0)
				kn_log(KN_LOG_ERROR, "pool %s: %s", p->spec.name,
				       err.message);
			pool_idle_from_now(s, call->node);
		}
	}
	if (call->rc < 0)
		snprintf(why, sizeof(why), "%s %s: %s",
			 call->scale_up ? "scale-up" : "delete",
			 call->scale_up ? p->spec.name : call->node,
			 call->err.message);
	if (why[0])
		pool_failed(s, p, call->scale_up, why);
out:
	KN_FREE_ALL(call->joined, call);
}

static int azure_scale_up(struct server *s, struct pool *p, int n,
			  struct kn_error *err)
{
	struct azure_call *call = kn_xcalloc(1, sizeof(*call));

	(void)err;
	call->s = s;
	call->pool = p;
	call->scale_up = true;
	call->n = n;
	p->provisioning += n;
	kn_workers_submit(p->azure->worker, azure_work, azure_done, call);
	return 0;
}

/* The node is cordoned until Azure answers. */
static int azure_delete(struct server *s, struct pool *p, const char *node,
			struct kn_error *err)
{
	struct azure_call *call;
	int rc = nodes_set_state(s, NULL, node, "cordoned", "being deleted",
				 err);

	if (rc < 0)
		return rc;
	call = kn_xcalloc(1, sizeof(*call));
	call->s = s;
	call->pool = p;
	kn_strlcpy(call->node, node, sizeof(call->node));
	kn_workers_submit(p->azure->worker, azure_work, azure_done, call);
	return 0;
}

const struct pool_provider_ops azure_provider = {
	.name = "azure",
	.scale_up = azure_scale_up,
	.delete_node = azure_delete,
};

/* Each azure pool's worker, knowing the nodes the pool has now. */
void pool_azure_run(struct server *s)
{
	for (size_t i = 0; i < pools_state(s)->n; i++) {
		struct pool *p = &pools_state(s)->pool[i];

		if (!p->azure)
			continue;
		for (size_t n = 0; n < core_node_count(s); n++)
			if (pool_of_node(s, n) == p)
				azure_know(p->azure, core_node_name(s, n));
		p->azure->worker = kn_workers_new(core_loop(s), 1);
		p->azure->cooldown =
			kn_timer_new(core_loop(s), azure_cooldown_over, p->azure);
	}
}

