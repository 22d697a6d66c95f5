/*
 * Unit tests for loop: timers, the worker pool (work off the loop thread,
 * delivery on it, undelivered work at shutdown), and the HTTP server and
 * client talking to each other on loopback.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_timer),
		cmocka_unit_test(test_workers_deliver_on_loop_thread),
		cmocka_unit_test(test_workers_free_reports_unstarted),
		cmocka_unit_test(test_http_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
