"""The harness itself: the service runs as the service user on a socket of group
zrsec, and both client users reach it, by raw frames and through loaderx."""

import os
import stat


def test_service_runs_as_its_user_and_both_users_say_hello(users, service, run_as):
    svc = service()
    assert os.stat(f"/proc/{svc.pid}").st_uid == users.svc.uid
    st = os.stat(svc.socket)
    assert stat.S_ISSOCK(st.st_mode)
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o660, users.group.gid)
    for user in (users.victim, users.attacker):
        r = run_as(user, """
            import os
            from secframes import Raw, emit
            from loaderx import _conn
            raw = Raw(os.environ["ZRECORD_SOCKET"])
            c = _conn.Connection(autostart=False)
            emit({"uid": os.getuid(), "raw": raw.hello["kind"], "daemon": c.daemon,
                  "version": c.version})
            """, env=svc.env())
        assert r.rc == 0, r
        got = r.json()
        assert got["uid"] == user.uid
        assert got["raw"] == "ok" and got["version"] == 1
        assert got["daemon"].startswith("zrecordd")
