/*
 * Unit tests for which store a URL is in (kn_store_url_covers) against
 * hostile URLs, the named stores' credentials (files that others could
 * read are refused), what kn_stores_resolve lets through (names, URLs in
 * no store, file:// roots and links out of them), and that a request
 * goes with a store's credential only to that store and never follows a
 * redirect, against loopback listeners.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/tests/testdir.h"
#include "base/tests/testmain.h"
#include "ckpt/internal.h"

#define STORE "https://acct.blob.core.windows.net/ckpt/runs"
#define SAS "sv=2023-11-03&sr=c&sp=racwdl&sig=SeCrEtSiG"

static void test_covers_hostile_urls(void **state)
{
	static const struct {
		const char *store, *url;
		bool inside;
	} cases[] = {
		{STORE, STORE, true},
		{STORE, STORE "/", true},
		{STORE, STORE "/7/checkpoints/a", true},
		{STORE, "HTTPS://ACCT.blob.core.windows.net/ckpt/runs/x", true},
		{STORE, "https://acct.blob.core.windows.net:443/ckpt/runs/x",
		 true},
		{STORE "?" SAS, STORE "/x", true},
		{STORE "/", STORE "/x", true},
		/* another host, or one that only looks alike */
		{STORE, "https://evil.example/ckpt/runs/x", false},
		{STORE, "https://acct.blob.core.windows.net.evil/ckpt/runs",
		 false},
		{STORE, "https://other.blob.core.windows.net/ckpt/runs/x",
		 false},
		/* userinfo tricks */
		{STORE, "https://acct.blob.core.windows.net@evil/ckpt/runs/x",
		 false},
		{STORE, "https://u:p@acct.blob.core.windows.net/ckpt/runs/x",
		 false},
		/* scheme and port */
		{STORE, "http://acct.blob.core.windows.net/ckpt/runs/x", false},
		{STORE, "https://acct.blob.core.windows.net:8443/ckpt/runs/x",
		 false},
		{STORE, "https://acct.blob.core.windows.net:/ckpt/runs/x",
		 false},
		{STORE, "ftp://acct.blob.core.windows.net/ckpt/runs/x", false},
		/* out of the container or prefix */
		{STORE, "https://acct.blob.core.windows.net/ckpt/runs2/x",
		 false},
		{STORE, "https://acct.blob.core.windows.net/ckpt2/runs/x",
		 false},
		{STORE, "https://acct.blob.core.windows.net/ckpt", false},
		{STORE, "https://acct.blob.core.windows.net/other/x", false},
		{STORE, STORE "/../../other/x", false},
		{STORE, STORE "/./x", false},
		{STORE, STORE "/%2e%2e/%2E%2E/other", false},
		{STORE, STORE "%2f..%2fother", false},
		{STORE, STORE "//x", false},
		{STORE, STORE "/x\\..\\..\\y", false},
		{STORE, STORE "/x#frag", false},
		{STORE, STORE "/x y", false},
		{STORE, STORE "/x\r\nHost: evil", false},
		/* path style (Azurite) */
		{"http://127.0.0.1:10000/devstoreaccount1/ckpt",
		 "http://127.0.0.1:10000/devstoreaccount1/ckpt/j/x", true},
		{"http://127.0.0.1:10000/devstoreaccount1/ckpt",
		 "http://127.0.0.1:10001/devstoreaccount1/ckpt/j/x", false},
		{"http://127.0.0.1:10000/devstoreaccount1/ckpt",
		 "http://127.0.0.1/devstoreaccount1/ckpt/j/x", false},
		{"http://127.0.0.1:10000/devstoreaccount1/ckpt",
		 "http://127.0.0.1:10000/devstoreaccount2/ckpt/j/x", false},
		{"http://[::1]:10000/a/ckpt", "http://[::1]:10000/a/ckpt/x",
		 true},
		{"http://[::1]:10000/a/ckpt", "http://[::1]:10001/a/ckpt/x",
		 false},
		/* file:// */
		{"file:///srv/blobs", "file:///srv/blobs/7/x", true},
		{"file:///srv/blobs", "file:///srv/blobs2/x", false},
		{"file:///srv/blobs", "file:///srv/blobs/../etc", false},
		{"file:///srv/blobs", "file://host/srv/blobs/x", false},
		{"file:///srv/blobs", "file:///srv/blobs/%2e%2e/etc", false},
		{"file:///", "file:///etc/shadow", true},
		/* nothing from a store that is no plain URL */
		{"azure://ckpt", "azure://ckpt/x", false},
		{NULL, STORE, false},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool got = kn_store_url_covers(cases[i].store, cases[i].url);
		if (got != cases[i].inside)
			fail_msg("%s in %s: got %d", cases[i].url,
				 cases[i].store ? cases[i].store : "NULL", got);
	}
}

