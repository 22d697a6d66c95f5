/*
 * kiln exporter: this node's metrics for Prometheus at GET /metrics.
 *
 * Each scrape reads procfs/sysfs and NVML afresh (no background polling,
 * so an idle exporter costs nothing) and answers the whole text at once.
 * NVML is opened once at start; XID events are drained at every scrape and
 * the last XID of each GPU is kept, as dcgm-exporter reports it.
 *
 * Authentication: kiln's API always wants a token, but Prometheus
 * exporters conventionally do not, and scrapers are set up for that. The
 * exporter therefore listens on loopback unless told otherwise, and with
 * --token-file it wants `Authorization: Bearer <token>` on every scrape
 * (Prometheus: `authorization: {credentials_file: ...}`).
 *
 * With --tls-cert and --tls-key (tls: {cert, key} in --config FILE) it
 * serves HTTPS (reloaded on SIGHUP and
 * when the files change), with --tls-client-ca it checks the scraper's
 * client certificate; plain HTTP on a non-loopback address needs
 * --insecure, since the token and the metrics would cross in clear.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "loop/loop.h"
#include "telemetry/telemetry.h"

static cli_runner cmd_exporter;

const struct cli_command cmd_exporter_entry = {
	.name = "exporter",
	.run = cmd_exporter,
	.summary = "serve this node's metrics for Prometheus",
	.help = "usage: kiln exporter [--config FILE] [--print-config]\n"
		"                     [--listen HOST:PORT] [--root DIR]\n"
		"                     [--token-file FILE] [--mount LIST]\n"
		"                     [--hostname NAME]\n"
		"                     [--tls-cert FILE --tls-key FILE\n"
		"                      [--tls-client-ca FILE]] [--insecure]\n"
		"\n"
		"Serve GET /metrics in Prometheus text format: CPU, memory, network,\n"
		"disk and filesystem metrics under node_exporter's names, and per-GPU\n"
		"metrics from NVML under dcgm-exporter's names (DCGM_FI_DEV_*), so\n"
		"their Grafana dashboards work unchanged. Stops on SIGTERM or SIGINT.\n"
		"\n"
		"  --config FILE       read flags from FILE (YAML): each key a long\n"
		"                      flag's name (mount: /,/data), the TLS ones\n"
		"                      also as tls: {cert, key, client_ca}; flags on\n"
		"                      the command line win\n"
		"  --print-config      print every key's value in effect (flag over\n"
		"                      file over default) and where it came from, and\n"
		"                      exit\n"
		"  --listen HOST:PORT  address (default 127.0.0.1:9470; port 0 picks\n"
		"                      a free one, printed on standard error)\n"
		"  --root DIR          read proc/ and sys/ under DIR (default /)\n"
		"  --token-file FILE   require `Authorization: Bearer <token>` with\n"
		"                      the token in FILE; without it scrapes are not\n"
		"                      authenticated, as exporters conventionally\n"
		"                      are, so keep the default loopback address\n"
		"  --mount LIST        only these mount points, comma-separated\n"
		"                      (default: every real filesystem)\n"
		"  --hostname NAME     the Hostname label of GPU series (default:\n"
		"                      this host's name)\n"
		"  --tls-cert FILE     serve HTTPS with this certificate chain (PEM),\n"
		"  --tls-key FILE      and its key; both reloaded on SIGHUP and when\n"
		"                      the files change (docs/tls.md)\n"
		"  --tls-client-ca FILE  scrapers must show a client certificate\n"
		"                      that chains to a CA in FILE\n"
		"  --insecure          allow plain HTTP on a non-loopback address\n",
};

/* A token file holds one line; anything longer is not a token. */
#define TOKEN_FILE_MAX 4096
/* --mount takes a comma-separated list of at most this many mount points. */
#define MOUNTS_MAX 64

struct exporter {
	struct kn_loop *loop;
	struct kn_node_options node;
	struct kn_nvml *nvml;      /* NULL without a GPU */
	unsigned *last_xid;
	struct kn_gpu_sample *samples;
	char hostname[256];
	char *token;               /* NULL: no authentication */
	struct kn_tls *tls;        /* NULL: plain HTTP */
	struct kn_tls_watch *tls_watch;
	/* With a client CA: a scraper without a verified certificate is
	   refused, as a wrong token is. */
	bool want_client_cert;
};

static bool same_secret(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char diff = la != lb;

	/* Compare every byte of the offered token whatever matches. */
	for (size_t i = 0; i < la; i++)
		diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
	return diff == 0;
}

static bool authorized(struct exporter *x, struct kn_http_req *req)
{
	const char *h;

	if (x->want_client_cert && !kn_http_client_cert(req))
		return false;
	if (!x->token)
		return true;
	h = kn_http_header(req, "Authorization");
	return h && !strncmp(h, "Bearer ", 7) && same_secret(h + 7, x->token);
}

