"""``zrecord import --from FORMAT``: the corpora converters from the shell.

The C tool (client/import-from.c) runs this with its own arguments:
``--from parquet|arrow|webdataset|megatron SRC... PATH [--column NAME] [--key EXT]
[--codec raw|zstd] [--level N] [--skip-empty]``. Arrow sources are IPC files or streams
(``.arrow``, ``.feather``). Prints the records written. Exit status: 0, 1 (the
conversion failed: its message on stderr, nothing at PATH), 2 (usage); Ctrl-C
ends it by SIGINT once the conversion is undone, as the tool's own import.
"""

import argparse
import signal
import sys

from ._errors import ZrecordError

FORMATS = ("parquet", "arrow", "webdataset", "megatron")


def _arrow_batches(paths):
    import pyarrow as pa
    import pyarrow.ipc as ipc
    for p in paths:
        with pa.memory_map(p, "r") as src:
            try:
                reader = ipc.open_file(src)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)
            except pa.ArrowInvalid:
                src.seek(0)
                yield from ipc.open_stream(src)


def main(argv):
    ap = argparse.ArgumentParser(prog="zrecord import", description="A corpus into a new store.")
    ap.add_argument("--from", dest="fmt", choices=FORMATS, required=True)
    ap.add_argument("paths", nargs="+", metavar="SRC... PATH")
    ap.add_argument("--column", help="the Parquet or Arrow column")
    ap.add_argument("--key", help="the WebDataset members' extension (txt, json, ...)")
    ap.add_argument("--codec", choices=("raw", "zstd"), default="raw")
    ap.add_argument("--level", type=int, default=None,
                    help="zstd level of a compressed store, 1 to 19 (default: the codec's)")
    ap.add_argument("--skip-empty", action="store_true",
                    help="leave empty rows out (Parquet, Arrow) instead of failing")
    args = ap.parse_args(argv)
    if len(args.paths) < 2:
        ap.error("give the source(s) and the new store's PATH")
    srcs, dst = args.paths[:-1], args.paths[-1]
    from . import utils
    try:
        if args.fmt in ("parquet", "arrow"):
            if not args.column:
                ap.error(f"--from {args.fmt} needs --column NAME")
            if args.fmt == "parquet":
                n = utils.from_parquet(dst, srcs, args.column, codec=args.codec,
                                       skip_empty=args.skip_empty, level=args.level)
            else:
                n = utils.from_arrow(dst, _arrow_batches(srcs), args.column, codec=args.codec,
                                     skip_empty=args.skip_empty, level=args.level)
        elif args.fmt == "webdataset":
            if not args.key:
                ap.error("--from webdataset needs --key EXT")
            n = utils.from_webdataset(dst, srcs, args.key, codec=args.codec, level=args.level)
        else:
            if len(srcs) != 1:
                ap.error("--from megatron takes one PREFIX (of PREFIX.bin and PREFIX.idx)")
            n = utils.from_megatron(dst, srcs[0], codec=args.codec, level=args.level)
    except KeyboardInterrupt:
        # undone by the conversion; end by the signal, as the tool does
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.raise_signal(signal.SIGINT)
        return 130
    except (ZrecordError, OSError) as e:
        sys.stderr.write(f"zrecord: import: {e}\n")
        return 1
    print(n)
    return 0
