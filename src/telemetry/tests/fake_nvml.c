/*
 * A stand-in for libnvidia-ml.so.1 that answers from a recorded JSON file
 * named by $KILN_FAKE_NVML, so the exporter, health checks and tune run
 * their real dlopen path in tests. Loaded through $KILN_NVML_LIBRARY.
 *
 * The file: {"driver_version", "init_error" (an NVML error nvmlInit
 * returns), "devices": [{"name", "uuid", "minor", "pci_bus_id",
 * "utilization": [gpu, mem], "memory": [total, free, used], "temperature",
 * "power_mw", "energy_mj", "clocks": [sm, mem], "max_clocks",
 * "app_clocks", "supported_mem_clocks": [...], "supported_sm_clocks":
 * [...], "throttle_reasons", "ecc": [sbe_vol, dbe_vol, sbe_agg, dbe_agg],
 * "retired_pages": [sbe, dbe, pending], "remapped_rows": [corr, unc,
 * pending, failure], "pcie": [gen, max_gen, width, max_width], "nvlink":
 * [1, 0, ...], "xids": [...], "set_clocks_error", "processes": [[pid,
 * used_memory], ...], "process_util": [[pid, timestamp_us, sm], ...]}]}.
 * A missing key answers
 * NVML_ERROR_NOT_SUPPORTED, as a device without the feature does.
 * Application clocks set through it hold for the life of the process.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define OK 0
#define NOT_SUPPORTED 3
#define INVALID 2
#define TIMEOUT 10
#define UNINITIALIZED 1

static json_t *answers;
static json_t *defaults_app; /* app clocks as loaded, for reset */

typedef json_t *dev_t_;

__attribute__((visibility("default"))) int nvmlInit_v2(void)
{
	const char *path = getenv("KILN_FAKE_NVML");
	json_t *e;

	if (!path || !(answers = json_load_file(path, 0, NULL)))
		return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
	if ((e = json_object_get(answers, "init_error"))) {
		int code = (int)json_integer_value(e);
		json_decref(answers);
		answers = NULL;
		return code;
	}
	defaults_app = json_object();
	return OK;
}

__attribute__((visibility("default"))) int nvmlShutdown(void)
{
	json_decref(answers);
	json_decref(defaults_app);
	answers = NULL;
	defaults_app = NULL;
	return OK;
}

static json_t *devices(void)
{
	return json_object_get(answers, "devices");
}

static int get_uint(void *d, const char *key, unsigned *out)
{
	json_t *v = json_object_get(d, key);
	if (!answers)
		return UNINITIALIZED;
	if (!json_is_integer(v))
		return NOT_SUPPORTED;
	*out = (unsigned)json_integer_value(v);
	return OK;
}

/* Element i of array key. */
static int get_at(void *d, const char *key, size_t i, unsigned long long *out)
{
	json_t *v = json_array_get(json_object_get(d, key), i);
	if (!json_is_integer(v))
		return NOT_SUPPORTED;
	*out = (unsigned long long)json_integer_value(v);
	return OK;
}

static int get_string(void *d, const char *key, char *buf, unsigned len)
{
	const char *s = json_string_value(json_object_get(d, key));
	if (!s)
		return NOT_SUPPORTED;
	if (strlen(s) + 1 > len)
		return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
	strcpy(buf, s);
	return OK;
}

#define EXPORT __attribute__((visibility("default")))

EXPORT int nvmlSystemGetDriverVersion(char *buf, unsigned len)
{
	return get_string(answers, "driver_version", buf, len);
}

EXPORT int nvmlDeviceGetCount_v2(unsigned *n)
{
	*n = (unsigned)json_array_size(devices());
	return OK;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev_t_ *out)
{
	if (i >= json_array_size(devices()))
		return INVALID;
	*out = json_array_get(devices(), i);
	return OK;
}

EXPORT int nvmlDeviceGetName(dev_t_ d, char *buf, unsigned len)
{
	return get_string(d, "name", buf, len);
}

EXPORT int nvmlDeviceGetUUID(dev_t_ d, char *buf, unsigned len)
{
	return get_string(d, "uuid", buf, len);
}

EXPORT int nvmlDeviceGetMinorNumber(dev_t_ d, unsigned *out)
{
	return get_uint(d, "minor", out);
}

struct pci_info {
	char bus_id_legacy[16];
	unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
	char bus_id[32];
};

EXPORT int nvmlDeviceGetPciInfo_v3(dev_t_ d, struct pci_info *out)
{
	memset(out, 0, sizeof(*out));
	return get_string(d, "pci_bus_id", out->bus_id, sizeof(out->bus_id));
}

EXPORT int nvmlDeviceGetUtilizationRates(dev_t_ d, unsigned *out)
{
	unsigned long long g, m;
	if (get_at(d, "utilization", 0, &g) || get_at(d, "utilization", 1, &m))
		return NOT_SUPPORTED;
	out[0] = (unsigned)g;
	out[1] = (unsigned)m;
	return OK;
}

