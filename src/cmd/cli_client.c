/*
 * client: for a server on the loopback over plain http, cli_plain.c's
 * client, one connection per request, so a command never loads libcurl;
 * for any other URL one libcurl easy handle per command, reused across
 * requests so `submit --wait` polls over one connection.
 *
 * An answer's body goes either to memory (JSON, capped at 64 MiB) or, for
 * a 2xx answer to cli_stream, straight to the caller's FILE as it arrives:
 * the write callback decides on its first call, once the status is known,
 * so an error body is still caught whole and decoded into one line.
 *
 * The token goes only into the Authorization header; it is checked for
 * characters that could break out of the header, and no message quotes it.
 */
#include "cmd/cli_client.h"
#include "cmd/cli_plain.h"
#include "httpc/httpc.h"
#include "loop/loop.h"

#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <poll.h>

/* server.url and admin.token hold one short line; anything bigger is not. */
#define CONFIG_FILE_MAX 4096
/* cli_wait_done's polls: prompt for short work, gentle for long. */
#define WAIT_FIRST_POLL_MS 50
#define WAIT_MAX_POLL_MS 1000

struct cli_client {
	CURL *curl;       /* NULL when plain */
	bool plain;       /* http to the loopback: cli_plain.c */
	char plain_host[64];
	int plain_port;
	char *base_url;   /* without a trailing slash */
	char *token;      /* NULL when none was found */
	char *token_note; /* for 401 messages: the token's source, or why none */
	char errbuf[CURL_ERROR_SIZE];
	char idem_key[33]; /* cli_create's, hex: one per create and its retry */
};

char *cli_kiln_home(void)
{
	const char *home = getenv("KILN_HOME");
	struct passwd *pw;

	if (home && *home)
		return kn_xstrdup(home);
	home = getenv("HOME");
	if (!home || !*home) {
		pw = getpwuid(getuid());
		home = pw ? pw->pw_dir : "/";
	}
	return kn_asprintf("%s/.kiln", home);
}

static char *trim_copy(const char *s)
{
	size_t len;
	char *out;

	while (isspace((unsigned char)*s))
		s++;
	len = strlen(s);
	while (len > 0 && isspace((unsigned char)s[len - 1]))
		len--;
	out = kn_xmalloc(len + 1);
	memcpy(out, s, len);
	out[len] = '\0';
	return out;
}

static int read_trimmed(const char *path, char **out)
{
	char *text;
	int rc = kn_read_file(path, CONFIG_FILE_MAX, &text, NULL);

	if (rc < 0)
		return rc;
	*out = trim_copy(text);
	free(text);
	return 0;
}

static int find_server(const struct cli_ctx *ctx, const char *home,
		       char **out)
{
	const char *env = getenv("KILN_SERVER");
	char *file = NULL, *url = NULL;
	const char *source;
	size_t len;
	int rc = 0;

	if (ctx->server) {
		url = trim_copy(ctx->server);
		source = "--server";
	} else if (env && *env) {
		url = trim_copy(env);
		source = "KILN_SERVER";
	} else {
		file = kn_asprintf("%s/server.url", home);
		rc = read_trimmed(file, &url);
		if (rc < 0 && rc != -ENOENT) {
			fprintf(stderr, "kiln: cannot read %s: %s\n", file,
				strerror(-rc));
			rc = CLI_EXIT_UNREACHABLE;
			goto out;
		}
		source = file;
	}
	if (!url || !*url) {
		fputs("kiln: no server: start one with `kiln server`, or pass "
		      "--server / set KILN_SERVER\n",
		      stderr);
		rc = CLI_EXIT_UNREACHABLE;
		goto out;
	}
	if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) {
		fprintf(stderr,
			"kiln: the server URL from %s must start with http:// "
			"or https://\n",
			source);
		rc = CLI_EXIT_USAGE;
		goto out;
	}
	len = strlen(url);
	while (len > 0 && url[len - 1] == '/')
		url[--len] = '\0';
	*out = url;
	url = NULL;
	rc = 0;
out:
	KN_FREE_ALL(url, file);
	return rc;
}

/* A bearer token is printable ASCII without spaces (RFC 6750's b64token). */
static bool token_chars_ok(const char *token)
{
	for (; *token; token++)
		if (*token <= ' ' || *token > '~')
			return false;
	return true;
}

