/*
 * kiln server: start-up, wiring and shutdown.
 *
 * Order matters at start-up: the home directory and the database first
 * (nothing is accepted without a place to keep it), then the admin token,
 * the devices and the nodes, then recovery of queued and running jobs,
 * and only then the listener and server.url — so a client that can see the
 * URL talks to a server that already knows every job it knew before.
 */
#include "internal.h"
#include "service.h"
#include "executors.h"

#include "ckpt/ckpt.h"
#include "kube/kube.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void kn_server_config_init(struct kn_server_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->listen_host = "127.0.0.1";
	cfg->listen_port = 7070;
	cfg->kill_grace_ms = 10000;
	cfg->log_max_bytes = KN_LOG_MAX_BYTES;
	cfg->scrape_interval_ms = 15000;
	cfg->scrape_local = true;
	cfg->health_interval_ms = 5 * 60 * 1000;
	cfg->usage_interval_ms = 10000;
	cfg->health_root = "/";
	cfg->executor = "local";
	cfg->slurm_shards_per_gpu = 100;
	cfg->kube_poll_ms = KN_KUBE_POLL_DEFAULT_MS;
	cfg->policy = "kiln";
	cfg->backup_keep = 7;
	cfg->cgroup_root = KN_CGROUP_ROOT;
	cfg->cgroup_parent = "kiln";
	cfg->pids_max = KN_CGROUP_PIDS_DEFAULT;
	cfg->default_task_cpu_milli = 100;
	cfg->default_task_memory = (int64_t)1 << 30;
	cfg->fair_share_half_life_ms = 24LL * 3600 * 1000;
	cfg->max_queued_jobs = 1000;
	cfg->max_tasks = 10000;
	cfg->max_deployments = 100;
	cfg->max_gateway_keys = 1000;
	cfg->max_conns = KN_HTTP_MAX_CONNS;
	cfg->max_conns_per_client = KN_HTTP_MAX_CONNS_PER_CLIENT;
	cfg->head_timeout_ms = KN_HTTP_HEAD_TIMEOUT_MS;
	cfg->body_idle_ms = KN_HTTP_BODY_IDLE_MS;
	cfg->max_follows_per_token = 32;
	cfg->upload_max_open = 8;
	cfg->upload_max_staged = 16LL << 30;
	cfg->upload_idle_ms = 5 * 60 * 1000;
	cfg->staging_reserve_pct = 5;
}

static void on_stop(void *arg)
{
	struct server *s = arg;
	kn_log(KN_LOG_INFO, "stopping; running tasks keep running and are "
	       "re-adopted by the next start");
	kn_loop_stop(s->loop);
}

static int64_t mem_total_bytes(void)
{
	char *text = NULL, *p;
	long long kb = 0;

	if (kn_read_file("/proc/meminfo", 65536, &text, NULL) < 0)
		return 0;
	p = strstr(text, "MemTotal:");
	if (p)
		sscanf(p + 9, "%lld", &kb);
	free(text);
	return kb * 1024;
}

/*
 * The MIG table, read only when some device is in MIG mode: a server
 * without one must not depend on a data file it never uses.
 */
static int load_mig(struct server *s, struct kn_error *err)
{
	const char *file = s->cfg.mig_profiles;
	char *text = NULL;
	size_t len = 0;
	int rc;

	rc = kn_read_file(file, 1 << 20, &text, &len);
	if (rc < 0)
		return kn_errorf(err, KN_EIO, "mig-profiles",
				 "cannot read MIG profiles %s: %s (give one "
				 "with --mig-profiles)",
				 file, strerror(-rc));
	rc = kn_mig_parse(text, len, file, &s->mig, err);
	free(text);
	return rc;
}