EXPORT int nvmlDeviceGetMemoryInfo(dev_t_ d, unsigned long long *out)
{
	for (size_t i = 0; i < 3; i++)
		if (get_at(d, "memory", i, &out[i]))
			return NOT_SUPPORTED;
	return OK;
}

EXPORT int nvmlDeviceGetTemperature(dev_t_ d, int sensor, unsigned *out)
{
	return sensor == 0 ? get_uint(d, "temperature", out) : INVALID;
}

EXPORT int nvmlDeviceGetPowerUsage(dev_t_ d, unsigned *out)
{
	return get_uint(d, "power_mw", out);
}

/* A 32-bit field of the fixture where NVML answers 64 bits. */
static int get_uint_wide(dev_t_ d, const char *key, unsigned long long *out)
{
	unsigned v;
	int rc = get_uint(d, key, &v);
	if (rc == OK)
		*out = v;
	return rc;
}

EXPORT int nvmlDeviceGetTotalEnergyConsumption(dev_t_ d,
					       unsigned long long *out)
{
	return get_uint_wide(d, "energy_mj", out);
}

/* NVML_CLOCK_SM = 1 -> element 0, NVML_CLOCK_MEM = 2 -> element 1. */
static int clock_of(dev_t_ d, const char *key, int type, unsigned *out)
{
	unsigned long long v;
	if (type != 1 && type != 2)
		return NOT_SUPPORTED;
	if (get_at(d, key, (size_t)type - 1, &v))
		return NOT_SUPPORTED;
	*out = (unsigned)v;
	return OK;
}

EXPORT int nvmlDeviceGetClockInfo(dev_t_ d, int type, unsigned *out)
{
	return clock_of(d, "clocks", type, out);
}

EXPORT int nvmlDeviceGetMaxClockInfo(dev_t_ d, int type, unsigned *out)
{
	return clock_of(d, "max_clocks", type, out);
}

EXPORT int nvmlDeviceGetApplicationsClock(dev_t_ d, int type, unsigned *out)
{
	return clock_of(d, "app_clocks", type, out);
}

/* Only the older name: kiln must fall back to it. */
EXPORT int nvmlDeviceGetCurrentClocksThrottleReasons(dev_t_ d,
						     unsigned long long *out)
{
	return get_uint_wide(d, "throttle_reasons", out);
}

EXPORT int nvmlDeviceGetTotalEccErrors(dev_t_ d, int type, int counter,
				       unsigned long long *out)
{
	return get_at(d, "ecc", (size_t)(counter * 2 + type), out);
}

EXPORT int nvmlDeviceGetRetiredPages(dev_t_ d, int cause, unsigned *count,
				     unsigned long long *addresses)
{
	unsigned long long v;
	(void)addresses;
	if (get_at(d, "retired_pages", (size_t)cause, &v))
		return NOT_SUPPORTED;
	*count = (unsigned)v;
	return OK;
}

EXPORT int nvmlDeviceGetRetiredPagesPendingStatus(dev_t_ d, int *out)
{
	unsigned long long v;
	if (get_at(d, "retired_pages", 2, &v))
		return NOT_SUPPORTED;
	*out = (int)v;
	return OK;
}

EXPORT int nvmlDeviceGetRemappedRows(dev_t_ d, unsigned *corr, unsigned *unc,
				     unsigned *pending, unsigned *failure)
{
	unsigned long long v[4];
	for (size_t i = 0; i < 4; i++)
		if (get_at(d, "remapped_rows", i, &v[i]))
			return NOT_SUPPORTED;
	*corr = (unsigned)v[0];
	*unc = (unsigned)v[1];
	*pending = (unsigned)v[2];
	*failure = (unsigned)v[3];
	return OK;
}

static int pcie(dev_t_ d, size_t i, unsigned *out)
{
	unsigned long long v;
	if (get_at(d, "pcie", i, &v))
		return NOT_SUPPORTED;
	*out = (unsigned)v;
	return OK;
}

EXPORT int nvmlDeviceGetCurrPcieLinkGeneration(dev_t_ d, unsigned *o)
{
	return pcie(d, 0, o);
}
EXPORT int nvmlDeviceGetMaxPcieLinkGeneration(dev_t_ d, unsigned *o)
{
	return pcie(d, 1, o);
}
EXPORT int nvmlDeviceGetCurrPcieLinkWidth(dev_t_ d, unsigned *o)
{
	return pcie(d, 2, o);
}
EXPORT int nvmlDeviceGetMaxPcieLinkWidth(dev_t_ d, unsigned *o)
{
	return pcie(d, 3, o);
}

EXPORT int nvmlDeviceGetNvLinkState(dev_t_ d, unsigned link, int *out)
{
	unsigned long long v;
	if (get_at(d, "nvlink", link, &v))
		return NOT_SUPPORTED;
	*out = (int)v;
	return OK;
}

static int event_set; /* its address is the one event set handed out */

EXPORT int nvmlEventSetCreate(void **out)
{
	*out = &event_set;
	return OK;
}

EXPORT int nvmlEventSetFree(void *set)
{
	return set == &event_set ? OK : INVALID;
}

