/*
 * Unit tests for the Azure client against a scripted loopback HTTP
 * server: retries, parallel blocks, staged blocks and their copy, one
 * Put Blob up to the single-put size, error reports that hide secrets,
 * and bad store URLs (Azurite itself is exercised by tests/e2e).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/tests/testdir.h"
#include "base/tests/testmain.h"
#include "ckpt/internal.h"

#define AZURITE_KEY                                                          \
	"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFP" \
	"TOtr/KBHBeksoGMGw=="

/* A loopback server that answers its n connections with replies[], in
 * turn, keeping the head of each request it was sent. */
struct script {
	int listen_fd;
	const char *replies[10];
	int n;
	char requests[10][4096];
	int served;
	pthread_t thread;
	char *url; /* the container named at start, on this server */
};

static void *serve(void *arg)
{
	struct script *sc = arg;
	for (int i = 0; i < sc->n; i++) {
		int fd = accept(sc->listen_fd, NULL, NULL);
		size_t kept = 0, total = 0, want = SIZE_MAX;
		char chunk[16384];
		if (fd < 0)
			break;
		/* Keep the head of each request; read the whole body. */
		while (total < want) {
			ssize_t r = read(fd, chunk, sizeof(chunk));
			size_t room = sizeof(sc->requests[i]) - 1 - kept;
			char *end;
			if (r <= 0)
				break;
			total += (size_t)r;
			memcpy(sc->requests[i] + kept, chunk,
			       (size_t)r < room ? (size_t)r : room);
			kept += (size_t)r < room ? (size_t)r : room;
			sc->requests[i][kept] = '\0';
			end = strstr(sc->requests[i], "\r\n\r\n");
			if (end && want == SIZE_MAX) {
				char *cl = strcasestr(sc->requests[i],
						      "content-length:");
				want = (size_t)(end + 4 - sc->requests[i]) +
				       (cl ? (size_t)strtol(cl + 15, NULL, 10) : 0);
			}
		}
		if (write(fd, sc->replies[i], strlen(sc->replies[i])) < 0)
			break;
		close(fd);
		sc->served++;
	}
	return NULL;
}

/* Serves sc from a thread; sc->url is /devstoreaccount1/CONTAINER on it. */
static void start_script(struct script *sc, const char *container)
{
	struct sockaddr_in addr = {.sin_family = AF_INET};
	socklen_t alen = sizeof(addr);
	sc->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(sc->listen_fd, (struct sockaddr *)&addr,
			      sizeof(addr)), 0);
	assert_int_equal(listen(sc->listen_fd, 8), 0);
	getsockname(sc->listen_fd, (struct sockaddr *)&addr, &alen);
	pthread_create(&sc->thread, NULL, serve, sc);
	sc->url = kn_asprintf("http://127.0.0.1:%d/devstoreaccount1/%s",
			      ntohs(addr.sin_port), container);
}

/* Serves sc and opens cfg's store on it, at /devstoreaccount1/CONTAINER. */
static struct kn_blob_store *open_scripted(struct script *sc,
					   const char *container,
					   struct kn_blob_store_config *cfg)
{
	struct kn_blob_store *s;
	struct kn_error err;

	start_script(sc, container);
	cfg->url = sc->url;
	assert_int_equal(kn_blob_store_open(cfg, &s, &err), 0);
	return s;
}

static void stop_script(struct script *sc)
{
	close(sc->listen_fd);
	free(sc->url);
}

#define REPLY(status, extra)                                                 \
	"HTTP/1.1 " status "\r\nContent-Length: 0\r\nConnection: close\r\n" \
	extra "\r\n"

static void test_azure_retries_then_succeeds(void **state)
{
	struct script sc = {.replies = {REPLY("503 Server Busy",
					      "x-ms-error-code: ServerBusy\r\n"),
					REPLY("500 Internal", ""),
					REPLY("201 Created", "")},
			    .n = 3};
	struct kn_blob_store_config cfg = {.account_key = AZURITE_KEY,
					   .retry_base_ms = 1};
	struct kn_blob_store *s;
	struct kn_error err;
	(void)state;

	s = open_scripted(&sc, "ckpt/pre", &cfg);
	assert_string_equal(kn_blob_store_url(s), sc.url);
	assert_int_equal(kn_blob_put_bytes(s, "j/x y", "abc", 3, 0, &err), 0);
	pthread_join(sc.thread, NULL);
	assert_int_equal(sc.served, 3);
	assert_non_null(strstr(sc.requests[2],
			       "PUT /devstoreaccount1/ckpt/pre/j/x%20y HTTP/1.1"));
	assert_non_null(strstr(sc.requests[2], "x-ms-version: 2023-11-03"));
	assert_non_null(strstr(sc.requests[2], "x-ms-blob-type: BlockBlob"));
	assert_non_null(strstr(sc.requests[2],
			       "Authorization: SharedKey devstoreaccount1:"));
	assert_null(strstr(sc.requests[2], AZURITE_KEY));
	kn_blob_store_free(s);
	stop_script(&sc);
}

