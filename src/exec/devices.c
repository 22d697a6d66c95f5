/*
 * Devices: NVML through dlopen, or simulated ones. NVML is loaded at run
 * time (not linked) so one kiln binary runs on GPU and CPU-only machines;
 * only the handful of entry points needed here are looked up.
 */
#include "exec.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void kn_device_set_release(struct kn_device_set *set)
{
	if (!set)
		return;
	free(set->devices);
	memset(set, 0, sizeof(*set));
}

/* "H100-80GB" -> 80 GiB; the model must end in -<N>GB. */
static int model_memory(const char *model, int64_t *out)
{
	const char *dash = strrchr(model, '-');
	char *end;
	long gb;

	if (!dash || dash == model)
		return -EINVAL;
	for (const char *p = model; p < dash; p++)
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_')
			return -EINVAL;
	errno = 0;
	gb = strtol(dash + 1, &end, 10);
	if (errno || end == dash + 1 || strcmp(end, "GB") != 0 || gb < 1 ||
	    gb > 4096)
		return -EINVAL;
	*out = (int64_t)gb << 30;
	return 0;
}

int kn_devices_simulated(const char *spec, struct kn_device_set *out,
			 struct kn_error *err)
{
	struct kn_device_info *devs = kn_xcalloc(KN_MAX_DEVICES, sizeof(*devs));
	char *copy = kn_xstrdup(spec), *rest = copy, *group;
	size_t n = 0;
	int rc = 0;

	while ((group = strsep(&rest, ",")) != NULL) {
		char *x = strchr(group, 'x'), *end;
		char *mode = strchr(group, ':');
		long count;
		int64_t mem;

		if (mode && strcmp(mode, ":mig") != 0) {
			rc = kn_errorf(err, KN_EINVAL, "gpus",
				       "--gpus: \"%s\": the only mode after a "
				       "group is :mig (e.g. 2xA100-80GB:mig)",
				       group);
			goto out;
		}
		if (mode)
			*mode = '\0';
		errno = 0;
		count = x ? strtol(group, &end, 10) : 0;
		if (!x || errno || end != x || count < 1 ||
		    model_memory(x + 1, &mem) < 0) {
			rc = kn_errorf(err, KN_EINVAL, "gpus",
				       "--gpus: \"%s\" is not COUNTxMODEL-<N>GB "
				       "(for example 4xH100-80GB)",
				       group);
			goto out;
		}
		if (n + (size_t)count > KN_MAX_DEVICES) {
			rc = kn_errorf(err, KN_EINVAL, "gpus",
				       "--gpus: at most %d devices in all",
				       KN_MAX_DEVICES);
			goto out;
		}
		for (long i = 0; i < count; i++, n++) {
			devs[n].index = (int)n;
			kn_strlcpy(devs[n].model, x + 1, sizeof(devs[n].model));
			devs[n].memory_bytes = mem;
			devs[n].mig = mode != NULL;
			snprintf(devs[n].uuid, sizeof(devs[n].uuid),
				 "GPU-sim-%04zu-%.40s", n, x + 1);
		}
	}
	if (n == 0) {
		rc = kn_errorf(err, KN_EINVAL, "gpus",
			       "--gpus: no device group given (for example "
			       "4xH100-80GB)");
		goto out;
	}
	out->devices = devs;
	out->n = n;
	out->simulated = true;
	kn_strlcpy(out->source, "simulated", sizeof(out->source));
	devs = NULL;
out:
	KN_FREE_ALL(devs, copy);
	return rc;
}

/*
 * Memory sizes the GPU families are sold with, in GB as marketed. NVML
 * reports what the driver can use (an H200 "141GB" shows about 140.4
 * GiB), so a name without its size gets the nearest of these.
 */
static const struct {
	const char *family;
	int gb[3];
} known_sizes[] = {
	{"H200", {141}},    {"H100", {80, 94}}, {"A100", {40, 80}},
	{"V100", {16, 32}}, {"T4", {16}},       {"A10", {24}},
	{"L4", {24}},       {"L40S", {48}},     {"L40", {48}},
};