static void write_mode(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static void test_credentials(void **state)
{
	char *dir = kn_test_dir("stores");
	char *file = kn_asprintf("%s/sas", dir), *text = NULL;
	char *link = kn_asprintf("%s/link", dir);
	struct kn_stores *stores = kn_stores_new();
	struct kn_error err;
	(void)state;

	write_mode(file, SAS "\n", 0644);
	assert_int_equal(kn_stores_add(stores, "ckpt", STORE, NULL, file,
				       false, &err), -EPERM);
	assert_string_equal(err.field, "stores[ckpt].credential");
	assert_non_null(strstr(err.message, "mode 0644"));
	assert_non_null(strstr(err.message, "chmod 600"));
	assert_null(strstr(err.message, "SeCrEt"));
	assert_int_equal(chmod(file, 0600), 0);
	assert_int_equal(symlink(file, link), 0);
	assert_true(kn_stores_add(stores, "ckpt", STORE, NULL, link, false,
				  &err) < 0);
	assert_int_equal(kn_store_credential_read(NULL, file, "f", &text,
						  &err), 0);
	assert_string_equal(text, SAS); /* the newline is cut */
	free(text);
	assert_int_equal(kn_stores_add(stores, "ckpt", STORE, NULL, file,
				       false, &err), 0);
	assert_int_equal(kn_stores_add(stores, "ckpt", STORE, NULL, file,
				       false, &err), -EINVAL);
	unsetenv("KILN_TEST_STORE_KEY");
	assert_int_equal(kn_stores_add(stores, "env", STORE, "KILN_TEST_STORE_"
				       "KEY", NULL, false, &err), -EINVAL);
	assert_non_null(strstr(err.message, "KILN_TEST_STORE_KEY is not set"));
	assert_int_equal(kn_stores_add(stores, "bad",
				       "https://u@acct.blob.core.windows.net/c",
				       NULL, NULL, false, &err), -EINVAL);
	kn_stores_free(stores);
	unlink(link);
	unlink(file);
	rmdir(dir);
	KN_FREE_ALL(link, file, dir);
}

static void test_resolve(void **state)
{
	char *dir = kn_test_dir("stores"), *url = NULL;
	char *root = kn_asprintf("%s/root", dir), *out = kn_asprintf("%s/out",
								      dir);
	char *link = kn_asprintf("%s/root/escape", dir);
	char *inside = kn_asprintf("file://%s/root/a/b", dir);
	char *through = kn_asprintf("file://%s/root/escape/x", dir);
	char *outside = kn_asprintf("file://%s/out/x", dir);
	struct kn_stores *stores = kn_stores_new();
	struct kn_error err;
	(void)state;

	assert_int_equal(mkdir(root, 0700), 0);
	assert_int_equal(mkdir(out, 0700), 0);
	assert_int_equal(symlink(out, link), 0);
	assert_int_equal(kn_stores_add(stores, "ckpt", STORE, NULL, NULL,
				       false, &err), 0);
	assert_int_equal(kn_stores_add_root(stores, root, &err), 0);

	assert_int_equal(kn_stores_resolve(stores, "ckpt", "checkpoint.store",
					   &url, &err), 0);
	assert_string_equal(url, STORE);
	free(url);
	assert_int_equal(kn_stores_resolve(stores, "nope", "checkpoint.store",
					   &url, &err), -EINVAL);
	assert_string_equal(err.field, "checkpoint.store");
	assert_non_null(strstr(err.message, "no store is named \"nope\""));
	assert_int_equal(kn_stores_resolve(stores, STORE "/in/x", "inputs[0]",
					   &url, &err), 0);
	free(url);
	/* a URL in no store: refused unless allowed */
	assert_int_equal(kn_stores_resolve(stores, "http://127.0.0.1:9/a/b/c",
					   "inputs[1]", &url, &err), -EPERM);
	assert_string_equal(err.field, "inputs[1]");
	kn_stores_allow_unconfigured(stores, true);
	assert_int_equal(kn_stores_resolve(stores, "http://127.0.0.1:9/a/b/c",
					   "inputs[1]", &url, &err), 0);
	free(url);
	/* ...but never one that is not plain */
	assert_int_equal(kn_stores_resolve(stores, STORE "/%2e%2e/x",
					   "inputs[2]", &url, &err), -EINVAL);
	/* file:// in a root, even where it does not exist yet */
	assert_int_equal(kn_stores_resolve(stores, inside, "checkpoint.store",
					   &url, &err), 0);
	free(url);
	assert_int_equal(kn_stores_resolve(stores, outside,
					   "checkpoint.store", &url, &err),
			 -EPERM);
	assert_string_equal(err.field, "checkpoint.store");
	assert_non_null(strstr(err.message, "outside the directories"));
	/* a link inside the root that leads out */
	assert_int_equal(kn_stores_resolve(stores, through, "inputs[0]", &url,
					   &err), -EPERM);
	assert_int_equal(kn_stores_resolve(stores, "file:///etc/shadow",
					   "inputs[0]", &url, &err), -EPERM);
	kn_stores_free(stores);
	unlink(link);
	rmdir(root);
	rmdir(out);
	rmdir(dir);
	KN_FREE_ALL(link, root, out, inside, through, outside, dir);
}

static void test_scopes_carry_no_secret(void **state)
{
	struct kn_stores *stores = kn_stores_new(), *back = NULL;
	struct kn_error err;
	char *text, *url = NULL;
	(void)state;

	setenv("KILN_TEST_STORE_SAS", SAS, 1);
	assert_int_equal(kn_stores_add(stores, "ckpt", STORE,
				       "KILN_TEST_STORE_SAS", NULL, false, &err),
			 0);
	assert_int_equal(kn_stores_add(stores, "default", "file:///srv/blobs",
				       NULL, NULL, true, &err), 0);
	text = kn_stores_scopes_json(stores);
	assert_null(strstr(text, "SeCrEt"));
	assert_non_null(strstr(text, "\"env\":\"KILN_TEST_STORE_SAS\""));
	assert_non_null(strstr(text, "\"environment\":true"));
	/* the shim's copy reads the credential again, and lets URLs through:
	   the server checked them */
	assert_int_equal(kn_stores_from_scopes_json(text, &back, &err), 0);
	assert_int_equal(kn_stores_resolve(back, "file:///etc/x", "inputs[0]",
					   &url, &err), 0);
	free(url);
	unsetenv("KILN_TEST_STORE_SAS");
	kn_stores_free(back);
	assert_true(kn_stores_from_scopes_json(text, &back, &err) < 0);
	assert_true(kn_stores_from_scopes_json("{}", &back, &err) < 0);
	free(text);
	kn_stores_free(stores);
}

/* ---- requests on the wire ---- */

struct listener {
	int fd;
	int port;
	const char *reply;
	char request[8192];
	pthread_t thread;
};

/* Take one request's head, answer it, close. */
static void *serve_one(void *arg)
{
	struct listener *l = arg;
	size_t kept = 0;
	int fd = accept(l->fd, NULL, NULL);

	if (fd < 0)
		return NULL;
	while (kept < sizeof(l->request) - 1 &&
	       !strstr(l->request, "\r\n\r\n")) {
		ssize_t r = read(fd, l->request + kept,
				 sizeof(l->request) - 1 - kept);
		if (r <= 0)
			break;
		kept += (size_t)r;
		l->request[kept] = '\0';
	}
	if (write(fd, l->reply, strlen(l->reply)) < 0)
		l->request[0] = '\0';
	close(fd);
	return NULL;
}

static void listen_on(struct listener *l, const char *reply, bool serve)
{
	struct sockaddr_in addr = {.sin_family = AF_INET};
	socklen_t alen = sizeof(addr);

	memset(l, 0, sizeof(*l));
	l->reply = reply;
	l->fd = socket(AF_INET, SOCK_STREAM, 0);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(l->fd, (struct sockaddr *)&addr, sizeof(addr)),
			 0);
	assert_int_equal(listen(l->fd, 8), 0);
	getsockname(l->fd, (struct sockaddr *)&addr, &alen);
	l->port = ntohs(addr.sin_port);
	if (serve)
		pthread_create(&l->thread, NULL, serve_one, l);
}

