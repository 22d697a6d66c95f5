/*
 * The CLI's plain HTTP/1.1 client for a server on this machine's loopback
 * (http://127.0.0.1, http://[::1], http://localhost): no TLS, one
 * connection per request, so the commands users run in loops never load
 * libcurl (cli_client.c picks it; libcurl serves every other URL).
 */
#ifndef KILN_CLI_PLAIN_H
#define KILN_CLI_PLAIN_H

#include <stdbool.h>
#include <stddef.h>

/* Called with each piece of the body as it arrives, after the status is
   known; 0 to go on, -1 to stop (cli_plain_request then says so). */
typedef int (*cli_plain_sink)(void *arg, long status, const char *data,
			      size_t len);

enum cli_plain_result {
	CLI_PLAIN_OK,
	CLI_PLAIN_REFUSED, /* no connection: nothing was sent */
	CLI_PLAIN_LOST,    /* sent; the answer broke off, or timed out */
	CLI_PLAIN_STOPPED, /* the sink asked to stop */
	CLI_PLAIN_BAD,     /* the answer is not HTTP/1.x as this reads it */
};

/*
 * Whether url is plain http to a loopback host with a port: its host
 * (the address to connect to, brackets stripped) into host, its port.
 */
bool cli_plain_url(const char *url, char *host, size_t host_len, int *port);

/*
 * Send method target (origin-form) with the header lines in headers
 * (each "Name: value\r\n", or NULL) and body, to host:port; the answer's
 * body goes to sink. timeout_ms bounds the exchange (0: none after the
 * connect, which has its own): the answer must be whole within it from
 * the start, and sending fails once the server takes nothing for as
 * long. *status gets the answer's status
 * (0 before one came); why says what went wrong, in words.
 */
enum cli_plain_result cli_plain_request(const char *host, int port,
					const char *method, const char *target,
					const char *headers, const char *body,
					size_t body_len, int timeout_ms,
					cli_plain_sink sink, void *arg,
					long *status, char *why, size_t why_len);

/* The reading half, on a connected fd (for tests): the answer to one
   request, through sink, until the body ends. */
enum cli_plain_result cli_plain_read_answer(int fd, long deadline_ms,
					    cli_plain_sink sink, void *arg,
					    long *status, char *why,
					    size_t why_len);

#endif
