/*
 * Unit tests for loop: timers, the worker pool (work off the loop thread,
 * delivery on it, undelivered work at shutdown), the HTTP server and
 * client talking to each other on loopback, and a connection upgraded
 * into a tunnel (bytes behind the head, echo, back-pressure, its end).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/tests/testmain.h"
#include "loop/loop.h"

struct counter {
	struct kn_loop *loop;
	int fired;
	int stop_after;
};

static void count_and_stop(void *arg)
{
	struct counter *c = arg;
	if (++c->fired >= c->stop_after)
		kn_loop_stop(c->loop);
}

static void test_timer(void **state)
{
	struct counter c = {kn_loop_new(), 0, 1};
	struct kn_timer *t = kn_timer_new(c.loop, count_and_stop, &c);
	(void)state;

	kn_timer_arm(t, 10);
	assert_true(kn_timer_pending(t));
	assert_int_equal(kn_loop_run(c.loop), 0);
	assert_int_equal(c.fired, 1);
	assert_false(kn_timer_pending(t));
	kn_timer_free(t);
	kn_loop_free(c.loop);
}

struct job {
	struct kn_loop *loop;
	pthread_t worker_thread;
	pthread_t done_thread;
	int ran, done, not_ran;
	int *all_done;
	int total;
};

static void work(void *arg)
{
	struct job *j = arg;
	j->worker_thread = pthread_self();
	usleep(1000);
	j->ran = 1;
}

static void done(void *arg, bool ran)
{
	struct job *j = arg;
	j->done_thread = pthread_self();
	if (ran)
		j->done = 1;
	else
		j->not_ran = 1;
	if (j->all_done && ++*j->all_done == j->total)
		kn_loop_stop(j->loop);
}

static void test_workers_deliver_on_loop_thread(void **state)
{
	struct kn_loop *loop = kn_loop_new();
	struct kn_workers *w = kn_workers_new(loop, 2);
	struct job jobs[8];
	int all = 0;
	(void)state;

	memset(jobs, 0, sizeof(jobs));
	for (int i = 0; i < 8; i++) {
		jobs[i].loop = loop;
		jobs[i].all_done = &all;
		jobs[i].total = 8;
		kn_workers_submit(w, work, done, &jobs[i]);
	}
	assert_int_equal(kn_loop_run(loop), 0);
	assert_int_equal(all, 8);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(jobs[i].ran, 1);
		assert_int_equal(jobs[i].done, 1);
		assert_false(pthread_equal(jobs[i].worker_thread,
					   pthread_self()));
		assert_true(pthread_equal(jobs[i].done_thread, pthread_self()));
	}
	assert_int_equal(kn_workers_pending(w), 0);
	kn_workers_free(w);
	kn_loop_free(loop);
}

static void test_workers_free_reports_unstarted(void **state)
{
	struct kn_loop *loop = kn_loop_new();
	struct kn_workers *w = kn_workers_new(loop, 1);
	struct job jobs[20];
	int ran = 0, not_ran = 0;
	(void)state;

	memset(jobs, 0, sizeof(jobs));
	for (int i = 0; i < 20; i++)
		kn_workers_submit(w, work, done, &jobs[i]);
	assert_true(kn_workers_pending(w) > 0);
	kn_workers_free(w);
	for (int i = 0; i < 20; i++) {
		/* Every item is told exactly once, ran or not. */
		assert_int_equal(jobs[i].done + jobs[i].not_ran, 1);
		assert_int_equal(jobs[i].done, jobs[i].ran);
		ran += jobs[i].done;
		not_ran += jobs[i].not_ran;
	}
	assert_int_equal(ran + not_ran, 20);
	kn_loop_free(loop);
}

struct http_case {
	struct kn_loop *loop;
	int status;
	char body[256];
	char got_header[64];
	char got_body[64];
};

