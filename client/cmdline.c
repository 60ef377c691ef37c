/* cmdline.c: parsing zrecord's command line, and its help texts.
 *
 * Hand-written rather than getopt_long() because global options may follow
 * the command, each command accepts only its own options, and tests call the
 * parser many times in one process (getopt keeps global state). "--" ends the
 * options; "--opt=value" and "--opt value" are both accepted.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmdline.h"

/* A PATH that names a store in object storage (s3/url.h checks it in full). */
static int s3_url_like(const char *p) {
        return strncmp(p, "s3://", 5) == 0;
}

static const char *const cmd_names[_CMD_MAX] = {
        [CMD_STATUS] = "status",
        [CMD_INFO] = "info",
        [CMD_STATS] = "stats",
        [CMD_VERIFY] = "verify",
        [CMD_COMPACT] = "compact",
        [CMD_IMPORT] = "import",
        [CMD_CAT] = "cat",
        [CMD_TOP] = "top",
        [CMD_METRICS] = "metrics",
        [CMD_CONVERT] = "convert",
        [CMD_WHERE] = "where",
        [CMD_BATCH] = "batch",
        [CMD_PUSH] = "push",
        [CMD_PULL] = "pull",
};

#define EXIT_CODES_HELP                                                          \
        "Exit status:\n"                                                         \
        "  0  success\n"                                                         \
        "  1  the operation failed (a daemon error, named on stderr; bad input;\n" \
        "     verify found bad records)\n"                                       \
        "  2  usage error\n"                                                     \
        "  3  cannot connect to the daemon\n"

#define GLOBAL_OPTIONS_HELP                                                      \
        "Global options (before or after the command):\n"                        \
        "  --socket PATH  the daemon's socket (default: $ZRECORD_SOCKET, else\n" \
        "                 $XDG_RUNTIME_DIR/zrecord/zrecordd.sock,\n"             \
        "                 /run/zrecord/zrecordd.sock,\n"                         \
        "                 /tmp/zrecord-UID/zrecordd.sock)\n"                     \
        "  --json         machine-readable output on stdout\n"                   \
        "  -h, --help     show help (of a command: zrecord COMMAND --help)\n"

