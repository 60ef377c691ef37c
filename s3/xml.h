/* xml.h: the few fields zrecord reads from S3's XML replies.
 *
 * S3 answers errors, listings and multipart calls with small XML documents of
 * flat elements (<Code>, <Message>, <UploadId>, <Part>...). This is not an XML
 * parser: it finds elements by name in a bounded buffer, without attributes,
 * namespaces or CDATA, and decodes the five predefined entities and numeric
 * character references. A document it cannot read yields "not found", never a
 * read outside the buffer.
 */
#ifndef ZR_S3_XML_H
#define ZR_S3_XML_H

#include <stddef.h>

/* Finds the next element <tag>...</tag> in xml[0..n) (an element <tag/> is
 * empty). On success returns 1 and sets *body, *body_len to its content (not
 * decoded) and *rest to the byte after its end tag; 0 if there is none. */
int s3_xml_next(const char *xml, size_t n, const char *tag, const char **body,
                size_t *body_len, const char **rest);

/* The decoded text of the first <tag> of xml[0..n) into out (always NUL-
 * terminated, cut at outn - 1 bytes). Returns 1 if found, else 0 (out = ""). */
int s3_xml_text(const char *xml, size_t n, const char *tag, char *out, size_t outn);

#endif
