"""Container probe for ragserve: ``python probe.py /health`` or ``python probe.py /ready [timeout_s]``.

GETs the path on this container's own API (127.0.0.1:$RAGSERVE_PORT) and exits 0 on a 2xx answer, 1 on
anything else (an error status, a refused connection, a timeout). ``/health`` needs no key; every other path
(``/ready`` included) is sent with the first key of ``RAGSERVE_API_KEYS``, which is why Kubernetes runs this
as an exec probe instead of an ``httpGet`` probe: an ``httpGet`` header cannot come from a Secret.

Standard library only, so it costs one short-lived interpreter per probe and nothing in the image.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def probe(path: str, *, port: str, keys: str, timeout_s: float) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    key = next((k.strip() for k in keys.split(",") if k.strip()), None)
    if path != "/health" and key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            ok = 200 <= response.status < 300
            if not ok:
                print(f"{path}: HTTP {response.status}", file=sys.stderr)
            return 0 if ok else 1
    except urllib.error.HTTPError as exc:  # 4xx/5xx: print the body, it names the failing check
        print(f"{path}: HTTP {exc.code} {exc.read(500).decode(errors='replace')}", file=sys.stderr)
    except (OSError, ValueError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    path = argv[1] if len(argv) > 1 else "/health"
    timeout_s = float(argv[2]) if len(argv) > 2 else 4.0  # keep under the probe's own timeout
    return probe(path, port=os.environ.get("RAGSERVE_PORT", "8000"),
                 keys=os.environ.get("RAGSERVE_API_KEYS", ""), timeout_s=timeout_s)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
