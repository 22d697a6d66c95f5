/*
 * NVML through dlopen: a table of the entry points kiln uses, each with
 * the C signature nvml.h declares, looked up by name at open. Only init,
 * shutdown, count, handle, name and UUID are required; any other entry
 * point a driver lacks reads as "not supported", like an NVML call that
 * answers NVML_ERROR_NOT_SUPPORTED, so old drivers and consumer boards
 * give fewer metrics instead of none.
 *
 * The library is $KILN_NVML_LIBRARY when set (tests point it at a
 * stand-in that answers from recorded JSON), else libnvidia-ml.so.1.
 * Written against NVML's documented API; untested on a real GPU here.
 */
#include "telemetry.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NVML's constants, from nvml.h. */
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_TIMEOUT = 10,
	NVML_TEMPERATURE_GPU = 0,
	NVML_CLOCK_SM = 1,
	NVML_CLOCK_MEM = 2,
	NVML_MEMORY_ERROR_CORRECTED = 0,
	NVML_MEMORY_ERROR_UNCORRECTED = 1,
	NVML_VOLATILE_ECC = 0,
	NVML_AGGREGATE_ECC = 1,
	NVML_PAGE_RETIREMENT_MULTIPLE_SBE = 0,
	NVML_PAGE_RETIREMENT_DBE = 1,
	NVML_FEATURE_ENABLED = 1,
};
#define NVML_EVENT_XID 0x8ULL
/* Supported clock lists are short (tens); a cap keeps the stack bounded. */
#define CLOCK_LIST_MAX 256

typedef void *nvml_device;
typedef void *nvml_event_set;
struct nvml_utilization {
	unsigned int gpu, memory;
};
struct nvml_memory {
	unsigned long long total, free, used;
};
struct nvml_pci_info {
	char bus_id_legacy[16];
	unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
	char bus_id[32];
};
/* nvmlProcessInfo_t (the _v2 and _v3 calls take the same layout). */
struct nvml_process_info {
	unsigned int pid;
	unsigned long long used_gpu_memory;
	unsigned int gpu_instance_id, compute_instance_id;
};
/* nvmlProcessUtilizationSample_t. */
struct nvml_process_util {
	unsigned int pid;
	unsigned long long timestamp;
	unsigned int sm_util, mem_util, enc_util, dec_util;
};
struct nvml_event_data {
	nvml_device device;
	unsigned long long event_type, event_data;
	unsigned int gpu_instance_id, compute_instance_id;
};

struct nvml_api {
	int (*init)(void);
	int (*shutdown)(void);
	int (*driver_version)(char *, unsigned int);
	int (*count)(unsigned int *);
	int (*handle)(unsigned int, nvml_device *);
	int (*name)(nvml_device, char *, unsigned int);
	int (*uuid)(nvml_device, char *, unsigned int);
	int (*minor)(nvml_device, unsigned int *);
	int (*pci_info)(nvml_device, struct nvml_pci_info *);
	int (*utilization)(nvml_device, struct nvml_utilization *);
	int (*memory)(nvml_device, struct nvml_memory *);
	int (*temperature)(nvml_device, int, unsigned int *);
	int (*power)(nvml_device, unsigned int *);
	int (*energy)(nvml_device, unsigned long long *);
	int (*clock)(nvml_device, int, unsigned int *);
	int (*max_clock)(nvml_device, int, unsigned int *);
	int (*app_clock)(nvml_device, int, unsigned int *);
	int (*event_reasons)(nvml_device, unsigned long long *);
	int (*throttle_reasons)(nvml_device, unsigned long long *);
	int (*ecc_total)(nvml_device, int, int, unsigned long long *);
	int (*retired_pages)(nvml_device, int, unsigned int *,
			     unsigned long long *);
	int (*retired_pending)(nvml_device, int *);
	int (*remapped_rows)(nvml_device, unsigned int *, unsigned int *,
			     unsigned int *, unsigned int *);
	int (*pcie_gen)(nvml_device, unsigned int *);
	int (*pcie_max_gen)(nvml_device, unsigned int *);
	int (*pcie_width)(nvml_device, unsigned int *);
	int (*pcie_max_width)(nvml_device, unsigned int *);
	int (*nvlink_state)(nvml_device, unsigned int, int *);
	int (*event_set_create)(nvml_event_set *);
	int (*event_set_free)(nvml_event_set);
	int (*register_events)(nvml_device, unsigned long long,
			       nvml_event_set);
	int (*event_wait)(nvml_event_set, struct nvml_event_data *,
			  unsigned int);
	int (*supported_mem_clocks)(nvml_device, unsigned int *,
				    unsigned int *);
	int (*supported_sm_clocks)(nvml_device, unsigned int, unsigned int *,
				   unsigned int *);
	int (*set_app_clocks)(nvml_device, unsigned int, unsigned int);
	int (*reset_app_clocks)(nvml_device);
	int (*processes_v3)(nvml_device, unsigned int *,
			    struct nvml_process_info *);
	int (*processes_v2)(nvml_device, unsigned int *,
			    struct nvml_process_info *);
	int (*process_util)(nvml_device, struct nvml_process_util *,
			    unsigned int *, unsigned long long);
};