static int find_token(struct cli_client *c, const struct cli_ctx *ctx,
		      const char *home)
{
	const char *env = getenv("KILN_TOKEN");
	char *file = NULL;
	const char *source;
	int rc;

	if (ctx->token) {
		c->token = trim_copy(ctx->token);
		source = "--token";
	} else if (env && *env) {
		c->token = trim_copy(env);
		source = "KILN_TOKEN";
	} else {
		file = kn_asprintf("%s/admin.token", home);
		source = file;
		rc = read_trimmed(file, &c->token);
		if (rc == -ENOENT)
			c->token_note = kn_asprintf(
				"no token: pass --token or set KILN_TOKEN "
				"(the server writes an admin token to %s)",
				file);
		else if (rc < 0)
			c->token_note = kn_asprintf("no token: cannot read %s: %s",
						    file, strerror(-rc));
	}
	if (c->token && !*c->token) {
		free(c->token);
		c->token = NULL;
		c->token_note = kn_asprintf("no token: the one from %s is empty",
					    source);
	} else if (c->token) {
		c->token_note = kn_asprintf("the token came from %s", source);
	}
	rc = 0;
	if (c->token && !token_chars_ok(c->token)) {
		fprintf(stderr,
			"kiln: the token from %s has characters no token has "
			"(spaces or control characters)\n",
			source);
		rc = CLI_EXIT_USAGE;
	}
	free(file);
	return rc;
}

int cli_find_credentials(const struct cli_ctx *ctx, const char *home,
			 char **server, char **token)
{
	struct cli_client c = {0};
	int rc = find_server(ctx, home, server);

	if (rc)
		return rc;
	rc = find_token(&c, ctx, home);
	free(c.token_note);
	if (rc) {
		KN_FREE_ALL(c.token, *server);
		*server = NULL;
		return rc;
	}
	*token = c.token;
	return 0;
}

int cli_client_open(const struct cli_ctx *ctx, struct cli_client **out)
{
	struct cli_client *c = kn_xcalloc(1, sizeof(*c));
	char *home = cli_kiln_home();
	int rc;

	rc = find_server(ctx, home, &c->base_url);
	if (rc)
		goto out;
	rc = find_token(c, ctx, home);
	if (rc)
		goto out;
	c->plain = cli_plain_url(c->base_url, c->plain_host,
				 sizeof(c->plain_host), &c->plain_port);
	if (!c->plain)
		c->curl = curl_easy_init();
	if (!c->plain && !c->curl) {
		fputs("kiln: cannot start libcurl\n", stderr);
		rc = CLI_EXIT_FAIL;
		goto out;
	}
	*out = c;
	c = NULL;
out:
	cli_client_free(c);
	free(home);
	return rc;
}

const char *cli_client_url(const struct cli_client *c)
{
	return c->base_url;
}

void cli_client_free(struct cli_client *c)
{
	if (!c)
		return;
	if (c->curl)
		curl_easy_cleanup(c->curl);
	KN_FREE_ALL(c->base_url, c->token, c->token_note, c);
}

struct answer {
	FILE *sink;       /* where a 2xx body goes, or NULL: to memory */
	bool decided;     /* streaming has been chosen, on the first piece */
	bool streaming;
	bool too_big;
	int sink_errno;   /* writing to sink failed with this */
	bool inert;       /* a terminal's: control characters shown escaped */
	char held[4];     /* the start of a UTF-8 sequence cut by a piece */
	size_t n_held;
	struct kn_buf body;
};

/* The bytes a streamed piece is escaped in at most (held ones first). */
#define INERT_PIECE 4096

/*
 * Write len bytes to the sink as kn_text_escape shows them on a terminal;
 * more says whether more pieces follow (a sequence cut at the end then
 * waits in held). 0, or -1 with sink_errno set.
 */
static int write_inert(struct answer *a, const char *data, size_t len,
		       bool more)
{
	char in[INERT_PIECE + sizeof(a->held)], out[4 * sizeof(in) + 1];
	size_t take, n, used;

	do {
		take = len < INERT_PIECE ? len : INERT_PIECE;
		memcpy(in, a->held, a->n_held);
		memcpy(in + a->n_held, data, take);
		n = a->n_held + take;
		used = kn_text_escape(out, sizeof(out), in, n,
				      KN_TEXT_TERMINAL |
					      (more || take < len ? KN_TEXT_MORE
								  : 0));
		a->n_held = n - used;
		memcpy(a->held, in + used, a->n_held);
		data += take;
		len -= take;
		errno = 0;
		if (fputs(out, a->sink) == EOF) {
			a->sink_errno = errno ? errno : EIO;
			return -1;
		}
	} while (len);
	return 0;
}

/* A piece of the answer's body, of status: 0, or -1 to stop. */
static int take_piece(void *arg, long status, const char *data, size_t len)
{
	struct answer *a = arg;

	if (!a->decided) {
		a->streaming = a->sink && status >= 200 && status < 300;
		a->decided = true;
	}
	if (a->streaming) {
		if (a->inert && write_inert(a, data, len, true) < 0)
			return -1;
		errno = 0;
		if ((!a->inert && fwrite(data, 1, len, a->sink) != len) ||
		    fflush(a->sink) != 0) {
			a->sink_errno = errno ? errno : EIO;
			return -1;
		}
		return 0;
	}
	if (kn_buf_append(&a->body, data, len) < 0) {
		a->too_big = true;
		return -1;
	}
	return 0;
}

struct curl_answer {
	CURL *curl;
	struct answer *a;
};

