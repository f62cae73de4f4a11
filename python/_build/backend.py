"""A PEP 517 build backend for relayout-loader with no build dependencies, so
`pip install ./python` works offline (pip needs nothing from an index to build
it). It builds a pure-Python wheel of relayout_loader.py and an sdist; the
version is relayout_loader.__version__, which a Go test keeps equal to the
CLI's. Metadata (dependencies, extras) is declared here and in pyproject.toml,
which a test keeps in agreement."""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "relayout_loader"
DIST = "relayout-loader"
MODULE = "relayout_loader.py"
REQUIRES = ["numpy>=1.21"]
EXTRAS = {"torch": ["torch>=1.12"], "s3": ["boto3>=1.26"], "azure": ["azure-storage-blob>=12.14"], "gcs": ["google-auth>=1.5", "requests>=2.20"], "fsspec": ["fsspec>=2022.11"]}


def version():
    with open(os.path.join(HERE, MODULE), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError(f"{MODULE} has no __version__")
    return m.group(1)


def metadata():
    lines = ["Metadata-Version: 2.1", f"Name: {DIST}", f"Version: {version()}",
             "Summary: Read relayout tensor shards (safetensors) with NumPy and PyTorch, in the relayout order contract",
             "License: Apache-2.0", "Requires-Python: >=3.9"]
    lines += [f"Requires-Dist: {r}" for r in REQUIRES]
    for extra, reqs in EXTRAS.items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    return "\n".join(lines) + "\n"


def _dist_info():
    return f"{NAME}-{version()}.dist-info"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


get_requires_for_build_editable = get_requires_for_build_wheel


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(metadata())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def _wheel(wheel_directory, files):
    name = f"{NAME}-{version()}-py3-none-any.whl"
    di = _dist_info()
    files = dict(files)
    files[f"{di}/METADATA"] = metadata().encode()
    files[f"{di}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: relayout _build/backend.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{di}/RECORD,,")
    files[f"{di}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))  # reproducible
            info.external_attr = 0o644 << 16
            z.writestr(info, files[path])
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open(os.path.join(HERE, MODULE), "rb") as f:
        return _wheel(wheel_directory, {MODULE: f.read()})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {f"{NAME}.pth": (HERE + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{version()}"
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ("pyproject.toml", MODULE, "_build/backend.py"):
            t.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        data = metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