/* Puts a file of 150,000 random bytes as NAME: the hash and size the
 * store reports must be the file's (sha256sum(1) hashes it here). */
static void put_random_file(struct kn_blob_store *s, const char *name)
{
	char *dir = kn_test_dir("ckpt"), want[80];
	char *src = kn_asprintf("%s/src", dir);
	char *cmd = kn_asprintf("head -c 150000 /dev/urandom > '%s' && "
				"sha256sum '%s' | cut -c1-64", src, src);
	char sha[KN_SHA256_HEX_LEN + 1];
	FILE *p = popen(cmd, "r");
	struct kn_error err;
	int64_t size;

	assert_non_null(p);
	assert_non_null(fgets(want, 80, p));
	pclose(p);
	want[64] = '\0';
	assert_int_equal(kn_blob_put_file(s, name, src, 0, sha, &size, &err), 0);
	assert_string_equal(sha, want);
	assert_int_equal(size, 150000);
	kn_rm_rf(dir);
	KN_FREE_ALL(dir, src, cmd);
}

static void test_azure_blocks_retry(void **state)
{
	/* Three blocks, two in flight; one block answer is a 503 and that
	 * block alone is sent again, then the list commits all three. */
	struct script sc = {.replies = {REPLY("503 Busy", ""),
					REPLY("201 Created", ""),
					REPLY("201 Created", ""),
					REPLY("201 Created", ""),
					REPLY("201 Created", "")},
			    .n = 5};
	struct kn_blob_store_config cfg = {.account_key = AZURITE_KEY,
					   .block_size = 64 << 10,
					   .single_put_max = 64 << 10,
					   .parallel = 2,
					   .retry_base_ms = 1};
	struct kn_blob_store *s;
	(void)state;

	s = open_scripted(&sc, "ckpt", &cfg);
	put_random_file(s, "big");
	pthread_join(sc.thread, NULL);
	for (int i = 0; i < 4; i++)
		assert_non_null(strstr(sc.requests[i], "comp=block&blockid="));
	assert_non_null(strstr(sc.requests[4], "?comp=blocklist"));
	assert_non_null(strstr(sc.requests[4],
			       "<Latest>MDAwMDAwMDAwMDAw</Latest>"
			       "<Latest>MDAwMDAwMDAwMDAx</Latest>"
			       "<Latest>MDAwMDAwMDAwMDAy</Latest></BlockList>"));
	kn_blob_store_free(s);
	stop_script(&sc);
}

/* A staged block, then the commit: the block list under the staging
 * name (ids from the offsets, in offset order), a copy to the blob's
 * name that the service reports pending until a look finds it ended,
 * and the staging blob deleted. A copy that ends otherwise fails. */