/* Each device in MIG mode gets its model's geometry, or start-up fails. */
static int setup_mig(struct server *s, struct kn_error *err)
{
	bool any = false;
	int rc = 0;

	for (size_t n = 0; n < s->cluster.n_nodes; n++)
		for (size_t i = 0; i < s->nodes[n].devices.n; i++)
			any |= s->nodes[n].devices.devices[i].mig;
	if (!any && !s->cfg.mig_profiles)
		return 0;
	rc = load_mig(s, err);
	for (size_t n = 0; rc == 0 && n < s->cluster.n_nodes; n++) {
		struct kn_sched_node *sn = &s->cluster.nodes[n];

		for (size_t i = 0; rc == 0 && i < s->nodes[n].devices.n; i++) {
			const struct kn_device_info *d =
				&s->nodes[n].devices.devices[i];

			if (!d->mig)
				continue;
			sn->devices[i].mig = kn_mig_find(s->mig, d->model);
			if (!sn->devices[i].mig)
				rc = kn_errorf(err, KN_EINVAL, "gpus",
					       "GPU %d (%s) is in MIG mode but "
					       "%s has no MIG profiles for %s",
					       d->index, d->model,
					       s->cfg.mig_profiles,
					       d->model);
		}
	}
	return rc;
}

/*
 * Labels "zone=1,fault_domain=0" (sep ',') or "zone=1 fault_domain=0"
 * (sep ' ') into node n's labels, which placement (selectors, affinity,
 * spread) and deployments (zone) read. flag names the option in errors.
 */
int setup_labels(struct server *s, size_t n, const char *text,
		 const char *sep, const char *flag, struct kn_error *err)
{
	struct server_node *node = &s->nodes[n];
	char *item, *save = NULL;
	size_t count = 1;

	if (!text || !*text)
		return 0;
	node->labels_text = kn_xstrdup(text);
	for (const char *p = node->labels_text; *p; p++)
		count += strchr(sep, *p) != NULL;
	node->labels = kn_xcalloc(count, sizeof(*node->labels));
	count = 0;
	for (item = strtok_r(node->labels_text, sep, &save); item;
	     item = strtok_r(NULL, sep, &save)) {
		char *eq = strchr(item, '=');

		if (!eq || eq == item)
			return kn_errorf(err, KN_EINVAL, "node_labels",
					 "%s: \"%s\" is not KEY=VALUE "
					 "(e.g. zone=1 or fault_domain=0)",
					 flag, item);
		*eq = '\0';
		node->labels[count].key = item;
		node->labels[count++].value = eq + 1;
	}
	s->cluster.nodes[n].labels = node->labels;
	s->cluster.nodes[n].n_labels = count;
	return 0;
}

/* Node n's scheduler view of its devices, this machine's CPUs and memory. */
void setup_sched_node(struct server *s, size_t n)
{
	struct server_node *node = &s->nodes[n];
	struct kn_sched_node *sn = &s->cluster.nodes[n];

	sn->name = node->name;
	sn->schedulable = true;
	sn->cpu_milli_total = (int)sysconf(_SC_NPROCESSORS_ONLN) * 1000;
	sn->memory_total = mem_total_bytes();
	sn->n_devices = node->devices.n;
	sn->devices = kn_xcalloc(node->devices.n ? node->devices.n : 1,
				 sizeof(*sn->devices));
	for (size_t i = 0; i < node->devices.n; i++) {
		sn->devices[i].index = node->devices.devices[i].index;
		sn->devices[i].model = node->devices.devices[i].model;
		sn->devices[i].memory_bytes =
			node->devices.devices[i].memory_bytes;
	}
}

/*
 * --sim-node "NAME GPUS [KEY=VALUE ...]": node n's name, simulated
 * devices and labels.
 */
static int setup_sim_node(struct server *s, size_t n, const char *text,
			  struct kn_error *err)
{
	struct server_node *node = &s->nodes[n];
	char *copy = kn_xstrdup(text), *save = NULL, *name, *gpus, *rest = NULL;
	size_t len = strlen(copy);
	int rc;

