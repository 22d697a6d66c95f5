/*
 * YAML helpers shared by the parsers of specs and alert rules.
 *
 * libfyaml 0.7 has no public start mark for mappings and sequences, but a
 * node report carries the node's position: collect one into a diag that
 * keeps errors rather than printing them, and read it back. Only used on
 * the way to an error message.
 */
#include "base.h"

#include <libfyaml.h>

bool kn_yaml_node_position(struct fy_diag *diag, struct fy_node *node,
			   int *line, int *col)
{
	struct fy_diag_error *e, *last = NULL;
	void *iter = NULL;

	fy_diag_node_report(diag, node, FYET_ERROR, "position");
	while ((e = fy_diag_errors_iterate(diag, &iter)))
		last = e;
	if (!last || last->line <= 0 || last->column <= 0)
		return false;
	*line = last->line;
	*col = last->column;
	return true;
}