static size_t on_data(char *data, size_t size, size_t n, void *arg)
{
	struct curl_answer *ca = arg;
	long status = 0;

	curl_easy_getinfo(ca->curl, CURLINFO_RESPONSE_CODE, &status);
	return take_piece(ca->a, status, data, size * n) < 0 ? 0 : size * n;
}

/* Length of text's first line, at most max. */
static int first_line_len(const char *text, size_t max)
{
	size_t n = strcspn(text, "\r\n");
	return (int)(n < max ? n : max);
}

static void print_api_error(const struct cli_client *c, long status,
			    const struct kn_buf *body)
{
	json_t *doc = body->len ? json_loadb(body->data, body->len, 0, NULL)
				: NULL;
	json_t *err = json_object_get(doc, "error");
	const char *code = json_string_value(json_object_get(err, "code"));
	const char *msg = json_string_value(json_object_get(err, "message"));
	char line[2048], clean[2048];

	if (code && msg)
		snprintf(line, sizeof(line), "%s: %s", code, msg);
	else if (status >= 300 && status < 400)
		snprintf(line, sizeof(line),
			 "the server answered with a redirect (HTTP %ld), "
			 "which kiln does not follow: check the server URL",
			 status);
	else if (body->len)
		snprintf(line, sizeof(line), "the server answered HTTP %ld: %.*s",
			 status, first_line_len(body->data, 200), body->data);
	else
		snprintf(line, sizeof(line), "the server answered HTTP %ld",
			 status);
	if (status == 401 && c->token_note) {
		size_t used = strlen(line);
		snprintf(line + used, sizeof(line) - used, "; %s",
			 c->token_note);
	}
	cli_clean(clean, line, sizeof(clean));
	fprintf(stderr, "kiln: %s\n", clean);
	json_decref(doc);
}

/* Like every allocation in kiln, a failed one is fatal. */
static struct curl_slist *add_header(struct curl_slist *h, const char *line)
{
	struct curl_slist *grown = curl_slist_append(h, line);

	if (!grown) {
		fputs("kiln: out of memory\n", stderr);
		abort();
	}
	return grown;
}

static struct curl_slist *request_headers(const struct cli_client *c,
					  const char *content_type,
					  bool want_json)
{
	struct curl_slist *h = NULL;
	char *line;

	if (c->token) {
		line = kn_asprintf("Authorization: Bearer %s", c->token);
		h = add_header(h, line);
		free(line);
	}
	if (want_json)
		h = add_header(h, "Accept: application/json");
	if (content_type) {
		line = kn_asprintf("Content-Type: %s", content_type);
		h = add_header(h, line);
		free(line);
	} else {
		/* No body, no type: not libcurl's form-encoded default. */
		h = add_header(h, "Content-Type:");
	}
	/* The API never wants "Expect: 100-continue" round trips. */
	h = add_header(h, "Expect:");
	return h;
}

static void set_method(CURL *curl, const char *method, const char *body,
		       size_t body_len)
{
	if (!strcmp(method, "GET")) {
		curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
		return;
	}
	if (!strcmp(method, "POST") || body) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body ? body : "");
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)(body ? body_len : 0));
	}
	if (strcmp(method, "POST"))
		curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
}

/*
 * A request that may have reached the server without its answer coming
 * back: the connection broke (reset, closed with nothing) or went
 * silent. Not a refused connect: then nothing was sent.
 */
static bool lost_answer(CURLcode cc)
{
	return cc == CURLE_SEND_ERROR || cc == CURLE_RECV_ERROR ||
	       cc == CURLE_GOT_NOTHING || cc == CURLE_PARTIAL_FILE ||
	       cc == CURLE_OPERATION_TIMEDOUT;
}

/* Internal to perform: the request carries c->idem_key. */
#define PERFORM_KEYED (1u << 8)
/* Internal to perform: a lost answer returns PERFORM_LOST unprinted. */
#define PERFORM_QUIET_LOST (1u << 9)
#define PERFORM_LOST CLI_LOST
/* Internal to perform: a 404 returns CLI_NOT_FOUND unprinted. */
#define PERFORM_QUIET_NOT_FOUND (1u << 10)

/*
 * TLS from the environment: the CA to trust instead of the system's
 * ($KILN_CA, a PEM file), and the client certificate and key to show
 * ($KILN_CLIENT_CERT, $KILN_CLIENT_KEY) to a server that maps them to a
 * role. The server's certificate and host name are always verified.
 */
static void tls_options(CURL *curl)
{
	const char *ca = getenv("KILN_CA"), *cert = getenv("KILN_CLIENT_CERT"),
		   *key = getenv("KILN_CLIENT_KEY");

	curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
	curl_easy_setopt(curl, CURLOPT_SSLVERSION,
			 (long)CURL_SSLVERSION_TLSv1_2);
	if (ca && *ca)
		curl_easy_setopt(curl, CURLOPT_CAINFO, ca);
	if (cert && *cert) {
		curl_easy_setopt(curl, CURLOPT_SSLCERT, cert);
		curl_easy_setopt(curl, CURLOPT_SSLKEY,
				 key && *key ? key : cert);
	}
}