static const char *const help_texts[_CMD_MAX] = {
        [CMD_NONE] =
                "Usage: zrecord [--socket PATH] [--json] COMMAND [ARGS]\n"
                "\n"
                "Talks to zrecordd, the zrecord data-serving daemon.\n"
                "\n"
                "Commands:\n"
                "  status                 the daemon's clients, loaders, cache and counters\n"
                "  info PATH              a dataset's length and schema (or a set's streams)\n"
                "  stats PATH             a store's space: records, live and reclaimable bytes\n"
                "  verify PATH            read and decode every record\n"
                "  compact PATH           reclaim the space of deleted records\n"
                "  import FILE.npy PATH   a .npy array into a new dense dataset\n"
                "  cat PATH [INDEX...|--range A:B] [--hex]\n"
                "                         print records as numbers (or hex)\n"
                "  top [-n N] [-d SEC] [--sort KEY]\n"
                "                         the loaders, live: who waits for data and why\n"
                "  metrics                the daemon's metrics, Prometheus text format\n"
                "  convert --to zrecord|loaderx157 SRC DST\n"
                "                         a ragged dataset into the other layout\n"
                "  where PATH RECORD --sampler S --seed N --batch B\n"
                "                         the steps, ranks and positions that read RECORD\n"
                "  batch PATH --step K --sampler S --seed N --batch B\n"
                "                         the records of the batch of step K\n"
                "  push PATH s3://BUCKET/PREFIX\n"
                "                         upload a store or set (read-only from then on)\n"
                "  pull s3://BUCKET/PREFIX PATH\n"
                "                         download a store or set into a local directory\n"
                "\n"
                "PATH may also be an s3:// URL for info, verify, cat, where and batch\n"
                "(docs/REMOTE.md: endpoint, region and credentials as the AWS tools take them).\n"
                "\n" GLOBAL_OPTIONS_HELP "  --version      show the version\n"
                "\n" EXIT_CODES_HELP,
        [CMD_STATUS] =
                "Usage: zrecord status [--json]\n"
                "\n"
                "Shows the daemon's state: connected clients, open handles, shared memory,\n"
                "loaders, batches and gathers, the decoded-record cache, and per loader its\n"
                "sampler, step and counters.\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_INFO] =
                "Usage: zrecord info PATH [--json]\n"
                "\n"
                "Shows the dataset in directory PATH: length, kind, dtype, item shape (dense)\n"
                "or ndim (ragged), codec and whether a dictionary is installed. If PATH is a\n"
                "multi-stream set (children holding stores), shows every stream.\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_STATS] =
                "Usage: zrecord stats PATH [--json]\n"
                "\n"
                "Shows the store's space accounting: records, live bytes, bytes up to the\n"
                "write frontier, reclaimable bytes (what compact frees), decoded bytes.\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_VERIFY] =
                "Usage: zrecord verify PATH [--json]\n"
                "\n"
                "Reads and decodes every record and checks every table entry. Exits 1 if\n"
                "any record is bad, listing the first bad indices.\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_COMPACT] =
                "Usage: zrecord compact PATH [--json]\n"
                "\n"
                "Reclaims the bytes of deleted records in place (needs write access to the\n"
                "store) and shows the stats after compaction.\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_IMPORT] =
                "Usage: zrecord import FILE.npy PATH [--codec raw|zstd|zstd_dict]\n"
                "                      [--level N] [--chunk N] [--dict-tier TIER] [--json]\n"
                "       zrecord import --from parquet|arrow|webdataset|megatron SRC... PATH\n"
                "                      [--column NAME] [--key EXT] [--codec raw|zstd]\n"
                "                      [--skip-empty]\n"
                "\n"
                "With --from, the corpus SRC (Parquet files, Arrow IPC files, WebDataset\n"
                "tars, or a Megatron-LM PREFIX of PREFIX.bin and PREFIX.idx) becomes a new\n"
                "store at PATH through the Python client's converters (loaderx.utils:\n"
                "from_parquet, from_arrow, from_webdataset, from_megatron), which the tool\n"
                "runs with python3 ($ZRECORD_PYTHON): --column names the Parquet or Arrow\n"
                "column, --key the WebDataset members' extension. docs/TOKENS.md.\n"
                "\n"
                "Without --from:\n"
                "Creates a dense dataset in directory PATH (made if missing; must be empty)\n"
                "from a .npy file (format 1.0, 2.0 or 3.0, C order, a plain number dtype):\n"
                "record i is the array's row i, so the item shape is shape[1:]. The data is\n"
                "streamed in appends of N records (default: about 8 MiB each), with a\n"
                "progress line on a terminal. All or nothing: the dataset is built beside\n"
                "PATH and renamed onto it once complete, so a failure, Ctrl-C or a kill\n"
                "leaves PATH as it was (a kill leaves a .PATH.partial-* directory beside it,\n"
                "which the next import or convert into PATH removes).\n"
                "\n"
                "  --codec C       zstd (default, as from_numpy), raw, or zstd_dict (a\n"
                "                  dictionary is trained by the daemon on a sample of the\n"
                "                  file's records)\n"
                "  --level N       zstd, zstd_dict: the compression level, 1 to 19 in zstd's\n"
                "                  scale (default 3 for both: as fast as zstd's default,\n"
                "                  docs/DATASETS.md \"Levels\"); higher is smaller and slower\n"
                "  --chunk N       records per append\n"
                "  --dict-tier T   zstd_dict: the dictionary tier (default balanced)\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_TOP] =
                "Usage: zrecord top [-n N] [-d SECONDS] [--sort KEY] [--json]\n"
                "\n"
                "Shows the daemon's loaders, one row each, refreshed every 2 s: the client's\n"
                "pid, user and command, the dataset, the step, batches/s, the share of time\n"
                "the consumer waits for batches (WAIT%), the verdict (data-bound,\n"
                "consumer-bound, balanced, idle, unknown), the stage that takes most of the\n"
                "loader's time (io, decode, copy, contention), the cache hit ratio and MiB/s.\n"
                "A user sees its own loaders; root and the daemon's user see all.\n"
                "\n"
                "  -n N          N frames, then exit; on no terminal, or with -n, plain text\n"
                "                (default: until q; one frame when not on a terminal)\n"
                "  -d SECONDS    between frames (default 2)\n"
                "  --sort KEY    pid, user, command, dataset, step, rate, wait (default),\n"
                "                verdict, hit, mib\n"
                "  --json        one JSON object per frame (one frame unless -n)\n"
                "\n"
                "Keys: q quit; < > move the sort column; R reverse the order; W wait%,\n"
                "B batches/s, P pid, M MiB/s, H hit%, S step, U user; w cycles the window of\n"
                "the rates (1 s, 10 s, 60 s); space refreshes now.\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_METRICS] =
                "Usage: zrecord metrics\n"
                "\n"
                "Prints the daemon's metrics in the Prometheus text format: daemon-wide\n"
                "totals and, for each loader the caller may see, its counters, rates,\n"
                "verdict and histograms, labelled pid, uid, loader and dataset.\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_CAT] =
                "Usage: zrecord cat PATH [INDEX...|--range A:B] [--hex] [--json]\n"
                "\n"
                "Prints records: all of them, the INDEX arguments, or indices A to B-1\n"
                "(A or B may be left out: \"10:\", \":5\"). Values are printed by the\n"
                "dataset's dtype, flattened in C order, or as hex bytes with --hex.\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_PUSH] =
                "Usage: zrecord push PATH s3://BUCKET/PREFIX [--parallel N] [--json]\n"
                "\n"
                "Uploads the store (or multi-stream set) in directory PATH under PREFIX: its\n"
                "files without their sparse tails, a checksum of every record, and last a\n"
                "manifest that makes it openable. Objects already there with the same\n"
                "content are skipped, so a push that was cut off resumes, and a push of a\n"
                "store that grew uploads what changed. The store must not be written\n"
                "meanwhile (its lock is shared while it is read). Progress goes to stderr.\n"
                "Endpoint, region and credentials: AWS_ENDPOINT_URL, AWS_REGION,\n"
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, AWS_PROFILE and\n"
                "~/.aws/config|credentials (docs/REMOTE.md).\n"
                "\n"
                "  --parallel N  requests in flight (default 16)\n"
                "\n" EXIT_CODES_HELP,
        [CMD_PULL] =
                "Usage: zrecord pull s3://BUCKET/PREFIX PATH [--parallel N] [--json]\n"
                "\n"
                "Downloads the store (or multi-stream set) under PREFIX into directory PATH\n"
                "(made if missing; empty, or a pull of the same push cut off, which\n"
                "resumes). Every record is checked against its checksum; meta.zr is\n"
                "written last, so PATH is a store only once it is whole.\n"
                "\n"
                "  --parallel N  requests in flight (default 16)\n"
                "\n" EXIT_CODES_HELP,
        [CMD_CONVERT] =
                "Usage: zrecord convert --to zrecord|loaderx157 SRC DST [--json]\n"
                "\n"
                "Writes the ragged dataset in directory SRC into a new dataset in DST (made\n"
                "if missing; must be empty) of the other layout: the same records in the\n"
                "same order, dtype, codec and dictionary. SRC does not change.\n"
                "\n"
                "  --to zrecord     zrecord's layout: each record carries its shape, so an\n"
                "                   append costs what its records do (from loaderx 1.5.7's\n"
                "                   ragged store, or its byte store)\n"
                "  --to loaderx157  loaderx 1.5.7's layout: the shapes in schema.msgpack,\n"
                "                   which loaderx 1.5.7 opens (no empty record)\n"
                "\n"
                "Prints the records converted. All or nothing, as import: DST is built\n"
                "beside it and renamed onto it once complete; Ctrl-C stops at once.\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_WHERE] =
                "Usage: zrecord where PATH RECORD --sampler S --seed N --batch B\n"
                "                     [--world-size W] [--range A:B] [--json]\n"
                "       zrecord where --source W[,S]=PATH... SOURCE:RECORD --sampler S ...\n"
                "\n"
                "Lists every step of steps A to B-1 whose batch read record RECORD of the\n"
                "dataset (or set) in PATH, with the rank of W and the record's position in\n"
                "that rank's batch, for a loader of that sampler, seed, batch size and world\n"
                "size. The daemon runs the sampler backwards: cyclic costs O(1) a cycle,\n"
                "sequential is arithmetic, iid scans every position of the range (a progress\n"
                "line on a terminal). The default range is the first pass over the data:\n"
                "steps 0 to ceil(length / (B x W)) - 1.\n"
                "\n"
                "A mixture is named by its sources instead of PATH, in the loader's order:\n"
                "--source WEIGHT=PATH, or WEIGHT,SAMPLER=PATH for a source of its own\n"
                "sampler (a dataset or a set of streams; WEIGHT an integer >= 1); RECORD is\n"
                "then SOURCE:INDEX, record INDEX of source SOURCE (0 is the first).\n"
                "\n"
                "  --sampler S     sequential, iid, cyclic or cyclic-lx157 (a mixture's default)\n"
                "  --seed N        the loader's seed\n"
                "  --batch B       records per rank per step\n"
                "  --world-size W  ranks (default 1)\n"
                "  --range A:B     the steps A to B-1 (\"A:\": to the sampler's end)\n"
                "  --source W[,S]=PATH  a source of a mixture (repeat, in order)\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
        [CMD_BATCH] =
                "Usage: zrecord batch PATH --step K --sampler S --seed N --batch B\n"
                "                     [--world-size W] [--rank R] [--values] [--json]\n"
                "       zrecord batch --source W[,S]=PATH... --step K --sampler S ...\n"
                "\n"
                "Prints the records of the batch of step K of rank R, as a loader over the\n"
                "dataset (or every stream of the set) in PATH with that sampler, seed,\n"
                "batch size and world size serves it: for each position, the record's\n"
                "index (and its source, for a mixture), and with --values each stream's\n"
                "values. For debugging a step: the daemon gathers the batch as it did in\n"
                "training. A mixture is named as for `where`; its sources hold the same\n"
                "streams.\n"
                "\n"
                "  --step K        the step\n"
                "  --rank R        the rank (default 0)\n"
                "  --values        the records' values too\n"
                "  (--sampler, --seed, --batch, --world-size, --source: as `where`)\n"
                "\n" GLOBAL_OPTIONS_HELP "\n" EXIT_CODES_HELP,
};

