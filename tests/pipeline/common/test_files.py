"""Atomic writes and the output-path check (pipeline.common.files)."""

from __future__ import annotations

import os
import stat

import pytest

from pipeline.common.errors import UserError
from pipeline.common.files import TEMP_MARKER, atomic_write, atomic_write_text, check_output_path

VIDEO = (".mp4", ".gif")


def temp_files(directory):
    return [p.name for p in directory.iterdir() if TEMP_MARKER in p.name]


def test_atomic_write_replaces_with_plain_permissions(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    with atomic_write(path, "w") as handle:
        handle.write("new")
        assert path.read_text() == "old"  # nothing visible until the block ends
        assert handle.name.endswith(".json") and TEMP_MARKER in handle.name
    assert path.read_text() == "new"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
    assert temp_files(tmp_path) == []


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_a_failed_write_keeps_the_old_file_and_no_temp(tmp_path, error):
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"old")
    with pytest.raises(type(error)), atomic_write(path) as handle:
        handle.write(b"half")
        raise error
    assert path.read_bytes() == b"old"
    assert temp_files(tmp_path) == []


def test_atomic_write_text_reports_one_line(tmp_path):
    atomic_write_text(tmp_path / "a.json", "{}\n", "JSON")
    assert (tmp_path / "a.json").read_text() == "{}\n"
    with pytest.raises(UserError, match="cannot write JSON file .*missing"):
        atomic_write_text(tmp_path / "missing" / "a.json", "{}", "JSON")


def test_check_output_path(tmp_path):
    assert check_output_path(tmp_path / "new" / "v.mp4", VIDEO) == tmp_path / "new" / "v.mp4"
    assert (tmp_path / "new").is_dir() and list((tmp_path / "new").iterdir()) == []
    (tmp_path / "f").write_text("x")
    for bad, fragment in [
        (tmp_path / "f" / "v.mp4", "cannot write"),
        ("/proc/forbidden.mp4", "cannot write"),
        (tmp_path / "v.webm", "unsupported extension"),
        (tmp_path / "new.mp4", None),
    ]:
        if fragment is None:
            (tmp_path / "new.mp4").mkdir()
            fragment = "is a directory"
        with pytest.raises(UserError, match=fragment):
            check_output_path(bad, VIDEO)
