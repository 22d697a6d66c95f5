/*
 * One WebSocket connection to the API server (internal.h, kube_ws_*):
 * TCP, TLS as the kubeconfig says (its CA, client certificate, or
 * insecure-skip-tls-verify), the bearer token as every other kube call
 * sends it, the opening handshake of src/ws, then masked frames out and
 * raw bytes in. Blocking, with send and receive limits on the socket, on
 * purpose: it is driven by one session's own thread (session.c), never
 * by the server's loop, so a stalled API server stalls that session only.
 *
 * libcurl, which every other kube call uses, cannot carry it: Debian 12's
 * libcurl has no WebSocket support, and CURLOPT_CONNECT_ONLY leaves the
 * handshake and framing to the caller anyway.
 *
 * Never run against a real API server: tested against the replay of
 * tests/e2e/kube_ws_replay.py, over plain HTTP and over TLS with a
 * kubeconfig's CA data and token.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "kube/internal.h"
#include "ws/ws.h"

#define CONNECT_TIMEOUT_MS 10000
/* A send or a handshake read that makes no progress this long ends
   the session: the API server or the network is gone. */
#define IO_TIMEOUT_S 60
/* What of a refusal's body is read for its message. */
#define REFUSAL_BODY_MAX 4096

struct kube_ws {
	int fd;
	SSL_CTX *ctx;
	SSL *ssl;
	/* Bytes read with the handshake's answer, after its head. */
	uint8_t early[KN_WS_MAX_RESPONSE_HEAD];
	size_t early_len, early_off;
};

/* "https://host:port" into host and port (the default by scheme). */
static int split_server(const char *server, bool *tls, char *host,
			size_t hcap, char *port, size_t pcap,
			struct kn_error *err)
{
	const char *p = server, *end, *colon;
	size_t n;

	*tls = !strncmp(p, "https://", 8);
	if (!*tls && strncmp(p, "http://", 7) != 0)
		goto bad;
	p += *tls ? 8 : 7;
	end = p + strcspn(p, "/");
	if (*p == '[') { /* an IPv6 address */
		const char *close = memchr(p, ']', (size_t)(end - p));
		if (!close)
			goto bad;
		n = (size_t)(close - p - 1);
		colon = close + 1 < end && close[1] == ':' ? close + 1 : NULL;
		p++;
	} else {
		colon = memchr(p, ':', (size_t)(end - p));
		n = (size_t)((colon ? colon : end) - p);
	}
	if (!n || n >= hcap || (colon && (size_t)(end - colon - 1) >= pcap))
		goto bad;
	memcpy(host, p, n);
	host[n] = '\0';
	if (colon && end > colon + 1)
		snprintf(port, pcap, "%.*s", (int)(end - colon - 1), colon + 1);
	else
		kn_strlcpy(port, *tls ? "443" : "80", pcap);
	return 0;
bad:
	return kn_errorf(err, KN_EINVAL, "server",
			 "server: \"%s\" is not an http(s)://host[:port] URL",
			 server);
}

/* A connected blocking socket to host:port within CONNECT_TIMEOUT_MS. */
static int dial(const char *host, const char *port, struct kn_error *err)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	struct timeval tv = {IO_TIMEOUT_S, 0};
	int fd = -1, rc = getaddrinfo(host, port, &hints, &res);

	if (rc != 0)
		return kn_errorf(err, KN_EUNAVAIL, NULL, "%s: %s", host,
				 gai_strerror(rc));
	for (ai = res; ai && fd < 0; ai = ai->ai_next) {
		struct pollfd p;
		int e = 0;
		socklen_t el = sizeof(e);

		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
					   SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
			e = errno;
			p = (struct pollfd){fd, POLLOUT, 0};
			if (e == EINPROGRESS &&
			    (poll(&p, 1, CONNECT_TIMEOUT_MS) != 1 ||
			     getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0))
				e = ETIMEDOUT;
		}
		if (e) {
			close(fd);
			fd = -1;
			errno = e;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return kn_errorf(err, KN_EUNAVAIL, NULL,
				 "cannot connect to %s:%s: %s", host, port,
				 strerror(errno));
	/* Blocking from here on, each send and receive bounded. */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
		close(fd);
		return kn_errorf(err, KN_EIO, NULL, "socket options: %s",
				 strerror(errno));
	}
	return fd;
}