/* Entry point names, in the order of struct nvml_api's members. */
static const struct {
	const char *name;
	size_t offset;
	bool required;
} symbols[] = {
#define SYM(field, sym, req) {sym, offsetof(struct nvml_api, field), req}
	SYM(init, "nvmlInit_v2", true),
	SYM(shutdown, "nvmlShutdown", true),
	SYM(driver_version, "nvmlSystemGetDriverVersion", false),
	SYM(count, "nvmlDeviceGetCount_v2", true),
	SYM(handle, "nvmlDeviceGetHandleByIndex_v2", true),
	SYM(name, "nvmlDeviceGetName", true),
	SYM(uuid, "nvmlDeviceGetUUID", true),
	SYM(minor, "nvmlDeviceGetMinorNumber", false),
	SYM(pci_info, "nvmlDeviceGetPciInfo_v3", false),
	SYM(utilization, "nvmlDeviceGetUtilizationRates", false),
	SYM(memory, "nvmlDeviceGetMemoryInfo", false),
	SYM(temperature, "nvmlDeviceGetTemperature", false),
	SYM(power, "nvmlDeviceGetPowerUsage", false),
	SYM(energy, "nvmlDeviceGetTotalEnergyConsumption", false),
	SYM(clock, "nvmlDeviceGetClockInfo", false),
	SYM(max_clock, "nvmlDeviceGetMaxClockInfo", false),
	SYM(app_clock, "nvmlDeviceGetApplicationsClock", false),
	SYM(event_reasons, "nvmlDeviceGetCurrentClocksEventReasons", false),
	SYM(throttle_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons",
	    false),
	SYM(ecc_total, "nvmlDeviceGetTotalEccErrors", false),
	SYM(retired_pages, "nvmlDeviceGetRetiredPages", false),
	SYM(retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus", false),
	SYM(remapped_rows, "nvmlDeviceGetRemappedRows", false),
	SYM(pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration", false),
	SYM(pcie_max_gen, "nvmlDeviceGetMaxPcieLinkGeneration", false),
	SYM(pcie_width, "nvmlDeviceGetCurrPcieLinkWidth", false),
	SYM(pcie_max_width, "nvmlDeviceGetMaxPcieLinkWidth", false),
	SYM(nvlink_state, "nvmlDeviceGetNvLinkState", false),
	SYM(event_set_create, "nvmlEventSetCreate", false),
	SYM(event_set_free, "nvmlEventSetFree", false),
	SYM(register_events, "nvmlDeviceRegisterEvents", false),
	SYM(event_wait, "nvmlEventSetWait_v2", false),
	SYM(supported_mem_clocks, "nvmlDeviceGetSupportedMemoryClocks", false),
	SYM(supported_sm_clocks, "nvmlDeviceGetSupportedGraphicsClocks",
	    false),
	SYM(set_app_clocks, "nvmlDeviceSetApplicationsClocks", false),
	SYM(reset_app_clocks, "nvmlDeviceResetApplicationsClocks", false),
	SYM(processes_v3, "nvmlDeviceGetComputeRunningProcesses_v3", false),
	SYM(processes_v2, "nvmlDeviceGetComputeRunningProcesses_v2", false),
	SYM(process_util, "nvmlDeviceGetProcessUtilization", false),
#undef SYM
};

struct kn_nvml {
	void *lib;
	struct nvml_api api;
	unsigned count;
	nvml_device *devices;
	nvml_event_set events; /* XID events, or NULL when unsupported */
	char driver[96];
};

void kn_nvml_close(struct kn_nvml *nv)
{
	if (!nv)
		return;
	if (nv->events)
		nv->api.event_set_free(nv->events);
	if (nv->lib) {
		nv->api.shutdown();
		dlclose(nv->lib);
	}
	KN_FREE_ALL(nv->devices, nv);
}

int kn_nvml_open(struct kn_nvml **out, struct kn_error *err)
{
	const char *path = getenv("KILN_NVML_LIBRARY");
	struct kn_nvml *nv = kn_xcalloc(1, sizeof(*nv));
	void *lib;
	int rc, code;

	if (!path || !*path)
		path = "libnvidia-ml.so.1";
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		free(nv);
		kn_errorf(err, KN_EUNAVAIL, NULL, "no NVML: cannot load %s",
			  path);
		return -ENOENT;
	}
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		void *fn = dlsym(lib, symbols[i].name);
		if (!fn && symbols[i].required) {
			dlclose(lib);
			free(nv);
			return kn_errorf(err, KN_EIO, NULL,
					 "%s lacks NVML entry point %s", path,
					 symbols[i].name);
		}
		memcpy((char *)&nv->api + symbols[i].offset, &fn, sizeof(fn));
	}
	if ((code = nv->api.init()) != NVML_SUCCESS) {
		dlclose(lib);
		free(nv);
		kn_errorf(err, KN_EUNAVAIL, NULL,
			  "no GPU: nvmlInit failed (NVML error %d)", code);
		return -ENOENT;
	}
	nv->lib = lib;
	if ((code = nv->api.count(&nv->count)) != NVML_SUCCESS) {
		rc = kn_errorf(err, KN_EIO, NULL,
			       "nvmlDeviceGetCount failed (NVML error %d)", code);
		goto fail;
	}
	nv->devices = kn_xcalloc(nv->count ? nv->count : 1,
				 sizeof(*nv->devices));
	for (unsigned i = 0; i < nv->count; i++)
		if ((code = nv->api.handle(i, &nv->devices[i])) != NVML_SUCCESS) {
			rc = kn_errorf(err, KN_EIO, NULL,
				       "GPU %u: no handle (NVML error %d)", i,
				       code);
			goto fail;
		}
	if (nv->api.driver_version &&
	    nv->api.driver_version(nv->driver, sizeof(nv->driver)) !=
		    NVML_SUCCESS)
		nv->driver[0] = '\0';
	/* XID events: a driver or board without them just has no series. */
	if (nv->api.event_set_create && nv->api.register_events &&
	    nv->api.event_wait && nv->api.event_set_free &&
	    nv->api.event_set_create(&nv->events) == NVML_SUCCESS) {
		for (unsigned i = 0; i < nv->count; i++)
			nv->api.register_events(nv->devices[i], NVML_EVENT_XID,
						nv->events);
	}
	*out = nv;
	return 0;
fail:
	kn_nvml_close(nv);
	return rc;
}