/* What to do about a TLS failure, after curl's own words (why). */
static const char *tls_hint(CURLcode cc, const char *why)
{
	/* Under TLS 1.3 a refused client certificate shows as an alert
	   on the first read. */
	if (cc == CURLE_RECV_ERROR && strstr(why, "alert"))
		cc = CURLE_SSL_CONNECT_ERROR;
	switch (cc) {
	case CURLE_PEER_FAILED_VERIFICATION:
		return " (the server's certificate is not trusted or does not "
		       "name this host: set KILN_CA to the PEM file of the CA "
		       "that signed it, see docs/tls.md)";
	case CURLE_SSL_CACERT_BADFILE:
		return " (KILN_CA must name a readable PEM file)";
	case CURLE_SSL_CERTPROBLEM:
		return " (KILN_CLIENT_CERT and KILN_CLIENT_KEY must name "
		       "readable PEM files)";
	case CURLE_SSL_CONNECT_ERROR:
		return " (the TLS handshake failed: a client certificate the "
		       "server refuses (see KILN_CLIENT_CERT), or a server "
		       "that speaks plain HTTP)";
	default:
		return "";
	}
}

/* How an exchange ended, whichever client made it. */
enum exchange_end {
	EXCHANGE_DONE,
	EXCHANGE_UNREACHABLE, /* no connection, or one that broke */
	EXCHANGE_LOST,        /* sent, and the answer may be lost */
	EXCHANGE_UNREADABLE,  /* an answer that is not HTTP as expected */
};

struct exchange {
	long status;
	enum exchange_end end;
	bool too_big;
	char why[CURL_ERROR_SIZE + 64];
	const char *hint;
};

struct request {
	const char *method, *path, *content_type, *body;
	size_t body_len;
	unsigned flags;
	bool want_json;
};

static void curl_exchange(struct cli_client *c, const struct request *rq,
			  struct answer *a, struct exchange *x)
{
	struct curl_answer ca = {.curl = c->curl, .a = a};
	struct curl_slist *headers;
	char *url = kn_asprintf("%s%s", c->base_url, rq->path);
	CURLcode cc;

	headers = request_headers(c, rq->body ? rq->content_type : NULL,
				  rq->want_json);
	if (rq->flags & PERFORM_KEYED) {
		char *line = kn_asprintf("Idempotency-Key: %s", c->idem_key);
		headers = add_header(headers, line);
		free(line);
	}
	curl_easy_reset(c->curl);
	c->errbuf[0] = '\0';
	kn_httpc_defaults(c->curl, (long)CLI_CONNECT_TIMEOUT_MS);
	tls_options(c->curl);
	curl_easy_setopt(c->curl, CURLOPT_URL, url);
	curl_easy_setopt(c->curl, CURLOPT_HTTP_VERSION,
			 (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS,
			 rq->flags & CLI_STREAM_UNBOUNDED
				 ? 0L
				 : (long)CLI_REQUEST_TIMEOUT_MS);
	if (rq->want_json)
		curl_easy_setopt(c->curl, CURLOPT_MAXFILESIZE_LARGE,
				 (curl_off_t)CLI_MAX_RESPONSE_BYTES);
	curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, c->errbuf);
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &ca);
	set_method(c->curl, rq->method, rq->body, rq->body_len);

	cc = curl_easy_perform(c->curl);
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &x->status);
	x->too_big = cc == CURLE_FILESIZE_EXCEEDED;
	if (cc != CURLE_OK && !x->too_big) {
		x->end = lost_answer(cc) ? EXCHANGE_LOST
					 : EXCHANGE_UNREACHABLE;
		snprintf(x->why, sizeof(x->why), "%s",
			 c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc));
		x->hint = tls_hint(cc, c->errbuf);
	}
	curl_slist_free_all(headers);
	free(url);
}

/* The header lines request_headers gives libcurl, as text. */
static char *plain_headers(const struct cli_client *c,
			   const struct request *rq)
{
	struct kn_buf h;

	kn_buf_init(&h, SIZE_MAX);
	kn_buf_printf(&h, "User-Agent: kiln/%s\r\n", KN_VERSION);
	if (c->token)
		kn_buf_printf(&h, "Authorization: Bearer %s\r\n", c->token);
	if (rq->want_json)
		kn_buf_printf(&h, "Accept: application/json\r\n");
	if (rq->body && rq->content_type)
		kn_buf_printf(&h, "Content-Type: %s\r\n", rq->content_type);
	if (rq->flags & PERFORM_KEYED)
		kn_buf_printf(&h, "Idempotency-Key: %s\r\n", c->idem_key);
	return h.data;
}

