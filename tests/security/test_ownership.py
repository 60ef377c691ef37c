"""Who owns a store's files (issue 14, "suspected by reading"), as the users see it.

The service creates a store's files: they belong to the service user, whatever we
do (it cannot give them away without CAP_CHOWN), so they count against its quota,
not the creator's. Before, they were also created with the daemon's umask only:
the creator could not open its own store for writing again (EACCES on meta.zr
O_RDWR, so loaderx fell back to read-only), and what the group could do had
nothing to do with the directory it had chosen.

Now a file the store creates gets the directory's group, the group's and others'
read and write rights as the directory gives them, and the creator (the owner of
the directory) an ACL entry for read and write (daemon/store/newfile.h). Three
directories of the victim's own, each writable by the service user:

- private: 0700, an ACL entry for the service user: nobody else gets anything;
- group read: 2750 of group zrsec (and the service user's ACL entry): the
  attacker, a member, may read the store, not write it;
- group write: 2770 of group zrsec: the attacker may write it too.

In each the victim creates a store through the service, opens it again for
writing and appends; the attacker gets what the directory grants its group.
"""

import os
import stat

import pytest

from . import acl

CREATE = """
    import os
    import numpy as np
    from loaderx.dataset import DenseDataset
    ds = DenseDataset(os.environ["STORE"], dtype="<f4", item_shape=(4,), codec="raw")
    ds.append(np.arange(8, dtype="<f4").reshape(2, 4))
    ds.close()
    """

# Opens the store through the service as it may (loaderx asks for write access
# when meta.zr opens O_RDWR), reads it, appends a record if writable.
REOPEN = """
    import errno, os
    import numpy as np
    from loaderx.dataset import open_dataset
    from secframes import emit
    out = {}
    meta = os.path.join(os.environ["STORE"], "meta.zr")
    for name, flags in (("read", os.O_RDONLY), ("write", os.O_RDWR)):
        try:
            os.close(os.open(meta, flags))
            out["meta.zr " + name] = "ok"
        except OSError as e:
            out["meta.zr " + name] = errno.errorcode[e.errno]
    try:
        ds = open_dataset(os.environ["STORE"])
    except Exception as e:
        out["open"] = getattr(e, "name", None) or type(e).__name__
        emit(out)
        raise SystemExit(0)
    out["open"] = "ok"
    out["writable"] = ds.writable
    out["length"] = len(ds)
    if ds.writable:
        ds.append(np.full((1, 4), float(os.environ["MARK"]), dtype="<f4"))
        out["length after"] = len(ds)
    ds.close()
    emit(out)
    """

CASES = {
    # name: (mode, group is zrsec, the service needs an ACL entry, what the group gets)
    "private": (0o700, False, True, ""),
    "group read": (0o2750, True, True, "r"),
    "group write": (0o2770, True, False, "rw"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_creator_owns_its_store_the_group_what_the_directory_grants(
        users, service, secdir, run_as, case):
    mode, zrsec, svc_acl, group_gets = CASES[case]
    home = secdir.mkdir("victim", users.victim, 0o755)
    store = os.path.join(home, "store")
    os.mkdir(store)
    os.chown(store, users.victim.uid, users.group.gid if zrsec else users.victim.gid)
    os.chmod(store, mode)
    if svc_acl:
        acl.grant(store, users.svc.uid, "rwx")
    svc = service()
    r = run_as(users.victim, CREATE, env=svc.env(STORE=store))
    assert r.rc == 0, r

    # the creator opens its store for writing again, through the service
    v = run_as(users.victim, REOPEN, env=svc.env(STORE=store, MARK="1"))
    assert v.rc == 0, v
    got = v.json()
    assert got["meta.zr write"] == "ok", got     # before: EACCES
    assert got["writable"] is True and got["length after"] == 3, got

    # the files: the service's, the directory's group (or no group rights), the
    # creator's ACL entry, no execute, nobody else's write unless the group's
    for f in sorted(os.listdir(store)):
        path = os.path.join(store, f)
        st = os.stat(path)
        assert st.st_uid == users.svc.uid, (f, st.st_uid)
        ents = acl.entries(path)
        assert f"user:{users.victim.uid}:rw-" in ents, (f, ents)
        want_group = "group::" + acl.perm_text(acl.perm_bits(group_gets))
        assert want_group in ents, (f, ents)
        if zrsec:
            assert st.st_gid == users.group.gid, (f, st.st_gid)
        assert "other::---" in ents, (f, ents)
        assert not st.st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH), (f, oct(st.st_mode))

    # another member of the group: what the directory grants it
    a = run_as(users.attacker, REOPEN, env=svc.env(STORE=store, MARK="2"))
    assert a.rc == 0, a
    got = a.json()
    if "r" not in group_gets:
        assert got["open"] != "ok", got
        assert got["meta.zr read"] == "EACCES", got
    elif "w" not in group_gets:
        assert got["meta.zr write"] == "EACCES", got
        assert got["open"] == "ok" and got["writable"] is False and got["length"] == 3, got
    else:
        assert got["meta.zr write"] == "ok", got
        assert got["writable"] is True and got["length after"] == 4, got
