/*
 * Who a request is from: its token's name and role, which the routes'
 * least roles are checked against (auth.c).
 */
#ifndef KILN_SERVER_CALLER_H
#define KILN_SERVER_CALLER_H

#include <stdbool.h>

enum kn_role { KN_ROLE_VIEWER, KN_ROLE_USER, KN_ROLE_OPERATOR, KN_ROLE_ADMIN };

struct caller {
	char name[128];
	enum kn_role role;
};

struct kn_audit;

/*
 * Fill *a as an audit row of c's action on object (NULL: the store
 * names it), with outcome ("ok", "denied", "error") and detail (or
 * NULL); the strings are borrowed (auth.c).
 */
void caller_audit(struct kn_audit *a, const struct caller *c,
		  const char *action, const char *object, const char *outcome,
		  const char *detail);

/* Whether c may change what owner owns: owners act on their own, an
   operator or admin on anyone's (auth.c). */
bool caller_owns(const struct caller *c, const char *owner);

#endif
