/*
 * GPU samples as dcgm-exporter writes them: DCGM field names, its types
 * and units (framebuffer in MiB, power in W, clocks in MHz, the last XID
 * as a gauge) and its label set, so NVIDIA's Grafana dashboard reads them.
 * A field the device did not answer has no series, as with dcgm-exporter.
 *
 * The table below is the whole mapping: one row per family, a bit of
 * kn_gpu_sample.have that must be set, and a function picking the value.
 */
#include "telemetry.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef double (*pick_fn)(const struct kn_gpu_sample *s, unsigned xid);

#define PICK(fname, expr)                                                   \
	static double fname(const struct kn_gpu_sample *s, unsigned xid)    \
	{                                                                   \
		(void)xid;                                                  \
		return (double)(expr);                                      \
	}
PICK(p_util, s->util_gpu)
PICK(p_mem_util, s->util_mem)
PICK(p_fb_free, s->fb_free >> 20)
PICK(p_fb_used, s->fb_used >> 20)
PICK(p_temp, s->temp_c)
PICK(p_power, s->power_mw / 1000.0)
PICK(p_energy, s->energy_mj)
PICK(p_sm_clock, s->sm_clock)
PICK(p_mem_clock, s->mem_clock)
PICK(p_throttle, s->throttle)
PICK(p_sbe_vol, s->ecc_sbe_vol)
PICK(p_dbe_vol, s->ecc_dbe_vol)
PICK(p_sbe_agg, s->ecc_sbe_agg)
PICK(p_dbe_agg, s->ecc_dbe_agg)
PICK(p_retired_sbe, s->retired_sbe)
PICK(p_retired_dbe, s->retired_dbe)
PICK(p_retired_pending, s->retired_pending)
PICK(p_remap_unc, s->remap_uncorrectable)
PICK(p_remap_corr, s->remap_correctable)
PICK(p_remap_failure, s->remap_failure)
PICK(p_remap_pending, s->remap_pending)
PICK(p_pcie_gen, s->pcie_gen)
PICK(p_pcie_width, s->pcie_width)
PICK(p_pcie_max_gen, s->pcie_max_gen)
PICK(p_pcie_max_width, s->pcie_max_width)
PICK(p_xid, xid)
#undef PICK

static const struct {
	const char *name, *type, *help;
	uint32_t need; /* 0: always present */
	pick_fn pick;
} families[] = {
	{"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
	 KN_GPU_CLOCKS, p_sm_clock},
	{"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
	 KN_GPU_CLOCKS, p_mem_clock},
	{"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).",
	 KN_GPU_TEMP, p_temp},
	{"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).",
	 KN_GPU_POWER, p_power},
	{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
	 "Total energy consumption since boot (in mJ).", KN_GPU_ENERGY,
	 p_energy},
	{"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).",
	 KN_GPU_UTIL, p_util},
	{"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
	 KN_GPU_UTIL, p_mem_util},
	{"DCGM_FI_DEV_XID_ERRORS", "gauge",
	 "Value of the last XID error encountered.", 0, p_xid},
	{"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
	 KN_GPU_FB, p_fb_free},
	{"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
	 KN_GPU_FB, p_fb_used},
	{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge",
	 "Current clock throttle reasons (bitmask of NVML clock event "
	 "reasons).", KN_GPU_THROTTLE, p_throttle},
	{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
	 "Total number of single-bit volatile ECC errors.", KN_GPU_ECC,
	 p_sbe_vol},
	{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
	 "Total number of double-bit volatile ECC errors.", KN_GPU_ECC,
	 p_dbe_vol},
	{"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter",
	 "Total number of single-bit persistent ECC errors.", KN_GPU_ECC,
	 p_sbe_agg},
	{"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter",
	 "Total number of double-bit persistent ECC errors.", KN_GPU_ECC,
	 p_dbe_agg},
	{"DCGM_FI_DEV_RETIRED_SBE", "counter",
	 "Total number of retired pages due to single-bit errors.",
	 KN_GPU_RETIRED, p_retired_sbe},
	{"DCGM_FI_DEV_RETIRED_DBE", "counter",
	 "Total number of retired pages due to double-bit errors.",
	 KN_GPU_RETIRED, p_retired_dbe},
	{"DCGM_FI_DEV_RETIRED_PENDING", "gauge",
	 "Whether pages are pending retirement (1) or not (0).",
	 KN_GPU_RETIRED, p_retired_pending},
	{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
	 "Number of remapped rows for uncorrectable errors", KN_GPU_REMAP,
	 p_remap_unc},
	{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
	 "Number of remapped rows for correctable errors", KN_GPU_REMAP,
	 p_remap_corr},
	{"DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge",
	 "Whether remapping of rows has failed", KN_GPU_REMAP, p_remap_failure},
	{"DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge",
	 "Whether remapping of rows is pending (needs a GPU reset)",
	 KN_GPU_REMAP, p_remap_pending},
	{"DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "PCIe link generation.",
	 KN_GPU_PCIE, p_pcie_gen},
	{"DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "PCIe link width (lanes).",
	 KN_GPU_PCIE, p_pcie_width},
	{"DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "gauge",
	 "Maximum PCIe link generation the device and system support.",
	 KN_GPU_PCIE, p_pcie_max_gen},
	{"DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "gauge",
	 "Maximum PCIe link width the device and system support.",
	 KN_GPU_PCIE, p_pcie_max_width},
};

