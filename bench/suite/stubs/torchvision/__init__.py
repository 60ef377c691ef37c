"""A stand-in for torchvision, used only by the benchmark suite when the real one
does not import (PyPI has no CPU wheel of it for this torch). mosaicml-streaming
imports two of its names at import time for its vision datasets, which the suite
never uses; anything else raises."""
__version__ = "0+bench-stub"
