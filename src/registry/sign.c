/*
 * Ed25519 keys and signatures through OpenSSL 3's EVP interface (pure
 * Ed25519: the message is signed whole, no pre-hash), and the trusted
 * key ring: a directory of *.pub files.
 */
#include "registry/registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

static const char *ssl_reason(void)
{
	unsigned long e = ERR_get_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;

	ERR_clear_error();
	return r ? r : "unknown OpenSSL error";
}

void kn_model_key_id(const unsigned char pub[KN_ED25519_PUB_LEN],
		     char id[KN_SHA256_HEX + 1])
{
	unsigned char md[32];
	unsigned int len = 0;

	EVP_Digest(pub, KN_ED25519_PUB_LEN, md, &len, EVP_sha256(), NULL);
	for (unsigned i = 0; i < 32; i++)
		snprintf(id + 2 * i, 3, "%02x", md[i]);
}

static int raw_public(EVP_PKEY *key, unsigned char pub[KN_ED25519_PUB_LEN],
		      const char *path, struct kn_error *err)
{
	size_t len = KN_ED25519_PUB_LEN;

	if (EVP_PKEY_get_id(key) != EVP_PKEY_ED25519 ||
	    EVP_PKEY_get_raw_public_key(key, pub, &len) != 1 ||
	    len != KN_ED25519_PUB_LEN)
		return kn_errorf(err, KN_EINVAL, "key", "%s: not an Ed25519 key",
				 path);
	return 0;
}

/* Write text to path, created with mode; refuses an existing file. */
static int write_new(const char *path, const char *data, size_t len,
		     mode_t mode, struct kn_error *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	ssize_t n;

	if (fd < 0)
		return kn_errorf(err, errno == EEXIST ? KN_ECONFLICT : KN_EIO,
				 "out", "%s: %s", path, strerror(errno));
	n = write(fd, data, len);
	if (n != (ssize_t)len || fsync(fd) < 0) {
		int e = n < 0 ? errno : EIO;
		close(fd);
		unlink(path);
		return kn_errorf(err, KN_EIO, "out", "%s: %s", path,
				 strerror(e));
	}
	close(fd);
	return 0;
}

/* A PEM of key (private or public half) as malloc'd text. */
static char *pem_text(EVP_PKEY *key, bool private_half)
{
	BIO *bio = BIO_new(BIO_s_mem());
	char *data = NULL, *out = NULL;
	long len;
	int ok = private_half ? PEM_write_bio_PrivateKey(bio, key, NULL, NULL,
							 0, NULL, NULL)
			      : PEM_write_bio_PUBKEY(bio, key);

	if (ok == 1) {
		len = BIO_get_mem_data(bio, &data);
		out = kn_xmalloc((size_t)len + 1);
		memcpy(out, data, (size_t)len);
		out[len] = '\0';
	}
	BIO_free(bio);
	return out;
}

int kn_model_keygen(const char *path, char id[KN_SHA256_HEX + 1],
		    struct kn_error *err)
{
	EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	unsigned char pub[KN_ED25519_PUB_LEN];
	char *priv_pem = NULL, *pub_pem = NULL, *pub_path = NULL;
	int rc;

	if (!key)
		return kn_errorf(err, KN_EIO, NULL, "Ed25519 key generation: %s",
				 ssl_reason());
	rc = raw_public(key, pub, path, err);
	if (rc < 0)
		goto out;
	priv_pem = pem_text(key, true);
	pub_pem = pem_text(key, false);
	if (!priv_pem || !pub_pem) {
		rc = kn_errorf(err, KN_EIO, NULL, "PEM encoding: %s",
			       ssl_reason());
		goto out;
	}
	pub_path = kn_asprintf("%s.pub", path);
	rc = write_new(path, priv_pem, strlen(priv_pem), 0600, err);
	if (rc < 0)
		goto out;
	rc = write_new(pub_path, pub_pem, strlen(pub_pem), 0644, err);
	if (rc < 0) {
		unlink(path);
		goto out;
	}
	kn_model_key_id(pub, id);
out:
	if (priv_pem)
		OPENSSL_cleanse(priv_pem, strlen(priv_pem));
	KN_FREE_ALL(priv_pem, pub_pem, pub_path);
	EVP_PKEY_free(key);
	return rc;
}

static int load_pem(const char *path, bool private_half, EVP_PKEY **out,
		    struct kn_error *err)
{
	FILE *f = fopen(path, "re");

	if (!f)
		return kn_errorf(err, errno == ENOENT ? KN_ENOTFOUND : KN_EIO,
				 "key", "%s: %s", path, strerror(errno));
	*out = private_half ? PEM_read_PrivateKey(f, NULL, NULL, NULL)
			    : PEM_read_PUBKEY(f, NULL, NULL, NULL);
	fclose(f);
	if (!*out)
		return kn_errorf(err, KN_EINVAL, "key", "%s: not a PEM %s key: %s",
				 path, private_half ? "private" : "public",
				 ssl_reason());
	return 0;
}

int kn_model_sign(const char *key_path, const void *msg, size_t len,
		  unsigned char pub[KN_ED25519_PUB_LEN],
		  unsigned char sig[KN_ED25519_SIG_LEN], struct kn_error *err)
{
	EVP_PKEY *key = NULL;
	EVP_MD_CTX *ctx = NULL;
	size_t sig_len = KN_ED25519_SIG_LEN;
	int rc = load_pem(key_path, true, &key, err);

	if (rc < 0)
		return rc;
	rc = raw_public(key, pub, key_path, err);
	if (rc < 0)
		goto out;
	ctx = EVP_MD_CTX_new();
	if (EVP_DigestSignInit(ctx, NULL, NULL, NULL, key) != 1 ||
	    EVP_DigestSign(ctx, sig, &sig_len, msg, len) != 1 ||
	    sig_len != KN_ED25519_SIG_LEN)
		rc = kn_errorf(err, KN_EIO, NULL, "signing with %s: %s",
			       key_path, ssl_reason());
out:
	EVP_MD_CTX_free(ctx);
	EVP_PKEY_free(key);
	return rc;
}