/* Each PEM certificate of text into store: how many. */
static int add_pem_certs(X509_STORE *store, const char *text)
{
	BIO *bio = BIO_new_mem_buf(text, -1);
	X509 *x;
	int n = 0;

	while (bio && (x = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
		n += X509_STORE_add_cert(store, x) == 1;
		X509_free(x);
	}
	BIO_free(bio);
	ERR_clear_error();
	return n;
}

/* The client certificate and key as PEM text. */
static bool use_pem_identity(SSL_CTX *ctx, const char *cert, const char *key)
{
	BIO *cb = BIO_new_mem_buf(cert, -1), *kb = BIO_new_mem_buf(key, -1);
	X509 *x = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
	EVP_PKEY *k = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
	bool ok = x && k && SSL_CTX_use_certificate(ctx, x) == 1 &&
		  SSL_CTX_use_PrivateKey(ctx, k) == 1;

	X509_free(x);
	EVP_PKEY_free(k);
	BIO_free(cb);
	BIO_free(kb);
	return ok;
}

/* A TLS context trusting and presenting what auth names. */
static SSL_CTX *tls_context(const struct kn_kube_auth *auth,
			    struct kn_error *err)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const char *what = NULL;

	if (!ctx) {
		kn_errorf(err, KN_EIO, NULL, "cannot start TLS");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, auth->insecure ? SSL_VERIFY_NONE
					       : SSL_VERIFY_PEER, NULL);
	if (auth->ca_file) {
		if (SSL_CTX_load_verify_locations(ctx, auth->ca_file, NULL) != 1)
			what = "certificate-authority";
	} else if (auth->ca_pem) {
		if (add_pem_certs(SSL_CTX_get_cert_store(ctx), auth->ca_pem) < 1)
			what = "certificate-authority-data";
	} else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
		what = "the system's CAs";
	}
	if (!what && auth->cert_file &&
	    (SSL_CTX_use_certificate_chain_file(ctx, auth->cert_file) != 1 ||
	     SSL_CTX_use_PrivateKey_file(ctx, auth->key_file ? auth->key_file
							      : auth->cert_file,
					 SSL_FILETYPE_PEM) != 1))
		what = "client-certificate";
	if (!what && auth->cert_pem && auth->key_pem &&
	    !use_pem_identity(ctx, auth->cert_pem, auth->key_pem))
		what = "client-certificate-data";
	ERR_clear_error();
	if (what) {
		kn_errorf(err, KN_EINVAL, what, "kubeconfig: %s: not usable "
			  "PEM for TLS", what);
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

/* TLS over c->fd to host, its certificate checked against the name. */
static int tls_start(struct kube_ws *c, const struct kn_kube_auth *auth,
		     const char *host, struct kn_error *err)
{
	unsigned char addr[16];
	bool ip = inet_pton(AF_INET, host, addr) == 1 ||
		  inet_pton(AF_INET6, host, addr) == 1;
	long verify;

	if (!(c->ctx = tls_context(auth, err)))
		return -EINVAL;
	if (!(c->ssl = SSL_new(c->ctx)) || SSL_set_fd(c->ssl, c->fd) != 1)
		return kn_errorf(err, KN_EIO, NULL, "cannot start TLS");
	if (!ip)
		SSL_set_tlsext_host_name(c->ssl, host);
	if (!auth->insecure &&
	    (ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host)
		: SSL_set1_host(c->ssl, host)) != 1)
		return kn_errorf(err, KN_EIO, NULL, "cannot check %s's name",
				 host);
	if (SSL_connect(c->ssl) != 1) {
		char why[256] = "the handshake failed";
		verify = SSL_get_verify_result(c->ssl);
		if (verify != X509_V_OK)
			snprintf(why, sizeof(why), "the server's certificate "
				 "is not trusted: %s",
				 X509_verify_cert_error_string(verify));
		else if (ERR_peek_error())
			ERR_error_string_n(ERR_get_error(), why, sizeof(why));
		ERR_clear_error();
		return kn_errorf(err, KN_EUNAVAIL, NULL, "TLS to %s: %s", host,
				 why);
	}
	return 0;
}