unsigned kn_nvml_count(const struct kn_nvml *nv)
{
	return nv->count;
}

const char *kn_nvml_driver_version(const struct kn_nvml *nv)
{
	return nv->driver;
}

/* Call an optional entry point: true when it answered. */
#define ASK(nv, fn, ...) ((nv)->api.fn && (nv)->api.fn(__VA_ARGS__) == NVML_SUCCESS)

/* The clocks now, at most and as set for applications. */
static void sample_clocks(const struct kn_nvml *nv, nvml_device d,
			  struct kn_gpu_sample *s)
{
	unsigned int a, b;

	if (ASK(nv, clock, d, NVML_CLOCK_SM, &a) &&
	    ASK(nv, clock, d, NVML_CLOCK_MEM, &b)) {
		s->sm_clock = a;
		s->mem_clock = b;
		s->have |= KN_GPU_CLOCKS;
	}
	if (ASK(nv, max_clock, d, NVML_CLOCK_SM, &a) &&
	    ASK(nv, max_clock, d, NVML_CLOCK_MEM, &b)) {
		s->max_sm_clock = a;
		s->max_mem_clock = b;
		s->have |= KN_GPU_MAX_CLOCKS;
	}
	if (ASK(nv, app_clock, d, NVML_CLOCK_SM, &a) &&
	    ASK(nv, app_clock, d, NVML_CLOCK_MEM, &b)) {
		s->app_sm_clock = a;
		s->app_mem_clock = b;
		s->have |= KN_GPU_APP_CLOCKS;
	}
}

/* What says the board is failing: ECC counts, retired pages, remapped
   rows. */
