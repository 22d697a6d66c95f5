/*
 * sim's own CSV reader (sim.c), shared by the packing experiment and the
 * autoscaling replay (autoscale.c). Plain comma-separated values with a
 * header row; every error names FILE:LINE:COLUMN.
 */
#ifndef KILN_SIM_INTERNAL_H
#define KILN_SIM_INTERNAL_H

#include "sim/sim.h"

#define SIM_CSV_MAX_FIELDS 32

/* One parsed row: fields point into the (modified) line. */
struct sim_csv {
	const char *path;
	char *text;
	char *next;   /* start of the next line */
	int line;     /* 1-based number of the current line */
	char *fields[SIM_CSV_MAX_FIELDS];
	int cols[SIM_CSV_MAX_FIELDS]; /* 1-based column of each field */
	int n_fields;
};

/* Read path and split its header row; free c->text after. */
int sim_csv_open(struct sim_csv *c, const char *path, struct kn_error *err);
/* Split the next non-empty line; 0 at end of file, 1 with a row. */
int sim_csv_row(struct sim_csv *c, struct kn_error *err);
/* The index of the header's column name, or -EINVAL naming it. */
int sim_csv_column(struct sim_csv *c, const char *name, struct kn_error *err);
/* The row's field col (named name in errors). */
int sim_csv_field(struct sim_csv *c, int col, const char *name,
		  const char **out, struct kn_error *err);
/* The row's field col as a whole number 0..max. */
int sim_csv_int(struct sim_csv *c, int col, const char *name, int64_t max,
		int64_t *out, struct kn_error *err);
/* The row's field col, or NULL when empty or "nan". */
const char *sim_csv_text(struct sim_csv *c, int col);

#endif
