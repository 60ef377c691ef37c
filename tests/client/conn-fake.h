/* conn-fake.h: a scripted fake zrecordd for the conn suite (test-conn.c:
 * the connection; conn-rings.c: events with descriptors and a loader over
 * shared rings). A thread of the test plays the daemon on a socket in a
 * temporary directory: it answers HELLO, then runs the test's script on the
 * connection, byte by byte if it likes (tests/lib/frames.h).
 */
#ifndef ZR_TESTS_CONN_FAKE_H
#define ZR_TESTS_CONN_FAKE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"
#include "zrc-private.h"

typedef void (*script_fn)(int fd);

typedef struct fake {
        char dir[64];
        char path[128];
        int listen_fd;
        pthread_t thread;
        script_fn script;
        uint32_t version;   /* in the HELLO reply */
        bool loader;        /* grant the "loader" feature */
} fake;

/* The loader the fake grants and its own ring. */
enum { FAKE_LOADER = 5, FAKE_OWN_RING = 10 };

/* The RELEASEs the fake read: (ring, slot). */
extern uint64_t released[16][2];
extern int n_released;

/* Starts the fake (HELLO's version, whether it grants "loader") and runs
 * script after HELLO; fake_stop() waits for the script to end. */
void fake_start_ex(fake *f, script_fn script, uint32_t version, bool loader);
void fake_start(fake *f, script_fn script, uint32_t version);
void fake_stop(fake *f);
/* fake_start() and a libzrc connection to it (asserted); the disconnection
 * and fake_stop(). */
zrc_conn *fake_connect(fake *f, script_fn script, uint32_t version);
void fake_done(fake *f, zrc_conn *c);

/* Sends the writer's frame with fds, and resets the writer for the next. */
void send_writer(int fd, zr_wire_writer *w, const int *fds, size_t n_fds);
/* Reads one message of the client: its id (0 at EOF), its kind in kind ("" at
 * EOF); a RELEASE's (ring, slot) is added to released[]. */
uint64_t read_msg(int fd, char *kind, size_t kind_size);
/* read_msg() of a request whose kind does not matter: its id. */
uint64_t read_request(int fd);
/* STATUS's ok reply (every counter 7) for request id, begun in w. */
void put_status_ok(zr_wire_writer *w, uint64_t id);
/* Sends STATUS's ok reply for request id, carrying fds. */
void reply_status(int fd, uint64_t id, const int *fds, size_t n_fds);

/* zrc_status_query()'s return (the status freed). */
int status_code(zrc_conn *c);
/* Open descriptors of this process. */
int count_fds(void);

/* The conn suite's cases of rings (conn-rings.c). */
void conn_add_ring_tests(TCase *tc);

#endif
