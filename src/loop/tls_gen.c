/*
 * A first certificate for a first try: a private CA and a server
 * certificate it signs, both ECDSA P-256, written into one directory.
 *
 * The CA's key is kept beside it (0600) so the same CA signs a new server
 * certificate when the host names change; clients trust ca.pem once. The
 * server certificate names the host it listens on, localhost, 127.0.0.1
 * and ::1, and lasts SERVER_DAYS; the CA lasts CA_DAYS.
 */
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
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "loop/loop.h"

#define CA_DAYS 3650
#define SERVER_DAYS 825

static EVP_PKEY *key_new(void)
{
	return EVP_EC_gen("P-256");
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v3;
	X509_EXTENSION *ext;

	X509V3_set_ctx(&v3, issuer, cert, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
	if (!ext)
		return -1;
	X509_add_ext(cert, ext, -1);
	X509_EXTENSION_free(ext);
	return 0;
}

/* A certificate for key named cn, signed by issuer_key (itself when
   issuer is NULL). */
static X509 *cert_new(EVP_PKEY *key, const char *cn, X509 *issuer,
		      EVP_PKEY *issuer_key, int days, const char *san)
{
	X509 *cert = X509_new();
	X509 *signer;
	unsigned char serial[16];
	BIGNUM *bn = NULL;

	if (!cert || RAND_bytes(serial, sizeof(serial)) != 1)
		goto fail;
	serial[0] &= 0x7f; /* a positive serial */
	bn = BN_bin2bn(serial, sizeof(serial), NULL);
	if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)))
		goto fail;
	X509_set_version(cert, 2);
	X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
	X509_gmtime_adj(X509_getm_notAfter(cert), (long)days * 86400);
	X509_set_pubkey(cert, key);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN",
				   MBSTRING_UTF8, (const unsigned char *)cn,
				   -1, -1, 0);
	signer = issuer ? issuer : cert;
	X509_set_issuer_name(cert, X509_get_subject_name(signer));
	if (add_ext(cert, signer, NID_subject_key_identifier, "hash") < 0 ||
	    add_ext(cert, signer, NID_authority_key_identifier,
		    "keyid:always") < 0)
		goto fail;
	if (!issuer) {
		if (add_ext(cert, signer, NID_basic_constraints,
			    "critical,CA:TRUE,pathlen:0") < 0 ||
		    add_ext(cert, signer, NID_key_usage,
			    "critical,keyCertSign,cRLSign") < 0)
			goto fail;
	} else if (add_ext(cert, signer, NID_basic_constraints,
			   "critical,CA:FALSE") < 0 ||
		   add_ext(cert, signer, NID_key_usage,
			   "critical,digitalSignature") < 0 ||
		   add_ext(cert, signer, NID_ext_key_usage, "serverAuth") < 0 ||
		   add_ext(cert, signer, NID_subject_alt_name, san) < 0) {
		goto fail;
	}
	if (!X509_sign(cert, issuer_key, EVP_sha256()))
		goto fail;
	BN_free(bn);
	return cert;
fail:
	BN_free(bn);
	X509_free(cert);
	return NULL;
}

static int write_pem(const char *path, X509 *cert, EVP_PKEY *key)
{
	FILE *f;
	int fd, ok;

	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
		  key ? 0600 : 0644);
	if (fd < 0)
		return -errno;
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		return -errno;
	}
	ok = key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL)
		 : PEM_write_X509(f, cert);
	if (fclose(f) != 0 || !ok)
		return -EIO;
	return 0;
}

/* The key (want_key) or the certificate in the PEM file at path, or
   NULL. */
static void *read_pem(const char *path, bool want_key)
{
	FILE *f = fopen(path, "re");
	void *v;

	if (!f)
		return NULL;
	v = want_key ? (void *)PEM_read_PrivateKey(f, NULL, NULL, NULL)
		     : (void *)PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	return v;
}

/* The CA in dir: the one there, or a new one written. */
static int ca_load_or_make(const char *dir, X509 **ca, EVP_PKEY **ca_key,
			   struct kn_error *err)
{
	char *cert_path = kn_asprintf("%s/ca.pem", dir);
	char *key_path = kn_asprintf("%s/ca.key", dir);
	int rc = 0;

	*ca = read_pem(cert_path, false);
	*ca_key = read_pem(key_path, true);
	if (*ca && *ca_key && X509_check_private_key(*ca, *ca_key) == 1)
		goto out;
	X509_free(*ca);
	EVP_PKEY_free(*ca_key);
	*ca_key = key_new();
	*ca = *ca_key ? cert_new(*ca_key, "kiln local CA", NULL, *ca_key,
				 CA_DAYS, NULL)
		      : NULL;
	if (!*ca || (rc = write_pem(key_path, NULL, *ca_key)) < 0 ||
	    (rc = write_pem(cert_path, *ca, NULL)) < 0) {
		rc = kn_errorf(err, KN_EIO, "tls", "cannot make a CA in %s: %s",
			       dir, rc < 0 ? strerror(-rc) : "OpenSSL failed");
		X509_free(*ca);
		EVP_PKEY_free(*ca_key);
		*ca = NULL;
		*ca_key = NULL;
	}
out:
	ERR_clear_error();
	KN_FREE_ALL(cert_path, key_path);
	return rc;
}

/* The subjectAltName for host: a DNS name or an IP address. */
static char *alt_names(const char *host)
{
	bool ip = strspn(host, "0123456789.") == strlen(host) ||
		  strchr(host, ':');
	bool local = !strcmp(host, "localhost") || !strcmp(host, "127.0.0.1") ||
		     !strcmp(host, "::1") || !*host;

	if (local)
		return kn_xstrdup("DNS:localhost,IP:127.0.0.1,IP:::1");
	return kn_asprintf("%s:%s,DNS:localhost,IP:127.0.0.1,IP:::1",
			   ip ? "IP" : "DNS", host);
}

int kn_tls_self_signed(const char *dir, const char *host,
		       struct kn_error *err)
{
	X509 *ca = NULL, *cert = NULL;
	EVP_PKEY *ca_key = NULL, *key = NULL;
	char *san = NULL, *cert_path = NULL, *key_path = NULL;
	int rc;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return kn_errorf(err, KN_EIO, "tls", "cannot create %s: %s",
				 dir, strerror(errno));
	rc = ca_load_or_make(dir, &ca, &ca_key, err);
	if (rc < 0)
		return rc;
	san = alt_names(host);
	key = key_new();
	cert = key ? cert_new(key, *host ? host : "localhost", ca, ca_key,
			      SERVER_DAYS, san)
		   : NULL;
	cert_path = kn_asprintf("%s/server.pem", dir);
	key_path = kn_asprintf("%s/server.key", dir);
	if (!cert || (rc = write_pem(key_path, NULL, key)) < 0 ||
	    (rc = write_pem(cert_path, cert, NULL)) < 0)
		rc = kn_errorf(err, KN_EIO, "tls",
			       "cannot write a server certificate in %s: %s",
			       dir, rc < 0 ? strerror(-rc) : "OpenSSL failed");
	ERR_clear_error();
	X509_free(ca);
	X509_free(cert);
	EVP_PKEY_free(ca_key);
	EVP_PKEY_free(key);
	KN_FREE_ALL(san, cert_path, key_path);
	return rc;
}
