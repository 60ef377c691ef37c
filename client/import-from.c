/* import-from.c: `zrecord import --from parquet|arrow|webdataset|megatron`, the
 * corpora users already have, through the Python client's converters.
 *
 * Parquet and Arrow are read through pyarrow (docs/TOKENS.md: parsing them in
 * C would mean the Arrow C++ library or a parser of our own), and the four
 * formats share one set of converters (loaderx/_corpora.py), so the tool runs
 * them: it replaces itself with `python3` ($ZRECORD_PYTHON to choose another)
 * running loaderx._import with the command's own arguments. Everything the
 * converters promise holds as it is: all or nothing, Ctrl-C included (the
 * signal goes to the Python process, which undoes the conversion), a progress
 * bar on a terminal. Without the loaderx package (or pyarrow, for Parquet and
 * Arrow) the command says what to install and exits 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmdline.h"
#include "tool.h"

/* The bootstrap the interpreter runs: the package's entry, or a message that
 * names what is missing. */
static const char bootstrap[] =
        "import sys\n"
        "try:\n"
        "    from loaderx import _import\n"
        "except ImportError as e:\n"
        "    sys.stderr.write('zrecord: import --from needs the loaderx Python package '\n"
        "                     '(pip install loaderx; pyarrow too for parquet and arrow): '\n"
        "                     + str(e) + '\\n')\n"
        "    sys.exit(1)\n"
        "sys.exit(_import.main(sys.argv[1:]))\n";

int tool_import_from_wanted(int argc, char **argv) {
        if (argc < 2 || strcmp(argv[1], "import") != 0)
                return 0;
        for (int i = 2; i < argc; i++)
                if (strcmp(argv[i], "--from") == 0 || strncmp(argv[i], "--from=", 7) == 0)
                        return 1;
        return 0;
}

int tool_import_from(int argc, char **argv) {
        const char *py = getenv("ZRECORD_PYTHON");
        char **args;

        if (!py || !*py)
                py = "python3";
        /* python3 -c BOOTSTRAP import-args... (argv[2..]) */
        args = calloc((size_t)argc + 3, sizeof(*args));
        if (!args)
                return tool_fail_msg("import: out of memory");
        args[0] = (char *)py;
        args[1] = (char *)"-c";
        args[2] = (char *)bootstrap;
        for (int i = 2; i < argc; i++)
                args[i + 1] = argv[i];
        fflush(stdout);
        execvp(py, args);
        free(args);
        return tool_fail_msg("import --from: cannot run %s (set ZRECORD_PYTHON to a Python "
                             "with the loaderx package): %s", py, strerror(errno));
}
