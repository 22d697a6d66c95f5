/*
 * Unit tests for the CLI's plain loopback HTTP client: which URLs it
 * takes, and how it reads answers (a length, chunks, until close), and
 * the malformed ones it refuses rather than guesses at, each written
 * into one end of a socket pair; and whole requests to a loopback
 * listener, whose bodies arrive byte for byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "base/tests/testmain.h"
#include "cmd/cli_plain.h"

static void test_loopback_urls_only(void **state)
{
	static const struct {
		const char *url, *host;
		int port; /* 0: not taken */
	} cases[] = {
		{"http://127.0.0.1:8080", "127.0.0.1", 8080},
		{"http://[::1]:9/", "::1", 9},
		{"http://localhost:1", "localhost", 1},
		{"http://127.9.9.9:80", "127.9.9.9", 80},
		/* Everything else stays with libcurl. */
		{"https://127.0.0.1:8080", NULL, 0},
		{"http://10.0.0.1:8080", NULL, 0},
		{"http://example.com:80", NULL, 0},
		{"http://127.0.0.1:8080/kiln", NULL, 0},
		{"http://127.0.0.1", NULL, 0},
		{"http://127.0.0.1:0", NULL, 0},
		{"http://127.0.0.1:99999", NULL, 0},
		{"http://127.0.0.1@evil:80", NULL, 0},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char host[64] = "";
		int port = 0;
		bool taken = cli_plain_url(cases[i].url, host, sizeof(host),
					   &port);

		assert_int_equal(taken, cases[i].port != 0);
		if (!taken)
			continue;
		assert_string_equal(host, cases[i].host);
		assert_int_equal(port, cases[i].port);
	}
}

struct got {
	struct kn_buf body;
	long status;
	int stop_after; /* pieces; 0: never stop */
	int pieces;
};

static int collect(void *arg, long status, const char *data, size_t len)
{
	struct got *g = arg;

	g->status = status;
	kn_buf_append(&g->body, data, len);
	return g->stop_after && ++g->pieces >= g->stop_after ? -1 : 0;
}

/* The answer raw, read back as the client reads it. */
static enum cli_plain_result read_raw(const char *raw, struct got *g,
				      long *status, char *why, size_t why_len)
{
	int sv[2];
	enum cli_plain_result rc;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(write(sv[1], raw, strlen(raw)), (ssize_t)strlen(raw));
	close(sv[1]);
	kn_buf_init(&g->body, SIZE_MAX);
	rc = cli_plain_read_answer(sv[0], kn_mono_ms() + 10000, collect, g,
				   status, why, why_len);
	close(sv[0]);
	return rc;
}

/* Each framing the client reads, and each it refuses with a reason
   (CLI_PLAIN_LOST where the answer may have been cut off). */
static void test_framing(void **state)
{
	static const struct {
		const char *raw;
		enum cli_plain_result rc;
		long status;
		const char *body;
	} cases[] = {
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello+extra",
		 CLI_PLAIN_OK, 200, "hello"},
		{"HTTP/1.1 201 Created\r\ncontent-length:2\r\n\r\n{}",
		 CLI_PLAIN_OK, 201, "{}"},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "3\r\nabc\r\nA;ext=1\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n",
		 CLI_PLAIN_OK, 200, "abc0123456789"},
		{"HTTP/1.0 404 Not Found\r\n\r\nuntil close", CLI_PLAIN_OK,
		 404, "until close"},
		{"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n",
		 CLI_PLAIN_OK, 204, ""},
		{"HTTP/2 200 OK\r\n\r\n", CLI_PLAIN_BAD, 0, NULL},
		{"HTTP/1.1 20 OK\r\n\r\n", CLI_PLAIN_BAD, 0, NULL},
		{"HTTP/1.1 200 OK\nContent-Length: 1\n\nx", CLI_PLAIN_LOST, 0,
		 NULL},
		{"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1"
		 "\r\n\r\nx", CLI_PLAIN_BAD, 0, NULL},
		{"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		 CLI_PLAIN_BAD, 0, NULL},
		{"HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n"
		 "\r\n", CLI_PLAIN_BAD, 0, NULL},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		 CLI_PLAIN_BAD, 0, NULL},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
		 "Content-Length: 3\r\n\r\n", CLI_PLAIN_BAD, 0, NULL},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "zz\r\n", CLI_PLAIN_BAD, 0, NULL},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "1000000000000000\r\n", CLI_PLAIN_BAD, 0, NULL},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "3\r\nabcX\r\n0\r\n\r\n", CLI_PLAIN_BAD, 0, NULL},
		{"HTTP/1.1 200 OK\r\n: no name\r\n\r\n", CLI_PLAIN_BAD, 0,
		 NULL},
		/* Cut off: the answer may be lost, never taken as whole. */
		{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		 CLI_PLAIN_LOST, 0, NULL},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "5\r\nab", CLI_PLAIN_LOST, 0, NULL},
		{"HTTP/1.1 200", CLI_PLAIN_LOST, 0, NULL},
		{"", CLI_PLAIN_LOST, 0, NULL},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct got g = {0};
		char why[128] = "";
		long status;

		assert_int_equal(read_raw(cases[i].raw, &g, &status, why,
					  sizeof(why)),
				 cases[i].rc);
		if (cases[i].rc != CLI_PLAIN_OK) {
			assert_true(why[0] != '\0');
		} else {
			assert_int_equal(status, cases[i].status);
			assert_int_equal(g.body.len, strlen(cases[i].body));
			assert_memory_equal(g.body.data ? g.body.data : "",
					    cases[i].body, g.body.len);
		}
		kn_buf_release(&g.body);
	}
}

