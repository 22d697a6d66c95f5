/*
 * Node states. A node is ready, cordoned (gets no new work), draining
 * (gets no new work and its preemptible jobs are evicted; the others run
 * to their end) or unhealthy (as cordoned, set by `kiln health --drain`). The state survives restarts: it is in the store, and a
 * starting server keeps what it finds there.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nodes_save(struct server *s, struct kn_error *err)
{
	struct kn_node_row row;
	struct kn_device_row *devs;
	json_t *labels = json_object();
	char *labels_text;
	int rc;

	for (size_t i = 0; i < s->node.n_labels; i++)
		json_object_set_new(labels, s->node.labels[i].key,
				    json_string(s->node.labels[i].value));
	labels_text = json_dumps(labels, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(labels);
	memset(&row, 0, sizeof(row));
	row.name = s->node_name;
	row.state = s->node_state;
	row.labels_json = labels_text;
	row.taints_json = "[]";
	row.cpu_milli = s->node.cpu_milli_total;
	row.memory_bytes = s->node.memory_total;
	row.simulated = s->devices.simulated;
	row.updated_at = kn_now_ms();
	row.reason = s->node_reason[0] ? s->node_reason : NULL;
	devs = kn_xcalloc(s->devices.n ? s->devices.n : 1, sizeof(*devs));
	for (size_t i = 0; i < s->devices.n; i++) {
		devs[i].node = s->node_name;
		devs[i].index = s->devices.devices[i].index;
		devs[i].uuid = s->devices.devices[i].uuid;
		devs[i].model = s->devices.devices[i].model;
		devs[i].memory_bytes = s->devices.devices[i].memory_bytes;
		devs[i].simulated = s->devices.simulated;
	}
	row.devices = devs;
	row.n_devices = s->devices.n;
	rc = kn_store_node_put(s->store, &row, err);
	free(devs);
	free(labels_text);
	return rc;
}

void nodes_evict_preemptible(struct server *s, const char *why)
{
	int64_t *ids;
	size_t n = 0, cap = 0;

	for (struct run *r = s->runs; r; r = r->next)
		cap++;
	ids = kn_xcalloc(cap ? cap : 1, sizeof(*ids));
	/* Collect first: eviction may change the list of runs. */
	for (struct run *r = s->runs; r; r = r->next)
		if (r->spec->preemptible && !r->stopping)
			ids[n++] = r->job_id;
	for (size_t i = 0; i < n; i++) {
		struct kn_error err;
		if (jobs_evict(s, NULL, ids[i], -1, why, &err) < 0)
			kn_log(KN_LOG_WARN, "evicting job %lld: %s",
			       (long long)ids[i], err.message);
	}
	free(ids);
}

int nodes_set_state(struct server *s, const struct caller *c,
		    const char *name, const char *state, const char *reason,
		    struct kn_error *err)
{
	char prev_state[sizeof(s->node_state)], prev_reason[sizeof(s->node_reason)];
	int rc;

	if (strcmp(name, s->node_name) != 0)
		return kn_errorf(err, KN_ENOTFOUND, "name", "node %s not found "
				 "(this server runs node %s)", name, s->node_name);
	memcpy(prev_state, s->node_state, sizeof(prev_state));
	memcpy(prev_reason, s->node_reason, sizeof(prev_reason));
	kn_strlcpy(s->node_state, state, sizeof(s->node_state));
	kn_strlcpy(s->node_reason, reason ? reason : "", sizeof(s->node_reason));
	s->node.schedulable = strcmp(state, "ready") == 0;
	rc = kn_store_begin(s->store, err);
	if (rc == 0)
		rc = nodes_save(s, err);
	if (rc == 0) {
		struct kn_audit a;
		char object[96];

		snprintf(object, sizeof(object), "node/%s", name);
		memset(&a, 0, sizeof(a));
		a.actor = c ? (char *)c->name : "system";
		a.role = c ? (char *)role_name(c->role) : "admin";
		a.action = !strcmp(state, "ready")       ? "node.uncordon"
			   : !strcmp(state, "draining")  ? "node.drain"
			   : !strcmp(state, "unhealthy") ? "node.health"
							 : "node.cordon";
		a.object = object;
		a.outcome = "ok";
		a.detail = (char *)reason;
		rc = kn_store_audit_insert(s->store, &a, err);
	}
	if (rc == 0)
		rc = kn_store_commit(s->store, err);
	if (rc < 0) {
		kn_store_rollback(s->store);
		memcpy(s->node_state, prev_state, sizeof(prev_state));
		memcpy(s->node_reason, prev_reason, sizeof(prev_reason));
		s->node.schedulable = strcmp(prev_state, "ready") == 0;
		return rc;
	}
	if (strcmp(prev_state, state) || strcmp(prev_reason, s->node_reason))
		feed_publish(s, "node.state",
			     json_pack("{s:s, s:s, s:o}", "node", name, "state",
				       state, "reason",
				       s->node_reason[0]
					       ? json_string(s->node_reason)
					       : json_null()));
	if (!strcmp(state, "draining"))
		nodes_evict_preemptible(s, reason && *reason ? reason
							      : "node drained");
	return 0;
}
