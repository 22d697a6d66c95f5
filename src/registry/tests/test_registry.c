/*
 * Unit tests for the registry: references, file lists, the canonical
 * manifest bytes, Ed25519 keys and signatures, the trusted key ring and
 * the parallel hasher.
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

#include "base/tests/testdir.h"
#include "base/tests/testmain.h"
#include "registry/registry.h"

/* printf 'hello\n' | sha256sum */
#define HELLO_SHA "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
/* printf '' | sha256sum */
#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void test_refs(void **state)
{
	struct kn_model_ref r;
	struct kn_error err;
	(void)state;

	assert_int_equal(kn_model_ref_parse("gpt", false, "model", &r, &err), 0);
	assert_string_equal(r.name, "gpt");
	assert_false(kn_model_ref_has_at(&r));
	assert_int_equal(kn_model_ref_parse("gpt@12", true, "model", &r, &err),
			 0);
	assert_int_equal(r.version, 12);
	assert_string_equal(r.alias, "");
	assert_int_equal(kn_model_ref_parse("gpt@prod", true, "model", &r, &err),
			 0);
	assert_string_equal(r.alias, "prod");
	assert_int_equal(r.version, 0);
	assert_int_equal(kn_model_ref_parse("gpt", true, "model", &r, &err),
			 -EINVAL);
	assert_string_equal(err.field, "model");
	assert_int_equal(kn_model_ref_parse("gpt@0", true, "m", &r, &err),
			 -EINVAL);
	assert_int_equal(kn_model_ref_parse("gpt@", true, "m", &r, &err),
			 -EINVAL);
	assert_int_equal(kn_model_ref_parse("-x@1", true, "m", &r, &err),
			 -EINVAL);
	assert_int_equal(kn_model_ref_parse("a/b@1", true, "m", &r, &err),
			 -EINVAL);
	assert_false(kn_model_alias_ok("123"));
	assert_true(kn_model_alias_ok("v2"));
	assert_true(kn_sha256_hex_ok(HELLO_SHA));
	assert_false(kn_sha256_hex_ok("5891B5b522d5df086d0ff0b110fbd9d21bb4fc7163"
				      "af34d08286a2e846f6be03"));
}

static void test_files_json(void **state)
{
	struct kn_model_files f;
	struct kn_error err;
	json_t *a;
	(void)state;

	a = json_loads("[{\"path\":\"b/w.bin\",\"sha256\":\"" HELLO_SHA
		       "\",\"size\":6},{\"path\":\"a.json\",\"sha256\":\"" EMPTY_SHA
		       "\",\"size\":0}]",
		       0, NULL);
	assert_int_equal(kn_model_files_from_json(a, "files", &f, &err), 0);
	assert_int_equal(f.n, 2);
	assert_string_equal(f.items[0].path, "a.json");
	assert_string_equal(f.items[1].path, "b/w.bin");
	assert_int_equal(kn_model_files_bytes(&f), 6);
	kn_model_files_release(&f);
	json_decref(a);

	a = json_loads("[{\"path\":\"../x\",\"sha256\":\"" HELLO_SHA
		       "\",\"size\":6}]", 0, NULL);
	assert_int_equal(kn_model_files_from_json(a, "files", &f, &err),
			 -EINVAL);
	assert_string_equal(err.field, "files[0]");
	assert_non_null(strstr(err.message, "path"));
	json_decref(a);
	a = json_loads("[{\"path\":\"x\",\"sha256\":\"" HELLO_SHA
		       "\",\"size\":6},{\"path\":\"x\",\"sha256\":\"" HELLO_SHA
		       "\",\"size\":6}]", 0, NULL);
	assert_int_equal(kn_model_files_from_json(a, "files", &f, &err),
			 -EINVAL);
	assert_non_null(strstr(err.message, "\"x\" appears twice"));
	json_decref(a);
	a = json_loads("[{\"path\":\"x\",\"sha256\":\"abc\",\"size\":6}]", 0,
		       NULL);
	assert_int_equal(kn_model_files_from_json(a, "files", &f, &err),
			 -EINVAL);
	assert_non_null(strstr(err.message, "sha256"));
	json_decref(a);
}

