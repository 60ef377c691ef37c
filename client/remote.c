/* remote.c: what libzrc sends to open a store in object storage: the URL, and
 * the endpoint, region and credentials resolved in the client as every S3 tool
 * does (s3/creds.h; docs/REMOTE.md). The daemon never reads the user's files or
 * environment: it takes what the client resolved, and uses it for this
 * client's requests only. */
#include <errno.h>
#include <string.h>

#include "creds.h"
#include "url.h"
#include "zrc-private.h"

bool conn_is_remote(const char *path) {
        return s3_is_url(path);
}

int conn_put_remote(zrc_conn *c, zr_wire_writer *w, const char *url) {
        s3_config cfg;
        s3_target t;
        s3_error err = {0};
        int r = conn_check(c, CONN_FEATURE_REMOTE, ZR_FEATURE_REMOTE);

        if (r < 0)
                return r;
        if (s3_config_resolve(&cfg, &err) < 0 ||
            s3_target_init(&t, url, cfg.endpoint, cfg.region, cfg.addressing, &err) < 0) {
                s3_wipe(&cfg.creds, sizeof(cfg.creds));
                return conn_fail(c, err.code, "%s", err.message);
        }
        zr_wire_begin_map(w, "remote");
        zr_wire_put_str(w, "url", url);
        if (cfg.endpoint[0])
                zr_wire_put_str(w, "endpoint", cfg.endpoint);
        if (cfg.region[0])
                zr_wire_put_str(w, "region", cfg.region);
        if (cfg.addressing != S3_ADDR_AUTO)
                zr_wire_put_str(w, "addressing", cfg.addressing == S3_ADDR_PATH ? "path"
                                                                             : "virtual");
        if (cfg.creds.access_key[0]) {
                zr_wire_put_str(w, "access_key", cfg.creds.access_key);
                zr_wire_put_str(w, "secret_key", cfg.creds.secret_key);
                if (cfg.creds.session_token[0])
                        zr_wire_put_str(w, "session_token", cfg.creds.session_token);
        }
        zr_wire_end(w);
        s3_wipe(&cfg.creds, sizeof(cfg.creds));
        return 0;
}
