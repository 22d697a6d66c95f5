/*
 * Unit tests for the loop's TLS pieces: the self-signed CA and
 * certificate, loading and the errors that name the setting, seeing the
 * files change and reloading, the loopback rule for plain listeners, and
 * an https fetch against the TLS front on one loop. Client certificates,
 * reloads under open connections and other clients are the e2e tests'
 * (tests/e2e/test_tls.py).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/tests/testmain.h"
#include "loop/loop.h"

static char *temp_dir(void)
{
	char tmpl[] = "/tmp/kn-tls-XXXXXX";
	char *d = mkdtemp(tmpl);

	assert_non_null(d);
	return kn_xstrdup(d);
}

static void remove_dir(const char *dir)
{
	const char *names[] = {"tls/ca.pem", "tls/ca.key", "tls/server.pem",
			       "tls/server.key", "tls", "other/ca.pem",
			       "other/ca.key", "other/server.pem",
			       "other/server.key", "other"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char *p = kn_asprintf("%s/%s", dir, names[i]);
		if (unlink(p) < 0)
			rmdir(p);
		free(p);
	}
	rmdir(dir);
}

/* A temporary directory with a self-signed CA and a server certificate
   for localhost in its tls/, for the tests that serve https. */
struct tls_dir {
	char dir[32], tls[64], ca[96], cert[96], key[96];
};

static int tls_dir_setup(void **state)
{
	struct tls_dir *d = kn_xcalloc(1, sizeof(*d));
	char *dir = temp_dir();
	struct kn_error err;

	kn_strlcpy(d->dir, dir, sizeof(d->dir));
	free(dir);
	snprintf(d->tls, sizeof(d->tls), "%s/tls", d->dir);
	snprintf(d->ca, sizeof(d->ca), "%s/ca.pem", d->tls);
	snprintf(d->cert, sizeof(d->cert), "%s/server.pem", d->tls);
	snprintf(d->key, sizeof(d->key), "%s/server.key", d->tls);
	*state = d;
	return kn_tls_self_signed(d->tls, "localhost", &err);
}

static int tls_dir_teardown(void **state)
{
	remove_dir(((struct tls_dir *)*state)->dir);
	free(*state);
	return 0;
}

static void test_self_signed_loads_and_keeps_its_ca(void **state)
{
	char *dir = temp_dir(), *tls = kn_asprintf("%s/tls", dir);
	char *ca = kn_asprintf("%s/ca.pem", tls), *key = kn_asprintf("%s/ca.key", tls);
	char *cert = kn_asprintf("%s/server.pem", tls),
	     *skey = kn_asprintf("%s/server.key", tls);
	char *first = NULL, *again = NULL;
	struct kn_tls_files files = {.cert = cert, .key = skey};
	struct kn_tls *t = NULL;
	struct kn_error err;
	struct stat st;
	(void)state;

	assert_int_equal(kn_tls_self_signed(tls, "10.1.2.3", &err), 0);
	assert_int_equal(stat(key, &st), 0);
	assert_int_equal(st.st_mode & 0077, 0);
	assert_int_equal(stat(skey, &st), 0);
	assert_int_equal(st.st_mode & 0077, 0);
	assert_int_equal(kn_read_file(ca, 1 << 20, &first, NULL), 0);
	assert_int_equal(kn_tls_new(&files, &t, &err), 0);
	assert_false(kn_tls_verifies_clients(t));
	assert_false(kn_tls_files_changed(t));
	/* Made again: the CA stays, the server certificate is new. */
	assert_int_equal(kn_tls_self_signed(tls, "10.1.2.3", &err), 0);
	assert_int_equal(kn_read_file(ca, 1 << 20, &again, NULL), 0);
	assert_string_equal(first, again);
	assert_true(kn_tls_files_changed(t));
	assert_int_equal(kn_tls_reload(t, &err), 0);
	assert_false(kn_tls_files_changed(t));
	kn_tls_free(t);
	KN_FREE_ALL(first, again, ca, key, cert, skey, tls);
	remove_dir(dir);
	free(dir);
}

