/* test-document.c: proto/PROTOCOL.md and the field tables of proto/message.c say
 * the same thing. Every row of a message's request, ok, event or notification
 * table in the document ("| `name` | type | description |", optional when the
 * description begins with *opt*) must be a field of that kind's table with the same type
 * and requirement, and every field of every table must appear in the document.
 * The error table of section 11 describes both "error" and "fault". */
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "message.h"

/* Fields per table; the largest of version 1 has 14. */
#define DOC_FIELDS_MAX 32

typedef struct seen {
        bool fields[DOC_FIELDS_MAX];
        bool ok[DOC_FIELDS_MAX];
} seen;

static void trim(char *s) {
        size_t n = strlen(s), i = 0;

        while (n > 0 && isspace((unsigned char)s[n - 1]))
                s[--n] = 0;
        while (isspace((unsigned char)s[i]))
                i++;
        memmove(s, s + i, n - i + 1);
}

/* Checks one documented field against the table; marks it seen. */
static void check_row(zr_msg_kind kind, bool reply, const char *name, const char *type,
                      bool required, seen *sn, unsigned line) {
        const char *fname, *ftype;
        bool freq;

        for (size_t i = 0; zr_msg_field_at(kind, reply, i, &fname, &ftype, &freq); i++) {
                if (strcmp(fname, name) != 0)
                        continue;
                ck_assert_msg(strcmp(ftype, type) == 0,
                              "PROTOCOL.md:%u: %s%s '%s' is %s, message.c says %s", line,
                              zr_msg_kind_name(kind), reply ? " ok" : "", name, type, ftype);
                ck_assert_msg(freq == required,
                              "PROTOCOL.md:%u: %s%s '%s' is %s, message.c says %s", line,
                              zr_msg_kind_name(kind), reply ? " ok" : "", name,
                              required ? "required" : "*opt*", freq ? "required" : "optional");
                ck_assert_uint_lt(i, DOC_FIELDS_MAX);
                if (reply)
                        sn[kind].ok[i] = true;
                else
                        sn[kind].fields[i] = true;
                return;
        }
        ck_abort_msg("PROTOCOL.md:%u: %s%s '%s' is not in message.c", line,
                     zr_msg_kind_name(kind), reply ? " ok" : "", name);
}

START_TEST(test_document_matches_tables) {
        char path[4096], line[2048];
        const char *vectors = getenv("ZR_VECTORS");
        zr_msg_kind kind = ZR_MSG_INVALID;
        bool reply = false, in_table = false, in_errors = false;
        seen sn[_ZR_MSG_MAX];
        unsigned lineno = 0, rows = 0;
        FILE *f;

        memset(sn, 0, sizeof(sn));
        ck_assert_ptr_nonnull(vectors);
        snprintf(path, sizeof(path), "%s/../PROTOCOL.md", vectors);
        f = fopen(path, "re");
        ck_assert_msg(f != NULL, "cannot open %s", path);

        while (fgets(line, sizeof(line), f)) {
                lineno++;
                if (strncmp(line, "## ", 3) == 0) {
                        in_errors = strncmp(line, "## 11.", 6) == 0;
                        kind = ZR_MSG_INVALID;
                        in_table = false;
                        continue;
                }
                if (strncmp(line, "### ", 4) == 0) {
                        char word[64];
                        size_t n = strcspn(line + 4, " ,\n");

                        ck_assert_uint_lt(n, sizeof(word));
                        for (size_t i = 0; i < n; i++)
                                word[i] = (char)tolower((unsigned char)line[4 + i]);
                        word[n] = 0;
                        kind = zr_msg_kind_from_name(word, n);
                        in_table = false;
                        continue;
                }
                if (line[0] != '|') {
                        in_table = false;
                        continue;
                }
                if (strncmp(line, "|---", 4) == 0)
                        continue;
                if (strncmp(line, "| request |", 11) == 0 || strncmp(line, "| event |", 9) == 0 ||
                    strncmp(line, "| notification |", 16) == 0 ||
                    strncmp(line, "| ok |", 6) == 0 ||
                    (in_errors && strncmp(line, "| key |", 7) == 0)) {
                        reply = strncmp(line, "| ok |", 6) == 0;
                        in_table = kind != ZR_MSG_INVALID || in_errors;
                        continue;
                }
                if (!in_table)
                        continue;

                /* | `a`, `b` | type | description | */
                {
                        char *cells[4] = { 0 }, *save = NULL, *c;
                        int nc = 0;

                        line[strcspn(line, "\n")] = 0;
                        for (c = strtok_r(line, "|", &save); c && nc < 4;
                             c = strtok_r(NULL, "|", &save))
                                cells[nc++] = c;
                        ck_assert_msg(nc >= 3, "PROTOCOL.md:%u: a row of %d cells", lineno, nc);
                        trim(cells[0]);
                        trim(cells[1]);
                        trim(cells[2]);
                        for (char *name = strchr(cells[0], '`'); name; name = strchr(name, '`')) {
                                char *end = strchr(name + 1, '`');
                                bool required = strncmp(cells[2], "*opt*", 5) != 0;

                                ck_assert_ptr_nonnull(end);
                                *end = 0;
                                name++;
                                if (in_errors) {
                                        if (strcmp(name, "kind") != 0 && strcmp(name, "id") != 0) {
                                                check_row(ZR_MSG_ERROR, false, name, cells[1],
                                                          required, sn, lineno);
                                                check_row(ZR_MSG_FAULT, false, name, cells[1],
                                                          required, sn, lineno);
                                        }
                                } else {
                                        check_row(kind, reply, name, cells[1], required, sn,
                                                  lineno);
                                }
                                rows++;
                                name = end + 1;
                        }
                }
        }
        fclose(f);
        ck_assert_uint_ge(rows, 100);

        /* and the other way: every field of every table is documented */
        for (int k = ZR_MSG_INVALID + 1; k < _ZR_MSG_MAX; k++) {
                const char *fname;

                for (size_t i = 0; zr_msg_field_at((zr_msg_kind)k, false, i, &fname, NULL, NULL);
                     i++)
                        ck_assert_msg(sn[k].fields[i], "%s: field '%s' is not in PROTOCOL.md",
                                      zr_msg_kind_name((zr_msg_kind)k), fname);
                for (size_t i = 0; zr_msg_field_at((zr_msg_kind)k, true, i, &fname, NULL, NULL);
                     i++)
                        ck_assert_msg(sn[k].ok[i], "%s ok: field '%s' is not in PROTOCOL.md",
                                      zr_msg_kind_name((zr_msg_kind)k), fname);
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("document");
        TL_TCASE(s, "core", 0, test_document_matches_tables);
        return tl_run_suite(s);
}
