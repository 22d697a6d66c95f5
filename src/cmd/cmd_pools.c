/*
 * kiln pools: each node pool with its size, bounds and nodes, and the
 * autoscaler's last decision and why (docs/capacity.md).
 */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/cli_watch.h"

static cli_runner cmd_pools;

const struct cli_command cmd_pools_entry = {
	.name = "pools",
	.run = cmd_pools,
	.summary = "list node pools and autoscaling decisions",
	.help = "usage: kiln pools [-w] [-o table|json|yaml|name]\n"
		"\n"
		"List each node pool (kiln server --pool): its VM size, GPUs, pricing,\n"
		"zones and price per GPU-hour from the catalog; nodes up, provisioning\n"
		"and desired against min and max; the autoscaler's last decision and\n"
		"why, and the provider's last failure; each node with its state and\n"
		"how long it has been idle. A queued job that no pool can hold is\n"
		"named under blocked.\n"
		"\n"
		"  -w, --watch   draw again whenever the server's event stream says\n"
		"                something changed (no polling); until interrupted\n"
		"  -o json|yaml  print the server's answer instead\n",
};

static void show_pool(json_t *pool)
{
	static const char *const headers[] = {"NODE", "STATE", "IDLE", NULL};
	json_t *decision = json_object_get(pool, "last_decision");
	json_t *price = json_object_get(pool, "gpu_hour_usd");
	json_t *nodes = json_object_get(pool, "nodes"), *node, *zone;
	struct cli_table *t;
	size_t i;

	printf("pool %s: %s x %s (%s, provider %s)\n",
	       cli_json_str(pool, "name"), cli_json_str(pool, "sku"),
	       cli_json_str(pool, "gpus"), cli_json_str(pool, "pricing"),
	       cli_json_str(pool, "provider"));
	printf("  nodes: %lld up, %lld provisioning, desired %lld (min %lld, "
	       "max %lld); idle ones go after %gs\n",
	       (long long)cli_json_int(pool, "current"),
	       (long long)cli_json_int(pool, "provisioning"),
	       (long long)cli_json_int(pool, "desired"),
	       (long long)cli_json_int(pool, "min"),
	       (long long)cli_json_int(pool, "max"),
	       json_number_value(json_object_get(pool, "scale_down_delay_s")));
	if (json_array_size(json_object_get(pool, "zones"))) {
		printf("  zones:");
		json_array_foreach(json_object_get(pool, "zones"), i, zone)
			printf("%s%s", i ? ", " : " ", json_string_value(zone));
		putchar('\n');
	}
	if (json_is_number(price))
		printf("  price: $%.4f per GPU-hour\n", json_number_value(price));
	else
		printf("  price: unknown (SKU not in the catalog)\n");
	if (json_is_object(decision))
		printf("  last decision: %s\n", cli_json_str(decision, "why"));
	else
		printf("  last decision: none yet\n");
	if (json_is_object(json_object_get(pool, "rolling"))) {
		json_t *r = json_object_get(pool, "rolling");

		printf("  rolling: %s", cli_json_str(r, "state"));
		if (json_is_string(json_object_get(r, "node")))
			printf(" at %s (%s)", cli_json_str(r, "node"),
			       cli_json_str(r, "step"));
		if (json_is_string(json_object_get(r, "error")))
			printf(": %s", cli_json_str(r, "error"));
		if (json_is_string(json_object_get(r, "waiting")))
			printf(": waiting: %s", cli_json_str(r, "waiting"));
		putchar('\n');
	}
	if (json_is_object(json_object_get(pool, "last_error")))
		printf("  last provider error: %s\n",
		       cli_json_str(json_object_get(pool, "last_error"), "why"));
	t = cli_table_new(headers);
	json_array_foreach(nodes, i, node) {
		json_t *idle = json_object_get(node, "idle_s");

		cli_table_cell(t, cli_json_str(node, "name"));
		cli_table_cell(t, cli_json_str(node, "state"));
		if (json_is_number(idle))
			cli_table_cellf(t, "%.0fs", json_number_value(idle));
		else
			cli_table_cell(t, "busy");
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

static void print_pools(const struct cli_ctx *ctx, json_t *answer,
			void *arg)
{
	json_t *pools = json_object_get(answer, "pools"), *pool, *blocked;
	size_t i;

	(void)ctx;
	(void)arg;
	if (!json_array_size(pools)) {
		fputs("no pools (kiln server --pool)\n", stderr);
		return;
	}
	json_array_foreach(pools, i, pool) {
		if (i)
			putchar('\n');
		show_pool(pool);
	}
	blocked = json_object_get(answer, "blocked");
	if (json_is_string(blocked))
		printf("\nblocked: %s\n", json_string_value(blocked));
}

static int cmd_pools(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct watch_listing pools = {"/v1/pools", print_pools,
						   NULL, "pools", "name"};

	return watch_listing_command(ctx, argc, argv, &pools);
}
