#!/usr/bin/env python3
"""The reference device's build command: real wheels for one combination.

    CRCR_BUILD_COMMAND="/path/to/python /path/to/crcr/deploy/reference_build.py
                        [--torch-source PYTORCH_CLONE] [--torch-version 2.13.0]"

crcr runs it on the worker that plans a run, with CRCR_OUTPUT_DIR, CRCR_PYTORCH_SHA and
CRCR_BACKEND_VERSION set. It writes two wheels into CRCR_OUTPUT_DIR:
1. torch: `pip download torch==VERSION --no-deps` from pip's configured index. Building
   PyTorch itself is out of scope on these machines; a team's real build runs PyTorch's
   own wheel build at CRCR_PYTORCH_SHA here instead.
2. the backend: the reference device packaged as its own distribution, `crcr_refdev`, at
   CRCR_BACKEND_VERSION, built against the PyTorch source at CRCR_PYTORCH_SHA: with
   --torch-source, that commit's `crcr/refdev_faults.yaml` (when it has one) is compiled
   in as the device's behaviour, the stand-in for a backend whose kernels change with the
   core it was built against. Same inputs, same bytes: the wheel is reproducible.
Standard library and pip only.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

DEVICE_SOURCE = Path(__file__).resolve().parents[1] / "engine" / "crcr_reuse" / "reference_device"
DISTRIBUTION = "crcr_refdev"
CORE_FAULTS = "crcr/refdev_faults.yaml"  # in the PyTorch source, at the built commit
# PEP 440, as wheel file names need it.
VERSION = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9.]+)?")
EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: a reproducible zip


class BuildError(Exception):
    pass


def required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise BuildError(f"{name} is not set (crcr sets it when it runs the build command)")
    return value


def download_torch(version: str, out: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", f"torch=={version}", "--no-deps",
               "--dest", str(out), "--quiet", "--disable-pip-version-check"]  # fmt: skip
    print(f"downloading torch {version}", flush=True)
    if subprocess.run(command, stdin=subprocess.DEVNULL).returncode != 0:
        raise BuildError(f"pip could not download torch=={version}")


def core_file(source: Path | None, sha: str) -> bytes | None:
    """The PyTorch source's device behaviour file at `sha`, if it has one."""
    if source is None:
        return None
    shown = subprocess.run(
        ["git", "-C", str(source), "show", f"{sha}:{CORE_FAULTS}"], capture_output=True
    )
    if shown.returncode == 0:
        return shown.stdout
    listed = subprocess.run(["git", "-C", str(source), "cat-file", "-e", f"{sha}^{{commit}}"])
    if listed.returncode != 0:
        raise BuildError(f"{source} has no commit {sha}")
    return None


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def backend_files(version: str, faults: bytes | None) -> dict[str, bytes]:
    """Every file of the backend wheel but RECORD, by name in the archive. Only what the
    build compiles in from the PyTorch source goes in, never the SHA itself: commits that
    change nothing the backend uses give the same wheel, and so the same environment."""
    files = {
        f"{DISTRIBUTION}/{path.relative_to(DEVICE_SOURCE).as_posix()}": path.read_bytes()
        for path in sorted(DEVICE_SOURCE.rglob("*"))
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix in (".py", ".txt", ".cpp")
    }
    if faults is not None:
        files[f"{DISTRIBUTION}/built_faults.yaml"] = faults
    info = f"{DISTRIBUTION}-{version}.dist-info"
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n"
        "Summary: crcr's reference privateuse1 device\n"
    ).encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: crcr reference_build\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n"
    )
    return files


def write_wheel(out: Path, version: str, files: dict[str, bytes]) -> Path:
    info = f"{DISTRIBUTION}-{version}.dist-info"
    record = "\n".join([*(record_line(n, d) for n, d in files.items()), f"{info}/RECORD,,"])
    wheel = out / f"{DISTRIBUTION}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in [*files.items(), (f"{info}/RECORD", record.encode() + b"\n")]:
            entry = zipfile.ZipInfo(name, EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    return wheel


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-source", type=Path, help="a PyTorch clone (git)")
    parser.add_argument("--torch-version", default="2.13.0")
    args = parser.parse_args(argv)
    try:
        out = Path(required("CRCR_OUTPUT_DIR"))
        sha = required("CRCR_PYTORCH_SHA")
        version = required("CRCR_BACKEND_VERSION")
        if not VERSION.fullmatch(version):
            raise BuildError(f"CRCR_BACKEND_VERSION {version!r} is not a PEP 440 version")
        download_torch(args.torch_version, out)
        print(f"building {DISTRIBUTION} {version} against PyTorch {sha}", flush=True)
        faults = core_file(args.torch_source, sha)
        wheel = write_wheel(out, version, backend_files(version, faults))
    except BuildError as error:
        print(f"reference build: {error}", file=sys.stderr)
        return 1
    print(f"wrote {wheel.name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
