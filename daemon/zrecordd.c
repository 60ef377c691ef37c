/* zrecordd.c: the zrecord data-serving daemon's entry point.
 *
 * Reads the settings (defaults < config file < flags), sets up the log, runs the
 * server until it drains, and exits 0 after a clean shutdown. Everything else
 * lives in server/ (the edge) and the engine below it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "server/config.h"
#include "server/log.h"
#include "server/server.h"

int main(int argc, char **argv) {
        zr_config cfg;
        zr_error err = {0};
        zr_server *srv = NULL;
        int r;

        zr_config_defaults(&cfg);
        r = zr_config_parse_args(&cfg, argc, argv, &err);
        if (r == 1)
                return EXIT_SUCCESS;
        zr_log_setup(NULL, cfg.log_level, -1);
        if (r == 0)
                r = zr_config_resolve(&cfg, &err);
        if (r < 0) {
                zr_log(LOG_ERR, "%s", err.message);
                return 2;
        }
        r = zr_server_new(&cfg, argc, argv, &srv, &err);
        if (r < 0) {
                zr_log(LOG_ERR, "%s", err.message);
                return EXIT_FAILURE;
        }
        r = zr_server_run(srv);
        srv = zr_server_free(srv);
        zr_log(LOG_NOTICE, "exiting with status %d", r);
        return r;
}
