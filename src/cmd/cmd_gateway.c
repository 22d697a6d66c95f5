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
#include "loop/loop.h"

static cli_runner cmd_gateway;

const struct cli_command cmd_gateway_entry = {
	.name = "gateway",
	.run = cmd_gateway,
	.summary = "serve deployments behind one OpenAI-compatible endpoint",
	.help = "usage: kiln gateway [--config FILE] [--print-config]\n"
		"                    [--listen HOST:PORT] [--workers N]\n"
		"                    [--zone Z]\n"
		"                    [--routes FILE | --server URL --token TOKEN]\n"
		"                    [--refresh DURATION] [--access-log FILE]\n"
		"                    [--home DIR] [--max-body SIZE]\n"
		"                    [--max-header-size SIZE] [--head-timeout DURATION]\n"
		"                    [--body-timeout DURATION] [--max-connections N]\n"
		"                    [--max-connections-per-client N]\n"
		"                    [--upstream-timeout DURATION]\n"
		"                    [--breaker-failures N] [--breaker-cooldown DURATION]\n"
		"                    [--anomaly-window DURATION]\n"
		"                    [--tls-cert FILE --tls-key FILE] [--insecure]\n"
		"\n"
		"Serve /v1/chat/completions, /v1/completions and /v1/embeddings,\n"
		"routed by the body's \"model\" (a deployment's name), and /v1/models,\n"
		"for callers with a key (Authorization: Bearer KEY); GET /metrics\n"
		"(Prometheus, with a key too). Per-key and per-deployment rate limits and\n"
		"daily/monthly token quotas (429 with Retry-After), least-outstanding\n"
		"balancing over ready replicas (this zone first), one retry on another\n"
		"replica, circuit breakers, and the deployment's fallback when no\n"
		"replica is healthy (x-kiln-fallback header). Streams pass through as\n"
		"they arrive. One JSON access-log line per request. Counters are kept\n"
		"in $KILN_HOME/gateway/counters.json and survive a restart. Stops on\n"
		"SIGTERM or SIGINT. A deployment's latency, error rate, output length\n"
		"and x-kiln-score that leave their learned band (EWMA +- 4 MADs) for 3\n"
		"windows raise one alert, resolved when the signal is back: logged,\n"
		"and sent to the server (kiln alerts, its event stream and webhook).\n"
		"\n"
		"  --config FILE        read flags from FILE (YAML): each key a long\n"
		"                       flag's name (workers: 4, zone: a, server:,\n"
		"                       token:), the TLS ones also as tls: {cert,\n"
		"                       key}; flags on the command line win\n"
		"  --print-config       print every key's value in effect (flag over\n"
		"                       file over default) and where it came from, a\n"
		"                       token's value left out, and exit\n"
		"  --listen HOST:PORT   address (default 127.0.0.1:7080; port 0 picks\n"
		"                       a free one); the URL is written to\n"
		"                       $KILN_HOME/gateway/gateway.url once listening\n"
		"  --workers N          threads, each with its own listener on the\n"
		"                       same port (SO_REUSEPORT) (default 1)\n"
		"  --zone Z             this gateway's zone: its replicas come first\n"
		"  --routes FILE        a static route table (the document of the\n"
		"                       server's GET /v1/gateway/config); no server\n"
		"  --server URL, --token TOKEN  the server to poll for routes and keys\n"
		"                       (default as every command: KILN_SERVER and\n"
		"                       KILN_TOKEN, else $KILN_HOME/server.url and\n"
		"                       admin.token). The last good table is kept in\n"
		"                       $KILN_HOME/gateway/routes.json and served\n"
		"                       while the server cannot be reached\n"
		"  --refresh DURATION   how often to poll the server (default 1s; a\n"
		"                       bare number is seconds)\n"
		"  --access-log FILE    append the access log to FILE (default stderr)\n"
		"  --home DIR           state directory (default $KILN_HOME, else\n"
		"                       ~/.kiln)\n"
		"  --max-body SIZE      largest request body (default 1Mi; else 413)\n"
		"  --max-header-size SIZE  largest request head (default 16Ki; else\n"
		"                       431)\n"
		"  --head-timeout DURATION  a request head must come whole within\n"
		"                       this, else the connection is closed (default\n"
		"                       10s)\n"
		"  --body-timeout DURATION  the longest gap between a request body's\n"
		"                       bytes, else the connection is closed (default\n"
		"                       30s)\n"
		"  --max-connections N  open connections a worker holds; more get 503\n"
		"                       and are closed (default 4096)\n"
		"  --max-connections-per-client N  the same for one client address\n"
		"                       (default 256)\n"
		"  --upstream-timeout DURATION  longest wait for a model server to\n"
		"                       send anything (default 300s; else 504)\n"
		"  --breaker-failures N consecutive failures that open a replica's\n"
		"                       circuit breaker (default 3)\n"
		"  --breaker-cooldown DURATION  how long an open breaker waits before\n"
		"                       one trial request (default 5s)\n"
		"  --anomaly-window DURATION  the window a deployment's signals are\n"
		"                       averaged over for anomaly detection; the band\n"
		"                       is learned from the first 10 (default 10s)\n"
		"  --tls-cert FILE, --tls-key FILE  serve HTTPS with this certificate\n"
		"                       chain and key (PEM), reloaded on SIGHUP and\n"
		"                       when the files change\n"
		"  --insecure           allow plain HTTP on a non-loopback address\n"
		"                       (refused by default: keys and prompts would\n"
		"                       cross in clear)\n"
		"An https:// server is verified against the system's CAs or $KILN_CA;\n"
		"$KILN_CLIENT_CERT and $KILN_CLIENT_KEY give the gateway a client\n"
		"certificate for it (docs/tls.md).\n"
		"\n"
		"Exit status: 0 after a clean stop, 1 when start-up failed, 2 on a\n"
		"usage error, 3 when no server is given or found (and no --routes).\n",
};

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

