/*
 * store nodes: the nodes the server schedules on, their devices, and each
 * node's state over time (the cost ledger's record of what was paid for).
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define N(field) STORE_COL(struct kn_node_row, field)
static const struct store_row NODE_ROW =
	STORE_ROW(struct kn_node_row, "node", N(name), N(state), N(labels_json),
		  N(taints_json), N(cpu_milli), N(memory_bytes), N(simulated),
		  N(updated_at), N(reason));
#undef N

/* idx is struct kn_device_row's index ("index" is an SQL keyword). */
#define D(field) STORE_COL(struct kn_device_row, field)
static const struct store_row DEVICE_ROW =
	STORE_ROW(struct kn_device_row, "device", D(node),
		  STORE_COL_AS(struct kn_device_row, index, "idx", STORE_INT),
		  D(uuid), D(model), D(memory_bytes), D(simulated));
#undef D

static const char SQL_DEVICE_DELETE_NODE[] =
	"DELETE FROM devices WHERE node = ?1";

#define S(field) STORE_COL(struct kn_node_state_row, field)
static const struct store_row NODE_STATE_ROW =
	STORE_ROW(struct kn_node_state_row, "node state", S(node), S(state),
		  S(started_at), S(ended_at));
#undef S

/* The cost ledger's record (v5). */
/* Named: without statistics SQLite takes the end-time index, which
   reads every open interval to close one node's. */
static const char SQL_NODE_STATE_CLOSE[] =
	"UPDATE node_states INDEXED BY node_states_open"
	" SET ended_at = max(started_at, ?2)"
	" WHERE node = ?1 AND ended_at = 0";
static const char SQL_NODE_STATE_CLOSE_ALL[] =
	"UPDATE node_states SET ended_at = max(started_at, ?1)"
	" WHERE ended_at = 0";
static const char SQL_NODE_STATE_OPEN[] =
	"INSERT INTO node_states (node, state, started_at) VALUES (?1, ?2, ?3)";

const struct store_stmt store_node_stmts[] = {
	STORE_UPSERT(STMT_NODE_PUT, &NODE_ROW, "nodes", 1),
	STORE_SELECT(STMT_NODE_LIST, &NODE_ROW, "FROM nodes ORDER BY name"),
	STORE_STMT(STMT_DEVICE_DELETE_NODE, SQL_DEVICE_DELETE_NODE, NULL),
	STORE_INSERT(STMT_DEVICE_INSERT, &DEVICE_ROW, "INSERT INTO devices", 0),
	STORE_SELECT(STMT_DEVICE_LIST_NODE, &DEVICE_ROW,
		     "FROM devices WHERE node = ?1 ORDER BY idx"),
	STORE_STMT(STMT_NODE_STATE_CLOSE, SQL_NODE_STATE_CLOSE, NULL),
	STORE_STMT(STMT_NODE_STATE_CLOSE_ALL, SQL_NODE_STATE_CLOSE_ALL, NULL),
	STORE_STMT(STMT_NODE_STATE_OPEN, SQL_NODE_STATE_OPEN, NULL),
	STORE_SELECT(STMT_NODE_STATE_LIST, &NODE_STATE_ROW,
		     "FROM node_states WHERE ended_at = 0 OR ended_at > ?1"
		     " ORDER BY node, started_at"),
	{0},
};

/* ---- nodes and devices ---- */

void kn_node_row_release(struct kn_node_row *n)
{
	if (!n)
		return;
	store_rows_free(&DEVICE_ROW, n->devices, n->n_devices);
	store_row_release(&NODE_ROW, n);
}

int kn_store_node_put(struct kn_store *st, const struct kn_node_row *n,
		      struct kn_error *err)
{
	const struct store_key name[] = {KEY_TEXT(n->name)};
	const char *what = "writing a node";
	struct kn_node_row row = *n;
	bool own;
	int rc;