/* A head longer than the client holds is refused, not grown without
   bound; a sink that stops ends the read. */
static void test_bounds(void **state)
{
	struct kn_buf raw;
	struct got g = {0};
	char why[128];
	long status;
	(void)state;

	kn_buf_init(&raw, SIZE_MAX);
	kn_buf_printf(&raw, "HTTP/1.1 200 OK\r\n");
	for (int i = 0; i < 2000; i++)
		kn_buf_printf(&raw, "X-Filler-%d: %040d\r\n", i, i);
	kn_buf_printf(&raw, "\r\n");
	{
		int sv[2];
		pid_t pid;

		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		pid = fork();
		if (pid == 0) {
			close(sv[0]);
			(void)!write(sv[1], raw.data, raw.len);
			_exit(0);
		}
		close(sv[1]);
		kn_buf_init(&g.body, SIZE_MAX);
		assert_int_equal(cli_plain_read_answer(sv[0], kn_mono_ms() +
							       10000,
						       collect, &g, &status,
						       why, sizeof(why)),
				 CLI_PLAIN_BAD);
		close(sv[0]);
		kn_buf_release(&g.body);
		kn_buf_release(&raw);
		while (waitpid(pid, NULL, 0) < 0)
			;
	}
	g.stop_after = 1;
	assert_int_equal(read_raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: "
				  "chunked\r\n\r\n1\r\na\r\n1\r\nb\r\n0\r\n"
				  "\r\n",
				  &g, &status, why, sizeof(why)),
			 CLI_PLAIN_STOPPED);
	assert_int_equal(g.body.len, 1);
	kn_buf_release(&g.body);
}

/* The listener's side: read one request (head, then Content-Length
   bytes), answer 200 with the body's size and its first and last bytes
   if they are as sent, 400 if not. */
static void serve_one(int listener)
{
	struct kn_buf in;
	char chunk[65536], answer[128];
	int fd = accept(listener, NULL, NULL);
	size_t head = 0, want = 0, i;
	bool same = true;
	ssize_t n;

	kn_buf_init(&in, SIZE_MAX);
	while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
		const char *eoh, *cl;

		kn_buf_append(&in, chunk, (size_t)n);
		eoh = memmem(in.data, in.len, "\r\n\r\n", 4);
		if (!eoh)
			continue;
		head = (size_t)(eoh - in.data) + 4;
		cl = strstr(in.data, "Content-Length: ");
		want = cl ? strtoull(cl + 16, NULL, 10) : 0;
		if (in.len >= head + want)
			break;
	}
	for (i = 0; i < want && head + i < in.len; i++)
		same &= in.data[head + i] == (char)(i * 7);
	snprintf(answer, sizeof(answer),
		 "HTTP/1.1 %d X\r\nContent-Length: 0\r\n\r\n",
		 same && in.len == head + want ? 200 : 400);
	(void)!write(fd, answer, strlen(answer));
	close(fd);
	kn_buf_release(&in);
}

/* A body sent behind the head and one sent from the caller's buffer
   after it (over BODY_BEHIND_HEAD_MAX) both arrive whole. */
static void test_request_bodies(void **state)
{
	static const size_t sizes[] = {0, 1000, 64 * 1024 + 1, 3 << 20};
	(void)state;

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct sockaddr_in sa = {.sin_family = AF_INET};
		socklen_t sa_len = sizeof(sa);
		int listener = socket(AF_INET, SOCK_STREAM, 0);
		char *body = malloc(sizes[k] + 1), why[128];
		struct got g = {0};
		long status = 0;
		pid_t pid;

		for (size_t i = 0; i < sizes[k]; i++)
			body[i] = (char)(i * 7);
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_int_equal(bind(listener, (struct sockaddr *)&sa,
				      sizeof(sa)), 0);
		assert_int_equal(listen(listener, 1), 0);
		assert_int_equal(getsockname(listener, (struct sockaddr *)&sa,
					     &sa_len), 0);
		pid = fork();
		if (pid == 0) {
			serve_one(listener);
			_exit(0);
		}
		close(listener);
		kn_buf_init(&g.body, SIZE_MAX);
		assert_int_equal(cli_plain_request("127.0.0.1",
						   ntohs(sa.sin_port), "POST",
						   "/x", NULL, body, sizes[k],
						   10000, collect, &g, &status,
						   why, sizeof(why)),
				 CLI_PLAIN_OK);
		assert_int_equal(status, 200);
		kn_buf_release(&g.body);
		free(body);
		while (waitpid(pid, NULL, 0) < 0)
			;
	}
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_loopback_urls_only),
	cmocka_unit_test(test_framing),
	cmocka_unit_test(test_bounds),
	cmocka_unit_test(test_request_bodies))
