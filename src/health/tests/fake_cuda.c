/*
 * A stand-in for libcudart and libcublas together, for the GPU
 * performance checks' tests: $KILN_CUDART_LIBRARY and $KILN_CUBLAS_LIBRARY
 * both name it, so the checks run their real dlopen path.
 *
 * $KILN_FAKE_CUDA holds JSON: {"devices": [{"name", "memory" (bytes),
 * "cc" (compute capability major), "copy_ms" (each device-to-device
 * copy), "gemm_ms" (each GEMM)}]}. A simulated clock advances by copy_ms
 * or gemm_ms per operation and events read it, so the elapsed times, and
 * with the sizes used the measured figures, are the ones scripted. No
 * device memory exists: allocations are tokens and nothing is copied.
 * Arguments are checked against what cuda_runtime_api.h and cublas_api.h
 * allow, so a wrong constant fails as it would on a GPU. Unset or bad
 * JSON, or no devices: cudaGetDeviceCount answers cudaErrorNoDevice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define API __attribute__((visibility("default")))

enum {
	OK = 0,
	ERR_INVALID_VALUE = 1,
	ERR_MEMORY_ALLOCATION = 2,
	ERR_INVALID_MEMCPY_DIRECTION = 21,
	ERR_NO_DEVICE = 100,
	ERR_INVALID_DEVICE = 101,
	BLAS_INVALID_VALUE = 7,
	BLAS_NOT_SUPPORTED = 15,
};

static json_t *answers;
static int current;
static double clock_ms;

/* CUDA has no shutdown call: the answers go when the library unloads. */
__attribute__((destructor)) static void release_answers(void)
{
	json_decref(answers);
	answers = NULL;
}

static json_t *devices(void)
{
	return json_object_get(answers, "devices");
}

static json_t *device(int i)
{
	return json_array_get(devices(), (size_t)i);
}

static double number(int dev, const char *key)
{
	return json_number_value(json_object_get(device(dev), key));
}

API const char *cudaGetErrorString(int code)
{
	static char text[64];

	snprintf(text, sizeof(text), "fake CUDA error %d", code);
	return text;
}

/* The first call a user makes; the answers are read afresh, since a test
   process may change them between runs while this library stays loaded. */
API int cudaGetDeviceCount(int *count)
{
	const char *text = getenv("KILN_FAKE_CUDA");

	json_decref(answers);
	answers = text ? json_loads(text, 0, NULL) : NULL;
	*count = (int)json_array_size(devices());
	return *count ? OK : ERR_NO_DEVICE;
}

API int cudaSetDevice(int dev)
{
	if (!device(dev))
		return ERR_INVALID_DEVICE;
	current = dev;
	return OK;
}

API int cudaGetDeviceProperties_v2(void *prop, int dev)
{
	const char *name = json_string_value(json_object_get(device(dev),
							     "name"));
	if (!name)
		return ERR_INVALID_DEVICE;
	memset(prop, 0, 256);
	strncpy(prop, name, 255);
	return OK;
}

API int cudaDeviceGetAttribute(int *value, int attr, int dev)
{
	if (!device(dev))
		return ERR_INVALID_DEVICE;
	if (attr != 75) /* cudaDevAttrComputeCapabilityMajor */
		return ERR_INVALID_VALUE;
	*value = (int)number(dev, "cc");
	return OK;
}

API int cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	*free_bytes = *total = (size_t)number(current, "memory");
	return OK;
}

API int cudaMalloc(void **p, size_t size)
{
	if (size == 0 || size > (size_t)number(current, "memory"))
		return ERR_MEMORY_ALLOCATION;
	*p = malloc(1);
	return OK;
}

API int cudaFree(void *p)
{
	free(p);
	return OK;
}

API int cudaMemcpy(void *dst, const void *src, size_t count, int kind)
{
	if (!dst || !src || count == 0)
		return ERR_INVALID_VALUE;
	if (kind == 3) /* cudaMemcpyDeviceToDevice */
		clock_ms += number(current, "copy_ms");
	else if (kind != 1) /* cudaMemcpyHostToDevice: instant here */
		return ERR_INVALID_MEMCPY_DIRECTION;
	return OK;
}

API int cudaEventCreate(void **event)
{
	*event = calloc(1, sizeof(double));
	return OK;
}

API int cudaEventRecord(void *event, void *stream)
{
	if (!event || stream)
		return ERR_INVALID_VALUE;
	*(double *)event = clock_ms;
	return OK;
}

API int cudaEventSynchronize(void *event)
{
	return event ? OK : ERR_INVALID_VALUE;
}

API int cudaEventElapsedTime(float *ms, void *start, void *end)
{
	*ms = (float)(*(double *)end - *(double *)start);
	return OK;
}

API int cudaEventDestroy(void *event)
{
	free(event);
	return OK;
}

API int cudaDeviceSynchronize(void)
{
	return OK;
}

API int cublasCreate_v2(void **handle)
{
	*handle = malloc(1);
	return OK;
}

API int cublasDestroy_v2(void *handle)
{
	free(handle);
	return OK;
}

API int cublasGemmEx(void *handle, int transa, int transb, int m, int n,
		     int k, const void *alpha, const void *a, int atype,
		     int lda, const void *b, int btype, int ldb,
		     const void *beta, void *c, int ctype, int ldc,
		     int compute, int algo)
{
	if (!handle || !alpha || !beta || !a || !b || !c || transa != 0 ||
	    transb != 0 || m <= 0 || n <= 0 || k <= 0 || lda < m ||
	    ldb < k || ldc < m || atype != btype || btype != ctype ||
	    (atype != 14 && atype != 2) || /* CUDA_R_16BF, CUDA_R_16F */
	    compute != 68 || algo != -1)   /* CUBLAS_COMPUTE_32F, DEFAULT */
		return BLAS_INVALID_VALUE;
	if (atype == 14 && number(current, "cc") < 8)
		return BLAS_NOT_SUPPORTED; /* no bf16 before Ampere */
	clock_ms += number(current, "gemm_ms");
	return OK;
}