/* Whether anyone connected to a listener that serves no one. */
static bool connected(struct listener *l)
{
	int fd;

	fcntl(l->fd, F_SETFL, O_NONBLOCK);
	fd = accept(l->fd, NULL, NULL);
	if (fd >= 0)
		close(fd);
	return fd >= 0;
}

#define EMPTY_201                                                            \
	"HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

/* A table holding the store "ckpt", the container at l's port, with its
   SAS from KILN_TEST_STORE_SAS; *url is the container's URL. */
static struct kn_stores *sas_stores(const struct listener *l, char **url)
{
	struct kn_stores *stores = kn_stores_new();
	struct kn_error err;

	*url = kn_asprintf("http://127.0.0.1:%d/devstoreaccount1/ckpt",
			   l->port);
	setenv("KILN_TEST_STORE_SAS", SAS, 1);
	assert_int_equal(kn_stores_add(stores, "ckpt", *url,
				       "KILN_TEST_STORE_SAS", NULL, false, &err),
			 0);
	return stores;
}

/* One byte written as blob "a" of the store ref opens, for field; l has
   then read the whole request. */
static void put_through(struct kn_stores *stores, const char *ref,
			const char *field, struct listener *l)
{
	struct kn_blob_store *s;
	struct kn_error err;

	assert_int_equal(kn_stores_open(stores, ref, field, NULL, &s, &err), 0);
	assert_int_equal(kn_blob_put_bytes(s, "a", "x", 1, 0, &err), 0);
	kn_blob_store_free(s);
	pthread_join(l->thread, NULL);
}

