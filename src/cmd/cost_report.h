/*
 * cost_report: how `kiln cost` shows GET /v1/cost's answer — an aligned
 * table, CSV, and an SVG chart of cost per day stacked by category —
 * Apart from the command so unit tests check
 * the formats on fixed answers.
 */
#ifndef KILN_CMD_COST_REPORT_H
#define KILN_CMD_COST_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* The rows and total as a table, then notes (unpriced nodes, where
   efficiency comes from) on the same stream. */
void cost_report_table(json_t *reply, FILE *out);

/* A header line, one line per row, then the total (key "total"). */
void cost_report_csv(json_t *reply, FILE *out);

/*
 * A self-contained SVG: one bar per day of a by=day answer, stacked
 * useful (busy less lost), lost, idle and unhealthy dollars, with a
 * legend and a dollar axis. Days are drawn in the answer's order.
 */
void cost_report_svg(json_t *day_reply, FILE *out);

/*
 * GET /v1/cost/reservations's answer: per size the utilisation, the
 * break-even of each reserved term and whether it pays off; then the jobs
 * that could move to spot.
 */
void cost_report_reservations(json_t *reply, FILE *out);

/*
 * GET /v1/cost/rightsize's answer: per job name and resource the samples,
 * p50, p95 and max of use, the request and the advice ("lower to X" when
 * the rule suggests it, else "keep"), then the rule. CPU in cores, memory
 * and GPU memory in MiB or GiB.
 */
void cost_report_rightsize(json_t *reply, FILE *out);
/* The same as CSV: one line per job and resource, unrounded. */
void cost_report_rightsize_csv(json_t *reply, FILE *out);

#endif