static void sample_memory_errors(const struct kn_nvml *nv, nvml_device d,
				 struct kn_gpu_sample *s)
{
	unsigned int a = 0, b = 0, c, e;
	unsigned long long x, y, z, w;
	int state;

	if (ASK(nv, ecc_total, d, NVML_MEMORY_ERROR_CORRECTED,
		NVML_VOLATILE_ECC, &x) &&
	    ASK(nv, ecc_total, d, NVML_MEMORY_ERROR_UNCORRECTED,
		NVML_VOLATILE_ECC, &y) &&
	    ASK(nv, ecc_total, d, NVML_MEMORY_ERROR_CORRECTED,
		NVML_AGGREGATE_ECC, &z) &&
	    ASK(nv, ecc_total, d, NVML_MEMORY_ERROR_UNCORRECTED,
		NVML_AGGREGATE_ECC, &w)) {
		s->ecc_sbe_vol = x;
		s->ecc_dbe_vol = y;
		s->ecc_sbe_agg = z;
		s->ecc_dbe_agg = w;
		s->have |= KN_GPU_ECC;
	}
	/* A NULL address list with count 0 asks for the count alone. */
	if (ASK(nv, retired_pages, d, NVML_PAGE_RETIREMENT_MULTIPLE_SBE, &a,
		NULL) &&
	    ASK(nv, retired_pages, d, NVML_PAGE_RETIREMENT_DBE, &b, NULL) &&
	    ASK(nv, retired_pending, d, &state)) {
		s->retired_sbe = a;
		s->retired_dbe = b;
		s->retired_pending = state == NVML_FEATURE_ENABLED;
		s->have |= KN_GPU_RETIRED;
	}
	if (ASK(nv, remapped_rows, d, &a, &b, &c, &e)) {
		s->remap_correctable = a;
		s->remap_uncorrectable = b;
		s->remap_pending = c != 0;
		s->remap_failure = e != 0;
		s->have |= KN_GPU_REMAP;
	}
}

/* The PCIe link as it runs and at most, and which NVLinks are up. */
static void sample_links(const struct kn_nvml *nv, nvml_device d,
			 struct kn_gpu_sample *s)
{
	unsigned int a, b, c, e;
	int state;

	if (ASK(nv, pcie_gen, d, &a) && ASK(nv, pcie_max_gen, d, &b) &&
	    ASK(nv, pcie_width, d, &c) && ASK(nv, pcie_max_width, d, &e)) {
		s->pcie_gen = a;
		s->pcie_max_gen = b;
		s->pcie_width = c;
		s->pcie_max_width = e;
		s->have |= KN_GPU_PCIE;
	}
	/* Links answer until the first one the device does not have. */
	for (unsigned l = 0; l < KN_NVLINK_MAX; l++) {
		if (!ASK(nv, nvlink_state, d, l, &state))
			break;
		s->nvlink_up[l] = state == NVML_FEATURE_ENABLED;
		s->nvlinks = (int)l + 1;
	}
}

int kn_nvml_sample(struct kn_nvml *nv, unsigned index,
		   struct kn_gpu_sample *out, struct kn_error *err)
{
	struct kn_gpu_sample s;
	nvml_device d;
	struct nvml_utilization util;
	struct nvml_memory mem;
	struct nvml_pci_info pci;
	unsigned int a;
	unsigned long long x;
	int code;

	if (index >= nv->count)
		return kn_errorf(err, KN_ENOTFOUND, NULL,
				 "GPU %u: there are %u", index, nv->count);
	d = nv->devices[index];
	memset(&s, 0, sizeof(s));
	s.index = index;
	s.minor = index;
	if ((code = nv->api.name(d, s.name, sizeof(s.name))) != NVML_SUCCESS ||
	    (code = nv->api.uuid(d, s.uuid, sizeof(s.uuid))) != NVML_SUCCESS)
		return kn_errorf(err, KN_EIO, NULL,
				 "GPU %u: name/UUID (NVML error %d)", index,
				 code);
	if (ASK(nv, minor, d, &a))
		s.minor = a;
	if (ASK(nv, pci_info, d, &pci)) {
		pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
		kn_strlcpy(s.pci_bus_id, pci.bus_id, sizeof(s.pci_bus_id));
	}
	if (ASK(nv, utilization, d, &util)) {
		s.util_gpu = util.gpu;
		s.util_mem = util.memory;
		s.have |= KN_GPU_UTIL;
	}
	if (ASK(nv, memory, d, &mem)) {
		s.fb_total = mem.total;
		s.fb_free = mem.free;
		s.fb_used = mem.used;
		s.have |= KN_GPU_FB;
	}
	if (ASK(nv, temperature, d, NVML_TEMPERATURE_GPU, &a)) {
		s.temp_c = a;
		s.have |= KN_GPU_TEMP;
	}
	if (ASK(nv, power, d, &a)) {
		s.power_mw = a;
		s.have |= KN_GPU_POWER;
	}
	if (ASK(nv, energy, d, &x)) {
		s.energy_mj = x;
		s.have |= KN_GPU_ENERGY;
	}
	sample_clocks(nv, d, &s);
	if (ASK(nv, event_reasons, d, &x) || ASK(nv, throttle_reasons, d, &x)) {
		s.throttle = x;
		s.have |= KN_GPU_THROTTLE;
	}
	sample_memory_errors(nv, d, &s);
	sample_links(nv, d, &s);
	*out = s;
	return 0;
}