const char *cmdline_cmd_name(cmd_kind cmd) {
        return cmd > CMD_NONE && cmd < _CMD_MAX ? cmd_names[cmd] : NULL;
}

const char *cmdline_help(cmd_kind cmd) {
        return help_texts[cmd >= CMD_NONE && cmd < _CMD_MAX ? cmd : CMD_NONE];
}

__attribute__((format(printf, 2, 3)))
static int usage(cmdline *c, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(c->error, sizeof(c->error), fmt, ap);
        va_end(ap);
        return -EINVAL;
}

int cmdline_parse_u64(const char *s, uint64_t *ret) {
        unsigned long long v;
        char *end;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

int cmdline_parse_seconds(const char *s, uint64_t *ret_ms) {
        uint64_t whole = 0, ms = 0, scale = 100;
        const char *p = s;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++) {
                whole = whole * 10 + (uint64_t)(*p - '0');
                if (whole > 86400)
                        return -EINVAL;
        }
        if (*p == '.') {
                for (p++; *p >= '0' && *p <= '9'; p++) {
                        ms += (uint64_t)(*p - '0') * scale;
                        scale /= 10;
                        if (scale == 0 && p[1] >= '0' && p[1] <= '9')
                                return -EINVAL; /* more than three decimals */
                }
        }
        if (*p)
                return -EINVAL;
        ms += whole * 1000;
        if (ms < 1 || ms > 86400000)
                return -EINVAL;
        *ret_ms = ms;
        return 0;
}