void kn_device_model_name(const char *name, int64_t memory_bytes, char *out,
			  size_t len)
{
	char copy[128], *save = NULL, *word, family[64] = "";
	long gb = 0;

	kn_strlcpy(copy, name, sizeof(copy));
	for (word = strtok_r(copy, " ", &save); word;
	     word = strtok_r(NULL, " ", &save)) {
		char *part, *psave = NULL;
		if (!strcmp(word, "NVIDIA") || !strcmp(word, "Tesla"))
			continue;
		/* "A100-SXM4-80GB": family first, a size in any part. */
		for (part = strtok_r(word, "-", &psave); part;
		     part = strtok_r(NULL, "-", &psave)) {
			size_t pl = strlen(part);
			if (!family[0]) {
				kn_strlcpy(family, part, sizeof(family));
				continue;
			}
			if (!gb && pl > 2 && !strcmp(part + pl - 2, "GB") &&
			    isdigit((unsigned char)part[0]))
				gb = strtol(part, NULL, 10);
		}
	}
	if (!family[0])
		kn_strlcpy(family, "GPU", sizeof(family));
	if (!gb) {
		/* Nearest marketed size within 8 %, else the GiB rounded. */
		double have = (double)memory_bytes / 1e9;
		for (size_t i = 0; i < sizeof(known_sizes) / sizeof(known_sizes[0]);
		     i++) {
			if (strcasecmp(family, known_sizes[i].family) != 0)
				continue;
			for (int k = 0; k < 3 && known_sizes[i].gb[k]; k++) {
				double want = known_sizes[i].gb[k];
				if (have > want * 0.92 && have < want * 1.08)
					gb = known_sizes[i].gb[k];
			}
		}
		if (!gb)
			gb = (long)((memory_bytes + (1LL << 29)) >> 30);
	}
	snprintf(out, len, "%s-%ldGB", family, gb);
}

/* The NVML entry points used, with their C signatures from nvml.h. */
struct nvml_memory {
	unsigned long long total, free, used;
};
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_count_fn)(unsigned int *);
typedef int (*nvml_handle_fn)(unsigned int, void **);
typedef int (*nvml_string_fn)(void *, char *, unsigned int);
typedef int (*nvml_memory_fn)(void *, struct nvml_memory *);

