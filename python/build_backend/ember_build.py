"""A PEP 517 / PEP 660 build backend for the ember package, standard
library only, so that ``pip install ./python`` needs nothing from PyPI.

It packs ember/*.py and ember/py.typed into a pure-Python wheel (or, editable, a wheel whose
.pth file points at this tree), and the tree into an sdist.  The name and
version come from pyproject.toml, read with a minimal parser (tomllib is
only in Python 3.11 and later).
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "ember"
TAG = "py3-none-any"


def _project():
    """name, version, description, requires-python of pyproject.toml."""
    fields = {}
    section = None
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*\[([^\]]+)\]", line)
            if m:
                section = m.group(1).strip()
                continue
            m = re.match(r'\s*([A-Za-z-]+)\s*=\s*"([^"]*)"', line)
            if m and section == "project":
                fields[m.group(1)] = m.group(2)
    return fields


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"],
             "Version: " + p["version"], "Summary: " + p["description"],
             "Requires-Python: " + p["requires-python"],
             "License: ISC"]
    readme = os.path.join(HERE, "README.md")
    text = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            text = f.read()
    return "\n".join(lines) + "\n\n" + text


def _dist_info():
    p = _project()
    return "%s-%s.dist-info" % (p["name"], p["version"])


def _wheel_name():
    p = _project()
    return "%s-%s-%s.whl" % (p["name"], p["version"], TAG)


def _sources():
    """(path in the wheel, bytes) of every module of the package, and its
    py.typed marker (PEP 561: type checkers read its hints)."""
    out = []
    pkg = os.path.join(HERE, PACKAGE)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") or name == "py.typed":
            with open(os.path.join(pkg, name), "rb") as f:
                out.append((PACKAGE + "/" + name, f.read()))
    return out


def _write_wheel(directory, files):
    """Write files (path, bytes) and the dist-info into a wheel."""
    info = _dist_info()
    files = list(files) + [
        (info + "/METADATA", _metadata().encode("utf-8")),
        (info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: ember_build\n"
                           "Root-Is-Purelib: true\nTag: %s\n" %
                           TAG).encode()),
        (info + "/top_level.txt", (PACKAGE + "\n").encode()),
    ]
    record = []
    name = _wheel_name()
    with zipfile.ZipFile(os.path.join(directory, name), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            z.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), data)
            digest = base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
        record.append(info + "/RECORD,,")
        z.writestr(zipfile.ZipInfo(info + "/RECORD", (1980, 1, 1, 0, 0, 0)),
                   "\n".join(record) + "\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    """A wheel of the package's modules."""
    return _write_wheel(wheel_directory, _sources())


def build_editable(wheel_directory, config_settings=None,
                   metadata_directory=None):
    """A wheel that puts this tree on sys.path (pip install -e)."""
    return _write_wheel(wheel_directory,
                        [(PACKAGE + "-editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    """A tarball of the package, its backend and its metadata."""
    p = _project()
    base = "%s-%s" % (p["name"], p["version"])
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md",
                    "build_backend/ember_build.py"] + \
                [path for path, _ in _sources()]:
            if os.path.exists(os.path.join(HERE, rel)):
                t.add(os.path.join(HERE, rel), base + "/" + rel)
        pkg_info = _metadata().encode("utf-8")
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(pkg_info)
        t.addfile(info, io.BytesIO(pkg_info))
    return name
