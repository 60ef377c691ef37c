/* hint.c: WILLNEED hints in pieces the kernel honours whole (see hint.h). */
#include "io/hint.h"

#include <fcntl.h>

int zr_io_willneed(const zr_io_range *r, size_t n) {
        int first = 0;

        for (size_t i = 0; i < n; i++)
                for (uint64_t done = 0; done < r[i].length; done += ZR_IO_HINT_PIECE) {
                        uint64_t len = r[i].length - done;
                        if (len > ZR_IO_HINT_PIECE)
                                len = ZR_IO_HINT_PIECE;
                        int e = posix_fadvise(r[i].fd, (off_t)(r[i].offset + done), (off_t)len,
                                              POSIX_FADV_WILLNEED);
                        if (e != 0) {
                                if (!first)
                                        first = -e;
                                break; /* the rest of this range fails alike */
                        }
                }
        return first;
}