static ssize_t raw_read(struct kube_ws *c, void *buf, size_t cap)
{
	ssize_t n;

	if (!c->ssl) {
		do
			n = recv(c->fd, buf, cap, 0);
		while (n < 0 && errno == EINTR);
		return n < 0 ? -errno : n;
	}
	n = SSL_read(c->ssl, buf, (int)(cap > INT32_MAX ? INT32_MAX : cap));
	if (n > 0)
		return n;
	n = SSL_get_error(c->ssl, (int)n) == SSL_ERROR_ZERO_RETURN ? 0 : -EIO;
	ERR_clear_error();
	return n;
}

static int write_all(struct kube_ws *c, const void *data, size_t len)
{
	const char *p = data;

	if (!c->ssl)
		return kn_send_all(c->fd, data, len);
	while (len) {
		int n = SSL_write(c->ssl, p,
				  (int)(len > INT32_MAX ? INT32_MAX : len));

		if (n <= 0) {
			ERR_clear_error();
			return -EIO;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A refusal's message: the API's Status message when its body (read
   as far as its Content-Length, up to REFUSAL_BODY_MAX) has one. */
static void refusal(struct kube_ws *c, int status, const char *head,
		    const char *path, struct kn_error *err)
{
	const char *cl = strcasestr(head, "\r\nContent-Length:");
	size_t want = cl ? strtoul(cl + 17, NULL, 10) : 0, len;
	char body[REFUSAL_BODY_MAX + 1];
	const char *msg;
	json_t *doc;

	if (want > REFUSAL_BODY_MAX)
		want = REFUSAL_BODY_MAX;
	len = c->early_len - c->early_off;
	if (len > want)
		len = want;
	memcpy(body, c->early + c->early_off, len);
	while (len < want) {
		ssize_t n = raw_read(c, body + len, want - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	body[len] = '\0';
	doc = json_loads(body, 0, NULL);
	msg = json_string_value(json_object_get(doc, "message"));
	kn_errorf(err, status == 401 || status == 403 ? KN_EPERM
		       : status == 404			 ? KN_ENOTFOUND
							 : KN_EUNAVAIL,
		  NULL, "the API server refused GET %s: HTTP %d%s%.300s", path,
		  status, msg ? ": " : "", msg ? msg : "");
	json_decref(doc);
}

void kube_ws_close(struct kube_ws *c)
{
	if (!c)
		return;
	if (c->ssl) {
		SSL_shutdown(c->ssl);
		SSL_free(c->ssl);
	}
	SSL_CTX_free(c->ctx);
	if (c->fd >= 0)
		close(c->fd);
	ERR_clear_error();
	free(c);
}

/* Sends the handshake for path and checks the answer. */
static int upgrade(struct kube_ws *c, const struct kn_kube_auth *auth,
		   const char *hostport, const char *path,
		   const char *protocols, char *chosen, size_t cap,
		   struct kn_error *err)
{
	char key[KN_WS_KEY_SIZE], *token = NULL, *extra = NULL, *req;
	char head[KN_WS_MAX_RESPONSE_HEAD];
	ssize_t end = 0;
	size_t len = 0;
	int status, rc = kn_ws_key_new(key, err);

	if (rc == 0)
		rc = kn_kube_auth_token(auth, &token, err);
	if (rc < 0)
		return rc;
	if (token)
		extra = kn_asprintf("Authorization: Bearer %s\r\n", token);
	req = kn_ws_request(hostport, path, key, protocols, extra);
	rc = write_all(c, req, strlen(req));
	if (token)
		memset(token, 0, strlen(token));
	if (extra)
		memset(extra, 0, strlen(extra));
	memset(req, 0, strlen(req));
	KN_FREE_ALL(token, extra, req);
	if (rc < 0)
		return kn_errorf(err, KN_EUNAVAIL, NULL, "GET %s: cannot send: "
				 "%s", path, strerror(-rc));
	while (end == 0) {
		ssize_t n = raw_read(c, head + len, sizeof(head) - len);
		if (n <= 0)
			return kn_errorf(err, KN_EUNAVAIL, NULL,
					 "GET %s: the API server closed the "
					 "connection before answering", path);
		len += (size_t)n;
		end = kn_ws_response_end(head, len);
	}
	if (end < 0)
		return kn_errorf(err, KN_EUNAVAIL, NULL, "GET %s: an answer's "
				 "head over %d bytes", path,
				 KN_WS_MAX_RESPONSE_HEAD);
	memcpy(c->early, head + end, len - (size_t)end);
	c->early_len = len - (size_t)end;
	head[end - 1] = '\0';
	rc = kn_ws_response_check(head, (size_t)end, key, protocols, &status,
				  chosen, cap, err);
	if (rc < 0 && status != 101 && status >= 300)
		refusal(c, status, head, path, err);
	return rc;
}

int kube_ws_open(const struct kn_kube_auth *auth, const char *path,
		 const char *protocols, struct kube_ws **out, char *chosen,
		 size_t cap, struct kn_error *err)
{
	struct kube_ws *c = kn_xcalloc(1, sizeof(*c));
	char host[256], port[16], *hostport;
	bool tls;
	int rc;

	c->fd = -1;
	rc = split_server(auth->server, &tls, host, sizeof(host), port,
			  sizeof(port), err);
	if (rc == 0 && (c->fd = dial(host, port, err)) < 0)
		rc = c->fd;
	if (rc == 0 && tls)
		rc = tls_start(c, auth, host, err);
	if (rc == 0) {
		hostport = kn_asprintf(strchr(host, ':') ? "[%s]:%s" : "%s:%s",
				       host, port);
		rc = upgrade(c, auth, hostport, path, protocols, chosen, cap,
			     err);
		free(hostport);
	}
	if (rc < 0) {
		kube_ws_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

int kube_ws_fd(const struct kube_ws *c)
{
	return c->fd;
}

bool kube_ws_buffered(const struct kube_ws *c)
{
	return c->early_off < c->early_len || (c->ssl && SSL_pending(c->ssl));
}

ssize_t kube_ws_read(struct kube_ws *c, void *buf, size_t cap)
{
	if (c->early_off < c->early_len) {
		size_t n = c->early_len - c->early_off;
		if (n > cap)
			n = cap;
		memcpy(buf, c->early + c->early_off, n);
		c->early_off += n;
		return (ssize_t)n;
	}
	return raw_read(c, buf, cap);
}

int kube_ws_send(struct kube_ws *c, enum kn_ws_opcode opcode,
		 const void *prefix, size_t prefix_len, const void *data,
		 size_t len)
{
	uint8_t mask[4], *frame;
	size_t n;
	int rc;

	if (RAND_bytes(mask, sizeof(mask)) != 1)
		return -EIO;
	/* One frame of the prefix (a channel byte) and the data, laid out
	   after the head's room: kn_ws_encode moves it down as it masks. */
	frame = kn_xmalloc(KN_WS_MAX_HEAD + prefix_len + len);
	memcpy(frame + KN_WS_MAX_HEAD, prefix, prefix_len);
	if (len)
		memcpy(frame + KN_WS_MAX_HEAD + prefix_len, data, len);
	n = kn_ws_encode(frame, opcode, true, frame + KN_WS_MAX_HEAD,
			 prefix_len + len, mask);
	rc = write_all(c, frame, n);
	free(frame);
	return rc;
}
