/*
 * client: the CLI's blocking HTTP client for the kiln API (libcurl easy
 * interface; the CLI has no event loop).
 *
 * It finds the server and the token the way `kiln --help` documents,
 * sends requests with the token as a bearer credential (never printing
 * it), and turns every failure into one line on stderr:
 *
 *     kiln: invalid_argument: job.yaml:7:9: resources.gpus: must be ...
 *
 * Calls return 0 or the exit status to give back (CLI_EXIT_FAIL for an
 * API error or a bad answer, CLI_EXIT_UNREACHABLE when no server is
 * configured or none answers), so a command can `return rc` as it is.
 *
 * Limits: 5 s to connect; 60 s per request unless the caller asks for no
 * limit (following logs); buffered answers at most 64 MiB. Redirects are
 * not followed: the API never sends one.
 */
#ifndef KILN_CMD_CLI_CLIENT_H
#define KILN_CMD_CLI_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "base/base.h"
#include "cmd/cli.h"

#define CLI_CONNECT_TIMEOUT_MS 5000
#define CLI_REQUEST_TIMEOUT_MS 60000
/* Bounds memory for an answer held whole; streamed logs are not held. */
#define CLI_MAX_RESPONSE_BYTES (64 * 1024 * 1024)

struct cli_client;

/*
 * The kiln data directory: $KILN_HOME, else ~/.kiln. Malloc'd.
 */
char *cli_kiln_home(void);

/*
 * Find the server (--server, $KILN_SERVER, $KILN_HOME/server.url) and the
 * token (--token, $KILN_TOKEN, $KILN_HOME/admin.token; none is allowed,
 * the server then answers 401 and the message says where a token comes
 * from). Returns 0 with *out set, or an exit status after printing why.
 */
int cli_client_open(const struct cli_ctx *ctx, struct cli_client **out);
void cli_client_free(struct cli_client *c);
/* The server's base URL ("http://127.0.0.1:7070"), as found. */
const char *cli_client_url(const struct cli_client *c);

/*
 * The server URL and the token as cli_client_open finds them, with home
 * as $KILN_HOME, for a process that talks to the server by other means
 * (`kiln gateway` polls it from its event loop). *token may be NULL (none
 * found). Returns 0, or an exit status after printing why.
 */
int cli_find_credentials(const struct cli_ctx *ctx, const char *home,
			 char **server, char **token);

/*
 * Send method (GET, POST, DELETE) to path ("/v1/jobs?state=queued"), with
 * body of body_len bytes and content_type when body is not NULL. On a 2xx
 * answer, returns 0 and, when out is not NULL, sets *out to the parsed
 * JSON (a new reference). Otherwise prints one line and returns the exit
 * status.
 */
int cli_call(struct cli_client *c, const char *method, const char *path,
	     const char *content_type, const char *body, size_t body_len,
	     json_t **out);

/*
 * An upgraded session (docs/api.md, "Interactive sessions"): method and
 * path with Connection: Upgrade to protocol. On 101 returns 0 with *conn,
 * a libcurl CONNECT_ONLY handle (curl_easy_send and curl_easy_recv; free
 * with curl_easy_cleanup), and the bytes that came behind the answer's
 * head in *early (malloc'd, *n_early of them). Otherwise prints why (the
 * API's error) and returns the exit status.
 */
int cli_client_upgrade(struct cli_client *c, const char *method,
		       const char *path, const char *protocol, void **conn,
		       char **early, size_t *n_early);
/* Wait until conn's socket is writable (or readable): poll's answer. */
int cli_conn_wait(void *conn, bool writing, int timeout_ms);
/* Send all of data on conn, waiting as needed: 0, or -1 when it broke. */
int cli_conn_send(void *conn, const void *data, size_t len);

/*
 * POST a create (a job, a deployment, a workflow run, a model version)
 * with a fresh random Idempotency-Key; when the connection is lost
 * before the answer (reset, closed, silent), send it once more with the
 * same key, so a create that reached the server is answered and not
 * made twice. Returns as cli_call.
 */
int cli_create(struct cli_client *c, const char *path,
	       const char *content_type, const char *body, size_t body_len,
	       json_t **out);
/* What cli_call_quiet returns, unprinted, for the answers quiet names. */
#define CLI_LOST (-1)      /* the answer was lost (see cli_create) */
#define CLI_NOT_FOUND (-2) /* 404 */
enum cli_quiet {
	CLI_QUIET_LOST = 1 << 0,
	CLI_QUIET_NOT_FOUND = 1 << 1,
};
/*
 * cli_call for a caller that handles some answers itself (one that asks
 * what the server holds and sends again): those quiet names return
 * CLI_LOST or CLI_NOT_FOUND without a word; the rest as cli_call.
 */
int cli_call_quiet(struct cli_client *c, unsigned quiet, const char *method,
		   const char *path, const char *content_type,
		   const char *body, size_t body_len, json_t **out);
/* cli_call for a GET without a body. */
int cli_get(struct cli_client *c, const char *path, json_t **out);
/* cli_call POSTing doc (borrowed; NULL: an empty object) as JSON. */
int cli_post_json(struct cli_client *c, const char *path, json_t *doc,
		  json_t **out);
/*
 * A poll's next look: wait pause_ms, release the answer *out held, then
 * cli_get path into it.
 */
int cli_get_after(struct cli_client *c, int pause_ms, const char *path,
		  json_t **out);
