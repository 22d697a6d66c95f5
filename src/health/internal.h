/* Helpers the health module's files share; not part of its interface. */
#ifndef KILN_HEALTH_INTERNAL_H
#define KILN_HEALTH_INTERNAL_H

#include "base/base.h"

/*
 * Split one CSV record at *p (RFC 4180 quoting) into at most max fields,
 * in place. Returns the field count (0 at the end); *p moves past the
 * record.
 */
int kn_csv_record(char **p, char **fields, int max);

/*
 * Read the header record at *p and find each of the n wanted columns:
 * col[w] is its index. -EINVAL naming PATH:1 and the missing column (err
 * field `field`) when one is absent.
 */
int kn_csv_columns(char **p, const char *path, const char *field,
		   const char *const *wanted, int n, int *col,
		   struct kn_error *err);

#endif
