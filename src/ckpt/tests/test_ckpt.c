/*
 * Unit tests for ckpt: Shared Key signing against vectors computed
 * independently with openssl(1), URL / connection-string / list parsing,
 * manifests, the file store, checkpoints on the file store and the
 * watcher (the Azure client's tests are in test_azure.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/tests/testdir.h"
#include "base/tests/testmain.h"
#include "ckpt/internal.h"

#define AZURITE_KEY                                                          \
	"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFP" \
	"TOtr/KBHBeksoGMGw=="
#define HELLO_SHA "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"

static void write_text(const char *path, const char *text)
{
	char *dir = kn_xstrdup(path);
	*strrchr(dir, '/') = '\0';
	assert_int_equal(kn_mkdir_p(dir, 0755), 0);
	free(dir);
	assert_int_equal(kn_write_file_atomic(path, text, strlen(text), 0644), 0);
}

static char *read_text(const char *path)
{
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(kn_read_file(path, 1 << 20, &data, &len), 0);
	return data;
}

static void decode_azurite_key(unsigned char *key, size_t *len)
{
	FILE *p = popen("printf %s '" AZURITE_KEY "' | base64 -d", "r");
	assert_non_null(p);
	*len = fread(key, 1, 64, p);
	pclose(p);
	assert_int_equal(*len, 64);
}

/* ---- signing ---- */

/*
 * Both signatures were computed outside kiln:
 *   printf '<string>' | openssl dgst -sha256 -mac HMAC \
 *     -macopt hexkey:$(printf %s KEY | base64 -d | xxd -p -c 256) -binary | base64
 */
static void assert_signs(const struct kn_azure_sign_input *in,
			 const char *want_text, const char *want_sig)
{
	unsigned char key[64];
	size_t key_len;
	char sig[64];
	char *text = kn_azure_string_to_sign(in);

	assert_string_equal(text, want_text);
	decode_azurite_key(key, &key_len);
	assert_int_equal(kn_azure_sign(key, key_len, text, sig, sizeof(sig)), 0);
	assert_string_equal(sig, want_sig);
	free(text);
}

static void test_sign_put_blob(void **state)
{
	const struct kn_kv headers[] = {
		{"x-ms-version", "2023-11-03"},
		{"x-ms-blob-type", "BlockBlob"},
		{"x-ms-date", "Wed, 02 Dec 2026 16:00:00 GMT"},
	};
	struct kn_azure_sign_input in = {
		.method = "PUT",
		.content_length = 26,
		.content_type = "application/octet-stream",
		.headers = headers,
		.n_headers = 3,
		.account = "devstoreaccount1",
		.path = "/devstoreaccount1/ckpt/run%201/meta.json",
	};
	(void)state;

	assert_signs(&in,
		     "PUT\n\n\n26\n\napplication/octet-stream\n\n\n\n\n\n\n"
		     "x-ms-blob-type:BlockBlob\n"
		     "x-ms-date:Wed, 02 Dec 2026 16:00:00 GMT\n"
		     "x-ms-version:2023-11-03\n"
		     "/devstoreaccount1/devstoreaccount1/ckpt/run%201/meta.json",
		     "zPtteY5KCECErTe1Q+Cx9nrTsK0g4EcSbGd2lmSsbps=");
}

static void test_sign_sorts_by_name(void **state)
{
	/* "x-ms-range" must come before "x-ms-range-get-content-md5":
	 * sorting whole "name:value" lines gets this wrong. Query parameters
	 * are signed decoded and sorted too. */
	const struct kn_kv headers[] = {
		{"x-ms-range-get-content-md5", "true"},
		{"x-ms-version", "2023-11-03"},
		{"x-ms-range", "bytes=0-99"},
		{"x-ms-date", "Wed, 02 Dec 2026 16:00:00 GMT"},
	};
	const struct kn_kv query[] = {
		{"restype", "container"},
		{"prefix", "job 1/"},
		{"comp", "list"},
	};
	struct kn_azure_sign_input in = {
		.method = "GET",
		.headers = headers,
		.n_headers = 4,
		.account = "myaccount",
		.path = "/ckpt/a/b.bin",
		.query = query,
		.n_query = 3,
	};
	(void)state;

	assert_signs(&in,
		     "GET\n\n\n\n\n\n\n\n\n\n\n\n"
		     "x-ms-date:Wed, 02 Dec 2026 16:00:00 GMT\n"
		     "x-ms-range:bytes=0-99\n"
		     "x-ms-range-get-content-md5:true\n"
		     "x-ms-version:2023-11-03\n"
		     "/myaccount/ckpt/a/b.bin\ncomp:list\nprefix:job 1/\n"
		     "restype:container",
		     "OPCfYvHTZas/39oS2bQnyXcgd4wFjhKoSlm/hsD0guk=");
}

static void test_url_encode(void **state)
{
	char *e = kn_url_encode("job 1/ckpt+x=é", 1);
	(void)state;
	assert_string_equal(e, "job%201/ckpt%2Bx%3D%C3%A9");
	free(e);
	e = kn_url_encode("a/b", 0);
	assert_string_equal(e, "a%2Fb");
	free(e);
}

/* ---- parsing ---- */

/* got is want (both NULL, or the same text); the case and field named
   when not. */
static void expect_str(const char *what, const char *field, const char *got,
		       const char *want)
{
	if (want ? !got || strcmp(got, want) : got != NULL)
		fail_msg("%s: %s is \"%s\", not \"%s\"", what, field,
			 got ? got : "(null)", want ? want : "(null)");
}

