/*
 * The client side of TLS: kn_http_fetch's https:// URLs (one OpenSSL
 * context per loop, trusting the system's CAs or the file the loop's
 * owner names, with an optional client certificate), and the contexts
 * and sessions other clients (the gateway's upstreams) build on. Every session checks
 * the server's certificate and that it names the host of the URL (a DNS
 * name, or an IP address for an address URL); TLS 1.2 at least.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "loop/internal.h"
#include "loop/loop.h"

SSL_CTX *kn_tls_client_ctx(const char *ca_file, const char *cert,
			   const char *key, struct kn_error *err)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	char why[256];

	if (!ctx) {
		kn_errorf(err, KN_EIO, NULL, "cannot start TLS");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if ((ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL)
		     : SSL_CTX_set_default_verify_paths(ctx)) != 1) {
		ERR_error_string_n(ERR_get_error(), why, sizeof(why));
		kn_errorf(err, KN_EINVAL, "ca", "%s: no readable PEM "
			  "certificate: %s", ca_file ? ca_file : "system CAs",
			  why);
		goto fail;
	}
	if (cert && (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
		     SSL_CTX_use_PrivateKey_file(ctx, key ? key : cert,
						 SSL_FILETYPE_PEM) != 1)) {
		ERR_error_string_n(ERR_get_error(), why, sizeof(why));
		kn_errorf(err, KN_EINVAL, "client-cert",
			  "%s: not a usable client certificate and key: %s",
			  cert, why);
		goto fail;
	}
	ERR_clear_error();
	return ctx;
fail:
	ERR_clear_error();
	SSL_CTX_free(ctx);
	return NULL;
}

int kn_loop_client_tls(struct kn_loop *loop, const char *ca_file,
		       const char *cert, const char *key,
		       struct kn_error *err)
{
	SSL_CTX *ctx = kn_tls_client_ctx(ca_file, cert, key, err), **slot;

	if (!ctx)
		return -EINVAL;
	slot = loop_client_ctx(loop);
	SSL_CTX_free(*slot);
	*slot = ctx;
	return 0;
}

SSL *tls_client_session(struct kn_loop *loop, const char *host)
{
	SSL_CTX **slot = loop_client_ctx(loop);

	if (!*slot && !(*slot = kn_tls_client_ctx(NULL, NULL, NULL, NULL)))
		return NULL;
	return kn_tls_client_session(*slot, host);
}

SSL *kn_tls_client_session(SSL_CTX *ctx, const char *host)
{
	unsigned char addr[16];
	bool ip;
	SSL *ssl;

	if (!(ssl = SSL_new(ctx)))
		return NULL;
	ip = inet_pton(AF_INET, host, addr) == 1 ||
	     inet_pton(AF_INET6, host, addr) == 1;
	if (ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1
	       : SSL_set_tlsext_host_name(ssl, host) != 1 ||
			 SSL_set1_host(ssl, host) != 1) {
		SSL_free(ssl);
		ERR_clear_error();
		return NULL;
	}
	return ssl;
}

void tls_client_failure(SSL *ssl, unsigned long ssl_error, char *buf,
			size_t cap)
{
	long verify = SSL_get_verify_result(ssl);

	if (verify != X509_V_OK)
		snprintf(buf, cap, "TLS: the server's certificate is not "
			 "trusted: %s", X509_verify_cert_error_string(verify));
	else if (ssl_error && ERR_GET_LIB(ssl_error)) {
		char why[256];
		ERR_error_string_n(ssl_error, why, sizeof(why));
		snprintf(buf, cap, "TLS: %s", why);
	} else {
		buf[0] = '\0';
	}
}
