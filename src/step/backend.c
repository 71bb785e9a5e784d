#include "step/backend.h"

#include <string.h>

const backend_ops *backend_find(const char *name) {
    if (!strcmp(name, "cpu")) return &cpu_backend_ops;
#ifdef GPTOSS_HAVE_CUDA
    if (!strcmp(name, "cuda")) return &cuda_backend_ops;
#endif
    return NULL;
}