static void test_parse_url(void **state)
{
	static const struct {
		const char *url;
		struct kn_azure_url want;
	} good[] = {
		{"https://acct1.blob.core.windows.net/ckpt/a/b/",
		 {.endpoint = "https://acct1.blob.core.windows.net",
		  .path_base = "", .account = "acct1", .container = "ckpt",
		  .prefix = "a/b/"}},
		{"http://127.0.0.1:10000/devstoreaccount1/ckpt?sv=1&sig=abc",
		 {.endpoint = "http://127.0.0.1:10000/devstoreaccount1",
		  .path_base = "/devstoreaccount1",
		  .account = "devstoreaccount1", .container = "ckpt",
		  .prefix = "", .sas = "sv=1&sig=abc"}},
	};
	struct kn_azure_url u;
	struct kn_error err;
	(void)state;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		const struct kn_azure_url *w = &good[i].want;
		const char *what = good[i].url;

		assert_int_equal(kn_azure_parse_url(what, &u, &err), 0);
		expect_str(what, "account", u.account, w->account);
		expect_str(what, "container", u.container, w->container);
		expect_str(what, "prefix", u.prefix, w->prefix);
		expect_str(what, "path_base", u.path_base, w->path_base);
		expect_str(what, "endpoint", u.endpoint, w->endpoint);
		expect_str(what, "sas", u.sas, w->sas);
		kn_azure_url_release(&u);
	}

	static const char *bad[] = {
		"ftp://x/y/z",
		"http://127.0.0.1:10000/devstoreaccount1",
		"http://127.0.0.1:10000/devstoreaccount1/Bad_Container",
		"https://UPPER.blob.core.windows.net/ckpt",
		"http://127.0.0.1/acct/ckpt/../x",
		"http://user:pw@127.0.0.1/acct/ckpt",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&err, 0, sizeof(err));
		assert_int_equal(kn_azure_parse_url(bad[i], &u, &err), -EINVAL);
		assert_string_equal(err.field, "url");
		assert_null(strstr(err.message, "pw"));
	}
}

static void test_parse_connection_string(void **state)
{
	struct kn_azure_conn c;
	struct kn_error err;
	(void)state;

	assert_int_equal(kn_azure_parse_connection_string(
				 "DefaultEndpointsProtocol=http;AccountName="
				 "devstoreaccount1;AccountKey=" AZURITE_KEY
				 ";BlobEndpoint=http://127.0.0.1:10000/"
				 "devstoreaccount1/;",
				 &c, &err), 0);
	assert_string_equal(c.account_name, "devstoreaccount1");
	assert_string_equal(c.account_key, AZURITE_KEY);
	assert_string_equal(c.blob_endpoint,
			    "http://127.0.0.1:10000/devstoreaccount1");
	assert_null(c.sas);
	kn_azure_conn_release(&c);

	assert_int_equal(kn_azure_parse_connection_string(
				 "AccountName=acct1;EndpointSuffix=core.chinacloudapi.cn;"
				 "SharedAccessSignature=sv=2023&sig=SECRETSIG",
				 &c, &err), 0);
	assert_string_equal(c.blob_endpoint,
			    "https://acct1.blob.core.chinacloudapi.cn");
	assert_string_equal(c.sas, "sv=2023&sig=SECRETSIG");
	kn_azure_conn_release(&c);

	assert_int_equal(kn_azure_parse_connection_string(
				 "AccountName=a;AccountKey=SECRETKEY;AccountKey=x",
				 &c, &err), -EINVAL);
	assert_non_null(strstr(err.message, "AccountKey given twice"));
	assert_null(strstr(err.message, "SECRETKEY"));
	assert_int_equal(kn_azure_parse_connection_string(
				 "AccountName=a;SECRETKEY", &c, &err), -EINVAL);
	assert_non_null(strstr(err.message, "part 2"));
	assert_null(strstr(err.message, "SECRETKEY"));
	assert_int_equal(kn_azure_parse_connection_string("AccountName=a", &c,
							  &err), -EINVAL);
}

static void test_parse_list(void **state)
{
	static const char page1[] =
		"<?xml version=\"1.0\" encoding=\"utf-8\"?>"
		"<EnumerationResults ServiceEndpoint=\"http://x/\" "
		"ContainerName=\"ckpt\"><Prefix>p/j</Prefix><Blobs>"
		"<Blob><Name>p/j/a&amp;b.bin</Name><Properties>"
		"<Content-Length>12</Content-Length></Properties></Blob>"
		"<Blob><Name>p/j/caf&#xE9;</Name><Properties>"
		"<Content-Length>0</Content-Length></Properties></Blob>"
		"</Blobs><NextMarker>2!72!MDAw</NextMarker></EnumerationResults>";
	static const char page2[] =
		"<EnumerationResults><Blobs/><NextMarker /></EnumerationResults>";
	struct kn_blob_list list = {0};
	struct kn_error err;
	char *marker = NULL;
	(void)state;

	assert_int_equal(kn_azure_parse_list(page1, strlen(page1), "p/", &list,
					     &marker, &err), 0);
	assert_int_equal(list.n, 2);
	assert_string_equal(list.items[0].name, "j/a&b.bin");
	assert_int_equal(list.items[0].size, 12);
	assert_string_equal(list.items[1].name, "j/caf\xc3\xa9");
	assert_string_equal(marker, "2!72!MDAw");
	free(marker);
	assert_int_equal(kn_azure_parse_list(page2, strlen(page2), "p/", &list,
					     &marker, &err), 0);
	assert_null(marker);
	assert_int_equal(list.n, 2);
	kn_blob_list_release(&list);

	static const char *bad[] = {
		"<html>nope</html>",
		"<EnumerationResults><Blob><Name>x</Name>",
		"<EnumerationResults><Blob><Name>x</Name></Blob>",
		"<EnumerationResults><Blob><Name>x&bogus;</Name>"
		"<Content-Length>1</Content-Length></Blob>",
		"<EnumerationResults><Blob><Name>x</Name>"
		"<Content-Length>-4</Content-Length></Blob>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(kn_azure_parse_list(bad[i], strlen(bad[i]), "",
						     &list, &marker, &err),
				 -EIO);
		kn_blob_list_release(&list);
	}
}

/* ---- manifests ---- */

