/*
 * Node pools' HTTP handlers (docs/capacity.md): the pools with their
 * nodes and last decisions, and rolling maintenance of a pool's nodes.
 * The pools themselves are pools.c.
 */
#include "poolsvc.h"

#include <string.h>

static void pools_h_rolling_start(struct server *s, struct kn_http_req *req,
			   const struct caller *c, const char *param)
{
	struct pool *p = pools_pool_named(s, param);
	struct kn_error err;
	json_error_t jerr;
	size_t len;
	const char *text = kn_http_body(req, &len);
	json_t *body = json_loadb(text, len, 0, &jerr);
	const char *command =
		json_string_value(json_object_get(body, "command"));
	json_t *surge = json_object_get(body, "surge_timeout_s");

	if (!p) {
		kn_errorf(&err, KN_ENOTFOUND, "pool", "pool %s not found",
			  param);
		goto fail;
	}
	if (!command || !*command) {
		kn_errorf(&err, KN_EINVAL, "command",
			  "body must be {\"command\": \"PATCH COMMAND\"}");
		goto fail;
	}
	if (surge && (!json_is_number(surge) || json_number_value(surge) <= 0 ||
		      json_number_value(surge) > SURGE_TIMEOUT_MAX_S)) {
		kn_errorf(&err, KN_EINVAL, "surge_timeout_s",
			  "surge_timeout_s must be a number of seconds above 0 "
			  "and at most %d", SURGE_TIMEOUT_MAX_S);
		goto fail;
	}
	if (pools_rolling_start(s, p, c, command,
				surge ? (int64_t)(json_number_value(surge) *
						  1000.0)
				      : SURGE_TIMEOUT_DEFAULT_MS,
				&err) < 0)
		goto fail;
	json_decref(body);
	kn_http_reply_json(req, 202, json_pack("{s:o}", "rolling",
						pools_rolling_json(p->rolling)));
	return;
fail:
	json_decref(body);
	kn_http_reply_error(req, &err);
}

static void pools_h_rolling_get(struct server *s, struct kn_http_req *req,
			 const struct caller *c, const char *param)
{
	struct pool *p = pools_pool_named(s, param);
	struct kn_error err;

	(void)c;
	if (!p || !p->rolling) {
		kn_errorf(&err, KN_ENOTFOUND, "pool",
			  p ? "pool %s has had no rolling maintenance"
			    : "pool %s not found",
			  param);
		kn_http_reply_error(req, &err);
		return;
	}
	kn_http_reply_json(req, 200, json_pack("{s:o}", "rolling",
					       pools_rolling_json(p->rolling)));
}

static json_t *pool_json(struct server *s, const struct pool *p, int64_t now)
{
	json_t *nodes = json_array(), *zones = json_array();
	double price = pools_gpu_price(s, p);
	int current = 0;

	for (size_t i = 0; i < p->spec.n_zones; i++)
		json_array_append_new(zones, json_string(p->spec.zones[i]));
	for (size_t n = 0; n < core_node_count(s); n++) {
		const struct pool_member *m =
			pool_member_of(s, core_node_name(s, n));

		if (!m || m->pool != p)
			continue;
		current++;
		json_array_append_new(
			nodes,
			json_pack("{s:s, s:s, s:o}", "name", m->name, "state",
				  core_node_state(s, n), "idle_s",
				  m->idle_since
					  ? json_real((double)(now -
							       m->idle_since) /
						      1000.0)
					  : json_null()));
	}
	return json_pack(
		"{s:s, s:s, s:s, s:s, s:s, s:o, s:i, s:i, s:i, s:i, s:i, s:f, "
		"s:o, s:o, s:o, s:o, s:o}",
		"name", p->spec.name, "provider", p->provider->name, "sku", p->spec.sku,
		"gpus", p->spec.gpus, "pricing", p->spec.spot ? "spot" : "on_demand",
		"zones", zones, "min", p->spec.min, "max", p->spec.max, "current", current,
		"provisioning", p->provisioning, "desired",
		current + p->provisioning, "scale_down_delay_s",
		(double)p->spec.scale_down_delay_ms / 1000.0, "gpu_hour_usd",
		price >= 0 ? json_real(price) : json_null(), "last_decision",
		p->decision[0] ? json_pack("{s:s, s:I}", "why", p->decision,
					   "at_ms", (json_int_t)p->decision_at)
			       : json_null(),
		"rolling", p->rolling ? pools_rolling_json(p->rolling) : json_null(),
		"last_error",
		p->error[0] ? json_pack("{s:s, s:I}", "why", p->error, "at_ms",
					(json_int_t)p->error_at)
			    : json_null(),
		"nodes", nodes);
}

static void pools_h_list(struct server *s, struct kn_http_req *req,
		  const struct caller *c, const char *param)
{
	json_t *list = json_array();
	int64_t now = kn_now_ms();

	(void)c;
	(void)param;
	for (size_t i = 0; pools_state(s) && i < pools_state(s)->n; i++)
		json_array_append_new(list,
				      pool_json(s, &pools_state(s)->pool[i], now));
	kn_http_reply_json(
		req, 200,
		json_pack("{s:o, s:o}", "pools", list, "blocked",
			  pools_state(s) && pools_state(s)->blocked[0]
				  ? json_string(pools_state(s)->blocked)
				  : json_null()));
}

static const struct route routes[] = {
	{"GET", "/v1/pools", KN_ROLE_VIEWER, false, NULL, pools_h_list},
	{"POST", "/v1/pools/{name}/rolling", KN_ROLE_OPERATOR, false, NULL,
	 pools_h_rolling_start},
	{"GET", "/v1/pools/{name}/rolling", KN_ROLE_VIEWER, false, NULL,
	 pools_h_rolling_get},
	{0},
};

const struct service pools_service = {
	.name = "pools",
	.phase = SERVICE_PHASE_NODES,
	.start = pools_start,
	.run = pools_run,
	.stop = pools_stop,
	.routes = routes,
};