int kn_model_sig_check(const unsigned char pub[KN_ED25519_PUB_LEN],
		       const void *msg, size_t len,
		       const unsigned char sig[KN_ED25519_SIG_LEN])
{
	EVP_PKEY *key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub,
						    KN_ED25519_PUB_LEN);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok = key && ctx &&
		 EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, key) == 1 &&
		 EVP_DigestVerify(ctx, sig, KN_ED25519_SIG_LEN, msg, len) == 1;

	ERR_clear_error();
	EVP_MD_CTX_free(ctx);
	EVP_PKEY_free(key);
	return ok ? 0 : -EBADMSG;
}

int kn_model_pub_load(const char *path, unsigned char pub[KN_ED25519_PUB_LEN],
		      struct kn_error *err)
{
	EVP_PKEY *key = NULL;
	int rc = load_pem(path, false, &key, err);

	if (rc == 0)
		rc = raw_public(key, pub, path, err);
	EVP_PKEY_free(key);
	return rc;
}

int kn_model_trust_check(const char *at, const char *canonical,
			 const struct kn_model_sig *sigs, size_t n,
			 struct kn_error *err)
{
	const char *bad = NULL;
	size_t valid = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char pub[KN_ED25519_PUB_LEN], sig[KN_ED25519_SIG_LEN];
		char id[KN_SHA256_HEX + 1];

		if (kn_base64_decode(sigs[i].public_key, pub, sizeof(pub)) !=
			    KN_ED25519_PUB_LEN ||
		    kn_base64_decode(sigs[i].signature, sig, sizeof(sig)) !=
			    KN_ED25519_SIG_LEN) {
			bad = sigs[i].key_id;
			continue;
		}
		kn_model_key_id(pub, id);
		if (!sigs[i].key_id || strcmp(id, sigs[i].key_id) ||
		    kn_model_sig_check(pub, canonical, strlen(canonical), sig)) {
			bad = sigs[i].key_id;
			continue;
		}
		if (sigs[i].trusted)
			return 0;
		valid++;
	}
	if (bad)
		return kn_errorf(err, KN_EPERM, "signatures",
				 "refused: %s: the signature by key %s does not "
				 "verify against its manifest", at, bad);
	if (valid)
		return kn_errorf(err, KN_EPERM, "signatures",
				 "refused: %s is signed only by keys the server "
				 "does not trust (add the signer's .pub to its "
				 "--trusted-keys directory)", at);
	return kn_errorf(err, KN_EPERM, "signatures",
			 "refused: %s is unsigned (sign it with `kiln model "
			 "sign %s --key FILE`)", at, at);
}

/* ---- the trusted key ring ---- */

static int by_id(const void *a, const void *b)
{
	return strcmp(a, b);
}

int kn_model_keyring_load(const char *dir, struct kn_model_keyring *out,
			  struct kn_error *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return kn_errorf(err, KN_EIO, "trusted-keys", "%s: %s", dir,
				 strerror(errno));
	}
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		unsigned char pub[KN_ED25519_PUB_LEN];
		char *path;

		if (n < 5 || strcmp(e->d_name + n - 4, ".pub") != 0 ||
		    e->d_name[0] == '.')
			continue;
		path = kn_asprintf("%s/%s", dir, e->d_name);
		rc = kn_model_pub_load(path, pub, err);
		free(path);
		if (rc < 0)
			break;
		out->ids = kn_xrealloc(out->ids, (out->n + 1) * sizeof(*out->ids));
		kn_model_key_id(pub, out->ids[out->n++]);
	}
	closedir(d);
	if (rc < 0) {
		kn_model_keyring_release(out);
		return rc;
	}
	if (out->n > 1)
		qsort(out->ids, out->n, sizeof(*out->ids), by_id);
	return 0;
}

bool kn_model_keyring_has(const struct kn_model_keyring *k, const char *id)
{
	return k->n && bsearch(id, k->ids, k->n, sizeof(*k->ids), by_id);
}

void kn_model_keyring_release(struct kn_model_keyring *k)
{
	free(k->ids);
	k->ids = NULL;
	k->n = 0;
}

/* ---- base64 ---- */

char *kn_base64_encode(const unsigned char *data, size_t len)
{
	char *out = kn_xmalloc(4 * ((len + 2) / 3) + 1);

	EVP_EncodeBlock((unsigned char *)out, data, (int)len);
	return out;
}

int kn_base64_decode(const char *text, unsigned char *out, size_t max)
{
	size_t len = text ? strlen(text) : 0;
	unsigned char *buf;
	int n, pad = 0;

	if (len == 0 || len % 4 || len > 4 * ((max + 2) / 3))
		return -EINVAL;
	if (text[len - 1] == '=')
		pad++;
	if (text[len - 2] == '=')
		pad++;
	buf = kn_xmalloc(len);
	n = EVP_DecodeBlock(buf, (const unsigned char *)text, (int)len);
	if (n < 0 || n - pad < 0 || (size_t)(n - pad) > max) {
		free(buf);
		return -EINVAL;
	}
	memcpy(out, buf, (size_t)(n - pad));
	free(buf);
	return n - pad;
}
