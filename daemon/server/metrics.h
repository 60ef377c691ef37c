/* metrics.h: the daemon's state in the Prometheus text exposition format
 * (version 0.0.4, which OpenMetrics parsers read too), for METRICS
 * (`zrecord metrics`) and the metrics-listen endpoint (scrape.h): the same
 * text from the same function. docs/TELEMETRY.md lists every family.
 *
 * Daemon-wide families (totals, loaders by verdict, the cache, reads ahead)
 * are in every scope. Per-loader families, labelled pid, uid, loader (its
 * handle on its connection) and dataset, follow STATUS's rule of who sees a
 * loader (lview.h): ZR_METRICS_OWN shows the viewer's own loaders,
 * ZR_METRICS_ALL every loader, ZR_METRICS_DAEMON none (an endpoint that
 * cannot tell who asks).
 *
 * Loop thread only.
 */
#ifndef ZR_SERVER_METRICS_H
#define ZR_SERVER_METRICS_H

#include <stddef.h>
#include <sys/types.h>

#include "server/server.h"

enum zr_metrics_scope {
        ZR_METRICS_DAEMON = 0, /* daemon-wide families only */
        ZR_METRICS_OWN,        /* and the loaders of uid `viewer` */
        ZR_METRICS_ALL,        /* and every loader */
};

/* The scope of a caller of uid `uid`: every loader for root and the daemon's
 * own uid, else its own. */
enum zr_metrics_scope zr_metrics_scope_of(zr_server *s, uid_t uid);

/* Renders the text into a new buffer (*ret, *len, NUL-terminated; free()
 * it). Returns 0 or -ENOMEM. */
int zr_metrics_render(zr_server *s, enum zr_metrics_scope scope, uid_t viewer, char **ret,
                      size_t *len);

/* The content type of the text, for HTTP. */
#define ZR_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
