/* "synthetic:NAME" for backends that read checkpoints from disk (the CPU backend, and the tiny model
 * on any backend): the folder $(cache)/models/synthetic-NAME-seed0, written once and shared by `gptoss
 * serve`, `generate` and `bench sweep`. Several processes may start at once (parallel tests): each
 * writes into a private folder and renames it into place; whoever loses the race discards its copy. */
#include "model/synthetic.h"

#include "base/files.h"
#include "base/log.h"
#include "base/xalloc.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A checkpoint folder holds plain files only. */
static void remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = path_join(dir, e->d_name);
        unlink(p);
        free(p);
    }
    closedir(d);
    rmdir(dir);
}

char *synthetic_resolve(const char *model, const char *backend) {
    const char *preset = model + 10;
    if (strncmp(model, "synthetic:", 10) != 0 || (strcmp(backend, "cpu") && strcmp(preset, "tiny")))
        return xstrdup(model);
    model_config c;
    if (config_preset(preset, &c) != 0) return NULL;
    char *cache = cache_dir(), *models = path_join(cache, "models");
    char name[128];
    snprintf(name, sizeof name, "synthetic-%s-seed0", preset);
    char *dir = path_join(models, name), *cfg = path_join(dir, "config.json");
    const int have = file_exists(cfg);
    free(cfg), free(cache);
    if (!have) {
        char *tmp = xasprintf("%s.tmp.%ld", dir, (long)getpid());
        log_info("writing the synthetic model '%s' into %s", preset, dir);
        remove_flat_dir(tmp);
        if (dir_make_p(models) != 0 || synthetic_write(&c, tmp, 0, 1) != 0) {
            remove_flat_dir(tmp);
            free(tmp), free(models), free(dir);
            return NULL;
        }
        if (rename(tmp, dir) != 0) remove_flat_dir(tmp); /* another process got there first */
        free(tmp);
    }
    free(models);
    return dir;
}
