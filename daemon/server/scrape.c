/* scrape.c: the metrics endpoint (scrape.h).
 *
 * Why not libevent's evhttp: it speaks all of HTTP/1.1 (keep-alive, chunked
 * bodies, pipelining) for a peer that needs one GET; the few rules here bound
 * what a hostile local peer can make the daemon hold, and nothing else of
 * libevent (its _extra library) is needed.
 *
 * Peers hold places, at most SCRAPE_CONNS_MAX in all and SCRAPE_PEER_MAX per
 * peer: a uid on a Unix socket, an address on TCP (every local user shares
 * 127.0.0.1, and any may connect from another 127.0.0.0/8 address). A head
 * must arrive within SCRAPE_HEAD_SEC. A new peer is never refused for room:
 * at its peer's limit it takes the place of that peer's oldest connection,
 * and with every place taken, of a lingering one, else of the oldest of the
 * peer holding the most. A scraper's connection is the newest, and it is
 * read at once (its head is usually there when it is accepted), so a peer
 * that holds places with heads it never finishes, or reconnects as they time
 * out, delays no other scraper.
 */
#include "server/scrape.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/listener.h"
#include "server/log.h"
#include "server/metrics.h"

#define SCRAPE_HEAD_MAX 4096   /* request line and headers */
#define SCRAPE_CONNS_MAX 32    /* held at once (make_room()) */
#define SCRAPE_PEER_MAX 4      /* held at once by one uid or address */
#define SCRAPE_HEAD_SEC 2      /* to send the request's head */
#define SCRAPE_TIMEOUT_SEC 5   /* then to take the answer */
#define SCRAPE_ACCEPT_BURST 8  /* accepted per wakeup: reads run between bursts */
#define SCRAPE_PAUSE_SEC 1     /* accepting pauses this long without descriptors */

typedef struct sconn {
        struct sconn *next, *prev;
        zr_scrape *sc;
        int fd;
        struct event *ev;      /* read until the head ends, then write */
        struct event *timer;
        bool unix_peer;
        bool answering;        /* its head came: being answered */
        bool lingering;        /* answered: only waiting for the peer's close */
        uid_t uid;
        uint8_t peer[17];      /* whom it counts against: family and address, or uid */
        uint64_t seq;          /* order of acceptance */
        char in[SCRAPE_HEAD_MAX];
        size_t in_len;
        char *out;
        size_t out_len, out_off;
} sconn;

struct zr_scrape {
        zr_server *srv;
        int fd;
        bool is_unix;
        char path[108];
        dev_t dev;
        ino_t ino;
        struct event *ev_listen, *ev_resume;
        sconn *conns;
        unsigned nconns;
        uint64_t seq;
};

/* Log lines any local peer can cause (failed accepts). */
static zr_ratelimit rl_scrape = ZR_RATELIMIT(60, 5);

/* ---- addresses -------------------------------------------------------------- */

typedef struct saddr {
        struct sockaddr_storage ss;
        socklen_t len;
} saddr;

/* Parses HOST:PORT into *a if HOST is loopback. */
static int parse_inet(const char *addr, saddr *a, zr_error *err) {
        char host[64];
        const char *colon = strrchr(addr, ':'), *h = addr;
        size_t hl;
        unsigned long port;
        char *end;

        if (!colon || colon == addr)
                return zr_error_set(err, EINVAL, "metrics-listen '%s': give an absolute path or "
                                    "HOST:PORT", addr);
        errno = 0;
        port = strtoul(colon + 1, &end, 10);
        if (errno || *end || end == colon + 1 || port < 1 || port > 65535)
                return zr_error_set(err, EINVAL, "metrics-listen '%s': bad port", addr);
        hl = (size_t)(colon - addr);
        if (addr[0] == '[') {
                if (hl < 2 || addr[hl - 1] != ']')
                        return zr_error_set(err, EINVAL, "metrics-listen '%s': bad [address]",
                                            addr);
                h = addr + 1;
                hl -= 2;
        }
        if (hl >= sizeof(host))
                return zr_error_set(err, EINVAL, "metrics-listen '%s': bad host", addr);
        memcpy(host, h, hl);
        host[hl] = 0;
        memset(a, 0, sizeof(*a));
        if (strcmp(host, "localhost") == 0)
                snprintf(host, sizeof(host), "127.0.0.1");
        struct sockaddr_in *in4 = (struct sockaddr_in *)&a->ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->ss;
        if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
                if ((ntohl(in4->sin_addr.s_addr) >> 24) != 127)
                        return zr_error_set(err, EINVAL, "metrics-listen '%s': not a loopback "
                                            "address (127.0.0.0/8, [::1], localhost)", addr);
                in4->sin_family = AF_INET;
                in4->sin_port = htons((uint16_t)port);
                a->len = sizeof(*in4);
                return 0;
        }
        if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
                if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
                        return zr_error_set(err, EINVAL, "metrics-listen '%s': not a loopback "
                                            "address (127.0.0.0/8, [::1], localhost)", addr);
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)port);
                a->len = sizeof(*in6);
                return 0;
        }
        return zr_error_set(err, EINVAL, "metrics-listen '%s': the host must be a numeric "
                            "loopback address or localhost", addr);
}