static void handler(struct kn_http_req *req, void *arg)
{
	struct http_case *hc = arg;
	size_t len;
	const char *h = kn_http_header(req, "Metadata");
	const char *body = kn_http_body(req, &len);

	kn_strlcpy(hc->got_header, h ? h : "", sizeof(hc->got_header));
	kn_strlcpy(hc->got_body, body, sizeof(hc->got_body));
	kn_http_reply_json(req, 201,
			   json_pack("{s:s, s:s}", "path", kn_http_path(req),
				     "q", kn_http_query(req, "x") ?
				     kn_http_query(req, "x") : ""));
}

static void fetched(int status, const char *body, size_t len,
		    const char *error, void *arg)
{
	struct http_case *hc = arg;
	(void)len;
	(void)error;
	hc->status = status;
	kn_strlcpy(hc->body, body ? body : "", sizeof(hc->body));
	kn_loop_stop(hc->loop);
}

static void test_http_round_trip(void **state)
{
	struct http_case hc;
	struct kn_http_server *srv = NULL;
	struct kn_error err;
	const char *const headers[] = {"Metadata: true", NULL};
	char url[128];
	int port = 0;
	(void)state;

	memset(&hc, 0, sizeof(hc));
	hc.loop = kn_loop_new();
	assert_int_equal(kn_http_server_new(hc.loop, "127.0.0.1", 0, NULL, NULL, handler,
					     &hc, &srv, &port, &err), 0);
	assert_true(port > 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/a%%20b?x=1", port);
	assert_int_equal(kn_http_fetch(hc.loop, "POST", url, headers, "{\"k\":1}",
				       2000, fetched, &hc), 0);
	assert_int_equal(kn_loop_run(hc.loop), 0);
	assert_int_equal(hc.status, 201);
	assert_string_equal(hc.body, "{\"path\":\"/a b\",\"q\":\"1\"}\n");
	assert_string_equal(hc.got_header, "true");
	assert_string_equal(hc.got_body, "{\"k\":1}");
	/* Refused connections are reported, not hung on. */
	kn_http_server_free(srv);
	assert_int_equal(kn_http_fetch(hc.loop, "GET", url, NULL, NULL, 2000,
				       fetched, &hc), 0);
	assert_int_equal(kn_loop_run(hc.loop), 0);
	assert_int_equal(hc.status, 0);
	assert_int_equal(kn_http_fetch(hc.loop, "GET", "ftp://x/", NULL,
				       NULL, 10, fetched, &hc), -EINVAL);
	kn_loop_free(hc.loop);
}

/* ---- an upgraded connection ---- */

/* Blocks of KN_TUNNEL_LOW_WATER the server sends unread: 16 MiB. */
#define BIG_BLOCKS 256

struct tunnel_case {
	struct kn_loop *loop;
	struct kn_tunnel *t;
	int port;
	size_t streams_before;
	bool was_full, drained, closed;
	int queued[2]; /* a pipe: the server queued the big answer */
	char got[64];
	size_t got_len;
};

static bool tunnel_data(void *arg, const char *data, size_t len)
{
	struct tunnel_case *tc = arg;
	char up[64];

	for (size_t i = 0; i < len && tc->got_len + 1 < sizeof(tc->got); i++)
		tc->got[tc->got_len++] = data[i];
	tc->got[tc->got_len] = '\0';
	if (strstr(tc->got, "big")) {
		static char block[KN_TUNNEL_LOW_WATER];
		memset(block, 'x', sizeof(block));
		for (int i = 0; i < BIG_BLOCKS; i++)
			kn_tunnel_write(tc->t, block, sizeof(block));
		tc->was_full = kn_tunnel_pending(tc->t) > KN_TUNNEL_LOW_WATER;
		assert_int_equal(write(tc->queued[1], "q", 1), 1);
		return true;
	}
	for (size_t i = 0; i < len && i < sizeof(up); i++)
		up[i] = (char)toupper((unsigned char)data[i]);
	kn_tunnel_write(tc->t, up, len < sizeof(up) ? len : sizeof(up));
	return true;
}

static void tunnel_drain(void *arg)
{
	((struct tunnel_case *)arg)->drained = true;
}

static void tunnel_closed(void *arg)
{
	struct tunnel_case *tc = arg;

	tc->closed = true;
	kn_loop_stop(tc->loop);
}

static void tunnel_handler(struct kn_http_req *req, void *arg)
{
	static const struct kn_tunnel_ops ops = {tunnel_data, tunnel_drain,
						 tunnel_closed};
	struct tunnel_case *tc = arg;

	kn_http_set_owner(req, "alice");
	tc->streams_before = kn_http_streams_of(req);
	tc->t = kn_http_upgrade(req, "test/1", &ops, tc);
}

/* Reads until needle has come (or the peer closed): bytes read. */
static size_t read_until(int fd, char *buf, size_t cap, const char *needle)
{
	size_t len = 0;
	ssize_t n;

	while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0) {
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, needle))
			break;
	}
	return len;
}