static void test_errors_name_the_setting(void **state)
{
	char *dir = temp_dir(), *a = kn_asprintf("%s/tls", dir),
	     *b = kn_asprintf("%s/other", dir);
	char *cert = kn_asprintf("%s/server.pem", a),
	     *key = kn_asprintf("%s/server.key", a),
	     *other_key = kn_asprintf("%s/server.key", b);
	struct kn_tls_files files = {.cert = cert, .key = other_key};
	struct kn_tls *t = NULL;
	struct kn_error err;
	(void)state;

	assert_int_equal(kn_tls_self_signed(a, "localhost", &err), 0);
	assert_int_equal(kn_tls_self_signed(b, "localhost", &err), 0);
	assert_int_equal(kn_tls_new(&files, &t, &err), -EINVAL);
	assert_string_equal(err.field, "tls-key");
	assert_non_null(strstr(err.message, "does not match"));
	files.key = key;
	files.client_ca = key; /* a key, not a certificate */
	assert_int_equal(kn_tls_new(&files, &t, &err), -EINVAL);
	assert_string_equal(err.field, "tls-client-ca");
	files.client_ca = NULL;
	files.cert = "/nonexistent/cert.pem";
	assert_int_equal(kn_tls_new(&files, &t, &err), -EINVAL);
	assert_string_equal(err.field, "tls-cert");
	files.cert = NULL;
	assert_int_equal(kn_tls_new(&files, &t, &err), -EINVAL);
	assert_null(t);
	/* A reload that fails keeps the old certificate in use. */
	files.cert = cert;
	assert_int_equal(kn_tls_new(&files, &t, &err), 0);
	assert_int_equal(kn_write_file_atomic(key, "junk\n", 5, 0600), 0);
	assert_true(kn_tls_files_changed(t));
	assert_int_equal(kn_tls_reload(t, &err), -EINVAL);
	assert_string_equal(err.field, "tls-key");
	kn_tls_free(t);
	KN_FREE_ALL(cert, key, other_key, a, b);
	remove_dir(dir);
	free(dir);
}

static void test_plain_listeners_stay_on_loopback(void **state)
{
	static const char *const loopback[] = {"127.0.0.1", "127.3.2.1", "::1",
					       "localhost"};
	static const char *const elsewhere[] = {"0.0.0.0", "::", "10.0.0.1",
						"::ffff:10.0.0.1",
						"no such host.invalid"};
	struct kn_error err;
	(void)state;

	for (size_t i = 0; i < sizeof(loopback) / sizeof(loopback[0]); i++)
		if (!kn_host_is_loopback(loopback[i]))
			fail_msg("%s is not taken as loopback", loopback[i]);
	for (size_t i = 0; i < sizeof(elsewhere) / sizeof(elsewhere[0]); i++)
		if (kn_host_is_loopback(elsewhere[i]))
			fail_msg("%s is taken as loopback", elsewhere[i]);
	assert_int_equal(kn_tls_listen_check("127.0.0.1", false, false, &err), 0);
	assert_int_equal(kn_tls_listen_check("0.0.0.0", true, false, &err), 0);
	assert_int_equal(kn_tls_listen_check("0.0.0.0", false, true, &err), 0);
	assert_int_equal(kn_tls_listen_check("0.0.0.0", false, false, &err),
			 -EINVAL);
	assert_string_equal(err.field, "listen");
	assert_non_null(strstr(err.message, "insecure"));
}

struct fetch_case {
	struct kn_loop *loop;
	int status;
	char error[512];
	char client[128];
};

static void whoami(struct kn_http_req *req, void *arg)
{
	struct fetch_case *fc = arg;
	const char *cn = kn_http_client_cert(req);

	kn_strlcpy(fc->client, cn ? cn : "", sizeof(fc->client));
	kn_http_reply_json(req, 200, json_pack("{s:b}", "ok", 1));
}

static void fetched(int status, const char *body, size_t len,
		    const char *error, void *arg)
{
	struct fetch_case *fc = arg;

	(void)body;
	(void)len;
	fc->status = status;
	kn_strlcpy(fc->error, error ? error : "", sizeof(fc->error));
	kn_loop_stop(fc->loop);
}

static void fetch(struct fetch_case *fc, const char *url)
{
	fc->status = -1;
	fc->error[0] = '\0';
	assert_int_equal(kn_http_fetch(fc->loop, "GET", url, NULL, NULL, 5000,
				       fetched, fc), 0);
	assert_int_equal(kn_loop_run(fc->loop), 0);
}

/* A server on the front with TLS and a fetch over https on one loop:
   the handshake, the host name check and the CA both ways. */
