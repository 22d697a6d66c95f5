/*
 * libFuzzer harness for the VM catalog `kiln advise` reads
 * (kn_catalog_parse): each input is parsed as a user's --catalog on top
 * of a small good catalog, then advice is asked of what loaded. A failed
 * parse must leave the catalog as it was; every loaded row must keep the
 * invariants the advisor relies on.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cost/cost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char BASE[] =
	"family,size,gpu_model,gpu_count,gpu_mem_per_gpu_gb,vcpus,ram_gib,"
	"infiniband,payg_linux_usd_hr,spot_usd_hr,ri_1y_usd_hr,ri_3y_usd_hr\n"
	"NC,a,NVIDIA A100 80GB PCIe,1,80,24,220,no,3.5,0.4,2,1\n"
	"Esv5,e,,0,,8,64,no,,,,\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct kn_advise_request reqs[] = {
		{.phase = KN_PHASE_TRAIN, .params = 7e9, .dtype = "bf16", .nodes = 2,
		 .interruptible = true, .budget_usd_month = 100},
		{.phase = KN_PHASE_INFER, .params = 1e9, .dtype = "int4",
		 .throughput = 50},
		{.phase = KN_PHASE_INFER, .workload = KN_WORKLOAD_SMALL,
		 .params = 1e6, .dtype = "fp32"},
	};
	struct kn_catalog *c = kn_catalog_new();
	struct kn_advice *a = calloc(1, sizeof(*a));
	struct kn_error err;

	if (size > 65536 || !a)
		abort();
	if (kn_catalog_parse(c, BASE, strlen(BASE), "base", &err) != 0)
		abort();
	if (kn_catalog_parse(c, (const char *)data, size, "fuzz", &err) != 0) {
		if (kn_catalog_count(c) != 2 || !err.message[0])
			abort();
	}
	for (size_t i = 0; i < kn_catalog_count(c); i++) {
		const struct kn_vm_size *s = kn_catalog_at(c, i);

		if (!s->size[0] || s->vcpus < 1 || !(s->ram_gib > 0) ||
		    s->gpus < 0 || (s->gpus > 0 && !(s->gpu_mem_total_gb > 0)))
			abort();
		for (int p = 0; p < KN_PRICINGS; p++)
			if (!(s->usd_hr[p] >= 0 || s->usd_hr[p] == -1))
				abort();
		if (kn_catalog_find(c, s->size) != s)
			abort();
		kn_catalog_set_bandwidth(c, i, 1000);
	}
	for (size_t r = 0; r < sizeof(reqs) / sizeof(*reqs); r++) {
		if (kn_advise(c, &reqs[r], a, &err) != 0)
			abort();
		for (int i = 0; i < a->n_options; i++)
			if (a->options[i].nodes < 1 ||
			    a->options[i].need_per_vm_gb > a->options[i].capacity_gb)
				abort();
	}
	free(a);
	kn_catalog_free(c);
	return 0;
}