static void plain_exchange(struct cli_client *c, const struct request *rq,
			   struct answer *a, struct exchange *x)
{
	char *headers = plain_headers(c, rq);
	enum cli_plain_result r = cli_plain_request(
		c->plain_host, c->plain_port, rq->method, rq->path, headers,
		rq->body, rq->body_len,
		rq->flags & CLI_STREAM_UNBOUNDED ? 0 : CLI_REQUEST_TIMEOUT_MS,
		take_piece, a, &x->status, x->why, sizeof(x->why));

	free(headers);
	x->hint = "";
	switch (r) {
	case CLI_PLAIN_REFUSED:
		x->end = EXCHANGE_UNREACHABLE;
		break;
	case CLI_PLAIN_LOST:
		x->end = EXCHANGE_LOST;
		break;
	case CLI_PLAIN_BAD:
		x->end = EXCHANGE_UNREADABLE;
		break;
	default: /* stopped by take_piece: it says why */
		x->end = EXCHANGE_DONE;
	}
}

static int perform(struct cli_client *c, const char *method,
		   const char *path, const char *content_type,
		   const char *body, size_t body_len, FILE *sink,
		   unsigned stream_flags, json_t **out)
{
	struct answer a = {.sink = sink,
			   .inert = stream_flags & CLI_STREAM_INERT};
	struct request rq = {.method = method, .path = path,
			     .content_type = content_type, .body = body,
			     .body_len = body_len, .flags = stream_flags,
			     .want_json = !sink};
	struct exchange x = {0};
	int rc = 0;

	kn_buf_init(&a.body, CLI_MAX_RESPONSE_BYTES);
	if (c->plain)
		plain_exchange(c, &rq, &a, &x);
	else
		curl_exchange(c, &rq, &a, &x);
	/* A sequence the stream ended in the middle of is shown escaped. */
	if (a.streaming && a.n_held && !a.sink_errno)
		write_inert(&a, "", 0, false);
	if (a.sink_errno) {
		fprintf(stderr, "kiln: cannot write the output: %s\n",
			strerror(a.sink_errno));
		rc = CLI_EXIT_FAIL;
	} else if (a.too_big || x.too_big) {
		fprintf(stderr,
			"kiln: the server's answer is larger than %d MiB\n",
			CLI_MAX_RESPONSE_BYTES >> 20);
		rc = CLI_EXIT_FAIL;
	} else if (x.end == EXCHANGE_LOST &&
		   (stream_flags & PERFORM_QUIET_LOST)) {
		rc = PERFORM_LOST;
	} else if (x.end == EXCHANGE_UNREADABLE) {
		fprintf(stderr, "kiln: cannot read the answer of the server "
				"at %s: %s\n",
			c->base_url, x.why);
		rc = CLI_EXIT_FAIL;
	} else if (x.end != EXCHANGE_DONE) {
		fprintf(stderr, "kiln: %s the server at %s: %s%s\n",
			x.status || (c->plain && x.end == EXCHANGE_LOST)
				? "lost the connection to"
				: "cannot reach",
			c->base_url, x.why, x.hint);
		rc = CLI_EXIT_UNREACHABLE;
	} else if (x.status == 404 &&
		   (stream_flags & PERFORM_QUIET_NOT_FOUND)) {
		rc = CLI_NOT_FOUND;
	} else if (x.status < 200 || x.status >= 300) {
		print_api_error(c, x.status, &a.body);
		rc = CLI_EXIT_FAIL;
	} else if (out) {
		json_error_t jerr;
		*out = json_loadb(a.body.data ? a.body.data : "", a.body.len, 0,
				  &jerr);
		if (!*out) {
			fprintf(stderr,
				"kiln: the server's answer is not JSON: %s\n",
				jerr.text);
			rc = CLI_EXIT_FAIL;
		}
	}
	kn_buf_release(&a.body);
	return rc;
}

/* ---- upgraded sessions ---- */

/* The answer's head, and what came behind it, bounded. */
#define UPGRADE_HEAD_MAX (64 * 1024)

int cli_conn_wait(void *conn, bool writing, int timeout_ms)
{
	curl_socket_t fd = CURL_SOCKET_BAD;
	struct pollfd p;

	curl_easy_getinfo(conn, CURLINFO_ACTIVESOCKET, &fd);
	p = (struct pollfd){fd, (short)(writing ? POLLOUT : POLLIN), 0};
	return poll(&p, 1, timeout_ms);
}

int cli_conn_send(void *conn, const void *data, size_t len)
{
	const char *p = data;

	while (len) {
		size_t n = 0;
		CURLcode cc = curl_easy_send(conn, p, len, &n);
		if (cc == CURLE_AGAIN) {
			if (cli_conn_wait(conn, true, -1) < 0 && errno != EINTR)
				return -1;
			continue;
		}
		if (cc != CURLE_OK)
			return -1;
		p += n;
		len -= n;
	}
	return 0;
}

