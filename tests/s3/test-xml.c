/* test-xml.c: the fields read from S3's replies (s3/xml.h), and that no reply,
 * however cut or malformed, makes a read leave its buffer. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "xml.h"

static const char error_doc[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code>"
        "<Message>Access &amp; &lt;denied&gt; &#34;x&#34;</Message><CodeX>no</CodeX></Error>";

START_TEST(test_fields) {
        char out[64];
        ck_assert(s3_xml_text(error_doc, strlen(error_doc), "Code", out, sizeof(out)));
        ck_assert_str_eq(out, "AccessDenied");
        ck_assert(s3_xml_text(error_doc, strlen(error_doc), "Message", out, sizeof(out)));
        ck_assert_str_eq(out, "Access & <denied> \"x\"");
        ck_assert(s3_xml_text(error_doc, strlen(error_doc), "CodeX", out, sizeof(out)));
        ck_assert_str_eq(out, "no");
        ck_assert(!s3_xml_text(error_doc, strlen(error_doc), "UploadId", out, sizeof(out)));
        ck_assert_str_eq(out, "");
        ck_assert(s3_xml_text(error_doc, strlen(error_doc), "Code", out, 5));
        ck_assert_str_eq(out, "Acce");

        const char parts[] = "<L><Part><N>1</N></Part><Part><N>2</N></Part><Empty/></L>";
        const char *p = parts, *b, *rest;
        size_t bl, n = 0;
        while (s3_xml_next(p, strlen(parts) - (size_t)(p - parts), "Part", &b, &bl, &rest)) {
                ck_assert(s3_xml_text(b, bl, "N", out, sizeof(out)));
                ck_assert_int_eq(atoi(out), (int)++n);
                p = rest;
        }
        ck_assert_uint_eq(n, 2);
        ck_assert(s3_xml_next(parts, strlen(parts), "Empty", &b, &bl, &rest));
        ck_assert_uint_eq(bl, 0);
}
END_TEST

/* Every prefix of the document, on the heap at its exact length (ASan sees a
 * read past it), finds a field only when its end tag is in. */
START_TEST(test_cut) {
        size_t n = strlen(error_doc);
        for (size_t k = 0; k <= n; k++) {
                char *c = malloc(k ? k : 1), out[64];
                memcpy(c, error_doc, k);
                int found = s3_xml_text(c, k, "Message", out, sizeof(out));
                const char *end = strstr(error_doc, "</Message>");
                ck_assert_int_eq(found, k >= (size_t)(end - error_doc) + strlen("</Message>"));
                s3_xml_text(c, k, "Code", out, sizeof(out));
                free(c);
        }
        char out[8];
        ck_assert(!s3_xml_text("<a>&#;&#xZZ;&#99999;</a>", 24, "b", out, sizeof(out)));
        ck_assert(s3_xml_text("<a>&#;&#x41;&bogus;\x01</a>", 25, "a", out, sizeof(out)));
        ck_assert_str_eq(out, "&#;A&bo");
}
END_TEST

TL_SUITE_MAIN("s3-xml", test_fields, test_cut)