/* The job id of element index of job array id, asked of the server. */
int cli_job_element(struct cli_client *c, int64_t id, int64_t index,
		    int64_t *out);

enum cli_stream_flags {
	CLI_STREAM_UNBOUNDED = 1 << 0, /* no time limit (a followed stream) */
	/* For a person's terminal: control characters but \n and \t, and
	   bytes that are not UTF-8, shown escaped (kn_text_escape). */
	CLI_STREAM_INERT = 1 << 1,
};
/*
 * GET path and write a 2xx answer to sink as it arrives (flushed after
 * each piece), as flags say. Same returns as cli_call.
 */
int cli_stream(struct cli_client *c, const char *path, FILE *sink,
	       unsigned flags);

/*
 * Append "?key=value" or "&key=value" to a URL path, percent-encoding
 * value. Nothing is appended when value is NULL.
 */
void cli_query_add(struct kn_buf *path, const char *key, const char *value);

/* Append a percent-encoded path segment (a token name) to path. */
void cli_path_add(struct kn_buf *path, const char *segment);
/*
 * Append an object's path to path: collection ("/v1/nodes"), name as a
 * percent-encoded segment, then suffix ("/drain", or "" for the object).
 */
void cli_path_object(struct kn_buf *path, const char *collection,
		     const char *name, const char *suffix);

/*
 * POST a spec's text to collection ("/v1/jobs"), with the name it is
 * known by in messages and, for a file on disk, its absolute path (where
 * a relative workdir starts). Returns as cli_call.
 */
int cli_post_spec(struct cli_client *c, const char *collection,
		  const char *file, const char *name, const char *text,
		  size_t len, json_t **answer);

/*
 * cli_parse, then cli_client_open: CLI_GO with *c set, or the exit status
 * to give back (CLI_EXIT_OK after --help) with *c NULL.
 */
int cli_parse_open(struct cli_ctx *ctx, int argc, char **argv,
		   const struct cli_flag *flags, const char *positional,
		   const char **arg, struct cli_client **c);
/*
 * A listing command with no arguments of its own: parse the global flags,
 * GET path and, with -o json, print the answer as it is. Returns CLI_GO
 * with *answer set when the caller is to print it for humans (the caller
 * frees it), or the exit code once nothing is left to do.
 */
int cli_get_listing(struct cli_ctx *ctx, int argc, char **argv,
		    const char *path, json_t **answer);
/*
 * `kiln token ls` and the like: cli_get_listing path, then for humans a
 * table of headers with a row for each element of the answer's array
 * key, its cells added by row (now: when the listing came, for ages).
 * Returns the exit code.
 */
int cli_list_table(struct cli_ctx *ctx, int argc, char **argv,
		   const char *path, const char *key,
		   const char *const *headers,
		   void (*row)(struct cli_table *t, json_t *item, int64_t now));
/*
 * An answer that came: with -o json printed as it is and released
 * (*answer NULL, CLI_EXIT_OK), else left to the caller to describe
 * (CLI_GO).
 */
int cli_answer_json(const struct cli_ctx *ctx, json_t **answer);
/* cli_get path into *answer, then as cli_answer_json. */
int cli_get_answer(const struct cli_ctx *ctx, struct cli_client *c,
		   const char *path, json_t **answer);

/*
 * `kiln token revoke NAME` and the like: read NAME from argv, DELETE
 * collection/NAME, and once that is done print done (a format taking
 * NAME) on stdout. Returns as cli_call (or a usage exit status, or 0
 * after --help).
 */
int cli_delete_named(struct cli_ctx *ctx, int argc, char **argv,
		     const char *collection, const char *done);
/*
 * The text under key in an answer: 0 with *out set (borrowed from answer),
 * or CLI_EXIT_FAIL after saying the answer has no what.
 */
int cli_answer_text(json_t *answer, const char *key, const char *what,
		    const char **out);
/*
 * `kiln token create` and the like: POST request (borrowed; NULL when
 * json_pack refused text that is not UTF-8, which is then a usage error
 * saying not_text) to collection and print the answer's secret alone on
 * stdout, so it can be piped into a file; then, on stderr where it cannot
 * end up in that file, what was created (fmt) and that the secret will
 * not be shown again. Returns as cli_call.
 */
int cli_create_secret(struct cli_ctx *ctx, const char *collection,
		      json_t *request, const char *not_text, const char *fmt,
		      ...) __attribute__((format(printf, 5, 6)));

/*
 * `kiln submit --wait`, `kiln workflow run --wait`: poll path until the
 * object under key in its answer ("job", "workflow") reaches a terminal
 * state, starting from current as the caller already has it (borrowed).
 * Polls rather than holding a connection open (the work may run for days
 * and the server may restart meanwhile); they start at 50 ms, so short
 * work returns promptly, and back off to one a second. Returns
 * CLI_EXIT_OK (succeeded), CLI_EXIT_JOB_FAILED or CLI_EXIT_JOB_CANCELLED
 * with *last set to the final object (a new reference), or another exit
 * status after printing why (an answer without the object names noun).
 */
int cli_wait_done(struct cli_client *c, const char *path, const char *key,
		  const char *noun, json_t *current, json_t **last);
/*
 * As cli_wait_done, until done(object, arg) gives an exit status rather
 * than CLI_GO (`kiln logs -f` waits for a queued job to start).
 */
int cli_wait_until(struct cli_client *c, const char *path, const char *key,
		   const char *noun, json_t *current,
		   int (*done)(json_t *obj, void *arg), void *arg,
		   json_t **last);

#endif
