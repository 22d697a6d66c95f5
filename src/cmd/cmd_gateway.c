/*
 * kiln gateway: the OpenAI-compatible data plane in front of deployments
 * (src/gateway/ does the work; this file reads flags and finds the server
 * and token the way the CLI does).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "gateway/gateway.h"

/* "1s", "500ms", or a bare number of seconds; > 0. */
static int parse_secs_or_duration(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (s[0] && strspn(s, "0123456789") == strlen(s)) {
		errno = 0;
		v = strtoll(s, &end, 10);
		if (errno || v <= 0 || v > INT64_MAX / 1000)
			return -EINVAL;
		*out = v * 1000;
		return 0;
	}
	if (kn_parse_duration(s, out) < 0 || *out <= 0)
		return -EINVAL;
	return 0;
}

/* HOST:PORT (or [V6]:PORT) into host and *port; CLI_GO or a usage
   error. */
static int parse_listen(struct cli_ctx *ctx, const char *listen, char *host,
			size_t cap, long *port)
{
	const char *colon = strrchr(listen, ':');

	*port = colon ? strtol(colon + 1, NULL, 10) : -1;
	if (!colon || colon == listen || (size_t)(colon - listen) >= cap ||
	    !colon[1] ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
	    *port < 0 || *port > 65535)
		return cli_usage_error(ctx, "--listen: \"%s\" is not HOST:PORT "
					    "(e.g. 127.0.0.1:7080)", listen);
	memcpy(host, listen, (size_t)(colon - listen));
	host[colon - listen] = '\0';
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	return CLI_GO;
}

/* What the route fetch trusts and shows, from the environment as for
   every command (docs/tls.md). */
static void client_tls_from_env(struct kn_gateway_options *o)
{
	const char *ca = getenv("KILN_CA"), *cert = getenv("KILN_CLIENT_CERT");

	o->server_ca = ca && *ca ? ca : NULL;
	o->client_cert = cert && *cert ? cert : NULL;
	o->client_key = o->client_cert ? getenv("KILN_CLIENT_KEY") : NULL;
}

