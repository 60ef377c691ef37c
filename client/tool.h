/* tool.h: what the modules of the zrecord tool share: reporting failures with
 * the right exit code, connecting, opening the dataset of the command line,
 * printing a schema, and the commands that live in modules of their own.
 * Every function returning an int returns an exit code of cmdline.h.
 */
#ifndef ZRECORD_TOOL_H
#define ZRECORD_TOOL_H

#include "cmdline.h"
#include "output.h"
#include "zrc.h"

/* Prints the last failure of c ("zrecord: WHAT: NAME: message") on stderr and
 * returns ZRECORD_EXIT_FAILED. */
int tool_fail_conn(const zrc_conn *c, const char *what);

/* Prints "zrecord: " and the message on stderr; returns ZRECORD_EXIT_FAILED. */
int tool_fail_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Connects to the daemon of cl (--socket, else the defaults). Returns 0 and
 * sets *ret, or prints why and returns ZRECORD_EXIT_CONNECT (no daemon) or
 * ZRECORD_EXIT_FAILED (a daemon that fails the handshake). */
int tool_connect(const cmdline *cl, zrc_conn **ret);

/* Opens cl->path; returns 0, or prints the failure and returns 1. */
int tool_open_dataset(const cmdline *cl, zrc_conn *c, unsigned flags, const char *what,
                      zrc_dataset **ret);

/* Prints a schema's JSON members ("kind": ..., "codec": ...) without braces. */
void tool_print_schema_json(const zrc_schema *s);

/* True unless path is a directory without a meta.zr (a multi-stream set, or
 * nothing: the open then says what is wrong). */
bool tool_is_store_dir(const char *path);

/* cat.c: prints records; and a record's values, by dtype (as text: each
 * preceded by a space) or as hex, in JSON a "values": [...] or "hex": "..."
 * member. */
int tool_cmd_cat(const cmdline *cl, zrc_conn *c);
void tool_print_values(const out_dtype *dt, const uint8_t *p, uint64_t len, bool json, bool hex);

/* where.c: which steps read a record (`where`), and the records of a step
 * (`batch`), of a dataset, a set or a mixture. */
int tool_cmd_where(const cmdline *cl, zrc_conn *c);
int tool_cmd_batch(const cmdline *cl, zrc_conn *c);

/* import.c: checks the .npy file, then connects and imports it. */
int tool_cmd_import(const cmdline *cl);

/* push.c: a store or set to object storage and back; no daemon needed. */
int tool_cmd_push(const cmdline *cl);
int tool_cmd_pull(const cmdline *cl);

/* top.c: the loaders, live (or -n frames of text or JSON). */
int tool_cmd_top(const cmdline *cl, zrc_conn *c);

/* `zrecord import --from FORMAT ...` (import-from.c): whether argv asks for it,
 * and running it (the process becomes the Python converter; returns only on a
 * failure to start it, ZRECORD_EXIT_FAILED). */
int tool_import_from_wanted(int argc, char **argv);
int tool_import_from(int argc, char **argv);

#endif
