/*
 * libFuzzer harness for the CSV tables `kiln health` reads: the GPU
 * performance figures (kn_gpu_perf_load, then a lookup on what loaded)
 * and the VM size catalogue (kn_sku_load). The input is written to a
 * memfd and read back through its /proc path, as the loaders take paths.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "health/health.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_gpu_perf_table t;
	struct kn_sku sku;
	struct kn_error err;
	char path[64];
	int fd;

	if (size > 65536)
		return 0;
	fd = memfd_create("fuzz-csv", 0);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (kn_gpu_perf_load(path, &t, &err) == 0) {
		for (size_t i = 0; i < t.n; i++)
			if (!t.rows[i].model[0] || t.rows[i].mem_bandwidth_gbs < 0 ||
			    t.rows[i].tensor_tflops < 0)
				abort();
		kn_gpu_perf_lookup(&t, "NVIDIA H100 80GB HBM3", 79.6);
		kn_gpu_perf_lookup(&t, "NVIDIA A100-SXM4-40GB", 39.4);
		kn_gpu_perf_table_release(&t);
	}
	if (kn_sku_load(path, "Standard_ND96isr_H100_v5", &sku, &err) == 0 &&
	    (sku.gpu_count < 1 || !(sku.ram_gib > 0)))
		abort();
	close(fd);
	return 0;
}
