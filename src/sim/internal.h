/*
 * sim's CSV files (sim.c), shared by the packing experiment and the
 * autoscaling replay (autoscale.c): base's reader (kn_csv) over a file
 * with a header row, and typed fields whose errors name FILE:LINE:COLUMN.
 */
#ifndef KILN_SIM_INTERNAL_H
#define KILN_SIM_INTERNAL_H

#include "sim/sim.h"

/* An openb CSV file read with base's reader: csv holds the current row. */
struct sim_csv {
	struct kn_csv csv;
	char *text; /* the file, split in place by csv */
};

/* Read path and split its header row; free c->text after. */
int sim_csv_open(struct sim_csv *c, const char *path, struct kn_error *err);
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

/* One row of a pod list; times are seconds, -1 when absent or empty. */
struct sim_pod {
	char *name;
	char *gpu_spec; /* NULL when unconstrained */
	struct kn_pack_pod pod;
	int64_t created, deleted, scheduled;
};

struct kn_sim {
	struct kn_pack *cluster;
	struct sim_pod *pods; /* sorted by name */
	size_t n_pods;
	bool timed;           /* creation_time and deletion_time given */
	struct kn_pack_pod *stream; /* scratch for one run */
	size_t cap_stream;
	size_t *order;
};

/* Draw the per-seed node order that breaks ties into sim->order and set
   it on the (reset) cluster. */
void sim_node_order(struct kn_sim *sim, struct kn_rng *rng);

#endif
