/*
 * kiln tune gpu: set each GPU's application clocks to the highest pair it
 * supports (the highest memory clock, then the highest SM clock allowed
 * with it), print before and after, and with --reset restore the
 * driver's defaults. --dry-run prints the plan and changes nothing.
 * Without a GPU it says so and exits 0: there is nothing to tune.
 * Setting clocks needs root; NVML's refusal is reported per GPU.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "telemetry/telemetry.h"

static cli_runner cmd_tune;

const struct cli_command cmd_tune_entry = {
	.name = "tune",
	.run = cmd_tune,
	.summary = "set GPU application clocks to their maximum",
	.help = "usage: kiln tune gpu [--dry-run] [--reset]\n"
		"\n"
		"Set each GPU's application clocks to the highest supported pair and\n"
		"print the clocks before and after (needs root). Without a GPU, says so\n"
		"and exits 0.\n"
		"\n"
		"  --dry-run  print the plan, change nothing\n"
		"  --reset    restore the driver's default application clocks\n",
};

int cli_nvml_open(const struct cli_ctx *ctx, const char *none,
		  struct kn_nvml **nv)
{
	struct kn_error err;
	int rc = kn_nvml_open(nv, &err);

	if (rc == -ENOENT) {
		fprintf(stderr, "%s: %s (%s)\n", ctx->prog, none, err.message);
		return CLI_EXIT_OK;
	}
	return rc < 0 ? cli_fail(ctx, "%s", err.message) : CLI_GO;
}

static int cmd_tune(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *target = NULL;
	bool dry_run = false, reset = false;
	struct cli_flag flags[] = {
		{"dry-run", 0, CLI_FLAG_BOOL, &dry_run},
		{"reset", 0, CLI_FLAG_BOOL, &reset},
		{NULL, 0, 0, NULL},
	};
	struct kn_nvml *nv = NULL;
	struct kn_error err;
	int rc, failures = 0;
	unsigned n;

	rc = cli_parse(ctx, argc, argv, flags, "WHAT", &target);
	if (rc != CLI_GO)
		return rc;
	if (strcmp(target, "gpu") != 0)
		return cli_usage_error(ctx, "can tune \"gpu\" only, not \"%s\"",
				       target);
	rc = cli_nvml_open(ctx, "no GPU to tune", &nv);
	if (rc != CLI_GO)
		return rc;
	n = kn_nvml_count(nv);
	if (n == 0)
		fprintf(stderr, "%s: no GPU to tune (NVML sees none)\n",
			ctx->prog);
	printf("%-4s %-28s %-16s %-16s %s\n", "GPU", "MODEL", "BEFORE SM/MEM",
	       reset ? "DEFAULT SM/MEM" : "MAX SM/MEM", "AFTER SM/MEM");
	for (unsigned i = 0; i < n; i++) {
		struct kn_gpu_clocks cur, max, after;
		struct kn_gpu_sample s;
		char before[32], best[32], now[32];

		if (kn_nvml_sample(nv, i, &s, &err) < 0 ||
		    kn_nvml_app_clocks(nv, i, &cur, &max, &err) < 0) {
			fprintf(stderr, "%s: GPU %u: %s\n", ctx->prog, i,
				err.message);
			failures++;
			continue;
		}
		snprintf(before, sizeof(before), "%u/%u", cur.sm_mhz, cur.mem_mhz);
		snprintf(best, sizeof(best), "%u/%u", max.sm_mhz, max.mem_mhz);
		if (dry_run) {
			kn_strlcpy(now, "(dry run)", sizeof(now));
		} else {
			rc = reset ? kn_nvml_reset_app_clocks(nv, i, &err)
				   : kn_nvml_set_app_clocks(nv, i, &max, &err);
			if (rc == 0)
				rc = kn_nvml_app_clocks(nv, i, &after, &max, &err);
			if (rc < 0) {
				fprintf(stderr, "%s: GPU %u: %s\n", ctx->prog, i,
					err.message);
				failures++;
				kn_strlcpy(now, "(unchanged)", sizeof(now));
			} else {
				snprintf(now, sizeof(now), "%u/%u", after.sm_mhz,
					 after.mem_mhz);
			}
		}
		printf("%-4u %-28.28s %-16s %-16s %s\n", i, s.name, before,
		       reset ? "-" : best, now);
	}
	kn_nvml_close(nv);
	return failures ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
