"""lx157_plugin.py: a pytest plugin that gives loaderx 1.5.7's own test suite a
zrecordd (scripts/loaderx157-suite.sh runs `pytest -p lx157_plugin test_loaderx.py`).

The suite's file is run as published; this only starts one daemon for the session,
as python-client/tests/conftest.py does for the client's own tests (its
start_daemon and stop_daemon, $ZRECORDD the binary), points $ZRECORD_SOCKET at it,
and requires it to exit 0 on SIGTERM at the end.
"""
import importlib.util
import os
import shutil
import tempfile

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "zr_client_conftest", os.path.join(_HERE, "..", "..", "python-client", "tests", "conftest.py"))
_client = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_client)


@pytest.fixture(scope="session", autouse=True)
def zrecordd():
    d = tempfile.mkdtemp(prefix="loaderx157-suite-")
    proc, sock = _client.start_daemon(d)
    os.environ["ZRECORD_SOCKET"] = sock
    yield sock
    from loaderx import _conn
    if _conn._default is not None:
        _conn._default.close()
        _conn._default = None
    rc = _client.stop_daemon(proc)
    shutil.rmtree(d, ignore_errors=True)
    assert rc == 0, f"zrecordd exited with {rc} after SIGTERM"