int cmd_gateway(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *listen = "127.0.0.1:7080", *zone = NULL, *routes = NULL,
		   *refresh = "1s", *access_log = NULL, *home_flag = NULL,
		   *max_body = "1Mi", *max_headers = "16Ki",
		   *upstream_timeout = "300s", *cooldown = "5s",
		   *anomaly_window = "10s", *head_timeout = "10s",
		   *body_timeout = "30s";
	int workers = 1, breaker_failures = 3, max_conns = 4096,
	    max_conns_per_client = 256;
	struct kn_gateway_options o = {0};
	struct cli_flag flags[] = {
		{"listen", 0, CLI_FLAG_STRING, &listen},
		{"workers", 0, CLI_FLAG_COUNT, &workers},
		{"zone", 0, CLI_FLAG_STRING, &zone},
		{"routes", 0, CLI_FLAG_STRING, &routes},
		{"refresh", 0, CLI_FLAG_STRING, &refresh},
		{"access-log", 0, CLI_FLAG_STRING, &access_log},
		{"home", 0, CLI_FLAG_STRING, &home_flag},
		{"max-body", 0, CLI_FLAG_STRING, &max_body},
		{"max-header-size", 0, CLI_FLAG_STRING, &max_headers},
		{"upstream-timeout", 0, CLI_FLAG_STRING, &upstream_timeout},
		{"breaker-failures", 0, CLI_FLAG_COUNT, &breaker_failures},
		{"breaker-cooldown", 0, CLI_FLAG_STRING, &cooldown},
		{"anomaly-window", 0, CLI_FLAG_STRING, &anomaly_window},
		{"head-timeout", 0, CLI_FLAG_STRING, &head_timeout},
		{"body-timeout", 0, CLI_FLAG_STRING, &body_timeout},
		{"max-connections", 0, CLI_FLAG_COUNT, &max_conns},
		{"max-connections-per-client", 0, CLI_FLAG_COUNT,
		 &max_conns_per_client},
		{"tls-cert", 0, CLI_FLAG_STRING, &o.tls_cert},
		{"tls-key", 0, CLI_FLAG_STRING, &o.tls_key},
		{"insecure", 0, CLI_FLAG_BOOL, &o.insecure},
		{NULL, 0, 0, NULL},
	};
	const struct {
		const char *flag, *const *value, *example;
		int64_t *out;
	} durations[] = {
		{"refresh", &refresh, "1s, 500ms, or seconds", &o.refresh_ms},
		{"upstream-timeout", &upstream_timeout, "300s, 5m",
		 &o.upstream_timeout_ms},
		{"breaker-cooldown", &cooldown, "5s, 500ms",
		 &o.breaker_cooldown_ms},
		{"anomaly-window", &anomaly_window, "10s, 500ms",
		 &o.anomaly_window_ms},
		{"head-timeout", &head_timeout, "10s, 500ms",
		 &o.head_timeout_ms},
		{"body-timeout", &body_timeout, "30s, 500ms", &o.body_idle_ms},
	};
	struct kn_gateway *gw = NULL;
	struct kn_error err;
	char host[256], *home = NULL, *server = NULL, *token = NULL;
	long port;
	int rc;

	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		return rc;
	if (parse_listen(ctx, listen, host, sizeof(host), &port) != CLI_GO)
		return CLI_EXIT_USAGE;
	if (!o.tls_cert != !o.tls_key)
		return cli_usage_error(ctx, "--tls-cert and --tls-key go "
					    "together");
	if (workers < 1 || workers > 256)
		return cli_usage_error(ctx, "--workers: must be 1..256");
	if (max_conns < 1 || max_conns_per_client < 1)
		return cli_usage_error(ctx, "--max-connections and "
					    "--max-connections-per-client: "
					    "must be >= 1");
	if (breaker_failures < 1)
		return cli_usage_error(ctx, "--breaker-failures: must be >= 1");
	for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++)
		if (parse_secs_or_duration(*durations[i].value,
					   durations[i].out) < 0)
			return cli_usage_error(ctx, "--%s: \"%s\" is not a "
						    "duration (%s)",
					       durations[i].flag,
					       *durations[i].value,
					       durations[i].example);
	if (kn_parse_size(max_body, &o.max_body) < 0 || o.max_body < 1 ||
	    o.max_body > 1024LL * 1024 * 1024)
		return cli_usage_error(ctx, "--max-body: \"%s\" is not a size "
					    "up to 1Gi (1Mi, 64Ki)",
				       max_body);
	if (kn_parse_size(max_headers, &o.max_headers) < 0 ||
	    o.max_headers < 1024 || o.max_headers > 1024 * 1024)
		return cli_usage_error(ctx, "--max-header-size: \"%s\" is not a "
					    "size in 1Ki..1Mi",
				       max_headers);
	home = home_flag ? kn_xstrdup(home_flag) : cli_kiln_home();
	if (!routes) {
		rc = cli_find_credentials(ctx, home, &server, &token);
		if (rc) {
			fprintf(stderr, "%s: or pass --routes FILE for a "
					"static route table\n", ctx->prog);
			goto out;
		}
	}
	o.host = host;
	o.port = (int)port;
	o.workers = workers;
	o.max_conns = max_conns;
	o.max_conns_per_client = max_conns_per_client;
	o.zone = zone;
	o.home = home;
	o.routes_file = routes;
	o.server = server;
	o.token = token;
	o.access_log = access_log;
	o.breaker_failures = breaker_failures;
	client_tls_from_env(&o);
	if (kn_gateway_new(&o, &gw, &err) < 0) {
		/* Plain HTTP off loopback is a usage error, as the
		   server's. */
		rc = !strcmp(err.field, "listen")
			     ? cli_usage_error(ctx, "--%s", err.message)
			     : cli_fail(ctx, "%s", err.message);
		goto out;
	}
	fprintf(stderr, "%s: serving %s (%d worker%s%s%s), routes from %s\n",
		ctx->prog, kn_gateway_url(gw), workers, workers == 1 ? "" : "s",
		zone ? ", zone " : "", zone ? zone : "",
		routes ? routes : server);
	fflush(stderr);
	kn_notify("READY=1");
	rc = kn_gateway_run(gw) < 0 ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	kn_notify("STOPPING=1");
out:
	kn_gateway_free(gw);
	free(home);
	free(server);
	free(token);
	return rc;
}