static void test_https_fetch_verifies_the_server(void **state)
{
	const struct tls_dir *d = *state;
	struct kn_tls_files files = {.cert = d->cert, .key = d->key,
				     .client_ca = d->ca};
	struct fetch_case fc = {0};
	struct kn_http_server *srv = NULL;
	struct kn_tls *t = NULL;
	struct kn_error err;
	char url[128];
	int port = 0;

	assert_int_equal(kn_tls_new(&files, &t, &err), 0);
	assert_true(kn_tls_verifies_clients(t));
	fc.loop = kn_loop_new();
	/* On every address, so that 127.0.0.2 reaches it below. */
	assert_int_equal(kn_http_server_new(fc.loop, "0.0.0.0", 0, NULL, t,
					    whoami, &fc, &srv, &port, &err), 0);
	/* The system's CAs do not know this one. */
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/", port);
	fetch(&fc, url);
	assert_int_equal(fc.status, 0);
	if (!strstr(fc.error, "not trusted"))
		fail_msg("error: %s", fc.error);
	assert_int_equal(kn_loop_client_tls(fc.loop, d->ca, NULL, NULL, &err),
			 0);
	fetch(&fc, url);
	assert_int_equal(fc.status, 200);
	assert_string_equal(fc.client, "");
	snprintf(url, sizeof(url), "https://localhost:%d/", port);
	fetch(&fc, url);
	assert_int_equal(fc.status, 200);
	/* A name the certificate does not hold. */
	snprintf(url, sizeof(url), "https://127.0.0.2:%d/", port);
	fetch(&fc, url);
	assert_int_equal(fc.status, 0);
	if (!strstr(fc.error, "not trusted"))
		fail_msg("error: %s", fc.error);
	/* A client certificate file that is none. */
	assert_int_equal(kn_loop_client_tls(fc.loop, d->ca, d->ca, NULL, &err),
			 -EINVAL);
	assert_string_equal(err.field, "client-cert");
	kn_http_server_free(srv);
	kn_loop_free(fc.loop);
	kn_tls_free(t);
}

struct stop_case {
	struct kn_loop *loop;
	struct kn_timer *timer;
	int turns_left;
	bool fetched;
};

static void stop_fetched(int status, const char *body, size_t len,
			 const char *error, void *arg)
{
	struct stop_case *sc = arg;

	(void)status;
	(void)body;
	(void)len;
	(void)error;
	sc->fetched = true;
	kn_loop_stop(sc->loop);
}

/* Fires once a turn of the loop, after that turn's reads. */
static void stop_after_turns(void *arg)
{
	struct stop_case *sc = arg;

	if (--sc->turns_left == 0)
		kn_loop_stop(sc->loop);
	else
		kn_timer_arm(sc->timer, 0);
}

/* A stop can come on any turn of the loop while an https fetch and its
   answer are under way, as a SIGTERM does; whichever it is, freeing the
   loop frees both connections with everything TLS holds (ASan's build
   checks). A read that queued work for a later turn is the hard one. */
static void test_a_stop_mid_fetch_frees_everything(void **state)
{
	const struct tls_dir *d = *state;
	struct kn_tls_files files = {.cert = d->cert, .key = d->key};
	struct fetch_case fc = {0};
	struct kn_tls *t = NULL;
	struct kn_error err;
	bool fetched = false;

	assert_int_equal(kn_tls_new(&files, &t, &err), 0);
	for (int turns = 1; !fetched; turns++) {
		struct stop_case sc = {.turns_left = turns};
		struct kn_http_server *srv = NULL;
		char url[128];
		int port = 0;

		assert_true(turns < 1000);
		sc.loop = fc.loop = kn_loop_new();
		assert_int_equal(kn_http_server_new(sc.loop, "127.0.0.1", 0,
						    NULL, t, whoami, &fc, &srv,
						    &port, &err), 0);
		assert_int_equal(kn_loop_client_tls(sc.loop, d->ca, NULL, NULL,
						    &err), 0);
		snprintf(url, sizeof(url), "https://localhost:%d/", port);
		assert_int_equal(kn_http_fetch(sc.loop, "GET", url, NULL, NULL,
					       5000, stop_fetched, &sc), 0);
		sc.timer = kn_timer_new(sc.loop, stop_after_turns, &sc);
		kn_timer_arm(sc.timer, 0);
		assert_int_equal(kn_loop_run(sc.loop), 0);
		fetched = sc.fetched;
		kn_timer_free(sc.timer);
		kn_http_server_free(srv);
		kn_loop_free(sc.loop);
	}
	kn_tls_free(t);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_self_signed_loads_and_keeps_its_ca),
	cmocka_unit_test(test_errors_name_the_setting),
	cmocka_unit_test(test_plain_listeners_stay_on_loopback),
	cmocka_unit_test_setup_teardown(
		test_https_fetch_verifies_the_server, tls_dir_setup,
		tls_dir_teardown),
	cmocka_unit_test_setup_teardown(
		test_a_stop_mid_fetch_frees_everything, tls_dir_setup,
		tls_dir_teardown))