/* Build one scrape's text; 0 or a negative errno with err set. */
static int scrape(struct exporter *x, struct kn_buf *out, struct kn_error *err)
{
	unsigned n;
	int rc;

	if ((rc = kn_node_collect(&x->node, out, err)) < 0)
		return rc;
	if (!x->nvml)
		return 0;
	n = kn_nvml_count(x->nvml);
	if ((rc = kn_nvml_poll_xids(x->nvml, x->last_xid, err)) < 0)
		return rc;
	for (unsigned i = 0; i < n; i++)
		if ((rc = kn_nvml_sample(x->nvml, i, &x->samples[i], err)) < 0)
			return rc;
	return kn_gpu_write(x->samples, x->last_xid, n, x->hostname, out, err);
}

static void handle(struct kn_http_req *req, void *arg)
{
	struct exporter *x = arg;
	struct kn_error err;
	struct kn_buf out;

	if (strcmp(kn_http_path(req), "/metrics") != 0) {
		kn_errorf(&err, KN_ENOTFOUND, NULL,
			  "no such path: the exporter serves GET /metrics");
		kn_http_reply_error(req, &err);
		return;
	}
	if (strcmp(kn_http_method(req), "GET") != 0) {
		kn_errorf(&err, KN_EINVAL, NULL, "/metrics answers GET only");
		kn_http_reply_error(req, &err);
		return;
	}
	if (!authorized(x, req)) {
		kn_errorf(&err, KN_EAUTH, NULL,
			  "missing or wrong bearer token (see --token-file)");
		kn_http_reply_error(req, &err);
		return;
	}
	kn_buf_init(&out, KN_PROM_MAX_BYTES);
	if (scrape(x, &out, &err) < 0) {
		kn_log(KN_LOG_WARN, "scrape failed: %s", err.message);
		kn_http_reply_error(req, &err);
	} else {
		kn_http_reply_text(req, 200, KN_PROM_CONTENT_TYPE, out.data,
				   out.len);
	}
	kn_buf_release(&out);
}

static void on_stop(void *arg)
{
	kn_loop_stop(arg);
}

static int read_token(struct cli_ctx *ctx, const char *path, char **out)
{
	char *text = NULL;
	size_t len;
	int rc = kn_read_file(path, TOKEN_FILE_MAX, &text, &len);

	if (rc < 0)
		return cli_fail(ctx, "--token-file: %s: %s", path, strerror(-rc));
	text[strcspn(text, "\r\n")] = '\0';
	if (!text[0]) {
		free(text);
		return cli_fail(ctx, "--token-file: %s: empty", path);
	}
	*out = text;
	return CLI_GO;
}

/* The TLS flags together, and no plain HTTP off loopback without
   --insecure. */
static int check_tls_flags(struct cli_ctx *ctx, const char *host,
			   const struct kn_tls_files *files, bool insecure)
{
	struct kn_error err;

	if ((files->cert || files->key || files->client_ca) &&
	    (!files->cert || !files->key))
		return cli_usage_error(ctx, "--tls-cert and --tls-key go "
					    "together (--tls-client-ca needs "
					    "both)");
	if (kn_tls_listen_check(host, files->cert, insecure, &err) < 0)
		return cli_usage_error(ctx, "--%s", err.message);
	return CLI_GO;
}

/* Load the certificate the checked flags name, if any. */
static int exporter_tls(struct cli_ctx *ctx, struct exporter *x,
			const struct kn_tls_files *files)
{
	struct kn_error err;

	if (!files->cert)
		return CLI_GO;
	if (kn_tls_new(files, &x->tls, &err) < 0)
		return cli_fail(ctx, "--%s", err.message);
	x->want_client_cert = files->client_ca != NULL;
	return CLI_GO;
}

/*
 * Check the node's sources once, so a wrong --root fails at start, and
 * open NVML (none: no GPU metrics, said once).
 */
static int sources_open(struct cli_ctx *ctx, struct exporter *x)
{
	struct kn_buf probe;
	struct kn_error err;
	unsigned n;
	const char *driver;
	int rc;

	kn_buf_init(&probe, KN_PROM_MAX_BYTES);
	rc = kn_node_collect(&x->node, &probe, &err);
	kn_buf_release(&probe);
	if (rc < 0)
		return cli_fail(ctx, "%s", err.message);
	rc = cli_nvml_open(ctx, "no GPU metrics", &x->nvml);
	if (rc != CLI_GO)
		return rc == CLI_EXIT_OK ? CLI_GO : rc;
	n = kn_nvml_count(x->nvml);
	driver = kn_nvml_driver_version(x->nvml);
	x->last_xid = kn_xcalloc(n ? n : 1, sizeof(*x->last_xid));
	x->samples = kn_xcalloc(n ? n : 1, sizeof(*x->samples));
	/* Which driver answered: the first thing to check when a GPU's
	   metrics look wrong. */
	fprintf(stderr, "%s: %u GPU%s, NVIDIA driver %s\n", ctx->prog, n,
		n == 1 ? "" : "s", driver[0] ? driver : "unknown");
	return CLI_GO;
}