	/* No labels or taints read back as JSON all the same. */
	if (!row.labels_json)
		row.labels_json = "{}";
	if (!row.taints_json)
		row.taints_json = "[]";
	rc = write_begin(st, &own, err);
	if (rc < 0)
		return rc;
	rc = store_put(st, STMT_NODE_PUT, &row, what, err);
	if (rc == 0)
		rc = store_run_keyed(st, STMT_DEVICE_DELETE_NODE, name,
				     N_KEYS(name), what, err);
	for (size_t i = 0; rc == 0 && i < n->n_devices; i++) {
		struct kn_device_row d = n->devices[i];

		/* The device belongs to the node it is put with; the copy
		   only lends the name to the binding. */
		d.node = n->name;
		rc = store_put(st, STMT_DEVICE_INSERT, &d, what, err);
		if (rc == -EEXIST)
			rc = kn_errorf(err, KN_ECONFLICT, "devices",
				       "node %s lists device %d twice",
				       n->name, d.index);
	}
	return write_end(st, own, rc, err);
}

/* The node's devices, by index, into n->devices. */
static int read_devices(struct kn_store *st, struct kn_node_row *n,
			struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(n->name)};

	return store_list_keyed(st, STMT_DEVICE_LIST_NODE, keys, N_KEYS(keys),
				"listing devices", &n->devices, &n->n_devices,
				err);
}

/*
 * The node query stays open while each node's devices are read, which
 * keeps one read transaction (one snapshot) across all of them.
 */
int kn_store_node_list(struct kn_store *st, struct kn_node_row **out,
		       size_t *n, struct kn_error *err)
{
	sqlite3_stmt *s = st->stmt[STMT_NODE_LIST];
	const char *what = "listing nodes";
	struct kn_node_row *rows = NULL;
	size_t count = 0, alloc = 0;
	int rc;

	while ((rc = step_row(st, s, what, err)) == 1) {
		rows = kn_xgrow(rows, &alloc, count, sizeof(*rows));
		rc = store_read_row(s, &NODE_ROW, &rows[count], err);
		if (rc < 0)
			break;
		count++;
		rc = read_devices(st, &rows[count - 1], err);
		if (rc < 0)
			break;
	}
	stmt_done(s);
	if (rc < 0) {
		kn_node_list_free(rows, count);
		return rc;
	}
	*out = rows;
	*n = count;
	return 0;
}

void kn_node_list_free(struct kn_node_row *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		kn_node_row_release(&rows[i]);
	free(rows);
}

/* ---- the cost ledger's record of node states ---- */

int kn_store_node_state_open(struct kn_store *st, const char *node,
			     const char *state, int64_t at,
			     struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(node), KEY_TEXT(state),
					 KEY_I64(at)};
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	/* Inside this transaction: the node's open interval ends here. */
	rc = kn_store_node_state_close(st, node, at, err);
	if (rc == 0)
		rc = store_run_keyed(st, STMT_NODE_STATE_OPEN, keys,
				     N_KEYS(keys), "recording a node state",
				     err);
	return write_end(st, own, rc, err);
}

int kn_store_node_state_close(struct kn_store *st, const char *node,
			      int64_t at, struct kn_error *err)
{
	const struct store_key keys[] = {KEY_TEXT(node), KEY_I64(at)};
	bool own;
	int rc = write_begin(st, &own, err);

	if (rc < 0)
		return rc;
	rc = store_run_keyed(st, STMT_NODE_STATE_CLOSE, keys, N_KEYS(keys),
			     "closing a node state", err);
	return write_end(st, own, rc, err);
}

int kn_store_node_state_close_all(struct kn_store *st, int64_t at,
				  struct kn_error *err)
{
	const struct store_key keys[] = {KEY_I64(at)};

	return store_run_keyed(st, STMT_NODE_STATE_CLOSE_ALL, keys,
			       N_KEYS(keys), "closing node states", err);
}

STORE_LIST_BY_FN(kn_store_node_state_list, int64_t, struct kn_node_state_row,
		 STMT_NODE_STATE_LIST, "listing node states")

STORE_LIST_FREE_FN(kn_node_state_list_free, struct kn_node_state_row,
		   NODE_STATE_ROW)
