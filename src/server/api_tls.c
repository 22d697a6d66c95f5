/*
 * The API's TLS: its certificate (given, or made once under HOME/tls),
 * reloaded on SIGHUP and when the files change, and the callers that come
 * with a client certificate instead of a token.
 *
 * A client certificate is taken only when it chains to --tls-client-ca
 * (the handshake checks that) and its common name has a --tls-client-role
 * line: the name is then the caller's, as a token's name is, with the
 * role the line gives. A bearer token, when one is sent, wins.
 */
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

/* The certificate and key for HOME/tls, made when asked and missing. */
static int self_signed(struct server *s, struct kn_tls_files *files,
		       struct kn_error *err)
{
	char *dir = kn_asprintf("%s/tls", s->home);
	int rc = kn_tls_self_signed(dir, s->cfg.listen_host, err);

	if (rc == 0) {
		s->tls_cert_path = kn_asprintf("%s/server.pem", dir);
		s->tls_key_path = kn_asprintf("%s/server.key", dir);
		files->cert = s->tls_cert_path;
		files->key = s->tls_key_path;
		kn_log(KN_LOG_INFO,
		       "TLS with a self-signed CA: clients trust it with "
		       "export KILN_CA=%s/ca.pem (curl --cacert, Python "
		       "ssl cafile)", dir);
	}
	free(dir);
	return rc;
}

int api_tls_start(struct server *s, struct kn_error *err)
{
	const struct kn_server_config *cfg = &s->cfg;
	struct kn_tls_files files = {.cert = cfg->tls_cert,
				     .key = cfg->tls_key,
				     .client_ca = cfg->tls_client_ca};
	int rc;

	if (!cfg->tls_cert && !cfg->tls_self_signed)
		return 0;
	if (cfg->tls_self_signed && (rc = self_signed(s, &files, err)) < 0)
		return rc;
	rc = kn_tls_new(&files, &s->tls, err);
	if (rc < 0)
		return rc;
	s->tls_watch = kn_tls_watch_new(s->loop, s->tls, "server",
					KN_TLS_WATCH_MS);
	if (!s->tls_watch)
		return kn_errorf(err, KN_EIO, NULL,
				 "cannot watch the TLS certificate");
	return 0;
}

void api_tls_stop(struct server *s)
{
	kn_tls_watch_free(s->tls_watch);
	s->tls_watch = NULL;
	kn_tls_free(s->tls);
	s->tls = NULL;
	KN_FREE_ALL(s->tls_cert_path, s->tls_key_path);
}

int api_tls_caller(struct server *s, const char *name, struct caller *out,
		   struct kn_error *err)
{
	size_t len = strlen(name);

	for (size_t i = 0; i < s->cfg.n_tls_client_roles; i++) {
		const char *m = s->cfg.tls_client_roles[i],
			   *eq = strrchr(m, '=');
		enum kn_role role;
		if (!eq || (size_t)(eq - m) != len || strncmp(m, name, len) ||
		    role_parse(eq + 1, &role) < 0)
			continue;
		/* The name is the caller's, as a token's is: held to the
		   same rules, so no certificate passes for the server. */
		if (!credential_name_ok(name) ||
		    credential_name_reserved(name))
			break;
		kn_strlcpy(out->name, name, sizeof(out->name));
		out->role = role;
		return 0;
	}
	return kn_errorf(err, KN_EAUTH, NULL,
			 "client certificate \"%s\" has no role here "
			 "(tls-client-role), and no bearer token was sent",
			 name);
}
