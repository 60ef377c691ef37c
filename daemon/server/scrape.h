/* scrape.h: the opt-in metrics endpoint (`metrics-listen=`), for Prometheus.
 *
 * A minimal HTTP/1.0 responder on the daemon's loop: `GET /metrics` (or HEAD)
 * gets metrics.h's text, anything else 404 or 405, then the connection
 * closes. It listens on a Unix socket (an absolute path, made with the main
 * socket's mode and group) or on a loopback TCP address (127.0.0.0/8 or
 * [::1]; never another: the endpoint is for this machine's scraper).
 *
 * What it shows: over the Unix socket the peer's uid decides, as for STATUS
 * (its own loaders; root and the daemon's uid every loader); over TCP, which
 * cannot tell who asks, only the daemon-wide families (docs/TELEMETRY.md).
 *
 * Hostile input: a request head is read into 4 KiB and must end there; a
 * connection has 5 s to send it and take the answer (what it sends after
 * the head is read and dropped until it closes), then it is closed; at
 * most 8 are held at once: a new one takes the place of one that has its
 * answer and only lingers, else it is accepted and closed at once; the
 * request is never echoed. Running out of descriptors pauses accepting for a
 * second instead of spinning.
 *
 * Loop thread only.
 */
#ifndef ZR_SERVER_SCRAPE_H
#define ZR_SERVER_SCRAPE_H

#include "server/server.h"
#include "util/error.h"

typedef struct zr_scrape zr_scrape;

/* Checks a metrics-listen value: an absolute path under 108 bytes, or
 * HOST:PORT with HOST an IPv4 loopback address, "localhost" or "[::1]" and
 * PORT 1..65535. Returns 0, or -EINVAL with *err saying why. */
int zr_scrape_check_address(const char *addr, zr_error *err);

/* Listens at `addr` (checked as above) on s's loop. Returns 0 and sets *ret,
 * or a negative code with *err naming the address. */
int zr_scrape_new(zr_server *s, const char *addr, zr_scrape **ret, zr_error *err);

/* Closes the listener and every connection; removes the Unix socket file it
 * made (if it is still the one). NULL allowed; returns NULL. */
zr_scrape *zr_scrape_free(zr_scrape *sc);

#endif
