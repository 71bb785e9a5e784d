#include "step/backend.h"

#include "base/error.h"

#include <stdio.h>
#include <string.h>

const backend_ops *backend_find(const char *name) {
    if (!strcmp(name, "cpu")) return &cpu_backend_ops;
#ifdef GPTOSS_HAVE_CUDA
    if (!strcmp(name, "cuda")) return &cuda_backend_ops;
#endif
    return NULL;
}

int backend_nodes_comm_id(const char *addr, int port, char *buf, size_t n) {
    if (!addr || !*addr) return err_set("--master-addr: empty (node 0's address is needed)");
    if (port < 1 || port > 65535) return err_set("--master-port %d: expected 1 to 65535", port);
    if (strpbrk(addr, " \t\r\n"))
        return err_set("--master-addr '%s': an address or host name has no spaces", addr);
    /* One colon: an IPv4 address or host name with a port; more: IPv6, bracketed for NCCL. */
    const char *colon = strchr(addr, ':');
    const bool v6 = colon && strchr(colon + 1, ':'), bracketed = addr[0] == '[';
    if ((colon && !v6 && !bracketed) || (bracketed && addr[strlen(addr) - 1] != ']'))
        return err_set("--master-addr %s: give the address alone and the port with --master-port",
                       addr);
    const int w = v6 && !bracketed ? snprintf(buf, n, "[%s]:%d", addr, port)
                                   : snprintf(buf, n, "%s:%d", addr, port);
    if (w < 0 || (size_t)w >= n) return err_set("--master-addr %s: too long", addr);
    return 0;
}
