#include "backend/backend.h"

#include <string.h>

const backend_ops *backend_find(const char *name) {
    if (!strcmp(name, "cpu")) return &cpu_backend_ops;
    return NULL;
}