int cmdline_parse_source(const char *s, struct cmdline_source *ret) {
        const char *eq = s ? strchr(s, '=') : NULL, *comma;
        char buf[32];
        uint64_t w;
        size_t n;

        if (!eq || !eq[1])
                return -EINVAL;
        comma = memchr(s, ',', (size_t)(eq - s));
        n = (size_t)((comma ? comma : eq) - s);
        if (n == 0 || n >= sizeof(buf))
                return -EINVAL;
        memcpy(buf, s, n);
        buf[n] = 0;
        if (cmdline_parse_u64(buf, &w) < 0 || w == 0 || w > UINT32_MAX)
                return -EINVAL;
        *ret = (struct cmdline_source){ .weight = (uint32_t)w, .path = eq + 1 };
        if (comma) {
                static const char *const samplers[] = { "sequential", "iid", "cyclic",
                                                        "cyclic-lx157" };
                n = (size_t)(eq - comma - 1);
                for (size_t i = 0; i < sizeof(samplers) / sizeof(samplers[0]); i++)
                        if (strlen(samplers[i]) == n && memcmp(samplers[i], comma + 1, n) == 0)
                                ret->sampler = samplers[i];
                if (!ret->sampler)
                        return -EINVAL;
        }
        return 0;
}

int cmdline_parse_range(const char *s, uint64_t *ret_start, uint64_t *ret_end) {
        const char *colon = s ? strchr(s, ':') : NULL;
        uint64_t a = 0, b = UINT64_MAX;
        char buf[32];

        if (!colon || strchr(colon + 1, ':'))
                return -EINVAL;
        if (colon > s) {
                if ((size_t)(colon - s) >= sizeof(buf))
                        return -EINVAL;
                memcpy(buf, s, (size_t)(colon - s));
                buf[colon - s] = 0;
                if (cmdline_parse_u64(buf, &a) < 0)
                        return -EINVAL;
        }
        if (colon[1] && cmdline_parse_u64(colon + 1, &b) < 0)
                return -EINVAL;
        if (b < a)
                return -EINVAL;
        *ret_start = a;
        *ret_end = b;
        return 0;
}

