"""SigV4 signing of S3 requests, for the test fixtures and the bench's probe only.

The daemon and the zrecord tool sign through libcurl (s3/request.h); this is the
smallest independent signer that lets a fixture create buckets, put a damaged
object and time plain range GETs. Standard library only (CI has no boto3).
"""

import datetime
import hashlib
import hmac
import urllib.parse

UNSIGNED = "UNSIGNED-PAYLOAD"


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def canonical_query(query):
    """A dict or a list of pairs as SigV4 wants it: sorted, percent-encoded."""
    pairs = sorted(query.items() if isinstance(query, dict) else query)
    return "&".join(f"{urllib.parse.quote(str(k), safe='-_.~')}="
                    f"{urllib.parse.quote(str(v), safe='-_.~')}" for k, v in pairs)


def sign(method, host, path, query, headers, access_key, secret_key, region="us-east-1",
         payload_hash=UNSIGNED, now=None):
    """Adds x-amz-date, x-amz-content-sha256 and Authorization to headers (a dict of
    lower-case names) for a request of `path` (already percent-encoded) and `query`
    (already canonical)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    headers["host"] = host
    headers["x-amz-date"] = amz_date
    headers["x-amz-content-sha256"] = payload_hash
    names = sorted(headers)
    canonical = "\n".join([
        method, path, query,
        "".join(f"{n}:{str(headers[n]).strip()}\n" for n in names),
        ";".join(names), payload_hash])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = _hmac(("AWS4" + secret_key).encode(), day)
    k = _hmac(_hmac(_hmac(k, region), "s3"), "aws4_request")
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={sig}")
    return headers