int zr_scrape_check_address(const char *addr, zr_error *err) {
        saddr a;
        if (addr[0] == '/') {
                if (strlen(addr) >= sizeof(((struct sockaddr_un *)0)->sun_path))
                        return zr_error_set(err, EINVAL, "metrics-listen: the path is too long");
                return 0;
        }
        return parse_inet(addr, &a, err);
}

/* ---- a connection ------------------------------------------------------------ */

static void conn_close(sconn *c) {
        zr_scrape *sc = c->sc;
        if (c->prev)
                c->prev->next = c->next;
        else
                sc->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        sc->nconns--;
        if (c->ev)
                event_free(c->ev);
        if (c->timer)
                event_free(c->timer);
        if (c->fd >= 0)
                close(c->fd);
        free(c->out);
        free(c);
}

static void conn_timeout(evutil_socket_t fd, short what, void *arg) {
        conn_close(arg);
}

/* After the answer: reads and drops what the peer still sends until it
 * closes (or the timeout), so that closing with its bytes unread does not
 * reset the connection before it read the answer (a lingering close). */
static void conn_linger(evutil_socket_t fd, short what, void *arg) {
        sconn *c = arg;
        for (;;) {
                ssize_t n = recv(c->fd, c->in, sizeof(c->in), MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return;
                if (n <= 0) {
                        conn_close(c);
                        return;
                }
        }
}

static void conn_write(evutil_socket_t fd, short what, void *arg) {
        sconn *c = arg;
        while (c->out_off < c->out_len) {
                ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return; /* EV_PERSIST: called again when writable */
                if (n <= 0) {
                        conn_close(c);
                        return;
                }
                c->out_off += (size_t)n;
        }
        free(c->out);
        c->out = NULL;
        event_free(c->ev);
        c->ev = NULL;
        if (shutdown(c->fd, SHUT_WR) < 0) {
                conn_close(c);
                return;
        }
        c->ev = event_new(c->sc->srv->base, c->fd, EV_READ | EV_PERSIST, conn_linger, c);
        if (!c->ev) {
                conn_close(c);
                return;
        }
        c->lingering = true;
        event_add(c->ev, NULL);
}

/* Builds the answer to the head in c->in and starts writing it. */
static void conn_answer(sconn *c) {
        zr_server *s = c->sc->srv;
        char method[8] = "", path[64] = "", *body = NULL;
        size_t blen = 0;
        const char *status = "200 OK", *type = ZR_METRICS_CONTENT_TYPE;
        bool head_only = false, ok = false;
        char *line_end = memchr(c->in, '\n', c->in_len);

        if (line_end) {
                *line_end = 0;
                /* METHOD SP PATH SP HTTP/x.y: both bounded, nothing else kept */
                if (sscanf(c->in, "%7s %63s HTTP/%*d.%*d", method, path) == 2)
                        ok = true;
        }
        if (!ok) {
                status = "400 Bad Request";
        } else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
                status = "405 Method Not Allowed";
        } else if (strcmp(path, "/metrics") != 0) {
                status = "404 Not Found";
        } else {
                enum zr_metrics_scope scope =
                        c->unix_peer ? zr_metrics_scope_of(s, c->uid) : ZR_METRICS_DAEMON;
                head_only = strcmp(method, "HEAD") == 0;
                if (zr_metrics_render(s, scope, c->uid, &body, &blen) < 0)
                        status = "500 Internal Server Error";
        }
        if (strcmp(status, "200 OK") != 0) {
                free(body);
                body = NULL;
                blen = 0;
                type = "text/plain; charset=utf-8";
        }
        char *out = NULL;
        size_t olen = 0;
        FILE *f = open_memstream(&out, &olen);
        if (!f) {
                free(body);
                conn_close(c);
                return;
        }
        fprintf(f, "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                "Connection: close\r\n\r\n", status, type, body ? blen : strlen(status) + 1);
        if (!head_only) {
                if (body)
                        fwrite(body, 1, blen, f);
                else
                        fprintf(f, "%s\n", status);
        }
        free(body);
        if (fclose(f) != 0 || !out) {
                free(out);
                conn_close(c);
                return;
        }
        struct timeval tv = { SCRAPE_TIMEOUT_SEC, 0 };
        c->answering = true;
        event_add(c->timer, &tv);
        c->out = out;
        c->out_len = olen;
        event_free(c->ev);
        c->ev = event_new(s->base, c->fd, EV_WRITE | EV_PERSIST, conn_write, c);
        if (!c->ev) {
                conn_close(c);
                return;
        }
        event_add(c->ev, NULL);
}

/* The end of the head: a blank line. */
static bool head_done(const sconn *c) {
        for (size_t i = 1; i < c->in_len; i++)
                if (c->in[i] == '\n' && (c->in[i - 1] == '\n' ||
                                         (i >= 2 && c->in[i - 1] == '\r' && c->in[i - 2] == '\n')))
                        return true;
        return false;
}

static void conn_read(evutil_socket_t fd, short what, void *arg) {
        sconn *c = arg;
        for (;;) {
                if (c->in_len == sizeof(c->in)) {
                        /* a head that does not fit: answered as bad, never kept */
                        c->in_len = 0;
                        conn_answer(c);
                        return;
                }
                ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len,
                                 MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return;
                if (n <= 0) {
                        conn_close(c); /* gone before asking */
                        return;
                }
                c->in_len += (size_t)n;
                if (head_done(c)) {
                        conn_answer(c);
                        return;
                }
        }
}

/* ---- the listener --------------------------------------------------------------- */

static bool same_peer(const sconn *a, const uint8_t *peer) {
        return memcmp(a->peer, peer, sizeof(a->peer)) == 0;
}

/* The oldest connection of `peer`, and how many it holds. */
static sconn *oldest_of(zr_scrape *sc, const uint8_t *peer, unsigned *ret_n) {
        sconn *old = NULL;
        unsigned n = 0;
        for (sconn *c = sc->conns; c; c = c->next)
                if (same_peer(c, peer)) {
                        n++;
                        if (!old || c->seq < old->seq)
                                old = c;
                }
        *ret_n = n;
        return old;
}

/* Makes room for a new connection of `peer` (see the top): its peer's oldest
 * at its limit; with every place taken, a connection that has its answer and
 * only lingers (what it was sent stays readable, a reset at most discards
 * bytes it sends after asking), else the oldest of the peer holding most. */
static void make_room(zr_scrape *sc, const uint8_t *peer) {
        sconn *victim, *most = NULL;
        unsigned n, most_n = 0;

        victim = oldest_of(sc, peer, &n);
        if (n >= SCRAPE_PEER_MAX) {
                conn_close(victim);
                return;
        }
        if (sc->nconns < SCRAPE_CONNS_MAX)
                return;
        for (sconn *c = sc->conns; c; c = c->next)
                if (c->lingering) {
                        conn_close(c);
                        return;
                }
        for (sconn *c = sc->conns; c; c = c->next) {
                sconn *o = oldest_of(sc, c->peer, &n);
                if (n > most_n || (n == most_n && o->seq < most->seq)) {
                        most = o;
                        most_n = n;
                }
        }
        conn_close(most);
}

/* Whom a connection counts against: its uid (Unix), or its address (TCP). */
static int peer_of(zr_scrape *sc, sconn *c) {
        memset(c->peer, 0, sizeof(c->peer));
        if (c->unix_peer) {
                struct ucred cr;
                socklen_t len = sizeof(cr);
                if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
                        return -1;
                c->uid = cr.uid;
                c->peer[0] = AF_UNIX;
                memcpy(c->peer + 1, &cr.uid, sizeof(cr.uid));
                return 0;
        }
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        if (getpeername(c->fd, (struct sockaddr *)&ss, &len) < 0)
                return -1;
        c->peer[0] = (uint8_t)ss.ss_family;
        if (ss.ss_family == AF_INET)
                memcpy(c->peer + 1, &((struct sockaddr_in *)&ss)->sin_addr, 4);
        else if (ss.ss_family == AF_INET6)
                memcpy(c->peer + 1, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
        return 0;
}

static void resume_cb(evutil_socket_t fd, short what, void *arg) {
        zr_scrape *sc = arg;
        event_add(sc->ev_listen, NULL);
}

static void accept_cb(evutil_socket_t lfd, short what, void *arg) {
        zr_scrape *sc = arg;
        struct timeval tv = { SCRAPE_HEAD_SEC, 0 };

        for (int burst = 0; burst < SCRAPE_ACCEPT_BURST; burst++) {
                int fd = accept4(sc->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                            errno == ENOMEM) {
                                struct timeval p = { SCRAPE_PAUSE_SEC, 0 };
                                zr_log_ratelimited(&rl_scrape, LOG_WARNING,
                                                   "metrics endpoint: accept: %s; pausing",
                                                   strerror(errno));
                                event_del(sc->ev_listen);
                                event_add(sc->ev_resume, &p);
                        }
                        return;
                }
                sconn *c = calloc(1, sizeof(*c));
                if (!c) {
                        close(fd);
                        return;
                }
                c->sc = sc;
                c->fd = fd;
                c->unix_peer = sc->is_unix;
                if (peer_of(sc, c) < 0) {
                        close(fd);
                        free(c);
                        continue;
                }
                make_room(sc, c->peer);
                c->seq = ++sc->seq;
                c->ev = event_new(sc->srv->base, fd, EV_READ | EV_PERSIST, conn_read, c);
                c->timer = event_new(sc->srv->base, -1, 0, conn_timeout, c);
                c->next = sc->conns;
                if (sc->conns)
                        sc->conns->prev = c;
                sc->conns = c;
                sc->nconns++;
                if (!c->ev || !c->timer) {
                        conn_close(c);
                        return;
                }
                event_add(c->ev, NULL);
                event_add(c->timer, &tv);
                /* its head is usually there already: answered now, it holds
                 * no place that a burst of others could take */
                conn_read(fd, EV_READ, c);
        }
}

static int listen_inet(const char *addr, int *ret_fd, zr_error *err) {
        saddr a;
        int one = 1, r = parse_inet(addr, &a, err);
        if (r < 0)
                return r;
        int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return zr_error_errno(err, errno, "metrics-listen %s: socket", addr);
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&a.ss, a.len) < 0 || listen(fd, SCRAPE_CONNS_MAX) < 0) {
                r = zr_error_errno(err, errno, "metrics-listen %s", addr);
                close(fd);
                return r;
        }
        *ret_fd = fd;
        return 0;
}