static void test_manifest_round_trip(void **state)
{
	struct kn_ckpt_file files[] = {
		{"model.pt", 6, HELLO_SHA},
		{"sub/opt.pt", 0,
		 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	};
	struct kn_ckpt_manifest m = {.name = "step-000120",
				     .created_ms = 1764690000000,
				     .files = files, .n = 2}, back;
	struct kn_error err;
	char *json = kn_ckpt_manifest_to_json(&m);
	(void)state;

	assert_int_equal(kn_ckpt_manifest_parse(json, strlen(json), "m.json",
						&back, &err), 0);
	assert_string_equal(back.name, "step-000120");
	assert_int_equal(back.created_ms, 1764690000000);
	assert_int_equal(back.n, 2);
	for (size_t i = 0; i < 2; i++) {
		assert_string_equal(back.files[i].path, files[i].path);
		assert_int_equal(back.files[i].size, files[i].size);
		assert_string_equal(back.files[i].sha256, files[i].sha256);
	}
	kn_ckpt_manifest_release(&back);
	free(json);

	static const struct {
		const char *text, *needle;
	} bad[] = {
		{"{\"version\":2,\"name\":\"a\",\"files\":[]}", "version"},
		{"{\"version\":1,\"name\":\"a/b\",\"files\":[]}", "name"},
		{"{\"version\":1,\"name\":\"a\",\"files\":[{\"path\":\"../x\","
		 "\"size\":1,\"sha256\":\"" HELLO_SHA "\"}]}", "files[0].path"},
		{"{\"version\":1,\"name\":\"a\",\"files\":[{\"path\":\"x\","
		 "\"size\":-1,\"sha256\":\"" HELLO_SHA "\"}]}", "files[0].size"},
		{"{\"version\":1,\"name\":\"a\",\"files\":[{\"path\":\"x\","
		 "\"size\":1,\"sha256\":\"ABC\"}]}", "files[0].sha256"},
		{"{\"version\":1,\"name\":\"a\",\"files\":[{\"path\":\"x\","
		 "\"size\":1,\"sha256\":\"" HELLO_SHA "\"},{\"path\":\"x\","
		 "\"size\":1,\"sha256\":\"" HELLO_SHA "\"}]}", "listed twice"},
		{"{\"version\":1,", "m.json:1:"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(kn_ckpt_manifest_parse(bad[i].text,
							strlen(bad[i].text),
							"m.json", &back, &err),
				 -EINVAL);
		assert_non_null(strstr(err.message, bad[i].needle));
	}
}

/* ---- file store ---- */

static struct kn_blob_store *open_file_store(const char *root)
{
	char *url = kn_asprintf("file://%s", root);
	struct kn_blob_store_config cfg = {.url = url};
	struct kn_blob_store *s = NULL;
	struct kn_error err;
	assert_int_equal(kn_blob_store_open(&cfg, &s, &err), 0);
	free(url);
	return s;
}

/* A file store in a fresh directory, for the cases that need one. */
struct store_dir {
	char *dir;  /* the case's directory, removed after it */
	char *root; /* DIR/blobs, the store's root */
	struct kn_blob_store *s;
};

static int store_dir_setup(void **state)
{
	struct store_dir *sd = kn_xcalloc(1, sizeof(*sd));

	sd->dir = kn_test_dir("ckpt");
	sd->root = kn_asprintf("%s/blobs", sd->dir);
	sd->s = open_file_store(sd->root);
	*state = sd;
	return 0;
}

static int store_dir_teardown(void **state)
{
	struct store_dir *sd = *state;

	kn_blob_store_free(sd->s);
	kn_rm_rf(sd->dir);
	KN_FREE_ALL(sd->dir, sd->root, sd);
	return 0;
}

#define STORE_DIR_TEST(f)                                                   \
	cmocka_unit_test_setup_teardown(f, store_dir_setup, store_dir_teardown)

static void test_file_store(void **state)
{
	struct store_dir *sd = *state;
	char *src = kn_asprintf("%s/src.txt", sd->dir);
	char *dst = kn_asprintf("%s/out/dst.txt", sd->dir);
	struct kn_blob_store *s = sd->s;
	struct kn_blob_list list;
	struct kn_blob_info info;
	struct kn_error err;
	char sha[KN_SHA256_HEX_LEN + 1];
	int64_t size = 0;
	char *text, *data;
	size_t len;

	write_text(src, "hello\n");
	assert_int_equal(kn_blob_put_file(s, "j/a b.txt", src, 0, sha, &size,
					  &err), 0);
	assert_string_equal(sha, HELLO_SHA);
	assert_int_equal(size, 6);
	assert_int_equal(kn_blob_put_bytes(s, "j/sub/c", "xyz", 3, 0, &err), 0);
	assert_int_equal(kn_blob_put_bytes(s, "k/d", "", 0, 0, &err), 0);
	/* create-only refuses an existing blob and leaves it as it was */
	assert_int_equal(kn_blob_put_bytes(s, "j/sub/c", "new", 3,
					   KN_BLOB_CREATE_ONLY, &err), -EEXIST);
	assert_int_equal(err.code, KN_ECONFLICT);
	assert_int_equal(kn_blob_put_bytes(s, "j/new", "n", 1,
					   KN_BLOB_CREATE_ONLY, &err), 0);
	/* ... and so does a create-only file put, leaving no temporary */
	{
		char *other = kn_asprintf("%s/other.txt", sd->dir);
		write_text(other, "other\n");
		assert_int_equal(kn_blob_put_file(s, "j/a b.txt", other,
						  KN_BLOB_CREATE_ONLY, sha,
						  NULL, &err), -EEXIST);
		assert_int_equal(err.code, KN_ECONFLICT);
		unlink(other);
		free(other);
	}
	{
		/* the local file behind a blob is the blob: the registry
		   hashes it in place */
		char *local = kn_blob_local_path(s, "j/a b.txt");
		assert_non_null(local);
		text = read_text(local);
		assert_string_equal(text, "hello\n");
		KN_FREE_ALL(text, local);
		assert_null(kn_blob_local_path(s, "../escape"));
	}

	assert_int_equal(kn_blob_list(s, "j/", &list, &err), 0);
	assert_int_equal(list.n, 3);
	assert_string_equal(list.items[0].name, "j/a b.txt");
	assert_string_equal(list.items[1].name, "j/new");
	assert_string_equal(list.items[2].name, "j/sub/c");
	assert_int_equal(list.items[2].size, 3);
	kn_blob_list_release(&list);
	assert_int_equal(kn_blob_list(s, "j/s", &list, &err), 0);
	assert_int_equal(list.n, 1);
	kn_blob_list_release(&list);
	assert_int_equal(kn_blob_list(s, "", &list, &err), 0);
	assert_int_equal(list.n, 4);
	kn_blob_list_release(&list);

	assert_int_equal(kn_blob_get_file(s, "j/a b.txt", dst, 0, -1, sha, &err), 0);
	assert_string_equal(sha, HELLO_SHA);
	text = read_text(dst);
	assert_string_equal(text, "hello\n");
	free(text);
	assert_int_equal(kn_blob_get_file(s, "j/a b.txt", dst, 1, 3, NULL, &err), 0);
	text = read_text(dst);
	assert_string_equal(text, "ell");
	free(text);
	assert_int_equal(kn_blob_get_file(s, "j/a b.txt", dst, 2, -1, NULL, &err), 0);
	text = read_text(dst);
	assert_string_equal(text, "llo\n");
	free(text);
	assert_int_equal(kn_blob_get_file(s, "j/a b.txt", dst, 6, -1, NULL, &err),
			 -EINVAL);
	assert_int_equal(kn_blob_get_file(s, "nope", dst, 0, -1, NULL, &err),
			 -ENOENT);
	assert_int_equal(kn_blob_get_bytes(s, "j/sub/c", 16, &data, &len, &err), 0);
	assert_string_equal(data, "xyz");
	free(data);
	assert_int_equal(kn_blob_get_bytes(s, "j/sub/c", 2, &data, &len, &err),
			 -E2BIG);

	assert_int_equal(kn_blob_stat(s, "j/sub/c", &info, &err), 0);
	assert_int_equal(info.size, 3);
	assert_int_equal(kn_blob_delete(s, "j/sub/c", &err), 0);
	assert_int_equal(kn_blob_delete(s, "j/sub/c", &err), -ENOENT);
	assert_int_equal(kn_blob_stat(s, "j/sub/c", &info, &err), -ENOENT);
	{
		/* the emptied directory went with its last blob */
		char *sub = kn_asprintf("%s/j/sub", sd->root);
		struct stat st;
		assert_int_equal(stat(sub, &st), -1);
		free(sub);
	}
	assert_int_equal(kn_blob_put_bytes(s, "../x", "", 0, 0, &err), -EINVAL);
	assert_int_equal(kn_blob_put_bytes(s, "a//b", "", 0, 0, &err), -EINVAL);

	KN_FREE_ALL(src, dst);
}

/* A temporary at path, its mtime age_s in the past; locked: an open,
   locked descriptor to it (else -1), as a live writer holds. */
static int plant_temp(const char *path, int age_s, bool locked)
{
	struct timespec t[2];
	int fd;

	write_text(path, "half");
	clock_gettime(CLOCK_REALTIME, &t[0]);
	t[0].tv_sec -= age_s;
	t[1] = t[0];
	assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
	if (!locked)
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0);
	return fd;
}

static void test_file_store_sweeps_dead_temps(void **state)
{
	struct store_dir *sd = *state;
	char *dead = kn_asprintf("%s/j/w.kiln-tmp-AAAAAA", sd->root);
	char *live = kn_asprintf("%s/j/w.kiln-tmp-BBBBBB", sd->root);
	char *fresh = kn_asprintf("%s/j/w.kiln-tmp-CCCCCC", sd->root);
	char *other = kn_asprintf("%s/j/v.kiln-tmp-DDDDDD", sd->root);
	struct kn_blob_store *s = sd->s;
	struct kn_error err;
	int live_fd;

	/* A write killed mid-way left the first; the second's writer lives. */
	assert_int_equal(kn_blob_put_bytes(s, "j/v", "v", 1, 0, &err), 0);
	plant_temp(dead, 3600, false);
	live_fd = plant_temp(live, 3600, true);
	plant_temp(fresh, 0, false); /* just made: not locked yet */
	plant_temp(other, 3600, false);
	assert_int_equal(kn_blob_put_bytes(s, "j/w", "whole", 5, 0, &err), 0);
	assert_int_equal(access(dead, F_OK), -1);
	assert_int_equal(access(live, F_OK), 0);
	assert_int_equal(access(fresh, F_OK), 0);
	/* Another blob's temporaries wait for that blob's next write. */
	assert_int_equal(access(other, F_OK), 0);
	close(live_fd);
	KN_FREE_ALL(other, fresh, live, dead);
}

static void test_file_store_large(void **state)
{
	/* Several copy chunks, and a size that is not a multiple of one. */
	struct store_dir *sd = *state;
	char *src = kn_asprintf("%s/big", sd->dir);
	char *dst = kn_asprintf("%s/back", sd->dir);
	char *cmd = kn_asprintf("head -c 40000123 /dev/urandom > '%s' && "
				"sha256sum '%s' | cut -c1-64", src, src);
	struct kn_blob_store *s = sd->s;
	char want[80] = "", sha[KN_SHA256_HEX_LEN + 1];
	struct kn_error err;
	int64_t size;
	FILE *p = popen(cmd, "r");

	assert_non_null(fgets(want, sizeof(want), p));
	pclose(p);
	want[64] = '\0';
	assert_int_equal(kn_blob_put_file(s, "big", src, 0, sha, &size, &err), 0);
	assert_string_equal(sha, want);
	assert_int_equal(size, 40000123);
	assert_int_equal(kn_blob_get_file(s, "big", dst, 0, -1, sha, &err), 0);
	assert_string_equal(sha, want);
	KN_FREE_ALL(src, dst, cmd);
}

/*
 * Several chunks, a size not a multiple of one; then a source shorter
 * than it was said to be: an error, not a fault. out_flags O_RDWR lets
 * the kernel copy (copy_file_range, out read back for the hash);
 * O_WRONLY, or through_memory (the tests' knob), copies through a buffer.
 */
static void copy_fd_hashed_case(int out_flags, bool through_memory)
{
	char *dir = kn_test_dir("ckpt");
	char *src = kn_asprintf("%s/src", dir), *dst = kn_asprintf("%s/dst", dir);
	char *cmd = kn_asprintf("head -c 40000123 /dev/urandom > '%s' && "
				"sha256sum '%s' | cut -c1-64", src, src);
	char want[80] = "", sha[KN_SHA256_HEX_LEN + 1] = "", head[5];
	char head_sha[KN_SHA256_HEX_LEN + 1];
	const char *op = "";
	int64_t copied = 0;
	FILE *p = popen(cmd, "r");
	int in, out;
	struct stat st;

	if (through_memory)
		setenv("KILN_TEST_COPY_THROUGH_MEMORY", "1", 1);
	assert_non_null(fgets(want, sizeof(want), p));
	pclose(p);
	want[64] = '\0';
	in = open(src, O_RDONLY);
	out = open(dst, out_flags | O_CREAT | O_TRUNC, 0600);
	assert_int_equal(kn_copy_fd_hashed(in, out, 40000123, sha, &copied,
					   &op), 0);
	assert_string_equal(sha, want);
	assert_int_equal(copied, 40000123);
	assert_int_equal(fstat(out, &st), 0);
	assert_int_equal(st.st_size, 40000123);
	/* Fewer bytes than the file holds: those, hashed as such. */
	assert_int_equal(ftruncate(out, 0), 0);
	assert_int_equal(lseek(out, 0, SEEK_SET), 0);
	assert_int_equal(kn_copy_fd_hashed(in, out, 5, sha, &copied, &op), 0);
	assert_int_equal(copied, 5);
	assert_int_equal(fstat(out, &st), 0);
	assert_int_equal(st.st_size, 5);
	assert_int_equal(pread(in, head, 5, 0), 5);
	kn_sha256_hex(head, 5, head_sha);
	assert_string_equal(sha, head_sha);
	assert_int_equal(ftruncate(out, 0), 0);
	assert_int_equal(lseek(out, 0, SEEK_SET), 0);
	assert_int_equal(kn_copy_fd_hashed(in, out, 40000124, sha, &copied,
					   &op), -EIO);
	assert_string_equal(op, "source shrank while read");
	unsetenv("KILN_TEST_COPY_THROUGH_MEMORY");
	close(in);
	close(out);
	kn_rm_rf(dir);
	KN_FREE_ALL(dir, src, dst, cmd);
}

static void test_copy_fd_hashed(void **state)
{
	(void)state;
	copy_fd_hashed_case(O_RDWR, false);
	copy_fd_hashed_case(O_WRONLY, false);
	copy_fd_hashed_case(O_RDWR, true);
}

/* The file store's copies on both paths: the kernel's and a buffer's. */
static void test_file_store_through_memory(void **state)
{
	void (*const cases[])(void **) = {test_file_store_large,
					  test_file_store};

	setenv("KILN_TEST_COPY_THROUGH_MEMORY", "1", 1);
	for (size_t i = 0; i < KN_LEN(cases); i++) {
		store_dir_setup(state);
		cases[i](state);
		store_dir_teardown(state);
	}
	unsetenv("KILN_TEST_COPY_THROUGH_MEMORY");
}

/* Reply headers as curl hands them over: no NUL, CRLF kept. */
static void head_lines(struct kn_azure_head *h, const char *const *lines)
{
	for (; *lines; lines++) {
		size_t len = strlen(*lines);
		char *exact = kn_xmalloc(len ? len : 1);

		memcpy(exact, *lines, len);
		kn_azure_head_line(h, exact, len);
		free(exact);
	}
}

static void test_azure_head(void **state)
{
	struct kn_azure_head h = {0};
	(void)state;

	head_lines(&h, (const char *const[]){
		"HTTP/1.1 100 Continue\r\n", "x-ms-error-code: Early\r\n",
		"HTTP/1.1 206 Partial Content\r\n",
		"Content-Length: 8388608\r\n",
		"content-range:   bytes 0-8388607/1073741824 \r\n",
		"ETag: \"0x8DC5\"\r\n", "x-ms-request-id: r\r\n", NULL});
	assert_int_equal(h.status, 206);
	assert_string_equal(h.error_code, "");
	assert_int_equal(h.content_length, 8388608);
	assert_string_equal(h.content_range, "bytes 0-8388607/1073741824");
	assert_string_equal(h.etag, "\"0x8DC5\"");
	/* A new reply forgets the last; no length is -1, not 0. */
	head_lines(&h, (const char *const[]){
		"HTTP/1.1 404 The specified blob does not exist.\r\n",
		"x-ms-error-code: Blob<Not>Found\r\n", NULL});
	assert_int_equal(h.status, 404);
	assert_string_equal(h.error_code, "BlobNotFound");
	assert_int_equal(h.content_length, -1);
	assert_string_equal(h.etag, "");
	/* 19 digits and signs are no length; a control byte drops a value;
	   a status is three digits or nothing. */
	head_lines(&h, (const char *const[]){
		"HTTP/1.1 2000 OK\r\n", "Content-Length: 9999999999999999999\r\n",
		"ETag: \"a\x01b\"\r\n", NULL});
	assert_int_equal(h.status, 0);
	assert_int_equal(h.content_length, -1);
	assert_string_equal(h.etag, "");
	head_lines(&h, (const char *const[]){"HTTP/1.1 20", "Content-Length: -1",
					      NULL});
	assert_int_equal(h.status, 0);
	assert_int_equal(h.content_length, -1);
}

/* ---- checkpoints on the file store ---- */

static void make_checkpoint(const char *parent, const char *name,
			    const char *content)
{
	char *a = kn_asprintf("%s/%s/model.bin", parent, name);
	char *b = kn_asprintf("%s/%s/opt/state.bin", parent, name);
	write_text(a, content);
	write_text(b, "optimizer");
	KN_FREE_ALL(a, b);
}

static void flip_byte(const char *path)
{
	int fd = open(path, O_RDWR);
	char ch;
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &ch, 1, 0), 1);
	ch ^= 1;
	assert_int_equal(pwrite(fd, &ch, 1, 0), 1);
	close(fd);
}