/* What the route fetch trusts and shows, from the environment as for
   every command (docs/tls.md). */
static void client_tls_from_env(struct kn_gateway_options *o)
{
	const char *ca = getenv("KILN_CA"), *cert = getenv("KILN_CLIENT_CERT");

	o->server_ca = ca && *ca ? ca : NULL;
	o->client_cert = cert && *cert ? cert : NULL;
	o->client_key = o->client_cert ? getenv("KILN_CLIENT_KEY") : NULL;
}

/* The flags as given (file, then command line), before checking. */
struct gateway_flags {
	const char *listen, *zone, *routes, *refresh, *access_log, *home,
		*max_body, *max_headers, *upstream_timeout, *cooldown,
		*anomaly_window, *head_timeout, *body_timeout, *config;
	int workers, breaker_failures, max_conns, max_conns_per_client;
	bool print_config;
};

/* Check the flags into o (all but what comes from the home); CLI_GO or a
   usage error. */
static int check_flags(struct cli_ctx *ctx, const struct gateway_flags *g,
		       struct kn_gateway_options *o, char *host, size_t cap)
{
	const struct {
		const char *flag, *value, *example;
		int64_t *out;
	} durations[] = {
		{"refresh", g->refresh, "1s, 500ms, or seconds", &o->refresh_ms},
		{"upstream-timeout", g->upstream_timeout, "300s, 5m",
		 &o->upstream_timeout_ms},
		{"breaker-cooldown", g->cooldown, "5s, 500ms",
		 &o->breaker_cooldown_ms},
		{"anomaly-window", g->anomaly_window, "10s, 500ms",
		 &o->anomaly_window_ms},
		{"head-timeout", g->head_timeout, "10s, 500ms",
		 &o->head_timeout_ms},
		{"body-timeout", g->body_timeout, "30s, 500ms",
		 &o->body_idle_ms},
	};
	struct kn_error err;
	long port;

	if (cli_parse_listen(ctx, g->listen, "127.0.0.1:7080", host, cap,
			     &port) != CLI_GO)
		return CLI_EXIT_USAGE;
	o->host = host;
	o->port = (int)port;
	if (!o->tls_cert != !o->tls_key)
		return cli_usage_error(ctx, "--tls-cert and --tls-key go "
					    "together");
	/* kn_gateway_new checks it too; here it is refused before
	   --print-config shows it. */
	if (kn_tls_listen_check(host, o->tls_cert, o->insecure, &err) < 0)
		return cli_usage_error(ctx, "--%s", err.message);
	if (g->workers < 1 || g->workers > 256)
		return cli_usage_error(ctx, "--workers: must be 1..256");
	if (g->max_conns < 1 || g->max_conns_per_client < 1)
		return cli_usage_error(ctx, "--max-connections and "
					    "--max-connections-per-client: "
					    "must be >= 1");
	if (g->breaker_failures < 1)
		return cli_usage_error(ctx, "--breaker-failures: must be >= 1");
	for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++)
		if (parse_secs_or_duration(durations[i].value,
					   durations[i].out) < 0)
			return cli_usage_error(ctx, "--%s: \"%s\" is not a "
						    "duration (%s)",
					       durations[i].flag,
					       durations[i].value,
					       durations[i].example);
	if (kn_parse_size(g->max_body, &o->max_body) < 0 || o->max_body < 1 ||
	    o->max_body > 1024LL * 1024 * 1024)
		return cli_usage_error(ctx, "--max-body: \"%s\" is not a size "
					    "up to 1Gi (1Mi, 64Ki)",
				       g->max_body);
	if (kn_parse_size(g->max_headers, &o->max_headers) < 0 ||
	    o->max_headers < 1024 || o->max_headers > 1024 * 1024)
		return cli_usage_error(ctx, "--max-header-size: \"%s\" is not a "
					    "size in 1Ki..1Mi",
				       g->max_headers);
	o->workers = g->workers;
	o->max_conns = g->max_conns;
	o->max_conns_per_client = g->max_conns_per_client;
	o->breaker_failures = g->breaker_failures;
	o->zone = g->zone;
	o->routes_file = g->routes;
	o->access_log = g->access_log;
	return CLI_GO;
}

