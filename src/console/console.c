/*
 * The console's asset lookup and its grants table (console.h). The
 * table is a flat array: it holds a few live grants (one per open
 * browser), so a scan is cheaper than anything cleverer.
 */
#include "console/console.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const struct kn_console_asset *kn_console_asset_find(const char *name)
{
	for (size_t i = 0; i < kn_console_n_assets; i++)
		if (!strcmp(kn_console_assets[i].name, name))
			return &kn_console_assets[i];
	return NULL;
}

struct grant {
	enum kn_console_grant_kind kind;
	char secret_hash[65];
	char token_hash[65];
	int64_t expires_at;
};

struct kn_console_grants {
	struct grant *grants;
	size_t n, max;
};

struct kn_console_grants *kn_console_grants_new(size_t max)
{
	struct kn_console_grants *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->grants = calloc(max ? max : 1, sizeof(*g->grants));
	if (!g->grants) {
		free(g);
		return NULL;
	}
	g->max = max;
	return g;
}

void kn_console_grants_free(struct kn_console_grants *g)
{
	if (!g)
		return;
	/* Secrets' hashes only, but no reason to leave them in freed memory. */
	memset(g->grants, 0, g->max * sizeof(*g->grants));
	free(g->grants);
	free(g);
}

static bool is_hash(const char *h)
{
	size_t n = 0;

	for (; h && h[n]; n++)
		if (!((h[n] >= '0' && h[n] <= '9') || (h[n] >= 'a' && h[n] <= 'f')))
			return false;
	return n == 64;
}

static void drop(struct kn_console_grants *g, size_t i)
{
	g->grants[i] = g->grants[--g->n];
	memset(&g->grants[g->n], 0, sizeof(g->grants[g->n]));
}

static void drop_expired(struct kn_console_grants *g, int64_t now)
{
	for (size_t i = 0; i < g->n;)
		if (g->grants[i].expires_at <= now)
			drop(g, i);
		else
			i++;
}

int kn_console_grant_add(struct kn_console_grants *g,
			 enum kn_console_grant_kind kind,
			 const char *secret_hash, const char *token_hash,
			 int64_t now)
{
	struct grant *gr;

	if (!is_hash(secret_hash) || !is_hash(token_hash))
		return -EINVAL;
	drop_expired(g, now);
	if (g->n == g->max)
		return -ENOSPC;
	gr = &g->grants[g->n++];
	gr->kind = kind;
	memcpy(gr->secret_hash, secret_hash, 65);
	memcpy(gr->token_hash, token_hash, 65);
	gr->expires_at = now + (kind == KN_CONSOLE_CODE
					? KN_CONSOLE_CODE_TTL_MS
					: KN_CONSOLE_SESSION_TTL_MS);
	return 0;
}

static struct grant *find(struct kn_console_grants *g, const char *secret_hash,
			  size_t *index)
{
	for (size_t i = 0; secret_hash && i < g->n; i++)
		if (!strcmp(g->grants[i].secret_hash, secret_hash)) {
			*index = i;
			return &g->grants[i];
		}
	return NULL;
}

int kn_console_grant_use(struct kn_console_grants *g,
			 enum kn_console_grant_kind kind,
			 const char *secret_hash, int64_t now,
			 char token_hash[65])
{
	size_t i = 0;
	struct grant *gr;

	drop_expired(g, now);
	gr = find(g, secret_hash, &i);
	if (!gr || gr->kind != kind)
		return -ENOENT;
	memcpy(token_hash, gr->token_hash, 65);
	if (kind == KN_CONSOLE_CODE)
		drop(g, i);
	return 0;
}

int kn_console_grant_revoke(struct kn_console_grants *g,
			    const char *secret_hash)
{
	size_t i = 0;

	if (!find(g, secret_hash, &i))
		return -ENOENT;
	drop(g, i);
	return 0;
}

size_t kn_console_grant_count(struct kn_console_grants *g,
			      enum kn_console_grant_kind kind, int64_t now)
{
	size_t n = 0;

	for (size_t i = 0; i < g->n; i++)
		n += g->grants[i].kind == kind && g->grants[i].expires_at > now;
	return n;
}