static void test_credential_stays_with_its_store(void **state)
{
	struct listener store, other;
	struct kn_stores *stores;
	char *store_url, *other_url, *nested;
	(void)state;

	listen_on(&store, EMPTY_201, true);
	listen_on(&other, EMPTY_201, true);
	stores = sas_stores(&store, &store_url);
	other_url = kn_asprintf("http://127.0.0.1:%d/devstoreaccount1/ckpt",
				other.port);
	kn_stores_allow_unconfigured(stores, true);

	/* by name, and by a URL inside it: the store's SAS goes along */
	put_through(stores, "ckpt", "checkpoint.store", &store);
	assert_non_null(strstr(store.request, "sig=SeCrEtSiG"));

	/* the same container on another port is another store: nothing */
	put_through(stores, other_url, "inputs[0]", &other);
	assert_non_null(strstr(other.request, "PUT /devstoreaccount1/ckpt/a"));
	assert_null(strstr(other.request, "sig="));
	assert_null(strstr(other.request, "SeCrEt"));
	assert_null(strcasestr(other.request, "Authorization"));
	close(store.fd);
	close(other.fd);
	kn_stores_free(stores);
	free(store_url);

	/* a URL below the store, opened as its own store, keeps the SAS */
	listen_on(&store, EMPTY_201, true);
	stores = sas_stores(&store, &store_url);
	nested = kn_asprintf("%s/data", store_url);
	put_through(stores, nested, "inputs[0]", &store);
	assert_non_null(strstr(store.request, "PUT /devstoreaccount1/ckpt/"
						  "data/a?"));
	assert_non_null(strstr(store.request, "sig=SeCrEtSiG"));
	close(store.fd);
	kn_stores_free(stores);
	unsetenv("KILN_TEST_STORE_SAS");
	KN_FREE_ALL(nested, store_url, other_url);
}

static void test_redirect_is_not_followed(void **state)
{
	struct listener store, elsewhere;
	struct kn_stores *stores;
	struct kn_blob_store *s;
	struct kn_error err;
	char *reply, *store_url;
	(void)state;

	listen_on(&elsewhere, "", false);
	reply = kn_asprintf("HTTP/1.1 307 Temporary Redirect\r\nLocation: "
			    "http://127.0.0.1:%d/devstoreaccount1/ckpt/a\r\n"
			    "Content-Length: 0\r\nConnection: close\r\n\r\n",
			    elsewhere.port);
	listen_on(&store, reply, true);
	stores = sas_stores(&store, &store_url);
	assert_int_equal(kn_stores_open(stores, "ckpt", "checkpoint.store",
					NULL, &s, &err), 0);
	assert_true(kn_blob_put_bytes(s, "a", "x", 1, 0, &err) < 0);
	assert_non_null(strstr(err.message, "307"));
	assert_null(strstr(err.message, "SeCrEt"));
	pthread_join(store.thread, NULL);
	assert_non_null(strstr(store.request, "sig=SeCrEtSiG"));
	assert_false(connected(&elsewhere));
	kn_blob_store_free(s);
	kn_stores_free(stores);
	unsetenv("KILN_TEST_STORE_SAS");
	close(store.fd);
	close(elsewhere.fd);
	KN_FREE_ALL(reply, store_url);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_covers_hostile_urls),
	cmocka_unit_test(test_credentials),
	cmocka_unit_test(test_resolve),
	cmocka_unit_test(test_scopes_carry_no_secret),
	cmocka_unit_test(test_credential_stays_with_its_store),
	cmocka_unit_test(test_redirect_is_not_followed))
