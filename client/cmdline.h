/* cmdline.h: the command line of the zrecord tool, parsed into a struct.
 *
 *     zrecord [--socket PATH] [--json] COMMAND [OPTIONS] ARGS
 *
 * Global options may stand before or after the command. Parsing touches
 * nothing outside the struct: it neither prints nor exits, so tests drive it
 * with argument vectors and the tool decides what a usage error costs (exit 2).
 */
#ifndef ZRECORD_CMDLINE_H
#define ZRECORD_CMDLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zrc.h"

/* Exit codes of zrecord, which scripts rely on (documented in --help and
 * client/README.md). */
enum {
        ZRECORD_EXIT_OK = 0,       /* success */
        ZRECORD_EXIT_FAILED = 1,   /* the operation failed (daemon or input error) */
        ZRECORD_EXIT_USAGE = 2,    /* bad command line */
        ZRECORD_EXIT_CONNECT = 3,  /* no daemon answers, or its socket was refused */
};

typedef enum cmd_kind {
        CMD_NONE = 0,   /* no command: --help or --version alone, or an error */
        CMD_STATUS,
        CMD_INFO,
        CMD_STATS,
        CMD_VERIFY,
        CMD_COMPACT,
        CMD_IMPORT,
        CMD_CAT,
        CMD_CONVERT,
        CMD_WHERE,
        CMD_BATCH,
        CMD_TOP,
        CMD_METRICS,
        CMD_PUSH,
        CMD_PULL,
        _CMD_MAX,
} cmd_kind;

/* Sources of a mixture on the command line (PROTOCOL.md: at most 256). */
#define CMDLINE_SOURCES_MAX 256

/* Default records per APPEND of `import`: chosen from the record size so that
 * each append moves about this many bytes (bounded memory, few requests). */
#define CMDLINE_IMPORT_CHUNK_BYTES (UINT64_C(8) << 20)

typedef struct cmdline {
        cmd_kind cmd;
        bool help;              /* --help / -h (for cmd, or global if CMD_NONE) */
        bool version;           /* --version */
        bool json;              /* --json */
        const char *socket;     /* --socket PATH, or NULL */
        const char *path;       /* the dataset PATH */
        const char *npy;        /* import: FILE.npy */
        const char *dst;        /* convert: DST; push, pull: where to */
        zrc_layout to;          /* convert: --to zrecord|loaderx157 */
        zrc_codec codec;        /* import: --codec (default raw) */
        uint64_t chunk;         /* import: --chunk N records per append (0: auto) */
        const char *dict_tier;  /* import: --dict-tier (default "balanced") */
        uint32_t level;         /* import: --level N, 1..19 (0: the codec's default) */
        bool hex;               /* cat: --hex */
        bool has_range;         /* cat: --range A:B */
        uint64_t range_start;
        uint64_t range_end;     /* exclusive; UINT64_MAX: to the end */
        uint64_t *indices;      /* cat: INDEX... (malloc()ed, owned by the struct) */
        size_t n_indices;
        /* where, batch: the run, as its DataLoader was opened */
        const char *sampler;    /* --sampler S */
        uint64_t seed;          /* --seed N */
        uint64_t batch;         /* --batch B */
        uint64_t world_size;    /* --world-size W (default 1) */
        uint64_t rank;          /* batch: --rank R (default 0) */
        uint64_t step;          /* batch: --step K */
        bool values;            /* batch: --values */
        uint64_t record;        /* where: RECORD (INDEX, or SOURCE:INDEX of a mixture) */
        uint32_t record_source;
        /* a mixture, in place of PATH: --source WEIGHT[,SAMPLER]=PATH, in order */
        size_t n_sources;
        struct cmdline_source {
                uint32_t weight;
                const char *sampler; /* NULL: --sampler's */
                const char *path;
        } sources[CMDLINE_SOURCES_MAX];
        uint64_t parallel;      /* push, pull: --parallel N requests in flight */
        uint64_t iterations;    /* top: -n N frames, then exit (0: until q) */
        uint64_t delay_ms;      /* top: -d SECONDS between frames (default 2 s) */
        const char *sort;       /* top: --sort KEY (NULL: wait) */
        char error[256];        /* a usage error's message */
} cmdline;

/* Parses argv[1..argc). Returns 0 and fills *ret, or -EINVAL (a usage error,
 * message in ret->error) or -ENOMEM. Pointers in *ret point into argv. Free
 * with cmdline_done() in either case. */
int cmdline_parse(int argc, char *const *argv, cmdline *ret);

/* Frees what cmdline_parse() allocated. */
void cmdline_done(cmdline *c);

/* The command's name ("import"), or NULL for CMD_NONE. */
const char *cmdline_cmd_name(cmd_kind cmd);

/* The --help text of a command (CMD_NONE: the tool's); a static string. */
const char *cmdline_help(cmd_kind cmd);

/* Parses "A:B", "A:", ":B" or ":" (B exclusive; a missing B is UINT64_MAX).
 * Returns 0 or -EINVAL. */
int cmdline_parse_range(const char *s, uint64_t *ret_start, uint64_t *ret_end);

/* Parses a decimal u64 (no sign, no suffix). Returns 0 or -EINVAL. */
int cmdline_parse_u64(const char *s, uint64_t *ret);

/* Parses a mixture's source, "WEIGHT=PATH" or "WEIGHT,SAMPLER=PATH" (WEIGHT
 * 1..2^32-1; the path is everything after the first '=', so it may hold any
 * character). Returns 0 or -EINVAL. */
int cmdline_parse_source(const char *s, struct cmdline_source *ret);
/* Parses seconds with up to three decimals ("2", "0.5") into ms, at least 1
 * and at most a day. Returns 0 or -EINVAL. */
int cmdline_parse_seconds(const char *s, uint64_t *ret_ms);

#endif