/* The answer's head into b, then the rest of its body if it has one. */
static int read_answer(void *conn, struct kn_buf *b, size_t *head_len)
{
	char buf[16384], *end = NULL;

	while (!end) {
		size_t n = 0;
		CURLcode cc = curl_easy_recv(conn, buf, sizeof(buf), &n);
		if (cc == CURLE_AGAIN) {
			if (cli_conn_wait(conn, false, CLI_REQUEST_TIMEOUT_MS) <= 0)
				return -1;
			continue;
		}
		if (cc != CURLE_OK || n == 0 || kn_buf_append(b, buf, n) < 0)
			return -1;
		end = memmem(b->data, b->len, "\r\n\r\n", 4);
	}
	*head_len = (size_t)(end - b->data) + 4;
	return 0;
}

/* The Content-Length of an answer's head (head_len bytes at head, split
   in place), or -1 where it gives none that is valid. */
static int64_t head_content_length(char *head, size_t head_len)
{
	char *p = memchr(head, '\n', head_len), *name, *value;
	int64_t n = -1;

	if (!p)
		return -1;
	for (p++; kn_http_field_next(&p, head + head_len, &name, &value) > 0;)
		if (!strcasecmp(name, "Content-Length") &&
		    kn_http_content_length(value, strlen(value), &n) < 0)
			return -1;
	return n;
}

/* A refusal's JSON body: its Content-Length bytes, since the server may
   keep the connection open for another request; without one, up to the
   connection's close. */
static void read_rest(void *conn, struct kn_buf *b, int64_t length)
{
	char buf[16384];

	while (length < 0 || b->len < (uint64_t)length) {
		size_t n = 0;
		CURLcode cc = curl_easy_recv(conn, buf, sizeof(buf), &n);
		if (cc == CURLE_AGAIN) {
			if (cli_conn_wait(conn, false, 2000) <= 0)
				return;
			continue;
		}
		if (cc != CURLE_OK || n == 0 || kn_buf_append(b, buf, n) < 0)
			return;
	}
}

int cli_client_upgrade(struct cli_client *c, const char *method,
		       const char *path, const char *protocol, void **conn,
		       char **early, size_t *n_early)
{
	CURL *h = curl_easy_init();
	const char *host = strstr(c->base_url, "://");
	struct kn_buf answer, body;
	char *url = kn_asprintf("%s%s", c->base_url, path), *request;
	size_t head_len = 0;
	long status = 0;
	CURLcode cc;
	int rc = CLI_EXIT_UNREACHABLE;

	kn_buf_init(&answer, UPGRADE_HEAD_MAX);
	kn_buf_init(&body, UPGRADE_HEAD_MAX);
	if (!h) {
		fputs("kiln: cannot start libcurl\n", stderr);
		free(url);
		return CLI_EXIT_FAIL;
	}
	kn_httpc_defaults(h, (long)CLI_CONNECT_TIMEOUT_MS);
	tls_options(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
	c->errbuf[0] = '\0';
	request = kn_asprintf(
		"%s %s HTTP/1.1\r\nHost: %s\r\n%s%s%sConnection: Upgrade\r\n"
		"Upgrade: %s\r\n\r\n",
		method, path, host ? host + 3 : c->base_url,
		c->token ? "Authorization: Bearer " : "",
		c->token ? c->token : "", c->token ? "\r\n" : "", protocol);
	if ((cc = curl_easy_perform(h)) != CURLE_OK) {
		fprintf(stderr, "kiln: cannot reach the server at %s: %s%s\n",
			c->base_url,
			c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc),
			tls_hint(cc, c->errbuf));
	} else if (cli_conn_send(h, request, strlen(request)) < 0 ||
		   read_answer(h, &answer, &head_len) < 0 ||
		   sscanf(answer.data, "HTTP/1.%*d %ld", &status) != 1) {
		fprintf(stderr, "kiln: lost the connection to the server at "
				"%s\n", c->base_url);
	} else if (status != 101) {
		kn_buf_append(&body, answer.data + head_len,
			      answer.len - head_len);
		read_rest(h, &body, head_content_length(answer.data,
							 head_len));
		print_api_error(c, status, &body);
		rc = CLI_EXIT_FAIL;
	} else {
		*n_early = answer.len - head_len;
		*early = kn_xmalloc(*n_early + 1);
		memcpy(*early, answer.data + head_len, *n_early);
		*conn = h;
		h = NULL;
		rc = 0;
	}
	curl_easy_cleanup(h);
	kn_buf_release(&answer);
	kn_buf_release(&body);
	KN_FREE_ALL(request, url);
	return rc;
}

int cli_call(struct cli_client *c, const char *method, const char *path,
	     const char *content_type, const char *body, size_t body_len,
	     json_t **out)
{
	return perform(c, method, path, content_type, body, body_len, NULL, 0,
		       out);
}

