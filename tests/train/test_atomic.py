"""dlrm.atomic: a replaced file holds the old text or the new one, and no temp file stays behind."""
import errno
import os
import subprocess

import pytest

from dlrm.atomic import write_text_atomically


def test_write_creates_then_replaces_without_leaving_a_temp_file(tmp_path):
    path = tmp_path / "latest"
    write_text_atomically(path, "step_1\n")
    write_text_atomically(str(path), "step_2 é\n")  # str or Path; UTF-8 whatever the locale
    assert path.read_bytes() == "step_2 é\n".encode()
    assert os.listdir(tmp_path) == ["latest"]


def test_failed_write_keeps_the_old_file_and_removes_the_temp_file(tmp_path):
    path = tmp_path / "report.json"
    write_text_atomically(path, "old")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomically(path, "new \ud800")  # a lone surrogate fails half way through the write
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["report.json"]


def test_full_disk_names_the_file_and_removes_the_temp_file(tmp_path):
    """A real full filesystem (a 64 KiB tmpfs): the OSError says ENOSPC and which file, the old text stays."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs the suite as root)")
    directory = tmp_path / "small"
    directory.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(directory)], check=True)
    try:
        path = directory / "meta.json"
        write_text_atomically(path, "old")
        with pytest.raises(OSError) as raised:
            write_text_atomically(path, "x" * (1 << 20))
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
        assert path.read_text() == "old" and os.listdir(directory) == ["meta.json"]
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)