	name = strtok_r(copy, " \t", &save);
	gpus = name ? strtok_r(NULL, " \t", &save) : NULL;
	/* The labels: what follows the GPUS field (strtok_r's save pointer
	   is not to be read). */
	if (gpus && gpus + strlen(gpus) < copy + len)
		rest = gpus + strlen(gpus) + 1;
	if (!gpus) {
		rc = kn_errorf(err, KN_EINVAL, "sim_node",
			       "--sim-node \"%s\": want \"NAME GPUS "
			       "[KEY=VALUE ...]\", e.g. \"n1 2xH100-80GB "
			       "zone=a\"",
			       text);
		goto out;
	}
	if (strlen(name) >= sizeof(node->name)) {
		rc = kn_errorf(err, KN_EINVAL, "sim_node",
			       "--sim-node: name \"%s\" is longer than %zu "
			       "characters",
			       name, sizeof(node->name) - 1);
		goto out;
	}
	if (nodes_find(s, name) >= 0) {
		rc = kn_errorf(err, KN_EINVAL, "sim_node",
			       "--sim-node: node %s is given twice", name);
		goto out;
	}
	rc = kn_devices_simulated(gpus, &node->devices, err);
	if (rc < 0) {
		char why[sizeof(err->message)];

		kn_strlcpy(why, err->message, sizeof(why));
		rc = kn_errorf(err, KN_EINVAL, "sim_node", "--sim-node %s: %s",
			       name, why);
		goto out;
	}
	kn_strlcpy(node->name, name, sizeof(node->name));
	setup_sched_node(s, n);
	rc = setup_labels(s, n, rest, " \t", "--sim-node", err);
out:
	free(copy);
	return rc;
}

/*
 * The local node's labels: --node-labels, then sku= from --node-sku (or
 * --health-sku) and pricing= from --node-pricing, which the cost ledger
 * prices the node by.
 */
static int setup_local_labels(struct server *s, struct kn_error *err)
{
	const char *sku = s->cfg.node_sku ? s->cfg.node_sku : s->cfg.health_sku;
	char *text = kn_asprintf(
		"%s%s%s%s%s", s->cfg.node_labels ? s->cfg.node_labels : "",
		sku ? ",sku=" : "", sku ? sku : "",
		s->cfg.node_pricing ? ",pricing=" : "",
		s->cfg.node_pricing ? s->cfg.node_pricing : "");
	int rc = setup_labels(s, 0, text[0] == ',' ? text + 1 : text, ",",
			      "--node-labels", err);

	free(text);
	return rc;
}

/* The local node: its devices (--gpus or NVML), name and labels. */
static int setup_local_node(struct server *s, struct kn_error *err)
{
	struct server_node *node = &s->nodes[0];
	char host[64] = "local";
	int rc;

	if (s->cfg.gpus)
		rc = kn_devices_simulated(s->cfg.gpus, &node->devices, err);
	else
		rc = kn_devices_discover(&node->devices, err);
	if (rc < 0)
		return rc;
	if (s->cfg.node_name)
		kn_strlcpy(node->name, s->cfg.node_name, sizeof(node->name));
	else if (gethostname(host, sizeof(host)) == 0) {
		host[sizeof(host) - 1] = '\0';
		*strchrnul(host, '.') = '\0';
		kn_strlcpy(node->name, host, sizeof(node->name));
	} else {
		kn_strlcpy(node->name, "local", sizeof(node->name));
	}
	setup_sched_node(s, 0);
	return setup_local_labels(s, err);
}