int kn_nvml_poll_xids(struct kn_nvml *nv, unsigned *last_xid,
		      struct kn_error *err)
{
	struct nvml_event_data ev;
	int code;

	if (!nv->events)
		return 0;
	/* Bounded: a storm of events is drained over several scrapes. */
	for (int i = 0; i < 1024; i++) {
		code = nv->api.event_wait(nv->events, &ev, 0);
		if (code == NVML_ERROR_TIMEOUT)
			return 0;
		if (code != NVML_SUCCESS)
			return kn_errorf(err, KN_EIO, NULL,
					 "nvmlEventSetWait failed (NVML error "
					 "%d)", code);
		if (!(ev.event_type & NVML_EVENT_XID))
			continue;
		for (unsigned g = 0; g < nv->count; g++)
			if (nv->devices[g] == ev.device)
				last_xid[g] = (unsigned)ev.event_data;
	}
	return 0;
}

int kn_nvml_app_clocks(struct kn_nvml *nv, unsigned index,
		       struct kn_gpu_clocks *current,
		       struct kn_gpu_clocks *max_supported,
		       struct kn_error *err)
{
	unsigned int mem[CLOCK_LIST_MAX], sm[CLOCK_LIST_MAX], nmem, nsm;
	struct kn_gpu_clocks cur, best = {0, 0};
	nvml_device d;
	int code;

	if (index >= nv->count)
		return kn_errorf(err, KN_ENOTFOUND, NULL,
				 "GPU %u: there are %u", index, nv->count);
	d = nv->devices[index];
	if (!ASK(nv, app_clock, d, NVML_CLOCK_SM, &cur.sm_mhz) ||
	    !ASK(nv, app_clock, d, NVML_CLOCK_MEM, &cur.mem_mhz))
		return kn_errorf(err, KN_EUNAVAIL, NULL,
				 "GPU %u does not support application clocks",
				 index);
	nmem = CLOCK_LIST_MAX;
	if (!nv->api.supported_mem_clocks ||
	    (code = nv->api.supported_mem_clocks(d, &nmem, mem)) !=
		    NVML_SUCCESS)
		return kn_errorf(err, KN_EUNAVAIL, NULL,
				 "GPU %u: no list of supported memory clocks",
				 index);
	/* The highest memory clock, then the highest SM clock it allows. */
	for (unsigned i = 0; i < nmem && i < CLOCK_LIST_MAX; i++)
		if (mem[i] > best.mem_mhz)
			best.mem_mhz = mem[i];
	nsm = CLOCK_LIST_MAX;
	if (!nv->api.supported_sm_clocks ||
	    (code = nv->api.supported_sm_clocks(d, best.mem_mhz, &nsm, sm)) !=
		    NVML_SUCCESS || nsm == 0)
		return kn_errorf(err, KN_EUNAVAIL, NULL,
				 "GPU %u: no supported SM clocks at %u MHz",
				 index, best.mem_mhz);
	for (unsigned i = 0; i < nsm && i < CLOCK_LIST_MAX; i++)
		if (sm[i] > best.sm_mhz)
			best.sm_mhz = sm[i];
	*current = cur;
	*max_supported = best;
	return 0;
}

int kn_nvml_set_app_clocks(struct kn_nvml *nv, unsigned index,
			   const struct kn_gpu_clocks *clocks,
			   struct kn_error *err)
{
	int code;