/* Matches "--name" or "--name=value"; sets *ret_value to the value (from the
 * "=" form or the next argument, advancing *i) when takes_value. */
static int match_opt(cmdline *c, int argc, char *const *argv, int *i, const char *name,
                     bool takes_value, const char **ret_value) {
        const char *a = argv[*i];
        size_t n = strlen(name);

        if (strncmp(a, name, n) != 0 || (a[n] != 0 && a[n] != '='))
                return 0;
        if (!takes_value) {
                if (a[n] == '=')
                        return usage(c, "option %s takes no value", name);
                return 1;
        }
        if (a[n] == '=') {
                *ret_value = a + n + 1;
                return 1;
        }
        if (*i + 1 >= argc)
                return usage(c, "option %s needs a value", name);
        *ret_value = argv[++*i];
        return 1;
}

void cmdline_done(cmdline *c) {
        free(c->indices);
        c->indices = NULL;
        c->n_indices = 0;
}

/* The options, each with whether it takes a value. */
enum opt_id { OPT_HELP, OPT_VERSION, OPT_JSON, OPT_SOCKET, OPT_CODEC, OPT_CHUNK, OPT_DICT_TIER, OPT_LEVEL,
              OPT_HEX, OPT_RANGE, OPT_TO, OPT_PARALLEL, OPT_SAMPLER, OPT_SEED, OPT_BATCH, OPT_WORLD_SIZE,
              OPT_RANK, OPT_STEP, OPT_VALUES, OPT_SOURCE, OPT_ITERATIONS, OPT_DELAY, OPT_SORT,
              _OPT_MAX };

/* top's sort keys (top.c knows what each sorts by). */
static const char *const sort_keys[] = { "pid", "user", "command", "dataset", "step", "rate",
                                         "wait", "verdict", "hit", "mib" };

static const struct {
        const char *name;
        bool takes_value;
} options[_OPT_MAX] = {
        [OPT_HELP] = { "--help", false },     [OPT_VERSION] = { "--version", false },
        [OPT_JSON] = { "--json", false },     [OPT_SOCKET] = { "--socket", true },
        [OPT_CODEC] = { "--codec", true },    [OPT_CHUNK] = { "--chunk", true },
        [OPT_DICT_TIER] = { "--dict-tier", true }, [OPT_HEX] = { "--hex", false },
        [OPT_LEVEL] = { "--level", true },
        [OPT_ITERATIONS] = { "--iterations", true }, [OPT_DELAY] = { "--delay", true },
        [OPT_SORT] = { "--sort", true },
        [OPT_RANGE] = { "--range", true },    [OPT_TO] = { "--to", true },
        [OPT_PARALLEL] = { "--parallel", true },
        [OPT_SAMPLER] = { "--sampler", true }, [OPT_SEED] = { "--seed", true },
        [OPT_BATCH] = { "--batch", true },    [OPT_WORLD_SIZE] = { "--world-size", true },
        [OPT_RANK] = { "--rank", true },      [OPT_STEP] = { "--step", true },
        [OPT_VALUES] = { "--values", false }, [OPT_SOURCE] = { "--source", true },
};

/* Applies option `id` with its value v (NULL if it takes none); seen[id]
 * records that it was given. */