static int setup_nodes(struct server *s, struct kn_error *err)
{
	struct kn_node_row *rows = NULL;
	size_t n_rows = 0, n = s->cfg.n_sim_nodes ? s->cfg.n_sim_nodes : 1;

	/* Pools bring their nodes (pools_start), in place of the local one. */
	if (s->cfg.n_pools && !s->cfg.n_sim_nodes)
		n = 0;
	int rc = 0;

	s->nodes = kn_xcalloc(n, sizeof(*s->nodes));
	s->cluster.nodes = kn_xcalloc(n, sizeof(*s->cluster.nodes));
	if (!s->cfg.n_sim_nodes && n) {
		s->cluster.n_nodes = 1;
		rc = setup_local_node(s, err);
	}
	for (size_t i = 0; rc == 0 && i < s->cfg.n_sim_nodes; i++) {
		/* Counted as it goes: set-up and release see the ones made. */
		s->cluster.n_nodes = i + 1;
		rc = setup_sim_node(s, i, s->cfg.sim_nodes[i], err);
	}
	if (rc == 0)
		rc = setup_mig(s, err);
	if (rc == 0)
		rc = kn_store_node_list(s->store, &rows, &n_rows, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < s->cluster.n_nodes; i++) {
		struct server_node *node = &s->nodes[i];

		kn_strlcpy(node->state, "ready", sizeof(node->state));
		/* A cordon or drain outlives a restart. */
		for (size_t k = 0; k < n_rows; k++)
			if (!strcmp(rows[k].name, node->name)) {
				kn_strlcpy(node->state, rows[k].state,
					   sizeof(node->state));
				kn_strlcpy(node->reason,
					   rows[k].reason ? rows[k].reason : "",
					   sizeof(node->reason));
			}
		s->cluster.nodes[i].schedulable =
			strcmp(node->state, "ready") == 0;
		rc = nodes_save(s, i, err);
		if (rc < 0)
			break;
		kn_log(KN_LOG_INFO, "node %s: %zu %s device%s (%s)", node->name,
		       node->devices.n,
		       node->devices.simulated ? "simulated" : "GPU",
		       node->devices.n == 1 ? "" : "s", node->devices.source);
	}
	kn_node_list_free(rows, n_rows);
	return rc;
}

/*
 * The services in start order: within a phase, each after those it
 * needs (cost prices the pools' nodes; on a job's end, workflows hear it
 * before re-validation). A request tries their routes in the same order,
 * the job core's first.
 */
const struct service *const kn_services[] = {
	&core_api_service, &slurm_nodes_service, &pools_service,
	&cost_service,	   &backup_service,	 &deploy_service,
	&models_service,   &workflows_service,	 &reval_service,
	&metrics_service,  &console_service,	 &devenv_service,
	&sessions_service, &portfwd_service,	 NULL,
};

_Static_assert(KN_LEN(kn_services) <= SERVICES_MAX + 1,
	       "more services than SERVICES_MAX slots");

/* The slot of v in s->service_states: v's index in kn_services. */
static void **service_slot(struct server *s, const struct service *v)
{
	size_t i = 0;

	while (kn_services[i] != v)
		i++;
	return &s->service_states[i];
}

void *service_state(struct server *core, const struct service *v)
{
	return *service_slot(core, v);
}

void service_state_set(struct server *core, const struct service *v,
		       void *state)
{
	*service_slot(core, v) = state;
}

bool route_param_id(const char *param, int64_t *id)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(param, &end, 10);
	if (errno || end == param || *end || v <= 0)
		return false;
	*id = v;
	return true;
}

bool route_id_or_reply(struct kn_http_req *req, const char *param,
		       const char *what, int64_t *id)
{
	struct kn_error err;

	if (route_param_id(param, id))
		return true;
	kn_errorf(&err, KN_EINVAL, "id", "not a %s id: \"%s\"", what, param);
	kn_http_reply_error(req, &err);
	return false;
}

void route_reply(struct kn_http_req *req, int status, json_t *o,
		 const struct kn_error *err)
{
	if (o)
		kn_http_reply_json(req, status, o);
	else
		kn_http_reply_error(req, err);
}

json_t *rows_json(const void *rows, size_t n, size_t size,
		  row_json_fn *row_json)
{
	json_t *list = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(list,
				      row_json((const char *)rows + i * size));
	return list;
}

/* Register every service's job hooks, in table order. */
static void services_hook(struct server *s)
{
	for (size_t i = 0; kn_services[i]; i++)
		if (kn_services[i]->hooks)
			job_hooks_add(s->hooks, kn_services[i]->hooks, s);
}