int zr_scrape_new(zr_server *s, const char *addr, zr_scrape **ret, zr_error *err) {
        zr_scrape *sc = calloc(1, sizeof(*sc));
        int r;

        if (!sc)
                return zr_error_set(err, ENOMEM, "metrics endpoint");
        sc->srv = s;
        sc->fd = -1;
        sc->is_unix = addr[0] == '/';
        r = zr_scrape_check_address(addr, err);
        if (r < 0)
                goto fail;
        if (sc->is_unix) {
                struct stat st;
                r = zr_listener_bind(addr, s->cfg.socket_mode, s->cfg.socket_gid, &sc->fd, err);
                if (r < 0)
                        goto fail;
                snprintf(sc->path, sizeof(sc->path), "%s", addr);
                if (lstat(addr, &st) == 0) {
                        sc->dev = st.st_dev;
                        sc->ino = st.st_ino;
                }
        } else {
                r = listen_inet(addr, &sc->fd, err);
                if (r < 0)
                        goto fail;
        }
        sc->ev_listen = event_new(s->base, sc->fd, EV_READ | EV_PERSIST, accept_cb, sc);
        sc->ev_resume = event_new(s->base, -1, 0, resume_cb, sc);
        if (!sc->ev_listen || !sc->ev_resume) {
                r = zr_error_set(err, ENOMEM, "metrics endpoint");
                goto fail;
        }
        event_add(sc->ev_listen, NULL);
        zr_log(LOG_INFO, "metrics on %s%s", sc->is_unix ? "" : "http://", addr);
        *ret = sc;
        return 0;
fail:
        zr_scrape_free(sc);
        return r;
}

zr_scrape *zr_scrape_free(zr_scrape *sc) {
        struct stat st;

        if (!sc)
                return NULL;
        while (sc->conns)
                conn_close(sc->conns);
        if (sc->ev_listen)
                event_free(sc->ev_listen);
        if (sc->ev_resume)
                event_free(sc->ev_resume);
        if (sc->fd >= 0)
                close(sc->fd);
        if (sc->path[0] && lstat(sc->path, &st) == 0 && st.st_dev == sc->dev &&
            st.st_ino == sc->ino)
                unlink(sc->path);
        free(sc);
        return NULL;
}