int kn_devices_discover(struct kn_device_set *out, struct kn_error *err)
{
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	nvml_init_fn init, shutdown;
	nvml_count_fn count;
	nvml_handle_fn handle;
	nvml_string_fn get_name, get_uuid;
	nvml_memory_fn get_memory;
	struct kn_device_info *devs = NULL;
	unsigned int n = 0;
	int rc = 0, nv;

	memset(out, 0, sizeof(*out));
	kn_strlcpy(out->source, "none", sizeof(out->source));
	if (!lib)
		return 0;
	init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
	shutdown = (nvml_init_fn)dlsym(lib, "nvmlShutdown");
	count = (nvml_count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
	handle = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
	get_name = (nvml_string_fn)dlsym(lib, "nvmlDeviceGetName");
	get_uuid = (nvml_string_fn)dlsym(lib, "nvmlDeviceGetUUID");
	get_memory = (nvml_memory_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
	if (!init || !shutdown || !count || !handle || !get_name || !get_uuid ||
	    !get_memory) {
		rc = kn_errorf(err, KN_EIO, NULL,
			       "libnvidia-ml.so.1 lacks an NVML entry point");
		goto out;
	}
	if ((nv = init()) != 0) {
		/* A driver library without a working GPU: no devices. */
		goto out;
	}
	if ((nv = count(&n)) != 0) {
		rc = kn_errorf(err, KN_EIO, NULL,
			       "nvmlDeviceGetCount failed (NVML error %d)", nv);
		goto shut;
	}
	if (n > KN_MAX_DEVICES)
		n = KN_MAX_DEVICES;
	devs = kn_xcalloc(n ? n : 1, sizeof(*devs));
	for (unsigned int i = 0; i < n; i++) {
		void *h;
		char name[96] = "";
		struct nvml_memory mem = {0, 0, 0};

		if ((nv = handle(i, &h)) != 0 ||
		    (nv = get_name(h, name, sizeof(name))) != 0 ||
		    (nv = get_uuid(h, devs[i].uuid, sizeof(devs[i].uuid))) != 0 ||
		    (nv = get_memory(h, &mem)) != 0) {
			rc = kn_errorf(err, KN_EIO, NULL,
				       "NVML device %u: error %d", i, nv);
			goto shut;
		}
		devs[i].index = (int)i;
		devs[i].memory_bytes = (int64_t)mem.total;
		kn_device_model_name(name, devs[i].memory_bytes,
				     devs[i].model, sizeof(devs[i].model));
	}
	out->devices = devs;
	out->n = n;
	kn_strlcpy(out->source, "nvml", sizeof(out->source));
	devs = NULL;
shut:
	shutdown();
out:
	free(devs);
	dlclose(lib);
	return rc;
}

char **kn_device_nodes(const char *dir, const int *indexes, int n)
{
	/* Every CUDA process opens these besides its GPUs' own nodes. */
	static const char *const control[] = {"nvidiactl", "nvidia-uvm",
					      "nvidia-uvm-tools",
					      "nvidia-modeset"};
	/* The control nodes, a MIG instance's two and the end. */
	size_t cap = (size_t)(n > 0 ? n : 0) + 7, k = 0;
	char **nodes = kn_xcalloc(cap, sizeof(char *));

	if (n <= 0)
		return nodes;
	for (int i = 0; i < n; i++)
		nodes[k++] = kn_asprintf("%s/nvidia%d", dir, indexes[i]);
	for (size_t i = 0; i < sizeof(control) / sizeof(control[0]); i++) {
		char *path = kn_asprintf("%s/%s", dir, control[i]);
		if (access(path, F_OK) == 0)
			nodes[k++] = path;
		else
			free(path);
	}
	return nodes;
}

/* The minor of capability name in the mig-minors text, or -1. */
static int mig_minor(const char *minors, const char *file, const char *name,
		     int *minor, struct kn_error *err)
{
	const char *line = minors;
	size_t len = strlen(name);

	for (int n = 1; line && *line; n++) {
		const char *end = strchr(line, '\n');
		char *after;
		long v;

		if (!strncmp(line, name, len) && line[len] == ' ') {
			errno = 0;
			v = strtol(line + len + 1, &after, 10);
			if (errno || after == line + len + 1 || v < 0 ||
			    v > 1048575 || (*after != '\n' && *after != '\0'))
				return kn_errorf(err, KN_EINVAL, "mig",
						 "%s:%d: the minor of %s is not "
						 "a number",
						 file, n, name);
			*minor = (int)v;
			return 0;
		}
		line = end ? end + 1 : NULL;
	}
	return kn_errorf(err, KN_EINVAL, "mig",
			 "no minor for %s in %s: the driver does not know "
			 "this MIG instance",
			 name, file);
}

int kn_device_mig_nodes(char **nodes, const char *caps_dir,
			const char *minors, const char *file, int gpu, int gi,
			int ci, struct kn_error *err)
{
	char gi_name[64], ci_name[80];
	int gi_minor, ci_minor, rc;
	size_t k = 0;

	snprintf(gi_name, sizeof(gi_name), "gpu%d/gi%d/access", gpu, gi);
	snprintf(ci_name, sizeof(ci_name), "gpu%d/gi%d/ci%d/access", gpu, gi,
		 ci);
	if ((rc = mig_minor(minors, file, gi_name, &gi_minor, err)) < 0 ||
	    (rc = mig_minor(minors, file, ci_name, &ci_minor, err)) < 0)
		return rc;
	while (nodes[k])
		k++;
	nodes[k++] = kn_asprintf("%s/nvidia-cap%d", caps_dir, gi_minor);
	nodes[k] = kn_asprintf("%s/nvidia-cap%d", caps_dir, ci_minor);
	return 0;
}

