"""What conversions trust (issue 32, item 7): files another user planted.

A conversion into an existing store acts on the store's `append.undo` (it cuts
the store back to the lengths written there) and removes `.NAME.partial-*`
directories beside a new store's path that a dead conversion left
(docs/DATASETS.md, section 9). In a directory a group may write, another member
can plant either. The victim's conversion must act on neither: an undo file not
the victim's is refused (nothing cut, the victim told whose it is), and a
`.partial` directory or link not the victim's is left alone and never written in.
"""

import os

WRITE = """
    import os, sys
    import numpy as np
    from secframes import emit
    from loaderx import ZrecordError
    from loaderx.utils import from_numpy
    from loaderx.dataset import DenseDataset
    path, n = os.environ["STORE"], int(os.environ["N"])
    try:
        from_numpy(path, np.arange(n, dtype=np.int64) + int(os.environ.get("BASE", "0")))
        emit({"ok": True, "length": len(DenseDataset(path))})
    except ZrecordError as e:
        emit({"ok": False, "name": e.name, "message": str(e),
              "length": len(DenseDataset(path)) if os.path.exists(path) else None})
    """


def test_planted_undo_file_is_not_acted_on(users, service, secdir, run_as):
    shared = secdir.mkdir("shared", users.victim, 0o2775, group=users.group)
    store = os.path.join(shared, "s")
    own = service(user=users.victim)
    r = run_as(users.victim, WRITE, env=own.env(STORE=store, N="100"))
    assert r.json() == {"ok": True, "length": 100}, r
    os.chmod(store, 0o2775)     # the store's directory shared with the group, as its parent
    # the attacker claims an interrupted conversion left records past length 0
    r = run_as(users.attacker, f"""
        import os
        p = os.path.join({store!r}, "append.undo")
        with open(p, "w") as f:
            f.write("zrecord append undo 1\\npid 1 host elsewhere started 0\\nstore 0 .\\n")
        os.chmod(p, 0o644)
        """)
    assert r.rc == 0, r
    r = run_as(users.victim, WRITE, env=own.env(STORE=store, N="10", BASE="100"))
    res = r.json()
    assert not res["ok"] and res["name"] == "EPERM", res
    assert res["length"] == 100, res                    # nothing cut, nothing appended
    assert users.attacker.name in res["message"] and "append.undo" in res["message"], res
    # the victim removes it (as the message says), and the conversion goes through
    os.unlink(os.path.join(store, "append.undo"))
    r = run_as(users.victim, WRITE, env=own.env(STORE=store, N="10", BASE="100"))
    assert r.json() == {"ok": True, "length": 110}, r


def plant(users, secdir, run_as, name, a, b):
    """A directory of the victim's that group zrsec may write, and in it the
    attacker's .NAME.partial-A (a directory of its own holding a file) and
    .NAME.partial-B (a link to another directory of the victim's, holding a file
    `keep`): (the shared directory, the other one)."""
    shared = secdir.mkdir("shared", users.victim, 0o2775, group=users.group)
    other = secdir.mkdir("other", users.victim, 0o755)
    open(os.path.join(other, "keep"), "w").close()
    r = run_as(users.attacker, f"""
        import os
        d = os.path.join({shared!r}, ".{name}.partial-{a}")
        os.mkdir(d)
        open(os.path.join(d, "mine"), "w").close()
        os.symlink({other!r}, os.path.join({shared!r}, ".{name}.partial-{b}"))
        """)
    assert r.rc == 0, r
    return shared, other


def assert_left_alone(shared, other, name, a, b):
    assert os.path.exists(os.path.join(shared, f".{name}.partial-{a}", "mine"))
    assert os.path.islink(os.path.join(shared, f".{name}.partial-{b}"))
    assert os.listdir(other) == ["keep"]
    assert sorted(os.listdir(shared)) == [f".{name}.partial-{a}", f".{name}.partial-{b}", name]


def test_planted_partial_dirs_are_left_alone(users, service, secdir, run_as):
    shared, other = plant(users, secdir, run_as, "new", "aaaaaaaaaaaa", "bbbbbbbbbbbb")
    own = service(user=users.victim)
    r = run_as(users.victim, WRITE, env=own.env(STORE=os.path.join(shared, "new"), N="50"))
    assert r.json() == {"ok": True, "length": 50}, r
    assert_left_alone(shared, other, "new", "aaaaaaaaaaaa", "bbbbbbbbbbbb")


def test_planted_partial_dirs_are_left_alone_by_the_tool(users, service, secdir, run_as,
                                                          run_cmd_as):
    import numpy as np
    from .conftest import tool_binary
    shared, other = plant(users, secdir, run_as, "imp", "AAAAAA", "BBBBBB")
    npy = os.path.join(secdir.path, "a.npy")
    np.save(npy, np.arange(64, dtype=np.int64).reshape(16, 4))
    os.chmod(npy, 0o644)
    own = service(user=users.victim)
    t = run_cmd_as(users.victim, [tool_binary(), "import", npy, os.path.join(shared, "imp")],
                   env=own.env())
    assert t.rc == 0, t
    assert_left_alone(shared, other, "imp", "AAAAAA", "BBBBBB")