	if (index >= nv->count)
		return kn_errorf(err, KN_ENOTFOUND, NULL,
				 "GPU %u: there are %u", index, nv->count);
	if (!nv->api.set_app_clocks)
		return kn_errorf(err, KN_EUNAVAIL, NULL,
				 "NVML cannot set application clocks");
	code = nv->api.set_app_clocks(nv->devices[index], clocks->mem_mhz,
				      clocks->sm_mhz);
	if (code != NVML_SUCCESS)
		return kn_errorf(err, code == NVML_ERROR_NO_PERMISSION ? KN_EPERM : KN_EIO, NULL,
				 "GPU %u: setting clocks to %u/%u MHz failed "
				 "(NVML error %d%s)", index, clocks->sm_mhz,
				 clocks->mem_mhz, code,
				 code == NVML_ERROR_NO_PERMISSION ? ": needs root" : "");
	return 0;
}

int kn_nvml_reset_app_clocks(struct kn_nvml *nv, unsigned index,
			     struct kn_error *err)
{
	int code;

	if (index >= nv->count)
		return kn_errorf(err, KN_ENOTFOUND, NULL,
				 "GPU %u: there are %u", index, nv->count);
	if (!nv->api.reset_app_clocks)
		return kn_errorf(err, KN_EUNAVAIL, NULL,
				 "NVML cannot reset application clocks");
	code = nv->api.reset_app_clocks(nv->devices[index]);
	if (code != NVML_SUCCESS)
		return kn_errorf(err, code == NVML_ERROR_NO_PERMISSION ? KN_EPERM : KN_EIO, NULL,
				 "GPU %u: resetting clocks failed (NVML error "
				 "%d%s)", index, code,
				 code == NVML_ERROR_NO_PERMISSION ? ": needs root" : "");
	return 0;
}

/*
 * Per-process usage: GPU memory from the running compute processes, SM
 * utilisation from the driver's per-process samples since since_us
 * (averaged per pid). A driver without the samples leaves sm_util < 0.
 */
int kn_nvml_processes(struct kn_nvml *nv, unsigned index,
		      unsigned long long since_us,
		      struct kn_gpu_proc_usage *out, size_t max, size_t *n,
		      struct kn_error *err)
{
	int (*list)(nvml_device, unsigned int *, struct nvml_process_info *) =
		nv->api.processes_v3 ? nv->api.processes_v3
				     : nv->api.processes_v2;
	struct nvml_process_info infos[KN_GPU_PROCS_MAX];
	struct nvml_process_util samples[KN_GPU_PROCS_MAX * 4];
	unsigned int count = KN_GPU_PROCS_MAX, ns = KN_GPU_PROCS_MAX * 4;
	size_t used = 0;
	int code;

	*n = 0;
	if (index >= nv->count)
		return kn_errorf(err, KN_EINVAL, "index", "no GPU %u", index);
	if (!list)
		return 0; /* a driver too old to say */
	code = list(nv->devices[index], &count, infos);
	if (code == NVML_ERROR_NOT_SUPPORTED)
		return 0;
	if (code == NVML_ERROR_INSUFFICIENT_SIZE)
		return kn_errorf(err, KN_EIO, NULL,
				 "GPU %u: %u compute processes, more than the "
				 "%d read", index, count, KN_GPU_PROCS_MAX);
	if (code != NVML_SUCCESS)
		return kn_errorf(err, KN_EIO, NULL,
				 "GPU %u: listing processes (NVML error %d)",
				 index, code);
	for (unsigned i = 0; i < count && used < max; i++) {
		out[used].pid = infos[i].pid;
		/* NVML_VALUE_NOT_AVAILABLE is all ones (under some
		   virtualisation). */
		out[used].memory_bytes =
			infos[i].used_gpu_memory == ~0ULL
				? -1
				: (int64_t)infos[i].used_gpu_memory;
		out[used].sm_util = -1;
		used++;
	}
	if (nv->api.process_util &&
	    nv->api.process_util(nv->devices[index], samples, &ns, since_us) ==
		    NVML_SUCCESS) {
		for (size_t k = 0; k < used; k++) {
			double sum = 0;
			int got = 0;

			for (unsigned i = 0; i < ns; i++)
				if (samples[i].pid == out[k].pid) {
					sum += samples[i].sm_util;
					got++;
				}
			if (got)
				out[k].sm_util = sum / got / 100.0;
		}
	}
	*n = used;
	return 0;
}