static void test_checkpoints(void **state)
{
	struct store_dir *sd = *state;
	char *local = kn_asprintf("%s/local", sd->dir);
	char *restore = kn_asprintf("%s/restore", sd->dir);
	struct kn_blob_store *s = sd->s;
	struct kn_ckpt_manifest m;
	struct kn_ckpt_list list;
	struct kn_error err;
	char *name = NULL, *warnings = NULL, *path, *text;
	size_t deleted = 0;

	make_checkpoint(local, "step-9", "nine");
	make_checkpoint(local, "step-10", "ten");
	make_checkpoint(local, "step-11", "eleven");
	for (int i = 9; i <= 11; i++) {
		char *d = kn_asprintf("%s/step-%d", local, i);
		assert_int_equal(kn_ckpt_upload(s, "7", d, NULL, &m, &err), 0);
		assert_int_equal(m.n, 2);
		assert_string_equal(m.files[0].path, "model.bin");
		assert_string_equal(m.files[1].path, "opt/state.bin");
		kn_ckpt_manifest_release(&m);
		free(d);
	}
	/* a re-run of a finished upload sends nothing and reports it */
	path = kn_asprintf("%s/step-11", local);
	assert_int_equal(kn_ckpt_upload(s, "7", path, NULL, &m, &err), 0);
	assert_string_equal(m.name, "step-11");
	kn_ckpt_manifest_release(&m);
	free(path);
	/* an upload cut short: files but no manifest */
	path = kn_asprintf("%s/7/checkpoints/step-12/model.bin", sd->root);
	write_text(path, "twelve");
	free(path);

	assert_int_equal(kn_ckpt_list(s, "7", &list, &err), 0);
	assert_int_equal(list.n, 4);
	assert_string_equal(list.items[0].name, "step-12");
	assert_false(list.items[0].complete);
	assert_string_equal(list.items[1].name, "step-11");
	assert_true(list.items[1].complete);
	assert_string_equal(list.items[3].name, "step-9");
	kn_ckpt_list_release(&list);

	/* corrupt step-11 in the store: restore skips it and step-12 */
	path = kn_asprintf("%s/7/checkpoints/step-11/opt/state.bin", sd->root);
	flip_byte(path);
	free(path);
	assert_int_equal(kn_ckpt_restore(s, "7", restore, &name, &warnings,
					 &err), 0);
	assert_string_equal(name, "step-10");
	assert_non_null(strstr(warnings, "checkpoint step-12 skipped: no "
					 "MANIFEST.json"));
	assert_non_null(strstr(warnings, "checkpoint step-11 skipped: "
					 "opt/state.bin: sha256"));
	path = kn_asprintf("%s/step-10/model.bin", restore);
	text = read_text(path);
	assert_string_equal(text, "ten");
	KN_FREE_ALL(text, path);
	path = kn_asprintf("%s/step-11.partial", restore);
	assert_int_equal(access(path, F_OK), -1);
	KN_FREE_ALL(path, name, warnings);

	/* retention: keep 2 complete; the cut-short newest stays, as it may
	 * still be uploading */
	assert_int_equal(kn_ckpt_prune(s, "7", 2, &deleted, &err), 0);
	assert_int_equal(deleted, 1);
	assert_int_equal(kn_ckpt_list(s, "7", &list, &err), 0);
	assert_int_equal(list.n, 3);
	assert_string_equal(list.items[2].name, "step-10");
	kn_ckpt_list_release(&list);
	assert_int_equal(kn_ckpt_prune(s, "7", 1, &deleted, &err), 0);
	assert_int_equal(deleted, 1);

	/* nothing verifies: step-11 corrupt, step-12 incomplete */
	kn_rm_rf(restore);
	assert_int_equal(kn_ckpt_restore(s, "7", restore, &name, &warnings,
					 &err), -ENOENT);
	assert_non_null(strstr(warnings, "step-11"));
	free(warnings);

	/* outputs */
	path = kn_asprintf("%s/out/final_weights.bin", sd->dir);
	write_text(path, "hello\n");
	free(path);
	path = kn_asprintf("%s/out", sd->dir);
	assert_int_equal(kn_ckpt_upload_outputs(s, "7", path, &m, &err), 0);
	assert_int_equal(m.n, 1);
	assert_string_equal(m.files[0].sha256, HELLO_SHA);
	kn_ckpt_manifest_release(&m);
	free(path);

	/* a reserved name in a checkpoint is refused */
	path = kn_asprintf("%s/step-20/MANIFEST.json", local);
	write_text(path, "{}");
	free(path);
	path = kn_asprintf("%s/step-20", local);
	assert_int_equal(kn_ckpt_upload(s, "7", path, NULL, NULL, &err), -EINVAL);
	assert_non_null(strstr(err.message, "reserved"));
	free(path);

	/* A link in a checkpoint (to a server secret, say) refuses it whole:
	   nothing of it, least of all the secret, reaches the store. */
	path = kn_asprintf("%s/secret", sd->dir);
	write_text(path, "server-secret-bytes");
	text = kn_asprintf("%s/step-21/state", local);
	write_text(text, "ok");
	free(text);
	text = kn_asprintf("%s/step-21/weights", local);
	assert_int_equal(symlink(path, text), 0);
	KN_FREE_ALL(text, path);
	path = kn_asprintf("%s/step-21", local);
	assert_int_equal(kn_ckpt_upload(s, "7", path, NULL, NULL, &err), -EPERM);
	assert_non_null(strstr(err.message, "weights is a symbolic link"));
	assert_true(kn_task_file_refused(&err));
	free(path);
	path = kn_asprintf("%s/7/checkpoints/step-21", sd->root);
	assert_int_equal(access(path, F_OK), -1);
	free(path);
	/* So does a checkpoint that is itself a link. */
	path = kn_asprintf("%s/step-22", local);
	text = kn_asprintf("%s/step-10", local);
	assert_int_equal(symlink(text, path), 0);
	assert_int_equal(kn_ckpt_upload(s, "7", path, NULL, NULL, &err), -EPERM);
	KN_FREE_ALL(text, path);

	KN_FREE_ALL(local, restore);
}