static void test_azure_staged_copy_waits_while_pending(void **state)
{
	struct script sc = {.replies = {REPLY("201 Created", ""),
					REPLY("201 Created", ""),
					REPLY("202 Accepted",
					      "x-ms-copy-status: pending\r\n"),
					REPLY("200 OK",
					      "x-ms-copy-status: pending\r\n"),
					REPLY("200 OK",
					      "x-ms-copy-status: success\r\n"),
					REPLY("202 Accepted", ""),
					REPLY("201 Created", ""),
					REPLY("202 Accepted",
					      "x-ms-copy-status: failed\r\n"),
					REPLY("202 Accepted", "")},
			    .n = 9};
	const int64_t offsets[] = {0, 65536};
	struct kn_blob_store_config cfg = {.account_key = AZURITE_KEY,
					   .retry_base_ms = 1};
	struct kn_blob_store *s;
	struct kn_error err;
	char *source;
	(void)state;

	s = open_scripted(&sc, "ckpt/pre", &cfg);
	source = kn_asprintf("x-ms-copy-source: %s/staging/s1\r\n", sc.url);
	assert_true(kn_blob_can_stage(s));
	assert_int_equal(kn_blob_stage_block(s, "staging/s1", 65536, "abc", 3,
					     &err), 0);
	assert_int_equal(kn_blob_stage_commit(s, "staging/s1", offsets, 2,
					      "sha256/x", KN_BLOB_CREATE_ONLY,
					      &err), 0);
	assert_int_equal(kn_blob_stage_commit(s, "staging/s1", offsets, 2,
					      "sha256/y", 0, &err), -EIO);
	pthread_join(sc.thread, NULL);
	assert_non_null(strstr(err.message, "\"failed\""));
	assert_non_null(strstr(sc.requests[0], "PUT /devstoreaccount1/ckpt/pre/"
					       "staging/s1?comp=block&blockid="
					       "MDAwMDAwMDEwMDAw "));
	assert_non_null(strstr(sc.requests[1], "PUT /devstoreaccount1/ckpt/pre/"
					       "staging/s1?comp=blocklist"));
	assert_non_null(strstr(sc.requests[1],
			       "<Latest>MDAwMDAwMDAwMDAw</Latest>"
			       "<Latest>MDAwMDAwMDEwMDAw</Latest></BlockList>"));
	assert_non_null(strstr(sc.requests[2],
			       "PUT /devstoreaccount1/ckpt/pre/sha256/x "));
	assert_non_null(strcasestr(sc.requests[2], source));
	assert_non_null(strstr(sc.requests[2], "If-None-Match: *"));
	assert_non_null(strstr(sc.requests[3], "HEAD /devstoreaccount1/ckpt/"
					       "pre/sha256/x "));
	assert_non_null(strstr(sc.requests[4], "HEAD "));
	assert_non_null(strstr(sc.requests[5], "DELETE /devstoreaccount1/ckpt/"
					       "pre/staging/s1 "));
	assert_null(strstr(sc.requests[7], "If-None-Match"));
	assert_non_null(strstr(sc.requests[8], "DELETE "));
	kn_blob_store_free(s);
	stop_script(&sc);
	free(source);
}

static void test_azure_file_up_to_single_put_max_is_one_put_blob(void **state)
{
	/* 150,000 bytes: three 64 KiB blocks with that block size, but
	 * under the default single-put limit (64 MiB) one Put Blob. The
	 * first answer is a 503: the body is sent again, and the hash taken
	 * from the bytes sent must still be the file's. */
	struct script sc = {.replies = {REPLY("503 Busy", ""),
					REPLY("201 Created", "")},
			    .n = 2};
	struct kn_blob_store_config cfg = {.account_key = AZURITE_KEY,
					   .block_size = 64 << 10,
					   .retry_base_ms = 1};
	struct kn_blob_store *s;
	struct kn_error err;
	(void)state;

	s = open_scripted(&sc, "ckpt", &cfg);
	put_random_file(s, "one");
	pthread_join(sc.thread, NULL);
	assert_int_equal(sc.served, 2);
	for (int i = 0; i < 2; i++) {
		assert_non_null(strstr(sc.requests[i],
				       "PUT /devstoreaccount1/ckpt/one HTTP/1.1"));
		assert_non_null(strstr(sc.requests[i],
				       "x-ms-blob-type: BlockBlob"));
		assert_non_null(strstr(sc.requests[i], "Content-Length: 150000"));
		assert_null(strstr(sc.requests[i], "comp=block"));
	}
	kn_blob_store_free(s);
	stop_script(&sc);

	/* Over Put Blob's own limit is refused when the store opens. */
	cfg.url = "http://127.0.0.1:1/devstoreaccount1/ckpt";
	cfg.single_put_max = (size_t)5001 << 20;
	assert_int_equal(kn_blob_store_open(&cfg, &s, &err), -EINVAL);
	assert_string_equal(err.field, "single_put_max");
}