static int cmd_exporter(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *listen = "127.0.0.1:9470", *root = "/", *token_file = NULL,
		   *mount_arg = NULL, *hostname = NULL, *config = NULL;
	struct kn_tls_files tls = {0};
	bool insecure = false, print_config = false;
	struct cli_flag flags[] = {
		{"config", 0, CLI_FLAG_STRING, &config},
		{"print-config", 0, CLI_FLAG_BOOL, &print_config},
		{"listen", 0, CLI_FLAG_STRING, &listen},
		{"root", 0, CLI_FLAG_STRING, &root},
		{"token-file", 0, CLI_FLAG_STRING, &token_file},
		{"mount", 0, CLI_FLAG_STRING, &mount_arg},
		{"hostname", 0, CLI_FLAG_STRING, &hostname},
		{"tls-cert", 0, CLI_FLAG_STRING, &tls.cert},
		{"tls-key", 0, CLI_FLAG_STRING, &tls.key},
		{"tls-client-ca", 0, CLI_FLAG_STRING, &tls.client_ca},
		{"insecure", 0, CLI_FLAG_BOOL, &insecure},
		{NULL, 0, 0, NULL},
	};
	struct exporter x = {0};
	struct kn_http_server *srv = NULL;
	struct cli_config conf;
	struct kn_error err;
	const char *mounts[MOUNTS_MAX];
	char host[256], *mount_buf = NULL;
	int rc, bound;
	long port;

	rc = cli_config_load(ctx, flags, argc, argv, &conf);
	if (rc == CLI_GO)
		rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc == CLI_GO)
		rc = cli_parse_listen(ctx, listen, "127.0.0.1:9470", host,
				      sizeof(host), &port);
	if (rc == CLI_GO)
		rc = check_tls_flags(ctx, host, &tls, insecure);
	if (rc == CLI_GO && print_config) {
		cli_config_print(ctx, flags, &conf, argc, argv);
		rc = CLI_EXIT_OK;
	}
	cli_config_release(&conf);
	if (rc != CLI_GO)
		return rc;
	if ((rc = exporter_tls(ctx, &x, &tls)) != CLI_GO)
		goto out;
	if (mount_arg &&
	    (rc = cli_split_list(ctx, "mount", mount_arg, true, &mount_buf,
				  mounts, MOUNTS_MAX)) != CLI_GO)
		goto out;
	if (token_file && (rc = read_token(ctx, token_file, &x.token)) != CLI_GO)
		goto out;
	x.node.root = root;
	x.node.mounts = mount_arg ? mounts : NULL;
	if (hostname)
		kn_strlcpy(x.hostname, hostname, sizeof(x.hostname));
	else if (gethostname(x.hostname, sizeof(x.hostname)) < 0)
		kn_strlcpy(x.hostname, "localhost", sizeof(x.hostname));
	x.hostname[sizeof(x.hostname) - 1] = '\0';

	if ((rc = sources_open(ctx, &x)) != CLI_GO)
		goto out;
	x.loop = kn_loop_new();
	if (kn_http_server_new(x.loop, host, (int)port, NULL, x.tls, handle, &x,
			       &srv, &bound, &err) < 0) {
		rc = cli_fail(ctx, "%s", err.message);
		goto out;
	}
	kn_loop_on_signal(x.loop, SIGTERM, on_stop, x.loop);
	kn_loop_on_signal(x.loop, SIGINT, on_stop, x.loop);
	if (x.tls &&
	    !(x.tls_watch = kn_tls_watch_new(x.loop, x.tls, "exporter",
					     KN_TLS_WATCH_MS))) {
		rc = cli_fail(ctx, "cannot watch the TLS certificate");
		goto out;
	}
	fprintf(stderr, "%s: serving %s://%s%s%s:%d/metrics%s\n", ctx->prog,
		x.tls ? "https" : "http", strchr(host, ':') ? "[" : "", host,
		strchr(host, ':') ? "]" : "",
		bound, x.token ? " (bearer token required)" : "");
	fflush(stderr);
	kn_notify("READY=1");
	rc = kn_loop_run(x.loop) < 0 ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	kn_notify("STOPPING=1");
out:
	kn_http_server_free(srv);
	kn_tls_watch_free(x.tls_watch);
	kn_tls_free(x.tls);
	if (x.loop)
		kn_loop_free(x.loop);
	kn_nvml_close(x.nvml);
	KN_FREE_ALL(x.last_xid, x.samples, x.token, mount_buf);
	return rc;
}