/* The file store with its sync counted. */
static int syncs;
static const struct kn_blob_store_ops *file_ops;

static int counted_sync(struct kn_blob_store *s, struct kn_error *err)
{
	syncs++;
	return file_ops->sync(s, err);
}

static void test_prune_syncs_only_to_delete(void **state)
{
	struct store_dir *sd = *state;
	char *local = kn_asprintf("%s/local", sd->dir);
	struct kn_blob_store *s = sd->s;
	struct kn_blob_store_ops counted;
	struct kn_error err;
	size_t deleted = 9;

	file_ops = s->ops;
	counted = *s->ops;
	counted.sync = counted_sync;
	s->ops = &counted;
	make_checkpoint(local, "step-1", "one");
	make_checkpoint(local, "step-2", "two");
	for (int i = 1; i <= 2; i++) {
		char *d = kn_asprintf("%s/step-%d", local, i);
		assert_int_equal(kn_ckpt_upload(s, "7", d, NULL, NULL, &err), 0);
		free(d);
	}
	/* nothing to delete: nothing to make durable first */
	assert_int_equal(kn_ckpt_prune(s, "7", 2, &deleted, &err), 0);
	assert_int_equal(deleted, 0);
	assert_int_equal(syncs, 0);
	/* one to delete: the kept one is made durable before it goes */
	assert_int_equal(kn_ckpt_prune(s, "7", 1, &deleted, &err), 0);
	assert_int_equal(deleted, 1);
	assert_int_equal(syncs, 1);
	s->ops = file_ops;
	free(local);
}

