/*
 * Who a request is from: its token's name and role, which the routes'
 * least roles are checked against (auth.c).
 */
#ifndef KILN_SERVER_CALLER_H
#define KILN_SERVER_CALLER_H

enum kn_role { KN_ROLE_VIEWER, KN_ROLE_USER, KN_ROLE_OPERATOR, KN_ROLE_ADMIN };

struct caller {
	char name[128];
	enum kn_role role;
};

#endif