static void test_canonical_manifest(void **state)
{
	struct kn_model_files f = {0}, back;
	struct kn_error err;
	const char *name;
	int64_t version;
	char *text, *again;
	json_t *m, *parsed;
	(void)state;

	kn_model_files_add(&f, "w.bin", 6, HELLO_SHA);
	kn_model_files_add(&f, "a.json", 0, EMPTY_SHA);
	assert_int_equal(kn_model_files_sort(&f, &err), 0);
	m = kn_model_manifest_new("gpt", 3, &f, "alice", 1700000000123);
	text = kn_model_manifest_canonical(m);
	/* Keys sorted at every level, no spaces, nulls kept. */
	assert_string_equal(
		text,
		"{\"created_at_ms\":1700000000123,\"created_by\":\"alice\","
		"\"files\":[{\"path\":\"a.json\",\"sha256\":\"" EMPTY_SHA
		"\",\"size\":0},{\"path\":\"w.bin\",\"sha256\":\"" HELLO_SHA
		"\",\"size\":6}],\"lineage\":null,\"metrics\":null,"
		"\"name\":\"gpt\",\"version\":3}");
	/* Parsing the bytes and dumping again gives the same bytes: what a
	   verifier recomputes from the server's JSON matches what was signed. */
	parsed = json_loads(text, 0, NULL);
	again = kn_model_manifest_canonical(parsed);
	assert_string_equal(again, text);
	assert_int_equal(kn_model_manifest_read(parsed, "m", &back, &name,
						&version, &err), 0);
	assert_string_equal(name, "gpt");
	assert_int_equal(version, 3);
	assert_int_equal(back.n, 2);
	assert_string_equal(back.items[1].sha256, HELLO_SHA);
	kn_model_files_release(&back);
	KN_FREE_ALL(again, text);
	json_decref(parsed);
	json_decref(m);
	kn_model_files_release(&f);
}