static int services_start(struct server *s, enum service_phase phase,
			  struct kn_error *err)
{
	for (size_t i = 0; kn_services[i]; i++) {
		const struct service *v = kn_services[i];
		int rc;

		if (v->phase != phase || !v->start)
			continue;
		rc = v->start(s, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void services_run(struct server *s)
{
	for (size_t i = 0; kn_services[i]; i++)
		if (kn_services[i]->run)
			kn_services[i]->run(s);
}

void services_alias_moved(struct server *s, const char *model,
			  const char *alias)
{
	for (size_t i = 0; kn_services[i]; i++)
		if (kn_services[i]->alias_moved)
			kn_services[i]->alias_moved(s, model, alias);
}

/* In reverse order; every service's, started or not. A stopped
   service's slot is emptied here, so none can be left pointing at the
   state its stop freed. */
static void services_stop(struct server *s)
{
	size_t n = 0;

	while (kn_services[n])
		n++;
	while (n-- > 0) {
		if (kn_services[n]->stop)
			kn_services[n]->stop(s);
		s->service_states[n] = NULL;
	}
}

static void server_release(struct server *s)
{
	s->closing = true;
	/* Submits waiting on the group's commit get it, and their answer. */
	if (s->store)
		submit_group_flush(s);
	kn_timer_free(s->group_timer);
	s->group_timer = NULL;
	logs_free_all(s);
	feed_free(s->feed);
	s->feed = NULL;
	events_free(s->events);
	/* Unfinished uploads are redone by the next start: they are idempotent. */
	kn_workers_free(s->workers);
	usage_free(s);
	/* Work in progress ends first; the requests waiting on it are
	   closed with the server. */
	kn_workers_free(s->request_workers);
	/* After the pool: a scrape or health run may still hold their state. */
	monitor_free(s->monitor);
	health_free(s->health);
	services_stop(s);
	jobs_free_all(s);
	fair_release(s);
	kn_executor_free(s->exec);
	free(s->blob_url);
	blobstores_free(s);
	kn_http_server_free(s->http);
	api_tls_stop(s);
	kn_timer_free(s->tick_timer);
	kn_timer_free(s->poll_timer);
	kn_store_free(s->store);
	kn_loop_free(s->loop);
	for (size_t i = 0; i < s->cluster.n_nodes; i++) {
		KN_FREE_ALL(s->cluster.nodes[i].devices, s->nodes[i].labels,
			    s->nodes[i].labels_text);
		kn_device_set_release(&s->nodes[i].devices);
	}
	KN_FREE_ALL(s->cluster.nodes, s->nodes);
	kn_mig_free(s->mig);
	workload_release(s);
	isolation_stop(s);
	job_hooks_free(s->hooks);
	free(s->home);
}

/* Create $KILN_HOME (ours alone) and its tasks folder, open the store. */
static int home_open(struct server *s, struct kn_error *err)
{
	struct stat home_st;
	char *path;
	int rc;

	rc = kn_mkdir_p(s->home, 0700);
	if (rc < 0)
		return kn_errorf(err, KN_EIO, "home", "cannot create %s: %s",
				 s->home, strerror(-rc));
	/* It holds the token and every task's files: ours alone, but for
	   the search permission (o+x) the Slurm executor gives a task's
	   user to reach its own directory (exec/slurm.c), which a restart
	   under Slurm keeps. */
	if (stat(s->home, &home_st) < 0 ||
	    chmod(s->home, 0700 | (s->exec->ops->home_searchable
					   ? home_st.st_mode & S_IXOTH
					   : 0)) < 0)
		return kn_errorf(err, KN_EIO, "home",
				 "cannot restrict %s to 0700: %s", s->home,
				 strerror(errno));
	path = kn_asprintf("%s/tasks", s->home);
	kn_mkdir_p(path, 0700);
	free(path);
	path = kn_asprintf("%s/kiln.db", s->home);
	rc = kn_store_open(path, &s->store, err);
	free(path);
	return rc;
}

/*
 * The loop and what runs on it: the worker pools, the default checkpoint
 * store (probed), the job core's timers and signals, the event feed.
 */
static int loop_setup(struct server *s, struct kn_error *err)
{
	struct kn_blob_store *probe = NULL;
	int rc;

	/* Before any thread: it sets the environment shims inherit. */
	rc = blobstores_init(s, err);
	/* A bad URL or missing credentials: say so now, not per job. */
	if (rc == 0)
		rc = blobstores_open(s, NULL, "blob-store", NULL, &probe, err);
	kn_blob_store_free(probe);
	if (rc < 0)
		return rc;
	s->loop = kn_loop_new();
	if (!s->loop)
		return kn_errorf(err, KN_EIO, NULL,
				 "cannot create the event loop");
	s->workers = kn_workers_new(s->loop, 2);
	s->request_workers = kn_workers_new(s->loop, 2);
	s->tick_timer = kn_timer_new(s->loop, jobs_tick, s);
	s->poll_timer = kn_timer_new(s->loop, jobs_poll, s);
	/* Writes to a client that went away must not kill the server. */
	signal(SIGPIPE, SIG_IGN);
	if (kn_loop_on_signal(s->loop, SIGCHLD, jobs_on_sigchld, s) < 0 ||
	    kn_loop_on_signal(s->loop, SIGTERM, on_stop, s) < 0 ||
	    kn_loop_on_signal(s->loop, SIGINT, on_stop, s) < 0)
		return kn_errorf(err, KN_EIO, NULL, "cannot watch signals");
	s->feed = feed_new(s);
	return 0;
}

/* --policy, and the defaults every local task is counted with. */
static int policy_choose(struct server *s, struct kn_error *err)
{
	const struct kn_server_config *cfg = &s->cfg;
	struct kn_buf names;
	int rc;

	s->defaults.cpu_milli = (int)cfg->default_task_cpu_milli;
	s->defaults.memory_bytes = cfg->default_task_memory;
	s->policy = kn_pack_policy_find(cfg->policy ? cfg->policy : "");
	if (s->policy)
		return 0;
	kn_buf_init(&names, SIZE_MAX);
	for (size_t i = 0; kn_pack_policies[i]; i++)
		kn_buf_printf(&names, "%s%s", i ? ", " : "",
			      kn_pack_policies[i]->name);
	rc = kn_errorf(err, KN_EINVAL, "policy",
		       "--policy: \"%s\" is not one of %s",
		       cfg->policy ? cfg->policy : "", names.data);
	kn_buf_release(&names);
	return rc;
}

struct kn_store *core_store(struct server *s)
{
	return s->store;
}

int core_store_end(struct kn_store *st, int rc, struct kn_error *err)
{
	if (rc != 0) {
		kn_store_rollback(st);
		return rc;
	}
	return kn_store_commit(st, err);
}

struct kn_loop *core_loop(struct server *s)
{
	return s->loop;
}

struct kn_workers *core_workers(struct server *s)
{
	return s->workers;
}

struct kn_executor *core_executor(struct server *s)
{
	return s->exec;
}

struct kn_workers *core_request_workers(struct server *s)
{
	return s->request_workers;
}

const struct job_hooks *core_hooks(const struct server *s)
{
	return s->hooks;
}

const struct kn_server_config *core_config(const struct server *s)
{
	return &s->cfg;
}

const char *core_home(const struct server *s)
{
	return s->home;
}

const char *core_blob_url(const struct server *s)
{
	return s->blob_url;
}

bool core_closing(const struct server *s)
{
	return s->closing;
}

const struct kn_mig_table *core_mig(const struct server *s)
{
	return s->mig;
}

/* Each service's own options, in table order. */
static int services_config_check(struct server *s, struct kn_error *err)
{
	for (size_t i = 0; kn_services[i]; i++) {
		int rc;

		if (!kn_services[i]->config_check)
			continue;
		rc = kn_services[i]->config_check(&s->cfg, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Before any service starts: the services that own jobs answer the job
   core through their hooks from the first job's end on. */
static int hooks_step(struct server *s, struct kn_error *err)
{
	(void)err;
	s->hooks = job_hooks_new();
	services_hook(s);
	return 0;
}

static int nodes_phase(struct server *s, struct kn_error *err)
{
	return services_start(s, SERVICE_PHASE_NODES, err);
}

static int loop_phase(struct server *s, struct kn_error *err)
{
	return services_start(s, SERVICE_PHASE_LOOP, err);
}

static int recovered_phase(struct server *s, struct kn_error *err)
{
	return services_start(s, SERVICE_PHASE_RECOVERED, err);
}

static int monitor_step(struct server *s, struct kn_error *err)
{
	return monitor_start(s, &s->monitor, err);
}

static int health_step(struct server *s, struct kn_error *err)
{
	return health_start(s, &s->health, err);
}

/* Once every service has started, before the first request. */
static int run_step(struct server *s, struct kn_error *err)
{
	(void)err;
	services_run(s);
	return 0;
}

static int events_step(struct server *s, struct kn_error *err)
{
	const struct kn_server_config *cfg = &s->cfg;

	if (!cfg->azure_events_url)
		return 0;
	return events_start(s, cfg->azure_events_url,
			    cfg->azure_vm_name ? cfg->azure_vm_name
					       : s->nodes[0].name,
			    &s->events, err);
}

/*
 * Start-up, in order (after the home's lock): each step may use what the
 * steps above it set up, and server_release undoes whatever ran. The
 * services start in their phases (service.h) between the steps their
 * phase names.
 */
static int (*const start_steps[])(struct server *s, struct kn_error *err) = {
	services_config_check,
	executors_create, /* s->exec, chosen by --executor */
	limits_start,
	policy_choose,
	hooks_step,
	home_open,        /* the store */
	audit_start,
	auth_bootstrap,
	setup_nodes,
	isolation_start,
	nodes_phase,
	loop_setup,       /* the loop, the workers, the event feed */
	workload_load,
	loop_phase,
	jobs_recover,
	recovered_phase,
	usage_start,
	monitor_step,
	health_step,
	run_step,
	events_step,
	api_tls_start,
};

/* The API on --listen, its URL in HOME/server.url; then the loop runs
   until a signal stops it. */
static int serve(struct server *s, char **path, char **url,
		 struct kn_error *err)
{
	const struct kn_server_config *cfg = &s->cfg;
	struct kn_http_limits limits = {
		.head_timeout_ms = cfg->head_timeout_ms,
		.body_idle_ms = cfg->body_idle_ms,
		.max_conns = cfg->max_conns,
		.max_conns_per_client = cfg->max_conns_per_client,
	};
	int rc, port = 0;

	rc = kn_http_server_new(s->loop, cfg->listen_host, cfg->listen_port,
				&limits, s->tls, api_handle, s, &s->http, &port,
				err);
	if (rc < 0)
		return rc;
	kn_http_server_set_admit(s->http, api_admit);
	*url = kn_asprintf("%s://%s:%d\n", s->tls ? "https" : "http",
			   cfg->listen_host, port);
	*path = kn_asprintf("%s/server.url", s->home);
	rc = kn_write_text_atomic(*path, *url, 0644, err);
	if (rc < 0)
		return rc;
	kn_log(KN_LOG_INFO, "kiln %s listening on %.*s (home %s)", KN_VERSION,
	       (int)strlen(*url) - 1, *url, s->home);
	kn_timer_arm(s->poll_timer, 500);
	/* Under systemd (Type=notify): started once the API answers. */
	kn_notify("READY=1");
	rc = kn_loop_run(s->loop);
	kn_notify("STOPPING=1");
	if (rc < 0)
		kn_errorf(err, KN_EIO, NULL, "event loop failed");
	unlink(*path);
	return rc;
}

int kn_server_run(const struct kn_server_config *cfg, struct kn_error *err)
{
	struct server s;
	char *path = NULL, *url = NULL;
	int rc = 0, lock_fd;

	memset(&s, 0, sizeof(s));
	s.cfg = *cfg;
	s.home = kn_xstrdup(cfg->home);
	/* Before anything in the home is read or changed: two servers on
	   one home would run each queued job twice and clear each other's
	   staged uploads. */
	lock_fd = kn_dir_lock(s.home, KN_SERVER_LOCK, "server", "KILN_HOME",
			      err);
	if (lock_fd < 0) {
		free(s.home);
		return lock_fd;
	}
	for (size_t i = 0; rc == 0 && i < KN_LEN(start_steps); i++)
		rc = start_steps[i](&s, err);
	if (rc == 0)
		rc = serve(&s, &path, &url, err);
	KN_FREE_ALL(path, url);
	server_release(&s);
	close(lock_fd);
	return rc;
}
