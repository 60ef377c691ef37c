/* replay.c: runs a fuzz target's LLVMFuzzerTestOneInput over every file of the
 * directories (or files) named on the command line, once each, in name order.
 * This is how the checked-in corpus runs as an ordinary test in every build
 * (as zstd's tests/fuzz/regression_driver.c does); a crash or an abort() in the
 * target fails the test. Prints the number of inputs replayed. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Corpus inputs are small; a larger file is a mistake in the corpus. */
#define REPLAY_FILE_MAX (4u << 20)

static int replay_file(const char *path) {
        FILE *f = fopen(path, "rbe");
        uint8_t *data;
        long n;

        if (!f) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -1;
        }
        if (fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || n > (long)REPLAY_FILE_MAX) {
                fprintf(stderr, "%s: unreadable or too large\n", path);
                fclose(f);
                return -1;
        }
        rewind(f);
        /* an exact-size copy, so the sanitizers see reads past the input */
        data = malloc(n ? (size_t)n : 1);
        if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) {
                fprintf(stderr, "%s: read failed\n", path);
                free(data);
                fclose(f);
                return -1;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(data, (size_t)n);
        free(data);
        return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
        return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv) {
        unsigned replayed = 0;

        if (argc < 2) {
                fprintf(stderr, "usage: %s CORPUS-DIR-OR-FILE...\n", argv[0]);
                return 2;
        }
        for (int i = 1; i < argc; i++) {
                struct dirent **names;
                struct stat st;
                int n;

                if (stat(argv[i], &st) < 0) {
                        fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
                        return 1;
                }
                if (!S_ISDIR(st.st_mode)) {
                        if (replay_file(argv[i]) < 0)
                                return 1;
                        replayed++;
                        continue;
                }
                n = scandir(argv[i], &names, NULL, by_name);
                if (n < 0) {
                        fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
                        return 1;
                }
                for (int j = 0; j < n; j++) {
                        char path[4096];
                        int r = 0;

                        if (names[j]->d_name[0] != '.') {
                                snprintf(path, sizeof(path), "%s/%s", argv[i], names[j]->d_name);
                                r = replay_file(path);
                                replayed++;
                        }
                        free(names[j]);
                        if (r < 0) {
                                for (int k = j + 1; k < n; k++)
                                        free(names[k]);
                                free(names);
                                return 1;
                        }
                }
                free(names);
        }
        printf("replayed %u inputs\n", replayed);
        return replayed > 0 ? 0 : 1;
}
