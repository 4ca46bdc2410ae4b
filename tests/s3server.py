"""moto's S3 server on 127.0.0.1 for the tests that read a store from, or write a warehouse to, S3.

`start_moto` runs `python -m moto.server` (the `moto[server]` dev extra) on a free port and waits until it
accepts connections; `stop` always ends it. moto keeps objects in memory and, unless INITIAL_NO_AUTH_ACTION_COUNT
says otherwise, accepts any credentials. `aws_env` puts test credentials in the environment the standard way
(and turns off instance-metadata lookups), restoring what was there afterwards.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pyarrow.fs as pafs

KEY_ID, SECRET = "AKIAMOTOTESTKEY00001", "moto-test-secret"  # the no-auth server accepts any credentials
REGION = "us-east-1"
_AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED",
             "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_SESSION_TOKEN", "AWS_PROFILE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """A moto server process and its endpoint host:port (90 s to come up)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto server did not start in 90 s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def s3fs(endpoint: str, key: str = KEY_ID, secret: str = SECRET) -> pafs.S3FileSystem:
    """pyarrow's S3 file system on the server (buckets may be created through it)."""
    return pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key=key, secret_key=secret,
                             region=REGION, allow_bucket_creation=True)


def upload(endpoint: str, local_dir: str, bucket: str, prefix: str, key: str = KEY_ID, secret: str = SECRET) -> None:
    """Copy a local directory tree to s3://bucket/prefix (the bucket is created)."""
    s3 = s3fs(endpoint, key, secret)
    s3.create_dir(bucket)
    pafs.copy_files(local_dir, f"{bucket}/{prefix}", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=s3)


@contextlib.contextmanager
def aws_env(**extra: str) -> Iterator[None]:
    """The test credentials (plus `extra` variables) in the environment, every AWS_* variable named here restored
    afterwards; no endpoint, region or profile leaks in from the caller's environment."""
    keep = {k: os.environ.get(k) for k in (*_AWS_VARS, *extra)}
    for k in _AWS_VARS:
        os.environ.pop(k, None)
    os.environ.update({"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": REGION,
                       "AWS_EC2_METADATA_DISABLED": "true", **extra})
    try:
        yield
    finally:
        for k, v in keep.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
