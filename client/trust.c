/* trust.c: whether a daemon socket may be used, before anything is sent to it.
 *
 * A client hands the daemon descriptors of its stores (PROTOCOL.md, section 6),
 * so whoever listens at the path it connects to receives them. Two checks stand
 * between a path and the first byte sent (PROTOCOL.md, section 1, "Whom a client
 * trusts"):
 *
 * - before connect(), the socket's directory: a directory (for a default path,
 *   not a symlink), owned by the user for a per-user path, by root or the
 *   service user for /run/zrecord, and writable by nobody but its owner, so that
 *   no one else can have put a socket there;
 * - after connect(), the peer's SO_PEERCRED uid: the user itself for a per-user
 *   path, root (the socket activator) or the service user for /run/zrecord.
 *
 * An explicit path (an argument or $ZRECORD_SOCKET) names a daemon the user
 * chose: its directory must be writable by its owner only, and the peer must be
 * the user, root, the service user or that directory's owner.
 *
 * A refusal is -EPERM with a message naming the path and the owner found. Never
 * prints.
 */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zrc-private.h"

/* A uid as "uid 1003 (alice)", or "uid 1003" when it has no name. */
static const char *uid_text(uid_t uid, char *buf, size_t size) {
        struct passwd pw, *found = NULL;
        char strings[1024];

        if (getpwuid_r(uid, &pw, strings, sizeof(strings), &found) == 0 && found)
                snprintf(buf, size, "uid %u (%s)", (unsigned)uid, found->pw_name);
        else
                snprintf(buf, size, "uid %u", (unsigned)uid);
        return buf;
}

/* The service user's uid, or (uid_t)-1 when this machine has none. */
static uid_t service_uid(void) {
        struct passwd pw, *found = NULL;
        char strings[1024];

        if (getpwnam_r(ZRC_SERVICE_USER, &pw, strings, sizeof(strings), &found) == 0 && found)
                return found->pw_uid;
        return (uid_t)-1;
}

static bool is_root_or_service(uid_t uid) {
        return uid == 0 || uid == service_uid();
}

/* The directory part of path: "." for a bare name, "/" for "/name". */
static void dir_of(const char *path, char *dir, size_t size) {
        const char *slash = strrchr(path, '/');

        if (!slash)
                snprintf(dir, size, ".");
        else if (slash == path)
                snprintf(dir, size, "/");
        else
                snprintf(dir, size, "%.*s", (int)(slash - path), path);
}

int trust_dir(const char *path, conn_trust kind, uid_t *ret_owner, char *why, size_t size) {
        char dir[ZRC_SOCKET_PATH_MAX], owner[96], me[96];
        uid_t uid = geteuid();
        struct stat st;
        int r;

        dir_of(path, dir, sizeof(dir));
        /* a default path's directory is taken as it is, never through a symlink */
        r = kind == CONN_TRUST_EXPLICIT ? stat(dir, &st) : lstat(dir, &st);
        if (r < 0) {
                r = -errno;
                snprintf(why, size, "%s: %s", dir, strerror(-r));
                return r;
        }
        uid_text(st.st_uid, owner, sizeof(owner));
        if (!S_ISDIR(st.st_mode)) {
                snprintf(why, size, "refusing %s: %s is not a directory (owner %s)", path, dir,
                         owner);
                return -EPERM;
        }
        if (kind == CONN_TRUST_USER && st.st_uid != uid) {
                snprintf(why, size, "refusing %s: its directory %s is owned by %s, not by you (%s)",
                         path, dir, owner, uid_text(uid, me, sizeof(me)));
                return -EPERM;
        }
        if (kind == CONN_TRUST_SYSTEM && !is_root_or_service(st.st_uid)) {
                snprintf(why, size,
                         "refusing %s: its directory %s is owned by %s, not by root or the "
                         "service user %s", path, dir, owner, ZRC_SERVICE_USER);
                return -EPERM;
        }
        if (st.st_mode & (S_IWGRP | S_IWOTH)) {
                snprintf(why, size,
                         "refusing %s: its directory %s (owner %s, mode %04o) is writable by "
                         "others than its owner, who could have put the socket there",
                         path, dir, owner, (unsigned)(st.st_mode & 07777));
                return -EPERM;
        }
        *ret_owner = st.st_uid;
        return 0;
}

int trust_peer(int fd, const char *path, conn_trust kind, uid_t dir_owner, char *why,
               size_t size) {
        struct ucred cred;
        socklen_t len = sizeof(cred);
        char peer[96], me[96], owner[96];
        uid_t uid = geteuid();

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                int e = errno;

                snprintf(why, size, "refusing %s: its peer's credentials are unknown: %s", path,
                         strerror(e));
                return -EPERM;
        }
        uid_text(cred.uid, peer, sizeof(peer));
        switch (kind) {
        case CONN_TRUST_USER:
                if (cred.uid == uid)
                        return 0;
                snprintf(why, size, "refusing %s: the daemon there runs as %s, not as you (%s)",
                         path, peer, uid_text(uid, me, sizeof(me)));
                return -EPERM;
        case CONN_TRUST_SYSTEM:
                if (is_root_or_service(cred.uid))
                        return 0;
                snprintf(why, size,
                         "refusing %s: the daemon there runs as %s, not as root or the service "
                         "user %s", path, peer, ZRC_SERVICE_USER);
                return -EPERM;
        case CONN_TRUST_EXPLICIT:
        default:
                if (cred.uid == uid || cred.uid == dir_owner || is_root_or_service(cred.uid))
                        return 0;
                snprintf(why, size,
                         "refusing %s: the daemon there runs as %s, not as you, root, the "
                         "service user %s or the directory's owner (%s)", path, peer,
                         ZRC_SERVICE_USER, uid_text(dir_owner, owner, sizeof(owner)));
                return -EPERM;
        }
}
