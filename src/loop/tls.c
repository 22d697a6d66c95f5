/*
 * The server side of TLS for the HTTP front: one OpenSSL context built
 * from a certificate chain, its key and, for client certificates, the CAs
 * they must chain to.
 *
 * Reloading builds a whole new context from the files and swaps it in
 * only when every file loaded and the key matches the certificate; a
 * connection holds a reference to the context it started with, so open
 * connections keep going on the old certificate and new ones get the new.
 * The swap is under a lock because the gateway's worker threads start
 * connections while the main thread reloads.
 *
 * Defaults: TLS 1.2 and 1.3 only, OpenSSL's modern cipher lists with
 * forward secrecy and AEAD ciphers for 1.2, no compression, no
 * renegotiation, server cipher preference, ALPN http/1.1.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "loop/internal.h"
#include "loop/loop.h"

/* TLS 1.2's suites: ECDHE key exchange and AEAD ciphers only. */
#define TLS12_CIPHERS                                                       \
	"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"        \
	"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"        \
	"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

/* The most one SSL_write is given: one TLS record. */
#define TLS_WRITE_MAX (16 * 1024)

/* What a file was when it was loaded, to see that it changed. */
struct file_stamp {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

struct kn_tls {
	char *cert, *key, *client_ca;
	pthread_mutex_t lock;
	SSL_CTX *ctx; /* under lock */
	struct file_stamp stamps[3];
};

/* The first error OpenSSL queued, for a message; the queue is emptied. */
static const char *ssl_reason(char *buf, size_t cap)
{
	unsigned long e = ERR_get_error();

	if (!e)
		kn_strlcpy(buf, "unknown error", cap);
	else
		ERR_error_string_n(e, buf, cap);
	ERR_clear_error();
	return buf;
}

static int select_alpn(SSL *ssl, const unsigned char **out,
		       unsigned char *outlen, const unsigned char *in,
		       unsigned int inlen, void *arg)
{
	static const unsigned char http11[] = "\x08http/1.1";
	unsigned char *chosen;

	(void)ssl;
	(void)arg;
	if (SSL_select_next_proto(&chosen, outlen, http11, sizeof(http11) - 1,
				  in, inlen) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK; /* h2 only: speak 1.1 anyway */
	*out = chosen;
	return SSL_TLSEXT_ERR_OK;
}

static void stamp(const char *path, struct file_stamp *s)
{
	struct stat st;

	memset(s, 0, sizeof(*s));
	if (path && stat(path, &st) == 0) {
		s->dev = st.st_dev;
		s->ino = st.st_ino;
		s->size = st.st_size;
		s->mtime = st.st_mtim;
	}
}

/* A fresh context from the files, or NULL with err naming the file. */
static SSL_CTX *ctx_build(const struct kn_tls *t, struct kn_error *err)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	char why[256];

	if (!ctx) {
		kn_errorf(err, KN_EIO, "tls", "cannot start TLS: %s",
			  ssl_reason(why, sizeof(why)));
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION |
					 SSL_OP_NO_RENEGOTIATION |
					 SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
				      SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
				      SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_alpn_select_cb(ctx, select_alpn, NULL);
	if (!SSL_CTX_set_cipher_list(ctx, TLS12_CIPHERS)) {
		kn_errorf(err, KN_EIO, "tls", "cannot set TLS ciphers: %s",
			  ssl_reason(why, sizeof(why)));
		goto fail;
	}
	if (SSL_CTX_use_certificate_chain_file(ctx, t->cert) != 1) {
		kn_errorf(err, KN_EINVAL, "tls-cert",
			  "tls-cert: %s: not a readable PEM certificate: %s",
			  t->cert, ssl_reason(why, sizeof(why)));
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, t->key, SSL_FILETYPE_PEM) != 1 &&
	    ERR_GET_REASON(ERR_peek_error()) != X509_R_KEY_VALUES_MISMATCH) {
		kn_errorf(err, KN_EINVAL, "tls-key",
			  "tls-key: %s: not a readable PEM private key: %s",
			  t->key, ssl_reason(why, sizeof(why)));
		goto fail;
	}
	if (ERR_peek_error() || SSL_CTX_check_private_key(ctx) != 1) {
		kn_errorf(err, KN_EINVAL, "tls-key",
			  "tls-key: %s does not match the certificate in %s",
			  t->key, t->cert);
		ERR_clear_error();
		goto fail;
	}
	if (t->client_ca) {
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(t->client_ca);
		if (!names ||
		    SSL_CTX_load_verify_locations(ctx, t->client_ca, NULL) != 1) {
			sk_X509_NAME_pop_free(names, X509_NAME_free);
			kn_errorf(err, KN_EINVAL, "tls-client-ca",
				  "tls-client-ca: %s: no readable PEM "
				  "certificate: %s",
				  t->client_ca, ssl_reason(why, sizeof(why)));
			goto fail;
		}
		SSL_CTX_set_client_CA_list(ctx, names);
		/* Asked for, not required: a caller may still come with a
		   token; one that sends a certificate must send a good one. */
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		SSL_CTX_set_verify_depth(ctx, 4);
	}
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

int kn_tls_new(const struct kn_tls_files *files, struct kn_tls **out,
	       struct kn_error *err)
{
	struct kn_tls *t;
	int rc;

	if (!files->cert || !files->key)
		return kn_errorf(err, KN_EINVAL, "tls",
				 "tls: give both a certificate and its key");
	t = kn_xcalloc(1, sizeof(*t));
	t->cert = kn_xstrdup(files->cert);
	t->key = kn_xstrdup(files->key);
	t->client_ca = files->client_ca ? kn_xstrdup(files->client_ca) : NULL;
	pthread_mutex_init(&t->lock, NULL);
	rc = kn_tls_reload(t, err);
	if (rc < 0) {
		kn_tls_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

int kn_tls_reload(struct kn_tls *t, struct kn_error *err)
{
	struct file_stamp stamps[3];
	SSL_CTX *ctx, *old;

	/* Stamped before reading: a write during the load is seen next
	   time as a change. */
	stamp(t->cert, &stamps[0]);
	stamp(t->key, &stamps[1]);
	stamp(t->client_ca, &stamps[2]);
	ctx = ctx_build(t, err);
	if (!ctx)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	old = t->ctx;
	t->ctx = ctx;
	memcpy(t->stamps, stamps, sizeof(stamps));
	pthread_mutex_unlock(&t->lock);
	SSL_CTX_free(old); /* open connections hold their own reference */
	return 0;
}

static bool stamp_differs(const struct file_stamp *a,
			  const struct file_stamp *b)
{
	return a->dev != b->dev || a->ino != b->ino || a->size != b->size ||
	       a->mtime.tv_sec != b->mtime.tv_sec ||
	       a->mtime.tv_nsec != b->mtime.tv_nsec;
}

bool kn_tls_files_changed(struct kn_tls *t)
{
	const char *paths[3] = {t->cert, t->key, t->client_ca};
	bool changed = false;

	pthread_mutex_lock(&t->lock);
	for (int i = 0; i < 3 && !changed; i++) {
		struct file_stamp now;
		stamp(paths[i], &now);
		changed = stamp_differs(&now, &t->stamps[i]);
	}
	pthread_mutex_unlock(&t->lock);
	return changed;
}

bool kn_tls_verifies_clients(const struct kn_tls *t)
{
	return t->client_ca != NULL;
}

void kn_tls_free(struct kn_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	pthread_mutex_destroy(&t->lock);
	KN_FREE_ALL(t->cert, t->key, t->client_ca, t);
}

SSL *tls_session_new(struct kn_tls *t, int fd)
{
	SSL *ssl;

	pthread_mutex_lock(&t->lock);
	ssl = SSL_new(t->ctx);
	pthread_mutex_unlock(&t->lock);
	if (!ssl)
		return NULL;
	if (SSL_set_fd(ssl, fd) != 1) {
		SSL_free(ssl);
		ERR_clear_error();
		return NULL;
	}
	SSL_set_accept_state(ssl);
	return ssl;
}

bool tls_peer_name(SSL *ssl, char *name, size_t cap)
{
	X509 *peer = SSL_get0_peer_certificate(ssl);
	X509_NAME *subject;
	int n;

	name[0] = '\0';
	if (!peer || SSL_get_verify_result(ssl) != X509_V_OK)
		return false;
	subject = X509_get_subject_name(peer);
	n = X509_NAME_get_text_by_NID(subject, NID_commonName, name, (int)cap);
	/* A name that does not fit, or holds a NUL, names nobody. */
	if (n <= 0 || (size_t)n >= cap || strlen(name) != (size_t)n) {
		name[0] = '\0';
		return false;
	}
	return true;
}

int kn_tls_write_buffer(struct ssl_st *ssl, struct evbuffer *out)
{
	size_t len = evbuffer_get_length(out);
	int n;

	/* A retry after WANT_WRITE is given at least what was given before,
	   as OpenSSL requires: the buffer only grows at its end. */
	if (len > TLS_WRITE_MAX)
		len = TLS_WRITE_MAX;
	n = SSL_write(ssl, evbuffer_pullup(out, (ssize_t)len), (int)len);
	if (n > 0)
		evbuffer_drain(out, (size_t)n);
	return n;
}

/* ---- watching the files ---- */

struct kn_tls_watch {
	struct kn_tls *tls;
	char *name;
	struct event *hup, *timer;
	struct timeval every;
};

static void reload_logged(struct kn_tls_watch *w, const char *why)
{
	struct kn_error err;

	if (kn_tls_reload(w->tls, &err) < 0)
		kn_log(KN_LOG_ERROR, "%s: TLS certificate not reloaded (%s), "
		       "the previous one stays: %s", w->name, why,
		       err.message);
	else
		kn_log(KN_LOG_INFO, "%s: TLS certificate reloaded (%s)",
		       w->name, why);
}

static void on_hup(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	reload_logged(arg, "SIGHUP");
}

static void on_watch_timer(evutil_socket_t fd, short what, void *arg)
{
	struct kn_tls_watch *w = arg;

	(void)fd;
	(void)what;
	/* A failed load stamps nothing: it is tried again on every tick
	   until the files are whole (a key written after its cert). */
	if (kn_tls_files_changed(w->tls))
		reload_logged(w, "the files changed");
	evtimer_add(w->timer, &w->every);
}

struct kn_tls_watch *kn_tls_watch_new(struct kn_loop *loop,
				      struct kn_tls *t, const char *name,
				      int64_t every_ms)
{
	struct kn_tls_watch *w = kn_xcalloc(1, sizeof(*w));
	struct event_base *base = loop_base(loop);

	w->tls = t;
	w->name = kn_xstrdup(name);
	w->every = (struct timeval){(time_t)(every_ms / 1000),
				    (suseconds_t)(every_ms % 1000 * 1000)};
	w->hup = evsignal_new(base, SIGHUP, on_hup, w);
	w->timer = evtimer_new(base, on_watch_timer, w);
	if (!w->hup || !w->timer || evsignal_add(w->hup, NULL) < 0 ||
	    evtimer_add(w->timer, &w->every) < 0) {
		kn_tls_watch_free(w);
		return NULL;
	}
	return w;
}

void kn_tls_watch_free(struct kn_tls_watch *w)
{
	if (!w)
		return;
	if (w->hup)
		event_free(w->hup);
	if (w->timer)
		event_free(w->timer);
	KN_FREE_ALL(w->name, w);
}

int kn_tls_listen_check(const char *host, bool tls, bool insecure,
			struct kn_error *err)
{
	if (tls || insecure || kn_host_is_loopback(host))
		return 0;
	return kn_errorf(err, KN_EINVAL, "listen",
			 "listen: %s is not a loopback address and plain "
			 "HTTP would carry credentials in clear: give "
			 "tls-cert and tls-key, or insecure to allow it",
			 host);
}