static int apply_opt(cmdline *c, enum opt_id id, const char *v, bool *seen) {
        seen[id] = true;
        switch (id) {
        case OPT_HELP:
                c->help = true;
                break;
        case OPT_VERSION:
                c->version = true;
                break;
        case OPT_JSON:
                c->json = true;
                break;
        case OPT_SOCKET:
                if (!*v)
                        return usage(c, "--socket needs a path");
                c->socket = v;
                break;
        case OPT_CODEC:
                if (zrc_codec_parse(v, &c->codec) < 0)
                        return usage(c, "unknown codec \"%s\" (raw, zstd or zstd_dict)", v);
                break;
        case OPT_CHUNK:
                if (cmdline_parse_u64(v, &c->chunk) < 0 || c->chunk == 0)
                        return usage(c, "--chunk needs a positive number, not \"%s\"", v);
                break;
        case OPT_LEVEL: {
                uint64_t level;
                if (cmdline_parse_u64(v, &level) < 0 || level < 1 || level > 19)
                        return usage(c, "--level needs a level from 1 to 19 (zstd's scale), "
                                        "not \"%s\"", v);
                c->level = (uint32_t)level;
                break;
        }
        case OPT_DICT_TIER:
                if (!*v)
                        return usage(c, "--dict-tier needs a name");
                c->dict_tier = v;
                break;
        case OPT_HEX:
                c->hex = true;
                break;
        case OPT_RANGE:
                if (cmdline_parse_range(v, &c->range_start, &c->range_end) < 0)
                        return usage(c, "bad range \"%s\" (A:B, A:, :B)", v);
                c->has_range = true;
                break;
        case OPT_ITERATIONS:
                if (cmdline_parse_u64(v, &c->iterations) < 0 || c->iterations == 0)
                        return usage(c, "-n needs a positive number of frames, not \"%s\"", v);
                break;
        case OPT_DELAY:
                if (cmdline_parse_seconds(v, &c->delay_ms) < 0)
                        return usage(c, "-d needs seconds (0.001 to 86400), not \"%s\"", v);
                break;
        case OPT_SORT: {
                size_t k;
                for (k = 0; k < sizeof(sort_keys) / sizeof(sort_keys[0]); k++)
                        if (strcmp(v, sort_keys[k]) == 0)
                                break;
                if (k == sizeof(sort_keys) / sizeof(sort_keys[0]))
                        return usage(c, "unknown sort key \"%s\" (pid, user, command, dataset, "
                                     "step, rate, wait, verdict, hit, mib)", v);
                c->sort = v;
                break;
        }
        case OPT_PARALLEL:
                if (cmdline_parse_u64(v, &c->parallel) < 0 || c->parallel == 0 ||
                    c->parallel > 256)
                        return usage(c, "--parallel needs 1 to 256, not \"%s\"", v);
                break;
        case OPT_TO:
                if (strcmp(v, "zrecord") == 0)
                        c->to = ZRC_LAYOUT_ZRECORD;
                else if (strcmp(v, "loaderx157") == 0)
                        c->to = ZRC_LAYOUT_LX157;
                else
                        return usage(c, "--to takes zrecord or loaderx157, not \"%s\"", v);
                break;
        case OPT_SAMPLER:
                if (strcmp(v, "sequential") != 0 && strcmp(v, "iid") != 0 &&
                    strcmp(v, "cyclic") != 0 && strcmp(v, "cyclic-lx157") != 0)
                        return usage(c, "unknown sampler \"%s\" (sequential, iid, cyclic or "
                                     "cyclic-lx157)", v);
                c->sampler = v;
                break;
        case OPT_SEED:
                if (cmdline_parse_u64(v, &c->seed) < 0)
                        return usage(c, "--seed needs a number, not \"%s\"", v);
                break;
        case OPT_BATCH:
                if (cmdline_parse_u64(v, &c->batch) < 0 || c->batch == 0)
                        return usage(c, "--batch needs a positive number, not \"%s\"", v);
                break;
        case OPT_WORLD_SIZE:
                if (cmdline_parse_u64(v, &c->world_size) < 0 || c->world_size == 0 ||
                    c->world_size > UINT32_MAX)
                        return usage(c, "--world-size needs a number 1..2^32-1, not \"%s\"", v);
                break;
        case OPT_RANK:
                if (cmdline_parse_u64(v, &c->rank) < 0)
                        return usage(c, "--rank needs a number, not \"%s\"", v);
                break;
        case OPT_STEP:
                if (cmdline_parse_u64(v, &c->step) < 0)
                        return usage(c, "--step needs a number, not \"%s\"", v);
                break;
        case OPT_VALUES:
                c->values = true;
                break;
        case OPT_SOURCE:
                if (c->n_sources == CMDLINE_SOURCES_MAX)
                        return usage(c, "at most %d sources", CMDLINE_SOURCES_MAX);
                if (cmdline_parse_source(v, &c->sources[c->n_sources]) < 0)
                        return usage(c, "bad source \"%s\" (WEIGHT=PATH or WEIGHT,SAMPLER=PATH, "
                                     "WEIGHT 1..2^32-1)", v);
                c->n_sources++;
                break;
        default:
                break;
        }
        return 0;
}

