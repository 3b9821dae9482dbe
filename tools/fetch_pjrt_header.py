"""Fetch the PJRT C API header from a pinned PyPI source distribution.

The header is never committed. It comes from the `pypjrt` sdist, which vendors
XLA's `xla/pjrt/c/pjrt_c_api.h` (PJRT C API 0.114). The archive is checked
against its sha256 before anything is extracted, and only the header is
written out.

Usage: python tools/fetch_pjrt_header.py OUT_INCLUDE_DIR
Creates OUT_INCLUDE_DIR/xla/pjrt/c/pjrt_c_api.h; does nothing when it exists.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "pypjrt"
VERSION = "0.1.1"
SHA256 = "e85e8fd382801726f9b8d1348deeebe5fb3aab35e95147c09d693cc701190dec"
MEMBER = f"{PACKAGE}-{VERSION}/vendor/xla/pjrt/c/pjrt_c_api.h"
RELATIVE = Path("xla/pjrt/c/pjrt_c_api.h")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(dest: Path) -> Path:
    # pip prepares the sdist's metadata with its own small build backend (hatchling),
    # which is why this one call keeps build isolation; torch is not involved.
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         "--dest", str(dest), f"{PACKAGE}=={VERSION}"],
        check=True,
    )
    matches = list(dest.glob(f"{PACKAGE}-{VERSION}.tar.gz"))
    if not matches:
        raise SystemExit(f"pip download produced no {PACKAGE}-{VERSION}.tar.gz in {dest}")
    return matches[0]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    target = out / RELATIVE
    if target.exists():
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        archive = download(Path(tmp))
        actual = sha256_of(archive)
        if actual != SHA256:
            raise SystemExit(f"{archive.name}: sha256 {actual} does not match the pin {SHA256}")
        with tarfile.open(archive) as tar:
            member = tar.getmember(MEMBER)
            data = tar.extractfile(member).read()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".h.partial")
    partial.write_bytes(data)
    partial.replace(target)
    print(f"PJRT C API header from {PACKAGE}=={VERSION} -> {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
