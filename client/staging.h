/* staging.h: a new store built beside its path and renamed onto it.
 *
 * `zrecord import` and `zrecord convert` make a new store at PATH. Whatever stops
 * them (an error, Ctrl-C, a kill), PATH shows all of it or none of it: the store is
 * built in PARENT/.NAME.partial-XXXXXX/NAME and renamed onto PATH once it is
 * complete and synced (then PARENT is fsynced). The .partial directory is locked
 * (flock) while a command uses it; one left by a process that died is removed by
 * the next command that stages the same PATH. The Python client's conversions do
 * the same (python-client/loaderx/_conversion.py; docs/DATASETS.md, "Conversions:
 * all or nothing").
 *
 * PATH may be missing (its parent must exist) or an empty directory, which the
 * store replaces and whose mode and group it takes. Anything else at PATH, an
 * empty directory that is a mount point, or a parent the user may not write:
 * the store is made at PATH itself (staging->path == PATH; the daemon then
 * refuses a directory that is not empty, as before).
 *
 * Functions return 0 or a negative errno, with a message in err; they never
 * print.
 */
#ifndef ZRECORD_STAGING_H
#define ZRECORD_STAGING_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct tool_staging {
        char target[PATH_MAX];  /* PATH as given */
        char root[PATH_MAX];    /* the .partial directory, "" when in place */
        char path[PATH_MAX];    /* where to create the store */
        int lockfd;             /* root, open and locked; -1 */
        bool clear;             /* in place in an empty directory: empty it on abort */
} tool_staging;

/* Sweeps what dead commands left for target, then makes the .partial directory
 * (or decides for in place). On success s->path is where to create the store. */
int staging_begin(tool_staging *s, const char *target, char *err, size_t size);

/* Makes the store at s->path the store at target (rename, fsync of the parent)
 * and removes the .partial directory; in place, nothing to do. */
int staging_commit(tool_staging *s, char *err, size_t size);

/* Removes what was staged (retrying while the daemon may still write in it); in
 * place, what was made in the empty directory. True when nothing is left
 * behind; else s->root still names what is. Safe after a failed begin and
 * twice. */
bool staging_abort(tool_staging *s);

#endif