static int cmd_gateway(struct cli_ctx *ctx, int argc, char **argv)
{
	struct gateway_flags g = {
		.listen = "127.0.0.1:7080", .refresh = "1s",
		.max_body = "1Mi", .max_headers = "16Ki",
		.upstream_timeout = "300s", .cooldown = "5s",
		.anomaly_window = "10s", .head_timeout = "10s",
		.body_timeout = "30s", .workers = 1, .breaker_failures = 3,
		.max_conns = 4096, .max_conns_per_client = 256,
	};
	struct kn_gateway_options o = {0};
	struct cli_flag flags[] = {
		{"config", 0, CLI_FLAG_STRING, &g.config},
		{"print-config", 0, CLI_FLAG_BOOL, &g.print_config},
		{"listen", 0, CLI_FLAG_STRING, &g.listen},
		{"workers", 0, CLI_FLAG_COUNT, &g.workers},
		{"zone", 0, CLI_FLAG_STRING, &g.zone},
		{"routes", 0, CLI_FLAG_STRING, &g.routes},
		/* The global flags, so the file can name them too. */
		{"server", 0, CLI_FLAG_STRING, &ctx->server},
		{"token", 0, CLI_FLAG_STRING, &ctx->token},
		{"refresh", 0, CLI_FLAG_STRING, &g.refresh},
		{"access-log", 0, CLI_FLAG_STRING, &g.access_log},
		{"home", 0, CLI_FLAG_STRING, &g.home},
		{"max-body", 0, CLI_FLAG_STRING, &g.max_body},
		{"max-header-size", 0, CLI_FLAG_STRING, &g.max_headers},
		{"upstream-timeout", 0, CLI_FLAG_STRING, &g.upstream_timeout},
		{"breaker-failures", 0, CLI_FLAG_COUNT, &g.breaker_failures},
		{"breaker-cooldown", 0, CLI_FLAG_STRING, &g.cooldown},
		{"anomaly-window", 0, CLI_FLAG_STRING, &g.anomaly_window},
		{"head-timeout", 0, CLI_FLAG_STRING, &g.head_timeout},
		{"body-timeout", 0, CLI_FLAG_STRING, &g.body_timeout},
		{"max-connections", 0, CLI_FLAG_COUNT, &g.max_conns},
		{"max-connections-per-client", 0, CLI_FLAG_COUNT,
		 &g.max_conns_per_client},
		{"tls-cert", 0, CLI_FLAG_STRING, &o.tls_cert},
		{"tls-key", 0, CLI_FLAG_STRING, &o.tls_key},
		{"insecure", 0, CLI_FLAG_BOOL, &o.insecure},
		{NULL, 0, 0, NULL},
	};
	struct kn_gateway *gw = NULL;
	struct cli_config conf;
	struct kn_error err;
	char host[256], *home = NULL, *server = NULL, *token = NULL;
	int rc;

	rc = cli_config_load(ctx, flags, argc, argv, &conf);
	if (rc == CLI_GO)
		rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc == CLI_GO)
		rc = check_flags(ctx, &g, &o, host, sizeof(host));
	if (rc == CLI_GO && g.print_config) {
		cli_config_print(ctx, flags, &conf, argc, argv);
		rc = CLI_EXIT_OK;
	}
	cli_config_release(&conf);
	if (rc != CLI_GO)
		return rc;
	home = g.home ? kn_xstrdup(g.home) : cli_kiln_home();
	if (!g.routes) {
		rc = cli_find_credentials(ctx, home, &server, &token);
		if (rc) {
			fprintf(stderr, "%s: or pass --routes FILE for a "
					"static route table\n", ctx->prog);
			goto out;
		}
	}
	o.home = home;
	o.server = server;
	o.token = token;
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
		ctx->prog, kn_gateway_url(gw), g.workers,
		g.workers == 1 ? "" : "s", g.zone ? ", zone " : "",
		g.zone ? g.zone : "", g.routes ? g.routes : server);
	fflush(stderr);
	kn_notify("READY=1");
	rc = kn_gateway_run(gw) < 0 ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	kn_notify("STOPPING=1");
out:
	kn_gateway_free(gw);
	KN_FREE_ALL(home, server, token);
	return rc;
}