#define LABELS_MAX 18 /* 8 pairs + link + NULL */

/* dcgm-exporter's label order: gpu, UUID, pci_bus_id, device, modelName,
 * Hostname. */
static void base_labels(const struct kn_gpu_sample *s, const char *hostname,
			char *gpu, size_t glen, char *device, size_t dlen,
			const char **labels)
{
	size_t k = 0;

	snprintf(gpu, glen, "%u", s->index);
	snprintf(device, dlen, "nvidia%u", s->minor);
	labels[k++] = "gpu";
	labels[k++] = gpu;
	labels[k++] = "UUID";
	labels[k++] = s->uuid;
	labels[k++] = "pci_bus_id";
	labels[k++] = s->pci_bus_id;
	labels[k++] = "device";
	labels[k++] = device;
	labels[k++] = "modelName";
	labels[k++] = s->name;
	labels[k++] = "Hostname";
	labels[k++] = hostname;
	labels[k] = NULL;
}

int kn_gpu_write(const struct kn_gpu_sample *samples, const unsigned *last_xid,
		 size_t n, const char *hostname, struct kn_buf *out,
		 struct kn_error *err)
{
	const char *labels[LABELS_MAX];
	char gpu[16], device[24], link[16];
	int rc;

	for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
		bool begun = false;
		for (size_t i = 0; i < n; i++) {
			const struct kn_gpu_sample *s = &samples[i];
			if ((s->have & families[f].need) != families[f].need)
				continue;
			if (!begun && (rc = kn_prom_family(out, families[f].name,
							   families[f].type,
							   families[f].help)) < 0)
				goto full;
			begun = true;
			base_labels(s, hostname, gpu, sizeof(gpu), device,
				    sizeof(device), labels);
			if ((rc = kn_prom_sample(out, families[f].name, labels,
						 families[f].pick(
							 s, last_xid ? last_xid[i]
								     : 0))) < 0)
				goto full;
		}
	}
	/* DCGM's link status values: 2 = down, 3 = up (per NVLink). */
	for (size_t i = 0, begun = 0; i < n; i++) {
		const struct kn_gpu_sample *s = &samples[i];
		for (int l = 0; l < s->nvlinks; l++) {
			if (!begun &&
			    (rc = kn_prom_family(out,
						 "DCGM_FI_DEV_NVLINK_LINK_STATUS",
						 "gauge",
						 "NVLink link state: 2 down, 3 "
						 "up.")) < 0)
				goto full;
			begun = 1;
			base_labels(s, hostname, gpu, sizeof(gpu), device,
				    sizeof(device), labels);
			snprintf(link, sizeof(link), "%d", l);
			labels[12] = "link";
			labels[13] = link;
			labels[14] = NULL;
			if ((rc = kn_prom_sample(out,
						 "DCGM_FI_DEV_NVLINK_LINK_STATUS",
						 labels,
						 s->nvlink_up[l] ? 3 : 2)) < 0)
				goto full;
		}
	}
	return 0;
full:
	if (rc == -E2BIG)
		return kn_errorf(err, KN_ETOOBIG, NULL,
				 "scrape exceeds %d bytes", KN_PROM_MAX_BYTES);
	return kn_errorf(err, KN_EIO, NULL, "GPU %s: bad label value", gpu);
}