/* ---- watcher ---- */

static char *wait_next(struct kn_ckpt_watch *w)
{
	struct kn_error err;
	char *name = NULL;
	/* Bounded: the scan interval in these tests is 50 ms. */
	for (int i = 0; i < 200; i++) {
		struct pollfd pfd = {kn_ckpt_watch_fd(w), POLLIN, 0};
		int rc = kn_ckpt_watch_next(w, &name, &err);
		assert_true(rc >= 0);
		if (rc == 1)
			return name;
		poll(&pfd, 1, 100);
	}
	fail_msg("no checkpoint noticed");
	return NULL;
}

static void test_watch(void **state)
{
	char *dir = kn_test_dir("ckpt");
	char *a_tmp = kn_asprintf("%s/step-2.tmp", dir);
	char *a = kn_asprintf("%s/step-2", dir);
	char *b = kn_asprintf("%s/step-10", dir);
	char *pre = kn_asprintf("%s/step-1", dir);
	struct kn_ckpt_watch *w;
	struct kn_error err;
	char *name;
	(void)state;

	assert_int_equal(mkdir(pre, 0755), 0);
	assert_int_equal(kn_ckpt_watch_new(dir, 50, 0, &w, &err), 0);
	name = wait_next(w);
	assert_string_equal(name, "step-1");
	free(name);
	assert_int_equal(mkdir(a_tmp, 0755), 0);
	assert_int_equal(rename(a_tmp, a), 0);
	name = wait_next(w);
	assert_string_equal(name, "step-2");
	free(name);
	/* made under its final name: only the scan finds it */
	assert_int_equal(mkdir(b, 0755), 0);
	name = wait_next(w);
	assert_string_equal(name, "step-10");
	free(name);
	assert_int_equal(kn_ckpt_watch_next(w, &name, &err), 0);
	kn_ckpt_watch_free(w);
	assert_int_equal(kn_ckpt_watch_new("/nonexistent/kiln", 0, 0, &w, &err),
			 -ENOENT);
	kn_rm_rf(dir);
	KN_FREE_ALL(dir, a_tmp, a, b, pre);
}

