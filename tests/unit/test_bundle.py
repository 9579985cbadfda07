"""Code bundles: the same files give the same digest, and unsafe archives are refused."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from cairn import codebundle as bundle
from cairn.errors import InvalidInput


def make_tree(root: Path, order: list[str]) -> Path:
    root.mkdir(parents=True)
    files = {
        "main.py": "print('hi')\n",
        "pkg/__init__.py": "",
        "pkg/model.py": "W = 1\n",
        "run.sh": "#!/bin/sh\necho run\n",
    }
    for name in order:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[name])
    (root / "run.sh").chmod(0o755)
    return root


def test_digest_ignores_mtimes_creation_order_and_caches(tmp_path: Path) -> None:
    a = make_tree(tmp_path / "a", ["main.py", "pkg/__init__.py", "pkg/model.py", "run.sh"])
    b = make_tree(tmp_path / "b", ["run.sh", "pkg/model.py", "main.py", "pkg/__init__.py"])
    for i, path in enumerate(sorted(b.rglob("*"))):
        os.utime(path, (1_000_000 + i * 7777, 1_000_000 + i * 7777))
    (b / "pkg" / "__pycache__").mkdir()
    (b / "pkg" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\x00cache")
    (b / ".git").mkdir()
    (b / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (b / ".venv" / "bin").mkdir(parents=True)
    (b / "stray.pyc").write_bytes(b"\x00")
    first, second = bundle.pack(a), bundle.pack(b)
    assert first.digest == second.digest
    assert first.data == second.data
    assert first.digest == hashlib.sha256(first.data).hexdigest()


def test_content_and_exec_bit_change_the_digest(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "a", ["main.py", "pkg/__init__.py", "pkg/model.py", "run.sh"])
    before = bundle.pack(root).digest
    (root / "run.sh").chmod(0o644)
    assert bundle.pack(root).digest != before
    (root / "run.sh").chmod(0o755)
    assert bundle.pack(root).digest == before
    (root / "main.py").write_text("print('changed')\n")
    assert bundle.pack(root).digest != before


def test_round_trip_keeps_files_modes_and_inner_links(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src", ["main.py", "pkg/__init__.py", "pkg/model.py", "run.sh"])
    (root / "pkg" / "alias.py").symlink_to("model.py")
    packed = bundle.pack(root)
    names = bundle.unpack(packed.data, tmp_path / "dest")
    dest = tmp_path / "dest"
    assert "pkg/model.py" in names
    assert (dest / "pkg" / "model.py").read_text() == "W = 1\n"
    assert (dest / "pkg" / "alias.py").is_symlink()
    assert (dest / "pkg" / "alias.py").read_text() == "W = 1\n"
    assert os.access(dest / "run.sh", os.X_OK)
    assert not os.access(dest / "main.py", os.X_OK)


def test_link_out_of_the_code_folder_is_refused_when_packing(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src", ["main.py", "pkg/__init__.py", "pkg/model.py", "run.sh"])
    (root / "secrets").symlink_to("../../etc")
    with pytest.raises(InvalidInput, match="leads outside"):
        bundle.pack(root)


def evil(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return gzip.compress(raw.getvalue(), mtime=0)


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (evil((entry("/etc/passwd"), b"x")), "absolute"),
        (evil((entry("../escape.txt"), b"x")), "outside"),
        (evil((entry("a/../../escape.txt"), b"x")), "outside"),
        (evil((entry("up", tarfile.SYMTYPE, "../.."), None)), "links outside"),
        (evil((entry("abs", tarfile.SYMTYPE, "/etc/passwd"), None)), "links outside"),
        (evil((entry("hard", tarfile.LNKTYPE, "/etc/passwd"), None)), "hard link"),
        (evil((entry("dev", tarfile.CHRTYPE), None)), "not a file"),
        (b"not a tarball at all", "not a code bundle"),
    ],
)
def test_unsafe_archives_are_refused_and_write_nothing_outside(
    tmp_path: Path, data: bytes, why: str
) -> None:
    dest = tmp_path / "box" / "dest"
    with pytest.raises(InvalidInput, match=why):
        bundle.unpack(data, dest)
    assert not (tmp_path / "box" / "escape.txt").exists()
    assert not (tmp_path / "escape.txt").exists()


def test_a_bomb_is_refused(tmp_path: Path) -> None:
    data = evil((entry("big.bin"), b"\x00" * 4096))
    with pytest.raises(InvalidInput, match="more than"):
        bundle.unpack(data, tmp_path / "dest", max_bytes=1024)


def test_missing_folder_is_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no such folder"):
        bundle.pack(tmp_path / "nope")
