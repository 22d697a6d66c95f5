/*
 * What the loop's own files share and nothing outside the module uses:
 * the loop's libevent base and the TLS session a front connection runs
 * over (tls.c).
 */
#ifndef KILN_LOOP_INTERNAL_H
#define KILN_LOOP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h>

struct kn_tls;
struct kn_loop;
struct event_base;

/* The loop's libevent base (loop.c). */
struct event_base *loop_base(struct kn_loop *loop);

/* A server-side session over the accepted socket fd, on t's current
   certificate; NULL when OpenSSL refuses. */
SSL *tls_session_new(struct kn_tls *t, int fd);
/*
 * The common name of the client certificate the session verified against
 * the client CAs, in name (cap bytes): true, or false with name empty
 * when the client sent none (or one whose name does not fit).
 */
bool tls_peer_name(SSL *ssl, char *name, size_t cap);

/* The loop's client context for https fetches (NULL until made), which
   the loop frees (loop.c). */
SSL_CTX **loop_client_ctx(struct kn_loop *loop);
/* A client session to host on loop's context, verifying the host name
   (or IP address); NULL when OpenSSL refuses. */
SSL *tls_client_session(struct kn_loop *loop, const char *host);
/* Why a client session failed, in buf ("" when TLS is not to blame). */
void tls_client_failure(SSL *ssl, unsigned long ssl_error, char *buf,
			size_t cap);

#endif