/* The next file written ahead of a commit, after reading the events. */
static bool next_written(struct kn_ckpt_watch *w, const char *name,
			 const char *path)
{
	struct kn_error err;
	char *committed = NULL, *got_name = NULL, *got_path = NULL;
	bool match;

	while (kn_ckpt_watch_next(w, &committed, &err) == 1)
		free(committed);
	if (kn_ckpt_watch_next_written(w, &got_name, &got_path) != 1)
		return name == NULL;
	match = name && strcmp(got_name, name) == 0 &&
		strcmp(got_path, path) == 0;
	KN_FREE_ALL(got_name, got_path);
	return match;
}

static ino_t inode_of(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return st.st_ino;
}

static void test_early_upload(void **state)
{
	struct store_dir *sd = *state;
	char *ck = kn_asprintf("%s/ck", sd->dir);
	char *tmp = kn_asprintf("%s/step-5.tmp", ck);
	char *final = kn_asprintf("%s/step-5", ck);
	char *restore = kn_asprintf("%s/restore", sd->dir);
	char *path, *blob_model, *text, *name = NULL, *warnings = NULL;
	char sha[KN_SHA256_HEX_LEN + 1];
	struct kn_blob_store *s = sd->s;
	struct kn_ckpt_sent *sent = kn_ckpt_sent_new();
	struct kn_ckpt_watch *w;
	struct kn_ckpt_manifest m = {0};
	struct kn_ckpt_list list;
	struct kn_error err;
	ino_t model_ino;

	assert_int_equal(mkdir(ck, 0755), 0);
	assert_int_equal(kn_ckpt_watch_new(ck, 50, KN_CKPT_WATCH_FILES, &w,
					   &err), 0);
	/* the task makes NAME.tmp and a directory in it (before the watch
	   follows NAME.tmp), writes and closes files */
	assert_int_equal(mkdir(tmp, 0755), 0);
	path = kn_asprintf("%s/opt", tmp);
	assert_int_equal(mkdir(path, 0755), 0);
	free(path);
	assert_true(next_written(w, NULL, NULL));
	path = kn_asprintf("%s/model.bin", tmp);
	write_text(path, "weights");
	free(path);
	assert_true(next_written(w, "step-5", "model.bin"));
	path = kn_asprintf("%s/opt/state.bin", tmp);
	write_text(path, "moments");
	free(path);
	assert_true(next_written(w, "step-5", "opt/state.bin"));

	/* both go ahead of the commit; no manifest yet */
	assert_int_equal(kn_ckpt_upload_early(s, "7", ck, "step-5", "model.bin",
					      sent, &err), 0);
	assert_int_equal(kn_ckpt_upload_early(s, "7", ck, "step-5",
					      "opt/state.bin", sent, &err), 0);
	blob_model = kn_asprintf("%s/7/checkpoints/step-5/model.bin", sd->root);
	text = read_text(blob_model);
	assert_string_equal(text, "weights");
	free(text);
	model_ino = inode_of(blob_model);
	assert_int_equal(kn_ckpt_list(s, "7", &list, &err), 0);
	assert_int_equal(list.n, 1);
	assert_false(list.items[0].complete);
	kn_ckpt_list_release(&list);
	/* a file that is gone (or not written) sends nothing */
	assert_int_equal(kn_ckpt_upload_early(s, "7", ck, "step-5", "none.bin",
					      sent, &err), 0);
	assert_int_equal(kn_ckpt_upload_early(s, "7", ck, "step-5", "../x",
					      sent, &err), -EINVAL);

	/* the task rewrites one file after it went, then commits */
	path = kn_asprintf("%s/opt/state.bin", tmp);
	write_text(path, "moments, again");
	free(path);
	assert_int_equal(rename(tmp, final), 0);
	/* the commit drops what was still to go: its upload sends it */
	assert_true(next_written(w, NULL, NULL));

	/* the commit sends only the changed file; the digests are right */
	assert_int_equal(kn_ckpt_upload(s, "7", final, sent, &m, &err), 0);
	assert_int_equal(kn_ckpt_sent_reused(sent), 1);
	assert_int_equal(inode_of(blob_model), model_ino);
	assert_int_equal(m.n, 2);
	kn_sha256_hex("weights", 7, sha);
	assert_string_equal(m.files[0].sha256, sha);
	kn_sha256_hex("moments, again", 14, sha);
	assert_string_equal(m.files[1].path, "opt/state.bin");
	assert_string_equal(m.files[1].sha256, sha);
	assert_int_equal(m.files[1].size, 14);
	kn_ckpt_manifest_release(&m);
	assert_int_equal(kn_ckpt_restore(s, "7", restore, &name, &warnings,
					 &err), 0);
	assert_string_equal(name, "step-5");
	assert_null(warnings);
	free(name);

	/* a name complete in the store already is not streamed into */
	assert_int_equal(mkdir(tmp, 0755), 0);
	path = kn_asprintf("%s/model.bin", tmp);
	write_text(path, "other weights");
	free(path);
	assert_int_equal(kn_ckpt_upload_early(s, "7", ck, "step-5", "model.bin",
					      sent, &err), 0);
	text = read_text(blob_model);
	assert_string_equal(text, "weights");
	free(text);

	kn_ckpt_watch_free(w);

	/* a NAME.tmp begun before the watch (a restarted server) is
	   followed from the first scan on */
	path = kn_asprintf("%s/step-7.tmp", ck);
	assert_int_equal(mkdir(path, 0755), 0);
	free(path);
	assert_int_equal(kn_ckpt_watch_new(ck, 50, KN_CKPT_WATCH_FILES, &w,
					   &err), 0);
	assert_true(next_written(w, NULL, NULL));
	path = kn_asprintf("%s/step-7.tmp/late.bin", ck);
	write_text(path, "late");
	free(path);
	assert_true(next_written(w, "step-7", "late.bin"));
	kn_ckpt_watch_free(w);

	kn_ckpt_sent_free(sent);
	KN_FREE_ALL(ck, tmp, final, restore, blob_model);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_sign_put_blob),
	cmocka_unit_test(test_sign_sorts_by_name),
	cmocka_unit_test(test_url_encode),
	cmocka_unit_test(test_parse_url),
	cmocka_unit_test(test_parse_connection_string),
	cmocka_unit_test(test_parse_list),
	cmocka_unit_test(test_manifest_round_trip),
	STORE_DIR_TEST(test_file_store),
	STORE_DIR_TEST(test_file_store_sweeps_dead_temps),
	STORE_DIR_TEST(test_file_store_large),
	cmocka_unit_test(test_copy_fd_hashed),
	cmocka_unit_test(test_file_store_through_memory),
	cmocka_unit_test(test_azure_head),
	STORE_DIR_TEST(test_checkpoints),
	STORE_DIR_TEST(test_prune_syncs_only_to_delete),
	cmocka_unit_test(test_watch),
	STORE_DIR_TEST(test_early_upload))