EXPORT int nvmlDeviceRegisterEvents(dev_t_ d, unsigned long long types,
				    void *set)
{
	(void)d;
	return (types & 0x8) && set == &event_set ? OK : NOT_SUPPORTED;
}

struct event_data {
	void *device;
	unsigned long long type, data;
	unsigned gi, ci;
};

/* Hands out each recorded XID once, device by device. */
EXPORT int nvmlEventSetWait_v2(void *set, struct event_data *out,
			       unsigned timeout_ms)
{
	size_t i;
	json_t *d;
	(void)timeout_ms;
	if (set != &event_set)
		return INVALID;
	json_array_foreach(devices(), i, d) {
		json_t *xids = json_object_get(d, "xids");
		if (json_array_size(xids) > 0) {
			out->device = d;
			out->type = 0x8;
			out->data = (unsigned long long)json_integer_value(
				json_array_get(xids, 0));
			json_array_remove(xids, 0);
			return OK;
		}
	}
	return TIMEOUT;
}

static int list(dev_t_ d, const char *key, unsigned *count, unsigned *out)
{
	json_t *a = json_object_get(d, key), *v;
	size_t i;
	if (!json_is_array(a))
		return NOT_SUPPORTED;
	if (json_array_size(a) > *count) {
		*count = (unsigned)json_array_size(a);
		return 7;
	}
	json_array_foreach(a, i, v) out[i] = (unsigned)json_integer_value(v);
	*count = (unsigned)json_array_size(a);
	return OK;
}

EXPORT int nvmlDeviceGetSupportedMemoryClocks(dev_t_ d, unsigned *count,
					      unsigned *out)
{
	return list(d, "supported_mem_clocks", count, out);
}

EXPORT int nvmlDeviceGetSupportedGraphicsClocks(dev_t_ d, unsigned mem,
						unsigned *count, unsigned *out)
{
	(void)mem;
	return list(d, "supported_sm_clocks", count, out);
}

EXPORT int nvmlDeviceSetApplicationsClocks(dev_t_ d, unsigned mem,
					   unsigned sm)
{
	unsigned code;
	const char *uuid = json_string_value(json_object_get(d, "uuid"));
	json_t *app = json_object_get(d, "app_clocks");

	if (get_uint(d, "set_clocks_error", &code) == OK)
		return (int)code;
	if (!app)
		return NOT_SUPPORTED;
	if (!json_object_get(defaults_app, uuid))
		json_object_set_new(defaults_app, uuid, json_deep_copy(app));
	json_object_set_new(d, "app_clocks", json_pack("[ii]", sm, mem));
	return OK;
}

EXPORT int nvmlDeviceResetApplicationsClocks(dev_t_ d)
{
	unsigned code;
	const char *uuid = json_string_value(json_object_get(d, "uuid"));
	json_t *orig = json_object_get(defaults_app, uuid);

	if (get_uint(d, "set_clocks_error", &code) == OK)
		return (int)code;
	if (orig)
		json_object_set(d, "app_clocks", orig);
	return OK;
}

/* nvmlProcessInfo_t and nvmlProcessUtilizationSample_t. */
struct fake_process_info {
	unsigned pid;
	unsigned long long used_memory;
	unsigned gpu_instance, compute_instance;
};
struct fake_process_util {
	unsigned pid;
	unsigned long long timestamp;
	unsigned sm, mem, enc, dec;
};

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(
	dev_t_ d, unsigned *count, struct fake_process_info *out)
{
	json_t *list = json_object_get(d, "processes"), *p;
	size_t i;

	if (!json_is_array(list))
		return NOT_SUPPORTED;
	if (*count < json_array_size(list)) {
		*count = (unsigned)json_array_size(list);
		return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
	}
	json_array_foreach(list, i, p) {
		memset(&out[i], 0, sizeof(out[i]));
		out[i].pid = (unsigned)json_integer_value(json_array_get(p, 0));
		out[i].used_memory =
			(unsigned long long)json_integer_value(json_array_get(p, 1));
	}
	*count = (unsigned)json_array_size(list);
	return OK;
}

EXPORT int nvmlDeviceGetProcessUtilization(dev_t_ d,
					   struct fake_process_util *out,
					   unsigned *count,
					   unsigned long long since)
{
	json_t *list = json_object_get(d, "process_util"), *p;
	unsigned n = 0;
	size_t i;

	if (!json_is_array(list))
		return NOT_SUPPORTED;
	json_array_foreach(list, i, p) {
		unsigned long long ts =
			(unsigned long long)json_integer_value(json_array_get(p, 1));

		if (ts <= since)
			continue;
		if (n == *count)
			return 7;
		memset(&out[n], 0, sizeof(out[n]));
		out[n].pid = (unsigned)json_integer_value(json_array_get(p, 0));
		out[n].timestamp = ts;
		out[n].sm = (unsigned)json_integer_value(json_array_get(p, 2));
		n++;
	}
	*count = n;
	return n ? OK : 6; /* NVML_ERROR_NOT_FOUND: no samples since */
}