static void test_azure_errors_hide_secrets(void **state)
{
	struct script sc = {
		.replies = {REPLY("403 Forbidden",
				  "x-ms-error-code: AuthenticationFailed\r\n"),
			    REPLY("503 Busy", ""), REPLY("503 Busy", ""),
			    REPLY("409 Conflict",
				  "x-ms-error-code: BlobAlreadyExists\r\n")},
		.n = 4};
	struct kn_blob_store_config cfg = {
		.sas_token = "?sv=2023-11-03&sr=c&sp=racwdl&sig=SeCrEtSiG%3D",
		.retry_base_ms = 1,
		.max_retries = 1,
	};
	struct kn_blob_store *s;
	struct kn_error err;
	(void)state;

	s = open_scripted(&sc, "ckpt", &cfg);
	/* Azure blobs are no local files */
	assert_null(kn_blob_local_path(s, "a"));
	assert_int_equal(kn_blob_put_bytes(s, "a", "x", 1, 0, &err), -EPERM);
	assert_non_null(strstr(err.message, "HTTP 403 AuthenticationFailed"));
	assert_null(strstr(err.message, "SeCrEtSiG"));
	assert_int_equal(kn_blob_delete(s, "a", &err), -EAGAIN);
	assert_non_null(strstr(err.message, "HTTP 503"));
	assert_non_null(strstr(err.message, "after 2 attempts"));
	assert_int_equal(kn_blob_put_bytes(s, "a", "x", 1, KN_BLOB_CREATE_ONLY,
					   &err), -EEXIST);
	pthread_join(sc.thread, NULL);
	/* the SAS rides on the query, and If-None-Match on create-only */
	assert_non_null(strstr(sc.requests[0], "?sv=2023-11-03&sr=c"));
	assert_null(strstr(sc.requests[0], "Authorization"));
	assert_non_null(strstr(sc.requests[3], "If-None-Match: *"));
	kn_blob_store_free(s);
	stop_script(&sc);

	/* a connection refused is retried, then reported without the SAS */
	cfg.url = "http://127.0.0.1:1/devstoreaccount1/ckpt";
	assert_int_equal(kn_blob_store_open(&cfg, &s, &err), 0);
	assert_int_equal(kn_blob_delete(s, "a", &err), -EAGAIN);
	assert_null(strstr(err.message, "SeCrEtSiG"));
	kn_blob_store_free(s);
}

static void test_azure_open_errors(void **state)
{
	struct kn_blob_store_config cfg = {
		.url = "http://127.0.0.1:1/devstoreaccount1/ckpt"};
	struct kn_blob_store *s;
	struct kn_error err;
	(void)state;

	unsetenv("AZURE_STORAGE_CONNECTION_STRING");
	unsetenv("AZURE_STORAGE_KEY");
	unsetenv("AZURE_STORAGE_SAS_TOKEN");
	assert_int_equal(kn_blob_store_open(&cfg, &s, &err), -EINVAL);
	assert_string_equal(err.field, "credentials");
	cfg.account_key = "not*base64SECRET";
	assert_int_equal(kn_blob_store_open(&cfg, &s, &err), -EINVAL);
	assert_string_equal(err.field, "account_key");
	assert_null(strstr(err.message, "SECRET"));
	cfg.account_key = NULL;
	cfg.sas_token = "sv=1&sp=r";
	assert_int_equal(kn_blob_store_open(&cfg, &s, &err), -EINVAL);
	assert_string_equal(err.field, "sas_token");

	/* from the environment, with the endpoint from the connection string */
	setenv("AZURE_STORAGE_CONNECTION_STRING",
	       "AccountName=devstoreaccount1;AccountKey=" AZURITE_KEY
	       ";BlobEndpoint=http://127.0.0.1:1/devstoreaccount1", 1);
	cfg = (struct kn_blob_store_config){.url = "azure://ckpt/runs",
					    .use_env = true};
	assert_int_equal(kn_blob_store_open(&cfg, &s, &err), 0);
	assert_string_equal(kn_blob_store_url(s),
			    "http://127.0.0.1:1/devstoreaccount1/ckpt/runs");
	kn_blob_store_free(s);
	cfg.use_env = false;
	assert_int_equal(kn_blob_store_open(&cfg, &s, &err), -EINVAL);
	unsetenv("AZURE_STORAGE_CONNECTION_STRING");
	cfg = (struct kn_blob_store_config){.url = "s3://bucket"};
	assert_int_equal(kn_blob_store_open(&cfg, &s, &err), -EINVAL);
	assert_string_equal(err.field, "url");
	cfg.url = "file://relative";
	assert_int_equal(kn_blob_store_open(&cfg, &s, &err), -EINVAL);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_azure_retries_then_succeeds),
	cmocka_unit_test(test_azure_blocks_retry),
	cmocka_unit_test(test_azure_staged_copy_waits_while_pending),
	cmocka_unit_test(test_azure_file_up_to_single_put_max_is_one_put_blob),
	cmocka_unit_test(test_azure_errors_hide_secrets),
	cmocka_unit_test(test_azure_open_errors))