static void *tunnel_client(void *arg)
{
	struct tunnel_case *tc = arg;
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)tc->port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	static const char head[] = "GET /session HTTP/1.1\r\nHost: x\r\n"
				   "Connection: Upgrade\r\nUpgrade: test/1"
				   "\r\n\r\nearly";
	static char buf[2 * 1024 * 1024];
	size_t total = 0;
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(write(fd, head, sizeof(head) - 1), sizeof(head) - 1);
	read_until(fd, buf, sizeof(buf), "EARLY");
	assert_non_null(strstr(buf, "HTTP/1.1 101 Switching Protocols\r\n"));
	assert_non_null(strstr(buf, "Upgrade: test/1\r\n"));
	assert_non_null(strstr(buf, "\r\n\r\nEARLY"));
	assert_int_equal(write(fd, "more", 4), 4);
	read_until(fd, buf, sizeof(buf), "MORE");
	/* More than the socket buffers hold, queued while nothing is read. */
	assert_int_equal(write(fd, "big", 3), 3);
	assert_int_equal(read(tc->queued[0], buf, 1), 1);
	while (total < BIG_BLOCKS * KN_TUNNEL_LOW_WATER &&
	       (n = read(fd, buf, sizeof(buf))) > 0)
		total += (size_t)n;
	assert_int_equal(total, BIG_BLOCKS * KN_TUNNEL_LOW_WATER);
	close(fd);
	return NULL;
}

static void test_http_upgrade(void **state)
{
	struct tunnel_case tc;
	struct kn_http_server *srv = NULL;
	struct kn_error err;
	pthread_t client;

	(void)state;
	memset(&tc, 0, sizeof(tc));
	tc.loop = kn_loop_new();
	assert_int_equal(pipe(tc.queued), 0);
	assert_int_equal(kn_http_server_new(tc.loop, "127.0.0.1", 0, NULL,
					    NULL, tunnel_handler, &tc, &srv,
					    &tc.port, &err),
			 0);
	assert_int_equal(pthread_create(&client, NULL, tunnel_client, &tc), 0);
	assert_int_equal(kn_loop_run(tc.loop), 0);
	pthread_join(client, NULL);
	assert_int_equal(tc.streams_before, 0);
	assert_true(tc.was_full);
	assert_true(tc.drained);
	assert_true(tc.closed);
	assert_string_equal(tc.got, "earlymorebig");
	kn_http_server_free(srv);
	kn_loop_free(tc.loop);
	close(tc.queued[0]);
	close(tc.queued[1]);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_timer),
	cmocka_unit_test(test_workers_deliver_on_loop_thread),
	cmocka_unit_test(test_workers_free_reports_unstarted),
	cmocka_unit_test(test_http_round_trip),
	cmocka_unit_test(test_http_upgrade))
