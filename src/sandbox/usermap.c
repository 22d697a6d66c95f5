/*
 * The owner-to-Unix-user map (`kiln server --task-user-map FILE`): a
 * token's name to the account its jobs' tasks run as, so tasks of
 * different people cannot touch each other's files. A line format of
 * its own rather than YAML: two names per line need no more, and the
 * parser is small enough to read whole (and is fuzzed).
 */
#include "sandbox.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A Unix user name is at most 32 bytes; token names are short too. */
#define NAME_MAX_LEN 64
/* Bound the file: a map with more entries is a mistake. */
#define MAP_MAX_BYTES (1024 * 1024)

struct user_pair {
	char *token;
	char *user;
};

struct kn_user_map {
	struct user_pair *pairs;
	size_t n;
};

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

static size_t name_span(const char *p)
{
	size_t n = 0;

	while (name_char(p[n]))
		n++;
	return n;
}

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* One line (no '\n'); col counts from 1. */
static int parse_line(struct kn_user_map *m, const char *line, size_t len,
		      const char *file, int lineno, struct kn_error *err)
{
	size_t i = 0, tok, tlen, usr, ulen;

	while (i < len && blank(line[i]))
		i++;
	if (i == len || line[i] == '#')
		return 0;
	tok = i;
	tlen = name_span(line + i);
	if (tlen == 0 || tok + tlen > len)
		return kn_errorf(err, KN_EINVAL, "task-user-map",
				 "%s:%d:%zu: expected a token name", file, lineno,
				 i + 1);
	i += tlen;
	if (tlen > NAME_MAX_LEN)
		return kn_errorf(err, KN_EINVAL, "task-user-map",
				 "%s:%d:%zu: token name longer than %d", file,
				 lineno, tok + 1, NAME_MAX_LEN);
	while (i < len && blank(line[i]))
		i++;
	if (i == len || line[i] != ':')
		return kn_errorf(err, KN_EINVAL, "task-user-map",
				 "%s:%d:%zu: expected ':' after the token name",
				 file, lineno, i + 1);
	i++;
	while (i < len && blank(line[i]))
		i++;
	usr = i;
	ulen = name_span(line + i);
	if (usr + ulen > len)
		ulen = len - usr;
	if (ulen == 0 || line[usr] == '-')
		return kn_errorf(err, KN_EINVAL, "task-user-map",
				 "%s:%d:%zu: expected a Unix user name", file,
				 lineno, usr + 1);
	if (ulen > 32)
		return kn_errorf(err, KN_EINVAL, "task-user-map",
				 "%s:%d:%zu: Unix user name longer than 32",
				 file, lineno, usr + 1);
	i += ulen;
	while (i < len && blank(line[i]))
		i++;
	if (i < len && line[i] != '#')
		return kn_errorf(err, KN_EINVAL, "task-user-map",
				 "%s:%d:%zu: unexpected text after the user name",
				 file, lineno, i + 1);
	for (size_t k = 0; k < m->n; k++)
		if (strlen(m->pairs[k].token) == tlen &&
		    !strncmp(m->pairs[k].token, line + tok, tlen))
			return kn_errorf(err, KN_EINVAL, "task-user-map",
					 "%s:%d:%zu: token name %.*s mapped "
					 "twice", file, lineno, tok + 1,
					 (int)tlen, line + tok);
	m->pairs = kn_xrealloc(m->pairs, (m->n + 1) * sizeof(*m->pairs));
	m->pairs[m->n].token = kn_xcalloc(tlen + 1, 1);
	memcpy(m->pairs[m->n].token, line + tok, tlen);
	m->pairs[m->n].user = kn_xcalloc(ulen + 1, 1);
	memcpy(m->pairs[m->n].user, line + usr, ulen);
	m->n++;
	return 0;
}

int kn_user_map_parse(const char *text, const char *file,
		      struct kn_user_map **out, struct kn_error *err)
{
	struct kn_user_map *m = kn_xcalloc(1, sizeof(*m));
	const char *p = text;
	int lineno = 1, rc = 0;

	while (*p) {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len > 0 && p[len - 1] == '\r')
			len--;
		rc = parse_line(m, p, len, file, lineno, err);
		if (rc < 0)
			break;
		if (!end)
			break;
		p = end + 1;
		lineno++;
	}
	if (rc < 0) {
		kn_user_map_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

int kn_user_map_load(const char *path, struct kn_user_map **out,
		     struct kn_error *err)
{
	char *text = NULL;
	size_t len = 0;
	int rc = kn_read_file(path, MAP_MAX_BYTES, &text, &len);

	if (rc < 0)
		return kn_errorf(err, KN_EINVAL, "task-user-map",
				 "cannot read %s: %s", path, strerror(-rc));
	if (strlen(text) != len)
		rc = kn_errorf(err, KN_EINVAL, "task-user-map",
			       "%s: holds a NUL byte", path);
	else
		rc = kn_user_map_parse(text, path, out, err);
	free(text);
	return rc;
}

const char *kn_user_map_lookup(const struct kn_user_map *map,
			       const char *token_name)
{
	for (size_t i = 0; map && token_name && i < map->n; i++)
		if (!strcmp(map->pairs[i].token, token_name))
			return map->pairs[i].user;
	return NULL;
}

size_t kn_user_map_count(const struct kn_user_map *map)
{
	return map ? map->n : 0;
}

const char *kn_user_map_user_at(const struct kn_user_map *map, size_t i)
{
	return map->pairs[i].user;
}

void kn_user_map_free(struct kn_user_map *map)
{
	if (!map)
		return;
	for (size_t i = 0; i < map->n; i++) {
		KN_FREE_ALL(map->pairs[i].token, map->pairs[i].user);
	}
	KN_FREE_ALL(map->pairs, map);
}
