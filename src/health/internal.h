/* Helpers the health module's files share; not part of its interface. */
#ifndef KILN_HEALTH_INTERNAL_H
#define KILN_HEALTH_INTERNAL_H

/*
 * Split one CSV record at *p (RFC 4180 quoting) into at most max fields,
 * in place. Returns the field count (0 at the end); *p moves past the
 * record.
 */
int kn_csv_record(char **p, char **fields, int max);

#endif