/* Parses the option at argv[*i] (advancing *i past its value). */
static int parse_opt(cmdline *c, int argc, char *const *argv, int *i, bool *seen) {
        if (strcmp(argv[*i], "-h") == 0)
                return apply_opt(c, OPT_HELP, NULL, seen);
        /* top's short options, as top has them: -n N, -d SECONDS */
        if (strcmp(argv[*i], "-n") == 0 || strcmp(argv[*i], "-d") == 0) {
                enum opt_id id = argv[*i][1] == 'n' ? OPT_ITERATIONS : OPT_DELAY;
                if (*i + 1 >= argc)
                        return usage(c, "option %s needs a value", argv[*i]);
                return apply_opt(c, id, argv[++*i], seen);
        }
        for (int id = 0; id < _OPT_MAX; id++) {
                const char *v = NULL;
                int r = match_opt(c, argc, argv, i, options[id].name, options[id].takes_value,
                                  &v);
                if (r != 0)
                        return r < 0 ? r : apply_opt(c, (enum opt_id)id, v, seen);
        }
        return usage(c, "unknown option \"%s\"", argv[*i]);
}

int cmdline_parse(int argc, char *const *argv, cmdline *ret) {
        const char *positional[64];
        size_t n_pos = 0;
        bool opts_done = false, seen[_OPT_MAX] = { false };
        int r;

        /* import's codec: zstd, as from_numpy's (a store written either way is the same) */
        *ret = (cmdline){ .codec = ZRC_CODEC_ZSTD, .dict_tier = "balanced", .world_size = 1 };

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];

                if (opts_done || a[0] != '-' || a[1] == 0) {
                        if (ret->cmd == CMD_NONE && n_pos == 0) {
                                cmd_kind k;

                                for (k = CMD_STATUS; k < _CMD_MAX; k++)
                                        if (strcmp(a, cmd_names[k]) == 0)
                                                break;
                                if (k == _CMD_MAX)
                                        return usage(ret, "unknown command \"%s\"", a);
                                ret->cmd = k;
                                continue;
                        }
                        if (ret->cmd == CMD_CAT && n_pos >= 1) {
                                uint64_t *grown, idx;

                                if (cmdline_parse_u64(a, &idx) < 0)
                                        return usage(ret, "not an index: \"%s\"", a);
                                grown = realloc(ret->indices, (ret->n_indices + 1) * sizeof(*grown));
                                if (!grown)
                                        return -ENOMEM;
                                ret->indices = grown;
                                ret->indices[ret->n_indices++] = idx;
                                continue;
                        }
                        if (n_pos >= sizeof(positional) / sizeof(positional[0]))
                                return usage(ret, "too many arguments");
                        positional[n_pos++] = a;
                        continue;
                }
                if (strcmp(a, "--") == 0) {
                        opts_done = true;
                        continue;
                }
                r = parse_opt(ret, argc, argv, &i, seen);
                if (r < 0)
                        return r;
        }

        if (ret->help || ret->version)
                return 0; /* nothing else matters */
        if (ret->cmd == CMD_NONE)
                return usage(ret, "no command given");
        if ((seen[OPT_CODEC] || seen[OPT_CHUNK] || seen[OPT_DICT_TIER] || seen[OPT_LEVEL]) &&
            ret->cmd != CMD_IMPORT)
                return usage(ret, "--codec, --level, --chunk and --dict-tier are options of "
                                  "import");
        if (seen[OPT_LEVEL] && ret->codec == ZRC_CODEC_RAW)
                return usage(ret, "--level is for --codec zstd or zstd_dict: raw is not "
                                  "compressed");
        if (ret->hex && ret->cmd != CMD_CAT)
                return usage(ret, "--hex is an option of cat");
        if (ret->has_range && ret->cmd != CMD_CAT && ret->cmd != CMD_WHERE)
                return usage(ret, "--range is an option of cat and where");
        if (seen[OPT_PARALLEL] && ret->cmd != CMD_PUSH && ret->cmd != CMD_PULL)
                return usage(ret, "--parallel is an option of push and pull");
        if (seen[OPT_TO] != (ret->cmd == CMD_CONVERT))
                return usage(ret, seen[OPT_TO] ? "--to is an option of convert"
                                               : "convert needs --to zrecord|loaderx157");
        if ((seen[OPT_SAMPLER] || seen[OPT_SEED] || seen[OPT_BATCH] || seen[OPT_WORLD_SIZE] ||
             seen[OPT_SOURCE]) && ret->cmd != CMD_WHERE && ret->cmd != CMD_BATCH)
                return usage(ret, "--sampler, --seed, --batch, --world-size and --source are "
                             "options of where and batch");
        if ((seen[OPT_STEP] || seen[OPT_RANK] || seen[OPT_VALUES]) && ret->cmd != CMD_BATCH)
                return usage(ret, "--step, --rank and --values are options of batch");
        if ((ret->cmd == CMD_WHERE || ret->cmd == CMD_BATCH) &&
            (!seen[OPT_SAMPLER] || !seen[OPT_SEED] || !seen[OPT_BATCH]))
                return usage(ret, "%s needs the loader's --sampler, --seed and --batch",
                             cmd_names[ret->cmd]);
        if ((seen[OPT_ITERATIONS] || seen[OPT_DELAY] || seen[OPT_SORT]) && ret->cmd != CMD_TOP)
                return usage(ret, "-n, -d and --sort are options of top");
        if (seen[OPT_DICT_TIER] && ret->codec != ZRC_CODEC_ZSTD_DICT)
                return usage(ret, "--dict-tier needs --codec zstd_dict");

        switch (ret->cmd) {
        case CMD_STATUS:
        case CMD_TOP:
        case CMD_METRICS:
                if (n_pos != 0)
                        return usage(ret, "%s takes no arguments", cmd_names[ret->cmd]);
                break;
        case CMD_INFO:
        case CMD_STATS:
        case CMD_VERIFY:
        case CMD_COMPACT:
                if (n_pos != 1)
                        return usage(ret, "%s takes one PATH", cmd_names[ret->cmd]);
                ret->path = positional[0];
                break;
        case CMD_IMPORT:
                if (n_pos != 2)
                        return usage(ret, "import takes FILE.npy and PATH");
                ret->npy = positional[0];
                ret->path = positional[1];
                break;
        case CMD_CONVERT:
                if (n_pos != 2)
                        return usage(ret, "convert takes SRC and DST");
                ret->path = positional[0];
                ret->dst = positional[1];
                break;
        case CMD_PUSH:
        case CMD_PULL:
                if (n_pos != 2)
                        return usage(ret, ret->cmd == CMD_PUSH ? "push takes a local PATH and "
                                     "an s3:// URL" : "pull takes an s3:// URL and a local PATH");
                ret->path = positional[0];
                ret->dst = positional[1];
                if (!!s3_url_like(ret->path) == (ret->cmd == CMD_PUSH) ||
                    !!s3_url_like(ret->dst) != (ret->cmd == CMD_PUSH))
                        return usage(ret, ret->cmd == CMD_PUSH ? "push LOCAL s3://BUCKET/PREFIX"
                                                               : "pull s3://BUCKET/PREFIX LOCAL");
                break;
        case CMD_CAT:
                if (n_pos != 1)
                        return usage(ret, "cat takes one PATH, then indices");
                ret->path = positional[0];
                if (ret->has_range && ret->n_indices > 0)
                        return usage(ret, "give indices or --range, not both");
                break;
        case CMD_WHERE: {
                const char *rec, *colon;

                if (n_pos != (ret->n_sources ? 1u : 2u))
                        return usage(ret, ret->n_sources ? "where of a mixture takes SOURCE:RECORD"
                                                         : "where takes PATH and RECORD");
                ret->path = ret->n_sources ? NULL : positional[0];
                rec = positional[n_pos - 1];
                colon = strchr(rec, ':');
                if (colon && !ret->n_sources)
                        return usage(ret, "SOURCE:RECORD names a mixture's record: give --source");
                if (!colon && ret->n_sources)
                        return usage(ret, "a mixture's record is SOURCE:RECORD, not \"%s\"", rec);
                if (colon) {
                        char buf[32];
                        uint64_t k;
                        if ((size_t)(colon - rec) >= sizeof(buf))
                                return usage(ret, "bad record \"%s\"", rec);
                        memcpy(buf, rec, (size_t)(colon - rec));
                        buf[colon - rec] = 0;
                        if (cmdline_parse_u64(buf, &k) < 0 || k >= ret->n_sources)
                                return usage(ret, "no source %s among the %zu given", buf,
                                             ret->n_sources);
                        ret->record_source = (uint32_t)k;
                        rec = colon + 1;
                }
                if (cmdline_parse_u64(rec, &ret->record) < 0)
                        return usage(ret, "not a record: \"%s\"", rec);
                break;
        }
        case CMD_BATCH:
                if (n_pos != (ret->n_sources ? 0u : 1u))
                        return usage(ret, ret->n_sources ? "batch of a mixture takes no PATH"
                                                         : "batch takes one PATH");
                ret->path = ret->n_sources ? NULL : positional[0];
                if (!seen[OPT_STEP])
                        return usage(ret, "batch needs --step");
                if (ret->rank >= ret->world_size)
                        return usage(ret, "--rank %" PRIu64 " is not below --world-size %" PRIu64,
                                     ret->rank, ret->world_size);
                break;
        default:
                break;
        }
        return 0;
}