static void test_sign_verify(void **state)
{
	char *dir = kn_test_dir("registry"), *key, *pub_path, *trusted;
	char id[KN_SHA256_HEX + 1], id2[KN_SHA256_HEX + 1];
	unsigned char pub[KN_ED25519_PUB_LEN], pub2[KN_ED25519_PUB_LEN];
	unsigned char sig[KN_ED25519_SIG_LEN];
	struct kn_model_keyring ring;
	struct kn_error err;
	struct stat st;
	const char msg[] = "{\"name\":\"gpt\",\"version\":1}";
	char *b64;
	unsigned char back[KN_ED25519_SIG_LEN];
	(void)state;

	key = kn_asprintf("%s/k", dir);
	pub_path = kn_asprintf("%s/k.pub", dir);
	assert_int_equal(kn_model_keygen(key, id, &err), 0);
	assert_int_equal(stat(key, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* a second keygen never overwrites a key */
	assert_int_equal(kn_model_keygen(key, id2, &err), -EEXIST);

	assert_int_equal(kn_model_sign(key, msg, strlen(msg), pub, sig, &err), 0);
	assert_int_equal(kn_model_pub_load(pub_path, pub2, &err), 0);
	assert_memory_equal(pub, pub2, sizeof(pub));
	kn_model_key_id(pub, id2);
	assert_string_equal(id, id2);
	assert_int_equal(kn_model_sig_check(pub, msg, strlen(msg), sig), 0);
	/* one changed byte of the message, or of the signature, fails */
	{
		char bad[sizeof(msg)];
		memcpy(bad, msg, sizeof(msg));
		bad[10] ^= 1;
		assert_int_equal(kn_model_sig_check(pub, bad, strlen(bad), sig),
				 -EBADMSG);
		sig[0] ^= 1;
		assert_int_equal(kn_model_sig_check(pub, msg, strlen(msg), sig),
				 -EBADMSG);
		sig[0] ^= 1;
	}
	/* the gate: unsigned, untrusted, not verifying, trusted */
	{
		char *pub_b64 = kn_base64_encode(pub, sizeof(pub));
		char *sig_b64 = kn_base64_encode(sig, sizeof(sig));
		struct kn_model_sig s = {id, pub_b64, sig_b64, false};
		assert_int_equal(kn_model_trust_check("m@1", msg, NULL, 0, &err),
				 -EPERM);
		assert_non_null(strstr(err.message, "m@1 is unsigned"));
		assert_int_equal(kn_model_trust_check("m@1", msg, &s, 1, &err),
				 -EPERM);
		assert_non_null(strstr(err.message, "does not trust"));
		s.trusted = true;
		assert_int_equal(kn_model_trust_check("m@1", msg, &s, 1, &err), 0);
		assert_int_equal(kn_model_trust_check("m@1", "{}", &s, 1, &err),
				 -EPERM);
		assert_non_null(strstr(err.message, "does not verify"));
		KN_FREE_ALL(pub_b64, sig_b64);
	}
	b64 = kn_base64_encode(sig, sizeof(sig));
	assert_int_equal(strlen(b64), 88);
	assert_int_equal(kn_base64_decode(b64, back, sizeof(back)),
			 KN_ED25519_SIG_LEN);
	assert_memory_equal(back, sig, sizeof(sig));
	assert_int_equal(kn_base64_decode("abc", back, sizeof(back)), -EINVAL);
	free(b64);

	/* the key ring: the directory's *.pub files, by key id */
	trusted = kn_asprintf("%s/trusted", dir);
	assert_int_equal(kn_model_keyring_load(trusted, &ring, &err), 0);
	assert_int_equal(ring.n, 0);
	assert_int_equal(mkdir(trusted, 0700), 0);
	{
		char *copy = kn_asprintf("cp %s %s/ops.pub", pub_path, trusted);
		assert_int_equal(system(copy), 0);
		free(copy);
	}
	assert_int_equal(kn_model_keyring_load(trusted, &ring, &err), 0);
	assert_int_equal(ring.n, 1);
	assert_true(kn_model_keyring_has(&ring, id));
	assert_false(kn_model_keyring_has(&ring, HELLO_SHA));
	kn_model_keyring_release(&ring);
	/* a private key where a public one belongs is named */
	{
		char *copy = kn_asprintf("cp %s %s/bad.pub", key, trusted);
		assert_int_equal(system(copy), 0);
		free(copy);
	}
	assert_int_equal(kn_model_keyring_load(trusted, &ring, &err), -EINVAL);
	assert_non_null(strstr(err.message, "bad.pub"));

	KN_FREE_ALL(trusted, key, pub_path);
	kn_rm_rf(dir);
	free(dir);
}

static void count_progress(int64_t done, int64_t total, void *arg)
{
	int64_t *last = arg;

	assert_true(done <= total);
	assert_true(done > *last);
	*last = done;
}

static void test_hash_files(void **state)
{
	char *dir = kn_test_dir("registry");
	char *paths[5];
	struct kn_hash_item items[5];
	int64_t last = 0;
	(void)state;

	for (int i = 0; i < 4; i++) {
		const char *text = i == 3 ? "" : "hello\n";

		paths[i] = kn_asprintf("%s/f%d", dir, i);
		assert_int_equal(kn_write_file_replace(paths[i], text,
						       strlen(text), 0644), 0);
	}
	paths[4] = kn_asprintf("%s/missing", dir);
	memset(items, 0, sizeof(items));
	for (int i = 0; i < 5; i++)
		items[i].path = paths[i];
	kn_hash_files(items, 5, 2, 18, count_progress, &last);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(items[i].error, 0);
		assert_string_equal(items[i].sha256, HELLO_SHA);
		assert_int_equal(items[i].size, 6);
	}
	assert_string_equal(items[3].sha256, EMPTY_SHA);
	assert_int_equal(items[4].error, -ENOENT);
	assert_int_equal(last, 18);
	assert_true(kn_hash_threads_default() >= 1);
	for (int i = 0; i < 5; i++)
		free(paths[i]);
	kn_rm_rf(dir);
	free(dir);
}

/* Metrics as an evaluation writes them, checked against thresholds. */
static bool passes(const char *thresholds, const char *metrics, char *why,
		   size_t len)
{
	json_t *t = json_loads(thresholds, 0, NULL);
	json_t *m = json_loads(metrics, JSON_DECODE_ANY, NULL);
	bool ok = kn_model_thresholds_pass(t, m, why, len);

	json_decref(t);
	json_decref(m);
	return ok;
}

static void test_thresholds(void **state)
{
	struct kn_error err;
	char why[128];
	json_t *doc = json_object();
	const char *both = "{\"max\": {\"loss\": 1.8}, \"min\": {\"acc\": 0.9}}";

	(void)state;
	assert_true(passes(both, "{\"loss\": 1.2, \"acc\": 0.95}", why,
			   sizeof(why)));
	assert_string_equal(why, "");
	/* A value equal to its limit holds. */
	assert_true(passes(both, "{\"loss\": 1.8, \"acc\": 0.9}", why,
			   sizeof(why)));
	assert_false(passes(both, "{\"loss\": 2.5, \"acc\": 0.95}", why,
			    sizeof(why)));
	assert_string_equal(why, "loss 2.5 > max 1.8");
	assert_false(passes(both, "{\"loss\": 1.0, \"acc\": 0.5}", why,
			    sizeof(why)));
	assert_string_equal(why, "acc 0.5 < min 0.9");
	assert_false(passes(both, "{\"acc\": 0.95}", why, sizeof(why)));
	assert_string_equal(why, "loss is missing from metrics.json or not a "
				 "finite number");
	assert_false(passes(both, "{\"loss\": \"low\", \"acc\": 1}", why,
			    sizeof(why)));
	assert_false(passes(both, "[1]", why, sizeof(why)));
	assert_string_equal(why, "no metrics.json object");

	/* The CLI's --max / --min, then the server's check of the whole. */
	assert_int_equal(kn_model_thresholds_validate(doc, &err), -EINVAL);
	assert_non_null(strstr(err.message, "at least one threshold"));
	assert_int_equal(kn_model_threshold_add(doc, "max", "loss=1.8", &err), 0);
	assert_int_equal(kn_model_threshold_add(doc, "min", "acc=9e-1", &err), 0);
	assert_int_equal(kn_model_thresholds_validate(doc, &err), 0);
	assert_int_equal(kn_model_threshold_add(doc, "max", "loss", &err),
			 -EINVAL);
	assert_string_equal(err.field, "max");
	assert_int_equal(kn_model_threshold_add(doc, "min", "acc=high", &err),
			 -EINVAL);
	assert_non_null(strstr(err.message, "\"high\" is not a finite number"));
	assert_int_equal(kn_model_threshold_add(doc, "max", "=1", &err),
			 -EINVAL);
	assert_int_equal(kn_model_threshold_add(doc, "max", "loss=inf", &err),
			 -EINVAL);
	{
		json_t *m = json_pack("{s:f, s:f}", "loss", 1.9, "acc", 1.0);
		assert_false(kn_model_thresholds_pass(doc, m, why, sizeof(why)));
		assert_string_equal(why, "loss 1.9 > max 1.8");
		json_object_set_new(m, "loss", json_real(0.5));
		assert_true(kn_model_thresholds_pass(doc, m, why, sizeof(why)));
		json_decref(m);
	}
	json_object_set_new(doc, "between", json_object());
	assert_int_equal(kn_model_thresholds_validate(doc, &err), -EINVAL);
	assert_non_null(strstr(err.message, "unknown key \"between\""));
	json_object_del(doc, "between");
	json_object_set_new(json_object_get(doc, "max"), "ppl",
			    json_string("10"));
	assert_int_equal(kn_model_thresholds_validate(doc, &err), -EINVAL);
	assert_string_equal(err.message, "max.ppl must be a finite number");
	json_decref(doc);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_refs),
	cmocka_unit_test(test_files_json),
	cmocka_unit_test(test_canonical_manifest),
	cmocka_unit_test(test_sign_verify),
	cmocka_unit_test(test_hash_files),
	cmocka_unit_test(test_thresholds))