int cli_create(struct cli_client *c, const char *path,
	       const char *content_type, const char *body, size_t body_len,
	       json_t **out)
{
	unsigned char raw[16];
	int rc;

	if (kn_random_bytes(raw, sizeof(raw)) < 0) {
		fprintf(stderr, "kiln: no random bytes for an Idempotency-Key: "
				"%s\n",
			strerror(errno));
		return CLI_EXIT_FAIL;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(c->idem_key + 2 * i, 3, "%02x", raw[i]);
	rc = perform(c, "POST", path, content_type, body, body_len, NULL,
		     PERFORM_KEYED | PERFORM_QUIET_LOST, out);
	if (rc != PERFORM_LOST)
		return rc;
	/* Under the same key: a create that did happen is answered, not
	   made twice. */
	return perform(c, "POST", path, content_type, body, body_len, NULL,
		       PERFORM_KEYED, out);
}

int cli_call_quiet(struct cli_client *c, unsigned quiet, const char *method,
		   const char *path, const char *content_type,
		   const char *body, size_t body_len, json_t **out)
{
	unsigned flags = 0;

	if (quiet & CLI_QUIET_LOST)
		flags |= PERFORM_QUIET_LOST;
	if (quiet & CLI_QUIET_NOT_FOUND)
		flags |= PERFORM_QUIET_NOT_FOUND;
	return perform(c, method, path, content_type, body, body_len, NULL,
		       flags, out);
}

int cli_get(struct cli_client *c, const char *path, json_t **out)
{
	return perform(c, "GET", path, NULL, NULL, 0, NULL, 0, out);
}

int cli_post_json(struct cli_client *c, const char *path, json_t *doc,
		  json_t **out)
{
	char *body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	int rc = cli_call(c, "POST", path, "application/json",
			  body ? body : "{}", body ? strlen(body) : 2, out);

	free(body);
	return rc;
}

int cli_get_after(struct cli_client *c, int pause_ms, const char *path,
		  json_t **out)
{
	struct timespec pause = {pause_ms / 1000,
				 (long)(pause_ms % 1000) * 1000000L};

	nanosleep(&pause, NULL);
	json_decref(*out);
	*out = NULL;
	return cli_get(c, path, out);
}

int cli_job_element(struct cli_client *c, int64_t id, int64_t index,
		    int64_t *out)
{
	char *path = kn_asprintf("/v1/jobs/%lld?index=%lld", (long long)id,
				 (long long)index);
	json_t *answer = NULL;
	int rc = cli_get(c, path, &answer);

	free(path);
	if (rc == 0)
		*out = cli_json_int(json_object_get(answer, "job"), "id");
	json_decref(answer);
	return rc;
}

int cli_stream(struct cli_client *c, const char *path, FILE *sink,
	       unsigned flags)
{
	return perform(c, "GET", path, NULL, NULL, 0, sink, flags, NULL);
}

/*
 * Paths are built in buffers whose cap is SIZE_MAX, so appends cannot
 * fail; what bounds them is the command line they come from.
 */
void cli_query_add(struct kn_buf *path, const char *key, const char *value)
{
	if (!value)
		return;
	kn_buf_printf(path, "%c%s=",
		      path->data && strchr(path->data, '?') ? '&' : '?', key);
	kn_buf_append_url_encoded(path, value, false);
}

void cli_path_add(struct kn_buf *path, const char *segment)
{
	kn_buf_append(path, "/", 1);
	kn_buf_append_url_encoded(path, segment, false);
}

void cli_path_object(struct kn_buf *path, const char *collection,
		     const char *name, const char *suffix)
{
	kn_buf_printf(path, "%s", collection);
	cli_path_add(path, name);
	kn_buf_printf(path, "%s", suffix);
}

int cli_post_spec(struct cli_client *c, const char *collection,
		  const char *file, const char *name, const char *text,
		  size_t len, json_t **answer)
{
	struct kn_buf path;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	kn_buf_printf(&path, "%s", collection);
	cli_query_add(&path, "file", name);
	if (strcmp(file, "-") != 0) {
		char *abs = realpath(file, NULL);
		if (abs)
			cli_query_add(&path, "path", abs);
		free(abs);
	}
	rc = cli_create(c, path.data, "application/yaml", text, len, answer);
	kn_buf_release(&path);
	return rc;
}

int cli_parse_open(struct cli_ctx *ctx, int argc, char **argv,
		   const struct cli_flag *flags, const char *positional,
		   const char **arg, struct cli_client **c)
{
	int rc = cli_parse(ctx, argc, argv, flags, positional, arg);

	*c = NULL;
	if (rc != CLI_GO)
		return rc;
	rc = cli_client_open(ctx, c);
	return rc ? rc : CLI_GO;
}

int cli_get_listing(struct cli_ctx *ctx, int argc, char **argv,
		    const char *path, json_t **answer)
{
	struct cli_client *c;
	int rc;

	*answer = NULL;
	rc = cli_parse_open(ctx, argc, argv, NULL, NULL, NULL, &c);
	if (rc != CLI_GO)
		return rc;
	rc = cli_get(c, path, answer);
	cli_client_free(c);
	return rc ? rc : cli_answer_json(ctx, answer);
}

int cli_list_table(struct cli_ctx *ctx, int argc, char **argv,
		   const char *path, const char *key,
		   const char *const *headers,
		   void (*row)(struct cli_table *t, json_t *item, int64_t now))
{
	struct cli_table *t;
	json_t *answer, *item;
	int64_t now = kn_now_ms();
	size_t i;
	int rc = cli_get_listing(ctx, argc, argv, path, &answer);

	if (rc != CLI_GO)
		return rc;
	t = cli_table_new(headers);
	json_array_foreach(json_object_get(answer, key), i, item)
		row(t, item, now);
	cli_table_show(ctx, t, stdout, 0);
	cli_table_free(t);
	json_decref(answer);
	return CLI_EXIT_OK;
}

int cli_answer_json(const struct cli_ctx *ctx, json_t **answer)
{
	if (!cli_want_json(ctx))
		return CLI_GO;
	cli_print_data(ctx, *answer);
	json_decref(*answer);
	*answer = NULL;
	return CLI_EXIT_OK;
}

int cli_get_answer(const struct cli_ctx *ctx, struct cli_client *c,
		   const char *path, json_t **answer)
{
	int rc = cli_get(c, path, answer);

	return rc ? rc : cli_answer_json(ctx, answer);
}

int cli_delete_named(struct cli_ctx *ctx, int argc, char **argv,
		     const char *collection, const char *done)
{
	struct cli_client *c = NULL;
	const char *name = NULL;
	struct kn_buf path;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse_open(ctx, argc, argv, NULL, "NAME", &name, &c);
	if (rc != CLI_GO)
		goto out;
	cli_path_object(&path, collection, name, "");
	rc = cli_call(c, "DELETE", path.data, NULL, NULL, 0, NULL);
	if (rc == 0)
		printf(done, name);
out:
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}

int cli_answer_text(json_t *answer, const char *key, const char *what,
		    const char **out)
{
	*out = json_string_value(json_object_get(answer, key));
	if (*out)
		return 0;
	fprintf(stderr, "kiln: the server's answer has no %s\n", what);
	return CLI_EXIT_FAIL;
}

int cli_create_secret(struct cli_ctx *ctx, const char *collection,
		      json_t *request, const char *not_text, const char *fmt,
		      ...)
{
	struct cli_client *c = NULL;
	json_t *answer = NULL;
	const char *secret;
	char *body;
	va_list ap;
	int rc;

	/* json_pack refuses text that is not UTF-8, leaving request NULL. */
	body = request ? json_dumps(request, JSON_COMPACT) : NULL;
	if (!body)
		return cli_usage_error(ctx, "%s", not_text);
	rc = cli_client_open(ctx, &c);
	if (rc == 0)
		rc = cli_call(c, "POST", collection, "application/json", body,
			      strlen(body), &answer);
	if (rc == 0)
		rc = cli_answer_text(answer, "secret", "secret", &secret);
	if (rc)
		goto out;
	printf("%s\n", secret);
	fflush(stdout);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("; keep the secret above: it will not be shown again\n", stderr);
out:
	free(body);
	json_decref(answer);
	cli_client_free(c);
	return rc;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The exit status for a terminal state, or CLI_GO while the work goes on. */
static int exit_for_state(const char *state)
{
	if (!strcmp(state, "succeeded"))
		return CLI_EXIT_OK;
	if (!strcmp(state, "failed"))
		return CLI_EXIT_JOB_FAILED;
	if (!strcmp(state, "cancelled"))
		return CLI_EXIT_JOB_CANCELLED;
	return CLI_GO;
}

static int ended(json_t *obj, void *arg)
{
	(void)arg;
	return exit_for_state(cli_json_str(obj, "state"));
}

int cli_wait_done(struct cli_client *c, const char *path, const char *key,
		  const char *noun, json_t *current, json_t **last)
{
	return cli_wait_until(c, path, key, noun, current, ended, NULL, last);
}

int cli_wait_until(struct cli_client *c, const char *path, const char *key,
		   const char *noun, json_t *current,
		   int (*done)(json_t *obj, void *arg), void *arg,
		   json_t **last)
{
	json_t *answer = NULL;
	int delay = WAIT_FIRST_POLL_MS;
	int rc;

	for (;;) {
		rc = done(current, arg);
		if (rc != CLI_GO)
			break;
		sleep_ms(delay);
		delay = delay * 2 > WAIT_MAX_POLL_MS ? WAIT_MAX_POLL_MS
						     : delay * 2;
		json_decref(answer);
		answer = NULL;
		rc = cli_get(c, path, &answer);
		if (rc)
			goto out;
		current = json_object_get(answer, key);
		if (!json_is_object(current)) {
			fprintf(stderr, "kiln: the server's answer has no %s\n",
				noun);
			rc = CLI_EXIT_FAIL;
			goto out;
		}
	}
	*last = json_incref(current);
out:
	json_decref(answer);
	return rc;
}
