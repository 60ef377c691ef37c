"""Stores in object storage: an ``s3://bucket/prefix`` path, and the endpoint,
region and credentials the AWS tools would use, resolved here and handed to the
daemon with the open (docs/REMOTE.md, "Opening: who resolves what").

The rules are those of ``s3/creds.h`` in C (libzrc and the zrecord tool), checked
against the same files by the tests:

- endpoint: ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the profile's
  ``s3 = endpoint_url``, its ``endpoint_url``; else AWS's own;
- region: ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile's ``region``;
- credentials: ``AWS_ACCESS_KEY_ID`` + ``AWS_SECRET_ACCESS_KEY`` (+
  ``AWS_SESSION_TOKEN``); else the profile (``AWS_PROFILE``, else ``default``) in
  ``AWS_SHARED_CREDENTIALS_FILE`` (``~/.aws/credentials``), then in
  ``AWS_CONFIG_FILE`` (``~/.aws/config``, ``[profile NAME]``); else none;
- addressing: the profile's ``s3 = addressing_style``.

SSO, ``credential_process`` and the instance metadata service need an SDK:
``aws configure export-credentials --format env`` turns them into variables.
"""

import os

from ._errors import ZrecordFileNotFoundError, ZrecordValueError

SCHEME = "s3://"


def is_url(path):
    return isinstance(path, str) and path.startswith(SCHEME)


def _read_section(path, want):
    """{key: value} of section `want` of an INI file (nested ``s3 =`` keys as
    ``s3.key``), or None when the file or the section is missing."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return None
    out, inside, nested, found = {}, False, False, False
    for raw in lines:
        indented = raw[:1] in (" ", "\t")
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            end = line.find("]")
            if end < 0:
                continue
            inside = line[1:end].strip() == want
            found |= inside
            nested = False
            continue
        if not inside or "=" not in line:
            continue
        k, v = (x.strip() for x in line.split("=", 1))
        if indented and nested:
            out["s3." + k] = v
            continue
        nested = not v and k == "s3"
        out[k] = v
    return out if found else None


def resolve():
    """{"endpoint", "region", "addressing", "access_key", "secret_key",
    "session_token"}: what the daemon takes (empty strings left out)."""
    env = {k: v for k, v in os.environ.items() if v}
    profile = env.get("AWS_PROFILE")
    named = profile is not None
    profile = profile or "default"
    home = os.path.expanduser("~")
    cred_path = env.get("AWS_SHARED_CREDENTIALS_FILE", os.path.join(home, ".aws", "credentials"))
    conf_path = env.get("AWS_CONFIG_FILE", os.path.join(home, ".aws", "config"))
    cs = _read_section(cred_path, profile)
    fs = None
    if profile == "default":
        fs = _read_section(conf_path, "default")
    if fs is None:
        fs = _read_section(conf_path, f"profile {profile}")
    if named and cs is None and fs is None and not (
            env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY")):
        raise ZrecordFileNotFoundError(
            f"the profile {profile!r} (AWS_PROFILE) is in neither {cred_path} nor {conf_path}",
            name="ENOENT")
    cs, fs = cs or {}, fs or {}
    out = {}
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        out["access_key"] = env["AWS_ACCESS_KEY_ID"]
        out["secret_key"] = env["AWS_SECRET_ACCESS_KEY"]
        if env.get("AWS_SESSION_TOKEN"):
            out["session_token"] = env["AWS_SESSION_TOKEN"]
    else:
        for s in (cs, fs):
            if s.get("aws_access_key_id") and s.get("aws_secret_access_key"):
                out["access_key"] = s["aws_access_key_id"]
                out["secret_key"] = s["aws_secret_access_key"]
                if s.get("aws_session_token"):
                    out["session_token"] = s["aws_session_token"]
                break
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or fs.get("region")
    if region:
        out["region"] = region
    endpoint = (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
                or fs.get("s3.endpoint_url") or fs.get("endpoint_url"))
    if endpoint:
        out["endpoint"] = endpoint
    style = fs.get("s3.addressing_style", "").lower()
    if style in ("path", "virtual"):
        out["addressing"] = style
    return out


def remote_field(url):
    """The ``remote`` map of DATASET_OPEN / MSSET_OPEN for `url`."""
    if not is_url(url) or len(url) <= len(SCHEME):
        raise ZrecordValueError(f"{url!r} is not an s3:// URL", name="EINVAL")
    r = resolve()
    r["url"] = url.rstrip("/")
    return r
